import math

import pytest

from brrr import counting, essay
from brrr.roofline import Roof, require_memory_bound
from brrr.roofline import (
    Regime,
    attainable_flops,
    fraction_of_roof,
    intensity,
    predicted_time,
    regime,
    ridge_point,
)

# The essay's A100, with a 10 us per-op overhead: a machine whose regimes are known.
A100_TENSOR = Roof(
    essay.A100["matmul_peak_bf16"], essay.A100["bandwidth"], 10e-6, "A100 bf16 matmul"
)
A100_VECTOR = Roof(essay.A100["fp32_peak"], essay.A100["bandwidth"], 10e-6, "A100 fp32")


def test_ridge_point_of_the_a100():
    assert ridge_point(312e12, 1.5e12) == pytest.approx(208)
    assert A100_TENSOR.ridge_point == pytest.approx(208)


def test_unary_fp32_op_has_intensity_one_eighth():
    cos = counting.pointwise(2**28)
    assert intensity(cos.flops, cos.bytes) == pytest.approx(1 / 8)


@pytest.mark.parametrize(
    "op,roof,expected",
    [
        (counting.pointwise(2**28, name="cos on 1 GiB"), A100_VECTOR, Regime.MEMORY),
        (counting.softmax(2**16, 4096), A100_VECTOR, Regime.MEMORY),
        (counting.layer_norm(2**16, 4096), A100_VECTOR, Regime.MEMORY),
        (counting.matmul(8192, 8192, 8192), A100_TENSOR, Regime.COMPUTE),
        (counting.matmul(1, 8192, 8192, name="matrix-vector"), A100_TENSOR, Regime.MEMORY),
        (counting.pointwise(1, name="one element"), A100_VECTOR, Regime.OVERHEAD),
        (counting.matmul(64, 64, 64, name="tiny matmul"), A100_TENSOR, Regime.OVERHEAD),
    ],
    ids=lambda value: getattr(value, "name", None) or getattr(value, "label", None) or str(value),
)
def test_regime_of_known_cases(op, roof, expected):
    assert regime(op.flops, op.bytes, roof) is expected


def test_regime_flips_exactly_at_the_ridge_point():
    roof = Roof(peak_flops=100.0, bandwidth=10.0)  # ridge at 10 FLOPs/byte
    assert regime(99.0, 10.0, roof) is Regime.MEMORY
    assert regime(101.0, 10.0, roof) is Regime.COMPUTE


def test_predicted_time_is_the_largest_of_three_limits():
    roof = Roof(peak_flops=1e12, bandwidth=1e11, overhead_s=1e-5)
    assert predicted_time(1e12, 1.0, roof) == pytest.approx(1.0)  # compute
    assert predicted_time(1.0, 1e11, roof) == pytest.approx(1.0)  # memory
    assert predicted_time(1.0, 1.0, roof) == pytest.approx(1e-5)  # overhead


def test_on_a_cpu_the_overhead_adds_to_the_work():
    """Dispatch and kernel run one after the other on one thread: the overhead chapter's t = sum(h +
    d)."""
    roof = Roof(peak_flops=1e12, bandwidth=1e11, overhead_s=1e-5, overhead_adds=True)
    assert predicted_time(1e12, 1.0, roof) == pytest.approx(1.0 + 1e-5)
    assert predicted_time(1e6, 1e6, roof) == pytest.approx(
        1e-5 + 1e-5
    )  # memory 10 us, plus the overhead
    assert (
        regime(1e6, 1e6, roof) is Regime.OVERHEAD
    )  # the overhead is at least as large as the work


def test_attainable_flops_is_the_roof():
    roof = Roof(peak_flops=100.0, bandwidth=10.0)
    assert attainable_flops(1.0, roof) == 10.0
    assert attainable_flops(1000.0, roof) == 100.0


def test_fraction_of_roof():
    roof = Roof(peak_flops=100.0, bandwidth=10.0)
    assert fraction_of_roof(
        flops=1.0, bytes_moved=10.0, measured_s=2.0, roof=roof
    ) == pytest.approx(0.5)


def test_zero_bytes_is_an_error():
    with pytest.raises(ValueError):
        intensity(1.0, 0)
    assert not math.isnan(intensity(0.0, 1.0))


def test_a_value_above_its_roof_says_why_on_the_same_line():
    from brrr.roofline import ROOF_NOISE, above_roof

    assert above_roof(0.9, 1.0, 0.1) == "" and above_roof(1.0, 1.0, 0.0) == ""
    within = above_roof(1.04, 1.0, 0.02)
    assert "within this run's spread" in within
    beyond = above_roof(1.0 + 0.02 + ROOF_NOISE + 0.01, 1.0, 0.02)
    assert "beyond this run's spread" in beyond and "a low roof" in beyond
    # the old cosine roof: the compiled x.cos() at 142% of it is no noise
    assert "beyond" in above_roof(1.42, 1.0, 0.04, beyond="measured on a 2-cosine chain")
    assert above_roof(1.42, 1.0, 0.04, beyond="measured on a 2-cosine chain").endswith(
        "measured on a 2-cosine chain"
    )


def test_a_roof_read_low_is_measured_again_before_the_memory_bound_claim_fails(monkeypatch, capsys):
    """The planted regression of notebooks 00 and 22's check: a vector peak read 7.4x low under load
    puts layer norm and softmax right of the ridge. The claim measures the roofs again before it
    fails, and fails where the new roof is as low."""
    from brrr import counting, targets

    monkeypatch.setenv(targets.STRICT, "1")
    ops = {"layer norm": counting.layer_norm(4096, 1024), "softmax": counting.softmax(4096, 1024)}
    quiet, loaded = (
        Roof(139.7e9, 40e9, label="fp32 non-matmul"),
        Roof(18.9e9, 40e9, label="fp32 non-matmul"),
    )
    assert all(regime(op.flops, op.bytes, loaded) is Regime.COMPUTE for op in ops.values())
    assert require_memory_bound(ops, loaded, lambda: quiet) is True
    assert "measuring the roofs again" in capsys.readouterr().out
    with pytest.raises(targets.TargetMissed, match="expected memory-bound"):
        require_memory_bound(ops, loaded, lambda: loaded)
    with pytest.raises(targets.TargetMissed):
        require_memory_bound(ops, loaded)
