"""Derive the kernel sweep's list from the zoo config list, on the CPU (``python -m predictor.measure.kernel_list``).

1. **Trace.** Every (zoo spec, batch) of the config list is run once on the meta device under
   :class:`KernelTrace`, a :class:`predictor.measure.configs.MetaDispatch` (the same dispatch trace the
   memory estimate uses; the module is built once per spec, its example inputs re-batched). Every ATen op
   that writes fresh memory or mutates an input (a kernel; views and aliases are not) is mapped by
   :data:`MAPPERS` to an op of :data:`predictor.measure.kernels.OPS` and canonical shape parameters
   (broadcast shapes coalesced as TensorIterator does, reductions and softmax as ``(outer, n, inner)``,
   copies as a permutation of the input's memory order, a linear's leading dims folded into ``m``). Ops with
   no mapping are counted by name (``unmapped`` in the summary); factories (``arange``, ``zeros``...) and
   integer or boolean mask arithmetic are ignored (the kernel view drops constant mask construction).
2. **Weight.** Identical (op, params) are merged; the weight is how often they occur over all configs of the
   list (a (spec, batch) listed in float32 and float16 counts twice).
3. **Derived.** Ops and variants the zoo lacks are derived from all its shapes (``source: "derived"``):
   conv1d (length ``h x w``), conv3d (8 frames, half the height and width), transposed convs (1-D to 3-D,
   the inverse of each strided conv), dilated convs, RMS norm (from layer norms), grouped-query attention
   (``hkv = hq/4, hq/8``) and causal attention (from encoders), ``bmm`` (attention's ``Q K^T``), ``mm``,
   gelu-tanh, erf, exp, sqrt, copies, casts, sum/amax/var, 1-D and 3-D pooling, nearest interpolation.
4. **Spread.** ``spread`` seeded random neighbours of every shape (``source: "spread"``): the batch-like
   size scaled by ``2^U(-1, 1)`` and, with probability 1/2, the other sizes too, rounded so that multiples of
   8 stay multiples of 8, and the result checked by running the op on the meta device.
5. **Variants.** Each shape in every (dtype, TF32) variant of its kind (:data:`kernels.VARIANTS`), every
   layout of its op and, for attention, every backend (float32 only with ``efficient``, ``math`` and
   ``auto``); entries over ``max_est_ms`` (the H100 planning estimate) or ``max_gib`` of tensors are dropped.
6. **Priority.** :func:`priority_entries` go first, before the ordered strata: shapes whose absence the
   whole-model comparisons exposed (large matrix-vector products of weight-streaming layers, decode-shaped
   attention over a long KV cache).
7. **Order.** Strata are (op, dtype, TF32, layout, backend); within one, zoo shapes by weight, derived and
   spread shapes (ranked by the weight of the shape they came from) take turns; each kind deals its strata
   in turn and the kinds are dealt :data:`KIND_SLOTS` entries per round, so any prefix of the ordered strata (a run
   stopped by its budget after the priority block) covers every op and variant; the list ends at ``max_entries``
   (30,000).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

import zoo
from predictor.measure import kernels as K
from predictor.measure.configs import MetaDispatch, load_configs

__all__ = [
    "KernelTrace",
    "MAPPERS",
    "build_list",
    "coalesce_binary",
    "coalesce_permute",
    "plan_record_s",
    "prepend_priority",
    "priority_entries",
    "trace_configs",
]

Params = dict[str, Any]
Mapped = list[tuple[str, Params]]

# ----------------------------------------------------------------------------------------- canonical forms


def _shape(t: torch.Tensor) -> list[int]:
    return [int(d) for d in t.shape]


def _numel(shape: Iterable[int]) -> int:
    return math.prod(shape)


def _is_float(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.float16, torch.bfloat16)


def _listify(value: object, dims: int) -> list[int]:
    if isinstance(value, int):
        return [value] * dims
    items = [int(v) for v in value]  # type: ignore[union-attr]
    return items * dims if len(items) == 1 else items


def coalesce_binary(a: Sequence[int], b: Sequence[int]) -> tuple[list[int], list[int]]:
    """Canonical shapes of a broadcasting binary op, as TensorIterator coalesces them.

    Size-1 output dims are dropped; adjacent dims where each operand is either full or broadcast in both
    are merged. The operand with more elements comes first. A 0-d operand stays ``[]`` (a scalar).

    Args:
        a: First operand's shape.
        b: Second operand's shape (``[]`` for a scalar).

    Returns:
        ``(a', b')``, e.g. ``(8, 64, 56, 56) + (1, 64, 1, 1)`` -> ``([8, 64, 3136], [1, 64, 1])``.
    """
    if not b:
        return [_numel(a)], []
    if not a:
        return [_numel(b)], []
    out = list(torch.broadcast_shapes(tuple(a), tuple(b)))
    pa = [1] * (len(out) - len(a)) + list(a)
    pb = [1] * (len(out) - len(b)) + list(b)
    dims: list[list[int]] = []  # [size, a_full, b_full]
    for size, da, db in zip(out, pa, pb, strict=True):
        if size == 1:
            continue
        full = [size, int(da == size), int(db == size)]
        if dims and dims[-1][1:] == full[1:]:
            dims[-1][0] *= size
        else:
            dims.append(full)
    if not dims:
        return [1], [1]
    ca = [d[0] if d[1] else 1 for d in dims]
    cb = [d[0] if d[2] else 1 for d in dims]
    return (ca, cb) if _numel(ca) >= _numel(cb) else (cb, ca)


def coalesce_permute(shape: Sequence[int], perm: Sequence[int]) -> tuple[list[int], list[int]]:
    """Canonical form of a copy that permutes: ``x(shape).permute(perm).contiguous()``.

    Size-1 dims are dropped and dims adjacent in both the input and the output order merged.

    Args:
        shape: The input's sizes in memory order (outermost first).
        perm: For each output dim (in the output's memory order), the input dim it reads.

    Returns:
        ``(shape', perm')``; ``perm'`` is the identity (``[0]``) for a plain copy.
    """
    kept = [i for i in range(len(shape)) if shape[i] != 1]
    if not kept:
        return [1], [0]
    renum = {old: new for new, old in enumerate(kept)}
    order = [renum[i] for i in perm if i in renum]
    sizes = [shape[i] for i in kept]
    groups: list[list[int]] = []  # runs of input dims read consecutively in output order
    for i in order:
        if groups and groups[-1][-1] + 1 == i:
            groups[-1].append(i)
        else:
            groups.append([i])
    by_input = sorted(groups, key=lambda g: g[0])
    new_shape = [_numel(sizes[i] for i in g) for g in by_input]
    new_perm = [by_input.index(g) for g in groups]
    return new_shape, new_perm


def _memory_order(t: torch.Tensor) -> list[int]:
    """Dims of ``t`` from outermost to innermost in memory (by stride; size-1 dims keep their place)."""
    return sorted(range(t.dim()), key=lambda d: (-(t.stride(d) if t.shape[d] > 1 else 0), d))


def _outer_n_inner(shape: Sequence[int], dims: Sequence[int]) -> tuple[int, int, int] | None:
    """(outer, reduced, inner) sizes when ``dims`` are adjacent; ``None`` otherwise."""
    nd = len(shape)
    dims = sorted({d % nd for d in dims}) if nd else []
    if not dims:
        return _numel(shape), 1, 1
    if dims != list(range(dims[0], dims[-1] + 1)):
        return None
    return _numel(shape[: dims[0]]), _numel(shape[dims[0] : dims[-1] + 1]), _numel(shape[dims[-1] + 1 :])


# ----------------------------------------------------------------------------------------- ATen -> sweep op

IGNORED = "ignored"  # a mapper's answer for ops that are not kernels worth timing


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any = None) -> Any:
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


def _linear(args: tuple, kwargs: dict, out: Any) -> Mapped:
    x, w, bias = args[0], args[1], _arg(args, kwargs, 2, "bias")
    k, n = int(w.shape[1]), int(w.shape[0])
    return [("linear", {"m": x.numel() // k, "k": k, "n": n, "bias": bias is not None})]


def _addmm(args: tuple, kwargs: dict, out: Any) -> Mapped:
    a, b = args[1], args[2]
    return [("linear", {"m": int(a.shape[0]), "k": int(a.shape[1]), "n": int(b.shape[1]), "bias": True})]


def _mm(args: tuple, kwargs: dict, out: Any) -> Mapped:
    a, b = args[0], args[1]
    return [("mm", {"m": int(a.shape[0]), "k": int(a.shape[1]), "n": int(b.shape[1])})]


def _bmm(args: tuple, kwargs: dict, out: Any) -> Mapped:
    a, b = (args[1], args[2]) if len(args) > 2 else (args[0], args[1])  # baddbmm(self, b1, b2)
    return [("bmm", {"b": int(a.shape[0]), "m": int(a.shape[1]), "k": int(a.shape[2]), "n": int(b.shape[2])})]


def _matmul(args: tuple, kwargs: dict, out: Any) -> Mapped | None:
    a, b = args[0], args[1]
    if a.dim() < 2 or b.dim() < 2:
        return None
    k, n = int(a.shape[-1]), int(b.shape[-1])
    if b.dim() == 2:
        return [("mm", {"m": a.numel() // k, "k": k, "n": n})]
    batch = _numel(torch.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])))
    return [("bmm", {"b": batch, "m": int(a.shape[-2]), "k": k, "n": n})]


def _conv_params(x: torch.Tensor, w: torch.Tensor, bias: Any, stride: Any, padding: Any, dilation: Any, groups: int):
    dims = x.dim() - 2
    k = [int(v) for v in w.shape[2:]]
    d = _listify(dilation, dims)
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        else:  # "same": symmetric only when every d(k-1) is even
            if any(di * (ki - 1) % 2 for di, ki in zip(d, k, strict=True)):
                return None
            padding = [di * (ki - 1) // 2 for di, ki in zip(d, k, strict=True)]
    return dims, {
        "n": int(x.shape[0]),
        "c": int(x.shape[1]),
        "in": [int(v) for v in x.shape[2:]],
        "k": k,
        "s": _listify(stride, dims),
        "p": _listify(padding, dims),
        "d": d,
        "g": int(groups),
        "bias": bias is not None,
    }


def _conv(args: tuple, kwargs: dict, out: Any) -> Mapped | None:
    x, w = args[0], args[1]
    if x.dim() not in (3, 4, 5):
        return None
    got = _conv_params(
        x,
        w,
        _arg(args, kwargs, 2, "bias"),
        _arg(args, kwargs, 3, "stride", 1),
        _arg(args, kwargs, 4, "padding", 0),
        _arg(args, kwargs, 5, "dilation", 1),
        _arg(args, kwargs, 6, "groups", 1),
    )
    if got is None:
        return None
    dims, p = got
    p["o"] = int(w.shape[0])
    return [(f"conv{dims}d", p)]


def _conv_transpose(args: tuple, kwargs: dict, out: Any) -> Mapped | None:
    x, w = args[0], args[1]
    if x.dim() not in (3, 4, 5):
        return None
    groups = _arg(args, kwargs, 6, "groups", 1)
    got = _conv_params(
        x,
        w,
        _arg(args, kwargs, 2, "bias"),
        _arg(args, kwargs, 3, "stride", 1),
        _arg(args, kwargs, 4, "padding", 0),
        _arg(args, kwargs, 7, "dilation", 1),
        groups,
    )
    if got is None:
        return None
    dims, p = got
    p["o"] = int(w.shape[1]) * int(groups)
    p["op"] = _listify(_arg(args, kwargs, 5, "output_padding", 0), dims)
    return [(f"conv_transpose{dims}d", p)]


def _convolution(args: tuple, kwargs: dict, out: Any) -> Mapped | None:
    # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
    x, w, bias, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    if transposed:
        return _conv_transpose((x, w, bias, stride, padding, output_padding, groups, dilation), {}, out)
    return _conv((x, w, bias, stride, padding, dilation, groups), {}, out)


def _sdpa(args: tuple, kwargs: dict, out: Any) -> Mapped | None:
    q, k, v = args[0], args[1], args[2]
    if q.dim() != 4:
        return None
    mask = _arg(args, kwargs, 3, "attn_mask")
    p: Params = {
        "b": int(q.shape[0]),
        "hq": int(q.shape[1]),
        "hkv": int(k.shape[1]),
        "s": int(q.shape[2]),
        "t": int(k.shape[2]),
        "d": int(q.shape[3]),
        "dv": int(v.shape[3]),
        "causal": bool(_arg(args, kwargs, 5, "is_causal", False)),
        "mask": None,
        "mask_bool": False,
    }
    if isinstance(mask, torch.Tensor):
        p["mask"] = [1] * (4 - mask.dim()) + _shape(mask)
        p["mask_bool"] = mask.dtype == torch.bool
    return [("sdpa", p)]


def _layer_norm(op: str) -> Callable[[tuple, dict, Any], Mapped]:
    def mapper(args: tuple, kwargs: dict, out: Any) -> Mapped:
        x, shape, weight = args[0], args[1], _arg(args, kwargs, 2, "weight")
        c = _numel(shape)
        return [(op, {"r": x.numel() // c, "c": c, "affine": weight is not None})]

    return mapper


def _group_norm(args: tuple, kwargs: dict, out: Any) -> Mapped:
    x, groups, weight = args[0], args[1], _arg(args, kwargs, 2, "weight")
    n, c = int(x.shape[0]), int(x.shape[1])
    return [
        ("group_norm", {"n": n, "c": c, "hw": x.numel() // (n * c), "g": int(groups), "affine": weight is not None})
    ]


def _batch_norm(args: tuple, kwargs: dict, out: Any) -> Mapped | None:
    x = args[0]
    if x.dim() < 2 or bool(_arg(args, kwargs, 5, "training", False)):
        return None
    spatial = _shape(x)[2:]
    h, w = (spatial[0], _numel(spatial[1:])) if spatial else (1, 1)
    return [("batch_norm", {"n": int(x.shape[0]), "c": int(x.shape[1]), "h": h, "w": w})]


def _softmax(args: tuple, kwargs: dict, out: Any) -> Mapped | None:
    x, dim = args[0], args[1]
    o, n, i = _outer_n_inner(_shape(x), [dim])  # type: ignore[misc]
    return [("softmax", {"o": o, "n": n, "i": i})]


def _unary(name: str) -> Callable[[tuple, dict, Any], Mapped | str]:
    def mapper(args: tuple, kwargs: dict, out: Any) -> Mapped | str:
        x = args[0]
        if not _is_float(x):
            return IGNORED
        op = name
        if name == "gelu" and _arg(args, kwargs, 1, "approximate", "none") == "tanh":
            op = "gelu_tanh"
        return [(op, {"n": x.numel()})]

    return mapper


def _binary(name: str) -> Callable[[tuple, dict, Any], Mapped | str]:
    def mapper(args: tuple, kwargs: dict, out: Any) -> Mapped | str:
        a, b = args[0], args[1]
        if not isinstance(a, torch.Tensor):
            a, b = b, a
        if not _is_float(a) or (isinstance(b, torch.Tensor) and not b.is_floating_point()):
            return IGNORED  # integer and boolean (mask, position) arithmetic
        b_shape = _shape(b) if isinstance(b, torch.Tensor) else []
        ca, cb = coalesce_binary(_shape(a), b_shape)
        return [(name, {"a": ca, "b": cb})]

    return mapper


def _pool(kind: str) -> Callable[[tuple, dict, Any], Mapped | None]:
    def mapper(args: tuple, kwargs: dict, out: Any) -> Mapped | None:
        x = args[0]
        dims = x.dim() - 2
        if dims not in (1, 2, 3):
            return None
        k = _listify(args[1], dims)
        stride = _arg(args, kwargs, 2, "stride", None)
        stride = _listify(stride, dims) if stride not in (None, []) else k
        padding = _listify(_arg(args, kwargs, 3, "padding", 0), dims)
        if kind == "max":
            if any(d != 1 for d in _listify(_arg(args, kwargs, 4, "dilation", 1), dims)):
                return None
            ceil = bool(_arg(args, kwargs, 5, "ceil_mode", False))
        else:
            ceil = bool(_arg(args, kwargs, 4, "ceil_mode", False))
        p = {"n": int(x.shape[0]), "c": int(x.shape[1]), "in": _shape(x)[2:], "k": k, "s": stride, "p": padding}
        p["ceil"] = ceil
        return [(f"{kind}_pool{dims}d", p)]

    return mapper


def _adaptive_pool(args: tuple, kwargs: dict, out: Any) -> Mapped | None:
    x = args[0]
    dims = x.dim() - 2
    if dims not in (1, 2, 3):
        return None
    return [
        (
            f"adaptive_avg_pool{dims}d",
            {"n": int(x.shape[0]), "c": int(x.shape[1]), "in": _shape(x)[2:], "out": _shape(out)[2:]},
        )
    ]


def _reduction(name: str) -> Callable[[tuple, dict, Any], Mapped | str | None]:
    def mapper(args: tuple, kwargs: dict, out: Any) -> Mapped | str | None:
        x = args[0]
        if not _is_float(x):
            return IGNORED
        dims = _arg(args, kwargs, 1, "dim", None)
        dims = list(range(x.dim())) if dims in (None, []) else _listify(dims, 1)
        got = _outer_n_inner(_shape(x), dims)
        if got is None:
            return None
        o, n, i = got
        return [(name, {"o": o, "n": n, "i": i})]

    return mapper


def _copy_of(src: torch.Tensor, dst: torch.Tensor) -> Mapped | str | None:
    """A copy from ``src``'s memory layout into ``dst``'s (same logical shape): permute, copy or cast."""
    if tuple(src.shape) != tuple(dst.shape):
        return None
    if any(st == 0 for st, n in zip(src.stride(), src.shape, strict=True) if n > 1):
        return None  # a broadcast (expanded) source
    if not (_is_float(src) and _is_float(dst)):
        return IGNORED
    if src.dtype != dst.dtype:
        return [("cast", {"n": src.numel(), "to": str(dst.dtype).removeprefix("torch.")})]
    src_order, dst_order = _memory_order(src), _memory_order(dst)
    shape = [int(src.shape[d]) for d in src_order]
    perm = [src_order.index(d) for d in dst_order]
    shape, perm = coalesce_permute(shape, perm)
    if perm == list(range(len(perm))):
        return [("copy", {"n": src.numel()})]
    return [("permute", {"shape": shape, "perm": perm})]


def _clone(args: tuple, kwargs: dict, out: Any) -> Mapped | str | None:
    return _copy_of(args[0], out)


def _reshape(args: tuple, kwargs: dict, out: Any) -> Mapped | str | None:
    """A reshape that copies: ``x.contiguous()`` then a view."""
    x = args[0]
    return _copy_of(x, torch.empty(x.shape, dtype=x.dtype, device="meta"))


def _roll(args: tuple, kwargs: dict, out: Any) -> Mapped | str:
    """NB: a roll moves the bytes of a copy (in a shifted order): timed as a copy."""
    return [("copy", {"n": args[0].numel()})] if _is_float(args[0]) else IGNORED


def _copy_(args: tuple, kwargs: dict, out: Any) -> Mapped | str | None:
    return _copy_of(args[1], args[0])


def _cat(args: tuple, kwargs: dict, out: Any) -> Mapped | str | None:
    tensors = [t for t in args[0] if t.numel() > 0]
    if not tensors or not _is_float(tensors[0]):
        return IGNORED
    dim = int(_arg(args, kwargs, 1, "dim", 0)) % out.dim()
    shape = _shape(out)
    sizes = [int(t.shape[dim]) if t.dim() == out.dim() else 1 for t in tensors]  # stack: 1 each
    return [("cat", {"o": _numel(shape[:dim]), "sizes": sizes, "i": _numel(shape[dim + 1 :])})]


def _stack(args: tuple, kwargs: dict, out: Any) -> Mapped | str | None:
    tensors = [t for t in args[0] if t.numel() > 0]
    if not tensors or not _is_float(tensors[0]):
        return IGNORED
    dim = int(_arg(args, kwargs, 1, "dim", 0)) % out.dim()
    shape = _shape(out)
    return [("cat", {"o": _numel(shape[:dim]), "sizes": [1] * len(tensors), "i": _numel(shape[dim + 1 :])})]


def _embedding(args: tuple, kwargs: dict, out: Any) -> Mapped:
    weight, indices = args[0], args[1]
    return [("embedding", {"v": int(weight.shape[0]), "d": int(weight.shape[1]), "n": indices.numel()})]


def _rnn(name: str) -> Callable[[tuple, dict, Any], Mapped | None]:
    def mapper(args: tuple, kwargs: dict, out: Any) -> Mapped | None:
        x, hx, _params, bias, layers, _dropout, _train, bidir, batch_first = args[:9]
        if x.dim() != 3:
            return None
        h0 = hx[0] if isinstance(hx, (list, tuple)) else hx
        seq, b = (int(x.shape[1]), int(x.shape[0])) if batch_first else (int(x.shape[0]), int(x.shape[1]))
        p = {
            "seq": seq,
            "b": b,
            "in": int(x.shape[2]),
            "h": int(h0.shape[-1]),
            "layers": int(layers),
            "bidir": bool(bidir),
            "bias": bool(bias),
        }
        return [(name, p)]

    return mapper


def _interpolate(mode: str) -> Callable[[tuple, dict, Any], Mapped | None]:
    def mapper(args: tuple, kwargs: dict, out: Any) -> Mapped | None:
        x = args[0]
        if x.dim() != 4:
            return None
        return [
            (
                "interpolate",
                {"n": int(x.shape[0]), "c": int(x.shape[1]), "in": _shape(x)[2:], "out": _shape(out)[2:], "mode": mode},
            )
        ]

    return mapper


def _ignore(args: tuple, kwargs: dict, out: Any) -> str:
    return IGNORED


#: ATen op name (``aten::`` dropped, an in-place ``_`` suffix dropped) -> mapper ``(args, kwargs, out)``
#: returning ``[(op, params)]``, :data:`IGNORED`, or ``None`` (a kernel the sweep does not time: unmapped).
MAPPERS: dict[str, Callable[[tuple, dict, Any], Mapped | str | None]] = {
    "linear": _linear,
    "addmm": _addmm,
    "mm": _mm,
    "bmm": _bmm,
    "baddbmm": _bmm,
    "matmul": _matmul,
    "conv1d": _conv,
    "conv2d": _conv,
    "conv3d": _conv,
    "convolution": _convolution,
    "_convolution": _convolution,
    "conv_transpose1d": _conv_transpose,
    "conv_transpose2d": _conv_transpose,
    "conv_transpose3d": _conv_transpose,
    "scaled_dot_product_attention": _sdpa,
    "layer_norm": _layer_norm("layer_norm"),
    "rms_norm": _layer_norm("rms_norm"),
    "group_norm": _group_norm,
    "batch_norm": _batch_norm,
    "softmax": _softmax,
    "_softmax": _softmax,
    **{name: _unary(name) for name in ("relu", "gelu", "silu", "sigmoid", "tanh", "exp", "erf", "rsqrt", "sqrt")},
    "neg": _unary("neg"),
    "pow": _unary("pow"),
    "hardtanh": _unary("clamp"),
    "clamp": _unary("clamp"),
    "relu6": _unary("clamp"),
    "hardswish": _unary("hardswish"),
    "hardsigmoid": _unary("hardsigmoid"),
    "add": _binary("add"),
    "sub": _binary("sub"),
    "rsub": _binary("sub"),
    "mul": _binary("mul"),
    "div": _binary("div"),
    "max_pool1d": _pool("max"),
    "max_pool2d": _pool("max"),
    "max_pool3d": _pool("max"),
    "max_pool2d_with_indices": _pool("max"),
    "avg_pool1d": _pool("avg"),
    "avg_pool2d": _pool("avg"),
    "avg_pool3d": _pool("avg"),
    "adaptive_avg_pool1d": _adaptive_pool,
    "adaptive_avg_pool2d": _adaptive_pool,
    "adaptive_avg_pool3d": _adaptive_pool,
    "_adaptive_avg_pool2d": _adaptive_pool,
    "sum": _reduction("sum"),
    "mean": _reduction("mean"),
    "amax": _reduction("amax"),
    "var": _reduction("var"),
    "std": _reduction("var"),
    "contiguous": _clone,
    "clone": _clone,
    "_to_copy": _clone,
    "to": _clone,
    "type_as": _clone,
    "copy": _copy_,
    "reshape": _reshape,
    "flatten": _reshape,
    "roll": _roll,
    "cat": _cat,
    "stack": _stack,
    "embedding": _embedding,
    "lstm": _rnn("lstm"),
    "gru": _rnn("gru"),
    "upsample_bilinear2d": _interpolate("bilinear"),
    "upsample_nearest2d": _interpolate("nearest"),
    **dict.fromkeys(
        (
            "empty",
            "empty_like",
            "empty_strided",
            "zeros",
            "zeros_like",
            "ones",
            "ones_like",
            "full",
            "full_like",
            "arange",
            "fill",
            "zero",
            "scalar_tensor",
            "lift_fresh",
            "new_zeros",
            "new_ones",
            "new_full",
            "new_empty",
            "eq",
            "ne",
            "ge",
            "gt",
            "le",
            "lt",
            "all",
            "any",
            "logical_not",
            "logical_and",
            "logical_or",
            "bitwise_not",
            "masked_fill",
            "where",
            "cumsum",
            "diff",
            "dropout",
            "alias",
            "detach",
        ),
        _ignore,
    ),
}


class KernelTrace(MetaDispatch):
    """Record the sweep ops of one meta-device forward pass (see the module docstring, step 1).

    Attributes:
        ops: ``(op, params JSON) -> count`` of mapped kernels.
        unmapped: ATen op name -> count of kernels without a sweep op.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[tuple[str, str]] = Counter()
        self.unmapped: Counter[str] = Counter()

    def run(self, func, args: tuple, kwargs: dict):
        # aten::lstm/gru on meta unroll every step in Python (a GRU over 1024 steps takes 15 s): answer
        # with empty outputs of the right shapes instead.
        name = func._schema.name
        if name in ("aten::lstm", "aten::gru") and func._overloadname == "input" and args[0].dim() == 3:
            x, hx, bidir = args[0], args[1], args[7]
            h0 = hx[0] if isinstance(hx, (list, tuple)) else hx
            dirs = 2 if bidir else 1
            # (seq, batch) or (batch, seq): the output keeps the input's first two dims.
            out = torch.empty((x.shape[0], x.shape[1], dirs * h0.shape[-1]), dtype=x.dtype, device=x.device)
            n_states = 2 if name == "aten::lstm" else 1
            return (out, *(torch.empty(h0.shape, dtype=x.dtype, device=x.device) for _ in range(n_states)))
        return func(*args, **kwargs)

    def observe(self, func, args: tuple, kwargs: dict, out: object, fresh: list[torch.Tensor]) -> None:
        if not fresh and not func._schema.is_mutable:
            return  # a view or alias: no kernel
        name = func._schema.name.removeprefix("aten::")
        mapper = MAPPERS.get(name) or MAPPERS.get(name.removesuffix("_"))
        first = fresh[0] if fresh else (args[0] if args and isinstance(args[0], torch.Tensor) else out)
        try:
            got = mapper(args, kwargs, first) if mapper else None
        except Exception:  # noqa: BLE001 - an argument layout the mapper did not foresee: count it unmapped
            got = None
        if got == IGNORED:
            return
        if not got:
            self.unmapped[name] += 1
            return
        for op, params in got:
            self.ops[(op, json.dumps(params, sort_keys=True))] += 1


def _rebatch(inputs: Sequence[torch.Tensor], batch: int) -> tuple[torch.Tensor, ...]:
    return tuple(torch.empty((batch, *t.shape[1:]), dtype=t.dtype, device="meta") for t in inputs)


def _trace_spec(spec: str, batches: dict[int, int]) -> tuple[Counter, Counter, list[str], float]:
    """Trace one spec at each of its batches; counts are weighted by ``batches[batch]`` configs."""
    t0 = time.perf_counter()
    weights: Counter[tuple[str, str]] = Counter()
    unmapped: Counter[str] = Counter()
    failed: list[str] = []
    try:
        model = zoo.build(spec, batch=1, dtype=torch.float32, device="meta")
    except zoo.ZooError:
        return weights, unmapped, [spec], time.perf_counter() - t0
    for batch, count in sorted(batches.items()):
        trace = KernelTrace()
        try:
            with torch.inference_mode(), trace:
                model.module(*_rebatch(model.example_inputs, batch))
        except Exception:  # noqa: BLE001 - a model the meta device cannot run: skipped, reported
            failed.append(f"{spec}@{batch}")
            continue
        for key, c in trace.ops.items():
            weights[key] += c * count
        for key, c in trace.unmapped.items():
            unmapped[key] += c * count
    return weights, unmapped, failed, time.perf_counter() - t0


def trace_configs(
    configs_path: str | Path, progress: bool = False, specs: Iterable[str] | None = None, jobs: int = 1
) -> tuple[Counter[tuple[str, str]], Counter[str], dict[str, Any]]:
    """Trace every (spec, batch) of a config list on the meta device.

    Args:
        configs_path: A config list (``predictor/measure/lists/<device>.jsonl``).
        progress: Print one line per spec to stderr.
        specs: Trace only these zoo specs (tests).
        jobs: Processes to trace in (spawned; the counts do not depend on it).

    Returns:
        ``(weights, unmapped, stats)``: ``(op, params JSON) -> weight`` (occurrences times the number of
        configs of that (spec, batch)), ATen op name -> weighted count of unmapped kernels, and
        ``{"specs", "pairs", "failed", "seconds"}``.
    """
    wanted = set(specs) if specs is not None else None
    pairs: dict[str, Counter[int]] = {}
    for cfg in load_configs(configs_path):
        if wanted is None or cfg.zoo in wanted:
            pairs.setdefault(cfg.zoo, Counter())[cfg.batch] += 1
    weights: Counter[tuple[str, str]] = Counter()
    unmapped: Counter[str] = Counter()
    failed: list[str] = []
    t0 = time.perf_counter()
    items = sorted(pairs.items())
    if jobs > 1:
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
        results = pool.map(_trace_spec, [s for s, _ in items], [dict(b) for _, b in items], chunksize=4)
    else:
        pool = None
        results = (_trace_spec(spec, dict(batches)) for spec, batches in items)
    try:
        for n, ((spec, batches), (w, u, f, seconds)) in enumerate(zip(items, results, strict=True), 1):
            weights.update(w)
            unmapped.update(u)
            failed += f
            if progress:
                print(
                    f"  [{n}/{len(items)}] {spec}: {len(batches)} batches, {seconds:.2f} s", file=sys.stderr, flush=True
                )
    finally:
        if pool is not None:
            pool.shutdown()
    stats = {
        "specs": len(pairs),
        "pairs": sum(len(b) for b in pairs.values()),
        "failed": failed,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return weights, unmapped, stats


# ----------------------------------------------------------------------------------------- derived shapes


def _derive(op: str, p: Params) -> Mapped:
    """Shapes of ops and variants the zoo lacks, derived from one zoo shape (see the module docstring)."""
    out: Mapped = []
    if op == "conv2d":
        h, w = p["in"]
        out.append(("conv1d", {**p, "in": [h * w], "k": p["k"][:1], "s": p["s"][:1], "p": p["p"][:1], "d": p["d"][:1]}))
        kd = min(p["k"][0], 3)
        if h >= 4 and w >= 4:
            out.append(
                (
                    "conv3d",
                    {
                        **p,
                        "in": [8, h // 2, w // 2],
                        "k": [kd, *p["k"]],
                        "s": [1, *p["s"]],
                        "p": [kd // 2, *p["p"]],
                        "d": [1, *p["d"]],
                    },
                )
            )
        if p["s"] != [1, 1]:  # the transposed conv that undoes a strided one
            oh = K.conv_out(h, p["k"][0], p["s"][0], p["p"][0], p["d"][0])
            ow = K.conv_out(w, p["k"][1], p["s"][1], p["p"][1], p["d"][1])
            opad = [
                h - K.conv_transpose_out(oh, p["k"][0], p["s"][0], p["p"][0], 0, p["d"][0]),
                w - K.conv_transpose_out(ow, p["k"][1], p["s"][1], p["p"][1], 0, p["d"][1]),
            ]
            if all(0 <= v < max(s, d) for v, s, d in zip(opad, p["s"], p["d"], strict=True)):
                transposed = {**p, "c": p["o"], "o": p["c"], "in": [oh, ow], "op": opad}
                out += [("conv_transpose2d", transposed), *_derive("conv_transpose2d", transposed)]
        if p["k"] == [3, 3] and p["s"] == [1, 1] and p["d"] == [1, 1]:
            out.append(("conv2d", {**p, "p": [2, 2], "d": [2, 2]}))  # dilated
    elif op == "conv_transpose2d":
        h, w = p["in"]
        out.append(
            (
                "conv_transpose1d",
                {
                    **p,
                    "in": [h * w],
                    "k": p["k"][:1],
                    "s": p["s"][:1],
                    "p": p["p"][:1],
                    "op": p["op"][:1],
                    "d": p["d"][:1],
                },
            )
        )
        out.append(
            (
                "conv_transpose3d",
                {
                    **p,
                    "in": [4, h, w],
                    "k": [2, *p["k"]],
                    "s": [2, *p["s"]],
                    "p": [0, *p["p"]],
                    "op": [0, *p["op"]],
                    "d": [1, *p["d"]],
                },
            )
        )
    elif op == "layer_norm":
        out.append(("rms_norm", {"r": p["r"], "c": p["c"], "affine": True}))
    elif op == "sdpa":
        if p["hq"] == p["hkv"]:
            for ratio in (4, 8):
                if p["hq"] % ratio == 0 and p["hq"] > ratio:
                    out.append(("sdpa", {**p, "hkv": p["hq"] // ratio}))
        if not p["causal"] and p["mask"] is None and p["s"] == p["t"]:
            out.append(("sdpa", {**p, "causal": True}))
        out.append(("bmm", {"b": p["b"] * p["hq"], "m": p["s"], "k": p["d"], "n": p["t"]}))
    elif op == "linear":
        out.append(("mm", {"m": p["m"], "k": p["k"], "n": p["n"]}))
    elif op == "gelu":
        out += [("gelu_tanh", p), ("erf", p)]
    elif op == "sigmoid":
        out.append(("exp", p))
    elif op == "rsqrt":
        out.append(("sqrt", p))
    elif op in ("relu", "silu"):
        out += [("copy", p), ("cast", {**p, "to": "float16"})]
    elif op == "mean":
        out += [("amax", p), ("var", p), ("sum", p)]
    elif op == "adaptive_avg_pool2d":
        out.append(("adaptive_avg_pool3d", {**p, "in": [8, *p["in"]], "out": [1, *p["out"]]}))
    elif op in ("max_pool2d", "avg_pool2d"):
        h, w = p["in"]
        kind = op.split("_")[0]
        out.append((f"{kind}_pool1d", {**p, "in": [h * w], "k": p["k"][:1], "s": p["s"][:1], "p": p["p"][:1]}))
        if h >= 4 and w >= 4:
            out.append(
                (
                    f"{kind}_pool3d",
                    {**p, "in": [8, h // 2, w // 2], "k": [2, *p["k"]], "s": [2, *p["s"]], "p": [0, *p["p"]]},
                )
            )
    elif op == "interpolate" and p["mode"] == "bilinear":
        out.append(("interpolate", {**p, "mode": "nearest"}))
    return out


# ----------------------------------------------------------------------------------------- spread


def _q(value: int, factor: float) -> int:
    """``value x factor`` rounded to the power-of-two quantum (at most 8) that divides ``value``."""
    quantum = 1
    while quantum < 8 and value % (quantum * 2) == 0:
        quantum *= 2
    return max(quantum, int(round(value * factor / quantum)) * quantum)


def _jitter(op: str, p: Params, rng: random.Random) -> Params | None:
    """A random neighbour of one shape (see the module docstring, step 4); ``None`` if the op has no rule."""

    def f() -> float:
        return 2 ** rng.uniform(-1, 1)

    def maybe() -> float:
        return f() if rng.random() < 0.5 else 1.0

    p = json.loads(json.dumps(p))
    kind = K.OPS[op].kind
    if op in ("mm", "linear"):
        p.update(m=_q(p["m"], f()), k=_q(p["k"], maybe()), n=_q(p["n"], maybe()))
    elif op == "bmm":
        p.update(b=_q(p["b"], f()), m=_q(p["m"], maybe()), k=_q(p["k"], maybe()), n=_q(p["n"], maybe()))
    elif kind == "conv":
        p["n"] = _q(p["n"], f())
        g = maybe()
        p["in"] = [max(_q(v, g), 1) for v in p["in"]]
        c = maybe()
        if p["g"] == p["c"] == p["o"]:  # depthwise stays depthwise
            p["c"] = p["o"] = p["g"] = _q(p["c"], c)
        elif p["g"] > 1:
            p["c"] = p["g"] * _q(p["c"] // p["g"], c)
            p["o"] = p["g"] * _q(p["o"] // p["g"], c)
        else:
            p["c"], p["o"] = _q(p["c"], c), _q(p["o"], maybe())
    elif op == "sdpa":
        old = (p["b"], p["hq"], p["s"], p["t"])
        p["b"] = _q(p["b"], f())
        p["s"] = _q(p["s"], maybe())
        p["t"] = p["s"] if old[2] == old[3] else _q(p["t"], maybe())
        if p["mask"]:
            new = (p["b"], p["hq"], p["s"], p["t"])
            p["mask"] = [n if m == o and m > 1 else m for m, o, n in zip(p["mask"], old, new, strict=True)]
    elif op in ("layer_norm", "rms_norm"):
        p.update(r=_q(p["r"], f()), c=_q(p["c"], maybe()))
    elif op == "group_norm":
        p.update(n=_q(p["n"], f()), hw=_q(p["hw"], maybe()))
    elif op == "batch_norm":
        s = maybe()
        p.update(n=_q(p["n"], f()), h=_q(p["h"], s), w=_q(p["w"], s))
    elif op in ("softmax", "sum", "mean", "amax", "var"):
        p.update(o=_q(p["o"], f()), n=_q(p["n"], maybe()))
    elif "n" in p and set(p) <= {"n", "to"}:  # unary, copy, cast
        p["n"] = _q(p["n"], f())
    elif op in ("add", "sub", "mul", "div"):
        s = f()
        if len(p["a"]) > 0:
            if p["b"] and len(p["b"]) == len(p["a"]) and p["b"][0] == p["a"][0]:
                p["b"][0] = _q(p["b"][0], s)
            p["a"][0] = _q(p["a"][0], s)
    elif kind == "pooling":
        s = maybe()
        p.update(n=_q(p["n"], f()), **{"in": [max(_q(v, s), max(p.get("k", [1])[0], 1)) for v in p["in"]]})
    elif op == "permute":
        p["shape"][0] = _q(p["shape"][0], f())
    elif op == "cat":
        p["o"] = _q(p["o"], f())
    elif op == "embedding":
        p["n"] = _q(p["n"], f())
    elif op in ("lstm", "gru"):
        p.update(b=_q(p["b"], f()), seq=_q(p["seq"], maybe()))
    elif op == "interpolate":
        s = maybe()
        p.update(n=_q(p["n"], f()), **{"in": [_q(v, s) for v in p["in"]], "out": [_q(v, s) for v in p["out"]]})
    else:
        return None
    return p


def _valid(op: str, params: Params) -> bool:
    """Whether the op accepts these params: run it on the meta device (RNNs: sizes are positive)."""
    try:
        spec = K.OPS[op]
        ins, outs = spec.tensors(params)
        if any(d <= 0 for shape, _ in ins + outs for d in shape):
            return False
        if spec.call is None:
            return True
        tensors = [
            torch.empty(shape, device="meta", dtype=torch.float16 if role != "int64" else torch.int64)
            for shape, role in ins
            if role != "w"
        ]
        with torch.inference_mode():
            got = spec.call(params, tensors)
        return tuple(got.shape) == tuple(outs[0][0])
    except Exception:  # noqa: BLE001 - any rejection means invalid
        return False


# ----------------------------------------------------------------------------------------- variants, order


#: Planning constants (H100) for :func:`plan_record_s`: fixed cost of one record (inputs, probe, graph
#: capture, NVML, JSON, fsync), cuDNN's algorithm search on a new conv shape, the shortest eager call.
PLAN_OVERHEAD_S = 0.006
PLAN_CONV_SEARCH_S = 0.010
PLAN_EAGER_CALL_MS = 0.008


def plan_record_s(entry: dict, runs: int = 20, target_ms: float = 0.1, max_inner: int = 100) -> float:
    """Planned seconds to measure one entry on an H100 (from its ``est_ms``), to size the list.

    ``overhead + warm-ups (3 x t) + (runs + 1 graph warm-up) x sample + 3 eager loops``, where ``t`` is the
    peak-rate estimate, ``inner = ceil(target / t)`` and a sample lasts ``inner x t``; an eager call costs
    at least :data:`PLAN_EAGER_CALL_MS` (host launch); a conv adds cuDNN's algorithm search.

    Args:
        entry: A list entry with ``est_ms``.
        runs: Timed samples.
        target_ms: Sample length.
        max_inner: Most calls per sample.

    Returns:
        Seconds.
    """
    t = max(float(entry["est_ms"]), 1e-4)
    inner = min(max(math.ceil(target_ms / t), 1), max_inner)
    ms = 3 * t + (runs + 1) * inner * t + 3 * inner * max(t, PLAN_EAGER_CALL_MS)
    extra = PLAN_CONV_SEARCH_S if entry["kind"] == "conv" else 0.0
    return PLAN_OVERHEAD_S + extra + ms / 1e3


def _variants(op: str, params: Params) -> Iterable[tuple[Params, str, bool | None, str, str | None]]:
    spec = K.OPS[op]
    for dtype, tf32 in K.VARIANTS.get(spec.kind, K.DEFAULT_VARIANTS):
        for layout in spec.layouts:
            if op == "cast":
                yield {**params, "to": "float16" if dtype == "float32" else "float32"}, dtype, tf32, layout, None
            elif spec.kind == "attention":
                for backend in K.BACKENDS:
                    if dtype == "float32" and backend in ("flash", "cudnn"):
                        continue
                    yield params, dtype, tf32, layout, backend
            else:
                yield params, dtype, tf32, layout, None


#: Slots per round of the list's order, by kind: the compute kinds, whose efficiency varies most with shape,
#: get more of every prefix.
KIND_SLOTS = {
    "gemm": 3,
    "conv": 3,
    "attention": 2,
    "elementwise": 2,
    "copy": 2,
    "norm": 1,
    "softmax": 1,
    "reduction": 1,
    "pooling": 1,
    "other": 1,
}


def build_list(
    weights: Counter[tuple[str, str]],
    seed: int = 0,
    spread: int = 1,
    max_est_ms: float = 10.0,
    max_gib: float = 16.0,
    max_entries: int | None = 30_000,
    shapes_per_op: int = 1_000,
) -> list[dict]:
    """Turn traced shapes into the ordered kernel list (module docstring, steps 2-6).

    Per op, the ``shapes_per_op`` heaviest zoo shapes are kept; derived shapes and spread neighbours rank
    with the shape they came from. A stratum (op, dtype, TF32, layout, backend) deals its zoo, derived and
    spread shapes in turn, each by rank; a kind deals its strata in turn; the kinds are dealt
    :data:`KIND_SLOTS` entries per round. Entries over ``max_est_ms`` or ``max_gib`` are skipped as they
    come, and the list stops at ``max_entries``.

    Args:
        weights: ``(op, params JSON) -> weight`` from :func:`trace_configs`.
        seed: Seed of the spread.
        spread: Random neighbours per shape.
        max_est_ms: Skip entries whose H100 planning estimate (:func:`kernels.estimate_ms`) exceeds this.
        max_gib: Skip entries whose tensors exceed this many GiB.
        max_entries: Length of the list (``None``: every entry).
        shapes_per_op: Zoo shapes kept per op, heaviest first.

    Returns:
        The entries, in measurement order.
    """
    per_op: dict[str, list[tuple[int, str]]] = {}
    for (op, blob), w in weights.items():
        per_op.setdefault(op, []).append((w, blob))
    shapes: dict[tuple[str, str], list] = {}  # key -> [weight, source, rank]
    for op, items in sorted(per_op.items()):
        for w, blob in sorted(items, key=lambda x: (-x[0], x[1]))[:shapes_per_op]:
            shapes[(op, blob)] = [w, "zoo", w]
    # Derived shapes come from every zoo shape (a rare strided conv is what a transposed conv inverts), ranked
    # by the heaviest shape they came from; the best ``shapes_per_op`` valid ones per op are kept.
    candidates: dict[tuple[str, str], int] = {}
    for (op, blob), w in sorted(weights.items()):
        for dop, dparams in _derive(op, json.loads(blob)):
            key = (dop, json.dumps(dparams, sort_keys=True))
            if key not in weights:
                candidates[key] = max(candidates.get(key, 0), w)
    kept: Counter[str] = Counter()
    for key, rank in sorted(candidates.items(), key=lambda kv: (-kv[1], kv[0])):
        if kept[key[0]] < shapes_per_op and _valid(key[0], json.loads(key[1])):
            shapes[key] = [0, "derived", rank]
            kept[key[0]] += 1
    rng = random.Random(f"preflight-kernels:{seed}")
    for (op, blob), (_, _, rank) in sorted(shapes.items()):
        for _ in range(spread):
            params = _jitter(op, json.loads(blob), rng)
            key = (op, json.dumps(params, sort_keys=True))
            if params is not None and key not in shapes and key not in weights and _valid(op, params):
                shapes[key] = [0, "spread", rank]
    strata: dict[tuple, dict[str, list[tuple]]] = {}
    for (op, blob), (weight, source, rank) in shapes.items():
        params = json.loads(blob)
        for variant in _variants(op, params):
            key = (op, *map(str, variant[1:]))
            strata.setdefault(key, {"zoo": [], "derived": [], "spread": []})[source].append(
                (-rank, blob, op, variant, weight, source)
            )
    limit_bytes = max_gib * 2**30

    def stratum(parts: dict[str, list[tuple]]) -> Iterator[dict]:
        zoo, derived, spread = (iter(sorted(parts[source])) for source in ("zoo", "derived", "spread"))
        for item in _deal([zoo, zoo, derived, spread]):  # two zoo shapes for each derived and spread one
            _, _, op, (params, dtype, tf32, layout, backend), weight, source = item
            entry = K.make_entry(op, params, dtype, layout, tf32, backend, weight, source)
            cost = K.entry_cost(entry)
            if entry["est_ms"] <= max_est_ms and cost["bytes_read"] + cost["bytes_written"] <= limit_bytes:
                yield entry

    kinds: dict[str, list[Iterator[dict]]] = {}
    for key in sorted(strata):
        # A stratum of an op the zoo has takes three turns for each turn of a derived-only op's stratum.
        turns = 3 if strata[key]["zoo"] else 1
        kinds.setdefault(K.OPS[key[0]].kind, []).extend([stratum(strata[key])] * turns)
    dealers = {kind: _deal(kinds[kind]) for kind in K.KINDS if kind in kinds}
    out: list[dict] = []
    while dealers and (max_entries is None or len(out) < max_entries):
        for kind in list(dealers):
            for _ in range(KIND_SLOTS[kind]):
                entry = next(dealers[kind], None)
                if entry is None:
                    del dealers[kind]
                    break
                out.append(entry)
    return out[:max_entries] if max_entries is not None else out


def _deal(iterators: list[Iterator[dict]]) -> Iterator[dict]:
    """Yield one item of each iterator in turn until all are exhausted (an iterator listed k times takes
    k turns per round; the iterators share their position)."""
    live = list(iterators)
    while live:
        for it in list(live):
            if it not in live:
                continue
            item = next(it, None)
            if item is None:
                live = [x for x in live if x is not it]
            else:
                yield item


#: (k, n) of the large matrix-vector products: AlexNet/VGG classifiers (9,216 x 4,096, 25,088 x 4,096, 4,096 x
#: 1,000) and a Llama-3-8B layer's and head's weights (4,096 x 4,096, 4,096 x 14,336, 14,336 x 4,096, 4,096 x
#: 128,256): 16 MB to 1 GB of float16/bfloat16 weights streamed once per call.
GEMV_KN = ((9216, 4096), (25088, 4096), (4096, 1000), (4096, 4096), (4096, 14336), (14336, 4096), (4096, 128256))
GEMV_M = (1, 8, 32)
#: Decode-shaped attention: one query token per sequence over a KV cache of ``t`` tokens.
DECODE_B = (1, 8, 32, 64)
DECODE_T = (128, 512, 2048, 8192)
DECODE_HKV = (8, 32)  # grouped-query (Llama-3-8B: 32 query heads, 8 KV heads) and multi-head


#: Convolution classes the sweep lacked when the hopper conv entries were refitted (docs/kernel-model.md,
#: "Convolution classes"): (c, o, h = w, k, stride, groups). Depthwise 3x3/5x5 at stride 1 and 2 (MobileNet-V2,
#: EfficientNet), ResNeXt/RegNet grouped 3x3, pointwise 1x1 (expansions and projections), stems on 3 channels,
#: a dense strided 3x3.
CONV_SHAPES = (
    (32, 32, 112, 3, 1, 32),
    (144, 144, 56, 3, 2, 144),
    (240, 240, 28, 5, 1, 240),
    (672, 672, 14, 5, 2, 672),
    (960, 960, 7, 3, 1, 960),
    (256, 256, 56, 3, 1, 32),
    (1024, 1024, 14, 3, 1, 32),
    (448, 448, 28, 3, 2, 56),
    (144, 24, 56, 1, 1, 1),
    (96, 576, 14, 1, 1, 1),
    (256, 64, 56, 1, 1, 1),
    (2048, 512, 7, 1, 1, 1),
    (3, 64, 224, 7, 2, 1),
    (3, 32, 224, 3, 2, 1),
    (128, 128, 56, 3, 2, 1),
)
CONV_BATCHES = (1, 16, 256)


def priority_entries(max_gib: float = 16.0) -> list[dict]:
    """The entries the sweep measures before the ordered list.

    Large GEMVs (``linear`` with ``m`` of 1, 8 or 32 over :data:`GEMV_KN`, every gemm variant, float32 with and
    without a bias), decode-shaped ``sdpa`` (``s`` = 1 query token, ``t`` of 128 to 8,192 cached tokens,
    batch 1 to 64, 32 query heads of 128, 8 or 32 KV heads, float16 and bfloat16, backends ``auto``,
    ``flash`` and ``efficient``) and the convolution classes of :data:`CONV_SHAPES` (batch 1, 16, 256; every
    conv variant; float16 also channels-last), in that order, dropping any entry over ``max_gib`` of tensors.

    Args:
        max_gib: Largest tensor footprint kept, GiB.

    Returns:
        The entries (``source: "priority"``).
    """
    out: list[dict] = []
    for k, n in GEMV_KN:
        for m in GEMV_M:
            for dtype, tf32 in K.VARIANTS["gemm"]:
                for bias in (True, False) if dtype == "float32" else (False,):
                    params = {"bias": bias, "k": k, "m": m, "n": n}
                    out.append(K.make_entry("linear", params, dtype, tf32=tf32, source="priority"))
    for t in DECODE_T:
        for b in DECODE_B:
            for hkv in DECODE_HKV:
                for dtype in ("bfloat16", "float16"):
                    for backend in ("auto", "flash", "efficient"):
                        params = {"b": b, "causal": False, "d": 128, "dv": 128, "hkv": hkv, "hq": 32}
                        params.update({"mask": None, "mask_bool": False, "s": 1, "t": t})
                        out.append(K.make_entry("sdpa", params, dtype, backend=backend, source="priority"))
    for c, o, hw, k, stride, g in CONV_SHAPES:
        for n in CONV_BATCHES:
            params = {"bias": False, "c": c, "d": [1, 1], "g": g, "in": [hw, hw], "k": [k, k], "n": n, "o": o}
            params.update({"p": [k // 2, k // 2], "s": [stride, stride]})
            for dtype, tf32 in K.VARIANTS["conv"]:
                for layout in ("contiguous", "channels_last") if dtype == "float16" else ("contiguous",):
                    out.append(K.make_entry("conv2d", params, dtype, layout, tf32=tf32, source="priority"))
    return [e for e in out if _gib(e) <= max_gib]


def _gib(entry: dict) -> float:
    cost = K.entry_cost(entry)
    return (cost["bytes_read"] + cost["bytes_written"]) / 2**30


def prepend_priority(entries: Sequence[dict], max_gib: float = 16.0) -> list[dict]:
    """Put :func:`priority_entries` first and drop their duplicates (same id) from the rest.

    Args:
        entries: An ordered list.
        max_gib: As :func:`priority_entries`.

    Returns:
        The new order: priority entries, then ``entries`` without them.
    """
    first = priority_entries(max_gib)
    ids = {e["id"] for e in first}
    return first + [e for e in entries if e["id"] not in ids]


def write_list(entries: Sequence[dict], path: str | Path, header: dict) -> None:
    """Write a kernel list: one header line (``schema``, how it was made) then one entry per line.

    Args:
        entries: The ordered entries.
        path: Output file.
        header: What made the list (command arguments, counts).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fh.write(json.dumps({"schema": K.LIST_SCHEMA, **header}, sort_keys=True) + "\n")
        for entry in entries:
            fh.write(json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n")


def plan(entries: Sequence[dict], budget_s: float = 480.0) -> dict[str, Any]:
    """How far one lease gets through a list at the planning estimate.

    Args:
        entries: The ordered entries.
        budget_s: Seconds of sweeping.

    Returns:
        ``{"entries", "planned_s", "in_budget", "kinds_in_budget"}``.
    """
    total = 0.0
    within = 0
    kinds: Counter[str] = Counter()
    for entry in entries:
        total += plan_record_s(entry)
        if total <= budget_s:
            within += 1
            kinds[entry["kind"]] += 1
    return {"entries": len(entries), "planned_s": round(total, 1), "in_budget": within, "kinds_in_budget": dict(kinds)}


# ----------------------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``make-list``'s options to ``parser``.

    Args:
        parser: The sub-command's parser.
    """
    parser.add_argument("--configs", default="predictor/measure/lists/h100-80gb.jsonl", help="zoo config list")
    parser.add_argument("--out", default="predictor/measure/lists/kernels-h100-80gb.jsonl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spread", type=int, default=1, help="random neighbours per shape")
    parser.add_argument("--max-est-ms", type=float, default=10.0, help="drop entries planned longer (H100 ms)")
    parser.add_argument("--max-gib", type=float, default=16.0, help="drop entries with more tensor GiB")
    parser.add_argument("--max-entries", type=int, default=30_000, help="length of the list (0: every entry)")
    parser.add_argument("--shapes-per-op", type=int, default=1_000, help="heaviest zoo shapes kept per op")
    parser.add_argument("--trace-cache", help="JSON file of the trace: read if it exists, else written")
    parser.add_argument("--specs", help="comma-separated zoo specs to trace (default: all of the list)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="lease length for the printed plan")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes that trace")
    parser.add_argument(
        "--priority-only",
        action="store_true",
        help="no trace: put the priority entries at the head of the existing list at --out and rewrite it",
    )


def main_make_list(args: argparse.Namespace) -> int:
    """Generate and write a kernel list; print what was traced and the plan.

    Args:
        args: Parsed ``make-list`` arguments.

    Returns:
        Exit code (2 if the config list cannot be read).
    """
    t0 = time.perf_counter()
    if args.priority_only:
        return _rewrite_with_priority(Path(args.out), args.max_gib)
    try:
        specs = args.specs.split(",") if args.specs else None
        cache = Path(args.trace_cache) if args.trace_cache else None
        if cache is not None and cache.exists():
            blob = json.loads(cache.read_text())
            weights = Counter({(op, params): w for op, params, w in blob["weights"]})
            unmapped, stats = Counter(blob["unmapped"]), blob["stats"]
        else:
            weights, unmapped, stats = trace_configs(args.configs, progress=True, specs=specs, jobs=args.jobs)
            if cache is not None:
                rows = [[op, params, w] for (op, params), w in sorted(weights.items())]
                cache.write_text(json.dumps({"weights": rows, "unmapped": unmapped, "stats": stats}))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    entries = build_list(
        weights, args.seed, args.spread, args.max_est_ms, args.max_gib, args.max_entries or None, args.shapes_per_op
    )
    entries = prepend_priority(entries, args.max_gib)
    mapped = sum(weights.values())
    missed = sum(unmapped.values())
    summary = plan(entries, args.budget_s)
    header = {
        "configs": str(args.configs),
        "seed": args.seed,
        "spread": args.spread,
        "max_est_ms": args.max_est_ms,
        "max_gib": args.max_gib,
        "max_entries": args.max_entries,
        "shapes_per_op": args.shapes_per_op,
        "traced": stats,
        "kernels_mapped": mapped,
        "kernels_unmapped": dict(unmapped.most_common()),
        "unique_shapes": len(weights),
        "plan": summary,
        "torch": torch.__version__,
    }
    write_list(entries, args.out, header)
    by_kind = Counter(e["kind"] for e in entries)
    by_source = Counter(e["source"] for e in entries)
    print(
        f"traced {stats['pairs']} (spec, batch) of {stats['specs']} specs in {stats['seconds']} s "
        f"({len(stats['failed'])} failed); {mapped} kernels mapped to {len(weights)} unique shapes, "
        f"{missed} unmapped ({100 * missed / max(mapped + missed, 1):.1f}%: "
        f"{', '.join(f'{k} {v}' for k, v in unmapped.most_common(8))})"
    )
    print(
        f"{len(entries)} entries ({', '.join(f'{k} {v}' for k, v in by_source.most_common())}; "
        f"{', '.join(f'{k} {v}' for k, v in sorted(by_kind.items()))}) -> {args.out}"
    )
    print(
        f"plan at H100 peak rates: {summary['planned_s']:.0f} s for all; {summary['in_budget']} entries in the first "
        f"{args.budget_s:.0f} s; took {time.perf_counter() - t0:.0f} s"
    )
    return 0


def _rewrite_with_priority(path: Path, max_gib: float) -> int:
    """Rewrite the list at ``path`` with :func:`priority_entries` first; the header records how many."""
    try:
        lines = path.read_text().splitlines()
        header = json.loads(lines[0])
        entries = [json.loads(line) for line in lines[1:] if line.strip()]
    except (OSError, ValueError, IndexError) as exc:
        print(f"error: cannot read the kernel list {path}: {exc}", file=sys.stderr)
        return 2
    if not isinstance(header, dict) or not all(isinstance(e, dict) for e in entries):
        print(f"error: {path} is not a kernel list (a header object, then one entry object a line)", file=sys.stderr)
        return 2
    entries = [e for e in entries if e.get("source") != "priority"]  # an earlier rewrite's priority block
    new = prepend_priority(entries, max_gib)
    header.pop("schema", None)
    header["priority"] = sum(e.get("source") == "priority" for e in new)
    write_list(new, path, header)
    print(f"{header['priority']} priority entries first, {len(new)} entries in all -> {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m predictor.measure.kernel_list [options]``: write a kernel list (see `main_make_list`)."""
    parser = argparse.ArgumentParser(
        prog="python -m predictor.measure.kernel_list",
        description="Derive the kernel sweep's list from a zoo config list (CPU, meta device).",
    )
    add_arguments(parser)
    return main_make_list(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
