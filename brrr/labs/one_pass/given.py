"""Lab 3's given material: the references, the unfused versions, inputs, and the comparison to plot.

The student's process imports this module (through :mod:`brrr.labs.one_pass`). The checks
(:mod:`brrr.labs.one_pass.checks`) import from it, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from brrr import reference
from brrr.checks import core
from brrr.device import DEVICE, ON_GPU, far_above_cache, memory_bounded

KINDS = ("softmax", "layer_norm")
WIRE_TYPES: dict[str, type] = {}

EPS = 1e-5  # layer norm's epsilon, as F.layer_norm's default


# ---------------------------------------------------------------- the given material


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim, accumulated in float32, returned in x's dtype: what the grader
    compares with."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def layer_norm_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Layer norm over the last dim (biased variance, eps = EPS), in float64, returned in x's dtype:
    exact to the output's rounding, so a correct float32 kernel is off only by its own rounding. In
    float32 the reference's own rounding added to it: a correct kernel missed by 1.03e-5 against
    1e-5 on a row of 4097 values near 30 (the rows far from zero), where x - mean loses digits."""
    return F.layer_norm(x.double(), (x.shape[-1],), weight.double(), bias.double(), EPS).to(x.dtype)


def softmax_unfused(x: torch.Tensor) -> torch.Tensor:
    """Softmax written as separate eager ops: each line is its own kernel."""
    m = x.amax(dim=-1, keepdim=True)  # the row maximum
    z = x - m  # shifted: every value <= 0, so exp cannot overflow
    e = torch.exp(z)
    s = e.sum(dim=-1, keepdim=True)  # the row sum
    return e / s


def layer_norm_unfused(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Layer norm written as separate eager ops: each line is its own kernel (two on the rsqrt
    line)."""
    mean = x.mean(dim=-1, keepdim=True)  # the row mean
    d = x - mean
    sq = d * d
    var = sq.mean(dim=-1, keepdim=True)  # the biased variance: divided by cols
    rstd = torch.rsqrt(var + EPS)  # one value per row
    y = d * rstd
    y = y * weight  # weight and bias: one value per column
    return y + bias


UNFUSED = {"softmax": softmax_unfused, "layer_norm": layer_norm_unfused}
FUSED_TORCH = {
    "softmax": lambda x: torch.softmax(x, dim=-1),
    "layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS),
}


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Rows:
    """One case of a correctness or traffic check: ``rows × cols`` of ``dtype``, with the hard rows
    planted."""

    rows: int
    cols: int
    dtype: str = "float32"
    planted: bool = True

    def __str__(self) -> str:
        return f"{self.rows:,} row{'s' if self.rows != 1 else ''} of {self.cols:,} {self.dtype}"

    @property
    def numel(self) -> int:
        return self.rows * self.cols

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


def make_softmax_inputs(case: Rows, generator: torch.Generator) -> tuple[torch.Tensor]:
    """x for a softmax case: N(0, 3²) on the device, with :data:`SOFTMAX_HARD_ROWS` planted."""
    on_device = core.device_generator(generator)
    x = torch.randn(case.rows, case.cols, generator=on_device, device=DEVICE) * 3
    if case.planted:
        if case.rows > 0:
            x[0] += 1000.0
        if case.rows > 1:
            x[1] -= 1000.0
        if case.rows > 2 and case.cols > 1:
            x[2, 1::3] = float("-inf")  # column 0 stays finite
    return (x.to(case.torch_dtype),)


def make_layer_norm_inputs(case: Rows, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """x, weight and bias for a layer-norm case, with :data:`LAYER_NORM_HARD_ROWS` planted in x."""
    on_device = core.device_generator(generator)
    x = torch.randn(case.rows, case.cols, generator=on_device, device=DEVICE) * 2 + 0.5
    weight = 1 + 0.5 * torch.randn(case.cols, generator=on_device, device=DEVICE)
    bias = 0.5 * torch.randn(case.cols, generator=on_device, device=DEVICE)
    if case.planted:
        if case.rows > 0:
            x[0] = 30 + torch.randn(case.cols, generator=on_device, device=DEVICE)
        if case.rows > 1:
            x[1] = 0.01 * torch.randn(case.cols, generator=on_device, device=DEVICE)
        if case.rows > 2:
            x[2] = -30 + 5 * torch.randn(case.cols, generator=on_device, device=DEVICE)
    dtype = case.torch_dtype
    return x.to(dtype), weight.to(dtype), bias.to(dtype)


MAKE_INPUTS = {"softmax": make_softmax_inputs, "layer_norm": make_layer_norm_inputs}
INPUT_NAMES = {
    "softmax": ("x",),
    "layer_norm": ("x", "weight", "bias"),
}  # the wrappers' inputs, before out
TRAFFIC_ROWS = Rows(64, 781)  # the notebook's comparison (the traffic checks draw their own cases)


def inputs_for_demo(kind: str, rows: int, cols: int, seed: int = 0, dtype: str = "float32"):
    """Inputs for trying things out in the notebook (the grader draws its own)."""
    generator, _ = core.fresh_generator(seed)
    return MAKE_INPUTS[kind](Rows(rows, cols, dtype, planted=False), generator)


# ---------------------------------------------------------------- bandwidth and speedup (GPU)

TIMED_COLS = 4096  # a transformer's hidden size: a row fits one program's registers

# Bytes per element of the timed working set: two rotated input sets (x, expected, out: 6 float32s),
# the copy measured on the same n (2), torch's output while it runs (1): 9 float32s, rounded up to
# 48 B.
TIMED_BYTES_PER_ELEMENT = 48


def timed_rows(total_bytes: int | None = None) -> Rows:
    """The timed GPU case: :data:`TIMED_COLS` wide, rows enough to be far above the L2 cache."""
    n = memory_bounded(far_above_cache(4), TIMED_BYTES_PER_ELEMENT, total_bytes=total_bytes)
    return Rows(max(1, n // TIMED_COLS), TIMED_COLS, planted=False)


# ---------------------------------------------------------------- what one pass bought (for the
# notebook)


# The unfused versions' and torch's bytes per element of x on DEMO_ROWS float32, every tensor
# counted (per-row statistics and weights included), for the notebook's comparison: a table, not the
# counter, which the prediction would call (the grader keeps it:
# brrr.labs.one_pass.checks.count_eager; tests/labs/ test_grading_one_pass.py checks the table).
DEMO_EAGER_BYTES_PER_ELEMENT = {
    "softmax": {"unfused": 32.02048655569782, "torch": 8.0},
    "layer_norm": {"unfused": 48.165973111395644, "torch": 8.135243277848911},
}


def compare_with_eager(softmax_fn, layer_norm_fn) -> dict:
    """Per kind, the unfused eager version, the fused torch op and the student's kernel. Not graded,
    and an illustration at one shape: the grader checks at shapes it draws per submission.

    CPU: bytes per element, the eager ones counted from their ops (every tensor,
    per-row statistics and weights included: :data:`DEMO_EAGER_BYTES_PER_ELEMENT`)
    and the student's counted in the interpreter, on :data:`TRAFFIC_ROWS` without
    hard rows.
    GPU: seconds per call and achieved bandwidth (2 × 4 B per element: the one
    pass) on :func:`timed_rows`, with the copy bandwidth measured in this run.
    """
    from brrr import traffic

    functions = {"softmax": softmax_fn, "layer_norm": layer_norm_fn}
    result: dict = {"device": "gpu" if ON_GPU else "cpu", "kinds": {}}
    if ON_GPU:
        from brrr import ceilings
        from brrr.timing import bench

        case = timed_rows()
        result |= {
            "rows": case.rows,
            "cols": case.cols,
            "copy_bandwidth": ceilings.measure_copy_bandwidth(case.numel),
        }
        moved = 2 * case.numel * 4
        for kind in KINDS:
            inputs = inputs_for_demo(kind, case.rows, case.cols)
            out = torch.full_like(inputs[0], float("nan"))
            fn = functions[kind]
            times = {
                "unfused": bench(lambda: UNFUSED[kind](*inputs), budget_s=0.3).median_s,
                "torch": bench(lambda: FUSED_TORCH[kind](*inputs), budget_s=0.3).median_s,
                "yours": bench(lambda: fn(*inputs, out), budget_s=0.3).median_s,
            }
            result["kinds"][kind] = {
                "seconds": times,
                "bandwidth": {k: moved / s for k, s in times.items()},
                "roofline_s": moved / result["copy_bandwidth"],
            }
        reference.record("lab-03-one-pass", result)  # under make gpu-check only
        return result
    case = Rows(TRAFFIC_ROWS.rows, TRAFFIC_ROWS.cols, planted=False)
    result |= {"rows": case.rows, "cols": case.cols}
    for kind in KINDS:
        inputs = inputs_for_demo(kind, case.rows, case.cols)
        out = torch.empty_like(inputs[0])
        names = dict(zip(INPUT_NAMES[kind], inputs)) | {"out": out}
        with traffic.count(names) as seen:
            functions[kind](*inputs, out)
        result["kinds"][kind] = {
            "bytes_per_element": {
                "unfused": DEMO_EAGER_BYTES_PER_ELEMENT[kind]["unfused"],
                "torch": DEMO_EAGER_BYTES_PER_ELEMENT[kind]["torch"],
                "yours": (seen.loaded_bytes + seen.stored_bytes) / case.numel,
            },
            "launches": len(seen.launches),
            "minimum": 8.0,
        }
    return result


def plot_comparison(result: dict, *, stamp: str = ""):
    """Grouped bars for :func:`compare_with_eager`: seconds per call on a GPU, bytes per element on
    a CPU."""
    import matplotlib.pyplot as plt

    from brrr.plots import add_stamp

    _, ax = plt.subplots(figsize=(6.5, 3.5))
    names = {"unfused": "unfused eager", "torch": "torch (one op)", "yours": "your kernel"}
    colors = {"unfused": "#999999", "torch": "#ff7f0e", "yours": "#1f77b4"}
    key = "seconds" if result["device"] == "gpu" else "bytes_per_element"
    scale = 1e3 if result["device"] == "gpu" else 1.0
    width = 0.25
    for i, version in enumerate(names):
        values = [result["kinds"][kind][key][version] * scale for kind in KINDS]
        bars = ax.bar(
            [k + (i - 1) * width for k in range(len(KINDS))],
            values,
            width,
            label=names[version],
            color=colors[version],
        )
        ax.bar_label(bars, fmt="%.3g", fontsize=7)
    if result["device"] == "gpu":
        for k, kind in enumerate(KINDS):
            roof = result["kinds"][kind]["roofline_s"] * 1e3
            ax.hlines(
                roof,
                k - 1.5 * width,
                k + 1.5 * width,
                colors="#2ca02c",
                linestyles="dashed",
                label="8 B/element at copy bandwidth" if k == 0 else None,
            )
        ax.set_ylabel(f"ms per call, {result['rows']:,} × {result['cols']:,}")
        ax.set_title("Time: unfused eager, torch and one pass (measured)")
    else:
        ax.axhline(
            8.0, color="#2ca02c", linestyle="dashed", linewidth=1, label="one read, one write (8 B)"
        )
        ax.set_ylabel("bytes moved per element of x")
        ax.set_title(f"Global-memory traffic, {result['rows']} × {result['cols']} float32")
    ax.set_xticks(range(len(KINDS)), ["softmax", "layer norm"])
    ax.legend(fontsize=7)
    add_stamp(ax, stamp, bottom=0.18)
    return ax
