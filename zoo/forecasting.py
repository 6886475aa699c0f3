"""Temporal Fusion Transformer as NVIDIA DeepLearningExamples builds it (PyTorch/Forecasting/TFT, ``modeling.py``).

The electricity and traffic configs (``configuration.py``): hidden 128, 4 heads, an example of 8 x 24 = 192 hourly
steps of which the last 24 are forecast (encoder 168), one static categorical input (the series id: 369
electricity meters, 963 traffic sensors), three known continuous inputs (hour, day of week, hours from start),
one observed target, three quantiles. The parts, as NVIDIA writes them: gated residual networks (GRN: linear,
ELU, linear, GLU, residual, LayerNorm eps 1e-3), variable selection networks, a static covariate encoder with
four context GRNs, an LSTM encoder over the history and an LSTM decoder over the horizon (initial state from the
static context), gated skip connections, static enrichment, interpretable multi-head attention (per-head q/k,
one shared v, heads averaged, causal mask), a position-wise GRN and the quantile projection of the horizon steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo.registry import Bounds, registrar

KNOWN = 3  # known continuous inputs
QUANTILES = 3


class _GRN(nn.Module):
    """Gated residual network: LayerNorm(skip(a) + GLU(lin_i(ELU(lin_a(a) + lin_c(c))))); eps 1e-3."""

    def __init__(self, cin: int, hidden: int, out: int | None = None, context: bool = False) -> None:
        super().__init__()
        self.lin_a = nn.Linear(cin, hidden)
        self.lin_c = nn.Linear(hidden, hidden, bias=False) if context else None
        self.lin_i = nn.Linear(hidden, hidden)
        self.glu = nn.Linear(hidden, 2 * (out or hidden))
        self.skip = nn.Linear(cin, out) if out else None
        self.norm = nn.Identity() if out == 1 else nn.LayerNorm(out or hidden, eps=1e-3)

    def forward(self, a: torch.Tensor, c: torch.Tensor | None = None) -> torch.Tensor:
        x = self.lin_a(a)
        if self.lin_c is not None and c is not None:
            x = x + self.lin_c(c).unsqueeze(1)
        x = F.glu(self.glu(self.lin_i(F.elu(x))))
        return self.norm(x + (a if self.skip is None else self.skip(a)))


class _VSN(nn.Module):
    """Variable selection: softmax weights from a joint GRN over the flattened inputs, one GRN per variable."""

    def __init__(self, hidden: int, n: int) -> None:
        super().__init__()
        self.joint = _GRN(hidden * n, hidden, out=n, context=True)
        self.per_var = nn.ModuleList(_GRN(hidden, hidden) for _ in range(n))

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        weights = F.softmax(self.joint(torch.flatten(x, start_dim=-2), context), dim=-1)
        embedded = torch.stack([m(x[..., i, :]) for i, m in enumerate(self.per_var)], dim=-1)
        return torch.matmul(embedded, weights.unsqueeze(-1)).squeeze(-1)


class _Attention(nn.Module):
    """Interpretable multi-head attention: per-head q and k, one shared v, heads averaged, causal mask."""

    def __init__(self, hidden: int, heads: int, steps: int) -> None:
        super().__init__()
        self.heads, self.d = heads, hidden // heads
        self.qkv = nn.Linear(hidden, (2 * heads + 1) * self.d, bias=False)
        self.out = nn.Linear(self.d, hidden, bias=False)
        mask = torch.triu(torch.full((steps, steps), float("-inf")), 1)
        self.register_buffer("mask", mask.unsqueeze(0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split((self.heads * self.d, self.heads * self.d, self.d), dim=-1)
        q = q.view(b, t, self.heads, self.d).permute(0, 2, 1, 3)
        k = k.view(b, t, self.heads, self.d).permute(0, 2, 3, 1)
        score = torch.matmul(q, k) * self.d**-0.5 + self.mask.to(x.dtype)
        vec = torch.matmul(F.softmax(score, dim=3), v.unsqueeze(1))
        return self.out(vec.mean(dim=1))


class TFT(nn.Module):
    """TFT forward: (s_cat (B, T, 1) int64, k_cont (B, T, 3), target (B, T, 1)) -> quantiles (B, horizon, 3).

    Args:
        hidden: Hidden size.
        heads: Attention heads.
        steps: Example length T (history + horizon).
        horizon: Forecast steps (the encoder sees ``steps - horizon``).
        n_ids: Rows of the static id embedding.
    """

    def __init__(self, hidden: int, heads: int, steps: int, horizon: int, n_ids: int) -> None:
        super().__init__()
        self.encoder_length = steps - horizon
        self.id_embed = nn.Embedding(n_ids, hidden)
        self.known_w = nn.Parameter(torch.randn(KNOWN, hidden) * 0.1)
        self.known_b = nn.Parameter(torch.zeros(KNOWN, hidden))
        self.target_w = nn.Parameter(torch.randn(1, hidden) * 0.1)
        self.target_b = nn.Parameter(torch.zeros(1, hidden))
        self.static_vsn = _VSN(hidden, 1)
        self.contexts = nn.ModuleList(_GRN(hidden, hidden) for _ in range(4))
        self.history_vsn = _VSN(hidden, KNOWN + 1)
        self.history_lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.future_vsn = _VSN(hidden, KNOWN)
        self.future_lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.input_gate = nn.Linear(hidden, 2 * hidden)
        self.input_ln = nn.LayerNorm(hidden, eps=1e-3)
        self.enrichment = _GRN(hidden, hidden, context=True)
        self.attention = _Attention(hidden, heads, steps)
        self.attention_gate = nn.Linear(hidden, 2 * hidden)
        self.attention_ln = nn.LayerNorm(hidden, eps=1e-3)
        self.positionwise = _GRN(hidden, hidden)
        self.decoder_gate = nn.Linear(hidden, 2 * hidden)
        self.decoder_ln = nn.LayerNorm(hidden, eps=1e-3)
        self.quantiles = nn.Linear(hidden, QUANTILES)

    def forward(self, s_cat: torch.Tensor, k_cont: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        enc = self.encoder_length
        static = self.id_embed(s_cat[:, 0, :])  # (B, 1, H): one static variable
        known = k_cont.unsqueeze(-1) * self.known_w + self.known_b  # (B, T, 3, H)
        observed = target.unsqueeze(3) * self.target_w + self.target_b  # (B, T, 1, H)
        static_ctx = self.static_vsn(static)  # once, as StaticCovariateEncoder does; the four GRNs share it
        cs, ce, ch, cc = [m(static_ctx) for m in self.contexts]
        history = torch.cat([known[:, :enc], observed[:, :enc]], dim=-2)
        hist_feat = self.history_vsn(history, cs)
        hist_out, state = self.history_lstm(hist_feat, (ch.unsqueeze(0), cc.unsqueeze(0)))
        fut_feat = self.future_vsn(known[:, enc:], cs)
        fut_out, _ = self.future_lstm(fut_feat, state)
        embedding = torch.cat([hist_feat, fut_feat], dim=1)
        temporal = self.input_ln(F.glu(self.input_gate(torch.cat([hist_out, fut_out], dim=1))) + embedding)
        enriched = self.enrichment(temporal, ce)
        x = self.attention(enriched)[:, enc:]
        x = self.attention_ln(F.glu(self.attention_gate(x)) + enriched[:, enc:])
        x = self.positionwise(x)
        x = self.decoder_ln(F.glu(self.decoder_gate(x)) + temporal[:, enc:])
        return self.quantiles(x)


def build_tft(hidden: int, heads: int, seq_len: int, horizon: int, n_ids: int) -> nn.Module:
    """Build TFT over ``seq_len`` steps forecasting the last ``horizon``."""
    return TFT(hidden, heads, seq_len, horizon, n_ids)


def tft_inputs(
    *, batch: int, dtype: torch.dtype, device: torch.device, seq_len: int, n_ids: int, **_: object
) -> tuple[torch.Tensor, ...]:
    """The series id (batch, seq_len, 1) int64, known inputs (batch, seq_len, 3) and target (batch, seq_len, 1)."""
    ids = torch.randint(0, n_ids, (batch, 1, 1), dtype=torch.int64).expand(batch, seq_len, 1).contiguous()
    return (
        ids.to(device),
        torch.randn(batch, seq_len, KNOWN, dtype=dtype, device=device),
        torch.randn(batch, seq_len, 1, dtype=dtype, device=device),
    )


registrar("forecasting", tft_inputs, ("s_cat", "k_cont", "target"))(
    "tft",
    build_tft,
    {"hidden": 128, "heads": 4, "seq_len": 192, "horizon": 24, "n_ids": 369},
    {
        "tft_tiny": {"hidden": 32, "seq_len": 48, "horizon": 8, "n_ids": 16},
        "tft_electricity": {},
        "tft_traffic": {"n_ids": 963},
    },
    "Temporal Fusion Transformer (NVIDIA DLE electricity / traffic configs)",
    bounds={
        "hidden": Bounds(ge=1, multiple_of="heads"),
        "heads": Bounds(ge=1),
        "horizon": Bounds(ge=1, lt="seq_len"),
        "n_ids": Bounds(ge=1),
    },
)
