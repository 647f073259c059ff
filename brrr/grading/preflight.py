"""Before any submission runs: what keeps this machine, or these paths, from grading.

A missing grader dependency, a kernel that will not start, a submissions folder
with nothing to grade, an output folder that cannot be written or that would be
graded itself: each is refused with a sentence saying what to do, before the
first notebook runs (``python -m brrr.grading`` exits 4, or 2 for a bad path or
option), never found out after grading, as every student's failure or as a
traceback.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from brrr.grading import shards
from brrr.grading.environment import KERNEL_NAME, kernelspec, private_environment


class Refused(ValueError):
    """A path or option that cannot be graded with; the message says why and what to do."""


def paths_problem(folder: Path, out: Path) -> str | None:
    """Why the submissions in ``folder`` cannot be graded into ``out``, in a sentence; None if they
    can. ``out`` is made here where it does not exist, and written to once, to know it can be."""
    folder, out = Path(folder).resolve(), Path(out).resolve()
    if not folder.is_dir():
        return f"{folder} is not a folder"
    if not shards.submission_paths(folder):
        return f"{folder} holds no notebook (*.ipynb, in it or a folder below it): nothing to grade"
    if out == folder or out.is_relative_to(folder):
        return (
            f"--out {out} is inside the submissions folder {folder}: the notebooks the gradebook "
            "writes there would be graded as submissions. Choose an --out outside it"
        )
    if any(folder.is_relative_to(out / name) for name in ("work", "feedback")):
        return (
            f"the submissions folder {folder} is inside {out}'s work or feedback folder, which "
            "grading rewrites: choose another --out"
        )
    try:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(20, "it is a file, not a folder")
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as error:
        return (
            f"--out {out} cannot be written ({error.strerror or error}): choose a folder you can "
            "write to"
        )
    return None


def grader_setup_problem() -> str | None:
    """What keeps this Python from grading anything, or None: checked before any submission runs.

    A missing grader dependency (pytest, nbval, ipykernel, nbformat) or a Jupyter kernel that will
    not start is the grader's fault. Found later, it would read as every student's failure ("the
    grader cell was deleted"), so ``main`` stops first, exits with status 4 and writes no grades."""
    import importlib

    missing = []
    for name in ("pytest", "nbval", "ipykernel", "nbformat", "jupyter_client"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        return (
            f"the gradebook cannot import {', '.join(missing)} in {sys.executable}. "
            "Install the grading extras: pip install 'brrr[grade]'. No submission was graded."
        )
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory(prefix="brrr-kernel-check-") as folder:
        folder = Path(folder)
        specs = KernelSpecManager(
            kernel_dirs=[str(kernelspec(folder, folder / "student") / "kernels")]
        )
        manager = KernelManager(
            kernel_name=KERNEL_NAME,
            kernel_spec_manager=specs,
            connection_file=str(folder / "connection.json"),
        )
        client = None
        try:
            manager.start_kernel(
                env=private_environment(folder / "private")
            )  # as a student's kernel starts
            client = manager.client()
            client.start_channels()
            client.wait_for_ready(timeout=60)
        except Exception as error:  # any failure to start is the grader's, not a student's
            return (
                f"a Jupyter kernel does not start in {sys.executable} ({type(error).__name__}: "
                f"{error}). Reinstall the grading extras: pip install 'brrr[grade]'. No submission "
                "was graded."
            )
        finally:
            if client is not None:
                client.stop_channels()
            if manager.has_kernel:
                manager.shutdown_kernel(now=True)
    return None
