"""What each part of the GPU check runs, and within what time.

A part is a list of stages; a stage is either one command or notebooks run one at a time. The limits are
defaults: :func:`with_limits` applies a command line's overrides. ``{python}`` in a command stands for the
interpreter that runs the check (the node's venv).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

# One command of the lease may run 10 minutes; a part stops itself at 9, set-up included, so that what it
# recorded and what did not run are written before anything outside kills it.
PART_LIMIT_S = 540

# The tests that take a GPU path where a CPU takes another (CUDA events, CUDA graphs, compiled Triton kernels,
# the grader's timed checks): every other test is the same on any device and runs in CI.
GPU_TEST_FILES = (
    "tests/library/test_ceilings.py",
    "tests/library/test_timing.py",
    "tests/library/test_device.py",
    "tests/library/test_gpu_kernels_compile.py",
    "tests/benchmarks/test_overhead.py",
    "tests/book/test_timed_checks.py",
    "tests/labs/test_grading_fixtures.py",
    "tests/grading/test_grading_interpreter_on_gpu.py",
)

# The notebooks of part 3 (the overhead chapter: they time the host, and must not share it) and of part 1.
OVERHEAD_NOTEBOOKS = ("30", "31", "32", "33")
FIRST_NOTEBOOKS = ("23", "40")  # never run on a GPU (23), or the capstone that the others feed (40)


@dataclass(frozen=True)
class Stage:
    name: str
    limit_s: int
    notebooks: tuple[str, ...] = ()  # paths, run one at a time, each under pytest --nbval-lax
    command: tuple[str, ...] = ()  # or one command

    def items(self) -> tuple[str, ...]:
        """What the stage runs, as a time-out report names it."""
        return self.notebooks or (" ".join(self.command).replace("{python}", "python"),)


@dataclass(frozen=True)
class Part:
    number: int
    what: str
    stages: tuple[Stage, ...]
    limit_s: int = PART_LIMIT_S


def notebooks(
    root: Path, folder: str, numbers: tuple[str, ...] | None = None, *, but=()
) -> tuple[str, ...]:
    """The ``.ipynb`` files in ``root/folder`` (paths relative to ``root``), in order; only those whose name
    starts with one of ``numbers`` if given, less those starting with one of ``but``."""
    found = sorted(path.relative_to(root).as_posix() for path in (root / folder).glob("*.ipynb"))
    name = lambda path: Path(path).name  # noqa: E731
    if numbers is not None:
        found = [path for path in found if name(path).split("-", 1)[0] in numbers]
    return tuple(path for path in found if name(path).split("-", 1)[0] not in but)


def parts(root: Path) -> dict[int, Part]:
    """The three parts, for the checkout at ``root``."""
    tests = (
        "{python}",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "--durations=15",
    )
    tests += ("-m", "not device_independent", *GPU_TEST_FILES)
    return {
        1: Part(
            1,
            "set-up, ceilings, every lab solution with its grader verdicts, notebooks 23 and 40",
            (
                Stage("ceilings", 90, command=("{python}", "-m", "brrr.ceilings", "--refresh")),
                Stage("lab solutions", 270, notebooks=notebooks(root, "solutions")),
                Stage(
                    "notebooks 23 and 40",
                    150,
                    notebooks=notebooks(root, "notebooks", FIRST_NOTEBOOKS),
                ),
            ),
        ),
        2: Part(
            2,
            "the chapter notebooks",
            (
                Stage(
                    "chapter notebooks",
                    500,
                    notebooks=notebooks(
                        root, "notebooks", but=FIRST_NOTEBOOKS + OVERHEAD_NOTEBOOKS
                    ),
                ),
            ),
        ),
        3: Part(
            3,
            "the overhead notebooks and the GPU-only tests, serially",
            (
                Stage(
                    "overhead notebooks",
                    250,
                    notebooks=notebooks(root, "notebooks", OVERHEAD_NOTEBOOKS),
                ),
                Stage("GPU-only tests", 250, command=tests),
            ),
        ),
    }


def with_limits(
    part: Part, part_limit_s: int | None = None, stage_limits: dict[str, int] | None = None
) -> Part:
    """``part`` with its limit and some stages' limits replaced; a stage it does not have is an error that
    names the ones it has."""
    stage_limits = dict(stage_limits or {})
    names = [stage.name for stage in part.stages]
    unknown = sorted(set(stage_limits) - set(names))
    if unknown:
        raise ValueError(
            f"part {part.number} has no stage {', '.join(map(repr, unknown))}: its stages are {names}"
        )
    stages = tuple(
        dataclasses.replace(s, limit_s=stage_limits.get(s.name, s.limit_s)) for s in part.stages
    )
    return dataclasses.replace(part, stages=stages, limit_s=part_limit_s or part.limit_s)


def parse_limits(pairs: list[str]) -> dict[str, int]:
    """``["lab solutions=300", ...]`` as ``{"lab solutions": 300}``; a clear error for anything else."""
    limits = {}
    for pair in pairs:
        name, sep, seconds = pair.rpartition("=")
        if not sep or not name or not seconds.strip().isdigit():
            raise ValueError(
                f"a stage limit is NAME=SECONDS (say 'lab solutions=300'), not {pair!r}"
            )
        limits[name.strip()] = int(seconds)
    return limits
