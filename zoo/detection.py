"""SSD300 as NVIDIA DeepLearningExamples builds it (PyTorch/Detection/SSD, ``ssd/model.py``).

The backbone is a torchvision ResNet up to ``layer3`` (stem, layer1-3) with the first block of layer3 made
stride 1, so a 300 x 300 image gives a 38 x 38 map (1024 channels for ResNet-50). Five extra blocks (1x1 conv to
256/256/128/128/128 channels, BN, ReLU, 3x3 conv to 512/512/256/256/256, BN, ReLU; stride 2 and padding 1 for the
first three, stride 1 and no padding for the last two) give the 19, 10, 5, 3 and 1 maps. Each of the six maps has
a 3x3 location head (4 x defaults) and a 3x3 class head (81 x defaults), defaults 4, 6, 6, 6, 4, 4: 8,732 boxes.
The forward ends at the raw box offsets and class scores (no decoding, no NMS), as the timed benchmark does;
the two outputs are concatenated into one (B, 4 + 81, 8732) tensor.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo._common import image_inputs
from zoo.cnn_resnet import ResNet
from zoo.registry import Bounds, registrar

LABELS = 81  # COCO's 80 classes and background
DEFAULTS = (4, 6, 6, 6, 4, 4)
# backbone depth -> channels of the six maps (ssd/model.py)
OUT_CHANNELS = {
    18: (256, 512, 512, 256, 256, 128),
    34: (256, 512, 512, 256, 256, 256),
    50: (1024, 512, 512, 256, 256, 256),
    101: (1024, 512, 512, 256, 256, 256),
}


class SSD300(nn.Module):
    """SSD300: image (B, 3, R, R) -> box offsets and class scores (B, 4 + 81, boxes); 8,732 boxes at R = 300.

    Args:
        backbone: ResNet depth (18, 34, 50 or 101).
    """

    def __init__(self, backbone: int) -> None:
        super().__init__()
        net = ResNet(backbone, 64, 1, 64, 1000)
        first = net.layer3[0]
        first.conv1.stride = (1, 1)
        first.conv2.stride = (1, 1)
        first.downsample[0].stride = (1, 1)
        self.features = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool, net.layer1, net.layer2, net.layer3)
        chans = OUT_CHANNELS[backbone]
        blocks = []
        for i, (cin, cout, mid) in enumerate(zip(chans[:-1], chans[1:], (256, 256, 128, 128, 128), strict=True)):
            stride, pad = (2, 1) if i < 3 else (1, 0)
            blocks.append(
                nn.Sequential(
                    nn.Conv2d(cin, mid, 1, bias=False),
                    nn.BatchNorm2d(mid),
                    nn.ReLU(),
                    nn.Conv2d(mid, cout, 3, stride, pad, bias=False),
                    nn.BatchNorm2d(cout),
                    nn.ReLU(),
                )
            )
        self.extra = nn.ModuleList(blocks)
        self.loc = nn.ModuleList(nn.Conv2d(c, n * 4, 3, padding=1) for n, c in zip(DEFAULTS, chans, strict=True))
        self.conf = nn.ModuleList(nn.Conv2d(c, n * LABELS, 3, padding=1) for n, c in zip(DEFAULTS, chans, strict=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        maps = [x]
        for block in self.extra:
            x = block(x)
            maps.append(x)
        b = x.shape[0]
        locs = torch.cat([head(m).reshape(b, 4, -1) for head, m in zip(self.loc, maps, strict=True)], 2)
        confs = torch.cat([head(m).reshape(b, LABELS, -1) for head, m in zip(self.conf, maps, strict=True)], 2)
        return torch.cat([locs, confs], dim=1)


def build_ssd300(backbone: int, resolution: int) -> nn.Module:
    """Build SSD300 with a ResNet-``backbone`` feature extractor (``resolution`` is only validated)."""
    return SSD300(backbone)


registrar("detection", image_inputs)(
    "ssd300",
    build_ssd300,
    {"backbone": 50, "resolution": 300},
    {
        "ssd300_resnet18": {"backbone": 18},
        "ssd300_resnet34": {"backbone": 34},
        "ssd300_resnet50": {},  # NVIDIA DLE's SSD300 v1.1
    },
    "SSD300 detector with a ResNet backbone (NVIDIA DLE), raw box/class outputs",
    # the last two extra blocks are unpadded 3x3 convs: the 1/64 map must be >= 5 (ceil(ceil(ceil(R/8)/2)/2)/2)
    bounds={"backbone": Bounds(choices=tuple(OUT_CHANNELS)), "resolution": Bounds(ge=257)},
)
