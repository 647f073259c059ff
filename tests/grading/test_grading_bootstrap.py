"""The grader process's first code (brrr/grading/bootstrap.py, run as ``python -I -B -c
GRADER_BOOTSTRAP``): it imports brrr from the bytes on its standard input only, never from disk, and
refuses what it cannot read."""

import base64
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brrr.grading import assemble, bootstrap

pytestmark = pytest.mark.device_independent


def _run(payload: bytes, *args: str) -> subprocess.CompletedProcess:
    """The bootstrap as the gradebook runs it, in an empty working folder, with ``payload`` on its
    input."""
    return subprocess.run(
        [sys.executable, "-I", "-B", "-c", assemble.GRADER_BOOTSTRAP, *args],
        input=payload,
        capture_output=True,
        timeout=300,
        cwd=Path(assemble.__file__).anchor,
    )


def _payload(files: dict[str, str]) -> bytes:
    return (
        json.dumps(
            {name: base64.b64encode(text.encode()).decode() for name, text in files.items()}
        ).encode()
        + b"\n"
    )


def test_the_bootstrap_is_the_module_and_compiles():
    assert assemble.GRADER_BOOTSTRAP == Path(bootstrap.__file__).read_text()
    compile(assemble.GRADER_BOOTSTRAP, "<bootstrap>", "exec")


def test_the_finder_serves_brrr_from_its_files_only():
    finder = bootstrap.Finder(
        {"brrr/__init__.py": "", "brrr/grading/__init__.py": "", "brrr/grading/server.py": ""}
    )
    assert finder.find_spec("json") is None  # anything else is left to the environment's finders
    package = finder.find_spec("brrr.grading")
    assert package.origin == bootstrap.ROOT + "brrr/grading/__init__.py"
    assert package.submodule_search_locations == [bootstrap.ROOT + "brrr/grading"]
    assert finder.find_spec("brrr.grading.server").submodule_search_locations is None
    with pytest.raises(ModuleNotFoundError, match="in the grader"):
        finder.find_spec("brrr.ceilings")
    with pytest.raises(OSError, match="not part of the grader"):
        bootstrap.Loader({}, "brrr/x.py").get_data("/elsewhere/brrr/x.py")


def test_the_bootstrap_refuses_input_that_is_not_its_payload():
    done = _run(b"not json\n", "--lab", "02-fuse-it", "--socket", "unused")
    assert done.returncode != 0
    assert b"JSONDecodeError" in done.stderr


def test_a_module_missing_from_the_payload_is_not_read_from_disk():
    """This environment can import brrr (an editable install, a checkout): the grader still may
    not."""
    done = _run(
        _payload({"brrr/__init__.py": "import brrr.ceilings\n", "brrr/grading/__init__.py": ""}),
        "--lab",
        "02-fuse-it",
        "--socket",
        "unused",
    )
    assert done.returncode != 0
    assert b"No module named 'brrr.ceilings' in the grader" in done.stderr


def test_the_bootstrap_runs_the_server_from_the_snapshot_in_memory():
    done = _run(
        assemble.Snapshot().grader_payload() + b"\n", "--lab", "no-such-lab", "--socket", "unused"
    )
    assert done.returncode != 0
    assert b"unknown lab 'no-such-lab'" in done.stderr
    assert f'File "{bootstrap.ROOT}brrr/grading/server.py"'.encode() in done.stderr


def test_a_practice_grader_whose_notebook_is_killed_leaves_no_socket_folder(tmp_path):
    """nbval's kernels end killed, before the client's temporary folder is removed: each run of the
    lab solutions left a /tmp/brrr-grader-* folder holding a socket. The grader, told by its closed
    input that the notebook is gone, removes both."""
    script = (
        "import os\n"
        "from brrr.grading.client import Grader\n"
        "grade = Grader('02-fuse-it'); grade._connect()\n"
        "print(grade._practice.folder.name, flush=True)\n"
        "os._exit(0)  # as a killed kernel: no atexit, no finalizer\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    folder = Path(done.stdout.strip())
    assert folder.name.startswith("brrr-grader-"), done.stdout + done.stderr
    deadline = time.monotonic() + 30
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not folder.exists(), sorted(folder.iterdir())
