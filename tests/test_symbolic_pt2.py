"""Symbolic analysis of a `.pt2` file (docs/symbolic.md): the archive imported once with its own dynamic dims, every
batch (and sequence length) evaluated from that one graph.

The oracle of each point is the same file analysed concretely at that point (`--batch`, `--input`: the file's graph
bound there by TVM), op for op; the formulas are checked against hand arithmetic and the concrete counts.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch
from click.testing import CliRunner

import zoo
from analyzer.api import analyze
from analyzer.api import predict as predict_model
from analyzer.cli import cli
from analyzer.errors import MissingShapeError, UsageError
from analyzer.pipeline import analyze_model
from analyzer.sweep import run_sweep
from analyzer.symbolic import analyze_at, formulas, load_symbolic
from predictor.predict import predict
from tests.test_symbolic import SCHEMA, SEQ_MODELS, _op_key

SEQ = "x[1]"  # the name a file's second dynamic dimension gets: its input and axis


def _save(module, inputs: tuple, dynamic: tuple, path):
    torch.export.save(torch.export.export(module.eval(), inputs, dynamic_shapes=dynamic), path)
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("pt2")
    batch = torch.export.Dim("batch", max=4096)
    resnet = zoo.build("resnet18?resolution=64", batch=2)
    bert = zoo.build("bert_tiny?seq_len=16", batch=2)
    linear = torch.nn.Linear(8, 4096)
    return {
        "resnet": _save(resnet.module, tuple(resnet.example_inputs), ({0: batch},), d / "resnet18.pt2"),
        "bert": _save(
            bert.module,
            tuple(bert.example_inputs),
            ({0: batch, 1: torch.export.Dim("seq", min=2, max=128)},),
            d / "bert_tiny.pt2",
        ),
        "linear": _save(linear, (torch.randn(2, 8),), ({0: torch.export.Dim("batch")},), d / "linear.pt2"),
        "fixed": _save(linear, (torch.randn(2, 8),), None, d / "fixed.pt2"),
    }


@pytest.fixture(scope="module")
def resnet(files):
    sm = load_symbolic(files["resnet"])
    return sm, formulas(sm)


@pytest.fixture(scope="module")
def bert(files):
    sm = load_symbolic(files["bert"], inputs=["x:?x16"])
    return sm, formulas(sm)


def _same(ours, oracle) -> None:
    a, o = ours.analysis, oracle.analysis
    assert [_op_key(c) for c in a.ops] == [_op_key(c) for c in o.ops]
    assert a.totals == o.totals and a.memory == o.memory
    assert a.kernels == o.kernels  # the kernel view, re-decided at this point
    assert ours.inputs == oracle.inputs
    p, q = predict(a, "h100-80gb")[0], predict(o, "h100-80gb")[0]
    assert (p.latency_ms, p.memory_mib, p.mig.fits) == (q.latency_ms, q.memory_mib, q.mig.fits)


@pytest.mark.parametrize("batch", (1, 2, 13, 100))  # 1: the file's one program, bound there or evaluated there
def test_a_pt2_files_batch_symbolic_equals_the_file_bound_at_every_op(files, resnet, batch):
    sm, costs = resnet
    assert sm.graph.symbols == ("batch",) and sm.batch_range == (1, 4096)
    oracle = analyze_model(files["resnet"], batch=batch)
    _same(analyze_at(sm, batch), oracle)
    assert costs.exact
    env = {"batch": batch}
    for formula, c in zip(costs.ops, oracle.analysis.ops, strict=True):
        assert {k: f.at(env) for k, f in formula.items() if k != "output_elements"} == {
            "macs": c.macs,
            "flops": c.flops,
            "bytes_read": c.bytes_read,
            "bytes_written": c.bytes_written,
        }, c.name
    for k, f in costs.totals.items():
        assert f.at(env) == getattr(oracle.analysis.totals, k), k


@pytest.mark.parametrize(("batch", "seq"), [(1, 2), (2, 16), (3, 33), (5, 100)])
def test_a_pt2_files_batch_and_sequence_length_equal_the_file_bound(files, bert, batch, seq):
    sm, costs = bert
    assert sm.graph.symbols == ("batch", SEQ) and sm.values == {SEQ: 16}
    assert sm.graph.ranges[SEQ] == (2, 128)
    oracle = analyze_model(files["bert"], batch=batch, inputs=[f"x:?x{seq}"])
    _same(analyze_at(sm, batch, **{SEQ: seq}), oracle)
    env = {"batch": batch, SEQ: seq}
    for k, f in costs.totals.items():
        assert f.at(env) == getattr(oracle.analysis.totals, k), k


def test_a_pt2_files_attention_macs_by_hand(bert):
    _, costs = bert
    layers, hidden, inter, _ = SEQ_MODELS["bert_tiny"]
    macs = costs.totals["macs"]
    # Q K^T and the scores times V: 2 x b x s^2 x hidden per layer; per token the q, k, v, o projections (4 H^2)
    # and the feed-forward (2 H I) of each layer: 2 x 128 x 2 = 512 and 2 x (65,536 + 131,072) = 393,216
    assert macs.coefficient((("batch", 1), (SEQ, 2))) == 2 * layers * hidden == 512
    assert macs.coefficient((("batch", 1), (SEQ, 1))) == layers * (4 * hidden * hidden + 2 * hidden * inter) == 393_216
    assert len(macs.terms) == 2


def test_cli_symbolic_of_a_pt2_file(files):
    res = CliRunner().invoke(
        cli, ["analyze", files["bert"], "--symbolic", "--input", "x:?x16", "--batch", "3", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    jsonschema.validate(doc, SCHEMA)
    assert doc["symbolic"]["symbols"][SEQ] == {"min": 2, "max": 128, "value": 16, "inputs": [["x", 1]]}
    assert doc["inputs"][0]["shape"] == [3, 16]  # the report's own numbers at --batch and the --input's length
    # Linear(8, 4096): b x 8 x 4,096 MACs, 8 x 4,096 + 4,096 parameters
    res = CliRunner().invoke(cli, ["analyze", files["linear"], "--symbolic"])
    assert res.exit_code == 0, res.output
    assert "MACs                     = 32,768 x batch" in res.output
    assert "parameters               = 36,864" in res.output


def test_pt2_symbolic_refusals(files):
    with pytest.raises(MissingShapeError, match=r"x:\?xN"):  # the sequence length needs a value
        analyze(files["bert"], symbolic=True)
    with pytest.raises(UsageError, match="the batch, the symbol"):
        load_symbolic(files["bert"], inputs=["x:4x16"])
    with pytest.raises(UsageError, match="outside the range"):
        load_symbolic(files["bert"], inputs=["x:?x129"])
    with pytest.raises(UsageError, match="dimension 0 of the inputs is fixed"):
        load_symbolic(files["fixed"])
    with pytest.raises(UsageError, match="take the batch as its symbol|give --batch, not --input"):
        load_symbolic("zoo:resnet18", inputs=["x:2x3x64x64"])
    res = CliRunner().invoke(cli, ["analyze", files["fixed"], "--symbolic"])
    assert res.exit_code == 2 and res.output.count("\n") == 1


def test_a_pt2_sweep_from_one_import_equals_the_sweep_that_binds_each_batch(files):
    kwargs = {"inputs": None, "batches": [1, 2, 4, 8], "devices": ["h100-80gb"], "latency_slo_ms": None}
    one, _ = run_sweep(files["resnet"], None, strict=False, **kwargs)
    each, _ = run_sweep(files["resnet"], None, strict=False, symbolic=False, **kwargs)
    assert one["symbolic"]["batches"] == [1, 2, 4, 8] and each["symbolic"]["batches"] == []
    assert one["devices"][0]["points"] == each["devices"][0]["points"]


def test_a_pt2_files_largest_batch_against_the_file_bound(files):
    rep = predict_model(files["linear"], device="a100-40gb", batch=2, largest_batch=True)
    solved = rep.predictions[0].mig.largest_batch.per_profile

    def fits(b: int, profile: str) -> bool:  # the oracle: the file bound at batch b, predicted
        return predict(analyze_model(files["linear"], batch=b).analysis, "a100-40gb")[0].mig.fits[profile]

    b = solved["1g.5gb"]
    assert 2 < b and fits(b, "1g.5gb") and not fits(b + 1, "1g.5gb")
