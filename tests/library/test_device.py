"""Which device brrr picks, and the sizes it picks for it.

The device is decided in a process that has not imported brrr or triton, with
``torch.cuda.is_available`` faked where a test needs a machine it is not running
on: both branches run on any machine, and the expected values are written out,
not derived from ``brrr.device``'s own conditional. Each such process is forked
from one that imported torch alone (five fresh interpreters took 18.6 s of the
suite, torch's import most of it).
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from brrr import device

PROBE = (
    "import os; from brrr.device import DEVICE, ON_GPU, TRITON_INTERPRETED; "
    "print(DEVICE.type, ON_GPU, os.environ.get('TRITON_INTERPRET'), TRITON_INTERPRETED)"
)


def probe(forced: str | None = None, *, cuda: bool | None = None, hide_gpus: bool = False) -> dict:
    """How to import brrr.device in a new process: its environment and code (``cuda`` fakes what
    torch says about CUDA)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("BRRR_DEVICE", "TRITON_INTERPRET")
    }
    if forced is not None:
        env["BRRR_DEVICE"] = forced
    if hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU for torch, whatever this machine has
    fake = "" if cuda is None else f"import torch; torch.cuda.is_available = lambda: {cuda}; "
    return {"env": env, "code": fake + PROBE}


# Forks a child per probe from a process that imported torch (which initialises no GPU and imports
# no triton): the child takes the probe's environment, runs its code, and leaves its output and
# status.
FORKED = r"""
import json, os, sys, traceback
import torch
assert not any(name.split(".")[0] in ("brrr", "triton") for name in sys.modules), "not fresh"
folder, probes = sys.argv[1], json.loads(sys.argv[2])
found = {}
for name, probe in probes.items():
    out, err = (os.path.join(folder, f"{name}.{stream}") for stream in ("out", "err"))
    pid = os.fork()
    if pid == 0:
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        os.environ.clear()
        os.environ.update(probe["env"])
        code = 0
        try:
            exec(probe["code"], {"__name__": "__main__"})
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    found[name] = [os.waitstatus_to_exitcode(status), open(out).read(), open(err).read()]
print(json.dumps(found))
"""

PROBES = {
    "no GPU": probe(cuda=False),
    "a GPU": probe(cuda=True),
    "cpu forced on a GPU": probe("cpu", cuda=True),
    "cuda forced without a GPU": probe("cuda", hide_gpus=True),
    "a made-up device": probe("tpu"),
}


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    folder = tmp_path_factory.mktemp("device")
    done = subprocess.run(
        [sys.executable, "-c", FORKED, str(folder), json.dumps(PROBES)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    return {name: subprocess.CompletedProcess(name, *found[name]) for name in PROBES}


def test_without_a_gpu_the_triton_interpreter_is_on_before_kernels_exist(probed):
    result = probed["no GPU"]
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cpu", "False", "1", "True"]


def test_with_a_gpu_the_interpreter_stays_off(probed):
    result = probed["a GPU"]
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cuda", "True", "None", "False"]


def test_forcing_cpu_on_a_gpu_machine(probed):
    result = probed["cpu forced on a GPU"]
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cpu", "False", "1", "True"]


def test_forcing_cuda_without_a_gpu_is_a_clear_error(probed):
    result = probed["cuda forced without a GPU"]
    assert result.returncode != 0
    assert (
        "RuntimeError: BRRR_DEVICE=cuda, but torch sees no CUDA device on this machine"
        in result.stderr
    )


def test_bad_forced_device_is_a_clear_error(probed):
    result = probed["a made-up device"]
    assert result.returncode != 0
    assert "BRRR_DEVICE must be 'cpu' or 'cuda', not 'tpu'" in result.stderr


@pytest.mark.parametrize("on_gpu, size, kind", [(False, "small", "cpu"), (True, "large", "gpu")])
def test_per_device_and_device_class_follow_the_device(monkeypatch, on_gpu, size, kind):
    monkeypatch.setattr(device, "ON_GPU", on_gpu)
    assert device.per_device(cpu="small", gpu="large") == size
    assert device.device_class() == kind


def test_far_above_cache_is_not_a_toy_size(monkeypatch):
    monkeypatch.setattr(device, "ON_GPU", False)
    assert device.far_above_cache(4) == 128 * 2**20 // 4  # CPU: 128 MiB, whatever the cache says
    monkeypatch.setattr(device, "ON_GPU", True)
    monkeypatch.setattr(device, "last_level_cache_bytes", lambda: 50 * 2**20)  # an H100's L2
    assert device.far_above_cache(4) == 2**30 // 4  # 8x the L2 is 400 MiB: the 1 GiB floor wins
    assert device.far_above_cache(2) == 2**30 // 2
    monkeypatch.setattr(
        device, "last_level_cache_bytes", lambda: 256 * 2**20
    )  # a GPU with a larger L2
    assert device.far_above_cache(4) == 8 * 256 * 2**20 // 4


@pytest.mark.parametrize(
    "text,expected", [("48K", 48 * 2**10), ("2048K", 2 * 2**20), ("32M", 32 * 2**20), ("junk", 0)]
)
def test_cache_size_parsing(text, expected):
    assert device._parse_cache_size(text) == expected


# ---------------------------------------------------------------- choices per GPU, from its
# properties


@pytest.mark.parametrize(
    "capability, dtype",
    [
        ((7, 5), torch.float16),
        ((7, 0), torch.float16),
        ((8, 0), torch.bfloat16),
        ((8, 6), torch.bfloat16),
        ((9, 0), torch.bfloat16),
    ],
)
def test_bf16_from_ampere_on_fp16_before(capability, dtype):
    assert device.half_precision_dtype(capability) == dtype


def test_a_t4_checks_kernels_without_bf16_and_says_so():
    assert device.kernel_dtypes((7, 5)) == (torch.float32, torch.float16)
    assert device.kernel_dtypes((9, 0)) == (torch.float32, torch.float16, torch.bfloat16)
    note = device.bf16_note((7, 5))
    assert "sm_75" in note and "fp16" in note
    assert device.bf16_note((9, 0)) == ""


def test_memory_bounded_sizes_keep_within_the_gpus_memory():
    t4, h100 = 15_828_320_256, 85_017_362_432  # total_memory as torch reports them
    assert device.memory_bounded(2**28, 64, total_bytes=t4) == (t4 // 2) // 64
    assert device.memory_bounded(2**28, 64, total_bytes=h100) == 2**28
    assert device.memory_bounded(2**28, 64, total_bytes=t4, fraction=0.25) == (t4 // 4) // 64
