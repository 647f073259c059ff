"""Notebook 33's CUDA-graph sweep on a CPU: the recorded GPU's, labelled as recorded, or a plain
"none"."""

import json

from brrr.benchmarks.graph_sweep import GraphSweep
from brrr_book.pages.cuda_graphs import recorded_reduce_overhead

SWEEP = {
    "batches": [1, 64, 4096],
    "eager_seconds": [1.4e-3, 1.3e-3, 2.2e-3],
    "replay_seconds": [1.0e-4, 2.6e-4, 2.0e-3],
    "reduce_overhead_batch1_seconds": 1.0e-3,
}
ENV = {
    "device": "NVIDIA H100",
    "mode": "GPU",
    "torch": "2.11.0",
    "triton": "3.6.0",
    "date": "2026-11-24",
}


def test_without_a_record_there_is_no_sweep_to_show(tmp_path):
    assert GraphSweep.recorded(tmp_path) is None
    assert recorded_reduce_overhead(tmp_path) is None


def test_the_recorded_sweep_is_labelled_and_said_in_one_sentence(tmp_path):
    (tmp_path / "nvidia-h100.json").write_text(
        json.dumps({"figures": {"overhead/cuda-graphs": {"env": ENV, "values": SWEEP}}})
    )
    sweep = GraphSweep.recorded(tmp_path)
    assert sweep.where == "recorded on NVIDIA H100" and sweep.stamp.startswith(
        "recorded [measured on NVIDIA H100"
    )
    assert [round(s, 2) for s in sweep.speedups] == [14.0, 5.0, 1.1]
    assert sweep.sentence().startswith(
        "Recorded on NVIDIA H100: graph replay ran a training step 14.0x faster "
        "than eager at batch 1, fading to 1.10x at batch 4096"
    )
    assert "(recorded on NVIDIA H100)" in sweep.table().splitlines()[0]
    assert recorded_reduce_overhead(tmp_path).startswith("1.40x over eager")


def test_the_committed_record_holds_the_sweep():
    """The H100 record ships it: a CPU reader's notebook 33 shows a GPU's sweep, not "No GPU:
    skipping"."""
    sweep = GraphSweep.recorded()
    assert sweep is not None and sweep.speedups[0] > 5 > sweep.speedups[-1]
