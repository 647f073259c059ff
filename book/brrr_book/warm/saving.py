"""What warm kernels save: execute notebooks as the book build does, with normal and with warm
kernels.

    python -m brrr_book.warm.saving [--runs 3] notebooks/00-your-machine.ipynb
    solutions/02-fuse-it.ipynb ...

Each run executes every notebook given, one after the other in one process (myst-nb's way), in a
child process; its CPU time is that process tree's (user + system, from ``os.wait4``: the kernels,
and with warm kernels the zygote, are all waited for). Runs alternate between the two ways. It
prints the CPU-seconds of each run and, for each notebook, the kinds of output its cells gave
(stdout, stderr, error) where the two ways differ: a warm kernel must print nothing a normal one
does not."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from brrr_book.warm import jupyter_path


def output_kinds(notebook) -> list[list[str]]:
    """Per code cell, the sorted kinds of its outputs: a stream's name, or the output type."""
    kinds = []
    for cell in notebook.cells:
        if cell.cell_type == "code":
            kinds.append(
                sorted({output.get("name", output.output_type) for output in cell.outputs})
            )
    return kinds


def execute(paths: list[str], record: str) -> None:
    """In the child: execute each notebook in its own folder, as myst-nb does; write their output
    kinds."""
    import nbformat
    from nbclient import NotebookClient

    kinds = {}
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        folder = str(Path(path).resolve().parent)
        NotebookClient(notebook, timeout=600, resources={"metadata": {"path": folder}}).execute()
        kinds[path] = output_kinds(notebook)
    Path(record).write_text(json.dumps(kinds))


def run(paths: list[str], warm: bool) -> tuple[float, dict]:
    """(CPU-seconds of the process tree, output kinds per notebook) of one run."""
    env = dict(os.environ)
    if warm:
        env["JUPYTER_PATH"] = jupyter_path(env)
    with tempfile.NamedTemporaryFile(suffix=".json") as record:
        command = [sys.executable, "-m", "brrr_book.warm.saving", "--child", record.name, *paths]
        child = subprocess.Popen(command, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode:
            raise RuntimeError(
                f"executing {paths} {'warm' if warm else 'normally'} failed: {child.returncode}"
            )
        return usage.ru_utime + usage.ru_stime, json.loads(Path(record.name).read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return execute(args.notebooks, args.child)
    seconds = {False: [], True: []}
    kinds = {}
    for _ in range(args.runs):
        for warm in (False, True):
            cpu, kinds[warm] = run(args.notebooks, warm)
            seconds[warm].append(cpu)
            print(f"{'warm' if warm else 'normal':>6}: {cpu:7.1f} CPU-s", flush=True)
    for warm in (False, True):
        print(
            f"{'warm' if warm else 'normal':>6} runs: "
            + ", ".join(f"{s:.1f}" for s in seconds[warm])
            + " CPU-s"
        )
    print(f"saved: {min(seconds[False]) - min(seconds[True]):.1f} CPU-s (fastest against fastest)")
    for path in args.notebooks:
        if kinds[False][path] != kinds[True][path]:
            print(
                f"{path}: output kinds differ\n  normal {kinds[False][path]}\n  warm   "
                f"{kinds[True][path]}"
            )
        else:
            print(f"{path}: the same kinds of output")


if __name__ == "__main__":
    main()
