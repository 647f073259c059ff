"""Grade a lab on Gradescope: the autograder bundle, and what it runs for each submission.

    python -m brrr.grading gradescope --lab 02-fuse-it --out autograder.zip [-- GRADEBOOK OPTIONS]

The zip holds what Gradescope's autograder specification asks for at its root
(``setup.sh``, ``run_autograder``) with the pinned ``requirements.txt`` and brrr's
source, solutions included (``brrr-source/``), from a checkout or from an
installed brrr (:mod:`brrr.grading.bundle`). Gradescope runs ``setup.sh`` once
as root when it builds the image: Python 3.11 or later from the base image
(choose Ubuntu 24.04), torch 2.13.0's CPU build (Gradescope has no GPU: the
default build from PyPI would pull CUDA's libraries), the pinned requirements,
brrr, and an unprivileged user, ``brrr-grader``, that grades.

For each submission, ``run_autograder`` runs ``python -m brrr.grading
gradescope-run`` (:func:`run`): it takes the notebook from
``/autograder/submission`` (the one submitted, or the one named after the lab),
grades it with the same gradebook as ``python -m brrr.grading`` (as
``brrr-grader``: as root, a notebook could read the gradebook's memory and forge
its record), with the options given after ``--`` when the bundle was built, and
writes ``/autograder/results/results.json``: one test per check (score 1 or 0 of
1, the grader's message as its output), the total, and the student's feedback
file as the output. A fault of the grader (it could not start, or could not read
its record back) writes no results: Gradescope then shows the run as failed, and
the instructor can grade it again, instead of a 0.

Isolation: on Gradescope every submission runs in its own container, created
for it and thrown away after it, so no submission reaches another's files. Where
the gradebook makes a sandbox of its own (``brrr.grading.sandbox``) and the
container cannot (no user namespaces), the gradebook is run with
``--no-sandbox`` and the instructor's output says so: the container is then the
isolation. ``BRRR_AUTOGRADER_ROOT`` (default ``/autograder``),
``BRRR_AUTOGRADER_PYTHON`` and ``BRRR_AUTOGRADER_USER`` move it elsewhere: the
tests run the bundle in a folder of their own.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

from brrr import __version__, labs
from brrr.grading import assemble, bundle, shards
from brrr.grading.bundle import SOURCE

ROOT_VARIABLE = "BRRR_AUTOGRADER_ROOT"
PYTHON_VARIABLE = "BRRR_AUTOGRADER_PYTHON"
USER_VARIABLE = "BRRR_AUTOGRADER_USER"
GRADER_USER = "brrr-grader"
VENV = "brrr-venv"  # under the root: setup.sh's environment
TORCH = "torch==2.13.0"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (brrr {version}).
# Made by `python -m brrr.grading gradescope`; see chapters/grading-a-course.md in brrr's book.
set -euo pipefail
ROOT="${{{root_variable}:-/autograder}}"
SOURCE="$ROOT/source"
apt-get update -q && apt-get install -y -q python3 python3-venv bubblewrap
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {{
    echo "brrr needs Python 3.11 or later: choose Gradescope's Ubuntu 24.04 base image" >&2
    exit 1; }}
python3 -m venv "$ROOT/{venv}"
PIP="$ROOT/{venv}/bin/python -m pip install --quiet --no-cache-dir"
# Gradescope has no GPU: torch's CPU build (PyPI's default would pull CUDA's libraries, gigabytes of
# them).
$PIP --index-url {torch_index} {torch}
$PIP -r "$SOURCE/requirements.txt"
$PIP --no-deps "$SOURCE/{source}"
id -u {user} >/dev/null 2>&1 || useradd --create-home --shell /usr/sbin/nologin {user}
chmod -R a+rX "$ROOT/{venv}" "$SOURCE"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for each submission: it grades /autograder/submission's notebook as {lab}
# with brrr's gradebook and writes /autograder/results/results.json (brrr {version}, grading code
# {code}). Made by `python -m brrr.grading gradescope`; the gradebook's options are the ones given
# after `--` then.
set -uo pipefail
ROOT="${{{root_variable}:-/autograder}}"
PYTHON="${{{python_variable}:-$ROOT/{venv}/bin/python}}"
cd "$ROOT"
exec "$PYTHON" -m brrr.grading gradescope-run --root "$ROOT" --lab {lab} -- {options}
"""


def build(lab: str, out: Path, options: list[str], root: Path | None = None) -> list[str]:
    """Write the autograder zip for ``lab`` to ``out``; the names it holds. ``root``: the folder
    that holds brrr (a checkout, or site-packages where brrr is installed), this brrr's unless
    given."""
    labs.module(lab)  # an unknown lab is refused before anything is written
    root = assemble.PACKAGE_ROOT if root is None else root
    files = bundle.source_files(root)
    code = shards.code_fingerprint(assemble.Snapshot())[:16]
    fields = dict(
        version=__version__, root_variable=ROOT_VARIABLE, venv=VENV, user=GRADER_USER, source=SOURCE
    )
    scripts = {
        "setup.sh": SETUP_SH.format(torch=TORCH, torch_index=TORCH_INDEX, **fields),
        "run_autograder": RUN_AUTOGRADER.format(
            lab=lab,
            code=code,
            python_variable=PYTHON_VARIABLE,
            options=shlex.join(options),
            **fields,
        ),
        "requirements.txt": bundle.requirements(root),
        **bundle.written_files(root, files),
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in scripts.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            executable = name in ("setup.sh", "run_autograder")
            info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            archive.writestr(info, text, zipfile.ZIP_DEFLATED)
        for name, path in files.items():
            archive.write(path, name)
        names = archive.namelist()
    Path(out).write_bytes(buffer.getvalue())
    return names


# ------------------------------------------------------------ in the container, for each submission


def choose_notebook(folder: Path, lab: str) -> tuple[Path | None, str]:
    """The submitted notebook to grade, or None and what to tell the student."""
    found = (
        sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        if folder.is_dir()
        else []
    )
    named = [p for p in found if p.name == f"{lab}.ipynb"]
    if len(found) == 1 or len(named) == 1:
        return (found[0] if len(found) == 1 else named[0]), ""
    if not found:
        return None, f"No notebook (.ipynb) was submitted. Submit your {lab}.ipynb."
    listed = ", ".join(str(p.relative_to(folder)) for p in found[:10])
    return None, f"{len(found)} notebooks were submitted ({listed}): submit one, named {lab}.ipynb."


def sandbox_flags(options: list[str]) -> tuple[list[str], str]:
    """Flags the gradebook needs in this container, and what to tell the instructor about isolation:
    the gradebook's own sandbox where bwrap can make one here
    (:func:`brrr.grading.sandbox.problem`), else ``--no-sandbox``, Gradescope's container then
    being the only isolation."""
    from brrr.grading import assemble, sandbox

    container = "Gradescope's container, one per submission, is the isolation."
    if "--no-sandbox" in options:
        return [], f"The bundle was built with --no-sandbox: {container}"
    why = sandbox.problem(sandbox.layout(assemble.CHECKOUT))
    if why is None:
        return (
            [],
            "The gradebook ran each notebook in its bubblewrap sandbox, inside Gradescope's "
            "container.",
        )
    return [
        "--no-sandbox"
    ], f"This container cannot make a sandbox ({why}), so --no-sandbox: {container}"


def grader_account() -> tuple[dict, str]:
    """subprocess arguments that run the gradebook as the grading user, and a note where it
    cannot."""
    if os.geteuid() != 0:
        return {}, ""
    name = os.environ.get(USER_VARIABLE, GRADER_USER)
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        return {}, (
            f"There is no user {name!r}, so the notebook was graded as root, where it could read "
            "the gradebook's memory and forge its record: setup.sh creates the user."
        )
    return {
        "user": account.pw_uid,
        "group": account.pw_gid,
        "extra_groups": [],
        "home": account.pw_dir,
    }, ""


def test_results(row: dict, checks: list[str]) -> list[dict]:
    """One Gradescope test per check: 1 point if it passed, and the grader's message."""
    tests = []
    for number, check in enumerate(checks, start=1):
        record = row["results"].get(check)
        passed = record is not None and record.get("passed") is True
        if check in row.get("timed_out", []):
            text = (
                "Timed out, scored 0: its grader cell ran longer than the time allowed per cell "
                "and was interrupted. Grading stopped there."
            )
            text += f"\n{record.get('message', '')}".rstrip() if record else ""
        elif record is None:
            text = (
                "Not run, scored 0: the grader never received this check (its grader cell did not "
                "run, or the notebook stopped before it). Run the notebook from the top in a fresh "
                "kernel to see why."
            )
        else:
            text = str(record.get("message", "")).rstrip() or ("passed" if passed else "failed")
        tests.append(
            {
                "name": check,
                "number": str(number),
                "score": 1.0 if passed else 0.0,
                "max_score": 1.0,
                "status": "passed" if passed else "failed",
                "output": text,
                "visibility": "visible",
            }
        )
    return tests


def results(row: dict, checks: list[str], feedback: str, extra: dict) -> dict:
    """results.json for one graded row, in Gradescope's format."""
    tests = test_results(row, checks)
    return {
        "score": sum(test["score"] for test in tests),
        "execution_time": round(row["seconds"]),
        "output": feedback,
        "output_format": "md",
        "test_output_format": "text",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"status": row["status"], "lab": row["lab"]} | extra,
    }


def refusal(lab: str, message: str) -> dict:
    """results.json for a submission that cannot be graded (no notebook): 0, and what to do."""
    return {
        "score": 0.0,
        "output": message,
        "output_format": "md",
        "tests": [],
        "extra_data": {"lab": lab},
    }


def _write_results(root: Path, record: dict) -> None:
    folder = root / "results"
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / ".results.json.partial"
    partial.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(partial, folder / "results.json")


def run(root: Path, lab: str, options: list[str]) -> int:
    """Grade the submission under ``root`` as ``lab`` and write ``root/results/results.json``; the
    exit status for run_autograder (1 where the grader, not the student, failed: no results
    written)."""
    notebook, problem = choose_notebook(root / "submission", lab)
    if notebook is None:
        print(problem)
        _write_results(root, refusal(lab, problem))
        return 0
    work = root / "brrr-grading"
    shutil.rmtree(work, ignore_errors=True)
    (work / "submissions").mkdir(parents=True)
    shutil.copyfile(notebook, work / "submissions" / f"{lab}.ipynb")
    flags, isolation = sandbox_flags(options)
    account, account_note = grader_account()
    if account:
        shutil.chown(work, account["user"], account["group"])
        shutil.chown(work / "submissions", account["user"], account["group"])
    out = work / "out"
    command = [
        sys.executable,
        "-m",
        "brrr.grading",
        str(work / "submissions"),
        "--out",
        str(out),
        "--lab",
        lab,
    ]
    command += ["--shard", "1/1", *options, *flags]
    env = dict(os.environ, HOME=account.pop("home", os.environ.get("HOME", str(work))))
    print(f"{isolation} {account_note}".strip(), flush=True)
    print("$ " + shlex.join(command), flush=True)
    finished = subprocess.run(command, cwd=work, env=env, **account)
    try:
        manifest = shards.read_manifest(out)
        (row,) = manifest["rows"] or [None]
    except (shards.ShardError, ValueError):
        row = None
    if (
        finished.returncode not in (0, 3, 5)
        or row is None
        or row["status"] in ("grader-error", "not graded")
    ):
        print(
            f"the gradebook could not grade this submission (exit status {finished.returncode}): "
            "not the student's"
        )
        return 1
    feedback = (out / "feedback" / f"{row['slug']}.md").read_text(encoding="utf-8")
    extra = {"brrr": manifest["brrr"], "code": manifest["code"], "isolation": isolation}
    _write_results(root, results(row, manifest["checks"][lab], feedback, extra))
    print(
        f"{row['status']}: {sum(1 for r in row['results'].values() if r.get('passed') is True)} "
        "check(s) passed"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m brrr.grading gradescope",
        description=__doc__.split("\n\n")[0],
        allow_abbrev=False,
    )
    parser.add_argument(
        "--lab", required=True, help=f"the lab it grades ({', '.join(sorted(labs.LABS))})"
    )
    parser.add_argument("--out", type=Path, required=True, help="the zip to write (autograder.zip)")
    parser.add_argument(
        "options", nargs="*", help="after --: options for the gradebook (--cell-timeout 300 ...)"
    )
    args = parser.parse_args(argv)
    if args.lab not in labs.LABS:
        parser.error(f"unknown lab {args.lab!r}; the labs are {', '.join(sorted(labs.LABS))}")
    try:
        names = build(args.lab, args.out, args.options)
    except bundle.NoSource as error:
        print(f"no bundle written: {error}", file=sys.stderr)
        return 4
    print(
        f"{args.out}: {len(names)} files; upload it as the assignment's autograder (Ubuntu 24.04 "
        "base image)"
    )
    return 0


def run_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m brrr.grading gradescope-run", allow_abbrev=False
    )
    parser.add_argument(
        "--root", type=Path, default=Path(os.environ.get(ROOT_VARIABLE, "/autograder"))
    )
    parser.add_argument("--lab", required=True)
    parser.add_argument("options", nargs="*", help="after --: options for the gradebook")
    args = parser.parse_args(argv)
    return run(args.root.resolve(), args.lab, args.options)
