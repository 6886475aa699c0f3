"""Fit the vllm runtime's host time per engine step on ML.ENERGY Leaderboard v2's vLLM 0.5.4 rows, leaving one model
out; write it as the `vllm-0.5.4` engine profile of `predictor/serving_params.json` (its other profiles kept) and print
the before/after table of docs/llm-serving.md.

Usage: python -m predictor.serving_fit [--data data/public-models/mlenergy-llm-v2.jsonl] [--out PATH] [--check]
    [--fit-on windows|tpot] [--host-model block|seq|seq+prompt|block+prompt|seq+block+prompt]

The host model (`predictor.serving_engine.HostParams`), milliseconds, while the GPU idles (`--host-model seq`, the
default and the committed profile's since issue 24's check compares like with like):

    decode step:  step_ms + per_seq_ms x B + per_tp_worker_ms x (tp - 1)
    prefill step: none beyond its kernels

`--host-model` picks other figures of `HostParams` (`HOST_MODELS`): per KV block (per_block_ms x B x ceil(L / 16),
`block`, the profile's until then) instead of or beside the per-sequence term, and per prompt a prefill step admits
(per_prompt_ms x P).

(B running sequences at mean live context L, tensor parallel tp). Three figures per host (the A100 rows ran on AWS
p4d.24xlarge, the H100 rows on p5.48xlarge: two CPUs), fitted on both windows ML.ENERGY's aggregation spans
(`fit_windows`, the default since 2026-11-26): each row's run is replayed (`replay_row`, `predictor.serving_window`:
the steady state and the drain after it, on simulated output lengths), and the replayed Avg TPOT (every decode
iteration, the drain's included) is fitted to the row's avg_tpot_s together with the replayed steady state's time per
output token to its avg_batch_size / output_tokens_per_s. Both are linear in the figures (the iterations' order does
not depend on their times), so the fit is a non-negative least squares of the two relative errors. The engine's own
TPOT stays the steady-state mean inter-token latency. `--fit-on tpot`: the fit before, of the engine's TPOT to
avg_tpot_s alone (`fit`, one decode step per output token: `host_features`). Variants tried on the same
rows (docs/llm-serving.md gives their leave-one-model-out MAPE): a per-sequence term instead of (or with) the
per-block one, a constant per prefill step (fitted to 0 on both GPUs), no tensor-parallel term.

First (`fit_streaming`) the time of decode-sized GEMMs per kernel family on Vidur's float16 linear layers
(data/vidur-ops: m <= 64 tokens, >= 64 MiB moved): exec_us + bytes / (bandwidth x e_memory), written as the file's
`weight_streaming_gemm` entry; and (`fit_decode_attention`) vLLM's paged decode attention per kernel family on public
paged decode-attention timings (data/public-models/decode-attention-h100.jsonl: H100 only), the same form, written as
the `decode_attention` entry (a family without timings keeps the kernel model's attention entry). The host figures
are fitted on top of the GPU time they give.

Rows: every vLLM row of a dense text decoder whose architecture is in `ARCH` (vision-language and mixture-of-experts
models and pipeline-parallel rows left out of the fit; the MoE rows are evaluated with the fitted figures), at the
row's average running batch (rounded), average output length and tensor-parallel degree, with the prompt lengths of
`PROMPT_TOKENS`. Leave-one-model-out: each model's rows are predicted by a fit on the other models of that GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import serving_engine as eng
from . import serving_window as win
from .devices import get_device
from .power import power_params

SCHEMA = eng.SERVING_SCHEMA
#: The profile of the serving-parameter file this fit writes (the file's other profiles are kept).
PROFILE = "vllm-0.5.4"
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "public-models" / "mlenergy-llm-v2.jsonl"
GPUS = {"NVIDIA H100 80GB HBM3": "h100-80gb", "NVIDIA A100-SXM4-40GB": "a100-40gb"}

#: Prompt tokens of a request, per task, estimated from the datasets ML.ENERGY v2 sent (github.com/ml-energy/
#: leaderboard-v2 @ c3af7f31e2, benchmark/llm_text_generation/*/scripts/benchmark_client.py):
#: chat: the first human turn of ShareGPT_V3_filtered_500.json (500 prompts, mean 350 characters: ~88 tokens at
#: 4 characters a token) + the client's system prompt (113 characters: ~28 tokens) + ~20 chat-template tokens = 136;
#: code: HumanEval+ prompts, raw completions (the 164 HumanEval prompts, github.com/openai/human-eval
#: data/HumanEval.jsonl.gz, mean 448 characters: ~128 tokens at 3.5 characters a token). Counted here; no
#: tokenizer was run (an estimate, +-20%).
PROMPT_TOKENS = {"chat": 136, "code": 128}

#: Published architectures (each model's config.json on the Hugging Face Hub): model type, layers, hidden, heads,
#: KV heads, head dim, intermediate, vocabulary, tied embeddings.
L = "llama"
ARCH = {
    "meta-llama/Meta-Llama-3.1-70B-Instruct": (L, 80, 8192, 64, 8, 128, 28672, 128256, False),
    "mistralai/Mistral-7B-Instruct-v0.3": ("mistral", 32, 4096, 32, 8, 128, 14336, 32768, False),
    "mistralai/Mistral-Nemo-Instruct-2407": ("mistral", 40, 5120, 32, 8, 128, 14336, 131072, False),
    "mistralai/Mistral-Large-Instruct-2407": ("mistral", 88, 12288, 96, 8, 128, 28672, 32768, False),
    "google/gemma-2-2b-it": ("gemma2", 26, 2304, 8, 4, 256, 9216, 256000, True),
    "google/gemma-2-9b-it": ("gemma2", 42, 3584, 16, 8, 256, 14336, 256000, True),
    "google/gemma-2-27b-it": ("gemma2", 46, 4608, 32, 16, 128, 36864, 256000, True),
    "google/codegemma-1.1-2b": ("gemma", 18, 2048, 8, 1, 256, 16384, 256000, True),
    "google/codegemma-7b": ("gemma", 28, 3072, 16, 16, 256, 24576, 256000, True),
    "microsoft/Phi-3-mini-4k-instruct": ("phi3", 32, 3072, 32, 32, 96, 8192, 32064, False),
    "microsoft/Phi-3-small-8k-instruct": (L, 32, 4096, 32, 8, 128, 14336, 100352, True),  # phi3small: custom code
    "microsoft/Phi-3-medium-4k-instruct": ("phi3", 40, 5120, 40, 10, 128, 17920, 32064, False),
    "codellama/CodeLlama-7b-hf": (L, 32, 4096, 32, 32, 128, 11008, 32016, False),
    "codellama/CodeLlama-13b-hf": (L, 40, 5120, 40, 40, 128, 13824, 32016, False),
    "codellama/CodeLlama-34b-hf": (L, 48, 8192, 64, 8, 128, 22016, 32000, False),
    "codellama/CodeLlama-70b-hf": (L, 80, 8192, 64, 8, 128, 28672, 32016, False),
    "bigcode/starcoder2-3b": ("starcoder2", 30, 3072, 24, 2, 128, 12288, 49152, True),
    "bigcode/starcoder2-7b": ("starcoder2", 32, 4608, 36, 4, 128, 18432, 49152, True),
    "bigcode/starcoder2-15b": ("starcoder2", 40, 6144, 48, 4, 128, 24576, 49152, False),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": ("mixtral", 32, 4096, 32, 8, 128, 14336, 32000, False),
    "mistralai/Mixtral-8x22B-Instruct-v0.1": ("mixtral", 56, 6144, 48, 8, 128, 16384, 32768, False),
}


#: Models of mlenergy-llm-v2.jsonl that `ARCH` lacks: Llama-3.1-405B (pipeline parallel only) and the
#: text decoders of the vision-language models (published config.json / text_config sizes; `ARCH`'s
#: columns: model type, layers, hidden, heads, KV heads, head dim, intermediate, vocabulary, tied). The vision
#: encoders run once per request, in the prefill: not counted. Not fitted on (the serving fit's rows are `ARCH`'s);
#: the power fit (`predictor.power_fit.engine_shares`) costs their rows.
EXTRA_ARCH = {
    "meta-llama/Meta-Llama-3.1-405B-Instruct": ("llama", 126, 16384, 128, 8, 128, 53248, 128256, False),
    "llava-hf/llava-1.5-7b-hf": ("llama", 32, 4096, 32, 32, 128, 11008, 32064, False),
    "llava-hf/llava-1.5-13b-hf": ("llama", 40, 5120, 40, 40, 128, 13824, 32064, False),
    "llava-hf/llama3-llava-next-8b-hf": ("llama", 32, 4096, 32, 8, 128, 14336, 128256, False),
    "facebook/chameleon-7b": ("llama", 32, 4096, 32, 32, 128, 11008, 65536, False),
    "facebook/chameleon-30b": ("llama", 48, 8192, 64, 64, 128, 22016, 65536, False),
    "microsoft/Phi-3-vision-128k-instruct": ("phi3", 32, 3072, 32, 32, 96, 8192, 32064, False),
}


def arch_of(name: str) -> eng.Arch:
    """The engine's `Arch` of a model of `ARCH` or `EXTRA_ARCH` (Mixtral: 8 experts, top 2, every layer sparse)."""
    kind, layers, hidden, heads, kv, hd, inter, vocab, tied = ARCH[name] if name in ARCH else EXTRA_ARCH[name]
    moe = kind == "mixtral"
    return eng.Arch(
        layers, hidden, heads, kv, hd, inter, vocab, tied,
        experts=8 if moe else 0, top_k=2 if moe else 0, expert_intermediate=inter if moe else 0,
        moe_layers=layers if moe else 0, gated=kind not in eng.NON_GATED,
    )  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One measured row with what the engine model predicts for it without host time (ms)."""

    model: str
    device: str
    task: str
    tp: int
    batch: int
    generate: int
    params_b: float
    moe: bool
    tpot_ms: float  # measured avg_tpot_s x 1e3
    energy_j: float  # measured energy per output token per GPU
    gpu_ms: float  # predicted TPOT with no host time: decode step + the interleaved prefills' GPU time
    context: float  # mean live context of a running sequence: prompt + generate / 2
    steady_ms: float = math.nan  # measured steady-state time per output token of one sequence: B / throughput x 1e3
    window: Window | None = None  # the leaderboard's two windows replayed on a simulated run (`replay_row`)


@dataclass(frozen=True)
class Window:
    """ML.ENERGY's two windows of one row replayed (`predictor.serving_window`) as linear functions of the host
    figures (every one of `eng.HOST_FIELDS`, in that order: step_ms, per_seq_ms, per_block_ms, per_tp_worker_ms,
    per_prompt_ms), ms: Avg TPOT = tpot_gpu_ms + tpot_host . figures; steady-state time per output token of one
    sequence = steady_gpu_ms + steady_host . figures; with the simulated run's steady running batch and request
    count."""

    tpot_gpu_ms: float
    tpot_host: tuple[float, ...]
    steady_gpu_ms: float
    steady_host: tuple[float, ...]
    steady_batch: float
    requests: int

    def tpot_ms(self, coef) -> float:
        return self.tpot_gpu_ms + float(np.dot(self.tpot_host, coef))

    def steady_ms(self, coef) -> float:
        return self.steady_gpu_ms + float(np.dot(self.steady_host, coef))


VIDUR = ROOT / "data" / "vidur-ops"


def fit_streaming(folder: Path = VIDUR) -> dict:
    """The `weight_streaming_gemm` entry of the serving-parameter file: per kernel family, (exec_us, e_memory)
    minimising the relative error of time = exec + bytes / (bandwidth x e_memory) over Vidur's float16 linear layers
    (QKV, output, up, down; every tensor-parallel split) of m <= `eng.STREAM_M_MAX` tokens moving >=
    `eng.STREAM_MIN_BYTES`, with the MAPE of that fit and of the kernel model's GEMM entry on the same rows, and on
    the blended rows up to `eng.STREAM_M_BLEND` tokens."""
    from scipy.optimize import lsq_linear

    from .kernel_fit import VIDUR_GEMMS, family_of, read_vidur
    from .kernel_model import kernel_arrays, kernel_latency_arrays

    recs = [r for r in read_vidur(folder) if r.kind == "gemm" and r.op in VIDUR_GEMMS]
    fams = {}
    for dev in sorted({r.device for r in recs}):
        device, fam = get_device(dev), family_of(dev)
        big = [r for r in recs if r.device == dev and r.bytes_read + r.bytes_written >= eng.STREAM_MIN_BYTES]
        sel = [r for r in big if r.params["m"] <= eng.STREAM_M_MAX]
        x = np.array([(r.bytes_read + r.bytes_written) / device.bandwidth for r in sel])
        y = np.array([r.latency_s for r in sel])
        c = lsq_linear(np.stack([np.ones_like(x), x], 1) / y[:, None], np.ones_like(y), bounds=([0, 1], np.inf)).x
        entry = {"exec_us": round(float(c[0]) * 1e6, 3), "e_memory": round(1.0 / float(c[1]), 4)}
        ev = {}
        with streaming_override({fam: eng.StreamingGemm(entry["exec_us"], entry["e_memory"])}):
            for lo, hi in ((1, eng.STREAM_M_MAX), (eng.STREAM_M_MAX + 1, eng.STREAM_M_BLEND - 1)):
                rows = [r for r in big if lo <= r.params["m"] <= hi]
                ks = [eng._gemm("g", r.params["m"], r.params["n"], r.params["k"], 2.0, "float16") for r in rows]
                t = kernel_latency_arrays(kernel_arrays(ks), device)
                old = np.maximum(t.compute_s, t.memory_s)
                new = np.array([eng.cost_kernels([k], device, graph=True, link_bytes_per_s=None, tp=1).total_s
                                for k in ks]) - eng.GRAPH_GAP_US * 1e-6  # fmt: skip
                meas = np.array([r.latency_s for r in rows])
                ev[f"m {lo}-{hi}"] = {
                    "rows": len(rows),
                    "mape_kernel_model_pct": round(float(np.mean(np.abs(old - meas) / meas) * 100), 1),
                    "mape_pct": round(float(np.mean(np.abs(new - meas) / meas) * 100), 1),
                }
        entry["evaluation"] = ev
        small = ev[f"m 1-{eng.STREAM_M_MAX}"]
        entry["source"] = (
            f"fit: Vidur float16 linear layers on {dev} (data/vidur-ops, MIT licence), {len(sel)} GEMMs of m <= "
            f"{eng.STREAM_M_MAX} tokens moving >= {eng.STREAM_MIN_BYTES // eng.MIB} MiB; MAPE {small['mape_pct']}% "
            f"(the kernel model's GEMM entry: {small['mape_kernel_model_pct']}%)"
        )
        fams[fam] = entry
    return {
        "created_by": "python -m predictor.serving_fit",
        "model": "decode-sized float16/bfloat16 GEMM time = exec_us + bytes / (bandwidth x e_memory), at least its "
        f"compute time; m <= {eng.STREAM_M_MAX} tokens, blended linearly with the kernel model up to m = "
        f"{eng.STREAM_M_BLEND}",
        "families": fams,
    }


class streaming_override:
    """Within the block the engine costs GEMMs with `table` (kernel family -> `StreamingGemm`) instead of the
    serving-parameter file's, and decode attention with `attention` when given (the fit uses the figures it is
    writing)."""

    def __init__(self, table: dict, attention: dict | None = None) -> None:
        self.table = table
        self.attention = attention

    def __enter__(self):
        self.saved = eng._STREAM_OVERRIDE, eng._ATTN_OVERRIDE
        eng._STREAM_OVERRIDE = self.table
        if self.attention is not None:
            eng._ATTN_OVERRIDE = self.attention
        return self

    def __exit__(self, *exc) -> None:
        eng._STREAM_OVERRIDE, eng._ATTN_OVERRIDE = self.saved


ATTENTION_DATA = ROOT / "data" / "public-models" / "decode-attention-h100.jsonl"


def _attention_kernel(r: dict) -> eng.EngineKernel:
    """The engine's paged decode-attention kernel for one timing row (its bytes: K and V of every sequence's context,
    the queries read, the outputs written, half precision)."""
    heads, kv, hd = r["num_heads"], r["num_kv_heads"], r["head_size"]
    a = eng.Arch(1, heads * hd, heads, kv, hd, 1, 1)
    k = eng.EngineKernel(eng.DECODE_ATTENTION, "attention", 0.0, 0.0, 0.0, "float16", {}, 1.0)
    return eng._attention_for(k, r["num_seqs"], a, 1, float(r["seq_len"]), "float16")


def fit_decode_attention(path: Path = ATTENTION_DATA) -> dict:
    """The `decode_attention` entry of the serving-parameter file: per kernel family (exec_us, e_memory) minimising
    the relative error of time = exec + bytes / (bandwidth x e_memory) over public paged decode-attention timings
    (`ATTENTION_DATA`: two kernels on an H100 SXM), with the MAPE of the kernel model's attention entry on the same
    rows and each kernel's rows predicted by a fit on the other's (held out)."""
    from scipy.optimize import lsq_linear

    from .kernel_fit import family_of

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_gpu = {}
    for r in rows:
        by_gpu.setdefault(GPUS[r["gpu"]], []).append(r)
    fams = {}
    for dev, sel in sorted(by_gpu.items()):
        device = get_device(dev)
        ks = [_attention_kernel(r) for r in sel]
        nb = np.array([k.bytes_read + k.bytes_written for k in ks])
        y = np.array([r["gpu_time_us"] * 1e-6 for r in sel])

        bw = device.bandwidth

        def fit_on(mask, nb=nb, y=y, bw=bw):
            x = nb[mask] / bw
            a = np.stack([np.ones_like(x), x], 1) / y[mask, None]
            c = lsq_linear(a, np.ones(int(mask.sum())), bounds=([0, 1], np.inf)).x
            return float(c[0]), 1.0 / float(c[1])

        def mape(mask, ex, e, nb=nb, y=y, bw=bw):
            pred = ex + nb[mask] / (bw * e)
            return round(float(np.mean(np.abs(pred - y[mask]) / y[mask]) * 100), 1)

        with streaming_override({}, {}):
            t = [eng.cost_kernels([k], device, graph=True, link_bytes_per_s=None, tp=1) for k in ks]
        model = np.array([x.compute_s + x.memory_s for x in t])
        everything = np.ones(len(sel), bool)
        ex, e = fit_on(everything)
        kinds = sorted({r["kernel"] for r in sel})
        held = {}
        for kind in kinds:
            test = np.array([r["kernel"] == kind for r in sel])
            hex_, he = fit_on(~test)
            held[kind] = {
                "rows": int(test.sum()),
                "mape_held_out_pct": mape(test, hex_, he),
                "mape_kernel_model_pct": round(float(np.mean(np.abs(model[test] - y[test]) / y[test]) * 100), 1),
            }
        fams[family_of(dev)] = {
            "exec_us": round(ex * 1e6, 3),
            "e_memory": round(e, 4),
            "evaluation": {
                "all rows": {
                    "rows": len(sel),
                    "mape_pct": mape(everything, ex, e),
                    "mape_kernel_model_pct": round(float(np.mean(np.abs(model - y) / y) * 100), 1),
                    "largest_call_mib": round(float(nb.max()) / eng.MIB, 1),
                },
                "each kernel held out": held,
            },
            "source": (
                f"fit: {len(sel)} public paged decode-attention timings on {dev} (data/public-models/"
                f"{path.name}: onnxruntime PR 21414, its kernel at page 16 and FlashAttention-2 at page 256, 64 "
                f"query / 8 KV heads, 64 sequences of 32-512 tokens); calls up to {nb.max() / eng.MIB:.0f} MiB"
            ),
        }
    return {
        "created_by": "python -m predictor.serving_fit",
        "model": "paged decode attention (half precision) time = exec_us + bytes / (bandwidth x e_memory), at least "
        "its compute time; bytes = K and V of every live sequence's context + queries + outputs",
        "families": fams,
    }


def streaming_table(doc: dict) -> dict:
    """The `weight_streaming_gemm` entry as the engine's table (kernel family -> `StreamingGemm`)."""
    return {f: eng.StreamingGemm(e["exec_us"], e["e_memory"], e["source"]) for f, e in doc["families"].items()}


#: Host models the fit can use (`--host-model`): the `eng.HOST_FIELDS` each fits (the others 0). "block", the
#: committed profile's: step, per KV block of the running sequences, per extra tensor-parallel worker; "seq": per
#: running sequence instead of per block; "+prompt": and per prompt a prefill step admits. docs/llm-serving.md
#: ("Host time per sequence, not per block") gives each one's held-out MAPE; "seq" is the committed profile's since
#: issue 24's check compares like with like ("Issue 24 checked like for like"), "block" before.
HOST_MODELS = {
    "seq+prompt": ("step_ms", "per_seq_ms", "per_tp_worker_ms", "per_prompt_ms"),
    "block": ("step_ms", "per_block_ms", "per_tp_worker_ms"),
    "block+prompt": ("step_ms", "per_block_ms", "per_tp_worker_ms", "per_prompt_ms"),
    "seq": ("step_ms", "per_seq_ms", "per_tp_worker_ms"),
    "seq+block+prompt": ("step_ms", "per_seq_ms", "per_block_ms", "per_tp_worker_ms", "per_prompt_ms"),
}
HOST_MODEL = "seq"


def host_features(r: Row) -> np.ndarray:
    """The engine's TPOT host time (ms) = features . figures (`eng.HOST_FIELDS` order): one decode step per output
    token (1, B sequences, B x ceil(L / block size) KV blocks, tp - 1 workers) and the B / generate prompts its
    interleaved prefills admit per decode step (`eng.serve`)."""
    blocks = r.batch * math.ceil(r.context / eng.BLOCK_SIZE)
    return np.array([1.0, float(r.batch), float(blocks), float(r.tp - 1), r.batch / r.generate])


def mask_of(model: str) -> np.ndarray:
    """1 for each of `eng.HOST_FIELDS` the host model fits, 0 for the others."""
    return np.array([1.0 if f in HOST_MODELS[model] else 0.0 for f in eng.HOST_FIELDS])


def host_params(coef, source: str = "", profile: str = PROFILE) -> eng.HostParams:
    """The engine's `HostParams` of figures `coef` (ms, `eng.HOST_FIELDS` order)."""
    c = dict(zip(eng.HOST_FIELDS, map(float, coef), strict=True))
    return eng.HostParams(
        c["step_ms"], c["per_block_ms"], c["per_tp_worker_ms"], source,
        per_seq_ms=c["per_seq_ms"], profile=profile, per_prompt_ms=c["per_prompt_ms"],
    )  # fmt: skip


def coef_of(h: eng.HostParams) -> np.ndarray:
    """The figures of a `HostParams` in `eng.HOST_FIELDS` order (ms)."""
    return np.array([float(getattr(h, f)) for f in eng.HOST_FIELDS])


#: Mean round-up of ceil(x / 16) - x / 16 over x uniform in its residues mod 16: (1 + ... + 15) / 256 = 15/32 block a
#: sequence (the replay counts KV blocks as the live tokens / 16 + this per sequence).
BLOCK_ROUND_UP = sum(range(eng.BLOCK_SIZE)) / eng.BLOCK_SIZE**2


class StepCache:
    """GPU times (ms, no host time) of decode steps by running batch and of prefill steps by prompts, per (model,
    GPU, tensor parallel, prompt); a decode step at a sum of live contexts C: its time at the batch's reference
    context + the attention's time per context token (linear in the tokens read) x (C - batch x reference)."""

    def __init__(self) -> None:
        self.decode: dict = {}
        self.prefill: dict = {}
        self.slope: dict = {}

    def decode_ms(self, key, a, dev, tp, b: int, ctx_total: float, ref: float) -> float:
        if key not in self.slope:
            lo = eng.decode_step(a, dev, 8, ref, tp=tp, host=ZERO_HOST).total_ms
            hi = eng.decode_step(a, dev, 8, ref + 1024, tp=tp, host=ZERO_HOST).total_ms
            self.slope[key] = (hi - lo) / (8 * 1024)
        # above the largest captured batch the step runs eagerly, its time smooth in the batch: every 8th batch costed
        at = b if b <= eng.CAPTURED_BATCHES[-1] else 8 * round(b / 8)
        k = (key, at)
        if k not in self.decode:
            self.decode[k] = eng.decode_step(a, dev, at, ref, tp=tp, host=ZERO_HOST).total_ms
        return self.decode[k] + self.slope[key] * (ctx_total - b * ref)

    def prefill_ms(self, key, a, dev, tp, k: int, prompt: int) -> float:
        if (key, k) not in self.prefill:
            self.prefill[key, k] = eng.prefill_step(a, dev, k, prompt, tp=tp, host=ZERO_HOST).total_ms
        return self.prefill[key, k]


ZERO_HOST = eng.HostParams(0.0, 0.0, 0.0, "zero")


def host_matrix(s: win.Schedule, tp: int) -> np.ndarray:
    """(iterations, len(`eng.HOST_FIELDS`)): each iteration's host time = its row . the figures (ms). A decode
    iteration of b sequences with live tokens C: (1, b, C / 16 + 15/32 b, tp - 1, 0) (the KV blocks: the live tokens
    over the block size plus the mean round-up per sequence); a prefill iteration of p prompts: (0, 0, 0, 0, p)."""
    dec = s.decode.astype(float)
    return np.stack(
        [
            dec,
            dec * s.seqs,
            dec * (s.context / eng.BLOCK_SIZE + BLOCK_ROUND_UP * s.seqs),
            dec * (tp - 1.0),
            (1.0 - dec) * s.seqs,
        ],
        1,
    )


def replay_row(r: dict, a: eng.Arch, dev: str, cache: StepCache | None = None, seed: int = 0) -> Window:
    """The row's two windows replayed (`serving_window.schedule` on `serving_window.output_lengths`: the row's
    --max-num-seqs, request count, mean output length and task's max_tokens, prompts of `PROMPT_TOKENS`), each
    iteration's GPU time from the engine model and its host time a linear function of the figures (`eng.HOST_FIELDS`
    order): a decode step of b sequences with live tokens C has (1, b, C / 16 + 15/32 b, tp - 1, 0) as its features,
    a prefill step of p prompts (0, 0, 0, 0, p)."""
    cache = cache or StepCache()
    task = r["task"].split("/")[-1]
    tp, prompt = r["parallelization"]["tp"], PROMPT_TOKENS[task]
    n = win.requests(task, dev, r["num_gpus"], r["model"], r["avg_output_len"])
    cap = win.MAX_TOKENS[task]
    distinct = win.DATASET[task] if task == "code" else None  # greedy: each copy of the dataset yields the same
    lengths = win.output_lengths(r["avg_output_len"], cap, n, distinct=distinct, seed=seed)
    s = win.schedule(lengths, r["max_num_seqs"], prompt)
    key = (r["model"], dev, tp, prompt)
    device = get_device(dev)
    gpu = np.array(
        [
            cache.decode_ms(key, a, device, tp, int(b), c, float(prompt)) if d else
            cache.prefill_ms(key, a, device, tp, int(b), prompt)
            for d, b, c in zip(s.decode, s.seqs, s.context, strict=True)
        ]
    )  # fmt: skip
    x = host_matrix(s, tp)
    sw = s.steady_weight()
    return Window(
        float(s.tpot_weight @ gpu), tuple(map(float, s.tpot_weight @ x)), float(sw @ gpu), tuple(map(float, sw @ x)),
        s.steady_batch, n,
    )  # fmt: skip


def load_rows(path: Path = DATA, windows: bool = False) -> list[Row]:
    """The vLLM rows of the models in `ARCH` (pp = 1), each predicted with zero host time; `windows`: with the
    leaderboard's two windows replayed (`replay_row`; about a minute)."""
    zero = ZERO_HOST
    cache = StepCache()
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if not r["runtime"].startswith("vLLM") or r["model"] not in ARCH or r["parallelization"]["pp"] != 1:
            continue
        dev = GPUS[r["gpu"]]
        a = arch_of(r["model"])
        task = r["task"].split("/")[-1]
        tp = r["parallelization"]["tp"]
        batch, gen = max(1, round(r["avg_batch_size"])), max(2, round(r["avg_output_len"]))
        s = eng.serve(a, get_device(dev), batch, PROMPT_TOKENS[task], gen, power_params(dev), tp=tp, host=zero)
        out.append(
            Row(
                r["model"], dev, task, tp, batch, gen, a.params() / 1e9, bool(a.experts), r["avg_tpot_s"] * 1e3,
                r["energy_per_request_j"] / r["avg_output_len"] / r["num_gpus"], s.tpot_ms,
                PROMPT_TOKENS[task] + gen / 2, r["avg_batch_size"] / r["output_tokens_per_s"] * 1e3,
                replay_row(r, a, dev, cache) if windows else None,
            )
        )  # fmt: skip
    return out


def _nnls(a: np.ndarray, y: np.ndarray, model: str) -> np.ndarray:
    """Non-negative least squares on the host model's columns of `a`; the figures in `eng.HOST_FIELDS` order, 0 for
    those the model does not fit."""
    from scipy.optimize import lsq_linear

    m = mask_of(model).astype(bool)
    out = np.zeros(len(eng.HOST_FIELDS))
    out[m] = lsq_linear(a[:, m], y, bounds=(0.0, np.inf)).x
    return out


def fit(rows: list[Row], model: str = HOST_MODEL) -> np.ndarray:
    """The host figures of `model` (`HOST_MODELS`; `eng.HOST_FIELDS` order, ms) >= 0 minimising the relative error of
    the engine's TPOT against avg_tpot_s over `rows`."""
    a = np.array([host_features(r) for r in rows])
    meas = np.array([r.tpot_ms for r in rows])
    gpu = np.array([r.gpu_ms for r in rows])
    return _nnls(a / meas[:, None], (meas - gpu) / meas, model)


def fit_windows(rows: list[Row], model: str = HOST_MODEL) -> np.ndarray:
    """The host figures of `model` (`HOST_MODELS`; `eng.HOST_FIELDS` order, ms) >= 0 minimising, over `rows` (with
    `Row.window`), the relative errors of both replayed windows together: the replayed Avg TPOT against avg_tpot_s
    and the replayed steady-state time per output token against avg_batch_size / output_tokens_per_s (one host model
    for both windows)."""
    a, y = [], []
    for r in rows:
        w = r.window
        a += [np.array(w.tpot_host) / r.tpot_ms, np.array(w.steady_host) / r.steady_ms]
        y += [(r.tpot_ms - w.tpot_gpu_ms) / r.tpot_ms, (r.steady_ms - w.steady_gpu_ms) / r.steady_ms]
    return _nnls(np.array(a), np.array(y), model)


def predict(r: Row, coef: np.ndarray) -> float:
    return r.gpu_ms + float(host_features(r) @ coef)


def lomo(rows: list[Row], fitter=fit) -> list[float]:
    """Leave-one-model-out TPOT (ms) of every row: its model's rows predicted by a fit (`fitter`: `fit` or
    `fit_windows`) on the other models' rows."""
    pred = [0.0] * len(rows)
    for model in {r.model for r in rows}:
        coef = fitter([r for r in rows if r.model != model])
        for i, r in enumerate(rows):
            if r.model == model:
                pred[i] = predict(r, coef)
    return pred


def _median(pairs: list[tuple[float, float]]) -> float:
    return float(np.median([p / m for p, m in pairs])) if pairs else float("nan")


def _mape(pairs: list[tuple[float, float]]) -> float:
    return float(np.mean([abs(p - m) / m for p, m in pairs]) * 100) if pairs else float("nan")


def size_group(r: Row) -> str:
    if r.moe:
        return "moe"
    return "dense <8B" if r.params_b < 7.9 else "dense 8-32B" if r.params_b <= 32.5 else "dense >32B"


#: What the host figures are fitted on (`run`): "tpot", the rows' avg_tpot_s against the engine's TPOT (`fit`);
#: "windows", both of the leaderboard's windows replayed (`fit_windows`).
FIT_ON = ("tpot", "windows")
WHAT = {
    "tpot": "the rows' avg_tpot_s",
    "windows": "both of the leaderboard's windows replayed on a simulated run (Avg TPOT with the drain, and the "
    "steady state's B / throughput; predictor.serving_window)",
}


#: What each host model's figures are, for the profile's "model" string.
MODEL_TERMS = {
    "step_ms": "step_ms",
    "per_seq_ms": "per_seq_ms x B",
    "per_block_ms": "per_block_ms x B x ceil(context / 16)",
    "per_tp_worker_ms": "per_tp_worker_ms x (tp - 1)",
}


def model_text(model: str) -> str:
    """The host model's formula, as the profile's "model" entry states it."""
    fields = HOST_MODELS[model]
    dec = " + ".join(MODEL_TERMS[f] for f in fields if f in MODEL_TERMS)
    pre = "per_prompt_ms x P" if "per_prompt_ms" in fields else "none"
    return f"decode step host ms = {dec}; prefill step of P prompts: {pre}"


def run(
    path: Path = DATA, vidur: Path = VIDUR, fit_on: str = "windows", host_model: str = HOST_MODEL
) -> tuple[dict, str]:
    """Fit the streaming GEMMs (`fit_streaming`) and paged decode attention (`fit_decode_attention`), then the host
    figures of `host_model` (`HOST_MODELS`) on both GPUs on top of them (`fit_on`, one of `FIT_ON`); return (the
    `PROFILE` profile of the serving-parameter file with the two kernel fits under the keys `weight_streaming_gemm`
    and `decode_attention`, the Markdown before/after table, which adds, held out, the replayed Avg TPOT against
    avg_tpot_s, the replayed steady state against avg_batch_size / output_tokens_per_s and the engine's TPOT against
    the latter)."""
    stream, attention = fit_streaming(vidur), fit_decode_attention()
    with streaming_override(streaming_table(stream), streaming_table(attention)):
        rows = load_rows(path, windows=True)

    def fitter(rs: list[Row]) -> np.ndarray:
        return (fit_windows if fit_on == "windows" else fit)(rs, host_model)

    devices, lines = {}, []
    lines.append(
        "| GPU | rows | group | TPOT MAPE before | TPOT MAPE after (LOMO) | median LOMO pred/meas | replayed Avg TPOT "
        "MAPE (median) | replayed steady state MAPE (median) | TPOT vs steady state MAPE (median) |"
    )
    lines.append("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for dev in sorted({r.device for r in rows}):
        dense = [r for r in rows if r.device == dev and not r.moe]
        coef = fitter(dense)
        held_coef = {m: fitter([r for r in dense if r.model != m]) for m in {r.model for r in dense}}
        held = {id(r): predict(r, held_coef[r.model]) for r in dense}
        moe = [r for r in rows if r.device == dev and r.moe]
        ev = {}
        for group in ("dense 8-32B", "dense (all)", "dense <8B", "dense >32B", "moe"):
            if group == "moe":
                sel, after = moe, [predict(r, coef) for r in moe]  # not in the fit: the all-dense figures
            else:
                sel = [r for r in dense if group == "dense (all)" or size_group(r) == group]
                after = [held[id(r)] for r in sel]
            # before this fit: 1 ms + 40 us per sequence per decode step (vLLM issues #6854, #6801), no fit: the
            # figures the vllm-overlapped profile had until 2026-11-26
            before = [r.gpu_ms + 1.0 + 0.04 * r.batch for r in sel]
            b = _mape(list(zip(before, [r.tpot_ms for r in sel], strict=True)))
            a = _mape(list(zip(after, [r.tpot_ms for r in sel], strict=True)))
            med = float(np.median([p / r.tpot_ms for p, r in zip(after, sel, strict=True)]))
            ev[group] = {"rows": len(sel), "mape_before_pct": round(b, 1), "mape_lomo_pct": round(a, 1)}
            cs = [coef if r.moe else held_coef[r.model] for r in sel]
            rep = [(r.window.tpot_ms(c), r.tpot_ms) for r, c in zip(sel, cs, strict=True)]
            rss = [(r.window.steady_ms(c), r.steady_ms) for r, c in zip(sel, cs, strict=True)]
            ss = [(p, r.steady_ms) for p, r in zip(after, sel, strict=True)]
            ev[group] |= {"replayed_avg_tpot_mape_lomo_pct": round(_mape(rep), 1),
                          "replayed_steady_state_mape_lomo_pct": round(_mape(rss), 1),
                          "tpot_vs_steady_state_mape_lomo_pct": round(_mape(ss), 1)}  # fmt: skip
            lines.append(
                f"| {dev} | {len(sel)} | {group} | {b:.1f}% | {a:.1f}% | {med:.2f} | {_mape(rep):.1f}% "
                f"({_median(rep):.2f}) | {_mape(rss):.1f}% ({_median(rss):.2f}) | {_mape(ss):.1f}% "
                f"({_median(ss):.2f}) |"
            )
        figures = {
            f: round(float(c), 5 if f in ("per_block_ms", "per_seq_ms") else 3)
            for f, c in zip(eng.HOST_FIELDS, coef, strict=True)
        }
        devices[dev] = {
            **{f: v for f, v in figures.items() if f in HOST_MODELS[host_model]},
            "context_range": [min(r.context for r in dense), max(r.context for r in dense)],
            "rows": len(dense),
            "models": len({r.model for r in dense}),
            "evaluation": ev,
            "source": (
                f"fit: ML.ENERGY Leaderboard v2 vLLM 0.5.4 rows on {dev} ({len(dense)} rows of "
                f"{len({r.model for r in dense})} dense models; python -m predictor.serving_fit, fitted on "
                f"{WHAT[fit_on]}; host model {host_model!r}), leave-one-model-out MAPE on all dense rows: the engine's "
                f"TPOT against the steady-state inter-token latency (B / throughput) "
                f"{ev['dense (all)']['tpot_vs_steady_state_mape_lomo_pct']}%, the replayed Avg TPOT against "
                f"avg_tpot_s {ev['dense (all)']['replayed_avg_tpot_mape_lomo_pct']}% (the engine's TPOT against "
                f"avg_tpot_s, which counts the drain: {ev['dense (all)']['mape_lomo_pct']}%)"
            ),
        }
    doc = {
        "description": (
            "vLLM 0.5.4's OpenAI server as ML.ENERGY v2 ran it: frontend in the engine's process, no chunked "
            "prefill, no asynchronous output processing, no multi-step scheduling; the engine's host work between "
            "decode steps serialised with the GPU"
        ),
        "fitted": True,
        "chunked_prefill": False,
        "source": (
            f"fit: ML.ENERGY Leaderboard v2 vLLM 0.5.4 rows, per GPU host, on {WHAT[fit_on]}, leave-one-model-out "
            "(python -m predictor.serving_fit)"
        ),
        "created_by": "python -m predictor.serving_fit",
        "data": (
            "data/public-models/mlenergy-llm-v2.jsonl (ML.ENERGY Leaderboard v2, github.com/ml-energy/leaderboard-v2 "
            "@ c3af7f31e2, Apache-2.0): vLLM 0.5.4 OpenAI server, --enable-chunked-prefill False, --max-model-len "
            "4096, --disable-frontend-multiprocessing, all requests sent at once, --max-num-seqs varied; A100 rows "
            "on AWS p4d.24xlarge, H100 rows on p5.48xlarge"
        ),
        "prompt_tokens_assumed": PROMPT_TOKENS,
        "fitted_on": fit_on,
        "host_model": host_model,
        "model": model_text(host_model),
        "transfers": {k: v for k, v in eng.HOST_TRANSFERS.items()},
        "devices": devices,
        "weight_streaming_gemm": stream,
        "decode_attention": attention,
    }
    return doc, "\n".join(lines)


def merge(profile: dict, path: Path) -> dict:
    """The serving-parameter file at `path` with its `PROFILE` profile replaced by `profile` (the other profiles and
    the default kept); a new file holding only it when `path` is missing or of another schema."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("profiles"), dict):
        doc = {"schema": SCHEMA, "default_profile": PROFILE, "profiles": {}}
    profile = dict(profile)
    for key in ("weight_streaming_gemm", "decode_attention"):  # kernel fits: the file's, not the profile's
        fit = profile.pop(key, None)
        if fit is not None:
            doc[key] = fit
    doc["profiles"][PROFILE] = profile
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=eng.SERVING_PARAMS_PATH)
    ap.add_argument("--check", action="store_true", help="print the table only; write nothing")
    ap.add_argument(
        "--fit-on",
        choices=FIT_ON,
        default="windows",
        help="fit the host figures on both of the leaderboard's windows replayed (windows, the default: "
        "docs/llm-serving.md; about a minute) or on avg_tpot_s against the engine's TPOT (tpot, the fit before "
        "2026-11-26)",
    )
    ap.add_argument(
        "--host-model",
        choices=tuple(HOST_MODELS),
        default=HOST_MODEL,
        help="the host figures fitted (default %(default)s, the committed profile's: step + per KV block + per extra "
        "tensor-parallel worker per decode step; 'seq': per running sequence instead of per block; '+prompt': and per "
        "prompt a prefill step admits; docs/llm-serving.md)",
    )
    args = ap.parse_args(argv)
    if not args.data.is_file():
        print(f"error: no such data file: {args.data}", file=sys.stderr)
        return 2
    doc, table = run(args.data, fit_on=args.fit_on, host_model=args.host_model)
    print(table)
    for dev, d in doc["devices"].items():
        print(f"{dev}: " + ", ".join(f"{f} {d[f]}" for f in eng.HOST_FIELDS if f in d))
    if not args.check:
        try:
            args.out.write_text(json.dumps(merge(doc, args.out), indent=1) + "\n")
        except OSError as e:
            print(f"error: cannot write {args.out}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(f"wrote profile {PROFILE!r} into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
