"""Language model families built from ``transformers`` configs with random weights.

Encoders return the last hidden state, decoders return the LM logits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from zoo._common import token_inputs
from zoo._hf import hf_class, hf_module
from zoo.registry import Bounds, Expr, registrar

_TOKENS = ("input_ids",)
# Every language family: sizes >= 1, heads divide the hidden size, and positions for seq_len tokens.
_LM_BOUNDS = {
    "attn": Bounds(choices=("sdpa", "eager")),
    "layers": Bounds(ge=1),
    "heads": Bounds(ge=1),
    "hidden": Bounds(multiple_of="heads"),
    "seq_len": Bounds(ge=1, le="max_pos"),
}
# Grouped-query attention: the key/value heads divide the query heads.
_GQA_BOUNDS = {"heads": Bounds(ge=1, multiple_of="kv_heads"), "kv_heads": Bounds(ge=1)}


def _encoder_params(vocab: int, max_pos: int) -> dict[str, object]:
    return {
        "layers": 12,
        "hidden": 768,
        "heads": 12,
        "intermediate": 3072,
        "vocab": vocab,
        "max_pos": max_pos,
        "seq_len": 128,
        "attn": "sdpa",
    }


_BERT_SIZES = {  # layers, hidden, heads
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


def _sized(prefix: str, sizes: dict[str, tuple[int, int, int]]) -> dict[str, dict]:
    return {
        f"{prefix}_{k}": {"layers": n, "hidden": h, "heads": a, "intermediate": 4 * h} for k, (n, h, a) in sizes.items()
    }


def _lm_builder(
    name: str,
    config_cls: str,
    model_cls: str,
    fields: dict[str, str],
    *,
    decoder: bool = False,
    derived: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Callable[..., nn.Module]:
    """A builder for one ``transformers`` family: our parameter names mapped to its config's fields.

    Args:
        name: Family name (for error messages).
        config_cls: ``transformers`` config class, e.g. ``"BertConfig"``.
        model_cls: ``transformers`` model class; encoders return the last hidden state, decoders
            (``decoder=True``) the LM logits.
        fields: Our parameter (``layers``, ``hidden``, ...) -> the config's keyword for it.
        decoder: Whether the model is a causal LM (called with ``use_cache=False``).
        derived: Config keywords computed from the parameters (e.g. T5's ``d_kv``).

    Returns:
        ``builder(**params)``: the wrapped model with random weights (the parameters are checked
        against the family's bounds when the spec is resolved).
    """

    def builder(**params: Any) -> nn.Module:
        config = {field: params[key] for key, field in fields.items()}
        config.update(derived(params) if derived else {})
        cfg = hf_class(config_cls)(**config, attn_implementation=params["attn"])
        return hf_module(model_cls, cfg, "input_ids", decoder=decoder)

    builder.__name__ = builder.__qualname__ = f"build_{name}"
    builder.__doc__ = f"Build {model_cls} from {config_cls} with random weights."
    return builder


_language = registrar("language", token_inputs, _TOKENS, _LM_BOUNDS)

_BERT_FIELDS = {  # also RoBERTa's
    "vocab": "vocab_size",
    "hidden": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "intermediate": "intermediate_size",
    "max_pos": "max_position_embeddings",
}
_LLAMA_FIELDS = {**_BERT_FIELDS, "kv_heads": "num_key_value_heads"}  # also Mistral's

# --------------------------------------------------------------------------- BERT / RoBERTa / DistilBERT

_language(
    "bert",
    _lm_builder("bert", "BertConfig", "BertModel", _BERT_FIELDS),
    _encoder_params(30522, 512),
    _sized("bert", _BERT_SIZES),
    "BERT encoder (post-LN, GELU, learned positions)",
)

_language(
    "roberta",
    # roberta-base's config.json: one token type (BERT's default is 2: 768 parameters too many at base size)
    _lm_builder(
        "roberta",
        "RobertaConfig",
        "RobertaModel",
        _BERT_FIELDS,
        derived=lambda p: {"pad_token_id": 1, "type_vocab_size": 1},
    ),
    _encoder_params(50265, 514),
    _sized("roberta", {k: _BERT_SIZES[k] for k in ("tiny", "small", "base", "large")}),
    "RoBERTa encoder (BERT architecture, padding-offset positions)",
    # RoBERTa reserves 2 positions (its padding offset).
    bounds={"seq_len": Bounds(ge=1, le=Expr("max_pos - 2", lambda p: p["max_pos"] - 2))},
)

_language(
    "distilbert",
    _lm_builder(
        "distilbert",
        "DistilBertConfig",
        "DistilBertModel",
        {
            "vocab": "vocab_size",
            "hidden": "dim",
            "layers": "n_layers",
            "heads": "n_heads",
            "intermediate": "hidden_dim",
            "max_pos": "max_position_embeddings",
        },
    ),
    {**_encoder_params(30522, 512), "layers": 6},
    {
        "distilbert_tiny": {"layers": 2, "hidden": 256, "heads": 4, "intermediate": 1024},
        "distilbert_base": {},
        "distilbert_wide": {"hidden": 1024, "heads": 16, "intermediate": 4096},
    },
    "DistilBERT encoder (6 layers, no token types)",
)

# --------------------------------------------------------------------------- T5 encoder

_language(
    "t5_encoder",
    _lm_builder(
        "t5_encoder",
        "T5Config",
        "T5EncoderModel",
        # Relative positions: max_pos only bounds seq_len.
        {
            "vocab": "vocab_size",
            "hidden": "d_model",
            "intermediate": "d_ff",
            "layers": "num_layers",
            "heads": "num_heads",
        },
        derived=lambda p: {"d_kv": p["hidden"] // p["heads"]},
    ),
    {**_encoder_params(32128, 512), "attn": "eager"},
    {
        "t5_encoder_tiny": {"layers": 2, "hidden": 256, "heads": 4, "intermediate": 1024},
        "t5_encoder_small": {"layers": 6, "hidden": 512, "heads": 8, "intermediate": 2048},
        "t5_encoder_base": {},
        "t5_encoder_large": {"layers": 24, "hidden": 1024, "heads": 16, "intermediate": 4096},
    },
    "T5 encoder: RMSNorm, relative position bias, ReLU MLP",
    bounds={"attn": Bounds(choices=("eager",))},  # T5 supports only eager attention
)

# --------------------------------------------------------------------------- GPT-2 / OPT

_language(
    "gpt2",
    _lm_builder(
        "gpt2",
        "GPT2Config",
        "GPT2LMHeadModel",
        {
            "vocab": "vocab_size",
            "hidden": "n_embd",
            "layers": "n_layer",
            "heads": "n_head",
            "intermediate": "n_inner",
            "max_pos": "n_positions",
        },
        decoder=True,
    ),
    _encoder_params(50257, 1024),
    {
        "gpt2_tiny": {"layers": 2, "hidden": 256, "heads": 4, "intermediate": 1024},
        "distilgpt2": {"layers": 6},
        "gpt2": {},
        "gpt2_medium": {"layers": 24, "hidden": 1024, "heads": 16, "intermediate": 4096},
        "gpt2_large": {"layers": 36, "hidden": 1280, "heads": 20, "intermediate": 5120},
        "gpt2_xl": {"layers": 48, "hidden": 1600, "heads": 25, "intermediate": 6400},
    },
    "GPT-2 decoder LM (pre-LN, learned positions, tied LM head)",
)

_language(
    "opt",
    _lm_builder(
        "opt",
        "OPTConfig",
        "OPTForCausalLM",
        {**_BERT_FIELDS, "intermediate": "ffn_dim"},
        decoder=True,
        derived=lambda p: {"word_embed_proj_dim": p["hidden"]},
    ),
    _encoder_params(50272, 2048),
    {
        "opt_tiny": {"layers": 2, "hidden": 256, "heads": 4, "intermediate": 1024},
        "opt_125m": {},
        "opt_1_3b": {"layers": 24, "hidden": 2048, "heads": 32, "intermediate": 8192},
        "opt_6_7b": {"layers": 32, "hidden": 4096, "heads": 32, "intermediate": 16384},
    },
    "OPT decoder LM (pre-LN, ReLU MLP, learned offset positions)",
)

# --------------------------------------------------------------------------- Llama / Mistral


def _llama_params(vocab: int, max_pos: int) -> dict[str, object]:
    return {
        "layers": 4,
        "hidden": 512,
        "heads": 8,
        "kv_heads": 2,
        "intermediate": 1376,
        "vocab": vocab,
        "max_pos": max_pos,
        "seq_len": 128,
        "attn": "sdpa",
    }


_language(
    "llama",
    _lm_builder("llama", "LlamaConfig", "LlamaForCausalLM", _LLAMA_FIELDS, decoder=True),
    _llama_params(32000, 4096),
    {
        "llama_small": {},
        "llama_1b": {"layers": 22, "hidden": 2048, "heads": 32, "kv_heads": 4, "intermediate": 5632},
        "llama_7b": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "intermediate": 11008},
        "llama_13b": {"layers": 40, "hidden": 5120, "heads": 40, "kv_heads": 40, "intermediate": 13824},
    },
    "Llama decoder LM: RMSNorm, RoPE, SwiGLU, grouped-query attention",
    bounds=_GQA_BOUNDS,
)

_language(
    "mistral",
    _lm_builder(
        "mistral",
        "MistralConfig",
        "MistralForCausalLM",
        _LLAMA_FIELDS,
        decoder=True,
        derived=lambda p: {"sliding_window": p["sliding_window"] or None},  # 0 disables the window
    ),
    {**_llama_params(32000, 32768), "intermediate": 1792, "sliding_window": 4096},
    {
        "mistral_small": {},
        "mistral_1b": {"layers": 16, "hidden": 2048, "heads": 16, "kv_heads": 4, "intermediate": 7168},
        "mistral_7b": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "intermediate": 14336},
    },
    "Mistral decoder LM: Llama block with GQA and sliding-window attention",
    bounds=_GQA_BOUNDS,
)
