"""The GraphSAGE trained on public A100 measurements (predictor.public_train): rows, kernel graph, splits, artifact."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from predictor import public_train as pt

SHIPPED = Path(pt.__file__).resolve().parent / "checkpoints"
CHECKPOINT = SHIPPED / pt.CHECKPOINT_NAME


def test_training_rows_counts():
    rows = pt.training_rows()
    # DLE: 248 mapped rows (docs/public-data.md) - 22 TFT Triton rows not used = 226;
    # MIG: all 224 rows (the sequence column is the exact padded length: 32 to 512)
    assert len(rows) == 226 + 224
    fams = {r.family for r in rows}
    assert len(fams) == 10
    # distiluse v1 and v2 are one architecture: one family, one graph per (batch, seq)
    assert {r.spec for r in rows if r.family == "distiluse-distilbert"} == {
        pt.MIG_ENCODERS["distiluse-base-multilingual-cased-v1"][0] + f"&seq_len={s}" for s in (32, 64, 128, 256, 512)
    }
    assert all(r.analysis_dtype == "amp-float16" for r in rows if r.precision == "amp-fp16")
    # single-forward: grade B, QuartzNet (host-dominated) out: 30 + 44 + 40 + 24 + 8 (DLE) + 224 (MIG)
    assert sum(r.single_forward for r in rows) == 30 + 44 + 40 + 24 + 8 + 224
    assert pt.mig_rows()[1] == {}
    assert pt.not_used_counts() == {pt.NOT_USED[("tft", "C")]: 22}


def test_mig_rows_ran_tf32_matmuls():
    """No FP32 CUDA core can have run the MIGProfiler rows: the linear layers alone, at FP32 peak, take longer than
    the measurement (hand arithmetic; the slice's SMs from NVIDIA's MIG user guide: 1g.5gb 14, 7g.40gb 98)."""
    rows = {(r["model"], r["mig_profile"], r["batch"], r["seq_len"]): r for r in map(json.loads, open(pt.MIG_PATH))}
    # distiluse (DistilBERT 6 x 768, FFN 3072): 2 x 6 x (4 x 768^2 + 2 x 768 x 3072) = 84,934,656 FLOP per token
    flop = 2 * 6 * (4 * 768**2 + 2 * 768 * 3072) * 256 * 64  # batch 256 x 64 tokens: 1.392 TFLOP
    for profile, sms in (("1g.5gb", 14), ("7g.40gb", 98)):
        fp32_peak = sms * 64 * 2 * 1.41e9  # 64 FP32 lanes per SM, FMA = 2 FLOP, 1.41 GHz boost
        measured = rows[("distiluse-base-multilingual-cased-v1", profile, 256, 64)]["latency_ms"]
        assert flop / fp32_peak * 1e3 > 2.5 * measured  # 550.7 ms vs 199.68; 78.7 ms vs 26.5
    assert {r.precision for r in pt.mig_rows()[0]} == {pt.MIG_PRECISION} == {"tf32"}
    # the sequence is exact (each review truncated or zero-padded to seq_len): at batch 32 the latency grows with it
    lat = [rows[("distiluse-base-multilingual-cased-v1", "1g.5gb", 32, s)]["latency_ms"] for s in (64, 128, 256, 512)]
    assert lat == sorted(lat) and lat[-1] > 8 * lat[0]  # 274.96 ms at 512 vs 26.52 at 64


def test_unpack_inverts_pack(tmp_path):
    packed = pt.unpack_graphs()
    gid = pt.graph_id("nnunet_2d", 32, "float32")
    some = {
        gid: packed[gid],
        pt.graph_id("wav2vec2_base", 1, "float32"): packed[pt.graph_id("wav2vec2_base", 1, "float32")],
    }
    pt.pack_graphs(some, tmp_path / "g.npz")
    again = pt.unpack_graphs(tmp_path / "g.npz")
    assert set(again) == set(some)
    for name, value in some[gid].items():
        np.testing.assert_array_equal(again[gid][name], value)


def test_rebuild_takes_packed_configurations(tmp_path):
    """`python -m analyzer.public_dataset` featurises only what the packed file lacks: with every configuration in
    the committed file and none allowed to be featurised (--limit 0), the rebuilt file holds the same graphs."""
    from analyzer.public_dataset import main

    out = tmp_path / "g.npz"
    main(["--cache", str(tmp_path / "cache"), "--out", str(out), "--limit", "0"])
    old, new = pt.unpack_graphs(), pt.unpack_graphs(out)
    assert set(new) == set(old) == {pt.graph_id(*r.config) for r in pt.training_rows()}
    gid = pt.graph_id("dlrm_criteo_1tb", 2, "float16")
    for name in ("x", "edge_index", "k_kind", "k_flops", "k_op_idx"):
        np.testing.assert_array_equal(new[gid][name], old[gid][name])


def test_kernel_graph_links_kept_ops_through_views():
    from passes.features import FEATURE_COLUMNS

    x = np.zeros((5, len(FEATURE_COLUMNS)), dtype=np.float32)
    x[[0, 2, 3], FEATURE_COLUMNS.index("launches")] = 1  # ops 1 and 4 are views
    edges = np.array([[0, 1, 1, 2], [1, 2, 3, 4]])  # 0 -> 1(view) -> {2, 3}; 2 -> 4(view)
    kept, e = pt.kernel_graph(x, edges)
    assert kept.tolist() == [0, 2, 3]
    assert sorted(map(tuple, e.T.tolist())) == [(0, 1), (0, 2)]  # ops 0->2 and 0->3, renumbered


def test_node_kernel_ms_splits_each_kernel_over_its_kept_ops():
    # kernel 0 covers ops 0, 1 (both kept): 2 ms -> 1 ms each; kernel 1 covers ops 2 (kept), 3 (not): 4 ms -> op 2
    ptr = np.array([0, 2, 4])
    idx = np.array([0, 1, 2, 3])
    keep = np.array([True, True, True, False])
    got = pt.node_kernel_ms(np.array([2e-3, 4e-3]), ptr, idx, 4, keep)
    assert got.tolist() == pytest.approx([1.0, 1.0, 4.0, 0.0])
    # without a mask, kernel 1's 4 ms go 2 + 2
    assert pt.node_kernel_ms(np.array([2e-3, 4e-3]), ptr, idx, 4).tolist() == pytest.approx([1.0, 1.0, 2.0, 2.0])


def _example(family: str, spec: str) -> pt.Example:
    row = pt.TrainRow("t:0", family, spec, 1, "float32", "fp32", "a100-80gb", 1.0, "B")
    return pt.Example(row, pt.graph_id(*row.config), None, {})


def test_lofo_never_puts_a_family_or_graph_on_both_sides():
    exs = [pt.Example(r, pt.graph_id(*r.config), None, {}) for r in pt.training_rows()]
    n = 0
    for fam, train, test in pt.lofo_splits(exs):
        assert {e.row.family for e in test} == {fam} and fam not in {e.row.family for e in train}
        assert not {e.gid for e in train} & {e.gid for e in test}
        n += 1
    assert n == 10


def test_a_planted_leak_fails():
    a, b = _example("alpha", "resnet18"), _example("beta", "resnet34")
    pt.check_split([a], [b])
    with pytest.raises(pt.LeakError, match="families on both sides"):
        pt.check_split([a, _example("beta", "resnet50")], [b])
    # the same graph under two family names (as distiluse v1 / v2 would be) is a leak too
    with pytest.raises(pt.LeakError, match="graphs on both sides"):
        pt.check_split([a], [_example("gamma", "resnet18")])


def test_graph_file_holds_every_configuration():
    graphs = pt.load_graphs()
    configs = {r.config for r in pt.training_rows()}
    assert {pt.graph_id(*c) for c in configs} <= set(graphs)
    g = graphs[pt.graph_id("nnunet_2d", 32, "float32")]
    assert g.x.shape[1] == len(pt.feature_schema("residual")["nodes"]) - 1
    assert g.kernels["k_op_ptr"][-1] == len(g.kernels["k_op_idx"])
    assert pt.GRAPHS_PATH.stat().st_size < 5e6


def test_small_lofo_subset_runs():
    """The evaluation on a small subset (CI): three families, two epochs; every row gets every model's figure."""
    graphs = pt.load_graphs()
    rows = [r for r in pt.training_rows() if r.family in ("dlrm", "wav2vec2", "nnunet")]
    exs = pt.examples(rows, graphs)
    ev = pt.evaluate_lofo(exs, graphs, pt.FitConfig(epochs=2, hidden=16), families=["wav2vec2"])
    assert len(ev["rows"]) == 8 and {r["family"] for r in ev["rows"]} == {"wav2vec2"}
    for r in ev["rows"]:
        assert r["roofline_ms"] <= r["kernel_ms"]  # the bound never exceeds the estimate
        assert r["graphsage_lo"] <= r["graphsage_ms"] <= r["graphsage_hi"]
        assert math.isfinite(r["ablation_ms"])
    s = pt.summarise(ev["rows"])
    assert s["per_family"]["wav2vec2"]["n"] == 8
    md = pt.table_markdown(
        s,
        {"name": "x", "created": "d", "n_rows": 8, "families": ["a"], "data_digest": "0", "tf32_matmul": True},
    )
    assert "| wav2vec2 | 8 |" in md


@pytest.mark.skipif(not CHECKPOINT.is_dir(), reason="no committed checkpoint")
def test_artifact_of_another_schema_is_refused(tmp_path):
    from predictor.train import ArtifactError, load

    art = tmp_path / "a100-80gb@1"
    shutil.copytree(CHECKPOINT, art)
    fitted, meta = load(art)
    assert fitted.kind == "residual" and meta["families"]
    meta["feature_schema"]["nodes"] = meta["feature_schema"]["nodes"][:-1]
    (art / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="another input layout") as exc:
        load(art)
    assert "\n" not in str(exc.value)
    meta["schema"] = "preflight.public_residual/0"
    (art / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="has schema 'preflight.public_residual/0'"):
        pt.load_artifact(art)


@pytest.mark.skipif(not CHECKPOINT.is_dir(), reason="no committed checkpoint")
def test_predict_uses_it_on_a100_and_falls_back_out_of_distribution(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("PREFLIGHT_PREDICTOR", "public")

    from analyzer import analyze
    from predictor.predict import predict

    analysis = analyze(
        torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 512)).eval(),
        (torch.randn(64, 512),),
    ).analysis
    roots = {}
    for name, threshold in (("inside", 1e9), ("outside", 0.0)):  # everything in / out of distribution
        art = tmp_path / name / pt.CHECKPOINT_NAME
        shutil.copytree(CHECKPOINT, art)
        meta = json.loads((art / "meta.json").read_text())
        meta["ood"]["threshold"] = threshold
        (art / "meta.json").write_text(json.dumps(meta))
        roots[name] = tmp_path / name
    for device in ("a100-80gb", "a100-40gb", "a100-40gb:3g.20gb"):
        p, _ = predict(analysis, device, checkpoints=roots["inside"])
        assert p.predictor == pt.CHECKPOINT_NAME
        assert p.basis["whole_model"] == "measured" and p.basis["whole_model_device"] == device
        assert "public A100 measurements" in p.basis["whole_model_training"]
        lo, hi = p.latency_ms_interval
        assert lo <= p.latency_ms <= hi
    # other GPUs: not transferred (no measurement tests that transfer): the kernel-model estimate
    p, _ = predict(analysis, "h100-80gb", checkpoints=roots["inside"])
    assert p.predictor == "roofline" and p.basis["whole_model"] == "none"
    p, warnings = predict(analysis, "a100-80gb", checkpoints=roots["outside"])
    empty, _ = predict(analysis, "a100-80gb", checkpoints=tmp_path / "none")
    assert p.predictor == "roofline" and p.latency_ms == empty.latency_ms
    assert p.basis["whole_model"] == "none" and "out of distribution" in p.basis["whole_model_fallback"]
    assert any("out of distribution" in w for w in warnings)


@pytest.mark.skipif(not CHECKPOINT.is_dir(), reason="no committed checkpoint")
def test_shipped_checkpoint_answers_on_a100(monkeypatch):
    """The committed predictor loads from predictor/checkpoints/ and names its training data and table."""
    from predictor.predict import first_loadable, predictor_info

    monkeypatch.setenv("PREFLIGHT_PREDICTOR", "public")

    fitted, artifact, source, warnings = first_loadable("a100-80gb", SHIPPED)
    assert artifact == CHECKPOINT and source == "a100-80gb" and not warnings
    assert fitted.kind == "residual" and len(fitted.info["families"]) >= 9
    assert 0 < fitted.ood_threshold < math.inf
    info = predictor_info("a100-40gb", SHIPPED)
    assert info["trained"] and info["evaluation_table"].endswith("EVAL.md")
    assert first_loadable("h100-80gb", SHIPPED)[0] is None  # not transferred to other GPUs


@pytest.mark.skipif(not CHECKPOINT.is_dir(), reason="no committed checkpoint")
def test_public_predictor_is_opt_in(monkeypatch):
    """By default the kernel model answers on an A100 though the public GraphSAGE is shipped (it is not even
    loaded); `preflight --predictor public` (or $PREFLIGHT_PREDICTOR=public) turns it on, for worker processes too."""
    from click.testing import CliRunner

    from analyzer.cli import cli
    from predictor.predict import first_loadable

    monkeypatch.setenv("PREFLIGHT_PREDICTOR", "kernel")  # (and monkeypatch restores what the CLI sets below)
    assert first_loadable("a100-80gb", SHIPPED) == (None, None, None, [])
    res = CliRunner().invoke(cli, ["--predictor", "public", "devices", "--format", "json"])
    assert res.exit_code == 0
    import os

    assert os.environ["PREFLIGHT_PREDICTOR"] == "public"
    assert first_loadable("a100-80gb", SHIPPED)[1] == CHECKPOINT
    res = CliRunner().invoke(cli, ["--predictor", "graphsage", "devices"])
    assert res.exit_code == 2 and "graphsage" in res.output


def test_featurised_configuration_loads_without_pickle(tmp_path):
    """A configuration's arrays are saved and read back as `python -m analyzer.public_dataset` does (np.load with
    allow_pickle=False): no kernel array may be None (KernelArrays.count/bias are None when no row has one)."""
    from analyzer.public_dataset import featurize_public

    arrays = featurize_public("resnet18", 1, "float32")
    path = tmp_path / "one.npz"
    np.savez_compressed(path, **arrays)
    with np.load(path, allow_pickle=False) as z:
        back = {k: z[k] for k in z.files}
    assert set(back) == set(arrays)
    # resnet18: every kernel launched once (no count), none inside a library call; its one nn.Linear (fc, with a
    # bias; the convolutions have none) is the one GEMM with a fused bias
    assert "k_count" not in back and back["k_inside"].dtype == bool and not back["k_inside"].any()
    assert int(back["k_bias"].sum()) == 1
