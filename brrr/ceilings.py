"""This machine's ceilings, measured: the roofs of its roofline.

Four numbers, each measured on the machine the code runs on, never looked up:

copy bandwidth
    Bytes per second moved (read + write) by the fastest of several ways to copy
    a buffer far larger than the last-level cache (:data:`COPY_WAYS`:
    ``dst.copy_(src)``, ``torch.clone`` and a compiled elementwise copy, the kind
    of kernel Inductor writes). The memory roof.
matmul peak, per dtype
    FLOP/s of a large square matmul (2·n³ FLOPs). fp32 and, where the GPU has
    them, tf32, bf16 and fp16. On a CPU: fp32 and bf16. The compute roof for
    contractions (tensor cores on a GPU).
vector peak
    FLOP/s of non-matmul fp32 arithmetic, the faster of two ways: compiled
    multiply-adds on many independent accumulators per element, so the units are
    kept busy (throughput), not waiting on the previous result (latency), and
    aten's own add on tensors in cache. The compute roof for everything else.
dispatch overhead
    Seconds of host time per eager op on a one-element tensor. The overhead floor.

``measure()`` caches the result per user (see :mod:`brrr.cache`), keyed by device,
torch version, thread count and, on a CPU, the instruction set torch dispatches to
(``ATEN_CPU_CAPABILITY``), and stamps it with device, versions and date::

    python -m brrr.ceilings            # print, measuring only if not cached
    python -m brrr.ceilings --refresh  # measure again
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from brrr import cache, reference, units
from brrr.device import DEVICE, ON_GPU, device_name, far_above_cache, per_device, synchronize
from brrr.stamp import environment, format_stamp
from brrr.roofline import Roof  # noqa: F401  (re-exported: brrr.ceilings.Roof)
from brrr.timing import bench, bench_together, torch_threads

# Why a kernel can stream faster than the copy roof, for the line that shows it (units.fraction_of's
# above). The roof is the fastest of COPY_WAYS, yet on a CPU an op that is no copy can still stream
# faster. Measured on our 2-core CI machine, one thread, 128 MiB: copy_ 19 GB/s, a + b 22-23 (into a
# fresh or an existing output alike), an in-place x.mul_ 40, counting what each reads and writes
# once; another day x.clone() and compiled kernels ran at 25-26. A CPU reads each destination line
# before it writes it (write-allocate), traffic no byte count here includes, and ops that write less
# per byte read, or write in place, pay less.
ABOVE_COPY = per_device(
    cpu="a CPU reads each line it writes first (write-allocate), traffic the counted bytes leave "
    "out, and an op that reads more than it writes, or writes in place, pays less of it than any "
    "copy; the copy roof is also a measurement, with its noise",
    gpu="the copy roof is a measurement, with its noise",
)

# 2: the vector peak is a throughput measurement (independent accumulators)
# 3: the matmul size per dtype is recorded (a CPU times slow dtypes smaller)
# 4: GPU: the peak is the best of several shapes after the clocks settle, every reading kept
# 5: the copy bandwidth is the best of several ways to copy (COPY_WAYS), each way's reading kept
# 6: the vector peak is the better of compiled multiply-adds and aten's add (measure_vector_peak)
FORMAT_VERSION = 6

_DTYPES = {
    "float32": torch.float32,
    "tf32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


@dataclass(frozen=True)
class Ceilings:
    copy_bandwidth: float  # B/s
    matmul_peak: dict[str, float]  # dtype name -> FLOP/s
    vector_peak: float  # FLOP/s, fp32, no tensor cores
    dispatch_overhead: float  # s per eager op
    threads: int | None  # torch threads during measurement (None: default)
    env: dict[str, str] = field(default_factory=dict)
    matmul_n: dict[str, int] = field(
        default_factory=dict
    )  # dtype name -> n of the n×n matmul timed
    matmul_shape: dict[str, str] = field(
        default_factory=dict
    )  # GPU: dtype name -> "MxNxK" of the best shape
    matmul_spread: dict[str, dict[str, list[float]]] = field(
        default_factory=dict
    )  # GPU: every shape's readings
    # the way to copy (COPY_WAYS) that set copy_bandwidth; format 4 had only it
    copy_way: str = "dst.copy_(src)"
    copy_rates: dict[str, float] = field(default_factory=dict)  # B/s: each way's best reading

    @property
    def stamp(self) -> str:
        return format_stamp(self.env)

    def setting(self, dtype: str | torch.dtype = "float32") -> str:
        """'float32, 1 thread(s)': what a quoted peak was measured with, since pages quote several.
        On a GPU the host's thread count has nothing to do with the peak: the dtype alone."""
        if self.env.get("device_type") == "cuda":
            return dtype_name(dtype)
        return f"{dtype_name(dtype)}, {self.threads or torch.get_num_threads()} thread(s)"

    def matmul(self, dtype: str | torch.dtype = "float32") -> float:
        name = dtype_name(dtype)
        if name not in self.matmul_peak:
            raise KeyError(
                f"no matmul peak measured for {name} on {self.env.get('device')}; have "
                f"{sorted(self.matmul_peak)}"
            )
        return self.matmul_peak[name]

    def roof(self, kind: str = "matmul", dtype: str | torch.dtype = "float32") -> Roof:
        """The roofline for matmuls of ``dtype`` (``kind='matmul'``) or for other arithmetic
        (``'vector'``)."""
        if kind == "matmul":
            return Roof(
                self.matmul(dtype),
                self.copy_bandwidth,
                self.dispatch_overhead,
                f"{dtype_name(dtype)} matmul",
                overhead_adds=self.overhead_adds,
            )
        if kind == "vector":
            return Roof(
                self.vector_peak,
                self.copy_bandwidth,
                self.dispatch_overhead,
                "fp32 non-matmul",
                overhead_adds=self.overhead_adds,
            )
        raise ValueError(f"kind must be 'matmul' or 'vector', not {kind!r}")

    @property
    def overhead_adds(self) -> bool:
        """On a CPU the dispatch overhead and the kernel run on one thread, one after the other."""
        return self.env.get("device_type", "cpu") != "cuda"

    def summary(self) -> str:
        lines = [f"Ceilings of {self.env.get('device', '?')}:"]
        lines.append(
            f"  copy bandwidth      {units.bandwidth(self.copy_bandwidth)} "
            f"({copy_setup(self.threads, far_above_cache(4), self.copy_way)})"
        )
        if len(self.copy_rates) > 1:
            ways = ", ".join(
                f"{way} {units.bandwidth(rate)}" for way, rate in self.copy_rates.items()
            )
            lines.append(f"    best of {ways}")
        for name, peak in self.matmul_peak.items():
            size = f" (n={self.matmul_n[name]})" if name in self.matmul_n else ""
            if name in self.matmul_shape:
                low = min(
                    min(readings)
                    for readings in self.matmul_spread.get(name, {}).values() or [[peak]]
                )
                size = f" ({self.matmul_shape[name]}; all shapes {units.flops(low)} to it)"
            lines.append(f"  matmul peak {name:<8} {units.flops(peak)}{size}")
        lines.append(f"  non-matmul peak     {units.flops(self.vector_peak)} (fp32)")
        lines.append(f"  dispatch overhead   {units.seconds(self.dispatch_overhead)} per eager op")
        lines.append(f"  {self.stamp}")
        return "\n".join(lines)

    def best_with(self, other: "Ceilings") -> "Ceilings":
        """Each roof at the better of the two measurements: load from other work only lowers a rate
        (and raises the per-op overhead), so the better reading is nearer the machine's own. Dated
        by the later one; the matmul size is the one of the peak kept, the copy's way the one of the
        copy kept, and each way's copy reading the better of the two."""
        if other.threads != self.threads:
            raise ValueError(
                f"ceilings of {self.threads} and {other.threads} threads do not combine"
            )
        matmul_peak, matmul_n, shape = (
            dict(self.matmul_peak),
            dict(self.matmul_n),
            dict(self.matmul_shape),
        )
        for name, peak in other.matmul_peak.items():
            if peak > matmul_peak.get(name, 0.0):
                matmul_peak[name] = peak
                if name in other.matmul_n:
                    matmul_n[name] = other.matmul_n[name]
                if name in other.matmul_shape:
                    shape[name] = other.matmul_shape[name]
        spread = {
            name: {label: list(rates) for label, rates in shapes.items()}
            for name, shapes in self.matmul_spread.items()
        }
        for (
            name,
            shapes,
        ) in other.matmul_spread.items():  # every reading of both, the spread of both
            for label, rates in shapes.items():
                spread.setdefault(name, {}).setdefault(label, []).extend(rates)
        copy_rates = dict(self.copy_rates)
        for way, rate in other.copy_rates.items():
            copy_rates[way] = max(rate, copy_rates.get(way, 0.0))
        faster = other if other.copy_bandwidth > self.copy_bandwidth else self
        return dataclasses.replace(
            self,
            copy_bandwidth=faster.copy_bandwidth,
            copy_way=faster.copy_way,
            copy_rates=copy_rates,
            matmul_peak=matmul_peak,
            matmul_n=matmul_n,
            matmul_shape=shape,
            matmul_spread=spread,
            vector_peak=max(self.vector_peak, other.vector_peak),
            dispatch_overhead=min(self.dispatch_overhead, other.dispatch_overhead),
            env=max(self.env, other.env, key=lambda env: env.get("date", "")),
        )

    def to_json(self) -> dict:
        return {"format": FORMAT_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> "Ceilings":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


def dtype_name(dtype: str | torch.dtype) -> str:
    if isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    return dtype


# ---------------------------------------------------------------- the four measurements


# The ways to copy that the copy roof is the best of. Each reads the 4n bytes of an fp32 source and
# writes 4n bytes; none is always the fastest. On an H200 a roof of dst.copy_ alone read 4.25 TB/s,
# and notebook 10's compiled x.cos().cos() (an Inductor kernel moving the same bytes) ran at 0.896x
# its roofline time. On our 2-core EPYC (128 MiB, timed in turns) the three read within 10% of each
# other, the winner changing from run to run: one thread, copy_ 13.9-14.9 GB/s, clone 14.3-16.2,
# compiled 14.4-15.8; two threads 23.4, 24.5, 23.5.
COPY_INTO = "dst.copy_(src)"
CLONE = "torch.clone(src)"
COMPILED_COPY = (
    "compiled src * 1"  # Inductor's own elementwise kernel: C++ on a CPU, Triton on a GPU
)
COPY_WAYS = (COPY_INTO, CLONE, COMPILED_COPY)
COPY_WAYS_BUDGET_S = per_device(
    cpu=0.3, gpu=0.2
)  # the slowest way's timed seconds (bench_together)


def copy_setup(threads: int | None, n: int, way: str = COPY_INTO) -> str:
    """How a copy bandwidth was measured: the way to copy (:data:`COPY_WAYS`), thread count and
    buffer size, to print beside it.

    A CPU's copy bandwidth depends on all three (one thread cannot saturate DRAM on
    most machines; a buffer that fits in cache measures the cache), so every
    copy bandwidth the book prints says which it was.
    """
    if ON_GPU:
        where = "GPU"
    else:
        count = threads or torch.get_num_threads()
        where = f"{count} thread{'s' if count != 1 else ''}"
    return f"{way}, {where}, {units.binary_bytes(4 * n)} buffers"


def describe_copy(
    rate: float, *, threads: int | None, n: int | None = None, way: str = COPY_INTO
) -> str:
    """``rate`` with the setup it was measured on: ``12.3 GB/s (dst.copy_(src), 1 thread, 256 MiB
    buffers)``. For the copy roof, pass its way (:attr:`Ceilings.copy_way`)."""
    return f"{units.bandwidth(rate)} ({copy_setup(threads, n or far_above_cache(4), way)})"


def _times_one(x: torch.Tensor) -> torch.Tensor:
    return x * 1  # reads 4n bytes, writes 4n bytes


@functools.cache
def _compiled_times_one() -> Callable[[torch.Tensor], torch.Tensor]:
    """One compiled ``x * 1`` for the process: dynamo keeps a version per shape and thread count.
    Measured with a cold Inductor cache on our 2-core EPYC, after the vector peak's compile: 1.2-1.5
    CPU-s per thread count."""
    return torch.compile(_times_one, dynamic=False)


def copy_calls(
    src: torch.Tensor, dst: torch.Tensor, *, threads: int | None = None
) -> dict[str, Callable[[], object]]:
    """Each of :data:`COPY_WAYS` as a call of no arguments, by name: each reads ``src`` and writes a
    tensor of its size (``dst``, or one of its own). The compiled way is compiled here, at the
    thread count it will be timed with, so that no timed call compiles."""
    compiled = _compiled_times_one()
    with torch_threads(threads):
        compiled(src)
    return {
        COPY_INTO: lambda: dst.copy_(src),
        CLONE: lambda: torch.clone(src),
        COMPILED_COPY: lambda: compiled(src),
    }


def measure_copy_ways(n: int | None = None, *, threads: int | None = None) -> dict[str, float]:
    """B/s of each of :data:`COPY_WAYS` on ``n`` fp32 elements (reads 4n bytes, writes 4n bytes), by
    name, timed in turns (one call of each per round) so that a burst of other work lands on every
    way alike."""
    n = n or far_above_cache(4)
    src = torch.full((n,), 0.5, device=DEVICE)  # see measure_copy_bandwidth
    dst = torch.empty_like(src)
    calls = copy_calls(src, dst, threads=threads)
    timings = bench_together(calls, threads=threads, budget_s=COPY_WAYS_BUDGET_S)
    return {way: timings[way].rate(2 * n * src.element_size()) for way in calls}


def fastest_copy(rates: dict[str, float]) -> tuple[str, float]:
    """``(way, B/s)``: the fastest of ``rates`` (each way's B/s), the copy roof."""
    if not rates:
        raise ValueError("no copy readings to pick a roof from")
    way = max(rates, key=rates.get)
    return way, rates[way]


def measure_copy_bandwidth(
    n: int | None = None, *, threads: int | None = None, budget_s: float | None = None
) -> float:
    """B/s of ``dst.copy_(src)`` on ``n`` fp32 elements: reads 4n bytes, writes 4n bytes. One of the
    ways the copy roof times (:func:`measure_copy_ways`), and the copy the labs and sweeps time."""
    n = n or far_above_cache(4)
    # A copy moves bytes whatever they hold; filling the source costs a third of drawing it at
    # random (0.09 against 0.31 s for the CPU's 128 MiB, longer than the 0.1 s a grader's reading
    # times).
    src = torch.full((n,), 0.5, device=DEVICE)
    dst = torch.empty_like(src)
    budget_s = budget_s or per_device(cpu=0.5, gpu=0.2)
    timing = bench(lambda: dst.copy_(src), threads=threads, budget_s=budget_s)
    return timing.rate(2 * n * src.element_size())


SWEEP_ROUNDS = 3


def measure_copy_sweep(
    sizes: list[int], *, rounds: int = SWEEP_ROUNDS, budget_s: float = 0.1
) -> list[float]:
    """B/s of :func:`measure_copy_bandwidth` at each of ``sizes`` fp32 elements: the best of
    ``rounds`` readings, taken round by round over all the sizes, so that a burst of other work that
    slows one reading of a size is unlikely to slow its other readings too (load only ever slows a
    copy)."""
    best = [0.0] * len(sizes)
    for _ in range(rounds):
        for index, n in enumerate(sizes):
            best[index] = max(best[index], measure_copy_bandwidth(n, budget_s=budget_s))
    return best


# A ceiling is the best case of its copy on this machine: load from other work only slows a copy (a
# 2-thread copy beside one busy core runs at half speed here). A ceiling measured in a busy moment
# is therefore too low, and a later, faster reading of the same copy (same buffer, same threads)
# replaces it, in the cache too, so every page executed after it divides by the higher roof. A
# reading below LOW_SHARE of the ceiling is timed again, the best kept, and the page says why.
LOW_SHARE = 0.5


def check_copy_ceiling(
    found: Ceilings, rate: float, *, what: str, again=None
) -> tuple[Ceilings, float, str]:
    """``rate``: B/s of the copy the ceiling times (``far_above_cache(4)`` fp32 elements,
    ``found.threads``), timed now. Returns the ceilings to use from here on, the best reading, and a
    note for the page ('' if there is nothing to say).

    ``again()`` (default: the same copy timed once more) is called while readings stay under
    :data:`LOW_SHARE` of the ceiling, three readings at most. A best reading above the ceiling
    raises it, and the note says why; for one that stays under half of it, the note explains.
    """
    from brrr import targets

    ceiling = found.copy_bandwidth
    again = again or (lambda: measure_copy_bandwidth(threads=found.threads))
    shares = targets.measurements(
        rate / ceiling, lambda: again() / ceiling, lambda share: share >= LOW_SHARE
    )
    best = max(shares) * ceiling
    note = ""
    if best > ceiling:
        note = (
            f"{what}: {units.bandwidth(best)}, {best / ceiling:.2f}x the cached ceiling of "
            f"{units.bandwidth(ceiling)} (measured {found.env.get('date', '?')}). It is one of the "
            "copies the "
            "ceiling times, and load only ever slows a copy, so the ceiling was read in a busier "
            "moment. It is raised to this reading, here and in the cache, for every page from now "
            "on."
        )
        found = raise_copy_ceiling(found, best)
    elif best < LOW_SHARE * ceiling:
        tried = ", ".join(units.percent(share) for share in shares)
        note = (
            f"{what}: {tried} of the ceiling in {len(shares)} attempts. The ceiling was measured "
            "on a quieter machine: other work running now slows every copy. Each rate on this page "
            "is measured now; the ceiling is the best case."
        )
    return found, best, note


def raise_copy_ceiling(found: Ceilings, rate: float, way: str = COPY_INTO) -> Ceilings:
    """``found`` with its copy bandwidth raised to ``rate``, a reading of ``way`` (never lowered),
    written to the cache that :func:`measure` reads."""
    if rate <= found.copy_bandwidth:
        return found
    # dated today: the stamp printed beside the raised roof says when its figure was measured
    raised = dataclasses.replace(
        found,
        copy_bandwidth=rate,
        copy_way=way,
        copy_rates={**found.copy_rates, way: rate},
        env={**found.env, "date": environment()["date"]},
    )
    cache.write_json(
        cache_path(found.threads), raised.to_json()
    )  # measure() keeps threads None on a GPU
    return raised


def matmul_dtypes() -> list[str]:
    """The dtypes this device has a matmul peak for."""
    if not ON_GPU:
        return ["float32", "bfloat16"]
    names = ["float32"]
    major, _ = torch.cuda.get_device_capability(DEVICE)
    if major >= 8:
        names += ["tf32", "bfloat16"]
    return names + ["float16"]


MATMUL_PEAK_N = per_device(cpu=1536, gpu=8192)  # the largest square matmul the peak is measured on
# On a CPU a dtype without fast kernels can be 50x slower than fp32 (bf16 on a CPU
# without bf16 instructions: 1.3 GFLOP/s against fp32's 72 on our CI machine, where
# one 1536³ bf16 matmul takes 5 s). The CPU times such a dtype on a smaller matmul:
# the largest n, in steps of 256, whose one call takes at most this long.
CPU_MATMUL_CALL_S = 0.25


def matmul_peak_size(dtype: str, *, threads: int | None = None) -> int:
    """n of the n×n matmul that :func:`measure_matmul_peak` times for ``dtype`` here.

    GPU: ``MATMUL_PEAK_N``. CPU: one 256³ call sets the rate, then the largest
    n ≤ ``MATMUL_PEAK_N`` predicted to take at most ``CPU_MATMUL_CALL_S`` a call.
    """
    if ON_GPU:
        return MATMUL_PEAK_N
    probe = 256
    a = torch.randn(probe, probe, dtype=_DTYPES[dtype])
    timing = bench(
        lambda: torch.mm(a, a), threads=threads, warmup=1, min_runs=1, max_runs=3, budget_s=0.05
    )
    rate = timing.rate(2 * probe**3)
    return max(
        (n for n in range(probe, MATMUL_PEAK_N + 1, 256) if 2 * n**3 / rate <= CPU_MATMUL_CALL_S),
        default=probe,
    )


def measure_matmul_peak(
    dtype: str, n: int | None = None, *, threads: int | None = None, budget_s: float | None = None
) -> float:
    """FLOP/s of an n×n by n×n matmul: 2·n³ FLOPs. ``dtype='tf32'`` allows TF32 tensor cores.

    ``n`` defaults to :func:`matmul_peak_size`.
    """
    n = n or matmul_peak_size(dtype, threads=threads)
    a = torch.randn(n, n, device=DEVICE, dtype=_DTYPES[dtype])
    b = torch.randn(n, n, device=DEVICE, dtype=_DTYPES[dtype])
    out = torch.empty(n, n, device=DEVICE, dtype=_DTYPES[dtype])
    with tf32(dtype == "tf32"):
        timing = bench(
            lambda: torch.mm(a, b, out=out),
            threads=threads,
            warmup=2,
            budget_s=budget_s or per_device(cpu=1.0, gpu=0.3),
        )
    return timing.rate(2 * n**3)


# GPU: the peak is the best of these shapes (m, n, k), square and not, each timed twice after the
# GPU has run matmuls for GPU_SETTLE_S (its clocks settle at the sustained level, as in a sweep that
# runs for seconds). On the recorded H100 (brrr/data/reference/), timed at 8192³ alone, every
# dtype's peak read 4-8% below the same GPU's 4096³ and skinny 4096 × 8192 matmuls in the same run,
# notebook 20's sweeps read
# 1.04-1.08x of it, and the bf16 roof moved 697 -> 709 -> 757 TFLOP/s within one run: a roof that
# measurements sit above is no roof. The record keeps every shape's readings
# (Ceilings.matmul_spread).
GPU_PEAK_SHAPES = (
    (4096, 4096, 4096),
    (6144, 6144, 6144),
    (8192, 8192, 8192),
    (8192, 8192, 4096),
    (4096, 8192, 4096),
)
GPU_SETTLE_S = 1.0
GPU_PEAK_PASSES = 2
GPU_PEAK_BUDGET_S = 0.3


def shape_label(shape: tuple[int, int, int]) -> str:
    m, n, k = shape
    return f"{m}x{n}x{k}"


def shape_rows(label: str) -> int:
    """The m of a :func:`shape_label` ``"MxNxK"``: the ``n`` a GPU's peak is filed under
    (:attr:`Ceilings.matmul_n`)."""
    return int(label.split("x", 1)[0])


def measure_matmul_rate(
    dtype: str, shape: tuple[int, int, int], *, budget_s: float = GPU_PEAK_BUDGET_S
) -> float:
    """FLOP/s of an (m×k) @ (k×n) matmul of ``dtype``: 2·m·n·k FLOPs."""
    m, n, k = shape
    a = torch.randn(m, k, device=DEVICE, dtype=_DTYPES[dtype])
    b = torch.randn(k, n, device=DEVICE, dtype=_DTYPES[dtype])
    out = torch.empty(m, n, device=DEVICE, dtype=_DTYPES[dtype])
    with tf32(dtype == "tf32"):
        timing = bench(lambda: torch.mm(a, b, out=out), warmup=2, budget_s=budget_s)
    return timing.rate(2 * m * n * k)


def settle_clocks(dtype: str, seconds: float = GPU_SETTLE_S) -> None:
    """Run the largest matmul of ``dtype`` for ``seconds``, so that the GPU's clocks and temperature
    reach the level a sweep of several seconds runs at before any peak is timed."""
    import time

    m, n, k = max(GPU_PEAK_SHAPES, key=lambda shape: shape[0] * shape[1] * shape[2])
    a = torch.randn(m, k, device=DEVICE, dtype=_DTYPES[dtype])
    b = torch.randn(k, n, device=DEVICE, dtype=_DTYPES[dtype])
    end = time.monotonic() + seconds
    with tf32(dtype == "tf32"):
        while time.monotonic() < end:
            for _ in range(4):
                torch.mm(a, b)
            synchronize()


def best_shape(readings: dict[str, list[float]]) -> tuple[str, float]:
    """The shape whose best reading is highest, and that reading: ``({"4096x4096x4096": [r1,
    r2]...})``."""
    if not readings or not all(readings.values()):
        raise ValueError(f"no matmul readings to pick a peak from: {readings}")
    label = max(readings, key=lambda name: max(readings[name]))
    return label, max(readings[label])


def measure_gpu_matmul_peak(dtype: str) -> tuple[float, str, dict[str, list[float]]]:
    """GPU: ``(FLOP/s, shape, readings)``, the best of :data:`GPU_PEAK_SHAPES`, each timed
    :data:`GPU_PEAK_PASSES` times after :func:`settle_clocks`; ``readings`` keeps every one (the
    spread)."""
    settle_clocks(dtype)
    readings: dict[str, list[float]] = {shape_label(shape): [] for shape in GPU_PEAK_SHAPES}
    for _ in range(
        GPU_PEAK_PASSES
    ):  # passes, not one shape after another: a drift lands on all shapes alike
        for shape in GPU_PEAK_SHAPES:
            readings[shape_label(shape)].append(measure_matmul_rate(dtype, shape))
    label, rate = best_shape(readings)
    return rate, label, readings


# CPU: the size matmul_peak_size picks, and these smaller ones, timed briefly. On this project's
# 2-core EPYC a bfloat16 matmul ran 2.3x faster at 64³-128³ than at the 512³ picked for it, and a
# float32 one at 512³ above the 1536³ picked: the notebooks' sweeps then read far above a roof taken
# at one size.
CPU_EXTRA_PEAK_SIZES = (128, 512)
CPU_EXTRA_PEAK_BUDGET_S = 0.3


def measure_best_matmul_peak(dtype: str, *, threads: int | None = None) -> tuple[float, int]:
    """``(FLOP/s, n)``: the matmul peak of ``dtype`` and the n×n matmul that reached it.

    GPU: the best of :data:`GPU_PEAK_SHAPES` (:func:`measure_gpu_matmul_peak`; ``n`` is the best
    shape's m, which :attr:`Ceilings.matmul_shape` names in full). CPU: the best of the size
    :func:`matmul_peak_size` picks and :data:`CPU_EXTRA_PEAK_SIZES`.
    """
    if ON_GPU:
        rate, label, _ = measure_gpu_matmul_peak(dtype)
        return rate, shape_rows(label)
    else:
        picked = matmul_peak_size(dtype, threads=threads)
        rates = {picked: measure_matmul_peak(dtype, picked, threads=threads)}
        for n in CPU_EXTRA_PEAK_SIZES:
            if n not in rates:
                rates[n] = measure_matmul_peak(
                    dtype, n, threads=threads, budget_s=CPU_EXTRA_PEAK_BUDGET_S
                )
    best = max(rates, key=rates.get)
    return rates[best], best


@contextlib.contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    """Allow (or forbid) TF32 tensor cores for float32 matmuls inside the block.

    Only NVIDIA GPUs from Ampere (compute capability 8.0) on have TF32; elsewhere
    the flag changes nothing.
    """
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


# Independent accumulators per element. A single dependent chain (x = x*a + b, over and over)
# measures the latency of one multiply-add: each must wait for the last. A CPU core keeps its vector
# units busy only when enough independent operations are in flight, and a GPU hides latency across
# warps. Measured on our 2-core CI machine (one thread, fp32): one chain 20 GFLOP/s, 4 chains 38, 8
# chains 50, 16 chains 60, 32 chains 73. 32 chains of 8 steps is short enough to compile quickly and
# keeps every unit busy.
VECTOR_CHAINS = 32
VECTOR_STEPS = 8


def _independent_multiply_adds(x: torch.Tensor, steps: int, chains: int) -> torch.Tensor:
    accumulators = [x + 0.125 * i for i in range(chains)]
    for _ in range(steps):
        accumulators = [
            a * 0.999 + 0.001 for a in accumulators
        ]  # 2 FLOPs each; no chain waits on another
    total = accumulators[0]
    for a in accumulators[1:]:
        total = total + a
    return total


def vector_flops_per_element(steps: int = VECTOR_STEPS, chains: int = VECTOR_CHAINS) -> int:
    """FLOPs per element of :func:`measure_vector_peak`'s kernel: every add and multiply,
    counted."""
    return chains + 2 * steps * chains + (chains - 1)


def measure_vector_ways(
    n: int | None = None,
    steps: int = VECTOR_STEPS,
    *,
    chains: int = VECTOR_CHAINS,
    threads: int | None = None,
) -> dict[str, float]:
    """FLOP/s of fp32 non-matmul arithmetic done two ways, timed in turns, by name.

    ``"compiled"``: multiply-adds on ``chains`` independent accumulators per element, one kernel.
    Each element does about ``2·steps·chains`` FLOPs (575 by default) for 8 bytes moved, an
    intensity far above any machine's ridge point, so memory never limits it; on a CPU the tensor (1
    MiB) stays in cache.

    ``"eager"``: aten's own ``torch.add(x, y, out=z)`` on the same tensors, one FLOP an element.
    Where Inductor's C++ cannot vectorize (``ATEN_CPU_CAPABILITY=default``) while aten's kernels
    still run vector code, a model's adds read 100% of a roof of the compiled way alone.

    Every thread torch uses (``threads``) takes part; neither way flushes the cache between calls.
    """
    n = n or per_device(cpu=2**18, gpu=2**24)
    x = torch.rand(n, device=DEVICE)
    y, z = torch.rand_like(x), torch.empty_like(x)
    compiled = torch.compile(_independent_multiply_adds, dynamic=False)
    with torch_threads(threads):
        compiled(x, steps, chains)  # compile outside the timed region
    timings = bench_together(
        {"compiled": lambda: compiled(x, steps, chains), "eager": lambda: torch.add(x, y, out=z)},
        threads=threads,
        budget_s=per_device(cpu=0.5, gpu=0.2),
        flush_l2=False,
    )
    flops = {"compiled": vector_flops_per_element(steps, chains) * n, "eager": n}
    return {way: timings[way].rate(flops[way]) for way in timings}


def measure_vector_peak(n: int | None = None, *, threads: int | None = None) -> float:
    """The vector peak: the faster of :func:`measure_vector_ways`, the roof for non-matmul
    arithmetic."""
    return max(measure_vector_ways(n, threads=threads).values())


def measure_dispatch_overhead(ops: int = 2000, *, threads: int | None = None) -> float:
    """Host seconds per eager ``a + b`` on one-element tensors: the per-op floor."""
    a = torch.ones(1, device=DEVICE)
    b = torch.ones(1, device=DEVICE)

    def many_adds():
        for _ in range(ops):
            a + b
        synchronize()

    return bench(many_adds, threads=threads, budget_s=0.3).median_s / ops


def measure_all(*, threads: int | None = None) -> Ceilings:
    """Every ceiling, measured now.

    The copy bandwidth is the fastest of :data:`COPY_WAYS` (:func:`measure_copy_ways`), each way's
    reading kept in :attr:`Ceilings.copy_rates`. It and the vector peak are each read twice, first
    and last, seconds apart, and the higher reading kept: load from other work only lowers
    a rate, and a kernel on every core is what a burst of it hits hardest (a fresh
    clone's test run once read the copy at 5.35 GB/s under one, 3.5x below the same
    copy a minute later, and another the two-thread vector peak at 18.9 GFLOP/s
    against 139.7 in a quiet clone). On a CPU the matmul peaks are read twice too:
    four one-thread float32 readings a few seconds apart on an idle machine gave
    80.0, 61.1, 66.0 and 61.8 GFLOP/s, and a fresh clone's run whose roof read 67.3
    saw a ViT's matmul at 71.7 (106% of it). A roof still read low is measured
    again by the check that finds it wrong (:func:`measured_again`).
    """
    with torch_threads(threads):
        env = environment()
    if not ON_GPU:
        env["cpu_capability"] = cpu_capability()
    first_copy = measure_copy_ways(threads=threads)
    first_vector = measure_vector_peak(threads=threads)
    spread: dict[str, dict[str, list[float]]] = {}
    shapes: dict[str, str] = {}
    if ON_GPU:
        for name in matmul_dtypes():
            _, shapes[name], spread[name] = measure_gpu_matmul_peak(name)
        best = {
            name: (max(spread[name][shapes[name]]), shape_rows(shapes[name])) for name in spread
        }
    else:
        best = {name: measure_best_matmul_peak(name, threads=threads) for name in matmul_dtypes()}
    dispatch_overhead = measure_dispatch_overhead(threads=threads)
    if not ON_GPU:  # read again last, as the copy and the vector peak are
        again = {name: measure_best_matmul_peak(name, threads=threads) for name in matmul_dtypes()}
        best = {name: max(best[name], again[name]) for name in best}
    matmul_peak = {name: rate for name, (rate, _) in best.items()}
    sizes = {name: n for name, (_, n) in best.items()}
    last_copy = measure_copy_ways(threads=threads)
    copy_rates = {way: max(first_copy[way], last_copy[way]) for way in first_copy}
    copy_way, copy_bandwidth = fastest_copy(copy_rates)
    return Ceilings(
        matmul_spread=spread,
        matmul_shape=shapes,
        copy_bandwidth=copy_bandwidth,
        copy_way=copy_way,
        copy_rates=copy_rates,
        matmul_peak=matmul_peak,
        matmul_n=sizes,
        vector_peak=max(first_vector, measure_vector_peak(threads=threads)),
        dispatch_overhead=dispatch_overhead,
        threads=threads,
        env=env,
    )


def measured_again(found: Ceilings) -> Ceilings:
    """``found`` with every roof measured again now, each kept at the better reading
    (:meth:`Ceilings.best_with`) and written to the cache where one rose: what a check does before
    it says a roof is wrong. A roof read in a busy moment is too low; a reading now is never used to
    lower one."""
    return _kept_at_the_better(found, measure_all(threads=found.threads))


def matmul_measured_again(found: Ceilings, dtype: str) -> Ceilings:
    """``found`` combined (:meth:`Ceilings.best_with`) with one more reading of the matmul peak of
    ``dtype``, written to the cache where it changed, as :func:`measured_again` does: a second or
    third look at the one roof an op was found above, a few seconds each where
    :func:`measured_again` reads every roof."""
    if ON_GPU:
        rate, label, readings = measure_gpu_matmul_peak(dtype)
        reading = {"matmul_n": {dtype: shape_rows(label)}, "matmul_shape": {dtype: label}}
        reading["matmul_spread"] = {dtype: readings}
    else:
        rate, n = measure_best_matmul_peak(dtype, threads=found.threads)
        reading = {"matmul_n": {dtype: n}, "matmul_shape": {}, "matmul_spread": {}}
    return _kept_at_the_better(
        found, dataclasses.replace(found, matmul_peak={dtype: rate}, **reading)
    )


def _kept_at_the_better(found: Ceilings, reading: Ceilings) -> Ceilings:
    """``found`` combined with ``reading`` (:meth:`Ceilings.best_with`), written to the cache where
    a roof rose; ``found`` itself where none did."""
    better = found.best_with(reading)
    if better == found:
        return found
    cache.write_json(cache_path(found.threads), better.to_json())
    return better


# ---------------------------------------------------------------- the convolution roof

# A CPU's direct convolution can beat its matmul: oneDNN's direct 3×3 convolution ran at 227 GFLOP/s
# on one thread where torch.mm's peak read 107, and ResNet-18 read an MFU of 135-142%. Where a step
# runs convolutions, the fp32 compute roof of its contractions is the better of the two library
# paths. The shapes: (batch, channels, height and width) of a 3×3 convolution that keeps its shape,
# ResNet's middle stages; each timed contiguous and channels_last (oneDNN's native layout).
CONVOLUTION_SHAPES = ((8, 64, 28), (8, 128, 14))
CONVOLUTION_BUDGET_S = per_device(cpu=0.2, gpu=0.1)


def measure_convolution_peak(*, threads: int | None = None) -> float:
    """FLOP/s of fp32 3×3 convolutions (:data:`CONVOLUTION_SHAPES`, forward, no autograd): the best
    of every shape in both layouts, ``2·N·C_out·C_in·9·H·W`` FLOPs a call."""
    best = 0.0
    for batch, channels, size in CONVOLUTION_SHAPES:
        x = torch.randn(batch, channels, size, size, device=DEVICE)
        conv = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False).to(DEVICE)
        flops = 2 * batch * channels * channels * 9 * size * size
        for layout in (torch.contiguous_format, torch.channels_last):
            x_in, layer = x.to(memory_format=layout), conv.to(memory_format=layout)

            def call(x_in=x_in, layer=layer):
                with torch.no_grad():
                    return layer(x_in)

            timing = bench(call, threads=threads, budget_s=CONVOLUTION_BUDGET_S)
            best = max(best, timing.rate(flops))
    return best


def convolution_cache_path(threads: int | None = None):
    path = cache_path(threads)
    return path.with_name(path.name.replace("ceilings-", "convolution-peak-", 1))


def convolution_peak(*, threads: int | None = None, refresh: bool = False) -> float:
    """The fp32 convolution roof of this machine at ``threads``: cached per user beside the
    ceilings, measured where no valid cache holds one or ``refresh`` asks. Like every roof it only
    rises: a new reading below the cached one keeps the cached one."""
    threads = None if ON_GPU else threads
    path = convolution_cache_path(threads)
    cached = cache.read_json(path)
    valid = bool(cached) and _still_valid(cached) and "peak" in cached
    if valid and not refresh:
        return float(cached["peak"])
    peak = measure_convolution_peak(threads=threads)
    if valid and float(cached["peak"]) >= peak:
        return float(cached["peak"])
    with torch_threads(threads):
        env = environment()
    cache.write_json(path, {"format": FORMAT_VERSION, "env": env, "peak": peak})
    return peak


def is_cached(threads: int | None = None) -> bool:
    """Whether :func:`measure` will read this machine's ceilings at ``threads`` from the cache."""
    cached = cache.read_json(cache_path(None if ON_GPU else threads))
    return bool(cached) and _still_valid(cached)


# ---------------------------------------------------------------- readings that check the roofs

# A probe: a short reading of a roof's own kind of work, to set against a roof read earlier (a
# cache). Far below the roof, the machine is busier now than when the roof was read; above it by
# more than a reading's noise, the roof was read in a busy moment and is measured again before
# anything is divided by it.
PROBE_BUDGET_S = 0.05
# A probe above its roof by more than this: the roof was read low. At load 1.7 on our 2-core EPYC
# the probes read 0.69-0.99 of the matmul roof and 0.76-1.08 of the copy roof (one thread).
PROBE_ABOVE = 1.15
PROBE_MATMUL_N = 512
PROBE_ADD_N = 2**18


def probe_readings(found: Ceilings) -> dict[str, float]:
    """Each probed roof's short reading now, as a fraction of the roof: ``{"float32 matmul": 0.93,
    "non-matmul": 0.21, "copy": 0.9}``. The matmul: an fp32 n×n torch.mm (n at most
    :data:`PROBE_MATMUL_N`); the non-matmul peak: aten's add into an existing tensor, one FLOP an
    element, cache-resident; the copy: :func:`measure_copy_bandwidth` on a shorter budget. A copy
    roof read under load (3.3 GB/s against 7.6 quiet) put ResNet-18's convolutions below the
    ridge."""
    n = min(found.matmul_n.get("float32", PROBE_MATMUL_N), PROBE_MATMUL_N)
    a, b = torch.randn(n, n, device=DEVICE), torch.randn(n, n, device=DEVICE)
    out = torch.empty(n, n, device=DEVICE)
    x, y = torch.rand(PROBE_ADD_N, device=DEVICE), torch.rand(PROBE_ADD_N, device=DEVICE)
    z = torch.empty_like(x)
    budget = {"threads": found.threads, "budget_s": PROBE_BUDGET_S, "flush_l2": False}
    matmul = bench(lambda: torch.mm(a, b, out=out), **budget).rate(2 * n**3)
    add = bench(lambda: torch.add(x, y, out=z), **budget).rate(PROBE_ADD_N)
    copy = measure_copy_bandwidth(threads=found.threads, budget_s=PROBE_BUDGET_S)
    return {
        "float32 matmul": matmul / found.matmul("float32"),
        "non-matmul": add / found.vector_peak,
        "copy": copy / found.copy_bandwidth,
    }


def contradicted(readings: dict[str, float]) -> list[str]:
    """The roofs a probe read above by more than its noise (:data:`PROBE_ABOVE`)."""
    return [name for name, fraction in readings.items() if fraction > PROBE_ABOVE]


def checked_against_probes(found: Ceilings) -> tuple[Ceilings, dict[str, float]]:
    """``(ceilings, readings)``: ``found``, measured again (:func:`measured_again`, which only
    raises roofs and caches them) where a probe read above a roof, with the probes' last readings.
    No roof a run contradicts is kept, or cached, unread again."""
    readings = probe_readings(found)
    if contradicted(readings):
        found = measured_again(found)
        readings = probe_readings(found)
    return found, readings


# A roof that reads lower than the cached one by more than this is named when --refresh keeps the
# cached one: one-thread readings on our 2-core EPYC vary by up to 25% on a quiet machine.
LOWER_NOTED = 0.8


def never_lower(cached: Ceilings, fresh: Ceilings) -> tuple[Ceilings, list[str]]:
    """``(ceilings, notes)``: each roof at the better of the cached and the fresh reading
    (:meth:`Ceilings.best_with`), and a note for each roof the fresh reading put lower by more than
    its noise (:data:`LOWER_NOTED`): roofs only rise, and a refresh under load says so instead of
    lowering one silently (a --refresh under load once read the non-matmul peak 15x too low)."""
    pairs = {"copy bandwidth": (cached.copy_bandwidth, fresh.copy_bandwidth)}
    pairs["non-matmul peak"] = (cached.vector_peak, fresh.vector_peak)
    for name, peak in cached.matmul_peak.items():
        pairs[f"{name} matmul peak"] = (peak, fresh.matmul_peak.get(name, peak))
    notes = [
        f"{name} read {old / new:.1f}x lower now ({new:.3g} against {old:.3g} cached): the machine "
        "is busier than when the cache was measured; the cached roof is kept"
        for name, (old, new) in pairs.items()
        if new < LOWER_NOTED * old
    ]
    return cached.best_with(fresh), notes


def refreshed(threads: int | None = None, *, probed: bool = True) -> tuple[Ceilings, list[str]]:
    """``(ceilings, notes)``: every roof measured now, checked against probes
    (:func:`checked_against_probes`; ``probed=False`` leaves that to the caller, as
    :func:`brrr.diagnose.diagnose` does with every roof it reads), combined with a valid cache
    (:func:`never_lower`), and cached."""
    threads = None if ON_GPU else threads
    path = cache_path(threads)
    cached = cache.read_json(path)
    result = measure_all(threads=threads)
    if probed:
        result, _ = checked_against_probes(result)
    notes: list[str] = []
    if cached and _still_valid(cached):
        result, notes = never_lower(Ceilings.from_json(cached), result)
    cache.write_json(path, result.to_json())
    if threads is None:  # the reference keeps the default-thread ceilings that `--refresh` measures
        reference.record_ceilings(result.to_json())
    return result, notes


# ---------------------------------------------------------------- caching


def cpu_capability() -> str:
    """The instruction set torch's CPU kernels dispatch to ("AVX2", "AVX512", "DEFAULT"...): the
    CPU's best, or less where ``ATEN_CPU_CAPABILITY`` masks it, which Inductor's C++ follows too. It
    moves the copy and the vector peak, so roofs measured under one are no roofs under another."""
    return torch.backends.cpu.get_cpu_capability()


def cache_path(threads: int | None = None):
    """The cache file of this device's ceilings at ``threads``; on a CPU, of this
    :func:`cpu_capability`."""
    threads_part = "default-threads" if threads is None else f"{threads}-threads"
    device_part = f"{cache.slug(device_name())}-{DEVICE.type}"
    if not ON_GPU:
        device_part += f"-{cache.slug(cpu_capability())}"
    return cache.cache_dir() / f"ceilings-{device_part}-{threads_part}.json"


def measure(*, refresh: bool = False, threads: int | None = None) -> Ceilings:
    """This machine's ceilings: from the per-user cache, or measured now (``refresh=True`` forces
    it).

    A cached result is used only if it was measured on the same device with the
    same torch and triton versions and format. ``threads`` pins torch's CPU
    threads; on a GPU the roofs are the device's, so it is ignored there and the
    one GPU measurement serves every caller. ``refresh=True`` reads every roof again
    and never lowers a cached one (:func:`refreshed`).
    """
    if ON_GPU:
        threads = None
    path = cache_path(threads)
    if not refresh:
        cached = cache.read_json(path)
        if cached and _still_valid(cached):
            return Ceilings.from_json(cached)
    return refreshed(threads, probed=refresh)[0]


def _still_valid(cached: dict) -> bool:
    now = environment()  # the CPU's capability is in the cache's path (cache_path)
    env = cached.get("env", {})
    return cached.get("format") == FORMAT_VERSION and all(
        env.get(key) == now[key] for key in ("device", "device_type", "torch", "triton")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m brrr.ceilings", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--refresh", action="store_true", help="measure again instead of reading the cache"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads to measure with")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a summary")
    args = parser.parse_args(argv)
    notes: list[str] = []
    if args.refresh:
        result, notes = refreshed(args.threads)
    else:
        result = measure(threads=args.threads)
    for note in notes:
        print(f"brrr.ceilings: {note}", file=sys.stderr)
    if args.json:
        import json

        print(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        print(result.summary())
        print(f"  cached in {cache_path(args.threads)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
