"""Where the FLOPs go and where the time goes, per operator class.

The essay's table (from Ivanov et al., "Data Movement Is All You Need", 2021)
sorts every operator of a BERT training step into three classes:

tensor contraction
    matmuls and batched matmuls (and fused attention, whose work is two matmuls).
statistical normalization
    softmax and layer norm: a reduction over a row, then a map that uses it.
element-wise
    everything else that touches the elements: bias adds, dropout, activations,
    residual adds, their gradients (a bias gradient is a sum over the batch),
    and plain copies.

We add a fourth, ``other``: views and allocation (no arithmetic, no memory
traffic) and, on a CPU, the framework's own bookkeeping (autograd nodes, the
``aten::linear`` wrapper around ``aten::addmm``). The essay's table has no such
row; we show it rather than hide it.

Both sides are counted per aten operator, after autograd, at the level where
a kernel runs:

FLOPs
    :class:`torch.utils.flop_counter.FlopCounterMode`, which knows the
    contractions (mm, addmm, bmm, attention kernels...). It counts nothing for
    any other op, so we pass it explicit formulas for those
    (``custom_mapping``): FLOPs per element of the op's textbook formula,
    counting a comparison or a transcendental function as one FLOP. The
    constants are in :data:`ELEMENTWISE_FLOPS` and :data:`NORMALIZATION_FLOPS`.
runtime
    :mod:`torch.profiler`, each op's *self* time: on a GPU the device time of
    the kernels the op launched, on a CPU the time spent in the op itself, not
    in the ops it called.

One trap: ``nn.TransformerEncoderLayer`` in eval mode under ``no_grad`` takes
a fused "fast path" (one ``aten::_transformer_encoder_layer_fwd`` call), which
FlopCounterMode counts as zero FLOPs. :func:`count_flops` reports any op it
cannot classify in :attr:`FlopCount.unclassified`, and :func:`class_table`
refuses a measurement in which no contraction FLOPs were seen. Measure a
training step (train mode, dropout on), as the essay's table does.
"""

from __future__ import annotations

import enum
import functools
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from brrr import counting, essay, units
from brrr.device import ON_GPU, synchronize
from brrr.traces import quiet_native_stderr


class OpClass(str, enum.Enum):
    CONTRACTION = "tensor contraction"
    NORMALIZATION = "statistical normalization"
    ELEMENTWISE = "element-wise"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


# The essay's three classes, in the essay's order.
ESSAY_CLASSES = (OpClass.CONTRACTION, OpClass.NORMALIZATION, OpClass.ELEMENTWISE)
ALL_CLASSES = ESSAY_CLASSES + (OpClass.OTHER,)

# Essay table keys (brrr.essay.BERT_TABLE) for each class.
ESSAY_KEYS = {
    OpClass.CONTRACTION: "tensor contraction",
    OpClass.NORMALIZATION: "statistical normalization",
    OpClass.ELEMENTWISE: "element-wise",
}

# ---------------------------------------------------------------- the classification

CONTRACTIONS = {
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "addbmm",
    "mv",
    "addmv",
    "dot",
    "vdot",
    "_scaled_mm",
    "convolution",
    "_convolution",
    "convolution_backward",
    "cudnn_convolution",
    "convolution_overrideable",
    "convolution_backward_overrideable",
    "_slow_conv2d_forward",
    "_slow_conv2d_backward",
    # the backends' convolutions, which aten::convolution calls (the profiler's time lands on them)
    "mkldnn_convolution",
    "cudnn_convolution",
    "cudnn_convolution_transpose",
    "cudnn_convolution_relu",
    "cudnn_convolution_add_relu",
    "miopen_convolution",
    "miopen_convolution_transpose",
    "miopen_depthwise_convolution",
    "_conv_depthwise2d",
    "conv_depthwise3d",
    "_nnpack_spatial_convolution",
    "slow_conv3d_forward",
    "slow_conv_dilated2d",
    "slow_conv_dilated3d",
    "slow_conv_transpose2d",
    "slow_conv_transpose3d",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_cudnn_attention_backward",
    "_flash_attention_forward",
    "_flash_attention_backward",
    "_efficient_attention_forward",
    "_efficient_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    # recurrent layers (LSTM, GRU, RNN), whose time is their gates' matmuls
    # (brrr.counting.recurrent_layer)
    "mkldnn_rnn_layer",
    "mkldnn_rnn_layer_backward",
    "_cudnn_rnn",
    "_cudnn_rnn_backward",
    "miopen_rnn",
    "miopen_rnn_backward",
}

# Convolutions whose weight has one input channel per group and more than one group: depthwise.
# They do few FLOPs per byte and run on other kernels than dense ones, so brrr.diagnose gives them a
# row of their own, named with this suffix (``convolution (depthwise)``).
DEPTHWISE = " (depthwise)"

# Element-wise ops: FLOPs per output element (reductions: per input element, see
# _REDUCTIONS). 0 for ops that only move data (copies, fills).
ELEMENTWISE_FLOPS = {
    # arithmetic
    "add": 1,
    "add_": 1,
    "sub": 1,
    "sub_": 1,
    "rsub": 1,
    "mul": 1,
    "mul_": 1,
    "div": 1,
    "div_": 1,
    "neg": 1,
    "reciprocal": 1,
    "pow": 1,
    "sqrt": 1,
    "rsqrt": 1,
    "exp": 1,
    "log": 1,
    "abs": 1,
    "addcmul": 2,
    "addcmul_": 2,
    "addcdiv": 2,
    "addcdiv_": 2,
    "lerp_": 2,
    # activations and their gradients
    "relu": 1,
    "relu_": 1,
    "threshold_backward": 1,
    "sigmoid": 1,
    "sigmoid_backward": 2,
    "tanh": 1,
    "tanh_backward": 2,
    "silu": 3,
    "silu_backward": 6,
    "gelu": 5,  # 0.5·x·(1 + erf(x/√2)): scale, erf, add, two multiplies
    "gelu_backward": 11,  # dy·(Φ(x) + x·φ(x)): erf term (4), gaussian term (5), add, multiply by dy
    "sigmoid_": 1,
    "tanh_": 1,
    "exp_": 1,
    "gelu_": 5,
    "silu_": 3,
    "hardtanh": 1,
    "hardtanh_": 1,
    "hardtanh_backward": 1,
    "hardswish": 4,  # x·min(max(x + 3, 0), 6)/6: add, clamp (2), multiply and divide counted as one
    "hardswish_": 4,
    "hardswish_backward": 4,
    "hardsigmoid": 3,
    "hardsigmoid_": 3,
    "hardsigmoid_backward": 2,
    "leaky_relu": 1,
    "leaky_relu_": 1,
    "leaky_relu_backward": 1,
    "elu": 3,
    "elu_backward": 3,
    "softplus": 3,
    "softplus_backward": 3,
    # the fused cells of a GPU's recurrent layers (per hidden unit of the output, brrr.counting)
    "_thnn_fused_lstm_cell": 17,
    "_thnn_fused_gru_cell": 15,
    # dropout: a random draw compared with p, then a scale
    "bernoulli_": 1,
    "native_dropout": 2,
    "native_dropout_backward": 2,
    # comparisons and selections
    "where": 1,
    "isneginf": 1,
    "masked_fill": 1,
    "masked_fill_": 1,
    "eq": 1,
    "ne": 1,
    "lt": 1,
    "gt": 1,
    "le": 1,
    "ge": 1,
    "logical_not": 1,
    "clamp": 1,
    "clamp_min": 1,
    "clamp_max": 1,
    # a triangle kept, the rest zeroed: the causal mask of aten's own attention
    # (_scaled_dot_product_attention_math, which GPT-2 training with dropout takes on a CPU)
    "tril": 1,
    "tril_": 1,
    "triu": 1,
    "triu_": 1,
    # data movement only
    "copy_": 0,
    "clone": 0,
    "_to_copy": 0,
    "fill_": 0,
    "zero_": 0,
    "zeros_like": 0,
    "ones_like": 0,
    "full_like": 0,
    "cat": 0,
    "stack": 0,
    "index_select": 0,
    "select_backward": 0,
    "slice_backward": 0,
    "embedding": 0,
    "embedding_dense_backward": 0,
    "zeros": 0,
    "ones": 0,
    "full": 0,
    "scalar_tensor": 0,
    "arange": 0,
    "nll_loss_backward": 0,  # writes the gradient of the picked entries: no arithmetic to speak of
    "nll_loss2d_backward": 0,
    # a lookup reads the rows it touches (brrr.diagnose.profile.TrafficLog counts those bytes)
    "_embedding_bag_forward_only": 0,
    "_embedding_bag": 0,
    "_embedding_bag_backward": 0,
    "_embedding_bag_dense_backward": 0,
}

# Element-wise ops whose FLOPs are not per element of one tensor: formulas of their own below
# (_explicit_formulas): a loss that picks one entry a row, the comparisons of a max pool window.
ELEMENTWISE_FORMULAS = frozenset(
    {
        "nll_loss_forward",
        "nll_loss2d_forward",
        "max_pool2d_with_indices",
        "max_pool3d_with_indices",
        "max_pool2d_with_indices_backward",
        "max_pool3d_with_indices_backward",
    }
)

# Reductions counted as element-wise (the bias gradient of a linear layer is a
# sum over the batch): FLOPs per *input* element.
_REDUCTIONS = {"sum": 1, "mean": 1, "all": 1, "any": 1, "amax": 1, "amin": 1, "max": 1, "min": 1}
ELEMENTWISE_FLOPS.update(_REDUCTIONS)

# Normalizations: FLOPs per element of the normalized tensor.
NORMALIZATION_FLOPS = {
    "_softmax": counting.SOFTMAX_FLOPS_PER_ELEMENT,
    # softmax that returns 0 for fully masked rows; FlopCounterMode does not decompose it,
    # and its extra mask check (isneginf, all, where) is not counted
    "_safe_softmax": counting.SOFTMAX_FLOPS_PER_ELEMENT,
    "_log_softmax": counting.SOFTMAX_FLOPS_PER_ELEMENT + 1,  # plus a log
    # dx = y·(dy - sum(dy·y)): multiply, row sum, subtract, multiply
    "_softmax_backward_data": 4,
    "_log_softmax_backward_data": 4,
    # forward: see brrr.counting.layer_norm (5, plus 2 for the affine scale and shift)
    "native_layer_norm": counting.LAYER_NORM_FLOPS_PER_ELEMENT + counting.AFFINE_FLOPS_PER_ELEMENT,
    # backward: recompute x̂ (2), g = dy·γ (1), two row sums (3), dx = (g - mean g -
    # x̂·mean(g·x̂))/σ (4), dγ = Σ dy·x̂ (2), dβ = Σ dy (1)
    "native_layer_norm_backward": 13,
    "native_batch_norm": counting.LAYER_NORM_FLOPS_PER_ELEMENT + counting.AFFINE_FLOPS_PER_ELEMENT,
    "_native_batch_norm_legit": counting.LAYER_NORM_FLOPS_PER_ELEMENT
    + counting.AFFINE_FLOPS_PER_ELEMENT,
    "_native_batch_norm_legit_no_training": 4,  # precomputed statistics: subtract, scale, affine
    "native_batch_norm_backward": 13,
    # the same batch norm as each backend and torch's newer entry points name it
    "_batch_norm_with_update": counting.LAYER_NORM_FLOPS_PER_ELEMENT
    + counting.AFFINE_FLOPS_PER_ELEMENT,
    "_batch_norm_with_update_functional": counting.LAYER_NORM_FLOPS_PER_ELEMENT
    + counting.AFFINE_FLOPS_PER_ELEMENT,
    "_native_batch_norm_legit_functional": counting.LAYER_NORM_FLOPS_PER_ELEMENT
    + counting.AFFINE_FLOPS_PER_ELEMENT,
    "_batch_norm_no_update": 4,
    "cudnn_batch_norm": counting.LAYER_NORM_FLOPS_PER_ELEMENT + counting.AFFINE_FLOPS_PER_ELEMENT,
    "miopen_batch_norm": counting.LAYER_NORM_FLOPS_PER_ELEMENT + counting.AFFINE_FLOPS_PER_ELEMENT,
    "batch_norm_backward": 13,
    "cudnn_batch_norm_backward": 13,
    "miopen_batch_norm_backward": 13,
    "native_group_norm": counting.LAYER_NORM_FLOPS_PER_ELEMENT + counting.AFFINE_FLOPS_PER_ELEMENT,
    "native_group_norm_backward": 13,
    "_fused_rms_norm": 4
    + counting.AFFINE_FLOPS_PER_ELEMENT // 2,  # square, sum, rsqrt-scale, multiply; weight
    # recompute (4), the layer norm backward's terms without the mean (5)
    "_fused_rms_norm_backward": 9,
}
# Composite normalizations: they appear in profiler traces as wrappers around
# the ops above and are decomposed before FLOPs are counted.
_NORMALIZATION_WRAPPERS = {
    "softmax",
    "log_softmax",
    "layer_norm",
    "batch_norm",
    "group_norm",
    "rms_norm",
    "_batch_norm_impl_index",
    "_batch_norm_impl_index_backward",
}
# Their own (self) time is dispatch: brrr.diagnose, which joins the time of the ops they call to
# those ops, shows what is left under "other", as it shows aten::linear.
NORMALIZATION_WRAPPERS = frozenset(_NORMALIZATION_WRAPPERS)

# Names of the same computation: the dispatch-level count can see one (under FlopCounterMode a
# training batch norm is ``_native_batch_norm_legit``) while the profiler, or another backend,
# records another (``native_batch_norm`` on a CPU, ``cudnn_batch_norm`` on a GPU). brrr.diagnose
# joins them.
SAME_WORK = (
    frozenset(
        {
            "native_batch_norm",
            "_native_batch_norm_legit",
            "_native_batch_norm_legit_no_training",
            "_native_batch_norm_legit_functional",
            "_batch_norm_with_update",
            "_batch_norm_with_update_functional",
            "_batch_norm_no_update",
            "cudnn_batch_norm",
            "miopen_batch_norm",
        }
    ),
    frozenset(
        {
            "native_batch_norm_backward",
            "batch_norm_backward",
            "cudnn_batch_norm_backward",
            "miopen_batch_norm_backward",
        }
    ),
)

# Ops whose speed neither roof sets: random numbers (a serial generator per stream), sorting and
# indexing (data-dependent addresses). The essay counts them element-wise, and so does
# :func:`classify`; :mod:`brrr.diagnose` shows them apart, where a row "memory-bound at 3% of the
# copy bandwidth" misleads.
IRREGULAR = {
    "bernoulli_",
    "bernoulli",
    "native_dropout",
    "uniform_",
    "normal_",
    "random_",
    "exponential_",
    "rand",
    "randn",
    "randint",
    "rand_like",
    "randn_like",
    "randperm",
    "multinomial",
    "sort",
    "argsort",
    "topk",
    "unique",
    "_unique2",
    "nonzero",
    "index",
    "index_put_",
    "_index_put_impl_",
    "index_add_",
    "index_select",
    "index_select_backward",
    "gather",
    "scatter",
    "scatter_",
    "scatter_add",
    "scatter_add_",
    "scatter_reduce",
    "embedding_dense_backward",
    "embedding",
    "_embedding_bag",
    "_embedding_bag_forward_only",
    "_embedding_bag_backward",
    "_embedding_bag_dense_backward",
    "masked_select",
    "take",
}

# Views, metadata and allocation: no arithmetic and no memory traffic.
LAYOUT = {
    "view",
    "_unsafe_view",
    "_reshape_alias",
    "reshape",
    "as_strided",
    "t",
    "transpose",
    "permute",
    "expand",
    "select",
    "slice",
    "squeeze",
    "unsqueeze",
    "split",
    "split_with_sizes",
    "unsafe_split",
    "unsafe_split_with_sizes",
    "transpose_",
    "t_",
    "squeeze_",
    "unsqueeze_",
    "chunk",
    "unbind",
    "narrow",
    "detach",
    "alias",
    "lift_fresh",
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "resize_",
    "set_",
    "resolve_conj",
    "resolve_neg",
    "to",
    "flatten",
    "unflatten",
    "view_as",
    "_local_scalar_dense",
    "item",
    "is_same_size",
    "result_type",
    "_has_compatible_shallow_copy_type",
}


def op_name(op) -> str:
    """The bare aten name of an op: ``'aten::addmm'``, ``aten.addmm.default`` and ``aten.addmm``
    give ``'addmm'``."""
    text = str(getattr(op, "_overloadpacket", op))
    if text.startswith("aten::"):
        return text[len("aten::") :]
    if text.startswith("aten."):
        return text.split(".")[1]
    return text


def classify(op) -> OpClass | None:
    """The class of an aten op, or ``None`` for an aten op this module does not know.

    Anything that is not an aten op (autograd nodes, profiler markers) is
    framework bookkeeping: :attr:`OpClass.OTHER`.
    """
    text = str(getattr(op, "_overloadpacket", op))
    if not (text.startswith("aten::") or text.startswith("aten.")):
        return OpClass.OTHER
    name = op_name(text).removesuffix(DEPTHWISE)
    if name in CONTRACTIONS:
        return OpClass.CONTRACTION
    if name in NORMALIZATION_FLOPS or name in _NORMALIZATION_WRAPPERS:
        return OpClass.NORMALIZATION
    if name in ELEMENTWISE_FLOPS or name in IRREGULAR or name in ELEMENTWISE_FORMULAS:
        return OpClass.ELEMENTWISE
    if name in LAYOUT or name in (
        "linear",
        "matmul",
        "einsum",
        "dropout",
        "scaled_dot_product_attention",
        "_scaled_dot_product_attention_math",
        "contiguous",
    ):
        # views, or wrappers whose own (self) time is only dispatch
        return OpClass.OTHER
    return None


# ---------------------------------------------------------------- explicit FLOP formulas


def _numel(shape) -> int:
    return math.prod(shape) if shape is not None else 0


def _first_shape(value):
    """The first tensor shape in an op's output (a shape, or a tuple/list holding shapes)."""
    if isinstance(value, torch.Size):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            shape = _first_shape(item)
            if shape is not None:
                return shape
    return None


def _per_output_element(flops: int):
    def formula(*args, out_shape=None, **kwargs):
        return flops * _numel(_first_shape(out_shape))

    return formula


def _per_input_element(flops: int):
    def formula(*args, out_shape=None, **kwargs):
        return flops * _numel(_first_shape(args[0] if args else out_shape))

    return formula


def attention_pairs(s_q: int, s_k: int, causal: bool) -> int:
    """The (query, key) pairs one head's attention scores: all ``s_q·s_k``, or, causal, those at or
    below the diagonal (query ``i`` sees keys ``0..i``, as aten aligns ``is_causal``), about half.
    A causal kernel skips the blocks above the diagonal: counted in full, GPT-2's attention at
    sequence 1024 read 92.6 GFLOP/s against a 91.3 GFLOP/s matmul roof on our 2-core EPYC (one
    thread, 75% of the time of the same attention not causal)."""
    if not causal:
        return s_q * s_k
    seen = min(s_q, s_k)
    return seen * (seen + 1) // 2 + (s_q - seen) * s_k


def _is_causal(args: tuple, kwargs: dict, position: int) -> bool:
    """An attention op's ``is_causal``, passed at ``position`` among ``args`` or by name (aten
    leaves it out where it is False)."""
    if "is_causal" in kwargs:
        return bool(kwargs["is_causal"])
    return len(args) > position and bool(args[position])


def _cpu_flash_attention(query, key, value, *args, out_shape=None, **kwargs) -> int:
    """(batch, heads, s_q, d) attention: Q Kᵀ and P V, 2·d FLOPs each per scored pair per head
    (:func:`attention_pairs`; ``args``: dropout_p, is_causal)."""
    batch, heads, s_q, d = query
    return 4 * batch * heads * attention_pairs(s_q, key[2], _is_causal(args, kwargs, 1)) * d


def _cpu_flash_attention_backward(
    grad_out, query, key, value, *args, out_shape=None, **kwargs
) -> int:
    """Gradients of both matmuls of the forward, two matmuls each (as FlopCounterMode counts the GPU
    kernels); ``args``: out, logsumexp, dropout_p, is_causal."""
    batch, heads, s_q, d = query
    return 8 * batch * heads * attention_pairs(s_q, key[2], _is_causal(args, kwargs, 3)) * d


def convolution_flops(x_shape, w_shape, out_shape, transposed: bool = False) -> int:
    """2 FLOPs per multiply-add of a convolution: ``2·N·prod(w)·prod(spatial)``, where the weight
    ``(C_out, C_in/groups, k...)`` (transposed: ``(C_in, C_out/groups, k...)``) already carries the
    groups, and the spatial size is the output's (transposed: the input's). A depthwise 3×3
    convolution of ``(N, C, H, W)`` into the same shape: ``2·N·C·9·H·W``."""
    spatial = (x_shape if transposed else out_shape)[2:]
    return 2 * x_shape[0] * math.prod(w_shape) * math.prod(spatial)


def _convolution_forward(
    x_shape, w_shape, *args, out_shape=None, transposed: bool = False, **kwargs
) -> int:
    """Any backend's forward convolution, by its input, weight and output shapes."""
    return convolution_flops(x_shape, w_shape, _first_shape(out_shape), transposed)


def _transposed_convolution_forward(x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
    return convolution_flops(x_shape, w_shape, _first_shape(out_shape), True)


def _convolution_backward(
    grad_out_shape,
    x_shape,
    w_shape,
    _bias,
    _stride,
    _padding,
    _dilation,
    transposed,
    _pad,
    _groups,
    mask,
    **kwargs,
) -> int:
    """The input gradient (a transposed convolution of the output gradient by the weight) and the
    weight gradient (a convolution of the input by the output gradient) each take the forward's
    multiply-adds: the forward's FLOPs once per gradient ``mask`` asks for. Torch's own formula
    (torch 2.13) leaves the groups out of the weight gradient: ``groups`` times too many FLOPs, 33x
    the forward for MobileNetV3."""
    forward = convolution_flops(x_shape, w_shape, grad_out_shape, transposed)
    return forward * (int(bool(mask[0])) + int(bool(mask[1])))


CONVOLUTION_FORWARDS = (
    "mkldnn_convolution",
    "cudnn_convolution",
    "cudnn_convolution_relu",
    "cudnn_convolution_add_relu",
    "miopen_convolution",
    "miopen_depthwise_convolution",
    "_conv_depthwise2d",
    "conv_depthwise3d",
    "_nnpack_spatial_convolution",
    "slow_conv3d_forward",
    "slow_conv_dilated2d",
    "slow_conv_dilated3d",
)
TRANSPOSED_CONVOLUTION_FORWARDS = (
    "cudnn_convolution_transpose",
    "miopen_convolution_transpose",
    "slow_conv_transpose2d",
    "slow_conv_transpose3d",
)
# Ops whose FlopCounterMode formula is wrong: ours replaces it.
CORRECTED = {"convolution_backward", "convolution_backward_overrideable"}


def _recurrent(input_shape, w_ih_shapes, hidden: int, batch_first: bool, backward: bool) -> int:
    """FLOPs of a recurrent stack: :func:`brrr.counting.recurrent_layer` for each input weight (one
    per layer and direction, shaped ``(gates·hidden, inputs)``) over the input's steps and batch."""
    steps, batch = (input_shape[1], input_shape[0]) if batch_first else input_shape[:2]
    if len(input_shape) == 2:  # packed or unbatched: (steps·batch, inputs)
        steps, batch = input_shape[0], 1
    total = 0
    for w_ih in w_ih_shapes:
        gates = w_ih[0] // max(hidden, 1)
        kind = {4: "lstm", 3: "gru"}.get(gates, "rnn_tanh")
        total += counting.recurrent_layer(kind, steps, batch, w_ih[1], hidden, backward=backward)
    return int(total)


def _mkldnn_rnn_layer(
    x,
    w_ih,
    w_hh,
    b_ih,
    b_hh,
    hx,
    cx,
    reverse,
    batch_sizes,
    mode,
    hidden_size,
    num_layers,
    has_biases,
    bidirectional,
    batch_first,
    train,
    **kwargs,
) -> int:
    """One direction of one layer on oneDNN (a CPU's LSTM, GRU and RNN)."""
    return _recurrent(x, [w_ih], hidden_size, batch_first, backward=False)


def _mkldnn_rnn_layer_backward(x, w_ih, *args, **kwargs) -> int:
    """The gradients of :func:`_mkldnn_rnn_layer`; hidden size: the hidden state's last dim."""
    hidden = args[3][-1]  # hx_ after weight2, weight3, weight4
    batch_first = bool(args[-2]) if len(args) >= 2 else False
    return _recurrent(x, [w_ih], hidden, batch_first, backward=True)


def _cudnn_rnn(
    x,
    weights,
    stride,
    weight_buf,
    hx,
    cx,
    mode,
    hidden_size,
    proj_size,
    num_layers,
    batch_first,
    *args,
    **kwargs,
) -> int:
    """A GPU's whole recurrent stack in one call: ``weights`` holds ``stride`` tensors per layer and
    direction, the input weight first."""
    return _recurrent(x, list(weights)[:: max(stride, 1)], hidden_size, batch_first, backward=False)


def _cudnn_rnn_backward(
    x,
    weights,
    stride,
    weight_buf,
    hx,
    cx,
    output,
    grad_output,
    grad_hy,
    grad_cy,
    mode,
    hidden_size,
    proj_size,
    num_layers,
    batch_first,
    *args,
    **kwargs,
) -> int:
    return _recurrent(x, list(weights)[:: max(stride, 1)], hidden_size, batch_first, backward=True)


RECURRENT_FORMULAS = {
    "mkldnn_rnn_layer": _mkldnn_rnn_layer,
    "mkldnn_rnn_layer_backward": _mkldnn_rnn_layer_backward,
    "_cudnn_rnn": _cudnn_rnn,
    "_cudnn_rnn_backward": _cudnn_rnn_backward,
    "miopen_rnn": _cudnn_rnn,
    "miopen_rnn_backward": _cudnn_rnn_backward,
}


def is_depthwise(name: str, shapes) -> bool:
    """Whether a call of convolution op ``name`` with tensor ``shapes`` (its arguments' shapes, in
    order; a backward's start with the output gradient) is depthwise: one input channel per group,
    many groups."""
    if "conv" not in name or name not in CONTRACTIONS:
        return False
    first = 1 if "backward" in name else 0
    if len(shapes) < first + 2 or shapes[first] is None or shapes[first + 1] is None:
        return False
    x, w = shapes[first], shapes[first + 1]
    return len(w) >= 3 and len(x) >= 2 and w[1] == 1 and x[1] > 1


def depthwise_flops(name: str, shapes, out_shape, transposed: bool = False, mask=None) -> int:
    """FLOPs of one depthwise call of ``name``, as :func:`count_flops` counts it
    (:func:`is_depthwise`'s ``shapes``; ``mask``, a backward's ``output_mask``)."""
    if "backward" in name:
        forward = convolution_flops(shapes[1], shapes[2], shapes[0], transposed)
        return forward * sum(int(bool(flag)) for flag in (mask or (True, True))[:2])
    return convolution_flops(shapes[0], shapes[1], out_shape, transposed)


def _per_row(*args, out_shape=None, **kwargs) -> int:
    """One FLOP per row of the first argument: a loss that picks one entry per row and sums them."""
    return args[0][0] if args and args[0] else 0


def _max_pool(x, kernel_size, *args, out_shape=None, **kwargs) -> int:
    """A comparison per window element of every output element."""
    return _numel(_first_shape(out_shape)) * math.prod(kernel_size or (1,))


def _embedding_bag(weight, indices, *args, **kwargs) -> int:
    """A bag's sum or mean: one add per gathered element (``indices × dim``)."""
    return _numel(indices) * (weight[-1] if weight else 1)


def _explicit_formulas(torch_counts: dict | None = None) -> dict:
    """custom_mapping for FlopCounterMode: every op we classify that it does not count, and ours for
    the ops it counts wrong (:data:`CORRECTED`). ``torch_counts``, where given, gathers what
    FlopCounterMode's own formula counts for those (op name -> FLOPs), to set a count against."""
    formulas = {}
    for name, flops in ELEMENTWISE_FLOPS.items():
        formulas[name] = (
            _per_input_element(flops) if name in _REDUCTIONS else _per_output_element(flops)
        )
    for name, flops in NORMALIZATION_FLOPS.items():
        formulas[name] = _per_input_element(flops)
    formulas["_scaled_dot_product_flash_attention_for_cpu"] = _cpu_flash_attention
    formulas["_scaled_dot_product_flash_attention_for_cpu_backward"] = _cpu_flash_attention_backward
    formulas |= {name: _convolution_forward for name in CONVOLUTION_FORWARDS}
    formulas |= {name: _transposed_convolution_forward for name in TRANSPOSED_CONVOLUTION_FORWARDS}
    formulas |= {name: _convolution_backward for name in CORRECTED}
    formulas |= RECURRENT_FORMULAS
    formulas["_embedding_bag"] = formulas["_embedding_bag_forward_only"] = _embedding_bag
    formulas |= dict.fromkeys(("nll_loss_forward", "nll_loss2d_forward"), _per_row)
    formulas |= dict.fromkeys(("max_pool2d_with_indices", "max_pool3d_with_indices"), _max_pool)
    formulas |= dict.fromkeys(
        ("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward"),
        _per_input_element(1),  # each gradient element added into its window's maximum
    )
    mapping = {}
    for name, formula in formulas.items():
        packet = getattr(torch.ops.aten, name, None)
        if packet is not None and (packet not in flop_registry or name in CORRECTED):
            mapping[packet] = formula
            if name in CORRECTED and packet in flop_registry and torch_counts is not None:
                mapping[packet] = _beside_torch(name, formula, flop_registry[packet], torch_counts)
    return mapping


def _beside_torch(name: str, ours, theirs, torch_counts: dict):
    """``ours``, adding what FlopCounterMode's formula ``theirs`` counts to ``torch_counts``."""

    def formula(*args, out_shape=None, **kwargs):
        torch_counts[name] = torch_counts.get(name, 0) + int(
            theirs(*args, out_val=out_shape, **kwargs)
        )
        return ours(*args, out_shape=out_shape, **kwargs)

    return formula


@functools.cache
def _formula_packets() -> frozenset:
    return frozenset(_explicit_formulas())


def has_formula(name: str) -> bool:
    """Whether FLOPs of op ``name`` are counted: by FlopCounterMode, by a formula of ours (0 for ops
    that only move data), or as no arithmetic (views, wrappers, random draws, indexing)."""
    name = name.removesuffix(DEPTHWISE)
    if "." in name or "::" in name:  # not an aten op (profiler::, a library's own namespace)
        return True
    packet = getattr(torch.ops.aten, name, None)
    counted = packet is not None and packet in _formula_packets()
    known = name in LAYOUT or name in IRREGULAR or classify("aten::" + name) is OpClass.OTHER
    return counted or known or (packet is not None and packet in flop_registry)


# ---------------------------------------------------------------- counting FLOPs


class _OpLog(TorchDispatchMode):
    """Counts every aten op that runs (after FlopCounterMode's decompositions)."""

    def __init__(self):
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls[op_name(func)] += 1
        return func(*args, **(kwargs or {}))


@dataclass
class FlopCount:
    """FLOPs of one run, per aten op, with the ops nobody could classify."""

    flops: dict[str, int]  # op name -> FLOPs
    calls: dict[str, int]  # op name -> calls
    unclassified: dict[str, int] = field(
        default_factory=dict
    )  # op name -> calls, no class and no formula
    # op name -> FLOPs FlopCounterMode's own formula counts, for the ops whose formula ours replaces
    torch_flops: dict[str, int] = field(default_factory=dict)

    @property
    def no_formula(self) -> dict[str, int]:
        """Ops that ran and whose FLOPs nothing counts (:func:`has_formula`): name -> calls.
        Their 0 is a gap in the count, never a measurement."""
        return {name: calls for name, calls in self.calls.items() if not has_formula(name)}

    def agrees_with_torch(self, name: str) -> bool:
        """Whether the count of op ``name`` is FlopCounterMode's: torch counted it by its formula,
        or ours replaced torch's and both gave the same FLOPs."""
        name = name.removesuffix(DEPTHWISE)
        if name in self.torch_flops:
            return self.torch_flops[name] == self.flops.get(name, 0)
        packet = getattr(torch.ops.aten, name, None)
        return packet is not None and packet in flop_registry and name not in CORRECTED

    def per_class(self) -> dict[OpClass, int]:
        totals = {cls: 0 for cls in ALL_CLASSES}
        for name, flops in self.flops.items():
            totals[classify("aten::" + name) or OpClass.OTHER] += flops
        return totals

    @property
    def total(self) -> int:
        return sum(self.flops.values())


def count_flops(fn: Callable[[], object]) -> FlopCount:
    """Run ``fn()`` once under FlopCounterMode (with our explicit formulas) and count FLOPs per
    op."""
    log = _OpLog()
    torch_counts: dict[str, int] = {}
    counter = FlopCounterMode(display=False, custom_mapping=_explicit_formulas(torch_counts))
    # The log is entered first so that it sits *below* the counter and sees the
    # ops the counter actually runs, after it decomposes composite ones.
    with log, counter:
        fn()
    flops = {
        op_name(packet): int(value)
        for packet, value in counter.get_flop_counts().get("Global", {}).items()
    }
    unclassified = {
        name: calls for name, calls in log.calls.items() if classify("aten::" + name) is None
    }
    return FlopCount(
        flops=flops, calls=dict(log.calls), unclassified=unclassified, torch_flops=torch_counts
    )


# ---------------------------------------------------------------- profiling runtime


@dataclass
class OpTimes:
    """Self time per op name over ``steps`` profiled steps, in seconds (device time on a GPU)."""

    seconds: dict[str, float]  # profiler event name -> seconds (all steps)
    steps: int
    clock: str  # "device (CUDA kernels)" or "CPU"

    def per_class(self) -> dict[OpClass, float]:
        totals = {cls: 0.0 for cls in ALL_CLASSES}
        for name, seconds in self.seconds.items():
            totals[classify(name) or OpClass.OTHER] += seconds / self.steps
        return totals

    def unclassified(self) -> dict[str, float]:
        """Profiled aten ops that this module does not classify (counted under ``other``), seconds
        per step."""
        return {
            name: s / self.steps
            for name, s in self.seconds.items()
            if classify(name) is None and s > 0
        }


def _self_device_us(event) -> float:
    for attribute in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(event, attribute):
            return float(getattr(event, attribute))
    return 0.0


def profile_ops(fn: Callable[[], object], *, steps: int = 3, warmup: int = 2) -> OpTimes:
    """Run ``fn()`` ``warmup`` times, then profile ``steps`` runs and sum each op's self time.

    On a GPU the time is the device time of the kernels each op launched
    (events on the CPU side carry it; kernel events themselves are skipped so
    nothing is counted twice). Kernel time the profiler could not tie to an op
    is reported as ``<unattributed kernels>``, which counts under ``other``.
    On a CPU it is each op's self CPU time.
    """
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ON_GPU else [])
    with quiet_native_stderr(), profile(activities=activities) as prof:
        for _ in range(steps):
            fn()
        synchronize()
    return aggregate_self_times(prof.key_averages(), steps=steps, device_clock=ON_GPU)


def aggregate_self_times(
    events, *, steps: int, device_clock: bool, key: Callable | None = None
) -> OpTimes:
    """Sum profiler events (``key_averages()`` rows, or the profiler's own events) into self seconds
    per op name; ``key(event)`` names the row an event's time goes to (default: its own name,
    ``event.key``).

    ``device_clock=True`` (GPU): each CPU-side op carries the device time of the
    kernels it launched as its self device time; rows for the kernels themselves
    (device type CUDA) are only used to find kernel time no op claimed, which is
    reported as ``<unattributed kernels>``. ``device_clock=False`` (CPU): self CPU time.

    User annotations are skipped on the device clock, as torch's own tables
    skip them: a ``record_function`` range shows up on the GPU as a
    ``gpu_user_annotation`` row whose "device time" spans the kernels inside
    it, which are already counted once, under their own ops.
    """
    from torch.autograd import DeviceType

    name = key or (lambda event: event.key)
    seconds: dict[str, float] = defaultdict(float)
    if device_clock:
        kernel_us = 0.0
        for event in events:
            if getattr(event, "is_user_annotation", False):
                continue
            if getattr(event, "device_type", DeviceType.CPU) == DeviceType.CPU:
                seconds[name(event)] += _self_device_us(event) / 1e6
            else:
                kernel_us += _self_device_us(event)
        attributed = sum(seconds.values())
        if kernel_us == 0 and attributed == 0:
            raise RuntimeError(
                "the profiler recorded no CUDA kernel time; is the model on the GPU?"
            )
        if kernel_us / 1e6 > attributed * 1.001:
            seconds["<unattributed kernels>"] += kernel_us / 1e6 - attributed
        clock = "device (CUDA kernels)"
    else:
        for event in events:
            seconds[name(event)] += event.self_cpu_time_total / 1e6
        clock = "CPU"
    return OpTimes(seconds={k: v for k, v in seconds.items() if v > 0}, steps=steps, clock=clock)


# ---------------------------------------------------------------- the table


@dataclass
class ClassTable:
    """FLOPs and runtime per operator class for one step, as in the essay's table."""

    flops: dict[OpClass, float]  # per step
    seconds: dict[OpClass, float]  # per step
    clock: str
    unclassified_flops_ops: dict[str, int] = field(default_factory=dict)
    unclassified_time_ops: dict[str, float] = field(default_factory=dict)

    def flop_share(self, cls: OpClass) -> float:
        return self.flops[cls] / sum(self.flops.values())

    def time_share(self, cls: OpClass) -> float:
        return self.seconds[cls] / sum(self.seconds.values())

    def rate(self, cls: OpClass) -> float:
        """Achieved FLOP/s of the class: its FLOPs over its runtime (nan if it took no time)."""
        return self.flops[cls] / self.seconds[cls] if self.seconds[cls] > 0 else float("nan")

    @property
    def step_seconds(self) -> float:
        return sum(self.seconds.values())

    def rows(self) -> list[dict]:
        """One dict per class: our shares beside the essay's, and the achieved rate."""
        out = []
        for cls in ALL_CLASSES:
            quoted = essay.BERT_TABLE.get(ESSAY_KEYS.get(cls, ""), {})
            out.append(
                {
                    "class": cls.value,
                    "flop_pct": 100 * self.flop_share(cls),
                    "time_pct": 100 * self.time_share(cls),
                    "essay_flop_pct": quoted.get("flops"),
                    "essay_time_pct": quoted.get("runtime"),
                    "flops": self.flops[cls],
                    "seconds": self.seconds[cls],
                    "rate": self.rate(cls)
                    if self.seconds[cls] > 0
                    else None,  # FLOP/s; None: no time measured
                }
            )
        return out

    def format(self) -> str:
        header = (
            f"{'operator class':<27} {'% FLOPs':>9} {'% runtime':>10}   "
            f"{'essay (BERT table)':>19}   {'achieved':>14}"
        )
        lines = [header, "-" * len(header)]
        for row in self.rows():
            quoted = (
                ""
                if row["essay_flop_pct"] is None
                else f"{row['essay_flop_pct']:6.2f} / {row['essay_time_pct']:4.1f}"
            )
            rate = units.flops(row["rate"]) if row["rate"] is not None else "-"
            lines.append(
                f"{row['class']:<27} {row['flop_pct']:9.2f} {row['time_pct']:10.1f}   {quoted:>19} "
                f"  {rate:>14}"
            )
        lines.append(
            f"per step: {units.si(sum(self.flops.values()), 'FLOP')} in "
            f"{units.seconds(self.step_seconds)} of {self.clock} time"
        )
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"clock": self.clock, "rows": self.rows()}


def class_table(flop_count: FlopCount, times: OpTimes) -> ClassTable:
    """Combine a FLOP count of one step with profiled times into the essay's table."""
    flops = flop_count.per_class()
    if flops[OpClass.CONTRACTION] == 0:
        raise ValueError(
            "no contraction FLOPs were counted. A fused fast path (for example "
            "nn.TransformerEncoderLayer in eval mode under no_grad) runs as one op FlopCounterMode "
            "cannot see into; measure a training "
            f"step instead. Ops with no class: {sorted(flop_count.unclassified) or 'none'}"
        )
    return ClassTable(
        flops={cls: float(value) for cls, value in flops.items()},
        seconds=times.per_class(),
        clock=times.clock,
        unclassified_flops_ops=dict(flop_count.unclassified),
        unclassified_time_ops=times.unclassified(),
    )


def measure(fn: Callable[[], object], *, steps: int = 3, warmup: int = 2) -> ClassTable:
    """Count FLOPs of one ``fn()`` call, profile ``steps`` more, and build the table."""
    return class_table(count_flops(fn), profile_ops(fn, steps=steps, warmup=warmup))
