"""LLM serving (`preflight llm`, `analyzer.llm`): KV-cache bytes by hand, decode-step FLOPs by hand, prefill FLOPs
against FlopCounterMode, the depth-1/2 extrapolation against full-depth graphs, the config.json route against the
zoo, capacity and MIG arithmetic by hand, the CLI's exit codes and the JSON Schema, the GPU harness's steps."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace

import jsonschema
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch.utils.flop_counter import FlopCounterMode

import zoo
from analyzer.api import analyze
from analyzer.cli import cli
from analyzer.llm import StepGraph, context_grid, llm, parse_contexts, truncated
from analyzer.predeploy import write
from analyzer.render import SCHEMA_FILE
from predictor.devices import get_device
from predictor.llm import (
    FULL_GPU,
    BilinearTimeline,
    KvCacheSpec,
    LlmConfigError,
    ServingMemory,
    SliceLatency,
    capacity,
    largest_fitting,
    recommend,
)
from predictor.predict import predict as run_predictor
from zoo.serving import DecodeStep, PrefillStep, cache_layout, decode_inputs, prefill_inputs

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MIB = 2**20
MULTIPLY_ADD = ("conv", "matmul", "attention")
# a tiny Llama: hidden 64 = 4 heads x 16, 2 KV heads (grouped-query attention, 2 query heads per KV head)
TINY = "llama?layers={n}&hidden=64&heads=4&kv_heads=2&intermediate=128&vocab=256&max_pos=512&seq_len=16"
TINY_MISTRAL = (
    "mistral?layers=2&hidden=64&heads=4&kv_heads=2&intermediate=128&vocab=256&max_pos=512&seq_len=16&sliding_window=16"
)
TINY_GPT2 = "gpt2?layers=2&hidden=64&heads=4&intermediate=256&vocab=256&max_pos=128&seq_len=16"
DEVICES = ["h100-80gb", "a100-40gb"]


def multiply_add_flops(analysis) -> int:
    return sum(2 * c.macs for c in analysis.ops if c.category in MULTIPLY_ADD and not c.folded)


def meta_lm(spec: str):
    return zoo.build(spec, device="meta").module.model


@pytest.fixture(scope="module")
def schema():
    return json.loads(SCHEMA_FILE.read_text())


# ---- KV cache from the config alone ----------------------------------------------------------------------------


def test_kv_bytes_llama_7b_from_config_alone():
    # zoo llama_7b: 32 layers, hidden 4096, 32 heads, 32 KV heads (no GQA)
    cfg = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32}
    kv = KvCacheSpec.from_config(cfg, dtype_bytes=2)
    assert kv.bytes_per_token == 524_288  # 2 x 32 layers x 32 kv heads x 128 x 2 bytes = 0.5 MiB
    assert kv.bytes_per_token == MIB // 2
    assert kv.bytes_per_sequence(4096) == 2_147_483_648  # 4096 x 0.5 MiB = 2 GiB
    assert kv.bytes(8, 1280) == 5_368_709_120  # 8 x 1280 x 0.5 MiB = 5 GiB


def test_kv_bytes_mistral_7b_gqa_and_sliding_window():
    # zoo mistral_7b: 32 layers, hidden 4096, 32 heads, 8 KV heads, window 4096
    cfg = {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "sliding_window": 4096,
    }
    kv = KvCacheSpec.from_config(cfg, dtype_bytes=2)
    assert kv.bytes_per_token == 131_072  # 2 x 32 x 8 kv heads x 128 x 2 = 128 KiB: a quarter of llama_7b's
    assert kv.bytes_per_sequence(1024) == 134_217_728  # 1024 x 128 KiB
    # past the window every layer keeps 4096 slots: 4096 x 128 KiB = 512 MiB, at 4096 tokens and at 32768 alike
    assert kv.bytes_per_sequence(32768) == kv.bytes_per_sequence(4096) == 536_870_912
    cfg["use_sliding_window"] = False  # Qwen2's switch
    assert KvCacheSpec.from_config(cfg, 2).bytes_per_sequence(32768) == 32768 * 131_072


def test_kv_bytes_gpt2_no_gqa():
    # GPT-2 small's config.json names: n_layer 12, n_head 12, n_embd 768; no num_key_value_heads
    kv = KvCacheSpec.from_config({"n_layer": 12, "n_head": 12, "n_embd": 768}, dtype_bytes=2)
    assert (kv.kv_heads, kv.head_dim) == (12, 64)
    assert kv.bytes_per_token == 36_864  # 2 x 12 layers x 12 heads x 64 x 2 bytes
    assert KvCacheSpec.from_config({"n_layer": 12, "n_head": 12, "n_embd": 768}, 4).bytes_per_token == 73_728


def test_kv_spec_from_transformers_configs_matches_the_models_cache_layout():
    for spec, per_token in (
        ("llama_7b", 524_288),
        ("mistral_7b", 131_072),
        ("gpt2", 36_864),
    ):
        config = meta_lm(spec).config
        kv = KvCacheSpec.from_config(config.to_dict(), dtype_bytes=2)
        layout = cache_layout(config)
        assert kv.bytes_per_token == per_token, spec
        assert (kv.kv_heads, kv.head_dim, kv.windows) == (layout.kv_heads, layout.head_dim, layout.windows), spec


def test_kv_spec_refuses_what_it_cannot_read():
    with pytest.raises(LlmConfigError):
        KvCacheSpec.from_config({"hidden_size": 64}, 2)
    with pytest.raises(LlmConfigError):
        KvCacheSpec.from_config(
            {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 8, "layer_types": ["linear"] * 2}, 2
        )


# ---- memory, capacity and MIG arithmetic by hand ---------------------------------------------------------------


def test_serving_memory_terms():
    m = ServingMemory(batch=8, context=1280, weight_bytes=10 * MIB, kv_bytes=20 * MIB, activation_bytes=3 * MIB)
    # 33 MiB of tensors + the eager context measured on the H100 (698 MiB, the median of data/h100-80gb/models'
    # memory_mb.context) + Hopper's cuBLAS workspace (4096 KiB x 8 = 32 MiB) = 763
    assert m.total_mib == 763.0
    assert (m.context_mib, m.workspace_mib) == (698.0, 32.0)


def test_largest_fitting_by_hand():
    # need(b) = 1000 + 10 b MiB; usable 10,000 MiB: (1000 + 10 b) x 1.05 <= 10000 -> b <= 852.38 -> 852
    assert largest_fitting(lambda b: 1000 + 10 * b, 10_000) == 852
    assert largest_fitting(lambda b: 20_000 + b, 10_000) == 0
    assert largest_fitting(lambda b: 1.0, 10_000) == 2**20  # nothing grows with the batch: the search stops there


def test_capacity_on_h100_by_hand():
    # weights 4,000 MiB, 2 MiB of KV cache per sequence per 1024 tokens, no activations
    def need(b, c):
        return 4000 + 564 + 2 * b * c / 1024  # 564 MiB of context and workspace, a round figure for the test

    cap = capacity(get_device("h100-80gb"), [1024, 4096], need)
    # 1g.10gb: 9.75 GiB = 9,984 MiB; (4564 + 2b) x 1.05 <= 9984 -> b <= 2,472.2 -> 2,472 at 1024 tokens
    # at 4096 tokens: (4564 + 8b) x 1.05 <= 9984 -> b <= 618.07 -> 618
    assert cap.largest_batch["1g.10gb"] == (2472, 618)
    # full GPU 81,559 MiB: (4564 + 2b) x 1.05 <= 81559 -> b <= 36,555.8 -> 36,555
    assert cap.largest_batch[FULL_GPU][0] == 36555
    assert list(cap.largest_batch)[-1] == FULL_GPU and cap.derived == ()


def test_recommendation_by_hand():
    h100 = get_device("h100-80gb")
    lat = {q.name: SliceLatency(ttft_ms=100.0 / q.compute_slices, tpot_ms=10.0 / q.compute_slices) for q in h100.mig}
    lat[FULL_GPU] = SliceLatency(ttft_ms=14.0, tpot_ms=1.4)
    # 12,000 MiB x 1.05 = 12,600: more than 1g.10gb's 9,984, within 1g.20gb's 20,091
    rec = recommend(h100, 4, 4096, 12_000, lat)
    assert rec.profile == "1g.20gb" and rec.fits["1g.10gb"] is False and rec.full_gpu_fits
    assert "12,600 MiB" in rec.reason
    # a TPOT target of 4 ms: 1g/2g slices predict 10 and 5 ms, 3g.40gb 3.33 ms
    rec = recommend(h100, 4, 4096, 12_000, lat, tpot_target_ms=4.0)
    assert rec.profile == "3g.40gb" and "TPOT <= 4 ms" in rec.reason
    rec = recommend(h100, 4, 4096, 12_000, lat, ttft_target_ms=1.0)
    assert rec.profile is None and "meets TTFT <= 1 ms" in rec.reason
    rec = recommend(h100, 4, 4096, 90_000, lat)
    assert rec.profile is None and "no profile holds" in rec.reason and not rec.full_gpu_fits


def test_the_eager_warning_when_not_even_one_sequence_fits():
    """A slice too small for the weights (`llm zoo:llama_7b --batch 1 --device a100-40gb:1g.5gb`): the warning says
    that not one sequence fits (it said "1 sequences ... at most 0 do ... (lower --batch)", advice no one can take)."""
    from analyzer.llm import _too_many

    w = _too_many("a100-40gb:1g.5gb", 1, 160, 0, "eager")
    assert w.startswith("a100-40gb:1g.5gb: not one sequence of 160 tokens fits its memory (eager runtime)")
    assert "for 1 sequence this GPU cannot hold" in w and "lower --batch" not in w
    w = _too_many("a100-40gb", 4, 160, 1, "eager")
    assert "4 sequences of 160 tokens do not fit its memory, at most 1 does (eager runtime)" in w
    assert w.endswith("(lower --batch)")
    # the vllm runtime's two warnings, in the same number
    assert "stated are for 1 sequence this GPU cannot hold" in _too_many("h100-80gb", 1, 160, 0, "vllm")
    w = _too_many("h100-80gb", 4, 160, 1, "vllm")
    assert "at most 1 does (vllm runtime): as vLLM's scheduler does, 1 run and the rest wait" in w and "4 waves" in w


def test_a_mig_slice_as_the_target_is_judged_alone():
    # `--device h100-80gb:3g.40gb`: that slice is the one target (it was "does not support MIG"); usable 40,448 MiB
    three = get_device("h100-80gb:3g.40gb")
    lat = {FULL_GPU: SliceLatency(ttft_ms=50.0, tpot_ms=12.0)}  # the slice's own latencies
    rec = recommend(three, 1, 1280, 30_000, lat)  # 30,000 x 1.05 = 31,500 <= 40,448
    assert rec.profile == "3g.40gb" and rec.fits == {"3g.40gb": True} and not rec.full_gpu_fits
    assert "h100-80gb:3g.40gb is a MIG slice: its usable 40,448 MiB holds 1 sequence of 1,280 tokens" in rec.reason
    assert "31,500 MiB" in rec.reason
    rec = recommend(three, 1, 1280, 39_000, lat)  # 39,000 x 1.05 = 40,950 > 40,448
    assert rec.profile is None and rec.fits == {"3g.40gb": False} and "does not hold" in rec.reason
    assert "7g.80gb is the smallest profile of h100-80gb that would hold it" in rec.reason  # 40,950 > 4g.40gb's 40,448
    rec = recommend(three, 1, 1280, 90_000, lat)  # 94,500 MiB: more than the whole H100's 81,559
    assert rec.reason.endswith("no profile of h100-80gb would hold it")

    rec = recommend(three, 1, 1280, 30_000, lat, tpot_target_ms=10.0)  # fits, but 12 ms > 10 ms
    assert rec.profile is None and "misses TPOT <= 10 ms" in rec.reason
    # the vllm runtime's need is the memory over --gpu-memory-utilization, said as such; no headroom
    rec = recommend(three, 1, 1280, 36_000 / 0.9, lat, headroom=0.0, need_how="36,000 / 0.9 = 40,000 MiB")
    assert rec.profile == "3g.40gb" and "(36,000 / 0.9 = 40,000 MiB)" in rec.reason


def test_bilinear_timeline_is_exact_for_bilinear_sizes():
    # three operators whose live bytes are 5 + 3b + 7s + 2bs, 100 + s, 40b
    def live(b, s):
        return [5 + 3 * b + 7 * s + 2 * b * s, 100 + s, 40 * b]

    tl = BilinearTimeline.fit({(b, s): live(b, s) for b in (1, 2) for s in (2, 3)}, slots=lambda c: min(c, 50))
    for b, s in ((1, 2), (7, 33), (64, 50)):
        assert list(tl.at(b, s)) == live(b, s)
    assert tl.peak(8, 1000) == max(live(8, 50))  # the slots stop at the window: 5 + 24 + 350 + 800 = 1,179


def test_context_grid_and_parse():
    assert context_grid(4096, (1280,)) == (512, 1024, 1280, 2048, 4096)
    assert context_grid(1000) == (512, 1000)
    assert parse_contexts("4096, 1024,1024") == [1024, 4096]


# ---- the graphs --------------------------------------------------------------------------------------------------


def test_decode_step_flops_by_hand_and_cache_inputs():
    lm = meta_lm(TINY.format(n=2))
    layout = cache_layout(lm.config)
    g = StepGraph("decode", lm, layout, "float16", name="tiny", source="test", framework="zoo")
    b, ctx = 2, 32
    a = g.point(b, ctx, 512).analysis
    # matmul weights per layer: q, o 64x64 each; k, v 64x(2 x 16) each; gate, up 64x128 each, down 128x64
    #   2 x 4096 + 2 x 2048 + 3 x 8192 = 36,864; 2 layers: 73,728; LM head 64 x 256 = 16,384 -> 90,112 weights
    # decode (one token per sequence): MACs = batch x weights = 2 x 90,112 = 180,224
    # attention per layer: scores 2 (batch) x 4 heads x 32 slots x 16 = 4,096 MACs, and the same for P x V
    #   -> 2 layers x 8,192 = 16,384 MACs; FLOPs = 2 x (180,224 + 16,384) = 393,216
    assert multiply_add_flops(a) == 393_216
    caches = a.graph.inputs[1:]
    assert len(caches) == 4  # keys and values of 2 layers
    assert all(s.tensor.shape == (2, 2, 32, 16) and s.tensor.dtype == "float16" for s in caches)
    # 2 (K, V) x 2 layers x 2 kv heads x 16 x 2 bytes = 256 B per token; x 2 sequences x 32 tokens = 16,384 B
    assert sum(s.tensor.nbytes for s in caches) == 16_384
    assert KvCacheSpec.from_config(lm.config.to_dict(), 2).bytes(2, 32) == 16_384
    # eager decoding folds the query heads onto the KV heads: no K or V repeated for the 4 query heads (2 x 4 x 32
    # x 16 = 4,096 elements); the largest tensor holding slots and head_dim is a cache's 2 x 2 x 32 x 16 = 2,048
    kv_like = [c.output.numel for c in a.ops if c.outputs and {32, 16} <= set(c.output.shape)]
    assert max(kv_like) == 2_048


def _point_view(pt):
    """Everything a GraphPoint says, operator by operator, in plain data."""
    a = pt.analysis
    ops = [
        (c.index, c.name, c.op, c.category, c.macs, c.flops, c.bytes_read, c.bytes_written, c.inputs, c.outputs)
        for c in a.ops
    ]
    shapes = [(s.tensor.shape, s.tensor.dtype) for s in a.graph.inputs]
    return ops, shapes, a.kernels, a.totals, a.memory, pt.transient_bytes, pt.timeline, pt.kv_input_bytes, pt.warnings


@pytest.mark.parametrize("spec", [TINY.format(n=2), TINY_MISTRAL])
@pytest.mark.parametrize("kind", ["prefill", "decode"])
def test_step_graph_evaluated_per_point_equals_the_export_bound_there(spec, kind):
    # one symbolic export per step; each point evaluated from its symbolic graph (SymbolicGraph.at) must be the
    # graph TVM gives when the export is bound to that point (bind_symbolic_vars, extracted again), at 3 points:
    # inside and past Mistral's window of 16 (its decode cache holds min(context, 16) slots)
    lm = meta_lm(spec)
    g = StepGraph(kind, lm, cache_layout(lm.config), "float16", name="tiny", source="test", framework="zoo")
    points = [(1, 12), (3, 16), (5, 40)] if kind == "decode" else [(1, 12), (3, 15), (5, 16)]
    for batch, length in points:
        views = {}
        for evaluate in (True, False):  # the same export, then its graph evaluated or the export bound
            g.evaluate, g._points = evaluate, {}
            views[evaluate] = g.point(batch, length, 64)
        fast, bound = views[True], views[False]
        assert _point_view(fast) == _point_view(bound), (batch, length)
        assert fast.analysis.graph.inputs[0].tensor.shape == (batch, length if kind == "prefill" else 1)
        p, q = (run_predictor(x.analysis, "h100-80gb")[0] for x in (fast, bound))
        assert (p.latency_ms, p.memory_mib, p.mig.fits) == (q.latency_ms, q.memory_mib, q.mig.fits)
    assert len(g._symbolic) == 1 and all(v is not None for v in g._graphs.values())  # one export, evaluated


def test_prefill_flops_match_flop_counter_on_the_same_module():
    torch.manual_seed(0)
    model = zoo.build(TINY.format(n=2), device="cpu").module.model  # real weights
    step = PrefillStep(model).eval()
    (ids,) = prefill_inputs(2, 24, vocab=256)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH), counter:
        step(ids)
    g = StepGraph("prefill", model, step.layout, "float32", name="tiny", source="test", framework="torch")
    a = g.point(2, 24, 512).analysis
    assert multiply_add_flops(a) == counter.get_total_flops() > 0
    # the nn.Module route of the whole analysis: the module's own parameters (and its rotary inv_freq buffer)
    before = model.model.embed_tokens.weight.clone()
    s = llm(model, prompt=24, generate=8, batch=2, devices=["h100"], contexts=[32]).llm
    assert s.params == sum(p.numel() for p in model.parameters()) + model.model.rotary_emb.inv_freq.numel()
    assert s.prefill.totals["flops"] == a.totals.flops  # 2 layers: traced at full depth, the same graph
    assert torch.equal(model.model.embed_tokens.weight, before)  # real weights never touched


def test_decode_step_in_place_writes_one_slot():
    torch.manual_seed(0)
    model = zoo.build(TINY.format(n=2), device="cpu").module.model
    layout = cache_layout(model.config)
    ids, *kv = decode_inputs(layout, 2, 8)
    for t in kv:
        t.normal_()
    before = [t.clone() for t in kv]
    with torch.no_grad():
        logits = DecodeStep(model, 8, in_place=True, layout=layout)(ids, *kv)
    assert logits.shape == (2, 1, 256)
    for old, new in zip(before, kv, strict=True):
        assert torch.equal(old[:, :, :7], new[:, :, :7]) and not torch.equal(old[:, :, 7], new[:, :, 7])


# ---- the whole analysis ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(json.dumps(meta_lm(TINY.format(n=4)).config.to_dict()))
    return path


def test_a_config_declaring_its_dtype_is_still_extrapolated(tmp_path):
    """A config with torch_dtype builds its model in that dtype and its 1- and 2-layer rebuilds in float32: the
    layers are still the same (a 70B-class bfloat16 config was traced at all 80 layers: minutes, not seconds)."""
    from analyzer.llm import choose_depths, load_llm

    doc = meta_lm(TINY.format(n=4)).config.to_dict() | {"torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(doc))
    m = load_llm(tmp_path / "config.json")
    assert next(m.lm.parameters()).dtype == torch.bfloat16
    _, depth = choose_depths(m.lm, cache_layout(m.config), full_depth=False, devices=DEVICES)
    assert depth["mode"] == "extrapolated" and depth["traced"] == [1, 2], depth


@pytest.fixture(scope="module")
def extrapolated():
    return llm(f"zoo:{TINY.format(n=4)}", prompt=24, generate=8, batch=2, devices=DEVICES, contexts=[32, 64])


@pytest.fixture(scope="module")
def full(tiny_config):
    return llm(tiny_config, prompt=24, generate=8, batch=2, devices=DEVICES, contexts=[32, 64], full_depth=True)


def test_depth_extrapolation_and_config_route_equal_full_depth_zoo(extrapolated, full):
    a, b = extrapolated.llm, full.llm
    assert a.depth["mode"] == "extrapolated" and a.depth["traced"] == [1, 2]
    assert b.depth["mode"] == "full" and b.depth["traced"] == [4]
    for x, y in ((a.prefill, b.prefill), (a.decode, b.decode)):
        assert x.totals == y.totals, x.kind
        assert x.activation_bytes == y.activation_bytes, x.kind
        for dev in DEVICES:
            assert x.latency_ms[dev] == pytest.approx(y.latency_ms[dev], rel=1e-9)
            assert x.roofline_ms[dev] == pytest.approx(y.roofline_ms[dev], rel=1e-9)
            assert x.slice_ms[dev] == pytest.approx(y.slice_ms[dev], rel=1e-9)
            # the kernel time per basis is additive over layers too: depth 1 and 2 give the 4-layer shares
            shares = x.basis[dev]["kernel_time_share"]
            assert shares == pytest.approx(y.basis[dev]["kernel_time_share"], abs=2e-4)
            assert sum(shares.values()) == pytest.approx(1.0, abs=1e-3) and x.basis[dev]["whole_model"] == "none"
    for x, y in zip(a.devices, b.devices, strict=True):
        assert x.capacity == y.capacity
        assert x.memory == y.memory
        assert x.recommendation.profile == y.recommendation.profile
    assert extrapolated.totals.flops == full.totals.flops and full.analysis.ops and not extrapolated.analysis.ops
    # the top-level peak is the KV cache + the decode step's transient peak in both modes (the full graph's own
    # liveness said less: its logits left out)
    kv_bytes = sum(math.prod(x["shape"]) for x in full.inputs[1:]) * 2  # float16 caches
    assert full.totals.peak_activation_bytes == extrapolated.totals.peak_activation_bytes
    assert full.totals.peak_activation_bytes == kv_bytes + b.decode.activation_bytes
    assert full.model["framework"] == "transformers" and extrapolated.model["framework"] == "zoo"
    # one input list whatever the depth: the ids, then each of the 4 layers' key and value caches
    names = ["input_ids"] + [f"past_{kv}_{i}" for i in range(4) for kv in ("key", "value")]
    assert [x["name"] for x in extrapolated.inputs] == [x["name"] for x in full.inputs] == names
    assert [x["shape"] for x in extrapolated.inputs] == [x["shape"] for x in full.inputs]


def test_the_step_graphs_name_operators_by_the_models_modules(full):
    """The full-depth decode graph's matrix products come from the model's nn.Linear modules, named as the model
    names them (`model.layers.0.self_attn.q_proj`, the oracle: the module tree itself; they were Relax names, lv63):
    4 layers x 7 projections + the LM head, each the source of matmuls, and the text names them and drops the time
    columns of a graph without a prediction."""
    from analyzer.predeploy import render_markdown

    lm = meta_lm(TINY.format(n=4))
    linears = {n for n, m in lm.named_modules() if isinstance(m, torch.nn.Linear)}
    assert len(linears) == 4 * 7 + 1
    matmuls = {c.source for c in full.analysis.ops if c.category == "matmul"}
    assert matmuls == linears
    assert {c.module for c in full.analysis.ops if c.source == "model.layers.3.mlp.down_proj"} == {
        "model.layers.3.mlp.down_proj"
    }
    text = render_markdown(full, "assets")[0]
    assert f"of {full.model['name']}, by FLOPs (no prediction for this graph)" in text
    assert "| lm_head" in text and "predicted µs" not in text


def test_request_numbers_by_hand(extrapolated):
    s = extrapolated.llm
    # tiny Llama: 4 layers x 2 kv heads x 16 x 2 (K, V) x 2 bytes (float16, the default) = 512 B per token
    assert s.dtype == "float16" and s.kv.bytes_per_token == 512
    d = s.devices[0]
    assert d.memory.kv_bytes == 2 * 32 * 512  # batch 2 x (24 + 8) slots x 512 B = 32,768
    assert d.memory.weight_bytes == 2 * s.params  # float16
    assert d.e2e_ms == pytest.approx(d.ttft_ms + 7 * d.tpot_ms)  # 8 generated: the prefill's, then 7 decode steps
    assert d.decode_tokens_per_s == pytest.approx(2 * 1000 / d.tpot_ms)
    # + the H100's eager context (698 MiB measured) + cuBLAS's Hopper workspace (32 MiB)
    total = (d.memory.weight_bytes + d.memory.kv_bytes + d.memory.activation_bytes) / MIB + 698 + 32
    assert d.memory.total_mib == pytest.approx(total)
    # the capacity table against the MIG rule, with the activations of separately traced depth-2 decode and prefill
    # graphs evaluated directly at the answer b and at b + 1 (not the models the search used): each context's
    # sequences as the request's, the prompt (24 tokens, at most the context) prefilled, then decoded
    lm = meta_lm(TINY.format(n=4))
    layout = cache_layout(lm.config)
    g, pre = (
        StepGraph(kind, truncated(lm, 2), replace(layout, windows=layout.windows[:2]), "float16", name="t",
                  source="t", framework="zoo")
        for kind in ("decode", "prefill")
    )  # fmt: skip
    usable = get_device("h100-80gb").profile("1g.10gb").memory_mib
    for i, c in enumerate(d.capacity.contexts):
        b = d.capacity.largest_batch["1g.10gb"][i]

        def need(n, c=c):  # weights + n x c x 512 B of KV cache + activations + context + workspace, MiB
            act = max(g.point(n, c, 512).transient_bytes, pre.point(n, min(24, c), 512).transient_bytes)
            return (d.memory.weight_bytes + n * c * 512 + act) / MIB + 698 + 32

        assert need(b) * 1.05 <= usable < need(b + 1) * 1.05, (c, b)


def test_sliding_window_cache_and_gpt2_tied_embeddings():
    s = llm(f"zoo:{TINY_MISTRAL}", prompt=12, generate=12, batch=2, devices=["h100"], contexts=[24]).llm
    # window 16 < 24 slots: each of 2 layers keeps 16; 2 x 2 kv heads x 16 x 2 B = 128 B per token and layer
    assert s.model["sliding_window"] == [16]
    assert s.devices[0].memory.kv_bytes == 2 * 2 * 16 * 128  # batch x layers x 16 slots x 128 B = 8,192
    g = llm(f"zoo:{TINY_GPT2}", prompt=16, generate=4, batch=1, devices=["h100"], contexts=[32], dtype="float32").llm
    # GPT-2: 2 x 2 layers x 4 heads x 16 x 4 bytes = 1,024 B per token; tied LM head counted once:
    # wte 256 x 64 + wpe 128 x 64 + 2 x (2 LN x 128 + attn 64x192+192 + proj 64x64+64 + fc 64x256+256
    #   + proj 256x64+64) + final LN 128 = 16,384 + 8,192 + 2 x 49,984 + 128 = 124,672
    assert g.kv.bytes_per_token == 1024 and g.model["tied_embeddings"]
    assert g.params == 124_672


# ---- reports, CLI, schema ------------------------------------------------------------------------------------------


def test_report_json_html_markdown(extrapolated, schema, tmp_path):
    doc = extrapolated.to_json()
    jsonschema.validate(doc, schema)
    assert doc["llm"]["kv_cache"]["bytes_per_token"] == 512 and doc["ops"] == []
    for name in ("r.html", "r.md", "r.json"):
        write(extrapolated, tmp_path / name)
    html = (tmp_path / "r.html").read_text()
    assert "LLM serving report" in html and "Concurrency against context" in html and "<svg" in html
    assert (tmp_path / "r_files" / "llm-capacity-h100-80gb.svg").is_file()
    jsonschema.validate(json.loads((tmp_path / "r.json").read_text()), schema)


def test_config_json_route_equals_zoo_for_analyze(tiny_config):
    a = analyze(f"zoo:{TINY.format(n=4)}", batch=2)
    b = analyze(str(tiny_config), inputs=["input_ids:2x16"])
    assert a.totals == b.totals and [c.op for c in a.analysis.ops] == [c.op for c in b.analysis.ops]


def test_cli_json_and_exit_codes(schema, tmp_path):
    runner = CliRunner()
    spec = f"zoo:{TINY.format(n=2)}"
    res = runner.invoke(cli, ["llm", spec, "--prompt", "8", "--generate", "8", "--contexts", "16", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, schema)
    assert doc["llm"]["request"] == {"batch": 1, "prompt": 8, "generate": 8, "context": 16}

    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "evil.Model"}}))
    huge = tmp_path / "huge" / "config.json"  # a model directory holding a config
    huge.parent.mkdir()
    huge.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 10**9}))
    empty, odd_rope, gqa, no_kv = (tmp_path / n / "config.json" for n in ("empty", "rope", "gqa", "no_kv"))
    for path, doc in ((empty, {}), (odd_rope, {"model_type": "llama", "hidden_size": 4000, "num_attention_heads": 32}),
                      (gqa, {"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 5}),
                      (no_kv, {"model_type": "llama", "num_key_value_heads": 0})):  # fmt: skip
        path.parent.mkdir()
        path.write_text(json.dumps(doc))
    for args, words in (
        ([str(empty.parent)], "not a transformers config (a JSON object with a 'model_type')"),
        # transformers' reason is on the line after its first: 4000 / 32 = 125, an odd rotary dimension
        ([str(odd_rope.parent)], "RoPE requires an even rotary dimension"),
        ([str(gqa.parent)], "num_key_value_heads (5) must divide num_attention_heads (32)"),
        ([str(no_kv.parent)], "num_key_value_heads = 0: a model has at least one attention head"),
        ([str(bad)], "custom model code"),
        ([str(huge.parent)], "num_hidden_layers = 1000000000"),
        ([spec, "--prompt", "16", "--context", "16"], "must exceed --prompt"),
        ([spec, "--prompt", "500", "--generate", "100"], "512 positions"),
        ([spec, "--device", "tpu"], "unknown device"),
        (["zoo:resnet18"], "not a decoder LM"),
        ([str(tmp_path / "missing.json")], "no such file"),
        ([spec, "--contexts", "1,x"], "--contexts"),
    ):
        res = runner.invoke(cli, ["llm", *args])
        assert res.exit_code == 2, (args, res.output)
        assert words in res.stderr, (args, res.stderr)
    res = runner.invoke(cli, ["analyze", str(bad)])  # the general route refuses it too
    assert res.exit_code == 2 and "custom model code" in res.stderr


# ---- the GPU harness's steps -------------------------------------------------------------------------------------


def test_harness_step_configs_run_on_cpu():
    from predictor.measure.configs import MeasureConfig
    from predictor.measure.llm_steps import build, step_config

    pre = step_config(TINY.format(n=2), "prefill", 2, 12, "float32")
    dec = step_config(TINY.format(n=2), "decode", 2, 20, "float32")
    assert pre.id != dec.id and MeasureConfig.from_dict(dec.to_dict()) == dec
    # decode estimate: 600 MiB context + weights + KV; KV = 2 x 20 x (2 layers x 2 x 2 x 16 x 4 B = 512) = 20,480 B
    weights = sum(p.numel() for p in meta_lm(TINY.format(n=2)).parameters()) * 4
    assert dec.est_memory_mb == pytest.approx(600 + (weights + 20_480) / MIB, abs=1e-3)
    for cfg, shape in ((pre, (2, 1, 256)), (dec, (2, 1, 256))):
        fn, args, names = build(cfg.to_dict(), "cpu")
        with torch.inference_mode():
            out = fn(*args)
        logits = out[0] if isinstance(out, tuple) else out
        assert tuple(logits.shape) == shape and len(names) == len(args)
        assert np.isfinite(logits.float().numpy()).all()


@pytest.mark.parametrize("kind", ["prefill", "decode"])
def test_step_attention_is_the_fused_kernel_eager_cuda_launches(kind):
    """The steps' graphs keep transformers' sdpa call as one attention op (exported with symbolic sizes: the
    import must not fall back to torch's math decomposition), and the kernel view sees one fused kernel per layer
    with the backend eager CUDA PyTorch picks (a dispatch trace of the same module on the meta device,
    tests/kernel_trace.py)."""
    from kernel_trace import trace_kernels

    lm = meta_lm(TINY.format(n=2)).to(torch.float16)
    layout = cache_layout(lm.config)
    g = StepGraph(kind, lm, layout, "float16", name="tiny", source="test", framework="zoo")
    a = g.point(2, 32, 512).analysis
    assert [c.op for c in a.ops if "attention" in c.op or "softmax" in c.op] == ["relax.nn.attention_bias"] * 2
    ours = [k for k in a.kernels if k.kind == "attention"]
    if kind == "prefill":
        module, inputs = PrefillStep(lm, layout), prefill_inputs(2, 32, vocab=256, device="meta")
    else:
        module = DecodeStep(lm, 32, layout=layout)
        inputs = decode_inputs(layout, 2, 32, dtype=torch.float16, device="meta")
    traced = trace_kernels(module, inputs).attention()
    assert len(ours) == len(traced) == 2  # one per layer, fused
    assert {k.params["backend"] for k in ours} == {"flash"}
    assert [k.params["causal"] for k in ours] == [kind == "prefill"] * 2
    if kind == "prefill":  # transformers passes is_causal and no mask: flash
        assert all("flash" in k.op for k in traced)
    else:  # eager decode passes its all-visible (constant) mask: the memory-efficient kernel, which the view
        # costs as flash (the mask collapses); both read the same cache, at the same e_memory and launch
        assert all("efficient" in k.op for k in traced)
        # work units: the trace folds the 2 query heads per KV head onto rows, (2 x 2) x 2 rows; the view sees
        # (1 x 4) x 2 rows: the same 4 units of 2 query rows over 32 slots
        assert traced[0].shapes[0] == (2, 2, 2, 16)
        assert [(k.params["b"] * k.params["h"], k.params["s"], k.params["t"]) for k in ours] == [(4, 2, 32)] * 2


def _step_at_2x32(kind: str, lm, layout, dtype):
    """The eager step module of `lm` and its meta inputs: 2 sequences, a 32-token prompt (prefill) or context
    (decode, its cache in `dtype`)."""
    if kind == "prefill":
        return PrefillStep(lm, layout), prefill_inputs(2, 32, vocab=layout.vocab, device="meta")
    return DecodeStep(lm, 32, layout=layout), decode_inputs(layout, 2, 32, dtype=dtype, device="meta")


def test_the_steps_record_library_calls_and_copies():
    """The step graphs carry what the PyTorch routes record (`LoadedModel.op_calls`, `.op_copies`): a 2-layer BLOOM's
    baddbmm (ALiBi) is the copy and the GEMM eager launches, one call, and its decode step's kernels are the eager
    dispatch trace's, kernel for kernel in count (52; 48 before: the copies of the cache's transposed keys and values
    and the calls were not recorded). The prefill step stays within the suite's bound: its cache keeps `.contiguous()`
    copies of the keys and values that the attention then reshapes from the transposed views again, one value to
    TVM (56 against the trace's 60)."""
    import transformers
    from kernel_trace import COUNT_TOL, input_dependent, trace_kernels

    from passes.graph import is_blas_call

    cfg = transformers.BloomConfig(vocab_size=256, hidden_size=64, n_layer=2, n_head=4)
    with torch.device("meta"):
        lm = transformers.BloomForCausalLM(cfg).eval()
    layout = cache_layout(lm.config)
    for kind in ("prefill", "decode"):
        step = StepGraph(kind, lm, layout, "float32", name="bloom", source="test", framework="zoo")
        a = step.point(2, 32, 512).analysis
        calls = [(k.kind, k.call) for k in a.kernels if is_blas_call(k.call)]
        assert [c[0] for c in calls] == ["copy", "gemm"] * 2 and len({c[1] for c in calls}) == 2
        traced = trace_kernels(*_step_at_2x32(kind, lm, layout, torch.float32)).dependent_count
        kernels = input_dependent(a)[0]
        if kind == "decode":
            assert kernels == traced == 52
        else:
            assert abs(kernels / traced - 1) <= COUNT_TOL, (kernels, traced)


def test_half_precision_steps_run_the_models_own_casts():
    """A 2-layer Llama served in float16: RMSNorm's upcasts and the rotary embedding's `.float()` are float32 kernels
    in both steps, whose input-dependent kernels are the eager dispatch trace's of the float16 model, kernel for
    kernel in count (prefill 90, decode 88; 80 and 78 before, when the step's float32 export lost the casts); the
    same for the model with real weights on the CPU (its half copy is made on the meta device, as the stand-ins)."""
    import transformers
    from kernel_trace import input_dependent, trace_kernels

    cfg = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4
    )
    cfg.num_key_value_heads = 2
    with torch.device("meta"):
        lm = transformers.LlamaForCausalLM(cfg).eval()
    layout = cache_layout(lm.config)
    for kind, count in (("prefill", 90), ("decode", 88)):
        a = StepGraph(kind, lm, layout, "float16", name="llama", source="test", framework="zoo").point(2, 32, 512)
        traced = trace_kernels(*_step_at_2x32(kind, lm.to(torch.float16), layout, torch.float16)).dependent_count
        lm.float()
        assert input_dependent(a.analysis)[0] == traced == count, kind
        assert sum(k.op == "relax.astype" and k.dtype == "float32" for k in a.analysis.kernels) >= 2 * 2 + 1
        cpu = transformers.LlamaForCausalLM(cfg).eval()
        b = StepGraph(kind, cpu, layout, "float16", name="llama", source="test", framework="torch").point(2, 32, 512)
        assert [(k.op, k.dtype, k.bytes) for k in b.analysis.kernels] == [
            (k.op, k.dtype, k.bytes) for k in a.analysis.kernels
        ], kind


def test_the_table_and_the_recommendation_name_the_same_slice(tmp_path):
    """With a TPOT target the smallest slice by memory may be too slow: the table's MIG column says what the
    recommendation line says (it used to show the smallest slice by memory alone)."""
    from analyzer.predeploy import sections

    spec = "zoo:llama?layers=2&hidden=1024&heads=8&kv_heads=8&intermediate=4096&vocab=32000&max_pos=2048&seq_len=16"
    kw = {"prompt": 512, "generate": 8, "batch": 32, "devices": ["h100"], "contexts": [520]}
    rec = llm(spec, **kw).llm.devices[0].recommendation
    order = [p for p in ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb") if rec.fits.get(p)]
    assert rec.profile == order[0]
    # a target the smallest slice misses but a larger one meets (each slice's TPOT from the same report)
    slower, faster = rec.latency[order[0]].tpot_ms, rec.latency[order[-1]].tpot_ms
    assert faster < slower
    rep = llm(spec, **kw, tpot_ms=(slower + faster) / 2)
    d = rep.llm.devices[0]
    assert d.recommendation.profile not in (None, order[0])
    _, secs = sections(rep)
    table = next(b for s in secs for b in s.blocks if getattr(b, "header", [None])[-1:] == ["MIG slice"])
    assert table.rows[0][-1] == d.recommendation.profile
