"""ONNX params of weights the file does not store as initializers: float `Constant` nodes and weights the graph
computes from integer constants (a ConstantOfShape feeding a MatMul). Hand-built graphs, hand counts."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from analyzer import analyze


def _save(nodes, inits, tmp_path, x_shape=(2, 6), y_shape=(2, 5)) -> str:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return str(path)


def _int64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def test_weights_in_constant_nodes_are_counted(tmp_path):
    w = numpy_helper.from_array(np.ones((6, 5), np.float32))
    b = numpy_helper.from_array(np.ones((5,), np.float32))
    nodes = [
        helper.make_node("Constant", [], ["w"], value=w),
        helper.make_node("Constant", [], ["b"], value=b),
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["y"]),
    ]
    rep = analyze(_save(nodes, [], tmp_path))
    assert rep.totals.params == 6 * 5 + 5  # 35
    assert rep.totals.param_bytes == 35 * 4
    assert rep.totals.macs == 2 * 6 * 5


def test_weights_made_by_constant_of_shape_are_counted(tmp_path):
    """W = ConstantOfShape([6, 5], 0.5) feeding a MatMul: 30 params, though the file stores no float tensor."""
    nodes = [
        helper.make_node(
            "ConstantOfShape", ["wshape"], ["w"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])
        ),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    rep = analyze(_save(nodes, [_int64("wshape", [6, 5])], tmp_path))
    assert rep.totals.params == 30
    assert rep.totals.param_bytes == 120
    assert not any("params" in w for w in rep.warnings)


def test_a_made_tensor_cast_to_float16_is_counted_once_at_its_dtype(tmp_path):
    """ConstantOfShape (float32 [6, 5]) -> Cast to float16 -> MatMul: the weight the op reads is the float16 one."""
    nodes = [
        helper.make_node("ConstantOfShape", ["wshape"], ["w32"]),
        helper.make_node("Cast", ["w32"], ["w"], to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
        helper.make_node("MatMul", ["x16", "w"], ["m"]),
        helper.make_node("Cast", ["m"], ["y"], to=TensorProto.FLOAT),
    ]
    rep = analyze(_save(nodes, [_int64("wshape", [6, 5])], tmp_path))
    assert rep.totals.params == 30 and rep.totals.param_bytes == 60  # 30 float16 elements, 2 bytes each


def test_a_transformed_stored_weight_is_not_counted_twice(tmp_path):
    """Transpose(W) of a stored W [5, 6]: the weight is W's 30 elements, not 60."""
    w = numpy_helper.from_array(np.ones((5, 6), np.float32), "w")
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "wt"], ["y"]),
    ]
    assert analyze(_save(nodes, [w], tmp_path)).totals.params == 30


def test_shapes_from_the_input_are_activations_not_weights(tmp_path):
    """ConstantOfShape(Shape(x)) is computed from the input: an activation, not a weight (params 0)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node(
            "ConstantOfShape", ["s"], ["ones"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1])
        ),
        helper.make_node("Add", ["x", "ones"], ["y"]),
    ]
    rep = analyze(_save(nodes, [], tmp_path, y_shape=(2, 6)))
    assert rep.totals.params == 0


def _computed_weight(shape_input: str) -> list:
    return [
        helper.make_node("Abs", [shape_input], ["wshape2"]),
        helper.make_node(
            "ConstantOfShape",
            ["wshape2"],
            ["w"],
            name="make_w",
            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5]),
        ),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]


def test_a_computed_weight_of_unknown_size_is_named_in_a_warning(tmp_path, monkeypatch):
    """The shape of W comes through an Abs, which ONNX shape inference does not evaluate. preflight's folding of
    integer arithmetic (`fold_constant_indices`) resolves it (next test); with the folding off, the case of a shape
    nothing before TVM evaluates: its size is unknown to preflight (TVM still imports it: 2 * 6 * 5 MACs), so params
    leave it out and a warning names its maker."""
    from analyzer.frontends import onnx_frontend

    monkeypatch.setattr(onnx_frontend, "fold_constant_indices", lambda model: 0)
    rep = analyze(_save(_computed_weight("wshape"), [_int64("wshape", [6, 5])], tmp_path))
    assert rep.totals.macs == 60 and rep.totals.params == 0
    assert any("params leave out" in w and "'make_w'" in w for w in rep.warnings)


def test_a_weight_shape_from_integer_arithmetic_is_folded(tmp_path):
    """The same W with its shape through an integer Abs: folded before the import (`fold_constant_indices`), so its
    size is known: 6 x 5 = 30 params."""
    rep = analyze(_save(_computed_weight("wshape"), [_int64("wshape", [6, 5])], tmp_path))
    assert rep.totals.macs == 60 and rep.totals.params == 30
    assert not any("params leave out" in w for w in rep.warnings)
