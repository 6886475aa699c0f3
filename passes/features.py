"""Graph features for the predictor: the node-feature matrix X, data-flow edges, static features.

The column layout of X is a versioned constant (`FEATURE_VERSION`); a predictor artifact records
the version it was trained with and refuses another. Change the layout => bump the version.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from ._gc import gc_paused
from .costs import CATEGORIES, OpCost

FEATURE_VERSION = "preflight.features/2"  # /2: the kernel-view columns

# Fixed operator vocabulary; anything else goes to the final "other" slot.
OP_VOCAB: tuple[str, ...] = (
    "relax.nn.conv1d",
    "relax.nn.conv2d",
    "relax.nn.conv3d",
    "relax.nn.conv2d_transpose",
    "relax.matmul",
    "relax.einsum",
    "relax.nn.attention",
    "relax.add",
    "relax.subtract",
    "relax.multiply",
    "relax.divide",
    "relax.power",
    "relax.maximum",
    "relax.minimum",
    "relax.nn.relu",
    "relax.nn.gelu",
    "relax.nn.gelu_tanh",
    "relax.nn.silu",
    "relax.sigmoid",
    "relax.tanh",
    "relax.exp",
    "relax.sqrt",
    "relax.rsqrt",
    "relax.clip",
    "relax.nn.softmax",
    "relax.nn.layer_norm",
    "relax.nn.batch_norm",
    "relax.nn.group_norm",
    "relax.nn.rms_norm",
    "relax.nn.max_pool2d",
    "relax.nn.avg_pool2d",
    "relax.nn.adaptive_avg_pool2d",
    "relax.sum",
    "relax.mean",
    "relax.max",
    "relax.variance",
    "relax.reshape",
    "relax.permute_dims",
    "relax.concat",
    "relax.split",
    "relax.strided_slice",
    "relax.take",
    "relax.broadcast_to",
    "relax.astype",
    "relax.where",
    "relax.nn.pad",
    "relax.image.resize2d",
    "relax.call_tir",
)
OTHER_SLOT = len(OP_VOCAB)
_OP_INDEX = {op: i for i, op in enumerate(OP_VOCAB)}

NUMERIC_COLUMNS: tuple[str, ...] = (
    "log_flops",
    "log_macs",
    "log_bytes_read",
    "log_bytes_written",
    "log_weight_bytes",
    "log_out_elements",
    "out_ndim",
    "out_dtype_bytes",
    "log_kernel_window",
    "max_stride",
    "log_groups",
    "folded",
    # the kernel view (passes.kernels): what eager PyTorch launches for this op; a free view has no kernel
    "launches",  # 1 when the op becomes at least one kernel of its own or a copy (roles "kernel", "copy")
    "log_kernel_flops",  # FLOPs of the kernels attributed to the op (a kernel covering n ops: 1/n each)
    "log_kernel_bytes",  # bytes those kernels move: 0 for a view, a fused or a folded op
)
FEATURE_COLUMNS: tuple[str, ...] = (
    tuple(f"op={op}" for op in OP_VOCAB) + ("op=other",) + tuple(f"category={c}" for c in CATEGORIES) + NUMERIC_COLUMNS
)
NUM_FEATURES = len(FEATURE_COLUMNS)


def _log(x: float) -> float:
    return math.log1p(max(x, 0))


def node_row(cost: OpCost, attrs: dict, kernel: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> list[float]:
    """One row of X for one op (see FEATURE_COLUMNS); `kernel` is (launches, kernel FLOPs, kernel bytes)."""
    row = [0.0] * NUM_FEATURES
    row[_OP_INDEX.get(cost.op, OTHER_SLOT)] = 1.0
    row[len(OP_VOCAB) + 1 + CATEGORIES.index(cost.category)] = 1.0
    out = cost.output
    window = 1
    w = cost.inputs[1].shape if cost.category == "conv" and len(cost.inputs) > 1 else ()
    if len(w) > 2:
        window = math.prod(w[2:]) if str(attrs.get("kernel_layout", "OI")).startswith("OI") else math.prod(w[:-2])
    elif attrs.get("pool_size"):
        window = math.prod(attrs["pool_size"])
    strides = attrs.get("strides") or [1]
    numeric = [
        _log(cost.flops),
        _log(cost.macs),
        _log(cost.bytes_read),
        _log(cost.bytes_written),
        _log(cost.weight_bytes),
        _log(out.numel if cost.outputs else 0),
        float(len(out.shape)),
        float(out.nbytes / out.numel) if cost.outputs and out.numel else 0.0,
        _log(window),
        float(max(strides)),
        _log(attrs.get("groups", 1) or 1),
        float(cost.folded),
        float(kernel[0]),
        _log(kernel[1]),
        _log(kernel[2]),
    ]
    row[-len(NUMERIC_COLUMNS) :] = numeric
    return row


def kernel_columns(view, n_ops: int) -> list[tuple[float, float, float]]:
    """(launches, kernel FLOPs, kernel bytes) per op index from a `passes.kernels.KernelView`.

    A kernel's FLOPs and bytes are shared evenly by the ops it covers (a fused attention covers its pattern).
    """
    flops = [0.0] * n_ops
    nbytes = [0.0] * n_ops
    for k in view.kernels:
        for i in k.ops:
            flops[i] += k.flops / len(k.ops)
            nbytes[i] += k.bytes / len(k.ops)
    return [(float(view.roles[i] in ("kernel", "copy")), flops[i], nbytes[i]) for i in range(n_ops)]


@gc_paused
def node_features(costs: Sequence[OpCost], attrs: Sequence[dict], kernel_view=None) -> np.ndarray:
    """X: (|V|, NUM_FEATURES) float32, one row per op in execution order; `kernel_view` fills the kernel columns
    (zeros without it)."""
    if not costs:
        return np.zeros((0, NUM_FEATURES), dtype=np.float32)
    kernel = kernel_columns(kernel_view, len(costs)) if kernel_view is not None else [(0.0, 0.0, 0.0)] * len(costs)
    return np.asarray([node_row(c, a, k) for c, a, k in zip(costs, attrs, kernel, strict=True)], dtype=np.float32)


def edge_index(edges: Sequence[tuple[int, int]]) -> np.ndarray:
    """edge_index: (2, |E|) int64, producer -> consumer op indices (PyG convention)."""
    if not edges:
        return np.zeros((2, 0), dtype=np.int64)
    return np.asarray(edges, dtype=np.int64).T.copy()


def static_features(
    costs: Sequence[OpCost], *, batch_size: int, params: int, peak_activation_bytes: int, param_bytes: int
) -> dict[str, float]:
    """Graph-level features: DIPPM's five (MACs, batch size, #conv, #dense/matmul, #relu) and more."""
    live = [c for c in costs if not c.folded]
    cats = Counter(c.category for c in live)
    feats: dict[str, float] = {
        "macs": sum(c.macs for c in live),
        "batch_size": batch_size,
        "n_conv": cats["conv"],
        "n_dense": cats["matmul"],
        "n_relu": sum(1 for c in live if c.op == "relax.nn.relu"),
        "flops": sum(c.flops for c in live),
        "params": params,
        "param_bytes": param_bytes,
        "peak_activation_bytes": peak_activation_bytes,
        "bytes_read": sum(c.bytes_read for c in live),
        "bytes_written": sum(c.bytes_written for c in live),
        "op_count": len(live),
    }
    for c in CATEGORIES:
        feats[f"n_{c}"] = cats[c]
    return feats


DIPPM_STATIC = ("macs", "batch_size", "n_conv", "n_dense", "n_relu")
