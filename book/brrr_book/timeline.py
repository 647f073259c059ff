"""A profiler trace as an interactive timeline that works in the static book, offline.

:func:`interactive_html` turns a :class:`brrr.traces.Trace` into one self-contained HTML block: an
SVG with a row of CPU ops and a row of device kernels (each bar's tooltip names the op and its
duration), the device's idle gaps shaded, and a few lines of JavaScript for zooming (the mouse
wheel, around the pointer) and panning (dragging); a double click shows the whole window again. No
library, no network, no server: the page carries everything, as a notebook output
(``IPython.display.HTML``)."""

from __future__ import annotations

import html
import itertools

from brrr import units
from brrr.traces import Span, Trace, idle_gaps, overlapping

_COUNTER = itertools.count()
ROWS = {"cpu": (10, "#1f77b4"), "device": (50, "#2ca02c")}  # y of each row's bars, and their colour
BAR_HEIGHT = 30
HEIGHT = 90

# Zoom and pan by rewriting the SVG's viewBox (x only); the readout says which microseconds are
# shown.
SCRIPT = """(function () {
  var svg = document.getElementById("%(id)s"), readout = document.getElementById("%(id)s-shown");
  var full = [%(start)r, %(width)r], view = full.slice();
  function show() {
    svg.setAttribute("viewBox", view[0] + " 0 " + view[1] + " %(height)d");
    readout.textContent = "showing " + Math.round(view[0] - full[0]) + " to "
        + Math.round(view[0] + view[1] - full[0]) + " µs of " + Math.round(full[1]) + " µs";
  }
  svg.addEventListener("wheel", function (event) {
    event.preventDefault();
    var box = svg.getBoundingClientRect();
    var at = view[0] + view[1] * (event.clientX - box.left) / box.width;
    var zoomed = view[1] * (event.deltaY > 0 ? 1.25 : 0.8);
    var width = Math.min(full[1], Math.max(full[1] / 2000, zoomed));
    var left = Math.max(at - (at - view[0]) * width / view[1], full[0]);
    view = [Math.min(left, full[0] + full[1] - width), width];
    show();
  }, {passive: false});
  var drag = null;
  svg.addEventListener("mousedown", function (event) { drag = [event.clientX, view[0]]; });
  window.addEventListener("mouseup", function () { drag = null; });
  window.addEventListener("mousemove", function (event) {
    if (!drag) return;
    var moved = (event.clientX - drag[0]) * view[1] / svg.getBoundingClientRect().width;
    view[0] = Math.min(Math.max(drag[1] - moved, full[0]), full[0] + full[1] - view[1]);
    show();
  });
  svg.addEventListener("dblclick", function () { view = full.slice(); show(); });
  show();
})();"""


def _bars(spans, row: str) -> list[str]:
    y, colour = ROWS[row]
    return [
        f'<rect x="{start:.3f}" y="{y}" width="{max(end - start, 0.01):.3f}" height="{BAR_HEIGHT}" '
        f'fill="{colour}"><title>{html.escape(name)}: '
        f"{units.seconds((end - start) * 1e-6)}</title></rect>"
        for name, start, end in spans
    ]


def interactive_html(
    trace: Trace, window: Span | None = None, *, title: str = "", stamp: str = ""
) -> str:
    """``trace`` (its top-level CPU ops and its device kernels, inside ``window``) as an HTML block
    with a zoomable, pannable SVG timeline; the device's idle gaps are shaded."""
    start, end = window or trace.window
    cpu = [
        (op.name, op.start_us, op.end_us)
        for op in overlapping(trace.top_level_cpu_ops(), (start, end))
    ]
    device = [(k.name, k.start_us, k.end_us) for k in overlapping(trace.device, (start, end))]
    gaps = idle_gaps(trace.device, (start, end)) if trace.has_device else []
    shaded = [
        f'<rect x="{a:.3f}" y="{ROWS["device"][0] - 4}" width="{b - a:.3f}" '
        f'height="{BAR_HEIGHT + 8}" fill="#d62728" fill-opacity="0.25"><title>device idle: '
        f"{units.seconds((b - a) * 1e-6)}"
        f"</title></rect>"
        for a, b in gaps
    ]
    ident = f"brrr-timeline-{next(_COUNTER)}"
    script = SCRIPT % {"id": ident, "start": start, "width": end - start, "height": HEIGHT}
    legend = (
        "CPU ops (top row, blue), device kernels (bottom row, green), device idle (red). "
        "Wheel to zoom, drag to pan, double-click for the whole window; hover a bar for its op."
    )
    return "".join(
        [
            '<div class="brrr-timeline">',
            f"<p><strong>{html.escape(title)}</strong></p>" if title else "",
            f'<svg id="{ident}" class="brrr-timeline-svg" viewBox="{start} 0 {end - start} '
            f'{HEIGHT}" preserveAspectRatio="none" width="100%" height="{HEIGHT * 1.6:.0f}" '
            f'role="img" aria-label="{html.escape(legend)}">',
            *shaded,
            *_bars(cpu, "cpu"),
            *_bars(device, "device"),
            "</svg>",
            f'<p class="brrr-timeline-readout"><span id="{ident}-shown"></span> · '
            f"{html.escape(legend)}</p>",
            f'<p class="brrr-timeline-stamp">{html.escape(stamp)}</p>' if stamp else "",
            f"<script>{script}</script></div>",
        ]
    )
