"""The interactive trace timeline (brrr_book.timeline): every op of the window as a bar, idle gaps
shaded, self-contained (no network), and each block's ids its own. Its zoom and pan are tried in
Chromium on the built book (tests/book/test_book_build.py)."""

import re

from brrr import traces
from brrr_book import timeline


def test_the_timeline_holds_each_op_and_kernel_of_the_window_and_no_link():
    reference = traces.reference_trace()
    shown = timeline.interactive_html(reference.trace, reference.window, title="t", stamp="s")
    start, end = reference.window
    inside = lambda e: e.end_us > start and e.start_us < end  # noqa: E731
    ops = [op for op in reference.trace.top_level_cpu_ops() if inside(op)]
    kernels = [k for k in reference.trace.device if inside(k)]
    gaps = traces.idle_gaps(reference.trace.device, reference.window)
    assert shown.count("<rect ") == len(ops) + len(kernels) + len(gaps)
    assert shown.count("device idle:") == len(gaps) > 0
    assert not re.search(r'(src|href)="(https?:)?//', shown), "the timeline must work offline"
    assert len(shown) < 200_000


def test_two_timelines_on_one_page_do_not_share_ids():
    reference = traces.reference_trace()
    first, second = (timeline.interactive_html(reference.trace) for _ in range(2))
    ids = [re.search(r'<svg id="([^"]+)"', block).group(1) for block in (first, second)]
    assert ids[0] != ids[1]
