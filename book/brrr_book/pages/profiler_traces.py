"""Notebook 32 (profiler traces): its claim, its record (and, under ``make gpu-check``, the trace
kept for readers without a GPU) and its sentence."""

from __future__ import annotations

from brrr import reference, targets, traces, units
from brrr.claims import glue_text
from brrr.column import fit
from brrr.device import ON_GPU


def finish(recorded: dict, idle: dict[str, float]) -> None:
    """``recorded``: per batch name, (size, trace file, parsed trace, window); ``idle``: per batch
    name, the share of its window the device (on a CPU: the host's ops) sat idle."""
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
