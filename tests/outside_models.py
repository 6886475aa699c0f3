"""transformers architectures that are not in the zoo, as a new user would bring them (tests/test_outside_models.py).

Each builder returns `(model, example_inputs)`: the transformers model class itself (not wrapped: it returns its
`ModelOutput`, as users' models do), in eval mode, with a tiny config (hidden 32-64, 2 layers, vocab 512, 16
tokens or a 32x32 image), random weights, `attn_implementation="eager"` (attention written as matmuls, so both
FlopCounterMode and preflight see the same bmm) and `use_cache=False` for decoders. Nothing is downloaded.

The zoo has (zoo/hf_language.py, zoo/hf_vision.py): BERT, RoBERTa, DistilBERT, T5 encoder, GPT-2, OPT, Llama,
Mistral, ViT, DeiT, BEiT, DINOv2, Swin, MobileViT, LeViT, PoolFormer; none of those is here. Tried and left out
for time alone: YOLOS (all three routes agree with FlopCounterMode exactly, but its ONNX export takes over a minute
on a 2-core machine, interpolating its position embeddings) and DETR (transformers' own ResNet backbone, no timm:
module and `.pt2` routes equal FlopCounterMode exactly, the ONNX route FlopCounterMode less the 54,400 FLOPs of its
first decoder layer's self-attention over zero targets plus learned query positions, all on weights alone, which the
exporter computes ahead of time; about 70 s for the three routes here, and its frozen BatchNorms' ONNX constants are
not worked out). Jamba was not tried.

Round two (issue 25) adds RoFormer, Pegasus, Marian, mBART, SwinV2, SigLIP (vision), ViTMAE, Perceiver, WavLM, Mamba
and four mixtures of experts, Mixtral, Qwen2-MoE, OLMoE (1 layer each) and Jamba (a Mamba layer, then attention with
the experts), in transformers' default experts implementation (`grouped_mm`, which FlopCounterMode counts as 0: the
test adds the hand count).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

VOCAB = 512
SEQ = 16

# Shared small sizes for the BERT-like encoders (BertConfig's field names).
_ENCODER = {"vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 128, "max_position_embeddings": 64}  # fmt: skip
# and for the causal LMs (Llama-style field names).
_DECODER = {"vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 128, "max_position_embeddings": 64, "use_cache": False}  # fmt: skip


def _ids(seed: int = 0) -> tuple[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(5, VOCAB, (1, SEQ), generator=g),)


def _image(channels: int = 3, size: int = 32) -> tuple[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, channels, size, size, generator=g),)


def _make(config_cls: str, model_cls: str, **config) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    cfg = getattr(transformers, config_cls)(**config, attn_implementation="eager")
    model = getattr(transformers, model_cls)(cfg).eval()
    # inference only: FlopCounterMode's module tracker trips over DeBERTa's relative embeddings otherwise
    model.requires_grad_(False)
    with torch.no_grad():  # every weight distinct (no unit LayerNorm weights or zero biases an exporter may merge)
        for p in model.parameters():
            p.uniform_(-0.1, 0.1)
    return model


# --- encoders ------------------------------------------------------------------------------------------------


def electra():
    # embedding_size 32 != hidden 64: ELECTRA's embeddings_project linear is in the graph
    return _make("ElectraConfig", "ElectraModel", embedding_size=32, **_ENCODER), _ids()


def deberta():
    # DeBERTa v1 with disentangled relative attention (content->position and position->content)
    cfg = {**_ENCODER, "relative_attention": True, "pos_att_type": ["c2p", "p2c"], "max_relative_positions": 32}
    return _make("DebertaConfig", "DebertaModel", **cfg), _ids()


def mpnet():
    return _make("MPNetConfig", "MPNetModel", **_ENCODER), _ids()


def convbert():
    # span-based dynamic convolution heads next to self-attention (head_ratio 2: 2 attention heads, 2 conv heads)
    return _make("ConvBertConfig", "ConvBertModel", embedding_size=64, conv_kernel_size=5, **_ENCODER), _ids()


def squeezebert():
    cfg = {**_ENCODER, "embedding_size": 64, "q_groups": 2, "k_groups": 2, "v_groups": 2, "post_attention_groups": 2,
           "intermediate_groups": 4, "output_groups": 4}  # fmt: skip
    return _make("SqueezeBertConfig", "SqueezeBertModel", **cfg), _ids()


def mobilebert():
    cfg = {**_ENCODER, "embedding_size": 32, "intra_bottleneck_size": 32, "true_hidden_size": 32,
           "num_feedforward_networks": 2}  # fmt: skip
    return _make("MobileBertConfig", "MobileBertModel", **cfg), _ids()


def albert():
    # ALBERT shares one layer's weights across its 2 layers
    return _make("AlbertConfig", "AlbertModel", embedding_size=32, **_ENCODER), _ids()


def funnel():
    cfg = {"vocab_size": VOCAB, "d_model": 64, "n_head": 4, "d_head": 16, "d_inner": 128, "block_sizes": [1, 1],
           "num_decoder_layers": 1}  # fmt: skip
    return _make("FunnelConfig", "FunnelModel", **cfg), _ids()


def bart():
    # encoder-decoder: the decoder's input is input_ids shifted right
    cfg = {"vocab_size": VOCAB, "d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
           "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "max_position_embeddings": 64,
           "use_cache": False}  # fmt: skip
    return _make("BartConfig", "BartModel", **cfg), _ids()


# --- causal LMs ----------------------------------------------------------------------------------------------


def gpt_neo():
    cfg = {"vocab_size": VOCAB, "hidden_size": 64, "num_layers": 2, "num_heads": 4, "intermediate_size": 128,
           "attention_types": [[["global", "local"], 1]], "window_size": 8, "max_position_embeddings": 64,
           "use_cache": False}  # fmt: skip
    return _make("GPTNeoConfig", "GPTNeoForCausalLM", **cfg), _ids()


def gptj():
    cfg = {"vocab_size": VOCAB, "n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8, "n_positions": 64,
           "use_cache": False}  # fmt: skip
    return _make("GPTJConfig", "GPTJForCausalLM", **cfg), _ids()


def bloom():
    cfg = {"vocab_size": VOCAB, "hidden_size": 64, "n_layer": 2, "n_head": 4, "use_cache": False}
    return _make("BloomConfig", "BloomForCausalLM", **cfg), _ids()


def falcon():
    cfg = {"vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "multi_query": True, "parallel_attn": True, "alibi": False, "use_cache": False}  # fmt: skip
    return _make("FalconConfig", "FalconForCausalLM", **cfg), _ids()


def phi():
    return _make("PhiConfig", "PhiForCausalLM", partial_rotary_factor=0.5, **_DECODER), _ids()


def stablelm():
    return _make("StableLmConfig", "StableLmForCausalLM", num_key_value_heads=2, **_DECODER), _ids()


def gemma():
    return _make("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=1, head_dim=16, **_DECODER), _ids()


def qwen3():
    return _make("Qwen3Config", "Qwen3ForCausalLM", num_key_value_heads=2, head_dim=16, **_DECODER), _ids()


def gpt_bigcode():
    cfg = {"vocab_size": VOCAB, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64, "multi_query": True,
           "use_cache": False}  # fmt: skip
    return _make("GPTBigCodeConfig", "GPTBigCodeForCausalLM", **cfg), _ids()


def codegen():
    cfg = {"vocab_size": VOCAB, "n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8, "n_positions": 64,
           "n_ctx": 64, "use_cache": False}  # fmt: skip
    return _make("CodeGenConfig", "CodeGenForCausalLM", **cfg), _ids()


# --- vision and audio ----------------------------------------------------------------------------------------


def segformer():
    cfg = {"num_encoder_blocks": 2, "depths": [1, 1], "sr_ratios": [2, 1], "hidden_sizes": [16, 32],
           "patch_sizes": [7, 3], "strides": [4, 2], "num_attention_heads": [1, 2], "mlp_ratios": [2, 2],
           "decoder_hidden_size": 32, "num_labels": 5}  # fmt: skip
    return _make("SegformerConfig", "SegformerForSemanticSegmentation", **cfg), _image()


def convnextv2():
    cfg = {"hidden_sizes": [16, 32], "depths": [1, 1], "num_stages": 2, "num_labels": 10}
    return _make("ConvNextV2Config", "ConvNextV2ForImageClassification", **cfg), _image()


def clip_vision():
    cfg = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "image_size": 32, "patch_size": 8}  # fmt: skip
    return _make("CLIPVisionConfig", "CLIPVisionModel", **cfg), _image()


def wav2vec2():
    cfg = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "conv_dim": [32, 32], "conv_stride": [5, 2], "conv_kernel": [10, 3], "num_conv_pos_embeddings": 16,
           "num_conv_pos_embedding_groups": 4}  # fmt: skip
    g = torch.Generator().manual_seed(0)
    return _make("Wav2Vec2Config", "Wav2Vec2Model", **cfg), (torch.randn(1, 400, generator=g),)


# --- round two (issue 25) --------------------------------------------------------------------------------------


def roformer():
    # rotary position embeddings (sinusoidal table buffer) in every attention layer
    return _make("RoFormerConfig", "RoFormerModel", embedding_size=64, **_ENCODER), _ids()


_SEQ2SEQ = {"vocab_size": VOCAB, "d_model": 64, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 4,
            "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "max_position_embeddings": 64,
            "use_cache": False}  # fmt: skip


def _seq2seq_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, decoder_input_ids): Pegasus and Marian do not shift input_ids into the decoder
    as BART and mBART do; the decoder reads other ids of the same length."""
    return (*_ids(), torch.ones(1, SEQ, dtype=torch.long), *_ids(seed=1))


def pegasus():
    # sinusoidal position tables (no learned positions), pre-norm
    return _make("PegasusConfig", "PegasusModel", **_SEQ2SEQ), _seq2seq_inputs()


def marian():
    return _make("MarianConfig", "MarianModel", decoder_start_token_id=0, pad_token_id=1, **_SEQ2SEQ), _seq2seq_inputs()


def mbart():
    return _make("MBartConfig", "MBartModel", **_SEQ2SEQ), _ids()


# Mixture of experts in transformers' default experts implementation (`grouped_mm`: on CPU two
# `transformers.grouped_mm_fallback` calls per layer, which FlopCounterMode counts as 0; tests/test_moe.py): hidden 64,
# 4 experts of intermediate 32, top-2, 1 layer.
_MOE = {"vocab_size": VOCAB, "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 64, "num_experts_per_tok": 2,
        "use_cache": False}  # fmt: skip


def mixtral():
    return _make("MixtralConfig", "MixtralForCausalLM", num_local_experts=4, intermediate_size=32, **_MOE), _ids()


def qwen2_moe():
    # 4 routed experts (intermediate 32) and a dense shared expert (intermediate 64) behind a sigmoid gate
    cfg = {**_MOE, "num_experts": 4, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64,
           "intermediate_size": 128}  # fmt: skip
    return _make("Qwen2MoeConfig", "Qwen2MoeForCausalLM", **cfg), _ids()


def olmoe():
    return _make("OlmoeConfig", "OlmoeForCausalLM", num_experts=4, intermediate_size=32, **_MOE), _ids()


def jamba():
    # a Mamba layer (dense MLP) then an attention layer with the 4 experts (no position embeddings); transformers'
    # PyTorch scan (no mamba-ssm kernels here)
    cfg = {**_MOE, "num_hidden_layers": 2, "intermediate_size": 32, "num_experts": 4, "attn_layer_period": 2,
           "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1, "mamba_d_state": 8,
           "mamba_expand": 2, "mamba_dt_rank": 4}  # fmt: skip
    return _make("JambaConfig", "JambaForCausalLM", **cfg), _ids()


def swinv2():
    # continuous position bias: an MLP over a constant log-spaced coordinate table, every forward (weight-only)
    cfg = {"image_size": 32, "patch_size": 4, "embed_dim": 16, "depths": [1, 1], "num_heads": [1, 2],
           "window_size": 4}  # fmt: skip
    return _make("Swinv2Config", "Swinv2Model", **cfg), _image()


def siglip_vision():
    # with the attention-pooling head: a learned probe (a weight) attends over the patches
    cfg = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "image_size": 32, "patch_size": 8}  # fmt: skip
    return _make("SiglipVisionConfig", "SiglipVisionModel", **cfg), _image()


def vit_mae():
    # mask_ratio 0: the random shuffle (argsort of noise) still runs, every patch kept
    cfg = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "image_size": 32, "patch_size": 8, "mask_ratio": 0.0}  # fmt: skip
    return _make("ViTMAEConfig", "ViTMAEModel", **cfg), _image()


def perceiver():
    # byte-level masked LM: 16 tokens cross-attended by 8 latents of 32, one self-attention block, a decoder
    cfg = {"vocab_size": VOCAB, "d_model": 64, "d_latents": 32, "num_latents": 8, "num_blocks": 1,
           "num_self_attends_per_block": 1, "num_self_attention_heads": 2, "num_cross_attention_heads": 1,
           "max_position_embeddings": SEQ}  # fmt: skip
    return _make("PerceiverConfig", "PerceiverForMaskedLM", **cfg), _ids()


def wavlm():
    # wav2vec2's feature encoder with WavLM's gated relative position bias (bucketed, computed each forward)
    cfg = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "conv_dim": [32, 32], "conv_stride": [5, 2], "conv_kernel": [10, 3], "num_conv_pos_embeddings": 16,
           "num_conv_pos_embedding_groups": 4, "num_buckets": 32, "max_bucket_distance": 64}  # fmt: skip
    g = torch.Generator().manual_seed(0)
    return _make("WavLMConfig", "WavLMModel", **cfg), (torch.randn(1, 400, generator=g),)


def mamba():
    # selective state-space layers; on CPU without the CUDA kernels transformers runs the sequential scan
    cfg = {"vocab_size": VOCAB, "hidden_size": 32, "state_size": 8, "num_hidden_layers": 1, "expand": 2,
           "conv_kernel": 4, "use_cache": False}  # fmt: skip
    return _make("MambaConfig", "MambaModel", **cfg), _ids()


BUILDERS: dict[str, Callable[[], tuple[torch.nn.Module, tuple]]] = {
    f.__name__: f
    for f in (
        electra,
        deberta,
        mpnet,
        convbert,
        squeezebert,
        mobilebert,
        albert,
        funnel,
        bart,
        gpt_neo,
        gptj,
        bloom,
        falcon,
        phi,
        stablelm,
        gemma,
        qwen3,
        gpt_bigcode,
        codegen,
        segformer,
        convnextv2,
        clip_vision,
        wav2vec2,
        roformer,
        pegasus,
        marian,
        mbart,
        mixtral,
        qwen2_moe,
        olmoe,
        jamba,
        swinv2,
        siglip_vision,
        vit_mae,
        perceiver,
        wavlm,
        mamba,
    )
}


# --- where the weights of an exported ONNX file come from ----------------------------------------------------


def onnx_weight_sources(model: torch.nn.Module, path) -> dict[str, dict[str, int]]:
    """Match the ONNX file's float initializers to the torch module's parameters and buffers, by value.

    The weights are random (every one distinct), so a file tensor equal to a parameter, or to its transpose, is
    that parameter. Returns {"stored": {param: elements stored, once per copy}, "folded": {param: elements of the
    parameters the file does not hold}, "constants": {initializer: elements of file tensors that are no
    parameter, computed by the exporter (gathered embedding rows, masks, rotary tables)}}.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper

    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
    state: dict[str, np.ndarray] = {}
    seen: set[int] = set()
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if id(t) not in seen and t.is_floating_point():
            seen.add(id(t))
            state[name] = t.detach().numpy()
    by_size: dict[int, list[str]] = {}
    for name, a in state.items():
        by_size.setdefault(a.size, []).append(name)
    stored: dict[str, int] = {}
    constants: dict[str, int] = {}
    for init in onnx.load(str(path)).graph.initializer:
        if init.data_type not in floats or not len(init.dims):
            continue
        value = numpy_helper.to_array(init)
        match = next(
            (
                n
                for n in by_size.get(value.size, [])
                if (state[n].shape == value.shape and np.array_equal(state[n], value))
                or (state[n].ndim == 2 and state[n].T.shape == value.shape and np.array_equal(state[n].T, value))
            ),
            None,
        )
        if match is None:
            constants[init.name] = int(value.size)
        else:
            stored[match] = stored.get(match, 0) + int(value.size)
    folded = {n: int(a.size) for n, a in state.items() if n not in stored}
    return {"stored": stored, "folded": folded, "constants": constants}
