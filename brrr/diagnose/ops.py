"""Per op and per op class: time, FLOPs, bytes, achieved rates against the measured roofs, and
regime.

Each aten op of the step gets a row from three measurements of the same step:
its self time from the profiler (device time on a GPU), its FLOPs
(:func:`brrr.opclasses.count_flops`) and its bytes (the tensors it reads and
writes, :class:`brrr.diagnose.profile.TrafficLog`). Rates are divided by this
machine's measured roofs (:mod:`brrr.ceilings`): contractions by the matmul peak
of the step's matmul dtype, every other op by the non-matmul (vector) peak, and
bytes by the measured copy bandwidth.

The regime of an op is :func:`brrr.roofline.regime` of one average call
(FLOPs and bytes per call) against that roof, whose overhead floor is the
measured dispatch overhead: an op whose work takes less time than dispatching it
is overhead-bound. On a CPU, ops with neither FLOPs nor bytes (views, wrappers
such as ``aten::linear`` whose self time is dispatch only, autograd bookkeeping)
are overhead-bound by definition (see :func:`op_regime` for a GPU).

Random numbers, sorting and indexing (:data:`brrr.opclasses.IRREGULAR`) form a class of their own,
:data:`IRREGULAR_CLASS`; where they run under :data:`FAR_BELOW` of both roofs their regime is
:data:`BELOW_ROOFS`: neither roof sets their speed, so neither regime's fix helps them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, replace

from brrr import roofline
from brrr.ceilings import Ceilings
from brrr.opclasses import (
    ALL_CLASSES,
    IRREGULAR,
    NORMALIZATION_WRAPPERS,
    OpClass,
    classify,
    op_name,
)
from brrr.roofline import Regime, Roof

# Random numbers, sorting and indexing (brrr.opclasses.IRREGULAR): a class of their own here, and,
# where they run far below both roofs, a regime of their own, which neither fusion nor a faster
# matmul moves.
IRREGULAR_CLASS = "random, sort and index"
BELOW_ROOFS = "below roofs"  # both of them: the compute roof and the copy bandwidth
FAR_BELOW = 0.1  # of the compute roof and of the copy bandwidth alike
REGIMES = tuple(regime.value for regime in Regime) + (BELOW_ROOFS,)
CLASS_ORDER = (
    OpClass.CONTRACTION.value,
    OpClass.NORMALIZATION.value,
    OpClass.ELEMENTWISE.value,
    IRREGULAR_CLASS,
    OpClass.OTHER.value,
)


@dataclass(frozen=True)
class OpRow:
    """One op (or one op class): per step, with rates as fractions of the measured roofs."""

    name: str
    op_class: str
    calls: float  # per step
    seconds: float  # per step (self time; device time on a GPU)
    flops: float  # per step
    bytes: float  # per step, tensors read and written
    regime: str
    roof: str  # which compute roof it is measured against

    peak_flops: float  # FLOP/s of that roof
    bandwidth: float  # B/s, measured copy bandwidth

    @property
    def flop_rate(self) -> float:
        return self.flops / self.seconds if self.seconds > 0 else 0.0

    @property
    def byte_rate(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def flops_fraction(self) -> float:
        """Achieved FLOP/s as a fraction of the measured compute roof."""
        return self.flop_rate / self.peak_flops

    @property
    def bandwidth_fraction(self) -> float:
        """Achieved B/s (tensor bytes over time) as a fraction of the measured copy bandwidth."""
        return self.byte_rate / self.bandwidth

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte; None for an op that moved no bytes."""
        return self.flops / self.bytes if self.bytes > 0 else None

    def to_json(self) -> dict:
        return {
            **asdict(self),
            "flop_rate": self.flop_rate,
            "byte_rate": self.byte_rate,
            "flops_fraction": self.flops_fraction,
            "bandwidth_fraction": self.bandwidth_fraction,
            "intensity": self.intensity,
        }


def roof_for(op_class: OpClass, ceilings: Ceilings, matmul_dtype: str) -> Roof:
    """The matmul roof of the step's dtype for contractions, the vector roof for everything else."""
    if op_class is OpClass.CONTRACTION:
        return ceilings.roof("matmul", matmul_dtype)
    return ceilings.roof("vector")


def op_regime(flops_per_call: float, bytes_per_call: float, roof: Roof) -> Regime:
    """The regime of one call. With no work counted: on a CPU (``roof.overhead_adds``) the op's time
    is dispatch (views, wrappers, bookkeeping): overhead. On a GPU its time is device time, which
    only kernels spend, and a kernel we counted nothing for moves data (a copy nested in another op,
    a fill, kernels the profiler tied to no op): memory-bound."""
    if bytes_per_call <= 0 and flops_per_call <= 0:
        return Regime.OVERHEAD if roof.overhead_adds else Regime.MEMORY
    return roofline.regime(flops_per_call, max(bytes_per_call, 1.0), roof)


def _row(
    name: str,
    op_class: OpClass,
    calls: float,
    seconds: float,
    flops: float,
    bytes_: float,
    ceilings: Ceilings,
    matmul_dtype: str,
    irregular: bool = False,
) -> OpRow:
    """One row; ``irregular`` rows (:data:`IRREGULAR_CLASS`) far below both roofs get
    :data:`BELOW_ROOFS`."""
    roof = roof_for(op_class, ceilings, matmul_dtype)
    per_call = max(calls, 1.0)
    found = op_regime(flops / per_call, bytes_ / per_call, roof).value
    label = IRREGULAR_CLASS if irregular else op_class.value
    row = OpRow(
        name,
        label,
        calls,
        seconds,
        flops,
        bytes_,
        found,
        roof.label,
        roof.peak_flops,
        roof.bandwidth,
    )
    far_below = row.flops_fraction < FAR_BELOW and row.bandwidth_fraction < FAR_BELOW
    if irregular and found != Regime.OVERHEAD.value and far_below:
        row = replace(row, regime=BELOW_ROOFS)
    return row


def op_rows(
    seconds: dict[str, float],
    flops: dict[str, float],
    bytes_: dict[str, float],
    calls: dict[str, float],
    ceilings: Ceilings,
    matmul_dtype: str,
) -> list[OpRow]:
    """One row per op, slowest first. Keys: profiler names (``aten::addmm``) or bare names
    (``addmm``)."""

    def key(name: str) -> str:
        return op_name(name) if name.startswith("aten::") else name

    merged: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for source, field in (
        (seconds, "seconds"),
        (flops, "flops"),
        (bytes_, "bytes"),
        (calls, "calls"),
    ):
        for name, value in source.items():
            merged[key(name)][field] += value
    rows = []
    for name, values in merged.items():
        is_aten = name in calls or name in flops or name in bytes_ or f"aten::{name}" in seconds
        op_class = classify(f"aten::{name}" if is_aten else name) or OpClass.OTHER
        if (
            name in NORMALIZATION_WRAPPERS
        ):  # aten::layer_norm around aten::native_layer_norm: dispatch only
            op_class = OpClass.OTHER
        rows.append(
            _row(
                name,
                op_class,
                values["calls"],
                values["seconds"],
                values["flops"],
                values["bytes"],
                ceilings,
                matmul_dtype,
                irregular=name in IRREGULAR,
            )
        )
    return sorted(rows, key=lambda row: -row.seconds)


def class_rows(rows: list[OpRow], ceilings: Ceilings, matmul_dtype: str) -> list[OpRow]:
    """The op rows summed per class, in the essay's order (:data:`CLASS_ORDER`); each class's regime
    from its average call."""
    out = []
    for label in CLASS_ORDER:
        members = [row for row in rows if row.op_class == label]
        if not members:
            continue
        irregular = label == IRREGULAR_CLASS
        op_class = OpClass.ELEMENTWISE if irregular else OpClass(label)
        totals = [
            sum(getattr(row, name) for row in members)
            for name in ("calls", "seconds", "flops", "bytes")
        ]
        out.append(_row(label, op_class, *totals, ceilings, matmul_dtype, irregular=irregular))
    return out


def seconds_by_regime(rows: list[OpRow]) -> dict[str, float]:
    """Seconds per step of the ops in each regime (each op counted in its own regime)."""
    totals = {regime: 0.0 for regime in REGIMES}
    for row in rows:
        totals[row.regime] += row.seconds
    return totals


COMPILED_CODE = ("## Call CompiledFxGraph", "CompiledFunction")
FUSED_NAME = "fused kernels (torch.compile)"


def is_compiled_code(name: str) -> bool:
    """A profiler row that runs ``torch.compile``'s generated code: the call into a compiled graph,
    or one of its kernels (recorded only with ``torch._inductor.config.cpp.enable_kernel_profile``
    on a CPU)."""
    return name.startswith(COMPILED_CODE) or "cpp_fused" in name or name.startswith("triton_")


def merge_compiled(rows: list[OpRow], ceilings: Ceilings, matmul_dtype: str) -> list[OpRow]:
    """Give a compiled step's generated code the work it does.

    The FLOPs and bytes are counted on the eager ops (:mod:`brrr.diagnose.profile`), while the
    profile of a compiled step shows its fused kernels only as time inside the compiled call. The
    ops that did work but took no profiled time ran inside that code: their FLOPs and bytes (the
    unfused bytes, an upper bound on what the fused kernels move) go to one row, :data:`FUSED_NAME`,
    with the compiled code's time, in the class that holds most of those FLOPs. Steps with no
    compiled code are returned unchanged.
    """
    code = [row for row in rows if is_compiled_code(row.name)]
    if not code:
        return rows
    unseen = [row for row in rows if row.seconds <= 0 and (row.flops > 0 or row.bytes > 0)]
    kept = [row for row in rows if row not in code and row not in unseen]
    by_class: dict[str, float] = defaultdict(float)
    for row in unseen:
        by_class[row.op_class] += row.flops + row.bytes
    classes = {op_class.value: op_class for op_class in ALL_CLASSES} | {
        IRREGULAR_CLASS: OpClass.ELEMENTWISE
    }
    main_class = classes[max(by_class, key=by_class.get)] if by_class else OpClass.OTHER
    fused = _row(
        FUSED_NAME,
        main_class,
        1.0,
        sum(row.seconds for row in code),
        sum(r.flops for r in unseen),
        sum(r.bytes for r in unseen),
        ceilings,
        matmul_dtype,
    )
    return sorted(kept + [fused], key=lambda row: -row.seconds)
