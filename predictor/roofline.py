"""Roofline bound: the fastest a graph can run on a device, and what it needs in memory.

Per operator: time = max(FLOPs / peak rate for its dtype and kind, bytes / bandwidth), summed over
the graph (ops run one after another in eager PyTorch). Which peak applies (NB, PyTorch defaults):
- conv in float32 runs on TF32 tensor cores (`torch.backends.cudnn.allow_tf32` is True by default);
- matmul/attention in float32 runs on CUDA cores (`torch.backends.cuda.matmul.allow_tf32` is False); with
  `tf32_matmul` (the user runs `torch.set_float32_matmul_precision("high")` or `"medium"`, as NVIDIA's containers
  do), float32 matmuls run on TF32 tensor cores instead. Fused float32 attention is not moved by that flag: torch's
  memory-efficient SDPA kernel computes float32 on tensor cores in 3xTF32 (CUTLASS `OpMultiplyAddFastF32`, FP32
  accuracy) whatever the flag says, and stays at the rate the model already gives it;
- float16 / bfloat16 conv, matmul and attention run on tensor cores at the fp16 / bf16 rate;
- conv and matmul on 8-bit integer operands (int8 or uint8, accumulating in int32: quantized models) run on
  tensor cores at the int8 rate (a device without one in the table falls back to fp32); the dtype of such an
  op is its operands' (`passes.costs.compute_dtype`), not its int32 output's;
- everything else (elementwise, normalisation, reductions, data movement) at the fp32 CUDA-core rate.
Ops folded ahead of time (`folded`) cost nothing at run time.

A MIG slice owns a share of the SMs (compute) and of the memory slices (bandwidth, L2): its bound
scales the two terms separately.

Device memory is not estimated here: `predictor.memory` (context per runtime, workspace, the caching allocator).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from passes.costs import INT8_DTYPES, compute_dtype
from passes.costs.registry import CATEGORIES, MULTIPLY_ADD_CATEGORIES

from .devices import Device, MigProfile

__all__ = [
    "OpBound",
    "latency_bound_ms",
    "latency_bound_ms_arrays",
    "op_arrays",
    "op_bound",
    "op_bounds",
    "peak_rate",
    "shares",
]


def peak_rate(device: Device, category: str, dtype: str, *, tf32_matmul: bool = False) -> float:
    """FLOP/s available to an op of `category` computing in `dtype` (see the module docstring); `tf32_matmul`:
    float32 matmuls on TF32 tensor cores (the device's `tf32` peak, its `fp32` peak if it lists none)."""
    if category in MULTIPLY_ADD_CATEGORIES:  # the matrix-multiply-accumulate ops tensor cores run
        if tf32_matmul and dtype == "float32" and category == "matmul":
            return device.peak_flops.get("tf32", device.peak_flops["fp32"])
        if dtype == "float16":
            return device.peak_flops["fp16"]
        if dtype == "bfloat16":
            return device.peak_flops["bf16"]
        if dtype == "float32" and category == "conv":
            return device.peak_flops["tf32"]
        if dtype in INT8_DTYPES:
            return device.peak_flops.get("int8", device.peak_flops["fp32"])
    return device.peak_flops["fp32"]


@dataclass(frozen=True)
class OpBound:
    """Roofline times of one op, in seconds."""

    index: int
    compute_s: float
    memory_s: float

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def compute_bound(self) -> bool:
        return self.compute_s >= self.memory_s


def op_bound(
    index: int,
    flops: float,
    nbytes: float,
    category: str,
    dtype: str,
    device: Device,
    sm_share: float = 1.0,
    bandwidth_share: float = 1.0,
) -> OpBound:
    """Roofline times of one op from its FLOPs, bytes moved, category and dtype."""
    rate = peak_rate(device, category, dtype) * sm_share
    return OpBound(index, flops / rate, nbytes / (device.bandwidth * bandwidth_share))


def op_bounds(ops: Iterable, device: Device, *, sm_share: float = 1.0, bandwidth_share: float = 1.0) -> list[OpBound]:
    """Per-op bounds for `passes.costs.OpCost` records (flops, bytes, category, `compute_dtype`)."""
    return [
        op_bound(
            op.index,
            op.flops,
            op.bytes_read + op.bytes_written,
            op.category,
            compute_dtype(op),
            device,
            sm_share,
            bandwidth_share,
        )
        for op in ops
        if not getattr(op, "folded", False)
    ]


def op_arrays(ops: Iterable) -> dict[str, np.ndarray]:
    """The per-op arrays the bound needs (the same arrays `analyzer.dataset` caches)."""
    ops = list(ops)
    return {
        "op_flops": np.array([c.flops for c in ops], dtype=np.float64),
        "op_bytes": np.array([c.bytes_read + c.bytes_written for c in ops], dtype=np.float64),
        "op_category": np.array([CATEGORIES.index(c.category) for c in ops], dtype=np.int8),
        "op_dtype": np.array([compute_dtype(c) for c in ops]),
        "op_folded": np.array([c.folded for c in ops], dtype=bool),
    }


def latency_bound_ms(
    ops: Iterable, device: Device, profile: MigProfile | None = None, *, tf32_matmul: bool = False
) -> float:
    """The roofline latency bound of a graph, in milliseconds, on the full GPU or one MIG slice (`tf32_matmul`:
    float32 matmuls on TF32 tensor cores, `peak_rate`)."""
    return latency_bound_ms_arrays(op_arrays(ops), device, profile, tf32_matmul=tf32_matmul)


def latency_bound_ms_arrays(
    arrays: dict, device: Device, profile: MigProfile | None = None, *, tf32_matmul: bool = False
) -> float:
    """`latency_bound_ms` from per-op arrays (`op_arrays`, or a graph cache of `analyzer.dataset`)."""
    sm_share, bw_share = shares(device, profile)
    cats, dtypes = arrays["op_category"], arrays["op_dtype"]
    rates = np.empty(len(cats), dtype=np.float64)
    for c, d in {(int(c), str(d)) for c, d in zip(cats, dtypes, strict=True)}:
        rates[(cats == c) & (dtypes == d)] = peak_rate(device, CATEGORIES[c], d, tf32_matmul=tf32_matmul)
    compute = arrays["op_flops"] / (rates * sm_share)
    memory = arrays["op_bytes"] / (device.bandwidth * bw_share)
    return float(1e3 * np.maximum(compute, memory)[~arrays["op_folded"].astype(bool)].sum())


def shares(device: Device, profile: MigProfile | None) -> tuple[float, float]:
    """(share of SMs, share of memory bandwidth) a MIG profile owns; (1, 1) for the whole GPU."""
    if profile is None:
        return 1.0, 1.0
    return profile.sms / device.sms, profile.memory_slices / 8
