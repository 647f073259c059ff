"""The GPU check's parts on a CPU: a fake clock and a fake runner stand for the node and its
notebooks.

What a part runs, within which limits, what it prints and logs, what it drops first when time is
short, and what it says when time runs out."""

import json
from pathlib import Path

import pytest
from conftest import ROOT

from brrr_book.gpucheck import plan, run
from brrr_book.gpucheck.__main__ import main


class Node:
    """A fake clock and a fake runner: each command 'takes' its seconds on the clock, or is stopped
    at its timeout; ``fail`` names the commands that exit non-zero. Every call is kept, with its
    timeout and env."""

    def __init__(self, seconds: dict[str, float], default: float = 5.0, fail=()):
        self.now, self.seconds, self.default, self.fail, self.calls = (
            0.0,
            seconds,
            default,
            set(fail),
            [],
        )

    def clock(self) -> float:
        return self.now

    def name(self, argv):
        return argv[-1] if argv[-1].endswith(".ipynb") else argv[2]

    def run(self, argv, *, env, timeout_s):
        name = self.name(argv)
        self.calls.append((name, timeout_s, env))
        took = self.seconds.get(name, self.default)
        self.now += min(took, timeout_s)
        if took > timeout_s:
            return run.Outcome(-9, timed_out=True)
        return run.Outcome(1 if name in self.fail else 0)


def small_part(limit=100, stage_limits=(40, 60)) -> plan.Part:
    return plan.Part(
        9,
        "a test part",
        (
            plan.Stage("first", stage_limits[0], notebooks=("a.ipynb", "b.ipynb")),
            plan.Stage("second", stage_limits[1], command=("{python}", "-m", "brrr.ceilings")),
        ),
        limit_s=limit,
    )


@pytest.fixture(autouse=True)
def expected(monkeypatch):
    """A test part's items are expected to take 1 s unless a test says otherwise."""
    monkeypatch.setattr(plan, "DEFAULT_S", 1)
    monkeypatch.setattr(plan, "EXPECTED_S", dict(plan.EXPECTED_S))
    return plan.EXPECTED_S


def run_it(part, tmp_path, node, spent=0.0):
    said = []
    log = run.run_part(
        part,
        tmp_path,
        ROOT,
        python="py",
        spent_s=spent,
        clock=node.clock,
        run=node.run,
        say=said.append,
    )
    return log, said


def test_the_two_parts_cover_every_notebook_and_solution_once_never_run_work_first():
    parts = plan.parts(ROOT)
    assert sorted(parts) == [1, 2]
    run_ = [nb for part in parts.values() for stage in part.stages for nb in stage.notebooks]
    every = sorted(
        p.relative_to(ROOT).as_posix()
        for folder in ("notebooks", "solutions")
        for p in (ROOT / folder).glob("*.ipynb")
    )
    assert sorted(run_) == every and len(set(run_)) == len(run_)
    assert all(part.limit_s <= 270 for part in parts.values())  # two commands of 5 minutes
    script = (ROOT / ".ci" / "gpu-check").read_text()  # whose hard limit follows the same default
    assert f"GPU_CHECK_PART_LIMIT_S:-{plan.PART_LIMIT_S}}}" in script
    for part in parts.values():  # the ceilings first, then by value, highest first
        values = [stage.value for stage in part.stages]
        assert part.stages[0].name.startswith("ceilings") and values == sorted(values, reverse=True)
    never = {n: [s for s in p.stages if s.value == plan.NEVER_RAN] for n, p in parts.items()}
    labs = [Path(nb).name[:2] for stage in never[1] for nb in stage.notebooks]
    assert labs[:3] == ["04", "05", "06"] and sorted(labs) == ["02", "03", "04", "05", "06"]
    overhead = [Path(nb).name[:2] for stage in never[2] for nb in stage.notebooks]
    assert overhead == ["30", "31", "32", "33"] and "GPU-only tests" in [s.name for s in never[2]]
    assert all((ROOT / path).is_file() for path in plan.GPU_TEST_FILES)


def test_every_item_has_its_expected_time_and_the_never_run_work_fits_with_the_set_up():
    for part in plan.parts(ROOT).values():
        items = [(stage, item) for stage in part.stages for item in stage.items()]
        names = [item if stage.notebooks else stage.name for stage, item in items]
        assert set(names) <= set(plan.EXPECTED_S), set(names) - set(plan.EXPECTED_S)
        first = [s.expected_s(i) for s, i in items if s.value >= plan.NEVER_RAN]
        assert plan.SET_UP_S + sum(first) <= part.limit_s, (part.number, sum(first))


def test_the_gpu_tests_stage_collects_here():
    """The stage passed -p no:xdist, which the suite's conftest (an xdist hook) refuses at start-up:
    on the node it would have failed before its first test. Collected here, under the stage's own
    flags."""
    import subprocess
    import sys

    (stage,) = [s for s in plan.parts(ROOT)[2].stages if s.name == "GPU-only tests"]
    argv = [sys.executable if word == "{python}" else word for word in stage.command]
    done = subprocess.run(
        [*argv, "--collect-only", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "test_grading_fixtures.py::test_gpu_timing_rejects_the_unfused_submission" in done.stdout


def test_a_part_runs_every_stage_in_order_says_each_time_and_logs_it(tmp_path):
    node = Node({"a.ipynb": 12.0, "b.ipynb": 3.0, "brrr.ceilings": 7.0})
    log, said = run_it(small_part(), tmp_path, node)
    assert [call[0] for call in node.calls] == ["a.ipynb", "b.ipynb", "brrr.ceilings"]
    assert log["passed"] and log["not_run"] == [] and log["seconds"] == 22.0
    assert json.loads((tmp_path / "part-9.json").read_text()) == log
    items = log["stages"][0]["items"]
    assert [(i["name"], i["seconds"], i["verdict"]) for i in items] == [
        ("a.ipynb", 12.0, "passed"),
        ("b.ipynb", 3.0, "passed"),
    ]
    assert any(line.startswith("a.ipynb: passed in 12.0 s") for line in said)
    env = node.calls[0][2]  # each notebook records into the part's folder, under its own name
    assert (
        env["BRRR_RECORD_REFERENCE"] == str(tmp_path / "record")
        and env["BRRR_RECORD_SOURCE"] == "a.ipynb"
    )
    assert env["BRRR_NOTEBOOK_OUTPUTS"] == str(tmp_path / "outputs") and env["BRRR_STRICT"] == "1"


def test_a_stage_stops_at_its_limit_and_the_next_stage_still_runs(tmp_path):
    node = Node({"a.ipynb": 30.0, "b.ipynb": 30.0, "brrr.ceilings": 5.0})
    log, said = run_it(small_part(limit=200, stage_limits=(40, 60)), tmp_path, node)
    first, second = log["stages"]
    assert node.calls[1][1] == 10.0  # b.ipynb had what was left of the stage's 40 s
    assert [i["verdict"] for i in first["items"]] == ["passed", "timed out"] and first[
        "verdict"
    ] == "timed out"
    assert second["verdict"] == "passed" and not log["passed"]
    assert "part 9: STOPPED at its limit: b.ipynb" in said


def test_a_part_out_of_time_says_what_did_not_run(tmp_path):
    """The set-up's seconds count: 80 of 100 spent, a.ipynb is stopped at 20 s, and nothing else
    starts."""
    node = Node({"a.ipynb": 50.0})
    log, said = run_it(small_part(limit=100), tmp_path, node, spent=80.0)
    assert [call[0] for call in node.calls] == ["a.ipynb"] and node.calls[0][1] == 20.0
    assert log["not_run"] == ["b.ipynb", "python -m brrr.ceilings"]
    assert "part 9: DID NOT RUN (no time left): b.ipynb, python -m brrr.ceilings" in said
    assert not log["passed"]


def test_a_failed_notebook_is_failed_and_the_part_goes_on(tmp_path):
    node = Node({}, fail={"a.ipynb"})
    log, said = run_it(small_part(), tmp_path, node)
    assert [i["verdict"] for i in log["stages"][0]["items"]] == ["failed", "passed"]
    assert "part 9: FAILED: a.ipynb" in said and len(node.calls) == 3


def valued_part() -> plan.Part:
    return plan.Part(
        8,
        "a part of three values",
        (
            plan.Stage("needed", 50, plan.NEEDED, notebooks=("c.ipynb",)),
            plan.Stage("new", 100, plan.NEVER_RAN, notebooks=("n1.ipynb", "n2.ipynb")),
            plan.Stage("passed before", 100, plan.PASSED, notebooks=("p1.ipynb", "p2.ipynb")),
            plan.Stage("fixed", 100, plan.FIXED, notebooks=("f.ipynb",)),
        ),
        limit_s=100,
    )


def test_a_part_short_of_time_drops_its_least_valuable_work_first_and_says_so(tmp_path, expected):
    """100 s, 130 s of work expected: the two passed-before notebooks go (the last first), although
    the fixed one runs after them, and the part still passes; each drop is said and logged."""
    times = {"c.ipynb": 10, "n1.ipynb": 30, "n2.ipynb": 30, "p1.ipynb": 20, "p2.ipynb": 20}
    expected.update({**times, "f.ipynb": 20})
    node = Node({**times, "f.ipynb": 20})
    log, said = run_it(valued_part(), tmp_path, node)
    assert [call[0] for call in node.calls] == ["c.ipynb", "n1.ipynb", "n2.ipynb", "f.ipynb"]
    assert log["dropped"] == ["p1.ipynb", "p2.ipynb"] and log["passed"]
    assert any(line.startswith("p1.ipynb: dropped, the least valuable") for line in said)
    assert "part 8: DROPPED (least valuable first, to fit its time): p1.ipynb, p2.ipynb" in said
    stored = json.loads((tmp_path / "part-8.json").read_text())
    assert stored["dropped"] == log["dropped"] and stored["stages"][2]["verdict"] == "dropped"


def test_time_left_by_a_fast_item_goes_to_the_work_it_would_have_dropped(tmp_path, expected):
    """Dropping is decided item by item: where the new work ran faster than expected, the
    passed-before notebooks run after all."""
    expected.update({"c.ipynb": 10, "n1.ipynb": 30, "n2.ipynb": 30, "p1.ipynb": 20, "p2.ipynb": 20})
    expected["f.ipynb"] = 20
    node = Node({"c.ipynb": 10, "n1.ipynb": 5, "n2.ipynb": 5, "p1.ipynb": 20, "p2.ipynb": 20})
    log, _ = run_it(valued_part(), tmp_path, node)
    assert log["dropped"] == [] and len(node.calls) == 6


def test_of_equal_value_the_last_goes_first():
    left = [plan_item(0, 3, 30), plan_item(1, 1, 20), plan_item(2, 1, 20), plan_item(3, 3, 30)]
    assert [item.position for item in run.to_drop(left, 70)] == [2, 1]
    assert run.to_drop(left, 100) == []


def plan_item(position, value, seconds):
    return run.Planned(position, f"item-{position}", value, seconds)


def test_limits_are_overridden_by_name_and_a_wrong_name_or_pair_is_refused():
    part = plan.with_limits(small_part(), 300, plan.parse_limits(["second=90"]))
    assert part.limit_s == 300 and [s.limit_s for s in part.stages] == [40, 90]
    with pytest.raises(ValueError, match="no stage 'third'.*'first', 'second'"):
        plan.with_limits(small_part(), None, {"third": 5})
    with pytest.raises(ValueError, match="NAME=SECONDS"):
        plan.parse_limits(["second:90"])


def test_the_command_line_refuses_a_bad_limit_before_running_anything(tmp_path, capsys):
    assert main(["run", "--part", "1", "--out", str(tmp_path), "--stage-limit", "labs=10"]) == 2
    assert "no stage 'labs'" in capsys.readouterr().err and not any(tmp_path.iterdir())
    assert main(["parts"]) == 0
    assert "part 2 (limit 270 s)" in capsys.readouterr().out


def test_a_command_past_its_limit_is_stopped_with_what_it_started(tmp_path):
    """The real spawn: a process that starts a child and sleeps is stopped at its timeout, child
    included."""
    import os
    import sys
    import time

    pid_file = tmp_path / "child"
    script = (
        "import subprocess, sys, time; "
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(60)"
    )
    began = time.monotonic()
    outcome = run.spawn([sys.executable, "-c", script], env=dict(os.environ), timeout_s=1.5)
    assert outcome.timed_out and time.monotonic() - began < 20
    child = int(pid_file.read_text())
    assert not alive(child, within_s=5)
    assert run.spawn(
        [sys.executable, "-c", "raise SystemExit(3)"], env=dict(os.environ), timeout_s=30
    ) == run.Outcome(3)


def alive(pid: int, within_s: float) -> bool:
    """Whether ``pid`` is still running (a zombie waiting to be reaped is not) after up to
    ``within_s``."""
    import time
    from pathlib import Path

    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state == "Z":
            return False
        time.sleep(0.05)
    return True


def test_a_part_stopped_from_outside_leaves_its_log_of_what_ran(tmp_path):
    """The hard limit kills the runner itself: its log on disk already holds every item before."""

    class Killed(Exception):
        pass

    node = Node({"a.ipynb": 4.0})
    plain = node.run

    def run_until_b(argv, **kwargs):
        if argv[-1] == "b.ipynb":
            raise Killed
        return plain(argv, **kwargs)

    with pytest.raises(Killed):
        run.run_part(small_part(), tmp_path, ROOT, python="py", clock=node.clock, run=run_until_b)
    left = json.loads((tmp_path / "part-9.json").read_text())
    assert left["finished"] is False and not left["passed"]
    items = [(i["name"], i["verdict"]) for i in left["stages"][0]["items"]]
    assert items == [
        ("a.ipynb", "passed"),
        ("b.ipynb", "stopped"),
    ]  # what ran, and what was running
