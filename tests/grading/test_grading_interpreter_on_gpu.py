"""On a GPU the grader interprets a student's kernel first (to check its bounds) in a process that imported
triton for the GPU. There, triton.language's own jit functions (tl.max, tl.sum, x.sum(), the reductions'
combine functions) are JITFunctions, which an interpreted kernel cannot call: every Lab 3 and Lab 5
solution failed `make gpu-check` on an H100 with "Cannot call @triton.jit'd outside of the scope of a
kernel". This runs the same grading in such a process, here on the CPU."""

import subprocess
import sys

from conftest import ROOT

SCRIPT = r"""
import os, sys
os.environ.pop("TRITON_INTERPRET", None)
import triton  # imported as on a GPU node: no interpreter
import triton.language as tl
from triton.runtime.jit import JITFunction
assert isinstance(tl.max, JITFunction), "triton was imported for the interpreter: the test tests nothing"
sys.path.insert(0, sys.argv[1])
import brrr.device
# On a CPU brrr.device saw triton imported first and made its jit functions interpret for good; a GPU
# node never does (its kernels compile), so put them back to stand in for one.
if brrr.device._restore_language is not None:
    brrr.device._restore_language()
assert isinstance(tl.max, JITFunction) and type(tl.tensor.sum) is JITFunction
from brrr.grading.client import LocalStudent
from brrr.labs.flash_attention import checks as flash_attention
from brrr.labs.one_pass import checks as one_pass
from brrr.labs.tile_it import checks as tile_it
from lab_fixtures import load_module
cases = [(one_pass, load_module("03-one-pass", "correct_softmax").softmax, "softmax_correct"),
         (one_pass, load_module("03-one-pass", "correct_layer_norm").layer_norm, "layer_norm_correct"),
         (tile_it, load_module("05-tile-it", "correct").matmul, "correct"),
         (flash_attention, load_module("06-flash-attention", "correct").attention, "correct")]
for module, function, check in cases:
    print(check, module.grade(check, LocalStudent(function, forked=False))[:60])
assert isinstance(tl.max, JITFunction) and type(tl.tensor.sum) is JITFunction, "not put back"
"""


def test_kernels_calling_triton_language_jit_functions_are_interpreted_where_triton_was_imported_for_a_gpu():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT / "tests")], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.count("match") == 4, result.stdout


CPU_SCRIPT = r"""
import os
os.environ.pop("TRITON_INTERPRET", None)
from torch.utils.flop_counter import FlopCounterMode  # noqa: F401  imports triton, without the interpreter
import torch
from brrr.kernels import softmax
x = torch.randn(7, 17)
torch.testing.assert_close(softmax.softmax(x), torch.softmax(x, dim=-1))
print("interpreted")
"""


def test_on_a_cpu_kernels_work_when_torch_imported_triton_before_brrr():
    """test_opclasses (torch.utils.flop_counter imports triton) run before test_fusion_benchmark in one worker
    failed the softmax kernel with the message above: brrr.device came second and set the interpreter for
    kernels defined later, while tl.max stayed a compiled JITFunction."""
    result = subprocess.run(
        [sys.executable, "-c", CPU_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**__import__("os").environ, "BRRR_DEVICE": "cpu"},
    )
    assert result.returncode == 0 and "interpreted" in result.stdout, result.stderr[-3000:]
