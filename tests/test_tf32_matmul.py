"""Float32 matmuls on TF32 tensor cores (`tf32_matmul`, torch.set_float32_matmul_precision("high")): the kernel
model's peak and parameter entry by hand, what the flag leaves alone, and the committed table's TF32 entries."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from predictor.devices import get_device
from predictor.kernel_model import (
    TF32,
    KernelParams,
    ParamTable,
    kernel_arrays,
    kernel_basis,
    kernel_latency,
    kernel_latency_arrays,
    latency_bound_ms,
    load_params,
    param_dtype,
)
from predictor.roofline import peak_rate

A100 = get_device("a100-80gb")  # 108 SMs, 2039e9 B/s; peaks fp32 19.5e12, tf32 156e12, fp16 312e12 FLOP/s
H100 = get_device("h100-80gb")  # fp32 67e12, tf32 494.7e12 FLOP/s (devices.json)


@dataclass(frozen=True)
class K:
    """A kernel of the contract (passes.kernels.Kernel's fields the model reads)."""

    kind: str
    flops: int
    bytes_read: int
    bytes_written: int
    dtype: str = "float32"
    params: dict = field(default_factory=dict)


# float32 4096^3 GEMM: 2 x 4096^3 = 137,438,953,472 FLOPs; reads 2 x 4 x 4096^2, writes 4 x 4096^2 bytes
GEMM32 = K("gemm", 2 * 4096**3, 2 * 4 * 4096**2, 4 * 4096**2, "float32", {"b": 1, "m": 4096, "n": 4096, "k": 4096})
TILE = ((128, 128),)
FP32_ENTRY = KernelParams(0.9, 0.9, 10.0, TILE, 0.0, 64.0, "fit: test")
TF32_ENTRY = KernelParams(0.7, 0.8, 12.0, TILE, 0.0, 64.0, "assumed: test tf32")
HALF_ENTRY = KernelParams(0.6, 0.8, 12.0, TILE, 0.0, 64.0, "fit: test fp16")


def table(**entries: KernelParams) -> ParamTable:
    """A hand-made ampere table of gemm entries: dtype=params."""
    return ParamTable({("ampere", "gemm", d): p for d, p in entries.items()}, {"ampere": ("a100-80gb",)})


def test_peak_rate_moves_only_float32_matmuls():
    assert peak_rate(A100, "matmul", "float32") == 19.5e12
    assert peak_rate(A100, "matmul", "float32", tf32_matmul=True) == 156e12
    assert peak_rate(H100, "matmul", "float32", tf32_matmul=True) == 494.7e12
    assert peak_rate(A100, "conv", "float32", tf32_matmul=True) == 156e12  # TF32 already (cuDNN default)
    assert peak_rate(A100, "matmul", "float16", tf32_matmul=True) == 312e12
    assert peak_rate(A100, "attention", "float32", tf32_matmul=True) == 19.5e12  # fused attention: 3xTF32, no flag
    assert peak_rate(A100, "elementwise", "float32", tf32_matmul=True) == 19.5e12
    assert param_dtype("gemm", "float32", True) == TF32
    assert param_dtype("gemm", "float32", False) == "float32"
    others = (("conv", "float32"), ("attention", "float32"), ("gemm", "float16"))
    assert [param_dtype(k, d, True) for k, d in others] == ["float32", "float32", "float16"]


def test_compute_bound_gemm_at_the_tf32_peak_by_hand():
    params = table(float32=FP32_ENTRY, tf32=TF32_ENTRY, float16=HALF_ENTRY)
    off = kernel_latency([GEMM32], A100, params=params)
    on = kernel_latency([GEMM32], A100, params=params, tf32_matmul=True)
    # bound: 137,438,953,472 / 156e12 = 8.810189e-4 s with TF32, / 19.5e12 = 7.048151e-3 s without (8x);
    # memory 201,326,592 B / 2039e9 = 9.873791e-5 s: compute-bound either way
    assert on.bound_compute_s[0] == pytest.approx(8.810189e-4, rel=1e-6)
    assert off.bound_compute_s[0] == pytest.approx(7.048151e-3, rel=1e-6)
    assert on.bound_memory_s[0] == off.bound_memory_s[0] == pytest.approx(9.873791e-5, rel=1e-6)
    assert bool(on.compute_bound[0]) and bool(off.compute_bound[0])
    assert on.bound_ms == pytest.approx(0.8810189, rel=1e-6)
    assert latency_bound_ms([GEMM32], A100, tf32_matmul=True) == pytest.approx(0.8810189, rel=1e-6)
    assert latency_bound_ms([GEMM32], A100) == pytest.approx(7.048151, rel=1e-6)
    # estimate, 128x128 tiles on 108 SMs: 32 x 32 = 1,024 tiles, ceil(1024 / 108) = 10 waves = 1,080 slots,
    # q = 1024 / 1080 = 0.948148; depth 4096 / (4096 + 64) = 0.984615.
    # TF32 entry: e_c = 0.7 x q x depth = 0.653493; 8.810189e-4 / 0.653493 = 1.348169e-3 s; launch 12 us;
    # memory 9.873791e-5 / 0.8 = 1.234224e-4 s.
    assert on.compute_s[0] == pytest.approx(1.348169e-3, rel=1e-6)
    assert on.memory_s[0] == pytest.approx(1.234224e-4, rel=1e-6)
    assert on.seconds[0] == pytest.approx(1.348169e-3 + 12e-6, rel=1e-6)
    # FP32 entry (the flag off): e_c = 0.9 x q x depth = 0.840205; 7.048151e-3 / 0.840205 = 8.388608e-3 s; 10 us
    assert off.compute_s[0] == pytest.approx(8.388608e-3, rel=1e-6)
    assert off.seconds[0] == pytest.approx(8.388608e-3 + 10e-6, rel=1e-6)


def test_without_a_tf32_entry_the_float16_entry_is_assumed():
    params = table(float32=FP32_ENTRY, float16=HALF_ENTRY)  # no "tf32" entry: never the "*"/fp32 fit
    entry = params.lookup("a100-80gb", "gemm", TF32)
    assert (entry.e_compute, entry.e_memory, entry.launch_us) == (0.6, 0.8, 12.0)
    assert entry.source.startswith("assumed: TF32 tensor cores at the float16 entry")
    assert entry.source.endswith("; fit: test fp16")
    assert entry.basis("a100-80gb") == "assumed"
    on = kernel_latency([GEMM32], A100, params=params, tf32_matmul=True)
    # e_c = 0.6 x 0.948148 x 0.984615 = 0.560137; 8.810189e-4 / 0.560137 = 1.572864e-3 s
    assert on.compute_s[0] == pytest.approx(1.572864e-3, rel=1e-6)


def test_the_flag_leaves_other_kernels_alone():
    conv = K(
        "conv",
        2 * 8 * 56 * 56 * 128 * 64 * 9,
        4 * (8 * 64 * 58 * 58 + 128 * 64 * 9),
        4 * 8 * 128 * 56 * 56,
        "float32",
        {"n": 8, "c_in": 64, "c_out": 128, "out_spatial": [56, 56], "kernel": [3, 3], "groups": 1},
    )
    att = {"b": 8, "h": 12, "h_kv": 12, "s": 128, "t": 128, "d": 64, "dv": 64, "causal": False, "masked": False}
    qkv = 4 * 8 * 12 * 128 * 64  # bytes of one of q, k, v, o
    fused = K("attention", 4 * 8 * 12 * 128 * 128 * 64, 3 * qkv, qkv, "float32", att)
    half = K("gemm", 2 * 4096**3, 2 * 2 * 4096**2, 2 * 4096**2, "float16", {"b": 1, "m": 4096, "n": 4096, "k": 4096})
    add = K("elementwise", 2**20, 8 * 2**20, 4 * 2**20, "float32", {"numel": 2**20})
    kernels = [conv, fused, half, add]
    for device in (A100, H100):
        off = kernel_latency(kernels, device)
        on = kernel_latency(kernels, device, tf32_matmul=True)
        for f in ("compute_s", "memory_s", "launch_s", "bound_compute_s", "bound_memory_s"):
            assert list(getattr(on, f)) == list(getattr(off, f)), f
    # the math-fallback attention is two cuBLAS products: it moves with the flag
    math_att = K("attention", fused.flops, fused.bytes_read, fused.bytes_written, "float32", att | {"backend": "math"})
    off, on = kernel_latency([math_att], A100), kernel_latency([math_att], A100, tf32_matmul=True)
    assert on.bound_compute_s[0] == pytest.approx(off.bound_compute_s[0] * 19.5 / 156, rel=1e-12)


def test_committed_table_has_assumed_tf32_gemm_entries():
    """ampere: assumed (the float16 GEMM entry at the TF32 peak); hopper: fitted on the H100 kernel sweep's TF32
    GEMMs (docs/kernel-model.md), a fit of its own, not the float16 entry."""
    params = load_params()
    tf32, half = params.entries[("ampere", "gemm", TF32)], params.entries[("ampere", "gemm", "float16")]
    for f in ("e_compute", "e_memory", "launch_us", "tiles", "tile_i0", "k0", "exec_us"):
        assert getattr(tf32, f) == getattr(half, f), f  # the float16 GEMM entry, at the TF32 peak
    assert tf32.source.startswith("assumed: float32 matmuls on TF32 tensor cores"), tf32.source
    for key in ("a100-80gb", "a100-pcie-40gb"):
        assert params.lookup(key, "gemm", TF32).basis(key) == "assumed"
    hopper = params.entries[("hopper", "gemm", TF32)]
    assert hopper.source.startswith("fit: this project's kernel sweep") and hopper.measured_on == ("h100-80gb",)
    assert hopper.e_compute != params.entries[("hopper", "gemm", "float16")].e_compute
    assert params.lookup("h100-80gb", "gemm", TF32).basis("h100-80gb") == "fitted_on_this_gpu"
    assert params.lookup("h100-80gb:3g.40gb", "gemm", TF32).basis("h100-80gb:3g.40gb") == "fitted_on_this_gpu"
    assert params.lookup("h200-141gb", "gemm", TF32).basis("h200-141gb") == "fitted_on_other_gpus"
    # default (flag off) is what it was: the float32 gemm entry, fitted on NeuSight's measurements
    assert params.lookup("a100-80gb", "gemm", param_dtype("gemm", "float32")).source.startswith("fit: NeuSight")


def test_committed_table_tf32_gemm_on_a100_and_basis():
    """The committed ampere TF32 entry (= float16 GEMM: e_compute 0.757088, tiles from 256x128 down, tile_i0
    28.4422, k0 61.1755, exec 4.4434 us, wave tail 0.129071, ridge 0.336785, e_memory 0.786369) on the 4096^3
    float32 GEMM: the best tile is 256x128 (16 x 32 = 512 tiles = 4.740741 waves on 108 SMs, run in
    4.740741 + 0.129071 x 0.259259 = 4.774204 wave times: q = 0.992991, the largest tile's rate: 1; 128x128 gives
    0.992991 x 0.923081 = 0.916611); depth 4096 / (4096 + 61.1755) = 0.985284; e_c = 0.757088 x 0.992991 x
    0.985284 = 0.740719; compute 8.810189e-4 / 0.740719 = 1.189411e-3 s; memory 201,326,592 B / (2039e9 x
    0.786369) = 1.255618e-4 s; ridge: 1.189411e-3 x (1 + (1.255618e-4 / 1.189411e-3)^(1 / 0.336785))^0.336785 =
    1.189916e-3 s, + 4.4434e-6 = 1.194359e-3 s."""
    arrays = kernel_arrays([GEMM32])
    on = kernel_latency_arrays(arrays, A100, tf32_matmul=True)
    assert on.compute_s[0] == pytest.approx(1.194359e-3, rel=1e-5)
    off = kernel_latency_arrays(arrays, A100)
    assert off.compute_s[0] > 5 * on.compute_s[0]  # FP32 CUDA cores: 8x lower peak, higher fitted efficiency
    assert kernel_basis(arrays, A100, on, tf32_matmul=True)["assumed"] == 1.0
    assert kernel_basis(arrays, A100, off)["fitted_on_other_gpus"] == 1.0  # NeuSight's A100 PCIe measurements


# ---- the user's setting: CLI, API, manifests, reports ----------------------------------------------------------


def run(*args):
    from click.testing import CliRunner

    from analyzer.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args])


def ok_json(*args) -> dict:
    res = run(*args, "--format", "json")
    assert res.exit_code == 0, (res.exit_code, res.stderr, res.exception)
    return json.loads(res.stdout)


def _onnx(path: Path, nodes, inputs, outputs, inits) -> Path:
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """mlp: x[N, 1024] -> MatMul(1024 x 4096) -> Relu -> MatMul(4096 x 1024); conv: x[N, 3, 8, 8] -> Conv(3 -> 4,
    3x3, pad 1) -> Relu (no matmul)."""
    from onnx import TensorProto, helper, numpy_helper

    d = tmp_path_factory.mktemp("tf32_models")
    w1 = numpy_helper.from_array(np.full((1024, 4096), 0.01, np.float32), "w1")
    w2 = numpy_helper.from_array(np.full((4096, 1024), 0.01, np.float32), "w2")
    mlp = _onnx(
        d / "mlp.onnx",
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "w2"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1024])],
        [w1, w2],
    )
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    conv = _onnx(
        d / "conv.onnx",
        [
            helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
        [w],
    )
    return {"mlp": mlp, "conv": conv}


def test_cli_flag_reaches_the_json_and_speeds_up_float32_matmuls(models):
    base = ["predict", models["mlp"], "--batch", "256", "--device", "a100-80gb"]
    default = ok_json(*base)["prediction"]
    highest = ok_json(*base, "--matmul-precision", "highest")["prediction"]
    high = ok_json(*base, "--matmul-precision", "high")["prediction"]
    medium = ok_json(*base, "--matmul-precision", "medium")["prediction"]
    assert default == highest
    assert highest["runtime"]["tf32_matmul"] is False and highest["runtime"]["matmul_precision"] == "highest"
    assert high["runtime"] == {
        "framework": "pytorch-eager-cuda",
        "dtype": "float32",
        "tf32_conv": True,
        "tf32_matmul": True,
        "matmul_precision": "high",
        "host_overhead": 1.0,
    }
    assert medium["runtime"]["tf32_matmul"] is True and medium["runtime"]["matmul_precision"] == "medium"
    assert medium["latency_ms"] == high["latency_ms"]  # on a GPU "medium" is "high" (cuBLAS TF32)
    assert high["latency_ms"] < highest["latency_ms"] and high["energy_j"] < highest["energy_j"]
    # Each matmul: 2 x 256 x 1024 x 4096 = 2,147,483,648 FLOPs, 22,020,096 bytes (x or r, the 16 MiB weight, the
    # output): bound max(F / 19.5e12, B / 2039e9) = max(110.127, 10.800) us on FP32 CUDA cores, max(F / 156e12,
    # B / 2039e9) = max(13.766, 10.800) us on TF32: the roofline bound drops by 2 x 96.361 us = 0.192722 ms; the
    # ReLU between them does not move.
    drop = highest["roofline_latency_ms"] - high["roofline_latency_ms"]
    assert drop == pytest.approx(0.192722, rel=1e-5)
    assert high["basis"]["kernel_time_share"]["assumed"] > highest["basis"]["kernel_time_share"]["assumed"]


def test_no_effect_without_float32_matmuls(models):
    conv = ["predict", models["conv"], "--batch", "8", "--device", "a100-80gb"]
    a, b = ok_json(*conv)["prediction"], ok_json(*conv, "--matmul-precision", "high")["prediction"]
    for key in ("latency_ms", "latency_ms_interval", "energy_j", "roofline_latency_ms", "memory_mib", "mig", "basis"):
        assert a[key] == b[key], key
    half = ["predict", models["mlp"], "--batch", "256", "--device", "h100-80gb", "--dtype", "float16"]
    a, b = ok_json(*half)["prediction"], ok_json(*half, "--matmul-precision", "high")["prediction"]
    assert a["runtime"]["dtype"] == "float16" and b["runtime"]["tf32_matmul"] is True
    assert (a["latency_ms"], a["roofline_latency_ms"]) == (b["latency_ms"], b["roofline_latency_ms"])


def test_bad_precision_is_one_line_exit_2(models):
    for args in (
        ["predict", models["mlp"], "--matmul-precision", "low"],
        ["report", models["mlp"], "-o", "r.json", "--matmul-precision", "HIGH"],
        ["analyze-many", models["mlp"], "-o", "rows.jsonl", "--matmul-precision", "tf32"],
        ["llm", "zoo:llama_7b", "--runtime", "vllm", "--matmul-precision", "fp32"],
    ):
        res = run(*args)
        assert res.exit_code == 2 and res.stdout == "", (res.exit_code, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "--matmul-precision" in lines[0], res.stderr
    from analyzer import api
    from analyzer.errors import UsageError

    with pytest.raises(UsageError, match=r"--matmul-precision must be one of highest, high, medium \(got 'low'\)"):
        api.predict(str(models["mlp"]), matmul_precision="low")
    with pytest.raises(UsageError, match="--matmul-precision"):
        api.report(str(models["mlp"]), matmul_precision=None, batches=[])


def test_cli_choices_are_the_kernel_models():
    from analyzer.cli import MATMUL_PRECISIONS as CLI_CHOICES
    from predictor.kernel_model import MATMUL_PRECISIONS

    assert CLI_CHOICES == tuple(MATMUL_PRECISIONS)
    assert MATMUL_PRECISIONS == {"highest": False, "high": True, "medium": True}


def test_text_and_markdown_say_what_they_assume(models):
    base = ["predict", models["mlp"], "--batch", "256", "--device", "a100-80gb"]
    for fmt in ("table", "markdown", "html"):
        res = run(*base, "--matmul-precision", "high", "--format", fmt)
        assert res.exit_code == 0, res.stderr
        assert "TF32 matmuls: torch.set_float32_matmul_precision(&#x27;high&#x27;)" in res.stdout or (
            "TF32 matmuls: torch.set_float32_matmul_precision('high')" in res.stdout
        ), fmt
        default = run(*base, "--format", fmt)
        assert "TF32 convolutions, FP32 matmuls: torch defaults" in default.stdout, fmt


def test_api_report_and_sweep_follow_the_setting(models, tmp_path):
    from analyzer import api

    out = {}
    import jsonschema

    from analyzer.render import SCHEMA_FILE

    schema = json.loads(Path(SCHEMA_FILE).read_text())
    for mp in ("highest", "high"):
        rep = api.report(str(models["mlp"]), devices=["a100-80gb"], batches=[64, 256], matmul_precision=mp)
        doc = rep.to_json()
        jsonschema.validate(doc, schema)
        assert [p["runtime"]["matmul_precision"] for p in doc["predictions"]] == [mp]
        out[mp] = [pt["latency_ms"] for pt in doc["sweep"]["devices"][0]["points"]]
    assert len(out["high"]) == 2 and all(h < f for h, f in zip(out["high"], out["highest"], strict=True))
    bad = json.loads(json.dumps(doc))
    bad["predictions"][0]["runtime"]["matmul_precision"] = "tf32"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_manifest_rows_carry_the_setting(models, tmp_path):
    from analyzer.batch import Job, analyze_task, read_manifest
    from analyzer.errors import UsageError

    manifest = tmp_path / "m.jsonl"
    rows = [
        {"model": str(models["mlp"]), "batch": 256, "devices": ["a100-80gb"]},
        {"model": str(models["mlp"]), "batch": 256, "devices": ["a100-80gb"], "matmul_precision": "high"},
    ]
    manifest.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    jobs, _ = read_manifest(manifest)
    assert [j.matmul_precision for j in jobs] == ["highest", "high"]
    assert "matmul_precision" not in jobs[0].request()  # results files written before the setting still resume
    assert jobs[1].request()["matmul_precision"] == "high"
    jobs, _ = read_manifest(manifest, matmul_precision="medium")  # the default of rows that name none
    assert [j.matmul_precision for j in jobs] == ["medium", "high"]
    got = [analyze_task(j)["predictions"][0] for j in jobs]
    assert [p["runtime"]["matmul_precision"] for p in got] == ["medium", "high"]
    assert got[0]["latency_ms"] == got[1]["latency_ms"]
    manifest.write_text(json.dumps({"model": str(models["mlp"]), "matmul_precision": "fast"}) + "\n")
    with pytest.raises(UsageError, match=r"m\.jsonl line 1: --matmul-precision must be one of"):
        read_manifest(manifest)
    assert Job("m", "m").matmul_precision == "highest"


TINY_GPT2 = "gpt2?layers=2&hidden=64&heads=4&intermediate=256&vocab=256&max_pos=128&seq_len=16"


def test_llm_vllm_runtime_follows_the_setting():
    from analyzer.llm import llm

    vllm = {}
    for dtype in ("float32", "float16"):
        for mp in ("highest", "high"):
            rep = llm("zoo:llama", prompt=512, generate=128, batch=8, devices=["a100-80gb"], dtype=dtype,
                      runtime="vllm", matmul_precision=mp, contexts=[1024])  # fmt: skip
            doc = rep.llm.to_json()
            assert doc["runtime"]["matmul_precision"] == mp and doc["runtime"]["tf32_matmul"] is (mp == "high")
            vllm[dtype, mp] = (doc["devices"][0]["ttft_ms"], doc["devices"][0]["tpot_ms"])
    assert all(h < f for h, f in zip(vllm["float32", "high"], vllm["float32", "highest"], strict=True))
    assert vllm["float16", "high"] == vllm["float16", "highest"]


def test_llm_eager_runtime_follows_the_setting():
    from analyzer.llm import llm

    eager = {}
    for mp in ("highest", "high"):
        rep = llm(f"zoo:{TINY_GPT2}", prompt=16, generate=4, batch=1, devices=["a100-80gb"], contexts=[32],
                  dtype="float32", matmul_precision=mp)  # fmt: skip
        doc = rep.llm.to_json()
        assert doc["runtime"] == {
            "name": "eager",
            "matmul_precision": mp,
            "tf32_matmul": mp == "high",
            "host_overhead": 1.0,
        }
        eager[mp] = doc["prefill"]["basis"]["a100-80gb"]["kernel_time_share"]["assumed"]
    # a model this small is launch-bound either way; its float32 GEMMs now rest on the assumed TF32 entry
    assert eager["high"] > eager["highest"]
