"""Fixes that fit the regimes found, each with the gain the measurement allows, best first.

Every predicted gain is an Amdahl bound, ``1 / (1 - saved)``, where ``saved`` is
the share of the step a fix can remove at most, read from the measurement:

overhead
    ``f``, the overhead share (time between ops, or the device idle waiting on
    the host, plus the time of ops too small to leave the dispatch floor). On a
    GPU, compiling and capturing a CUDA graph remove at most the idle time spent
    waiting on the host, ``h``: at most ``1/(1-h)``. On a CPU the compiled step
    still pays one compiled call (measured here, :func:`compiled_call_seconds`)
    its contractions, which compiled code hands to the same matmul library, and
    one dispatch of a fused kernel per contraction (:func:`compile_gain`).
memory-bound element-wise and normalization ops
    share ``s`` of the step, ``k`` calls per step. Fused into one kernel, they still
    read the chain's input and write its output once: at least one call's traffic
    of the ``k`` (the essay's chain of pointwise ops, each reading and writing the
    same tensor). Fusion saves at most ``s·(1 - 1/k)``.
compute-bound contractions
    share ``c`` of the step, running at ``a`` of the measured matmul peak of their
    dtype. Reaching the peak saves at most ``c·(1 - a)``; on a GPU with tensor
    cores, fp32 matmuls moved to bf16 (or TF32) save at most ``c·(1 - P32/P16)``
    with both peaks measured here; on a CPU the same, where its measured bf16 peak
    beats fp32's (bf16 matrix instructions), and nothing where it does not.
memory-bound contractions
    share ``m``, at ``b`` of the copy bandwidth (depthwise and grouped convolutions):
    reaching the copy bandwidth saves at most ``m·(1 - b)``.
random numbers, sorting and indexing far below both roofs
    share ``r``: only doing less of them helps, at most ``1/(1-r)``.

The advice for the step's own regime comes first, then the rest by gain
(:func:`ranked`). ``--try`` (:mod:`brrr.diagnose.trials`) adds each fix's measured gain
beside its bound and withdraws a fix measured slower (:func:`with_trials`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from brrr import units
from brrr.diagnose.ops import BELOW_ROOFS, FAR_BELOW
from brrr.opclasses import DEPTHWISE, OpClass
from brrr.roofline import Regime

# A regime worth a fix: its share of the step is at least this.
WORTH_FIXING = 0.1


@dataclass(frozen=True)
class Advice:
    """One fix: what to do and why (with the measured figures), the gain at most, the regime it
    targets."""

    text: str
    predicted_gain: float  # step time now / step time after the fix, at most
    regime: str
    basis: dict = field(
        default_factory=dict
    )  # the measured figures the gain was computed from, by name
    fix: str = ""  # the trial that measures it (brrr.diagnose.trials.TRIES), "" where none does
    measured_gain: float | None = (
        None  # what that trial measured on the step (--try), None if not tried
    )

    @property
    def gain(self) -> float:
        """The measured gain where the fix was tried, else the bound."""
        return self.measured_gain if self.measured_gain is not None else self.predicted_gain

    def to_json(self) -> dict:
        return asdict(self)


def amdahl(saved: float) -> float:
    """Speedup when a share ``saved`` of the time goes away."""
    return 1.0 / max(1.0 - saved, 1e-9)


def overhead_advice(
    share: float,
    between: float,
    launches: float,
    step_s: float,
    *,
    compiled: dict | None = None,
    already_compiled: bool = False,
) -> Advice:
    """``share``: the overhead share; ``between``: the share between ops (CPU) or of the device idle
    waiting on the host (GPU). On a GPU the gain is ``amdahl(between)``; on a CPU, ``compiled``
    holds :func:`compile_gain`'s measured arguments besides ``step_s`` and the gain is computed from
    them. A step that is ``already_compiled`` on a CPU keeps its overhead (the compiled call and its
    library calls): the advice is a bigger batch, with no gain in time per step (1.0)."""
    on_gpu = compiled is None
    if on_gpu:
        gain = amdahl(between)
        graph = "torch.compile(mode='reduce-overhead')" if already_compiled else "torch.compile"
        how = (
            f"compile it ({graph}) or capture a CUDA graph (torch.cuda.graphs), which removes the "
            f"device's {units.percent(between)} of idle waiting on the host at most, or grow the "
            "batch"
        )
    elif already_compiled:
        gain = 1.0
        how = (
            f"the step is already compiled: what remains is the compiled call itself (at least "
            f"{units.seconds(compiled['floor_s'])} here) and its library calls, which compiling "
            "again "
            "cannot remove. Grow the batch: each call then carries more work for the same overhead "
            "(time per step stays, throughput grows)"
        )
    else:
        gain = compile_gain(step_s, **compiled)
        how = (
            f"compile it (torch.compile): the step becomes one compiled call, at least "
            f"{units.seconds(compiled['floor_s'])} here, plus all its contractions, which stay "
            f"library calls ({units.percent(compiled['kept_share'])} of the step), each followed "
            "by a fused "
            "kernel; or grow the batch. CUDA graphs do not apply on a CPU: there are no kernel "
            "launches to replay, every op runs on the calling thread"
        )
    where = "device idle waiting on the host" if on_gpu else "between ops"
    return Advice(
        f"overhead-bound: {units.percent(share)} of the step is overhead ({units.percent(between)} "
        f"{where}, the rest in ops whose work is shorter than dispatching them; {launches:.0f} "
        f"launches per step); {how}; at most {gain:.1f}x per step",
        gain,
        Regime.OVERHEAD.value,
        {"step_s": step_s, "overhead_share": share, **(compiled or {})},
        fix="batch" if already_compiled and not on_gpu else "compile",
    )


def compile_gain(
    step_s: float, kept_share: float, floor_s: float, library_calls: float, dispatch_s: float
) -> float:
    """On a CPU, the compiled step takes at least: one compiled call (``floor_s``, measured); the
    contractions' share of today's step (``kept_share``), since compiled code calls the same matmul
    library; and, for each of those ``library_calls``, one dispatch (``dispatch_s``, measured) of
    the fused kernel that follows it (the ops between two library calls cannot join either)."""
    return step_s / (floor_s + kept_share * step_s + library_calls * dispatch_s)


def fusion_advice(share: float, calls: float) -> Advice:
    saved = share * (1 - 1 / max(calls, 1.0))
    gain = amdahl(saved)
    if calls <= 1:
        return Advice(
            f"memory-bound element-wise and normalization work takes {units.percent(share)} of the "
            "step in one "
            "fused call: it already reads and writes memory once, so fusion has nothing left to "
            "save. Only fewer bytes (a smaller dtype, less data) make it faster: at most 1.00x "
            "from fusion",
            gain,
            Regime.MEMORY.value,
        )
    return Advice(
        f"memory-bound element-wise and normalization ops take {units.percent(share)} of the step "
        f"in {calls:.0f} calls: fusion (torch.compile) makes them read and write memory once, "
        f"saving at most {units.percent(saved)} of the step: at most {gain:.2f}x",
        gain,
        Regime.MEMORY.value,
        fix="compile",
    )


def contraction_advice(
    share: float, peak_fraction: float, dtype: str, ceilings, on_gpu: bool, tensor_cores: bool
) -> list[Advice]:
    found = []
    tuned = amdahl(share * (1 - min(peak_fraction, 1.0)))
    found.append(
        Advice(
            f"compute-bound: the contractions above the ridge take {units.percent(share)} of the "
            f"step at {units.percent(peak_fraction)} of the measured {dtype} matmul peak "
            f"({units.flops(ceilings.matmul(dtype))}); larger or better-shaped matmuls can gain at "
            f"most {tuned:.2f}x",
            tuned,
            Regime.COMPUTE.value,
        )
    )
    if dtype in ("float32", "tf32") and on_gpu and tensor_cores:
        fast = max(ceilings.matmul_peak.get("bfloat16", 0.0), ceilings.matmul_peak.get("tf32", 0.0))
        if fast > ceilings.matmul(dtype):
            gain = amdahl(share * (1 - ceilings.matmul(dtype) / fast))
            found.append(
                Advice(
                    f"fp32 matmuls on tensor-core hardware: bf16 (torch.autocast) or TF32 "
                    f"(torch.backends.cuda.matmul.allow_tf32 = True) run at {units.flops(fast)} "
                    f"measured against {units.flops(ceilings.matmul(dtype))}: at most {gain:.1f}x",
                    gain,
                    Regime.COMPUTE.value,
                    fix="bf16",
                )
            )
    elif not on_gpu and dtype == "float32":
        found += cpu_bf16_advice(share, ceilings)
    return found


def cpu_bf16_advice(share: float, ceilings) -> list[Advice]:
    """bf16 matmuls on a CPU, decided by the two measured peaks: faster where the CPU has bf16
    matrix instructions (AMX, AVX512-BF16), slower where torch emulates them. Nothing where bf16 was
    not measured."""
    bf16, fp32 = ceilings.matmul_peak.get("bfloat16"), ceilings.matmul("float32")
    if not bf16:
        return []
    measured = (
        f"this CPU's measured bf16 matmul peak is {units.flops(bf16)} against "
        f"{units.flops(fp32)} for float32"
    )
    if bf16 > fp32:
        saved = share * (1 - fp32 / bf16)
        return [
            Advice(
                f"fp32 matmuls on a CPU with bf16 matrix instructions: {measured}, so bf16 "
                f"(torch.autocast('cpu', torch.bfloat16)) saves at most {units.percent(saved)} of "
                f"the step: at most {amdahl(saved):.2f}x",
                amdahl(saved),
                Regime.COMPUTE.value,
                fix="bf16",
            )
        ]
    return [
        Advice(
            f"{measured}: bf16 would slow its matmuls down, so keep float32 here",
            1.0,
            Regime.COMPUTE.value,
            fix="bf16",
        )
    ]


def advise(
    shares: dict[str, float],
    rows,
    dtype: str,
    ceilings,
    *,
    overhead: Advice | None,
    on_gpu: bool,
    tensor_cores: bool,
    channels_last: bool = False,
) -> list[Advice]:
    """Ranked advice for a step with regime ``shares`` (fractions), op ``rows``, its matmul
    ``dtype``, and the ``overhead`` advice where overhead holds at least :data:`WORTH_FIXING` of the
    step. ``channels_last``: its convolutions already run in that layout."""
    found: list[Advice] = [overhead] if overhead is not None else []
    pointwise = [
        row
        for row in rows
        if row.regime == Regime.MEMORY.value
        and row.op_class in (OpClass.ELEMENTWISE.value, OpClass.NORMALIZATION.value)
    ]
    pointwise_share = _share_in(shares, rows, pointwise, Regime.MEMORY.value)
    if pointwise and pointwise_share >= WORTH_FIXING:
        found.append(fusion_advice(pointwise_share, sum(row.calls for row in pointwise)))
    contractions = [
        row
        for row in rows
        if row.regime == Regime.COMPUTE.value and row.op_class == OpClass.CONTRACTION.value
    ]
    contraction_share = _share_in(shares, rows, contractions, Regime.COMPUTE.value)
    if contractions and contraction_share >= WORTH_FIXING:
        seconds = sum(row.seconds for row in contractions)
        rate = sum(row.flops for row in contractions) / seconds if seconds > 0 else 0.0
        found += contraction_advice(
            contraction_share, rate / ceilings.matmul(dtype), dtype, ceilings, on_gpu, tensor_cores
        )
    slow = [
        row
        for row in rows
        if row.regime == Regime.MEMORY.value and row.op_class == OpClass.CONTRACTION.value
    ]
    slow_share = _share_in(shares, rows, slow, Regime.MEMORY.value)
    if slow and slow_share >= WORTH_FIXING:
        found.append(memory_bound_contraction_advice(slow_share, slow, on_gpu))
    if not channels_last:
        found = with_layout(found, channels_last_advice(rows, sum(r.seconds for r in rows), on_gpu))
    below = shares.get(BELOW_ROOFS, 0.0)
    if below >= WORTH_FIXING:
        found.append(below_roofs_advice(below, [row for row in rows if row.regime == BELOW_ROOFS]))
    return ranked(found, max(shares, key=shares.get))


def _share_in(shares: dict[str, float], rows, members, regime: str) -> float:
    """The share of the step that ``members`` (rows of ``regime``) hold: the regime's share, split
    by their time among all its rows'."""
    inside = sum(row.seconds for row in rows if row.regime == regime)
    return shares[regime] * sum(row.seconds for row in members) / max(inside, 1e-30)


def ranked(advice: list[Advice], regime: str) -> list[Advice]:
    """The advice for the step's own regime first (the time it holds is where a fix can gain most,
    and a bound on a smaller share, however high, was measured slower in practice: torch.compile on
    a compute-bound transformer, 0.6-0.8x), then by gain: the measured gain where ``--try`` measured
    one, else the bound. Advice that promises nothing ("keep float32 here", work already fused)
    comes last."""
    return sorted(
        advice, key=lambda item: (item.predicted_gain <= 1.0, item.regime != regime, -item.gain)
    )


def memory_bound_contraction_advice(share: float, rows, on_gpu: bool) -> Advice:
    """Convolutions or matmuls below the ridge (depthwise and grouped convolutions, skinny matmuls):
    few FLOPs per byte, so bytes set their time; reaching the copy bandwidth saves at most
    ``share·(1 - b)``. The text names only what the rows are: convolutions get the layout, matmuls
    the batch."""
    seconds = sum(row.seconds for row in rows)
    fraction = (
        min(sum(row.bytes for row in rows) / seconds / rows[0].bandwidth, 1.0)
        if seconds > 0
        else 0.0
    )
    gain = amdahl(share * (1 - fraction))
    names = ", ".join(row.name for row in sorted(rows, key=lambda row: -row.seconds)[:3])
    convolutions = [row for row in rows if is_convolution(row.name)]
    if convolutions:
        kind = (
            "Depthwise convolutions"
            if any(r.name.endswith(DEPTHWISE) for r in rows)
            else ("Grouped or small convolutions")
        )
        layout = "cuDNN" if on_gpu else "oneDNN"
        how = (
            f"{kind} do few FLOPs per byte; a layout {layout} runs natively (model and inputs "
            ".to(memory_format=torch.channels_last)) and fewer bytes (a smaller dtype) are what "
            "move them"
        )
    else:
        how = (
            "Matmuls this skinny read each weight for a few rows only; a bigger batch (more rows "
            "per weight read) and fewer bytes (a smaller dtype) are what move them"
        )
    return Advice(
        f"memory-bound contractions ({names}): {units.percent(share)} of the step below the ridge, "
        f"at {units.percent(fraction)} of the copy bandwidth. {how}; at most {gain:.2f}x",
        gain,
        Regime.MEMORY.value,
        fix="channels_last" if convolutions else "",
    )


def is_convolution(name: str) -> bool:
    return "conv" in name and not name.startswith("autograd")


# Convolutions dominate a step when they hold at least this share of the time inside its ops: there
# the layout they run in is worth measuring (a depthwise net's convolutions measured 1.69x in
# channels_last on a user's CPU, and the report had never said so).
CONVOLUTIONS_DOMINATE = 1 / 3


def channels_last_advice(rows, inside_ops_s: float, on_gpu: bool) -> Advice | None:
    """Where convolutions dominate (:data:`CONVOLUTIONS_DOMINATE`) and run in the default (NCHW)
    layout: channels_last, the layout oneDNN and cuDNN run natively. A layout moves no convolution
    past its roof, so the bound is each convolution reaching its own (the compute roof or the copy
    bandwidth, whichever it is nearer), as its share of the time inside ops; ``--try channels_last``
    measures it."""
    convolutions = [row for row in rows if is_convolution(row.name)]
    share = sum(row.seconds for row in convolutions) / inside_ops_s if inside_ops_s > 0 else 0.0
    if share < CONVOLUTIONS_DOMINATE:
        return None
    saved = sum(
        row.seconds / inside_ops_s * (1 - min(max(row.flops_fraction, row.bandwidth_fraction), 1.0))
        for row in convolutions
    )
    library = "cuDNN" if on_gpu else "oneDNN"
    return Advice(
        f"convolutions take {units.percent(share)} of the time inside ops, in the default (NCHW) "
        f"layout: {library} runs channels_last natively "
        "(model.to(memory_format=torch.channels_last) and the same for the inputs), which often "
        "runs them faster, depthwise ones most; "
        f"--try channels_last measures it on this step; at most {amdahl(saved):.2f}x, each "
        "convolution at its roof",
        amdahl(saved),
        Regime.MEMORY.value
        if any(row.regime == Regime.MEMORY.value for row in convolutions)
        else Regime.COMPUTE.value,
        fix="channels_last",
    )


def with_layout(found: list[Advice], layout: Advice | None) -> list[Advice]:
    """``found`` with the channels_last advice (None: none to give): folded into the contractions'
    own advice where one covers the same convolutions (the layout is one way to bring them nearer
    their roof, not a second saving), else added as advice of its own."""
    if layout is None or any(item.fix == "channels_last" for item in found):
        return found
    for index, item in enumerate(found):
        if item.text.startswith(("compute-bound: the contractions", "memory-bound contractions")):
            sentence = layout.text.split("; at most")[0]
            found[index] = replace(item, text=f"{item.text}. Of them, {sentence}")
            return found
    return found + [layout]


def below_roofs_advice(share: float, rows) -> Advice:
    """Random numbers, sorting and indexing far below both roofs: only doing less of them helps."""
    names = ", ".join(row.name for row in sorted(rows, key=lambda row: -row.seconds)[:3])
    return Advice(
        f"{units.percent(share)} of the step is random numbers, sorting or indexing ({names}) at "
        f"under {units.percent(FAR_BELOW)} of both the compute roof and the copy bandwidth: their "
        "speed is the "
        "random-number generator's or irregular memory access, which neither fusion nor faster "
        "matmuls change. Only doing less of it helps (dropout's random draws are the usual case: "
        "--try dropout "
        f"measures what they cost); at most {amdahl(share):.2f}x if it all went away",
        amdahl(share),
        BELOW_ROOFS,
        fix="dropout",
    )


def with_trials(advice: list[Advice], trials, regime: str) -> list[Advice]:
    """The advice with what ``--try`` measured: each fix's measured gain beside its bound; a fix
    measured slower, or with no measurable gain (its readings straddle 1), is no advice (it stays in
    the trials, with its interval); a fix that measured faster with no advice to carry it (bf16
    where the peaks said keep float32, a bigger batch) becomes advice with its measurement. Dropout
    off is never advice: it changes the model. Ranked as :func:`ranked` ranks, for the step's
    ``regime``."""
    measured = {trial.name: trial for trial in trials if trial.gain is not None}
    out = []
    for item in advice:
        trial = measured.get(item.fix)
        if trial is None or item.fix == "dropout":
            out.append(item)
        elif item.predicted_gain > 1.0 and trial.faster:  # a fix, measured faster
            out.append(replace(item, measured_gain=trial.gain))
        elif item.predicted_gain <= 1.0 and not trial.faster:
            # advice against a fix ("keep float32"): confirmed, or at least not refuted
            out.append(replace(item, measured_gain=trial.gain if trial.slower else None))
    covered = {item.fix for item in out if item.measured_gain is not None}
    for name, trial in measured.items():
        if name in covered or name == "dropout" or not trial.faster:
            continue
        out.append(
            Advice(
                f"{trial.what}: measured {trial.gain:.2f}x "
                f"{'examples per second' if name == 'batch' else 'per step'} "
                "on this step (tried with --try; no bound: the measurement is the case for it)",
                trial.gain,
                Regime.OVERHEAD.value if name in ("batch", "compile") else Regime.COMPUTE.value,
                {"measured_only": True},
                fix=name,
                measured_gain=trial.gain,
            )
        )
    return ranked(out, regime)
