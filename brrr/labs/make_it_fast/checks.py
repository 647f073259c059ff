"""Lab 4, "make this step fast": how it is graded (the task is in :mod:`brrr.labs.make_it_fast`).

Grading, in the grader process (thresholds from :mod:`brrr.checks.thresholds`):

- ``same_result``: at every shape of :data:`SHAPES`, on a fresh seed, the
  student's losses and parameters match the grader's own run of
  :func:`given_train` (its copy, imported before any student code ran).
- ``speedup``: the grader times its own copy of the given step in its own
  process (one thread) and the student's step over the connection
  (``threads=1``, in the notebook's process, by the grader's clock: the message
  round trip only ever counts against the student). Every timed call, on both
  sides, gets a fresh seed, so nothing can be precomputed or cached, and every
  timed result is checked against the grader's. Speedup = median over median,
  at least 3x on a CPU and 5x on a GPU. The student's process (and every other
  process of its sandbox) may spend at most 1.3 CPU-seconds per second of the call
  (:func:`cpu_seconds`, the kernel's own per-process CPU clock): a step that is
  faster only because it runs on more cores fails. (There is no lower bound: across
  a real connection, on a loaded machine, an honest step's process is on the CPU
  for only about half of the call's wall time, which includes the round trip.)
  While the grader times its copy of the given step, the student's processes
  must be quiet and the grader's thread must have had the CPU
  (:mod:`brrr.checks.fairness`).
- ``diagnosis``: on two problems the grader draws (a narrow, overhead-bound
  model and a wide one whose ops take real time), ``diagnose`` returns its
  fraction and the path of its trace. The grader has the notebook's process read
  that trace (under the gradebook the notebook's /tmp is its sandbox's own, out of
  the grader's sight) and send its bytes, and computes the fraction from it by
  the lab's definition (:func:`overhead_fraction`): the two must agree (the
  definition is right); the trace must hold as many ops as the grader's own
  trace of the given step on that problem (it is a trace of the given step); and
  the fraction must lie within ±0.15 of the grader's own measurements, taken
  right before and after (it was measured here). The narrow problem's fraction
  exceeds the wide one's by more than that tolerance, so the number right for one
  fails the other.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from brrr import units
from brrr.checks import core, fairness, thresholds
from brrr.device import ON_GPU, per_device, synchronize
from brrr.labs.make_it_fast import LAB
from brrr.labs.make_it_fast.given import NARROW, Problem, SHAPES, Shape, given_train, new_problem

CHECKS = {
    "cpu": ("same_result", "speedup", "diagnosis"),
    "gpu": ("same_result", "speedup", "diagnosis"),
}
ALL_CHECKS = CHECKS["cpu"]
WIDE = per_device(
    cpu=Shape(batch=2, width=2048, depth=2, steps=1),
    gpu=Shape(batch=4, width=4096, depth=2, steps=1),
)
TIMED_CALLS = 9  # per side and attempt of the speedup check
TRACE_MAX_BYTES = 64 << 20


def overhead_fraction(trace, label: str = "step") -> float:
    """The lab's definition: the share of the profiled steps' time (the ``label`` annotations) with
    no CPU op running (CPU trace), or with no kernel running on the device (GPU trace)."""
    from brrr import traces

    window = trace.annotation_span(label) if trace.annotation_spans(label) else trace.window
    if trace.has_device:
        return traces.device_idle_fraction(trace, window)
    return traces.idle_fraction(trace.cpu_ops, window)


def profile_given(problem: Problem, path) -> tuple[float, int]:
    """The grader's own measurement: one profiled run of :func:`given_train` after a warm-up; the
    fraction and the number of CPU ops in the trace."""
    from brrr import traces
    from brrr.timing import torch_threads

    with torch_threads(1):
        given_train(problem)
        trace = traces.record(lambda: given_train(problem), 1, path)
    return overhead_fraction(trace), len(trace.cpu_ops)


# ---------------------------------------------------------------- the student's process, seen from
# here


student_pid = fairness.student_pid  # the pid of the process that answers the student's calls


def _process_cpu_clock(pid: int) -> float:
    """The process's CPU clock (:func:`brrr.checks.fairness.process_cpu_clock`; tests replace it
    here)."""
    return fairness.process_cpu_clock(pid)


_children_ticks = fairness.reaped_children_cpu


def process_tree(pid: int) -> list[int]:
    """``pid`` first, then every other process of the student's now: in a sandbox, all of its PID
    namespace and below (:func:`brrr.checks.fairness.student_processes`), else every process under
    ``pid`` but a practice grader's (a scan of ``/proc``, a few ms: done once per attempt)."""
    return [pid, *(each for each in fairness.student_processes(pid) if each != pid)]


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """CPU seconds used so far by each process of ``pids`` (a few system calls), and, keyed
    ``-pid``, by the first one's children that ended and were waited for. Compare two readings with
    :func:`cpu_used`."""
    reading = {}
    for each in pids:
        try:
            reading[each] = _process_cpu_clock(each)
        except OSError:  # ended meanwhile
            continue
    try:
        reading[-pids[0]] = _children_ticks(pids[0])
    except OSError:
        pass
    return reading


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two :func:`cpu_seconds` readings; a process born in between counts from
    zero."""
    return sum(max(0.0, value - before.get(pid, 0.0)) for pid, value in after.items())


# ---------------------------------------------------------------- checking a result


def result_failure(
    name: str,
    reply,
    expected: tuple[list[float], list[torch.Tensor]],
    problem: Problem,
    context: str = "",
) -> str | None:
    """Why ``reply`` (decoded from the student) is not ``expected``, or None."""
    threshold = thresholds.threshold(LAB, "same_result")
    rtol = threshold.value
    where = f" (seed {problem.seed}, {_describe(problem.shape)}{context})"
    want_losses, want_params = expected
    if not (isinstance(reply, list) and len(reply) == 2):
        return f"{name} returned {str(reply)[:80]!r}; it must return (losses, params){where}."
    losses, params = reply
    wrong_losses = _losses_failure(name, losses, want_losses, rtol, where)
    return wrong_losses or _params_failure(name, params, want_params, rtol, where)


def _losses_failure(
    name: str, losses, want_losses: list[float], rtol: float, where: str
) -> str | None:
    """Why the student's ``losses`` are not the given step's, or None."""
    if isinstance(losses, torch.Tensor):
        losses = losses.reshape(-1).tolist()
    if isinstance(losses, list):  # a list of one-element tensors is a list of numbers too
        losses = [
            v.reshape(-1).tolist()[0] if isinstance(v, torch.Tensor) and v.numel() == 1 else v
            for v in losses
        ]
    if not (
        isinstance(losses, list)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in losses)
    ):
        return (
            f"{name}'s losses are {str(losses)[:80]!r}: return one number per step (a list or "
            f"a tensor){where}."
        )
    if len(losses) != len(want_losses):
        return f"{name} returned {len(losses)} losses for {len(want_losses)} steps{where}."
    bad = [
        (k, got, want)
        for k, (got, want) in enumerate(zip(losses, want_losses))
        if not abs(got - want) <= rtol * abs(want) + 1e-7
    ]
    if bad:
        k, got, want = bad[0]
        return (
            f"{name}'s loss at step {k + 1} is {got:.7g}; the given step's is {want:.7g}{where}. "
            f"{len(bad)} of {len(want_losses)} losses differ by more than a relative {rtol:g}. It "
            "must train the same model on every sample of every batch, with the same update."
        )
    return None


def _params_failure(
    name: str, params, want_params: list[torch.Tensor], rtol: float, where: str
) -> str | None:
    """Why the student's parameters after the last step are not the given step's, or None."""
    if not (
        isinstance(params, list)
        and len(params) == len(want_params)
        and all(isinstance(p, torch.Tensor) for p in params)
    ):
        return (
            f"{name}'s parameters must be a list of {len(want_params)} tensors [W1, b1, W2, b2, "
            f"...] in the given order{where}."
        )
    for index, (got, want) in enumerate(zip(params, want_params)):
        label = f"{'W' if index % 2 == 0 else 'b'}{index // 2 + 1}"
        if got.dtype != want.dtype:
            return (
                f"{name}'s {label} is {got.dtype}, the model's is {want.dtype}{where}: the model "
                "is float32 and must stay so."
            )
        atol = rtol * float(want.abs().max()) + 1e-7
        report = core.diff_report(
            label, got.to(want.device), want, rtol=rtol, atol=atol, context=where
        )
        if report:
            return (
                f"{name} does not give the given step's parameters after the last step.\n{report}"
            )
    return None


def _describe(shape: Shape) -> str:
    return f"batch {shape.batch}, width {shape.width}, depth {shape.depth}, {shape.steps} steps"


def _expected(problem: Problem) -> tuple[list[float], list[torch.Tensor]]:
    from brrr.timing import torch_threads

    with torch_threads(1):
        losses, params = given_train(problem)
    return losses, [p.to("cpu") for p in params]


def prepare() -> None:
    """Import what the checks use now, in the grader process, before any student code runs."""
    from brrr import timing, traces  # noqa: F401
    from torch.profiler import profile  # noqa: F401

    # The given step and the profiler warmed up here, in the grader's main thread: the profiler's
    # first start takes seconds, and Kineto complains when it is first started from another thread
    # (a check's).
    with tempfile.TemporaryDirectory(prefix="brrr-lab4-") as folder:
        profile_given(new_problem(NARROW), Path(folder) / "warm-up.json")


def not_applicable(check: str, device_class: str) -> str:
    return f"{check} is graded on every device"


# ---------------------------------------------------------------- same_result


def grade_same_result(student) -> str:
    """At every shape of :data:`SHAPES`, fresh seed: the student's losses and parameters are the
    given step's."""
    name = student.name
    for shape in SHAPES:
        problem = new_problem(shape)
        reply = student.call(problem, threads=1)
        failure = result_failure(name, reply, _expected(problem), problem)
        if failure:
            raise core.fail(failure)
    rtol = thresholds.threshold(LAB, "same_result").value
    return (
        f"{name} gives the given step's losses and parameters (relative {rtol:g}) at "
        + "; ".join(_describe(s) for s in SHAPES)
        + ", each on a fresh seed"
    )


# ---------------------------------------------------------------- speedup

# The last speedup check's measurements in this process (for brrr.grading.make_it_fast).
last_speedup: dict = {}


def grade_speedup(student) -> str:
    """The grader's clock: its own copy of the given step against the student's, fresh seeds, one
    thread.

    Long: the grader's timing and the messages for each way it can fail, in the order a student
    reads them."""
    from brrr.timing import no_gc_pauses, torch_threads

    name = student.name
    threshold = thresholds.threshold(LAB, "speedup")
    cpu_limit = thresholds.threshold(LAB, "speedup.cpu_per_second")
    shape = SHAPES[0]
    pid = student_pid(student)
    for _ in range(2):  # warm-up (compilation, graph capture): not timed, not checked
        student.call(new_problem(shape), threads=1, forked=False)
    given_train(new_problem(shape))

    def attempt(watch: fairness.Watch) -> core.Attempt:
        given_s, student_s, replies = [], [], []
        cpu = wall = 0.0
        tree = process_tree(pid)
        with torch_threads(1), no_gc_pauses():
            for _ in range(TIMED_CALLS):
                problem = new_problem(shape)
                with watch.window():  # the student's processes and the grader's thread, watched
                    start = time.perf_counter()
                    losses, params = given_train(problem)
                    synchronize()
                    given_s.append(time.perf_counter() - start)
                before = cpu_seconds(tree)
                start = time.perf_counter()
                reply = student.call(problem, threads=1, forked=False)
                elapsed = time.perf_counter() - start
                cpu += cpu_used(before, cpu_seconds(tree))
                wall += elapsed
                student_s.append(elapsed)
                replies.append((problem, reply, (losses, [p.to("cpu") for p in params])))
        # work left running while the grader timed the given step: before any other verdict
        watch.judge(name)
        born = [each for each in process_tree(pid) if each not in tree]
        cpu += cpu_used(
            {},
            {
                each: value
                for each, value in cpu_seconds([pid, *born]).items()
                if each not in (pid, -pid)
            },
        )  # all of their CPU time
        for number, (problem, reply, expected) in enumerate(replies):  # every timed result
            failure = result_failure(
                name,
                reply,
                expected,
                problem,
                context=f"; timed call {number + 1} of {TIMED_CALLS}",
            )
            if failure:
                raise core.fail(
                    f"{name} did not compute the given step's result while timed:\n{failure}"
                )
        per_second = cpu / wall
        if per_second > cpu_limit.value:
            raise core.fail(
                f"{name}'s process used {per_second:.2f} CPU-seconds per second of its timed calls "
                f"({units.seconds(cpu)} of CPU in {units.seconds(wall)}), counting every thread "
                f"and every process under it; the limit is {cpu_limit.value:g}. The given step "
                f"runs on one thread and so must yours: more threads or processes are more "
                f"hardware, not less overhead ({cpu_limit.why})."
            )
        given, fast = statistics.median(given_s), statistics.median(student_s)
        speedup = given / fast
        detail = (
            f"{units.beside(speedup, 1, (threshold.value,))}x: given step {units.seconds(given)}, "
            f"{name} {units.seconds(fast)} "
            f"(medians of {TIMED_CALLS} calls each, {per_second:.2f} CPU-s/s)"
        )
        return core.Attempt(speedup, speedup >= threshold.value, detail)

    best, history = fairness.repeat_fairly(attempt, pid, name, "the given step")
    last_speedup.update(best=best.value, attempts=[a.value for a in history], passed=best.passed)
    where = "one thread" if not ON_GPU else "on the GPU"
    if not best.passed:
        tried = "\n".join(f"  attempt {i + 1}: {a.detail}" for i, a in enumerate(history))
        raise core.fail(
            f"{name} is not {threshold.describe()}x faster than the given step at "
            f"{_describe(shape)}, {where}, fresh seeds every call:\n{tried}\n({threshold.why}.)"
        )
    return (
        f"{best.detail}; needed {threshold.describe()}x, {where}, every timed result checked "
        f"(attempt {len(history)})"
    )


# ---------------------------------------------------------------- diagnosis


def _read_student_trace(student, path, folder: Path) -> object:
    """The trace at ``path``, read where the student's process wrote it (under the gradebook, a
    sandbox whose /tmp the grader cannot see), copied into the grader's ``folder`` and parsed."""
    from brrr import traces

    name = student.name
    if not isinstance(path, str) or not path:
        raise core.fail(
            f"{name} returned {str(path)[:80]!r} as its trace's path; return (fraction, path)."
        )
    try:
        data = student.read_file(path, limit=TRACE_MAX_BYTES)
    except AssertionError as error:
        raise core.fail(
            f"{name}'s trace {path!r} cannot be read, as a file of at most "
            f"{TRACE_MAX_BYTES >> 20} MiB, in its notebook: {error}"
        ) from None
    copy = folder / ("student-trace.json.gz" if path.endswith(".gz") else "student-trace.json")
    copy.write_bytes(data)
    try:
        return traces.load(copy)
    except Exception as error:  # noqa: BLE001 - any unreadable file is the student's answer, not a grader bug
        raise core.fail(
            f"{name}'s trace {path!r} is not a Chrome trace that brrr.traces reads: "
            f"{type(error).__name__}: {str(error)[:200]}"
        ) from None


def _fraction_and_path(name: str, reply) -> tuple[float, str]:
    """The student's ``(fraction, trace_path)``; raise AssertionError if ``reply`` is not a pair,
    or its fraction not a number from 0 to 1."""
    if not (isinstance(reply, list) and len(reply) == 2):
        raise core.fail(
            f"{name} returned {str(reply)[:80]!r}; it must return (fraction, trace_path)."
        )
    fraction, path = reply
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not 0 <= fraction <= 1
    ):
        raise core.fail(
            f"{name} returned {str(fraction)[:40]!r} as the fraction; it is a number from 0 to 1."
        )
    return fraction, path


def grade_diagnosis(student) -> str:
    """``diagnose(problem) -> (fraction, trace_path)`` on a narrow and a wide problem, against the
    grader's own profile of the given step."""
    name = student.name
    tolerance = thresholds.threshold(LAB, "diagnosis").value
    definition = thresholds.threshold(LAB, "diagnosis.definition").value
    op_count = thresholds.threshold(LAB, "diagnosis.op_count").value
    what = "the GPU idle" if ON_GPU else "no CPU op running"
    folder = tempfile.TemporaryDirectory(prefix="brrr-lab4-")
    summaries = []
    for label, shape in (("narrow", NARROW), ("wide", WIDE)):

        def attempt(shape=shape, label=label) -> core.Attempt:
            problem = new_problem(shape)
            before, ops = profile_given(problem, Path(folder.name) / f"{label}-before.json")
            # In the notebook's process: the profiler in a forked child of a process that used it
            # already prints an error of Kineto's to the cell.
            reply = student.call(problem, threads=1, forked=False)
            after, _ = profile_given(problem, Path(folder.name) / f"{label}-after.json")
            fraction, path = _fraction_and_path(name, reply)
            trace = _read_student_trace(student, path, Path(folder.name))
            theirs = overhead_fraction(trace)
            if abs(theirs - fraction) > definition:
                raise core.fail(
                    f"{name} returned {fraction:.3f} for the {label} problem ({_describe(shape)}), "
                    f"but the trace it recorded ({path}) gives {theirs:.3f} by the lab's "
                    "definition: the share of the profiled steps (their record_function spans) "
                    f"with {what}. Compute it with brrr.traces from the trace you recorded."
                )
            if not abs(len(trace.cpu_ops) - ops) <= op_count * ops:
                raise core.fail(
                    f"{name}'s trace for the {label} problem holds {len(trace.cpu_ops):,} CPU ops; "
                    f"one run of the given step on that problem holds {ops:,}. Profile exactly one "
                    "call of given_train(problem) on the problem you are given (warm it up "
                    "first, outside the profile)."
                )
            low, high = min(before, after) - tolerance, max(before, after) + tolerance
            passed = low <= fraction <= high
            return core.Attempt(
                -abs(fraction - (before + after) / 2),
                passed,
                f"{label} ({_describe(shape)}): yours {fraction:.3f}, the grader's {before:.3f} "
                f"and {after:.3f} before and after, so {max(low, 0):.3f} to {min(high, 1):.3f} "
                "passes",
            )

        best, history = core.repeat_until_pass(attempt)
        if not best.passed:
            tried = "\n".join(f"  attempt {i + 1}: {a.detail}" for i, a in enumerate(history))
            raise core.fail(
                f"{name}'s share of time with {what} in the given step is not within "
                f"±{tolerance:g} of the grader's measurement:\n{tried}\n"
                f"({thresholds.threshold(LAB, 'diagnosis').why}.)"
            )
        summaries.append(best.detail)
    folder.cleanup()
    return "; ".join(summaries) + f" (the share of the step with {what}, within ±{tolerance:g})"


GRADERS = core.Graders(
    LAB, {"same_result": grade_same_result, "speedup": grade_speedup, "diagnosis": grade_diagnosis}
)
grade = GRADERS.grade  # the one way every lab's check is run (brrr.checks.core.Graders)
