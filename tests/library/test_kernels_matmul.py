"""The tiled matmul of the compute chapter: correct at odd shapes, and it moves exactly what its
tiles imply."""

import pytest
import torch

from brrr import counting, traffic
from brrr.benchmarks import tiling
from brrr.kernels.matmul import matmul_reference, tile_for, tiled_matmul
from brrr.device import DEVICE, ON_GPU
from brrr.roofline import Roof

counted_here = pytest.mark.skipif(
    ON_GPU, reason="traffic is counted in Triton's interpreter; here kernels compile"
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (100, 50, 70), (65, 129, 33)])
def test_odd_shapes_are_correct_and_fully_written(m, k, n, dtype):
    a, b = torch.randn(m, k, device=DEVICE).to(dtype), torch.randn(k, n, device=DEVICE).to(dtype)
    out = torch.full((m, n), float("nan"), dtype=dtype, device=DEVICE)
    tiled_matmul(a, b, out, tile_for(dtype, 32))
    tolerance = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(out, matmul_reference(a, b), **tolerance)


@counted_here
@pytest.mark.parametrize("block", [16, 32, 64])
def test_counted_bytes_are_the_rule_per_tensor(block):
    m, n, k = 64, 48, 80  # neither side a multiple of every tile
    a, b, out = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
    with traffic.count({"a": a, "b": b, "out": out}) as seen:
        tiled_matmul(a, b, out, tile_for(a.dtype, block))
    rule = counting.tiled_matmul_bytes(m, n, k, block, block, 4)
    assert seen.loaded_bytes == rule["a"] + rule["b"]
    assert seen.stored_bytes == rule["out"]
    assert (
        seen.loaded_bytes + seen.stored_bytes == counting.tiled_matmul(m, n, k, block, block).bytes
    )


def test_one_tile_as_large_as_the_output_is_the_minimum():
    assert (
        counting.tiled_matmul(256, 256, 256, 256, 256).bytes == counting.matmul(256, 256, 256).bytes
    )
    assert counting.tiled_matmul(256, 256, 256, 32, 32).bytes > counting.matmul(256, 256, 256).bytes


def test_intensity_tends_to_the_limit_as_the_matrices_grow():
    limit = counting.tiled_matmul_intensity_limit(64, 64, 2)
    assert limit == pytest.approx(32)  # B / s
    small, large = (
        counting.tiled_matmul(n, n, n, 64, 64, torch.float16).intensity for n in (256, 16384)
    )
    assert small < large < limit and large == pytest.approx(limit, rel=0.01)


@counted_here
def test_count_tilings_counts_the_real_kernel():
    counted = tiling.count_tilings(64, (32, 64))
    assert [t.block for t in counted] == [32, 64]
    assert all(t.counted_bytes == t.rule_bytes for t in counted)
    assert counted[0].intensity < counted[1].intensity


def test_a_kernel_faster_than_dram_is_credited_to_the_l2_cache():
    t = tiling.Tiling(block=64, n=4096, dtype="bfloat16", rule_bytes=10**9, seconds=1e-4)
    # 1e-4 s at 1 TB/s carries 1e8 bytes of the 1e9: at least 90% came from L2.
    assert tiling.from_l2_at_least(t, 1e12) == pytest.approx(0.9)
    slow = tiling.Tiling(block=64, n=4096, dtype="bfloat16", rule_bytes=10**9, seconds=1.0)
    assert tiling.from_l2_at_least(slow, 1e12) == 0.0


def test_a_faster_reading_raises_the_roof_and_says_so():
    roof = Roof(peak_flops=1e9, bandwidth=1e9, label="fp32")
    same, why = tiling.roof_at_least(roof, 0.9e9)
    assert same == roof and why == ""
    raised, why = tiling.roof_at_least(roof, 1.5e9)
    assert raised.peak_flops == 1.5e9 and raised.bandwidth == roof.bandwidth and "raised" in why


def test_pipeline_stages_fit_the_shared_memory_of_a_t4(monkeypatch):
    from brrr import device

    stage = 2 * 128 * 64 * 2  # a 128 × 64 block of a and a 64 × 128 block of b, float16: 32 KiB
    monkeypatch.setattr(device, "shared_memory_per_program", lambda: 64 * 1024)  # a T4
    assert device.pipeline_stages(stage) == 2
    monkeypatch.setattr(device, "shared_memory_per_program", lambda: 227 * 1024)  # an H100
    assert device.pipeline_stages(stage) == 3
    monkeypatch.setattr(device, "shared_memory_per_program", lambda: 16 * 1024)
    assert device.pipeline_stages(stage) == 1  # never 0: Triton then reports the shortfall itself
