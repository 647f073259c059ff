"""``python -m brrr.grading``: grade a folder, or one of the commands that grade a course.

    python -m brrr.grading SUBMISSIONS --out OUT [--shard K/N] ...   grade (brrr.grading.gradebook)
    python -m brrr.grading merge OUT_1 ... OUT_N --out FINAL           join shards
    (brrr.grading.merge) python -m brrr.grading gradescope --lab LAB --out autograder.zip  a
    Gradescope bundle (brrr.grading.gradescope) python -m brrr.grading gradescope-run --lab LAB
    --root ROOT        what the bundle's run_autograder runs

A submissions folder named like a command is graded as ``./merge``.
"""

from __future__ import annotations

import importlib

COMMANDS = {
    "merge": "brrr.grading.merge:main",
    "gradescope": "brrr.grading.gradescope:main",
    "gradescope-run": "brrr.grading.gradescope:run_main",
}


def main(argv: list[str]) -> int:
    target = COMMANDS.get(argv[0]) if argv else None
    if target is None:
        from brrr.grading.gradebook import main as grade_folder

        return grade_folder(argv)
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)(argv[1:])
