"""Operator names a user can act on: each op carries the module path it comes from (torch.export's module stack,
else the weights it reads and its inputs), and the cost rolls up by module; FlopCounterMode on the submodule
alone is the oracle for a module's multiply-add FLOPs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch.utils.flop_counter import FlopCounterMode

from analyzer.api import analyze
from analyzer.cli import cli
from analyzer.render import module_rollup
from passes.costs import MULTIPLY_ADD_CATEGORIES
from passes.tvm_ir import source_names


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
        self.head = torch.nn.Linear(8 * 6 * 6, 4)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def test_source_names_fill_from_the_next_recorded_value():
    # lv1 and lv2 were emitted on the way to lv3's node; lv5 comes after the last recorded value
    assert source_names(["lv", "lv1", "lv2", "lv3", "lv5"], {"lv": "a", "lv3": "b"}) == ["a", "b", "b", "b", None]


def test_module_route_names_every_op_by_its_module():
    rep = analyze(Net().eval(), (torch.randn(1, 3, 8, 8),))
    by_op = [(c.op.removeprefix("relax."), c.source) for c in rep.analysis.ops]
    # conv (+ its bias: reshape, add) in features.0, relu in features.1, flatten in the top-level forward, linear
    assert by_op[0] == ("nn.conv2d", "features.0") and ("nn.relu", "features.1") in by_op
    assert [s for op, s in by_op if op == "matmul"] == ["head"]
    assert {s for _, s in by_op} <= {"features.0", "features.1", "(top level)", "head"}


class Downsampled(torch.nn.Module):
    """A residual block as ResNet writes it, the shortcut first: conv + batch norm on each branch."""

    def __init__(self):
        super().__init__()
        self.down = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 1, bias=False), torch.nn.BatchNorm2d(16))
        self.conv1 = torch.nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(16)

    def forward(self, x):
        return torch.relu(self.bn1(self.conv1(x)) + self.down(x))


def test_a_batch_norm_is_named_by_its_own_module():
    """The importer emits a batch norm's tuple and then its field 0: the norm is named by its module (the shortcut's
    `down.1`, the branch's `bn1`), not by the op after it (`conv1`, the top level)."""
    rep = analyze(Downsampled().eval(), (torch.randn(1, 8, 8, 8),))
    by_op = [(c.op.removeprefix("relax."), c.source) for c in rep.analysis.ops]
    norms = [s for op, s in by_op if op == "nn.batch_norm"]
    convs = [s for op, s in by_op if op == "nn.conv2d"]
    assert sorted(norms) == ["bn1", "down.1"] and sorted(convs) == ["conv1", "down.0"]


def test_a_saved_program_names_ops_as_the_module_route(tmp_path):
    """A .pt2 keeps each node's module path (the archive's nn_module_stack, checked): every op has the source the
    nn.Module route gives it, the model's own forward "(top level)" (it took the next op's module before)."""
    model, x = Net().eval(), torch.randn(1, 3, 8, 8)
    torch.export.save(torch.export.export(model, (x,)), tmp_path / "net.pt2")
    saved = analyze(str(tmp_path / "net.pt2"))
    direct = analyze(model, (x,))
    assert [(c.op, c.source) for c in saved.analysis.ops] == [(c.op, c.source) for c in direct.analysis.ops]
    assert "(top level)" in {c.source for c in saved.analysis.ops}


def test_a_modules_flops_equal_flop_counter_on_that_module_alone():
    """ResNet-18 with real weights: layer2's multiply-add FLOPs summed from its ops equal FlopCounterMode on
    model.layer2 run by itself on its input (1, 64, 56, 56)."""
    from zoo.registry import build

    model = build("resnet18", device="cpu").module.eval()
    rep = analyze(model, (torch.randn(1, 3, 224, 224),))
    ours = sum(
        2 * c.macs
        for c in rep.analysis.ops
        if not c.folded and c.category in MULTIPLY_ADD_CATEGORIES and (c.source or "").split(".")[0] == "layer2"
    )
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model.layer2(torch.randn(1, 64, 56, 56))
    assert ours == fc.get_total_flops() > 0
    depth1 = {r["module"]: r for r in module_rollup(rep) if r["depth"] == 1}
    assert {"conv1", "layer1", "layer2", "layer3", "layer4", "fc"} <= set(depth1)
    assert sum(r["flops"] for r in depth1.values()) == rep.totals.flops  # every live op has a module


def test_json_and_table_show_the_modules(tmp_path):
    path = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(Net().eval(), (torch.randn(1, 3, 8, 8),)), path)
    res = CliRunner().invoke(cli, ["predict", str(path), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    # a .pt2's node metadata is dropped for safety but for its module paths (checked dotted names)
    assert doc["ops"][0]["source"] == "features.0" and doc["ops"][0]["name"].startswith("lv")
    heads = [m for m in doc["modules"] if m["module"] == "head"]
    assert heads and heads[0]["macs"] == 8 * 6 * 6 * 4  # the linear layer: 288 x 4 MACs
    assert sum(m["time_ms"] for m in doc["modules"] if m["depth"] == 1) == pytest.approx(
        doc["prediction"]["latency_ms"], rel=1e-6
    )
    text = CliRunner().invoke(cli, ["analyze", str(path), "--by-module", "1"]).stdout
    # features, head, and the flatten of Net's own forward
    assert "costliest 3 modules at depth 1 by FLOPs:" in text and "features" in text and "(top level)" in text


# ---------------------------------------------------------------------------------------------------------------
# ONNX: node names, and module paths where torch.onnx wrote them
# ---------------------------------------------------------------------------------------------------------------


def _named_onnx(path):
    """x (2, 4) -> MatMul 'proj' -> Add 'bias' -> Relu (no name: node 2) -> Gemm 'gemm' (transB) -> Softmax 'soft'."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.ones((4, 8), np.float32), "W"),
        numpy_helper.from_array(np.ones((8,), np.float32), "B"),
        numpy_helper.from_array(np.ones((3, 8), np.float32), "W2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["y"], name="proj"),
        helper.make_node("Add", ["y", "B"], ["z"], name="bias"),
        helper.make_node("Relu", ["z"], ["r"]),
        helper.make_node("Gemm", ["r", "W2"], ["g"], name="gemm", transB=1),
        helper.make_node("Softmax", ["g"], ["out"], name="soft"),
    ]
    graph = helper.make_graph(
        nodes,
        "named",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return onnx.load(path)


def test_onnx_ops_carry_the_files_node_names(tmp_path):
    path = tmp_path / "named.onnx"
    model = _named_onnx(path)
    res = CliRunner().invoke(cli, ["analyze", str(path), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    # the oracle: the file's own node names (an unnamed node: its op type and index in the graph)
    labels = [n.name or f"{n.op_type}_{i}" for i, n in enumerate(model.graph.node)]
    assert labels == ["proj", "bias", "Relu_2", "gemm", "soft"]
    live = [(o["op"].removeprefix("relax."), o["source"]) for o in doc["ops"] if not o["folded"]]
    assert live == [("matmul", "proj"), ("add", "bias"), ("nn.relu", "Relu_2"), ("matmul", "gemm"),
                    ("nn.softmax", "soft")]  # fmt: skip
    # JSON keeps the Relax name beside the source; these nodes say nothing of a module
    assert all(o["name"].startswith(("lv", "gv")) for o in doc["ops"])
    assert all(o["module"] is None for o in doc["ops"]) and doc["modules"] == []
    text = CliRunner().invoke(cli, ["analyze", str(path), "--by-module", "1"]).stdout
    assert " proj " in text and " soft " in text and " lv" not in text
    assert "modules: the model file records no module paths" in text


def test_an_onnx_batch_norm_carries_its_own_node_name(tmp_path):
    """TVM's importer binds BatchNormalization's tuple, then its field 0: both are the node's ("bn"), the ReLU
    after it its own ("act"); the norm took the next node's name before."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c = 4
    inits = [numpy_helper.from_array(np.ones((c, 3, 3, 3), np.float32), "w")]
    inits += [numpy_helper.from_array(np.ones(c, np.float32), n) for n in ("g", "b", "mu", "var")]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["y", "g", "b", "mu", "var"], ["z"], name="bn"),
            helper.make_node("Relu", ["z"], ["out"], name="act"),
        ],
        "cbr",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, c, 8, 8])],
        inits,
    )
    path = tmp_path / "cbr.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    rep = analyze(str(path))
    by_op = [(o.op.removeprefix("relax."), o.source) for o in rep.analysis.ops if o.op != "relax.TupleGetItem"]
    assert ("nn.batch_norm", "bn") in by_op and ("nn.relu", "act") in by_op and ("nn.conv2d", "conv") in by_op


class Nested(torch.nn.Module):
    """stem conv, two residual blocks (conv1, act) in a Sequential, mean, linear head."""

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(4, 4, 3, padding=1)
            self.act = torch.nn.ReLU()

        def forward(self, x):
            return self.act(self.conv1(x)) + x

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 4, 3)
        self.layer1 = torch.nn.Sequential(self.Block(), self.Block())
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.layer1(self.stem(x)).mean((2, 3)))


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_torch_onnx_modules_equal_flop_counter_per_module(tmp_path, dynamo):
    """torch.onnx's dynamo exporter records the module stack in node metadata, the TorchScript one in node names
    (/layer1/layer1.0/conv1/Conv): `--by-module` rolls the ONNX file's ops up by module, and each module's
    multiply-add FLOPs equal FlopCounterMode's count for that module of the PyTorch model."""
    model, x = Nested().eval(), torch.randn(1, 3, 8, 8)
    path = tmp_path / "nested.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=dynamo)
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(x)
    oracle = {k.removeprefix("Nested."): sum(v.values()) for k, v in fc.get_flop_counts().items()}
    res = CliRunner().invoke(cli, ["analyze", str(path), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rolled = {(m["module"], m["depth"]): 2 * m["macs"] for m in doc["modules"]}
    for module in ("stem", "layer1", "head"):
        assert rolled[(module, 1)] == oracle[module] > 0, module
    for module in ("layer1.0", "layer1.1"):
        assert rolled[(module, 2)] == oracle[module] > 0, module
    convs = [o["module"] for o in doc["ops"] if o["op"] == "relax.nn.conv2d"]
    assert convs == ["stem", "layer1.0.conv1", "layer1.1.conv1"]
    assert {o["module"] for o in doc["ops"] if o["op"] == "relax.mean"} == {"(top level)"}
    text = CliRunner().invoke(cli, ["analyze", str(path), "--by-module", "1"]).stdout
    assert "costliest 4 modules at depth 1 by FLOPs:" in text and "layer1" in text


def test_onnx_module_paths_from_names_and_metadata():
    from onnx import helper

    from analyzer.frontends.onnx_frontend import node_module

    def node(name, scopes=None):
        n = helper.make_node("Conv", ["x"], ["y"], name=name)
        if scopes is not None:
            n.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=scopes)
        return n

    # TorchScript exporter: a Sequential's child is written parent.index, every other child by its attribute
    assert node_module(node("/layer1/layer1.0/downsample/downsample.0/Conv")) == "layer1.0.downsample.0"
    assert node_module(node("/features/features.0/Conv")) == "features.0"
    assert node_module(node("/Flatten")) == "(top level)"
    assert node_module(node("conv1")) is None  # a name without the exporter's scopes says nothing
    # dynamo exporter: the scopes are full paths, the last one the fx node
    assert node_module(node("node_conv2d", "['', 'layer1', 'layer1.0', 'layer1.0.conv1', 'conv2d']")) == (
        "layer1.0.conv1"
    )
    assert node_module(node("node_view", "['', 'view']")) == "(top level)"
    # metadata that is not a list of strings is ignored (read as a literal, never evaluated)
    assert node_module(node("n", "__import__('os').system('true')")) is None
    assert node_module(node("n", "[" * 100_000)) is None


def test_tflite_layer_paths_from_tensor_names():
    from analyzer.frontends.tensorflow_frontend import tensor_module

    # the scope the fused ops share, less the model's (transformer_1) and each op's own last segment
    mha = "transformer_1/mha_1/key_1/MatMul;transformer_1/mha_1/key_1/Add;transformer_1/mha_1/key_1/Reshape_1"
    assert tensor_module(mha) == "mha_1.key_1"
    assert tensor_module("cnn_1/global_average_pooling2d_1/Mean") == "global_average_pooling2d_1"
    # a convolution fused with its batch norm and ReLU spans three layers
    fused = "cnn_1/re_lu_1/Relu;cnn_1/batch_normalization_1/batchnorm/add_1;cnn_1/conv2d_1/convolution"
    assert tensor_module(fused) == "re_lu_1+batch_normalization_1+conv2d_1"
    assert tensor_module("cnn_1/Add") == "(top level)"
    assert tensor_module("Identity") is None and tensor_module("StatefulPartitionedCall_1:0") is None


def test_report_names_operators_and_modules(tmp_path):
    """The pre-deployment report (HTML) names each operator by its ONNX node and rolls the cost up by module."""
    import analyzer

    path = tmp_path / "nested.onnx"
    torch.onnx.export(Nested().eval(), (torch.randn(1, 3, 8, 8),), str(path), dynamo=False)
    page = tmp_path / "r.html"
    analyzer.report(str(path), devices=["h100-80gb"], output=str(page))
    html = page.read_text()
    assert "<td>/layer1/layer1.0/conv1/Conv</td>" in html and "<td>lv" not in html
    assert "The costliest top-level modules" in html and "<td>layer1</td>" in html
    assert "The costliest modules two levels deep" in html and "<td>layer1.1</td>" in html


def test_a_failed_onnx_import_writes_nothing_to_stderr(tmp_path):
    """Recording node names must not keep a failed import's block builder alive past the captured stderr: TVM
    logs 'BlockBuilder destroyed with remaining blocks!' when it is freed later (here: at `del`)."""
    import subprocess
    import sys

    import onnx
    from onnx import TensorProto, helper

    path = tmp_path / "bad.onnx"  # an LSTM with `clip`, which the converter refuses half-way through the import
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 3])
    w = helper.make_tensor("W", TensorProto.FLOAT, [1, 16, 3], [0.1] * 48)
    r = helper.make_tensor("R", TensorProto.FLOAT, [1, 16, 4], [0.1] * 64)
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="my_lstm", hidden_size=4, clip=3.0)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 1, 4])  # seq, directions, batch, hidden
    graph = helper.make_graph([node], "g", [x], [y], [w, r])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    code = (
        "import sys\nfrom analyzer import analyze\ntry:\n    analyze(sys.argv[1])\nexcept Exception as e:\n"
        "    print(type(e).__name__, e)\n    del e\nprint('done')\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert "AnalysisError" in res.stdout and "clip" in res.stdout and "done" in res.stdout, res.stdout + res.stderr
    assert "BlockBuilder" not in res.stderr, res.stderr


def test_a_node_tvm_cannot_convert_is_named(tmp_path):
    """TVM's converter of an opset-9 `Upsample` (scales as an input) raises a bare TypeError; the error names the
    node (unnamed: its op type and index, as analyze labels it) and nothing reaches stderr."""
    import subprocess
    import sys

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3]),
            helper.make_node("Upsample", ["c", "sc"], ["y"], mode="nearest"),
        ],
        "op9",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [
            numpy_helper.from_array(np.ones((8, 4, 3, 3), np.float32), "w"),
            numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 4
    path = tmp_path / "op9.onnx"
    onnx.save(model, path)
    code = (
        "import sys\nfrom analyzer import analyze\ntry:\n    analyze(sys.argv[1])\nexcept Exception as e:\n"
        "    print(type(e).__name__, e)\n    del e\nprint('done')\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert "AnalysisError" in res.stdout and "Upsample node 'Upsample_1' (opset 9)" in res.stdout, res.stdout
    assert "done" in res.stdout and "BlockBuilder" not in res.stderr, res.stderr
