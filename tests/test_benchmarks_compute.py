"""brrr.benchmarks.compute: the matmul target check and a real (small) matmul timing."""

import pytest

from brrr.benchmarks.compute import MatmulPoint, matmul_check, time_matmul
from brrr.ceilings import Ceilings


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


def test_time_matmul_counts_2mnk():
    point = time_matmul(64, 32, 16, "float32", budget_s=0.01)
    assert point.flops == 2 * 64 * 32 * 16
    assert point.seconds > 0 and point.rate == pytest.approx(point.flops / point.seconds)
