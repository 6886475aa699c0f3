"""The largest batch that fits a MIG slice, solved over the symbolic analysis (docs/symbolic.md): the liveness peak
as a maximum of polynomials of the batch (`passes.symbolic.peak_law`), checked against the concrete liveness pass,
and the solved batch checked against the model exported at that batch and the next (the concrete path)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import jsonschema
import pytest
import torch
from click.testing import CliRunner

from analyzer.api import predict, report
from analyzer.cli import cli
from analyzer.errors import UsageError
from analyzer.render import render_table
from analyzer.symbolic import analyze_at, formulas_text, fused_at, load_symbolic, peak_function
from passes.symbolic import Expr, PeakLaw, Poly, SymbolicError, peak_law, poly_of
from predictor.devices import get_device
from predictor.mig import fits, largest_fitting_batch

SCHEMA = json.loads((Path(__file__).parents[1] / "analyzer" / "schema" / "report-1.schema.json").read_text())


def test_largest_fitting_batch_by_hand():
    # need 3b + 10 MiB, no headroom, 1000 MiB usable: 3 x 330 + 10 = 1000 fits, 3 x 331 + 10 = 1003 does not
    best, evaluations = largest_fitting_batch(lambda b: 3 * b + 10, 1000, 2, 4096, headroom=0)
    assert best == 330
    assert evaluations <= 2 * 12  # doubling 2 -> 512 (9 steps), then bisecting 256..512 (8 steps)
    # 5% headroom: 1.05 x (3b + 10) <= 1000 -> b <= 314.1
    assert largest_fitting_batch(lambda b: 3 * b + 10, 1000, 2, 4096)[0] == 314
    assert largest_fitting_batch(lambda b: 3 * b + 10, 10, 2, 4096)[0] is None  # 16 MiB at batch 2
    assert largest_fitting_batch(lambda b: b, 10**9, 2, 4096)[0] == 4096  # everything fits: the top of the range


def test_poly_arithmetic_and_dominance_by_hand():
    b = Poly.make({(("batch", 1),): 1})
    p = (b * 3 + Poly.make({(): 2})) * (b - Poly.make({(): 1}))  # (3b + 2)(b - 1) = 3b^2 - b - 2
    assert str(p) == "3 x batch^2 - 1 x batch - 2"  # the formatter writes every coefficient
    assert p.at({"batch": 5}) == 3 * 25 - 5 - 2
    assert not p.non_decreasing()  # -b
    assert (b * 4).dominates(b * 3) and not (b * 3).dominates(b * 4)
    assert not (b * 4).dominates(b * 3 + Poly.make({(): 1}))  # 4b vs 3b + 1: neither is larger everywhere
    e = Expr("mul", Expr("add", Expr("sym", "s1"), 1), 4)
    assert poly_of(e, {"s1": "batch"}) == b * 4 + Poly.make({(): 4})
    assert poly_of(Expr("floordiv", Expr("sym", "s1"), 2), {"s1": "batch"}) is None
    assert poly_of(Expr("max", 3, 7)) == Poly.make({(): 7})
    causal = Expr("min", 1, Expr("sym", "s50"))  # a causal mask's slice: 1 for every seq >= 2
    assert poly_of(causal, {"s50": "seq"}) is None  # no range: undecided
    assert poly_of(causal, {"s50": "seq"}, {"seq": (2, 512)}) == Poly.make({(): 1})
    seq = Poly.make({(("seq", 1),): 1})
    assert poly_of(Expr("max", Expr("sym", "s50"), 1), {"s50": "seq"}, {"seq": (2, 512)}) == seq
    assert poly_of(Expr("min", 16, Expr("sym", "s50")), {"s50": "seq"}, {"seq": (2, 512)}) is None  # 16 vs 2..512
    assert Poly.make({(): Fraction(1, 2)}) * 4 == Poly.make({(): 2})


def test_peak_law_of_small_modules_by_hand():
    lin = torch.nn.Linear(8, 4096, device="meta")
    sm = load_symbolic(lin, (torch.empty(1, 8, device="meta"),))
    law = peak_law(sm.graph)
    # matmul then bias add: while the add runs, the matmul's output and the add's are live, 2 x 4096 x 4 bytes per
    # row = 32,768 x batch (the 32-byte input row died with the matmul)
    assert str(law) == "32,768 x batch" and law.monotone
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 16 * 16, 10)
    ).to("meta")
    sm = load_symbolic(net, (torch.empty(1, 3, 16, 16, device="meta"),))
    # conv output 8 x 16 x 16 x 4 B = 8,192 B a sample, its bias add another 8,192 (the input's 3,072 died with the
    # conv); relu: the add's and its own, 16,384; the linear reads relu's (a view) and writes 40: 8,232
    assert str(peak_law(sm.graph)) == "16,384 x batch"


def test_peak_law_holds_a_math_backend_attentions_scores():
    """SDPA at head dim 6 (float32: the math backend) is one op in the graph; eager writes its scores and
    probabilities (`passes.memory.Fusion.scores`), and the law has them as a polynomial of the batch too."""

    class Sdpa(torch.nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    sm = load_symbolic(Sdpa(), tuple(torch.empty(2, 4, 64, 6, device="meta") for _ in range(3)))
    peak_at, law = peak_function(sm, None)
    # per sample: q, k, v and the output 4 x (4 heads x 64 x 6 x 4 B) = 24,576 B; the scores and the probabilities
    # 2 x (4 x 64 x 64 x 4 B) = 131,072 B
    assert str(law) == "155,648 x batch"
    for b in (3, 13):
        assert peak_at(b) == analyze_at(sm, b).analysis.totals.peak_activation_bytes == 155_648 * b


@pytest.mark.parametrize("dtype", [None, "float16"])
def test_peak_law_equals_the_liveness_pass_at_each_point(dtype):
    sm = load_symbolic("zoo:resnet18?resolution=64")
    law = peak_law(sm.graph) if dtype is None else None
    peak_at, law_used = peak_function(sm, dtype)
    assert law_used is not None and len(law_used.candidates) > 1  # a maximum over several polynomials
    for b in (2, 13, 100, 1001):  # 13, 100, 1001: none is a sample point of the formulas
        want = analyze_at(sm, b, dtype=dtype).analysis.totals.peak_activation_bytes
        assert peak_at(b) == want, b
        if law is not None:
            assert law.at({"batch": b}) == want


def test_peak_law_in_batch_and_sequence_equals_the_liveness_pass():
    sm = load_symbolic("zoo:bert_tiny?seq_len=16", seq=True)
    assert set(sm.graph.symbols) == {"batch", "seq"}
    law = peak_law(sm.graph, fused=fused_at(sm))  # (the all-visible mask the graph holds is absent in eager)
    for b, s in ((2, 16), (3, 33), (5, 100)):
        want = analyze_at(sm, b, seq=s).analysis.totals.peak_activation_bytes
        assert law.at({"batch": b, "seq": s}) == want, (b, s)


def test_solved_largest_batch_fits_and_the_next_does_not_by_concrete_analyses():
    model = "zoo:resnet18?resolution=64"
    rep = predict(model, device="a100-40gb", largest_batch=True)
    jsonschema.validate(rep.to_json(), SCHEMA)
    lb = rep.prediction.mig.largest_batch
    assert lb.monotone and lb.peak is not None
    assert rep.to_json()["prediction"]["mig"]["largest_batch"]["per_profile"] == lb.per_profile
    text = render_table(rep, 0)
    assert f"largest batch that fits {rep.prediction.mig.profile}: {lb.per_profile[rep.prediction.mig.profile]:,}" in (
        text
    )
    whole = get_device("a100-40gb").memory_mib

    def concrete(b: int):  # the oracle: the model exported at batch b, analysed and predicted (no symbolic graph)
        return predict(model, device="a100-40gb", batch=b).prediction

    for profile in ("1g.5gb", "3g.20gb"):
        b = lb.per_profile[profile]
        assert 2 < b < lb.hi
        assert concrete(b).mig.fits[profile] and not concrete(b + 1).mig.fits[profile], profile
    b = lb.full_gpu
    assert fits(whole, concrete(b).fit_mib) and not fits(whole, concrete(b + 1).fit_mib)


def test_largest_batch_within_a_latency_slo_by_concrete_analyses():
    """With --latency-slo: per profile, the batch solved from the symbolic graph meets the SLO on that profile and
    the next batch does not, each checked by exporting the model at that batch and predicting it with the slice as
    the target (the concrete path, no symbolic graph); and it is at most the batch that fits."""
    model, slo = "zoo:resnet18?resolution=64", 2.5
    rep = predict(model, device="a100-40gb", largest_batch=True, latency_slo_ms=slo)
    jsonschema.validate(rep.to_json(), SCHEMA)
    lb = rep.prediction.mig.largest_batch
    within = rep.to_json()["prediction"]["mig"]["largest_batch"]["within_latency_slo"]
    assert within["per_profile"] == lb.slo.per_profile and within["latency_slo_ms"] == slo
    assert f"within {slo:g} ms: " in render_table(rep, 0)

    def latency(b: int, target: str) -> float:  # the oracle: exported at batch b, predicted on `target`
        return predict(model, device=target, batch=b).prediction.latency_ms

    for profile in ("1g.5gb", "7g.40gb"):
        b = lb.slo.per_profile[profile]
        assert 2 <= b <= lb.per_profile[profile], profile
        target = f"a100-40gb:{profile}"
        assert latency(b, target) <= slo < latency(b + 1, target), profile
    b = lb.slo.full_gpu
    assert latency(b, "a100-40gb") <= slo < latency(b + 1, "a100-40gb")
    # a slice as the target: that slice alone, the same answer
    one = predict(model, device="a100-40gb:1g.5gb", largest_batch=True, latency_slo_ms=slo).prediction.mig
    assert one.largest_batch.slo.per_profile == {"1g.5gb": lb.slo.per_profile["1g.5gb"]}
    assert one.largest_batch.slo.full_gpu is None
    # an SLO nothing meets: none, and the memory answers stand
    none = predict(model, device="a100-40gb", largest_batch=True, latency_slo_ms=1e-3).prediction.mig.largest_batch
    assert set(none.slo.per_profile.values()) == {None} and none.slo.full_gpu is None
    assert none.per_profile == lb.per_profile


def test_largest_batch_within_the_slo_at_the_models_own_batch_below_the_range():
    """ResNet-18 (64 px) is exported with its batch symbolic from batch 2; its own batch is 1. With an SLO between
    batch 1's and batch 2's predicted latency on 1g.5gb (each from the model exported at that batch, the slice as the
    target), batch 1 is the answer there (the memory solve answers the same way below the range)."""
    model = "zoo:resnet18?resolution=64"
    one, two = (predict(model, device="a100-40gb:1g.5gb", batch=b).prediction.latency_ms for b in (1, 2))
    assert one < two
    slo = (one + two) / 2
    lb = predict(model, device="a100-40gb", largest_batch=True, latency_slo_ms=slo).prediction.mig.largest_batch
    assert lb.lo == 2 and lb.slo.per_profile["1g.5gb"] == 1


def test_largest_batch_within_the_slo_on_a_gpu_without_mig(tmp_path, monkeypatch):
    """A user's GPU with no MIG profiles (a device file's `"mig": []`): the whole GPU alone, no error."""
    from test_device_files import L40S

    from predictor.devices import DEVICES, add_device_file

    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"schema": "preflight.devices/1", "devices": [L40S]}))
    saved = dict(DEVICES)
    try:
        add_device_file(path)
        model = "zoo:resnet18?resolution=64"
        lb = predict(model, device="l40s-48gb", largest_batch=True, latency_slo_ms=5.0).prediction.mig.largest_batch
        assert lb.per_profile == {} and lb.slo.per_profile == {} and lb.slo.full_gpu is not None
        b = lb.slo.full_gpu
        lat = [predict(model, device="l40s-48gb", batch=n).prediction.latency_ms for n in (b, b + 1)]
        assert lat[0] <= 5.0 < lat[1]
    finally:
        DEVICES.clear()
        DEVICES.update(saved)


def test_largest_batch_of_a_slice_target_and_bad_input():
    lin = torch.nn.Linear(8, 4096, device="meta")
    rep = predict(lin, (torch.empty(3, 8, device="meta"),), device="a100-40gb:3g.20gb", largest_batch=True)
    lb = rep.prediction.mig.largest_batch
    assert list(lb.per_profile) == ["3g.20gb"] and lb.full_gpu is None and not lb.whole_gpu
    b = lb.per_profile["3g.20gb"]
    oracle = [predict(lin, (torch.empty(n, 8, device="meta"),), device="a100-40gb:3g.20gb") for n in (b, b + 1)]
    assert [r.prediction.mig.fits["3g.20gb"] for r in oracle] == [True, False]
    with pytest.raises(UsageError):
        predict("zoo:resnet18", inputs=["x:1x3x64x64"], largest_batch=True)


def test_largest_batch_of_a_file_with_a_dynamic_batch_needs_no_batch(tmp_path):
    # an ONNX file whose batch is dynamic: `predict --largest-batch` without --batch predicts at the lowest batch the
    # symbolic import holds for (2, as `analyze --symbolic` does; it asked for --batch before) and solves from it;
    # the oracle: predictions of the file at the answer and one above
    path = tmp_path / "mlp.onnx"
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).eval()
    torch.onnx.export(mlp, (torch.zeros(2, 64),), str(path), dynamo=False, input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}})  # fmt: skip
    rep = predict(str(path), device="a100-40gb:1g.5gb", largest_batch=True)
    assert rep.inputs[0]["shape"] == [2, 64]
    assert any(w.startswith("the file's batch is dynamic: predicted at batch 2") for w in rep.warnings)
    b = rep.prediction.mig.largest_batch.per_profile["1g.5gb"]
    oracle = [predict(str(path), device="a100-40gb:1g.5gb", batch=n) for n in (b, b + 1)]
    assert [r.prediction.mig.fits["1g.5gb"] for r in oracle] == [True, False]


def test_cli_largest_batch_on_a_file_is_a_usage_error(tmp_path):
    path = tmp_path / "m.tflite"  # a format whose dynamic dims the solve does not keep (.pt2 and ONNX it does)
    path.write_bytes(b"not a model")
    result = CliRunner().invoke(cli, ["predict", str(path), "--largest-batch"])
    assert result.exit_code == 2
    assert "largest batch is solved for zoo:NAME models" in result.output


@pytest.mark.slow  # two sweeps with a symbolic export each: 38 s wall at load 11 here (10 s of CPU)
def test_report_sweep_solves_by_the_formula_as_probing_does(monkeypatch):
    # the report's sweep (no latency SLO) takes the largest batch from the peak formula; probing with a full
    # analysis and prediction at each batch (its way with an SLO) must give the same answers
    from analyzer import sweep
    from analyzer.pipeline import analyze_model, predict_all

    # (a slice as the target: its "full GPU" row is the slice itself, solved as its profile is, not batch 1)
    model, devices = "zoo:resnet18?resolution=64", ["a100-40gb", "h100-80gb", "h100-80gb:2g.20gb"]
    rep = predict_all(analyze_model(model, batch=1), devices)
    calls = []
    by_formula = sweep._solve_by_formula

    def counted(*a, **k):
        out = by_formula(*a, **k)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(sweep, "_solve_by_formula", counted)
    kw = dict(inputs=None, batches=[1, 2, 4], devices=devices, latency_slo_ms=None, strict=False, reuse={1: rep})
    fast, _ = sweep.run_sweep(model, None, **kw)
    assert calls == [True, True, True]
    monkeypatch.setattr(sweep, "_solve_by_formula", lambda *a, **k: None)
    slow, _ = sweep.run_sweep(model, None, **kw)
    for a, b in zip(fast["devices"], slow["devices"], strict=True):
        assert a["largest_batch_solved"] == b["largest_batch_solved"]
        assert a["largest_batch_full_gpu_solved"] == b["largest_batch_full_gpu_solved"]
        assert all(v > 4 for v in a["largest_batch_solved"].values())
    (sliced,) = [d for d in fast["devices"] if d["device"] == "h100-80gb:2g.20gb"]
    assert sliced["largest_batch_full_gpu_solved"] == sliced["largest_batch_solved"]["2g.20gb"] > 4


def test_analyze_symbolic_shows_the_peak_law():
    from analyzer.api import analyze

    rep = analyze("zoo:bert_tiny?seq_len=16", symbolic=True)
    jsonschema.validate(rep.to_json(), SCHEMA)
    # BERT-tiny (hidden 128, feed-forward 512) runs SDPA as one kernel and eager builds no all-visible mask: the peak
    # is at the GELU, its input and output 2 x 512 x 4 B a token and the layer's input (the residual) 128 x 4 B
    assert rep.symbolic["peak_law"] == "4,608 x batch x seq"
    assert rep.symbolic["totals"]["peak_activation_bytes"]["formula"] == "4,608 x batch x seq"
    # T5 writes its attention out (scores and probabilities allocated, seq^2 a sequence) and the per-token tensors
    # (the feed-forward's) trade places with them as seq grows: the law is a maximum of several polynomials
    rep = analyze("zoo:t5_encoder_tiny?seq_len=16", symbolic=True)
    law = rep.symbolic["peak_law"]
    assert law.startswith("max(") and "batch x seq^2" in law
    # so the peak's total is no polynomial (one fitted at the sample points, seq <= 56, would be taken as exact
    # beyond them), and the text says so beside the law
    assert rep.symbolic["totals"]["peak_activation_bytes"] is None and not rep.symbolic["exact"]
    text = formulas_text(rep.symbolic)
    assert "peak activations (bytes) = no polynomial" in text and f"= {law}" in text
    sm = load_symbolic("zoo:t5_encoder_tiny?seq_len=16", seq=True)
    assert law == str(peak_law(sm.graph, fused=fused_at(sm)))
    want = analyze_at(sm, 3, seq=500).analysis.totals.peak_activation_bytes  # past every sample point
    assert peak_law(sm.graph, fused=fused_at(sm)).at({"batch": 3, "seq": 500}) == want


# ---- a peak law with no value at a point: a warning or a probe, never a traceback ----------------------------


def test_peak_law_without_a_value_raises_symbolic_error_by_hand():
    b = Poly.make({(("batch", 1),): 1})
    law = PeakLaw((b * 4, b * 3 + Poly.make({(): 8})), ("batch",))
    assert law.at({"batch": 3}) == 17  # max(4 x 3, 3 x 3 + 8) = max(12, 17)
    with pytest.raises(SymbolicError, match="'batch'"):
        law.at({"seq": 3})  # no batch given: was a bare KeyError
    with pytest.raises(SymbolicError, match="whole number"):
        PeakLaw((b * Fraction(1, 3),), ("batch",)).at({"batch": 2})  # 2/3 of a byte


def _third_of_a_byte(sym, graph=None, fused=()):
    """A peak law (in place of `passes.symbolic.peak_law`) with no whole-byte value at any batch the solve tries:
    batch / 3 bytes at batch 2 is 2/3."""
    return PeakLaw((Poly.make({(("batch", 1),): Fraction(1, 3)}),), ("batch",))


def _wide_linear():
    # 32,768 activation bytes a row (test_peak_law_of_small_modules_by_hand): ~2.4 M rows fill an 80 GB GPU, below
    # the solve's top (2^24), so the answers are the memory's, not the range's
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4096), (torch.randn(1, 8),)


def test_predict_largest_batch_warns_when_the_peak_law_has_no_value(monkeypatch):
    import analyzer.symbolic

    model, inputs = _wide_linear()
    monkeypatch.setattr(analyzer.symbolic, "peak_law", _third_of_a_byte)
    rep = predict(model, inputs, device="h100-80gb", largest_batch=True)  # was: SymbolicError out of predict
    assert rep.prediction.mig.largest_batch is None
    assert [w for w in rep.warnings if "largest batch" in w] == [
        "the largest batch that fits was not solved: <Linear>: no peak formula at batch 2: the peak is not a whole "
        "number of bytes at {'batch': 2}"
    ]


def test_report_sweep_probes_when_the_peak_law_has_no_value(monkeypatch):
    # the sweep's formula solve gives way to probing with full analyses (`analyzer.sweep._solve_by_formula`); the
    # answers equal those of the true law (the oracle: the same sweep, unpatched)
    import analyzer.symbolic

    model, inputs = _wide_linear()
    want = report(model, inputs, devices=["h100-80gb"], batches=[1, 2, 4]).sweep["devices"][0]
    monkeypatch.setattr(analyzer.symbolic, "peak_law", _third_of_a_byte)
    got = report(model, inputs, devices=["h100-80gb"], batches=[1, 2, 4]).sweep["devices"][0]
    assert got["largest_batch_solved"] == want["largest_batch_solved"]
    assert got["largest_batch_full_gpu_solved"] == want["largest_batch_full_gpu_solved"]
    assert 2**20 < want["largest_batch_full_gpu_solved"] < 2**24
