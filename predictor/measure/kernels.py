"""Single-operator kernel sweep: time one PyTorch operator at a time on the GPU (or the CPU).

``python -m predictor.measure.kernels --device cuda --list predictor/measure/lists/kernels-h100-80gb.jsonl
--out data --budget-s 480`` times the entries of a kernel list (written by ``python -m
predictor.measure.kernel_list``, see that module) and appends one JSON line
per entry to ``OUT/<device>/kernels/shard-III-of-NNN.jsonl``.

**Entries.** An entry is one operator of :data:`OPS` (``op``, e.g. ``"bmm"``) with its shape parameters
(``params``), ``dtype``, memory ``layout`` (``"contiguous"`` or ``"channels_last"``), ``tf32`` (float32
only: ``torch.backends.cuda.matmul.allow_tf32`` for gemm, ``torch.backends.cudnn.allow_tf32`` for conv;
``None`` means torch's defaults: matmul off, cuDNN on, which is what the whole-model harness measures)
and ``backend`` (attention only: ``"auto"`` lets torch pick and records its pick, ``"flash"``,
``"efficient"``, ``"cudnn"``, ``"math"`` force one through ``torch.nn.attention.sdpa_kernel``). Its
``id`` is a hash of those six fields. Every op belongs to one kernel ``kind`` of :data:`KINDS` (the
vocabulary shared with the kernel view of the graph).

**FLOPs and bytes** are counted as preflight counts them (``passes.costs``; DESIGN.md "Counting
convention"): FLOPs = 2 x MACs for gemm, conv and attention, a documented constant per element for the
rest (the ``FLOPs`` column of :data:`OPS`); bytes read = every input once (an embedding reads only the rows
it gathers plus the indices), bytes written = every output once, each at its dtype. An op that preflight's
graph holds as two Relax ops (a linear with bias: matmul + add) counts both ops' FLOPs but, as one kernel,
its tensors once.

**Protocol per entry** (CUDA): ``cudnn.benchmark = True`` (as the whole-model protocol); inputs random
normal (never zeros), positive where the op needs it, made on the device with a seed from the id; the
TF32 flags and the attention backend set around the whole measurement; ``warmup`` (2) untimed calls (the
first one lets cuDNN pick its algorithm), then one call timed alone gives ``t1``; ``inner = ceil(target_ms
/ t1)`` calls (1 to ``max_inner``; fewer for long kernels) are captured in one CUDA graph, so launch gaps
do not count (``timing: "cuda-graph"``; where capture fails they run eagerly, ``"cuda-events"``); if one
replay falls short of half the target (the eager ``t1`` of a tiny kernel is mostly host launch time), the
graph is captured again with ``inner`` from the replay's per-call time; then
``runs`` (>= 20) replays, each between two CUDA events: ``latency_ms`` = elapsed / inner, median, p10, p90,
mean, min, max. ``eager_ms`` is the per-call time of ``inner`` eager calls back to back (median of 3),
host launch cost included. ``--flush-l2`` overwrites a buffer of twice the L2 size before every replay
(with ``inner = 1``); records say ``l2_flush`` and go to ``OUT/<device>/kernels-l2flush/``. On the CPU the same
steps run with ``time.perf_counter`` and no graphs (``timing: "wall"``).

**Failures are records**: ``status`` ``"oom"``, ``"unsupported"`` (torch has no kernel for the request:
an attention backend that does not take these shapes or dtypes), ``"error"``, or ``"crash"`` (the process
died during the entry: on restart the entry left in the shard's ``.inflight`` file is recorded so and
skipped). After an error that leaves the CUDA context unusable the sweep records it and exits with code 3;
run it again to go on. Records are appended, flushed and fsync'd one at a time; ids already recorded for
the device (in ``OUT`` and ``--skip-from`` directories) are skipped, so a run resumes where the last one
stopped; ``--budget-s`` stops before starting an entry whose measurement would end after the deadline. A
shard file is continued in a new part (``shard-000-of-001.1.jsonl``) past ``--max-file-mb``.

Nothing here changes clocks, power limits, compute mode or MIG; nothing resets the GPU. The module imports
torch, the zoo-free parts of ``predictor.measure`` and, on CUDA, ``nvidia-ml-py``; never TVM, ``passes/``
or ``analyzer/``.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from predictor.devices import DEVICES
from predictor.measure import shard_arg, shard_summary
from predictor.measure.configs import shard_of
from predictor.measure.mig_profiles import device_key
from predictor.measure.nvml import Nvml, host_slug
from predictor.measure.worker import cpu_model, latency_stats

__all__ = [
    "KINDS",
    "LIST_SCHEMA",
    "OPS",
    "RECORD_SCHEMA",
    "SWEEP_VERSION",
    "Op",
    "SweepOptions",
    "SweepSummary",
    "done_ids",
    "entry_cost",
    "entry_id",
    "estimate_ms",
    "load_list",
    "make_entry",
    "run_sweep",
]

RECORD_SCHEMA = "preflight.kernel-measurement/1"
LIST_SCHEMA = "preflight.kernel-entry/1"
SWEEP_VERSION = "kernels/1"

#: Kernel kinds, the vocabulary shared with the kernel view of the graph (``passes/kernels.py``).
KINDS = ("gemm", "conv", "attention", "elementwise", "reduction", "softmax", "norm", "pooling", "copy", "other")

#: Bytes per element of the dtypes an entry's tensors can have.
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "bool": 1}

#: Attention backends: ``"auto"`` is torch's own pick; the others are forced with ``sdpa_kernel``.
BACKENDS = ("auto", "flash", "efficient", "cudnn", "math")
_FORCED = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
_PICKED = {int(member.value): name for name, member in SDPBackend.__members__.items()}

Shape = tuple[int, ...]
#: A tensor of an entry: (shape, role). Roles: ``"x"`` random normal at the entry's dtype, ``"pos"`` positive
#: (uniform 0.5..1.5) at the entry's dtype, ``"w"`` counted at the entry's dtype but made by the op itself
#: (an RNN module's weights), or a dtype name (``"int64"`` indices, ``"bool"`` masks, a cast's target).
Tensor = tuple[Shape, str]


# ----------------------------------------------------------------------------------------- shape helpers


def conv_class(c_in: int, groups: int, kernel: Sequence[int], transposed: bool = False) -> str:
    """The class a convolution is studied under (bench/bench_conv_classes.py, the lease's L2 study): `transposed`,
    `conv1d` / `conv3d` (by len(kernel)), then for 2-D `grouped` (groups > 1, depthwise included), `first`
    (c_in <= 4 input channels: a network's stem), `pointwise` (1x1) or `dense`."""
    if transposed:
        return "transposed"
    if len(kernel) != 2:
        return f"conv{len(kernel)}d"
    if groups > 1:
        return "grouped"
    if c_in <= 4:
        return "first"
    return "pointwise" if all(k == 1 for k in kernel) else "dense"


def conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    """Output length of a convolution along one axis: ``(size + 2p - d(k-1) - 1) // s + 1``."""
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def conv_transpose_out(size: int, k: int, s: int, p: int, op: int, d: int) -> int:
    """Output length of a transposed convolution along one axis: ``(size-1)s - 2p + d(k-1) + op + 1``."""
    return (size - 1) * s - 2 * p + d * (k - 1) + op + 1


def pool_out(size: int, k: int, s: int, p: int, ceil: bool) -> int:
    """Output length of a max/avg pooling window along one axis (torch's rule, ``ceil_mode`` included)."""
    num = size + 2 * p - k
    out = (-(-num // s) if ceil else num // s) + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def _conv_tensors(p: dict) -> tuple[list[Tensor], list[Tensor]]:
    n, c, o, g = p["n"], p["c"], p["o"], p["g"]
    spatial = [conv_out(*args) for args in zip(p["in"], p["k"], p["s"], p["p"], p["d"], strict=True)]
    ins: list[Tensor] = [((n, c, *p["in"]), "x"), ((o, c // g, *p["k"]), "x")]
    if p["bias"]:
        ins.append(((o,), "x"))
    return ins, [((n, o, *spatial), "x")]


def _conv_transpose_tensors(p: dict) -> tuple[list[Tensor], list[Tensor]]:
    n, c, o, g = p["n"], p["c"], p["o"], p["g"]
    spatial = [conv_transpose_out(*args) for args in zip(p["in"], p["k"], p["s"], p["p"], p["op"], p["d"], strict=True)]
    ins: list[Tensor] = [((n, c, *p["in"]), "x"), ((c, o // g, *p["k"]), "x")]
    if p["bias"]:
        ins.append(((o,), "x"))
    return ins, [((n, o, *spatial), "x")]


def _pool_tensors(p: dict) -> tuple[list[Tensor], list[Tensor]]:
    spatial = [pool_out(*args, p["ceil"]) for args in zip(p["in"], p["k"], p["s"], p["p"], strict=True)]
    return [((p["n"], p["c"], *p["in"]), "x")], [((p["n"], p["c"], *spatial), "x")]


def _sdpa_tensors(p: dict) -> tuple[list[Tensor], list[Tensor]]:
    b, hq, hkv, s, t, d, dv = (p[k] for k in ("b", "hq", "hkv", "s", "t", "d", "dv"))
    ins: list[Tensor] = [((b, hq, s, d), "x"), ((b, hkv, t, d), "x"), ((b, hkv, t, dv), "x")]
    if p.get("mask"):
        ins.append((tuple(p["mask"]), "bool" if p.get("mask_bool") else "x"))
    return ins, [((b, hq, s, dv), "x")]


def _rnn_tensors(p: dict, gates: int) -> tuple[list[Tensor], list[Tensor]]:
    seq, b, inp, h, layers = p["seq"], p["b"], p["in"], p["h"], p["layers"]
    dirs = 2 if p["bidir"] else 1
    ins: list[Tensor] = [((seq, b, inp), "x")]
    for layer in range(layers):
        width = inp if layer == 0 else h * dirs
        for _ in range(dirs):
            ins += [((gates * h, width), "w"), ((gates * h, h), "w")]
            if p["bias"]:
                ins += [((gates * h,), "w"), ((gates * h,), "w")]
    outs: list[Tensor] = [((seq, b, dirs * h), "x"), ((layers * dirs, b, h), "x")]
    if gates == 4:  # LSTM: the cell state too
        outs.append(((layers * dirs, b, h), "x"))
    return ins, outs


def _rnn_flops(p: dict, gates: int) -> int:
    """2 x MACs of the gate matrix products: per layer, direction and step ``b x gates*h x (in_l + h)``."""
    dirs = 2 if p["bidir"] else 1
    macs = 0
    for layer in range(p["layers"]):
        width = p["in"] if layer == 0 else p["h"] * dirs
        macs += dirs * p["seq"] * p["b"] * gates * p["h"] * (width + p["h"])
    return 2 * macs


def _broadcast(a: Sequence[int], b: Sequence[int]) -> Shape:
    return tuple(torch.broadcast_shapes(tuple(a), tuple(b)))


def _numel(shape: Iterable[int]) -> int:
    return math.prod(shape)


# ----------------------------------------------------------------------------------------- the op table


@dataclass(frozen=True)
class Op:
    """One operator the sweep can time.

    Attributes:
        kind: Kernel kind (:data:`KINDS`).
        flops: FLOPs of one call as preflight counts them, from the entry's params.
        tensors: ``params -> (inputs, outputs)``, each a list of (shape, role) (see :data:`Tensor`).
        call: ``(params, input tensors) -> output``: the call that is timed.
        layouts: Memory layouts the list varies (``"channels_last"`` converts every 4-D/5-D input).
        read: Bytes-read override ``(params, itemsize) -> bytes`` (``None``: every input once).
        bind: ``(params, inputs) -> zero-argument callable`` for ops that build state first (RNN modules).
    """

    kind: str
    flops: Callable[[dict], int]
    tensors: Callable[[dict], tuple[list[Tensor], list[Tensor]]]
    call: Callable[[dict, list[Any]], Any] | None = None
    layouts: tuple[str, ...] = ("contiguous",)
    read: Callable[[dict, int], int] | None = None
    bind: Callable[[dict, list[Any]], Callable[[], Any]] | None = None


def _unary(kind: str, per_element: int, fn: Callable[[Any], Any], positive: bool = False) -> Op:
    """An elementwise op on ``n`` contiguous elements: ``per_element`` FLOPs each."""
    return Op(
        kind,
        flops=lambda p: per_element * p["n"],
        tensors=lambda p: ([((p["n"],), "pos" if positive else "x")], [((p["n"],), "x")]),
        call=lambda p, t: fn(t[0]),
    )


def _binary(fn: Callable[[Any, Any], Any]) -> Op:
    """A broadcasting binary op on shapes ``a`` and ``b`` (``b == []``: a Python scalar): 1 FLOP per output."""
    return Op(
        "elementwise",
        flops=lambda p: _numel(_broadcast(p["a"], p["b"])),
        tensors=lambda p: (
            [(tuple(p["a"]), "x")] + ([(tuple(p["b"]), "pos")] if p["b"] else []),
            [(_broadcast(p["a"], p["b"]), "x")],
        ),
        call=lambda p, t: fn(t[0], t[1] if p["b"] else 0.5),
    )


def _reduce(per_element: int, fn: Callable[[Any], Any]) -> Op:
    """A reduction of ``x`` (o, n, i) over its middle axis: ``per_element`` FLOPs per input element."""
    return Op(
        "reduction",
        flops=lambda p: per_element * p["o"] * p["n"] * p["i"],
        tensors=lambda p: ([((p["o"], p["n"], p["i"]), "x")], [((p["o"], p["i"]), "x")]),
        call=lambda p, t: fn(t[0]),
    )


def _conv(dims: int) -> Op:
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[dims]
    return Op(
        "conv",
        flops=lambda p: (
            2 * _numel(_conv_tensors(p)[1][0][0]) * (p["c"] // p["g"]) * _numel(p["k"])
            + (_numel(_conv_tensors(p)[1][0][0]) if p["bias"] else 0)
        ),
        tensors=_conv_tensors,
        call=lambda p, t: fn(t[0], t[1], t[2] if p["bias"] else None, p["s"], p["p"], p["d"], p["g"]),
        layouts=("contiguous",) if dims == 1 else ("contiguous", "channels_last"),
    )


def _conv_transpose(dims: int) -> Op:
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[dims]
    return Op(
        "conv",
        flops=lambda p: (
            2 * p["n"] * p["c"] * _numel(p["in"]) * (p["o"] // p["g"]) * _numel(p["k"])
            + (_numel(_conv_transpose_tensors(p)[1][0][0]) if p["bias"] else 0)
        ),
        tensors=_conv_transpose_tensors,
        call=lambda p, t: fn(t[0], t[1], t[2] if p["bias"] else None, p["s"], p["p"], p["op"], p["g"], p["d"]),
        layouts=("contiguous",) if dims == 1 else ("contiguous", "channels_last"),
    )


def _pool(dims: int, fn: Callable[..., Any]) -> Op:
    return Op(
        "pooling",
        flops=lambda p: _numel(_pool_tensors(p)[1][0][0]) * _numel(p["k"]),
        tensors=_pool_tensors,
        call=lambda p, t: fn(t[0], p["k"], p["s"], p["p"], ceil_mode=p["ceil"]),
        layouts=("contiguous", "channels_last") if dims == 2 else ("contiguous",),
    )


def _adaptive_pool(dims: int) -> Op:
    fn = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}[dims]
    return Op(
        "pooling",
        flops=lambda p: p["n"] * p["c"] * (_numel(p["in"]) + _numel(p["out"])),
        tensors=lambda p: ([((p["n"], p["c"], *p["in"]), "x")], [((p["n"], p["c"], *p["out"]), "x")]),
        call=lambda p, t: fn(t[0], p["out"]),
        layouts=("contiguous", "channels_last") if dims == 2 else ("contiguous",),
    )


def _bind_rnn(cls: type, p: dict, t: list[Any]) -> Callable[[], Any]:
    x = t[0]
    module = cls(p["in"], p["h"], p["layers"], bias=p["bias"], bidirectional=p["bidir"])
    module = module.to(device=x.device, dtype=x.dtype).eval()
    return lambda: module(x)


def _sdpa_call(p: dict, t: list[Any]) -> Any:
    mask = t[3] if p.get("mask") else None
    return F.scaled_dot_product_attention(
        t[0], t[1], t[2], attn_mask=mask, is_causal=bool(p["causal"]), enable_gqa=p["hq"] != p["hkv"]
    )


def _embedding_read(p: dict, itemsize: int) -> int:
    """Gathered rows plus the int64 indices (preflight's ``relax.take`` reads output-sized)."""
    return p["n"] * p["d"] * itemsize + p["n"] * ITEMSIZE["int64"]


_LN_AFFINE = 2  # scale and shift: 1 FLOP per element each

#: The ops of the sweep. FLOPs per call, as ``passes.costs`` counts the Relax op(s) the call becomes:
#:
#: ========================  ===========  =====================================================
#: op                        kind         FLOPs
#: ========================  ===========  =====================================================
#: mm (m,k)x(k,n)            gemm         2 m k n
#: bmm (b,m,k)x(b,k,n)       gemm         2 b m k n
#: linear x(m,k) w(n,k)      gemm         2 m k n (+ m n with bias: matmul + add)
#: conv{1,2,3}d              conv         2 x out_numel x (c/g) x prod(k) (+ out_numel with bias)
#: conv_transpose{1,2,3}d    conv         2 x in_numel x (o/g) x prod(k) (+ out_numel with bias)
#: sdpa q(b,hq,s,d)          attention    2 b hq s t (d + dv) (causal and masks not discounted)
#: layer_norm, group_norm    norm         (5 + 2 affine) per element
#: rms_norm                  norm         4 per element
#: batch_norm (eval)         norm         4 per element
#: softmax                   softmax      5 per element
#: unary / binary            elementwise  :data:`UNARY_FLOPS` per element; add/sub/mul/div 1 per output
#: max/avg_pool{1,2,3}d      pooling      out_numel x prod(k)
#: adaptive_avg_pool         pooling      in_numel + out_numel
#: sum, mean, amax           reduction    1 per input element; var 4 per input element
#: permute, copy, cast, cat  copy         0 (bytes only)
#: embedding                 copy         0 (reads the gathered rows and the indices)
#: lstm, gru                 other        2 x MACs of the gate products (gate arithmetic not counted)
#: interpolate               other        nearest 0, bilinear 7 per output element
#: ========================  ===========  =====================================================
OPS: dict[str, Op] = {
    # -- gemm
    "mm": Op(
        "gemm",
        flops=lambda p: 2 * p["m"] * p["k"] * p["n"],
        tensors=lambda p: ([((p["m"], p["k"]), "x"), ((p["k"], p["n"]), "x")], [((p["m"], p["n"]), "x")]),
        call=lambda p, t: torch.mm(t[0], t[1]),
    ),
    "bmm": Op(
        "gemm",
        flops=lambda p: 2 * p["b"] * p["m"] * p["k"] * p["n"],
        tensors=lambda p: (
            [((p["b"], p["m"], p["k"]), "x"), ((p["b"], p["k"], p["n"]), "x")],
            [((p["b"], p["m"], p["n"]), "x")],
        ),
        call=lambda p, t: torch.bmm(t[0], t[1]),
    ),
    "linear": Op(
        "gemm",
        flops=lambda p: 2 * p["m"] * p["k"] * p["n"] + (p["m"] * p["n"] if p["bias"] else 0),
        tensors=lambda p: (
            [((p["m"], p["k"]), "x"), ((p["n"], p["k"]), "x")] + ([((p["n"],), "x")] if p["bias"] else []),
            [((p["m"], p["n"]), "x")],
        ),
        call=lambda p, t: F.linear(t[0], t[1], t[2] if p["bias"] else None),
    ),
    # -- conv
    "conv1d": _conv(1),
    "conv2d": _conv(2),
    "conv3d": _conv(3),
    "conv_transpose1d": _conv_transpose(1),
    "conv_transpose2d": _conv_transpose(2),
    "conv_transpose3d": _conv_transpose(3),
    # -- attention
    "sdpa": Op(
        "attention",
        flops=lambda p: 2 * p["b"] * p["hq"] * p["s"] * p["t"] * (p["d"] + p["dv"]),
        tensors=_sdpa_tensors,
        call=_sdpa_call,
    ),
    # -- norm (inference)
    "layer_norm": Op(
        "norm",
        flops=lambda p: (5 + (_LN_AFFINE if p["affine"] else 0)) * p["r"] * p["c"],
        tensors=lambda p: (
            [((p["r"], p["c"]), "x")] + ([((p["c"],), "x"), ((p["c"],), "x")] if p["affine"] else []),
            [((p["r"], p["c"]), "x")],
        ),
        call=lambda p, t: F.layer_norm(t[0], (p["c"],), *(t[1:3] if p["affine"] else (None, None))),
    ),
    "rms_norm": Op(
        "norm",
        flops=lambda p: 4 * p["r"] * p["c"],
        tensors=lambda p: (
            [((p["r"], p["c"]), "x")] + ([((p["c"],), "x")] if p["affine"] else []),
            [((p["r"], p["c"]), "x")],
        ),
        call=lambda p, t: F.rms_norm(t[0], (p["c"],), t[1] if p["affine"] else None),
    ),
    "group_norm": Op(
        "norm",
        flops=lambda p: (5 + (_LN_AFFINE if p["affine"] else 0)) * p["n"] * p["c"] * p["hw"],
        tensors=lambda p: (
            [((p["n"], p["c"], p["hw"]), "x")] + ([((p["c"],), "x"), ((p["c"],), "x")] if p["affine"] else []),
            [((p["n"], p["c"], p["hw"]), "x")],
        ),
        call=lambda p, t: F.group_norm(t[0], p["g"], *(t[1:3] if p["affine"] else (None, None))),
    ),
    "batch_norm": Op(
        "norm",
        flops=lambda p: 4 * p["n"] * p["c"] * p["h"] * p["w"],
        tensors=lambda p: (
            [((p["n"], p["c"], p["h"], p["w"]), "x"), ((p["c"],), "x"), ((p["c"],), "x")]
            + [((p["c"],), "x"), ((p["c"],), "pos")],
            [((p["n"], p["c"], p["h"], p["w"]), "x")],
        ),
        call=lambda p, t: F.batch_norm(t[0], t[3], t[4], t[1], t[2], training=False),
        layouts=("contiguous", "channels_last"),
    ),
    # -- softmax
    "softmax": Op(
        "softmax",
        flops=lambda p: 5 * p["o"] * p["n"] * p["i"],
        tensors=lambda p: ([((p["o"], p["n"], p["i"]), "x")], [((p["o"], p["n"], p["i"]), "x")]),
        call=lambda p, t: torch.softmax(t[0], 1),
    ),
    # -- elementwise (unary ops: see UNARY_FLOPS; binary ops: 1 FLOP per output element)
    "add": _binary(torch.add),
    "sub": _binary(torch.sub),
    "mul": _binary(torch.mul),
    "div": _binary(torch.div),
    # -- pooling
    "max_pool1d": _pool(1, F.max_pool1d),
    "max_pool2d": _pool(2, F.max_pool2d),
    "max_pool3d": _pool(3, F.max_pool3d),
    "avg_pool1d": _pool(1, F.avg_pool1d),
    "avg_pool2d": _pool(2, F.avg_pool2d),
    "avg_pool3d": _pool(3, F.avg_pool3d),
    "adaptive_avg_pool1d": _adaptive_pool(1),
    "adaptive_avg_pool2d": _adaptive_pool(2),
    "adaptive_avg_pool3d": _adaptive_pool(3),
    # -- reduction (over the middle axis of (o, n, i))
    "sum": _reduce(1, lambda x: torch.sum(x, 1)),
    "mean": _reduce(1, lambda x: torch.mean(x, 1)),
    "amax": _reduce(1, lambda x: torch.amax(x, 1)),
    "var": _reduce(4, lambda x: torch.var(x, 1)),
    # -- copy (0 FLOPs)
    "permute": Op(
        "copy",
        flops=lambda p: 0,
        tensors=lambda p: (
            [(tuple(p["shape"]), "x")],
            [(tuple(p["shape"][i] for i in p["perm"]), "x")],
        ),
        call=lambda p, t: t[0].permute(p["perm"]).contiguous(),
    ),
    "copy": Op(
        "copy",
        flops=lambda p: 0,
        tensors=lambda p: ([((p["n"],), "x")], [((p["n"],), "x")]),
        call=lambda p, t: t[0].clone(),
    ),
    "cast": Op(
        "copy",
        flops=lambda p: 0,
        tensors=lambda p: ([((p["n"],), "x")], [((p["n"],), p["to"])]),
        call=lambda p, t: t[0].to(getattr(torch, p["to"])),
    ),
    "cat": Op(
        "copy",
        flops=lambda p: 0,
        tensors=lambda p: (
            [((p["o"], size, p["i"]), "x") for size in p["sizes"]],
            [((p["o"], sum(p["sizes"]), p["i"]), "x")],
        ),
        call=lambda p, t: torch.cat(t, 1),
    ),
    "embedding": Op(
        "copy",
        flops=lambda p: 0,
        tensors=lambda p: ([((p["v"], p["d"]), "x"), ((p["n"],), "int64")], [((p["n"], p["d"]), "x")]),
        call=lambda p, t: F.embedding(t[1], t[0]),
        read=_embedding_read,
    ),
    # -- other
    "lstm": Op(
        "other",
        flops=partial(_rnn_flops, gates=4),
        tensors=partial(_rnn_tensors, gates=4),
        bind=partial(_bind_rnn, torch.nn.LSTM),
    ),
    "gru": Op(
        "other",
        flops=partial(_rnn_flops, gates=3),
        tensors=partial(_rnn_tensors, gates=3),
        bind=partial(_bind_rnn, torch.nn.GRU),
    ),
    "interpolate": Op(
        "other",
        flops=lambda p: (7 if p["mode"] == "bilinear" else 0) * p["n"] * p["c"] * _numel(p["out"]),
        tensors=lambda p: ([((p["n"], p["c"], *p["in"]), "x")], [((p["n"], p["c"], *p["out"]), "x")]),
        call=lambda p, t: F.interpolate(t[0], size=tuple(p["out"]), mode=p["mode"]),
    ),
}

#: Unary elementwise ops: (FLOPs per element as ``passes.costs.elementwise`` counts the Relax op(s), the
#: call, needs positive input). hardswish/hardsigmoid have no Relax op of their own: the torch frontend
#: emits add, clip, divide (and multiply), 1 + 2 + 1 (+ 1) FLOPs.
UNARY_FLOPS: dict[str, tuple[int, Callable[[Any], Any], bool]] = {
    "relu": (1, F.relu, False),  # relax.nn.relu
    "gelu": (5, F.gelu, False),  # relax.nn.gelu
    "gelu_tanh": (9, partial(F.gelu, approximate="tanh"), False),  # relax.nn.gelu_tanh
    "silu": (5, F.silu, False),  # relax.nn.silu
    "sigmoid": (4, torch.sigmoid, False),  # relax.sigmoid
    "tanh": (1, torch.tanh, False),  # relax.tanh
    "exp": (1, torch.exp, False),  # relax.exp
    "erf": (1, torch.erf, False),  # relax.erf
    "rsqrt": (1, torch.rsqrt, True),  # relax.rsqrt
    "sqrt": (1, torch.sqrt, True),  # relax.sqrt
    "neg": (1, torch.neg, False),  # relax.negative
    "pow": (1, lambda x: torch.pow(x, 2.0), False),  # relax.power
    "clamp": (2, F.hardtanh, False),  # relax.clip (hardtanh, relu6)
    "hardswish": (5, F.hardswish, False),  # add, clip, divide, multiply
    "hardsigmoid": (4, F.hardsigmoid, False),  # add, clip, divide
}
for _name, (_per, _fn, _pos) in UNARY_FLOPS.items():
    OPS[_name] = _unary("elementwise", _per, _fn, _pos)

#: (dtype, tf32) variants per kind; attention adds backends, some ops add layouts.
VARIANTS: dict[str, tuple[tuple[str, bool | None], ...]] = {
    "gemm": (("float32", False), ("float32", True), ("float16", None), ("bfloat16", None)),
    "conv": (("float32", False), ("float32", True), ("float16", None)),
    "attention": (("float16", None), ("bfloat16", None), ("float32", None)),
}
DEFAULT_VARIANTS: tuple[tuple[str, bool | None], ...] = (("float32", None), ("float16", None))


# ----------------------------------------------------------------------------------------- entries


def entry_id(op: str, params: dict, dtype: str, layout: str, tf32: bool | None, backend: str | None) -> str:
    """Return an entry's stable id: 16 hex digits of SHA-256 over its canonical JSON.

    Args:
        op: Op name (a key of :data:`OPS`).
        params: Shape parameters.
        dtype: Dtype name.
        layout: ``"contiguous"`` or ``"channels_last"``.
        tf32: TF32 flag (``None``: torch defaults).
        backend: Attention backend (``None`` for other ops).

    Returns:
        The id.
    """
    content = {"op": op, "params": params, "dtype": dtype, "layout": layout, "tf32": tf32, "backend": backend}
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def make_entry(
    op: str,
    params: dict,
    dtype: str = "float32",
    layout: str = "contiguous",
    tf32: bool | None = None,
    backend: str | None = None,
    weight: int = 0,
    source: str = "manual",
) -> dict:
    """Build a list entry (with its id, kind and planning estimate).

    Args:
        op: Op name (a key of :data:`OPS`).
        params: Shape parameters of the op.
        dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"``.
        layout: ``"contiguous"`` or ``"channels_last"``.
        tf32: TF32 flag for float32 gemm/conv (``None``: torch defaults).
        backend: Attention backend (:data:`BACKENDS`), ``None`` for other ops.
        weight: How often the shape occurs in the zoo config list (0 for spread and derived entries).
        source: ``"zoo"``, ``"spread"``, ``"derived"`` or ``"manual"``.

    Returns:
        The entry dict.

    Raises:
        ValueError: For an unknown op.
    """
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(sorted(OPS))}")
    if OPS[op].kind == "attention" and backend is None:
        backend = "auto"
    entry = {
        "id": entry_id(op, params, dtype, layout, tf32, backend),
        "kind": OPS[op].kind,
        "op": op,
        "params": params,
        "dtype": dtype,
        "layout": layout,
        "tf32": tf32,
        "backend": backend,
        "weight": weight,
        "source": source,
    }
    entry["est_ms"] = round(estimate_ms(entry), 6)
    return entry


def entry_cost(entry: dict) -> dict[str, Any]:
    """FLOPs, bytes and tensor shapes of one entry, as preflight counts them.

    Args:
        entry: A list entry (``op``, ``params``, ``dtype``).

    Returns:
        ``{"flops", "bytes_read", "bytes_written", "inputs", "outputs"}`` (shapes as lists).
    """
    op = OPS[entry["op"]]
    params = entry["params"]
    itemsize = ITEMSIZE[entry["dtype"]]
    ins, outs = op.tensors(params)

    def nbytes(tensors: list[Tensor]) -> int:
        return sum(_numel(shape) * ITEMSIZE.get(role, itemsize) for shape, role in tensors)

    read = op.read(params, itemsize) if op.read else nbytes(ins)
    return {
        "flops": int(op.flops(params)),
        "bytes_read": int(read),
        "bytes_written": nbytes(outs),
        "inputs": [list(shape) for shape, role in ins if role != "w"],
        "outputs": [list(shape) for shape, _ in outs],
    }


def _peak_rate(entry: dict, device: str) -> float:
    peaks = DEVICES[device].peak_flops
    dtype = entry["dtype"]
    tensor_core = entry["kind"] in ("gemm", "conv", "attention") or entry["op"] in ("lstm", "gru")
    if not tensor_core:
        return peaks["fp32"]
    if dtype == "float32":
        tf32 = entry.get("tf32")
        if tf32 is None:  # torch defaults: cuDNN (conv, RNN) uses TF32, matmul does not
            tf32 = entry["kind"] == "conv" or entry["op"] in ("lstm", "gru")
        return peaks["tf32"] if tf32 else peaks["fp32"]
    return peaks["bf16" if dtype == "bfloat16" else "fp16"]


#: Shortest kernel assumed when planning (launch and tail of a tiny kernel inside a CUDA graph), ms.
MIN_KERNEL_MS = 0.002
#: Shortest time of one dependent RNN step (one layer, one time step) assumed when planning, ms.
RNN_STEP_MS = 0.005


def estimate_ms(entry: dict, device: str = "h100-80gb") -> float:
    """Planning estimate of one call's time at the device's datasheet peaks (ms): a lower bound, not a label.

    ``max(FLOPs / peak FLOP/s, bytes / peak bandwidth) + MIN_KERNEL_MS``, where the peak is the tensor-core
    rate of the entry's dtype (TF32 as the entry says) for gemm, conv, attention and RNNs, and the FP32
    CUDA-core rate for the rest; an RNN takes at least ``seq x layers x RNN_STEP_MS`` (its steps depend on
    each other).

    Args:
        entry: A list entry.
        device: Device key of :data:`predictor.devices.DEVICES`.

    Returns:
        Milliseconds.
    """
    cost = entry_cost(entry)
    compute = cost["flops"] / _peak_rate(entry, device)
    memory = (cost["bytes_read"] + cost["bytes_written"]) / DEVICES[device].bandwidth
    floor = MIN_KERNEL_MS
    if entry["op"] in ("lstm", "gru"):  # sequential over time: one dependent step per layer and time step
        params = entry["params"]
        floor = max(floor, params["seq"] * params["layers"] * RNN_STEP_MS)
    return max(compute, memory) * 1e3 + floor


def load_list(path: str | Path) -> list[dict]:
    """Read a kernel list (JSON lines of :func:`make_entry` dicts; a header line is skipped).

    Args:
        path: The file.

    Returns:
        The entries, in file order.

    Raises:
        ValueError: For a line that is not an entry of a known op.
    """
    entries = []
    with Path(path).open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            entry = json.loads(line)
            if entry.get("schema") == LIST_SCHEMA:  # the header
                continue
            if entry.get("op") not in OPS or "id" not in entry:
                raise ValueError(f"{path}:{n}: not a kernel-list entry")
            entries.append(entry)
    return entries


# ----------------------------------------------------------------------------------------- measuring


@dataclass
class SweepOptions:
    """How each entry is timed (defaults follow the module docstring's protocol).

    Attributes:
        device: ``"cuda"`` or ``"cpu"``.
        runs: Timed samples per entry (>= 20).
        warmup: Untimed calls before the probe call.
        target_ms: Length of one timed sample; ``inner = ceil(target_ms / t1)`` calls (default 0.1 ms on
            CUDA, 1 ms on the CPU).
        max_inner: Most calls per sample.
        graphs: Capture each sample's calls in a CUDA graph.
        flush_l2: Overwrite twice the L2 size before every sample (forces ``inner = 1``).
        cudnn_benchmark: ``torch.backends.cudnn.benchmark`` (the whole-model protocol uses True).
        eager_loops: Eager loops of ``inner`` calls for ``eager_ms`` (0: skip).
        max_file_mb: Continue the shard file in a new part past this size.
        threads: CPU only: ``torch.set_num_threads`` (``None``: torch's default).
    """

    device: str = "cuda"
    runs: int = 20
    warmup: int = 2
    target_ms: float | None = None
    max_inner: int = 100
    graphs: bool = True
    flush_l2: bool = False
    cudnn_benchmark: bool = True
    eager_loops: int = 3
    max_file_mb: float = 12.0
    threads: int | None = None


#: Error texts that mean torch has no kernel for the request (an attention backend that rejects the shapes or
#: dtype, an op without a kernel for the dtype on this device): recorded as ``"unsupported"``.
_UNSUPPORTED_TEXT = ("No available kernel", "No viable backend", "not supported", "not implemented for")


class _Sweeper:
    """Times entries in this process: torch, the device, NVML and the environment fields of each record."""

    def __init__(self, opts: SweepOptions) -> None:
        self.opts = opts
        self.cuda = opts.device == "cuda"
        self.nvml: Nvml | None = None
        self.broken = False
        if self.cuda:
            if not torch.cuda.is_available():
                raise RuntimeError("--device cuda but torch.cuda.is_available() is False")
            try:
                index = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
                self.nvml = Nvml(int(index) if index.isdigit() else 0)
            except Exception as exc:  # noqa: BLE001 - no NVML: records carry no clocks
                print(f"[kernels] NVML unavailable ({exc}); clocks will be null", file=sys.stderr)
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            props = torch.cuda.get_device_properties(0)
            name = torch.cuda.get_device_name(0)
            self.device = device_key(name, props.total_memory / 2**20)
            self.l2_bytes = int(getattr(props, "L2_cache_size", 50 * 2**20))
            static = self.nvml.static() if self.nvml else {}
            self.env = {
                "device_name": name,
                "driver": static.get("driver"),
                "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version(),
            }
        else:
            if opts.threads:
                torch.set_num_threads(opts.threads)
            self.device = f"cpu-{host_slug()}"
            self.l2_bytes = 0
            self.env = {"device_name": cpu_model(), "driver": None, "cuda": None, "cudnn": None}
        self.env["torch"] = torch.__version__
        self.oom_types: tuple[type[BaseException], ...] = (torch.OutOfMemoryError, MemoryError)
        self.target_ms = opts.target_ms if opts.target_ms is not None else (0.1 if self.cuda else 1.0)
        self._flush_buf: Any = None

    # -- one entry ------------------------------------------------------------------------------

    def measure(self, entry: dict, deadline: float | None) -> dict | None:
        """Measure one entry and return its record, or ``None`` if it would not end before ``deadline``.

        Args:
            entry: A list entry.
            deadline: ``time.perf_counter()`` value by which the measurement must end (``None``: none).

        Returns:
            The record, or ``None`` (nothing was recorded; the entry stays pending).
        """
        clocks = self.nvml.clocks() if self.nvml else None
        result: dict[str, Any] = {"status": "ok", "error": None}
        try:
            timed = self._measure(entry, deadline)
            if timed is None:
                return None
            result.update(timed)
        except self.oom_types as exc:
            result.update(status="oom", error=_short(exc))
        except Exception as exc:  # noqa: BLE001 - any failure of one op is a labelled record
            text = _short(exc)
            status = "unsupported" if any(s in text for s in _UNSUPPORTED_TEXT) else "error"
            result.update(status=status, error=text)
        finally:
            self._cleanup()
        if result["status"] == "oom" and self.cuda and not self.broken:
            torch.cuda.empty_cache()  # the failed entry's tensors are gone with its exception
        return self._record(entry, result, clocks)

    def _cleanup(self) -> None:
        if not self.cuda:
            return
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a sticky CUDA error: the context is gone
            self.broken = True
            return
        if torch.cuda.memory_reserved() > 8 * 2**30:
            torch.cuda.empty_cache()

    @contextlib.contextmanager
    def _settings(self, entry: dict) -> Iterator[None]:
        """TF32 flags and the attention backend for one entry (restored afterwards)."""
        kind, tf32 = entry["kind"], entry.get("tf32")
        matmul = bool(tf32) if kind == "gemm" and tf32 is not None else False
        cudnn = bool(tf32) if kind == "conv" and tf32 is not None else True
        saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
        torch.backends.cudnn.benchmark = self.opts.cudnn_benchmark
        try:
            backend = entry.get("backend")
            if backend and backend != "auto":
                with sdpa_kernel([_FORCED[backend]]):
                    yield
            else:
                yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved

    def _inputs(self, entry: dict) -> list[Any]:
        op = OPS[entry["op"]]
        params = entry["params"]
        dtype = getattr(torch, entry["dtype"])
        device = self.opts.device
        gen = torch.Generator(device=device).manual_seed(int(entry["id"][:8], 16))
        ins, _ = op.tensors(params)
        tensors: list[Any] = []
        for shape, role in ins:
            if role == "x":
                t = torch.randn(shape, dtype=dtype, device=device, generator=gen)
            elif role == "pos":
                t = torch.rand(shape, dtype=dtype, device=device, generator=gen) + 0.5
            elif role == "int64":
                t = torch.randint(0, params.get("v", 2), shape, device=device, generator=gen)
            elif role == "bool":
                t = torch.rand(shape, device=device, generator=gen) < 0.9
            elif role == "w":
                continue  # made by the op itself
            else:
                t = torch.randn(shape, device=device, generator=gen).to(getattr(torch, role))
            if entry.get("layout") == "channels_last" and t.dim() in (4, 5):
                fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
                t = t.contiguous(memory_format=fmt)
            tensors.append(t)
        return tensors

    def _measure(self, entry: dict, deadline: float | None) -> dict | None:
        op = OPS[entry["op"]]
        params = entry["params"]
        out: dict[str, Any] = {}
        with torch.inference_mode(), self._settings(entry):
            tensors = self._inputs(entry)
            fn = op.bind(params, tensors) if op.bind else partial(op.call, params, tensors)
            if entry["kind"] == "attention" and entry.get("backend") == "auto":
                out["picked"] = _sdpa_pick(params, tensors)
            for _ in range(max(self.opts.warmup, 1)):
                fn()
            t1 = self._once(fn)
            if self.opts.flush_l2 and self.cuda:
                inner = 1
            else:
                inner = int(min(max(math.ceil(self.target_ms / max(t1, 1e-6)), 1), self.opts.max_inner))
            runs = max(self.opts.runs, 1)
            need_s = (runs + self.opts.eager_loops + 2) * inner * t1 / 1e3 + 0.05
            if deadline is not None and time.perf_counter() + need_s > deadline:
                return None
            if self.cuda:
                times, timing, inner = self._time_cuda(fn, inner, runs)
                out["eager_ms"] = (
                    self._eager_ms(fn, inner) if self.opts.eager_loops and timing == "cuda-graph" else None
                )
            else:
                times, timing = self._time_cpu(fn, inner, runs), "wall"
                out["eager_ms"] = None
        out.update(latency_ms=latency_stats(times), inner=inner, timing=timing)
        return out

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def _once(self, fn: Callable[[], Any]) -> float:
        """One call timed alone (ms)."""
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3

    def _flush(self) -> None:
        if self._flush_buf is None:
            self._flush_buf = torch.empty(max(2 * self.l2_bytes, 2**20), dtype=torch.uint8, device="cuda")
        self._flush_buf.fill_(1)

    def _capture(self, fn: Callable[[], Any], inner: int) -> tuple[Any, float]:
        """A CUDA graph of ``inner`` calls and the time of one warm replay (ms)."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(inner):
                fn()
        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return graph, start.elapsed_time(end)

    def _time_cuda(self, fn: Callable[[], Any], inner: int, runs: int) -> tuple[list[float], str, int]:
        graph = None
        timing = "cuda-events"
        if self.opts.graphs:
            try:
                graph, sample = self._capture(fn, inner)
                # The eager probe overstates a tiny kernel (host launch time): if the replay shows the sample
                # is short of the target, capture again with more calls.
                if sample < 0.5 * self.target_ms and inner < self.opts.max_inner and not self.opts.flush_l2:
                    per_call = max(sample / inner, 1e-5)
                    inner = int(min(math.ceil(self.target_ms / per_call), self.opts.max_inner))
                    del graph
                    graph, _ = self._capture(fn, inner)
                timing = "cuda-graph"
            except Exception:  # noqa: BLE001 - not capturable: time eager calls instead
                graph = None
                torch.cuda.synchronize()
        replay: Callable[[], Any]
        if graph is not None:
            replay = graph.replay
        else:

            def replay() -> None:
                for _ in range(inner):
                    fn()

        starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        for start, end in zip(starts, ends, strict=True):
            if self.opts.flush_l2:
                self._flush()
            start.record()
            replay()
            end.record()
        ends[-1].synchronize()
        times = [s.elapsed_time(e) / inner for s, e in zip(starts, ends, strict=True)]
        del replay, graph
        return times, timing, inner

    def _eager_ms(self, fn: Callable[[], Any], inner: int) -> float:
        samples = []
        for _ in range(self.opts.eager_loops):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / inner)
        return round(sorted(samples)[len(samples) // 2], 6)

    def _time_cpu(self, fn: Callable[[], Any], inner: int, runs: int) -> list[float]:
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            for _ in range(inner):
                fn()
            times.append((time.perf_counter() - t) * 1e3 / inner)
        return times

    def _record(self, entry: dict, result: dict, clocks: dict | None) -> dict:
        cost = entry_cost(entry)
        ok = result["status"] == "ok"
        return {
            "schema": RECORD_SCHEMA,
            "id": entry["id"],
            "kind": entry["kind"],
            "op": entry["op"],
            "params": entry["params"],
            "dtype": entry["dtype"],
            "layout": entry.get("layout", "contiguous"),
            "tf32": entry.get("tf32"),
            "backend": entry.get("backend"),
            "inputs": cost["inputs"],
            "outputs": cost["outputs"],
            "flops": cost["flops"],
            "bytes_read": cost["bytes_read"],
            "bytes_written": cost["bytes_written"],
            "status": result["status"],
            "error": result.get("error"),
            "latency_ms": result.get("latency_ms") if ok else None,
            "inner": result.get("inner"),
            "timing": result.get("timing"),
            "eager_ms": result.get("eager_ms"),
            "picked": result.get("picked"),
            "l2_flush": bool(self.opts.flush_l2 and self.cuda),
            "cudnn_benchmark": self.opts.cudnn_benchmark,
            "device": self.device,
            **self.env,
            "clocks": clocks,
            "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
            "weight": entry.get("weight", 0),
            "source": entry.get("source"),
            "sweep_version": SWEEP_VERSION,
        }


def _sdpa_pick(params: dict, tensors: list[Any]) -> str | None:
    """The backend torch picks for these inputs (``torch._fused_sdp_choice``), or ``None`` if it cannot say."""
    try:
        mask = tensors[3] if params.get("mask") else None
        gqa = params["hq"] != params["hkv"]
        choice = int(
            torch._fused_sdp_choice(
                tensors[0], tensors[1], tensors[2], mask, 0.0, bool(params["causal"]), enable_gqa=gqa
            )
        )
    except Exception:  # noqa: BLE001 - a private helper that may change: the pick is optional
        return None
    name = _PICKED.get(choice, str(choice))
    return {v: k for k, v in _FORCED.items()}.get(getattr(SDPBackend, name, None), name.lower())


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


# ----------------------------------------------------------------------------------------- the run


@dataclass
class SweepSummary:
    """What one :func:`run_sweep` call did.

    Attributes:
        device: Device key of the records.
        path: The shard file written last.
        assigned: Entries of this shard in the list.
        skipped: Of those, already recorded (resume).
        measured: Records written by this call.
        statuses: Records written, by status.
        elapsed_s: Wall time of the call.
        stopped_by_budget: The budget ended the call early.
        broken: A CUDA error left the context unusable (exit code 3: run again to go on).
        failing: The first :data:`FAIL_FAST` entries all failed with ``"error"`` (exit code 4: a bug to fix).
    """

    device: str
    path: str
    assigned: int = 0
    skipped: int = 0
    measured: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    stopped_by_budget: bool = False
    broken: bool = False
    failing: bool = False


#: Where a sweep's records go under ``OUT/<device>/``: the L2-flushed timings (``--flush-l2``) apart from the
#: others, so that they neither count as done for the main sweep nor enter the kernel fit (it reads ``kernels``).
KERNELS_FOLDER, L2_FLUSH_FOLDER = "kernels", "kernels-l2flush"


def records_folder(opts: SweepOptions) -> str:
    """``OUT/<device>/`` subfolder of a sweep with ``opts``: `L2_FLUSH_FOLDER` under ``flush_l2``."""
    return L2_FLUSH_FOLDER if opts.flush_l2 else KERNELS_FOLDER


def shard_file(
    out_dir: str | Path, device: str, shard: tuple[int, int], part: int = 0, folder: str = KERNELS_FOLDER
) -> Path:
    """Return ``OUT/<device>/<folder>/shard-III-of-NNN[.PART].jsonl`` (``folder``: `records_folder`).

    Args:
        out_dir: Output directory.
        device: Device key.
        shard: ``(index, count)``.
        part: Continuation part (0: the first file).

    Returns:
        The path.
    """
    index, count = shard
    suffix = f".{part}" if part else ""
    return Path(out_dir) / device / folder / f"shard-{index:03d}-of-{count:03d}{suffix}.jsonl"


def iter_records(dirs: Iterable[str | Path], schema: str = RECORD_SCHEMA) -> Iterator[dict]:
    """Yield the records of ``schema`` in every ``*.jsonl`` and ``*.jsonl.gz`` under ``dirs`` (lines cut
    short by a kill are skipped).

    Args:
        dirs: Files or directories (searched recursively).
        schema: Record schema to keep.

    Yields:
        Record dicts.
    """
    for root in map(Path, dirs):
        if not root.exists():
            continue
        paths = sorted(p for p in root.rglob("*.jsonl*") if p.name.endswith((".jsonl", ".jsonl.gz")))
        for path in paths if root.is_dir() else [root]:
            opener = gzip.open if path.name.endswith(".gz") else open
            with opener(path, "rt") as fh:
                try:
                    for line in fh:
                        if schema not in line:
                            continue
                        try:
                            rec = json.loads(line)
                        except json.JSONDecodeError:
                            continue  # a line cut short by a kill
                        if isinstance(rec, dict) and rec.get("schema") == schema:
                            yield rec
                except EOFError:
                    continue  # a compressed file cut short


def done_ids(dirs: Iterable[str | Path], device: str) -> set[str]:
    """Entry ids already recorded for ``device`` in any ``*.jsonl`` under ``dirs``.

    Args:
        dirs: Directories searched recursively.
        device: Device key the records must carry.

    Returns:
        The ids.
    """
    return {rec["id"] for rec in iter_records(dirs) if rec.get("device") == device and "id" in rec}


#: A run whose first this many records are all ``"error"`` stops (a bug, not a kernel's limit).
FAIL_FAST = 25


def _log(message: str) -> None:
    print(f"[kernels] {message}", file=sys.stderr, flush=True)


class _Writer:
    """Appends records to a shard file, flushed and fsync'd one by one, continuing in parts past a size."""

    def __init__(
        self, out_dir: Path, device: str, shard: tuple[int, int], max_bytes: int, folder: str = KERNELS_FOLDER
    ) -> None:
        self.out_dir, self.device, self.shard, self.max_bytes = out_dir, device, shard, max_bytes
        self.folder = folder
        self.part = 0
        while shard_file(out_dir, device, shard, self.part + 1, folder).exists():
            self.part += 1
        self.path = shard_file(out_dir, device, shard, self.part, folder)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = self.path.open("a")
        if self.fh.tell() and not self.path.read_bytes().endswith(b"\n"):
            self.fh.write("\n")  # a line cut short by a kill stays a line of its own (readers skip it)

    def write(self, record: dict) -> None:
        if self.fh.tell() >= self.max_bytes:
            self.fh.close()
            self.part += 1
            self.path = shard_file(self.out_dir, self.device, self.shard, self.part, self.folder)
            self.fh = self.path.open("a")
        self.fh.write(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())

    def close(self) -> None:
        self.fh.close()


def run_sweep(
    entries: Sequence[dict],
    out_dir: str | Path,
    opts: SweepOptions | None = None,
    shard: tuple[int, int] = (0, 1),
    budget_s: float | None = None,
    limit: int | None = None,
    skip_from: Iterable[str | Path] = (),
    log: Callable[[str], None] | None = _log,
) -> SweepSummary:
    """Measure the entries of one shard in list order, appending one record per entry.

    Args:
        entries: The whole kernel list (every shard sees the same list).
        out_dir: Output directory; records go to ``OUT/<device>/kernels/shard-III-of-NNN.jsonl``
            (``kernels-l2flush/`` under ``opts.flush_l2``: `records_folder`).
        opts: Timing options.
        shard: ``(index, count)``; an entry belongs to shard ``int(id, 16) % count``.
        budget_s: Stop before an entry whose measurement would end after this many seconds.
        limit: Measure at most this many entries.
        skip_from: More directories whose records (for this device) count as done.
        log: Progress sink (``None``: silent).

    Returns:
        A :class:`SweepSummary`.

    Raises:
        ValueError: For a bad shard.
        RuntimeError: If ``--device cuda`` has no GPU.
    """
    opts = opts or SweepOptions()
    index, count = shard
    if not (count >= 1 and 0 <= index < count):
        raise ValueError(f"bad shard {index}/{count}: need 0 <= i < n")
    say = log or (lambda _m: None)
    t_start = time.perf_counter()
    deadline = None if budget_s is None else t_start + budget_s
    sweeper = _Sweeper(opts)
    out_dir = Path(out_dir)
    folder = records_folder(opts)
    writer = _Writer(out_dir, sweeper.device, shard, int(opts.max_file_mb * 2**20), folder)
    summary = SweepSummary(device=sweeper.device, path=str(writer.path))
    inflight = writer.path.parent / f"shard-{index:03d}-of-{count:03d}.inflight"
    marker = None
    try:
        mine = [e for e in entries if shard_of(e["id"], count) == index]
        done = done_ids([out_dir / sweeper.device / folder, *skip_from], sweeper.device)
        by_id = {e["id"]: e for e in mine}
        if inflight.exists():
            crashed = inflight.read_text().strip()
            if crashed in by_id and crashed not in done:
                result = {"status": "crash", "error": "the process died while measuring this entry"}
                writer.write(sweeper._record(by_id[crashed], result, None))
                summary.statuses["crash"] = summary.statuses.get("crash", 0) + 1
                summary.measured += 1
                done.add(crashed)
                say(f"{crashed} ({by_id[crashed]['op']}) crashed the last run: recorded as 'crash'")
        pending = [e for e in mine if e["id"] not in done]
        summary.assigned, summary.skipped = len(mine), len(mine) - len(pending)
        if limit is not None:
            pending = pending[:limit]
        say(
            f"{sweeper.device}: shard {index}/{count}: {len(mine)} entries, {summary.skipped} done, {len(pending)} left"
        )
        last_report = t_start
        marker = inflight.open("w")
        for k, entry in enumerate(pending, 1):
            if deadline is not None and time.perf_counter() + 1.0 > deadline:
                summary.stopped_by_budget = True
                break
            marker.seek(0)
            marker.write(entry["id"])  # left behind if the process dies in this entry (no fsync needed)
            marker.flush()
            record = sweeper.measure(entry, deadline)
            if record is None:
                summary.stopped_by_budget = True
                break
            writer.write(record)
            summary.measured += 1
            summary.statuses[record["status"]] = summary.statuses.get(record["status"], 0) + 1
            now = time.perf_counter()
            if now - last_report >= 10.0 or k == len(pending):
                last_report = now
                statuses = ", ".join(f"{s}={n}" for s, n in sorted(summary.statuses.items()))
                say(f"[{k}/{len(pending)}] {now - t_start:.0f} s: {statuses}")
            if summary.measured == FAIL_FAST and summary.statuses.get("error", 0) == FAIL_FAST:
                summary.failing = True
                say(f"the first {FAIL_FAST} entries all failed ({record['error']}): stopping; fix it first")
                break
            if sweeper.broken:
                summary.broken = True
                say(f"CUDA context unusable after {entry['id']} ({record['error']}); run again to go on")
                break
        marker.close()
        inflight.unlink(missing_ok=True)
    finally:
        if marker is not None and not marker.closed:
            marker.close()
        summary.path = str(writer.path)
        writer.close()
        summary.elapsed_s = time.perf_counter() - t_start
    return summary


# ----------------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of ``python -m predictor.measure.kernels [run]``.

    Returns:
        The parser.
    """
    parser = argparse.ArgumentParser(
        prog="python -m predictor.measure.kernels",
        description="Single-operator kernel sweep: time a kernel list (predictor.measure.kernel_list makes one).",
    )
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="time the entries of a kernel list (the default command)")
    run.add_argument("--device", choices=("cuda", "cpu"), required=True)
    run.add_argument("--list", required=True, help="kernel list (JSON lines from make-list)")
    run.add_argument("--out", required=True, help="output dir; records go to OUT/<device>/kernels/")
    run.add_argument("--shard", type=shard_arg, default=(0, 1), help="i/n: the entries of shard i of n")
    run.add_argument("--budget-s", type=float, default=0.0, help="seconds from the start (0: none)")
    run.add_argument("--deadline", type=float, default=None, help="Unix time to stop by (the earlier one wins)")
    run.add_argument("--limit", type=int, default=None, help="at most N entries")
    run.add_argument("--skip-from", action="append", default=[], help="more dirs whose records count as done")
    run.add_argument("--runs", type=int, default=20, help="timed samples per entry (>= 20 for data)")
    run.add_argument("--warmup", type=int, default=2)
    run.add_argument("--target-ms", type=float, default=None, help="length of one sample (0.1 CUDA, 1 CPU)")
    run.add_argument("--max-inner", type=int, default=100)
    run.add_argument(
        "--flush-l2",
        action="store_true",
        help="overwrite 2 x L2 before every sample (records: OUT/<device>/kernels-l2flush/)",
    )
    run.add_argument("--no-graphs", action="store_true", help="time eager calls, not CUDA graph replays")
    run.add_argument("--no-cudnn-benchmark", action="store_true")
    run.add_argument("--max-est-ms", type=float, default=None, help="skip entries estimated longer than this")
    run.add_argument("--ops", help="comma-separated ops or kinds to keep")
    run.add_argument("--max-file-mb", type=float, default=12.0)
    run.add_argument("--threads", type=int, default=None, help="CPU only: torch threads")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: Command-line arguments (``run`` is implied when the first is not a command).

    Returns:
        Exit code: 0 done (also when stopped by the budget), 2 bad usage, 3 the CUDA context broke (run again),
        4 the first entries all failed (a bug: see the records' ``error``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("run", "-h", "--help"):
        argv.insert(0, "run")
    args = build_parser().parse_args(argv)
    try:
        entries = load_list(args.list)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.max_est_ms is not None:
        entries = [e for e in entries if e.get("est_ms", 0.0) <= args.max_est_ms]
    if args.ops:
        keep = set(args.ops.split(","))
        entries = [e for e in entries if e["op"] in keep or e["kind"] in keep]
    opts = SweepOptions(
        device=args.device,
        runs=args.runs,
        warmup=args.warmup,
        target_ms=args.target_ms,
        max_inner=args.max_inner,
        graphs=not args.no_graphs,
        flush_l2=args.flush_l2,
        cudnn_benchmark=not args.no_cudnn_benchmark,
        max_file_mb=args.max_file_mb,
        threads=args.threads,
    )
    budget = args.budget_s or None
    if args.deadline is not None:
        budget = min(budget or math.inf, args.deadline - time.time())
    try:
        summary = run_sweep(entries, args.out, opts, args.shard, budget, args.limit, args.skip_from)
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{shard_summary(summary, args.shard, 'kernels', rate_digits=0)}"
        f"{' (CUDA context broke)' if summary.broken else ''}"
        f"{' (every entry failed)' if summary.failing else ''}"
        f" -> {summary.path}"
    )
    return 3 if summary.broken else 4 if summary.failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
