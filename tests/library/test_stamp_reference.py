import json
import re

import pytest

from brrr import reference
from brrr.stamp import environment, stamp


def test_stamp_names_device_versions_and_date():
    env = environment()
    text = stamp()
    for key in ("device", "torch", "triton", "date"):
        assert env[key] in text
    assert re.search(r"\d{4}-\d{2}-\d{2}", text)


def test_record_writes_nothing_unless_recording(tmp_path, monkeypatch):
    """The folder checked is the one record() writes to: recording into it once, then not
    recording."""
    monkeypatch.chdir(tmp_path)  # a stray relative write would land here too
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path))
    path = reference.record("fusion", {"speedup": 2.0})
    assert path is not None and path.parent == tmp_path
    before = {entry: entry.read_bytes() for entry in tmp_path.rglob("*")}
    for unset in (None, ""):  # unset, or set to nothing
        if unset is None:
            monkeypatch.delenv(reference.ENV_VAR)
        else:
            monkeypatch.setenv(reference.ENV_VAR, unset)
        assert reference.record("fusion", {"speedup": 3.0}) is None
        assert reference.record_ceilings({"copy_bandwidth": 1.0}) is None
        assert {entry: entry.read_bytes() for entry in tmp_path.rglob("*")} == before


def test_record_merges_sections_with_their_stamp(tmp_path, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path))
    reference.record("fusion", {"speedup": 2.0})
    path = reference.record("overhead", {"ops_per_s": 1e5})
    data = json.loads(path.read_text())
    assert set(data["figures"]) == {"fusion", "overhead"}
    assert data["figures"]["fusion"]["values"] == {"speedup": 2.0}
    assert data["figures"]["fusion"]["env"]["device"] == environment()["device"]
    assert reference.load_all(tmp_path)[path.stem] == data


def test_the_stamp_names_the_commit(monkeypatch):
    from brrr import stamp as stamp_module

    assert environment()["commit"]  # git's HEAD in a checkout, "unknown" in a copy without .git
    stamp_module.commit.cache_clear()
    monkeypatch.setenv(stamp_module.COMMIT_VAR, "0123456789abcdef")
    try:
        assert environment()["commit"] == "0123456789abcdef"
    finally:
        stamp_module.commit.cache_clear()


def test_a_missed_target_is_on_record_as_missed_before_it_raises(tmp_path, monkeypatch):
    from brrr import targets

    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path))
    monkeypatch.setenv(reference.SOURCE_VAR, "notebooks/10-cos-cos.ipynb")
    monkeypatch.setenv(targets.STRICT, "1")
    values = iter([1.3, 1.4])
    with pytest.raises(targets.TargetMissed):
        targets.require("fused speed-up", 1.5, 1.2, lambda: next(values))
    targets.require_at_most("flat ratio", 1.1, 1.05)
    checks = json.loads(reference.reference_path(tmp_path).read_text())["checks"]
    missed = checks["target: fused speed-up (notebooks/10-cos-cos.ipynb)"]
    assert (
        missed["verdict"] == "NOT met"
        and missed["attempts"] == [1.2, 1.3, 1.4]
        and missed["value"] == 1.4
    )
    assert missed["bound"] == {"at_least": 1.5} and missed["env"]["commit"]
    assert checks["target: flat ratio (notebooks/10-cos-cos.ipynb)"]["verdict"] == "met"
