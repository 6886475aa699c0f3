"""A module made by `torch.export` (`ExportedProgram.module()`, what PT2E quantization's `convert_pt2e` returns too)
refuses `.eval()` ("Calling eval() is not supported yet"); the nn.Module route analyses it as it is (issue 25)."""

from __future__ import annotations

import torch

from analyzer.api import analyze


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):  # x: (2, 4)
        return self.fc(x)


def test_an_exported_graph_module_is_analysed():
    x = (torch.randn(2, 4),)
    module = torch.export.export(Linear().eval(), x).module()
    report = analyze(module, x)
    # 2 rows x 4 x 3 = 24 MACs; FLOPs 2 x 24 + the bias add over (2, 3) = 54
    assert report.totals.macs == 24 and report.totals.flops == 54
    assert not report.totals.unsupported
