"""Lab 6's given material: the reference, both traffic rules, inputs, and the comparisons to plot.

The student's process imports this module (through :mod:`brrr.labs.flash_attention`). The checks
(:mod:`brrr.labs.flash_attention.checks`) import from it, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from brrr import reference
from brrr.checks import core
from brrr.device import DEVICE, ON_GPU

WIRE_TYPES: dict[str, type] = {}


# ---------------------------------------------------------------- shapes and the traffic rule


@dataclass(frozen=True)
class Shape:
    """One attention call: ``q``, ``k``, ``v`` and ``out`` are ``(batch, heads, n, d)`` of
    ``dtype``.

    ``logits``: ``"normal"`` draws q, k and v from N(0, 1), so the logits
    ``q·k / √d`` are about N(0, 1); ``"large"`` multiplies q by
    :data:`LARGE_LOGIT_STD`, so the logits have that standard deviation and
    dozens of them pass 88.7, where ``exp`` overflows float32; ``"rising"`` sets
    the first coordinate of every query to 1 and that of key ``j`` to
    ``RISE·√d·j/(n-1)``, so the logits grow by :data:`RISE` along the keys and each
    block of keys raises the running max of every row.
    """

    batch: int
    heads: int
    n: int
    d: int
    dtype: str = "float32"
    logits: str = "normal"

    def __str__(self) -> str:
        text = (
            f"({self.batch}, {self.heads}, {self.n}, {self.d}) {self.dtype}"  # (batch, heads, N, d)
        )
        return (
            text
            + {"normal": "", "large": ", large logits", "rising": ", rising logits"}[self.logits]
        )

    @property
    def heads_total(self) -> int:
        return self.batch * self.heads

    @property
    def element_size(self) -> int:
        return self.torch_dtype.itemsize

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def flops(self) -> int:
        """``4·N²·d`` per head: the two matmuls, ``Q Kᵀ`` and ``P V`` (the softmax left out)."""
        return 4 * self.n * self.n * self.d * self.heads_total


PREDICTION_SHAPE = Shape(4, 16, 1000, 64, "float16")
PREDICTION_BLOCK_M = 128


# ---------------------------------------------------------------- the reference and the inputs


def attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` in float32 (its math backend, no TF32), cast to ``q``'s
    dtype.

    One batch element at a time, so that the float32 scores of a timed shape fit a small GPU.
    """
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from brrr.ceilings import tf32

    parts = []
    with tf32(False), sdpa_kernel(SDPBackend.MATH):
        for b in range(q.shape[0]):
            parts.append(
                F.scaled_dot_product_attention(
                    q[b : b + 1].float(),
                    k[b : b + 1].float(),
                    v[b : b + 1].float(),
                    is_causal=causal,
                )
            )
    return torch.cat(parts).to(q.dtype)


def naive_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
) -> torch.Tensor:
    """Attention as eager PyTorch runs it, in three big kernels: the scores ``(q/√d) Kᵀ``, a
    softmax, ``P V``.

    The scale is folded into q (``N·d`` elements, not ``N²``), so the ``N × N``
    traffic is what the grader's rule for it counts (``naive_bytes`` in the lab's checks).
    """
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
    if causal:
        n = q.shape[-2]
        above = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(above, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


LARGE_LOGIT_STD = (
    30.0  # logits about N(0, 30²): dozens of a block's pass 88.7, where exp overflows float32
)
RISE = 24.0  # "rising" logits grow by this much from the first key to the last


def make_inputs(
    shape: Shape, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fresh contiguous ``q``, ``k``, ``v`` for ``shape`` on the device (logits: see
    :class:`Shape`)."""
    on_device = core.device_generator(generator)
    size = (shape.batch, shape.heads, shape.n, shape.d)
    q, k, v = (torch.randn(size, generator=on_device, device=DEVICE) for _ in range(3))
    if shape.logits == "large":
        q = q * LARGE_LOGIT_STD
    elif shape.logits == "rising":
        q[..., 0] = 1.0
        k[..., 0] = torch.linspace(0.0, RISE * shape.d**0.5, shape.n, device=DEVICE)
    return tuple(t.to(shape.torch_dtype).contiguous() for t in (q, k, v))


def inputs_for_demo(
    n: int, d: int = 64, dtype: str = "float32", *, batch: int = 1, heads: int = 2, seed: int = 0
):
    """``q``, ``k``, ``v`` for trying things out in the notebook (the grader draws its own)."""
    generator, _ = core.fresh_generator(seed)
    return make_inputs(Shape(batch, heads, n, d, dtype), generator)


TRAFFIC_SIZES = (128, 256, 512)  # the notebook's comparison (the traffic check draws its own sizes)
TRAFFIC_D = 64

# The lab's traffic rule at traffic_shape(n) for n in TRAFFIC_SIZES, for the notebook's comparison:
# tables, not the rule itself, which the prediction asks for and the grader keeps
# (brrr.labs.flash_attention.checks; tests/labs/test_grading_flash_attention.py checks the tables).
# FlashAttention's bytes by BLOCK_M:
DEMO_FLASH_BYTES = {
    16: (1_179_648, 4_456_448, 17_301_504),
    32: (655_360, 2_359_296, 8_912_896),
    64: (393_216, 1_310_720, 4_718_592),
    128: (262_144, 786_432, 2_621_440),
    256: (262_144, 524_288, 1_572_864),
}
# The three kernels' bytes: (Q, K, V and O; the N × N scores and probabilities), by n.
DEMO_NAIVE_BYTES = {128: (262_144, 524_288), 256: (524_288, 2_097_152), 512: (1_048_576, 8_388_608)}


def traffic_shape(n: int) -> Shape:
    """The shape the traffic check counts at: batch 1, 2 heads, d = 64, float32."""
    return Shape(1, 2, n, TRAFFIC_D)


def sdpa_function():
    """``(F.scaled_dot_product_attention with its flash backend, a label)``, or the default backend
    where the GPU has no flash kernel (a T4: compute capability 7.5)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    probe = torch.zeros(1, 1, 128, 64, dtype=torch.float16, device=DEVICE)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(probe, probe, probe)
    except RuntimeError:
        return (
            F.scaled_dot_product_attention,
            "the backend PyTorch picks (no flash backend on this GPU)",
        )

    def flash(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)

    return flash, "its flash backend"


# ---------------------------------------------------------------- what fusion bought (for the
# notebook)

GPU_SIZES = (1024, 2048, 4096)


def compare_traffic(attention_fn) -> dict:
    """Not graded. The bytes ``attention_fn(q, k, v, out)`` moves at :data:`TRAFFIC_SIZES` (batch 1,
    2 heads, d = 64, float32), beside FlashAttention's rule for the ``BLOCK_M`` it launched (None
    for a ``BLOCK_M`` outside :data:`DEMO_FLASH_BYTES`) and the three kernels' bytes
    (:data:`DEMO_NAIVE_BYTES`).

    CPU: counted in the interpreter (:mod:`brrr.traffic`). GPU: the kernel is
    compiled, and its loads cannot be counted; the launch is recorded (not run)
    and its bytes are the rule's for the ``BLOCK_M`` it launched.
    """
    from brrr import traffic
    from brrr.checks import kernels

    result = {
        "sizes": list(TRAFFIC_SIZES),
        "counted": [],
        "rule": [],
        "block_m": [],
        "naive": [],
        "naive_scores": [],
        "d": TRAFFIC_D,
        "how": "counted" if not ON_GPU else "rule",
    }
    for number, n in enumerate(TRAFFIC_SIZES):
        shape = traffic_shape(n)
        q, k, v = inputs_for_demo(n, TRAFFIC_D, batch=shape.batch, heads=shape.heads)
        out = torch.empty_like(q)
        recipe = kernels.record_launches(attention_fn, [q, k, v, out], ["q", "k", "v", "out"])
        block_m = recipe["launches"][0]["args"]["BLOCK_M"]["value"]
        rule = DEMO_FLASH_BYTES[block_m][number] if block_m in DEMO_FLASH_BYTES else None
        if ON_GPU:
            result["counted"].append(None)
        else:
            with traffic.count({"q": q, "k": k, "v": v, "out": out}) as seen:
                attention_fn(q, k, v, out)
            result["counted"].append(seen.loaded_bytes + seen.stored_bytes)
        result["rule"].append(rule)
        result["block_m"].append(block_m)
        result["naive"].append(sum(DEMO_NAIVE_BYTES[n]))
        result["naive_scores"].append(DEMO_NAIVE_BYTES[n][1])
    return result


def plot_traffic(result: dict, *, stamp: str = ""):
    """Bytes against N: the three kernels (their N × N share shaded) and FlashAttention, counted or
    by the rule."""
    import matplotlib.pyplot as plt

    from brrr.plots import add_stamp

    _, ax = plt.subplots(figsize=(6.5, 3.5))
    sizes = result["sizes"]
    mb = [1e-6 * x for x in result["naive"]]
    rest = [1e-6 * (x - s) for x, s in zip(result["naive"], result["naive_scores"])]
    ax.fill_between(
        sizes,
        rest,
        mb,
        color="#ff7f0e",
        alpha=0.25,
        label="three kernels: N × N scores and probabilities",
    )
    ax.fill_between(sizes, 0, rest, color="#999999", alpha=0.25, label="three kernels: Q, K, V, O")
    ax.plot(sizes, mb, "-", color="#ff7f0e", label="three kernels, in all (by the rule)")
    if None not in result["rule"]:
        ax.plot(
            sizes,
            [1e-6 * x for x in result["rule"]],
            "-",
            color="#1f77b4",
            label=f"FlashAttention, BLOCK_M = {result['block_m'][-1]} (the rule)",
        )
    if result["how"] == "counted":
        ax.plot(
            sizes,
            [1e-6 * x for x in result["counted"]],
            "o",
            color="#1f77b4",
            label="your kernel, counted",
        )
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.set_xlabel("N (keys and queries)")
    ax.set_ylabel("MB moved")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Attention's memory traffic, batch 1, 2 heads, d = {result['d']}, float32")
    ax.legend(fontsize=7, loc="upper left")
    add_stamp(ax, stamp, bottom=0.2)
    return ax


def compare_times(attention_fn) -> dict:
    """Not graded; GPU only. Seconds of ``attention_fn``, :func:`naive_attention` and
    ``F.scaled_dot_product_attention`` in float16 at :data:`GPU_SIZES` (batch 2, 16 heads, d =
    64)."""
    from brrr.timing import bench_together

    sdpa, backend = sdpa_function()
    result = {
        "sizes": list(GPU_SIZES),
        "yours": [],
        "naive": [],
        "sdpa": [],
        "backend": backend,
        "shape": "batch 2, 16 heads, d = 64, float16",
    }
    for n in GPU_SIZES:
        q, k, v = inputs_for_demo(n, 64, "float16", batch=2, heads=16)
        out = torch.empty_like(q)
        times = bench_together(
            {
                "yours": lambda: attention_fn(q, k, v, out),
                "naive": lambda: naive_attention(q, k, v),
                "sdpa": lambda: sdpa(q, k, v),
            },
            budget_s=0.3,
        )
        for key, timing in times.items():
            result[key].append(timing.median_s)
    reference.record("lab-06-flash-attention", result)  # under make gpu-check only
    return result


def plot_times(result: dict, *, stamp: str = ""):
    """Milliseconds against N for your kernel, naive eager attention and SDPA."""
    import matplotlib.pyplot as plt

    from brrr.plots import add_stamp

    _, ax = plt.subplots(figsize=(6.5, 3.5))
    sizes = result["sizes"]
    for key, label, color in (
        ("naive", "naive eager (three kernels)", "#ff7f0e"),
        ("sdpa", f"scaled_dot_product_attention, {result['backend']}", "#2ca02c"),
        ("yours", "your kernel", "#1f77b4"),
    ):
        ax.plot(sizes, [1e3 * s for s in result[key]], "o-", color=color, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
    ax.set_xlabel(f"N ({result['shape']})")
    ax.set_ylabel("ms per call")
    ax.set_title("Attention forward, measured")
    ax.legend(fontsize=7)
    add_stamp(ax, stamp, bottom=0.2)
    return ax
