"""The whole analysis of one Relax function as plain data: op costs, totals, memory, graph."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from . import features as feat
from ._gc import gc_paused
from .costs import OpCost, cost_of, macs_by_dtype
from .graph import OpGraph
from .kernels import Kernel, KernelView, kernel_view
from .memory import MemoryProfile, liveness


@dataclass(frozen=True)
class Totals:
    """Model totals, as in the `totals` block of the JSON report.

    Ops that only transform weights (`OpCost.folded`, e.g. a transposed linear weight) are
    folded ahead of time by compilers and are left out of the FLOP, byte and op counts.
    """

    flops: int
    macs: int
    params: int
    param_bytes: int
    peak_activation_bytes: int
    bytes_read: int
    bytes_written: int
    op_count: int
    unsupported: dict[str, int]
    macs_by_dtype: dict[str, int] = field(default_factory=dict)  # compute dtype -> MACs (`costs.macs_by_dtype`)

    @property
    def incomplete(self) -> bool:
        """Whether the FLOP, MAC and byte totals leave out work: some operator has no cost rule that sees it (an
        opaque call, a data-dependent shape) and counts 0. The totals are then lower bounds, never exact."""
        return bool(self.unsupported)

    @property
    def uncounted_ops(self) -> int:
        """How many operators count 0 because no cost rule sees their work (the sum of `unsupported`)."""
        return sum(self.unsupported.values())


@dataclass
class Analysis:
    """Everything the passes know about one model, free of TVM objects."""

    graph: OpGraph
    ops: list[OpCost]
    totals: Totals
    memory: MemoryProfile
    edges: list[tuple[int, int]]
    static_features: dict[str, float]
    warnings: list[str] = field(default_factory=list)
    attention_patterns: str = "sdpa"  # which decomposed attention patterns are fused (see passes.kernels)

    @cached_property
    def kernel_view(self) -> KernelView:
        """The kernels eager PyTorch launches on a CUDA GPU for this graph (`passes.kernels`), computed once."""
        return kernel_view(self.graph, self.ops, attention_patterns=self.attention_patterns)

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        """The kernel view's kernels in launch order."""
        return self.kernel_view.kernels

    @cached_property
    def x(self) -> np.ndarray:
        """Node-feature matrix, (|V|, features.NUM_FEATURES)."""
        return feat.node_features(self.ops, [op.attrs for op in self.graph.ops], self.kernel_view)

    @cached_property
    def edge_index(self) -> np.ndarray:
        """(2, |E|) producer -> consumer pairs of the data flow."""
        return feat.edge_index(self.edges)


@gc_paused
def analyze_graph(graph: OpGraph, *, attention_patterns: str = "sdpa") -> Analysis:
    """Run every pass over an extracted graph.

    `attention_patterns` says which decomposed matmul-softmax-matmul patterns the kernel view fuses into one
    attention kernel: "sdpa" (those with torch's SDPA signature; right for graphs from torch.export) or
    "all" (any: for ONNX, TensorFlow and Paddle graphs). See `passes.kernels.kernel_view`.
    """
    ops = [cost_of(op) for op in graph.ops]
    live = [c for c in ops if not c.folded]
    memory = liveness(graph)
    weights = [s for s in graph.weights if not s.scalar_const]
    params = sum(s.tensor.numel for s in weights)
    unsupported = Counter(c.unsupported_key for c in ops if not c.supported)
    totals = Totals(
        flops=sum(c.flops for c in live),
        macs=sum(c.macs for c in live),
        params=params,
        param_bytes=memory.weight_bytes,
        peak_activation_bytes=memory.peak_bytes,
        bytes_read=sum(c.bytes_read for c in live),
        bytes_written=sum(c.bytes_written for c in live),
        op_count=len(live),
        unsupported=dict(sorted(unsupported.items())),
        macs_by_dtype=macs_by_dtype(live),
    )
    inputs = graph.inputs
    batch = inputs[0].tensor.shape[0] if inputs and inputs[0].tensor.shape else 1
    static = feat.static_features(
        ops, batch_size=batch, params=params, peak_activation_bytes=memory.peak_bytes, param_bytes=memory.weight_bytes
    )
    return Analysis(
        graph=graph,
        ops=ops,
        totals=totals,
        memory=memory,
        edges=graph.edges(),
        static_features=static,
        attention_patterns=attention_patterns,
    )


_ROW_GATHERS = ("relax.take", "relax.index_tensor")


def gathered_expert_matmuls(graph: OpGraph) -> tuple[int, int]:
    """(matmuls, bytes) of the batched mixture-of-experts formulation: matmuls with an operand gathered row by row
    from a 3-D weight, (E, K, N) indexed by expert ids into (S, K, N) (transformers' `batched_mm` experts:
    `gate_up_proj[expert_ids]`). The bytes are those of the gathered matrices: eager PyTorch moves them as the
    graph says; a grouped kernel reads each expert's matrix once instead (docs/moe.md)."""
    matmuls, nbytes, seen = 0, 0, set()
    for op in graph.ops:
        if op.op != "relax.matmul":
            continue
        gathered = [
            graph.ops[o.source]
            for o in op.operands
            if o.source is not None
            and graph.ops[o.source].op in _ROW_GATHERS
            and graph.ops[o.source].operands
            and graph.ops[o.source].operands[0].kind == "weight"
            and graph.ops[o.source].operands[0].tensor.ndim == 3
            and graph.ops[o.source].output.ndim == 3
        ]
        if gathered:
            matmuls += 1
            for g in gathered:
                if g.index not in seen:
                    seen.add(g.index)
                    nbytes += g.output.nbytes
    return matmuls, nbytes


def analyze_module(mod, func_name: str = "main", *, n_inputs: int | None = None) -> Analysis:
    """Run every pass over a Relax IRModule (see `passes.tvm_ir.extract` for the arguments)."""
    from .tvm_ir import extract

    return analyze_graph(extract(mod, func_name, n_inputs=n_inputs))
