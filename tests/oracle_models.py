"""Small PyTorch models for the FLOP oracle tests (tests/test_oracle_torch.py, test_oracle_tir.py).

Each entry of `SMALL_MODELS` builds `(module, example_inputs)` with real random weights on CPU.
They exercise the conv/matmul/attention cost rules on shapes the zoo does not cover: groups,
dilation, strides, 3-D and transposed convs, 1-D audio convs, attention written three ways,
einsum and broadcasting matmuls.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


class GemmThenSmall(nn.Module):
    """A 2048^3 float32 GEMM (long: the host runs ahead of it) then 16 short elementwise kernels on an 8 x 8
    tensor (each far under its launch floor): the host-queueing tests' model (test_host_overhead, test_mig_latency)."""

    def forward(self, a, b, s):
        y = a @ b
        for _ in range(16):
            s = s + 1.0
        return y, s


def gemm_then_small() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """`GemmThenSmall` and its inputs (zeros: only shapes matter to the analysis)."""
    return GemmThenSmall(), (torch.zeros(2048, 2048), torch.zeros(2048, 2048), torch.zeros(8, 8))


class GroupedConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(8, 16, 3, padding=1, groups=4)
        self.b = nn.Conv2d(16, 24, 3, groups=2, bias=False)

    def forward(self, x):
        return self.b(F.relu(self.a(x)))


class DilatedConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 8, 3, padding=2, dilation=2)
        self.b = nn.Conv2d(8, 8, 3, dilation=(1, 3))

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class StridedConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 5, stride=2, padding=1)
        self.b = nn.Conv2d(8, 12, 3, stride=(3, 2))
        self.fc = nn.Linear(12, 10)

    def forward(self, x):
        y = self.b(torch.relu(self.a(x)))
        return self.fc(y.mean(dim=(2, 3)))


class Conv3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv3d(2, 4, 3, stride=(1, 2, 2), padding=1)
        self.b = nn.Conv3d(4, 6, (2, 3, 3), groups=2)

    def forward(self, x):
        return self.b(F.relu(self.a(x)))


class ConvTranspose(nn.Module):
    """A decoder-style upsampling: grouped, strided transposed conv with output_padding."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(8, 12, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.up2 = nn.ConvTranspose2d(12, 4, 2, stride=2)

    def forward(self, x):
        return self.up2(torch.relu(self.up(x)))


class Wav2LetterSmall(nn.Module):
    """A small wav2letter-like stack: strided 1-D convs over a spectrogram, then 1x1 classifier convs."""

    def __init__(self, n_mels: int = 40, width: int = 64, n_classes: int = 29):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Conv1d(n_mels, width, 11, stride=2, padding=5),
            nn.ReLU(),
            nn.Conv1d(width, width, 7, padding=3),
            nn.ReLU(),
            nn.Conv1d(width, width, 7, padding=3),
            nn.ReLU(),
            nn.Conv1d(width, 2 * width, 15, stride=1, padding=7, dilation=1),
            nn.ReLU(),
            nn.Conv1d(2 * width, 2 * width, 1),
            nn.ReLU(),
            nn.Conv1d(2 * width, n_classes, 1),
        )

    def forward(self, x):
        return F.log_softmax(self.layers(x), dim=1)


class DepthwiseSeparable(nn.Module):
    """MobileNet's block: depthwise 3x3 + BN + ReLU6, pointwise 1x1 + BN."""

    def __init__(self, cin: int = 16, cout: int = 32):
        super().__init__()
        self.dw = nn.Conv2d(cin, cin, 3, padding=1, groups=cin, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.pw = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        with torch.no_grad():  # non-trivial running statistics, so BN folding changes the weights
            for bn in (self.bn1, self.bn2):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 1.5)
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.bn2(self.pw(F.relu6(self.bn1(self.dw(x)))))


class SDPAttention(nn.Module):
    """Multi-head self-attention through F.scaled_dot_product_attention (optionally causal)."""

    def __init__(self, dim: int = 64, heads: int = 4, causal: bool = False):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class CrossAttentionSDPA(nn.Module):
    """SDPA with different query and key lengths and a value width unlike the key width."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(32, 4 * 8)
        self.k = nn.Linear(48, 4 * 8)
        self.v = nn.Linear(48, 4 * 16)

    def forward(self, x, ctx):
        b, s, _ = x.shape
        t = ctx.shape[1]
        q = self.q(x).view(b, s, 4, 8).transpose(1, 2)
        k = self.k(ctx).view(b, t, 4, 8).transpose(1, 2)
        v = self.v(ctx).view(b, t, 4, 16).transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v)


class ExplicitAttention(nn.Module):
    """Attention written out: Q K^T / sqrt(d), softmax, times V, with torch.matmul."""

    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        h, hd = self.heads, d // self.heads
        q = self.q(x).view(b, t, h, hd).transpose(1, 2)
        k = self.k(x).view(b, t, h, hd).transpose(1, 2)
        v = self.v(x).view(b, t, h, hd).transpose(1, 2)
        p = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd), dim=-1)
        return self.out(torch.matmul(p, v).transpose(1, 2).reshape(b, t, d))


class EinsumAttention(nn.Module):
    """Attention scores and mixing with two-operand einsums (unambiguous contraction order)."""

    def __init__(self, dim: int = 48, heads: int = 3):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        s = torch.einsum("bqhd,bkhd->bhqk", q, k).softmax(-1)
        return torch.einsum("bhqk,bkhd->bqhd", s, v).reshape(b, t, d)


class EinsumBilinear(nn.Module):
    """A bilinear form x^T W_o y per output o, as two two-operand einsums."""

    def __init__(self, i: int = 24, j: int = 20, o: int = 16):
        super().__init__()
        self.w = nn.Parameter(torch.randn(o, i, j) / math.sqrt(i * j))

    def forward(self, x, y):
        xw = torch.einsum("bi,oij->boj", x, self.w)
        return torch.einsum("boj,bj->bo", xw, y)


class BroadcastMLP(nn.Module):
    """torch.matmul of a 3-D activation by 2-D weights (no nn.Linear), and a 4-D by 3-D broadcast."""

    def __init__(self, dim: int = 32, hidden: int = 96, heads: int = 4):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(dim, hidden) / math.sqrt(dim))
        self.w2 = nn.Parameter(torch.randn(hidden, dim) / math.sqrt(hidden))
        self.per_head = nn.Parameter(torch.randn(heads, dim, 8) / math.sqrt(dim))

    def forward(self, x):  # x: (B, T, dim)
        y = torch.matmul(F.gelu(torch.matmul(x, self.w1)), self.w2)
        # (B, 1, T, dim) @ (heads, dim, 8) -> (B, heads, T, 8): batch dims broadcast
        return torch.matmul(y.unsqueeze(1), self.per_head)


class BatchedMatmul(nn.Module):
    """bmm / baddbmm / addmm on activations.

    The products differ (b, then relu(b)): the ONNX exporter's optimizer merges identical
    subexpressions, which torch's eager FLOP counter would still count twice.
    """

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(12))
        self.w = nn.Parameter(torch.randn(16, 12))

    def forward(self, a, b):  # a: (B, 10, 16), b: (B, 16, 12)
        y = torch.baddbmm(self.bias, a, b) + torch.bmm(a, torch.relu(b))
        z = torch.addmm(self.bias, a.reshape(-1, 16), self.w)
        return y.sum() + z.sum()


class TokenMixer(nn.Module):
    """A GRU-free sequence model: embedding, LayerNorm, a token-mixing and a channel MLP, a head."""

    def __init__(self, vocab: int = 100, dim: int = 32, seq: int = 12):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.tok = nn.Linear(seq, seq)
        self.ch1, self.ch2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        x = self.emb(ids)
        x = x + self.tok(self.norm(x).transpose(1, 2)).transpose(1, 2)
        x = x + self.ch2(F.gelu(self.ch1(self.norm(x))))
        return self.head(x.mean(1))


# The zoo models at small input sizes (the zoo's own parameters), to keep export and import fast.
ZOO_SPECS = {
    "resnet18": "resnet18?resolution=64",
    "resnet50": "resnet50?resolution=64",
    "mobilenet_v2": "mobilenet_v2?resolution=64",
    "efficientnet_b0": "efficientnet_b0?resolution=64",
    "convnext_tiny": "convnext_tiny?resolution=64",
    "vit_base": "vit_base?resolution=64",
    "swin_tiny": "swin_tiny?resolution=64&window=2",  # the last stage (2x2) must hold one window
    "bert_base": "bert_base?seq_len=16",
    "gpt2": "gpt2?seq_len=16",
    "llama_small": "llama_small?seq_len=16",
}


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen())


# name -> builder returning (module, example inputs). Weights are seeded for reproducibility.
SMALL_MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "grouped_conv": lambda: (GroupedConv(), (_randn(2, 8, 20, 20),)),
    "dilated_conv": lambda: (DilatedConv(), (_randn(1, 4, 24, 24),)),
    "strided_conv": lambda: (StridedConv(), (_randn(2, 3, 33, 29),)),
    "conv3d": lambda: (Conv3d(), (_randn(1, 2, 6, 16, 16),)),
    "conv_transpose2d": lambda: (ConvTranspose(), (_randn(1, 8, 7, 9),)),
    "wav2letter": lambda: (Wav2LetterSmall(), (_randn(1, 40, 200),)),
    "depthwise_separable": lambda: (DepthwiseSeparable(), (_randn(1, 16, 28, 28),)),
    "sdpa_attention": lambda: (SDPAttention(), (_randn(2, 10, 64),)),
    "sdpa_causal": lambda: (SDPAttention(causal=True), (_randn(1, 12, 64),)),
    "sdpa_cross": lambda: (CrossAttentionSDPA(), (_randn(2, 6, 32), _randn(2, 11, 48))),
    "explicit_attention": lambda: (ExplicitAttention(), (_randn(2, 10, 64),)),
    "einsum_attention": lambda: (EinsumAttention(), (_randn(2, 9, 48),)),
    "einsum_bilinear": lambda: (EinsumBilinear(), (_randn(4, 24), _randn(4, 20))),
    "broadcast_mlp": lambda: (BroadcastMLP(), (_randn(2, 7, 32),)),
    "batched_matmul": lambda: (BatchedMatmul(), (_randn(3, 10, 16), _randn(3, 16, 12))),
    "token_mixer": lambda: (TokenMixer(), (torch.randint(0, 100, (2, 12), generator=_gen()),)),
}


def build_small(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Build one of `SMALL_MODELS` in eval mode with seeded random weights."""
    torch.manual_seed(0)
    module, inputs = SMALL_MODELS[name]()
    return module.eval(), inputs
