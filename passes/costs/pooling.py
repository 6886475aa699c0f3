"""Pooling: windowed max/avg count one FLOP per window element of each output;
adaptive average pooling sums every input element once and divides each output once."""

from __future__ import annotations

import math

from ..graph import TensorInfo
from .registry import Cost, register


@register(
    "relax.nn.max_pool1d",
    "relax.nn.max_pool2d",
    "relax.nn.max_pool3d",
    "relax.nn.avg_pool1d",
    "relax.nn.avg_pool2d",
    "relax.nn.avg_pool3d",
    category="pooling",
)
def _pool(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """numel(out) x prod(pool_size) FLOPs."""
    window = math.prod(attrs.get("pool_size") or [1])
    return Cost(flops=outputs[0].numel * window)


@register(
    "relax.nn.adaptive_avg_pool1d", "relax.nn.adaptive_avg_pool2d", "relax.nn.adaptive_avg_pool3d", category="pooling"
)
def _adaptive_pool(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """numel(in) + numel(out) FLOPs."""
    return Cost(flops=inputs[0].numel + outputs[0].numel)
