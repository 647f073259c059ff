"""Helpers the fusion notebooks share: showing source, counting peak memory, compiling for
timing."""

import mmap
import time

import pytest
import torch

from brrr.benchmarks import fusion
from brrr.benchmarks.compiling import assert_matches_eager, compile_for_timing, more_recompiles
from brrr.device import DEVICE, ON_GPU, synchronize
from brrr.kernels.pointwise import cos_cos, cos_cos_kernel
from brrr.memory import peak_memory, peak_of, settle_page_faults
from brrr_book.source import SourceBlock, show_source, source_of


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


def _faulting(pages: int):
    """A call that writes one byte into each page of a fresh anonymous mapping: ``pages`` page
    faults."""

    def call():
        region = mmap.mmap(-1, pages * mmap.PAGESIZE)
        for offset in range(0, len(region), mmap.PAGESIZE):
            region[offset] = 1
        region.close()

    return call


@pytest.mark.skipif(
    ON_GPU, reason="a GPU's caching allocator needs no settling: settle_page_faults returns 0"
)
def test_settling_stops_at_the_first_quiet_call():
    calls = []

    def faults_twice_then_settles():
        calls.append(1)
        if len(calls) <= 2:
            _faulting(1024)()  # 4 MiB of fresh pages, far above quiet_pages

    assert settle_page_faults(faults_twice_then_settles, max_calls=12) == 3 == len(calls)
    assert settle_page_faults(lambda: None, max_calls=12) == 1


@pytest.mark.skipif(
    ON_GPU, reason="a GPU's caching allocator needs no settling: settle_page_faults returns 0"
)
def test_settling_gives_up_after_max_calls():
    calls = []

    def always_faults():
        calls.append(1)
        _faulting(1024)()

    assert settle_page_faults(always_faults, max_calls=4) == 4 == len(calls)


def test_compile_for_timing_pays_the_compile_once():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()  # no compiled version of the lambda below is left from another test
    counter = CompileCounterWithBackend("inductor")
    x = torch.randn(1000, device=DEVICE)
    compiled = compile_for_timing(lambda t: t.sin() + 1, x, threads=1, backend=counter)
    assert counter.frame_count == 1  # compiled during compile_for_timing...
    torch.testing.assert_close(compiled(x), x.sin() + 1)
    torch.testing.assert_close(compiled(x + 1), (x + 1).sin() + 1)
    assert counter.frame_count == 1  # ...and never again for inputs of the same shape
    # compile_s is the compile, not a run: the first call took far longer than a call now (ratio,
    # one run).
    start = time.perf_counter()
    compiled(x)
    synchronize()
    assert compiled.compile_s > 10 * (time.perf_counter() - start), compiled


def test_more_recompiles_restores_the_limit():
    import torch._dynamo.config as config

    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    before = getattr(config, name)
    with more_recompiles(before + 100):
        assert getattr(config, name) == before + 100
    assert getattr(config, name) == before


def test_the_correctness_check_calls_the_compiled_function_at_the_timed_shape_only():
    # Notebook 10 checks compiled x.cos().cos() against eager before timing it
    # on x. Run on a slice, the compiled function would compile again for the
    # slice's shape; the timed call must be the version compiled for x.
    from torch._dynamo.testing import CompileCounter

    from brrr.benchmarks import fusion

    torch._dynamo.reset()
    counter = CompileCounter()
    x = torch.randn(5000, device=DEVICE)
    compiled = compile_for_timing(fusion.cos_cos_eager, x, threads=1, backend=counter)
    assert_matches_eager(compiled, fusion.cos_cos_eager, x, count=1000)
    compiled(x)  # the timed call
    assert counter.frame_count == 1
    with pytest.raises(AssertionError):  # and the check can fail
        assert_matches_eager(compiled, fusion.cos_eager, x, count=1000)


def test_every_page_divides_by_the_builds_copy_roof(monkeypatch):
    """One roof per build (issue 25): a page's slower copy is said and changes nothing; a faster one
    raises the ceiling, in the cache too, for every later page. Once each page kept the better of
    its own copy and the ceiling, and one build printed seven copy bandwidths."""
    from brrr import ceilings
    from brrr.ceilings import Ceilings

    cached = Ceilings(
        copy_bandwidth=20e9,
        matmul_peak={"float32": 1e11},
        vector_peak=5e10,
        dispatch_overhead=2e-6,
        threads=1,
        env={"date": "2026-11-25"},
    )
    raised = []
    monkeypatch.setattr(ceilings, "measure", lambda threads=None: cached)
    monkeypatch.setattr(
        ceilings, "raise_copy_ceiling", lambda found, rate: raised.append(rate) or found
    )
    monkeypatch.setattr(fusion, "copy_bandwidth", lambda n=None, threads=None: 12e9)
    roof, how = fusion.copy_roof(threads=1)
    assert roof == 20e9 and "12.0 GB/s" in how and not raised
    monkeypatch.setattr(fusion, "copy_bandwidth", lambda n=None, threads=None: 23e9)
    roof, how = fusion.copy_roof(threads=1)
    assert roof == 23e9 and raised == [23e9] and "raised" in how
