"""Tests for the single-operator kernel sweep (``predictor.measure.kernels``), its list generator
(``predictor.measure.kernel_list``) and the lease runner (``predictor.measure.lease``), all on the CPU."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from passes.costs import RULES
from passes.costs.elementwise import FLOPS_PER_ELEMENT
from passes.graph import TensorInfo
from predictor.measure import configs as cfgmod
from predictor.measure import kernel_list as KL
from predictor.measure import kernels as K
from predictor.measure import lease
from predictor.measure.nvml import host_slug

ROOT = Path(__file__).resolve().parents[1]
FAST = K.SweepOptions(device="cpu", runs=3, warmup=1, target_ms=0.05, max_inner=4, threads=1)
RECORD_KEYS = {
    "schema", "id", "kind", "op", "params", "dtype", "layout", "tf32", "backend", "inputs", "outputs", "flops",
    "bytes_read", "bytes_written", "status", "error", "latency_ms", "inner", "timing", "eager_ms", "l2_flush",
    "device", "device_name", "driver", "torch", "clocks", "timestamp", "weight", "source", "sweep_version",
}  # fmt: skip

CONV = {"n": 2, "c": 8, "o": 16, "in": [16, 16], "k": [3, 3], "s": [1, 1], "p": [1, 1], "d": [1, 1], "g": 1}
DEPTHWISE = {**CONV, "o": 8, "g": 8, "s": [2, 2]}
TCONV = {"n": 2, "c": 8, "o": 4, "in": [8, 8], "k": [3, 3], "s": [2, 2], "p": [1, 1], "op": [1, 1], "d": [1, 1], "g": 1}
SDPA = {
    "b": 2,
    "hq": 8,
    "hkv": 2,
    "s": 16,
    "t": 16,
    "d": 32,
    "dv": 32,
    "causal": True,
    "mask": None,
    "mask_bool": False,
}
LSTM = {"seq": 8, "b": 2, "in": 16, "h": 32, "layers": 2, "bidir": True, "bias": True}


def _cost(op: str, params: dict, dtype: str = "float32") -> dict:
    return K.entry_cost(K.make_entry(op, params, dtype))


# ----------------------------------------------------------------------------------------- FLOPs and bytes


def test_formulas_by_hand() -> None:
    mm = _cost("mm", {"m": 64, "k": 32, "n": 16})
    assert mm["flops"] == 65_536  # 2 * 64 * 32 * 16
    assert mm["bytes_read"] == 10_240 and mm["bytes_written"] == 4_096  # (64*32 + 32*16) * 4; 64*16 * 4
    lin = _cost("linear", {"m": 64, "k": 32, "n": 16, "bias": True}, "bfloat16")
    assert lin["flops"] == 66_560  # 2*64*32*16 + 64*16 (the bias add)
    assert lin["bytes_read"] == 5_152 and lin["bytes_written"] == 2_048  # (64*32 + 16*32 + 16) * 2; 64*16 * 2
    assert _cost("bmm", {"b": 4, "m": 64, "k": 32, "n": 16})["flops"] == 262_144  # 2 * 4 * 64 * 32 * 16
    conv = _cost("conv2d", {**CONV, "bias": True})
    assert conv["outputs"] == [[2, 16, 16, 16]]
    assert conv["flops"] == 1_187_840  # 2 * (2*16*16*16 = 8192 outputs) * 8 * 9 + 8192 (bias)
    assert conv["bytes_read"] == 21_056  # (2*8*16*16 = 4096 + 16*8*9 = 1152 + 16) * 4
    dw = _cost("conv2d", {**DEPTHWISE, "bias": False})
    assert dw["outputs"] == [[2, 8, 8, 8]] and dw["flops"] == 18_432  # 2 * 1024 outputs * (8/8 = 1) * 9
    tconv = _cost("conv_transpose2d", {**TCONV, "bias": True})
    assert tconv["outputs"] == [[2, 4, 16, 16]]  # (8-1)*2 - 2*1 + (3-1) + 1 + 1 = 16
    assert tconv["flops"] == 75_776  # 2 * (2*8*64 = 1024 inputs) * 4 * 9 + 2*4*16*16 = 73,728 + 2,048
    att = _cost("sdpa", SDPA)
    assert att["flops"] == 524_288  # 2 * 2 * 8 * 16 * 16 * (32 + 32)
    assert att["bytes_read"] == 49_152  # q 2*8*16*32*4 = 32,768 + k, v 2*2*16*32*4 = 8,192 each
    assert _cost("layer_norm", {"r": 64, "c": 128, "affine": True})["flops"] == 57_344  # 7 * 64 * 128
    assert _cost("softmax", {"o": 64, "n": 128, "i": 1})["flops"] == 40_960  # 5 * 8192
    assert _cost("gelu", {"n": 4096})["flops"] == 20_480  # 5 * 4096
    emb = _cost("embedding", {"v": 1000, "d": 64, "n": 128})
    assert emb["flops"] == 0 and emb["bytes_read"] == 33_792  # gathered 128*64*4 = 32,768 + indices 128*8
    pool = _cost("max_pool2d", {"n": 2, "c": 8, "in": [16, 16], "k": [3, 3], "s": [2, 2], "p": [1, 1], "ceil": False})
    assert pool["outputs"] == [[2, 8, 8, 8]] and pool["flops"] == 9_216  # 1024 outputs * 9
    ceil = _cost("avg_pool2d", {"n": 1, "c": 1, "in": [7, 7], "k": [2, 2], "s": [2, 2], "p": [0, 0], "ceil": True})
    assert ceil["outputs"] == [[1, 1, 4, 4]]  # ceil((7 - 2) / 2) + 1 = 4
    # LSTM, 2 layers, both directions: layer 0: 2 * 8 * 2 * (4*32) * (16 + 32) = 196,608 MACs;
    # layer 1 reads both directions (64 wide): 2 * 8 * 2 * 128 * (64 + 32) = 393,216 MACs.
    assert _cost("lstm", LSTM)["flops"] == 2 * (196_608 + 393_216)
    assert _cost("cast", {"n": 100, "to": "float16"})["bytes_read"] == 400  # and writes 200
    assert _cost("cast", {"n": 100, "to": "float16"})["bytes_written"] == 200


def _ti(shape: tuple, dtype: str = "float32") -> TensorInfo:
    return TensorInfo(tuple(shape), dtype)


def _relax(op: str, ins: list, outs: list, attrs: dict | None = None) -> tuple[int, int, int]:
    """FLOPs, bytes read and bytes written of one Relax op under ``passes.costs``' rule (float32 unless an
    input is given as ``(shape, dtype)``)."""
    inputs = [_ti(*i) if isinstance(i[0], tuple) else _ti(i) for i in ins]
    outputs = tuple(_ti(s) for s in outs)
    cost = RULES[op].fn(attrs or {}, inputs, outputs)
    read = sum(t.nbytes for t in inputs) if cost.bytes_read is None else cost.bytes_read
    written = sum(t.nbytes for t in outputs) if cost.bytes_written is None else cost.bytes_written
    return cost.flops, read, written


CROSS = [
    # (sweep op, params, relax op, relax inputs, relax outputs, attrs)
    ("mm", {"m": 64, "k": 32, "n": 16}, "relax.matmul", [(64, 32), (32, 16)], [(64, 16)], {}),
    ("bmm", {"b": 3, "m": 64, "k": 32, "n": 16}, "relax.matmul", [(3, 64, 32), (3, 32, 16)], [(3, 64, 16)], {}),
    ("linear", {"m": 64, "k": 32, "n": 16, "bias": False}, "relax.matmul", [(64, 32), (32, 16)], [(64, 16)], {}),
    ("conv2d", {**CONV, "bias": False}, "relax.nn.conv2d", [(2, 8, 16, 16), (16, 8, 3, 3)], [(2, 16, 16, 16)], {}),
    ("conv2d", {**DEPTHWISE, "bias": False}, "relax.nn.conv2d", [(2, 8, 16, 16), (8, 1, 3, 3)], [(2, 8, 8, 8)], {}),
    ("conv1d", {**CONV, "in": [20], "k": [3], "s": [2], "p": [0], "d": [2], "g": 2, "bias": False},
     "relax.nn.conv1d", [(2, 8, 20), (16, 4, 3)], [(2, 16, 8)], {}),
    ("conv3d", {**CONV, "in": [4, 8, 8], "k": [3, 3, 3], "s": [1, 2, 2], "p": [1, 1, 1], "d": [1, 1, 1], "bias": False},
     "relax.nn.conv3d", [(2, 8, 4, 8, 8), (16, 8, 3, 3, 3)], [(2, 16, 4, 4, 4)], {}),
    ("conv_transpose2d", {**TCONV, "bias": False}, "relax.nn.conv2d_transpose", [(2, 8, 8, 8), (8, 4, 3, 3)],
     [(2, 4, 16, 16)], {}),
    ("sdpa", SDPA, "relax.nn.attention", [(2, 16, 8, 32), (2, 16, 2, 32), (2, 16, 2, 32)], [(2, 16, 8, 32)], {}),
    ("layer_norm", {"r": 64, "c": 128, "affine": True}, "relax.nn.layer_norm", [(64, 128), (128,), (128,)],
     [(64, 128)], {}),
    ("rms_norm", {"r": 64, "c": 128, "affine": True}, "relax.nn.rms_norm", [(64, 128), (128,)], [(64, 128)], {}),
    ("group_norm", {"n": 2, "c": 32, "hw": 64, "g": 8, "affine": True}, "relax.nn.group_norm",
     [(2, 32, 64), (32,), (32,)], [(2, 32, 64)], {}),
    ("batch_norm", {"n": 2, "c": 32, "h": 8, "w": 8}, "relax.nn.batch_norm",
     [(2, 32, 8, 8), (32,), (32,), (32,), (32,)], [(2, 32, 8, 8), (32,), (32,)], {}),
    ("softmax", {"o": 64, "n": 128, "i": 1}, "relax.nn.softmax", [(64, 128, 1)], [(64, 128, 1)], {}),
    ("add", {"a": [8, 64, 16], "b": [1, 64, 1]}, "relax.add", [(8, 64, 16), (1, 64, 1)], [(8, 64, 16)], {}),
    ("max_pool2d", {"n": 2, "c": 8, "in": [16, 16], "k": [3, 3], "s": [2, 2], "p": [1, 1], "ceil": False},
     "relax.nn.max_pool2d", [(2, 8, 16, 16)], [(2, 8, 8, 8)], {"pool_size": [3, 3]}),
    ("adaptive_avg_pool2d", {"n": 2, "c": 8, "in": [7, 7], "out": [1, 1]}, "relax.nn.adaptive_avg_pool2d",
     [(2, 8, 7, 7)], [(2, 8, 1, 1)], {}),
    ("sum", {"o": 16, "n": 64, "i": 4}, "relax.sum", [(16, 64, 4)], [(16, 4)], {}),
    ("amax", {"o": 16, "n": 64, "i": 4}, "relax.max", [(16, 64, 4)], [(16, 4)], {}),
    ("var", {"o": 16, "n": 64, "i": 4}, "relax.variance", [(16, 64, 4)], [(16, 4)], {}),
    ("permute", {"shape": [4, 16, 8], "perm": [1, 0, 2]}, "relax.permute_dims", [(4, 16, 8)], [(16, 4, 8)], {}),
    ("cat", {"o": 4, "sizes": [3, 5], "i": 16}, "relax.concat", [(4, 3, 16), (4, 5, 16)], [(4, 8, 16)], {}),
    ("embedding", {"v": 1000, "d": 64, "n": 128}, "relax.take", [(1000, 64), ((128,), "int64")], [(128, 64)], {}),
    ("interpolate", {"n": 1, "c": 4, "in": [8, 8], "out": [16, 16], "mode": "bilinear"}, "relax.image.resize2d",
     [(1, 4, 8, 8)], [(1, 4, 16, 16)], {"method": "linear"}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("op", "params", "relax", "ins", "outs", "attrs"), CROSS, ids=[f"{c[0]}-{c[2]}" for c in CROSS]
)
def test_formulas_match_passes_costs(op: str, params: dict, relax: str, ins: list, outs: list, attrs: dict) -> None:
    mine = _cost(op, params)
    assert math.prod(outs[0]) == math.prod(mine["outputs"][0])  # same output (attention: (B, S, N, D) in Relax)
    assert (mine["flops"], mine["bytes_read"], mine["bytes_written"]) == _relax(relax, ins, outs, attrs)


def test_composite_and_elementwise_flops_match_passes_costs() -> None:
    relax_name = {"relu": "relax.nn.relu", "gelu": "relax.nn.gelu", "gelu_tanh": "relax.nn.gelu_tanh",
                  "silu": "relax.nn.silu", "sigmoid": "relax.sigmoid", "tanh": "relax.tanh", "exp": "relax.exp",
                  "erf": "relax.erf", "rsqrt": "relax.rsqrt", "sqrt": "relax.sqrt", "neg": "relax.negative",
                  "pow": "relax.power", "clamp": "relax.clip"}  # fmt: skip
    for op, name in relax_name.items():
        assert K.UNARY_FLOPS[op][0] == FLOPS_PER_ELEMENT[name], op
        assert _cost(op, {"n": 100})["flops"] == 100 * FLOPS_PER_ELEMENT[name]
    add, clip, div, mul = (FLOPS_PER_ELEMENT[f"relax.{n}"] for n in ("add", "clip", "divide", "multiply"))
    assert K.UNARY_FLOPS["hardswish"][0] == add + clip + div + mul  # the torch frontend's decomposition
    assert K.UNARY_FLOPS["hardsigmoid"][0] == add + clip + div
    # A linear with bias is matmul + add in preflight's graph: the FLOPs of both.
    matmul = _relax("relax.matmul", [(64, 32), (32, 16)], [(64, 16)])[0]
    bias = _relax("relax.add", [(64, 16), (16,)], [(64, 16)])[0]
    assert _cost("linear", {"m": 64, "k": 32, "n": 16, "bias": True})["flops"] == matmul + bias
    conv = _relax("relax.nn.conv2d", [(2, 8, 16, 16), (16, 8, 3, 3)], [(2, 16, 16, 16)])[0]
    conv_bias = _relax("relax.add", [(2, 16, 16, 16), (1, 16, 1, 1)], [(2, 16, 16, 16)])[0]
    assert _cost("conv2d", {**CONV, "bias": True})["flops"] == conv + conv_bias


def test_op_table_is_consistent() -> None:
    assert {op.kind for op in K.OPS.values()} == set(K.KINDS)
    assert all(kind in K.KINDS for kind in K.VARIANTS)
    entry = K.make_entry("mm", {"m": 8, "k": 8, "n": 8}, "float32", tf32=True)
    assert entry["id"] == K.entry_id("mm", {"n": 8, "k": 8, "m": 8}, "float32", "contiguous", True, None)
    assert entry["id"] != K.make_entry("mm", {"m": 8, "k": 8, "n": 8}, "float32", tf32=False)["id"]
    assert K.make_entry("sdpa", SDPA)["backend"] == "auto"
    with pytest.raises(ValueError, match="unknown op"):
        K.make_entry("nope", {})
    # Planning estimate at H100 peaks: an 8192^3 fp16 matmul is 2 * 8192^3 / 989.4e12 s = 1.111 ms (+ 2 us).
    big = K.make_entry("mm", {"m": 8192, "k": 8192, "n": 8192}, "float16")
    assert big["est_ms"] == pytest.approx(2 * 8192**3 / 989.4e12 * 1e3 + K.MIN_KERNEL_MS, rel=1e-4)


# ----------------------------------------------------------------------------------------- sweeping on the CPU


def _every_op() -> list[dict]:
    small = {
        "mm": {"m": 16, "k": 8, "n": 8},
        "bmm": {"b": 2, "m": 8, "k": 8, "n": 8},
        "linear": {"m": 16, "k": 8, "n": 8, "bias": True},
        "conv1d": {**CONV, "in": [16], "k": [3], "s": [1], "p": [2], "d": [2], "g": 2, "bias": False},
        "conv2d": {**DEPTHWISE, "bias": False},
        "conv3d": {**CONV, "in": [2, 4, 4], "k": [1, 3, 3], "s": [1, 1, 1], "p": [0, 1, 1], "d": [1, 1, 1],
                   "bias": True},
        "conv_transpose1d": {**TCONV, "in": [8], "k": [3], "s": [2], "p": [1], "op": [1], "d": [1], "bias": False},
        "conv_transpose2d": {**TCONV, "bias": True},
        "conv_transpose3d": {**TCONV, "in": [2, 4, 4], "k": [2, 2, 2], "s": [2, 2, 2], "p": [0, 0, 0],
                             "op": [0, 0, 0], "d": [1, 1, 1], "bias": False},
        "sdpa": SDPA,
        "layer_norm": {"r": 16, "c": 32, "affine": True},
        "rms_norm": {"r": 16, "c": 32, "affine": True},
        "group_norm": {"n": 2, "c": 8, "hw": 16, "g": 4, "affine": True},
        "batch_norm": {"n": 2, "c": 8, "h": 4, "w": 4},
        "softmax": {"o": 4, "n": 32, "i": 2},
        "add": {"a": [4, 8, 16], "b": [1, 8, 1]},
        "sub": {"a": [64], "b": []},
        "mul": {"a": [4, 16], "b": [4, 16]},
        "div": {"a": [4, 16], "b": [1, 16]},
        "max_pool1d": {"n": 2, "c": 4, "in": [16], "k": [2], "s": [2], "p": [0], "ceil": False},
        "max_pool2d": {"n": 2, "c": 4, "in": [8, 8], "k": [3, 3], "s": [2, 2], "p": [1, 1], "ceil": True},
        "max_pool3d": {"n": 1, "c": 2, "in": [4, 4, 4], "k": [2, 2, 2], "s": [2, 2, 2], "p": [0, 0, 0], "ceil": False},
        "avg_pool1d": {"n": 2, "c": 4, "in": [16], "k": [2], "s": [2], "p": [0], "ceil": False},
        "avg_pool2d": {"n": 2, "c": 4, "in": [8, 8], "k": [2, 2], "s": [2, 2], "p": [0, 0], "ceil": False},
        "avg_pool3d": {"n": 1, "c": 2, "in": [4, 4, 4], "k": [2, 2, 2], "s": [2, 2, 2], "p": [0, 0, 0], "ceil": False},
        "adaptive_avg_pool1d": {"n": 2, "c": 4, "in": [16], "out": [1]},
        "adaptive_avg_pool2d": {"n": 2, "c": 4, "in": [7, 7], "out": [1, 1]},
        "adaptive_avg_pool3d": {"n": 1, "c": 2, "in": [4, 4, 4], "out": [2, 2, 2]},
        "sum": {"o": 4, "n": 16, "i": 2}, "mean": {"o": 4, "n": 16, "i": 1},
        "amax": {"o": 4, "n": 16, "i": 2}, "var": {"o": 4, "n": 16, "i": 1},
        "permute": {"shape": [4, 8, 2], "perm": [1, 0, 2]},
        "copy": {"n": 256},
        "cast": {"n": 256, "to": "float16"},
        "cat": {"o": 4, "sizes": [2, 3, 1], "i": 8},
        "embedding": {"v": 100, "d": 16, "n": 32},
        "lstm": LSTM,
        "gru": {**LSTM, "layers": 1, "bidir": False},
        "interpolate": {"n": 1, "c": 2, "in": [4, 4], "out": [8, 8], "mode": "bilinear"},
    }  # fmt: skip
    small.update({name: {"n": 256} for name in K.UNARY_FLOPS})
    assert set(small) == set(K.OPS)  # every op of the table is exercised
    entries = [K.make_entry(op, params, "float32") for op, params in small.items()]
    entries.append(K.make_entry("conv2d", {**CONV, "bias": True}, "float32", "channels_last", tf32=True))
    entries.append(K.make_entry("mm", {"m": 16, "k": 8, "n": 8}, "bfloat16"))
    entries += [K.make_entry("sdpa", {**SDPA, "hkv": 8, "causal": False, "mask": [2, 1, 1, 16], "mask_bool": True},
                             "float32", backend=b) for b in ("math", "efficient")]  # fmt: skip
    return entries


def _records(root: Path) -> list[dict]:
    return [
        json.loads(line)
        for path in sorted(root.rglob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def test_cpu_sweep_of_every_op(tmp_path: Path) -> None:
    entries = _every_op()
    summary = K.run_sweep(entries, tmp_path, FAST, log=None)
    recs = {r["id"]: r for r in _records(tmp_path)}
    assert summary.measured == len(entries) == len(recs) and summary.device.startswith("cpu-")
    assert Path(summary.path) == tmp_path / summary.device / "kernels" / "shard-000-of-001.jsonl"
    assert {r["kind"] for r in recs.values()} == set(K.KINDS)
    for entry in entries:
        rec = recs[entry["id"]]
        assert RECORD_KEYS <= set(rec), set(RECORD_KEYS) - set(rec)
        assert rec["schema"] == K.RECORD_SCHEMA and rec["device"] == summary.device
        cost = K.entry_cost(entry)
        assert (rec["flops"], rec["bytes_read"], rec["bytes_written"]) == (
            cost["flops"], cost["bytes_read"], cost["bytes_written"])  # fmt: skip
        if entry.get("backend") == "efficient":  # no memory-efficient attention kernel on the CPU
            assert rec["status"] == "unsupported" and rec["latency_ms"] is None and rec["error"]
            continue
        assert rec["status"] == "ok", (rec["op"], rec["error"])
        lat = rec["latency_ms"]
        assert lat["runs"] == 3 and 0 < lat["p10"] <= lat["median"] <= lat["p90"] < 10_000
        assert 1 <= rec["inner"] <= 4 and rec["timing"] == "wall" and rec["torch"] and rec["timestamp"]
    assert recs[entries[-2]["id"]]["backend"] == "math"


def test_resume_after_a_killed_run_and_shards(tmp_path: Path) -> None:
    entries = [K.make_entry("relu", {"n": 1024 + i}) for i in range(12)]
    KL.write_list(entries, tmp_path / "list.jsonl", {"test": True})
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "predictor.measure.kernels", "--device", "cpu", "--list", str(tmp_path / "list.jsonl"),
           "--out", str(out), "--runs", "20", "--target-ms", "10", "--max-inner", "1000", "--threads", "1"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and len(_records(out)) < 2:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # mid-entry: 20 samples of ~10 ms each per entry
    proc.wait()
    first = len(_records(out))
    assert 2 <= first < len(entries)
    assert K.main(cmd[3:]) == 0  # the rest, in this process
    recs = _records(out)
    counts = Counter(r["id"] for r in recs)
    assert set(counts) == {e["id"] for e in entries} and set(counts.values()) == {1}  # exactly one record per id
    statuses = Counter(r["status"] for r in recs)
    assert statuses["ok"] >= len(entries) - 1 and statuses["crash"] <= 1  # the entry in flight at the kill
    # Shards partition the list; each has its own file.
    quick = ["--runs", "1", "--target-ms", "0.01"]
    sharded = tmp_path / "sharded"
    for i in (0, 1):
        base = [c if c != str(out) else str(sharded) for c in cmd[:9]]
        assert K.main([*base[3:], "--shard", f"{i}/2", *quick]) == 0
    files = sorted(p.name for p in sharded.rglob("*.jsonl"))
    assert files == ["shard-000-of-002.jsonl", "shard-001-of-002.jsonl"]
    assert sorted(r["id"] for r in _records(sharded)) == sorted(e["id"] for e in entries)


def test_budget_stops_before_the_deadline(tmp_path: Path) -> None:
    entries = [K.make_entry("relu", {"n": 2048 + i}) for i in range(20)]
    slow = K.SweepOptions(
        device="cpu", runs=20, warmup=1, target_ms=20, max_inner=10_000, threads=1
    )  # ~0.5 s per entry
    summary = K.run_sweep(entries, tmp_path, slow, budget_s=1.5, log=None)
    # it stopped before an entry that would end past the deadline (how soon is a matter of load: no timing assert)
    assert summary.stopped_by_budget and 1 <= summary.measured < len(entries)
    assert len(_records(tmp_path)) == summary.measured
    again = K.run_sweep(entries, tmp_path, FAST, log=None)
    assert again.skipped == summary.measured and again.measured == len(entries) - summary.measured


# ----------------------------------------------------------------------------------------- the list


def test_canonical_shapes() -> None:
    # (8, 64, 56, 56) + (1, 64, 1, 1): batch and spatial merge into broadcast runs.
    assert KL.coalesce_binary([8, 64, 56, 56], [1, 64, 1, 1]) == ([8, 64, 3136], [1, 64, 1])
    assert KL.coalesce_binary([1, 64], [8, 1, 64]) == ([8, 64], [1, 64])  # the larger operand first
    assert KL.coalesce_binary([4, 5], []) == ([20], [])
    # (B, S, H, D) -> (B, H, S, D): B stays outermost; nothing merges.
    assert KL.coalesce_permute([2, 16, 8, 32], [0, 2, 1, 3]) == ([2, 16, 8, 32], [0, 2, 1, 3])
    # Size-1 dims drop and dims that stay adjacent merge: (1, 4, 5, 6) -> permute(0, 3, 1, 2) = (20, 6) -> (6, 20).
    assert KL.coalesce_permute([1, 4, 5, 6], [0, 3, 1, 2]) == ([20, 6], [1, 0])
    assert KL.coalesce_permute([3, 4], [0, 1]) == ([12], [0])


def test_list_generation_weights_and_order(tmp_path: Path) -> None:
    spec = "resnet18?resolution=32"
    info = cfgmod.spec_info(spec)
    assert info is not None
    cfgs = [
        cfgmod._make_config(info, spec, b, d, 1000.0, False)
        for b, d in ((1, "float32"), (1, "float16"), (2, "float32"))
    ]
    cfgmod.save_configs(cfgs, tmp_path / "configs.jsonl")
    weights, unmapped, stats = KL.trace_configs(tmp_path / "configs.jsonl")
    assert stats["pairs"] == 2 and not stats["failed"] and not unmapped
    by_op = Counter()
    for (op, _), w in weights.items():
        by_op[op] += w
    # resnet18: 20 convolutions and 20 batch norms per forward; 3 configs (batch 1 twice, batch 2 once).
    assert by_op["conv2d"] == 20 * 3 and by_op["batch_norm"] == 20 * 3
    assert by_op["linear"] == 3 and by_op["max_pool2d"] == 3 and by_op["adaptive_avg_pool2d"] == 3
    # layer1: 2 blocks x 2 identical 3x3 64->64 convs on 8x8 (32 / 2 stem / 2 max pool): weight 4 per config.
    conv = {"n": 1, "c": 64, "o": 64, "in": [8, 8], "k": [3, 3], "s": [1, 1], "p": [1, 1], "d": [1, 1], "g": 1,
            "bias": False}  # fmt: skip
    assert weights[("conv2d", json.dumps(conv, sort_keys=True))] == 4 * 2  # two batch-1 configs
    assert weights[("conv2d", json.dumps({**conv, "n": 2}, sort_keys=True))] == 4
    entries = KL.build_list(weights, seed=0, spread=1)
    again = KL.build_list(weights, seed=0, spread=1)
    assert [e["id"] for e in entries] == [e["id"] for e in again]  # seeded
    assert len({e["id"] for e in entries}) == len(entries)
    sources = Counter(e["source"] for e in entries)
    assert sources["zoo"] and sources["derived"] and sources["spread"]

    def stratum(e: dict) -> tuple:
        return e["kind"], e["op"], e["dtype"], e["tf32"], e["layout"], e["backend"]

    strata = {stratum(e) for e in entries}
    with_zoo = {stratum(e) for e in entries if e["source"] == "zoo"}
    turns = Counter()  # a stratum with zoo shapes takes 3 turns of its kind per round, others 1
    for key in strata:
        turns[key[0]] += 3 if key in with_zoo else 1
    per_kind = Counter(key[0] for key in strata)
    rounds = max(math.ceil(turns[kind] / KL.KIND_SLOTS[kind]) for kind in per_kind)
    prefix = entries[: rounds * sum(KL.KIND_SLOTS[kind] for kind in per_kind)]
    assert {stratum(e) for e in prefix} == strata  # every op and variant within one round of each kind
    zoo_conv = [e for e in entries if e["source"] == "zoo" and e["op"] == "conv2d" and e["dtype"] == "float16"]
    assert zoo_conv[0]["weight"] == max(e["weight"] for e in zoo_conv)  # heaviest first within a stratum
    assert {e["op"] for e in entries} >= {"conv1d", "conv3d", "conv_transpose2d", "mm", "copy", "cast"}
    path = tmp_path / "kernels.jsonl"
    KL.write_list(entries, path, {"configs": "test"})
    assert [e["id"] for e in K.load_list(path)] == [e["id"] for e in entries]
    plan = KL.plan(entries, budget_s=1e9)
    assert plan["in_budget"] == len(entries) and plan["planned_s"] > 0


def test_committed_kernel_list() -> None:
    path = ROOT / "predictor" / "measure" / "lists" / "kernels-h100-80gb.jsonl"
    header = json.loads(path.open().readline())
    entries = K.load_list(path)
    assert header["schema"] == K.LIST_SCHEMA and len(entries) >= 20_000
    assert len({e["id"] for e in entries}) == len(entries)
    # a run cut short still covers every kind: the priority block (linear, sdpa, conv2d: `priority_entries`, measured
    # first on purpose), then the first 500 of the ordered list
    first = header["priority"]
    assert {e["kind"] for e in entries[:first]} == {"gemm", "attention", "conv"}
    assert {e["kind"] for e in entries[first : first + 500]} == set(K.KINDS)
    assert {e["op"] for e in entries} == set(K.OPS)
    for entry in entries[:: max(len(entries) // 200, 1)]:
        assert entry["id"] == K.entry_id(entry["op"], entry["params"], entry["dtype"], entry["layout"],
                                         entry["tf32"], entry["backend"])  # fmt: skip
    assert header["plan"]["in_budget"] >= 20_000


# ----------------------------------------------------------------------------------------- packaging and lease


def test_sweep_imports_neither_tvm_nor_passes_nor_analyzer() -> None:
    code = (
        "import sys, predictor.measure.kernels, predictor.measure.kernel_list, predictor.measure.lease\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tvm', 'passes', 'analyzer')]\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_noise_ids_are_one_in_twenty() -> None:
    ids = [f"{i:016x}" for i in range(200)]
    cfgs = [cfgmod.MeasureConfig(id=i, family="f", zoo="z", params={}, batch=1, dtype="float32") for i in ids]
    assert lease.noise_ids(cfgs) == [f"{i:016x}" for i in range(0, 200, 20)]  # 0x00, 0x14, ...: 10 of 200


def _set_batch2_median(models: Path, factor: float) -> None:
    """Rewrite the one models shard so batch 2's recorded median latency is `factor` x batch 1's."""
    (shard,) = models.glob("*.jsonl")
    recs = [json.loads(line) for line in shard.read_text().splitlines()]
    by_batch = {r["batch"]: r for r in recs}
    by_batch[2]["latency_ms"]["median"] = factor * by_batch[1]["latency_ms"]["median"]
    shard.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_lease_smoke_step_on_the_cpu_and_collect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = "lstm_small?seq_len=8"
    info = cfgmod.spec_info(spec)
    assert info is not None
    cfgs = [cfgmod._make_config(info, spec, b, "float32", 100.0, False) for b in (1, 2)]
    cfgs[0].id, cfgs[1].id = "0000000000000014", "0000000000000015"  # 0x14 = 20: the first is a noise config
    cfgmod.save_configs(cfgs, tmp_path / "configs.jsonl")
    entries = [K.make_entry("relu", {"n": 512 * i}) for i in range(1, 5)]
    KL.write_list(entries, tmp_path / "kernels.jsonl", {"test": True})
    out, data = tmp_path / "out", tmp_path / "data"
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no nvidia-smi
    args = ["--out", str(out), "--step", "smoke", "--device", "cpu", "--data", str(data), "--configs",
            str(tmp_path / "configs.jsonl"), "--kernel-list", str(tmp_path / "kernels.jsonl"), "--smoke-kernel-s",
            "30", "--budget-s", "150", "--sweep-arg=--runs", "--sweep-arg=3", "--sweep-arg=--threads",
            "--sweep-arg=1"]  # fmt: skip
    assert lease.main(args) == 0
    assert "nvidia-smi absent" in capsys.readouterr().out
    device = f"cpu-{host_slug()}"
    smi = list((out / device / "leases").glob("nvidia-smi-q-*.txt"))
    assert len(smi) == 1 and "absent" in smi[0].read_text()
    summary = json.loads(next((out / device / "leases").glob("smoke-*.json")).read_text())
    assert summary["nvidia_smi"] == "absent" and summary["records"]["models"] == {"ok": 2}
    assert summary["records"]["kernels"] == {"ok": 4}
    # Everything a device call returns lies at most two folders below OUT.
    assert all(len(p.relative_to(out).parts) <= 3 for p in out.rglob("*") if p.is_file())
    report = lease.collect(out, data)
    assert report[f"{device}/models"]["added"] == 2 and report[f"{device}/kernels"]["added"] == 4
    assert report[f"{device}/leases"]["added"] == 2
    assert lease.collect(out, data)[f"{device}/kernels"] == Counter(duplicate=4)  # merging twice adds nothing
    assert [p.name for p in (data / device / "kernels").iterdir()] == ["shard-000-of-001.jsonl.gz"]  # compressed
    assert len(list(K.iter_records([data / device / "kernels"]))) == 4 and len(_records(data / device / "models")) == 2
    # (batch 1 and 2 of this CPU model time a few percent apart, and under load batch 2 can come out >5% faster: a
    # batch inversion, which the next step would re-measure too; pinned slower here, the inversion is tested below)
    _set_batch2_median(data / device / "models", 2.0)
    # A models step after that: nothing left to measure, so the whole budget re-measures the noise config.
    result = lease.run_step("models", out, 120, "cpu", data, tmp_path / "configs.jsonl")
    assert result["models"]["skipped_reason"] == "nothing to do" and result["records"]["noise"] == {"ok": 1}
    assert lease.collect(out, data)[f"{device}/noise"] == Counter(added=1)
    noise = _records(data / device / "noise")
    assert [r["id"] for r in noise] == ["0000000000000014"] and noise[0]["status"] == "ok"
    text = lease.summary_markdown(data, device)
    assert "whole models: 2 configs (ok 2)" in text and "kernels: 4 records" in text
    assert "noise (1 configs measured twice)" in text
    # A batch inversion (batch 2 recorded more than 5% faster than batch 1): the next models step re-measures both
    # records; batch 1 (0x14) already was, so batch 2 (0x15, no noise config) is re-measured now.
    _set_batch2_median(data / device / "models", 0.94)
    assert "1 of 1 batch doublings got >5% faster: lstm_small?seq_len=8 float32 b1/b2" in lease.summary_markdown(
        data, device
    )
    shutil.rmtree(out)
    result = lease.run_step("models", out, 120, "cpu", data, tmp_path / "configs.jsonl")
    assert result["records"]["noise"] == {"ok": 1} and lease.collect(out, data)[f"{device}/noise"] == Counter(added=1)
    assert [r["id"] for r in _records(data / device / "noise")] == ["0000000000000014", "0000000000000015"]


def test_batch_inversions_by_hand() -> None:
    def rec(zoo: str, dtype: str, batch: int, ms: float) -> dict:
        return {"zoo": zoo, "dtype": dtype, "batch": batch, "latency_ms": {"median": ms}}

    a1, a2, a4 = rec("a", "float16", 1, 2.0), rec("a", "float16", 2, 1.89), rec("a", "float16", 4, 1.80)
    b1, b2 = rec("b", "float16", 1, 2.0), rec("b", "float16", 2, 1.91)  # 1.91 >= 0.95 x 2.0 = 1.90: not inverted
    c = rec("a", "float32", 2, 1.0)  # another dtype: no pair with a
    pairs, inverted = lease.batch_inversions([a4, b2, a1, c, a2, b1])
    # pairs a 1->2, a 2->4, b 1->2: a 1->2 inverted (1.89 < 0.95 x 2.0 = 1.90), a 2->4 not (1.80 >= 1.7955)
    assert pairs == 3 and inverted == [(a1, a2)]


def test_lease_l2_step_remeasures_measured_convolutions_apart(tmp_path: Path) -> None:
    """The ``kernels-l2`` step (the L2 study): it picks the convolutions ``data`` already holds as ok, per class
    (pointwise, grouped, dense) at evenly spaced ranks of their measured times, times them with ``--flush-l2`` into
    ``kernels-l2flush`` (not ``kernels``: the main sweep and the fit never see them) and ``collect`` files them
    there."""
    conv, dw = {**CONV, "bias": False}, {**DEPTHWISE, "bias": False}
    pointwise = [K.make_entry("conv2d", {**conv, "k": [1, 1], "p": [0, 0], "in": [8 + 8 * i, 8]}) for i in range(4)]
    grouped = [K.make_entry("conv2d", {**dw, "in": [16 + 2 * i, 16]}) for i in range(2)]
    dense = [K.make_entry("conv2d", conv), K.make_entry("relu", {"n": 4096})]
    entries = pointwise + grouped + dense
    KL.write_list(entries, tmp_path / "kernels.jsonl", {"test": True})
    out, data = tmp_path / "out", tmp_path / "data"
    first = K.run_sweep(entries[:-1], data, FAST, log=None)  # the committed data: every entry but the relu
    device = first.device
    assert [lease.conv2d_class(r) for r in _records(data / device / "kernels")][:7] == (
        ["pointwise"] * 4 + ["grouped"] * 2 + ["dense"])  # fmt: skip
    by_id = {r["id"]: r["latency_ms"]["median"] for r in _records(data / device / "kernels")}
    picked = lease.l2_study_entries(tmp_path / "kernels.jsonl", data, device, per_cell=3)
    # 3 of the 4 pointwise ones: ranks 0, 2 (round(1.5)) and 3 of their medians; both grouped; the dense one; no relu
    ranked = sorted(pointwise, key=lambda e: by_id[e["id"]])
    want = {ranked[0]["id"], ranked[2]["id"], ranked[3]["id"], grouped[0]["id"], grouped[1]["id"], dense[0]["id"]}
    assert {e["id"] for e in picked} == want and len(picked) == 6
    # the cells interleave: the first three entries are one of each class
    assert sorted(lease.conv2d_class({"op": e["op"], "params": e["params"]}) for e in picked[:3]) == [
        "dense", "grouped", "pointwise"]  # fmt: skip
    sweep = ["--runs", "3", "--threads", "1"]
    result = lease.run_step("kernels-l2", out, 120, "cpu", data, kernel_list=tmp_path / "kernels.jsonl",
                            sweep_args=sweep)  # fmt: skip
    assert result["l2_entries"] == len(L2 := lease.l2_study_entries(tmp_path / "kernels.jsonl", data, device))
    assert result["records"]["kernels-l2flush"] == {"ok": len(L2)} and result["records"]["kernels"] == {}
    assert not (out / device / "kernels").exists()
    report = lease.collect(out, data)
    assert report[f"{device}/kernels-l2flush"]["added"] == len(L2) and f"{device}/kernels" not in report
    filed = list(K.iter_records([data / device / "kernels-l2flush"]))
    assert {r["id"] for r in filed} == {e["id"] for e in L2} and len(
        list(K.iter_records([data / device / "kernels"]))
    ) == 7
    # measured again, nothing is left to do; the main sweep still counts only its own records as done
    assert lease.run_step("kernels-l2", out, 120, "cpu", data, kernel_list=tmp_path / "kernels.jsonl",
                          sweep_args=sweep)["records"]["kernels-l2flush"] == {"ok": len(L2)}  # fmt: skip
    assert K.done_ids([data / device / "kernels"], device) == {e["id"] for e in entries[:-1]}


def test_priority_entries_head_the_shipped_list(tmp_path: Path) -> None:
    first = KL.priority_entries()
    ops = Counter(e["op"] for e in first)
    # linear: 7 (k, n) x 3 m x 6 variants (float32 with and without TF32, each with and without bias; float16;
    # bfloat16) = 126; sdpa: 4 cache lengths x 4 batches x 2 KV-head counts x 2 dtypes x 3 backends = 192;
    # conv2d: 15 shapes x 3 batches x 4 (float32 with and without TF32, float16 contiguous and channels-last) = 180
    assert ops == Counter(linear=126, sdpa=192, conv2d=180)
    depthwise = [e for e in first if e["op"] == "conv2d" and e["params"]["g"] == e["params"]["c"] > 1]
    assert len(depthwise) == 5 * 3 * 4
    assert all(e["params"]["s"] == 1 for e in first if e["op"] == "sdpa")
    # the largest: b 64, 32 KV heads, 8,192 cached tokens of 128, bfloat16: K and V 2 x 64 x 32 x 8192 x 128 x 2 B
    big = max((e for e in first if e["op"] == "sdpa"), key=lambda e: K.entry_cost(e)["bytes_read"])
    assert K.entry_cost(big)["bytes_read"] >= 2 * 64 * 32 * 8192 * 128 * 2
    shipped = ROOT / "predictor" / "measure" / "lists" / "kernels-h100-80gb.jsonl"
    with shipped.open() as fh:
        header = json.loads(fh.readline())
        head = [json.loads(fh.readline())["id"] for _ in range(len(first))]
    assert header["priority"] == 498 and head == [e["id"] for e in first]
    # Rewriting a list twice gives the same file: the earlier priority block is replaced, not repeated.
    small = tmp_path / "k.jsonl"
    KL.write_list([K.make_entry("relu", {"n": 512}), first[0]], small, {"test": True})
    args = ["--priority-only", "--out", str(small)]
    assert KL.main(args) == 0
    once = small.read_text()
    assert KL.main(args) == 0 and small.read_text() == once
    assert len(once.splitlines()) == 1 + 498 + 1  # header, the priority block (first[0] among it), relu


def test_priority_rewrite_rejects_a_file_that_is_no_kernel_list(tmp_path: Path, capsys) -> None:
    # JSON lines, but a header that is no object (or an entry that is none): one-line error, exit 2, file untouched
    for text in ('[1]\n{"id": "a"}\n', '{"test": true}\n[2]\n'):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(text)
        assert KL.main(["--priority-only", "--out", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
        assert bad.read_text() == text
