"""Every lab threshold pinned by value: changing how strict a check is changes this table too.

``brrr.checks.thresholds.TABLE`` is where a lab's strictness lives, and the graders quote it; the
tests beside each lab grade against whatever it holds. A threshold lowered there (a speedup of 3x
made 1x, a traffic bound loosened) would pass them all: here it fails, until this table says the
same. Change both on purpose, with the reason in the threshold's ``why``.
"""

import pytest

from brrr import labs
from brrr.checks import thresholds

# (lab, check, device class): (value, kind), for every entry of thresholds.TABLE.
PINNED = {
    ("01-roofline", "copy_bandwidth", "cpu"): (0.35, "relative"),
    ("01-roofline", "copy_bandwidth", "gpu"): (0.15, "relative"),
    ("01-roofline", "matmul_peak", "cpu"): (0.35, "relative"),
    ("01-roofline", "matmul_peak", "gpu"): (0.15, "relative"),
    ("01-roofline", "ridge_point", "any"): (1e-6, "relative"),
    ("01-roofline", "intensities", "any"): (0.02, "relative"),
    ("01-roofline", "classes", "any"): (0.0, "exact"),
    ("02-fuse-it", "correct", "any"): (0.0, "dtype"),
    ("02-fuse-it", "traffic", "cpu"): (0.0, "exact"),
    ("02-fuse-it", "bandwidth", "gpu"): (0.80, "at_least"),
    ("02-fuse-it", "speedup", "gpu"): (2.0, "at_least"),
    ("03-one-pass", "prediction", "any"): (1e-6, "relative"),
    ("03-one-pass", "softmax_correct", "any"): (0.0, "dtype"),
    ("03-one-pass", "layer_norm_correct", "any"): (0.0, "dtype"),
    ("03-one-pass", "softmax_traffic", "cpu"): (0.0, "exact"),
    ("03-one-pass", "layer_norm_traffic", "cpu"): (0.0, "exact"),
    ("03-one-pass", "softmax_bandwidth", "gpu"): (0.75, "at_least"),
    ("03-one-pass", "layer_norm_bandwidth", "gpu"): (0.75, "at_least"),
    ("03-one-pass", "softmax_speedup", "gpu"): (1.0, "at_least"),
    ("03-one-pass", "layer_norm_speedup", "gpu"): (1.0, "at_least"),
    ("04-make-it-fast", "same_result", "any"): (1e-4, "relative"),
    ("04-make-it-fast", "speedup", "cpu"): (3.0, "at_least"),
    ("04-make-it-fast", "speedup", "gpu"): (5.0, "at_least"),
    ("04-make-it-fast", "speedup.cpu_per_second", "any"): (1.3, "at_most"),
    ("04-make-it-fast", "diagnosis", "any"): (0.15, "absolute"),
    ("04-make-it-fast", "diagnosis.definition", "any"): (0.01, "absolute"),
    ("04-make-it-fast", "diagnosis.op_count", "any"): (0.25, "relative"),
    ("05-tile-it", "prediction", "any"): (1e-9, "relative"),
    ("05-tile-it", "prediction.intensity", "any"): (1e-3, "relative"),
    ("05-tile-it", "correct", "any"): (0.0, "dtype"),
    ("05-tile-it", "traffic", "cpu"): (4.0, "at_most"),
    ("05-tile-it", "peak_4096", "gpu"): (0.70, "at_least"),
    ("05-tile-it", "peak_8192", "gpu"): (0.70, "at_least"),
    ("05-tile-it", "grouped_order", "gpu"): (0.95, "at_least"),
    ("06-flash-attention", "prediction", "any"): (1e-9, "relative"),
    ("06-flash-attention", "correct", "any"): (0.0, "dtype"),
    ("06-flash-attention", "causal", "any"): (0.0, "dtype"),
    ("06-flash-attention", "traffic", "cpu"): (0.6, "at_most"),
    ("06-flash-attention", "speed_vs_naive", "gpu"): (3.0, "at_least"),
    ("06-flash-attention", "speed_vs_sdpa", "gpu"): (0.5, "at_least"),
}

# Timed checks measure this many times before they fail, on each device class.
PINNED_ATTEMPTS = {"cpu": 3, "gpu": 3}


def test_the_table_holds_exactly_the_pinned_entries():
    assert set(thresholds.TABLE) == set(PINNED), (
        f"added: {sorted(set(thresholds.TABLE) - set(PINNED))}; removed: "
        f"{sorted(set(PINNED) - set(thresholds.TABLE))}"
    )


@pytest.mark.parametrize("key", sorted(PINNED), ids=lambda key: ":".join(key))
def test_each_threshold_has_its_pinned_value_kind_and_a_reason(key):
    entry = thresholds.TABLE[key]
    assert (entry.value, entry.kind) == PINNED[key], (
        f"{key}: {entry.value} {entry.kind}, pinned {PINNED[key]}"
    )
    assert len(entry.why) > 30, f"{key}: a threshold says why it is where it is"


def test_the_attempts_are_pinned():
    assert thresholds.ATTEMPTS == PINNED_ATTEMPTS


def test_every_graded_check_reads_a_pinned_threshold_on_its_device():
    """What each lab grades, on each device class, resolves to an entry of the table above."""
    for lab in labs.LABS:
        for device, checks in labs.lab(lab).CHECKS.items():
            for check in checks:
                key = (
                    (lab, check, device) if (lab, check, device) in PINNED else (lab, check, "any")
                )
                assert key in PINNED, f"{lab} grades {check} on {device} with no pinned threshold"
                assert thresholds.threshold(lab, check, device) is thresholds.TABLE[key]
