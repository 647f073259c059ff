"""What a notebook printed and drew on the GPU is saved small, failed cells included, for a CPU build."""

import base64
import json
import os
import subprocess
import sys

from conftest import ROOT

from brrr.gpucheck import outputs

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 40).decode()


def test_text_and_pngs_are_kept_small_and_nothing_else(tmp_path):
    cell = outputs.saved_cell(
        tmp_path,
        7,
        [
            {"output_type": "stream", "name": "stdout", "text": ["copy: ", "3.0 TB/s\n"]},
            {"output_type": "display_data", "data": {"image/png": PNG, "text/plain": "<Figure>"}},
            {"output_type": "display_data", "data": {"text/html": "<table/>", "text/plain": "x" * 30_000}},
            {
                "output_type": "display_data",
                "data": {"image/png": base64.b64encode(b"\0" * (outputs.MAX_IMAGE_BYTES + 1)).decode()},
            },
            {"output_type": "display_data", "data": {"application/vnd.jupyter.widget-view+json": {}}},
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
    assert cell["outputs"][2]["text"].endswith("characters, cut]") and len(cell["outputs"][2]["text"]) < 20_100
    assert cell["outputs"][3]["file"] is None and "left out" in cell["outputs"][3]["note"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cell-07-1.png"]


def test_the_plugin_saves_each_cell_under_nbval_a_failed_one_too(tmp_path):
    """One small notebook under pytest --nbval-lax with .ci/notebook_record.py: a print, a PNG, a failure."""
    cells = [
        "print('measured 3.0 TB/s')",
        f"from IPython.display import display\ndisplay({{'image/png': '{PNG}', 'text/plain': 'fig'}}, raw=True)",
        "raise AssertionError('target missed')",
        "print('after the failure')",
    ]
    notebook = {
        "cells": [
            {"cell_type": "code", "metadata": {}, "source": s, "outputs": [], "execution_count": None} for s in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "99-tiny.ipynb").write_text(json.dumps(notebook))
    saved = tmp_path / "outputs"
    env = dict(
        os.environ, PYTHONPATH=f"{ROOT / '.ci'}:{os.environ.get('PYTHONPATH', '')}", BRRR_NOTEBOOK_OUTPUTS=str(saved)
    )
    command = [sys.executable, "-m", "pytest", "-p", "notebook_record", "-p", "no:cacheprovider", "-o", "addopts="]
    result = subprocess.run(
        [*command, "--nbval-lax", "99-tiny.ipynb"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
    )
    assert result.returncode == 1, result.stdout + result.stderr  # the failed cell fails the run
    record = outputs.read(saved / "99-tiny")
    assert record["notebook"] == "99-tiny.ipynb"
    assert [(c["cell"], c["passed"]) for c in record["cells"]] == [(0, True), (1, True), (2, False), (3, True)]
    assert outputs.printed(saved / "99-tiny", 0) == "measured 3.0 TB/s\n"
    assert "target missed" in outputs.printed(saved / "99-tiny", 2)
    assert (saved / "99-tiny" / "cell-01-1.png").is_file()
