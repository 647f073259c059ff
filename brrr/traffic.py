"""Global-memory traffic of Triton kernels, counted in the Triton interpreter.

On a CPU a Triton kernel runs in the interpreter, where timing it means nothing.
What fusion changes can still be measured exactly: how many bytes the kernel
loads from and stores to global memory. Every ``tl.load`` and ``tl.store`` in the
interpreter goes through four methods of ``InterpreterBuilder``
(``create_load``, ``create_masked_load``, ``create_store``,
``create_masked_store``). :func:`count` wraps them for the duration of a
``with`` block and adds up the bytes under each mask::

    with traffic.count({"x": x, "y": y, "out": out}) as seen:
        fused(x, y, out)
    seen.loaded["x"], seen.stored["out"]   # bytes; a fused kernel: 4n and 4n for fp32

It also checks bounds. Each launch records the extent of every tensor passed to
the kernel; a load or store (under its mask) that falls outside all of them is
refused *before* the interpreter touches memory, and recorded in
``seen.violations``. In the interpreter such an access would read or write raw
process memory: at best garbage, at worst a crash of the whole grading run.
Atomics (``tl.atomic_add`` and the rest) are counted as one load and one store
per active lane, and bounds-checked the same way.

Each launch also counts the programs of its grid that stored at least one
element (``Launch.storing``, ``as_dict()["storing"]``): a program that stored
nothing did no work the caller can see, and a grader whose allowance grows with
the grid refuses such a launch (:func:`brrr.checks.core.idle_failure`).

Bytes that fall in a tensor the caller did not name (a scratch buffer a wrapper
allocated itself) are labelled by the kernel argument it was passed as, e.g.
``tmp_ptr``; only addresses in no tensor at all are ``"other"``. Launching a
compiled (non-interpreted) kernel inside the block raises
:class:`TrafficCounterUnavailable`, never a silent zero.

These are Triton internals, not API. The wrapped signatures were checked on
triton 3.6 and 3.9 (:data:`TESTED_TRITON`). Importing this module never imports
triton; :func:`count` checks the version and the internals it needs and raises
:class:`TrafficCounterUnavailable` with a clear message if they changed.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from typing import Iterator, Mapping

import numpy as np

TESTED_TRITON = ((3, 6), (3, 9))  # inclusive range of (major, minor) versions
UNTESTED_OK_ENV = "BRRR_TRAFFIC_UNTESTED_OK"

_BUILDER_METHODS = ("create_load", "create_masked_load", "create_store", "create_masked_store")
# Atomics read and write global memory too: each active lane counts as one load and one store.
_ATOMIC_METHODS = ("create_atomic_rmw", "create_atomic_cas")


class TrafficCounterUnavailable(RuntimeError):
    """The installed Triton's interpreter is not one this counter knows how to wrap."""


class OutOfBoundsAccess(RuntimeError):
    """A kernel loaded or stored outside every tensor it was given; raised before the access
    happens."""


@dataclass(frozen=True)
class Region:
    """The bytes ``[start, end)`` that tensor ``name`` spans."""

    name: str
    start: int
    end: int
    elements: int = 0
    dtype: str = ""


@dataclass(frozen=True)
class Violation:
    """An access outside every tensor passed to the kernel."""

    kind: str  # "load" or "store"
    kernel: str
    elements: int  # how many elements under the mask fell outside
    address: int  # the first such address
    where: str  # where that address lies: 'index 1,003 of x_ptr, which has 1,000 float32 elements'

    def __str__(self) -> str:
        verb = "loaded" if self.kind == "load" else "stored"
        return (
            f"{self.kernel} {verb} {self.elements:,} element(s) out of bounds; "
            f"the first is {self.where or 'at an unknown address'}"
        )


@dataclass
class Launch:
    kernel: str
    grid: tuple[int, int, int] = (1, 1, 1)
    regions: list[Region] = field(default_factory=list)
    storing: int = (
        0  # programs that stored at least one element: the rest did no work the caller can see
    )

    @property
    def programs(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


@dataclass
class Traffic:
    """Bytes loaded and stored, by tensor name (``"other"`` for tensors not named to
    :func:`count`)."""

    loaded: dict[str, int] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=dict)
    launches: list[Launch] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    @property
    def loaded_bytes(self) -> int:
        return sum(self.loaded.values())

    @property
    def stored_bytes(self) -> int:
        return sum(self.stored.values())

    @property
    def kernels(self) -> list[str]:
        return [launch.kernel for launch in self.launches]

    def summary(self) -> str:
        def by_name(table: dict[str, int]) -> str:
            return ", ".join(f"{name} {nbytes:,} B" for name, nbytes in table.items()) or "nothing"

        return (
            f"{len(self.launches)} launch(es) ({', '.join(self.kernels) or 'none'}); "
            f"loaded {self.loaded_bytes:,} B ({by_name(self.loaded)}); "
            f"stored {self.stored_bytes:,} B ({by_name(self.stored)})"
        )

    def as_dict(self) -> dict:
        """Plain data, for passing between processes and writing to logs."""
        return {
            "loaded": dict(self.loaded),
            "stored": dict(self.stored),
            "kernels": self.kernels,
            "programs": [launch.programs for launch in self.launches],
            "storing": [launch.storing for launch in self.launches],
            "violations": [str(v) for v in self.violations],
        }


# ---------------------------------------------------------------- version and internals


def triton_version() -> tuple[int, int] | None:
    try:
        import triton
    except ImportError:
        return None
    match = re.match(r"(\d+)\.(\d+)", triton.__version__)
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_supported() -> None:
    """Raise :class:`TrafficCounterUnavailable` unless the interpreter internals are the ones we
    wrap."""
    version = triton_version()
    if version is None:
        raise TrafficCounterUnavailable("counting traffic needs triton, which is not installed")
    low, high = TESTED_TRITON
    if not (low <= version <= high) and not os.environ.get(UNTESTED_OK_ENV):
        raise TrafficCounterUnavailable(
            f"brrr.traffic wraps internals of Triton's interpreter and was tested with triton "
            f"{low[0]}.{low[1]} to {high[0]}.{high[1]}; this is triton {version[0]}.{version[1]}. "
            f"Set {UNTESTED_OK_ENV}=1 to try anyway, and check tests/library/test_traffic.py "
            "passes."
        )
    try:
        from triton.runtime import interpreter
    except Exception as error:  # noqa: BLE001 - any import failure means the same thing here
        raise TrafficCounterUnavailable(
            f"cannot import triton.runtime.interpreter: {error}"
        ) from error
    missing = [
        f"InterpreterBuilder.{name}"
        for name in _BUILDER_METHODS + _ATOMIC_METHODS + ("set_grid_dim", "set_grid_idx")
        if not hasattr(getattr(interpreter, "InterpreterBuilder", None), name)
    ]
    missing += [
        f"GridExecutor.{name}"
        for name in ("_init_args_hst",)
        if not hasattr(getattr(interpreter, "GridExecutor", None), name)
    ]
    if missing:
        raise TrafficCounterUnavailable(
            f"triton {version[0]}.{version[1]}'s interpreter no longer has {', '.join(missing)}; "
            "brrr.traffic must be updated for it"
        )


# ---------------------------------------------------------------- counting


def tensor_region(name: str, tensor) -> Region | None:
    """The bytes a tensor view can reach: from its first element to one past its last."""
    if tensor.numel() == 0:
        return None
    reach = sum(
        (size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()) if size > 1
    )
    start = tensor.data_ptr()
    end = start + (reach + 1) * tensor.element_size()
    return Region(name, start, end, tensor.numel(), str(tensor.dtype).removeprefix("torch."))


class _Counter:
    """The state of one :func:`count` block; the wrapped builder methods call into it."""

    def __init__(self, named: Mapping[str, object], check_bounds: bool):
        self.traffic = Traffic()
        self.named = [r for r in (tensor_region(n, t) for n, t in named.items()) if r is not None]
        for region in self.named:
            self.traffic.loaded.setdefault(region.name, 0)
            self.traffic.stored.setdefault(region.name, 0)
        self.check_bounds = check_bounds
        self.depth = 0  # create_load delegates to create_masked_load: count the outermost call only
        self.program_stored = False  # whether the program now running has stored anything yet

    def begin_launch(self, kernel: str, arg_names, args, kwargs) -> None:
        launch = Launch(kernel)
        values = list(zip(arg_names, args)) + list(kwargs.items())
        for name, value in values:
            if hasattr(value, "data_ptr") and hasattr(value, "element_size"):
                tensor = value.base if type(value).__name__ == "TensorWrapper" else value
                region = tensor_region(name, tensor)
                if region is not None:
                    launch.regions.append(region)
        self.traffic.launches.append(launch)

    def set_grid(self, grid) -> None:
        if self.traffic.launches:
            self.traffic.launches[-1].grid = tuple(int(g) for g in grid)

    def begin_program(self) -> None:
        self.program_stored = False

    def account(self, kind: str, pointers, mask) -> None:
        addresses = np.asarray(pointers.data).astype(np.uint64, copy=False)
        active = np.broadcast_to(np.asarray(mask, dtype=bool), addresses.shape)
        addresses = addresses[active]
        if addresses.size == 0:
            return
        itemsize = max(1, pointers.get_element_ty().primitive_bitwidth // 8)
        launch = self.traffic.launches[-1] if self.traffic.launches else Launch("<unknown kernel>")
        if self.check_bounds and launch.regions:
            # One load or store reads one tensor: the one its first address (offset 0 of the
            # block, in order) falls in, or failing that the one most addresses fall in. Every
            # address must lie inside that tensor, even where it strays into a neighbouring one.
            owner, inside = None, np.zeros(addresses.shape, dtype=bool)
            first = addresses[0]
            for region in launch.regions:
                hit = (addresses >= region.start) & (addresses + itemsize <= region.end)
                if region.start <= first and first + itemsize <= region.end:
                    owner, inside = region, hit
                    break
                if owner is None or hit.sum() > inside.sum():
                    owner, inside = region, hit
            if not inside.all():
                outside = addresses[~inside]
                nearest = [owner] if inside.any() else launch.regions
                violation = Violation(
                    kind,
                    launch.kernel,
                    int(outside.size),
                    int(outside[0]),
                    _locate(int(outside[0]), nearest, itemsize),
                )
                self.traffic.violations.append(violation)
                raise OutOfBoundsAccess(str(violation))
        if kind == "store" and not self.program_stored:
            self.program_stored = True
            launch.storing += 1
        table = self.traffic.loaded if kind == "load" else self.traffic.stored
        counted = np.zeros(addresses.shape, dtype=bool)
        for region in self.named:
            hit = (addresses >= region.start) & (addresses < region.end) & ~counted
            table[region.name] = table.get(region.name, 0) + int(hit.sum()) * itemsize
            counted |= hit
        # Tensors the caller did not name (a scratch buffer the wrapper allocated) are labelled by
        # the kernel argument they were passed as; anything else is "other".
        for region in launch.regions:
            if not (~counted).any():
                break
            hit = (addresses >= region.start) & (addresses < region.end) & ~counted
            if hit.any():
                table[region.name] = table.get(region.name, 0) + int(hit.sum()) * itemsize
                counted |= hit
        rest = int((~counted).sum())
        if rest:
            table["other"] = table.get("other", 0) + rest * itemsize


def _locate(address: int, regions: list[Region], itemsize: int) -> str:
    """Where an address lies, by the nearest tensor: 'index 1,003 of x_ptr, which has 1,000 float32
    elements'."""
    best = None
    for region in regions:
        if region.start <= address < region.end:
            distance = 0
        else:
            distance = address - region.end if address >= region.end else region.start - address
        if best is None or distance < best[0]:
            best = (distance, region)
    if best is None:
        return ""
    region = best[1]
    index = (address - region.start) // itemsize
    return (
        f"index {index:,} of {region.name}, which has {region.elements:,} {region.dtype} elements"
    )


_active: _Counter | None = None


@contextlib.contextmanager
def count(
    named: Mapping[str, object] | None = None, *, check_bounds: bool = True
) -> Iterator[Traffic]:
    """Count bytes loaded and stored by interpreted Triton kernels inside the block.

    ``named`` maps names to tensors; bytes that fall inside one of them are
    counted under its name, all others under ``"other"``. With ``check_bounds``,
    an access outside every tensor passed to the kernel raises
    :class:`OutOfBoundsAccess` inside the kernel (the interpreter wraps it in its
    own error) and is recorded in ``violations``.

    Only kernels that run in the interpreter are seen (``TRITON_INTERPRET=1``,
    which ``brrr.device`` sets on a CPU). Blocks do not nest.
    """
    global _active
    check_supported()
    if _active is not None:
        raise RuntimeError("brrr.traffic.count() blocks do not nest")
    counter = _Counter(named or {}, check_bounds)
    _active = counter
    try:
        with _InterpreterPatch(counter):
            yield counter.traffic
    finally:
        _active = None


class _InterpreterPatch:
    """While entered, the interpreter's load, store, atomic and launch methods report to
    ``counter``, and launching a compiled kernel raises :class:`TrafficCounterUnavailable`; on exit
    every method is put back, whatever happened inside."""

    def __init__(self, counter: _Counter):
        from triton.runtime import interpreter
        from triton.runtime.jit import JITFunction

        self.counter = counter
        builder, executor = interpreter.InterpreterBuilder, interpreter.GridExecutor
        # (owner, attribute) -> the original, and the same keys -> the replacement
        self.originals = {
            (builder, name): builder.__dict__[name]
            for name in _BUILDER_METHODS + _ATOMIC_METHODS + ("set_grid_dim", "set_grid_idx")
        }
        self.originals[(executor, "_init_args_hst")] = executor.__dict__["_init_args_hst"]
        self.originals[(JITFunction, "run")] = JITFunction.__dict__["run"]
        original = {name: method for (_, name), method in self.originals.items()}
        self.replacements = {
            (builder, "create_load"): self._load(original["create_load"], masked=False),
            (builder, "create_masked_load"): self._load(
                original["create_masked_load"], masked=True
            ),
            (builder, "create_store"): self._store(original["create_store"], masked=False),
            (builder, "create_masked_store"): self._store(
                original["create_masked_store"], masked=True
            ),
            (builder, "create_atomic_rmw"): self._atomic(
                original["create_atomic_rmw"], pointer_at=1, mask_at=3
            ),
            (builder, "create_atomic_cas"): self._atomic(
                original["create_atomic_cas"], pointer_at=0, mask_at=None
            ),
            (builder, "set_grid_dim"): self._set_grid_dim(original["set_grid_dim"]),
            (builder, "set_grid_idx"): self._set_grid_idx(original["set_grid_idx"]),
            (executor, "_init_args_hst"): self._init_args(original["_init_args_hst"]),
            (JITFunction, "run"): _refuse_compiled_run,
        }

    def __enter__(self) -> "_InterpreterPatch":
        for (owner, name), method in self.replacements.items():
            setattr(owner, name, method)
        return self

    def __exit__(self, *exc) -> None:
        for (owner, name), method in self.originals.items():
            setattr(owner, name, method)

    def _load(self, method, masked: bool):
        counter = self.counter

        def wrapped(builder, pointers, *args, **kwargs):
            if (
                counter.depth == 0
            ):  # create_load delegates to create_masked_load: count the outermost
                counter.account("load", pointers, args[0].data if masked else True)
            counter.depth += 1
            try:
                return method(builder, pointers, *args, **kwargs)
            finally:
                counter.depth -= 1

        return wrapped

    def _store(self, method, masked: bool):
        counter = self.counter

        def wrapped(builder, pointers, value, *args, **kwargs):
            if counter.depth == 0:
                counter.account("store", pointers, args[0].data if masked else True)
            counter.depth += 1
            try:
                return method(builder, pointers, value, *args, **kwargs)
            finally:
                counter.depth -= 1

        return wrapped

    def _atomic(self, method, pointer_at: int, mask_at: int | None):
        counter = self.counter

        def wrapped(builder, *args, **kwargs):
            mask = args[mask_at].data if mask_at is not None else True
            counter.account("load", args[pointer_at], mask)
            counter.account("store", args[pointer_at], mask)
            return method(builder, *args, **kwargs)

        return wrapped

    def _set_grid_dim(self, method):
        counter = self.counter

        def wrapped(builder, *grid):
            counter.set_grid(grid)
            return method(builder, *grid)

        return wrapped

    def _set_grid_idx(self, method):
        counter = self.counter

        def wrapped(builder, *index):
            counter.begin_program()
            return method(builder, *index)

        return wrapped

    def _init_args(self, method):
        counter = self.counter

        def wrapped(executor, args_dev, kwargs):
            args_hst, kwargs_hst = method(executor, args_dev, kwargs)
            counter.begin_launch(
                getattr(executor.fn, "__name__", "kernel"), executor.arg_names, args_hst, kwargs_hst
            )
            return args_hst, kwargs_hst

        return wrapped


def _refuse_compiled_run(kernel, *args, **kwargs):
    raise TrafficCounterUnavailable(
        f"{getattr(kernel, '__name__', 'this kernel')} is a compiled kernel: traffic is counted "
        "only in "
        "Triton's interpreter. Set TRITON_INTERPRET=1 before the kernel is defined (on a CPU, "
        "`import brrr.device` before `import triton` does it); a kernel defined earlier stays "
        "compiled, which on a machine without a GPU fails with '0 active drivers'."
    )
