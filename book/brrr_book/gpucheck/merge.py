"""Fold the parts' folders into the committed record, ``brrr/data/reference/<gpu>.json``.

Each part's folder (``.ci/gpu-check --out DIR``), or its archive (``DIR.tgz``, as a lease hands it
back), holds ``record/<gpu>.json`` (what its notebooks recorded, every check's verdict),
``part-N.json`` (its log: stages, each notebook's time and verdict, what did not run or was
dropped), ``outputs/<stem>/`` (what each notebook printed and drew) and maybe ``record/traces/``.

The merge starts from the committed file, migrating a first-run file (no ``schema``: figures only)
to schema 2, and lays each part over it in the order given: a section, a check or a notebook
measured again replaces the earlier one, anything not measured again stays with its own stamp. The
ceilings come only from a part that measured them. With ``passed_only`` a notebook that did not pass
adds nothing: not its figures, checks, outputs or entry (its part's log still names it). Nothing is
written until every folder has been read: a bad folder is a clear error and the committed record is
left as it was.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
from pathlib import Path

COMMITTED = Path(__file__).resolve().parents[3] / "brrr" / "data" / "reference"  # the checkout's
SCHEMA = 2  # brrr.reference.SCHEMA (not imported here: brrr.reference imports torch)


class MergeError(ValueError):
    """A folder that is not a part's output, or parts from different GPUs."""


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise MergeError(f"{path} is not readable JSON: {error}") from error
    if not isinstance(data, dict):
        raise MergeError(f"{path} holds no JSON object")
    return data


def unpacked(archive: Path, into: Path) -> Path:
    """The one folder a part's archive holds, unpacked under ``into``."""
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
    except (OSError, tarfile.TarError) as error:
        raise MergeError(f"{archive} is not a readable archive: {error}") from error
    folders = [path for path in into.iterdir() if path.is_dir()]
    if len(folders) != 1:
        raise MergeError(f"{archive} holds {len(folders)} folders, not the one a part writes")
    return folders[0]


def read_part(folder: Path) -> dict:
    """One part's folder: ``{"records": {gpu: data}, "logs": [logs], "outputs": folder|None}``."""
    if not folder.is_dir():
        raise MergeError(
            f"{folder} is not a folder: give the folders that .ci/gpu-check --out wrote"
        )
    records = {path.stem: _read(path) for path in sorted((folder / "record").glob("*.json"))}
    logs = [_read(path) for path in sorted(folder.glob("part-*.json"))]
    if not records and not logs:
        raise MergeError(
            f"{folder} holds neither record/*.json nor part-*.json: not a GPU check part's folder"
        )
    outputs = folder / "outputs"
    return {
        "folder": folder,
        "records": records,
        "logs": logs,
        "outputs": outputs if outputs.is_dir() else None,
    }


def migrated(data: dict) -> dict:
    """A committed record in schema 2: a first-run record (figures, maybe ceilings) gains the empty
    sections."""
    data = dict(data)
    if data.get("schema", 1) > SCHEMA:
        raise MergeError(
            f"the committed record has schema {data['schema']}; this brrr knows {SCHEMA}"
        )
    data["schema"] = SCHEMA
    for key in ("figures", "checks", "notebooks", "parts"):
        data.setdefault(key, {})
    return data


def not_passed(part: dict) -> set[str]:
    """The notebooks a part ran that did not pass."""
    return {
        item["name"]
        for log in part["logs"]
        for stage in log.get("stages", [])
        for item in stage.get("items", [])
        if item["name"].endswith(".ipynb")
        and item.get("verdict") in ("failed", "timed out", "stopped")
    }


def lay_over(
    base: dict, part: dict, gpu: str, outputs_root: Path, leave_out: frozenset = frozenset()
) -> None:
    """Lay one part's record and logs over ``base`` (in place), less what the ``leave_out``
    notebooks recorded."""
    record = part["records"].get(gpu, {})
    for section in ("figures", "checks"):
        entries = record.get(section, {}).items()
        base[section].update({k: v for k, v in entries if v.get("source") not in leave_out})
    if record.get("ceilings"):
        base["ceilings"] = record["ceilings"]
    for log in part["logs"]:
        base["parts"][str(log["part"])] = log
        for stage in log.get("stages", []):
            for item in stage.get("items", []):
                if not item["name"].endswith(".ipynb") or item["name"] in leave_out:
                    continue
                if item.get("verdict") in ("dropped", "not run"):
                    continue  # nothing measured: an earlier run's entry stays
                stem = Path(item["name"]).stem
                saved = (
                    part["outputs"] is not None
                    and (part["outputs"] / stem / "outputs.json").is_file()
                )
                base["notebooks"][item["name"]] = {
                    "seconds": item["seconds"],
                    "verdict": item["verdict"],
                    "part": log["part"],
                    "outputs": f"{outputs_root.name}/{gpu}/{stem}" if saved else None,
                }


def stamp_of(data: dict) -> dict:
    """The record's stamp: the environment of its newest entry, and every commit its entries came
    from."""
    envs = [
        entry.get("env", {})
        for section in ("figures", "checks")
        for entry in data[section].values()
    ]
    envs += [data["ceilings"].get("env", {})] if data.get("ceilings") else []
    envs = [env for env in envs if env]
    if not envs:
        return {}
    newest = max(envs, key=lambda env: env.get("date", ""))
    commits = sorted({env.get("commit", "unknown (recorded before commits were)") for env in envs})
    return {**newest, "commits": commits}


def merge(folders: list[Path], into: Path = COMMITTED, *, passed_only: bool = False) -> Path:
    """Fold the parts in ``folders`` (folders or archives) into ``into/<gpu>.json`` and copy their
    outputs and traces; return the file written."""
    with tempfile.TemporaryDirectory(prefix="gpu-check-merge-") as scratch:
        found = []
        for number, folder in enumerate(map(Path, folders)):
            if folder.is_file():
                folder = unpacked(folder, Path(scratch) / str(number))
            found.append(folder)
        return _merge([read_part(folder) for folder in found], into, passed_only)


def _merge(parts: list[dict], into: Path, passed_only: bool) -> Path:
    gpus = sorted({gpu for part in parts for gpu in part["records"]})
    if len(gpus) != 1:
        found = ", ".join(gpus) or "none (no part recorded anything)"
        raise MergeError(f"the parts must come from one GPU; their records name: {found}")
    gpu = gpus[0]
    target = into / f"{gpu}.json"
    base = migrated(_read(target) if target.exists() else {})
    outputs_root = into / "outputs"
    left_out = {id(part): frozenset(not_passed(part) if passed_only else ()) for part in parts}
    for part in parts:
        lay_over(base, part, gpu, outputs_root, left_out[id(part)])
    base["stamp"] = stamp_of(base)
    for part in parts:
        stems = {Path(name).stem for name in left_out[id(part)]}
        if part["outputs"] is not None:
            folders = sorted(path for path in part["outputs"].iterdir() if path.is_dir())
            for folder in (path for path in folders if path.name not in stems):
                destination = outputs_root / gpu / folder.name
                shutil.rmtree(destination, ignore_errors=True)
                shutil.copytree(folder, destination)
        traces = part["folder"] / "record" / "traces"
        if traces.is_dir():
            shutil.copytree(traces, into / "traces", dirs_exist_ok=True)
    into.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".json.partial")
    partial.write_text(json.dumps(base, indent=2, sort_keys=True) + "\n")
    partial.replace(target)
    return target


def summary(data: dict) -> list[str]:
    """What a merged record proves, in lines: checks by verdict, notebooks by verdict, parts,
    commits."""
    lines = []
    for section, what in (("checks", "checks"), ("notebooks", "notebooks")):
        counts: dict[str, int] = {}
        for entry in data.get(section, {}).values():
            counts[entry.get("verdict", "?")] = counts.get(entry.get("verdict", "?"), 0) + 1
        lines.append(
            f"{what}: " + (", ".join(f"{n} {word}" for word, n in sorted(counts.items())) or "none")
        )
    for number, log in sorted(data.get("parts", {}).items()):
        state = "passed" if log.get("passed") else "did not pass"
        lines.append(
            f"part {number}: {state} in {log.get('seconds', 0):.0f} s "
            f"of {log.get('limit_s', '?')} s"
        )
    lines.append(f"commits: {', '.join(data.get('stamp', {}).get('commits', [])) or 'unknown'}")
    return lines
