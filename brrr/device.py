"""Which device this process runs on, and problem sizes that suit it.

Importing this module decides the device once. On a machine without CUDA it sets
``TRITON_INTERPRET=1`` so that every ``@triton.jit`` kernel defined afterwards runs
in Triton's interpreter on the CPU. Import it before ``triton``::

    from brrr.device import DEVICE, ON_GPU, per_device
    import triton

``BRRR_DEVICE=cpu`` forces the CPU path on a GPU machine (useful to see what a
reader without a GPU sees).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Callable

import torch

from brrr.interpreter import mend_when_imported


def _choose_device() -> torch.device:
    forced = os.environ.get("BRRR_DEVICE", "").strip().lower()
    if forced and forced not in ("cpu", "cuda"):
        raise ValueError(f"BRRR_DEVICE must be 'cpu' or 'cuda', not {forced!r}")
    if forced == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("BRRR_DEVICE=cuda, but torch sees no CUDA device on this machine")
    if forced == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


DEVICE: torch.device = _choose_device()
ON_GPU: bool = DEVICE.type == "cuda"
TRITON_INTERPRETED: bool = not ON_GPU

if TRITON_INTERPRETED:
    # Must happen before any @triton.jit runs: the decorator reads it.
    os.environ["TRITON_INTERPRET"] = "1"
# Kernels are interpreted on a CPU, and by the grader on a GPU too (to check their bounds):
# brrr/interpreter.py.
mend_when_imported()


def _explain_compiled_kernels_without_a_gpu() -> None:
    """A kernel defined before this module was imported is compiled, and fails here with '0 active
    drivers'.

    Say what to do instead of leaving the reader with Triton's driver error.
    """
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return
    original = JITFunction.run
    if getattr(original, "_brrr_explained", False):
        return

    def run(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        except RuntimeError as error:
            if "active drivers" not in str(error):
                raise
            raise RuntimeError(
                f"{error}. The kernel {getattr(self, '__name__', '')} was defined before "
                "TRITON_INTERPRET=1 "
                "was set, so Triton compiled it for a GPU this machine does not have. Import "
                "brrr.device before defining kernels (before `import triton`, or at least before "
                "any @triton.jit), then restart the kernel and run again."
            ) from error

    run._brrr_explained = True  # type: ignore[attr-defined]
    JITFunction.run = run


def interpret_jit_calls() -> Callable[[], None]:
    """Make ``@triton.jit`` functions built as compiled ones run in the interpreter when an
    interpreted kernel calls them; return what puts them back.

    Where triton was imported without ``TRITON_INTERPRET`` (for a GPU, or on a CPU by an import that
    came before this module: ``torch.utils.flop_counter`` imports triton), ``triton.language``'s own
    functions (``tl.max``, ``tl.sum``, the reductions' combine functions) are ``JITFunction``s, and
    an interpreted kernel that calls one fails with "Cannot call @triton.jit'd outside of the scope
    of a kernel". Here ``JITFunction.__call__`` does what ``InterpretedFunction.__call__`` does, and
    the members of ``tl.tensor`` made from jit functions (``x.sum()``) are bound as methods, as the
    interpreter's own import makes them.
    """
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    original = JITFunction.__dict__["__call__"]
    interpreted: dict[int, InterpretedFunction] = {}

    def device_call(self, *args, **kwargs):
        return interpreted.setdefault(id(self), InterpretedFunction(self.fn))(*args, **kwargs)

    def method(function):
        return lambda self, *args, **kwargs: device_call(function, self, *args, **kwargs)

    members = {
        name: value for name, value in vars(tl.tensor).items() if isinstance(value, JITFunction)
    }
    JITFunction.__call__ = device_call
    for name, function in members.items():
        setattr(tl.tensor, name, method(function))

    def restore() -> None:
        JITFunction.__call__ = original
        for name, function in members.items():
            setattr(tl.tensor, name, function)

    return restore


def _language_built_for_a_gpu() -> bool:
    """Whether triton was imported before ``TRITON_INTERPRET`` was set, so that its language's jit
    functions are compiled ones (see :func:`interpret_jit_calls`)."""
    if "triton" not in sys.modules:
        return False
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    return isinstance(tl.standard.max, JITFunction)


# What puts triton.language back where it was made to interpret below; None where nothing was
# changed.
_restore_language: Callable[[], None] | None = None
if TRITON_INTERPRETED:
    _explain_compiled_kernels_without_a_gpu()
    if _language_built_for_a_gpu():
        # On a CPU every kernel is interpreted, so the language's functions must be too: for good.
        _restore_language = interpret_jit_calls()


def device_class() -> str:
    """``"gpu"`` or ``"cpu"``: the class of device whose thresholds and targets apply here."""
    return "gpu" if ON_GPU else "cpu"


def per_device(*, cpu, gpu):
    """Return ``gpu`` on a GPU and ``cpu`` otherwise.

    Sizes are chosen per device so that a CPU run (and the Triton interpreter)
    stays fast while a GPU run fills the chip::

        n = per_device(cpu=2**24, gpu=2**28)
    """
    return gpu if ON_GPU else cpu


def device_name() -> str:
    """A human name for the device: the GPU's product name, or the CPU model."""
    if ON_GPU:
        return torch.cuda.get_device_name(DEVICE)
    return cpu_model()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return re.sub(r"\s+", " ", line.split(":", 1)[1]).strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown CPU"


def last_level_cache_bytes() -> int:
    """Size of the last cache level between the compute units and DRAM/HBM.

    GPU: the L2 cache. CPU: the largest cache Linux reports (usually L3). Falls back
    to 32 MiB when the size cannot be read, which errs on the large side.
    """
    if ON_GPU:
        return int(torch.cuda.get_device_properties(DEVICE).L2_cache_size)
    largest = 0
    for size_file in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        largest = max(largest, _parse_cache_size(size_file.read_text()))
    return largest or 32 * 2**20


def _parse_cache_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text)
    if not match:
        return 0
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2)]
    return int(match.group(1)) * scale


CPU_WORKING_SET_BYTES = 128 * 2**20


def far_above_cache(element_size: int = 4, *, factor: int = 8) -> int:
    """A number of elements that cannot hide in the last-level cache.

    GPU: ``factor`` times the L2 cache, and at least 1 GiB, so that timing measures
    HBM bandwidth, not L2 bandwidth.

    CPU: 128 MiB. Linux often reports the L3 of the whole host socket (hundreds of
    MiB on a server), of which a small VM gets only a slice. On our 2-core CI
    machine (32 MiB of L3 reported) ``copy_`` bandwidth is flat from 64 MiB
    upwards (13 GB/s on one thread, 25 GB/s on two), so 128 MiB, twice that and
    four times the cache, measures DRAM and keeps a CPU run quick.
    ``notebooks/00-your-machine`` shows the sweep that justifies it.
    """
    if ON_GPU:
        target = max(factor * last_level_cache_bytes(), 2**30)
    else:
        target = CPU_WORKING_SET_BYTES
    return target // element_size


def half_precision_dtype(capability: tuple[int, int] | None = None) -> torch.dtype:
    """The 16-bit dtype the tensor cores run: bf16 from compute capability 8.0
    (Ampere) on, fp16 before it (Colab's T4, sm_75, has fp16 tensor cores and no
    bf16). ``capability`` defaults to this GPU's; on a CPU, bf16.
    """
    if capability is None:
        if not ON_GPU:
            return torch.bfloat16
        capability = torch.cuda.get_device_capability(DEVICE)
    return torch.bfloat16 if tuple(capability) >= (8, 0) else torch.float16


def bf16_note(capability: tuple[int, int] | None = None) -> str:
    """A sentence for a page that falls back to fp16, or "" where bf16 runs."""
    if half_precision_dtype(capability) == torch.bfloat16:
        return ""
    if capability is None:
        capability = torch.cuda.get_device_capability(DEVICE)
    major, minor = capability
    return (
        f"bf16 needs compute capability 8.0 (Ampere) or later; this GPU is sm_{major}{minor}, "
        "so the bf16 steps here run in fp16, which its tensor cores support."
    )


def kernel_dtypes(capability: tuple[int, int] | None = None) -> tuple[torch.dtype, ...]:
    """The storage dtypes the book's Triton kernels are checked in here: fp32, fp16, and bf16 where
    the GPU has it."""
    base = (torch.float32, torch.float16)
    return base + ((torch.bfloat16,) if half_precision_dtype(capability) == torch.bfloat16 else ())


def shared_memory_per_program() -> int | None:
    """Bytes of shared memory one Triton program may use on this GPU (None on a CPU).

    Triton's own query (``max_shared_mem``, the opt-in limit per block): about
    227 KiB on an H100, 163 KiB on an A100, 64 KiB on Colab's T4. A kernel's
    pipeline holds ``num_stages`` copies of its input blocks there, so deep
    pipelines of large tiles that suit an H100 do not compile on a T4.
    """
    if not ON_GPU:
        return None
    from triton.runtime import driver

    return int(driver.active.utils.get_device_properties(DEVICE.index or 0)["max_shared_mem"])


def pipeline_stages(bytes_per_stage: int, *, most: int = 3) -> int:
    """The ``num_stages`` (at most ``most``, at least 1) whose input blocks fit this GPU's shared
    memory."""
    available = shared_memory_per_program()
    if available is None:
        return most
    return max(1, min(most, available // bytes_per_stage))


def memory_bounded(
    elements: int, bytes_per_element: int, *, fraction: float = 0.5, total_bytes: int | None = None
) -> int:
    """``elements``, or fewer, so that ``elements · bytes_per_element`` stays within
    ``fraction`` of the GPU's memory (``total_bytes``, default: from its device
    properties). A CPU keeps ``elements``: its sizes are small already.

    On an 80 GB H100 the book's sizes fit as they are; on a 15 GB T4 a working
    set of a dozen 1 GiB tensors does not.
    """
    if total_bytes is None:
        if not ON_GPU:
            return elements
        total_bytes = torch.cuda.get_device_properties(DEVICE).total_memory
    return max(1, min(elements, int(fraction * total_bytes) // bytes_per_element))


def synchronize() -> None:
    """Wait for queued device work. A no-op on CPU, where ops run synchronously."""
    if ON_GPU:
        torch.cuda.synchronize(DEVICE)
