"""brrr.benchmarks.compute: the matmul target check and a real (small) matmul timing."""

import time

import torch

import pytest

from brrr_book import claims
from brrr.benchmarks.compute import THREADS, MatmulPoint, matmul_check, table_checks, time_matmul
from brrr.ceilings import Ceilings
from brrr.device import DEVICE, synchronize
from brrr.opclasses import ClassTable, OpClass
from brrr.timing import torch_threads


# torch's name for the H100 SXM: 989.5 TFLOP/s dense bf16 on its datasheet
H100 = "NVIDIA H100 80GB HBM3"


def _ceilings(bf16_peak, device=H100, vector_peak=50e12):
    return Ceilings(
        copy_bandwidth=3e12,
        matmul_peak={"bfloat16": bf16_peak, "float32": 50e12},
        vector_peak=vector_peak,
        dispatch_overhead=1e-6,
        threads=None,
        env={"device": device},
    )


def _square(n, seconds, dtype="bfloat16"):
    return MatmulPoint(n, n, n, dtype, seconds, 2 * n**3)


def _sweep(tflops_at_8192):
    """4096³ at 687 TFLOP/s; 8192³ at the given rate; a fast fp32 point that must be ignored."""
    return [
        _square(4096, 0.2e-3),
        _square(8192, 2 * 8192**3 / (tflops_at_8192 * 1e12)),
        _square(16384, 1e-6, "float32"),
    ]


def test_matmul_check_uses_the_largest_square_bf16_matmul():
    points = _sweep(785)
    passed = matmul_check(points, _ceilings(900e12))
    assert passed.passed and "8192³" in passed.name, passed
    assert (
        "87% of 900 TFLOP/s measured" in passed.message and "79% of 990 TFLOP/s" in passed.message
    )
    failed = matmul_check(points, _ceilings(1100e12))
    assert not failed.passed and "71% of 1.10 PFLOP/s measured" in failed.message, failed


def test_a_slow_matmul_path_fails_though_the_measured_peak_is_as_slow():
    """The peak times torch.mm too: a matmul without tensor cores makes both slow, 100% of each
    other."""
    points = _sweep(60)  # an H100's bf16 matmuls at 60 TFLOP/s: CUDA-core speed
    slow = matmul_check(points, _ceilings(60e12))
    assert "100% of 60.0 TFLOP/s measured" in slow.message  # the tautology alone would pass...
    assert not slow.passed and "6% of 990 TFLOP/s NVIDIA H100 SXM datasheet" in slow.message, (
        slow
    )  # ...not this
    # A GPU without a datasheet here: the floor is the measured non-matmul peak, which no torch.mm
    # timed.
    unknown = matmul_check(points, _ceilings(60e12, device="NVIDIA Made-Up GPU", vector_peak=40e12))
    assert not unknown.passed and "1.5x the measured non-matmul peak" in unknown.message, unknown
    fast = matmul_check(
        _sweep(500), _ceilings(550e12, device="NVIDIA Made-Up GPU", vector_peak=40e12)
    )
    assert fast.passed and "12.5x the measured non-matmul peak" in fast.message, fast


def _hand_timed_mm(n: int, calls: int = 20) -> float:
    """Fastest of ``calls`` timings of an n×n @ n×n ``torch.mm`` by perf_counter: a second
    opinion."""
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


def _table(contraction_flops_pct: float, contraction_time_pct: float) -> ClassTable:
    """A hand-built table: the rest of the FLOPs and time split between normalization and
    element-wise."""
    rest_flops, rest_time = 100 - contraction_flops_pct, 100 - contraction_time_pct
    return ClassTable(
        flops={
            OpClass.CONTRACTION: contraction_flops_pct,
            OpClass.NORMALIZATION: rest_flops / 2,
            OpClass.ELEMENTWISE: rest_flops / 2,
            OpClass.OTHER: 0.0,
        },
        seconds={
            OpClass.CONTRACTION: contraction_time_pct,
            OpClass.NORMALIZATION: rest_time / 2,
            OpClass.ELEMENTWISE: rest_time / 2,
            OpClass.OTHER: 0.0,
        },
        clock="CPU",
    )


FLOPS = "contraction share of FLOPs"
TIME = "non-contraction ops take far more of the runtime than of the FLOPs"

# (contractions' % of FLOPs, % of runtime, the checks that must fail)
TABLES = [
    (99.80, 61.0, []),  # the essay's table: the rest take 195x their FLOP share
    (99.7, 98.0, [TIME]),  # less runtime than FLOPs, but the rest only 6.7x: not "far more"
    (99.0, 95.0, [TIME]),  # 5x
    (99.0, 89.0, []),  # 11x
    (97.0, 50.0, []),  # the ledger asks for 95% of the FLOPs, not the essay's 99.8%
    (94.0, 10.0, [FLOPS]),  # the rest take the time, but contractions did too little of the work
    (90.0, 95.0, [FLOPS, TIME]),
]


@pytest.mark.parametrize("flops_pct, time_pct, failing", TABLES)
def test_table_checks_are_the_ledgers_rule(flops_pct, time_pct, failing):
    checks = table_checks(_table(flops_pct, time_pct))
    assert [check.name for check in checks] == [FLOPS, TIME]
    assert [check.name for check in checks if not check.passed] == failing, checks
    verdict = claims.judge_contractions(flops_pct / 100, time_pct / 100)
    # The benchmark and the ledger agree; the ledger also asks a fifth of the runtime for the rest.
    assert verdict.held == (not failing and 100 - time_pct >= 20), verdict


def test_on_a_gpu_the_matmul_target_uses_a_peak_measured_just_before_the_sweep(monkeypatch):
    """The cached peak (900 TFLOP/s, from another moment) is replaced by one measured now (700),
    before the sweep runs; the 8192³ point at 620 TFLOP/s passes against the fresh peak (89%), not
    the stale one (69%)."""
    from brrr import ceilings as ceilings_module
    from brrr.benchmarks import compute

    events = []

    def peak_now(name, *, threads=None):
        events.append(("peak", name))
        return {"bfloat16": 700e12, "float32": 50e12}[name], 8192

    def sweep(*args, **kwargs):
        events.append(("sweep",))
        return _sweep(620)

    monkeypatch.setattr(compute, "ON_GPU", True)
    monkeypatch.setattr(ceilings_module, "measure_best_matmul_peak", peak_now)
    monkeypatch.setattr(compute, "square_sweep", sweep)
    monkeypatch.setattr(compute, "bert_table", lambda: None)
    monkeypatch.setattr(compute, "table_checks", lambda table: [])
    cached = _ceilings(900e12)
    used, points, _, checks = compute.run(cached)
    assert events == [("peak", "bfloat16"), ("peak", "float32"), ("sweep",)]
    assert (
        used.matmul_peak == {"bfloat16": 700e12, "float32": 50e12}
        and used.matmul_n["bfloat16"] == 8192
    )
    assert cached.matmul_peak["bfloat16"] == 900e12  # the cached ceilings are left as they were
    assert checks[0].passed, checks[0]
    assert not matmul_check(points, cached).passed  # the stale peak would have failed it


def test_on_a_cpu_the_cached_ceilings_are_kept(monkeypatch):
    from brrr import ceilings as ceilings_module
    from brrr.benchmarks import compute

    monkeypatch.setattr(compute, "ON_GPU", False)
    monkeypatch.setattr(
        ceilings_module, "measure_matmul_peak", lambda *a, **k: pytest.fail("measured on a CPU")
    )
    cached = _ceilings(900e12)
    assert compute.matmul_peaks_now(cached) is cached


def test_a_gpu_without_bf16_runs_the_layer_and_the_matmul_target_in_fp16(monkeypatch):
    """A T4 (sm_75): fp16 tensor cores, no bf16."""
    from brrr.benchmarks import compute

    monkeypatch.setattr(compute, "ON_GPU", True)
    monkeypatch.setattr(compute, "half_precision_dtype", lambda: torch.float16)
    assert compute.EncoderConfig.for_device().dtype == "float16"
    monkeypatch.setattr(compute, "sweep_dtypes", lambda: ["float32", "float16"])
    monkeypatch.setattr(compute, "matmul_peaks_now", lambda ceilings: ceilings)
    monkeypatch.setattr(
        compute, "square_sweep", lambda: [_square(8192, 2 * 8192**3 / 60e12, "float16")]
    )
    monkeypatch.setattr(compute, "bert_table", lambda: None)
    monkeypatch.setattr(compute, "table_checks", lambda table: [])
    t4 = Ceilings(
        copy_bandwidth=300e9,
        matmul_peak={"float32": 8e12, "float16": 65e12},
        vector_peak=8e12,
        dispatch_overhead=5e-6,
        threads=None,
        env={"device": "Tesla T4"},
    )
    _, _, _, checks = compute.run(t4)
    assert len(checks) == 1 and "float16" in checks[0].name, checks


def test_the_sweep_is_described_as_it_moved_not_as_the_prose_expects():
    """Notebook 20 said small matmuls fall off the roof while this CPU's bfloat16 ran fastest at n =
    128."""
    from brrr.ceilings import Ceilings
    from brrr.benchmarks.compute import MatmulPoint
    from brrr_book.pages.matmul_throughput import above_peak_at, sweep_shape

    ceilings = Ceilings(
        copy_bandwidth=1e10,
        matmul_peak={"float32": 100e9, "bfloat16": 3e9},
        vector_peak=5e10,
        dispatch_overhead=2e-6,
        threads=1,
        matmul_n={"float32": 1536, "bfloat16": 128},
    )

    def point(dtype, n, rate):
        return MatmulPoint(n, n, n, dtype, 2 * n**3 / rate, 2 * n**3)

    points = [
        point("float32", 64, 70e9),
        point("float32", 512, 98e9),
        point("float32", 1536, 97e9),
        point("bfloat16", 64, 3e9),
        point("bfloat16", 512, 1.3e9),
    ]
    float32, bfloat16 = sweep_shape(points, ceilings)
    assert float32.startswith("float32: rose from n=64 (70% of the peak) to its best at n=512")
    assert "held within 10%" in float32
    assert bfloat16 == (
        "bfloat16: fastest at the smallest size, n=64 (100% of the peak), then fell to n=512 (43% "
        "of the peak)"
    )
    assert "this same size, 128" in above_peak_at(ceilings, "bfloat16", 128)
    assert "one size, 1536, and this one, 512" in above_peak_at(ceilings, "float32", 512)
