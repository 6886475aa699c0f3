"""Devices as data: the built-in table is a data file, and a user's device file adds a GPU that every command
takes; a bad device file is a one-line error (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import cli
from predictor.devices import DEVICES, DEVICES_FILE, DeviceFileError, get_device, read_device_file

# An NVIDIA L40S from its datasheet (dense figures: the sparsity figures halved): 48 GB GDDR6 at 864 GB/s, FP32 91.6
# TFLOPS, TF32 183, FP16/BF16 362.05, INT8 733 TOPS, 350 W, 142 SMs; no MIG. An Ada part: the kernel table has
# no Ada family, so it borrows the Ampere parameters (said in the file).
L40S = {
    "key": "l40s-48gb",
    "name": "NVIDIA L40S",
    "aliases": ["l40s"],
    "source": "NVIDIA L40S datasheet (dense); kernel efficiencies borrowed from the ampere family",
    "memory_mib": 46068,
    "bandwidth_gbs": 864,
    "peak_tflops": {"fp32": 91.6, "tf32": 183, "fp16": 362.05, "bf16": 362.05, "int8": 733},
    "tdp_w": 350,
    "sms": 142,
    "kernel_family": "ampere",
}


@pytest.fixture(autouse=True)
def _builtin_devices_only(monkeypatch):
    """A device added here stays out of the other tests (the table and $PREFLIGHT_DEVICES are restored)."""
    monkeypatch.setenv("PREFLIGHT_DEVICES", "")
    saved = dict(DEVICES)
    yield
    DEVICES.clear()
    DEVICES.update(saved)


def _file(tmp_path: Path, devices: list, name: str = "gpus.json", **extra) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"schema": "preflight.devices/1", "devices": devices, **extra}))
    return path


def test_the_builtin_table_is_the_data_file():
    """Every built-in device reads back from predictor/devices.json with the datasheet numbers."""
    keys = [d.key for d in read_device_file(DEVICES_FILE)]
    assert keys == [
        "a100-40gb",
        "a100-80gb",
        "a100-pcie-40gb",
        "a100-pcie-80gb",
        "h100-80gb",
        "h100-nvl-94gb",
        "h200-141gb",
    ]
    h100 = get_device("h100")
    assert h100.peak_flops["bf16"] == 989.4e12 and h100.bandwidth == 3.35e12 and h100.memory_mib == 81559
    assert h100.profile("1g.10gb").memory_mib == 9.75 * 1024  # nvidia-smi mig -lgip: 9.75 GiB
    assert get_device("h100-nvl").profile("1g.12gb").memory_mib == pytest.approx(16 * 94 / 141 * 1024)  # derived


def test_a_user_gpu_is_predicted_on(tmp_path):
    """`preflight --devices FILE predict --device l40s`: the kernel model costs it with the borrowed family."""
    path = _file(tmp_path, [L40S])
    res = CliRunner().invoke(
        cli, ["--devices", str(path), "predict", "zoo:resnet18", "--device", "l40s", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["prediction"]["device"] == "l40s-48gb" and doc["prediction"]["latency_ms"] > 0
    assert doc["prediction"]["mig"]["profile"] is None  # no MIG on an L40S
    # power: the ampere reference's fit (a100-40gb, 400 W) scaled by 350 / 400, never above the 350 W limit
    assert 0 < doc["prediction"]["power_w"] <= 350
    shown = CliRunner().invoke(cli, ["--devices", str(path), "devices", "--show", "l40s"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["peak_tflops"]["fp16"] == 362.05


def test_a_device_file_in_the_environment_reaches_a_fresh_process(tmp_path):
    path = _file(tmp_path, [L40S])
    code = "from predictor.devices import get_device; d = get_device('L40S'); print(d.key, d.sms, d.bandwidth)"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "PREFLIGHT_DEVICES": str(path)},
    )
    assert proc.stdout.split() == ["l40s-48gb", "142", "864000000000.0"], proc.stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tdp_watts": 350}, "unknown key 'tdp_watts'"),
        ({"bandwidth_gbs": 864e9}, "bandwidth_gbs = 8.64e+11 is outside 50 .. 100000"),  # bytes/s where GB/s go
        ({"peak_tflops": {"fp64": 1.4}}, "unknown kind 'fp64'"),
        ({"sms": "142"}, "sms must be an integer"),
        ({"key": "h100"}, "'h100' already names device 'h100-80gb'"),
        (
            {"mig": [{"profile": "1g.60gb", "memory_mib": 61440, "sms": 20, "memory_slices": 1, "compute_slices": 1}]},
            "mig[0] memory_mib = 61440 is outside 256 .. 46068",
        ),  # fmt: skip
    ],
)
def test_a_bad_device_file_is_one_line(tmp_path, change, message):
    path = _file(tmp_path, [{**L40S, **change}])
    res = CliRunner().invoke(cli, ["--devices", str(path), "devices"])
    assert res.exit_code == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}: ") and message in line


def test_not_a_device_file(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2")
    with pytest.raises(DeviceFileError, match="not JSON"):
        read_device_file(bad)
    with pytest.raises(DeviceFileError, match="not a device file"):
        read_device_file(_wrong_schema(tmp_path))
    res = CliRunner().invoke(cli, ["--devices", str(tmp_path / "missing.json"), "devices"])
    assert res.exit_code == 2 and "missing.json" in res.stderr


def _wrong_schema(tmp_path: Path) -> Path:
    path = tmp_path / "z.json"
    path.write_text(json.dumps({"schema": "something/1", "devices": []}))
    return path


def test_an_unknown_device_names_how_to_add_one():
    res = CliRunner().invoke(cli, ["devices", "--show", "b200"])
    assert res.exit_code == 2 and "--devices FILE" in res.stderr


def test_a_user_mig_profile_is_the_figure_given_and_a_gpu_without_a_family_names_the_field(tmp_path):
    """A device file's MIG profile without `measured` is what nvidia-smi printed (not "a derived lower bound"); a
    GPU with no `kernel_family` is read, and predicting on it says which field it lacks."""
    mig = {"profile": "1g.12gb", "memory_mib": 11_776, "sms": 20, "memory_slices": 1, "compute_slices": 1}
    nofamily = {k: v for k, v in L40S.items() if k != "kernel_family"} | {"key": "nofamily", "aliases": []}
    path = _file(tmp_path, [{**L40S, "mig": [mig]}, nofamily])
    gpu = {d.key: d for d in read_device_file(path)}
    assert gpu["l40s-48gb"].profile("1g.12gb").measured is True
    assert read_device_file(_file(tmp_path, [{**L40S, "mig": [{**mig, "measured": False}]}], "b.json"))[0].mig[
        0].measured is False  # fmt: skip
    res = CliRunner().invoke(cli, ["--devices", str(path), "predict", "zoo:resnet18", "--device", "l40s", "--top", "0"])
    assert res.exit_code == 0 and "1g.12gb" in res.stdout and "derived lower bound" not in res.stdout
    res = CliRunner().invoke(cli, ["--devices", str(path), "predict", "zoo:resnet18", "--device", "nofamily"])
    assert res.exit_code == 1 and 'borrows one with "kernel_family": one of ampere, hopper' in res.stderr


def test_a_mig_slice_is_a_device_of_its_own():
    """`h100:3g.40gb`: the profile's memory and SMs, its shares of the peaks and bandwidth, by hand."""
    s = get_device("H100:3g.40gb")
    assert s.key == "h100-80gb:3g.40gb" and s.parent == "h100-80gb" and not s.mig
    assert s.memory_mib == 39.50 * 1024 and s.sms == 60  # nvidia-smi mig -lgip: 39.50 GiB, 60 SMs
    assert s.bandwidth == pytest.approx(3.35e12 * 4 / 8)  # 4 of 8 memory slices
    assert s.peak_flops["bf16"] == pytest.approx(989.4e12 * 60 / 132)  # 60 of 132 SMs
    assert s.tdp_w == pytest.approx(700 * 3 / 7)  # 3 of 7 compute slices (assumed)
    with pytest.raises(Exception, match="has no MIG profile '5g.50gb'.*3g.40gb"):
        get_device("h100-80gb:5g.50gb")


def test_predicting_on_a_slice_matches_the_recommenders_slice_latency():
    import analyzer

    whole = analyzer.predict("zoo:resnet18", batch=4, device="h100-80gb").prediction
    part = analyzer.predict("zoo:resnet18", batch=4, device="h100-80gb:2g.20gb").prediction
    assert part.device == "h100-80gb:2g.20gb"
    assert part.latency_ms == pytest.approx(whole.mig.latency_ms["2g.20gb"], rel=1e-9)
    assert part.mig.profile == "2g.20gb" and part.mig.full_gpu_latency_ms == pytest.approx(whole.latency_ms)
    # the same kernels rest on the same fits; their time shares move with the slice (memory-bound kernels slow
    # down with the memory slices, compute-bound ones with the SMs): resnet18's batch norms (hopper float32 norm:
    # the ampere transfer) take 27% of the whole GPU's kernel time and 19% of the slice's
    assert {k for k, v in part.basis["kernel_time_share"].items() if v} == {
        k for k, v in whole.basis["kernel_time_share"].items() if v
    }
    assert part.basis["kernel_time_share"] == pytest.approx(whole.basis["kernel_time_share"], abs=0.1)
    res = CliRunner().invoke(
        cli, ["predict", "zoo:resnet18", "--device", "a100:1g.5gb", "--max-memory-mb", "1", "--top", "0"]
    )
    assert res.exit_code == 4 and "on a100-40gb:1g.5gb exceeds the budget" in res.stderr
    # the predictor by the name the tables give it (the JSON's "roofline" read "predictor roofline" here)
    assert "MiB; predictor: kernel model)" in res.stderr and "roofline" not in res.stderr


def test_devices_json_listing_is_a_device_file(tmp_path):
    """`preflight devices --format json` lists each GPU as a preflight.devices/1 object (plus the older "device"
    key): written back as a device file, the reader gives the built-in devices unchanged (oracle: the reader of
    predictor/devices.json itself)."""
    from predictor.devices import DEVICES_SCHEMA

    res = CliRunner().invoke(cli, ["devices", "--format", "json"])
    assert res.exit_code == 0, res.output
    listed = json.loads(res.output)
    assert all(e.pop("device") == e["key"] for e in listed)
    path = tmp_path / "roundtrip.json"
    path.write_text(json.dumps({"schema": DEVICES_SCHEMA, "devices": listed}))
    assert read_device_file(path) == read_device_file(DEVICES_FILE)
