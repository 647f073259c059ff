"""The compute benchmarks: matmul throughput, and where a BERT layer's FLOPs and time go.

The notebooks of the compute chapter declare their sweeps with the functions
here; ``python -m brrr.benchmarks.compute`` runs the same measurements and checks
the chapter's targets on this machine:

GPU
    the largest bf16 matmul of the square sweep reaches at least 80% of the bf16
    matmul peak measured by :mod:`brrr.ceilings`, and (since that peak times the
    same ``torch.mm``) at least half the datasheet's dense bf16 figure for GPUs
    :mod:`brrr.datasheets` knows, or 4x the measured non-matmul peak for others
    (:func:`matmul_check`); in a BERT-like encoder layer's
    training step, tensor contractions hold at least 95% of the FLOPs, and the
    other ops at least 10x their share of FLOPs in runtime: the claims ledger's
    rule (:func:`table_checks`).
CPU
    the same table shape, by the same rule.

The exit status is 0 when every target is met, 1 otherwise.

On a CPU every measurement here runs on one thread (:data:`THREADS`) and is
compared with ceilings measured on one thread: with two threads on a shared
two-core machine, runs stall for milliseconds at random and small matmuls read
as a hundred times slower than they are.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
from dataclasses import asdict, dataclass, replace
from typing import Iterator

import torch

from brrr import ceilings as ceilings_module
from brrr import datasheets, opclasses, reference, units
from brrr.ceilings import Ceilings, matmul_dtypes, tf32
from brrr.device import DEVICE, ON_GPU, far_above_cache, half_precision_dtype, per_device
from brrr.timing import bench, torch_threads

# ceilings names -> torch dtypes; "tf32" is float32 storage with TF32 tensor cores allowed
TORCH_DTYPES = {
    "float32": torch.float32,
    "tf32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

THREADS: int | None = per_device(cpu=1, gpu=None)  # torch threads for every CPU measurement here

MATMUL_TARGET_FRACTION = 0.80  # of the measured bf16 matmul peak (GPU)
# Independent of torch.mm (see matmul_check): of the datasheet's dense figure, for GPUs
# brrr.datasheets knows; elsewhere, times the measured non-matmul peak (the claims ledger's
# matmul-gap rule).
MATMUL_DATASHEET_FRACTION = 0.50
MATMUL_OVER_VECTOR_TARGET = 4.0
# The table's targets are the rule of the claims ledger's "contractions-flops-vs-runtime", which the
# book's ledger (brrr_book.claims) reads from here, so the benchmark and the ledger cannot disagree.
# The non-contraction ops' share of runtime over their share of FLOPs: the essay's table gives 195x
# (39% / 0.20%); our CPU runs measured about 40x. 10x says "far more" on any device, with room for
# noise.
CONTRACTION_FLOP_SHARE_TARGET = 0.95
OTHER_TIME_OVER_FLOP_SHARE_TARGET = 10.0


# ---------------------------------------------------------------- threads and ceilings


def pin_threads() -> str:
    """Run this process's torch ops on :data:`THREADS` threads (CPU only); returns a sentence saying
    so."""
    if THREADS is None:
        return f"torch uses its default threads on {DEVICE}"
    torch.set_num_threads(THREADS)
    return (
        f"CPU: torch pinned to {THREADS} thread, and the ceilings compared with are measured on "
        f"{THREADS} thread too (two threads on a shared two-core machine stall at random)"
    )


def measured_ceilings(*, refresh: bool = False) -> Ceilings:
    """This machine's ceilings, measured with the same thread count as the benchmarks here."""
    return ceilings_module.measure(threads=THREADS, refresh=refresh)


# ---------------------------------------------------------------- matmul throughput


def matmul_peaks_now(ceilings: Ceilings) -> Ceilings:
    """GPU: ``ceilings`` with each matmul peak measured again now, at the sizes
    :mod:`brrr.ceilings` times (the best of them), for a sweep about to be compared with it.

    The cached peak may be hours old, from a GPU at another clock or
    temperature, or with another process on it; the matmul target compares two
    measurements, so both are taken minutes apart. CPU: ``ceilings`` unchanged
    (the cached ceilings are measured on the same pinned thread, and the sweep
    here is short enough for them).
    """
    if not ON_GPU:
        return ceilings
    best = {
        name: ceilings_module.measure_best_matmul_peak(name, threads=ceilings.threads)
        for name in ceilings.matmul_peak
    }
    peaks = {name: rate for name, (rate, _) in best.items()}
    sizes = {name: n for name, (_, n) in best.items()}
    env = dict(ceilings.env, matmul_peak="measured again just before the sweep")
    return replace(ceilings, matmul_peak=peaks, matmul_n=sizes, env=env)


# Why a matmul can print above the measured peak (units.fraction_of's ``above``).
ABOVE_PEAK = (
    "brrr.ceilings times the peak on one size, and a size that suits the "
    "library better, or a quieter moment on a shared machine, runs faster: "
    "the roof is a measurement, with its noise"
)


ABOVE_COPY = ceilings_module.ABOVE_COPY  # why a kernel can beat the copy roof


def above_bound(regime: object) -> str:
    """Why a measurement can read above its roofline bound, for the bound's regime (memory: the copy
    roof; otherwise the matmul peak)."""
    return ABOVE_COPY if str(regime) == "memory-bound" else ABOVE_PEAK


def has_tf32() -> bool:
    return "tf32" in matmul_dtypes()


def sweep_dtypes() -> list[str]:
    """The dtypes the sweeps use: those :mod:`brrr.ceilings` has a peak for on this device.

    GPU: float32 (TF32 off), tf32 (where the GPU has it), bfloat16 (Ampere on), float16.
    CPU: float32 and bfloat16.
    """
    return matmul_dtypes()


@dataclass(frozen=True)
class MatmulPoint:
    """One timed (m×k) @ (k×n) matmul."""

    m: int
    n: int
    k: int
    dtype: str
    seconds: float  # median per call
    flops: int  # 2·m·n·k

    @property
    def rate(self) -> float:
        return self.flops / self.seconds


def time_matmul(
    m: int,
    n: int,
    k: int,
    dtype: str = "float32",
    *,
    budget_s: float | None = None,
    from_memory: bool = False,
) -> MatmulPoint:
    """Median time of ``torch.mm`` of an (m×k) by a (k×n) matrix, written into a preallocated
    output.

    ``dtype`` is a :mod:`brrr.ceilings` name; ``'tf32'`` times float32 with TF32
    allowed and ``'float32'`` with it forbidden. ``from_memory`` rotates over enough
    sets of operands that none sits in the last-level cache, as a memory-bound
    matmul meets them in a model: the same 4 MiB weight timed over and over was read
    from cache, and a batch-1 matmul ran at 2.7x the copy roof.
    """
    torch_dtype = TORCH_DTYPES[dtype]
    set_bytes = (m * k + k * n + m * n) * torch_dtype.itemsize
    next_set = _in_turn(
        [
            (
                torch.randn(m, k, device=DEVICE, dtype=torch_dtype),
                torch.randn(k, n, device=DEVICE, dtype=torch_dtype),
                torch.empty(m, n, device=DEVICE, dtype=torch_dtype),
            )
            for _ in range(_copies_above_cache(set_bytes) if from_memory else 1)
        ]
    )

    def call():
        a, b, out = next_set()
        return torch.mm(a, b, out=out)

    with tf32(dtype == "tf32"):
        timing = bench(
            call,
            warmup=2,
            threads=THREADS,
            budget_s=budget_s if budget_s is not None else per_device(cpu=0.15, gpu=0.1),
        )
    return MatmulPoint(m, n, k, dtype, timing.median_s, 2 * m * n * k)


def square_sizes() -> list[int]:
    """n for the n×n @ n×n sweep: small sizes that starve the machine up to sizes that fill it."""
    return per_device(
        cpu=[64, 128, 256, 512, 1024, 1536], gpu=[256, 512, 1024, 2048, 4096, 8192, 16384]
    )


def skinny_sizes() -> tuple[int, list[int]]:
    """(large, smalls): shapes with one dimension swept over ``smalls`` and the others ``large``."""
    return per_device(
        cpu=(1024, [1, 4, 16, 64, 256, 1024]), gpu=(8192, [1, 4, 16, 64, 256, 1024, 4096, 8192])
    )


def unaligned_sizes() -> list[int]:
    """n around a power of two, one apart: which of them keep the matmul on its fast path?"""
    base = per_device(cpu=1024, gpu=4096)
    return list(range(base - 8, base + 9))


def square_sweep(
    dtypes: list[str] | None = None, sizes: list[int] | None = None
) -> list[MatmulPoint]:
    """n×n @ n×n for every dtype and size, smallest first.

    On a CPU a dtype stops at the first size whose call the previous size's rate
    predicts to take over ``CPU_MATMUL_CALL_S`` (bf16 without bf16 instructions
    is 50x slower than fp32).
    """
    points: list[MatmulPoint] = []
    for dtype in dtypes or sweep_dtypes():
        for n in sizes or square_sizes():
            done = [p for p in points if p.dtype == dtype]
            if (
                not ON_GPU
                and done
                and predicted_call_s(done[-1], n) > ceilings_module.CPU_MATMUL_CALL_S
            ):
                break
            points.append(time_matmul(n, n, n, dtype))
    return points


def predicted_call_s(point: MatmulPoint, n: int) -> float:
    """Seconds an n×n @ n×n call would take at ``point``'s rate."""
    return 2 * n**3 / point.rate


def skinny_sweep(dtype: str) -> list[tuple[str, MatmulPoint]]:
    """('small m', point) for (s×L)@(L×L), and ('small k', point) for (L×s)@(s×L), s over the
    smalls."""
    large, smalls = skinny_sizes()
    points = [("small m", time_matmul(s, large, large, dtype, from_memory=True)) for s in smalls]
    points += [("small k", time_matmul(large, large, s, dtype, from_memory=True)) for s in smalls]
    return points


def unaligned_sweep(dtype: str) -> list[MatmulPoint]:
    return [time_matmul(n, n, n, dtype) for n in unaligned_sizes()]


def tensor_core_dtype(ceilings: Ceilings | None = None) -> str:
    """The dtype in which this machine's matmuls are fastest, for the sweeps that use one dtype.

    GPU: bfloat16 where the GPU has it (Ampere on), else float16 (tensor cores
    since Volta). CPU: the dtype with the highest measured matmul peak in
    ``ceilings`` (float32 unless the CPU has matrix units for bf16), float32
    when no ceilings are given.
    """
    names = sweep_dtypes()
    if ON_GPU:
        return next(name for name in ("bfloat16", "float16", "float32") if name in names)
    if ceilings is not None:
        return max(
            (name for name in names if name in ceilings.matmul_peak), key=ceilings.matmul_peak.get
        )
    return "float32"


def elementwise_rate(n: int | None = None) -> tuple[float, float]:
    """(FLOP/s, B/s) of an eager ``torch.mul(x, c, out=y)`` on ``n`` fp32 elements far above the
    cache.

    1 FLOP and 8 bytes (read x, write y) per element: the same traffic pattern as
    the ``copy_`` that measures copy bandwidth, so the two compare like with like.
    """
    n = n or far_above_cache(4)
    x = torch.rand(n, device=DEVICE)
    y = torch.empty_like(x)
    timing = bench(
        lambda: torch.mul(x, 1.0000001, out=y),
        threads=THREADS,
        budget_s=per_device(cpu=0.3, gpu=0.1),
    )
    return timing.rate(n), timing.rate(8 * n)


# ---------------------------------------------------------------- single layers, for the roofline


def _in_turn(items: list):
    """A function returning ``items`` one after another, round and round: each timed call gets the
    next."""
    turns = itertools.cycle(items)
    return lambda: next(turns)


def _copies_above_cache(tensor_bytes: int) -> int:
    """How many distinct copies of a tensor make a working set far above the last-level cache."""
    return max(1, -(-far_above_cache(1) // tensor_bytes))


def time_linear(batch: int, in_features: int, out_features: int, dtype: str = "float32") -> float:
    """Median seconds of ``F.linear(x, W, b)``, rotating over enough weights that W never sits in
    cache.

    A linear layer on a small batch is bound by reading its weight from memory;
    timing one weight over and over would read it from cache instead.
    """
    torch_dtype = TORCH_DTYPES[dtype]
    weight_bytes = in_features * out_features * torch.empty((), dtype=torch_dtype).element_size()
    weights = [
        torch.randn(out_features, in_features, device=DEVICE, dtype=torch_dtype)
        for _ in range(_copies_above_cache(weight_bytes))
    ]
    bias = torch.randn(out_features, device=DEVICE, dtype=torch_dtype)
    x = torch.randn(batch, in_features, device=DEVICE, dtype=torch_dtype)
    next_weight = _in_turn(weights)

    def call():
        return torch.nn.functional.linear(x, next_weight(), bias)

    with tf32(False):
        return bench(call, threads=THREADS, budget_s=per_device(cpu=0.15, gpu=0.1)).median_s


def time_rowwise(op: str, rows: int, cols: int, dtype: str = "float32") -> float:
    """Median seconds of ``'layer_norm'`` (with weight and bias) or ``'softmax'`` over the last dim
    of rows×cols."""
    torch_dtype = TORCH_DTYPES[dtype]
    x = torch.randn(rows, cols, device=DEVICE, dtype=torch_dtype)
    if op == "layer_norm":
        weight, bias = (
            torch.ones(cols, device=DEVICE, dtype=torch_dtype),
            torch.zeros(cols, device=DEVICE, dtype=torch_dtype),
        )

        def call():
            return torch.nn.functional.layer_norm(x, (cols,), weight, bias)
    elif op == "softmax":

        def call():
            return torch.softmax(x, dim=-1)
    else:
        raise ValueError(f"op must be 'layer_norm' or 'softmax', not {op!r}")
    return bench(call, threads=THREADS, budget_s=per_device(cpu=0.3, gpu=0.1)).median_s


def time_attention(
    batch: int, heads: int, seq: int, head_dim: int, dtype: str = "float32"
) -> float:
    """Median seconds of ``F.scaled_dot_product_attention`` (inference, no mask): a fused kernel
    where one exists."""
    torch_dtype = TORCH_DTYPES[dtype]
    q, k, v = (
        torch.randn(batch, heads, seq, head_dim, device=DEVICE, dtype=torch_dtype) for _ in range(3)
    )

    def call():
        with torch.no_grad():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    return bench(call, threads=THREADS, budget_s=per_device(cpu=0.2, gpu=0.1)).median_s


# ---------------------------------------------------------------- where the FLOPs and the time go


@dataclass(frozen=True)
class EncoderConfig:
    """A BERT-like encoder layer and the batch it trains on."""

    d_model: int
    heads: int
    d_ff: int
    batch: int
    seq: int
    dtype: str
    dropout: float = 0.1

    @classmethod
    def for_device(cls) -> "EncoderConfig":
        """BERT-base width on a CPU (fp32, a small batch); BERT-large width on a GPU, in bf16
        (fp16 on GPUs before Ampere, such as a T4: :func:`brrr.device.half_precision_dtype`)."""
        if ON_GPU:
            dtype = "bfloat16" if half_precision_dtype() == torch.bfloat16 else "float16"
            return cls(d_model=1024, heads=16, d_ff=4096, batch=8, seq=512, dtype=dtype)
        return cls(d_model=768, heads=12, d_ff=3072, batch=4, seq=128, dtype="float32")


def encoder_training_step(config: EncoderConfig):
    """A ``step()`` that runs forward and backward of a ``TransformerEncoderLayer`` in train mode.

    Train mode with dropout keeps PyTorch off the fused inference fast path, which
    FlopCounterMode would count as zero FLOPs. Gradients are set to ``None`` before
    each step, as ``optimizer.zero_grad()`` does, so no step accumulates into the last.
    """
    torch_dtype = TORCH_DTYPES[config.dtype]
    layer = (
        torch.nn.TransformerEncoderLayer(
            config.d_model,
            config.heads,
            config.d_ff,
            dropout=config.dropout,
            activation="gelu",
            batch_first=True,
        )
        .to(device=DEVICE, dtype=torch_dtype)
        .train()
    )
    x = torch.randn(
        config.batch,
        config.seq,
        config.d_model,
        device=DEVICE,
        dtype=torch_dtype,
        requires_grad=True,
    )

    def step():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x).sum().backward()

    return step


@contextlib.contextmanager
def attention_backend(kind: str) -> Iterator[None]:
    """``'math'``: attention as separate matmul, softmax and dropout ops (as in the essay's source,
    which profiled PyTorch before fused attention); ``'default'``: whatever PyTorch picks (fused on
    a GPU)."""
    if kind == "default":
        yield
        return
    if kind != "math":
        raise ValueError(f"attention backend must be 'math' or 'default', not {kind!r}")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        yield


def bert_table(
    config: EncoderConfig | None = None, *, attention: str = "math", steps: int = 3
) -> opclasses.ClassTable:
    """The essay's table for one training step of the layer: FLOPs and runtime per operator
    class."""
    step = encoder_training_step(config or EncoderConfig.for_device())
    with attention_backend(attention), torch_threads(THREADS):
        return opclasses.measure(step, steps=steps)


# ---------------------------------------------------------------- targets


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    message: str

    def __str__(self) -> str:
        return f"[{'PASS' if self.passed else 'FAIL'}] {self.name}: {self.message}"


def other_time_over_flop_share(flop_share: float, time_share: float) -> float:
    """The non-contraction ops' share of runtime over their share of FLOPs (inf when they do no
    FLOPs)."""
    other_flops, other_time = 1 - flop_share, 1 - time_share
    return other_time / other_flops if other_flops > 0 else float("inf")


def table_checks(table: opclasses.ClassTable) -> list[Check]:
    """The table's shape, by the claims ledger's rule (:func:`brrr_book.claims.judge_contractions`):
    contractions hold at least 95% of the FLOPs, and everything else takes far more of the runtime.

    "Far more" is a factor: the non-contraction share of runtime must be at least
    :data:`OTHER_TIME_OVER_FLOP_SHARE_TARGET` times its share of FLOPs, on any
    device. (Contractions merely taking less of the runtime than of the FLOPs
    would pass with 98% of the runtime in them, which says nothing.) Both checks
    pass whenever the ledger's verdict is "held here"; the ledger also asks the
    other ops for a fifth of the runtime (``brrr_book.claims.OTHER_TIME_SHARE_MIN``).
    """
    flop_share = table.flop_share(opclasses.OpClass.CONTRACTION)
    time_share = table.time_share(opclasses.OpClass.CONTRACTION)
    other_flops, other_time = 1 - flop_share, 1 - time_share
    factor = other_time_over_flop_share(flop_share, time_share)
    return [
        Check(
            "contraction share of FLOPs",
            flop_share >= CONTRACTION_FLOP_SHARE_TARGET,
            f"{100 * flop_share:.2f}% (target at least {100 * CONTRACTION_FLOP_SHARE_TARGET:.0f}%)",
        ),
        Check(
            "non-contraction ops take far more of the runtime than of the FLOPs",
            factor >= OTHER_TIME_OVER_FLOP_SHARE_TARGET,
            f"{100 * other_time:.1f}% of runtime for {100 * other_flops:.2f}% of FLOPs, "
            f"{factor:.0f}x (target at least {OTHER_TIME_OVER_FLOP_SHARE_TARGET:.0f}x)",
        ),
    ]


def matmul_check(points: list[MatmulPoint], ceilings: Ceilings, dtype: str = "bfloat16") -> Check:
    """The largest square ``dtype`` matmul of the sweep: near the measured peak, and fast by a
    figure no ``torch.mm`` produced.

    The measured peak (:mod:`brrr.ceilings`) times ``torch.mm`` too, so that
    comparison alone is a tautology: a slow matmul path (no tensor cores, a
    library falling back to a naive kernel) makes the sweep and the peak slow
    together, and passes. The check therefore also needs an independent floor:

    * for a GPU :mod:`brrr.datasheets` knows (the device named in
      ``ceilings.env``), at least :data:`MATMUL_DATASHEET_FRACTION` of the
      datasheet's dense ``dtype`` figure (large bf16 matmuls reach 60-90% of it
      on an A100 or H100; CUDA cores without tensor cores, under 10%);
    * otherwise, at least :data:`MATMUL_OVER_VECTOR_TARGET` times the non-matmul
      peak that :mod:`brrr.ceilings` measured with compiled element-wise code,
      the rule of the claims ledger's "matmul-gap" (tensor cores: 10x and more;
      a matmul on the same units as everything else: about 1x).

    Both must hold: the sweep's largest point at :data:`MATMUL_TARGET_FRACTION`
    of the measured peak, and the floor.
    """
    largest = max((p for p in points if p.dtype == dtype and p.m == p.n == p.k), key=lambda p: p.m)
    peak = ceilings.matmul(dtype)
    near_peak = largest.rate >= MATMUL_TARGET_FRACTION * peak
    parts = [
        units.fraction_of(largest.rate, peak, "FLOP/s", f"measured {dtype} matmul peak")
        + f" (target at least {units.percent(MATMUL_TARGET_FRACTION)})"
    ]
    device = ceilings.env.get("device", "")
    sheet = datasheets.lookup(device)
    if sheet is not None and dtype in sheet.peaks:
        figure = sheet.peaks[dtype]
        fast = largest.rate >= MATMUL_DATASHEET_FRACTION * figure
        parts.append(
            units.fraction_of(
                largest.rate, figure, "FLOP/s", f"{sheet.product} datasheet {dtype} (dense)"
            )
            + f" (target at least {units.percent(MATMUL_DATASHEET_FRACTION)})"
        )
        against = "measured peak and datasheet"
    else:
        gap = largest.rate / ceilings.vector_peak
        fast = gap >= MATMUL_OVER_VECTOR_TARGET
        parts.append(
            f"{gap:.1f}x the measured non-matmul peak of {units.flops(ceilings.vector_peak)} "
            f"(target at least {MATMUL_OVER_VECTOR_TARGET:g}x; no datasheet known for "
            f"{device or '?'})"
        )
        against = "measured peak and non-matmul peak"
    return Check(
        f"largest {dtype} matmul ({largest.m}³) vs {against}", near_peak and fast, "; ".join(parts)
    )


def run(
    ceilings: Ceilings,
) -> tuple[Ceilings, list[MatmulPoint], opclasses.ClassTable, list[Check]]:
    """Measure the square sweep and the BERT table, and check this device's targets.

    On a GPU the matmul peaks are measured again right before the sweep
    (:func:`matmul_peaks_now`); the ceilings the sweep was compared with come
    back first.
    """
    ceilings = matmul_peaks_now(ceilings)
    points = square_sweep()
    table = bert_table()
    checks = table_checks(table)
    if ON_GPU:  # bf16, or fp16 on a GPU without bf16 (a T4)
        checks.insert(0, matmul_check(points, ceilings, tensor_core_dtype(ceilings)))
    return ceilings, points, table, checks


def main(argv: list[str] | None = None) -> int:
    from brrr.stamp import stamp

    parser = argparse.ArgumentParser(
        prog="python -m brrr.benchmarks.compute", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--json", action="store_true", help="also print the measurements as JSON")
    args = parser.parse_args(argv)

    print(pin_threads())
    ceilings = measured_ceilings()
    ceilings, points, table, checks = run(ceilings)
    print(f"Square matmuls on {DEVICE}:")
    for point in points:
        peak = ceilings.matmul_peak.get(point.dtype)
        rate = (
            units.fraction_of(point.rate, peak, "FLOP/s", f"measured {point.dtype} peak")
            if peak
            else units.flops(point.rate)
        )
        print(f"  {point.dtype:<9} n={point.n:<6} {units.seconds(point.seconds):>9}  {rate}")
    print("\nOne training step of a BERT-like encoder layer, per operator class:")
    print(table.format())
    print()
    for check in checks:
        print(check)
    print(stamp())
    if args.json:
        import json

        print(
            json.dumps(
                {
                    "matmuls": [asdict(p) for p in points],
                    "table": table.to_json(),
                    "checks": [asdict(c) for c in checks],
                },
                indent=2,
            )
        )
    if ON_GPU:  # `make gpu-check` keeps every target's figure in brrr/data/reference
        reference.record(
            "compute-benchmark",
            {"checks": [asdict(c) for c in checks], "matmuls": [asdict(p) for p in points]},
        )
    return 0 if all(check.passed for check in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
