"""The grader: checks a student's code against a plain-torch spec, and its speed against this machine.

Grader cells in a lab call check functions built from the pieces here. A check
that fails raises ``AssertionError`` with a message a student can act on: what
was measured, what was needed, and on which device. A check that passes prints
one line saying what it measured. Either way the result is appended to the file
named by ``$BRRR_GRADING_LOG`` (when set), which is how the gradebook
(:mod:`brrr.gradebook`) learns each check's result.

Correctness (:func:`check_correct`)
    Fresh random inputs are drawn at several sizes, including sizes that are a
    multiple of no block. The output buffer is filled with NaN before each call,
    so an element the kernel never writes cannot pass by luck; where NaN comes
    back, a second call with a different fill tells "never written" from
    "computed NaN". Tolerances fit the dtype (:data:`TOLERANCES`). A failure
    prints where the output differs, by how much, and the first bad indices with
    the inputs there.

Anti-gaming
    Outputs must change when the inputs change in place (a cached result fails);
    the student's code must not call the reference (watched with a profile hook,
    so an alias or a wrapper is caught too) and must not modify its inputs;
    performance checks rotate several input sets, and afterwards check that the
    code still computes the right result on new values.

Crashes
    Student code runs under :func:`brrr.isolation.run`: a crash, a hang or an
    exception becomes a failed check with the reason.

Thresholds come from :mod:`brrr.thresholds`; nothing here hard-codes one.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import secrets
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from brrr import isolation, thresholds
from brrr.device import DEVICE, ON_GPU, TRITON_INTERPRETED, device_name, synchronize
from brrr.stamp import stamp

LOG_ENV = "BRRR_GRADING_LOG"

# (rtol, atol) per dtype: a few ulps of the dtype, scaled for chains of a handful of ops.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-9, 1e-9),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}

# The second fill, used to tell unwritten elements from computed NaN.
SECOND_FILL = -1.2345e30


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing outputs of ``dtype``; integers compare exactly."""
    if not dtype.is_floating_point:
        return (0.0, 0.0)
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def where() -> str:
    """The device phrase every grader message ends with."""
    mode = "GPU" if ON_GPU else "CPU, Triton interpreted"
    return f"on {device_name()} ({mode})"


# ---------------------------------------------------------------- results and the log


@dataclass(frozen=True)
class Result:
    lab: str
    check: str
    passed: bool
    message: str
    device: str = ""
    device_class: str = ""

    def as_json(self) -> str:
        return json.dumps({"lab": self.lab, "check": self.check, "passed": self.passed, "message": self.message,
                           "device": self.device, "device_class": self.device_class, "time": time.time()})


def record(result: Result) -> None:
    """Append ``result`` to ``$BRRR_GRADING_LOG`` if it is set (one JSON object per line)."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as log:
        log.write(result.as_json() + "\n")


class Printed(str):
    """Text a check has already printed; Jupyter does not display it a second time as the cell's value."""

    def _ipython_display_(self) -> None:
        pass


class Passed(Printed):
    """A passed check's one-line summary."""


def graded(lab: str, check: str) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Make ``fn`` a graded check: it returns a one-line summary on success or raises AssertionError.

    The wrapper prints ``PASS`` with the summary and the stamp, or records the
    failure and re-raises. An exception other than AssertionError is a bug in the
    grader, not the student's fault: it is recorded as such and re-raised as is.
    """

    def decorate(fn: Callable[..., str]) -> Callable[..., str]:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs) -> str:
            device, klass = device_name(), thresholds.device_class()
            try:
                summary = fn(*args, **kwargs)
            except AssertionError as failure:
                record(Result(lab, check, False, str(failure), device, klass))
                raise
            except KeyboardInterrupt:
                record(Result(lab, check, False, "interrupted before it finished: the cell was stopped, by its "
                              "time limit or by hand", device, klass))
                raise
            except Exception as error:
                record(Result(lab, check, False, f"grader error (not your fault): {type(error).__name__}: {error}",
                              device, klass))
                raise
            record(Result(lab, check, True, summary, device, klass))
            print(f"PASS {lab} / {check}: {summary}\n  {stamp()}")
            return Passed(summary)

        wrapper.lab, wrapper.check = lab, check  # type: ignore[attr-defined]
        return wrapper

    return decorate


def fail(message: str) -> AssertionError:
    """An AssertionError whose message ends with the device it was measured on."""
    return AssertionError(f"{message}\n[{where()}]")


# ---------------------------------------------------------------- watching what student code calls


@dataclass
class CallWatch:
    """Calls into watched functions seen while a :func:`watch_calls` block ran."""

    seen: list[str] = field(default_factory=list)


def _code_objects(target: Any) -> tuple[set[types.CodeType], set[str]]:
    codes: set[types.CodeType] = set()
    files: set[str] = set()
    if isinstance(target, types.ModuleType):
        if getattr(target, "__file__", None):
            files.add(os.path.realpath(target.__file__))
        return codes, files
    function = inspect_unwrap(target)
    code = getattr(function, "__code__", None)
    if code is not None:
        codes.add(code)
    return codes, files


def inspect_unwrap(function: Any) -> Any:
    while hasattr(function, "__wrapped__"):
        function = function.__wrapped__
    return getattr(function, "__func__", function)


@contextlib.contextmanager
def watch_calls(targets: Sequence[Any]) -> Iterator[CallWatch]:
    """Record every call, inside the block, of a watched function, or of any function of a watched module.

    Uses a profile hook (``sys.setprofile``, and ``threading.setprofile`` for
    threads started inside), so a call is seen whatever name the function was
    reached by. The hook slows Python calls down; keep the block short.
    """
    watch = CallWatch()
    codes: set[types.CodeType] = set()
    files: set[str] = set()
    for target in targets:
        more_codes, more_files = _code_objects(target)
        codes |= more_codes
        files |= more_files
    real_paths: dict[str, str] = {}

    def hook(frame, event, arg):  # noqa: ARG001 - profile hook signature
        if event != "call":
            return
        code = frame.f_code
        hit = code in codes
        if not hit and files:
            path = real_paths.get(code.co_filename)
            if path is None:
                path = real_paths[code.co_filename] = os.path.realpath(code.co_filename)
            hit = path in files
        if hit:
            name = f"{frame.f_globals.get('__name__', '?')}.{code.co_qualname if hasattr(code, 'co_qualname') else code.co_name}"
            if name not in watch.seen:
                watch.seen.append(name)

    previous = sys.getprofile()
    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        yield watch
    finally:
        sys.setprofile(previous)
        threading.setprofile(None)


@contextlib.contextmanager
def count_launches() -> Iterator[list[str]]:
    """Names of the Triton kernels launched (``kernel[grid](...)``) inside the block, compiled or interpreted."""
    launched: list[str] = []
    classes = []
    try:
        from triton.runtime.jit import JITFunction

        classes.append(JITFunction)
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:
        pass
    originals = {cls: cls.__dict__.get("run") for cls in classes}

    def wrap(cls, original):
        def run(self, *args, **kwargs):
            launched.append(getattr(self, "__name__", None) or getattr(getattr(self, "fn", None), "__name__", "kernel"))
            return original(self, *args, **kwargs)
        return run

    try:
        for cls, original in originals.items():
            if original is not None:
                cls.run = wrap(cls, original)
        yield launched
    finally:
        for cls, original in originals.items():
            if original is not None:
                cls.run = original


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


def _table(flat: list[int], got: torch.Tensor, expected: torch.Tensor, inputs: dict[str, torch.Tensor],
           shape: Sequence[int]) -> str:
    names = ["index", "got", "expected"] + list(inputs)
    rows = [names]
    for i in flat:
        row = [_index(i, shape), _fmt(float(got[i])), _fmt(float(expected[i]))]
        row += [_fmt(float(t[i])) for t in inputs.values()]
        rows.append(row)
    widths = [max(len(row[c]) for row in rows) for c in range(len(names))]
    return "\n".join("    " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows)


def diff_report(name: str, got: torch.Tensor, expected: torch.Tensor, *, rtol: float, atol: float,
                inputs: dict[str, torch.Tensor] | None = None, unwritten: torch.Tensor | None = None,
                context: str = "", title: str | None = None, show: int = 8) -> str | None:
    """Why ``got`` is not ``expected``, readably; None if they agree within ``rtol``/``atol``.

    ``unwritten`` marks elements the kernel never wrote (found by the caller
    with two different fills). ``inputs`` with the output's shape are shown
    beside the first bad elements.
    """
    if got.shape != expected.shape:
        return f"{name} has shape {tuple(got.shape)}, but the reference has shape {tuple(expected.shape)}{context}."
    if unwritten is None and bool(torch.isclose(got.detach().to(expected.dtype), expected.detach(), rtol=rtol,
                                                atol=atol, equal_nan=True).all()):
        return None  # the common case, decided on the device without copying anything
    got_flat = got.detach().reshape(-1).to("cpu", torch.float64)
    exp_flat = expected.detach().reshape(-1).to("cpu", torch.float64)
    shown_inputs = {k: v.detach().reshape(-1).to("cpu", torch.float64) for k, v in (inputs or {}).items()
                    if v.shape == expected.shape}
    close = torch.isclose(got_flat, exp_flat, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    n = got_flat.numel()
    shape = list(expected.shape)
    paragraphs = []
    bad = ~close
    never = torch.zeros_like(bad) if unwritten is None else unwritten.reshape(-1).to("cpu").bool() & bad
    if bool(never.any()):
        idx = never.nonzero().flatten().tolist()
        count = len(idx)
        suffix = idx == list(range(n - count, n))
        if suffix and count == 1:
            where_text = f"It is the last element, index {n - 1:,}."
        elif suffix:
            where_text = f"They are the last {count:,} elements, indices {n - count:,} to {n - 1:,}."
        else:
            where_text = f"They are at indices {_ranges(idx)}."
        hint = ("Does your grid cover all n elements (triton.cdiv(n, BLOCK) programs), and does the last "
                "program store its partial block under a mask?" if suffix else
                "Some programs, or some lanes, never stored their results: check the grid, the offsets and "
                "the store mask.")
        if count == n:
            hint = ("Nothing was written. Your function must write its result into the `out` tensor it is "
                    "given (returning a new tensor does not count).")
        paragraphs.append(
            f"{name} has {count:,} of {n:,} elements unwritten: {'it' if count == 1 else 'they'} still "
            f"hold{'s' if count == 1 else ''} what the grader filled the output with before the call (NaN, and {SECOND_FILL:g} in a second call). {where_text} {hint}")
    nonfinite = bad & ~never & ~torch.isfinite(got_flat) & torch.isfinite(exp_flat)
    if bool(nonfinite.any()):
        idx = nonfinite.nonzero().flatten().tolist()
        first = idx[0]
        at = ", ".join(f"{k} = {_fmt(float(v[first]))}" for k, v in shown_inputs.items())
        paragraphs.append(
            f"{name} has NaN or inf at {len(idx):,} of {n:,} elements where the reference is finite, "
            f"the first at index {_index(first, shape)}" + (f" (where {at})" if at else "") +
            f": got {_fmt(float(got_flat[first]))}, expected {_fmt(float(exp_flat[first]))}. Look for an "
            "overflow: in float32, exp() of an input above 88.7 is inf, and inf/inf or inf - inf is NaN.\n"
            + _table(idx[:show], got_flat, exp_flat, shown_inputs, shape))
    wrong = bad & ~never & ~nonfinite
    if bool(wrong.any()):
        idx = wrong.nonzero().flatten().tolist()
        error = (got_flat - exp_flat).abs()
        error[~wrong] = -1.0
        worst = int(error.argmax())
        paragraphs.append(
            f"{name} differs from the reference at {len(idx):,} of {n:,} elements ({len(idx) / n:.1%}), by more "
            f"than atol + rtol·|expected| = {atol:g} + {rtol:g}·|expected|. The largest difference is "
            f"{_fmt(float(error[worst]))}, at index {_index(worst, shape)} (got {_fmt(float(got_flat[worst]))}, "
            f"expected {_fmt(float(exp_flat[worst]))}). The first bad elements:\n"
            + _table(idx[:show], got_flat, exp_flat, shown_inputs, shape))
    title = title or f"{name} is wrong{context}."
    return (title + "\n" + "\n".join(paragraphs)).rstrip()


# ---------------------------------------------------------------- the correctness check


@dataclass(frozen=True)
class Spec:
    """A task: what the student's function must compute, and how to make inputs for it.

    ``reference(*inputs)`` is the plain-torch spec. ``make_inputs(n, generator)``
    returns fresh input tensors of ``n`` elements on :data:`~brrr.device.DEVICE`.
    The student's function is called as ``fn(*inputs, out)`` and must write its
    result into ``out``.
    """

    name: str
    reference: Callable[..., torch.Tensor]
    make_inputs: Callable[[int, torch.Generator], tuple[torch.Tensor, ...]]
    input_names: tuple[str, ...]
    out_name: str = "out"
    forbidden: tuple[Any, ...] = ()  # functions or modules the student's code must not call


def fresh_generator(seed: int | None = None) -> tuple[torch.Generator, int]:
    """A generator on the CPU seeded from the OS (or with ``seed``), and its seed for the report."""
    seed = secrets.randbits(31) if seed is None else seed
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    return generator, seed


def _poisoned(like: torch.Tensor, fill: float) -> torch.Tensor:
    if like.dtype.is_floating_point:
        return torch.full_like(like, fill)
    return torch.full_like(like, torch.iinfo(like.dtype).min)


def _call_student(fn, inputs, out, spec: Spec, *, watch: bool, traffic_named: dict | None):
    """Call ``fn(*inputs, out)``; return (what it returned, forbidden calls seen, kernels launched, traffic)."""
    from brrr import traffic as traffic_module

    seen_traffic = None
    with contextlib.ExitStack() as stack:
        # The interpreter computes with numpy, which warns about overflow in exp() and the like;
        # the comparison reports what matters (NaN or inf where the reference is finite).
        stack.enter_context(np.errstate(all="ignore"))
        calls = stack.enter_context(watch_calls(spec.forbidden)) if watch and spec.forbidden else CallWatch()
        launched = stack.enter_context(count_launches())
        if traffic_named is not None:
            seen_traffic = stack.enter_context(traffic_module.count(traffic_named))
        try:
            returned = fn(*inputs, out)
        except Exception as error:
            if seen_traffic is not None and seen_traffic.violations:
                raise _OutOfBounds(seen_traffic.violations[0]) from error
            raise
        synchronize()
    return returned, calls.seen, launched, seen_traffic


class _OutOfBounds(Exception):
    def __init__(self, violation):
        super().__init__(str(violation))
        self.violation = violation


def _student_error(fn_name: str, error: BaseException, context: str = "") -> str:
    if isinstance(error, _OutOfBounds):
        return (f"{fn_name} accessed memory outside its tensors{context}: {error}. Mask every tl.load and "
                "tl.store (e.g. `mask=offsets < n`) so that the last block stays inside the tensor.")
    if isinstance(error, NotImplementedError) or "NotImplementedError" in f"{type(error).__name__}{error}":
        return f"{fn_name} is not written yet: it raised NotImplementedError{context} ({error})."
    return f"{fn_name} raised {type(error).__name__}{context}: {error}"


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal element for element, NaN equal to NaN."""
    if a.dtype.is_floating_point:
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


def _correctness_run(fn, spec: Spec, sizes: Sequence[int], seed: int, count_traffic_at: int | None) -> dict:
    """The body of :func:`check_correct`; runs isolated. Returns {'failure': str|None, 'traffic': dict|None, ...}."""
    from brrr import traffic

    # In the interpreter every call counts traffic and checks bounds (cheap); the counts are kept at one size.
    counting = TRITON_INTERPRETED and traffic.supported()
    generator, _ = fresh_generator(seed)
    name = getattr(fn, "__name__", "your function")
    rtol = atol = None
    last = None
    traffic_summary = None
    launches: list[str] = []
    for size_number, n in enumerate(sizes):
        inputs = spec.make_inputs(n, generator)
        expected = spec.reference(*inputs)
        rtol, atol = tolerance(expected.dtype)
        snapshots = [t.clone() for t in inputs]
        out = _poisoned(expected, float("nan"))
        context = f" for n = {n:,} ({str(expected.dtype).removeprefix('torch.')} on {DEVICE.type}, seed {seed})"
        named = None
        if counting:
            named = dict(zip(spec.input_names, inputs)) | {spec.out_name: out}
        try:
            returned, called, launches, seen = _call_student(fn, inputs, out, spec, watch=size_number == 0,
                                                            traffic_named=named)
        except BaseException as error:  # noqa: BLE001
            if isinstance(error, KeyboardInterrupt):
                raise
            return {"failure": _student_error(name, error, context)}
        if called:
            return {"failure": f"{name} called the reference implementation ({', '.join(called)}){context}. "
                               "Compute the result yourself, in your own kernel."}
        for input_name, before, after in zip(spec.input_names, snapshots, inputs):
            if not _same(before, after):
                return {"failure": f"{name} modified its input `{input_name}`: it must only read it{context}."}
        if seen is not None and n == count_traffic_at:
            traffic_summary = {"n": n, "element_size": expected.element_size(), **seen.as_dict()}
        unwritten = None
        if expected.dtype.is_floating_point and bool((out.isnan() & ~expected.isnan()).any()):
            second = _poisoned(expected, SECOND_FILL)
            try:
                _call_student(fn, inputs, second, spec, watch=False, traffic_named={} if counting else None)
                unwritten = out.isnan() & (second == SECOND_FILL)
            except Exception:  # noqa: BLE001 - the first call's report is enough
                unwritten = None
        report = diff_report(spec.out_name, out, expected, rtol=rtol, atol=atol, unwritten=unwritten,
                             inputs=dict(zip(spec.input_names, inputs)),
                             title=f"{name} wrote a wrong `{spec.out_name}`{context}.")
        if report:
            return {"failure": report}
        last = (n, inputs, out, expected)
    # Outputs must change when inputs change: new values in the same tensors (same addresses).
    if last is not None:
        n, inputs, out, expected = last
        fresh = spec.make_inputs(n, generator)
        previous = out.clone()
        for tensor, new in zip(inputs, fresh):
            tensor.copy_(new)
        expected = spec.reference(*inputs)
        out.fill_(float("nan")) if out.dtype.is_floating_point else out.fill_(0)
        try:
            _call_student(fn, inputs, out, spec, watch=False, traffic_named={} if counting else None)
        except Exception as error:  # noqa: BLE001
            return {"failure": _student_error(name, error, " (on a second call, with new input values)")}
        context = f" for n = {n:,} once its inputs had new values, written in place (seed {seed})"
        report = diff_report(spec.out_name, out, expected, rtol=rtol, atol=atol,
                             inputs=dict(zip(spec.input_names, inputs)),
                             title=f"{name} wrote a wrong `{spec.out_name}`{context}.")
        if report:
            if torch.equal(out, previous):
                return {"failure": f"{name} wrote the same `{spec.out_name}` as before{context}. It must "
                                   "compute from its inputs on every call: no cached results."}
            return {"failure": report}
    return {"failure": None, "traffic": traffic_summary, "rtol": rtol, "atol": atol, "launches": launches}


def crash_site(outcome: isolation.Outcome) -> str:
    """The student's frames from a crash's stack, as a readable tail for a message ('' if none)."""
    if not outcome.crashed or not outcome.traceback:
        return ""
    library = (os.sep + "site-packages" + os.sep, os.sep + "brrr" + os.sep, os.sep + "lib" + os.sep + "python")
    frames = [line.strip() for line in outcome.traceback.splitlines()
              if line.strip().startswith("File ") and not any(part in line for part in library)]
    return ("\nWhere it crashed (most recent call first):\n" + "\n".join(f"  {f}" for f in frames[:6])) if frames else ""


def outcome_failure(name: str, outcome: isolation.Outcome) -> AssertionError:
    """The failed check for an isolated run that did not return: a check's own failure, or why it broke."""
    if outcome.error_type == "AssertionError":
        return AssertionError(outcome.error.removeprefix("AssertionError: "))
    if outcome.error_type == "NotImplementedError" or "NotImplementedError" in outcome.error:
        return fail(f"{name} is not written yet: it raised NotImplementedError "
                    f"({outcome.error.removeprefix('NotImplementedError: ')})")
    return fail(f"{name} could not be checked: {outcome.error}{crash_site(outcome)}")


def check_correct(fn: Callable[..., Any], spec: Spec, sizes: Sequence[int], *, count_traffic_at: int | None = None,
                  timeout_s: float = isolation.DEFAULT_TIMEOUT_S, seed: int | None = None) -> dict:
    """Check ``fn`` against ``spec`` on fresh inputs of each size in ``sizes``; raise AssertionError if wrong.

    Runs under :func:`brrr.isolation.run`. With ``count_traffic_at=n`` (and the
    Triton interpreter on) the call at size ``n`` also counts global-memory
    traffic and checks bounds; the counts come back under ``"traffic"``.
    """
    _, seed = fresh_generator(seed)
    name = getattr(fn, "__name__", "your function")
    outcome = isolation.run(_correctness_run, fn, spec, list(sizes), seed, count_traffic_at, timeout_s=timeout_s)
    if not outcome.ok:
        raise outcome_failure(name, outcome)
    result = outcome.value
    if result["failure"]:
        raise fail(result["failure"])
    result["seed"] = seed
    return result


# ---------------------------------------------------------------- bounds on a GPU, through the interpreter


@contextlib.contextmanager
def interpreted_kernels(fn: Callable[..., Any]) -> Iterator[list[str]]:
    """Inside the block, the compiled Triton kernels that ``fn`` reaches by global name run in the interpreter.

    For a GPU, where kernels are compiled: each ``@triton.jit`` function in
    ``fn``'s module namespace (a notebook's ``__main__``) is swapped for an
    interpreted twin of the same Python function, with ``TRITON_INTERPRET`` on,
    and put back afterwards. The interpreter copies CUDA tensors to the host and
    back, so ``fn`` is called exactly as usual. Yields the swapped names.
    """
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    namespace = getattr(inspect_unwrap(fn), "__globals__", {})
    compiled = {name: value for name, value in namespace.items() if isinstance(value, JITFunction)}
    previous = os.environ.get("TRITON_INTERPRET")
    try:
        os.environ["TRITON_INTERPRET"] = "1"
        for name, kernel in compiled.items():
            namespace[name] = InterpretedFunction(kernel.fn)
        yield sorted(compiled)
    finally:
        for name, kernel in compiled.items():
            namespace[name] = kernel
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous


def bounds_in_interpreter(fn: Callable[..., Any], spec: Spec, sizes: Sequence[int]) -> tuple[str | None, str]:
    """Run ``fn`` with its kernels interpreted, bounds checked, at small ``sizes``: (failure or None, note).

    Where kernels are compiled (a GPU), an unmasked load past the end of a tensor
    usually reads harmless garbage and goes unnoticed; the interpreter sees it.
    Only an observed out-of-bounds access fails. Anything else that stops the
    interpreted run (a kernel calling another ``@triton.jit`` function, autotuning,
    a feature the interpreter lacks) skips the check, and the note says why.
    """
    from brrr import traffic

    if not traffic.supported():
        return None, "bounds not checked: this Triton's interpreter is not one brrr.traffic supports"
    name = getattr(fn, "__name__", "your function")
    generator, seed = fresh_generator()
    with interpreted_kernels(fn) as swapped:
        if not swapped:
            return None, f"bounds not checked: {name} reaches no @triton.jit kernel by a global name"
        for n in sizes:
            inputs = spec.make_inputs(n, generator)
            out = _poisoned(spec.reference(*inputs), float("nan"))
            seen = None
            try:
                with np.errstate(all="ignore"), traffic.count() as seen:
                    fn(*inputs, out)
            except Exception as error:  # noqa: BLE001
                if seen is not None and seen.violations:
                    context = f" for n = {n:,} (run in the Triton interpreter to check bounds, seed {seed})"
                    return _student_error(name, _OutOfBounds(seen.violations[0]), context), ""
                return None, f"bounds not checked: {name} could not run in the interpreter ({type(error).__name__})"
    return None, f"bounds checked in the interpreter at n = {', '.join(f'{n:,}' for n in sizes)}"


# ---------------------------------------------------------------- performance


@dataclass(frozen=True)
class Attempt:
    """One measurement of a performance check: the value and whether it met the threshold."""

    value: float
    passed: bool
    detail: str


def repeat_until_pass(measure: Callable[[], Attempt], attempts: int | None = None) -> tuple[Attempt, list[Attempt]]:
    """Run ``measure`` until an attempt passes, at most ``attempts`` times; return the best and all of them.

    A noisy machine can make one honest measurement fall short; a check fails
    only when every attempt does.
    """
    attempts = attempts or thresholds.attempts()
    history: list[Attempt] = []
    for _ in range(attempts):
        attempt = measure()
        history.append(attempt)
        if attempt.passed:
            return attempt, history
    return max(history, key=lambda a: a.value), history


class Rotation:
    """Cycle through several prepared argument sets, so repeated timed calls never reuse the last one's data."""

    def __init__(self, sets: Sequence[tuple]):
        if not sets:
            raise ValueError("need at least one argument set")
        self.sets = list(sets)
        self.calls = 0

    def next(self) -> tuple:
        args = self.sets[self.calls % len(self.sets)]
        self.calls += 1
        return args


def student_call(name: str, fn: Callable[..., Any], *args, **kwargs) -> Any:
    """Call student code in this process; turn any exception into a failed check that says what it raised."""
    try:
        return fn(*args, **kwargs)
    except AssertionError:
        raise
    except Exception as error:  # noqa: BLE001
        raise fail(_student_error(name, error)) from error
