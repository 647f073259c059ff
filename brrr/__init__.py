"""brrr: measure, model and grade GPU performance for deep learning, from first principles.

The toolkit, the labs and their grader; the book's own machinery (its pages' modules, the claims
ledger, its figures and explorers, Sphinx extension, warm kernels, Colab cell and GPU check) is
``brrr_book``, in ``book/``, not shipped here.
Each module has one job:

| module     | job                                                         |
|------------|-------------------------------------------------------------|
| device     | which device we run on; per-device problem sizes            |
| interpreter| Triton's interpreter, mended where the releases in use break it |
| timing     | ``bench()``: honest timings on GPU and CPU                  |
| units      | formatting numbers with their units                         |
| stamp      | the device/versions/date line printed beside every number   |
| column     | printed text that fits the book's 100-character column      |
| cache      | where per-user measurements are kept                        |
| ceilings   | this machine's measured roofs: bandwidth, FLOP/s, overhead  |
| roofline   | arithmetic intensity, ridge point, predicted time, regime   |
| counting   | FLOP and byte counts of common ops                          |
| essay      | figures quoted from Horace He's essay, never measured here  |
| reference  | GPU reference figures in brrr/data/reference/ (from gpu-check) |
| plots      | roofline and log-log sweep charts                           |
| traces     | profiler traces: parse, idle gaps, timeline figure          |
| opclasses  | FLOPs and runtime per operator class (the essay's BERT table) |
| datasheets | vendor datasheet peaks of known GPUs, drawn beside measurements |
| benchmarks | one script per chapter with its performance targets         |
| kernels    | the Triton kernels the book teaches and benchmarks           |
| memory     | peak memory, and waiting out page faults before timing      |
| allocator  | keep freed memory in the process (applied at import, Linux) |
| traffic    | bytes loaded and stored by Triton kernels, in the interpreter |
| diagnose/  | which regime any PyTorch step is in, and what to do about it: |
|            | ``python -m brrr.diagnose module:callable``                 |
| checks/    | the check library the labs grade with: compare, replay,     |
|            | time, thresholds, isolation                                 |
| labs/      | one package per lab: given material and checks;             |
|            | ``python -m brrr.labs`` writes labs/ from solutions/        |
| grading/   | the grader, in its own process: ``python -m brrr.grading``  |
|            | grades a folder of notebooks (see its package docstring)    |

Import what you use explicitly, e.g. ``from brrr.timing import bench``. Import
``brrr.device`` before ``triton`` so that, on a CPU, the Triton interpreter is on
before any kernel is defined.
"""

from brrr import allocator as _allocator

__version__ = "0.1.0"

# From here on CPU timings measure the kernel, not the page
# faults of fresh buffers: under make, jupyter lab, pip and Colab alike.
_allocator.keep_freed_memory()
