"""DLRM as NVIDIA DeepLearningExamples trains it on Criteo 1TB (PyTorch/Recommendation/DLRM).

``dlrm.scripts.main`` defaults: 13 dense features through a bottom MLP 512-256-128 (ReLU after each layer), 26
embedding tables of dimension 128, dot interaction of the 27 vectors (bottom-MLP output and the 26 embeddings:
27 * 26 / 2 = 351 pairwise dots), concatenated after the bottom-MLP output (128 + 351 = 479) and zero-padded to a
multiple of 8 (480), then the top MLP 1024-1024-512-256 (ReLU) and a final linear 256 -> 1 (the logit; the
sigmoid belongs to the loss). The table sizes are the categorical cardinalities of the Criteo 1TB dataset
preprocessed with frequency threshold 15 (the "small" 15 GB model, the one that fits one A100-80GB; cardinalities
from the repository's ``tests/feature_specs/criteo_f15.yaml``). ``max_table_size`` caps each table (the script's
``--max_table_size``, indices hashed modulo the cap), 0 for no cap. Built on the meta device the published
tables allocate nothing.

``embedding`` is how the 26 lookups run. ``"joint"`` (the default) is what the script runs on one GPU:
``--embedding_type custom_cuda`` (its default) becomes ``joint_fused`` for 26 tables of dimension 128
(``validate_flags``), one lookup kernel over the tables concatenated, each feature's index shifted by its table's
offset; written here as NVIDIA's plain-torch ``joint`` type does it (``dlrm/nn/embeddings.py``: one
``nn.Embedding`` over the concatenated rows, ``embedding(categorical + offsets)``): one add and one gather where
eager torch would run 26 gathers and a stack. ``"per_table"`` is one ``nn.Embedding`` per table (the
``multi_table`` type). Both hold the same parameters.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.registry import Bounds, registrar

#: Criteo 1TB, frequency threshold 15: rows of the 26 tables (cat_0 .. cat_25).
CRITEO_FL15 = (
    7912889, 33823, 17139, 7339, 20046, 4, 7105, 1382, 63, 5554114, 582469, 245828, 11,
    2209, 10667, 104, 4, 968, 15, 8165896, 2675940, 7156453, 302516, 12022, 97, 35,
)  # fmt: skip
DENSE = 13


def _mlp(sizes: list[int], last_relu: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """DLRM with dot interaction: (dense (B, 13) float, sparse (B, 26) int64) -> logits (B, 1).

    Args:
        tables: Rows of each embedding table.
        dim: Embedding dimension (also the bottom MLP's output).
        bottom: Bottom MLP hidden sizes (the last must equal ``dim``).
        top: Top MLP hidden sizes (a final linear to 1 follows).
        embedding: ``"joint"`` (one table over all rows, indices + offsets) or ``"per_table"`` (module docstring).
    """

    def __init__(
        self, tables: tuple[int, ...], dim: int, bottom: list[int], top: list[int], embedding: str = "joint"
    ) -> None:
        super().__init__()
        self.bottom = _mlp([DENSE, *bottom[:-1], dim])
        self.joint = embedding == "joint"
        if self.joint:
            self.embedding = nn.Embedding(sum(tables), dim)
            offsets = [0]
            for rows in tables[:-1]:
                offsets.append(offsets[-1] + rows)
            self.register_buffer("offsets", torch.tensor(offsets, dtype=torch.int64), persistent=False)
        else:
            self.embeddings = nn.ModuleList(nn.Embedding(rows, dim) for rows in tables)
        n = len(tables) + 1
        rows, cols = zip(*[(i, j) for i in range(n) for j in range(i)], strict=True)
        self.register_buffer("tril_rows", torch.tensor(rows, dtype=torch.int64), persistent=False)
        self.register_buffer("tril_cols", torch.tensor(cols, dtype=torch.int64), persistent=False)
        raw = n * (n - 1) // 2 + dim
        self.pad = -raw % 8
        self.top = _mlp([raw + self.pad, *top])
        self.out = nn.Linear(top[-1], 1)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        if self.joint:  # (B, 26, dim) in one lookup, then the bottom output in front: (B, 27, dim)
            vectors = torch.cat([x.unsqueeze(1), self.embedding(sparse + self.offsets)], dim=1)
        else:
            vectors = torch.stack([x] + [emb(sparse[:, i]) for i, emb in enumerate(self.embeddings)], dim=1)
        dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self.tril_rows, self.tril_cols]
        parts = [x, dots]
        if self.pad:
            parts.append(x.new_zeros(x.shape[0], self.pad))
        return self.out(self.top(torch.cat(parts, dim=1)))


def _tables(max_table_size: int) -> tuple[int, ...]:
    return tuple(min(r, max_table_size) if max_table_size else r for r in CRITEO_FL15)


def build_dlrm(dim: int, max_table_size: int, embedding: str) -> nn.Module:
    """Build DLRM (bottom 512-256-``dim``, top 1024-1024-512-256-1) over the Criteo FL=15 tables."""
    return DLRM(_tables(max_table_size), dim, [512, 256, dim], [1024, 1024, 512, 256], embedding)


def dlrm_inputs(
    *, batch: int, dtype: torch.dtype, device: torch.device, max_table_size: int, **_: object
) -> tuple[torch.Tensor, ...]:
    """Dense features (batch, 13) and categorical indices (batch, 26) int64, each below its table's rows."""
    rows = torch.tensor(_tables(max_table_size), dtype=torch.int64)
    sparse = (torch.rand(batch, len(rows)) * rows).to(torch.int64)
    return torch.randn(batch, DENSE, dtype=dtype, device=device), sparse.to(device)


registrar("recommendation", dlrm_inputs, ("dense", "sparse"))(
    "dlrm",
    build_dlrm,
    {"dim": 128, "max_table_size": 0, "embedding": "joint"},
    {
        "dlrm_tiny": {"max_table_size": 1000},
        "dlrm_capped": {"max_table_size": 1_000_000},
        "dlrm_criteo_1tb": {},  # the FL=15 tables: 32.71 M rows x 128 = 4.19 G parameters (15.6 GiB)
    },
    "DLRM (NVIDIA DLE, Criteo 1TB FL=15 tables, dot interaction)",
    bounds={"dim": Bounds(ge=1), "embedding": Bounds(choices=("joint", "per_table"))},
)
