"""The book shows whatever GPUs are recorded: the H100 alone, the H200 alone, both, or none.

The fixtures are the committed records themselves, copied into a folder per case: the H100's
first-run file (figures only, no schema, no commit) and the H200's merged one (schema 2, ceilings,
checks, the commit of its run)."""

import shutil

import pytest
from conftest import ROOT

from brrr import beside, reference
from brrr_book import claims
from brrr.labs import recorded as lab_recorded
from brrr_book.pages import layer_intensity
from brrr_book.pages import repeat_sweep as repeat_sweep_page
from brrr_book.widgets import recorded_roofs

COMMITTED = ROOT / "brrr" / "data" / "reference"
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
FILES = {H100: "nvidia-h100-80gb-hbm3.json", H200: "nvidia-h200.json"}
CASES = {"none": (), "H100 alone": (H100,), "H200 alone": (H200,), "both": (H100, H200)}


@pytest.fixture(params=list(CASES), ids=list(CASES))
def recorded_gpus(request, tmp_path):
    """A reference folder holding the case's committed files, and the GPUs it names, in file
    order."""
    for gpu in CASES[request.param]:
        shutil.copy(COMMITTED / FILES[gpu], tmp_path)
    return tmp_path, CASES[request.param]


def test_both_gpus_are_committed():
    assert [
        data["figures"]["capstone"]["env"]["device"] for data in reference.load_all().values()
    ] == [
        H100,
        H200,
    ]


def test_every_recorded_gpu_gets_its_row_in_the_table_under_a_result(recorded_gpus):
    folder, gpus = recorded_gpus
    assert list(reference.load_all(folder)) == [FILES[gpu].removesuffix(".json") for gpu in gpus]
    found = beside.recorded("repeat-sweep", folder)
    assert [gpu.device for gpu in found] == list(gpus)
    table = beside.three_machines(
        "a result", "1.00x", "[measured on here]", [(gpu, "0.50x") for gpu in found], "2x"
    )
    machines = [row.machine for row in table.rows]
    assert machines[:-2] == ([f"recorded: {gpu}" for gpu in gpus] or ["recorded GPU"])
    assert machines[-2] == "this machine: here"
    shown, page = str(table), table._repr_html_()
    for gpu in gpus:
        assert f"recorded: {gpu}" in shown and f"recorded: {gpu}" in page
    assert (beside.NONE_RECORDED in shown) == (not gpus)
    sources = {gpu.device: gpu.source for gpu in found}
    if H200 in sources:  # the H200's stamp names its run's commit; the H100's first run had none
        assert "commit 26e9f7a9bd" in sources[H200] and "2026-11-28" in sources[H200]
    if H100 in sources:
        assert "commit" not in sources[H100] and "2026-11-24" in sources[H100]


def test_a_gpu_that_did_not_record_a_section_is_left_out_of_its_table(recorded_gpus):
    """Lab 2 failed on the H200 and was left out of its record: the H100's alone shows."""
    folder, gpus = recorded_gpus
    assert [gpu.device for gpu in beside.recorded("lab-02-fuse-it", folder)] == [
        gpu for gpu in gpus if gpu == H100
    ]
    said = " ".join(lab_recorded.sentence("02-fuse-it", folder).split())  # unwrapped
    assert (H100 in said) == (H100 in gpus) and H200 not in said


def test_the_pages_readers_of_the_record_say_each_gpu(recorded_gpus):
    folder, gpus = recorded_gpus
    summary = claims.reference_summary(folder)
    assert all(FILES[gpu] in summary for gpu in gpus)
    assert ("No GPU reference is committed yet" in summary) == (not gpus)
    three = claims.reference_figures(folder=folder)["three-regimes"]
    assert all(f"{gpu}: " in three for gpu in gpus) and (three == "none recorded") == (not gpus)
    assert list(recorded_roofs(folder)) == [f"recorded {gpu}" for gpu in gpus]
    assert [sweep.device for sweep in repeat_sweep_page.recorded_sweeps(folder)] == list(gpus)
    layers = layer_intensity.recorded_layers(folder)
    assert all(f"On the recorded {gpu}" in layers for gpu in gpus)
    roofline = " ".join(lab_recorded.sentence("01-roofline", folder).split())
    assert all(gpu in roofline for gpu in gpus)
