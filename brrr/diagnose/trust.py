"""How far a diagnosis can be trusted: whether its readings, taken minutes apart, agree.

A diagnosis divides numbers read at different moments: the median step (profiler off), the per-op
times of a few profiled steps, and roofs read earlier (a cache) or at the start. On a machine that
other work shares, one of them can be read in a busy moment and flip the verdict: BERT read
memory-bound, MFU 4%, at load 4, and compute-bound, MFU 58%, at load 1.7; a 256² matmul read "MFU
95%" beside "larger matmuls can gain at most 121x", its per-op numbers from profiled steps 100x
slower than its median step. So every diagnosis checks:

profiled against timed
    the time inside ops of a profiled step over the timed median: above :data:`AGREE`'s top, the
    profiled ops ran slower than the whole step did unprofiled; and the whole profiled step (the
    profiler's own cost per step taken off) over the timed median: below :data:`AGREE`'s bottom, the
    timing ran in a busy moment (:func:`agrees`). Where either disagrees the step is measured again,
    up to :data:`MEASUREMENTS` times in all, and the closest pair kept.
roofs against probes
    a short reading of the matmul, the copy and an element-wise add, each over its roof
    (:func:`brrr.ceilings.probe_readings`): above the roof, the roof is measured again before it is
    used; the matmul far below it, the machine is busier now than when the roof was read.
the core the step got
    a one-thread step's CPU time over its wall time while timed and profiled
    (:func:`brrr.diagnose.profile.cpu_share`), and the load average against the cores: other
    processes that ran instead of the step slowed every reading of it.

What disagrees is said plainly in the report, with how much to trust the verdict (:class:`Trust`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from brrr import units

# The time inside ops of a profiled step over the timed median (at most AGREE[1]), and the whole
# profiled step over it (at least AGREE[0]). The profiler adds host time to every op, most of it
# between ops, which the floor taken off (an empty step's) leaves in. On our 2-core EPYC, one
# thread, load 1.7, the zoo's six steps read 0.78-1.44 inside ops and 0.89-4.25 whole (the MLP of 4
# examples, 46 ops of a few us, the most both times); the planted busy profile of
# tests/diagnose/test_diagnose_trust.py reads about 20 inside ops.
AGREE = (0.5, 2.0)
MEASUREMENTS = 3  # the step measured at most this many times while the two disagree
BUSY_PROBE = 0.5  # a probe under this share of its roof: busy now
# The CPU time a one-thread step's thread got, over the wall time (brrr.diagnose.profile.cpu_share):
# the zoo's six steps read 0.67-0.99 at load 1.7 on our 2 cores; beside other test runs (load 9-12,
# the diagnosis niced) a tiny MLP's read 0.12, and ResNet-18 ran 7x slower than at load 1.7, its
# convolutions at 2% of the matmul peak, and no other check noticed.
CPU_SHARE_BUSY = 0.6
CPU_SHARE_LOW = 0.4
# The probes that say the machine is busy: a short matmul reaches most of its roof on a quiet
# machine (0.69-0.99 at load 1.7), while the add probe, one FLOP per element, stays far under a roof
# of compiled multiply-adds (0.10-0.13) and only says where that roof was read low.
BUSY_PROBES = ("float32 matmul",)


def agrees(ops_over_timed: float, profiled_over_timed: float) -> bool:
    """Whether the profiled steps and the timed median agree: the time inside ops at most
    ``AGREE[1]`` times the median (the profiler's cost between ops left out), the whole profiled
    step at least ``AGREE[0]`` of it."""
    return ops_over_timed <= AGREE[1] and profiled_over_timed >= AGREE[0]


def distance(ops_over_timed: float, profiled_over_timed: float) -> float:
    """How far the two readings are from agreeing: the larger of the ops' excess and the profiled
    step's shortfall, as factors (1: none)."""
    slow = max(ops_over_timed, 1.0)
    fast = 1 / profiled_over_timed if profiled_over_timed > 0 else float("inf")
    return max(slow, fast, 1.0)


@dataclass
class Trust:
    """What the consistency checks found: the readings' ratios and what they mean for the
    verdict."""

    ops_over_timed: float  # the time inside ops of a profiled step / the timed median
    profiled_over_timed: float  # the mean profiled step (profiler's floor off) / the timed median
    measurements: int  # how many times the step was measured to get there
    probes: dict[str, float] = field(default_factory=dict)  # roof -> a short reading now / the roof
    cpu_share: float = 1.0  # CPU time the step's thread got while timed and profiled / wall time
    load: tuple[float, int] | None = None  # the 1-minute load average and the cores, where known
    roofs_rose: bool = False  # a probe or an op above a roof had the roofs read again, and one rose

    @property
    def steps_agree(self) -> bool:
        return agrees(self.ops_over_timed, self.profiled_over_timed)

    @property
    def busy_probes(self) -> dict[str, float]:
        """The probes of :data:`BUSY_PROBES` far below their roofs."""
        return {
            name: value
            for name, value in self.probes.items()
            if name in BUSY_PROBES and value < BUSY_PROBE
        }

    @property
    def busy(self) -> bool:
        """Whether the machine was busy enough to move the numbers."""
        loaded = self.load is not None and self.load[0] > self.load[1]
        return (
            not self.steps_agree
            or bool(self.busy_probes)
            or self.cpu_share < CPU_SHARE_BUSY
            or loaded
        )

    @property
    def level(self) -> str:
        """``high``, or ``low`` where the profiled steps and the median disagree: the shares and the
        MFU then come from different machines, as it were, and the verdict can flip."""
        if not self.steps_agree or self.cpu_share < CPU_SHARE_LOW:
            return "low"
        return "medium" if self.busy else "high"

    def sentences(self) -> list[str]:
        """What the report says about it: nothing where all agreed."""
        found = []
        apart = distance(self.ops_over_timed, self.profiled_over_timed)
        if not self.steps_agree:
            way = (
                f"the profiled steps spent {self.ops_over_timed:.1f}x the timed median inside ops"
                if self.ops_over_timed > AGREE[1]
                else f"the profiled steps ran {1 / self.profiled_over_timed:.1f}x faster than the "
                "timed median"
            )
            found.append(
                f"the machine was busy: {way}, still after measuring the step "
                f"{self.measurements} times. The shares "
                "and the per-op rates come from the profiled steps and the MFU from the median, so "
                "the verdict above may be wrong: trust it little, and run again on a quiet machine "
                "(nothing else running)"
            )
        elif self.measurements > 1:
            found.append(
                f"the first profiled steps disagreed with the timed median (load from other work); "
                f"measured {self.measurements} times, the readings agree within {apart:.1f}x"
            )
        if self.load is not None and self.load[0] > self.load[1]:
            found.append(
                f"the machine's load average was {self.load[0]:.1f} on {self.load[1]} cores: more "
                "work was ready to run than cores to run it, so every reading here is slower and "
                "noisier than on a quiet machine"
            )
        if self.cpu_share < CPU_SHARE_BUSY:
            found.append(
                f"the machine was busy: the step's thread ran {units.percent(self.cpu_share)} of "
                "the time it was measured (other processes had the cores the rest), so its times "
                "are inflated and its rates read low against roofs read on a quieter machine. "
                + (
                    "The verdict may be wrong: run again on a quiet machine"
                    if self.cpu_share < CPU_SHARE_LOW
                    else "Trust the regimes more than the percentages"
                )
            )
        if self.busy_probes:
            readings = ", ".join(
                f"{name} at {units.percent(value)} of its roof"
                for name, value in self.busy_probes.items()
            )
            found.append(
                f"the machine is busier now than when its roofs were read ({readings} in a short "
                "reading now): rates read low against the roofs; trust the regimes more than the "
                "percentages"
            )
        if self.roofs_rose:
            found.append(
                "a reading of this run was above a roof read earlier: the roofs were measured "
                "again and the higher readings kept (and cached)"
            )
        return found

    def to_json(self) -> dict:
        return {**asdict(self), "busy": self.busy, "level": self.level}
