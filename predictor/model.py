"""GraphSAGE cost predictor (DIPPM's design, improved), and the DIPPM-style baseline.

Shapes: x (|V|, F_node), edge_index (2, |E|), batch (|V|,) graph index of each node, static (B, F_static).
Output: (B, len(TARGETS), len(QUANTILES)): standardised log-targets at each quantile.

DIPPM (Panner Selvam and Brorsson, 2023): three GraphSAGE blocks over the node features, a graph
readout, concatenated with static features, then fully connected layers predicting latency, energy
and memory together. preflight's changes, each checked by the ablation in the evaluation table:
log-scaled targets, the device's features and the roofline bound as inputs, a mean+max+sum readout
instead of a plain sum, data-flow edges instead of a chain, and quantile heads for intervals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch_geometric.nn import MLP, GraphSAGE, global_add_pool, global_max_pool, global_mean_pool

QUANTILES = (0.05, 0.5, 0.95)
N_TARGETS = 3


class CostPredictor(nn.Module):
    """GraphSAGE blocks -> readout -> [readout, static features] -> MLP -> targets x quantiles.

    Args:
        node_dim: F_node, node-feature width.
        static_dim: F_static, graph-level feature width (static features, device, roofline).
        hidden: width of the GraphSAGE blocks.
        layers: number of GraphSAGE blocks (DIPPM: 3).
        readout: "mean+max+sum" (default) or "sum" (DIPPM).
        quantiles: predicted quantiles of each target; (0.5,) for a point model.
    """

    def __init__(
        self,
        node_dim: int,
        static_dim: int,
        *,
        hidden: int = 128,
        layers: int = 3,
        readout: str = "mean+max+sum",
        quantiles: tuple[float, ...] = QUANTILES,
        dropout: float = 0.0,
    ):
        super().__init__()
        if readout not in ("mean+max+sum", "sum"):
            raise ValueError(f"unknown readout {readout!r}")
        self.readout = readout
        self.quantiles = tuple(quantiles)
        self.config = {
            "node_dim": node_dim,
            "static_dim": static_dim,
            "hidden": hidden,
            "layers": layers,
            "readout": readout,
            "quantiles": list(quantiles),
            "dropout": dropout,
        }
        self.gnn = GraphSAGE(
            node_dim, hidden, num_layers=layers, out_channels=hidden, dropout=dropout, norm="layer_norm"
        )
        pooled = hidden * (3 if readout == "mean+max+sum" else 1)
        self.head = MLP([pooled + static_dim, 256, 128, N_TARGETS * len(self.quantiles)], dropout=dropout, norm=None)

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, static: torch.Tensor
    ) -> torch.Tensor:
        h = self.gnn(x, edge_index)
        if self.readout == "sum":
            g = global_add_pool(h, batch)
        else:
            # NB: the sum is divided by 100 so that graphs of thousands of nodes stay in range
            g = torch.cat(
                [global_mean_pool(h, batch), global_max_pool(h, batch), global_add_pool(h, batch) / 100.0], dim=1
            )
        out = self.head(torch.cat([g, static], dim=1))
        return out.view(-1, N_TARGETS, len(self.quantiles))

    def __repr__(self) -> str:
        c = self.config
        return (
            f"CostPredictor(node_dim={c['node_dim']}, static_dim={c['static_dim']}, hidden={c['hidden']}, "
            f"layers={c['layers']}, readout={c['readout']!r}, quantiles={tuple(c['quantiles'])})"
        )


def restore(config: dict, state: dict) -> CostPredictor:
    """A trained CostPredictor in eval mode from its saved constructor arguments (`config`: node_dim, static_dim,
    hidden, layers, readout, quantiles, dropout; an artifact's meta.json "model") and its state dict."""
    model = CostPredictor(
        config["node_dim"],
        config["static_dim"],
        hidden=config["hidden"],
        layers=config["layers"],
        readout=config["readout"],
        quantiles=tuple(config["quantiles"]),
        dropout=config["dropout"],
    )
    model.load_state_dict(state)
    model.eval()
    return model


def pinball_loss(pred: torch.Tensor, y: torch.Tensor, quantiles: tuple[float, ...]) -> torch.Tensor:
    """Mean quantile (pinball) loss; `y` (B, T) may hold NaN for targets not measured."""
    q = torch.tensor(quantiles, dtype=pred.dtype, device=pred.device).view(1, 1, -1)
    target = y.unsqueeze(-1)
    mask = ~torch.isnan(target)
    diff = torch.where(mask, target, pred) - pred
    loss = torch.maximum(q * diff, (q - 1) * diff)
    return loss[mask.expand_as(loss)].mean() if mask.any() else pred.sum() * 0


def fit_epochs(
    model: CostPredictor,
    data: Sequence,
    loss_of: Callable[[torch.Tensor, object], torch.Tensor],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    seed: int,
    on_epoch: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train `model` in place: AdamW with a cosine learning-rate schedule over `epochs`, gradients clipped to norm
    5, the graphs `data` (torch_geometric Data with x, edge_index, static, y) shuffled into batches of `batch_size`
    by a generator seeded with `seed`. `loss_of(pred, batch)` gives a batch's scalar loss from the prediction
    (B, targets, quantiles). `on_epoch(epoch, loss)` is called after each epoch (logging).

    Returns the mean training loss of each epoch (weighted by graphs per batch), `epochs` floats. The model's
    initial weights come from torch's global generator: seed it before building the model."""
    from torch_geometric.loader import DataLoader

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    gen = torch.Generator().manual_seed(seed)
    loader = DataLoader(data, batch_size=batch_size, shuffle=True, generator=gen)
    losses = []
    for epoch in range(epochs):
        model.train()
        total, n = 0.0, 0
        for b in loader:
            opt.zero_grad()
            loss = loss_of(model(b.x, b.edge_index, b.batch, b.static), b)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            total += float(loss.detach()) * b.num_graphs
            n += b.num_graphs
        sched.step()
        losses.append(total / max(n, 1))
        if on_epoch is not None:
            on_epoch(epoch, losses[-1])
    return losses
