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
    folded: bool = False  # every operand is a weight: a compiler folds it ahead of time

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
