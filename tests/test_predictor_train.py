"""Train the predictor for real on the committed CPU-measured dataset (data/cpu-vm)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from analyzer.dataset import build_cache
from predictor.data import family_split, load_samples, random_split, read_records
from predictor.evaluate import metrics
from predictor.train import TrainConfig, prepare, train

DATA = Path(__file__).resolve().parents[1] / "data" / "cpu-vm"


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    records = [r for r in read_records([DATA]) if r.get("schema") == "preflight.measurement/1"]
    records = sorted(records, key=lambda r: r["id"])[::2]  # half of them keeps the suite fast
    graphs = build_cache(records, tmp_path_factory.mktemp("graphs"))
    out = load_samples(records, graphs)
    assert len(out) >= 40
    return out


def test_dataset_round_trips_records(samples):
    rec = samples[0].record
    assert samples[0].family == rec["family"]
    assert samples[0].y[0] == pytest.approx(rec["latency_ms"]["median"])
    assert np.isnan(samples[0].y[1])  # no energy on a CPU
    assert samples[0].x.shape[0] == samples[0].totals["op_count"] + int(samples[0].ops["op_folded"].sum())


def test_splits_never_straddle_a_family(samples):
    tr, te, held = family_split(samples, 0.25, seed=1)
    assert held and not ({samples[i].family for i in tr} & {samples[i].family for i in te})
    tr2, te2 = random_split(samples, 0.2, seed=1)
    assert sorted(tr2 + te2) == list(range(len(samples)))


def test_training_lowers_the_loss_and_beats_the_mean_on_held_out_configs(samples):
    tr, te = random_split(samples, 0.25, seed=0)
    a, b = [samples[i] for i in tr], [samples[i] for i in te]
    trained = train(a, cfg=TrainConfig(epochs=120, hidden=64, seed=0))
    assert trained.losses[-1] < 0.5 * trained.losses[0]
    pred = trained.predict_prepared([prepare(s, trained.variant) for s in b])
    y = np.stack([s.y for s in b])
    with warnings.catch_warnings():  # the energy column is all NaN on a CPU
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.exp(np.nanmean(np.log(np.stack([s.y for s in a])), axis=0))
    for t in (0, 2):  # latency, memory (a CPU has no energy label)
        ours = metrics(pred[:, t, 1], y[:, t])
        base = metrics(np.full(len(b), mean[t]), y[:, t])
        assert ours.mape < base.mape, (t, ours, base)
