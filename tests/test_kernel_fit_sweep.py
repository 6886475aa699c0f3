"""Reading this project's kernel sweep (`predictor.measure.kernels` records, `.jsonl.gz`) into the kernel fit:
hand-made records, each checked against the table entry it must land in (TF32 flags, attention backends,
channels_last, bfloat16 GEMMs), the contract's params, and the launch taken from the eager times."""

from __future__ import annotations

import gzip
import json

import pytest

from predictor import kernel_fit as kf


def _rec(i: int, kind: str, op: str, dtype: str, params: dict, **extra) -> dict:
    rec = {
        "schema": kf.SWEEP_SCHEMA,
        "id": f"{i:016x}",
        "kind": kind,
        "op": op,
        "dtype": dtype,
        "params": params,
        "layout": "contiguous",
        "tf32": None,
        "backend": None,
        "picked": None,
        "flops": 1000.0,
        "bytes_read": 2000.0,
        "bytes_written": 1000.0,
        "status": "ok",
        "timing": "cuda-graph",
        "latency_ms": {"median": 0.010},
        "eager_ms": 0.025,
        "device": "h100-80gb",
        "source": "zoo",
        "weight": 1,
    }
    rec.update(extra)
    return rec


MM = {"m": 64, "n": 128, "k": 256}
SDPA = {"b": 2, "hq": 8, "hkv": 8, "s": 128, "t": 128, "d": 64, "dv": 64, "causal": False}
CONV = {"n": 2, "c": 16, "o": 32, "in": [10, 10], "k": [3, 3], "s": [2, 2], "p": [1, 1], "d": [1, 1], "g": 4}


def _write(tmp_path, records):
    path = tmp_path / "kernels" / "shard-000-of-001.jsonl.gz"
    path.parent.mkdir()
    with gzip.open(path, "wt") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    return path.parent


def test_sweep_records_land_in_their_entries(tmp_path):
    records = [
        _rec(1, "gemm", "mm", "float32", MM, tf32=True),  # allow_tf32 on cuBLAS -> the table's tf32 entry
        _rec(2, "gemm", "mm", "float32", MM, tf32=False),  # FP32 CUDA cores -> float32
        _rec(3, "gemm", "mm", "bfloat16", MM),  # the same tensor cores as float16 -> pooled with float16
        _rec(4, "conv", "conv2d", "float32", CONV, tf32=True),  # cuDNN TF32 (its default) -> float32 conv entry
        _rec(5, "conv", "conv2d", "float32", CONV, tf32=False),  # cuDNN TF32 off: the model has no such switch
        _rec(6, "conv", "conv2d", "float16", CONV, layout="channels_last"),
        _rec(7, "attention", "sdpa", "float16", SDPA, backend="auto", picked="cudnn"),  # torch's pick: fused
        _rec(8, "attention", "sdpa", "float32", SDPA, backend="auto", picked="math"),  # decomposed: left out
        _rec(9, "attention", "sdpa", "float16", SDPA, backend="flash"),  # a forced backend: left out
        _rec(10, "elementwise", "add", "float16", {"n": 4096}, status="unsupported", latency_ms=None),
        _rec(11, "elementwise", "add", "float16", {"n": 4096}, timing="cuda-events"),  # eager timing: left out
        _rec(12, "softmax", "softmax", "float16", {"i": 1, "n": 512, "o": 64}, device="cpu-vm"),  # not a GPU
    ]
    got = kf.read_sweep(_write(tmp_path, records))
    by_op = [(r.kind, r.dtype, r.layout) for r in got]
    assert by_op == [
        ("gemm", "tf32", "contiguous"),
        ("gemm", "float32", "contiguous"),
        ("gemm", "float16", "contiguous"),
        ("conv", "float32", "contiguous"),
        ("conv", "float16", "channels_last"),
        ("attention", "float16", "contiguous"),
    ]
    assert all(not r.includes_launch and r.source == "sweep:h100-80gb" for r in got)
    assert got[0].latency_s == pytest.approx(10e-6) and got[0].eager_s == pytest.approx(25e-6)
    # the same problem has one shape key whatever its dtype or TF32 flag (held out together)
    assert got[0].shape_key == got[1].shape_key != got[3].shape_key
    # contract params: conv 10x10 input, 3x3 kernel, stride 2, padding 1 -> (10 + 2 - 2 - 1) // 2 + 1 = 5 per dim
    assert got[3].params == {"n": 2, "c_in": 16, "c_out": 32, "groups": 4, "kernel": [3, 3], "out_spatial": [5, 5]}
    assert got[5].params == {"b": 2, "h": 8, "s": 128, "t": 128, "d": 64}
    # the fit: channels_last is evaluated, not fitted; float32 CUDA-core GEMMs are fitted (jointly with NeuSight's
    # calls where the data has them: kernel_fit.FREE_JOINT)
    kept = kf.fitted_records(got)
    assert [(r.kind, r.dtype) for r in kept] == [("gemm", "tf32"), ("gemm", "float32"), ("gemm", "float16"),
                                                 ("conv", "float32"), ("attention", "float16")]  # fmt: skip
    # read_data recognises the sweep folder and file
    assert len(kf.read_data(tmp_path / "kernels")) == len(got)
    assert len(kf.read_data(tmp_path / "kernels" / "shard-000-of-001.jsonl.gz")) == len(got)


def test_conv_transpose_output_size():
    """conv_transpose2d of 7x7 with k 4, s 2, p 1, output_padding 0: (7 - 1) 2 - 2 + (4 - 1) + 0 + 1 = 14."""
    p = {"n": 1, "c": 8, "o": 4, "in": [7, 7], "k": [4, 4], "s": [2, 2], "p": [1, 1], "d": [1, 1], "g": 1}
    assert kf.sweep_params("conv", {**p, "op": [0, 0]})["out_spatial"] == [14, 14]


def test_launch_is_the_eager_floor_of_host_bound_kernels(tmp_path):
    """Launch per kind = the median eager per-call time of the records whose eager time is over 2x their
    graph-timed time. 12 host-bound GEMMs at eager 10..21 us (graph 2 us): median 15.5 us; 12 long ones
    (graph 100 us, eager 101 us) are not host-bound and do not count."""
    recs = [
        _rec(i, "gemm", "mm", "float16", MM, latency_ms={"median": 0.002}, eager_ms=(10 + i) / 1000) for i in range(12)
    ]
    recs += [_rec(100 + i, "gemm", "mm", "float16", MM, latency_ms={"median": 0.1}, eager_ms=0.101) for i in range(12)]
    got = kf.read_sweep(_write(tmp_path, recs))
    assert kf.sweep_launch(got) == {("hopper", "gemm"): pytest.approx(15.5)}  # (15 + 16) / 2


def test_an_empty_sweep_is_refused(tmp_path):
    folder = _write(tmp_path, [_rec(1, "gemm", "mm", "float16", MM, status="oom")])
    with pytest.raises(kf.KernelParamsError, match="no ok graph-timed"):
        kf.read_sweep(folder)
    assert kf.main(["fit", "--data", str(folder), "--out", str(tmp_path / "t.json")]) == 2
