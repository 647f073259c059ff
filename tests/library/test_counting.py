"""brrr.counting against counts worked out by hand for small layers."""

import pytest
import torch

from brrr import counting


def test_matmul_hand_count():
    # (2×3) @ (3×4): 2·2·4·3 = 48 FLOPs; 6 + 12 + 8 = 26 fp32 elements = 104 bytes
    op = counting.matmul(2, 4, 3)
    assert (op.flops, op.bytes) == (48, 104)


def test_linear_hand_count():
    # batch 4, 3 -> 2 features: matmul 2·4·3·2 = 48, bias 4·2 = 8 FLOPs
    # read x 12 + W 6 + b 2, write y 8 = 28 fp32 elements = 112 bytes
    op = counting.linear(4, 3, 2)
    assert (op.flops, op.bytes) == (56, 112)
    no_bias = counting.linear(4, 3, 2, bias=False)
    assert (no_bias.flops, no_bias.bytes) == (48, 104)


def test_linear_bf16_halves_the_bytes_not_the_flops():
    fp32, bf16 = counting.linear(64, 128, 256), counting.linear(64, 128, 256, torch.bfloat16)
    assert bf16.flops == fp32.flops
    assert bf16.bytes * 2 == fp32.bytes


def test_linear_intensity_grows_with_batch_then_levels_off():
    # d = 1024 in and out, fp32: batch 1 reads the 4 MiB weight for 2 MFLOP, intensity ≈ 0.5
    # FLOP/byte.
    ops = [counting.linear(batch, 1024, 1024, bias=False) for batch in (1, 16, 256, 4096, 2**20)]
    intensities = [op.intensity for op in ops]
    assert intensities == sorted(intensities)
    assert intensities[0] == pytest.approx(2 * 1024 * 1024 / ((1024 + 1024 * 1024 + 1024) * 4))
    # the limit for a huge batch: 2·in·out / ((in + out)·4 bytes) = 256 FLOPs/byte
    assert intensities[-1] == pytest.approx(256, rel=0.01)
    assert [op.name for op in ops][1] == "linear 1024->1024, batch 16"


def test_layer_norm_hand_count():
    # 2 rows of 8: 7 FLOPs per element with the affine scale and shift = 112 FLOPs
    # read 16, write 16, read weight 8 and bias 8 = 48 fp32 elements = 192 bytes
    op = counting.layer_norm(2, 8)
    assert (op.flops, op.bytes) == (112, 192)
    plain = counting.layer_norm(2, 8, affine=False)
    assert (plain.flops, plain.bytes) == (80, 128)


def test_softmax_hand_count():
    # 3 rows of 10, fp16: 5 FLOPs per element = 150; read 30 + write 30 elements × 2 bytes = 120
    # bytes
    op = counting.softmax(3, 10, torch.float16)
    assert (op.flops, op.bytes) == (150, 120)


def test_attention_hand_count():
    # batch 1, 2 heads, seq 4, head dim 8:
    # per head Q Kᵀ 2·4·4·8 = 256, P V 256, softmax 5·16 = 80 -> 592; two heads 1184 FLOPs
    fused = counting.attention(1, 2, 4, 8)
    assert fused.flops == 1184
    # fused: read Q, K, V and write O = 4·4·8 = 128 elements per head, 256 in all, × 4 bytes
    assert fused.bytes == 1024
    # unfused: plus scores written, read, probabilities written, read: 4·16 = 64 per head
    unfused = counting.attention(1, 2, 4, 8, fused=False)
    assert unfused.flops == fused.flops
    assert unfused.bytes == 1024 + 2 * 64 * 4


def test_fused_attention_intensity_grows_with_sequence_not_batch():
    short, long_ = counting.attention(8, 12, 128, 64), counting.attention(8, 12, 2048, 64)
    bigger_batch = counting.attention(64, 12, 128, 64)
    assert long_.intensity > 10 * short.intensity
    assert bigger_batch.intensity == pytest.approx(short.intensity)


def test_pointwise_and_sum():
    a = counting.pointwise(10, inputs=2, flops_per_element=1)
    assert (a.flops, a.bytes) == (10, 120)
    both = a + counting.reduction(2, 5)
    assert (both.flops, both.bytes) == (20, 120 + 48)
