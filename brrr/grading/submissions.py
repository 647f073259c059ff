"""The gradebook's first step: find the submissions in a folder, give each a safe folder name, and
its lab.

A submission is named by its path relative to the folder (``alice.ipynb`` ->
``alice``, ``bob/02-fuse-it.ipynb`` -> ``bob/02-fuse-it``). Its work folder and
its feedback file are named by :func:`folder_names`: the name with every
character outside ``[A-Za-z0-9._-]`` (a ``/`` included) written ``__``, unless
that name could not be a folder of its own (``...ipynb`` is ``..``: the output
folder itself, which the gradebook deletes), is too long, or is shared with
another submission of the folder (``a b`` and ``a__b``; ``Alice`` and ``alice``
on a case-blind disk); those get a digest of the whole name after a ``~``, which
no plain name holds. The names depend on the folder's names alone, so every
shard of a folder names a submission alike."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

from brrr import labs
from brrr.grading import assemble, shards

LONGEST = 80  # characters of a plain folder name, before a digest is added


@dataclass
class Submission:
    name: str
    path: Path
    lab: str = "unknown"
    status: str = "not graded"
    results: dict[str, dict] = field(default_factory=dict)  # check -> the grader's verdict
    cell_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""
    # the file as read when grading started; later edits on disk change nothing
    data: bytes | None = None
    tampered: list[str] = field(default_factory=list)  # watched paths that changed while it ran
    # its notebook ran in a bubblewrap sandbox (False only under --no-sandbox)
    sandboxed: bool = True
    timed_out: list[str] = field(default_factory=list)  # checks whose grader cell ran out of time
    folder_name: str = ""  # its work folder and feedback file (folder_names); "" until found

    @property
    def slug(self) -> str:
        return self.folder_name or plain_name(self.name)


def plain_name(name: str) -> str:
    """``name`` with every character outside ``[A-Za-z0-9._-]`` (``/`` too) written ``__``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "__", name)


def folder_names(names: list[str]) -> dict[str, str]:
    """Each submission name -> a folder name that is safe (no ``.``, ``..``, hidden or over-long
    name) and unique among ``names``, case aside: the plain name where it is both, else it with a
    digest of the name."""
    plain = {name: plain_name(name) for name in names}
    shared = Counter(value.lower() for value in plain.values())
    chosen = {}
    for name, value in plain.items():
        unsafe = not value.strip(".") or value.startswith(".") or len(value) > LONGEST
        if unsafe or shared[value.lower()] > 1:
            digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:12]
            value = f"{value.strip('.')[:LONGEST]}~{digest}"
        chosen[name] = value
    return chosen


def find_submissions(folder: Path, only: Callable[[str], bool] | None = None) -> list[Submission]:
    """Every notebook under ``folder`` (those whose name ``only`` accepts), read into memory now: a
    submission that edits another's file on disk while it runs changes nothing that is graded."""
    paths = shards.submission_paths(folder)
    names = folder_names(list(paths))
    found = []
    for name, path in paths.items():
        if only is not None and not only(name):
            continue
        try:
            data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        except OSError:
            data = None
        found.append(Submission(name, path, data=data, folder_name=names[name]))
    return found


def from_row(row: dict) -> Submission:
    """A graded row as a manifest or the journal keeps it (:func:`brrr.grading.shards.row`)."""
    return Submission(
        row["name"],
        Path(row["path"]),
        lab=row["lab"],
        status=row["status"],
        results=row["results"],
        cell_errors=row["cell_errors"],
        seconds=row["seconds"],
        sandboxed=row.get("sandboxed", True),
        note=row["note"],
        timed_out=row.get("timed_out", []),
        folder_name=row.get("slug", ""),
    )


def read_notebook(data: bytes | None) -> nbformat.NotebookNode | None:
    try:
        notebook = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception:  # noqa: BLE001 - anything unreadable is "unreadable"
        return None
    return notebook if isinstance(notebook.get("cells"), list) else None


def choose_lab(
    submission: Submission,
    notebook: nbformat.NotebookNode | None,
    given: str | None,
    snapshot: assemble.Snapshot,
) -> str | None:
    """The lab to grade ``submission`` as, or None (the note says why).

    ``--lab`` decides when given. Otherwise the notebook's cells do: a notebook
    made from a lab carries that lab's cell ids, whatever its metadata claims.
    Failing that, its ``metadata.brrr.lab`` or its file name, if either is a
    known lab. A name that is no lab is refused, never given columns of its own.
    """
    if given:
        return given
    if notebook is not None:
        ids = {cell.get("id") for cell in notebook.get("cells", [])}
        overlap = {
            lab: len(ids & {c.get("id") for c in cells.cells}) / max(1, len(cells.cells))
            for lab, cells in snapshot.labs.items()
        }
        best = max(overlap, key=overlap.get, default=None)
        if best is not None and overlap[best] >= 0.5:
            return best
    claimed = None
    if notebook is not None:
        metadata = notebook.get("metadata", {}).get("brrr", {})
        claimed = metadata.get("lab") if isinstance(metadata, dict) else None
    for candidate in (claimed, submission.path.stem):
        if isinstance(candidate, str) and candidate in labs.LABS:
            return candidate
    submission.note = (
        "This notebook is not one of this course's labs (metadata.brrr.lab = "
        f"{str(claimed)[:40]!r}, file {submission.path.name!r}, and its cells match no lab); the "
        f"labs are {', '.join(sorted(labs.LABS))}. It was not graded. Instructors: pass --lab to "
        "grade a folder of one lab."
    )
    return None
