"""Reductions and scans: FLOPs per input element.

sum, mean, max, min, prod, argmax, argmin, cumsum, cumprod: 1 per input element.
variance / std: mean pass (1) + subtract, square, add (3) = 4 per input element.
sort-like ops (sort, argsort, topk, median): n x log2(n) comparisons along the axis.
histc (a packed call, `registry.HISTOGRAM`): 1 per input element (bin index and count).
"""

from __future__ import annotations

import math

from ..graph import TensorInfo
from .registry import HISTOGRAM, Cost, per_input_element, register, register_packed

for _op in (
    "relax.sum",
    "relax.mean",
    "relax.max",
    "relax.min",
    "relax.prod",
    "relax.argmax",
    "relax.argmin",
    "relax.cumsum",
    "relax.cumprod",
    "relax.collapse_sum_like",
    "relax.collapse_sum_to",
):
    register(_op, category="reduction")(per_input_element(1))

register_packed(HISTOGRAM, category="reduction")(per_input_element(1))

for _op in ("relax.variance", "relax.std"):
    register(_op, category="reduction")(per_input_element(4))


@register("relax.sort", "relax.argsort", "relax.topk", "relax.median", category="reduction")
def _sort(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """numel x log2(axis length) comparisons."""
    shape = inputs[0].shape
    if not shape:
        return Cost()
    axis = attrs.get("axis", -1)
    if isinstance(axis, list):
        axis = axis[0] if axis else None
    n = inputs[0].numel if axis is None else shape[int(axis)]  # axis=None: over the flattened tensor
    return Cost(flops=int(inputs[0].numel * math.log2(max(n, 2))))
