"""What every grading process starts with: private caches and per-user folders, and the student's
kernel.

Each process tree the gradebook starts (a grader, the grader zygote, a
submission's pytest and kernel) gets its own caches and IPython, Jupyter and
matplotlib folders under a private folder, and writes no bytecode: nothing a
grading run does changes a file the integrity watch looks at
(:mod:`brrr.grading.integrity`), and no grading process reads the instructor's
per-user configuration."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from brrr.grading import assemble, sandbox

KERNEL_NAME = "brrr-student"

# Caches and per-user state a process would otherwise share with the instructor and with other
# submissions: each process tree gets its own, under a private folder.
PRIVATE_FOLDERS = {
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "BRRR_CACHE_DIR": "brrr",
    "MPLCONFIGDIR": "matplotlib",
    "IPYTHONDIR": "ipython",
    "JUPYTER_CONFIG_DIR": "jupyter-config",
    "JUPYTER_DATA_DIR": "jupyter-data",
    "JUPYTER_RUNTIME_DIR": "jupyter-runtime",
    "XDG_CACHE_HOME": "cache",
}

# Of those, the caches: the gradebook's own (the instructor's) are never read by a grading process.
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "BRRR_CACHE_DIR")

# ipykernel warns, at every start, that its sockets are TCP without encryption: they are a loopback
# of the kernel's own network namespace in the sandbox, and the warning, printed into every run's
# output, said nothing a reader could act on. Only that warning is silenced (a logging filter at the
# kernel's start).
QUIET_KERNEL = (
    "import logging, sys\n"
    "class _Quiet(logging.Filter):\n"
    "    def filter(self, record):\n"
    "        return 'without encryption' not in record.getMessage()\n"
    "logging.getLogger('IPKernelApp').addFilter(_Quiet())\n"
    "import runpy; sys.argv[0] = 'ipykernel_launcher'\n"
    "runpy.run_module('ipykernel_launcher', run_name='__main__', alter_sys=True)\n"
)


def instructor_caches() -> list[Path]:
    """The cache folders this process's environment names, which grading never reads (see
    integrity)."""
    return [Path(os.environ[name]) for name in CACHE_VARIABLES if os.environ.get(name)]


def grader_env() -> str:
    from brrr.grading.client import GRADER_ENV

    return GRADER_ENV


def private_environment(folder: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment) with caches and per-user state under ``folder``, and no
    bytecode written: nothing a grading run does changes a file the integrity watch looks at."""
    env = dict(os.environ if base is None else base)
    env.pop(grader_env(), None)
    # a graded run records nothing into the checkout (gpu-check sets it)
    env.pop("BRRR_RECORD_REFERENCE", None)
    env.pop("PYTHONSTARTUP", None)  # a file of the instructor's that every IPython kernel would run
    for name in [name for name in env if name.startswith("PYTEST_")]:
        # the instructor's pytest settings (PYTEST_ADDOPTS, PYTEST_PLUGINS, ...) are not nbval's: a
        # --basetemp in PYTEST_ADDOPTS stopped every notebook's run, and every student was given
        # "not run"
        env.pop(name)
    # Nor are the plugins installed beside it: nbval alone is loaded (``-p nbval``), not whatever
    # else the environment holds (pytest-randomly would reorder a notebook's cells; xdist and anyio
    # cost 0.2 CPU-seconds a grading, for nothing).
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for variable, name in PRIVATE_FOLDERS.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        env[variable] = str(folder / name)
    for name, data in font_lists().items():  # so matplotlib need not scan the fonts again (seconds)
        (folder / "matplotlib" / name).write_bytes(data)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("MPLBACKEND", "Agg")
    return env


@functools.cache
def font_lists() -> dict[str, bytes]:
    """matplotlib's font lists, read once, so that no grading process scans the fonts again
    (seconds each): the instructor's cached ones, or, where there are none (a fresh home: CI, a new
    container), ones a child process builds in a folder of its own. Grading writes nothing to the
    instructor's home (matplotlib's own lookup of its cache folder would make one). Nothing calls
    it at import."""
    if importlib.util.find_spec("matplotlib") is None:
        return {}
    home_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "matplotlib"
    cached = sorted(Path(os.environ.get("MPLCONFIGDIR") or home_cache).glob("fontlist-*.json"))
    if cached:
        return {path.name: path.read_bytes() for path in cached}
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run(
            [sys.executable, "-c", "import matplotlib.font_manager"],
            env={**os.environ, "MPLCONFIGDIR": folder},
            capture_output=True,
            timeout=300,
        )
        return {path.name: path.read_bytes() for path in Path(folder).glob("fontlist-*.json")}


def grader_environment(private: Path) -> dict[str, str]:
    env = private_environment(private)
    env.pop(
        "PYTHONPATH", None
    )  # -I ignores it anyway; brrr comes from memory, the rest from the env
    env["TRITON_ALWAYS_COMPILE"] = (
        "1"  # compile the checked source; never load a binary from a cache
    )
    return env


def student_environment(
    socket: Path, folder: Path, jupyter_path: Path, sandboxed: bool
) -> dict[str, str]:
    """The environment of a submission's pytest and kernel, which reach their grader at
    ``socket``."""
    env = private_environment(folder / "private")
    env[grader_env()] = str(socket)
    env["JUPYTER_PATH"] = str(jupyter_path)
    # torch.compile compiles in the student's process, not in a pool of worker processes. Inductor
    # compiles in-process while its pool is still starting and lets the pool go on starting (a torch
    # import in each of up to 32 workers): after the student's call has returned, while the grader
    # times its side, charged to the student (brrr.checks.fairness). A guard, from torch's source:
    # not yet seen on a GPU.
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    if sandboxed:  # the instructor's home and temporary folder are not in the sandbox
        (folder / "private" / "home").mkdir(exist_ok=True)
        env["HOME"], env["TMPDIR"] = str(folder / "private" / "home"), "/tmp"
    return sandbox.environment(env)  # none of the instructor's variables


def kernelspec(folder: Path, student_copy: Path) -> Path:
    """A Jupyter kernel that starts without site hooks, with ``student_copy`` its only brrr
    (:func:`brrr.grading.assemble.kernel_path`); the folder to put on ``JUPYTER_PATH``."""
    path = assemble.kernel_path(student_copy, folder / "path-links")
    spec_dir = folder / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    argv = [sys.executable, "-S", "-c", QUIET_KERNEL, "-f", "{connection_file}"]
    spec = {
        "argv": argv,
        "display_name": "brrr student",
        "language": "python",
        "env": {"PYTHONPATH": ":".join(path), "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return folder / "jupyter"
