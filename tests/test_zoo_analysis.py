"""Every zoo family, at its smallest variant, is analysed by preflight with no unsupported operators."""

from __future__ import annotations

import pytest

import zoo
from analyzer import analyze

SMALLEST = [next(iter(f.variants)) for f in zoo.list_families()]


@pytest.mark.parametrize("variant", SMALLEST)
def test_family_analyses_with_every_op_costed(variant):
    report = analyze(f"zoo:{variant}")
    assert report.totals.unsupported == {}
    assert report.totals.macs > 0 and report.totals.params > 0
    assert report.totals.op_count > 0 and report.analysis.edge_index.shape[1] > 0
