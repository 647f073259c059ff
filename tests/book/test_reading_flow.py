"""Reading flow (issue 9, part 5): contents, exercises, glossary, alt text.

Cheap checks on the sources, no build. The forced build in test_book_build.py
checks what they render to: every image there must carry alt text.
"""

import json
import re
from pathlib import Path

import pytest
import yaml

from brrr import essay
from conftest import ROOT

TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
CHAPTERS = ["memory-bandwidth", "operator-fusion", "compute", "overhead"]
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
# Which chapter each notebook gives evidence for, by its number.
HOME = {
    "10": "memory-bandwidth",
    "11": "memory-bandwidth",
    "12": "operator-fusion",
    "13": "operator-fusion",
    "2": "compute",
    "3": "overhead",
    "4": "diagnose",
}
GLOSSARY = ROOT / "chapters" / "glossary.md"
REQUIRED_TERMS = [
    "ATen",
    "self time",
    "warp",
    "SM",
    "Inductor",
    "guard",
    "partitioner",
    "arithmetic intensity",
    "ridge point",
    "roofline",
    "operator fusion",
    "kernel",
    "HBM",
    "DRAM",
    "SRAM",
    "tensor core",
    "overhead",
    "dispatch",
    "CUDA graph",
    "rematerialization",
    "FLOP/s",
    "memory bandwidth",
]
# Terms a chapter must link if its prose uses them. Left out: words that
# also have an everyday sense in our prose (program, stream, kernel,
# overhead, bandwidth, FLOP).
CORE_TERMS = [
    "arithmetic intensity",
    "ridge point",
    "roofline",
    "operator fusion",
    "HBM",
    "DRAM",
    "SRAM",
    "tensor core",
    "CUDA graph",
    "rematerialization",
    "memory-bound",
    "compute-bound",
    "overhead-bound",
    "FMA",
    "bf16",
    "TF32",
    "Inductor",
    "Triton",
    "ATen",
    "partitioner",
    "self time",
    "epilogue",
]
TERM_ROLE = re.compile(r"\{term\}`([^`]*)`")
# Inline tokens whose text is not prose: roles, code, math, link targets.
TOKEN = re.compile(r"\{(\w+)\}`([^`]*)`|`[^`]*`|\$[^$\n]*\$|\]\([^)]*\)")
PLOTTING = re.compile(
    r"plt\.show\(|\.subplots\(|\.plot\(|\b(?:loglog_sweep|roofline|roofline_chart|"
    r"bars|share_bars|vertical_marks|render_timeline|show_placement|"
    r"repeat_explorer|placement_grid|plot_\w+|recorded_cos_cos)\("
)


def _toc_entries():
    for part in TOC["parts"]:
        for chapter in part.get("chapters") or []:
            yield part["caption"], chapter


def _markdown(path: Path) -> str:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return path.read_text()


def _pages() -> list[Path]:
    """Every page whose prose may link terms (the glossary excepted)."""
    pages = [p for p in sorted((ROOT / "chapters").glob("*.md")) if p != GLOSSARY]
    return pages + sorted((ROOT / "notebooks").glob("*.ipynb"))


def _target(role_text: str) -> tuple[str, str]:
    """(shown text, target term) of a {term} role, both lower-case."""
    match = re.fullmatch(r"(.*?)\s*<([^>]+)>", role_text.strip(), re.S)
    shown, target = match.groups() if match else (role_text, role_text)
    return " ".join(shown.lower().split()), " ".join(target.lower().split())


def _prose(text: str) -> str:
    """Text without front matter, headings, code, math blocks or fences.

    Directives ({dropdown}, {admonition}, ...) keep their content: it is prose; their options are
    not.
    """
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$( *\([\w-]+\))?", "", text, flags=re.S)
    kept, fences = [], []  # fences: is each open fence a code block?
    for line in text.splitlines():
        fence = re.match(r"^\s*(`{3,}|:{3,})(.*)$", line)
        if fence and fences and not fence.group(2).strip():
            fences.pop()
        elif fence:
            fences.append(
                not fence.group(2).strip().startswith("{")
                or fence.group(2).strip().startswith("{code")
            )
        elif not any(fences) and not line.startswith("#") and not re.match(r"^:\w+:", line):
            kept.append(line)  # a directive's options (:alt:, :name:) are not prose that can link
    return "\n".join(kept)


def _mentions(term: str, text: str):
    """The first plain-text use of ``term`` (or its plural) in ``text``."""
    pattern = rf"(?<![\w-]){re.escape(term)}(?:s|es)?(?![\w-])"
    return re.search(pattern, text, re.I)


def glossary_entries() -> list[list[str]]:
    """Each entry of the glossary as its list of terms (aliases share one)."""
    text = GLOSSARY.read_text()
    blocks = re.findall(r"^```\{glossary\}\n(.*?)^```", text, re.S | re.M)
    assert len(blocks) == 1, "the glossary page needs one {glossary} block"
    entries, current = [], None
    for line in blocks[0].splitlines():
        if line.strip() and not line.startswith(" "):
            if current is None:
                current = []
                entries.append(current)
            current.append(line.strip())
        elif line.strip():
            current = None  # a definition line ends the run of terms
    return entries


def terms() -> dict[str, list[str]]:
    """term, lower-case -> the terms of its entry."""
    return {term.lower(): entry for entry in glossary_entries() for term in entry}


# ---------------------------------------------------------------- contents


def test_every_notebook_is_in_the_toc_once():
    files = [
        entry["file"]
        for _, chapter in _toc_entries()
        for entry in [chapter, *chapter.get("sections", [])]
    ]
    for name in NOTEBOOKS:
        assert files.count(f"notebooks/{name}") == 1, (
            f"notebooks/{name} is in _toc.yml "
            f"{files.count(f'notebooks/{name}')} times; it belongs there "
            "once, under its chapter"
        )


@pytest.mark.parametrize("name", [n for n in NOTEBOOKS if n[0] != "0"])
def test_each_notebook_follows_its_chapter(name):
    home = HOME.get(name[:2]) or HOME[name[0]]
    chapter = next(c for _, c in _toc_entries() if c["file"] == f"chapters/{home}")
    sections = [s["file"] for s in chapter.get("sections", [])]
    assert f"notebooks/{name}" in sections, (
        f"notebooks/{name} measures the claims of chapters/{home}: list it "
        f"under that chapter's sections in _toc.yml (now: {sections})"
    )
    assert sections == sorted(sections), f"{home}: sections out of order"


def test_notebook_00_comes_right_after_the_introduction():
    first_part = TOC["parts"][0]
    files = [c["file"] for c in first_part["chapters"]]
    assert "notebooks/00-your-machine" in files, (
        f"notebook 00 measures the introduction's roofs; put it in the "
        f"first part ({first_part['caption']}), not after the chapters"
    )


def test_each_chapter_links_the_notebooks_that_follow_it():
    for _, chapter in _toc_entries():
        if chapter["file"].removeprefix("chapters/") not in CHAPTERS:
            continue
        text = (ROOT / f"{chapter['file']}.md").read_text()
        for section in chapter.get("sections", []):
            name = Path(section["file"]).name
            assert f"notebooks/{name}" in text, (
                f"{chapter['file']} is followed by {name} but never links it"
            )


def test_labs_and_build_parts_are_kept():
    captions = [part["caption"] for part in TOC["parts"]]
    assert "Labs" in captions and captions[-1] == "About this build"


# ---------------------------------------------------------------- exercises


def _exercises(chapter: str) -> str:
    text = (ROOT / "chapters" / f"{chapter}.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)
    assert sections[-1].startswith("Exercises\n"), (
        f"{chapter}: the last section must be '## Exercises'"
    )
    return sections[-1]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_ends_with_worked_problems_and_folded_answers(chapter):
    problems = re.split(r"^### ", _exercises(chapter), flags=re.M)[1:]
    assert 3 <= len(problems) <= 5, f"{chapter}: {len(problems)} problems; the chapter needs 3 to 5"
    for problem in problems:
        title = problem.splitlines()[0]
        folded = re.findall(r"^```\{dropdown\} Answer\n(.*?)^```", problem, re.S | re.M)
        assert len(folded) == 1, (
            f"{chapter} / {title}: needs one folded answer, a ```{{dropdown}} Answer block"
        )
        question = problem.split("```{dropdown}")[0]
        assert "notebooks/" not in question, (
            f"{chapter} / {title}: the question gives the notebook away"
        )
        named = re.findall(r"\{doc\}`[^`]*?\.\./notebooks/([\w-]+)>?`", folded[0])
        assert named, f"{chapter} / {title}: the answer names no notebook"
        for name in named:
            assert name in NOTEBOOKS, f"{chapter} / {title}: no notebook {name}"


def test_every_answer_cell_of_a_lab_solution_is_folded():
    """A solution page shows each answer folded, so a student can try first: Labs 3, 5 and 6
    showed their "Predict first" answers in full."""
    unfolded = [
        f"{path.name} cell {index}"
        for path in sorted((ROOT / "solutions").glob("*.ipynb"))
        for index, cell in enumerate(json.loads(path.read_text())["cells"])
        if "### BEGIN SOLUTION" in "".join(cell["source"])
        and not {"hide-input", "remove-input", "remove-cell"}
        & set(cell["metadata"].get("tags", []))
    ]
    assert not unfolded, f"answer cells shown unfolded (tag them hide-input): {unfolded}"


QUOTED_RATES = {("TB/s", essay.A100["bandwidth"])} | {
    ("TFLOP/s", essay.A100[key])
    for key in ("matmul_peak_bf16", "fp32_peak", "fp32_peak_without_fma")
}


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_exercises_quote_only_the_essays_rates(chapter):
    """Answers must not depend on the reader's machine: essay rates only."""
    scale = {"TB/s": 1e12, "TFLOP/s": 1e12}
    text = _exercises(chapter)
    rates = re.findall(
        r"(\d+(?:\.\d+)?)\s*(?:\\ |\\text\{\s*)?"
        r"(TB/s|TFLOP/s|GB/s|GFLOP/s)",
        text,
    )
    assert rates, f"{chapter}: the exercises quote no rate at all"
    for value, unit in rates:
        quoted = (unit, float(value) * scale.get(unit, float("nan")))
        assert quoted in QUOTED_RATES, (
            f"{chapter}: {value} {unit} is not one of the essay's A100 figures in brrr.essay"
        )


# ---------------------------------------------------------------- glossary


def test_glossary_defines_each_term_once():
    seen = [term.lower() for entry in glossary_entries() for term in entry]
    duplicates = sorted({t for t in seen if seen.count(t) > 1})
    assert not duplicates, f"defined more than once: {duplicates}"
    missing = [t for t in REQUIRED_TERMS if t.lower() not in seen]
    assert not missing, f"the glossary lacks {missing}"


def test_every_term_role_resolves():
    known = terms()
    glossary_text = GLOSSARY.read_text()
    for path in _pages() + [GLOSSARY]:
        text = glossary_text if path == GLOSSARY else _markdown(path)
        for role in TERM_ROLE.findall(text):
            _, target = _target(role)
            assert target in known, (
                f"{path.relative_to(ROOT)}: {{term}}`{role}` has no entry in chapters/glossary.md"
            )


def test_every_glossary_entry_is_linked_from_the_text():
    linked = {_target(role)[1] for path in _pages() for role in TERM_ROLE.findall(_markdown(path))}
    for entry in glossary_entries():
        assert {t.lower() for t in entry} & linked, (
            f"glossary entry {entry} is linked from no chapter or notebook"
        )


@pytest.mark.parametrize("path", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_terms_are_linked_at_first_use(path):
    text = _prose(_markdown(path))
    plain, roles, position = [], [], 0
    for token in TOKEN.finditer(text):
        plain.append(text[position : token.start()])
        if token.group(1) == "term":
            roles.append((len("".join(plain)), *_target(token.group(2))))
        position = token.end()
    plain.append(text[position:])
    prose = "".join(plain)
    linked = set()
    for offset, shown, target in roles:
        if target in linked:
            continue
        linked.add(target)
        for word in {shown, target}:
            early = _mentions(word, prose[:offset])
            assert not early, (
                f"{path.relative_to(ROOT)}: '{word}' is used before the "
                f"{{term}} link to '{target}': "
                f"...{prose[max(0, early.start() - 60) : early.end()]}..."
            )


@pytest.mark.parametrize("chapter", ["intro", *CHAPTERS])
def test_chapters_link_the_core_terms_they_use(chapter):
    text = _prose((ROOT / "chapters" / f"{chapter}.md").read_text())
    linked = {_target(role)[1] for role in TERM_ROLE.findall(text)}
    prose = TOKEN.sub(" ", text)
    unlinked = [
        term
        for term in CORE_TERMS
        if not {t.lower() for t in terms()[term.lower()]} & linked and _mentions(term, prose)
    ]
    assert not unlinked, (
        f"chapters/{chapter}.md uses {unlinked} without linking them: "
        "write {term}`...` at the first use of each"
    )


# ---------------------------------------------------------------- figures


def _code_cells():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                yield path, index, cell


@pytest.mark.parametrize(
    "path,index,cell",
    [c for c in _code_cells() if PLOTTING.search("".join(c[2]["source"]))],
    ids=lambda v: v.name if isinstance(v, Path) else (str(v) if isinstance(v, int) else ""),
)
def test_plotting_cells_carry_alt_text(path, index, cell):
    alt = cell["metadata"].get("mystnb", {}).get("image", {}).get("alt", "")
    assert len(alt.split()) >= 8, (
        f"{path.name} cell {index} draws a figure: give it metadata "
        "mystnb.image.alt, a sentence that says what the figure shows"
    )


def test_alt_text_sits_only_on_plotting_cells():
    stale = [
        f"{path.name} cell {index}"
        for path, index, cell in _code_cells()
        if cell["metadata"].get("mystnb", {}).get("image")
        and not PLOTTING.search("".join(cell["source"]))
    ]
    assert not stale, f"alt text on cells that draw nothing: {stale}"


def test_images_in_chapters_have_alt_text():
    for path in sorted((ROOT / "chapters").glob("*.md")):
        text = path.read_text()
        assert not re.search(r"!\[\s*\]\(", text), f"{path.name}: ![]() needs alt text"
        for block in re.findall(r"^[`:]{3,}\{(?:figure|image)\}.*?^[`:]{3,}", text, re.S | re.M):
            assert re.search(r"^:alt: *\S", block, re.M), (
                f"{path.name}: a figure or image without :alt:"
            )
