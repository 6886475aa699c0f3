"""The whole analysis of one Relax function as plain data: op costs, totals, memory, graph."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
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
    #: set when the graph holds the first 2 of `repeat.layers` identical layers and the totals are extrapolated
    #: (`extrapolate_layers`): `ops`, `graph`, `edges` and `kernels` are then the 2-layer graph's
    repeat: LayerRepeat | None = None

    @cached_property
    def kernel_view(self) -> KernelView:
        """The kernels eager PyTorch launches on a CUDA GPU for this graph (`passes.kernels`), computed once."""
        return kernel_view(self.graph, self.ops, attention_patterns=self.attention_patterns)

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        """The kernel view's kernels in launch order."""
        return self.kernel_view.kernels

    @property
    def launched_kernels(self) -> tuple[Kernel, ...]:
        """Every kernel the whole model launches, in order: `kernels`, or with `repeat` the 2-layer graph's with
        its second layer's kernels repeated for layers 3..n (what the time model costs)."""
        r = self.repeat
        if r is None:
            return self.kernels
        k = self.kernels
        start, stop = r.block
        return k[:stop] + k[start:stop] * (r.layers - 2) + k[stop:]

    @cached_property
    def x(self) -> np.ndarray:
        """Node-feature matrix, (|V|, features.NUM_FEATURES)."""
        return feat.node_features(self.ops, [op.attrs for op in self.graph.ops], self.kernel_view)

    @cached_property
    def edge_index(self) -> np.ndarray:
        """(2, |E|) producer -> consumer pairs of the data flow."""
        return feat.edge_index(self.edges)


@dataclass(frozen=True)
class LayerRepeat:
    """How an analysis of `layers` identical layers was extrapolated from graphs of depth 1 and 2.

    Attributes:
        layers: the model's layer count n (> 2).
        block: [start, stop) of the second layer's kernels in the depth-2 graph's kernel list.
        kernels: kernels the n-layer model launches.
    """

    layers: int
    block: tuple[int, int]
    kernels: int

    def to_json(self) -> dict:
        return {
            "mode": "extrapolated",
            "layers": self.layers,
            "traced": [1, 2],
            "listed": "the embedding, layers 1 and 2 and the head (ops, modules and kernel list)",
            "kernels_launched": self.kernels,
            "note": f"layers 3..{self.layers} extrapolated from layers 1-2 (identical): every count in totals is "
            f"x(1) + (n - 1) (x(2) - x(1)), exact for identical layers; peak activations are the 2-layer graph's",
        }


def _kernel_key(k: Kernel) -> tuple:
    """What makes two kernels the same launch, wherever they are in the list (not their index or op indices)."""
    return (k.kind, k.op, k.flops, k.bytes_read, k.bytes_written, k.dtype, repr(sorted(k.params.items())))


def _layer_block(k1: tuple[Kernel, ...], k2: tuple[Kernel, ...]) -> tuple[int, int] | None:
    """[start, stop) of the kernels the depth-2 list `k2` holds beyond the depth-1 list `k1`: one run such that
    k2 = k1[:start] + k2[start:stop] + k1[start:] (the second layer), preferring a run equal to the one before
    it (the first layer, when it launches the same kernels). None when no such run exists."""
    a, b = [_kernel_key(k) for k in k1], [_kernel_key(k) for k in k2]
    n = len(b) - len(a)
    if n <= 0:
        return None
    prefix = 0
    while prefix < len(a) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < len(a) and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    starts = range(max(0, len(a) - suffix), min(prefix, len(a)) + 1)
    repeated = [s for s in starts if s >= n and b[s - n : s] == b[s : s + n]]
    if repeated or starts:
        start = (repeated or starts)[-1]
        return start, start + n
    return None


def extrapolate_layers(a1: Analysis, a2: Analysis, layers: int) -> Analysis:
    """The analysis of a model of `layers` identical layers from its analyses at depth 1 (`a1`) and 2 (`a2`).

    Every count (FLOPs, MACs, bytes, parameters, operators, per-dtype MACs, uncounted operators, static features)
    is x1 + (n - 1)(x2 - x1): with identical layers each layer adds x2 - x1 exactly. The peak of the live
    activations is a2's: the second layer is fed by a layer, as every later one is, and what lives across layers
    (the residual stream, a mask) has the same size at any depth, so layers 3..n repeat layer 2's liveness. The
    op, module and kernel lists stay a2's; `launched_kernels` repeats its second layer's kernels (n - 2) times.

    Raises:
        ValueError: n <= 2, or a2's kernels are not a1's plus one layer of repeated launches.
    """
    if layers <= 2:
        raise ValueError(f"extrapolating to {layers} layers: analyse them instead")
    block = _layer_block(a1.kernels, a2.kernels)
    if block is None:
        raise ValueError("the 2-layer graph's kernels are not the 1-layer graph's plus a repeat of its layer")

    def ex(x1: int, x2: int) -> int:
        return x1 + (layers - 1) * (x2 - x1)

    t1, t2 = a1.totals, a2.totals

    def per_key(d1: dict[str, int], d2: dict[str, int]) -> dict[str, int]:
        out = {k: ex(d1.get(k, 0), d2.get(k, 0)) for k in sorted(set(d1) | set(d2))}
        return {k: v for k, v in out.items() if v}

    totals = Totals(
        flops=ex(t1.flops, t2.flops),
        macs=ex(t1.macs, t2.macs),
        params=ex(t1.params, t2.params),
        param_bytes=ex(t1.param_bytes, t2.param_bytes),
        peak_activation_bytes=t2.peak_activation_bytes,
        bytes_read=ex(t1.bytes_read, t2.bytes_read),
        bytes_written=ex(t1.bytes_written, t2.bytes_written),
        op_count=ex(t1.op_count, t2.op_count),
        unsupported=per_key(t1.unsupported, t2.unsupported),
        macs_by_dtype=per_key(t1.macs_by_dtype, t2.macs_by_dtype),
    )
    static = {
        k: v if k in ("batch_size", "peak_activation_bytes") else ex(a1.static_features.get(k, 0), v)
        for k, v in a2.static_features.items()
    }
    n_kernels = len(a2.kernels) + (layers - 2) * (block[1] - block[0])
    out = Analysis(
        graph=a2.graph,
        ops=a2.ops,
        totals=totals,
        memory=replace(a2.memory, weight_bytes=totals.param_bytes),
        edges=a2.edges,
        static_features=static,
        warnings=list(a2.warnings),
        attention_patterns=a2.attention_patterns,
        repeat=LayerRepeat(layers, block, n_kernels),
    )
    out.__dict__["kernel_view"] = a2.kernel_view  # the same graph: its view, computed once
    return out


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


# how a graph gathers rows of a weight by index: torch's `weight[ids]` (take, index_tensor); torch's ONNX exporter
# writes it as GatherND with (S, 1) indices, which TVM imports as gather_nd
_ROW_GATHERS = ("relax.take", "relax.index_tensor", "relax.gather_nd")


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
