"""Lab 3, "one pass": how it is graded (the task is in :mod:`brrr.labs.one_pass`).

The prediction
    Before measuring, students predict the bytes per element of x that the
    unfused versions move, in float32, by the lab's rules (stated in the notebook
    and in :data:`PREDICTION_RULES`): every op is one kernel that reads each
    distinct tensor it is given once and writes its output once, and only tensors
    with one value per element of x count (the per-row statistics and the
    per-column weight and bias are left out). The grader counts the unfused
    functions' own ops with a :class:`~torch.utils._python_dispatch.TorchDispatchMode`
    (:func:`count_eager`), so it follows the code. (The answer is not written here either: the
    notebook asks for a prediction. The counter lives here, on the grader's side,
    which the student's process cannot import; the notebook's comparison shows the
    unfused versions' bytes at one shape, every tensor counted, from a table.)

Grading happens in the grader process (:mod:`brrr.grading.server`), thresholds
from :mod:`brrr.checks.thresholds`. As in Lab 2 the student's wrappers are only
asked which kernels they launch; the grader checks the kernels' source (Triton
only), compiles them itself and runs them on its own tensors:

- ``prediction`` (any device): the two numbers, within rounding.
- ``softmax_correct`` / ``layer_norm_correct`` (any device): fresh inputs at row
  lengths 1, 17, 781 and 4097, float32 and float16 (the reference accumulates in
  float32), with hard rows planted (:class:`Rows`): values near ±1000 (exp
  overflows, or underflows to 0/0, without the max subtraction), -inf entries,
  a row of tiny variance (eps inside the square root), rows far from zero (float16
  sums overflow unless accumulated in float32); NaN-filled outputs; every load and
  store in bounds.
- ``softmax_traffic`` / ``layer_norm_traffic`` (CPU): counted in the interpreter
  on two cases drawn per submission in the grader process (:func:`traffic_cases`,
  odd row lengths, hard rows planted), never a published one: x loaded exactly
  once, out stored exactly once, nothing else, except weight and bias: at most
  once per program (row block) of the grid the student launched, where a program
  that stores nothing is refused (:func:`brrr.checks.core.idle_failure`), so a
  grid larger than the rows need cannot raise the allowance. A kernel that reads
  the row twice is told how many passes it made.
- ``softmax_bandwidth`` / ``layer_norm_bandwidth`` and ``..._speedup`` (GPU): at
  least 75% of the copy bandwidth, and at least as fast as ``torch.softmax`` /
  ``F.layer_norm``, timed by the grader in one run on rotated inputs far above
  the L2 cache; every timed output is checked afterwards.
"""

from __future__ import annotations

import math

import torch

from brrr.checks import core, thresholds
from brrr.device import per_device
from brrr.labs.one_pass import LAB
from brrr.labs.one_pass.given import (
    EPS,
    FUSED_TORCH,
    INPUT_NAMES,
    KINDS,
    MAKE_INPUTS,
    Rows,
    UNFUSED,
    layer_norm_reference,
    softmax_reference,
    timed_rows,
)

# What the checks compare a student's answer with: here only, out of the student's reach
# (tests/test_layers.py).
GRADER_REFERENCES = ("count_eager", "eager_traffic", "eager_bytes_per_element")

CHECKS = {
    "cpu": (
        "prediction",
        "softmax_correct",
        "softmax_traffic",
        "layer_norm_correct",
        "layer_norm_traffic",
    ),
    "gpu": (
        "prediction",
        "softmax_correct",
        "softmax_bandwidth",
        "softmax_speedup",
        "layer_norm_correct",
        "layer_norm_bandwidth",
        "layer_norm_speedup",
    ),
}
ALL_CHECKS = (
    "prediction",
    "softmax_correct",
    "softmax_traffic",
    "softmax_bandwidth",
    "softmax_speedup",
    "layer_norm_correct",
    "layer_norm_traffic",
    "layer_norm_bandwidth",
    "layer_norm_speedup",
)


def _tensors(value) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_leaves

    return [leaf for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def count_eager(fn, *inputs: torch.Tensor) -> list[dict]:
    """The ops ``fn(*inputs)`` runs, as eager PyTorch dispatches them, with the bytes each reads and
    writes: the grader's counter, which the student's process cannot import (this module is not in
    its copy).

    One row per aten op that moves data (views are left out): ``{'op', 'reads':
    [(numel, bytes)], 'writes': [(numel, bytes)]}``. A tensor passed twice to one
    op (``d * d``) is read once.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: list[dict] = []

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            returns = func._schema.returns
            if any(r.alias_info is not None and not r.alias_info.is_write for r in returns):
                return out  # a view: moves nothing
            seen, reads = set(), []
            for tensor in _tensors((args, kwargs)):
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    reads.append((tensor.numel(), tensor.numel() * tensor.element_size()))
            writes = [(t.numel(), t.numel() * t.element_size()) for t in _tensors(out)]
            ops.append({"op": str(func.overloadpacket.__name__), "reads": reads, "writes": writes})
            return out

    with Counting():
        fn(*inputs)
    return ops


def _counting_inputs(kind: str, rows: int = 3, cols: int = 5):
    x = torch.randn(rows, cols)
    return (x,) if kind == "softmax" else (x, torch.randn(cols), torch.randn(cols))


def eager_traffic(kind: str, rows: int, cols: int) -> float:
    """Bytes per element of x that the unfused ``kind`` moves on ``rows × cols`` float32, every
    tensor counted."""
    inputs = _counting_inputs(kind, rows, cols)
    total = sum(
        nbytes
        for op in count_eager(UNFUSED[kind], *inputs)
        for _, nbytes in op["reads"] + op["writes"]
    )
    return total / (rows * cols)


PREDICTION_RULES = (
    "every op (every kernel) reads each distinct tensor it is given once and writes its output "
    "once",
    "count only tensors with one value per element of x (rows × cols); the per-row statistics (one "
    "value per row) and the weight and bias (one per column) are left out",
    "float32: 4 bytes per value; the answer is bytes moved per element of x",
)


def eager_bytes_per_element(kind: str, *, rule: bool = True) -> float:
    """Bytes per element of x that the unfused eager ``kind`` moves, counted from its ops (float32).

    ``rule=True`` counts by :data:`PREDICTION_RULES` (only tensors of x's size);
    ``rule=False`` counts every tensor, per-row statistics and weights included,
    on 3 rows of 5 (where they are not small: for the notebook's table, use
    :func:`eager_traffic`).
    """
    inputs = _counting_inputs(kind)
    numel = inputs[0].numel()
    total = 0
    for op in count_eager(UNFUSED[kind], *inputs):
        for count, nbytes in op["reads"] + op["writes"]:
            if not rule or count == numel:
                total += nbytes
    return total / numel


def eager_table(kind: str) -> list[tuple[str, int, int]]:
    """(op, values of x's size read, written) per op of the unfused ``kind``: the count behind the
    prediction."""
    inputs = _counting_inputs(kind)
    numel = inputs[0].numel()
    return [
        (
            op["op"],
            sum(1 for c, _ in op["reads"] if c == numel),
            sum(1 for c, _ in op["writes"] if c == numel),
        )
        for op in count_eager(UNFUSED[kind], *inputs)
    ]


# The hard rows, planted from row 0 on (as many as the case has rows).
SOFTMAX_HARD_ROWS = (
    "values near +1000: exp overflows to inf without the max subtraction",
    "values near -1000: exp underflows to 0, and 0/0 is NaN, without the max subtraction",
    "-inf entries (a masked attention score): their probability is 0",
)
LAYER_NORM_HARD_ROWS = (
    "values near 30: a float16 sum over the row overflows (65,504 is float16's largest value)",
    "a standard deviation of 0.01: the variance is close to eps, which goes inside the square root",
    "values near -30, spread 5",
)


def describe(case: Rows) -> str:
    return str(case)


def _matches(out: torch.Tensor, candidate: torch.Tensor) -> bool:
    rtol, atol = core.tolerance(out.dtype)
    return bool(
        torch.isclose(out.float(), candidate.float(), rtol=rtol, atol=atol, equal_nan=True).all()
    )


def _is_mistake(out: torch.Tensor, mistaken: torch.Tensor, right: torch.Tensor) -> bool:
    """``out`` matches the mistaken formula, on inputs where that formula is told apart from the
    right one."""
    mistaken = mistaken.to(out.dtype)
    return _matches(out, mistaken) and not _matches(right.to(out.dtype), mistaken)


def diagnose_softmax(inputs, out: torch.Tensor) -> str | None:
    """A known softmax mistake that ``out`` matches, in a sentence (for a wrong output)."""
    (x,) = inputs
    e = torch.exp(x.float())
    if _is_mistake(out, e / e.sum(dim=-1, keepdim=True), softmax_reference(x)):
        return (
            "Your output is softmax computed without subtracting the row maximum: exp overflows to "
            "inf for values above 88.7 (float32) and underflows to 0 (then 0/0) far below zero. "
            "Subtract the row max first; it does not change the result."
        )
    return _half_hint(x)


def _half_hint(x: torch.Tensor) -> str | None:
    if x.dtype != torch.float16:
        return None
    return (
        "This case is float16: convert what you load to float32 (`.to(tl.float32)`), reduce in "
        "float32 and convert back only when you store. A float16 sum over a row loses precision "
        "long before it overflows past 65,504, its largest value."
    )


def diagnose_layer_norm(inputs, out: torch.Tensor) -> str | None:
    """A known layer-norm mistake that ``out`` matches, in a sentence (for a wrong output)."""
    right = layer_norm_reference(*inputs)
    x, weight, bias = (t.double() for t in inputs)
    cols = x.shape[-1]
    d = x - x.mean(dim=-1, keepdim=True)
    biased = (d * d).mean(dim=-1, keepdim=True)
    variants = {
        "the unbiased variance (divided by cols - 1); F.layer_norm uses the biased variance, "
        "divided by cols": biased * cols / (cols - 1)
        if cols > 1
        else torch.full_like(biased, float("nan")),
    }
    for mistake, var in variants.items():
        if _is_mistake(out, d / torch.sqrt(var + EPS) * weight + bias, right):
            return f"Your output is layer norm with {mistake}."
    if _is_mistake(out, d / (torch.sqrt(biased) + EPS) * weight + bias, right):
        return (
            "Your output is layer norm with eps added outside the square root: it goes inside, "
            "sqrt(var + eps)."
        )
    if _is_mistake(out, d / torch.sqrt(biased + EPS), right):
        return (
            "Your output is layer norm without the weight and bias: finish with y * weight + bias."
        )
    return _half_hint(inputs[0])


SPECS = {
    "softmax": core.Spec(
        name="softmax",
        reference=softmax_reference,
        make_inputs=MAKE_INPUTS["softmax"],
        input_names=INPUT_NAMES["softmax"],
        out_name="out",
        describe=describe,
        diagnose=diagnose_softmax,
    ),
    "layer_norm": core.Spec(
        name="layer_norm",
        reference=layer_norm_reference,
        make_inputs=MAKE_INPUTS["layer_norm"],
        input_names=INPUT_NAMES["layer_norm"],
        out_name="out",
        describe=describe,
        diagnose=diagnose_layer_norm,
    ),
}

# Row lengths that are a multiple of no block (1, 17, 781, 4097), in float32 and float16.
_CASES_BOTH = (Rows(5, 1), Rows(7, 17), Rows(6, 781), Rows(3, 4097), Rows(3, 4097, "float16"))
CORRECTNESS_CASES = per_device(
    cpu=_CASES_BOTH,
    gpu=_CASES_BOTH + (Rows(4096, 781), Rows(1000, 4097), Rows(2048, 4096, "float16")),
)
BOUNDS_CASES = (
    Rows(7, 17),
    Rows(3, 781),
)  # GPU: also run in the interpreter at these, to check bounds


def prepare() -> None:
    """Import what the checks use now, in the grader process, before any student code runs."""
    import triton.language  # noqa: F401
    from torch.utils import _python_dispatch, _pytree  # noqa: F401

    from brrr import ceilings, timing, traffic  # noqa: F401
    from brrr.checks import kernels, timed  # noqa: F401

    for kind in KINDS:  # the prediction's reference, computed once before any student code runs
        _REFERENCE_PREDICTION[kind] = eager_bytes_per_element(kind)


_REFERENCE_PREDICTION: dict[str, float] = {}


def not_applicable(check: str, device_class: str) -> str:
    kind, _, what = check.rpartition("_")
    if what == "traffic":
        return (
            "GPU: traffic is counted only in the Triton interpreter (on a CPU). Here the kernel is "
            f"compiled, so {kind} is graded by time instead: see its bandwidth and speedup checks."
        )
    return (
        f"CPU: the {check} check runs on a GPU only. Here Triton runs in its interpreter, one "
        f"program at a time in Python, so its time says nothing about the kernel; {kind}_traffic "
        "grades "
        "what one pass changes instead."
    )


# ---------------------------------------------------------------- prediction


def grade_prediction(student) -> str:
    """``predicted_eager_bytes_per_element()``: a dict with the bytes per element of x that
    :func:`softmax_unfused` and :func:`layer_norm_unfused` move by :data:`PREDICTION_RULES`."""
    threshold = thresholds.threshold(LAB, "prediction")
    reference = {
        kind: _REFERENCE_PREDICTION.get(kind) or eager_bytes_per_element(kind) for kind in KINDS
    }
    value = student.call(timeout_s=60)
    name = student.name
    if not isinstance(value, dict) or set(value) != set(KINDS):
        raise core.fail(
            f"{name}() must return a dict with the keys 'softmax' and 'layer_norm' (bytes per "
            f"element of x for each unfused version); it returned {str(value)[:200]}"
        )
    wrong = []
    for kind in KINDS:
        got = value[kind]
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
            raise core.fail(
                f"{name}()['{kind}'] must be a number of bytes per element; it is {str(got)[:80]}"
            )
        if abs(got - reference[kind]) > threshold.value * reference[kind]:
            wrong.append(kind)
    if wrong:
        lines = []
        for kind in wrong:
            table = eager_table(kind)
            ops = "; ".join(f"{op}: reads {r}, writes {w}" for op, r, w in table)
            values = sum(r + w for _, r, w in table)
            lines.append(
                f"{kind}: you predicted {value[kind]:g} B per element; by the lab's rules the "
                f"unfused version moves {reference[kind]:g} ({values} values of x's size × 4 B). "
                f"Counted op by op (values of x's size): {ops}."
            )
        raise core.fail(
            f"{name}() predicted the traffic of the unfused versions wrong.\n"
            + "\n".join(lines)
            + "\nThe rules: "
            + "; ".join(PREDICTION_RULES)
            + "."
        )
    return (
        f"{name}() predicted {value['softmax']:g} B per element for softmax_unfused and "
        f"{value['layer_norm']:g} for layer_norm_unfused, as counted from their ops "
        f"({threshold.describe()})"
    )


# ---------------------------------------------------------------- correct


def drawn_correctness_cases(rng) -> tuple[Rows, ...]:
    """One more case drawn per submission (``rng`` from :func:`brrr.checks.core.size_drawer`): a few
    rows of an odd length, hard rows planted."""
    return (Rows(rng.randint(3, 9), core.unaligned(rng, 19, 2_047)),)


def grade_correct(kind: str, student) -> str:
    spec = SPECS[kind]
    every = tuple(CORRECTNESS_CASES) + drawn_correctness_cases(core.size_drawer()[0])
    result = core.check_kernels(student, spec, every, bounds_sizes=BOUNDS_CASES)
    cases = "; ".join(str(case) for case in every)
    hard = SOFTMAX_HARD_ROWS if kind == "softmax" else LAYER_NORM_HARD_ROWS
    return (
        f"{student.name}'s kernels, run by the grader, match {spec.reference.__name__}() on "
        f"{cases}, with hard rows planted ({'; '.join(hard)}) and NaN-filled outputs "
        f"(float32 rtol {core.tolerance(torch.float32)[0]:g}; "
        f"float16 rtol {core.tolerance(torch.float16)[0]:g}); {result['bounds']}; seed "
        f"{result['seed']}"
    )


# ---------------------------------------------------------------- traffic (CPU)


def traffic_failure(kind: str, name: str, traffic: dict) -> str | None:
    """Why ``traffic`` (a :func:`brrr.checks.core.count_traffic` count) is not one pass, or None.

    One pass: x loaded exactly once, out stored exactly once; for layer norm,
    weight and bias loaded at least once and at most once per program (row block)
    of the launched grid; nothing else loaded or stored.
    """
    case: Rows = traffic["n"]
    size = traffic["element_size"]
    need = case.numel * size
    row_bytes = case.cols * size
    loaded, stored = dict(traffic["loaded"]), dict(traffic["stored"])
    programs = sum(
        traffic.get("storing", traffic["programs"])
    )  # programs that did work: idle ones earn nothing
    params = ("weight", "bias") if kind == "layer_norm" else ()
    known = ("x", *params, "out")
    extra = {t for t in (*loaded, *stored) if t not in known and (loaded.get(t) or stored.get(t))}
    ok = (
        loaded.get("x", 0) == need
        and stored.get("out", 0) == need
        and not loaded.get("out")
        and not extra
        and not any(stored.get(t) for t in ("x", *params))
        and all(row_bytes <= loaded.get(p, 0) <= programs * row_bytes for p in params)
    )
    if ok:
        return None
    rows = [("tensor", "loaded", "stored")]
    for tensor in dict.fromkeys([*known, *loaded, *stored]):
        if tensor not in known and not (loaded.get(tensor) or stored.get(tensor)):
            continue
        unit, per = (
            (need, "per element of x")
            if tensor in ("x", "out") or tensor in extra
            else (row_bytes, "rows' worth")
        )
        rows.append(
            (
                tensor,
                f"{loaded.get(tensor, 0):,} B = {loaded.get(tensor, 0) / unit:.2f} {per}",
                f"{stored.get(tensor, 0):,} B = {stored.get(tensor, 0) / unit:.2f} {per}",
            )
        )
    hints = _traffic_hints(name, traffic, need, row_bytes, params, extra)
    weights = (
        f" and weight and bias at most once per program (row block), here {programs} programs"
        if params
        else ""
    )
    return (
        f"{name} moved the wrong number of bytes for {case}, counted in the Triton interpreter. "
        f"One pass loads x once ({need:,} B, 1.00 per element) and stores out once ({need:,} "
        f"B){weights}, and moves nothing else.\n{core.text_table(rows)}\n" + "\n".join(hints)
    ).rstrip()


def _traffic_hints(
    name: str, traffic: dict, need: int, row_bytes: int, params: tuple, extra: set
) -> list[str]:
    """One hint per way ``traffic`` strays from one pass: out under- or over-written, x read too
    often or not at all, weight and bias reloaded, out read back, a buffer round trip, more than one
    kernel."""
    loaded, stored = dict(traffic["loaded"]), dict(traffic["stored"])
    programs = sum(traffic.get("storing", traffic["programs"]))
    passes = loaded.get("x", 0) / need
    hints = _out_hints(name, stored, need)
    if loaded.get("x", 0) == 0:
        hints.append(
            f"No kernel of {name} loaded x: the result must be computed from x inside your kernel."
        )
    elif passes > 1:
        hints.append(
            f"Your kernel read x {passes:.2f} times per element: {_passes(passes)} over memory. "
            "Load the row once into registers (a block of next_power_of_2(cols) columns) and "
            "compute the reduction and the output from those registers."
        )
    elif passes < 1:
        hints.append(
            f"Your kernel read only {passes:.2f} of x per element: every element of x must be "
            "loaded."
        )
    for p in params:
        got = loaded.get(p, 0)
        if got > programs * row_bytes:
            hints.append(
                f"Your kernel loaded {p} {got / row_bytes:.2f} rows' worth over {programs} "
                f"programs ({got / row_bytes / programs:.2f} per program): load it once per "
                "program (row block), before the loop over its rows, and keep it in registers."
            )
        elif got < row_bytes:
            hints.append(f"Your kernel loaded only {got / row_bytes:.2f} of {p}: load all of it.")
    if loaded.get("out", 0):
        hints.append(
            "Your kernel reads out (an atomic counts as a read and a write); it only needs to "
            "write it."
        )
    if extra:
        hints.append(
            f"Your kernels moved bytes through {', '.join(sorted(extra))}: buffers outside x and "
            "out are a round trip through global memory. Keep the row statistics in registers."
        )
    if len(traffic["kernels"]) > 1:
        hints.append(
            f"{name} launched {len(traffic['kernels'])} kernels ({', '.join(traffic['kernels'])}): "
            "one kernel that holds a row in registers needs no second one."
        )
    return hints


def _out_hints(name: str, stored: dict, need: int) -> list[str]:
    """The hint of :func:`_traffic_hints` when out is not stored once per element, if it is not."""
    if stored.get("out", 0) == 0:
        return [
            f"No kernel of {name} stored anything into out: the result must be computed and stored "
            "by your own @triton.jit kernel."
        ]
    if stored.get("out", 0) < need:
        return [
            f"Your kernels stored {stored['out'] / need:.2f} of out per element: part of it is "
            "never written. Launch one program per row (or per block of rows) and mask the columns."
        ]
    if stored.get("out", 0) > need:
        return [
            f"Your kernels stored out {stored['out'] / need:.2f} times per element: store each row "
            "once, after the reduction."
        ]
    return []


def _passes(passes: float) -> str:
    whole = round(passes)
    if abs(passes - whole) < 1e-9:
        return {2: "two passes", 3: "three passes", 4: "four passes"}.get(whole, f"{whole} passes")
    return f"{passes:.2f} passes"


def traffic_cases(rng) -> tuple[Rows, Rows]:
    """The cases the traffic checks count at, drawn per submission (``rng`` from
    :func:`brrr.checks.core.size_drawer`, seeded in the grader process): a few dozen rows of an odd
    length below 1,024 and above it, so that a block of next_power_of_2(cols) columns ends in a
    masked part."""
    return (
        Rows(rng.randint(8, 40), core.unaligned(rng, 257, 1_023)),
        Rows(rng.randint(8, 24), core.unaligned(rng, 1_025, 1_999)),
    )


def grade_traffic(kind: str, student) -> str:
    """CPU: the kernels' values must be right, and their traffic, counted in the interpreter, one
    pass."""
    from brrr import traffic as traffic_counter

    traffic_counter.check_supported()  # if not, a grader error: not the student's fault
    cases = traffic_cases(core.size_drawer()[0])
    result = core.check_kernels(student, SPECS[kind], cases, count_traffic_at=cases)
    parts = []
    for traffic in result["traffics"]:
        failure = traffic_failure(kind, student.name, traffic)
        if failure:
            raise core.fail(failure)
        moved = sum(traffic["loaded"].values()) + sum(traffic["stored"].values())
        programs = sum(traffic["programs"])
        weights = (
            f" (weight and bias {traffic['loaded']['weight'] + traffic['loaded']['bias']:,} B)"
            if kind == "layer_norm"
            else ""
        )
        parts.append(
            f"{traffic['n']}: {moved:,} B{weights}, {moved / traffic['n'].numel:.2f} B per "
            f"element, {programs} programs"
        )
    return (
        f"{student.name}'s kernel loaded x once and stored out once at cases drawn for this "
        f"submission ({'; '.join(parts)}), against {eager_bytes_per_element(kind):g} B per element "
        f"for {kind}_unfused by the lab's rules; {len(result['traffics'][0]['kernels'])} launch; "
        f"seed {result['seed']}"
    )


# The timed width is drawn in [TIMED_COLS_LOW x TIMED_COLS, TIMED_COLS], 16 modulo 32
# (brrr.checks.timed.ALIGN: rows stay 64-byte aligned and loads vectorized, and no block divides
# it): a row still takes one 4096-wide block, of which at most 1/16 of the lanes are masked off (the
# bytes moved, and so the bandwidth, count only the real elements); rows are drawn as Lab 2 draws n
# (brrr.checks.timed.LOW).
TIMED_COLS_LOW = 15 / 16


def _timed_check(student, kind: str, check: str) -> str:
    from brrr.checks import rounds, timed

    published = timed_rows()
    rng, _ = (
        core.size_drawer()
    )  # drawn per submission: rows in the timed band, cols with a partial last block
    rows = Rows(
        rng.randint(math.ceil(timed.LOW * published.rows), published.rows),
        rounds.drawn(rng, published.cols, low=TIMED_COLS_LOW, align=timed.ALIGN),
        planted=False,
    )
    weights = 2 * rows.cols * 4 if kind == "layer_norm" else 0  # weight and bias, read once
    case = timed.TimedCase(
        rows,
        str(rows),
        moved=2 * rows.numel * 4 + weights,
        copy_n=rows.numel,
        baseline=FUSED_TORCH[kind],
        baseline_name="torch.softmax" if kind == "softmax" else "F.layer_norm",
    )
    return timed.check(
        student, LAB, check, SPECS[kind], case, bandwidth=check.endswith("bandwidth")
    )


def _graders_of(kind: str) -> dict:
    """The four checks of one kernel (``softmax_correct``, ...), each a function of the student's
    side."""
    return {
        f"{kind}_correct": lambda student: grade_correct(kind, student),
        f"{kind}_traffic": lambda student: grade_traffic(kind, student),
        f"{kind}_bandwidth": lambda student: _timed_check(student, kind, f"{kind}_bandwidth"),
        f"{kind}_speedup": lambda student: _timed_check(student, kind, f"{kind}_speedup"),
    }


GRADERS = core.Graders(
    LAB,
    {
        "prediction": grade_prediction,
        **{check: run for kind in KINDS for check, run in _graders_of(kind).items()},
    },
)
grade = GRADERS.grade  # the one way every lab's check is run (brrr.checks.core.Graders)
