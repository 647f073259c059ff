"""A small GPT, written the way people write one: the model the capstone diagnoses.

Random weights and synthetic tokens: what it computes does not matter here, only
what it costs. The attention is the textbook one (scores, causal mask,
softmax, weighted sum of values, each its own op); ``sdpa=True`` swaps in
``torch.nn.functional.scaled_dot_product_attention``, one of the fixes the
capstone applies. The step a user would diagnose is :func:`inference_step`:
next-token logits for a batch of sequences, the work of serving the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 2048
    seq_len: int = 128
    layers: int = 4
    heads: int = 4
    width: int = 256
    sdpa: bool = False  # fused attention instead of the textbook ops

    def with_(self, **changes) -> "GPTConfig":
        return replace(self, **changes)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.heads, self.sdpa = config.heads, config.sdpa
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.proj = nn.Linear(config.width, config.width)
        mask = torch.tril(torch.ones(config.seq_len, config.seq_len, dtype=torch.bool))
        self.register_buffer(
            "mask", mask.view(1, 1, config.seq_len, config.seq_len), persistent=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        heads = (batch, tokens, self.heads, width // self.heads)
        q, k, v = (t.view(heads).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            scores = scores.masked_fill(~self.mask[:, :, :tokens, :tokens], float("-inf"))
            y = F.softmax(scores, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(batch, tokens, width)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.up = nn.Linear(config.width, 4 * config.width)
        self.down = nn.Linear(4 * config.width, config.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(config.width), nn.LayerNorm(config.width)
        self.attention, self.mlp = CausalSelfAttention(config), MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab, config.width)
        self.positions = nn.Embedding(config.seq_len, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build(
    config: GPTConfig,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> GPT:
    """The model with random weights, in eval mode, on ``device`` in ``dtype``."""
    torch.manual_seed(seed)
    return GPT(config).to(device=device, dtype=dtype).eval()


def synthetic_tokens(
    config: GPTConfig, batch: int, *, device: torch.device | str = "cpu", seed: int = 1
) -> torch.Tensor:
    """``batch`` sequences of ``config.seq_len`` random token ids."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(config.vocab, (batch, config.seq_len), generator=generator).to(device)


def inference_step(
    model: Callable[[torch.Tensor], torch.Tensor],
) -> Callable[[torch.Tensor], torch.Tensor]:
    """One serving step: next-token logits for every sequence of a batch, without autograd.

    ``model`` may be the :class:`GPT` or a compiled version of it.
    """

    def step(idx: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return model(idx)[:, -1, :]

    return step
