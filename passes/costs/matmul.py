"""Matrix products, einsum and attention (multiply-add ops: FLOPs = 2 x MACs)."""

from __future__ import annotations

import math

from ..graph import TensorInfo
from .registry import GROUPED_MATMUL, Cost, register, register_packed


def matmul_macs(a: tuple[int, ...], out: tuple[int, ...]) -> int:
    """numel(out) x K with K = a[-1]; batch dimensions broadcast, 1-D operands follow numpy."""
    return math.prod(out) * a[-1]


@register("relax.matmul", category="matmul")
def _matmul(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """2 x numel(out) x K FLOPs."""
    macs = matmul_macs(inputs[0].shape, outputs[0].shape)
    return Cost(macs=macs, flops=2 * macs)


@register("relax.outer", category="matmul")
def _outer(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """1 multiply per output element, no accumulation (0 MACs)."""
    return Cost(flops=outputs[0].numel)


def einsum_macs(subscripts: str, shapes: list[tuple[int, ...]]) -> tuple[int, int]:
    """(MACs, extra FLOPs) of an einsum contracted pairwise, left to right (as torch.einsum does
    without opt_einsum).

    Each pairwise step costs the product of the sizes of every index either operand carries; the
    intermediate keeps the indices a later operand or the output still needs. A single operand
    only sums what it drops (extra FLOPs, no MACs).
    """
    lhs, _, rhs = subscripts.replace(" ", "").partition("->")
    terms = lhs.split(",")
    sizes: dict[str, int] = {}
    letters_of: list[list[str]] = []
    n_ell = 0
    for term, shape in zip(terms, shapes, strict=False):
        letters = _letters(term, len(shape))
        letters_of.append(letters)
        n_ell = max(n_ell, sum(1 for c in letters if c.startswith("#")))
        for letter, d in zip(letters, shape, strict=False):
            sizes[letter] = max(sizes.get(letter, 1), d)
    out_letters = _letters(rhs, len(rhs.replace("...", "")) + n_ell) if rhs else []
    if len(terms) < 2:
        total = math.prod(sizes.values()) if sizes else 1
        kept = math.prod(sizes.get(c, 1) for c in out_letters)
        return 0, total - kept if total > kept else 0
    macs = 0
    current = set(letters_of[0])
    for i in range(1, len(letters_of)):
        union = current | set(letters_of[i])
        macs += math.prod(sizes[c] for c in union)
        needed = set(out_letters).union(*(set(t) for t in letters_of[i + 1 :]))
        current = union & needed
    return macs, 0


def _letters(term: str, ndim: int) -> list[str]:
    """Index names of one einsum term; the dims an ellipsis stands for are named #1, #2... from the right."""
    if "..." not in term:
        return list(term)
    head, tail = term.split("...")
    n_ell = ndim - len(head) - len(tail)
    return list(head) + [f"#{n_ell - i}" for i in range(n_ell)] + list(tail)


@register("relax.einsum", category="matmul")
def _einsum(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """2 x (n-1) x prod(index sizes) FLOPs."""
    macs, extra = einsum_macs(str(attrs.get("subscripts", "")), [t.shape for t in inputs])
    return Cost(macs=macs, flops=2 * macs + extra)


def attention_macs(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]) -> int:
    """Q.K^T plus P.V for (B, S, N, D) query, (B, T, N, D) key and (B, T, N, Dv) value."""
    b, s, n, d = q
    t, dv = k[1], v[-1]
    return b * n * s * t * (d + dv)


@register("relax.nn.attention", "relax.nn.attention_bias", category="attention")
def _attention(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """2 x B x N x S x T x (D + Dv) FLOPs.

    NB: the scale, mask and softmax inside the fused op (about 6 FLOPs per score) are not
    counted, as torch's FlopCounterMode does not count them; decomposed attention counts its
    softmax as a separate op.
    """
    q, k, v = (t.shape for t in inputs[:3])
    macs = attention_macs(q, k, v)
    return Cost(macs=macs, flops=2 * macs)


def grouped_matmul_experts(inputs: list[TensorInfo]) -> int:
    """How many experts' matrices a grouped matmul of S rows over E experts reads: min(E, S) (S rows reach at
    most S experts; the single token of a decode step with top-k routing reaches exactly k of them)."""
    return min(inputs[1].shape[0], inputs[0].shape[0])


@register_packed(GROUPED_MATMUL, category="matmul")
def _grouped_matmul(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """Rows (S, K) each times its own expert's (K, N) of weights (E, K, N): 2 x S x K x N FLOPs in all, however
    the rows are routed. Reads the rows, min(E, S) experts' matrices and the offsets; writes (S, N)."""
    (s, k), (e, _, n) = inputs[0].shape, inputs[1].shape
    macs = s * k * n
    experts = grouped_matmul_experts(inputs)
    weight = inputs[1].nbytes * experts // e if e else 0
    return Cost(macs=macs, flops=2 * macs, bytes_read=inputs[0].nbytes + weight + sum(t.nbytes for t in inputs[2:]))
