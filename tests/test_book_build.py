"""The book builds cleanly with every notebook executed, and a broken reference fails the build.

This build is where the notebooks and the lab solutions run in the test suite: each executes once,
and any exception, a failed check in a notebook or a grader cell of a solution, fails the build.

DESIGN.md: build with ``-W -n --keep-going`` on a clean output folder; an
incremental ``-W`` build can hide a failure it already saw.
"""

import shutil
from pathlib import Path

import yaml

from conftest import ROOT, build_book


def _pages_in_toc(toc: dict) -> list[str]:
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        for chapter in part.get("chapters") or []:
            pages.append(chapter["file"])
            pages.extend(section["file"] for section in chapter.get("sections", []))
    return pages


def test_book_builds_with_every_notebook_executed(book_build):
    """The forced build (``book_build`` in conftest.py, shared with test_browser.py)."""
    html = book_build.html_dir
    reports = sorted((html / "reports").rglob("*.log"))
    failed = "\n\n".join(f"{report.name}:\n{report.read_text()[-3000:]}" for report in reports)
    assert book_build.returncode == 0, (f"book build failed.\nNotebooks that raised:\n{failed or 'none'}\n"
                                        f"{book_build.stdout[-6000:]}\n{book_build.stderr[-4000:]}")
    for page in _pages_in_toc(yaml.safe_load((ROOT / "_toc.yml").read_text())):
        page_html = html / f"{Path(page).with_suffix('')}.html"
        assert page_html.exists(), f"{page} did not render"
        assert "Traceback" not in page_html.read_text(), f"{page} shows a traceback"


def test_a_broken_cross_reference_fails_the_build(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    (book / "_toc.yml").write_text("format: jb-book\nroot: index\n")
    (book / "index.md").write_text("# Index\n\nSee {doc}`no-such-page` and {ref}`no-such-label`.\n")
    shutil.copy(ROOT / "references.bib", book / "references.bib")
    config = {"title": "broken", "execute": {"execute_notebooks": "off"}, "bibtex_bibfiles": ["references.bib"]}
    (book / "_config.yml").write_text(yaml.safe_dump(config))
    result = build_book(book, book / "_config.yml", tmp_path / "out")
    assert result.returncode != 0
    assert "no-such-page" in result.stdout + result.stderr
