"""What grows with the batch and the sequence (`predictor.memory_fit.growth_figures`): slopes and steps between
points of one sweep, predicted against measured, on hand-made rows whose figures are worked out in comments."""

from __future__ import annotations

import pytest

from predictor.memory import MIB, Reserved
from predictor.memory_fit import growth_figures, growth_lines

WEIGHTS = 100 * MIB  # the weights' segments: the same at every point, so they cancel


def _row(sweep: str, batch: int, seq: int, fb: float, predicted_mib: float, hypo_mib: float | None = None) -> dict:
    """One reading on 1g.5gb: framebuffer `fb` MiB; the replay reserves `predicted_mib` MiB in all (weights too)."""
    reserved = Reserved(WEIGHTS, int(predicted_mib * MIB))
    row = {
        "variant": "enc",
        "profile": "1g.5gb",
        "sms": 14,
        "sweep": sweep,
        "batch": batch,
        "seq_len": seq,
        "param_bytes": WEIGHTS,
        "peak": 0,
        "peak1": 0,
        "reserved": reserved,
        "reserved1": reserved,
        "fb": fb,
    }
    if hypo_mib is not None:
        row["hypothesis"] = (Reserved(WEIGHTS, int(hypo_mib * MIB)), reserved)
    return row


def test_slopes_and_steps_by_hand():
    """Batch sweep at 64 tokens: measured 1000, 1030, 1062, 1126 MiB at batch 1, 16, 32, 64 (2 MiB per sample:
    30 / 15, 32 / 16, 64 / 32); the replay 101.5, 124, 148, 196 MiB (1.5 per sample: 22.5 / 15, 24 / 16, 48 / 32).
    Both lines are exact, so the least-squares slopes are 2.0 and 1.5 over batch >= 16 and over 1-64: -25%.
    Steps between batch 16, 32, 64: measured 32 and 64, predicted 24 and 48: 25% each, MAPE 25%.
    Sequence sweep at batch 32: measured 1040, 1062, 1150 MiB at 32, 64, 128 tokens (steps 22 and 88), predicted
    137, 148, 192 (steps 11 and 44): 50% each, MAPE 50%. The context and workspace are the same at every point and
    do not enter."""
    rows = [
        _row("batch", 1, 64, 1000, 101.5),
        _row("batch", 16, 64, 1030, 124),
        _row("batch", 32, 64, 1062, 148),
        _row("batch", 64, 64, 1126, 196),
        _row("seq", 32, 32, 1040, 137),
        _row("seq", 32, 64, 1062, 148),
        _row("seq", 32, 128, 1150, 192),
    ]
    f = growth_figures(rows)["enc", "1g.5gb"]["model"]
    assert f["slope_measured"] == pytest.approx(2.0)
    assert f["slope_predicted"] == pytest.approx(1.5)
    assert f["slope_err_pct"] == pytest.approx(-25.0)
    assert f["slope_all_measured"] == pytest.approx(2.0)
    assert f["slope_all_predicted"] == pytest.approx(1.5)
    assert f["batch_steps_mape_pct"] == pytest.approx(25.0)
    assert f["seq_steps_mape_pct"] == pytest.approx(50.0)
    lines = growth_lines(rows)
    assert lines[-1].startswith("| enc | 1g.5gb | 2.000 | 1.500 | -25.0% |")


def test_a_hypothesis_reserve_is_evaluated_beside_the_model():
    """The same batch sweep with a hypothesis that reserves 2 MiB per sample: 132, 164, 228 MiB at batch 16, 32, 64
    (32 / 16, 64 / 32): its slope is the measured 2.0, error 0%, its steps 32 and 64 exact."""
    rows = [
        _row("batch", 1, 64, 1000, 101.5, 102),
        _row("batch", 16, 64, 1030, 124, 132),
        _row("batch", 32, 64, 1062, 148, 164),
        _row("batch", 64, 64, 1126, 196, 228),
        _row("seq", 32, 32, 1040, 137, 140),
        _row("seq", 32, 64, 1062, 148, 164),
    ]
    figs = growth_figures(rows)["enc", "1g.5gb"]
    assert figs["model"]["slope_err_pct"] == pytest.approx(-25.0)
    assert figs["hypothesis"]["slope_predicted"] == pytest.approx(2.0)
    assert figs["hypothesis"]["slope_err_pct"] == pytest.approx(0.0, abs=1e-9)
    assert figs["hypothesis"]["batch_steps_mape_pct"] == pytest.approx(0.0, abs=1e-9)
    # sequence: measured step 22, hypothesis 164 - 140 = 24: 2 / 22 = 9.09%
    assert figs["hypothesis"]["seq_steps_mape_pct"] == pytest.approx(100 * 2 / 22)
