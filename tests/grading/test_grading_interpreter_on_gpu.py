"""On a GPU the grader interprets a student's kernel first (to check its bounds) in a process that
imported triton for the GPU. There, triton.language's own jit functions (tl.max, tl.sum, x.sum(),
the reductions' combine functions) are JITFunctions, which an interpreted kernel cannot call: every
Lab 3 and Lab 5 solution failed `make gpu-check` on an H100 with "Cannot call @triton.jit'd outside
of the scope of a kernel". This runs the same grading in such a process, here on the CPU."""

import os
import subprocess
import sys

from conftest import ROOT

SCRIPT = r"""
import os, sys
os.environ.pop("TRITON_INTERPRET", None)
import triton  # imported as on a GPU node: no interpreter
import triton.language as tl
from triton.runtime.jit import JITFunction
assert isinstance(tl.max, JITFunction), (
    "triton was imported for the interpreter: the test tests nothing")
sys.path.insert(0, sys.argv[1])
import brrr.device
# On a CPU brrr.device saw triton imported first and made its jit functions interpret for good; a
# GPU node never does (its kernels compile), so put them back to stand in for one.
if brrr.device._restore_language is not None:
    brrr.device._restore_language()
assert isinstance(tl.max, JITFunction) and type(tl.tensor.sum) is JITFunction
from brrr.grading.client import LocalStudent
from brrr.labs.flash_attention import checks as flash_attention
from brrr.labs.one_pass import checks as one_pass
from brrr.labs.tile_it import checks as tile_it
from lab_fixtures import load_module
softmax = load_module("03-one-pass", "correct_softmax").softmax
layer_norm = load_module("03-one-pass", "correct_layer_norm").layer_norm
matmul = load_module("05-tile-it", "correct").matmul
attention = load_module("06-flash-attention", "correct").attention
cases = [(one_pass, softmax, "softmax_correct"),
         (one_pass, layer_norm, "layer_norm_correct"),
         (tile_it, matmul, "correct"),
         (flash_attention, attention, "correct")]
for module, function, check in cases:
    print(check, module.grade(check, LocalStudent(function, forked=False))[:60])
assert isinstance(tl.max, JITFunction) and type(tl.tensor.sum) is JITFunction, "not put back"
"""


def test_kernels_calling_tl_jit_functions_are_interpreted_where_triton_was_imported_for_a_gpu():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT / "tests")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.count("match") == 4, result.stdout


CPU_SCRIPT = r"""
import os
os.environ.pop("TRITON_INTERPRET", None)
# imports triton, without the interpreter
from torch.utils.flop_counter import FlopCounterMode  # noqa: F401
import torch
from brrr.kernels import softmax
x = torch.randn(7, 17)
torch.testing.assert_close(softmax.softmax(x), torch.softmax(x, dim=-1))
print("interpreted")
"""


def test_on_a_cpu_kernels_work_when_torch_imported_triton_before_brrr():
    """test_opclasses (torch.utils.flop_counter imports triton) run before test_fusion_benchmark in
    one worker failed the softmax kernel with the message above: brrr.device came second and set the
    interpreter for kernels defined later, while tl.max stayed a compiled JITFunction."""
    result = subprocess.run(
        [sys.executable, "-c", CPU_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**__import__("os").environ, "BRRR_DEVICE": "cpu"},
    )
    assert result.returncode == 0 and "interpreted" in result.stdout, result.stderr[-3000:]


THEN_COMPILED = r"""
import os, sys
os.environ.pop("TRITON_INTERPRET", None)
import torch
import triton  # imported as on a GPU node: no interpreter
import brrr.device
if brrr.device._restore_language is not None:
    brrr.device._restore_language()  # as above: stand in for a GPU node
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource
from brrr.checks import core, kernels

add_stages = CUDABackend.add_stages
CUDABackend.add_stages = lambda self, stages, options, language: (
    add_stages(self, stages, options, language), stages.update(cubin=lambda ptx, metadata: b""))
SOURCE = '''
def gated_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    tl.store(out_ptr + offsets, x * tl.sigmoid(x), mask=offsets < n)
'''
x, out = torch.randn(300), torch.empty(300)
vector = dict(offset=0, shape=[300], stride=[1], dtype="float32")
recipe = {"launches": [{"kernel": "gated_kernel", "grid": [3, 1, 1], "options": {},
                        "args": {"x_ptr": dict(tensor="x", **vector),
                                 "out_ptr": dict(tensor="out", **vector),
                                 "n": {"value": 300}, "BLOCK": {"value": 128}}}],
          "sources": {"gated_kernel": SOURCE.strip() + "\n"}, "constants": {}}
with core._interpreter_on():  # the bounds check: interpreted, tl.sigmoid a jit function it calls
    interpreted = kernels.Built(recipe["sources"], {}, interpreted=True)
    kernels.replay(recipe, interpreted, {"x": x, "out": out})
torch.testing.assert_close(out, x * torch.sigmoid(x))
import triton.language as tl
left = [name for name, value in vars(tl.core).items()
        if getattr(value, "__name__", "") == "<lambda>"]
assert not left, f"triton.language.core left patched for the interpreter: {left}"
compiled = kernels.Built(recipe["sources"], {}, interpreted=False).kernels["gated_kernel"]
signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
triton.compile(ASTSource(fn=compiled, signature=signature, constexprs={"BLOCK": 128}),
               target=GPUTarget("cuda", 90, 32))
print("compiled after interpreted")
"""


def test_a_kernel_interpreted_then_compiled_in_one_process_compiles(tmp_path):
    """On an H200 (triton 3.6) every Lab 2, 3, 5 and 6 solution failed its grader with
    "CompilationError: 'triton._C.libtriton.ir.value' object has no attribute 'dtype'" at the
    kernel's first operator: the interpreted bounds check called a jit function (tl.sigmoid), whose
    call left triton.language patched for the interpreter, and the compiler met it there
    (brrr/interpreter.py). Compiled to PTX here, no GPU, from the source as the grader compiles it
    (TRITON_ALWAYS_COMPILE: a cached binary would hide the fault)."""
    env = {**os.environ, "TRITON_ALWAYS_COMPILE": "1", "TRITON_CACHE_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", THEN_COMPILED],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 0 and "compiled after interpreted" in result.stdout, result.stderr[
        -3000:
    ]
