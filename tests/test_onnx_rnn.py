"""ONNX recurrent layers (LSTM, GRU, RNN): TVM's importer has none; preflight's converters (passes/tvm_ir.py) unroll
them per time step. Checked against hand counts and against the `.pt2` route of the same torch module.

Hand count: a layer of G gates (LSTM 4, GRU 3, RNN 1), hidden size H, input size I, over T steps and batch B costs,
per direction, B * T * G*H * (I + H) MACs: the input projection (I*G*H per row and step) and the recurrent GEMM
(H*G*H per row and step). A second layer of a bidirectional stack reads I = 2H features.
"""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from analyzer import analyze
from analyzer.errors import AnalysisError

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
