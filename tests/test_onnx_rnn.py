"""ONNX recurrent layers (LSTM, GRU, RNN): TVM's importer has none; preflight's converters (passes/tvm_ir.py) unroll
them per time step. Checked against hand counts and against the `.pt2` route of the same torch module.

Hand count: a layer of G gates (LSTM 4, GRU 3, RNN 1), hidden size H, input size I, over T steps and batch B costs,
per direction, B * T * G*H * (I + H) MACs: the input projection (I*G*H per row and step) and the recurrent GEMM
(H*G*H per row and step). A second layer of a bidirectional stack reads I = 2H features.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter

import jsonschema
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from analyzer import analyze
from analyzer.errors import AnalysisError
from analyzer.render import SCHEMA_FILE

T, B, IN, H = 8, 2, 16, 32  # steps, batch, input features, hidden size
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _hand_macs(kind: str, layers: int, bidirectional: bool, i: int = IN, h: int = H, t: int = T, b: int = B) -> int:
    dirs = 2 if bidirectional else 1
    g = GATES[kind] * h
    total = 0
    for layer in range(layers):
        features = i if layer == 0 else dirs * h
        total += dirs * b * t * g * (features + h)
    return total


def test_hand_counts():
    # the arithmetic, written out for two cases:
    # LSTM, 2 layers, bidirectional: layer 0: 2 dirs * 2 rows * 8 steps * 128 * (16 + 32) = 196,608;
    #                                 layer 1: 2 * 2 * 8 * 128 * (64 + 32) = 393,216; total 589,824
    assert _hand_macs("LSTM", 2, True) == 196_608 + 393_216
    # GRU, 1 layer, forward: 2 rows * 8 steps * 96 * (16 + 32) = 73,728
    assert _hand_macs("GRU", 1, False) == 73_728


def _export(module, x, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=17)


def _output_shapes(report) -> list[list[int]]:
    graph = report.analysis.graph
    return [list(graph.ops[op].output.shape) for op, _ in graph.outputs]


CASES = [
    ("LSTM", 1, False),
    ("LSTM", 2, True),
    ("GRU", 1, False),
    ("GRU", 2, True),
    ("RNN", 1, False),
    ("RNN", 2, True),
]


@pytest.mark.parametrize(("kind", "layers", "bidirectional"), CASES)
def test_torch_recurrent_layer_through_onnx(tmp_path, kind, layers, bidirectional):
    torch.manual_seed(0)
    module = getattr(nn, kind)(IN, H, num_layers=layers, bidirectional=bidirectional).eval()
    x = torch.randn(T, B, IN)
    _export(module, x, tmp_path / "m.onnx")
    pt2 = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(module, (x,)), pt2)

    via_onnx = analyze(str(tmp_path / "m.onnx"))
    via_pt2 = analyze(str(pt2))
    assert via_onnx.totals.unsupported == {}
    assert via_onnx.totals.macs == _hand_macs(kind, layers, bidirectional)
    assert abs(via_onnx.totals.macs / via_pt2.totals.macs - 1) <= 0.001
    assert abs(via_onnx.totals.flops / via_pt2.totals.flops - 1) <= 0.001
    # params: torch's own count (W_ih, W_hh, b_ih, b_hh of every layer and direction)
    assert via_onnx.totals.params == sum(p.numel() for p in module.parameters())

    # the exported graph's outputs: Y reshaped to [T, B, dirs*H], then h_n (and c_n) [layers*dirs, B, H]
    dirs = 2 if bidirectional else 1
    expected = [[T, B, dirs * H], [layers * dirs, B, H]] + ([[layers * dirs, B, H]] if kind == "LSTM" else [])
    assert _output_shapes(via_onnx) == expected

    # the kernel view finds the recurrence as the .pt2 route does: one GEMM per step and direction (the input
    # projection and the recurrent GEMMs) and one pointwise kernel per step for the gates
    kinds = {
        name: Counter(k.kind for k in rep.analysis.kernels) for name, rep in (("onnx", via_onnx), ("pt2", via_pt2))
    }
    for kernel_kind in ("gemm", "elementwise"):
        assert kinds["onnx"][kernel_kind] == kinds["pt2"][kernel_kind], kinds


# ---- hand-built ONNX nodes: attributes torch does not export ------------------------------------------------


def _rnn_model(kind: str, attrs: dict, *, i=IN, h=H, t=T, b=B, dirs=1, layout=0, bias=True, extra_inputs=()):
    """A one-node ONNX model of `kind` with random weights; X [T, B, IN] (layout 1: [B, T, IN])."""
    rng = np.random.default_rng(0)
    g = GATES[kind] * h
    inits = [
        numpy_helper.from_array(rng.standard_normal((dirs, g, i)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal((dirs, g, h)).astype(np.float32), "R"),
    ]
    names = ["X", "W", "R"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal((dirs, 2 * g)).astype(np.float32), "B"))
        names.append("B")
    for name, array in extra_inputs:
        while len(names) < {"sequence_lens": 4, "initial_h": 5, "initial_c": 6, "P": 7}[name]:
            names.append("")
        names.append(name)
        inits.append(numpy_helper.from_array(array, name))
    x_shape = [b, t, i] if layout else [t, b, i]
    y_shape = [b, t, dirs, h] if layout else [t, dirs, b, h]
    s_shape = [b, dirs, h] if layout else [dirs, b, h]
    outputs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    node = helper.make_node(kind, names, outputs, name=f"my_{kind.lower()}", hidden_size=h, **attrs)
    graph = helper.make_graph(
        [node],
        "rnn",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)]
        + [helper.make_tensor_value_info(o, TensorProto.FLOAT, s_shape) for o in outputs[1:]],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize(
    ("kind", "attrs", "dirs", "layout"),
    [
        ("LSTM", {"direction": "reverse"}, 1, 0),
        ("LSTM", {"direction": "bidirectional", "layout": 1}, 2, 1),
        ("GRU", {"linear_before_reset": 0}, 1, 0),  # r applied before the recurrent GEMM: two GEMMs per step
        ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}, 2, 0),
        ("RNN", {"activations": ["Relu"]}, 1, 0),
    ],
)
def test_hand_built_recurrent_nodes(tmp_path, kind, attrs, dirs, layout):
    path = tmp_path / "rnn.onnx"
    onnx.save(_rnn_model(kind, attrs, dirs=dirs, layout=layout), path)
    rep = analyze(str(path))
    g = GATES[kind] * H
    # B * T * G*H * (IN + H) per direction
    assert rep.totals.macs == dirs * B * T * g * (IN + H)
    # params: W [dirs, G*H, IN] + R [dirs, G*H, H] + B [dirs, 2*G*H]
    assert rep.totals.params == dirs * (g * IN + g * H + 2 * g)
    y = [B, T, dirs, H] if layout else [T, dirs, B, H]
    state = [B, dirs, H] if layout else [dirs, B, H]
    assert _output_shapes(rep) == [y, state] + ([state] if kind == "LSTM" else [])


def test_initial_state_and_full_sequence_lens(tmp_path):
    """A non-zero initial state is read (its step-0 GEMM is real work); sequence_lens equal to T are accepted."""
    rng = np.random.default_rng(1)
    extra = [
        ("sequence_lens", np.full((B,), T, dtype=np.int32)),
        ("initial_h", rng.standard_normal((1, B, H)).astype(np.float32)),
        ("initial_c", rng.standard_normal((1, B, H)).astype(np.float32)),
    ]
    path = tmp_path / "rnn.onnx"
    onnx.save(_rnn_model("LSTM", {}, extra_inputs=extra), path)
    rep = analyze(str(path))
    # the first step's recurrent GEMM reads a constant state: compilers fold it (all operands constant), so the
    # total is one step's H*4H per row less: 2 * 8 * 128 * 48 - 2 * 128 * 32 = 98,304 - 8,192 = 90,112
    assert rep.totals.macs == B * T * 4 * H * (IN + H) - B * 4 * H * H


def test_peepholes_add_no_macs(tmp_path):
    """Peepholes are elementwise (P_i*C, P_f*C, P_o*C): the MACs stay B * T * 4H * (I + H); params add P [1, 3H]."""
    path = tmp_path / "rnn.onnx"
    onnx.save(_rnn_model("LSTM", {}, extra_inputs=(("P", np.ones((1, 3 * H), np.float32)),)), path)
    rep = analyze(str(path))
    assert rep.totals.macs == B * T * 4 * H * (IN + H)  # 2 * 8 * 128 * 48 = 98,304
    assert rep.totals.params == 4 * H * IN + 4 * H * H + 8 * H + 3 * H


@pytest.mark.parametrize(
    ("kind", "attrs", "extra", "words"),
    [
        ("LSTM", {"clip": 3.0}, (), "'clip'"),
        ("LSTM", {"input_forget": 1}, (), "input_forget"),
        ("GRU", {}, (("sequence_lens", np.array([T, 3], np.int32)),), "sequence_lens"),
        ("RNN", {"activations": ["Softsign"]}, (), "activations"),
    ],
)
def test_unsupported_features_are_named(tmp_path, kind, attrs, extra, words):
    path = tmp_path / "rnn.onnx"
    onnx.save(_rnn_model(kind, attrs, extra_inputs=extra), path)
    with pytest.raises(AnalysisError) as err:
        analyze(str(path))
    text = str(err.value)
    assert f"my_{kind.lower()}" in text and words in text and "not supported" in text


PEEPHOLES = (("P", np.random.default_rng(3).standard_normal((2, 3 * 5)).astype(np.float32)),)  # [dirs, 3H], H 5


@pytest.mark.parametrize(
    ("kind", "attrs", "dirs", "extra"),
    [
        ("LSTM", {"direction": "bidirectional"}, 2, ()),
        ("LSTM", {"direction": "reverse"}, 1, ()),
        ("LSTM", {"direction": "bidirectional"}, 2, PEEPHOLES),
        ("GRU", {"linear_before_reset": 0}, 1, ()),
        ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}, 2, ()),
        ("RNN", {}, 1, ()),
    ],
)
def test_outputs_match_onnxruntime(tmp_path, kind, attrs, dirs, extra):
    """The conversion computes what the ONNX spec says: the Relax module, built for the CPU, against onnxruntime;
    layout 1 (batch first, which onnxruntime's CPU kernels refuse) against layout 0 transposed."""
    ort = pytest.importorskip("onnxruntime")
    import tvm
    from tvm import relax

    from analyzer.frontends.onnx_frontend import load_onnx

    small = {"t": 3, "i": 4, "h": 5, "b": 2, "dirs": dirs}
    x = np.random.default_rng(2).standard_normal((3, 2, 4)).astype(np.float32)  # [T, B, IN]
    outs = {}
    for layout in (0, 1):
        with_layout = {**attrs, "layout": layout} if layout else attrs
        model = _rnn_model(kind, with_layout, layout=layout, extra_inputs=extra, **small)
        for t in model.graph.initializer[:2]:  # smaller weights keep the gates off saturation
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * 0.3, t.name))
        path = tmp_path / f"rnn{layout}.onnx"
        onnx.save(model, path)
        vm = relax.VirtualMachine(tvm.compile(load_onnx(path, {}, None).mod, target="llvm"), tvm.cpu())
        feed = x.transpose(1, 0, 2).copy() if layout else x
        outs[layout] = [o.numpy() for o in vm["main"](tvm.runtime.tensor(feed))]
        if not layout:
            reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    for ours, ref in zip(outs[0], reference, strict=True):
        np.testing.assert_allclose(ours, ref, atol=1e-5)
    # layout 1: Y [B, T, dirs, H] from [T, dirs, B, H]; states [B, dirs, H] from [dirs, B, H]
    np.testing.assert_allclose(outs[1][0], reference[0].transpose(2, 0, 1, 3), atol=1e-5)
    for ours, ref in zip(outs[1][1:], reference[1:], strict=True):
        np.testing.assert_allclose(ours, ref.transpose(1, 0, 2), atol=1e-5)


# ---- long recurrences: analysed at 12, 13 and 14 steps, extrapolated exactly (passes.analysis.extrapolate_steps) --

LONG = 40  # steps: unrolled (the default cap) and extrapolated (the cap lowered to 30) must agree on everything


def _both_ways(tmp_path, monkeypatch, model, name="rnn.onnx"):
    """(unrolled, extrapolated) predict reports on the H100 of `model`, whose recurrences run LONG steps."""
    import predictor.predict as predict_module
    from analyzer import predict
    from passes import tvm_ir

    path = tmp_path / name
    onnx.save(model, path)
    # extrapolated recurrences keep the fitted reserve factor (their trace is a 14-step sample's, `allocator_reserve`):
    # the unrolled analysis is predicted under the same memory model, so every figure must agree
    monkeypatch.setattr(predict_module, "allocator_reserve", lambda analysis, warnings=None, rooms=(): None)
    unrolled = predict(str(path), device="h100-80gb")
    assert unrolled.analysis.steps is None
    monkeypatch.setattr(tvm_ir, "MAX_RECURRENT_STEPS", 30)  # 40 x dirs > 30 >= 14 x dirs: sampled at 12, 13, 14
    closed = predict(str(path), device="h100-80gb")
    assert closed.analysis.steps is not None and closed.analysis.steps.sampled == (12, 13, 14)
    return unrolled, closed


def _assert_same(unrolled, closed):
    """Every total, static feature, the memory, the launched kernels (each one's size and launch count) and the
    predicted latency, energy and memory of the closed form equal the unrolled analysis's."""
    from passes.analysis import _kernel_key

    u, c = unrolled.analysis, closed.analysis
    assert c.totals == u.totals
    assert c.static_features == u.static_features
    assert (c.memory.peak_bytes, c.memory.weight_bytes, c.memory.input_bytes) == (
        u.memory.peak_bytes,
        u.memory.weight_bytes,
        u.memory.input_bytes,
    )
    launched = Counter()
    for run in c.launched_kernels:
        launched[_kernel_key(run.kernel)] += run.count
    assert launched == Counter(_kernel_key(k) for k in u.kernels)
    assert c.steps.kernels == len(u.kernels)
    assert closed.inputs == unrolled.inputs  # the sequence axis reported at LONG, not at a sample
    p, q = unrolled.prediction, closed.prediction
    assert p.predictor == q.predictor and p.latency_ms > 0
    _assert_close(q.to_json(), p.to_json())  # latency, energy, memory, intervals, the MIG slice, the basis


def _assert_close(a, b, where="prediction"):
    """Equal JSON, floats to 1e-9 relative (c launches cost as c x t against t added c times)."""
    if isinstance(b, dict):
        assert sorted(a) == sorted(b), where
        for k in b:
            _assert_close(a[k], b[k], f"{where}.{k}")
    elif isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_close(x, y, f"{where}[{i}]")
    elif isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), where
    else:
        assert a == b, where


@pytest.mark.parametrize(
    ("kind", "attrs", "dirs", "layout"),
    [
        ("LSTM", {"direction": "bidirectional"}, 2, 0),
        ("LSTM", {"layout": 1}, 1, 1),
        ("GRU", {"linear_before_reset": 0}, 1, 0),
        ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}, 2, 0),
        ("RNN", {"direction": "reverse"}, 1, 0),
    ],
)
def test_long_recurrence_extrapolated_equals_unrolled(tmp_path, monkeypatch, kind, attrs, dirs, layout):
    unrolled, closed = _both_ways(tmp_path, monkeypatch, _rnn_model(kind, attrs, dirs=dirs, layout=layout, t=LONG))
    _assert_same(unrolled, closed)
    g = GATES[kind] * H
    # B * T * G*H * (IN + H) per direction, e.g. LSTM bidirectional: 2 * 2 * 40 * 128 * 48 = 983,040
    assert closed.totals.macs == dirs * B * LONG * g * (IN + H)
    doc = closed.to_json()
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))
    assert doc["recurrence"]["steps"] == LONG and doc["recurrence"]["sampled"] == [12, 13, 14]
    assert doc["recurrence"]["nodes"] == [f"{kind} 'my_{kind.lower()}'"]
    assert doc["inputs"][0]["shape"] == ([B, LONG, IN] if layout else [LONG, B, IN])
    assert any("recurrence of 40 steps costed from 12/13 steps (checked at 14)" in w for w in closed.warnings)


def test_long_recurrence_with_states_and_sequence_lens(tmp_path, monkeypatch):
    """Initial states (the first step's GEMM on a constant state is folded) and sequence_lens of the whole length
    (rewritten with the sequence at each sample) extrapolate exactly too."""
    rng = np.random.default_rng(1)
    extra = [
        ("sequence_lens", np.full((B,), LONG, dtype=np.int32)),
        ("initial_h", rng.standard_normal((1, B, H)).astype(np.float32)),
        ("initial_c", rng.standard_normal((1, B, H)).astype(np.float32)),
    ]
    unrolled, closed = _both_ways(tmp_path, monkeypatch, _rnn_model("LSTM", {}, t=LONG, extra_inputs=extra))
    _assert_same(unrolled, closed)
    # 2 * 40 * 128 * 48 - 2 * 128 * 32 = 491,520 - 8,192 = 483,328 (the folded step-0 recurrent GEMM)
    assert closed.totals.macs == B * LONG * 4 * H * (IN + H) - B * 4 * H * H == 483_328


def test_long_torch_stack_extrapolated_equals_unrolled(tmp_path, monkeypatch):
    """A torch export (2 bidirectional LSTM layers, Y reshaped between them: the exporter writes Transpose and
    Reshape nodes with -1 and 0, no sequence length) analysed both ways."""
    torch.manual_seed(0)
    module = nn.LSTM(IN, H, num_layers=2, bidirectional=True).eval()
    _export(module, torch.randn(LONG, B, IN), tmp_path / "m.onnx")
    unrolled, closed = _both_ways(tmp_path, monkeypatch, onnx.load(str(tmp_path / "m.onnx")), "m2.onnx")
    _assert_same(unrolled, closed)
    # layer 0: 2 dirs * 2 rows * 40 steps * 128 * (16 + 32) = 983,040; layer 1: 2 * 2 * 40 * 128 * (64 + 32)
    # = 1,966,080
    assert closed.totals.macs == _hand_macs("LSTM", 2, True, t=LONG) == 983_040 + 1_966_080


def test_long_recurrence_refused_when_the_graph_holds_its_length(tmp_path, monkeypatch):
    """A Reshape whose shape constant holds T (x B) would contradict a shorter sequence: refused, as before."""
    from passes import tvm_ir

    model = _rnn_model("RNN", {}, t=LONG)
    model.graph.initializer.append(numpy_helper.from_array(np.array([LONG * B, H], np.int64), "shape"))
    model.graph.node.append(helper.make_node("Reshape", ["Y", "shape"], ["Z"]))
    model.graph.output.append(helper.make_tensor_value_info("Z", TensorProto.FLOAT, [LONG * B, H]))
    path = tmp_path / "rnn.onnx"
    onnx.save(model, path)
    assert analyze(str(path)).totals.macs == B * LONG * H * (IN + H)  # unrolled: 2 * 40 * 32 * 48 = 122,880
    monkeypatch.setattr(tvm_ir, "MAX_RECURRENT_STEPS", 30)
    with pytest.raises(AnalysisError) as err:
        analyze(str(path))
    assert "a sequence of 40 steps is more than preflight unrolls (30 per node); constant 'shape' holds" in str(
        err.value
    )


def test_long_recurrence_refused_when_a_fixed_tensor_sets_the_sampled_peak(tmp_path, monkeypatch):
    """Z [1024, 1024] and Relu(Z) (8 MiB together) are live before the LSTM and set the peak at 12 to 14 steps
    (the sequence's tensors are then a few KiB); at 40,000 steps the input projection alone, [40,000, 2, 128]
    float32 = 40,960,000 bytes, is larger than the affine extension of that peak (8 MiB + X's 40,000 x 2 x 16 x 4
    bytes): refused rather than reported low."""
    from passes import tvm_ir

    model = _rnn_model("LSTM", {}, t=40_000)
    model.graph.node[0].input[0] = "X2"
    model.graph.input.append(helper.make_tensor_value_info("Z", TensorProto.FLOAT, [1024, 1024]))
    model.graph.node.insert(0, helper.make_node("Relu", ["Z"], ["ZR"]))
    model.graph.node.insert(1, helper.make_node("ReduceSum", ["ZR"], ["S"], keepdims=0))
    model.graph.node.insert(2, helper.make_node("Add", ["X", "S"], ["X2"]))
    path = tmp_path / "rnn.onnx"
    onnx.save(model, path)
    monkeypatch.setattr(tvm_ir, "MAX_RECURRENT_STEPS", 30)
    with pytest.raises(AnalysisError) as err:
        analyze(str(path))
    assert "a recurrence of 40,000 steps could not be extrapolated from 12, 13, 14 steps" in str(err.value)
    assert "another tensor sets the peak there" in str(err.value)
