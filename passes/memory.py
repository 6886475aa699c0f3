"""Memory pass: activation liveness over the execution order, and weight bytes.

A tensor lives from the op that produces it (graph inputs: from the start) to its last consumer
(graph outputs: to the end). Views (reshape, squeeze, expand_dims, flatten) share their input's
storage, as they do in PyTorch and after TVM's memory planning, so they extend the input's life
instead of allocating. Tensors of folded ops (`OpNode.folded`: views of weights) count as weights, not activations;
a weight-only op that computes (`OpNode.weight_only`, not folded) runs every eager call and its output is an
activation. The peak is the largest sum of live bytes at
any op, while that op runs (its inputs and outputs are both live). `MemoryProfile.blocks` keeps each storage's
lifetime and size: the allocation trace the device-memory model replays (predictor/memory.py).

What eager PyTorch runs as one kernel over several Relax ops (`fused`, `passes.analysis.fused_groups`: a decomposed
matmul-softmax-matmul that the kernel view runs as one flash or memory-efficient attention kernel, an ONNX
exporter's GELU spelled as five pointwise ops) allocates its output alone: the tensors that only its own ops produce
and read (the (B, H, S, T) scores and probabilities) are never allocated, and what it reads stays live until its
last op runs (the kernel reads every input at once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .graph import OpGraph, TensorInfo

VIEW_OPS = frozenset({"relax.reshape", "relax.squeeze", "relax.expand_dims", "relax.flatten", "relax.nn.batch_flatten"})


@dataclass(frozen=True)
class Fusion:
    """How eager PyTorch runs the graph's ops as kernels, as far as allocations go (`passes.analysis.fused_groups`).

    `groups`: the op indices of each kernel that runs several ops at once (module docstring). `scores`: attention
    ops that are one op in the graph (torch.export's SDPA) but run on the math backend
    (`_scaled_dot_product_attention_math`, or nn.MultiheadAttention's fast path without SDPA): eager writes their
    (B, H, S, T) scores, then the probabilities, both live while the softmax runs, which the graph holds no value
    for; the O(S x D) copies around them (the scaled Q and K, or the fast path's Q, K and V) are left out.
    `scores_once`: the same where the softmax overwrites the scores (the fast path without SDPA and without a mask:
    `_softmax_out` in place, aten/src/ATen/native/transformers/attention.cpp): one (B, H, S, T) storage. (With a
    mask it runs `_masked_softmax`, out of place: two, in `scores`; its bool mask, B x T bytes or B x H x S x T, is
    left out.)"""

    groups: tuple[tuple[int, ...], ...] = ()
    scores: tuple[int, ...] = ()
    #: ops that compute on weights alone (`OpNode.weight_only`) and that eager PyTorch does not run on a forward (the
    #: kernel view folds them: a causal mask torch.export materialises where eager calls SDPA with `is_causal`), and
    #: views eager never makes (`KernelView.unrun`): nothing allocated for them
    absent: tuple[int, ...] = ()
    scores_once: tuple[int, ...] = ()
    #: (op index, operand position): ops whose result eager writes over that operand's storage (the fast path
    #: without SDPA writes the attention's output into Q's: `bmm_nn(q, qkt, v)`), so the result allocates nothing
    writes_into: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class MemoryProfile:
    """Live activation bytes at each op (`timeline[i]` while op i runs) and the peak."""

    timeline: tuple[int, ...]
    peak_bytes: int
    peak_op: int | None  # index of the op at which the peak is reached
    weight_bytes: int
    input_bytes: int
    #: one (birth, last, nbytes) per activation storage, in allocation order: allocated when op `birth` runs
    #: (graph inputs: -1, before op 0), freed after op `last` runs (graph outputs: `last` = the number of ops);
    #: the allocation trace `predictor.memory.simulate_reserved` replays through the caching allocator
    blocks: tuple[tuple[int, int, int], ...] = ()
    #: bytes of each weight tensor in parameter order (what `model.to("cuda")` allocates one by one; an importer's
    #: fold of another weight, `SourceValue.derived`, is no tensor of the model and left out)
    weight_sizes: tuple[int, ...] = ()


def lifetimes(
    graph: OpGraph, fused: Fusion | Sequence[Sequence[int]] = ()
) -> tuple[dict[int, tuple], dict[int, int], dict[int, int]]:
    """The allocations of `graph`'s activations: (storage id -> the `TensorInfo`s it holds, birth op, last op).

    A storage lives while ops birth..last run (`last` = len(graph.ops) for a graph output). `fused`: a `Fusion`,
    or only its groups, the op indices of each kernel that runs several ops at once (module docstring): a storage
    such a group's ops alone produce and read is not allocated, and every other storage its ops read lives until
    the group's last op; a math-backend attention op's scores and probabilities are a storage of that op alone
    (id -1 - op index); an `absent` op allocates nothing. Only the structure is read (which op produces and reads
    what, views, folded ops), never a size: the same lifetimes hold for a symbolic graph at every point
    (`passes.symbolic.peak_law`)."""
    fusion = fused if isinstance(fused, Fusion) else Fusion(tuple(tuple(g) for g in fused))
    groups, scores, absent = fusion.groups, fusion.scores, set(fusion.absent)
    into = dict(fusion.writes_into)
    n = len(graph.ops)
    storage: dict[int, int] = {}  # value id -> storage id (the value that owns the allocation)
    tensors: dict[int, tuple] = {}  # storage id -> its tensors
    birth: dict[int, int] = {}
    last: dict[int, int] = {}

    for s in graph.inputs:
        storage[s.value] = s.value
        tensors[s.value] = (s.tensor,)
        birth[s.value] = 0
        last[s.value] = 0

    out_values: dict[int, list[int]] = {}
    for vid, op_index in graph.value_producer.items():
        out_values.setdefault(op_index, []).append(vid)

    readers: dict[int, set[int]] = {}  # storage id -> the ops that read it (views and folded ops left out)
    for op in graph.ops:
        for o in op.operands:
            sid = storage.get(o.value)
            if sid is not None:
                last[sid] = max(last[sid], op.index)
                if not op.folded and op.op not in VIEW_OPS:
                    readers.setdefault(sid, set()).add(op.index)
        produced = sorted(out_values.get(op.index, []))
        first_act = next((o for o in op.operands if o.value in storage), None)
        if op.index in absent:
            continue
        if op.index in into and len(produced) == 1 and op.operands[into[op.index]].value in storage:
            storage[produced[0]] = storage[op.operands[into[op.index]].value]
            continue
        if op.folded:
            if first_act is not None and len(produced) == 1:  # a view of a weight-only result computed every call
                storage[produced[0]] = storage[first_act.value]
            continue
        if op.op in VIEW_OPS and first_act is not None and len(produced) == 1:
            storage[produced[0]] = storage[first_act.value]
            continue
        if not produced:
            continue
        owner = produced[0]
        tensors[owner] = tuple(op.outputs)
        birth[owner] = op.index
        last[owner] = op.index
        for vid in produced:
            storage[vid] = owner

    for _, vid in graph.outputs:
        sid = storage.get(vid)
        if sid is not None:
            last[sid] = n
    if groups:
        kept = {s.value for s in graph.inputs} | {storage[v] for _, v in graph.outputs if v in storage}
        _fuse(groups, tensors, birth, last, readers, kept)
    for i in (*scores, *fusion.scores_once):  # (B, S, H, D) query, (B, T, H_kv, D) key: (B, H, S, T) scores
        q, k = graph.ops[i].operands[0].tensor, graph.ops[i].operands[1].tensor
        b, s, h, _ = q.shape
        bhst = TensorInfo((b, h, s, k.shape[1]), q.dtype)
        both = (bhst, bhst) if i in scores else (bhst,)  # and the probabilities, unless written over the scores
        tensors[-1 - i], birth[-1 - i], last[-1 - i] = both, i, i
    return tensors, birth, last


def _fuse(fused, tensors: dict, birth: dict, last: dict, readers: dict, kept: set[int]) -> None:
    """`lifetimes` of kernels that run several ops at once (in place): their inner storages dropped (never the
    graph's inputs and outputs, `kept`), what they read kept live to their last op."""
    group = {i: g for g, ops in enumerate(fused) if len(ops) > 1 for i in ops}
    end = {g: max(ops) for g, ops in enumerate(fused) if len(ops) > 1}
    for sid in list(tensors):
        g = group.get(birth[sid])
        if g is not None and sid not in kept and readers.get(sid) and all(group.get(r) == g for r in readers[sid]):
            del tensors[sid], birth[sid], last[sid]
    for sid in tensors:
        for g in {group[r] for r in readers.get(sid, ()) if r in group}:
            last[sid] = max(last[sid], end[g])


def liveness(graph: OpGraph, fused: Fusion | Sequence[Sequence[int]] = ()) -> MemoryProfile:
    """Peak activation memory of `graph` by liveness over its execution order (`fused`: see `lifetimes`)."""
    n = len(graph.ops)
    tensors, birth, last = lifetimes(graph, fused)
    size = {sid: sum(t.nbytes for t in ts) for sid, ts in tensors.items()}
    delta = [0] * (n + 2)
    for sid, nbytes in size.items():
        delta[birth[sid]] += nbytes
        delta[min(last[sid], n) + 1] -= nbytes
    timeline, live = [], 0
    for i in range(n):
        live += delta[i]
        timeline.append(live)
    peak = max(timeline) if timeline else sum(size.values())
    peak_op = timeline.index(peak) if timeline else None
    weight_sizes = tuple(s.tensor.nbytes for s in graph.weights if not s.scalar_const and not s.derived)
    weight_bytes = sum(weight_sizes)
    input_bytes = sum(s.tensor.nbytes for s in graph.inputs)
    inputs = {s.value for s in graph.inputs}
    blocks = tuple(
        sorted(  # stable: inputs first, then op by op (`size` holds the inputs, then each op's owner in order)
            ((-1 if sid in inputs else birth[sid], min(last[sid], n), nbytes) for sid, nbytes in size.items()),
            key=lambda b: b[0],
        )
    )
    return MemoryProfile(tuple(timeline), peak, peak_op, weight_bytes, input_bytes, blocks, weight_sizes)


def repeat_weight_sizes(one: tuple[int, ...], two: tuple[int, ...], layers: int) -> tuple[int, ...]:
    """The weight sizes of a model of `layers` identical layers from those of its 1-layer (`one`) and 2-layer
    (`two`) graphs: `two` is `one` with a layer's weights inserted at some position p; that block is inserted
    `layers - 1` times. () when `two` is not `one` plus a contiguous block."""
    k = len(two) - len(one)
    if k <= 0:
        return ()
    for p in range(len(one) + 1):
        if two[:p] == one[:p] and two[p + k :] == one[p:]:
            return one[:p] + two[p : p + k] * (layers - 1) + one[p:]
    return ()
