"""The grader's core: compare with a spec, replay kernels, report readably, measure with repeats.

Everything here runs in the grader process (:mod:`brrr.grading.server`), never
in the student's. A check that fails raises ``AssertionError`` through
:func:`fail`, with a message a student can act on: what was measured, what was
needed, and on which device.

Kernel correctness (:func:`check_kernels`)
    Fresh random inputs are drawn here at several sizes, including sizes that
    are a multiple of no block. The student's wrapper is asked which kernels it
    launches for those shapes; the kernels are checked statically and run here,
    on the grader's tensors, so eager torch in the wrapper, cached results and
    outputs aliased to something else cannot reach the output. The output is
    filled with NaN before each run, so an element the kernel never writes
    cannot pass by luck; where NaN comes back, a second run with a different
    fill tells "never written" from "computed NaN". Tolerances fit the dtype
    (:data:`TOLERANCES`). A failure prints where the output differs, by how
    much, and the first bad indices with the inputs there.

Crashes and hangs
    Replays run under :func:`brrr.checks.isolation.run`: a crash or a hang
    becomes a failed check with the reason.

Thresholds come from :mod:`brrr.checks.thresholds`; nothing here hard-codes one.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import secrets
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, Sequence

import torch

from brrr import targets
from brrr.checks import isolation, thresholds
from brrr.device import DEVICE, ON_GPU, TRITON_INTERPRETED, device_name, synchronize


# (rtol, atol) per dtype: a few ulps of the dtype, scaled for chains of a handful of ops.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-9, 1e-9),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}

# The second fill, used to tell unwritten elements from computed NaN.
SECOND_FILL = -1.2345e30


def second_fill(dtype: torch.dtype) -> float:
    """:data:`SECOND_FILL`, or the most negative finite value of a dtype too narrow for it
    (float16)."""
    if dtype.is_floating_point and torch.finfo(dtype).max < abs(SECOND_FILL):
        return -torch.finfo(dtype).max
    return SECOND_FILL


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing outputs of ``dtype``; integers compare exactly."""
    if not dtype.is_floating_point:
        return (0.0, 0.0)
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def where() -> str:
    """The device phrase every grader message ends with."""
    mode = "GPU" if ON_GPU else "CPU, Triton interpreted"
    return f"on {device_name()} ({mode})"


def text_table(rows: Sequence[Sequence[str]]) -> str:
    """Rows of strings as an indented plain-text table, each column as wide as its widest cell."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "    " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows
    )


def fail(message: str) -> AssertionError:
    """An AssertionError whose message ends with the device it was measured on."""
    return AssertionError(f"{message}\n[{where()}]")


class Student(Protocol):
    """The student's side, as every check sees it. The grader's :class:`brrr.grading.server.Student`
    serves it over the notebook's connection, :class:`brrr.grading.client.LocalStudent` in this
    process (tests); a check asks nothing else of it. What a call returns is plain data, never the
    student's objects."""

    name: str  # the student's function, for messages

    def call(
        self, *args, threads: int | None = None, timeout_s: float | None = None, forked: bool = True
    ) -> Any:
        """``function(*args)`` on the student's side; ``forked=False`` for timed calls."""

    def record(
        self,
        tensors: dict[str, tuple[list[int], str]],
        *,
        inputs: tuple[str, ...] = (),
        timeout_s: float | None = None,
    ) -> dict:
        """The kernel launches the wrapper makes when called on tensors of these (shape, dtype
        name)."""

    def read_file(self, path: str, *, limit: int, timeout_s: float = 60) -> bytes:
        """The bytes of a file the student's process wrote, read there (the grader may not see its
        files: a sandbox's /tmp is private); AssertionError if unreadable or over ``limit``
        bytes."""


class Graders(dict):
    """A lab's checks by name, each a function of the student's side (:class:`Student`)
    that returns what passed, in a sentence, or raises AssertionError (through :func:`fail`) with
    the reason.

    Every lab keeps its checks in one (``GRADERS`` in its checks module) and
    runs one the same way, :meth:`grade`, which the grader process calls.
    """

    def __init__(self, lab: str, graders: dict[str, Callable[[Student], str]]):
        super().__init__(graders)
        self.lab = lab

    def grade(self, check: str, student: Student) -> str:
        """Run ``check`` against the student's side: a summary, or AssertionError with the
        reason."""
        if check not in self:
            raise KeyError(f"{self.lab} has no check {check!r}")
        return self[check](student)


# ---------------------------------------------------------------- comparing outputs


def _fmt(value: float) -> str:
    if value != value:
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.4e}"
    return f"{value:.6f}"


def _index(flat_index: int, shape: Sequence[int]) -> str:
    if len(shape) <= 1:
        return f"{flat_index:,}"
    coords = []
    for size in reversed(shape):
        coords.append(flat_index % size)
        flat_index //= size
    return "(" + ", ".join(str(c) for c in reversed(coords)) + ")"


def _ranges(indices: list[int], limit: int = 6) -> str:
    """'3, 7, 100 to 120, ...': runs of consecutive indices, the first few."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    parts = [f"{a:,}" if a == b else f"{a:,} to {b:,}" for a, b in runs[:limit]]
    return ", ".join(parts) + (", ..." if len(runs) > limit else "")


def _table(
    flat: list[int],
    got: torch.Tensor,
    expected: torch.Tensor,
    inputs: dict[str, torch.Tensor],
    shape: Sequence[int],
) -> str:
    names = ["index", "got", "expected"] + list(inputs)
    rows = [names]
    for i in flat:
        row = [_index(i, shape), _fmt(float(got[i])), _fmt(float(expected[i]))]
        row += [_fmt(float(t[i])) for t in inputs.values()]
        rows.append(row)
    widths = [max(len(row[c]) for row in rows) for c in range(len(names))]
    return "\n".join(
        "    " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows
    )


def diff_report(
    name: str,
    got: torch.Tensor,
    expected: torch.Tensor,
    *,
    rtol: float,
    atol: float,
    inputs: dict[str, torch.Tensor] | None = None,
    unwritten: torch.Tensor | None = None,
    context: str = "",
    title: str | None = None,
    show: int = 8,
) -> str | None:
    """Why ``got`` is not ``expected``, readably; None if they agree within ``rtol``/``atol``.

    ``unwritten`` marks elements the kernel never wrote (found by the caller
    with two different fills). ``inputs`` with the output's shape are shown
    beside the first bad elements.
    """
    if got.shape != expected.shape:
        return (
            f"{name} has shape {tuple(got.shape)}, but the reference has shape "
            f"{tuple(expected.shape)}{context}."
        )
    if unwritten is None and bool(
        torch.isclose(
            got.detach().to(expected.dtype), expected.detach(), rtol=rtol, atol=atol, equal_nan=True
        ).all()
    ):
        return None  # the common case, decided on the device without copying anything
    got_flat = got.detach().reshape(-1).to("cpu", torch.float64)
    exp_flat = expected.detach().reshape(-1).to("cpu", torch.float64)
    shown_inputs = {
        k: v.detach().reshape(-1).to("cpu", torch.float64)
        for k, v in (inputs or {}).items()
        if v.shape == expected.shape
    }
    close = torch.isclose(got_flat, exp_flat, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    n, shape = got_flat.numel(), list(expected.shape)
    paragraphs = []
    bad = ~close
    never = (
        torch.zeros_like(bad) if unwritten is None else unwritten.reshape(-1).to("cpu").bool() & bad
    )
    if bool(never.any()):
        paragraphs.append(
            _unwritten_paragraph(name, never.nonzero().flatten().tolist(), n, expected.dtype)
        )
    nonfinite = bad & ~never & ~torch.isfinite(got_flat) & torch.isfinite(exp_flat)
    if bool(nonfinite.any()):
        idx = nonfinite.nonzero().flatten().tolist()
        paragraphs.append(
            _nonfinite_paragraph(name, idx, got_flat, exp_flat, shown_inputs, shape, show)
        )
    wrong = bad & ~never & ~nonfinite
    if bool(wrong.any()):
        paragraphs.append(
            _wrong_paragraph(
                name, wrong, got_flat, exp_flat, shown_inputs, shape, show, rtol=rtol, atol=atol
            )
        )
    title = title or f"{name} is wrong{context}."
    return (title + "\n" + "\n".join(paragraphs)).rstrip()


def _wrong_paragraph(
    name: str,
    wrong: torch.Tensor,
    got_flat,
    exp_flat,
    shown_inputs: dict,
    shape: list,
    show: int,
    *,
    rtol: float,
    atol: float,
) -> str:
    """Where the output is finite but outside the tolerance (``wrong``): how many elements, the
    largest difference and where, and a table of the first ones."""
    idx = wrong.nonzero().flatten().tolist()
    n = got_flat.numel()
    error = (got_flat - exp_flat).abs()
    error[~wrong] = -1.0
    worst = int(error.argmax())
    return (
        f"{name} differs from the reference at {len(idx):,} of {n:,} elements "
        f"({len(idx) / n:.1%}), by more than atol + rtol·|expected| = {atol:g} + "
        f"{rtol:g}·|expected|. The largest difference is {_fmt(float(error[worst]))}, at index "
        f"{_index(worst, shape)} (got {_fmt(float(got_flat[worst]))}, expected "
        f"{_fmt(float(exp_flat[worst]))}). The first bad elements:\n"
        + _table(idx[:show], got_flat, exp_flat, shown_inputs, shape)
    )


def _nonfinite_paragraph(
    name: str, idx: list[int], got_flat, exp_flat, shown_inputs: dict, shape: list, show: int
) -> str:
    """Where the output is NaN or inf and the reference is finite (``idx``), the first such element
    with its inputs, and the usual cause: an overflow."""
    first, n = idx[0], got_flat.numel()
    at = ", ".join(f"{k} = {_fmt(float(v[first]))}" for k, v in shown_inputs.items())
    return (
        f"{name} has NaN or inf at {len(idx):,} of {n:,} elements where the reference is finite, "
        f"the first at index {_index(first, shape)}"
        + (f" (where {at})" if at else "")
        + f": got {_fmt(float(got_flat[first]))}, expected {_fmt(float(exp_flat[first]))}. Look "
        "for an "
        "overflow: in float32, exp() of an input above 88.7 is inf, and inf/inf or inf - inf is "
        "NaN.\n" + _table(idx[:show], got_flat, exp_flat, shown_inputs, shape)
    )


def _unwritten_paragraph(name: str, idx: list[int], n: int, dtype: torch.dtype) -> str:
    """Which of ``n`` elements the kernel never wrote (``idx``), and the likely cause: a grid or
    mask that misses the tail, lanes that never store, or nothing written at all."""
    count = len(idx)
    suffix = count < n and idx == list(range(n - count, n))  # every element is no suffix: see below
    if count == n:
        where_text = "That is every element."
    elif suffix and count == 1:
        where_text = f"It is the last element, index {n - 1:,}."
    elif suffix:
        where_text = f"They are the last {count:,} elements, indices {n - count:,} to {n - 1:,}."
    else:
        where_text = f"They are at indices {_ranges(idx)}."
    if count == n:
        hint = (
            "Nothing was written. Your function must write its result into the `out` tensor it is "
            "given (returning a new tensor does not count)."
        )
    elif suffix:
        hint = (
            "Does your grid cover all n elements (triton.cdiv(n, BLOCK) programs), and does the "
            "last program store its partial block under a mask?"
        )
    else:
        hint = (
            "Some programs, or some lanes, never stored their results: check the grid, the "
            "offsets and the store mask."
        )
    return (
        f"{name} has {count:,} of {n:,} elements unwritten: {'it' if count == 1 else 'they'} still "
        f"hold{'s' if count == 1 else ''} what the grader filled the output with before the call "
        f"(NaN, and {second_fill(dtype):g} in a second call). {where_text} {hint}"
    )


# ---------------------------------------------------------------- the correctness check of kernels


def describe_n(n: Any) -> str:
    """'n = 1,000': how a case given by its number of elements is named in messages."""
    return f"n = {n:,}"


@dataclass(frozen=True)
class Spec:
    """What a kernel lab asks for: a reference, how to draw inputs, and the names of the wrapper's
    arguments.

    ``make_inputs(n, generator)`` returns fresh input tensors of ``n`` elements on
    :data:`~brrr.device.DEVICE`. The student's wrapper is called as
    ``fn(*inputs, out)`` and must write the result into ``out``, with Triton
    kernels: the grader replays those kernels on its own tensors.

    ``n`` need not be a number: a lab whose cases differ in shape or dtype passes
    any picklable value (say a ``(rows, cols, dtype)`` record) that its
    ``make_inputs`` understands, and ``describe(n)`` names it in messages
    ("3 rows of 781 float16").

    ``diagnose(inputs, out)``, if given, is asked about a wrong output: it
    returns a sentence naming a known mistake the output matches (say, the
    unbiased variance where the reference uses the biased one), or None.
    """

    name: str
    reference: Callable[..., torch.Tensor]
    make_inputs: Callable[[Any, torch.Generator], tuple[torch.Tensor, ...]]
    input_names: tuple[str, ...]
    out_name: str = "out"
    describe: Callable[[Any], str] = describe_n
    diagnose: Callable[..., str | None] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return self.input_names + (self.out_name,)


def fresh_generator(seed: int | None = None) -> tuple[torch.Generator, int]:
    """A generator on the CPU seeded from the OS (or with ``seed``), and its seed for the report."""
    seed = secrets.randbits(31) if seed is None else seed
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    return generator, seed


def size_drawer(seed: int | None = None) -> tuple[random.Random, int]:
    """A source of the sizes a check runs at, seeded from the OS (``secrets``: ``os.urandom``) in
    the grader process, where the student's process cannot read it; and its seed, for the report.

    Checks measured at one published size can be passed by a wrapper that launches the right kernel
    there and another one everywhere else: every traffic and tiling check draws its sizes here, per
    submission."""
    seed = secrets.randbits(63) if seed is None else seed
    return random.Random(seed), seed


def unaligned(rng: random.Random, low: int, high: int) -> int:
    """An odd size in ``[low, high]``: a multiple of no power-of-two block, so the last block is
    partial."""
    value = rng.randint(low, high)
    return value if value % 2 else (value + 1 if value < high else value - 1)


def device_generator(generator: torch.Generator) -> torch.Generator:
    """A generator on the checks' device, seeded from ``generator``: inputs drawn there, not copied
    over."""
    seed = int(torch.randint(2**62, (1,), generator=generator))
    on_device = torch.Generator(device=DEVICE)
    on_device.manual_seed(seed)
    return on_device


def _poisoned(like: torch.Tensor, fill: float) -> torch.Tensor:
    if like.dtype.is_floating_point:
        return torch.full_like(like, fill)
    return torch.full_like(like, torch.iinfo(like.dtype).min)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal element for element, NaN equal to NaN."""
    if a.dtype.is_floating_point:
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


@dataclass
class Case:
    """One size of a kernel check: the grader's inputs, its expected output, and the student's
    recorded launches."""

    # the number of elements, or the lab's own description of the case (Spec.describe names it)
    n: Any
    inputs: tuple[torch.Tensor, ...]
    expected: torch.Tensor
    recipe: dict
    label: str = ""  # Spec.describe(n), for messages

    @property
    def named(self) -> str:
        return self.label or describe_n(self.n)


def record_cases(
    student, spec: Spec, sizes: Sequence[int], generator: torch.Generator
) -> list[Case]:
    """Draw the grader's inputs at each size and ask the student's wrapper which kernels it launches
    for them."""
    from brrr.checks import kernels
    from brrr.checks.dtypes import dtype_name

    cases = []
    for n in sizes:
        inputs = spec.make_inputs(n, generator)
        expected = spec.reference(*inputs)
        shapes = {
            name: (list(t.shape), dtype_name(t.dtype))
            for name, t in zip(spec.names, inputs + (expected,))
        }
        recipe = student.record(shapes, inputs=spec.input_names)
        problem = kernels.recipe_problem(recipe)
        if problem:
            raise fail(f"{student.name}'s record of its kernel launches cannot be read: {problem}")
        cases.append(Case(n, inputs, expected, recipe, spec.describe(n)))
    return cases


def build_kernels(name: str, cases: Sequence[Case], *, interpreted: bool):
    """The student's kernels, checked and compiled here, from the sources their recordings
    carried."""
    from brrr.checks import kernels

    sources: dict[str, str] = {}
    constants: dict[str, Any] = {}
    for case in cases:
        if not case.recipe.get("launches"):
            raise fail(
                f"{name} launched no Triton kernel for {case.named}: this lab asks for a "
                "@triton.jit "
                "kernel that computes the result. The grader runs your kernels on its own tensors, "
                "so only what they store counts; torch code in the wrapper does not reach the "
                "output."
            )
        for kernel, source in case.recipe.get("sources", {}).items():
            if sources.setdefault(kernel, source) != source:
                raise fail(f"{name}: the source of kernel {kernel} changed between calls")
        constants |= case.recipe.get("constants", {})
    try:
        return kernels.Built(sources, constants, interpreted=interpreted)
    except kernels.KernelRejected as error:
        raise fail(f"{name}'s kernel was rejected before it ran: {error}") from None


def _replay_case(case: Case, built, spec: Spec, out: torch.Tensor, *, count: bool):
    """Replay one recorded call on the grader's tensors; return the traffic seen (or None)."""
    import numpy as np

    from brrr import traffic
    from brrr.checks import kernels

    storages = dict(zip(spec.input_names, case.inputs)) | {spec.out_name: out}
    storages |= kernels.scratch_tensors(case.recipe, out.device)
    named = dict(zip(spec.input_names, case.inputs)) | {spec.out_name: out}
    with np.errstate(all="ignore"):
        if not count:
            kernels.replay(case.recipe, built, storages)
            return None
        with traffic.count(named) as seen:
            try:
                kernels.replay(case.recipe, built, storages)
            except Exception as error:
                if seen.violations:
                    raise OutOfBounds(seen.violations[0]) from error
                raise
    return seen


class OutOfBounds(Exception):
    def __init__(self, violation):
        super().__init__(str(violation))
        self.violation = violation


def _kernel_error(name: str, error: BaseException, context: str) -> str:
    from brrr.checks import kernels

    if isinstance(error, OutOfBounds):
        return (
            f"{name}'s kernel accessed memory outside its tensors{context}: {error}. Mask every "
            "tl.load and "
            "tl.store (e.g. `mask=offsets < n`) so that the last block stays inside the tensor."
        )
    if isinstance(error, kernels.KernelRejected):
        return f"{name}'s launches could not be replayed{context}: {error}"
    text = str(error).strip().splitlines()[-1] if str(error).strip() else ""
    return f"{name}'s kernel failed when the grader ran it{context}: {type(error).__name__}: {text}"


def counted_at(n: Any, count_traffic_at: Any) -> bool:
    """Whether the case ``n`` is one whose traffic is asked for: ``count_traffic_at`` is one case or
    a list or tuple of them (a lab's case may itself be a dataclass, never a list)."""
    if count_traffic_at is None:
        return False
    if isinstance(count_traffic_at, (list, tuple)):
        return n in count_traffic_at
    return n == count_traffic_at


def unexpected_traffic_rows(extra: set, loaded: dict, stored: dict) -> list[tuple[str, ...]]:
    """Rows of a traffic table for the tensors a kernel touched that no rule implies any bytes
    for: what it loaded and stored of each, against 0 B."""
    return [
        (name, f"{loaded.get(name, 0):,} B loaded, {stored.get(name, 0):,} B stored", "0 B", "")
        for name in sorted(extra)
    ]


def idle_failure(name: str, traffic: dict, context: str = "") -> str | None:
    """Why the grid of a counted launch does not fit the problem, or None: a program that stored
    nothing did no work, and allowances that grow with the grid (once per program) would count
    it."""
    storing = traffic.get("storing", traffic["programs"])
    idle = [
        (kernel, programs, programs - stored)
        for kernel, programs, stored in zip(traffic["kernels"], traffic["programs"], storing)
        if stored < programs
    ]
    if not idle:
        return None
    kernel, programs, unused = idle[0]
    return (
        f"{name}'s launch of {kernel} ran {programs:,} programs{context}, and {unused:,} of them "
        "stored "
        "nothing: the grid must fit the problem, one program per block of the output (say "
        "triton.cdiv(n, BLOCK)). Programs that do no work would count against what the traffic "
        "check allows per program, so a grid larger than the problem needs is refused."
    )


def replay_cases(
    name: str, spec: Spec, cases: Sequence[Case], built, seed: int, *, count_traffic_at: Any = None
) -> dict:
    """Run the student's kernels on every case here and compare with the reference.

    In the interpreter every replay also checks bounds; the traffic of each case
    in ``count_traffic_at`` (one case, or a list or tuple of them) is returned
    (``traffics``, in order; ``traffic``, the first), and a counted launch with
    programs that store nothing fails (:func:`idle_failure`). Returns
    {'failure': str|None, ...}.
    """
    counting = built.interpreted
    rtol = atol = None
    traffics: list[dict] = []
    for case in cases:
        rtol, atol = tolerance(case.expected.dtype)
        snapshots = [t.clone() for t in case.inputs]
        out = _poisoned(case.expected, float("nan"))
        context = (
            f" for {case.named} ({str(case.expected.dtype).removeprefix('torch.')} on "
            f"{out.device.type}, seed {seed})"
        )
        try:
            seen = _replay_case(case, built, spec, out, count=counting)
            synchronize()
        except Exception as error:  # noqa: BLE001 - anything the kernel does wrong is the student's
            return {"failure": _kernel_error(name, error, context)}
        for input_name, before, after in zip(spec.input_names, snapshots, case.inputs):
            if not _same(before, after):
                return {
                    "failure": f"{name}'s kernel wrote into its input `{input_name}`{context}: it "
                    "must only read it."
                }
        if seen is not None and counted_at(case.n, count_traffic_at):
            traffics.append(
                {"n": case.n, "element_size": case.expected.element_size(), **seen.as_dict()}
            )
        wrong = _wrong_output(name, spec, case, out, built, context, rtol=rtol, atol=atol)
        if wrong:
            return {"failure": wrong}
        idle = (
            idle_failure(name, traffics[-1], context)
            if traffics and traffics[-1]["n"] == case.n
            else None
        )
        if idle:
            return {"failure": idle}
    return {
        "failure": None,
        "traffic": traffics[0] if traffics else None,
        "traffics": traffics,
        "rtol": rtol,
        "atol": atol,
    }


def _wrong_output(
    name: str, spec: Spec, case: Case, out: torch.Tensor, built, context: str, *, rtol, atol
) -> str | None:
    """Why ``out``, the kernels' output for ``case``, is not the reference, with a hint at the
    cause; None if it is right."""
    report = diff_report(
        spec.out_name,
        out,
        case.expected,
        rtol=rtol,
        atol=atol,
        unwritten=_unwritten(spec, case, out, built),
        inputs=dict(zip(spec.input_names, case.inputs)),
        title=f"{name}'s kernel wrote a wrong `{spec.out_name}`{context}.",
    )
    if not report:
        return None
    return report + _diagnosis(spec, case, out) + _scratch_hint(name, case.recipe)


def _unwritten(spec: Spec, case: Case, out: torch.Tensor, built) -> torch.Tensor | None:
    """The elements of ``out`` the kernels never wrote, where ``out`` (filled with NaN before the
    run) holds NaN the reference does not: those still hold a second fill after a second run. None
    if there is no such NaN, or the second run fails (the first run's report is enough)."""
    if not case.expected.dtype.is_floating_point or not bool(
        (out.isnan() & ~case.expected.isnan()).any()
    ):
        return None
    fill = second_fill(case.expected.dtype)
    second = _poisoned(case.expected, fill)
    try:
        _replay_case(case, built, spec, second, count=built.interpreted)
    except Exception:  # noqa: BLE001 - the first replay's report is enough
        return None
    return out.isnan() & (second == fill)


def _diagnosis(spec: Spec, case: Case, out: torch.Tensor) -> str:
    if spec.diagnose is None:
        return ""
    try:
        sentence = spec.diagnose(case.inputs, out)
    except Exception:  # noqa: BLE001 - a hint that cannot be computed is left out
        return ""
    return f"\n{sentence}" if sentence else ""


def _scratch_hint(name: str, recipe: dict) -> str:
    from brrr.checks import kernels

    scratch = sorted(set(kernels.scratch_names(recipe).values()))
    if not scratch:
        return ""
    return (
        f"\n{name} passed its kernels buffers it allocated itself ({', '.join(scratch)}). The "
        "grader runs "
        "only your kernels, on its own tensors, so those buffers start out filled with NaN here: "
        "whatever torch computed into them in your wrapper does not exist. Compute the result in "
        "your kernels."
    )


def check_kernels(
    student,
    spec: Spec,
    sizes: Sequence[int],
    *,
    count_traffic_at: Any = None,
    bounds_sizes: Sequence[int] = (),
    timeout_s: float = isolation.DEFAULT_TIMEOUT_S,
    seed: int | None = None,
) -> dict:
    """Grade the student's kernels against ``spec`` on fresh inputs of each size; raise
    AssertionError if wrong.

    The wrapper is asked only for its launches; the kernels are checked
    (:func:`brrr.checks.kernels.validate`), compiled and run here, on inputs
    drawn here, under :func:`brrr.checks.isolation.run`. Where kernels are
    compiled (a GPU), they are first replayed in the interpreter at
    ``bounds_sizes``, where every load and store is bounds-checked, and only
    then compiled: an unmasked load that runs past its tensor is reported
    there, before it can hit an illegal address on the GPU (which would
    leave the CUDA context unusable for every later check in this process).
    """
    generator, seed = fresh_generator(seed)
    name = student.name
    if TRITON_INTERPRETED:
        bounds = "bounds checked in the interpreter on every run"
    elif bounds_sizes:
        bounds = _check_bounds(student, spec, bounds_sizes, generator, seed, timeout_s)
    else:
        bounds = "bounds not checked"
    counted = (
        list(count_traffic_at)
        if isinstance(count_traffic_at, (list, tuple))
        else [count_traffic_at]
    )
    wanted = list(sizes) + [n for n in counted if n is not None and n not in sizes]
    cases = record_cases(student, spec, wanted, generator)
    built = build_kernels(name, cases, interpreted=TRITON_INTERPRETED)
    outcome = isolation.run(
        replay_cases,
        name,
        spec,
        cases,
        built,
        seed,
        count_traffic_at=count_traffic_at,
        timeout_s=timeout_s,
    )
    if not outcome.ok:
        raise fail(f"{name}'s kernel could not be checked: {outcome.error}")
    result = outcome.value
    if result["failure"]:
        raise fail(result["failure"])
    result.update(seed=seed, launches=len(cases[0].recipe["launches"]), bounds=bounds)
    return result


def _check_bounds(
    student, spec: Spec, bounds_sizes: Sequence, generator, seed: int, timeout_s: float
) -> str:
    """Replay the student's kernels at ``bounds_sizes`` in the interpreter, where every load and
    store is bounds-checked; raise AssertionError if they fail there. Returns what was checked,
    for the result's ``bounds``."""
    name = student.name
    small = record_cases(student, spec, bounds_sizes, generator)
    with _interpreter_on():
        interpreted = build_kernels(name, small, interpreted=True)
        checked = isolation.run(
            replay_cases, name, spec, _on_cpu(small), interpreted, seed, timeout_s=timeout_s
        )
    if not checked.ok:
        raise fail(f"{name}'s kernel could not be checked in the interpreter: {checked.error}")
    if checked.value["failure"]:
        raise fail(checked.value["failure"])
    if all(isinstance(n, int) for n in bounds_sizes):
        return (
            f"bounds checked in the interpreter at n = {', '.join(f'{n:,}' for n in bounds_sizes)}"
        )
    return (
        f"bounds checked in the interpreter at {'; '.join(spec.describe(n) for n in bounds_sizes)}"
    )


def _traffic_of(spec: Spec, case: Case, built) -> dict:
    out = _poisoned(case.expected, float("nan"))
    seen = _replay_case(case, built, spec, out, count=True)
    return {"n": case.n, "element_size": case.expected.element_size(), **seen.as_dict()}


def count_traffic(
    student,
    spec: Spec,
    n: int,
    *,
    timeout_s: float = isolation.DEFAULT_TIMEOUT_S,
    seed: int | None = None,
) -> dict:
    """The global-memory traffic of the student's kernels, replayed here at ``n`` in the
    interpreter, whatever values they compute: ``{'n', 'element_size', 'loaded', 'stored',
    'kernels', ...}``.

    :func:`check_kernels` counts traffic only once the values are right, so a
    wrong submission never reaches a lab's traffic rule there. This is the count
    that rule would see, to show what it says of any submission (tests, feedback).
    Traffic is counted in the Triton interpreter only: on a GPU, where kernels
    are compiled, this refuses.
    """
    if not TRITON_INTERPRETED:
        raise RuntimeError(
            "count_traffic counts loads and stores in the Triton interpreter, which runs on a CPU; "
            "this process compiles kernels for a GPU"
        )
    generator, seed = fresh_generator(seed)
    cases = record_cases(student, spec, [n], generator)
    built = build_kernels(student.name, cases, interpreted=True)
    outcome = isolation.run(_traffic_of, spec, cases[0], built, timeout_s=timeout_s)
    if not outcome.ok:
        raise fail(
            f"{student.name}'s kernel could not be run to count its traffic (seed {seed}): "
            f"{outcome.error}"
        )
    return outcome.value


@contextlib.contextmanager
def _interpreter_on() -> Iterator[None]:
    """TRITON_INTERPRET=1 inside the block, as Triton expects while interpreted kernels are made and
    run."""
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous


def _on_cpu(cases: Sequence[Case]) -> list[Case]:
    """The same cases with their tensors on the CPU, for the interpreter."""
    return [
        Case(c.n, tuple(t.cpu() for t in c.inputs), c.expected.cpu(), c.recipe, c.label)
        for c in cases
    ]


# ---------------------------------------------------------------- performance


@dataclass(frozen=True)
class Attempt:
    """One measurement of a performance check: the value and whether it met the threshold.
    ``final``: a miss so far outside the threshold that no noise could explain it, which further
    attempts cannot turn."""

    value: float
    passed: bool
    detail: str
    final: bool = False


def repeat_until_pass(
    measure: Callable[[], Attempt], attempts: int | None = None
) -> tuple[Attempt, list[Attempt]]:
    """Run ``measure`` until an attempt passes, at most ``attempts`` times; return the best and all
    of them.

    A noisy machine can make one honest measurement fall short; a check fails
    only when every attempt does, or one misses beyond doubt (``Attempt.final``). The retry is
    :func:`brrr.targets.measurements`, the one every target uses.
    """
    history = targets.measurements(
        measure(),
        measure,
        lambda attempt: attempt.passed or attempt.final,
        attempts=attempts or thresholds.attempts(),
    )
    if history[-1].passed or history[-1].final:
        return history[-1], history
    return max(history, key=lambda a: a.value), history


_figures: list[
    dict
] = []  # the timed checks judged since taken_figures() last ran (checks run one at a time)


def taken_figures() -> list[dict]:
    """The figures of the timed checks judged since the last call, and forget them: each one's best
    value, every attempt's, the threshold and its rule. The grader sends them with its verdict, for
    the GPU record."""
    taken = list(_figures)
    _figures.clear()
    return taken


def timed_verdict(
    best: Attempt,
    history: list[Attempt],
    what: str,
    needed: str,
    threshold,
    *,
    failed: str = "",
    unit: str = "",
) -> str:
    """The pass line of a timed check, ``what: best detail (needed <threshold><unit>)``; if no
    attempt passed, fail with every attempt, what was ``needed`` and why (``failed``: a longer
    ``what`` for that message). Either way its figures are kept for :func:`taken_figures`."""
    _figures.append(
        {
            "what": what,
            "value": float(best.value),
            "attempts": [float(attempt.value) for attempt in history],
            "bound": float(threshold.value),
            "rule": threshold.kind,
        }
    )
    if not best.passed:
        tried = "; ".join(f"attempt {i + 1}: {a.detail}" for i, a in enumerate(history))
        raise fail(f"{failed or what}: {tried}. Needed {needed} ({threshold.why}).")
    return f"{what}: {best.detail} (needed {threshold.describe()}{unit})"


def one_launch(
    name: str, recipe: dict, inputs: str, what: str, constants: tuple[str, ...], why: str
) -> tuple[dict, dict, int]:
    """The one launch a lab asks for in a recorded ``recipe``: ``(launch, its constexpr sizes,
    programs)``.

    Fails (AssertionError) unless the wrapper, called on ``inputs`` (their shape, in
    words), launched exactly one kernel (``what``: "one matmul kernel", say), and
    that kernel took each of ``constants`` as a constexpr positive whole number;
    ``why`` says what the grader reads them for.
    """
    launches = recipe.get("launches", [])
    if len(launches) != 1:
        kernels = ", ".join(launch.get("kernel", "?") for launch in launches) or "none"
        raise fail(
            f"{name} launched {len(launches)} kernels for {inputs} ({kernels}): this lab asks for "
            f"{what}."
        )
    launch = launches[0]
    args = launch.get("args", {})
    sizes = {}
    for arg in constants:
        value = args.get(arg, {}).get("value")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise fail(
                f"{name}'s kernel {launch.get('kernel')} has no constexpr argument {arg} (a "
                f"positive whole number): the lab's kernel takes {', '.join(constants)}: "
                f"tl.constexpr, and {why}."
            )
        sizes[arg] = value
    return launch, sizes, math.prod(launch.get("grid", [1]))


def correct_summary(name: str, against: str, cases, result: dict) -> str:
    """What a passed correctness check says: the reference, every case, the tolerances, bounds and
    seed.

    ``against`` names the reference, ``cases`` are the shapes checked (their ``str``), and
    ``result`` is what :func:`check_kernels` returned.
    """
    return (
        f"{name}'s kernel, run by the grader, matches {against} on "
        f"{'; '.join(str(c) for c in cases)}, with NaN-filled outputs (float32 rtol "
        f"{tolerance(torch.float32)[0]:g}; float16 rtol {tolerance(torch.float16)[0]:g}); "
        f"{result['bounds']}; seed {result['seed']}"
    )
