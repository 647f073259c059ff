"""Shards and their merge, on the level of rows and feedback files: no notebook runs here.

A folder graded as N shards (``--shard K/N``) and merged must be the gradebook one run would have
written; shards that differ in what grades are refused; a shard that is missing or died, and a
submission its shard never saw, are named; a rerun of one shard changes only its rows; an output
folder belongs to one shard. (The real runs: tests/grading/test_gradebook.py shards a folder through
the command line, and tests/grading/test_gradebook_hostile.py merges the hostile run's rows split
three ways.)"""

import argparse
import collections
import json
from pathlib import Path

import pytest

from brrr.grading import gradebook, merge, shards
from gradebook_helpers import LAB, ROOFLINE, read_rows, shard_outputs

pytestmark = pytest.mark.device_independent  # bookkeeping, no device: the GPU check leaves it to CI

NAMES = ["alice", "bob", "carol/02-fuse-it", "dave", "erin", "frank", "grace", "heidi"]


def graded_run(tmp_path: Path) -> tuple[list[gradebook.Submission], Path, Path]:
    """Submissions as one unsharded run leaves them (all kinds of row), with its grades.csv and
    feedback/."""
    submissions, out = tmp_path / "submissions", tmp_path / "unsharded"
    (out / "feedback").mkdir(parents=True)
    checks = gradebook.lab_checks(LAB)
    outcomes = [
        ("ok", True, True),
        ("failed", True, False),
        ("crashed", False, None),
        ("unreadable", None, None),
    ]
    graded = []
    for number, name in enumerate(NAMES):
        status, first, second = outcomes[number % len(outcomes)]
        results = {
            check: {"passed": passed, "message": f"{check} of {name}: {passed}"}
            for check, passed in zip(checks, (first, second))
            if passed is not None
        }
        graded.append(
            gradebook.Submission(
                name,
                submissions / f"{name}.ipynb",
                lab=LAB,
                status=status,
                results=results,
                seconds=3.25 * number,
                note=f"note for {name}" if number % 3 else "",
            )
        )
    graded.append(
        gradebook.Submission(
            "zed", submissions / "zed.ipynb", lab="unknown", status="refused", note="no"
        )
    )
    roofline = {
        check: {"passed": True, "message": "ok"} for check in gradebook.lab_checks(ROOFLINE)
    }
    graded.append(
        gradebook.Submission(
            "ivan", submissions / "ivan.ipynb", lab=ROOFLINE, status="ok", results=roofline
        )
    )
    graded.sort(key=lambda submission: submission.path)  # the gradebook's order
    for submission in graded:
        text = gradebook.feedback(submission, gradebook.lab_checks(submission.lab))
        (out / "feedback" / f"{submission.slug}.md").write_text(text)
    gradebook.write_csv(graded, out / "grades.csv")
    return graded, submissions, out


@pytest.fixture
def three_shards(tmp_path):
    graded, submissions, out = graded_run(tmp_path)
    return shard_outputs(graded, submissions, out, 3, tmp_path / "shards"), out


def manifest(folder: Path) -> dict:
    return json.loads((folder / shards.MANIFEST).read_text())


def rewrite(folder: Path, **changes) -> None:
    shards.write_manifest(folder, manifest(folder) | changes)


def test_a_share_depends_on_the_name_alone():
    # Pinned: a hash that changed between processes (Python's own) or a share by position would move
    # these.
    assert [shards.shard_of(name, 3) for name in ("alice", "dave", "erin")] == [3, 2, 1]
    sizes = collections.Counter(
        shards.shard_of(f"student-{number:03d}", 4) for number in range(300)
    )
    assert set(sizes) == {1, 2, 3, 4} and max(sizes.values()) < 2 * min(sizes.values()), sizes


@pytest.mark.parametrize("text", ["0/3", "4/3", "2", "a/b", "1/0"])
def test_a_shard_is_k_of_n(text):
    with pytest.raises(argparse.ArgumentTypeError):
        shards.parse(text)
    assert shards.parse("3/3") == shards.Shard(3, 3)


def test_three_shards_merge_into_the_unsharded_gradebook(three_shards, tmp_path):
    folders, unsharded = three_shards
    assert all(manifest(folder)["rows"] for folder in folders)  # each shard holds some of the rows
    final = tmp_path / "final"
    assert merge.main([str(f) for f in reversed(folders)] + ["--out", str(final)]) == 0
    assert (final / "grades.csv").read_bytes() == (unsharded / "grades.csv").read_bytes()
    expected = {path.name: path.read_bytes() for path in (unsharded / "feedback").iterdir()}
    assert {path.name: path.read_bytes() for path in (final / "feedback").iterdir()} == expected
    record = json.loads((final / merge.MERGED).read_text())
    assert record["missing"] == [] and record["work"]["dave"].startswith(
        str(folders[shards.shard_of("dave", 3) - 1])
    )
    header = list(read_rows(final)["alice"])
    assert f"{ROOFLINE}:copy_bandwidth" in header and header[-4:] == [
        "total",
        "max",
        "sandbox",
        "seconds",
    ]  # two labs


@pytest.mark.parametrize(
    "key, value",
    [
        ("code", "0" * 64),
        ("brrr", "9.9"),
        ("options", {"lab": "01-roofline"}),
        ("device_class", "gpu"),
    ],
)
def test_shards_graded_differently_are_refused(three_shards, tmp_path, capsys, key, value):
    folders, _ = three_shards
    rewrite(folders[1], **{key: value})
    assert merge.main([str(f) for f in folders] + ["--out", str(tmp_path / "final")]) == 2
    assert f"different {key}" in capsys.readouterr().err
    assert not (tmp_path / "final").exists()


def test_the_same_shard_twice_other_counts_and_other_folders_are_refused(three_shards, tmp_path):
    folders, unsharded = three_shards
    with pytest.raises(merge.MergeRefused, match="both shard 1/3"):
        merge.merge([folders[0], folders[0], folders[1]], tmp_path / "final")
    rewrite(folders[2], shard=[3, 4])
    with pytest.raises(merge.MergeRefused, match="different numbers of shards"):
        merge.merge(folders, tmp_path / "final")
    with pytest.raises(merge.MergeRefused, match="not a shard's output"):
        merge.merge([unsharded], tmp_path / "final")
    with pytest.raises(merge.MergeRefused, match="outside every shard"):
        merge.merge(folders, folders[0] / "final")


def test_a_missing_shard_and_one_that_died_are_named(three_shards, tmp_path, capsys):
    folders, _ = three_shards
    owned = {
        index: [n for n in NAMES + ["zed", "ivan"] if shards.shard_of(n, 3) == index]
        for index in (1, 2, 3)
    }
    rewrite(folders[0], state="grading", rows=None)  # killed while it graded
    gone = folders[2].rename(tmp_path / "elsewhere")  # never ran
    final = tmp_path / "final"
    assert merge.main([str(f) for f in folders] + ["--out", str(final)]) == 3
    err = capsys.readouterr().err
    assert "shard 1/3" in err and "never finished" in err and all(name in err for name in owned[1])
    assert f"shard 3/3 is missing ({folders[2]} not found)" in err and all(
        name in err for name in owned[3]
    )
    assert f"--out {folders[0]}" in err and "--shard 1/3" in err  # the command that grades it again
    assert not final.exists()  # nothing written...
    assert merge.main([str(f) for f in folders] + ["--out", str(final), "--allow-missing"]) == 3
    assert sorted(read_rows(final)) == sorted(
        owned[2]
    )  # ...unless asked: the rest, and the holes listed
    assert sorted(json.loads((final / merge.MERGED).read_text())["missing"]) == sorted(
        owned[1] + owned[3]
    )
    assert gone.exists()


def test_a_submission_its_shard_never_saw_is_named(three_shards, tmp_path):
    folders, _ = three_shards
    late = next(n for n in (f"late-{i}" for i in range(20)) if shards.shard_of(n, 3) == 2)
    rewrite(
        folders[0], folder_names=manifest(folders[0])["folder_names"] + [late]
    )  # shard 1 listed it later
    result = merge.merge(folders, tmp_path / "final")
    assert result.missing == [late] and "after shard 2/3" in result.holes[0]


def test_a_rerun_of_one_shard_replaces_only_its_rows(three_shards, tmp_path):
    folders, _ = three_shards
    merge.merge(folders, tmp_path / "before")
    rows = manifest(folders[1])["rows"]
    for row in rows:
        row.update(
            status="ok", results={check: {"passed": True} for check in gradebook.lab_checks(LAB)}
        )
    rewrite(folders[1], rows=rows)
    merge.merge(folders, tmp_path / "after")
    before, after = read_rows(tmp_path / "before"), read_rows(tmp_path / "after")
    changed = {name for name in before if before[name] != after[name]}
    assert changed and changed <= {row["name"] for row in rows}
    assert all(after[row["name"]]["status"] == "ok" for row in rows)


def test_an_output_folder_belongs_to_one_shard(tmp_path):
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    for name in NAMES[:4]:
        (submissions / f"{name}.ipynb").parent.mkdir(exist_ok=True)
        (submissions / f"{name}.ipynb").write_text("{}")

    def take(out, shard):
        args = argparse.Namespace(
            submissions=submissions, out=out, shard=shards.parse(shard), lab=LAB, jobs=1
        )
        return shards.Claim.take(args)

    claim = take(tmp_path / "out", "2/3")
    record = manifest(tmp_path / "out")
    assert (
        record["state"] == "grading"
        and record["rows"] is None
        and record["options"] == {"lab": LAB}
    )
    assert (
        record["share"]
        == [n for n in NAMES[:4] if shards.shard_of(n, 3) == 2]
        == [n for n in NAMES[:4] if claim.owns(n)]
    )
    take(tmp_path / "out", "2/3")  # a rerun of the same shard
    with pytest.raises(shards.ShardError, match="holds shard 2/3, not 1/3"):
        take(tmp_path / "out", "1/3")
    (tmp_path / "unsharded").mkdir()
    (tmp_path / "unsharded" / "grades.csv").write_text("submission\n")
    with pytest.raises(shards.ShardError, match="graded without --shard"):
        take(tmp_path / "unsharded", "1/3")
    assert not (tmp_path / "unsharded" / shards.MANIFEST).exists()


def test_the_merge_writes_the_columns_the_shards_graded_not_this_machines(three_shards, tmp_path):
    """Shards graded on GPU nodes, merged on a CPU login node: their checks are the columns."""
    folders, _ = three_shards
    gpu_checks = manifest(folders[0])["checks"] | {LAB: ["correct", "bandwidth", "speedup"]}
    for folder in folders:
        rewrite(folder, checks=gpu_checks, device_class="gpu")
    merge.merge(folders, tmp_path / "final")
    row = read_rows(tmp_path / "final")["alice"]
    assert [c for c in row if c.startswith(LAB)] == [
        f"{LAB}:{c}" for c in ("correct", "bandwidth", "speedup")
    ]
    assert row["max"] == "3"
