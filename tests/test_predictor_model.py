"""The GraphSAGE predictor's building blocks: shapes, invariance, loss, artifacts (no measured data needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from predictor.model import CostPredictor, pinball_loss


def _graph(n=6, f=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g)
    edge_index = torch.tensor([[0, 0, 1, 2, 3, 4], [1, 2, 3, 3, 4, 5]])
    return x, edge_index


def test_output_shape_and_repr():
    m = CostPredictor(5, 4, hidden=16)
    x, ei = _graph()
    out = m(x, ei, torch.zeros(6, dtype=torch.long), torch.zeros(1, 4))
    assert out.shape == (1, 3, 3)
    assert repr(m) == (
        "CostPredictor(node_dim=5, static_dim=4, hidden=16, layers=3, readout='mean+max+sum', "
        "quantiles=(0.05, 0.5, 0.95))"
    )
    with pytest.raises(ValueError):
        CostPredictor(5, 4, readout="attention")


@pytest.mark.parametrize("readout", ["mean+max+sum", "sum"])
def test_prediction_does_not_change_when_nodes_are_permuted(readout):
    torch.manual_seed(0)
    m = CostPredictor(5, 4, hidden=16, readout=readout).eval()
    x, ei = _graph()
    static = torch.randn(1, 4)
    batch = torch.zeros(6, dtype=torch.long)
    perm = torch.tensor([3, 5, 0, 2, 4, 1])  # new position i holds old node perm[i]
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(6)
    with torch.no_grad():
        a = m(x, ei, batch, static)
        b = m(x[perm], inv[ei], batch, static)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_pinball_loss_by_hand_and_masks_missing_targets():
    # one graph, one target, quantiles (0.1, 0.9); prediction 0 for both, label 1:
    # q=0.1: max(0.1*1, -0.9*1) = 0.1; q=0.9: 0.9 -> mean 0.5
    pred = torch.zeros(1, 1, 2)
    assert float(pinball_loss(pred, torch.tensor([[1.0]]), (0.1, 0.9))) == pytest.approx(0.5)
    # label -2: q=0.1: max(-0.2, 1.8) = 1.8; q=0.9: max(-1.8, 0.2) = 0.2 -> 1.0
    assert float(pinball_loss(pred, torch.tensor([[-2.0]]), (0.1, 0.9))) == pytest.approx(1.0)
    # NaN labels do not count
    pred2 = torch.zeros(1, 2, 2)
    assert float(pinball_loss(pred2, torch.tensor([[1.0, math.nan]]), (0.1, 0.9))) == pytest.approx(0.5)


def test_roofline_fallback_is_labelled_and_mig_follows_memory():
    from analyzer import predict

    r = predict(torch.nn.Sequential(torch.nn.Linear(64, 64)).eval(), (torch.randn(4, 64),), device="h100-80gb")
    p = r.prediction
    assert p.predictor == "roofline" and "kernel-model estimate" in p.basis["whole_model_note"]
    assert p.latency_ms_interval[0] <= p.latency_ms <= p.latency_ms_interval[1]
    # the low end: each kernel's roofline time or half its launch floor, whichever is larger, never the bare bound
    assert p.roofline_latency_ms < p.latency_ms_interval[0] <= p.latency_ms
    assert p.mig.profile == "1g.10gb"  # a few hundred MiB fit the smallest slice
    assert set(r.to_json()["prediction"]) >= {
        "device",
        "predictor",
        "latency_ms",
        "latency_ms_interval",
        "energy_j",
        "energy_j_interval",
        "memory_mb",
        "memory_mb_interval",
        "roofline_latency_ms",
        "mig",
    }


def test_artifact_round_trip_and_version_check(tmp_path):
    import json

    from predictor.data import Sample
    from predictor.train import ArtifactError, TrainConfig, load, prepare, save, train

    rng = np.random.default_rng(0)
    samples = []
    for i in range(24):
        n = 4 + i % 3
        samples.append(
            Sample(
                key=str(i),
                family=f"f{i % 4}",
                device="cpu-test",
                y=np.array([1.0 + i, math.nan, 100.0 + 3 * i]),
                x=rng.random((n, 70)).astype(np.float32),
                edge_index=np.array([[j for j in range(n - 1)], [j + 1 for j in range(n - 1)]]),
                static={
                    "macs": 1e6 * (i + 1),
                    "batch_size": 1 + i % 4,
                    "param_bytes": 1000,
                    "peak_activation_bytes": 1000,
                },
                ops={},
                totals={},
            )
        )
    trained = train(samples, cfg=TrainConfig(epochs=3, hidden=16))
    before = trained.predict_prepared([prepare(s, trained.variant) for s in samples[:5]])
    save(trained, tmp_path / "cpu-test@1", {"name": "cpu-test@1"})
    loaded, meta = load(tmp_path / "cpu-test@1")
    after = loaded.predict_prepared([prepare(s, loaded.variant) for s in samples[:5]])
    np.testing.assert_allclose(before, after, rtol=1e-5)
    assert meta["name"] == "cpu-test@1"
    doc = json.loads((tmp_path / "cpu-test@1" / "meta.json").read_text())
    doc["feature_version"] = "preflight.features/0"
    (tmp_path / "cpu-test@1" / "meta.json").write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match="retrain"):
        load(tmp_path / "cpu-test@1")


def test_stale_artifact_falls_back_to_the_roofline_with_a_warning(tmp_path):
    """An artifact made for another feature layout (or corrupt) must not become an internal error."""
    import json

    from analyzer import analyze
    from predictor.predict import predict

    artifact = tmp_path / "h100-80gb@1"
    artifact.mkdir()
    (artifact / "meta.json").write_text(json.dumps({"feature_version": "preflight.features/0"}))
    (artifact / "model.pt").write_bytes(b"")
    analysis = analyze(torch.nn.Sequential(torch.nn.Linear(8, 8)).eval(), (torch.randn(2, 8),)).analysis
    p, warnings = predict(analysis, "h100-80gb", checkpoints=tmp_path)
    assert p.predictor == "roofline"
    assert any("h100-80gb@1" in w and "kernel-model estimate instead" in w for w in warnings)


def test_calibration_split_by_family_keeps_families_whole():
    from types import SimpleNamespace

    import numpy as np

    from predictor.train import TrainConfig, _calibration_split

    samples = [SimpleNamespace(family=f"f{i % 6}") for i in range(60)]
    cal, fit = _calibration_split(samples, TrainConfig(calibration_split="family"), np.random.default_rng(0))
    assert sorted([*cal, *fit]) == list(range(60))
    cal_fams, fit_fams = {samples[i].family for i in cal}, {samples[i].family for i in fit}
    assert cal_fams and not cal_fams & fit_fams  # no family on both sides
    assert len(cal) >= round(0.15 * 60)
    cal_r, fit_r = _calibration_split(samples, TrainConfig(calibration_split="random"), np.random.default_rng(0))
    assert len(cal_r) == 9 and sorted([*cal_r, *fit_r]) == list(range(60))


def test_mig_metrics_against_measured_fit_by_hand():
    from predictor.data import Sample
    from predictor.evaluate import SplitResult, mig_metrics, table_markdown

    names = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]  # H100-80GB, smallest first

    def sample(fit):
        record = {} if fit is None else {"mig_fit": dict(zip(names, fit, strict=True))}
        return Sample(
            key="",
            family="f",
            device="h100-80gb",
            y=np.full(3, math.nan),
            x=np.zeros((1, 1)),
            edge_index=np.zeros((2, 0)),
            static={},
            ops={},
            totals={},
            record=record,
        )

    yes, no = [True] * 6, [False] * 6
    cases = [
        (1000.0, yes),  # 1g.10gb recommended and it fits: the smallest that fits
        (1000.0, [False] + [True] * 5),  # 1g.10gb recommended but it did not fit: unsafe
        (15000.0, yes),  # 15000 x 1.05 > 9984 MiB: 1g.20gb, though 1g.10gb fit: larger than needed
        (90000.0, [False] * 5 + [True]),  # more than 7g.80gb's 81152 MiB: none, but 7g fit
        (90000.0, no),  # none, and none fit
        (1000.0, None),  # no MIG labels: not counted
        (math.nan, yes),  # no prediction: not counted
    ]
    m = mig_metrics([sample(f) for _, f in cases], np.array([hi for hi, _ in cases]))
    assert m == {"n": 5, "unsafe": 1, "smallest": 1, "larger": 1, "none_but_fits": 1, "none_correct": 1}
    assert mig_metrics([sample(None)], np.array([1000.0])) is None
    result = SplitResult("random", 10, 5, [], {}, [math.nan] * 3, mig={"roofline": m})
    table = table_markdown([result], "t")
    assert "| roofline | 5 | 1 (20%) | 1 (20%) | 1 (20%) | 1 (20%) | 1 (20%) |" in table
    assert "No MIG fit labels" in table_markdown([SplitResult("random", 10, 5, [], {}, [math.nan] * 3)], "t")
