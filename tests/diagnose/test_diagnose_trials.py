"""brrr.diagnose.trials (--try): which fixes can be tried, how the measurements change the advice,
and the contracts (a factory's batch parameter, the modules whose dropout is turned off)."""

import pytest
import torch

from brrr.diagnose import DiagnoseError, trials
from brrr.diagnose.advice import Advice, with_trials
from brrr.diagnose.trials import Trial

COMPUTE, MEMORY, OVERHEAD = "compute-bound", "memory-bound", "overhead-bound"


def test_parse_takes_all_or_names_and_refuses_others():
    assert trials.parse("all") == trials.parse(True) == trials.TRIES
    assert trials.parse("dropout,bf16") == ("bf16", "dropout")
    assert trials.parse(None) == ()
    with pytest.raises(
        DiagnoseError, match="cannot try quantize: the fixes that can be tried are compile"
    ):
        trials.parse("quantize")


def test_measured_slower_is_never_advised_and_measured_faster_is():
    """torch.compile was advised first for a transformer and measured 0.76-0.84x; bf16 was ruled out
    by "keep float32 here" and measured 2.04x on ResNet-18."""
    advice = [
        Advice("compile it", 1.8, OVERHEAD, fix="compile"),
        Advice("fuse", 1.3, MEMORY, fix="compile"),
        Advice("bigger matmuls", 1.5, COMPUTE),
        Advice("keep float32 here", 1.0, COMPUTE, fix="bf16"),
    ]
    tried = [
        Trial("compile", "torch.compile(step)", 0.8),
        Trial("bf16", "autocast", 2.0),
        Trial("batch", "factory(batch=16)", 1.2),
        Trial("dropout", "dropout off", 1.3),
    ]
    found = with_trials(advice, tried, COMPUTE)
    texts = [item.text for item in found]
    assert not [text for text in texts if text in ("compile it", "fuse", "keep float32 here")]
    assert (
        found[0].fix == "bf16" and found[0].measured_gain == 2.0
    )  # the step's regime first, measured
    assert found[1].text == "bigger matmuls" and found[1].measured_gain is None
    assert [item.fix for item in found[2:]] == ["batch"]  # dropout's cost is shown, never advised
    confirmed = with_trials(advice, [Trial("bf16", "autocast", 0.05)], COMPUTE)
    keep = next(item for item in confirmed if item.fix == "bf16")
    assert keep.text == "keep float32 here" and keep.measured_gain == 0.05


def test_the_batch_contract_is_a_batch_parameter_with_a_default():
    def make_step(batch=8):
        return (lambda x: x * 2), (torch.ones(batch),)

    assert trials.batch_parameter(make_step) == 8
    assert trials.batch_parameter(lambda: None) is None
    assert trials.batch_parameter(None) is None
    step, args = make_step()
    found = trials.try_batch(step, args, 1, 0.05, lambda: (step, args))
    assert found.gain is None and "make_step(batch=n) returns (step, args)" in found.note
    found = trials.try_batch(step, args, 1, 0.05, make_step)
    assert found.gain > 0 and found.what == "factory(batch=16) against batch 8"


def test_dropout_off_reaches_arguments_closures_and_attention_and_restores_them():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train()
    attention = torch.nn.MultiheadAttention(4, 2, dropout=0.1).train()

    def step(x):
        return attention(model(x), model(x), model(x))[0]

    modules = trials.reachable_modules(step, (torch.ones(3, 4),))
    assert model in modules and attention in modules and trials.has_dropout(modules)
    with trials.dropout_off(modules):
        assert not trials.has_dropout(modules)
    assert model[1].training and attention.dropout == 0.1
    found = trials.try_dropout(step, (torch.ones(3, 4),), 1, 0.05)
    assert found.gain > 0
    plain = trials.try_dropout(lambda x: x + 1, (torch.ones(3),), 1, 0.05)
    assert plain.gain is None and "no active dropout" in plain.note


def test_a_fix_the_step_cannot_take_is_reported_not_raised():
    def step(x):
        if torch.is_autocast_enabled("cpu"):
            raise ValueError("no autocast here")
        return x + 1

    found = trials.try_bf16(step, (torch.ones(4),), 1, 0.05)
    assert found.gain is None and "raised ValueError with it: no autocast here" in found.note


def test_a_trial_is_read_until_its_spread_is_known_and_inside_its_noise_is_no_advice(monkeypatch):
    """A batch trial read 1.22x once and became advice; four repeats of it read 0.88-0.98x."""
    from brrr.diagnose import report

    readings = iter([1.22, 0.88, 0.95, 0.98, 0.92])
    monkeypatch.setattr(trials, "median_per_round", lambda *a, **k: next(readings))

    def make_step(batch=8):
        return (lambda x: x * 2), (torch.ones(batch),)

    step, args = make_step()
    found = trials.try_batch(step, args, 1, 0.01, make_step)
    assert (found.gain, found.low, found.high) == (0.95, 0.88, 1.22)
    assert found.no_measurable_gain and not found.slower and not found.faster
    advice = with_trials([Advice("bigger matmuls", 1.5, COMPUTE)], [found], COMPUTE)
    assert [item.fix for item in advice] == [""]  # no measured-only advice from noise
    (line,) = report._trial_lines([found])[2:]
    assert "(readings 0.88-1.22x): no measurable gain" in line


def test_readings_all_on_one_side_of_one_stop_at_three(monkeypatch):
    readings = iter([1.5, 1.6, 1.4, 9.0])
    monkeypatch.setattr(trials, "median_per_round", lambda *a, **k: next(readings))
    found = trials.try_dropout(
        lambda model: model(torch.ones(2, 4)),
        (torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train(),),
        1,
        0.01,
    )
    assert (found.gain, found.low, found.high) == (1.5, 1.4, 1.6) and found.faster
    assert trials.MIN_REPEATS == 3


def test_channels_last_is_tried_on_image_inputs_only():
    conv = torch.nn.Conv2d(8, 8, 3, padding=1)
    found = trials.try_channels_last(lambda x: conv(x), (torch.randn(2, 8, 16, 16),), 1, 0.02)
    assert found.gain > 0 and found.low <= found.gain <= found.high
    plain = trials.try_channels_last(lambda x: x + 1, (torch.ones(3),), 1, 0.02)
    assert plain.gain is None and "no 4-D floating-point input" in plain.note
    assert "channels_last" in trials.TRIES
