import time

import pytest

from brrr import timing
from brrr.timing import Timing, bench, bench_together, summarize, torch_threads


def test_summarize_reports_median_and_deciles_exactly():
    result = summarize([0.5, 0.1, 0.4, 0.2, 0.3], "cpu")
    assert result.median_s == 0.3
    assert result.runs == 5
    assert result.p20_s == pytest.approx(0.18)
    assert result.p80_s == pytest.approx(0.42)
    assert result.device == "cpu"


def test_rate_and_str_carry_units():
    timing = Timing(median_s=0.01, p20_s=0.009, p80_s=0.012, runs=7, device="cpu")
    assert timing.rate(1e9) == pytest.approx(1e11)
    assert str(timing).startswith("10.0 ms median of 7 runs")


def test_bench_warms_up_then_runs_at_least_min_runs():
    calls = []
    result = bench(lambda: calls.append(1), warmup=3, min_runs=5, max_runs=5, budget_s=0)
    assert result.runs == 5
    assert len(calls) == 3 + 5


def test_bench_ranks_work_by_its_cost():
    # A ratio measured in one run, with a wide margin: twice the sleep must time longer.
    short = bench(lambda: time.sleep(0.002), min_runs=5, max_runs=5)
    long = bench(lambda: time.sleep(0.006), min_runs=5, max_runs=5)
    assert long.median_s > 1.5 * short.median_s


class _LoadedClock:
    """A fake perf_counter for work of known cost on a machine with a burst of load: calls
    ``burst`` (by index, warm-ups included) run three times slower, as when another process
    takes the core."""

    def __init__(self, burst: range):
        self.now, self.calls, self.burst = 0.0, 0, burst

    def perf_counter(self) -> float:
        return self.now

    def work(self, seconds: float):
        def run():
            self.now += seconds * (3 if self.calls in self.burst else 1)
            self.calls += 1

        return run


# Each burst covers fewer than half the timed calls of each function in turns (so the medians miss
# it), and most of one function's calls when timed one after the other.
@pytest.mark.parametrize("burst", [range(0, 12), range(4, 12), range(14, 22)])
def test_bench_together_keeps_a_ratio_through_a_burst_of_load(monkeypatch, burst):
    """Twice the work reads 2x in turns, wherever the burst lands; timed one after the other,
    the same burst skews the ratio (the control, which must fail for the test to mean anything)."""
    monkeypatch.setattr(timing, "ON_GPU", False)  # the rounds in turns are the CPU path
    kwargs = dict(warmup=2, min_runs=10, max_runs=10, budget_s=0)
    clock = _LoadedClock(burst)
    monkeypatch.setattr(timing.time, "perf_counter", clock.perf_counter)
    together = bench_together({"one": clock.work(0.01), "two": clock.work(0.02)}, **kwargs)
    assert together["two"].median_s / together["one"].median_s == pytest.approx(2.0)
    assert together["one"].runs == together["two"].runs == 10
    clock = _LoadedClock(burst)
    monkeypatch.setattr(timing.time, "perf_counter", clock.perf_counter)
    one, two = bench(clock.work(0.01), **kwargs), bench(clock.work(0.02), **kwargs)
    assert two.median_s / one.median_s != pytest.approx(2.0, rel=0.2)


def test_bench_reports_the_median_of_every_run_its_budget_bought(monkeypatch):
    """On a clock of known costs: after the warm-up, runs of 0.25, 0.5, 0.125 and 0.25 s spend the 1
    s budget at the fourth; the result is their median, over all four. A bench that returned the
    fastest run, or stopped short, reports 0.125 s or fewer runs."""
    monkeypatch.setattr(timing, "ON_GPU", False)  # the rounds in turns are the CPU path
    costs = iter([0.0, 0.25, 0.5, 0.125, 0.25, 4.0, 4.0])
    clock = _LoadedClock(burst=range(0))
    monkeypatch.setattr(timing.time, "perf_counter", clock.perf_counter)

    def run():
        clock.now += next(costs)

    result = bench(run, warmup=1, min_runs=3, budget_s=1.0)
    assert (result.runs, result.median_s) == (4, 0.25)
    assert (result.p20_s, result.p80_s) == (pytest.approx(0.2), pytest.approx(0.35))


def test_bench_together_runs_in_turns_until_each_has_its_budget(monkeypatch):
    """On a clock of known costs (a real sleep stretches under load, and the count of runs with it):
    the slow function costs a quarter of the budget a call, so the rounds stop after its fourth
    call; the fast one, which costs nothing, gets as many runs."""
    monkeypatch.setattr(timing, "ON_GPU", False)  # the rounds in turns are the CPU path
    order = []
    clock = _LoadedClock(burst=range(0))
    monkeypatch.setattr(timing.time, "perf_counter", clock.perf_counter)
    slow, fast = clock.work(0.25), clock.work(0.0)
    result = bench_together(
        {
            "slow": lambda: (order.append("slow"), slow()),
            "fast": lambda: (order.append("fast"), fast()),
        },
        warmup=1,
        min_runs=3,
        budget_s=1.0,
    )
    # one warm-up round, then rounds of one call each, every other round in reverse order
    assert order == ["slow", "fast"] * 2 + ["fast", "slow", "slow", "fast", "fast", "slow"]
    assert result["slow"].runs == result["fast"].runs == 4
    assert result["slow"].median_s == 0.25 and result["fast"].median_s == 0.0
    result = bench_together({"slow": slow, "fast": fast}, warmup=0, min_runs=6, budget_s=1.0)
    assert result["slow"].runs == 6  # min_runs, past the budget
    with pytest.raises(ValueError):
        bench_together({})


def test_bench_rejects_impossible_run_counts():
    with pytest.raises(ValueError):
        bench(lambda: None, min_runs=3, max_runs=2)


def test_torch_threads_restores_the_setting():
    import torch

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


class HostClockEvent:
    """A stand-in for torch.cuda.Event that reads the host clock, to run bench's GPU loop here."""

    def __init__(self, enable_timing: bool = False):
        self.at = None

    def record(self):
        self.at = time.perf_counter()

    def elapsed_time(self, later) -> float:
        return (later.at - self.at) * 1e3  # milliseconds, as CUDA events report


@pytest.fixture
def gpu_loop_on_host(monkeypatch):
    import torch

    from brrr import timing

    monkeypatch.setattr(timing, "ON_GPU", True)
    monkeypatch.setattr(torch.cuda, "Event", HostClockEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    return timing


def test_gpu_loop_times_every_call_after_the_warmup(gpu_loop_on_host):
    calls = []
    result = bench(
        lambda: calls.append(1), warmup=3, min_runs=5, max_runs=5, budget_s=0, flush_l2=False
    )
    assert result.runs == 5 and len(calls) == 3 + 5


def test_gpu_loop_fills_the_budget_within_max_runs(gpu_loop_on_host):
    calls = []

    def one_ms():
        calls.append(1)
        time.sleep(0.001)

    times = gpu_loop_on_host._gpu_times(one_ms, 2, 3, 1000, 0.05, False)
    assert len(calls) == 2 + len(times) and len(times) > 3
    assert sum(times) >= 0.05 - 2 * max(
        times
    )  # the batch after the first three filled the 50 ms budget
    calls.clear()
    capped = bench(one_ms, warmup=0, min_runs=3, max_runs=7, budget_s=10.0, flush_l2=False)
    assert capped.runs == 7


def test_flush_l2_reads_every_element_and_writes_none():
    import torch

    from brrr.timing import flush_l2

    buffer = (
        torch.arange(100_003, dtype=torch.float32) % 7
    )  # exact in float32: 0+1+...+6 per 7 elements
    buffer[-1] = 1000.0  # the last element counts: a flush that stopped short would miss it
    before = buffer.clone()
    sink = torch.full((), float("nan"))
    assert flush_l2(buffer, sink) is sink
    assert sink.item() == before.double().sum().item()
    assert torch.equal(buffer, before)  # read, not written: no dirty lines left behind


def test_the_default_flush_buffer_is_twice_the_cache_on_the_device(monkeypatch):
    from brrr import timing

    monkeypatch.setattr(timing, "last_level_cache_bytes", lambda: 2**20)
    monkeypatch.setattr(timing, "_flush_buffers", None)
    sink = timing.flush_l2()
    buffer, kept = timing._flush_buffers
    assert kept is sink and sink.item() == 0.0
    assert (
        buffer.numel() * buffer.element_size() == 2 * 2**20
        and buffer.device.type == timing.DEVICE.type
    )


def test_gpu_loop_flushes_before_every_timed_run_outside_its_events(gpu_loop_on_host, monkeypatch):
    flushes = []

    def slow_flush():
        flushes.append(1)
        time.sleep(0.01)  # far longer than the timed call below

    monkeypatch.setattr(gpu_loop_on_host, "flush_l2", slow_flush)
    result = bench(lambda: None, warmup=2, min_runs=5, max_runs=5, budget_s=0)
    assert result.runs == 5 and len(flushes) == 5  # one per timed run, none in the warm-up
    assert result.p80_s < 0.5 * 0.01, result  # the flush's time is not inside the runs' events
    flushes.clear()
    bench(lambda: None, warmup=2, min_runs=5, max_runs=5, budget_s=0, flush_l2=False)
    assert flushes == []


@pytest.mark.skipif(timing.ON_GPU, reason="the CPU clock applies to CPU timings")
def test_rounds_on_the_cpu_clock_leave_out_time_spent_not_running():
    """A run that waits (sleeps, or is preempted by another process) costs wall time, not the
    thread's CPU time; a run that computes costs both. Only with one thread, where the kernel runs
    in the caller."""

    def spin():
        end = time.thread_time() + 0.01
        while time.thread_time() < end:
            pass

    rounds = timing.rounds_in_turns(
        {"waits": lambda: time.sleep(0.01), "works": spin},
        warmup=0,
        min_runs=3,
        max_runs=3,
        threads=1,
        on_cpu_clock=True,
    )
    assert len(rounds["waits"]) == len(rounds["works"]) == 3
    assert max(rounds["waits"]) < 0.002 and min(rounds["works"]) >= 0.01
    by_wall = timing.rounds_in_turns(
        {"waits": lambda: time.sleep(0.01)}, warmup=0, min_runs=3, max_runs=3
    )
    assert min(by_wall["waits"]) >= 0.01
    with pytest.raises(ValueError, match="threads=1"):
        timing.rounds_in_turns({"waits": lambda: None}, threads=2, on_cpu_clock=True)
