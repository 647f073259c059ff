"""What the Gradescope bundle installs (:mod:`brrr.grading.gradescope`): brrr's source and its pins.

From a checkout, the checkout's own: ``pyproject.toml``, ``README.md``, the
package and the pins of ``requirements.txt`` (less torch, the book's stack and
pytest-xdist). From an installed brrr (``pip install brrr``), where none of
those files exists: the package as installed, a ``pyproject.toml`` written from
its metadata that installs those very files, and as pins the versions installed
here of everything brrr and its grading extra need, all the way down (this
environment grades; the container should grade as it does).
"""

from __future__ import annotations

import os
import re
from importlib import metadata
from pathlib import Path

SOURCE = "brrr-source"  # in the zip: brrr's source, as pip installs it
# requirements.txt lines the bundle leaves out: torch (installed first, from the CPU index), the
# book's stack, and the test runner's parallel plugin.
LEFT_OUT = ("torch==", "pytest-xdist==")
EXTRAS = ("grade",)  # brrr's extras the container needs
NOT_PINNED = ("torch",)  # setup.sh installs it first, from torch's CPU index


class NoSource(RuntimeError):
    """Neither a checkout nor an installed brrr to build the bundle from; the message says what to
    do."""


def is_checkout(root: Path) -> bool:
    return all((root / name).is_file() for name in ("pyproject.toml", "requirements.txt"))


def requirements(root: Path) -> str:
    """The bundle's requirements.txt: the checkout's pins where ``root`` is one, else this
    environment's."""
    if not is_checkout(root):
        return installed_pins()
    kept = [
        "# brrr's pins for grading (requirements.txt less the book's stack); torch comes first, in "
        "setup.sh."
    ]
    for line in (root / "requirements.txt").read_text().splitlines():
        text = line.strip()
        if (
            text
            and not text.startswith("#")
            and "book-only" not in text
            and not text.startswith(LEFT_OUT)
        ):
            kept.append(text)
    return "\n".join(kept) + "\n"


def installed_pins() -> str:
    """``name==version`` for every distribution brrr (with :data:`EXTRAS`) needs here, and what they
    need, as installed in this environment."""
    from packaging.requirements import Requirement

    try:
        wanted = [
            (Requirement(text), extra) for text in _requires("brrr") for extra in ("", *EXTRAS)
        ]
    except metadata.PackageNotFoundError:
        raise NoSource(
            "brrr is neither a checkout (no requirements.txt beside it) nor installed with its "
            "metadata: build the bundle from a checkout, or from `pip install 'brrr[grade]'`"
        ) from None
    pins, seen = {}, set()
    while wanted:
        requirement, extra = wanted.pop()
        name = _canonical(requirement.name)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        if name in seen or name in NOT_PINNED:
            continue
        seen.add(name)
        try:
            pins[name] = f"{requirement.name}=={metadata.version(requirement.name)}"
        except metadata.PackageNotFoundError:  # not needed here (a marker for another platform)
            continue
        for text in _requires(requirement.name):
            for wanted_extra in ("", *sorted(requirement.extras)):
                wanted.append((Requirement(text), wanted_extra))
    lines = [
        "# brrr's pins for grading, as installed where the bundle was built; torch comes first."
    ]
    return "\n".join(lines + [pins[name] for name in sorted(pins)]) + "\n"


def _requires(name: str) -> list[str]:
    return metadata.requires(name) or []


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def source_files(root: Path) -> dict[str, Path]:
    """brrr's source as the wheel holds it, by its name in the zip: the package (the link to
    solutions/ followed, so the solutions ship as files), and the checkout's pyproject.toml and
    README.md."""
    names = ("pyproject.toml", "README.md") if is_checkout(root) else ()
    files = {f"{SOURCE}/{name}": root / name for name in names if (root / name).is_file()}
    for folder, subfolders, found in os.walk(root / "brrr", followlinks=True):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(found):
            if not name.endswith((".pyc", ".pyo")):
                path = Path(folder) / name
                files[f"{SOURCE}/{path.relative_to(root).as_posix()}"] = path
    return files


def written_files(root: Path, files: dict[str, Path]) -> dict[str, str]:
    """What the bundle's source needs besides ``files`` where ``root`` is no checkout: a
    pyproject.toml that installs the package as it is installed here, every file of it (the data
    too) included."""
    if is_checkout(root):
        return {}
    from brrr import __version__

    data = sorted(
        name.removeprefix(f"{SOURCE}/brrr/")
        for name in files
        if name.startswith(f"{SOURCE}/brrr/") and not name.endswith(".py")
    )
    try:
        scripts = {
            e.name: e.value
            for e in metadata.distribution("brrr").entry_points
            if e.group == "console_scripts"
        }
    except metadata.PackageNotFoundError:
        scripts = {}
    lines = [
        "# Written by `python -m brrr.grading gradescope` from the installed brrr.",
        "[build-system]",
        'requires = ["setuptools>=61"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        'name = "brrr"',
        f'version = "{__version__}"',
        'requires-python = ">=3.10"',
        "",
        "[project.scripts]",
        *(f'{name} = "{value}"' for name, value in sorted(scripts.items())),
        "",
        "[tool.setuptools.packages.find]",
        'include = ["brrr", "brrr.*"]',
        "",
        "[tool.setuptools.package-data]",
        "brrr = [",
        *(f'    "{name}",' for name in data),
        "]",
    ]
    return {f"{SOURCE}/pyproject.toml": "\n".join(lines) + "\n"}
