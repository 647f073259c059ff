"""Keep freed memory in the process, as a GPU caching allocator does.

glibc hands large buffers back to the operating system when they are freed, so
every new tensor pays page faults as it is first written. On our 2-core CI
machine a ``clone()`` of 256 MiB ran at 3.7 GB/s this way, against 17 GB/s
with freed memory kept, and 21-31 GB/s for ``copy_`` into an existing buffer.
That overhead is real, but it is the operating system's, not the kernel's: left
in, it makes eager CPU timings several times slower than the model predicts.

glibc's environment variables ``MALLOC_MMAP_MAX_`` and ``MALLOC_TRIM_THRESHOLD_``
fix this only when set before the process starts (the Makefile does), so a pip
install, plain ``jupyter lab`` or Colab ran without them. ``mallopt`` does the
same from inside a running process, and ``import brrr`` calls it on Linux:

- ``M_MMAP_MAX = 0``: no buffer gets its own mapping; all come from the heap.
- ``M_TRIM_THRESHOLD`` high: the heap is not handed back after a free.

glibc's heap takes a few rounds to settle: torch allocates 256 MiB blocks
aligned, and the first ~10 fresh blocks may not fit in the freed ones, so they
still fault. From then on (measured on our CI machine, with brrr imported
after torch) ``clone()`` ran at 1.0-1.1 of ``copy_``'s rate against
0.2 without these settings.

Set ``BRRR_KEEP_FREED_MEMORY=0`` before importing brrr to see the page faults.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # from glibc's <malloc.h>
M_MMAP_MAX = -4
NEVER_TRIM = -1  # mallopt(3): "-1 disables trimming completely"
OPT_OUT = "BRRR_KEEP_FREED_MEMORY"


def keep_freed_memory() -> bool:
    """Apply the settings above; True where they took effect (Linux with glibc)."""
    if not sys.platform.startswith("linux") or os.environ.get(OPT_OUT) == "0":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # glibc; musl has no mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, NEVER_TRIM) == 1
