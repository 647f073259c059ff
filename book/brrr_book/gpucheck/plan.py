"""What each part of the GPU check runs, in what order, and what it drops first when time is short.

A lease gives 15 minutes of GPU time in all, counted from the request: a start of 1-2 minutes and
two commands of at most 5 minutes each. So the check is two parts, each one command that stops
itself within :data:`PART_LIMIT_S`, set-up included, and still writes its archive
(``.ci/gpu-check``).

A stage is one command or notebooks run one at a time, with a value: what never passed on a GPU
first, then what failed on the H200 and was fixed on a CPU since, and last what passed there (run
again only with time to spare). Every item has the seconds it is expected to take
(:data:`EXPECTED_S`). Before each item the runner (:mod:`brrr_book.gpucheck.run`) drops the least
valuable of what is left, the last first, until what is left is expected to fit in the time left,
and says what it dropped. The limits are defaults: :func:`with_limits` applies a command line's
overrides. ``{python}`` in a command stands for the interpreter that runs the check (the node's
venv).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

# One command may run 10 minutes, and two of 5 fit the lease's 15 with the start. A part stops
# itself at 270 s, set-up included; a runaway item is killed 10 s later and the archive is written
# in the 20 s after.
PART_LIMIT_S = 270

# A stage's value: the runner drops the lowest first.
NEEDED = 4  # what every later item is measured against (the ceilings)
NEVER_RAN = 3  # never passed on a GPU
FIXED = 2  # failed on the H200 (2026-11-28), fixed on a CPU since
PASSED = 1  # passed on the H200 (2026-11-28): its record is committed; run again with time to spare

# Seconds on the H200, 2026-11-28 (set-up, ceilings, Lab 1 and the notebooks that passed), or an
# estimate where an item failed early or never ran: a failing lab stopped at its first grader check,
# so a passing one is counted at 1.5-2x; the overhead notebooks and the tests never ran on a GPU.
# Unlisted: DEFAULT_S.
SET_UP_S = 25
DEFAULT_S = 40
EXPECTED_S = {
    "ceilings": 36,
    "ceilings, cached": 5,  # the same node's part 1 measured them: read from the cache
    "solutions/01-roofline.ipynb": 15,
    "solutions/02-fuse-it.ipynb": 30,  # 19 s, failed at its first check
    "solutions/03-one-pass.ipynb": 40,  # 27 s, failed at its first check
    "solutions/04-make-it-fast.ipynb": 28,  # 25 s, ran to its last check
    "solutions/05-tile-it.ipynb": 40,  # 19 s, failed at its first check
    "solutions/06-flash-attention.ipynb": 40,  # 19 s, failed at its first check
    "notebooks/00-your-machine.ipynb": 11,
    "notebooks/10-cos-cos.ipynb": 38,  # failed at its last cell
    "notebooks/11-repeat-sweep.ipynb": 39,
    "notebooks/12-triton-kernels.ipynb": 24,
    "notebooks/13-rematerialization.ipynb": 21,
    "notebooks/20-matmul-throughput.ipynb": 40,  # 32 s, failed at the TF32 branch
    "notebooks/21-flops-vs-runtime.ipynb": 10,
    "notebooks/22-layer-intensity.ipynb": 8,
    "notebooks/23-tiling.ipynb": 31,
    "notebooks/30-python-vs-pytorch.ipynb": 25,
    "notebooks/31-batch-doubling.ipynb": 35,
    "notebooks/32-profiler-traces.ipynb": 25,
    "notebooks/33-cuda-graphs.ipynb": 45,
    "notebooks/40-diagnose-a-gpt.ipynb": 36,
    "GPU-only tests": 90,
}

# The tests that take a GPU path where a CPU takes another (CUDA events and graphs, the grader's
# timed checks, the interpreter beside compiled kernels). Every other test, and every test of these
# files marked device_independent, is the same on any device and runs in CI; the kernels' PTX
# compile (tests/library/test_gpu_kernels_compile.py) runs on a CPU under the node's torch and
# Triton in `make test-stacks`, so the GPU does not compile them again.
GPU_TEST_FILES = (
    "tests/library/test_ceilings.py",
    "tests/library/test_timing.py",
    "tests/library/test_device.py",
    "tests/benchmarks/test_overhead.py",
    "tests/book/test_timed_checks.py",
    "tests/labs/test_grading_fixtures.py",
    "tests/grading/test_grading_interpreter_on_gpu.py",
)

OVERHEAD_NOTEBOOKS = (
    "30",
    "31",
    "32",
    "33",
)  # they time the host: never beside another timed thing


@dataclass(frozen=True)
class Stage:
    name: str
    limit_s: int
    value: int = NEVER_RAN
    notebooks: tuple[str, ...] = ()  # paths, run one at a time, each under pytest --nbval-lax
    command: tuple[str, ...] = ()  # or one command

    def items(self) -> tuple[str, ...]:
        """What the stage runs, as a time-out report names it."""
        return self.notebooks or (" ".join(self.command).replace("{python}", "python"),)

    def expected_s(self, item: str) -> float:
        """The seconds ``item`` of this stage is expected to take on the node."""
        return EXPECTED_S.get(item if self.notebooks else self.name, DEFAULT_S)


@dataclass(frozen=True)
class Part:
    number: int
    what: str
    stages: tuple[Stage, ...]
    limit_s: int = PART_LIMIT_S


def notebooks(
    root: Path, folder: str, numbers: tuple[str, ...] | None = None, *, but=()
) -> tuple[str, ...]:
    """The ``.ipynb`` files in ``root/folder`` (paths relative to ``root``), in order; only those
    whose name starts with one of ``numbers`` if given (in that order), less those starting with one
    of ``but``."""
    found = sorted(path.relative_to(root).as_posix() for path in (root / folder).glob("*.ipynb"))
    number = lambda path: Path(path).name.split("-", 1)[0]  # noqa: E731
    if numbers is not None:
        found = sorted(
            (path for path in found if number(path) in numbers),
            key=lambda path: numbers.index(number(path)),
        )
    return tuple(path for path in found if number(path) not in but)


def gpu_tests_command() -> tuple[str, ...]:
    """The GPU-only tests, serially: ``-n 0``, not ``-p no:xdist``, which the suite's conftest (an
    xdist hook) refuses."""
    head = ("{python}", "-m", "pytest", "-p", "no:cacheprovider", "-n", "0")
    return head + ("--durations=15", "-m", "not device_independent", *GPU_TEST_FILES)


def parts(root: Path) -> dict[int, Part]:
    """The two parts, for the checkout at ``root``: every notebook and lab solution in one of
    them."""
    ceilings = ("{python}", "-m", "brrr.ceilings")
    return {
        1: Part(
            1,
            "the ceilings, then the labs' grader verdicts and GPU timing (Labs 2-6), "
            "never passed on a GPU",
            (
                Stage("ceilings", 60, NEEDED, command=(*ceilings, "--refresh")),
                Stage(
                    "labs never passed on a GPU",
                    220,
                    NEVER_RAN,
                    notebooks=notebooks(root, "solutions", ("04", "05", "06", "02", "03")),
                ),
                Stage("fixed since the H200", 60, FIXED, notebooks(root, "notebooks", ("20",))),
                Stage(
                    "passed on the H200",
                    120,
                    PASSED,
                    notebooks(root, "solutions", ("01",))
                    + notebooks(root, "notebooks", ("23", "40")),
                ),
            ),
        ),
        2: Part(
            2,
            "the overhead notebooks and the GPU-only tests, never run on a GPU",
            (
                Stage("ceilings, cached", 60, NEEDED, command=ceilings),
                Stage(
                    "overhead notebooks",
                    180,
                    NEVER_RAN,
                    notebooks(root, "notebooks", OVERHEAD_NOTEBOOKS),
                ),
                Stage("GPU-only tests", 150, NEVER_RAN, command=gpu_tests_command()),
                Stage("fixed since the H200", 60, FIXED, notebooks(root, "notebooks", ("10",))),
                Stage(
                    "passed on the H200",
                    150,
                    PASSED,
                    notebooks(root, "notebooks", ("00", "11", "12", "13", "21", "22")),
                ),
            ),
        ),
    }


def with_limits(
    part: Part, part_limit_s: int | None = None, stage_limits: dict[str, int] | None = None
) -> Part:
    """``part`` with its limit and some stages' limits replaced; a stage it does not have is an
    error that names the ones it has."""
    stage_limits = dict(stage_limits or {})
    names = [stage.name for stage in part.stages]
    unknown = sorted(set(stage_limits) - set(names))
    if unknown:
        raise ValueError(
            f"part {part.number} has no stage {', '.join(map(repr, unknown))}: "
            f"its stages are {names}"
        )
    stages = tuple(
        dataclasses.replace(s, limit_s=stage_limits.get(s.name, s.limit_s)) for s in part.stages
    )
    return dataclasses.replace(part, stages=stages, limit_s=part_limit_s or part.limit_s)


def parse_limits(pairs: list[str]) -> dict[str, int]:
    """``["ceilings=60", ...]`` as ``{"ceilings": 60}``; a clear error for anything else."""
    limits = {}
    for pair in pairs:
        name, sep, seconds = pair.rpartition("=")
        if not sep or not name or not seconds.strip().isdigit():
            raise ValueError(f"a stage limit is NAME=SECONDS (say 'ceilings=60'), not {pair!r}")
        limits[name.strip()] = int(seconds)
    return limits
