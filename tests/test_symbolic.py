"""Costs as formulas of the batch (passes.symbolic, analyzer.symbolic; docs/symbolic.md).

Oracles: the concrete analysis of the model exported at each batch (every op's counts, the totals, liveness, the
kernel view and the prediction must equal what the one symbolic export gives at that batch, exactly), torch's
FlopCounterMode on a real CPU forward at two batches, and hand arithmetic for the polynomial machinery.
"""

from __future__ import annotations

import json
from dataclasses import fields
from fractions import Fraction
from pathlib import Path

import jsonschema
import pytest
import torch
from click.testing import CliRunner
from torch.utils.flop_counter import FlopCounterMode

import zoo
from analyzer.api import analyze
from analyzer.cli import cli
from analyzer.errors import AnalysisError, UsageError
from analyzer.pipeline import analyze_model, prepare_graph
from analyzer.sweep import run_sweep, solve_largest
from analyzer.symbolic import analyze_at, formulas, load_symbolic
from passes.analysis import analyze_graph
from passes.costs import MULTIPLY_ADD_CATEGORIES
from passes.graph import Operand, OpGraph, OpNode, SourceValue, TensorInfo
from passes.symbolic import Expr, Poly, SymbolicError, SymbolicGraph, fit, fit_grid, sample_points
from predictor.predict import predict

SCHEMA = json.loads((Path(__file__).parents[1] / "analyzer" / "schema" / "report-1.schema.json").read_text())

# ---- the polynomial machinery, by hand ----------------------------------------------------------


def test_fit_recovers_a_quadratic_exactly():
    # y = 3x^2 - x/2 + 7 at x = 2..8: fitted from 3 points, checked at the other 4
    samples = [(x, Fraction(3 * x * x) - Fraction(x, 2) + 7) for x in range(2, 9)]
    p = fit("b", samples)
    assert p == Poly.univariate("b", [7, Fraction(-1, 2), 3])
    assert p.at({"b": 100}) == 30000 - 50 + 7  # 3 x 100^2 - 100/2 + 7
    assert str(p) == "3 x b^2 - 1/2 x b + 7"


def test_fit_refuses_a_floor():
    # floor(x / 2) is no polynomial: consecutive points expose it
    assert fit("b", [(x, x // 2) for x in range(2, 9)]) is None


def test_fit_keeps_two_points_to_check():
    # 4 points: at most degree 1 is fitted (2 points) and checked at 2; a cubic through them is refused
    assert fit("b", [(x, x**3) for x in (1, 2, 3, 4)]) is None
    assert fit("b", [(x, 5 * x + 1) for x in (1, 2, 3, 4)]) == Poly.univariate("b", [1, 5])


def test_fit_grid_in_two_symbols():
    # y = 3 b s^2 + 2 s + 5 on the grid b, s in 2..8 and 42: fitted in s for each b, then each coefficient in b
    pts = sample_points(2, None)
    values = {(b, s): 3 * b * s * s + 2 * s + 5 for b in pts for s in pts}
    p = fit_grid(("b", "s"), (pts, pts), values)
    assert p == Poly.make({(("b", 1), ("s", 2)): 3, (("s", 1),): 2, (): 5})
    assert str(p) == "3 x b x s^2 + 2 x s + 5"
    values[(5, 5)] += 1  # one sample off the polynomial: refused
    assert fit_grid(("b", "s"), (pts, pts), values) is None


def test_expr_evaluates_with_integers():
    b = Expr("sym", "s0")
    e = Expr("floordiv", Expr("add", Expr("mul", b, 4), 1), 2)  # (4b + 1) // 2
    assert e.at({"s0": 3}) == 6  # 13 // 2
    assert e.symbols() == frozenset({"s0"})
    with pytest.raises(SymbolicError):
        e.at({})
    with pytest.raises(SymbolicError):
        Expr("pow", b, 2)


def test_graph_at_a_point_keeps_every_op_field():
    # one op with every field set away from its default; only its sizes may change at a point
    b = Expr("sym", "s0")
    x = SourceValue(0, "x", TensorInfo((b, 4), "float32"), "input")
    op = OpNode(
        index=0,
        name="lv",
        op="relax.call_tir",
        attrs={"size": Expr("mul", b, 4)},
        operands=[Operand(x.tensor, None, "input", 0, 3)],
        outputs=(TensorInfo((b, 4), "float32"),),
        callee="fused_kernel",
        tir_flops=7,
        tir_macs=3,
        folded=True,
        weight_only=True,
        library_call="aten.lstm.input:lstm",
        eager_copy="clone",
    )
    graph = OpGraph(ops=[op], sources=[x], outputs=[(0, 1)], value_producer={1: 0})
    set_here = {"index", "name", "op", "attrs", "operands", "outputs", "callee", "tir_flops", "tir_macs", "folded"}
    set_here |= {"weight_only"}
    assert {f.name for f in fields(OpNode)} == set_here | {"library_call", "eager_copy"}, (
        "a new OpNode field: carry it in .at"
    )
    (got,) = SymbolicGraph(graph, ranges={"batch": (2, None)}, aliases={"s0": "batch"}).at({"batch": 3}).ops
    assert got.attrs == {"size": 12} and got.outputs == (TensorInfo((3, 4), "float32"),)  # 3 x 4
    assert got.operands == [Operand(TensorInfo((3, 4), "float32"), None, "input", 0, 3)]
    for f in fields(OpNode):
        if f.name not in ("attrs", "operands", "outputs"):
            assert getattr(got, f.name) == getattr(op, f.name), f.name  # library_call: was None


def test_sample_points_stay_in_range():
    assert sample_points(2, None) == [2, 3, 4, 5, 6, 7, 8, 42]
    assert sample_points(2, 5) == [2, 3, 4, 5]


# ---- symbolic against concrete: every op, three batches, three zoo families -----------------

MODELS = ("resnet18?resolution=64", "bert_tiny?seq_len=16", "lstm_small?seq_len=8")
POINTS = (2, 13, 100)  # 2: a sample point; 13 and 100: not among the points the formulas were fitted at


@pytest.fixture(scope="module", params=MODELS)
def symbolic(request):
    sm = load_symbolic(f"zoo:{request.param}")
    return request.param, sm, formulas(sm)


def _op_key(c):
    return (c.index, c.name, c.op, c.category, c.macs, c.flops, c.bytes_read, c.bytes_written, c.inputs, c.outputs)


@pytest.mark.parametrize("batch", POINTS)
def test_symbolic_equals_concrete_at_every_op(symbolic, batch):
    name, sm, costs = symbolic
    ours = analyze_at(sm, batch)
    oracle = analyze_model(f"zoo:{name}", batch=batch)
    a, o = ours.analysis, oracle.analysis
    assert [_op_key(c) for c in a.ops] == [_op_key(c) for c in o.ops]
    assert [c.source for c in a.ops] == [c.source for c in o.ops]
    assert a.totals == o.totals
    assert a.memory == o.memory
    assert a.kernels == o.kernels  # the kernel view, re-decided at this batch
    assert ours.inputs == oracle.inputs
    p, q = predict(a, "h100-80gb")[0], predict(o, "h100-80gb")[0]
    assert (p.latency_ms, p.memory_mib, p.mig.fits) == (q.latency_ms, q.memory_mib, q.mig.fits)
    # the formulas, evaluated here, are the concrete counts of every op and every total
    assert costs.exact
    env = {"batch": batch}
    for formula, c in zip(costs.ops, o.ops, strict=True):
        got = {k: f.at(env) for k, f in formula.items()}
        assert got == {
            "macs": c.macs,
            "flops": c.flops,
            "bytes_read": c.bytes_read,
            "bytes_written": c.bytes_written,
            "output_elements": sum(t.numel for t in c.outputs),
        }, c.name
    for k, f in costs.totals.items():
        assert f.at(env) == getattr(o.totals, k), k


# ---- a recurrent model: the kernels of one library call (cuDNN's GRU), symbolic against concrete -------------

RNN = "gru_small?seq_len=8"  # one nn.GRU (input 128, hidden 128, 1 layer) over 8 steps, then a linear head


@pytest.fixture(scope="module")
def gru():
    sm = load_symbolic(f"zoo:{RNN}")
    # the graph with every op's library call marked before it is evaluated at a point (`prepare_graph` marks the
    # evaluated graph otherwise): `SymbolicGraph.at` must keep the marks
    marked = SymbolicGraph(prepare_graph(sm.loaded, sm.graph.graph), sm.graph.ranges, sm.graph.aliases)
    return sm, marked


@pytest.mark.parametrize("batch", (2, 13, 100))
def test_gru_kernel_view_and_prediction_symbolic_equal_concrete(gru, batch):
    sm, marked = gru
    a = analyze_at(sm, batch).analysis
    o = analyze_model(f"zoo:{RNN}", batch=batch).analysis
    # the oracle's kernel view, by hand: the GRU's input projection (cuDNN's copy of the batch-first input, the
    # GEMM; its bias add is cuDNN's), steps 0-7 (a recurrent GEMM and a fused elementwise kernel each: cuDNN runs
    # step 0's GEMM on h0 = 0 too), the output written in place (the importer's concat: no kernel): 2 + 8 x 2 = 18
    # kernels inside the one `_cudnn_rnn` call; then the head (copy, GEMM, bias add) on its own
    gru_call = ["copy", "gemm"] + ["gemm", "elementwise"] * 8
    assert [(k.kind, k.call) for k in o.kernels] == [(k, "aten.gru.input:gru") for k in gru_call] + [
        ("copy", None),
        ("gemm", None),
        ("elementwise", None),
    ]
    assert a.kernels == o.kernels and a.totals == o.totals and a.memory == o.memory
    at = marked.at({"batch": batch})
    assert [op.library_call for op in at.ops] == [op.library_call for op in marked.graph.ops]
    for f in fields(OpNode):  # every field but the sizes is the symbolic graph's
        if f.name not in ("attrs", "operands", "outputs"):
            assert [getattr(op, f.name) for op in at.ops] == [getattr(op, f.name) for op in marked.graph.ops], f.name
    assert analyze_graph(at).kernels == o.kernels  # was: every kernel's call None at a point
    for device in ("h100-80gb", "a100-40gb"):
        p, q = predict(a, device)[0], predict(o, device)[0]
        assert p.latency_ms == q.latency_ms and p.energy_j == q.energy_j
        assert p.memory_mib == q.memory_mib and p.mig.fits == q.mig.fits


def test_resnet_flops_per_batch_match_flopcountermode():
    # the conv and matmul FLOPs of the formulas against torch's counter on a real forward at batch 2 and 3
    spec = "resnet18?resolution=64"
    sm = load_symbolic(f"zoo:{spec}")
    costs = formulas(sm)
    cats = [c.category for c in analyze_at(sm, 2).analysis.ops]
    folded = [op.folded for op in sm.graph.graph.ops]
    multiply_add = [
        f["flops"]
        for f, cat, fold in zip(costs.ops, cats, folded, strict=True)
        if cat in MULTIPLY_ADD_CATEGORIES and not fold
    ]
    for batch in (2, 3):
        built = zoo.build(spec, batch=batch)
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            built.module(*built.example_inputs)
        assert sum(f.at({"batch": batch}) for f in multiply_add) == counter.get_total_flops()


# ---- the sequence length as a second symbol (a zoo language model) ------------------------------

# (family, layers, hidden, intermediate) as zoo.resolve gives them; GPT-2's LM head adds vocab x hidden per token
# zoo name -> (layers, hidden, feed-forward, LM-head vocabulary or 0)
SEQ_MODELS = {"t5_encoder_tiny": (2, 256, 1024, 0), "bert_tiny": (2, 128, 512, 0), "gpt2_tiny": (2, 256, 1024, 50257)}


@pytest.fixture(scope="module", params=sorted(SEQ_MODELS))
def seq_model(request):
    sm = load_symbolic(f"zoo:{request.param}?seq_len=16", seq=True)
    return request.param, sm, formulas(sm)


@pytest.mark.parametrize(("batch", "seq"), [(2, 16), (3, 33), (5, 100)])
def test_batch_and_sequence_length_symbolic_equal_concrete(seq_model, batch, seq):
    name, sm, costs = seq_model
    assert sm.graph.symbols == ("batch", "seq") and sm.values == {"batch": 2, "seq": 16} and not sm.notes
    a = analyze_at(sm, batch, seq=seq).analysis
    o = analyze_model(f"zoo:{name}?seq_len={seq}", batch=batch).analysis
    assert [_op_key(c) for c in a.ops] == [_op_key(c) for c in o.ops]
    assert a.totals == o.totals and a.memory == o.memory and a.kernels == o.kernels
    assert costs.exact
    env = {"batch": batch, "seq": seq}
    for formula, c in zip(costs.ops, o.ops, strict=True):
        assert (formula["macs"].at(env), formula["bytes_read"].at(env)) == (c.macs, c.bytes_read), c.name
    for k, f in costs.totals.items():
        assert f.at(env) == getattr(o.totals, k), k


def test_attention_macs_grow_as_seq_squared_by_hand(seq_model):
    name, _, costs = seq_model
    layers, hidden, inter, vocab = SEQ_MODELS[name]
    macs = costs.totals["macs"]
    # scores Q K^T and their product with V: 2 x b x s^2 x hidden per layer (heads x head size = hidden)
    assert macs.coefficient((("batch", 1), ("seq", 2))) == 2 * layers * hidden  # T5 1,024; BERT 512
    # per token: q, k, v, o projections (4 H^2) and the feed-forward (2 H I) in each layer, and the LM head (H V)
    per_token = layers * (4 * hidden * hidden + 2 * hidden * inter) + hidden * vocab
    assert macs.coefficient((("batch", 1), ("seq", 1))) == per_token
    assert macs.degree == 3 and len(macs.terms) == 2  # nothing else multiplies and adds


def test_hifigan_mel_frames_symbolic_equal_concrete_and_flopcountermode():
    """A speech family's sequence length (`SEQ_FAMILIES`): HiFi-GAN's mel frames. Each point against the concrete
    export there, and the MACs formula (every conv and transposed conv is linear in batch x frames) against torch's
    counter on a real forward at two lengths."""
    from analyzer.frontends.zoo_frontend import SEQ_FAMILIES

    assert "hifigan" in SEQ_FAMILIES
    sm = load_symbolic("zoo:hifigan?seq_len=8", seq=True)
    costs = formulas(sm)
    assert sm.graph.symbols == ("batch", "seq") and sm.values == {"batch": 2, "seq": 8} and costs.exact
    for batch, seq in ((2, 8), (3, 13)):
        a = analyze_at(sm, batch, seq=seq).analysis
        o = analyze_model(f"zoo:hifigan?seq_len={seq}", batch=batch).analysis
        assert [_op_key(c) for c in a.ops] == [_op_key(c) for c in o.ops]
        assert a.totals == o.totals and a.memory == o.memory and a.kernels == o.kernels
        for k, f in costs.totals.items():
            assert f.at({"batch": batch, "seq": seq}) == getattr(o.totals, k), k
    macs = costs.totals["macs"]
    assert macs.degree == 2 and len(macs.terms) == 1  # MACs = c x batch x seq, nothing else
    for seq in (8, 12):
        built = zoo.build(f"hifigan?seq_len={seq}", batch=1)
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            built.module.eval()(*built.example_inputs)
        assert 2 * macs.at({"batch": 1, "seq": seq}) == counter.get_total_flops()


# ---- nn.Modules, by hand --------------------------------------------------------------------


class _Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x)


class _FixedBatch(torch.nn.Module):
    """Adds a buffer of batch 3: its code fixes the batch, so no symbolic export exists."""

    def __init__(self):
        super().__init__()
        self.register_buffer("offset", torch.zeros(3, 8))

    def forward(self, x):
        return x + self.offset


def test_module_formulas_by_hand():
    rep = analyze(_Linear(), (torch.randn(1, 8),), symbolic=True)
    totals = rep.symbolic["totals"]
    assert totals["macs"]["terms"] == [{"coefficient": 32, "powers": {"batch": 1}}]  # b x 8 x 4
    assert totals["params"]["terms"] == [{"coefficient": 36, "powers": {}}]  # 8 x 4 weights + 4 biases
    assert rep.inputs[0]["shape"] == [2, 8]  # the report's own batch: the lowest the export holds for


def test_a_module_that_fixes_the_batch_is_refused():
    with pytest.raises(AnalysisError):
        load_symbolic(_FixedBatch(), (torch.randn(3, 8),))


def test_files_of_other_formats_are_refused(tmp_path):
    path = tmp_path / "model.tflite"  # .pt2, ONNX and Paddle files keep their dynamic dims (test_symbolic_files)
    path.write_bytes(b"TFL3")
    with pytest.raises(UsageError, match="symbolic analysis reads .onnx, .pt2 and Paddle files"):
        load_symbolic(str(path))


def _sweep(module, example, symbolic: bool):
    return run_sweep(
        module,
        example,
        inputs=None,
        batches=[1, 2, 4, 8],
        devices=["h100-80gb", "a100-40gb"],
        latency_slo_ms=None,
        strict=False,
        symbolic=symbolic,
    )


def test_sweep_from_one_export_equals_the_sweep_that_exports_each_batch():
    example = (torch.randn(1, 8),)
    (new, w_new), (old, w_old) = _sweep(_Linear(), example, True), _sweep(_Linear(), example, False)
    assert new.pop("symbolic") == {"batches": [2, 4, 8], "reason": None, "solve_max": 2**24}  # batch 1: its own
    assert old.pop("symbolic") == {"batches": [], "reason": None}
    for dev in new["devices"]:  # only a symbolic export solves for the largest batch
        assert dev.pop("largest_batch_solved") and "largest_batch_full_gpu_solved" in dev
        del dev["largest_batch_full_gpu_solved"]
    assert new == old and w_new == w_old


def test_sweep_falls_back_when_the_batch_is_fixed():
    doc, _ = _sweep(_FixedBatch(), (torch.randn(3, 8),), True)
    assert doc["symbolic"]["batches"] == []
    assert "torch.export" in doc["symbolic"]["reason"]


# ---- the command line -----------------------------------------------------------------------


def test_cli_symbolic_json_and_table():
    res = CliRunner().invoke(cli, ["analyze", "zoo:resnet18?resolution=64", "--symbolic", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    jsonschema.validate(doc, SCHEMA)
    flops = doc["symbolic"]["totals"]["flops"]
    assert flops["terms"][0]["powers"] == {"batch": 1} and len(flops["terms"]) == 1  # no FLOP is independent of b
    assert doc["totals"]["flops"] == 2 * flops["terms"][0]["coefficient"]  # the report's own numbers: batch 2
    table = CliRunner().invoke(cli, ["analyze", "zoo:resnet18?resolution=64", "--symbolic", "--top", "1"])
    assert table.exit_code == 0
    assert f"FLOPs                    = {flops['formula']}" in table.output
    assert "x 2x3x64x64 float32" in table.output  # no --batch: the export's batch 2, which the note under it says
    assert "(the table above is at the batch its inputs line shows" in table.output


def test_cli_symbolic_refuses_other_formats_and_files(tmp_path):
    res = CliRunner().invoke(cli, ["analyze", "zoo:resnet18", "--symbolic", "--format", "csv"])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    f = tmp_path / "m.tflite"
    f.write_bytes(b"not a model")
    res = CliRunner().invoke(cli, ["analyze", str(f), "--symbolic"])
    assert res.exit_code == 2 and "symbolic analysis reads .onnx, .pt2 and Paddle files" in res.output


# ---- the largest batch that fits, solved ----------------------------------------------------


def test_solve_largest_by_hand():
    # memory 3b + 10 within 1000: 3 x 330 + 10 = 1000 fits, 3 x 331 + 10 = 1003 does not
    calls = []

    def fits(b):
        calls.append(b)
        return 3 * b + 10 <= 1000

    assert solve_largest(fits, lambda b: 3 * b + 10 - 1000, 2, 4096) == 330
    assert len(calls) <= 4  # the interpolation lands on the boundary; the safeguard is not needed
    # a fit the guide does not describe (a latency limit at b <= 77): the halving steps still find it exactly
    assert solve_largest(lambda b: b <= 77, lambda b: 3 * b - 1000, 2, 4096) == 77


def test_sweep_solves_the_largest_batch_against_concrete_exports():
    module = torch.nn.Linear(8, 4096, device="meta")  # 16 KiB of output per sample: boundaries near 10^5
    doc, _ = run_sweep(
        module,
        (torch.empty(1, 8, device="meta"),),
        inputs=None,
        batches=[1, 2, 4],
        devices=["a100-40gb"],
        latency_slo_ms=None,
        strict=False,
    )
    jsonschema.validate({"sweep": doc}, {**SCHEMA, "required": []})
    dev = doc["devices"][0]
    solved = dev["largest_batch_solved"]
    assert set(solved) == set(dev["largest_batch"])
    assert all(solved[p] >= dev["largest_batch"][p] for p in solved)

    def fits(b: int, profile: str) -> bool:  # the oracle: the module exported at batch b, predicted
        rep = analyze(module, (torch.empty(b, 8, device="meta"),))
        return predict(rep.analysis, "a100-40gb")[0].mig.fits[profile]

    for profile in ("1g.5gb", "3g.20gb"):
        b = solved[profile]
        assert 4 < b < doc["symbolic"]["solve_max"]
        assert fits(b, profile) and not fits(b + 1, profile), profile
