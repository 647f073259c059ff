"""The capstone's parts on made-up diagnoses (the page itself runs in the book build): the fix
chosen follows the tool's top advice, bounds are shown only where they cover the fix, the sentences
follow the numbers, fixes that cannot help here are named with their measured reason, and every fix
computes the same model."""

import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from brrr import column
from brrr_book import capstone
from brrr.ceilings import Ceilings
from brrr.models import gpt

OVERHEAD, MEMORY, COMPUTE = "overhead-bound", "memory-bound", "compute-bound"


def diagnosis(regime, gain=None, step_s=1e-3, mfu=0.2):
    shares = {OVERHEAD: 0.1, MEMORY: 0.1, COMPUTE: 0.1} | {regime: 0.8}
    advice = [SimpleNamespace(regime=regime, predicted_gain=gain)] if gain else []
    return SimpleNamespace(regime=regime, shares=shares, step_s=step_s, mfu=mfu, advice=advice)


def by_name(name):
    return next(fix for fix in capstone.FIXES if fix.name == name)


def test_the_next_fix_addresses_the_top_advice_and_carries_its_bound_only_where_it_covers_the_fix():
    fixes = [by_name("bigger batch"), by_name("torch.compile"), by_name("SDPA attention")]
    choice = capstone.next_fix(diagnosis(OVERHEAD, 3.0), fixes)
    assert choice.fix.name == "bigger batch" and choice.bound is None  # the batch changes the work
    choice = capstone.next_fix(diagnosis(OVERHEAD, 1.7), fixes[1:])
    assert (
        choice.fix.name == "torch.compile" and choice.bound == 1.7 and "at most 1.70x" in choice.why
    )
    choice = capstone.next_fix(diagnosis(MEMORY, 1.2), fixes[1:])
    assert (
        choice.fix.name == "SDPA attention" and choice.bound is None
    )  # fuses matmuls: not what it bounds
    assert (
        "does not cover this fix" in choice.why
    )  # a bound it does not claim is not quoted as its own
    choice = capstone.next_fix(diagnosis(OVERHEAD, 3.0), fixes)
    assert "does not cover this fix" in choice.why
    choice = capstone.next_fix(diagnosis(COMPUTE, 1.1), fixes[2:])
    assert (
        choice.fix.name == "SDPA attention"
        and choice.bound is None
        and "no remaining fix" in choice.why
    )


def test_the_table_and_the_sentences_follow_the_numbers():
    setup = capstone.Setup()
    compiled = replace(setup, compile_mode="default")
    stages = [
        capstone.Stage(setup, None, "", None, diagnosis(OVERHEAD, step_s=1e-3, mfu=0.16)),
        capstone.Stage(
            compiled, by_name("torch.compile"), "", 2.0, diagnosis(OVERHEAD, step_s=0.8e-3)
        ),
        capstone.Stage(
            compiled, by_name("torch.compile"), "", 1.1, diagnosis(COMPUTE, step_s=0.5e-3)
        ),
    ]
    table = capstone.stage_table(stages)
    assert "1.25x" in table and "2.00x" in table and table.count("overhead-bound (80%)") == 2
    said = capstone.conclusions(stages)
    assert said[0] == "At batch 1 the step was overhead-bound (80% of its time), at 16% MFU."
    assert (
        "1.25x the tokens per second (within the tool's bound of 2.00x), and the step stayed"
        in said[1]
    )
    assert "1.60x the tokens per second (above the tool's bound of 1.10x" in said[2]
    assert "the step became compute-bound" in said[2]
    assert said[-1] == "In all: 2.0x the tokens per second of the start."
    rows = capstone.stage_rows(stages)
    assert [row["predicted_gain"] for row in rows] == [None, 2.0, 1.1]
    assert rows[1]["tokens_per_s"] == pytest.approx(compiled.tokens / 0.8e-3)


@pytest.mark.parametrize("bf16, applies", [(1.25e9, False), (2e11, True)])
def test_bf16_applies_where_its_measured_peak_beats_fp32(monkeypatch, bf16, applies):
    found = Ceilings(
        copy_bandwidth=1e10,
        matmul_peak={"float32": 7e10, "bfloat16": bf16},
        vector_peak=4e10,
        dispatch_overhead=2e-6,
        threads=1,
    )
    monkeypatch.setattr("brrr.ceilings.measure", lambda threads=None: found)
    fixes, not_here = capstone.applicable()
    names = [fix.name for fix in fixes]
    assert ("bf16 weights and activations" in names) == applies
    reasons = dict((fix.name, why) for fix, why in not_here)
    if not applies:
        assert (
            "1.25 GFLOP/s against 70.0 GFLOP/s for float32"
            in reasons["bf16 weights and activations"]
        )
    assert ("CUDA graphs (torch.compile mode='reduce-overhead')" in reasons) == (
        not torch.cuda.is_available()
    )


def test_fused_attention_computes_what_the_textbook_attention_computes():
    config = gpt.GPTConfig(vocab=64, seq_len=16, layers=2, heads=2, width=32)
    tokens = gpt.synthetic_tokens(config, 3)
    textbook = gpt.inference_step(gpt.build(config, seed=5))(tokens)
    fused = gpt.inference_step(gpt.build(config.with_(sdpa=True), seed=5))(tokens)
    assert textbook.shape == (3, config.vocab)
    torch.testing.assert_close(fused, textbook, rtol=1e-4, atol=1e-5)
    other = gpt.inference_step(gpt.build(config, seed=6))(tokens)
    assert not torch.allclose(other, textbook, atol=1e-3)  # the comparison can fail


def test_a_reference_gpus_table_is_shown_with_its_stamp_and_a_gain_above_its_bound_explained(
    monkeypatch,
):
    def row(stage, tokens_per_s, bound=None):
        return {
            "stage": stage,
            "step_s": 1e-3,
            "tokens_per_s": tokens_per_s,
            "mfu": 0.5,
            "regime": COMPUTE,
            "shares": {COMPUTE: 0.6},
            "predicted_gain": bound,
        }

    rows = [
        row("start (batch 1, eager fp32)", 100.0),
        row("+ bf16 weights and activations", 500.0, 4.0),
        row("+ torch.compile", 520.0, 1.5),
    ]
    env = {"device": "Some GPU", "mode": "GPU", "torch": "t", "triton": "r", "date": "2026-11-24"}
    monkeypatch.setattr(
        "brrr.reference.load_all",
        lambda: {
            "some-gpu": {"figures": {"capstone": {"env": env, "values": {"rows": rows}}}},
            "cpu-only": {"ceilings": {}},
        },
    )
    (shown,) = capstone.reference_tables()
    assert "Some GPU" in shown.splitlines()[-1] and "In all: 5.2x" in shown
    assert "bf16 weights and activations gave 5.00x, above the tool's bound of 4.00x" in shown
    assert "torch.compile gave" not in shown  # 1.04x, within its bound


def test_a_recorded_cuda_graph_stage_that_gave_nothing_says_why(monkeypatch):
    """Issue 25: the H100's table showed CUDA graphs at 1.00x with no word on why."""

    def row(stage, tokens_per_s, bound=None, batch=64):
        return {
            "stage": stage,
            "step_s": 1e-3,
            "tokens_per_s": tokens_per_s,
            "mfu": 0.5,
            "regime": COMPUTE,
            "shares": {COMPUTE: 0.54},
            "predicted_gain": bound,
            "batch": batch,
        }

    rows = [
        row("start (batch 1, eager fp32)", 100.0, batch=1),
        row("+ torch.compile", 400.0),
        row("+ CUDA graphs (torch.compile mode='reduce-overhead')", 401.0, 1.21),
    ]
    env = {"device": "Some GPU", "mode": "GPU", "torch": "t", "triton": "r", "date": "2026-11-24"}
    sweep = {"batches": [1, 4096], "eager_seconds": [1e-3, 2e-3], "replay_seconds": [1e-4, 1.98e-3]}
    records = {
        "some-gpu": {
            "figures": {
                "capstone": {"env": env, "values": {"rows": rows}},
                "overhead/cuda-graphs": {"env": env, "values": sweep},
            }
        }
    }
    monkeypatch.setattr("brrr.reference.load_all", lambda folder=None: records)
    (shown,) = capstone.reference_tables()
    assert max(len(line) for line in shown.splitlines()) <= column.WIDTH, (
        shown
    )  # it fits the book's column
    shown = " ".join(shown.split())  # sentences wrapped to the column read as one line
    assert (
        "CUDA graphs (torch.compile mode='reduce-overhead') gave 1.00x, against the tool's bound "
        "of 1.21x" in shown
    ), shown
    assert "was already compute-bound (54% of its time)" in shown
    assert "10.0x faster than eager at batch 1, fading to 1.01x at batch 4096" in shown


# ---------------------------------------------------------------- the page's checks


def test_every_fix_changes_the_setup_it_is_applied_to():
    """A fix that hands its setup back unchanged would add a stage that measures the same step
    again."""
    start = capstone.Setup()
    for fix in capstone.FIXES:
        assert fix.apply(start) != start, f"{fix.name} leaves the setup as it was"
    assert capstone.fixes_that_changed_nothing(stages_gaining(2.0)) == []


def stages_gaining(final: float, *, compile_fix=None):
    """A start, the torch.compile stage, and an end serving ``final`` times the start's tokens per
    second."""
    start = capstone.Setup()
    fix = compile_fix or by_name("torch.compile")
    compiled = fix.apply(start)
    return [
        capstone.Stage(start, None, "", None, diagnosis(OVERHEAD, step_s=1e-3)),
        capstone.Stage(compiled, fix, "", 2.0, diagnosis(OVERHEAD, step_s=1e-3 / final)),
    ]


@pytest.mark.parametrize(
    "final, gain, compile_fix, missed",
    [
        (2.0, capstone.CompileGain(1.5, 0.1), None, None),
        (2.0, capstone.CompileGain(1.1, 0.1), None, "beyond two eager timings"),  # within the noise
        (
            2.0,
            capstone.CompileGain(3.0, 2.0),
            None,
            "beyond two eager timings",
        ),  # noisier than the gain
        (1.4, capstone.CompileGain(1.5, 0.1), None, "the last stage over the start"),
        (
            2.0,
            capstone.CompileGain(1.5, 0.1),
            capstone.Fix("torch.compile", OVERHEAD, lambda s: s),
            "left the setup",
        ),
    ],
)
def test_the_page_checks_each_fix_the_compile_gain_and_the_end(
    monkeypatch, final, gain, compile_fix, missed
):
    from brrr import targets

    monkeypatch.setenv(targets.STRICT, "1")
    asked = []

    def measure():
        asked.append(gain)
        return gain

    stages = stages_gaining(final, compile_fix=compile_fix)
    if missed is None:
        capstone.check(stages, measure)
        assert len(asked) == 1  # met at once: not timed again
        return
    with pytest.raises(targets.TargetMissed, match=missed):
        capstone.check(stages, measure)
    if "beyond" in missed:
        assert len(asked) == 3  # a miss is timed again, three attempts in all


def test_the_compile_gain_is_read_beyond_the_noise():
    assert capstone.CompileGain(2.2, 0.1).beyond_noise == pytest.approx(2.0)
    assert capstone.CompileGain(1.05, 0.1).beyond_noise < 1


def _spin(seconds):
    def call(*args):
        start = time.thread_time()
        while time.thread_time() - start < seconds:
            pass

    return call


@pytest.mark.parametrize("compiled_s, gains", [(0.5e-3, True), (1e-3, False)])
def test_the_compile_comparison_reads_a_gain_and_none_where_there_is_none(compiled_s, gains):
    """Steps of known cost on the thread's clock: a compiled step twice as fast reads about 2x
    beyond the noise; one as slow as eager (a compile that fell back to eager) reads under the
    page's minimum."""
    comparison = object.__new__(
        capstone.CompileComparison
    )  # the measuring half, without building a GPT
    comparison.eager, comparison.compiled, comparison.args = _spin(1e-3), _spin(compiled_s), ()
    gain = comparison.measure(budget_s=0.1)
    assert (gain.beyond_noise >= capstone.COMPILE_BEYOND_NOISE_MIN) == gains, gain
    assert gain.noise < 0.2, gain
