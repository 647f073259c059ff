"""Reference measurements from real GPUs, kept in ``brrr/data/reference/<gpu-name>.json``.

The files ship inside the package and are read through :mod:`importlib.resources`,
so a pip-installed brrr shows the same GPU figures as a checkout.

The GPU check (:mod:`brrr_book.gpucheck`) sets ``BRRR_RECORD_REFERENCE`` to a part's
own folder, and every notebook that calls :func:`record` adds its figures,
stamped, to that GPU's file there; every target, claim and grader check adds
its verdict (:func:`record_check`), met or not, before a miss stops the cell.
``python -m brrr_book.gpucheck merge`` folds the parts into the committed folder:
nothing records into it directly (:func:`recording_dir` refuses it), so no test
or stray run can overwrite the committed ceilings. Elsewhere :func:`record`
does nothing, so a reader's run never edits the committed data. Chapters load
the committed files with :func:`load_all` to show our GPU figures beside the
reader's own.

File layout (``"schema": 2``; a file without ``schema`` is the first GPU run's,
which has only ``figures``, read the same way)::

    {"schema": 2,
     "stamp": {...environment(), commit included, of the merge...},
     "ceilings": {...Ceilings.to_json()...},
     "figures": {"<section>": {"env": {...stamp...}, "values": {...}}},
     "checks": {"<kind>: <name>": {"kind": "target" | "condition" | "claim" | "grader", "name": ...,
                "value": ..., "bound": ..., "attempts": [...], "verdict": "met" | "NOT met" | ...,
                "source": "<notebook>", "env": {...}}},
     "notebooks": {"<path>": {"seconds": ..., "verdict": ..., "part": N,
                              "outputs": "outputs/<gpu>/<stem>"}},
     "parts": {"1": {...the part's log, brrr_book.gpucheck.run...}}}
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from brrr import cache
from brrr.device import device_name
from brrr.stamp import environment

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

ENV_VAR = "BRRR_RECORD_REFERENCE"
SOURCE_VAR = "BRRR_RECORD_SOURCE"  # the notebook being run, set by brrr_book.gpucheck.run
SCHEMA = 2


class RecordingIntoCommitted(RuntimeError):
    """``BRRR_RECORD_REFERENCE`` names the committed folder: only the merge writes there."""


def committed() -> Traversable:
    """The package's folder of committed reference files (in a checkout: brrr/data/reference)."""
    return resources.files("brrr") / "data" / "reference"


def recording_dir() -> Path | None:
    """Where :func:`record` writes: ``$BRRR_RECORD_REFERENCE``, or None (recording off). The
    committed folder is refused: a part records into its own folder and the merge folds it in."""
    folder = os.environ.get(ENV_VAR)
    if not folder:
        return None
    path = Path(folder)
    if path.resolve() == Path(str(committed())).resolve():
        raise RecordingIntoCommitted(
            f"{ENV_VAR}={folder} is the committed reference folder: record into a folder of your "
            "own (.ci/gpu-check --out DIR does) and fold it in with "
            "python -m brrr_book.gpucheck merge DIR"
        )
    return path


def reference_path(folder: Path) -> Path:
    return folder / f"{cache.slug(device_name())}.json"


def _update(change) -> Path | None:
    """Apply ``change(data)`` to this GPU's file in the recording folder, when recording."""
    folder = recording_dir()
    if folder is None:
        return None
    path = reference_path(folder)
    data = cache.read_json(path) or {"schema": SCHEMA}
    change(data)
    cache.write_json(path, data)
    return path


def record(section: str, values: dict) -> Path | None:
    """Add ``values`` under ``figures[section]`` of this GPU's reference file, when recording."""
    return _update(lambda data: data.setdefault("figures", {}).__setitem__(section, entry(values)))


def entry(values: dict) -> dict:
    """A figure as it is recorded: its values, the stamp, and the notebook that measured it."""
    found = {"env": environment(), "values": values}
    if os.environ.get(SOURCE_VAR):
        found["source"] = os.environ[SOURCE_VAR]
    return found


def record_check(
    kind: str,
    name: str,
    *,
    verdict: str,
    value=None,
    bound=None,
    attempts: list | None = None,
    detail: str = "",
) -> Path | None:
    """Record one check's verdict (``met``/``NOT met``, ``passed``/``failed``...), its value, bound
    and every attempt, when recording: called before a miss raises, so a failed check is on record
    as failed."""
    found = {"kind": kind, "name": name, "verdict": verdict, "value": value, "bound": bound}
    found["attempts"] = list(attempts) if attempts is not None else [] if value is None else [value]
    if detail:
        found["detail"] = detail
    source = os.environ.get(SOURCE_VAR, "")
    key = f"{kind}: {name}" + (f" ({source})" if source else "")

    return _update(
        lambda data: data.setdefault("checks", {}).__setitem__(
            key, {**found, "source": source, "env": environment()}
        )
    )


def record_ceilings(ceilings_json: dict) -> Path | None:
    return _update(lambda data: data.__setitem__("ceilings", ceilings_json))


def load_all(folder: Path | Traversable | None = None) -> dict[str, dict]:
    """Every reference file in ``folder`` (default: the committed ones), by file stem."""
    folder = committed() if folder is None else folder
    if not folder.is_dir():
        return {}
    files = sorted(
        (entry for entry in folder.iterdir() if entry.name.endswith(".json")),
        key=lambda entry: entry.name,
    )
    return {entry.name.removesuffix(".json"): cache.read_json(entry) or {} for entry in files}


def verdicts(data: dict) -> dict[str, str]:
    """Every check's verdict in one record, by its key; a first-run record (no ``schema``) has
    none."""
    return {key: check.get("verdict", "?") for key, check in data.get("checks", {}).items()}
