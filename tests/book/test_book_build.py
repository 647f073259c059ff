"""The book builds cleanly with every notebook executed, and a broken reference fails the build.

This build is where the notebooks and the lab solutions run in the test suite: each executes once,
and any exception, a failed check in a notebook or a grader cell of a solution, fails the build.

docs/DESIGN.md, "The book build": build with ``-W -n --keep-going`` on a clean output folder; an
incremental ``-W`` build can hide a failure it already saw.
"""

import html
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import yaml

from brrr_book import claims
from brrr.device import ON_GPU
from conftest import ROOT, build_book


class _Images(HTMLParser):
    """The alt attribute of every <img> in a page (None where missing)."""

    def __init__(self):
        super().__init__()
        self.alts: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            attrs = dict(attrs)
            self.alts.append((attrs.get("src", "?"), attrs.get("alt")))


def _images_without_alt(page_html: Path) -> list[str]:
    """Images whose alt text says nothing: missing, empty, or the file's
    own path (myst-nb's default)."""
    parser = _Images()
    parser.feed(page_html.read_text())
    return [
        src
        for src, alt in parser.alts
        if not (alt or "").strip() or alt == src or re.search(r"\.(png|jpe?g|gif|svg)$", alt)
    ]


def _pages_in_toc(toc: dict) -> list[str]:
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        for chapter in part.get("chapters") or []:
            pages.append(chapter["file"])
            pages.extend(section["file"] for section in chapter.get("sections", []))
    return pages


def test_book_builds_with_every_notebook_executed(book_build):
    """The forced build (``book_build`` in conftest.py)."""
    html_dir = book_build.html_dir
    reports = sorted((html_dir / "reports").rglob("*.log"))
    failed = "\n\n".join(f"{report.name}:\n{report.read_text()[-3000:]}" for report in reports)
    assert book_build.returncode == 0, (
        f"book build failed.\nNotebooks that raised:\n{failed or 'none'}\n"
        f"{book_build.stdout[-6000:]}\n{book_build.stderr[-4000:]}"
    )
    for page in _pages_in_toc(yaml.safe_load((ROOT / "_toc.yml").read_text())):
        page_html = html_dir / f"{Path(page).with_suffix('')}.html"
        assert page_html.exists(), f"{page} did not render"
        assert "Traceback" not in page_html.read_text(), f"{page} shows a traceback"
        # Figures say what they show (notebook and solution cells: mystnb.image.alt).
        if page.startswith(("chapters/", "notebooks/", "solutions/")):
            bare = _images_without_alt(page_html)
            assert not bare, f"{page}: images without alt text: {bare}"
    folded = re.compile(r'<details class="[^"]*sd-dropdown[^"]*">')
    for chapter in ("memory-bandwidth", "operator-fusion", "compute", "overhead"):
        page_html = (html_dir / "chapters" / f"{chapter}.html").read_text()
        exercises = page_html[page_html.index('id="exercises"') :]
        assert len(folded.findall(exercises)) >= 3, (
            f"{chapter}: the exercises' answers did not render folded"
        )


# Claims that must hold on any machine the book is built on, a 2-core CPU included: each was
# measured to hold there (brrr_book.claims has the rules). Two more hold on a GPU only, and their
# pages say why a CPU differs: fusing x.cos().cos() pays where the cosine hides under the memory
# time (on a CPU it is compute-bound: 0.89-0.96x here), and the other ops take a fifth or more of a
# GPU's runtime (15% of this CPU's, where the contractions are slow too).
MUST_HOLD = ("fused-chain-one-op", "overhead-floor") + (
    ("fusion-cuts-bytes", "contractions-flops-vs-runtime") if ON_GPU else ()
)


def _glued(build: Path, notebook: str) -> dict[str, str]:
    data = json.loads((build / "jupyter_execute" / f"{notebook}.glue.json").read_text())
    return {key: value["data"]["text/plain"] for key, value in data.items()}


SMART_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def test_the_ledger_shows_what_the_notebooks_measured(book_build):
    build = book_build.html_dir.parent
    ledger = html.unescape((build / "html" / "chapters" / "claims-ledger.html").read_text())
    ledger = ledger.translate(SMART_QUOTES)  # Sphinx curls the quotes of pasted text
    verdicts = {}
    for key, claim in claims.CLAIMS.items():
        glued = _glued(build, claim.notebook)
        texts = {field: glued[claims.glue_key(key, field)] for field in claims.FIELDS}
        assert texts["statement"] == claim.statement and texts["essay"] == claim.essay
        assert texts["verdict"] == recomputed_verdict(key, texts), (
            f"{key}: glued {texts['verdict']!r}, but its figures {texts['figures']} give otherwise"
        )
        for field in ("statement", "essay", "here", "verdict", "why"):
            assert texts[field] in ledger, (
                f"the ledger does not show {key}'s {field}: {texts[field]!r}"
            )
        verdicts[key] = texts
    for key in MUST_HOLD:
        assert verdicts[key]["verdict"] == claims.HELD, (
            f"{key} did not hold on this machine: {verdicts[key]['here']}; {verdicts[key]['why']}"
        )
    shown = _recorded_gpu_entries(ledger)
    assert len(shown) == len(claims.CLAIMS), (
        f"{len(shown)} 'Recorded GPU:' entries for {len(claims.CLAIMS)} claims"
    )
    for (key, figure), entry in zip(
        claims.reference_figures().items(), shown
    ):  # "none recorded" where none is
        assert figure in entry, (
            f"the ledger shows {entry!r} as {key}'s recorded GPU, not {figure!r}"
        )


def recomputed_verdict(key: str, texts: dict[str, str]) -> str:
    """The verdict claim ``key``'s glued figures give, judged again (``claims.recompute``)."""
    return claims.recompute(key, json.loads(texts["figures"])).word


def test_the_ledger_check_recomputes_each_verdict_from_its_figures():
    """What the book's ledger check reads, on glued texts made here: a verdict its figures
    contradict is caught, whichever way it was turned."""
    for verdict in (claims.judge_compile_overhead(1.5), claims.judge_compile_overhead(2.5)):
        glued = claims.values(verdict, "[stamp]", [])
        assert recomputed_verdict(verdict.key, glued) == glued["verdict"] == verdict.word
        forged = {**glued, "verdict": claims.HELD if not verdict.held else claims.NOT_HELD}
        assert recomputed_verdict(verdict.key, forged) != forged["verdict"]


def _recorded_gpu_entries(ledger: str) -> list[str]:
    """What each entry of the built ledger shows after its "Recorded GPU:" label, in page order (the
    order of ``claims.CLAIMS``), up to the entry's next label."""
    return [entry.split("Measured in:")[0] for entry in ledger.split("Recorded GPU:")[1:]]


def test_the_recorded_gpu_entries_are_read_one_per_claim():
    ledger = (
        "<th><p>Recorded GPU</p></th><li><p><strong>Recorded GPU:</strong> <span "
        'class="pasted-text">'
        "NVIDIA H100: 1.00x (held there)</span></p></li><li><p><strong>Measured in:</strong> "
        "10-cos-cos</p>"
        '<li><p><strong>Recorded GPU:</strong> <span class="pasted-text">none '
        "recorded</span></p></li>"
        "<li><p><strong>Measured in:</strong> 33-cuda-graphs</p>"
    )
    first, second = _recorded_gpu_entries(ledger)
    assert "NVIDIA H100: 1.00x (held there)" in first and "none recorded" not in first
    assert "none recorded" in second and "H100" not in second and "cuda-graphs" not in second


def test_the_compute_chapter_shows_each_committed_gpu_reference(book_build):
    """The chapter said "none recorded yet" beside a committed H100 record that lacked only its
    ceilings."""
    page = html.unescape((book_build.html_dir / "chapters" / "compute.html").read_text())
    committed = claims.reference.load_all()
    for name, data in committed.items():
        env = next(iter(data.get("figures", {}).values()), {}).get("env", {})
        assert f"GPU reference {env.get('device', name)}" in page, name
    printed = re.search(
        r'(?<!")GPU reference: none recorded', page
    )  # the output, not the cell's source
    assert bool(printed) == (not committed)


def test_a_broken_cross_reference_fails_the_build(tmp_path):
    """Each broken reference is a warning of its own, naming its target, and -W makes any warning
    fail the build; the reference that resolves is not flagged, so the failure is the broken
    ones'."""
    book = tmp_path / "book"
    book.mkdir()
    (book / "_toc.yml").write_text("format: jb-book\nroot: index\n")
    (book / "index.md").write_text(
        "# Index\n\n(a-label)=\n## A section\n\nSee {doc}`no-such-page`, {ref}`no-such-label` and "
        "{ref}`a-label`.\n"
    )
    shutil.copy(ROOT / "references.bib", book / "references.bib")
    config = {
        "title": "broken",
        "execute": {"execute_notebooks": "off"},
        "bibtex_bibfiles": ["references.bib"],
    }
    (book / "_config.yml").write_text(yaml.safe_dump(config))
    result = build_book(book, book / "_config.yml", tmp_path / "out")
    assert result.returncode != 0
    output = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert len(warnings) == 2, warnings
    assert any("no-such-page" in line for line in warnings), warnings
    assert any("undefined label: 'no-such-label'" in line for line in warnings), warnings


# A measured figure: a time or a rate. Counted FLOPs and bytes are not measured.
MEASURED_FIGURE = re.compile(
    r"\d(?:[\d.,]*\d)?\s?(?:ms|us|µs|ns|s|[kMGTP]?B/s|[kMGTP]?FLOP/s"
    r"|[kMG]?op/s|[kMG]?adds/s|[kMG]?cos/s)(?![\w/])"
)
# A synthetic trace (notebook 32 on a CPU) is labelled as such: its figures were never measured.
STAMPED = ("measured on ", "quoted from the essay", "synthetic, built by hand")


def unstamped_cells(notebook: dict) -> list[str]:
    """Code cells whose text output holds a measured figure before the page has shown a stamp.

    A page stamps once, before its first measured figure (its set-up cell prints it); each figure
    and table carries its own. A figure printed before any stamp on the page has none."""
    found, stamped = [], False
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        text = "".join("".join(output.get("text", "")) for output in cell.get("outputs", []))
        text += "".join(
            "".join(output.get("data", {}).get("text/plain", ""))
            for output in cell.get("outputs", [])
            if "image/png" not in output.get("data", {})
        )
        stamped = stamped or any(mark in text for mark in STAMPED)
        figure = MEASURED_FIGURE.search(text)
        if figure and not stamped:
            found.append(f"cell {index}: {figure.group(0)!r} in {text[:80]!r}")
    return found


def test_the_stamp_check_catches_an_unstamped_figure():
    cell = {
        "cell_type": "code",
        "outputs": [{"output_type": "stream", "text": ["copy: 12.5 GB/s\n"]}],
    }
    assert unstamped_cells({"cells": [cell]})
    stamp = {
        "cell_type": "code",
        "outputs": [
            {"output_type": "stream", "text": ["[measured on a CPU · torch 2.13 · 2026-11-23]\n"]}
        ],
    }
    assert not unstamped_cells({"cells": [stamp, cell]})  # the page's stamp covers what follows
    assert unstamped_cells({"cells": [cell, stamp]})  # and nothing before it
    cell["outputs"][0]["text"].append("[measured on a CPU · torch 2.13 · 2026-11-23]\n")
    assert not unstamped_cells({"cells": [cell]})
    counted = {
        "cell_type": "code",
        "outputs": [{"output_type": "stream", "text": ["268 MB moved, 4.2 GFLOP\n"]}],
    }
    assert not unstamped_cells({"cells": [counted]})


def stamp_lines(notebook: dict) -> int:
    """How many stamps a page prints outside its figures and tables (``print(stamp())`` lines)."""
    return sum(
        source.count("print(stamp())") + source.count('print(f"  {STAMP}")')
        for source in (
            "".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"
        )
    )


def test_a_page_prints_its_stamp_once():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted(
        (ROOT / "solutions").glob("*.ipynb")
    ):
        assert stamp_lines(json.loads(path.read_text())) <= 1, (
            f"{path.name} prints its stamp more than once"
        )


def test_every_measured_number_carries_its_stamp(book_build):
    """STYLE: every printed measurement follows the page's stamp (device, versions, date)."""
    executed = book_build.html_dir.parent / "jupyter_execute"
    notebooks = sorted(executed.glob("notebooks/*.ipynb")) + sorted(
        executed.glob("solutions/*.ipynb")
    )
    assert len(notebooks) >= 12, f"executed notebooks not found under {executed}"
    found = {
        path.relative_to(executed).as_posix(): unstamped_cells(json.loads(path.read_text()))
        for path in notebooks
    }
    found = {name: cells for name, cells in found.items() if cells}
    assert not found, f"measured figures printed without a stamp: {found}"


PRINTED_WIDTH = 100  # characters: a printed line in the book's column (brrr.column)
MOST_WIDE_LINES = 0.02  # of all printed lines; the rest wrap where the column ends
MOST_WORDS = 3_000  # a page, prose, code and printed output together (issue 47)
MOST_CODE_SHARE = 0.5  # of a page's words, its shown code and output together (issue 47)


def _shown(notebook: dict) -> list[dict]:
    """The cells whose source a reader sees."""
    hidden = {"remove-cell", "remove-input"}
    return [c for c in notebook["cells"] if not hidden & set(c.get("metadata", {}).get("tags", []))]


def printed_lines(notebook: dict) -> list[str]:
    """The lines a page prints as text (streams, and plain results shown without an image or
    HTML)."""
    lines = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code" or "remove-output" in cell.get("metadata", {}).get(
            "tags", []
        ):
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            text = output.get("text", "") or (
                "" if {"image/png", "text/html"} & data.keys() else data.get("text/plain", "")
            )
            lines += "".join(text).splitlines()
    return lines


DRAWN = re.compile(r"<(svg|script|style)\b.*?</\1>", re.S | re.I)


def html_words(notebook: dict) -> int:
    """Words of the HTML a page's cells display (a table is read like printed text), tags left
    out."""
    found = 0
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code" or "remove-output" in cell.get("metadata", {}).get(
            "tags", []
        ):
            continue
        for output in cell.get("outputs", []):
            shown = "".join(output.get("data", {}).get("text/html", ""))
            shown = DRAWN.sub(" ", shown)  # a drawing's labels and tooltips are not read as text
            found += len(html.unescape(re.sub(r"<[^>]+>", " ", shown)).split())
    return found


def page_words(notebook: dict) -> tuple[int, int]:
    """Words a reader meets on a page (its markdown, the code it shows, and what it prints or
    displays as a table), and how many of them are code and output."""
    shown = _shown(notebook)
    prose = sum(len("".join(c["source"]).split()) for c in shown if c["cell_type"] == "markdown")
    code = sum(len("".join(c["source"]).split()) for c in shown if c["cell_type"] == "code")
    output = len(" ".join(printed_lines(notebook)).split()) + html_words(notebook)
    return prose + code + output, code + output


def test_printed_lines_fit_the_column_and_pages_stay_short(book_build):
    executed = book_build.html_dir.parent / "jupyter_execute"
    notebooks = sorted(executed.glob("notebooks/*.ipynb")) + sorted(
        executed.glob("solutions/*.ipynb")
    )
    assert len(notebooks) >= 12, f"executed notebooks not found under {executed}"
    total, wide, heavy = 0, [], {}
    for path in notebooks:
        notebook = json.loads(path.read_text())
        lines = printed_lines(notebook)
        total += len(lines)
        wide += [f"{path.stem}: {line[:90]}..." for line in lines if len(line) > PRINTED_WIDTH]
        if why := _too_heavy(*page_words(notebook)):
            heavy[path.stem] = why
    assert len(wide) <= MOST_WIDE_LINES * total, (
        f"{len(wide)} of {total} printed lines are wider than {PRINTED_WIDTH} characters "
        "(wrap sentences with brrr.column.fit; say a table's reason once under it):\n"
        + "\n".join(wide)
    )
    assert not heavy, f"pages too long or mostly code and output: {heavy}"


def _too_heavy(words: int, code_and_output: int) -> str:
    """Why a page of ``words``, ``code_and_output`` of them code and output, is too heavy ('' if it
    is not)."""
    why = []
    if words > MOST_WORDS:
        why.append(f"{words} words (at most {MOST_WORDS:,})")
    if code_and_output > MOST_CODE_SHARE * words:
        why.append(f"code and output {code_and_output / words:.0%} (at most {MOST_CODE_SHARE:.0%})")
    return "; ".join(why)


def test_the_width_and_length_checks_can_fail():
    wide = {
        "cell_type": "code",
        "metadata": {},
        "outputs": [{"output_type": "stream", "text": "x" * 101}],
    }
    assert [len(line) for line in printed_lines({"cells": [wide]})] == [101]
    image = {
        "cell_type": "code",
        "metadata": {},
        "outputs": [
            {"output_type": "display_data", "data": {"image/png": "", "text/plain": "y" * 200}}
        ],
    }
    assert printed_lines({"cells": [image]}) == []
    prose = {"cell_type": "markdown", "metadata": {}, "source": ["word " * 3_001]}
    assert page_words({"cells": [prose]}) == (3_001, 0)
    assert _too_heavy(*page_words({"cells": [prose]})).startswith("3001 words")
    table = {
        "cell_type": "code",
        "metadata": {},
        "source": ["show(t)"],
        "outputs": [
            {
                "output_type": "display_data",
                "data": {"text/html": "<table><tr><td>a &amp; b</td></tr></table>"},
            }
        ],
    }
    short = {"cell_type": "markdown", "metadata": {}, "source": ["one two three"]}
    assert page_words({"cells": [short, table]}) == (7, 4)  # "show(t)", "a", "&", "b"
    assert "code and output 57%" in _too_heavy(*page_words({"cells": [short, table]}))
    drawn = {"text/html": "<svg><title>device idle: 182 us</title></svg><p>a caption</p>"}
    timeline = {**table, "outputs": [{"output_type": "display_data", "data": drawn}]}
    assert page_words({"cells": [timeline]}) == (3, 3)  # "show(t)", "a", "caption"
    assert not _too_heavy(*page_words({"cells": [short, short, table]}))
