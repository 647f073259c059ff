"""Grade a share of a folder: ``python -m brrr.grading SUBMISSIONS --out OUT --shard K/N``.

A course's submissions are graded as N shards, one per task of a cluster's job
array (``scripts/slurm/``), and :mod:`brrr.grading.merge` joins their outputs
into one gradebook. Shard K grades the submissions whose name hashes to K
(:func:`shard_of`): the share of a submission depends on its name alone, never
on the order or number of the others, so a rerun of a shard grades the same
notebooks, and a notebook added later lands in one share without moving any
other.

Each shard writes into its own ``OUT``, and says what it is in ``OUT``'s
manifest, ``brrr-shard.json`` (:data:`MANIFEST`): which shard of how many, what
graded it (brrr's version, a fingerprint of the grading code and the labs, torch,
the device class, the options given), every submission name the folder held when
it started, and, once it has finished, one row per graded submission: status,
seconds, and the grader's record of each check. The manifest is written twice:
when the shard starts (``"state": "grading"``) and when it ends (``"done"``), each
time whole, through a rename, so a shard that dies leaves a manifest that says
so, and the merge names the hole. ``OUT`` belongs to one shard: the first
manifest is created only if none is there, so another shard given the same
``OUT`` is refused before it grades anything, and two shards never write the
same files. A rerun of a shard into its own ``OUT`` (after a shard was stopped,
say) resumes it: the rows its journal holds are kept, and the rest are graded
(:mod:`brrr.grading.report`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from brrr import __version__, labs
from brrr.device import device_class
from brrr.grading import assemble, course

MANIFEST = "brrr-shard.json"
FORMAT = 1
# Options of the gradebook's command line that change no grade: the rest must be the same in every
# shard.
NOT_COMPARED = ("submissions", "out", "shard", "jobs", "accept_grading_code")


def submission_paths(folder: Path) -> dict[str, Path]:
    """Every notebook under ``folder`` by its submission name, in the order they are graded (and
    sharded)."""
    paths = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    return {str(path.relative_to(folder).with_suffix("")): path for path in paths}


class ShardError(ValueError):
    """A shard that must not run (or be merged) as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Shard:
    index: int  # K, from 1
    count: int  # N

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse(text: str) -> Shard:
    """``"2/3"`` -> Shard(2, 3); an argparse type."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not K/N (shard K of N, from 1/N to N/N)"
        ) from None
    if not 1 <= index <= count:
        raise argparse.ArgumentTypeError(f"shard {text}: K must be between 1 and N")
    return Shard(index, count)


def shard_of(name: str, count: int) -> int:
    """The shard (1 to ``count``) that grades the submission called ``name``: a hash of the name, so
    the same on every machine and in every run, whatever else the folder holds."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def code_fingerprint(snapshot: assemble.Snapshot) -> str:
    """What grades, in one digest: every file of the ``brrr`` snapshot the grader runs from and the
    labs' solutions the lab notebooks are made from, as the gradebook's own record of them
    (:func:`brrr.grading.course.fingerprint`)."""
    return course.fingerprint(snapshot.graded_files())


def provenance(snapshot: assemble.Snapshot) -> dict:
    """What grades, as the merge compares it: brrr, its grading code, torch, Python, the device
    class and the checks each lab grades there (the gradebook's columns)."""
    import torch

    kind = device_class()
    return {
        "format": FORMAT,
        "brrr": __version__,
        "code": code_fingerprint(snapshot),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device_class": kind,
        "checks": {lab: list(labs.checks(lab, kind)) for lab in sorted(labs.LABS)},
    }


def row(submission, folder: Path) -> dict:
    """One graded submission, as the manifest keeps it: enough to write its grades.csv row again."""
    return {
        "name": submission.name,
        "path": submission.path.relative_to(folder).as_posix(),
        "slug": submission.slug,
        "lab": submission.lab,
        "status": submission.status,
        "seconds": submission.seconds,
        "sandboxed": submission.sandboxed,
        "note": submission.note,
        "cell_errors": submission.cell_errors,
        "results": submission.results,
        "timed_out": submission.timed_out,
    }


def write_manifest(out: Path, record: dict) -> None:
    """``OUT/brrr-shard.json``, whole or not at all (a rename): a shard killed while writing leaves
    the last."""
    partial = out / f".{MANIFEST}.{os.getpid()}"
    partial.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, out / MANIFEST)


def read_manifest(out: Path) -> dict:
    try:
        record = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ShardError(f"{out / MANIFEST} cannot be read ({error})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT or "shard" not in record:
        raise ShardError(f"{out / MANIFEST} is not a brrr shard manifest of format {FORMAT}")
    return record


class Claim:
    """A shard's hold on its ``OUT``: taken before grading, finished with the rows after."""

    def __init__(self, out: Path, folder: Path, shard: Shard, record: dict):
        self.out, self.folder, self.shard, self.record = out, folder, shard, record

    def owns(self, name: str) -> bool:
        return shard_of(name, self.shard.count) == self.shard.index

    @classmethod
    def take(cls, args: argparse.Namespace) -> Claim:
        """Check ``args.out`` is this shard's (or nobody's), and write the manifest that says it is
        grading.

        Refused (:class:`ShardError`): an ``OUT`` that holds another shard, or an unsharded
        gradebook."""
        folder, out, shard = args.submissions.resolve(), args.out.resolve(), args.shard
        out.mkdir(parents=True, exist_ok=True)
        options = {
            key: value for key, value in sorted(vars(args).items()) if key not in NOT_COMPARED
        }
        names = list(submission_paths(folder))
        record = provenance(assemble.Snapshot()) | {
            "shard": [shard.index, shard.count],
            "state": "grading",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": platform.node(),
            "submissions": str(folder),
            "options": json.loads(json.dumps(options, default=str)),
            "folder_names": names,
            "share": [name for name in names if shard_of(name, shard.count) == shard.index],
            "rows": None,
        }
        try:
            os.close(os.open(out / MANIFEST, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            held = read_manifest(out)
            if held["shard"] != record["shard"]:
                raise ShardError(
                    f"{out} holds shard {held['shard'][0]}/{held['shard'][1]}, not {shard}: give "
                    f"each shard its own --out (for example {out.parent / f'shard-{shard.index}'})"
                ) from None
        else:
            if (out / "grades.csv").exists():
                (out / MANIFEST).unlink()
                raise ShardError(
                    f"{out} holds a gradebook graded without --shard: give this shard its own --out"
                )
        write_manifest(out, record)
        return cls(out, folder, shard, record)

    def finish(self, submissions: list) -> None:
        """Record the graded rows: the manifest now says ``done``, and the merge takes this
        shard."""
        self.record.update(
            state="done",
            finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            rows=[row(submission, self.folder) for submission in submissions],
        )
        write_manifest(self.out, self.record)
