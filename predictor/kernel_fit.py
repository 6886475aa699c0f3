"""Fit and evaluate the per-kernel time model (`predictor.kernel_model`) from measured kernel latencies.

Three data shapes are read:
- the NeuSight public measurements (`data/neusight-kernels/`, MIT licence, ASPLOS'25; see its README): float32
  bmm / linear on H100 SXM and A100 PCIe 40/80 GB, elementwise, softmax and layer norm on the A100 PCIe parts,
  each timed around the Python call (launch included);
- the Vidur profiling data (`data/vidur-ops/`, MIT licence, MLSys'24; see its README): float16 kernel durations
  (profiler trace, no launch) of the linear layers, norms and residual add of 5-7 LLMs on an H100 SXM and an A100
  (`read_vidur`); a group of such durations fits the execution alone and keeps the launch of the host-timed fits
  (`fit_with`, `launch_of`);
- a JSONL kernel sweep, one record per line with the kernel-contract fields `kind, op, dtype, flops,
  bytes_read, bytes_written, params`, plus `latency_ms` (median) and `device` (a key or alias of
  `predictor.devices`). Extra fields are ignored;
- this project's own kernel sweep (`read_sweep`: `python -m predictor.measure.kernels` records, `.jsonl.gz`,
  data/README.md): CUDA-graph-timed kernel times (no launch), each record under the entry `sweep_entry` names
  (float32 gemm with TF32 -> "tf32", bfloat16 gemm pooled with float16, forced or math attention backends and
  cuDNN-TF32-off convolutions left out, channels_last and `SWEEP_EVAL_ONLY` evaluated only). Its eager per-call
  times give launch floors (`sweep_launch`), measured but not used (`SWEEP_LAUNCH`).

A group may join host-timed calls and kernel durations only for gemm (`FREE_JOINT`: the hopper float32 GEMMs of
NeuSight and the sweep): the durations pin `exec_us`, the calls' surplus is the launch, and `e_bias` (a GEMM with a
fused bias add, params `bias`) is fitted beside (`joint_gemm_summary` evaluates it, sources and shape families held
out). A group of graph-timed copies with strided ones among them (the sweep's `permute` records, params `strided`)
fits `e_memory, exec_us` on all of them, then `e_strided` on the strided ones alone (`fit_with`).

Fit: per (device family, kind, dtype) group, least squares on log(predicted / measured) latency
(`scipy.optimize.least_squares`, bounded, a few deterministic starts). Free parameters: gemm / conv
`e_compute, launch_us, k0, tile_i0`; attention `e_compute, launch_us, k0`; memory-bound kinds `e_memory,
launch_us`; convolution kernel durations add `e_transposed` / `e_grouped` where the group holds transposed /
grouped convolutions (`conv_free`); GEMM kernel durations fit `e_compute, e_memory, k0, tile_i0, exec_us`, and
where the group has at least `MIN_SHAPE_FIT` kernels also the wave tail, ridge overlap and epilogue overlap
(`tail, ridge, overlap`: `FREE_DURATIONS_GEMM`) with a soft-L1 loss (`ROBUST_GEMM`). The rest of an entry comes
from the rules in `derive_entries` (documented defaults, transfers and calibrations to published figures), each
entry saying which.

Evaluation (written to KERNEL_EVAL.md), MAPE and median absolute percentage error, beside two baselines, the
roofline bound (efficiency 1, no launch) and the roofline + 5 us per kernel (`predictor.predict.LAUNCH_US`):
(a) NeuSight's own train/test split, where the data has one: fit on train, evaluate on test;
(b) extrapolation in size: per (device, kind, dtype), fit on the smallest 80% of problems (FLOPs for gemm-like
    kinds, bytes otherwise), evaluate on the largest 20%;
(c) transfer: fit on all of one device, evaluate on each other device;
(d) held-out model: where a family's (kind, dtype) was measured on at least 3 models (Vidur), fit on all models but
    one, evaluate on that one;
and the committed fit's in-sample error; for kernel-duration data also a summary per GPU and kind on kernels
>= 50 us and on all (`half_summary`): the table before these data, in-sample, held-out models pooled, roofline;
for the sweep (`sweep_summary`, per device, kind, dtype and layout) the table before the sweep, in-sample, a random
20% of the problems held out (by shape) and the largest 20% held out. A sweep fit whose random-20% held-out error
is not below the table's before on the same kernels is not adopted (`rejected_sweep_fits`).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .devices import DEVICES, Device, UnknownDeviceError, get_device
from .kernel_model import (
    _CATEGORY,
    GEMM_LIKE,
    PARAMS_PATH,
    TF32,
    KernelArrays,
    KernelParams,
    KernelParamsError,
    ParamTable,
    compute_efficiency,
    gemm_dims,
    kernel_arrays,
    load_params,
    memory_efficiency,
    overlap_terms,
    row_floor_s,
    row_tensor_mib,
    row_turns,
)
from .roofline import peak_rate

TABLE_VERSION = "1"
BASELINE_LAUNCH_US = 5.0  # predictor.predict.LAUNCH_US: today's roofline estimate charges 5 us per op

#: Device families: a parameter fitted on one device applies to the others of its family.
FAMILIES: dict[str, tuple[str, ...]] = {
    "ampere": ("a100-40gb", "a100-80gb", "a100-pcie-40gb", "a100-pcie-80gb"),
    "hopper": ("h100-80gb", "h100-nvl-94gb", "h200-141gb"),
}
#: The kernel kinds of the contract (`passes.kernels.KERNEL_KINDS`); the table covers each.
KINDS = ("gemm", "conv", "attention", "elementwise", "reduction", "softmax", "norm", "pooling", "copy", "other")
#: Output tiles of the float32 GEMM kernels named in the NeuSight data (ampere_sgemm_*, sm80_xmma_* tilesize,
#: CUTLASS SIMT), in both orientations; also the candidates for tensor-core kernels until measured.
GEMM_TILES = ((256, 128), (128, 256), (256, 64), (64, 256), (128, 128), (128, 64), (64, 128), (128, 32), (32, 128))
GEMM_TILES += ((64, 64), (64, 32), (32, 64), (32, 32))
ATTENTION_TILES = ((128, 1),)  # 128 query rows x the whole head per work unit (module docstring of kernel_model)

FREE = {
    "gemm": ("e_compute", "launch_us", "k0", "tile_i0"),
    "conv": ("e_compute", "launch_us", "k0", "tile_i0"),
    "attention": ("e_compute", "launch_us", "k0"),
}
LAUNCH_FROM_ELEMENTWISE = ("norm", "softmax")  # kinds whose launch is the elementwise fit's (`fit_with`)
BOUNDS = {"e_compute": (0.01, 1.0), "e_memory": (0.01, 1.0), "launch_us": (0.0, 1000.0), "k0": (0.0, 8192.0)}
BOUNDS["tile_i0"] = (0.0, 1000.0)
BOUNDS["exec_us"] = (0.0, 100.0)
BOUNDS["e_bias"] = (0.2, 1.0)
BOUNDS["e_transposed"] = (0.01, 1.0)
BOUNDS["e_grouped"] = (0.01, 1.0)
BOUNDS["e_grouped_transposed"] = (0.01, 1.0)
BOUNDS["e_strided"] = (0.05, 1.0)
BOUNDS["tail"] = (0.0, 1.0)
BOUNDS["ridge"] = (0.0, 1.0)
BOUNDS["overlap"] = (0.0, 1.0)
#: Free parameters of a group of kernel durations (no launch in the data: `exec_us` instead, the launch kept).
FREE_DURATIONS = {"gemm": ("e_compute", "e_memory", "k0", "tile_i0", "exec_us")}
FREE_DURATIONS["attention"] = ("e_compute", "e_memory", "k0", "exec_us")
#: GEMM kernel durations also fit the wave tail (`tail`: what an idle slot of the last, partial wave costs, as a
#: fraction of a full wave's), the ridge overlap (`ridge`: compute and operand traffic hidden behind each other
#: imperfectly near the ridge; `kernel_model.overlap_terms`) and the epilogue overlap (`overlap`: how much of a
#: tile's fixed cost k0 a persistent kernel hides behind its next tile; `kernel_model.tile_efficiency`), with a
#: robust loss (`ROBUST_GEMM`), on groups of at least `MIN_SHAPE_FIT` kernels: the three terms need many shapes
#: (waves, depths, both sides of the ridge) to be told apart; the H100 sweep's 356 TF32 GEMMs fitted with them
#: predict their largest 20% at 13.3% against 7.1% without. Smaller groups and fitted convolution groups keep
#: `FREE_DURATIONS["gemm"]` / `["conv"]` (tail 1, ridge 0, overlap 0: the classic form) and plain squares; entries
#: `derive_entries` copies from a fitted GEMM entry (ampere's TF32 GEMM; convolutions where no family has a
#: convolution fit) inherit its terms; a family without convolution data takes another family's convolution fit.
FREE_DURATIONS_GEMM = FREE_DURATIONS["gemm"] + ("tail", "ridge", "overlap")
MIN_SHAPE_FIT = 2000
#: Loss of the GEMM kernel-duration fits (scipy `least_squares` `loss`, `f_scale` on the log residual): soft-L1, so
#: a shape range where the library's heuristic picks a slower kernel (e.g. H100 n = k = 8192: m = 536-640 runs at
#: 220 us, m = 648-768 at 170 us) pulls the fit less than squared log errors would. 0.05: errors beyond ~5% count
#: linearly.
ROBUST_GEMM = ("soft_l1", 0.05)
#: Convolutions: the gemm form on the implicit GEMM, plus one factor per convolution class the group holds rows of
#: (`conv_free`): transposed convolutions (cuDNN's data-gradient kernels) and grouped / depthwise ones.
FREE_DURATIONS["conv"] = FREE_DURATIONS["gemm"]
CONV_CLASSES = (
    ("transposed", "e_transposed"),
    ("grouped", "e_grouped"),
    ("grouped_transposed", "e_grouped_transposed"),  # in place of the product of the two (kernel_model)
)
#: Free parameters of a group joining host-timed calls (NeuSight: launch included) and kernel durations (the sweep:
#: none): both the launch and `exec_us` (`fit_with`), and the bias epilogue's `e_bias` (the sweep has GEMMs with
#: and without a fused bias).
FREE_JOINT = {"gemm": ("e_compute", "launch_us", "k0", "tile_i0", "exec_us", "e_bias")}
#: Sweep records evaluated but not fitted, by (kind, dtype) ("*": any): "other" (RNNs, embeddings,
#: interpolation...) is too mixed a kind for one entry (it stays as elementwise). Float32 GEMMs on CUDA cores are
#: fitted jointly on NeuSight's host-timed calls and the sweep's kernel durations (`fit_with`, `FREE_JOINT`).
#: channels_last records of every kind are evaluated, not fitted: the entries hold eager PyTorch's default
#: (contiguous, NCHW) kernels, and the model has no memory-format switch yet.
SWEEP_EVAL_ONLY = (("other", "*"),)
HOST_BOUND = 2.0  # a sweep record whose eager per-call time exceeds this x its graph-timed time is host-bound
#: Whether sweep-fitted entries take their launch from the sweep's eager floors (`sweep_launch`). False: they keep
#: the host-timed fits' launch (`launch_of`), as Vidur's do. The sweep's eager floors (8-28 us by kind on the H100)
#: come from a bare op called in a Python loop; inside a model's forward (nn.Module calls, Python between ops) the
#: floor is higher: with them, 4 of the 5 whole models measured on the H100 (data/h100-80gb/models) were predicted
#: further from their measurement (mean |error| 32.7% against 29.1% with the host-timed launches;
#: docs/kernel-model.md).
SWEEP_LAUNCH = False
MEMORY_FIT_MIN_S = 10e-6  # memory-bound kernel durations shorter than this are left out of their fit (`fit_with`)
MIN_FIT = 12  # fewer records than this: no fit, the entry keeps its default
MIN_CLASS = 3  # a convolution class (`CONV_CLASSES`) with fewer rows than this in a fit group gets no factor

# ---------------------------------------------------------------------------------------------------------
# Published figures the defaults come from (docs/kernel-model.md lists them too).
MAMF_A100 = (
    267.9e12,
    (6912, 16384, 2048),
    "a100-80gb",
    "Maximum Achievable Matmul FLOPS table of S. Bekman's Machine Learning Engineering book "
    "(github.com/stas00/ml-engineering, compute/accelerator): A100 SXM bf16 267.9 TFLOP/s at 6912x16384x2048, "
    "CUDA 12.1",
)
FA2_A100 = (
    0.615,
    "FlashAttention-2 (T. Dao, 2023, arXiv:2307.08691): 50-73% of A100's peak; midpoint 61.5% "
    "(torch's flash SDPA backend is FlashAttention-2)",
)
FA2_H100 = (
    0.35,
    "FlashAttention-3 (J. Shah et al., 2024, arXiv:2407.08608): FlashAttention-2, torch's flash SDPA backend, "
    "reaches about 35% of H100's peak",
)
# Defaults for a family with no measurement and nothing to transfer (not used by the committed table).
FALLBACK_MEMORY = KernelParams(1.0, 0.85, 10.0, source="assumed: no measurement of this family (a fit starting point)")
FALLBACK_GEMM = KernelParams(
    0.8, 0.85, 20.0, GEMM_TILES, 10.0, 32.0, "assumed: no measurement of this family (a fit starting point)"
)

NEUSIGHT_CITATION = (
    "NeuSight: S. Lee, A. Phanishayee, D. Mahajan, Forecasting GPU Performance for Deep Learning Training and "
    "Inference, ASPLOS'25, doi:10.1145/3669940.3707265; data MIT licence, Copyright (c) 2025 Georgia Institute "
    "of Technology and Microsoft Corporation (data/neusight-kernels/LICENSE)"
)


VIDUR_CITATION = (
    "Vidur: A. Agrawal et al., Vidur: A Large-Scale Simulation Framework for LLM Inference, MLSys'24, "
    "arXiv:2405.05465; data (github.com/microsoft/vidur, data/profiling/compute, commit 7d47513) MIT licence, "
    "Copyright (c) Microsoft Corporation (data/vidur-ops/LICENSE)"
)


@dataclass(frozen=True)
class MeasuredKernel:
    """One measured kernel: the contract's fields, its median latency, and where it came from."""

    kind: str
    op: str
    dtype: str
    flops: float
    bytes_read: float
    bytes_written: float
    params: dict
    latency_s: float
    device: str  # key of predictor.devices
    source: str  # data set name ("NeuSight", a JSONL file name, "vidur:<gpu>-<model>")
    split: str = ""  # "train" / "test" where the data set has a split
    includes_launch: bool = True  # False: a kernel duration from a profiler trace (no host dispatch, no launch)
    layout: str = "contiguous"  # sweep records: "contiguous" or "channels_last" (conv, norm, pooling)
    eager_s: float | None = None  # sweep records: per-call time of eager calls back to back (launch included)
    shape_key: str = ""  # sweep records: the problem (op and shape) whatever its dtype, TF32 flag or backend
    measured_dtype: str = ""  # sweep records fitted under another dtype's entry (bfloat16 GEMMs): the dtype they ran in


# --------------------------------------------------------------------------------------------------- readers
_NEUSIGHT_FILES = {
    "train-elem.csv": "train",
    "test-elem.csv": "test",
    "train-softmax.csv": "train",
    "test-softmax.csv": "test",
    "train-ln.csv": "train",
    "test-ln.csv": "test",
    "test-bmm.csv": "test",
    "test-linear.csv": "test",
}
# NeuSight op -> (kind, preflight op name, tensors read per element, FLOPs per element (passes.costs convention))
_NEUSIGHT_VEC = {
    "add": ("elementwise", "add", 2, 1),
    "mul": ("elementwise", "multiply", 2, 1),
    "div": ("elementwise", "divide", 2, 1),
    "pow": ("elementwise", "power", 2, 1),
    "addu": ("elementwise", "add", 1, 1),
    "mulu": ("elementwise", "multiply", 1, 1),
    "divu": ("elementwise", "divide", 1, 1),
    "powu": ("elementwise", "power", 1, 1),
    "relu": ("elementwise", "relu", 1, 1),
    "tanh": ("elementwise", "tanh", 1, 1),
    "gelu": ("elementwise", "gelu", 1, 5),
    "softmax": ("softmax", "softmax", 1, 5),
    "ln": ("norm", "layer_norm", 1, 7),
}


def _device_by_name(name: str) -> str:
    for d in DEVICES.values():
        if d.name == name.strip():
            return d.key
    raise KernelParamsError(f"NeuSight device {name!r} is not in predictor/devices.py")


def _neusight_row(row: dict, split: str) -> MeasuredKernel:
    """One NeuSight CSV row as a kernel of the contract (float32; sizes from its B, M, N, K or B, H columns)."""
    op, device = row["OPName"], _device_by_name(row["Device"])
    latency = float(row["Latency"]) * 1e-3
    if op == "bmm":  # bmm(randn(B, M, N), randn(B, N, K)): output B x M x K, reduction over N
        b, m, red, n = (int(row[c]) for c in "BMNK")
        flops, read, written = 2 * b * m * n * red, 4 * (b * m * red + b * red * n), 4 * b * m * n
        return MeasuredKernel("gemm", "matmul", "float32", flops, read, written, dict(b=b, m=m, n=n, k=red), latency,
                              device, "NeuSight", split)  # fmt: skip
    if op == "linear":  # nn.Linear(N, K, bias=True) on (B, M, N): one addmm of (B*M, N) x (N, K) + bias
        b, m, red, n = (int(row[c]) for c in "BMNK")
        rows = b * m
        flops = 2 * rows * n * red + rows * n  # the bias add counted as 1 FLOP per output element
        read, written = 4 * (rows * red + red * n + n), 4 * rows * n
        return MeasuredKernel("gemm", "linear", "float32", flops, read, written,
                              dict(b=1, m=rows, n=n, k=red, bias=True), latency, device, "NeuSight",
                              split)  # fmt: skip
    if op not in _NEUSIGHT_VEC:
        raise KernelParamsError(f"unknown NeuSight operator {op!r}")
    kind, name, inputs, per = _NEUSIGHT_VEC[op]
    rows, h = int(row["B"]), int(row["H"])
    numel = rows * h
    read, written = 4 * inputs * numel, 4 * numel
    if kind == "norm":  # + weight and bias read, + mean and rstd (one float per row each) written
        read, written = read + 8 * h, written + 8 * rows
    return MeasuredKernel(kind, name, "float32", per * numel, read, written, {"numel": numel}, latency, device,
                          "NeuSight", split)  # fmt: skip


def read_neusight(folder: Path | str) -> list[MeasuredKernel]:
    """The NeuSight measurements of `folder` (its README: what each file holds) as measured kernels."""
    folder = Path(folder)
    out: list[MeasuredKernel] = []
    found = [f for f in _NEUSIGHT_FILES if (folder / f).is_file()]
    if not found:
        raise KernelParamsError(f"{folder} holds none of the NeuSight files ({', '.join(_NEUSIGHT_FILES)})")
    for name in found:
        with open(folder / name, newline="") as fh:
            for i, row in enumerate(csv.DictReader(fh), start=2):
                try:
                    out.append(_neusight_row(row, _NEUSIGHT_FILES[name]))
                except (KeyError, ValueError) as e:
                    raise KernelParamsError(f"{folder / name}:{i}: {e}") from e
    return out


#: Vidur file prefix -> device key. The A100 is taken as the SXM part (a100-80gb): the source does not say which
#: form factor measured the compute files (data/vidur-ops/README.md); both have the same tensor-core peak.
_VIDUR_GPUS = {"h100": "h100-80gb", "a100": "a100-80gb"}
VIDUR_GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
VIDUR_MEMORY = ("input_layernorm", "post_attention_layernorm", "add")


def _vidur_kernels(row: dict, device: str, source: str) -> list[MeasuredKernel]:
    """The kernels of one Vidur row (one decoder layer at `num_tokens` tokens, tensor-parallel degree TP).

    GEMMs (`nn.Linear` in float16, cuBLAS): m = tokens, (k, n) = (h, (heads + 2 kv heads) d / TP) for QKV,
    (heads d / TP, h) for the attention output, (h, 2 f / TP) (gated) or (h, f / TP) for up, (f / TP, h) for down;
    2 m n k FLOPs, 2 (m k + k n) bytes read, 2 m n written (a bias, where the model has one, is left out: n of
    m n k). Memory-bound kernels, 2 bytes an element: the norms (RMSNorm fused, or LayerNorm for a non-gated
    MLP: x and the weight(s) read, y written) as `norm`; the residual `add` (2 read, 1 written), torch's own
    elementwise kernel, as `elementwise`. Times are the median kernel durations (ms), without launch. Not mapped:
    the MLP activation (a custom fused SiLU-and-multiply at about 0.5-0.57 of the datasheet bandwidth where the
    add moves its bytes at 0.87-0.97; eager PyTorch runs silu and multiply as torch kernels instead), rope (a
    custom in-place kernel) and the embedding lookup (a gather).
    """
    tokens, tp = int(row["num_tokens"]), int(row["num_tensor_parallel_workers"])
    heads, kv, h, f = (int(row[c]) for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd"))
    gated = row["use_gated_mlp"].strip() == "True"
    d = h // heads
    shapes = {
        "attn_pre_proj": (h, (heads + 2 * kv) * d // tp),
        "attn_post_proj": (heads * d // tp, h),
        "mlp_up_proj": (h, (2 if gated else 1) * f // tp),
        "mlp_down_proj": (f // tp, h),
    }
    m = tokens
    out: list[MeasuredKernel] = []

    def add(kind: str, op: str, flops: float, read: float, written: float, params: dict) -> None:
        value = row.get(f"time_stats.{op}.median", "")
        if value.strip():
            out.append(MeasuredKernel(kind, op, "float16", flops, read, written, params, float(value) * 1e-3,
                                      device, source, includes_launch=False))  # fmt: skip

    for op, (k, n) in shapes.items():
        add("gemm", op, 2 * m * n * k, 2 * (m * k + k * n), 2 * m * n, {"b": 1, "m": m, "n": n, "k": k})
    norm_weights = h if gated else 2 * h  # RMSNorm: a weight; LayerNorm: weight and bias
    for op in ("input_layernorm", "post_attention_layernorm"):
        add("norm", op, 4 * m * h, 2 * (m * h + norm_weights), 2 * m * h, {"numel": m * h})
    add("elementwise", "add", m * h, 4 * m * h, 2 * m * h, {"numel": m * h})
    return out


def read_vidur(folder: Path | str) -> list[MeasuredKernel]:
    """The Vidur float16 layer measurements of `folder` (`<gpu>-<model>.csv`, data/vidur-ops/README.md)."""
    folder = Path(folder)
    files = sorted(f for f in folder.glob("*.csv") if f.name.split("-", 1)[0] in _VIDUR_GPUS)
    if not files:
        raise KernelParamsError(f"{folder} holds no Vidur files (<gpu>-<model>.csv, gpu one of {sorted(_VIDUR_GPUS)})")
    out: list[MeasuredKernel] = []
    for path in files:
        device = _VIDUR_GPUS[path.name.split("-", 1)[0]]
        with open(path, newline="") as fh:
            for i, row in enumerate(csv.DictReader(fh), start=2):
                try:
                    out.extend(_vidur_kernels(row, device, "vidur:" + path.stem))
                except (KeyError, ValueError, ZeroDivisionError, AttributeError) as e:
                    raise KernelParamsError(f"{path}:{i}: {e}") from e
    return out


_JSONL_FIELDS = ("kind", "op", "dtype", "flops", "bytes_read", "bytes_written", "params", "latency_ms", "device")


def read_jsonl(path: Path | str) -> list[MeasuredKernel]:
    """Records of a kernel sweep (module docstring: the fields), one JSON object per line."""
    path = Path(path)
    out: list[MeasuredKernel] = []
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise KernelParamsError(f"cannot read {path}: {e}") from e
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise KernelParamsError(f"{where}: not JSON ({e})") from e
        if not isinstance(rec, dict):
            raise KernelParamsError(f"{where}: a record must be a JSON object")
        missing = [f for f in _JSONL_FIELDS if f not in rec]
        if missing:
            raise KernelParamsError(f"{where}: missing field(s) {', '.join(missing)}")
        if rec["kind"] not in KINDS:
            raise KernelParamsError(f"{where}: unknown kind {rec['kind']!r} (kinds: {', '.join(KINDS)})")
        try:
            device = get_device(str(rec["device"])).key
        except UnknownDeviceError as e:
            raise KernelParamsError(f"{where}: {e}") from e
        try:
            nums = [float(rec[f]) for f in ("flops", "bytes_read", "bytes_written", "latency_ms")]
        except (TypeError, ValueError) as e:
            raise KernelParamsError(f"{where}: flops, bytes and latency_ms must be numbers") from e
        if min(nums[:3]) < 0 or not nums[3] > 0 or not all(np.isfinite(nums)):
            raise KernelParamsError(f"{where}: flops and bytes must be >= 0 and latency_ms > 0")
        if not isinstance(rec["params"], dict):
            raise KernelParamsError(f"{where}: params must be an object")
        out.append(
            MeasuredKernel(
                str(rec["kind"]),
                str(rec["op"]),
                str(rec["dtype"]),
                nums[0],
                nums[1],
                nums[2],
                rec["params"],
                nums[3] * 1e-3,
                device,
                path.name,
                str(rec.get("split", "")),
            )
        )
    return out


SWEEP_SCHEMA = "preflight.kernel-measurement/1"  # predictor.measure.kernels.RECORD_SCHEMA


def _out_spatial(p: dict) -> list[int]:
    """Output size per spatial dim of a sweep conv record (`in`, `k`, `s`, `p`, `d`, and `op` for a transposed
    conv: torch's formulas)."""
    dims = zip(p["in"], p["k"], p["s"], p["p"], p["d"], strict=True)
    if "op" in p:  # conv_transpose: (in - 1) s - 2 p + d (k - 1) + output_padding + 1
        return [(i - 1) * s - 2 * q + d * (k - 1) + o + 1 for (i, k, s, q, d), o in zip(dims, p["op"], strict=True)]
    return [(i + 2 * q - d * (k - 1) - 1) // s + 1 for i, k, s, q, d in dims]


def sweep_params(kind: str, params: dict) -> dict:
    """A sweep record's params (predictor.measure.kernel_list names) in the kernel contract's names, which
    `kernel_model.gemm_dims` reads: gemm `b, m, n, k` as they are; conv `n, c, o, g, k, in` -> `n, c_in, c_out,
    groups, kernel, out_spatial`; attention `b, hq, s, t, d` -> `b, h, s, t, d`; a group norm's `n, c, g, hw` gain
    `rows` (n x g) and `numel` (`kernel_model.row_floor_s`). Others unchanged."""
    if kind == "conv":
        return {"n": params["n"], "c_in": params["c"], "c_out": params["o"], "groups": params.get("g", 1),
                "kernel": list(params["k"]), "out_spatial": _out_spatial(params),
                **({"transposed": True} if "op" in params else {})}  # fmt: skip
    if kind == "attention":
        return {"b": params["b"], "h": params["hq"], "s": params["s"], "t": params["t"], "d": params["d"]}
    if kind == "norm" and {"n", "c", "g", "hw"} <= params.keys():  # group norm: N x groups rows, one per block
        n, c, g, hw = (int(params[k]) for k in ("n", "c", "g", "hw"))
        return {**params, "rows": n * g, "numel": n * c * hw}
    return dict(params)


def sweep_entry(rec: dict) -> tuple[str, str] | str:
    """(kind, table dtype) a sweep record is fitted under, or why it is left out (a short reason).

    - float32 gemm with `tf32` True (`allow_tf32` on cuBLAS: `set_float32_matmul_precision("high")`) -> the
      table's `tf32` entry; `tf32` False or None (torch's default) -> `float32` (FP32 CUDA cores);
    - float32 conv with `tf32` True or None (cuDNN's TF32 is on by default) -> `float32` (the model's float32
      conv runs on TF32 tensor cores, `roofline.peak_rate`); `tf32` False -> left out (the model has no switch
      for `cudnn.allow_tf32 = False`);
    - attention: only `backend` "auto" (what torch picks, `picked`) where it picked a fused kernel (flash,
      efficient, cudnn) -> the fused attention entry; "auto" that picked math, and the forced backends, are left
      out (the math backend is costed as its decomposed kernels: matmul, softmax, matmul);
    - bfloat16 gemm -> `float16` (the same tensor cores at the same peak; fitted alone, the sweep's bfloat16
      GEMMs, none larger than the zoo's layers, put e_compute at its bound 1.0 and the 8192^3 bf16 matmul measured
      on this project's H100 15% faster than it runs; pooled with the float16 GEMMs and Vidur's, it stays within
      the 12% of tests/test_kernel_model.py);
    - channels_last records keep their kind's entry (`layout` kept for the evaluation; not fitted).
    """
    kind, dtype = rec["kind"], rec["dtype"]
    if kind == "attention":
        if rec.get("backend") != "auto":
            return f"attention backend {rec.get('backend')} forced"
        if rec.get("picked") not in ("flash", "efficient", "cudnn"):
            return f"attention auto picked {rec.get('picked')}"
    if kind == "gemm" and dtype == "bfloat16":  # same tensor cores, same peak: pooled with float16
        return kind, "float16"
    if dtype == "float32" and kind == "gemm" and rec.get("tf32") is True:
        return kind, TF32
    if dtype == "float32" and kind == "conv" and rec.get("tf32") is False:
        return "conv with cuDNN TF32 off"
    return kind, dtype


def read_sweep(path: Path | str) -> list[MeasuredKernel]:
    """The ok, graph-timed records of a kernel sweep (`python -m predictor.measure.kernels`, data/README.md:
    `*.jsonl.gz` or `*.jsonl` files of `SWEEP_SCHEMA`) as kernel durations (`includes_launch` False: CUDA-graph
    replays carry no launch), each under the entry `sweep_entry` names; `eager_s` keeps the eager per-call time."""
    from .measure.kernels import iter_records  # deferred: the sweep's module imports nothing heavy at top level

    path = Path(path)
    if not path.exists():
        raise KernelParamsError(f"no such file or folder: {path}")
    out: list[MeasuredKernel] = []
    for rec in iter_records([path], SWEEP_SCHEMA):
        if rec.get("status") != "ok" or rec.get("timing") != "cuda-graph" or rec.get("device") not in DEVICES:
            continue
        entry = sweep_entry(rec)
        if isinstance(entry, str):
            continue
        kind, dtype = entry
        try:
            latency = float(rec["latency_ms"]["median"]) * 1e-3
            eager = rec.get("eager_ms")
            params = sweep_params(kind, rec["params"])
            if kind == "copy" and rec["op"] == "permute":  # `.permute(...).contiguous()`: a strided gather
                params["strided"] = True
            shape = json.dumps([rec["op"], rec["params"]], sort_keys=True)
            pooled = "" if dtype in (rec["dtype"], TF32) else str(rec["dtype"])  # bfloat16 GEMMs under float16
            out.append(MeasuredKernel(kind, str(rec["op"]), dtype, float(rec["flops"]), float(rec["bytes_read"]),
                                      float(rec["bytes_written"]), params, latency, rec["device"],
                                      "sweep:" + rec["device"], includes_launch=False,
                                      layout=str(rec.get("layout") or "contiguous"),
                                      eager_s=None if eager is None else float(eager) * 1e-3,
                                      shape_key=hashlib.sha256(shape.encode()).hexdigest()[:16],
                                      measured_dtype=pooled))  # fmt: skip
        except (KeyError, TypeError, ValueError) as e:
            raise KernelParamsError(f"{path}: record {rec.get('id')}: {e}") from e
    if not out:
        raise KernelParamsError(f"{path} holds no ok graph-timed kernel records ({SWEEP_SCHEMA})")
    return out


def _is_sweep(path: Path) -> bool:
    if path.is_dir():
        return any(path.rglob("*.jsonl.gz"))
    if path.name.endswith(".gz"):
        return True
    try:
        with open(path) as fh:
            return SWEEP_SCHEMA in fh.readline()
    except (OSError, UnicodeDecodeError):
        return False


def read_data(path: Path | str) -> list[MeasuredKernel]:
    """A NeuSight folder, a Vidur folder, a kernel sweep (`read_sweep`: a `.jsonl.gz` file, a folder holding
    such files, or a `.jsonl` of its schema), a JSONL file, or a folder of JSONL files."""
    path = Path(path)
    if path.exists() and _is_sweep(path):
        return read_sweep(path)
    if path.is_dir():
        if any((path / f).is_file() for f in _NEUSIGHT_FILES):
            return read_neusight(path)
        if any(f.name.split("-", 1)[0] in _VIDUR_GPUS for f in path.glob("*.csv")):
            return read_vidur(path)
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise KernelParamsError(f"{path} holds neither NeuSight CSV files nor *.jsonl kernel records")
        return [r for f in files for r in read_jsonl(f)]
    if path.is_file():
        return read_jsonl(path)
    raise KernelParamsError(f"no such file or folder: {path}")


# ---------------------------------------------------------------------------------------------------- fitting
def lookup_kind(r: MeasuredKernel) -> str:
    """The kind a record's parameters are looked up under (math-fallback attention is a gemm)."""
    return gemm_dims(r.kind, r.params)[0] if r.kind in GEMM_LIKE else r.kind


def family_of(device_key: str) -> str:
    for fam, keys in FAMILIES.items():
        if device_key in keys:
            return fam
    raise KernelParamsError(f"device {device_key!r} is in no family of predictor.kernel_fit.FAMILIES")


@dataclass
class Group:
    """Measured kernels of one (kind, dtype) as arrays, with each row's device resources."""

    records: list[MeasuredKernel]
    arrays: KernelArrays
    peak: np.ndarray  # FLOP/s (peak_rate of the row's device)
    bandwidth: np.ndarray  # bytes/s
    sms: np.ndarray
    latency: np.ndarray  # seconds
    kind: str = ""
    dtype: str = ""
    with_launch: np.ndarray | None = None  # (N,) bool: the measurement includes the launch (None: every row)

    @classmethod
    def of(cls, records: Sequence[MeasuredKernel]) -> Group:
        records = list(records)
        arrays = kernel_arrays(records)
        devs = [DEVICES[r.device] for r in records]
        kinds = {str(k) for k in arrays.kind}
        dtypes = {r.dtype for r in records}
        if len(kinds) != 1 or len(dtypes) != 1:
            raise KernelParamsError(f"a fit group needs one kind and dtype, got {sorted(kinds)} {sorted(dtypes)}")
        kind, dtype = kinds.pop(), dtypes.pop()
        cat = _CATEGORY.get(kind, kind)
        if dtype == TF32:  # float32 on TF32 tensor cores
            peak = np.array([peak_rate(d, cat, "float32", tf32_matmul=True) for d in devs])
        else:
            peak = np.array([peak_rate(d, cat, dtype) for d in devs])
        return cls(
            records,
            arrays,
            peak,
            np.array([d.bandwidth for d in devs]),
            np.array([d.sms for d in devs], dtype=np.float64),
            np.array([r.latency_s for r in records]),
            kind,
            dtype,
            np.array([r.includes_launch for r in records], dtype=bool),
        )

    def subset(self, index: np.ndarray) -> Group:
        return Group(
            [self.records[i] for i in index],
            self.arrays.subset(index),
            self.peak[index],
            self.bandwidth[index],
            self.sms[index],
            self.latency[index],
            self.kind,
            self.dtype,
            None if self.with_launch is None else self.with_launch[index],
        )

    def size(self) -> np.ndarray:
        """Problem size: FLOPs for gemm-like kinds, bytes for the others."""
        return self.arrays.flops if self.kind in GEMM_LIKE else self.arrays.nbytes

    @property
    def mixed(self) -> bool:
        """True when the group joins host-timed calls (launch in the time) and kernel durations (none)."""
        return self.with_launch is not None and bool(self.with_launch.any()) and not self.with_launch.all()

    @property
    def timed_with_launch(self) -> bool:
        """True when some row's time includes the launch (host-timed calls: the data measures a launch), False when
        none does (profiler kernel durations). A mixed group (`mixed`) is fitted jointly only where `FREE_JOINT`
        names its kind; otherwise it is refused."""
        if self.with_launch is None or self.with_launch.all():
            return True
        if not self.with_launch.any():
            return False
        if self.kind in FREE_JOINT:
            return True
        raise KernelParamsError(f"{self.kind} {self.dtype}: a fit group mixes host-timed calls and kernel durations")

    def host_timed(self) -> Group:
        """The rows whose time includes the launch."""
        return self if self.with_launch is None else self.subset(np.flatnonzero(self.with_launch))

    def predict(self, p: KernelParams) -> np.ndarray:
        """Predicted time per row (seconds): the kernel's execution, plus the launch where the row's time has it."""
        compute = self.arrays.flops / (self.peak * compute_efficiency(self.arrays, p, self.sms))
        memory = self.arrays.nbytes / (self.bandwidth * memory_efficiency(self.arrays, p))
        compute, memory = overlap_terms(compute, memory, p.ridge)
        memory = np.maximum(memory, row_floor_s(self.arrays, p, self.sms))
        launch = p.launch_us * 1e-6 if self.with_launch is None else np.where(self.with_launch, p.launch_us * 1e-6, 0)
        return np.maximum(compute, memory) + p.exec_us * 1e-6 + launch

    def bound(self) -> np.ndarray:
        return np.maximum(self.arrays.flops / self.peak, self.arrays.nbytes / self.bandwidth)


def free_parameters(kind: str) -> tuple[str, ...]:
    return FREE.get(kind, ("e_memory", "launch_us"))


def fit_entry(
    group: Group,
    base: KernelParams,
    names: Sequence[str] | None = None,
    loss: tuple[str, float] = ("linear", 1.0),
    e_memory_starts: Sequence[float] = (0.8,),
) -> KernelParams:
    """Least squares in log space over `names` (default: the kind's free parameters); the rest as in `base`.
    `loss`: scipy `least_squares`' (loss, f_scale) (default: plain squares). `e_memory_starts`: where e_memory
    starts (each with every k0 start), the best end kept."""
    from scipy.optimize import least_squares  # deferred: only fitting needs scipy

    names = tuple(names or free_parameters(group.kind))
    lo = np.array([BOUNDS[n][0] for n in names])
    hi = np.array([BOUNDS[n][1] for n in names])
    log_y = np.log(group.latency)

    def make(x: np.ndarray) -> KernelParams:
        return replace(base, **{n: float(v) for n, v in zip(names, x, strict=True)})

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(group.predict(make(x))) - log_y

    starts = []
    for e_memory in e_memory_starts if "e_memory" in names else (0.8,):
        for k0 in (1.0, 64.0, 512.0) if "k0" in names else (0.0,):
            start = {"e_compute": 0.7, "e_memory": e_memory, "launch_us": 10.0, "k0": k0, "tile_i0": 16.0,
                     "exec_us": 4.0, "e_bias": 0.9, "e_transposed": 0.5, "e_grouped": 0.5, "e_strided": 0.7,
                     "e_grouped_transposed": 0.5, "tail": 0.5, "ridge": 0.2, "overlap": 0.5}  # fmt: skip
            starts.append(np.clip([start[n] for n in names], lo + 1e-9, hi - 1e-9))
    best = None
    for x0 in starts:
        res = least_squares(residual, x0, bounds=(lo, hi), x_scale="jac", method="trf", loss=loss[0], f_scale=loss[1])
        if best is None or res.cost < best.cost - 1e-12:
            best = res
    return make(best.x)


def ape(pred: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(mean, median) absolute percentage error, in percent."""
    a = np.abs(pred / y - 1.0) * 100.0
    return float(a.mean()), float(np.median(a))


# ---------------------------------------------------------------------------------------------------- table
def fit_with(group: Group, elementwise: KernelParams | None, launch_us: float | None = None) -> KernelParams:
    """Fit one group; a gemm-like fit keeps the memory efficiency of `elementwise` (a float32 elementwise fit
    of the same family, or None: the fallback), which its own data rarely identifies.

    A group of kernel durations (`Group.timed_with_launch` False: no launch in the times) fits the execution
    alone: gemm `e_compute, e_memory, k0, tile_i0, exec_us` (small GEMMs are memory-bound, weights streamed once,
    so the data identifies e_memory), other kinds `e_memory, exec_us`; its launch is `launch_us` (the family's
    host-timed fit of the same kind, else of elementwise: `fit_groups`), or the fallback's.
    """
    if not group.timed_with_launch:
        launch = FALLBACK_MEMORY.launch_us if launch_us is None else launch_us
        if group.kind == "gemm":
            base = replace(FALLBACK_GEMM, launch_us=launch)
            if len(group.latency) >= MIN_SHAPE_FIT:
                return fit_entry(group, base, FREE_DURATIONS_GEMM, ROBUST_GEMM)
            return fit_entry(group, base, FREE_DURATIONS["gemm"])
        if group.kind == "conv":
            base = replace(FALLBACK_GEMM, launch_us=launch)
            return fit_entry(group, base, conv_free(group))
        if group.kind == "attention":
            # a low e_memory start too: nearly every attention record is compute-bound, e_memory barely identified,
            # and from 0.8 alone the trust-region solver stops on a worse optimum on some machines (H100 float32
            # attention on the 2-core dev machine of 28 November 2026: cost 3.39 against 3.20), which machine
            # depending on the floating point's last bits
            base = KernelParams(0.5, 0.8, launch, ATTENTION_TILES, 0.0, 32.0)
            return fit_entry(group, base, FREE_DURATIONS["attention"], e_memory_starts=(0.8, 0.3))
        # only kernels of at least MEMORY_FIT_MIN_S: shorter ones run partly out of the L2 cache (their inputs were
        # just written), faster than DRAM, and pull e_memory up for the large kernels; the eager sum charges them
        # the launch floor anyway (max(execution, launch), launch >= 16 us)
        sweep = all(r.source.startswith("sweep:") for r in group.records)  # graph-timed: fit on every size
        keep = np.flatnonzero(group.latency >= (0.0 if sweep else MEMORY_FIT_MIN_S))
        sub = group.subset(keep) if len(keep) >= MIN_FIT else group
        p = fit_entry(sub, replace(FALLBACK_MEMORY, launch_us=launch), ("e_memory", "exec_us"))
        strided = sub.arrays.strided
        if sub.kind == "copy" and strided is not None and strided.sum() >= MIN_FIT and (~strided).sum() >= MIN_FIT:
            # copies of strided views (the sweep's permutes): their own factor on the pooled fit's e_memory, fitted
            # on them alone. The pooled e_memory is kept: fitted on the contiguous copies alone it rises to ~0.97
            # (small graph-replayed copies run out of the L2 cache) and large contiguous copies come out too fast
            p = fit_entry(sub.subset(np.flatnonzero(strided)), p, ("e_strided",))
        return p
    e_memory = (elementwise or FALLBACK_MEMORY).e_memory
    if group.mixed:
        # host-timed calls (time = execution + exec + launch) and kernel durations (execution + exec) together:
        # the durations pin exec_us (the small kernels' fixed device time), the calls' surplus over them is the
        # launch (host dispatch); e_bias from the GEMMs measured with and without a fused bias
        return fit_entry(group, replace(FALLBACK_GEMM, e_memory=e_memory), FREE_JOINT[group.kind])
    if group.kind in ("gemm", "conv"):
        return fit_entry(group, replace(FALLBACK_GEMM, e_memory=e_memory))
    if group.kind == "attention":
        return fit_entry(group, KernelParams(0.5, e_memory, 20.0, ATTENTION_TILES, 0.0, 32.0))
    if group.kind in LAUNCH_FROM_ELEMENTWISE and elementwise is not None:
        # NeuSight's softmax and layer-norm kernels are all large (>= 18 MB moved): their data cannot tell a
        # launch from a lower bandwidth, and a free fit puts tens of microseconds into the launch, which every
        # small norm of a model would then pay. The launch (host dispatch + launch latency) is the same for every
        # kind of kernel: keep the elementwise fit's, measured on small kernels, and fit e_memory alone.
        return fit_entry(group, replace(FALLBACK_MEMORY, launch_us=elementwise.launch_us), ("e_memory",))
    return fit_entry(group, FALLBACK_MEMORY)


def conv_free(group: Group) -> tuple[str, ...]:
    """Free parameters of a convolution group of kernel durations: the gemm form's, and the class factor of each
    class (`CONV_CLASSES`) with at least MIN_CLASS rows in the group (fewer: the factor stays 1, as a dense
    convolution)."""
    rows = {flag: getattr(group.arrays, flag) for flag, _ in CONV_CLASSES}
    extra = tuple(name for flag, name in CONV_CLASSES if rows[flag] is not None and rows[flag].sum() >= MIN_CLASS)
    return FREE_DURATIONS["conv"] + extra


def fitted_records(records: Sequence[MeasuredKernel]) -> list[MeasuredKernel]:
    """`records` less the sweep records `SWEEP_EVAL_ONLY` keeps out of the fit (and channels_last ones)."""
    EVAL_ONLY = SWEEP_EVAL_ONLY
    return [
        r
        for r in records
        if not r.source.startswith("sweep:")
        or (r.layout == "contiguous" and not any(lookup_kind(r) == k and d in ("*", r.dtype) for k, d in EVAL_ONLY))
    ]


def sweep_launch(records: Sequence[MeasuredKernel]) -> dict[tuple[str, str], float]:
    """Launch (us) per (family, kind) from the sweep records' eager times: the median eager per-call time of the
    host-bound records (eager > HOST_BOUND x graph-timed), over every dtype of the kind.

    The model charges a kernel inside an eager run max(execution, launch) (`KernelTimes.eager_s`): the launch is
    the floor the host's dispatch puts under each kernel, which is what a host-bound kernel's eager per-call time
    measures (its execution hides behind the dispatch of the next call)."""
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in records:
        if r.source.startswith("sweep:") and r.eager_s and r.eager_s > HOST_BOUND * r.latency_s:
            by[(family_of(r.device), lookup_kind(r))].append(r.eager_s * 1e6)
    return {k: float(np.median(v)) for k, v in sorted(by.items()) if len(v) >= MIN_FIT}


def fit_groups(records: Sequence[MeasuredKernel]) -> dict[tuple[str, str, str], KernelParams]:
    """Fit every (family, kind, dtype) with at least MIN_FIT records.

    Host-timed groups go first, memory-bound kinds before gemm-like ones; a gemm-like fit keeps the family's
    float32 elementwise e_memory, or, where the family has none, another family's (the same transfer
    `derive_entries` makes for the elementwise entry). Groups of kernel durations (no launch in the data) go last
    and take their launch from `sweep_launch` where the group holds sweep records, else from `launch_of` over the
    host-timed fits. Sweep records of `SWEEP_EVAL_ONLY` are not fitted.
    """
    launches = sweep_launch(records)
    records = fitted_records(records)
    buckets: dict[tuple[str, str, str], list[MeasuredKernel]] = defaultdict(list)
    for r in records:
        buckets[(family_of(r.device), lookup_kind(r), r.dtype)].append(r)
    groups = {key: Group.of(recs) for key, recs in buckets.items() if len(recs) >= MIN_FIT}
    fitted: dict[tuple[str, str, str], KernelParams] = {}
    host: dict[tuple[str, str, str], KernelParams] = {}  # the host-timed fits (their launch is measured)
    for key in sorted(groups, key=lambda k: (not groups[k].timed_with_launch, k[1] in GEMM_LIKE, k)):
        if groups[key].timed_with_launch:
            elem = elementwise_of(fitted, key[0])
            fitted[key] = fit_with(groups[key], elem)
            # the launch other entries take (`launch_of`) stays the host-timed calls' own fit, launch and all
            host[key] = fit_with(groups[key].host_timed(), elem) if groups[key].mixed else fitted[key]
        else:
            sweep = any(r.source.startswith("sweep:") for r in groups[key].records)
            launch = launches.get(key[:2]) if sweep and SWEEP_LAUNCH else None
            fitted[key] = fit_with(groups[key], None, launch_of(host, *key[:2]) if launch is None else launch)
    return fitted


def elementwise_of(fitted: dict[tuple[str, str, str], KernelParams], fam: str) -> KernelParams | None:
    """The host-timed float32 elementwise fit a host-timed gemm-like fit of `fam` takes its e_memory from: the
    family's, else another's (fits of kernel durations, `exec_us` > 0, are passed over: `fit_groups` fits them
    after the host-timed groups)."""
    return next((fitted[(f, "elementwise", "float32")] for f in (fam, *FAMILIES)
                 if (f, "elementwise", "float32") in fitted
                 and not fitted[(f, "elementwise", "float32")].exec_us), None)  # fmt: skip


def launch_of(fitted: dict[tuple[str, str, str], KernelParams], fam: str, kind: str) -> float | None:
    """The launch for a fit on kernel durations of (`fam`, `kind`): the host-timed float32 fit of that kind, else
    of elementwise, in this family, else in another (None: no host-timed fit at all). The launch is what a call
    from Python costs besides the kernel's execution, the same for every dtype."""
    for k in (kind, "elementwise"):
        for f in (fam, *FAMILIES):
            p = fitted.get((f, k, "float32"))
            if p is not None and not p.exec_us:
                return p.launch_us
    return None


def calibrate_e_compute(p: KernelParams, device: Device, shape: tuple[int, int, int], rate: float, dtype: str) -> float:
    """The e_compute with which the model's rate on one m x n x k GEMM equals the measured `rate` (FLOP/s)."""
    m, n, k = shape
    one = KernelArrays(
        kind=np.array(["gemm"]),
        dtype=np.array([dtype]),
        flops=np.array([2.0 * m * n * k]),
        nbytes=np.zeros(1),
        b=np.ones(1),
        m=np.array([float(m)]),
        n=np.array([float(n)]),
        k=np.array([float(k)]),
    )
    shape_factor = compute_efficiency(one, replace(p, e_compute=1e-3), float(device.sms))[0] / 1e-3
    return min(1.0, rate / peak_rate(device, "matmul", dtype) / shape_factor)


def derive_entries(fitted: dict[tuple[str, str, str], KernelParams]) -> dict[tuple[str, str, str], KernelParams]:
    """The whole table: the fits, then every other (family, kind, dtype) by the rules below.

    Every derived entry's source starts with "transfer:" (another family's fit), "default:" (a published or
    measured figure) or "assumed:" (a stated assumption), followed by the source of what it was derived from.
    A fit always wins over a derived entry of the same key.
    """
    table = dict(fitted)

    def other(fam: str, kind: str, dtype: str) -> tuple[str, KernelParams] | None:
        return next(((f, fitted[(f, kind, dtype)]) for f in FAMILIES if f != fam and (f, kind, dtype) in fitted), None)

    def put(key: tuple[str, str, str], p: KernelParams, source: str) -> None:
        if key not in table:
            table[key] = replace(p, source=source)

    for fam in FAMILIES:
        # memory-bound kinds: float32 fit, else another family's; one efficiency for every dtype (bytes carry it)
        for kind in ("elementwise", "softmax", "norm"):
            src = other(fam, kind, "float32")
            if src is not None:
                put((fam, kind, "float32"), src[1], f"transfer: the {src[0]} fit (no {fam} data); {src[1].source}")
            own = [table[k] for k in sorted(table) if k[:2] == (fam, kind) and k[2] != "*"]
            base = table.get((fam, kind, "float32"), own[0] if own else None)
            half = table.get((fam, kind, "float16"))
            if half is not None:
                put((fam, kind, "bfloat16"), half, f"assumed: bfloat16 as float16 (2 bytes an element); {half.source}")
            if base is not None:
                put((fam, kind, "*"), base, f"assumed: every dtype as this fit (bytes carry the dtype); {base.source}")
            elif kind == "elementwise":
                put((fam, kind, "*"), FALLBACK_MEMORY, FALLBACK_MEMORY.source)
        elem = table[(fam, "elementwise", "*")]
        for kind in ("softmax", "norm", "reduction", "pooling", "other"):
            put((fam, kind, "*"), elem, f"assumed: as elementwise; {elem.source}")
        h16 = fitted.get((fam, "copy", "float16"))
        if h16 is not None:  # bytes carry the dtype: bfloat16 copies (and their strided gathers) as the float16 fit
            put((fam, "copy", "bfloat16"), h16, f"assumed: bfloat16 as float16 (2 bytes an element); {h16.source}")
        measured = [d for d in FAMILIES[fam] if DEVICES[d].measured_bandwidth]
        if measured:
            share = float(np.mean([DEVICES[d].measured_bandwidth / DEVICES[d].bandwidth for d in measured]))
            text = (
                f"default: e_memory = a device-to-device copy measured on {', '.join(measured)} (predictor/devices.py "
                f"measured_bandwidth), {share:.3f} of the datasheet bandwidth; launch as elementwise ({elem.source})"
            )
            put((fam, "copy", "*"), replace(elem, e_memory=share), text)
        put((fam, "copy", "*"), elem, f"assumed: as elementwise; {elem.source}")

        # GEMM: float32 fitted (else transferred); tensor-core dtypes calibrated to a measured rate
        src = other(fam, "gemm", "float32")
        if src is not None:
            put((fam, "gemm", "float32"), src[1], f"transfer: the {src[0]} fit (no {fam} data); {src[1].source}")
        put((fam, "gemm", "float32"), replace(FALLBACK_GEMM, e_memory=elem.e_memory), FALLBACK_GEMM.source)
        g32 = table[(fam, "gemm", "float32")]
        put((fam, "gemm", "*"), g32, f"assumed: as float32 (peak_rate gives other dtypes the fp32 rate); {g32.source}")
        g16 = table.get((fam, "gemm", "float16"))
        if g16 is not None:
            put(
                (fam, "gemm", "bfloat16"),
                g16,
                f"assumed: bfloat16 on the same tensor cores at the same peak as float16; {g16.source}",
            )
        rate, shape, dev_key, text = _gemm_anchor(fam)
        for dtype in ("float16", "bfloat16"):
            if rate is None:
                put((fam, "gemm", dtype), g32, f"assumed: as float32; {g32.source}")
                continue
            e = calibrate_e_compute(g32, DEVICES[dev_key], shape, rate, dtype)
            put(
                (fam, "gemm", dtype),
                replace(g32, e_compute=e),
                f"default: e_compute calibrated so that a {'x'.join(map(str, shape))} GEMM runs at {rate / 1e12:.1f} "
                f"TFLOP/s on {dev_key} ({text}); tiles, tile_i0, k0, launch and e_memory assumed as the float32 fit",
            )
        for dtype in ("float16", "float32"):  # no own convolution fit: another family's (cuDNN's kernels, not GEMM's)
            src = other(fam, "conv", dtype)
            if src is not None:
                put(
                    (fam, "conv", dtype),
                    src[1],
                    f"transfer: the {src[0]} convolution fit (no {fam} convolution data; efficiencies as fractions of "
                    f"this GPU's own peak and bandwidth, waves over its SMs); {src[1].source}",
                )
        c16 = fitted.get((fam, "conv", "float16")) or table.get((fam, "conv", "float16"))
        if c16 is not None:  # the same tensor cores at the same peak: the float16 convolution fit
            put((fam, "conv", "bfloat16"), c16, f"assumed: bfloat16 as the float16 convolution fit; {c16.source}")
        for dtype in ("float16", "bfloat16"):
            g = table[(fam, "gemm", dtype)]
            put((fam, "conv", dtype), g, f"assumed: implicit GEMM at the {dtype} GEMM entry; {g.source}")
        g16 = table[(fam, "gemm", "float16")]
        put(
            (fam, "conv", "float32"),
            g16,
            f"assumed: TF32 tensor cores (torch default) at the float16 GEMM entry; {g16.source}",
        )
        put(  # float32 matmuls with torch.set_float32_matmul_precision("high"): no TF32 GEMM measurement yet
            (fam, "gemm", TF32),
            g16,
            "assumed: float32 matmuls on TF32 tensor cores (set_float32_matmul_precision high/medium) at the float16 "
            f"GEMM entry, as float32 convolutions (no TF32 GEMM measurement); {g16.source}",
        )
        put((fam, "conv", "*"), g32, f"assumed: as the float32 GEMM entry (fp32 CUDA-core rate); {g32.source}")

        # attention: flash (fp16/bf16) at the FlashAttention papers' efficiency; memory-efficient (fp32) as fp32 GEMM
        e_flash, paper = FA2_H100 if fam == "hopper" else FA2_A100
        flash = KernelParams(e_flash, g32.e_memory, g32.launch_us, ATTENTION_TILES)
        for dtype in ("float16", "bfloat16"):
            put(
                (fam, "attention", dtype),
                flash,
                f"default: e_compute from {paper}; launch and e_memory assumed as the float32 GEMM entry",
            )
        efficient = KernelParams(
            g32.e_compute, g32.e_memory, g32.launch_us, ATTENTION_TILES, measured_on=g32.measured_on
        )
        for dtype in ("float32", "*"):
            put(
                (fam, "attention", dtype),
                efficient,
                "assumed: the memory-efficient kernel at the float32 GEMM entry's e_compute, launch and e_memory "
                f"(no published figure); {g32.source}",
            )
    return table


def pooled_bfloat16_gemm(
    entries: dict[tuple[str, str, str], KernelParams], pool: Sequence[MeasuredKernel]
) -> dict[tuple[str, str, str], KernelParams]:
    """The bfloat16 GEMM entry of each family whose float16 GEMM fit pooled measured bfloat16 GEMMs (`sweep_entry`):
    that fit, labelled as fitted on the GPUs the bfloat16 GEMMs ran on, with its error on them beside its error on
    the float16 sweep GEMMs of the same GPUs (MAPE, all and >= 50 us). Families without bfloat16 measurements keep
    `derive_entries`' assumption (bfloat16 as float16)."""
    out = {}
    for fam in sorted({family_of(r.device) for r in pool if r.kind == "gemm" and r.measured_dtype == "bfloat16"}):
        g16 = entries.get((fam, "gemm", "float16"))
        if g16 is None or not g16.source.startswith("fit:"):  # the pooled fit was not kept (derived or calibrated)
            continue
        mine = [r for r in pool if r.kind == "gemm" and family_of(r.device) == fam and r.source.startswith("sweep:")]
        devs = tuple(sorted({r.device for r in mine if r.measured_dtype == "bfloat16"}))
        bf = [r for r in mine if r.measured_dtype == "bfloat16"]
        half = [r for r in mine if r.measured_dtype == "" and r.dtype == "float16" and r.device in devs]
        if not half:  # nothing of the same sweep to set the bfloat16 error beside
            continue
        text = (
            f"fit: bfloat16 GEMMs pooled with float16 (the same tensor cores at the same peak) on {', '.join(devs)}; "
            f"MAPE on its bfloat16 sweep GEMMs {_mape_text(bf, g16)}, on its float16 sweep GEMMs "
            f"{_mape_text(half, g16)}; {g16.source}"
        )
        out[(fam, "gemm", "bfloat16")] = replace(g16, source=text, measured_on=devs)
    return out


def _mape_text(records: Sequence[MeasuredKernel], p: KernelParams) -> str:
    """'808 20.0% (13.8% on the 212 >= 50 us)': the count and MAPE of `p` on `records` (one kind and dtype)."""
    g = Group.of(records)
    pred, big = g.predict(p), g.latency >= 50e-6
    large = "none >= 50 us"
    if big.any():
        large = f"{ape(pred[big], g.latency[big])[0]:.1f}% on the {int(big.sum())} >= 50 us"
    return f"{len(records):,} {ape(pred, g.latency)[0]:.1f}% ({large})"


def _gemm_anchor(fam: str) -> tuple[float | None, tuple[int, int, int], str, str]:
    """(rate FLOP/s, (m, n, k), device key, source) the family's tensor-core GEMM efficiency is calibrated to."""
    if fam == "hopper":
        d = DEVICES["h100-80gb"]
        return (
            d.measured_bf16_flops,
            (8192, 8192, 8192),
            d.key,
            "an 8192^3 bf16 matmul measured on this project's H100, predictor/devices.py measured_bf16_flops",
        )
    if fam == "ampere":
        return MAMF_A100[0], MAMF_A100[1], MAMF_A100[2], MAMF_A100[3]
    return None, (0, 0, 0), "", ""


# ------------------------------------------------------------------------------------------------- evaluation
@dataclass(frozen=True)
class EvalRow:
    """One line of KERNEL_EVAL.md: a protocol's fit, where it was evaluated, and the errors (%) of the model and
    the two baselines as (MAPE, median APE)."""

    protocol: str
    kind: str
    dtype: str
    fit_on: str
    eval_on: str
    n_fit: int
    n_eval: int
    model: tuple[float, float]
    roofline: tuple[float, float]
    roofline_launch: tuple[float, float]


def _row(protocol: str, fit: Group, test: Group, fit_on: str, eval_on: str, p: KernelParams) -> EvalRow:
    bound = test.bound()
    return EvalRow(
        protocol, test.kind, test.dtype, fit_on, eval_on, len(fit.records), len(test.records),
        ape(test.predict(p), test.latency), ape(bound, test.latency),
        ape(bound + BASELINE_LAUNCH_US * 1e-6, test.latency),
    )  # fmt: skip


def _fit_selected(
    group: Group, records: Sequence[MeasuredKernel], keep: Callable[[MeasuredKernel], bool]
) -> KernelParams:
    """`fit_with` where the elementwise fit comes from the float32 elementwise records `keep` selects (the
    same device or split), or none (nothing from other devices leaks in)."""
    elem = None
    if group.kind in GEMM_LIKE:
        recs = [r for r in records if r.kind == "elementwise" and r.dtype == "float32" and keep(r)]
        if len(recs) >= MIN_FIT:
            elem = fit_with(Group.of(recs), None)
    return fit_with(group, elem)


PROTOCOLS = ("in-sample", "split", "largest 20%", "transfer", "held-out model")
MIN_SOURCES = 3  # a family's (kind, dtype) measured by at least this many sources (models) gets "held-out model"


def model_name(r: MeasuredKernel) -> str:
    """The measured model of a Vidur record (its file name without the GPU), else the record's source."""
    return r.source.split(":", 1)[1].split("-", 1)[1] if r.source.startswith("vidur:") else r.source


HeldOut = dict[str, tuple[Group, Group, KernelParams]]


def held_out_fits(recs: Sequence[MeasuredKernel]) -> HeldOut:
    """Leave one model out, within one family's (kind, dtype) records: for each model, (the group of the other
    models, that model's group, the parameters fitted on the other models)."""
    out = {}
    for name in sorted({model_name(r) for r in recs}):
        train = Group.of([r for r in recs if model_name(r) != name])
        test = Group.of([r for r in recs if model_name(r) == name])
        out[name] = (train, test, fit_with(train, None))
    return out


def held_out_all(records: Sequence[MeasuredKernel]) -> dict[tuple[str, str, str], HeldOut]:
    """`held_out_fits` for every (family, kind, dtype) of `records` measured by at least MIN_SOURCES models."""
    buckets: dict[tuple[str, str, str], list[MeasuredKernel]] = defaultdict(list)
    for r in records:
        buckets[(family_of(r.device), lookup_kind(r), r.dtype)].append(r)
    return {
        key: held_out_fits(recs)
        for key, recs in sorted(buckets.items())
        if len({model_name(r) for r in recs}) >= MIN_SOURCES and len(recs) >= MIN_FIT
    }


def evaluate(
    records: Sequence[MeasuredKernel],
    fitted: dict[tuple[str, str, str], KernelParams],
    held: dict[tuple[str, str, str], HeldOut] | None = None,
) -> list[EvalRow]:
    """The evaluation rows of the module docstring, for every (kind, dtype) in `records` (`held`: the
    `held_out_all` of `records`, computed here when None)."""
    held = held_out_all(records) if held is None else held
    groups: dict[tuple[str, str], list[MeasuredKernel]] = defaultdict(list)
    for r in records:
        groups[(lookup_kind(r), r.dtype)].append(r)
    rows: list[EvalRow] = []
    for (kind, dtype), recs in sorted(groups.items(), key=lambda kv: (kv[0][0] in GEMM_LIKE, kv[0])):
        devices = sorted({r.device for r in recs})
        by_dev = {d: Group.of([r for r in recs if r.device == d]) for d in devices}
        # in-sample: the committed (family) fit on each device
        for d, g in by_dev.items():
            fam = family_of(d)
            p = fitted.get((fam, kind, dtype))
            if p is not None:
                whole = Group.of([r for r in recs if family_of(r.device) == fam])
                rows.append(_row("in-sample", whole, g, f"all {fam}", d, p))
        # (a) the data's own split
        train = [r for r in recs if r.split == "train"]
        test = [r for r in recs if r.split == "test"]
        if len(train) >= MIN_FIT and test:
            tg = Group.of(train)
            p = _fit_selected(tg, records, lambda r: r.split == "train")
            fit_on = "+".join(sorted({r.device for r in train})) + " train"
            for d in sorted({r.device for r in test}):
                rows.append(_row("split", tg, Group.of([r for r in test if r.device == d]), fit_on, d + " test", p))
        # (b) the largest 20% held out, per device
        for d, g in by_dev.items():
            if len(g.records) < 5 * MIN_FIT // 2:
                continue
            order = np.argsort(g.size(), kind="stable")
            cut = int(round(0.8 * len(order)))
            small, large = g.subset(order[:cut]), g.subset(order[cut:])
            p = _fit_selected(small, records, lambda r, d=d: r.device == d)
            rows.append(_row("largest 20%", small, large, f"{d} smallest 80%", d, p))
        # (c) transfer: all of one device -> each other device
        for src in devices:
            p = _fit_selected(by_dev[src], records, lambda r, s=src: r.device == s)
            for dst in devices:
                if dst != src:
                    rows.append(_row("transfer", by_dev[src], by_dev[dst], src, dst, p))
        # (d) held-out model: within a family, fit on all models but one, evaluate on that one
        for fam in FAMILIES:
            for name, (train, test, p) in held.get((fam, kind, dtype), {}).items():
                dev = "+".join(sorted({r.device for r in test.records}))
                rows.append(_row("held-out model", train, test, f"{fam} but {name}", f"{dev} {name}", p))
    return rows


@dataclass(frozen=True)
class HalfRow:
    """One line of KERNEL_EVAL.md's half-precision summary: MAPE (%) on one device's (kind, dtype) kernel
    durations, over the kernels of `subset`, of the table without these data (`before`), the committed fit
    (`in_sample`), the leave-one-model-out fits pooled (`held_out`, with its median and max APE), the roofline."""

    device: str
    kind: str
    dtype: str
    subset: str  # ">= 50 us" or "all"
    n: int
    before: float
    in_sample: float
    held_out: float
    held_out_median: float
    held_out_max: float
    roofline: float


HALF_MIN_S = 50e-6  # the "large kernel" threshold of the summary


def half_summary(
    records: Sequence[MeasuredKernel],
    fitted: dict[tuple[str, str, str], KernelParams],
    before: ParamTable,
    held: dict[tuple[str, str, str], HeldOut],
) -> list[HalfRow]:
    """The summary over the kernel-duration records (`includes_launch` False) of `records` whose (family, kind,
    dtype) has held-out fits in `held` (`held_out_all`).

    `before`: the table derived without those records (what the table held before they were fitted)."""
    buckets: dict[tuple[str, str, str], list[MeasuredKernel]] = defaultdict(list)
    for r in records:
        if not r.includes_launch:
            buckets[(family_of(r.device), lookup_kind(r), r.dtype)].append(r)
    out = []
    for (fam, kind, dtype), recs in sorted(buckets.items()):
        if (fam, kind, dtype) not in fitted or (fam, kind, dtype) not in held:
            continue
        for dev in sorted({r.device for r in recs}):
            mine = [r for r in recs if r.device == dev]
            g = Group.of(mine)
            index = {id(r): i for i, r in enumerate(mine)}
            pred_held = np.full(len(mine), np.nan)
            for _, test, p in held[(fam, kind, dtype)].values():
                for r, v in zip(test.records, test.predict(p), strict=True):
                    if id(r) in index:
                        pred_held[index[id(r)]] = v
            pred_before = g.predict(before.lookup(dev, kind, dtype))
            pred_fit = g.predict(fitted[(fam, kind, dtype)])
            for subset, sel in ((">= 50 us", g.latency >= HALF_MIN_S), ("all", np.ones(len(mine), dtype=bool))):
                if not sel.any():
                    continue
                y = g.latency[sel]

                def mape(pred: np.ndarray, y: np.ndarray = y, sel: np.ndarray = sel) -> np.ndarray:
                    return np.abs(pred[sel] / y - 1.0) * 100.0

                a_held = mape(pred_held)
                out.append(
                    HalfRow(dev, kind, dtype, subset, int(sel.sum()), float(mape(pred_before).mean()),
                            float(mape(pred_fit).mean()), float(a_held.mean()), float(np.median(a_held)),
                            float(a_held.max()), float(mape(g.bound()).mean()))
                )  # fmt: skip
    return out


@dataclass(frozen=True)
class SweepRow:
    """One line of KERNEL_EVAL.md's sweep summary: errors (%) as (MAPE, median APE) on one device's sweep records
    of (kind, table dtype, layout), over `subset`, of the table without the sweep (`before`), the committed fit
    (`after`), the fit without a random 20% of the problems (by shape) on those (`random`), the fit without the
    largest 20% on those (`largest`, (nan, nan) for records in the smaller 80%), and the roofline bound."""

    device: str
    kind: str
    dtype: str
    layout: str
    subset: str
    n: int
    fitted: str  # "yes", "no" (evaluated only), "rejected" (`rejected_sweep_fits`)
    before: tuple[float, float]
    after: tuple[float, float]
    random: tuple[float, float]
    before_random: tuple[float, float]  # the table before the sweep on the same held-out fifth as `random`
    n_largest: int
    largest: tuple[float, float]
    roofline: tuple[float, float]


def rejected_sweep_fits(rows: Sequence[SweepRow]) -> frozenset[tuple[str, str, str]]:
    """(family, kind, dtype) whose sweep fit is not adopted: its random-20% held-out MAPE over all its
    contiguous kernels is not below the table's before the sweep on the same held-out kernels."""
    out = set()
    for w in rows:
        if w.fitted == "yes" and w.layout == "contiguous" and w.subset == "all":
            if not w.random[0] < w.before_random[0]:
                out.add((family_of(w.device), w.kind, w.dtype))
    return frozenset(out)


def held_out_shape(r: MeasuredKernel) -> bool:
    """The random 20% of problems held out: by the problem's hash, so one shape is out for every dtype."""
    return int(r.shape_key or "0", 16) % 5 == 0


def sweep_summary(
    records: Sequence[MeasuredKernel],
    fitted: dict[tuple[str, str, str], KernelParams],
    before: ParamTable,
    rejected: frozenset[tuple[str, str, str]] = frozenset(),
) -> list[SweepRow]:
    """Before/after errors on the sweep records (`read_sweep`) of `records` (`SweepRow`). The held-out fits refit
    the entry's whole group (other data of the group, e.g. Vidur, stays in) without the held-out sweep records.
    `rejected`: (family, kind, dtype) whose sweep fit was not adopted (`rejected_sweep_fits`): "after" is then the
    entry as before, the held-out columns still the rejected fit's."""
    launches = sweep_launch(records)
    pool = fitted_records(records)
    buckets: dict[tuple[str, str, str], list[MeasuredKernel]] = defaultdict(list)
    for r in pool:
        buckets[(family_of(r.device), lookup_kind(r), r.dtype)].append(r)
    sweep = [r for r in records if r.source.startswith("sweep:")]
    cells: dict[tuple[str, str, str, str], list[MeasuredKernel]] = defaultdict(list)
    for r in sweep:
        cells[(r.device, lookup_kind(r), r.dtype, r.layout)].append(r)
    refits: dict[tuple[str, str, str], tuple[KernelParams | None, KernelParams | None, set[int]]] = {}
    out = []
    for (dev, kind, dtype, layout), recs in sorted(cells.items()):
        key = (family_of(dev), kind, dtype)
        is_fit = (key in fitted or key in rejected) and any(r.source.startswith("sweep:") for r in buckets.get(key, ()))
        if is_fit and key not in refits:
            group = buckets[key]
            launch = launches.get(key[:2])
            train = [r for r in group if not (r.source.startswith("sweep:") and held_out_shape(r))]
            mine = [r for r in group if r.source.startswith("sweep:")]
            size = Group.of(mine).size()
            cut = np.sort(size)[int(round(0.8 * len(size)))] if len(size) else np.inf
            large = {id(r) for r, v in zip(mine, size, strict=True) if v >= cut}
            small = [r for r in group if id(r) not in large]
            elem = elementwise_of(fitted, key[0])
            refits[key] = (fit_with(Group.of(train), elem, launch), fit_with(Group.of(small), elem, launch), large)
        g = Group.of(recs)
        p_before = before.lookup(dev, kind, dtype)
        p_after = fitted[key] if is_fit and key not in rejected else p_before
        pred = {"before": g.predict(p_before), "after": g.predict(p_after)}
        is_rand = np.array([held_out_shape(r) for r in recs])
        is_large = np.zeros(len(recs), dtype=bool)
        if is_fit:
            p_rand, p_small, large = refits[key]
            pred["random"], pred["largest"] = g.predict(p_rand), g.predict(p_small)
            is_large = np.array([id(r) in large for r in recs])
        for subset, sel in ((">= 50 us", g.latency >= HALF_MIN_S), ("all", np.ones(len(recs), dtype=bool))):
            if not sel.any():
                continue

            def err(
                name: str, mask: np.ndarray, sel: np.ndarray = sel, pred: dict = pred, y: np.ndarray = g.latency
            ) -> tuple[float, float]:
                m = sel & mask
                if name not in pred or not m.any():
                    return (float("nan"), float("nan"))
                return ape(pred[name][m], y[m])

            every = np.ones(len(recs), dtype=bool)
            bound = ape(g.bound()[sel], g.latency[sel])
            state = ("rejected" if key in rejected else "yes") if is_fit and layout == "contiguous" else "no"
            out.append(SweepRow(dev, kind, dtype, layout, subset, int(sel.sum()), state, err("before", every),
                                err("after", every), err("random", is_rand), err("before", is_rand),
                                int((sel & is_large).sum()),
                                err("largest", is_large), bound))  # fmt: skip
    return out


@dataclass(frozen=True)
class JointRow:
    """One line of KERNEL_EVAL.md's float32 GEMM section: (MAPE, median APE) in % on `n` kernels of `eval_on` of
    the NeuSight-only fit (`before`: the table before the joint fit), the joint fit on `fit_on` (`joint`), the same
    without the bias term (`no_bias`: e_bias held at 1), and the roofline bound."""

    protocol: str
    fit_on: str
    eval_on: str
    n: int
    before: tuple[float, float]
    joint: tuple[float, float]
    no_bias: tuple[float, float]
    roofline: tuple[float, float]


JOINT_FAMILIES = {  # the sweep's float32 GEMM shape families (op, and a linear layer's bias)
    "bmm": lambda r: r.op == "bmm",
    "mm": lambda r: r.op == "mm",
    "linear without bias": lambda r: r.op == "linear" and not r.params.get("bias"),
    "linear with bias": lambda r: r.op == "linear" and bool(r.params.get("bias")),
}


def joint_gemm_summary(records: Sequence[MeasuredKernel], fam: str = "hopper") -> list[JointRow]:
    """Float32 GEMMs of `fam` fitted jointly on host-timed calls (NeuSight) and kernel durations (the sweep),
    evaluated in-sample, with a random 20% of the sweep's problems held out (`held_out_shape`), with each shape
    family of the sweep held out (`JOINT_FAMILIES`: fit on NeuSight and the other families), and with a whole
    source held out (the sweep alone, its launch from the NeuSight fit, predicting NeuSight's calls; NeuSight alone
    predicting the sweep is the `before` column). Every fit keeps the family's host-timed elementwise e_memory
    (`fit_groups`). Empty when `records` lack either source."""
    recs = [r for r in fitted_records(records) if r.device in FAMILIES[fam] and lookup_kind(r) == "gemm"]
    recs = [r for r in recs if r.dtype == "float32"]
    host = [r for r in recs if r.includes_launch]
    sweep = [r for r in recs if r.source.startswith("sweep:")]
    if len(host) < MIN_FIT or len(sweep) < MIN_FIT:
        return []
    elem = elementwise_of(fit_groups([r for r in records if r.kind == "elementwise" and r.dtype == "float32"]), fam)

    def fits(train: list[MeasuredKernel]) -> tuple[KernelParams, KernelParams]:
        g = Group.of(train)
        if not g.mixed:
            return fit_with(g, elem), fit_with(g, elem)
        base = replace(FALLBACK_GEMM, e_memory=(elem or FALLBACK_MEMORY).e_memory)
        return fit_with(g, elem), fit_entry(g, base, FREE_JOINT["gemm"][:-1])

    before = fit_with(Group.of(host), elem)
    out = []

    def row(protocol: str, fit_on: str, eval_on: str, train: list, test: list, pair=None) -> None:
        joint, no_bias = pair or fits(train)
        g = Group.of(test)
        out.append(JointRow(protocol, fit_on, eval_on, len(test), ape(g.predict(before), g.latency),
                            ape(g.predict(joint), g.latency), ape(g.predict(no_bias), g.latency),
                            ape(g.bound(), g.latency)))  # fmt: skip

    whole = fits(host + sweep)
    row("in-sample", "NeuSight + sweep", "NeuSight (host-timed)", host + sweep, host, whole)
    row("in-sample", "NeuSight + sweep", "sweep (kernel durations)", host + sweep, sweep, whole)
    for subset, sel in ((">= 50 us", lambda r: r.latency_s >= HALF_MIN_S), ("all", lambda r: True)):
        held = [r for r in sweep if held_out_shape(r) and sel(r)]
        train = host + [r for r in sweep if not held_out_shape(r)]
        row("random 20% out", "NeuSight + 80% of sweep", f"sweep held-out 20%, {subset}", train, held)
    for name, is_family in JOINT_FAMILIES.items():
        test = [r for r in sweep if is_family(r)]
        rest = [r for r in sweep if not is_family(r)]
        row("family out", f"NeuSight + sweep but {name}", f"sweep {name}", host + rest, test)
    alone = fit_with(Group.of(sweep), None, before.launch_us)
    row("source out", "sweep (launch: NeuSight fit)", "NeuSight (host-timed)", sweep, host, (alone, alone))
    return out


# ------------------------------------------------------------------------------------------------- outputs
def _sources_with_errors(
    fitted: dict[tuple[str, str, str], KernelParams], records: Sequence[MeasuredKernel], rows: list[EvalRow]
) -> dict[tuple[str, str, str], KernelParams]:
    out = {}
    for (scope, kind, dtype), p in fitted.items():
        recs = [r for r in records if (family_of(r.device), lookup_kind(r), r.dtype) == (scope, kind, dtype)]
        ops = "+".join(sorted({r.op for r in recs}))
        devs = ", ".join(DEVICES[d].name for d in sorted({r.device for r in recs}))
        data = ", ".join(sorted({_data_name(r.source) for r in recs}))
        ins = [
            r
            for r in rows
            if r.protocol == "in-sample" and r.kind == kind and r.dtype == dtype and family_of(r.eval_on) == scope
        ]
        held = [
            r
            for r in rows
            if r.protocol == "largest 20%" and r.kind == kind and r.dtype == dtype and family_of(r.eval_on) == scope
        ]
        n = len(recs)
        in_sample = np.average([r.model[0] for r in ins], weights=[r.n_eval for r in ins]) if ins else float("nan")
        text = f"fit: {data} {dtype} {ops} on {devs}, n={n:,}; in-sample MAPE {in_sample:.1f}%"
        if held:
            text += "; largest 20% held out: " + ", ".join(f"{r.eval_on} {r.model[0]:.1f}%" for r in held)
        models = [
            r
            for r in rows
            if r.protocol == "held-out model" and r.kind == kind and r.dtype == dtype and r.fit_on.startswith(scope)
        ]
        if models:
            pooled = defaultdict(list)
            for r in models:
                pooled[r.eval_on.split(" ", 1)[0]].append(r)
            text += "; each model held out: " + ", ".join(
                f"{d} {np.average([r.model[0] for r in rs], weights=[r.n_eval for r in rs]):.1f}%"
                for d, rs in sorted(pooled.items())
            )
        out[(scope, kind, dtype)] = replace(
            p, source=text + " (KERNEL_EVAL.md)", measured_on=tuple(sorted({r.device for r in recs}))
        )
    return out


def _data_name(source: str) -> str:
    if source == "NeuSight":
        return "NeuSight (ASPLOS'25, MIT licence)"
    if source.startswith("sweep:"):
        return f"this project's kernel sweep (data/{source.split(':', 1)[1]}/kernels, graph-timed)"
    return "Vidur profiling data (MIT licence, data/vidur-ops)" if source.startswith("vidur:") else source


def _digest(records: Sequence[MeasuredKernel]) -> str:
    h = hashlib.sha256()
    for r in records:
        h.update(
            f"{r.device}|{r.kind}|{r.op}|{r.dtype}|{r.flops}|{r.bytes_read}|{r.bytes_written}|{r.latency_s!r}\n".encode()
        )
    return h.hexdigest()[:16]


def fits_before_sweep(
    pool: Sequence[MeasuredKernel], fitted: dict[tuple[str, str, str], KernelParams]
) -> dict[tuple[str, str, str], KernelParams]:
    """The fits as they were without the sweep records: groups without sweep records as fitted; groups that pool
    sweep records with other kernel durations (Vidur) refitted on the others (the launch does not matter here:
    the sweep summary compares executions); groups of sweep records alone dropped (their entries derive)."""
    buckets: dict[tuple[str, str, str], list[MeasuredKernel]] = defaultdict(list)
    for r in pool:
        buckets[(family_of(r.device), lookup_kind(r), r.dtype)].append(r)
    out = {}
    for key, p in fitted.items():
        recs = buckets.get(key, [])
        others = [r for r in recs if not r.source.startswith("sweep:")]
        if len(others) == len(recs):
            out[key] = p
        elif len(others) >= MIN_FIT:
            g = Group.of(others)
            out[key] = fit_with(g, elementwise_of(fitted, key[0]) if g.timed_with_launch else None, p.launch_us)
    return out


#: the dtypes whose norm entries get the row floor (bfloat16 as float16: the same element size)
ROW_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "float16"}


#: the tensor sizes (MiB) tried as the line between `row_ns` and `row_ns_large` (`fit_rows`)
ROW_CACHE_MIB = (4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0)
#: `fit_rows` takes its constants from kernels at least this long (us), where a kernel's fixed cost is small
ROW_FIT_MIN_US = 50.0


def fit_rows(records: Sequence[MeasuredKernel], table: ParamTable) -> ParamTable:
    """`table` with the row floor (`kernel_model.row_floor_s`) on its norm entries. Per (family, dtype), over the
    family's contiguous group-norm sweep records (params `rows`, `numel`: `sweep_params`): for each size line of
    `ROW_CACHE_MIB`, `row_ns` and `row_ns_large` are the medians of the measured kernel duration / (`row_turns` x
    elements per row) over the records of at least `ROW_FIT_MIN_US` (a shorter kernel's fixed cost would
    count as row time) of a tensor up to and beyond the line; the line kept is the one whose floor, under the
    entry's own prediction, gives all the records the least mean absolute error. bfloat16 takes
    float16's. A family without such records takes the fit of the family that has them (a transfer, said in the
    source); no records at all: the table as it is (docs/kernel-model.md, "Ops the table does not describe")."""
    fitted: dict[tuple[str, str], tuple[KernelParams, int, tuple[str, ...]]] = {}
    by_key: dict[tuple[str, str], list[MeasuredKernel]] = defaultdict(list)
    for r in records:
        if r.kind == "norm" and r.layout == "contiguous" and r.params.get("rows") and r.dtype in ("float32", "float16"):
            by_key[(family_of(r.device), r.dtype)].append(r)
    for (fam, dtype), recs in sorted(by_key.items()):
        entry = table.entries.get((fam, "norm", dtype))
        if entry is None:
            continue
        group = Group.of(recs)
        work = row_turns(group.arrays.rows, group.sms) * group.arrays.row_numel
        per = group.latency / work * 1e9
        mib = row_tensor_mib(group.arrays)
        long = group.latency >= ROW_FIT_MIN_US * 1e-6
        best = None
        for line in ROW_CACHE_MIB:
            small, large = per[long & (mib <= line)], per[long & (mib > line)]
            if not len(small) or not len(large):
                continue
            p = replace(entry, row_ns=float(np.median(small)), row_ns_large=float(np.median(large)), row_cache_mib=line)
            err = float(np.mean(np.abs(group.predict(p) / group.latency - 1)))
            if best is None or err < best[0]:
                best = (err, p)
        if best is None:  # every long record on one side of every line: one constant
            one = per[long] if long.any() else per
            best = (0.0, replace(entry, row_ns=float(np.median(one)), row_ns_large=0.0, row_cache_mib=0.0))
        fitted[(fam, dtype)] = (best[1], len(recs), tuple(sorted({r.device for r in recs})))
    if not fitted:
        return table
    entries = dict(table.entries)
    for (scope, kind, dtype), p in table.entries.items():
        if kind != "norm" or dtype not in ROW_DTYPES or scope not in table.families:
            continue
        base = ROW_DTYPES[dtype]
        own = fitted.get((scope, base))
        other = next(((f, v) for (f, d), v in sorted(fitted.items()) if d == base), None) if own is None else None
        if own is not None:
            q, n, devices = own
            note = f"row floor: fit: this project's kernel sweep {base} group_norm on {', '.join(devices)}, n={n:,}"
        elif other is not None:
            fam, (q, n, devices) = other
            where = f"{base} group_norm on {', '.join(devices)}, n={n:,}"
            note = f"row floor: transfer: the {fam} fit ({where}; none measured here)"
        else:
            continue
        rows = {"row_ns": q.row_ns, "row_ns_large": q.row_ns_large, "row_cache_mib": q.row_cache_mib}
        source = p.source.split("; row floor: ")[0]  # a table fitted before: its note replaced, not repeated
        entries[(scope, kind, dtype)] = replace(p, **rows, source=f"{source}; {note}")
    return replace(table, entries=entries)


def build(
    records: Sequence[MeasuredKernel], data_names: Sequence[str], out: str = "predictor/kernel_params.json"
) -> tuple[ParamTable, list[EvalRow], list[HalfRow], list[SweepRow]]:
    """Fit, evaluate and derive: the parameter table, its evaluation, the summary of the kernel-duration data
    (`half_summary`) and of the kernel sweep (`sweep_summary`) (`out`: where the table goes, recorded)."""
    import scipy

    fitted = fit_groups(records)
    pool = fitted_records(records)
    held = held_out_all(pool)
    rows = evaluate(pool, fitted, held)
    fams = {k: tuple(v) for k, v in FAMILIES.items()}
    durations = {(family_of(r.device), lookup_kind(r), r.dtype) for r in records if not r.includes_launch}
    before = ParamTable(derive_entries({k: v for k, v in fitted.items() if k not in durations}), fams)
    half = half_summary([r for r in records if not r.source.startswith("sweep:")], fitted, before, held)
    earlier = fits_before_sweep(pool, fitted)
    before_sweep = ParamTable(derive_entries(earlier), fams)
    rejected = rejected_sweep_fits(sweep_summary(records, fitted, before_sweep))
    for key in rejected:  # the entry stays what it was before the sweep (a fit on other data, or derived)
        if key in earlier:
            fitted[key] = earlier[key]
        else:
            fitted.pop(key)
    rows = [r for r in rows if not (r.protocol == "in-sample" and (family_of(r.eval_on), r.kind, r.dtype) in rejected)]
    entries = derive_entries(_sources_with_errors(fitted, pool, rows))
    entries.update(pooled_bfloat16_gemm(entries, pool))
    sweep = sweep_summary(records, fitted, before_sweep, rejected)
    missing = [(f, k) for f in FAMILIES for k in KINDS if not any((f, k, d) in entries for d in ("*", "float32"))]
    if missing:
        raise KernelParamsError(f"the table leaves kinds uncovered: {missing}")
    neusight = any(r.source == "NeuSight" for r in records)
    vidur = any(r.source.startswith("vidur:") for r in records)
    licence = []
    if neusight:
        licence.append(
            "Entries whose source names NeuSight are derived from NeuSight's measurements: " + NEUSIGHT_CITATION
        )
    if vidur:
        licence.append("Entries whose source names Vidur are derived from Vidur's profiling data: " + VIDUR_CITATION)
    meta = {
        "created_by": "python -m predictor.kernel_fit fit "
        + " ".join(f"--data {n}" for n in data_names)
        + f" --out {out}",
        "fit_environment": {"numpy": np.__version__, "scipy": scipy.__version__},
        "data": {"records": len(records), "sha256_16": _digest(records), "sources": list(data_names)},
        "licence": ". ".join(licence),
        "notice": "predictor/KERNEL_PARAMS_NOTICE.md",
    }
    table = ParamTable(entries, {k: tuple(v) for k, v in FAMILIES.items()}, TABLE_VERSION, meta)
    return fit_rows(records, table), rows, half, sweep


def eval_markdown(
    rows: list[EvalRow],
    table: ParamTable,
    half: Sequence[HalfRow] = (),
    sweep: Sequence[SweepRow] = (),
    joint: Sequence[JointRow] = (),
) -> str:
    """KERNEL_EVAL.md: the evaluation table (numbers as measured), and what each protocol means."""
    meta = table.meta
    lines = [
        "# Kernel time model: evaluation",
        "",
        f"Written by `{meta.get('created_by', '')}` (table version "
        f"{table.version}, {meta.get('data', {}).get('records', 0):,} measured kernels, data digest "
        f"`{meta.get('data', {}).get('sha256_16', '')}`); `tests/test_kernel_model.py` recomputes these numbers "
        "from the committed data. The model and the protocols: `docs/kernel-model.md`, "
        "`predictor/kernel_fit.py`.",
        "",
        "APE = |predicted / measured - 1|; MAPE is its mean, med its median, in %. Baselines: the roofline bound "
        f"(efficiency 1, no launch) and the roofline + {BASELINE_LAUNCH_US:g} us per kernel (today's estimate).",
        "Protocols: **in-sample** the committed fit on its own data; **split** NeuSight's train/test files "
        "(fit on train, evaluate on test); **largest 20%** fit on the smallest 80% of one device's problems (FLOPs "
        "for gemm, bytes otherwise), evaluate on the largest 20%; **transfer** fit on all of one device, "
        "evaluate on another; **held-out model** (data measured on several models: Vidur) fit on every model of "
        "the family but one, evaluate on that one. Rows on kernel durations (Vidur, float16) compare the model's "
        "execution time (no launch) with them.",
    ]
    if meta.get("licence"):
        lines += ["", "Data: " + meta["licence"] + "."]
    lines += [
        "",
        "| protocol | kind | dtype | fit on | evaluated on | n fit | n eval | model MAPE | model med "
        "| roofline MAPE | roofline med | roofline+5us MAPE | roofline+5us med |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    order = {p: i for i, p in enumerate(PROTOCOLS)}
    for r in sorted(rows, key=lambda r: (order[r.protocol], r.kind, r.dtype, r.fit_on, r.eval_on)):
        lines.append(
            f"| {r.protocol} | {r.kind} | {r.dtype} | {r.fit_on} | {r.eval_on} | {r.n_fit:,} | {r.n_eval:,} "
            f"| {r.model[0]:.1f} | {r.model[1]:.1f} | {r.roofline[0]:.1f} | {r.roofline[1]:.1f} "
            f"| {r.roofline_launch[0]:.1f} | {r.roofline_launch[1]:.1f} |"
        )
    if half:
        lines += [
            "",
            "## Half precision: kernel durations (Vidur), before and after their fit",
            "",
            "Kernel durations from a profiler trace (no launch in them) are compared with the model's execution "
            "time, max(compute, memory) + exec (no launch: docs/kernel-model.md). MAPE in %: **before** the table "
            "derived without these data (calibrated / assumed half-precision entries), **in-sample** the committed "
            "fit, **held-out model** each model's kernels predicted by the fit on the other models of the family "
            "(pooled over the models; its median and max APE beside), and the roofline bound. "
            f"Subsets: kernels measured at >= {HALF_MIN_S * 1e6:g} us, and all kernels.",
            "",
            "| device | kind | dtype | kernels | n | before | in-sample | held-out model | held-out med "
            "| held-out max | roofline |",
            "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for h in half:
            lines.append(
                f"| {h.device} | {h.kind} | {h.dtype} | {h.subset} | {h.n:,} | {h.before:.1f} | {h.in_sample:.1f} "
                f"| {h.held_out:.1f} | {h.held_out_median:.1f} | {h.held_out_max:.1f} | {h.roofline:.1f} |"
            )
    if sweep:
        lines += [
            "",
            "## Kernel sweep on this project's GPUs: before and after its fit",
            "",
            "Kernel times measured by `python -m predictor.measure.kernels` (CUDA-graph replays: no launch in them; "
            "data/README.md) compared with the model's execution time, max(compute, memory) + exec. Each cell is "
            "MAPE / median APE in %: **before** the table without the sweep (what it held before: NeuSight, Vidur, "
            "transfers, assumptions), **after** the committed fit (in-sample), **random 20%** the problems (shapes) "
            "whose hash is 0 mod 5 predicted by the fit without them, **largest 20%** the largest fifth of the "
            "entry's sweep problems (FLOPs for gemm-like kinds, bytes otherwise) predicted by the fit on the rest "
            "(n large: how many of the row's kernels), and the roofline bound; **before on them** the table before "
            "the sweep on the random 20%. fitted: no = the sweep records only evaluate an entry fitted elsewhere "
            "(float32 CUDA-core GEMMs: NeuSight; `other`: as elementwise; channels_last: not fitted); rejected = "
            "the sweep fit's random-20% MAPE over all kernels was not below the table's before on them, so the "
            "entry stays as it was (after = before; the held-out columns are the rejected fit's). "
            "tf32 = float32 on TF32 tensor cores (a gemm under `allow_tf32`; a float32 conv always: cuDNN's default). "
            "channels_last records share their kind's entry. "
            f"Subsets: kernels measured at >= {HALF_MIN_S * 1e6:g} us, and all kernels.",
            "",
            "| device | kind | dtype | layout | kernels | n | fitted | before | after | random 20% | before on them "
            "| n large | largest 20% | roofline |",
            "| --- | --- | --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]

        def cell(v: tuple[float, float]) -> str:
            return "-" if np.isnan(v[0]) else f"{v[0]:.1f} / {v[1]:.1f}"

        for w in sweep:
            lines.append(
                f"| {w.device} | {w.kind} | {w.dtype} | {w.layout} | {w.subset} | {w.n:,} | "
                f"{w.fitted} | {cell(w.before)} | {cell(w.after)} | {cell(w.random)} | {cell(w.before_random)} "
                f"| {w.n_largest:,} | {cell(w.largest)} | {cell(w.roofline)} |"
            )
    if joint:
        lines += [
            "",
            "## Float32 GEMMs on hopper: NeuSight and the sweep fitted together, with the bias epilogue",
            "",
            "NeuSight's H100 float32 GEMMs are host-timed calls (time = execution + exec + launch; every `linear` "
            "with its bias: addmm), the sweep's are CUDA-graph kernel durations (execution + exec, no launch; "
            "`linear` with and without bias, `mm`, `bmm`). One fit on both (`fit_with`, `FREE_JOINT`): e_compute, "
            "k0, tile_i0, exec_us, launch_us and e_bias (a GEMM with a fused bias add runs at e_c x e_bias); "
            "the sweep's durations pin exec_us, the calls' surplus over them is the launch. Each cell is MAPE / "
            "median APE in %: **before** the NeuSight-only fit (the table before), **joint** the joint fit of the "
            "row, **joint, no e_bias** the same with e_bias held at 1, and the roofline bound. Protocols: "
            "**in-sample**; **random 20% out** the sweep problems whose hash is 0 mod 5 (as the sweep table); "
            "**family out** one shape family of the sweep held out, fitted on NeuSight and the others; "
            "**source out** the sweep alone (launch from the NeuSight fit) predicting NeuSight's calls (NeuSight "
            "alone predicting the sweep is the before column).",
            "",
            "| protocol | fit on | evaluated on | n | before | joint | joint, no e_bias | roofline |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for j in joint:
            lines.append(
                f"| {j.protocol} | {j.fit_on} | {j.eval_on} | {j.n:,} | {j.before[0]:.1f} / {j.before[1]:.1f} "
                f"| {j.joint[0]:.1f} / {j.joint[1]:.1f} | {j.no_bias[0]:.1f} / {j.no_bias[1]:.1f} "
                f"| {j.roofline[0]:.1f} / {j.roofline[1]:.1f} |"
            )
    return "\n".join(lines) + "\n"


def parse_joint_markdown(text: str) -> list[dict]:
    """The rows of KERNEL_EVAL.md's float32 GEMM section as dicts (for the reproduction test)."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 8 or cells[0] not in ("in-sample", "random 20% out", "family out", "source out"):
            continue
        nums = [float(v) for c in cells[4:] for v in c.split(" / ")]
        out.append({"key": tuple(cells[:3]), "n": int(cells[3].replace(",", "")), "numbers": nums})
    return out


def parse_sweep_markdown(text: str) -> list[dict]:
    """The rows of KERNEL_EVAL.md's sweep summary as dicts (for the reproduction test): key (device, kind,
    dtype, layout, subset), n, and the numbers of the five error cells (nan where "-")."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 14 or cells[4] not in (">= 50 us", "all"):
            continue
        nums = []
        for c in (cells[7], cells[8], cells[9], cells[10], cells[12], cells[13]):
            nums += [float("nan"), float("nan")] if c == "-" else [float(v) for v in c.split(" / ")]
        out.append({"key": tuple(cells[:5]), "n": int(cells[5].replace(",", "")), "numbers": nums})
    return out


def parse_half_markdown(text: str) -> list[dict]:
    """The rows of KERNEL_EVAL.md's half-precision summary as dicts (for the reproduction test)."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 11 or cells[3] not in (">= 50 us", "all"):
            continue
        out.append({"key": tuple(cells[:4]), "n": int(cells[4].replace(",", "")),
                    "numbers": [float(c) for c in cells[5:]]})  # fmt: skip
    return out


def dump_table(table: ParamTable) -> str:
    """The table as JSON text, one entry per line (diffs of a refit stay readable)."""
    return dump_doc(table.to_json())


def dump_doc(doc: dict) -> str:
    """A table's JSON document as `dump_table` writes it."""
    doc = dict(doc)
    entries = doc.pop("entries")
    head = json.dumps(doc, indent=1)[:-2]  # without the closing "\n}"
    body = ",\n".join("  " + json.dumps(e) for e in entries)
    return f'{head},\n "entries": [\n{body}\n ]\n}}\n'


def parse_eval_markdown(text: str) -> list[dict]:
    """The rows of a KERNEL_EVAL.md table as dicts (for the reproduction test)."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 13 or cells[0] not in PROTOCOLS:
            continue
        out.append(
            {
                "protocol": cells[0],
                "kind": cells[1],
                "dtype": cells[2],
                "fit_on": cells[3],
                "eval_on": cells[4],
                "n_fit": int(cells[5].replace(",", "")),
                "n_eval": int(cells[6].replace(",", "")),
                "numbers": [float(c) for c in cells[7:]],
            }  # fmt: skip
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m predictor.kernel_fit", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fit = sub.add_parser("fit", help="fit the kernel parameter table and write its evaluation")
    fit.add_argument(
        "--data", action="append", required=True, help="NeuSight folder, JSONL file or folder (repeatable)"
    )
    fit.add_argument("--out", required=True, help="the parameter table to write (JSON)")
    fit.add_argument("--eval", help="the evaluation table to write (default: KERNEL_EVAL.md beside --out)")
    rows_cmd = sub.add_parser("rows", help="fit only the norm entries' row floor (row_ns) of a table, in place")
    rows_cmd.add_argument("--data", action="append", required=True, help="kernel sweep folder or file (repeatable)")
    rows_cmd.add_argument("--table", default=str(PARAMS_PATH), help="the parameter table to update")
    args = parser.parse_args(argv)
    if args.command == "rows":
        try:
            records = [r for d in args.data for r in read_data(d)]
            table = fit_rows(records, load_params(args.table))
        except KernelParamsError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        doc = json.loads(Path(args.table).read_text())  # only the norm entries change, every other line as it was
        for e in doc["entries"]:
            p = table.entries[(e["scope"], e["kind"], e["dtype"])]
            if p.row_ns:
                for name in ("row_ns", "row_ns_large", "row_cache_mib"):
                    e[name] = round(getattr(p, name), 6)
                e["source"] = p.source
                print(f"{e['scope']} {e['kind']} {e['dtype']}: row_ns {e['row_ns']}, beyond {e['row_cache_mib']} MiB "
                      f"{e['row_ns_large']}")  # fmt: skip
        Path(args.table).write_text(dump_doc(doc))
        return 0
    try:
        records = [r for d in args.data for r in read_data(d)]
        table, rows, half, sweep = build(records, args.data, args.out)
    except KernelParamsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.write_text(dump_table(table))
    eval_path = Path(args.eval) if args.eval else out.with_name("KERNEL_EVAL.md")
    joint = joint_gemm_summary(records)
    eval_path.write_text(eval_markdown(rows, table, half, sweep, joint))
    print(f"{len(records):,} kernels, {len(table.entries)} entries -> {out}; evaluation -> {eval_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
