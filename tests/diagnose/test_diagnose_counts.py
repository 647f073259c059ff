"""What brrr.diagnose counts for recurrent layers, lookups and depthwise convolutions, how it names
what it cannot count, and the advice it gives for each: counted on small layers, no timing."""

import pytest
import torch

from brrr import counting, opclasses
from brrr.ceilings import Ceilings
from brrr.diagnose import ops, report
from brrr.diagnose.advice import (
    Advice,
    channels_last_advice,
    memory_bound_contraction_advice,
    with_layout,
)
from brrr.diagnose.profile import TrafficLog

CPU = Ceilings(
    copy_bandwidth=20e9,
    matmul_peak={"float32": 100e9},
    vector_peak=20e9,
    dispatch_overhead=5e-6,
    threads=1,
    env={"device_type": "cpu"},
)


def counted(run):
    traffic = TrafficLog()
    with traffic:
        flops = opclasses.count_flops(run)
    return flops, traffic


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_layers_are_counted_as_their_gates_matmuls(kind):
    """An LSTM read memory-bound at an MFU of 1%: 87% of its step in kernels counted as 0 FLOPs (by
    hand about 11 GFLOP a step, compute-bound)."""
    torch.manual_seed(0)
    layer = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(32, 64, batch_first=True)
    x = torch.randn(4, 10, 32)
    flops, _ = counted(lambda: layer(x)[0].sum().backward())
    forward = counting.recurrent_layer(kind, 10, 4, 32, 64)
    assert flops.no_formula == {}, flops.no_formula
    assert flops.per_class()[opclasses.OpClass.CONTRACTION] >= 2 * forward * 0.9
    if "mkldnn_rnn_layer" in flops.flops:  # the CPU's one-call LSTM
        assert flops.flops["mkldnn_rnn_layer"] == forward
        assert flops.flops["mkldnn_rnn_layer_backward"] == 2 * forward


def test_a_lookup_is_charged_the_rows_it_touches_not_the_table():
    """An embedding-heavy recommender read "2613% of copy bandwidth": each lookup was charged the
    whole table."""
    table = torch.nn.Embedding(100_000, 16)
    bag = torch.nn.EmbeddingBag(100_000, 16, mode="sum")
    ids = torch.randint(0, 100_000, (8, 4))
    with torch.no_grad():
        _, traffic = counted(lambda: (table(ids), bag(ids)))
    rows = 8 * 4 * 16 * 4  # the rows the 32 indices touch, fp32
    table_bytes = 100_000 * 16 * 4
    assert rows <= traffic.bytes["embedding"] < table_bytes / 100
    bag_name = next(name for name in traffic.bytes if name.startswith("_embedding_bag"))
    assert rows <= traffic.bytes[bag_name] < table_bytes / 100


def test_a_loss_is_charged_the_entries_it_picks_not_its_whole_input():
    """A GPT-2's nll_loss_forward read 3382% of the copy bandwidth: charged all 51 MB of logits
    (a 50,257-token vocabulary) for the 256 entries it picks."""
    logits = torch.randn(8, 1000, requires_grad=True)
    targets = torch.randint(0, 1000, (8,))
    _, traffic = counted(lambda: torch.nn.functional.cross_entropy(logits, targets).backward())
    whole = 8 * 1000 * 4
    assert traffic.bytes["nll_loss_forward"] < whole / 100
    # the gradient is written whole; the input it gets for its shape is not read
    assert whole <= traffic.bytes["nll_loss_backward"] < 1.1 * whole


def test_depthwise_convolutions_get_rows_of_their_own_with_their_flops():
    """Depthwise and 1x1 convolutions shared one row (one aten op): channels_last measured 1.69x
    there and was never advised."""
    net = torch.nn.Sequential(
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=16), torch.nn.Conv2d(16, 32, 1)
    )
    x = torch.randn(2, 16, 8, 8)
    flops, traffic = counted(lambda: net(x).sum().backward())
    rows = traffic.flops_by_row(flops.flops)
    depthwise = "convolution" + opclasses.DEPTHWISE
    assert traffic.calls[depthwise] == 1 and traffic.calls["convolution"] == 1
    assert rows[depthwise] == opclasses.convolution_flops(
        (2, 16, 8, 8), (16, 1, 3, 3), (2, 16, 8, 8)
    )
    assert rows[depthwise] + rows["convolution"] == flops.flops["convolution"]
    assert sum(rows.values()) == flops.total
    assert opclasses.classify("aten::" + depthwise) is opclasses.OpClass.CONTRACTION


def test_causal_attention_counts_the_pairs_it_scores():
    """GPT-2's attention (is_causal) was counted as if every query saw every key: at sequence 1024
    the CPU flash kernel, which skips the blocks above the diagonal, read above the matmul roof."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, requires_grad=True) for _ in range(3))

    def attention(causal: bool) -> dict:
        run = torch.nn.functional.scaled_dot_product_attention
        flops, _ = counted(lambda: run(q, k, v, is_causal=causal).sum().backward())
        return {name: value for name, value in flops.flops.items() if "attention" in name}

    full, causal = attention(False), attention(True)
    assert full and sorted(full) == sorted(causal)
    for name, value in full.items():
        assert causal[name] == value * (16 * 17 // 2) // (16 * 16), (name, causal, full)
    assert opclasses.attention_pairs(4, 8, causal=True) == 1 + 2 + 3 + 4
    assert opclasses.attention_pairs(8, 4, causal=True) == 1 + 2 + 3 + 4 + 4 * 4


def test_causal_attention_with_dropout_has_every_op_counted():
    """GPT-2 training (transformers, dropout 0.1) read "no FLOP formula: tril ... please report
    them": with dropout a CPU takes aten's math attention, whose causal mask is a tril."""
    q = torch.randn(1, 2, 16, 8, requires_grad=True)
    run = torch.nn.functional.scaled_dot_product_attention
    flops, _ = counted(lambda: run(q, q, q, dropout_p=0.1, is_causal=True).sum().backward())
    assert "tril" in flops.calls and flops.no_formula == {}, flops.calls


def test_an_op_with_no_formula_is_named_never_a_silent_zero():
    flops, _ = counted(lambda: torch.special.bessel_j0(torch.ones(8)))
    assert "special_bessel_j0" in flops.no_formula
    known, _ = counted(lambda: torch.relu(torch.ones(8)).view(2, 4) + 1)
    assert known.no_formula == {}


def test_a_contraction_above_its_roof_is_a_counting_error_only_where_the_count_is_not_torchs():
    """ResNet-18's convolutions read above the torch.mm roof and the report blamed FLOP counting,
    whose count was FlopCounterMode's own: the roof was at fault."""
    from types import SimpleNamespace

    rows = ops.op_rows(
        {"aten::convolution": 0.01, "aten::convolution_backward": 0.01},
        {"convolution": 2 * 1024**3, "convolution_backward": 2 * 1024**3},
        {"convolution": 1e6, "convolution_backward": 1e6},
        {"convolution": 1, "convolution_backward": 1},
        CPU,
        "float32",
    )
    diagnosis = SimpleNamespace(
        mfu=0.9,
        rows=rows,
        op_rows=rows,
        ceilings=CPU,
        counted_as_torch={"convolution": True, "convolution_backward": False},
    )
    compute, _ = report.above_the_roofs(diagnosis)
    lines = " ".join(report._above_compute_lines(diagnosis, compute))
    assert "counting error" in lines and "aten::convolution_backward," in lines
    assert "convolution 2" in lines and "the count is not at fault" in lines
    diagnosis.counted_as_torch = {"convolution": True, "convolution_backward": True}
    lines = " ".join(report._above_compute_lines(diagnosis, compute))
    assert "counting error" not in lines and "the roof was read low" in lines
    flops, _ = counted(
        lambda: torch.nn.Conv2d(8, 8, 3, groups=8)(torch.randn(2, 8, 8, 8)).sum().backward()
    )
    assert flops.agrees_with_torch("convolution")
    assert not flops.agrees_with_torch("convolution_backward")  # torch's counts groups x too many


def _rows(seconds: dict[str, float], flops: dict[str, float], bytes_: dict[str, float]):
    calls = dict.fromkeys(seconds, 1)
    return ops.op_rows(
        {f"aten::{name}": value for name, value in seconds.items()},
        flops,
        bytes_,
        calls,
        CPU,
        "float32",
    )


def test_advice_names_only_what_the_step_contains():
    """A batch-1 MLP was advised "depthwise convolutions ... channels_last"."""
    skinny = _rows({"addmm": 0.01}, {"addmm": 2e6}, {"addmm": 4e6})
    text = memory_bound_contraction_advice(0.5, skinny, on_gpu=False).text
    assert "convolution" not in text.lower() and "channels_last" not in text
    assert "bigger batch" in text
    depthwise = "convolution" + opclasses.DEPTHWISE
    convs = _rows({depthwise: 0.01}, {depthwise: 2e6}, {depthwise: 4e6})
    text = memory_bound_contraction_advice(0.5, convs, on_gpu=False).text
    assert "Depthwise convolutions" in text and "channels_last" in text


def test_channels_last_is_advised_where_convolutions_dominate():
    convs = _rows(
        {"convolution": 0.03, "convolution_backward": 0.03, "add": 0.04},
        {"convolution": 1e9, "convolution_backward": 2e9, "add": 1e6},
        {"convolution": 1e8, "convolution_backward": 2e8, "add": 1e7},
    )
    found = channels_last_advice(convs, sum(row.seconds for row in convs), on_gpu=False)
    assert found is not None and found.fix == "channels_last" and "60%" in found.text
    reached = {row.name: max(row.flops_fraction, row.bandwidth_fraction) for row in convs}
    saved = 0.3 * (1 - reached["convolution"]) + 0.3 * (1 - reached["convolution_backward"])
    assert found.predicted_gain == pytest.approx(1 / (1 - saved))  # each at its roof, no further
    folded = with_layout(
        [Advice("compute-bound: the contractions above", 1.5, "compute-bound")], found
    )
    assert len(folded) == 1 and "channels_last" in folded[0].text and folded[0].fix == ""
    assert with_layout([], found) == [found]
    matmuls = _rows({"mm": 0.06, "add": 0.04}, {"mm": 1e9, "add": 1e6}, {"mm": 1e8, "add": 1e7})
    assert channels_last_advice(matmuls, 0.1, on_gpu=False) is None
