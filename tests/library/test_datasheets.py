"""brrr.datasheets: known GPUs get their dense datasheet peaks; anything else gets none."""

from brrr import datasheets, essay


def test_known_gpus():
    assert (
        datasheets.lookup("NVIDIA A100-SXM4-80GB").peaks["bfloat16"]
        == essay.A100["matmul_peak_bf16"]
    )
    assert datasheets.lookup("NVIDIA A100 80GB PCIe").peaks["float32"] == 19.5e12
    assert datasheets.lookup("NVIDIA H100 80GB HBM3") is datasheets.H100_SXM
    assert datasheets.lookup("NVIDIA H100 PCIe") is datasheets.H100_PCIE
    assert datasheets.lookup("NVIDIA H200") is datasheets.H200_SXM


def test_unknown_devices_get_no_figure():
    for name in (
        "Intel(R) Xeon(R) Processor",
        "NVIDIA H200 NVL",
        "NVIDIA GeForce RTX 4090",
        "Tesla T4",
    ):
        assert datasheets.lookup(name) is None, name
