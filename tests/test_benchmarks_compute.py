"""brrr.benchmarks.compute: the matmul target check and a real (small) matmul timing."""

import time

import torch

from brrr.benchmarks.compute import THREADS, MatmulPoint, matmul_check, time_matmul
from brrr.ceilings import Ceilings
from brrr.device import DEVICE, synchronize
from brrr.timing import torch_threads


def _ceilings(bf16_peak):
    return Ceilings(copy_bandwidth=1e12, matmul_peak={"bfloat16": bf16_peak, "float32": 1e12}, vector_peak=1e11,
                    dispatch_overhead=1e-6, threads=None, env={"device": "test"})


def _square(n, seconds, dtype="bfloat16"):
    return MatmulPoint(n, n, n, dtype, seconds, 2 * n**3)


def test_matmul_check_uses_the_largest_square_bf16_matmul():
    # 4096³ in 0.2 ms = 687 TFLOP/s; 8192³ in 1.4 ms = 785 TFLOP/s; a fast fp32 point must be ignored
    points = [_square(4096, 0.2e-3), _square(8192, 1.4e-3), _square(16384, 1e-6, "float32")]
    passed = matmul_check(points, _ceilings(900e12))
    assert passed.passed and "8192³" in passed.name and "87%" in passed.message
    failed = matmul_check(points, _ceilings(1100e12))
    assert not failed.passed and "71%" in failed.message


def _hand_timed_mm(n: int, calls: int = 20) -> float:
    """Fastest of ``calls`` timings of an n×n @ n×n ``torch.mm`` by perf_counter: a second opinion."""
    a, b = torch.randn(n, n, device=DEVICE), torch.randn(n, n, device=DEVICE)
    with torch_threads(THREADS):
        torch.mm(a, b)
        times = []
        for _ in range(calls):
            synchronize()
            start = time.perf_counter()
            torch.mm(a, b)
            synchronize()
            times.append(time.perf_counter() - start)
    return min(times)


def test_time_matmul_counts_2mnk_and_times_the_shape_it_names():
    assert time_matmul(64, 32, 16, "float32", budget_s=0.01).flops == 2 * 64 * 32 * 16
    small = time_matmul(64, 64, 64, "float32", budget_s=0.02)
    large = time_matmul(256, 256, 256, "float32", budget_s=0.1)
    # 64x the FLOPs: a timing that ignored the shape, or timed something else, would not see it.
    assert large.seconds > 4 * small.seconds, (small, large)
    # The median agrees with a hand timing of the same call in this run (min of 20: the median is at
    # least that, less some clock jitter; a stall on a shared machine gets 3x room).
    hand = _hand_timed_mm(256)
    assert 0.7 * hand < large.seconds < 3 * hand, (large.seconds, hand)
