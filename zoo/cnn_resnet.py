"""ResNet v1.5, Wide-ResNet and ResNeXt families (torchvision-compatible layouts)."""

from __future__ import annotations

import torch
from torch import nn

from zoo._common import register_cnn
from zoo.registry import Bounds

_LAYOUTS: dict[int, tuple[str, tuple[int, int, int, int]]] = {
    10: ("basic", (1, 1, 1, 1)),
    18: ("basic", (2, 2, 2, 2)),
    26: ("bottleneck", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with an identity/projection shortcut."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int, groups: int, base_width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.downsample = _shortcut(cin, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided, grouped) and 1x1 expand convolutions (v1.5)."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int, groups: int, base_width: int) -> None:
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        cout = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.downsample = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + idt)


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module | None:
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    """ResNet v1.5 (stride in the 3x3 convolution) as in torchvision.

    Args:
        depth: One of 10, 18, 26, 34, 50, 101, 152.
        width: Channels of the first stage (64 in the paper).
        groups: Grouped convolution groups (ResNeXt).
        base_width: Width per group (64 standard, 128 for Wide-ResNet).
        num_classes: Classifier outputs.
    """

    def __init__(self, depth: int, width: int, groups: int, base_width: int, num_classes: int) -> None:
        super().__init__()
        kind, counts = _LAYOUTS[depth]
        block = BasicBlock if kind == "basic" else Bottleneck
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages: list[nn.Module] = []
        cin = width
        for i, count in enumerate(counts):
            planes = width * 2**i
            blocks = []
            for j in range(count):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(block(cin, planes, stride, groups, base_width))
                cin = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build_resnet(depth: int, width: int, groups: int, base_width: int, num_classes: int, resolution: int) -> nn.Module:
    """Build a ResNet / Wide-ResNet / ResNeXt.

    Args:
        depth: Network depth (see ``_LAYOUTS``).
        width: Stem / first stage channels.
        groups: Groups of the 3x3 convolutions in bottleneck blocks.
        base_width: Width per group in bottleneck blocks.
        num_classes: Number of classes.
        resolution: Input resolution (only validated).

    Returns:
        The model.
    """
    return ResNet(depth, width, groups, base_width, num_classes)


_DEFAULTS = {
    "depth": 50,
    "width": 64,
    "groups": 1,
    "base_width": 64,
    "num_classes": 1000,
    "resolution": 224,
}
_BOUNDS = {
    "depth": Bounds(choices=tuple(sorted(_LAYOUTS))),
    "width": Bounds(ge=1),
    "groups": Bounds(ge=1),
    "base_width": Bounds(ge=1),
}

register_cnn(
    "resnet",
    build_resnet,
    dict(_DEFAULTS),
    {
        "resnet18": {"depth": 18},
        "resnet34": {"depth": 34},
        "resnet50": {"depth": 50},
        "resnet101": {"depth": 101},
        "resnet152": {"depth": 152},
    },
    "ResNet v1.5 (basic / bottleneck blocks), torchvision layout",
    bounds=_BOUNDS,
)

register_cnn(
    "wide_resnet",
    build_resnet,
    {**_DEFAULTS, "base_width": 128},
    {
        "wide_resnet26_2": {"depth": 26},
        "wide_resnet50_2": {"depth": 50},
        "wide_resnet101_2": {"depth": 101},
    },
    "Wide-ResNet: bottleneck ResNet with doubled inner width",
    bounds=_BOUNDS,
)

register_cnn(
    "resnext",
    build_resnet,
    {**_DEFAULTS, "groups": 32, "base_width": 4},
    {
        "resnext26_32x4d": {"depth": 26},
        "resnext50_32x4d": {"depth": 50},
        "resnext101_32x8d": {"depth": 101, "base_width": 8},
    },
    "ResNeXt: bottleneck ResNet with grouped 3x3 convolutions",
    bounds=_BOUNDS,
)
