"""Tests for the ``zoo`` model zoo (CPU only, random weights, offline)."""

from __future__ import annotations

import os
import re

import pytest
import torch

from zoo import FAMILIES, Bounds, Family, ZooError, ZooModel, build, list_families, register, resolve

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ISSUE_CRITICAL = (
    "resnet18",
    "resnet50",
    "mobilenet_v2",
    "efficientnet_b0",
    "convnext_tiny",
    "vit_base",
    "swin_tiny",
    "bert_base",
    "gpt2",
    "llama_small",
    "llama_7b",
)

# torchvision's published parameter counts (1000 classes).
TORCHVISION_PARAMS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "mobilenet_v2": 3_504_872,
    "efficientnet_b0": 5_288_548,
    "convnext_tiny": 28_589_128,
}

# Per-family overrides that keep the smoke test small; everything else uses generic
# ``resolution`` / ``seq_len`` reductions.
SMOKE_OVERRIDES: dict[str, dict[str, object]] = {
    "dinov2": {"resolution": 56},
    "swin": {"resolution": 128, "window": 4},
    "levit": {"resolution": 64},
    "ssd300": {"resolution": 264},  # the unpadded extra blocks need >= 257
    "wav2vec2": {"seq_len": 4000},  # the feature extractor needs >= 400 samples
}


def _n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _smoke_spec(family: Family) -> str:
    name = next(iter(family.variants))
    overrides: dict[str, object] = {}
    if "resolution" in family.params:
        overrides["resolution"] = 64
    if "seq_len" in family.params:
        overrides["seq_len"] = 16
    overrides.update(SMOKE_OVERRIDES.get(family.name, {}))
    return name + "?" + "&".join(f"{k}={v}" for k, v in overrides.items())


def test_registry_breadth() -> None:
    families = list_families()
    assert len(families) >= 30
    assert [f.name for f in families] == sorted(FAMILIES)
    for fam in families:
        assert len(fam.variants) >= 3, fam.name
        assert fam.kind in {
            "cnn", "vision_transformer", "language", "sequence", "nas",
            "segmentation", "detection", "recommendation", "forecasting", "speech",
        }  # fmt: skip
        assert fam.description


@pytest.mark.parametrize("name", ISSUE_CRITICAL)
def test_issue_critical_names_resolve(name: str) -> None:
    family, params = resolve(name)
    assert set(params) == set(family.params)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_variant_builds_on_meta(family: str) -> None:
    fam = FAMILIES[family]
    counts = {}
    for variant in fam.variants:
        model = build(variant, batch=2, device="meta")
        assert all(p.is_meta for p in model.module.parameters())
        assert all(t.shape[0] == 2 for t in model.example_inputs)
        counts[variant] = _n_params(model.module)
    # The first listed variant is the family's smallest one (used by the smoke test).
    assert counts[next(iter(fam.variants))] == min(counts.values()), counts


@pytest.mark.filterwarnings("ignore:The tensor attributes:UserWarning")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_smallest_variant_forward_and_export(family: str) -> None:
    spec = _smoke_spec(FAMILIES[family])
    model = build(spec, batch=2)
    assert isinstance(model, ZooModel)
    assert not model.module.training
    assert model.family == family
    assert len(model.input_names) == len(model.example_inputs)
    with torch.no_grad():
        out = model.module(*model.example_inputs)
    assert isinstance(out, torch.Tensor) and out.shape[0] == 2
    assert torch.isfinite(out).all()
    exported = torch.export.export(model.module, model.example_inputs)
    replay = exported.module()(*model.example_inputs)
    torch.testing.assert_close(replay, out, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("name", "expected"), sorted(TORCHVISION_PARAMS.items()))
def test_cnn_param_counts_match_torchvision(name: str, expected: int) -> None:
    assert _n_params(build(name, device="meta").module) == expected


def test_other_param_counts() -> None:
    # Hugging Face reference sizes of the random-weight configs.
    assert _n_params(build("vit_base", device="meta").module) == 86_567_656
    assert _n_params(build("swin_tiny", device="meta").module) == 28_288_354
    assert _n_params(build("bert_base", device="meta").module) == 109_482_240
    assert _n_params(build("gpt2", device="meta").module) == 124_439_808


# Published parameter counts: torchvision's model table ("Params", pytorch.org/vision/stable/models.html) for the
# CNNs; the Hugging Face checkpoints' counts for the transformers (the zoo builds the same config with random
# weights). Together with TORCHVISION_PARAMS, test_other_param_counts and test_llama_7b_on_meta_is_fast_and_free,
# every family but the few in FLOPS_ONLY has one (tests/test_zoo_analysis.py checks every family's MACs).
PUBLISHED_PARAMS = {
    "alexnet": 61_100_840,
    "vgg11": 132_863_336,
    "vgg13": 133_047_848,
    "vgg16_bn": 138_365_992,
    "vgg19": 143_667_240,
    "densenet121": 7_978_856,
    "densenet169": 14_149_480,
    "googlenet": 6_624_904,  # without the auxiliary classifiers (eval)
    "squeezenet1_0": 1_248_424,
    "squeezenet1_1": 1_235_496,
    "shufflenet_v2_x0_5": 1_366_792,
    "shufflenet_v2_x1_0": 2_278_604,
    "mnasnet0_5": 2_218_512,
    "mnasnet1_0": 4_383_312,
    "mobilenet_v3_small": 2_542_856,
    "mobilenet_v3_large": 5_483_032,
    "regnet_y_400mf": 4_344_144,
    "regnet_x_400mf": 5_495_976,  # the stage widths round halves up: 392 -> 400 channels (24.5 groups of 16)
    "regnet_y_800mf": 6_432_512,  # 136 -> 144 and 776 -> 784 the same way
    "regnet_y_1_6gf": 11_202_430,
    "resnext50_32x4d": 25_028_904,
    "resnext101_32x8d": 88_791_336,
    "wide_resnet50_2": 68_883_240,
    "resnet34": 21_797_672,
    "efficientnet_b1": 7_794_184,
    "convnext_small": 50_223_688,
    "swin_small": 49_606_258,
    "vit_large": 304_326_632,  # torchvision vit_l_16
    "bert_large": 335_141_888,  # bert-large-uncased, with the pooler
    "distilbert_base": 66_362_880,  # distilbert-base-uncased
    "roberta_base": 124_645_632,  # roberta-base: one token type
    "roberta_large": 355_359_744,
    "opt_125m": 125_239_296,  # facebook/opt-125m
    "t5_encoder_small": 35_330_816,  # T5EncoderModel of t5-small
    "mistral_7b": 7_241_732_096,  # mistralai/Mistral-7B-v0.1
    "beit_base": 86_530_984,  # microsoft/beit-base-patch16-224
    "mobilevit_xxs": 1_272_024,  # apple/mobilevit-xx-small
    "mobilevit_s": 5_578_632,  # apple/mobilevit-small
    "poolformer_s12": 11_915_176,  # sail/poolformer_s12
}

# Worked out by hand from a published count or from the layer shapes.
DERIVED_PARAMS = {
    # HF DeiT keeps a distillation token and its position: vit_base (86,567,656, test_other_param_counts) + 2 x 768
    "deit_base": 86_567_656 + 2 * 768,
    # facebook/dinov2-small (22,056,576) has 37 x 37 + 1 = 1,370 positions (518 px); at 224 px 16 x 16 + 1 = 257;
    # the classifier reads [CLS] and the mean patch token: 2 x 384 -> 1000
    "dinov2_small": 22_056_576 - (1370 - 257) * 384 + (2 * 384 * 1000 + 1000),
    # torch.nn.LSTM, input 128, hidden 128, one layer: 4 gates x (128 x 128 + 128 x 128 + 2 biases of 128),
    # then the per-step classifier 128 -> 32
    "lstm_small": 4 * (128 * 128 + 128 * 128 + 2 * 128) + 128 * 32 + 32,
    # GRU: 3 gates, otherwise the same
    "gru_small": 3 * (128 * 128 + 128 * 128 + 2 * 128) + 128 * 32 + 32,
}

# families without a published count: their own configurations (every family's MACs are checked against
# FlopCounterMode in tests/test_zoo_analysis.py)
FLOPS_ONLY = {"levit", "randwire"}


@pytest.mark.parametrize(("name", "expected"), sorted((PUBLISHED_PARAMS | DERIVED_PARAMS).items()))
def test_published_and_derived_param_counts(name: str, expected: int) -> None:
    assert _n_params(build(name, device="meta").module) == expected


# the families of NVIDIA's published A100 tables: their parameter counts are checked by hand or against the papers
# in tests/test_zoo_dle.py (one test per family)
DLE_PARAM_TESTS = {"nnunet", "ssd300", "dlrm", "tft", "quartznet", "hifigan", "wav2vec2", "fastpitch", "bart"}
DLE_PARAM_TESTS |= {"transformer_nmt", "gnmt"}


def test_every_family_has_a_param_oracle() -> None:
    named = {*TORCHVISION_PARAMS, *PUBLISHED_PARAMS, *DERIVED_PARAMS, "vit_base", "swin_tiny", "bert_base", "gpt2"}
    named |= {"llama_7b"}
    covered = {resolve(n)[0].name for n in named} | DLE_PARAM_TESTS
    assert covered | FLOPS_ONLY == set(FAMILIES), set(FAMILIES) - covered - FLOPS_ONLY


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def test_llama_7b_on_meta_is_free() -> None:
    build("llama_small?seq_len=8", device="meta")  # warm up imports
    rss_before = _rss_bytes()
    model = build("llama_7b", device="meta", dtype=torch.float16)
    rss_after = _rss_bytes()
    assert _n_params(model.module) == 6_738_415_616
    assert all(p.is_meta and p.dtype == torch.float16 for p in model.module.parameters())
    assert all(t.is_meta for t in model.example_inputs)
    assert model.params["hidden"] == 4096 and model.params["layers"] == 32
    if rss_before is not None and rss_after is not None:
        assert rss_after - rss_before < 256 * 2**20


def test_resolve_defaults_variants_and_overrides() -> None:
    fam, params = resolve("resnet")
    assert fam.name == "resnet" and params == fam.params
    _, params = resolve("resnet18")
    assert params["depth"] == 18
    _, params = resolve("resnet?depth=34&width=32")
    assert params["depth"] == 34 and params["width"] == 32
    _, params = resolve("mobilenet_v2?width=0.75")
    assert params["width"] == 0.75
    _, params = resolve("lstm_small?bidirectional=true")
    assert params["bidirectional"] is True
    assert build("resnet18?resolution=32", device="meta").name == "resnet18?resolution=32"
    assert build("resnet50", device="meta").name == "resnet50"


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("resnet19", "resnet18"),
        ("no_such_model", "valid"),
        ("resnet18?depht=50", "depth"),
        ("resnet18?depth=abc", "expected int"),
        ("resnet18?depth=19", "choices"),
        ("resnet18?width=-4", ">= 0"),
        ("mobilenet_v2?width=wide", "expected float"),
        ("vit_base?attn=flash", "choices"),
        ("resnet18?depth", "key=value"),
        ("", "empty"),
    ],
)
def test_resolve_errors(spec: str, fragment: str) -> None:
    with pytest.raises(ZooError) as info:
        resolve(spec)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("spec", "bound"),
    [
        ("resnet18?resolution=31", "'resolution' (must be >= 32)"),  # the CNN kind's bound
        ("alexnet?resolution=62", "'resolution' (must be >= 63)"),  # a family's own bound replaces the kind's
        ("vgg11?width=0", "'width' (must be > 0)"),
        ("regnet_y_400mf?wm=1", "'wm' (must be > 1)"),
        ("randwire_small?p=1.5", "'p' (must be <= 1.0)"),
        ("randwire_small?m=8", "'m' (must be < nodes = 8)"),  # randwire_small has nodes = 8
        ("gpt2?seq_len=1025", "'seq_len' (must be <= max_pos = 1024)"),
        ("roberta_base?seq_len=513", "'seq_len' (must be <= max_pos - 2 = 512)"),  # 514 - 2
        ("swin_tiny?resolution=128", "'resolution' (must be >= 8 * patch * window = 224)"),  # 8 * 4 * 7
        ("swin_tiny?resolution=100", "'resolution' (must be a multiple of 8 * patch = 32)"),  # 8 * 4
        ("randwire_small?resolution=8", "'resolution' (must be >= 2 ** (stages + 1) = 16)"),  # stages = 3
        ("levit_128s?resolution=100", "'resolution' (must be a multiple of 16)"),
        ("bert_base?hidden=100", "'hidden' (must be a multiple of heads = 12)"),
        ("llama_small?kv_heads=3", "'heads' (must be a multiple of kv_heads = 3)"),  # llama_small has 8 heads
        ("shufflenet_v2_x1_0?width=0.75", "'width' (choices: 0.5, 1.0, 1.5, 2.0)"),
        ("t5_encoder_small?attn=sdpa", "'attn' (choices: 'eager')"),  # a family's choices replace the kind's
        # Relations are checked only between values that are valid on their own (no division by zero).
        ("llama_small?heads=0&kv_heads=0", "'heads' (must be >= 1)"),
        ("swin_tiny?patch=0", "'resolution' (must be a multiple of 8 * patch = 0)"),
    ],
)
def test_declared_bounds_are_checked_when_resolving(spec: str, bound: str) -> None:
    with pytest.raises(ZooError, match=re.escape(bound)):
        resolve(spec)


@pytest.mark.parametrize(
    "spec",
    [
        "gpt2?seq_len=1024",
        "roberta_base?seq_len=512",
        "randwire_small?resolution=16&m=7",
        "swin_tiny?resolution=128&window=4",  # 8 * 4 * 4 = 128
        "resnet18?resolution=32",
        "regnet_y_400mf?w0=8",
    ],
)
def test_values_on_a_bound_are_valid(spec: str) -> None:
    resolve(spec)


def test_register_checks_the_declared_bounds() -> None:
    def family(**bounds: Bounds) -> Family:
        return Family(
            "bounds_probe", "cnn", {"width": 8, "resolution": 32}, {"bounds_probe_wide": {"width": 64}},
            lambda **_: torch.nn.Identity(), lambda **_: (), "probe", bounds=bounds,
        )  # fmt: skip

    with pytest.raises(ZooError, match=re.escape("bounds of 'width' name unknown params ['depth']")):
        register(family(width=Bounds(le="depth")))
    with pytest.raises(ZooError, match=re.escape("bad value 64 for 'width' (must be <= 32)")):  # the variant
        register(family(width=Bounds(le=32)))
    assert "bounds_probe" not in FAMILIES


def test_builder_validation_raises_zoo_error() -> None:
    with pytest.raises(ZooError):
        build("vit_tiny?resolution=100", device="meta")
    with pytest.raises(ZooError):
        build("llama_small?kv_heads=3", device="meta")
    with pytest.raises(ZooError):
        build("resnet18", batch=0, device="meta")


def test_determinism_dtype_and_batch() -> None:
    a = build("randwire_small?seed=3&nodes=6&resolution=32", batch=3)
    b = build("randwire_small?seed=3&nodes=6&resolution=32", batch=3)
    for pa, pb in zip(a.module.state_dict().values(), b.module.state_dict().values(), strict=True):
        assert torch.equal(pa, pb)
    for ia, ib in zip(a.example_inputs, b.example_inputs, strict=True):
        assert torch.equal(ia, ib)
    assert a.example_inputs[0].shape == (3, 3, 32, 32)
    c = build("randwire_small?seed=4&nodes=6&resolution=32")
    assert repr(c.module) != repr(a.module) or _n_params(c.module) != _n_params(a.module)
    half = build("resnet18?resolution=32", dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in half.module.parameters())
    assert half.example_inputs[0].dtype == torch.bfloat16
    tokens = build("gpt2_tiny?seq_len=7", batch=2, dtype=torch.float16, device="meta")
    assert tokens.example_inputs[0].dtype == torch.int64
    assert tokens.example_inputs[0].shape == (2, 7)
    assert tokens.input_names == ("input_ids",)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ISSUE_CRITICAL if n != "llama_7b"])
def test_issue_critical_full_size_export(name: str) -> None:
    model = build(name)
    exported = torch.export.export(model.module, model.example_inputs)
    assert len(exported.graph_signature.user_inputs) == len(model.input_names)
