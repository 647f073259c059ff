"""Every page of the built book, loaded in a real browser with the network blocked.

The machinery of ``test_every_page_renders_offline`` in book/test_book_in_a_browser.py,
which runs it on the one forced build of the run (``book_build``: a worker that
asks for it while the other builds it waits for that build).

Debian's Chromium, driven by Playwright for Python, opens each page of the one
forced build (``book_build`` in conftest.py) from a server on localhost. Any
request elsewhere is aborted and reported. Each page must show rendered math
(MathJax output for every math element, no raw TeX in the visible text), load
every image, log no console error, hold no code or output block that scrolls
sideways, and every trace download link must resolve. A display equation must fit its
column (the theme clips one that does not: a reader copies a recurrence without its last
term), an answer must be folded (an "Answer" dropdown closed, a solution's code inside a
closed fold), and no link may point at the placeholder repository (a launch button into a
repository that does not exist).

Where no Chromium or no Playwright is found the test fails and says why, unless
the developer opts out by name: ``BRRR_SKIP_BROWSER=1`` skips it instead. Under
CI (``CI`` set) it fails whatever that says: ``.ci/run`` installs both.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from brrr import column
from brrr_book import colab

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome")
# What the machine notes say a headless Chromium needs on a closed network.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NOT_PAGES = ("_static", "_sources", "_images", "_downloads", "reports")
RAW_TEX = ("\\(", "\\[", "$$", "\\begin{")
MATHJAX_TIMEOUT_MS = 30_000
WIDTH = 1280  # px: a laptop's browser window; every page must fit it
PRINTED_WIDTH = column.WIDTH  # characters: a printed line that must fit an output block at WIDTH
TRACE_SUFFIX = ".json"  # the book's JSON downloads are the profiler chapter's traces
# The placeholder's owner/name: in a launch button's address whatever the service.
PLACEHOLDER_REPOSITORY = colab.PLACEHOLDER.removeprefix("https://github.com/")
SOLUTION_MARKER = "### BEGIN SOLUTION"  # nbgrader's: a solution's answer code
REDIRECT = re.compile(r'<meta http-equiv="refresh" content="0; url=([^"]+)"', re.IGNORECASE)

# Runs in the page once MathJax (if any) has finished: what a reader would see.
INSPECT_PAGE = (
    """async () => {
  const images = Array.from(document.images);
  images.forEach(img => { img.loading = "eager"; });
  await Promise.all(images.map(img => img.complete ? null :
      new Promise(done => { img.onload = img.onerror = done; })));
  const main = document.querySelector("main") || document.body;
  const article = document.querySelector("article") || main;
  const visible = main.cloneNode(true);
  visible.querySelectorAll("pre, code, script, style, textarea").forEach(n => n.remove());
  // Sphinx's math elements (MathJax's own spans have class "math" too).
  const math = Array.from(main.querySelectorAll(".math.notranslate"));
  return {
    images: images.length,
    broken_images: images.filter(img => !(img.complete && img.naturalWidth > 0))
                         .map(img => img.getAttribute("src").slice(0, 120)),
    math: math.length,
    unrendered_math: math.filter(el => !el.querySelector(".MathJax, .MathJax_Display"))
                         .map(el => el.textContent.slice(0, 80)),
    text: visible.textContent,
    downloads: Array.from(document.querySelectorAll("a[download], a.download"))
                    .map(a => a.href),
    // Code and output blocks wider than the column: the reader must scroll.
    scrolling: Array.from(main.querySelectorAll("div.cell pre"))
                    .filter(pre => pre.scrollWidth > pre.clientWidth + 1)
                    .map(pre => pre.textContent.split("\\n").reduce(
                        (a, b) => (b.length > a.length ? b : a), "").slice(0, 100)),
    // Printed output blocks in which a line of the book's 100 characters (brrr.column.WIDTH)
    // would wrap.
    wrapping: Array.from(main.querySelectorAll("div.cell_output pre")).filter(pre => {
                  const style = getComputedStyle(pre);
                  const pen = document.createElement("canvas").getContext("2d");
                  pen.font = `${style.fontSize} ${style.fontFamily}`;
                  const room = pre.clientWidth - parseFloat(style.paddingLeft)
                               - parseFloat(style.paddingRight);
                  return pen.measureText("0".repeat(%d)).width > room + 0.5;
              }).length,
    // Anything else wider than its box at this width (a table, an equation, a figure), and the
    // page itself: the main column must fit the window without sideways scrolling.
    sideways: Array.from(article.querySelectorAll("*"))
                   .filter(el => !el.closest("div.cell pre")
                                 && ["auto", "scroll"].includes(getComputedStyle(el).overflowX)
                                 && el.scrollWidth > el.clientWidth + 1)
                   .map(el => `${el.tagName.toLowerCase()}.${el.className}: `
                              + el.textContent.trim().replace(/\\s+/g, " ").slice(0, 80)),
    page_wider_than_window: document.documentElement.scrollWidth > window.innerWidth + 1,
    // Display equations that reach past their column, which the theme clips (overflow hidden).
    wide_equations: Array.from(main.querySelectorAll("div.math")).filter(div => {
        const box = div.getBoundingClientRect();
        return Array.from(div.querySelectorAll(".MathJax_Display *")).some(el => {
            const r = el.getBoundingClientRect();
            return r.width > 0 && (r.right > box.right + 1 || r.left < box.left - 1);
        });
    }).map(div => (div.querySelector("script") || div).textContent.trim()
                      .replace(/\\s+/g, " ").slice(0, 80)),
    // Answers in view on load: an "Answer" fold left open, or a solution's code outside a
    // closed fold.
    open_answers: Array.from(main.querySelectorAll("details[open]"))
        .filter(fold => /answer/i.test(fold.querySelector("summary")?.textContent || ""))
        .map(fold => "an Answer fold is open: "
                     + fold.textContent.trim().replace(/\\s+/g, " ").slice(0, 60))
        .concat(Array.from(main.querySelectorAll("div.cell_input"))
            .filter(cell => cell.textContent.includes("%s")
                            && !cell.closest("details:not([open])"))
            .map(cell => "a solution's code is not folded: "
                         + cell.textContent.trim().split("\\n")[0].slice(0, 60))),
    placeholder_links: Array.from(document.querySelectorAll("a[href]")).map(a => a.href)
                            .filter(href => href.includes("%r")),
  };
}""".replace("%d", str(PRINTED_WIDTH))
    .replace("%s", SOLUTION_MARKER)
    .replace("%r", PLACEHOLDER_REPOSITORY)
)

# Run after the load event, when MathJax.js (an async script) has run if it could.
# Resolves "done" once MathJax 2 has typeset the page (at once without MathJax).
WAIT_FOR_MATHJAX = """timeout_ms => new Promise(done => {
  if (!window.MathJax) { done("done"); return; }
  if (!window.MathJax.Hub) { done("MathJax did not load"); return; }
  setTimeout(() => done(`MathJax did not finish within ${timeout_ms} ms`), timeout_ms);
  // "End": MathJax 2 has started and typeset the page; fires at once if past.
  MathJax.Hub.Register.StartupHook("End", () => done("done"));
})"""


def find_browser() -> str | None:
    explicit = os.environ.get("BRRR_CHROMIUM")
    if explicit:
        return explicit
    return next(filter(None, map(shutil.which, BROWSER_NAMES)), None)


SKIP_ENV = "BRRR_SKIP_BROWSER"


def _skip_or_fail(reason: str):
    """Fail for ``reason`` (no browser to run), or skip where the developer set
    BRRR_SKIP_BROWSER=1, never under CI."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser test (.ci/run installs Chromium)")
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{reason}; skipped as {SKIP_ENV}=1 asks")
    pytest.fail(
        f"{reason}. The browser test checks every page of the book offline; to run the suite "
        f"without it, set {SKIP_ENV}=1"
    )


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _skip_or_fail("Playwright for Python is not installed (pip install -r requirements.txt)")
    executable = find_browser()
    if executable is None:
        _skip_or_fail("no Chromium found (apt-get install chromium, or set BRRR_CHROMIUM)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving(folder: Path):
    """``folder`` on a localhost server, for as long as the block runs: yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        thread.join()


@pytest.fixture(scope="module")
def served_book(book_build):
    """The built pages on a localhost server: (base URL, folder)."""
    if book_build.returncode != 0:
        pytest.fail("the book did not build; test_book_build.py says why")
    with serving(book_build.html_dir) as base:
        yield base, book_build.html_dir


def book_pages(html: Path) -> list[str]:
    """Every HTML page of the book, as paths relative to its root."""
    return sorted(
        path.relative_to(html).as_posix()
        for path in html.rglob("*.html")
        if path.relative_to(html).parts[0] not in NOT_PAGES
    )


def redirect_target(html: Path, name: str) -> str | None:
    """The page a redirect page (the book's index.html) sends the reader to."""
    match = REDIRECT.search((html / name).read_text(encoding="utf-8"))
    return match and (Path(name).parent / match.group(1)).as_posix()


class Reader:
    """One browser tab that loads page after page, with every request off ``base`` aborted.

    The listeners are set once; each :meth:`inspect` collects the problems of its
    own load. One tab for every page keeps the test quick: a new tab per page
    cost Chromium about as much again as the loads themselves (42 s against 28 s
    for the book's 28 pages).
    """

    def __init__(self, context, base: str):
        self.base = base
        self.problems: list[str] = []
        self.page = context.new_page()
        self.page.route("**/*", self._only_local)
        self.page.on("console", self._on_console)
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("response", self._on_response)

    def _only_local(self, route):
        if route.request.url.startswith(self.base):
            route.continue_()
        else:
            self.problems.append(f"network request blocked: {route.request.url}")
            route.abort()

    def _on_console(self, message):
        # The browser asks any server for /favicon.ico by itself; the book links none.
        if message.type == "error" and message.location.get("url") != self.base + "favicon.ico":
            self.problems.append(f"console error: {message.text}")

    def _on_response(self, response):
        if response.status >= 400:
            self.problems.append(f"HTTP {response.status}: {response.url}")

    def inspect(self, url: str) -> tuple[dict, list[str]]:
        """Load ``url``: (what it shows, its problems)."""
        self.problems = problems = []
        self.page.goto(url, wait_until="load")
        mathjax = self.page.evaluate(WAIT_FOR_MATHJAX, MATHJAX_TIMEOUT_MS)
        if mathjax != "done":
            problems.append(mathjax)
        shown = self.page.evaluate(INSPECT_PAGE)
        problems += [f"image did not load: {src}" for src in shown["broken_images"]]
        problems += [f"math not rendered: {text!r}" for text in shown["unrendered_math"]]
        problems += [
            f"raw TeX {tex!r} in the visible text" for tex in RAW_TEX if tex in shown["text"]
        ]
        problems += [
            f"a block scrolls sideways; its longest line: {line!r}" for line in shown["scrolling"]
        ]
        problems += [f"wider than the column at {WIDTH} px: {what}" for what in shown["sideways"]]
        if shown["wrapping"]:
            problems.append(
                f"{shown['wrapping']} output block(s) wrap a printed line of "
                f"{PRINTED_WIDTH} characters"
            )
        problems += [
            f"display equation wider than its column: {tex!r}" for tex in shown["wide_equations"]
        ]
        problems += shown["open_answers"]
        problems += [
            f"links to the placeholder repository: {href}" for href in shown["placeholder_links"]
        ]
        if shown["page_wider_than_window"]:
            problems.append(f"the page scrolls sideways at {WIDTH} px")
        # Leave the page before the next one starts: events it still had queued (a failed image's
        # response and console error) arrive now, and are charged to this page, not the next.
        self.page.goto("about:blank")
        return shown, problems

    def close(self) -> None:
        self.page.close()


def check_downloads(context, urls: set[str]) -> dict[str, list[str]]:
    """Each download link answers 200 with content; a trace is Chrome trace JSON."""
    problems = []
    for url in sorted(urls):
        response = context.request.get(url)
        if response.status != 200 or not response.body():
            problems.append(f"download link does not resolve: {url} (HTTP {response.status})")
        elif url.endswith(TRACE_SUFFIX) and "traceEvents" not in json.loads(response.body()):
            problems.append(f"trace download is not a Chrome trace: {url}")
    return {"download links": problems} if problems else {}
