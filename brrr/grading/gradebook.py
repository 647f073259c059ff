"""Grade a folder of submitted lab notebooks: one CSV row per submission, one feedback file per
student.

    python -m brrr.grading SUBMISSIONS_DIR --out OUT_DIR [--lab 02-fuse-it]

A run is a sequence of small steps, each a module with one job:

0. **Before anything runs** (:mod:`brrr.grading.preflight`): the grader's
   dependencies and a kernel start, a sandbox can be made, the submissions
   folder holds notebooks, ``OUT_DIR`` can be written and is not among them;
   the grading code is the code that graded ``OUT_DIR`` first
   (:mod:`brrr.grading.course`); and ``OUT_DIR``'s journal, if it has one, is
   resumed (:mod:`brrr.grading.report`). Any of these refused: nothing runs.
1. **Find** (:mod:`brrr.grading.submissions`): every ``*.ipynb`` under
   ``SUBMISSIONS_DIR`` is one submission, named by its path relative to the
   folder (``bob/02-fuse-it.ipynb`` -> ``bob/02-fuse-it``), read into memory
   now, with a folder name that is safe and unique, and its lab (``--lab``, its
   cells, its ``metadata.brrr.lab`` or its file name; any other is refused).
2. **Assemble** (:mod:`brrr.grading.prepare`): the lab as generated from
   ``solutions/`` when grading started, with the submission's answer cells
   spliced in (:mod:`brrr.grading.assemble`), a student copy of ``brrr``
   without the lab's hidden modules, and a kernel that finds only that copy.
3. **Sandbox and run** (:mod:`brrr.grading.execute`): a grader process
   (:mod:`brrr.grading.graders`, forked from the run's zygote where there is
   one) holds the checks and the record; pytest and nbval run the notebook
   beside it in a bubblewrap sandbox (:mod:`brrr.grading.sandbox`), with a
   timeout per cell (the first cell out of time ends the notebook) and one per
   notebook. When it ends every process it started is killed.
4. **Collect and score** (:mod:`brrr.grading.collect`): the grader's signed
   record is the verdict, never a file or output the notebook could write;
   nbval's report says which cells failed, timed out or died. The integrity
   watch (:mod:`brrr.grading.watch`) charges changed files to the submissions
   that ran meanwhile (``tampered``), and stops grading where the Python
   environment changed (exit status 3).
5. **Write** (:mod:`brrr.grading.report`): the row, the feedback file and a
   journal line, as soon as the submission is graded. Ctrl-C or SIGTERM
   (:mod:`brrr.grading.interrupt`) stops the run with every graded row kept
   (exit status 130); the same command grades the rest.

A check missing from the record (a deleted grader cell, a crash, an early exit)
is a failed check worth its points. The columns and the maximum come from the
lab's own check list for this machine's device class.

Output in ``OUT_DIR`` (relative paths are fine):

``grades.csv``
    ``submission, lab, status, <one column per check>, total, max, sandbox, seconds``
    (``sandbox``: ``bwrap``, or ``none`` under ``--no-sandbox``; ``seconds``: the
    submission's run, from its grader's start to its end). A check column is 1
    (passed) or 0 (failed or not run). ``status`` is ``ok``
    (every cell ran cleanly), ``failed`` (some cell failed), ``timeout``,
    ``crashed`` (the kernel died), ``unreadable`` (not a notebook), ``refused``
    (no known lab), ``tampered``, ``grader-killed``, ``not graded`` (grading
    stopped first) or ``grader-error`` (the grader could not run, or could not
    grade a check fairly: not the student's fault, and said so; grade it again).
``feedback/<folder name>.md``
    For the student: each check with its message, the other errors in their
    notebook, and what to do about a timeout or a crash.
``work/<folder name>/``
    The notebook that ran, the original, nbval's JUnit XML and its output.
``graded.jsonl``
    The journal a later run resumes from.

``--shard K/N`` grades share K of N of the folder, and ``python -m brrr.grading
merge`` joins the shards' outputs (:mod:`brrr.grading.shards`,
:mod:`brrr.grading.merge`).

Grade timed labs one at a time (the default, ``--jobs 1``): a performance check
measures the machine, and a second notebook running beside it would slow both."""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Callable

from brrr import labs
from brrr.checks import processes
from brrr.device import device_class  # noqa: F401  (the tests read the device class here)
from brrr.grading import assemble, course, forked, integrity, preflight, sandbox, shards
from brrr.grading.collect import Prepared, Ran, classify, read_junit  # noqa: F401
from brrr.grading.environment import (  # noqa: F401
    KERNEL_NAME,
    font_lists,
    instructor_caches,
    kernelspec,
    private_environment,
    student_environment,
)
from brrr.grading.execute import execute
from brrr.grading.graders import (  # noqa: F401
    IN_FLIGHT,
    Grader,
    start_zygote,
)
from brrr.grading.interrupt import Stop
from brrr.grading.prepare import prepare
from brrr.grading.preflight import grader_setup_problem
from brrr.grading.report import Ledger, feedback, lab_checks, write_csv  # noqa: F401
from brrr.grading.submissions import Submission, choose_lab, find_submissions  # noqa: F401
from brrr.grading.watch import Watch, charge

DEFAULT_CELL_TIMEOUT_S = 600
DEFAULT_NOTEBOOK_TIMEOUT_S = 1800
INTERRUPTED = "Not graded: grading was interrupted"


class CodeChanged(RuntimeError):
    """The grading code differs from what graded this output folder first
    (:mod:`brrr.grading.course`)."""


def run_one(
    submission: Submission,
    work: Path,
    snapshot: assemble.Snapshot,
    *,
    cell_timeout_s: float,
    notebook_timeout_s: float,
    default_lab: str | None = None,
    watch: Watch | None = None,
    within: sandbox.Layout | None = None,
    zygote: forked.Zygote | None = None,
    stop: Stop | None = None,
) -> Submission:
    """Grade one submission and fill in its row: assemble, run (in a sandbox showing ``within``;
    None: in none) beside its grader (forked by ``zygote`` where one is given and still forks),
    collect and score."""
    submission.sandboxed = within is not None
    prepared = prepare(submission, work, snapshot, default_lab, watch.stopped if watch else "")
    if prepared is None:
        return submission
    if watch is not None:
        watch.started(submission)
    try:
        ran = execute(
            submission,
            prepared,
            snapshot,
            cell_timeout_s=cell_timeout_s,
            notebook_timeout_s=notebook_timeout_s,
            within=within,
            zygote=zygote,
            stop=stop,
        )
    finally:
        if watch is not None:
            watch.finished(submission)
    if ran is not None:
        classify(submission, prepared, ran, cell_timeout_s, notebook_timeout_s)
    return submission


def grade(
    folder: Path,
    out: Path,
    *,
    cell_timeout_s: float = DEFAULT_CELL_TIMEOUT_S,
    notebook_timeout_s: float = DEFAULT_NOTEBOOK_TIMEOUT_S,
    lab: str | None = None,
    jobs: int = 1,
    sandboxed: bool = True,
    accept_grading_code: bool = False,
    only: Callable[[str], bool] | None = None,
) -> list[Submission]:
    """Grade every submission in ``folder`` (those ``only`` accepts: a shard's share) not graded
    in ``out`` already; write grades.csv, feedback/ and the journal into ``out`` as each is graded.
    Returns every submission of the share, in the folder's order.

    Refused before anything runs: no sandbox can be made
    (:class:`brrr.grading.sandbox.Unavailable`, unless ``sandboxed`` is False: ``--no-sandbox``); a
    bad path, or an ``out`` holding grades this run must not add to
    (:class:`brrr.grading.preflight.Refused`); grading code that changed since ``out``'s first run
    (:class:`CodeChanged`, unless ``accept_grading_code``: :mod:`brrr.grading.course`)."""
    if lab is not None:
        labs.module(lab)  # an unknown --lab is refused before anything runs
    within = sandbox.layout(assemble.CHECKOUT) if sandboxed else None
    if within is not None and (why := sandbox.problem(within)) is not None:
        raise sandbox.Unavailable(sandbox.refusal(why))
    if (problem := preflight.paths_problem(folder, out)) is not None:
        raise preflight.Refused(problem)
    # every lab imported now, its checks too: none is read from disk once student code runs
    for name in labs.LABS:
        labs.lab(name)
    folder, out = Path(folder).resolve(), Path(out).resolve()
    snapshot = assemble.Snapshot()
    processes.become_subreaper()
    submissions = find_submissions(folder, only)
    if (
        refused := course.check(out, snapshot.graded_files(), accept=accept_grading_code)
    ) is not None:
        raise CodeChanged(refused)
    options = dict(lab=lab, cell_timeout_s=cell_timeout_s, notebook_timeout_s=notebook_timeout_s)
    header = {
        "code": shards.code_fingerprint(snapshot),
        "options": options | {"sandboxed": sandboxed},
    }
    ledger = Ledger(out, folder, header, alone=jobs <= 1)
    try:
        resumed = {s.name for s in ledger.resume(submissions, new_code=accept_grading_code)}
    except ValueError as error:
        raise preflight.Refused(str(error)) from None
    if resumed:
        print(f"{out}: {len(resumed)} submission(s) graded already, kept", flush=True)
    ledger.start()
    left = [s for s in submissions if s.name not in resumed]
    graded = _grade_each(left, out, folder, snapshot, ledger, within, jobs, **options)
    interrupted = [s for s in graded if s.note.startswith(INTERRUPTED)]
    return sorted(ledger.finish() + interrupted, key=lambda s: ledger.order[s.name])


def _grade_each(
    submissions: list[Submission],
    out: Path,
    folder: Path,
    snapshot: assemble.Snapshot,
    ledger: Ledger,
    within: sandbox.Layout | None,
    jobs: int,
    *,
    lab: str | None,
    cell_timeout_s: float,
    notebook_timeout_s: float,
) -> list[Submission]:
    """Run, collect and write each of ``submissions``, ``jobs`` at a time, under the integrity
    watch, until done or stopped (a signal: :mod:`brrr.grading.interrupt`)."""
    work = out / "work"
    roots, excluded = _watched(work, folder, ledger)
    was_writing_bytecode, was_dumpable = sys.dont_write_bytecode, processes.is_dumpable()
    # a lazy import here must not add files to the watched environment
    sys.dont_write_bytecode = True
    processes.set_dumpable(False)  # the signing keys and the grader's pipes are in this process
    # One submission needs one grader, which starts on its own sooner than a zygote and its fork
    # (0.3 CPU-s).
    zygote = start_zygote(snapshot) if len(submissions) > 1 else None
    stop = Stop()
    try:
        watch = Watch(roots, excluded)
        limits = dict(cell_timeout_s=cell_timeout_s, notebook_timeout_s=notebook_timeout_s)
        limits |= dict(default_lab=lab, within=within)

        def one(submission: Submission) -> Submission:
            if stop.requested:
                submission.note = f"{INTERRUPTED} before this submission."
                return submission
            run_one(submission, work, snapshot, watch=watch, zygote=zygote, stop=stop, **limits)
            if submission.note.startswith(INTERRUPTED):
                return submission  # not graded, so no row: the next run grades it
            charge(submission, alone=jobs <= 1)
            ledger.add(submission)
            return _announced(submission)

        pool = concurrent.futures.ThreadPoolExecutor(max(1, jobs))
        with stop.on_signals(at_once=_abandon), pool:
            graded = _each_done([pool.submit(one, s) for s in submissions])
        IN_FLIGHT.reap()
    finally:
        if zygote is not None:
            zygote.close()
            IN_FLIGHT.remove(zygote.process.pid)
        sys.dont_write_bytecode = was_writing_bytecode
        if was_dumpable:
            processes.set_dumpable(True)
    if watch.stopped:
        print(f"grading stopped: {watch.stopped}", file=sys.stderr, flush=True)
    if report := watch.unread_report():
        print(f"note: {report}", file=sys.stderr, flush=True)
    return graded


def _watched(work: Path, folder: Path, ledger: Ledger) -> tuple[list, list[Path]]:
    """The integrity watch's roots and exclusions for this run, once what grading itself fills is
    made: the work folder, the instructor's caches, matplotlib's font list."""
    work.mkdir(exist_ok=True)
    for cache in instructor_caches():  # made now: a build filling them later adds no watched folder
        cache.mkdir(parents=True, exist_ok=True)
    font_lists()  # read (or built aside) once, before the watch starts
    return integrity.watched_roots(
        checkout=assemble.CHECKOUT,
        submissions=folder,
        out=work.parent,
        left_out=instructor_caches() + ledger.paths(),
    )


def _each_done(futures: list[concurrent.futures.Future]) -> list:
    """The results of ``futures``, in order, once all are done. Waited for a moment at a time: a
    signal the kernel hands to another thread runs its Python handler only when the main thread
    runs, and a main thread blocked until the end never would (Ctrl-C went unheard until every
    notebook ended)."""
    while concurrent.futures.wait(futures, timeout=0.5).not_done:
        pass
    return [future.result() for future in futures]


def _abandon() -> None:
    """Kill every process the gradebook started and still holds (a second Ctrl-C: stop at once)."""
    for pid in list(IN_FLIGHT.pids):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)  # each runs in a session, and so a group, of its own


def _announced(submission: Submission) -> Submission:
    """``submission``, once its one line is printed: name, status, checks passed, seconds."""
    passed = sum(1 for r in submission.results.values() if r.get("passed") is True)
    print(
        f"{submission.name}: {submission.status}, {passed} of {len(lab_checks(submission.lab))} "
        f"check(s) passed ({submission.seconds:.0f} s)",
        flush=True,
    )
    return submission


def command_line() -> argparse.ArgumentParser:
    """The gradebook's options (``python -m brrr.grading --help``)."""
    parser = argparse.ArgumentParser(
        prog="python -m brrr.grading", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "submissions", type=Path, help="folder of submitted .ipynb files (searched recursively)"
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for grades.csv, feedback/ and work/"
    )
    parser.add_argument(
        "--cell-timeout", type=float, default=DEFAULT_CELL_TIMEOUT_S, help="seconds per cell"
    )
    parser.add_argument(
        "--notebook-timeout",
        type=float,
        default=DEFAULT_NOTEBOOK_TIMEOUT_S,
        help="seconds per notebook, kernel start included",
    )
    parser.add_argument(
        "--lab", help=f"grade every notebook as this lab ({', '.join(sorted(labs.LABS))})"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="notebooks graded at once (keep 1 for timed labs)"
    )
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run notebooks without the bubblewrap sandbox (where bwrap cannot run); "
        "feedback and grades.csv say so",
    )
    parser.add_argument(
        course.FLAG,
        dest="accept_grading_code",
        action="store_true",
        help="grade with grading code that changed since this --out folder's first run, "
        "and record it",
    )
    parser.add_argument(
        "--shard",
        type=shards.parse,
        help="K/N: grade only share K of N, by submission name (brrr.grading.shards)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    if args.lab is not None and args.lab not in labs.LABS:
        parser.error(f"unknown lab {args.lab!r}; the labs are {', '.join(sorted(labs.LABS))}")
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: grade at least one notebook at a time")
    if min(args.cell_timeout, args.notebook_timeout) <= 0:
        parser.error("--cell-timeout and --notebook-timeout are seconds, more than 0")
    if (problem := preflight.paths_problem(args.submissions, args.out)) is not None:
        parser.error(problem)
    if (problem := setup_problem(args.no_sandbox)) is not None:
        print(f"grading stopped before it began: {problem}", file=sys.stderr)
        return 4
    try:
        shard = shards.Claim.take(args) if args.shard else None
    except shards.ShardError as error:
        parser.error(str(error))
    if args.no_sandbox:
        print(
            "note: --no-sandbox: notebooks run without a sandbox, as your user",
            file=sys.stderr,
            flush=True,
        )
    try:
        submissions = grade(
            args.submissions,
            args.out,
            cell_timeout_s=args.cell_timeout,
            notebook_timeout_s=args.notebook_timeout,
            lab=args.lab,
            jobs=args.jobs,
            sandboxed=not args.no_sandbox,
            accept_grading_code=args.accept_grading_code,
            only=shard.owns if shard else None,
        )
    except (sandbox.Unavailable, CodeChanged, preflight.Refused) as refused:
        print(f"grading stopped before it began: {refused}", file=sys.stderr)
        return 4
    interrupted = [s for s in submissions if s.note.startswith(INTERRUPTED)]
    if interrupted:
        print(
            f"interrupted: {len(submissions) - len(interrupted)} submission(s) graded, kept in "
            f"{args.out / 'grades.csv'}; {len(interrupted)} not graded. Run the same command again "
            "to grade them.",
            file=sys.stderr,
        )
        return 130
    if shard:
        shard.finish(submissions)
    print(
        f"graded {len(submissions)} submission(s): {args.out / 'grades.csv'}, "
        f"feedback in {args.out / 'feedback'}"
    )
    if args.no_sandbox:
        print(
            "note: graded without a sandbox (--no-sandbox): grades.csv and every feedback file say "
            "so"
        )
    return exit_status(submissions, args.out)


def setup_problem(no_sandbox: bool) -> str | None:
    """Why grading cannot begin here (no sandbox can be made, unless ``no_sandbox``; the grader's
    set-up fails), in a sentence; None if it can."""
    if not no_sandbox and (why := sandbox.problem(sandbox.layout(assemble.CHECKOUT))) is not None:
        return sandbox.refusal(why)
    return grader_setup_problem()


def exit_status(submissions: list[Submission], out: Path) -> int:
    """3 if grading stopped early, 5 if a submission tampered with files (each named on standard
    error, with what to do before grading again), else 0."""
    tampered = [s for s in submissions if s.status == "tampered"]
    for submission in tampered:
        print(
            f"TAMPERED: {submission.name} changed {integrity.summarize(submission.tampered, 5)}",
            file=sys.stderr,
        )
    if tampered:
        print(
            f"{len(tampered)} submission(s) changed files outside their work folders (see their "
            "feedback). Look at your checkout with `git status` and restore it: a later run into "
            f"{out} refuses to grade with changed grading code.",
            file=sys.stderr,
        )
    if any(s.status == "not graded" for s in submissions):
        return 3
    return 5 if tampered else 0


if __name__ == "__main__":
    sys.exit(main())
