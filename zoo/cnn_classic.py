"""Classic CNN families: VGG, AlexNet, DenseNet and GoogLeNet (Inception v1)."""

from __future__ import annotations

import torch
from torch import nn

from zoo._common import conv_bn, register_cnn
from zoo.registry import Bounds

# --------------------------------------------------------------------------- VGG

_VGG_CFGS: dict[int, tuple[int, ...]] = {  # conv counts per stage (channels 64..512)
    11: (1, 1, 2, 2, 2),
    13: (2, 2, 2, 2, 2),
    16: (2, 2, 3, 3, 3),
    19: (2, 2, 4, 4, 4),
}


class VGG(nn.Module):
    """VGG with optional BatchNorm and a width multiplier (torchvision layout at width 1)."""

    def __init__(self, depth: int, batch_norm: bool, width: float, num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for stage, count in enumerate(_VGG_CFGS[depth]):
            cout = max(1, int(round(min(64 * 2**stage, 512) * width)))
            for _ in range(count):
                layers.append(nn.Conv2d(cin, cout, 3, padding=1))
                if batch_norm:
                    layers.append(nn.BatchNorm2d(cout))
                layers.append(nn.ReLU())
                cin = cout
            layers.append(nn.MaxPool2d(2, 2))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(7)
        hidden = max(1, int(round(4096 * width)))
        self.classifier = nn.Sequential(
            nn.Linear(cin * 49, hidden),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def build_vgg(depth: int, batch_norm: bool, width: float, num_classes: int, resolution: int) -> nn.Module:
    """Build a VGG.

    Args:
        depth: 11, 13, 16 or 19.
        batch_norm: Insert BatchNorm after every convolution.
        width: Channel multiplier for convolutions and the classifier.
        num_classes: Number of classes.
        resolution: Input resolution (validated only).

    Returns:
        The model.
    """
    return VGG(depth, batch_norm, width, num_classes)


register_cnn(
    "vgg",
    build_vgg,
    {"depth": 16, "batch_norm": False, "width": 1.0, "num_classes": 1000, "resolution": 224},
    {
        "vgg11_x0_25": {"depth": 11, "width": 0.25},
        "vgg11": {"depth": 11},
        "vgg13": {"depth": 13},
        "vgg16": {"depth": 16},
        "vgg16_bn": {"depth": 16, "batch_norm": True},
        "vgg19": {"depth": 19},
    },
    "VGG 11-19 plain 3x3 conv stacks with large FC classifier",
    bounds={"depth": Bounds(choices=tuple(_VGG_CFGS)), "width": Bounds(gt=0)},
)

# --------------------------------------------------------------------------- AlexNet


class AlexNet(nn.Module):
    """AlexNet (torchvision single-tower layout) with a width multiplier."""

    def __init__(self, width: float, num_classes: int) -> None:
        super().__init__()
        c = [max(1, int(round(v * width))) for v in (64, 192, 384, 256, 256, 4096)]
        self.features = nn.Sequential(
            nn.Conv2d(3, c[0], 11, 4, 2),
            nn.ReLU(),
            nn.MaxPool2d(3, 2),
            nn.Conv2d(c[0], c[1], 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(3, 2),
            nn.Conv2d(c[1], c[2], 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(c[2], c[3], 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(c[3], c[4], 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(3, 2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(6)
        self.classifier = nn.Sequential(
            nn.Dropout(0.5),
            nn.Linear(c[4] * 36, c[5]),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(c[5], c[5]),
            nn.ReLU(),
            nn.Linear(c[5], num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def build_alexnet(width: float, num_classes: int, resolution: int) -> nn.Module:
    """Build an AlexNet.

    Args:
        width: Channel multiplier.
        num_classes: Number of classes.
        resolution: Input resolution (must be >= 63).

    Returns:
        The model.
    """
    return AlexNet(width, num_classes)


register_cnn(
    "alexnet",
    build_alexnet,
    {"width": 1.0, "num_classes": 1000, "resolution": 224},
    {
        "alexnet_x0_25": {"width": 0.25},
        "alexnet_x0_5": {"width": 0.5},
        "alexnet": {},
    },
    "AlexNet: large-kernel convolutions and a large FC classifier",
    bounds={"width": Bounds(gt=0), "resolution": Bounds(ge=63)},
)

# --------------------------------------------------------------------------- DenseNet

_DENSENET = {  # growth, blocks, init features
    121: (32, (6, 12, 24, 16), 64),
    161: (48, (6, 12, 36, 24), 96),
    169: (32, (6, 12, 32, 32), 64),
    201: (32, (6, 12, 48, 32), 64),
}


class _DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int, bn_size: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin),
            nn.ReLU(),
            nn.Conv2d(cin, bn_size * growth, 1, bias=False),
            nn.BatchNorm2d(bn_size * growth),
            nn.ReLU(),
            nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat((x, self.body(x)), 1)


class DenseNet(nn.Module):
    """DenseNet-BC (torchvision layout)."""

    def __init__(self, growth: int, blocks: tuple[int, ...], init: int, num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, init, 7, 2, 3, bias=False),
            nn.BatchNorm2d(init),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        ]
        c = init
        for i, n in enumerate(blocks):
            for _ in range(n):
                layers.append(_DenseLayer(c, growth, 4))
                c += growth
            if i != len(blocks) - 1:
                layers += [
                    nn.BatchNorm2d(c),
                    nn.ReLU(),
                    nn.Conv2d(c, c // 2, 1, bias=False),
                    nn.AvgPool2d(2, 2),
                ]
                c //= 2
        layers += [nn.BatchNorm2d(c), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean([2, 3]))


def build_densenet(depth: int, growth: int, num_classes: int, resolution: int) -> nn.Module:
    """Build a DenseNet.

    Args:
        depth: 121, 161, 169 or 201 (selects the block layout).
        growth: Growth rate (0 = the depth's standard value).
        num_classes: Number of classes.
        resolution: Input resolution (validated only).

    Returns:
        The model.
    """
    std_growth, blocks, init = _DENSENET[depth]
    return DenseNet(growth or std_growth, blocks, init, num_classes)


register_cnn(
    "densenet",
    build_densenet,
    {"depth": 121, "growth": 0, "num_classes": 1000, "resolution": 224},
    {
        "densenet121": {"depth": 121},
        "densenet161": {"depth": 161},
        "densenet169": {"depth": 169},
        "densenet201": {"depth": 201},
    },
    "DenseNet-BC: dense concatenation blocks with transitions",
    bounds={"depth": Bounds(choices=tuple(_DENSENET))},
)

# --------------------------------------------------------------------------- GoogLeNet

_INCEPTION = (  # 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj; an int = max pool kernel
    (64, 96, 128, 16, 32, 32),
    (128, 128, 192, 32, 96, 64),
    3,
    (192, 96, 208, 16, 48, 64),
    (160, 112, 224, 24, 64, 64),
    (128, 128, 256, 24, 64, 64),
    (112, 144, 288, 32, 64, 64),
    (256, 160, 320, 32, 128, 128),
    2,
    (256, 160, 320, 32, 128, 128),
    (384, 192, 384, 48, 128, 128),
)


class _Inception(nn.Module):
    def __init__(self, cin: int, c1: int, r3: int, c3: int, r5: int, c5: int, pp: int) -> None:
        super().__init__()
        self.b1 = conv_bn(cin, c1, 1, eps=1e-3)
        self.b2 = nn.Sequential(conv_bn(cin, r3, 1, eps=1e-3), conv_bn(r3, c3, 3, eps=1e-3))
        # torchvision uses a 3x3 kernel in the "5x5" branch; keep that for parity.
        self.b3 = nn.Sequential(conv_bn(cin, r5, 1, eps=1e-3), conv_bn(r5, c5, 3, eps=1e-3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv_bn(cin, pp, 1, eps=1e-3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat((self.b1(x), self.b2(x), self.b3(x), self.b4(x)), 1)


class GoogLeNet(nn.Module):
    """GoogLeNet / Inception v1 without auxiliary heads, with a width multiplier."""

    def __init__(self, width: float, num_classes: int) -> None:
        super().__init__()

        def w(v: int) -> int:
            return max(1, int(round(v * width)))

        layers: list[nn.Module] = [
            conv_bn(3, w(64), 7, 2, eps=1e-3),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            conv_bn(w(64), w(64), 1, eps=1e-3),
            conv_bn(w(64), w(192), 3, eps=1e-3),
            nn.MaxPool2d(3, 2, ceil_mode=True),
        ]
        cin = w(192)
        for spec in _INCEPTION:
            if isinstance(spec, int):
                layers.append(nn.MaxPool2d(spec, 2, ceil_mode=True))
                continue
            c = [w(v) for v in spec]
            layers.append(_Inception(cin, *c))
            cin = c[0] + c[2] + c[4] + c[5]
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(self.features(x).mean([2, 3])))


def build_googlenet(width: float, num_classes: int, resolution: int) -> nn.Module:
    """Build a GoogLeNet.

    Args:
        width: Channel multiplier.
        num_classes: Number of classes.
        resolution: Input resolution (validated only).

    Returns:
        The model.
    """
    return GoogLeNet(width, num_classes)


register_cnn(
    "googlenet",
    build_googlenet,
    {"width": 1.0, "num_classes": 1000, "resolution": 224},
    {
        "googlenet_x0_5": {"width": 0.5},
        "googlenet": {},
        "googlenet_x1_5": {"width": 1.5},
    },
    "GoogLeNet (Inception v1): 4-branch concat modules",
    bounds={"width": Bounds(gt=0)},
)
