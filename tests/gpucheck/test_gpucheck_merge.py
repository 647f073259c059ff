"""The merge folds the parts' folders into the committed record; the record says what passed and
what not."""

import json
import shutil

import pytest
from conftest import ROOT

from brrr import beside, reference
from brrr_book import claims
from brrr_book.gpucheck import merge
from brrr_book.gpucheck.__main__ import main

GPU = "nvidia-h100-80gb-hbm3"
ENV = {
    "device": "NVIDIA H100 80GB HBM3",
    "date": "2026-12-01",
    "torch": "2.11",
    "triton": "3.6",
    "commit": "abc123",
}


def part_folder(tmp_path, number, record=None, notebooks=(), outputs=()):
    folder = tmp_path / f"part-{number}"
    (folder / "record").mkdir(parents=True)
    if record is not None:
        (folder / "record" / f"{GPU}.json").write_text(json.dumps({"schema": 2, **record}))
    items = [
        {"name": name, "seconds": seconds, "verdict": verdict}
        for name, seconds, verdict in notebooks
    ]
    log = {
        "part": number,
        "limit_s": 540,
        "seconds": 100.0,
        "passed": True,
        "not_run": [],
        "stages": [{"name": "s", "items": items}],
    }
    (folder / f"part-{number}.json").write_text(json.dumps(log))
    for stem in outputs:
        (folder / "outputs" / stem).mkdir(parents=True)
        (folder / "outputs" / stem / "outputs.json").write_text('{"cells": []}')
        (folder / "outputs" / stem / "cell-03-1.png").write_bytes(b"png")
    return folder


def committed_copy(tmp_path):
    into = tmp_path / "reference"
    into.mkdir()
    shutil.copy(ROOT / "brrr" / "data" / "reference" / f"{GPU}.json", into)
    return into


def test_the_parts_fold_over_the_first_run_record_which_stays_readable(tmp_path):
    into = committed_copy(tmp_path)
    first_run = json.loads((into / f"{GPU}.json").read_text())
    one = part_folder(
        tmp_path,
        1,
        {
            "ceilings": {"copy_bandwidth": 3.0e12, "env": ENV},
            "figures": {"lab-05-tile-it": {"env": ENV, "values": {"yours": [1.0]}}},
            "checks": {
                "grader: 05-tile-it/peak_4096": {
                    "verdict": "failed",
                    "detail": "83% of cuBLAS",
                    "env": ENV,
                }
            },
        },
        notebooks=[("solutions/05-tile-it.ipynb", 41.5, "failed")],
        outputs=["05-tile-it"],
    )
    two = part_folder(
        tmp_path,
        2,
        {
            "checks": {
                "target: copy at least 0.9x": {
                    "verdict": "met",
                    "value": 0.95,
                    "bound": {"at_least": 0.9},
                    "attempts": [0.95],
                    "env": ENV,
                }
            }
        },
        notebooks=[("notebooks/10-cos-cos.ipynb", 12.0, "passed")],
    )
    path = merge.merge([one, two], into)
    data = json.loads(path.read_text())
    assert data["schema"] == 2 and data["ceilings"]["copy_bandwidth"] == 3.0e12
    assert (
        data["figures"]["capstone"] == first_run["figures"]["capstone"]
    )  # not measured again: kept
    assert (
        data["checks"]["grader: 05-tile-it/peak_4096"]["verdict"] == "failed"
    )  # a failure is on record
    assert data["notebooks"]["solutions/05-tile-it.ipynb"] == {
        "seconds": 41.5,
        "verdict": "failed",
        "part": 1,
        "outputs": f"outputs/{GPU}/05-tile-it",
    }
    assert data["notebooks"]["notebooks/10-cos-cos.ipynb"]["outputs"] is None
    assert (into / "outputs" / GPU / "05-tile-it" / "cell-03-1.png").read_bytes() == b"png"
    assert sorted(data["parts"]) == ["1", "2"] and data["stamp"]["commit"] == "abc123"
    assert (
        "abc123" in data["stamp"]["commits"]
    )  # and the first run's entries, which named no commit
    # the book's readers of the record still work on the merged file
    assert beside.recorded("capstone", into) and claims.reference_summary(into).startswith(
        f"{GPU}.json: "
    )
    assert "checks: 1 failed, 1 met" in merge.summary(data)


def test_a_part_without_ceilings_keeps_the_ones_on_record(tmp_path):
    into = tmp_path / "reference"
    merge.merge([part_folder(tmp_path, 1, {"ceilings": {"copy_bandwidth": 1.0, "env": ENV}})], into)
    merge.merge([part_folder(tmp_path, 3, {"figures": {"x": {"env": ENV, "values": {}}}})], into)
    assert json.loads((into / f"{GPU}.json").read_text())["ceilings"]["copy_bandwidth"] == 1.0


def test_a_folder_that_is_no_part_is_refused_and_nothing_is_written(tmp_path, capsys):
    into = committed_copy(tmp_path)
    before = (into / f"{GPU}.json").read_bytes()
    good = part_folder(tmp_path, 1, {"figures": {}})
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "empty", tmp_path / "missing"):
        assert main(["merge", str(good), str(bad), "--into", str(into)]) == 2
        assert "nothing was written" in capsys.readouterr().err
    assert (into / f"{GPU}.json").read_bytes() == before
    other = tmp_path / "other"
    (other / "record").mkdir(parents=True)
    (other / "record" / "tesla-t4.json").write_text("{}")
    with pytest.raises(merge.MergeError, match="one GPU"):
        merge.merge([good, other], into)


def test_the_suite_records_nowhere_and_never_into_the_committed_folder(monkeypatch):
    """The first GPU run's tests overwrote its real ceilings: the suite starts with recording off,
    and recording into the committed folder is refused whoever asks."""
    assert reference.recording_dir() is None
    monkeypatch.setenv(reference.ENV_VAR, str(reference.committed()))
    with pytest.raises(reference.RecordingIntoCommitted, match="merge"):
        reference.record_ceilings({"copy_bandwidth": 1.0})


def test_a_lab_page_says_what_the_solution_reached_there_and_the_graders_verdicts(tmp_path):
    from brrr.labs import recorded

    env = {**ENV, "device": "NVIDIA H100 80GB HBM3", "mode": "GPU", "device_type": "cuda"}
    figure = {
        "sizes": [1024, 4096, 8192],
        "yours": [1.0, 9.0, 9.5],
        "torch": [2.0, 10.0, 10.0],
        "dtype": "bfloat16",
    }
    grader = {"kind": "grader", "env": env, "attempts": [0.83, 0.85]}
    record = {
        "schema": 2,
        "stamp": env,
        "figures": {"lab-05-tile-it": {"env": env, "values": figure}},
        "checks": {
            "grader: 05-tile-it/correct": {
                **grader,
                "name": "05-tile-it/correct",
                "verdict": "passed",
                "value": None,
            },
            "grader: 05-tile-it/peak_8192": {
                **grader,
                "name": "05-tile-it/peak_8192",
                "verdict": "failed",
                "value": 0.85,
                "bound": {"at_least": 0.9},
            },
        },
    }
    (tmp_path / f"{GPU}.json").write_text(json.dumps(record))
    said = " ".join(recorded.sentence("05-tile-it", tmp_path).split())
    assert "4,096³ bfloat16 at 90% of torch.mm, 8,192³ bfloat16 at 95% of torch.mm" in said
    assert "correct passed, peak_8192 failed (0.85; at_least 0.9)" in said
    assert "commit abc123" in said
    assert recorded.sentence("06-flash-attention", tmp_path).startswith(
        "No recorded GPU has run this lab yet"
    )


def archive_of(folder):
    """The part's folder as a lease hands it back: one .tgz holding the folder."""
    import tarfile

    path = folder.parent / f"{folder.name}.tgz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    shutil.rmtree(folder)
    return path


def test_archives_fold_in_and_passed_only_leaves_out_what_a_failed_notebook_recorded(tmp_path):
    """The H200's fold: Lab 2 failed there, so its figure, its checks, its outputs and its entry
    stay out; Lab 1 passed and is folded in; a notebook the part dropped keeps the entry an earlier
    run left."""
    good, bad = "solutions/01-roofline.ipynb", "solutions/02-fuse-it.ipynb"
    record = {
        "figures": {
            "lab-01-roofline": {"env": ENV, "values": {}, "source": good},
            "lab-02-fuse-it": {"env": ENV, "values": {}, "source": bad},
        },
        "checks": {
            f"grader: 01-roofline/classes ({good})": {
                "verdict": "passed",
                "source": good,
                "env": ENV,
            },
            f"grader: 02-fuse-it/correct ({bad})": {"verdict": "failed", "source": bad, "env": ENV},
        },
    }
    notebooks = [
        (good, 15.0, "passed"),
        (bad, 19.0, "failed"),
        ("notebooks/23-t.ipynb", 0, "dropped"),
    ]
    into = tmp_path / "reference"
    earlier = {"notebooks/23-t.ipynb": {"seconds": 31.0, "verdict": "passed", "part": 1}}
    into.mkdir()
    (into / f"{GPU}.json").write_text(json.dumps({"schema": 2, "notebooks": earlier}))
    one = part_folder(tmp_path, 1, record, notebooks, outputs=["01-roofline", "02-fuse-it"])
    assert main(["merge", "--passed-only", "--into", str(into), str(archive_of(one))]) == 0
    data = json.loads((into / f"{GPU}.json").read_text())
    assert list(data["figures"]) == ["lab-01-roofline"]
    assert [check["source"] for check in data["checks"].values()] == [good]
    assert sorted(data["notebooks"]) == ["notebooks/23-t.ipynb", good]
    assert data["notebooks"]["notebooks/23-t.ipynb"]["seconds"] == 31.0  # dropped: not measured
    assert sorted(p.name for p in (into / "outputs" / GPU).iterdir()) == ["01-roofline"]
    assert data["parts"]["1"]["stages"][0]["items"][1]["verdict"] == "failed"  # the log says all
    again = part_folder(tmp_path / "again", 1, record, notebooks)
    merge.merge([again], into)  # by default a failure is on record
    assert "lab-02-fuse-it" in json.loads((into / f"{GPU}.json").read_text())["figures"]


def test_an_archive_that_is_no_part_is_refused(tmp_path, capsys):
    junk = tmp_path / "junk.tgz"
    junk.write_bytes(b"not a tar")
    assert main(["merge", "--into", str(tmp_path / "r"), str(junk)]) == 2
    assert "not a readable archive" in capsys.readouterr().err
