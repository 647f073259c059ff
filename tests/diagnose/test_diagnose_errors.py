"""Bad input to brrr.diagnose gets one readable paragraph (DiagnoseError), never a profiler
traceback."""

import pytest
import torch

from brrr import traces
from brrr.diagnose import DiagnoseError, diagnose
from brrr.diagnose.__main__ import load_target, main
from brrr.diagnose.core import explain_compile
from brrr.diagnose.profile import require_device_work


def _broken_step(x):
    return x.reshape(3, 5)  # 10 elements: a RuntimeError from the step itself


def test_a_step_that_raises_is_named_with_its_exception_and_line():
    with pytest.raises(DiagnoseError) as caught:
        diagnose(_broken_step, torch.ones(10), threads=1)
    message = str(caught.value)
    assert "raised RuntimeError during warm-up" in message
    assert "test_diagnose_errors.py" in message and "_broken_step" in message
    assert "profiler" in message  # says the error is the step's, not the profiler's


def test_out_of_memory_says_the_model_does_not_fit():
    with pytest.raises(
        DiagnoseError, match="ran out of memory during warm-up.*do not fit on this device"
    ):
        diagnose(lambda: torch.empty(2**50), threads=1)


def test_a_gpu_step_that_returns_nothing_and_runs_no_kernel_is_refused():
    cpu_only = traces.load([{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0, "dur": 5}])
    with pytest.raises(DiagnoseError, match="returned nothing.*dead code"):
        require_device_work(None, cpu_only, on_gpu=True)
    with pytest.raises(DiagnoseError, match="still on the CPU"):
        require_device_work(torch.ones(1), cpu_only, on_gpu=True)
    require_device_work(None, cpu_only, on_gpu=False)  # a CPU step has no kernels to find
    with_kernel = traces.load([{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 5}])
    require_device_work(
        None, with_kernel, on_gpu=True
    )  # an optimizer step returns nothing and is fine


@pytest.mark.parametrize(
    "target, reason",
    [
        ("no_such_module_here:build", "module 'no_such_module_here' cannot be imported"),
        ("brrr.diagnose.examples:no_such_thing", "has no callable named 'no_such_thing'"),
        ("brrr.diagnose.examples", "not of the form module:callable"),
        ("brrr.diagnose.examples:CHAIN_OPS", "has no callable named 'CHAIN_OPS'"),
    ],
)
def test_a_bad_target_says_what_is_wrong(target, reason):
    with pytest.raises(DiagnoseError, match="returns \\(step, args\\)") as caught:
        load_target(target)
    assert reason in str(caught.value)


def test_the_command_prints_the_message_and_exits_2(capsys):
    assert main(["no_such_module_here:build"]) == 2
    captured = capsys.readouterr()
    assert "brrr diagnose: Cannot diagnose 'no_such_module_here:build'" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""


def test_explain_reports_graph_breaks_and_recompiles():
    calls = []

    def step(x):
        y = x.sin()
        print("", end="")  # a graph break: dynamo cannot trace print
        calls.append(1)
        return y.cos() * len(calls)  # a new constant every call: a recompile each time

    found = explain_compile(step, (torch.ones(8),))
    assert found["graph_breaks"] >= 1 and found["break_reasons"]
    assert found["recompiles"] >= 1
    clean = explain_compile(lambda x: x.sin().cos(), (torch.ones(8),))
    assert clean["graph_breaks"] == 0 and clean["recompiles"] == 0 and clean["graphs"] == 1


def test_a_factory_that_raises_is_named_as_the_factory(tmp_path, monkeypatch):
    """It was reported as the step raising."""
    (tmp_path / "broken_factory.py").write_text(
        "def make():\n    raise ValueError('no data here')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DiagnoseError) as caught:
        load_target("broken_factory:make")
    message = str(caught.value)
    assert message.startswith("broken_factory:make() raised ValueError while building the step")
    assert (
        "broken_factory.py:2 in make: no data here. No step ran" in message
        and "step's own" not in message
    )


def test_threads_below_one_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as leaving:
        main(["brrr.diagnose.examples:tiny_mlp", "--threads", "0"])
    assert leaving.value.code == 2
    assert "argument --threads: 0 threads: torch needs at least 1" in capsys.readouterr().err
    with pytest.raises(DiagnoseError, match="threads must be a whole number of at least 1"):
        diagnose(_broken_step, torch.ones(10), threads=0)


def test_help_states_the_step_contract_with_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = capsys.readouterr().out
    assert "returns (step, args)" in shown and "def make_step(batch=32):" in shown
    assert (
        "python -m brrr.diagnose mymodel:make_step --try" in shown
        and "compile,bf16,batch,channels_last,dropout" in shown
    )


@pytest.mark.parametrize(
    "flag, name, expected",
    [
        ("--json", "", "is a folder"),
        ("--figure", "roofline.txt", "matplotlib writes no txt files"),
        ("--figure", "roofline", "writes no suffix-less files"),
    ],
)
def test_bad_output_paths_fail_before_the_run(tmp_path, capsys, monkeypatch, flag, name, expected):
    """Bad --json and --figure paths failed with a traceback after the whole run."""
    from brrr.diagnose import __main__ as command

    monkeypatch.setattr(command, "diagnose", lambda *a, **k: pytest.fail("the run started"))
    path = tmp_path / name if name else tmp_path
    code = main(["brrr.diagnose.examples:tiny_mlp", flag, str(path)])
    assert code == 2 and expected in capsys.readouterr().err


def test_an_output_folder_that_cannot_be_written_fails_before_the_run(tmp_path, capsys):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, where a folder should be")
    code = main(["brrr.diagnose.examples:tiny_mlp", "--json", str(blocked / "out" / "d.json")])
    assert code == 2 and "is not a folder this user can write in" in capsys.readouterr().err


def test_the_first_roof_measurement_says_what_it_does_and_how_long_it_took(capsys, monkeypatch):
    """The first run spent about 35 s measuring roofs without a word."""
    from brrr.diagnose import __main__ as command

    measured = []
    monkeypatch.setattr(command.ceilings, "is_cached", lambda threads=None: False)
    monkeypatch.setattr(command.ceilings, "measure", lambda threads=None: measured.append(threads))
    command.roofs_first(1)
    err = capsys.readouterr().err
    assert measured == [1] and "measuring this machine's roofs first" in err
    assert "about 30-60 s" in err and "roofs measured in" in err
    monkeypatch.setattr(command.ceilings, "is_cached", lambda threads=None: True)
    command.roofs_first(1)
    assert measured == [1] and capsys.readouterr().err == ""


def test_long_op_names_are_shown_whole():
    """_scaled_dot_product_flash_at... forward and backward once read the same."""
    from brrr.ceilings import Ceilings
    from brrr.diagnose import ops, report

    ceilings = Ceilings(
        copy_bandwidth=1e10,
        matmul_peak={"float32": 7e10},
        vector_peak=4e10,
        dispatch_overhead=2e-6,
        threads=1,
    )
    names = [
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
    ]
    rows = ops.op_rows(
        {f"aten::{n}": 0.01 for n in names}, {}, {}, {n: 1 for n in names}, ceilings, "float32"
    )
    shown = report._table(rows, "slowest ops", 0.02)
    assert all(any(line.strip() == name for line in shown) for name in names), shown
