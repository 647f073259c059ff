"""Rematerialization: what each way of training keeps for the backward, and its peak memory.

Both are counted, not timed, so the assertions are exact in direction and wide in size.
"""

import pytest
import torch

from brrr.benchmarks import fusion
from brrr.benchmarks import rematerialization as remat

# The book's sizes (notebooks/13): the same model and shapes compile to the same graphs, so
# whichever of the two runs second reads Inductor's cache instead of compiling both variants again.
BATCH, WIDTH, BLOCKS = remat.SIZES


@pytest.fixture(scope="module")
def results():
    model, x = remat.build(BATCH, WIDTH, BLOCKS)
    return {
        name: remat.measure_variant(name, model, x, threads=fusion.THREADS, budget_s=0.05)
        for name in remat.VARIANTS
    }


def test_eager_saves_what_the_model_predicts(results):
    hidden = remat.EXPANSION * WIDTH
    activations = BLOCKS * (BATCH * WIDTH + 4 * BATCH * hidden) * 4
    parameters = (
        BLOCKS * (2 * hidden * WIDTH + hidden) * 4
    )  # the weights and scale autograd saves too
    assert results["eager"].saved_bytes == pytest.approx(activations + parameters, rel=0.1)


def test_checkpointing_keeps_only_block_inputs(results):
    assert results["eager + checkpointing"].saved_bytes < results["eager"].saved_bytes / 4
    assert results["eager + checkpointing"].peak_bytes < results["eager"].peak_bytes


def test_the_partitioner_keeps_less_than_eager(results):
    assert results["torch.compile"].saved_bytes < 0.8 * results["eager"].saved_bytes
    assert results["torch.compile"].peak_bytes < 0.8 * results["eager"].peak_bytes


def test_the_control_saves_what_eager_saves(results):
    """default_partition keeps every intermediate: the control differs from eager in code, not in
    what it saves."""
    control = results[remat.SAVE_EVERYTHING]
    assert control.saved_bytes == pytest.approx(results["eager"].saved_bytes, rel=0.1)
    assert results[remat.RECOMPUTE].saved_bytes < 0.8 * control.saved_bytes


def test_the_split_attributes_memory_to_rematerialization(results):
    split = remat.Split.of(list(results.values()))
    assert split.remat_memory > 1.2  # recomputing is where the memory went
    assert split.fusion_memory < 1.2  # fusing alone keeps what eager keeps
    assert "rematerialization" in split.summary()


def test_a_torch_without_the_partitioner_name_is_refused(monkeypatch):
    import torch._inductor.compile_fx as inductor_compile

    monkeypatch.delattr(inductor_compile, "min_cut_rematerialization_partition")
    with pytest.raises(remat.PartitionerUnavailable, match="default_partition"):
        with remat.default_partitioner():
            pass


def test_all_variants_compute_the_same_gradients():
    grads = {}
    backends = {remat.RECOMPUTE: "inductor", remat.SAVE_EVERYTHING: remat.save_everything_backend}
    for name in remat.VARIANTS:
        model, x = remat.build(64, 32, 2)
        model.checkpointed = name == "eager + checkpointing"
        forward = torch.compile(model, backend=backends[name]) if name in backends else model
        forward(x).pow(2).mean().backward()
        grads[name] = [p.grad.clone() for p in model.parameters()]
    for name in remat.VARIANTS[1:]:
        for got, expected in zip(grads[name], grads["eager"]):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_unknown_variant_is_refused():
    model, x = remat.build(8, 8, 1)
    with pytest.raises(ValueError, match="variant"):
        remat.measure_variant("magic", model, x)
