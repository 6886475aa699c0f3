"""Per-kernel time model (predictor.kernel_model) and its fit (predictor.kernel_fit): hand-computed times,
the bound never above the estimate, MIG scaling, parameter recovery, readers, and the committed table and
evaluation reproduced from the committed data."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest

from predictor import kernel_fit as kf
from predictor.devices import DEVICES, get_device
from predictor.kernel_model import (
    PARAMS_PATH,
    KernelParams,
    KernelParamsError,
    ParamTable,
    gemm_dims,
    kernel_arrays,
    kernel_latency,
    kernel_latency_arrays,
    latency_bound_ms,
    load_params,
    overlap_terms,
    tile_efficiency,
)

ROOT = Path(__file__).resolve().parents[1]
NEUSIGHT = ROOT / "data" / "neusight-kernels"
H100 = get_device("h100-80gb")  # 132 SMs, 3.35e12 B/s, fp32 67e12, fp16 989.4e12 FLOP/s
CONTRACT_KINDS = (
    "gemm",
    "conv",
    "attention",
    "elementwise",
    "reduction",
    "softmax",
    "norm",
    "pooling",
    "copy",
    "other",
)
CONTRACT_DTYPES = ("float32", "float16", "bfloat16", "int8")


@dataclass(frozen=True)
class K:
    """A kernel of the contract (passes.kernels.Kernel's fields the model reads)."""

    kind: str
    flops: int
    bytes_read: int
    bytes_written: int
    dtype: str = "float32"
    params: dict = field(default_factory=dict)


def table(**entries: KernelParams) -> ParamTable:
    """A hand-made table for the hopper family: kind=params, dtype '*'."""
    return ParamTable({("hopper", k, "*"): p for k, p in entries.items()}, {"hopper": ("h100-80gb",)})


GEMM = KernelParams(0.8, 0.9, 10.0, ((128, 128),), 0.0, 64.0, "test")
ELEM = KernelParams(1.0, 0.9, 5.0, source="test")
GEMM_4096 = K("gemm", 2 * 4096**3, 2 * 2 * 4096**2, 2 * 4096**2, "float16", {"b": 1, "m": 4096, "n": 4096, "k": 4096})
ADD_2E20 = K("elementwise", 2**20, 8 * 2**20, 4 * 2**20, "float32", {"numel": 2**20})


def test_hand_computed_times_on_h100():
    kt = kernel_latency([GEMM_4096, ADD_2E20], H100, params=table(gemm=GEMM, elementwise=ELEM))
    # gemm fp16 4096^3: 128x128 tiles: 32 x 32 = 1,024 tiles, ceil(1024 / 132) = 8 waves = 1,056 slots:
    # q = 1024 / 1056 = 0.969697; depth 4096 / (4096 + 64) = 0.984615; e_c = 0.8 x q x depth = 0.763823.
    # FLOPs 2 x 4096^3 = 137,438,953,472 / 989.4e12 = 1.389114e-4 s (bound) / 0.763823 = 1.818634e-4 s.
    # bytes 3 x 4096^2 x 2 = 100,663,296 / 3.35e12 = 3.004875e-5 s (bound) / 0.9 = 3.338750e-5 s.
    # estimate 1.818634e-4 + 10e-6 launch = 1.918634e-4 s.
    assert kt.compute_s[0] == pytest.approx(1.818634e-4, rel=1e-6)
    assert kt.memory_s[0] == pytest.approx(3.338750e-5, rel=1e-6)
    assert kt.seconds[0] == pytest.approx(1.918634e-4, rel=1e-6)
    assert kt.bound_s[0] == pytest.approx(1.389114e-4, rel=1e-6)
    # add fp32 2^20: bytes 12 x 2^20 = 12,582,912 / 3.35e12 = 3.756093e-6 s (bound) / 0.9 = 4.173436e-6 s;
    # compute 2^20 / 67e12 = 1.565e-8 s; estimate 4.173436e-6 + 5e-6 = 9.173436e-6 s.
    assert kt.seconds[1] == pytest.approx(9.173436e-6, rel=1e-6)
    assert kt.bound_s[1] == pytest.approx(3.756093e-6, rel=1e-6)
    assert list(kt.compute_bound) == [True, False]
    assert kt.total_ms == pytest.approx((1.918634e-4 + 9.173436e-6) * 1e3, rel=1e-6)
    assert kt.launch_ms == pytest.approx(0.015)  # 10 + 5 us
    assert latency_bound_ms([GEMM_4096, ADD_2E20], H100) == pytest.approx((1.389114e-4 + 3.756093e-6) * 1e3, rel=1e-6)


def test_wave_quantisation_picks_the_best_tile():
    # m = n = 1024, b = 1 on 132 SMs, tiles 128x128 (I = 64) and 64x64 (I = 32), tile_i0 = 32:
    # 128: 64 tiles, 1 wave, 132 x 16,384 = 2,162,688 slots: 1,048,576 / 2,162,688 = 0.484848, rate 1;
    # 64: 256 tiles, 2 waves, 264 x 4,096 = 1,081,344 slots: 0.969697, rate (32/64) / (64/96) = 0.75 -> 0.727273.
    q = tile_efficiency(np.array([1.0]), np.array([1024.0]), np.array([1024.0]), 132, ((128, 128), (64, 64)), 32.0)
    assert q[0] == pytest.approx(0.727273, rel=1e-5)
    # unknown dimensions: no penalty
    assert tile_efficiency(np.zeros(1), np.zeros(1), np.zeros(1), 132, ((128, 128),), 0.0)[0] == 1.0


def test_wave_tail_weight_by_hand():
    # m = 2,304 = 18 x 128, n = 1,408 = 11 x 128: 198 tiles of 128x128 on 132 SMs = 1.5 waves, ceil 2.
    one = (np.array([1.0]), np.array([2304.0]), np.array([1408.0]), 132, ((128, 128),), 0.0)
    # tail 1 (the whole last wave is paid): 1.5 / 2 = 0.75
    assert tile_efficiency(*one)[0] == pytest.approx(0.75, rel=1e-12)
    assert tile_efficiency(*one, 1.0)[0] == pytest.approx(0.75, rel=1e-12)
    # tail 0.5: the half-empty last wave costs 0.5 + 0.5 x 0.5 = 0.75 of a wave: 1.5 / 1.75 = 0.857143
    assert tile_efficiency(*one, 0.5)[0] == pytest.approx(1.5 / 1.75, rel=1e-12)
    # tail 0: no quantisation at all
    assert tile_efficiency(*one, 0.0)[0] == pytest.approx(1.0, rel=1e-12)
    # whole waves (264 = 2 x 132 tiles: m = 24 x 128, n = 11 x 128) do not depend on the tail
    assert tile_efficiency(np.ones(1), np.array([3072.0]), np.array([1408.0]), 132, ((128, 128),), 0.0, 0.3)[0] == 1
    # and on the kernel's time: fp16 2 x 2304 x 1408 x 4096 FLOPs = 26,575,110,144 / 989.4e12 = 2.685982e-5 s at
    # e_c 1 x q; q = 0.857143 -> 3.133646e-5 s (tail 1: q 0.75 -> 3.581310e-5 s), + exec 2 us, no k0.
    gemm = K("gemm", 2 * 2304 * 1408 * 4096, 0, 0, "float16", {"b": 1, "m": 2304, "n": 1408, "k": 4096})
    p = KernelParams(1.0, 1.0, 10.0, ((128, 128),), 0.0, 0.0, "test", exec_us=2.0, tail=0.5)
    kt = kernel_latency([gemm], H100, params=table(gemm=p))
    assert kt.compute_s[0] == pytest.approx(3.133646e-5 + 2e-6, rel=1e-6)
    kt = kernel_latency([gemm], H100, params=table(gemm=replace(p, tail=1.0)))
    assert kt.compute_s[0] == pytest.approx(3.581310e-5 + 2e-6, rel=1e-6)
    with pytest.raises(KernelParamsError, match="tail, ridge and overlap"):
        replace(p, tail=1.5)


def test_epilogue_overlap_by_hand():
    # m = 2,304 = 18 x 128, n = 2,816 = 22 x 128: 396 tiles of 128x128 = 3 whole waves on 132 SMs (fill 1);
    # k = 256, k0 = 64: each SM runs w = 3 tiles of depth 256 and pays the fixed cost k0 (1 + (w - 1)(1 - overlap))
    shape = (np.ones(1), np.array([2304.0]), np.array([2816.0]), 132, ((128, 128),), 0.0, 1.0, np.array([256.0]), 64.0)
    # overlap 0: once per tile, 256 / (256 + 64) = 0.8 (the classic depth factor)
    assert tile_efficiency(*shape, 0.0)[0] == pytest.approx(0.8, rel=1e-12)
    # overlap 1: once per SM, 768 / (768 + 64) = 0.923077
    assert tile_efficiency(*shape, 1.0)[0] == pytest.approx(768 / 832, rel=1e-12)
    # overlap 0.5: 768 / (768 + 64 x (1 + 2 x 0.5)) = 768 / 896 = 0.857143
    assert tile_efficiency(*shape, 0.5)[0] == pytest.approx(768 / 896, rel=1e-12)
    # one wave (m = n = 1,024: 64 tiles, w = 1): no next tile to overlap with, 256 / 320 = 0.8 whatever the overlap
    one = (np.ones(1), np.array([1024.0]), np.array([1024.0]), 132, ((128, 128),), 0.0, 0.0, np.array([256.0]), 64.0)
    assert tile_efficiency(*one, 1.0)[0] == pytest.approx(0.8, rel=1e-12)
    # in a kernel's time: fp16 2 x 2304 x 2816 x 256 FLOPs = 3,321,888,768 / 989.4e12 = 3.357478e-6 s;
    # e_c 0.9 x 768 / 832 = 0.830769 -> 4.041409e-6 s (overlap 0: 0.9 x 0.8 = 0.72 -> 4.663164e-6 s)
    gemm = K("gemm", 2 * 2304 * 2816 * 256, 0, 0, "float16", {"b": 1, "m": 2304, "n": 2816, "k": 256})
    p = KernelParams(0.9, 1.0, 10.0, ((128, 128),), 0.0, 64.0, "test", overlap=1.0)
    assert kernel_latency([gemm], H100, params=table(gemm=p)).compute_s[0] == pytest.approx(4.041409e-6, rel=1e-6)
    p = replace(p, overlap=0.0)
    assert kernel_latency([gemm], H100, params=table(gemm=p)).compute_s[0] == pytest.approx(4.663164e-6, rel=1e-6)


def test_ridge_overlap_by_hand():
    c, m = np.array([3.0, 8.0, 0.0]), np.array([4.0, 1.0, 0.0])
    # ridge 0.5: the larger term becomes (3^2 + 4^2)^0.5 = 5, (8^2 + 1^2)^0.5 = 8.062258; the smaller stays
    got_c, got_m = overlap_terms(c, m, 0.5)
    assert got_c.tolist() == pytest.approx([3.0, 65**0.5, 0.0]) and got_m.tolist() == pytest.approx([5.0, 1.0, 0.0])
    got_c, got_m = overlap_terms(c, m, 1.0)  # no overlap: the sum, 7 and 9
    assert got_c.tolist() == pytest.approx([3.0, 9.0, 0.0]) and got_m.tolist() == pytest.approx([7.0, 1.0, 0.0])
    assert overlap_terms(c, m, 0.0)[0] is c  # 0: max(compute, memory), the terms untouched
    # on the 4096^3 gemm of test_hand_computed_times_on_h100: compute 1.818634e-4, memory 3.338750e-5 s; ridge 0.5:
    # (1.818634e-4^2 + 3.338750e-5^2)^0.5 = 1.849027e-4 s, + 10 us launch; still compute-bound
    kt = kernel_latency([GEMM_4096], H100, params=table(gemm=replace(GEMM, ridge=0.5)))
    assert kt.compute_s[0] == pytest.approx(1.849027e-4, rel=1e-6)
    assert kt.memory_s[0] == pytest.approx(3.338750e-5, rel=1e-6)
    assert kt.seconds[0] == pytest.approx(1.949027e-4, rel=1e-6)
    assert list(kt.compute_bound) == [True]


def test_conv_and_attention_become_gemm_like_problems():
    # conv 3x3, 64 -> 128 channels, batch 8, 56x56 out: m = 8 x 56 x 56 = 25,088, n = 128, k = 64 x 9 = 576
    conv = {"n": 8, "c_in": 64, "c_out": 128, "out_spatial": [56, 56], "kernel": [3, 3], "groups": 1, "stride": [1, 1]}
    assert gemm_dims("conv", conv) == ("conv", (1, 25088, 128, 576))
    # depthwise (groups = c_in = c_out = 96): k = 1 x 9
    dw = conv | {"c_in": 96, "c_out": 96, "groups": 96}
    assert gemm_dims("conv", dw)[1] == (1, 25088, 96, 9)
    att = {"b": 2, "h": 8, "h_kv": 2, "s": 512, "t": 1024, "d": 64, "dv": 64, "causal": False, "masked": False}
    assert gemm_dims("attention", att | {"backend": "flash"}) == ("attention", (16, 512, 1, 1024))
    assert gemm_dims("attention", att | {"backend": "math"}) == ("gemm", (16, 512, 1024, 64))
    # a decode step (one query row per head): no tile shape; two rows keep the 128-row tile
    assert gemm_dims("attention", att | {"backend": "flash", "s": 1}) == ("attention", (0, 0, 0, 0))
    assert gemm_dims("attention", att | {"backend": "flash", "s": 2}) == ("attention", (16, 2, 1, 1024))
    assert gemm_dims("attention", att | {"backend": "math", "s": 1}) == ("gemm", (16, 1, 1024, 64))
    assert gemm_dims("gemm", {"numel": 4}) == ("gemm", (0, 0, 0, 0))  # sizes missing: no shape penalty
    assert gemm_dims("gemm", {"m": "x", "n": 1, "k": 1}) == ("gemm", (0, 0, 0, 0))
    assert gemm_dims("gemm", {"m": -4, "n": 1, "k": 1}) == ("gemm", (0, 0, 0, 0))
    assert kernel_latency([], H100).total_ms == 0.0


def test_mig_slice_scaling_by_hand():
    prof = H100.profile("1g.10gb")  # 16 of 132 SMs, 1 of 8 memory slices
    kt = kernel_latency([GEMM_4096, ADD_2E20], H100, prof, params=table(gemm=GEMM, elementwise=ELEM))
    # gemm: 1,024 tiles on 16 SMs = 64 full waves, q = 1; e_c = 0.8 x 0.984615 = 0.787692;
    # compute 1.389114e-4 x 132/16 / 0.787692 = 1.454907e-3 s; memory 3.338750e-5 x 8 = 2.671e-4 s; + 10 us.
    assert kt.seconds[0] == pytest.approx(1.454907e-3 + 1e-5, rel=1e-6)
    assert kt.bound_s[0] == pytest.approx(1.389114e-4 * 132 / 16, rel=1e-6)
    # add: memory 4.173436e-6 x 8 = 3.338749e-5 s, the launch is not scaled: + 5 us
    assert kt.seconds[1] == pytest.approx(3.338749e-5 + 5e-6, rel=1e-6)


def _random_kernels(rng: np.random.Generator, n: int) -> list[K]:
    out = []
    for _ in range(n):
        kind = str(rng.choice(CONTRACT_KINDS))
        dtype = str(rng.choice(CONTRACT_DTYPES))
        flops, nbytes = int(rng.integers(0, 10**12)), int(rng.integers(0, 10**10))
        if kind == "gemm":
            b, m, nn, k = (int(v) for v in rng.integers(1, 5000, 4))
            params = {"b": int(rng.integers(1, 64)), "m": m, "n": nn, "k": k} if b % 7 else {}
        elif kind == "conv":
            params = {"n": 4, "c_in": 32, "c_out": int(rng.integers(1, 512)), "out_spatial": [28, 28]}
            params |= {"kernel": [3, 3], "groups": 1, "stride": [1, 1]}
        elif kind == "attention":
            backend = str(rng.choice(["flash", "efficient", "math", "cudnn"]))
            params = {"b": 2, "h": 8, "h_kv": 8, "s": int(rng.integers(1, 4096)), "t": 77, "d": 64, "dv": 64}
            params |= {"causal": False, "masked": False, "backend": backend}
        else:
            params = {"numel": nbytes // 4}
        out.append(K(kind, flops, nbytes // 2, nbytes - nbytes // 2, dtype, params))
    return out


def test_bound_never_exceeds_the_estimate():
    rng = np.random.default_rng(17)
    kernels = _random_kernels(rng, 600)
    committed = load_params()
    tables = [committed]
    for _ in range(3):  # random valid tables: the property holds by construction, whatever the fit
        entries = {
            key: replace(p, e_compute=float(rng.uniform(1e-3, 1)), e_memory=float(rng.uniform(1e-3, 1)),
                         launch_us=float(rng.uniform(0, 50)), k0=float(rng.uniform(0, 500)),
                         tail=float(rng.uniform(0, 1)), ridge=float(rng.uniform(0, 1)),
                         overlap=float(rng.uniform(0, 1)))
            for key, p in committed.entries.items()
        }  # fmt: skip
        tables.append(replace(committed, entries=entries))
    for params in tables:
        for device in DEVICES.values():
            for profile in (None, *device.mig[:1]):
                kt = kernel_latency(kernels, device, profile, params)
                assert (kt.seconds >= kt.bound_s).all()
                assert kt.bound_ms == pytest.approx(latency_bound_ms(kernels, device, profile), rel=1e-12)


def test_committed_table_covers_the_contract():
    params = load_params()
    assert params.meta["data"]["records"] > 0 and "NeuSight" in params.meta["licence"]
    try:
        from passes.kernels import KERNEL_KINDS  # the contract's vocabulary, where the kernel view exists
    except ImportError:
        KERNEL_KINDS = CONTRACT_KINDS
    assert set(KERNEL_KINDS) == set(CONTRACT_KINDS) == set(kf.KINDS) == set(params.kinds)
    for key in DEVICES:
        assert params.family(key) is not None, key
        for kind in CONTRACT_KINDS:
            for dtype in (*CONTRACT_DTYPES, "float64", "bool"):
                p = params.lookup(key, kind, dtype)
                assert 0 < p.e_compute <= 1 and 0 < p.e_memory <= 1 and p.launch_us >= 0
                assert p.source.split(":")[0] in ("fit", "transfer", "default", "assumed"), p.source
    # the fitted entries say where they come from
    assert params.entries[("hopper", "gemm", "float32")].source.startswith("fit: NeuSight")
    assert params.entries[("ampere", "softmax", "float32")].source.startswith("fit: NeuSight")
    assert params.entries[("hopper", "softmax", "float32")].source.startswith("fit: this project's kernel sweep")
    # the H100 sweep's float32 norm fit was rejected (no better held out than before, KERNEL_EVAL.md): a transfer
    assert params.entries[("hopper", "norm", "float32")].source.startswith("transfer: the ampere fit")
    notice = (ROOT / "predictor" / "KERNEL_PARAMS_NOTICE.md").read_text()
    assert "MIT License" in notice and "Georgia Institute of Technology" in notice
    assert (NEUSIGHT / "LICENSE").read_text().startswith("MIT License")


def test_tensor_core_gemm_near_independent_rates():
    """The float16/bfloat16 GEMM entries (fitted on Vidur's float16 layers) against two rates they were not fitted
    on: an 8192^3 bf16 matmul measured on this project's H100 (798 TFLOP/s; the model gives 733, -8%: within 12%)
    and the MAMF table's A100 SXM bf16 rate at 6912x16384x2048 (267.9 TFLOP/s, the best of a shape search; the model
    gives 229, -15%: within 16%). The A100 bound is the looser one because Vidur's own A100 GEMMs of that kind
    (m >= 2,048, n >= 4,096, k <= 2,560: 1,596 kernels) run at 188-248 TFLOP/s, where the entry is fitted (5.6%
    MAPE on them; docs/kernel-model.md, "GEMM shape terms")."""
    params = load_params()
    for key, (m, n, k), rate, tol in (
        ("h100-80gb", (8192, 8192, 8192), 798e12, 0.12),
        ("a100-80gb", (6912, 16384, 2048), 267.9e12, 0.16),
    ):
        kern = K("gemm", 2 * m * n * k, 0, 0, "bfloat16", {"b": 1, "m": m, "n": n, "k": k})
        kt = kernel_latency([kern], DEVICES[key], params=params)
        assert kern.flops / kt.compute_s[0] == pytest.approx(rate, rel=tol)


def _synthetic(truth: KernelParams, kind: str, devices: list[str], n: int, seed: int) -> list[kf.MeasuredKernel]:
    """Records whose latency is the model's own prediction under `truth` (times 1 +- 1% noise)."""
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        dev = devices[i % len(devices)]
        if kind == "gemm":
            b, m, nn, k = int(rng.integers(1, 9)), *(int(v) for v in rng.integers(16, 6000, 3))
            params, flops, nbytes = (
                {"b": b, "m": m, "n": nn, "k": k},
                2 * b * m * nn * k,
                4 * b * (m * k + k * nn + m * nn),
            )
        else:
            numel = int(10 ** rng.uniform(3, 9))
            params, flops, nbytes = {"numel": numel}, numel, 12 * numel
        rec = kf.MeasuredKernel(kind, "op", "float32", flops, nbytes, 0, params, 1.0, dev, "synthetic")
        recs.append(rec)
    group = kf.Group.of(recs)
    lat = group.predict(truth) * rng.uniform(0.99, 1.01, n)
    return [replace(r, latency_s=float(t)) for r, t in zip(recs, lat, strict=True)]


def test_fit_recovers_known_parameters():
    truth_elem = KernelParams(1.0, 0.82, 7.0)
    recs = _synthetic(truth_elem, "elementwise", ["a100-80gb", "h100-80gb"], 300, 1)
    got = kf.fit_entry(kf.Group.of(recs), kf.FALLBACK_MEMORY)
    assert got.e_memory == pytest.approx(0.82, rel=0.01) and got.launch_us == pytest.approx(7.0, rel=0.05)
    truth_gemm = KernelParams(0.75, 0.82, 12.0, kf.GEMM_TILES, 20.0, 50.0)
    recs = _synthetic(truth_gemm, "gemm", ["a100-80gb", "h100-80gb"], 800, 2)
    got = kf.fit_entry(kf.Group.of(recs), replace(kf.FALLBACK_GEMM, e_memory=0.82))
    assert got.e_compute == pytest.approx(0.75, rel=0.02)
    assert got.launch_us == pytest.approx(12.0, rel=0.1)
    assert got.k0 == pytest.approx(50.0, rel=0.15) and got.tile_i0 == pytest.approx(20.0, rel=0.15)


def test_jsonl_reader_and_fit_command(tmp_path):
    """The kernel-sweep data shape: records -> a fitted table the model loads, and its evaluation."""
    truth = KernelParams(1.0, 0.8, 6.0)
    recs = _synthetic(truth, "elementwise", ["h100-80gb"], 60, 3)
    path = tmp_path / "sweep.jsonl"
    lines = [
        json.dumps({"kind": r.kind, "op": "add", "dtype": "float16", "flops": r.flops, "bytes_read": r.bytes_read,
                    "bytes_written": r.bytes_written, "params": r.params, "latency_ms": r.latency_s * 1e3,
                    "device": "H100", "extra": 1})
        for r in recs
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n\n")
    read = kf.read_jsonl(path)
    assert len(read) == 60 and read[0].device == "h100-80gb" and read[0].dtype == "float16"
    assert read[0].latency_s == pytest.approx(recs[0].latency_s) and read[0].source == "sweep.jsonl"
    out = tmp_path / "params.json"
    assert kf.main(["fit", "--data", str(path), "--out", str(out)]) == 0
    fitted = load_params(out)
    p = fitted.lookup("h200-141gb", "elementwise", "float16")  # the hopper family's fit
    assert p.source.startswith("fit: sweep.jsonl float16 add") and p.e_memory == pytest.approx(0.8, rel=0.01)
    other = fitted.lookup("h100-80gb", "elementwise", "float32")  # no float32 data: the "*" entry, from this fit
    assert other.source.startswith("assumed: every dtype as this fit") and other.e_memory == p.e_memory
    rows = kf.parse_eval_markdown((tmp_path / "KERNEL_EVAL.md").read_text())
    assert {r["protocol"] for r in rows} == {"in-sample", "largest 20%"}  # one device, no split: no transfer
    kt = kernel_latency([K("elementwise", 10, 10**6, 10**6, "float16")], get_device("h100-80gb"), params=fitted)
    assert kt.seconds[0] == pytest.approx(2e6 / (3.35e12 * p.e_memory) + p.launch_us * 1e-6)


GOOD = {"kind": "gemm", "op": "x", "dtype": "float32", "flops": 1, "bytes_read": 1, "bytes_written": 1}
GOOD |= {"params": {}, "latency_ms": 1.0, "device": "h100"}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"kind": "gemm"}', "missing field"),
        (json.dumps(GOOD | {"kind": "gem"}), "unknown kind"),
        (json.dumps(GOOD | {"device": "tpu"}), "unknown device"),
        (json.dumps(GOOD | {"latency_ms": 0}), "latency_ms > 0"),
        (json.dumps(GOOD | {"flops": "many"}), "must be numbers"),
        (json.dumps(GOOD | {"params": [1]}), "params must be an object"),
        ("[1, 2]", "JSON object"),
        ("{not json", "not JSON"),
    ],
)
def test_jsonl_reader_rejects_bad_records(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(KernelParamsError, match=message) as err:
        kf.read_jsonl(path)
    assert "bad.jsonl:1" in str(err.value)


def test_bad_tables_are_refused(tmp_path):
    with pytest.raises(KernelParamsError, match="schema"):
        ParamTable.from_json({"schema": "something/1"})
    doc = json.loads(PARAMS_PATH.read_text())
    doc["entries"][0]["e_compute"] = 1.5
    with pytest.raises(KernelParamsError, match=r"\(0, 1\]"):
        ParamTable.from_json(doc)
    bad = tmp_path / "t.json"
    bad.write_text("{")
    with pytest.raises(KernelParamsError, match="cannot read"):
        load_params(bad)
    with pytest.raises(KernelParamsError, match="no kernel parameters"):
        load_params().lookup("h100-80gb", "warp-drive", "float32")


def test_neusight_reader_follows_the_operators():
    recs = kf.read_neusight(NEUSIGHT)
    assert len(recs) == 14306  # 7,245 bmm + 3,120 linear + 3,020 elementwise + 460 softmax + 461 layer norm
    bmm = next(r for r in recs if r.op == "matmul")
    # first test-bmm.csv row: A100-PCIE-40GB, B=1280, M=2048, N=2048, K=256: bmm((B, M, N), (B, N, K))
    assert (bmm.device, bmm.params) == ("a100-pcie-40gb", {"b": 1280, "m": 2048, "n": 256, "k": 2048})
    assert bmm.flops == 2 * 1280 * 2048 * 2048 * 256  # 2 x B x M x K x N
    assert bmm.latency_s == pytest.approx(156.88737996419272e-3)
    ln = next(r for r in recs if r.op == "layer_norm")  # 4100 x 556: read x + weight + bias, write y + mean + rstd
    assert (ln.bytes_read, ln.bytes_written) == (4 * 4100 * 556 + 8 * 556, 4 * 4100 * 556 + 8 * 4100)


@pytest.mark.slow
def test_committed_table_and_evaluation_reproduce_from_the_data():
    """Refit from data/neusight-kernels, data/vidur-ops and the H100 kernel sweep: the same table (to its printed
    precision) and KERNEL_EVAL.md numbers, the half-precision and sweep summaries included (about 45 s of CPU)."""
    sweep_dir = ROOT / "data" / "h100-80gb" / "kernels"
    records = kf.read_neusight(NEUSIGHT) + kf.read_vidur(ROOT / "data" / "vidur-ops") + kf.read_sweep(sweep_dir)
    refit, rows, half, sweep = kf.build(records, ["data/neusight-kernels", "data/vidur-ops", "data/h100-80gb/kernels"])
    committed = load_params()
    assert set(refit.entries) == set(committed.entries)
    fitted = kf.fitted_records(records)
    for key, p in committed.entries.items():
        q = refit.entries[key]
        fields = ("e_compute", "e_memory", "launch_us", "tile_i0", "k0", "exec_us", "row_ns", "row_ns_large")
        fields += ("row_cache_mib",)
        moved = [f for f in fields if getattr(q, f) != pytest.approx(getattr(p, f), rel=1e-3, abs=1e-3)]
        if moved:
            # a parameter the group's records do not identify (float32 SDPA on the H100: every record
            # compute-bound, so e_memory is wherever the winning start of `fit_entry` left it, and which of two
            # starts of equal cost wins depends on the machine's last bits): the two tables must still give every
            # record of the group the same time
            group = kf.Group.of([r for r in fitted if (kf.family_of(r.device), kf.lookup_kind(r), r.dtype) == key])
            assert len(group.latency) >= kf.MIN_FIT, key
            assert group.predict(q) == pytest.approx(group.predict(p), rel=1e-3), (key, moved)
        assert (q.source, q.measured_on) == (p.source, p.measured_on), key
    reported = kf.parse_eval_markdown((ROOT / "predictor" / "KERNEL_EVAL.md").read_text())
    assert len(reported) == len(rows) > 30
    mine = {(r.protocol, r.kind, r.dtype, r.fit_on, r.eval_on): r for r in rows}
    for rep in reported:
        row = mine[(rep["protocol"], rep["kind"], rep["dtype"], rep["fit_on"], rep["eval_on"])]
        assert (row.n_fit, row.n_eval) == (rep["n_fit"], rep["n_eval"])
        numbers = [*row.model, *row.roofline, *row.roofline_launch]
        assert numbers == pytest.approx(rep["numbers"], abs=0.051), rep  # printed to 0.1
    summary = kf.parse_half_markdown((ROOT / "predictor" / "KERNEL_EVAL.md").read_text())
    assert len(summary) == len(half) >= 12
    for rep, h in zip(summary, half, strict=True):
        assert rep["key"] == (h.device, h.kind, h.dtype, h.subset) and rep["n"] == h.n
        numbers = [h.before, h.in_sample, h.held_out, h.held_out_median, h.held_out_max, h.roofline]
        assert numbers == pytest.approx(rep["numbers"], abs=0.051), rep
    reported_sweep = kf.parse_sweep_markdown((ROOT / "predictor" / "KERNEL_EVAL.md").read_text())
    assert len(reported_sweep) == len(sweep) >= 40
    for rep, w in zip(reported_sweep, sweep, strict=True):
        assert rep["key"] == (w.device, w.kind, w.dtype, w.layout, w.subset) and rep["n"] == w.n
        numbers = [*w.before, *w.after, *w.random, *w.before_random, *w.largest, *w.roofline]
        assert numbers == pytest.approx(rep["numbers"], abs=0.051, nan_ok=True), rep
    joint = kf.joint_gemm_summary(records)
    reported_joint = kf.parse_joint_markdown((ROOT / "predictor" / "KERNEL_EVAL.md").read_text())
    assert len(reported_joint) == len(joint) == 9
    for rep, j in zip(reported_joint, joint, strict=True):
        assert rep["key"] == (j.protocol, j.fit_on, j.eval_on) and rep["n"] == j.n
        assert [*j.before, *j.joint, *j.no_bias, *j.roofline] == pytest.approx(rep["numbers"], abs=0.051), rep
    # the held-out errors are what the fitted entries' sources quote
    held = next(
        r
        for r in rows
        if r.protocol == "largest 20%" and r.kind == "gemm" and r.dtype == "float32" and r.eval_on == "h100-80gb"
    )
    assert f"h100-80gb {held.model[0]:.1f}%" in committed.entries[("hopper", "gemm", "float32")].source


def test_5000_kernels_are_costed():
    """5,000 random kernels cost in one vectorised call (its speed: bench/bench_kernel_model.py, not a test)."""
    kernels = _random_kernels(np.random.default_rng(5), 5000)
    arrays = kernel_arrays(kernels)
    kt = kernel_latency(kernels, H100)
    assert len(arrays) == 5000 and len(kt.seconds) == 5000 and math.isfinite(kt.total_ms)


# ---- accuracy on held-out kernels --------------------------------------------------------------------------------
# Bounds on the model's MAPE (%) on kernels its fit never saw, each the KERNEL_EVAL.md figure (in the comment) + 10%
# of it + 0.5 points: a refit that reproduces today's accuracy passes, one that loses a tenth of it fails, whatever
# KERNEL_EVAL.md says then (test_committed_table_and_evaluation_reproduce_from_the_data only checks that the
# file and the fit agree with each other).
SPLIT_BOUNDS = {  # (kind, device): fit on NeuSight's train-*.csv, evaluated on its test-*.csv
    ("elementwise", "a100-pcie-40gb"): 1.6,  # 1.0
    ("elementwise", "a100-pcie-80gb"): 3.3,  # 2.5
    ("norm", "a100-pcie-40gb"): 20.1,  # 17.8
    ("norm", "a100-pcie-80gb"): 17.2,  # 15.2
    ("softmax", "a100-pcie-40gb"): 27.9,  # 24.9
    ("softmax", "a100-pcie-80gb"): 23.4,  # 20.8
}
LARGEST_BOUNDS = {  # gemm (bmm + linear, float32): fit on one device's smallest 80% of FLOPs, evaluated on the rest
    "a100-pcie-40gb": 12.8,  # 11.2
    "a100-pcie-80gb": 10.2,  # 8.8
    "h100-80gb": 4.9,  # 4.0
}


def _held_out_ape(train: list, test: list, device: str) -> tuple[np.ndarray, np.ndarray]:
    """(model APE, roofline + 5 us APE) in % of `test` on `device`: fit with kf.fit_groups on `train`, predicted
    by the product's kernel_latency (each kernel timed on its own: max(compute, memory) + launch)."""
    table = ParamTable(kf.fit_groups(train), kf.FAMILIES)
    measured = np.array([r.latency_s for r in test])
    kt = kernel_latency(test, get_device(device), params=table)
    baseline = np.maximum(kt.bound_compute_s, kt.bound_memory_s) + 5e-6
    return np.abs(kt.seconds / measured - 1) * 100, np.abs(baseline / measured - 1) * 100


@pytest.fixture(scope="module")
def neusight():
    return kf.read_neusight(NEUSIGHT)


@pytest.mark.parametrize(("kind", "device"), sorted(SPLIT_BOUNDS))
def test_held_out_accuracy_on_neusight_test_files(neusight, kind, device):
    train = [r for r in neusight if r.split == "train" and kf.lookup_kind(r) == kind]
    test = [r for r in neusight if r.split == "test" and kf.lookup_kind(r) == kind and r.device == device]
    assert len(train) >= 300 and len(test) >= 79 and {r.device for r in train} == {"a100-pcie-40gb"}
    model, baseline = _held_out_ape(train, test, device)
    assert model.mean() <= SPLIT_BOUNDS[(kind, device)], model.mean()
    assert model.mean() < baseline.mean()  # better than today's roofline + 5 us on what the fit never saw


@pytest.mark.parametrize("device", sorted(LARGEST_BOUNDS))
def test_held_out_accuracy_on_the_largest_gemms(neusight, device):
    gemms = [r for r in neusight if r.device == device and kf.lookup_kind(r) == "gemm"]
    order = np.argsort([r.flops for r in gemms], kind="stable")
    cut = int(round(0.8 * len(order)))
    small, large = [gemms[i] for i in order[:cut]], [gemms[i] for i in order[cut:]]
    assert min(r.flops for r in large) >= max(r.flops for r in small)
    # the gemm fit keeps the memory efficiency of the same device's elementwise fit (none measured on the H100)
    elementwise = [r for r in neusight if r.device == device and kf.lookup_kind(r) == "elementwise"]
    model, baseline = _held_out_ape(small + elementwise, large, device)
    assert model.mean() <= LARGEST_BOUNDS[device], model.mean()
    assert model.mean() < baseline.mean()


def test_a_row_launched_count_times_costs_count_launches():
    """`count` (passes.analysis.Launches): a row launched c times costs exactly what c copies of it cost, in every
    term (estimate, launch floor, roofline), so a recurrence of 10**6 steps is costed from one row per kernel."""
    from passes.analysis import Launches
    from passes.kernels import Kernel

    gemm = Kernel(0, "gemm", "relax.matmul", (0,), 2 * 8 * 64 * 256, 4 * (8 * 64 + 64 * 256), 4 * 8 * 256, "float32",
                  {"b": 1, "m": 8, "n": 256, "k": 64})  # fmt: skip
    gates = Kernel(1, "elementwise", "relax.sigmoid", (1,), 8 * 256, 4 * 8 * 256, 4 * 8 * 256, "float32",
                   {"numel": 8 * 256})  # fmt: skip
    arrays = kernel_arrays([Launches(gemm, 1000), gates, Launches(gates, 2)])
    assert list(arrays.count) == [1000, 1, 2] and len(arrays) == 3
    runs = kernel_latency([gemm] * 1000 + [gates] * 3, H100)
    whole = kernel_latency_arrays(arrays, H100)
    for term in ("eager_ms", "floor_ms"):
        assert getattr(whole, term) == pytest.approx(getattr(runs, term), rel=1e-12)
    assert float(whole.bound_s.sum()) == pytest.approx(float(runs.bound_s.sum()), rel=1e-12)
    assert kernel_arrays([gemm, gates]).count is None  # one launch each: no column


def test_only_launches_rows_carry_a_launch_count():
    """A kernel-like object with its own `count` (a serving engine's layers per step) is one launch: only
    `passes.kernels.Launches` multiplies, so no other type can be counted twice by accident."""
    from dataclasses import dataclass

    from passes.kernels import Kernel, Launches

    @dataclass(frozen=True)
    class PerLayer:  # the shape of the serving engine's EngineKernel: kernel attributes plus layers in `count`
        kind: str
        flops: float
        bytes_read: float
        bytes_written: float
        dtype: str
        params: dict
        count: int

    gates = Kernel(1, "elementwise", "relax.sigmoid", (1,), 8 * 256, 4 * 8 * 256, 4 * 8 * 256, "float32",
                   {"numel": 8 * 256})  # fmt: skip
    layer = PerLayer("elementwise", 8 * 256, 4 * 8 * 256, 4 * 8 * 256, "float32", {"numel": 8 * 256}, 32)
    assert kernel_arrays([layer, gates]).count is None
    assert list(kernel_arrays([layer, Launches(gates, 3)]).count) == [1, 3]


def test_bias_epilogue_and_a_joint_group_by_hand():
    """e_bias scales a fused-bias GEMM's compute efficiency; a group joining a host-timed call and a kernel
    duration charges the launch to the call only (kernel_fit.Group.predict)."""
    p = KernelParams(0.5, 0.9, 10.0, (), 0.0, 0.0, "test", exec_us=3.0, e_bias=0.8)
    dims = {"b": 1, "m": 1024, "n": 1024, "k": 1024}
    flops, nbytes = 2 * 1024**3, 3 * 4 * 1024**2  # 2,147,483,648 FLOPs; 12,582,912 B (a, b, out in float32)
    host = kf.MeasuredKernel("gemm", "bmm", "float32", flops, nbytes, 0, dims, 1.0, "h100-80gb", "NeuSight")
    duration = kf.MeasuredKernel("gemm", "linear", "float32", flops, nbytes, 0, dims | {"bias": True}, 1.0,
                                 "h100-80gb", "sweep:h100-80gb", includes_launch=False)  # fmt: skip
    group = kf.Group.of([host, duration])
    assert group.mixed and group.timed_with_launch  # a gemm group may join both (FREE_JOINT)
    # no tiles, k0 = 0: e_c = 0.5, with bias 0.5 x 0.8 = 0.4. 2,147,483,648 / (67e12 x 0.5) = 64.104 us;
    # / (67e12 x 0.4) = 80.130 us. Memory 12,582,912 / (3.35e12 x 0.9) = 4.173 us (smaller).
    # host-timed: 64.104 + 3 exec + 10 launch = 77.104 us; duration (bias): 80.130 + 3 = 83.130 us
    assert group.predict(p) * 1e6 == pytest.approx([77.104, 83.130], abs=1e-3)
    kt = kernel_latency([host, duration], H100, params=table(gemm=p))  # the product: launch on both, no count
    assert kt.compute_s * 1e6 == pytest.approx([67.104, 83.130], abs=1e-3)  # execution + exec_us
    with pytest.raises(KernelParamsError):
        KernelParams(0.5, 0.9, 10.0, e_bias=1.5)


def test_joint_fit_separates_launch_exec_and_bias():
    """A mixed group (host-timed calls + kernel durations, half the GEMMs with a fused bias) made by a known entry:
    the joint fit finds its launch, exec and e_bias apart (what one kind of data alone cannot tell)."""
    truth = KernelParams(0.75, 0.82, 12.0, kf.GEMM_TILES, 20.0, 50.0, exec_us=4.0, e_bias=0.85)
    recs = _synthetic(KernelParams(1.0, 1.0, 0.0), "gemm", ["h100-80gb"], 600, 7)
    recs = [replace(r, includes_launch=i % 2 == 0, params=r.params | {"bias": i % 3 == 0}) for i, r in enumerate(recs)]
    group = kf.Group.of(recs)
    lat = group.predict(truth) * np.random.default_rng(8).uniform(0.995, 1.005, len(recs))
    group = kf.Group.of([replace(r, latency_s=float(t)) for r, t in zip(recs, lat, strict=True)])
    got = kf.fit_with(group, KernelParams(1.0, 0.82, 5.0))
    assert got.e_compute == pytest.approx(0.75, rel=0.03) and got.e_bias == pytest.approx(0.85, rel=0.02)
    assert got.launch_us == pytest.approx(12.0, rel=0.1) and got.exec_us == pytest.approx(4.0, rel=0.15)


def test_conv_class_factors_by_hand():
    """e_transposed / e_grouped divide both terms of a transposed / grouped convolution; a dense convolution and a
    gemm keep theirs; the roofline bound does not move."""
    p = KernelParams(0.5, 0.8, 10.0, (), 0.0, 0.0, "test", e_transposed=0.5, e_grouped=0.25)
    conv = {"n": 1, "c_in": 64, "c_out": 64, "out_spatial": [32, 32], "kernel": [3, 3], "groups": 1}
    flops, nbytes = 989_400_000, 3_350_000  # 1 us at the H100's fp16 peak (989.4e12), 1 us at 3.35e12 B/s
    kernels = [
        K("conv", flops, nbytes, 0, "float16", conv),
        K("conv", flops, nbytes, 0, "float16", conv | {"transposed": True}),
        K("conv", flops, nbytes, 0, "float16", conv | {"groups": 64}),  # depthwise
        K("conv", flops, nbytes, 0, "float16", conv | {"groups": 2, "transposed": True}),
        K("gemm", flops, nbytes, 0, "float16", {"b": 1, "m": 64, "n": 64, "k": 64, "transposed": True}),
    ]
    arrays = kernel_arrays(kernels)
    assert list(arrays.transposed) == [False, True, False, True, False]
    assert list(arrays.grouped) == [False, False, True, True, False]
    kt = kernel_latency(kernels, H100, params=table(conv=p, gemm=replace(p, e_transposed=1.0, e_grouped=1.0)))
    # no tiles, k0 = 0: e_c = 0.5 x factor, e_m = 0.8 x factor. compute 1 us / (0.5 f), memory 1 us / (0.8 f):
    # dense f = 1: 2.0 / 1.25 us; transposed f = 0.5: 4.0 / 2.5 us; depthwise f = 0.25: 8.0 / 5.0 us;
    # grouped transposed f = 0.5 x 0.25 = 0.125: 16.0 / 10.0 us; the gemm (no class): 2.0 / 1.25 us
    assert kt.compute_s * 1e6 == pytest.approx([2.0, 4.0, 8.0, 16.0, 2.0], rel=1e-9)
    assert kt.memory_s * 1e6 == pytest.approx([1.25, 2.5, 5.0, 10.0, 1.25], rel=1e-9)
    assert kt.bound_s * 1e6 == pytest.approx([1.0] * 5, rel=1e-9)  # the roofline: efficiency 1 whatever the class
    doc = p.to_json()
    assert (doc["e_transposed"], doc["e_grouped"]) == (0.5, 0.25)
    assert KernelParams.from_json(doc) == replace(p, measured_on=())
    assert "e_transposed" not in GEMM.to_json()  # an entry without classes keeps its old form
    with pytest.raises(KernelParamsError, match="e_grouped"):
        KernelParams(0.5, 0.9, 10.0, e_grouped=0.0)


def test_decode_attention_is_costed_without_the_query_tile():
    """A fused decode step (s = 1) of Llama-3-8B shape (32 query heads, 8 KV heads, d 128, 8,192 cached tokens,
    batch 1, float16) against the same work with 2 query rows: the decode row pays its bytes at e_m (memory-bound),
    not 128x its FLOPs through a 128-row tile."""
    p = KernelParams(0.5, 0.9, 10.0, ((128, 1),), 0.0, 0.0, "test", exec_us=5.0)
    dec = {"b": 1, "h": 32, "h_kv": 8, "s": 1, "t": 8192, "d": 128, "dv": 128, "backend": "flash"}
    flops = 4 * 32 * 8192 * 128  # QK^T and PV: 2 x 2 x h x s x t x d = 134,217,728
    nbytes = 2 * (2 * 8 * 8192 * 128)  # K and V of 8 KV heads in float16: 33,554,432 (q and out: negligible)
    kt = kernel_latency([K("attention", flops, nbytes, 0, "float16", dec)], H100, params=table(attention=p))
    # compute 1.342177e8 / (989.4e12 x 0.5) = 0.271311 us; memory 3.355443e7 / (3.35e12 x 0.9) = 11.129164 us;
    # each term with the 5 us exec_us
    assert kt.compute_s[0] * 1e6 == pytest.approx(0.271311 + 5.0, rel=1e-6)
    assert kt.memory_s[0] * 1e6 == pytest.approx(11.129164 + 5.0, rel=1e-6)
    assert kt.seconds[0] * 1e6 == pytest.approx(11.129164 + 5.0 + 10.0, rel=1e-6)  # + the 10 us launch
    # s = 2, twice the FLOPs: 32 work units of one 128-row tile on 132 SMs, 2 of 128 rows used:
    # q = 32 x 2 / (132 x 128) = 3.787879e-3; compute 2.684355e8 / (989.4e12 x 0.5 x q) = 143.2524 us
    two = kernel_latency([K("attention", 2 * flops, nbytes, 0, "float16", dec | {"s": 2})], H100,
                         params=table(attention=p))  # fmt: skip
    assert two.compute_s[0] * 1e6 == pytest.approx(143.2524 + 5.0, rel=1e-5)


def test_grouped_transposed_factor_replaces_the_product():
    """e_grouped_transposed, where an entry has it, is the class factor of a grouped transposed convolution alone
    (not e_transposed x e_grouped); plain transposed and plain grouped rows keep theirs; it round-trips."""
    p = KernelParams(0.5, 0.8, 10.0, (), 0.0, 0.0, "test", e_transposed=0.5, e_grouped=0.25, e_grouped_transposed=0.4)
    conv = {"n": 1, "c_in": 64, "c_out": 64, "out_spatial": [32, 32], "kernel": [3, 3], "groups": 1}
    flops, nbytes = 989_400_000, 3_350_000  # 1 us at the H100's fp16 peak, 1 us at its bandwidth
    kernels = [
        K("conv", flops, nbytes, 0, "float16", conv | {"transposed": True}),
        K("conv", flops, nbytes, 0, "float16", conv | {"groups": 64}),
        K("conv", flops, nbytes, 0, "float16", conv | {"groups": 64, "transposed": True}),
    ]
    assert list(kernel_arrays(kernels).grouped_transposed) == [False, False, True]
    assert kernel_arrays(kernels[:2]).grouped_transposed is None
    kt = kernel_latency(kernels, H100, params=table(conv=p))
    # compute 1 us / (0.5 f): f = 0.5, 0.25, 0.4 -> 4.0, 8.0, 5.0 us; memory 1 us / (0.8 f) -> 2.5, 5.0, 3.125 us
    assert kt.compute_s * 1e6 == pytest.approx([4.0, 8.0, 5.0], rel=1e-9)
    assert kt.memory_s * 1e6 == pytest.approx([2.5, 5.0, 3.125], rel=1e-9)
    assert KernelParams.from_json(p.to_json()) == replace(p, measured_on=())
    with pytest.raises(KernelParamsError, match="e_grouped_transposed"):
        KernelParams(0.5, 0.9, 10.0, e_grouped_transposed=1.5)


def test_conv_fit_recovers_class_factors():
    """A convolution group of kernel durations (dense, transposed, depthwise rows) made by a known entry: the fit
    frees a class factor only where the group holds at least MIN_CLASS rows of the class, and recovers it."""
    truth = KernelParams(0.6, 0.3, 16.0, kf.GEMM_TILES, 50.0, 300.0, exec_us=5.0, e_transposed=0.6, e_grouped=0.3)
    rng = np.random.default_rng(11)
    recs = []
    for i in range(300):
        n, c, o = int(rng.integers(1, 129)), int(rng.choice([32, 64, 128, 256])), int(rng.choice([32, 64, 256]))
        hw = int(rng.integers(4, 57))
        groups = c if i % 3 == 2 else 1
        o = c if groups > 1 else o
        params = {"n": n, "c_in": c, "c_out": o, "out_spatial": [hw, hw], "kernel": [3, 3], "groups": groups}
        params |= {"transposed": True} if i % 3 == 1 else {}
        flops = 2 * n * hw * hw * o * c // groups * 9
        nbytes = 2 * n * hw * hw * (c + o) + 2 * o * c // groups * 9
        recs.append(kf.MeasuredKernel("conv", "conv2d", "float16", flops, nbytes, 0, params, 1.0, "h100-80gb",
                                      "sweep:h100-80gb", includes_launch=False))  # fmt: skip
    group = kf.Group.of(recs)
    lat = group.predict(truth) * rng.uniform(0.995, 1.005, len(recs))
    group = kf.Group.of([replace(r, latency_s=float(t)) for r, t in zip(recs, lat, strict=True)])
    assert kf.conv_free(group) == kf.FREE_DURATIONS["conv"] + ("e_transposed", "e_grouped")
    assert kf.conv_free(group.subset(np.arange(3))) == kf.FREE_DURATIONS["conv"]  # 1 row of each class: no factor
    got = kf.fit_with(group, None, 16.0)
    assert got.e_transposed == pytest.approx(0.6, rel=0.05) and got.e_grouped == pytest.approx(0.3, rel=0.05)
    assert got.launch_us == 16.0  # kernel durations: the launch is given, not fitted


def test_strided_copy_by_hand():
    """e_strided scales the memory efficiency of a copy that gathers a strided view (params "strided": True), and
    only of such a copy; an entry without it (e_strided 1) costs both copies alike."""
    p = KernelParams(1.0, 0.8, 16.0, source="test", exec_us=2.0, e_strided=0.5)
    n = 2**24  # float16 elements: 33,554,432 B read and 33,554,432 B written = 67,108,864 B
    plain = K("copy", 0, 2 * n, 2 * n, "float16", {"numel": n})
    strided = K("copy", 0, 2 * n, 2 * n, "float16", {"numel": n, "strided": True})
    kt = kernel_latency([plain, strided], H100, params=table(copy=p))
    # 67,108,864 / (3.35e12 x 0.8) = 25.041 us + 2 exec = 27.041 us; / (3.35e12 x 0.8 x 0.5) = 50.081 + 2 = 52.081 us
    assert kt.memory_s * 1e6 == pytest.approx([27.041, 52.081], abs=1e-3)
    assert kt.eager_s * 1e6 == pytest.approx([27.041, 52.081], abs=1e-3)  # both above the 16 us launch floor
    flat = kernel_latency([plain, strided], H100, params=table(copy=replace(p, e_strided=1.0)))
    assert flat.memory_s * 1e6 == pytest.approx([27.041, 27.041], abs=1e-3)
    # the flag is a copy's: an elementwise kernel with it is costed as any other
    odd = K("elementwise", n, 2 * n, 2 * n, "float16", {"numel": n, "strided": True})
    assert kernel_latency([odd], H100, params=table(elementwise=p)).memory_s[0] * 1e6 == pytest.approx(27.041, abs=1e-3)
    assert KernelParams.from_json(p.to_json()) == p and "e_strided" not in ELEM.to_json()
    with pytest.raises(KernelParamsError):
        KernelParams(1.0, 0.8, 16.0, e_strided=0.0)


def test_copy_fit_separates_strided_copies():
    """A group of graph-timed copies, a third of them strided, made by a known entry (e_memory 0.85, e_strided
    0.5, exec 1.9 us, large copies of 1-300 M elements): the duration fit (`kernel_fit.fit_with`) fits e_memory and
    exec on all of them (the pooled entry), then e_strided on the strided ones alone, so that the strided copies
    move at 0.85 x 0.5 = 0.425 of the bandwidth; the launch is the one given."""
    truth = KernelParams(1.0, 0.85, 16.6, exec_us=1.9, e_strided=0.5)
    rng = np.random.default_rng(3)
    recs = []
    for i, numel in enumerate(np.exp(rng.uniform(np.log(1e6), np.log(3e8), 90)).astype(int)):
        params = {"numel": int(numel)} | ({"strided": True} if i % 3 == 0 else {})
        recs.append(kf.MeasuredKernel("copy", "permute" if i % 3 == 0 else "copy", "float16", 0, 2 * int(numel),
                                      2 * int(numel), params, 1.0, "h100-80gb", "sweep:h100-80gb",
                                      includes_launch=False))  # fmt: skip
    group = kf.Group.of(recs)
    lat = group.predict(truth) * rng.uniform(0.99, 1.01, len(recs))
    group = kf.Group.of([replace(r, latency_s=float(t)) for r, t in zip(recs, lat, strict=True)])
    got = kf.fit_with(group, None, 16.6)
    assert got.e_memory * got.e_strided == pytest.approx(0.425, rel=0.03) and got.launch_us == 16.6
    assert got.e_strided < 0.8 and 0.425 < got.e_memory < 0.85  # pooled: between the two kinds of copy
    pooled = kf.fit_with(kf.Group.of([replace(r, params={"numel": r.params["numel"]}) for r in group.records]), None)
    assert got.e_memory == pytest.approx(pooled.e_memory) and got.exec_us == pytest.approx(pooled.exec_us)


def test_derived_bfloat16_copy_keeps_the_float16_copy_fit():
    """A bfloat16 copy moves the bytes a float16 one does (2 bytes an element): the derived table gives it the
    float16 copy fit, e_strided included, not the family's '*' copy default (a measured device copy, no strided
    factor). Before the fix a bfloat16 permute of 2**24 elements cost 67,108,864 B / (3.35e12 x 0.8957) = 22.4 us
    against the float16 fit's 67,108,864 / (3.35e12 x 0.8 x 0.5) = 50.081 us."""
    fit16 = KernelParams(1.0, 0.8, 16.0, source="fit: test", exec_us=0.0, e_strided=0.5)
    derived = kf.derive_entries({("hopper", "copy", "float16"): fit16})
    bf16 = derived[("hopper", "copy", "bfloat16")]
    assert (bf16.e_memory, bf16.e_strided, bf16.launch_us) == (0.8, 0.5, 16.0)
    assert bf16.source.startswith("assumed: bfloat16 as float16") and bf16.source.endswith("fit: test")
    assert derived[("hopper", "copy", "*")].e_strided == 1.0  # other dtypes keep the default
    n = 2**24
    permute = K("copy", 0, 2 * n, 2 * n, "bfloat16", {"numel": n, "strided": True})
    t = kernel_latency([permute], H100, params=ParamTable(derived, {"hopper": ("h100-80gb",)}))
    assert t.memory_s[0] * 1e6 == pytest.approx(50.081, abs=1e-3)  # 67,108,864 / (3.35e12 x 0.8 x 0.5)
    # a fit of bfloat16 copies of its own wins over the derived entry
    own = replace(fit16, e_memory=0.7, source="fit: bf16")
    assert (
        kf.derive_entries({("hopper", "copy", "float16"): fit16, ("hopper", "copy", "bfloat16"): own})[
            ("hopper", "copy", "bfloat16")
        ]
        == own
    )


def test_a_family_without_convolution_data_takes_the_other_familys_convolution_fit():
    """No ampere convolution measurement: the derived table gives the A100 the hopper convolution fits (float16,
    float32; bfloat16 as float16), efficiencies read against the A100's own peak and bandwidth, not the ampere GEMM
    entry (implicit GEMM at GEMM efficiency). A fit of its own would win. By hand on a100-80gb (fp16 tensor peak
    312e12 FLOP/s, 2.039e12 B/s): a dense 3x3 conv, n 8, 64 -> 64 channels, 56 x 56 output, float16:
    FLOPs 2 x 8 x 56 x 56 x 64 x 64 x 9 = 1,849,688,064; bytes (input 8x64x58x58 + weight 64x64x9 + output
    8x64x56x56) x 2 = (1,722,368 + 36,864 + 1,605,632) x 2 = 6,729,728.
    compute 1,849,688,064 / (312e12 x 0.6) = 9.8808 us; memory 6,729,728 / (2.039e12 x 0.25) = 13.2020 us;
    + exec 5 us = 18.2020 us (the memory term, larger)."""
    c16 = KernelParams(0.6, 0.25, 16.0, source="fit: c16", exec_us=5.0, e_grouped=0.5)
    c32 = KernelParams(0.55, 0.2, 16.0, source="fit: c32", exec_us=6.0)
    derived = kf.derive_entries({("hopper", "conv", "float16"): c16, ("hopper", "conv", "float32"): c32})
    for dtype, fit in (("float16", c16), ("float32", c32), ("bfloat16", c16)):
        got = derived[("ampere", "conv", dtype)]
        assert replace(got, source="") == replace(fit, source="")
        assert "transfer: the hopper convolution fit" in got.source and got.source.endswith(fit.source)
    assert derived[("ampere", "conv", "bfloat16")].source.startswith("assumed: bfloat16 as the float16 convolution")
    assert derived[("hopper", "conv", "float16")] == c16  # the fit itself stays
    conv = K("conv", 1_849_688_064, 2 * (1_722_368 + 36_864), 2 * 1_605_632, "float16",
             {"n": 8, "c_in": 64, "c_out": 64, "kernel": [3, 3], "out_spatial": [56, 56], "groups": 1})  # fmt: skip
    table = ParamTable(derived, {"ampere": ("a100-80gb",), "hopper": ("h100-80gb",)})
    t = kernel_latency([conv], get_device("a100-80gb"), params=table)
    assert t.compute_s[0] * 1e6 == pytest.approx(9.8808 + 5.0, abs=1e-3)
    assert t.memory_s[0] * 1e6 == pytest.approx(13.2020 + 5.0, abs=1e-3)
    own = replace(c16, e_compute=0.7, source="fit: ampere c16")  # an ampere fit of its own wins
    assert (
        kf.derive_entries({("hopper", "conv", "float16"): c16, ("ampere", "conv", "float16"): own})[
            ("ampere", "conv", "float16")
        ]
        == own
    )


def test_committed_a100_convolutions_are_the_hopper_convolution_fits():
    """The committed table (predictor/kernel_params.json, read here): every A100 convolution entry carries the
    H100 sweep's convolution fit of its dtype (bfloat16: the float16 one), marked as a transfer: float16 and
    float32 rest on other GPUs' measurements, bfloat16 on an assumption (as every bfloat16 copy of a float16 fit)."""
    params = load_params()
    for dtype, src in (("float16", "float16"), ("float32", "float32"), ("bfloat16", "float16")):
        got, fit = params.lookup("a100-80gb", "conv", dtype), params.lookup("h100-80gb", "conv", src)
        assert fit.source.startswith("fit: this project's kernel sweep")
        assert replace(got, source="") == replace(fit, source="")
        assert "transfer: the hopper convolution fit" in got.source
        assert got.basis("a100-80gb") == ("assumed" if dtype == "bfloat16" else "fitted_on_other_gpus")


def test_bfloat16_gemms_measured_on_the_h100_are_fitted_there():
    """The H100 sweep's bfloat16 GEMMs are pooled with float16 (`sweep_entry`) and marked so (`measured_dtype`); the
    hopper bfloat16 GEMM entry is that pooled fit, fitted on the H100 (`pooled_bfloat16_gemm`), while the A100's,
    with no bfloat16 measurement, stays an assumption."""
    import gzip

    path = ROOT / "data" / "h100-80gb" / "kernels"
    raw = [json.loads(line) for f in sorted(path.glob("*.jsonl.gz")) for line in gzip.open(f, "rt")]
    # the oracle: the raw records themselves (ok, graph-timed bfloat16 matmuls)
    want = sum(
        1
        for r in raw
        if r.get("status") == "ok" and r.get("timing") == "cuda-graph" and r["kind"] == "gemm"
        and r["dtype"] == "bfloat16"
    )  # fmt: skip
    records = kf.read_sweep(path)
    marked = [r for r in records if r.measured_dtype]
    assert len(marked) == want == 808
    assert {(r.kind, r.dtype, r.measured_dtype) for r in marked} == {("gemm", "float16", "bfloat16")}
    table = load_params()
    bf, half = table.entries[("hopper", "gemm", "bfloat16")], table.entries[("hopper", "gemm", "float16")]
    assert replace(bf, source="", measured_on=()) == replace(half, source="", measured_on=())
    assert bf.measured_on == ("h100-80gb",) and bf.source.startswith("fit: bfloat16 GEMMs pooled with float16")
    assert bf.basis("h100-80gb") == "fitted_on_this_gpu" and bf.basis("h200-141gb") == "fitted_on_other_gpus"
    assert table.entries[("ampere", "gemm", "bfloat16")].basis("a100-80gb") == "assumed"
