"""Peak memory of one call: how many bytes above the starting point were live at once.

GPU
    PyTorch's caching allocator counts every tensor allocation;
    ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` is the
    high-water mark, and we subtract what was allocated before the call.
CPU
    There is no allocator counter on the CPU, and the process's maximum resident
    size only ever grows. Instead the call runs under ``torch.profiler`` with
    ``profile_memory=True``: the CPU allocator then reports every allocation and
    free (including those made by ``torch.compile``'d code), and the peak of their
    running sum is the high-water mark of the call.

Both count tensor memory only, not the Python interpreter or the allocator's
cached-but-free blocks: the memory that saved activations and temporaries take.
Frees of tensors allocated before the call are not reported on the CPU path, so
there the peak can overstate by the size of tensors the call releases early.

:func:`settle_page_faults` belongs here too: fresh memory costs a page fault per
4 KiB page on first touch, and a timing should start once that has stopped.
"""

from __future__ import annotations

from typing import Callable

import torch

from brrr.device import DEVICE, ON_GPU, synchronize
from brrr.traces import quiet_native_stderr


def peak_memory(fn: Callable[[], object]) -> int:
    """Bytes of tensor memory allocated at the peak of ``fn()``, above what was live before it."""
    if ON_GPU:
        return _peak_cuda(fn)
    return _peak_profiled_cpu(fn)


def _peak_cuda(fn) -> int:
    synchronize()
    before = torch.cuda.memory_allocated(DEVICE)
    torch.cuda.reset_peak_memory_stats(DEVICE)
    fn()
    synchronize()
    return int(torch.cuda.max_memory_allocated(DEVICE) - before)


def _peak_profiled_cpu(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    with (
        quiet_native_stderr(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
    ):
        fn()
    try:
        events = prof.profiler.kineto_results.events()
        changes = sorted(
            (event.start_ns(), event.nbytes()) for event in events if event.name() == "[memory]"
        )
    except AttributeError as error:  # the profiler's result API moved
        raise RuntimeError(
            f"cannot read allocation events from this torch's profiler ({torch.__version__}): "
            f"{error}"
        ) from error
    return peak_of(change for _, change in changes)


def settle_page_faults(
    fn: Callable[[], object], *, max_calls: int = 12, quiet_pages: int = 64
) -> int:
    """Call ``fn()`` until one call page-faults on at most ``quiet_pages`` pages; return the calls
    made.

    A function that returns a new large tensor gets its memory from the C
    allocator. When the allocator must grow its heap (or, without
    ``MALLOC_MMAP_MAX_=0``, maps fresh memory for every large tensor), the first
    write to every 4 KiB page traps into the kernel. After a compile has
    fragmented the heap this can go on for several calls and cost more than the
    kernel itself. Once a call runs without faults, the allocator is reusing
    memory and the timing is the kernel's. On a GPU (caching allocator) and where
    ``resource`` is unavailable this does nothing.
    """
    if ON_GPU:
        return 0
    try:
        import resource
    except ImportError:  # not a Unix: no fault counter
        return 0
    for calls in range(1, max_calls + 1):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        fn()
        if resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before <= quiet_pages:
            return calls
    return max_calls


def peak_of(changes) -> int:
    """Highest running sum of allocation (+bytes) and free (-bytes) events, starting from 0."""
    live = peak = 0
    for change in changes:
        live += change
        peak = max(peak, live)
    return int(peak)
