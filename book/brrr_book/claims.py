"""The essay's claims, each bound to the number that tests it on this machine.

The claims of Horace He's essay (https://horace.io/brrr_intro.html), in :data:`CLAIMS`, one
entry per measurement: two of the essay's claims are measured twice (``Claim.part_of``), and
:func:`count_sentence` says how many claims and entries there are. Each names the essay's own
figure with its hardware, the page that measures it here, and the rule that says whether it held.
The rules are pure functions (``judge_*``: numbers in, :class:`Verdict` out), so tests can feed
them made-up numbers that must pass and must fail.

A notebook that measures a claim calls its ``judge_*`` function and
:func:`publish`, which

* prints the verdict, with this machine's figure and the stamp, then what each recorded GPU
  measured, and shows the three machines side by side (:func:`beside`: this one, the recorded GPUs,
  the essay);
* glues it (``myst_nb.glue``) under the keys :func:`glue_key` names: ``claim-<key>-statement``,
  ``-essay``, ``-here``, ``-verdict``, ``-why``, ``-stamp``, ``-recorded`` (what the recorded GPUs
  measured, one sentence), ``-figures`` (the judge's arguments, JSON: the book test judges each
  glued verdict again from them, :func:`recompute`);
* records it for the GPU reference (:func:`brrr.reference.record`, a no-op
  except under ``make gpu-check``), under ``claims/<key>``.

The ledger page, ``chapters/claims-ledger.md``, is a MyST page whose table is made of
cross-document glue roles, ``{glue:text}`notebooks/10-cos-cos.ipynb::claim-…```.
Why glue rather than a ledger notebook that reads files the notebooks wrote: with
Jupyter Book 1's execution cache (``execute_notebooks: cache``) a notebook whose
source did not change is not executed again. A ledger notebook would keep the
figures of the run in which it last executed while the measuring notebooks showed
newer ones, and in a clean forced build it would run before them (Sphinx reads
pages in name order). Glued values live in each notebook's own outputs, cached
or fresh, and the roles resolve after every page is read, so the ledger always
shows the outputs printed on the notebook pages it links to. ``make book`` and
the tests build into an empty ``_build``, so every page is read again; an
incremental build that keeps ``_build`` re-reads only pages that changed, and
can show a stale ledger row: rebuild clean.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

from brrr import reference, units
from brrr.benchmarks import compute
from brrr.beside import Beside, Recorded, recorded, show, three_machines
from brrr.targets import measurements
from brrr.stamp import stamp as current_stamp

HELD, NOT_HELD = "held here", "did not hold here"


@dataclass(frozen=True)
class Claim:
    key: str
    statement: str  # the essay's claim, in one sentence
    essay: str  # the essay's figure, with the hardware it was measured or quoted on
    notebook: str  # the page that measures it here (docname, no suffix)
    rule: str  # what must be measured here for the claim to count as held
    # The key of the entry before it that measures the same claim of the essay another way ("" for
    # an entry that is a claim of its own).
    part_of: str = ""


@dataclass(frozen=True)
class Verdict:
    key: str
    held: bool
    here: str  # this machine's figure, with units
    why: str  # why it held, or why not
    # The judge's arguments that give this verdict, by name: recompute(key, figures) judges them
    # again.
    figures: dict = field(default_factory=dict)

    @property
    def word(self) -> str:
        return HELD if self.held else NOT_HELD

    def line(self) -> str:
        why = f"{self.why[:1].upper()}{self.why[1:]}"
        return f"{CLAIMS[self.key].statement} {self.word.capitalize()}: {self.here}. {why}."


_CLAIMS = [
    Claim(
        "three-regimes",
        "Every op is compute-, memory- or overhead-bound, and which one decides the fix.",
        "the essay's framework; no single figure",
        "notebooks/00-your-machine",
        "on this machine's measured roofs, a one-element op is overhead-bound, a large pointwise "
        "op memory-bound and a large matmul compute-bound",
    ),
    Claim(
        "compute-grows-faster",
        "Compute grows faster than memory bandwidth, generation after generation.",
        "processors' throughput doubled every 1.6 years, memory bandwidth every 2.7 (the essay's "
        "table, from Patterson's 'Latency Lags Bandwidth', 2004: CPUs and DRAM, no GPU)",
        "chapters/compute",
        "from the oldest to the newest GPU generation of the datasheets' table, 16-bit matmul "
        "FLOP/s grew at least 2x as much as memory bandwidth: the ridge point at least doubled",
    ),
    Claim(
        "contractions-flops-vs-runtime",
        "Contractions do nearly all the FLOPs but take much less of the runtime.",
        "BERT: 99.80% of FLOPs and 61.0% of runtime in contractions (the essay's table, from "
        "Ivanov et al. 2021; no GPU named)",
        "notebooks/21-flops-vs-runtime",
        "contractions do at least 95% of the FLOPs, the other ops take at least a fifth of the "
        "runtime (the essay's table: 39%), and that is at least 10x their share of the FLOPs",
    ),
    Claim(
        "other-ops-fewer-flops",
        "Non-matmul ops achieve hundreds of times fewer FLOP/s than matmuls.",
        "250x (normalization) and 700x (element-wise) fewer FLOP/s (the essay's BERT table; no "
        "GPU named)",
        "notebooks/21-flops-vs-runtime",
        "both classes achieve at least 100x fewer FLOP/s than the contractions",
        part_of="contractions-flops-vs-runtime",  # the essay's BERT table
    ),
    Claim(
        "matmul-gap",
        "Matmul hardware is far faster than the units for everything else.",
        "312 TFLOP/s bf16 on tensor cores against 19.5 TFLOP/s fp32 non-matmul: 16x (A100 "
        "datasheet, quoted)",
        "notebooks/00-your-machine",
        "the best measured matmul peak is at least 4x the measured non-matmul peak",
    ),
    Claim(
        "fusion-cuts-bytes",
        "Fusion cuts the bytes moved, and the time falls with them.",
        "x.cos().cos(): 4 global memory accesses become 2, so fusion speeds it up by 2x (A100, "
        "argued)",
        "notebooks/10-cos-cos",
        "x.cos().cos() fused (1 pass) runs at least 1.33x (2/3 of the 2x the bytes allow) as "
        "fast as the same compiled cosine in two kernels (2 passes)",
    ),
    Claim(
        "fused-chain-one-op",
        "A fused chain of cheap pointwise ops costs about one op.",
        "a fused x.cos().cos() takes nearly the same time as x.cos() (A100)",
        "notebooks/10-cos-cos",
        "the fused three-op chain takes at most 1.3x the time of one of its ops compiled alone",
    ),
    Claim(
        "cos-cos-one-cos",
        "A fused x.cos().cos() costs about one x.cos().",
        "a fused x.cos().cos() takes nearly the same time as x.cos() (A100)",
        "notebooks/10-cos-cos",
        "compiled x.cos().cos() takes at most 1.3x the time of compiled x.cos()",
        part_of="fused-chain-one-op",  # the essay's sentence, on its own example
    ),
    Claim(
        "memory-bound-until-ridge",
        "A pointwise kernel stays memory-bound for dozens of FLOPs per element, up to the ridge "
        "point.",
        "x*2 repeated: runtime flat up to 64 multiplications, memory-bound below 32 (A100, fp32, "
        "measured in the essay)",
        "notebooks/11-repeat-sweep",
        "the measured knee is at 4 repeats or more, and within 2x of the knee the measured roofs "
        "predict",
    ),
    Claim(
        "overhead-floor",
        "Every eager op pays a fixed overhead that tiny tensors cannot get under.",
        "Python: 32 M float adds/s; PyTorch: 280 K ops/s on tiny tensors (the author's machine, "
        "2022)",
        "notebooks/30-python-vs-pytorch",
        "eager ops are at least 10x slower than Python adds, and an add 1/16 of the predicted "
        "knee size takes at most 2x the time of a one-element add",
    ),
    Claim(
        "async-hides-overhead",
        "Asynchronous execution hides overhead: while the GPU works, the CPU queues the next ops, "
        "so per-op overhead costs nothing as long as kernels outlast it.",
        '\'as long as PyTorch can "run ahead" of the CUDA kernels, most of the framework '
        "overhead gets completely hidden' (profiler traces; no figure, no GPU named)",
        "notebooks/32-profiler-traces",
        "at the large batch the device is busy at least half the profiled window, and at least "
        "half of the host's overhead (the small batch's window, all dispatch) runs under the "
        "kernels instead of adding to them; a machine with no device row runs nothing ahead",
    ),
    Claim(
        "batch-doubling",
        "If doubling the batch barely changes the step time, the step is overhead-bound.",
        "doubling the batch adds only ~10% to the runtime: likely overhead-bound (with a "
        "footnote: a bigger batch also raises intensity)",
        "notebooks/31-batch-doubling",
        "the first doubling adds under 25% while the step takes at least 2x its roofline time, "
        "and the last doubling is not flat (it adds 25% or more): the step does grow with the "
        "work",
    ),
    Claim(
        "compile-removes-overhead",
        "Tracing and compiling remove per-op overhead.",
        "overhead-bound fixes: tracing, operator fusion, CUDA graphs (no figure)",
        "notebooks/33-cuda-graphs",
        "torch.compile runs 50 tiny pointwise ops at least 2x faster than eager",
    ),
    Claim(
        "remat-memory-and-time",
        "With a fusing compiler, rematerialization lowers memory and runtime together.",
        "'we can lower both memory and runtime through rematerialization' (AOTAutograd's min-cut "
        "pass; no figure)",
        "notebooks/13-rematerialization",
        "against the same compiled code with everything saved, recomputation cuts peak memory by "
        "at least 10% and the step time by more than the timings' own noise (at least 2%)",
    ),
]
CLAIMS: dict[str, Claim] = {claim.key: claim for claim in _CLAIMS}


def count_sentence(claims: dict[str, Claim] = CLAIMS) -> str:
    """How many of the essay's claims the ledger tests, in how many entries, and which entries
    (numbered as the ledger numbers them) measure one claim twice."""
    number = {key: place for place, key in enumerate(claims, 1)}
    twice = [(number[claim.part_of], number[key]) for key, claim in claims.items() if claim.part_of]
    sentence = (
        f"The ledger tests {len(claims) - len(twice)} claims of the essay in {len(claims)} entries"
    )
    if not twice:
        return sentence + "."
    (first, second), *rest = twice
    also = "".join(f", and so do {one} and {other}" for one, other in rest)
    return f"{sentence}: entries {first} and {second} measure one claim two ways{also}."


FIELDS = ("statement", "essay", "here", "verdict", "why", "stamp", "recorded", "figures")

# Each claim's judge, by key: recompute() reads it, so a glued verdict can be judged again from its
# figures.
JUDGES: dict[str, Callable[..., "Verdict"]] = {}


def _judge(key: str):
    """Register a ``judge_*`` function as ``key``'s, and keep its arguments on the verdict it
    returns (``Verdict.figures``), unless the judge set them itself."""

    def register(judge):
        signature = inspect.signature(judge)

        @functools.wraps(judge)
        def judged(*args, **kwargs):
            verdict = judge(*args, **kwargs)
            if verdict.figures:
                return verdict
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return replace(verdict, figures=dict(bound.arguments))

        JUDGES[key] = judged
        return judged

    return register


def recompute(key: str, figures: dict) -> "Verdict":
    """Claim ``key`` judged again from ``figures`` (a verdict's, or its glued ``figures`` field,
    read back)."""
    return JUDGES[key](**figures)


def _ratio(value: float, *against: float) -> str:
    """``value`` as "1.23x", precise enough to stay on its side of each threshold in ``against``."""
    return units.ratio(value, against)


@_judge("three-regimes")
def judge_three_regimes(tiny: str, pointwise: str, matmul: str) -> Verdict:
    """Regimes (``str(brrr.roofline.Regime)``: "memory-bound", ...) of three ops on the measured
    roofs."""
    got = {"a one-element op": tiny, "a large x * 2": pointwise, "a 4096³ matmul": matmul}
    expected = {
        "a one-element op": "overhead-bound",
        "a large x * 2": "memory-bound",
        "a 4096³ matmul": "compute-bound",
    }
    here = "; ".join(f"{op} {regime}" for op, regime in got.items())
    wrong = [
        f"{op} came out {got[op]}, not {want}" for op, want in expected.items() if got[op] != want
    ]
    why = (
        "all three regimes occur on this machine's measured roofs"
        if not wrong
        else "; ".join(wrong) + ", on this machine's measured roofs"
    )
    return Verdict("three-regimes", not wrong, here, why)


# The essay's factory: "Even though our factory's size (FLOPS) doubled - if our bandwidth can't
# keep up then our performance isn't also going to double". Compute outgrows bandwidth when, over
# the datasheets' span, FLOP/s doubled against bandwidth: the ridge point (FLOPs per byte) at least
# doubled, well beyond what picking another part of one generation moves it (the H100 PCIe's
# datasheet ridge point, 756.5 TFLOP/s over 2.0 TB/s, is 1.28x the H100 SXM's, 989.5 over 3.35).
RIDGE_GROWTH_MIN = 2.0


def datasheet_generations() -> list[list]:
    """The datasheets' GPU generations (:data:`figures.GENERATIONS`), oldest first, as rows
    ``[name, year, memory bandwidth B/s, dense 16-bit matmul FLOP/s]`` (a verdict's figures are
    glued as JSON)."""
    from brrr_book.figures import GENERATIONS

    rows = sorted(GENERATIONS, key=lambda generation: generation.year)
    return [[g.name, g.year, g.bandwidth, g.tensor_flops] for g in rows]


def _ridge(value: float) -> str:
    """A ridge point's FLOPs per byte, with a decimal below 10 (a CPU's)."""
    return f"{value:.{1 if value < 10 else 0}f}"


@_judge("compute-grows-faster")
def judge_compute_growth(
    generations: list, ridge_measured: float | None = None, measured: str = ""
) -> Verdict:
    """Datasheet rows of GPU generations, oldest first (:func:`datasheet_generations`), judged
    oldest against newest; ``ridge_measured``: a machine's measured ridge point, FLOPs per byte,
    shown beside the datasheets' with ``measured``, what it was measured with (it is not judged:
    the claim is about GPU generations)."""
    (old, old_year, old_bandwidth, old_flops) = generations[0]
    (new, new_year, new_bandwidth, new_flops) = generations[-1]
    flop_growth, bandwidth_growth = new_flops / old_flops, new_bandwidth / old_bandwidth
    growth = flop_growth / bandwidth_growth
    years = new_year - old_year
    yearly = (
        f" ({flop_growth ** (1 / years):.2f}x and {bandwidth_growth ** (1 / years):.2f}x a year)"
        if years > 0
        else ""
    )
    here = (
        f"datasheets, {old} ({old_year}) to {new} ({new_year}): FLOP/s {flop_growth:.1f}x, "
        f"bandwidth {bandwidth_growth:.1f}x{yearly}, ridge point "
        f"{_ridge(old_flops / old_bandwidth)} to {_ridge(new_flops / new_bandwidth)} FLOPs/byte "
        f"({_ratio(growth, RIDGE_GROWTH_MIN)})"
    )
    if ridge_measured is not None:
        here += f"; measured ridge point {_ridge(ridge_measured)} FLOPs/byte" + (
            f" ({measured})" if measured else ""
        )
    if growth < RIDGE_GROWTH_MIN:
        why = (
            f"FLOP/s grew only {_ratio(growth, RIDGE_GROWTH_MIN)} as much as bandwidth from {old} "
            f"to {new}, under the doubling the essay's factory picture asks"
        )
        return Verdict("compute-grows-faster", False, here, why)
    why = (
        "the newest generation needs at least twice the FLOPs per byte the oldest did to keep "
        "its matmul units busy"
    )
    return Verdict("compute-grows-faster", True, here, why + _ridge_falls(generations))


def _ridge_falls(generations: list) -> str:
    """Where the ridge point fell from one generation to the next, as a clause ('' where it
    never did): the trend holds over the span, not at every step."""
    ridges = [(name, flops / bandwidth) for name, _, bandwidth, flops in generations]
    fell = [
        f"from {before} to {after} ({_ridge(high)} to {_ridge(low)} FLOPs/byte)"
        for (before, high), (after, low) in zip(ridges, ridges[1:])
        if low < high
    ]
    return f"; though not at every step: the ridge point fell {' and '.join(fell)}" if fell else ""


# The rule of "contractions-flops-vs-runtime" is the compute benchmark's table check (one home).
CONTRACTION_FLOP_SHARE_MIN = compute.CONTRACTION_FLOP_SHARE_TARGET
OTHER_TIME_OVER_FLOP_SHARE_MIN = compute.OTHER_TIME_OVER_FLOP_SHARE_TARGET
other_time_over_flop_share = compute.other_time_over_flop_share
# The claim's own line: "much less of the runtime" is a large share left to the other ops. The
# essay's table gives them 39%; a CPU once read "held" at 11.8%, half of it dropout's random
# numbers.
OTHER_TIME_SHARE_MIN = 0.2


@_judge("contractions-flops-vs-runtime")
def judge_contractions(flop_share: float, time_share: float) -> Verdict:
    """Contractions' shares (0 to 1) of a training step's FLOPs and runtime."""
    other_flops, other_time = 1 - flop_share, 1 - time_share
    factor = other_time_over_flop_share(flop_share, time_share)
    flop_percent = units.beside(100 * flop_share, 2, (100 * CONTRACTION_FLOP_SHARE_MIN,))
    time_percent = units.beside(100 * other_time, 1, (100 * OTHER_TIME_SHARE_MIN,))
    here = (
        f"contractions {flop_percent}% of FLOPs, {100 * time_share:.1f}% of runtime; the other "
        f"ops {time_percent}% of runtime for {100 * other_flops:.2f}% of FLOPs "
        f"({units.beside(factor, 0, (OTHER_TIME_OVER_FLOP_SHARE_MIN,))}x)"
    )
    if flop_share < CONTRACTION_FLOP_SHARE_MIN:
        return Verdict(
            "contractions-flops-vs-runtime",
            False,
            here,
            f"contractions did under {CONTRACTION_FLOP_SHARE_MIN:.0%} of the FLOPs in this layer",
        )
    if factor < OTHER_TIME_OVER_FLOP_SHARE_MIN:
        return Verdict(
            "contractions-flops-vs-runtime",
            False,
            here,
            f"the other ops took under {OTHER_TIME_OVER_FLOP_SHARE_MIN:g}x their FLOP share of "
            "the runtime",
        )
    if other_time < OTHER_TIME_SHARE_MIN:
        return Verdict(
            "contractions-flops-vs-runtime",
            False,
            here,
            "the contractions took most of the time as well as the FLOPs: the other ops' "
            f"{units.percent(other_time, (OTHER_TIME_SHARE_MIN,))} of the runtime is under the "
            "fifth the rule asks (the essay's table: 39%)",
        )
    return Verdict(
        "contractions-flops-vs-runtime",
        True,
        here,
        "the ops that do a fraction of a percent of the work take a large share of the time",
    )


@_judge("other-ops-fewer-flops")
def judge_other_ops_rate(
    normalization: float,
    elementwise: float,
    matmul_over_vector: float,
    measured: str = "",
    normalization_of_roof: float | None = None,
    elementwise_of_roof: float | None = None,
) -> Verdict:
    """How many times fewer FLOP/s each class achieved than the contractions; the roofs' own ratio,
    and ``measured``: the roofs' dtype and thread count, since other pages quote other settings.

    ``*_of_roof``: each class's FLOP/s as a fraction of the measured non-matmul roof. They say why
    the ops are slow (far below their own roof: memory, and dropout's random numbers, not
    arithmetic); the roofs' ratio says only why the gap to the matmuls is not hundreds here. A page
    once gave the roofs' ratio as the reason beside ops at 12% and 1% of their own roof."""
    roofs = f"matmul roof ({measured})" if measured else "matmul roof"
    here = (
        f"normalization {units.beside(normalization, 0, (100,))}x, element-wise "
        f"{units.beside(elementwise, 0, (100,))}x fewer FLOP/s than the contractions"
    )
    slow = ""
    if normalization_of_roof is not None and elementwise_of_roof is not None:
        here += (
            f"; they ran at {units.percent(normalization_of_roof)} and "
            f"{units.percent(elementwise_of_roof)} of the non-matmul roof"
        )
        slow = (
            "far below their own roof, held back by memory traffic (and dropout's random numbers), "
            "not by arithmetic"
        )
    if min(normalization, elementwise) >= 100:
        why = "hundreds of times fewer, as in the essay" + (f": {slow}" if slow else "")
        return Verdict("other-ops-fewer-flops", True, here, why)
    gap = (
        f"this machine's {roofs} is only {_ratio(matmul_over_vector)} its non-matmul roof "
        "(the A100 datasheet the essay quotes: 16x; its BERT table names no GPU), so the "
        "matmuls have less of a head start"
    )
    why = f"the other ops ran {slow}, as in the essay; but {gap}" if slow else gap
    return Verdict("other-ops-fewer-flops", False, here, why)


@_judge("matmul-gap")
def judge_matmul_gap(matmul_peak: float, vector_peak: float, measured: str = "") -> Verdict:
    """Best measured matmul peak and non-matmul peak, FLOP/s; ``measured`` names their dtype and
    threads."""
    gap = matmul_peak / vector_peak
    here = f"matmul peak {_ratio(gap, 4)} the non-matmul peak" + (
        f" ({measured})" if measured else ""
    )
    if gap >= 4:
        return Verdict("matmul-gap", True, here, "matmuls have hardware the other ops cannot use")
    return Verdict(
        "matmul-gap",
        False,
        here,
        "no matrix units here: matmuls and other arithmetic run on the same vector units, so the "
        "gap is the matmul library's cache reuse, not special hardware",
    )


# Fusion counts as paying when it buys at least 2/3 of the speedup the bytes it saves allow.
FUSION_SHARE_OF_BYTES_MIN = 2 / 3


@_judge("fusion-cuts-bytes")
def judge_fusion_cuts_bytes(
    cos_cos_fusion: float,
    chain_fusion: float | None = None,
    two_cos_over_memory: float | None = None,
) -> Verdict:
    """The essay's example: fused ``x.cos().cos()`` (one pass) against the same compiled cosine in
    two kernels (two passes), as a speedup. ``chain_fusion``: the same for the cheap three-op chain
    (three passes to one), where memory sets the time on any machine; ``two_cos_over_memory``: the
    compute time of two cosines per element over one pass's memory time, where it was measured.

    The verdict is the essay's example's; the chain says, beside a miss, whether fusion paid where
    the kernel is memory-bound (the ledger once marked this claim held under the cos-cos quote when
    only the chain had held)."""
    line = 2 * FUSION_SHARE_OF_BYTES_MIN
    here = (
        f"fused x.cos().cos(): 2x fewer bytes, {_ratio(cos_cos_fusion, line)} the speed of the "
        "same compiled cosine in two kernels"
    )
    chain = ""
    if chain_fusion is not None:
        chain_line = 3 * FUSION_SHARE_OF_BYTES_MIN
        chain_shown = _ratio(chain_fusion, chain_line)
        here += f"; the cheap chain (x*1.5+0.5).abs(): 3x fewer bytes, {chain_shown} as fast"
        chain = (
            f"; where memory sets the time it did: the cheap chain, 3x fewer bytes, ran "
            f"{_ratio(chain_fusion, chain_line)} as fast"
            if chain_fusion >= chain_line
            else "; the cheap chain's time did not fall with its bytes either"
        )
    if cos_cos_fusion >= line:
        return Verdict("fusion-cuts-bytes", True, here, "the time fell with the bytes")
    if two_cos_over_memory is not None and two_cos_over_memory > 1:
        why = (
            f"two cosines take {_ratio(two_cos_over_memory, 1)} the memory time of one pass here: "
            "a GPU hides a cosine's ~25 instructions under the memory time, a CPU core cannot, so "
            "the fused kernel is compute-bound and halving the bytes bought no time"
        )
    else:
        why = (
            "the fused kernel ran far from the copy bandwidth, so the bytes saved bought less time"
        )
    return Verdict("fusion-cuts-bytes", False, here, why + chain)


@_judge("fused-chain-one-op")
def judge_fused_chain(
    fused_s: float, one_op_s: float, again: Callable[[], float] | None = None, *, attempts: int = 3
) -> Verdict:
    """Seconds of the fused chain, and of one of its ops compiled alone (the control's mean per op).

    On a miss, ``again()`` (the ratio measured anew) is asked up to ``attempts`` - 1 more times, as
    :func:`brrr.targets.require` does for a target: a stall on a shared machine is not the verdict.
    Every measurement is shown.
    """
    ratios = measurements(fused_s / one_op_s, again, lambda ratio: ratio <= 1.3, attempts=attempts)
    ratio = min(ratios)
    here = f"fused chain {_ratio(ratio, 1.3)} the time of one op"
    if len(ratios) > 1:
        shown = ", ".join(_ratio(r, 1.3) for r in ratios)
        here += f" (the best of {len(ratios)} measurements: {shown})"
    figures = {
        "fused_s": ratio,
        "one_op_s": 1.0,
    }  # the best measurement, as the ratio it was judged on
    if ratio <= 1.3:
        return Verdict(
            "fused-chain-one-op",
            True,
            here,
            "the extra ops hid under the memory time of one pass",
            figures,
        )
    return Verdict(
        "fused-chain-one-op",
        False,
        here,
        "the chain's arithmetic did not fit under one pass's memory time here",
        figures,
    )


@_judge("cos-cos-one-cos")
def judge_cos_cos(
    fused_cos_cos_s: float, fused_cos_s: float, two_cos_over_memory: float
) -> Verdict:
    """Compiled cos().cos() and cos() seconds; compute time of two cosines over one pass's memory
    time."""
    ratio = fused_cos_cos_s / fused_cos_s
    here = f"compiled x.cos().cos() {_ratio(ratio, 1.3)} the time of compiled x.cos()"
    if ratio <= 1.3:
        return Verdict("cos-cos-one-cos", True, here, "the second cosine hid under the memory time")
    if two_cos_over_memory > 1:
        why = (
            f"two cosines per element take {_ratio(two_cos_over_memory, 1)} the memory time of one "
            "pass: a cosine is a software polynomial here, and the fused kernel is compute-bound"
        )
    else:
        why = "the fused kernel ran slower than the roofline predicts for it"
    return Verdict("cos-cos-one-cos", False, here, why)


@_judge("memory-bound-until-ridge")
def judge_knee(measured: float, predicted: float) -> Verdict:
    """Repeat counts: where the runtime started to climb, and where the measured roofs put it."""
    shown = units.beside(
        measured, 1 if measured < 10 else 0, (4, 0.5 * predicted, 2 * predicted)
    )  # as printed
    here = f"flat up to about {shown} repeats; the measured roofs predict {predicted:.0f}"
    if measured < 4:
        return Verdict(
            "memory-bound-until-ridge",
            False,
            here,
            f"the knee came at {shown} repeats, under the 4 the rule asks: fewer than 4 "
            "multiplies per element were free on this machine",
        )
    if not 0.5 <= measured / predicted <= 2:
        return Verdict(
            "memory-bound-until-ridge",
            False,
            here,
            f"the knee came at {_ratio(measured / predicted, 0.5, 2)} the repeat count the "
            "measured roofs predict, outside the 0.5x to 2x the rule allows",
        )
    return Verdict(
        "memory-bound-until-ridge",
        True,
        here,
        "extra arithmetic was free up to the ridge point, as the roofline says",
    )


# On a CPU, where dispatch and work add, an add 1/16 of the knee size costs 1 + 1/16 of a
# one-element add by the model; a fresh-clone run read 1.52x beside the other test worker (a
# one-point ratio of microsecond times), failing a 1.5x rule. An add that loops over its elements in
# Python grows 100x and more.
FLOOR_GROWTH_MAX = 2.0


@_judge("overhead-floor")
def judge_overhead_floor(python_per_s: float, torch_per_s: float, floor_growth: float) -> Verdict:
    """Python adds/s, eager ops/s, and the time of an add 1/16 of the knee size over a one-element
    add."""
    slower = python_per_s / torch_per_s
    here = (
        f"Python {python_per_s / 1e6:.0f} M adds/s, eager PyTorch {torch_per_s / 1e3:.0f} K ops/s "
        f"({units.beside(slower, 0, (10,))}x fewer); an add 1/16 of the knee size takes "
        f"{_ratio(floor_growth, FLOOR_GROWTH_MAX)} a one-element add"
    )
    if slower < 10:
        return Verdict(
            "overhead-floor", False, here, "eager ops were less than 10x slower than Python adds"
        )
    if floor_growth > FLOOR_GROWTH_MAX:
        return Verdict(
            "overhead-floor",
            False,
            here,
            "the time of small adds grew with their size: no flat floor",
        )
    return Verdict("overhead-floor", True, here, "small ops cost the same whatever their size")


# "As long as kernels outlast it": at the large batch the device must be busy at least half the
# window, or the kernels did not outlast the dispatch between them (the essay's "expensive
# paperweight"). Half the overhead hidden splits the two ways a step can run: one op after the other
# hides none of it, a host that queues ahead of the device all it can.
ASYNC_BUSY_MIN = 0.5
ASYNC_HIDDEN_MIN = 0.5


def overhead_hidden(small_us: float, large_us: float, large_busy: float) -> float:
    """The share of the host's overhead that ran under the large batch's kernels: the time the large
    batch's window saved on its overhead (the small batch's window, where the kernels are slivers)
    and its kernels (``large_busy`` of its window) run one after the other, over that overhead."""
    return (small_us + large_busy * large_us - large_us) / small_us


@_judge("async-hides-overhead")
def judge_async_overhead(
    small_batch: int,
    large_batch: int,
    small_us: float,
    large_us: float,
    large_busy: float | None,
) -> Verdict:
    """Two profiled windows of the same training step, in µs, at a small and a large batch, and the
    share of the large one the device was busy (None where the trace has no device row: a CPU)."""
    small, large = units.seconds(small_us * 1e-6), units.seconds(large_us * 1e-6)
    if large_busy is None:
        here = (
            f"no device row: batch {large_batch}'s ops did their own work on the host thread, its "
            f"window {units.ratio(large_us / small_us, decimals=1)} batch {small_batch}'s ({large} "
            f"against {small})"
        )
        why = (
            "nothing can run ahead here: a CPU op does its work before it returns, so the next op "
            "waits for it and overhead and work add; on a GPU the host only queues each kernel and "
            "moves on"
        )
        return Verdict("async-hides-overhead", False, here, why)
    hidden = overhead_hidden(small_us, large_us, large_busy)
    serial = units.seconds((small_us + large_busy * large_us) * 1e-6)
    here = (
        f"batch {large_batch}: device busy {units.percent(large_busy, (ASYNC_BUSY_MIN,))} of "
        f"{large}, against batch {small_batch}'s {small} of dispatch; one after the other they "
        f"would take {serial}: {units.percent(hidden, (ASYNC_HIDDEN_MIN,))} of the overhead ran "
        "under the kernels"
    )
    if large_busy < ASYNC_BUSY_MIN:
        why = (
            "the kernels did not outlast the overhead: the device sat idle "
            f"{units.percent(1 - large_busy)} of the window, waiting for the host"
        )
        return Verdict("async-hides-overhead", False, here, why)
    if hidden < ASYNC_HIDDEN_MIN:
        why = "the host's overhead added to the kernels' time instead of running under it"
        return Verdict("async-hides-overhead", False, here, why)
    why = (
        "the host queued the next kernels while the device ran them, so most of its dispatch cost "
        "no time"
    )
    return Verdict("async-hides-overhead", True, here, why)


# A doubling that adds under 25% to the step time is flat. The last doubling must not be: a step
# that never grows shows nothing. (It once had to add over 50%, and the recorded H100, flat at 1.17x
# and 64.5x its roofline time, read "did not hold" for a last doubling of 1.499x.)
FLAT_DOUBLING_MAX = 1.25


@_judge("batch-doubling")
def judge_batch_doubling(
    first_ratio: float, first_over_roofline: float, last_ratio: float
) -> Verdict:
    """Step-time ratios of the first and last doublings; the first step's time over its roofline
    time."""
    here = (
        f"first doubling {_ratio(first_ratio, 1.25)} the time, at "
        f"{units.beside(first_over_roofline, 1, (2,))}x its roofline time; last doubling "
        f"{_ratio(last_ratio, FLAT_DOUBLING_MAX)}"
    )
    if first_ratio >= FLAT_DOUBLING_MAX:
        return Verdict("batch-doubling", False, here, "the smallest batch was not flat")
    if first_over_roofline < 2:
        return Verdict(
            "batch-doubling",
            False,
            here,
            "the flat step was within 2x of its roofline time: flat from intensity, not overhead "
            "(the essay's footnote)",
        )
    if last_ratio < FLAT_DOUBLING_MAX:
        return Verdict(
            "batch-doubling",
            False,
            here,
            "the step stayed flat up to the largest batch: nothing showed it grow with the work",
        )
    return Verdict(
        "batch-doubling",
        True,
        here,
        "flat while far above the roofline (overhead), then scaling with the work",
    )


@_judge("compile-removes-overhead")
def judge_compile_overhead(speedup: float) -> Verdict:
    """torch.compile's speedup over eager on 50 tiny pointwise ops."""
    here = f"compiled {_ratio(speedup, 2)} faster than eager on 50 tiny ops"
    if speedup >= 2:
        return Verdict("compile-removes-overhead", True, here, "one dispatch instead of fifty")
    return Verdict(
        "compile-removes-overhead", False, here, "the compiled call's own overhead ate the gain"
    )


REMAT_TIME_NOISE = (
    0.02  # the least a speedup must exceed 1 by to count as time that fell, not noise
)


@_judge("remat-memory-and-time")
def judge_rematerialization(
    memory_factor: float, speedup: float, noise: float = REMAT_TIME_NOISE
) -> Verdict:
    """Everything-saved over recomputed: peak memory ratio and step-time ratio (above 1: recomputing
    won).

    ``noise``: the two timings' own spread (``Split.remat_noise``). The claim is memory *and*
    runtime: a speedup within the noise is not less time, and the claim did not hold (a page once
    said "less time too" at 1.03x, inside its own noise; the ledger once said "held" at 1.00x)."""
    noise = max(noise, REMAT_TIME_NOISE)
    here = (
        f"recomputation {_ratio(memory_factor, 1.1)} less peak memory, "
        f"{_ratio(speedup, 1 + noise)} the speed of the same compiled code with everything saved"
    )
    if memory_factor < 1.1:
        return Verdict(
            "remat-memory-and-time", False, here, "recomputing saved under 10% of the peak memory"
        )
    if speedup < 1:
        return Verdict(
            "remat-memory-and-time",
            False,
            here,
            "less memory, but recomputation cost time here: the recomputed ops were not free",
        )
    if speedup < 1 + noise:
        return Verdict(
            "remat-memory-and-time",
            False,
            here,
            "less memory at no cost in time, but not less time: the step did not get faster "
            f"beyond the timings' own {units.percent(noise)} noise",
        )
    return Verdict("remat-memory-and-time", True, here, "less memory, and less time too")


def glue_key(key: str, field: str) -> str:
    if key not in CLAIMS:
        raise KeyError(f"no claim {key!r}; known: {sorted(CLAIMS)}")
    if field not in FIELDS:
        raise KeyError(f"no field {field!r}; fields: {FIELDS}")
    return f"claim-{key}-{field}"


class Text:
    """A glued string shown as itself: ``{glue:text}`` renders text/plain, which is ``repr()``."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def values(verdict: Verdict, stamp: str, gpus: list[Recorded]) -> dict[str, str]:
    """The texts glued for ``verdict``, by field; ``gpus``: the claim's records
    (:func:`claim_records`)."""
    claim = CLAIMS[verdict.key]
    return {
        "statement": claim.statement,
        "essay": claim.essay,
        "here": verdict.here,
        "verdict": verdict.word,
        "why": verdict.why,
        "stamp": stamp,
        "recorded": recorded_sentence(gpus),
        "figures": json.dumps(verdict.figures),
    }


def glue_text(key: str, text: str) -> None:
    """Glue ``text`` for ``{glue:text}`` roles in the book; outside the book (no myst_nb), do
    nothing."""
    try:
        from myst_nb import glue
    except ImportError:  # Colab, a plain kernel: the notebook's printed lines are enough
        return
    glue(key, Text(text), display=False)


def held_there(values: dict) -> str:
    return (
        "held there" if values["held"] else "did not hold there"
    )  # "here" is always the page's machine


def claim_records(key: str, folder=None) -> list[Recorded]:
    """What each committed GPU record holds for claim ``key``, judged again by today's rule where
    the record holds the figures to judge (:func:`judged_again`): a rule changed since a record was
    made changes its label there too, as it does here. A record that holds no verdict for the claim
    but the section it is judged from (:data:`_DERIVED`) shows the verdict judged from that section,
    after the records that hold one."""
    section = _DERIVED[key][0] if key in _DERIVED else None
    sections = {gpu.device: gpu for gpu in recorded(section, folder)} if section else {}
    found = []
    for gpu in recorded(f"claims/{key}", folder):
        derived = sections.pop(gpu.device, None)
        again = judged_again(key, gpu.values, derived.values if derived else None)
        found.append(replace(gpu, values=asdict(again)) if again else gpu)
    for gpu in sections.values():
        again = judged_again(key, {}, gpu.values)
        found += [replace(gpu, values=asdict(again))] if again else []
    return found


def _fusion_from_cos_cos(section: dict, claim: dict) -> dict | None:
    """fusion-cuts-bytes from a record's ``cos-cos`` figures: the same compiled cosine in two
    kernels is two passes of compiled ``x.cos()``, against the fused ``x.cos().cos()``; with the
    cheap chain's speedup where the record's verdict kept it (a verdict recorded when this claim was
    judged on the chain)."""
    try:
        one, fused = (
            section[label]["seconds"] for label in ("compiled x.cos()", "compiled x.cos().cos()")
        )
    except (KeyError, TypeError):
        return None
    figures = {"cos_cos_fusion": 2 * one / fused}
    old = claim.get("figures") or {}
    if old.get("passes_saved") == 3 and "fusion_speedup" in old:
        figures["chain_fusion"] = old["fusion_speedup"]
    return figures


def _growth_from_roofline(section: dict, claim: dict) -> dict | None:
    """compute-grows-faster from a record's Lab 1 roofline: today's datasheets, beside the ridge
    point that GPU measured (its 16-bit matmul peak over its copy bandwidth)."""
    if "ridge_point" not in section:
        return None
    return {
        "generations": datasheet_generations(),
        "ridge_measured": section["ridge_point"],
        "measured": "Lab 1's 16-bit matmul peak over its copy bandwidth",
    }


def _async_from_traces(section: dict, claim: dict) -> dict | None:
    """async-hides-overhead from a record's notebook 32 figures: each batch's profiled window and
    the share of it the device sat idle (a trace without a device row: no busy share)."""
    try:
        small, large = section["small"], section["large"]
        return {
            "small_batch": small["batch"],
            "large_batch": large["batch"],
            "small_us": small["window_us"],
            "large_us": large["window_us"],
            "large_busy": 1 - large["idle_fraction"] if large["device_row"] else None,
        }
    except (KeyError, TypeError):
        return None


# Claims whose recorded verdict can be judged from another section of the same record: (section,
# figures from the section and the claim's recorded values, or None where the section lacks them).
_DERIVED: dict[str, tuple[str, Callable[[dict, dict], dict | None]]] = {
    "fusion-cuts-bytes": ("cos-cos", _fusion_from_cos_cos),
    "compute-grows-faster": ("lab-01-roofline", _growth_from_roofline),
    "async-hides-overhead": ("overhead/profiler-traces", _async_from_traces),
}
# Records made before a verdict carried its figures (the H100's of 2026-11-24) hold them in its
# sentence only.
_FIGURES_IN_HERE = {
    "batch-doubling": (
        re.compile(
            r"first doubling ([\d.]+)x the time, at ([\d.]+)x its roofline time; "
            r"last doubling ([\d.]+)x"
        ),
        ("first_ratio", "first_over_roofline", "last_ratio"),
    ),
}


def judged_again(key: str, values: dict, section: dict | None = None) -> Verdict | None:
    """Claim ``key``'s recorded verdict (``values``; empty where the record holds none) judged again
    by today's rule: from the figures it was judged on, else from ``section`` (its :data:`_DERIVED`
    section of the same record) or, for a record older than verdicts' figures, from its sentence;
    None where the record holds none of them or only arguments of an older judge."""
    again = _recompute_or_none(key, values.get("figures"))
    if again is None and key in _DERIVED and section:
        again = _recompute_or_none(key, _DERIVED[key][1](section, values))
    if again is None and key in _FIGURES_IN_HERE:
        pattern, names = _FIGURES_IN_HERE[key]
        found = pattern.search(values.get("here", ""))
        again = _recompute_or_none(
            key, dict(zip(names, map(float, found.groups()))) if found else None
        )
    return again


def _recompute_or_none(key: str, figures: dict | None) -> Verdict | None:
    """:func:`recompute`, or None where there are no figures or they are an older judge's
    arguments."""
    if not figures:
        return None
    try:
        return recompute(key, figures)
    except TypeError:  # the figures of an older judge's arguments
        return None


def recorded_sentence(gpus: list[Recorded]) -> str:
    """What the recorded GPUs measured for a claim (its :func:`claim_records`), in one sentence, or
    that none did."""
    if not gpus:
        return "No recorded GPU has measured this claim yet."
    return " ".join(
        f"On the recorded {gpu.device}: {gpu.values['here']} ({held_there(gpu.values)}, "
        f"{gpu.env.get('date', '?')})."
        for gpu in gpus
    )


def beside(verdict: Verdict, stamp: str, gpus: list[Recorded]) -> Beside:
    """``verdict`` as measured here, beside each recorded GPU's (its :func:`claim_records`) and the
    essay's figure."""
    claim = CLAIMS[verdict.key]
    return three_machines(
        claim.statement,
        f"{verdict.word.capitalize()}: {verdict.here}; {verdict.why}",
        stamp,
        [(gpu, f"{gpu.values['here']} ({held_there(gpu.values)})") for gpu in gpus],
        claim.essay,
    )


def publish(verdict: Verdict, stamp: str | None = None) -> Verdict:
    """Show ``verdict`` once, as its card: each recorded GPU with its stamp, this machine's verdict,
    figure and reason with its stamp, and the essay's figure; glue it for the ledger, record it for
    the GPU reference.

    ``stamp``: the one the measurement was taken under, where it differs from this
    process's (the overhead notebooks time on one thread inside their helpers).
    """
    stamp = stamp or current_stamp()
    gpus = claim_records(verdict.key)  # read once: the table and the glue share it
    show(beside(verdict, stamp, gpus))
    for name, text in values(verdict, stamp, gpus).items():
        glue_text(glue_key(verdict.key, name), text)
    reference.record(f"claims/{verdict.key}", asdict(verdict))
    reference.record_check(
        "claim",
        verdict.key,
        verdict=verdict.word,
        value=verdict.here,
        bound=CLAIMS[verdict.key].statement,
    )
    return verdict


def reference_figures(claims: dict[str, Claim] = CLAIMS, folder=None) -> dict[str, str]:
    """Per claim, what the committed GPU reference files recorded for it, or that none did."""
    return {
        key: "; ".join(
            f"{gpu.device}: {gpu.values['here']} ({held_there(gpu.values)})"
            for gpu in claim_records(key, folder)
        )
        or "none recorded"
        for key in claims
    }


def reference_summary(folder=None) -> str:
    """One line per committed GPU reference file, or a plain statement that there is none."""
    recorded = reference.load_all(folder)
    if not recorded:
        where = "brrr/data/reference" if folder is None else folder
        return (
            f"No GPU reference is committed yet: {where}/ holds no JSON file. "
            "Run `make gpu-check` on a GPU node and commit its file to fill the column."
        )
    lines = []
    for name, data in recorded.items():
        claims = sorted(
            key.split("/", 1)[1] for key in data.get("figures", {}) if key.startswith("claims/")
        )
        lines.append(
            f"{name}.json: {len(claims)} of {len(CLAIMS)} claims recorded"
            + (f" ({', '.join(claims)})" if claims else "")
        )
    return "\n".join(lines)
