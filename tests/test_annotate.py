"""Compiler-pipeline integration: the AnnotateCosts module pass and the CostRecorder pass instrument."""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest
import torch
import tvm
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

import analyzer
from analyzer import AnnotateCosts, CostRecorder, read_annotation
from analyzer.errors import MissingShapeError, UsageError
from analyzer.render import SCHEMA_FILE
from passes.analysis import analyze_module
from passes.tvm_ir import function_attrs, module_attr, structural_equal, without_attrs


def _mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 32)).eval()
    return model, (torch.randn(4, 64),)


@pytest.fixture(scope="module")
def mlp_mod():
    model, inputs = _mlp()
    return analyzer.load(model, example_inputs=inputs).mod


@pytest.fixture(scope="module")
def cnn_mod():
    return analyzer.load("zoo:resnet18").mod


@I.ir_module
class Dynamic:
    @R.function
    def main(x: R.Tensor(("n", 8), "float32")):
        y = R.nn.relu(x)
        return y


def test_annotate_in_sequential_changes_nothing_but_attributes(cnn_mod):
    with_pass = tvm.transform.Sequential(
        [relax.transform.FoldConstant(), AnnotateCosts(device="a100-40gb"), relax.transform.LegalizeOps()]
    )(cnn_mod)
    without = tvm.transform.Sequential([relax.transform.FoldConstant(), relax.transform.LegalizeOps()])(cnn_mod)
    assert not structural_equal(with_pass, without)  # the attributes are there
    assert structural_equal(without_attrs(with_pass, "preflight"), without)
    assert read_annotation(with_pass)["prediction"]["device"] == "a100-40gb"


def test_annotation_matches_direct_analysis_and_prediction(cnn_mod):
    out = AnnotateCosts(device="h100-80gb")(cnn_mod)
    direct = analyzer.predict("zoo:resnet18", device="h100-80gb")
    t = direct.totals
    summary = module_attr(out, "preflight")
    for key in ("flops", "macs", "bytes_read", "bytes_written", "peak_activation_bytes", "op_count", "params"):
        assert summary[key] == getattr(t, key), key
    fattrs = function_attrs(out)
    assert fattrs["preflight.flops"] == t.flops and fattrs["preflight.op_count"] == t.op_count
    assert fattrs["num_input"] == 1  # the loaded module says which parameters are weights
    doc = read_annotation(out)
    assert "ops" not in doc  # kept small unless include_ops=True
    full = read_annotation(AnnotateCosts(device="h100-80gb", include_ops=True)(cnn_mod))
    jsonschema.validate(full, json.loads(SCHEMA_FILE.read_text()))
    full["kernels"].pop("list")  # like the ops, kept only with include_ops=True
    for d in (full, doc):
        d["tool"].pop("created")  # the two documents were made a moment apart
    assert {k: v for k, v in full.items() if k != "ops"} == doc
    assert len(full["ops"]) == len(direct.analysis.ops)
    block = direct.prediction.to_json()
    for key in ("latency_ms", "memory_mb", "energy_j", "roofline_latency_ms"):
        assert doc["prediction"][key] == pytest.approx(block[key])
        if key != "roofline_latency_ms":
            assert fattrs[f"preflight.{key}"] == pytest.approx(block[key])
    assert doc["prediction"]["mig"] == block["mig"]
    assert summary["mig_profile"] == (direct.prediction.mig.profile or "")


def test_annotated_macs_match_flop_counter_mode(mlp_mod):
    model, inputs = _mlp()
    with FlopCounterMode(display=False) as counter:
        model(*inputs)
    out = AnnotateCosts(predict=False)(mlp_mod)
    assert 2 * function_attrs(out)["preflight.macs"] == counter.get_total_flops() == 2 * 4 * (64 * 256 + 256 * 32)
    assert "prediction" not in read_annotation(out)
    ops = read_annotation(AnnotateCosts(predict=False, include_ops=True)(mlp_mod))["ops"]
    # 2 weight transposes (folded ahead of time), 2 matmuls, 2 bias adds, 1 relu
    assert sorted(o["op"] for o in ops) == sorted(
        ["relax.permute_dims"] * 2 + ["relax.matmul"] * 2 + ["relax.add"] * 2 + ["relax.nn.relu"]
    )
    assert [o["folded"] for o in ops].count(True) == 2


def _conv():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1)).eval()
    with torch.no_grad():  # statistics other than the initial 0 / 1, so the batch norm does something
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model, (torch.randn(2, 3, 8, 8),)


def _run_on_cpu(mod, model, inputs) -> np.ndarray:
    """Compile `mod` for TVM's CPU target and run `main` on `inputs` and `model`'s weights (the parameters after
    the `num_input` model inputs, matched to the torch state dict by name: p_<...>_0_weight is "0.weight")."""
    state = {k.replace(".", "_"): v for k, v in model.state_dict().items()}
    params = mod["main"].params[len(inputs) :]
    weights = []
    for p in params:
        match = [k for k in state if p.name.endswith("_" + k)]
        assert len(match) == 1, (p.name, match)
        weights.append(state[match[0]].numpy())
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    args = [tvm.runtime.tensor(a) for a in [*(x.numpy() for x in inputs), *weights]]
    out = vm["main"](*args)
    while not hasattr(out, "numpy"):  # the importer returns a tuple of outputs
        out = out[0]
    return out.numpy()


@pytest.mark.parametrize("build", [_mlp, _conv], ids=["mlp", "conv-bn-relu"])
def test_annotated_module_computes_what_the_unannotated_one_does(build):
    """Compiled with and without the pass for TVM's CPU target and run on the same input and weights: the same
    outputs, and both those of the torch model (the independent reference)."""
    model, inputs = build()
    mod = analyzer.load(model, example_inputs=inputs).mod
    annotated = _run_on_cpu(AnnotateCosts(device="h100-80gb")(mod), model, inputs)
    plain = _run_on_cpu(mod, model, inputs)
    with torch.no_grad():
        expected = model(*inputs).numpy()
    np.testing.assert_array_equal(annotated, plain)  # the same program: bit for bit
    np.testing.assert_allclose(annotated, expected, rtol=1e-4, atol=1e-5)
    assert np.abs(expected).max() > 1e-2  # not a vacuous comparison of zeros


def test_annotate_errors_are_clear():
    with pytest.raises(MissingShapeError, match="n"):
        AnnotateCosts(predict=False)(Dynamic)
    model, inputs = _mlp()
    mod = analyzer.load(model, example_inputs=inputs).mod
    with pytest.raises(UsageError, match="unknown device 'v100'"):
        AnnotateCosts(device="v100")(mod)
    with pytest.raises(UsageError, match="predicts for a GPU: give device="):
        AnnotateCosts(device=None)(mod)


def test_a_legalized_module_is_annotated_with_a_warning_that_it_is_not_eager(mlp_mod):
    """After LegalizeOps every operator is a call_tir: the annotation says the kernels are the module's TIR
    functions, not eager PyTorch's; before it, no such warning."""
    before = json.loads(str(module_attr(AnnotateCosts(device="h100-80gb")(mlp_mod), "preflight.report")))
    assert not any("call_tir" in w for w in before["warnings"])
    lowered = relax.transform.LegalizeOps()(mlp_mod)
    doc = json.loads(str(module_attr(AnnotateCosts(device="h100-80gb")(lowered), "preflight.report")))
    (warning,) = [w for w in doc["warnings"] if "call_tir" in w]
    n, total = (int(v) for v in re.match(r"(\d+) of the (\d+) operators are TIR functions", warning).groups())
    assert n == total > 0 and "put AnnotateCosts before LegalizeOps" in warning  # LegalizeOps lowers every op
    counts = json.loads(str(module_attr(AnnotateCosts(predict=False)(lowered), "preflight.report")))
    assert not any("call_tir" in w for w in counts["warnings"])  # counts only: nothing predicted, nothing to warn


def _fields(snapshot_or_analysis):
    return {
        k: getattr(snapshot_or_analysis, k)
        for k in ("flops", "macs", "bytes_read", "bytes_written", "peak_activation_bytes", "op_count")
    }


def test_recorder_matches_direct_analysis_before_and_after(cnn_mod):
    steps = [
        relax.transform.FoldConstant(),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    names = ["FoldConstant", "LegalizeOps", "AnnotateTIROpPattern", "FuseOps", "FuseTIR"]
    recorder = CostRecorder()
    with tvm.transform.PassContext(instruments=[recorder]):
        out = tvm.transform.Sequential(steps)(cnn_mod)
    # the same passes one at a time, outside the instrument
    mods = [cnn_mod]
    for step in steps:
        mods.append(step(mods[-1]))
    assert structural_equal(out, mods[-1])
    records = {r.name: r for r in recorder.records}
    assert [r.name for r in recorder.records if r.depth == 1] == names
    for i, name in enumerate(names):
        r = records[name]
        assert r.before.error is None and r.after.error is None
        assert _fields(r.before) == _fields(analyze_module(mods[i]).totals), name
        assert _fields(r.after) == _fields(analyze_module(mods[i + 1]).totals), name
    assert records["LegalizeOps"].after.tir_calls == records["LegalizeOps"].after.op_count
    assert records["LegalizeOps"].before.tir_calls == 0
    assert records["AnnotateTIROpPattern"].delta == {}
    fused = records["FuseTIR"]
    assert fused.after.op_count < fused.before.op_count  # fusion merges kernels...
    assert fused.after.bytes_written < fused.before.bytes_written  # ...and keeps intermediates out of memory
    assert records["sequential"].depth == 0


def test_fusion_keeps_the_multiply_adds(mlp_mod):
    """A fused PrimFunc's MACs are its products alone: after FuseTIR each Linear is one `fused_matmul_add` whose
    TIR FLOPs are 2 x MACs plus the bias adds, and the module's MACs stay FlopCounterMode's half at every pass."""
    model, inputs = _mlp()
    with FlopCounterMode(display=False) as counter:
        model(*inputs)
    macs = 4 * (64 * 256 + 256 * 32)  # batch x (in x out) per Linear = 98,304
    assert counter.get_total_flops() == 2 * macs
    recorder = CostRecorder()
    steps = [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    with tvm.transform.PassContext(instruments=[recorder]):
        fused = tvm.transform.Sequential(steps)(mlp_mod)
    for r in recorder.records:
        assert r.after.macs == macs, r.name
    assert "macs" not in {r.name: r for r in recorder.records}["FuseTIR"].delta
    ops = [o for o in analyze_module(fused).ops if o.callee and "matmul" in o.callee]
    assert sorted(o.macs for o in ops) == [4 * 256 * 32, 4 * 64 * 256]
    # TVM's estimate counts the fused epilogue too: 2 x MACs + batch x out bias adds per Linear, and the first
    # Linear's ReLU (one max per element) fused into it
    assert sorted(o.flops for o in ops) == [2 * 4 * 256 * 32 + 4 * 32, 2 * 4 * 64 * 256 + 2 * 4 * 256]


def test_fused_convolution_keeps_its_multiply_adds():
    """Conv2d + bias + ReLU + global mean, fused by TVM: MACs stay FlopCounterMode's half after every pass (the
    mean's sum-reduction is no multiply-add)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1)).eval()
    x = torch.randn(2, 3, 10, 10)
    with FlopCounterMode(display=False) as counter:
        model(x)
    macs = 2 * 8 * 10 * 10 * 3 * 3 * 3  # batch x C_out x H x W x C_in x k x k = 43,200
    assert counter.get_total_flops() == 2 * macs
    steps = [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    recorder = CostRecorder()
    with tvm.transform.PassContext(instruments=[recorder]):
        tvm.transform.Sequential(steps)(analyzer.load(model, example_inputs=(x,)).mod)
    assert [r.after.macs for r in recorder.records] == [macs] * len(recorder.records)


def test_recorder_records_errors_without_breaking_the_pipeline():
    recorder = CostRecorder()
    with tvm.transform.PassContext(instruments=[recorder]):
        out = tvm.transform.Sequential([relax.transform.LegalizeOps()])(Dynamic)
    assert structural_equal(out, relax.transform.LegalizeOps()(Dynamic))
    legalize = next(r for r in recorder.records if r.name == "LegalizeOps")
    assert "DynamicShapeError" in legalize.before.error and legalize.delta == {}
    assert json.dumps(recorder.to_json())  # plain data


def test_recorder_only_named_passes(cnn_mod):
    recorder = CostRecorder(only=("LegalizeOps",))
    with tvm.transform.PassContext(instruments=[recorder]):
        tvm.transform.Sequential([relax.transform.FoldConstant(), relax.transform.LegalizeOps()])(cnn_mod)
    assert [r.name for r in recorder.records] == ["LegalizeOps"]


def test_annotating_again_replaces_every_key(mlp_mod):
    once = AnnotateCosts(device="h100-80gb")(mlp_mod)
    again = AnnotateCosts(predict=False)(once)
    assert not any(
        k.startswith("preflight.") and k.split(".")[1] in ("latency_ms", "memory_mb", "energy_j", "device")
        for k in function_attrs(again)
    )
    assert "prediction" not in read_annotation(again) and "latency_ms" not in module_attr(again, "preflight")
    assert structural_equal(again, AnnotateCosts(predict=False)(mlp_mod))
