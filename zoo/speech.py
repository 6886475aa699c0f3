"""Speech families of NVIDIA DeepLearningExamples: QuartzNet, HiFi-GAN, wav2vec 2.0 (CTC) and FastPitch.

- QuartzNet (PyTorch/SpeechRecognition/QuartzNet, ``quartznet/model.py`` and its configs): 64 mel features per
  10 ms frame; C1 (separable conv k33, stride 2, 256 ch); 5 block types B1..B5 (256 ch k33, 256 k39, 512 k51,
  512 k63, 512 k75), each repeated ``repeats`` times (QuartzNet RxS: R = 5 x ``repeats`` blocks), every block 5
  sub-blocks of depthwise conv + pointwise conv + BatchNorm (eps 1e-3) + ReLU, with a pointwise-conv + BN
  residual added before the last ReLU; C2 (separable k87 dilation 2, 512), C3 (1x1, 1024), and a 1x1 decoder to
  29 symbols (28 labels and the CTC blank), log-softmax. The conv masks for variable lengths are left out
  (batches padded to one duration, as the benchmark pads them).
- HiFi-GAN generator (PyTorch/SpeechSynthesis/HiFiGAN, ``hifigan/models.py``), weight norm removed as for
  inference: 80 mel channels, conv k7 to 512, upsampling transposed convs (rates 8, 8, 2, 2; kernels 16, 16, 4, 4;
  channels halving), after each a mean of three multi-receptive-field resblocks (kernels 11, 7, 3; dilations 1, 3,
  5), conv k7 to 1 channel, tanh: one audio sample per 256 / hop of mel frames. Configs v1, v2, v3 of the paper.
- wav2vec 2.0 (PyTorch/SpeechRecognition/wav2vec2, fairseq-derived): ``transformers`` Wav2Vec2ForCTC of the base
  (12 layers, 768, post-LN, group-norm feature extractor) or large (24 layers, 1024, pre-LN, layer-norm
  extractor) configuration, random weights, raw 16 kHz audio in, CTC logits over 32 symbols out.
- FastPitch (PyTorch/SpeechSynthesis/FastPitch, ``fastpitch/model.py`` ``infer`` and ``arg_parser.py``
  defaults): the mel generator's inference forward with a fixed duration expansion (see :class:`FastPitch`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from zoo._hf import hf_class, hf_module
from zoo.registry import Bounds, registrar

# --------------------------------------------------------------------------- QuartzNet

MEL = 64
SYMBOLS = 29
# (channels, kernel) of block types B1..B5
_BLOCKS = ((256, 33), (256, 39), (512, 51), (512, 63), (512, 75))


def _separable(cin: int, cout: int, kernel: int, stride: int = 1, dilation: int = 1) -> list[nn.Module]:
    pad = dilation * (kernel - 1) // 2
    return [
        nn.Conv1d(cin, cin, kernel, stride, pad, dilation, groups=cin, bias=False),
        nn.Conv1d(cin, cout, 1, bias=False),
        nn.BatchNorm1d(cout, eps=1e-3),
    ]


class _JasperBlock(nn.Module):
    """``subs`` separable sub-blocks; the residual (1x1 conv + BN) joins before the last ReLU."""

    def __init__(self, cin: int, cout: int, kernel: int, subs: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(subs):
            layers += _separable(cin if i == 0 else cout, cout, kernel)
            if i < subs - 1:
                layers.append(nn.ReLU())
        self.body = nn.Sequential(*layers)
        self.residual = nn.Sequential(nn.Conv1d(cin, cout, 1, bias=False), nn.BatchNorm1d(cout, eps=1e-3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.residual(x))


class QuartzNet(nn.Module):
    """QuartzNet (5 x ``repeats``)x``subs``: mel features (B, 64, frames) -> log-probs (B, ceil(frames / 2), 29)."""

    def __init__(self, repeats: int, subs: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [*_separable(MEL, 256, 33, stride=2), nn.ReLU()]
        cin = 256
        for cout, kernel in _BLOCKS:
            for _ in range(repeats):
                layers.append(_JasperBlock(cin, cout, kernel, subs))
                cin = cout
        layers += [*_separable(512, 512, 87, dilation=2), nn.ReLU()]
        layers += [nn.Conv1d(512, 1024, 1, bias=False), nn.BatchNorm1d(1024, eps=1e-3), nn.ReLU()]
        self.encoder = nn.Sequential(*layers)
        self.decoder = nn.Conv1d(1024, SYMBOLS, 1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.decoder(self.encoder(x)).transpose(1, 2), dim=-1)


def build_quartznet(repeats: int, subs: int, seq_len: int) -> nn.Module:
    """Build QuartzNet (5 x ``repeats``)x``subs`` (``seq_len`` mel frames, only validated)."""
    return QuartzNet(repeats, subs)


def mel_inputs(
    *, batch: int, dtype: torch.dtype, device: torch.device, seq_len: int, mels: int = MEL, **_: object
) -> tuple[torch.Tensor, ...]:
    """Random log-mel features (batch, mels, seq_len frames)."""
    return (torch.randn(batch, mels, seq_len, dtype=dtype, device=device),)


_speech = registrar("speech", mel_inputs, ("features",))

_speech(
    "quartznet",
    build_quartznet,
    {"repeats": 3, "subs": 5, "seq_len": 1680},  # 16.7 s: 1,671 frames padded to a multiple of 16
    {
        "quartznet_5x5": {"repeats": 1},
        "quartznet_10x5": {"repeats": 2},
        "quartznet_15x5": {},
    },
    "QuartzNet ASR (NVIDIA DLE): separable 1D conv blocks, CTC over 29 symbols",
    bounds={"repeats": Bounds(ge=1), "subs": Bounds(ge=1), "seq_len": Bounds(ge=1)},
)

# --------------------------------------------------------------------------- HiFi-GAN

# config -> (initial channels, upsample rates, upsample kernels, resblock type, resblock kernels, dilations)
HIFIGAN_CONFIGS = {
    "v1": (512, (8, 8, 2, 2), (16, 16, 4, 4), 1, (11, 7, 3), ((1, 3, 5),) * 3),
    "v2": (128, (8, 8, 2, 2), (16, 16, 4, 4), 1, (11, 7, 3), ((1, 3, 5),) * 3),
    "v3": (256, (8, 8, 4), (16, 16, 8), 2, (3, 5, 7), ((1, 2), (2, 6), (3, 12))),
}
SLOPE = 0.1


class _ResBlock(nn.Module):
    """Type 1: per dilation, (lrelu, dilated conv, lrelu, conv) + x. Type 2: per dilation, (lrelu, conv) + x."""

    def __init__(self, kind: int, ch: int, kernel: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.first = nn.ModuleList(nn.Conv1d(ch, ch, kernel, 1, d * (kernel - 1) // 2, d) for d in dilations)
        second = [nn.Conv1d(ch, ch, kernel, 1, (kernel - 1) // 2) for _ in dilations] if kind == 1 else []
        self.second = nn.ModuleList(second)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.first):
            y = conv(F.leaky_relu(x, SLOPE))
            if self.second:
                y = self.second[i](F.leaky_relu(y, SLOPE))
            x = x + y
        return x


class HiFiGAN(nn.Module):
    """HiFi-GAN generator: mel (B, 80, frames) -> audio (B, 1, frames x prod(rates)).

    Args:
        config: ``"v1"``, ``"v2"`` or ``"v3"`` (see ``HIFIGAN_CONFIGS``).
    """

    def __init__(self, config: str) -> None:
        super().__init__()
        ch0, rates, kernels, kind, rb_kernels, dilations = HIFIGAN_CONFIGS[config]
        self.pre = nn.Conv1d(80, ch0, 7, 1, 3)
        self.ups = nn.ModuleList(
            nn.ConvTranspose1d(ch0 // 2**i, ch0 // 2 ** (i + 1), k, u, (k - u) // 2)
            for i, (u, k) in enumerate(zip(rates, kernels, strict=True))
        )
        self.blocks = nn.ModuleList(
            nn.ModuleList(
                _ResBlock(kind, ch0 // 2 ** (i + 1), k, d) for k, d in zip(rb_kernels, dilations, strict=True)
            )
            for i in range(len(rates))
        )
        self.post = nn.Conv1d(ch0 // 2 ** len(rates), 1, 7, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        for up, group in zip(self.ups, self.blocks, strict=True):
            x = up(F.leaky_relu(x, SLOPE))
            x = sum(block(x) for block in group) / len(group)
        return torch.tanh(self.post(F.leaky_relu(x)))


def build_hifigan(config: str, seq_len: int, mels: int) -> nn.Module:
    """Build the HiFi-GAN generator of ``config`` (``seq_len`` mel frames, only validated)."""
    return HiFiGAN(config)


_speech(
    "hifigan",
    build_hifigan,
    {"config": "v1", "seq_len": 256, "mels": 80},
    {"hifigan_v2": {"config": "v2"}, "hifigan_v3": {"config": "v3"}, "hifigan_v1": {}},
    "HiFi-GAN generator (NVIDIA DLE vocoder, weight norm removed), mel frames -> 22.05 kHz audio",
    bounds={"config": Bounds(choices=tuple(HIFIGAN_CONFIGS)), "seq_len": Bounds(ge=1), "mels": Bounds(choices=(80,))},
)

# --------------------------------------------------------------------------- wav2vec 2.0


def build_wav2vec2(layers: int, hidden: int, heads: int, intermediate: int, large: bool, seq_len: int) -> nn.Module:
    """Build ``transformers`` Wav2Vec2ForCTC (32 CTC symbols) with random weights; input (B, samples) at 16 kHz."""
    config = hf_class("Wav2Vec2Config")(
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        vocab_size=32,
        feat_extract_norm="layer" if large else "group",
        do_stable_layer_norm=large,
        mask_time_prob=0.0,  # inference: no SpecAugment (and no masked_spec_embed parameter)
        attn_implementation="sdpa",
    )
    return hf_module("Wav2Vec2ForCTC", config, "input_values")


def audio_inputs(*, batch: int, dtype: torch.dtype, device: torch.device, seq_len: int, **_: object) -> tuple:
    """Random 16 kHz audio (batch, seq_len samples)."""
    return (torch.randn(batch, seq_len, dtype=dtype, device=device),)


registrar("speech", audio_inputs, ("input_values",))(
    "wav2vec2",
    build_wav2vec2,
    {"layers": 12, "hidden": 768, "heads": 12, "intermediate": 3072, "large": False, "seq_len": 104640},
    {
        "wav2vec2_tiny": {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 256, "seq_len": 16000},
        "wav2vec2_base": {},  # 6.54 s of 16 kHz audio: 104,640 samples
        "wav2vec2_large": {"layers": 24, "hidden": 1024, "heads": 16, "intermediate": 4096, "large": True},
    },
    "wav2vec 2.0 CTC (transformers Wav2Vec2ForCTC, base / large), raw 16 kHz audio",
    # the feature extractor's receptive field is 400 samples (25 ms)
    bounds={
        "layers": Bounds(ge=1),
        "heads": Bounds(ge=1),
        "hidden": Bounds(multiple_of="heads"),
        "seq_len": Bounds(ge=400),
    },
)

# --------------------------------------------------------------------------- FastPitch


def _sinusoid(steps: int, dim: int) -> torch.Tensor:
    inv = 1 / (10000 ** (torch.arange(0.0, dim, 2.0) / dim))
    angles = torch.arange(steps, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=1)  # (steps, dim)


class _FFTLayer(nn.Module):
    """Post-LN transformer layer of FastPitch: attention (qkv with bias, out without), conv FF (k3, ReLU, k3)."""

    def __init__(self, d: int, heads: int, d_head: int, filt: int, kernel: int) -> None:
        super().__init__()
        self.heads, self.d_head = heads, d_head
        self.qkv = nn.Linear(d, 3 * heads * d_head)
        self.o = nn.Linear(heads * d_head, d, bias=False)
        self.ln1 = nn.LayerNorm(d)
        self.ff1 = nn.Conv1d(d, filt, kernel, 1, kernel // 2)
        self.ff2 = nn.Conv1d(filt, d, kernel, 1, kernel // 2)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.d_head).permute(2, 0, 3, 1, 4)
        attn = F.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.d_head**-0.5, dim=-1)
        y = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, self.heads * self.d_head)
        x = self.ln1(x + self.o(y))
        y = self.ff2(F.relu(self.ff1(x.transpose(1, 2)))).transpose(1, 2)
        return self.ln2(x + y)


class _Predictor(nn.Module):
    """Temporal predictor: (conv k3, ReLU, LayerNorm) x 2, linear to 1 value per step."""

    def __init__(self, d: int, filt: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(d, filt, 3, 1, 1), nn.Conv1d(filt, filt, 3, 1, 1)])
        self.norms = nn.ModuleList([nn.LayerNorm(filt), nn.LayerNorm(filt)])
        self.fc = nn.Linear(filt, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d) -> (B, T)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            x = norm(F.relu(conv(x.transpose(1, 2))).transpose(1, 2))
        return self.fc(x).squeeze(-1)


class FastPitch(nn.Module):
    """FastPitch inference forward with a fixed expansion: symbols (B, T) int64 -> (B, 80 * T * repeat + T).

    The encoder (symbol embedding + sinusoidal positions + FFT layers), the duration, pitch and (optionally)
    energy predictors with their conv embeddings added to the encoder output, the length regulator, the decoder
    FFT layers and the projection to 80 mel channels. NVIDIA's regulator repeats each symbol by its predicted
    duration (a data-dependent length); here every symbol is repeated ``repeat`` times (the DLE benchmark's
    128-symbol phrases come out at 600-675 frames: about 5 per symbol). The output is the mel spectrogram
    (B, 80, T * repeat) flattened, followed by the predicted durations (B, T): one tensor.
    """

    def __init__(self, n_symbols: int, d: int, layers: int, filt: int, repeat: int, energy: bool, steps: int) -> None:
        super().__init__()
        self.repeat = repeat
        self.embed = nn.Embedding(n_symbols, d, padding_idx=0)
        self.register_buffer("pos_in", _sinusoid(steps, d), persistent=False)
        self.register_buffer("pos_out", _sinusoid(steps * repeat, d), persistent=False)
        self.encoder = nn.ModuleList(_FFTLayer(d, 1, 64, filt, 3) for _ in range(layers))
        self.duration = _Predictor(d, 256)
        self.pitch = _Predictor(d, 256)
        self.pitch_emb = nn.Conv1d(1, d, 3, 1, 1)
        self.energy = _Predictor(d, 256) if energy else None
        self.energy_emb = nn.Conv1d(1, d, 3, 1, 1) if energy else None
        self.decoder = nn.ModuleList(_FFTLayer(d, 1, 64, filt, 3) for _ in range(layers))
        self.proj = nn.Linear(d, 80)

    def forward(self, symbols: torch.Tensor) -> torch.Tensor:
        x = self.embed(symbols) + self.pos_in.to(self.embed.weight.dtype)
        for layer in self.encoder:
            x = layer(x)
        durations = torch.clamp(torch.exp(self.duration(x)) - 1, 0, 75)
        x = x + self.pitch_emb(self.pitch(x).unsqueeze(1)).transpose(1, 2)
        if self.energy is not None and self.energy_emb is not None:
            x = x + self.energy_emb(self.energy(x).unsqueeze(1)).transpose(1, 2)
        x = torch.repeat_interleave(x, self.repeat, dim=1) + self.pos_out.to(x.dtype)
        for layer in self.decoder:
            x = layer(x)
        mel = self.proj(x).transpose(1, 2)
        return torch.cat([mel.flatten(1), durations], dim=1)


def build_fastpitch(layers: int, hidden: int, filter_size: int, repeat: int, energy: bool, seq_len: int) -> nn.Module:
    """Build FastPitch (148 symbols, 1 head of 64 per FFT layer) for ``seq_len`` symbols."""
    return FastPitch(148, hidden, layers, filter_size, repeat, energy, seq_len)


def symbol_inputs(*, batch: int, device: torch.device, seq_len: int, **_: object) -> tuple[torch.Tensor, ...]:
    """Random symbol ids (batch, seq_len) int64 in [1, 148) (0 is padding)."""
    return (torch.randint(1, 148, (batch, seq_len), dtype=torch.int64, device=device),)


registrar("speech", symbol_inputs, ("symbols",))(
    "fastpitch",
    build_fastpitch,
    {"layers": 6, "hidden": 384, "filter_size": 1536, "repeat": 5, "energy": True, "seq_len": 128},
    {
        "fastpitch_tiny": {"layers": 2, "hidden": 128, "filter_size": 512},
        "fastpitch_v1_0": {"energy": False},  # before energy conditioning (2020 checkpoints)
        "fastpitch_v1_1": {},  # scripts/train.sh: --energy-conditioning
    },
    "FastPitch mel generator (NVIDIA DLE), inference forward with a fixed duration expansion",
    bounds={"layers": Bounds(ge=1), "hidden": Bounds(ge=2, multiple_of=2), "repeat": Bounds(ge=1)},
)
