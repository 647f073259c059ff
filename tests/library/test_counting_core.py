import torch

from brrr import counting


def test_unary_pointwise_moves_eight_bytes_per_fp32_element():
    op = counting.pointwise(1000)
    assert (op.flops, op.bytes) == (1000, 8000)


def test_binary_pointwise_in_half_precision():
    op = counting.pointwise(1000, torch.float16, inputs=2)
    assert op.bytes == 3 * 1000 * 2


def test_matmul_counts_by_hand():
    op = counting.matmul(2, 3, 4)
    assert op.flops == 2 * 2 * 3 * 4
    assert op.bytes == (2 * 4 + 4 * 3 + 2 * 3) * 4


def test_counts_add_up_like_an_unfused_chain():
    chain = counting.pointwise(10, name="cos") + counting.pointwise(10, name="cos")
    assert (chain.flops, chain.bytes) == (20, 160)
    assert chain.intensity == 20 / 160
