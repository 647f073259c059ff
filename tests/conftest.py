"""Shared test set-up: keep brrr's caches inside the checkout, as the Makefile does,
and build the book once per test run for every test that reads it."""

import fcntl
import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
import yaml
from xdist.scheduler import LoadFileScheduling

ROOT = Path(__file__).resolve().parent.parent

os.environ.setdefault("BRRR_CACHE_DIR", str(ROOT / ".cache" / "brrr"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor"))
# A miss fails here, in the tests and in every notebook they execute, the book build included (it
# inherits this environment), however pytest was started (brrr.targets.strict).
os.environ["BRRR_STRICT"] = "1"
# The suite records into no GPU record, whatever started it: a test that records sets a temporary
# folder (monkeypatch), and the committed folder is refused outright (brrr.reference.recording_dir).
# The first GPU run's unit tests overwrote its measured ceilings with their fakes.
os.environ.pop("BRRR_RECORD_REFERENCE", None)

JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")
BOOK_FLAGS = ["-W", "-n", "--keep-going"]


def build_book(source: Path, config: Path, output: Path) -> subprocess.CompletedProcess:
    """``jupyter-book build`` with the flags of ``make book``, into ``output``; its kernels forked
    warm, as ``make book``'s are (book/brrr_book/warm/)."""
    from brrr_book.warm import jupyter_path

    return subprocess.run(
        [
            str(JUPYTER_BOOK),
            "build",
            str(source),
            *BOOK_FLAGS,
            "--config",
            str(config),
            "--path-output",
            str(output),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "JUPYTER_PATH": jupyter_path()},
    )


@dataclass
class BookBuild:
    """The outcome of the one forced build of this checkout's book."""

    returncode: int
    stdout: str
    stderr: str
    html: str  # the folder of built pages

    @property
    def html_dir(self) -> Path:
        return Path(self.html)


# myst-nb's log line for each page it executes; the times are shown at the end of the run.
EXECUTED = re.compile(
    rf"^{re.escape(str(ROOT))}/(\S+): Executed notebook in ([\d.]+) seconds", re.MULTILINE
)
NOTEBOOK_TIMES = "notebook-times.txt"


def _forced_build(folder: Path) -> BookBuild:
    """Build the book with every notebook executed: the tests never trust the cache."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"]["execute_notebooks"] = "force"
    config["execute"].pop("cache", None)
    config_path = folder / "_config.yml"
    config_path.write_text(yaml.safe_dump(config))
    result = build_book(ROOT, config_path, folder / "out")
    (folder / NOTEBOOK_TIMES).write_text(
        "".join(f"{seconds:>7} s  {page}\n" for page, seconds in EXECUTED.findall(result.stdout))
    )
    return BookBuild(
        result.returncode, result.stdout, result.stderr, str(folder / "out" / "_build" / "html")
    )


@pytest.fixture(scope="session")
def book_build(tmp_path_factory) -> BookBuild:
    """The book, built once for the whole run (it takes minutes).

    Under pytest-xdist every worker has its own session, so the workers share
    one build through a folder of this run's temporary directory, under a lock.
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _forced_build(tmp_path_factory.mktemp("book"))
    shared = tmp_path_factory.getbasetemp().parent / "book"
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = shared / "build.json"
        if record.exists():
            return BookBuild(**json.loads(record.read_text()))
        shared.mkdir(exist_ok=True)
        build = _forced_build(shared)
        record.write_text(json.dumps(asdict(build)))
        return build


# The slowest files after the book (minutes together), longest first as measured in a fresh run.
# pytest-xdist hands out files in collection order (pytest_configure keeps it from re-sorting them),
# so these start while the book builds and no long file is left for the end. Each worker is given
# two files up front: the third in this order (a quick one) goes to the book's worker.
SLOW_FILES = (
    "test_gradebook_hostile.py",
    "test_units.py",
    "test_gradebook.py",
    "test_gradebook_tampering.py",
    "test_package.py",
    "test_labs.py",
    "test_gpu_kernels_compile.py",
    "test_grading_roofline.py",
    "test_ceilings.py",
    "test_grading_fixtures.py",
    "test_device.py",
    "test_grading_make_it_fast.py",
    "test_grading_one_pass.py",
    "test_allocator.py",
    "test_gpu_check.py",
    "test_gradebook_setup.py",
)

# Last: these compile the graphs a notebook of the book compiles (notebooks 10-13 and 40), and run
# from Inductor's cache once the book has filled it, in a run that builds it (a plain pytest).
# Measured on this machine with an empty cache: the rematerialization tests 25 s after notebook 13,
# 39 s before; the six others together 59 s after those notebooks, 96 s before. `make test` builds
# no book: there they compile, and go right after the slow files, so that its last minute is short
# files on both workers (placed last there, they ran 365-483 s of a 492 s run, one worker idle for
# the last 39 s).
LAST_FILES = (
    "test_fusion_helpers.py",
    "test_fusion_benchmark.py",
    "test_fusion_repeat_sweep.py",
    "test_timed_checks.py",
    "test_diagnose.py",
    "test_capstone.py",
    "test_fusion_rematerialization.py",
)

# The browser's minute reads the built book: the book's worker runs it right after the build, as one
# unit of work with the book's file (FilesTogether). Handed to whichever worker was free at the end,
# it ran there alone: in a fresh-clone run (2026-11-27) the book's worker finished at 694 s and the
# other ran the browser from 695 to 753 s. The book and its browser (533 s) are no longer the run's
# longest chain: the other 900 worker-seconds are. In a run of one process it comes last.
AFTER_THE_BOOK = ("test_book_in_a_browser.py",)
BOOK_FILE = "tests/book/test_book_build.py"
# The unsolved labs' gradebook run (two notebooks at a time) follows the hostile one (two at a time,
# Lab 1's timed checks among them) on its worker: run side by side in `make test`, the four
# notebooks and their graders starved a grader's timed windows to half the CPU three attempts
# running, and a hostile submission's matmul check came back a grader error (a fresh clone,
# 2026-11-28). Lab 1's grader tests come after both: beside the hostile run's Lab 1 notebooks, which
# time copies on the other core, the test that a 2x copy-bandwidth error fails let it through in 2
# of 3 fresh-clone runs of `make test` (2026-11-28).
HOSTILE_FILE = "tests/grading/test_gradebook_hostile.py"
TOGETHER = {
    **{name: BOOK_FILE for name in AFTER_THE_BOOK},
    "test_labs.py": HOSTILE_FILE,
    "test_grading_roofline.py": HOSTILE_FILE,
}


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with some files in one unit of work with another's (:data:`TOGETHER`)."""
    if config.getoption("dist") == "loadfile":
        return FilesTogether(config, log)
    return None


class FilesTogether(LoadFileScheduling):
    """pytest-xdist's scheduling by file, but for the files of :data:`TOGETHER`: each runs on the
    worker of the file it names, after it (the unit's tests keep their collection order, that file's
    first)."""

    def _split_scope(self, nodeid: str) -> str:
        scope = super()._split_scope(nodeid)
        return TOGETHER.get(Path(scope).name, scope)


def pytest_configure(config):
    """Keep the order below under pytest-xdist. Its ``--dist loadfile`` sorts files by their number
    of tests unless told not to, and the book's file, with six tests, then started at 147 s of a
    488 s run: the other worker sat idle for the last 200 s while the book built."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    # Only the pytest-xdist controller, before its workers start: a single-process run (one test
    # file, say) measures them when a test first needs them, with nothing beside it, and pays
    # nothing at start-up.
    controller = getattr(config.option, "numprocesses", None) and not os.environ.get(
        "PYTEST_XDIST_WORKER"
    )
    if controller and not config.option.collectonly:
        _measure_ceilings_while_quiet(config)


# The thread counts the book and the tests measure ceilings with: the default, and the one thread
# that the compute, fusion and overhead pages and `brrr.diagnose` pin
# (brrr.benchmarks.compute.THREADS and the rest).
CEILING_THREADS = (None, 1)


def _measure_ceilings_while_quiet(config) -> None:
    """Measure the machine's ceilings afresh before any test starts.

    Under pytest-xdist this runs in the controller before the workers exist, so nothing else is
    running. Measured by the first test that needs them, they were measured beside the other worker:
    a one-thread matmul beside two busy torch threads ran at 70.6 GFLOP/s against 96 alone, and
    every page that divided by that roof then read over 100% of it. Read from the cache instead, a
    roof measured that way on an earlier day stayed: a checkout's book then divided by a 70.6
    GFLOP/s and a 10.4 GB/s roof against 89 GFLOP/s and 18 GB/s measured the same morning (about 12
    s per thread setting on 2 cores)."""
    from brrr import ceilings

    for threads in CEILING_THREADS:
        found = ceilings.measure(threads=threads, refresh=True)
        if config.option.verbose >= 0:
            setting = (
                "default threads" if threads is None else f"{threads} thread{'s' * (threads != 1)}"
            )
            print(
                f"ceilings ({setting}): copy {found.copy_bandwidth / 1e9:.1f} GB/s, "
                f"float32 matmul {found.matmul('float32') / 1e9:.1f} GFLOP/s · "
                f"{found.env.get('date')}"
            )


# The end-to-end stage (`make test-e2e`, the second step of .ci/run): every test that reads the
# built book, and the tests marked ``e2e`` by hand (whole gradebook runs of folders, from the wheel,
# in Gradescope's layout, against a checkout a submission rewrites). `make test` leaves them out
# (``-m "not e2e"``) and stays within its ten minutes on two cores; a plain ``pytest`` runs both.
E2E_FIXTURES = ("book_build",)

# What depends on the torch and Triton versions, which `make test-stacks` runs on every stack
# besides the pinned one (.ci/stacks.toml, [run]): marked `stack`, as is every notebook a run is
# given.
STACK_FILES = tuple(
    Path(name).name
    for name in tomllib.loads((ROOT / ".ci/stacks.toml").read_text())["run"]["tests"]
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the end-to-end stage's tests before ``-m`` selects (:data:`E2E_FIXTURES`), and the
    stacks' tests (:data:`STACK_FILES`, and any notebook run), then order them all.

    The book's tests go first: under ``make test-e2e`` or a plain ``pytest -n 2 --dist loadfile``
    the worker that takes test_book_build.py starts the build at once, and the
    other worker runs the slow files meanwhile, then the rest. The only other file
    that reads the build, the browser's, comes last (:data:`AFTER_THE_BOOK`): in a
    run of one process, after everything; under pytest-xdist, on the book's worker
    right after the build (:class:`FilesTogether`), so that no worker waits on the
    other's build.
    (``--dist loadgroup`` cannot do this: pytest-xdist 3.8 marks groups in a test
    id attribute that pytest 9 no longer reads.)"""
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in E2E_FIXTURES):
            item.add_marker(pytest.mark.e2e)
        if item.path.name in STACK_FILES or item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.stack)
    builds_the_book = "not e2e" not in (config.getoption("markexpr") or "")
    early = SLOW_FILES + (() if builds_the_book else LAST_FILES)
    late = (LAST_FILES if builds_the_book else ()) + AFTER_THE_BOOK
    order = {
        "test_book_build.py": -1,
        **{name: rank for rank, name in enumerate(early)},
        **{name: len(early) + 1 + rank for rank, name in enumerate(late)},
    }
    items.sort(key=lambda item: order.get(item.path.name, len(early)))  # stable: file order kept


def pytest_terminal_summary(terminalreporter, config):
    """How long each page of the book took to execute, where this run built it: most of the
    end-to-end stage's time is the book, and this is where a slow notebook shows."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return
    for times in sorted(factory.getbasetemp().glob(f"book*/{NOTEBOOK_TIMES}")):
        lines = times.read_text().splitlines()
        total = sum(float(line.split()[0]) for line in lines)
        terminalreporter.write_sep("=", f"book pages executed: {total:.0f} s")
        for line in sorted(lines, key=lambda line: -float(line.split()[0])):
            terminalreporter.write_line(line)


@pytest.fixture
def grades_in_the_environment(tmp_path_factory):
    """For a test that runs a gradebook in this Python environment
    (gradebook_helpers.the_grading_environment): it waits while a test on the other worker changes
    the environment on purpose."""
    from gradebook_helpers import the_grading_environment

    with the_grading_environment(tmp_path_factory):
        yield


@pytest.fixture
def changes_the_grading_environment(tmp_path_factory):
    """For a test whose submission changes this Python environment: no other gradebook runs
    meanwhile."""
    from gradebook_helpers import the_grading_environment

    with the_grading_environment(tmp_path_factory, changes_it=True):
        yield


@pytest.fixture
def builds_as_on_a_gpu(monkeypatch):
    """Kernels are built as on a GPU (compiled after the interpreted bounds check), but interpreted
    so they run here; the list records each build's kind, in order."""
    from brrr.checks import core

    built_as = []
    original = core.build_kernels

    def recording(name, cases, *, interpreted):
        built_as.append("interpreted" if interpreted else "compiled")
        return original(name, cases, interpreted=True)

    monkeypatch.setattr(core, "TRITON_INTERPRETED", False)
    monkeypatch.setattr(core, "build_kernels", recording)
    return built_as
