"""Per-operator cost pass: MACs, FLOPs, bytes read and written for every op of a Relax graph.

Usage::

    from passes.costs import op_costs
    costs = op_costs(mod)            # a tvm.IRModule, or an OpGraph from passes.tvm_ir.extract
"""

from __future__ import annotations

from dataclasses import dataclass

from ..graph import OpGraph, OpNode, TensorInfo
from . import conv, data_movement, elementwise, matmul, normalization, other, pooling, reduction, vision  # noqa: F401
from .registry import (
    CATEGORIES,
    IGNORED,
    MULTIPLY_ADD_CATEGORIES,
    PACKED_RULES,
    RULES,
    UNSUPPORTED,
    Cost,
    RuleEntry,
    register,
)

# Calls of TIR PrimFuncs (the ONNX importer's emit_te, LegalizeOps): costed from the PrimFunc
# with TVM's estimate_tir_flops, which counts every add and multiply (2 x MACs for a plain
# multiply-add kernel, more for a fused one: its epilogue's adds), MACs the products of its
# reduction blocks (`tvm_ir.prim_func_macs`); categorised by the PrimFunc's name.
TIR_CALLS = ("relax.call_tir", "relax.call_tir_inplace", "relax.call_tir_with_grad", "relax.dist.call_tir_local_view")

# Substrings of PrimFunc names (TOPI and LegalizeOps naming) -> category, first match wins.
_TIR_CATEGORY = (
    ("conv", "conv"),
    ("attention", "attention"),
    ("einsum", "matmul"),
    ("matmul", "matmul"),
    ("dense", "matmul"),
    ("batch_matmul", "matmul"),
    ("softmax", "normalization"),
    ("norm", "normalization"),
    ("pool", "pooling"),
    ("maximum", "elementwise"),
    ("minimum", "elementwise"),
    ("sum", "reduction"),
    ("mean", "reduction"),
    ("max", "reduction"),
    ("min", "reduction"),
    ("prod", "reduction"),
    ("variance", "reduction"),
    ("argm", "reduction"),
    ("pad", "data_movement"),
    ("flip", "data_movement"),
    ("tile", "data_movement"),
    ("resize", "data_movement"),
    ("reshape", "data_movement"),
    ("transpose", "data_movement"),
    ("concat", "data_movement"),
    ("split", "data_movement"),
    ("take", "data_movement"),
    ("gather", "data_movement"),
    ("slice", "data_movement"),
    ("broadcast", "data_movement"),
    ("expand_dims", "data_movement"),
    ("squeeze", "data_movement"),
    ("cast", "data_movement"),
    ("astype", "data_movement"),
    ("copy", "data_movement"),
    ("layout_transform", "data_movement"),
)


def tir_category(callee: str | None) -> str:
    """The category of a PrimFunc from its name (`fused_conv2d_add` -> conv, `einsum` -> matmul)."""
    name = (callee or "").lower()
    for key, category in _TIR_CATEGORY:
        if key in name:
            return category
    return "elementwise"


@dataclass(frozen=True)
class OpCost:
    """The cost of one op, in plain data."""

    index: int
    name: str
    op: str
    category: str
    macs: int
    flops: int
    bytes_read: int
    bytes_written: int
    weight_bytes: int
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    supported: bool
    unsupported_key: str | None = None  # how it is listed in totals.unsupported
    callee: str | None = None
    folded: bool = False  # left out of the totals: nothing runs (`OpNode.folded`)
    weight_only: bool = False  # every operand is a weight: a compiler folds it ahead of time (`OpNode.weight_only`)
    source: str | None = None  # where it comes from in the source model (module path, node name); None: unknown
    module: str | None = None  # the module path (layer4.2.conv3) it belongs to, for roll-ups; None: unknown

    @property
    def output(self) -> TensorInfo:
        return self.outputs[0] if self.outputs else TensorInfo((), "void")


def _unsupported_key(op: OpNode) -> str:
    return f"{op.op}:{op.callee}" if op.callee else op.op


def _unsupported(op: OpNode, category: str, bytes_read: int, bytes_written: int, common: dict) -> OpCost:
    """An op with no cost rule (or a PrimFunc TVM gives no estimate for): 0 FLOPs, every input read and every
    output written, listed under `_unsupported_key` in the totals."""
    return OpCost(
        category=category,
        macs=0,
        flops=0,
        bytes_read=bytes_read,
        bytes_written=bytes_written,
        supported=False,
        unsupported_key=_unsupported_key(op),
        **common,
    )


def cost_of(op: OpNode) -> OpCost:
    """Apply the registered rule of `op` (or TVM's PrimFunc estimate for call_tir)."""
    inputs = tuple(op.inputs)
    read_all = sum(t.nbytes for t in inputs)
    written_all = sum(t.nbytes for t in op.outputs)
    weight_bytes = sum(o.tensor.nbytes for o in op.operands if o.kind == "weight")
    common = dict(
        index=op.index,
        name=op.name,
        op=op.op,
        weight_bytes=weight_bytes,
        inputs=inputs,
        outputs=op.outputs,
        callee=op.callee,
        folded=op.folded,
        weight_only=op.weight_only,
    )

    if op.op in TIR_CALLS:
        category = tir_category(op.callee)
        if op.tir_flops is None:
            return _unsupported(op, category, read_all, written_all, common)
        macs = 0
        if category in MULTIPLY_ADD_CATEGORIES:  # the PrimFunc's products; half its FLOPs where not counted
            macs = op.tir_macs if op.tir_macs is not None else op.tir_flops // 2
        return OpCost(
            category=category,
            macs=macs,
            flops=op.tir_flops,
            bytes_read=read_all,
            bytes_written=written_all,
            supported=True,
            **common,
        )

    if op.op in IGNORED:
        return OpCost(category="other", macs=0, flops=0, bytes_read=0, bytes_written=0, supported=True, **common)

    entry = RULES.get(op.op)
    if op.op == "relax.call_dps_packed" and op.callee in PACKED_RULES:
        entry = PACKED_RULES[op.callee]
    if entry is None:
        return _unsupported(op, "other", read_all, written_all, common)
    cost = entry.fn(op.attrs, list(inputs), op.outputs)
    return OpCost(
        category=entry.category,
        macs=int(cost.macs),
        flops=int(cost.flops),
        bytes_read=read_all if cost.bytes_read is None else int(cost.bytes_read),
        bytes_written=written_all if cost.bytes_written is None else int(cost.bytes_written),
        supported=True,
        **common,
    )


# 8-bit integer operand dtypes: a multiply-add op on them runs on int8 tensor cores (int8 x int8 or uint8 x int8)
INT8_DTYPES = ("int8", "uint8")


def compute_dtype(cost: OpCost) -> str:
    """The dtype an op computes in: its output's, except a multiply-add op on 8-bit integer operands (an int8 conv
    or matmul accumulating in int32), which computes in its operands' dtype ("int8" or "uint8")."""
    inputs = getattr(cost, "inputs", ())  # also OpCost-like records without inputs
    if cost.category in MULTIPLY_ADD_CATEGORIES and inputs and inputs[0].dtype in INT8_DTYPES:
        return inputs[0].dtype
    return cost.outputs[0].dtype if cost.outputs else "float32"


def macs_by_dtype(costs: list[OpCost]) -> dict[str, int]:
    """MACs per compute dtype over the ops that run (`compute_dtype`; uint8 and int8 both count as "int8"),
    largest first."""
    out: dict[str, int] = {}
    for c in costs:
        if c.macs and not c.folded:
            dtype = compute_dtype(c)
            key = "int8" if dtype in INT8_DTYPES else dtype
            out[key] = out.get(key, 0) + c.macs
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def op_costs(graph) -> list[OpCost]:
    """Cost every op of `graph` (an OpGraph, or a tvm.IRModule which is extracted first)."""
    if not isinstance(graph, OpGraph):
        from ..tvm_ir import extract

        graph = extract(graph)
    return [cost_of(op) for op in graph.ops]


__all__ = [
    "CATEGORIES",
    "IGNORED",
    "INT8_DTYPES",
    "MULTIPLY_ADD_CATEGORIES",
    "PACKED_RULES",
    "RULES",
    "TIR_CALLS",
    "UNSUPPORTED",
    "Cost",
    "OpCost",
    "RuleEntry",
    "compute_dtype",
    "cost_of",
    "macs_by_dtype",
    "op_costs",
    "register",
    "tir_category",
]
