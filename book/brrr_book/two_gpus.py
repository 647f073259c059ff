"""Two recorded GPUs, one lesson: each kernel's speed-up from one GPU to the other, predicted from
the two machines' roofs before it is measured.

An H200 is an H100's compute with more memory bandwidth. So the roofline predicts, before anything
runs: memory-bound work speeds up by the ratio of the two measured copy roofs, compute-bound work by
the ratio of the matmul roofs of its dtype, and overhead-bound work by the ratio of the hosts'
per-op floors, whatever the GPU. :func:`compare` sets that prediction beside what the two records
(``brrr/data/reference/``) measured for each kernel (:data:`KERNELS`) and judges the difference
against the noise (:func:`noise`); :func:`table` lays the rows out for a page and
:func:`sentences` says them in two sentences.

Everything is read from the records and :mod:`brrr.datasheets`; a kernel one record lacks gets a row
that says so, and fills in when a new record lands.

A record's roofs (:func:`roofs`) are the best reading of each kind it holds, as
:mod:`brrr.ceilings` keeps the best of its own readings (roofs only rise): the copy bandwidth of
its ceilings and of every figure that measured one, the matmul FLOP/s of each dtype from its
ceilings and its matmul sweep, and the host's seconds per eager op from its ceilings or, where it
has none, from its eager-op rate (``overhead/python-vs-pytorch``: the same ``a + b`` on
one-element tensors).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable

from brrr import column, datasheets, reference, roofline, units
from brrr.beside import Recorded
from brrr.roofline import ROOF_NOISE, Regime, Roof

MEMORY, COMPUTE, OVERHEAD, RIDGE = "memory", "compute", "overhead", "ridge"
HEADER = ("kernel", "regime", "predicted", "measured", "verdict")


@dataclass(frozen=True)
class Roofs:
    """One record's roofs: the best reading of each it holds, None where it holds none."""

    copy: float | None  # B/s
    matmul: dict[str, float]  # FLOP/s by dtype
    matmul_spread: dict[str, float]  # by dtype: the spread of the readings of its best one's shape
    multiply: float | None  # FLOP/s of the repeat sweep's x * 2
    floor: float | None  # host seconds per eager op


@dataclass(frozen=True)
class Gpu:
    """One GPU's record as this module reads it."""

    device: str
    data: dict = field(repr=False)

    def section(self, name: str) -> dict | None:
        return self.data.get("figures", {}).get(name, {}).get("values")

    @property
    def envs(self) -> list[dict]:
        found = [self.data.get("stamp"), self.data.get("ceilings", {}).get("env")]
        found += [figure.get("env") for figure in self.data.get("figures", {}).values()]
        return [env for env in found if env]

    @property
    def date(self) -> str:
        return min((env.get("date", "") for env in self.envs), default="")

    @property
    def stamp(self) -> str:
        env = next((env for env in self.envs if "torch" in env), {"device": self.device})
        return Recorded(self.device, {}, env).stamp

    @cached_property
    def roofs(self) -> Roofs:
        return roofs(self.data)


def gpu(name: str, data: dict) -> Gpu:
    """A record (``data``, read from ``<name>.json``) and the device its stamps name."""
    found = Gpu(name, data)
    return Gpu(next((env["device"] for env in found.envs if env.get("device")), name), data)


def _best(readings) -> float | None:
    found = [value for value in readings if isinstance(value, (int, float)) and value > 0]
    return max(found, default=None)


def _spread(readings: list[float]) -> float:
    """(largest - smallest) / largest: how far repeated readings of one measurement disagree."""
    return (max(readings) - min(readings)) / max(readings)


def matmul_readings(data: dict) -> dict[str, dict[str, list[float]]]:
    """Every matmul FLOP/s a record holds, by dtype and shape (``"4096x4096x4096"``): its ceilings'
    readings and its matmul sweep's square sizes (the unaligned sweep repeats an aligned size)."""
    ceilings = data.get("ceilings") or {}
    found: dict[str, dict[str, list[float]]] = {}
    for dtype, shapes in (ceilings.get("matmul_spread") or {}).items():
        for shape, readings in shapes.items():
            found.setdefault(dtype, {}).setdefault(shape, []).extend(readings)
    for dtype, peak in (ceilings.get("matmul_peak") or {}).items():
        shape = (ceilings.get("matmul_shape") or {}).get(dtype, "")
        if peak not in found.get(dtype, {}).get(shape, []):
            found.setdefault(dtype, {}).setdefault(shape, []).append(peak)
    sweep = (data.get("figures", {}).get("compute.matmul") or {}).get("values") or {}
    for row in sweep.get("square", []) + sweep.get("unaligned", []):
        shape = "x".join([str(row["n"])] * 3)
        found.setdefault(row["dtype"], {}).setdefault(shape, []).append(row["flop_per_s"])
    return found


def roofs(data: dict) -> Roofs:
    """The best copy, matmul (per dtype, with the spread of its shape's readings), multiply and
    host-floor readings of one record."""
    ceilings = data.get("ceilings") or {}
    figures = data.get("figures", {})
    values = [figure.get("values") or {} for figure in figures.values()]
    copy = _best([ceilings.get("copy_bandwidth")] + [v.get("copy_bandwidth") for v in values])
    matmul, spread = {}, {}
    for dtype, shapes in matmul_readings(data).items():
        readings = max(shapes.values(), key=max)  # the shape of the best reading
        matmul[dtype], spread[dtype] = max(readings), _spread(readings)
    ops = (figures.get("overhead/python-vs-pytorch") or {}).get("values") or {}
    floor = ceilings.get("dispatch_overhead") or (
        1 / ops["torch_ops_per_s"] if ops.get("torch_ops_per_s") else None
    )
    sweep = (figures.get("repeat-sweep") or {}).get("values") or {}
    return Roofs(copy, matmul, spread, sweep.get("multiply_rate"), floor)


@dataclass(frozen=True)
class Reading:
    """What one record measured of a kernel: its speed (higher is faster, in the kernel's unit)
    and the share of its own roof that speed reached, where one applies."""

    speed: float
    of_roof: float | None = None
    spread: float = 0.0  # relative spread of the record's repeated readings, where it has them


@dataclass(frozen=True)
class Kernel:
    """A measured kernel: how to read it from a record, and by which roof to predict it."""

    name: str
    kind: str  # MEMORY, COMPUTE, OVERHEAD or RIDGE: which roofs predict its ratio
    read: Callable[[Gpu], Reading | None]  # None: the record lacks it
    regime: Callable[[Gpu], str] | str = ""  # the regime on one GPU, counted; or said, with why
    dtype: str = "bfloat16"  # of a compute-bound kernel's matmul roof
    predict: Callable[[Gpu, Gpu], tuple[float | None, str]] | None = None  # in place of the roofs
    roof: str = ""  # what a reading's ``of_roof`` is a share of: "of its copy roof"
    why: Callable[[Gpu, Gpu], str] | None = None  # why a miss, where no roof share says it


@dataclass(frozen=True)
class Row:
    """One kernel's ratio, newer over older, predicted and measured, and the verdict."""

    gpus: tuple[str, str]
    kernel: str
    regime: str
    counted: bool  # the regime counted from the record, not said by the kernel
    predicted: float | None
    measured: float | None
    band: float | None  # the relative difference the noise allows
    verdict: str
    reason: str = ""  # why the prediction is not the roofs' ratio, where it is not
    why: str = ""  # why the measurement missed the prediction, where it did


def predicted_by_roofs(kind: str, dtype: str, old: Roofs, new: Roofs) -> float | None:
    """The ratio the roofs predict for a kernel of ``kind``: new over old."""

    def ratio(a, b):
        return b / a if a and b else None

    if kind == MEMORY:
        return ratio(old.copy, new.copy)
    if kind == COMPUTE:
        return ratio(old.matmul.get(dtype), new.matmul.get(dtype))
    if kind == OVERHEAD:
        return ratio(new.floor, old.floor)  # a shorter floor is a faster host
    compute, memory = ratio(old.multiply, new.multiply), ratio(old.copy, new.copy)
    return compute / memory if compute and memory else None


def noise(kernel: Kernel, readings: tuple[Reading, Reading], old: Roofs, new: Roofs) -> float:
    """The relative difference between prediction and measurement that the noise allows: the
    spreads of the two records' repeated readings of the kernel, and of the matmul roofs that
    predict a compute-bound one, added; never less than :data:`~brrr.roofline.ROOF_NOISE`, the
    noise a measured roof carries on its own."""
    found = sum(reading.spread for reading in readings)
    if kernel.kind == COMPUTE and kernel.predict is None:
        found += old.matmul_spread.get(kernel.dtype, 0.0) + new.matmul_spread.get(kernel.dtype, 0.0)
    return max(ROOF_NOISE, found)


def judge(kernel: Kernel, old: Gpu, new: Gpu) -> Row:
    """``kernel``'s row for the pair: the prediction, the measurement, and whether they agree within
    the :func:`noise`."""
    if kernel.predict is not None:
        predicted, reason = kernel.predict(old, new)
    else:
        predicted, reason = predicted_by_roofs(kernel.kind, kernel.dtype, old.roofs, new.roofs), ""
    readings = kernel.read(old), kernel.read(new)
    regime = _regime(kernel, [g for g, found in zip((old, new), readings) if found])
    counted = kernel.kind == RIDGE or not isinstance(kernel.regime, str)  # a ridge is no regime
    row = Row((old.device, new.device), kernel.name, regime, counted, predicted, None, None, "")
    row = replace(row, reason=reason)
    lacking = [g.device for g, found in zip((old, new), readings) if found is None]
    if lacking:
        return replace(row, verdict=f"not recorded on {' or '.join(lacking)} yet")
    before, after = readings
    measured = after.speed / before.speed
    band = noise(kernel, readings, old.roofs, new.roofs)
    if predicted is None:
        return replace(row, measured=measured, band=band, verdict="no prediction")
    if abs(measured / predicted - 1) <= band:
        return replace(row, measured=measured, band=band, verdict="within the noise")
    why = _why_missed(kernel, (old, new), readings)
    return replace(row, measured=measured, band=band, verdict="missed", why=why)


def _regime(kernel: Kernel, gpus: list[Gpu]) -> str:
    """The kernel's regime: counted on each GPU that has it (a difference is said), or as the
    kernel says where it is not counted or no GPU has it."""
    if isinstance(kernel.regime, str) or not gpus:
        return kernel.regime if isinstance(kernel.regime, str) else f"{kernel.kind}-bound"
    found = list(dict.fromkeys(kernel.regime(g) for g in gpus))
    return found[0] if len(found) == 1 else " on one, ".join(found) + " on the other"


def _why_missed(kernel: Kernel, gpus: tuple[Gpu, Gpu], readings: tuple[Reading, Reading]) -> str:
    """Why a ratio missed its prediction: the kernel's own reason, or each GPU's share of its own
    roof, which the prediction assumes equal on both."""
    if kernel.why is not None:
        return kernel.why(*gpus)
    shares = [reading.of_roof for reading in readings]
    if None in shares:
        return "its two readings did not scale with the roofs that predict it"
    (a, b), (x, y) = (short(g.device) for g in gpus), (units.percent(share) for share in shares)
    return f"{a} reached {x} {kernel.roof}, {b} {y}; the prediction assumes the same on both"


def compare(
    older: tuple[str, dict] | None = None, newer: tuple[str, dict] | None = None, *, folder=None
) -> list[Row]:
    """Every kernel's row for ``older`` and ``newer`` (each ``(name, record)``), or, by default, for
    every pair of the committed records, the older record first (by the earliest date it holds)."""
    if older is not None and newer is not None:
        pairs = [(gpu(*older), gpu(*newer))]
    else:
        gpus = sorted(
            (gpu(name, data) for name, data in reference.load_all(folder).items()),
            key=lambda g: (g.date, g.device),
        )
        pairs = list(itertools.combinations(gpus, 2))
    return [judge(kernel, old, new) for old, new in pairs for kernel in KERNELS]


# ------------------------------------------------------------------------------ the kernels


def _datasheets(what: Callable[[datasheets.Datasheet], float | None], roof: str):
    """A prediction from the two datasheets (``what`` of each): for a kernel that is a roof itself,
    which the measured roofs cannot predict without predicting themselves."""

    def predict(old: Gpu, new: Gpu) -> tuple[float | None, str]:
        sheets = [datasheets.lookup(g.device) for g in (old, new)]
        found = [what(sheet) if sheet else None for sheet in sheets]
        if None in found:
            return None, f"no prediction: the {roof} is itself a roof, and a datasheet lacks it"
        return found[1] / found[0], f"predicted from the datasheets: the {roof} is itself a roof"

    return predict


def _sheet_share(g: Gpu, value: float, what) -> float | None:
    sheet = datasheets.lookup(g.device)
    return value / what(sheet) if sheet and what(sheet) else None


def _bandwidth(sheet):
    return sheet.bandwidth


def _bf16_peak(sheet):
    return sheet.peaks.get("bfloat16")


def _copy(g: Gpu) -> Reading | None:
    found = g.roofs.copy
    return Reading(found, _sheet_share(g, found, _bandwidth)) if found else None


def _matmul(g: Gpu) -> Reading | None:
    """The best bf16 matmul reading, with the spread of the record's readings of its shape."""
    found = g.roofs.matmul.get("bfloat16")
    if not found:
        return None
    return Reading(found, _sheet_share(g, found, _bf16_peak), g.roofs.matmul_spread["bfloat16"])


def _of_copy(g: Gpu, bandwidth: float) -> Reading:
    return Reading(bandwidth, bandwidth / g.roofs.copy if g.roofs.copy else None)


def _fused_chain(g: Gpu) -> Reading | None:
    found = g.section("lab-02-fuse-it")
    return _of_copy(g, found["fused_bandwidth"]) if found else None


def _cos_cos(g: Gpu) -> Reading | None:
    found = g.section("cos-cos")
    return _of_copy(g, found["compiled x.cos().cos()"]["bandwidth"]) if found else None


def _softmax(g: Gpu) -> Reading | None:
    """The Triton softmax's best bandwidth over the row widths the page sweeps."""
    found = g.section("triton-softmax")
    return _of_copy(g, max(found["Triton softmax"])) if found else None


FLOOR_POINTS = 3  # the sweep's flat part: its smallest repeat counts, as its measured knee reads it


def _flat_points(values: dict) -> list[tuple[int, float]]:
    return sorted((int(r), s) for r, s in values["seconds"].items())[:FLOOR_POINTS]


def _flat(g: Gpu) -> Reading | None:
    """The repeat sweep's flat level, as a bandwidth: its fastest of the smallest repeat counts,
    with their spread."""
    found = g.section("repeat-sweep")
    if not found:
        return None
    times = [seconds for _, seconds in _flat_points(found)]
    moved = 2 * 4 * found["n"]  # fp32 x = x * 2: reads 4n bytes, writes 4n bytes
    return replace(_of_copy(g, moved / min(times)), spread=max(times) / min(times) - 1)


def _flat_regime(g: Gpu) -> str:
    """Counted: the most repeats of the flat part, n elements, against the sweep's multiply roof."""
    found = g.section("repeat-sweep")
    repeats = _flat_points(found)[-1][0]
    roof = Roof(found["multiply_rate"], g.roofs.copy)
    return str(roofline.regime(repeats * found["n"], 2 * 4 * found["n"], roof))


def _knee(g: Gpu) -> Reading | None:
    """The sweep's measured knee, and its share of the knee its own roofs predict."""
    found = g.section("repeat-sweep")
    if not found:
        return None
    return Reading(
        found["knee_measured"], found["knee_measured"] / found["knee_predicted_multiply"]
    )


def _longest(values: dict) -> dict:
    """Notebook 22's attention row at its longest sequence."""
    return max(values["attention"], key=lambda row: row["seq"])


def _attention(g: Gpu) -> Reading | None:
    """Attention at the longest sequence notebook 22 runs, against the matmul roof of its dtype."""
    found = g.section("compute.layer_intensity")
    if not found:
        return None
    rate, peak = _longest(found)["flop_per_s"], g.roofs.matmul.get(found["dtype"])
    return Reading(rate, rate / peak if peak else None)


def _attention_regime(g: Gpu) -> str:
    """Counted: the record's intensity against the ridge of its dtype's matmul roof."""
    found = g.section("compute.layer_intensity")
    peak = g.roofs.matmul.get(found["dtype"])
    if not peak:
        return f"no {found['dtype']} roof"
    return str(roofline.regime(_longest(found)["intensity"], 1.0, Roof(peak, g.roofs.copy)))


def _flash(g: Gpu) -> Reading | None:
    """Lab 6's kernel at its longest sequence: n² over its seconds (its FLOPs, 4·batch·heads·d·n²,
    up to the constant the two records share)."""
    found = g.section("lab-06-flash-attention")
    if not found or not found.get("yours"):
        return None
    return Reading(found["sizes"][-1] ** 2 / found["yours"][-1])


def _floor(g: Gpu) -> Reading | None:
    floor = g.roofs.floor
    return Reading(1 / floor) if floor else None


def _same_floor(old: Gpu, new: Gpu) -> tuple[float, str]:
    return 1.0, "predicted unchanged: the floor is host time, which the GPU does not enter"


def _hosts_differ(old: Gpu, new: Gpu) -> str:
    said = ", ".join(f"{units.seconds(g.roofs.floor)} on {short(g.device)}" for g in (old, new))
    return f"the hosts differ: an eager op took {said}; the records do not name their CPUs"


def _start(g: Gpu) -> Reading | None:
    """The capstone's first stage (batch 1, eager): tokens per second, and its overhead share."""
    found = g.section("capstone")
    if not found or not found.get("rows"):
        return None
    row = found["rows"][0]
    return Reading(row["tokens_per_s"], row.get("shares", {}).get(str(Regime.OVERHEAD)))


def _overhead_share(old: Gpu, new: Gpu) -> str:
    shares = {short(g.device): _start(g).of_roof for g in (old, new)}
    if None in shares.values():
        return "it did not follow the hosts' floors, and a record lacks the step's overhead share"
    said = ", ".join(f"{units.percent(share)} on {name}" for name, share in shares.items())
    return f"the step was overhead-bound for {said} of its time; the prediction assumes all of it"


def _start_regime(g: Gpu) -> str:
    """The regime the diagnosis found for the capstone's first stage, as recorded."""
    return g.section("capstone")["rows"][0]["regime"]


COPY_SHARE = "of its copy roof"
KERNELS = (
    Kernel(
        "copy",
        MEMORY,
        _copy,
        str(Regime.MEMORY),
        predict=_datasheets(_bandwidth, "copy bandwidth"),
        roof="of its datasheet's bandwidth",
    ),
    Kernel("fused chain (Lab 2)", MEMORY, _fused_chain, str(Regime.MEMORY), roof=COPY_SHARE),
    Kernel("fused x.cos().cos() (nb 10)", MEMORY, _cos_cos, str(Regime.MEMORY), roof=COPY_SHARE),
    Kernel("Triton softmax (nb 12)", MEMORY, _softmax, str(Regime.MEMORY), roof=COPY_SHARE),
    Kernel("repeat sweep's flat part", MEMORY, _flat, _flat_regime, roof=COPY_SHARE),
    Kernel(
        "repeat sweep's ridge",
        RIDGE,
        _knee,
        "the ridge",
        roof="of the knee its own roofs predict",
    ),
    Kernel(
        "bf16 matmul",
        COMPUTE,
        _matmul,
        str(Regime.COMPUTE),
        predict=_datasheets(_bf16_peak, "bf16 matmul peak"),
        roof="of its datasheet's bf16 peak",
    ),
    Kernel(
        "attention (nb 22)",
        COMPUTE,
        _attention,
        _attention_regime,
        roof="of its bf16 matmul roof",
    ),
    Kernel("FlashAttention (Lab 6)", COMPUTE, _flash, str(Regime.COMPUTE), dtype="float16"),
    Kernel(
        "overhead floor",
        OVERHEAD,
        _floor,
        str(Regime.OVERHEAD),
        predict=_same_floor,
        why=_hosts_differ,
    ),
    Kernel("capstone's start", OVERHEAD, _start, _start_regime, why=_overhead_share),
)


# ------------------------------------------------------------------------------ what a page shows


def short(device: str) -> str:
    """A GPU's name in a table's narrow column: ``NVIDIA H100 80GB HBM3`` is ``H100``."""
    return device.removeprefix("NVIDIA ").split()[0] if device.strip() else device


def _ratio(value: float | None) -> str:
    return "-" if value is None else units.ratio(value)


def _verdict(row: Row) -> str:
    band = f"(±{units.percent(row.band)})" if row.band is not None else ""
    if row.verdict == "within the noise":
        return f"within the noise {band}"
    if row.verdict == "missed":
        return f"missed by {units.percent(abs(row.measured / row.predicted - 1))} {band}"
    for device in row.gpus:
        row = replace(row, verdict=row.verdict.replace(device, short(device)))
    return row.verdict


def table(rows: list[Row], gpus: dict[str, Gpu] | None = None) -> str:
    """The rows of each pair as a table of at most 100 characters a line: kernel, regime, the
    predicted and measured ratio, the verdict; each reason once under it, then each record's
    stamp (``gpus``: by device, default the committed records)."""
    if not rows:
        return "Fewer than two GPUs are recorded: no pair to compare (make gpu-check records one)."
    gpus = gpus or {g.device: g for g in (gpu(*item) for item in reference.load_all().items())}
    blocks = []
    for pair in dict.fromkeys(row.gpus for row in rows):
        blocks.append(_pair_table([row for row in rows if row.gpus == pair], gpus))
    return "\n\n".join(blocks)


def _pair_table(rows: list[Row], gpus: dict[str, Gpu]) -> str:
    old, new = rows[0].gpus
    lines = [
        f"{short(new)} over {short(old)}: each kernel's speed-up, predicted from the roofs, then "
        "measured",
        f"{HEADER[0]:<30}{HEADER[1]:<15}{HEADER[2]:>9}{HEADER[3]:>10}  {HEADER[4]}",
    ]
    notes = []
    for row in rows:
        said = [row.reason] * bool(row.reason) + [f"missed: {row.why}"] * bool(row.why)
        mark = f" [{len(notes) + 1}]" if said else ""
        notes += [f"[{len(notes) + 1}] {row.kernel}: " + "; ".join(said) + "."] if said else []
        regime = row.regime + ("" if row.counted else "*")
        lines.append(
            f"{row.kernel + mark:<30}{regime:<15}{_ratio(row.predicted):>9}"
            f"{_ratio(row.measured):>10}  {_verdict(row)}"
        )
    notes.append(
        "*: said, not counted: a roof's own regime, or the one the kernel's page states where the "
        "record counts no FLOPs for it"
    )
    notes.append(
        "±: the noise allowed: the spreads of the records' repeated readings of the kernel (and of "
        "the matmul roofs, for a compute-bound prediction), added, and at least the "
        f"{units.percent(ROOF_NOISE)} a measured roof carries on its own"
    )
    stamps = [gpus[device].stamp for device in (old, new) if device in gpus]
    return column.fit("\n".join(lines + notes + stamps))


def sentences(rows: list[Row]) -> dict[str, str]:
    """The section's glued sentences, by key, each said for every pair: ``datasheets`` (the two
    GPUs' printed roofs), ``gains`` (each measured ratio beside its prediction) and ``verdicts``
    (which fell within the noise, which missed, which wait for a record)."""
    pairs = list(dict.fromkeys(row.gpus for row in rows))
    if not pairs:
        none = "Fewer than two GPUs are recorded yet, so there is no pair to compare."
        return {"datasheets": none, "gains": "", "verdicts": ""}
    mine = [[row for row in rows if row.gpus == pair] for pair in pairs]
    return {
        "datasheets": " ".join(_printed(*pair) for pair in pairs),
        "gains": " ".join(_gains(found) for found in mine),
        "verdicts": " ".join(_verdicts(found) for found in mine),
    }


def _printed(old: str, new: str) -> str:
    """What the two datasheets print: memory bandwidth and dense bf16 matmul peak."""
    sheets = [datasheets.lookup(device) for device in (old, new)]
    if None in sheets or None in (sheet.bandwidth for sheet in sheets):
        return f"No datasheet figure is at hand for both the {short(old)} and the {short(new)}."
    (a, b), (p, q) = (s.bandwidth for s in sheets), (s.peaks.get("bfloat16") for s in sheets)
    peaks = f"the same {units.flops(p)}" if p == q else f"{units.flops(q)} against {units.flops(p)}"
    return (
        f"Their datasheets print {units.bandwidth(b)} of memory bandwidth on the {short(new)} "
        f"against {units.bandwidth(a)} on the {short(old)}, and {peaks} of dense bf16 matmul."
    )


def _gains(rows: list[Row]) -> str:
    """Each measured ratio beside its prediction, in the table's order, in one sentence."""
    old, new = (short(device) for device in rows[0].gpus)
    said = [
        f"{row.kernel} {_ratio(row.measured)} ({_ratio(row.predicted)})"
        for row in rows
        if row.measured is not None
    ]
    if not said:
        return f"No kernel is recorded on both the {old} and the {new} yet."
    return f"The {new} over the {old}, measured (predicted): {_listed(said)}."


def _verdicts(rows: list[Row]) -> str:
    measured = [row for row in rows if row.measured is not None]
    within = [row.kernel for row in measured if row.verdict == "within the noise"]
    missed = [row.kernel for row in measured if row.verdict == "missed"]
    waiting = [row.kernel for row in rows if row.measured is None]
    said = [f"{len(within)} of the {len(measured)} measured ratios fell within the noise"]
    if missed:
        said.append(f"{_listed(missed)} missed, each for the reason under the table")
    if waiting:
        said.append(f"{_listed(waiting)} wait for a record on both GPUs")
    return "; ".join(said) + "."


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
