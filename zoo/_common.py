"""Small helpers shared by the family modules."""

from __future__ import annotations

import torch
from torch import nn

from zoo.registry import Bounds, registrar


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round ``value`` to a multiple of ``divisor``, not going below 90% of it.

    Args:
        value: Unrounded channel count.
        divisor: Required divisor.
        min_value: Lower bound (defaults to ``divisor``).

    Returns:
        The rounded channel count.
    """
    min_value = divisor if min_value is None else min_value
    rounded = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


def image_inputs(
    *,
    batch: int,
    dtype: torch.dtype,
    device: torch.device,
    resolution: int,
    **_: object,
) -> tuple[torch.Tensor, ...]:
    """Return a single random RGB NCHW image batch.

    Args:
        batch: Batch size.
        dtype: Floating point dtype.
        device: Target device.
        resolution: Height and width.

    Returns:
        A one-tuple with the image tensor.
    """
    return (torch.randn(batch, 3, resolution, resolution, dtype=dtype, device=device),)


# CNN families take one image input `x`, at least 32 x 32 unless a family says otherwise.
register_cnn = registrar("cnn", image_inputs, bounds={"resolution": Bounds(ge=32)})


def token_inputs(
    *,
    batch: int,
    device: torch.device,
    seq_len: int,
    vocab: int,
    **_: object,
) -> tuple[torch.Tensor, ...]:
    """Return a single random ``int64`` token id batch of shape (batch, seq_len).

    Args:
        batch: Batch size.
        device: Target device.
        seq_len: Sequence length.
        vocab: Vocabulary size (ids are drawn from ``[0, vocab)``).

    Returns:
        A one-tuple with the token ids.
    """
    return (torch.randint(0, vocab, (batch, seq_len), dtype=torch.int64, device=device),)


def conv_bn(
    cin: int,
    cout: int,
    kernel: int = 3,
    stride: int = 1,
    groups: int = 1,
    act: type[nn.Module] | None = nn.ReLU,
    eps: float = 1e-5,
) -> nn.Sequential:
    """Conv (no bias) + BatchNorm + optional activation, "same" padding.

    Args:
        cin: Input channels.
        cout: Output channels.
        kernel: Kernel size.
        stride: Stride.
        groups: Convolution groups.
        act: Activation class or ``None``.
        eps: BatchNorm epsilon.

    Returns:
        The block.
    """
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout, eps=eps),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)
