"""What the gradebook tests share: the labs they grade, and how they read the outcome."""

import contextlib
import csv
import fcntl
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import nbformat

LAB = "02-fuse-it"
ROOFLINE = "01-roofline"


@contextlib.contextmanager
def the_grading_environment(tmp_path_factory, *, changes_it: bool = False):
    """Hold the Python environment that grades while a gradebook runs in it: shared by the tests
    that only grade, alone for a test whose submission changes the environment on purpose.

    The gradebook's integrity watch stops grading when a file of its Python environment changes (as
    it must: the graded code may have done it). A planted change under one worker then stopped a
    gradebook run under the other: the unsolved labs of tests/labs/test_labs.py came back "tampered"
    while tests/grading/test_gradebook_tampering.py touched nbformat's ``__init__.py``. The lock
    lives where the pytest-xdist workers share the book's build (conftest.book_build)."""
    lock_path = tmp_path_factory.getbasetemp().parent / "grading-environment.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if changes_it else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def processes_inside(folder: Path) -> list[int]:
    """Processes whose working directory is under ``folder`` (a leftover kernel would be one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")).is_relative_to(folder):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def read_rows(out: Path) -> dict[str, dict[str, str]]:
    with (out / "grades.csv").open() as handle:
        return {row["submission"]: row for row in csv.DictReader(handle)}


ESCAPES = "escapes_the_sandbox"  # the Lab 2 fixture that tries every way out of its sandbox


@contextlib.contextmanager
def escape_attempt(submissions: Path, out: Path):
    """Write the escapes_the_sandbox notebook into ``submissions``, with targets of this process's
    to reach for (a process of its own, a TCP port on this machine's loopback, another grader's
    socket, files of the checkout, the submissions and the output folder); while grading runs in the
    block, they wait. After it, the yielded dict holds "reached" (the notebook's attacks.json),
    "victim" (that process's pid) and "accepted" (connections the sockets took). The gradebook, a
    child subreaper, kills the victim when it reaps: a child of this process that it did not
    start."""
    from brrr import labs
    from lab_fixtures import ROOT, submission_notebook

    other = (
        out.parent / "brrr-grader-other"
    )  # another submission's grader, as far as the notebook knows
    other.mkdir(parents=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(other / "grader.sock"))
    listener.listen(1)
    network = socket.create_server(("127.0.0.1", 0))
    accepted: list = []
    for server in (listener, network):
        threading.Thread(target=_accept, args=(server, accepted), daemon=True).start()
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    targets = {
        "victim": victim.pid,
        "port": network.getsockname()[1],
        "socket": str(other / "grader.sock"),
        "files": [
            str(ROOT / "brrr" / "labs" / "fuse_it" / "checks.py"),  # the instructor's checkout
            str(submissions / f"{ESCAPES}.ipynb"),  # the submissions folder
            str(out / "grading-code.json"),  # the gradebook's output folder
        ],
        "labs": {lab: labs.module(lab).__name__ for lab in labs.LABS},
    }
    notebook = submission_notebook(LAB, ESCAPES)
    cell = next(c for c in notebook.cells if c.get("id") == "fused-chain")
    cell.source = f"TARGETS = {targets!r}\n" + cell.source
    nbformat.write(notebook, str(submissions / f"{ESCAPES}.ipynb"))
    found: dict = {"victim": victim.pid, "accepted": accepted}
    try:
        yield found
    finally:
        victim.kill()
        victim.wait()
        listener.close()
        network.close()
    attacks = out / "work" / ESCAPES / "attacks.json"
    found["reached"] = json.loads(attacks.read_text()) if attacks.exists() else {}


def _accept(server: socket.socket, accepted: list) -> None:
    try:
        accepted.append(server.accept())
    except OSError:  # closed when grading ended
        pass


def shard_outputs(graded, submissions: Path, out: Path, count: int, into: Path) -> list[Path]:
    """The folders ``count`` shards would have written for ``graded`` (the Submissions of one
    unsharded run of ``submissions`` into ``out``): each its share's rows in its manifest, and its
    feedback files."""
    from brrr.grading import assemble, shards

    provenance = shards.provenance(assemble.Snapshot())
    names = [submission.name for submission in graded]
    folders = []
    for index in range(1, count + 1):
        folder = into / f"shard-{index}"
        (folder / "feedback").mkdir(parents=True)
        share = [s for s in graded if shards.shard_of(s.name, count) == index]
        for submission in share:
            (folder / "feedback" / f"{submission.slug}.md").write_bytes(
                (out / "feedback" / f"{submission.slug}.md").read_bytes()
            )
        record = provenance | {
            "shard": [index, count],
            "state": "done",
            "submissions": str(submissions),
            "options": {"lab": None},
            "folder_names": names,
            "rows": [shards.row(submission, submissions) for submission in share],
        }
        shards.write_manifest(folder, record)
        folders.append(folder)
    return folders
