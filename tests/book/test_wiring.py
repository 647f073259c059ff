"""The wiring between layers, on fixed inputs whose answer differs from every plausible wrong field:
a page's ``finish`` hands the ledger the figures it measured (the last ratio, not the one before it;
the highest peak, not the first), a picture plots the record's and the cache's numbers (read back
from the matplotlib artists, not only their labels), and the Colab check still reads the set-up
cell's tag.

Each names the planted bug it catches (tests/mutants/mutants.toml). Nothing here is measured."""

import math
from types import SimpleNamespace

import matplotlib.pyplot as plt
import nbformat
import pytest

from brrr import ceilings, counting, essay, reference
from brrr_book import figures
from brrr.benchmarks import overhead
from brrr.ceilings import Ceilings
from brrr_book import colab
from brrr_book.pages import batch_doubling, your_machine

pytestmark = pytest.mark.device_independent


@pytest.fixture
def published(monkeypatch):
    """The verdicts the pages publish, in order, and what they record, kept here instead of glued
    and written."""
    verdicts, records = [], {}
    for page in (batch_doubling, your_machine):
        monkeypatch.setattr(page, "publish", lambda verdict, stamp=None: verdicts.append(verdict))
    monkeypatch.setattr(your_machine, "glue_text", lambda key, text: None)
    monkeypatch.setattr(
        reference, "record", lambda section, values: records.update({section: values})
    )
    return SimpleNamespace(verdicts=verdicts, records=records)


# ---------------------------------------------------------------- a page's figures reach the ledger


def test_the_batch_doubling_page_judges_the_first_and_the_last_doubling(published):
    """Ratios 1.1, 1.5, 2.0, 3.0: the ledger gets 1.1 and 3.0, each unlike its neighbours.
    Planted: the ledger reading the page's second-to-last ratio instead of its last."""
    times = [1.0e-3, 1.1e-3, 1.65e-3, 3.3e-3, 9.9e-3]
    page = batch_doubling.Page(
        stamp="[a test]",
        batches=[1, 2, 4, 8, 16],
        times=times,
        ratios=[None, 1.1, 1.5, 2.0, 3.0],
        roofline_s=[1e-5, 2.2e-5, 4e-5, 8e-5, 1.6e-4],  # the second step 50x its roofline time
        floor=1e-3,
        change=8,
        predicted=8.0,
        shape=overhead.MlpShape(width=64, depth=2),
    )
    batch_doubling.finish(page)
    (verdict,) = published.verdicts
    assert verdict.key == "batch-doubling" and verdict.held
    assert verdict.figures["first_ratio"] == 1.1 and verdict.figures["last_ratio"] == 3.0
    assert math.isclose(verdict.figures["first_over_roofline"], 50.0)
    assert published.records["overhead/batch-doubling"]["step_seconds"] == times


def your_machine_page(matmul_peak: dict) -> your_machine.Page:
    """Notebook 00's page on a made-up machine: 10 GB/s, vector 50 GFLOP/s, 10 µs a dispatch."""
    roofs = Ceilings(
        copy_bandwidth=10e9,
        matmul_peak=matmul_peak,
        vector_peak=50e9,
        dispatch_overhead=1e-5,
        threads=1,
        env=ceilings.environment(),
    )
    ops = [
        (counting.pointwise(1, name="x * 2, 1 element"), "vector"),
        (counting.pointwise(2**26, name="x * 2"), "vector"),
        (counting.matmul(4096, 4096, 4096, name="matmul 4096^3"), "matmul"),
        (counting.layer_norm(4096, 4096), "vector"),
        (counting.softmax(4096, 4096), "vector"),
    ]
    return your_machine.Page(ceilings=roofs, ops=ops, ridges="ridges")


def test_the_machine_page_judges_each_op_by_its_own_regime_and_the_gap_by_the_highest_peak(
    published,
):
    """Three peaks, the highest neither first nor last.
    Planted: the matmul gap judged with the first dtype's peak instead of the highest."""
    peaks = {"float32": 100e9, "bfloat16": 400e9, "float16": 200e9}
    your_machine.finish(your_machine_page(peaks))
    regimes, gap = published.verdicts
    assert regimes.figures == {
        "tiny": "overhead-bound",
        "pointwise": "memory-bound",
        "matmul": "compute-bound",
    }
    assert gap.key == "matmul-gap"
    assert gap.figures["matmul_peak"] == 400e9 and gap.figures["vector_peak"] == 50e9


# ---------------------------------------------------------------- a picture plots its numbers


def machine_lines(figure) -> dict[str, tuple]:
    """Each machine of the three-machines picture by its label: (its roofline's x, its y, its ridge
    dot)."""
    lines = figure.axes[0].lines
    return {
        line.get_label(): (line.get_xdata(), line.get_ydata(), (dot.get_xdata(), dot.get_ydata()))
        for line, dot in zip(lines[::2], lines[1::2])
    }


def test_the_three_machines_picture_draws_this_machines_cached_roofs(tmp_path, monkeypatch):
    """Cached roofs of 20 GB/s and peaks of 300 and 500 GFLOP/s: the line flattens at 500 GFLOP/s
    and rises at 20 GB/s; the ridge sits at 25 FLOP/B. Planted: this machine's bandwidth drawn as
    its peak."""
    monkeypatch.setenv("BRRR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(figures, "_recorded_gpu", lambda: {"H100 (measured)": (3e12, 7.5e14)})
    ceilings.cache.write_json(
        ceilings.cache_path(None),
        {"matmul_peak": {"float32": 300e9, "bfloat16": 500e9}, "copy_bandwidth": 20e9},
    )
    drawn = machine_lines(figures.roofline_three(figures._three_machines()))
    for label, (peak, bandwidth) in {
        "this build's machine (measured)": (500e9, 20e9),
        "H100 (measured), recorded": (7.5e14, 3e12),
        "A100, the essay's figures (quoted)": (
            essay.A100["matmul_peak_bf16"],
            essay.A100["bandwidth"],
        ),
    }.items():
        x, y, (dot_x, dot_y) = drawn[label]
        assert math.isclose(max(y), peak) and math.isclose(y[0], x[0] * bandwidth), label
        assert list(dot_x) == [peak / bandwidth] and list(dot_y) == [peak], label
    plt.close("all")


def recorded_gpu(device: str, values: dict) -> SimpleNamespace:
    return SimpleNamespace(device=device, values=values, env={}, stamp=f"[{device}]")


def test_the_generations_chart_draws_each_recorded_gpus_ridge_from_its_record(monkeypatch):
    """A record of 3 TB/s and 750 TFLOP/s: a bar of 250 FLOP/B, not its inverse nor either
    number."""
    lab1 = [recorded_gpu("NVIDIA H100 80GB HBM3", {"copy_bandwidth": 3e12, "matmul_peak": 7.5e14})]
    monkeypatch.setattr(figures, "_recorded", lambda section: lab1)
    import brrr.beside

    monkeypatch.setattr(brrr.beside, "recorded", lambda section: lab1)
    chart = figures.generations(figures._recorded_gpu())
    bars = {patch.get_height() for patch in chart.axes[-1].patches}
    assert 250.0 in bars
    plt.close("all")


def test_the_knee_picture_plots_the_records_sweep_and_its_two_knees(monkeypatch):
    """Record values chosen apart: 0.5, 0.5 and 2.0 ms at 1, 16 and 256 repeats; knees at 40
    and 70."""
    sweep = {
        "seconds": {"256": 2e-3, "1": 5e-4, "16": 5e-4},
        "knee_measured": 70.0,
        "knee_predicted_multiply": 40.0,
    }
    monkeypatch.setattr(figures, "_recorded", lambda section: [recorded_gpu("GPU X", sweep)])
    axes = figures._recorded_knees().axes[0]
    curve, predicted, measured = axes.lines[:3]
    assert list(curve.get_xdata()) == [1, 16, 256]
    assert list(curve.get_ydata()) == pytest.approx([0.5, 0.5, 2.0])
    assert list(predicted.get_xdata()) == [40.0, 40.0] and list(measured.get_xdata()) == [
        70.0,
        70.0,
    ]
    plt.close("all")


def test_the_stages_picture_plots_the_first_recorded_capstone_that_has_rows(monkeypatch):
    """Two records, the first without rows: the bars are the second's tokens per second."""
    rows = [
        {"stage": "start", "tokens_per_s": 1.5e5, "regime": "overhead-bound"},
        {"stage": "+ bf16", "tokens_per_s": 6.5e5, "regime": "compute-bound"},
    ]
    records = [recorded_gpu("GPU A", {"steps": 3}), recorded_gpu("GPU B", {"rows": rows})]
    monkeypatch.setattr(figures, "_recorded", lambda section: records)
    bars = [patch.get_width() for patch in figures._recorded_stages().axes[0].patches]
    assert sorted(bars) == [1.5e5, 6.5e5]
    plt.close("all")


# ---------------------------------------------------------------- the Colab cell's tag


@pytest.mark.parametrize("tags", [[], ["remove-input"], ["remove-cell", "remove-input"]])
def test_a_set_up_cell_without_exactly_its_remove_cell_tag_is_reported(tags):
    """Planted: the check no longer reading the cell's ``remove-cell`` tag."""
    notebook = colab.with_setup_cell(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")])
    )
    assert colab.problem(notebook) is None
    first = next(cell for cell in notebook.cells if cell.cell_type == "code")
    assert first.metadata["tags"] == ["remove-cell"]
    first.metadata["tags"] = tags
    assert "not the current set-up cell" in colab.problem(notebook)


def test_the_generated_cell_carries_the_tag_and_only_it():
    assert colab.setup_cell().metadata["tags"] == ["remove-cell"]
