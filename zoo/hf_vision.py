"""Vision transformer families built from ``transformers`` configs with random weights.

Every model is the ``...ForImageClassification`` head and returns logits.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from zoo._common import image_inputs
from zoo._hf import hf_class, hf_module
from zoo.registry import Bounds, Expr, registrar

_PIXELS = ("pixel_values",)
_EAGER = Bounds(choices=("eager",))  # for models whose attention has no SDPA path in transformers


_vision = registrar("vision_transformer", image_inputs, _PIXELS, {"attn": Bounds(choices=("sdpa", "eager"))})

# ViT-like families: sizes >= 1, heads divide the hidden size, patches tile the image.
_VIT_BOUNDS = {
    "layers": Bounds(ge=1),
    "heads": Bounds(ge=1),
    "patch": Bounds(ge=1),
    "hidden": Bounds(multiple_of="heads"),
    "resolution": Bounds(multiple_of="patch"),
}


def _vit_params(patch: int) -> dict[str, object]:
    return {
        "layers": 12,
        "hidden": 768,
        "heads": 12,
        "mlp_ratio": 4,
        "patch": patch,
        "resolution": 224,
        "num_classes": 1000,
        "attn": "sdpa",
    }


_VIT_SIZES = {  # layers, hidden, heads
    "tiny": (12, 192, 3),
    "small": (12, 384, 6),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
    "huge": (32, 1280, 16),
}


def _sized(prefix: str, keys: tuple[str, ...], **extra: object) -> dict[str, dict]:
    return {
        f"{prefix}_{k}": {
            "layers": _VIT_SIZES[k][0],
            "hidden": _VIT_SIZES[k][1],
            "heads": _VIT_SIZES[k][2],
            **extra,
        }
        for k in keys
    }


def _vit_like(name: str, config_cls: str, model_cls: str, **extra: object) -> Callable[..., nn.Module]:
    def builder(
        layers: int,
        hidden: int,
        heads: int,
        mlp_ratio: int,
        patch: int,
        resolution: int,
        num_classes: int,
        attn: str,
    ) -> nn.Module:
        cfg = hf_class(config_cls)(
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=mlp_ratio * hidden,
            patch_size=patch,
            image_size=resolution,
            num_labels=num_classes,
            attn_implementation=attn,
            **extra,
        )
        return hf_module(model_cls, cfg, "pixel_values")

    builder.__doc__ = f"Build a {name} image classifier (layers, hidden, heads, ...)."
    return builder


_vision(
    "vit",
    _vit_like("vit", "ViTConfig", "ViTForImageClassification"),
    _vit_params(16),
    {
        **_sized("vit", ("tiny", "small", "base", "large", "huge")),
        "vit_base_32": {"patch": 32},
        "vit_base_384": {"resolution": 384},
    },
    "ViT (An Image is Worth 16x16 Words), CLS-token classifier",
    bounds=_VIT_BOUNDS,
)

_vision(
    "deit",
    _vit_like("deit", "DeiTConfig", "DeiTForImageClassification"),
    _vit_params(16),
    _sized("deit", ("tiny", "small", "base")),
    "DeiT: ViT with an extra distillation token",
    bounds=_VIT_BOUNDS,
)

_vision(
    "beit",
    _vit_like(
        "beit",
        "BeitConfig",
        "BeitForImageClassification",
        use_relative_position_bias=True,
        use_mean_pooling=True,
        layer_scale_init_value=0.1,
    ),
    _vit_params(16),
    _sized("beit", ("small", "base", "large")),
    "BEiT: ViT with relative position bias, layer scale and mean pooling",
    bounds=_VIT_BOUNDS,
)

_vision(
    "dinov2",
    _vit_like("dinov2", "Dinov2Config", "Dinov2ForImageClassification"),
    _vit_params(14),
    _sized("dinov2", ("small", "base", "large")),
    "DINOv2-style ViT (patch 14, layer scale, interpolated positions)",
    bounds=_VIT_BOUNDS,
)

# --------------------------------------------------------------------------- Swin


def build_swin(
    embed_dim: int,
    depth3: int,
    heads0: int,
    window: int,
    patch: int,
    resolution: int,
    num_classes: int,
    attn: str,
) -> nn.Module:
    """Build a Swin transformer classifier.

    Args:
        embed_dim: Channels of the first stage (doubled each stage).
        depth3: Blocks in the third stage (others: 2, 2, -, 2).
        heads0: Heads of the first stage (doubled each stage).
        window: Attention window size.
        patch: Patch size.
        resolution: Input resolution (multiple of ``patch * 8``).
        num_classes: Number of classes.
        attn: Attention implementation.

    Returns:
        The wrapped model.
    """
    cfg = hf_class("SwinConfig")(
        image_size=resolution,
        patch_size=patch,
        embed_dim=embed_dim,
        depths=[2, 2, depth3, 2],
        num_heads=[heads0, 2 * heads0, 4 * heads0, 8 * heads0],
        window_size=window,
        num_labels=num_classes,
        attn_implementation=attn,
    )
    return hf_module("SwinForImageClassification", cfg, "pixel_values")


_vision(
    "swin",
    build_swin,
    {
        "embed_dim": 96,
        "depth3": 6,
        "heads0": 3,
        "window": 7,
        "patch": 4,
        "resolution": 224,
        "num_classes": 1000,
        "attn": "sdpa",
    },
    {
        "swin_tiny": {},
        "swin_small": {"depth3": 18},
        "swin_base": {"embed_dim": 128, "depth3": 18, "heads0": 4},
        "swin_base_384": {"embed_dim": 128, "depth3": 18, "heads0": 4, "window": 12, "resolution": 384},
    },
    "Swin transformer: shifted-window attention, patch merging",
    # Four stages downsample by patch x 8 in all; the last stage must be at least one window wide.
    bounds={
        "embed_dim": Bounds(multiple_of="heads0"),
        "resolution": Bounds(
            ge=Expr("8 * patch * window", lambda p: 8 * p["patch"] * p["window"]),
            multiple_of=Expr("8 * patch", lambda p: 8 * p["patch"]),
        ),
    },
)

# --------------------------------------------------------------------------- MobileViT

_MOBILEVIT = {  # hidden sizes, neck sizes, expand ratio
    "xxs": ([64, 80, 96], [16, 16, 24, 48, 64, 80, 320], 2.0),
    "xs": ([96, 120, 144], [16, 32, 48, 64, 80, 96, 384], 4.0),
    "s": ([144, 192, 240], [16, 32, 64, 96, 128, 160, 640], 4.0),
}


def build_mobilevit(size: str, resolution: int, num_classes: int, attn: str) -> nn.Module:
    """Build a MobileViT classifier.

    Args:
        size: ``"xxs"``, ``"xs"`` or ``"s"``.
        resolution: Input resolution (multiple of 32).
        num_classes: Number of classes.
        attn: Attention implementation (MobileViT only supports ``"eager"``).

    Returns:
        The wrapped model.
    """
    hidden, neck, expand = _MOBILEVIT[size]
    cfg = hf_class("MobileViTConfig")(
        image_size=resolution,
        hidden_sizes=hidden,
        neck_hidden_sizes=neck,
        expand_ratio=expand,
        num_labels=num_classes,
        attn_implementation=attn,
    )
    return hf_module("MobileViTForImageClassification", cfg, "pixel_values")


_vision(
    "mobilevit",
    build_mobilevit,
    {"size": "s", "resolution": 256, "num_classes": 1000, "attn": "eager"},
    {f"mobilevit_{k}": {"size": k} for k in _MOBILEVIT},
    "MobileViT: MobileNetV2 blocks interleaved with unfolded transformers",
    bounds={"size": Bounds(choices=tuple(_MOBILEVIT)), "attn": _EAGER, "resolution": Bounds(multiple_of=32)},
)

# --------------------------------------------------------------------------- LeViT

_LEVIT = {  # hidden sizes, heads, depths, key dim
    "128s": ([128, 256, 384], [4, 6, 8], [2, 3, 4], [16, 16, 16]),
    "128": ([128, 256, 384], [4, 8, 12], [4, 4, 4], [16, 16, 16]),
    "192": ([192, 288, 384], [3, 5, 6], [4, 4, 4], [32, 32, 32]),
    "256": ([256, 384, 512], [4, 6, 8], [4, 4, 4], [32, 32, 32]),
}


def build_levit(size: str, resolution: int, num_classes: int, attn: str) -> nn.Module:
    """Build a LeViT classifier (without the distillation head).

    Args:
        size: ``"128s"``, ``"128"``, ``"192"`` or ``"256"``.
        resolution: Input resolution (multiple of 16; attention biases are sized for it).
        num_classes: Number of classes.
        attn: Attention implementation (LeViT only supports ``"eager"``).

    Returns:
        The wrapped model.
    """
    hidden, heads, depths, key_dim = _LEVIT[size]
    cfg = hf_class("LevitConfig")(
        image_size=resolution,
        hidden_sizes=hidden,
        num_attention_heads=heads,
        depths=depths,
        key_dim=key_dim,
        num_labels=num_classes,
        attn_implementation=attn,
    )
    return hf_module("LevitForImageClassification", cfg, "pixel_values")


_vision(
    "levit",
    build_levit,
    {"size": "128s", "resolution": 224, "num_classes": 1000, "attn": "eager"},
    {f"levit_{k}": {"size": k} for k in _LEVIT},
    "LeViT: conv stem + attention with learned biases, hard-swish",
    bounds={"size": Bounds(choices=tuple(_LEVIT)), "attn": _EAGER, "resolution": Bounds(multiple_of=16)},
)

# --------------------------------------------------------------------------- PoolFormer

_POOLFORMER = {  # depths, hidden sizes, layer scale init
    "s12": ([2, 2, 6, 2], [64, 128, 320, 512], 1e-5),
    "s24": ([4, 4, 12, 4], [64, 128, 320, 512], 1e-5),
    "s36": ([6, 6, 18, 6], [64, 128, 320, 512], 1e-6),
    "m36": ([6, 6, 18, 6], [96, 192, 384, 768], 1e-6),
}


def build_poolformer(size: str, resolution: int, num_classes: int) -> nn.Module:
    """Build a PoolFormer (MetaFormer with average-pool token mixing) classifier.

    Args:
        size: ``"s12"``, ``"s24"``, ``"s36"`` or ``"m36"``.
        resolution: Input resolution (multiple of 32).
        num_classes: Number of classes.

    Returns:
        The wrapped model.
    """
    depths, hidden, scale = _POOLFORMER[size]
    cfg = hf_class("PoolFormerConfig")(
        image_size=resolution,
        depths=depths,
        hidden_sizes=hidden,
        layer_scale_init_value=scale,
        num_labels=num_classes,
    )
    return hf_module("PoolFormerForImageClassification", cfg, "pixel_values")


_vision(
    "poolformer",
    build_poolformer,
    {"size": "s12", "resolution": 224, "num_classes": 1000},
    {f"poolformer_{k}": {"size": k} for k in _POOLFORMER},
    "PoolFormer: MetaFormer blocks with pooling as the token mixer",
    bounds={"size": Bounds(choices=tuple(_POOLFORMER)), "resolution": Bounds(multiple_of=32)},
)
