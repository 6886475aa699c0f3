"""Paddle frontend: inference models written by `paddle.jit.save` (Paddle 3: model.json + model.pdiparams; the
legacy model.pdmodel too), converted by paddle2onnx and imported as ONNX. Also: one CNN written in torch,
Keras and Paddle."""

from __future__ import annotations

import json
import pickle
import sys
from importlib.util import find_spec

import numpy as np
import pytest
from test_cli import fails, run  # the CLI helpers (tests/ is on sys.path)

from analyzer import analyze

HAS_PADDLE = find_spec("paddle") is not None and find_spec("paddle2onnx") is not None
HAS_TF = find_spec("tensorflow") is not None and find_spec("tflite") is not None
needs_paddle = pytest.mark.skipif(
    not HAS_PADDLE, reason="the paddle extra is not installed: pip install -c constraints.txt -e '.[paddle]'"
)

# CNN, same as tests/test_tensorflow.py but NCHW: conv3x3(3->16, pad 1, no bias) -> BN -> relu
# -> conv3x3(16->32, stride 2, pad 1) -> relu -> global average pool -> linear(32->10)
CNN_MACS = 32 * 32 * 16 * 27 + 16 * 16 * 32 * 144 + 32 * 10  # 442,368 + 1,179,648 + 320 = 1,622,336
CNN_PARAMS = 432 + 4 * 16 + 4608 + 32 + 330  # conv1, BN (weight, bias, mean, variance), conv2, linear = 5,466
# MLP: linear(64->128) -> relu -> linear(128->10)
MLP_MACS = 64 * 128 + 128 * 10  # 8,192 + 1,280 = 9,472
MLP_PARAMS = 64 * 128 + 128 + 128 * 10 + 10  # 9,610


def _randomize(layer, seed: int) -> None:
    import paddle

    rng = np.random.default_rng(seed)
    for _, t in list(layer.named_parameters()) + list(layer.named_buffers()):
        t.set_value(paddle.to_tensor(rng.uniform(0.5, 1.5, t.shape).astype("float32")))


def paddle_cnn():
    import paddle
    from paddle import nn

    class CNN(nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2D(3, 16, 3, padding=1, bias_attr=False)
            self.bn = nn.BatchNorm2D(16)
            self.conv2 = nn.Conv2D(16, 32, 3, stride=2, padding=1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = nn.functional.relu(self.bn(self.conv1(x)))
            x = nn.functional.relu(self.conv2(x))
            return self.fc(paddle.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return CNN()


def paddle_mlp():
    from paddle import nn

    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def jit_save(layer, folder, shape, seed):
    import paddle

    _randomize(layer, seed)
    layer.eval()
    paddle.jit.save(layer, str(folder / "model"), input_spec=[paddle.static.InputSpec(shape, "float32", name="x")])
    return folder


@pytest.fixture(scope="module")
def pd_models(tmp_path_factory):
    if not HAS_PADDLE:
        pytest.skip("the paddle extra is not installed")
    root = tmp_path_factory.mktemp("paddle")
    (root / "cnn").mkdir()
    (root / "mlp").mkdir()
    return {
        "cnn": jit_save(paddle_cnn(), root / "cnn", [None, 3, 32, 32], 0),
        "mlp": jit_save(paddle_mlp(), root / "mlp", [None, 64], 1),
    }


@needs_paddle
def test_jit_save_writes_pir_files(pd_models):
    assert sorted(p.name for p in pd_models["cnn"].iterdir()) == ["model.json", "model.pdiparams"]


@needs_paddle
@pytest.mark.parametrize("which", ["dir", "json", "pdiparams"])
def test_cnn(pd_models, which):
    d = pd_models["cnn"]
    path = {"dir": d, "json": d / "model.json", "pdiparams": d / "model.pdiparams"}[which]
    r = analyze(path, batch=1)
    assert r.model["framework"] == "paddle"
    assert r.model["name"] == "cnn"  # model.json / model.pdiparams: the folder names the model
    assert r.inputs == [{"name": "x", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert r.totals.macs == CNN_MACS == 1_622_336
    assert r.totals.params == CNN_PARAMS == 5_466  # BN stays a BatchNormalization op: nothing folded
    assert r.totals.unsupported == {}
    convs = [o for o in r.to_json()["ops"] if o["op"] == "relax.nn.conv2d"]
    assert [o["macs"] for o in convs] == [442_368, 1_179_648] and all(o["flops"] == 2 * o["macs"] for o in convs)


@needs_paddle
def test_legacy_pdmodel(tmp_path):
    """The same CNN saved in the pre-PIR format (model.pdmodel, a protobuf program) that Paddle 2 wrote and
    Paddle 3 still writes with FLAGS_enable_pir_api=0; the flag must be set before paddle is imported, so a
    child process saves it."""
    import os
    import subprocess
    from pathlib import Path

    tests = Path(__file__).resolve().parent
    code = (
        "import sys, pathlib; sys.path.insert(0, sys.argv[1]); from test_paddle import jit_save, paddle_cnn; "
        "jit_save(paddle_cnn(), pathlib.Path(sys.argv[2]), [None, 3, 32, 32], 0)"
    )
    env = {**os.environ, "FLAGS_enable_pir_api": "0"}
    subprocess.run(
        [sys.executable, "-c", code, str(tests), str(tmp_path)], env=env, check=True, capture_output=True, timeout=300
    )
    assert {"model.pdmodel", "model.pdiparams"} <= {p.name for p in tmp_path.iterdir()}
    assert not (tmp_path / "model.json").exists()
    for path in (tmp_path, tmp_path / "model.pdmodel"):
        r = analyze(path, batch=2)
        assert r.model["framework"] == "paddle" and r.totals.unsupported == {}
        assert r.totals.macs == 2 * CNN_MACS and r.totals.params == CNN_PARAMS


@needs_paddle
def test_mlp_flops(pd_models):
    r = analyze(pd_models["mlp"], batch=4)
    assert r.totals.macs == 4 * MLP_MACS == 37_888
    mm = [o for o in r.to_json()["ops"] if o["category"] == "matmul"]
    assert sum(o["flops"] for o in mm) == 2 * 4 * MLP_MACS  # 75,776
    assert r.totals.params == MLP_PARAMS == 9_610


@needs_paddle
def test_batch_and_input_override(pd_models):
    d = pd_models["cnn"]
    assert analyze(d, batch=3).totals.macs == 3 * CNN_MACS
    r = analyze(d, inputs=["x:5x3x32x32"])
    assert r.inputs[0]["shape"] == [5, 3, 32, 32] and r.totals.macs == 5 * CNN_MACS
    msg = fails(2, "analyze", d)
    assert "'x'" in msg and "--batch" in msg
    assert "fixed to 32" in fails(2, "analyze", d, "--input", "x:1x3x64x64")
    assert analyze(pd_models["mlp"], inputs=["x:7x64"]).totals.macs == 7 * MLP_MACS


@needs_paddle
def test_cli_json(pd_models, capfd):
    res = run("analyze", pd_models["mlp"], "--batch", "2", "--format", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["model"]["framework"] == "paddle" and doc["totals"]["macs"] == 2 * MLP_MACS
    out, err = capfd.readouterr()  # paddle2onnx prints from C++ to fd 1: none of it may leak
    assert "Paddle2ONNX" not in out and "Paddle2ONNX" not in err


# ---- bad and hostile files -------------------------------------------------------------------------


@needs_paddle
def test_corrupt_files(pd_models, tmp_path):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(pd_models["cnn"], d)
    (d / "model.json").write_text("{not json")
    assert "invalid JSON" in fails(2, "analyze", d, "--batch", "1")
    (d / "model.json").write_text('{"hello": 1}')
    assert "not a Paddle program" in fails(2, "analyze", d, "--batch", "1")
    shutil.copy(pd_models["cnn"] / "model.json", d / "model.json")
    data = (pd_models["cnn"] / "model.pdiparams").read_bytes()
    (d / "model.pdiparams").write_bytes(data[: len(data) // 2])
    msg = fails(2, "analyze", d, "--batch", "1")
    assert "model.pdiparams" in msg and "invalid ONNX graph" in msg and "truncated" in msg
    (d / "model.pdiparams").unlink()
    msg = fails(2, "analyze", d / "model.json", "--batch", "1")
    # a .json without its parameters
    assert "neither a transformers config" in msg and "a .pdiparams file beside it" in msg


class _Touch:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@needs_paddle
def test_pickled_params_never_run(pd_models, tmp_path):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(pd_models["mlp"], d)
    marker = tmp_path / "pwned"
    (d / "model.pdiparams").write_bytes(pickle.dumps(_Touch(marker)))
    assert "paddle2onnx crashed" in fails(2, "analyze", d, "--batch", "1")
    assert not marker.exists()


@pytest.mark.parametrize("blocked", ["paddle", "paddle2onnx"])
def test_missing_extra(monkeypatch, tmp_path, blocked):
    monkeypatch.setitem(sys.modules, blocked, None)
    (tmp_path / "model.json").write_text('{"program": {}}')
    (tmp_path / "model.pdiparams").write_bytes(b"\0" * 16)
    assert 'pip install -c constraints.txt -e ".[paddle]"' in fails(2, "analyze", tmp_path, "--batch", "1")


# ---- one architecture, three frameworks -------------------------------------------------------------


@needs_paddle
@pytest.mark.skipif(not HAS_TF, reason="the tensorflow extra is not installed")
def test_same_cnn_in_torch_keras_paddle(pd_models, tmp_path):
    """MACs agree exactly. Params: torch (weights + the BN buffers the graph reads) and Paddle (BN's four
    tensors) hold 5,466; TensorFlow's converter folds BN into conv1 (4 x 16 tensors -> a 16-element bias),
    5,418: 48 fewer. FLOPs differ only where BN was: a batch_norm op in torch/Paddle, a bias add in Keras."""
    import torch
    from test_tensorflow import keras_cnn  # tests/ is on sys.path (pytest prepend import mode)
    from torch import nn

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(16)
            self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = torch.relu(self.conv2(torch.relu(self.bn(self.conv1(x)))))
            return self.fc(x.mean((2, 3)))

    reports = {"torch": analyze(CNN().eval(), (torch.randn(2, 3, 32, 32),))}
    keras_path = tmp_path / "cnn.keras"
    keras_cnn().save(keras_path)
    reports["keras"] = analyze(keras_path, batch=2)
    reports["paddle"] = analyze(pd_models["cnn"], batch=2)
    totals = {k: r.totals for k, r in reports.items()}
    assert totals["torch"].macs == totals["keras"].macs == totals["paddle"].macs == 2 * CNN_MACS
    assert totals["torch"].params == totals["paddle"].params == CNN_PARAMS == 5_466
    assert totals["keras"].params == CNN_PARAMS - 48 == 5_418
    # FLOPs: torch and Paddle count batch_norm at 4 FLOPs per element of 2x16x32x32 (32,768 elements):
    # 131,072; Keras's folded bias add counts 1 per element: 32,768. Everything else is equal.
    assert totals["torch"].flops == totals["paddle"].flops == 6_702_356
    assert totals["keras"].flops == 6_702_356 - 131_072 + 32_768 == 6_604_052


# ---- symbolic: one conversion, every batch (docs/symbolic.md) ----------------------------------------------


@pytest.fixture(scope="module")
def pd_symbolic(pd_models):
    from analyzer.symbolic import formulas, load_symbolic

    sm = load_symbolic(str(pd_models["cnn"]))
    return sm, formulas(sm)


@needs_paddle
@pytest.mark.parametrize("batch", (2, 5, 17))
def test_symbolic_paddle_equals_the_model_converted_at_each_batch(pd_models, pd_symbolic, batch):
    """The oracle of each point: the model converted and imported at that batch (`--batch`), op for op, kernel view
    and prediction; the formulas against the hand counts of the CNN."""
    from test_symbolic_files import _same  # tests/ is on sys.path

    from analyzer.pipeline import analyze_model
    from analyzer.symbolic import analyze_at

    sm, costs = pd_symbolic
    assert sm.graph.symbols == ("batch",) and sm.batch_range == (2, 2**31 - 1)  # paddle2onnx: an unbounded dim
    assert sm.loaded.framework == "paddle" and sm.loaded.name == "cnn"
    oracle = analyze_model(str(pd_models["cnn"]), batch=batch)
    _same(analyze_at(sm, batch), oracle)
    assert costs.exact
    assert costs.totals["macs"].at({"batch": batch}) == batch * CNN_MACS == oracle.analysis.totals.macs
    assert costs.totals["params"].at({"batch": batch}) == CNN_PARAMS
    for k, f in costs.totals.items():
        assert f.at({"batch": batch}) == getattr(oracle.analysis.totals, k), k


@needs_paddle
@pytest.mark.parametrize("which", ["dir", "json", "pdiparams"])
def test_cli_symbolic_of_a_paddle_model(pd_models, which):
    d = pd_models["mlp"]
    path = {"dir": d, "json": d / "model.json", "pdiparams": d / "model.pdiparams"}[which]
    res = run("analyze", path, "--symbolic")
    assert res.exit_code == 0, res.stderr
    assert f"MACs                     = {MLP_MACS:,} x batch" in res.stdout  # 9,472 per sample, by hand above
    assert f"parameters               = {MLP_PARAMS:,}" in res.stdout


@needs_paddle
def test_paddle_sweep_converts_once(pd_models, monkeypatch):
    """`report --batches`: one conversion for every batch from 2 (batch 1, below the range, on its own), the points
    equal to the sweep that converts the model at each batch."""
    from analyzer.frontends import paddle_frontend
    from analyzer.sweep import run_sweep

    calls: list[str] = []
    real = paddle_frontend._convert
    monkeypatch.setattr(paddle_frontend, "_convert", lambda p, *a: (calls.append(p.name), real(p, *a))[1])
    kwargs = {"inputs": None, "batches": [1, 2, 4, 8], "devices": ["h100-80gb"], "latency_slo_ms": None}
    one, _ = run_sweep(str(pd_models["cnn"]), None, strict=False, **kwargs)
    assert len(calls) == 2 and one["symbolic"]["batches"] == [2, 4, 8]
    each, _ = run_sweep(str(pd_models["cnn"]), None, strict=False, symbolic=False, **kwargs)
    assert len(calls) == 2 + 4 and each["symbolic"]["batches"] == []
    assert one["devices"][0]["points"] == each["devices"][0]["points"]
    assert [p["batch"] for p in one["devices"][0]["points"]] == [1, 2, 4, 8]


@needs_paddle
def test_paddle_largest_batch_against_the_model_converted_there(pd_models):
    from analyzer.api import predict as predict_model
    from analyzer.pipeline import analyze_model
    from predictor.predict import predict

    rep = predict_model(str(pd_models["mlp"]), device="a100-40gb", batch=2, largest_batch=True)
    b = rep.predictions[0].mig.largest_batch.per_profile["1g.5gb"]

    def fits(n: int) -> bool:  # the oracle: the model converted at batch n, predicted
        return predict(analyze_model(str(pd_models["mlp"]), batch=n).analysis, "a100-40gb")[0].mig.fits["1g.5gb"]

    assert 2 < b and fits(b) and not fits(b + 1)


@needs_paddle
def test_paddle_symbolic_refusals(tmp_path):
    from analyzer.errors import UnreadableModelError, UsageError
    from analyzer.frontends import takes_symbolic
    from analyzer.symbolic import load_symbolic

    d = jit_save(paddle_mlp(), tmp_path, [3, 64], 1)
    assert takes_symbolic(d) and takes_symbolic(d / "model.json") and not takes_symbolic(tmp_path / "x.keras")
    with pytest.raises(UsageError, match=r"^model\.json: dimension 0 of the inputs is fixed") as err:  # not the .onnx's
        load_symbolic(str(d))
    assert "save the model with None on dimension 0 of its paddle.static.InputSpec" in str(err.value)
    with pytest.raises(UnreadableModelError, match="no such file or directory"):
        load_symbolic(str(d / "nope.json"))
    res = run("analyze", d, "--symbolic")
    assert res.exit_code == 2 and "dimension 0 of the inputs is fixed" in res.stderr and "Traceback" not in res.stderr
    (d / "other.json").write_bytes((d / "model.json").read_bytes())  # a second program in the folder
    (d / "other.pdiparams").write_bytes((d / "model.pdiparams").read_bytes())
    with pytest.raises(UsageError, match=r"several Paddle models in one directory \(model\.json, other\.json\)"):
        load_symbolic(str(d))


@needs_paddle
def test_analyze_many_rows_of_a_paddle_model_share_one_conversion(pd_models, tmp_path, monkeypatch):
    from analyzer import batch
    from analyzer.frontends import paddle_frontend

    monkeypatch.setattr(batch, "_symbolic", batch.OrderedDict())  # this test's worker cache, empty
    calls: list[str] = []
    real = paddle_frontend._convert
    monkeypatch.setattr(paddle_frontend, "_convert", lambda p, *a: (calls.append(p.name), real(p, *a))[1])

    rows = [{"model": str(pd_models["mlp"]), "batch": b} for b in (2, 6)] + [
        {"model": str(pd_models["mlp"]), "batch": 3, "inputs": ["x:3x64"]}  # shapes from --input: on its own
    ]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    jobs = batch.mark_shared(batch.read_manifest(manifest)[0])
    assert [j.shared for j in jobs] == [True, True, False]
    done = [batch.analyze_task(j) for j in jobs]
    assert [r["totals"]["macs"] for r in done] == [2 * MLP_MACS, 6 * MLP_MACS, 3 * MLP_MACS]
    key = (str(pd_models["mlp"]), None)
    assert list(batch._symbolic) == [key] and batch._symbolic[key] is not None
    assert len(calls) == 2  # one for the two shared rows (the symbolic import), one for the row with --input


@needs_paddle
def test_paddle_sequence_dim_symbolic_named_by_input_and_axis(tmp_path):
    """paddle2onnx names every `None` dimension "DynamicDimension.N"; preflight names such a dim by its input and axis,
    as an unnamed ONNX dim: `x[1]`. The MLP on b x s x 64: 9,472 MACs per (sample, position), by hand above."""
    from test_symbolic_files import _same  # tests/ is on sys.path

    from analyzer.errors import MissingShapeError
    from analyzer.pipeline import analyze_model
    from analyzer.symbolic import analyze_at, formulas, load_symbolic, require_values

    d = jit_save(paddle_mlp(), tmp_path, [None, None, 64], 1)
    with pytest.raises(MissingShapeError, match=r"dimension 1 \('x\[1\]'\) is dynamic: set it with --input x:\?xNx\?"):
        require_values(load_symbolic(str(d)))
    sm = load_symbolic(str(d), inputs=["x:?x10x64"])
    assert sm.graph.symbols == ("batch", "x[1]") and sm.values == {"x[1]": 10}
    macs = formulas(sm).totals["macs"]
    assert macs.coefficient((("batch", 1), ("x[1]", 1))) == MLP_MACS and len(macs.terms) == 1
    _same(analyze_at(sm, 3, **{"x[1]": 7}), analyze_model(str(d), inputs=["x:3x7x64"]))
