"""The grader's clock for the timed kernel checks (brrr.checks.rounds), against the public incident
classes, with fake devices on the CPU: work left on a side stream, an output right on the first call
only, a buffer that still holds an earlier result, inputs left in the cache, a time below the
measured roof."""

import random
import threading
import time

import pytest
import torch

from brrr.checks import rounds

SIDE_S = 0.02  # how long the fake side stream works after the call returned


class SideStreamDevice(rounds.Clock):
    """A fake device whose kernels return at once and finish on a side stream (a thread): its events
    see only the calling stream (the host), its synchronize waits for every stream, as torch.cuda's
    does. It logs what happens around each call."""

    def __init__(self):
        super().__init__(on_gpu=False)
        self.streams: list[threading.Thread] = []
        self.log: list[str] = []

    def launch(self, work) -> None:
        thread = threading.Thread(target=work)
        thread.start()
        self.streams.append(thread)

    def synchronize(self) -> None:
        self.log.append("sync")
        while self.streams:
            self.streams.pop().join()

    def flush(self, nbytes: int) -> None:
        self.log.append(f"flush {nbytes}")


def side_stream_call(device, out, expected):
    def work():
        time.sleep(SIDE_S)
        out.copy_(expected)

    return lambda: device.launch(work)


def one_set_plan(sets=2):
    return rounds.plan(4096, sets=sets, l2=1024)


def test_side_stream_work_is_timed_and_checked_after_the_whole_device_is_idle():
    """Planted: Clock.span without its synchronize times about 0 s (the event brackets only the
    launch); time_rounds without the synchronize after the call finds the outputs still NaN."""
    device = SideStreamDevice()
    expected = [torch.randn(64) for _ in range(2)]
    outs = [torch.empty(64) for _ in range(2)]
    calls = [side_stream_call(device, out, want) for out, want in zip(outs, expected)]
    times = rounds.time_rounds(
        {"yours": rounds.Timed(calls, outs, expected)},
        one_set_plan(),
        budget_s=0,
        warmup=0,
        min_runs=3,
        device=device,
    )
    assert times["yours"].median_s >= SIDE_S and times["yours"].runs == 3


def test_an_output_right_on_the_first_call_only_fails_on_the_second():
    expected = [torch.randn(64) for _ in range(2)]
    outs = [torch.empty(64) for _ in range(2)]
    done = [0]

    def call(index):
        def run():
            done[0] += 1
            outs[index].copy_(expected[index] if done[0] == 1 else torch.zeros(64))

        return run

    timed = {"yours": rounds.Timed([call(0), call(1)], outs, expected)}
    with pytest.raises(rounds.WrongWhileTimed) as failure:
        rounds.time_rounds(
            timed,
            one_set_plan(),
            budget_s=0,
            warmup=1,
            min_runs=3,
            device=rounds.Clock(on_gpu=False),
        )
    assert (failure.value.call, failure.value.input_set) == (1, 1)
    message = str(rounds.wrong_while_timed("f", failure.value, timed, "out", seed=7))
    assert (
        "did not compute the right result while timed" in message
        and "timed call 2 (input set 2" in message
    )


def test_a_buffer_left_holding_an_earlier_result_is_poisoned_before_each_call():
    """Each input set's buffer is written right once, then left alone: without the NaN fill before
    each call every later check would read the earlier, right result. Planted: the fill removed,
    this passes."""
    expected = [torch.randn(64) for _ in range(2)]
    outs = [torch.empty(64) for _ in range(2)]
    written = [False, False]

    def call(index):
        def run():
            if not written[index]:
                outs[index].copy_(expected[index])
                written[index] = True

        return run

    timed = {"yours": rounds.Timed([call(0), call(1)], outs, expected)}
    with pytest.raises(rounds.WrongWhileTimed) as failure:
        rounds.time_rounds(
            timed,
            one_set_plan(),
            budget_s=0,
            warmup=0,
            min_runs=4,
            device=rounds.Clock(on_gpu=False),
        )
    assert failure.value.call == 2


def test_each_call_gets_the_next_inputs_a_flush_and_a_device_sync_in_rounds_with_the_baseline():
    device = SideStreamDevice()
    seen: list[tuple[str, int]] = []

    def call(name, index):
        return lambda: seen.append((name, index))

    timed = {
        name: rounds.Timed([call(name, 0), call(name, 1), call(name, 2)])
        for name in ("yours", "baseline")
    }
    the_plan = rounds.plan(10_000, sets=3, l2=4096)
    rounds.time_rounds(timed, the_plan, budget_s=0, warmup=1, min_runs=4, device=device)
    assert seen == [
        (name, k % 3) for k in range(5) for name in ("yours", "baseline")
    ]  # interleaved, rotated
    calls = len(seen)
    flushes = [entry for entry in device.log if entry.startswith("flush")]
    assert flushes == [f"flush {2 * 4096}"] * calls  # an L2 flush of twice the L2 before every call
    # before each call, after its flush: the device idle; and after it, before its check (span)
    assert device.log.count("sync") >= 2 * calls


def test_the_plan_flushes_twice_the_l2_and_rotates_at_least_two_sets(monkeypatch):
    small = rounds.plan(1_000, l2=50 * 2**20)
    assert (
        small.sets == 2 and small.flush_bytes == 100 * 2**20 and "under twice" in small.describe()
    )
    large = rounds.plan(3 * 2**30, l2=50 * 2**20)
    assert large.rotated_bytes == 6 * 2**30 and "over twice the 50.0 MiB L2" in large.describe()
    with pytest.raises(ValueError, match="at least 2"):
        rounds.plan(1_000, sets=1, l2=1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert rounds.l2_bytes() == rounds.DEFAULT_L2_BYTES


def test_a_time_below_the_measured_roof_is_refused_and_a_time_above_it_is_not():
    bytes_fast = rounds.below_roof("k", 1e-6, moved=10**9, bandwidth=1e12)
    assert "impossible" in bytes_fast and "1.00 TB/s" in bytes_fast
    flops_fast = rounds.below_roof("k", 1e-3, flops=10**12, peak=5e14)
    assert "impossible" in flops_fast and "500 TFLOP/s measured now" in flops_fast
    assert (
        rounds.below_roof("k", 1.1e-3, moved=10**9, bandwidth=1e12, flops=10**12, peak=1e15) is None
    )


def test_sizes_are_drawn_in_the_band_unaligned_and_vary():
    rng = random.Random(3)
    odd = {rounds.drawn(rng, 4096, low=0.75) for _ in range(200)}
    assert all(3072 <= n <= 4096 and n % 2 for n in odd) and len(odd) > 100
    eights = {rounds.drawn(rng, 8192, low=7 / 8, align=8) for _ in range(200)}
    assert all(7168 <= n <= 8192 and n % 16 == 8 for n in eights) and len(eights) > 50
    with pytest.raises(ValueError):
        rounds.drawn(rng, 2, low=1.0)


def test_a_result_kept_in_scratch_or_in_an_input_for_the_next_call_fails():
    """Results replayed by content: kept in a scratch buffer (poisoned before every call; planted:
    the poison removed, this passes), or written into an input (compared with a snapshot after the
    rounds)."""
    expected = [torch.randn(64) for _ in range(2)]
    outs = [torch.empty(64) for _ in range(2)]
    kept = [torch.empty(64) for _ in range(2)]
    computed = [False, False]

    def from_scratch(index):
        def run():
            if not computed[index]:
                kept[index].copy_(expected[index])
                computed[index] = True
            outs[index].copy_(kept[index])

        return run

    timed = {
        "yours": rounds.Timed(
            [from_scratch(0), from_scratch(1)], outs, expected, scratch=[[kept[0]], [kept[1]]]
        )
    }
    with pytest.raises(rounds.WrongWhileTimed) as failure:
        rounds.time_rounds(
            timed,
            one_set_plan(),
            budget_s=0,
            warmup=0,
            min_runs=4,
            device=rounds.Clock(on_gpu=False),
        )
    assert failure.value.call == 2

    inputs = [{"x": torch.randn(64)} for _ in range(2)]

    def into_input(index):
        def run():
            outs[index].copy_(expected[index])
            inputs[index]["x"][0] = 0.5

        return run

    timed = {"yours": rounds.Timed([into_input(0), into_input(1)], outs, expected, inputs=inputs)}
    with pytest.raises(rounds.WrongWhileTimed) as failure:
        rounds.time_rounds(
            timed,
            one_set_plan(),
            budget_s=0,
            warmup=0,
            min_runs=2,
            device=rounds.Clock(on_gpu=False),
        )
    assert failure.value.input_name == "x"
    assert "wrote into their input `x` while timed" in str(
        rounds.wrong_while_timed("f", failure.value, timed, "out", 1)
    )


def test_on_a_gpu_a_call_is_spun_behind_bracketed_by_events_then_the_device_synchronized(
    monkeypatch,
):
    """The GPU path of Clock.span with torch.cuda stood in for: the spin queued first (so the start
    event fires after the launch), then the events around the call, then torch.cuda.synchronize()
    with no stream: the whole device."""
    log: list[str] = []

    class Event:
        def __init__(self, enable_timing):
            self.at = 0.0

        def record(self):
            log.append("record")
            self.at = time.perf_counter()

        def query(self):
            return True

        def elapsed_time(self, other):
            return (other.at - self.at) * 1e3

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append(f"spin {cycles}"))
    monkeypatch.setattr(
        torch.cuda, "synchronize", lambda *device: log.append(f"synchronize{device}")
    )
    on_stream, to_idle = rounds.Clock(on_gpu=True).span(lambda: log.append("call"))
    assert log == [f"spin {rounds.SPIN_CYCLES}", "record", "call", "record", "synchronize()"]
    assert on_stream >= 0 and to_idle >= 0
