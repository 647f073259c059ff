"""Notice a submission that changes files it must not: the environment, the course, other students'
work.

A submission's code runs as the instructor's user, so it can write any file the
instructor can: a module of torch in the virtual environment, a file of the
checkout, another student's notebook. The gradebook cannot stop that (a
container can: see the threat model in ``docs/THREATS.md``), but it notices
it, and says which submission did it.

Before the first submission and after each one, the gradebook takes a
:class:`Fingerprint` of the watched files: for every file and folder under the
watched roots, its inode, size, mode, modification time and status-change time
(ctime). The kernel sets the ctime on every write, ``chmod``, rename or link,
and no unprivileged process can set it back, so a change cannot be disguised by
restoring a file's content and modification time. Writes through a shared
memory map update it too.

The roots come in three kinds (:func:`watched_roots`):

``environment``
    Where the code of the grader and of the notebooks comes from: every folder
    on ``sys.path`` (the standard library and site-packages), the interpreter,
    the virtual environment's ``bin/``, and the user's site-packages where
    Python reads it. A change here can alter the grader of every later
    submission, so the gradebook stops.
``course``
    What grading reads from the instructor's checkout (:data:`CHECKOUT_READ`:
    ``brrr/``, the labs' sources, ``pyproject.toml``, git's hooks and config),
    the submissions folder and the output folder (less the ``work/`` folder
    where submissions run). The grader runs from a
    snapshot held in memory and submissions are read into memory when grading
    starts, so grading carries on; the culprit is marked ``tampered``.
``unread``
    The rest of the checkout (a book build beside the gradebook writes there,
    the traces page into ``notebooks/traces``: a fresh-clone test run charged
    an unsolved lab graded beside the build), and per-user files that no
    grading process reads (:data:`USER_CONFIGURATION`):
    every process the gradebook starts gets private IPython, Jupyter and
    matplotlib folders and no ``PYTHONSTARTUP``, and none starts a shell or
    ssh. A change here alters no grade, and the instructor's own first Jupyter
    session makes one (``~/.ipython/profile_default/startup/README``), so it
    is charged to no one and stops nothing: the gradebook reports it, for the
    instructor to look at.

The gradebook and every process it starts write no bytecode and keep their
caches in private folders, so grading itself changes nothing watched. For the
same reason the instructor's own caches (the folders ``TORCHINDUCTOR_CACHE_DIR``,
``TRITON_CACHE_DIR`` and ``BRRR_CACHE_DIR`` name, inside the checkout under
``make``) are not watched: no grading process reads them, and a book build
running beside the gradebook fills them. Anything
else that writes to an ``environment`` or ``course`` root while grading runs (an
instructor editing the checkout, another Python program) is charged as well: the
feedback lists the paths.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

ENVIRONMENT, COURSE, UNREAD = "environment", "course", "unread"

# Per-user files and folders that IPython, Jupyter, matplotlib, an interactive Python, shells and
# ssh read when they start. No grading process reads them (the private folders and variables of
# brrr.grading.gradebook.private_environment stand in for them), so they are UNREAD roots.
USER_CONFIGURATION = (
    ".ipython",
    ".jupyter",
    ".local/share/jupyter",
    ".config/matplotlib",
    ".config/ipython",
    ".matplotlib",
    ".pythonrc.py",
    ".bashrc",
    ".profile",
    ".bash_profile",
    ".zshrc",
    ".ssh",
)
# Written by any IPython or Jupyter session the instructor has open; nothing there is code (patterns
# as find's -path takes them).
USER_EXCLUDED = (
    ".local/share/jupyter/runtime",
    ".ipython/profile_*/history.sqlite*",
    ".ipython/profile_*/db",
    ".ipython/profile_*/log",
    ".ipython/profile_*/pid",
    ".ipython/profile_*/security",
)


# What a grading run reads from the instructor's checkout: brrr/ and the labs' sources when it
# starts (the grader and every submission's notebook come from that snapshot), the project file, and
# what git runs or obeys (its objects are data). The rest of the checkout (the book's pages,
# _build/, the traces a page writes into notebooks/, caches) is read by no grading process: an
# UNREAD root.
CHECKOUT_READ = ("brrr", "solutions", "labs", "pyproject.toml", ".git/hooks", ".git/config")


@dataclass(frozen=True)
class Root:
    path: Path
    kind: str  # ENVIRONMENT, COURSE or UNREAD


def watched_roots(
    *,
    checkout: Path | None,
    submissions: Path,
    out: Path,
    home: Path | None = None,
    left_out: tuple[Path, ...] | list[Path] = (),
) -> tuple[list[Root], list[Path]]:
    """(roots, excluded paths) for a grading run: see the module docstring.

    ``checkout``: the instructor's checkout, or None where brrr is installed
    from a wheel (its files are then in site-packages, an environment root).
    ``left_out``: folders no grading process reads and others fill, left out of
    the watch (the instructor's own compile and measurement caches, which a
    book build beside the gradebook fills: every grading process has private
    ones).
    """
    home = Path.home() if home is None else home
    checkout = checkout.resolve() if checkout else None
    read_from_checkout = {checkout / name for name in CHECKOUT_READ} if checkout else set()
    course = {submissions.resolve(), out.resolve()} | read_from_checkout
    course = {p for p in course if not _inside_any(p, course - {p})}
    installed = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    environment: set[Path] = set()
    for entry in sys.path:
        path = Path(entry).resolve() if entry else None
        if (
            path is None
            or not path.is_dir()
            or path == Path.cwd().resolve()
            and not _inside_any(path, installed)
        ):
            # the working folder `python -m` puts first: nothing is imported from it once grading
            # runs
            continue
        if _inside_any(path, course | ({checkout} if checkout else set())) and not _inside_any(
            path, installed
        ):
            continue  # the checkout's own folders (tests/ under pytest): watched with the checkout
        environment.add(path)
    environment.add(Path(sys.executable).resolve())
    if sys.prefix != sys.base_prefix:
        environment |= {Path(sys.prefix) / "bin", Path(sys.prefix) / "pyvenv.cfg"}
    unread = {home / name for name in USER_CONFIGURATION}
    # The user's site-packages, and Jupyter's data folder beside it: read where this Python has the
    # user's site on (the nbval runner is this Python, and the kernel's path is this process's),
    # else by no one.
    user_base = Path(site.getuserbase())
    (environment if site.ENABLE_USER_SITE else unread).update(
        {user_base / "lib", user_base / "share" / "jupyter"}
    )
    if checkout:
        unread.add(checkout)  # the rest of it: the book's pages and what building them writes
    environment = {p for p in environment if not _inside_any(p, environment - {p})}
    unread = {p for p in unread if not _inside_any(p, environment | course | (unread - {p}))}
    roots = (
        [Root(p, COURSE) for p in sorted(course)]
        + [Root(p, ENVIRONMENT) for p in sorted(environment)]
        + [Root(p, UNREAD) for p in sorted(unread)]
    )
    # A root inside another (a .venv or brrr/ in the checkout) is scanned once, as its own kind.
    excluded = [out.resolve() / "work"] + ([checkout / ".git"] if checkout else [])
    excluded += [home / name for name in USER_EXCLUDED]
    excluded += [p for p in environment if _inside_any(p, course | unread)]
    excluded += [p for p in course if _inside_any(p, unread)]
    excluded += [Path(p).resolve() for p in left_out]
    excluded += _packages_off_the_path(environment)
    return roots, excluded


def _packages_off_the_path(environment: set[Path]) -> list[Path]:
    """The base interpreter's site-packages when a virtual environment hides it (not on
    ``sys.path``).

    It sits inside the standard library's folder, which is watched, but nothing that grades or runs
    a notebook imports from it: every grading process is this environment's interpreter. On a
    machine with many packages installed globally it is half of what a fingerprint walks (51,000 of
    110,000 entries here): walking it after every submission bought nothing.
    """
    if sys.prefix == sys.base_prefix:
        return []
    on_path = {Path(entry).resolve() for entry in sys.path if entry}
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    hidden = {
        Path(sysconfig.get_path(kind, vars=base)).resolve() for kind in ("purelib", "platlib")
    }
    return sorted(p for p in hidden if p not in on_path and _inside_any(p, environment))


def _inside_any(path: Path, folders: set[Path]) -> bool:
    return any(path == folder or folder in path.parents for folder in folders)


@dataclass
class Fingerprint:
    """The state of every file and folder under some roots: path -> (inode, size, mode, mtime,
    ctime).

    Each root's walk is kept as find wrote it, and read into entries only where two walks of a root
    differ: walks equal byte for byte hold equal entries. The environment's tens of thousands of
    files are then compared unread: a fingerprint and its comparison took 0.5-0.7 CPU-seconds of the
    gradebook's process per submission (59,100 entries, the 2-core CI machine), and 0.06-0.09 so."""

    walks: dict[str, bytes | dict[str, tuple]] = field(
        default_factory=dict
    )  # root path -> find's output, or entries
    kinds: dict[str, str] = field(default_factory=dict)  # root path -> kind, to classify changes

    @classmethod
    def take(cls, roots: list[Root], excluded: list[Path] = ()) -> "Fingerprint":
        walks: dict[str, bytes | dict[str, tuple]] = {}
        for root in roots:
            if not os.path.lexists(root.path):
                walks[str(root.path)] = {str(root.path): ("missing",)}
                continue
            inside = [Path(p) for p in excluded if root.path in Path(p).parents]  # patterns allowed
            walks[str(root.path)] = _walk(root.path, inside)
        return cls(walks, {str(root.path): root.kind for root in roots})

    def changes(self, later: "Fingerprint") -> "Changes":
        """What differs in ``later``: paths added, removed or modified, each with its root's
        kind."""
        changed: set[str] = set()
        for root in self.walks.keys() | later.walks.keys():
            before, after = self.walks.get(root, {}), later.walks.get(root, {})
            if before == after:
                continue
            before, after = _entries(before), _entries(after)
            changed |= {
                path for path in before.keys() | after.keys() if before.get(path) != after.get(path)
            }
        return Changes(sorted(changed), {path: self._kind(path) for path in changed})

    def _kind(self, path: str) -> str:
        best = ""
        for root in self.kinds:
            if (path == root or path.startswith(root.rstrip(os.sep) + os.sep)) and len(root) > len(
                best
            ):
                best = root
        return self.kinds.get(best, ENVIRONMENT)


@dataclass
class Changes:
    paths: list[str]
    kinds: dict[str, str]

    def __bool__(self) -> bool:
        return bool(self.paths)

    @property
    def environment(self) -> list[str]:
        return [p for p in self.paths if self.kinds[p] == ENVIRONMENT]

    @property
    def charged(self) -> list[str]:
        """The changes a submission that ran meanwhile answers for: all but those to unread
        files."""
        return [p for p in self.paths if self.kinds[p] != UNREAD]

    @property
    def unread(self) -> list[str]:
        return [p for p in self.paths if self.kinds[p] == UNREAD]

    def describe(self, limit: int = 10) -> str:
        return f"{len(self.paths)} path(s) changed: {summarize(self.paths, limit)}"


def summarize(paths: list[str], limit: int = 10) -> str:
    """``paths`` in at most ``limit`` entries: the folder holding the most of them
    is folded into one entry (``folder/ (21 changed)``) until they fit, so a
    build's 21 figures cannot hide the one start-up file beside them."""
    counts = {path: 1 for path in paths}  # entry -> how many of paths it stands for
    folded: set[str] = set()
    while len(counts) > limit:
        children: dict[str, list[str]] = {}
        for entry in counts:
            children.setdefault(os.path.dirname(entry), []).append(entry)
        parent, entries = max(
            children.items(), key=lambda item: (len(item[1]) + (item[0] in counts), len(item[0]))
        )
        if len(entries) + (parent in counts) < 2:
            break
        total = counts.pop(parent, 0) + sum(counts.pop(entry) for entry in entries)
        counts[parent] = total
        folded.add(parent)
    shown = [
        f"{entry.rstrip(os.sep)}{os.sep} ({counts[entry]} changed)" if entry in folded else entry
        for entry in sorted(counts)
    ]
    more = f" and {len(shown) - limit} more" if len(shown) > limit else ""
    return ", ".join(shown[:limit]) + more


def _walk(root: Path, excluded: list[Path]) -> bytes | dict[str, tuple]:
    """Every entry under ``root`` (links not followed) as GNU find prints them, or as a dict where
    the walk was Python's; :func:`_entries` reads either as path -> (inode, size, permissions, type,
    mtime, ctime).

    GNU find does the walk where there is one (about ten times faster than
    Python); otherwise, or if find was stopped, Python does. Both read into the
    same tuples (:func:`_entries`), so fingerprints taken either way compare.
    """
    find = shutil.which("find")
    if find:
        prune: list[str] = []
        for path in excluded:
            prune += (["-o"] if prune else []) + ["-path", str(path)]
        command = [find, str(root)] + (["(", *prune, ")", "-prune", "-o"] if prune else [])
        command += ["-printf", r"%i %s %m %y %T@ %C@ %p\0"]
        done = subprocess.run(command, capture_output=True)
        if done.returncode >= 0 and (
            done.stdout or done.returncode == 0
        ):  # unreadable folders are skipped
            return done.stdout
    return _scan_in_python(root, excluded)


def _entries(walk: bytes | dict[str, tuple]) -> dict[str, tuple]:
    """A walk's entries: find's records read, or the Python walk's dict as it is."""
    if isinstance(walk, dict):
        return walk
    entries = {}
    for record in walk.split(b"\0"):
        if record:
            inode, size, mode, kind, mtime, ctime, path = record.split(b" ", 6)
            entries[os.fsdecode(path)] = _entry(
                int(inode),
                int(size),
                int(mode, 8),
                kind.decode(),
                _nanoseconds(mtime),
                _nanoseconds(ctime),
            )
    return entries


def _entry(inode: int, size: int, mode: int, kind: str, mtime: int, ctime: int) -> tuple:
    """What is compared. A folder's times and size change with every entry made or removed in it,
    also in an excluded one (an IPython history journal, say), and its entries are compared on their
    own: so a folder counts only by its inode and permissions."""
    if kind == "d":
        return (inode, mode, kind)
    return (inode, size, mode, kind, mtime, ctime)


def _nanoseconds(seconds: bytes) -> int:
    whole, _, fraction = seconds.partition(b".")
    return int(whole) * 10**9 + int((fraction + b"000000000")[:9])


_KINDS = (
    (stat.S_ISDIR, "d"),
    (stat.S_ISLNK, "l"),
    (stat.S_ISREG, "f"),
    (stat.S_ISFIFO, "p"),
    (stat.S_ISSOCK, "s"),
    (stat.S_ISCHR, "c"),
    (stat.S_ISBLK, "b"),
)


def _scan_in_python(root: Path, excluded: list[Path]) -> dict[str, tuple]:
    skip = [str(p) for p in excluded]
    entries, stack = {}, [str(root)]
    while stack:
        path = stack.pop()
        if any(fnmatch.fnmatchcase(path, pattern) for pattern in skip):
            continue
        try:
            status = os.lstat(path)
        except OSError:
            continue
        kind = next((letter for test, letter in _KINDS if test(status.st_mode)), "U")
        entries[path] = _entry(
            status.st_ino,
            status.st_size,
            stat.S_IMODE(status.st_mode),
            kind,
            status.st_mtime_ns,
            status.st_ctime_ns,
        )
        if kind == "d":
            try:
                stack += [os.path.join(path, name) for name in os.listdir(path)]
            except OSError:
                pass
    return entries
