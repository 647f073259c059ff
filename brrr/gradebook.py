"""Grade a folder of submitted lab notebooks: one CSV row per submission, one feedback file per student.

    python -m brrr.gradebook SUBMISSIONS_DIR --out OUT_DIR

Every ``*.ipynb`` under ``SUBMISSIONS_DIR`` is one submission, named by its path
relative to the folder (``alice.ipynb`` -> ``alice``, ``bob/02-fuse-it.ipynb`` ->
``bob/02-fuse-it``). Each runs in its own subprocess, under nbval, exactly as
``pytest --nbval-lax`` would run it, with:

- a timeout per cell (nbval interrupts the cell, records the failure, and goes on
  with the next cell), and
- a timeout per notebook (the whole process group, the Jupyter kernel included,
  is killed, and the submission is marked ``timeout``).

A submission that is not valid JSON, that crashes its kernel or that hangs gets
its row and its feedback like any other; the gradebook always goes on to the
next. The grader cells append their results to a log the gradebook names in
``$BRRR_GRADING_LOG``; that log, not the notebook's outputs, is what is graded.
A check that never ran (deleted cell, dead kernel, timeout) scores 0 like a
failed one, and is reported as "not run".

Output in ``OUT_DIR``:

``grades.csv``
    ``submission, lab, status, <one column per check>, total, max``. A check
    column is 1 (passed), 0 (failed) or empty (not run). ``status`` is ``ok``
    (every cell ran cleanly), ``failed`` (some cell failed), ``timeout``,
    ``crashed`` (the kernel died) or ``unreadable`` (not a notebook).
``feedback/<submission>.md``
    For the student: each check with its message, the other errors in their
    notebook, and what to do about a timeout or a crash.
``work/<submission>/``
    The copy that ran, its grading log, nbval's JUnit XML and its full output.

Grade timed labs one at a time (the default, ``--jobs 1``): a performance check
measures the machine, and a second notebook running beside it would slow both.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

from brrr import grading, thresholds

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_CELL_TIMEOUT_S = 600
DEFAULT_NOTEBOOK_TIMEOUT_S = 1800


@dataclass
class Submission:
    name: str
    path: Path
    lab: str = "unknown"
    status: str = "not graded"
    results: dict[str, dict] = field(default_factory=dict)  # check -> last log record
    cell_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "__", self.name)


# ---------------------------------------------------------------- finding submissions


def find_submissions(folder: Path) -> list[Submission]:
    paths = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    return [Submission(str(p.relative_to(folder).with_suffix("")), p) for p in paths]


def notebook_lab(path: Path) -> str | None:
    """The lab a notebook belongs to, from its ``metadata.brrr.lab``; None if unreadable or absent."""
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    lab = notebook.get("metadata", {}).get("brrr", {}).get("lab") if isinstance(notebook, dict) else None
    return lab if isinstance(lab, str) else None


# ---------------------------------------------------------------- running one submission


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc), children first found first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def _kill_tree(process: subprocess.Popen) -> None:
    """Kill pytest, its process group, and everything it started (Jupyter kernels run in their own session)."""
    victims = _descendants(process.pid)
    for sig_target in [process.pid] + victims:
        try:
            os.kill(sig_target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    # A killed process takes a moment to release its memory; wait until each is gone (or a zombie).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in victims):
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _kernel_pid(pytest_pid: int) -> int | None:
    """The Jupyter kernel nbval started: a direct child of pytest running ipykernel."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) != pytest_pid:
                continue
            if b"ipykernel" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except (OSError, ValueError, IndexError):
            continue
    return None


KERNEL_DEATH_GRACE_S = 5.0


def _wait(process: subprocess.Popen, timeout_s: float) -> tuple[int | None, bool]:
    """Wait for pytest; return (exit code or None on timeout, whether the kernel died under it).

    nbval notices a dead kernel only when the running cell times out, which can
    take the whole cell timeout. So the kernel is watched: once it has vanished
    while pytest goes on, pytest gets a few seconds to finish by itself (a normal
    end stops the kernel first), and is then stopped.
    """
    deadline = time.monotonic() + timeout_s
    kernel, gone_since = None, None
    while True:
        try:
            return process.wait(timeout=0.5), False
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now >= deadline:
            _kill_tree(process)
            return None, False
        if kernel is None:
            kernel = _kernel_pid(process.pid)
        elif gone_since is None and not Path(f"/proc/{kernel}").exists():
            gone_since = now
        elif gone_since is None:
            try:
                state = Path(f"/proc/{kernel}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                state = "X"
            if state in ("Z", "X"):
                gone_since = now
        if gone_since is not None and now - gone_since > KERNEL_DEATH_GRACE_S:
            _kill_tree(process)
            return None, True


def _environment(log: Path) -> dict[str, str]:
    env = dict(os.environ)
    env[grading.LOG_ENV] = str(log)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("MPLBACKEND", "Agg")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_one(submission: Submission, work: Path, *, cell_timeout_s: float, notebook_timeout_s: float,
            default_lab: str | None = None) -> Submission:
    """Run one submission under nbval in a subprocess and collect its check results."""
    folder = work / submission.slug
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    notebook = folder / "submission.ipynb"
    shutil.copyfile(submission.path, notebook)
    log, junit, output = folder / "grading.jsonl", folder / "junit.xml", folder / "output.txt"
    (folder / "pytest.ini").write_text("[pytest]\n")  # keep the repository's pytest settings out
    submission.lab = notebook_lab(notebook) or default_lab or "unknown"
    if notebook_lab(notebook) is None and not _is_json(notebook):
        submission.status = "unreadable"
        submission.note = "The file is not a readable notebook (invalid JSON). Nothing could be run."
        return submission
    command = [sys.executable, "-m", "pytest", "-c", str(folder / "pytest.ini"), "--rootdir", str(folder),
               "-p", "no:cacheprovider", "-q", "--nbval-lax", "--nbval-current-env",
               f"--nbval-cell-timeout={cell_timeout_s:g}", f"--junitxml={junit}", str(notebook)]
    start = time.monotonic()
    with output.open("w") as sink:
        process = subprocess.Popen(command, cwd=folder, env=_environment(log), stdout=sink,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        returncode, kernel_died = _wait(process, notebook_timeout_s)
    submission.seconds = time.monotonic() - start
    submission.results = read_log(log)
    if submission.lab == "unknown":
        labs = {r.get("lab") for r in submission.results.values() if r.get("lab")}
        submission.lab = labs.pop() if len(labs) == 1 else "unknown"
    submission.cell_errors = read_junit(junit)
    text = output.read_text(errors="replace")
    if kernel_died:
        submission.status = "crashed"
        submission.note = ("The notebook's kernel died (a segmentation fault, an abort, or running out of "
                           "memory), and grading stopped there. Checks after that point did not run.")
    elif returncode is None:
        submission.status = "timeout"
        submission.note = (f"The notebook did not finish within {notebook_timeout_s:g} s and was stopped. "
                           "Checks after that point did not run.")
    elif "Kernel dead" in text or "Kernel died" in text or "kernel died" in text.lower():
        submission.status = "crashed"
        submission.note = ("The notebook's kernel died (a segmentation fault, an abort, or running out of "
                           "memory). Checks after that point did not run.")
    elif returncode == 0:
        submission.status = "ok"
    elif returncode == 1:
        submission.status = "failed"
    else:
        submission.status = "unreadable" if not submission.cell_errors else "failed"
        if submission.status == "unreadable":
            submission.note = f"nbval could not run the notebook (pytest exit code {returncode}); see output.txt."
    if any("Timeout of" in error for error in submission.cell_errors) and not submission.note:
        submission.note = (f"A cell ran longer than the {cell_timeout_s:g} s allowed per cell and was "
                           "interrupted. After a timeout nbval skips the rest of the notebook, so the "
                           "checks after that cell did not run.")
    return submission


def _is_json(path: Path) -> bool:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return True


def read_log(path: Path) -> dict[str, dict]:
    """The last record of each check in a grading log (the file may be missing or cut short)."""
    results: dict[str, dict] = {}
    if not path.exists():
        return results
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "check" in record:
            results[record["check"]] = record
    return results


def read_junit(path: Path) -> list[str]:
    """'Cell 7: NameError: name 'x' is not defined' for each failing cell in nbval's JUnit report.

    Cells that failed a grader check (an AssertionError) are left out: the check's
    own message reports those.
    """
    if not path.exists():
        return []
    try:
        tree = ElementTree.parse(path)
    except ElementTree.ParseError:
        return []
    errors = []
    for case in tree.iter("testcase"):
        for problem in list(case.findall("failure")) + list(case.findall("error")):
            text = _ANSI.sub("", (problem.get("message") or "") + "\n" + (problem.text or ""))
            if re.search(r"^AssertionError\b", text, flags=re.M):
                continue
            name = case.get("name", "?")
            line = _last_error_line(text)
            errors.append(line if line.startswith(name) else f"{name}: {line}")
    return errors


# nbval colours its messages; JUnit XML spells the escape character as '#x1B'.
_ANSI = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*m")


def _last_error_line(text: str) -> str:
    """The most telling line of an nbval failure: a timeout, or the exception at the end of the traceback."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "Timeout of" in line or "Kernel dead" in line:
            return line[:300]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", line):
            return line[:300]
    return (lines[-1] if lines else "failed")[:300]


# ---------------------------------------------------------------- the report


def columns(submissions: list[Submission]) -> list[tuple[str, str]]:
    """(lab, check) pairs in column order: each lab's graded checks on this device class, then any extras."""
    device = thresholds.device_class()
    for submission in submissions:
        for record in submission.results.values():
            device = record.get("device_class") or device
            break
    found: list[tuple[str, str]] = []
    for lab in sorted({s.lab for s in submissions}):
        known = list(thresholds.GRADED.get(lab, {}).get(device, ()))
        extra = sorted({c for s in submissions if s.lab == lab for c in s.results} - set(known))
        found += [(lab, check) for check in known + extra]
    return found


def score(submission: Submission, lab: str, check: str) -> str:
    if submission.lab != lab:
        return ""
    record = submission.results.get(check)
    if record is None:
        return ""
    return "1" if record.get("passed") else "0"


def write_csv(submissions: list[Submission], path: Path) -> None:
    cols = columns(submissions)
    single_lab = len({lab for lab, _ in cols}) <= 1
    header = ["submission", "lab", "status"] + [c if single_lab else f"{lab}:{c}" for lab, c in cols]
    header += ["total", "max"]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for s in submissions:
            scores = [score(s, lab, check) for lab, check in cols]
            possible = sum(1 for lab, _ in cols if lab == s.lab)
            writer.writerow([s.name, s.lab, s.status] + scores + [sum(v == "1" for v in scores), possible])


def feedback(submission: Submission, checks: list[str]) -> str:
    passed = sum(1 for c in checks if submission.results.get(c, {}).get("passed"))
    device = next((r.get("device") for r in submission.results.values() if r.get("device")), None)
    lines = [f"# Feedback: {submission.name}", "",
             f"Lab `{submission.lab}`. Score: **{passed} of {len(checks)}** checks passed. "
             f"Status: `{submission.status}`." + (f" Graded on {device}." if device else ""), ""]
    if submission.note:
        lines += [submission.note, ""]
    if checks:
        lines += ["| check | result |", "|---|---|"]
        for check in checks:
            record = submission.results.get(check)
            result = "not run" if record is None else ("passed" if record.get("passed") else "**failed**")
            lines.append(f"| {check} | {result} |")
        lines.append("")
    for check in checks:
        record = submission.results.get(check)
        if record is None:
            lines += [f"## {check}: not run", "",
                      "This check never ran: its grader cell was deleted, or the notebook stopped (an error "
                      "that left a name undefined, a timeout or a crash) before it. Run the notebook from "
                      "the top in a fresh kernel to see why.", ""]
        elif not record.get("passed"):
            lines += [f"## {check}: failed", "", "```text", record.get("message", "").rstrip(), "```", ""]
    others = [e for e in submission.cell_errors if "AssertionError" not in e]
    if others:
        lines += ["## Other errors in your notebook", ""]
        lines += [f"- {error}" for error in others]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def grade(folder: Path, out: Path, *, cell_timeout_s: float = DEFAULT_CELL_TIMEOUT_S,
          notebook_timeout_s: float = DEFAULT_NOTEBOOK_TIMEOUT_S, lab: str | None = None,
          jobs: int = 1) -> list[Submission]:
    """Grade every submission in ``folder``; write grades.csv and feedback/ into ``out``."""
    submissions = find_submissions(folder)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)

    def one(submission: Submission) -> Submission:
        graded_one = run_one(submission, work, cell_timeout_s=cell_timeout_s,
                             notebook_timeout_s=notebook_timeout_s, default_lab=lab)
        print(f"{graded_one.name}: {graded_one.status}, "
              f"{sum(1 for r in graded_one.results.values() if r.get('passed'))} check(s) passed "
              f"({graded_one.seconds:.0f} s)", flush=True)
        return graded_one

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        submissions = list(pool.map(one, submissions))
    known = {s.lab for s in submissions if s.lab != "unknown"}
    if lab is None and len(known) == 1:  # an unreadable file in a folder of one lab belongs to that lab
        for submission in submissions:
            if submission.lab == "unknown":
                submission.lab = next(iter(known))
    write_csv(submissions, out / "grades.csv")
    (out / "feedback").mkdir(exist_ok=True)
    cols = columns(submissions)
    for submission in submissions:
        checks = [check for lab_name, check in cols if lab_name == submission.lab]
        (out / "feedback" / f"{submission.slug}.md").write_text(feedback(submission, checks), encoding="utf-8")
    return submissions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m brrr.gradebook", description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", type=Path, help="folder of submitted .ipynb files (searched recursively)")
    parser.add_argument("--out", type=Path, required=True, help="folder for grades.csv, feedback/ and work/")
    parser.add_argument("--cell-timeout", type=float, default=DEFAULT_CELL_TIMEOUT_S, help="seconds per cell")
    parser.add_argument("--notebook-timeout", type=float, default=DEFAULT_NOTEBOOK_TIMEOUT_S,
                        help="seconds per notebook, kernel start included")
    parser.add_argument("--lab", help="lab name for notebooks whose metadata does not say (e.g. 02-fuse-it)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (keep 1 for timed labs)")
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"{args.submissions} is not a folder")
    submissions = grade(args.submissions, args.out, cell_timeout_s=args.cell_timeout,
                        notebook_timeout_s=args.notebook_timeout, lab=args.lab, jobs=args.jobs)
    print(f"graded {len(submissions)} submission(s): {args.out / 'grades.csv'}, feedback in {args.out / 'feedback'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
