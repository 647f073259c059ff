"""The gradebook grades a folder of notebooks, carries on past broken, hanging and crashing ones, and reports."""

import csv
import os
import time
from pathlib import Path

from brrr import gradebook

from lab_fixtures import write_submission

LAB = "02-fuse-it"


def processes_inside(folder: Path) -> list[int]:
    """Processes whose working directory is under ``folder`` (a leftover kernel would be one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")).is_relative_to(folder):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def read_rows(out: Path) -> dict[str, dict[str, str]]:
    with (out / "grades.csv").open() as handle:
        return {row["submission"]: row for row in csv.DictReader(handle)}


def test_a_folder_of_good_wrong_hanging_crashing_and_broken_submissions(tmp_path):
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    for name in ("correct", "unfused", "hanging", "crashing"):
        write_submission(submissions, LAB, name)
    (submissions / "broken.ipynb").write_text("{ this is not a notebook")
    out = tmp_path / "out"

    start = time.monotonic()
    gradebook.grade(submissions, out, cell_timeout_s=8, notebook_timeout_s=180, jobs=2)
    assert time.monotonic() - start < 150

    rows = read_rows(out)
    assert list(rows) == ["broken", "correct", "crashing", "hanging", "unfused"]
    header = list(rows["correct"])
    assert header[:3] == ["submission", "lab", "status"] and header[-2:] == ["total", "max"]
    checks = header[3:-2]
    assert checks == (["correct", "traffic"] if not gradebook.thresholds.device_class() == "gpu"
                      else ["correct", "bandwidth", "speedup"])

    def summary(name):
        row = rows[name]
        return row["status"], [row[c] for c in checks], row["total"], row["max"]

    full = str(len(checks))
    if checks == ["correct", "traffic"]:
        assert summary("correct") == ("ok", ["1", "1"], "2", "2")
        assert summary("unfused") == ("failed", ["1", "0"], "1", "2")
    assert summary("hanging") == ("failed", [""] * len(checks), "0", full)
    assert summary("crashing") == ("crashed", [""] * len(checks), "0", full)
    assert summary("broken") == ("unreadable", [""] * len(checks), "0", full)
    assert all(row["lab"] == LAB for row in rows.values())

    feedback = {path.stem: path.read_text() for path in (out / "feedback").glob("*.md")}
    assert set(feedback) == set(rows)
    if checks == ["correct", "traffic"]:
        assert "## traffic: failed" in feedback["unfused"] and "launched 5 kernels" in feedback["unfused"]
        assert "**2 of 2**" in feedback["correct"]
    assert "8 s allowed per cell" in feedback["hanging"] and "Timeout of 8 seconds" in feedback["hanging"]
    assert "kernel died" in feedback["crashing"]
    assert "not a readable notebook" in feedback["broken"]
    assert processes_inside(out) == []


def test_a_notebook_past_its_time_limit_is_killed_kernel_and_all(tmp_path):
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    write_submission(submissions, LAB, "hanging")
    out = tmp_path / "out"

    start = time.monotonic()
    (graded,) = gradebook.grade(submissions, out, cell_timeout_s=600, notebook_timeout_s=10)
    assert time.monotonic() - start < 60
    assert graded.status == "timeout"
    assert read_rows(out)["hanging"]["status"] == "timeout"
    assert "did not finish within 10 s" in (out / "feedback" / "hanging.md").read_text()
    assert processes_inside(out) == []


def test_the_log_keeps_the_last_record_of_each_check(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"check": "correct", "passed": false}\nnot json\n{"check": "correct", "passed": true}\n')
    assert gradebook.read_log(log) == {"correct": {"check": "correct", "passed": True}}
    assert gradebook.read_log(tmp_path / "missing.jsonl") == {}


def test_the_command_line_grades_a_folder(tmp_path, capsys):
    submissions = tmp_path / "submissions"
    (submissions / "carol").mkdir(parents=True)
    (submissions / "carol" / "02-fuse-it.ipynb").write_text("not a notebook")
    out = tmp_path / "out"
    assert gradebook.main([str(submissions), "--out", str(out), "--lab", LAB]) == 0
    row = read_rows(out)["carol/02-fuse-it"]
    assert row["status"] == "unreadable" and row["lab"] == LAB and row["total"] == "0"
    assert (out / "feedback" / "carol__02-fuse-it.md").exists()
    assert "graded 1 submission(s)" in capsys.readouterr().out
