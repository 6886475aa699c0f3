"""EfficientNet (B0-B7), RegNet and ConvNeXt families."""

from __future__ import annotations

import math

import numpy as _np
import torch
from torch import nn

from zoo._common import conv_bn, make_divisible, register_cnn
from zoo.cnn_mobile import SqueezeExcite
from zoo.registry import Bounds

# --------------------------------------------------------------------------- EfficientNet

# expand, kernel, stride, in, out, repeats
_EFFNET_STAGES = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)


class MBConv(nn.Module):
    """Mobile inverted bottleneck with squeeze-excitation and SiLU."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = make_divisible(cin * expand)
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if hidden != cin:
            layers.append(conv_bn(cin, hidden, 1, act=nn.SiLU))
        layers += [
            conv_bn(hidden, hidden, kernel, stride, groups=hidden, act=nn.SiLU),
            SqueezeExcite(hidden, max(1, cin // 4), act=nn.SiLU),
            conv_bn(hidden, cout, 1, act=None),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.use_res else out


class EfficientNet(nn.Module):
    """EfficientNet-B* with compound width/depth scaling (torchvision layout)."""

    def __init__(self, width: float, depth: float, dropout: float, num_classes: int) -> None:
        super().__init__()
        cin = make_divisible(32 * width)
        layers: list[nn.Module] = [conv_bn(3, cin, 3, 2, act=nn.SiLU)]
        for expand, kernel, stride, _, out, repeats in _EFFNET_STAGES:
            cout = make_divisible(out * width)
            blocks = []
            for i in range(int(math.ceil(repeats * depth))):
                blocks.append(MBConv(cin, cout, kernel, stride if i == 0 else 1, expand))
                cin = cout
            layers.append(nn.Sequential(*blocks))
        last = 4 * cin
        layers.append(conv_bn(cin, last, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def build_efficientnet(width: float, depth: float, dropout: float, num_classes: int, resolution: int) -> nn.Module:
    """Build an EfficientNet.

    Args:
        width: Channel multiplier.
        depth: Block-repeat multiplier.
        dropout: Classifier dropout.
        num_classes: Number of classes.
        resolution: Input resolution (validated only).

    Returns:
        The model.
    """
    return EfficientNet(width, depth, dropout, num_classes)


_EFFNET_VARIANTS = {  # width, depth, resolution, dropout
    "b0": (1.0, 1.0, 224, 0.2),
    "b1": (1.0, 1.1, 240, 0.2),
    "b2": (1.1, 1.2, 260, 0.3),
    "b3": (1.2, 1.4, 300, 0.3),
    "b4": (1.4, 1.8, 380, 0.4),
    "b5": (1.6, 2.2, 456, 0.4),
    "b6": (1.8, 2.6, 528, 0.5),
    "b7": (2.0, 3.1, 600, 0.5),
}

register_cnn(
    "efficientnet",
    build_efficientnet,
    {"width": 1.0, "depth": 1.0, "dropout": 0.2, "num_classes": 1000, "resolution": 224},
    {
        f"efficientnet_{k}": {"width": w, "depth": d, "resolution": r, "dropout": p}
        for k, (w, d, r, p) in _EFFNET_VARIANTS.items()
    },
    "EfficientNet B0-B7: MBConv + squeeze-excitation + SiLU, compound scaling",
    bounds={"width": Bounds(gt=0), "depth": Bounds(gt=0)},
)

# --------------------------------------------------------------------------- RegNet


def _regnet_stages(w0: int, wa: float, wm: float, depth: int, group_width: int) -> list[tuple[int, int, int]]:
    """Quantised RegNet stage widths, depths and group widths."""
    cont = _np.arange(depth) * wa + w0
    exps = _np.round(_np.log(cont / w0) / math.log(wm))
    widths = (_np.round(w0 * _np.power(wm, exps) / 8) * 8).astype(int).tolist()
    stages: list[list[int]] = []
    for w in widths:
        if stages and stages[-1][0] == w:
            stages[-1][1] += 1
        else:
            stages.append([w, 1])
    out = []
    for w, d in stages:
        g = min(group_width, w)
        # the nearest multiple of g, halves rounded up (torchvision's _make_divisible; Python's round() would round
        # 392 / 16 = 24.5 down to 24 and give regnet_x_400mf a last stage of 384 channels instead of 400)
        width = max(g, int(w + g / 2) // g * g)
        out.append((width + g if width < 0.9 * w else width, d, g))
    return out


class _RegNetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, group: int, se_ratio: float) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            conv_bn(cin, cout, 1),
            conv_bn(cout, cout, 3, stride, groups=cout // group),
        ]
        if se_ratio > 0:
            layers.append(SqueezeExcite(cout, max(1, int(round(se_ratio * cin)))))
        layers.append(conv_bn(cout, cout, 1, act=None))
        self.f = nn.Sequential(*layers)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = conv_bn(cin, cout, 1, stride, act=None)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.proj is None else self.proj(x)
        return self.relu(self.f(x) + idt)


class RegNet(nn.Module):
    """RegNetX / RegNetY (with SE) built from the quantised linear width rule."""

    def __init__(
        self,
        w0: int,
        wa: float,
        wm: float,
        depth: int,
        group_width: int,
        se_ratio: float,
        num_classes: int,
    ) -> None:
        super().__init__()
        self.stem = conv_bn(3, 32, 3, 2)
        blocks: list[nn.Module] = []
        cin = 32
        for width, count, group in _regnet_stages(w0, wa, wm, depth, group_width):
            for i in range(count):
                blocks.append(_RegNetBlock(cin, width, 2 if i == 0 else 1, group, se_ratio))
                cin = width
        self.trunk = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.trunk(self.stem(x)).mean([2, 3]))


def build_regnet(
    w0: int,
    wa: float,
    wm: float,
    depth: int,
    group_width: int,
    se_ratio: float,
    num_classes: int,
    resolution: int,
) -> nn.Module:
    """Build a RegNet.

    Args:
        w0: Initial width.
        wa: Width slope.
        wm: Width multiplier between stages (> 1).
        depth: Total number of blocks.
        group_width: Channels per group of the 3x3 convolutions.
        se_ratio: Squeeze-excitation ratio (0 disables, RegNetX).
        num_classes: Number of classes.
        resolution: Input resolution (validated only).

    Returns:
        The model.
    """
    return RegNet(w0, wa, wm, depth, group_width, se_ratio, num_classes)


register_cnn(
    "regnet",
    build_regnet,
    {
        "w0": 48,
        "wa": 27.89,
        "wm": 2.09,
        "depth": 16,
        "group_width": 8,
        "se_ratio": 0.25,
        "num_classes": 1000,
        "resolution": 224,
    },
    {
        "regnet_y_400mf": {},
        "regnet_x_400mf": {
            "w0": 24,
            "wa": 24.48,
            "wm": 2.54,
            "depth": 22,
            "group_width": 16,
            "se_ratio": 0.0,
        },
        "regnet_x_800mf": {
            "w0": 56,
            "wa": 35.73,
            "wm": 2.28,
            "depth": 16,
            "group_width": 16,
            "se_ratio": 0.0,
        },
        "regnet_y_800mf": {"w0": 56, "wa": 38.84, "wm": 2.4, "depth": 14, "group_width": 16},
        "regnet_y_1_6gf": {"w0": 48, "wa": 20.71, "wm": 2.65, "depth": 27, "group_width": 24},
    },
    "RegNetX/Y: quantised linear widths, grouped bottlenecks, optional SE",
    bounds={
        "w0": Bounds(ge=8),
        "wa": Bounds(gt=0),
        "wm": Bounds(gt=1),
        "depth": Bounds(ge=1),
        "group_width": Bounds(ge=1),
    },
)

# --------------------------------------------------------------------------- ConvNeXt


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channel dimension of an NCHW tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    """ConvNeXt block: depthwise 7x7, LayerNorm, MLP with GELU, layer scale."""

    def __init__(self, dim: int, layer_scale: float = 1e-6) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pw2 = nn.Linear(4 * dim, dim)
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), layer_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pw2(self.act(self.pw1(self.norm(y)))).permute(0, 3, 1, 2)
        return x + self.layer_scale * y


class ConvNeXt(nn.Module):
    """ConvNeXt (torchvision layout): patchify stem, 4 stages, LayerNorm head."""

    def __init__(self, dims: tuple[int, ...], depths: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))]
        for i, (dim, depth) in enumerate(zip(dims, depths, strict=True)):
            if i > 0:
                layers.append(nn.Sequential(LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)))
            layers.append(nn.Sequential(*[CNBlock(dim) for _ in range(depth)]))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.norm = LayerNorm2d(dims[-1], eps=1e-6)
        self.fc = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.pool(self.features(x)))
        return self.fc(torch.flatten(x, 1))


def build_convnext(width: int, depth3: int, num_classes: int, resolution: int) -> nn.Module:
    """Build a ConvNeXt.

    Args:
        width: Channels of the first stage (doubled each stage).
        depth3: Blocks in the third stage (other stages have 3).
        num_classes: Number of classes.
        resolution: Input resolution (validated only).

    Returns:
        The model.
    """
    dims = tuple(width * 2**i for i in range(4))
    return ConvNeXt(dims, (3, 3, depth3, 3), num_classes)


register_cnn(
    "convnext",
    build_convnext,
    {"width": 96, "depth3": 9, "num_classes": 1000, "resolution": 224},
    {
        "convnext_atto": {"width": 40, "depth3": 6},
        "convnext_tiny": {"width": 96, "depth3": 9},
        "convnext_small": {"width": 96, "depth3": 27},
        "convnext_base": {"width": 128, "depth3": 27},
        "convnext_large": {"width": 192, "depth3": 27},
    },
    "ConvNeXt: depthwise 7x7 + LayerNorm + GELU MLP + layer scale",
    bounds={"width": Bounds(ge=1), "depth3": Bounds(ge=1)},
)
