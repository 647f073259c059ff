"""Two GPUs, one lesson (brrr_book/two_gpus.py): each kernel's ratio from one recorded GPU to
another, predicted from the roofs of its regime and judged against the noise.

The synthetic records make every roof's ratio different, so a kernel predicted from the wrong roof
gets a wrong number: copy 1.45x, bf16 matmul 1.1x, fp16 matmul 1.2x, the multiply rate 1.2x, the
host's floor 1.6x; the datasheets say 1.43x for the bandwidth and 1.0x for the matmul."""

import json

import pytest

from brrr import column, datasheets
from brrr_book import two_gpus
from brrr.roofline import ROOF_NOISE

pytestmark = pytest.mark.device_independent

OLD, NEW = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
N = 2**20
OLD_COPY, NEW_COPY = 2.0e12, 2.9e12  # 1.45x
OLD_BF16, NEW_BF16 = 500e12, 550e12  # 1.1x
OLD_FP16, NEW_FP16 = 400e12, 480e12  # 1.2x
OLD_MULTIPLY, NEW_MULTIPLY = 20e12, 24e12  # 1.2x
OLD_FLOOR, NEW_FLOOR = 8e-6, 5e-6  # 1.6x
ONE_PASS = 2 * 4 * N  # the sweep's fp32 x = x * 2 reads and writes 4N bytes


def _figure(device: str, date: str, values: dict) -> dict:
    env = {"device": device, "mode": "GPU", "torch": "2.11.0", "triton": "3.6.0", "date": date}
    return {"env": env, "values": values}


def _sweep(copy: float, multiply: float, flat: list[float], knee: float) -> dict:
    return {
        "n": N,
        "copy_bandwidth": copy,
        "multiply_rate": multiply,
        "knee_predicted_multiply": 2 * 4 * multiply / copy,
        "knee_measured": knee,
        "seconds": {"1": flat[0], "2": flat[1], "4": flat[2], "256": 10 * max(flat)},
    }


def _common(device, date, *, copy, multiply, flat, knee, softmax, attention, tokens) -> dict:
    return {
        "repeat-sweep": _figure(device, date, _sweep(copy, multiply, flat, knee)),
        "triton-softmax": _figure(device, date, {"Triton softmax": softmax}),
        "compute.layer_intensity": _figure(
            device,
            date,
            {
                "dtype": "bfloat16",
                "attention": [
                    {"seq": 128, "intensity": 1.0, "flop_per_s": 1e12},
                    {"seq": 8192, "intensity": 4096.0, "flop_per_s": attention},
                ],
            },
        ),
        "capstone": _figure(
            device,
            date,
            {"rows": [{"tokens_per_s": tokens, "regime": "overhead-bound", "shares": {}}]},
        ),
    }


def old_record() -> dict:
    """The older GPU: figures only (no ceilings), as the H100's first run; Lab 2 and nb 10
    recorded, its floor from its eager-op rate, its bf16 roof from its matmul sweep."""
    figures = _common(
        OLD,
        "2026-11-24",
        copy=OLD_COPY,
        multiply=OLD_MULTIPLY,
        flat=[ONE_PASS / OLD_COPY, 1.1 * ONE_PASS / OLD_COPY, ONE_PASS / OLD_COPY],  # 10% spread
        knee=80.0,  # the knee its roofs predict
        softmax=[1.9e12, 2.0e12],
        attention=400e12,
        tokens=100e3,
    )
    matmul = [
        {"dtype": "bfloat16", "n": 4096, "flop_per_s": OLD_BF16},
        {"dtype": "float16", "n": 4096, "flop_per_s": OLD_FP16},
    ]
    figures["compute.matmul"] = _figure(OLD, "2026-11-24", {"square": matmul, "unaligned": []})
    figures["overhead/python-vs-pytorch"] = _figure(
        OLD, "2026-11-24", {"torch_ops_per_s": 1 / OLD_FLOOR}
    )
    figures["lab-02-fuse-it"] = _figure(OLD, "2026-11-24", {"fused_bandwidth": 1.9e12})
    cos = {"compiled x.cos().cos()": {"bandwidth": 1.9e12}}
    figures["cos-cos"] = _figure(OLD, "2026-11-24", cos)
    return {"figures": figures}


def new_record() -> dict:
    """The newer GPU: ceilings (with two readings of its bf16 matmul) and the sections that ran;
    Lab 2 and nb 10 failed, so it lacks them."""
    figures = _common(
        NEW,
        "2026-11-28",
        copy=NEW_COPY,
        multiply=NEW_MULTIPLY,
        flat=[ONE_PASS / (1.08 * 1.45 * OLD_COPY)] * 3,  # 8% faster than the 1.45x predicted
        knee=0.5 * 80.0,  # half the old knee, where the roofs predict 0.83x
        softmax=[2.8e12, 2.9e12],
        attention=440e12,
        tokens=160e3,
    )
    ceilings = {
        "copy_bandwidth": NEW_COPY,
        "dispatch_overhead": NEW_FLOOR,
        "matmul_peak": {"bfloat16": NEW_BF16, "float16": NEW_FP16},
        "matmul_shape": {"bfloat16": "4096x4096x4096", "float16": "4096x4096x4096"},
        "matmul_spread": {"bfloat16": {"4096x4096x4096": [0.99 * NEW_BF16, NEW_BF16]}},
        "env": _figure(NEW, "2026-11-28", {})["env"],
    }
    return {"schema": 2, "ceilings": ceilings, "figures": figures}


@pytest.fixture
def rows() -> dict[str, two_gpus.Row]:
    found = two_gpus.compare(("old", old_record()), ("new", new_record()))
    return {row.kernel: row for row in found}


def test_each_kernel_is_predicted_by_the_roofs_of_its_regime(rows):
    sheets = datasheets.lookup(OLD), datasheets.lookup(NEW)
    expected = {
        "copy": sheets[1].bandwidth / sheets[0].bandwidth,  # a roof itself: the datasheets
        "fused chain (Lab 2)": NEW_COPY / OLD_COPY,
        "Triton softmax (nb 12)": NEW_COPY / OLD_COPY,
        "repeat sweep's flat part": NEW_COPY / OLD_COPY,
        "repeat sweep's ridge": (NEW_MULTIPLY / OLD_MULTIPLY) / (NEW_COPY / OLD_COPY),
        "bf16 matmul": sheets[1].peaks["bfloat16"] / sheets[0].peaks["bfloat16"],
        "attention (nb 22)": NEW_BF16 / OLD_BF16,
        "FlashAttention (Lab 6)": NEW_FP16 / OLD_FP16,
        "overhead floor": 1.0,  # host time: the GPU does not enter it
        "capstone's start": OLD_FLOOR / NEW_FLOOR,
    }
    assert {kernel: rows[kernel].predicted for kernel in expected} == pytest.approx(expected)
    assert rows["repeat sweep's flat part"].regime == "memory-bound"  # counted: 4 FLOPs per 8 bytes
    assert rows["attention (nb 22)"].regime == "compute-bound"  # counted: far above the ridge
    assert rows["capstone's start"].regime == "overhead-bound"  # as the diagnosis recorded it


def test_each_measured_ratio_is_judged_against_its_prediction(rows):
    measured = {
        "copy": NEW_COPY / OLD_COPY,
        "Triton softmax (nb 12)": 2.9 / 2.0,
        "repeat sweep's ridge": 0.5,
        "bf16 matmul": NEW_BF16 / OLD_BF16,
        "attention (nb 22)": 440 / 400,
        "overhead floor": OLD_FLOOR / NEW_FLOOR,
        "capstone's start": 1.6,
    }
    assert {kernel: rows[kernel].measured for kernel in measured} == pytest.approx(measured)
    verdicts = {kernel: row.verdict for kernel, row in rows.items() if row.measured is not None}
    assert verdicts == {
        "copy": "within the noise",
        "Triton softmax (nb 12)": "within the noise",
        "repeat sweep's flat part": "within the noise",
        "repeat sweep's ridge": "missed",
        "bf16 matmul": "missed",
        "attention (nb 22)": "within the noise",
        "overhead floor": "missed",
        "capstone's start": "within the noise",
    }
    assert rows["repeat sweep's ridge"].why.startswith("H100 reached 100% of the knee its own")
    assert "H200 60%" in rows["repeat sweep's ridge"].why
    assert "H100 reached 51% of its datasheet's bf16 peak, H200 56%" in rows["bf16 matmul"].why
    floor = rows["overhead floor"].why
    assert floor.startswith("the hosts differ: an eager op took 8.00 us on H100, 5.00 us on H200")
    assert rows["bf16 matmul"].reason.startswith("predicted from the datasheets")


def test_the_noise_is_the_records_spreads_and_never_less_than_a_roofs(rows):
    """The flat part's old readings spread 10%: its 8% miss is noise. Without a spread, the band is
    ROOF_NOISE; the compute-bound prediction adds its matmul roofs' spread (1% on the new GPU)."""
    flat = rows["repeat sweep's flat part"]
    assert flat.band == pytest.approx(0.1) and flat.measured / flat.predicted == pytest.approx(1.08)
    assert rows["Triton softmax (nb 12)"].band == ROOF_NOISE
    assert rows["attention (nb 22)"].band == ROOF_NOISE  # 1% of spread is below a roof's noise
    assert rows["bf16 matmul"].band == ROOF_NOISE


def test_a_kernel_a_record_lacks_gets_its_row_and_fills_in_when_it_lands(rows):
    for kernel in ("fused chain (Lab 2)", "fused x.cos().cos() (nb 10)"):
        assert rows[kernel].verdict == f"not recorded on {NEW} yet", kernel
        assert rows[kernel].measured is None and rows[kernel].predicted is not None
    assert rows["FlashAttention (Lab 6)"].verdict == f"not recorded on {OLD} or {NEW} yet"
    landed = new_record()
    landed["figures"]["lab-02-fuse-it"] = _figure(NEW, "2026-12-01", {"fused_bandwidth": 2.8e12})
    found = two_gpus.compare(("old", old_record()), ("new", landed))
    (chain,) = [row for row in found if row.kernel == "fused chain (Lab 2)"]
    assert chain.measured == pytest.approx(2.8 / 1.9) and chain.verdict == "within the noise"


def test_every_pair_of_recorded_gpus_goes_older_first(tmp_path):
    """By the records' dates, not their file names: the newer GPU's file sorts first here."""
    (tmp_path / "a-newer.json").write_text(json.dumps(new_record()))
    assert two_gpus.compare(folder=tmp_path) == []
    assert "Fewer than two GPUs" in two_gpus.table([])
    (tmp_path / "z-older.json").write_text(json.dumps(old_record()))
    found = two_gpus.compare(folder=tmp_path)
    assert {row.gpus for row in found} == {(OLD, NEW)}
    assert [row.kernel for row in found] == [kernel.name for kernel in two_gpus.KERNELS]


def test_the_committed_records_make_a_table_with_the_h200_beside_the_h100():
    found = two_gpus.compare()
    assert {row.gpus for row in found} == {(OLD, NEW)}
    text = two_gpus.table(found)
    assert text.splitlines()[0].startswith("H200 over H100")
    assert f"recorded [measured on {OLD}" in text and f"recorded [measured on {NEW}" in text
    assert all(len(line) <= column.WIDTH for line in text.splitlines()), text
    assert all(kernel.name in text for kernel in two_gpus.KERNELS)
    said = two_gpus.sentences(found)
    assert set(said) == {"datasheets", "gains", "verdicts"} and all(said.values())
    assert "H200" in said["gains"] and "H100" in said["gains"]
