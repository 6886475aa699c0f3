"""Hostile and broken model files: preflight refuses them with exit 2 (1 for a valid ONNX with an op
TVM cannot import), a one- or two-line message, no traceback, and never runs code from the file."""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

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


def tiny_onnx_model(batch: int | str = 1, *, ext: str | None = None) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "tiny", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Real files to start from: a valid .onnx and a torch.export .pt2 archive."""
    import torch

    d = tmp_path_factory.mktemp("hostile_src")
    onnx_path = d / "tiny.onnx"
    onnx.save(tiny_onnx_model(), str(onnx_path))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return torch.relu(self.fc(x))

    pt2 = d / "net.pt2"
    torch.export.save(torch.export.export(Net().eval(), (torch.randn(2, 4),)), pt2)
    return {"onnx": onnx_path, "pt2": pt2}


def test_sources_are_valid(files):
    """The hostile variants below start from files preflight accepts."""
    for path in files.values():
        res = run(path)
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

PICKLE_NAMES = ["model.pt", "model.pth", "model.bin", "model.pkl", "model.ckpt", "model.pt2", "model.onnx",
                "model"]


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
    return subprocess.run([sys.executable, "-m", "analyzer.cli", "analyze", str(path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


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
    evil = _evil_torch_save(marker)
    p = tmp_path / "model.pt2"
    _rewrite_archive(files["pt2"], p,
                     lambda n, d: (n, evil) if n.endswith("data/sample_inputs/model.pt") else (n, d))
    refused(p)


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
            cfg = {"config": {"evil": {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": True,
                                       "tensor_meta": None}}}
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
    model = helper.make_model(helper.make_graph(nodes, "evil", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.evil", 1)])
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
    model = helper.make_model(helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
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
    model = helper.make_model(helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
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
    nodes = [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Add", ["x", "a"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "cycle", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    p = tmp_path / "cycle.onnx"
    onnx.save(model, str(p))
    refused(p)


def test_onnx_dangling_tensor(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"])]  # 'ghost' is produced by nothing
    model = helper.make_model(helper.make_graph(nodes, "dangling", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
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


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin",
                                      "../../../../../../etc/passwd"])
def test_onnx_external_data_outside_model_folder(tmp_path, location):
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 432)  # exists, so only the confinement can refuse it
    p = model_dir / "model.onnx"
    onnx.save(_external(tiny_onnx_model(), location), str(p))
    msg = refused(p)
    assert "outside" in msg and "folder" in msg


def test_onnx_external_data_symlink_escape(tmp_path):
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\0" * 432)
    (model_dir / "w.bin").symlink_to(secret)
    p = model_dir / "model.onnx"
    onnx.save(_external(tiny_onnx_model(), "w.bin"), str(p))
    assert "outside" in refused(p)


def test_onnx_external_data_missing(tmp_path):
    p = tmp_path / "model.onnx"
    onnx.save(_external(tiny_onnx_model(), "gone.bin"), str(p))
    assert "missing" in refused(p)


@pytest.mark.parametrize("location", ["model.onnx.data", "weights/w.bin"])
def test_onnx_external_data_beside_the_model(tmp_path, location):
    p = tmp_path / "model.onnx"
    (tmp_path / "weights").mkdir()
    onnx.save_model(tiny_onnx_model(), str(p), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
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
    onnx.save(_external(tiny_onnx_model(), "w.bin"), str(p))
    refused(p)
