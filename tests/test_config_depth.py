"""A transformers config.json with many identical layers: traced at depth 1 and 2, extrapolated exactly.

The oracle is the same config analysed layer by layer (every layer traced): with the threshold lowered, the
extrapolated analysis of a 5-layer model must equal the exact one in every total, launch the same kernels in the
same order, and so get the same prediction. Issue 28: a 4,096-layer config ran until the time budget.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

pytest.importorskip("transformers")

from analyzer.frontends import hf_config
from analyzer.pipeline import analyze_model, predict_all
from analyzer.render import SCHEMA_FILE
from passes.analysis import _kernel_key

GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_head": 2}
GPT2 |= {"vocab_size": 1000, "n_positions": 128, "bos_token_id": 0, "eos_token_id": 0}
BERT = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 64, "intermediate_size": 128}
BERT |= {"num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 128}
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128}
LLAMA |= {"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 128}
TOTALS = ("flops", "macs", "params", "param_bytes", "peak_activation_bytes", "bytes_read", "bytes_written", "op_count")


def _config(tmp_path: Path, doc: dict, layers: int) -> Path:
    key = "n_layer" if doc["model_type"] == "gpt2" else "num_hidden_layers"
    p = tmp_path / f"{doc['model_type']}_{layers}.json"
    p.write_text(json.dumps({**doc, key: layers}))
    return p


def _both(path: Path, monkeypatch):
    exact = predict_all(analyze_model(path, inputs=["input_ids:2x16"]), ["h100-80gb"])
    assert exact.analysis.repeat is None
    monkeypatch.setattr(hf_config, "EXTRAPOLATE_ABOVE", 2)
    fast = predict_all(analyze_model(path, inputs=["input_ids:2x16"]), ["h100-80gb"])
    return exact, fast


@pytest.mark.parametrize(
    "doc", [GPT2, BERT, pytest.param(LLAMA, marks=pytest.mark.slow)], ids=["gpt2", "bert", "llama"]
)
def test_five_layers_extrapolated_from_two_equal_five_traced(tmp_path, monkeypatch, doc):
    exact, fast = _both(_config(tmp_path, doc, 5), monkeypatch)
    assert fast.analysis.repeat is not None and fast.analysis.repeat.layers == 5
    for key in TOTALS:
        assert getattr(fast.totals, key) == getattr(exact.totals, key), key
    assert fast.totals.macs_by_dtype == exact.totals.macs_by_dtype
    assert fast.totals.unsupported == exact.totals.unsupported
    assert fast.analysis.static_features == exact.analysis.static_features
    # the same launches in the same order: so the kernel model predicts the same latency, energy and memory
    assert [_kernel_key(k) for k in fast.analysis.launched_kernels] == [_kernel_key(k) for k in exact.analysis.kernels]
    assert fast.analysis.repeat.kernels == len(exact.analysis.kernels)
    p, q = fast.prediction, exact.prediction
    assert (p.latency_ms, p.energy_j, p.memory_mib) == (q.latency_ms, q.energy_j, q.memory_mib)
    # the lists are the 2-layer graph's; the JSON and the text say so
    assert len(fast.analysis.ops) < len(exact.analysis.ops)
    doc_json = fast.to_json()
    jsonschema.validate(doc_json, json.loads(SCHEMA_FILE.read_text()))
    assert doc_json["layers"]["mode"] == "extrapolated" and doc_json["layers"]["layers"] == 5
    assert doc_json["layers"]["kernels_launched"] == len(exact.analysis.kernels)
    assert any("layers 3..5 extrapolated from layers 1-2 (identical)" in w for w in fast.warnings)


def test_gpt2_parameters_by_hand(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_config, "EXTRAPOLATE_ABOVE", 2)
    rep = analyze_model(_config(tmp_path, GPT2, 7), inputs=["input_ids:1x8"])
    # wte 1000 x 64 + wpe 128 x 64 + 7 layers x (ln 2x128 + c_attn 64x192+192 + c_proj 64x64+64 + c_fc 64x256+256
    # + c_proj 256x64+64 = 49,984) + ln_f 128 = 64,000 + 8,192 + 349,888 + 128
    assert rep.totals.params == 422_208
    assert rep.analysis.repeat.layers == 7


def test_layers_that_differ_are_not_extrapolated(tmp_path):
    """GPT-Neo alternates global and local attention: same shapes, different layers (its attention_layers)."""
    doc = {"model_type": "gpt_neo", "num_layers": 4, "hidden_size": 64, "num_heads": 4, "vocab_size": 100}
    doc["attention_types"] = [[["global", "local"], 2]]
    path = tmp_path / "neo.json"
    path.write_text(json.dumps(doc))
    assert "differ" in hf_config.why_not_identical(hf_config.read_config(path))
    doc["attention_types"] = [[["global"], 4]]
    path.write_text(json.dumps(doc))
    assert hf_config.why_not_identical(hf_config.read_config(path)) is None


def test_a_layer_attribute_that_differs_is_seen():
    """Layers whose only difference is a plain attribute (a sliding flag set from the layer index) are not the
    same layer; their index attribute (layer_idx) does not count."""
    import torch

    class Layer(torch.nn.Module):
        def __init__(self, i: int, sliding: bool):
            super().__init__()
            self.layer_idx, self.is_sliding, self.lin = i, sliding, torch.nn.Linear(2, 2)

    assert hf_config.layer_signature(Layer(0, False)) == hf_config.layer_signature(Layer(5, False))
    assert hf_config.layer_signature(Layer(0, False)) != hf_config.layer_signature(Layer(0, True))


@pytest.mark.parametrize("doc", [BERT, GPT2], ids=["bert", "gpt2"])
def test_module_names_are_the_models_own(tmp_path, doc):
    """An op's module is named as the transformers model names its modules (`named_modules()`, the oracle:
    `encoder.layer.0.attention.self.query` of a BertModel, `transformer.h.0.attn.c_attn` of a GPT2LMHeadModel), not
    with the attribute of preflight's wrapper in front (`model.encoder...`)."""
    import torch
    import transformers

    path = _config(tmp_path, doc, 2)
    config = transformers.AutoConfig.for_model(**{k: v for k, v in json.loads(path.read_text()).items()})
    with torch.device("meta"):
        own = dict(getattr(transformers, doc["architectures"][0])(config).named_modules())
    ops = analyze_model(path, inputs=["input_ids:2x16"]).analysis.ops
    named = {c.module for c in ops if c.module and c.module != "(top level)"}
    assert len(named) >= 8 and named <= own.keys(), sorted(named - own.keys())[:5]
    assert any(
        c.category == "matmul" and c.module.endswith(".0.attention.self.query" if doc is BERT else ".0.attn.c_attn")
        for c in ops
    )


GPT2_BASE = GPT2 | {"architectures": ["GPT2Model"], "n_layer": 2}
MISTRAL_BASE = {"model_type": "mistral", "architectures": ["MistralModel"], "hidden_size": 64, "intermediate_size": 128}
MISTRAL_BASE |= {"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 128}
OPT_BASE = {"model_type": "opt", "architectures": ["OPTModel"], "hidden_size": 64, "ffn_dim": 128, "vocab_size": 1000}
OPT_BASE |= {"num_attention_heads": 4, "max_position_embeddings": 128, "word_embed_proj_dim": 64}


@pytest.mark.parametrize(
    ("doc", "count"), [(GPT2_BASE, 37), (MISTRAL_BASE, 75), (OPT_BASE, 29)], ids=["gpt2", "mistral", "opt"]
)
def test_a_decoder_without_its_head_is_one_forward_without_a_cache(tmp_path, doc, count):
    """GPT2Model, MistralModel, OPTModel (a decoder's base class, no LM head) build a key/value cache by default,
    whose first update concatenated an empty tensor that TVM's importer refused (every such config failed). Called
    with `use_cache=False` as the causal-LM classes are, their kernels are the eager dispatch trace's of that call."""
    import torch
    import transformers
    from kernel_trace import input_dependent, trace_kernels

    path = _config(tmp_path, doc, 2)
    rep = analyze_model(path, inputs=["input_ids:2x16"])
    model = getattr(transformers, doc["architectures"][0])(hf_config.read_config(path))  # CPU: the masks' checks
    ids = torch.zeros(2, 16, dtype=torch.int64)

    class NoCache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(input_ids=x, use_cache=False, return_dict=False)[0]

    traced = trace_kernels(NoCache(), (ids,), inference=True).dependent_count
    assert input_dependent(rep.analysis)[0] == traced == count
