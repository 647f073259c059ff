"""A diagnosis as text, as stamped JSON, and as a figure on this machine's measured roofline."""

from __future__ import annotations

import math

from brrr import column, units
from brrr.stamp import format_stamp

JSON_FORMAT = 1


NAME_WIDTH = 26  # a longer op name gets a line of its own, whole, above its numbers


def _share(fraction: float) -> str:
    """A share of a roof in at most five characters: a share under 0.1% reads "<0.1%"."""
    return "<0.1%" if fraction < 0.001 else units.percent(fraction)


def _ops_share(fraction: float) -> str:
    """A row's share of the time inside ops, to a tenth of a percent, in five characters."""
    return "100%" if fraction >= 0.9995 else f"{100 * fraction:.1f}%"


def _rate_cells(rate: float, fraction: float, unit: str, width: int) -> str:
    """The rate and its share of the roof, in two right-aligned columns; dashes where nothing was
    counted."""
    return (
        f"{units.si(rate, unit):>{width}} {_share(fraction):>5}"
        if rate > 0
        else f"{'-':>{width}} {'-':>5}"
    )


def _table(rows, first: str, total: float) -> list[str]:
    """One line per row, at most :data:`brrr.column.WIDTH` characters; "% ops" is the row's share of
    ``total``, the time inside all ops, so that a table of the slowest few ops shows the same shares
    as the op classes they belong to. The counted FLOPs and bytes are the rates times the time (and
    in the JSON)."""
    header = (
        f"{first:<{NAME_WIDTH}} {'time/step':>9} {'% ops':>5} {'FLOP/s':>12} {'%roof':>5} "
        f"{'B/s':>9} {'%copy':>5} {'FLOP/B':>6}  regime"
    )
    lines = [header, "-" * (len(header) + 8)]
    total = total or 1.0
    for row in rows:
        intensity = f"{row.intensity:.2g}" if row.intensity is not None else "-"
        name = row.name
        if len(name) > NAME_WIDTH:
            lines.append(name)
            name = ""
        lines.append(
            f"{name:<{NAME_WIDTH}} {units.seconds(row.seconds):>9} "
            f"{_ops_share(row.seconds / total):>5} "
            f"{_rate_cells(row.flop_rate, row.flops_fraction, 'FLOP/s', 12)} "
            f"{_rate_cells(row.byte_rate, row.bandwidth_fraction, 'B/s', 9)} {intensity:>6}  "
            f"{row.regime}"
        )
    return lines


def text(d) -> str:
    """The readable report: label and margin, step time, time split, MFU, op tables, advice,
    stamp."""
    ordered = sorted(d.shares.items(), key=lambda item: -item[1])
    (_, share), (runner_up, second) = ordered[0], ordered[1]
    launches = "kernels launched" if d.split.clock == "GPU" else "aten ops dispatched"
    ceilings = d.ceilings
    inside_ops = sum(row.seconds for row in d.rows)  # every op class: the shares of both tables
    lines = [
        f"brrr diagnose: {d.regime} ({units.percent(share)} of the step; "
        + (
            f"next {runner_up} {units.percent(second)}: {d.margin:.1f}x behind)"
            if second > 0
            else "no other regime holds any of it)"
        ),
        *(f"trust: {sentence}" for sentence in _trust_sentences(d)),
        f"step: {units.seconds(d.step_s)} median (profiler off); {d.launches_per_step:.0f} "
        f"{launches} per step",
        f"where the time goes ({d.split.clock}, {units.seconds(d.split.step_us / 1e6)} per "
        f"profiled step, {units.seconds(d.profiler_floor_s)} of it the profiler's own): "
        + ", ".join(f"{name} {units.percent(value)}" for name, value in d.split.fractions.items()),
        f"MFU: {units.percent(d.mfu)}: {units.si(d.flops_per_step, 'FLOP')} per step at "
        f"{units.flops(d.flops_per_step / d.step_s)} against {compute_roof(d)}",
        f"roofs (measured here): copy {units.bandwidth(ceilings.copy_bandwidth)}, "
        f"non-matmul {units.flops(ceilings.vector_peak)}, "
        f"dispatch {units.seconds(ceilings.dispatch_overhead)} per op",
        "",
        *_table(d.rows, "op class", inside_ops),
        "",
        *_table(d.top_ops, "slowest ops", inside_ops),
        "",
        "advice (best first):"
        if d.advice
        else "advice: none; no regime holds enough of the step to fix",
        *(f"  {index}. {item.text}{_measured(item)}" for index, item in enumerate(d.advice, 1)),
        *_trial_lines(d.trials),
        *_no_formula_lines(d, inside_ops),
    ]
    compute, bandwidth = above_the_roofs(d)
    if compute:
        lines += ["", *_above_compute_lines(d, compute)]
    if bandwidth:
        lines += [
            "",
            f"above the copy bandwidth: {bandwidth}. Their tensors fit in a cache, which serves "
            "them "
            "faster than memory (bytes here are tensor sizes, as if every one came from memory).",
        ]
    if d.compile_report is not None:
        c = d.compile_report
        lines += [
            "",
            f"torch.compile: {c['graphs']} graph(s), {c['graph_breaks']} graph break(s), "
            f"{c['ops']} ops captured, {c['recompiles']} recompile(s) over repeated calls",
        ]
        lines += [f"  break: {reason}" for reason in c["break_reasons"]]
    lines += ["", format_stamp(d.env)]
    return column.fit("\n".join(lines))


def _trust_sentences(d) -> list[str]:
    trust = getattr(d, "trust", None)
    return trust.sentences() if trust is not None else []


def compute_roof(d) -> str:
    """The roof the MFU and the contractions are divided by, named with its number: the matmul peak,
    or, where the step convolves and the convolution roof is above it, the convolution peak."""
    dtype, peak = d.matmul_dtype, units.flops(d.ceilings.matmul(d.matmul_dtype))
    if getattr(d, "matmul_peak", None):
        return (
            f"the {dtype} compute roof ({peak}: the measured convolution peak, above the matmul "
            f"peak's {units.flops(d.matmul_peak)}; the step's contractions run on both paths)"
        )
    return f"the measured {dtype} matmul peak ({peak})"


def _no_formula_lines(d, inside_ops: float) -> list[str]:
    """The ops that ran with no FLOP formula: named, with their share of the time, never a silent
    0."""
    missing = getattr(d, "no_formula", None) or {}
    if not missing:
        return []
    seconds = {row.name: row.seconds for row in d.op_rows}
    named = ", ".join(
        f"{name} ({_ops_share(seconds.get(name, 0.0) / (inside_ops or 1.0))} of the op time)"
        for name in sorted(missing, key=lambda name: -seconds.get(name, 0.0))
    )
    return [
        "",
        f"no FLOP formula: {named}. Their FLOPs are not counted (0 in the tables), so the MFU and "
        "their rows read low where they did arithmetic: please report them with this output.",
    ]


def _above_compute_lines(d, compute: str) -> list[str]:
    """What an op above its compute roof means: a counting error only where the count is not
    FlopCounterMode's own (ours replaced it, or torch counts the op as 0); where it is, the roof was
    read low: a busy moment, or a library path faster than any roof measured."""
    counted = getattr(d, "counted_as_torch", None) or {}
    rows = _over_compute_roof(d)
    suspects = [row for row in rows if not counted.get(row.name, False)]
    agreed = [row for row in rows if counted.get(row.name, False)]
    lines = []
    if suspects or (not agreed and d.mfu > 1):
        names = ", ".join(f"aten::{row.name}" for row in suspects) or _aten_names(d)
        lines.append(
            f"counting error: above the measured compute roofs: {compute}. A roof is the best "
            "this machine did on its own measurement, so no op runs above it: more FLOPs were "
            f"counted for the op than it did in its time (the FLOP formula for {names}, which is "
            "not FlopCounterMode's own, is wrong for these arguments), or its time was counted on "
            "another op. The numbers above are wrong where they use these FLOPs: please report it "
            "with this output."
        )
    if agreed:
        names = ", ".join(f"{row.name} {units.percent(row.flops_fraction)}" for row in agreed)
        lines.append(
            f"above the measured compute roof: {names}, counted as torch's FlopCounterMode counts "
            "them, so the count is not at fault: the roof was read low, in a busy moment or on a "
            "library path slower than the one this op takes, even after every roof was read again. "
            "Rates against it read high; run again on a quiet machine."
        )
    return lines


def _measured(item) -> str:
    if item.measured_gain is None or item.basis.get("measured_only"):
        return ""
    return f"; measured on this step (--try): {item.measured_gain:.2f}x"


def _trial_lines(trials) -> list[str]:
    """What ``--try`` measured, fix by fix, with what became of each."""
    if not trials:
        return []
    lines = [
        "",
        "tried on this step (--try; interleaved rounds, the median of the per-round ratios):",
    ]
    for trial in trials:
        if trial.gain is None:
            lines.append(f"  {trial.name}: {trial.what}: {trial.note}")
            continue
        unit = "examples per second" if trial.name == "batch" else "per step"
        low, high = trial.interval
        if trial.name == "dropout" and trial.no_measurable_gain:
            verdict = "dropout costs nothing measurable here"
        elif trial.name == "dropout":
            verdict = (
                f"dropout costs {units.percent(max(1 - 1 / trial.gain, 0.0))} of the step (shown, "
                "never advised: turning it off changes the model)"
            )
        elif trial.slower:
            verdict = "slower here, so not advised"
        elif trial.no_measurable_gain:
            verdict = "no measurable gain (its readings straddle 1x, inside this machine's noise)"
        else:
            verdict = "faster here"
        lines.append(
            f"  {trial.name}: {trial.what}: {trial.gain:.2f}x {unit} "
            f"(readings {low:.2f}-{high:.2f}x): {verdict}"
        )
    return lines


def above_the_roofs(d) -> tuple[str, str]:
    """What in the diagnosis ran faster than the roof it is divided by, as (compute, bandwidth); ''
    where nothing did: ('MFU 111%, convolution_backward 124%', 'element-wise 180%'). Compute: the
    MFU and each op (``d.op_rows``, every op of the step); bandwidth: the op classes."""
    compute = [f"MFU {units.percent(d.mfu)}"] if d.mfu > 1 else []
    compute += [f"{row.name} {units.percent(row.flops_fraction)}" for row in _over_compute_roof(d)]
    bandwidth = [
        f"{row.name} {units.percent(row.bandwidth_fraction)}"
        for row in d.rows
        if row.byte_rate > 0 and row.bandwidth_fraction > 1
    ]
    return ", ".join(compute), ", ".join(bandwidth)


def _over_compute_roof(d) -> list:
    return [row for row in d.op_rows if row.flop_rate > 0 and row.flops_fraction > 1]


def _aten_names(d) -> str:
    """The ops above their roof as aten names, the heaviest FLOP counts where only the MFU is
    above."""
    rows = _over_compute_roof(d) or sorted(d.op_rows, key=lambda row: -row.flops)[:2]
    return ", ".join(f"aten::{row.name}" for row in rows) or "the step's ops"


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(d) -> dict:
    """Everything in the report, machine-readable, with the stamp's fields (device, versions,
    date)."""
    return {
        "format": JSON_FORMAT,
        "env": dict(d.env),
        "stamp": format_stamp(d.env),
        "regime": d.regime,
        "shares": dict(d.shares),
        "margin": _finite(d.margin),
        "step_s": d.step_s,
        "split": d.split.to_json(),
        "profiler_floor_s": d.profiler_floor_s,
        "mfu": d.mfu,
        "matmul_dtype": d.matmul_dtype,
        "flops_per_step": d.flops_per_step,
        "launches_per_step": d.launches_per_step,
        "rows": [row.to_json() for row in d.rows],
        "top_ops": [row.to_json() for row in d.top_ops],
        "counting_errors": [
            row.name
            for row in _over_compute_roof(d)
            if not (getattr(d, "counted_as_torch", None) or {}).get(row.name, False)
        ]
        + (["MFU"] if d.mfu > 1 else []),
        "above_roof_counted_as_torch": [
            row.name
            for row in _over_compute_roof(d)
            if (getattr(d, "counted_as_torch", None) or {}).get(row.name, False)
        ],
        "no_formula": dict(getattr(d, "no_formula", None) or {}),
        "trust": d.trust.to_json() if getattr(d, "trust", None) else None,
        "convolution_peak": getattr(d, "convolution_peak", None),
        "advice": [item.to_json() for item in d.advice],
        "trials": [trial.to_json() for trial in d.trials],
        "compile_report": d.compile_report,
        "ceilings": d.ceilings.to_json(),
        "threads": d.threads,
    }


def plot(d, ax=None):
    """The step's op classes on this machine's measured roofline (matmul and non-matmul roofs),
    each marker's area proportional to its time. Classes with no FLOPs or bytes have no point."""
    from brrr import plots

    roofs = [d.ceilings.roof("matmul", d.matmul_dtype), d.ceilings.roof("vector")]
    points = [row for row in d.rows if row.intensity is not None and row.flop_rate > 0]
    ridges = [roof.ridge_point for roof in roofs]
    xs = [row.intensity for row in points]
    low = min([min(ridges) / 100] + [x / 3 for x in xs])
    high = max([max(ridges) * 100] + [x * 3 for x in xs])
    ax = plots.roofline(
        roofs,
        [],
        stamp=format_stamp(d.env),
        ax=ax,
        intensity_range=(low, high),
        title=f"{d.regime}: op classes on this machine's measured roofline",
    )
    total = sum(row.seconds for row in d.rows) or 1.0
    for row in points:
        ax.scatter(
            [row.intensity], [row.flop_rate], s=30 + 600 * row.seconds / total, alpha=0.6, zorder=3
        )
        ax.annotate(
            f"{row.name} ({units.percent(row.seconds / total)})",
            (row.intensity, row.flop_rate),
            fontsize=8,
            textcoords="offset points",
            xytext=(5, 5),
        )
    return ax
