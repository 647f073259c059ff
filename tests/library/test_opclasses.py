"""brrr.opclasses: classification, FLOPs per class against hand counts, and the essay's table
shape."""

import pytest
import torch

from brrr import opclasses
from brrr.benchmarks.compute import EncoderConfig, encoder_training_step, table_checks
from brrr.opclasses import OpClass


def test_classify_profiler_and_dispatch_names():
    assert opclasses.classify("aten::mm") is OpClass.CONTRACTION
    assert opclasses.classify(torch.ops.aten.addmm.default) is OpClass.CONTRACTION
    assert opclasses.classify("aten.bmm.default") is OpClass.CONTRACTION
    assert opclasses.classify("aten::native_layer_norm_backward") is OpClass.NORMALIZATION
    assert opclasses.classify("aten::_softmax") is OpClass.NORMALIZATION
    assert opclasses.classify("aten::gelu") is OpClass.ELEMENTWISE
    assert opclasses.classify("aten::bernoulli_") is OpClass.ELEMENTWISE
    assert opclasses.classify("aten::sum") is OpClass.ELEMENTWISE  # a bias gradient
    assert opclasses.classify("aten::view") is OpClass.OTHER
    assert opclasses.classify("AddmmBackward0") is OpClass.OTHER  # autograd bookkeeping
    assert opclasses.classify("aten::no_such_op") is None


def test_every_backend_convolution_and_batch_norm_has_a_class():
    """The profiler's time lands on the backend's op (aten::mkldnn_convolution on a CPU, cudnn on a
    GPU)."""
    for name in (
        "mkldnn_convolution",
        "cudnn_convolution",
        "convolution_backward",
        "_conv_depthwise2d",
    ):
        assert opclasses.classify(f"aten::{name}") is OpClass.CONTRACTION, name
    for name in (
        "native_batch_norm",
        "_native_batch_norm_legit",
        "cudnn_batch_norm",
        "batch_norm_backward",
    ):
        assert opclasses.classify(f"aten::{name}") is OpClass.NORMALIZATION, name


@pytest.mark.parametrize(
    "channels_in, channels_out, groups, input_grad",
    [(8, 8, 8, True), (8, 8, 8, False), (8, 16, 1, True), (8, 4, 2, True)],
    ids=["depthwise", "depthwise, first layer", "dense", "grouped"],
)
def test_convolution_flops_by_hand_forward_and_backward(
    channels_in, channels_out, groups, input_grad
):
    """A 3×3 convolution, padding 1, of (2, C_in, 10, 10): each of the 2·C_out·10·10 outputs takes
    (C_in/groups)·9 multiply-adds, 2 FLOPs each. The backward computes the weight gradient (as many
    multiply-adds) and, where the input needs one, the input gradient (as many again). torch 2.13's
    own formula left the groups out of the weight gradient: 8x too many for the depthwise case."""
    conv = torch.nn.Conv2d(channels_in, channels_out, 3, padding=1, groups=groups, bias=False)
    x = torch.randn(2, channels_in, 10, 10, requires_grad=input_grad)
    count = opclasses.count_flops(lambda: conv(x).sum().backward())
    forward = 2 * (2 * channels_out * 10 * 10) * (channels_in // groups) * 9
    assert count.flops["convolution"] == forward
    assert count.flops["convolution_backward"] == forward * (2 if input_grad else 1)


def test_forward_flops_per_class_by_hand():
    # Linear 8 -> 16 on a batch of 4, then LayerNorm(16), then GELU
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU())
    x = torch.randn(4, 8)
    with torch.no_grad():
        count = opclasses.count_flops(lambda: model(x))
    per_class = count.per_class()
    assert per_class[OpClass.CONTRACTION] == 2 * 4 * 8 * 16  # addmm, FlopCounterMode's own count
    assert per_class[OpClass.NORMALIZATION] == 7 * 4 * 16  # layer norm with scale and shift
    assert per_class[OpClass.ELEMENTWISE] == 5 * 4 * 16  # erf GELU
    assert count.unclassified == {}


def test_backward_counts_two_more_matmuls():
    linear = torch.nn.Linear(32, 64, bias=False)
    x = torch.randn(16, 32, requires_grad=True)
    count = opclasses.count_flops(lambda: linear(x).sum().backward())
    forward = 2 * 16 * 32 * 64
    assert count.per_class()[OpClass.CONTRACTION] == 3 * forward  # y = xWᵀ, dx = dy W, dW = dyᵀ x


def test_attention_contraction_flops_whatever_the_kernel():
    b, h, s, d = 2, 3, 16, 8
    q, k, v = (torch.randn(b, h, s, d) for _ in range(3))
    count = opclasses.count_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))
    assert count.per_class()[OpClass.CONTRACTION] == 4 * b * h * s * s * d
    assert count.unclassified == {}


def test_eval_fast_path_is_caught():
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
    x = torch.randn(2, 8, 64)
    with torch.no_grad():
        count = opclasses.count_flops(lambda: layer(x))
    assert count.total == 0
    assert "_transformer_encoder_layer_fwd" in count.unclassified
    times = opclasses.OpTimes(seconds={"aten::mm": 1.0}, steps=1, clock="CPU")
    with pytest.raises(ValueError, match="fast path"):
        opclasses.class_table(count, times)


SMALL_LAYER = EncoderConfig(d_model=512, heads=8, d_ff=2048, batch=2, seq=64, dtype="float32")


def test_training_step_has_the_essays_table_shape():
    step = encoder_training_step(SMALL_LAYER)
    table = opclasses.measure(step, steps=2, warmup=1)
    # FLOPs are counted, not timed: at d_model 512 contractions hold over 99% of them
    assert table.flop_share(OpClass.CONTRACTION) >= 0.99
    for cls in opclasses.ESSAY_CLASSES:
        assert table.flops[cls] > 0, cls
        assert table.seconds[cls] > 0, cls
    # the essay's point, measured in this run: the rest take far more time than their FLOPs
    checks = table_checks(table)
    assert all(check.passed for check in checks), "\n".join(map(str, checks))
    assert table.rate(OpClass.CONTRACTION) > 10 * table.rate(OpClass.ELEMENTWISE)
    text = table.format()
    assert "99.80 /" in text and "tensor contraction" in text


def test_table_rows_carry_the_essay_figures():
    table = opclasses.ClassTable(
        flops={
            OpClass.CONTRACTION: 998.0,
            OpClass.NORMALIZATION: 1.5,
            OpClass.ELEMENTWISE: 0.5,
            OpClass.OTHER: 0.0,
        },
        seconds={
            OpClass.CONTRACTION: 0.6,
            OpClass.NORMALIZATION: 0.25,
            OpClass.ELEMENTWISE: 0.15,
            OpClass.OTHER: 0.0,
        },
        clock="CPU",
    )
    rows = {row["class"]: row for row in table.rows()}
    assert rows["tensor contraction"]["essay_flop_pct"] == 99.80
    assert rows["element-wise"]["essay_time_pct"] == 13.5
    assert rows["tensor contraction"]["flop_pct"] == pytest.approx(99.8)
    assert rows["statistical normalization"]["time_pct"] == pytest.approx(25.0)
    assert rows["other"]["essay_flop_pct"] is None
    assert table.rate(OpClass.OTHER) != table.rate(OpClass.OTHER)  # nan: no time
    failing = opclasses.ClassTable(
        flops={
            OpClass.CONTRACTION: 90.0,
            OpClass.NORMALIZATION: 5.0,
            OpClass.ELEMENTWISE: 5.0,
            OpClass.OTHER: 0.0,
        },
        seconds={
            OpClass.CONTRACTION: 0.95,
            OpClass.NORMALIZATION: 0.03,
            OpClass.ELEMENTWISE: 0.02,
            OpClass.OTHER: 0.0,
        },
        clock="CPU",
    )
    assert [check.passed for check in table_checks(failing)] == [False, False]
    # 99.7% of FLOPs and 83% of runtime in contractions: the rest take 17% / 0.3% = 57x, a pass;
    # at 98% of runtime (6.7x) the check must fail, though contractions took less time than FLOPs
    for contraction_seconds, passes in ((0.83, True), (0.98, False)):
        shares = opclasses.ClassTable(
            flops={
                OpClass.CONTRACTION: 99.7,
                OpClass.NORMALIZATION: 0.2,
                OpClass.ELEMENTWISE: 0.1,
                OpClass.OTHER: 0.0,
            },
            seconds={
                OpClass.CONTRACTION: contraction_seconds,
                OpClass.NORMALIZATION: (1 - contraction_seconds) / 2,
                OpClass.ELEMENTWISE: (1 - contraction_seconds) / 2,
                OpClass.OTHER: 0.0,
            },
            clock="CPU",
        )
        assert table_checks(shares)[1].passed is passes


class _FakeEvent:
    """A key_averages() row: name, device type and self times in microseconds."""

    def __init__(self, key, device_type, self_device_us=0.0, self_cpu_us=0.0, annotation=False):
        self.key, self.device_type = key, device_type
        self.self_device_time_total, self.self_cpu_time_total = self_device_us, self_cpu_us
        self.is_user_annotation = annotation


def test_gpu_accounting_counts_each_kernel_once():
    from torch.autograd import DeviceType

    events = [
        _FakeEvent("aten::mm", DeviceType.CPU, self_device_us=600.0, self_cpu_us=20.0),
        _FakeEvent(
            "aten::native_layer_norm", DeviceType.CPU, self_device_us=250.0, self_cpu_us=15.0
        ),
        _FakeEvent("aten::add", DeviceType.CPU, self_device_us=100.0, self_cpu_us=10.0),
        _FakeEvent("aten::linear", DeviceType.CPU, self_device_us=0.0, self_cpu_us=5.0),
        _FakeEvent("cudaLaunchKernel", DeviceType.CPU, self_device_us=0.0, self_cpu_us=30.0),
        # the kernels themselves: the same 950 us, plus 50 us no op claimed
        _FakeEvent("sm90_xmma_gemm_bf16", DeviceType.CUDA, self_device_us=600.0),
        _FakeEvent("layer_norm_kernel", DeviceType.CUDA, self_device_us=250.0),
        _FakeEvent("vectorized_elementwise_kernel", DeviceType.CUDA, self_device_us=150.0),
    ]
    times = opclasses.aggregate_self_times(events, steps=2, device_clock=True)
    per_class = times.per_class()
    assert per_class[OpClass.CONTRACTION] == pytest.approx(300e-6)  # per step
    assert per_class[OpClass.NORMALIZATION] == pytest.approx(125e-6)
    assert per_class[OpClass.ELEMENTWISE] == pytest.approx(50e-6)
    assert per_class[OpClass.OTHER] == pytest.approx(25e-6)  # the unattributed kernel time
    cpu = opclasses.aggregate_self_times(events, steps=1, device_clock=False)
    assert cpu.per_class()[OpClass.CONTRACTION] == pytest.approx(20e-6)
    assert cpu.per_class()[OpClass.OTHER] == pytest.approx(35e-6)  # wrapper + runtime call
    with pytest.raises(RuntimeError, match="no CUDA kernel time"):
        opclasses.aggregate_self_times(
            [_FakeEvent("aten::mm", DeviceType.CPU)], steps=1, device_clock=True
        )


def test_user_annotations_are_not_kernel_time():
    # A record_function("step") range around one step: the profiler reports it
    # as a CPU row and as a gpu_user_annotation row (device type CUDA) whose
    # device time spans every kernel of the step. Neither is a kernel.
    from torch.autograd import DeviceType

    events = [
        _FakeEvent("aten::mm", DeviceType.CPU, self_device_us=600.0),
        _FakeEvent("aten::add", DeviceType.CPU, self_device_us=100.0),
        _FakeEvent("step", DeviceType.CPU, self_device_us=0.0, self_cpu_us=40.0, annotation=True),
        _FakeEvent("sm90_xmma_gemm_bf16", DeviceType.CUDA, self_device_us=600.0),
        _FakeEvent("vectorized_elementwise_kernel", DeviceType.CUDA, self_device_us=100.0),
        _FakeEvent("step", DeviceType.CUDA, self_device_us=720.0, annotation=True),
    ]
    times = opclasses.aggregate_self_times(events, steps=1, device_clock=True)
    assert "<unattributed kernels>" not in times.seconds
    assert "step" not in times.seconds
    per_class = times.per_class()
    assert per_class[OpClass.CONTRACTION] == pytest.approx(600e-6)
    assert per_class[OpClass.ELEMENTWISE] == pytest.approx(100e-6)
    assert per_class[OpClass.OTHER] == 0.0
