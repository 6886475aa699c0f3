"""Quantized ONNX models (int8), as `onnxruntime.quantization` writes them, against hand counts.

Three small torch models are exported to ONNX (TorchScript exporter, opset 17) and quantized three ways:
`quantize_static` in QDQ format (QuantizeLinear/DequantizeLinear around float Conv/MatMul/Gemm) and in QOperator
format (QLinearConv, QLinearMatMul, com.microsoft QGemm/QLinearAdd/QLinearMul/QLinearSoftmax/QLinearSigmoid/
QLinearGlobalAveragePool), with a two-batch calibration reader of random data, and `quantize_dynamic`
(DynamicQuantizeLinear, ConvInteger, MatMulInteger). Each file is analysed; its MACs must equal the float model's
hand count, the MACs of its integer convolutions and matmuls must be counted as int8 (operands at 1 byte per
element, int32 accumulator), and its params must be the torch module's.
"""

from __future__ import annotations

import json
import math
import warnings

import jsonschema
import numpy as np
import pytest
import torch
from torch import nn

from analyzer import analyze
from analyzer.render import SCHEMA_FILE, render_markdown, render_table
from passes.costs import compute_dtype
from predictor.devices import get_device
from predictor.roofline import op_bounds, peak_rate

ort_quant = pytest.importorskip("onnxruntime.quantization")


class SmallCNN(nn.Module):
    """x (1, 3, 8, 8) -> conv 3->8 k3 p1 -> relu -> conv 8->16 k3 s2 p1 -> relu -> flatten -> linear 256->10."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        return self.fc(x.flatten(1))


# conv1: output 1x8x8x8 = 512 elements x (3 x 3 x 3 = 27) = 13,824 MACs
# conv2: output 1x16x4x4 = 256 elements x (8 x 3 x 3 = 72) = 18,432 MACs
# fc:    10 outputs x 256 = 2,560 MACs                                  total 34,816
CNN_MACS = 512 * 27 + 256 * 72 + 10 * 256
# weights 8x27 + 16x72 + 10x256 = 216 + 1,152 + 2,560 = 3,928; biases 8 + 16 + 10 = 34
CNN_WEIGHTS, CNN_BIASES = 8 * 27 + 16 * 72 + 10 * 256, 8 + 16 + 10


class PoolCNN(nn.Module):
    """x (1, 3, 8, 8) -> conv 3->8 k3 p1 -> x * sigmoid(x) -> global average pool -> linear 8->10."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.c(x)
        x = x * torch.sigmoid(x)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


# conv: 512 outputs x 27 = 13,824; linear: 10 x 8 = 80                   total 13,904
POOL_MACS = 512 * 27 + 10 * 8


class Block(nn.Module):
    """A pre-written transformer block: x (1, T=6, d=32), 2 heads of 16, MLP 32->64->32, post-norm."""

    def __init__(self, d: int = 32, h: int = 2, f: int = 64):
        super().__init__()
        self.h = h
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.f1, self.f2 = nn.Linear(d, f), nn.Linear(f, d)
        with torch.no_grad():  # distinct norm parameters: the exporter would share equal initialisers
            for p in (*self.n1.parameters(), *self.n2.parameters()):
                p.uniform_(0.5, 1.5)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.h), -1) @ v
        x = self.n1(x + self.o(a.transpose(1, 2).reshape(b, t, d)))
        return self.n2(x + self.f2(torch.relu(self.f1(x))))


# T = 6, d = 32, 2 heads of 16, MLP 64:
#   qkv 6 x 32 x 96 = 18,432; scores 2 x 6 x 6 x 16 = 1,152; P.V 1,152; out 6 x 32 x 32 = 6,144;
#   f1 6 x 32 x 64 = 12,288; f2 6 x 64 x 32 = 12,288                      total 51,456
BLOCK_PROJ_MACS = 6 * 32 * 96 + 6 * 32 * 32 + 6 * 32 * 64 + 6 * 64 * 32  # 49,152
BLOCK_ATTN_MACS = 2 * (2 * 6 * 6 * 16)  # 2,304
BLOCK_MACS = BLOCK_PROJ_MACS + BLOCK_ATTN_MACS
# weights 32x96 + 32x32 + 32x64 + 64x32 = 8,192; biases 96 + 32 + 64 + 32 = 224; two norms 2 x (32 + 32) = 128
BLOCK_PARAMS = 8192 + 224 + 128

MODELS = {"cnn": (SmallCNN, (1, 3, 8, 8)), "pool": (PoolCNN, (1, 3, 8, 8)), "block": (Block, (1, 6, 32))}


class _Reader(ort_quant.CalibrationDataReader):
    def __init__(self, shape):
        rng = np.random.default_rng(0)
        self.batches = iter([{"x": rng.random(shape, dtype=np.float32)} for _ in range(2)])

    def get_next(self):
        return next(self.batches, None)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """name -> {"float", "qdq", "qop", "qdq_pc", "dynamic"} ONNX paths, and name -> the torch module."""
    tmp = tmp_path_factory.mktemp("quantized")
    out, modules = {}, {}
    torch.manual_seed(0)
    for name, (cls, shape) in MODELS.items():
        m = cls().eval()
        modules[name] = m
        src = tmp / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(m, torch.randn(*shape), str(src), input_names=["x"], dynamo=False, opset_version=17)
            paths = {"float": src}
            for fmt, key in ((ort_quant.QuantFormat.QDQ, "qdq"), (ort_quant.QuantFormat.QOperator, "qop")):
                paths[key] = tmp / f"{name}_{key}.onnx"
                ort_quant.quantize_static(str(src), str(paths[key]), _Reader(shape), quant_format=fmt)
            # per-channel weight scales (QDQ: DequantizeLinear axis 0 of the conv weight) and uint8 activations
            paths["qdq_pc"] = tmp / f"{name}_qdq_pc.onnx"
            ort_quant.quantize_static(
                str(src),
                str(paths["qdq_pc"]),
                _Reader(shape),
                quant_format=ort_quant.QuantFormat.QDQ,
                per_channel=True,
                activation_type=ort_quant.QuantType.QUInt8,
            )
            paths["dynamic"] = tmp / f"{name}_dynamic.onnx"
            ort_quant.quantize_dynamic(str(src), str(paths["dynamic"]))
        out[name] = paths
    return out, modules


def _op_types(path) -> set[str]:
    import onnx

    return {n.op_type for n in onnx.load(str(path)).graph.node}


def _mac_ops(report):
    return [c for c in report.analysis.ops if c.macs and not c.folded]


def test_the_files_are_in_the_formats_under_test(files):
    paths, _ = files
    assert {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm"} <= _op_types(paths["cnn"]["qdq"])
    assert {"QLinearConv", "QGemm"} <= _op_types(paths["cnn"]["qop"])
    assert {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear"} <= _op_types(paths["cnn"]["dynamic"])
    assert {"QLinearMatMul", "QLinearAdd", "QLinearSoftmax"} <= _op_types(paths["block"]["qop"])
    assert {"QLinearSigmoid", "QLinearMul", "QLinearGlobalAveragePool"} <= _op_types(paths["pool"]["qop"])
    import onnx

    pc = onnx.load(str(paths["cnn"]["qdq_pc"]))
    weight_scales = [t for t in pc.graph.initializer if t.name.endswith("weight_scale")]
    assert weight_scales and sorted(list(t.dims) for t in weight_scales) == [[8], [10], [16]]  # per out channel


@pytest.mark.parametrize("fmt", ["qdq", "qop", "qdq_pc", "dynamic"])
def test_cnn_integer_macs_params_and_bytes(files, fmt):
    paths, modules = files
    r = analyze(paths["cnn"][fmt])
    t = r.totals
    assert not t.unsupported
    assert t.macs == CNN_MACS
    assert t.macs_by_dtype == {"int8": CNN_MACS}
    assert t.params == CNN_WEIGHTS + CNN_BIASES == sum(p.numel() for p in modules["cnn"].parameters())
    # int8 weights at 1 byte per element; biases int32 (static: 4 bytes) or float32 (dynamic: 4 bytes)
    assert t.param_bytes == CNN_WEIGHTS * 1 + CNN_BIASES * 4
    ops = _mac_ops(r)
    assert sorted(c.op for c in ops) == ["relax.matmul", "relax.nn.conv2d", "relax.nn.conv2d"]
    # the weights' DequantizeLinear nodes are absorbed by the integer ops, not left behind as float copies
    graph_ops = r.analysis.graph.ops
    assert not [o for o in graph_ops if o.op == "relax.dequantize" and o.operands[0].kind == "weight"]
    for c in ops:
        a, w = c.inputs[0], c.inputs[1]
        assert a.dtype in ("int8", "uint8") and w.dtype == "int8" and c.output.dtype == "int32"
        assert a.nbytes == a.numel and w.nbytes == w.numel  # 1 byte per element
        assert c.flops == 2 * c.macs
        assert compute_dtype(c) == a.dtype


def test_float_cnn_is_float32(files):
    paths, _ = files
    r = analyze(paths["cnn"]["float"])
    t = r.totals
    assert t.macs == CNN_MACS and t.macs_by_dtype == {"float32": CNN_MACS}
    assert t.param_bytes == (CNN_WEIGHTS + CNN_BIASES) * 4
    assert "MACs by dtype" not in render_table(r)  # all in one float dtype: nothing to say
    assert "MACs by dtype         int8 100.0%" in render_table(analyze(paths["cnn"]["qdq"]))


@pytest.mark.parametrize("fmt", ["qdq", "qop", "qdq_pc"])
def test_block_static_quantization_is_all_int8(files, fmt):
    paths, modules = files
    r = analyze(paths["block"][fmt])
    t = r.totals
    assert not t.unsupported
    assert t.macs == BLOCK_MACS
    assert t.macs_by_dtype == {"int8": BLOCK_MACS}
    assert t.params == BLOCK_PARAMS == sum(p.numel() for p in modules["block"].parameters())
    ops = _mac_ops(r)
    assert len(ops) == 6 and all(c.op == "relax.matmul" for c in ops)
    weights = [o.tensor for c in ops for o in r.analysis.graph.ops[c.index].operands if o.kind == "weight"]
    assert sorted(w.numel for w in weights) == [32 * 32, 32 * 64, 32 * 64, 32 * 96]
    assert all(w.dtype == "int8" and w.nbytes == w.numel for w in weights)


def test_block_dynamic_quantization_mixes_dtypes(files):
    """quantize_dynamic quantizes the weight matmuls (MatMulInteger); the attention matmuls stay float."""
    paths, _ = files
    r = analyze(paths["block"]["dynamic"])
    t = r.totals
    assert t.macs == BLOCK_MACS
    assert t.macs_by_dtype == {"int8": BLOCK_PROJ_MACS, "float32": BLOCK_ATTN_MACS}
    assert t.params == BLOCK_PARAMS
    # 49,152 / 51,456 = 95.52%; 2,304 / 51,456 = 4.48%
    assert "MACs by dtype         int8 95.5%, float32 4.5%" in render_table(r)
    assert "| MACs by dtype | int8 95.5%, float32 4.5% |" in render_markdown(r)
    doc = r.to_json()
    assert doc["totals"]["macs_by_dtype"] == {"int8": 49152, "float32": 2304}
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))


def test_pool_cnn_com_microsoft_ops(files):
    paths, _ = files
    for fmt in ("qdq", "qop"):
        t = analyze(paths["pool"][fmt]).totals
        assert not t.unsupported, fmt
        assert t.macs == POOL_MACS and t.macs_by_dtype == {"int8": POOL_MACS}, fmt


def test_int8_peaks_and_roofline(files):
    """Dense INT8 tensor-core peaks from the datasheets; integer conv/matmul are bound at them."""
    expected = {"a100-80gb": 624e12, "h100-80gb": 1979e12, "h200-141gb": 1979e12}
    for key, rate in expected.items():
        d = get_device(key)
        assert d.peak_flops["int8"] == rate == pytest.approx(2 * d.peak_flops["fp16"], rel=1e-3)
        for dtype in ("int8", "uint8"):
            assert peak_rate(d, "conv", dtype) == peak_rate(d, "matmul", dtype) == rate
        assert peak_rate(d, "elementwise", "int8") == d.peak_flops["fp32"]
    paths, _ = files
    r = analyze(paths["cnn"]["qdq"])
    h100 = get_device("h100")
    bounds = {b.index: b for b in op_bounds(r.analysis.ops, h100)}
    for c in _mac_ops(r):
        assert bounds[c.index].compute_s == pytest.approx(c.flops / 1979e12)
    kernels = [k for k in r.analysis.kernels if k.kind in ("conv", "gemm")]
    assert kernels and all(k.dtype in ("int8", "uint8") for k in kernels)


def test_prediction_and_html_report_say_int8(files, tmp_path):
    from analyzer import predict, report

    paths, _ = files
    r = predict(paths["cnn"]["qop"], device="h100")
    assert r.prediction.runtime["dtype"] == "int8"
    assert r.prediction.latency_ms > 0
    html = tmp_path / "r.html"
    report(paths["block"]["dynamic"], devices=["h100"], batches=[], output=str(html))
    assert "MACs by dtype" in html.read_text() and "int8 95.5%, float32 4.5%" in html.read_text()


def _save(tmp_path, name, nodes, inputs, outputs, inits, opset=17, microsoft=False):
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if microsoft else [])
    model = helper.make_model(graph, opset_imports=opsets)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def _q(name, array):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(array), name)


def test_qlinearconv_same_upper_stride_and_groups(tmp_path):
    """QLinearConv, auto_pad SAME_UPPER, stride 2, 2 groups, by hand."""
    from onnx import TensorProto, helper

    # x uint8 (1, 4, 7, 7), w int8 (6, 2, 3, 3), group 2, stride 2, SAME_UPPER: output 1x6x4x4 (ceil(7 / 2) = 4)
    # MACs = 96 outputs x (4 / 2 channels x 3 x 3 = 18) = 1,728
    inits = [
        _q("xs", np.float32(0.1)),
        _q("xz", np.uint8(128)),
        _q("w", np.ones((6, 2, 3, 3), np.int8)),
        _q("ws", np.full(6, 0.05, np.float32)),
        _q("wz", np.zeros(6, np.int8)),
        _q("ys", np.float32(0.2)),
        _q("yz", np.uint8(128)),
        _q("b", np.zeros(6, np.int32)),
    ]
    node = helper.make_node(
        "QLinearConv",
        ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
        ["y"],
        auto_pad="SAME_UPPER",
        strides=[2, 2],
        group=2,
    )
    path = _save(
        tmp_path,
        "qconv",
        [node],
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 6, 4, 4])],
        inits,
    )
    r = analyze(path)
    (conv,) = _mac_ops(r)
    assert conv.output.shape == (1, 6, 4, 4) and conv.output.dtype == "int32"
    assert conv.macs == 96 * 18 == r.totals.macs == r.totals.macs_by_dtype["int8"]
    assert r.totals.params == 6 * 18 + 6  # int8 weight and int32 bias; scales and zero points are not params
    assert r.totals.param_bytes == 6 * 18 * 1 + 6 * 4


def test_weight_only_quantization_computes_in_float(tmp_path):
    """DequantizeLinear on the weight alone (activation float): the matmul stays float32; the weight is int8."""
    from onnx import TensorProto, helper

    inits = [_q("w", np.ones((16, 8), np.int8)), _q("ws", np.float32(0.1)), _q("wz", np.int8(0))]
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
        helper.make_node("MatMul", ["x", "wf"], ["y"]),
    ]
    path = _save(
        tmp_path,
        "wonly",
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        inits,
    )
    t = analyze(path).totals
    assert t.macs == 4 * 8 * 16 and t.macs_by_dtype == {"float32": 4 * 8 * 16}  # 512
    assert t.params == 16 * 8 and t.param_bytes == 16 * 8  # 1 byte per int8 element


def test_malformed_quantized_op_is_a_clean_error(tmp_path):
    """QGemm (com.microsoft, not checked by onnx's checker) missing its scales: a PreflightError, not a crash."""
    from onnx import TensorProto, helper

    from analyzer.errors import PreflightError

    path = _save(
        tmp_path,
        "bad_qgemm",
        [helper.make_node("QGemm", ["a", "b"], ["y"], domain="com.microsoft")],
        [
            helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 4]),
            helper.make_tensor_value_info("b", TensorProto.INT8, [4, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [],
        microsoft=True,
    )
    with pytest.raises(PreflightError, match="QGemm lacks its required input"):
        analyze(path)


def test_other_com_microsoft_qlinear_ops(tmp_path):
    """QLinearLeakyRelu -> QLinearAveragePool (2x2, stride 2) -> QLinearConcat with itself: shapes and costs."""
    from onnx import TensorProto, helper

    inits = [_q("s", np.float32(0.1)), _q("z", np.uint8(128))]
    nodes = [
        helper.make_node("QLinearLeakyRelu", ["x", "s", "z", "s", "z"], ["a"], domain="com.microsoft", alpha=0.1),
        helper.make_node(
            "QLinearAveragePool",
            ["a", "s", "z", "s", "z"],
            ["p"],
            domain="com.microsoft",
            kernel_shape=[2, 2],
            strides=[2, 2],
        ),
        helper.make_node(
            "QLinearConcat", ["s", "z", "p", "s", "z", "p", "s", "z"], ["y"], domain="com.microsoft", axis=1
        ),
    ]
    path = _save(
        tmp_path,
        "qmisc",
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 8, 4, 4])],
        inits,
        microsoft=True,
    )
    r = analyze(path)
    assert not r.totals.unsupported and r.totals.macs == 0
    ops = {c.op: c for c in r.analysis.ops if not c.folded}
    assert {"relax.nn.leakyrelu", "relax.nn.avg_pool2d", "relax.concat"} <= set(ops)
    assert ops["relax.nn.avg_pool2d"].output.shape == (1, 4, 4, 4)
    assert ops["relax.concat"].output.shape == (1, 8, 4, 4)
    out = [c for c in r.analysis.ops if c.op == "relax.quantize"][-1]
    assert out.output.shape == (1, 8, 4, 4) and out.output.dtype == "uint8"
