"""Every number a chapter promises, pinned by value: lowering a target is a deliberate act that
changes this table too.

A notebook's targets and checks (``targets.require*``, ``targets.check``, ``fusion.require``,
``overhead.require``) read their numbers from named constants in ``brrr/benchmarks``,
``book/brrr_book/pages``, ``book/brrr_book/capstone.py`` and ``brrr/roofline.py``. The tests that
plant a regression against each target (tests/book/test_timed_checks.py) compare with whatever the
constant now is, so a target lowered to 1x would pass them: here it fails. The claims' rules are
pinned in tests/book/test_claims.py (each rule's line, both sides of it), the labs' thresholds in
tests/checks/test_thresholds.py."""

import ast
import inspect

import pytest

from brrr import roofline, targets
from brrr_book import claims
from brrr_book import capstone
from brrr.benchmarks import compute, fusion, overhead, repeat_sweep
from brrr.device import device_class
from brrr_book.pages import batch_doubling, python_vs_pytorch
from conftest import ROOT

HERE = device_class()

# (name, the value in force, the pinned value). A constant set per device (brrr.device.per_device)
# is pinned for both classes; the one in force on this machine is compared.
PINNED = [
    ("fusion.COS_MODEL_FRACTION", fusion.COS_MODEL_FRACTION, 0.85),
    ("fusion.MODEL_FLOOR", fusion.MODEL_FLOOR, {"cpu": 0.7, "gpu": 0.9}[HERE]),
    ("fusion.MODEL_CEILING", fusion.MODEL_CEILING, 2.0),
    ("overhead.TARGETS['cuda']", overhead.TARGETS["cuda"].required_speedup, 3.0),
    ("overhead.TARGETS['cpu']", overhead.TARGETS["cpu"].required_speedup, 2.0),
    ("overhead.TINY_OPS", overhead.TINY_OPS, 50),
    ("repeat_sweep.FLAT_SPREAD", repeat_sweep.FLAT_SPREAD, 1.5),
    (
        "repeat_sweep.OVER_ROOF_TOLERANCE",
        repeat_sweep.OVER_ROOF_TOLERANCE,
        {"cpu": 1.25, "gpu": 1.05}[HERE],
    ),
    ("repeat_sweep.RISE_MIN", repeat_sweep.RISE_MIN, 2.0),
    ("repeat_sweep.RISE_SHARE_OF_PREDICTED", repeat_sweep.RISE_SHARE_OF_PREDICTED, 1 / 3),
    ("roofline.ROOF_NOISE", roofline.ROOF_NOISE, 0.05),
    ("python_vs_pytorch.PYTHON_OVER_EAGER_MIN", python_vs_pytorch.PYTHON_OVER_EAGER_MIN, 3),
    ("python_vs_pytorch.SMALLEST_ADDS_SPREAD_MAX", python_vs_pytorch.SMALLEST_ADDS_SPREAD_MAX, 1.5),
    ("batch_doubling.FIRST_DOUBLING_MAX", batch_doubling.FIRST_DOUBLING_MAX, 1.5),
    ("batch_doubling.LAST_DOUBLING_MIN", batch_doubling.LAST_DOUBLING_MIN, 1.5),
    ("compute.MATMUL_TARGET_FRACTION", compute.MATMUL_TARGET_FRACTION, 0.80),
    ("compute.MATMUL_DATASHEET_FRACTION", compute.MATMUL_DATASHEET_FRACTION, 0.50),
    ("compute.MATMUL_OVER_VECTOR_TARGET", compute.MATMUL_OVER_VECTOR_TARGET, 4.0),
    ("compute.CONTRACTION_FLOP_SHARE_TARGET", compute.CONTRACTION_FLOP_SHARE_TARGET, 0.95),
    ("compute.OTHER_TIME_OVER_FLOP_SHARE_TARGET", compute.OTHER_TIME_OVER_FLOP_SHARE_TARGET, 10.0),
    ("claims.CONTRACTION_FLOP_SHARE_MIN", claims.CONTRACTION_FLOP_SHARE_MIN, 0.95),
    ("claims.OTHER_TIME_OVER_FLOP_SHARE_MIN", claims.OTHER_TIME_OVER_FLOP_SHARE_MIN, 10.0),
    ("claims.REMAT_TIME_NOISE", claims.REMAT_TIME_NOISE, 0.02),
    ("capstone.COMPILE_BEYOND_NOISE_MIN", capstone.COMPILE_BEYOND_NOISE_MIN, 1.05),
    ("capstone.FINAL_OVER_START_MIN", capstone.FINAL_OVER_START_MIN, 1.5),
    (
        "targets.require's attempts",
        inspect.signature(targets.require).parameters["attempts"].default,
        3,
    ),
]

# fusion.TARGETS, whole: (check, minimum, kind) per device class.
PINNED_FUSION = {
    "gpu": [
        ("cos_cos_compiled_speedup", 0.85, fusion.OF_ROOFLINE_SPEEDUP),
        ("cos_cos_triton_speedup", 0.85, fusion.OF_ROOFLINE_SPEEDUP),
        ("pointwise_bandwidth", 0.85, fusion.FRACTION_OF_COPY),
        ("softmax_bandwidth", 0.75, fusion.FRACTION_OF_COPY),
    ],
    "cpu": [
        ("cos_cos_compiled_speedup", 1.12, fusion.SPEEDUP),
        ("chain_fusion_speedup", 1.5, fusion.SPEEDUP),
        ("triton_kernels_correct", 1.0, fusion.CORRECT),
    ],
}


@pytest.mark.parametrize("name, value, pinned", PINNED, ids=[row[0] for row in PINNED])
def test_each_chapter_target_has_its_pinned_value(name, value, pinned):
    assert value == pytest.approx(pinned, rel=1e-12), f"{name} is {value}, pinned at {pinned}"


def test_the_fusion_targets_are_pinned_whole():
    found = {
        device: [(t.check, t.minimum, t.kind) for t in table]
        for device, table in fusion.TARGETS.items()
    }
    assert found == PINNED_FUSION


def test_the_overhead_targets_are_pinned_whole():
    assert set(overhead.TARGETS) == {"cuda", "cpu"}


# A page's target or check: the calls whose number must come from a named constant.
TARGET_CALLS = {"require", "require_at_most", "require_between", "check"}


def _literal_numbers(node: ast.AST) -> list[float]:
    """Numbers written in ``node``, outside subscripts (``ratios[1]``, ``sizes[:3]`` index, they are
    not thresholds) and outside calls to ``len`` or ``range``."""
    found = []
    if isinstance(node, ast.Subscript):
        return _literal_numbers(node.value)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return [node.value]
    for child in ast.iter_child_nodes(node):
        found += _literal_numbers(child)
    return found


def literal_thresholds(source: str) -> list[str]:
    """Each call of a target or check in ``source`` that writes a number in its arguments."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in TARGET_CALLS
        ):
            if isinstance(node.func.value, ast.Name) and node.func.value.id in {
                "targets",
                "fusion",
                "overhead",
            }:
                numbers = [
                    n
                    for arg in [*node.args, *(k.value for k in node.keywords)]
                    for n in _literal_numbers(arg)
                ]
                if numbers:
                    found.append(f"line {node.lineno}: {ast.unparse(node)[:100]}")
    return found


def test_no_page_writes_a_target_as_a_bare_number():
    """A number written into the call is pinned nowhere: it goes in a named constant, and in the
    table."""
    for path in sorted((ROOT / "book" / "brrr_book" / "pages").glob("*.py")) + [
        ROOT / "book" / "brrr_book" / "capstone.py"
    ]:
        assert literal_thresholds(path.read_text()) == [], path


def test_the_bare_number_finder_sees_one():
    assert literal_thresholds("targets.require('x', 1.5, first, again)")
    assert literal_thresholds("targets.check(python_rate > 3 * ops_rate, 'm')")
    assert not literal_thresholds("targets.require('x', LIMIT, ratios[1], lambda: f(batches[:2]))")
