"""brrr.traffic counts global-memory bytes exactly in the Triton interpreter, and refuses
out-of-bounds accesses."""

import subprocess
import sys

import pytest
import torch

import brrr.device  # noqa: F401  (before triton: the interpreter on a CPU)
from brrr import traffic
from brrr.device import TRITON_INTERPRETED

import triton
import triton.language as tl

pytestmark = pytest.mark.skipif(
    not TRITON_INTERPRETED, reason="traffic is counted in the Triton interpreter"
)

N = 100_003  # a multiple of no block size
BLOCK = 8192


@triton.jit
def cos_cos(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.cos(tl.cos(x)), mask=mask)


@triton.jit
def cos_once(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.cos(tl.load(x_ptr + offsets, mask=mask)), mask=mask)


@triton.jit
def copy_masked(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def copy_unmasked(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))  # create_load / create_store: no mask


@triton.jit
def load_past_end(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)  # no mask: the last block reads past n
    tl.store(out_ptr + offsets, x, mask=offsets < n)


@triton.jit
def store_past_end(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    tl.store(out_ptr + offsets, x)  # no mask: the last block writes past n


def grid(n):
    return (triton.cdiv(n, BLOCK),)


def test_fused_cos_cos_moves_exactly_one_read_and_one_write_per_element():
    x, out = torch.randn(N), torch.empty(N)
    with traffic.count({"x": x, "out": out}) as seen:
        cos_cos[grid(N)](x, out, N, BLOCK=BLOCK)
    assert seen.loaded == {"x": 4 * N, "out": 0}
    assert seen.stored == {"x": 0, "out": 4 * N}
    assert seen.kernels == ["cos_cos"] and seen.launches[0].programs == triton.cdiv(N, BLOCK)
    torch.testing.assert_close(out, x.cos().cos())


def test_each_launch_counts_the_programs_that_stored_something():
    """A grid past the end of the data: the extra programs' stores are all masked off, so they
    stored nothing."""
    n = 3 * 1024 + 5
    x, out = torch.randn(n), torch.empty(n)
    with traffic.count({"x": x, "out": out}) as seen:
        copy_masked[(10,)](x, out, n, BLOCK=1024)  # 4 programs cover n; 6 more do nothing
        copy_masked[(4,)](x, out, n, BLOCK=1024)
    assert [launch.programs for launch in seen.launches] == [10, 4]
    assert [launch.storing for launch in seen.launches] == [4, 4] and seen.as_dict()["storing"] == [
        4,
        4,
    ]


def test_two_kernels_move_the_intermediate_through_memory():
    x, tmp, out = torch.randn(N), torch.empty(N), torch.empty(N)
    with traffic.count({"x": x, "out": out}) as seen:
        cos_once[grid(N)](x, tmp, N, BLOCK=BLOCK)
        cos_once[grid(N)](tmp, out, N, BLOCK=BLOCK)
    assert seen.loaded_bytes == 8 * N and seen.stored_bytes == 8 * N
    # tmp, which the caller did not name, is labelled by the kernel argument it was passed as
    assert (
        seen.stored["out_ptr"] == 4 * N and seen.loaded["x_ptr"] == 4 * N
    )  # tmp, written then read
    assert "other" not in seen.loaded and "other" not in seen.stored
    assert seen.kernels == ["cos_once", "cos_once"]


def test_unmasked_loads_and_stores_are_counted_once():
    n = 4 * BLOCK  # an exact multiple, so no mask is needed
    x, out = torch.randn(n), torch.empty(n)
    with traffic.count({"x": x, "out": out}) as seen:
        copy_unmasked[(4,)](x, out, BLOCK=BLOCK)
    assert (
        seen.loaded["x"] == 4 * n and seen.stored["out"] == 4 * n
    )  # create_load wraps create_masked_load
    assert torch.equal(out, x)


def test_half_precision_counts_two_bytes_per_element():
    x, out = torch.randn(N, dtype=torch.float16), torch.empty(N, dtype=torch.float16)
    with traffic.count({"x": x, "out": out}) as seen:
        copy_masked[grid(N)](x, out, N, BLOCK=BLOCK)
    assert seen.loaded["x"] == 2 * N and seen.stored["out"] == 2 * N
    assert torch.equal(out, x)


def test_a_load_past_the_end_is_refused_before_it_happens():
    x, out = torch.randn(N), torch.empty(N)
    with pytest.raises(Exception) as error:
        with traffic.count({"x": x, "out": out}) as seen:
            load_past_end[grid(N)](x, out, N, BLOCK=BLOCK)
    assert "out of bounds" in str(error.value)
    (violation,) = seen.violations
    assert violation.kind == "load" and violation.kernel == "load_past_end"
    assert violation.elements == triton.cdiv(N, BLOCK) * BLOCK - N
    assert f"index {N:,} of x_ptr" in violation.where


def test_a_store_past_the_end_is_refused_and_the_neighbouring_memory_is_untouched():
    x = torch.randn(N)
    buffer = torch.full((N + BLOCK,), 7.0)
    out = buffer[:N]  # the kernel is given only the first N elements
    with pytest.raises(Exception):
        with traffic.count() as seen:
            store_past_end[grid(N)](x, out, N, BLOCK=BLOCK)
    assert seen.violations[0].kind == "store"
    assert torch.all(buffer[N:] == 7.0)


def test_bounds_checking_can_be_turned_off():
    x, out = torch.randn(2 * BLOCK), torch.empty(2 * BLOCK)
    n = 2 * BLOCK - 5  # reads 5 elements past n, still inside x: harmless here
    with traffic.count({"x": x[:n]}, check_bounds=False) as seen:
        load_past_end[grid(n)](x[:n], out, n, BLOCK=BLOCK)
    assert not seen.violations and seen.loaded_bytes == 4 * 2 * BLOCK


def test_the_interpreter_is_restored_after_counting():
    from triton.runtime import interpreter

    before = {
        name: interpreter.InterpreterBuilder.__dict__[name] for name in traffic._BUILDER_METHODS
    }
    with traffic.count():
        pass
    after = {
        name: interpreter.InterpreterBuilder.__dict__[name] for name in traffic._BUILDER_METHODS
    }
    assert before == after


def test_counting_blocks_do_not_nest():
    with traffic.count():
        with pytest.raises(RuntimeError, match="do not nest"):
            with traffic.count():
                pass


def test_an_untested_triton_version_fails_with_a_clear_message(monkeypatch):
    monkeypatch.setattr(traffic, "triton_version", lambda: (4, 0))
    monkeypatch.delenv(traffic.UNTESTED_OK_ENV, raising=False)
    with pytest.raises(
        traffic.TrafficCounterUnavailable,
        match=r"tested with triton 3\.6 to 3\.9; this is triton 4\.0",
    ):
        with traffic.count():
            pass


def test_missing_interpreter_internals_fail_with_a_clear_message(monkeypatch):
    from triton.runtime import interpreter

    monkeypatch.delattr(interpreter.InterpreterBuilder, "create_masked_store")
    with pytest.raises(
        traffic.TrafficCounterUnavailable, match="InterpreterBuilder.create_masked_store"
    ):
        traffic.check_supported()


def test_importing_the_module_does_not_import_triton():
    code = "import sys, brrr.traffic; print('triton' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
