"""Plain-data view of a Relax dataflow graph.

`passes.tvm_ir.extract` turns a Relax IRModule into an `OpGraph`; every other pass works on
these dataclasses only, so nothing outside `passes/tvm_ir.py` touches TVM IR accessors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

# Bytes per element of the dtypes the importers emit. `bool` is stored as one byte.
_DTYPE_BYTES = {
    "bool": 1,
    "int4": 0.5,
    "uint4": 0.5,
    "int8": 1,
    "uint8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "e4m3_float8": 1,
    "e5m2_float8": 1,
    "int16": 2,
    "uint16": 2,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of `dtype` (vector dtypes such as `float16x4` count their lanes)."""
    if dtype in _DTYPE_BYTES:
        return _DTYPE_BYTES[dtype]
    base, _, lanes = dtype.partition("x")
    if base in _DTYPE_BYTES and lanes.isdigit():
        return _DTYPE_BYTES[base] * int(lanes)
    bits = "".join(c for c in dtype if c.isdigit())
    return int(bits) / 8 if bits else 4


@dataclass(frozen=True)
class TensorInfo:
    """A tensor's static shape and dtype."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(math.ceil(self.numel * dtype_bytes(self.dtype)))

    def to_json(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class Operand:
    """One tensor argument of an op.

    `source` is the index of the op that produced it, or None for a graph input, weight or constant.
    `kind` is "activation" (computed from the model inputs), "input", or "weight" (a parameter, a
    constant, or anything computed from weights alone, such as a transposed weight).
    """

    tensor: TensorInfo
    source: int | None
    kind: str
    value: int  # id of the value (graph input, weight or op output) this operand reads
    field: int | None = None  # tuple field of a multi-output op


@dataclass
class OpNode:
    """One operator call in execution order."""

    index: int
    name: str  # the Relax variable it binds, e.g. "lv12"
    op: str  # "relax.nn.conv2d", "relax.call_tir", ...
    attrs: dict
    operands: list[Operand]
    outputs: tuple[TensorInfo, ...]  # more than one for tuple-returning ops (split, batch_norm)
    callee: str | None = None  # PrimFunc / packed function name for call_tir and friends
    tir_flops: int | None = None  # TVM's estimate for call_tir PrimFuncs, None if unavailable
    tir_macs: int | None = None  # the PrimFunc's multiply-adds (`tvm_ir.prim_func_macs`), None if not counted
    # weight_only: every operand is a weight or computed from weights alone (a position-bias MLP over a constant table,
    # a linear layer's transposed weight): a compiler folds it ahead of time. folded: weight-only and nothing to run in
    # eager PyTorch either (a layout op or view, a cast or dequantization of a weight: `tvm_ir.eager_folds`); a
    # weight-only op that computes (FLOPs > 0) runs on every eager call and is counted, not folded.
    folded: bool = False
    weight_only: bool = False
    # library_call: the one library call eager PyTorch makes for the ATen op this op was decomposed from (an
    # `aten.lstm.input` run as one `_cudnn_rnn`; an ONNX LSTM node), e.g. "aten.lstm.input:lstm_1"; None: the op is
    # dispatched on its own (`with_library_calls`, `passes.kernels.Kernel.call`); "aten.baddbmm.default:<node>" for
    # the ops TVM's converter writes for one `baddbmm` (`BLAS_CALL_OPS`)
    library_call: str | None = None
    # eager_copy: the copy eager PyTorch makes of this op's result where the importer passed a `.contiguous()`
    # ("contiguous": a copy where the result is not contiguous) or a `.clone()` ("clone": a copy keeping a dense
    # layout; "clone_contiguous": into the contiguous format) through (`with_eager_copies`,
    # `passes.tvm_ir.eager_copy_of`); None: none
    eager_copy: str | None = None

    @property
    def inputs(self) -> list[TensorInfo]:
        return [o.tensor for o in self.operands]

    @property
    def output(self) -> TensorInfo:
        return self.outputs[0]


@dataclass(frozen=True)
class SourceValue:
    """A graph input, weight parameter or constant tensor."""

    value: int
    name: str
    tensor: TensorInfo
    kind: str  # "input" | "weight"
    scalar_const: bool = False  # an importer-made 0-d literal (not a model parameter)
    scalar: float | None = None  # the value of a one-element numeric constant (None for anything else)
    #: an importer's fold of another weight (TVM's ONNX importer turns the Transpose of a tied embedding into a
    #: second constant): in the graph, but no tensor eager PyTorch allocates (`passes.memory.liveness` leaves it
    #: out of `weight_sizes`)
    derived: bool = False


@dataclass
class OpGraph:
    """A Relax function flattened into ops in execution order plus its sources."""

    ops: list[OpNode]
    sources: list[SourceValue]
    outputs: list[tuple[int | None, int]]  # (producing op or None, value id) of each returned tensor
    value_producer: dict[int, int] = field(default_factory=dict)  # value id -> op index

    @property
    def inputs(self) -> list[SourceValue]:
        return [s for s in self.sources if s.kind == "input"]

    @property
    def weights(self) -> list[SourceValue]:
        """Weights some op reads (an importer may leave unused ones, e.g. BN's num_batches_tracked)."""
        used = {o.value for op in self.ops for o in op.operands}
        return [s for s in self.sources if s.kind == "weight" and s.value in used]

    def edges(self) -> list[tuple[int, int]]:
        """Every producer -> consumer pair of the data flow, once each, in consumer order."""
        seen: set[tuple[int, int]] = set()
        out: list[tuple[int, int]] = []
        for op in self.ops:
            for o in op.operands:
                if o.source is not None and (o.source, op.index) not in seen:
                    seen.add((o.source, op.index))
                    out.append((o.source, op.index))
        return out


#: ATen ops eager PyTorch runs as one BLAS call where TVM's converter writes several Relax ops: `baddbmm(c, a, b,
#: beta=, alpha=)` is `matmul(a, b)`, a multiply by alpha (where alpha != 1), a multiply of c by beta (where beta != 1)
#: and an `add` (where beta != 0); eager copies c into the result (the meta function's `result.copy_(self)`, where
#: beta != 0) and runs one GEMM with alpha and beta (`passes.kernels`, `_View.blas_calls`)
BLAS_CALL_OPS = ("aten.baddbmm.default",)


def is_blas_call(call: str | None) -> bool:
    """Whether an `OpNode.library_call` label is one call of a `BLAS_CALL_OPS` op ("aten.baddbmm.default:<node>")."""
    return call is not None and call.split(":", 1)[0] in BLAS_CALL_OPS


def with_library_calls(graph: OpGraph, calls: list[str | None]) -> OpGraph:
    """`graph` with each op's `library_call` set from `calls` (one label or None per op, in graph order; from the
    importer's record, `passes.tvm_ir.source_names` over it)."""
    if len(calls) != len(graph.ops):
        raise ValueError(f"{len(calls)} library-call labels for {len(graph.ops)} ops")
    ops = [replace(op, library_call=c or None) for op, c in zip(graph.ops, calls, strict=True)]
    return OpGraph(ops=ops, sources=graph.sources, outputs=graph.outputs, value_producer=graph.value_producer)


def with_eager_copies(graph: OpGraph, copies: dict[str, str]) -> OpGraph:
    """`graph` with `eager_copy` set on each op whose result (by Relax variable name) eager PyTorch copies where the
    importer passed it through (the importer's record, `passes.tvm_ir.eager_copy_of`)."""
    ops = [replace(op, eager_copy=copies[op.name]) if op.name in copies else op for op in graph.ops]
    return OpGraph(ops=ops, sources=graph.sources, outputs=graph.outputs, value_producer=graph.value_producer)


def with_weight_only_folded(graph: OpGraph) -> OpGraph:
    """The graph as a runtime that folds constant subgraphs when it loads the model runs it (ONNX Runtime, TensorFlow,
    TFLite, Paddle Inference, a compiler): every weight-only op (`OpNode.weight_only`) is folded, the ones that compute
    included. Shapes and indices unchanged."""
    if not any(op.weight_only and not op.folded for op in graph.ops):
        return graph
    ops = [replace(op, folded=True) if op.weight_only else op for op in graph.ops]
    return OpGraph(ops=ops, sources=graph.sources, outputs=graph.outputs, value_producer=graph.value_producer)


def with_float_dtype(graph: OpGraph, dtype: str, source: str = "float32") -> OpGraph:
    """The same graph computed in `dtype`: every `source`-typed tensor becomes `dtype`.

    This is what `model.to(dtype)` does to a float32 model: shapes and arithmetic stay, bytes change.
    (TVM 0.27's PyTorch importer hard-codes float32 outputs for convolutions and addmm, so float16
    models are imported in float32 and retargeted here.)
    """
    if dtype == source:
        return graph

    def t(info: TensorInfo) -> TensorInfo:
        return TensorInfo(info.shape, dtype) if info.dtype == source else info

    ops = [
        replace(
            op,
            operands=[replace(o, tensor=t(o.tensor)) for o in op.operands],
            outputs=tuple(t(x) for x in op.outputs),
            attrs={k: (dtype if k == "out_dtype" and v == source else v) for k, v in op.attrs.items()},
        )
        for op in graph.ops
    ]
    sources = [replace(s, tensor=t(s.tensor)) for s in graph.sources]
    return OpGraph(ops=ops, sources=sources, outputs=list(graph.outputs), value_producer=dict(graph.value_producer))


FLOAT_DTYPES = ("float32", "float16", "bfloat16")


def _values_by_op(graph: OpGraph) -> dict[int, list[int]]:
    """Op index -> the ids of the values it produces, ascending: the order of its `outputs` (a tuple's fields)."""
    out: dict[int, list[int]] = {}
    for v, i in graph.value_producer.items():
        out.setdefault(i, []).append(v)
    for vids in out.values():
        vids.sort()
    return out


def with_own_dtypes(graph: OpGraph, dtypes: dict[str, str]) -> OpGraph:
    """A half-precision model imported in float32 and retargeted (`with_float_dtype`) with its own float islands
    back: `dtypes` (Relax variable name -> float dtype, what the half-precision export computed each node in:
    `tvm_ir.recording_fx_sources`) sets the result of each op it names, and every other op computes in the promoted
    dtype of its float operands (`_promoted`, autocast's rule: float32 where any operand of more than one element is
    float32). So Llama's RMSNorm,
    `x.to(torch.float32)` ... `.to(x.dtype)`, is two casts (a `relax.astype` from float16 to float32 and back, which
    the kernel view counts as copies) around float32 arithmetic, as eager runs it. A weight's cast that changes its
    dtype is not folded (eager runs `inv_freq.float()` every forward). Shapes and indices unchanged."""
    if not dtypes:
        return graph
    dtype_of: dict[int, str] = {s.value: s.tensor.dtype for s in graph.sources}
    outputs_of = _values_by_op(graph)

    ops = []
    for op in graph.ops:
        operands = [
            replace(o, tensor=TensorInfo(o.tensor.shape, dtype_of.get(o.value, o.tensor.dtype)))
            if o.tensor.dtype in FLOAT_DTYPES and dtype_of.get(o.value, o.tensor.dtype) in FLOAT_DTYPES
            else o
            for o in op.operands
        ]
        own = dtypes.get(op.name) if len(op.outputs) == 1 else None
        to = own if own in FLOAT_DTYPES else _promoted(operands)
        outputs = tuple(TensorInfo(t.shape, to) if to and t.dtype in FLOAT_DTYPES else t for t in op.outputs)
        attrs = op.attrs
        if to and attrs.get("out_dtype") in FLOAT_DTYPES:
            attrs = {**attrs, "out_dtype": to}
        for vid, t in zip(outputs_of.get(op.index, []), outputs, strict=False):
            dtype_of[vid] = t.dtype
        # a weight's own cast (`inv_freq.float()`) runs every forward in eager, as autocast's weight casts do
        cast = op.op == "relax.astype" and operands and operands[0].tensor.dtype != outputs[0].dtype
        folded = op.folded and not cast
        ops.append(replace(op, operands=operands, outputs=outputs, attrs=attrs, folded=folded))
    return OpGraph(ops=ops, sources=graph.sources, outputs=list(graph.outputs), value_producer=graph.value_producer)


def with_compute_dtype(graph: OpGraph, dtype: str) -> OpGraph:
    """The same graph computed in the float dtype `dtype`: every float32/float16/bfloat16 tensor becomes `dtype`.

    What `model.to(dtype)` with inputs of that dtype does (mixed-precision islands included); integer and bool
    tensors (ids, masks, indices) keep theirs.
    """
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(FLOAT_DTYPES)}, got {dtype!r}")
    for source in FLOAT_DTYPES:
        if source != dtype:
            graph = with_float_dtype(graph, dtype, source)
    return graph


# --------------------------------------------------------------------------------------------
# Automatic mixed precision (`torch.autocast("cuda", dtype)`)
# --------------------------------------------------------------------------------------------

AMP_DTYPES = {"amp-float16": "float16", "amp-bfloat16": "bfloat16"}
# what `--dtype` takes: a float dtype (`model.to(dtype)`) or automatic mixed precision (`torch.autocast`)
COMPUTE_DTYPES = (*FLOAT_DTYPES, *AMP_DTYPES)

# Relax ops whose torch operator is on CUDA autocast's "lower_precision_fp" list (aten/src/ATen/autocast_mode.cpp,
# `KERNEL_CUDA(..., lower_precision_fp)`: conv*, conv_transpose*, prelu, addmm, addmv, addr, matmul, einsum, mm, mv,
# bmm, baddbmm, addbmm, linear, chain_matmul, linalg_multi_dot, scaled_dot_product_attention, the RNN cells)
AMP_LOWER = frozenset(
    {
        "relax.matmul",
        "relax.einsum",
        "relax.nn.conv1d",
        "relax.nn.conv2d",
        "relax.nn.conv3d",
        "relax.nn.conv1d_transpose",
        "relax.nn.conv2d_transpose",
        "relax.nn.conv3d_transpose",
        "relax.nn.prelu",
        "relax.nn.attention",
        "relax.nn.attention_bias",
    }
)
# ... on its "fp32" list (acos, asin, cosh, erfinv, exp, expm1, log*, reciprocal, rsqrt, sinh, tan, pow, softplus,
# layer_norm, rms_norm, group_norm, norm, softmax, log_softmax, cumsum, cumprod, prod, sum, logsumexp, dist, cdist,
# renorm and the losses): computed in float32, a float16/bfloat16 input cast up first
AMP_FP32 = frozenset(
    {
        "relax.acos",
        "relax.asin",
        "relax.cosh",
        "relax.sinh",
        "relax.tan",
        "relax.exp",
        "relax.log",
        "relax.rsqrt",
        "relax.power",
        "relax.nn.softplus",
        "relax.nn.layer_norm",
        "relax.nn.rms_norm",
        "relax.nn.group_norm",
        "relax.nn.softmax",
        "relax.nn.log_softmax",
        "relax.cumsum",
        "relax.cumprod",
        "relax.prod",
        "relax.sum",
        "relax.norm",
        "relax.nn.nll_loss",
        "relax.nn.cross_entropy_with_logits",
    }
)
_FLOATS = ("float16", "bfloat16", "float32", "float64")
_FOLLOW_INPUT = ("relax.nn.batch_norm", "relax.nn.instance_norm")  # on no autocast list: the input's dtype
_WEIGHT_VIEWS = ("relax.permute_dims", "relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten")


def _is_float(dtype: str) -> bool:
    return dtype in _FLOATS


def _promoted(operands: list[Operand]) -> str | None:
    """The float dtype an op computes in from its float operands, as TensorIterator promotes (`float16 + float32` is
    float32); a one-element operand promotes only where every float operand has one element (a symbolic size counts
    as more than one). None: no float operand."""
    floats = [o.tensor.dtype for o in operands if _is_float(o.tensor.dtype)]
    dims = [o.tensor.dtype for o in operands if _is_float(o.tensor.dtype) and _many(o.tensor)]
    pool = dims or floats
    return max(pool, key=_FLOATS.index) if pool else None


def _many(tensor: TensorInfo) -> bool:
    """Whether `tensor` has more than one element; a symbolic graph's size expression counts as more."""
    return any(not isinstance(d, int) for d in tensor.shape) or tensor.numel > 1


def with_autocast(graph: OpGraph, dtype: str) -> OpGraph:
    """The graph as eager PyTorch runs it under `torch.autocast("cuda", dtype=...)` (`dtype` "float16"/"bfloat16").

    Weights and inputs keep their dtype (float32). Ops on CUDA autocast's lower-precision list (`AMP_LOWER`: matmul,
    convolution, attention; a linear layer's or convolution's bias add counts with it, as `linear`/`conv2d` take the
    bias) compute in `dtype`; each floating operand in another dtype is cast by a `_to_copy` kernel first: a
    `relax.astype` op with `attrs["autocast"] = True` is inserted. A weight (anything computed from weights alone) is
    cast once per forward (autocast's cast cache keeps casts of parameters for the autocast region), on every call:
    the cast is not folded. An activation is cast at each use (autocast caches only leaf tensors). Ops on the fp32 list
    (`AMP_FP32`: softmax, layer norm, reductions, exp/log, losses) cast `dtype` operands to float32 and compute in
    float32. Batch norm keeps its input's dtype (float32 statistics with a 16-bit input, as cuDNN takes them); every
    other op runs in its operands' promoted dtype (`float16 + float32` is float32, one kernel; a one-element
    constant does not promote), as TensorIterator does, with no cast kernel.

    A cast takes its consumer's `library_call` (a cast among an nn.LSTM's ops is part of that call's run: the call
    stays one host dispatch, `predictor.kernel_model.inside_calls`), except a BLAS call's (`BLAS_CALL_OPS`: autocast
    casts baddbmm's operands with dispatches of their own before it).

    Returns a new graph: ops re-indexed in launch order with the casts before their consumers; shapes unchanged.
    """
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"autocast computes in float16 or bfloat16, not {dtype!r}")
    ops_by_index = graph.ops
    producer = graph.value_producer
    consumers: dict[int, list[int]] = {}
    for op in ops_by_index:
        for o in op.operands:
            consumers.setdefault(o.value, []).append(op.index)
    weight_values = {s.value for s in graph.sources if s.kind == "weight"}
    for op in ops_by_index:  # values computed from weights alone
        if op.operands and all(o.value in weight_values for o in op.operands):
            weight_values.update(v for v, i in producer.items() if i == op.index)
    outputs_of = _values_by_op(graph)

    # a linear layer's / convolution's bias add is part of the lower-precision op (addmm, conv2d(x, w, b))
    joined: dict[int, int] = {}  # add op -> the op it belongs to
    for op in ops_by_index:
        if op.op not in AMP_LOWER or op.op in ("relax.nn.attention", "relax.nn.attention_bias"):
            continue
        outs = outputs_of.get(op.index, [])
        users = consumers.get(outs[0], []) if len(outs) == 1 else []
        if len(users) != 1 or ops_by_index[users[0]].op != "relax.add":
            continue
        add = ops_by_index[users[0]]
        other = [o for o in add.operands if o.value != outs[0]]
        if len(other) == 1 and other[0].value in weight_values and add.output.shape == op.output.shape:
            joined[add.index] = op.index

    next_value = max([*producer.keys(), *(s.value for s in graph.sources), -1]) + 1
    dtype_of: dict[int, str] = {s.value: s.tensor.dtype for s in graph.sources}
    new_ops: list[OpNode] = []
    new_index: dict[int, int] = {}
    value_producer: dict[int, int] = {}
    weight_casts: dict[tuple[int, str], Operand] = {}

    info_of: dict[int, TensorInfo] = {s.value: s.tensor for s in graph.sources}
    for op in ops_by_index:
        for vid, t in zip(outputs_of.get(op.index, []), op.outputs, strict=False):
            info_of[vid] = t

    consumer_call: str | None = None  # the library call of the op whose operands are being cast

    def emit(op_name: str, attrs: dict, operand: Operand, out: TensorInfo, folded: bool = False) -> Operand:
        nonlocal next_value
        vid = next_value
        next_value += 1
        node = OpNode(
            len(new_ops),
            f"autocast_{vid}",
            op_name,
            attrs,
            [operand],
            (out,),
            folded=folded,
            weight_only=folded,
            library_call=consumer_call,  # a cast inside one library call's ops is part of that call's run
        )
        new_ops.append(node)
        value_producer[vid] = node.index
        dtype_of[vid] = out.dtype
        return Operand(out, node.index, operand.kind, vid, None)

    def cast(o: Operand, to: str) -> Operand:
        """`o` cast to `to` by a kernel; a weight once per forward (under its views: `w.to(dtype).t()`)."""
        if o.value not in weight_values:
            return emit("relax.astype", {"dtype": to, "autocast": True}, o, TensorInfo(o.tensor.shape, to))
        if (o.value, to) in weight_casts:
            return weight_casts[(o.value, to)]
        chain: list[OpNode] = []  # the folded views between the parameter and `o` (a linear layer's transposed weight)
        root = o.value
        while (i := producer.get(root)) is not None:
            view = ops_by_index[i]
            if not (view.folded and view.op in _WEIGHT_VIEWS and len(view.operands) == 1 and len(view.outputs) == 1):
                break
            chain.append(view)
            root = view.operands[0].value
        if (root, to) not in weight_casts:
            src = producer.get(root)
            first = Operand(
                TensorInfo(info_of[root].shape, dtype_of.get(root, info_of[root].dtype)),
                None if src is None else new_index.get(src),
                "weight",
                root,
                None,
            )
            weight_casts[(root, to)] = emit(
                "relax.astype", {"dtype": to, "autocast": True}, first, TensorInfo(info_of[root].shape, to)
            )
        out = weight_casts[(root, to)]
        for view in reversed(chain):  # the views again, on the cast weight: free
            out = emit(view.op, view.attrs, out, TensorInfo(view.output.shape, to), folded=True)
        weight_casts[(o.value, to)] = out
        return replace(out, kind=o.kind)

    for op in ops_by_index:
        # (autocast's casts of a baddbmm's operands are dispatches of their own, before the call)
        consumer_call = None if is_blas_call(op.library_call) else op.library_call
        operands = [
            replace(
                o,
                tensor=TensorInfo(o.tensor.shape, dtype_of.get(o.value, o.tensor.dtype)),
                source=new_index.get(o.source) if o.source is not None else None,
            )
            for o in op.operands
        ]
        want = None
        if op.folded:  # computed from weights alone: folded, as without autocast
            pass
        elif op.op in AMP_LOWER or op.index in joined or is_blas_call(op.library_call):
            want = dtype  # (every op of a baddbmm: autocast casts its three tensors, and it computes in `dtype`)
        elif op.op in AMP_FP32:
            want = "float32"
        if want is not None:
            for add, owner in joined.items():  # the bias is cast with the op's other arguments, before it runs
                bias = next(o for o in ops_by_index[add].operands if o.value in weight_values)
                if owner == op.index and bias.value in dtype_of and (bias.source is None or bias.source in new_index):
                    src = None if bias.source is None else new_index[bias.source]
                    tensor = TensorInfo(bias.tensor.shape, dtype_of[bias.value])
                    if tensor.dtype != want and _is_float(tensor.dtype):
                        cast(replace(bias, tensor=tensor, source=src), want)
            scalars = is_blas_call(op.library_call)  # (alpha and beta are arguments of the call, not tensors)
            operands = [
                cast(o, want)
                if _is_float(o.tensor.dtype) and o.tensor.dtype != want and not (scalars and o.tensor.numel == 1)
                else o
                for o in operands
            ]
            out_float = want
        elif op.op == "relax.astype":
            out_float = None  # the model's own cast: its target dtype
        elif op.op in _FOLLOW_INPUT and operands and _is_float(operands[0].tensor.dtype):
            out_float = operands[0].tensor.dtype  # batch norm: a 16-bit input with float32 statistics stays 16-bit
        else:
            out_float = _promoted(operands)
        outputs = tuple(
            TensorInfo(t.shape, out_float) if out_float is not None and _is_float(t.dtype) else t for t in op.outputs
        )
        attrs = op.attrs
        if want is not None and attrs.get("out_dtype") in _FLOATS:
            attrs = {**attrs, "out_dtype": want}
        node = replace(op, index=len(new_ops), operands=operands, outputs=outputs, attrs=attrs)
        new_index[op.index] = node.index
        new_ops.append(node)
        for vid, t in zip(outputs_of.get(op.index, []), outputs, strict=False):
            value_producer[vid] = node.index
            dtype_of[vid] = t.dtype
    outs = [(None if p is None else new_index[p], v) for p, v in graph.outputs]
    return OpGraph(ops=new_ops, sources=list(graph.sources), outputs=outs, value_producer=value_producer)
