"""Grade a folder of submitted lab notebooks: one CSV row per submission, one feedback file per student.

    python -m brrr.grading SUBMISSIONS_DIR --out OUT_DIR [--lab 02-fuse-it]

Every ``*.ipynb`` under ``SUBMISSIONS_DIR`` is one submission, named by its path
relative to the folder (``alice.ipynb`` -> ``alice``, ``bob/02-fuse-it.ipynb`` ->
``bob/02-fuse-it``). For each, in turn:

1. **Which lab.** ``--lab`` if given; else the notebook's ``metadata.brrr.lab``,
   or its file name, when that is one of :data:`brrr.labs.LABS`. Any other name
   is refused: the row says so and scores 0.
2. **What runs.** The lab as generated from ``solutions/`` when grading started,
   with the submission's answer cells spliced in (:mod:`brrr.grading.assemble`).
   Given cells and grader cells are the instructor's.
3. **Two processes.** A grader process (:mod:`brrr.grading.server`), started
   first, runs from the snapshot of ``brrr`` held in memory
   (:data:`brrr.grading.assemble.GRADER_BOOTSTRAP`) and holds the checks and
   the record. In a run of more than one submission it is forked, fresh, from
   the run's grader zygote (:mod:`brrr.grading.zygote`), which imported torch
   and every lab's checks once before any submission ran; where the zygote
   does not start or dies, a note says so and each grader starts on its own
   (:mod:`brrr.grading.forked`).
   Then nbval runs the notebook in its own Jupyter
   kernel, exactly as ``pytest --nbval-lax`` would, with a timeout per cell and
   one per notebook. The kernel gets a copy of ``brrr`` without the lab's
   hidden modules, starts without site hooks, on a path where no import finds
   the instructor's ``brrr`` (:func:`brrr.grading.assemble.kernel_path`), and
   reaches the grader through ``$BRRR_GRADER``. pytest, nbval, the kernel and
   whatever it starts run in a bubblewrap sandbox (:mod:`brrr.grading.sandbox`):
   their own PID, IPC and network namespaces, the environment read-only, the
   checkout out of sight, the work folder the only one writable, the grader's
   socket the only one in reach. Where no sandbox can be made the gradebook
   refuses to grade (exit status 4) unless ``--no-sandbox`` is given.
4. **Nothing left behind.** When the notebook ends, by itself, by timeout or by
   a crash, every process it started is killed: its tree, and any orphan that
   escaped it (the gradebook adopts orphans as a Linux child subreaper).
5. **Integrity.** The files grading depends on are compared with their state
   before the submission ran (:mod:`brrr.grading.integrity`): a change marks
   the submission ``tampered``, and a change to the Python environment stops
   grading (exit status 3). Every child process gets private caches and
   IPython, Jupyter and matplotlib folders, and writes no bytecode, so grading
   itself changes nothing watched and reads none of the instructor's per-user
   configuration: a change there is reported at the end, charged to no one.
6. **The record.** Only then is the grader process told to finish; it prints
   its results signed with a key only the gradebook and it know. The verdict
   is that, never a file or output the notebook could write. A grader process
   that died before (killed) makes the row ``grader-killed`` under
   ``--no-sandbox``, and ``grader-error`` in a sandbox, where the notebook
   cannot signal it and the out-of-memory killer takes the notebook's
   processes first.

Before any of that, the grading code (``brrr`` and the labs' solutions) is
compared with what graded ``OUT_DIR`` first (:mod:`brrr.grading.course`): a
change stops grading before it begins (exit status 4) unless
``--accept-grading-code`` is given. A submission marked ``tampered`` is named
at the end of the run, and the exit status is 5.

A check missing from the record (a deleted grader cell, a crash, an early exit)
is a failed check worth its points. The columns and the maximum come from the
lab's own check list for this machine's device class.

Output in ``OUT_DIR`` (relative paths are fine):

``grades.csv``
    ``submission, lab, status, <one column per check>, total, max, sandbox, seconds``
    (``sandbox``: ``bwrap``, or ``none`` under ``--no-sandbox``; ``seconds``: the
    submission's run, from its grader's start to its end). A check column is 1
    (passed) or 0 (failed or not run). ``status`` is ``ok``
    (every cell ran cleanly), ``failed`` (some cell failed), ``timeout``,
    ``crashed`` (the kernel died), ``unreadable`` (not a notebook), ``refused``
    (no known lab), ``tampered``, ``grader-killed``, ``not graded`` (grading
    stopped first) or ``grader-error`` (the grader could not run, or could not
    grade a check fairly: not the student's fault, and said so; grade it again).
``feedback/<submission>.md``
    For the student: each check with its message, the other errors in their
    notebook, and what to do about a timeout or a crash.
``work/<submission>/``
    The notebook that ran, the original, nbval's JUnit XML and its output.

``--shard K/N`` grades share K of N of the folder, and ``python -m brrr.grading
merge`` joins the shards' outputs (:mod:`brrr.grading.shards`,
:mod:`brrr.grading.merge`).

Grade timed labs one at a time (the default, ``--jobs 1``): a performance check
measures the machine, and a second notebook running beside it would slow both.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

from brrr import labs
from brrr.checks import processes
from brrr.device import device_class
from brrr.grading import assemble, course, forked, integrity, sandbox, server, shards

DEFAULT_CELL_TIMEOUT_S = 600
DEFAULT_NOTEBOOK_TIMEOUT_S = 1800
GRADER_START_TIMEOUT_S = 180
GRADER_FINISH_TIMEOUT_S = 60
KERNEL_NAME = "brrr-student"


@dataclass
class Submission:
    name: str
    path: Path
    lab: str = "unknown"
    status: str = "not graded"
    results: dict[str, dict] = field(
        default_factory=dict
    )  # check -> verdict from the grader process
    cell_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    note: str = ""
    data: bytes | None = (
        None  # the file as read when grading started; later edits on disk change nothing
    )
    tampered: list[str] = field(default_factory=list)  # watched paths that changed while it ran
    sandboxed: bool = (
        True  # its notebook ran in a bubblewrap sandbox (False only under --no-sandbox)
    )

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "__", self.name)


# ---------------------------------------------------------------- finding submissions and their lab


def find_submissions(folder: Path, only: Callable[[str], bool] | None = None) -> list[Submission]:
    """Every notebook under ``folder`` (those whose name ``only`` accepts), read into memory now: a
    submission that edits another's file on disk while it runs changes nothing that is graded."""
    found = []
    for name, path in shards.submission_paths(folder).items():
        if only is not None and not only(name):
            continue
        try:
            data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        except OSError:
            data = None
        found.append(Submission(name, path, data=data))
    return found


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
        f"This notebook is not one of this course's labs (metadata.brrr.lab = {str(claimed)[:40]!r}, "
        f"file {submission.path.name!r}, and its cells match no lab); the labs are "
        f"{', '.join(sorted(labs.LABS))}. It was not graded. Instructors: pass --lab to grade a "
        "folder of one lab."
    )
    return None


# ---------------------------------------------------------------- one submission


class _InFlight:
    """Processes the gradebook itself started and still needs; anything else it adopts is killed.

    Starting a process and recording it happen under one lock, and so does
    reaping, so a reap in one thread never kills a process another thread has
    just started (with ``--jobs`` above 1).
    """

    def __init__(self):
        self.pids: set[int] = set()
        self.lock = threading.RLock()

    def popen(self, *args, **kwargs) -> subprocess.Popen:
        with self.lock:
            process = subprocess.Popen(*args, **kwargs)
            self.pids.add(process.pid)
        return process

    def remove(self, pid: int) -> None:
        with self.lock:
            self.pids.discard(pid)

    def reap(self) -> list[int]:
        with self.lock:
            return processes.kill_orphans(set(self.pids))


IN_FLIGHT = _InFlight()


def _kernelspec(folder: Path, student_copy: Path) -> Path:
    """A Jupyter kernel that starts without site hooks, with ``student_copy`` its only brrr
    (:func:`brrr.grading.assemble.kernel_path`)."""
    path = assemble.kernel_path(student_copy, folder / "path-links")
    spec_dir = folder / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [
                    sys.executable,
                    "-S",
                    "-m",
                    "ipykernel_launcher",
                    "-f",
                    "{connection_file}",
                ],
                "display_name": "brrr student",
                "language": "python",
                "env": {"PYTHONPATH": ":".join(path), "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"},
            }
        )
    )
    return folder / "jupyter"


class _Grader:
    """The grader process of one submission, run from the snapshot in memory (no grader file on disk): forked
    by ``zygote`` (:mod:`brrr.grading.forked`) where there is one that still forks, else started anew."""

    def __init__(self, snapshot: assemble.Snapshot, lab: str, zygote: forked.Zygote | None = None):
        self.key = secrets.token_hex(32)
        self.private = Path(tempfile.mkdtemp(prefix="brrr-grader-"))
        self.socket = self.private / "grader.sock"
        self.log = self.private / "stderr.txt"
        with self.log.open("wb") as log:
            self.process = self._forked(zygote, lab, log.fileno()) or _bootstrap(
                ["--lab", lab, "--socket", str(self.socket)],
                self.private,
                _grader_environment(self.private),
                log,
            )
        code = (
            "" if self.forked else snapshot.grader_payload().decode()
        )  # a forked grader has its code
        try:
            self.process.stdin.write(code + self.key + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:  # it died before reading its key: not ready, and its log says why
            pass
        self.ready = _read_line(self.process.stdout, GRADER_START_TIMEOUT_S) == "ready"

    @property
    def forked(self) -> bool:
        """Forked by the run's zygote, so it holds the grader's code already (no payload on its input)."""
        return isinstance(self.process, forked.ForkedGrader)

    def _forked(
        self, zygote: forked.Zygote | None, lab: str, log: int
    ) -> forked.ForkedGrader | None:
        if zygote is None or zygote.gone:
            return None
        request = {"lab": lab, "socket": str(self.socket), "private": str(self.private)}
        request["env"] = _grader_environment(self.private)
        zygote.wait_started()  # not under IN_FLIGHT's lock: the other submissions' processes go on meanwhile
        try:
            with (
                IN_FLIGHT.lock
            ):  # recorded as the gradebook's: adopted if the zygote dies, it is not reaped
                process = zygote.fork(request, log)
                IN_FLIGHT.pids.add(process.pid)
        except forked.ZygoteGone:  # said once, by the zygote's side
            return None
        return process

    def killed(self) -> bool:
        """A signal ended it before it was told to finish: only the submission's processes (or the system,
        out of memory) send one. A grader that exits by itself, through a bug, is a grader error."""
        return self.process.poll() is not None and self.process.returncode < 0

    def finish(self) -> dict[str, dict] | None:
        """Close its input, read back its signed results, and stop it. None if they cannot be trusted."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        line = _read_line(self.process.stdout, GRADER_FINISH_TIMEOUT_S)
        self.stop()
        try:
            return server.verify(line or "", self.key.encode())["results"]
        except (ValueError, KeyError, TypeError):
            return None

    def error_text(self) -> str:
        self.stop()
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        IN_FLIGHT.remove(self.process.pid)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.private, ignore_errors=True)


# Caches and per-user state a process would otherwise share with the instructor and with other
# submissions: each process tree gets its own, under a private folder.
PRIVATE_FOLDERS = {
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "BRRR_CACHE_DIR": "brrr",
    "MPLCONFIGDIR": "matplotlib",
    "IPYTHONDIR": "ipython",
    "JUPYTER_CONFIG_DIR": "jupyter-config",
    "JUPYTER_DATA_DIR": "jupyter-data",
    "JUPYTER_RUNTIME_DIR": "jupyter-runtime",
    "XDG_CACHE_HOME": "cache",
}


# Of those, the caches: the gradebook's own (the instructor's) are never read by a grading process.
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "BRRR_CACHE_DIR")


def instructor_caches() -> list[Path]:
    """The cache folders this process's environment names, which grading never reads (see integrity)."""
    import os

    return [Path(os.environ[name]) for name in CACHE_VARIABLES if os.environ.get(name)]


def private_environment(folder: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment) with caches and per-user state under ``folder``, and no
    bytecode written: nothing a grading run does changes a file the integrity watch looks at."""
    import os

    env = dict(os.environ if base is None else base)
    env.pop(grader_env(), None)
    env.pop(
        "BRRR_RECORD_REFERENCE", None
    )  # a graded run records nothing into the checkout (gpu-check sets it)
    env.pop("PYTHONSTARTUP", None)  # a file of the instructor's that every IPython kernel would run
    for name in [name for name in env if name.startswith("PYTEST_")]:
        # the instructor's pytest settings (PYTEST_ADDOPTS, PYTEST_PLUGINS, ...) are not nbval's: a
        # --basetemp in PYTEST_ADDOPTS stopped every notebook's run, and every student was given "not run"
        env.pop(name)
    # Nor are the plugins installed beside it: nbval alone is loaded (``-p nbval``), not whatever else the
    # environment holds (pytest-randomly would reorder a notebook's cells; xdist and anyio cost 0.2
    # CPU-seconds a grading, for nothing).
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for variable, name in PRIVATE_FOLDERS.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        env[variable] = str(folder / name)
    for (
        name,
        data,
    ) in _MATPLOTLIB_FONT_LISTS.items():  # so matplotlib need not scan the fonts again (seconds)
        (folder / "matplotlib" / name).write_bytes(data)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("MPLBACKEND", "Agg")
    return env


def _font_lists() -> dict[str, bytes]:
    """matplotlib's font lists in the instructor's cache, read once, before any submission runs. Importing
    the font manager writes them first where none exist (a fresh home: CI, a new container), so that no
    grading process scans the fonts again (seconds each)."""
    try:
        import matplotlib
        import matplotlib.font_manager  # noqa: F401  (builds the font list where there is none)
    except ImportError:
        return {}
    return {
        path.name: path.read_bytes()
        for path in sorted(Path(matplotlib.get_cachedir()).glob("fontlist-*.json"))
    }


_MATPLOTLIB_FONT_LISTS = _font_lists()


def _grader_environment(private: Path) -> dict[str, str]:
    env = private_environment(private)
    env.pop(
        "PYTHONPATH", None
    )  # -I ignores it anyway; brrr comes from memory, the rest from the environment
    env["TRITON_ALWAYS_COMPILE"] = (
        "1"  # compile the checked source; never load a binary from a cache
    )
    return env


def _read_line(stream, timeout_s: float) -> str | None:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return box[0].strip() if box else None


def _student_environment(
    grader: _Grader, folder: Path, jupyter_path: Path, sandboxed: bool
) -> dict[str, str]:
    env = private_environment(folder / "private")
    env[grader_env()] = str(grader.socket)
    env["JUPYTER_PATH"] = str(jupyter_path)
    # torch.compile compiles in the student's process, not in a pool of worker processes. Inductor compiles
    # in-process while its pool is still starting and lets the pool go on starting (a torch import in each of
    # up to 32 workers): after the student's call has returned, while the grader times its side, charged to
    # the student (brrr.checks.fairness). A guard, from torch's source: not yet seen on a GPU.
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    if sandboxed:  # the instructor's home and temporary folder are not in the sandbox
        (folder / "private" / "home").mkdir(exist_ok=True)
        env["HOME"], env["TMPDIR"] = str(folder / "private" / "home"), "/tmp"
    return env


def grader_env() -> str:
    from brrr.grading.client import GRADER_ENV

    return GRADER_ENV


def run_one(
    submission: Submission,
    work: Path,
    snapshot: assemble.Snapshot,
    *,
    cell_timeout_s: float,
    notebook_timeout_s: float,
    default_lab: str | None = None,
    watch: "_Watch | None" = None,
    within: sandbox.Layout | None = None,
    zygote: forked.Zygote | None = None,
) -> Submission:
    """Grade one submission (see the module docstring) and fill in its row: prepare its folder, run its
    notebook beside its grader (in a sandbox showing ``within``; None: in none), then classify what came
    back. Its grader is forked by ``zygote`` where one is given and still forks (:mod:`brrr.grading.forked`)."""
    submission.sandboxed = within is not None
    prepared = _prepare(submission, work, snapshot, default_lab, watch)
    if prepared is None:
        return submission
    ran = _execute(
        submission, prepared, snapshot, cell_timeout_s, notebook_timeout_s, watch, within, zygote
    )
    if ran is not None:
        _classify(submission, prepared, ran, cell_timeout_s, notebook_timeout_s)
    return submission


@dataclass
class _Prepared:
    """A submission's folder, ready to run: the spliced notebook, its kernel and the notes so far."""

    folder: Path
    lab: str
    notebook: Path
    jupyter_path: Path
    notes: list[str]

    @property
    def junit(self) -> Path:
        return self.folder / "junit.xml"

    @property
    def output(self) -> Path:
        return self.folder / "output.txt"


@dataclass
class _Ran:
    """What one run left: pytest's exit code (None: stopped at the notebook's time limit), whether the
    kernel died, whether the grader was killed, and the grader's verified results (None: unreadable)."""

    returncode: int | None
    kernel_died: bool
    grader_killed: bool
    results: dict | None


def _prepare(
    submission: Submission,
    work: Path,
    snapshot: assemble.Snapshot,
    default_lab: str | None,
    watch: "_Watch | None",
) -> _Prepared | None:
    """The submission's fresh folder with its notebook spliced into the lab, the student package and the
    kernel; None, with the row filled in, where nothing can run (no lab, not a notebook, grading stopped)."""
    folder = work / submission.slug
    assemble.make_writable(folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if submission.data is not None:
        (folder / "original.ipynb").write_bytes(submission.data)
    submitted = read_notebook(submission.data)
    lab = choose_lab(submission, submitted, default_lab, snapshot)
    if lab is None:
        submission.lab, submission.status = "unknown", "refused"
        return None
    submission.lab = lab
    if submitted is None:
        submission.status = "unreadable"
        submission.note = (
            "The file is not a readable notebook (invalid JSON). Nothing could be run."
        )
        return None
    if watch is not None and watch.stopped:
        submission.status = "not graded"
        submission.note = f"Not graded: grading stopped before this submission. {watch.stopped}"
        return None
    spliced = assemble.splice(snapshot.labs[lab], snapshot.answers[lab], submitted)
    notebook = folder / "submission.ipynb"
    nbformat.write(spliced.notebook, str(notebook))
    notes = []
    if spliced.answers_missing:
        notes.append(
            f"Your notebook has no answer cell for {', '.join(spliced.answers_missing)}: the lab's stub ran there."
        )
    if spliced.ignored_edits:
        notes.append(
            f"{spliced.ignored_edits} cell(s) you changed or added outside the answer cells were not "
            "run: only the answer cells come from your notebook. Keep all your code in them."
        )
    hidden = tuple(getattr(labs.module(lab), "HIDDEN_MODULES", ()))
    student_path = snapshot.write_package(folder / "student", hidden=hidden)
    (folder / "pytest.ini").write_text("[pytest]\n")  # keep the repository's pytest settings out
    return _Prepared(folder, lab, notebook, _kernelspec(folder, student_path), notes)


def _execute(
    submission: Submission,
    prepared: _Prepared,
    snapshot: assemble.Snapshot,
    cell_timeout_s: float,
    notebook_timeout_s: float,
    watch: "_Watch | None",
    within: sandbox.Layout | None,
    zygote: forked.Zygote | None = None,
) -> _Ran | None:
    """Start the grader, run the notebook under pytest and nbval beside it (through the reaper, in a
    sandbox where ``within`` is given), kill whatever the notebook left, and read the grader's signed
    results back. None, with the row filled in, if the grader did not start."""
    folder = prepared.folder
    start = time.monotonic()
    if watch is not None:
        watch.started(submission)
    grader = _Grader(snapshot, prepared.lab, zygote)
    try:
        if not grader.ready:
            submission.status = "grader-error"
            submission.note = (
                "The grader process did not start, so nothing was graded (not your fault). "
                f"Its error: {grader.error_text()}"
            )
            return None
        pytest_nbval = [
            "-m",
            "pytest",
            "-c",
            str(folder / "pytest.ini"),
            "--rootdir",
            str(folder),
            "-p",
            "nbval",
        ]
        pytest_nbval += [
            "-p",
            "no:cacheprovider",
            "-q",
            "--nbval-lax",
            f"--nbval-kernel-name={KERNEL_NAME}",
        ]
        pytest_nbval += [f"--nbval-cell-timeout={cell_timeout_s:g}", f"--junitxml={prepared.junit}"]
        command = [
            sys.executable,
            "-c",
            processes.REAPER,
            sys.executable,
            *pytest_nbval,
            str(prepared.notebook),
        ]
        if within is not None:
            command = sandbox.command(
                command, writable=folder, sockets=(grader.socket,), within=within
            )
        with prepared.output.open("w") as sink:
            process = IN_FLIGHT.popen(
                command,
                cwd=folder,
                env=_student_environment(grader, folder, prepared.jupyter_path, within is not None),
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            returncode, kernel_died = processes._wait(process, notebook_timeout_s)
            processes._kill_tree(process)  # whatever the notebook started dies with it
            IN_FLIGHT.remove(process.pid)
            IN_FLIGHT.reap()  # and whatever escaped even the reaper
        killed = grader.killed()
        results = None if killed else grader.finish()
    finally:
        grader.remove()
        if watch is not None:
            watch.finished(submission)
    submission.seconds = time.monotonic() - start
    return _Ran(returncode, kernel_died, killed, results)


def _grader_killed(submission: Submission) -> None:
    """The row of a submission whose grader a signal ended. Without a sandbox the notebook's processes could
    send it, and the row is theirs (``grader-killed``, 0). In one they can neither see nor signal the grader,
    and the out-of-memory killer takes them first (``oom_score_adj`` 1000, :mod:`brrr.checks.reaper`): the
    signal came from outside the submission, a grader error."""
    if submission.sandboxed:
        submission.status = "grader-error"
        submission.note = (
            "The grader process of this submission was killed while its notebook ran, by something outside "
            "it: a sandboxed notebook can neither see nor signal its grader, and when memory runs out its own "
            "processes are killed first. Nothing was graded (not your fault). Instructors: grade it again "
            "(alone, if memory ran out)."
        )
        return
    submission.status = "grader-killed"
    submission.note = (
        "The grader process of this submission was killed while its notebook ran. Only the "
        "notebook's own processes (or the system running out of memory) could do that, so "
        "every check scores 0. Instructors: if memory ran out, grade it again alone."
    )


KERNEL_DIED = (
    "The notebook's kernel died (a segmentation fault, an abort, or running out of memory)"
)


def _classify(
    submission: Submission,
    prepared: _Prepared,
    ran: _Ran,
    cell_timeout_s: float,
    notebook_timeout_s: float,
) -> None:
    """The row's status, results, cell errors and notes, from what the run left."""
    if ran.grader_killed:
        _grader_killed(submission)
        return
    if ran.results is None:
        submission.status = "grader-error"
        submission.note = (
            "The grader's record could not be read back, so nothing was graded (not your fault)."
        )
        return
    notes = prepared.notes
    submission.results = ran.results
    submission.cell_errors = read_junit(prepared.junit, prepared.notebook)
    text = prepared.output.read_text(errors="replace")
    if ran.kernel_died:
        submission.status = "crashed"
        notes.append(
            f"{KERNEL_DIED}, and grading stopped there. Checks after that point did not run."
        )
    elif ran.returncode is None:
        submission.status = "timeout"
        notes.append(
            f"The notebook did not finish within {notebook_timeout_s:g} s and was stopped. Checks "
            "after that point did not run."
        )
    elif "Kernel dead" in text or "Kernel died" in text or "kernel died" in text.lower():
        submission.status = "crashed"
        notes.append(f"{KERNEL_DIED}. Checks after that point did not run.")
    elif ran.returncode == 0:
        submission.status = "ok"
    else:
        submission.status = "failed"
    if any("Timeout of" in error for error in submission.cell_errors):
        notes.append(
            f"A cell ran longer than the {cell_timeout_s:g} s allowed per cell and was interrupted. "
            "After a timeout nbval skips the rest of the notebook, so the checks after that cell did "
            "not run."
        )
    if faults := grader_faults(submission):
        submission.status = "grader-error"
        notes.insert(
            0,
            f"The grader could not grade {', '.join(faults)} fairly, so it scores 0 here (not your fault: see "
            "its message below). Instructors: grade this submission again, on a quieter machine.",
        )
    escaped = re.findall(r"brrr-reaper: killed (\d+) process", text)
    if escaped and int(escaped[-1]):
        notes.append(
            f"Your notebook left {int(escaped[-1])} process(es) running after it ended, outside its own "
            "process tree; the gradebook killed them."
        )
    submission.note = " ".join(notes)


def grader_faults(submission: Submission) -> list[str]:
    """The checks the grader itself failed (``grader_fault`` in its record: it could not measure fairly, or
    raised): neither passed nor the student's failure."""
    return [check for check, record in submission.results.items() if record.get("grader_fault")]


class _Watch:
    """The integrity watch of a grading run (:mod:`brrr.grading.integrity`): who changed what.

    After each submission the watched files are fingerprinted again and compared
    with the previous fingerprint. Whatever changed is charged to the
    submissions that ran in between (one, with ``--jobs 1``), except a change
    to files no grading process reads: that is kept for :meth:`unread_report`.
    A change to the environment stops the run: no later grade could be trusted.
    """

    def __init__(self, roots: list[integrity.Root], excluded: list[Path]):
        self.roots, self.excluded = roots, excluded
        self.lock = threading.Lock()
        self.last = self.fingerprint()
        self.running: set[int] = set()
        self.suspects: dict[int, Submission] = {}
        self.stopped = ""  # why grading stopped, once it has
        self.unread: list[
            tuple[list[str], list[str]]
        ] = []  # (unread paths that changed, who ran meanwhile)

    def fingerprint(self) -> integrity.Fingerprint:
        with IN_FLIGHT.lock:  # no reap in another thread may kill the walk's child process
            return integrity.Fingerprint.take(self.roots, self.excluded)

    def started(self, submission: Submission) -> None:
        with self.lock:
            self.running.add(id(submission))
            self.suspects[id(submission)] = submission

    def finished(self, submission: Submission) -> None:
        with self.lock:
            self.running.discard(id(submission))
            now = self.fingerprint()
            changes = self.last.changes(now)
            suspects = list(self.suspects.values())
            self.last = now
            self.suspects = {key: s for key, s in self.suspects.items() if key in self.running}
            if changes.unread:
                self.unread.append((changes.unread, [s.name for s in suspects]))
            if not changes.charged:
                return
            for suspect in suspects:
                suspect.tampered = changes.charged
            if changes.environment and not self.stopped:
                names = ", ".join(s.name for s in suspects)
                self.stopped = (
                    f"While {names} ran, files of the Python environment that grades changed "
                    f"({integrity.Changes(changes.environment, changes.kinds).describe(5)}). Restore "
                    "the environment (reinstall it), then grade the remaining submissions again."
                )

    def unread_report(self, limit: int = 10) -> str:
        """For the instructor: per-user files that changed while grading ran and that no grading process
        reads (a first Jupyter session writes some), with the submissions that ran meanwhile. '' if none."""
        parts = []
        for paths, names in self.unread:
            parts.append(f"{integrity.summarize(paths, limit)} (while {', '.join(names)} ran)")
        if not parts:
            return ""
        return (
            f"changed while grading, read by no grading process: {'; '.join(parts)}. No grade depends on "
            "these files and no submission was charged; if you did not make the change, look at it."
        )


def tampered_note(submission: Submission, alone: bool) -> str:
    who = "Your notebook" if alone else "Your notebook, or one graded at the same time,"
    return (
        f"{who} changed files outside its own work folder while it ran: "
        f"{integrity.summarize(submission.tampered)}. A submission may not "
        "write to the course, the Python environment or other students' files, so every check scores 0."
    )


def read_junit(path: Path, notebook: Path | None = None) -> list[str]:
    """'The cell that starts `h = x * s`: NameError: name 'x' is not defined' for each failing cell in
    nbval's JUnit report, the cell named by its first line in ``notebook`` (the notebook that ran), as the
    student sees it; 'Cell 7' (nbval's count of code cells, which no student sees) only where it cannot be.

    Cells that failed a grader check (an AssertionError) are left out: the check's
    own message reports those.
    """
    if not path.exists():
        return []
    try:
        tree = ElementTree.parse(path)
    except ElementTree.ParseError:
        return []
    names = cell_names(notebook)
    errors = []
    for case in tree.iter("testcase"):
        for problem in list(case.findall("failure")) + list(case.findall("error")):
            text = _ANSI.sub("", (problem.get("message") or "") + "\n" + (problem.text or ""))
            if re.search(r"^AssertionError\b", text, flags=re.M):
                continue
            name = case.get("name", "?")
            line = _last_error_line(text)
            line = line.removeprefix(f"{name}: ") if line.startswith(f"{name}: ") else line
            errors.append(f"{names.get(name, name)}: {line}")
    return errors


def cell_names(notebook: Path | None) -> dict[str, str]:
    """nbval's name of each code cell ('Cell 7': its count of code cells, from 0) -> 'The cell that starts
    `...`', its first line that is not blank or a comment (the first line, where all are)."""
    if notebook is None or not notebook.exists():
        return {}
    try:
        cells = [
            cell for cell in nbformat.read(notebook, as_version=4).cells if cell.cell_type == "code"
        ]
    except Exception:  # noqa: BLE001 - a notebook that cannot be read leaves nbval's names
        return {}
    names = {}
    for number, cell in enumerate(cells):
        lines = [line.strip() for line in cell.source.splitlines() if line.strip()]
        code = [line for line in lines if not line.startswith("#")] or lines
        first = code[0] if code else ""
        first = first if len(first) <= 80 else first[:77] + "..."
        names[f"Cell {number}"] = (
            f"The cell that starts `{first}`" if first else f"Empty cell {number}"
        )
    return names


# nbval colours its messages; JUnit XML spells the escape character as '#x1B'.
_ANSI = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*m")


def _last_error_line(text: str) -> str:
    """The most telling line of an nbval failure: a timeout, or the exception at the end of the traceback."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "Timeout of" in line or "Kernel dead" in line:
            return line[:300]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", line):
            return line[:300]
    return (lines[-1] if lines else "failed")[:300]


# ---------------------------------------------------------------- the report


def lab_checks(lab: str) -> list[str]:
    """The checks ``lab`` grades on this machine's device class: its columns, and its maximum."""
    if lab not in labs.LABS:
        return []
    return list(labs.checks(lab, device_class()))


def columns(
    submissions: list[Submission], checks_of: Callable[[str], list[str]] = lab_checks
) -> list[tuple[str, str]]:
    """(lab, check) pairs in column order, from each lab's own check list (``checks_of``: this machine's)."""
    return [
        (lab, check)
        for lab in sorted({s.lab for s in submissions if s.lab in labs.LABS})
        for check in checks_of(lab)
    ]


def score(submission: Submission, lab: str, check: str) -> str:
    if submission.lab != lab:
        return ""
    record = submission.results.get(check)
    return "1" if record is not None and record.get("passed") is True else "0"


def write_csv(
    submissions: list[Submission], path: Path, checks_of: Callable[[str], list[str]] = lab_checks
) -> None:
    """grades.csv. ``checks_of``: each lab's checks, this machine's unless given (a merge of shards graded
    elsewhere gives theirs). ``seconds``, last: the submission's run, its grader's start to its end."""
    cols = columns(submissions, checks_of)
    single_lab = len({lab for lab, _ in cols}) <= 1
    header = ["submission", "lab", "status"] + [
        c if single_lab else f"{lab}:{c}" for lab, c in cols
    ]
    header += ["total", "max", "sandbox", "seconds"]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for s in submissions:
            scores = [score(s, lab, check) for lab, check in cols]
            total, most = (
                sum(v == "1" for v in scores),
                len(checks_of(s.lab) if s.lab in labs.LABS else []),
            )
            sandboxed = "bwrap" if s.sandboxed else "none"
            writer.writerow(
                [s.name, s.lab, s.status] + scores + [total, most, sandboxed, f"{s.seconds:.1f}"]
            )


UNSANDBOXED = (
    "**Graded without a sandbox** (`--no-sandbox`): this notebook ran as the instructor's user, beside the "
    "grader, with the network and the instructor's files in reach."
)


def feedback(submission: Submission, checks: list[str]) -> str:
    passed = sum(1 for c in checks if submission.results.get(c, {}).get("passed"))
    device = next((r.get("device") for r in submission.results.values() if r.get("device")), None)
    lines = [
        f"# Feedback: {submission.name}",
        "",
        f"Lab `{submission.lab}`. Score: **{passed} of {len(checks)}** checks passed. "
        f"Status: `{submission.status}`." + (f" Graded on {device}." if device else ""),
        "",
    ]
    if not submission.sandboxed:
        lines += [UNSANDBOXED, ""]
    if submission.note:
        lines += [submission.note, ""]
    if checks:
        lines += ["| check | result |", "|---|---|"]
        for check in checks:
            record = submission.results.get(check)
            if record is None:
                result = "**not run** (0)"
            elif record.get("grader_fault"):
                result = "**grader error** (0, not your fault)"
            else:
                result = "passed" if record.get("passed") else "**failed**"
            lines.append(f"| {check} | {result} |")
        lines.append("")
    for check in checks:
        record = submission.results.get(check)
        if record is None:
            lines += [
                f"## {check}: not run, scored 0",
                "",
                "The grader never received this check: its grader cell did not run, or the notebook "
                "stopped (an error that left a name undefined, a timeout, a crash, an exit) before it. "
                "Run the notebook from the top in a fresh kernel to see why.",
                "",
            ]
        elif not record.get("passed"):
            title = "grader error, not your fault" if record.get("grader_fault") else "failed"
            lines += [
                f"## {check}: {title}",
                "",
                "```text",
                record.get("message", "").rstrip(),
                "```",
                "",
            ]
    others = [e for e in submission.cell_errors if "AssertionError" not in e]
    if others:
        lines += ["## Other errors in your notebook", ""]
        lines += [f"- {error}" for error in others]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


class CodeChanged(RuntimeError):
    """The grading code differs from what graded this output folder first (:mod:`brrr.grading.course`)."""


def grade(
    folder: Path,
    out: Path,
    *,
    cell_timeout_s: float = DEFAULT_CELL_TIMEOUT_S,
    notebook_timeout_s: float = DEFAULT_NOTEBOOK_TIMEOUT_S,
    lab: str | None = None,
    jobs: int = 1,
    sandboxed: bool = True,
    accept_grading_code: bool = False,
    only: Callable[[str], bool] | None = None,
) -> list[Submission]:
    """Grade every submission in ``folder`` (whose name ``only`` accepts: a shard's share); write grades.csv
    and feedback/ into ``out``.

    Each notebook runs in a bubblewrap sandbox (:mod:`brrr.grading.sandbox`); where none can be made,
    :class:`brrr.grading.sandbox.Unavailable` is raised before anything runs, unless ``sandboxed`` is
    False (``--no-sandbox``). Grading code that changed since ``out``'s first run raises
    :class:`CodeChanged` before anything runs, unless ``accept_grading_code`` (:mod:`brrr.grading.course`)."""
    if lab is not None:
        labs.module(lab)  # an unknown --lab is refused before anything runs
    within = sandbox.layout(assemble.CHECKOUT) if sandboxed else None
    if within is not None and (why := sandbox.problem(within)) is not None:
        raise sandbox.Unavailable(sandbox.refusal(why))
    for name in labs.LABS:
        labs.lab(
            name
        )  # every lab imported now, its checks too: none is read from disk once student code runs
    folder, out = Path(folder).resolve(), Path(out).resolve()
    snapshot = assemble.Snapshot()
    processes.become_subreaper()
    submissions = find_submissions(folder, only)
    out.mkdir(parents=True, exist_ok=True)
    if (
        refused := course.check(out, snapshot.graded_files(), accept=accept_grading_code)
    ) is not None:
        raise CodeChanged(refused)
    work = out / "work"
    work.mkdir(exist_ok=True)
    for (
        cache
    ) in instructor_caches():  # made now, so a build filling them later adds no folder to the watch
        cache.mkdir(parents=True, exist_ok=True)
    roots, excluded = integrity.watched_roots(
        checkout=assemble.CHECKOUT, submissions=folder, out=out, left_out=instructor_caches()
    )
    was_writing_bytecode, was_dumpable = sys.dont_write_bytecode, processes.is_dumpable()
    sys.dont_write_bytecode = (
        True  # a lazy import here must not add files to the watched environment
    )
    processes.set_dumpable(False)  # the signing keys and the grader's pipes are in this process
    # One submission needs one grader, which starts on its own sooner than a zygote and its fork (0.3 CPU-s).
    zygote = start_zygote(snapshot) if len(submissions) > 1 else None
    try:
        watch = _Watch(roots, excluded)
        limits = dict(
            cell_timeout_s=cell_timeout_s,
            notebook_timeout_s=notebook_timeout_s,
            default_lab=lab,
            within=within,
        )

        def one(submission: Submission) -> Submission:
            return _announced(
                run_one(submission, work, snapshot, watch=watch, zygote=zygote, **limits)
            )

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            submissions = list(pool.map(one, submissions))
        IN_FLIGHT.reap()
    finally:
        if zygote is not None:
            zygote.close()
            IN_FLIGHT.remove(zygote.process.pid)
        sys.dont_write_bytecode = was_writing_bytecode
        if was_dumpable:
            processes.set_dumpable(True)
    _report(submissions, watch, out, alone=jobs <= 1)
    return submissions


def start_zygote(snapshot: assemble.Snapshot) -> forked.Zygote:
    """The grader zygote of this run (:mod:`brrr.grading.zygote`), started as a grader is. It is not waited
    for here: its imports run while the first submission is prepared, and the first fork waits until it is
    ready (:class:`brrr.grading.forked.Zygote`); where it does not start, a note says so, and each grader
    starts on its own."""
    private = Path(tempfile.mkdtemp(prefix="brrr-zygote-"))
    log = private / "stderr.txt"
    with log.open("wb") as sink:
        environment = {**_grader_environment(private), **forked.ZYGOTE_ENVIRONMENT}
        process = _bootstrap(["--zygote", "--socket", "zygote.sock"], private, environment, sink)
    try:
        process.stdin.write(snapshot.grader_payload().decode())
        process.stdin.flush()
    except BrokenPipeError:  # it died first: its log says why, at the first fork
        pass
    return forked.Zygote(process, private / "zygote.sock", private, log, GRADER_START_TIMEOUT_S)


def _bootstrap(arguments: list[str], private: Path, environment: dict, stderr) -> subprocess.Popen:
    """A process running :data:`brrr.grading.assemble.GRADER_BOOTSTRAP` with ``arguments`` (a grader's or the
    zygote's), in ``private`` with ``environment``, in a session of its own, its standard input and output
    piped (its code arrives on the input), recorded in :data:`IN_FLIGHT`."""
    return IN_FLIGHT.popen(
        [sys.executable, "-I", "-B", "-c", assemble.GRADER_BOOTSTRAP, *arguments],
        cwd=private,
        env=environment,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,
    )


def _announced(submission: Submission) -> Submission:
    """``submission``, once its one line is printed: name, status, checks passed, seconds."""
    passed = sum(1 for r in submission.results.values() if r.get("passed") is True)
    print(
        f"{submission.name}: {submission.status}, {passed} of {len(lab_checks(submission.lab))} "
        f"check(s) passed ({submission.seconds:.0f} s)",
        flush=True,
    )
    return submission


def _report(submissions: list[Submission], watch: _Watch, out: Path, *, alone: bool) -> None:
    """Charge tampering to its submissions, tell the instructor what the watch saw, and write grades.csv and
    one feedback file per submission."""
    for submission in submissions:
        if submission.tampered:
            submission.note = " ".join(
                filter(None, [tampered_note(submission, alone=alone), submission.note])
            )
            submission.status, submission.results = "tampered", {}
    if watch.stopped:
        print(f"grading stopped: {watch.stopped}", file=sys.stderr, flush=True)
    if report := watch.unread_report():
        print(f"note: {report}", file=sys.stderr, flush=True)
    write_csv(submissions, _fresh_file(out / "grades.csv"))
    feedback_folder = _fresh_folder(out / "feedback")
    for submission in submissions:
        _fresh_file(feedback_folder / f"{submission.slug}.md").write_text(
            feedback(submission, lab_checks(submission.lab)), encoding="utf-8"
        )


def _fresh_file(path: Path) -> Path:
    """``path``, with whatever stood there removed: a link planted there must not redirect the write."""
    if path.is_symlink() or path.exists():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return path


def _fresh_folder(path: Path) -> Path:
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    path.mkdir(exist_ok=True)
    return path


def grader_setup_problem() -> str | None:
    """What keeps this Python from grading anything, or None: checked before any submission runs.

    A missing grader dependency (pytest, nbval, ipykernel, nbformat) or a Jupyter kernel that will not
    start is the grader's fault. Found later, it would read as every student's failure ("the grader cell
    was deleted"), so ``main`` stops first, exits with status 4 and writes no grades.
    """
    import importlib

    missing = []
    for name in ("pytest", "nbval", "ipykernel", "nbformat", "jupyter_client"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        return (
            f"the gradebook cannot import {', '.join(missing)} in {sys.executable}. "
            "Install the grading extras: pip install 'brrr[grade]'. No submission was graded."
        )
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory(prefix="brrr-kernel-check-") as folder:
        folder = Path(folder)
        specs = KernelSpecManager(
            kernel_dirs=[str(_kernelspec(folder, folder / "student") / "kernels")]
        )
        manager = KernelManager(
            kernel_name=KERNEL_NAME,
            kernel_spec_manager=specs,
            connection_file=str(folder / "connection.json"),
        )
        client = None
        try:
            manager.start_kernel(
                env=private_environment(folder / "private")
            )  # as a student's kernel starts
            client = manager.client()
            client.start_channels()
            client.wait_for_ready(timeout=60)
        except Exception as error:  # any failure to start is the grader's, not a student's
            return (
                f"a Jupyter kernel does not start in {sys.executable} ({type(error).__name__}: {error}). "
                "Reinstall the grading extras: pip install 'brrr[grade]'. No submission was graded."
            )
        finally:
            if client is not None:
                client.stop_channels()
            if manager.has_kernel:
                manager.shutdown_kernel(now=True)
    return None


def command_line() -> argparse.ArgumentParser:
    """The gradebook's options (``python -m brrr.grading --help``)."""
    parser = argparse.ArgumentParser(
        prog="python -m brrr.grading", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "submissions", type=Path, help="folder of submitted .ipynb files (searched recursively)"
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for grades.csv, feedback/ and work/"
    )
    parser.add_argument(
        "--cell-timeout", type=float, default=DEFAULT_CELL_TIMEOUT_S, help="seconds per cell"
    )
    parser.add_argument(
        "--notebook-timeout",
        type=float,
        default=DEFAULT_NOTEBOOK_TIMEOUT_S,
        help="seconds per notebook, kernel start included",
    )
    parser.add_argument(
        "--lab", help=f"grade every notebook as this lab ({', '.join(sorted(labs.LABS))})"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="notebooks graded at once (keep 1 for timed labs)"
    )
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run notebooks without the bubblewrap sandbox (where bwrap cannot run); feedback and grades.csv say so",
    )
    parser.add_argument(
        course.FLAG,
        dest="accept_grading_code",
        action="store_true",
        help="grade with grading code that changed since this --out folder's first run, and record it",
    )
    parser.add_argument(
        "--shard",
        type=shards.parse,
        help="K/N: grade only share K of N, by submission name (brrr.grading.shards)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"{args.submissions} is not a folder")
    if args.lab is not None and args.lab not in labs.LABS:
        parser.error(f"unknown lab {args.lab!r}; the labs are {', '.join(sorted(labs.LABS))}")
    if (problem := setup_problem(args.no_sandbox)) is not None:
        print(f"grading stopped before it began: {problem}", file=sys.stderr)
        return 4
    try:
        shard = shards.Claim.take(args) if args.shard else None
    except shards.ShardError as error:
        parser.error(str(error))
    if args.no_sandbox:
        print(
            "note: --no-sandbox: notebooks run without a sandbox, as your user",
            file=sys.stderr,
            flush=True,
        )
    try:
        submissions = grade(
            args.submissions,
            args.out,
            cell_timeout_s=args.cell_timeout,
            notebook_timeout_s=args.notebook_timeout,
            lab=args.lab,
            jobs=args.jobs,
            sandboxed=not args.no_sandbox,
            accept_grading_code=args.accept_grading_code,
            only=shard.owns if shard else None,
        )
    except (sandbox.Unavailable, CodeChanged) as refused:
        print(f"grading stopped before it began: {refused}", file=sys.stderr)
        return 4
    if shard:
        shard.finish(submissions)
    print(
        f"graded {len(submissions)} submission(s): {args.out / 'grades.csv'}, feedback in {args.out / 'feedback'}"
    )
    if args.no_sandbox:
        print(
            "note: graded without a sandbox (--no-sandbox): grades.csv and every feedback file say so"
        )
    return exit_status(submissions, args.out)


def setup_problem(no_sandbox: bool) -> str | None:
    """Why grading cannot begin here (no sandbox can be made, unless ``no_sandbox``; the grader's set-up
    fails), in a sentence; None if it can."""
    if not no_sandbox and (why := sandbox.problem(sandbox.layout(assemble.CHECKOUT))) is not None:
        return sandbox.refusal(why)
    return grader_setup_problem()


def exit_status(submissions: list[Submission], out: Path) -> int:
    """3 if grading stopped early, 5 if a submission tampered with files (each named on standard error,
    with what to do before grading again), else 0."""
    tampered = [s for s in submissions if s.status == "tampered"]
    for submission in tampered:
        print(
            f"TAMPERED: {submission.name} changed {integrity.summarize(submission.tampered, 5)}",
            file=sys.stderr,
        )
    if tampered:
        print(
            f"{len(tampered)} submission(s) changed files outside their work folders (see their feedback). "
            f"Look at your checkout with `git status` and restore it: a later run into {out} refuses to grade "
            "with changed grading code.",
            file=sys.stderr,
        )
    if any(s.status == "not graded" for s in submissions):
        return 3
    return 5 if tampered else 0


if __name__ == "__main__":
    sys.exit(main())
