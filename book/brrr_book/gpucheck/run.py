"""Run one part of the GPU check: every stage within its limit and the part's, each notebook's time
said as soon as it is done, the least valuable work dropped first when time is short, and a log of
all of it.

:func:`run_part` takes its clock and the function that starts a command (:class:`Spawn`) as
arguments: the tests drive it with a fake clock and a fake runner, on a CPU, in milliseconds.

The part's log, ``DIR/part-N.json``::

    {"part": 1, "limit_s": 270, "seconds": 262.3, "passed": false, "not_run": [],
     "dropped": ["notebooks/40-diagnose-a-gpt.ipynb"],
     "stages": [{"name": "labs never passed on a GPU", "limit_s": 220, "value": 3,
                 "seconds": 171.0, "verdict": "passed",
                 "items": [{"name": "solutions/05-tile-it.ipynb", "seconds": 41.2,
                            "verdict": "passed", "expected_s": 40}]}]}

A verdict is ``passed``, ``failed`` (exit status), ``timed out`` (stopped at its limit), ``dropped``
(what was left was expected to outlast the part, and this was the least valuable of it), ``not run``
(under :data:`MIN_START_S` left) or, in the log of a part killed from outside (``"finished":
false``), ``stopped``: what was running then. A part passes when nothing failed, was stopped or was
left unrun; what it dropped is listed and said, and does not fail it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from brrr_book.gpucheck.plan import Part, Stage

# A notebook or a command is not started with less than this left: it would only be stopped.
MIN_START_S = 10
KILL_GRACE_S = 10

RECORD_ENV = "BRRR_RECORD_REFERENCE"  # brrr.reference.ENV_VAR (not imported: it imports torch)
SOURCE_ENV = "BRRR_RECORD_SOURCE"  # which notebook a record comes from
OUTPUTS_ENV = "BRRR_NOTEBOOK_OUTPUTS"  # where .ci/notebook_record.py saves each notebook's outputs


@dataclass(frozen=True)
class Outcome:
    returncode: int
    timed_out: bool = False


class Spawn(Protocol):
    def __call__(self, argv: list[str], *, env: dict[str, str], timeout_s: float) -> Outcome: ...


@dataclass
class Item:
    name: str
    seconds: float = 0.0
    verdict: str = "not run"
    expected_s: float = 0.0


@dataclass
class StageLog:
    name: str
    limit_s: int
    value: int = 0
    seconds: float = 0.0
    verdict: str = "not run"
    items: list[Item] = field(default_factory=list)


def spawn(argv: list[str], *, env: dict[str, str], timeout_s: float) -> Outcome:
    """Run ``argv`` in a session of its own; past ``timeout_s`` stop it and everything it
    started."""
    process = subprocess.Popen(argv, env=env, start_new_session=True)
    try:
        return Outcome(process.wait(timeout=timeout_s))
    except subprocess.TimeoutExpired:
        for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        process.wait()
        return Outcome(process.returncode, timed_out=True)


def notebook_command(python: str, notebook: str) -> list[str]:
    """One notebook under nbval, with the plugin that prints its time and saves its outputs."""
    return [
        python,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "notebook_record",
        "--nbval-lax",
        notebook,
    ]


def environment(out: Path, root: Path, source: str | None = None) -> dict[str, str]:
    """The environment a stage's processes run in: recording into ``out``, strict targets."""
    env = dict(os.environ)
    env[RECORD_ENV] = str(out / "record")
    env[OUTPUTS_ENV] = str(out / "outputs")
    env["BRRR_STRICT"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(root / ".ci"), env.get("PYTHONPATH", "")])
    )
    if source:
        env[SOURCE_ENV] = source
    else:
        env.pop(SOURCE_ENV, None)
    return env


@dataclass(frozen=True)
class Planned:
    """One item still to run: its place in the part, its value and the seconds it is expected to
    take."""

    position: int
    name: str
    value: int
    expected_s: float


def planned(part: Part) -> list[Planned]:
    """Every item of ``part``, in the order it runs."""
    items = [(stage, name) for stage in part.stages for name in stage.items()]
    return [
        Planned(i, name, stage.value, stage.expected_s(name))
        for i, (stage, name) in enumerate(items)
    ]


def to_drop(left: list[Planned], left_s: float) -> list[Planned]:
    """What to drop of ``left`` for the rest to be expected to fit in ``left_s``: the least valuable
    first, and of equal value the last first."""
    kept, dropped = list(left), []
    while kept and sum(item.expected_s for item in kept) > left_s:
        least = min(kept, key=lambda item: (item.value, -item.position))
        kept.remove(least)
        dropped.append(least)
    return dropped


def verdict(outcome: Outcome) -> str:
    return "timed out" if outcome.timed_out else "passed" if outcome.returncode == 0 else "failed"


class Runner:
    """One part's run: its clock, its deadline, what it says and what it logs."""

    def __init__(
        self, part: Part, out: Path, root: Path, *, python: str, spent_s: float, clock, run, say
    ) -> None:
        self.part, self.out, self.root, self.python = part, out, root, python
        self.clock, self.run, self.say = clock, run, say
        self.began = clock() - spent_s  # the set-up before this process counts against the part
        self.deadline = self.began + part.limit_s
        self.queue = planned(part)  # what is still to run, in order
        self.stages: list[StageLog] = []

    def log(self, finished: bool) -> dict:
        """The part's log as it stands; written after every item, so that a part stopped from
        outside still leaves what it ran."""
        found = part_log(self.part, self.stages, round(self.clock() - self.began, 1), finished)
        (self.out / f"part-{self.part.number}.json").write_text(json.dumps(found, indent=2) + "\n")
        return found

    def left(self, stage_end: float) -> float:
        return min(stage_end, self.deadline) - self.clock()

    def item(
        self, log: StageLog, name: str, argv: list[str], stage_end: float, source: str | None
    ) -> Item:
        entry = self.decided(log, name, argv, stage_end, source)
        self.log(finished=False)
        return entry

    def decided(
        self, log: StageLog, name: str, argv: list[str], stage_end: float, source: str | None
    ) -> Item:
        this, self.queue = self.queue[0], self.queue[1:]
        entry = Item(name, expected_s=this.expected_s)
        log.items.append(entry)
        left, in_part = self.left(stage_end), self.deadline - self.clock()
        if left < MIN_START_S:
            self.say(f"{name}: not run, {max(left, 0):.0f} s left")
            return entry
        if this in to_drop([this, *self.queue], in_part):
            entry.verdict = "dropped"
            self.say(
                f"{name}: dropped, the least valuable of what is left ({this.expected_s:.0f} s "
                f"expected, {in_part:.0f} s left in the part)"
            )
            return entry
        began = self.clock()
        entry.verdict = "stopped"  # what the log on disk says if the part is killed during it
        self.log(finished=False)
        outcome = self.run(argv, env=environment(self.out, self.root, source), timeout_s=left)
        entry.seconds, entry.verdict = round(self.clock() - began, 1), verdict(outcome)
        self.say(
            f"{name}: {entry.verdict} in {entry.seconds:.1f} s "
            f"({self.clock() - self.began:.0f} s into the part)"
        )
        return entry

    def stage(self, stage: Stage) -> StageLog:
        log = StageLog(stage.name, stage.limit_s, stage.value)
        self.stages.append(log)
        began = self.clock()
        stage_end = began + stage.limit_s
        self.say(
            f"== {stage.name} (limit {stage.limit_s} s, "
            f"{max(self.left(stage_end), 0):.0f} s left in the part)"
        )
        if stage.notebooks:
            for notebook in stage.notebooks:
                self.item(
                    log, notebook, notebook_command(self.python, notebook), stage_end, notebook
                )
        else:
            argv = [self.python if word == "{python}" else word for word in stage.command]
            self.item(log, stage.items()[0], argv, stage_end, None)
        log.seconds = round(self.clock() - began, 1)
        verdicts = {entry.verdict for entry in log.items}
        log.verdict = next(
            (v for v in ("timed out", "failed", "not run", "dropped") if v in verdicts), "passed"
        )
        self.say(f"{stage.name}: {log.verdict} after {log.seconds:.0f} s")
        return log


def part_log(part: Part, stages: list[StageLog], seconds: float, finished: bool) -> dict:
    """The part's log (the module's docstring): ``finished`` is false while it runs."""
    named = lambda verdict: [e.name for s in stages for e in s.items if e.verdict == verdict]  # noqa: E731
    not_run, cut, failed = named("not run"), named("timed out"), named("failed")
    return {
        "part": part.number,
        "what": part.what,
        "limit_s": part.limit_s,
        "seconds": seconds,
        "finished": finished,
        "passed": finished and not (not_run or cut or failed),
        "not_run": not_run,
        "dropped": named("dropped"),
        "stages": [asdict(stage) for stage in stages],
    }


def run_part(
    part: Part,
    out: Path,
    root: Path,
    *,
    python: str = sys.executable,
    spent_s: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
    run: Spawn = spawn,
    say: Callable[[str], None] = print,
) -> dict:
    """Run ``part``'s stages in order, record into ``out``, write ``out/part-N.json``; return that
    log."""
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(part, out, root, python=python, spent_s=spent_s, clock=clock, run=run, say=say)
    say(
        f"part {part.number}: {part.what} (limit {part.limit_s} s, {spent_s:.0f} s spent on set-up)"
    )
    for stage in part.stages:
        runner.stage(stage)
    log = runner.log(finished=True)
    named = lambda verdict: [e.name for s in runner.stages for e in s.items if e.verdict == verdict]  # noqa: E731
    failed, cut = named("failed"), named("timed out")
    say(f"part {part.number}: finished in {log['seconds']:.0f} s of its {part.limit_s} s")
    for label, names in (
        ("FAILED", failed),
        ("STOPPED at its limit", cut),
        ("DID NOT RUN (no time left)", log["not_run"]),
        ("DROPPED (least valuable first, to fit its time)", log["dropped"]),
    ):
        if names:
            say(f"part {part.number}: {label}: {', '.join(names)}")
    if log["passed"]:
        fold = f"python -m brrr_book.gpucheck merge {out}"
        say(f"part {part.number}: passed; its record is in {out} (fold it in: {fold})")
    return log
