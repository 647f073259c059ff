"""The built book in Chromium, offline: every page renders (math, images, no console error, nothing
scrolling sideways or clipped, answers folded, working downloads, no link into the placeholder
repository) and the profiler page's timeline zooms and pans (book_browser.py).

A file of its own that reads the one build of this run: under ``make test-e2e`` the book's worker
runs it right after the build, in one unit of work with the book's file (tests/conftest.py,
AFTER_THE_BOOK). Its checks are proved on a small book of planted faults, built without execution.
"""

from pathlib import Path

import nbformat
import pytest
import yaml

import book_browser
from brrr_book import colab
from conftest import build_book
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
    """The profiler page's interactive timeline (brrr_book.timeline), in Chromium with the network
    blocked: the wheel zooms in (the view narrows and its readout says so), a drag pans, a double
    click shows it all."""
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


def _notebook(source: str, tags: list[str]) -> str:
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": tags})
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A lab"), cell])
    notebook.metadata.update(
        kernelspec={"name": "python3", "display_name": "Python 3", "language": "python"},
        language_info={"name": "python"},
    )
    return nbformat.writes(notebook)


SOLUTION = "def answer():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION\n"
WIDE = " + ".join(f"x_{{{i}}}^2" for i in range(60))  # about twice the column
ANSWER = "```{dropdown} Answer\n%s42\n```\n"
COLAB = "https://colab.research.google.com/github/" + book_browser.PLACEHOLDER_REPOSITORY
# page: (its source, what the checks must say about it; None: nothing). A planted page fails for
# its plant alone; the pages that hold each thing done right pass (the notebooks' pages too, where
# the theme would put a launch button into the placeholder repository).
PLANTED = {
    "index.md": (f"# Fine\n\n$$\nx_1^2 + x_2^2\n$$\n\n{ANSWER % ''}", None),
    "wide.md": (f"# Wide\n\n$$\n{WIDE}\n$$ (wide)\n", "display equation wider than its column"),
    "open.md": ("# Open\n\n" + ANSWER % ":open:\n\n", "an Answer fold is open"),
    "link.md": (
        f"# Link\n\n[Open in Colab]({COLAB}/blob/main/a.ipynb)\n",
        "placeholder repository",
    ),
    "folded.ipynb": (_notebook(SOLUTION, ["hide-input"]), None),
    "unfolded.ipynb": (_notebook(SOLUTION, []), "a solution's code is not folded"),
}


@pytest.mark.e2e
def test_the_checks_catch_a_wide_equation_an_open_answer_and_a_placeholder_link(browser, tmp_path):
    """A small book (nothing executed) with one planted fault a page: the FlashAttention update
    clipped at the column, Labs 3, 5 and 6's answers in view, launch buttons into the placeholder
    repository. Each is caught, and only on its own page."""
    source = tmp_path / "book"
    source.mkdir()
    for name, (text, _) in PLANTED.items():
        (source / name).write_text(text)
    pages = [Path(name).stem for name in PLANTED if name != "index.md"]
    toc = {"format": "jb-book", "root": "index", "chapters": [{"file": page} for page in pages]}
    (source / "_toc.yml").write_text(yaml.safe_dump(toc))
    config = {
        "title": "planted",
        "execute": {"execute_notebooks": "off"},
        "repository": {"url": colab.PLACEHOLDER, "branch": "main"},
        "launch_buttons": {"colab_url": "https://colab.research.google.com"},
        "parse": {"myst_enable_extensions": ["amsmath", "dollarmath"]},
        "sphinx": {"extra_extensions": ["brrr_book.book_pages"]},
    }
    (source / "_config.yml").write_text(yaml.safe_dump(config))
    built = build_book(source, source / "_config.yml", tmp_path / "out")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    html = tmp_path / "out" / "_build" / "html"
    context = browser.new_context(viewport={"width": book_browser.WIDTH, "height": 900})
    found = {}
    with book_browser.serving(html) as base:
        reader = book_browser.Reader(context, base)
        try:
            for name in PLANTED:
                found[name] = reader.inspect(base + Path(name).with_suffix(".html").as_posix())[1]
        finally:
            reader.close()
            context.close()
    for name, (_, expected) in PLANTED.items():
        if expected is None:
            assert found[name] == [], (name, found[name])
        else:
            assert found[name] and all(expected in said for said in found[name]), (
                name,
                found[name],
            )
