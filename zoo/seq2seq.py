"""Encoder-decoder language families of NVIDIA DeepLearningExamples' tables, as one teacher-forced forward.

- BART-large (PyTorch/LanguageModeling/BART, ``transformers`` BART): 12 + 12 layers, 1024 wide, 16 heads, FFN
  4096, GELU, learned positions, vocabulary 50,265; the LM head is tied to the shared embedding.
- Transformer (big) NMT (PyTorch/Translation/Transformer, fairseq's ``transformer_wmt_en_de_big``): 6 + 6 post-LN
  layers, 1024 wide, 16 heads, FFN 4096, ReLU, sinusoidal positions, embeddings scaled by sqrt(1024) and shared
  between encoder, decoder and output (the README's joined BPE vocabulary of 33,708 tokens plus fairseq's 4
  specials = 33,712). Built as ``transformers``' Marian, which is that architecture.

- GNMT v2 (PyTorch/Translation/GNMT, ``seq2seq/models``): a shared 32,320-token embedding of 1024; encoder of
  4 LSTM layers of 1024 (the first bidirectional, residual connections from the third); decoder: an LSTM whose
  output queries normalised Bahdanau attention over the encoder output, then 3 LSTM layers fed the previous
  output concatenated with the attention context (residual from the second), and the classifier.

The forward runs the encoder over ``seq_len`` source tokens and the decoder over the first ``tgt_len`` of them
(teacher forcing: one decoder pass over the whole target, no cache) and returns the logits (B, tgt_len, vocab).
Building on the meta device works; a forward on meta tensors does not (``transformers`` checks the decoder's
all-ones mask with ``.item()`` outside ``torch.export``). NVIDIA's rows time beam-search generation instead
(one encoder pass, then one decoder step per output token per beam); these models give the predictor the
architectures, not those pipelines.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo._common import token_inputs
from zoo._hf import hf_class
from zoo.registry import Bounds, registrar


class Seq2SeqLM(nn.Module):
    """``transformers`` encoder-decoder LM called with ``input_ids`` and the first ``tgt_len`` of them as targets.

    Args:
        model: A ``...ForConditionalGeneration`` / ``...MTModel``.
        tgt_len: Decoder positions.
    """

    preflight_wraps = "model"  # module paths reported below it (`zoo._hf.HFWrapper`)

    def __init__(self, model: nn.Module, tgt_len: int) -> None:
        super().__init__()
        self.model = model
        self.tgt_len = tgt_len

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(
            input_ids=input_ids,
            decoder_input_ids=input_ids[:, : self.tgt_len],
            use_cache=False,
            return_dict=False,
        )
        return out[0]


def _encoder_decoder(
    model_class: str,
    config_class: str,
    tgt_len: int,
    layers: int,
    hidden: int,
    heads: int,
    intermediate: int,
    vocab: int,
    max_pos: int,
    **extra,
) -> nn.Module:
    """A ``transformers`` encoder-decoder with ``layers`` encoder and decoder layers each, random weights, SDPA."""
    config = hf_class(config_class)(
        vocab_size=vocab,
        d_model=hidden,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=intermediate,
        decoder_ffn_dim=intermediate,
        max_position_embeddings=max_pos,
        attn_implementation="sdpa",
        **extra,
    )
    return Seq2SeqLM(hf_class(model_class)(config), tgt_len)


def build_bart(
    layers: int, hidden: int, heads: int, intermediate: int, vocab: int, max_pos: int, seq_len: int, tgt_len: int
) -> nn.Module:
    """Build BartForConditionalGeneration (``layers`` encoder and decoder layers each) with random weights."""
    return _encoder_decoder(
        "BartForConditionalGeneration", "BartConfig", tgt_len, layers, hidden, heads, intermediate, vocab, max_pos
    )


def build_transformer_nmt(
    layers: int, hidden: int, heads: int, intermediate: int, vocab: int, max_pos: int, seq_len: int, tgt_len: int
) -> nn.Module:
    """Build fairseq's Transformer (big) as ``transformers`` MarianMTModel with random weights."""
    return _encoder_decoder(
        "MarianMTModel",
        "MarianConfig",
        tgt_len,
        layers,
        hidden,
        heads,
        intermediate,
        vocab,
        max_pos,
        decoder_vocab_size=vocab,
        activation_function="relu",
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        pad_token_id=1,
        decoder_start_token_id=2,
    )


class _Bahdanau(nn.Module):
    """Normalised Bahdanau attention: softmax_k(v . tanh(Wq q + Wk k + b)) over keys, v scaled to g / |v|."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.q = nn.Linear(n, n, bias=False)
        self.k = nn.Linear(n, n, bias=False)
        self.v = nn.Parameter(torch.empty(n).uniform_(-0.1, 0.1))
        self.g = nn.Parameter(torch.full((1,), n**-0.5))
        self.b = nn.Parameter(torch.zeros(n))

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """query (B, Tq, n), keys (B, Tk, n) -> context (B, Tq, n)."""
        qk = self.q(query).unsqueeze(2) + self.k(keys).unsqueeze(1) + self.b  # (B, Tq, Tk, n)
        scores = torch.tanh(qk).matmul(self.v / self.v.norm() * self.g)
        return torch.bmm(torch.softmax(scores, dim=-1), keys)


class GNMT(nn.Module):
    """GNMT v2, teacher-forced: (B, seq_len) token ids -> logits (B, tgt_len, vocab) over the first tgt_len.

    Args:
        vocab: Shared vocabulary.
        hidden: LSTM width.
        layers: LSTM layers of the encoder and of the decoder (each >= 2).
        tgt_len: Decoder positions.
    """

    def __init__(self, vocab: int, hidden: int, layers: int, tgt_len: int) -> None:
        super().__init__()
        h = hidden
        self.tgt_len = tgt_len
        self.embed = nn.Embedding(vocab, h, padding_idx=0)
        enc = [nn.LSTM(h, h, batch_first=True, bidirectional=True), nn.LSTM(2 * h, h, batch_first=True)]
        self.encoder = nn.ModuleList(enc + [nn.LSTM(h, h, batch_first=True) for _ in range(layers - 2)])
        self.att_rnn = nn.LSTM(h, h, batch_first=True)
        self.attention = _Bahdanau(h)
        self.decoder = nn.ModuleList(nn.LSTM(2 * h, h, batch_first=True) for _ in range(layers - 1))
        self.classifier = nn.Linear(h, vocab)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for i, rnn in enumerate(self.encoder):
            y = rnn(x)[0]
            x = y + x if i >= 2 else y
        context = x
        x = self.att_rnn(self.embed(input_ids[:, : self.tgt_len]))[0]
        attn = self.attention(x, context)
        for i, rnn in enumerate(self.decoder):
            y = rnn(torch.cat([x, attn], dim=2))[0]
            x = y + x if i >= 1 else y
        return self.classifier(x)


def build_gnmt(hidden: int, layers: int, vocab: int, max_pos: int, seq_len: int, tgt_len: int) -> nn.Module:
    """Build GNMT v2 with random weights (``max_pos`` only bounds ``seq_len``)."""
    return GNMT(vocab, hidden, layers, tgt_len)


_BOUNDS = {
    "layers": Bounds(ge=1),
    "heads": Bounds(ge=1),
    "hidden": Bounds(multiple_of="heads"),
    "seq_len": Bounds(ge=1, le="max_pos"),
    "tgt_len": Bounds(ge=1, le="seq_len"),
}
_seq2seq = registrar("language", token_inputs, ("input_ids",), _BOUNDS)

_seq2seq(
    "bart",
    build_bart,
    {
        "layers": 12,
        "hidden": 1024,
        "heads": 16,
        "intermediate": 4096,
        "vocab": 50265,
        "max_pos": 1024,
        "seq_len": 1024,
        "tgt_len": 60,
    },  # fmt: skip
    {
        "bart_tiny": {"layers": 2, "hidden": 128, "heads": 4, "intermediate": 512, "seq_len": 128, "tgt_len": 16},
        "bart_base": {"layers": 6, "hidden": 768, "heads": 12, "intermediate": 3072},
        "bart_large": {},  # DLE summarization: source 1024 tokens, summaries up to 60
    },
    "BART encoder-decoder LM (transformers), one teacher-forced forward",
)

_seq2seq(
    "gnmt",
    build_gnmt,
    {"hidden": 1024, "layers": 4, "vocab": 32320, "max_pos": 1024, "seq_len": 50, "tgt_len": 50},
    {
        "gnmt_tiny": {"hidden": 64, "layers": 2, "vocab": 1000, "tgt_len": 8},
        "gnmt_small": {"hidden": 256, "vocab": 8000},
        "gnmt_v2": {},  # DLE WMT16 en-de: 1024 wide, 4 + 4 layers, vocabulary 32,320
    },
    "GNMT v2 (NVIDIA DLE): LSTM encoder, Bahdanau attention, LSTM decoder, one teacher-forced forward",
    bounds={"layers": Bounds(ge=2), "hidden": Bounds(ge=1), "tgt_len": Bounds(ge=1, le="seq_len")},
)

_seq2seq(
    "transformer_nmt",
    build_transformer_nmt,
    {
        "layers": 6,
        "hidden": 1024,
        "heads": 16,
        "intermediate": 4096,
        "vocab": 33712,
        "max_pos": 1024,
        "seq_len": 128,
        "tgt_len": 128,
    },  # fmt: skip
    {
        "transformer_nmt_tiny": {
            "layers": 2,
            "hidden": 128,
            "heads": 4,
            "intermediate": 512,
            "vocab": 1000,
            "tgt_len": 8,
        },  # fmt: skip
        "transformer_nmt_base": {"hidden": 512, "heads": 8, "intermediate": 2048},
        "transformer_nmt_big": {},  # fairseq transformer_wmt_en_de_big, WMT14 en-de joined BPE
    },
    "Transformer NMT (fairseq transformer_wmt_en_de_big as transformers Marian), one teacher-forced forward",
)
