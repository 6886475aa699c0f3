"""Seeded fuzzing of every model format preflight reads (used by tests/test_fuzz.py and bench/bench_fuzz.py).

Seeds are small valid models built here (no checked-in binaries): a .pt2 with symbolic shapes, a buffer
and a lifted constant; an ONNX conv net; a .tflite built with the flatbuffers builder; a .keras file and a
SavedModel (TensorFlow, in a child process); a Paddle inference model (in a child process).

Mutators (each a pure function of a `random.Random` and the seed):
  - bytes: flip bits, overwrite bytes, truncate, splice zeros, for any file;
  - zip: drop, duplicate, rename or add members, flip bytes inside one member (.pt2, .keras);
  - JSON: replace a value, delete a key, insert hostile strings (.pt2's model.json and configs, .keras's
    config.json, Paddle's model.json);
  - ONNX structure: attributes, dims, elem types, opsets, op types, external data, graph wiring;
  - the four code-execution vectors of issue 15 and variants (every string torch evaluates);
  - the resource vectors (`PT2_RESOURCE_VECTORS`, `ONNX_RESOURCE_VECTORS`): files built to exhaust the stack,
    memory or time (nested expressions and JSON, zip bombs, huge strings, generated tensors, long recurrences).
A payload that would run code writes a marker file named by the case; the driver checks it never appears.

The driver runs many cases in one worker process (imports once), calling `analyzer.cli.main` in-process with
stderr captured; a case that kills or hangs the worker is reported as that case's failure.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------------
# Seeds
# --------------------------------------------------------------------------------------------


def tiny_tflite(shape: tuple[int, ...] = (1, 4)) -> bytes:
    """A valid TFLite flatbuffer: x (float32, `shape`) -> RELU -> y, built with the flatbuffers builder."""
    return tflite_chain(1, shape)


def tflite_chain(n_ops: int, shape: tuple[int, ...] = (1, 4)) -> bytes:
    """A valid TFLite flatbuffer of `n_ops` RELUs in a chain, x (float32, `shape`) -> t1 -> ... -> y, all tensors
    sharing one empty buffer (flatbuffers builder; 200,000 ops take about 5 s and 10 MB)."""
    import importlib

    import flatbuffers

    Buffer, Model, Operator, OperatorCode, SubGraph, Tensor = (
        importlib.import_module(f"tflite.{n}")
        for n in ("Buffer", "Model", "Operator", "OperatorCode", "SubGraph", "Tensor")
    )
    b = flatbuffers.Builder(1024)

    def ints(start, values):
        start(b, len(values))
        for v in reversed(values):
            b.PrependInt32(v)
        return b.EndVector()

    def offsets(start, values):
        start(b, len(values))
        for v in reversed(values):
            b.PrependUOffsetTRelative(v)
        return b.EndVector()

    Buffer.BufferStart(b)
    buf = Buffer.BufferEnd(b)
    tensors = []
    for i in range(n_ops + 1):
        s = b.CreateString("x" if i == 0 else "y" if i == n_ops else f"t{i}")
        shp = ints(Tensor.TensorStartShapeVector, list(shape))
        Tensor.TensorStart(b)
        Tensor.TensorAddShape(b, shp)
        Tensor.TensorAddType(b, 0)  # FLOAT32
        Tensor.TensorAddBuffer(b, 0)
        Tensor.TensorAddName(b, s)
        tensors.append(Tensor.TensorEnd(b))
    ops = []
    for i in range(n_ops):
        op_in = ints(Operator.OperatorStartInputsVector, [i])
        op_out = ints(Operator.OperatorStartOutputsVector, [i + 1])
        Operator.OperatorStart(b)
        Operator.OperatorAddOpcodeIndex(b, 0)
        Operator.OperatorAddInputs(b, op_in)
        Operator.OperatorAddOutputs(b, op_out)
        ops.append(Operator.OperatorEnd(b))
    tv = offsets(SubGraph.SubGraphStartTensorsVector, tensors)
    sg_in, sg_out = ints(SubGraph.SubGraphStartInputsVector, [0]), ints(SubGraph.SubGraphStartOutputsVector, [n_ops])
    ov = offsets(SubGraph.SubGraphStartOperatorsVector, ops)
    SubGraph.SubGraphStart(b)
    SubGraph.SubGraphAddTensors(b, tv)
    SubGraph.SubGraphAddInputs(b, sg_in)
    SubGraph.SubGraphAddOutputs(b, sg_out)
    SubGraph.SubGraphAddOperators(b, ov)
    sg = SubGraph.SubGraphEnd(b)
    OperatorCode.OperatorCodeStart(b)
    OperatorCode.OperatorCodeAddDeprecatedBuiltinCode(b, 19)  # RELU
    OperatorCode.OperatorCodeAddBuiltinCode(b, 19)
    OperatorCode.OperatorCodeAddVersion(b, 1)
    oc = OperatorCode.OperatorCodeEnd(b)
    ocv = offsets(Model.ModelStartOperatorCodesVector, [oc])
    sgv = offsets(Model.ModelStartSubgraphsVector, [sg])
    bv = offsets(Model.ModelStartBuffersVector, [buf])
    Model.ModelStart(b)
    Model.ModelAddVersion(b, 3)
    Model.ModelAddOperatorCodes(b, ocv)
    Model.ModelAddSubgraphs(b, sgv)
    Model.ModelAddBuffers(b, bv)
    b.Finish(Model.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def onnx_conv_model(batch: int | str = 1):
    """Conv(3->4, 3x3, pad 1) + Relu on an NCHW 8x8 input; 1*4*8*8*27 = 6,912 MACs at batch 1."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "conv", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def make_pt2(path: Path) -> Path:
    """A .pt2 with a dynamic batch (symbolic sizes and sym-int ops), a parameter, a buffer and a lifted constant."""
    import torch

    class Dyn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)
            self.register_buffer("scale", torch.full((8,), 2.0))

        def forward(self, x, y):
            z = (self.fc(x) * self.scale).reshape(x.shape[0] * 2, -1)
            return z, y[: x.shape[0] // 2 + 1] + torch.tensor([1.0, 2.0, 3.0])

    batch = torch.export.Dim("batch", min=2, max=1024)
    ep = torch.export.export(
        Dyn().eval(), (torch.randn(4, 8), torch.randn(6, 3)), dynamic_shapes=({0: batch}, {0: torch.export.Dim("n")})
    )
    torch.export.save(ep, path)
    return path


PT2_ARGS = ("--input", "x:4x8", "--input", "y:6x3")

_TF_SEEDS = r"""
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras
out = sys.argv[1]
m = keras.Sequential([keras.Input((8, 8, 3), name="img"), keras.layers.Conv2D(4, 3), keras.layers.ReLU()])
m.save(os.path.join(out, "seed.keras"))
m.export(os.path.join(out, "seed_sm"), verbose=False)
"""

_PADDLE_SEED = r"""
import os, sys
os.environ.setdefault("GLOG_minloglevel", "3")
import paddle
class Net(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = paddle.nn.Conv2D(3, 4, 3, padding=1)
    def forward(self, x):
        return paddle.nn.functional.relu(self.conv(x))
net = Net()
net.eval()
spec = [paddle.static.InputSpec([1, 3, 8, 8], "float32", "x")]
paddle.jit.save(net, os.path.join(sys.argv[1], "seed"), input_spec=spec)
"""


def make_seeds(root: Path, formats: tuple[str, ...]) -> dict[str, Path]:
    """Write one valid seed per format under `root`; TensorFlow and Paddle seeds are made in child processes."""
    import onnx

    seeds: dict[str, Path] = {}
    if "pt2" in formats:
        seeds["pt2"] = make_pt2(root / "seed.pt2")
    if "onnx" in formats:
        seeds["onnx"] = root / "seed.onnx"
        onnx.save(onnx_conv_model(), str(seeds["onnx"]))
    if "tflite" in formats:
        seeds["tflite"] = root / "seed.tflite"
        seeds["tflite"].write_bytes(tiny_tflite((1, 8, 8, 3)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GLOG_minloglevel="3")
    if "keras" in formats or "saved_model" in formats:
        subprocess.run([sys.executable, "-c", _TF_SEEDS, str(root)], check=True, capture_output=True, env=env)
        seeds["keras"], seeds["saved_model"] = root / "seed.keras", root / "seed_sm"
    if "paddle" in formats:
        script = root / "paddle_seed.py"  # paddle.jit.save reads the layer's source file
        script.write_text(_PADDLE_SEED)
        subprocess.run([sys.executable, str(script), str(root)], check=True, capture_output=True, env=env)
        seeds["paddle"] = root / "seed.json" if (root / "seed.json").exists() else root / "seed.pdmodel"
    return {k: v for k, v in seeds.items() if k in formats}


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One fuzz case: a file (or directory) written by `write(dir)`, analysed with `args`."""

    name: str
    fmt: str
    kind: str  # the mutator family
    write: object  # Callable[[Path, Path], Path]: (case dir, marker) -> model path
    args: tuple[str, ...] = ()
    may_succeed: bool = True  # a mutation that can leave the model valid (exit 0 allowed)


def _flip_bits(rng: random.Random, data: bytes, n: int) -> bytes:
    out = bytearray(data)
    for _ in range(n):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def _byte_mutation(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    how = rng.choice(["flip", "flip", "overwrite", "truncate", "splice", "interesting"])
    if how == "flip":
        return how, _flip_bits(rng, data, rng.choice([1, 2, 8, 64]))
    if how == "overwrite":
        i = rng.randrange(len(data))
        return how, data[:i] + bytes(rng.randrange(256) for _ in range(16)) + data[i + 16 :]
    if how == "truncate":
        return how, data[: rng.randrange(len(data))]
    if how == "splice":
        i = rng.randrange(len(data))
        return how, data[:i] + b"\0" * rng.choice([1, 7, 4096]) + data[i:]
    i = rng.randrange(max(1, len(data) - 8))
    value = rng.choice([b"\xff\xff\xff\xff", b"\x00\x00\x00\x80", b"\xff\xff\xff\x7f", b"\x00\x00\x00\x00"])
    return how, data[:i] + value + data[i + 4 :]


def _zip_members(path: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def _write_zip(path: Path, members: list[tuple[str, bytes]]) -> None:
    with zipfile.ZipFile(path, "w") as z, contextlib.suppress(Exception):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, data in members:
                z.writestr(name, data)


HOSTILE_STRINGS = [
    "__import__('os').system('touch {marker}')",
    "'); __import__('os').system('touch {marker}'); ('",
    "x\n__import__('os').system('touch {marker}')\n#",
    "torch.os.system",
    "torch.ops.load_library",
    "os:system",
    "../../../../{marker}",
    "\x00",
    "\udcff",
    "A" * 5000,
]
HOSTILE_VALUES = [None, True, -1, 0, 2**40, -(2**63), 2**64, 1e308, "NaN", [], {}, [[[[[]]]]], {"__enum__": True}]


def _json_mutation(rng: random.Random, doc, marker: Path):
    """Replace one value somewhere in `doc` (a random walk down), or delete a key, or inject a string."""
    path = []
    node = doc
    while isinstance(node, dict | list) and node and rng.random() < 0.85:
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        path.append((node, key))
        node = node[key]
    if not path:
        return "noop", doc
    parent, key = path[-1]
    how = rng.choice(["value", "value", "string", "delete", "type"])
    if how == "delete" and isinstance(parent, dict):
        del parent[key]
    elif how == "string":
        parent[key] = rng.choice(HOSTILE_STRINGS).format(marker=marker)
    elif how == "type":
        parent[key] = [parent[key]] if not isinstance(parent[key], list) else {"x": parent[key]}
    else:
        parent[key] = rng.choice(HOSTILE_VALUES)
    return f"json-{how}", doc


def pt2_vector(kind: str, marker: Path):
    """The four code-execution vectors of issue 15 and variants, as model.json / member edits of the .pt2 seed."""
    code = f"__import__('os').system('touch {marker}')"

    def node(doc, target="torch.ops.aten.linear.default"):
        return next(n for n in doc["graph_module"]["graph"]["nodes"] if n["target"] == target)

    program_edits = {
        "guards_code": lambda d: d.update(guards_code=[f"{code} == 0"]),
        "guards_code_breakout": lambda d: d.update(guards_code=[f"True, '')\n{code}\n(True"]),
        "expr_size": lambda d: d["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]["as_expr"].update(
            expr_str=f"{code} or Symbol('s77')"
        ),
        "expr_sym_int": lambda d: d["graph_module"]["graph"]["sym_int_values"]["floordiv"]["as_expr"].update(
            expr_str=code
        ),
        "expr_stride": lambda d: d["graph_module"]["graph"]["tensor_values"]["reshape"]["strides"].__setitem__(
            0, {"as_expr": {"expr_str": code, "hint": None}}
        ),
        "target_os_system": lambda d: node(d).update(target="torch.os.system"),
        "target_load_library": lambda d: node(d).update(target="torch.ops.load_library"),
        "target_from_file": lambda d: node(d).update(target="torch.ops.aten.from_file.default"),
        "operator_arg": lambda d: node(d)["inputs"].append(
            {"name": "f", "arg": {"as_operator": "torch.os.system"}, "kind": 1}
        ),
        "node_name": lambda d: node(d).update(name=f"x = {code} #"),
        "source_fn_stack": lambda d: node(d)["metadata"].update(source_fn_stack="linear,torch.os.system"),
        "stack_trace_cr": lambda d: node(d)["metadata"].update(stack_trace=f'File "a\r{code}", line 1, in f'),
        "treespec_enum": lambda d: d["graph_module"]["module_call_graph"][0]["signature"].update(
            in_spec=json.dumps(
                [
                    1,
                    {
                        "type": "builtins.dict",
                        "children_spec": [],
                        "context": json.dumps([{"__enum__": True, "fqn": "os:system", "name": "x"}]),
                    },
                ]
            )
        ),
        "treespec_defaultdict": lambda d: d["graph_module"]["module_call_graph"][0]["signature"].update(
            in_spec=json.dumps(
                [
                    1,
                    {
                        "type": "collections.defaultdict",
                        "children_spec": [],
                        "context": json.dumps(
                            {"default_factory_module": "os", "default_factory_name": "system", "dict_context": []}
                        ),
                    },
                ]
            )
        ),
        "string_arg": lambda d: node(d)["inputs"].append(
            {"name": "mode", "arg": {"as_string": f"'); {code}; ('"}, "kind": 2}
        ),
        "fqn": lambda d: d["graph_module"]["signature"]["input_specs"][0]["parameter"].update(
            parameter_name=f'fc.weight")\n{code}\n#'
        ),
    }
    if kind in program_edits:

        def edit(name, data):
            if name.endswith("models/model.json"):
                doc = json.loads(data)
                program_edits[kind](doc)
                return json.dumps(doc).encode()
            return data

        return edit, {}
    extra = {
        "aoti_so": {
            "data/aotinductor/model/model.wrapper.so": b"\x7fELF" + b"\0" * 60,
            "data/aotinductor/model/model.wrapper_metadata.json": b'{"AOTI_DEVICE_KEY": "cpu"}',
        },
        "aoti_cpp": {
            "data/aotinductor/model/model.wrapper.cpp": b"int x;",
            "data/aotinductor/model/model.wrapper_compile_flags.json": json.dumps(
                {"compiler": f"touch {marker};"}
            ).encode(),
        },
        "pickled_constant": {
            "data/constants/opaque_obj_0": b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
        },
        "legacy_pickle": {"data.pkl": b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."},
    }[kind]
    return (lambda name, data: data), extra


PT2_VECTORS = (
    "guards_code guards_code_breakout expr_size expr_sym_int expr_stride target_os_system target_load_library "
    "target_from_file operator_arg node_name source_fn_stack stack_trace_cr treespec_enum treespec_defaultdict "
    "string_arg fqn aoti_so aoti_cpp pickled_constant legacy_pickle"
).split()
# vectors whose hostile part preflight drops rather than refuses: the model still analyses (exit 0)
PT2_DROPPED = {"guards_code", "guards_code_breakout", "source_fn_stack", "stack_trace_cr"}


# Files built to exhaust the stack, memory or time (docs/safety.md, "Resources"), each with the exit code it must
# end with: 2 refused, 1 valid but not analysable, 0 analysed (without materialising what it generates).
NEG_CHAIN = "- " * 5000 + "s77"
PT2_RESOURCE_VECTORS = {
    "neg_chain_size": 2,
    "neg_chain_stride": 2,
    "neg_chain_offset": 2,
    "neg_chain_sym_int": 2,
    "deep_json": 2,
    "huge_string": 2,
    "program_1gb": 2,
    "buffer_zip_bomb": 2,
    "tiny_values": 2,
}
ONNX_RESOURCE_VECTORS = {"range_400m": 0, "constant_of_shape_400m": 0, "lstm_1e6_steps": 0, "gru_max_dim_steps": 0}


def _declare_size(path: Path, member_suffix: str, size: int) -> None:
    """Patch the uncompressed size the zip's central directory declares for one member (a forged header)."""
    data = bytearray(path.read_bytes())
    at = 0
    while (at := data.find(b"PK\x01\x02", at)) >= 0:
        n = int.from_bytes(data[at + 28 : at + 30], "little")
        if bytes(data[at + 46 : at + 46 + n]).decode().endswith(member_suffix):
            data[at + 24 : at + 28] = size.to_bytes(4, "little")
        at += 46
    path.write_bytes(bytes(data))


def pt2_resource_vector(kind: str, members: list[tuple[str, bytes]], out: Path) -> None:
    """Write the .pt2 seed's `members` to `out` with resource vector `kind` applied."""
    members = list(members)
    k = next(j for j, (n, _) in enumerate(members) if n.endswith("models/model.json"))
    doc = json.loads(members[k][1])
    g = doc["graph_module"]["graph"]
    expr = {"as_expr": {"expr_str": NEG_CHAIN, "hint": None}}
    program = None
    if kind == "neg_chain_size":
        g["tensor_values"]["x"]["sizes"][0] = expr
    elif kind == "neg_chain_stride":
        g["tensor_values"]["reshape"]["strides"][0] = expr
    elif kind == "neg_chain_offset":
        g["tensor_values"]["linear"]["storage_offset"] = expr
    elif kind == "neg_chain_sym_int":
        g["sym_int_values"]["floordiv"] = expr
    elif kind == "deep_json":
        program = members[k][1][:-1] + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    elif kind == "tiny_values":  # 10**7 empty objects: 30 MB of text promising 2.4 GB of dicts
        program = members[k][1][:-1] + b', "x": [' + b"{}," * (10**7 - 1) + b"{}]}"
    elif kind == "huge_string":
        doc["guards_code"] = ["x" * ((16 << 20) + 1)]  # one character over the 16 MiB string cap
    elif kind == "buffer_zip_bomb":  # the 8-float buffer declared 1.5 GiB (3 * 2**27 floats) in a few bytes
        big = [{"as_int": 3 << 27}]
        g["tensor_values"]["b_scale"]["sizes"] = big
        c = next(j for j, (n, _) in enumerate(members) if n.endswith("model_weights_config.json"))
        cfg = json.loads(members[c][1])
        cfg["config"]["scale"]["tensor_meta"]["sizes"] = big
        members[c] = (members[c][0], json.dumps(cfg).encode())
    members[k] = (members[k][0], program if program is not None else json.dumps(doc).encode())
    if kind == "buffer_zip_bomb":
        w = next(j for j, (n, _) in enumerate(members) if n.endswith("data/weights/weight_2"))
        members[w] = (members[w][0], b"\0" * 4096)
    _write_zip(out, members)
    if kind == "program_1gb":
        _declare_size(out, "models/model.json", 1 << 30)
    elif kind == "buffer_zip_bomb":
        _declare_size(out, "data/weights/weight_2", 3 << 29)


def onnx_resource_vector(kind: str, out: Path) -> None:
    """Write ONNX resource vector `kind` to `out`: generators of 4 * 10**8 elements, recurrences of 10**6 and
    2**31 - 1 steps."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    scalar = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [])  # noqa: E731
    n = 400_000_000
    if kind in ("range_400m", "constant_of_shape_400m"):
        if kind == "range_400m":
            inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in (("s", 0), ("l", n), ("d", 1))]
            gen = [helper.make_node("Range", ["s", "l", "d"], ["r"]), helper.make_node("Cast", ["r"], ["g"], to=1)]
        else:
            inits = [numpy_helper.from_array(np.array([n], np.int64), "shp")]
            gen = [helper.make_node("ConstantOfShape", ["shp"], ["g"])]
        nodes = [
            *gen,
            helper.make_node("ReduceSum", ["g"], ["t"], keepdims=0),
            helper.make_node("Add", ["t", "x"], ["y"]),
        ]
        graph = helper.make_graph(nodes, "gen", [scalar("x")], [scalar("y")], inits)
        opset = 17
    else:
        rnn, steps = ("LSTM", 10**6) if kind == "lstm_1e6_steps" else ("GRU", 2**31 - 1)
        g = {"LSTM": 4, "GRU": 3}[rnn]
        w = numpy_helper.from_array(np.zeros((1, g * 4, 3), np.float32), "W")
        r = numpy_helper.from_array(np.zeros((1, g * 4, 4), np.float32), "R")
        outs = ["y", "yh"] + (["yc"] if rnn == "LSTM" else [])
        node = helper.make_node(rnn, ["x", "W", "R"], outs, hidden_size=4)
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, 3])
        yh = helper.make_tensor_value_info("yh", TensorProto.FLOAT, [1, 1, 4])
        graph = helper.make_graph([node], "rnn", [x], [yh], [w, r])
        opset = 14
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), out)


KERAS_VECTORS = ("batch_shape_huge", "batch_shape_negative", "lambda_layer", "unknown_module")


def keras_vector(kind: str, config: dict, marker: Path) -> dict:
    """Edits of a .keras file's config.json: the TensorFlow segfault of issue 15, and code-loading layers."""
    layers = config["config"]["layers"]
    if kind.startswith("batch_shape"):
        layers[0]["config"]["batch_shape"] = [2, 100000, 100000, 3] if kind.endswith("huge") else [1, -8, 8, 3]
    elif kind == "lambda_layer":
        code = f"__import__('os').system('touch {marker}')"
        layers.append(
            {
                "module": "keras.layers",
                "class_name": "Lambda",
                "config": {"name": "evil", "function": {"class_name": "__lambda__", "config": {"code": code}}},
                "registered_name": None,
            }
        )
    else:
        layers[1]["module"] = "os"
        layers[1]["class_name"] = "system"
    return config


def _onnx_mutation(rng: random.Random, model, marker: Path):
    """A structure-aware edit of an ONNX ModelProto (returns a label)."""
    from onnx import TensorProto, helper

    g = model.graph
    how = rng.choice(
        ["attr", "attr", "dim", "elem_type", "opset", "op_type", "domain", "external", "rewire", "initializer", "drop"]
    )
    if how == "attr":
        node = g.node[0]
        attr = rng.choice(list(node.attribute))
        value = rng.choice([-5, 0, 2**40, -(2**62), 1, 3])
        if attr.ints:
            attr.ints[rng.randrange(len(attr.ints))] = value
        else:
            attr.i = value
        return f"attr-{attr.name}={value}"
    if how == "dim":
        dim = g.input[0].type.tensor_type.shape.dim[rng.randrange(4)]
        value = rng.choice([-1, 0, 2**40, 2**31, 7])
        dim.dim_value = value if value >= 0 else 0
        if value < 0:
            dim.dim_param = "dyn"
        return f"dim={value}"
    if how == "elem_type":
        value = rng.choice([9999, 0, 8, 2, 16, 23, -1])
        g.input[0].type.tensor_type.elem_type = value if value >= 0 else 1
        return f"elem_type={value}"
    if how == "opset":
        value = rng.choice([99, 0, 1, 7, 22, 10**6])
        model.opset_import[0].version = value
        return f"opset={value}"
    if how == "op_type":
        g.node[rng.randrange(len(g.node))].op_type = rng.choice(["Det", "NoSuchOp", "Loop", "", "Conv\x00"])
        return "op_type"
    if how == "domain":
        g.node[0].domain = rng.choice(["com.evil", "ai.onnx.ml", "com.microsoft"])
        return "domain"
    if how == "external":
        w = g.initializer[0]
        w.ClearField("raw_data")
        w.ClearField("float_data")
        w.data_location = TensorProto.EXTERNAL
        loc = rng.choice(["../secret", "/etc/passwd", "a\x00b", str(marker), "w.bin", "", "x" * 5000])
        for k, v in (("location", loc), ("offset", rng.choice(["0", "-1", "x"])), ("length", "432")):
            w.external_data.add(key=k, value=v)
        return "external"
    if how == "rewire":
        node = g.node[rng.randrange(len(g.node))]
        node.input[0] = rng.choice(["ghost", "y", "c", ""])
        return "rewire"
    if how == "initializer":
        w = g.initializer[0]
        w.dims[0] = rng.choice([0, 2**40, 1, 5])
        return "initializer-dims"
    del g.node[rng.randrange(len(g.node))]
    g.node.append(helper.make_node("Relu", ["x"], ["y"]))
    return "drop-node"


def build_cases(seeds: dict[str, Path], n_per_format: dict[str, int], seed: int = 0) -> list[Case]:
    """Deterministic cases for every format in `seeds`: n_per_format[fmt] each, mixed mutators."""
    rng = random.Random(seed)
    cases: list[Case] = []
    for fmt, n in n_per_format.items():
        if fmt not in seeds:
            continue
        src = seeds[fmt]
        for i in range(n):
            case_seed = rng.randrange(2**32)
            cases.append(_case(fmt, src, i, case_seed))
    return cases


def _case(fmt: str, src: Path, i: int, case_seed: int) -> Case:
    rng = random.Random(case_seed)
    name = f"{fmt}-{i:04d}"
    suffix = {"pt2": ".pt2", "onnx": ".onnx", "tflite": ".tflite", "keras": ".keras"}.get(fmt, "")
    args = PT2_ARGS if fmt == "pt2" else ("--batch", "1") if fmt in ("keras", "saved_model") else ()

    if fmt == "pt2" and i < len(PT2_VECTORS):
        vector = PT2_VECTORS[i]

        def write_vector(d: Path, marker: Path) -> Path:
            edit, extra = pt2_vector(vector, marker)
            members = [(n, edit(n, b)) for n, b in _zip_members(src)]
            root = members[0][0].split("/")[0]
            members += [(name if name == "data.pkl" else f"{root}/{name}", b) for name, b in extra.items()]
            out = d / "model.pt2"
            _write_zip(out, members)
            return out

        return Case(f"{name}-{vector}", fmt, f"vector:{vector}", write_vector, args, may_succeed=vector in PT2_DROPPED)

    resource = list(PT2_RESOURCE_VECTORS if fmt == "pt2" else ONNX_RESOURCE_VECTORS if fmt == "onnx" else {})
    first = len(PT2_VECTORS) if fmt == "pt2" else 0
    if first <= i < first + len(resource):
        vector = resource[i - first]
        want = (PT2_RESOURCE_VECTORS if fmt == "pt2" else ONNX_RESOURCE_VECTORS)[vector]

        def write_resource(d: Path, marker: Path) -> Path:
            out = d / f"model{suffix}"
            if fmt == "pt2":
                pt2_resource_vector(vector, _zip_members(src), out)
            else:
                onnx_resource_vector(vector, out)
            return out

        return Case(f"{name}-{vector}", fmt, f"resource:{vector}", write_resource, args, may_succeed=want == 0)

    if fmt == "keras" and i < len(KERAS_VECTORS):
        vector = KERAS_VECTORS[i]

        def write_keras(d: Path, marker: Path) -> Path:
            members = _zip_members(src)
            k = next(j for j, (n, _) in enumerate(members) if n == "config.json")
            members[k] = ("config.json", json.dumps(keras_vector(vector, json.loads(members[k][1]), marker)).encode())
            out = d / "model.keras"
            _write_zip(out, members)
            return out

        vector_args = () if vector == "batch_shape_huge" else args  # its batch is fixed to 2
        return Case(f"{name}-{vector}", fmt, f"vector:{vector}", write_keras, vector_args, may_succeed=False)

    family = rng.choice(_FAMILIES[fmt])

    def write(d: Path, marker: Path) -> Path:
        r = random.Random(case_seed)
        if fmt == "saved_model":
            out = d / "sm"
            import shutil

            shutil.copytree(src, out)
            pb = out / "saved_model.pb"
            variables = sorted((out / "variables").glob("*"))
            target = pb if family == "bytes" or not variables else r.choice([pb, *variables])
            target.write_bytes(_byte_mutation(r, target.read_bytes())[1])
            return out
        if fmt == "paddle":
            import shutil

            for p in src.parent.glob(src.stem + ".*"):
                shutil.copy(p, d / p.name)
            prog, params = d / src.name, d / (src.stem + ".pdiparams")
            if family == "json" and prog.suffix == ".json":
                _, doc = _json_mutation(r, json.loads(prog.read_text()), marker)
                prog.write_text(json.dumps(doc))
            else:
                target = r.choice([prog, params])
                target.write_bytes(_byte_mutation(r, target.read_bytes())[1])
            return prog
        out = d / f"model{suffix}"
        data = src.read_bytes()
        if family == "bytes":
            out.write_bytes(_byte_mutation(r, data)[1])
        elif family == "onnx":
            import onnx

            model = onnx.load_model_from_string(data)
            _onnx_mutation(r, model, marker)
            out.write_bytes(model.SerializeToString())
        elif family in ("zip", "json"):
            members = _zip_members(src)
            if family == "json":
                jsons = [k for k, (n, _) in enumerate(members) if n.endswith(".json")]
                k = r.choice(jsons)
                with contextlib.suppress(ValueError):
                    _, doc = _json_mutation(r, json.loads(members[k][1]), marker)
                    members[k] = (members[k][0], json.dumps(doc).encode())
            else:
                members = _zip_mutation(r, members, marker)
            _write_zip(out, members)
        elif family == "tflite":
            out.write_bytes(tiny_tflite(tuple(r.choice([-1, 0, 1, 3, 8, 2**31 - 1, 2**30]) for _ in range(4))))
        return out

    return Case(f"{name}-{family}", fmt, family, write, args)


def _zip_mutation(rng: random.Random, members: list[tuple[str, bytes]], marker: Path) -> list[tuple[str, bytes]]:
    how = rng.choice(["drop", "duplicate", "rename", "add", "flip"])
    k = rng.randrange(len(members))
    name, data = members[k]
    root = name.split("/")[0] if "/" in name else ""
    if how == "drop":
        return members[:k] + members[k + 1 :]
    if how == "duplicate":
        return [*members, (name, data)]
    if how == "rename":
        new = rng.choice(["../x", "/abs", name.upper(), name + ".pkl", f"{root}/code/x.py", name.replace("/", "\\")])
        return [*members[:k], (new, data), *members[k + 1 :]]
    if how == "add":
        extra = rng.choice(
            [
                (f"{root}/data/aotinductor/model/x.so", b"\x7fELF"),
                (f"{root}/data.pkl", b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."),
                (f"{root}/extra/x", b"x" * 100),
                ("other/x", b"x"),
            ]
        )
        return [*members, extra]
    return [*members[:k], (name, _flip_bits(rng, data, 8) if data else data), *members[k + 1 :]]


_FAMILIES = {
    "pt2": ["bytes", "zip", "json", "json", "json"],
    "onnx": ["bytes", "onnx", "onnx", "onnx"],
    "tflite": ["bytes", "bytes", "tflite"],
    "keras": ["bytes", "zip", "json"],
    "saved_model": ["bytes", "variables"],
    "paddle": ["bytes", "json"],
}


# --------------------------------------------------------------------------------------------
# The driver: one worker process runs many cases
# --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    case: str
    fmt: str
    kind: str
    code: int | None  # exit code; None when the worker died or hung on this case
    stderr: str
    seconds: float
    marker: bool
    problems: list[str] = field(default_factory=list)


def check(outcome: Outcome, may_succeed: bool) -> list[str]:
    """What is wrong with an outcome: a traceback, a signal, a hang, a marker, noisy stderr, a bad exit code."""
    out = []
    if outcome.code is None:
        out.append(f"the worker died or hung ({outcome.stderr[:200]})")
        return out
    if outcome.marker:
        out.append("CODE RAN: the marker file exists")
    if "Traceback" in outcome.stderr:
        out.append("a traceback on stderr")
    if "internal error" in outcome.stderr:
        out.append("an internal error instead of a clean one")
    lines = [ln for ln in outcome.stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
    if outcome.code != 0 and not 1 <= len(lines) <= 2:
        out.append(f"{len(lines)} error lines on stderr")
    if outcome.code != 0 and lines and not lines[0].startswith("error: "):
        out.append("stderr does not start with 'error: '")
    if outcome.code not in ((0, 1, 2) if may_succeed else (1, 2)):
        out.append(f"exit code {outcome.code}")
    return out


def run_in_worker(case: Case, workdir: Path) -> Outcome:
    """Worker side: write the case, run the CLI in-process, return what happened."""
    from analyzer.cli import cli

    d = workdir / case.name
    d.mkdir(parents=True, exist_ok=True)
    marker = d / "MARKER"
    t0 = time.perf_counter()
    try:
        path = case.write(d, marker)
    except Exception as exc:  # noqa: BLE001 - a case the generator cannot write is skipped, not a finding
        return Outcome(case.name, case.fmt, case.kind, 0, f"(not written: {type(exc).__name__}: {exc})", 0.0, False)
    err = io.StringIO()
    code: int | None
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.main(["analyze", str(path), *case.args], prog_name="preflight", standalone_mode=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - an escaped exception is a finding
            import traceback

            err.write("Traceback (escaped the CLI):\n" + traceback.format_exc())
            code = 1
    seconds = time.perf_counter() - t0
    outcome = Outcome(case.name, case.fmt, case.kind, code, err.getvalue(), seconds, marker.exists())
    import shutil

    shutil.rmtree(d, ignore_errors=True)
    return outcome


def worker_main() -> None:
    """`python -c "...worker_main()" SEEDS_JSON WORKDIR SEED N_JSON`: read case indices on stdin, answer in JSON."""
    seeds = {k: Path(v) for k, v in json.loads(sys.argv[1]).items()}
    workdir = Path(sys.argv[2])
    cases = build_cases(seeds, json.loads(sys.argv[4]), int(sys.argv[3]))
    out = sys.stdout
    sys.stdout = io.StringIO()  # nothing else may write to the answer channel
    for line in sys.stdin:
        case = cases[int(line)]
        o = run_in_worker(case, workdir)
        out.write(json.dumps(o.__dict__) + "\n")
        out.flush()


def run_cases(
    seeds: dict[str, Path],
    n_per_format: dict[str, int],
    workdir: Path,
    *,
    seed: int = 0,
    case_timeout_s: float = 120.0,
    progress=None,
) -> list[Outcome]:
    """Run every case in worker processes (one at a time, restarted when a case kills or hangs one)."""
    cases = build_cases(seeds, n_per_format, seed)
    outcomes: list[Outcome] = []
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + str(REPO / "tests"), HF_HUB_OFFLINE="1")
    env.pop("PREFLIGHT_DEBUG", None)
    cmd = [
        sys.executable,
        "-c",
        "from fuzzing import worker_main; worker_main()",
        json.dumps({k: str(v) for k, v in seeds.items()}),
        str(workdir),
        str(seed),
        json.dumps(n_per_format),
    ]
    worker = None
    for index, case in enumerate(cases):
        if worker is None:
            worker = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True
            )
        worker.stdin.write(f"{index}\n")
        worker.stdin.flush()
        line = _readline(worker, case_timeout_s)
        if line is None:
            worker.kill()
            worker.wait()
            rc = worker.returncode
            worker = None
            o = Outcome(case.name, case.fmt, case.kind, None, f"worker exit {rc}", case_timeout_s, False)
        else:
            o = Outcome(**json.loads(line))
        o.problems = check(o, case.may_succeed)
        outcomes.append(o)
        if progress is not None:
            progress(o)
    if worker is not None:
        worker.stdin.close()
        worker.wait(timeout=60)
    return outcomes


def _readline(proc: subprocess.Popen, timeout_s: float) -> str | None:
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout=timeout_s):
            return None
        line = proc.stdout.readline()
        return line or None
    finally:
        sel.close()


def hf_config_layers(layers: int, *, alternating: bool = False) -> dict:
    """A transformers config.json (as a dict) of `layers` small layers: GPT-2 (identical layers), or GPT-Neo with
    global and local attention alternating (`alternating`: same shapes, different layers)."""
    if alternating:
        return {
            "model_type": "gpt_neo",
            "num_layers": layers,
            "attention_types": [[["global", "local"], layers // 2]],
            "hidden_size": 64,
            "num_heads": 4,
            "vocab_size": 100,
            "bos_token_id": 0,
            "eos_token_id": 0,
        }
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_layer": layers,
        "n_embd": 64,
        "n_head": 2,
        "vocab_size": 1000,
        "n_positions": 128,
        "bos_token_id": 0,
        "eos_token_id": 0,
    }
