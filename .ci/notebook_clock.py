"""A pytest plugin for `make gpu-check`: each file's wall time, printed the moment the file is done.

``--durations`` prints only at the end, and a stage stopped at its time limit
never gets there: the last GPU check ran out of time with no notebook's time on
record. Here every file's time is written as soon as its last item finishes.
Load it with ``-p notebook_clock`` and ``.ci`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import time

import pytest

_began = time.monotonic()
_file_start: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    file = item.nodeid.split("::", 1)[0]
    _file_start.setdefault(file, time.monotonic())
    yield
    if nextitem is None or nextitem.nodeid.split("::", 1)[0] != file:
        now = time.monotonic()
        line = (
            f"clock: {file} took {now - _file_start[file]:.1f} s ({now - _began:.0f} s into "
            "the "
            "stage)"
        )
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write(f"\n{line}", flush=True)
        else:
            print(line, flush=True)
