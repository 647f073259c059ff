"""The repository's own documents: the README is a front door, and every reference in them, or in
the code to them, resolves inside the repository (issue 28: seven places once cited a DESIGN.md that
had never been committed)."""

import re

import pytest

from conftest import ROOT

pytestmark = pytest.mark.device_independent

DOCUMENTS = [ROOT / "README.md", ROOT / "MAINTAINING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# a path of the repository in backticks: `brrr/grading/integrity.py`, `tests/conftest.py`, ...
PATH = re.compile(r"`((?:brrr|tests|chapters|notebooks|solutions|labs|docs|\.ci)/[\w./-]*)`")
# a citation of a design or style section: (docs/DESIGN.md, "Labs come from one source")
CITATION = re.compile(r'docs/(DESIGN|STYLE)\.md,\s+"([^"]+)"')
SOURCES = [
    *ROOT.glob("brrr/**/*.py"),
    *ROOT.glob("tests/*.py"),
    ROOT / "_toc.yml",
    ROOT / "_config.yml",
    ROOT / "Makefile",
    *DOCUMENTS,
]


def headings(document: str) -> set[str]:
    return {
        line.lstrip("#").strip()
        for line in (ROOT / "docs" / document).read_text().splitlines()
        if line.startswith("#")
    }


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_link_and_path_in_a_document_exists(document):
    text = document.read_text()
    targets = [link for link in LINK.findall(text) if "://" not in link]
    targets += [path for path in PATH.findall(text) if "<" not in path and "*" not in path]
    missing = sorted(
        {
            target
            for target in targets
            if not (document.parent / target).exists() and not (ROOT / target).exists()
        }
    )
    assert not missing, f"{document.name} points at what is not in the repository: {missing}"


def test_every_cited_design_or_style_section_exists():
    cited = {
        (path.relative_to(ROOT).as_posix(), document, section)
        for path in SOURCES
        for document, section in CITATION.findall(path.read_text())
    }
    assert cited, "no citation found: the pattern checked nothing"
    missing = [c for c in sorted(cited) if c[2] not in headings(f"{c[1]}.md")]
    assert not missing, f"sections cited but not written: {missing}"


def test_no_reference_to_a_document_outside_the_repository():
    bare = re.compile(r"(?<![\w/])(DESIGN|STYLE)\.md")
    stray = sorted(
        path.relative_to(ROOT).as_posix()
        for path in SOURCES
        if path.parent != ROOT / "docs"
        and path.name not in ("README.md", "MAINTAINING.md", __file__.split("/")[-1])
        and bare.search(path.read_text())
    )
    assert not stray, f"these cite DESIGN.md or STYLE.md without its folder (docs/): {stray}"


def test_the_readme_is_a_front_door():
    """At most about 1,000 words, and the table of what it teaches names every chapter's
    notebooks."""
    text = (ROOT / "README.md").read_text()
    assert len(text.split()) <= 1100, f"the README has {len(text.split())} words"
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted(
        (ROOT / "solutions").glob("*.ipynb")
    ):
        assert f"({notebook.relative_to(ROOT).as_posix()})" in text, (
            f"the README's table lacks {notebook.name}"
        )
    assert "(MAINTAINING.md)" in text
