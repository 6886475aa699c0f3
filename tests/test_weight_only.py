"""Ops on weights alone (issue 25, item 3): eager PyTorch runs them on every call, a compiler folds them.

A weight-only op that computes (FLOPs > 0: SwinV2's continuous position-bias MLP over a constant coordinate table,
DeBERTa's relative-position projections) is counted in the totals, is a kernel of its own in the eager kernel view,
and is marked `weight_only` in the op list (and named in a warning) for a compiler that computes it ahead of time.
A weight-only op that computes nothing (a linear layer's transposed weight) stays folded: no FLOPs, no kernel.
Oracle: torch's FlopCounterMode on the eager module (the matrix FLOPs), and hand counts.
"""

from __future__ import annotations

import os

import pytest
import torch
from test_oracle_torch import multiply_add_flops, oracle_flops

from analyzer.api import analyze
from analyzer.render import report_json

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class ConstantTableMLP(torch.nn.Module):
    """SwinV2's position-bias pattern by hand: an MLP over a constant (225, 2) table, added to a projection of x.

    x (2, 225, 16) -> proj (16 -> 4) -> (2, 225, 4) + 16 x sigmoid(mlp(table)) with mlp = Linear(2, 64), ReLU,
    Linear(64, 4, no bias): (225, 4), broadcast over the batch."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("table", torch.randn(225, 2))
        self.mlp = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4, bias=False))
        self.proj = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.proj(x) + 16 * torch.sigmoid(self.mlp(self.table))


X = (torch.randn(2, 225, 16),)
PROJ_MACS = 2 * 225 * 16 * 4  # 28,800
MLP_MACS = 225 * 2 * 64 + 225 * 64 * 4  # 28,800 + 57,600 = 86,400


@pytest.fixture(scope="module")
def table_report():
    return analyze(ConstantTableMLP().eval(), X)


def test_weight_only_ops_are_counted_as_eager_runs_them(table_report):
    ops = table_report.analysis.ops
    # FlopCounterMode: 2 x (28,800 + 86,400) = 230,400 matrix FLOPs, the MLP's included
    assert multiply_add_flops(table_report) == oracle_flops(ConstantTableMLP().eval(), X) == 2 * (PROJ_MACS + MLP_MACS)
    weight_only = [c for c in ops if c.weight_only and not c.folded]
    # mlp.0 matmul + bias add, relu, mlp.2 matmul, sigmoid, x16: all on the table alone
    assert [c.op for c in weight_only] == [
        "relax.matmul",
        "relax.add",
        "relax.nn.relu",
        "relax.matmul",
        "relax.sigmoid",
        "relax.multiply",
    ]
    assert sum(c.macs for c in weight_only) == MLP_MACS
    # the three transposed linear weights compute nothing: folded (weight-only, out of the totals)
    folded = [c for c in ops if c.folded]
    assert [c.op for c in folded] == ["relax.permute_dims"] * 3 and all(c.weight_only for c in folded)
    t = table_report.analysis.totals
    assert t.macs == PROJ_MACS + MLP_MACS
    # elementwise: proj bias add 2 x 225 x 4 = 1,800; mlp.0 bias add + relu 2 x 225 x 64 = 28,800; sigmoid 4 x 900
    # = 3,600 (exp, add, divide, negate per element in the sigmoid rule); x16 900; the final add 1,800
    assert t.flops == 2 * (PROJ_MACS + MLP_MACS) + 1_800 + 28_800 + 3_600 + 900 + 1_800
    assert t.op_count == len(ops) - 3


def test_weight_only_ops_are_marked_for_a_compiler(table_report):
    doc = report_json(table_report)
    marked = [o for o in doc["ops"] if o["weight_only"]]
    assert len(marked) == 9 and sum(o["folded"] for o in marked) == 3  # 6 computed, 3 transposes folded
    assert not any(o["weight_only"] for o in doc["ops"] if o["source"] == "proj" and o["op"] == "relax.matmul")
    (warning,) = [w for w in table_report.warnings if "compute on weights alone" in w]
    # 2 x 86,400 + 28,800 + 3,600 + 900 = 206,100 FLOPs a compiler computes ahead of time
    assert warning.startswith("6 operators compute on weights alone (206,100 FLOPs")


def test_weight_only_ops_are_eager_kernels(table_report):
    """Eager PyTorch: proj addmm, mlp.0 addmm, relu, mlp.2 mm, sigmoid, mul, add: 7 kernels."""
    kernels = table_report.analysis.kernels
    kinds = ["gemm", "gemm", "elementwise", "gemm", "elementwise", "elementwise", "elementwise"]
    assert [k.kind for k in kernels] == kinds


def test_weight_only_results_are_activations(table_report):
    """Computed every call, the MLP's tensors are activations (float32 bytes): at mlp.0's bias add the projection
    (2 x 225 x 4 x 4 = 7,200) and the hidden layer in and out (225 x 64 x 4 = 57,600 each) are live: 122,400 B, the
    peak (with the MLP folded it was x + the projection, 28,800 + 7,200 = 36,000). At the final add: the projection,
    the bias (225 x 4 x 4 = 3,600) and the output (7,200): 18,000."""
    memory = table_report.analysis.memory
    assert memory.peak_bytes == 7_200 + 2 * 57_600 == 122_400
    assert memory.timeline[-1] == 7_200 + 3_600 + 7_200


def test_swinv2_position_bias_mlp_equals_flop_counter():
    """transformers' SwinV2 (tiny, random weights): its continuous position-bias MLP over the (2 x 4 - 1)^2 = 49
    coordinates of a 4 x 4 window, Linear(2, 512), ReLU, Linear(512, heads, no bias), runs each forward."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.Swinv2Config(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4
    )
    model = transformers.Swinv2Model(config).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(pixel_values=x).last_hidden_state

    module, inputs = Hidden().eval(), (torch.randn(1, 3, 32, 32),)
    report = analyze(module, inputs)
    assert not report.analysis.totals.unsupported
    assert multiply_add_flops(report) == oracle_flops(module, inputs)
    mlp = sum(2 * c.macs for c in report.analysis.ops if c.weight_only and not c.folded)
    # layer 0 (1 head): 2 x (49 x 2 x 512 + 49 x 512 x 1) = 150,528; layer 1 (2 heads): 2 x (49 x 2 x 512 + 49 x 512
    # x 2) = 200,704
    assert mlp == 150_528 + 200_704
