"""Kernels forked from the zygote (book/brrr_book/warm/): fresh globals, their own pids, interrupts,
shutdown, and the normal launch when the zygote cannot start; the zygote exits when closed. Tiny
notebooks and a zygote that preloads only pyplot (``BRRR_WARM_PRELOAD``): what is tested is the
forking, not the imports."""

import os
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from brrr_book.warm import KERNELSPECS, jupyter_path, provisioner

pytestmark = pytest.mark.device_independent


@pytest.fixture
def warm(monkeypatch):
    """The warm kernelspec on JUPYTER_PATH, a zygote of this test's own; closed at the end."""
    monkeypatch.setenv("JUPYTER_PATH", jupyter_path())
    monkeypatch.setenv("BRRR_WARM_PRELOAD", "numpy.random,matplotlib.pyplot")  # not torch: cheap
    monkeypatch.setattr(provisioner, "_zygote", None)
    monkeypatch.setattr(provisioner, "_zygote_failed", False)
    yield
    if provisioner._zygote is not None:
        zygote = provisioner._zygote.process
        provisioner._zygote.close()
        assert zygote.poll() is not None


def execute(folder: Path, *sources: str, **options) -> list[list[dict]]:
    """Run the cells in a kernel started in ``folder``; each cell's outputs."""
    folder.mkdir(exist_ok=True)
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source) for source in sources]
    )
    NotebookClient(
        notebook, kernel_name="python3", resources={"metadata": {"path": str(folder)}}, **options
    ).execute()
    return [cell.outputs for cell in notebook.cells]


def printed(outputs: list[dict]) -> str:
    return "".join(output.get("text", "") for output in outputs)


WHO = "import os; print(os.getpid(), os.getppid(), os.getcwd())"
SEEDS = "import numpy; print(numpy.random.rand())"  # seeded in the zygote, on import


def test_each_kernel_is_forked_fresh_in_its_own_folder_and_shut_down(warm, tmp_path):
    first = execute(tmp_path / "a", "x = 1", WHO, SEEDS)
    second = execute(
        tmp_path / "b",
        "print('x' in globals())",
        WHO,
        SEEDS,
        "import matplotlib.pyplot as plt; plt.plot([1]);",
    )
    zygote = provisioner._zygote.process.pid
    pid_a, parent_a, cwd_a = printed(first[1]).split()
    pid_b, parent_b, cwd_b = printed(second[1]).split()
    assert int(parent_a) == int(parent_b) == zygote, "not forked from the zygote"
    assert pid_a != pid_b
    assert printed(second[0]).strip() == "False", "a global of the first kernel is in the second"
    assert printed(first[2]) != printed(second[2]), (
        "numpy's generator starts where the zygote's did"
    )
    assert [output.output_type for output in second[3]] == ["display_data"], (
        "no figure without %matplotlib inline"
    )
    assert (cwd_a, cwd_b) == (str(tmp_path / "a"), str(tmp_path / "b"))
    for pid in (pid_a, pid_b):
        assert not Path(f"/proc/{pid}").exists(), (
            "a kernel, or its zombie, is still there after shutdown"
        )


# A cell that leaves an atexit function and an open file in the notebook's namespace, and an object
# whose finalizer runs only when Python tears its modules down (a module's globals outlive the
# namespace).
AT_THE_END = """
import atexit, sys, types
atexit.register(lambda: open("atexit-ran", "w").close())
unflushed = open("written", "w"); unflushed.write("every byte")
class TornDown:
    def __del__(self):
        open("torn-down", "w").close()
kept = types.ModuleType("kept"); kept.mark = TornDown(); sys.modules["kept"] = kept
"""


def test_a_kernel_ends_as_python_would_less_the_teardown(warm, tmp_path):
    """Tearing down every module a book kernel imported (torch, dynamo, Inductor) took 1.8 CPU-s and
    2.7 s after the shutdown request: the kernel runs its atexit functions (IPython's closes the
    namespace's files), then exits without the teardown."""
    execute(tmp_path, AT_THE_END)
    assert (tmp_path / "atexit-ran").exists(), "the atexit functions did not run"
    assert (tmp_path / "written").read_text() == "every byte", (
        "a file left open in the namespace lost its bytes"
    )
    assert not (tmp_path / "torn-down").exists(), "the kernel tore Python down on the way out"


def test_an_interrupt_stops_a_running_cell(warm, tmp_path):
    outputs = execute(
        tmp_path, "import time; time.sleep(30)", WHO,
        timeout=2, interrupt_on_timeout=True, allow_errors=True,
    )  # fmt: skip
    assert [output.get("ename") for output in outputs[0]] == ["KeyboardInterrupt"]
    assert int(printed(outputs[1]).split()[1]) == provisioner._zygote.process.pid, (
        "the kernel lives on, forked"
    )


def test_without_a_zygote_the_kernel_starts_the_normal_way(warm, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("BRRR_WARM_PRELOAD", "brrr_no_such_module")
    pid, parent, _ = printed(execute(tmp_path, WHO)[0]).split()
    assert int(parent) == os.getpid(), "not launched by this process"
    assert provisioner._zygote is None and provisioner._zygote_failed
    assert "no zygote" in caplog.text


def test_the_suites_book_builds_start_warm_kernels(monkeypatch, tmp_path):
    """As ``make book`` does (its WARM_KERNELS): the build's JUPYTER_PATH starts with the warm
    kernelspec."""
    import conftest

    seen = {}

    def fake_run(command, **kwargs):
        seen.update(kwargs.get("env") or os.environ)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(conftest.subprocess, "run", fake_run)
    conftest.build_book(tmp_path, tmp_path / "_config.yml", tmp_path / "out")
    assert seen["JUPYTER_PATH"].split(os.pathsep)[0] == str(KERNELSPECS)
    assert (KERNELSPECS / "kernels" / "python3" / "kernel.json").is_file()


def test_only_a_launch_like_the_zygotes_own_is_forked():
    """Forked only with the zygote's Python and environment (Jupyter's per-session JPY_ variables
    apart), and only from the process that started it: a process forked from that one must not share
    its socket."""
    zygote = object.__new__(provisioner.Zygote)
    zygote.python, zygote.owner = "/venv/bin/python", os.getpid()
    zygote.environment = provisioner.same_environment(
        {"PATH": "/bin", "JPY_SESSION_NAME": "a.ipynb"}
    )
    command = ["/venv/bin/python", "-m", "ipykernel_launcher", "-f", "kernel.json"]
    assert zygote.fits(
        command, {"PATH": "/bin", "JPY_SESSION_NAME": "b.ipynb", "JPY_PARENT_PID": "1"}
    )
    assert not zygote.fits(command, {"PATH": "/bin", "TORCHINDUCTOR_CACHE_DIR": "/elsewhere"})
    assert not zygote.fits(["/other/python", *command[1:]], {"PATH": "/bin"})
    zygote.owner += 1
    assert not zygote.fits(command, {"PATH": "/bin"})


def test_without_the_entry_point_the_kernels_start_the_normal_way(monkeypatch):
    """Where brrr's install predates the provisioner, the warm kernelspec would name a provisioner
    jupyter_client cannot find (NoSuchKernel for python3): it is left off JUPYTER_PATH, which keeps
    what it had."""
    import importlib.metadata

    assert jupyter_path({}) == str(KERNELSPECS)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **selection: [])
    assert jupyter_path({"JUPYTER_PATH": "/mine"}) == "/mine"
    assert jupyter_path({}) == ""
