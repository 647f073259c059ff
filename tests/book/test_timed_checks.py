"""Every timed check the course makes, and the planted regression that proves it can fail.

A timed check is a verdict that rests on a time or a measured roof: a notebook's
target or measured claim (``targets.require*``, ``targets.check``,
``fusion.require``, ``overhead.require``, ``require_memory_bound``) or a lab
grader's performance check. :data:`TIMED_CHECKS` names each one, the regression of
its kind that it must catch, and the test that plants that regression and sees
the check fail. The first two tests keep the table whole: a new call site in a
notebook with no row here fails the suite, and so does a row whose test is gone.

The planted regressions below time real work, each at the size its check uses,
and run under the suite's load (and under ``.ci/neighbour_load.py``) like the
checks themselves.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import torch

from brrr import targets
from brrr.benchmarks import fusion, overhead, repeat_sweep
from brrr.benchmarks.compiling import Compiled
from brrr.device import ON_GPU, far_above_cache
from conftest import ROOT


@dataclass(frozen=True)
class TimedCheck:
    where: str  # the notebook or module that makes the verdict
    marker: str  # text of the call, found in ``where``
    regression: str  # the planted regression of its kind
    planted: str  # tests/FILE.py::TEST that plants it and sees the check fail
    device: str = "any"  # where the check runs: "any", "cpu" or "gpu"


TIMED_CHECKS = (
    # ---------------------------------------------------------------- notebooks
    TimedCheck(
        "notebooks/00-your-machine.ipynb",
        "require_memory_bound(normalization",
        "a non-matmul roof read 7.4x low under load",
        "test_roofline.py::test_a_roof_read_low_is_measured_again_before_the_memory_bound_claim_fails",
    ),
    TimedCheck(
        "notebooks/10-cos-cos.ipynb",
        'fusion.require("chain_fusion_speedup"',
        "an unfused chain: graph breaks between the ops",
        "test_timed_checks.py::test_an_unfused_chain_misses_the_chain_fusion_target",
        "cpu",
    ),
    TimedCheck(
        "notebooks/10-cos-cos.ipynb",
        "fusion.require(check, fusion.target_value(",
        "a compile that falls back to eager",
        "test_timed_checks.py::test_a_compile_that_falls_back_to_eager_misses_the_cos_cos_target",
    ),
    TimedCheck(
        "notebooks/10-cos-cos.ipynb",
        "targets.require_between(",
        "a cosine roof measured 2x low",
        "test_fusion_benchmark.py::test_a_cosine_roof_measured_2x_low_fails_the_model",
    ),
    TimedCheck(
        "notebooks/11-repeat-sweep.ipynb",
        "repeat_sweep.OVER_ROOF_TOLERANCE",
        "a multiply roof measured 2x low",
        "test_fusion_repeat_sweep.py::test_a_multiply_roof_measured_2x_low_fails_the_roof_check",
    ),
    TimedCheck(
        "notebooks/11-repeat-sweep.ipynb",
        "repeat_sweep.FLAT_SPREAD",
        "an unfused chain: every repeat its own pass over memory",
        "test_timed_checks.py::test_an_unfused_sweep_is_not_flat_while_memory_bound",
    ),
    TimedCheck(
        "notebooks/11-repeat-sweep.ipynb",
        "repeat_sweep.rise_past_knee(",
        "a step that does less work: the multiplies folded into one",
        "test_timed_checks.py::test_a_folded_chain_does_not_rise_past_the_knee",
    ),
    TimedCheck(
        "notebooks/12-triton-kernels.ipynb",
        'fusion.require("pointwise_bandwidth"',
        "an unfused kernel: three eager passes",
        "test_timed_checks.py::test_an_unfused_pointwise_kernel_misses_its_bandwidth_target",
        "gpu",
    ),
    TimedCheck(
        "notebooks/12-triton-kernels.ipynb",
        'fusion.require("softmax_bandwidth"',
        "an unfused softmax: one pass per op",
        "test_timed_checks.py::test_an_unfused_softmax_misses_its_bandwidth_target",
        "gpu",
    ),
    TimedCheck(
        "notebooks/20-matmul-throughput.ipynb",
        "targets.check(check.passed",
        "a slow matmul path, with a measured peak as slow",
        "test_benchmarks_compute.py::test_a_slow_matmul_path_fails_though_the_measured_peak_is_as_slow",
        "gpu",
    ),
    TimedCheck(
        "notebooks/21-flops-vs-runtime.ipynb",
        "targets.check(all(check.passed",
        "contractions that take the runtime their FLOPs ask",
        "test_benchmarks_compute.py::test_table_checks_are_the_ledgers_rule",
    ),
    TimedCheck(
        "notebooks/22-layer-intensity.ipynb",
        "roofline.require_memory_bound(",
        "a non-matmul roof read 7.4x low under load",
        "test_roofline.py::test_a_roof_read_low_is_measured_again_before_the_memory_bound_claim_fails",
    ),
    TimedCheck(
        "notebooks/22-layer-intensity.ipynb",
        "targets.check(linear_regimes",
        "a matmul roof read far low: the linear layer compute-bound at batch 1",
        "test_timed_checks.py::test_a_matmul_roof_read_low_keeps_the_linear_layer_from_crossing",
    ),
    TimedCheck(
        "notebooks/30-python-vs-pytorch.ipynb",
        "targets.check(python_rate > PYTHON_OVER_EAGER_MIN * ops_rate",
        "Python adds that pay a torch op each",
        "test_timed_checks.py::test_python_adds_that_dispatch_a_torch_op_fail_the_overhead_claim",
    ),
    TimedCheck(
        "notebooks/30-python-vs-pytorch.ipynb",
        'targets.require_at_most("adds of 1, 4 and 16',
        "an add that does work per element in Python",
        "test_timed_checks.py::test_an_add_that_loops_over_elements_is_not_flat",
    ),
    TimedCheck(
        "notebooks/31-batch-doubling.ipynb",
        'targets.require_at_most("batch 1 -> 2',
        "a step that does work per sample in Python",
        "test_timed_checks.py::test_a_step_that_loops_over_samples_is_not_overhead_bound",
    ),
    TimedCheck(
        "notebooks/31-batch-doubling.ipynb",
        'targets.require(f"batch {batches[-2]}',
        "a step that does less work: the batch ignored",
        "test_timed_checks.py::test_a_step_that_ignores_the_batch_is_not_compute_bound",
    ),
    TimedCheck(
        "notebooks/33-cuda-graphs.ipynb",
        'overhead.require(overhead.measure_target("cuda")',
        "graph replay replaced by the eager step",
        "test_timed_checks.py::test_an_eager_step_passed_off_as_a_graph_misses_the_cuda_target",
        "gpu",
    ),
    TimedCheck(
        "notebooks/33-cuda-graphs.ipynb",
        "overhead.require(tiny)",
        "a compile that falls back to eager",
        "test_timed_checks.py::test_a_compile_that_falls_back_to_eager_misses_the_tiny_ops_target",
        "cpu",
    ),
    # ---------------------------------------------------------------- the labs' performance checks
    TimedCheck(
        "brrr/labs/roofline/checks.py",
        "def grade_copy_bandwidth",
        "a copy that counts only its reads",
        "test_grading_roofline.py::test_counting_only_the_reads_is_outside_the_tolerance",
    ),
    TimedCheck(
        "brrr/labs/roofline/checks.py",
        "def grade_matmul_peak",
        "a peak in the wrong unit",
        "test_grading_roofline.py::test_a_matmul_peak_in_the_wrong_unit_is_rejected",
    ),
    TimedCheck(
        "brrr/labs/fuse_it/checks.py",
        '"speedup"',
        "an interpreted (unfused, unoptimized) kernel",
        "test_grading_gpu_paths.py::test_the_speedup_check_measures_both_and_fails_an_interpreted_kernel",
        "gpu",
    ),
    TimedCheck(
        "brrr/labs/one_pass/checks.py",
        "_speedup",
        "an interpreted kernel",
        "test_grading_one_pass.py::test_the_speedup_check_times_torch_and_fails_an_interpreted_kernel",
        "gpu",
    ),
    TimedCheck(
        "brrr/labs/make_it_fast/checks.py",
        '"speedup"',
        "a step that caches the loss: less work while timed",
        "test_grading_make_it_fast.py::test_a_step_that_caches_the_loss_passes_one_call_but_fails_while_timed",
    ),
    TimedCheck(
        "brrr/labs/tile_it/checks.py",
        "grouped",
        "the same kernel timed with GROUP_M = 1",
        "test_grading_tile_it.py::test_the_grouped_order_check_times_the_same_kernel_with_group_m_1",
        "gpu",
    ),
    TimedCheck(
        "brrr/labs/flash_attention/checks.py",
        "rounds.time_checked",
        "a time faster than the matmul peak allows",
        "test_grading_flash_attention.py::test_a_time_faster_than_the_matmul_peak_allows_is_flagged_as_impossible",
        "gpu",
    ),
)

# Timed verdicts with no planted regression yet, each with the reason. Page 32's claim (the small
# batch's trace idles a larger share than the large batch's) passes about half the time with the
# large batch fed the small batch's work: one batch-1 trace's idle share varied 0.36-0.80 between
# runs here, against
# 0.03-0.12 at batch 1024, so the claim holds honestly by a wide margin but cannot tell that
# regression from noise until it reads a steadier figure (more steps per trace).
WITHOUT_A_PLANTED_REGRESSION = {
    (
        "notebooks/32-profiler-traces.ipynb",
        'targets.check(idle["small"] > idle["large"]',
    ): "a batch-1 trace's idle share varies too much between runs to tell a planted regression "
    "from noise",
}

# A notebook call that makes a timed verdict.
CALL = re.compile(
    r"(targets\.(require\w*|check)|fusion\.require|overhead\.require|require_memory_bound)\("
)


PAGE_MODULE = re.compile(r"^from brrr_book\.pages import (\w+)", re.MULTILINE)


def _page_source(path: Path) -> tuple[str, str]:
    """A notebook's code cells, and the source of the ``brrr_book.pages`` modules it imports: a
    page's verdicts sit in its hidden cell's module (book/brrr_book/pages/), and count as the
    notebook's."""
    code = "\n".join(
        cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"
    )
    pages = ROOT / "book" / "brrr_book" / "pages"
    modules = "\n".join((pages / f"{name}.py").read_text() for name in PAGE_MODULE.findall(code))
    return code, modules


def _notebook_calls(path: Path) -> int:
    return sum(
        1
        for line in "\n".join(_page_source(path)).splitlines()
        if CALL.search(line) and not line.lstrip().startswith(("#", "from ", "import "))
    )


def test_every_timed_verdict_in_a_notebook_has_a_row():
    listed: dict[str, int] = {}
    for where in [check.where for check in TIMED_CHECKS] + [
        where for where, _ in WITHOUT_A_PLANTED_REGRESSION
    ]:
        listed[where] = listed.get(where, 0) + 1
    found = {
        str(path.relative_to(ROOT)): _notebook_calls(path)
        for path in sorted((ROOT / "notebooks").glob("*.ipynb"))
        + sorted((ROOT / "solutions").glob("*.ipynb"))
    }
    found = {where: count for where, count in found.items() if count}
    rows = {where: count for where, count in listed.items() if where.endswith(".ipynb")}
    assert found == rows, "timed verdicts per notebook (calls found, rows in TIMED_CHECKS) differ"


def test_a_verdict_moved_to_a_page_module_still_counts(tmp_path):
    """A page whose verdicts moved to its book/brrr_book/pages module keeps its rows: the calls are
    counted there."""
    assert _notebook_calls(ROOT / "notebooks" / "10-cos-cos.ipynb") == sum(
        check.where.endswith("10-cos-cos.ipynb") for check in TIMED_CHECKS
    )
    bare = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(bare, tmp_path / "bare.ipynb")
    assert _notebook_calls(tmp_path / "bare.ipynb") == 0


@pytest.mark.parametrize(
    "check", TIMED_CHECKS, ids=lambda check: f"{Path(check.where).stem}:{check.marker[:30]}"
)
def test_each_row_names_its_call_and_a_test_that_plants_its_regression(check):
    path = ROOT / check.where
    source = "\n".join(_page_source(path)) if path.suffix == ".ipynb" else path.read_text()
    squashed = re.sub(r"\s+", "", source)  # the formatter may break a call over lines
    assert re.sub(r"\s+", "", check.marker) in squashed, (
        f"{check.marker!r} is not in {check.where} or its page module"
    )
    module, name = check.planted.split("::")
    (found,) = (ROOT / "tests").rglob(module)  # tests/ mirrors the package: a file is in its folder
    tree = ast.parse(found.read_text())
    tests = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert name in tests, f"{check.planted} does not exist"


def _strict(monkeypatch):
    monkeypatch.setenv(targets.STRICT, "1")


def _eager(fn, *example, threads=None, **options) -> Compiled:
    """What ``compile_for_timing`` returns when the compile falls back to eager: the function
    itself."""
    fn(*example)
    return Compiled(fn, 0.0, fn, threads)


# ---------------------------------------------------------------- notebook 10: fusion targets


@pytest.mark.skipif(not fusion.has_target("chain_fusion_speedup"), reason="a CPU target")
def test_an_unfused_chain_misses_the_chain_fusion_target(monkeypatch):
    """Planted: graph breaks between the chain's ops, so the 'fused' chain compiles to three
    kernels, three passes over memory, like its control; the target (fused at least 1.5x the ops one
    at a time) misses."""
    _strict(monkeypatch)

    def unfused(x):
        y = x * 1.5
        torch._dynamo.graph_break()
        y = y + 0.5
        torch._dynamo.graph_break()
        return y.abs()

    monkeypatch.setattr(fusion, "cheap_chain_eager", unfused)
    n = far_above_cache(4)

    def measured():
        return fusion.measure_target("chain_fusion_speedup", n, 1.0).measured

    with pytest.raises(targets.TargetMissed, match="fused"):
        fusion.require("chain_fusion_speedup", measured(), measured, attempts=1)


def test_a_compile_that_falls_back_to_eager_misses_the_cos_cos_target(monkeypatch):
    """Planted: ``torch.compile`` that hands back eager code; the compiled x.cos().cos() is eager's,
    and its speedup (1.0x, against 1.12x on a CPU; a fraction of the roofline's 2x on a GPU)
    misses."""
    _strict(monkeypatch)
    monkeypatch.setattr(fusion, "compile_for_timing", _eager)
    n = far_above_cache(4)
    copy = fusion.copy_bandwidth(n)

    def measured():
        return fusion.measure_target("cos_cos_compiled_speedup", n, copy).measured

    with pytest.raises(targets.TargetMissed, match="x.cos"):
        fusion.require("cos_cos_compiled_speedup", measured(), measured, attempts=1)


# ---------------------------------------------------------------- notebook 11: the repeat sweep


def test_an_unfused_sweep_is_not_flat_while_memory_bound(monkeypatch):
    """Planted: the chain left to eager, every ``x * 2`` its own pass over memory; 1, 2 and 4
    repeats then cost 2, 3 and 5 passes (with the copy into ``out``), 2.5x apart against the 1.5x
    allowed."""
    _strict(monkeypatch)
    monkeypatch.setattr(
        repeat_sweep,
        "compile_chain",
        lambda repeats, example, *, threads=None: _eager(
            lambda out, x: repeat_sweep.times_two_into(out, x, repeats),
            torch.empty_like(example),
            example,
            threads=threads,
        ),
    )
    n = far_above_cache(4)

    def spread():
        return repeat_sweep.low_spread(
            repeat_sweep.sweep(n, torch.float32, (1, 2, 4), threads=fusion.THREADS)
        )

    with pytest.raises(targets.TargetMissed, match="slowest over fastest"):
        targets.require_at_most(
            "1 to 4 repeats, memory-bound: slowest over fastest",
            repeat_sweep.FLAT_SPREAD,
            spread(),
            attempts=1,
        )


def test_a_folded_chain_does_not_rise_past_the_knee(monkeypatch):
    """Planted: a chain that does less work, its multiplies folded into one (``x * 2**repeats``):
    the last point of the sweep costs what the first does, and the rise the knee predicts is
    missing."""
    _strict(monkeypatch)
    honest = repeat_sweep.compile_chain

    def folded(repeats, example, *, threads=None):
        chain = honest(1, example, threads=threads)
        return Compiled(lambda out, x: chain(out, x), 0.0, chain, threads)

    monkeypatch.setattr(repeat_sweep, "compile_chain", folded)
    counts = (repeat_sweep.REPEATS[0], repeat_sweep.REPEATS[-1])
    points = repeat_sweep.sweep(far_above_cache(4), torch.float32, counts, threads=fusion.THREADS)
    with pytest.raises(targets.TargetMissed, match="should cost far more"):
        targets.check(*repeat_sweep.rise_past_knee(points, knee=16.0))


# ---------------------------------------------------------------- notebook 12 (GPU): bandwidth
# targets


@pytest.mark.skipif(not ON_GPU, reason="a GPU target: notebook 12 enforces it on a GPU only")
def test_an_unfused_pointwise_kernel_misses_its_bandwidth_target(monkeypatch):
    """Planted: the Triton kernel replaced by eager's three passes, timed against the fused byte
    count: about a third of the copy bandwidth, against 85%."""
    from brrr.kernels import pointwise

    _strict(monkeypatch)
    monkeypatch.setattr(
        pointwise,
        "bias_gelu_scale",
        lambda x, bias, scale, out=None: out.copy_(pointwise.bias_gelu_scale_eager(x, bias, scale)),
    )
    n = far_above_cache(4)
    copy = fusion.copy_bandwidth(n)
    result = fusion.measure_target("pointwise_bandwidth", n, copy)
    with pytest.raises(targets.TargetMissed):
        fusion.require("pointwise_bandwidth", result.measured, attempts=1)


@pytest.mark.skipif(not ON_GPU, reason="a GPU target: notebook 12 enforces it on a GPU only")
def test_an_unfused_softmax_misses_its_bandwidth_target(monkeypatch):
    """Planted: the one-pass Triton softmax replaced by eager op by op (max, subtract, exp, sum,
    divide)."""
    from brrr.kernels import softmax

    _strict(monkeypatch)
    monkeypatch.setattr(
        softmax, "softmax", lambda x, out=None: out.copy_(softmax.softmax_unfused(x))
    )
    n = far_above_cache(4)
    copy = fusion.copy_bandwidth(n)
    result = fusion.measure_target("softmax_bandwidth", n, copy)
    with pytest.raises(targets.TargetMissed):
        fusion.require("softmax_bandwidth", result.measured, attempts=1)


# ---------------------------------------------------------------- notebook 22: the linear layer's
# crossing


def test_a_matmul_roof_read_low_keeps_the_linear_layer_from_crossing():
    """Planted: a matmul peak read 1000x low. A linear layer's intensity grows with the batch and
    crosses the ridge (memory-bound at batch 1, compute-bound at a large batch) only against a roof
    that is one."""
    from brrr import counting, roofline

    d = 4096
    intensities = [counting.matmul(batch, d, d).intensity for batch in (1, 4096)]
    honest = roofline.Roof(100e9, 20e9)  # ridge 5 FLOPs/byte
    low = roofline.Roof(100e6, 20e9)  # ridge 0.005: everything compute-bound
    crossing = [[roofline.regime(i, 1.0, roof) for i in intensities] for roof in (honest, low)]
    assert crossing[0] == [roofline.Regime.MEMORY, roofline.Regime.COMPUTE]
    assert crossing[1] == [roofline.Regime.COMPUTE, roofline.Regime.COMPUTE]


# ---------------------------------------------------------------- notebook 30: Python against
# PyTorch


def test_python_adds_that_dispatch_a_torch_op_fail_the_overhead_claim(monkeypatch):
    """Planted: Python's float adds made to pay two eager torch ops each: the overhead the page
    claims (Python adds far outpace eager ops) is gone from the measurement, and the claim fails."""
    _strict(monkeypatch)
    one = torch.ones(1)

    def adds_with_ops(n=overhead.PYTHON_ADDS_PER_CALL):
        total = 0.0
        for _ in range(
            n // 100
        ):  # a hundredth of the adds, each with two ops: the rate counts all of them
            total = total + 1.0
            one + one
            one + one
        return total

    monkeypatch.setattr(overhead, "python_adds", adds_with_ops)
    monkeypatch.setattr(overhead, "PYTHON_ADDS_PER_CALL", overhead.PYTHON_ADDS_PER_CALL // 100)
    python_rate, ops_rate = overhead.python_adds_per_second(), overhead.torch_ops_per_second()
    with pytest.raises(targets.TargetMissed, match="per-op overhead is missing"):
        targets.check(
            python_rate > 3 * ops_rate,
            f"Python adds {python_rate:.3g}/s, eager ops {ops_rate:.3g}/s: the per-op overhead is "
            "missing",
        )


def test_an_add_that_loops_over_elements_is_not_flat(monkeypatch):
    """Planted: an add that does work per element in Python, so 16 elements cost 16 times one: the
    floor of the smallest adds (slowest over fastest at most 1.5x) is gone."""
    _strict(monkeypatch)
    real_add = torch.add

    def add_per_element(a, b, *, out):
        for i in range(a.numel()):
            real_add(a[i], b[i], out=out[i])

    monkeypatch.setattr(overhead.torch, "add", add_per_element)
    spread = max(t.median_s for t in overhead.add_time_by_size([1, 4, 16])) / min(
        t.median_s for t in overhead.add_time_by_size([1])
    )
    with pytest.raises(targets.TargetMissed, match="slowest over fastest"):
        targets.require_at_most("adds of 1, 4 and 16 elements: slowest over fastest", 1.5, spread)


# ---------------------------------------------------------------- notebook 31: batch doubling


def test_a_step_that_loops_over_samples_is_not_overhead_bound(monkeypatch):
    """Planted: a step that runs the model once per sample (a Python loop over the batch): doubling
    batch 1 doubles the step, against the 1.5x an overhead-bound step may take."""
    _strict(monkeypatch)
    real_step = overhead.TrainStep.__call__

    def per_sample(self, x, y):
        for i in range(x.shape[0]):
            loss = real_step(self, x[i : i + 1], y[i : i + 1])
        return loss

    monkeypatch.setattr(overhead.TrainStep, "__call__", per_sample)
    with pytest.raises(targets.TargetMissed, match="overhead-bound"):
        targets.require_at_most(
            "batch 1 -> 2, overhead-bound: step time ratio", 1.5, overhead.doubling_in_turns([1, 2])
        )


def test_a_step_that_ignores_the_batch_is_not_compute_bound(monkeypatch):
    """Planted: a step that does less work, training on the first half of each batch only: the last
    doubling costs what the one before it did, against at least 1.5x for a compute-bound step."""
    _strict(monkeypatch)
    real_batch = overhead.batch
    monkeypatch.setattr(
        overhead, "batch", lambda size, *args, **kwargs: real_batch(2048, *args, **kwargs)
    )
    with pytest.raises(targets.TargetMissed, match="compute-bound"):
        targets.require(
            "batch 2048 -> 4096, compute-bound: step time ratio",
            1.5,
            overhead.doubling_in_turns([2048, 4096]),
        )


# ---------------------------------------------------------------- notebook 33: overhead targets


@pytest.mark.skipif(ON_GPU, reason="the CPU target; the GPU's is the CUDA-graph one")
def test_a_compile_that_falls_back_to_eager_misses_the_tiny_ops_target(monkeypatch):
    """Planted: ``torch.compile`` handing back the eager function: 50 kernels either way, 1.0x
    against 3x."""
    _strict(monkeypatch)
    monkeypatch.setattr(overhead.torch, "compile", lambda fn, **options: fn)
    with pytest.raises(targets.TargetMissed, match="torch.compile vs eager"):
        overhead.require(overhead.measure_target("cpu"), attempts=1)


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs need a GPU")
def test_an_eager_step_passed_off_as_a_graph_misses_the_cuda_target(monkeypatch):
    """Planted: the 'graph replay' that runs the eager step: the host overhead stays, 1.0x against
    3x."""
    _strict(monkeypatch)

    class EagerAsGraph:
        def __init__(self, step, x, y, *, warmup=3):
            self.step, self.x, self.y = step, x, y

        def replay(self):
            self.step(self.x, self.y)

    monkeypatch.setattr(overhead, "capture_train_step", EagerAsGraph)
    with pytest.raises(targets.TargetMissed):
        overhead.require(overhead.measure_target("cuda"), attempts=1)
