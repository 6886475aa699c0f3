"""nnU-Net (NVIDIA DeepLearningExamples' PyTorch/Segmentation/nnUNet): MONAI's DynUNet at a task's patch size.

NVIDIA's ``nn_unet.py`` derives the U-Net from the patch size (``get_unet_params``): with isotropic spacing, every
level halves each edge while it is at least ``2 * min_fmap`` (8) voxels, up to ``depth`` (5) downsamplings; all
kernels are 3. Filters are MONAI's default, ``min(2 ** (5 + level), 320 in 3D / 512 in 2D)``. Each level is a
basic block (conv, InstanceNorm with affine, LeakyReLU 0.01, twice; the first conv strided), the decoder
upsamples with a transposed conv (kernel = stride, with bias), concatenates the skip and runs a basic block; a
1x1 conv (with bias) gives the class logits. Inference has no deep-supervision heads. The BraTS (MSD Task01)
configs have 4 input modalities and 4 label classes; the 2D model sees one slice per example (its batch is the
number of slices), the 3D model a 128^3 patch.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.registry import Bounds, registrar

MIN_FMAP = 4  # --min_fmap default
MAX_DEPTH = 5  # --depth default


def unet_levels(patch: tuple[int, ...]) -> list[int]:
    """Strides of the levels for an isotropic-spacing patch (``get_unet_params``): 1 first, then 2 per halving.

    Args:
        patch: Patch edges in voxels, (H, W) or (D, H, W).

    Returns:
        One stride per level, e.g. ``[1, 2, 2, 2, 2, 2]`` for 128^3 (6 levels).
    """
    sizes, strides = list(patch), []
    while len(strides) < MAX_DEPTH:
        step = [2 if s >= 2 * MIN_FMAP else 1 for s in sizes]
        if all(s == 1 for s in step):
            break
        # every edge of the rows' patches halves together; a patch where they differ halves the long edges only
        if len(set(step)) > 1:
            break
        sizes = [s / 2 for s in sizes]
        strides.append(2)
    return [1, *strides]


class _Basic(nn.Module):
    """MONAI UnetBasicBlock: (conv k3, InstanceNorm(affine), LeakyReLU(0.01)) x 2, the first conv strided."""

    def __init__(self, dim: int, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        conv = nn.Conv3d if dim == 3 else nn.Conv2d
        norm = nn.InstanceNorm3d if dim == 3 else nn.InstanceNorm2d
        self.conv1 = conv(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = norm(cout, affine=True)
        self.conv2 = conv(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = norm(cout, affine=True)
        self.act = nn.LeakyReLU(0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.norm1(self.conv1(x)))
        return self.act(self.norm2(self.conv2(x)))


class PointwiseUpsample(nn.Module):
    """A transposed conv with kernel = stride = 2 written as a 1x1 conv to ``cout * 2^dim`` channels + depth-to-space.

    The same arithmetic and parameters as ``ConvTranspose{2,3}d(cin, cout, 2, 2)`` (each input voxel feeds its own
    2^dim output voxels, no overlap): output ``[b, o, 2d+i, 2h+j, 2w+k] = sum_c x[b, c, d, h, w] W[c, o, i, j, k]
    + bias[o]``. TVM's PyTorch importer has no 3D transposed convolution; this form imports.
    """

    def __init__(self, dim: int, cin: int, cout: int) -> None:
        super().__init__()
        self.dim, self.cout = dim, cout
        conv = nn.Conv3d if dim == 3 else nn.Conv2d
        self.proj = conv(cin, cout * 2**dim, 1, bias=False)
        self.bias = nn.Parameter(torch.zeros(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, spatial = x.shape[0], x.shape[2:]
        y = self.proj(x).reshape(b, self.cout, *([2] * self.dim), *spatial)
        if self.dim == 3:  # (b, o, i, j, k, d, h, w) -> (b, o, d, i, h, j, w, k)
            y = y.permute(0, 1, 5, 2, 6, 3, 7, 4)
        else:  # (b, o, i, j, h, w) -> (b, o, h, i, w, j)
            y = y.permute(0, 1, 4, 2, 5, 3)
        y = y.reshape(b, self.cout, *(2 * s for s in spatial))
        return y + self.bias.reshape(1, -1, *([1] * self.dim))


class _Up(nn.Module):
    """MONAI UnetUpBlock: transposed conv (kernel = stride = 2, bias), concat the skip, basic block."""

    def __init__(self, dim: int, cin: int, cout: int, upsample: str) -> None:
        super().__init__()
        if upsample == "pointwise":
            self.up = PointwiseUpsample(dim, cin, cout)
        else:
            self.up = (nn.ConvTranspose3d if dim == 3 else nn.ConvTranspose2d)(cin, cout, 2, 2, bias=True)
        self.block = _Basic(dim, 2 * cout, cout, 1)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.block(torch.cat([self.up(x), skip], dim=1))


class NNUNet(nn.Module):
    """DynUNet as nnU-Net builds it; input (B, in_channels, *patch) -> logits (B, classes, *patch).

    Args:
        dim: 2 or 3.
        patch: Patch edges, (H, W) or (D, H, W).
        in_channels: Input modalities.
        classes: Output classes.
        upsample: ``"tconv"`` (transposed convs, as MONAI) or ``"pointwise"`` (:class:`PointwiseUpsample`).
    """

    def __init__(self, dim: int, patch: tuple[int, ...], in_channels: int, classes: int, upsample: str) -> None:
        super().__init__()
        strides = unet_levels(patch)
        cap = 320 if dim == 3 else 512
        self.filters = [min(2 ** (5 + i), cap) for i in range(len(strides))]
        f = self.filters
        self.down = nn.ModuleList(
            _Basic(dim, in_channels if i == 0 else f[i - 1], f[i], strides[i]) for i in range(len(strides))
        )
        self.up = nn.ModuleList(_Up(dim, f[i + 1], f[i], upsample) for i in reversed(range(len(strides) - 1)))
        conv = nn.Conv3d if dim == 3 else nn.Conv2d
        self.out = conv(f[0], classes, 1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
        skips.pop()  # the bottleneck's output is x itself
        for block in self.up:
            x = block(x, skips.pop())
        return self.out(x)


def _patch(depth: int, height: int, width: int) -> tuple[int, ...]:
    return (height, width) if depth == 0 else (depth, height, width)


def build_nnunet(depth: int, height: int, width: int, in_channels: int, classes: int, upsample: str) -> nn.Module:
    """Build nnU-Net for a patch of ``depth x height x width`` voxels (``depth=0``: the 2D model)."""
    patch = _patch(depth, height, width)
    return NNUNet(len(patch), patch, in_channels, classes, upsample)


def volume_inputs(
    *, batch: int, dtype: torch.dtype, device: torch.device, depth: int, height: int, width: int, in_channels: int,
    **_: object,
) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """Random images (batch, in_channels, height, width), or volumes (batch, in_channels, depth, height, width)."""
    return (torch.randn(batch, in_channels, *_patch(depth, height, width), dtype=dtype, device=device),)


# Edges must halve evenly at every level (up to 2^5): the decoder adds the skip of the same size.
_EDGE = Bounds(ge=8, multiple_of=32)
register_segmentation = registrar("segmentation", volume_inputs)

register_segmentation(
    "nnunet",
    build_nnunet,
    {"depth": 0, "height": 192, "width": 160, "in_channels": 4, "classes": 4, "upsample": "tconv"},
    {
        "nnunet_2d_small": {"height": 64, "width": 64},
        "nnunet_2d": {},  # BraTS / MSD Task01 2D config: 192x160 slices
        # Task01 3D config: 128^3 patches (upsampling in the pointwise form: preflight's importer has no 3D tconv)
        "nnunet_3d": {"depth": 128, "height": 128, "width": 128, "upsample": "pointwise"},
    },
    "nnU-Net (MONAI DynUNet as NVIDIA DLE builds it); depth=0 is the 2D model",
    bounds={
        "depth": Bounds(multiple_of=32),
        "height": _EDGE,
        "width": _EDGE,
        "in_channels": Bounds(ge=1),
        "classes": Bounds(ge=1),
        "upsample": Bounds(choices=("tconv", "pointwise")),
    },
)
