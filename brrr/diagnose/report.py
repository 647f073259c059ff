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
    """The rate and its share of the roof, in two right-aligned columns; dashes where nothing was counted."""
    return (
        f"{units.si(rate, unit):>{width}} {_share(fraction):>5}"
        if rate > 0
        else f"{'-':>{width}} {'-':>5}"
    )


def _table(rows, first: str, total: float) -> list[str]:
    """One line per row, at most :data:`brrr.column.WIDTH` characters; "% ops" is the row's share of
    ``total``, the time inside all ops, so that a table of the slowest few ops shows the same shares as the
    op classes they belong to. The counted FLOPs and bytes are the rates times the time (and in the JSON)."""
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
            f"{name:<{NAME_WIDTH}} {units.seconds(row.seconds):>9} {_ops_share(row.seconds / total):>5} "
            f"{_rate_cells(row.flop_rate, row.flops_fraction, 'FLOP/s', 12)} "
            f"{_rate_cells(row.byte_rate, row.bandwidth_fraction, 'B/s', 9)} {intensity:>6}  {row.regime}"
        )
    return lines


def text(d) -> str:
    """The readable report: label and margin, step time, time split, MFU, op tables, advice, stamp."""
    ordered = sorted(d.shares.items(), key=lambda item: -item[1])
    (_, share), (runner_up, second) = ordered[0], ordered[1]
    launches = "kernels launched" if d.split.clock == "GPU" else "aten ops dispatched"
    ceilings = d.ceilings
    inside_ops = sum(row.seconds for row in d.rows)  # every op class: the shares of both tables
    lines = [
        f"brrr diagnose: {d.regime} ({units.percent(share)} of the step; next {runner_up} "
        f"{units.percent(second)}: {d.margin:.1f}x behind)",
        f"step: {units.seconds(d.step_s)} median (profiler off); {d.launches_per_step:.0f} {launches} per step",
        f"where the time goes ({d.split.clock}, {units.seconds(d.split.step_us / 1e6)} per profiled step, "
        f"{units.seconds(d.profiler_floor_s)} of it the profiler's own): "
        + ", ".join(f"{name} {units.percent(value)}" for name, value in d.split.fractions.items()),
        f"MFU: {units.percent(d.mfu)}: {units.si(d.flops_per_step, 'FLOP')} per step at "
        f"{units.flops(d.flops_per_step / d.step_s)} against the measured {d.matmul_dtype} matmul peak "
        f"({units.flops(ceilings.matmul(d.matmul_dtype))})",
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
    ]
    compute, bandwidth = above_the_roofs(d)
    if compute:
        lines += [
            "",
            f"counting error: above the measured compute roofs: {compute}. A roof is the best this machine "
            "did on its own measurement, so no op runs above it: more FLOPs were counted for the op than it "
            f"did in its time (the FLOP formula for {_aten_names(d)} is wrong for these arguments), or its time "
            "was counted on another op. The numbers above are wrong where they use these FLOPs: please "
            "report it with this output.",
        ]
    if bandwidth:
        lines += [
            "",
            f"above the copy bandwidth: {bandwidth}. Their tensors fit in a cache, which serves them "
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
        if trial.name == "dropout":
            verdict = (
                f"dropout costs {units.percent(max(1 - 1 / trial.gain, 0.0))} of the step (shown, never advised: "
                "turning it off changes the model)"
            )
        elif trial.slower:
            verdict = "slower here, so not advised"
        else:
            verdict = "faster here"
        lines.append(f"  {trial.name}: {trial.what}: {trial.gain:.2f}x {unit}: {verdict}")
    return lines


def above_the_roofs(d) -> tuple[str, str]:
    """What in the diagnosis ran faster than the roof it is divided by, as (compute, bandwidth); '' where
    nothing did: ('MFU 111%, convolution_backward 124%', 'element-wise 180%'). Compute: the MFU and each
    op (``d.op_rows``, every op of the step); bandwidth: the op classes."""
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
    """The ops above their roof as aten names, the heaviest FLOP counts where only the MFU is above."""
    rows = _over_compute_roof(d) or sorted(d.op_rows, key=lambda row: -row.flops)[:2]
    return ", ".join(f"aten::{row.name}" for row in rows) or "the step's ops"


def _threads_flag(d) -> str:
    threads = d.ceilings.threads
    return f" --threads {threads}" if threads else ""


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(d) -> dict:
    """Everything in the report, machine-readable, with the stamp's fields (device, versions, date)."""
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
        "counting_errors": [row.name for row in _over_compute_roof(d)]
        + (["MFU"] if d.mfu > 1 else []),
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
