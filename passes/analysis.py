"""The whole analysis of one Relax function as plain data: op costs, totals, memory, graph."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from . import features as feat
from ._gc import gc_paused
from .costs import OpCost, cost_of, macs_by_dtype
from .graph import OpGraph, is_blas_call
from .kernels import ATTENTION_OPS, Kernel, KernelView, Launches, kernel_view
from .memory import Fusion, MemoryProfile, liveness, repeat_weight_sizes


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
    #: set when the model holds recurrences (ONNX LSTM, GRU, RNN) of `steps.steps` time steps whose totals are
    #: extrapolated from analyses at fewer steps (`extrapolate_steps`): `ops`, `graph`, `edges` and `kernels` are
    #: then the graph's at the largest sampled step count
    steps: StepRepeat | None = None

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
        if self.steps is not None:
            return self.steps.launched
        r = self.repeat
        if r is None:
            return self.kernels
        k = self.kernels
        start, stop = r.block
        block = k[start:stop]
        if not any(x.call for x in block):
            return k[:stop] + block * (r.layers - 2) + k[stop:]
        # each copy's library calls are calls of their own (one host dispatch each, `kernel_model.inside_calls`),
        # as layers 3..n are other modules than layer 2: "<call>#<layer>"
        copies = tuple(
            replace(x, call=None if x.call is None else f"{x.call}#{n}") for n in range(3, r.layers + 1) for x in block
        )
        return k[:stop] + copies + k[stop:]

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


@dataclass(frozen=True)
class StepRepeat:
    """How an analysis of recurrences over `steps` time steps was extrapolated from analyses at `sampled` steps.

    Attributes:
        steps: the sequence length T of the model's recurrences (their longest, when several).
        sampled: the step counts (T1, T2, T3), evenly spaced, the model was analysed at.
        launched: every kernel the T-step model launches, as (kernel, count) runs (`Launches`).
        kernels: how many kernels that is (the sum of the counts).
        nodes: "LSTM 'name'" for each recurrent node the extrapolation covers.
    """

    steps: int
    sampled: tuple[int, int, int]
    launched: tuple[Launches, ...]
    kernels: int
    nodes: tuple[str, ...] = ()

    @property
    def note(self) -> str:
        t1, t2, t3 = self.sampled
        return (
            f"recurrence of {self.steps:,} steps costed from {t1}/{t2} steps (checked at {t3}): every count in "
            f"totals, each kernel's launch count and size, and the peak activations are affine in the step count "
            f"(each step adds the same ops), exact at {t3} and so at any count"
        )

    def to_json(self) -> dict:
        return {
            "mode": "extrapolated",
            "steps": self.steps,
            "sampled": list(self.sampled),
            "nodes": list(self.nodes),
            "listed": f"the graph at {self.sampled[-1]} steps (ops, modules and kernel list)",
            "kernels_launched": self.kernels,
            "note": self.note,
        }


def _kernel_key(k: Kernel) -> tuple:
    """What makes two kernels the same launch, wherever they are in the list (not their index or op indices)."""
    return (k.kind, k.op, k.flops, k.bytes_read, k.bytes_written, k.dtype, repr(sorted(k.params.items())), k.call)


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
        memory=replace(
            a2.memory,
            weight_bytes=totals.param_bytes,
            weight_sizes=repeat_weight_sizes(a1.memory.weight_sizes, a2.memory.weight_sizes, layers),
        ),
        edges=a2.edges,
        static_features=static,
        warnings=list(a2.warnings),
        attention_patterns=a2.attention_patterns,
        repeat=LayerRepeat(layers, block, n_kernels),
    )
    out.__dict__["kernel_view"] = a2.kernel_view  # the same graph: its view, computed once
    return out


def _affine(name: str, xs: tuple[int, int, int]) -> tuple[int, int]:
    """(x1, per-sample-step difference) of three evenly spaced samples; ValueError unless x3 - x2 == x2 - x1."""
    x1, x2, x3 = xs
    if x3 - x2 != x2 - x1:
        raise ValueError(f"{name} is not affine in the step count ({x1:,}, {x2:,}, {x3:,})")
    return x1, x2 - x1


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _extrapolated_kernels(lists: list[tuple[Kernel, ...]], at) -> tuple[Launches, ...]:
    """The kernels launched at the target step count from the kernel lists at three sampled counts: a kernel the
    three lists share keeps its identity, its launch count affine (`at` maps three samples to the target); the
    others (sized by the sequence: the input projection, the stacked output) must pair up in launch order, of the
    same kind, op and dtype, every size affine. ValueError otherwise."""
    keys = [[_kernel_key(k) for k in ks] for ks in lists]
    counts = [Counter(ks) for ks in keys]
    common = set(counts[0]) & set(counts[1]) & set(counts[2])
    # in the last sample's launch order: a shared kernel at its first launch, a sequence-sized one where it is (so
    # the kernels of one library call stay one run: `predictor.kernel_model.inside_calls`)
    at_position: dict[int, Launches] = {}
    seen: set = set()
    for pos, (kern, key) in enumerate(zip(lists[2], keys[2], strict=True)):
        if key in common and key not in seen:
            seen.add(key)
            n = at(f"launches of {kern.kind} kernel {kern.op}", tuple(c[key] for c in counts))
            if n > 0:
                at_position[pos] = Launches(kern, n)
    varying = [
        [k for k, key in zip(ks, kk, strict=True) if key not in common] for ks, kk in zip(lists, keys, strict=True)
    ]
    positions = [pos for pos, key in enumerate(keys[2]) if key not in common]
    if not len(varying[0]) == len(varying[1]) == len(varying[2]):
        raise ValueError("the kernels sized by the sequence differ in number between the sampled step counts")
    for pos, a, b, c in zip(positions, *varying, strict=True):
        what = f"{c.kind} kernel {c.op}"
        if (a.kind, a.op, a.dtype, sorted(a.params)) != (b.kind, b.op, b.dtype, sorted(b.params)) or (
            b.kind,
            b.op,
            b.dtype,
            sorted(b.params),
        ) != (c.kind, c.op, c.dtype, sorted(c.params)):
            raise ValueError(f"the sampled step counts launch different kernels ({what})")
        params = {}
        for p, v in c.params.items():
            if _is_count(v):
                params[p] = at(f"{what} parameter {p}", (a.params[p], b.params[p], v))
            elif a.params[p] == b.params[p] == v:
                params[p] = v
            else:
                raise ValueError(f"{what} parameter {p} changes with the step count ({a.params[p]!r}, {v!r})")
        kern = replace(
            c,
            flops=at(f"{what} FLOPs", (a.flops, b.flops, c.flops)),
            bytes_read=at(f"{what} bytes read", (a.bytes_read, b.bytes_read, c.bytes_read)),
            bytes_written=at(f"{what} bytes written", (a.bytes_written, b.bytes_written, c.bytes_written)),
            params=params,
        )
        at_position[pos] = Launches(kern, 1)
    out = [at_position[p] for p in sorted(at_position)]
    return tuple(out)


def extrapolate_steps(samples: list[tuple[int, Analysis]], steps: int, nodes: tuple[str, ...] = ()) -> Analysis:
    """The analysis of a model whose recurrences run `steps` time steps, from its analyses at three evenly spaced
    smaller step counts `samples` [(T1, a1), (T2, a2), (T3, a3)], T1 < T2 < T3, T2 - T1 = T3 - T2 = d.

    An unrolled recurrence adds the same ops at every step, and the ops sized by the sequence (the input
    projection [T, B, I] @ [I, G*H], the stacked output [T, dirs, B, H], whatever follows them) grow by the same
    amount per step. So every count (FLOPs, MACs, bytes, parameters, operators, per-dtype MACs, static features,
    the peak of the live activations and the input bytes), each shared kernel's launch count and each
    sequence-sized kernel's FLOPs, bytes and dimensions is affine in T: x(T) = x1 + (T - T1) / d * (x2 - x1). The
    third sample checks it: x3 - x2 must equal x2 - x1 for every one, else ValueError (and the model is refused
    rather than guessed). The peak is a maximum over the ops: affine across the samples, it could still be set by
    a fixed-size tensor there and by the sequence's beyond them; an extrapolated peak below the largest kernel
    output at T (a lower bound on the true peak) is refused for that reason. The op, module and kernel lists
    stay a3's; `launched_kernels` holds the T-step kernels as (kernel, count) runs, which the time model costs
    without listing 10**6 steps.

    Raises:
        ValueError: the samples are not evenly spaced below `steps`, (T - T1) is not a multiple of d, or some count
            is not affine in the step count.
    """
    (s1, a1), (s2, a2), (s3, a3) = samples
    d = s2 - s1
    if not (0 < d == s3 - s2 and s3 < steps and (steps - s1) % d == 0):
        raise ValueError(f"samples at {s1}, {s2}, {s3} steps cannot be extrapolated to {steps}")
    k = (steps - s1) // d

    def at(name: str, xs: tuple[int, int, int]) -> int:
        x1, dx = _affine(name, xs)
        return x1 + k * dx

    t = (a1.totals, a2.totals, a3.totals)

    def per_key(name: str, ds: tuple[dict, dict, dict]) -> dict[str, int]:
        out = {key: at(f"{name} {key}", tuple(x.get(key, 0) for x in ds)) for key in sorted(set().union(*ds))}
        return {key: v for key, v in out.items() if v}

    field_ = lambda f: at(f, tuple(getattr(x, f) for x in t))  # noqa: E731
    totals = Totals(
        flops=field_("flops"),
        macs=field_("macs"),
        params=field_("params"),
        param_bytes=field_("param_bytes"),
        peak_activation_bytes=field_("peak_activation_bytes"),
        bytes_read=field_("bytes_read"),
        bytes_written=field_("bytes_written"),
        op_count=field_("op_count"),
        unsupported=per_key("uncounted", tuple(x.unsupported for x in t)),
        macs_by_dtype=per_key("MACs in", tuple(x.macs_by_dtype for x in t)),
    )
    # every feature is a count, batch_size included (the first input's first axis: the sequence for X [T, B, I])
    static = {key: at(key, tuple(a.static_features.get(key, 0) for a in (a1, a2, a3))) for key in a3.static_features}
    launched = _extrapolated_kernels([a1.kernels, a2.kernels, a3.kernels], at)
    largest = max((run.kernel.bytes_written for run in launched), default=0)
    if totals.peak_activation_bytes < largest:  # a fixed tensor set the samples' peak; the sequence outgrows it
        raise ValueError(
            f"the peak activations extrapolated from the samples ({totals.peak_activation_bytes:,} bytes) are less "
            f"than one kernel's output at {steps:,} steps ({largest:,} bytes): another tensor sets the peak there"
        )
    memory = replace(
        a3.memory,
        peak_bytes=totals.peak_activation_bytes,
        weight_bytes=at("weight bytes", tuple(a.memory.weight_bytes for a in (a1, a2, a3))),
        input_bytes=at("input bytes", tuple(a.memory.input_bytes for a in (a1, a2, a3))),
    )
    out = Analysis(
        graph=a3.graph,
        ops=a3.ops,
        totals=totals,
        memory=memory,
        edges=a3.edges,
        static_features=static,
        warnings=list(a3.warnings),
        attention_patterns=a3.attention_patterns,
        steps=StepRepeat(steps, (s1, s2, s3), launched, sum(x.count for x in launched), nodes),
    )
    out.__dict__["kernel_view"] = a3.kernel_view
    return out


def fused_groups(view: KernelView, graph: OpGraph) -> Fusion:
    """What the liveness of `graph` takes from its kernel view `view` (`passes.memory.Fusion`): the attention ops
    that are one op in the graph but run on the math backend (their scores), and as `groups` the op indices of
    each kernel in `view` that eager PyTorch runs over several Relax ops without allocating
    what passes between them (`passes.memory.lifetimes`'s `fused`): a decomposed attention the kernel view runs as
    one flash or memory-efficient kernel (with the transposes around it), and another exporter's spelling of one
    torch op ("fused:gelu" from an ONNX file's div/erf/add/mul/mul, "fused:silu", ...: `passes.kernels`), which
    torch.export keeps as one op. The math backend's kernels each cover one op and allocate the scores. Left to the
    graph's liveness, which allocates every op's result: a GEMM with its bias add (`aten::addmm`) and the
    activations TVM's importers spell out in every graph, `.pt2` included (`_SPELLED_EVERYWHERE`): the memory
    model's terms were fitted on such traces, and on our H100 rows of LeViT and MobileNetV3 (hardswish) the
    spelled-out allocations predict the memory nvidia-smi shows better (docs/memory.md). A BLAS call TVM's converter
    writes as several ops (`baddbmm`: matmul, scales, add; `graph.BLAS_CALL_OPS`) allocates its result alone, as
    eager's one output buffer (the copy of the added term and the GEMM both write it)."""
    groups = tuple(
        k.ops
        for k in view.kernels
        if len(k.ops) > 1
        and (k.kind == "attention" or (k.kind != "gemm" and k.op.startswith("fused:")) or is_blas_call(k.call))
        and k.op not in _SPELLED_EVERYWHERE
    )
    scores = {k.ops[-1] for k in view.kernels if k.op in ("math:softmax", "mha:masked_softmax")}
    once = {k.ops[-1] for k in view.kernels if k.op == "mha:softmax_"}
    absent = tuple(
        sorted(
            {i for i, role in enumerate(view.roles) if role == "folded" and not graph.ops[i].folded} | set(view.unrun)
        )
    )
    one_op = lambda ops: tuple(sorted(i for i in ops if graph.ops[i].op in ATTENTION_OPS))  # noqa: E731
    return Fusion(groups, one_op(scores), absent, one_op(once), view.writes_into)


# what TVM's importers spell out in every graph (`passes.kernels`' module docstring: the activations, and a vector
# norm, which TVM's torch importer writes as power(sum(power(abs(x), p)), 1 / p)), and
# `_transform_bias_rescale_qkv` (nn.MultiheadAttention's weights path: a bias add and a scale multiply ops apart in
# the graph, no chain ending in one output: it writes Q, K and V)
_SPELLED_EVERYWHERE = frozenset(
    {
        "fused:hardsigmoid",
        "fused:hardswish",
        "fused:elu",
        "fused:glu",
        "fused:vector_norm",
        "fused:transform_bias_rescale_qkv",
    }
)


def fused_in(graph: OpGraph, attention_patterns: str = "sdpa") -> Fusion:
    """`fused_groups` of `graph`'s kernel view (computed here)."""
    view = kernel_view(graph, [cost_of(op) for op in graph.ops], attention_patterns=attention_patterns)
    return fused_groups(view, graph)


@gc_paused
def analyze_graph(graph: OpGraph, *, attention_patterns: str = "sdpa") -> Analysis:
    """Run every pass over an extracted graph.

    `attention_patterns` says which decomposed matmul-softmax-matmul patterns the kernel view fuses into one
    attention kernel: "sdpa" (those with torch's SDPA signature; right for graphs from torch.export), "torch-onnx"
    (the same, for ONNX files torch's exporters wrote, with their spellings of GELU, SiLU, ...) or "all" (any: for
    ONNX files of other producers, TensorFlow and Paddle graphs). See `passes.kernels.kernel_view`.
    """
    ops = [cost_of(op) for op in graph.ops]
    live = [c for c in ops if not c.folded]
    view = kernel_view(graph, ops, attention_patterns=attention_patterns)  # what eager runs as one kernel
    memory = liveness(graph, fused_groups(view, graph))
    weights = [s for s in graph.weights if not s.scalar_const and not s.derived]  # an importer's copy: not counted
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
    out = Analysis(
        graph=graph,
        ops=ops,
        totals=totals,
        memory=memory,
        edges=graph.edges(),
        static_features=static,
        attention_patterns=attention_patterns,
    )
    out.__dict__["kernel_view"] = view  # computed for the liveness: once
    return out


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
