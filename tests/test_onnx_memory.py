"""The ONNX route reads weights' shapes, never their data (issue 12), and checks external-data references first.

Large floating-point initializers (>= SHAPE_ONLY_MIN_BYTES) reach TVM's importer as uninitialised tensors;
counts must be those of the full data (hand counts below), references to external data must lie inside their
file, and a file far larger than memory must analyse in a small, fixed amount of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from analyzer.api import analyze
from analyzer.errors import UnreadableModelError
from analyzer.frontends.onnx_frontend import SHAPE_ONLY_MIN_BYTES

REPO = Path(__file__).resolve().parents[1]


def _external(t: TensorProto, location: str, offset: int, length: int | str) -> TensorProto:
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        t.external_data.add(key=k, value=v)
    return t


def tied_model(folder: Path, *, external: bool) -> Path:
    """x[1,8,256] -> MatMul W[256,512] -> Relu -> Reshape(shape initializer) -> MatMul Transpose(E[256,512]) ->
    y[1,8,256] (E: a tied embedding as the output projection). W and E are 512 KiB each (shape-only); with
    `external`, W lives in w.bin and the Reshape's int64 shape (24 bytes) in shape.bin."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((256, 512)).astype(np.float32), "W")
    e = numpy_helper.from_array(rng.standard_normal((256, 512)).astype(np.float32), "E")
    shape = numpy_helper.from_array(np.array([1, 8, 512], np.int64), "shape")
    if external:
        (folder / "w.bin").write_bytes(w.raw_data)
        (folder / "shape.bin").write_bytes(shape.raw_data)
        w.ClearField("raw_data")
        shape.ClearField("raw_data")
        _external(w, "w.bin", 0, 256 * 512 * 4)
        _external(shape, "shape.bin", 0, 24)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["r2"]),
        helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
        helper.make_node("MatMul", ["r2", "Et"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tied",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 256])],
        [w, e, shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "tied.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("external", [False, True])
def test_shape_only_weights_count_as_their_data(tmp_path, external):
    assert 256 * 512 * 4 >= SHAPE_ONLY_MIN_BYTES  # W and E take the shape-only path
    t = analyze(str(tied_model(tmp_path, external=external))).totals
    # MACs: 8 x 256 x 512 (x @ W) + 8 x 512 x 256 (r2 @ E^T) = 1,048,576 + 1,048,576; the Transpose of E is
    # folded at import (a weight), as TVM folds it with the data
    assert t.macs == 2_097_152
    # params: W 131,072 + E 131,072 (float initializers; the int64 shape is not a weight)
    assert t.params == 262_144 and t.param_bytes == 262_144 * 4
    # FLOPs: 2 x MACs + Relu 8 x 512 = 4,194,304 + 4,096
    assert t.flops == 4_198_400


def test_a_folded_transpose_of_a_tied_weight_is_no_tensor_of_its_own(tmp_path):
    # GPT-2's tied embedding as a dynamo-exported ONNX file writes it: E[1000, 64] gathered by the token ids and,
    # transposed, the output projection. TVM folds Transpose(E) into a second constant (E^T); eager PyTorch holds
    # E once and multiplies by its transposed view: the allocator replays E alone, 1000 x 64 x 4 = 256,000 B
    e = numpy_helper.from_array(np.random.default_rng(0).standard_normal((1000, 64)).astype(np.float32), "E")
    nodes = [
        helper.make_node("Gather", ["E", "ids"], ["x"]),
        helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "Et"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tied_embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1000])],
        [e],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "tied.onnx")
    assert 1000 * 64 * 4 >= SHAPE_ONLY_MIN_BYTES  # E takes the shape-only path, where the fold is made
    a = analyze(str(tmp_path / "tied.onnx")).analysis
    weights = [(s.tensor.shape, s.derived) for s in a.graph.weights if not s.scalar_const]
    assert sorted(weights) == [((64, 1000), True), ((1000, 64), False)]
    assert a.memory.weight_sizes == (256_000,)
    assert a.totals.param_bytes == 256_000  # the file's weights
    # where the transposed copy is the weight's only form in the graph, it stands for the weight: tied_model's E is
    # read only through its Transpose, so W and E^T are both the model's tensors (2 x 256 x 512 x 4)
    b = analyze(str(tied_model(tmp_path, external=False))).analysis
    assert not any(s.derived for s in b.graph.weights) and b.memory.weight_sizes == (524_288, 524_288)


def test_shape_only_weight_cast_to_float16(tmp_path):
    """A mixed-precision export casts a float32 weight to float16: TVM folds the Cast; so do the placeholders."""
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[256, 512])
    (tmp_path / "w.bin").write_bytes(bytes(256 * 512 * 4))
    _external(w, "w.bin", 0, 256 * 512 * 4)
    nodes = [
        helper.make_node("Cast", ["W"], ["W16"], to=TensorProto.FLOAT16),
        helper.make_node("MatMul", ["x", "W16"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "cast",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 8, 512])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "cast.onnx"))
    report = analyze(str(tmp_path / "cast.onnx"))
    matmul = next(op for op in report.analysis.graph.ops if op.op == "relax.matmul")
    assert [t.dtype for t in matmul.inputs] == ["float16", "float16"] and matmul.inputs[1].shape == (256, 512)
    assert report.totals.macs == 8 * 256 * 512  # 1,048,576
    assert report.totals.params == 256 * 512 and report.totals.param_bytes == 256 * 512 * 4  # as the file stores it


def test_onnxruntime_agrees_on_the_output_shape(tmp_path):
    """The graph TVM imported with placeholders is the real one: same output shape as onnxruntime computes."""
    ort = pytest.importorskip("onnxruntime")
    path = tied_model(tmp_path, external=True)
    full = onnx.load(str(path))  # external data loaded: onnxruntime's shape inference wants the Reshape's shape
    out = ort.InferenceSession(full.SerializeToString()).run(None, {"x": np.ones((1, 8, 256), np.float32)})[0]
    report = analyze(str(path))
    assert list(out.shape) == list(report.analysis.graph.ops[-1].output.shape) == [1, 8, 256]


def _refused(path: Path) -> str:
    with pytest.raises(UnreadableModelError) as info:
        analyze(str(path))
    return str(info.value)


def _with_external_w(tmp_path: Path, offset, length, file_bytes: int) -> Path:
    path = tied_model(tmp_path, external=True)
    model = onnx.load(str(path), load_external_data=False)
    w = next(t for t in model.graph.initializer if t.name == "W")
    del w.external_data[:]
    _external(w, "w.bin", offset, length)
    with open(tmp_path / "w.bin", "wb") as f:
        os.truncate(f.fileno(), file_bytes)
    onnx.save(model, str(path))
    return path


def test_external_range_past_the_end_is_refused(tmp_path):
    msg = _refused(_with_external_w(tmp_path, 1024, 256 * 512 * 4, 256 * 512 * 4))
    assert "'W'" in msg and "truncated" in msg


def test_external_length_not_the_shapes_is_refused(tmp_path):
    msg = _refused(_with_external_w(tmp_path, 0, 1000, 256 * 512 * 4))
    assert "'W'" in msg and "holds 1000 bytes" in msg and "needs 524288" in msg


def test_external_offset_not_an_integer_is_refused(tmp_path):
    assert "not integers" in _refused(_with_external_w(tmp_path, "12abc", 256 * 512 * 4, 256 * 512 * 4))


def test_external_length_absent_means_the_rest_of_the_file(tmp_path):
    path = _with_external_w(tmp_path, 0, 256 * 512 * 4, 256 * 512 * 4 + 4)  # 4 bytes too many
    model = onnx.load(str(path), load_external_data=False)
    w = next(t for t in model.graph.initializer if t.name == "W")
    for i, e in enumerate(w.external_data):
        if e.key == "length":
            del w.external_data[i]
            break
    onnx.save(model, str(path))
    assert "holds 524292 bytes" in _refused(path)


def test_inline_typed_values_short_of_the_shape_are_refused(tmp_path):
    path = tied_model(tmp_path, external=False)
    model = onnx.load(str(path))
    e = next(t for t in model.graph.initializer if t.name == "E")
    e.ClearField("raw_data")
    e.float_data.extend([0.5] * 1000)  # the shape needs 131,072
    onnx.save(model, str(path))
    msg = _refused(path)
    assert "'E'" in msg and "1000 values" in msg


def _huge_model(folder: Path) -> tuple[Path, int]:
    """x[1,16,32768] @ W[32768, 32768] (4 GiB of float32) @ W2[32768, 32768]: weights in a sparse file."""
    n = 32768
    inits = []
    for i, name in enumerate(("W", "W2")):
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[n, n])
        inits.append(_external(t, "weights.bin", i * n * n * 4, n * n * 4))
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("MatMul", ["h", "W2"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "huge",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with open(folder / "weights.bin", "wb") as f:
        os.truncate(f.fileno(), 2 * n * n * 4)  # 8 GiB, sparse: no block written
    path = folder / "huge.onnx"
    onnx.save(model, str(path))
    return path, n


WRAPPER = """
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.stderr.write(r.stderr)
"""


def test_weights_larger_than_memory_analyse_in_little_of_it(tmp_path):
    """8 GiB of weights (sparse on disk): the CLI's peak RSS stays far below their size."""
    path, n = _huge_model(tmp_path)
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "analyzer.cli", "analyze", str(path), "--format", "json", "-o", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], capture_output=True, text=True, env=env, cwd=REPO)
    code, peak_kib = (int(v) for v in res.stdout.split())
    assert code == 0, res.stderr
    t = json.loads(out.read_text())["totals"]
    assert t["params"] == 2 * n * n and t["param_bytes"] == 8 * 2**30  # 2 x 32768^2 float32 = 8 GiB
    assert t["macs"] == 2 * 16 * n * n  # two [16, n] x [n, n] products
    assert peak_kib * 1024 < 1.5 * 2**30, f"peak RSS {peak_kib / 2**20:.2f} GiB"
