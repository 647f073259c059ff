import os
import subprocess
import sys

import pytest

from brrr import device


def test_cpu_turns_on_the_triton_interpreter_before_kernels_exist():
    if device.ON_GPU:
        pytest.skip("on a GPU the interpreter must stay off; checked by the GPU test below")
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert device.TRITON_INTERPRETED


def test_forcing_cpu_on_any_machine():
    code = "import os; from brrr.device import DEVICE, TRITON_INTERPRETED; print(DEVICE.type, os.environ.get('TRITON_INTERPRET'), TRITON_INTERPRETED)"
    env = {**os.environ, "BRRR_DEVICE": "cpu"}
    env.pop("TRITON_INTERPRET", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["cpu", "1", "True"]


def test_bad_forced_device_is_a_clear_error():
    env = {**os.environ, "BRRR_DEVICE": "tpu"}
    result = subprocess.run([sys.executable, "-c", "import brrr.device"], env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "BRRR_DEVICE must be 'cpu' or 'cuda'" in result.stderr


def test_per_device_picks_by_device():
    chosen = device.per_device(cpu="small", gpu="large")
    assert chosen == ("large" if device.ON_GPU else "small")


def test_far_above_cache_is_not_a_toy_size():
    n = device.far_above_cache(4)
    assert 4 * n >= 256 * 2**20
    if device.ON_GPU:
        assert 4 * n >= 8 * device.last_level_cache_bytes()


@pytest.mark.parametrize("text,expected", [("48K", 48 * 2**10), ("2048K", 2 * 2**20), ("32M", 32 * 2**20), ("junk", 0)])
def test_cache_size_parsing(text, expected):
    assert device._parse_cache_size(text) == expected


def test_device_class_names_the_thresholds_row():
    assert device.device_class() == ("gpu" if device.ON_GPU else "cpu")
