"""A submission's processes in a bubblewrap sandbox: the ``bwrap`` command line, and whether one can
be made here.

The gradebook runs each submission's notebook (pytest, nbval, the Jupyter
kernel and whatever student code starts) under ``bwrap`` (Debian's
``bubblewrap``, the sandbox Flatpak uses), made by :func:`command`:

- new PID, IPC, network, UTS and cgroup namespaces: the notebook sees only its
  own processes in ``/proc`` (so it can neither find nor signal the grader, the
  gradebook or another submission) and has only a loopback network of its own;
- a new root holding only what runs Python, read-only, an allow-list: the system folders
  (:data:`SYSTEM`), the interpreter, its standard library and its site-packages
  (:func:`interpreter_folders`, :func:`layout`; never the folders on ``sys.path``, where
  ``python -m`` puts the course folder), less the instructor's installed ``brrr`` and checkout
  (masked by empty read-only folders), and the secrets of ``/etc`` (:data:`SECRETS`). A gradebook
  run as root leaves its sandbox root's uid (without any capability), which owns what root owns, so
  there every file and folder under :data:`SCANNED` that other users cannot read is masked too
  (:func:`unreadable_to_others`: a Slurm node's ``/etc/munge/munge.key``, a database's access
  rules): the notebook reads only what any user may. The notebook sees the student copy of ``brrr``
  the gradebook wrote into its work folder, and nothing else of the course;
- a private ``/tmp`` of at most :data:`TMP_BYTES`, a minimal ``/dev`` (with the GPU's device nodes
where
  there are some) and a ``/proc`` of its own;
- one writable folder, the submission's own work folder, and one socket, its
  own grader's;
- an environment of the variables :func:`environment` lists, and no other:
  none of the instructor's tokens or settings;
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
import site
import stat
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

BWRAP_VARIABLE = "BRRR_BWRAP"
PACKAGE = "bubblewrap"  # Debian's, and most distributions' name for it
# Folders every program needs, bound read-only where they exist (links, as on a merged-/usr system,
# stay links).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")
# Secrets in those system folders, masked by an empty file or folder: a gradebook run as root leaves
# the sandbox root's uid (without any capability), and root owns them.
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
# Folders scanned, for a gradebook run as root, for what other users cannot read (masked in the
# sandbox). /etc holds a machine's keys and passwords; the other system folders and the environment
# hold what packages installed, readable by all (scanning /usr and a virtual environment takes a
# second more per run).
SCANNED = ("/etc",)
GPU_DEVICES = ("/dev/nvidia*", "/dev/dri")
# The private /tmp's size. A tmpfs lives in memory that no process is charged with, so a notebook
# that filled it would make the out-of-memory killer take the largest processes (the grader's among
# them), not the notebook's. The caches torch and Triton write go to the work folder (the
# gradebook's environment), so an honest notebook's /tmp holds a few MiB of temporary files. Set
# where bwrap has --size (0.8 and later).
TMP_BYTES = 1 << 30
PROBE_TIMEOUT_S = 60


class Unavailable(RuntimeError):
    """No sandbox can be made here; the message is :func:`refusal`'s."""


@dataclass(frozen=True)
class Layout:
    """What a sandbox shows of this machine, beyond :data:`SYSTEM`: the same for every submission of
    a run.

    ``readable``: folders bound read-only (the interpreter, its prefixes and library folders).
    ``hidden``: folders inside those that are masked by an empty one (the instructor's brrr, the
    checkout). ``unreadable``: for a gradebook run as root, what other users cannot read under
    :data:`SCANNED`, masked: folders by an empty one, files by an empty file.
    """

    readable: tuple[Path, ...]
    hidden: tuple[Path, ...]
    unreadable: tuple[Path, ...] = ()


def executable() -> str | None:
    """The ``bwrap`` to run: ``$BRRR_BWRAP`` if set (whether or not it exists), else the one on the
    path."""
    named = os.environ.get(BWRAP_VARIABLE)
    if named:
        return named if os.access(named, os.X_OK) and os.path.isfile(named) else None
    return shutil.which("bwrap")


def interpreter_folders() -> list[Path]:
    """What runs this Python, and nothing else: its prefixes (a virtual environment and the Python
    it was made from), the interpreter's real folder, and its library folders (the standard library
    and site-packages, as ``sysconfig`` and ``site`` name them; the user's site-packages where
    Python reads it). Never the folders that happen to be on ``sys.path``: ``python -m`` puts the
    working folder there, a course folder holding every submission and every earlier output."""
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    found.add(os.path.dirname(os.path.realpath(sys.executable)))
    paths = sysconfig.get_paths()
    found.update(paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib"))
    found.update(getattr(site, "getsitepackages", list)())
    if site.ENABLE_USER_SITE and site.getusersitepackages() in sys.path:
        found.add(site.getusersitepackages())
    folders = {Path(folder).resolve() for folder in found if os.path.isdir(folder)}
    return sorted(folders - {Path("/")})  # a Python built for prefix / has its library folders


def layout(checkout: Path | None, folders: list[Path] | None = None) -> Layout:
    """The folders a sandbox shows read-only, and those masked inside them: an allow-list.

    Readable: ``folders`` (default :func:`interpreter_folders`), less those inside others. Hidden:
    the instructor's installed ``brrr`` in any of them (a wheel's site-packages) and the checkout
    where one of them holds it: the notebook imports the student copy in its work folder, less the
    lab's hidden modules, and finds no other. Nothing else of this machine is there: not the working
    folder, the course, the submissions, the output folders, another submission's work folder, the
    home folder."""
    checkout = checkout.resolve() if checkout else None
    found = {Path(f).resolve() for f in (interpreter_folders() if folders is None else folders)}
    readable = sorted(p for p in found if not _inside(p, found - {p}))
    hidden = {
        folder / name
        for folder in found
        for name in ("brrr", "brrr.py")
        if os.path.lexists(folder / name)
    }
    if checkout and _inside(checkout, set(readable)):
        hidden.add(checkout)
    unreadable = unreadable_to_others(SCANNED) if os.geteuid() == 0 else []
    return Layout(tuple(readable), tuple(sorted(hidden)), tuple(unreadable))


# The student's environment: these variables of the one the gradebook builds for its processes, and
# no other. An instructor's tokens, keys and settings stay out (a cell's error message carries what
# it read into the feedback). Each is a setting the gradebook makes (private folders, the grader's
# socket, the kernel's specs, what keeps grading from writing anything watched), or one of the
# machine's that changes what the student's code computes (the device, the GPUs a job was given, the
# thread counts).
ENVIRONMENT = (
    "HOME",  # a private one, in the work folder
    "TMPDIR",
    "LANG",
    "LANGUAGE",
    "TZ",
    "BRRR_GRADER",
    "JUPYTER_PATH",
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "BRRR_CACHE_DIR",
    "MPLCONFIGDIR",
    "IPYTHONDIR",
    "JUPYTER_CONFIG_DIR",
    "JUPYTER_DATA_DIR",
    "JUPYTER_RUNTIME_DIR",
    "XDG_CACHE_HOME",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED",
    "MPLBACKEND",
    "TORCHINDUCTOR_COMPILE_THREADS",
    "BRRR_DEVICE",
    "BRRR_KEEP_FREED_MEMORY",
    "BRRR_TRAFFIC_UNTESTED_OK",
    "TRITON_INTERPRET",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "LD_LIBRARY_PATH",  # where a machine keeps its GPU's libraries
)
ENVIRONMENT_PREFIXES = ("LC_",)  # the locale's categories
SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin")


def environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` less every variable not in :data:`ENVIRONMENT` (or a locale's ``LC_*``), with a
    ``PATH`` of the interpreter's folder and the system's: what the sandbox's processes start
    with."""
    kept = {
        name: value
        for name, value in env.items()
        if name in ENVIRONMENT or name.startswith(ENVIRONMENT_PREFIXES)
    }
    kept["PATH"] = os.pathsep.join((os.path.dirname(sys.executable), *SYSTEM_PATH))
    return kept


def unreadable_to_others(folders) -> list[Path]:
    """Every file under ``folders`` that other users cannot read, and every folder they cannot list
    or enter (not descended into), links left alone: what the sandbox masks for a gradebook run as
    root. Entries that vanish or cannot be read while scanning are skipped."""
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
    """``argv`` run in a sandbox (see the module docstring) where ``writable`` is the one folder it
    may write, its working folder, and ``sockets`` the only sockets of this machine it can reach."""
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

    It runs this interpreter in a sandbox built as a submission's is: a missing ``bwrap``, or one
    that cannot create namespaces (a container that forbids them, a kernel without user namespaces
    for an unprivileged user), fails here, before any submission runs.
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
    """The gradebook's message when no sandbox can be made: what is wrong, what to install, what the
    flag costs."""
    return (
        f"every submission runs in a bubblewrap sandbox, and {why}. Install the package "
        f"`{PACKAGE}` (Debian and Ubuntu: apt-get install {PACKAGE}), or, where namespaces are "
        "forbidden (some "
        "containers), allow them. To grade without a sandbox, knowing that a submission can then "
        "see and signal your processes and other submissions' graders, read your files and use the "
        "network, pass --no-sandbox: every feedback file and grades.csv will say so. No submission "
        "was graded."
    )
