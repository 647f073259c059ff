"""``python -m brrr_book.gpucheck``: run a part of the GPU check, list the parts, merge them, and
the wheelhouse's bookkeeping.

    python -m brrr_book.gpucheck parts
    python -m brrr_book.gpucheck run --part 1 --out DIR [--part-limit S] [--stage-limit NAME=S]
    python -m brrr_book.gpucheck merge [--passed-only] [--into brrr/data/reference] DIR|DIR.tgz...
    python -m brrr_book.gpucheck wheels split REPORT  # make wheelhouse: carry what the node lacks
    python -m brrr_book.gpucheck wheels node  # on the node: what it lacks of the wheelhouse
    python -m brrr_book.gpucheck size  # what a GPU call sends: the tree and the wheelhouse

``run`` is what ``.ci/gpu-check --part N`` calls after checking the node and setting up; run by hand
it checks nothing first. It exits 1 where anything failed, was stopped at its limit or did not run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from brrr_book.gpucheck import merge, plan, run, wheels

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
    fold.add_argument("folders", type=Path, nargs="+", help="the parts' folders or archives")
    fold.add_argument("--into", type=Path, default=merge.COMMITTED)
    fold.add_argument(
        "--passed-only", action="store_true", help="a notebook that did not pass adds nothing"
    )
    wheelhouse = dict(type=Path, default=ROOT / "wheelhouse")
    carry = commands.add_parser("wheels", help="the wheelhouse: only what the node lacks")
    carry.add_argument("step", choices=("split", "node"))
    carry.add_argument("report", type=Path, nargs="?", help="split: pip's --dry-run --report")
    carry.add_argument("--wheelhouse", **wheelhouse)
    carry.add_argument("--node-list", type=Path, default=ROOT / wheels.NODE_LIST)
    size = commands.add_parser("size", help="what a GPU call sends: the tree and the wheelhouse")
    size.add_argument("--wheelhouse", **wheelhouse)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "parts":
        for part in plan.parts(ROOT).values():
            print(f"part {part.number} (limit {part.limit_s} s): {part.what}")
            for stage in part.stages:
                print(f"  {stage.name} (limit {stage.limit_s} s): {', '.join(stage.items())}")
        return 0
    if args.command == "wheels":
        return _wheels(args)
    if args.command == "size":
        sizes = wheels.sent(ROOT, args.wheelhouse)
        print(wheels.size_line(sizes, len(list(args.wheelhouse.glob("*.whl")))))
        return 0 if sizes["total"] <= wheels.AIM_BYTES else 1
    if args.command == "merge":
        try:
            path = merge.merge(args.folders, args.into, passed_only=args.passed_only)
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


def _wheels(args) -> int:
    """``split``: write the wheelhouse's two lists from pip's resolution. ``node``: print what this
    Python lacks of the wheelhouse, ``name==version`` a line; exit 3 if it lacks what the resolution
    took from it."""
    if args.step == "split":
        if args.report is None:
            print("gpu-check wheels split: give pip's --dry-run --report file", file=sys.stderr)
            return 2
        resolved = wheels.resolved_from_report(json.loads(args.report.read_text()))
        node = wheels.read_list(args.node_list.read_text())
        carried, provided = wheels.split(resolved, node)
        args.wheelhouse.mkdir(parents=True, exist_ok=True)
        (args.wheelhouse / wheels.CARRIED).write_text(wheels.write_list(carried))
        (args.wheelhouse / wheels.PROVIDED).write_text(wheels.write_list(provided))
        print(
            f"gpu-check wheels: {len(resolved)} packages resolved; the node has {len(provided)} "
            f"({args.node_list.name}); the wheelhouse carries the other {len(carried)}"
        )
        return 0
    install, missing, differ = wheels.to_install(args.wheelhouse, wheels.installed())
    say = lambda line: print(f"gpu-check: {line}", file=sys.stderr)  # noqa: E731
    if differ:
        say(f"the node's own versions are used: {', '.join(differ)}")
    if missing:
        say(
            f"the node lacks {', '.join(missing)}, which {wheels.NODE_LIST} says it has: "
            f"refresh the list on the node ({wheels.REFRESH}), then make wheelhouse again"
        )
        return 3
    print("\n".join(install))
    return 0


def _env_limits() -> list[str]:
    """``GPU_CHECK_STAGE_LIMITS="ceilings=60,GPU-only tests=120"``, as NAME=SECONDS pairs."""
    return [
        pair for pair in os.environ.get("GPU_CHECK_STAGE_LIMITS", "").split(",") if pair.strip()
    ]


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.strip().isdigit() else None


if __name__ == "__main__":
    sys.exit(main())
