"""Wheels only for what the GPU node lacks, and what the check sends to the node, in bytes.

The node has python3 with torch, triton and most of what the check needs (numpy, matplotlib,
pytest...); ``.ci/gpu-node-packages.txt`` lists what it has. ``make wheelhouse`` resolves
``requirements.txt`` (less torch, triton and the book-only lines) for the node's Python, then
downloads only what that list lacks:

* ``wheelhouse/requirements-node.txt``: what the wheelhouse carries, ``name==version`` a line;
* ``wheelhouse/node-provides.txt``: what the resolution takes from the node, at the version it
resolved.

On the node, before installing, :func:`to_install` asks the node's own Python what it has: a carried
package it already has is left alone, and one the resolution takes from it that it lacks stops the
set-up with the one-line refresh of the list (``python -m brrr_book.gpucheck wheels --help``).

:func:`sent` counts what a GPU call sends: the files git would (tracked, and untracked but not
ignored), and the wheelhouse, which travels as a carried path.

Nothing here imports more than the standard library: the node runs it before anything is installed.
"""

from __future__ import annotations

import re
import subprocess
from importlib import metadata
from pathlib import Path

NODE_LIST = Path(".ci/gpu-node-packages.txt")  # relative to the checkout
REFRESH = "python3 -m pip list --format=freeze --exclude-editable > .ci/gpu-node-packages.txt"
CARRIED = "requirements-node.txt"
PROVIDED = "node-provides.txt"
AIM_BYTES = 40 * 2**20  # tree and wheels together, well inside the 64 MiB a call may send
MIB = 2**20


def name_of(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503): ``Jupyter_Core`` is ``jupyter-core``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_list(text: str) -> dict[str, str | None]:
    """``name==version`` (or a bare ``name``) a line, comments and blanks skipped, by normalized
    name."""
    found: dict[str, str | None] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        found[name_of(name.strip())] = version.strip() or None
    return found


def write_list(packages: dict[str, str | None]) -> str:
    return "".join(
        f"{name}=={version}\n" if version else f"{name}\n" for name, version in packages.items()
    )


def split(resolved: dict[str, str], node: dict[str, str | None]) -> tuple[dict, dict]:
    """The resolved packages as (what the wheelhouse carries, what the node provides), each
    sorted."""
    carried = {name: resolved[name] for name in sorted(resolved) if name not in node}
    provided = {name: resolved[name] for name in sorted(resolved) if name in node}
    return carried, provided


def resolved_from_report(report: dict) -> dict[str, str]:
    """``pip install --dry-run --report``'s packages, ``{name: version}``."""
    return {
        name_of(item["metadata"]["name"]): item["metadata"]["version"]
        for item in report.get("install", [])
    }


def installed() -> dict[str, str]:
    """What the running Python has installed, ``{name: version}``."""
    return {
        name_of(dist.metadata["Name"]): dist.version
        for dist in metadata.distributions()
        if dist.metadata["Name"]
    }


def to_install(wheelhouse: Path, have: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """For a node that has ``have``: the wheelhouse's ``name==version`` lines it lacks, what it must
    have and lacks, and a line per package it has at another version than the one resolved."""
    carried = read_list((wheelhouse / CARRIED).read_text())
    provides_file = wheelhouse / PROVIDED
    provided = read_list(provides_file.read_text()) if provides_file.exists() else {}
    install = [f"{name}=={version}" for name, version in carried.items() if name not in have]
    missing = sorted(name for name in provided if name not in have)
    differ = [
        f"{name} {have[name]} (resolved {version})"
        for name, version in {**carried, **provided}.items()
        if name in have and version and have[name] != version
    ]
    return install, missing, differ


def files_sent(root: Path) -> list[Path]:
    """The files a GPU call sends of the checkout at ``root``: git's tracked files and its untracked
    ones that are not ignored (a tree that is no checkout of its own: every file but ``.git/``)."""
    git = ["git", "-C", str(root)]
    try:
        top = subprocess.run(
            [*git, "rev-parse", "--show-toplevel"], capture_output=True, check=True
        )
        if Path(top.stdout.decode().strip()).resolve() != root.resolve():
            raise ValueError("inside another checkout")
        listed = subprocess.run(
            [*git, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout.split(b"\0")
        paths = {root / name.decode() for name in listed if name}
    except (OSError, ValueError, subprocess.CalledProcessError):
        paths = {path for path in root.rglob("*") if ".git" not in path.relative_to(root).parts}
    return sorted(path for path in paths if path.is_file() and not path.is_symlink())


def folder_bytes(folder: Path) -> int:
    if not folder.is_dir():
        return 0
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def sent(root: Path, wheelhouse: Path) -> dict[str, int]:
    """What a GPU call sends, in bytes: ``tree``, ``wheels`` and their ``total``."""
    tree = sum(
        path.stat().st_size
        for path in files_sent(root)
        if not path.resolve().is_relative_to(wheelhouse.resolve())  # counted once, as the wheels
    )
    wheels = folder_bytes(wheelhouse)
    return {"tree": tree, "wheels": wheels, "total": tree + wheels}


def size_line(sizes: dict[str, int], wheel_count: int) -> str:
    verdict = "within" if sizes["total"] <= AIM_BYTES else "OVER"
    return (
        f"sent to the node: tree {sizes['tree'] / MIB:.1f} MiB + wheelhouse "
        f"{sizes['wheels'] / MIB:.1f} MiB ({wheel_count} wheels) = {sizes['total'] / MIB:.1f} MiB, "
        f"{verdict} the {AIM_BYTES // MIB} MiB aimed at (a call may send 64 MiB)"
    )
