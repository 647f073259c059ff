"""The grader checks a kernel's source before it runs it, and replays the launches the student's
wrapper made."""

import pytest
import torch

import brrr.device  # noqa: F401  (before triton)
import triton
import triton.language as tl

from brrr import traffic
from brrr.checks import kernels


def body(text: str) -> dict[str, str]:
    return {
        "k": "def k(x_ptr, n, BLOCK: tl.constexpr):\n"
        + "".join(f"    {line}\n" for line in text.splitlines())
    }


@pytest.mark.parametrize(
    "line, reason",
    [
        ("import os", "`Import` is not allowed"),
        ("torch.sigmoid(x_ptr)", "`torch` is not Triton"),
        ("np.exp(1.0)", "`np` is not Triton"),
        ("__import__('os')", "not allowed"),
        ("tl.load.__globals__", "`__globals__` is not allowed"),
        ("x_ptr.handle", "`.handle` is not an attribute"),
        (
            "tl.inline_asm_elementwise('', '', [], dtype=tl.float32, is_pure=True, pack=1)",
            "inline assembly",
        ),
        ("tl.make_block_ptr(x_ptr, (n,), (1,), (0,), (BLOCK,), (0,))", "block pointers"),
        ("tl.extra.cuda.libdevice.fast_cosf(1.0)", "tl.extra"),
        ("(lambda: 0)()", "not allowed"),
        ("[i for i in range(3)]", "not allowed"),
        ("getattr(tl, 'load')", "`getattr` is not Triton"),
        ("open('/etc/passwd')", "`open` is not Triton"),
        ("global n", "not allowed"),
    ],
)
def test_what_a_kernel_body_may_not_use(line, reason):
    with pytest.raises(kernels.KernelRejected, match=reason):
        kernels.validate(body(line))


def test_a_kernel_body_of_triton_is_accepted():
    kernels.validate(
        body(
            "pid = tl.program_id(0)\n"
            "offsets = pid * BLOCK + tl.arange(0, BLOCK)\n"
            "x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0).to(tl.float32)\n"
            "for i in range(3):\n"
            "    x = tl.math.exp(x) if i > 1 else tl.maximum(x, 0.0)\n"
            "tl.store(x_ptr + offsets, tl.sum(x, axis=0) + x * "
            "x_ptr.dtype.element_ty.primitive_bitwidth, mask=offsets < n)"
        )
    )


@triton.jit
def add_shifted(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(
        out_ptr + offsets,
        tl.load(a_ptr + offsets, mask=mask) + tl.load(b_ptr + offsets, mask=mask),
        mask=mask,
    )


def wrapper(x, out):
    n = out.numel() - 1
    tmp = torch.ones_like(out)  # a scratch buffer, filled by torch: the grader gets a poisoned one
    add_shifted[(triton.cdiv(n, 256),)](x[1:], tmp, out, n, BLOCK=256)


def test_recorded_launches_replay_on_the_graders_tensors_with_views_and_scratch():
    n = 1001
    recipe = kernels.record_launches(wrapper, [torch.zeros(n), torch.zeros(n)], ["x", "out"])
    (launch,) = recipe["launches"]
    assert launch["grid"] == [4, 1, 1] and launch["args"]["a_ptr"]["tensor"] == "x"
    assert (
        launch["args"]["a_ptr"]["offset"] == 1 and launch["args"]["b_ptr"]["tensor"] == "scratch0"
    )
    assert kernels.scratch_names(recipe) == {"scratch0": "b_ptr"}
    built = kernels.Built(recipe["sources"], recipe["constants"], interpreted=True)
    x, out = torch.arange(float(n)), torch.zeros(n)
    storages = {"x": x, "out": out} | kernels.scratch_tensors(recipe, "cpu")
    with traffic.count({"x": x, "out": out}) as seen:
        kernels.replay(recipe, built, storages)
    assert (
        out[: n - 1].isnan().all()
    )  # the scratch buffer was NaN here, whatever torch put in it there
    assert seen.loaded["x"] == 4 * (n - 1) and seen.loaded["b_ptr"] == 4 * (n - 1)


def test_a_launch_that_views_past_a_tensor_is_refused():
    recipe = kernels.record_launches(wrapper, [torch.zeros(11), torch.zeros(11)], ["x", "out"])
    recipe["launches"][0]["args"]["a_ptr"]["shape"] = [100]
    built = kernels.Built(recipe["sources"], recipe["constants"], interpreted=True)
    storages = {"x": torch.zeros(11), "out": torch.zeros(11)} | kernels.scratch_tensors(
        recipe, "cpu"
    )
    with pytest.raises(kernels.KernelRejected, match="past the end of x"):
        kernels.replay(recipe, built, storages)


@triton.jit
def atomic_sum(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(
        total_ptr + offsets * 0, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n
    )


@triton.jit
def atomic_scatter(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(total_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@pytest.mark.skipif(
    brrr.device.ON_GPU,
    reason="this kernel is compiled here (a GPU): the grader counts through "
    "its interpreted replay, which tests/grading/test_grading_interpreter_on_gpu.py covers",
)
def test_atomics_are_counted_and_bounds_checked():
    x, total = torch.ones(100), torch.zeros(1)
    with traffic.count({"x": x, "total": total}) as seen:
        atomic_sum[(1,)](x, total, 100, BLOCK=128)
    assert total.item() == 100 and seen.loaded["total"] == 400 and seen.stored["total"] == 400
    with pytest.raises(Exception), traffic.count({"x": x, "total": total}) as seen:
        atomic_scatter[(1,)](
            x, total, 100, BLOCK=128
        )  # adds into total[0:100], which has 1 element
    assert seen.violations and "total_ptr" in str(seen.violations[0])


def test_counting_a_compiled_kernel_is_a_clear_error_not_a_silent_zero():
    from triton.runtime.jit import JITFunction

    compiled = JITFunction(add_shifted.fn)
    with pytest.raises(traffic.TrafficCounterUnavailable, match="compiled kernel"):
        with traffic.count():
            compiled[(1,)](torch.zeros(4), torch.zeros(4), torch.zeros(4), 4, BLOCK=4)


def test_the_replayed_source_is_the_checked_one_and_lives_on_no_disk():
    """Triton reads a kernel's source again before it runs it. That read must see
    the source the grader checked: a file a student's process could rewrite in
    between (a temporary folder of the same user) would hand it the grader."""
    import inspect
    import linecache
    import os

    recipe = kernels.record_launches(wrapper, [torch.zeros(11), torch.zeros(11)], ["x", "out"])
    built = kernels.Built(recipe["sources"], recipe["constants"], interpreted=True)
    function = built.kernels["add_shifted"].fn
    filename = function.__code__.co_filename
    assert not os.path.exists(filename)  # what Triton reads comes from no file
    assert inspect.getsource(function) == recipe["sources"]["add_shifted"]
    linecache.checkcache()  # what inspect does before reading: a pinned entry stays
    assert inspect.getsource(function) == recipe["sources"]["add_shifted"]
    x, out = torch.arange(11.0), torch.zeros(11)
    storages = {"x": x, "out": out} | kernels.scratch_tensors(recipe, "cpu")
    kernels.replay(recipe, built, storages)
    assert out[:10].isnan().all()  # ran the checked kernel: x + poisoned scratch
