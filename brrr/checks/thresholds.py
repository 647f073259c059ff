"""Every grading threshold in one table, keyed by lab, check and device class.

A threshold says how strict one check is on one class of device. Where it can,
it is relative to something measured on the same machine in the same run (the
copy bandwidth, the eager baseline, ``brrr.ceilings``), so that one table is
fair on a laptop CPU, a T4 and an H100 alike (docs/DESIGN.md, "Grading").

Device classes are ``"cpu"`` and ``"gpu"``; an entry keyed ``"any"`` applies to
both. Which checks a lab grades on each device class is the lab's own list,
``CHECKS`` in its checks module, ``brrr.labs.<lab>.checks``.

To change how strict a check is, change it here and nowhere else; the grader's
messages quote the value and its reason from this table.
"""

from __future__ import annotations

from dataclasses import dataclass

from brrr.device import device_class  # noqa: F401  (thresholds.device_class() is part of this module's API)


@dataclass(frozen=True)
class Threshold:
    """How strict one check is.

    ``kind`` says how ``value`` is read:

    - ``"relative"``: a measured value must lie within ±value (a fraction) of the reference.
    - ``"at_least"``: a measured ratio or fraction must be at least value.
    - ``"at_most"``: a measured ratio must be at most value.
    - ``"absolute"``: a measured fraction must lie within ±value (absolute) of the reference.
    - ``"exact"``: counts must match exactly (value is unused, 0).
    - ``"dtype"``: outputs must match within the tolerance of their dtype
      (``brrr.checks.core.TOLERANCES``; value is unused, 0).
    """

    value: float
    kind: str
    why: str

    def describe(self) -> str:
        if self.kind == "relative":
            return (
                f"within ±{self.value:.0%}"
                if self.value >= 0.01
                else f"within a relative {self.value:g}"
            )
        if self.kind == "at_least":
            return f"at least {self.value:g}"
        if self.kind == "at_most":
            return f"at most {self.value:g}"
        if self.kind == "absolute":
            return f"within ±{self.value:g}"
        if self.kind == "dtype":
            return "within the tolerance of the dtype"
        return "exactly"


# How many times a performance check measures before it fails.
ATTEMPTS = {"cpu": 3, "gpu": 3}

TABLE: dict[tuple[str, str, str], Threshold] = {
    # ---------------------------------------------------------------- lab 1: your machine's
    # roofline
    ("01-roofline", "copy_bandwidth", "cpu"): Threshold(
        0.35,
        "relative",
        "CPU, one thread, on a machine others may share: DRAM bandwidth moves by tens of percent "
        "between runs, so the band is wide; the reference is read between your calls and each call "
        "compared with the readings beside it",
    ),
    ("01-roofline", "copy_bandwidth", "gpu"): Threshold(
        0.15,
        "relative",
        "GPU timings with synchronisation and a median are stable to a few percent; 15% leaves "
        "room for a different but honest buffer size or timer",
    ),
    ("01-roofline", "matmul_peak", "cpu"): Threshold(
        0.35, "relative", "CPU, one thread, shared machine: as for copy bandwidth"
    ),
    ("01-roofline", "matmul_peak", "gpu"): Threshold(
        0.15, "relative", "as for copy bandwidth; clocks boost and throttle a little under load"
    ),
    ("01-roofline", "ridge_point", "any"): Threshold(
        1e-6, "relative", "the ridge point is a division: only rounding may differ"
    ),
    ("01-roofline", "intensities", "any"): Threshold(
        0.02,
        "relative",
        "FLOPs and bytes follow the counting rules stated in the lab; 2% forgives a reduction "
        "counted as cols - 1 adds instead of cols",
    ),
    ("01-roofline", "classes", "any"): Threshold(
        0.0, "exact", "each op is memory- or compute-bound by the ridge point measured in this run"
    ),
    # ---------------------------------------------------------------- lab 2: fuse it
    ("02-fuse-it", "correct", "any"): Threshold(
        0.0,
        "dtype",
        "float32 outputs: rtol and atol of a few ulps, see brrr.checks.core.TOLERANCES",
    ),
    ("02-fuse-it", "traffic", "cpu"): Threshold(
        0.0,
        "exact",
        "a fused kernel loads each input element once and stores each output element once, so "
        "the bytes counted in the interpreter are exact",
    ),
    ("02-fuse-it", "bandwidth", "gpu"): Threshold(
        0.80,
        "at_least",
        "a fused pointwise kernel is memory-bound: it should move its bytes at no less than 80% of "
        "the copy bandwidth measured in the same run",
    ),
    ("02-fuse-it", "speedup", "gpu"): Threshold(
        2.0,
        "at_least",
        "the eager chain moves 48 bytes per element and the fused kernel 12, so an honest fusion "
        "is close to 4x faster; 2x leaves a wide margin",
    ),
    # ---------------------------------------------------------------- lab 3: one pass
    ("03-one-pass", "prediction", "any"): Threshold(
        1e-6,
        "relative",
        "the bytes per element follow from the op list and the counting rules stated in the lab: "
        "only rounding may differ",
    ),
    ("03-one-pass", "softmax_correct", "any"): Threshold(
        0.0,
        "dtype",
        "float32 and float16 outputs, accumulated in float32: see brrr.checks.core.TOLERANCES",
    ),
    ("03-one-pass", "layer_norm_correct", "any"): Threshold(
        0.0,
        "dtype",
        "float32 and float16 outputs, accumulated in float32: see brrr.checks.core.TOLERANCES",
    ),
    ("03-one-pass", "softmax_traffic", "cpu"): Threshold(
        0.0,
        "exact",
        "one pass loads each element of x once and stores each element of out once, so the bytes "
        "counted in the interpreter are exact",
    ),
    ("03-one-pass", "layer_norm_traffic", "cpu"): Threshold(
        0.0,
        "exact",
        "x loaded once and out stored once, exactly; weight and bias at most once per program (row "
        "block) of the launched grid, where a program that stores nothing fails",
    ),
    ("03-one-pass", "softmax_bandwidth", "gpu"): Threshold(
        0.75,
        "at_least",
        "a row-wise softmax that reads x once and writes out once is memory-bound: it should move "
        "its 8 B per element at no less than 75% of the copy bandwidth measured in the same run "
        "(the reduction across a row costs some of the bandwidth a pure copy gets)",
    ),
    ("03-one-pass", "layer_norm_bandwidth", "gpu"): Threshold(
        0.75, "at_least", "as for softmax: one read of x and one write of out, memory-bound"
    ),
    ("03-one-pass", "softmax_speedup", "gpu"): Threshold(
        1.0,
        "at_least",
        "torch.softmax is itself one fused kernel near the copy bandwidth: a one-pass kernel must "
        "be at least as fast; three timed attempts absorb the noise",
    ),
    ("03-one-pass", "layer_norm_speedup", "gpu"): Threshold(
        1.0, "at_least", "as for softmax, against F.layer_norm's fused kernel"
    ),
    # ---------------------------------------------------------------- lab 4: make this step fast
    ("04-make-it-fast", "same_result", "any"): Threshold(
        1e-4,
        "relative",
        "float32: batching the per-sample loop sums the gradients in another order, which moves "
        "the parameters by about 1e-6 relative after a few steps (the grader draws only problems "
        "whose ReLU inputs stay 1e-5 or more from zero, where that order could switch a unit); a "
        "different model, update or batch moves them by orders of magnitude more",
    ),
    ("04-make-it-fast", "speedup", "cpu"): Threshold(
        3.0,
        "at_least",
        "CPU, one thread: batching the samples removes most of the per-op dispatch and autograd "
        "overhead; 3x sits well below what the reference solution reaches, a margin for a machine "
        "others share (the grader's figure for it is on the Lab 4 solution page, and "
        "python -m brrr.grading.make_it_fast grades it repeatedly)",
    ),
    ("04-make-it-fast", "speedup", "gpu"): Threshold(
        5.0,
        "at_least",
        "GPU: the given step is launch-bound; batching alone gains more than the batch size, and a "
        "CUDA graph or torch.compile(mode='reduce-overhead') removes the remaining launches",
    ),
    ("04-make-it-fast", "speedup.cpu_per_second", "any"): Threshold(
        1.3,
        "at_most",
        "the step runs on one thread like the given one: a process using more than 1.3 CPU-seconds "
        "per second of wall time is using more cores; 0.3 covers the notebook's own idle threads "
        "and the clock readings",
    ),
    ("04-make-it-fast", "diagnosis", "any"): Threshold(
        0.15,
        "absolute",
        "the share of the profiled step with no op running moves by several hundredths between "
        "runs on a shared machine, and by more under load; the band is taken around the grader's "
        "profiles right before and after the student's. The narrow problem's share exceeds the "
        "wide one's by more than 0.15 (about 0.3 to 0.5 against 0.02 to 0.1 on a CPU), so the "
        "number right for one fails the other",
    ),
    ("04-make-it-fast", "diagnosis.definition", "any"): Threshold(
        0.01,
        "absolute",
        "the fraction computed from the student's own trace by the lab's definition: only rounding "
        "may differ",
    ),
    ("04-make-it-fast", "diagnosis.op_count", "any"): Threshold(
        0.25,
        "relative",
        "one profiled call of the given step records the same ops every time; 25% leaves room for "
        "a different torch version and catches a trace of another step, another problem or two "
        "calls",
    ),
    # ---------------------------------------------------------------- lab 5: tile it
    ("05-tile-it", "prediction", "any"): Threshold(
        1e-9,
        "relative",
        "the bytes of a tiling follow from the shape and the rule stated in the lab (a read "
        "⌈N/BLOCK_N⌉ times, b ⌈M/BLOCK_M⌉ times, out written once): a whole number, compared "
        "exactly",
    ),
    ("05-tile-it", "prediction.intensity", "any"): Threshold(
        1e-3,
        "relative",
        "2·M·N·K over the bytes: a value rounded to four significant digits passes, a wrong count "
        "of FLOPs or bytes does not",
    ),
    ("05-tile-it", "correct", "any"): Threshold(
        0.0,
        "dtype",
        "float32 and float16 outputs of a float32 accumulation: see brrr.checks.core.TOLERANCES "
        "(inputs scaled so that outputs are about N(0, 1) whatever K). The float16 case with K = "
        "6,000 and values in [0, 1) sums to about 1,500, where float16 values are 1 apart: a "
        "float32 accumulator rounded once at the store stays within a third of the tolerance, a "
        "float16 accumulator rounded at every step of the K loop is outside it for hundreds of the "
        "4,096 outputs (BLOCK_K up to 128)",
    ),
    ("05-tile-it", "traffic", "cpu"): Threshold(
        4.0,
        "at_most",
        "each launched tiling weighed at 256×256 @ 256×256 float32, at most 4× the minimum (a and "
        "b read once, out written once: 786,432 B). This allows square 64 × 64 tiles (3.0×, 14 "
        "FLOP/B) and anything larger, and 128 × 32 (3.7×); it refuses 32 × 64 (4.3×), 32 × 32 "
        "(5.7×) and smaller, whose intensity at large shapes, 8 FLOP/B in float32 for 32 × 32, "
        "leaves a matmul memory-bound on any GPU. The counted bytes must also equal what the "
        "launched tiling implies, exactly, at two shapes drawn per submission",
    ),
    ("05-tile-it", "peak_4096", "gpu"): Threshold(
        0.70,
        "at_least",
        "bfloat16 at 4096³ (float16 on a GPU without bfloat16, as a T4): a tiled Triton kernel "
        "with large tiles (128 × 128 and up), float32 accumulation and software pipelining reaches "
        "70% or more of the torch.mm (cuBLAS) peak measured in the same run",
    ),
    ("05-tile-it", "peak_8192", "gpu"): Threshold(
        0.70,
        "at_least",
        "as at 4096³; at 8192³ the grid is four times larger and the order of programs matters",
    ),
    ("05-tile-it", "grouped_order", "gpu"): Threshold(
        0.95,
        "at_least",
        "the student's kernel with its own GROUP_M against the same kernel with GROUP_M = 1 "
        "(row-major order), timed in turns in the same run at 8192³ (Lab 5's timed dtype): grouped "
        "order should not be slower. Back-to-back timings of one kernel differ by a few percent, "
        "so 5% slower is still a pass",
    ),
    # ---------------------------------------------------------------- lab 6: FlashAttention forward
    ("06-flash-attention", "prediction", "any"): Threshold(
        1e-9,
        "relative",
        "the bytes follow from the shape and the rule stated in the lab (FlashAttention: Q and O "
        "once, K and V ⌈N/BLOCK_M⌉ times; three kernels: Q, K, V and O once and 4·N² elements per "
        "head of scores and probabilities): whole numbers, compared exactly",
    ),
    ("06-flash-attention", "correct", "any"): Threshold(
        0.0,
        "dtype",
        "float32 and float16 outputs of a float32 accumulation against "
        "scaled_dot_product_attention in float32: see brrr.checks.core.TOLERANCES. The large "
        "logits (a standard deviation of 30, up to about ±120) are float16 inputs: float32 rounds "
        "a logit near 120 by about 1e-5 relative, the float32 tolerance itself, and a float16 "
        "output's tolerance (2e-3) holds such rounding with room to spare (a third of it is used)",
    ),
    ("06-flash-attention", "causal", "any"): Threshold(
        0.0, "dtype", "as for correct, against scaled_dot_product_attention with is_causal=True"
    ),
    ("06-flash-attention", "traffic", "cpu"): Threshold(
        0.6,
        "at_most",
        "bytes counted at three (batch, heads, N, d) and dtypes drawn per submission (N odd) must "
        "equal FlashAttention's for the launched BLOCK_M, exactly, with nothing stored but out; "
        "and each launched BLOCK_M, weighed at (1, 2, 512, 64) float32, may move at most 0.6× the "
        "three-kernel version's 9,437,184 B. BLOCK_M = 64 moves 0.5× (K and "
        "V read 8 times), 128 moves 0.28×; "
        "32 moves 0.94×, as good as nothing, and 16 more than the three kernels",
    ),
    ("06-flash-attention", "speed_vs_naive", "gpu"): Threshold(
        3.0,
        "at_least",
        "float16 at (2, 16, 4096, 64): naive eager attention writes and reads 4.3 GB of N × N "
        "scores and probabilities, all of it through DRAM; FlashAttention with BLOCK_M = 128 reads "
        "Q once and K and V 32 times, 1.1 GB, most of the re-reads from the L2 cache; both do the "
        "same matmul FLOPs on tensor cores, so a FlashAttention kernel is several times faster, "
        "and 3x leaves a margin",
    ),
    ("06-flash-attention", "speed_vs_sdpa", "gpu"): Threshold(
        0.5,
        "at_least",
        "the same shape against F.scaled_dot_product_attention's flash backend (FlashAttention-2, "
        "hand-tuned CUDA; where the GPU has no flash backend, as a T4, the backend PyTorch picks), "
        "timed in turns in the same run: a Triton kernel with large blocks, exp2 and a software "
        "pipeline reaches half its speed or more",
    ),
}


def threshold(lab: str, check: str, device: str | None = None) -> Threshold:
    """The threshold for ``check`` of ``lab`` on ``device`` (default: this process's device
    class)."""
    device = device or device_class()
    for key in ((lab, check, device), (lab, check, "any")):
        if key in TABLE:
            return TABLE[key]
    raise KeyError(
        f"no threshold for lab {lab!r}, check {check!r} on {device}; see "
        "brrr.checks.thresholds.TABLE"
    )


def attempts(device: str | None = None) -> int:
    return ATTEMPTS[device or device_class()]
