"""Lab 5, "tile it": how it is graded (the task is in :mod:`brrr.labs.tile_it`).

Grading happens in the grader process (:mod:`brrr.grading.server`), thresholds
from :mod:`brrr.checks.thresholds`. As in Labs 2 and 3 the student's wrapper is
only asked which kernels it launches; the grader checks the kernel's source
(Triton only), builds it itself and replays it on its own tensors:

- ``prediction`` (any device): the bytes and the arithmetic intensity of two
  given tilings at :data:`PREDICTION_SHAPE`, by the rule; a wrong number is
  named, with the rule, not the answer.
- ``correct`` (any device): fresh inputs at shapes that are a multiple of no
  tile (100×50 @ 50×70, 257×129 @ 129×65) and one that is, float32 and float16
  (the reference is a float32 matmul cast to the output's dtype); a float16
  case with K = 6,000 and values in [0, 1), where a float16 accumulator lands
  outside the tolerance (:data:`LONG_K`); NaN-filled outputs; every load and store in bounds.
- ``traffic`` (CPU): counted in the interpreter at two shapes drawn per
  submission in the grader process (:func:`traffic_shapes`, M, N and K odd: a
  multiple of no tile), never a published one. At each, the bytes must equal
  what the launched tiling implies (``BLOCK_M`` and ``BLOCK_N`` read from the
  recorded launch, the grid checked against them), and each launched tiling,
  weighed at :data:`TILING_SHAPE` (256³, where the threshold is stated), at most
  a stated multiple of the minimum (``a`` and ``b`` read once, ``out`` written
  once). A tiling past the multiple is refused from the launch alone, before
  anything runs, with the arithmetic intensity it reaches.
- ``peak_4096``, ``peak_8192`` (GPU): bfloat16 (float16 on a T4) at 4096³ and 8192³ at no less
  than a stated fraction of the bfloat16 matmul peak that
  :func:`brrr.ceilings.measure_matmul_peak` (``torch.mm``) reaches in the same run.
- ``grouped_order`` (GPU): at 8192³ the student's kernel, launched with its own
  ``GROUP_M`` (more than 1), is no slower than the same kernel launched with
  ``GROUP_M = 1``, within a stated noise margin. Every timed output is checked
  afterwards.
"""

from __future__ import annotations

import copy
import math

import torch

from brrr import counting
from brrr.checks import core, isolation, thresholds
from brrr.device import ON_GPU, per_device
from brrr.labs.tile_it import LAB
from brrr.labs.tile_it.given import (
    PREDICTION_SHAPE,
    PREDICTION_TILINGS,
    Shape,
    TIMED_DTYPE,
    asymptotic_intensity,
    intensity,
    make_inputs,
    matmul_reference,
    minimum_bytes,
)

# What the checks compare a student's answer with: here only, out of the student's reach
# (tests/test_layers.py).
GRADER_REFERENCES = ("tiled_bytes", "reference_prediction")

CHECKS = {
    "cpu": ("prediction", "correct", "traffic"),
    "gpu": ("prediction", "correct", "peak_4096", "peak_8192", "grouped_order"),
}
ALL_CHECKS = ("prediction", "correct", "traffic", "peak_4096", "peak_8192", "grouped_order")

# The constexpr arguments the lab's kernel takes: the grader reads the tiling from them.
TILE_ARGS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
PREDICTION_RULES = (
    "a is read once per column of output tiles: ⌈N / BLOCK_N⌉ times",
    "b is read once per row of output tiles: ⌈M / BLOCK_M⌉ times",
    "out is written once, and nothing else moves",
    "every element is of the inputs' dtype (float16: 2 bytes)",
    "the arithmetic intensity is 2·M·N·K FLOPs over those bytes",
)


def tiled_bytes(shape: Shape, block_m: int, block_n: int) -> dict[str, int]:
    """Bytes per tensor that a ``block_m × block_n`` tiling moves, by the lab's rule: the grader's
    reference, which the student's process cannot import (here, and ``brrr.counting``, are not in
    its copy).

    ``a`` is read once per column of tiles (⌈n / block_n⌉ times), ``b`` once per
    row of tiles (⌈m / block_m⌉ times), ``out`` written once
    (:func:`brrr.counting.tiled_matmul_bytes`).
    """
    return counting.tiled_matmul_bytes(
        shape.m, shape.n, shape.k, block_m, block_n, shape.element_size
    )


def tiling_key(block_m: int, block_n: int) -> str:
    """'128x64': how a tiling is named in the prediction's dict."""
    return f"{block_m}x{block_n}"


def reference_prediction() -> dict[str, dict[str, float]]:
    """The answer to the prediction, by :func:`tiled_bytes` (for the grader and the tests)."""
    result = {}
    for bm, bn in PREDICTION_TILINGS:
        nbytes = sum(tiled_bytes(PREDICTION_SHAPE, bm, bn).values())
        result[tiling_key(bm, bn)] = {
            "bytes": nbytes,
            "flop_per_byte": intensity(PREDICTION_SHAPE, nbytes),
        }
    return result


def diagnose(inputs, out: torch.Tensor) -> str | None:
    """A sentence on a known cause of a wrong output, where the case makes one likely."""
    a, b = inputs
    expected = matmul_reference(a, b).float()
    got = out.float()

    def within(rtol: float) -> bool:  # wrong, but by a rounding-sized error everywhere
        return bool(torch.isclose(got, expected, rtol=rtol, atol=rtol).all())

    if a.dtype == torch.float16 and a.shape[1] >= 1024 and within(2e-2):
        k = a.shape[1]
        step = 2.0 ** (math.floor(math.log2(k / 4)) - 10)  # float16's spacing near the outputs
        return (
            f"This case is float16 with K = {k:,} and values in [0, 1): each output is a sum of "
            f"{k:,} positive products, near {k // 4:,}, where float16 values are {step:g} apart, "
            "so a float16 accumulator loses part of every addition. Accumulate in float32 "
            "(`acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)`, `acc = tl.dot(a, b, acc)`) "
            "and convert to out's dtype only when you store."
        )
    if a.dtype == torch.float32 and ON_GPU and within(1e-2):
        return (
            "On a GPU, tl.dot on float32 inputs uses TF32 tensor cores by default (10 bits of "
            "mantissa). "
            'Pass `input_precision="ieee"` to tl.dot for a float32 result.'
        )
    return None


SPEC = core.Spec(
    name="matmul",
    reference=matmul_reference,
    make_inputs=make_inputs,
    input_names=("a", "b"),
    out_name="out",
    describe=str,
    diagnose=diagnose,
)

# Shapes that are a multiple of no tile, one that is a multiple of the usual ones, float32 and
# float16, and a long K in float16 with non-negative values: float16 accumulation fails there,
# float32 passes. K = 6,000: outputs near 1,500, where float16 steps are 1 apart. A float16
# accumulator rounds at every step of the K loop: with BLOCK_K = 32 about a quarter of the 4,096
# outputs land outside the tolerance, with BLOCK_K = 128 about 100 and with 256 about 10, while
# float32 accumulation stays within a third of it (tests/labs/test_grading_tile_it.py simulates
# both).
LONG_K = Shape(64, 64, 6000, "float16", "unit")
_CASES = (
    Shape(100, 70, 50),
    Shape(257, 65, 129),
    Shape(256, 192, 128),
    Shape(100, 70, 50, "float16"),
    Shape(257, 65, 129, "float16"),
    LONG_K,
)
CORRECTNESS_CASES = per_device(
    cpu=_CASES,
    gpu=_CASES + (Shape(1031, 1000, 999, TIMED_DTYPE), Shape(2048, 2048, 2048, TIMED_DTYPE)),
)
BOUNDS_CASES = (
    Shape(100, 70, 50),
    Shape(33, 17, 45),
)  # GPU: also run in the interpreter at these, to check bounds


def prepare() -> None:
    """Import what the checks use now, in the grader process, before any student code runs."""
    import triton.language  # noqa: F401

    from brrr import ceilings, timing, traffic  # noqa: F401
    from brrr.checks import kernels  # noqa: F401

    _REFERENCE_PREDICTION.update(reference_prediction())


_REFERENCE_PREDICTION: dict[str, dict[str, float]] = {}


def not_applicable(check: str, device_class: str) -> str:
    if check == "traffic":
        return (
            "GPU: traffic is counted only in the Triton interpreter (on a CPU). Here the kernel is "
            "compiled, so the tiling is graded by time instead: see peak_4096, peak_8192 and "
            "grouped_order."
        )
    return (
        f"CPU: the {check} check runs on a GPU only. Here Triton runs in its interpreter, one "
        "program "
        "at a time in Python, so its time says nothing about the kernel; the traffic check grades "
        "what the tiling changes instead."
    )


# ---------------------------------------------------------------- prediction


def _prediction_mistakes(shape: Shape, bm: int, bn: int) -> dict[str, int]:
    """Bytes that known wrong readings of the rule give, by the mistake's description."""
    m, n, k, s = shape.m, shape.n, shape.k, shape.element_size
    cm, cn = math.ceil(m / bm), math.ceil(n / bn)
    return {
        "a read ⌈M / BLOCK_M⌉ times and b ⌈N / BLOCK_N⌉ times: swapped. Each program of a row of "
        "tiles reads the same strip of a, so a is read once per column of tiles": (
            m * k * cm + k * n * cn + m * n
        )
        * s,
        "N / BLOCK_N and M / BLOCK_M without rounding up: the last, partial tile is a whole "
        "program, and it reads whole strips": round((m * k * n / bn + k * n * m / bm + m * n) * s),
        "out left out: it is written once": (m * k * cn + k * n * cm) * s,
        "out read and written: the accumulator lives in registers, out is only written": (
            m * k * cn + k * n * cm + 2 * m * n
        )
        * s,
        "a and b read once: that is the minimum, which only one tile as large as the output "
        "reaches": (m * k + k * n + m * n) * s,
        "4 bytes per element: the inputs are float16, 2 bytes": (m * k * cn + k * n * cm + m * n)
        * 4,
        "elements, not bytes": m * k * cn + k * n * cm + m * n,
    }


def grade_prediction(student) -> str:
    """``predicted_traffic()``: for each tiling of :data:`PREDICTION_TILINGS` at
    :data:`PREDICTION_SHAPE`, ``{"bytes": ..., "flop_per_byte": ...}``, keyed ``"32x32"``,
    ``"128x64"``.

    Long: each tiling's bytes and intensity checked and explained, in the order a student reads
    them."""
    exact = thresholds.threshold(LAB, "prediction")
    close = thresholds.threshold(LAB, "prediction.intensity")
    reference = _REFERENCE_PREDICTION or reference_prediction()
    value = student.call(timeout_s=60)
    name = student.name
    keys = [tiling_key(bm, bn) for bm, bn in PREDICTION_TILINGS]
    if not isinstance(value, dict) or set(value) != set(keys):
        raise core.fail(
            f"{name}() must return a dict with the keys {', '.join(repr(k) for k in keys)} (one "
            f"per tiling); it returned {str(value)[:200]}"
        )
    shape = PREDICTION_SHAPE
    wrong = []
    for (bm, bn), key in zip(PREDICTION_TILINGS, keys):
        got = value[key]
        if not isinstance(got, dict) or set(got) != {"bytes", "flop_per_byte"}:
            raise core.fail(
                f"{name}()['{key}'] must be a dict with the keys 'bytes' and 'flop_per_byte'; it "
                f"is {str(got)[:120]}"
            )
        for field in ("bytes", "flop_per_byte"):
            number = got[field]
            if (
                isinstance(number, bool)
                or not isinstance(number, (int, float))
                or not math.isfinite(number)
                or number <= 0
            ):
                raise core.fail(
                    f"{name}()['{key}']['{field}'] must be a positive number; it is "
                    f"{str(number)[:80]}"
                )
        right = reference[key]
        bytes_ok = abs(got["bytes"] - right["bytes"]) <= exact.value * right["bytes"]
        intensity_ok = (
            abs(got["flop_per_byte"] - right["flop_per_byte"])
            <= close.value * right["flop_per_byte"]
        )
        if bytes_ok and intensity_ok:
            continue
        what = f"BLOCK_M × BLOCK_N = {bm} × {bn}: "
        if not bytes_ok:
            what += f"your bytes, {got['bytes']:,}, are wrong"
            for mistake, nbytes in _prediction_mistakes(shape, bm, bn).items():
                if nbytes == round(got["bytes"]):
                    what += f". They are what you get with {mistake}"
                    break
            consistent = (
                abs(got["flop_per_byte"] - shape.flops / got["bytes"])
                <= close.value * got["flop_per_byte"]
            )
            if not intensity_ok:
                what += (
                    "; your intensity follows from them (2·M·N·K / your bytes), so it is wrong "
                    "with them"
                    if consistent
                    else "; your intensity is wrong too: it is 2·M·N·K FLOPs over the bytes"
                )
            else:
                what += "; your intensity is right"
        else:
            what += (
                f"your bytes are right; your intensity, {got['flop_per_byte']:g} FLOP/B, is wrong: "
                "it is "
                "2·M·N·K FLOPs (a multiply and an add per term) over those bytes"
            )
            if (
                abs(got["flop_per_byte"] * 2 - right["flop_per_byte"])
                <= close.value * right["flop_per_byte"]
            ):
                what += ", and yours is half of that: count 2 FLOPs per multiply-add"
        wrong.append(what + ".")
    if wrong:
        raise core.fail(
            f"{name}() predicted the traffic of the tilings wrong, for M, N, K = {shape.m:,}, "
            f"{shape.n:,}, {shape.k:,} in {shape.dtype} (a is M × K, b is K × N, out is M × N).\n"
            + "\n".join(wrong)
            + "\nThe rule: "
            + "; ".join(PREDICTION_RULES)
            + "."
        )
    parts = [f"{k}: {value[k]['bytes']:,} B, {value[k]['flop_per_byte']:.4g} FLOP/B" for k in keys]
    return (
        f"{name}() predicted the traffic of both tilings at {shape}: {'; '.join(parts)} (bytes "
        f"{exact.describe()}, intensity {close.describe()})"
    )


# ---------------------------------------------------------------- correct


def drawn_correctness_cases(rng) -> tuple[Shape, ...]:
    """One more case drawn per submission (``rng`` from :func:`brrr.checks.core.size_drawer`): M, N,
    K odd."""
    return (
        Shape(
            core.unaligned(rng, 17, 129), core.unaligned(rng, 17, 129), core.unaligned(rng, 17, 129)
        ),
    )


def grade_correct(student) -> str:
    cases = tuple(CORRECTNESS_CASES) + drawn_correctness_cases(core.size_drawer()[0])
    result = core.check_kernels(student, SPEC, cases, bounds_sizes=BOUNDS_CASES)
    return core.correct_summary(
        student.name, "matmul_reference() (float32, cast to the output's dtype)", cases, result
    )


# ---------------------------------------------------------------- the tiling of a recorded launch


def launch_tiling(name: str, recipe: dict, shape: Shape) -> dict:
    """``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K``, ``GROUP_M`` and the programs of the one launch in
    ``recipe``.

    Fails (AssertionError) unless the wrapper launched one kernel, whose tile
    sizes are constexpr arguments named as in :data:`TILE_ARGS`, over one
    program per output tile.
    """
    launch, tiles, programs = core.one_launch(
        name,
        recipe,
        str(shape),
        "one matmul kernel, launched once, one program per output tile",
        TILE_ARGS,
        "the grader reads the tile sizes from them to know what traffic your tiling implies",
    )
    needed = math.ceil(shape.m / tiles["BLOCK_M"]) * math.ceil(shape.n / tiles["BLOCK_N"])
    if programs != needed:
        raise core.fail(
            f"{name} launched {programs:,} programs for {shape} with BLOCK_M × BLOCK_N = "
            f"{tiles['BLOCK_M']} × {tiles['BLOCK_N']}: one program per output tile is ⌈M / "
            f"BLOCK_M⌉ · ⌈N / BLOCK_N⌉ = {needed:,} (a one-dimensional grid, triton.cdiv(M, "
            "BLOCK_M) * "
            "triton.cdiv(N, BLOCK_N))."
        )
    return tiles | {"programs": programs, "kernel": launch.get("kernel")}


# ---------------------------------------------------------------- traffic (CPU)


def _roofline_sentence(shape: Shape, tiles: dict) -> str:
    bm, bn = tiles["BLOCK_M"], tiles["BLOCK_N"]
    return (
        f"A kernel's attainable speed is min(peak FLOP/s, intensity × bandwidth): below the ridge "
        f"point you measured in Lab 1 it is memory-bound, and its tiling, not its arithmetic, sets "
        f"its time. For large shapes a {bm} × {bn} tiling tends to 2 / (element size · (1/BLOCK_M "
        f"+ 1/BLOCK_N)) = {asymptotic_intensity(bm, bn, shape.element_size):.3g} FLOP/B in "
        f"{shape.dtype}, whatever the shape: "
        "larger tiles (64 × 64 and up) raise it."
    )


# Where a launched tiling is weighed against the threshold, whatever shape it was launched for: the
# ratio to the minimum depends on the shape, and the threshold is stated at this one
# (brrr.checks.thresholds).
TILING_SHAPE = Shape(256, 256, 256)


def traffic_shapes(rng) -> tuple[Shape, Shape]:
    """The shapes the traffic check counts at, drawn per submission (``rng`` from
    :func:`brrr.checks.core.size_drawer`, seeded in the grader process): M, N and K odd, so every
    tile of the edge is partial, one shape smaller and one larger than the usual 128-wide tiles."""
    return (
        Shape(
            core.unaligned(rng, 65, 191), core.unaligned(rng, 65, 191), core.unaligned(rng, 33, 191)
        ),
        Shape(
            core.unaligned(rng, 129, 223),
            core.unaligned(rng, 129, 223),
            core.unaligned(rng, 65, 223),
        ),
    )


def tiling_failure(
    name: str, shape: Shape, tiles: dict, launched_for: Shape | None = None
) -> str | None:
    """Why the traffic a launch's tiling implies is too far above the minimum at ``shape``, or None.

    ``launched_for``: the shape the launch was recorded at, where it is not ``shape``.
    """
    threshold = thresholds.threshold(LAB, "traffic")
    bm, bn = tiles["BLOCK_M"], tiles["BLOCK_N"]
    implied = tiled_bytes(shape, bm, bn)
    total, least = sum(implied.values()), minimum_bytes(shape)
    if total <= threshold.value * least:
        return None
    launched = (
        f" (the tiling it launched for {launched_for})"
        if launched_for and launched_for != shape
        else ""
    )
    return (
        f"{name}'s tiling moves too much for {shape}{launched}. With BLOCK_M × BLOCK_N = {bm} × "
        f"{bn} ({tiles['programs']:,} programs) it reads a ⌈N / BLOCK_N⌉ = "
        f"{math.ceil(shape.n / bn)} times and b ⌈M / BLOCK_M⌉ = {math.ceil(shape.m / bm)} times: "
        f"{total:,} B, {total / least:.2f}× the minimum ({least:,} B: a and b read once, out "
        f"written once). Its arithmetic intensity is {intensity(shape, total):.3g} FLOP/B; the "
        f"minimum traffic's is {intensity(shape, least):.3g} FLOP/B. "
        + _roofline_sentence(shape, tiles)
        + f"\nNeeded at most {threshold.value:g}× the minimum ({threshold.why}). Nothing was run: "
        "the tile "
        "sizes of your launch imply this traffic."
    )


def traffic_failure(name: str, traffic: dict, tiles: dict) -> str | None:
    """Why the counted ``traffic`` is not what the launch's tiling implies, or None."""
    shape: Shape = traffic["n"]
    implied = tiled_bytes(shape, tiles["BLOCK_M"], tiles["BLOCK_N"])
    loaded, stored = dict(traffic["loaded"]), dict(traffic["stored"])
    counted = {"a": loaded.get("a", 0), "b": loaded.get("b", 0), "out": stored.get("out", 0)}
    extra = {
        t
        for t in (*loaded, *stored)
        if t not in ("a", "b", "out") and (loaded.get(t) or stored.get(t))
    }
    wrong_way = loaded.get("out", 0) or stored.get("a", 0) or stored.get("b", 0)
    if counted == implied and not extra and not wrong_way:
        return None
    rows = _traffic_rows(tiles, implied, counted, loaded, stored, extra)
    hints = _traffic_hints(shape, tiles, implied, counted, loaded, stored, extra)
    return (
        f"{name}'s kernel moved other bytes than its tiling implies for {shape}, counted in the "
        f"Triton interpreter. A {tiles['BLOCK_M']} × {tiles['BLOCK_N']} tiling reads a ⌈N / "
        "BLOCK_N⌉ times and b ⌈M / BLOCK_M⌉ times and writes out once, and moves nothing "
        f"else.\n{core.text_table(rows)}\n" + "\n".join(hints)
    ).rstrip()


def _traffic_rows(
    tiles: dict, implied: dict, counted: dict, loaded: dict, stored: dict, extra: set
) -> list[tuple]:
    """The table of :func:`traffic_failure`: each tensor's counted bytes beside those implied."""
    rows = [
        ("tensor", "counted", f"a {tiles['BLOCK_M']} × {tiles['BLOCK_N']} tiling implies", "ratio")
    ]
    for tensor, verb in (("a", "loaded"), ("b", "loaded"), ("out", "stored")):
        ratio = f"{counted[tensor] / implied[tensor]:.2f}×"
        rows.append((tensor, f"{counted[tensor]:,} B {verb}", f"{implied[tensor]:,} B", ratio))
    return rows + core.unexpected_traffic_rows(extra, loaded, stored)


def _traffic_hints(
    shape: Shape,
    tiles: dict,
    implied: dict,
    counted: dict,
    loaded: dict,
    stored: dict,
    extra: set,
) -> list[str]:
    """What to change, a sentence for each way the traffic differs from the tiling's, and the
    intensity it cost."""
    hints = []
    for tensor, times in (
        ("a", f"⌈N / BLOCK_N⌉ = {math.ceil(shape.n / tiles['BLOCK_N'])}"),
        ("b", f"⌈M / BLOCK_M⌉ = {math.ceil(shape.m / tiles['BLOCK_M'])}"),
    ):
        if counted[tensor] > implied[tensor]:
            hints.append(
                f"Your kernel read {tensor} {counted[tensor] / implied[tensor]:.2f}× what its "
                f"tiling implies ({times} times): load each {tensor} tile once per step of the K "
                "loop and use it for the whole output tile."
            )
        elif counted[tensor] < implied[tensor]:
            hints.append(
                f"Your kernel read less of {tensor} than its tiling needs: every program must load "
                f"its whole strip of {tensor}."
            )
    if counted["out"] != implied["out"]:
        hints.append(
            f"Your kernel stored {counted['out'] / implied['out']:.2f}× out: store each output "
            "tile once, after the K loop."
        )
    if loaded.get("out"):
        hints.append("Your kernel reads out: keep the accumulator in registers and only write out.")
    if extra:
        hints.append(
            f"Your kernel moved bytes through {', '.join(sorted(extra))}: nothing but a, b and out "
            "should move."
        )
    moved = sum(loaded.values()) + sum(stored.values())
    hints.append(
        f"Counted, your kernel reached {intensity(shape, moved):.3g} FLOP/B; its tiling implies "
        f"{intensity(shape, sum(implied.values())):.3g} FLOP/B, and the minimum traffic gives "
        f"{intensity(shape, minimum_bytes(shape)):.3g}. Every byte past what the tiling needs "
        "lowers the intensity, and with it the speed a memory-bound kernel can reach (intensity × "
        "bandwidth)."
    )
    return hints


def grade_traffic(student) -> str:
    """CPU: the values must be right, and the counted traffic what the launch's tiling implies,
    within the multiple."""
    from brrr import traffic as traffic_counter

    traffic_counter.check_supported()  # if not, a grader error: not the student's fault
    name, shapes = student.name, traffic_shapes(core.size_drawer()[0])
    generator, seed = core.fresh_generator()
    cases = core.record_cases(student, SPEC, shapes, generator)
    built = core.build_kernels(
        name, cases, interpreted=True
    )  # a launch with no Triton kernel is told so first
    tilings = [launch_tiling(name, case.recipe, case.n) for case in cases]
    for shape, tiles in zip(shapes, tilings):  # before anything runs: the launch alone implies it
        failure = tiling_failure(name, TILING_SHAPE, tiles, launched_for=shape)
        if failure:
            raise core.fail(failure)
    outcome = isolation.run(
        core.replay_cases, name, SPEC, cases, built, seed, count_traffic_at=list(shapes)
    )
    if not outcome.ok:
        raise core.fail(f"{name}'s kernel could not be checked: {outcome.error}")
    if outcome.value["failure"]:
        raise core.fail(outcome.value["failure"])
    for counted, tiles in zip(outcome.value["traffics"], tilings):
        failure = traffic_failure(name, counted, tiles)
        if failure:
            raise core.fail(failure)
    threshold = thresholds.threshold(LAB, "traffic")
    parts = []
    for shape, tiles in zip(shapes, tilings):
        total = sum(tiled_bytes(shape, tiles["BLOCK_M"], tiles["BLOCK_N"]).values())
        at = sum(tiled_bytes(TILING_SHAPE, tiles["BLOCK_M"], tiles["BLOCK_N"]).values())
        parts.append(
            f"{shape}: {tiles['BLOCK_M']} × {tiles['BLOCK_N']} tiles, {total:,} B, "
            f"{tiles['programs']} programs ({at / minimum_bytes(TILING_SHAPE):.2f}× the minimum at "
            f"{TILING_SHAPE})"
        )
    return (
        f"{name}'s kernel moved exactly what its tiling implies at shapes drawn for this "
        f"submission, counted in the interpreter: {'; '.join(parts)} (needed "
        f"{threshold.describe()}× at {TILING_SHAPE}); seed {seed}"
    )


# ---------------------------------------------------------------- time (GPU)

PEAK_SIZES = {"peak_4096": 4096, "peak_8192": 8192}
GROUPED_SIZE = 8192

# A kernel faster than this multiple of the torch.mm peak (or of the copy bandwidth, for its bytes)
# measured in the same run is impossible.
IMPOSSIBLE_OVER_PEAK = 1.25

# m, n and k are drawn per submission in [TIMED_LOW x the published size, the published size], each
# 16 modulo 32: a multiple of 16 elements keeps every row aligned and every stride one Triton
# specializes as divisible by 16 (what vectorized and TMA loads need; an odd k would make torch.mm
# and the student's kernel alike slow down for a reason this lab is not about), and not a multiple
# of 32 leaves every tile of 32 or more partial at the edges. At 7/8 of 4096 a matmul still does
# about 3584 / 3 = 1,200 FLOP per byte of its minimum traffic, four times an H100's ridge:
# compute-bound.
TIMED_LOW = 7 / 8
TIMED_ALIGN = 16


def timed_shape(check: str) -> Shape:
    """The published size of a timed check, n × n × n: the band the drawn shapes come from."""
    n = PEAK_SIZES.get(check, GROUPED_SIZE)
    return Shape(n, n, n, TIMED_DTYPE)


def drawn_shape(check: str, rng=None) -> Shape:
    """A shape for one submission's timed check, drawn under :func:`timed_shape` (see
    :data:`TIMED_LOW`)."""
    from brrr.checks import rounds

    rng = rng or core.size_drawer()[0]
    n = timed_shape(check).m
    m, n, k = (rounds.drawn(rng, n, low=TIMED_LOW, align=TIMED_ALIGN) for _ in range(3))
    return Shape(m, n, k, TIMED_DTYPE)


def _timed(student, check: str) -> str:
    """Run :func:`_measure` in a forked child where it can, so that a fault in a kernel fails only
    this check."""
    outcome = isolation.run(_measure, student, check)
    if not outcome.ok:
        if outcome.error_type == "AssertionError":
            raise AssertionError(outcome.error.removeprefix("AssertionError: "))
        raise core.fail(f"{student.name} could not be timed: {outcome.error}")
    return outcome.value


def with_group(recipe: dict, group_m: int) -> dict:
    """The same recorded launch with ``GROUP_M`` set to ``group_m``: the student's kernel in another
    order."""
    changed = copy.deepcopy(recipe)
    changed["launches"][0]["args"]["GROUP_M"] = {"value": group_m}
    return changed


def _timed_entries(cases, recipes_by_order: dict, built) -> dict:
    """One :class:`brrr.checks.rounds.Timed` per order: the recorded launches, replayed on each
    input set into a NaN-filled output that every timed call is checked against. The orders share
    the inputs, so one of them compares them with their snapshot after timing."""
    from brrr.checks import kernels, rounds

    entries = {}
    for order, recipes in recipes_by_order.items():
        calls, outs = [], []
        for case, recipe in zip(cases, recipes):
            out = torch.full_like(case.expected, float("nan"))
            storages = dict(zip(SPEC.input_names, case.inputs)) | {SPEC.out_name: out}
            calls.append(
                lambda recipe=recipe, storages=storages: kernels.replay(recipe, built, storages)
            )
            outs.append(out)
        inputs = [dict(zip(SPEC.input_names, case.inputs)) for case in cases] if not entries else []
        entries[order] = rounds.Timed(calls, outs, [case.expected for case in cases], inputs=inputs)
    return entries


def _measure(student, check: str) -> str:
    """A timed check of Lab 5 on a GPU: the peak fraction, or grouped order against GROUP_M = 1.

    Long: the inputs, the two orders, the attempt and the verdict share the recorded launches;
    split, they would pass them from function to function."""
    from brrr import ceilings, units
    from brrr.checks import rounds
    from brrr.device import TRITON_INTERPRETED, far_above_cache

    name = student.name
    threshold = thresholds.threshold(LAB, check)
    shape = drawn_shape(check)
    generator, seed = core.fresh_generator()
    cases = core.record_cases(student, SPEC, (shape, shape), generator)  # two sets, rotated
    tiles = [launch_tiling(name, case.recipe, shape) for case in cases]
    grouped = check == "grouped_order"
    if grouped and tiles[0]["GROUP_M"] < 2:
        raise core.fail(
            f"{name} launched its kernel with GROUP_M = {tiles[0]['GROUP_M']} at {shape}: that is "
            "plain row-major order. The lab asks for grouped order, GROUP_M rows of tiles at a "
            "time (8 is a good start); this check compares it with GROUP_M = 1."
        )
    built = core.build_kernels(
        name, cases, interpreted=TRITON_INTERPRETED
    )  # interpreted: tests on a CPU
    orders = {"yours": [case.recipe for case in cases]}
    if grouped:
        orders["GROUP_M=1"] = [with_group(case.recipe, 1) for case in cases]
    entries = _timed_entries(cases, orders, built)
    plan = rounds.plan(minimum_bytes(shape), sets=len(cases))

    def attempt() -> core.Attempt:
        peak = ceilings.measure_matmul_peak(TIMED_DTYPE, shape.m)
        copy_rate = ceilings.measure_copy_bandwidth(far_above_cache(4))
        times = rounds.time_checked(
            name, entries, plan, budget_s=0.5, out_name=SPEC.out_name, seed=seed
        )
        for order, timing in times.items():
            impossible = rounds.below_roof(
                f"{name}'s kernel ({order}) on {shape}",
                timing.median_s,
                moved=minimum_bytes(shape),
                bandwidth=copy_rate,
                flops=shape.flops,
                peak=peak,
                over=IMPOSSIBLE_OVER_PEAK,
            )
            if impossible:
                raise core.fail(impossible)
        if grouped:
            ratio = times["GROUP_M=1"].median_s / times["yours"].median_s
            return core.Attempt(
                ratio,
                ratio >= threshold.value,
                f"GROUP_M={tiles[0]['GROUP_M']} {units.seconds(times['yours'].median_s)}, "
                f"GROUP_M=1 {units.seconds(times['GROUP_M=1'].median_s)}: "
                f"{units.beside(ratio, 3, (threshold.value,))}x the speed of row-major order",
            )
        timing = times["yours"]
        rate = timing.rate(shape.flops)
        fraction = rate / peak
        return core.Attempt(
            fraction,
            fraction >= threshold.value,
            f"{units.seconds(timing.median_s)}, {rate / 1e12:.0f} TFLOP/s = "
            f"{units.percent(fraction, (threshold.value,))} of "
            f"the {peak / 1e12:.0f} TFLOP/s torch.mm reached now",
        )

    best, history = core.repeat_until_pass(attempt)
    tile = tiles[0]
    tiling = (
        f"{tile['BLOCK_M']} × {tile['BLOCK_N']} × {tile['BLOCK_K']} tiles, "
        f"GROUP_M={tile['GROUP_M']}"
    )
    needed = (
        f"at least {threshold.value:g}x the speed of the same kernel with GROUP_M = 1"
        if grouped
        else f"at least {threshold.value:.0%} of the {TIMED_DTYPE} matmul peak measured now"
    )
    return core.timed_verdict(
        best,
        history,
        f"{name} on {shape}, drawn for this submission ({tiling}; {plan.describe()})",
        needed,
        threshold,
    )


GRADERS = core.Graders(
    LAB,
    {
        "prediction": grade_prediction,
        "correct": grade_correct,
        "traffic": grade_traffic,
        **{
            check: lambda student, check=check: _timed(student, check)
            for check in ("peak_4096", "peak_8192", "grouped_order")
        },
    },
)
grade = GRADERS.grade  # the one way every lab's check is run (brrr.checks.core.Graders)
