"""Language model families built from ``transformers`` configs with random weights.

Encoders return the last hidden state, decoders return the LM logits.
"""

from __future__ import annotations

from torch import nn

from analyzer.zoo._common import require, token_inputs
from analyzer.zoo._hf import hf_class, hf_module
from analyzer.zoo.registry import Family, register

_ATTN = {"attn": ("sdpa", "eager")}
_TOKENS = ("input_ids",)


def _check(name: str, hidden: int, heads: int, layers: int, seq_len: int, max_pos: int) -> None:
    require(layers >= 1 and heads >= 1, f"{name}: layers and heads must be >= 1")
    require(hidden % heads == 0, f"{name}: hidden ({hidden}) must be divisible by heads ({heads})")
    require(1 <= seq_len <= max_pos, f"{name}: seq_len must be in [1, {max_pos}], got {seq_len}")


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


# --------------------------------------------------------------------------- BERT / RoBERTa


def build_bert(
    layers: int,
    hidden: int,
    heads: int,
    intermediate: int,
    vocab: int,
    max_pos: int,
    seq_len: int,
    attn: str,
) -> nn.Module:
    """Build a BERT encoder (``BertModel``), returning the last hidden state.

    Args:
        layers: Transformer layers.
        hidden: Hidden size.
        heads: Attention heads.
        intermediate: MLP size.
        vocab: Vocabulary size.
        max_pos: Maximum positions.
        seq_len: Example sequence length (validated).
        attn: Attention implementation.

    Returns:
        The wrapped model.
    """
    _check("bert", hidden, heads, layers, seq_len, max_pos)
    cfg = hf_class("BertConfig")(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max_pos,
        attn_implementation=attn,
    )
    return hf_module("BertModel", cfg, "input_ids")


register(
    Family(
        name="bert",
        kind="language",
        params=_encoder_params(30522, 512),
        variants=_sized("bert", _BERT_SIZES),
        builder=build_bert,
        make_inputs=token_inputs,
        description="BERT encoder (post-LN, GELU, learned positions)",
        input_names=_TOKENS,
        choices=_ATTN,
    )
)


def build_roberta(
    layers: int,
    hidden: int,
    heads: int,
    intermediate: int,
    vocab: int,
    max_pos: int,
    seq_len: int,
    attn: str,
) -> nn.Module:
    """Build a RoBERTa encoder (``RobertaModel``), returning the last hidden state.

    Args:
        layers: Transformer layers.
        hidden: Hidden size.
        heads: Attention heads.
        intermediate: MLP size.
        vocab: Vocabulary size.
        max_pos: Maximum positions (including the 2 offset positions).
        seq_len: Example sequence length (validated).
        attn: Attention implementation.

    Returns:
        The wrapped model.
    """
    _check("roberta", hidden, heads, layers, seq_len, max_pos - 2)
    cfg = hf_class("RobertaConfig")(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max_pos,
        pad_token_id=1,
        attn_implementation=attn,
    )
    return hf_module("RobertaModel", cfg, "input_ids")


register(
    Family(
        name="roberta",
        kind="language",
        params=_encoder_params(50265, 514),
        variants=_sized("roberta", {k: _BERT_SIZES[k] for k in ("tiny", "small", "base", "large")}),
        builder=build_roberta,
        make_inputs=token_inputs,
        description="RoBERTa encoder (BERT architecture, padding-offset positions)",
        input_names=_TOKENS,
        choices=_ATTN,
    )
)


def build_distilbert(
    layers: int,
    hidden: int,
    heads: int,
    intermediate: int,
    vocab: int,
    max_pos: int,
    seq_len: int,
    attn: str,
) -> nn.Module:
    """Build a DistilBERT encoder, returning the last hidden state.

    Args:
        layers: Transformer layers.
        hidden: Hidden size.
        heads: Attention heads.
        intermediate: MLP size.
        vocab: Vocabulary size.
        max_pos: Maximum positions.
        seq_len: Example sequence length (validated).
        attn: Attention implementation.

    Returns:
        The wrapped model.
    """
    _check("distilbert", hidden, heads, layers, seq_len, max_pos)
    cfg = hf_class("DistilBertConfig")(
        vocab_size=vocab,
        dim=hidden,
        n_layers=layers,
        n_heads=heads,
        hidden_dim=intermediate,
        max_position_embeddings=max_pos,
        attn_implementation=attn,
    )
    return hf_module("DistilBertModel", cfg, "input_ids")


register(
    Family(
        name="distilbert",
        kind="language",
        params={**_encoder_params(30522, 512), "layers": 6},
        variants={
            "distilbert_tiny": {"layers": 2, "hidden": 256, "heads": 4, "intermediate": 1024},
            "distilbert_base": {},
            "distilbert_wide": {"hidden": 1024, "heads": 16, "intermediate": 4096},
        },
        builder=build_distilbert,
        make_inputs=token_inputs,
        description="DistilBERT encoder (6 layers, no token types)",
        input_names=_TOKENS,
        choices=_ATTN,
    )
)

# --------------------------------------------------------------------------- T5 encoder


def build_t5_encoder(
    layers: int,
    hidden: int,
    heads: int,
    intermediate: int,
    vocab: int,
    max_pos: int,
    seq_len: int,
    attn: str,
) -> nn.Module:
    """Build a T5 encoder stack (``T5EncoderModel``), returning the last hidden state.

    Args:
        layers: Encoder layers.
        hidden: ``d_model``.
        heads: Attention heads (``d_kv = hidden // heads``).
        intermediate: ``d_ff``.
        vocab: Vocabulary size.
        max_pos: Maximum sequence length (relative positions; validation only).
        seq_len: Example sequence length (validated).
        attn: Attention implementation (T5 only supports ``"eager"``).

    Returns:
        The wrapped model.
    """
    _check("t5_encoder", hidden, heads, layers, seq_len, max_pos)
    cfg = hf_class("T5Config")(
        vocab_size=vocab,
        d_model=hidden,
        d_kv=hidden // heads,
        d_ff=intermediate,
        num_layers=layers,
        num_heads=heads,
        attn_implementation=attn,
    )
    return hf_module("T5EncoderModel", cfg, "input_ids")


register(
    Family(
        name="t5_encoder",
        kind="language",
        params={**_encoder_params(32128, 512), "attn": "eager"},
        variants={
            "t5_encoder_tiny": {"layers": 2, "hidden": 256, "heads": 4, "intermediate": 1024},
            "t5_encoder_small": {"layers": 6, "hidden": 512, "heads": 8, "intermediate": 2048},
            "t5_encoder_base": {},
            "t5_encoder_large": {"layers": 24, "hidden": 1024, "heads": 16, "intermediate": 4096},
        },
        builder=build_t5_encoder,
        make_inputs=token_inputs,
        description="T5 encoder: RMSNorm, relative position bias, ReLU MLP",
        input_names=_TOKENS,
        choices={"attn": ("eager",)},
    )
)

# --------------------------------------------------------------------------- GPT-2 / OPT


def build_gpt2(
    layers: int,
    hidden: int,
    heads: int,
    intermediate: int,
    vocab: int,
    max_pos: int,
    seq_len: int,
    attn: str,
) -> nn.Module:
    """Build a GPT-2 LM (``GPT2LMHeadModel``), returning logits.

    Args:
        layers: Transformer layers.
        hidden: Hidden size.
        heads: Attention heads.
        intermediate: MLP size.
        vocab: Vocabulary size.
        max_pos: Maximum positions.
        seq_len: Example sequence length (validated).
        attn: Attention implementation.

    Returns:
        The wrapped model.
    """
    _check("gpt2", hidden, heads, layers, seq_len, max_pos)
    cfg = hf_class("GPT2Config")(
        vocab_size=vocab,
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        n_inner=intermediate,
        n_positions=max_pos,
        attn_implementation=attn,
    )
    return hf_module("GPT2LMHeadModel", cfg, "input_ids", decoder=True)


register(
    Family(
        name="gpt2",
        kind="language",
        params={**_encoder_params(50257, 1024)},
        variants={
            "gpt2_tiny": {"layers": 2, "hidden": 256, "heads": 4, "intermediate": 1024},
            "distilgpt2": {"layers": 6},
            "gpt2": {},
            "gpt2_medium": {"layers": 24, "hidden": 1024, "heads": 16, "intermediate": 4096},
            "gpt2_large": {"layers": 36, "hidden": 1280, "heads": 20, "intermediate": 5120},
            "gpt2_xl": {"layers": 48, "hidden": 1600, "heads": 25, "intermediate": 6400},
        },
        builder=build_gpt2,
        make_inputs=token_inputs,
        description="GPT-2 decoder LM (pre-LN, learned positions, tied LM head)",
        input_names=_TOKENS,
        choices=_ATTN,
    )
)


def build_opt(
    layers: int,
    hidden: int,
    heads: int,
    intermediate: int,
    vocab: int,
    max_pos: int,
    seq_len: int,
    attn: str,
) -> nn.Module:
    """Build an OPT LM (``OPTForCausalLM``), returning logits.

    Args:
        layers: Decoder layers.
        hidden: Hidden size.
        heads: Attention heads.
        intermediate: MLP (``ffn_dim``) size.
        vocab: Vocabulary size.
        max_pos: Maximum positions.
        seq_len: Example sequence length (validated).
        attn: Attention implementation.

    Returns:
        The wrapped model.
    """
    _check("opt", hidden, heads, layers, seq_len, max_pos)
    cfg = hf_class("OPTConfig")(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        ffn_dim=intermediate,
        max_position_embeddings=max_pos,
        word_embed_proj_dim=hidden,
        attn_implementation=attn,
    )
    return hf_module("OPTForCausalLM", cfg, "input_ids", decoder=True)


register(
    Family(
        name="opt",
        kind="language",
        params={**_encoder_params(50272, 2048)},
        variants={
            "opt_tiny": {"layers": 2, "hidden": 256, "heads": 4, "intermediate": 1024},
            "opt_125m": {},
            "opt_1_3b": {"layers": 24, "hidden": 2048, "heads": 32, "intermediate": 8192},
            "opt_6_7b": {"layers": 32, "hidden": 4096, "heads": 32, "intermediate": 16384},
        },
        builder=build_opt,
        make_inputs=token_inputs,
        description="OPT decoder LM (pre-LN, ReLU MLP, learned offset positions)",
        input_names=_TOKENS,
        choices=_ATTN,
    )
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


def _check_gqa(name: str, hidden: int, heads: int, kv_heads: int) -> None:
    require(
        kv_heads >= 1 and heads % kv_heads == 0,
        f"{name}: heads ({heads}) must be a multiple of kv_heads ({kv_heads})",
    )


def build_llama(
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    vocab: int,
    max_pos: int,
    seq_len: int,
    attn: str,
) -> nn.Module:
    """Build a Llama-style decoder (``LlamaForCausalLM``), returning logits.

    Args:
        layers: Decoder layers.
        hidden: Hidden size.
        heads: Query heads.
        kv_heads: Key/value heads (grouped-query attention when < heads).
        intermediate: SwiGLU MLP size.
        vocab: Vocabulary size.
        max_pos: Maximum positions (RoPE).
        seq_len: Example sequence length (validated).
        attn: Attention implementation.

    Returns:
        The wrapped model.
    """
    _check("llama", hidden, heads, layers, seq_len, max_pos)
    _check_gqa("llama", hidden, heads, kv_heads)
    cfg = hf_class("LlamaConfig")(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_pos,
        attn_implementation=attn,
    )
    return hf_module("LlamaForCausalLM", cfg, "input_ids", decoder=True)


register(
    Family(
        name="llama",
        kind="language",
        params=_llama_params(32000, 4096),
        variants={
            "llama_small": {},
            "llama_1b": {"layers": 22, "hidden": 2048, "heads": 32, "kv_heads": 4, "intermediate": 5632},
            "llama_7b": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "intermediate": 11008},
            "llama_13b": {"layers": 40, "hidden": 5120, "heads": 40, "kv_heads": 40, "intermediate": 13824},
        },
        builder=build_llama,
        make_inputs=token_inputs,
        description="Llama decoder LM: RMSNorm, RoPE, SwiGLU, grouped-query attention",
        input_names=_TOKENS,
        choices=_ATTN,
    )
)


def build_mistral(
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    vocab: int,
    max_pos: int,
    seq_len: int,
    attn: str,
    sliding_window: int,
) -> nn.Module:
    """Build a Mistral-style decoder (``MistralForCausalLM``), returning logits.

    Args:
        layers: Decoder layers.
        hidden: Hidden size.
        heads: Query heads.
        kv_heads: Key/value heads.
        intermediate: SwiGLU MLP size.
        vocab: Vocabulary size.
        max_pos: Maximum positions (RoPE).
        seq_len: Example sequence length (validated).
        attn: Attention implementation.
        sliding_window: Sliding attention window (0 disables).

    Returns:
        The wrapped model.
    """
    _check("mistral", hidden, heads, layers, seq_len, max_pos)
    _check_gqa("mistral", hidden, heads, kv_heads)
    cfg = hf_class("MistralConfig")(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_pos,
        sliding_window=sliding_window or None,
        attn_implementation=attn,
    )
    return hf_module("MistralForCausalLM", cfg, "input_ids", decoder=True)


register(
    Family(
        name="mistral",
        kind="language",
        params={**_llama_params(32000, 32768), "intermediate": 1792, "sliding_window": 4096},
        variants={
            "mistral_small": {},
            "mistral_1b": {"layers": 16, "hidden": 2048, "heads": 16, "kv_heads": 4, "intermediate": 7168},
            "mistral_7b": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "intermediate": 14336},
        },
        builder=build_mistral,
        make_inputs=token_inputs,
        description="Mistral decoder LM: Llama block with GQA and sliding-window attention",
        input_names=_TOKENS,
        choices=_ATTN,
    )
)
