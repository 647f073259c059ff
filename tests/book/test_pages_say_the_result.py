"""Pages say their result; they do not send the reader to find it (issue 25: 24 sentences once did,
such as "the lines below say which" and "the printed gap says how much").

A sentence about a measurement carries its numbers (myst-nb ``glue``, or a sentence the notebook
writes from its result). This scans the prose of every page for the phrasings that defer instead."""

import json
import re

import pytest

from conftest import ROOT

pytestmark = pytest.mark.device_independent

DEFERS = re.compile(
    r"\b(?:the\s+)?(?:lines?|numbers?|output|table|gap|verdict)\s+(?:below|above|under\s+the\s+\w+)\s+says?\b"
    r"|\bprinted\s+(?:above|below)\b"
    r"|\bthe\s+printed\s+(?:lines?|gap|numbers?|table|predictions?)\b"
    r"|\blines?\s+(?:below|above)\s+(?:say|show|tell)\b"
    r"|\bsays?\s+which\s+happened\b"
    r"|\bcompare\s+the\s+printed\b",
    re.IGNORECASE,
)
PAGES = (
    sorted(ROOT.glob("notebooks/*.ipynb"))
    + sorted(ROOT.glob("solutions/*.ipynb"))
    + sorted(ROOT.glob("chapters/*.md"))
)


def prose(path) -> str:
    if path.suffix == ".md":
        return re.sub(
            r"```.*?```", "", path.read_text(), flags=re.DOTALL
        )  # code cells are not prose
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")


@pytest.mark.parametrize("page", PAGES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_no_sentence_sends_the_reader_to_printed_lines(page):
    text = " ".join(prose(page).split())
    found = [text[max(0, m.start() - 60) : m.end() + 30] for m in DEFERS.finditer(text)]
    assert not found, f"{page.name} defers to printed output instead of saying it: {found}"


def test_the_scan_catches_a_deferring_sentence():
    for sentence in (
        "The lines below say which happened here.",
        "the printed gap says how much",
        "Compare your ridge point with the A100's printed above.",
        "The line under the sweep's table says which happened here.",
    ):
        assert DEFERS.search(" ".join(sentence.split())), sentence
    assert not DEFERS.search("The page on doing the labs says how to run a lab.")


# Issue 47: the essay's lesson on every teaching page, GPU first, its figures read from the record.
H100_COS_COS = {
    "n": 2**28,
    "copy_bandwidth": 3.026e12,
    "eager x.cos()": {"seconds": 0.7092e-3, "bandwidth": 3.028e12},
    "eager x.cos().cos()": {"seconds": 1.4224e-3, "bandwidth": 3.019e12},
    "compiled x.cos()": {"seconds": 0.7089e-3, "bandwidth": 3.029e12},
    "compiled x.cos().cos()": {"seconds": 0.7099e-3, "bandwidth": 3.025e12},
}


def _record(folder, section: str, values: dict) -> None:
    env = {"device": "NVIDIA H100", "mode": "GPU", "torch": "2.11.0", "triton": "3.6.0"}
    env["date"] = "2026-11-24"
    (folder / "nvidia-h100.json").write_text(
        json.dumps({"figures": {section: {"env": env, "values": values}}})
    )


def _cells(path) -> list[tuple[str, str]]:
    return [
        (cell["cell_type"], "".join(cell["source"]))
        for cell in json.loads(path.read_text())["cells"]
    ]


def test_notebook_10_opens_with_the_recorded_gpu_before_it_measures():
    """It measured 0.91x on a CPU and said "as fast as the memory allows"; the H100's 2.00x was on
    no page."""
    cells = _cells(ROOT / "notebooks" / "10-cos-cos.ipynb")
    code = [source for kind, source in cells if kind == "code"]
    reads = next(i for i, source in enumerate(code) if "cos_cos.recorded_sentence(" in source)
    measures = next(i for i, source in enumerate(code) if "measure_together(" in source)
    assert reads < measures and "figures.recorded_cos_cos(" in code[reads]
    opening = "".join(source for kind, source in cells[: cells.index(("code", code[measures]))])
    for glued in ("cos-cos-here", "cos-cos-why"):  # this machine's sentence, and why it differs
        assert f"{{glue:text}}`{glued}`" in opening, glued


def test_the_recorded_cos_cos_is_read_from_the_record_not_typed(tmp_path):
    from brrr_book import figures
    from brrr_book.pages import cos_cos

    assert cos_cos.recorded_sentence(tmp_path).startswith("No GPU has recorded x.cos().cos() yet")
    _record(tmp_path, "cos-cos", H100_COS_COS)
    said = cos_cos.recorded_sentence(tmp_path)
    assert "eager x.cos().cos() took 1.42 ms and the fused one 710 us: 2.00x faster" in said, said
    slower = {**H100_COS_COS, "eager x.cos().cos()": {"seconds": 2.1297e-3, "bandwidth": 2e12}}
    _record(tmp_path, "cos-cos", slower)
    assert "3.00x faster" in cos_cos.recorded_sentence(tmp_path)
    fig = figures.cos_cos({"H100": H100_COS_COS})
    heights = [bar.get_height() for bar in fig.axes[0].patches]
    assert heights == pytest.approx([0.7092, 1.4224, 0.7099])  # ms, the record's own
    assert "fused 2.00x faster than eager" in fig.axes[0].get_title()


def test_lab_1_teaches_memory_bound_on_a_cheap_op_and_asks_about_cos():
    """Lab 1 called a pointwise op "memory-bound everywhere" with cos as the example, while notebook
    10 measured eager cos compute-bound on the same machine."""
    from brrr.labs.roofline import OPS

    (pointwise,) = [op for op in OPS if op.kind == "pointwise"]
    assert "x * 2" in pointwise.name and "cos" not in pointwise.name
    lab = _cells(ROOT / "solutions" / "01-roofline.ipynb")
    prose = " ".join(" ".join(source.split()) for kind, source in lab if kind == "markdown")
    assert "like `cos`" not in prose and "like `x * 2`" in prose
    assert "is `cos` memory-bound" in prose and "A FLOP count is not a cost" in prose
    assert any("torch.cos(x, out=out)" in source for kind, source in lab if kind == "code")


def test_lab_2_names_the_kernels_eager_runs(tmp_path):
    """Lab 2's recorded sentence said "eager's three kernels" for a chain of five."""
    import inspect

    from brrr.labs import recorded
    from brrr.labs.fuse_it import chain

    kernels = inspect.getsource(chain).count("# read")  # one comment per eager kernel
    _record(
        tmp_path,
        "lab-02-fuse-it",
        {"copy_bandwidth": 3e12, "fused_bandwidth": 3e12, "eager_s": 4.2e-3, "fused_s": 1.05e-3},
    )
    said = recorded.sentence("02-fuse-it", tmp_path)
    assert kernels == 5 and "eager's five kernels" in said, said


def test_the_capstone_never_calls_a_gain_over_its_bound_within_it():
    """The capstone said "2.12x ... (within the tool's bound of 2.03x)"."""
    from types import SimpleNamespace

    from brrr_book import capstone

    def diagnosis(regime, gain=None, step_s=1e-3):
        advice = [SimpleNamespace(regime=regime, predicted_gain=gain)] if gain else []
        shares = {"overhead-bound": 0.1, "compute-bound": 0.1} | {regime: 0.8}
        return SimpleNamespace(regime=regime, shares=shares, step_s=step_s, mfu=0.2, advice=advice)

    setup, fix = capstone.Setup(), next(f for f in capstone.FIXES if f.name == "torch.compile")
    start = capstone.Stage(setup, None, "", None, diagnosis("overhead-bound", step_s=2.12e-3))
    for bound, said in ((2.03, "over the tool's bound of 2.03x"), (2.5, "within the tool's bound")):
        stage = capstone.Stage(setup, fix, "", bound, diagnosis("overhead-bound", step_s=1e-3))
        line = capstone.conclusions([start, stage])[1]
        assert "2.12x the tokens per second" in line and said in line, line
