"""A course that stays the course: the grading code's fingerprint, recorded at an output folder's
first run.

A submission that edits the instructor's checkout is marked ``tampered`` in
the run where it does (:mod:`brrr.grading.integrity`), but the edit outlives
that run: the next run from the same checkout would read the edited checks.
So the gradebook records, in the output folder (:data:`RECORD`), a SHA-256 of
every file it grades with (the ``brrr`` package and the labs' solutions, as
:class:`brrr.grading.assemble.Snapshot` read them) at the folder's first run,
and refuses a later run into that folder whose files differ (:func:`changed`),
until the instructor says the change is theirs (``--accept-grading-code``),
which records the new state.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

RECORD = "grading-code.json"
FLAG = "--accept-grading-code"


def digests(files: dict[str, bytes]) -> dict[str, str]:
    """Each file's SHA-256, by its path relative to the folder holding ``brrr/``."""
    return {
        name.replace(os.sep, "/"): hashlib.sha256(data).hexdigest()
        for name, data in sorted(files.items())
    }


def fingerprint(files: dict[str, bytes]) -> str:
    """One SHA-256 for all of ``files``: of their :func:`digests`, so two runs that record the same
    digests share it (the shards of one course compare it, :mod:`brrr.grading.shards`)."""
    return hashlib.sha256(json.dumps(digests(files), sort_keys=True).encode()).hexdigest()


def recorded(out: Path) -> dict[str, str] | None:
    """The digests recorded in ``out``; None before its first run. A record that is a link, or
    unreadable, counts as one that matches nothing (a submission may have planted it)."""
    path = out / RECORD
    if not os.path.lexists(path):
        return None
    try:
        if path.is_symlink():
            raise ValueError("a link")
        data = json.loads(path.read_text())
        files = data["files"]
        if not isinstance(files, dict):
            raise ValueError("no files")
        return {str(k): str(v) for k, v in files.items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {"<the record itself>": "unreadable"}


def changed(before: dict[str, str], now: dict[str, str]) -> list[str]:
    """The files added, removed or edited between two records, sorted."""
    return sorted(name for name in before.keys() | now.keys() if before.get(name) != now.get(name))


def record(out: Path, now: dict[str, str]) -> None:
    """Write ``now`` as ``out``'s record, replacing (never writing through) whatever stands
    there."""
    out.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".grading-code-", dir=out)
    with os.fdopen(handle, "w") as file:
        json.dump({"files": now}, file, indent=0, sort_keys=True)
    os.replace(temporary, out / RECORD)


def refusal(out: Path, names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit]) + (
        f" and {len(names) - limit} more" if len(names) > limit else ""
    )
    return (
        f"the grading code differs from what graded {out} first ({len(names)} file(s): {shown}). A "
        "submission "
        "graded earlier may have changed your checkout: look at `git status` and `git diff` there, "
        "and restore "
        f"it. If the change is yours, pass {FLAG} to grade with it (it becomes this folder's "
        "record). No "
        "submission was graded."
    )


def check(out: Path, files: dict[str, bytes], *, accept: bool = False) -> str | None:
    """Record the grading code at ``out``'s first run, and compare it at later ones: the refusal
    when it changed and ``accept`` is False, else None (the record then holds the code graded
    with)."""
    now = digests(files)
    before = recorded(out)
    if before is not None and (names := changed(before, now)):
        if not accept:
            return refusal(out, names)
    if before != now:
        record(out, now)
    return None
