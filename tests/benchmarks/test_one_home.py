"""One home per target, one retry (issue 46), read from the source.

Each target of a benchmark's ``TARGETS`` table is measured by one function, its module's
``measure_target``: the module's command line reaches it, a book page that enforces the target
measures a miss again with it and times nothing itself, and the tests call it, never a private
function of the module that times. Every loop that measures again is
:func:`brrr.targets.measurements`. Each rule is also run on the back-slide it guards against,
planted in a few lines of the code it replaced.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

BENCHMARKS = ROOT / "brrr" / "benchmarks"
PAGES = ROOT / "book" / "brrr_book" / "pages"
# The calls that time work: brrr.timing's, and the benchmarks' wrappers of them. A page that makes
# one times a target (or a claim) beside the function that owns it.
TIMERS = {
    "bench",
    "bench_together",
    "median_per_round",
    "rounds_in_turns",
    "measure_together",
    "time_together",
    "time_it",
}
# The words a loop that measures again counts with, in its header (`for _ in range(attempts)`,
# `while len(tries) < attempts`).
RETRY_WORDS = ("attempt", "tries", "again", "taken")
THE_RETRY = ROOT / "brrr" / "targets.py"  # the one module that may hold the loop


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def _referenced(node: ast.AST) -> set[str]:
    """Every name ``node`` reads, bare or as an attribute (``fusion.measure`` gives ``measure``)."""
    return {
        found.id if isinstance(found, ast.Name) else found.attr
        for found in ast.walk(node)
        if isinstance(found, (ast.Name, ast.Attribute))
    }


def _reach(functions: dict[str, ast.FunctionDef], start: str) -> set[str]:
    """The names that module function ``start`` reads, through every module function it reads."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in functions:
            todo.extend(_referenced(functions[name]) - seen)
    return seen


def _table(tree: ast.Module) -> ast.Dict | None:
    """The module's ``TARGETS = {...}``, if it has one."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            named, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            named, value = node.target, node.value
        else:
            continue
        if isinstance(named, ast.Name) and named.id == "TARGETS" and isinstance(value, ast.Dict):
            return value
    return None


def _target_modules() -> dict[str, ast.Module]:
    """The benchmark modules with a ``TARGETS`` table, by name."""
    trees = {path.stem: _tree(path) for path in sorted(BENCHMARKS.glob("*.py"))}
    return {name: tree for name, tree in trees.items() if _table(tree) is not None}


def _one_per_key(table: ast.Dict) -> bool:
    """Whether the table holds one ``Target`` per key (a device), its measuring call in it."""
    return all(isinstance(value, ast.Call) for value in table.values)


def _target_names(table: ast.Dict) -> set[str]:
    """Each target's name: the first argument of each ``Target(...)`` in the table."""
    return {
        call.args[0].value
        for value in table.values
        for call in ast.walk(value)
        if isinstance(call, ast.Call) and isinstance(call.args[0], ast.Constant)
    }


def _strings(functions: dict[str, ast.FunctionDef], names: set[str]) -> set[str]:
    return {
        node.value
        for name in names & set(functions)
        for node in ast.walk(functions[name])
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def private_measurers(tree: ast.Module) -> set[str]:
    """The module's private functions that time, or reach ``measure_target``: what a test or a page
    would call to reach a target around it."""
    functions = _functions(tree)
    return {
        name
        for name in functions
        if name.startswith("_") and _reach(functions, name) & (TIMERS | {"measure_target"})
    }


# ---------------------------------------------------------------- the rules, each on one tree


def timing_calls(tree: ast.AST) -> list[str]:
    """Calls of :data:`TIMERS`."""
    return [
        f"line {node.lineno}: {name}()"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (name := getattr(node.func, "id", getattr(node.func, "attr", ""))) in TIMERS
    ]


def measured_around(tree: ast.AST, modules: dict[str, set[str]]) -> list[str]:
    """Reads of a target's measurement around ``measure_target``: ``M.TARGETS[...].measure``, or a
    private measurer of module ``M`` (``modules``: each module's private measurers), by attribute or
    by name in a string (a monkeypatch)."""
    found, privates = [], set().union(*modules.values())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "measure"
            and isinstance(node.value, ast.Subscript)
            and "TARGETS" in _referenced(node.value.value)
        ):
            found.append(f"line {node.lineno}: TARGETS[...].measure")
        if isinstance(node, ast.Attribute) and node.attr in privates:
            found.append(f"line {node.lineno}: {node.attr}")
        if isinstance(node, ast.Constant) and node.value in privates:
            found.append(f"line {node.lineno}: {node.value!r}")
    return found


def agains_around(tree: ast.AST, modules: set[str]) -> list[str]:
    """``M.require(check, first, again)`` calls whose ``again`` does not call
    ``M.measure_target``."""
    found = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "require"
            and getattr(node.func.value, "id", "") in modules
        ):
            continue
        agains = node.args[2:] + [word.value for word in node.keywords if word.arg == "again"]
        for again in agains:
            if "measure_target" not in _referenced(again):
                found.append(f"line {node.lineno}: {node.func.value.id}.require's again")
    return found


def retry_loops(tree: ast.AST) -> list[str]:
    """Loops whose header counts attempts (:data:`RETRY_WORDS`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            header = _referenced(node.iter) | _referenced(node.target)
        elif isinstance(node, ast.While):
            header = _referenced(node.test)
        else:
            continue
        if any(word in name.lower() for name in header for word in RETRY_WORDS):
            found.append(f"line {node.lineno}: a loop over {sorted(header)}")
    return found


# ---------------------------------------------------------------- the tree


def test_each_target_table_has_one_measuring_function_that_its_command_line_reaches():
    modules = _target_modules()
    assert {"fusion", "overhead"} <= set(modules), sorted(modules)
    for name, tree in modules.items():
        functions = _functions(tree)
        assert "measure_target" in functions, f"brrr/benchmarks/{name}.py has no measure_target"
        assert "measure_target" in _reach(functions, "main"), f"{name}.main does not measure it"
        table = _table(tree)
        if _one_per_key(table):  # the table holds each target's call: measure_target makes it
            assert "TARGETS" in _referenced(functions["measure_target"]), name
        else:  # measure_target names each target it measures
            reached = _strings(functions, _reach(functions, "measure_target"))
            missing = _target_names(table) - reached
            assert not missing, f"{name}.measure_target does not measure {sorted(missing)}"


def test_the_pages_time_nothing_and_measure_a_missed_target_again_through_measure_target():
    modules = _target_modules()
    privates = {name: private_measurers(tree) for name, tree in modules.items()}
    enforcing = {name: [] for name in modules}
    for path in sorted(PAGES.glob("*.py")):
        tree = _tree(path)
        wrong = timing_calls(tree) + measured_around(tree, privates)
        wrong += agains_around(tree, set(modules))
        assert not wrong, f"{path.name}: {wrong}"
        for name in modules:
            if f"{name}.require(" in path.read_text():
                enforcing[name].append(path)
                assert "measure_target" in _referenced(tree), f"{path.name} enforces {name}'s"
    assert all(enforcing.values()), enforcing  # each table is enforced by some page


def test_the_tests_measure_a_target_through_measure_target_alone():
    modules = _target_modules()
    privates = {name: private_measurers(tree) for name, tree in modules.items()}
    assert privates["fusion"], "no private measurer found: the rule would check nothing"
    called = set()
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path == Path(__file__):
            continue
        tree = _tree(path)
        assert not measured_around(tree, privates), (
            f"{path.name}: {measured_around(tree, privates)}"
        )
        called |= {
            node.value.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr == "measure_target"
            and isinstance(node.value, ast.Name)
        }
    assert set(modules) <= called, f"no test calls measure_target of {set(modules) - called}"


def test_no_module_but_brrr_targets_loops_to_measure_again():
    found = {
        str(path.relative_to(ROOT)): retry_loops(_tree(path))
        for folder in (ROOT / "brrr", ROOT / "book" / "brrr_book")
        for path in sorted(folder.rglob("*.py"))
        if path != THE_RETRY
    }
    assert not {path: loops for path, loops in found.items() if loops}
    assert retry_loops(_tree(THE_RETRY)), "brrr.targets.measurements holds the loop"


# ---------------------------------------------------------------- each rule on its back-slide

# Planted: the code this issue replaced, a few lines of each.
BACK_SLIDES = {
    "the benchmark's own retry (fusion.run)": (
        retry_loops,
        """
for _ in range(attempts):
    tries.append(_timed_target(check, n, copy, threads))
    if tries[-1].passed:
        break
""",
    ),
    "the grader's own retry (fairness.repeat_fairly)": (
        retry_loops,
        "while len(history) < attempts:\n    history.append(measure(watch()))\n",
    ),
    "the diagnosis's own retry (diagnose.core._measured_until_consistent)": (
        retry_loops,
        "while not agrees(*readings_compared(best)) and taken < MEASUREMENTS:\n    taken += 1\n",
    ),
    "a page timing a target's pair (cos_cos.speedup_again)": (
        timing_calls,
        """
def speedup_again(check, fused_call):
    eager, fused = fusion.measure_together([("eager", eager_call, 2), ("fused", fused_call, 1)])
    return fusion.speedup(eager, fused)
""",
    ),
    "a page's again that is not measure_target": (
        lambda tree: agains_around(tree, {"fusion"}),
        'fusion.require("chain_fusion_speedup", first, lambda: fusion.speedup(*chain_again()))\n',
    ),
    "a target's table read around measure_target": (
        lambda tree: measured_around(tree, {}),
        'overhead.require(overhead.TARGETS["cuda"].measure())\n',
    ),
    "a test timing through a private function": (
        lambda tree: measured_around(tree, {"fusion": {"_timed_target"}}),
        'fusion._timed_target("pointwise_bandwidth", n, copy, fusion.THREADS)\n',
    ),
    "a test patching a private function": (
        lambda tree: measured_around(tree, {"fusion": {"_timed_target"}}),
        'monkeypatch.setattr(fusion, "_timed_target", fake)\n',
    ),
}


@pytest.mark.parametrize("slide", sorted(BACK_SLIDES))
def test_each_rule_finds_the_back_slide_it_guards_against(slide):
    rule, source = BACK_SLIDES[slide]
    assert rule(ast.parse(source)), slide


def test_the_rules_pass_what_replaced_the_back_slides():
    assert not retry_loops(ast.parse("values = targets.measurements(first, again, meets)\n"))
    fixed = "fusion.require(check, first, lambda: fusion.measure_target(check, n, c).measured)\n"
    assert not agains_around(ast.parse(fixed), {"fusion"})
    assert not measured_around(ast.parse('overhead.measure_target("cuda")\n'), {"fusion": {"_x"}})
