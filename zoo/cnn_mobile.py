"""Mobile CNN families: MobileNetV2/V3, MnasNet, ShuffleNetV2 and SqueezeNet."""

from __future__ import annotations

import torch
from torch import nn

from zoo._common import conv_bn, make_divisible, register_cnn
from zoo.registry import Bounds

# --------------------------------------------------------------------------- MobileNetV2

_MBV2_SETTINGS = (  # expand ratio, channels, repeats, stride
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 linear projection."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = int(round(cin * expand))
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(conv_bn(cin, hidden, 1, act=nn.ReLU6))
        layers += [
            conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
            conv_bn(hidden, cout, 1, act=None),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        return x + out if self.use_res else out


class MobileNetV2(nn.Module):
    """MobileNetV2 with a width multiplier (torchvision layout)."""

    def __init__(self, width: float, num_classes: int, dropout: float) -> None:
        super().__init__()
        cin = make_divisible(32 * width)
        last = make_divisible(1280 * max(1.0, width))
        layers: list[nn.Module] = [conv_bn(3, cin, 3, 2, act=nn.ReLU6)]
        for expand, channels, repeats, stride in _MBV2_SETTINGS:
            cout = make_divisible(channels * width)
            for i in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        layers.append(conv_bn(cin, last, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def build_mobilenet_v2(width: float, num_classes: int, resolution: int) -> nn.Module:
    """Build a MobileNetV2.

    Args:
        width: Channel width multiplier.
        num_classes: Number of classes.
        resolution: Input resolution (validated only).

    Returns:
        The model.
    """
    return MobileNetV2(width, num_classes, 0.2)


register_cnn(
    "mobilenet_v2",
    build_mobilenet_v2,
    {"width": 1.0, "num_classes": 1000, "resolution": 224},
    {
        "mobilenet_v2_x0_5": {"width": 0.5},
        "mobilenet_v2_x0_75": {"width": 0.75},
        "mobilenet_v2": {"width": 1.0},
        "mobilenet_v2_x1_4": {"width": 1.4},
    },
    "MobileNetV2 inverted residuals with ReLU6",
    bounds={"width": Bounds(gt=0)},
)

# --------------------------------------------------------------------------- MobileNetV3

# kernel, expanded, out, use_se, activation ("RE" / "HS"), stride
_MBV3_LARGE = (
    (3, 16, 16, False, "RE", 1),
    (3, 64, 24, False, "RE", 2),
    (3, 72, 24, False, "RE", 1),
    (5, 72, 40, True, "RE", 2),
    (5, 120, 40, True, "RE", 1),
    (5, 120, 40, True, "RE", 1),
    (3, 240, 80, False, "HS", 2),
    (3, 200, 80, False, "HS", 1),
    (3, 184, 80, False, "HS", 1),
    (3, 184, 80, False, "HS", 1),
    (3, 480, 112, True, "HS", 1),
    (3, 672, 112, True, "HS", 1),
    (5, 672, 160, True, "HS", 2),
    (5, 960, 160, True, "HS", 1),
    (5, 960, 160, True, "HS", 1),
)
_MBV3_SMALL = (
    (3, 16, 16, True, "RE", 2),
    (3, 72, 24, False, "RE", 2),
    (3, 88, 24, False, "RE", 1),
    (5, 96, 40, True, "HS", 2),
    (5, 240, 40, True, "HS", 1),
    (5, 240, 40, True, "HS", 1),
    (5, 120, 48, True, "HS", 1),
    (5, 144, 48, True, "HS", 1),
    (5, 288, 96, True, "HS", 2),
    (5, 576, 96, True, "HS", 1),
    (5, 576, 96, True, "HS", 1),
)


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation with 1x1 convolutions.

    Args:
        channels: Channels of the gated tensor.
        squeeze: Bottleneck channels.
        act: Activation class after the reduction.
        gate: Gate activation class.
    """

    def __init__(
        self,
        channels: int,
        squeeze: int,
        act: type[nn.Module] = nn.ReLU,
        gate: type[nn.Module] = nn.Sigmoid,
    ) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.act = act()
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))


class MBV3Block(nn.Module):
    """MobileNetV3 bottleneck with optional SE and hard-swish."""

    def __init__(self, cin: int, kernel: int, hidden: int, cout: int, se: bool, act: str, stride: int) -> None:
        super().__init__()
        act_cls = nn.Hardswish if act == "HS" else nn.ReLU
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if hidden != cin:
            layers.append(conv_bn(cin, hidden, 1, act=act_cls, eps=1e-3))
        layers.append(conv_bn(hidden, hidden, kernel, stride, groups=hidden, act=act_cls, eps=1e-3))
        if se:
            layers.append(SqueezeExcite(hidden, make_divisible(hidden // 4), gate=nn.Hardsigmoid))
        layers.append(conv_bn(hidden, cout, 1, act=None, eps=1e-3))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.use_res else out


class MobileNetV3(nn.Module):
    """MobileNetV3 large/small with a width multiplier."""

    def __init__(self, size: str, width: float, num_classes: int) -> None:
        super().__init__()
        table = _MBV3_LARGE if size == "large" else _MBV3_SMALL
        head = 1280 if size == "large" else 1024
        cin = make_divisible(16 * width)
        layers: list[nn.Module] = [conv_bn(3, cin, 3, 2, act=nn.Hardswish, eps=1e-3)]
        for kernel, hidden, cout, se, act, stride in table:
            hidden, cout = make_divisible(hidden * width), make_divisible(cout * width)
            layers.append(MBV3Block(cin, kernel, hidden, cout, se, act, stride))
            cin = cout
        last = 6 * cin
        layers.append(conv_bn(cin, last, 1, act=nn.Hardswish, eps=1e-3))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(last, head), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(head, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def build_mobilenet_v3(size: str, width: float, num_classes: int, resolution: int) -> nn.Module:
    """Build a MobileNetV3.

    Args:
        size: ``"large"`` or ``"small"``.
        width: Channel width multiplier.
        num_classes: Number of classes.
        resolution: Input resolution (validated only).

    Returns:
        The model.
    """
    return MobileNetV3(size, width, num_classes)


register_cnn(
    "mobilenet_v3",
    build_mobilenet_v3,
    {"size": "large", "width": 1.0, "num_classes": 1000, "resolution": 224},
    {
        "mobilenet_v3_small": {"size": "small"},
        "mobilenet_v3_large": {"size": "large"},
        "mobilenet_v3_large_x0_75": {"size": "large", "width": 0.75},
        "mobilenet_v3_large_x1_25": {"size": "large", "width": 1.25},
    },
    "MobileNetV3 with squeeze-excitation, hard-swish and hard-sigmoid",
    bounds={"size": Bounds(choices=("large", "small")), "width": Bounds(gt=0)},
)

# --------------------------------------------------------------------------- MnasNet

# out channels (index into depths), kernel, stride, expansion, repeats
_MNAS_STACKS = (
    (2, 3, 2, 3, 3),
    (3, 5, 2, 3, 3),
    (4, 5, 2, 6, 3),
    (5, 3, 1, 6, 2),
    (6, 5, 2, 6, 4),
    (7, 3, 1, 6, 1),
)


class MnasNet(nn.Module):
    """MnasNet-B1 with depth multiplier ``alpha`` (torchvision layout)."""

    def __init__(self, alpha: float, num_classes: int) -> None:
        super().__init__()
        depths = [make_divisible(d * alpha, 8, 8) for d in (32, 16, 24, 40, 80, 96, 192, 320)]
        layers: list[nn.Module] = [
            conv_bn(3, depths[0], 3, 2, eps=1e-3),
            conv_bn(depths[0], depths[0], 3, 1, groups=depths[0], eps=1e-3),
            conv_bn(depths[0], depths[1], 1, act=None, eps=1e-3),
        ]
        cin = depths[1]
        for idx, kernel, stride, expand, repeats in _MNAS_STACKS:
            for i in range(repeats):
                layers.append(_MnasBlock(cin, depths[idx], kernel, stride if i == 0 else 1, expand))
                cin = depths[idx]
        layers.append(conv_bn(cin, 1280, 1, eps=1e-3))
        self.layers = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.layers(x).mean([2, 3]))


class _MnasBlock(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.use_res = cin == cout and stride == 1
        self.layers = nn.Sequential(
            conv_bn(cin, mid, 1, eps=1e-3),
            conv_bn(mid, mid, kernel, stride, groups=mid, eps=1e-3),
            conv_bn(mid, cout, 1, act=None, eps=1e-3),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layers(x)
        return x + out if self.use_res else out


def build_mnasnet(alpha: float, num_classes: int, resolution: int) -> nn.Module:
    """Build a MnasNet.

    Args:
        alpha: Depth (channel) multiplier.
        num_classes: Number of classes.
        resolution: Input resolution (validated only).

    Returns:
        The model.
    """
    return MnasNet(alpha, num_classes)


register_cnn(
    "mnasnet",
    build_mnasnet,
    {"alpha": 1.0, "num_classes": 1000, "resolution": 224},
    {
        "mnasnet0_5": {"alpha": 0.5},
        "mnasnet0_75": {"alpha": 0.75},
        "mnasnet1_0": {"alpha": 1.0},
        "mnasnet1_3": {"alpha": 1.3},
    },
    "MnasNet-B1 (NAS-found mobile CNN)",
    bounds={"alpha": Bounds(gt=0)},
)

# --------------------------------------------------------------------------- ShuffleNetV2

_SHUFFLE_CHANNELS = {
    0.5: (24, 48, 96, 192, 1024),
    1.0: (24, 116, 232, 464, 1024),
    1.5: (24, 176, 352, 704, 1024),
    2.0: (24, 244, 488, 976, 2048),
}


def _channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    n, c, h, w = x.shape
    x = x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous()
    return x.view(n, c, h, w)


class _ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(conv_bn(cin, cin, 3, stride, groups=cin, act=None), conv_bn(cin, half, 1))
        else:
            self.branch1 = nn.Identity()
        b2_in = cin if stride > 1 else half
        self.branch2 = nn.Sequential(
            conv_bn(b2_in, half, 1),
            conv_bn(half, half, 3, stride, groups=half, act=None),
            conv_bn(half, half, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat((a, self.branch2(b)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return _channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """ShuffleNetV2 with channel split and channel shuffle."""

    def __init__(self, channels: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        self.conv1 = conv_bn(3, channels[0], 3, 2)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages: list[nn.Module] = []
        cin = channels[0]
        for repeats, cout in zip((4, 8, 4), channels[1:4], strict=True):
            units = [_ShuffleUnit(cin, cout, 2)]
            units += [_ShuffleUnit(cout, cout, 1) for _ in range(repeats - 1)]
            stages.append(nn.Sequential(*units))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.conv5 = conv_bn(cin, channels[4], 1)
        self.fc = nn.Linear(channels[4], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv5(self.stages(self.maxpool(self.conv1(x))))
        return self.fc(x.mean([2, 3]))


def build_shufflenet_v2(width: float, num_classes: int, resolution: int) -> nn.Module:
    """Build a ShuffleNetV2.

    Args:
        width: One of 0.5, 1.0, 1.5, 2.0.
        num_classes: Number of classes.
        resolution: Input resolution (validated only).

    Returns:
        The model.
    """
    return ShuffleNetV2(_SHUFFLE_CHANNELS[width], num_classes)


register_cnn(
    "shufflenet_v2",
    build_shufflenet_v2,
    {"width": 1.0, "num_classes": 1000, "resolution": 224},
    {
        "shufflenet_v2_x0_5": {"width": 0.5},
        "shufflenet_v2_x1_0": {"width": 1.0},
        "shufflenet_v2_x1_5": {"width": 1.5},
        "shufflenet_v2_x2_0": {"width": 2.0},
    },
    "ShuffleNetV2 (channel split + shuffle)",
    bounds={"width": Bounds(choices=tuple(_SHUFFLE_CHANNELS))},
)

# --------------------------------------------------------------------------- SqueezeNet


class _Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, e1: int, e3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.expand1 = nn.Conv2d(squeeze, e1, 1)
        self.expand3 = nn.Conv2d(squeeze, e3, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.relu(self.squeeze(x))
        return torch.cat((self.relu(self.expand1(s)), self.relu(self.expand3(s))), 1)


def _fires(width: float, specs: tuple) -> list[nn.Module]:
    layers: list[nn.Module] = []
    for spec in specs:
        if spec == "M":
            layers.append(nn.MaxPool2d(3, 2, ceil_mode=True))
        else:
            cin, sq, e = (max(1, int(round(v * width))) for v in spec)
            layers.append(_Fire(cin, sq, e, e))
    return layers


class SqueezeNet(nn.Module):
    """SqueezeNet 1.0 / 1.1 with a channel width multiplier."""

    def __init__(self, version: str, width: float, num_classes: int) -> None:
        super().__init__()
        if version == "1_0":
            stem = nn.Conv2d(3, int(round(96 * width)), 7, 2)
            specs = (
                "M",
                (96, 16, 64),
                (128, 16, 64),
                (128, 32, 128),
                "M",
                (256, 32, 128),
                (256, 48, 192),
                (384, 48, 192),
                (384, 64, 256),
                "M",
                (512, 64, 256),
            )
        else:
            stem = nn.Conv2d(3, int(round(64 * width)), 3, 2)
            specs = (
                "M",
                (64, 16, 64),
                (128, 16, 64),
                "M",
                (128, 32, 128),
                (256, 32, 128),
                "M",
                (256, 48, 192),
                (384, 48, 192),
                (384, 64, 256),
                (512, 64, 256),
            )
        self.features = nn.Sequential(stem, nn.ReLU(), *_fires(width, specs))
        self.classifier = nn.Sequential(
            nn.Dropout(0.5),
            nn.Conv2d(int(round(512 * width)), num_classes, 1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


def build_squeezenet(version: str, width: float, num_classes: int, resolution: int) -> nn.Module:
    """Build a SqueezeNet.

    Args:
        version: ``"1_0"`` or ``"1_1"``.
        width: Channel multiplier.
        num_classes: Number of classes.
        resolution: Input resolution (validated only).

    Returns:
        The model.
    """
    return SqueezeNet(version, width, num_classes)


register_cnn(
    "squeezenet",
    build_squeezenet,
    {"version": "1_1", "width": 1.0, "num_classes": 1000, "resolution": 224},
    {
        "squeezenet1_1": {"version": "1_1"},
        "squeezenet1_0": {"version": "1_0"},
        "squeezenet1_1_x2": {"version": "1_1", "width": 2.0},
    },
    "SqueezeNet fire modules (squeeze 1x1, expand 1x1 + 3x3)",
    bounds={"version": Bounds(choices=("1_0", "1_1")), "width": Bounds(gt=0), "resolution": Bounds(ge=48)},
)
