"""Operator names a user can act on: each op carries the module path it comes from (torch.export's module stack,
else the weights it reads and its inputs), and the cost rolls up by module; FlopCounterMode on the submodule
alone is the oracle for a module's multiply-add FLOPs."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from torch.utils.flop_counter import FlopCounterMode

from analyzer.api import analyze
from analyzer.cli import cli
from analyzer.render import module_rollup
from passes.costs import MULTIPLY_ADD_CATEGORIES
from passes.tvm_ir import source_names


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
        self.head = torch.nn.Linear(8 * 6 * 6, 4)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def test_source_names_fill_from_the_next_recorded_value():
    # lv1 and lv2 were emitted on the way to lv3's node; lv5 comes after the last recorded value
    assert source_names(["lv", "lv1", "lv2", "lv3", "lv5"], {"lv": "a", "lv3": "b"}) == ["a", "b", "b", "b", None]


def test_module_route_names_every_op_by_its_module():
    rep = analyze(Net().eval(), (torch.randn(1, 3, 8, 8),))
    by_op = [(c.op.removeprefix("relax."), c.source) for c in rep.analysis.ops]
    # conv (+ its bias: reshape, add) in features.0, relu in features.1, flatten in the top-level forward, linear
    assert by_op[0] == ("nn.conv2d", "features.0") and ("nn.relu", "features.1") in by_op
    assert [s for op, s in by_op if op == "matmul"] == ["head"]
    assert {s for _, s in by_op} <= {"features.0", "features.1", "(top level)", "head"}


def test_a_modules_flops_equal_flop_counter_on_that_module_alone():
    """ResNet-18 with real weights: layer2's multiply-add FLOPs summed from its ops equal FlopCounterMode on
    model.layer2 run by itself on its input (1, 64, 56, 56)."""
    from zoo.registry import build

    model = build("resnet18", device="cpu").module.eval()
    rep = analyze(model, (torch.randn(1, 3, 224, 224),))
    ours = sum(
        2 * c.macs
        for c in rep.analysis.ops
        if not c.folded and c.category in MULTIPLY_ADD_CATEGORIES and (c.source or "").split(".")[0] == "layer2"
    )
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model.layer2(torch.randn(1, 64, 56, 56))
    assert ours == fc.get_total_flops() > 0
    depth1 = {r["module"]: r for r in module_rollup(rep) if r["depth"] == 1}
    assert {"conv1", "layer1", "layer2", "layer3", "layer4", "fc"} <= set(depth1)
    assert sum(r["flops"] for r in depth1.values()) == rep.totals.flops  # every live op has a module


def test_json_and_table_show_the_modules(tmp_path):
    path = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(Net().eval(), (torch.randn(1, 3, 8, 8),)), path)
    res = CliRunner().invoke(cli, ["predict", str(path), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    # a .pt2's node metadata is dropped for safety: the module comes from the weights an op reads
    assert doc["ops"][0]["source"] == "features.0" and doc["ops"][0]["name"].startswith("lv")
    heads = [m for m in doc["modules"] if m["module"] == "head"]
    assert heads and heads[0]["macs"] == 8 * 6 * 6 * 4  # the linear layer: 288 x 4 MACs
    assert sum(m["time_ms"] for m in doc["modules"] if m["depth"] == 1) == pytest.approx(
        doc["prediction"]["latency_ms"], rel=1e-6
    )
    text = CliRunner().invoke(cli, ["analyze", str(path), "--by-module", "1"]).stdout
    assert "costliest 2 modules at depth 1 by FLOPs:" in text and "features" in text
