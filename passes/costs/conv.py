"""Convolutions: MACs = output elements x (input channels / groups) x kernel window.

The kernel tensor already holds (input channels / groups) x window per output channel, so the
count reads the layout attributes only to find the output-channel axis of the kernel: it is the
same for NCHW/OIHW (PyTorch, ONNX) and NHWC/HWIO or OHWI (TFLite).
"""

from __future__ import annotations

import math

from ..graph import TensorInfo
from .registry import Cost, register

_DEFAULT_KERNEL_LAYOUT = {1: "OIW", 2: "OIHW", 3: "OIDHW"}
_DEFAULT_TRANSPOSED_LAYOUT = {1: "IOW", 2: "IOHW", 3: "IODHW"}


def _layout_axes(layout: str | None, n_dims: int, default: str) -> str:
    """One letter per weight dimension. Blocked layouts (OIHW4o4i) keep their lower-case sub-axes."""
    letters = [c for c in (layout or default) if c.isalpha()]
    return "".join(letters) if len(letters) == n_dims else default


def channels(weight_shape: tuple[int, ...], layout: str | None, letter: str, default: str) -> int:
    """The full size of channel axis `letter` (O or I), multiplying in its blocked sub-axis if any."""
    axes = _layout_axes(layout, len(weight_shape), default)
    size = 1
    for axis, d in zip(axes, weight_shape, strict=True):
        if axis.upper() == letter:
            size *= d
    return size


def conv_macs(out_numel: int, weight_shape: tuple[int, ...], out_channels: int) -> int:
    """out_numel x prod(weight) / O: each output element is one dot product over I/g x window."""
    return out_numel * (math.prod(weight_shape) // out_channels)


def conv_transpose_macs(in_numel: int, weight_shape: tuple[int, ...], in_channels: int) -> int:
    """in_numel x prod(weight) / I: every input element scatters into O/g x window outputs."""
    return in_numel * (math.prod(weight_shape) // in_channels)


@register("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d", category="conv")
def _conv(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """2 x out x (I/g) x kernel window FLOPs."""
    w = inputs[1].shape
    default = _DEFAULT_KERNEL_LAYOUT.get(inputs[0].ndim - 2, "OIHW")
    macs = conv_macs(outputs[0].numel, w, channels(w, attrs.get("kernel_layout"), "O", default))
    return Cost(macs=macs, flops=2 * macs)


@register("relax.nn.conv1d_transpose", "relax.nn.conv2d_transpose", "relax.nn.conv3d_transpose", category="conv")
def _conv_transpose(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """2 x in x (O/g) x kernel window FLOPs (as torch's flop counter counts transposed convs)."""
    w = inputs[1].shape
    default = _DEFAULT_TRANSPOSED_LAYOUT.get(inputs[0].ndim - 2, "IOHW")
    macs = conv_transpose_macs(inputs[0].numel, w, channels(w, attrs.get("kernel_layout"), "I", default))
    return Cost(macs=macs, flops=2 * macs)
