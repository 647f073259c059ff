"""FLOP and byte counts of common ops, written out so the traffic model sits next to the code.

Bytes are the minimum main-memory traffic: each input read once, each output
written once, as an ideally fused kernel would do. Unfused chains move more; count
them as the sum of their ops. Each function returns an :class:`OpCount`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class OpCount:
    name: str
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes

    def __add__(self, other: "OpCount") -> "OpCount":
        return OpCount(
            f"{self.name} + {other.name}", self.flops + other.flops, self.bytes + other.bytes
        )


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def pointwise(
    n: int,
    dtype: torch.dtype = torch.float32,
    *,
    inputs: int = 1,
    outputs: int = 1,
    flops_per_element: int = 1,
    name: str = "pointwise",
) -> OpCount:
    """n elements: read ``inputs`` tensors, write ``outputs``. A unary fp32 op moves 8
    bytes/element."""
    return OpCount(name, flops_per_element * n, (inputs + outputs) * n * element_size(dtype))


def reduction(
    rows: int, cols: int, dtype: torch.dtype = torch.float32, *, name: str = "row reduction"
) -> OpCount:
    """Sum each row: read rows·cols elements, write rows; cols - 1 adds per row (counted as
    cols)."""
    size = element_size(dtype)
    return OpCount(name, rows * cols, (rows * cols + rows) * size)


def matmul(
    m: int, n: int, k: int, dtype: torch.dtype = torch.float32, *, name: str | None = None
) -> OpCount:
    """(m×k) @ (k×n): 2·m·n·k FLOPs; read m·k + k·n, write m·n elements."""
    size = element_size(dtype)
    return OpCount(
        name or f"matmul {m}x{k} @ {k}x{n}", 2 * m * n * k, (m * k + k * n + m * n) * size
    )


def tiled_matmul_bytes(
    m: int, n: int, k: int, block_m: int, block_n: int, element_size: int
) -> dict[str, int]:
    """Bytes per tensor that (m×k) @ (k×n) moves in ``block_m × block_n`` output tiles (a loop over
    K in each).

    Every tile in a row of tiles reads that row's strip of ``a``, and every tile in
    a column reads its strip of ``b``: ``a`` is read ⌈n / block_n⌉ times, ``b``
    ⌈m / block_m⌉ times, ``out`` written once. One tile as large as the output is
    :func:`matmul`'s minimum.
    """
    return {
        "a": m * k * -(-n // block_n) * element_size,
        "b": k * n * -(-m // block_m) * element_size,
        "out": m * n * element_size,
    }


def tiled_matmul(
    m: int, n: int, k: int, block_m: int, block_n: int, dtype: torch.dtype = torch.float32
) -> OpCount:
    """(m×k) @ (k×n) in ``block_m × block_n`` tiles: 2·m·n·k FLOPs over
    :func:`tiled_matmul_bytes`."""
    nbytes = sum(tiled_matmul_bytes(m, n, k, block_m, block_n, element_size(dtype)).values())
    return OpCount(f"matmul {m}x{k} @ {k}x{n} in {block_m}x{block_n} tiles", 2 * m * n * k, nbytes)


def tiled_matmul_intensity_limit(block_m: int, block_n: int, element_size: int) -> float:
    """The FLOP/B a ``block_m × block_n`` tiling tends to as the matrices grow: 2 / (s·(1/block_m +
    1/block_n)).

    Per step along K a tile loads ``(block_m + block_n)`` elements for
    ``2·block_m·block_n`` FLOPs; the write of ``out`` is spread over all of K.
    """
    return 2 / (element_size * (1 / block_m + 1 / block_n))


# FLOPs per element of the fused normalizations below; brrr.opclasses uses the same constants.
SOFTMAX_FLOPS_PER_ELEMENT = 5  # max, subtract, exp, sum, divide
LAYER_NORM_FLOPS_PER_ELEMENT = 5  # mean, subtract, square + sum (2), multiply by 1/std
AFFINE_FLOPS_PER_ELEMENT = 2  # scale and shift


def softmax(rows: int, cols: int, dtype: torch.dtype = torch.float32) -> OpCount:
    """Row softmax, fused: read and write rows·cols elements; max, subtract, exp, sum, divide ≈ 5
    FLOPs each."""
    size = element_size(dtype)
    return OpCount("softmax", SOFTMAX_FLOPS_PER_ELEMENT * rows * cols, 2 * rows * cols * size)


def layer_norm(
    rows: int, cols: int, dtype: torch.dtype = torch.float32, *, affine: bool = True
) -> OpCount:
    """Layer norm over the last dim, fused: read x (and weight, bias), write y.

    FLOPs per element: mean (1), subtract (1), square and sum for variance (2),
    multiply by 1/std (1), and with ``affine`` scale and shift (2).
    """
    size = element_size(dtype)
    flops = (
        (LAYER_NORM_FLOPS_PER_ELEMENT + (AFFINE_FLOPS_PER_ELEMENT if affine else 0)) * rows * cols
    )
    params = 2 * cols if affine else 0
    return OpCount("layer norm", flops, (2 * rows * cols + params) * size)


def linear(
    batch: int,
    in_features: int,
    out_features: int,
    dtype: torch.dtype = torch.float32,
    *,
    bias: bool = True,
) -> OpCount:
    """``y = x @ W.T + b`` for ``batch`` rows: a (batch×in) @ (in×out) matmul plus a bias add.

    FLOPs: 2·batch·in·out for the matmul, batch·out more for the bias.
    Bytes: read x (batch·in), W (in·out) and b (out); write y (batch·out).

    The weight is read once whatever the batch, so for batch ≪ in, out the
    intensity grows about linearly with the batch, then levels off near
    2·in·out / ((in + out)·element size) once the activations dominate the traffic.
    """
    size = element_size(dtype)
    flops = 2 * batch * in_features * out_features + (batch * out_features if bias else 0)
    elements = (
        batch * in_features
        + in_features * out_features
        + batch * out_features
        + (out_features if bias else 0)
    )
    return OpCount(f"linear {in_features}->{out_features}, batch {batch}", flops, elements * size)


def attention(
    batch: int,
    heads: int,
    seq: int,
    head_dim: int,
    dtype: torch.dtype = torch.float32,
    *,
    fused: bool = True,
) -> OpCount:
    """Self-attention ``softmax(Q Kᵀ / √d) V`` on (batch, heads, seq, head_dim) tensors, no masking.

    FLOPs: 2·s·s·d per head for Q Kᵀ, as many for P V, and a softmax over the s×s
    scores (:data:`SOFTMAX_FLOPS_PER_ELEMENT` each); the 1/√d scale is folded
    into the softmax count.

    Bytes, ``fused=True`` (FlashAttention): read Q, K, V and write O, 4·s·d
    elements per head; the s×s scores never leave the chip. ``fused=False``
    (three separate ops): also write the scores, read them for the softmax, write
    the probabilities and read them again for P V, 4·s·s more elements per head.
    """
    size = element_size(dtype)
    heads_total = batch * heads
    flops = heads_total * (4 * seq * seq * head_dim + SOFTMAX_FLOPS_PER_ELEMENT * seq * seq)
    elements = heads_total * 4 * seq * head_dim
    if not fused:
        elements += heads_total * 4 * seq * seq
    kind = "fused" if fused else "unfused"
    return OpCount(
        f"attention ({kind}), {batch}x{heads} heads, seq {seq}, d {head_dim}",
        flops,
        elements * size,
    )


# Gates per recurrent cell, and FLOPs per hidden unit per time step of the cell's element-wise
# update (the two bias adds of every gate counted with it). LSTM: 4 gates; sigmoid on three, tanh on
# one (2 per gate with its biases: 12), c = f·c + i·g (3), h = o·tanh(c) (2). GRU: 3 gates (9),
# r·(W_hn h + b_hn) (1), n = tanh(...) (1), h = (1 - z)·n + z·h (4). A plain RNN: one gate (3).
RNN_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
RNN_CELL_FLOPS_PER_HIDDEN = {"lstm": 17, "gru": 15, "rnn_tanh": 3, "rnn_relu": 3}


def recurrent_layer(
    kind: str, steps: int, batch: int, inputs: int, hidden: int, *, backward: bool = False
) -> float:
    """FLOPs of one direction of one recurrent layer (``kind``: :data:`RNN_GATES`), ``steps`` long.

    Each step multiplies the input (batch×inputs) and the hidden state (batch×hidden) by the gate
    weights, ``gates·hidden`` columns: ``2·batch·gates·hidden·(inputs + hidden)`` FLOPs, then
    updates each hidden unit (:data:`RNN_CELL_FLOPS_PER_HIDDEN`). Its backward takes two matmuls per
    forward one (the gradients of the inputs and of the weights) and twice the element-wise work."""
    gates = RNN_GATES[kind]
    matmuls = 2 * batch * gates * hidden * (inputs + hidden) * steps
    cell = RNN_CELL_FLOPS_PER_HIDDEN[kind] * batch * hidden * steps
    return 2 * (matmuls + cell) if backward else matmuls + cell
