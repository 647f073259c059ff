"""relu against gelu (notebook 10): the ratio, its sentence, and the three machines beside it. The
timing itself runs in notebook 10, in the book build."""

import json

import pytest

from brrr.benchmarks import activations
from brrr.benchmarks.activations import ActivationCosts


@pytest.mark.parametrize("gelu_s, same", [(1.1e-3, True), (2.5e-3, False)])
def test_the_sentence_follows_the_measured_ratio(gelu_s, same):
    costs = ActivationCosts(relu_s=1e-3, gelu_s=gelu_s)
    assert costs.same_cost == same
    assert costs.sentence().startswith(
        f"Here compiled gelu {gelu_s / 1e-3:.2f}x the time of compiled relu"
    )
    assert ("about the same cost" in costs.sentence()) == same and (
        "not the same cost" in costs.sentence()
    ) != same


def test_the_ratio_sits_beside_each_recorded_gpu_and_the_essay(tmp_path):
    costs = ActivationCosts(relu_s=1e-3, gelu_s=2.5e-3)
    alone = activations.beside(costs, "[measured here]", folder=tmp_path)
    assert (
        alone.rows[0].result.startswith("none recorded")
        and alone.rows[1].machine.startswith("this machine")
        and alone.rows[-1].machine == "the essay (quoted)"
    )
    env = {"device": "NVIDIA H100", "date": "2026-11-24", "torch": "2.11", "triton": "3.6"}
    (tmp_path / "h100.json").write_text(
        json.dumps(
            {
                "figures": {
                    "activations": {
                        "env": env,
                        "values": {"relu_s": 7.1e-4, "gelu_s": 7.2e-4, "ratio": 1.01},
                    }
                }
            }
        )
    )
    shown = activations.beside(costs, "[measured here]", folder=tmp_path)
    assert shown.rows[0].machine == "recorded: NVIDIA H100"  # the GPU leads
    assert shown.rows[0].result == "compiled gelu 1.01x the time of compiled relu"
