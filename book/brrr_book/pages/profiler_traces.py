"""Notebook 32 (profiler traces): its check, the ledger's claim that asynchronous execution hides
overhead, its record (and, under ``make gpu-check``, the trace kept for readers without a GPU) and
its sentence."""

from __future__ import annotations

from brrr import reference, targets, traces, units
from brrr_book.claims import glue_text, judge_async_overhead, publish
from brrr.column import fit
from brrr.device import ON_GPU


def finish(recorded: dict, idle: dict[str, float], stamp: str) -> None:
    """``recorded``: per batch name, (size, trace file, parsed trace, window); ``idle``: per batch
    name, the share of its window the device (on a CPU: the host's ops) sat idle; ``stamp``: the
    one the traces were recorded under."""
    publish_async_claim(recorded, idle, stamp)
    glue_text(
        "idle-shares",
        (
            f"Here the small batch spent {units.percent(idle['small'])} of its step "
            f"between ops, the large batch {units.percent(idle['large'])}."
        ),
    )
    # The claim of this page: the small batch spends a larger share of its time between ops
    # (overhead) than the large one.
    with targets.said_only_if_missed():
        targets.check(
            idle["small"] > idle["large"],
            (
                f"idle share: small batch {units.percent(idle['small'])}, large batch "
                f"{units.percent(idle['large'])}"
            ),
        )
    reference.record(
        "overhead/profiler-traces",
        {
            name: {
                "batch": size,
                "idle_fraction": idle[name],
                "device_row": trace.has_device,
                "window_us": window[1] - window[0],
                "cpu_ops": len(trace.cpu_ops),
                "device_events": len(trace.device),
            }
            for name, (size, path, trace, window) in recorded.items()
        },
    )
    # make gpu-check: keep the small-batch trace, so that readers without a GPU see a recorded
    # device row instead of the synthetic one
    folder = reference.recording_dir()
    if ON_GPU and folder is not None:
        size, path = recorded["small"][:2]
        saved = traces.save_reference_trace(
            path,
            folder / "traces",
            description=(
                f"3 training steps of brrr.benchmarks.overhead's MLP at batch {size}, recorded by "
                "notebook 32 under make gpu-check"
            ),
        )
        print(fit(f"saved {saved} for readers without a GPU"))


def publish_async_claim(recorded: dict, idle: dict[str, float], stamp: str) -> None:
    """Judge and publish "async-hides-overhead" from the two batches' windows and the large batch's
    device busy share (none where its trace has no device row: the host's idle share on a CPU is
    not the device's)."""
    (small, _, _, small_window), (large, _, large_trace, large_window) = (
        recorded["small"],
        recorded["large"],
    )
    publish(
        judge_async_overhead(
            small,
            large,
            small_window[1] - small_window[0],
            large_window[1] - large_window[0],
            1 - idle["large"] if large_trace.has_device else None,
        ),
        stamp,
    )
