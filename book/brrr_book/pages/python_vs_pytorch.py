"""Notebook 30 (Python against PyTorch): its verdict, its checks and its record."""

from __future__ import annotations

from dataclasses import dataclass

from brrr import reference, targets, units
from brrr.benchmarks import overhead
from brrr.ceilings import Ceilings
from brrr_book.claims import judge_overhead_floor, publish

# The page's checks (pinned in tests/book/test_pinned_targets.py). Python's float adds at least this
# many times the eager ops per second: the per-op overhead is there.
PYTHON_OVER_EAGER_MIN = 3
# The slowest of the 1-, 4- and 16-element adds at most this many times the fastest: a flat floor.
SMALLEST_ADDS_SPREAD_MAX = 1.5


@dataclass
class Page:
    """What notebook 30 measured."""

    stamp: str  # overhead.measured_stamp()
    ceilings: Ceilings
    python_rate: float  # Python float adds per second
    ops_rate: float  # eager one-element torch adds per second
    autograd_rate: float  # the same with requires_grad=True
    sizes: list[int]  # elements per tensor of the add sweep
    seconds: list[float]  # median seconds per add, per size
    knee: float  # the predicted n*, elements


def finish(page: Page) -> None:
    """Publish the overhead-floor claim, check the page's claims (Python's adds outpace eager ops;
    the smallest adds all cost the same, a miss timed again; a miss fails the build), record."""
    python_rate, ops_rate, sizes, seconds = (
        page.python_rate,
        page.ops_rate,
        page.sizes,
        page.seconds,
    )
    # The floor: an add 1/16 of the knee size against a one-element add. The knee here is this
    # sweep's own: its one-element add as the overhead.
    own_knee = seconds[0] * page.ceilings.copy_bandwidth / overhead.add_bytes(1)
    below_knee = [s for n, s in zip(sizes, seconds) if n <= own_knee / 16] or seconds[:1]
    publish(judge_overhead_floor(python_rate, ops_rate, below_knee[-1] / seconds[0]), page.stamp)

    def smallest_spread(times=None):
        """The slowest of the 1-, 4- and 16-element adds over the fastest."""
        times = times or [t.median_s for t in overhead.add_time_by_size(sizes[:3])]
        return max(times) / min(times)

    with targets.said_only_if_missed():
        targets.check(
            python_rate > PYTHON_OVER_EAGER_MIN * ops_rate,
            (
                f"Python adds {units.si(python_rate, 'add/s')}, eager ops "
                f"{units.si(ops_rate, 'op/s')}: "
                "the per-op overhead is missing"
            ),
        )
        targets.require_at_most(
            "adds of 1, 4 and 16 elements: slowest over fastest",
            SMALLEST_ADDS_SPREAD_MAX,
            smallest_spread(seconds[:3]),
            smallest_spread,
        )
    reference.record(
        "overhead/python-vs-pytorch",
        {
            "python_adds_per_s": python_rate,
            "torch_ops_per_s": ops_rate,
            "torch_ops_per_s_autograd": page.autograd_rate,
            "add_sizes": sizes,
            "add_seconds": seconds,
            "predicted_knee_elements": page.knee,
        },
    )
