"""The built book in Chromium, offline: every page renders (math, images, no console error, nothing
scrolling sideways, working downloads) and the profiler page's timeline zooms and pans (book_browser.py).

A file of its own that reads the one build of this run: under ``make test-e2e`` the book's worker runs it
right after the build, in one unit of work with the book's file (tests/conftest.py, AFTER_THE_BOOK).
"""

import pytest

import book_browser
from book_browser import browser, served_book  # noqa: F401  (fixtures)


@pytest.mark.parametrize(
    "env, outcome",
    [
        ({}, "fail"),
        ({book_browser.SKIP_ENV: "1"}, "skip"),
        ({book_browser.SKIP_ENV: "0"}, "fail"),
        (
            {book_browser.SKIP_ENV: "1", "CI": "true"},
            "fail",
        ),  # CI must run it: .ci/run installs Chromium
    ],
)
def test_a_missing_browser_fails_unless_the_developer_skips_it_by_name(monkeypatch, env, outcome):
    for name in ("CI", book_browser.SKIP_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(
        pytest.fail.Exception if outcome == "fail" else pytest.skip.Exception
    ) as stopped:
        book_browser._skip_or_fail("no Chromium found")
    assert "no Chromium found" in str(stopped.value)
    assert (book_browser.SKIP_ENV in str(stopped.value)) == (not env.get("CI")), str(stopped.value)


def test_every_page_renders_offline(browser, served_book):
    """Every page in Chromium, offline: rendered math, loaded images, no console
    error, no block that scrolls sideways, working trace downloads (book_browser.py)."""
    base, html = served_book
    pages = book_browser.book_pages(html)
    assert "index.html" in pages and len(pages) > 10, f"too few pages found in {html}: {pages}"
    failures: dict[str, list[str]] = {}
    pages_with_math, images, downloads = 0, 0, set()
    context = browser.new_context(viewport={"width": book_browser.WIDTH, "height": 900})
    reader = book_browser.Reader(context, base)
    try:
        for name in pages:
            target = book_browser.redirect_target(html, name)
            if target is not None:
                if target not in pages:
                    failures[name] = [f"redirects to a missing page: {target}"]
                continue
            shown, problems = reader.inspect(base + name)
            pages_with_math += shown["math"] > 0
            images += shown["images"]
            downloads.update(shown["downloads"])
            if problems:
                failures[name] = problems
        failures.update(book_browser.check_downloads(context, downloads))
    finally:
        reader.close()
        context.close()
    report = "\n".join(
        f"{name}:\n  " + "\n  ".join(problems) for name, problems in failures.items()
    )
    assert not failures, f"{len(failures)} of {len(pages)} pages have problems:\n{report}"
    print(
        f"{len(pages)} pages, {pages_with_math} with math, {images} images, "
        f"{len(downloads)} download links: all rendered offline"
    )
    assert pages_with_math > 0, "no page has math: the math check checked nothing"
    traces = [url for url in downloads if url.endswith(book_browser.TRACE_SUFFIX)]
    assert len(traces) >= 3, (
        "expected the profiler chapter's trace downloads (this run's two and the recorded GPU's), "
        f"found {sorted(downloads)}"
    )


def test_the_trace_timeline_zooms_and_pans_offline(browser, served_book):
    """The profiler page's interactive timeline (brrr.timeline), in Chromium with the network blocked: the
    wheel zooms in (the view narrows and its readout says so), a drag pans, a double click shows it all."""
    base, _ = served_book
    context = browser.new_context(viewport={"width": book_browser.WIDTH, "height": 900})
    reader = book_browser.Reader(context, base)
    try:
        page = reader.page
        page.goto(base + "notebooks/32-profiler-traces.html", wait_until="load")
        svg = page.locator("svg.brrr-timeline-svg").first
        assert svg.count() == 1, "the profiler page shows no interactive timeline"
        svg.scroll_into_view_if_needed()
        whole = [float(v) for v in svg.get_attribute("viewBox").split()]
        box = svg.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        for _ in range(4):
            page.mouse.wheel(0, -100)
        page.wait_for_timeout(100)
        zoomed = [float(v) for v in svg.get_attribute("viewBox").split()]
        assert zoomed[2] < 0.6 * whole[2], (whole, zoomed)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] / 2 + 150, box["y"] + box["height"] / 2)
        page.mouse.up()
        panned = [float(v) for v in svg.get_attribute("viewBox").split()]
        assert panned[0] < zoomed[0] and panned[2] == zoomed[2], (zoomed, panned)
        svg.dblclick()
        assert [float(v) for v in svg.get_attribute("viewBox").split()] == whole
        assert not reader.problems, reader.problems
    finally:
        reader.close()
        context.close()
