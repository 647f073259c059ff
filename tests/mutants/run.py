"""Plant each bug of tests/mutants/mutants.toml in a scratch copy, one at a time, and run the tests
that must catch it: ``make mutants`` (outside ``make test``). Exit status 1 if any mutant survived
or could not be tried.

    python tests/mutants/run.py                 every mutant
    python tests/mutants/run.py --only TEXT...  those whose names contain one of the texts
    python tests/mutants/run.py --kind KIND...  those of these kinds (the list's ``kind``, exactly)
    python tests/mutants/run.py --baseline      also run each mutant's tests on the unplanted copy
                                                first (a test that fails there catches nothing)
    python tests/mutants/run.py --list          the table of mutants, nothing run

A mutant is a search text that occurs exactly once in one file and its replacement: the smallest
edit that plants the bug. The scratch copy holds this checkout's tracked and unignored files; it
runs on this checkout's .venv, with the scratch copy and its ``book/`` first on ``PYTHONPATH``
(both packages are installed editable, from here) and the caches of the Makefile's environment.
Each mutant's tests run with ``-x``: the first failure is a catch. tests/mutants/README.md names
the kinds of bug listed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIST = Path(__file__).with_name("mutants.toml")
FIELDS = {"name", "kind", "file", "search", "replace", "tests"}


@dataclass(frozen=True)
class Mutant:
    name: str  # what the bug is, in a few words
    kind: str  # its class: the list of what got through
    file: str  # the file it is planted in, relative to the checkout
    search: str  # text found exactly once in that file
    replace: str  # what it becomes
    tests: tuple[str, ...]  # pytest node ids (relative to the checkout) that must catch it

    def planted(self, source: str) -> str:
        """``source`` with this mutant planted; ValueError unless the search text occurs exactly
        once."""
        found = source.count(self.search)
        if found != 1:
            raise ValueError(
                f"mutant {self.name!r}: its search text occurs {found} times in {self.file}, "
                "not once"
            )
        return source.replace(self.search, self.replace)


def load(path: Path = LIST) -> list[Mutant]:
    """The mutants listed in ``path``; ValueError for a malformed entry or a name used twice."""
    entries = tomllib.loads(path.read_text()).get("mutant", [])
    mutants = []
    for number, entry in enumerate(entries, 1):
        if set(entry) != FIELDS:
            raise ValueError(
                f"{path.name}, mutant {number}: fields {sorted(entry)}, wanted {sorted(FIELDS)}"
            )
        if not entry["tests"] or entry["search"] == entry["replace"]:
            raise ValueError(
                f"{path.name}, mutant {number} ({entry['name']}): no tests, or no change"
            )
        mutants.append(Mutant(**{**entry, "tests": tuple(entry["tests"])}))
    names = [mutant.name for mutant in mutants]
    if len(set(names)) != len(names):
        raise ValueError(
            f"{path.name}: a name used twice: {sorted(n for n in names if names.count(n) > 1)}"
        )
    return mutants


def scratch_copy(into: Path) -> Path:
    """This checkout's tracked and unignored files, copied under ``into``, with .venv linked in."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    copy = into / "checkout"
    for name in filter(None, (f.decode() for f in files)):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    return copy


def run_tests(copy: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[int, str]:
    """pytest on ``tests`` in ``copy``: its exit status and the last lines it printed."""
    env = {
        **os.environ,
        # book/ too: brrr_book is installed editable from this checkout's book/, and a mutant
        # planted in the scratch copy's book/brrr_book must be the one imported
        "PYTHONPATH": os.pathsep.join([str(copy), str(copy / "book"), str(copy / "tests")]),
        "BRRR_CACHE_DIR": os.environ.get("BRRR_CACHE_DIR", str(ROOT / ".cache" / "brrr")),
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get(
            "TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor")
        ),
    }
    command = [
        str(ROOT / ".venv" / "bin" / "python"),
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:randomly",
    ]
    command += ["-p", "no:cacheprovider", "-o", "addopts=", *tests]
    try:
        done = subprocess.run(
            command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout_s:.0f} s"
    return done.returncode, "\n".join((done.stdout + done.stderr).strip().splitlines()[-3:])


# pytest's exit statuses: 0 all passed, 1 some test failed; anything else (interrupted, a usage
# error, no tests collected) means the mutant was not tried.
PASSED, FAILED = 0, 1


def try_mutant(
    copy: Path, mutant: Mutant, *, baseline: bool, timeout_s: float
) -> tuple[str, float, str]:
    """(verdict, seconds, detail): "caught", "SURVIVED", or "NOT TRIED" with the reason."""
    start = time.monotonic()
    target = copy / mutant.file
    original = target.read_text()
    if baseline:
        status, tail = run_tests(copy, mutant.tests, timeout_s)
        if status != PASSED:
            return (
                "NOT TRIED",
                time.monotonic() - start,
                f"its tests fail unplanted (status {status}): {tail}",
            )
    try:
        target.write_text(mutant.planted(original))
    except ValueError as error:
        return "NOT TRIED", time.monotonic() - start, str(error)
    try:
        status, tail = run_tests(copy, mutant.tests, timeout_s)
    finally:
        target.write_text(original)
    seconds = time.monotonic() - start
    if status == FAILED:
        return "caught", seconds, tail.splitlines()[-1] if tail else ""
    if status == PASSED:
        return "SURVIVED", seconds, tail
    return "NOT TRIED", seconds, f"pytest exit status {status}: {tail}"


def table(mutants: list[Mutant]) -> str:
    return "\n".join(f"{m.name:<50} {m.kind:<28} {m.file}" for m in mutants)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", nargs="+", metavar="TEXT", help="run only the mutants whose names contain a TEXT"
    )
    parser.add_argument(
        "--kind", nargs="+", metavar="KIND", help="run only the mutants of these kinds"
    )
    parser.add_argument(
        "--baseline", action="store_true", help="run each mutant's tests unplanted first"
    )
    parser.add_argument("--list", action="store_true", help="list the mutants and run nothing")
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds allowed to one mutant's tests"
    )
    args = parser.parse_args(argv)
    mutants = load()
    if args.only:
        unknown = [text for text in args.only if not any(text in m.name for m in mutants)]
        if unknown:
            parser.error(f"no mutant's name contains {unknown}; see --list")
        mutants = [m for m in mutants if any(text in m.name for text in args.only)]
    if args.kind:
        unknown = sorted(set(args.kind) - {m.kind for m in mutants})
        if unknown:
            parser.error(f"no mutant of kind {unknown}; see --list")
        mutants = [m for m in mutants if m.kind in args.kind]
    if args.list:
        print(table(mutants))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="brrr-mutants-") as scratch:
        copy = scratch_copy(Path(scratch))
        for mutant in mutants:
            verdict, seconds, detail = try_mutant(
                copy, mutant, baseline=args.baseline, timeout_s=args.timeout
            )
            rows.append((mutant, verdict))
            print(f"{verdict:<9} {seconds:6.1f} s  {mutant.name} [{mutant.kind}]", flush=True)
            if verdict != "caught" or detail:
                print(f"{'':<19}{detail}", flush=True)
    caught = sum(verdict == "caught" for _, verdict in rows)
    print(f"\n{caught} of {len(rows)} mutants caught")
    for mutant, verdict in rows:
        if verdict != "caught":
            print(f"  {verdict}: {mutant.name} ({mutant.file}); tests: {' '.join(mutant.tests)}")
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
