"""The zoo families of NVIDIA DeepLearningExamples' published A100 tables: sizes against published or hand counts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from zoo import build
from zoo.segmentation import PointwiseUpsample


def _n_params(spec: str) -> int:
    return sum(p.numel() for p in build(spec, device="meta").module.parameters())


def test_nnunet_2d_small_param_count() -> None:
    # 64x64 patch: edges halve while >= 8: 64 -> 32 -> 16 -> 8 -> 4, so 5 levels, filters 32, 64, 128, 256, 512.
    # Basic block (cin, cout): 9 cin cout + 9 cout^2 + 4 cout (two affine InstanceNorms).
    #   (4, 32) 10,496; (32, 64) 55,552; (64, 128) 221,696; (128, 256) 885,760; (256, 512) 3,540,992
    #   encoder = 4,714,496
    # Up block (cin -> cout): tconv 4 cin cout + cout, then basic (2 cout, cout) = 27 cout^2 + 4 cout
    #   512->256 2,295,040; 256->128 574,080; 128->64 143,680; 64->32 36,000 = 3,048,800
    # Output 1x1: 32 * 4 + 4 = 132.  Total 4,714,496 + 3,048,800 + 132 = 7,763,428
    assert _n_params("nnunet_2d_small") == 7_763_428
    # the pointwise upsampling form holds the same parameters
    assert _n_params("nnunet_2d_small?upsample=pointwise") == 7_763_428


@pytest.mark.parametrize("dim", [2, 3])
def test_pointwise_upsample_equals_transposed_conv(dim: int) -> None:
    torch.manual_seed(0)
    tconv = (torch.nn.ConvTranspose3d if dim == 3 else torch.nn.ConvTranspose2d)(5, 7, 2, 2)
    point = PointwiseUpsample(dim, 5, 7)
    with torch.no_grad():  # W[c, o, i, j, (k)] -> 1x1 weight [o * 2^dim + (i, j, k), c]
        point.proj.weight.copy_(tconv.weight.reshape(5, -1).t().reshape(point.proj.weight.shape))
        point.bias.copy_(tconv.bias)
    x = torch.randn(2, 5, *([3, 4, 6] if dim == 3 else [3, 4]))
    torch.testing.assert_close(point(x), tconv(x))


def test_nnunet_levels_follow_the_patch() -> None:
    # 192x160: both edges halve 5 times (the --depth cap): 6 levels; 2D filters cap at 512, 3D at 320
    assert build("nnunet_2d", device="meta").module.filters == [32, 64, 128, 256, 512, 512]
    assert build("nnunet_3d", device="meta").module.filters == [32, 64, 128, 256, 320, 320]
    out = build("nnunet_3d?depth=32&height=32&width=32", batch=1, device="meta")
    assert out.module(*out.example_inputs).shape == (1, 4, 32, 32, 32)


def test_ssd300_resnet50_param_count() -> None:
    # ResNet-50 up to layer3: 25,557,032 (torchvision) - layer4 14,964,736 - fc 2,049,000 = 8,543,296
    #   layer4: block 1 (1024*512 + 512*512*9 + 512*2048 + 1024*2048 convs, BN 2*(512+512+2048+2048)) 6,039,552,
    #   blocks 2-3 2 * (2048*512 + 512*512*9 + 512*2048 + BN 2*(512+512+2048)) 8,925,184
    # extra blocks (1x1 conv + BN + 3x3 conv + BN): 1,443,328 + 1,312,256 + 361,216 + 328,448 + 328,448 = 3,773,696
    # heads, (9 c + 1) * defaults * (4 + 81) per map: 3,133,780 + 2 * 2,350,590 + 1,175,550 + 2 * 783,700 = 10,577,910
    assert _n_params("ssd300_resnet50") == 8_543_296 + 3_773_696 + 10_577_910  # 22,894,902
    out = build("ssd300_resnet18", batch=1, device="meta")
    # 38^2 * 4 + 19^2 * 6 + 10^2 * 6 + 5^2 * 6 + 3^2 * 4 + 1 * 4 = 8,732 default boxes
    assert out.module(*out.example_inputs).shape == (1, 85, 8732)


def test_dlrm_param_counts() -> None:
    # The 26 Criteo FL=15 tables (DLE's tests/feature_specs/criteo_f15.yaml, cat_0 .. cat_25) hold
    # 7912889 + 33823 + 17139 + 7339 + 20046 + 4 + 7105 + 1382 + 63 + 5554114 + 582469 + 245828 + 11 + 2209
    # + 10667 + 104 + 4 + 968 + 15 + 8165896 + 2675940 + 7156453 + 302516 + 12022 + 97 + 35 = 32,709,138 rows
    mlps = (13 * 512 + 512 + 512 * 256 + 256 + 256 * 128 + 128) + (  # bottom 171,392
        480 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 512 + 512 + 512 * 256 + 256 + 256 + 1  # top 2,198,529
    )
    assert _n_params("dlrm_criteo_1tb") == 32_709_138 * 128 + mlps
    # README: the FL=15 model is "15 GB": 4.19 G float32 parameters = 15.6 GiB
    assert 15 * 2**30 < _n_params("dlrm_criteo_1tb") * 4 < 16 * 2**30
    # capped at 1,000 rows: 17 tables are capped, the other 9 hold 4+63+11+104+4+968+15+97+35 = 1,301 rows
    assert _n_params("dlrm_tiny") == (17 * 1000 + 1301) * 128 + mlps
    # one joint table (the default, as DLE's joint_fused embedding runs) or one per table: the same parameters
    assert _n_params("dlrm_tiny?embedding=per_table") == (17 * 1000 + 1301) * 128 + mlps


def test_dlrm_joint_embedding_matches_per_table_lookups() -> None:
    """Oracle: the per-table model (26 nn.Embedding lookups) with the same weights; the joint table is the tables
    stacked, each feature's index shifted by the rows of the tables before it."""
    torch.manual_seed(0)
    per = build("dlrm_tiny?embedding=per_table", batch=4)
    joint = build("dlrm_tiny", batch=4).module.eval()
    state = {k: v for k, v in per.module.state_dict().items() if not k.startswith("embeddings.")}
    state["embedding.weight"] = torch.cat([e.weight for e in per.module.embeddings], dim=0)
    joint.load_state_dict(state)
    # dlrm_tiny: tables capped at 1,000 rows: the third feature's offset is 1000 + 1000 (cat_0, cat_1 capped)
    assert joint.offsets[:3].tolist() == [0, 1000, 2000] and joint.embedding.weight.shape == (18_301, 128)
    with torch.no_grad():
        torch.testing.assert_close(joint(*per.example_inputs), per.module.eval()(*per.example_inputs))


def test_tft_tiny_param_count() -> None:
    # hidden h = 32, 16 ids; GRN(cin, h, out, ctx): lin_a cin*h+h, lin_c h*h if ctx, lin_i h*h+h,
    # glu h*2*o+2*o (o = out or h), skip cin*o+o if out, LayerNorm 2*o unless o == 1.
    h = 32

    def grn(cin: int, out: int | None = None, ctx: bool = False) -> int:
        o = out or h
        return (
            cin * h + h + (h * h if ctx else 0) + h * h + h + h * 2 * o + 2 * o
            + ((cin * o + o) if out else 0) + (0 if o == 1 else 2 * o)
        )  # fmt: skip

    def vsn(n: int) -> int:
        return grn(h * n, out=n, ctx=True) + n * grn(h)

    lstm = 4 * (h * h + h * h + 2 * h)
    embeddings = 16 * h + 2 * 3 * h + 2 * 1 * h
    expected = (
        embeddings + vsn(1) + 4 * grn(h) + vsn(4) + lstm + vsn(3) + lstm
        + (h * 2 * h + 2 * h) + 2 * h  # input gate + LayerNorm
        + grn(h, ctx=True)  # enrichment
        + (h * (2 * 4 + 1) * (h // 4) + (h // 4) * h)  # attention: qkv (no bias), out (no bias)
        + (h * 2 * h + 2 * h) + 2 * h + grn(h) + (h * 2 * h + 2 * h) + 2 * h  # gate, LN, GRN, gate, LN
        + h * 3 + 3  # quantiles
    )  # fmt: skip
    assert _n_params("tft_tiny") == expected
    out = build("tft_electricity", batch=2, device="meta")
    assert out.module(*out.example_inputs).shape == (2, 24, 3)  # 24 horizon steps x 3 quantiles


def test_tft_static_selection_runs_once_per_forward() -> None:
    """NVIDIA's StaticCovariateEncoder runs its variable selection once and feeds the one result to the four
    context GRNs; the zoo did it four times (3 extra GRN pairs per forward). Forward hooks count the calls."""
    out = build("tft_tiny", batch=2, device="meta")
    calls = {"vsn": 0, "contexts": 0}
    out.module.static_vsn.register_forward_hook(lambda *_: calls.__setitem__("vsn", calls["vsn"] + 1))
    for m in out.module.contexts:
        m.register_forward_hook(lambda *_: calls.__setitem__("contexts", calls["contexts"] + 1))
    out.module(*out.example_inputs)
    assert calls == {"vsn": 1, "contexts": 4}


@pytest.mark.parametrize(
    ("spec", "published_m", "tolerance_m"),
    [
        # QuartzNet paper (Kriman et al. 2020), table 2, one decimal: +-0.05 M
        ("quartznet_5x5", 6.7, 0.05),
        ("quartznet_10x5", 12.8, 0.05),
        ("quartznet_15x5", 18.9, 0.05),
        # HiFi-GAN paper (Kong et al. 2020), table 1, two decimals: within 0.01 M (0.92 is 925,985 truncated)
        ("hifigan_v1", 13.92, 0.01),
        ("hifigan_v2", 0.92, 0.01),
        ("hifigan_v3", 1.46, 0.01),
        # wav2vec 2.0 paper (Baevski et al. 2020): BASE 95 M, LARGE 317 M, counted with the pre-training
        # quantizer and projections; the CTC model has a 32-symbol head instead: within 1%
        ("wav2vec2_base", 95.0, 0.95),
        ("wav2vec2_large", 317.0, 3.17),
    ],
)
def test_speech_param_counts_match_the_papers(spec: str, published_m: float, tolerance_m: float) -> None:
    n = _n_params(spec) / 1e6
    assert abs(n - published_m) <= tolerance_m, n


def test_speech_output_shapes() -> None:
    q = build("quartznet_15x5?seq_len=208", batch=1, device="meta")  # 2 s of audio: 201 frames padded to 208
    assert q.module(*q.example_inputs).shape == (1, 104, 29)  # stride 2 in C1
    g = build("hifigan_v1?seq_len=10", batch=1, device="meta")
    assert g.module(*g.example_inputs).shape == (1, 1, 2560)  # 8 * 8 * 2 * 2 = 256 samples per frame
    w = build("wav2vec2_base?seq_len=16000", batch=1, device="meta")
    # conv strides 5 * 2^6 = 320 samples per frame, receptive field 400: (16000 - 400) // 320 + 1 = 49 frames
    assert w.module(*w.example_inputs).shape == (1, 49, 32)


def test_fastpitch_param_count_and_output() -> None:
    # FFT layer (d 384, 1 head x 64, filter 1536, k3): qkv 384*192+192, out 64*384, conv 384*1536*3+1536,
    # conv 1536*384*3+384, two LayerNorms 2*768: 73,920 + 24,576 + 1,771,008 + 1,769,856 + 1,536 = 3,640,896
    # predictor (filter 256, k3): 384*256*3+256 + 256*256*3+256 + 2*512 + 257 = 493,313 (duration, pitch, energy)
    # symbols 148*384 = 56,832; pitch and energy conv embeddings 2 * (3*384+384) = 3,072; projection 384*80+80
    expected = 12 * 3_640_896 + 3 * 493_313 + 56_832 + 3_072 + 30_800  # 45,261,395
    assert _n_params("fastpitch_v1_1") == expected
    assert _n_params("fastpitch_v1_0") == expected - 493_313 - 1_536  # no energy predictor and embedding
    m = build("fastpitch_v1_1", batch=1, device="meta")
    assert m.module(*m.example_inputs).shape == (1, 80 * 128 * 5 + 128)  # mel (80 x 640 frames) + durations


def test_seq2seq_param_counts() -> None:
    # layers of width 1024, FFN 4096: encoder = attention 4 * (1024^2 + 1024) + FFN 1024*4096+4096 + 4096*1024+1024
    # + 2 LayerNorms 2 * 2048 = 12,596,224; decoder adds cross-attention and a LayerNorm: 16,796,672
    enc, dec = 12_596_224, 16_796_672
    # BART-large: shared embedding 50,265 x 1024, learned positions (1024 + 2 offset) x 1024 for encoder and
    # decoder, embedding LayerNorms 2 * 2048; 12 + 12 layers: 406,291,456 (Hugging Face's facebook/bart-large)
    assert _n_params("bart_large") == 50_265 * 1024 + 2 * 1026 * 1024 + 2 * 2048 + 12 * enc + 12 * dec
    # Transformer big: shared embedding 33,712 x 1024, 6 + 6 post-LN layers = 210,878,464 learned (Vaswani et al.
    # 2017: 213 M with a 37,000 vocabulary); Marian also holds the two sinusoidal tables (1024 x 1024) as weights
    assert _n_params("transformer_nmt_big") == 33_712 * 1024 + 6 * enc + 6 * dec + 2 * 1024 * 1024
    m = build("transformer_nmt_tiny?seq_len=16", batch=2)
    assert m.module(*m.example_inputs).shape == (2, 8, 1000)  # logits over the first tgt_len = 8 tokens


def test_gnmt_param_count() -> None:
    # LSTM(in, h): 4h (in + h) + 8h. h = 1024, shared embedding 32,320 x 1024 = 33,095,680
    # encoder: bidirectional 2 * 8,396,800 + LSTM(2048) 12,591,104 + 2 * LSTM(1024) 8,396,800 = 46,178,304
    # decoder: LSTM(1024) 8,396,800; attention Wq, Wk 2 * 1024^2, v, g, b 1024 + 1 + 1024 = 2,099,201;
    #   3 * LSTM(2048) 37,773,312; classifier 1024 * 32,320 + 32,320 = 33,128,000: 81,397,313
    assert _n_params("gnmt_v2") == 33_095_680 + 46_178_304 + 81_397_313  # 160,671,297
    m = build("gnmt_tiny?seq_len=16", batch=2)
    assert m.module(*m.example_inputs).shape == (2, 8, 1000)


def test_new_zoo_modules_import_no_tvm() -> None:
    code = (
        "import sys, zoo.segmentation, zoo.recommendation, zoo.forecasting, zoo.detection, zoo.speech, zoo.seq2seq\n"
        "import predictor.public_data\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tvm', 'passes', 'analyzer')]\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
