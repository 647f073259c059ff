"""Standard models, written from their papers at small sizes, for trying brrr.diagnose as a user
would.

torchvision and timm do not install beside the project's CPU torch, so each model is written here,
with the layers that make it what it is and fewer, narrower layers than the paper's:

resnet18
    He et al. 2015: a 7×7 stride-2 stem, max-pool, four stages of two basic blocks (two 3×3
    convolutions with batch norm, a projection shortcut where the shape changes), global average
    pool, a linear head. Widths 16-128 (the paper's 64-512), 32×32 images.
mobilenet_v3_small
    Howard et al. 2019: inverted residual blocks (1×1 expand, depthwise 3×3 or 5×5,
    squeeze-and-excite, 1×1 project) with hardswish, batch norm, and the paper's small stack of
    strides, at 0.5 width.
vit_tiny
    Dosovitskiy et al. 2020 at DeiT-tiny's width (192, 3 heads): patch embedding (a strided
    convolution), class token, learned positions, pre-norm blocks, 2 of the 12 blocks, 32×32 images
    in 4×4 patches.
transformer_encoder
    ``nn.TransformerEncoder`` (post-norm, dropout 0.1) at d 128, 4 heads, 2 layers, sequence 64.
mlp
    a three-layer MLP (width 128) on flattened 28×28 images, four at a time.
lstm
    an ``nn.LSTM`` language model: embedding, one LSTM layer (hidden 128), a linear head on every
    step.
recommender
    two embedding tables of 100,000 rows (users, items) and a bag of item history
    (``nn.EmbeddingBag``), concatenated into a small MLP: most of its parameters are tables it
    touches a few rows of.
depthwise_net
    MobileNet v1's separable block (Howard et al. 2017): a depthwise 3×3 convolution and a pointwise
    1×1 one, with batch norm and ReLU, four blocks on 32×32 images.
gpt2, bert
    transformers' own ``GPT2LMHeadModel`` and ``BertForMaskedLM``, built from their configs with
    random weights (nothing is downloaded), 2 layers at width 128 and their full vocabularies
    (50,257 and 30,522 tokens), sequence 64: only where transformers is installed (it is not
    among the project's requirements; :data:`TRANSFORMERS` names them).

Each function takes ``batch`` and returns ``(step, args)``: one training step (forward, loss,
backward and an SGD update), the shape ``python -m brrr.diagnose`` and ``--try`` expect.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def train_step(model: nn.Module, x: torch.Tensor, target: torch.Tensor):
    """``(step, args)``: one SGD step of ``model`` on a cross-entropy loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step(model, x, target):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), target)
        loss.backward()
        optimizer.step()
        return loss

    return step, (model.train(), x, target)


# ---------------------------------------------------------------- ResNet-18


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs)
            )

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, width: int = 16, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, 2, 3, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        stages, inputs = [], width
        for index, outputs in enumerate((width, 2 * width, 4 * width, 8 * width)):
            stride = 1 if index == 0 else 2
            stages += [BasicBlock(inputs, outputs, stride), BasicBlock(outputs, outputs, 1)]
            inputs = outputs
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(inputs, classes)

    def forward(self, x):
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1), 1))


def resnet18(batch: int = 16, size: int = 32):
    torch.manual_seed(0)
    return train_step(ResNet18(), torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,)))


# ---------------------------------------------------------------- MobileNetV3-small


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int):
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        scale = F.hardsigmoid(self.expand(F.relu(self.reduce(F.adaptive_avg_pool2d(x, 1)))))
        return x * scale


class InvertedResidual(nn.Module):
    def __init__(
        self, inputs: int, expanded: int, outputs: int, kernel: int, stride: int, se: bool, hs: bool
    ):
        super().__init__()
        activation = nn.Hardswish if hs else nn.ReLU
        layers = []
        if expanded != inputs:
            layers += [
                nn.Conv2d(inputs, expanded, 1, bias=False),
                nn.BatchNorm2d(expanded),
                activation(),
            ]
        layers += [
            nn.Conv2d(expanded, expanded, kernel, stride, kernel // 2, groups=expanded, bias=False),
            nn.BatchNorm2d(expanded),
            activation(),
        ]
        if se:
            layers.append(SqueezeExcite(expanded, max(8, expanded // 4)))
        layers += [nn.Conv2d(expanded, outputs, 1, bias=False), nn.BatchNorm2d(outputs)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and inputs == outputs

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


# (kernel, expanded, outputs, squeeze-excite, hardswish, stride): the paper's Table 2,
# MobileNetV3-small
SMALL = [
    (3, 16, 16, True, False, 2),
    (3, 72, 24, False, False, 2),
    (3, 88, 24, False, False, 1),
    (5, 96, 40, True, True, 2),
    (5, 240, 40, True, True, 1),
    (5, 120, 48, True, True, 1),
    (5, 288, 96, True, True, 2),
    (5, 576, 96, True, True, 1),
]


class MobileNetV3Small(nn.Module):
    def __init__(self, width: float = 0.5, classes: int = 10):
        super().__init__()

        def scaled(channels: int) -> int:
            return max(8, int(channels * width + 4) // 8 * 8)

        inputs = scaled(16)
        layers = [nn.Conv2d(3, inputs, 3, 2, 1, bias=False), nn.BatchNorm2d(inputs), nn.Hardswish()]
        for kernel, expanded, outputs, se, hs, stride in SMALL:
            layers.append(
                InvertedResidual(inputs, scaled(expanded), scaled(outputs), kernel, stride, se, hs)
            )
            inputs = scaled(outputs)
        last = scaled(576)
        layers += [nn.Conv2d(inputs, last, 1, bias=False), nn.BatchNorm2d(last), nn.Hardswish()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.Linear(last, 256), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(256, classes)
        )

    def forward(self, x):
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


def mobilenet_v3_small(batch: int = 16, size: int = 64):
    torch.manual_seed(0)
    return train_step(
        MobileNetV3Small(), torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))
    )


# ---------------------------------------------------------------- ViT-tiny


class ViTBlock(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x):
        y = self.norm1(x)
        x = x + self.attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViTTiny(nn.Module):
    def __init__(
        self, size: int = 32, patch: int = 4, width: int = 192, heads: int = 3, depth: int = 4
    ):
        super().__init__()
        self.patches = nn.Conv2d(3, width, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.positions = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, width) * 0.02)
        self.blocks = nn.Sequential(*(ViTBlock(width, heads) for _ in range(depth)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        tokens = self.patches(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(len(x), -1, -1), tokens], dim=1) + self.positions
        return self.head(self.norm(self.blocks(tokens))[:, 0])


def vit_tiny(batch: int = 4, size: int = 32):
    torch.manual_seed(0)
    return train_step(
        ViTTiny(size, depth=2), torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))
    )


# ---------------------------------------------------------------- nn.TransformerEncoder


class Encoder(nn.Module):
    def __init__(self, width: int = 128, heads: int = 4, layers: int = 2, classes: int = 10):
        super().__init__()
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))


def transformer_encoder(batch: int = 8, seq: int = 64, width: int = 128):
    torch.manual_seed(0)
    return train_step(
        Encoder(width), torch.randn(batch, seq, width), torch.randint(0, 10, (batch,))
    )


# ---------------------------------------------------------------- MLP


def mlp(batch: int = 4, width: int = 128):
    torch.manual_seed(0)
    layers = [
        nn.Flatten(),
        nn.Linear(784, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 10),
    ]
    model = nn.Sequential(*layers)
    return train_step(model, torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,)))


# ---------------------------------------------------------------- LSTM


class LSTMModel(nn.Module):
    def __init__(self, vocabulary: int = 1000, width: int = 64, hidden: int = 128):
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, width)
        self.lstm = nn.LSTM(width, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocabulary)

    def forward(self, tokens):
        return self.head(self.lstm(self.embedding(tokens))[0]).flatten(0, 1)


def lstm(batch: int = 8, seq: int = 32):
    torch.manual_seed(0)
    tokens = torch.randint(0, 1000, (batch, seq))
    return train_step(LSTMModel(), tokens, torch.randint(0, 1000, (batch * seq,)))


# ---------------------------------------------------------------- an embedding-heavy recommender


class Recommender(nn.Module):
    def __init__(self, rows: int = 100_000, width: int = 32, history: int = 20):
        super().__init__()
        self.users = nn.Embedding(rows, width)
        self.items = nn.Embedding(rows, width)
        self.history = nn.EmbeddingBag(rows, width, mode="mean")
        self.history_length = history
        self.mlp = nn.Sequential(nn.Linear(3 * width, 64), nn.ReLU(), nn.Linear(64, 2))

    def forward(self, ids):
        users, items, history = ids[:, 0], ids[:, 1], ids[:, 2:]
        features = [self.users(users), self.items(items), self.history(history)]
        return self.mlp(torch.cat(features, dim=1))


def recommender(batch: int = 256, history: int = 20):
    torch.manual_seed(0)
    ids = torch.randint(0, 100_000, (batch, 2 + history))
    return train_step(Recommender(history=history), ids, torch.randint(0, 2, (batch,)))


# ---------------------------------------------------------------- depthwise-separable convolutions


def separable(inputs: int, outputs: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(inputs, inputs, 3, stride, 1, groups=inputs, bias=False),
        nn.BatchNorm2d(inputs),
        nn.ReLU(),
        nn.Conv2d(inputs, outputs, 1, bias=False),
        nn.BatchNorm2d(outputs),
        nn.ReLU(),
    )


def depthwise_net(batch: int = 8, size: int = 32):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, 2, 1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        separable(32, 64, 1),
        separable(64, 128, 2),
        separable(128, 128, 1),
        separable(128, 256, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(256, 10),
    )
    return train_step(model, torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,)))


# ---------------------------------------------------------------- GPT-2 and BERT, from transformers


class Logits(nn.Module):
    """A transformers language model as :func:`train_step` takes it: token ids in, one row of
    logits per token out."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).logits.flatten(0, 1)


def gpt2(batch: int = 4, seq: int = 64):
    """GPT-2 (Radford et al. 2019), learning to predict each next token."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=seq)
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    return train_step(Logits(GPT2LMHeadModel(config)), ids, ids.roll(-1, 1).flatten())


def bert(batch: int = 8, seq: int = 64):
    """BERT (Devlin et al. 2018), learning to fill in every token (its masked-language head)."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=512,
        max_position_embeddings=seq,
    )
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    return train_step(Logits(BertForMaskedLM(config)), ids, ids.flatten())


TRANSFORMERS = ("gpt2", "bert")  # built by transformers: diagnosed only where it is installed

ZOO = {
    "resnet18": resnet18,
    "mobilenet_v3_small": mobilenet_v3_small,
    "vit_tiny": vit_tiny,
    "transformer_encoder": transformer_encoder,
    "mlp": mlp,
    "lstm": lstm,
    "recommender": recommender,
    "depthwise_net": depthwise_net,
    "gpt2": gpt2,
    "bert": bert,
}
