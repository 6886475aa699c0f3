"""TensorFlow frontend: Keras `.keras`, SavedModel directories and `.tflite` files.

Every model is built here, given random weights (a converter drops all-zero biases and stores equal
constants once, which would blur the parameter counts), and saved in its real format as a user would:
`model.save("model.keras")`, `model.export(dir)` (a SavedModel), and
a `.tflite` converted from a batch-1 SavedModel (static shapes), and
`tf.lite.TFLiteConverter.from_keras_model(model).convert()` (dynamic batch).
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
from test_cli import fails, run  # the CLI helpers (tests/ is on sys.path)

from analyzer import analyze

REPO = Path(__file__).resolve().parents[1]
HAS_TF = find_spec("tensorflow") is not None and find_spec("tflite") is not None
needs_tf = pytest.mark.skipif(
    not HAS_TF, reason="the tensorflow extra is not installed: pip install -c constraints.txt -e '.[tensorflow]'"
)

# ---- hand counts (MACs for batch 1) -------------------------------------------------------------------
# CNN: 32x32x3 -> conv3x3(16, same, no bias) -> BN -> relu -> conv3x3(32, stride 2, same) -> relu -> GAP -> dense(10)
CNN_MACS = (
    32 * 32 * 16 * 3 * 3 * 3  # conv1: 442,368
    + 16 * 16 * 32 * 3 * 3 * 16  # conv2: 1,179,648
    + 32 * 10
)  # dense: 320   -> 1,622,336
# Keras weights: conv1 432, BN 4x16 = 64 (gamma, beta, mean, variance), conv2 4,608 + 32, dense 320 + 10
CNN_PARAMS = 432 + 64 + 4608 + 32 + 330  # 5,466
# TFLite folds BN into conv1: its 4x16 tensors become conv1's 16-element bias: 64 - 16 = 48 fewer
CNN_PARAMS_FOLDED = CNN_PARAMS - 48  # 5,418
# Transformer block, 16 tokens x 64: MHA (4 heads x 16) + residual + LN, FFN 64->128 (gelu)->64 + residual + LN
TR_MACS = (
    3 * 16 * 64 * 64  # Q, K, V projections: 196,608
    + 2 * 4 * 16 * 16 * 16  # QK^T and attn x V, 4 heads: 32,768
    + 16 * 64 * 64  # output projection: 65,536
    + 2 * 16 * 64 * 128
)  # FFN: 262,144  -> 557,056
TR_PARAMS = 4 * (64 * 64 + 64) + 2 * 2 * 64 + (64 * 128 + 128) + (128 * 64 + 64)  # 33,472
# MobileNet-style: conv3x3(8, stride 2) -> BN -> relu6 -> depthwise3x3 -> BN -> relu6 -> conv1x1(16) -> BN
# -> relu6 -> GAP -> dense(10), all on 16x16 after the first conv
MB_MACS = (
    16 * 16 * 8 * 3 * 3 * 3  # conv1: 55,296
    + 16 * 16 * 8 * 3 * 3  # depthwise: one 3x3 filter per channel: 18,432
    + 16 * 16 * 16 * 8  # pointwise: 32,768
    + 16 * 10
)  # dense: 160  -> 106,656


def _randomize(model, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    model.set_weights([rng.uniform(0.5, 1.5, w.shape).astype(w.dtype) for w in model.get_weights()])


def keras_cnn():
    import keras

    L = keras.layers
    inp = keras.Input((32, 32, 3), name="image")
    x = L.Conv2D(16, 3, padding="same", use_bias=False)(inp)
    x = L.ReLU()(L.BatchNormalization()(x))
    x = L.ReLU()(L.Conv2D(32, 3, strides=2, padding="same")(x))
    out = L.Dense(10)(L.GlobalAveragePooling2D()(x))
    model = keras.Model(inp, out, name="cnn")
    _randomize(model)
    return model


def keras_transformer():
    import keras

    L = keras.layers
    inp = keras.Input((16, 64), name="tokens")
    x = L.LayerNormalization()(inp + L.MultiHeadAttention(num_heads=4, key_dim=16)(inp, inp))
    f = L.Dense(64)(L.Dense(128, activation="gelu")(x))
    model = keras.Model(inp, L.LayerNormalization()(x + f), name="transformer")
    _randomize(model, 1)
    return model


def keras_mobilenet():
    import keras

    L = keras.layers
    inp = keras.Input((32, 32, 3), name="image")
    x = L.ReLU(6.0)(L.BatchNormalization()(L.Conv2D(8, 3, strides=2, padding="same", use_bias=False)(inp)))
    x = L.ReLU(6.0)(L.BatchNormalization()(L.DepthwiseConv2D(3, padding="same", use_bias=False)(x)))
    x = L.ReLU(6.0)(L.BatchNormalization()(L.Conv2D(16, 1, use_bias=False)(x)))
    model = keras.Model(inp, L.Dense(10)(L.GlobalAveragePooling2D()(x)), name="mobilenet")
    _randomize(model, 2)
    return model


def save_all(model, folder: Path) -> dict[str, Path]:
    """Save as a user would: .keras, a SavedModel directory, and a .tflite at batch 1."""
    import tensorflow as tf

    folder.mkdir(parents=True, exist_ok=True)
    paths = {"keras": folder / "model.keras", "saved_model": folder / "saved_model", "tflite": folder / "model.tflite"}
    model.save(paths["keras"])
    model.export(str(paths["saved_model"]), verbose=False)
    # a static .tflite: export a SavedModel with a batch-1 signature, convert it
    spec = tf.TensorSpec((1, *model.inputs[0].shape[1:]), tf.float32, name=model.inputs[0].name)
    model.export(str(folder / "fixed"), verbose=False, input_signature=[spec])
    paths["tflite"].write_bytes(tf.lite.TFLiteConverter.from_saved_model(str(folder / "fixed")).convert())
    # the one-liner many users run keeps the batch dynamic (shape signature -1) and computes shapes at run time
    paths["tflite_dynamic"] = folder / "dynamic.tflite"
    paths["tflite_dynamic"].write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    return paths


@pytest.fixture(scope="module")
def tf_models(tmp_path_factory):
    if not HAS_TF:
        pytest.skip("the tensorflow extra is not installed")
    root = tmp_path_factory.mktemp("tf")
    return {
        "cnn": save_all(keras_cnn(), root / "cnn"),
        "transformer": save_all(keras_transformer(), root / "tr"),
        "mobilenet": save_all(keras_mobilenet(), root / "mb"),
    }


def op_names(report) -> list[str]:
    return [o["op"] for o in report.to_json()["ops"]]


# ---- the three formats -----------------------------------------------------------------------------


@needs_tf
@pytest.mark.parametrize("fmt", ["keras", "saved_model", "tflite"])
def test_cnn_every_format(tf_models, fmt):
    r = analyze(tf_models["cnn"][fmt], batch=1)
    t = r.totals
    assert t.macs == CNN_MACS == 1_622_336
    assert t.params == CNN_PARAMS_FOLDED  # BN folded by the converter on every TF route
    assert t.unsupported == {}
    assert r.model["framework"] == ("tflite" if fmt == "tflite" else "tensorflow")
    name = "serving_default_image:0" if fmt == "tflite" else "image"  # TFLite names inputs after the signature
    assert r.inputs == [{"name": name, "shape": [1, 32, 32, 3], "dtype": "float32"}]
    convs = [o for o in r.to_json()["ops"] if o["op"] == "relax.nn.conv2d"]
    # NHWC conv: 1x16x16x32 output, 3x3x16 window: 8,192 x 144 = 1,179,648 MACs, FLOPs = 2 x MACs
    assert [o["output"]["shape"] for o in convs] == [[1, 32, 32, 16], [1, 16, 16, 32]]
    assert [o["macs"] for o in convs] == [442_368, 1_179_648]
    assert all(o["flops"] == 2 * o["macs"] for o in convs)


@needs_tf
def test_transformer_block(tf_models):
    for fmt in ("keras", "tflite"):
        r = analyze(tf_models["transformer"][fmt], batch=1)
        assert r.totals.macs == TR_MACS == 557_056
        assert r.totals.params == TR_PARAMS == 33_472  # no batch norm: nothing folded
        assert r.totals.unsupported == {}
        assert "relax.nn.softmax" in op_names(r)
        # matmul FLOPs are 2 x MACs; elementwise/normalisation ops add FLOPs but no MACs
        mm = [o for o in r.to_json()["ops"] if o["category"] == "matmul"]
        assert sum(o["macs"] for o in mm) == TR_MACS and all(o["flops"] == 2 * o["macs"] for o in mm)


@needs_tf
def test_mobilenet_depthwise_nhwc(tf_models):
    r = analyze(tf_models["mobilenet"]["saved_model"], batch=2)
    assert r.totals.macs == 2 * MB_MACS == 213_312
    assert r.totals.unsupported == {}
    dw = [o for o in r.to_json()["ops"] if o["op"] == "relax.nn.conv2d" and o["output"]["shape"] == [2, 16, 16, 8]]
    # the first conv (3->8, stride 2) and the depthwise conv both give 2x16x16x8; the depthwise one costs
    # 2 x 16 x 16 x 8 x 9 = 36,864 MACs (a dense 8->8 3x3 conv would be 8x that)
    assert sorted(o["macs"] for o in dw) == [36_864, 110_592]
    # Keras holds 586 weights (conv 216, depthwise 72, pointwise 128, dense 170) + 3 BNs x 4 x C (32 + 32 + 64)
    # = 714; the converter folds each BN into a C-element conv bias: 3 x C fewer each, 714 - 96 = 618
    assert r.totals.params == (216 + 72 + 128 + 170) + (8 + 8 + 16) == 618


@needs_tf
def test_tflite_flops_nhwc_layout_attrs(tf_models):
    r = analyze(tf_models["mobilenet"]["tflite"])
    convs = [o for o in r.to_json()["ops"] if o["op"] == "relax.nn.conv2d"]
    assert [o["macs"] for o in convs] == [55_296, 18_432, 32_768]
    assert r.totals.macs == MB_MACS


def _operator_outputs(path: Path) -> dict[str, list[str]]:
    """The oracle for op names: each TFLite operator's first output tensor name, by builtin operator name, read
    from the flatbuffer with the tflite package."""
    import tflite
    from tflite.BuiltinOperator import BuiltinOperator

    names = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    sub = model.Subgraphs(0)
    out: dict[str, list[str]] = {}
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        kind = names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())]
        out.setdefault(kind, []).append(sub.Tensors(op.Outputs(0)).Name().decode())
    return out


@needs_tf
def test_tflite_ops_carry_tensor_names_and_layers(tf_models):
    """Every op is named after the TFLite operator it comes from (its output tensor, which TensorFlow's converter
    names after the Keras layers' scopes), and rolls up by layer."""
    path = tf_models["cnn"]["tflite"]
    oracle = _operator_outputs(path)
    doc = analyze(path).to_json()
    convs = [o for o in doc["ops"] if o["op"] == "relax.nn.conv2d"]
    assert [o["source"] for o in convs] == oracle["CONV_2D"]
    every = {n for names in oracle.values() for n in names}
    assert all(o["source"] in every for o in doc["ops"] if not o["folded"])
    # conv1 fused with its batch norm and ReLU: the layers it spans; the pooling layer on its own
    assert all("conv2d" in o["module"] for o in convs)
    assert [o["module"] for o in doc["ops"] if o["op"] == "relax.mean"] == [oracle["MEAN"][0].split("/")[1]]
    assert {m["module"] for m in doc["modules"]} >= {o["module"] for o in convs}


# ---- --batch and --input ---------------------------------------------------------------------------


@needs_tf
@pytest.mark.parametrize("fmt", ["keras", "saved_model"])
def test_batch_and_input_override(tf_models, fmt):
    p = tf_models["cnn"][fmt]
    assert analyze(p, batch=3).totals.macs == 3 * CNN_MACS
    r = analyze(p, inputs=["image:5x32x32x3"])
    assert r.inputs[0]["shape"] == [5, 32, 32, 3] and r.totals.macs == 5 * CNN_MACS
    # spatial dims are fixed by the file: changing them is a usage error naming the input
    assert "dimension 1 is fixed to 32" in fails(2, "analyze", p, "--input", "image:1x64x64x3")
    # the batch is dynamic in Keras files: leaving it unset names the flag that sets it
    msg = fails(2, "analyze", p)
    assert "image" in msg and "--batch" in msg
    assert "not among the model's inputs" in fails(2, "analyze", p, "--input", "nope:1x32x32x3")


@needs_tf
def test_tflite_fixed_batch(tf_models):
    p = tf_models["cnn"]["tflite"]
    assert analyze(p).totals.macs == CNN_MACS
    assert analyze(p, batch=1).totals.macs == CNN_MACS  # restating the file's shape is fine
    msg = fails(2, "analyze", p, "--batch", "8")
    assert "fixes every shape" in msg and "Keras model or SavedModel" in msg


@needs_tf
def test_report_sweeps_keras_and_skips_tflite_batches(tf_models):
    """A Keras model is re-traced at every swept batch; a .tflite file's shapes are fixed, so the sweep keeps
    its own batch and lists the others as skipped with the reason."""
    import analyzer

    keras = analyzer.report(tf_models["cnn"]["keras"], batch=1, devices=["h100-80gb"], batches=[1, 4])
    points = keras.sweep["devices"][0]["points"]
    assert [p["batch"] for p in points] == [1, 4] and not keras.sweep["skipped"]
    tfl = analyzer.report(tf_models["cnn"]["tflite"], devices=["h100-80gb"], batches=[1, 4])
    assert tfl.sweep["batches"] == [1]
    assert tfl.sweep["skipped"][0]["batch"] == 4 and "fixes every shape" in tfl.sweep["skipped"][0]["reason"]


@needs_tf
def test_tflite_dynamic_batch(tf_models):
    """from_keras_model keeps the batch dynamic; TVM imports a CNN's graph at the stored batch-1 shapes, but a
    graph that computes reshape targets at run time (the transformer) is refused with a hint."""
    assert analyze(tf_models["cnn"]["tflite_dynamic"]).totals.macs == CNN_MACS
    msg = fails(1, "analyze", tf_models["transformer"]["tflite_dynamic"])
    assert "dynamic batch" in msg and "--batch" in msg


@needs_tf
def test_cli_json_is_pure(tf_models):
    for fmt, framework in (("keras", "tensorflow"), ("saved_model", "tensorflow"), ("tflite", "tflite")):
        res = run("analyze", tf_models["transformer"][fmt], "--batch", "1", "--format", "json")
        assert res.exit_code == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["model"]["framework"] == framework and doc["totals"]["macs"] == TR_MACS


@needs_tf
def test_cli_subprocess_stdout_is_only_json(tf_models):
    """TensorFlow's C++ logs go to file descriptors, not sys.stdout: check a real process."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "analyzer.cli",
            "analyze",
            str(tf_models["cnn"]["keras"]),
            "--batch",
            "2",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["totals"]["macs"] == 2 * CNN_MACS
    assert out.stderr.strip() == ""


# ---- safety and bad files --------------------------------------------------------------------------


@needs_tf
def test_lambda_layer_refused(tmp_path):
    import keras

    marker = tmp_path / "pwned"
    inp = keras.Input((4,), name="x")
    out = keras.layers.Lambda(lambda t, p=str(marker): t * 2 + (0 if open(p, "w") else 0))(inp)
    marker.unlink(missing_ok=True)
    keras.Model(inp, out).save(tmp_path / "evil.keras")
    marker.unlink(missing_ok=True)
    msg = fails(2, "analyze", tmp_path / "evil.keras", "--batch", "1")
    assert "Lambda" in msg and "safe_mode" in msg
    assert not marker.exists()


@needs_tf
def test_a_recurrent_loop_says_to_unroll(tmp_path):
    """A Keras LSTM that is not unrolled converts to a while loop (a relax.If in the graph): refused with the fix
    (unroll=True); unrolled, the same layer analyses, its MACs by hand."""
    import keras

    def lstm(unroll: bool):
        inp = keras.Input((5, 3), name="x")
        return keras.Model(inp, keras.layers.LSTM(4, unroll=unroll)(inp))

    lstm(False).save(tmp_path / "loop.keras")
    msg = fails(1, "analyze", tmp_path / "loop.keras", "--batch", "1")
    assert "control flow" in msg and "unroll=True" in msg
    lstm(True).save(tmp_path / "unrolled.keras")
    doc = json.loads(run("analyze", tmp_path / "unrolled.keras", "--batch", "1", "--format", "json").stdout)
    # 4 gates x 4 units: 3 inputs at each of 5 steps, 4 recurrent at steps 2-5 (the converter folds step 1's
    # product with the zero initial state)
    assert doc["totals"]["macs"] == 4 * 4 * (5 * 3 + 4 * 4) == 496


def test_h5_refused(tmp_path):
    p = tmp_path / "model.h5"
    p.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    assert "model.keras" in fails(2, "analyze", p)


def test_corrupt_tflite(tmp_path):
    p = tmp_path / "model.tflite"
    p.write_bytes(b"definitely not a flatbuffer")
    assert "not a TFLite flatbuffer" in fails(2, "analyze", p)


@needs_tf
def test_truncated_tflite(tf_models, tmp_path):
    data = tf_models["cnn"]["tflite"].read_bytes()
    p = tmp_path / "model.tflite"
    p.write_bytes(data[: len(data) // 3])
    assert "corrupt TFLite file" in fails(2, "analyze", p)


@needs_tf
def test_corrupt_keras_and_saved_model(tmp_path):
    p = tmp_path / "model.keras"
    p.write_bytes(b"PK\x03\x04 not really a zip")
    assert "not a loadable Keras file" in fails(2, "analyze", p, "--batch", "1")
    d = tmp_path / "sm"
    d.mkdir()
    (d / "saved_model.pb").write_bytes(b"\x08\x01garbage\xff\xff")
    assert "not a loadable SavedModel" in fails(2, "analyze", d, "--batch", "1")


def test_unknown_directory(tmp_path):
    assert "neither a TensorFlow SavedModel" in fails(2, "analyze", tmp_path)


# ---- missing extra ---------------------------------------------------------------------------------


@pytest.mark.parametrize("blocked, name", [("tensorflow", "model.keras"), ("tflite", "model.tflite")])
def test_missing_extra(monkeypatch, tmp_path, blocked, name):
    monkeypatch.setitem(sys.modules, blocked, None)  # `import blocked` now raises ImportError
    p = tmp_path / name
    p.write_bytes(b"PK\x03\x04" + b"\0" * 64 if name.endswith(".keras") else b"\0\0\0\0TFL3" + b"\0" * 64)
    msg = fails(2, "analyze", p, "--batch", "1")
    assert 'pip install -c constraints.txt -e ".[tensorflow]"' in msg


def test_saved_model_missing_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    (tmp_path / "saved_model.pb").write_bytes(b"\x08\x01")
    assert 'pip install -c constraints.txt -e ".[tensorflow]"' in fails(2, "analyze", tmp_path, "--batch", "1")


def test_onnx_route_imports_no_framework(tmp_path):
    """`preflight analyze model.onnx` must not import TensorFlow or Paddle (seconds of start-up, log noise)."""
    code = (
        "import sys, onnx\nfrom onnx import helper, TensorProto\n"
        "x = helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 4])\n"
        "y = helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, 4])\n"
        "g = helper.make_graph([helper.make_node('Relu', ['x'], ['y'])], 'g', [x], [y])\n"
        f"onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), r'{tmp_path}/m.onnx')\n"
        f"from analyzer import analyze\nanalyze(r'{tmp_path}/m.onnx')\n"
        "bad = [m for m in ('tensorflow', 'keras', 'tflite', 'paddle', 'paddle2onnx') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
