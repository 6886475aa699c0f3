"""Full-integer int8 `.tflite` files made by TensorFlow's own converter, against hand counts and the float file.

The Keras models of `test_tensorflow.py` (random weights) are exported at batch 1 and converted twice by
`tf.lite.TFLiteConverter.from_saved_model`: as they are (float32), and with full-integer post-training quantization
(`optimizations = [Optimize.DEFAULT]`, a 4-batch representative dataset of random data,
`supported_ops = [TFLITE_BUILTINS_INT8]`), which stores int8 weights, int32 biases and per-channel scales and runs
every conv and matmul on int8 operands. TVM's TFLite importer reads such a file as dequantize -> float op -> quantize;
preflight rewrites the contractions as int8 ops (`passes.tvm_ir.fuse_int8`). Same architecture, same MACs: the int8
file must count the float file's MACs, all of them int8, its weights at 1 byte and its biases at 4.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_tensorflow import (
    CNN_MACS,
    MB_MACS,
    TR_MACS,
    TR_PARAMS,
    keras_cnn,
    keras_mobilenet,
    keras_transformer,
    needs_tf,
)

from analyzer import analyze
from analyzer.errors import AnalysisError
from passes.costs import compute_dtype

# MLP on 8 tokens x 32: dense 32->64 (relu) -> dense 64->32
MLP_MACS = 8 * 32 * 64 + 8 * 64 * 32  # 16,384 + 16,384 = 32,768
MLP_WEIGHTS, MLP_BIASES = 32 * 64 + 64 * 32, 64 + 32  # 4,096 int8; 96 int32
# CNN (test_tensorflow.keras_cnn): int8 weights conv1 3x3x3x16 = 432, conv2 3x3x16x32 = 4,608, dense 32x10 = 320;
# int32 biases: conv1's 16 (the folded batch norm), conv2's 32, dense's 10
CNN_WEIGHTS, CNN_BIASES = 432 + 4608 + 320, 16 + 32 + 10  # 5,360 and 58
# MobileNet-style (keras_mobilenet): conv 3x3x3x8 = 216, depthwise 3x3x8 = 72, pointwise 8x16 = 128, dense 16x10
# = 160; int32 biases: the three folded batch norms 8 + 8 + 16, dense 10
MB_WEIGHTS, MB_BIASES = 216 + 72 + 128 + 160, 8 + 8 + 16 + 10  # 576 and 42


def keras_mlp():
    import keras

    L = keras.layers
    inp = keras.Input((8, 32), name="tokens")
    out = L.Dense(32)(L.Dense(64, activation="relu")(inp))
    model = keras.Model(inp, out, name="mlp")
    rng = np.random.default_rng(3)
    model.set_weights([rng.uniform(-1, 1, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model


def convert(model, folder: Path, dynamic: bool = False) -> dict[str, Path]:
    """float32, full-integer int8 (float input/output), int8 with int8 input/output, and (`dynamic`) dynamic-range
    .tflite files of a Keras model at batch 1."""
    import tensorflow as tf

    shape = (1, *model.inputs[0].shape[1:])
    spec = tf.TensorSpec(shape, tf.float32, name=model.inputs[0].name)
    model.export(str(folder / "fixed"), verbose=False, input_signature=[spec])

    def converter():
        return tf.lite.TFLiteConverter.from_saved_model(str(folder / "fixed"))

    def calibration():
        rng = np.random.default_rng(0)
        for _ in range(4):
            yield [rng.standard_normal(shape).astype(np.float32)]

    paths = {k: folder / f"{k}.tflite" for k in ("float", "int8", "int8_io", "dynamic")}
    paths["float"].write_bytes(converter().convert())
    for key in ("int8", "int8_io"):
        c = converter()
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        c.representative_dataset = calibration
        c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if key == "int8_io":
            c.inference_input_type = c.inference_output_type = tf.int8
        paths[key].write_bytes(c.convert())
    if dynamic:
        c = converter()
        c.optimizations = [tf.lite.Optimize.DEFAULT]  # no representative data: int8 weights, float activations
        paths["dynamic"].write_bytes(c.convert())
    return paths


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    pytest.importorskip("tensorflow")
    pytest.importorskip("tflite")
    root = tmp_path_factory.mktemp("tflite_int8")
    out = {}
    models = (
        ("cnn", keras_cnn),
        ("mobilenet", keras_mobilenet),
        ("mlp", keras_mlp),
        ("transformer", keras_transformer),
    )
    for name, build in models:
        (root / name).mkdir()
        out[name] = convert(build(), root / name, dynamic=name == "mlp")
    return out


def _tensor_types(path: Path) -> dict[str, int]:
    """Oracle for the file's contents: constant tensors per TFLite type (read with the tflite package)."""
    import tflite

    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    g = model.Subgraphs(0)
    names = {9: "int8", 2: "int32", 0: "float32"}
    counts: dict[str, int] = {}
    for i in range(g.TensorsLength()):
        t = g.Tensors(i)
        buf = model.Buffers(t.Buffer())
        quantized = t.Quantization() is not None and t.Quantization().ScaleLength() > 0
        if t.Buffer() > 0 and buf is not None and buf.DataLength() and quantized:
            key = names.get(t.Type(), str(t.Type()))
            counts[key] = counts.get(key, 0) + int(np.prod(t.ShapeAsNumpy()))
    return counts


CASES = {
    "cnn": (CNN_MACS, CNN_WEIGHTS, CNN_BIASES),
    "mobilenet": (MB_MACS, MB_WEIGHTS, MB_BIASES),
    "mlp": (MLP_MACS, MLP_WEIGHTS, MLP_BIASES),
}


@needs_tf
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("key", ["int8", "int8_io"])
def test_full_integer_macs_params_and_bytes(files, name, key):
    macs, weights, biases = CASES[name]
    assert _tensor_types(files[name][key]) == {"int8": weights, "int32": biases}  # what the converter wrote
    f = analyze(files[name]["float"]).totals
    r = analyze(files[name][key])
    t = r.totals
    assert not t.unsupported
    assert t.macs == f.macs == macs  # same architecture, same MACs
    assert f.macs_by_dtype == {"float32": macs}
    assert t.macs_by_dtype == {"int8": macs}
    assert t.params == f.params == weights + biases
    assert t.param_bytes == weights * 1 + biases * 4
    assert f.param_bytes == (weights + biases) * 4
    ops = [c for c in r.analysis.ops if c.macs and not c.folded]
    for c in ops:
        a, w = c.inputs[0], c.inputs[1]
        assert a.dtype == w.dtype == "int8" and c.output.dtype == "int32", c
        assert a.nbytes == a.numel and w.nbytes == w.numel  # 1 byte per element
        assert c.flops == 2 * c.macs and compute_dtype(c) == "int8"
    assert sum(c.macs for c in ops) == macs
    # the weights' float copies are gone: no dequantize reads a weight
    assert not [o for o in r.analysis.graph.ops if o.op == "relax.dequantize" and o.operands[0].kind == "weight"]


@needs_tf
def test_per_layer_macs_and_edges(files):
    """Per-layer hand counts on the MobileNet-style file (NHWC; the depthwise conv is one 3x3 filter per channel),
    and the quantize/dequantize ops at the edges counted at their FLOPs per element (3 and 2)."""
    r = analyze(files["mobilenet"]["int8"])
    convs = [c for c in r.analysis.ops if c.op == "relax.nn.conv2d"]
    # 16x16x8 x 27 = 55,296; 16x16x8 x 9 = 18,432; 16x16x16 x 8 = 32,768
    assert [c.macs for c in convs] == [55_296, 18_432, 32_768]
    assert [c.macs for c in r.analysis.ops if c.op == "relax.matmul"] == [160]  # dense 16 -> 10
    quant = [c for c in r.analysis.ops if c.op == "relax.quantize"]
    # the float input 1x32x32x3 is quantized once: 3,072 elements x 3 FLOPs
    assert quant[0].inputs[0].dtype == "float32" and quant[0].flops == 32 * 32 * 3 * 3 == 9_216
    # the int8_io file takes int8 in and gives int8 out: that first quantize is not there
    io = analyze(files["mobilenet"]["int8_io"])
    assert io.inputs[0]["dtype"] == "int8"
    assert len([c for c in io.analysis.ops if c.op == "relax.quantize"]) == len(quant) - 1
    assert io.totals.macs == MB_MACS


@needs_tf
def test_transformer_block_int8(files):
    """A full-integer Keras transformer block (MultiHeadAttention 4 x 16, LayerNorm, FFN 64 -> 128 GELU -> 64): TVM's
    importer has no int8 BATCH_MATMUL, GELU or TRANSPOSE; preflight lowers them (tvm_ir.TFLITE_QDQ_OPS), so every
    matmul, the attention ones included, is int8."""
    f = analyze(files["transformer"]["float"]).totals
    r = analyze(files["transformer"]["int8"])
    t = r.totals
    assert not t.unsupported
    assert t.macs == f.macs == TR_MACS == 557_056
    assert t.macs_by_dtype == {"int8": TR_MACS}
    assert t.params == f.params == TR_PARAMS == 33_472
    # the converter stores every weight and the layer norms' scales and offsets as int8 (33,024), the 4 x 64 + 128 +
    # 64 = 448 dense biases as int32
    assert t.param_bytes == (TR_PARAMS - 448) * 1 + 448 * 4 == 34_816
    mm = [c for c in r.analysis.ops if c.op == "relax.matmul" and not c.folded]
    # Q, K, V, output projections 16 x 64 x 64 = 65,536 each; QK^T and attention x V 4 x 16 x 16 x 16 = 16,384 each;
    # FFN 16 x 64 x 128 = 131,072 twice
    assert sorted(c.macs for c in mm) == sorted([65_536] * 4 + [16_384] * 2 + [131_072] * 2)
    assert all(c.inputs[0].dtype == c.inputs[1].dtype == "int8" and c.output.dtype == "int32" for c in mm)
    gelu = [c for c in r.analysis.ops if c.op == "relax.nn.gelu"]
    assert len(gelu) == 1 and gelu[0].inputs[0].dtype == "float32"  # between a dequantize and a quantize


@needs_tf
def test_dynamic_range_quantization_is_a_one_line_error(files):
    with pytest.raises(AnalysisError) as err:
        analyze(files["mlp"]["dynamic"])
    msg = str(err.value)
    assert "\n" not in msg and "dynamic-range quantized" in msg and "TFLITE_BUILTINS_INT8" in msg


@needs_tf
def test_kernel_model_prices_int8_as_an_assumption(files):
    """No single-kernel measurement of an int8 GEMM or convolution: the kernel model's entries for them are the
    float32 fit at the device's int8 tensor-core peak, and say so; a prediction runs and counts that time as
    assumed."""
    from analyzer import predict
    from predictor.kernel_model import load_params

    table = load_params()
    for kind in ("gemm", "conv"):
        p = table.lookup("h100-80gb", kind, "int8")
        assert p.basis("h100-80gb") == "assumed" and p.source.startswith("assumed:")
    r = predict(files["mobilenet"]["int8"], device="h100-80gb")
    p = r.prediction
    assert 0 < p.latency_ms < float("inf")
    assert p.basis["kernel_time_share"]["assumed"] > 0
