"""The GPU path, checked without a GPU: the book's tiled matmul and the Lab 5 and Lab 6 solutions
compile for an H100 (sm_90, as an H200) and Colab's T4 (sm_75), with the launch options their code
picks on each, and their pipelines fit that GPU's shared memory.

Triton compiles for a named target without a device. It runs in a process of its own, where triton
is imported for a GPU rather than for the interpreter, as on a GPU node. A kernel that does not
lower for a target, or whose options overflow its shared memory, fails here instead of at the first
launch on that GPU. Each kernel is compiled to PTX for its target, less two steps that neither the
lowering nor the shared memory depends on (Triton counts it while lowering to LLVM IR): ptxas
turning PTX into the GPU's machine code (29 of the test's 78 CPU-seconds), and LLVM's -O3 passes
over the lowered IR (15 of the 45 left, on an empty Triton cache; every kernel reported the same
shared memory without them). This is no substitute for `make gpu-check`: nothing runs.
"""

import json
import subprocess
import sys

from conftest import ROOT

# Opt-in shared memory per block (Triton's max_shared_mem), from NVIDIA's tables for each
# architecture. An H200 is an sm_90 like the H100 (the same limits, more memory). An A100 (sm_80,
# 166,912 B) passed too when tried by hand (2026-11-27); it is left out here for the suite's time.
TARGETS = {"H100 (sm_90)": (90, 232_448), "T4 (sm_75)": (75, 65_536)}

SCRIPT = r"""
import importlib.util, json, os, sys
os.environ.pop("TRITON_INTERPRET", None)
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton._C.libtriton import llvm
from triton.backends.nvidia.compiler import CUDABackend

add_stages = CUDABackend.add_stages


def up_to_ptx(self, stages, options, language):  # every stage but ptxas's (the module docstring)
    add_stages(self, stages, options, language)
    stages["cubin"] = lambda ptx, metadata: b""


CUDABackend.add_stages = up_to_ptx
llvm.optimize_module = lambda *args, **kwargs: None  # LLVM's -O3 passes (the module docstring)

root, folder, targets = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def load(name, source, header):
    path = os.path.join(folder, f"{name}.py")
    with open(path, "w") as file:
        file.write("import torch\nimport triton\nimport triton.language as tl\n" + header + source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def solution_cell(notebook, kernel):
    cells = json.load(open(os.path.join(root, "solutions", notebook)))["cells"]
    (cell,) = ["".join(c["source"]) for c in cells if f"def {kernel}(" in "".join(c["source"])]
    return cell.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", "")


def split_options(launch):
    return launch, {k: launch.pop(k) for k in ("num_warps", "num_stages")}


def constexprs(*names):
    return dict.fromkeys(names, "constexpr")


def matmul_args(dtype):
    return {"a_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "out_ptr": f"*{dtype}",
            "M": "i32", "N": "i32", "K": "i32"}


def attention_args(dtype):
    return {"q_ptr": f"*{dtype}", "k_ptr": f"*{dtype}", "v_ptr": f"*{dtype}",
            "out_ptr": f"*{dtype}", "N": "i32", "scale": "fp32",
            **constexprs("HEAD_DIM", "BLOCK_M", "BLOCK_N", "CAUSAL")}


matmul_source = open(os.path.join(root, "brrr", "kernels", "matmul.py")).read()
matmul_source = matmul_source.replace(
    "from brrr.device import ON_GPU, pipeline_stages", "pass  #"
).replace("from __future__ import annotations", "")
results = {}
for gpu, (capability, smem) in targets.items():
    # what the code under test asks of the GPU: its compute capability and its shared memory
    torch.cuda.get_device_capability = lambda *args, c=capability: divmod(c, 10)
    header = f"ON_GPU = True\npipeline_stages = lambda b, most=3: max(1, min(most, {smem} // b))\n"
    tag = str(capability)
    half = "bf16" if capability >= 80 else "fp16"  # tl.dot has no bf16 before Ampere

    def build(what, fn, signature, constants, options):
        compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constants),
                                  target=GPUTarget("cuda", capability, 32), options=options)
        results.setdefault(gpu, []).append([what, compiled.metadata.shared])

    book = load(f"book_{tag}", matmul_source, header)
    tile, options = split_options(book.tile_for(dtypes[half], 128))
    build(f"book tiled matmul {half} 128x128", book.tiled_matmul_kernel,
          matmul_args(half) | constexprs("BLOCK_M", "BLOCK_N", "BLOCK_K", "EXACT_FP32"),
          tile | {"EXACT_FP32": False}, options)

    lab5 = load(f"lab5_{tag}", solution_cell("05-tile-it.ipynb", "matmul_kernel"), header)
    tile, options = split_options(lab5.tile_for(dtypes[half]))
    build(f"Lab 5 solution {half}", lab5.matmul_kernel,
          matmul_args(half) | constexprs(*tile), tile, options)

    lab6_source = solution_cell("06-flash-attention.ipynb", "attention_kernel")
    lab6 = load(f"lab6_{tag}", lab6_source, header)
    for name in ("fp16", "fp32"):  # the causal variant: the full one's code and the mask besides
        blocks, options = split_options(lab6.blocks_for(dtypes[name]))
        build(f"Lab 6 solution {name}, causal", lab6.attention_kernel, attention_args(name),
              blocks | {"HEAD_DIM": 64, "CAUSAL": True}, options)
    if capability == 90:  # the published anchors: an H100 at d = 128
        blocks, options = split_options(lab6.blocks_for(dtypes["fp16"], 128))
        build("Lab 6 solution fp16, d = 128", lab6.attention_kernel, attention_args("fp16"),
              blocks | {"HEAD_DIM": 128, "CAUSAL": False}, options)
print(json.dumps(results))
"""


def test_the_book_and_lab_kernels_compile_to_ptx_for_an_h100_and_a_t4_within_their_shared_memory(
    tmp_path,
):
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT), str(tmp_path), json.dumps(TARGETS)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert result.returncode == 0, f"a kernel did not compile:\n{result.stderr[-4000:]}"
    compiled = json.loads(result.stdout.strip().splitlines()[-1])
    for gpu, (_, shared_memory) in TARGETS.items():
        assert len(compiled[gpu]) == (5 if gpu.startswith("H100") else 4), compiled
        too_big = [(name, shared) for name, shared in compiled[gpu] if shared > shared_memory]
        assert not too_big, f"{gpu}: shared memory past its {shared_memory:,} B: {too_big}"
