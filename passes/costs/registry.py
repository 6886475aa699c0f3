"""One registry of per-op cost rules, keyed by the full Relax op name.

Every Relax op lands in exactly one of three sets:
- `RULES`: costed by a pure function of (attrs, input tensors, output tensors);
- `IGNORED`: zero arithmetic and zero traffic on purpose (shape queries, markers, allocations);
- `UNSUPPORTED`: known to exist, deliberately not costed; reported in `totals.unsupported`.
An op in none of them is also reported as unsupported, and the coverage test fails until it is
placed in one of the three. A packed call (`relax.call_dps_packed`, unsupported in general: its code is opaque)
whose callee is in `PACKED_RULES` is costed by that rule: the importers emit these callees for ops Relax has no
op for (a grouped per-expert matmul).

Counting convention (docs/design.md): one MAC is a multiply-accumulate and FLOPs = 2 x MACs for
multiply-add ops; other ops count a small documented number of FLOPs per output element.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..graph import TensorInfo

CATEGORIES = (
    "conv",
    "matmul",
    "attention",
    "elementwise",
    "reduction",
    "normalization",
    "pooling",
    "data_movement",
    "other",
)

# The multiply-add categories: their ops are made of multiply-accumulates, so FLOPs = 2 x MACs (the
# counting convention above); on a GPU they are the ops tensor cores run (`predictor.roofline.peak_rate`).
MULTIPLY_ADD_CATEGORIES: frozenset[str] = frozenset({"conv", "matmul", "attention"})


@dataclass(frozen=True)
class Cost:
    """What one op costs. `bytes_read`/`bytes_written` of None mean "all inputs" / "all outputs"."""

    macs: int = 0
    flops: int = 0
    bytes_read: int | None = None
    bytes_written: int | None = None


Rule = Callable[[dict, list[TensorInfo], tuple[TensorInfo, ...]], Cost]


@dataclass(frozen=True)
class RuleEntry:
    op: str
    category: str
    fn: Rule


RULES: dict[str, RuleEntry] = {}
PACKED_RULES: dict[str, RuleEntry] = {}  # callee of a relax.call_dps_packed -> its rule
IGNORED: dict[str, str] = {}  # op -> why it costs nothing
UNSUPPORTED: dict[str, str] = {}  # op -> why it is not costed


def _check_new(op: str) -> None:
    if op in RULES or op in IGNORED or op in UNSUPPORTED:
        raise ValueError(f"a cost rule for {op} is already registered")


def register(*ops: str, category: str) -> Callable[[Rule], Rule]:
    """Register `fn` as the cost rule of `ops`; refuses duplicate registrations."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}")

    def deco(fn: Rule) -> Rule:
        for op in ops:
            _check_new(op)
            RULES[op] = RuleEntry(op, category, fn)
        return fn

    return deco


def register_packed(*callees: str, category: str) -> Callable[[Rule], Rule]:
    """Register `fn` as the cost rule of `relax.call_dps_packed` calls of `callees`."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}")

    def deco(fn: Rule) -> Rule:
        for callee in callees:
            if callee in PACKED_RULES:
                raise ValueError(f"a cost rule for {callee} is already registered")
            PACKED_RULES[callee] = RuleEntry(callee, category, fn)
        return fn

    return deco


# Callees of the packed calls the importers emit (`passes.tvm_ir`) for ops Relax has no op for
GROUPED_MATMUL = "preflight.grouped_matmul"  # (S, K) rows x (E, K, N) expert weights, grouped by offs (E,)
HISTOGRAM = "preflight.histc"  # torch.histc: (n,) values -> (bins,) counts


def ignore(reason: str, *ops: str) -> None:
    for op in ops:
        _check_new(op)
        IGNORED[op] = reason


def unsupported(reason: str, *ops: str) -> None:
    for op in ops:
        _check_new(op)
        UNSUPPORTED[op] = reason


# ---- factories for families of trivial ops ------------------------------------------------


def per_output_element(flops_per_element: float) -> Rule:
    """`k` FLOPs for each output element."""

    def rule(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
        return Cost(flops=int(round(flops_per_element * sum(o.numel for o in outputs))))

    rule.__doc__ = f"{flops_per_element} FLOP per output element."
    return rule


def per_input_element(flops_per_element: float) -> Rule:
    """`k` FLOPs for each element of the first input (reductions, scans)."""

    def rule(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
        return Cost(flops=int(round(flops_per_element * inputs[0].numel)) if inputs else 0)

    rule.__doc__ = f"{flops_per_element} FLOP per input element."
    return rule


def no_arithmetic(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """Pure data movement: 0 FLOPs; reads its inputs and writes its outputs."""
    return Cost()


def reads_output_sized(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """Gathers and slices: 0 FLOPs; read only what they copy (output-sized) plus index tensors."""
    index_bytes = sum(t.nbytes for t in inputs[1:] if t.dtype.startswith(("int", "uint")))
    return Cost(bytes_read=sum(o.nbytes for o in outputs) + index_bytes)
