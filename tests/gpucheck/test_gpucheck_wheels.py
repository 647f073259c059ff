"""Wheels only for what the GPU node lacks, and what a GPU call sends, counted.

No network: pip's resolution is a small report written here; the wheelhouse's size is counted on a
scratch checkout."""

import json
import subprocess
import tomllib

import pytest
from conftest import ROOT

from brrr_book.gpucheck import wheels
from brrr_book.gpucheck.__main__ import main

REPORT = {  # pip install --dry-run --report: names as their projects spell them
    "install": [
        {"metadata": {"name": "numpy", "version": "2.4.6"}},
        {"metadata": {"name": "Jupyter_Core", "version": "5.9.1"}},
        {"metadata": {"name": "nbval", "version": "0.11.0"}},
        {"metadata": {"name": "PyYAML", "version": "6.0.3"}},
    ]
}


def test_the_node_list_names_the_node_stacks_torch_and_triton():
    node = wheels.read_list((ROOT / wheels.NODE_LIST).read_text())
    stack = tomllib.loads((ROOT / ".ci" / "stacks.toml").read_text())["stacks"]["gpu-node"]
    assert (node["torch"], node["triton"]) == (stack["torch"], stack["triton"])
    assert "nbval" not in node and "ipykernel" not in node  # what the H200 lacked, 2026-11-28
    assert wheels.REFRESH in (ROOT / wheels.NODE_LIST).read_text()  # the one-line refresh, said


def test_the_wheelhouse_carries_only_what_the_node_list_lacks(tmp_path, capsys):
    (tmp_path / "report.json").write_text(json.dumps(REPORT))
    node_list = tmp_path / "node.txt"
    node_list.write_text("# pip list --format=freeze\nnumpy==2.5.2\npyyaml\ntorch==2.11.0\n")
    house = tmp_path / "wheelhouse"
    argv = ["wheels", "split", str(tmp_path / "report.json"), "--wheelhouse", str(house)]
    assert main([*argv, "--node-list", str(node_list)]) == 0
    assert (house / wheels.CARRIED).read_text() == "jupyter-core==5.9.1\nnbval==0.11.0\n"
    assert (house / wheels.PROVIDED).read_text() == "numpy==2.4.6\npyyaml==6.0.3\n"
    assert "4 packages resolved; the node has 2" in capsys.readouterr().out


def test_on_the_node_only_what_it_lacks_goes_in_and_a_list_gone_stale_stops_it(tmp_path):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    (house / wheels.CARRIED).write_text("jupyter-core==5.9.1\nnbval==0.11.0\n")
    (house / wheels.PROVIDED).write_text("numpy==2.4.6\npyyaml==6.0.3\n")
    have = {"numpy": "2.5.2", "pyyaml": "6.0.3", "nbval": "0.11.0"}  # nbval came with the image
    install, missing, differ = wheels.to_install(house, have)
    assert install == ["jupyter-core==5.9.1"] and missing == []
    assert differ == ["numpy 2.5.2 (resolved 2.4.6)"]
    install, missing, _ = wheels.to_install(house, {"pyyaml": "6.0.3"})
    assert install == ["jupyter-core==5.9.1", "nbval==0.11.0"] and missing == ["numpy"]


def test_the_node_query_prints_what_to_install_and_refuses_a_stale_list(tmp_path, capsys):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    (house / wheels.CARRIED).write_text("not-on-any-node==1.0\npytest==9.2.0\n")
    (house / wheels.PROVIDED).write_text("pluggy==1.7.0\n")  # pytest's: here too
    assert main(["wheels", "node", "--wheelhouse", str(house)]) == 0
    assert capsys.readouterr().out.split() == ["not-on-any-node==1.0"]
    (house / wheels.PROVIDED).write_text("not-on-this-machine==1.0\n")
    assert main(["wheels", "node", "--wheelhouse", str(house)]) == 3
    said = capsys.readouterr().err
    assert "the node lacks not-on-this-machine" in said and wheels.REFRESH in said


def git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.mark.parametrize("with_git", [True, False], ids=["checkout", "copy without .git"])
def test_the_size_counts_the_files_a_call_sends_and_the_wheelhouse(tmp_path, with_git, capsys):
    root = tmp_path / "tree"
    (root / "wheelhouse").mkdir(parents=True)
    (root / "tracked.py").write_bytes(b"x" * 1000)
    (root / "new.md").write_bytes(b"y" * 500)  # untracked, not ignored: it travels
    (root / "wheelhouse" / "a-1.0-py3-none-any.whl").write_bytes(b"w" * 2000)
    ignore = "wheelhouse/\n.venv-gpu/\n"
    (root / ".gitignore").write_text(ignore)
    if with_git:
        (root / ".venv-gpu").mkdir()
        (root / ".venv-gpu" / "big").write_bytes(b"v" * 10_000)  # ignored: stays behind
        git(root, "init", "-q")
        git(root, "add", "tracked.py", ".gitignore")
    sizes = wheels.sent(root, root / "wheelhouse")
    tree = 1500 + len(ignore)  # the wheelhouse counted once, as the wheels
    assert sizes == {"tree": tree, "wheels": 2000, "total": tree + 2000}
    line = wheels.size_line(sizes, 1)
    assert "(1 wheels)" in line and "within the 40 MiB aimed at" in line


def test_the_size_command_fails_a_tree_and_wheelhouse_over_the_aim(monkeypatch, capsys):
    monkeypatch.setattr(wheels, "AIM_BYTES", 1000)
    assert main(["size"]) == 1 and "OVER the 0 MiB" in capsys.readouterr().out


def test_the_wheelhouse_downloads_only_the_carried_list_without_its_dependencies():
    recipe = (ROOT / "Makefile").read_text().split("\nwheelhouse:", 1)[1].split("\n\n", 1)[0]
    assert "wheels split" in recipe and "--dry-run" in recipe
    download = recipe.split("pip download", 1)[1]
    assert "--no-deps" in download and "wheelhouse/requirements-node.txt" in download
    assert recipe.rstrip().endswith("-m brrr_book.gpucheck size")
