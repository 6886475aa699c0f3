"""Hostile and broken model files: preflight refuses them with exit 2 (1 for a valid ONNX with an op
TVM cannot import), a one- or two-line message, no traceback, and never runs code from the file."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import pickle
import random
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from fuzzing import PT2_ARGS, make_pt2, onnx_conv_model
from onnx import TensorProto, helper

from analyzer.cli import cli

REPO = Path(__file__).resolve().parents[1]


def run(*args):
    return CliRunner().invoke(cli, ["analyze", *map(str, args)])


def refused(path: Path, code: int = 2, *extra: str) -> str:
    """Analyse `path`; expect a clean error with `code`; return the message."""
    res = run(path, *extra)
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr, res.exception)
    assert isinstance(res.exception, SystemExit), repr(res.exception)  # nothing escaped the CLI
    assert "Traceback" not in res.output and "Traceback" not in res.stderr
    assert res.stdout == ""
    msg = res.stderr.strip()
    assert msg.startswith("error: "), msg
    assert len(msg.splitlines()) <= 2, msg
    return msg


# ---- payloads ----------------------------------------------------------------------------------


class Touch:
    """Unpickling this creates `marker`: the proof that code from the file ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


class OpenW:
    """Unpickling this opens `marker` for writing (creates it)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def marker(tmp_path) -> Path:
    m = tmp_path / "PWNED"
    yield m
    assert not m.exists(), "code from the model file ran"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Real files to start from: a valid .onnx and a torch.export .pt2 archive."""
    import torch

    d = tmp_path_factory.mktemp("hostile_src")
    onnx_path = d / "tiny.onnx"
    onnx.save(onnx_conv_model(), str(onnx_path))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return torch.relu(self.fc(x))

    pt2 = d / "net.pt2"
    torch.export.save(torch.export.export(Net().eval(), (torch.randn(2, 4),)), pt2)
    dyn = make_pt2(d / "dyn.pt2")  # symbolic sizes (expr_str), sym-int ops, a buffer and a lifted constant
    return {"onnx": onnx_path, "pt2": pt2, "dyn": dyn}


DYN_ARGS = PT2_ARGS


def test_sources_are_valid(files):
    """The hostile variants below start from files preflight accepts."""
    for key, path in files.items():
        res = run(path, *(DYN_ARGS if key == "dyn" else ()))
        assert res.exit_code == 0, res.stderr


# ---- broken files --------------------------------------------------------------------------------


def test_empty_file(tmp_path):
    for name in ("model.onnx", "model.pt2"):
        p = tmp_path / name
        p.write_bytes(b"")
        assert "empty" in refused(p)


def test_truncated_onnx(tmp_path, files):
    data = files["onnx"].read_bytes()
    p = tmp_path / "truncated.onnx"
    p.write_bytes(data[: len(data) // 2])
    refused(p)


def test_truncated_pt2(tmp_path, files):
    data = files["pt2"].read_bytes()
    p = tmp_path / "truncated.pt2"
    p.write_bytes(data[: len(data) // 2])
    refused(p)


@pytest.mark.parametrize("suffix", [".onnx", ".pt2"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_bytes(tmp_path, suffix, seed):
    rng = random.Random(seed)
    p = tmp_path / f"random{suffix}"
    p.write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    refused(p)


def test_text_file_named_onnx(tmp_path):
    p = tmp_path / "model.onnx"
    p.write_text("this is not a model\nit is a text file, ok?\n" * 20)
    refused(p)


def test_text_file_named_pt2(tmp_path):
    p = tmp_path / "model.pt2"
    p.write_text("PK but not really a zip\n")
    refused(p)


def test_directory(tmp_path):
    d = tmp_path / "model.onnx"
    d.mkdir()
    assert "directory" in refused(d)
    assert "directory" in refused(tmp_path)


def test_missing_path(tmp_path):
    assert "no such file" in refused(tmp_path / "nope.onnx")


@pytest.mark.parametrize("name", ["model.xyz", "model.tflite", "model"])
def test_unknown_or_unsupported_suffix(tmp_path, files, name):
    p = tmp_path / name
    p.write_bytes(files["onnx"].read_bytes())  # a valid ONNX, but not named like one
    refused(p)


def test_zip_that_is_not_an_export_archive(tmp_path):
    p = tmp_path / "model.pt2"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("hello.txt", "hi")
    assert "not a torch.export" in refused(p)


# ---- pickles: never unpickled, whatever the file is called ------------------------------------------------

PICKLE_NAMES = ["model.pt", "model.pth", "model.bin", "model.pkl", "model.ckpt", "model.pt2", "model.onnx", "model"]


@pytest.mark.parametrize("name", PICKLE_NAMES)
@pytest.mark.parametrize("payload", [Touch, OpenW])
@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_malicious_pickle(tmp_path, marker, name, payload, protocol):
    p = tmp_path / name
    p.write_bytes(pickle.dumps(payload(marker), protocol=protocol))
    assert not marker.exists()
    refused(p)


@pytest.mark.parametrize("name", ["model.pt2", "model.pt", "model.pth", "model.bin", "model.onnx", "model"])
def test_torch_save_zip_with_malicious_object(tmp_path, marker, name):
    import torch

    p = tmp_path / name
    torch.save({"state_dict": {"w": torch.zeros(2)}, "evil": Touch(marker)}, p)
    assert zipfile.is_zipfile(p) and not marker.exists()
    msg = refused(p)
    if name.endswith((".pt2", ".pt")):
        assert "pickle" in msg


def test_torch_save_legacy_format_with_malicious_object(tmp_path, marker):
    import torch

    p = tmp_path / "model.pt2"
    torch.save({"evil": Touch(marker)}, p, _use_new_zipfile_serialization=False)
    refused(p)


# ---- a real .pt2 archive with a pickle slipped in ---------------------------------------------------------


def _rewrite_archive(src: Path, dst: Path, edit) -> None:
    """Copy the zip `src` to `dst`, passing each (name, bytes) through `edit` (None drops it)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            out = edit(info.filename, zin.read(info.filename))
            if out is not None:
                name, data = out
                zout.writestr(name, data)


def _evil_torch_save(marker: Path) -> bytes:
    import io

    import torch

    buf = io.BytesIO()
    torch.save(Touch(marker), buf)
    return buf.getvalue()


def test_pt2_archive_layout(files):
    """The attacks below rely on the archive layout of torch.export.save."""
    with zipfile.ZipFile(files["pt2"]) as z:
        names = z.namelist()
    assert any(n.endswith("data/weights/weight_0") for n in names)
    assert any(n.endswith("data/weights/model_weights_config.json") for n in names)
    assert any(n.endswith("data/sample_inputs/model.pt") for n in names)


def test_payloads_are_live(tmp_path):
    """Control: unpickled without protection, each payload does create its marker."""
    for i, payload in enumerate((Touch, OpenW)):
        m = tmp_path / f"control{i}"
        obj = pickle.loads(pickle.dumps(payload(m)))
        if hasattr(obj, "close"):
            obj.close()
        assert m.exists()


def test_rewritten_archive_still_loads(tmp_path, files):
    """Control: copying the archive member by member keeps it a valid .pt2."""
    p = tmp_path / "copy.pt2"
    _rewrite_archive(files["pt2"], p, lambda n, d: (n, d))
    res = run(p)
    assert res.exit_code == 0, res.stderr


def _pickled_weight_editor(evil: bytes):
    def edit(name, data):
        if name.endswith("data/weights/weight_0"):
            return name, evil
        if name.endswith("data/weights/model_weights_config.json"):
            cfg = json.loads(data)
            for entry in cfg["config"].values():
                if entry["path_name"] == "weight_0":
                    entry["use_pickle"] = True
            return name, json.dumps(cfg).encode()
        return name, data

    return edit


def test_pt2_with_pickled_weight_is_a_live_attack(tmp_path, files):
    """Control: plain torch.export.load runs the payload of the archive built below."""
    import contextlib

    import torch

    m = tmp_path / "control"
    p = tmp_path / "model.pt2"
    _rewrite_archive(files["pt2"], p, _pickled_weight_editor(_evil_torch_save(m)))
    with contextlib.suppress(Exception):
        torch.export.load(p)
    assert m.exists()


@pytest.mark.parametrize("flavour", ["raw_pickle", "torch_save"])
def test_pt2_with_pickled_weight(tmp_path, files, marker, flavour):
    evil = pickle.dumps(Touch(marker)) if flavour == "raw_pickle" else _evil_torch_save(marker)
    p = tmp_path / "model.pt2"
    _rewrite_archive(files["pt2"], p, _pickled_weight_editor(evil))
    refused(p)


def test_pt2_legacy_format_with_malicious_state_dict(tmp_path, files, marker):
    """torch.export.load falls back to the pre-2.5 layout (serialized_*.pt members, torch.load'ed)."""
    with zipfile.ZipFile(files["pt2"]) as z:
        program = next(z.read(n) for n in z.namelist() if n.endswith("models/model.json"))
    refused(_legacy_archive(tmp_path / "legacy.pt2", program, _evil_torch_save(marker)))


def _cli_process(path: Path) -> subprocess.CompletedProcess:
    """A real `preflight analyze PATH` process: what a user's terminal shows, logging included."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("PREFLIGHT_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "analyzer.cli", "analyze", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _assert_clean_process_error(p: subprocess.CompletedProcess, code: int = 2) -> None:
    assert p.returncode == code, (p.returncode, p.stderr)
    assert p.stdout == ""
    assert "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) <= 2, p.stderr
    assert p.stderr.startswith("error: ")


def test_pt2_with_pickled_weight_in_a_real_process(tmp_path, files, marker):
    p = tmp_path / "model.pt2"
    _rewrite_archive(files["pt2"], p, _pickled_weight_editor(_evil_torch_save(marker)))
    _assert_clean_process_error(_cli_process(p))


def _legacy_archive(path: Path, program: bytes, evil: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("version", "8.20")
        z.writestr("serialized_exported_program.json", program)
        for member in ("serialized_state_dict.pt", "serialized_constants.pt", "serialized_example_inputs.pt"):
            z.writestr(member, evil)
    return path


def test_pt2_legacy_format_in_a_real_process(tmp_path, files, marker):
    with zipfile.ZipFile(files["pt2"]) as z:
        program = next(z.read(n) for n in z.namelist() if n.endswith("models/model.json"))
    p = _legacy_archive(tmp_path / "legacy.pt2", program, _evil_torch_save(marker))
    _assert_clean_process_error(_cli_process(p))


def test_pt2_with_malicious_sample_inputs(tmp_path, files, marker):
    """The sample inputs (a torch.save pickle torch.export.load reads, falling back to weights_only=False) are
    never read: the program analyses as before and the payload stays inert."""
    evil = _evil_torch_save(marker)
    p = tmp_path / "model.pt2"
    _rewrite_archive(files["pt2"], p, lambda n, d: (n, evil) if n.endswith("data/sample_inputs/model.pt") else (n, d))
    res = run(p, "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["totals"]["params"] == 4 * 3 + 3  # Linear(4, 3)


def test_pt2_with_extra_pickle_member(tmp_path, files, marker):
    evil = pickle.dumps(Touch(marker))
    p = tmp_path / "model.pt2"
    _rewrite_archive(files["pt2"], p, lambda n, d: (n, d))
    with zipfile.ZipFile(p, "a") as z:
        z.writestr("net/data.pkl", evil)
    assert "pickle" in refused(p)


def test_pt2_with_pickled_constant(tmp_path, files, marker):
    """A constant entry pointing at an 'opaque object' file is read with pickle.loads by torch."""
    evil = pickle.dumps(Touch(marker))

    def edit(name, data):
        if name.endswith("data/constants/model_constants_config.json"):
            cfg = {
                "config": {
                    "evil": {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True, "tensor_meta": None}
                }
            }
            return name, json.dumps(cfg).encode()
        return name, data

    p = tmp_path / "model.pt2"
    _rewrite_archive(files["pt2"], p, edit)
    prefix = next(n for n in zipfile.ZipFile(p).namelist() if n.endswith("archive_format")).split("/")[0]
    with zipfile.ZipFile(p, "a") as z:
        z.writestr(f"{prefix}/data/constants/opaque_obj_0", evil)
        z.writestr(f"{prefix}/data/constants/custom_obj_0", evil)
    refused(p)


# ---- ONNX graphs that are well-formed protobuf but hostile or broken ----------------------------------------


def test_onnx_unknown_domain_operator(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Boom", ["r"], ["y"], domain="com.evil")]
    model = helper.make_model(
        helper.make_graph(nodes, "evil", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.evil", 1)],
    )
    model.ir_version = 8
    p = tmp_path / "evil.onnx"
    onnx.save(model, str(p))
    msg = refused(p, 1)
    assert "Boom" in msg and "com.evil" in msg


@pytest.mark.parametrize(("op", "shape_in", "shape_out"), [("Det", [2, 3, 3], [2]), ("Celu", [2, 3], [2, 3])])
def test_onnx_standard_operator_tvm_cannot_import(tmp_path, op, shape_in, shape_out):
    """A valid ONNX model using a standard op missing from TVM 0.27's ONNX importer: exit 1, named."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape_in)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape_out)
    model = helper.make_model(
        helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    p = tmp_path / f"{op}.onnx"
    onnx.save(model, str(p))
    assert op in refused(p, 1)


def test_onnx_made_up_standard_operator(tmp_path):
    """An op name no ONNX schema has, in the default domain: the model is invalid (exit 2) or the op is
    unsupported (exit 1); either way it is named."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(
        helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"])], "g", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    p = tmp_path / "nosuch.onnx"
    onnx.save(model, str(p))
    res = run(p)
    code = res.exit_code if res.exit_code in (1, 2) else 2
    assert "NoSuchOp" in refused(p, code)


def test_onnx_unknown_domain_without_opset_import(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Boom", ["x"], ["y"], domain="com.evil")]
    model = helper.make_model(helper.make_graph(nodes, "evil", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    p = tmp_path / "evil.onnx"
    onnx.save(model, str(p))
    assert "com.evil" in refused(p)


def test_onnx_cyclic_graph(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [
        helper.make_node("Relu", ["b"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Add", ["x", "a"], ["y"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "cycle", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    p = tmp_path / "cycle.onnx"
    onnx.save(model, str(p))
    refused(p)


def test_onnx_dangling_tensor(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"])]  # 'ghost' is produced by nothing
    model = helper.make_model(
        helper.make_graph(nodes, "dangling", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    p = tmp_path / "dangling.onnx"
    onnx.save(model, str(p))
    refused(p)


def test_onnx_without_nodes(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph([], "empty", [x], [x]), opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / "empty_graph.onnx"
    onnx.save(model, str(p))
    refused(p)


def _external(model: onnx.ModelProto, location: str, size: int = 4 * 3 * 3 * 3 * 4) -> onnx.ModelProto:
    w = model.graph.initializer[0]
    w.ClearField("raw_data")
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(size))):
        w.external_data.add(key=k, value=v)
    return model


@pytest.mark.parametrize(
    "location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin", "../../../../../../etc/passwd"]
)
def test_onnx_external_data_outside_model_folder(tmp_path, location):
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 432)  # exists, so only the confinement can refuse it
    p = model_dir / "model.onnx"
    onnx.save(_external(onnx_conv_model(), location), str(p))
    msg = refused(p)
    assert "outside" in msg and "folder" in msg


def test_onnx_external_data_symlink_escape(tmp_path):
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\0" * 432)
    (model_dir / "w.bin").symlink_to(secret)
    p = model_dir / "model.onnx"
    onnx.save(_external(onnx_conv_model(), "w.bin"), str(p))
    assert "outside" in refused(p)


def test_onnx_external_data_missing(tmp_path):
    p = tmp_path / "model.onnx"
    onnx.save(_external(onnx_conv_model(), "gone.bin"), str(p))
    assert "missing" in refused(p)


@pytest.mark.parametrize("location", ["model.onnx.data", "weights/w.bin"])
def test_onnx_external_data_beside_the_model(tmp_path, location):
    p = tmp_path / "model.onnx"
    (tmp_path / "weights").mkdir()
    onnx.save_model(
        onnx_conv_model(),
        str(p),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=location,
        size_threshold=0,
    )
    assert (tmp_path / location).stat().st_size == 432
    res = run(p, "--format", "json")
    assert res.exit_code == 0, res.stderr
    t = json.loads(res.stdout)["totals"]
    # weight 4x3x3x3 = 108 float32 = 432 B; MACs = 1*4*8*8 * 27 = 6912
    assert t["params"] == 108 and t["param_bytes"] == 432
    assert t["macs"] == 6912


def test_onnx_external_data_too_short(tmp_path):
    """The side file holds fewer bytes than the tensor needs: refuse, don't crash."""
    p = tmp_path / "model.onnx"
    (tmp_path / "w.bin").write_bytes(b"\0" * 10)
    onnx.save(_external(onnx_conv_model(), "w.bin"), str(p))
    refused(p)


# ---- .pt2: the four code-execution vectors of issue 15, and variants ---------------------------------------


def _edit_program(src: Path, dst: Path, edit) -> Path:
    """Copy the archive `src` to `dst` with `edit(doc)` applied to models/model.json (parsed)."""

    def member(name, data):
        if name.endswith("models/model.json"):
            doc = json.loads(data)
            edit(doc)
            return name, json.dumps(doc).encode()
        return name, data

    _rewrite_archive(src, dst, member)
    return dst


def _graph(doc: dict) -> dict:
    return doc["graph_module"]["graph"]


def _node(doc: dict, target: str) -> dict:
    return next(n for n in _graph(doc)["nodes"] if n["target"] == target)


def _dyn_ok(path: Path) -> dict:
    res = run(path, *DYN_ARGS, "--format", "json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def test_vector1_guards_code_is_dropped(tmp_path, files, marker):
    """guards_code is compiled and run by run_decompositions(); preflight drops it and reports the odd one."""
    import torch

    payload = lambda m: [f"__import__('os').system('touch {m}') == 0"]  # noqa: E731
    control = tmp_path / "control"
    p = _edit_program(files["dyn"], tmp_path / "c.pt2", lambda d: d.update(guards_code=payload(control)))
    torch.export.load(p).run_decompositions()
    assert control.exists()  # the payload is live under plain torch

    p = _edit_program(files["dyn"], tmp_path / "g.pt2", lambda d: d.update(guards_code=payload(marker)))
    doc = _dyn_ok(p)
    assert any("guards_code" in w and "not a shape guard" in w for w in doc["warnings"])
    assert doc["totals"]["macs"] == _dyn_ok(files["dyn"])["totals"]["macs"]


def test_plain_guards_are_dropped_silently(files):
    """torch.export writes real shape guards; they are dropped without a warning (preflight never runs the model)."""
    with zipfile.ZipFile(files["dyn"]) as z:
        program = json.loads(next(z.read(n) for n in z.namelist() if n.endswith("models/model.json")))
    assert program["guards_code"]  # the source archive has some
    assert not any("guards_code" in w for w in _dyn_ok(files["dyn"])["warnings"])


def _expr_editor(marker: Path, where: str):
    code = f"__import__('os').system('touch {marker}')"

    def edit(doc):
        g = _graph(doc)
        if where == "size":
            g["tensor_values"]["x"]["sizes"][0]["as_expr"]["expr_str"] = f"{code} or Symbol('s77')"
        elif where == "stride":
            g["tensor_values"]["reshape"]["strides"][0] = {"as_expr": {"expr_str": code, "hint": None}}
        elif where == "offset":
            g["tensor_values"]["linear"]["storage_offset"] = {"as_expr": {"expr_str": code, "hint": None}}
        elif where == "sym_int":
            g["sym_int_values"]["floordiv"]["as_expr"]["expr_str"] = code
        elif where == "sym_bool":
            g["sym_bool_values"]["evil"] = {"as_expr": {"expr_str": code, "hint": None}}
        elif where == "lambda":
            g["sym_int_values"]["add"]["as_expr"]["expr_str"] = "Add(Integer(1), (lambda: 1)())"
        elif where == "dunder":
            g["sym_int_values"]["add"]["as_expr"]["expr_str"] = "Integer(1).__class__"

    return edit


@pytest.mark.parametrize("where", ["size", "stride", "offset", "sym_int", "sym_bool", "lambda", "dunder"])
def test_vector2_symbolic_expression(tmp_path, files, marker, where):
    """torch parses every expr_str with sympy.sympify (Python eval); preflight's own grammar refuses code."""
    p = _edit_program(files["dyn"], tmp_path / "e.pt2", _expr_editor(marker, where))
    assert "shape expression" in refused(p, 2, *DYN_ARGS)


def test_vector2_is_live_under_plain_torch(tmp_path, files):
    import torch

    control = tmp_path / "control"
    p = _edit_program(files["dyn"], tmp_path / "c.pt2", _expr_editor(control, "size"))
    with contextlib.suppress(Exception):
        torch.export.load(p)
    assert control.exists()


def _evil_shared_library(tmp_path: Path, marker: Path) -> bytes:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the shared library payload")
    src = tmp_path / "evil.c"
    src.write_text(
        f'#include <stdlib.h>\n__attribute__((constructor)) static void run(void) {{ system("touch {marker}"); }}\n'
    )
    so = tmp_path / "evil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True, capture_output=True)
    return so.read_bytes()


def _with_members(src: Path, dst: Path, members: dict[str, bytes]) -> Path:
    _rewrite_archive(src, dst, lambda n, d: (n, d))
    root = zipfile.ZipFile(src).namelist()[0].split("/")[0]
    with zipfile.ZipFile(dst, "a") as z:
        for name, data in members.items():
            z.writestr(f"{root}/{name}", data)
    return dst


def test_vector3_aotinductor_shared_library(tmp_path, files, marker, monkeypatch):
    """torch.export.load dlopens data/aotinductor/<model>/*.so (its constructor runs); preflight refuses it."""
    import torch

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # torch's loader unpacks the library into a temp folder

    meta = json.dumps({"AOTI_DEVICE_KEY": "cpu"}).encode()
    control = tmp_path / "control"
    so = _evil_shared_library(tmp_path, control)
    members = {
        "data/aotinductor/model/model.wrapper.so": so,
        "data/aotinductor/model/model.wrapper_metadata.json": meta,
    }
    p = _with_members(files["pt2"], tmp_path / "c.pt2", members)
    with contextlib.suppress(Exception):
        torch.export.load(p)
    assert control.exists()  # live under plain torch

    so = _evil_shared_library(tmp_path, marker)
    members["data/aotinductor/model/model.wrapper.so"] = so
    assert "AOTInductor" in refused(_with_members(files["pt2"], tmp_path / "m.pt2", members))


def test_vector4_aotinductor_compile_flags(tmp_path, files, marker):
    """A .cpp with compile flags whose compiler is a shell command (torch runs it with system())."""
    members = {
        "data/aotinductor/model/model.wrapper.cpp": b"int x;",
        "data/aotinductor/model/model.wrapper_metadata.json": b'{"AOTI_DEVICE_KEY": "cpu"}',
        "data/aotinductor/model/model.wrapper_compile_flags.json": json.dumps(
            {"compiler": f"touch {marker};"}
        ).encode(),
    }
    assert "AOTInductor" in refused(_with_members(files["pt2"], tmp_path / "m.pt2", members))


@pytest.mark.parametrize(
    "target",
    [
        "torch.os.system",  # deserialize_operator's getattr chain reaches os.system
        "torch.ops.load_library",  # ctypes.CDLL of a path from the graph
        "torch.ops.import_module",
        "torch.hub.load",
        "builtins.eval",
        "#evil:op",  # extension operator registry
        "torch.ops.aten.from_file.default",  # an ATen op that creates files
        "torch.ops.aten.save.default",
        "torch.ops.mylib.custom.default",  # custom operator namespace
        # transformers' ops other than the one preflight knows (LIBRARY_OPS: grouped_mm_fallback.default)
        "torch.ops.transformers.grouped_mm_fallback_backward.default",
        "torch.ops.transformers.grouped_mm_fallback.out",
        # torch's quantized_decomposed ops other than the quantize/dequantize preflight knows by name
        "torch.ops.quantized_decomposed.choose_qparams.tensor",
        "torch.ops.quantized_decomposed.quantize_per_tensor.tensor2",
        "torch.ops.quantized_decomposed.dequantize_per_token.default",
        "torch.ops.higher_order.triton_kernel_wrapper_functional",
        "_operator.getitem.__globals__",
    ],
)
def test_pt2_node_target_must_be_a_torch_ops_name(tmp_path, files, target):
    p = _edit_program(
        files["dyn"], tmp_path / "t.pt2", lambda d: _node(d, "torch.ops.aten.linear.default").update(target=target)
    )
    assert "calls" in refused(p, 2, *DYN_ARGS)


@pytest.mark.parametrize(
    "target",
    [
        "torch.ops.transformers.grouped_mm_fallback.default",
        "torch.ops.quantized_decomposed.dequantize_per_tensor.default",
        "torch.ops.quantized_decomposed.quantize_per_channel.default",
    ],
)
def test_pt2_known_library_op_with_wrong_operands_is_a_clean_error(tmp_path, files, target):
    """The ops of pt2_safety.LIBRARY_OPS are read by the schemas preflight writes; a file that calls one with a
    linear's operands (input, weight, bias) gets a one-line error, not a traceback."""
    p = _edit_program(
        files["dyn"], tmp_path / "t.pt2", lambda d: _node(d, "torch.ops.aten.linear.default").update(target=target)
    )
    msg = refused(p, 2, *DYN_ARGS)
    assert "could not read the exported program" in msg and target.split(".")[3] in msg


def test_pt2_operator_argument_must_be_a_torch_ops_name(tmp_path, files, marker):
    def edit(doc):
        node = _node(doc, "torch.ops.aten.linear.default")
        node["inputs"].append({"name": "fn", "arg": {"as_operator": "torch.os.system"}, "kind": 1})

    assert "torch.os.system" in refused(_edit_program(files["dyn"], tmp_path / "o.pt2", edit), 2, *DYN_ARGS)


def _injections(marker: Path) -> dict:
    code = f"__import__('os').system('touch {marker}')"
    return {
        "node name": lambda d: _node(d, "torch.ops.aten.linear.default").update(name=f"x = {code} #"),
        "tensor name": lambda d: _graph(d)["tensor_values"].update({f"a;{code}": _graph(d)["tensor_values"]["x"]}),
        "dunder name": lambda d: _node(d, "torch.ops.aten.linear.default").update(name="__class__"),
        "parameter name": lambda d: d["graph_module"]["signature"]["input_specs"][0]["parameter"].update(
            parameter_name=f'fc.weight")\n{code}\n#'
        ),
        "forward arg names": lambda d: d["graph_module"]["module_call_graph"][0]["signature"].update(
            forward_arg_names=[f"x=({code})"]
        ),
        "string argument": lambda d: _node(d, "torch.ops.aten.linear.default")["inputs"].append(
            {"name": "mode", "arg": {"as_string": f"'); {code}; ('"}, "kind": 2}
        ),
        "treespec enum": lambda d: d["graph_module"]["module_call_graph"][0]["signature"].update(
            in_spec=json.dumps(
                [
                    1,
                    {
                        "type": "builtins.dict",
                        "context": json.dumps([{"__enum__": True, "fqn": "os:system", "name": "x"}]),
                        "children_spec": [],
                    },
                ]
            )
        ),
        "treespec defaultdict": lambda d: d["graph_module"]["module_call_graph"][0]["signature"].update(
            in_spec=json.dumps([1, {"type": "collections.defaultdict", "context": "{}", "children_spec": []}])
        ),
        "custom object input": lambda d: d["graph_module"]["signature"]["input_specs"].append(
            {"custom_obj": {"arg": {"name": "obj", "class_fqn": "os.system"}, "custom_obj_name": "obj"}}
        ),
        "verifier": lambda d: d.update(verifiers=["os.system"]),
        "device": lambda d: _graph(d)["tensor_values"]["x"]["device"].update(type="cuda:0; rm -rf /"),
        "unbacked counter": lambda d: d["range_constraints"].update({"u999999999999": {"min_val": 0, "max_val": 4}}),
        "power bomb": lambda d: _graph(d)["sym_int_values"]["add"]["as_expr"].update(
            expr_str="Pow(Integer(2), Integer(1000000000000))"
        ),
        "shift bomb": lambda d: _graph(d)["sym_int_values"]["add"]["as_expr"].update(
            expr_str="LShift(Integer(1), Symbol('s77', integer=True))"
        ),
        "huge literal": lambda d: _graph(d)["sym_int_values"]["add"]["as_expr"].update(
            expr_str="Integer(" + "9" * 400 + ")"
        ),
        "deep nesting": lambda d: _graph(d)["sym_int_values"]["add"]["as_expr"].update(
            expr_str="Add(" * 500 + "Integer(1)" + ")" * 500
        ),
        "huge dimension": lambda d: _graph(d)["tensor_values"]["linear"]["sizes"].__setitem__(1, {"as_int": 2**40}),
        "negative dimension": lambda d: _graph(d)["tensor_values"]["linear"]["sizes"].__setitem__(1, {"as_int": -1}),
        "schema version": lambda d: d["schema_version"].update(major=99),
        "unknown union kind": lambda d: _node(d, "torch.ops.aten.linear.default")["inputs"][0].update(
            arg={"as_python_code": code}
        ),
    }


@pytest.mark.parametrize("name", sorted(_injections(Path("/m"))))
def test_pt2_strings_torch_would_evaluate(tmp_path, files, marker, name):
    """Every other string of the schema that torch evaluates, writes into generated source or imports."""
    p = _edit_program(files["dyn"], tmp_path / "i.pt2", _injections(marker)[name])
    refused(p, 2, *DYN_ARGS)


def test_pt2_metadata_is_dropped(tmp_path, files, marker):
    """source_fn_stack resolves names by getattr chains, custom metadata is json, stack traces reach FX's
    printer: node metadata is dropped, so the model still analyses."""
    code = f"__import__('os').system('touch {marker}')"

    def edit(doc):
        for n in _graph(doc)["nodes"]:
            n["metadata"] = {
                "source_fn_stack": "linear,torch.os.system",
                "custom": json.dumps({"k": f"\n{code}"}),
                "stack_trace": f'File "a\r{code}", line 1, in f',
                "from_node": "[{}]",
                "nn_module_stack": f"L__self__,,x;L__self___fc,{code},{code}",  # kept only if paths are dotted names
            }
        doc["graph_module"]["metadata"] = {"custom": "{}"}

    assert _dyn_ok(_edit_program(files["dyn"], tmp_path / "m.pt2", edit))["totals"]["macs"] > 0


# ---- .pt2: the zip itself ----------------------------------------------------------------------------------


def _set_declared_size(path: Path, member_suffix: str, size: int) -> None:
    """Patch the uncompressed size the central directory declares for one member (a zip bomb's header)."""
    data = bytearray(path.read_bytes())
    at = 0
    while (at := data.find(b"PK\x01\x02", at)) >= 0:
        n = int.from_bytes(data[at + 28 : at + 30], "little")
        name = bytes(data[at + 46 : at + 46 + n]).decode()
        if name.endswith(member_suffix):
            data[at + 24 : at + 28] = size.to_bytes(4, "little")
        at += 46
    path.write_bytes(bytes(data))


def test_pt2_zip_bomb_member(tmp_path, files):
    """An extra member declaring 1.5 GiB from a few bytes is refused from the directory, before reading."""
    p = _with_members(files["pt2"], tmp_path / "b.pt2", {"extra/notes.txt": b"x" * 1000})
    _set_declared_size(p, "extra/notes.txt", 3 << 29)
    assert "zip bomb" in refused(p)


def test_pt2_zip_bomb_program(tmp_path, files):
    _rewrite_archive(files["pt2"], p := tmp_path / "b.pt2", lambda n, d: (n, d))
    _set_declared_size(p, "models/model.json", (1 << 30) + 1)
    assert "declares" in refused(p)


def test_pt2_empty_buffer_declared_huge(tmp_path, files):
    """A buffer stored empty stands for zeros: more than 256 MiB of them is refused (torch allocated 2 GiB)."""

    def edit(name, data):
        if name.endswith("model_weights_config.json"):
            cfg = json.loads(data)
            cfg["config"]["scale"]["tensor_meta"]["sizes"] = [{"as_int": 1 << 29}]
            return name, json.dumps(cfg).encode()
        if name.endswith("models/model.json"):
            doc = json.loads(data)
            _graph(doc)["tensor_values"]["b_scale"]["sizes"] = [{"as_int": 1 << 29}]
            return name, json.dumps(doc).encode()
        if name.endswith("data/weights/weight_2"):
            return name, b""
        return name, data

    p = tmp_path / "z.pt2"
    _rewrite_archive(files["dyn"], p, edit)
    assert "zeros" in refused(p, 2, *DYN_ARGS)


def test_pt2_weight_record_shorter_than_its_tensor(tmp_path, files):
    p = tmp_path / "s.pt2"
    _rewrite_archive(files["pt2"], p, lambda n, d: (n, d[:8]) if n.endswith("data/weights/weight_0") else (n, d))
    assert "spans" in refused(p)


def test_pt2_weight_config_disagrees_with_graph(tmp_path, files):
    def edit(name, data):
        if name.endswith("model_weights_config.json"):
            cfg = json.loads(data)
            cfg["config"]["fc.weight"]["tensor_meta"]["sizes"] = [{"as_int": 2}, {"as_int": 2}]
            return name, json.dumps(cfg).encode()
        return name, data

    _rewrite_archive(files["pt2"], p := tmp_path / "w.pt2", edit)
    assert "in the graph" in refused(p)


@pytest.mark.parametrize(
    "member", ["../evil", "data/executorch/x.pte", "models/other.json", "data/mtia/x", "code/x.py"]
)
def test_pt2_unexpected_members(tmp_path, files, member):
    refused(_with_members(files["pt2"], tmp_path / "u.pt2", {member: b"x"}))


def test_pt2_duplicate_member(tmp_path, files):
    p = tmp_path / "d.pt2"
    _rewrite_archive(files["pt2"], p, lambda n, d: (n, d))
    name = next(n for n in zipfile.ZipFile(p).namelist() if n.endswith("models/model.json"))
    with zipfile.ZipFile(p, "a") as z, pytest.warns(UserWarning):
        z.writestr(name, b"{}")
    assert "twice" in refused(p)


def _zip_with_raw_name(path: Path, raw: bytes) -> Path:
    """A zip whose only member name is `raw`, flagged UTF-8 (bit 11) whether it is or not."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("N" * len(raw), b"data")
    data = path.read_bytes().replace(b"N" * len(raw), raw)
    data = data.replace(b"PK\x03\x04\x14\x00\x00\x00", b"PK\x03\x04\x14\x00\x00\x08", 1)
    at = data.find(b"PK\x01\x02")
    data = data[: at + 8] + b"\x00\x08" + data[at + 10 :]
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", ["model.pt2", "model.onnx", "model.pt", "model"])
def test_zip_member_name_not_utf8(tmp_path, name):
    """zipfile raises UnicodeDecodeError for such a name (it was an internal error in the pickle sniffer)."""
    refused(_zip_with_raw_name(tmp_path / name, b"\xff\xfe.pkl"))


def test_zip_directory_size_is_checked_first(tmp_path, files, monkeypatch):
    """The member count comes from the end-of-directory record, before zipfile builds its directory (a hostile
    directory can declare millions of entries); here the cap is lowered to the archive's own 11 members."""
    from analyzer.frontends import pt2_safety

    with open(files["pt2"], "rb") as f:
        count = pt2_safety.zip_entry_count(f)
    assert count == len(zipfile.ZipFile(files["pt2"]).namelist())
    monkeypatch.setattr(pt2_safety, "MAX_MEMBERS", count - 1)
    assert f"declares {count} members" in refused(files["pt2"])


# ---- other findings of the fuzzing campaign: clean errors, sane shapes --------------------------------------


def _onnx_variant(tmp_path: Path, edit, name: str = "v.onnx") -> Path:
    model = onnx_conv_model()
    edit(model)
    p = tmp_path / name
    onnx.save(model, str(p))
    return p


def test_onnx_input_elem_type_not_onnx(tmp_path):
    """An elem_type of 9999 was a KeyError (internal error)."""

    def edit(m):
        m.graph.input[0].type.tensor_type.elem_type = 9999

    assert "element type 9999" in refused(_onnx_variant(tmp_path, edit))


def test_onnx_external_data_location_with_nul(tmp_path):
    """A NUL byte in the location was a ValueError (internal error)."""
    p = tmp_path / "model.onnx"
    onnx.save(_external(onnx_conv_model(), "w\x00.bin"), str(p))
    assert "impossible file" in refused(p)


def test_onnx_opset_newer_than_onnx_knows(tmp_path):
    def edit(m):
        m.opset_import[0].version = 99

    assert "opset 99" in refused(_onnx_variant(tmp_path, edit))


@pytest.mark.parametrize(("attr", "index", "value"), [("pads", 0, -5), ("kernel_shape", 0, 2**40), ("strides", 1, 0)])
def test_onnx_window_attributes(tmp_path, attr, index, value):
    """pads=-5 and kernel_shape[0]=2**40 passed with exit 0 and absurd counts."""

    def edit(m):
        a = next((a for a in m.graph.node[0].attribute if a.name == attr), None)
        if a is None:  # strides, where the model leaves them to their default
            m.graph.node[0].attribute.append(helper.make_attribute("strides", [1, 1]))
            a = m.graph.node[0].attribute[-1]
        a.ints[index] = value

    assert f"{attr} {value:,}" in refused(_onnx_variant(tmp_path, edit))


def test_onnx_input_dimension_2_40(tmp_path):
    def edit(m):
        m.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 2**40

    assert "1,099,511,627,776" in refused(_onnx_variant(tmp_path, edit))


def test_tflite_negative_dimension(tmp_path):
    """A -1 left in a .tflite shape reported negative FLOPs with exit 0."""
    from fuzzing import tiny_tflite

    ok, bad = tmp_path / "ok.tflite", tmp_path / "neg.tflite"
    ok.write_bytes(tiny_tflite((1, 4)))
    bad.write_bytes(tiny_tflite((-1, 4)))
    res = run(ok, "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["totals"]["flops"] == 4  # relu over 1x4
    assert "dimension 0 of -1" in refused(bad)


def test_graph_check_refuses_huge_shapes_from_any_frontend(tmp_path):
    """One graph-level rule after extraction: a 2**31-1 x 2**31-1 input is refused whatever read it."""
    from fuzzing import tiny_tflite

    p = tmp_path / "huge.tflite"
    p.write_bytes(tiny_tflite((2**31 - 1, 2**31 - 1)))
    assert "more than 2**48" in refused(p)


def test_graph_check_rules():
    """check_graph on hand-made graphs: window attributes and element counts."""
    from analyzer.errors import UnreadableModelError
    from analyzer.frontends.sanity import check_graph
    from passes.graph import OpGraph, OpNode, SourceValue, TensorInfo

    def graph(shape, attrs):
        x = SourceValue(0, "x", TensorInfo((1, 3, 8, 8), "float32"), "input")
        op = OpNode(0, "lv", "relax.nn.conv2d", attrs, [], (TensorInfo(shape, "float32"),))
        return OpGraph(ops=[op], sources=[x], outputs=[])

    check_graph(graph((1, 4, 8, 8), {"padding": [1, 1, 1, 1], "strides": [1, 1]}), "m")
    for shape, attrs, text in [
        ((1, 4, 8, 8), {"padding": [-5, 0, 0, 0]}, "padding -5"),
        ((1, 4, 8, 8), {"strides": [0, 1]}, "strides 0"),
        ((1, 4, 8, 8), {"dilation": [2**40, 1]}, "dilation 1,099,511,627,776"),
        ((-1, 4), {}, "dimension 0 of -1"),
        ((2**25, 2**25), {}, "more than 2**48"),  # 2**50 elements
    ]:
        with pytest.raises(UnreadableModelError, match=re.escape(text)):
            check_graph(graph(shape, attrs), "m")


# ---- the limited child process (analyzer/frontends/isolate.py) ----------------------------------------------


def _isolated(step, **limits):
    from analyzer.frontends.isolate import Limits, run_isolated

    return run_isolated(step, (), label="m.pt2", what="the step", limits=Limits(**limits), start="fork")


def test_child_returns_meta_and_bytes():
    payload = bytes(range(256)) * 200_000  # 51 MB through the pipe
    result = _isolated(lambda: ({"n": 3, "names": ["a"]}, payload))
    assert result.meta == {"n": 3, "names": ["a"]} and result.data == payload


def test_child_errors_come_back_as_themselves():
    from analyzer.errors import UnreadableModelError, UnsupportedOperatorsError

    def unreadable():
        raise UnreadableModelError("m.pt2: broken")

    def unsupported():
        raise UnsupportedOperatorsError("2 ops", {"aten.x": 2})

    with pytest.raises(UnreadableModelError, match="m.pt2: broken"):
        _isolated(unreadable)
    with pytest.raises(UnsupportedOperatorsError) as info:
        _isolated(unsupported)
    assert info.value.operators == {"aten.x": 2}


@pytest.mark.parametrize(
    ("kind", "limits", "text"),
    [
        ("segfault", {}, "crashed (SIGSEGV)"),
        ("abort", {}, "crashed (SIGABRT)"),
        ("sleep", {"wall_s": 1.0}, "did not finish in 1 s"),
        ("spin", {"cpu_s": 1}, "CPU time limit (1 s)"),
        ("allocate", {"memory": 256 << 20}, "memory limit"),
        ("write", {"file_bytes": 1 << 20}, "file-size limit"),
        ("exit", {}, "exited with status 3"),
    ],
)
def test_child_crash_or_limit_is_a_one_line_error(tmp_path, kind, limits, text):
    import ctypes
    import signal
    import time

    from analyzer.errors import UnreadableModelError

    def step():
        if kind == "segfault":
            ctypes.string_at(0)
        elif kind == "abort":
            os.kill(os.getpid(), signal.SIGABRT)
        elif kind == "sleep":
            time.sleep(30)
        elif kind == "spin":
            while True:
                pass
        elif kind == "allocate":
            return {}, bytes(1 << 30)
        elif kind == "write":
            with open("big.bin", "wb") as f:  # in the child's scratch directory
                f.write(b"\0" * (4 << 20))
        elif kind == "exit":
            os._exit(3)
        return {}, b""

    with pytest.raises(UnreadableModelError) as info:
        _isolated(step, **limits)
    msg = str(info.value)
    assert text in msg and msg.startswith("m.pt2: the step") and "\n" not in msg


def test_fork_is_reliable_after_torch_used_its_thread_pool():
    """The parent has run torch's OpenMP pool (2 threads); forked children (one thread) never hang."""
    import torch

    torch.set_num_threads(2)
    a = torch.randn(512, 512)
    for _ in range(3):
        (a @ a).sum()

    def step():
        b = torch.randn(256, 256)
        return {"s": float((b @ b).shape[0])}, b""

    for _ in range(20):
        assert _isolated(step, wall_s=60).meta == {"s": 256.0}


def test_pt2_child_and_spawned_child_agree(files):
    """The fork route and the spawn route (platforms without fork) return the same module."""
    from analyzer.frontends.isolate import run_isolated
    from analyzer.frontends.pt2_safety import inspect_pt2
    from analyzer.frontends.torch_frontend import _pt2_in_child, pt2_limits
    from passes import tvm_ir

    plan = inspect_pt2(files["dyn"])
    try:
        forked = run_isolated(
            _pt2_in_child, (str(files["dyn"]), plan), label="d", what="w", limits=pt2_limits(plan), start="fork"
        )
    finally:
        plan.close()
    spawned = run_isolated(
        "analyzer.frontends.torch_frontend:_pt2_in_child", [str(files["dyn"])], label="d", what="w", start="spawn"
    )
    assert forked.meta == spawned.meta
    assert tvm_ir.structural_equal(tvm_ir.load_module(forked.data), tvm_ir.load_module(spawned.data))


def test_module_dump_round_trip():
    """tvm_ir.dump_module/load_module: structurally equal, bound constants (values) included."""
    import torch

    from analyzer.frontends.torch_frontend import from_module
    from passes import tvm_ir

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm2d(4)  # running stats become bound constants
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return torch.nn.functional.gelu(self.bn(self.conv(x))).clamp(min=float("-inf"))

    mod = from_module(M().eval(), (torch.randn(1, 3, 8, 8),)).mod
    back = tvm_ir.load_module(tvm_ir.dump_module(mod))
    assert tvm_ir.structural_equal(mod, back)
    before, after = _constants(mod), _constants(back)
    assert before and len(before) == len(after)
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    with pytest.raises(ValueError):
        tvm_ir.load_module(b"not a dump")


def _constants(mod) -> list:
    """The values of the module's bound tensor constants, in visiting order."""
    import tvm
    from tvm import relax

    out = []

    def visit(e):
        if isinstance(e, tvm.ir.Constant) and getattr(e.value, "ndim", 0):
            out.append(e.value.numpy())

    relax.analysis.post_order_visit(mod["main"], visit)
    return out


# ---- TensorFlow: conversion in a limited child ---------------------------------------------------------------

needs_tf = pytest.mark.skipif(
    any(__import__("importlib").util.find_spec(m) is None for m in ("tensorflow", "keras", "tflite")),
    reason="the tensorflow extra is not installed",
)


@pytest.fixture(scope="module")
def keras_file(tmp_path_factory) -> Path:
    from fuzzing import make_seeds

    return make_seeds(tmp_path_factory.mktemp("keras"), ("keras",))["keras"]


@needs_tf
def test_keras_huge_batch_shape_crash_is_a_clean_error(tmp_path, keras_file, marker):
    """batch_shape [2, 100000, 100000, 3] segfaulted TensorFlow's graph optimiser inside preflight (exit 139)."""
    from fuzzing import _write_zip, _zip_members, keras_vector

    members = [
        (n, json.dumps(keras_vector("batch_shape_huge", json.loads(d), marker)).encode() if n == "config.json" else d)
        for n, d in _zip_members(keras_file)
    ]
    _write_zip(p := tmp_path / "huge.keras", members)
    msg = refused(p)
    assert "TensorFlow's converter" in msg and ("crashed" in msg or "memory" in msg)


@needs_tf
def test_keras_relative_path(tmp_path, keras_file, monkeypatch):
    """The child works in its own scratch directory: a relative path still names the user's file."""
    shutil.copy(keras_file, tmp_path / "m.keras")
    monkeypatch.chdir(tmp_path)
    res = run("m.keras", "--batch", "1", "--format", "json")
    assert res.exit_code == 0, res.stderr
    # conv 3x3 (3 -> 4, valid): 6 * 6 * 4 outputs * 27 MACs = 3,888
    assert json.loads(res.stdout)["totals"]["macs"] == 3888


def test_onnx_conv_feeding_an_int_cast_is_not_folded(tmp_path):
    """A Conv of two 1x1x128x128 float weights (pads=63) read only by a Cast to int64 looks like float size arithmetic
    to the constant folding; its inputs are small enough to fold but running it costs gigabytes (6.2 GB, 15 s before the
    allow-list). The folding leaves it (0 nodes folded, the Conv and Cast stay) and the file loads or is refused."""
    from analyzer.frontends.onnx_frontend import _size_floats, fold_constant_indices

    w = np.ones((1, 1, 128, 128), np.float32)
    nodes = [
        helper.make_node("Conv", ["a", "b"], ["c"], pads=[63, 63, 63, 63]),
        helper.make_node("Cast", ["c"], ["n"], to=TensorProto.INT64),
        helper.make_node("Relu", ["x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_cast",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("n", TensorProto.INT64, [1, 1, 127, 127]),
        ],
        initializer=[onnx.numpy_helper.from_array(w, "a"), onnx.numpy_helper.from_array(w, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    path = tmp_path / "conv_cast.onnx"
    onnx.save(model, path)
    assert "c" not in _size_floats(model)
    assert fold_constant_indices(model) == 0
    assert [n.op_type for n in model.graph.node] == ["Conv", "Cast", "Relu"]
    res = run(path)
    assert res.exit_code in (0, 1, 2), (res.exit_code, res.output)
    if res.exit_code:
        refused(path, res.exit_code)
