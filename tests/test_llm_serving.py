"""`preflight llm --runtime vllm` (`predictor.serving_engine`): KV blocks and sequences that fit, all-reduce bytes per
layer, expected experts touched, power-model energy of a step, all by hand; parameters against transformers' own
model; the GEMM FLOPs of the formula-level decode step against the traced graph's; the CLI and JSON Schema."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import jsonschema
import pytest
import torch
from click.testing import CliRunner
from test_llm_formulas import value  # a formula evaluated at a point (tests/ is on sys.path)

from analyzer.cli import cli
from analyzer.errors import UsageError
from analyzer.llm import llm
from analyzer.render import SCHEMA_FILE
from predictor import serving_engine as eng
from predictor.devices import get_device
from predictor.power import PowerParams

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# a tiny Llama: 2 layers, hidden 64 = 4 heads x 16, 2 KV heads, MLP 128, vocabulary 100
TINY = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 100,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}


def test_arch_params_match_transformers_model():
    from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

    cfg = {k: v for k, v in TINY.items() if k not in ("model_type", "architectures")}
    with torch.device("meta"):
        lm = LlamaForCausalLM(LlamaConfig(**cfg))
    assert eng.Arch.from_config(TINY).params() == sum(p.numel() for p in lm.parameters())
    moe = {**cfg, "num_local_experts": 4, "num_experts_per_tok": 2}
    with torch.device("meta"):
        mx = MixtralForCausalLM(MixtralConfig(**moe))
    a = eng.Arch.from_config({"model_type": "mixtral", **moe})
    assert (a.experts, a.top_k, a.moe_layers, a.expert_intermediate) == (4, 2, 2, 128)
    assert a.params() == sum(p.numel() for p in mx.parameters())


def test_kv_blocks_and_sequences_that_fit_by_hand():
    a = eng.Arch.from_config(TINY)
    plan = eng.engine_memory(a, 1024, utilization=0.5, profile_tokens=100, non_torch_mib=0)
    # weights: per layer attention 64 x (64 + 2 x 32) + 64 x 64 + 2 norms x 64 = 12,416; x 2 layers = 24,832
    # MLP 3 x 64 x 128 = 24,576, x 2 = 49,152; embeddings 2 x 100 x 64 = 12,800; final norm 64: 86,848 x 2 bytes
    assert plan.weight_bytes == 173_696
    # activations: 100 tokens x (3 x 64 + (4 + 2 x 2) x 16 + 3 x 128 = 704) x 2 bytes + 256 x 100 x 4 = 243,200
    assert plan.activation_bytes == 243_200
    # pool: 0.5 x 1024 MiB = 536,870,912 - 173,696 - 243,200 = 536,454,016 bytes
    assert plan.kv_pool_bytes == 536_454_016
    # a block: 16 tokens x 2 (K, V) x 2 KV heads x 16 x 2 bytes x 2 layers = 4,096 bytes; 536,454,016 // 4,096
    assert plan.block_bytes == 4096
    assert plan.blocks == 130_970
    # a sequence of 1,000 tokens holds ceil(1000 / 16) = 63 blocks: 130,970 // 63 = 2,078
    assert plan.sequences(1000) == 2078
    assert plan.sequences(16) == 130_970 and plan.sequences(17) == 65_485
    # tensor parallel 2: 1 KV head per GPU, blocks of 2,048 bytes
    assert eng.engine_memory(a, 1024, tp=2).block_bytes == 2048
    # a model that does not fit: 8 GiB of weights on a 4 GiB budget
    big = eng.Arch(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=14336, vocab=128256)
    assert not eng.engine_memory(big, 4096).fits


def test_a_sliding_window_caps_blocks_decode_attention_and_the_prefill_band_by_hand(tmp_path):
    """Mistral-7B-v0.1's window (4,096 on every layer): vLLM keeps a sequence's last ceil(4096 / 16) = 256 blocks
    and its decode attention reads at most 4,096 tokens, so capacity and TPOT stop moving past the window."""
    from dataclasses import replace

    a = replace(eng.Arch.from_config(TINY), window=64)
    plan = eng.engine_memory(a, 1024, utilization=0.5, profile_tokens=100, non_torch_mib=0)
    # blocks per sequence: ceil(min(context, 64) / 16): 1,000 tokens -> 4 (without the window 63); 130,970 // 4
    assert plan.blocks_per_sequence(1000) == 4 and plan.sequences(1000) == 32_742 and plan.sequences(40) == 43_656
    # prefill of 100 tokens: 64^2 / 2 + (100 - 64) x 64 = 2,048 + 2,304 = 4,352 (query, key) pairs; 50 tokens: 1,250
    assert a.causal_pairs(100) == 4352 and a.causal_pairs(50) == 1250
    # decode attention at context 1,000: 4 FLOPs x 4 heads x 16 x 64 tokens per sequence; KV read 64 x 2 x 32 x 2 B
    s = eng.Split.of(a, 1)
    (att,) = [k for k in eng.layer_kernels(a, s, 3, 3, 1000.0, 2.0, "float16", prefill=False, count=1)
              if k.kind == "attention"]  # fmt: skip
    assert att.flops == 3 * 4 * 4 * 16 * 64 and att.bytes_read == (3 * 64 * 2 * 32 + 3 * 64) * 2
    # the whole report: the window on every layer keeps TPOT at 128 and 512 live tokens equal; without it, not
    tpots = {}
    for window in (128, None):
        cfg = {**TINY, "model_type": "mistral", "architectures": ["MistralForCausalLM"], "sliding_window": window}
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        rep = llm(str(tmp_path / "config.json"), prompt=64, generate=16, batch=2, devices=["h100-80gb"],
                  contexts=[128, 512], runtime="vllm")  # fmt: skip
        tpots[window] = [row["tpot_ms"] for row in rep.llm.devices[0].sweep]
    assert tpots[128][0] == pytest.approx(tpots[128][1], rel=1e-12) and tpots[None][1] > tpots[None][0]
    assert tpots[128][0] == pytest.approx(tpots[None][0], rel=1e-12)  # at the window both read 128 tokens


def test_a_batch_the_gpu_cannot_hold_is_said_with_how_many_fit():
    """Llama-2-7B on one H100 under vLLM: 1,000 sequences of 1,280 tokens need 1,000 x 1,280 x 512 KiB (2 x 32
    layers x 32 KV heads x 128 x 2 B per token) = 625 GiB of KV cache, against 0.9 x 79.6 GiB less 12.6 GiB of
    weights (at most 100 sequences of 640 MiB): the report says how many fit (the engine's own count, which also
    takes the activations and CUDA context) and what vLLM does: its scheduler runs that many at once and the rest
    wait, so the latencies are those of a request of that many sequences and the queue is served in waves of them;
    8 sequences fit and get no such warning."""
    big = llm("zoo:llama_7b", prompt=1024, generate=256, batch=1000, devices=["h100-80gb"], runtime="vllm")
    (d,) = big.llm.devices
    most = d.engine["memory_per_gpu"]["full GPU"]["sequences_that_fit"]
    assert 0 < most <= (0.9 * 81_559 - 12_852.5) // 640 and not d.fits["full GPU"]
    (w,) = [w for w in big.warnings if "do not fit" in w]
    assert f"at most {most} do (vllm runtime)" in w and f"{most} run and the rest wait" in w
    # the running sequences are a request of `most` that fits: the same latencies, memory and decode rate
    (r,) = llm("zoo:llama_7b", prompt=1024, generate=256, batch=most, devices=["h100-80gb"], runtime="vllm").llm.devices
    assert r.fits["full GPU"] and r.engine["queue"] is None
    assert (d.ttft_ms, d.tpot_ms, d.e2e_ms, d.decode_tokens_per_s) == (r.ttft_ms, r.tpot_ms, r.e2e_ms,
                                                                      r.decode_tokens_per_s)  # fmt: skip
    assert d.memory == r.memory and d.engine["decode_step"]["running"] == most
    # the decode block's counts are the batch's, its latency the running step's, and it says so (JSON valid)
    doc = big.to_json()
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))
    assert doc["llm"]["decode"]["batch"] == 1000 and doc["llm"]["decode"]["running"] == {"h100-80gb": most}
    assert big.llm.decode.latency_ms["h100-80gb"] == d.engine["decode_step_ms"]
    # the queue: 1,000 requests in waves of `most`, request i waiting floor(i / most) waves of E2E before its prefill
    waves = -(-1000 // most)
    q = d.engine["queue"]
    assert (q["requests"], q["running"], q["waves"]) == (1000, most, waves)
    assert q["all_done_ms"] == pytest.approx(waves * r.e2e_ms, rel=1e-12)
    assert q["mean_wait_ms"] == pytest.approx(sum(i // most for i in range(1000)) / 1000 * r.e2e_ms, rel=1e-12)
    assert d.output_tokens_per_s == pytest.approx(1000 * 256 / (waves * r.e2e_ms / 1e3), rel=1e-12)
    # 0.19 of an H100's memory (15.1 GiB) holds the 12.6 GiB of weights but not one sequence of 4,000 tokens (250
    # blocks of 8 MiB, 1.95 GiB, beside 1 GiB outside torch): said, no queue (it divided by zero)
    none = llm("zoo:llama_7b", prompt=3000, generate=1000, batch=2, devices=["h100-80gb"], runtime="vllm",
               gpu_memory_utilization=0.19)  # fmt: skip
    (d,) = none.llm.devices
    assert d.engine["fits_model"] and d.engine["memory_per_gpu"]["full GPU"]["sequences_that_fit"] == 0
    assert d.engine["queue"] is None
    assert any(w.startswith("h100-80gb: not one sequence of 4,000 tokens fits its KV pool") for w in none.warnings)
    small = llm("zoo:llama_7b", prompt=1024, generate=256, batch=8, devices=["h100-80gb"], runtime="vllm")
    assert small.llm.devices[0].fits["full GPU"] and not [w for w in small.warnings if "do not fit" in w]


def test_sizes_a_config_leaves_to_transformers_defaults_are_named(tmp_path):
    """TINY without hidden_size and vocab_size: the model gets LlamaConfig's 4,096 and 32,000, and the report says
    so; GPT-2's `n_embd` is its hidden_size (an alias), so setting it is setting the size."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in TINY.items() if k not in ("hidden_size", "vocab_size")}))
    rep = llm(str(path), prompt=8, generate=8, contexts=[16], runtime="vllm")
    (w,) = [w for w in rep.warnings if "does not set" in w]
    assert w.startswith("the config does not set hidden_size = 4,096, vocab_size = 32,000: transformers' defaults")
    path.write_text(json.dumps(TINY))
    assert not [w for w in llm(str(path), prompt=8, generate=8, contexts=[16], runtime="vllm").warnings
                if "does not set" in w]  # fmt: skip
    from transformers import GPT2Config

    from analyzer.frontends.hf_config import defaulted_sizes

    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100}))
    assert defaulted_sizes(path, GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100)) == []


def test_allreduce_bytes_per_layer_by_hand():
    a = eng.Arch(layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, intermediate=28672, vocab=128256)
    s = eng.Split.of(a, 4)
    assert (s.heads, s.kv_heads, s.intermediate, s.vocab) == (16, 2, 7168, 32064)
    ks = eng.layer_kernels(a, s, 8, 8, 100.0, 2.0, "bfloat16", prefill=False, count=1)
    ks += eng.mlp_kernels(a, s, 8, 2.0, "bfloat16", moe=False, count=1)
    comm = [k.comm_bytes for k in ks if k.kind == "allreduce"]
    assert comm == [131_072, 131_072]  # two per layer, each 8 tokens x 8192 x 2 bytes
    # a ring over 4 GPUs sends 2 x 3 / 4 = 1.5 x the message per GPU: 196,608 bytes
    assert eng.allreduce_bytes_on_link(131_072, 4) == 196_608
    # at 450 GB/s per direction: 196,608 / 450e9 s = 0.43691 us, + 8 us latency
    assert eng.allreduce_s(131_072, 4, 450e9) == pytest.approx(196_608 / 450e9 + 8e-6)
    assert eng.allreduce_s(131_072, 1, 450e9) == 0.0
    assert get_device("h100-80gb").nvlink_gbs == 450.0  # 900 GB/s bidirectional, halved


def test_expected_experts_touched_by_hand():
    assert eng.expected_experts(8, 2, 1) == pytest.approx(2.0)  # one token touches its k experts
    assert eng.expected_experts(8, 2, 2) == pytest.approx(3.5)  # 8 x (1 - 0.75^2) = 8 x 0.4375
    assert eng.expected_experts(64, 8, 4) == pytest.approx(64 * (1 - (7 / 8) ** 4))  # 26.484375
    assert eng.expected_experts(8, 2, 1000) == pytest.approx(8.0)
    # the expert GEMMs of a MoE layer run count x touched times, on B k / touched tokens each
    a = eng.Arch.from_config({**TINY, "num_local_experts": 8, "num_experts_per_tok": 2})
    s = eng.Split.of(a, 1)
    ks = {k.name: k for k in eng.mlp_kernels(a, s, 2, 2.0, "bfloat16", moe=True, count=1)}
    assert ks["expert_gate_up_proj"].count == pytest.approx(3.5)
    assert ks["expert_gate_up_proj"].params["m"] == pytest.approx(2 * 2 / 3.5)
    # shared experts (DeepSeek-style n_shared_experts x moe_intermediate_size) run on every token
    ds = eng.Arch.from_config(
        {**TINY, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_shared_experts": 2}
    )
    assert (ds.expert_intermediate, ds.shared_intermediate) == (32, 64)
    # Qwen-MoE: layer i is sparse when (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers
    qw = {**TINY, "num_hidden_layers": 6, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    qw |= {"decoder_sparse_step": 2, "mlp_only_layers": [1]}
    assert eng.Arch.from_config(qw).moe_layers == 2  # layers 3 and 5 (layer 1 is listed dense)
    assert eng.Arch.from_config({**qw, "first_k_dense_replace": 4}).moe_layers == 1  # only layer 5
    with pytest.raises(eng.EngineConfigError, match="latent attention"):
        eng.Arch.from_config({**TINY, "kv_lora_rank": 512})


def test_power_model_energy_of_a_tiny_decode_step_by_hand():
    step = eng.StepTime(1e-3, 2e-3, 1e-3, 0.0, 0.5e-3, 10, 0.0, 0.0)  # 1 ms compute, 2 ms memory, 1 ms idle
    pw = PowerParams(gap_w=200.0, compute_w=700.0, memory_w=600.0, limit_w=700.0)
    # P = 200 + 500 x 0.25 + 400 x 0.5 = 525 W; E = 525 W x 4 ms = 2.1 J
    assert eng.step_energy_j(step, pw) == pytest.approx((2.1, 525.0))
    # the tiny model's real decode step on an h100: shares add to 1 and the energy is power x time
    from predictor.power import power_params

    host = eng.HostParams(step_ms=1.0, per_block_ms=0.01, per_tp_worker_ms=5.0)
    t = eng.decode_step(eng.Arch.from_config(TINY), get_device("h100-80gb"), 4, 100.0, host=host)
    assert sum(t.shares()) == pytest.approx(1.0)
    e, w = eng.step_energy_j(t, power_params("h100-80gb"))
    assert e == pytest.approx(w * t.total_s) and power_params("h100-80gb").gap_w <= w <= 700.0
    # the host's time is in it, at idle power: 1 ms + 0.01 ms x 4 sequences x ceil(100 / 16) = 7 blocks = 1.28 ms
    assert t.host_s == pytest.approx(1.28e-3)


def test_steady_state_energy_per_token_of_one_prefill_and_one_decode_step_by_hand():
    # a steady state of two steps: one decode step of 8 sequences (10 ms memory-bound + 2 ms gap) and one prefill step
    # (20 ms compute-bound) per period; the period outputs the decode step's 8 tokens
    dec = eng.StepTime(0.0, 10e-3, 2e-3, 0.0, 0.0, 10, 0.0, 0.0)
    pre = eng.StepTime(20e-3, 0.0, 0.0, 0.0, 0.0, 10, 0.0, 0.0)
    pw = PowerParams(gap_w=100.0, compute_w=700.0, memory_w=500.0, limit_w=700.0)
    # decode: 500 W x 10 ms + 100 W x 2 ms = 5.2 J; prefill: 700 W x 20 ms = 14 J; period 12 + 20 = 32 ms, 19.2 J
    # -> 19.2 J / 8 tokens = 2.4 J per token, 19.2 J / 32 ms = 600 W
    e, w, t = eng.steady_state_energy([(dec, 1.0), (pre, 1.0)], 8, pw)
    assert (e, w, t) == pytest.approx((2.4, 600.0, 0.032))
    # the decode step's power x the period / 8 (433.3 W x 32 ms / 8 = 1.733 J) would leave out the prefill's own power
    assert e != pytest.approx((100.0 + 400.0 * 10 / 12) * 0.032 / 8)
    # one prefill every second decode step (share 0.5): 5.2 + 7 = 12.2 J over 12 + 10 = 22 ms -> 1.525 J, 554.5 W
    e, w, t = eng.steady_state_energy([(dec, 1.0), (pre, 0.5)], 8, pw)
    assert (e, w, t) == pytest.approx((1.525, 12.2 / 0.022, 0.022))


def test_decode_gemm_flops_match_the_traced_graph(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    rep = llm(str(path), prompt=8, generate=8, batch=3, contexts=[16], full_depth=True, devices=["h100-80gb"])
    traced = sum(k.flops for k in rep.analysis.kernels if k.kind == "gemm")
    model, sample = eng.step_kernels(eng.Arch.from_config(TINY), 1, 3, context=16.0, dtype="float16")
    formula = sum(k.flops * k.count for k in model + sample if k.kind == "gemm")
    # by hand: per token 2 x (64 x 128 qkv + 64 x 64 o + 64 x 256 gate/up + 128 x 64 down) x 2 layers + 2 x 64 x 100
    assert formula == 3 * (2 * (8192 + 4096 + 16384 + 8192) * 2 + 2 * 6400) == 480_768
    assert traced == formula
    # bytes: each GEMM reads A (m x k) and W (k x n) and writes m x n (2 bytes each), in both. The engine fuses
    # q, k, v into one GEMM and gate, up into one: it reads the normed activations (3 x 64) once where the traced
    # graph reads them 3 + 2 times: 2 layers x 3 extra reads x 3 x 64 x 2 bytes = 2,304 bytes fewer
    traced_bytes = sum(k.bytes_read + k.bytes_written for k in rep.analysis.kernels if k.kind == "gemm")
    formula_bytes = sum((k.bytes_read + k.bytes_written) * k.count for k in model + sample if k.kind == "gemm")
    assert traced_bytes - formula_bytes == 2 * 3 * 3 * 64 * 2


def test_cli_vllm_runtime_json_schema_and_errors(tmp_path):
    schema = json.loads(SCHEMA_FILE.read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    runner = CliRunner()
    base = ["llm", str(path), "--prompt", "8", "--generate", "8", "--contexts", "16", "--format", "json"]
    vllm = [*base, "--runtime", "vllm", "--tensor-parallel", "2", "--batch", "4"]
    res = runner.invoke(cli, [*vllm, "--max-num-batched-tokens", "0"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, schema)
    d = doc["llm"]["devices"][0]
    assert doc["llm"]["runtime"]["name"] == "vllm" and doc["llm"]["runtime"]["tensor_parallel"] == 2
    assert d["engine"]["chunked_prefill"] is None
    step = d["engine"]["decode_step"]
    # no chunked prefill: TPOT = the decode step + batch / generate = 4 / 8 prefills of one prompt per step
    assert d["tpot_ms"] == pytest.approx(d["engine"]["decode_step_ms"] + 0.5 * d["engine"]["prefill_ms"])
    # the text's line adds up: TPOT = the decode step + what the prefills add per step (it printed the prefill's
    # whole time beside a share, which did not add up with chunked prefill)
    chunked = json.loads(runner.invoke(cli, vllm).stdout)["llm"]["devices"][0]  # the default: chunked prefill
    text = " ".join(runner.invoke(cli, [a for a in vllm if a not in ("--format", "json")]).stdout.split())
    tpot, decode_ms = chunked["tpot_ms"], chunked["engine"]["decode_step_ms"]
    assert f"TPOT {tpot:.3g} ms = decode step {decode_ms:.3g} ms" in text
    assert f"+ {tpot - decode_ms:.3g} ms of prefill chunks per step" in text
    assert step["allreduce_ms"] > 0 and step["cuda_graph_batch"] == 4
    assert d["energy_per_token_j"] > 0 and d["avg_power_w"] > 0
    plan = d["engine"]["memory_per_gpu"]["full GPU"]
    assert plan["blocks_per_sequence"] == 1  # context 16 = one block of 16
    eager = json.loads(runner.invoke(cli, base).stdout)["llm"]["devices"][0]
    jsonschema.validate(json.loads(runner.invoke(cli, base).stdout), schema)
    assert eager["energy_per_token_j"] > 0 and "engine" not in eager
    for args, words in (
        (["--runtime", "vllm", "--tensor-parallel", "3"], "do not split"),
        (["--tensor-parallel", "2"], "needs --runtime vllm"),
        (["--runtime", "vllm", "--gpu-memory-utilization", "1.5"], "gpu-memory-utilization"),
        (["--runtime", "vllm", "--tensor-parallel", "2", "--device", "a100-pcie-40gb"], "NVLink"),
        (["--max-num-batched-tokens", "64"], "needs --runtime vllm"),
        (["--block-size", "32"], "--gpu-memory-utilization need --runtime vllm"),  # the eager runtime has no pool
        (["--gpu-memory-utilization", "0.5"], "--gpu-memory-utilization need --runtime vllm"),
        (["--runtime", "vllm", "--batch", "4", "--max-num-batched-tokens", "4"], "beside 4 decodes (give more than 4,"),
        (["--runtime", "vllm", "--max-num-batched-tokens", "-1"], "max-num-batched-tokens"),
        (["--runtime", "vllm", "--block-size", "7"], "--block-size must be one of 8, 16, 32"),
        (["--runtime", "vllm", "--tensor-parallel", "2", "--device", "h100-80gb:3g.40gb"], "a MIG slice has no NVLink"),
    ):
        res = runner.invoke(cli, [*base, *args])
        assert res.exit_code == 2, (args, res.output)
        assert words in res.stderr, (args, res.stderr)
    # 4 query heads over 3 KV heads: no grouped-query split exists (the eager runtime fails in torch.export)
    path.write_text(json.dumps(TINY | {"num_key_value_heads": 3}))
    res = runner.invoke(cli, [*base, "--runtime", "vllm"])
    assert res.exit_code == 2 and "num_key_value_heads (3) must divide num_attention_heads (4)" in res.stderr
    # an empty stack or vocabulary: a config may leave a stack empty, a served decoder cannot (was an internal error)
    for key, words in (("num_hidden_layers", "at least one layer"), ("vocab_size", "a vocabulary of at least one")):
        path.write_text(json.dumps(TINY | {key: 0}))
        res = runner.invoke(cli, base)
        assert res.exit_code == 2 and f"{key} = 0: " in res.stderr and words in res.stderr, res.output


def test_captured_batches_and_host_time(tmp_path):
    assert [eng.captured_batch(b) for b in (1, 3, 5, 9, 256, 257)] == [1, 4, 8, 16, 256, None]
    assert math.isclose(eng.GPU_MEMORY_UTILIZATION, 0.9) and eng.BLOCK_SIZE == 16
    h = eng.HostParams(step_ms=2.0, per_block_ms=0.01, per_tp_worker_ms=5.0)
    # 100 sequences at context 40: ceil(40 / 16) = 3 blocks each; tp 4: 2 + 0.01 x 300 + 5 x 3 = 20 ms
    assert h.decode_s(100, 40.0, tp=4) == pytest.approx(20e-3)
    assert h.decode_s(100, 48.0) == pytest.approx(5e-3) and h.prefill_s(7) == 0.0  # 48 = 3 blocks exactly
    assert not h.extrapolates(1e6)  # no fitted range given: never flagged
    # which fit each device takes: its own, its GPU's for a MIG slice, its generation's fitted GPU otherwise
    fitted = eng.engine_profile("vllm-0.5.4")
    table = fitted.devices
    assert set(table) == {"h100-80gb", "a100-40gb"} and fitted.fitted and fitted.any_device is None
    # the H100 rows' mean live contexts: shortest a code row, 128 + 66 / 2 = 161 (starcoder2-15b); longest a chat
    # row, 136 + 513 / 2 = 392.5 (Mistral-Large)
    assert table["h100-80gb"].context_range == (161.0, 392.5)
    assert table["h100-80gb"].extrapolates(1024 + 128) and not table["h100-80gb"].extrapolates(300)
    assert eng.host_params(get_device("h100-80gb"), "vllm-0.5.4") == table["h100-80gb"]
    assert fitted.host(get_device("a100-40gb:1g.5gb")) == table["a100-40gb"]
    moved = fitted.host(get_device("h200-141gb"))
    assert (moved.step_ms, moved.per_block_ms) == (table["h100-80gb"].step_ms, table["h100-80gb"].per_block_ms)
    assert moved.source.startswith("transfer: h100-80gb")
    assert fitted.host(get_device("a100-80gb")).step_ms == table["a100-40gb"].step_ms  # same GA100 generation
    # the overlapped profile: one entry for every GPU, not fitted, no fitted context range
    over = eng.engine_profile("vllm-overlapped")
    assert not over.fitted and over.devices == {} and "#11133" in over.source
    h = over.host(get_device("a100-40gb:1g.5gb"))
    # vLLM V1's gap between decode steps with asynchronous scheduling, 150-170 us at batch 256: 0.16 ms flat
    assert (h.step_ms, h.per_seq_ms, h.per_block_ms, h.per_tp_worker_ms, h.context_range) == (0.16, 0, 0, 0, None)
    assert h.decode_s(80, 1000.0, tp=4) == pytest.approx(0.16e-3)  # no sequence, block or worker term
    bad = tmp_path / "p.json"
    for text, words in (
        ("{", "cannot read"),
        ('{"schema": "x"}', "not a serving-parameter file"),
        (json.dumps({"schema": eng.SERVING_SCHEMA, "profiles": {"p": {"source": "s"}}}), "no host figures"),
        (
            json.dumps(
                {"schema": eng.SERVING_SCHEMA, "profiles": {"p": {"source": "s", "any_device": {"step_ms": 1}}}}
            ),
            "default_profile",
        ),
    ):
        bad.write_text(text)
        with pytest.raises(eng.ServingParamsError, match=words):
            eng.load_profiles(bad)


def test_host_time_per_prompt_pauses_the_decodes_by_hand():
    """`per_prompt_ms`: host time of a prefill step per prompt it admits, while the GPU idles; TPOT grows by the
    prompts admitted per decode step x per_prompt_ms, TTFT by one prompt's, the energy per token by that time at the
    power model's gap power over the batch's tokens."""
    from predictor.power import power_params

    a, dev, pw = eng.Arch.from_config(TINY), get_device("h100-80gb"), power_params("h100-80gb")
    base = eng.HostParams(step_ms=3.0, per_block_ms=0.0, per_tp_worker_ms=0.0)
    plus = eng.HostParams(step_ms=3.0, per_block_ms=0.0, per_tp_worker_ms=0.0, per_prompt_ms=5.0)
    assert plus.prefill_s(3) == pytest.approx(15e-3)  # 5 ms x 3 prompts
    assert base.prefill_s(3) == 0.0 and plus.to_json()["per_prompt_ms"] == 5.0
    s0 = eng.serve(a, dev, 10, 32, 4, pw, host=base)
    s1 = eng.serve(a, dev, 10, 32, 4, pw, host=plus)
    # 10 sequences of 4 generated tokens: 2.5 prompts per decode step, prefilled 2 at a time (1.25 prefill steps a
    # step of 2 x 5 = 10 ms host each): 12.5 ms more per output token; one prompt's TTFT 5 ms more
    assert s1.tpot_ms - s0.tpot_ms == pytest.approx(12.5)
    assert s1.ttft_ms - s0.ttft_ms == pytest.approx(5.0)
    # a step's energy is gap W x its time + (compute W - gap W) x compute time + (memory W - gap W) x memory time, so
    # 12.5 ms more host time per period adds gap W x 12.5 ms over the period's 10 tokens
    assert s1.energy_per_token_j - s0.energy_per_token_j == pytest.approx(pw.gap_w * 12.5e-3 / 10)
    # chunked prefill: the prompts' host time on their final chunk only (2 chunks of 16 tokens, budget 26 - 10 = 16)
    m0 = eng.mixed_step(a, dev, 10, 34.0, 16, 16.0, prompts=1, final=True, host=base)
    m1 = eng.mixed_step(a, dev, 10, 34.0, 16, 16.0, prompts=1, final=True, host=plus)
    n1 = eng.mixed_step(a, dev, 10, 34.0, 16, 0.0, prompts=1, final=False, host=plus)
    assert m1.host_s - m0.host_s == pytest.approx(5e-3) and n1.host_s == pytest.approx(3e-3)


def test_tpot_with_interleaved_prefills_by_hand():
    """Continuous batching without chunked prefill: B / G new prompts per decode step, prefilled round(B / G) at a
    time, so TPOT = decode step + (B / G) / round(B / G) x the prefill step of round(B / G) prompts."""
    from predictor.power import power_params

    a, dev = eng.Arch.from_config(TINY), get_device("h100-80gb")
    host = eng.HostParams(step_ms=3.0, per_block_ms=0.0, per_tp_worker_ms=0.0)
    s = eng.serve(a, dev, 10, 32, 4, power_params("h100-80gb"), host=host)
    # 10 sequences of 4 generated tokens: 2.5 new prompts per step, 2 per prefill step, 1.25 prefill steps a step
    dec = eng.decode_step(a, dev, 10, 32 + 4 / 2, host=host)
    pre2 = eng.prefill_step(a, dev, 2, 32, host=host)
    assert s.prefills_per_step == 2.5
    assert s.tpot_ms == pytest.approx(dec.total_ms + 1.25 * pre2.total_ms)
    assert dec.host_s == pytest.approx(3e-3) and pre2.host_s == 0.0
    # energy per token: (decode step energy + 1.25 prefill steps' energy) / 10 tokens
    pw = power_params("h100-80gb")
    e = (eng.step_energy_j(dec, pw)[0] + 1.25 * eng.step_energy_j(pre2, pw)[0]) / 10
    assert s.energy_per_token_j == pytest.approx(e)


def test_vllm_runtime_moe_tensor_parallel_and_html(tmp_path):
    from analyzer.predeploy import write

    cfg = {**TINY, "model_type": "mixtral", "architectures": ["MixtralForCausalLM"]}
    cfg |= {"num_local_experts": 8, "num_experts_per_tok": 2}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    one = llm(str(path), prompt=8, generate=8, batch=2, contexts=[16], runtime="vllm", engine_profile="vllm-0.5.4")
    two = llm(str(path), prompt=8, generate=8, batch=2, contexts=[16], runtime="vllm", tensor_parallel=2)
    d1, d2 = one.llm.devices[0], two.llm.devices[0]
    assert d1.engine["moe"]["expected_experts_decode"] == pytest.approx(3.5)  # 2 tokens, top-2 of 8
    # weights per GPU: experts' MLPs, attention and vocabulary halve; norms and routers stay whole
    a = eng.Arch.from_config(cfg)
    whole = a.params() * 2
    norms_routers = (2 * 2 * 64 + 64 + 2 * 64 * 8) * 2  # 2 layers x 2 norms x 64 + final norm + 2 routers 64 x 8
    assert one.llm.runtime["weights_per_gpu_bytes"] == whole
    # context 8 + 8 / 2 = 12 lies below the contexts the host figures were fitted on: said so
    assert any("extrapolation" in w and "12" in w for w in one.warnings)
    assert two.llm.runtime["weights_per_gpu_bytes"] == (whole - norms_routers) / 2 + norms_routers
    assert d2.engine["decode_step"]["allreduce_ms"] > 0 == d1.engine["decode_step"]["allreduce_ms"]
    assert set(d2.fits) == {"full GPU"}  # MIG slices have no NVLink: tensor parallel 1 only
    small = llm(str(path), prompt=8, generate=8, contexts=[16], runtime="vllm", gpu_memory_utilization=0.01)
    assert not small.llm.devices[0].engine["fits_model"]  # 0.01 x 80 GiB < 1 GiB outside torch
    assert any("leave no room" in w for w in small.warnings)
    out = tmp_path / "r.html"
    write(two, str(out))
    assert "tensor parallel 2" in out.read_text()
    e = d2.energy_per_token_j  # per GPU; the pair of GPUs spends twice that per output token
    assert f"{e:#.3g} J per output token per GPU" in out.read_text()  # three figures, 0.100 not 0.1
    assert f"({2 * e:#.3g} J per output token for the 2 GPUs together)" in out.read_text()
    # why no slice: tensor parallelism, not a GPU without MIG; a TPOT target of 1 us that even the whole GPU misses
    assert d2.recommendation.reason == "tensor parallel 2 runs on whole GPUs (a MIG slice has no NVLink)"
    fast = llm(str(path), prompt=8, generate=8, batch=2, contexts=[16], runtime="vllm", tpot_ms=0.001)
    assert fast.llm.devices[0].fits["full GPU"] and not fast.llm.devices[0].recommendation.full_gpu_fits
    # `fits` holds the memory and meets the targets; `memory_fits` is the memory alone (a newcomer read every profile
    # "not fitting" a 10 GB request on an 80 GB GPU under a TPOT target)
    rec = fast.llm.devices[0].recommendation
    assert rec.full_gpu_memory_fits and rec.memory_fits and all(rec.memory_fits.values()) and not any(rec.fits.values())
    assert rec.to_json()["memory_fits"] == rec.memory_fits
    write(fast, str(tmp_path / "f.md"))
    (row,) = [x for x in (tmp_path / "f.md").read_text().splitlines() if x.startswith("| h100-80gb | vllm engine")]
    assert row.rstrip(" |").endswith("misses the latency targets")


def test_nvlink_field_is_validated():
    from predictor.devices import DeviceFileError, device_json, parse_device

    entry = device_json(get_device("h100-80gb")) | {"key": "my-h100", "aliases": []}
    assert parse_device(entry).nvlink_gbs == 450.0
    for bad in (0, "fast", 1e6):
        with pytest.raises(DeviceFileError, match="nvlink_gbs"):
            parse_device(entry | {"nvlink_gbs": bad})
    # the NVLink domain: 8 on an HGX H100 board, 2 on the H100 NVL's bridged pair; it bounds --tensor-parallel
    assert (entry["nvlink_gpus"], get_device("h100-nvl-94gb").nvlink_gpus) == (8, 2)
    for bad in (1, 2.5, True):
        with pytest.raises(DeviceFileError, match="nvlink_gpus"):
            parse_device(entry | {"nvlink_gpus": bad})
    without = {k: v for k, v in entry.items() if k not in ("nvlink_gbs", "nvlink_gpus")}
    with pytest.raises(DeviceFileError, match="needs nvlink_gbs"):
        parse_device(without | {"nvlink_gpus": 4})
    for device, tp in (("h100-80gb", 16), ("h100-nvl-94gb", 4)):
        with pytest.raises(UsageError, match=f"--tensor-parallel {tp} on {device}: NVLink connects"):
            llm("zoo:llama_7b", devices=[device], runtime="vllm", tensor_parallel=tp)
    assert llm("zoo:llama_7b", devices=["h100-nvl-94gb"], runtime="vllm", tensor_parallel=2).llm.devices


# ---- the host-time fit (predictor.serving_fit) ----------------------------------------------------------------------


def test_vllm_runtime_costs_as_formulas(tmp_path):
    """`llm --runtime vllm` gives each step's counts as formulas of the batch and the length, as the eager runtime
    does, fitted on the engine's kernels (no trace). By hand for TINY (2 layers, hidden 64, 4 heads x 16, 2 KV heads,
    feed-forward 128, vocabulary 100, float16): per token per layer q/k/v 64 x (64 + 32 + 32) + o 64 x 64 + gate/up
    64 x 256 + down 128 x 64 = 36,864 MACs, 73,728 for 2 layers, the LM head 64 x 100 = 6,400 per sequence; decode
    attention reads each cached token once per head for QK^T and PV: 4 x 2 x 16 = 128 MACs per layer, 256 in all;
    prefill flash attention over the causal half of prompt^2 pairs: 4 x 16 x 2 / 2 = 64 per layer, 128 in all; the
    KV cache 2 (K, V) x 2 layers x 2 KV heads x 16 x 2 B = 256 B per token, which decode attention reads."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    rep = llm(str(path), prompt=12, generate=4, batch=5, contexts=[16], runtime="vllm")
    f = rep.llm.formulas
    pre, dec = f["prefill"], f["decode"]
    assert pre["exact"] and dec["exact"]
    assert pre["totals"]["macs"]["formula"] == "128 x batch x prompt^2 + 73,728 x batch x prompt + 6,400 x batch"
    assert dec["totals"]["macs"]["formula"] == "256 x batch x context + 80,128 x batch"
    assert dec["totals"]["kv_cache_bytes"]["formula"] == "256 x batch x context"
    kv_read = [t for t in dec["totals"]["bytes_read"]["terms"] if t["powers"] == {"batch": 1, "context": 1}]
    assert [t["coefficient"] for t in kv_read] == [256]
    # the length runs to the model's 512 positions (no sliding window); 12, 16, 5 are no sample points
    assert dec["symbols"]["context"] == {"min": 1, "max": 512} and 12 not in pre["points"]["prompt"]
    for count in ("flops", "macs", "bytes_read"):  # the report's own counts: one prompt's prefill, the decode step
        assert value(pre, count, {"batch": 1, "prompt": 12}) == rep.llm.prefill.totals[count], count
        assert value(dec, count, {"batch": 5, "context": 16}) == rep.llm.decode.totals[count], count
        # the prefill of the request's 5 prompts at once (runtime.whole_model_prefill)
        assert value(pre, count, {"batch": 5, "prompt": 12}) == rep.llm.runtime["whole_model_prefill"][count], count
    doc = rep.to_json()
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))
    assert doc["llm"]["formulas"]["decode"]["totals"]["macs"]["formula"] == dec["totals"]["macs"]["formula"]
    # a sliding window of 64 tokens ends the range (past it attention stops growing); a mixture of experts reads
    # the weights of the experts its tokens touch, which no polynomial gives
    path.write_text(json.dumps({**TINY, "model_type": "mistral", "architectures": ["MistralForCausalLM"],
                                "sliding_window": 64}))  # fmt: skip
    win = llm(str(path), prompt=12, generate=4, batch=5, contexts=[16], runtime="vllm").llm.formulas
    assert win["decode"]["symbols"]["context"]["max"] == 64 and win["decode"]["exact"]
    moe = {**TINY, "model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "num_local_experts": 8}
    path.write_text(json.dumps(moe | {"num_experts_per_tok": 2}))
    rep = llm(str(path), prompt=8, generate=8, batch=2, contexts=[16], runtime="vllm")
    d = rep.llm.formulas["decode"]
    assert d["totals"]["bytes_read"] is None and not d["exact"] and d["totals"]["macs"] is not None
    result = CliRunner().invoke(cli, ["llm", str(path), "--runtime", "vllm", "--prompt", "8", "--generate", "8"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Costs as formulas of the context" in text and "fitted exactly on its kernels counted from" in text
    assert "bytes read = no polynomial: computed per point" in text and "experts its tokens touch" in text


def _row(model, batch, context, tp, gpu_ms, tpot_ms, device="h100-80gb"):
    from predictor.serving_fit import Row

    return Row(model, device, "chat", tp, batch, 100, 8.0, False, tpot_ms, 0.1, gpu_ms, context)


def test_host_features_and_exact_recovery_by_hand():
    from predictor import serving_fit as sf

    # 100 sequences at context 200: ceil(200 / 16) = 13 blocks each = 1,300; tp 4: 3 extra workers; 100 generated
    # tokens each (`_row`): 100 / 100 = 1 prompt admitted per decode step
    assert list(sf.host_features(_row("m", 100, 200.0, 4, 10.0, 50.0))) == [1.0, 100.0, 1300.0, 3.0, 1.0]
    # rows built to follow 20 ms + 0.01 ms / block + 8 ms / worker exactly: the fit gives those figures back
    # (`eng.HOST_FIELDS` order: step, per sequence, per block, per worker, per prompt)
    coef = (20.0, 0.0, 0.01, 8.0, 0.0)
    rows = []
    for i, (b, ctx, tp) in enumerate([(32, 100.0, 1), (64, 300.0, 1), (128, 200.0, 2), (256, 400.0, 4), (16, 50.0, 8)]):
        blocks = b * math.ceil(ctx / 16)
        rows.append(_row(f"m{i}", b, ctx, tp, 5.0 + i, 5.0 + i + coef[0] + coef[2] * blocks + coef[3] * (tp - 1)))
    # e.g. the first: 32 x ceil(100 / 16) = 32 x 7 = 224 blocks: 5 + 20 + 2.24 = 27.24 ms
    assert rows[0].tpot_ms == pytest.approx(27.24)
    assert list(sf.fit(rows, "block")) == pytest.approx(coef, rel=1e-6, abs=1e-9)
    assert sf.predict(rows[0], sf.fit(rows, "block")) == pytest.approx(27.24)


def test_leave_one_model_out_holds_each_model_out():
    """A model's held-out predictions must not move when its own measurements do; a fit on all rows (a planted
    leak) fails the same check."""
    from predictor import serving_fit as sf

    rows = []
    for i, model in enumerate(("a", "b", "c", "d")):
        for b in (32, 128, 256):
            blocks = b * 20  # context 320: 20 blocks a sequence
            rows.append(_row(model, b, 320.0, 1 + i % 2, 10.0, 10.0 + 20 + 0.01 * blocks * (1 + 0.1 * i) + 8 * (i % 2)))
    moved = [r if r.model != "b" else sf.Row(**{**r.__dict__, "tpot_ms": 3 * r.tpot_ms}) for r in rows]

    def held_out_of_b(predict_all):
        return [p for p, r in zip(predict_all(rows), rows, strict=True) if r.model == "b"], [
            p for p, r in zip(predict_all(moved), moved, strict=True) if r.model == "b"
        ]

    before, after = held_out_of_b(sf.lomo)
    assert before == pytest.approx(after)  # b's rows never enter the fit that predicts them

    def leaky(rs):
        coef = sf.fit(rs)
        return [sf.predict(r, coef) for r in rs]

    before, after = held_out_of_b(leaky)
    assert after != pytest.approx(before)  # the planted leak: b's own rows pull its prediction


@pytest.mark.slow
def test_committed_serving_params_are_the_fit_of_the_data():
    """predictor/serving_params.json is what `python -m predictor.serving_fit` writes from the committed data (the
    replay of every row's run makes it about a minute)."""
    from predictor import serving_fit as sf

    doc, table = sf.run()
    whole = json.loads(eng.SERVING_PARAMS_PATH.read_text())
    committed = whole["profiles"][sf.PROFILE]
    assert whole["schema"] == eng.SERVING_SCHEMA and committed["prompt_tokens_assumed"] == sf.PROMPT_TOKENS
    assert committed["fitted_on"] == "windows"
    # rewriting the fitted profile keeps the file's other profiles and its default
    merged = sf.merge(doc, eng.SERVING_PARAMS_PATH)
    assert merged["default_profile"] == whole["default_profile"] and set(merged["profiles"]) == set(whole["profiles"])
    assert committed["host_model"] == sf.HOST_MODEL
    for dev, d in doc["devices"].items():
        c = committed["devices"][dev]
        for k in sf.HOST_MODELS[sf.HOST_MODEL]:
            assert c[k] == pytest.approx(d[k], rel=1e-3, abs=1e-6), (dev, k)
        assert c["evaluation"] == d["evaluation"]
    # the streaming-GEMM and paged-attention fits the host figures were fitted on top of are the committed ones
    assert whole["weight_streaming_gemm"] == doc["weight_streaming_gemm"]
    assert whole["decode_attention"] == doc["decode_attention"] == merged["decode_attention"]
    assert "decode_attention" not in merged["profiles"][sf.PROFILE]
    assert "dense 8-32B" in table


# ---- engine profiles (--engine-profile) ------------------------------------------------------------------------------


def _profile_file(tmp_path, name="mine.json", **doc):
    path = tmp_path / name
    path.write_text(json.dumps({"schema": eng.PROFILE_SCHEMA, **doc}))
    return path


def _committed_h100_host() -> dict:
    """The vllm-0.5.4 profile's H100 host figures as predictor/serving_params.json stores them (read as JSON)."""
    doc = json.loads((Path(__file__).resolve().parents[1] / "predictor/serving_params.json").read_text())
    return doc["profiles"]["vllm-0.5.4"]["devices"]["h100-80gb"]


def test_engine_profile_changes_tpot_by_the_host_term(tmp_path):
    """Only the decode step's host time depends on the profile (a prefill step adds none), so TPOT, the decode step
    and the latency sweep move by the difference of the two host terms, worked out by hand."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    mine = _profile_file(
        tmp_path,
        name="mine",
        source="a user's own measurements",
        any_device={"step_ms": 2.0, "per_seq_ms": 0.5, "per_block_ms": 0.1, "per_tp_worker_ms": 3.0},
    )
    # no chunked prefill in any of them (the overlapped profile would chunk): only the host term differs
    kw = dict(prompt=8, generate=8, batch=8, contexts=[16], runtime="vllm", tensor_parallel=2, max_num_batched_tokens=0)
    default = llm(str(path), **kw).llm
    over = llm(str(path), engine_profile="vllm-overlapped", **kw).llm
    fit = llm(str(path), engine_profile="vllm-0.5.4", **kw).llm
    user = llm(str(path), engine_profile=str(mine), **kw).llm
    assert default.runtime["engine_profile"]["name"] == "vllm-overlapped"  # the default
    # 8 sequences at a mean live context of 8 + 8 / 2 = 12 tokens: ceil(12 / 16) = 1 block each, 8 blocks; tp 2
    # overlapped: 0.16 ms at any batch
    # vllm-0.5.4 (H100 fit, its figures read from predictor/serving_params.json so that a refit keeps this by hand;
    # a figure the fitted host model leaves out is absent, i.e. 0): step + per_seq x 8 sequences + per_block x 8
    # blocks + per_tp_worker x 1 (e.g. the per-sequence fit 7.898 + 0.34902 x 8 + 0 + 11.688 = 22.37816 ms)
    # the user's: 2 + 0.5 x 8 + 0.1 x 8 + 3 x 1 = 9.8 ms
    h100 = _committed_h100_host()
    fit_ms = (
        h100["step_ms"]
        + h100.get("per_seq_ms", 0.0) * 8
        + h100.get("per_block_ms", 0.0) * 8
        + h100["per_tp_worker_ms"] * 1
    )
    hand = {"vllm-overlapped": 0.16, "vllm-0.5.4": fit_ms, "mine": 9.8}
    for rep in (over, fit, user):
        d = rep.devices[0]
        name = rep.runtime["engine_profile"]["name"]
        assert d.engine["host"]["profile"] == name
        assert d.engine["decode_step"]["host_overhead_ms"] == pytest.approx(hand[name], rel=1e-9)
    base = over.devices[0]
    for rep in (fit, user):
        d = rep.devices[0]
        diff = hand[rep.runtime["engine_profile"]["name"]] - 0.16
        assert d.tpot_ms - base.tpot_ms == pytest.approx(diff, rel=1e-9)
        assert d.engine["decode_step_ms"] - base.engine["decode_step_ms"] == pytest.approx(diff, rel=1e-9)
        assert d.engine["prefill_ms"] == pytest.approx(base.engine["prefill_ms"])
        # the sweep's decode step at context 16 (one block each, as at 12) moves by the same term
        assert d.sweep[0]["tpot_ms"] - base.sweep[0]["tpot_ms"] == pytest.approx(diff, rel=1e-9)
    assert default.devices[0].tpot_ms == base.tpot_ms
    assert user.runtime["engine_profile"] == {
        "name": "mine",
        "source": "a user's own measurements",
        "fitted": False,
        "description": "",
        "chunked_prefill": False,  # a profile file chunks prefills only when it says so
        "file": str(mine),
    }
    assert fit.runtime["engine_profile"]["fitted"] and not over.runtime["engine_profile"]["fitted"]
    assert any(a.startswith("engine profile mine (file ") for a in user.assumptions)


def test_profile_file_per_prompt_figure_reaches_ttft_tpot_and_json(tmp_path):
    """A profile file's per_prompt_ms: one prompt's TTFT and, with one prompt admitted per decode step, TPOT both
    grow by it; `engine.host` reports it."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    kw = dict(prompt=8, generate=8, batch=8, contexts=[16], runtime="vllm", max_num_batched_tokens=0)
    a = _profile_file(tmp_path, "a.json", source="s", any_device={"step_ms": 2.0})
    b = _profile_file(tmp_path, "b.json", source="s", any_device={"step_ms": 2.0, "per_prompt_ms": 4.0})
    ra = llm(str(path), engine_profile=str(a), **kw).llm.devices[0]
    rb = llm(str(path), engine_profile=str(b), **kw).llm.devices[0]
    # 8 sequences of 8 generated tokens: 8 / 8 = 1 new prompt per decode step, prefilled alone: 4 ms more per token
    assert rb.tpot_ms - ra.tpot_ms == pytest.approx(4.0)
    assert rb.ttft_ms - ra.ttft_ms == pytest.approx(4.0)
    assert rb.engine["host"]["per_prompt_ms"] == 4.0 and ra.engine["host"]["per_prompt_ms"] == 0.0
    assert rb.engine["decode_step_ms"] == pytest.approx(ra.engine["decode_step_ms"])


def test_engine_profile_in_the_json_and_bad_profiles_exit_2(tmp_path):
    schema = json.loads(SCHEMA_FILE.read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    runner = CliRunner()
    base = ["llm", str(path), "--prompt", "8", "--generate", "8", "--contexts", "16", "--format", "json"]
    vllm = [*base, "--runtime", "vllm"]
    res = runner.invoke(cli, [*vllm, "--engine-profile", "vllm-0.5.4"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, schema)
    prof = doc["llm"]["runtime"]["engine_profile"]
    assert prof["name"] == "vllm-0.5.4" and prof["fitted"] is True and "ML.ENERGY" in prof["source"]
    assert doc["llm"]["devices"][0]["engine"]["host"]["profile"] == "vllm-0.5.4"
    assert any("engine profile vllm-0.5.4, fitted" in a for a in doc["llm"]["assumptions"])
    ok = dict(source="s", any_device={"step_ms": 1.0})
    cases = [
        (["--engine-profile", "vllm-9"], "unknown engine profile 'vllm-9'"),
        (["--engine-profile", str(tmp_path / "none.json")], "cannot read engine-profile file"),
    ]
    bad_json = tmp_path / "b.json"
    bad_json.write_text("{")
    cases.append((["--engine-profile", str(bad_json)], "is not JSON"))
    huge = tmp_path / "huge.json"
    huge.write_text(" " * (1 << 20) + "{}")  # 1 MiB of spaces, then an object
    cases.append((["--engine-profile", str(huge)], "over 1 MiB"))
    for i, (doc_, words) in enumerate(
        (
            ({"source": "s"}, "no host figures"),
            ({"any_device": {"step_ms": 1.0}}, "'source' must say"),
            ({"source": "s", "any_device": {"step_ms": -1}}, "step_ms must be a number of milliseconds"),
            ({"source": "s", "any_device": {"step_ms": float("nan")}}, "step_ms must be a number"),
            ({"source": "s", "any_device": {"stepms": 1.0}}, "unknown key 'stepms'"),
            ({"source": "s", "any_device": {"per_seq_ms": 1.0}}, "missing 'step_ms'"),
            ({"source": "s", "devices": {"h100-80gb": {"step_ms": "1"}}}, "step_ms must be a number"),
            ({"source": "s", "devices": {"a100-40gb": {"step_ms": 1}}}, "no host figures for 'h100-80gb'"),
            ({"source": "s", "any_device": {"step_ms": 1, "context_range": [5, 1]}}, "context_range"),
            ({"source": "s", "any_device": {"step_ms": 1, "per_prompt_ms": 2000}}, "per_prompt_ms must be a number"),
        )
    ):
        cases.append((["--engine-profile", str(_profile_file(tmp_path, f"bad{i}.json", **doc_))], words))
    wrong = tmp_path / "w.json"
    wrong.write_text(json.dumps({"schema": "x", **ok}))
    cases.append((["--engine-profile", str(wrong)], "not an engine-profile file"))
    for args, words in cases:
        res = runner.invoke(cli, [*vllm, *args])
        assert res.exit_code == 2, (args, res.output)
        errs = [line for line in res.stderr.splitlines() if not line.startswith("[llm]")]
        assert len(errs) == 1 and errs[0].startswith("error: --engine-profile") and words in errs[0], (args, errs)
    res = runner.invoke(cli, [*base, "--engine-profile", "vllm-0.5.4"])  # the eager runtime has no engine
    assert res.exit_code == 2 and "needs --runtime vllm" in res.stderr


def test_decode_gemms_stream_their_weights_by_hand():
    """A decode-sized half-precision GEMM costs exec + bytes / (bandwidth x e_memory) (`StreamingGemm`), blended
    with the kernel model between m = 64 and 256 tokens, the kernel model alone from 256 on and in float32."""
    from predictor import serving_fit as sf
    from predictor.kernel_model import kernel_arrays, kernel_latency_arrays

    dev = get_device("h100-80gb")  # 3.35 TB/s

    def one(m, dtype="bfloat16"):
        k = eng._gemm("g", m, 4096, 4096, 2.0 if dtype != "float32" else 4.0, dtype)
        t = eng.cost_kernels([k], dev, graph=True, link_bytes_per_s=None, tp=1)
        model = kernel_latency_arrays(kernel_arrays([k]), dev)
        return t.total_s - eng.GRAPH_GAP_US * 1e-6, max(model.compute_s[0], model.memory_s[0])

    with sf.streaming_override({"hopper": eng.StreamingGemm(exec_us=5.0, e_memory=0.5)}):
        # m = 8: 2 x (8 x 4096 + 4096 x 4096) read + 2 x 8 x 4096 written = 33,685,504 B;
        # 33,685,504 / (3.35e12 x 0.5) = 20.1107 us, + 5 us = 25.1107 us
        assert one(8)[0] == pytest.approx(25.1107e-6, rel=1e-4)
        # m = 160: halfway from 64 to 256: 0.5 x the streaming time + 0.5 x the kernel model's.
        # 2 x (160 x 4096 + 4096 x 4096) + 2 x 160 x 4096 = 36,175,872 B: 36,175,872 / 1.675e12 + 5 us = 26.5975 us
        t, model = one(160)
        assert t == pytest.approx(0.5 * 26.5975e-6 + 0.5 * model, rel=1e-4)
        assert one(256)[0] == pytest.approx(one(256)[1])  # the kernel model alone
        assert one(8, "float32")[0] == pytest.approx(one(8, "float32")[1])  # float32: not fitted, not streamed
    # the committed fit: Hopper moves weights at 0.8875 of 3.35 TB/s + 4.695 us, within 5% of Vidur's rows at m <= 64
    table = eng.streaming_gemm_table()
    assert set(table) == {"hopper", "ampere"} and 0.5 < table["hopper"].e_memory <= 1.0
    assert eng.streaming_gemm_params(get_device("h200-141gb")) == table["hopper"]  # same kernel family


def test_chunked_prefill_steps_and_token_budgets_by_hand(tmp_path):
    """Chunked prefill: the prompts' tokens share the decodes' steps within --max-num-batched-tokens."""
    from predictor.power import power_params

    assert eng.chunk_sizes(1000, 412) == [412, 412, 176]  # 412 + 412 + 176 = 1000: ceil(1000 / 412) = 3 chunks
    assert eng.chunk_sizes(100, 412) == [100] and eng.chunk_sizes(24, 12) == [12, 12]
    with pytest.raises(eng.EngineConfigError, match="no room"):
        eng.chunk_sizes(10, 0)
    # vLLM's default budget: 8192 on >= 70 GiB but an A100, 2048 otherwise (an H100 MIG slice of 10 GB too)
    budgets = {k: eng.default_batched_tokens(get_device(k)) for k in ("h100-80gb", "h200-141gb", "a100-80gb")}
    assert budgets == {"h100-80gb": 8192, "h200-141gb": 8192, "a100-80gb": 2048}
    assert eng.default_batched_tokens(get_device("h100-80gb:1g.10gb")) == 2048
    over, fitted = eng.engine_profile("vllm-overlapped"), eng.engine_profile("vllm-0.5.4")
    dev = get_device("h100-80gb")
    assert over.chunked_prefill and not fitted.chunked_prefill  # 0.5.4 ran --enable-chunked-prefill False
    assert eng.batched_tokens_for(over, dev) == 8192 and eng.batched_tokens_for(fitted, dev) == 0
    assert eng.batched_tokens_for(fitted, dev, 512) == 512 and eng.batched_tokens_for(over, dev, 0) == 0

    a, pw = eng.Arch.from_config(TINY), power_params("h100-80gb")
    host = eng.HostParams(step_ms=2.0, per_block_ms=0.0, per_tp_worker_ms=0.0)
    # 4 sequences, prompt 40, generate 16, budget 20: 20 - 4 decodes = 16 prompt tokens a step; 4 / 16 = 0.25 new
    # prompts a step (one at a time); a prompt takes chunks 16, 16, 8 (3 mixed steps), so 0.25 x 3 = 0.75 of the
    # steps carry a chunk; mean live context 40 + 16 / 2 = 48
    s = eng.serve(a, dev, 4, 40, 16, pw, host=host, batched_tokens=20)
    dec = eng.decode_step(a, dev, 4, 48.0, host=host)
    mixed = [
        eng.mixed_step(a, dev, 4, 48.0, 16, 0.0, final=False, host=host),
        eng.mixed_step(a, dev, 4, 48.0, 16, 16.0, final=False, host=host),
        eng.mixed_step(a, dev, 4, 48.0, 8, 32.0, final=True, host=host),
    ]
    assert (s.batched_tokens, s.prefill_chunks, s.prefill_bound) == (20, 3, False)
    assert s.mixed_steps_per_step == pytest.approx(0.75)
    assert s.tpot_ms == pytest.approx(dec.total_ms + 0.25 * sum(m.total_ms - dec.total_ms for m in mixed))
    assert s.ttft_ms == pytest.approx(sum(m.total_ms for m in mixed))  # the prompt's 3 steps beside the decodes
    e_dec = eng.step_energy_j(dec, pw)[0]
    e = e_dec + 0.25 * sum(eng.step_energy_j(m, pw)[0] - e_dec for m in mixed)
    assert s.energy_per_token_j == pytest.approx(e / 4)
    # a mixed step runs 4 + 16 = 20 tokens through every linear layer: per layer QKV 64 x (64 + 2 x 32) = 8,192,
    # O 64 x 64 = 4,096, gate/up 64 x 256 = 16,384, down 128 x 64 = 8,192 weights = 36,864, x 2 layers = 73,728;
    # the LM head (64 x 100 = 6,400) on the 4 decodes: 2 x 20 x 73,728 + 2 x 4 x 6,400 = 3,000,320 FLOPs; the final
    # chunk (8 tokens) also samples its prompt's first token: 2 x 12 x 73,728 + 2 x 5 x 6,400 = 1,833,472
    assert mixed[0].gemm_flops == 3_000_320 and mixed[2].gemm_flops == 1_833_472
    assert all(m.host_s == pytest.approx(2e-3) for m in mixed)  # the decodes' host time, once a step
    # 10 sequences of 4 tokens, prompt 32, budget 34: 2.5 prompts a step, 2 at a time (64 tokens: chunks 24, 24, 16),
    # 2.5 / 2 x 3 = 3.75 mixed steps needed a step: more than every step, prefill-bound
    b = eng.serve(a, dev, 10, 32, 4, pw, host=host, batched_tokens=34)
    assert b.prefill_bound and b.mixed_steps_per_step == 1.0
    with pytest.raises(eng.EngineConfigError, match="no room"):
        eng.serve(a, dev, 10, 32, 4, pw, host=host, batched_tokens=10)
    # the CLI: the default profile chunks with vLLM's budget for the GPU; --max-num-batched-tokens 0 turns it off
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    base = ["llm", str(path), "--prompt", "40", "--generate", "16", "--batch", "4", "--runtime", "vllm"]
    runner = CliRunner()
    d = json.loads(runner.invoke(cli, [*base, "--format", "json"]).stdout)["llm"]["devices"][0]
    assert d["engine"]["chunked_prefill"]["max_num_batched_tokens"] == 8192
    assert d["engine"]["chunked_prefill"]["prefill_tokens_per_step"] == 8188  # 8192 - 4 decodes
    res = runner.invoke(cli, [*base, "--format", "json", "--max-num-batched-tokens", "20"])
    d = json.loads(res.stdout)["llm"]["devices"][0]
    assert d["engine"]["chunked_prefill"]["prefill_chunks"] == 3
    assert d["engine"]["chunked_prefill"]["mixed_steps_per_step"] == pytest.approx(0.75)


def test_decode_attention_fit_costs_and_recovers_by_hand(tmp_path):
    """The decode-attention fit (`serving_fit.fit_decode_attention`, the committed `decode_attention` entry): a paged
    decode-attention kernel costs exec + bytes / (bandwidth x e_memory) under it, and the fit recovers the figures
    that made two timings."""
    from predictor import serving_fit as sf

    dev = get_device("h100-80gb")  # 3.35 TB/s
    a = eng.Arch(1, 4096, 32, 8, 128, 1, 1)  # 32 query heads, 8 KV heads of 128: kvd 1,024, qd 4,096
    k = eng.EngineKernel(eng.DECODE_ATTENTION, "attention", 0.0, 0.0, 0.0, "bfloat16", {}, 1.0)

    def one(dtype="bfloat16"):
        kern = eng._attention_for(k, 64, a, 1, 1000.0, dtype)
        t = eng.cost_kernels([kern], dev, graph=True, link_bytes_per_s=None, tp=1)
        return t.compute_s + t.memory_s

    with sf.streaming_override(eng.streaming_gemm_table(), {}):
        model = one()  # no fit: the kernel model's attention entry
    with sf.streaming_override(eng.streaming_gemm_table(), {"hopper": eng.StreamingGemm(exec_us=10.0, e_memory=0.5)}):
        # 64 sequences at 1,000 tokens: read (64 x 1,000 x 2 x 1,024 + 64 x 4,096) x 2 = 262,668,288 B, written
        # 64 x 4,096 x 2 = 524,288 B: 263,192,576 B / (3.35e12 x 0.5) = 157.130 us, + 10 us = 167.130 us
        assert one() == pytest.approx(167.130e-6, rel=1e-5)
        assert one("float32") == pytest.approx(
            eng.cost_kernels([eng._attention_for(k, 64, a, 1, 1000.0, "float32")], dev, graph=True,
                             link_bytes_per_s=None, tp=1).memory_s, rel=1e-9)  # fmt: skip
    fit = eng.decode_attention_params(dev)  # the committed file's, outside any override: 263,192,576 B as above
    assert one() == pytest.approx(263_192_576 / (3.35e12 * fit.e_memory) + fit.exec_us * 1e-6, rel=1e-5)
    assert one() != pytest.approx(model, rel=0.01)
    # the committed entry: the public timings are H100 ones, so hopper only (ampere keeps the kernel model's entry)
    assert sorted(eng.decode_attention_table()) == ["hopper"]
    assert eng.decode_attention_params(get_device("a100-40gb")) is None
    # two timings made with exec 8 us and e 0.6 (64 sequences, 64 query / 8 KV heads of 128):
    # 512 tokens: (64 x 512 x 2 x 1,024 + 64 x 8,192) x 2 + 64 x 8,192 x 2 = 136,314,880 B -> 8 + 136,314,880 / 2.01e6
    # 128 tokens: (64 x 128 x 2 x 1,024 + 64 x 8,192) x 2 + 64 x 8,192 x 2 = 35,651,584 B -> 8 + 35,651,584 / 2.01e6
    base = {"gpu": "NVIDIA H100 80GB HBM3", "num_seqs": 64, "num_heads": 64, "num_kv_heads": 8, "head_size": 128}
    rows = [
        {**base, "kernel": "a", "seq_len": 512, "gpu_time_us": 8 + 136_314_880 / (3.35e6 * 0.6)},
        {**base, "kernel": "b", "seq_len": 128, "gpu_time_us": 8 + 35_651_584 / (3.35e6 * 0.6)},
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    fam = sf.fit_decode_attention(path)["families"]["hopper"]
    assert fam["exec_us"] == pytest.approx(8.0, abs=1e-3) and fam["e_memory"] == pytest.approx(0.6, abs=1e-4)
    assert fam["evaluation"]["all rows"]["largest_call_mib"] == 130.0  # 136,314,880 / 2^20
