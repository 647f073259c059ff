"""Per-op rows of brrr.diagnose on made-up measurements: regimes against given roofs, and a compiled
step's generated code given the work of the eager ops it replaced."""

import pytest

from brrr.ceilings import Ceilings
from brrr.diagnose import ops

CPU = Ceilings(
    copy_bandwidth=1e10,
    matmul_peak={"float32": 7e10},
    vector_peak=4e10,
    dispatch_overhead=2e-6,
    threads=1,
    env={"device_type": "cpu"},
)
N = 2**25  # elements of a 128 MiB fp32 tensor


def test_rows_join_profiler_and_dispatch_names_and_take_their_regimes():
    rows = ops.op_rows(
        {"aten::mm": 0.03, "aten::mul": 0.03, "aten::view": 1e-6},
        {"mm": 2 * 1024**3, "mul": N},
        {"mm": 3 * 1024**2 * 4, "mul": 8 * N},
        {"mm": 1, "mul": 1, "view": 1},
        CPU,
        "float32",
    )
    found = {row.name: row for row in rows}
    assert found["mm"].regime == "compute-bound" and found["mm"].op_class == "tensor contraction"
    assert found["mm"].flops_fraction == pytest.approx(2 * 1024**3 / 0.03 / 7e10)
    assert found["mul"].regime == "memory-bound"
    assert found["mul"].bandwidth_fraction == pytest.approx(8 * N / 0.03 / 1e10)
    assert found["view"].regime == "overhead-bound"  # no work: its time is dispatch
    assert [row.name for row in rows] == ["mm", "mul", "view"]  # slowest first


def test_compiled_code_gets_the_work_of_the_ops_it_fused():
    rows = ops.op_rows(
        {"## Call CompiledFxGraph abc ##": 0.05, "TorchDynamo Cache Lookup": 5e-5},
        {"mul": N, "add": N, "abs": N},
        {"mul": 8 * N, "add": 8 * N, "abs": 8 * N},
        {"mul": 1, "add": 1, "abs": 1},
        CPU,
        "float32",
    )
    merged = ops.merge_compiled(rows, CPU, "float32")
    assert [row.name for row in merged] == [ops.FUSED_NAME, "TorchDynamo Cache Lookup"]
    fused = merged[0]
    assert (fused.seconds, fused.flops, fused.bytes) == (0.05, 3 * N, 24 * N)
    assert fused.op_class == "element-wise" and fused.regime == "memory-bound"
    eager = ops.op_rows({"aten::mul": 0.03}, {"mul": N}, {"mul": 8 * N}, {"mul": 1}, CPU, "float32")
    assert ops.merge_compiled(eager, CPU, "float32") == eager  # no compiled code: unchanged


def test_a_rate_above_a_compute_roof_is_a_counting_error_naming_the_op():
    """A roof is the best case this machine measured, so an op above it had more FLOPs counted than
    it did (torch's convolution backward counted groups times too many for a depthwise net: an MFU
    of 152%): the report names the op as a counting error, never the ceilings as stale. Bytes faster
    than the copy bandwidth came from a cache. Rates under their roofs get no note."""
    from types import SimpleNamespace

    from brrr.diagnose import report

    rows = ops.op_rows(
        {"aten::convolution_backward": 0.01, "aten::mul": 0.03, "aten::add": 0.03},
        {"convolution_backward": 2 * 1024**3, "mul": N, "add": N},
        {"convolution_backward": 3 * 1024**2 * 4, "mul": 8 * N, "add": 4e7},
        {"convolution_backward": 1, "mul": 1, "add": 1},
        CPU,
        "float32",
    )
    found = {row.name: row for row in rows}
    assert found["convolution_backward"].flops_fraction > 1 and found["mul"].bandwidth_fraction < 1
    diagnosis = SimpleNamespace(mfu=1.2, rows=rows, op_rows=rows, ceilings=CPU)
    compute, bandwidth = report.above_the_roofs(diagnosis)
    fraction = found["convolution_backward"].flops_fraction
    assert compute == f"MFU 120%, convolution_backward {fraction:.0%}" and bandwidth == ""
    assert report._aten_names(diagnosis) == "aten::convolution_backward"
    quick = ops.op_rows({"aten::mul": 1e-2}, {"mul": N}, {"mul": 8 * N}, {"mul": 1}, CPU, "float32")
    assert report.above_the_roofs(
        SimpleNamespace(mfu=0.5, rows=quick, op_rows=quick, ceilings=CPU)
    ) == (
        "",
        "mul 268%",
    )


def test_random_sort_and_index_ops_far_below_both_roofs_get_their_own_class_and_regime():
    """Dropout's random draws took 22% of a transformer's step, labelled memory-bound at 3% of the
    copy bandwidth: a fix for memory-bound ops does nothing for them."""
    rows = ops.op_rows(
        {"aten::bernoulli_": 0.5, "aten::mul": 0.03},
        {"bernoulli_": N, "mul": N},
        {"bernoulli_": 8 * N, "mul": 8 * N},
        {"bernoulli_": 1, "mul": 1},
        CPU,
        "float32",
    )
    found = {row.name: row for row in rows}
    assert found["bernoulli_"].bandwidth_fraction < ops.FAR_BELOW  # 0.54 GB/s of 10
    assert (
        found["bernoulli_"].op_class == ops.IRREGULAR_CLASS
        and found["bernoulli_"].regime == ops.BELOW_ROOFS
    )
    assert found["mul"].op_class == "element-wise" and found["mul"].regime == "memory-bound"
    classes = {row.name: row for row in ops.class_rows(rows, CPU, "float32")}
    assert classes[ops.IRREGULAR_CLASS].regime == ops.BELOW_ROOFS
    assert ops.seconds_by_regime(rows)[ops.BELOW_ROOFS] == pytest.approx(0.5)
    fast = ops.op_rows(
        {"aten::bernoulli_": 0.1},
        {"bernoulli_": N},
        {"bernoulli_": 8 * N},
        {"bernoulli_": 1},
        CPU,
        "float32",
    )
    assert fast[0].regime == "memory-bound"  # 27% of the copy roof: the roof sets its speed


def test_fusion_advice_for_work_already_fused_promises_nothing():
    from brrr.diagnose.advice import fusion_advice

    chain = fusion_advice(
        0.3, 3
    )  # three passes fused into one save two thirds of their time at most
    assert chain.predicted_gain == pytest.approx(1 / (1 - 0.2)) and "in 3 calls" in chain.text
    fused = fusion_advice(0.3, 1)
    assert fused.predicted_gain == 1.0 and "already reads and writes memory once" in fused.text


def test_the_slowest_ops_table_gives_shares_of_all_the_time_inside_ops():
    """Shares of the listed ops alone made one addmm 41% of the step beside its class's 36%."""
    from brrr.diagnose import report

    rows = ops.op_rows(
        {"aten::mm": 0.01, "aten::mul": 0.03, "aten::add": 0.03},
        {"mm": 2 * 1024**3, "mul": N, "add": N},
        {"mm": 3 * 1024**2 * 4, "mul": 8 * N, "add": 8 * N},
        {"mm": 1, "mul": 1, "add": 1},
        CPU,
        "float32",
    )
    slowest = report._table(rows[:1], "slowest ops", sum(row.seconds for row in rows))
    assert slowest[2].split()[0] == rows[0].name and "42.9%" in slowest[2], slowest[2]
