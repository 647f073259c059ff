"""A submission's processes in a bubblewrap sandbox: the ``bwrap`` command line, and whether one can be made here.

The gradebook runs each submission's notebook (pytest, nbval, the Jupyter
kernel and whatever student code starts) under ``bwrap`` (Debian's
``bubblewrap``, the sandbox Flatpak uses), made by :func:`command`:

- new PID, IPC, network, UTS and cgroup namespaces: the notebook sees only its
  own processes in ``/proc`` (so it can neither find nor signal the grader, the
  gradebook or another submission) and has only a loopback network of its own;
- a new root holding only what runs Python, read-only: the system folders
  (:data:`SYSTEM`), the interpreter and the folders on its path
  (:func:`layout`), less the instructor's installed ``brrr`` and checkout
  (masked by empty read-only folders), and the secrets of ``/etc``
  (:data:`SECRETS`). A gradebook run as root leaves its sandbox root's uid
  (without any capability), which owns what root owns, so there every file
  and folder under :data:`SCANNED` that other users cannot read is masked too
  (:func:`unreadable_to_others`: a Slurm node's ``/etc/munge/munge.key``, a
  database's access rules): the notebook reads only what any user may. The
  notebook sees the student copy of ``brrr`` the gradebook wrote into its
  work folder, and nothing else of the course;
- a private ``/tmp`` of at most :data:`TMP_BYTES`, a minimal ``/dev`` (with the GPU's device nodes where
  there are some) and a ``/proc`` of its own;
- one writable folder, the submission's own work folder, and one socket, its
  own grader's;
- no capabilities, even where the gradebook runs as root, and a new session
  (no terminal to inject keystrokes into). When the gradebook dies, so does the
  sandbox (``--die-with-parent``), and when the notebook's first process ends,
  the PID namespace ends and every process in it is killed.

Where ``bwrap`` is missing or cannot create namespaces (a container that
forbids them), :func:`problem` says so, and the gradebook grades only when told
``--no-sandbox``. ``$BRRR_BWRAP`` names another ``bwrap`` (tests point it at a
missing file).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

BWRAP_VARIABLE = "BRRR_BWRAP"
PACKAGE = "bubblewrap"  # Debian's, and most distributions' name for it
# Folders every program needs, bound read-only where they exist (links, as on a merged-/usr system, stay links).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")
# Secrets in those system folders, masked by an empty file or folder: a gradebook run as root leaves the sandbox
# root's uid (without any capability), and root owns them.
SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
)
# Folders scanned, for a gradebook run as root, for what other users cannot read (masked in the sandbox). /etc
# holds a machine's keys and passwords; the other system folders and the environment hold what packages
# installed, readable by all (scanning /usr and a virtual environment takes a second more per run).
SCANNED = ("/etc",)
GPU_DEVICES = ("/dev/nvidia*", "/dev/dri")
# The private /tmp's size. A tmpfs lives in memory that no process is charged with, so a notebook that filled
# it would make the out-of-memory killer take the largest processes (the grader's among them), not the
# notebook's. The caches torch and Triton write go to the work folder (the gradebook's environment), so an
# honest notebook's /tmp holds a few MiB of temporary files. Set where bwrap has --size (0.8 and later).
TMP_BYTES = 1 << 30
PROBE_TIMEOUT_S = 60


class Unavailable(RuntimeError):
    """No sandbox can be made here; the message is :func:`refusal`'s."""


@dataclass(frozen=True)
class Layout:
    """What a sandbox shows of this machine, beyond :data:`SYSTEM`: the same for every submission of a run.

    ``readable``: folders bound read-only (the interpreter, its prefixes, the folders on its path).
    ``hidden``: folders inside those that are masked by an empty one (the instructor's brrr, the checkout).
    ``unreadable``: for a gradebook run as root, what other users cannot read under :data:`SCANNED`,
    masked: folders by an empty one, files by an empty file.
    """

    readable: tuple[Path, ...]
    hidden: tuple[Path, ...]
    unreadable: tuple[Path, ...] = ()


def executable() -> str | None:
    """The ``bwrap`` to run: ``$BRRR_BWRAP`` if set (whether or not it exists), else the one on the path."""
    named = os.environ.get(BWRAP_VARIABLE)
    if named:
        return named if os.access(named, os.X_OK) and os.path.isfile(named) else None
    return shutil.which("bwrap")


def layout(checkout: Path | None, path: list[str] | None = None) -> Layout:
    """The folders a sandbox shows read-only for this interpreter, and those masked inside them.

    Readable: ``sys.prefix`` and ``sys.base_prefix`` (a virtual environment and the Python it was made
    from), the interpreter's real folder, and every folder on ``path`` (``sys.path``), except the checkout
    and folders inside it that are not the environment (``tests/`` under pytest). Hidden: the checkout,
    where a readable folder holds it, and the instructor's installed ``brrr`` in any readable folder (a
    wheel's site-packages): the notebook imports the student copy in its work folder, less the lab's
    hidden modules, and finds no other.
    """
    checkout = checkout.resolve() if checkout else None
    prefixes = {
        Path(p).resolve()
        for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    }
    found = set(prefixes) | {Path(os.path.realpath(sys.executable)).parent}
    for entry in sys.path if path is None else path:
        folder = Path(entry).resolve() if entry else None
        if folder is None or not folder.is_dir():
            continue
        if checkout and _inside(folder, {checkout}) and not _inside(folder, prefixes):
            continue
        found.add(folder)
    readable = sorted(p for p in found if not _inside(p, found - {p}))
    hidden = set()
    for folder in found:
        for name in ("brrr", "brrr.py"):
            if os.path.lexists(folder / name) and _inside(folder, set(readable)):
                hidden.add(folder / name)
    if checkout and _inside(checkout, set(readable)):
        hidden.add(checkout)
    unreadable = unreadable_to_others(SCANNED) if os.geteuid() == 0 else []
    return Layout(tuple(readable), tuple(sorted(hidden)), tuple(unreadable))


def unreadable_to_others(folders) -> list[Path]:
    """Every file under ``folders`` that other users cannot read, and every folder they cannot list or
    enter (not descended into), links left alone: what the sandbox masks for a gradebook run as root.
    Entries that vanish or cannot be read while scanning are skipped."""
    found: list[Path] = []
    for top in folders:
        if not os.path.isdir(top) or os.path.islink(top):
            continue
        for folder, subfolders, files in os.walk(top):
            for name in list(subfolders):
                path = Path(folder) / name
                with contextlib.suppress(OSError):
                    mode = path.lstat().st_mode
                    if not stat.S_ISLNK(mode) and (mode & (stat.S_IROTH | stat.S_IXOTH)) != (
                        stat.S_IROTH | stat.S_IXOTH
                    ):
                        found.append(path)
                        subfolders.remove(name)
            for name in files:
                path = Path(folder) / name
                with contextlib.suppress(OSError):
                    mode = path.lstat().st_mode
                    if stat.S_ISREG(mode) and not mode & stat.S_IROTH:
                        found.append(path)
    return sorted(found)


def _inside(path: Path, folders: set[Path]) -> bool:
    return any(path == folder or folder in path.parents for folder in folders)


def command(
    argv: list[str],
    *,
    writable: Path,
    sockets: tuple[Path, ...] = (),
    within: Layout,
    bwrap: str | None = None,
) -> list[str]:
    """``argv`` run in a sandbox (see the module docstring) where ``writable`` is the one folder it may write,
    its working folder, and ``sockets`` the only sockets of this machine it can reach."""
    bwrap = bwrap or executable() or "bwrap"
    args = [bwrap, "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    args += [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += (["--size", str(TMP_BYTES)] if sizes_tmpfs(bwrap) else []) + ["--tmpfs", "/tmp"]
    for folder in SYSTEM:
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    for folder in within.readable:
        args += ["--ro-bind", str(folder), str(folder)]
    for secret in SECRETS:
        if os.path.isdir(secret) and not os.path.islink(secret):
            args += ["--tmpfs", secret, "--remount-ro", secret]
        elif os.path.lexists(secret):
            args += ["--ro-bind", "/dev/null", secret]
    for path in within.unreadable:
        if any(path == Path(secret) or Path(secret) in path.parents for secret in SECRETS):
            continue  # masked above
        if path.is_dir():
            args += ["--tmpfs", str(path), "--remount-ro", str(path)]
        else:
            args += ["--ro-bind", "/dev/null", str(path)]
    for folder in within.hidden:  # an empty folder, read-only, in its place
        args += ["--tmpfs", str(folder), "--remount-ro", str(folder)]
    for pattern in GPU_DEVICES:
        for device in sorted(glob.glob(pattern)):
            args += ["--dev-bind", device, device]
    args += ["--bind", str(writable), str(writable)]
    for socket in sockets:
        args += [
            "--ro-bind",
            str(socket),
            str(socket),
        ]  # connecting needs no write access to the mount
    args += ["--remount-ro", "/", "--chdir", str(writable), "--"]
    return args + list(argv)


@functools.lru_cache(maxsize=None)
def sizes_tmpfs(bwrap: str) -> bool:
    """Whether this ``bwrap`` can cap a tmpfs's size (``--size``, bubblewrap 0.8 and later)."""
    try:
        done = subprocess.run(
            [bwrap, "--help"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--size" in done.stdout + done.stderr


def problem(within: Layout | None = None) -> str | None:
    """Why no sandbox can be made here, in a sentence; None if one can.

    It runs this interpreter in a sandbox built as a submission's is: a missing ``bwrap``, or one that
    cannot create namespaces (a container that forbids them, a kernel without user namespaces for an
    unprivileged user), fails here, before any submission runs.
    """
    bwrap = executable()
    if bwrap is None:
        named = os.environ.get(BWRAP_VARIABLE)
        return f"{named or 'bwrap'} is not installed" + (
            f" (${BWRAP_VARIABLE} names it)" if named else ""
        )
    within = layout(None) if within is None else within
    with tempfile.TemporaryDirectory(prefix="brrr-sandbox-probe-") as folder:
        probe = command(
            [sys.executable, "-S", "-c", "pass"], writable=Path(folder), within=within, bwrap=bwrap
        )
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{bwrap} did not run ({type(error).__name__}: {error})"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"{bwrap} cannot make a sandbox here ({said[:300]})"
    return None


def refusal(why: str) -> str:
    """The gradebook's message when no sandbox can be made: what is wrong, what to install, what the flag costs."""
    return (
        f"every submission runs in a bubblewrap sandbox, and {why}. Install the package `{PACKAGE}` "
        f"(Debian and Ubuntu: apt-get install {PACKAGE}), or, where namespaces are forbidden (some "
        "containers), allow them. To grade without a sandbox, knowing that a submission can then see and "
        "signal your processes and other submissions' graders, read your files and use the network, pass "
        "--no-sandbox: every feedback file and grades.csv will say so. No submission was graded."
    )
