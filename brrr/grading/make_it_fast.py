"""Lab 4's speed check, graded N times on the reference solution: how often it passes, and the
speedups.

    python -m brrr.grading.make_it_fast            # 20 gradings of the speedup check
    python -m brrr.grading.make_it_fast --runs 1

The reference solution is the answer cell ``fast-train`` of
``solutions/04-make-it-fast.ipynb``, run as the notebook runs it. Each run is
the ``speedup`` check exactly as the grader runs it
(:func:`brrr.labs.make_it_fast.checks.grade`), with the student's side served in this
process (:func:`brrr.grading.client.local_student`): its own copy of the given
step against the solution, one thread, fresh seeds every call, every timed
result checked. The script prints each run's speedup and the pass count, and
exits 1 unless every run passed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from brrr.checks import thresholds
from brrr.device import ON_GPU
from brrr.grading.client import local_student
from brrr.labs import make_it_fast as lab
from brrr.labs.make_it_fast import checks as lab_checks

SOLUTION = Path(__file__).resolve().parent.parent.parent / "solutions" / f"{lab.LAB}.ipynb"
CELL = "fast-train"


def reference_solution(path: Path = SOLUTION, cell: str = CELL):
    """``fast_train`` as the solution notebook defines it, with the names its set-up cell
    imports."""
    notebook = json.loads(path.read_text())
    sources = ["".join(c["source"]) for c in notebook["cells"] if c.get("id") == cell]
    if len(sources) != 1:
        raise LookupError(f"{path} has no single cell with id {cell!r}")
    namespace = {
        "torch": torch,
        "ON_GPU": ON_GPU,
        "LEARNING_RATE": lab.LEARNING_RATE,
        "WEIGHT_DECAY": lab.WEIGHT_DECAY,
        "make_problem": lab.make_problem,
        "__name__": "solution",
    }
    exec(compile(sources[0], f"{path.name}:{cell}", "exec"), namespace)  # noqa: S102 - our own notebook
    return namespace["fast_train"]


def run(runs: int) -> tuple[int, list[float], list[str]]:
    """Grade the speedup check ``runs`` times: (passes, best speedup of each run, failure
    messages)."""
    fast_train = reference_solution()
    lab_checks.prepare()
    passes, speedups, failures = 0, [], []
    for number in range(runs):
        try:
            summary = lab_checks.grade(
                "speedup", local_student(fast_train, lab.WIRE_TYPES, forked=False)
            )
            passes += 1
            print(f"run {number + 1}: PASS {summary}", flush=True)
        except AssertionError as failure:
            failures.append(str(failure))
            print(f"run {number + 1}: FAIL {failure}", flush=True)
        speedups.append(lab_checks.last_speedup.get("best", float("nan")))
    return passes, speedups, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m brrr.grading.make_it_fast", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    passes, speedups, _ = run(args.runs)
    needed = thresholds.threshold(lab.LAB, "speedup").value
    print(
        f"{passes} of {args.runs} passed (needed {needed:g}x); speedups: min {min(speedups):.1f}x, "
        f"median {statistics.median(speedups):.1f}x, max {max(speedups):.1f}x"
    )
    return 0 if passes == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
