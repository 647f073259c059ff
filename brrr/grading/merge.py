"""Join the outputs of a folder's shards into one gradebook.

    python -m brrr.grading merge OUT_1 ... OUT_N --out FINAL [--allow-missing]

Each ``OUT`` is one shard's (:mod:`brrr.grading.shards`), with its manifest.
The merge writes ``FINAL/grades.csv`` as one unsharded run would have written it
(the same rows in the same order, the same columns, from the checks the shards
graded, not this machine's), copies each submission's ``feedback/`` file, and
writes ``FINAL/brrr-merge.json``: the shards merged and where each submission's
``work/`` folder is (they stay in the shards' folders).

Refused, with nothing written (exit status 2): shards graded by different brrr
versions, grading code, torch or Python versions, device classes or options
(``--lab``, the timeouts: what changes a grade), shards of different counts,
the same shard given twice, a folder that is no shard's output.

A hole (exit status 3): a shard that is missing, or that never finished (its
manifest still says ``grading``), or a submission in the folder that its shard
did not grade (it arrived after that shard ran). Each is named, with its
submissions and the command that grades it. Nothing is written unless
``--allow-missing`` is given; then the gradebook holds the rest, and
``brrr-merge.json`` lists what is missing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from brrr.grading import report, shards
from brrr.grading.submissions import Submission, from_row

# What every shard of one gradebook must share (shards.provenance, and the options that change a
# grade).
MUST_MATCH = ("format", "brrr", "code", "torch", "python", "device_class", "checks", "options")
MERGED = "brrr-merge.json"


class MergeRefused(ValueError):
    """Shards that cannot make one gradebook; the message says which and why."""


@dataclass
class Plan:
    """What the merge writes: the rows in gradebook order, where each came from, and the holes."""

    rows: list[dict] = field(default_factory=list)
    source: dict[str, Path] = field(
        default_factory=dict
    )  # submission -> the shard folder that graded it
    holes: list[str] = field(default_factory=list)  # one sentence each
    missing: list[str] = field(default_factory=list)  # submissions with no row
    stopped: list[str] = field(
        default_factory=list
    )  # rows graded "not graded": grading stopped before them


def read_shards(folders: list[Path]) -> tuple[dict[int, tuple[Path, dict]], list[Path]]:
    """({shard index: (folder, manifest)}, folders that do not exist). Refused: a folder with no
    readable manifest, the same shard twice, shards that differ in what grades."""
    found: dict[int, tuple[Path, dict]] = {}
    absent = []
    for folder in folders:
        if not folder.is_dir():
            absent.append(folder)
            continue
        if not (folder / shards.MANIFEST).is_file():
            raise MergeRefused(
                f"{folder} is not a shard's output (no {shards.MANIFEST}): grade it with --shard "
                "K/N"
            )
        try:
            manifest = shards.read_manifest(folder)
        except shards.ShardError as error:
            raise MergeRefused(str(error)) from None
        index = manifest["shard"][0]
        if index in found:
            raise MergeRefused(
                f"{found[index][0]} and {folder} are both shard {index}/{manifest['shard'][1]}"
            )
        found[index] = (folder, manifest)
    if not found:
        raise MergeRefused(f"none of {', '.join(map(str, folders))} exists")
    _refuse_differences(found)
    return found, absent


def _refuse_differences(found: dict[int, tuple[Path, dict]]) -> None:
    (first_folder, first), *others = found.values()
    counts = {manifest["shard"][1] for _, manifest in found.values()}
    if len(counts) > 1:
        raise MergeRefused(
            f"the shards split the folder in different numbers of shards ({sorted(counts)})"
        )
    for folder, manifest in others:
        for key in MUST_MATCH:
            if manifest.get(key) != first.get(key):
                mine, theirs = _short(first.get(key)), _short(manifest.get(key))
                raise MergeRefused(
                    f"{first_folder} and {folder} were graded with different {key} ({mine} "
                    f"and {theirs}): grade every shard with the same brrr, course checkout, "
                    "environment and options"
                )


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def plan(found: dict[int, tuple[Path, dict]], absent: list[Path]) -> Plan:
    """The rows of every finished shard, and the holes: missing shards, unfinished ones, and
    submissions in the folder that their shard did not grade."""
    count = next(iter(found.values()))[1]["shard"][1]
    names = sorted({n for _, m in found.values() for n in m["folder_names"]})
    owner = {name: shards.shard_of(name, count) for name in names}
    result = Plan()
    graded: set[str] = set()
    for index in range(1, count + 1):
        share = [name for name in names if owner[name] == index]
        if index not in found:
            where = f" ({', '.join(map(str, absent))} not found)" if absent else ""
            again = rerun(
                next(iter(found.values()))[1], index, absent[0] if len(absent) == 1 else None
            )
            result.holes.append(
                f"shard {index}/{count} is missing{where}: {_listed(share)} not graded; grade it: "
                f"{again}"
            )
            result.missing += share
            continue
        folder, manifest = found[index]
        if manifest.get("state") != "done" or manifest.get("rows") is None:
            result.holes.append(
                f"shard {index}/{count} ({folder}) started at {manifest.get('started')} on "
                f"{manifest.get('host')} and never finished: {_listed(share)} not graded; grade it "
                f"again: {rerun(manifest, index, folder)}"
            )
            result.missing += share
            continue
        for row in manifest["rows"]:
            if (
                owner.get(row["name"], shards.shard_of(row["name"], count)) != index
                or row["name"] in graded
            ):
                raise MergeRefused(
                    f"{folder} holds {row['name']!r}, which is not shard {index}/{count}'s to grade"
                )
            graded.add(row["name"])
            result.rows.append(row)
            result.source[row["name"]] = folder
            if row["status"] == "not graded":
                result.stopped.append(row["name"])
        late = [name for name in share if name not in graded]
        if late:
            result.holes.append(
                f"{_listed(late)} arrived after shard {index}/{count} ({folder}) listed the "
                "folder: grade that shard again"
            )
            result.missing += late
    result.rows.sort(
        key=lambda row: Path(row["path"])
    )  # the gradebook's own order (shards.submission_paths)
    return result


def rerun(manifest: dict, index: int, folder: Path | None) -> str:
    """The command that grades shard ``index`` as ``manifest``'s shard was graded, into
    ``folder``."""
    options = []
    for key, value in sorted(manifest.get("options", {}).items()):
        flag = "--" + key.replace("_", "-")
        if value is True:
            options.append(flag)
        elif value not in (None, False):
            options += [flag, str(value)]
    out = folder if folder is not None else f"OUT_{index}"
    command = ["python -m brrr.grading", manifest["submissions"], "--out", str(out), *options]
    return " ".join(command + ["--shard", f"{index}/{manifest['shard'][1]}"])


def _listed(names: list[str], limit: int = 10) -> str:
    if not names:
        return "no submission"
    shown = ", ".join(names[:limit]) + (
        f" and {len(names) - limit} more" if len(names) > limit else ""
    )
    return f"{len(names)} submission(s) ({shown})"


def submission(row: dict) -> Submission:
    """A graded row of a manifest, as the gradebook's report reads it."""
    return from_row(row)


def write(result: Plan, found: dict[int, tuple[Path, dict]], final: Path) -> None:
    """``final``'s grades.csv, feedback/ (copied from the shards) and brrr-merge.json."""
    manifest = next(iter(found.values()))[1]
    checks = manifest["checks"]
    final.mkdir(parents=True, exist_ok=True)
    feedback = report.fresh_folder(final / "feedback")
    for row in result.rows:
        source = result.source[row["name"]] / "feedback" / f"{row['slug']}.md"
        if not source.is_file():
            raise MergeRefused(f"{source} is missing: grade shard {manifest['shard']} again")
        shutil.copyfile(source, report.fresh_file(feedback / f"{row['slug']}.md"))
    report.write_csv(
        [submission(row) for row in result.rows],
        report.fresh_file(final / "grades.csv"),
        checks_of=lambda lab: checks.get(lab, []),
    )
    summary = {
        key: manifest[key] for key in ("brrr", "code", "torch", "python", "device_class", "options")
    }
    summary |= {
        "shards": {
            str(index): {"folder": str(folder), "host": m.get("host")}
            for index, (folder, m) in found.items()
        },
        "missing": result.missing,
        "holes": result.holes,
        "work": {
            row["name"]: str(result.source[row["name"]] / "work" / row["slug"])
            for row in result.rows
        },
    }
    (final / MERGED).write_text(
        json.dumps(summary, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )


def merge(folders: list[Path], final: Path, *, allow_missing: bool = False) -> Plan:
    """Merge the shard outputs in ``folders`` into ``final`` (see the module docstring); the plan it
    wrote, or wrote nothing for (holes, without ``allow_missing``). Raises :class:`MergeRefused`."""
    folders = [Path(folder).resolve() for folder in folders]
    final = Path(final).resolve()
    for folder in folders:
        if final == folder or final.is_relative_to(folder) or folder.is_relative_to(final):
            raise MergeRefused(
                f"--out {final} must be a folder of its own, outside every shard's ({folder})"
            )
    found, absent = read_shards(folders)
    result = plan(found, absent)
    if not result.holes or allow_missing:
        write(result, found, final)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m brrr.grading merge", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("shards", type=Path, nargs="+", help="each shard's --out folder")
    parser.add_argument(
        "--out", type=Path, required=True, help="folder for the merged grades.csv and feedback/"
    )
    parser.add_argument(
        "--allow-missing", action="store_true", help="write the gradebook even with holes"
    )
    args = parser.parse_args(argv)
    try:
        result = merge(args.shards, args.out, allow_missing=args.allow_missing)
    except MergeRefused as error:
        print(f"merge refused, nothing written: {error}", file=sys.stderr)
        return 2
    for hole in result.holes:
        print(f"hole: {hole}", file=sys.stderr)
    if result.stopped:
        print(
            f"not graded (grading stopped in their shard): {_listed(result.stopped)}",
            file=sys.stderr,
        )
    if result.holes and not args.allow_missing:
        print(
            "nothing written: grade the shards named above, or pass --allow-missing",
            file=sys.stderr,
        )
        return 3
    print(
        f"merged {len(result.rows)} submission(s) from {len(args.shards)} folder(s): "
        f"{args.out / 'grades.csv'}"
    )
    return 3 if result.holes else 0
