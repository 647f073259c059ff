"""Triton kernels the book teaches, in one copy shared by notebooks, tests and benchmarks.

| module      | kernels                                                          |
|-------------|------------------------------------------------------------------|
| pointwise   | ``cos_cos`` (the essay's fusion example), ``bias_gelu_scale``    |
| softmax     | ``softmax``: a fused row-wise softmax, one program per row       |
| matmul      | ``tiled_matmul``: output tiles, a loop over K, float32 sums       |

Each module holds the ``@triton.jit`` kernel, a Python wrapper that allocates the
output and launches it, and a plain-torch reference the kernel is checked against.
The traffic model (bytes each kernel must read and write) is written beside the
kernel, as the Triton tutorials do.

On a machine without a GPU, :mod:`brrr.device` switches on Triton's interpreter
before the kernels are defined, so the same code runs (slowly, on numpy) on a CPU.
Block sizes are chosen per device: large blocks and small grids in the
interpreter, which pays about 0.6 ms per program instance.
"""
