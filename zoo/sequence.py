"""Recurrent sequence families: LSTM and GRU taggers over float feature sequences.

``impl="module"`` uses ``nn.LSTM`` / ``nn.GRU`` (exported as a fused ``aten.lstm`` /
``aten.gru``); ``impl="unrolled"`` unrolls the time loop with explicit gate matmuls,
which exports to plain ``linear`` / ``sigmoid`` / ``tanh`` ops.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from zoo.registry import Bounds, Family, register


class _UnrolledLayer(nn.Module):
    """One direction of one LSTM/GRU layer with an explicit Python time loop."""

    def __init__(self, cell: str, cin: int, hidden: int) -> None:
        super().__init__()
        gates = 4 if cell == "lstm" else 3
        self.cell = cell
        self.hidden = hidden
        self.ih = nn.Linear(cin, gates * hidden)
        self.hh = nn.Linear(hidden, gates * hidden)

    def forward(self, x: torch.Tensor, reverse: bool) -> torch.Tensor:
        steps = range(x.shape[1] - 1, -1, -1) if reverse else range(x.shape[1])
        xi = self.ih(x)
        h = x.new_zeros(x.shape[0], self.hidden)
        c = h
        outs: list[torch.Tensor] = []
        for t in steps:
            if self.cell == "lstm":
                i, f, g, o = (xi[:, t] + self.hh(h)).chunk(4, dim=1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
            else:
                xr, xz, xn = xi[:, t].chunk(3, dim=1)
                hr, hz, hn = self.hh(h).chunk(3, dim=1)
                r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
                n = torch.tanh(xn + r * hn)
                h = (1 - z) * n + z * h
            outs.append(h)
        if reverse:
            outs.reverse()
        return torch.stack(outs, dim=1)


class RecurrentTagger(nn.Module):
    """Stacked (bi)directional LSTM/GRU followed by a per-step linear classifier.

    Args:
        cell: ``"lstm"`` or ``"gru"``.
        input_size: Features per time step.
        hidden: Hidden size.
        layers: Number of stacked layers.
        bidirectional: Run both directions and concatenate.
        num_classes: Output classes per time step.
        impl: ``"module"`` (``nn.LSTM``/``nn.GRU``) or ``"unrolled"``.
    """

    def __init__(
        self,
        cell: str,
        input_size: int,
        hidden: int,
        layers: int,
        bidirectional: bool,
        num_classes: int,
        impl: str,
    ) -> None:
        super().__init__()
        dirs = 2 if bidirectional else 1
        self.impl = impl
        self.dirs = dirs
        if impl == "module":
            rnn_cls = nn.LSTM if cell == "lstm" else nn.GRU
            self.rnn = rnn_cls(input_size, hidden, layers, batch_first=True, bidirectional=bidirectional)
        else:
            self.cells = nn.ModuleList(
                _UnrolledLayer(cell, input_size if i < dirs else hidden * dirs, hidden) for i in range(layers * dirs)
            )
        self.head = nn.Linear(hidden * dirs, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.impl == "module":
            out = self.rnn(x)[0]
        else:
            out = x
            for i in range(0, len(self.cells), self.dirs):
                parts = [self.cells[i + d](out, reverse=d == 1) for d in range(self.dirs)]
                out = torch.cat(parts, dim=-1) if self.dirs > 1 else parts[0]
        return self.head(out)


def _builder(cell: str) -> Callable[..., nn.Module]:
    def builder(
        input_size: int,
        hidden: int,
        layers: int,
        bidirectional: bool,
        num_classes: int,
        impl: str,
        seq_len: int,
    ) -> nn.Module:
        return RecurrentTagger(cell, input_size, hidden, layers, bidirectional, num_classes, impl)

    builder.__doc__ = f"Build a {cell.upper()} tagger (see ``RecurrentTagger``)."
    return builder


def sequence_inputs(
    *,
    batch: int,
    dtype: torch.dtype,
    device: torch.device,
    seq_len: int,
    input_size: int,
    **_: object,
) -> tuple[torch.Tensor, ...]:
    """Return random features of shape (batch, seq_len, input_size).

    Args:
        batch: Batch size.
        dtype: Floating point dtype.
        device: Target device.
        seq_len: Time steps.
        input_size: Features per step.

    Returns:
        A one-tuple with the features.
    """
    return (torch.randn(batch, seq_len, input_size, dtype=dtype, device=device),)


for _cell in ("lstm", "gru"):
    register(
        Family(
            name=_cell,
            kind="sequence",
            params={
                "input_size": 128,
                "hidden": 256,
                "layers": 2,
                "bidirectional": False,
                "num_classes": 32,
                "impl": "module",
                "seq_len": 64,
            },
            variants={
                f"{_cell}_small": {"hidden": 128, "layers": 1},
                f"{_cell}_medium": {},
                f"{_cell}_large": {"hidden": 1024, "layers": 4, "input_size": 512},
                f"{_cell}_bidir": {"bidirectional": True},
                f"{_cell}_unrolled": {"impl": "unrolled", "seq_len": 16},
            },
            builder=_builder(_cell),
            make_inputs=sequence_inputs,
            description=f"Stacked {_cell.upper()} per-step classifier over float sequences",
            bounds={
                "input_size": Bounds(ge=1),
                "hidden": Bounds(ge=1),
                "layers": Bounds(ge=1),
                "seq_len": Bounds(ge=1),
                "impl": Bounds(choices=("module", "unrolled")),
            },
        )
    )
