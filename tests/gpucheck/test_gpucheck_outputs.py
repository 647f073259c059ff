"""What a notebook printed and drew on the GPU is saved small, failed cells included, for a CPU
build."""

import base64
import json

from conftest import ROOT

from brrr_book.gpucheck import merge, outputs, plan, run

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 40).decode()


def test_text_and_pngs_are_kept_small_and_nothing_else(tmp_path):
    cell = outputs.saved_cell(
        tmp_path,
        7,
        [
            {"output_type": "stream", "name": "stdout", "text": ["copy: ", "3.0 TB/s\n"]},
            {"output_type": "display_data", "data": {"image/png": PNG, "text/plain": "<Figure>"}},
            {
                "output_type": "display_data",
                "data": {"text/html": "<table/>", "text/plain": "x" * 30_000},
            },
            {
                "output_type": "display_data",
                "data": {
                    "image/png": base64.b64encode(b"\0" * (outputs.MAX_IMAGE_BYTES + 1)).decode()
                },
            },
            {
                "output_type": "display_data",
                "data": {"application/vnd.jupyter.widget-view+json": {}},
            },
        ],
        passed=False,
        error="TargetMissed: copy at least 0.9x",
    )
    kinds = [o["type"] for o in cell["outputs"]]
    assert kinds == ["stream", "image", "text", "image", "error"] and not cell["passed"]
    assert cell["outputs"][0]["text"] == "copy: 3.0 TB/s\n"
    assert (tmp_path / "cell-07-1.png").read_bytes().startswith(b"\x89PNG") and cell["outputs"][1][
        "file"
    ] == "cell-07-1.png"
    assert (
        cell["outputs"][2]["text"].endswith("characters, cut]")
        and len(cell["outputs"][2]["text"]) < 20_100
    )
    assert cell["outputs"][3]["file"] is None and "left out" in cell["outputs"][3]["note"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cell-07-1.png"]


def test_a_part_end_to_end_records_a_miss_as_missed_and_saves_what_each_cell_showed(tmp_path):
    """The real runner, nbval and .ci/notebook_record.py on one small notebook, then the merge: its
    figure, its missed target (recorded as missed before it failed the cell), each cell's text and
    PNG, a failed cell included, its time and verdict, all in the committed record's place."""
    cells = [
        "print('measured 3.0 TB/s')",
        "from IPython.display import display\n"
        f"display({{'image/png': '{PNG}', 'text/plain': 'fig'}}, raw=True)",
        "from brrr import reference, targets\nreference.record('tiny', {'x': 1})\n"
        "targets.require('tiny speed-up', 2.0, 1.0)",
        "print('after the failure')",
    ]
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "source": s,
                "outputs": [],
                "execution_count": None,
            }
            for s in cells
        ],
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "99-tiny.ipynb"
    path.write_text(json.dumps(notebook))
    part = plan.Part(
        9, "a test part", (plan.Stage("tiny", 120, notebooks=(str(path),)),), limit_s=150
    )
    log = run.run_part(part, tmp_path / "out", ROOT, say=lambda line: None)
    assert log["stages"][0]["items"][0]["verdict"] == "failed"  # the missed target failed its cell
    saved = tmp_path / "out" / "outputs" / "99-tiny"
    record = json.loads((saved / "outputs.json").read_text())
    assert [(c["cell"], c["passed"]) for c in record["cells"]] == [
        (0, True),
        (1, True),
        (2, False),
        (3, True),
    ]
    texts = [
        "".join(o["text"] for o in c["outputs"] if o["type"] in ("stream", "text", "error"))
        for c in record["cells"]
    ]
    assert texts[0] == "measured 3.0 TB/s\n" and "tiny speed-up" in texts[2]
    assert (saved / "cell-01-1.png").is_file()
    into = tmp_path / "reference"
    data = json.loads(merge.merge([tmp_path / "out"], into).read_text())
    (check,) = data["checks"].values()
    assert (
        check["verdict"] == "NOT met"
        and check["attempts"] == [1.0]
        and check["source"] == str(path)
    )
    assert data["figures"]["tiny"]["values"] == {"x": 1} and data["figures"]["tiny"][
        "source"
    ] == str(path)
    (entry,) = data["notebooks"].values()
    assert entry["verdict"] == "failed" and entry["part"] == 9 and entry["seconds"] > 0
    assert (into / entry["outputs"] / "cell-01-1.png").is_file()
