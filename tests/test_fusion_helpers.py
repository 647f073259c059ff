"""Helpers the fusion notebooks share: showing source, counting peak memory, compiling for timing."""

import pytest
import torch

from brrr.benchmarks.compiling import compile_for_timing, more_recompiles
from brrr.device import DEVICE
from brrr.kernels.pointwise import cos_cos, cos_cos_kernel
from brrr.memory import peak_memory, peak_of, settle_page_faults
from brrr.source import SourceBlock, show_source, source_of


def test_kernel_source_renders_as_a_python_block():
    block = show_source(cos_cos_kernel, cos_cos)
    text = block._repr_markdown_()
    assert text.startswith("**from brrr.kernels.pointwise**")
    assert "```python\n@triton.jit\ndef cos_cos_kernel(" in text
    assert "def cos_cos(x" in text and text.rstrip().endswith("```")


def test_fence_grows_when_the_code_holds_one():
    assert SourceBlock('s = """```"""\n').markdown().startswith("````python")


def test_source_of_refuses_builtins():
    with pytest.raises(TypeError, match="cannot find the source"):
        source_of(len)


def test_peak_of_a_running_sum():
    assert peak_of([10, 5, -10, 20, -25]) == 25
    assert peak_of([-8, 4]) == 0
    assert peak_of([]) == 0


def test_peak_memory_sees_live_tensors_not_sequential_ones():
    size = 2**20  # 4 MiB of fp32

    # On the device peak_memory measures: a GPU counts its own allocator, not the CPU's.
    def two_alive():
        a = torch.empty(size, device=DEVICE)
        b = torch.empty(size, device=DEVICE)
        return a, b

    def one_at_a_time():
        for _ in range(2):
            torch.empty(size, device=DEVICE)

    assert peak_memory(two_alive) >= 2 * 4 * size
    assert 4 * size <= peak_memory(one_at_a_time) < 2 * 4 * size


def test_settling_returns_within_bounds():
    calls = settle_page_faults(lambda: torch.ones(2**20), max_calls=5)
    assert 0 <= calls <= 5


def test_compile_for_timing_pays_the_compile_once():
    x = torch.randn(1000, device=DEVICE)
    compiled = compile_for_timing(lambda t: t.sin() + 1, x, threads=1)
    assert compiled.compile_s > 0
    torch.testing.assert_close(compiled(x), x.sin() + 1)


def test_more_recompiles_restores_the_limit():
    import torch._dynamo.config as config

    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    before = getattr(config, name)
    with more_recompiles(before + 100):
        assert getattr(config, name) == before + 100
    assert getattr(config, name) == before
