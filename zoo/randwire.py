"""Seeded RandWire / NAS-style random DAG networks.

Each stage wires ``nodes`` cells along a random graph (Watts-Strogatz, Erdos-Renyi
or Barabasi-Albert, generated with a private ``random.Random(seed)``), oriented
into a DAG by node index. A node sums its inputs with learned sigmoid weights,
then applies ReLU, a cell op (convolutions, pooling or a dense per-pixel layer)
and BatchNorm. The same ``seed`` always yields the same architecture.
"""

from __future__ import annotations

import random

import torch
from torch import nn

from zoo._common import image_inputs
from zoo.registry import Bounds, Expr, Family, register

OPS = ("conv3x3", "sepconv3x3", "conv1x1", "maxpool", "avgpool", "dense")


def random_graph(kind: str, nodes: int, k: int, p: float, m: int, rng: random.Random) -> set[tuple[int, int]]:
    """Generate an undirected random graph as a set of ``(low, high)`` edges.

    Args:
        kind: ``"ws"`` (Watts-Strogatz), ``"er"`` (Erdos-Renyi) or ``"ba"``
            (Barabasi-Albert).
        nodes: Number of nodes.
        k: WS ring neighbours (even).
        p: WS rewiring / ER edge probability.
        m: BA edges per new node.
        rng: Random source.

    Returns:
        The edge set.
    """
    edges: set[tuple[int, int]] = set()

    def add(a: int, b: int) -> None:
        if a != b:
            edges.add((min(a, b), max(a, b)))

    if kind == "er":
        for a in range(nodes):
            for b in range(a + 1, nodes):
                if rng.random() < p:
                    add(a, b)
    elif kind == "ba":
        targets = list(range(min(m, nodes)))
        degree_list: list[int] = []
        for new in range(len(targets), nodes):
            for t in set(targets):
                add(new, t)
            degree_list += targets + [new] * len(set(targets))
            targets = [rng.choice(degree_list) for _ in range(m)]
    else:
        for a in range(nodes):
            for j in range(1, k // 2 + 1):
                add(a, (a + j) % nodes)
        for a, b in sorted(edges):
            if rng.random() < p:
                free = [c for c in range(nodes) if c != a and (min(a, c), max(a, c)) not in edges]
                if free:
                    edges.discard((a, b))
                    add(a, rng.choice(free))
    return edges


def _op(name: str, cin: int, cout: int, stride: int) -> nn.Module:
    if name == "conv3x3":
        return nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
    if name == "sepconv3x3":
        return nn.Sequential(
            nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
            nn.Conv2d(cin, cout, 1, bias=False),
        )
    if name == "conv1x1":
        return nn.Conv2d(cin, cout, 1, stride, bias=False)
    if name in ("maxpool", "avgpool"):
        pool_cls = nn.MaxPool2d if name == "maxpool" else nn.AvgPool2d
        layers: list[nn.Module] = [pool_cls(3, stride, 1)]
        if cin != cout:
            layers.append(nn.Conv2d(cin, cout, 1, bias=False))
        return nn.Sequential(*layers)
    return _Dense(cin, cout, stride)


class _Dense(nn.Module):
    """Per-pixel fully connected layer (a matmul over channels)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        # ceil_mode: odd sizes round up like the stride-2 convs and pools beside it (21 -> 11, not 10)
        self.pool = nn.AvgPool2d(stride, ceil_mode=True) if stride > 1 else nn.Identity()
        self.fc = nn.Linear(cin, cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class _Node(nn.Module):
    def __init__(self, op: str, fan_in: int, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(fan_in)) if fan_in > 1 else None
        self.body = nn.Sequential(nn.ReLU(), _op(op, cin, cout, stride), nn.BatchNorm2d(cout))

    def forward(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        if self.weights is None:
            x = inputs[0]
        else:
            gates = torch.sigmoid(self.weights)
            x = inputs[0] * gates[0]
            for i in range(1, len(inputs)):
                x = x + inputs[i] * gates[i]
        return self.body(x)


class RandomWiredStage(nn.Module):
    """One stride-2 stage wired along a random DAG.

    Args:
        edges: Undirected edges; oriented from lower to higher node index.
        nodes: Number of nodes.
        ops: Op name per node.
        cin: Input channels.
        cout: Output channels.
    """

    def __init__(self, edges: set[tuple[int, int]], nodes: int, ops: list[str], cin: int, cout: int) -> None:
        super().__init__()
        self.preds: list[list[int]] = [sorted(a for a, b in edges if b == n) for n in range(nodes)]
        has_succ = {a for a, _ in edges}
        self.outputs = [n for n in range(nodes) if n not in has_succ]
        self.cells = nn.ModuleList(
            _Node(
                ops[n],
                max(1, len(self.preds[n])),
                cin if not self.preds[n] else cout,
                cout,
                2 if not self.preds[n] else 1,
            )
            for n in range(nodes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values: list[torch.Tensor] = []
        for n, cell in enumerate(self.cells):
            preds = self.preds[n]
            values.append(cell([values[p] for p in preds] if preds else [x]))
        out = values[self.outputs[0]]
        for n in self.outputs[1:]:
            out = out + values[n]
        return out / len(self.outputs)


class RandWireNet(nn.Module):
    """Conv stem, ``stages`` random-wired stages (channels doubling), classifier head."""

    def __init__(
        self,
        seed: int,
        nodes: int,
        graph: str,
        k: int,
        p: float,
        m: int,
        channels: int,
        stages: int,
        ops: str,
        num_classes: int,
    ) -> None:
        super().__init__()
        rng = random.Random(seed)
        self.stem = nn.Sequential(nn.Conv2d(3, channels // 2, 3, 2, 1, bias=False), nn.BatchNorm2d(channels // 2))
        blocks: list[nn.Module] = []
        cin = channels // 2
        for s in range(stages):
            cout = channels * 2**s
            edges = random_graph(graph, nodes, k, p, m, rng)
            names = [rng.choice(OPS) if ops == "mixed" else ops for _ in range(nodes)]
            blocks.append(RandomWiredStage(edges, nodes, names, cin, cout))
            cin = cout
        self.stages = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.ReLU(), nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU())
        self.fc = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.stages(self.stem(x)))
        return self.fc(x.mean([2, 3]))


def build_randwire(
    seed: int,
    nodes: int,
    graph: str,
    k: int,
    p: float,
    m: int,
    width: int,
    stages: int,
    ops: str,
    num_classes: int,
    resolution: int,
) -> nn.Module:
    """Build a seeded random-wired network.

    Args:
        seed: Architecture seed (graph and op choices).
        nodes: Nodes per stage.
        graph: ``"ws"``, ``"er"`` or ``"ba"``.
        k: WS ring neighbours.
        p: WS rewiring / ER edge probability.
        m: BA attachment edges.
        width: Channels of the first stage (doubled each stage).
        stages: Number of random stages.
        ops: ``"mixed"`` (random per node) or a single op name from ``OPS``.
        num_classes: Number of classes.
        resolution: Input resolution (must survive ``stages + 1`` halvings).

    Returns:
        The model.
    """
    return RandWireNet(seed, nodes, graph, k, p, m, width, stages, ops, num_classes)


register(
    Family(
        name="randwire",
        kind="nas",
        params={
            "seed": 0,
            "nodes": 16,
            "graph": "ws",
            "k": 4,
            "p": 0.75,
            "m": 2,
            "width": 32,
            "stages": 3,
            "ops": "mixed",
            "num_classes": 1000,
            "resolution": 224,
        },
        variants={
            "randwire_small": {"nodes": 8, "width": 16, "resolution": 64},
            "randwire_ws": {"nodes": 32, "width": 78, "ops": "sepconv3x3"},
            "randwire_er": {"graph": "er", "p": 0.2},
            "randwire_ba": {"graph": "ba", "m": 5},
        },
        builder=build_randwire,
        make_inputs=image_inputs,
        description="RandWire-style random DAG of conv / pooling / dense cells (seeded)",
        bounds={
            "nodes": Bounds(ge=2),
            "graph": Bounds(choices=("ws", "er", "ba")),
            "k": Bounds(ge=2, lt="nodes", multiple_of=2),
            "p": Bounds(ge=0.0, le=1.0),
            "m": Bounds(ge=1, lt="nodes"),
            "width": Bounds(ge=2),
            "stages": Bounds(ge=1),
            "ops": Bounds(choices=("mixed", *OPS)),
            # The stem and every stage halve the image.
            "resolution": Bounds(ge=Expr("2 ** (stages + 1)", lambda p: 2 ** (p["stages"] + 1))),
        },
    )
)
