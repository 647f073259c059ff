"""A pytest plugin for the GPU check (brrr_book.gpucheck.run): under nbval, save each cell's outputs
and figures.

After every cell, what it printed and drew goes to ``$BRRR_NOTEBOOK_OUTPUTS/<stem>/`` in the small
form of :mod:`brrr_book.gpucheck.outputs` (text and PNGs), whether the cell passed or failed; the
file is rewritten after each cell, so a notebook stopped at its limit keeps what it had shown. Load
it with ``-p notebook_record`` and ``.ci`` on ``PYTHONPATH``; without the variable it does nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_cells: dict[str, list[dict]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    root = os.environ.get("BRRR_NOTEBOOK_OUTPUTS")
    cell = getattr(item, "cell_num", None)
    if not root or cell is None or call.when != "call":
        return
    from brrr_book.gpucheck import outputs

    report = outcome.get_result()
    notebook = item.nodeid.split("::", 1)[0]
    error = "" if report.passed else str(report.longrepr)[-4000:]
    folder = outputs.folder_for(Path(root), notebook)
    saved = outputs.saved_cell(
        folder, cell, getattr(item, "test_outputs", None) or [], report.passed, error
    )
    _cells.setdefault(notebook, []).append(saved)
    outputs.write(Path(root), notebook, _cells[notebook])
