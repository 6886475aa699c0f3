"""Power model (predictor.power), memory as nvidia-smi counts it (predictor.memory) and their parameter files."""

from __future__ import annotations

import pathlib
from types import SimpleNamespace

import pytest

from predictor.devices import DEVICES, get_device
from predictor.kernel_model import KernelParams, ParamTable, kernel_latency
from predictor.memory import (
    DEFAULT_RUNTIME,
    MIB,
    MemoryParamsError,
    RuntimeMemory,
    block_bytes,
    gpu_memory,
    load_memory_params,
    reserved_bytes,
    segment_bytes,
)
from predictor.power import PowerParams, PowerParamsError, busy_shares, load_power_params, power_params

H100 = get_device("h100-80gb")  # fp16 tensor-core peak 989.4e12 FLOP/s, fp32 67e12, bandwidth 3.35e12 B/s


def _kernel(kind, dtype, flops, nbytes):
    return SimpleNamespace(kind=kind, dtype=dtype, flops=flops, bytes_read=nbytes, bytes_written=0, params={})


def test_power_model_energy_of_a_two_kernel_graph():
    # Efficiency 1, no launch: the kernel model's terms are the roofline's.
    ideal = KernelParams(e_compute=1.0, e_memory=1.0, launch_us=0.0, source="test")
    table = ParamTable({("h100-80gb", "gemm", "*"): ideal, ("h100-80gb", "elementwise", "*"): ideal}, {})
    kernels = [
        # gemm fp16: 989.4e9 FLOPs / 989.4e12 = 1 ms compute; 0.335e9 B / 3.35e12 = 0.1 ms memory -> compute-bound
        _kernel("gemm", "float16", 989.4e9, 0.335e9),
        # elementwise fp32: 67e6 FLOPs / 67e12 = 1 us compute; 3.35e9 B / 3.35e12 = 1 ms memory -> memory-bound
        _kernel("elementwise", "float32", 67e6, 3.35e9),
    ]
    t = kernel_latency(kernels, H100, params=table)
    assert t.eager_ms == pytest.approx(2.0)  # 1 ms + 1 ms
    s_c, s_m, s_gap = busy_shares(t.compute_s, t.memory_s, t.launch_s)
    assert (s_c, s_m, s_gap) == pytest.approx((0.5, 0.5, 0.0))  # 1 ms of 2 each
    p = PowerParams(gap_w=100, compute_w=600, memory_w=400, limit_w=700)
    watts = p.power_w(s_c, s_m)
    assert watts == pytest.approx(500.0)  # 100 + (600 - 100) x 0.5 + (400 - 100) x 0.5 = 100 + 250 + 150
    assert watts * t.eager_ms / 1e3 == pytest.approx(1.0)  # 500 W x 2 ms = 1.0 J
    capped = PowerParams(gap_w=100, compute_w=600, memory_w=400, limit_w=450)
    assert capped.power_w(s_c, s_m) == 450.0  # 500 W over the 450 W limit


def test_launch_floor_kernels_count_as_gap():
    # Per kernel (compute, memory, launch) in seconds: 3 ms compute-bound, 1 ms memory-bound, a 20 us kernel whose
    # 1 us / 2 us execution hides behind its launch (gap). Total 3 + 1 + 0.02 = 4.02 ms.
    import numpy as np

    s_c, s_m, s_gap = busy_shares(
        np.array([3e-3, 0.5e-3, 1e-6]), np.array([1e-3, 1e-3, 2e-6]), np.array([20e-6, 20e-6, 20e-6])
    )
    assert s_c == pytest.approx(3 / 4.02) and s_m == pytest.approx(1 / 4.02) and s_gap == pytest.approx(0.02 / 4.02)
    assert busy_shares(np.zeros(0), np.zeros(0), np.zeros(0)) == (0.0, 0.0, 0.0)


def test_power_interval_uses_held_out_ratios_and_the_limit():
    p = PowerParams(gap_w=100, compute_w=600, memory_w=400, limit_w=700, ratio_p10=0.8, ratio_p90=1.5)
    assert p.interval_w(400.0) == pytest.approx((320.0, 600.0))  # 400 x 0.8, 400 x 1.5
    assert p.interval_w(600.0) == pytest.approx((480.0, 700.0))  # 600 x 1.5 = 900 capped at 700


def test_allocator_rounding():
    # c10/cuda/CUDACachingAllocator.cpp: 512 B blocks; <= 1 MiB from 2 MiB segments, < 10 MiB from 20 MiB
    # segments, larger requests their own segment rounded up to 2 MiB.
    assert block_bytes(1) == 512 and block_bytes(512) == 512 and block_bytes(513) == 1024
    assert block_bytes(0) == 0 and segment_bytes(0) == 0
    assert segment_bytes(1000) == 2 * MIB
    assert segment_bytes(MIB) == 2 * MIB  # exactly kSmallSize: small pool
    assert segment_bytes(MIB + 1) == 20 * MIB  # 1 MiB + 512 B: large pool, 20 MiB segment
    assert segment_bytes(10 * MIB - 512) == 20 * MIB
    assert segment_bytes(10 * MIB) == 10 * MIB  # kMinLargeAlloc: own segment, already a multiple of 2 MiB
    assert segment_bytes(11 * MIB + 1) == 12 * MIB  # 11 MiB + 512 B rounded up to 2 MiB


def test_allocator_packing():
    k600 = 600 * 1024  # 614,400 B, a multiple of 512
    # three 600 KiB blocks share one 2 MiB segment (3 x 614,400 = 1,843,200 <= 2,097,152), the 5 MiB block opens a
    # 20 MiB segment, the 12 MiB block its own 12 MiB segment: 2 + 20 + 12 = 34 MiB
    assert reserved_bytes([k600, k600, k600, 5 * MIB, 12 * MIB]) == 34 * MIB
    # a fourth 600 KiB block no longer fits the 253,952 B left: a second 2 MiB segment -> 36 MiB
    assert reserved_bytes([k600] * 4 + [5 * MIB, 12 * MIB]) == 36 * MIB
    # three 8 MiB blocks: two share a 20 MiB segment (16 MiB), the third opens another -> 40 MiB
    assert reserved_bytes([8 * MIB] * 3) == 40 * MIB


def test_gpu_memory_terms():
    rt = RuntimeMemory(fixed_mib=400.0, per_sm_mib=0.0, reserve=2.0, source="test")
    m = gpu_memory(100 * MIB + 1, 10 * MIB, sms=132, hopper=True, runtime=rt)
    # weights 100 MiB + 1 B -> 102 MiB (2 MiB rounding); activations 2 x 10 = 20 MiB; context 400; cuBLAS 32 (Hopper)
    assert (m.weights_mib, m.activations_mib, m.context_mib, m.workspace_mib) == (102.0, 20.0, 400.0, 32.0)
    assert m.total_mib == 554.0  # 102 + 20 + 400 + 32
    assert m.tensor_peak_mib == pytest.approx(110.0 + 1 / MIB)  # 100 MiB + 1 B + 10 MiB, unrounded
    conv = gpu_memory(100 * MIB + 1, 10 * MIB, sms=108, hopper=False, has_conv=True, runtime=rt)
    assert conv.workspace_mib == 8.125 + 4.0  # cuBLAS 4096 KiB x 2 + 16 KiB x 8 = 8.125 MiB, + cuDNN 4 (H100 rows)
    old = RuntimeMemory(fixed_mib=1000.0, per_sm_mib=4.0, reserve=2.0, source="test")
    assert gpu_memory(0, 0, sms=14, hopper=False, runtime=old).context_mib == 1056.0  # 1000 + 4 x 14


def test_parameter_files_cover_every_device_and_fail_loudly(tmp_path):
    table = load_power_params()
    assert set(table) == set(DEVICES)
    for key, p in table.items():
        assert 0 <= p.gap_w <= p.limit_w and p.limit_w == DEVICES[key].tdp_w and p.source
        assert p.ratio_p10 <= 1 <= p.ratio_p90
    fitted = {k for k, p in table.items() if p.source.startswith("fit:")}
    assert fitted == {"a100-40gb", "h100-80gb"}  # the two GPUs with ML.ENERGY measurements
    assert DEFAULT_RUNTIME in load_memory_params() and "torch-1.12-cuda11" in load_memory_params()
    with pytest.raises(PowerParamsError, match="cannot read"):
        load_power_params(tmp_path / "missing.json")
    with pytest.raises(MemoryParamsError, match="cannot read"):
        load_memory_params(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something else"}')
    with pytest.raises(PowerParamsError, match="not a power-parameter file"):
        load_power_params(bad)
    with pytest.raises(PowerParamsError, match="no power parameters"):
        power_params("tpu-v5")


def _same_fit(a, b, path: str = "") -> list[str]:
    """Where two parameter documents differ: every key and string the same, every number within 0.5% (0.05
    absolute): numpy's vectorised math takes other code paths on CPUs with AVX-512, whose last bits reach the fitted
    figures (the A100 P_memory of power_params.json: 371.79 W from a machine without it, 372.44 W on an AMD EPYC with
    it, and 371.79 again there with `NPY_DISABLE_CPU_FEATURES` naming its AVX-512 features; 28 November 2026)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a for d in _same_fit(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _same_fit(x, y, f"{path}[{i}]")]
    numbers = isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool)
    if numbers and a == pytest.approx(b, rel=5e-3, abs=0.05):
        return []
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def test_committed_parameter_files_are_what_the_fits_write():
    # The fits are deterministic on one machine: rerunning them on the committed data must reproduce the committed
    # files (to `_same_fit`'s tolerance across CPUs), so a changed data file or fit cannot leave stale parameters
    # behind.
    import json

    from predictor import memory_fit, power_fit
    from predictor.memory import PARAMS_PATH as MEMORY_PARAMS
    from predictor.power import PARAMS_PATH as POWER_PARAMS

    power_doc, _ = power_fit.run(power_fit.DATA)
    assert _same_fit(power_doc, json.loads(POWER_PARAMS.read_text())) == []
    memory_doc, _ = memory_fit.run(memory_fit.DATA)
    assert _same_fit(memory_doc, json.loads(MEMORY_PARAMS.read_text())) == []


def test_same_fit_tolerates_the_last_bits_and_nothing_more():
    """By hand: 372.44 against 371.79 (0.17%) and 13.33 against 13.31 pass; 375.0 against 371.79 (0.86%), a changed
    string, a missing key or a different count fail."""
    doc = {"devices": {"a": {"memory_w": 371.79, "rows": 238, "source": "fit"}}, "mape_pct": 13.31, "pins": [1, 2]}
    near = {"devices": {"a": {"memory_w": 372.44, "rows": 238, "source": "fit"}}, "mape_pct": 13.33, "pins": [1, 2]}
    assert _same_fit(near, doc) == []
    far = {**near, "devices": {"a": {"memory_w": 375.0, "rows": 238, "source": "fit"}}}
    assert _same_fit(far, doc) == [".devices.a.memory_w: 375.0 vs 371.79"]
    assert _same_fit({**near, "devices": {"a": {"memory_w": 371.79, "rows": 238, "source": "assumed"}}}, doc)
    assert _same_fit({**near, "pins": [1]}, doc) and _same_fit({"mape_pct": 13.31}, doc)


def test_fit_commands_reject_a_missing_data_folder(tmp_path, capsys):
    from predictor import memory_fit, power_fit

    assert power_fit.main(["--data", str(tmp_path), "--out", str(tmp_path / "p.json")]) == 2
    assert memory_fit.main(["--data", str(tmp_path), "--out", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert "mlenergy-diffusion-v2.jsonl not found" in err and "mig-a100-40gb.jsonl not found" in err
    assert not (tmp_path / "p.json").exists() and not (tmp_path / "m.json").exists()


def test_memory_fit_rejects_h100_rows_without_a_context(tmp_path, capsys):
    # --h100 pointed at measurements that hold no measured context (a row without memory_mb, or a line that is not
    # JSON): a one-line error and exit 2, no traceback, nothing written
    from predictor import memory_fit

    out = tmp_path / "m.json"
    for i, line in enumerate(('{"status": "ok", "id": "x"}', "{not json")):
        folder = tmp_path / f"h100-{i}"
        folder.mkdir()
        (folder / "a.jsonl").write_text(line + "\n")
        assert memory_fit.main(["--h100", str(folder), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and str(folder) in err
    assert not out.exists()


def test_power_fit_recovers_the_watts_rows_were_made_from():
    # Rows made exactly from P_gap 100, P_compute 600, P_memory 400 W (limit 700):
    # P = 100 + 500 s_c + 300 s_m: (0, 0) -> 100; (1, 0) -> 600; (0, 1) -> 400; (0.5, 0.3) -> 100 + 250 + 90 = 440.
    from predictor.power_fit import Row, fit

    rows = [Row("h100-80gb", "m", "llm", c, m, w, "") for c, m, w in ((0, 0, 100), (1, 0, 600), (0, 1, 400))]
    rows.append(Row("h100-80gb", "m2", "llm", 0.5, 0.3, 440.0, ""))
    assert fit(rows, 700.0) == pytest.approx((100.0, 600.0, 400.0), abs=1e-6)


def test_engine_shares_are_the_engine_gpu_time_over_the_measured_time():
    # A vLLM row's shares are the serving engine's compute- and memory-bound kernel time per decode step over the
    # row's steady-state time per decode step, avg_batch_size / output_tokens_per_s (64 / 1280 tok/s = 50 ms): halving
    # the throughput halves both; the row's avg_tpot_s (a mean over all iterations, drain included) is not read; a
    # measured time shorter than the engine's GPU time scales them down together to a sum of exactly 1 (no gap left).
    from predictor.power_fit import engine_shares, step_time_s

    row = {
        "model": "mistralai/Mistral-7B-Instruct-v0.3",
        "gpu": "NVIDIA H100 80GB HBM3",
        "parallelization": {"tp": 1, "pp": 1},
        "avg_batch_size": 64.0,
        "avg_output_len": 256.0,
        "task": "lm-arena-chat",
        "avg_tpot_s": 0.04,
        "output_tokens_per_s": 1280.0,
    }
    assert step_time_s(row) == pytest.approx(0.05) and step_time_s(row, "tpot") == 0.04
    c1, m1 = engine_shares(row)
    c2, m2 = engine_shares(row | {"output_tokens_per_s": 640.0})
    assert 0 < c1 + m1 < 1 and m1 > c1  # decode at batch 64 on an H100: memory-bound (ridge ~300 tokens)
    assert (c2, m2) == pytest.approx((c1 / 2, m1 / 2), rel=1e-12)
    assert engine_shares(row | {"avg_tpot_s": 0.08}) == (c1, m1)
    c3, m3 = engine_shares(row | {"output_tokens_per_s": 64e6})  # 1 us per step
    assert c3 + m3 == pytest.approx(1.0, rel=1e-12) and c3 / m3 == pytest.approx(c1 / m1, rel=1e-9)
    assert engine_shares(row | {"model": "not/a-model"}) is None


def test_float32_compute_power_of_a_two_kernel_graph():
    # Efficiency 1, no launch. A float32 gemm on FP32 CUDA cores: 67e9 FLOPs / 67e12 FLOP/s = 1 ms compute,
    # 0.335e9 B / 3.35e12 B/s = 0.1 ms memory -> compute-bound, float32. A float16 elementwise kernel: 3.35e9 B -> 1 ms
    # memory, 1e6 FLOPs / 67e12 = 15 ns compute -> memory-bound.
    from predictor.kernel_model import kernel_arrays
    from predictor.power import kernel_classes, shares_from_classes

    ideal = KernelParams(e_compute=1.0, e_memory=1.0, launch_us=0.0, source="test")
    table = ParamTable({("h100-80gb", "gemm", "*"): ideal, ("h100-80gb", "elementwise", "*"): ideal}, {})
    kernels = [_kernel("gemm", "float32", 67e9, 0.335e9), _kernel("elementwise", "float16", 1e6, 3.35e9)]
    t = kernel_latency(kernels, H100, params=table)
    assert t.eager_ms == pytest.approx(2.0)  # 1 ms + 1 ms
    classes = kernel_classes(kernel_arrays(kernels), t, H100)
    assert classes["compute_cuda"] == pytest.approx(1e-3) and classes["compute_cuda_fp32"] == pytest.approx(1e-3)
    assert classes["compute_tensor"] == 0.0 and classes["memory"] == pytest.approx(1e-3) and classes["gap"] == 0.0
    assert classes["compute_cuda_fp32_peak"] == pytest.approx(1e-3)  # efficiency 1: its time at peak is its time
    s = shares_from_classes(classes, 2e-3, "float32")
    assert s == pytest.approx((0.0, 0.5, 0.5))  # (compute but float32, memory, float32 compute): 0, 1 ms, 1 ms of 2
    p = PowerParams(gap_w=100, compute_w=600, memory_w=400, limit_w=700, compute_fp32_w=250)
    watts = p.power_w(*s)
    assert watts == pytest.approx(325.0)  # 100 + (400 - 100) x 0.5 + (250 - 100) x 0.5 = 100 + 150 + 75
    assert watts * t.eager_ms / 1e3 == pytest.approx(0.65)  # 325 W x 2 ms = 0.65 J
    # without a float32 figure the gemm draws P_compute: 100 + 500 x 0.5 + 300 x 0.5 = 500 W, 1.0 J
    old = PowerParams(gap_w=100, compute_w=600, memory_w=400, limit_w=700)
    assert old.power_w(*s) == pytest.approx(500.0)
    assert old.power_w(*shares_from_classes(classes, 2e-3, "none")) == pytest.approx(500.0)  # s = (0.5, 0.5, 0)


def test_tensor_core_mask_follows_the_roofline_peak():
    from predictor.kernel_model import kernel_arrays
    from predictor.power import tensor_core_mask

    kernels = [
        _kernel("gemm", "float32", 1.0, 1.0),  # FP32 CUDA cores (torch's default matmul precision)
        _kernel("conv", "float32", 1.0, 1.0),  # TF32 tensor cores (cuDNN's default)
        _kernel("gemm", "float16", 1.0, 1.0),  # tensor cores
        _kernel("elementwise", "float16", 1.0, 1.0),  # CUDA cores
    ]
    arrays = kernel_arrays(kernels)
    assert tensor_core_mask(arrays, H100).tolist() == [False, True, True, False]
    assert tensor_core_mask(arrays, H100, tf32_matmul=True).tolist() == [True, True, True, False]


def test_float32_peak_shares_count_the_unreached_part_as_gap():
    # A float32 kernel of 2 ms whose time at peak is 0.5 ms (a quarter of peak), a float16 tensor-core one of 1 ms,
    # memory 0.5 ms, gap 0.5 ms: 4 ms. "float32-peak": s_compute_fp32 = 0.5 / 4; the float32 kernel's other 1.5 ms is
    # gap (in neither share): s_compute = 1 / 4, s_memory = 0.5 / 4.
    from predictor.power import shares_from_classes

    classes = {
        "gap": 0.5, "memory": 0.5, "compute_tensor": 1.0, "compute_cuda": 2.0,
        "compute_tensor_fp32": 0.0, "compute_cuda_fp32": 2.0, "compute_tensor_fp32_peak": 0.0,
        "compute_cuda_fp32_peak": 0.5,
    }  # fmt: skip
    assert shares_from_classes(classes, 4.0, "float32-peak") == pytest.approx((0.25, 0.125, 0.125))
    assert shares_from_classes(classes, 4.0, "float32") == pytest.approx((0.25, 0.125, 0.5))
    assert shares_from_classes(classes, 4.0, "cuda") == pytest.approx((0.25, 0.125, 0.5))
    assert shares_from_classes(classes, 0.0) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="fp32_compute must be one of"):
        shares_from_classes(classes, 4.0, "int8")


def test_power_fit_recovers_a_float32_compute_power():
    # Rows made exactly from P_gap 100, P_compute 600, P_memory 400, P_compute_fp32 250 W:
    # P = 100 + 500 s_c + 300 s_m + 150 s_32: (0.2, 0.3, 0.4) -> 100 + 100 + 90 + 60 = 350.
    from predictor.power_fit import Row, fit

    made = ((0, 0, 0, 100), (1, 0, 0, 600), (0, 1, 0, 400), (0, 0, 1, 250), (0.2, 0.3, 0.4, 350))
    rows = [Row("h100-80gb", f"m{i}", "h100-model", c, m, w, "", f) for i, (c, m, f, w) in enumerate(made)]
    assert fit(rows, 700.0, fp32=True) == pytest.approx((100.0, 600.0, 400.0, 250.0), abs=1e-6)


def test_h100_model_rows_shares_and_grouping(tmp_path):
    # One record: 1000 runs in a 1.0 s timed window -> 1 ms per inference. Kernel classes (ms): tensor-core compute
    # 0.2 (0.1 of it float32: TF32 convs), CUDA-core compute 0.3 (all float32), memory 0.25, gap 0.05; eager 0.8 ms.
    # "float32": s_32 = 0.1 + 0.3 = 0.4 ms, s_c = 0.5 - 0.4 = 0.1 ms. Fit shares over the measured 1 ms:
    # (0.1, 0.25, 0.4); a prediction's over the eager 0.8 ms: (0.125, 0.3125, 0.5).
    import dataclasses
    import json

    from predictor.power_fit import PowerDataError, evaluate, fit, h100_model_rows, predict_w

    rec = {"id": "r1", "status": "ok", "family": "fam", "zoo": "fam_x", "dtype": "float32", "batch": 1,
           "power_w": 300.0, "timing": {"timed_window_s": 1.0}, "latency_ms": {"runs": 1000}}  # fmt: skip
    ms = {"gap": 0.05, "memory": 0.25, "compute_tensor": 0.2, "compute_cuda": 0.3, "compute_tensor_fp32": 0.1,
          "compute_cuda_fp32": 0.3, "memory_fp32": 0.0, "gap_fp32": 0.0}  # fmt: skip
    records, classes = tmp_path / "m.jsonl", tmp_path / "c.json"
    records.write_text(json.dumps(rec) + "\n" + json.dumps(rec | {"id": "r2", "family": "other"}) + "\n")
    doc = {"schema": "preflight.h100_model_kernel_classes/1", "rows": [{"id": "r1", "eager_ms": 0.8, "class_ms": ms}]}
    classes.write_text(json.dumps(doc))
    with pytest.raises(PowerDataError, match="1 records .* have no kernel classes .*first r2"):
        h100_model_rows(records, classes, "float32")
    doc["rows"].append({"id": "r2", "eager_ms": 0.8, "class_ms": ms})
    classes.write_text(json.dumps(doc))
    rows = h100_model_rows(records, classes, "float32", "measured")
    r = rows[0]
    assert (r.s_compute, r.s_memory, r.s_compute_fp32) == pytest.approx((0.1, 0.25, 0.4))
    assert r.held_out == pytest.approx((0.125, 0.3125, 0.5))
    assert [x.model for x in rows] == ["h100-models/fam", "h100-models/other"]
    p = h100_model_rows(records, classes, "float32", "predicted")[0]
    assert (p.s_compute, p.s_memory, p.s_compute_fp32) == pytest.approx((0.125, 0.3125, 0.5))
    # a prediction reads the held-out shares: 100 + 500 x 0.125 + 300 x 0.3125 + 150 x 0.5 = 331.25 W
    assert predict_w((100.0, 600.0, 400.0, 250.0), r, 700.0) == pytest.approx(331.25)
    # leave-one-family-out: a family's rows are predicted by a fit that never saw them. Family "other" at 10x the
    # power must not move the prediction of "fam", which equals the fit on "other" alone (and the reverse).
    planted = [r, dataclasses.replace(rows[1], power_w=3000.0)]
    pred, meas = evaluate(planted, 7000.0, fp32=True)
    assert pred[0] == pytest.approx(predict_w(fit([planted[1]], 7000.0, True), r, 7000.0))
    assert pred[1] == pytest.approx(predict_w(fit([r], 7000.0, True), planted[1], 7000.0))
    assert meas.tolist() == [300.0, 3000.0]


def test_power_fit_step_time_is_a_parameter_not_a_global(tmp_path):
    import json

    from predictor import power_fit
    from predictor.power_fit import step_time_s

    out = tmp_path / "p.json"
    assert power_fit.main(["--step-time", "tpot", "--without-h100-models", "--out", str(out)]) == 0
    assert power_fit.STEP_TIME == "throughput"  # the module default is untouched
    doc = json.loads(out.read_text())
    assert doc["llm_step_time"] == "tpot" and "h100_models" not in doc
    with pytest.raises(ValueError, match="step time must be one of"):
        step_time_s({"avg_tpot_s": 0.04}, "bogus")


def test_reported_power_split_and_watts_give_power_w_by_hand():
    # A float32 model on the H100 (whose power figures have compute_fp32_w): a 4096x4096x4096 float32 GEMM on FP32
    # CUDA cores (compute-bound) and a ReLU over its 2^24-element output (memory-bound). The JSON's power_split and
    # the watts of predictor/power_params.json's h100-80gb entry must give power_w by hand; power_shares (the
    # three-way busy split) alone cannot, as the GEMM's time below the FP32 peak is priced at gap_w.
    import json

    import jsonschema
    import torch

    from analyzer.api import predict
    from analyzer.render import SCHEMA_FILE

    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096, bias=False), torch.nn.ReLU()).eval()
    doc = predict(model, (torch.zeros(4096, 4096),), device="h100-80gb").to_json()
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))
    p = doc["prediction"]
    split = p["power_split"]
    assert split["compute_fp32"] > 0 and split["memory"] > 0
    assert sum(split.values()) == pytest.approx(1.0, abs=1e-12)
    # the watts of predictor/power_params.json's h100-80gb entry (read from the file, not through predictor.power);
    # the sum below cannot pass its limit_w (700 W): no watt figure does
    w = json.loads((pathlib.Path(__file__).resolve().parents[1] / "predictor/power_params.json").read_text())["devices"]
    w = w["h100-80gb"]
    assert max(w["gap_w"], w["compute_w"], w["memory_w"], w["compute_fp32_w"]) <= w["limit_w"]
    by_hand = (
        w["gap_w"] * split["gap"]
        + w["compute_w"] * split["compute"]
        + w["memory_w"] * split["memory"]
        + w["compute_fp32_w"] * split["compute_fp32"]
    )
    assert p["power_w"] == pytest.approx(by_hand, rel=1e-9)
    assert split["memory"] == pytest.approx(p["power_shares"]["memory"], abs=5e-5)  # the shares are rounded to 4
    shares = p["power_shares"]
    three_way = w["gap_w"] * shares["gap"] + w["compute_w"] * shares["compute"] + w["memory_w"] * shares["memory"]
    assert abs(three_way - p["power_w"]) > 1.0  # the busy split alone does not price the GEMM as power_w does


def test_fit_main_writes_checks_and_reports(tmp_path, capsys):
    # the tail both fits share (predictor/fit_cli.py): a missing input, a fit error, a fit that prints only, a write
    from predictor.fit_cli import fit_main

    out = tmp_path / "p.json"
    (tmp_path / "rows.jsonl").write_text("")
    assert fit_main(tmp_path, ["rows.jsonl", "more.jsonl"], lambda: ({}, ""), str(out)) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'more.jsonl'} not found\n"

    def bad():
        raise KeyError("gap_w")

    assert fit_main(tmp_path, ["rows.jsonl"], bad, str(out), errors=(KeyError,)) == 2
    assert capsys.readouterr().err == "error: 'gap_w'\n" and not out.exists()
    assert fit_main(tmp_path, [], lambda: None, str(out)) == 0 and not out.exists()
    assert fit_main(tmp_path, ["rows.jsonl"], lambda: ({"a": [1]}, "| table |"), str(out)) == 0
    assert out.read_text() == '{\n "a": [\n  1\n ]\n}\n'  # json.dumps(indent=1) and a final newline
    assert capsys.readouterr().out == f"| table |\nwrote {out}\n"
    # an output path that cannot be written (a folder; a file in a missing folder): one line, exit 2, no table
    for where in (tmp_path, tmp_path / "missing" / "p.json"):
        assert fit_main(tmp_path, [], lambda: ({"a": 1}, "| table |"), str(where)) == 2
        cap = capsys.readouterr()
        err, printed = cap.err, cap.out
        assert err.startswith(f"error: cannot write {where}: ") and err.count("\n") == 1 and "table" not in printed
