"""The `preflight` command line (docs/design.md: CLI, exit codes, JSON report preflight.report/1).

Models are built inside the tests: a hand-made ONNX conv (exact numbers), a small torch CNN saved as
.pt2 and exported to ONNX, and a .pt2 using ATen ops TVM's importer lacks.
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
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from analyzer.cli import cli

REPO = Path(__file__).resolve().parents[1]

TOP_KEYS = {"schema", "tool", "model", "inputs", "totals", "ops", "modules", "kernels", "graph", "warnings"}
TOTALS_KEYS = {
    "flops",
    "macs",
    "params",
    "param_bytes",
    "peak_activation_bytes",
    "bytes_read",
    "bytes_written",
    "op_count",
    "unsupported",
    "incomplete",
    "macs_by_dtype",
}
OP_KEYS = {
    "index",
    "name",
    "op",
    "category",
    "flops",
    "macs",
    "bytes_read",
    "bytes_written",
    "inputs",
    "output",
    "weight_bytes",
}
CATEGORIES = {
    "conv",
    "matmul",
    "attention",
    "elementwise",
    "reduction",
    "normalization",
    "pooling",
    "data_movement",
    "other",
}


# ---- helpers -----------------------------------------------------------------------------


def run(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def ok(*args: str):
    res = run(*args)
    assert res.exit_code == 0, (res.exit_code, res.stderr, res.exception)
    return res


def ok_json(*args: str) -> dict:
    res = ok(*args, "--format", "json")
    return json.loads(res.stdout)  # stdout holds only the JSON document


def fails(code: int, *args: str) -> str:
    """Run, expect exit `code` with a short error on stderr and no traceback; return the message."""
    res = run(*args)
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr, res.exception)
    assert isinstance(res.exception, SystemExit), repr(res.exception)  # nothing escaped the CLI
    assert "Traceback" not in res.output and "Traceback" not in res.stderr
    assert res.stdout == ""
    msg = res.stderr.strip()
    assert msg, "an error must say something"
    assert len(msg.splitlines()) <= 2, msg
    return msg


def click_usage_fails(*args: str) -> str:
    """A usage error click detects: exit 2, one 'error: ...' line on stderr naming the --help to read."""
    res = run(*args)
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr, res.exception)
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--help" in lines[0], res.stderr
    return lines[0]


def hand_onnx(path: Path, *, batch: str | int = "N", bias: bool = True, conv: bool = True) -> Path:
    """x[batch,3,8,8] -> Conv(3->4, 3x3, pad 1, weight (+bias) initializers) -> Relu -> y."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4 if conv else 3, 8, 8])
    inits, nodes = [], []
    if conv:
        inits.append(numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w"))
        ins = ["x", "w"]
        if bias:
            inits.append(numpy_helper.from_array(np.zeros((4,), np.float32), "b"))
            ins.append("b")
        nodes.append(helper.make_node("Conv", ins, ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", ["c" if conv else "x"], ["y"]))
    graph = helper.make_graph(nodes, "tiny", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


# ---- fixtures (built once per module) -------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    import torch

    d = tmp_path_factory.mktemp("cli_models")

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.pool = torch.nn.AdaptiveAvgPool2d(1)
            self.fc = torch.nn.Linear(8, 10)

        def forward(self, x):
            x = torch.relu(self.bn(self.conv(x)))
            return self.fc(torch.flatten(self.pool(x), 1))

    class Exotic(torch.nn.Module):  # ATen ops TVM 0.27's importer has no conversion for
        def forward(self, x):
            return torch.special.bessel_j0(x) + torch.lgamma(x)

    class AMax(torch.nn.Module):  # amax.default: TVM lacks it, preflight converts it
        def forward(self, x):
            return torch.amax(x, dim=1)

    torch.manual_seed(0)
    cnn, x = CNN().eval(), torch.randn(1, 3, 8, 8)
    out = {
        "cnn_pt2": d / "cnn.pt2",
        "cnn_onnx": d / "cnn.onnx",
        "exotic": d / "exotic.pt2",
        "amax": d / "amax.pt2",
        "dyn_pt2": d / "dyn.pt2",
    }
    torch.export.save(torch.export.export(cnn, (x,)), out["cnn_pt2"])
    torch.onnx.export(cnn, (x,), str(out["cnn_onnx"]), dynamo=True, verbose=False)
    batch = torch.export.Dim("batch", min=1, max=64)
    dyn = torch.export.export(cnn, (torch.randn(2, 3, 8, 8),), dynamic_shapes={"x": {0: batch}})
    torch.export.save(dyn, out["dyn_pt2"])
    torch.export.save(torch.export.export(Exotic(), (torch.rand(2, 5) + 1,)), out["exotic"])
    torch.export.save(torch.export.export(AMax(), (torch.randn(2, 5),)), out["amax"])
    out["tiny"] = hand_onnx(d / "tiny.onnx")
    out["relu"] = hand_onnx(d / "relu.onnx", conv=False)
    return out


# ---- formats and the JSON schema ---------------------------------------------------------------


def check_schema(doc: dict) -> None:
    assert set(doc) == TOP_KEYS  # no "prediction" for analyze
    assert doc["schema"] == "preflight.report/1"
    assert doc["tool"]["name"] == "preflight" and isinstance(doc["tool"]["version"], str)
    assert set(doc["model"]) == {"source", "framework", "name", "sha256"}
    for inp in doc["inputs"]:
        assert set(inp) == {"name", "shape", "dtype"}
        assert all(isinstance(d, int) for d in inp["shape"])
    assert set(doc["totals"]) == TOTALS_KEYS
    for k in TOTALS_KEYS - {"unsupported", "incomplete", "macs_by_dtype"}:
        assert isinstance(doc["totals"][k], int) and doc["totals"][k] >= 0, k
    assert isinstance(doc["totals"]["unsupported"], dict)
    assert doc["totals"]["incomplete"] is bool(doc["totals"]["unsupported"])
    assert sum(doc["totals"]["macs_by_dtype"].values()) == doc["totals"]["macs"]
    assert doc["ops"], "no operators"
    for i, op in enumerate(doc["ops"]):
        assert OP_KEYS <= set(op), set(op) ^ OP_KEYS
        assert op["index"] == i
        assert isinstance(op["name"], str) and op["op"].startswith("relax.")
        assert op["category"] in CATEGORIES
        for k in ("flops", "macs", "bytes_read", "bytes_written", "weight_bytes"):
            assert isinstance(op[k], int) and op[k] >= 0, (op, k)
        for t in op["inputs"]:
            assert set(t) == {"shape", "dtype"}
        assert op["output"] is None or set(op["output"]) == {"shape", "dtype"}
    assert set(doc["graph"]) == {"nodes", "edges"}
    assert doc["graph"]["nodes"] == len(doc["ops"])
    assert isinstance(doc["graph"]["edges"], int)
    assert isinstance(doc["warnings"], list)


@pytest.mark.parametrize("key", ["tiny", "cnn_pt2", "cnn_onnx"])
def test_analyze_json_schema(models, key):
    extra = ("--batch", "2") if key == "tiny" else ()
    doc = ok_json("analyze", models[key], *extra)
    check_schema(doc)
    assert doc["model"]["framework"] == ("torch" if key == "cnn_pt2" else "onnx")
    assert doc["totals"]["flops"] >= 2 * doc["totals"]["macs"] > 0
    assert doc["totals"]["unsupported"] == {} and doc["warnings"] == []


@pytest.mark.parametrize("fmt", ["table", "markdown"])
@pytest.mark.parametrize("key", ["tiny", "cnn_pt2", "cnn_onnx"])
def test_analyze_text_formats(models, key, fmt):
    extra = ("--batch", "2") if key == "tiny" else ()
    res = ok("analyze", models[key], "--format", fmt, *extra)
    assert res.stderr == ""
    assert "MACs" in res.stdout and "params" in res.stdout
    if fmt == "markdown":
        assert res.stdout.startswith("# preflight analysis")
        assert "|---|---|" in res.stdout
    else:
        assert res.stdout.startswith("model")
        assert "nn.conv2d" in res.stdout


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_explain_says_what_every_row_means(models, fmt):
    out = ok("predict", models["tiny"], "--batch", "2", "--format", fmt, "--explain").stdout
    plain = ok("predict", models["tiny"], "--batch", "2", "--format", fmt).stdout
    assert "what the rows mean" in out.lower() and "what the rows mean" not in plain.lower()
    for row in ("FLOPs", "MACs", "params", "peak activations", "roofline bound", "MIG slice"):
        assert row in out.split("hat the rows mean")[1], row
    assert out.startswith(plain.rstrip("\n").split("\n")[0])


def test_explain_covers_exactly_the_rows_shown(models):
    from analyzer.render import EXPLAIN

    def rows_and_meant(*args):
        out = ok(*args, models["tiny"], "--batch", "2", "--explain").stdout
        head, meant = out.split("what the rows mean:")
        rows = [line[:22].strip() for line in head.split("\n\n")[0].splitlines()]  # the summary block
        meant_rows = [line[2:24].strip() for line in meant.splitlines() if line[2:3].strip()]
        return rows, meant_rows

    rows, meant = rows_and_meant("predict")
    assert len(rows) >= 18 and "rests on" in rows and "CUDA kernels" in rows
    keys = {k: set(k.split(" / ")) | {k} for k, _ in EXPLAIN}
    for row in rows:  # every row shown is explained
        assert any(row in names for names in keys.values()), row
    rows, meant = rows_and_meant("analyze")
    assert "latency" not in rows and not any("latency" in m or "MIG" in m for m in meant)  # only rows shown
    assert "CUDA kernels" in meant and "unsupported" in meant


@pytest.mark.parametrize(
    "suffix, start", [(".json", '{\n  "schema": "preflight.report/1"'), (".md", "# preflight"), (".html", "<!DOCTYPE")]
)
def test_output_format_follows_the_suffix(models, tmp_path, suffix, start):
    out = tmp_path / f"r{suffix}"
    ok("predict", models["tiny"], "--batch", "2", "-o", str(out))
    assert out.read_text().startswith(start)
    ok("analyze", models["tiny"], "--batch", "2", "-o", str(out), "--format", "table")  # --format wins
    assert out.read_text().startswith("model ")


def test_table_is_default_format(models):
    assert (
        ok("analyze", models["tiny"], "--batch", "2").stdout
        == ok("analyze", models["tiny"], "--batch", "2", "--format", "table").stdout
    )


def test_hand_built_conv_numbers(models):
    doc = ok_json("analyze", models["tiny"], "--batch", "2")
    t = doc["totals"]
    assert doc["inputs"] == [{"name": "x", "shape": [2, 3, 8, 8], "dtype": "float32"}]
    # Conv 3->4, 3x3, pad 1 on 2x3x8x8: out 2x4x8x8 = 512 elements, each 3*3*3 = 27 MACs
    # MACs = 2*4*8*8*27 = 13824; conv FLOPs = 2 * 13824 = 27648
    assert t["macs"] == 13824
    conv = [o for o in doc["ops"] if o["op"] == "relax.nn.conv2d"]
    assert len(conv) == 1
    conv = conv[0]
    assert conv["category"] == "conv"
    assert conv["macs"] == 13824 and conv["flops"] == 27648
    assert conv["output"] == {"shape": [2, 4, 8, 8], "dtype": "float32"}
    assert conv["inputs"][0] == {"shape": [2, 3, 8, 8], "dtype": "float32"}
    assert conv["inputs"][1] == {"shape": [4, 3, 3, 3], "dtype": "float32"}
    # weight 4*3*3*3 = 108 floats = 432 bytes; reads x (2*3*8*8*4 = 1536 B) + weight (432 B) = 1968 B;
    # writes 2*4*8*8*4 = 2048 B
    assert conv["weight_bytes"] == 432
    assert conv["bytes_read"] == 1536 + 432
    assert conv["bytes_written"] == 2048
    # params: weight 108 + bias 4 = 112 elements, 448 bytes of float32
    assert t["params"] == 112 and t["param_bytes"] == 448
    # relu: 1 FLOP per element of 2x4x8x8 = 512 FLOPs; the bias add also 512
    relu = [o for o in doc["ops"] if o["op"] == "relax.nn.relu"][0]
    assert relu["flops"] == 512 and relu["macs"] == 0
    assert relu["bytes_read"] == relu["bytes_written"] == 2048
    # total FLOPs = 27648 (conv) + 512 (bias add) + 512 (relu) = 28672
    assert t["flops"] == 28672
    assert t["flops"] == sum(o["flops"] for o in doc["ops"])


def test_dtype_knob_retargets_every_float_tensor(models):
    doc = ok_json("analyze", models["tiny"], "--batch", "2", "--dtype", "float16")
    conv = [o for o in doc["ops"] if o["op"] == "relax.nn.conv2d"][0]
    # the fp32 numbers of test_hand_built_conv_numbers, at 2 bytes per element: x 2*3*8*8*2 = 768 B,
    # weight 108*2 = 216 B, output 2*4*8*8*2 = 1024 B; FLOPs and params do not change
    assert conv["bytes_read"] == 768 + 216 and conv["bytes_written"] == 1024 and conv["flops"] == 27648
    assert doc["inputs"] == [{"name": "x", "shape": [2, 3, 8, 8], "dtype": "float16"}]
    assert doc["totals"]["params"] == 112 and doc["totals"]["param_bytes"] == 112 * 2
    assert any("--dtype" in w for w in doc["warnings"])
    # the zoo's own float16 build (the module cast with .half()) gives the same bytes as the knob
    knob = ok_json("analyze", "zoo:resnet18?resolution=32", "--dtype", "float16")["totals"]
    built = ok_json("analyze", "zoo:resnet18?resolution=32&dtype=float16")["totals"]
    assert knob == built


def test_torch_cnn_numbers_agree_across_formats(models):
    # conv 3->8 3x3 pad 1 on 1x3x8x8: 8*8*8 outputs * 27 = 13824 MACs; linear 8->10: 80 MACs
    # -> 13904 MACs, whether read from the .pt2 or its ONNX export (which may fold the batch norm)
    pt2 = ok_json("analyze", models["cnn_pt2"])
    onx = ok_json("analyze", models["cnn_onnx"])
    assert pt2["totals"]["macs"] == onx["totals"]["macs"] == 13824 + 80
    assert pt2["inputs"] == [{"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32"}]
    assert onx["inputs"] == [{"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32"}]
    # params: conv 8*3*3*3 + 8 = 224, linear 8*10 + 10 = 90 (+ bn 4*8 = 32 unless folded)
    assert pt2["totals"]["params"] == 224 + 32 + 90
    assert onx["totals"]["params"] in (224 + 90, 224 + 32 + 90)


# ---- -o FILE ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "table", "markdown"])
def test_output_file(models, tmp_path, fmt):
    out = tmp_path / f"report.{fmt}"
    res = ok("analyze", models["tiny"], "--batch", "2", "--format", fmt, "-o", out)
    assert res.stdout == ""
    assert res.stderr.strip() == f"wrote {out}"
    text = out.read_text()
    if fmt == "json":
        check_schema(json.loads(text))
    else:
        assert "MACs" in text
    # the same document but for when it was made (two runs may straddle a second or a minute)
    import re

    def undated(t: str) -> str:
        t = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", "<created>", t)
        return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "<created>", t)

    again = ok("analyze", models["tiny"], "--batch", "2", "--format", fmt).stdout
    assert undated(text) == undated(again)


def test_output_to_unwritable_place(models, tmp_path):
    msg = fails(2, "analyze", models["tiny"], "--batch", "2", "-o", tmp_path / "no" / "such" / "dir" / "r.json")
    assert msg.startswith("error: cannot write") and "r.json" in msg


# ---- shapes: --batch and --input ----------------------------------------------------------------


def test_batch_and_input_set_a_dynamic_batch(models):
    b2 = ok_json("analyze", models["tiny"], "--batch", "2")["totals"]
    b4 = ok_json("analyze", models["tiny"], "--batch", "4")["totals"]
    i4 = ok_json("analyze", models["tiny"], "--input", "x:4x3x8x8")
    assert i4["inputs"] == [{"name": "x", "shape": [4, 3, 8, 8], "dtype": "float32"}]
    assert b4["macs"] == 2 * b2["macs"] == 2 * 13824
    assert b4["flops"] == 2 * b2["flops"]
    assert i4["totals"] == b4
    assert b4["params"] == b2["params"] == 112  # weights do not scale with the batch


def test_batch_and_matching_input_together(models):
    doc = ok_json("analyze", models["tiny"], "--batch", "4", "--input", "x:4x3x8x8")
    assert doc["inputs"][0]["shape"] == [4, 3, 8, 8]


def test_input_dtype_changes_bytes(models):
    # relu only (no weights to clash with): 2x3x8x8 = 384 elements, 4 B each in float32, 2 B in float16
    f32 = ok_json("analyze", models["relu"], "--input", "x:2x3x8x8")
    f16 = ok_json("analyze", models["relu"], "--input", "x:2x3x8x8:float16")
    assert f32["inputs"] == [{"name": "x", "shape": [2, 3, 8, 8], "dtype": "float32"}]
    assert f16["inputs"] == [{"name": "x", "shape": [2, 3, 8, 8], "dtype": "float16"}]
    assert f32["totals"]["bytes_read"] == 384 * 4 and f16["totals"]["bytes_read"] == 384 * 2
    assert f32["totals"]["bytes_written"] == 2 * f16["totals"]["bytes_written"]
    assert f32["totals"]["flops"] == f16["totals"]["flops"] == 384


def test_input_dtype_on_pt2_is_applied_or_refused(models):
    res = run("analyze", models["cnn_pt2"], "--input", "x:1x3x8x8:float16", "--format", "json")
    if res.exit_code == 0:
        assert json.loads(res.stdout)["inputs"][0]["dtype"] == "float16"
    else:
        msg = fails(2, "analyze", models["cnn_pt2"], "--input", "x:1x3x8x8:float16")
        assert "is float32" in msg and "fixes its dtypes" in msg


def test_dynamic_dim_left_unset(models):
    msg = fails(2, "analyze", models["tiny"])
    assert len(msg.splitlines()) == 1
    assert "'x'" in msg and "dimension 0" in msg
    assert "--batch" in msg and "--input" in msg


def test_dynamic_dim_left_unset_json_stdout_empty(models):
    msg = fails(2, "analyze", models["tiny"], "--format", "json")
    assert "'x'" in msg and "dimension 0" in msg and "dynamic" in msg


@pytest.mark.parametrize("spec", ["y:2x3x8x8", "X:2x3x8x8"])
def test_input_naming_a_missing_input(models, spec):
    msg = fails(2, "analyze", models["tiny"], "--input", spec)
    assert spec.split(":")[0] in msg


@pytest.mark.parametrize(
    "spec", ["x:axb", "x:", "x", ":2x3x8x8", "x:2x3x8x0", "x:2x-3x8x8", "x:2x3x8x8:float7", "x:2x3xx8"]
)
def test_malformed_input(models, spec):
    msg = fails(2, "analyze", models["tiny"], "--input", spec)
    assert "--input" in msg


def test_input_given_twice(models):
    msg = fails(2, "analyze", models["tiny"], "--input", "x:2x3x8x8", "--input", "x:4x3x8x8")
    assert "--input x given twice" in msg


def test_input_with_wrong_rank(models):
    msg = fails(2, "analyze", models["tiny"], "--input", "x:2x3x8")
    assert "has 4 dimensions" in msg and "--input gives 3" in msg


def test_input_contradicting_a_fixed_dim(models):
    msg = fails(2, "analyze", models["tiny"], "--input", "x:2x5x8x8")
    assert "'x'" in msg and "dimension 1" in msg


@pytest.mark.parametrize("graph_name", ["main_graph", "torch-jit-export", "torch_jit", "tf2onnx", "Graph"])
def test_generic_onnx_graph_name_gives_the_file_stem(tmp_path, graph_name):
    path = _relu_onnx(tmp_path / "my_detector.onnx", [1, 3, 8, 8], graph_name)
    assert ok_json("analyze", path)["model"]["name"] == "my_detector"


def test_onnx_graph_name_kept_when_it_says_something(models, tmp_path):
    assert ok_json("analyze", models["tiny"], "--batch", "1")["model"]["name"] == "tiny"  # hand_onnx's graph name
    path = _relu_onnx(tmp_path / "file.onnx", [1, 3, 8, 8], "resnet_backbone")
    assert ok_json("analyze", path)["model"]["name"] == "resnet_backbone"


def test_torch_exported_onnx_named_after_its_file(models):
    """torch.onnx.export calls every graph 'main_graph'."""
    assert onnx.load(str(models["cnn_onnx"]), load_external_data=False).graph.name == "main_graph"
    doc = ok_json("analyze", models["cnn_onnx"])
    assert doc["model"]["name"] == "cnn"
    text = ok("analyze", models["cnn_onnx"]).stdout
    assert "cnn" in text and "main_graph" not in text


def _relu_onnx(path: Path, dims: list, graph_name: str = "relu_dyn") -> Path:
    """x[dims] -> Relu -> y: one FLOP per element, no weights."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], graph_name, [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_question_mark_keeps_the_files_dim(models):
    """`?` in DIMS keeps the file's value: x is [N, 3, 8, 8] in tiny.onnx."""
    b4 = ok_json("analyze", models["tiny"], "--batch", "4")
    for spec in ("x:?x3x8x8", "x:4x?x?x?", "x:?x?x?x?"):
        doc = ok_json("analyze", models["tiny"], "--batch", "4", "--input", spec)
        assert doc["inputs"] == [{"name": "x", "shape": [4, 3, 8, 8], "dtype": "float32"}], spec
        assert doc["totals"] == b4["totals"], spec
    f16 = ok_json("analyze", models["relu"], "--input", "x:2x?x?x?:float16")
    assert f16["inputs"] == [{"name": "x", "shape": [2, 3, 8, 8], "dtype": "float16"}]
    # a ? on a dimension the file leaves dynamic keeps it dynamic: the same error as without --input
    msg = fails(2, "analyze", models["tiny"], "--input", "x:?x3x8x8")
    assert "'x'" in msg and "dimension 0" in msg and "dynamic" in msg


@pytest.mark.parametrize("spec", ["x:2x??x8x8", "x:2x?3x8x8", "x:?x"])
def test_question_mark_malformed(models, spec):
    msg = fails(2, "analyze", models["tiny"], "--input", spec)
    assert "--input" in msg and "?" in msg


def test_the_dynamic_dim_hint_pasted_works(tmp_path):
    """The error names every dynamic dimension at once, and its `--input` hint, pasted with each N replaced by a size,
    analyses the model."""
    import re
    import shlex

    path = _relu_onnx(tmp_path / "relu_dyn.onnx", ["batch", 3, "height", "width"])
    for extra in ([], ["--batch", "2"]):
        msg = fails(2, "analyze", path, *extra)
        hint = re.search(r"--input (\S+)", msg).group(1)
        assert hint == ("x:Nx3xNxN" if not extra else "x:2x3xNxN"), msg
        assert "N a size" in msg and "? keeps" in msg
        named = "dimensions 2 ('height') and 3 ('width') are" if extra else "0 ('batch'), 2 ('height') and 3 ('width')"
        assert named in msg, msg  # every dynamic dim in one message, not one per try
        pasted = shlex.split(f"--input {hint.replace('N', '8')}")
        doc = ok_json("analyze", path, *extra, *pasted)
        shape = [8, 3, 8, 8] if not extra else [2, 3, 8, 8]
        assert doc["inputs"][0]["shape"] == shape
        assert doc["totals"]["flops"] == shape[0] * 3 * 8 * 8  # Relu: 1 FLOP per element
    # --batch fills dimension 0 and ? keeps the channel count: only the spatial dims typed
    doc = ok_json("analyze", path, "--batch", "2", "--input", "x:?x?x16x8")
    assert doc["inputs"][0]["shape"] == [2, 3, 16, 8] and doc["totals"]["flops"] == 2 * 3 * 16 * 8


@pytest.mark.parametrize("batch", ["0", "-1", "two"])
def test_bad_batch(models, batch):
    # click rejects these itself (IntRange(min=1)): its usage error, exit 2, naming the option
    msg = click_usage_fails("analyze", models["tiny"], "--batch", batch)
    assert "--batch" in msg
    if batch == "two":  # a word is "not a valid integer", not click's "not a valid integer range"
        assert "'two' is not a valid integer." in msg, msg


def test_pt2_dynamic_batch(models):
    # conv 3->8 3x3 pad 1: batch*8*8*8 outputs * 27 MACs; linear 8->10: batch*80 MACs
    # batch 2: 27648 + 160 = 27808; batch 4: 55296 + 320 = 55616
    b2 = ok_json("analyze", models["dyn_pt2"], "--batch", "2")
    b4 = ok_json("analyze", models["dyn_pt2"], "--batch", "4")
    i4 = ok_json("analyze", models["dyn_pt2"], "--input", "x:4x3x8x8")
    assert b2["totals"]["macs"] == 27808 and b4["totals"]["macs"] == 55616 == 2 * 27808
    assert b4["inputs"] == i4["inputs"] == [{"name": "x", "shape": [4, 3, 8, 8], "dtype": "float32"}]
    assert i4["totals"] == b4["totals"]
    q4 = ok_json("analyze", models["dyn_pt2"], "--batch", "4", "--input", "x:?x?x?x?")  # ? keeps the file's dims
    assert q4["inputs"] == b4["inputs"] and q4["totals"] == b4["totals"]


def test_pt2_dynamic_batch_left_unset(models):
    msg = fails(2, "analyze", models["dyn_pt2"])
    assert "'x'" in msg and "dimension 0" in msg and "--batch" in msg and "--input" in msg


def test_pt2_dynamic_model_fixed_dims_still_fixed(models):
    msg = fails(2, "analyze", models["dyn_pt2"], "--input", "x:4x3x9x8")
    assert "dimension 2" in msg


@pytest.mark.parametrize("key", ["tiny", "dyn_pt2"])
@pytest.mark.parametrize("flag", ["--batch", "--input"])
def test_dimension_beyond_int64(models, key, flag):
    value = str(2**64) if flag == "--batch" else f"x:{2**64}x3x8x8"
    msg = fails(2, "analyze", models[key], flag, value)
    assert ("--batch" in msg and "range" in msg) if flag == "--batch" else "larger than 2147483647" in msg


@pytest.mark.parametrize("key", ["cnn_pt2", "cnn_onnx"])
def test_batch_conflicts_with_fixed_dim(models, key):
    msg = fails(2, "analyze", models[key], "--batch", "8")
    assert "'x'" in msg and "fixed to 1" in msg and "--batch 8" in msg


def test_pt2_batch_equal_to_fixed_dim_is_fine(models):
    assert ok_json("analyze", models["cnn_pt2"], "--batch", "1")["inputs"][0]["shape"] == [1, 3, 8, 8]


def test_pt2_input_naming_a_missing_input(models):
    msg = fails(2, "analyze", models["cnn_pt2"], "--input", "nope:1x3x8x8")
    assert "nope" in msg


# ---- unsupported operators and --strict ---------------------------------------------------------


def test_strict_fails_naming_unsupported_ops(models):
    msg = fails(4, "analyze", models["exotic"], "--strict")  # a --strict finding is a failed gate
    assert "bessel_j0" in msg and "lgamma" in msg


def test_strict_fails_also_for_json(models):
    msg = fails(4, "analyze", models["exotic"], "--strict", "--format", "json")
    assert "no cost rule" in msg and "bessel_j0" in msg


def test_unsupported_ops_without_strict(models):
    doc = ok_json("analyze", models["exotic"])
    check_schema(doc)
    unsupported = doc["totals"]["unsupported"]
    assert len(unsupported) == 2 and all(v == 1 for v in unsupported.values())
    assert any("bessel_j0" in k for k in unsupported) and any("lgamma" in k for k in unsupported)
    joined = " ".join(doc["warnings"])
    assert "bessel_j0" in joined and "lgamma" in joined
    assert "--strict" in joined
    table = ok("analyze", models["exotic"]).stdout
    assert "bessel_j0" in table and "warning" in table


def test_amax_is_converted(models):
    doc = ok_json("analyze", models["amax"], "--strict")
    assert doc["totals"]["unsupported"] == {} and doc["warnings"] == []
    assert [o["category"] for o in doc["ops"]] == ["reduction"]
    assert doc["ops"][0]["output"] == {"shape": [2], "dtype": "float32"}
    # max over dim 1 of a 2x5 tensor: reads 10 floats = 40 B, writes 2 floats = 8 B
    assert doc["ops"][0]["bytes_read"] == 40 and doc["ops"][0]["bytes_written"] == 8


def test_strict_passes_on_a_supported_model(models):
    ok("analyze", models["tiny"], "--batch", "2", "--strict")


# ---- zoo ----------------------------------------------------------------------------------


def test_zoo_table():
    res = ok("zoo")
    assert "resnet" in res.stdout and "families" in res.stdout


def test_zoo_json():
    res = ok("zoo", "--format", "json")
    doc = json.loads(res.stdout)
    assert isinstance(doc, list) and doc
    for fam in doc:
        assert {"family", "params", "variants"} <= set(fam)
        assert isinstance(fam["params"], dict) and isinstance(fam["variants"], list)
    assert "resnet" in {f["family"] for f in doc}


@pytest.mark.slow
def test_analyze_zoo_resnet18():
    doc = ok_json("analyze", "zoo:resnet18")
    check_schema(doc)
    assert doc["model"]["framework"] == "zoo"
    assert doc["inputs"][0]["shape"] == [1, 3, 224, 224]
    # torchvision's resnet18: 11,689,512 learnable parameters, plus the batch-norm running mean and
    # variance (2 x 4800 channels: 64 + 4*64 + 5*128 + 5*256 + 5*512) = 11,699,112; ~1.814 G MACs at 224
    assert doc["totals"]["params"] == 11_689_512 + 2 * 4800
    assert abs(doc["totals"]["macs"] - 1.814e9) / 1.814e9 < 0.01


@pytest.mark.parametrize(
    "spec", ["zoo:nonexistent", "zoo:resnet?depth=abc", "zoo:resnet?depth=7", "zoo:resnet?bogus=1", "zoo:"]
)
def test_zoo_bad_names(spec):
    msg = fails(2, "analyze", spec)
    expected = {
        "zoo:nonexistent": "unknown model 'nonexistent'",
        "zoo:resnet?depth=abc": "'abc'",
        "zoo:resnet?depth=7": "depth",
        "zoo:resnet?bogus=1": "unknown parameter 'bogus'",
        "zoo:": "empty or invalid model spec",
    }[spec]
    assert msg.startswith(f"error: {spec}") and expected in msg


def test_zoo_rejects_input_specs():
    msg = fails(2, "analyze", "zoo:resnet18", "--input", "x:1x3x64x64")
    assert "zoo models take their shapes from parameters" in msg


# ---- usage errors from click itself ----------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["analyze"],
        ["analyze", "m.onnx", "--format", "xml"],
        ["frobnicate"],
        ["analyze", "m.onnx", "--top", "-1"],
        ["zoo", "--format", "markdown"],
    ],
)
def test_click_usage_errors(args):
    click_usage_fails(*args)


# ---- real processes: nothing on stderr but the message ---------------------------------------------


def _subprocess(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("PREFLIGHT_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "analyzer.cli", *map(str, args)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_subprocess_error_is_short(models):
    p = _subprocess("analyze", models["tiny"], "--format", "json")
    assert p.returncode == 2
    assert p.stdout == ""
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) <= 2, p.stderr
    assert "--batch" in p.stderr


def test_subprocess_json_stdout_is_pure_json(models):
    p = _subprocess("analyze", models["tiny"], "--batch", "2", "--format", "json")
    assert p.returncode == 0, p.stderr
    check_schema(json.loads(p.stdout))


# ---- shapes the file states exactly: empty tensors, shapes computed from values ----------------------------


def _onnx_file(path, nodes, inputs, outputs, initializers=()):
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_zero_sized_dimension_in_the_file_is_static(tmp_path):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 0, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 0, 4])
    path = _onnx_file(tmp_path / "empty.onnx", [helper.make_node("Relu", ["x"], ["y"])], [x], [y])
    doc = ok_json("analyze", path)
    # 2 x 0 x 4 = 0 elements: an empty tensor, analysed as such (0 FLOPs, 0 bytes), not "dynamic"
    assert doc["inputs"] == [{"name": "x", "shape": [2, 0, 4], "dtype": "float32"}]
    assert doc["totals"]["flops"] == 0 and doc["totals"]["bytes_read"] == 0


def test_a_shape_computed_from_input_values_is_a_clean_missing_shape_error(tmp_path):
    from onnx import TensorProto, helper

    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c"])
    path = _onnx_file(tmp_path / "cos.onnx", [helper.make_node("ConstantOfShape", ["shape"], ["y"])], [shape], [y])
    msg = fails(2, "analyze", path)
    assert "shape computed from the values of the inputs" in msg


def test_an_axes_operand_fed_at_run_time_names_the_input_that_feeds_it(tmp_path):
    """ReduceSum (opset 13+) takes its axes as an input; fed by a graph input, TVM's importer cannot read them:
    the error names that input, the operand and the node, with the fix, and exits 2 (a usage error)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    axes = helper.make_tensor_value_info("axes", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 4])
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum_it")
    path = _onnx_file(tmp_path / "reduce.onnx", [node], [x, axes], [y])
    msg = fails(2, "analyze", path)
    assert "input 'axes' sets axes of ReduceSum node 'sum_it'" in msg and "make it a constant" in msg
    # the same graph with the axes stored as a constant analyses: a sum costs 1 FLOP per input element
    # (passes/costs/reduction.py's convention), 2 * 3 * 4 = 24
    const = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    path = _onnx_file(tmp_path / "reduce_const.onnx", [node], [x], [y], [const])
    doc = ok_json("analyze", path)
    assert doc["totals"]["flops"] == 2 * 3 * 4


def test_constants_written_as_value_int_or_float_attributes_are_read(tmp_path):
    """`Constant` with `value_float` / `value_ints` (onnxscript, the unoptimised dynamo exporter): TVM's importer
    reads only `value`; preflight rewrites the others. x [2, 3, 4] * 2.0 (24 FLOPs, 1 per output element), then
    ReduceSum over axis 1 (24 FLOPs, 1 per input element): 48, and y is [2, 1, 4]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 4])
    nodes = [
        helper.make_node("Constant", [], ["two"], value_float=2.0),
        helper.make_node("Mul", ["x", "two"], ["m"]),
        helper.make_node("Constant", [], ["axes"], value_ints=[1]),
        helper.make_node("ReduceSum", ["m", "axes"], ["y"]),
    ]
    doc = ok_json("analyze", _onnx_file(tmp_path / "attrs.onnx", nodes, [x], [y]))
    assert doc["totals"]["flops"] == 24 + 24
    assert doc["ops"][-1]["output"]["shape"] == [2, 1, 4]


def test_an_unoptimised_dynamo_onnx_export_analyses(tmp_path):
    """torch.onnx.export(dynamo=True, optimize=False) writes Constant nodes with value_int(s)/value_float(s).
    BERT, hidden 32, 2 layers, 2 heads, FFN 64, 16 tokens: per layer Q, K, V, O 4 * 16 * 32 * 32 = 65,536 MACs,
    FFN 2 * 16 * 32 * 64 = 65,536, attention scores and values 2 * (2 * 16 * 16 * 16) = 16,384; two layers and the
    pooler 32 * 32 = 1,024: 295,936 MACs."""
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100)
    model = BertModel(cfg).eval()
    path = tmp_path / "bert.onnx"
    torch.onnx.export(model, (torch.randint(0, 100, (1, 16)),), str(path), dynamo=True, optimize=False)
    assert ok_json("analyze", path)["totals"]["macs"] == 2 * (65_536 + 65_536 + 16_384) + 1_024


# ---- what a new user types wrong, and transformers model directories -----------------------------------------


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory) -> dict[str, Path]:
    from transformers import BertConfig, GPT2Config

    d = tmp_path_factory.mktemp("hf")
    (d / "gpt2").mkdir()
    (d / "bert").mkdir()
    GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64).to_json_file(d / "gpt2" / "config.json")
    BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=256)\
        .to_json_file(d / "bert" / "config.json")  # fmt: skip
    (d / "other.json").write_text('{"foo": 1}')
    return {"gpt2": d / "gpt2", "bert": d / "bert", "other": d / "other.json"}


def test_a_transformers_model_directory_is_its_config(hf_dirs):
    via_dir = ok_json("analyze", str(hf_dirs["gpt2"]), "--input", "input_ids:2x16")
    via_file = ok_json("analyze", str(hf_dirs["gpt2"] / "config.json"), "--input", "input_ids:2x16")
    assert via_dir["totals"] == via_file["totals"]
    assert via_dir["model"]["name"] == "gpt2:GPT2LMHeadModel"
    # an int32 input_ids is taken as given (torch's embedding reads int32 ids)
    int32 = ok_json("analyze", str(hf_dirs["gpt2"]), "--input", "input_ids:2x16:int32")
    assert int32["inputs"][0]["dtype"] == "int32" and int32["totals"]["macs"] == via_dir["totals"]["macs"]


def test_an_encoder_config_builds_the_encoder_and_is_no_llm(hf_dirs):
    doc = ok_json("analyze", str(hf_dirs["bert"]), "--input", "input_ids:1x16")
    assert doc["model"]["name"] == "bert:BertModel"  # not BertLMHeadModel, the decoder variant
    # BertModel, 2 layers, hidden 64, intermediate 128, seq 16: per layer q, k, v, o 4 x 64 x 64 + 2 x 64 x 128
    # = 32,768 weights x 16 tokens = 524,288 MACs; attention 2 x 16 x 16 x 64 = 32,768; the pooler's output is
    # not the first output (what the config route returns), so it is not in the graph
    assert doc["totals"]["macs"] == 2 * (524_288 + 32_768) == 1_114_112
    assert any("pooler (BertPooler) is not in the graph" in w for w in doc["warnings"])
    assert "is an encoder" in fails(2, "llm", str(hf_dirs["bert"]), "--prompt", "16", "--generate", "4")


@pytest.mark.parametrize(
    "args, message",
    [
        (("--input", "x:2x3x8x8:float99"), "unknown dtype 'float99'"),
        (("--input", "x:2x3x8x8:float16"), "input 'x' is float32 in tiny.onnx; --input asks for float16, and the"),
    ],
)
def test_input_dtype_mistakes_say_what_is_wrong(models, args, message):
    assert message in fails(2, "analyze", str(models["tiny"]), *args)


def test_the_importers_reason_is_said_whole(tmp_path):
    """An index input asked for as float32: the importer's reason, TVM's Take op refusing float indices, was cut at
    80 characters mid-sentence ("Take op requires );")."""
    import torch

    path = tmp_path / "embed.onnx"
    torch.onnx.export(torch.nn.Embedding(100, 8).eval(), (torch.zeros(2, 8, dtype=torch.long),), str(path),
                      input_names=["ids"], dynamo=False)  # fmt: skip
    msg = fails(2, "analyze", str(path), "--input", "ids:2x8:float32")
    assert msg.startswith("error: input 'ids' is int64 in embed.onnx; --input asks for float32"), msg
    assert "Take op requires the input indices to have integer dtype. However, the given indices dtype is" in msg


def test_an_input_in_the_dtype_asked_for_is_the_models_input(models):
    """`--dtype float16 --input x:...:float16` says the same thing twice: the float32 file's input is float16 because
    the model is analysed in float16 (it was refused, with the advice to use --dtype float16)."""
    doc = ok_json("analyze", str(models["tiny"]), "--dtype", "float16", "--input", "x:2x3x8x8:float16")
    plain = ok_json("analyze", str(models["tiny"]), "--dtype", "float16", "--input", "x:2x3x8x8")
    assert doc["inputs"] == plain["inputs"] and doc["inputs"][0]["dtype"] == "float16"
    assert doc["totals"] == plain["totals"]


def test_a_folder_with_a_config_and_a_graph_asks_which(hf_dirs, models, tmp_path):
    import shutil

    folder = tmp_path / "export"
    shutil.copytree(hf_dirs["gpt2"], folder)
    shutil.copy(models["tiny"], folder / "model.onnx")  # what optimum writes beside config.json
    msg = fails(2, "analyze", str(folder))
    assert "holds model.onnx and a transformers config.json" in msg and str(folder / "model.onnx") in msg


def test_config_input_dtypes_and_other_json(hf_dirs):
    assert "is int64 or int32, not float32" in fails(
        2, "analyze", str(hf_dirs["gpt2"]), "--input", "input_ids:1x16:float32"
    )
    assert "neither a transformers config" in fails(2, "analyze", str(hf_dirs["other"]))
    # a config.json cut off mid-way is said to be broken JSON, where (it was "neither a transformers config")
    cut = hf_dirs["other"].parent / "cut" / "config.json"
    cut.parent.mkdir()
    cut.write_text('{"model_type": "llama", "num_hidden_layers": 2,')
    for given in (cut, cut.parent):  # the file, or the model folder holding it
        msg = fails(2, "analyze", str(given))
        assert f"{cut}: not valid JSON (Expecting property name enclosed in double quotes: line 1 column 48" in msg


def test_config_export_failures_name_their_cause(hf_dirs, tmp_path):
    """What makes a config's model fail to export, said in the config's terms (exit 2), not torch.export's."""
    from transformers import Qwen2Config, T5Config

    # BERT's learned position table has max_position_embeddings = 512 rows (BertConfig's default)
    msg = fails(2, "analyze", str(hf_dirs["bert"]), "--input", "input_ids:1x600")
    assert "input_ids has 600 tokens, more than the config's max_position_embeddings = 512" in msg
    # 64 / 3 heads: no whole head size, and no head_dim to say another
    Qwen2Config(hidden_size=64, num_attention_heads=3, num_key_value_heads=3, num_hidden_layers=1,
                intermediate_size=128, vocab_size=100).to_json_file(tmp_path / "config.json")  # fmt: skip
    msg = fails(2, "analyze", str(tmp_path), "--input", "input_ids:1x16")
    assert "hidden_size = 64 is not a multiple of num_attention_heads = 3" in msg
    t5 = tmp_path / "t5"
    t5.mkdir()
    T5Config(d_model=64, d_kv=16, d_ff=128, num_layers=1, num_heads=4, vocab_size=100,
             architectures=["T5ForConditionalGeneration"]).to_json_file(t5 / "config.json")  # fmt: skip
    msg = fails(2, "analyze", str(t5), "--input", "input_ids:1x16")
    assert "T5ForConditionalGeneration is an encoder-decoder model" in msg


def test_a_failed_export_prints_one_line_on_stderr(hf_dirs):
    """torch's fake tensors log a failing op's chained traceback (~100 lines) before the export raises: silenced."""
    out, err = _in_a_fresh_process("analyze", str(hf_dirs["bert"]), "--input", "input_ids:1x600")
    assert out[0] == "2" and "Traceback" not in err
    assert err.splitlines() == [err] and "max_position_embeddings = 512" in err


def _in_a_fresh_process(*argv: str) -> tuple[list[str], str]:
    """Run the CLI with `argv` in a fresh interpreter: (exit code, whether TVM and torch got imported) and stderr."""
    code = (
        "import sys\n"
        "from analyzer.cli import main\n"
        f"sys.argv = ['preflight', *{list(argv)!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    print(exc.code, 'tvm' in sys.modules, 'torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return proc.stdout.split(), proc.stderr.strip()


@pytest.mark.parametrize("command", ["analyze", "predict", "report", "llm"])
def test_a_missing_model_file_fails_before_tvm_and_torch_are_imported(command, tmp_path):
    """A path that does not exist is a one-line error (exit 2) before the ~3 s of importing TVM and torch."""
    out, err = _in_a_fresh_process(command, str(tmp_path / "no-such.onnx"))
    assert out == ["2", "False", "False"], err
    assert err == f"error: {tmp_path / 'no-such.onnx'}: no such file or directory"


def test_a_pt2_that_is_no_zip_archive_fails_before_tvm_and_torch_are_imported(tmp_path):
    """A `.pt2` that is not a zip archive (text, random bytes) is refused by the archive check before the imports."""
    bad = tmp_path / "model.pt2"
    bad.write_text("not an archive\n")
    out, err = _in_a_fresh_process("analyze", str(bad))
    assert out == ["2", "False", "False"], err
    assert err == "error: model.pt2: not a torch.export .pt2 archive (File is not a zip file)"


def test_predict_refuses_a_second_device():
    """`predict` costs one GPU: a repeated --device is a usage error, not the last one silently."""
    err = fails(2, "predict", "zoo:resnet18", "--device", "h100", "--device", "a100")
    assert "takes one GPU, got 2 (h100, a100)" in err and "preflight report" in err


def test_json_records_provenance(models):
    """Two reports of one model can be compared: the stack, the kernel table's digest, the file's digest, the time."""
    import hashlib
    from datetime import UTC, datetime

    import torch
    import tvm

    from predictor.kernel_model import PARAMS_PATH

    doc = ok_json("analyze", models["tiny"], "--batch", "2")
    tool = doc["tool"]
    assert tool["stack"]["torch"] == torch.__version__ and tool["stack"]["apache-tvm"] == tvm.__version__
    assert tool["stack"]["onnx"] == onnx.__version__
    assert tool["stack"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert tool["kernel_params_sha256"] == hashlib.sha256(PARAMS_PATH.read_bytes()).hexdigest()
    assert doc["model"]["sha256"] == hashlib.sha256(Path(models["tiny"]).read_bytes()).hexdigest()
    created = datetime.fromisoformat(tool["created"])
    assert created.tzinfo is not None and abs((datetime.now(UTC) - created).total_seconds()) < 3600
    assert ok_json("analyze", "zoo:resnet18")["model"]["sha256"] is None  # a zoo name is no file


def test_csv_per_operator_and_per_kernel(models, tmp_path):
    """--format csv: one row per operator with the report's counts; kernels-csv: one row per CUDA kernel; with a
    prediction the time column shares out the latency. -o x.csv picks csv by its suffix."""
    import csv

    doc = ok_json("predict", models["tiny"], "--batch", "2")
    ops_csv = tmp_path / "ops.csv"
    ok("predict", models["tiny"], "--batch", "2", "-o", str(ops_csv))
    rows = list(csv.DictReader(ops_csv.open()))
    assert [int(r["index"]) for r in rows] == [op["index"] for op in doc["ops"]]
    live = [r for r in rows if r["folded"] == "False"]  # the totals leave folded (weight-only) ops out
    assert sum(int(r["flops"]) for r in live) == doc["totals"]["flops"]
    assert sum(int(r["bytes_read"]) for r in live) == doc["totals"]["bytes_read"]
    assert sum(float(r["time_ms"]) for r in live) == pytest.approx(doc["prediction"]["latency_ms"], rel=1e-4)
    kernels = list(
        csv.DictReader(run("predict", models["tiny"], "--batch", "2", "--format", "kernels-csv").stdout.splitlines())
    )
    assert len(kernels) == doc["kernels"]["kernels"] and [k["kind"] for k in kernels] == [
        k["kind"] for k in doc["kernels"]["list"]
    ]
    assert sum(float(k["time_ms"]) for k in kernels) == pytest.approx(doc["prediction"]["latency_ms"], rel=1e-4)
    # `timed_by` is the class the energy line's busy shares sum: their time shares are the prediction's (a batch
    # large enough for kernels above their launch floor)
    big = ok_json("predict", models["tiny"], "--batch", "65536")
    big_rows = csv.DictReader(
        run("predict", models["tiny"], "--batch", "65536", "--format", "kernels-csv").stdout.splitlines()
    )
    share = dict.fromkeys(("compute", "memory", "launch"), 0.0)
    for k in big_rows:
        share[k["timed_by"]] += float(k["time_ms"])
    total = sum(share.values())
    assert sum(v > 0 for v in share.values()) >= 2, share
    for b, key in (("compute", "compute"), ("memory", "memory"), ("launch", "gap")):
        assert share[b] / total == pytest.approx(big["prediction"]["power_shares"][key], abs=1e-3), b
    plain = list(csv.DictReader(run("analyze", models["tiny"], "--batch", "2", "--format", "csv").stdout.splitlines()))
    assert plain[0]["time_ms"] == "" and len(plain) == len(rows)  # no prediction, no time


def test_an_unwritable_output_fails_before_the_analysis(tmp_path):
    """-o into a folder that does not exist fails at once, before TVM and torch are imported."""
    code = (
        "import sys\n"
        "from analyzer.cli import main\n"
        f"sys.argv = ['preflight', 'predict', 'zoo:resnet50', '-o', {str(tmp_path / 'no' / 'x.json')!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    print(exc.code, 'tvm' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["2", "False"], proc.stderr
    assert "the folder" in proc.stderr and "does not exist" in proc.stderr


def test_version_names_the_stack():
    import torch

    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0
    assert res.output.startswith("preflight ") and f"torch {torch.__version__}" in res.output
    assert f"onnx {onnx.__version__}" in res.output and "apache-tvm 0.27.0.post1" in res.output


def test_quiet_leaves_only_the_result_and_errors(models, tmp_path):
    out = tmp_path / "r.json"
    loud = CliRunner().invoke(cli, ["predict", str(models["tiny"]), "--batch", "2", "-o", str(out)])
    assert loud.exit_code == 0, loud.output
    assert loud.stderr.strip() == f"wrote {out}"
    quiet = CliRunner().invoke(cli, ["-q", "predict", str(models["tiny"]), "--batch", "2", "-o", str(out)])
    assert quiet.exit_code == 0 and quiet.stderr == "" and json.loads(out.read_text())["prediction"]
    bad = CliRunner().invoke(cli, ["-q", "predict", str(tmp_path / "none.onnx")])
    assert bad.exit_code == 2 and "no such file" in bad.stderr  # errors still show
    # after the subcommand too (was "No such option: -q"), and the next invocation is loud again
    after = CliRunner().invoke(cli, ["predict", str(models["tiny"]), "--batch", "2", "-o", str(out), "--quiet"])
    assert after.exit_code == 0 and after.stderr == "", after.output
    again = CliRunner().invoke(cli, ["predict", str(models["tiny"]), "--batch", "2", "-o", str(out)])
    assert again.stderr.strip() == f"wrote {out}"


def test_batch_leaves_a_fixed_first_dimension_beside_a_dynamic_batch(tmp_path):
    """`--batch` sets the inputs whose dimension 0 is dynamic: a fixed (16,) scale beside x (N, 8) keeps its size
    (it was refused: "dimension 0 is fixed to 16"), in an ONNX file and in a .pt2 exported with a batch Dim."""
    import onnx
    import torch
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Mul", ["m", "scale"], ["y"])],
        "mixed",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8]),
            helper.make_tensor_value_info("scale", TensorProto.FLOAT, [16]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        [numpy_helper.from_array(np.ones((8, 16), np.float32), "W")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "mixed.onnx")
    doc = ok_json("analyze", str(tmp_path / "mixed.onnx"), "--batch", "4")
    assert [i["shape"] for i in doc["inputs"]] == [[4, 8], [16]]
    assert doc["totals"]["macs"] == 4 * 8 * 16  # 512

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 16, bias=False)

        def forward(self, x, scale):
            return self.fc(x) * scale

    batch = torch.export.Dim("B", min=1, max=1024)
    ep = torch.export.export(Scaled(), (torch.randn(2, 8), torch.randn(16)), dynamic_shapes=({0: batch}, None))
    torch.export.save(ep, tmp_path / "mixed.pt2")
    doc = ok_json("analyze", str(tmp_path / "mixed.pt2"), "--batch", "4")
    assert [i["shape"] for i in doc["inputs"]] == [[4, 8], [16]]
    assert doc["totals"]["macs"] == 4 * 8 * 16
    # an --input that contradicts the fixed dimension is still refused
    assert "dimension 0 is fixed to 16" in fails(2, "analyze", str(tmp_path / "mixed.onnx"), "--input", "x:4x8",
                                                   "--input", "scale:32")  # fmt: skip


def test_a_pt2_batch_past_its_dim_max_is_refused(tmp_path):
    """A .pt2 exported with Dim("B", max=64) holds for batches up to 64 (torch.export's range constraint): 64
    analyses, 65 is refused (exit 2), not bound silently."""
    import torch

    model = torch.nn.Linear(8, 4).eval()
    batch = torch.export.Dim("B", min=1, max=64)
    ep = torch.export.export(model, (torch.randn(2, 8),), dynamic_shapes=({0: batch},))
    torch.export.save(ep, tmp_path / "m.pt2")
    doc = ok_json("analyze", str(tmp_path / "m.pt2"), "--batch", "64")
    assert doc["inputs"][0]["shape"] == [64, 8] and doc["totals"]["macs"] == 64 * 8 * 4
    msg = fails(2, "analyze", str(tmp_path / "m.pt2"), "--batch", "65")
    assert "was exported for at most 64" in msg and "65 is outside the range" in msg


def test_the_operators_line_counts_the_folded_ops_apart():
    """`x @ w.t()`: the weight's transpose is folded (an op on weights alone) and the matmul runs: ops 0 and 1, a count
    of 1 (and the edge from the transpose to the matmul); the line says so (a newcomer saw "operators 288" beside an
    index 317)."""
    import torch

    from analyzer import analyze
    from analyzer.render import render_table

    class WeightT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8, 4))

        def forward(self, x):
            return x @ self.w.t()

    report = analyze(WeightT(), (torch.randn(2, 4),))
    assert [c.folded for c in report.analysis.ops] == [True, False]
    line = next(s for s in render_table(report).splitlines() if s.startswith("operators"))
    assert line.endswith(" 1 (1 data-flow edges; 1 more on weights alone, folded)")
