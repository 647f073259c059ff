"""brrr.diagnose.profile: the profiler's time goes to the op whose work was counted, and steps with
nothing to diagnose are refused with what to do."""

from types import SimpleNamespace

import pytest
import torch

from brrr.diagnose import DiagnoseError, diagnose
from brrr.diagnose import profile
from brrr.diagnose.profile import dispatch_owner


def event(name, parent=None):
    return SimpleNamespace(name=name, cpu_parent=parent)


def test_a_backend_op_s_time_goes_to_the_dispatched_op_that_called_it():
    """ResNet-18's forward convolutions (27% of its step) read "0 FLOP, overhead-bound": the FLOPs
    were counted on aten::convolution and the time landed on aten::mkldnn_convolution, joined by
    name."""
    owner = dispatch_owner(
        {"convolution": 20, "_native_batch_norm_legit": 20, "empty": 5, "addmm": 1}
    )
    conv2d = event("aten::conv2d")
    convolution = event("aten::convolution", conv2d)
    inner = event("aten::_convolution", convolution)
    mkldnn = event("aten::mkldnn_convolution", inner)
    assert owner(mkldnn) == owner(inner) == owner(convolution) == "aten::convolution"
    assert (
        owner(event("aten::empty", mkldnn)) == "aten::convolution"
    )  # dispatched elsewhere, not here
    assert (
        owner(conv2d) == "aten::conv2d"
    )  # a wrapper above the count keeps its own (dispatch) time
    # the same batch norm under another name: counted as _native_batch_norm_legit, profiled as
    # native_batch_norm
    norm = event(
        "aten::native_batch_norm", event("aten::_batch_norm_impl_index", event("aten::batch_norm"))
    )
    assert owner(norm) == owner(event("aten::empty", norm)) == "aten::_native_batch_norm_legit"
    assert owner(event("aten::addmm", event("aten::linear"))) == "aten::addmm"
    assert owner(event("ConvolutionBackward0")) == "ConvolutionBackward0"  # autograd bookkeeping


def test_a_small_conv_net_has_no_op_with_time_and_no_work():
    """On a real profile: every convolution and batch norm row has FLOPs, and no backend name has a
    row."""
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU()
    )
    x = torch.randn(4, 3, 16, 16)

    def step(net, x):
        loss = net(x).sum()
        loss.backward()
        return loss

    found = diagnose(step, net, x, threads=1)
    names = {row.name: row for row in found.op_rows}
    for name in (
        "convolution",
        "convolution_backward",
        "_native_batch_norm_legit",
        "native_batch_norm_backward",
    ):
        assert names[name].flops > 0 and names[name].seconds > 0, found.report()
    assert not {"mkldnn_convolution", "_convolution", "native_batch_norm"} & names.keys(), (
        found.report()
    )
    for row in found.op_rows:
        assert row.flops_fraction <= 1, found.report()


def test_a_step_with_no_torch_op_is_refused():
    """It once got "overhead-bound, at most 0.0x"."""
    with pytest.raises(DiagnoseError, match="ran no torch op.*nothing to diagnose.*cProfile"):
        diagnose(lambda x: x * 2.0, 3.0, threads=1)


def test_a_step_shorter_than_the_profiler_s_own_cost_is_refused():
    """One add on one element takes about 2 µs here; the profiler adds 19-33 µs to each step by
    itself."""
    with pytest.raises(
        DiagnoseError, match="less than the .* the profiler adds to each step.*a loop inside step"
    ):
        diagnose(lambda x: x + 1, torch.ones(1), threads=1)


def test_a_burst_in_one_reading_of_the_profiler_s_cost_is_read_again_not_refused(monkeypatch):
    """Beside the neighbour load one reading of the profiler's own cost was 1.40 ms (19-33 µs quiet)
    and a 195 µs step was refused. A burst only adds to that cost: the step is read against another
    reading, and the least one is the floor; a step shorter than every reading is still refused."""
    bursts = iter([1.0])  # seconds: one burst, then quiet readings (as many as the run asks)
    monkeypatch.setattr(profile, "profiler_floor_s", lambda steps: next(bursts, 2e-6))
    a = torch.randn(160, 160)
    found = diagnose(lambda a: a @ a, a, threads=1)
    assert found.profiler_floor_s == 2e-6
    monkeypatch.setattr(profile, "profiler_floor_s", lambda steps: 1.0)
    with pytest.raises(DiagnoseError, match="less than the 1.00 s the profiler adds"):
        diagnose(lambda a: a @ a, a, threads=1)


def test_one_matmul_is_compute_bound_once_the_profiler_s_own_time_is_taken_off():
    """A 256² matmul read "overhead-bound" beside "MFU 100%": the profiler's own time between ops.
    160² here."""
    a = torch.randn(160, 160)
    found = diagnose(lambda a: a @ a, a, threads=1)
    assert found.regime == "compute-bound", found.report()
    assert found.profiler_floor_s > 0
