"""Rematerialization: what each way of training keeps for the backward, and its peak memory.

Both are counted, not timed, so the assertions are exact in direction and wide in size.
"""

import pytest
import torch

from brrr.benchmarks import fusion
from brrr.benchmarks import rematerialization as remat

BATCH, WIDTH, BLOCKS = 1024, 64, 2


@pytest.fixture(scope="module")
def results():
    model, x = remat.build(BATCH, WIDTH, BLOCKS)
    return {name: remat.measure_variant(name, model, x, threads=fusion.THREADS, budget_s=0.05)
            for name in remat.VARIANTS}


def test_eager_saves_what_the_model_predicts(results):
    hidden = remat.EXPANSION * WIDTH
    activations = BLOCKS * (BATCH * WIDTH + 4 * BATCH * hidden) * 4
    parameters = BLOCKS * (2 * hidden * WIDTH + hidden) * 4  # the weights and scale autograd saves too
    assert results["eager"].saved_bytes == pytest.approx(activations + parameters, rel=0.1)


def test_checkpointing_keeps_only_block_inputs(results):
    assert results["eager + checkpointing"].saved_bytes < results["eager"].saved_bytes / 4
    assert results["eager + checkpointing"].peak_bytes < results["eager"].peak_bytes


def test_the_partitioner_keeps_less_than_eager(results):
    assert results["torch.compile"].saved_bytes < 0.8 * results["eager"].saved_bytes
    assert results["torch.compile"].peak_bytes < 0.8 * results["eager"].peak_bytes


def test_all_variants_compute_the_same_gradients():
    grads = {}
    for name in remat.VARIANTS:
        model, x = remat.build(64, 32, 2)
        model.checkpointed = name == "eager + checkpointing"
        forward = torch.compile(model) if name == "torch.compile" else model
        forward(x).pow(2).mean().backward()
        grads[name] = [p.grad.clone() for p in model.parameters()]
    for name in remat.VARIANTS[1:]:
        for got, expected in zip(grads[name], grads["eager"]):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_unknown_variant_is_refused():
    model, x = remat.build(8, 8, 1)
    with pytest.raises(ValueError, match="variant"):
        remat.measure_variant("magic", model, x)
