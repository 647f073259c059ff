"""``torch.compile`` for benchmarks: compile once, outside the timed region, and say how long it
took.

Two settings matter when timing compiled code:

* On a CPU, inductor compiles in a pool of worker processes by default. Each
  worker imports torch, which on a two-core machine steals seconds of CPU from
  the first timings after a compile. :func:`compile_for_timing` sets
  ``compile_threads = 1`` there (compiling in-process); a GPU keeps the default.
* Inductor's CPU code is generated for the thread count in force when it
  compiles (one thread: no OpenMP region at all), so compile with the thread
  count you will time with: pass ``threads``.
* Dynamo keeps at most ``recompile_limit`` (8) compiled versions per Python
  function and silently falls back to eager after that. A sweep that compiles one
  function for nine repeat counts needs more, so the limit is raised while
  compiling.

The compiled inductor kernels are cached on disk (``TORCHINDUCTOR_CACHE_DIR``),
so a second run of a notebook skips most of the compile time.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from brrr.device import ON_GPU, synchronize
from brrr.timing import torch_threads

RECOMPILE_LIMIT = 64


@contextlib.contextmanager
def more_recompiles(limit: int = RECOMPILE_LIMIT) -> Iterator[None]:
    """Let dynamo keep up to ``limit`` compiled versions of one function inside the block."""
    import torch._dynamo.config as dynamo_config

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    before = getattr(dynamo_config, name)
    setattr(dynamo_config, name, max(before, limit))
    try:
        yield
    finally:
        setattr(dynamo_config, name, before)


class Compiled:
    """A compiled function that has already run once; ``compile_s`` is what that first call cost.

    Every call runs with the torch thread count it was compiled with
    (``threads``): dynamo guards on the thread count, so a call under another
    one (the default two threads, outside ``bench``) would silently compile
    again and pay the compile a second time.
    """

    def __init__(
        self, fn: Callable, compile_s: float, source: Callable, threads: int | None = None
    ):
        self.fn = fn
        self.compile_s = compile_s
        self.source = source
        self.threads = threads

    def __call__(self, *args, **kwargs):
        if self.threads is None or torch.get_num_threads() == self.threads:
            return self.fn(*args, **kwargs)
        with torch_threads(self.threads):
            return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return (
            f"<compiled {getattr(self.source, '__name__', self.source)!s}, first call took "
            f"{self.compile_s:.2f} s>"
        )


def compile_for_timing(
    fn: Callable,
    *example_args,
    dynamic: bool = False,
    threads: int | None = None,
    **compile_options,
) -> Compiled:
    """``torch.compile(fn)``, called once on ``example_args`` so that the compile is paid now.

    ``dynamic=False`` specializes on the example's shapes, as a benchmark of one
    size wants; pass ``dynamic=True`` for one kernel that serves a sweep of sizes.
    """
    if not ON_GPU:
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1
    compiled = torch.compile(fn, dynamic=dynamic, **compile_options)
    with more_recompiles(), torch_threads(threads):
        start = time.perf_counter()
        compiled(*example_args)
        synchronize()
        elapsed = time.perf_counter() - start
    return Compiled(compiled, elapsed, fn, threads)


def assert_matches_eager(
    compiled: Compiled, eager: Callable, x: torch.Tensor, count: int = 100_003
) -> None:
    """Check an element-wise ``compiled`` against ``eager`` on the first ``count`` elements.

    ``compiled`` runs on the whole of ``x``, the shape it was compiled and is
    timed at, and only its result is sliced: calling it on a slice would be a
    new shape, which makes dynamo compile again (and, with ``dynamic`` left to
    torch, compile a dynamic-shape version that later calls at the timed shape
    may then run). ``eager`` runs on the slice only, to keep the check cheap.
    """
    torch.testing.assert_close(compiled(x)[:count], eager(x[:count]))


@dataclass(frozen=True)
class Graphs:
    """How dynamo splits a function: graphs captured, graph breaks between them, and why each
    break."""

    graphs: int
    breaks: int
    reasons: tuple[str, ...]

    @property
    def one(self) -> bool:
        """One graph, no break: everything the function does reaches the compiler together."""
        return self.graphs == 1 and self.breaks == 0


def graphs(fn: Callable, *example_args) -> Graphs:
    """Count the graphs ``fn`` compiles to on ``example_args`` (``torch._dynamo.explain``: traced
    only, no kernel is generated). A count, where a speedup against a target would tell a graph
    break from noise only by a few percent: a break between two cosines still runs each compiled.

    ``explain`` resets dynamo before and after: every function compiled so far compiles again at its
    next call. Count after the timings."""
    import torch._dynamo

    explained = torch._dynamo.explain(fn)(*example_args)
    reasons = tuple(
        str(getattr(reason, "reason", reason)).strip().splitlines()[0]
        for reason in explained.break_reasons
    )
    return Graphs(explained.graph_count, explained.graph_break_count, reasons)
