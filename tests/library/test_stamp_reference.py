import json
import re

from brrr import reference
from brrr.stamp import environment, stamp, stamped


def test_stamp_names_device_versions_and_date():
    env = environment()
    text = stamp()
    for key in ("device", "torch", "triton", "date"):
        assert env[key] in text
    assert re.search(r"\d{4}-\d{2}-\d{2}", text)
    assert stamped("42 GB/s").startswith("42 GB/s\n  [measured on ")


def test_record_writes_nothing_unless_recording(tmp_path, monkeypatch):
    """The folder checked is the one record() writes to: recording into it once, then not recording."""
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
