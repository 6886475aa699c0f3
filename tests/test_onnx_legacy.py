"""Legacy ONNX exports (`torch.onnx.export(..., dynamo=False)`, issue 25 item 4): the shape, index and mask arithmetic
on constants they write out is folded before TVM's import (`onnx_frontend.fold_constant_indices`).

Patterns, each as a tiny hand-made graph: RoFormer's (and Marian's, Pegasus's, mBART's) attention mask expanded to a
shape computed by `Where(Equal(shape, -1), ConstantOfShape(...), shape)` (TVM: "broadcast_to ... target shape has
ndim 0"); SwinV2's window padding, pads computed by `Mod`/`Sub` on constant sizes, then a `Reshape` with -1 (TVM:
"Reshape expects the input tensor to have known shape"). Oracle: onnxruntime runs the file before and after folding.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from analyzer.api import analyze  # noqa: E402
from analyzer.frontends.onnx_frontend import FOLD_ELEMENTS, fold_constant_indices  # noqa: E402


def _const(name, values, dtype=np.int64):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(values, dtype=dtype), name))


def _model(nodes, x_shape, y_shape, opset=17):
    graph = helper.make_graph(
        nodes,
        "legacy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def roformer_mask():
    """y = Where(mask, x, -10000) with the (2, 1, 16, 16) mask as the legacy export builds it from constants: a
    scalar True (ConstantOfShape of an empty shape) And (positions >= 0), expanded to Where(Equal(c, -1), ones, c)
    for c = [2, -1, 16, 16]."""
    nodes = [
        _const("empty", [], np.int64),
        helper.make_node("ConstantOfShape", ["empty"], ["true"], value=numpy_helper.from_array(np.array([True]))),
        _const("pos", np.arange(16).reshape(1, 1, 16, 1)),
        _const("zero", 0),
        helper.make_node("GreaterOrEqual", ["pos", "zero"], ["ge"]),
        helper.make_node("And", ["true", "ge"], ["mask0"]),
        _const("c", [2, -1, 16, 16]),
        _const("four", [4]),
        helper.make_node("ConstantOfShape", ["four"], ["ones"], value=numpy_helper.from_array(np.array([1]))),
        _const("m1", -1),
        helper.make_node("Mul", ["ones", "m1"], ["neg"]),
        helper.make_node("Equal", ["c", "neg"], ["eq"]),
        helper.make_node("Where", ["eq", "ones", "c"], ["shape"]),
        helper.make_node("Expand", ["mask0", "shape"], ["mask"]),
        _const("low", -10000.0, np.float32),
        helper.make_node("Where", ["mask", "x", "low"], ["y"]),
    ]
    return _model(nodes, [2, 1, 16, 16], [2, 1, 16, 16])


def swin_padding():
    """x (1, 6, 6, 4) padded to whole 4 x 4 windows, pads computed on the constant sizes (pad = (4 - 6 % 4) % 4 = 2
    at the end of H and W), then reshaped into windows: (1, 2, 4, 2, 4, 4) with a -1."""
    nodes = [
        _const("hw", [6, 6]),
        _const("win", [4, 4]),
        helper.make_node("Mod", ["hw", "win"], ["rem"]),
        helper.make_node("Sub", ["win", "rem"], ["gap"]),
        helper.make_node("Mod", ["gap", "win"], ["pad_hw"]),
        _const("zeros2", [0, 0]),
        _const("zero1", [0]),
        helper.make_node("Concat", ["zero1", "zeros2", "zero1", "zero1", "pad_hw", "zero1"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["padded"]),
        _const("windows", [1, 2, 4, -1, 4, 4]),
        helper.make_node("Reshape", ["padded", "windows"], ["y"]),
    ]
    return _model(nodes, [1, 6, 6, 4], [1, 2, 4, 2, 4, 4])


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize(
    ("build", "x_shape", "n_folded"),
    [
        # ConstantOfShape x 2, GreaterOrEqual, And, Mul, Equal, Where, Expand: the float Where on x stays
        (roformer_mask, (2, 1, 16, 16), 8),
        # Mod, Sub, Mod, Concat: the Pad and Reshape of x stay
        (swin_padding, (1, 6, 6, 4), 4),
    ],
)
def test_folding_keeps_the_values_onnxruntime_computes(build, x_shape, n_folded):
    model = build()
    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    before = _run(model, x)
    assert fold_constant_indices(model) == n_folded
    onnx.checker.check_model(model)
    np.testing.assert_array_equal(_run(model, x), before)


def test_legacy_mask_pattern_analyses(tmp_path):
    path = tmp_path / "mask.onnx"
    onnx.save(roformer_mask(), path)
    report = analyze(str(path))
    (where,) = [c for c in report.analysis.ops if not c.folded]
    assert where.op == "relax.where" and where.output.shape == (2, 1, 16, 16)


def test_legacy_window_padding_analyses(tmp_path):
    path = tmp_path / "pad.onnx"
    onnx.save(swin_padding(), path)
    report = analyze(str(path))
    ops = [c for c in report.analysis.ops if not c.folded]
    assert len(ops) == 2 and ops[1].op == "relax.reshape"  # the pad: TVM's converter emits a call_tir
    # the padded (1, 8, 8, 4) float32 tensor: 1,024 B written by the pad
    assert ops[0].output.shape == (1, 8, 8, 4) and ops[0].bytes_written == 8 * 8 * 4 * 4
    assert ops[1].output.shape == (1, 2, 4, 2, 4, 4)


def test_float_arithmetic_and_large_values_are_not_folded():
    """Folding is for integer and boolean values of at most FOLD_ELEMENTS elements: float arithmetic on constants
    stays an op (its FLOPs are counted where the file has them); a ConstantOfShape past the cap, or an Expand to
    10**10 elements, is never evaluated (the output shape is inferred first)."""
    nodes = [
        _const("a", [1.0, 2.0], np.float32),
        helper.make_node("Add", ["a", "a"], ["b"]),
        _const("big", [FOLD_ELEMENTS + 1]),
        helper.make_node("ConstantOfShape", ["big"], ["ones"], value=numpy_helper.from_array(np.array([1]))),
        _const("one", [1]),
        _const("huge", [100_000, 100_000]),
        helper.make_node("Expand", ["one", "huge"], ["wide"]),
        helper.make_node("Add", ["x", "b"], ["y"]),
    ]
    model = _model(nodes, [2], [2])
    assert fold_constant_indices(model) == 0
    assert [n.op_type for n in model.graph.node].count("Constant") == 4
