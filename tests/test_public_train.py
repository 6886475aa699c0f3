"""The GraphSAGE trained on public A100 and own H100 measurements (predictor.public_train): rows, kernel graph,
splits, artifact."""

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
    # MIG: all 224 rows (the sequence column is the exact padded length: 32 to 512);
    # own H100: 231 records (four leases), two out of memory (opt_6_7b, seq 2048, batch 256, float16; llama_13b,
    # seq 2048, batch 64, float32) = 229
    assert len(rows) == 226 + 224 + 229
    public = pt.training_rows(h100=None)
    assert len(public) == 226 + 224 and len({r.family for r in public}) == 10
    # 10 public families + 34 H100 families - 3 on both GPUs (bert, roberta, distilbert) = 41
    assert len({r.family for r in rows}) == 10 + 34 - 3
    # distiluse v1 and v2 are one architecture: one family, one graph per (batch, seq)
    assert {r.spec for r in public if r.family == "distilbert"} == {
        pt.MIG_ENCODERS["distiluse-base-multilingual-cased-v1"][0] + f"&seq_len={s}" for s in (32, 64, 128, 256, 512)
    }
    assert all(r.analysis_dtype == "amp-float16" for r in rows if r.precision == "amp-fp16")
    # single-forward: grade B, QuartzNet (host-dominated) out: 30 + 44 + 40 + 24 + 8 (DLE) + 224 (MIG) + 229 (H100)
    assert sum(r.single_forward for r in rows) == 30 + 44 + 40 + 24 + 8 + 224 + 229
    assert pt.mig_rows()[1] == {}
    assert pt.not_used_counts() == {pt.NOT_USED[("tft", "C")]: 22}


def test_h100_rows_map_the_measurements(tmp_path):
    """The own H100 rows: one per record with status "ok", the median of its CUDA-event times, the precision of its
    dtype (float32 with TF32 matmuls off, as every record's env says), no harness term."""
    recs = [json.loads(line) for line in open(pt.H100_DIR / "shard-000-of-001.jsonl")]
    used, left = pt.h100_rows()
    assert len(recs) == 231 and len(used) == 229 and left == {"own H100: status 'oom' (no latency)": 2}
    first = used[0]  # line 1: alexnet?resolution=160, batch 1, float32, median 0.812448 ms
    assert (first.spec, first.batch, first.precision) == ("alexnet?resolution=160", 1, "fp32")
    assert first.device == "h100-80gb"
    assert first.latency_ms == recs[0]["latency_ms"]["median"] == 0.812448
    assert first.single_forward and not any(first.harness.values())
    assert {r.precision for r in used} == {"fp32", "fp16"}
    assert {(r.analysis_dtype, r.precision) for r in used} == {("float32", "fp32"), ("float16", "fp16")}
    assert len({r.family for r in used}) == 34 and all(r.comparability == "A" for r in used)
    # a record that ran float32 matmuls on TF32 would need the tf32 precision: refused, not silently mislabelled
    bad = json.loads(json.dumps(recs[0]))
    bad["env"]["tf32_matmul"] = True
    (tmp_path / "s.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(pt.PublicTrainError, match="TF32"):
        pt.h100_rows(tmp_path)


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
    assert n == 41


def test_a_family_on_both_gpus_is_held_out_on_both():
    """bert (MiniLM on the A100 MIG slices, bert_base / bert_large on the H100) is one family: its fold tests on the
    rows of both GPUs and trains on neither."""
    exs = [pt.Example(r, pt.graph_id(*r.config), None, {}) for r in pt.training_rows()]
    folds = {fam: (train, test) for fam, train, test in pt.lofo_splits(exs, ["bert", "roberta", "distilbert"])}
    for fam, (train, test) in folds.items():
        assert {pt.device_group(e.row.device) for e in test} == {"A100", "H100"}
        assert not [e for e in train if e.row.family == fam]


def test_a_planted_leak_fails():
    a, b = _example("alpha", "resnet18"), _example("beta", "resnet34")
    pt.check_split([a], [b])
    with pytest.raises(pt.LeakError, match="families on both sides"):
        pt.check_split([a, _example("beta", "resnet50")], [b])
    # the same graph under two family names (as distiluse v1 / v2 would be) is a leak too
    with pytest.raises(pt.LeakError, match="graphs on both sides"):
        pt.check_split([a], [_example("gamma", "resnet18")])
    # an H100 row of a family held out on the A100 (a family on both GPUs) is a leak
    rows = pt.training_rows()
    h100_bert = next(r for r in rows if r.family == "bert" and r.device == "h100-80gb")
    a100_bert = [r for r in rows if r.family == "bert" and r.device != "h100-80gb"]
    assert a100_bert
    with pytest.raises(pt.LeakError, match=r"families on both sides of the split: \['bert'\]"):
        pt.check_split(
            [pt.Example(h100_bert, pt.graph_id(*h100_bert.config), None, {})],
            [pt.Example(r, pt.graph_id(*r.config), None, {}) for r in a100_bert],
        )


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
    assert s["single_forward"]["per_family_device"]["wav2vec2 / A100"]["n"] == 8
    meta = {"name": "x", "created": "d", "n_rows": 8, "families": ["a"], "data_digest": "0", "tf32_matmul": True}
    md = pt.table_markdown(s, meta | {"training_data": "t"})
    assert "| wav2vec2 / A100 | 8 |" in md and "| **all A100** | 8 |" in md


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
    for device in ("a100-80gb", "a100-40gb", "a100-40gb:3g.20gb", "h100-80gb"):
        p, _ = predict(analysis, device, checkpoints=roots["inside"])
        assert p.predictor == pt.CHECKPOINT_NAME
        assert p.basis["whole_model"] == "measured" and p.basis["whole_model_device"] == device
        assert "public A100 measurements" in p.basis["whole_model_training"]
        assert "own H100 measurements" in p.basis["whole_model_training"]
        lo, hi = p.latency_ms_interval
        assert lo <= p.latency_ms <= hi
    # other GPUs: not transferred (no measurement tests that transfer): the kernel-model estimate
    p, _ = predict(analysis, "h200-141gb", checkpoints=roots["inside"])
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
    assert first_loadable("h100-80gb", SHIPPED)[1] == CHECKPOINT  # measured there too
    assert first_loadable("h200-141gb", SHIPPED)[0] is None  # not transferred to other GPUs


def test_default_rule():
    """On by default on a GPU where, held out, the GraphSAGE (with the OOD fallback) beats the kernel model's median
    APE over the GPU's rows and no family is more than DEFAULT_TOLERANCE_PP (5) points worse than the kernel model."""

    def cell(k: float, g: float) -> dict:
        return {"kernel model": {"median_ape": k}, "+ OOD fallback": {"median_ape": g}}

    per_fd = {
        "a / A100": cell(20.0, 24.9),  # 4.9 points worse: within the tolerance
        "b / A100": cell(30.0, 10.0),
        "a / H100": cell(10.0, 15.1),  # 5.1 points worse: blocks H100
        "c / H100": cell(40.0, 5.0),
    }
    per_dev = {"A100": cell(25.0, 12.0), "H100": cell(25.0, 8.0)}
    d = pt.default_decision(per_fd, per_dev)
    assert d["A100"]["on"] and not d["A100"]["blocking"]
    assert not d["H100"]["on"] and d["H100"]["blocking"] == ["a (10.0% -> 15.1%)"]
    # a GPU whose median is not lower is off even with no family blocking
    assert not pt.default_decision({"b / A100": cell(30.0, 30.0)}, {"A100": cell(30.0, 30.0)})["A100"]["on"]


@pytest.mark.skipif(not CHECKPOINT.is_dir(), reason="no committed checkpoint")
def test_shipped_default_devices_follow_the_table():
    """The checkpoint's default GPUs are those where its own held-out table (eval.json) passes the rule."""
    meta = json.loads((CHECKPOINT / "meta.json").read_text())
    summary = json.loads((CHECKPOINT / "eval.json").read_text())["summary"]["single_forward"]
    decision = pt.default_decision(summary["per_family_device"], summary["per_device"])
    assert meta["default_devices"] == [k for k in pt.MEASURED_DEVICES if decision[pt.device_group(k)]["on"]]


@pytest.mark.skipif(not CHECKPOINT.is_dir(), reason="no committed checkpoint")
def test_predictor_modes(tmp_path, monkeypatch):
    """auto (the default) answers with the public GraphSAGE on its "default_devices" only, kernel never, public on
    every GPU it was measured on; `preflight --predictor` sets the mode for worker processes too."""
    from click.testing import CliRunner

    from analyzer.cli import cli
    from predictor.predict import first_loadable

    art = tmp_path / pt.CHECKPOINT_NAME
    shutil.copytree(CHECKPOINT, art)
    meta = json.loads((art / "meta.json").read_text())
    (art / "meta.json").write_text(json.dumps(meta | {"default_devices": ["h100-80gb"]}))
    monkeypatch.delenv("PREFLIGHT_PREDICTOR", raising=False)
    assert first_loadable("h100-80gb", tmp_path)[1] == art
    assert first_loadable("a100-80gb", tmp_path) == (None, None, None, [])
    monkeypatch.setenv("PREFLIGHT_PREDICTOR", "kernel")  # (and monkeypatch restores what the CLI sets below)
    assert first_loadable("h100-80gb", tmp_path) == (None, None, None, [])
    res = CliRunner().invoke(cli, ["--predictor", "public", "devices", "--format", "json"])
    assert res.exit_code == 0
    import os

    assert os.environ["PREFLIGHT_PREDICTOR"] == "public"
    assert first_loadable("a100-80gb", tmp_path)[1] == art and first_loadable("h100-80gb", tmp_path)[1] == art
    res = CliRunner().invoke(cli, ["--predictor", "graphsage", "devices"])
    assert res.exit_code == 2 and "graphsage" in res.output


def test_featurised_configuration_loads_without_pickle(tmp_path):
    """A configuration's arrays are saved and read back as `python -m analyzer.public_dataset` does (np.load with
    allow_pickle=False): no kernel array may be None (KernelArrays.count and the flags are None when no row has one:
    stored as one launch each, False)."""
    from analyzer.public_dataset import featurize_public

    arrays = featurize_public("resnet18", 1, "float32")
    path = tmp_path / "one.npz"
    np.savez_compressed(path, **arrays)
    with np.load(path, allow_pickle=False) as z:
        back = {k: z[k] for k in z.files}
    assert set(back) == set(arrays)
    # resnet18: every kernel launched once (no count), none inside a library call; its one nn.Linear (fc, with a
    # bias; the convolutions have none) is the one GEMM with a fused bias
    assert back["k_count"].tolist() == [1.0] * len(back["k_kind"])
    assert back["k_inside"].dtype == bool and not back["k_inside"].any()
    assert int(back["k_bias"].sum()) == 1
    # no transposed or grouped convolution in a ResNet-18 (groups = 1 everywhere), no strided view copied
    assert not back["k_transposed"].any() and not back["k_grouped"].any() and not back["k_strided"].any()


# --------------------------------------------------------------------------------------------------
# The ensemble over seeds (`FitConfig.ensemble`, docs/predictor-training.md "Seed variance")
# --------------------------------------------------------------------------------------------------


class _Constant:
    """A hand-built member: every graph gets the same standardised quantiles `z` (3,), in any order."""

    def __init__(self, z):
        self.z = z

    def eval(self):
        return self

    def __call__(self, x, edge_index, batch, static):
        import torch

        n = int(batch.max()) + 1
        return torch.tensor(self.z, dtype=torch.float32).view(1, 1, 3).expand(n, 3, 3)


def _tiny_items(n: int = 24, seed: int = 0) -> list:
    """n small random graphs (5 nodes, 4 chain edges, 4 node and 3 graph features) with random targets."""
    rng = np.random.default_rng(seed)
    edges = np.array([[0, 1, 2, 3], [1, 2, 3, 4]], dtype=np.int64)
    return [
        pt.Item(
            rng.normal(size=(5, 4)).astype(np.float32),
            edges,
            rng.normal(size=3).astype(np.float32),
            float(rng.normal()),
            1.0,
            0.5,
        )
        for _ in range(n)
    ]


def _fitted(members, calibration: float = 1.0) -> pt.Fitted:
    return pt.Fitted(
        "residual", members[0], np.zeros(4, np.float32), np.ones(4, np.float32), np.zeros(3, np.float32),
        np.ones(3, np.float32), 0.5, 2.0, calibration, members=list(members) if len(members) > 1 else [],
    )  # fmt: skip


def test_ensemble_prediction_is_the_mean_of_its_members():
    """Two constant members, z = (-1, 0.2, 1) and (2, 0.6, -3) (sorted: (-3, 0.6, 2)): their mean is (-2, 0.4, 1.5);
    target = z x y_std 2 + y_mean 0.5 = (-3.5, 1.3, 3.5). With calibration 2 the half-widths double around the
    median 0.4: (0.4 - 2.4 x 2, 0.4, 0.4 + 1.1 x 2) = (-4.4, 0.4, 2.6) -> (-8.3, 1.3, 5.7)."""
    a, b = _Constant([-1.0, 0.2, 1.0]), _Constant([2.0, 0.6, -3.0])
    items = _tiny_items(3)
    ens = _fitted([a, b])
    assert len(ens.networks) == 2
    np.testing.assert_allclose(ens.predict_target(items), [[-3.5, 1.3, 3.5]] * 3, rtol=1e-6)
    # the mean of the members' own predictions (each as a one-network predictor)
    members = np.mean([_fitted([m]).predict_target(items) for m in (a, b)], axis=0)
    np.testing.assert_allclose(ens.predict_target(items), members, rtol=1e-6)
    np.testing.assert_allclose(_fitted([a, b], 2.0).predict_target(items), [[-8.3, 1.3, 5.7]] * 3, rtol=1e-6)
    # latency: exp(median target) x the kernel-model estimate (1 ms)
    np.testing.assert_allclose(ens.predict_ms(items)[:, 1], [math.exp(1.3)] * 3, rtol=1e-6)


def test_ensemble_members_are_seeded_apart_and_the_first_is_the_single_network():
    import torch

    items = _tiny_items()
    cfg = pt.FitConfig(epochs=2, hidden=8, seed=7, ensemble=1)
    single = pt.fit(items, "residual", cfg)
    ens = pt.fit(items, "residual", pt.FitConfig(epochs=2, hidden=8, seed=7, ensemble=3))
    assert single.members == [] and len(ens.networks) == 3 and ens.model is ens.members[0]
    params = [torch.cat([p.flatten() for p in n.parameters()]) for n in ens.networks]
    assert all(not torch.equal(params[i], params[j]) for i in range(3) for j in range(i))  # seeds 7, 8, 9 differ
    # member 0 is seed 7's network on the same split: the single network, weight for weight
    assert torch.equal(params[0], torch.cat([p.flatten() for p in single.model.parameters()]))
    assert (ens.y_mean, ens.y_std) == (single.y_mean, single.y_std)  # one standardisation, one calibration split
    with pytest.raises(pt.PublicTrainError, match="ensemble of 0 networks"):
        pt.fit(items, "residual", pt.FitConfig(epochs=1, hidden=8, ensemble=0))


def test_ensemble_artifact_round_trip_and_a_mismatch_is_refused(tmp_path):
    import torch

    from predictor.train import ArtifactError

    items = _tiny_items()
    ens = pt.fit(items, "residual", pt.FitConfig(epochs=1, hidden=8, ensemble=2))
    ens.ood_graphs, ens.ood_mean, ens.ood_std = np.zeros((1, 19)), np.zeros(19), np.ones(19)
    pt.save_artifact(ens, tmp_path / "e", {"families": ["a"]})
    meta = json.loads((tmp_path / "e" / "meta.json").read_text())
    assert meta["ensemble"] == 2
    back, _ = pt.load_artifact(tmp_path / "e")
    assert len(back.networks) == 2
    np.testing.assert_allclose(back.predict_target(items), ens.predict_target(items), rtol=1e-6)
    # meta.json says 3 networks, model.pt holds 2: refused in one line
    (tmp_path / "e" / "meta.json").write_text(json.dumps(meta | {"ensemble": 3}))
    with pytest.raises(ArtifactError, match="does not hold the 3 networks") as exc:
        pt.load_artifact(tmp_path / "e")
    assert "\n" not in str(exc.value)
    # a meta.json naming an absurd count is refused from model.pt's 2 entries, without listing 10**12 names
    (tmp_path / "e" / "meta.json").write_text(json.dumps(meta | {"ensemble": 10**12}))
    with pytest.raises(ArtifactError, match="does not hold the 1000000000000 networks"):
        pt.load_artifact(tmp_path / "e")
    # an ensemble's model.pt under a meta.json without "ensemble" (a single network's) is refused too
    (tmp_path / "e" / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "ensemble"}))
    with pytest.raises(ArtifactError, match="cannot load the predictor"):
        pt.load_artifact(tmp_path / "e")
    # a single network saves as before: a plain state dict, no "ensemble" key
    single = pt.fit(items, "residual", pt.FitConfig(epochs=1, hidden=8, ensemble=1))
    single.ood_graphs, single.ood_mean, single.ood_std = ens.ood_graphs, ens.ood_mean, ens.ood_std
    pt.save_artifact(single, tmp_path / "s", {"families": ["a"]})
    assert "ensemble" not in json.loads((tmp_path / "s" / "meta.json").read_text())
    assert "gnn.convs.0.lin_l.weight" in torch.load(tmp_path / "s" / "model.pt", weights_only=True)
    # ... and a checkpoint without the key (every checkpoint before the option) loads as that one network
    back, _ = pt.load_artifact(tmp_path / "s")
    assert back.members == [] and len(back.networks) == 1
    np.testing.assert_allclose(back.predict_target(items), single.predict_target(items), rtol=1e-6)


@pytest.mark.skipif(not CHECKPOINT.is_dir(), reason="no committed checkpoint")
def test_the_shipped_checkpoint_is_an_ensemble_of_five():
    """What the CLI trains by default (FitConfig.ensemble = 5): five networks, seeded 0 to 4."""
    meta = json.loads((CHECKPOINT / "meta.json").read_text())
    fitted, _ = pt.load_artifact(CHECKPOINT)
    assert meta["ensemble"] == 5 == pt.FitConfig().ensemble and meta["seed"] == 0
    assert len(fitted.networks) == 5 and fitted.members == fitted.networks


def test_family_factors_come_from_rows_before_widening():
    """Held-out rows with a 5-95% half-width of 1 (log scale) around a median of 1 ms: a row measured at e^2 ms needs
    a factor 2. Family a needs 2 and 0.5, family b needs 3. Per family (the other family's rows, n <= 3 so the
    ceil((n+1) 0.9)/n quantile is the largest): a 3, b 2; over all rows (what the shipped checkpoint is widened by)
    3. Computed after widening (a's rows by 3, b's by 2: needs 2/3, 1/6, 1.5) it would have been 1.5."""

    def row(fam, need):
        return {"family": fam, "graphsage_ms": 1.0, "graphsage_lo": math.exp(-1), "graphsage_hi": math.e,
                "measured_ms": math.exp(need)}  # fmt: skip

    per, overall = pt.family_factors([row("a", 2.0), row("a", -0.5), row("b", 3.0)])
    assert per == pytest.approx({"a": 3.0, "b": 2.0}) and overall == pytest.approx(3.0)


def test_ensemble_option_refuses_a_count_below_one(capsys):
    with pytest.raises(SystemExit) as exc:
        pt.main(["train", "--ensemble", "0"])
    assert exc.value.code == 2 and "--ensemble: '0' is not a count of 1 or more" in capsys.readouterr().err


@pytest.mark.skipif(not CHECKPOINT.is_dir(), reason="no committed checkpoint")
def test_checkpoint_was_evaluated_on_todays_kernel_model():
    """The GraphSAGE learns log(measured / kernel-model estimate): a checkpoint trained before a kernel-parameter
    change corrects an estimate that no longer exists (after the A100 convolutions took the H100 sweep's fits, the
    stale checkpoint predicted nnunet's A100 rows at 1.88x their measured time, in sample). Every row of its
    held-out table (eval.json, `kernel_ms`, written when it was evaluated) must equal the kernel model today on the
    same graph (the public graph file): refit with `python -m predictor.public_train evaluate` when this fails."""
    rows = pt.training_rows()
    today = {e.row.source: e.view.estimate_ms for e in pt.examples(rows, pt.load_graphs(), kinds=())}
    table = json.loads((CHECKPOINT / "eval.json").read_text())["rows"]
    stale = [r["source"] for r in table if r["kernel_ms"] != pytest.approx(today[r["source"]], rel=1e-6)]
    assert len(table) == len(rows) and not stale, f"{len(stale)} rows evaluated on another kernel model: {stale[:5]}"


@pytest.mark.skipif(not CHECKPOINT.is_dir(), reason="no committed checkpoint")
def test_the_kernel_models_note_names_a_held_back_checkpoint(tmp_path, monkeypatch):
    """Where a trained GraphSAGE exists for the GPU but does not answer (its table did not pass the default rule, or
    `--predictor kernel`), the prediction's basis names it and how to use it, not "no trained predictor"; a GPU it was
    not measured on still has none. How preflight is set up is no warning about the model: none of these is one (a
    new user read a "warning" on every run)."""
    import torch

    from analyzer.api import analyze
    from predictor.predict import predict

    shutil.copytree(CHECKPOINT, tmp_path / pt.CHECKPOINT_NAME)
    meta = json.loads((tmp_path / pt.CHECKPOINT_NAME / "meta.json").read_text())
    (tmp_path / pt.CHECKPOINT_NAME / "meta.json").write_text(json.dumps(meta | {"default_devices": []}))
    analysis = analyze(torch.nn.Linear(8, 8), (torch.randn(2, 8),)).analysis
    monkeypatch.delenv("PREFLIGHT_PREDICTOR", raising=False)
    for device in ("h100-80gb", "a100-40gb:1g.5gb"):
        p, warnings = predict(analysis, device, checkpoints=tmp_path)
        assert p.predictor == "roofline" and not any("kernel-model estimate" in w for w in warnings)
        note = p.basis["whole_model_note"]
        assert note.startswith(
            "kernel-model estimate: the GraphSAGE trained on whole-model measurements "
            f"(checkpoint {pt.CHECKPOINT_NAME}) is not the default on {device}"
        )
        assert "`preflight --predictor public predict ...` uses it" in note
        assert note.endswith("its interval is assumed, not calibrated on whole-model measurements")
    monkeypatch.setenv("PREFLIGHT_PREDICTOR", "kernel")
    p, warnings = predict(analysis, "h100-80gb", checkpoints=tmp_path)
    assert p.basis["whole_model_note"].startswith(f"--predictor kernel: {pt.CHECKPOINT_NAME} not used on h100-80gb")
    monkeypatch.delenv("PREFLIGHT_PREDICTOR")
    p, warnings = predict(analysis, "h200-141gb", checkpoints=tmp_path)
    assert p.basis["whole_model_note"].startswith("no trained predictor for h200-141gb")
    assert not any("trained predictor" in w for w in warnings)


@pytest.mark.skipif(not CHECKPOINT.is_dir(), reason="no committed checkpoint")
def test_the_held_back_checkpoint_named_is_the_newest(tmp_path, monkeypatch):
    """With several held-back versions of one GPU's GraphSAGE, the warning names the newest (@10 over @2 and @1: by
    version, not by the directory name's order, which puts @10 second), the one `newest_artifacts` would load."""
    from predictor.predict import held_back, newest_artifacts

    meta = json.loads((CHECKPOINT / "meta.json").read_text()) | {"default_devices": []}
    device = pt.CHECKPOINT_NAME.split("@")[0]
    for version in (1, 10, 2):
        (tmp_path / f"{device}@{version}").mkdir()
        (tmp_path / f"{device}@{version}" / "meta.json").write_text(json.dumps(meta))
    monkeypatch.delenv("PREFLIGHT_PREDICTOR", raising=False)
    assert held_back(device, tmp_path) == tmp_path / f"{device}@10"
    assert newest_artifacts(tmp_path) == {}  # held back: none answers by default
    monkeypatch.setenv("PREFLIGHT_PREDICTOR", "public")
    assert held_back(device, tmp_path) is None
    assert newest_artifacts(tmp_path)[device] == tmp_path / f"{device}@10"
