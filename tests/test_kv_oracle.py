"""KV-cache bytes of `preflight llm` against transformers' own caches, filled by a real forward pass.

A tiny decoder is built from its config (random weights, torch on the CPU, float32) and runs a prefill of PROMPT
tokens and decode steps up to CONTEXT tokens with `use_cache=True`. The oracle is the cache object transformers
returns, walked whatever its layout (`.layers[i].keys/.values`, or the older `.key_cache/.value_cache` lists):

- a `StaticCache` of CONTEXT slots: the bytes of its key and value tensors after the steps are the static cache
  preflight models (min(context, window) slots per layer);
- the default dynamic cache: the keys and values each layer's `update` hands attention in the step that brings a
  sequence to CONTEXT tokens; between steps transformers keeps only window - 1 of a sliding layer's positions
  (docs/llm-serving.md says which preflight reports and why).

Preflight's side: `analyzer.llm.kv_cache_spec` (what `preflight llm` computes its KV bytes with),
`predictor.llm.KvCacheSpec.from_config` (the config.json dict route) and, for the mixed sliding/full model, the
whole `llm()` report.
"""

from __future__ import annotations

import inspect
import os

import pytest
import torch

from analyzer.llm import kv_cache_spec, llm
from predictor.llm import KvCacheSpec
from zoo.serving import cache_layout

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

BATCH, PROMPT, CONTEXT, WINDOW = 2, 11, 14, 8  # a prompt longer than the window; 3 decode steps after the prefill
FLOAT32 = 4
# one token in one layer with 2 KV heads of 16: 2 (K, V) x 2 x 16 x 4 bytes = 256 B
SLOT_2KV = 2 * 2 * 16 * FLOAT32


def _tiny(cls, **kw):
    base = dict(
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=256,
        max_position_embeddings=64,
        num_hidden_layers=3,
    )
    return cls(**(base | kw))


def _configs():
    t = transformers
    return {
        # dense: 4 KV heads = 4 query heads; 3 layers x 2 x 4 x 16 x 4 B = 1,536 B per token; x 14 x batch 2
        "llama-dense": (_tiny(t.LlamaConfig, num_key_value_heads=4), 43_008),
        # grouped-query: 2 KV heads for 4 query heads; 3 layers x 256 B = 768 B per token; x 14 x 2 = 21,504
        "llama-gqa": (_tiny(t.LlamaConfig, num_key_value_heads=2), 21_504),
        # every layer a window of 8 < 14: 3 layers x 8 slots x 256 B x batch 2 = 12,288
        "mistral-window": (_tiny(t.MistralConfig, num_key_value_heads=2, sliding_window=WINDOW), 12_288),
        # sliding, full, sliding: (8 + 14 + 8) slots x 256 B x batch 2 = 15,360
        "gemma3-mixed": (
            _tiny(
                t.Gemma3TextConfig,
                num_key_value_heads=2,
                head_dim=16,
                sliding_window=WINDOW,
                layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            ),
            15_360,
        ),
    }


CONFIGS = list(_configs())


def _model(config):
    torch.manual_seed(0)
    config._attn_implementation = "sdpa"
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def _forward(model, ids, cache):
    """One step; returns the cache the model hands back (keyword `cache` in transformers >= 5.2x, else
    `past_key_values`)."""
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = model(ids, use_cache=True, **{key: cache})
    back = out.get("cache", None) if hasattr(out, "get") else None
    return back if back is not None else out.past_key_values


def _layer_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, its key and value tensors, whatever layout the installed transformers' cache has."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def _nbytes(cache) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in _layer_tensors(cache))


def _run(model, cache, on_step=None):
    """Prefill PROMPT tokens, then one token at a time up to CONTEXT; returns the cache."""
    gen = torch.Generator().manual_seed(1)
    vocab = model.config.get_text_config().vocab_size
    with torch.inference_mode():
        cache = _forward(model, torch.randint(0, vocab, (BATCH, PROMPT), generator=gen), cache)
        for _ in range(CONTEXT - PROMPT):
            if on_step is not None:
                on_step()
            cache = _forward(model, torch.randint(0, vocab, (BATCH, 1), generator=gen), cache)
    return cache


def _preflight_bytes(config) -> tuple[int, int]:
    """Preflight's KV bytes for BATCH sequences of CONTEXT tokens in float32: the `preflight llm` route and the
    config.json route."""
    via_llm = kv_cache_spec(cache_layout(config), "float32").bytes(BATCH, CONTEXT)
    via_dict = KvCacheSpec.from_config(config.to_dict(), FLOAT32).bytes(BATCH, CONTEXT)
    return via_llm, via_dict


@pytest.mark.parametrize("name", CONFIGS)
def test_kv_bytes_equal_transformers_static_cache(name):
    config, by_hand = _configs()[name]
    model = _model(config)
    cache = _run(model, transformers.StaticCache(config=config, max_cache_len=CONTEXT))
    real = _nbytes(cache)
    assert real == by_hand, name
    assert _preflight_bytes(config) == (real, real), name


@pytest.mark.parametrize("name", CONFIGS)
def test_kv_bytes_equal_what_attention_reads_from_the_dynamic_cache(name):
    """The dynamic cache (transformers' default): in the last decode step every layer's `update` returns the keys
    and values attention reads, min(context, window) positions; those are preflight's bytes. Between steps a sliding
    layer keeps one position fewer once it has seen a full window (transformers 5.x: window - 1)."""
    config, by_hand = _configs()[name]
    model = _model(config)
    cache = transformers.DynamicCache(config=config)
    read: list[int] = []  # bytes handed to attention in the current step, per layer call
    update = cache.update

    def recording(key_states, value_states, *args, **kwargs):
        k, v = update(key_states, value_states, *args, **kwargs)
        read.append(k.numel() * k.element_size() + v.numel() * v.element_size())
        return k, v

    cache.update = recording
    cache = _run(model, cache, on_step=read.clear)
    assert len(read) == config.num_hidden_layers, name  # one update per layer in the last step
    assert sum(read) == by_hand, name
    assert _preflight_bytes(config) == (by_hand, by_hand), name
    sliding = sum(t == "sliding_attention" for t in cache_layout_types(config))
    resident = _nbytes(cache)
    # between steps each sliding layer holds window - 1 = 7 positions: one 256-B slot per sequence fewer
    assert by_hand - sliding * BATCH * SLOT_2KV <= resident <= by_hand, name


def cache_layout_types(config) -> list[str]:
    """Per layer, "sliding_attention" or "full_attention" as transformers' cache sees it."""
    return ["full_attention" if w is None else "sliding_attention" for w in cache_layout(config).windows]


def test_transformers_dynamic_sliding_layer_keeps_window_minus_one_between_steps():
    """What the installed transformers keeps between steps (the documented behaviour docs/llm-serving.md cites): a
    sliding layer's visible keys are its last window - 1 = 7 positions, while a full layer's are all 14."""
    config, _ = _configs()["gemma3-mixed"]
    cache = _run(_model(config), transformers.DynamicCache(config=config))
    positions = [k.shape[-2] for k, _ in _layer_tensors(cache)]
    assert positions == [WINDOW - 1, CONTEXT, WINDOW - 1]


def test_llm_report_kv_bytes_equal_the_static_cache_of_a_mixed_model():
    """The whole `preflight llm` report (graphs traced at full depth: the layers' windows differ) for the mixed
    sliding/full model: its KV bytes in the memory terms and in the JSON equal transformers' StaticCache's."""
    config, by_hand = _configs()["gemma3-mixed"]
    real = _nbytes(_run(_model(config), transformers.StaticCache(config=config, max_cache_len=CONTEXT)))
    report = llm(
        config,
        prompt=PROMPT,
        generate=CONTEXT - PROMPT,
        batch=BATCH,
        devices=["h100"],
        contexts=[CONTEXT],
        dtype="float32",
    )
    assert report.llm.devices[0].memory.kv_bytes == real == by_hand
    assert report.to_json()["llm"]["kv_cache"]["bytes_batch"] == real
