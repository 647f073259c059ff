"""What the gradebook tests share: the labs they grade, and how they read the outcome."""

import contextlib
import csv
import fcntl
import os
from pathlib import Path

LAB = "02-fuse-it"
ROOFLINE = "01-roofline"


@contextlib.contextmanager
def the_grading_environment(tmp_path_factory, *, changes_it: bool = False):
    """Hold the Python environment that grades while a gradebook runs in it: shared by the tests that
    only grade, alone for a test whose submission changes the environment on purpose.

    The gradebook's integrity watch stops grading when a file of its Python environment changes (as it
    must: the graded code may have done it). A planted change under one worker then stopped a gradebook
    run under the other: the unsolved labs of tests/labs/test_labs.py came back "tampered" while
    tests/grading/test_gradebook_tampering.py touched nbformat's ``__init__.py``. The lock lives where the
    pytest-xdist workers share the book's build (conftest.book_build)."""
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


def shard_outputs(graded, submissions: Path, out: Path, count: int, into: Path) -> list[Path]:
    """The folders ``count`` shards would have written for ``graded`` (the Submissions of one unsharded run
    of ``submissions`` into ``out``): each its share's rows in its manifest, and its feedback files."""
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
