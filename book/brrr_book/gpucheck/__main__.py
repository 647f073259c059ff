"""``python -m brrr_book.gpucheck``: run one part of the GPU check, list the parts, or merge the parts' folders.

    python -m brrr_book.gpucheck parts
    python -m brrr_book.gpucheck run --part 1 --out DIR [--part-limit S] [--stage-limit "lab solutions=300"]
    python -m brrr_book.gpucheck merge DIR [DIR...] [--into brrr/data/reference]

``run`` is what ``.ci/gpu-check --part N`` calls after checking the node and setting up; run by hand it
checks nothing first. It exits 1 where anything failed, was stopped at its limit or did not run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from brrr_book.gpucheck import merge, plan, run

ROOT = Path(__file__).resolve().parents[3]  # book/brrr_book/gpucheck/ -> the checkout


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m brrr_book.gpucheck", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("parts", help="list the parts, their stages and limits")
    one = commands.add_parser("run", help="run one part")
    one.add_argument("--part", type=int, required=True, choices=sorted(plan.parts(ROOT)))
    one.add_argument(
        "--out", type=Path, required=True, help="the folder the part's record and log go to"
    )
    one.add_argument(
        "--part-limit", type=int, default=None, help=f"seconds (default {plan.PART_LIMIT_S})"
    )
    one.add_argument("--stage-limit", action="append", default=[], metavar="NAME=SECONDS")
    one.add_argument(
        "--spent", type=float, default=0.0, help="seconds already spent on this part (set-up)"
    )
    fold = commands.add_parser("merge", help="fold parts' folders into the committed record")
    fold.add_argument("folders", type=Path, nargs="+")
    fold.add_argument("--into", type=Path, default=merge.COMMITTED)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "parts":
        for part in plan.parts(ROOT).values():
            print(f"part {part.number} (limit {part.limit_s} s): {part.what}")
            for stage in part.stages:
                print(f"  {stage.name} (limit {stage.limit_s} s): {', '.join(stage.items())}")
        return 0
    if args.command == "merge":
        try:
            path = merge.merge(args.folders, args.into)
        except merge.MergeError as error:
            print(f"gpu-check merge: {error}; nothing was written", file=sys.stderr)
            return 2
        print(f"gpu-check merge: wrote {path}")
        for line in merge.summary(json.loads(path.read_text())):
            print(f"  {line}")
        return 0
    try:
        limits = plan.parse_limits(args.stage_limit + _env_limits())
        part = plan.with_limits(
            plan.parts(ROOT)[args.part],
            args.part_limit or _env_int("GPU_CHECK_PART_LIMIT_S"),
            limits,
        )
    except ValueError as error:
        print(f"gpu-check: {error}", file=sys.stderr)
        return 2
    log = run.run_part(
        part,
        args.out.resolve(),
        ROOT,
        spent_s=args.spent,
        say=lambda line: print(f"gpu-check: {line}", flush=True),
    )
    return 0 if log["passed"] else 1


def _env_limits() -> list[str]:
    """``GPU_CHECK_STAGE_LIMITS="lab solutions=300,ceilings=60"``, as NAME=SECONDS pairs."""
    return [
        pair for pair in os.environ.get("GPU_CHECK_STAGE_LIMITS", "").split(",") if pair.strip()
    ]


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.strip().isdigit() else None


if __name__ == "__main__":
    sys.exit(main())
