"""Softmax and normalisations: FLOPs per element of the normalised tensor.

softmax / log_softmax: max, subtract, exp, sum, divide (or log) = 5.
layer_norm / group_norm / instance_norm: mean (1), subtract (1), square (1), variance sum (1),
multiply by rsqrt (1) = 5, plus 1 each for the scale and the shift when present.
batch_norm (inference, statistics given): subtract mean, multiply by rsqrt(var), scale, shift = 4;
in training mode the statistics are computed as well: + 3.
rms_norm: square, sum, multiply by rsqrt = 3, plus 1 for the scale.
"""

from __future__ import annotations

from ..graph import TensorInfo
from .registry import Cost, register


def _affine(attrs: dict) -> int:
    return int(attrs.get("scale", True)) + int(attrs.get("center", True))


@register("relax.nn.softmax", "relax.nn.log_softmax", category="normalization")
def _softmax(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """5 FLOPs per element."""
    return Cost(flops=5 * inputs[0].numel)


@register("relax.nn.layer_norm", "relax.nn.group_norm", "relax.nn.instance_norm", category="normalization")
def _layer_norm(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """(5 + scale + shift) FLOPs per element."""
    return Cost(flops=(5 + _affine(attrs)) * inputs[0].numel)


@register("relax.nn.batch_norm", category="normalization")
def _batch_norm(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """4 FLOPs per element in inference, 7 in training."""
    per = 4 + (3 if attrs.get("training") else 0)
    # The op also returns the (unchanged, in inference) running mean and variance.
    return Cost(flops=per * inputs[0].numel, bytes_written=outputs[0].nbytes)


@register("relax.nn.rms_norm", category="normalization")
def _rms_norm(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """4 FLOPs per element (3 + scale)."""
    return Cost(flops=4 * inputs[0].numel)
