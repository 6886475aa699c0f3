"""Re-batching an ONNX file whose batch is fixed: `--batch N` (or an `--input` whose dimension 0 differs) rewrites
dimension 0 of the inputs and re-runs ONNX shape inference, unless a constant shape in the graph hard-codes the
file's batch; then the error names the node."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from analyzer import analyze
from analyzer.errors import UsageError


class _CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x)).mean(dim=(2, 3))  # [B, 8]
        return self.fc(x)


# per sample: conv 8 out * 3 in * 3*3 window * 16*16 positions = 55,296 MACs; linear 8 * 10 = 80
CNN_MACS_PER_SAMPLE = 8 * 3 * 9 * 16 * 16 + 8 * 10


@pytest.fixture(scope="module")
def fixed_cnn(tmp_path_factory):
    path = tmp_path_factory.mktemp("rebatch") / "cnn.onnx"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_CNN().eval(), (torch.randn(1, 3, 16, 16),), str(path), input_names=["x"], dynamo=False)
    dims = [d.dim_value for d in onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 16, 16]  # the file fixes batch 1
    return path


def test_fixed_batch_cnn_rebatches(fixed_cnn):
    one = analyze(str(fixed_cnn))
    eight = analyze(str(fixed_cnn), batch=8)
    assert one.totals.macs == CNN_MACS_PER_SAMPLE
    assert eight.totals.macs == 8 * CNN_MACS_PER_SAMPLE == 443_008
    assert eight.inputs[0]["shape"] == [8, 3, 16, 16]
    assert eight.totals.params == one.totals.params
    assert any("re-batched from 1 to 8" in w for w in eight.warnings)
    assert not any("re-batched" in w for w in one.warnings)
    # an --input whose dimension 0 differs from the file's is the same request
    via_input = analyze(str(fixed_cnn), inputs=["x:8x3x16x16"])
    assert via_input.totals.macs == eight.totals.macs


def test_fixed_batch_file_with_large_weights_rebatches(tmp_path):
    """Weights of 64 KiB or more are kept shape-only (never read); re-batching reads only the shape operands."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.Flatten(), torch.nn.Linear(16 * 30 * 30, 10))
    path = tmp_path / "seq.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.randn(1, 3, 32, 32),), str(path), input_names=["x"], dynamo=False)
    # conv 16 x 3 x 3 x 3 x 30 x 30 = 388,800 MACs; linear 14,400 x 10 = 144,000 (its weight: 562.5 KiB)
    per_sample = 16 * 27 * 30 * 30 + 14_400 * 10
    assert analyze(str(path)).totals.macs == per_sample == 532_800
    eight = analyze(str(path), batch=8)
    assert eight.totals.macs == 8 * per_sample
    assert eight.totals.params == 16 * 27 + 16 + 14_400 * 10 + 10


def _graph_model(nodes, inits, x_shape, y_shape, path):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return str(path)


def _reshape_then_matmul(tmp_path, target):
    """x [1, 4, 6] -> Reshape(target) -> MatMul with W [24, 5]: 24 * 5 = 120 MACs per sample."""
    w = numpy_helper.from_array(np.ones((24, 5), np.float32), "w")
    shape = numpy_helper.from_array(np.array(target, np.int64), "shape")
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["flat"], name="flatten_it"),
        helper.make_node("MatMul", ["flat", "w"], ["y"], name="head"),
    ]
    return _graph_model(nodes, [w, shape], [1, 4, 6], [1, 5], tmp_path / "m.onnx")


def test_reshape_to_minus_one_rows_rebatches(tmp_path):
    path = _reshape_then_matmul(tmp_path, [-1, 24])
    rep = analyze(path, batch=8)
    assert rep.totals.macs == 8 * 24 * 5  # 960
    assert rep.inputs[0]["shape"] == [8, 4, 6]


def test_reshape_with_zero_copy_dim_rebatches(tmp_path):
    path = _reshape_then_matmul(tmp_path, [0, 24])  # 0: copy the input's dimension
    assert analyze(path, batch=3).totals.macs == 3 * 24 * 5


def test_reshape_to_the_old_batch_is_refused_naming_the_node(tmp_path):
    path = _reshape_then_matmul(tmp_path, [1, -1])
    with pytest.raises(UsageError) as err:
        analyze(path, batch=8)
    msg = str(err.value)
    assert "'flatten_it'" in msg and "Reshape to [1, -1]" in msg and "fixed to 1" in msg and "--batch 8" in msg
    assert analyze(path).totals.macs == 120  # batch 1 still analyses


def test_expand_from_a_constant_node_is_refused(tmp_path):
    """The pinning shape may come from a Constant node instead of an initializer."""
    nodes = [
        helper.make_node(
            "Constant", [], ["shape"], value=numpy_helper.from_array(np.array([2, 4], np.int64)), name="c"
        ),
        helper.make_node("Expand", ["x", "shape"], ["y"], name="widen"),
    ]
    path = _graph_model(nodes, [], [2, 1], [2, 4], tmp_path / "e.onnx")
    with pytest.raises(UsageError, match=r"'widen' \(Expand to \[2, 4\]\)"):
        analyze(path, batch=8)


def test_constant_of_shape_with_the_batch_is_refused(tmp_path):
    """A ConstantOfShape [2, 4] concatenated with the input along axis 1 would not follow a new batch."""
    shape = numpy_helper.from_array(np.array([2, 4], np.int64), "shape")
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["pad"], name="make_pad"),
        helper.make_node("Concat", ["x", "pad"], ["y"], axis=1, name="join"),
    ]
    path = _graph_model(nodes, [shape], [2, 3], [2, 7], tmp_path / "c.onnx")
    with pytest.raises(UsageError, match="'make_pad' \\(ConstantOfShape to \\[2, 4\\]\\)"):
        analyze(path, batch=4)


def test_tile_of_a_constant_to_the_batch_is_refused(tmp_path):
    """A class token [1, 3] tiled to the file's batch of 2 and concatenated with the input: Tile names the pin."""
    token = numpy_helper.from_array(np.ones((1, 3), np.float32), "token")
    reps = numpy_helper.from_array(np.array([2, 1], np.int64), "reps")
    nodes = [
        helper.make_node("Tile", ["token", "reps"], ["tokens"], name="repeat_token"),
        helper.make_node("Concat", ["tokens", "x"], ["y"], axis=1),
    ]
    path = _graph_model(nodes, [token, reps], [2, 3], [2, 6], tmp_path / "t.onnx")
    with pytest.raises(UsageError, match=r"'repeat_token' \(Tile to \[2, 1\]\)"):
        analyze(path, batch=4)


def test_a_broadcasting_expand_or_tile_of_the_input_follows_the_new_batch(tmp_path):
    """Expand to [1, 4] broadcasts a dimension of 1 and Tile [1, 2] repeats the batch once: neither pins batch 1."""
    shape = numpy_helper.from_array(np.array([1, 4], np.int64), "shape")
    reps = numpy_helper.from_array(np.array([1, 2], np.int64), "reps")
    w = numpy_helper.from_array(np.ones((8, 3), np.float32), "w")
    nodes = [
        helper.make_node("Expand", ["x", "shape"], ["wide"], name="widen"),
        helper.make_node("Tile", ["wide", "reps"], ["twice"], name="twice"),
        helper.make_node("MatMul", ["twice", "w"], ["y"]),
    ]
    path = _graph_model(nodes, [shape, reps, w], [1, 1], [1, 3], tmp_path / "b.onnx")
    rep = analyze(path, batch=5)
    assert rep.totals.macs == 5 * 8 * 3  # [5, 8] @ [8, 3]


def test_a_weight_reshaped_with_a_leading_one_does_not_pin(tmp_path):
    """Only shapes applied to data derived from the inputs pin the batch: a weight reshaped to [1, 5] does not."""
    b = numpy_helper.from_array(np.ones((5,), np.float32), "b")
    w = numpy_helper.from_array(np.ones((6, 5), np.float32), "w")
    shape = numpy_helper.from_array(np.array([1, 5], np.int64), "shape")
    nodes = [
        helper.make_node("Reshape", ["b", "shape"], ["b2"], name="bias_row"),
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b2"], ["y"]),
    ]
    path = _graph_model(nodes, [b, w, shape], [1, 6], [1, 5], tmp_path / "w.onnx")
    assert analyze(path, batch=4).totals.macs == 4 * 6 * 5


def test_inference_catches_what_no_pin_shows(tmp_path):
    """A batch hidden in a constant that is no shape (a [1, 4] tensor concatenated along axis 1): the re-batched
    graph is inconsistent, and the error says so rather than analysing a wrong graph."""
    pad = numpy_helper.from_array(np.zeros((1, 4), np.float32), "pad")
    nodes = [helper.make_node("Concat", ["x", "pad"], ["y"], axis=1, name="join")]
    path = _graph_model(nodes, [pad], [1, 3], [1, 7], tmp_path / "i.onnx")
    with pytest.raises(UsageError) as err:
        analyze(path, batch=4)
    msg = str(err.value)
    assert "fixed to 1" in msg and "shape inference fails" in msg and "join" in msg
