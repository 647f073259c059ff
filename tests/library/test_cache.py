from brrr import cache


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("BRRR_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("BRRR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "brrr"
    assert cache.cache_dir().is_dir()


def test_slug_is_file_name_safe():
    assert cache.slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert cache.slug("Intel(R) Xeon(R) Processor") == "intel-r-xeon-r-processor"
    assert cache.slug("///") == "unknown"


def test_json_round_trip_and_bad_files(tmp_path):
    path = tmp_path / "sub" / "x.json"
    cache.write_json(path, {"a": 1})
    assert cache.read_json(path) == {"a": 1}
    assert not list(path.parent.glob("*.partial"))
    path.write_text("{not json")
    assert cache.read_json(path) is None
    path.write_text("[1, 2]")
    assert cache.read_json(path) is None
    assert cache.read_json(tmp_path / "missing.json") is None
