"""Lab 6, "FlashAttention forward": how it is graded (the task is in
:mod:`brrr.labs.flash_attention`).

Grading happens in the grader process (:mod:`brrr.grading.server`), thresholds
from :mod:`brrr.checks.thresholds`. As in Labs 2, 3 and 5 the student's wrapper
is only asked which kernels it launches; the grader checks the kernels' source
(Triton only), builds them itself and replays them on its own tensors:

- ``prediction`` (any device): the bytes that FlashAttention and the three-kernel
  version move at :data:`PREDICTION_SHAPE` with ``BLOCK_M`` = :data:`PREDICTION_BLOCK_M`,
  by the rule; a wrong number is named, with the rule and, where it matches
  one, the known mistake, never the answer.
- ``correct`` (any device): ``attention`` against
  ``torch.nn.functional.scaled_dot_product_attention`` (float32, cast to the
  inputs' dtype, :func:`attention_reference`) on fresh inputs
  (:data:`CORRECTNESS_CASES`, and two cases drawn per submission in every dimension,
  :func:`drawn_correctness_cases`): N = 1, 17, 100, 129, 200 and 256, a multiple of no
  block but the last; d = 32 and 64; float32, and float16 (which a float32
  accumulator passes); large logits in float16 (a standard deviation of
  :data:`LARGE_LOGIT_STD`: dozens exceed 88.7, where ``exp`` overflows float32);
  and "rising" logits, which grow along the keys so that every block of keys
  raises the running max of every row (an accumulator that is not rescaled by
  ``exp(m_old - m_new)`` is then far off). NaN-filled outputs; every load and
  store in bounds (on a GPU, checked in the interpreter first, at
  :data:`BOUNDS_CASES`). A wrong output that matches a known mistake is named:
  no rescale, keys past N counted, the causal mask missing or applied, TF32.
- ``causal`` (any device): ``causal_attention`` on the same cases against the
  causal reference (``is_causal=True``).
- ``traffic`` (CPU): counted in the interpreter at three shapes drawn per submission
  in the grader process (:func:`traffic_shapes`: N odd, a multiple of no block; batch,
  heads, d and dtype each taking two values or more), never a published one. Only
  ``out`` may be stored: a kernel that stores anything else fails, and one that
  stores as much as the scores is told it wrote the N × N score matrix, with the
  bytes. The launch must be one kernel, one program per query block of each head;
  the bytes counted must equal :func:`flash_bytes` for the ``BLOCK_M`` read from
  the launch, tensor by tensor, at each N; and each launched ``BLOCK_M``, weighed at
  :data:`CEILING_SHAPE` (N = 512, where the threshold is stated), at most a
  stated fraction of the three-kernel version's bytes (:func:`naive_bytes`),
  which is refused from the launch alone, before anything runs. The summary reports the ratio at
  each N.
- ``speed_vs_naive`` (GPU): float16 at :data:`TIMED_SHAPE` (N = 4096, d = 64; N drawn per submission
  under it, :func:`drawn_shape`),
  at least a stated multiple of the speed of :func:`naive_attention` (eager
  PyTorch, three big kernels), timed in turns in the same run.
- ``speed_vs_sdpa`` (GPU): the same shape, at least a stated fraction of the
  speed of ``F.scaled_dot_product_attention`` with its flash backend (where the
  GPU has none, as a T4, the backend PyTorch picks), timed in turns in the same
  run. In both, a time faster than the float16 matmul peak allows is flagged
  as impossible, and every timed output is checked afterwards.

Causal attention's traffic is not graded: a causal kernel may skip the blocks
of keys above the diagonal, and then reads about half as much of K and V.
"""

from __future__ import annotations

import math

import torch

from brrr import counting
from brrr.checks import core, isolation, thresholds
from brrr.device import ON_GPU, per_device
from brrr.labs.flash_attention import LAB
from brrr.labs.flash_attention.given import (
    PREDICTION_BLOCK_M,
    PREDICTION_SHAPE,
    Shape,
    attention_reference,
    make_inputs,
    naive_attention,
    sdpa_function,
    traffic_shape,
)

# What the checks compare a student's answer with: here only, out of the student's reach
# (tests/test_layers.py).
GRADER_REFERENCES = ("flash_bytes", "naive_bytes", "reference_prediction")

CHECKS = {
    "cpu": ("prediction", "correct", "causal", "traffic"),
    "gpu": ("prediction", "correct", "causal", "speed_vs_naive", "speed_vs_sdpa"),
}
ALL_CHECKS = ("prediction", "correct", "causal", "traffic", "speed_vs_naive", "speed_vs_sdpa")


def flash_bytes(shape: Shape, block_m: int) -> dict[str, int]:
    """Bytes per tensor that FlashAttention with ``block_m`` queries per program moves, by the lab's
    rule: the grader's reference, which the student's process cannot import (this module and
    ``brrr.counting`` are not in its copy).

    Every head: Q read once, O written once, K and V read once per query block
    (⌈n / block_m⌉ times). The scores never leave the chip.
    """
    once = shape.heads_total * shape.n * shape.d * shape.element_size
    blocks = math.ceil(shape.n / block_m)
    return {"q": once, "k": once * blocks, "v": once * blocks, "out": once}


def naive_bytes(shape: Shape) -> dict[str, int]:
    """Bytes of the three-kernel version by :func:`brrr.counting.attention`: Q, K, V and O, and the
    ``N × N`` scores and probabilities (written, read, written, read: ``4·N²`` elements per
    head)."""
    args = (shape.batch, shape.heads, shape.n, shape.d, shape.torch_dtype)
    inputs_and_output = round(counting.attention(*args, fused=True).bytes)
    total = round(counting.attention(*args, fused=False).bytes)
    return {
        "q, k, v, out": inputs_and_output,
        "scores and probabilities": total - inputs_and_output,
    }


# The constexpr arguments of the lab's kernel the grader reads from the launch.
BLOCK_ARGS = ("BLOCK_M", "BLOCK_N")


def score_matrix_bytes(shape: Shape) -> int:
    """One ``N × N`` matrix of scores for every head, in the inputs' dtype."""
    return shape.heads_total * shape.n * shape.n * shape.element_size


PREDICTION_RULES = (
    "every head of every batch moves its own Q, K, V and O (batch × heads of them)",
    "FlashAttention: Q is read once and O written once; K and V are each read once per query "
    "block, ⌈N / BLOCK_M⌉ times; nothing else moves",
    "three kernels: Q, K and V are read once and O written once, and the N × N scores are written "
    "by the first matmul and read by the softmax, whose N × N probabilities are written and read "
    "again by the second matmul: 4·N² more elements per head",
    "every element is of the inputs' dtype (float16: 2 bytes)",
)


def reference_prediction() -> dict[str, int]:
    """The answer to the prediction, by :func:`flash_bytes` and :func:`naive_bytes` (for the grader
    and the tests)."""
    shape = PREDICTION_SHAPE
    return {
        "flash": sum(flash_bytes(shape, PREDICTION_BLOCK_M).values()),
        "naive": sum(naive_bytes(shape).values()),
    }


def causal_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """:func:`attention_reference` with ``causal=True``: query ``i`` attends to keys ``0..i``."""
    return attention_reference(q, k, v, causal=True)


OVERFLOW = 88.7  # exp(x) is inf in float32 above this


# ---------------------------------------------------------------- known mistakes, for the messages


def _scores(q, k, v, causal: bool):
    q, k, v = (t.detach().to("cpu", torch.float64) for t in (q, k, v))
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return scores, v


def simulate(
    q,
    k,
    v,
    *,
    causal: bool = False,
    block_n: int | None = None,
    rescale_acc: bool = True,
    rescale_sum: bool = True,
    padded_to: int | None = None,
) -> torch.Tensor:
    """Attention in float64 on the CPU, computed block by block as a kernel would, with a known
    mistake.

    ``rescale_acc=False``: the accumulator is not multiplied by ``exp(m_old -
    m_new)`` when the running max grows (``rescale_sum=False``: nor the running
    sum). ``padded_to``: the keys past ``n`` up to ``padded_to`` are loaded as 0
    and their scores (0) are not masked, as when a kernel masks its loads but not
    its scores. With no mistake it is the reference, in float64.
    """
    scores, v = _scores(q, k, v, causal)
    n = scores.shape[-1]
    if padded_to and padded_to > n:
        scores = torch.nn.functional.pad(scores, (0, padded_to - n))  # unmasked padding scores 0
        v = torch.nn.functional.pad(v, (0, 0, 0, padded_to - n))  # and adds 0·p to the output
    if block_n is None:
        return torch.softmax(scores, dim=-1) @ v
    shape = scores.shape[:-1]
    m = torch.full(shape, float("-inf"), dtype=torch.float64)
    total = torch.zeros(shape, dtype=torch.float64)
    acc = torch.zeros(*shape, v.shape[-1], dtype=torch.float64)
    for start in range(0, scores.shape[-1], block_n):
        block = scores[..., start : start + block_n]
        m_new = torch.maximum(m, block.amax(-1))
        p = torch.exp(block - m_new[..., None])
        alpha = torch.exp(m - m_new)
        total = (total * alpha if rescale_sum else total) + p.sum(-1)
        acc = (acc * alpha[..., None] if rescale_acc else acc) + p @ v[
            ..., start : start + block_n, :
        ]
        m = m_new
    return acc / total[..., None]


_DIAGNOSED_BLOCKS = (16, 32, 64, 128, 256)
_DIAGNOSE_UP_TO = 1024  # longest N the hints simulate (they run in float64 on the CPU)


def diagnose(inputs, out: torch.Tensor, *, causal: bool = False) -> str | None:
    """A sentence on a known cause of a wrong output, where the output matches it.

    Long: one test per known mistake, in the order they are tried; each is a few lines.
    """
    q, k, v = inputs
    n = q.shape[-2]
    got = out.detach().to("cpu", torch.float64)
    rtol, atol = core.tolerance(out.dtype)

    def close(a: torch.Tensor, b: torch.Tensor, slack: float) -> bool:
        return bool(
            torch.isclose(
                a, b.to(out.dtype).to(torch.float64), rtol=slack * rtol, atol=slack * atol
            ).all()
        )

    right = None

    def matches(candidate: torch.Tensor, slack: float = 4.0) -> bool:
        """``got`` is the mistake's output, and the mistake shows here: its output is not the right
        one."""
        return close(got, candidate, slack) and not close(right, candidate, 1.0)

    if not bool(torch.isfinite(got).all()):
        scores, _ = _scores(q, k, v, causal)
        largest = float(scores[torch.isfinite(scores)].abs().max())
        if largest > OVERFLOW:
            return (
                f"The logits q·k/√d of this case reach ±{largest:.0f}, and exp() overflows float32 "
                f"above {OVERFLOW}: subtract the running max m before exponentiating (exp(s - "
                "m_new)), and "
                "rescale what you summed so far by exp(m_old - m_new)."
            )
        return None
    if n > _DIAGNOSE_UP_TO:
        return None
    right = simulate(q, k, v, causal=causal)
    if matches(simulate(q, k, v, causal=not causal)):
        if causal:
            return (
                "Your output is attention without the causal mask: every query attended to every "
                "key. In causal attention query i sees keys 0..i only: set the scores of keys j > "
                "i to -inf before the running max (tl.where(offs_n[None, :] <= offs_m[:, None], s, "
                "float('-inf')))."
            )
        return (
            "Your output is causal attention, but this check asks for plain attention: with "
            "causal=False every query attends to every key."
        )
    for block_n in _DIAGNOSED_BLOCKS:
        padded = math.ceil(n / block_n) * block_n
        if padded > n and not causal and matches(simulate(q, k, v, padded_to=padded)):
            return (
                f"Your output is what attention gives when the {padded - n} keys past N = {n} in "
                f"the last block (BLOCK_N = {block_n}) count with a score of 0: masking the loads "
                "(other=0.0) is not "
                "enough, because a score of 0 still adds exp(0 - m) to the running sum. Set the "
                "scores of keys past N to -inf before the running max."
            )
    for block_n in _DIAGNOSED_BLOCKS:
        if block_n >= n:
            break
        for rescale_sum in (True, False):
            if matches(
                simulate(
                    q,
                    k,
                    v,
                    causal=causal,
                    block_n=block_n,
                    rescale_acc=False,
                    rescale_sum=rescale_sum,
                )
            ):
                what = (
                    "the accumulator is"
                    if rescale_sum
                    else "the accumulator and the running sum are"
                )
                return (
                    f"Your output is what attention gives, with blocks of BLOCK_N = {block_n} "
                    f"keys, when {what} not rescaled as the running max grows. When a block raises "
                    "a row's max "
                    "from m_old to m_new, everything summed so far was exponentiated against "
                    "m_old: multiply it by alpha = exp(m_old - m_new) before adding the new block "
                    "(acc = acc * alpha[:, None] + p @ v; l = l * alpha + sum(p))."
                )
    if out.dtype == torch.float32 and ON_GPU and close(got, right, slack=1000.0):
        return (
            "On a GPU, tl.dot on float32 inputs uses TF32 tensor cores by default (10 bits of "
            "mantissa). "
            'Pass `input_precision="ieee"` to tl.dot for a float32 result.'
        )
    return None


def _diagnose_causal(inputs, out: torch.Tensor) -> str | None:
    return diagnose(inputs, out, causal=True)


SPEC = core.Spec(
    name="attention",
    reference=attention_reference,
    make_inputs=make_inputs,
    input_names=("q", "k", "v"),
    out_name="out",
    describe=str,
    diagnose=diagnose,
)
CAUSAL_SPEC = core.Spec(
    name="causal attention",
    reference=causal_reference,
    make_inputs=make_inputs,
    input_names=("q", "k", "v"),
    out_name="out",
    describe=str,
    diagnose=_diagnose_causal,
)

# N a multiple of no block but in the last case; d of 32 and 64; float32 and float16; large logits
# in float16 (float32 rounds a logit near 120 by about 1e-5 relative, the float32 tolerance itself,
# while float16's tolerance is 2e-3); rising logits, which make every block of keys raise every
# row's running max.
_CASES = (
    Shape(1, 2, 1, 32),
    Shape(2, 1, 17, 64),
    Shape(1, 2, 100, 32),
    Shape(1, 2, 129, 64, "float16"),
    Shape(1, 2, 100, 32, "float16", "large"),
    Shape(1, 2, 129, 64, "float16", "large"),
    Shape(1, 2, 200, 64, "float32", "rising"),
    Shape(1, 2, 256, 64, "float16"),
)
CORRECTNESS_CASES = per_device(
    cpu=_CASES,
    gpu=_CASES + (Shape(2, 4, 1031, 64, "float16"), Shape(1, 8, 2048, 64, "float16", "large")),
)
BOUNDS_CASES = (
    Shape(1, 2, 17, 64),
    Shape(1, 2, 100, 32, "float16"),
)  # GPU: checked in the interpreter first


def prepare() -> None:
    """Import what the checks use now, in the grader process, before any student code runs."""
    import torch.nn.attention  # noqa: F401
    import triton.language  # noqa: F401

    from brrr import ceilings, timing, traffic  # noqa: F401
    from brrr.checks import kernels  # noqa: F401

    _REFERENCE_PREDICTION.update(reference_prediction())


_REFERENCE_PREDICTION: dict[str, int] = {}


def not_applicable(check: str, device_class: str) -> str:
    if check == "traffic":
        return (
            "GPU: traffic is counted only in the Triton interpreter (on a CPU). Here the kernel is "
            "compiled, so it is graded by time instead: see speed_vs_naive and speed_vs_sdpa."
        )
    return (
        f"CPU: the {check} check runs on a GPU only. Here Triton runs in its interpreter, one "
        "program "
        "at a time in Python, so its time says nothing about the kernel; the traffic check grades "
        "what FlashAttention changes instead: the N × N scores never reach memory."
    )


# ---------------------------------------------------------------- prediction


def _prediction_mistakes(shape: Shape, block_m: int) -> dict[str, dict[str, int]]:
    """Bytes that known wrong readings of the rule give, by the mistake's description, for each
    answer."""
    h, n, d, s = shape.heads_total, shape.n, shape.d, shape.element_size
    blocks = math.ceil(n / block_m)
    return {
        "flash": {
            "N / BLOCK_M without rounding up: the last, partial query block is a whole program, "
            "and it reads all of K and V": round(h * n * d * (2 + 2 * n / block_m) * s),
            "K and V read once: that is the minimum, which only one query block as long as N "
            "reaches": h * n * d * 4 * s,
            "K and V read ⌈N / BLOCK_M⌉ times together, not each": h * n * d * (2 + blocks) * s,
            "Q or O left out: Q is read once and O written once": h * n * d * (1 + 2 * blocks) * s,
            "one head: every head of every batch (batch × heads) moves its own": n
            * d
            * (2 + 2 * blocks)
            * s,
            "4 bytes per element: the inputs are float16, 2 bytes": h
            * n
            * d
            * (2 + 2 * blocks)
            * 4,
            "elements, not bytes": h * n * d * (2 + 2 * blocks),
        },
        "naive": {
            "2·N² elements per head for the N × N matrices: the scores are written and read, and "
            "so are the probabilities, 4·N²": h * (4 * n * d + 2 * n * n) * s,
            "the N × N matrices left out: they are what the three kernels move besides Q, K, V and "
            "O": h * 4 * n * d * s,
            "Q, K, V and O left out: the three kernels read Q, K and V and write O too": h
            * 4
            * n
            * n
            * s,
            "one head: every head of every batch (batch × heads) moves its own": (
                4 * n * d + 4 * n * n
            )
            * s,
            "4 bytes per element: the inputs are float16, 2 bytes": h * (4 * n * d + 4 * n * n) * 4,
            "elements, not bytes": h * (4 * n * d + 4 * n * n),
        },
    }


def grade_prediction(student) -> str:
    """``predicted_traffic()``: ``{"flash": bytes, "naive": bytes}`` at :data:`PREDICTION_SHAPE`."""
    exact = thresholds.threshold(LAB, "prediction")
    reference = _REFERENCE_PREDICTION or reference_prediction()
    value = student.call(timeout_s=60)
    name, shape = student.name, PREDICTION_SHAPE
    if not isinstance(value, dict) or set(value) != {"flash", "naive"}:
        raise core.fail(
            f"{name}() must return a dict with the keys 'flash' and 'naive' (bytes); it returned "
            f"{str(value)[:200]}"
        )
    for key in ("flash", "naive"):
        number = value[key]
        if (
            isinstance(number, bool)
            or not isinstance(number, (int, float))
            or not math.isfinite(number)
            or number <= 0
        ):
            raise core.fail(
                f"{name}()['{key}'] must be a positive number of bytes; it is {str(number)[:80]}"
            )
    mistakes = _prediction_mistakes(shape, PREDICTION_BLOCK_M)
    wrong = []
    for key, what in (("flash", "FlashAttention"), ("naive", "the three kernels")):
        if abs(value[key] - reference[key]) <= exact.value * reference[key]:
            continue
        line = f"{what}: your bytes, {value[key]:,}, are wrong"
        for mistake, nbytes in mistakes[key].items():
            if nbytes == round(value[key]):
                line += f". They are what you get with {mistake}"
                break
        wrong.append(line + ".")
    if wrong:
        raise core.fail(
            f"{name}() predicted the traffic wrong, for batch {shape.batch}, {shape.heads} heads, "
            f"N = {shape.n:,}, d = {shape.d}, {shape.dtype}, BLOCK_M = {PREDICTION_BLOCK_M}.\n"
            + "\n".join(wrong)
            + "\nThe rule: "
            + "; ".join(PREDICTION_RULES)
            + "."
        )
    return (
        f"{name}() predicted the traffic at {shape}, BLOCK_M = {PREDICTION_BLOCK_M}: "
        f"FlashAttention {value['flash']:,} B, three kernels {value['naive']:,} B, "
        f"{value['naive'] / value['flash']:.2f}× as much (bytes {exact.describe()})"
    )


# ---------------------------------------------------------------- correct and causal


def drawn_correctness_cases(rng) -> tuple[Shape, ...]:
    """Two more cases drawn per submission (``rng`` from :func:`brrr.checks.core.size_drawer`): odd
    N, and batch, heads, d and dtype drawn (each taking two values across the two cases)."""
    sizes = (core.unaligned(rng, 19, 127), core.unaligned(rng, 129, 255))
    drawn = [spread(rng, choices, len(sizes)) for choices in (BATCHES, HEADS, HEAD_DIMS, DTYPES)]
    return tuple(Shape(b, h, n, d, dtype) for n, b, h, d, dtype in zip(sizes, *drawn))


def grade_correct(student, *, causal: bool = False) -> str:
    spec = CAUSAL_SPEC if causal else SPEC
    cases = tuple(CORRECTNESS_CASES) + drawn_correctness_cases(core.size_drawer()[0])
    result = core.check_kernels(student, spec, cases, bounds_sizes=BOUNDS_CASES)
    what = "causal attention (is_causal=True)" if causal else "attention"
    return core.correct_summary(
        student.name,
        f"scaled_dot_product_attention's {what} (float32, cast to the inputs' dtype)",
        cases,
        result,
    )


# ---------------------------------------------------------------- the blocks of a recorded launch


def launch_blocks(name: str, recipe: dict, shape: Shape) -> dict:
    """``BLOCK_M``, ``BLOCK_N`` and the programs of the one launch in ``recipe``.

    Fails (AssertionError) unless the wrapper launched one kernel, whose block
    sizes are constexpr arguments named as in :data:`BLOCK_ARGS`, over one program
    per query block of each head.
    """
    launch, blocks, programs = core.one_launch(
        name,
        recipe,
        str(shape),
        "one attention kernel, launched once, one program per block of queries of each head",
        BLOCK_ARGS,
        "the grader reads BLOCK_M from the launch to know what traffic your kernel implies",
    )
    needed = math.ceil(shape.n / blocks["BLOCK_M"]) * shape.heads_total
    if programs != needed:
        raise core.fail(
            f"{name} launched {programs:,} programs for {shape} with BLOCK_M = "
            f"{blocks['BLOCK_M']}: one program per block of queries of each head is ⌈N / BLOCK_M⌉ "
            f"· batch · heads = {needed:,} (a grid of "
            "(triton.cdiv(N, BLOCK_M), batch * heads))."
        )
    return blocks | {"programs": programs, "kernel": launch.get("kernel")}


# ---------------------------------------------------------------- traffic (CPU)


def _ratio_sentence(shape: Shape, block_m: int) -> str:
    return (
        f"For large N the ratio of FlashAttention's bytes to the three kernels' tends to d / "
        f"(2·BLOCK_M) = {shape.d / (2 * block_m):.2g} for BLOCK_M = {block_m} at d = {shape.d}: a "
        "larger block of queries "
        "reads K and V fewer times."
    )


# Where a launched BLOCK_M is weighed against the threshold, whatever N it was launched for: the
# ratio to the three kernels' bytes depends on N, and the threshold is stated at this one
# (brrr.checks.thresholds).
CEILING_SHAPE = traffic_shape(512)


def traffic_sizes(rng) -> tuple[int, int, int]:
    """The N the traffic check counts at, drawn per submission (``rng`` from
    :func:`brrr.checks.core.size_drawer`, seeded in the grader process): odd, so the last block of
    queries and of keys is partial, from a little over 64 to a little over 512."""
    return (
        core.unaligned(rng, 65, 191),
        core.unaligned(rng, 193, 383),
        core.unaligned(rng, 385, 519),
    )


# What a model calls attention with, and each check draws from per submission: head dimensions (a
# power of two, as tl.arange needs), both dtypes the lab supports, and a few batches and heads (few:
# the interpreter runs every program of every head, one at a time).
HEAD_DIMS = (16, 32, 64, 128)
DTYPES = ("float32", "float16")
BATCHES = (1, 2)
HEADS = (1, 2)


def spread(rng, choices: tuple, count: int) -> list:
    """``count`` values drawn from ``choices``, at least two of them different: a wrapper right at
    one value of a dimension only (the published one, say) is wrong at one of the shapes drawn."""
    values = rng.sample(choices, 2) + [rng.choice(choices) for _ in range(count - 2)]
    rng.shuffle(values)
    return values


def traffic_shapes(rng) -> list[Shape]:
    """The shapes the traffic check counts at, drawn per submission in every dimension: N from
    :func:`traffic_sizes`, and batch, heads, d and dtype each taking two values or more."""
    sizes = traffic_sizes(rng)
    drawn = [spread(rng, choices, len(sizes)) for choices in (BATCHES, HEADS, HEAD_DIMS, DTYPES)]
    return [Shape(b, h, n, d, dtype) for n, b, h, d, dtype in zip(sizes, *drawn)]


def ceiling_failure(name: str, shape: Shape, blocks: dict) -> str | None:
    """Why the traffic a launch's ``BLOCK_M`` implies is too close to the three kernels' at
    ``shape``, or None."""
    threshold = thresholds.threshold(LAB, "traffic")
    block_m = blocks["BLOCK_M"]
    flash, naive = sum(flash_bytes(shape, block_m).values()), sum(naive_bytes(shape).values())
    if flash <= threshold.value * naive:
        return None
    return (
        f"{name}'s blocks of queries are too small for {shape}. With BLOCK_M = {block_m} "
        f"({blocks['programs']:,} programs) it reads K and V ⌈N / BLOCK_M⌉ = "
        f"{math.ceil(shape.n / block_m)} times: {flash:,} B, {flash / naive:.2f}× the {naive:,} B "
        "of the three-kernel version, which writes "
        "the N × N scores. "
        + _ratio_sentence(shape, block_m)
        + f"\nNeeded at most {threshold.value:g}× the three kernels' bytes ({threshold.why}). "
        "Nothing was run: "
        "the block size of your launch implies this traffic."
    )


def stores_failure(name: str, shape: Shape, traffic: dict, scratch: dict[str, str]) -> str | None:
    """Why the kernels stored something other than ``out`` (the score matrix, most likely), or
    None."""
    stored = {
        tensor: nbytes for tensor, nbytes in traffic["stored"].items() if tensor != "out" and nbytes
    }
    if not stored:
        return None
    scores = score_matrix_bytes(shape)
    rows = [("tensor", "stored", "loaded", "N × N score matrices")]
    for tensor, nbytes in sorted(stored.items()):
        label = scratch.get(tensor, tensor)
        rows.append(
            (
                label,
                f"{nbytes:,} B",
                f"{traffic['loaded'].get(tensor, 0):,} B",
                f"{nbytes / scores:.2f}",
            )
        )
    total = sum(stored.values())
    naive = naive_bytes(shape)
    head = (
        f"{name}'s kernels wrote the N × N score matrix to memory for {shape}, counted in the "
        f"interpreter: {total:,} B stored outside out, {total / scores:.2f}× the {scores:,} B of "
        "one N × N matrix of "
        "scores per head."
        if total >= scores
        else f"{name}'s kernels stored {total:,} B outside out for {shape}, counted in the "
        "interpreter."
    )
    return (
        head + f"\n{core.text_table(rows)}\nFlashAttention never stores the scores or the "
        "probabilities: "
        "each block of scores lives in registers, is folded into the running max, sum and output, "
        "and is dropped. Only out is written, once. The three kernels move "
        f"{naive['scores and probabilities']:,} B of N × N matrices here beside "
        f"{naive['q, k, v, out']:,} B of Q, K, V and O; the whole point is not to."
    )


def traffic_failure(name: str, shape: Shape, traffic: dict, blocks: dict) -> str | None:
    """Why the counted ``traffic`` at ``shape`` is not what the launch's ``BLOCK_M`` implies, or
    None."""
    implied = flash_bytes(shape, blocks["BLOCK_M"])
    loaded, stored = dict(traffic["loaded"]), dict(traffic["stored"])
    counted = {
        "q": loaded.get("q", 0),
        "k": loaded.get("k", 0),
        "v": loaded.get("v", 0),
        "out": stored.get("out", 0),
    }
    extra = {t for t in (*loaded, *stored) if t not in implied and (loaded.get(t) or stored.get(t))}
    if counted == implied and not extra and not loaded.get("out"):
        return None
    rows = _traffic_rows(blocks, implied, counted, loaded, stored, extra)
    hints = _traffic_hints(shape, blocks, implied, counted, loaded, extra)
    return (
        f"{name}'s kernel moved other bytes than FlashAttention with BLOCK_M = {blocks['BLOCK_M']} "
        f"does for {shape}, counted in the Triton interpreter. It reads Q once, K and V ⌈N / "
        "BLOCK_M⌉ times each, and writes out once, and moves nothing "
        f"else.\n{core.text_table(rows)}\n" + "\n".join(hints)
    ).rstrip()


def _traffic_rows(
    blocks: dict, implied: dict, counted: dict, loaded: dict, stored: dict, extra: set
) -> list[tuple]:
    """The table of :func:`traffic_failure`: each tensor's counted bytes beside those implied."""
    rows = [("tensor", "counted", f"BLOCK_M = {blocks['BLOCK_M']} implies", "ratio")]
    for tensor in implied:
        verb = "stored" if tensor == "out" else "loaded"
        rows.append(
            (
                tensor,
                f"{counted[tensor]:,} B {verb}",
                f"{implied[tensor]:,} B",
                f"{counted[tensor] / implied[tensor]:.2f}×",
            )
        )
    return rows + core.unexpected_traffic_rows(extra, loaded, stored)


def _traffic_hints(
    shape: Shape, blocks: dict, implied: dict, counted: dict, loaded: dict, extra: set
) -> list[str]:
    """What to change, one sentence for each tensor whose traffic differs from the implied."""
    blocks_m = math.ceil(shape.n / blocks["BLOCK_M"])
    hints = []
    if counted["q"] != implied["q"]:
        hints.append(
            f"Your kernel loaded {counted['q'] / implied['q']:.2f}× Q: load each program's block "
            "of queries once, before the loop over keys, and keep it in registers."
        )
    for tensor in ("k", "v"):
        if counted[tensor] != implied[tensor]:
            hints.append(
                f"Your kernel loaded {tensor.upper()} "
                f"{counted[tensor] / implied[tensor] * blocks_m:.2f} times, where one pass per "
                f"query block is ⌈N / BLOCK_M⌉ = {blocks_m}: load each block of {tensor.upper()} "
                "once per step of the loop over keys, and only its N rows (mask the "
                "rows past N)."
            )
    if counted["out"] != implied["out"]:
        hints.append(
            f"Your kernel stored {counted['out'] / implied['out']:.2f}× out: store each block of "
            "output once, after the loop over keys."
        )
    if loaded.get("out"):
        hints.append("Your kernel reads out: keep the accumulator in registers and only write out.")
    if extra:
        hints.append(
            f"Your kernel moved bytes through {', '.join(sorted(extra))}: nothing but q, k, v and "
            "out should move."
        )
    return hints


def count_cases(name: str, cases, built, seed: int) -> dict:
    """Replay the cases here, in the interpreter: the values must be right; the traffic of each, in
    order.

    It stops after the first case that stores anything but ``out``: that case is enough to say why.
    """
    counted = []
    for case in cases:
        result = core.replay_cases(name, SPEC, [case], built, seed, count_traffic_at=case.n)
        if result["failure"]:
            return {"failure": result["failure"]}
        counted.append(result["traffic"])
        if any(nbytes for tensor, nbytes in result["traffic"]["stored"].items() if tensor != "out"):
            break
    return {"failure": None, "traffic": counted}


def grade_traffic(student) -> str:
    """CPU: only out is stored, the counted bytes are FlashAttention's for the launched BLOCK_M,
    well below naive."""
    from brrr import traffic as traffic_counter
    from brrr.checks import kernels

    traffic_counter.check_supported()  # if not, a grader error: not the student's fault
    name = student.name
    shapes = traffic_shapes(core.size_drawer()[0])
    generator, seed = core.fresh_generator()
    cases = core.record_cases(student, SPEC, shapes, generator)
    built = core.build_kernels(
        name, cases, interpreted=True
    )  # a launch with no Triton kernel is told so first
    one_launch = all(len(case.recipe.get("launches", [])) == 1 for case in cases)
    if one_launch:  # before anything runs: the launch alone implies the traffic
        blocks = [launch_blocks(name, case.recipe, case.n) for case in cases]
        for launched in blocks:
            failure = ceiling_failure(name, CEILING_SHAPE, launched)
            if failure:
                raise core.fail(failure)
    outcome = isolation.run(count_cases, name, cases, built, seed)
    if not outcome.ok:
        raise core.fail(f"{name}'s kernel could not be checked: {outcome.error}")
    if outcome.value["failure"]:
        raise core.fail(outcome.value["failure"])
    for case, counted in zip(cases, outcome.value["traffic"]):
        failure = stores_failure(name, case.n, counted, kernels.scratch_names(case.recipe))
        if failure:
            raise core.fail(failure)
    if not one_launch:  # and only out stored
        blocks = [launch_blocks(name, case.recipe, case.n) for case in cases]  # fails, saying so
    for case, counted, launched in zip(cases, outcome.value["traffic"], blocks):
        failure = traffic_failure(name, case.n, counted, launched)
        if failure:
            raise core.fail(failure)
    threshold = thresholds.threshold(LAB, "traffic")
    parts = []
    for shape, launched in zip(shapes, blocks):
        flash, naive = (
            sum(flash_bytes(shape, launched["BLOCK_M"]).values()),
            sum(naive_bytes(shape).values()),
        )
        parts.append(
            f"{shape}, BLOCK_M = {launched['BLOCK_M']}: {flash:,} B against {naive:,} B for the "
            f"three kernels ({flash / naive:.2f}× as much)"
        )
    return (
        f"{name}'s kernel moved exactly what FlashAttention moves (Q and out once, K and V ⌈N / "
        f"BLOCK_M⌉ times) and stored nothing but out, counted in the interpreter at (batch, heads, "
        f"N, d) drawn for this submission: {'; '.join(parts)} (each BLOCK_M needed at most "
        f"{threshold.value:g}× at N = {CEILING_SHAPE.n}); "
        f"seed {seed}"
    )


# ---------------------------------------------------------------- time (GPU)

TIMED_SHAPE = Shape(
    2, 16, 4096, 64, "float16"
)  # naive eager holds about 3 GB of N × N matrices: fits a T4
TIMED_LOW = 3 / 4  # the timed N is drawn per submission in [TIMED_LOW x 4096, 4096] (drawn_shape)

# A kernel faster than this multiple of the float16 matmul peak measured in the same run is
# impossible.
IMPOSSIBLE_OVER_PEAK = 1.25
BASELINES = {
    "speed_vs_naive": "naive eager attention",
    "speed_vs_sdpa": "scaled_dot_product_attention",
}


def _timed(student, check: str) -> str:
    """Run :func:`_measure` in a forked child where it can, so that a fault in a kernel fails only
    this check."""
    outcome = isolation.run(_measure, student, check)
    if not outcome.ok:
        if outcome.error_type == "AssertionError":
            raise AssertionError(outcome.error.removeprefix("AssertionError: "))
        raise core.fail(f"{student.name} could not be timed: {outcome.error}")
    return outcome.value


def drawn_shape(rng=None) -> Shape:
    """The timed shape for one submission: :data:`TIMED_SHAPE` with N drawn odd in [TIMED_LOW x N,
    N], so the last query and key blocks are partial, and its batch × heads split drawn (the same
    work: the thresholds are stated for float16 at d = 64, so those stay). Rows stay 16-byte aligned
    whatever N (their stride is d), and at 3/4 of 4096 attention still does N / 2 = 1,536 FLOP per
    byte of Q, K, V and O: compute-bound."""
    from brrr.checks import rounds

    rng = rng or core.size_drawer()[0]
    shape = TIMED_SHAPE
    batch = rng.choice([b for b in (1, 2, 4, 8) if shape.heads_total % b == 0])
    n = rounds.drawn(rng, shape.n, low=TIMED_LOW)
    return Shape(batch, shape.heads_total // batch, n, shape.d, shape.dtype)


def minimum_bytes(shape: Shape) -> int:
    """Q, K and V read once and out written once: what any attention kernel must move."""
    return 4 * shape.heads_total * shape.n * shape.d * shape.element_size


def _measure(student, check: str) -> str:
    """A timed check of Lab 6 on a GPU: the kernel against a baseline, in the same rounds.

    Long: the inputs, the attempt and the verdict share the recorded launches; split, they would
    pass them from function to function."""
    from brrr import ceilings, units
    from brrr.checks import kernels, rounds
    from brrr.device import TRITON_INTERPRETED, far_above_cache

    name = student.name
    threshold = thresholds.threshold(LAB, check)
    shape = drawn_shape()
    generator, seed = core.fresh_generator()
    cases = core.record_cases(student, SPEC, (shape, shape), generator)  # two sets, rotated
    blocks = [launch_blocks(name, case.recipe, shape) for case in cases]
    built = core.build_kernels(
        name, cases, interpreted=TRITON_INTERPRETED
    )  # interpreted: tests on a CPU
    outs = [torch.full_like(case.expected, float("nan")) for case in cases]
    storages = [
        dict(zip(SPEC.input_names, case.inputs)) | {SPEC.out_name: out}
        for case, out in zip(cases, outs)
    ]
    if check == "speed_vs_naive":
        baseline, label = naive_attention, BASELINES[check]
    else:
        baseline, backend = sdpa_function()
        label = f"{BASELINES[check]} ({backend})"
    entries = {
        "yours": rounds.Timed(
            [
                lambda case=case, st=st: kernels.replay(case.recipe, built, st)
                for case, st in zip(cases, storages)
            ],
            outs,
            [case.expected for case in cases],
            inputs=[dict(zip(SPEC.input_names, case.inputs)) for case in cases],
        ),
        "baseline": rounds.Timed([lambda case=case: baseline(*case.inputs) for case in cases]),
    }
    plan = rounds.plan(minimum_bytes(shape), sets=len(cases))

    def attempt() -> core.Attempt:
        peak = ceilings.measure_matmul_peak("float16", 4096)
        copy_rate = ceilings.measure_copy_bandwidth(far_above_cache(4))
        times = rounds.time_checked(
            name, entries, plan, budget_s=0.5, out_name=SPEC.out_name, seed=seed
        )
        mine, other = times["yours"].median_s, times["baseline"].median_s
        impossible = rounds.below_roof(
            f"{name}'s kernel on {shape}",
            mine,
            moved=minimum_bytes(shape),
            bandwidth=copy_rate,
            flops=shape.flops,
            peak=peak,
            over=IMPOSSIBLE_OVER_PEAK,
        )
        if impossible:
            raise core.fail(impossible)
        ratio = other / mine
        return core.Attempt(
            ratio,
            ratio >= threshold.value,
            f"yours {units.seconds(mine)} ({shape.flops / mine / 1e12:.0f} TFLOP/s), {label} "
            f"{units.seconds(other)}: {units.ratio(ratio, (threshold.value,))} its speed",
        )

    best, history = core.repeat_until_pass(attempt)
    launched = f"BLOCK_M = {blocks[0]['BLOCK_M']}, BLOCK_N = {blocks[0]['BLOCK_N']}"
    needed = f"at least {threshold.value:g}x the speed of {label}"
    what = f"{name} on {shape}, drawn for this submission ({launched}; {plan.describe()})"
    return core.timed_verdict(best, history, what, needed, threshold, unit="x")


GRADERS = core.Graders(
    LAB,
    {
        "prediction": grade_prediction,
        "correct": grade_correct,
        "causal": lambda student: grade_correct(student, causal=True),
        "traffic": grade_traffic,
        **{check: lambda student, check=check: _timed(student, check) for check in BASELINES},
    },
)
grade = GRADERS.grade  # the one way every lab's check is run (brrr.checks.core.Graders)
