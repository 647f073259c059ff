"""Run one part of the GPU check: every stage within its limit and the part's, each notebook's time said as
soon as it is done, and a log of what ran, what passed and what did not run.

:func:`run_part` takes its clock and the function that starts a command (:class:`Spawn`) as arguments: the
tests drive it with a fake clock and a fake runner, on a CPU, in milliseconds.

The part's log, ``DIR/part-N.json``::

    {"part": 1, "limit_s": 540, "seconds": 512.3, "passed": false, "not_run": ["notebooks/40-...ipynb"],
     "stages": [{"name": "lab solutions", "limit_s": 270, "seconds": 201.0, "verdict": "passed",
                 "items": [{"name": "solutions/05-tile-it.ipynb", "seconds": 41.2, "verdict": "passed"}]}]}

A verdict is ``passed``, ``failed`` (exit status), ``timed out`` (stopped at its limit) or ``not run`` (no
time left for it).
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


@dataclass
class StageLog:
    name: str
    limit_s: int
    seconds: float = 0.0
    verdict: str = "not run"
    items: list[Item] = field(default_factory=list)


def spawn(argv: list[str], *, env: dict[str, str], timeout_s: float) -> Outcome:
    """Run ``argv`` in a session of its own; past ``timeout_s`` stop it and everything it started."""
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

    def left(self, stage_end: float) -> float:
        return min(stage_end, self.deadline) - self.clock()

    def item(
        self, log: StageLog, name: str, argv: list[str], stage_end: float, source: str | None
    ) -> Item:
        entry = Item(name)
        log.items.append(entry)
        left = self.left(stage_end)
        if left < MIN_START_S:
            self.say(f"{name}: not run, {max(left, 0):.0f} s left")
            return entry
        began = self.clock()
        outcome = self.run(argv, env=environment(self.out, self.root, source), timeout_s=left)
        entry.seconds, entry.verdict = round(self.clock() - began, 1), verdict(outcome)
        self.say(
            f"{name}: {entry.verdict} in {entry.seconds:.1f} s ({self.clock() - self.began:.0f} s into the part)"
        )
        return entry

    def stage(self, stage: Stage) -> StageLog:
        log = StageLog(stage.name, stage.limit_s)
        began = self.clock()
        stage_end = began + stage.limit_s
        self.say(
            f"== {stage.name} (limit {stage.limit_s} s, {max(self.left(stage_end), 0):.0f} s left in the part)"
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
            (v for v in ("timed out", "failed", "not run") if v in verdicts), "passed"
        )
        self.say(f"{stage.name}: {log.verdict} after {log.seconds:.0f} s")
        return log


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
    """Run ``part``'s stages in order, record into ``out``, write ``out/part-N.json``; return that log."""
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(part, out, root, python=python, spent_s=spent_s, clock=clock, run=run, say=say)
    say(
        f"part {part.number}: {part.what} (limit {part.limit_s} s, {spent_s:.0f} s spent on set-up)"
    )
    stages = [runner.stage(stage) for stage in part.stages]
    not_run = [entry.name for log in stages for entry in log.items if entry.verdict == "not run"]
    cut = [entry.name for log in stages for entry in log.items if entry.verdict == "timed out"]
    failed = [entry.name for log in stages for entry in log.items if entry.verdict == "failed"]
    log = {
        "part": part.number,
        "what": part.what,
        "limit_s": part.limit_s,
        "seconds": round(clock() - runner.began, 1),
        "passed": not (not_run or cut or failed),
        "not_run": not_run,
        "stages": [asdict(stage) for stage in stages],
    }
    (out / f"part-{part.number}.json").write_text(json.dumps(log, indent=2) + "\n")
    say(f"part {part.number}: finished in {log['seconds']:.0f} s of its {part.limit_s} s")
    for label, names in (
        ("FAILED", failed),
        ("STOPPED at its limit", cut),
        ("DID NOT RUN (no time left)", not_run),
    ):
        if names:
            say(f"part {part.number}: {label}: {', '.join(names)}")
    if log["passed"]:
        fold = f"python -m brrr_book.gpucheck merge {out}"
        say(f"part {part.number}: passed; its record is in {out} (fold it in: {fold})")
    return log
