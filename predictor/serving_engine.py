"""A decoder LM as a serving engine runs it (vLLM-style): kernels per step from the config, CUDA-graph decode,
continuous batching, a paged KV cache, tensor parallelism, mixture-of-experts, power and energy.

Pure python (no TVM, no analyzer): `preflight llm --runtime vllm` (analyzer.llm) calls it; docs/llm-serving.md says
what each number rests on. Units: times in seconds unless a name says ms, bytes, watts, joules.

The kernels one decode step launches on each GPU (T = batch tokens, per decoder layer, tensor parallel N):

    fused add + RMSNorm -> QKV GEMM -> rotary -> KV-cache write -> paged attention over each sequence's live
    context -> O GEMM -> all-reduce -> fused add + RMSNorm -> gate/up GEMM -> SiLU-and-multiply -> down GEMM ->
    all-reduce

then a final RMSNorm, the LM-head GEMM and sampling. A mixture-of-experts layer replaces the three MLP kernels by
a router GEMM, top-k, and per touched expert the same three kernels on its share of the tokens (plus the shared
experts on every token). Heads, KV heads, the MLP's intermediate size and the vocabulary are split N ways
(Megatron-style column / row parallel linears; KV heads replicated when fewer than N).

Timing: each kernel's execution time is the kernel model's max(compute, memory) at its fitted efficiencies
(`predictor.kernel_model`, float16 GEMM parameters fitted on Vidur's kernel durations; bfloat16 uses them), except
that a decode-sized half-precision GEMM streams its weights at the family's own fit (`StreamingGemm`). A
decode step captured in a CUDA graph pays no host launch per kernel, only `GRAPH_GAP_US` between kernels on the
device; a step beyond the largest captured batch runs eagerly (each kernel at least its launch floor). Every decode
step adds the engine's host time while the GPU waits (`HostParams`: step_ms + per_seq_ms x the running sequences +
per_block_ms x their KV blocks + per_tp_worker_ms x (tp - 1)), from a named engine profile (`EngineProfile`) of
`predictor/serving_params.json` or a user's profile file: `vllm-overlapped` (the default: vLLM V1 with asynchronous
scheduling, 0.16 ms per step from vLLM PR #11133's measurement; not fitted) or `vllm-0.5.4` (fitted on ML.ENERGY v2's
vLLM 0.5.4 rows).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .devices import Device
from .kernel_model import DEVICE_LAUNCH_US, kernel_arrays, kernel_latency_arrays

# ---- published figures the engine model rests on ---------------------------------------------------------------

#: Device-side gap between two kernels of a replayed CUDA graph, microseconds. Assumed (a graph's kernels are
#: queued on the device: no host dispatch between them; the gap of a few microseconds is the launch of the next
#: kernel's grid). Not measured here. The kernel model's `DEVICE_LAUNCH_US` (also the gap between the kernels one
#: library call launches, such as cuDNN's RNN steps): one figure.
GRAPH_GAP_US = DEVICE_LAUNCH_US
#: The engine profiles: the engine's host time per decode step while the GPU waits (scheduling, input preparation,
#: sampling's host side, output processing and detokenization), each profile with its source and its default:
#: `vllm-overlapped` (published, not fitted) and `vllm-0.5.4` (fitted per host on ML.ENERGY v2's vLLM 0.5.4 rows,
#: leave-one-model-out: `python -m predictor.serving_fit` writes that profile; docs/llm-serving.md).
SERVING_PARAMS_PATH = Path(__file__).resolve().parent / "serving_params.json"
SERVING_SCHEMA = "preflight.serving_params/2"
#: A user's engine-profile file (`preflight llm --runtime vllm --engine-profile FILE`).
PROFILE_SCHEMA = "preflight.engine_profile/1"
PROFILE_MAX_BYTES = 1 << 20  # a profile file is read only up to this size
#: GPUs without their own fit take the host figures of the fitted GPU of the same generation (the CPUs of the
#: servers they come in are assumed alike; an assumption): built-in GPUs as `predictor.power_fit.TRANSFERS` says,
#: a user device by its kernel family here.
HOST_TRANSFERS = {"ampere": "a100-40gb", "hopper": "h100-80gb"}
#: Batch sizes vLLM 0.5.x captures CUDA graphs for (`_BATCH_SIZES_TO_CAPTURE`: 1, 2, 4, then multiples of 8 up to
#: 256); a decode batch is padded up to the next one, and runs eagerly above 256.
CAPTURED_BATCHES = (1, 2, 4, *range(8, 257, 8))
#: Latency of one all-reduce call, microseconds: assumed (NCCL / vLLM custom all-reduce on NVLink, small
#: messages; not measured here).
ALLREDUCE_LATENCY_US = 8.0
#: vLLM's defaults: tokens per KV-cache block and the fraction of GPU memory the engine may use.
BLOCK_SIZE = 16
BLOCK_SIZES = (8, 16, 32)  # vLLM 0.5's `--block-size` choices
GPU_MEMORY_UTILIZATION = 0.9
#: Tokens of vLLM's profiling forward pass (max_num_batched_tokens without chunked prefill: max(max_model_len,
#: 2048); we use 2048 capped by the model's positions, the activations it measures set the KV pool aside).
PROFILE_TOKENS = 2048
#: Chunked prefill (vLLM V1: always on, decodes scheduled first, waiting prompts fill the rest of the step's token
#: budget `--max-num-batched-tokens` and are chunked to fit; vLLM docs/configuration/optimization.md, "Chunked
#: Prefill"). The budget's default for vLLM's OpenAI server (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults):
#: 8192 tokens on a GPU of >= 70 GiB that is not an A100, 2048 otherwise (`default_batched_tokens`).
BATCHED_TOKENS_LARGE = 8192
BATCHED_TOKENS_SMALL = 2048
LARGE_GPU_GIB = 70.0

MIB = 2**20

#: Decode-sized GEMMs stream their weights: time = exec_us + bytes / (bandwidth x e_memory), fitted per kernel family
#: on Vidur's H100 / A100 float16 linear layers of m <= `STREAM_M_MAX` tokens moving >= `STREAM_MIN_BYTES` (above
#: both GPUs' L2, so no replay reads weights from cache) by `python -m predictor.serving_fit` into the
#: `weight_streaming_gemm` entry of `serving_params.json`. The kernel model's one half-precision GEMM fit (21,593
#: shapes, most of them compute-bound) puts these at 0.745 of the bandwidth + 3.6 us on Hopper, 16% slow on the fit's
#: rows (docs/llm-serving.md). Between `STREAM_M_MAX` and `STREAM_M_BLEND` tokens the two are blended linearly in m
#: (no step in the time at m = 65); from `STREAM_M_BLEND` on the kernel model alone.
STREAM_M_MAX = 64
STREAM_M_BLEND = 256
STREAM_MIN_BYTES = 64 * MIB


#: Model types whose MLP is up-projection, activation, down-projection (no gate): two GEMMs, not three.
NON_GATED = ("gpt2", "gpt_bigcode", "starcoder2", "opt", "gpt_neox", "gptj", "falcon", "phi", "bloom")


class EngineConfigError(ValueError):
    """A config the engine model cannot read (missing sizes, an attention it does not model)."""


def _get(cfg: Mapping, *keys, default=None):
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            return v
    return default


@dataclass(frozen=True)
class Arch:
    """The sizes of a decoder LM that fix its kernels (read from a transformers config dict).

    Fields read: num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads (default: heads),
    head_dim (default hidden / heads), intermediate_size, vocab_size, tie_word_embeddings. Mixture of experts:
    num_local_experts (Mixtral) | num_experts (Qwen2/3-MoE) | n_routed_experts (DeepSeek) = E routed experts;
    num_experts_per_tok = k; moe_intermediate_size (else intermediate_size) = expert MLP size; shared experts:
    n_shared_experts x moe_intermediate_size (DeepSeek) or shared_expert_intermediate_size (Qwen2-MoE); dense
    (non-MoE) layers: the first first_k_dense_replace (DeepSeek), mlp_only_layers, or all but every
    decoder_sparse_step-th (Qwen).
    """

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool = False
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0
    moe_layers: int = 0
    gated: bool = True  # gate/up + SiLU-and-multiply (Llama family); False: up, GELU, down (GPT-2, StarCoder2)
    window: int | None = None  # every layer's sliding attention window, tokens (Mistral-7B-v0.1: 4096); None: full

    def attended(self, context: float) -> float:
        """Cached tokens a decode token attends over, and the tokens of a sequence's KV blocks: min(context,
        window). vLLM 0.5 keeps a sliding-window sequence's last ceil(window / block size) blocks (reused
        cyclically) and its model runner passes the paged kernel min(sequence length, window) tokens."""
        return context if self.window is None else min(context, self.window)

    def causal_pairs(self, q_len: int) -> float:
        """(query, key) pairs of a causal prefill of `q_len` tokens, half the score matrix as the flash kernel's cost
        counts it: q_len^2 / 2; with a window W < q_len, W^2 / 2 + (q_len - W) x W (each later token sees W)."""
        w = self.window
        if w is None or q_len <= w:
            return q_len * q_len / 2
        return w * w / 2 + (q_len - w) * w

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    def params(self) -> int:
        """Parameters: embeddings, attention, MLPs (all experts), norms."""
        h = self.hidden
        attn = h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h
        dense_mlp = (3 if self.gated else 2) * h * self.intermediate
        moe = 3 * h * self.expert_intermediate * self.experts + 3 * h * self.shared_intermediate + h * self.experts
        per = attn + 2 * h
        emb = self.vocab * h * (1 if self.tied else 2)
        return self.layers * per + self.dense_layers * dense_mlp + self.moe_layers * moe + emb + h

    @classmethod
    def from_config(cls, cfg: Mapping) -> Arch:
        text = cfg.get("text_config") if isinstance(cfg.get("text_config"), Mapping) else cfg
        if _get(text, "kv_lora_rank", "q_lora_rank") is not None:
            raise EngineConfigError(
                "multi-head latent attention (kv_lora_rank) is not modelled by the vllm runtime; use --runtime eager"
            )
        layers = _get(text, "num_hidden_layers", "n_layer")
        hidden = _get(text, "hidden_size", "n_embd")
        heads = _get(text, "num_attention_heads", "n_head")
        vocab = _get(text, "vocab_size")
        inter = _get(text, "intermediate_size", "n_inner", "ffn_dim")
        if inter is None and isinstance(hidden, int):
            inter = 4 * hidden
        vals = (layers, hidden, heads, vocab, inter)
        if not all(isinstance(v, int) and v > 0 for v in vals):
            raise EngineConfigError(
                "the config needs num_hidden_layers, hidden_size, num_attention_heads, vocab_size and "
                "intermediate_size as positive integers"
            )
        kv = _get(text, "num_key_value_heads", default=heads)
        check_kv_heads(heads, kv)
        head_dim = _get(text, "head_dim", default=hidden // heads)
        experts = int(_get(text, "num_local_experts", "num_experts", "n_routed_experts", default=0) or 0)
        top_k = int(_get(text, "num_experts_per_tok", "moe_topk", default=0) or 0)
        moe_layers, e_inter, shared = 0, 0, 0
        if experts > 1 and top_k > 0:
            e_inter = int(_get(text, "moe_intermediate_size", default=inter))
            shared = int(_get(text, "shared_expert_intermediate_size", default=0) or 0)
            shared += int(_get(text, "n_shared_experts", default=0) or 0) * e_inter
            dense = set(range(int(_get(text, "first_k_dense_replace", default=0) or 0)))
            dense |= {int(i) for i in _get(text, "mlp_only_layers", default=()) or ()}
            step = int(_get(text, "decoder_sparse_step", default=1) or 1)
            dense |= {i for i in range(layers) if (i + 1) % step != 0}
            moe_layers = layers - len(dense & set(range(layers)))
            if top_k > experts:
                raise EngineConfigError(f"num_experts_per_tok ({top_k}) exceeds the experts ({experts})")
        else:
            experts, top_k = 0, 0
        return cls(
            layers=int(layers),
            hidden=int(hidden),
            heads=int(heads),
            kv_heads=int(kv),
            head_dim=int(head_dim),
            intermediate=int(inter),
            vocab=int(vocab),
            tied=bool(_get(text, "tie_word_embeddings", default=cfg.get("tie_word_embeddings", False))),
            experts=experts,
            top_k=top_k,
            expert_intermediate=e_inter,
            shared_intermediate=shared,
            moe_layers=moe_layers,
            gated=str(text.get("model_type", cfg.get("model_type", ""))) not in NON_GATED,
        )


def check_kv_heads(heads: int, kv) -> None:
    """EngineConfigError unless `kv` KV heads split `heads` query heads evenly (grouped-query attention)."""
    if not (isinstance(kv, int) and 0 < kv <= heads and heads % kv == 0):
        raise EngineConfigError(
            f"num_key_value_heads ({kv}) must divide num_attention_heads ({heads}): grouped-query attention "
            "gives every KV head the same number of query heads"
        )


def expected_experts(experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts `tokens` tokens touch when each picks `top_k` of `experts` (uniform routing):
    E x (1 - (1 - k/E)^B)."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def allreduce_bytes_on_link(nbytes: float, n: int) -> float:
    """Bytes each GPU sends over its link in a ring all-reduce of `nbytes` across `n` GPUs: 2 (n - 1) / n x bytes."""
    return 0.0 if n <= 1 else 2.0 * (n - 1) / n * nbytes


def allreduce_s(nbytes: float, n: int, link_bytes_per_s: float, latency_us: float = ALLREDUCE_LATENCY_US) -> float:
    """Time of one ring all-reduce: 2 (n - 1) / n x bytes / link bandwidth + a per-call latency (0 for n = 1)."""
    if n <= 1:
        return 0.0
    return allreduce_bytes_on_link(nbytes, n) / link_bytes_per_s + latency_us * 1e-6


# ---- kernels ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineKernel:
    """One kernel launch of a step on one GPU, repeated `count` times (e.g. once per layer). FLOPs and bytes are
    one launch's; `kind`/`params` follow `passes.kernels.Kernel` (what `predictor.kernel_model` costs)."""

    name: str
    kind: str
    flops: float
    bytes_read: float
    bytes_written: float
    dtype: str
    params: dict = field(default_factory=dict)
    count: float = 1.0
    comm_bytes: float = 0.0  # an all-reduce: its message in bytes (costed on the link, not by the kernel model)


def _gemm(name: str, m: float, n: int, k: int, eb: float, dtype: str, count: float = 1.0, b: float = 1) -> EngineKernel:
    """b x (m x k) @ (k x n): 2 b m n k FLOPs; reads A and W, writes C."""
    return EngineKernel(
        name,
        "gemm",
        2.0 * b * m * n * k,
        b * (m * k + k * n) * eb,
        b * m * n * eb,
        dtype,
        {"b": b, "m": m, "n": n, "k": k},
        count,
    )


def _ew(name: str, kind: str, read: float, write: float, dtype: str, count: float, flops: float = 0.0):
    return EngineKernel(name, kind, flops, read, write, dtype, {}, count)


@dataclass(frozen=True)
class Split:
    """What one GPU holds of a layer under tensor parallelism n (Megatron-style)."""

    n: int
    heads: int
    kv_heads: int  # replicated when the model has fewer KV heads than GPUs
    intermediate: int
    expert_intermediate: int
    shared_intermediate: int
    vocab: int

    @classmethod
    def of(cls, a: Arch, n: int) -> Split:
        if a.heads % n:
            raise EngineConfigError(f"{a.heads} attention heads do not split over --tensor-parallel {n}")
        if a.kv_heads >= n and a.kv_heads % n:
            raise EngineConfigError(f"{a.kv_heads} KV heads do not split over --tensor-parallel {n}")
        return cls(
            n,
            a.heads // n,
            max(1, a.kv_heads // n),
            math.ceil(a.intermediate / n),
            math.ceil(a.expert_intermediate / n),
            math.ceil(a.shared_intermediate / n),
            math.ceil(a.vocab / n),
        )


def layer_kernels(
    a: Arch, s: Split, tokens: int, seqs: int, context: float, eb: float, dtype: str, *, prefill: bool, count: float
) -> list[EngineKernel]:
    """The kernels of `count` identical decoder layers on one GPU for one step of `tokens` tokens over `seqs`
    sequences whose attention reads `context` cached tokens each (decode: the live context; prefill: the prompt,
    causal). MLP kernels excluded (`mlp_kernels`)."""
    h, hd, t = a.hidden, a.head_dim, tokens
    qd, kvd = s.heads * hd, s.kv_heads * hd
    out = [
        _ew("fused_add_rms_norm", "norm", (2 * t * h + h) * eb, 2 * t * h * eb, dtype, count, 4.0 * t * h),
        _gemm("qkv_proj", t, qd + 2 * kvd, h, eb, dtype, count),
        _ew("rotary_embedding", "elementwise", (t * (qd + kvd) + t * hd) * eb, t * (qd + kvd) * eb, dtype, count),
        _ew("reshape_and_cache", "copy", 2 * t * kvd * eb, 2 * t * kvd * eb, dtype, count),
    ]
    if prefill:  # flash attention over the prompt, causal: half the score matrix (a sliding window: its band)
        q_len = tokens // max(seqs, 1)
        flops = 4.0 * seqs * s.heads * hd * a.causal_pairs(q_len)
        attn = EngineKernel(
            "flash_attention_prefill",
            "attention",
            flops,
            (t * qd + 2 * t * kvd) * eb,
            t * qd * eb,
            dtype,
            {"b": seqs, "h": s.heads, "s": q_len, "t": q_len, "d": hd},
            count,
        )
    else:  # paged attention: each sequence's query over its live context (within its window)
        context = a.attended(context)
        flops = 4.0 * seqs * s.heads * hd * context
        attn = EngineKernel(
            DECODE_ATTENTION,
            "attention",
            flops,
            (seqs * context * 2 * kvd + t * qd) * eb,
            t * qd * eb,
            dtype,
            {},  # no query-row tiles to quantise (see `_attention_for`)
            count,
        )
    out += [attn, _gemm("o_proj", t, h, qd, eb, dtype, count)]
    if s.n > 1:
        out.append(EngineKernel("all_reduce_attn", "allreduce", 0.0, 0.0, 0.0, dtype, {}, count, t * h * eb))
    out.append(_ew("fused_add_rms_norm", "norm", (2 * t * h + h) * eb, 2 * t * h * eb, dtype, count, 4.0 * t * h))
    return out


def mlp_kernels(
    a: Arch, s: Split, tokens: int, eb: float, dtype: str, *, moe: bool, count: float
) -> list[EngineKernel]:
    """The MLP of `count` identical layers on one GPU for `tokens` tokens: gate/up GEMM, SiLU-and-multiply, down
    GEMM (dense); a MoE layer: router GEMM, top-k, then per expert touched (expected number, `expected_experts`)
    the same three on its expected tokens (B k / touched), the shared experts on every token."""
    h, t = a.hidden, tokens

    def mlp(prefix: str, m: float, inter: int, c: float) -> list[EngineKernel]:
        if not a.gated:
            return [
                _gemm(f"{prefix}up_proj", m, inter, h, eb, dtype, c),
                _ew(f"{prefix}gelu", "elementwise", m * inter * eb, m * inter * eb, dtype, c, 8.0 * m * inter),
                _gemm(f"{prefix}down_proj", m, h, inter, eb, dtype, c),
            ]
        return [
            _gemm(f"{prefix}gate_up_proj", m, 2 * inter, h, eb, dtype, c),
            _ew(f"{prefix}silu_and_mul", "elementwise", 2 * m * inter * eb, m * inter * eb, dtype, c, 4.0 * m * inter),
            _gemm(f"{prefix}down_proj", m, h, inter, eb, dtype, c),
        ]

    if not moe:
        out = mlp("", t, s.intermediate, count)
    else:
        touched = expected_experts(a.experts, a.top_k, t)
        per_expert = t * a.top_k / touched if touched else 0.0
        out = [
            _gemm("router", t, a.experts, h, eb, dtype, count),
            _ew("topk_softmax", "softmax", t * a.experts * 4, t * a.top_k * 8, "float32", count),
        ]
        out += mlp("expert_", per_expert, s.expert_intermediate, count * touched)
        if s.shared_intermediate:
            out += mlp("shared_expert_", t, s.shared_intermediate, count)
    if s.n > 1:
        out.append(EngineKernel("all_reduce_mlp", "allreduce", 0.0, 0.0, 0.0, dtype, {}, count, t * h * eb))
    return out


def step_kernels(
    a: Arch, tp: int, seqs: int, *, context: float, prompt: int | None = None, dtype: str = "bfloat16"
) -> tuple[list[EngineKernel], list[EngineKernel]]:
    """(model kernels, sampling kernels) of one step on one GPU.

    Decode (`prompt` None): `seqs` sequences, one token each, attention over `context` cached tokens each.
    Prefill: `seqs` prompts of `prompt` tokens. The model kernels run in the CUDA graph (decode); the LM head's
    logits and sampling run outside it, eagerly (as in vLLM).
    """
    eb = 4.0 if dtype == "float32" else 2.0
    s = Split.of(a, tp)
    prefill = prompt is not None
    t = seqs * (prompt if prefill else 1)
    h = a.hidden
    ks = [_ew("embedding", "elementwise", t * h * eb + t * 8, t * h * eb, dtype, 1)]
    if tp > 1:
        ks.append(EngineKernel("all_reduce_embedding", "allreduce", 0.0, 0.0, 0.0, dtype, {}, 1, t * h * eb))
    ks += layer_kernels(a, s, t, seqs, context, eb, dtype, prefill=prefill, count=a.layers)
    if a.dense_layers:
        ks += mlp_kernels(a, s, t, eb, dtype, moe=False, count=a.dense_layers)
    if a.moe_layers:
        ks += mlp_kernels(a, s, t, eb, dtype, moe=True, count=a.moe_layers)
    ks.append(_ew("final_rms_norm", "norm", (t * h + h) * eb, t * h * eb, dtype, 1, 4.0 * t * h))
    # logits of each sequence's last token only; float32 sampling over the vocabulary
    sample = [
        _gemm("lm_head", seqs, s.vocab, h, eb, dtype, 1),
        _ew("sampler", "softmax", seqs * a.vocab * 4 * 2, seqs * a.vocab * 4, "float32", 1),
    ]
    return ks, sample


# ---- time and power ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepTime:
    """One engine step on one GPU, in seconds, by where the time goes (each term summed over its kernels)."""

    compute_s: float  # compute-bound kernels' execution
    memory_s: float  # memory-bound kernels' execution
    gap_s: float  # launch floors, graph gaps, all-reduces and the host's step overhead: the GPU mostly waits
    comm_s: float  # of which all-reduces
    host_s: float  # of which the engine's host overhead
    kernels: int  # kernel launches (one per layer per kernel)
    gemm_flops: float  # FLOPs of the GEMMs (one GPU)
    gemm_bytes: float  # bytes the GEMMs read and write (one GPU)
    bound_s: float = 0.0  # roofline bound of the kernels (efficiency 1, no gaps, no host time)

    @property
    def total_s(self) -> float:
        return self.compute_s + self.memory_s + self.gap_s

    @property
    def total_ms(self) -> float:
        return self.total_s * 1e3

    def shares(self) -> tuple[float, float, float]:
        """(compute, memory, gap) shares of the step's time (`predictor.power.busy_shares`' convention)."""
        tot = self.total_s
        if tot <= 0:
            return 0.0, 0.0, 0.0
        return self.compute_s / tot, self.memory_s / tot, self.gap_s / tot


def cost_kernels(
    kernels: Sequence[EngineKernel],
    device: Device,
    *,
    graph: bool,
    link_bytes_per_s: float | None,
    tp: int,
    tf32_matmul: bool = False,
) -> StepTime:
    """Time of a kernel list on one GPU: each kernel max(compute, memory) at the kernel model's efficiencies, plus
    `GRAPH_GAP_US` (graph) or floored at its launch time (eager); all-reduces on the link (`allreduce_s`).
    `tf32_matmul`: float32 GEMMs on TF32 tensor cores (`kernel_model.kernel_latency_arrays`)."""
    comp = [k for k in kernels if k.kind != "allreduce"]
    comm = [k for k in kernels if k.kind == "allreduce"]
    c_s = m_s = gap = comm_s = bound = 0.0
    if comp:
        # per-launch times: this function multiplies by each kernel's `count` (layers) itself (the streaming term
        # and the graph gap are per launch); `kernel_arrays` reads launch counts only from `Launches` rows
        arrays = kernel_arrays(comp)
        times = kernel_latency_arrays(arrays, device, tf32_matmul=tf32_matmul)
        count = np.array([k.count for k in comp])
        execution = np.maximum(times.compute_s, times.memory_s)
        stream = streaming_gemm_params(device)
        if stream is not None:
            execution = _streamed(comp, arrays, times, execution, device, stream)
        attn = decode_attention_params(device)
        if attn is not None:
            is_dec = np.array([k.name == DECODE_ATTENTION and k.dtype in ("float16", "bfloat16") for k in comp])
            streamed = np.maximum(
                times.compute_s, arrays.nbytes / (device.bandwidth * attn.e_memory) + attn.exec_us * 1e-6
            )
            execution = np.where(is_dec, streamed, execution)
        if graph:
            extra = np.full(len(comp), GRAPH_GAP_US * 1e-6)
        else:
            extra = np.maximum(times.launch_s - execution, 0.0)
        is_c = times.compute_s >= execution  # the compute term sets the time (the memory or streaming term otherwise)
        c_s = float((execution * count)[is_c].sum())
        m_s = float((execution * count)[~is_c].sum())
        gap = float((extra * count).sum())
        bound = float((times.bound_s * count).sum())
    if comm:
        if link_bytes_per_s is None:
            raise EngineConfigError(f"{device.key} has no NVLink bandwidth in the device table (nvlink_gbs)")
        comm_s = sum(allreduce_s(k.comm_bytes, tp, link_bytes_per_s) * k.count for k in comm)
    gemm = [k for k in comp if k.kind == "gemm"]
    return StepTime(
        c_s,
        m_s,
        gap + comm_s,
        comm_s,
        0.0,
        int(round(sum(k.count for k in kernels))),
        sum(k.flops * k.count for k in gemm),
        sum((k.bytes_read + k.bytes_written) * k.count for k in gemm),
        bound,
    )


@dataclass(frozen=True)
class StreamingGemm:
    """Time of a weight-streaming (decode-sized) half-precision GEMM on one kernel family: exec_us + bytes /
    (bandwidth x e_memory); `source` says what it was fitted on."""

    exec_us: float
    e_memory: float
    source: str = ""


_STREAM_OVERRIDE: dict[str, StreamingGemm] | None = None
_ATTN_OVERRIDE: dict[str, StreamingGemm] | None = None
#: The paged decode-attention kernel (`_attention_for`): costed at the family's `decode_attention` fit when it has one.
DECODE_ATTENTION = "paged_attention_decode"


def _family_table(key: str, path: Path | str | None) -> dict[str, StreamingGemm]:
    """Kernel family -> `StreamingGemm` from the serving-parameter file's `key` entry ({} when it has none);
    `ServingParamsError` when malformed."""
    p = Path(path) if path is not None else SERVING_PARAMS_PATH
    load_profiles(p)  # validates the file (schema, profiles) and fills the cache
    doc = _STREAM_CACHE.get((p.resolve(), key))
    if doc is None:
        raw = json.loads(p.read_text()).get(key, {})
        if not isinstance(raw, Mapping) or not isinstance(raw.get("families", {}), Mapping):
            raise ServingParamsError(f"{p}: '{key}' must be an object with 'families'")
        doc = {}
        for fam, e in raw.get("families", {}).items():
            ok = isinstance(e, Mapping) and all(
                isinstance(e.get(k), int | float) and not isinstance(e.get(k), bool) for k in ("exec_us", "e_memory")
            )
            if not ok or not 0 < e["e_memory"] <= 1 or not 0 <= e["exec_us"] <= 1000:
                raise ServingParamsError(f"{p}: {key}.families.{fam} needs exec_us >= 0 and e_memory in (0, 1]")
            doc[fam] = StreamingGemm(float(e["exec_us"]), float(e["e_memory"]), str(e.get("source", "")))
        _STREAM_CACHE[p.resolve(), key] = doc
    return doc


def streaming_gemm_table(path: Path | str | None = None) -> dict[str, StreamingGemm]:
    """Kernel family -> `StreamingGemm` from the serving-parameter file's `weight_streaming_gemm` entry ({} when it
    has none: the kernel model alone); `ServingParamsError` when malformed."""
    if _STREAM_OVERRIDE is not None and path is None:
        return _STREAM_OVERRIDE
    return _family_table("weight_streaming_gemm", path)


def decode_attention_table(path: Path | str | None = None) -> dict[str, StreamingGemm]:
    """Kernel family -> the paged decode-attention kernel's time, exec_us + bytes / (bandwidth x e_memory) (bytes: the
    live sequences' K and V, the queries read and the outputs written), from the serving-parameter file's
    `decode_attention` entry (`serving_fit.fit_decode_attention`: public H100 paged-decode timings, so hopper only);
    {} when it has none: the kernel model's attention entry (docs/llm-serving.md)."""
    if _ATTN_OVERRIDE is not None and path is None:
        return _ATTN_OVERRIDE
    return _family_table("decode_attention", path)


_STREAM_CACHE: dict[tuple[Path, str], dict[str, StreamingGemm]] = {}


def streaming_gemm_params(device: Device) -> StreamingGemm | None:
    """The streaming-GEMM figures of a device's kernel family (None: no fit for it, the kernel model alone)."""
    from .kernel_model import load_params

    fam = load_params().family(device.key)
    return None if fam is None else streaming_gemm_table().get(fam)


def decode_attention_params(device: Device) -> StreamingGemm | None:
    """The decode-attention figures of a device's kernel family (None: no fit for it, the kernel model alone)."""
    from .kernel_model import load_params

    fam = load_params().family(device.key)
    return None if fam is None else decode_attention_table().get(fam)


def _streamed(comp, arrays, times, execution: np.ndarray, device: Device, p: StreamingGemm) -> np.ndarray:
    """`execution` with each half-precision, unbatched GEMM of m <= `STREAM_M_BLEND` tokens taken as
    max(compute, streaming) (`STREAM_M_MAX` and below), blended linearly in m with the kernel model's time above."""
    is_gemm = np.array([k.kind == "gemm" and k.dtype in ("float16", "bfloat16") for k in comp])
    m = arrays.m
    use = is_gemm & (arrays.b <= 1) & (m > 0) & (m < STREAM_M_BLEND)
    if not use.any():
        return execution
    stream = arrays.nbytes / (device.bandwidth * p.e_memory) + p.exec_us * 1e-6
    streamed = np.maximum(times.compute_s, stream)
    w = np.clip((STREAM_M_BLEND - m) / (STREAM_M_BLEND - STREAM_M_MAX), 0.0, 1.0)
    return np.where(use, w * streamed + (1.0 - w) * execution, execution)


def _plus(a: StepTime, b: StepTime, host_s: float = 0.0) -> StepTime:
    return StepTime(
        a.compute_s + b.compute_s,
        a.memory_s + b.memory_s,
        a.gap_s + b.gap_s + host_s,
        a.comm_s + b.comm_s,
        a.host_s + b.host_s + host_s,
        a.kernels + b.kernels,
        a.gemm_flops + b.gemm_flops,
        a.gemm_bytes + b.gemm_bytes,
        a.bound_s + b.bound_s,
    )


def step_energy_j(step: StepTime, power) -> tuple[float, float]:
    """(energy J, average power W) of a step on one GPU: the power model (`predictor.power.PowerParams`) at the
    step's compute / memory busy shares (the gap share, host time included, at idle power) x the step's time."""
    s_c, s_m, _ = step.shares()
    w = power.power_w(s_c, s_m)
    return w * step.total_s, w


def steady_state_energy(steps: Sequence[tuple[StepTime, float]], tokens: float, power) -> tuple[float, float, float]:
    """(energy per output token J, average power W, period s) of one steady-state period of continuous batching on
    one GPU, as a serving benchmark measures it (the energy counter over the period / the tokens it output): `steps`
    are (step, how many of it the period runs), each step at its own power (`step_energy_j`: decode steps at their
    busy shares, prefill or mixed steps at theirs); `tokens` is the output tokens the period yields."""
    period = sum(n * st.total_s for st, n in steps)
    energy = sum(n * step_energy_j(st, power)[0] for st, n in steps)
    return energy / tokens, (energy / period if period > 0 else 0.0), period


def captured_batch(seqs: int) -> int | None:
    """The CUDA-graph batch a decode of `seqs` sequences is padded to; None above the largest (eager)."""
    for b in CAPTURED_BATCHES:
        if b >= seqs:
            return b
    return None


class ServingParamsError(ValueError):
    """The serving-parameter file or an engine-profile file is missing, malformed or has no figures for a device (the
    message says which, in one line)."""


@dataclass(frozen=True)
class HostParams:
    """The engine's host time per step while the GPU idles, milliseconds (one profile's figures for one GPU host).

    A decode step of B sequences of live context L on tensor parallel tp:
    step_ms + per_seq_ms x B + per_block_ms x B x ceil(L / block size) + per_tp_worker_ms x (tp - 1).
    A prefill step of P prompts: per_prompt_ms x P (the host work of admitting a request and giving its first token;
    it pauses the running decodes as the prefill does). Which figures a profile gives is its own: the `vllm-0.5.4`
    profile's (fitted by `predictor.serving_fit`) are step, per sequence, per tensor-parallel worker and per prompt;
    their power places them off the GPU (docs/llm-serving.md), what they are the rows cannot say.
    """

    step_ms: float
    per_block_ms: float
    per_tp_worker_ms: float
    source: str = ""
    context_range: tuple[float, float] | None = None  # mean live contexts of the rows it was fitted on, tokens
    per_seq_ms: float = 0.0
    profile: str = ""  # the engine profile these figures belong to
    per_prompt_ms: float = 0.0  # host time per prompt a prefill step admits

    def extrapolates(self, context: float) -> bool:
        """Whether a mean live context lies outside the contexts the figures were fitted on."""
        lo, hi = self.context_range or (0.0, math.inf)
        return not lo <= context <= hi

    def decode_s(self, seqs: int, context: float, tp: int = 1, block_size: int = BLOCK_SIZE) -> float:
        """Host time of one decode step, seconds."""
        blocks = seqs * math.ceil(context / block_size)
        ms = self.step_ms + self.per_seq_ms * seqs + self.per_block_ms * blocks + self.per_tp_worker_ms * (tp - 1)
        return ms * 1e-3

    def prefill_s(self, prompts: float) -> float:
        """Host time of one prefill step of `prompts` prompts beyond its kernels, seconds: per_prompt_ms x prompts."""
        return self.per_prompt_ms * prompts * 1e-3

    def to_json(self) -> dict:
        out = {
            "profile": self.profile,
            "step_ms": self.step_ms,
            "per_seq_ms": self.per_seq_ms,
            "per_block_ms": self.per_block_ms,
            "per_tp_worker_ms": self.per_tp_worker_ms,
            "per_prompt_ms": self.per_prompt_ms,
            "source": self.source,
        }
        if self.context_range is not None:
            out["context_range"] = list(self.context_range)
        return out


#: The figures one host entry of a profile may give (milliseconds; context_range: tokens); step_ms is required.
HOST_FIELDS = ("step_ms", "per_seq_ms", "per_block_ms", "per_tp_worker_ms", "per_prompt_ms")
#: Largest figure accepted from a file, milliseconds (a step's host time beyond a second is not an engine).
HOST_MAX_MS = 1000.0


@dataclass(frozen=True)
class EngineProfile:
    """A named set of host-time figures (`HostParams`) of one serving engine: per fitted GPU (`devices`, the other
    GPUs take their generation's) and/or one entry for every GPU (`any_device`: host time that does not depend on
    the server's CPU, as far as its source says). `fitted` says whether the figures were fitted on measurements."""

    name: str
    source: str
    description: str = ""
    fitted: bool = False
    devices: Mapping[str, HostParams] = field(default_factory=dict)
    any_device: HostParams | None = None
    file: str = ""  # the user file it was read from ("" for a built-in profile)
    chunked_prefill: bool = False  # the engine chunks prefills into the decodes' steps (`serve_chunked`) by default

    def host(self, device: Device) -> HostParams:
        """The figures for a device: its own; else (a MIG slice: its GPU's) the fitted GPU the power model's table
        transfers it from (`predictor.power_fit.TRANSFERS`: same chip generation), a user device's kernel family's
        (`HOST_TRANSFERS`), else the H100's; else the profile's `any_device` entry; `source` says which."""
        from .power_fit import TRANSFERS

        key = device.key.split(":")[0]
        if key in self.devices:
            return self.devices[key]
        if key in TRANSFERS:
            ref = TRANSFERS[key][0]
        else:
            ref = HOST_TRANSFERS.get(getattr(device, "kernel_family", None) or "", "h100-80gb")
        if ref in self.devices:
            h = self.devices[ref]
            return replace(h, source=f"transfer: {ref}'s figures (no serving data: {key}); {h.source}")
        if self.any_device is not None:
            return self.any_device
        nor = "" if ref == key else f" (nor {ref!r})"
        raise ServingParamsError(f"engine profile {self.name!r} has no host figures for {device.key!r}{nor}")

    def to_json(self) -> dict:
        out = {"name": self.name, "source": self.source, "fitted": self.fitted, "description": self.description}
        out["chunked_prefill"] = self.chunked_prefill
        if self.file:
            out["file"] = self.file
        return out


def _number(v, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 <= v <= HOST_MAX_MS:
        raise ServingParamsError(f"{where} must be a number of milliseconds in 0 .. {HOST_MAX_MS:g}, not {v!r}")
    return float(v)


def _host_entry(e, where: str, profile: str, source: str) -> HostParams:
    """One host entry of a profile: {"step_ms": X, "per_seq_ms"?, "per_block_ms"?, "per_tp_worker_ms"?,
    "per_prompt_ms"?, "context_range"?: [lo, hi] tokens, "source"?}; unknown keys refused (a misspelt figure must
    not read as 0)."""
    if not isinstance(e, Mapping):
        raise ServingParamsError(f"{where} must be an object")
    known = (*HOST_FIELDS, "context_range", "source")
    extra = [k for k in e if k not in known and k not in ("rows", "models", "evaluation")]
    if extra:
        raise ServingParamsError(f"{where}: unknown key {extra[0]!r} (known: {', '.join(known)})")
    if "step_ms" not in e:
        raise ServingParamsError(f"{where}: missing 'step_ms'")
    vals = {k: _number(e.get(k, 0.0), f"{where}.{k}") for k in HOST_FIELDS}
    rng = e.get("context_range")
    if rng is not None:
        ok = isinstance(rng, list) and len(rng) == 2 and all(isinstance(x, int | float) for x in rng)
        if not ok or isinstance(rng[0], bool) or not 0 <= rng[0] <= rng[1] or not math.isfinite(rng[1]):
            raise ServingParamsError(f"{where}.context_range must be [low, high] tokens, not {rng!r}")
        rng = (float(rng[0]), float(rng[1]))
    src = e.get("source", source)
    if not isinstance(src, str) or not src.strip():
        raise ServingParamsError(f"{where}.source must be a non-empty string")
    return HostParams(
        vals["step_ms"],
        vals["per_block_ms"],
        vals["per_tp_worker_ms"],
        src,
        rng,
        per_seq_ms=vals["per_seq_ms"],
        profile=profile,
        per_prompt_ms=vals["per_prompt_ms"],
    )


def parse_profile(name: str, doc, where: str, file: str = "") -> EngineProfile:
    """An `EngineProfile` from its JSON object (a profile of the serving-parameter file, or a user's profile file):
    {"source": str, "description"?: str, "fitted"?: bool, "devices"?: {gpu key: host entry}, "any_device"?: host
    entry}; at least one entry. Other keys (provenance of a fit) are kept in the file, not read."""
    if not isinstance(doc, Mapping):
        raise ServingParamsError(f"{where} must be an object")
    source = doc.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ServingParamsError(f"{where}: 'source' must say where the figures come from (a non-empty string)")
    desc = doc.get("description", "")
    fitted = doc.get("fitted", False)
    chunked = doc.get("chunked_prefill", False)
    if not isinstance(desc, str) or not isinstance(fitted, bool) or not isinstance(chunked, bool):
        raise ServingParamsError(
            f"{where}: 'description' must be a string, 'fitted' and 'chunked_prefill' true or false"
        )
    devs = doc.get("devices", {})
    if not isinstance(devs, Mapping) or not all(isinstance(k, str) for k in devs):
        raise ServingParamsError(f"{where}.devices must be an object of GPU key -> host figures")
    devices = {k: _host_entry(e, f"{where}.devices.{k}", name, source) for k, e in devs.items()}
    anyd = doc.get("any_device")
    any_device = None if anyd is None else _host_entry(anyd, f"{where}.any_device", name, source)
    if not devices and any_device is None:
        raise ServingParamsError(f"{where}: no host figures (give 'devices' or 'any_device')")
    return EngineProfile(name, source, desc, fitted, devices, any_device, file, chunked)


_PROFILES_CACHE: dict[tuple[Path, float], tuple[dict[str, EngineProfile], str]] = {}


def load_profiles(path: Path | str | None = None) -> tuple[dict[str, EngineProfile], str]:
    """(name -> `EngineProfile`, the default profile's name) from the serving-parameter file (default
    `SERVING_PARAMS_PATH`); `ServingParamsError` when it is missing or malformed (no silent fallback)."""
    p = Path(path) if path is not None else SERVING_PARAMS_PATH
    try:
        key = (p.resolve(), p.stat().st_mtime)
    except OSError as e:
        raise ServingParamsError(f"cannot read serving-parameter file {p}: {e.strerror}") from e
    if key not in _PROFILES_CACHE:
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise ServingParamsError(f"cannot read serving-parameter file {p}: {e}") from e
        if not isinstance(doc, dict) or doc.get("schema") != SERVING_SCHEMA:
            raise ServingParamsError(f"{p} is not a serving-parameter file (expected schema {SERVING_SCHEMA!r})")
        profs = doc.get("profiles")
        if not isinstance(profs, dict) or not profs:
            raise ServingParamsError(f"{p}: 'profiles' must be a non-empty object")
        out = {n: parse_profile(n, d, f"{p.name}: profiles.{n}") for n, d in profs.items()}
        default = doc.get("default_profile")
        if default not in out:
            raise ServingParamsError(f"{p}: default_profile {default!r} is not one of its profiles")
        _PROFILES_CACHE[key] = (out, default)
    return _PROFILES_CACHE[key]


def engine_profile(name_or_file: str | Path | None = None) -> EngineProfile:
    """A built-in profile by name (None: the default one), else a user's profile file (JSON, schema
    `PROFILE_SCHEMA`: {"schema", "name"?, "source", "devices"? / "any_device"?, ...} as `parse_profile` reads);
    `ServingParamsError` with a one-line message otherwise. A file is only parsed as JSON: nothing in it runs."""
    profiles, default = load_profiles()
    if name_or_file is None:
        return profiles[default]
    if isinstance(name_or_file, str) and name_or_file in profiles:
        return profiles[name_or_file]
    p = Path(name_or_file)
    if p.suffix.lower() != ".json" and not p.is_file():
        raise ServingParamsError(
            f"unknown engine profile {str(name_or_file)!r} (built in: {', '.join(profiles)}; or a profile .json file)"
        )
    try:
        if p.stat().st_size > PROFILE_MAX_BYTES:
            raise ServingParamsError(f"engine-profile file {p} is over 1 MiB (a profile is a few hundred bytes)")
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ServingParamsError(f"cannot read engine-profile file {p}: {e.strerror or e}") from e
    except (ValueError, RecursionError) as e:
        raise ServingParamsError(f"engine-profile file {p} is not JSON: {str(e).splitlines()[0][:120]}") from e
    if not isinstance(doc, dict) or doc.get("schema") != PROFILE_SCHEMA:
        raise ServingParamsError(f"{p} is not an engine-profile file (expected schema {PROFILE_SCHEMA!r})")
    name = doc.get("name", p.stem)
    if not isinstance(name, str) or not name.strip():
        raise ServingParamsError(f"{p}: 'name' must be a non-empty string")
    body = {k: v for k, v in doc.items() if k not in ("schema", "name")}
    return parse_profile(name, body, p.name, file=str(p))


def host_params(device: Device, profile: EngineProfile | str | Path | None = None) -> HostParams:
    """The host figures of an engine profile (default: the default profile) for a device (`EngineProfile.host`)."""
    prof = profile if isinstance(profile, EngineProfile) else engine_profile(profile)
    return prof.host(device)


def decode_step(
    a: Arch,
    device: Device,
    seqs: int,
    context: float,
    *,
    tp: int = 1,
    dtype: str = "bfloat16",
    tf32_matmul: bool = False,
    host: HostParams | None = None,
):
    """One decode step of `seqs` running sequences at a mean live context of `context` tokens, on one GPU of `tp`.

    The model runs as the CUDA graph of the padded batch (`captured_batch`; eager beyond it), attention over the
    real sequences; the LM head and sampler run eagerly on the real sequences; plus the host's time (`host`, default
    the device's `host_params`). `tf32_matmul`: float32 GEMMs on TF32 tensor cores (`cost_kernels`).
    """
    host = host or host_params(device)
    padded = captured_batch(seqs)
    graph = padded is not None
    model, _ = step_kernels(a, tp, padded or seqs, context=context, dtype=dtype)
    # attention reads only the live sequences' blocks (padding slots attend over nothing)
    model = [k if k.kind != "attention" else _attention_for(k, seqs, a, tp, context, dtype) for k in model]
    _, sample = step_kernels(a, tp, seqs, context=context, dtype=dtype)
    return _step_time(device, model, sample, graph, tp, tf32_matmul, host.decode_s(seqs, a.attended(context), tp))


def _step_time(
    device: Device,
    model: Sequence[EngineKernel],
    sample: Sequence[EngineKernel],
    graph: bool,
    tp: int,
    tf32_matmul: bool,
    host_s: float,
) -> StepTime:
    """One step on one GPU: the `model` kernels replayed in a CUDA graph (`graph`) or launched eagerly, the LM head
    and sampler (`sample`) always eagerly, plus `host_s` seconds of the engine's host time (what the decode, prefill
    and mixed steps share)."""
    kw = dict(link_bytes_per_s=device_link(device), tp=tp, tf32_matmul=tf32_matmul)
    t = cost_kernels(model, device, graph=graph, **kw)
    return _plus(t, cost_kernels(sample, device, graph=False, **kw), host_s)


def _attention_for(k: EngineKernel, seqs: int, a: Arch, tp: int, context: float, dtype: str) -> EngineKernel:
    s = Split.of(a, tp)
    eb = 4.0 if dtype == "float32" else 2.0
    kvd, qd = s.kv_heads * a.head_dim, s.heads * a.head_dim
    context = a.attended(context)
    return EngineKernel(
        DECODE_ATTENTION,
        "attention",
        4.0 * seqs * s.heads * a.head_dim * context,
        (seqs * context * 2 * kvd + seqs * qd) * eb,
        seqs * qd * eb,
        dtype,
        {},  # paged decode attention splits each sequence's context over thread blocks: no query-row tiles
        k.count,
    )


def prefill_step(
    a: Arch,
    device: Device,
    prompts: int,
    prompt: int,
    *,
    tp: int = 1,
    dtype: str = "bfloat16",
    tf32_matmul: bool = False,
    host: HostParams | None = None,
):
    """The prefill of `prompts` prompts of `prompt` tokens, eager (vLLM runs prefills outside CUDA graphs), plus the
    host's time for them (`HostParams.prefill_s`). `tf32_matmul`: float32 GEMMs on TF32 tensor cores."""
    host = host or host_params(device)
    model, sample = step_kernels(a, tp, prompts, context=prompt, prompt=prompt, dtype=dtype)
    return _step_time(device, model, sample, False, tp, tf32_matmul, host.prefill_s(prompts))


def mixed_step(
    a: Arch,
    device: Device,
    seqs: int,
    context: float,
    chunk: int,
    prior: float = 0.0,
    *,
    prompts: int = 1,
    final: bool = True,
    tp: int = 1,
    dtype: str = "bfloat16",
    tf32_matmul: bool = False,
    host: HostParams | None = None,
) -> StepTime:
    """One step of chunked prefill on one GPU: `seqs` running decodes (one token each over a live context of
    `context` tokens) and `chunk` prompt tokens of `prompts` prompts (chunk / prompts each), each prompt's tokens
    attending to the `prior` tokens its earlier chunks cached and causally among themselves. One flat batch of
    seqs + chunk tokens through every GEMM, norm and elementwise kernel; paged attention for the decodes, a flash
    attention for the chunk. `final`: the chunk ends its prompts (their first token is sampled here). Eager, as the
    prefill step (vLLM V0 runs no CUDA graph for a batch holding a prefill; V1's piecewise graphs would hide part of
    the launch floors: not modelled); plus the decodes' host time (`HostParams.decode_s`; none without decodes) and,
    on the final chunk, the prompts' (`HostParams.prefill_s`)."""
    host = host or host_params(device)
    s = Split.of(a, tp)
    eb = 4.0 if dtype == "float32" else 2.0
    qd, kvd = s.heads * a.head_dim, s.kv_heads * a.head_dim
    q_len = chunk / prompts
    keys = prior + q_len
    model, _ = step_kernels(a, tp, seqs + chunk, context=context, dtype=dtype)
    ks: list[EngineKernel] = []
    for k in model:
        if k.kind != "attention":
            ks.append(k)
            continue
        if seqs:
            ks.append(_attention_for(k, seqs, a, tp, context, dtype))
        ks.append(
            EngineKernel(
                "flash_attention_chunk",
                "attention",
                4.0 * prompts * s.heads * a.head_dim * q_len * (prior + q_len / 2),  # causal within the chunk
                (chunk * qd + prompts * keys * 2 * kvd) * eb,
                chunk * qd * eb,
                dtype,
                {"b": prompts, "h": s.heads, "s": math.ceil(q_len), "t": math.ceil(keys), "d": a.head_dim},
                k.count,
            )
        )
    _, sample = step_kernels(a, tp, max(1, seqs + (prompts if final else 0)), context=context, dtype=dtype)
    h = (host.decode_s(seqs, a.attended(context), tp) if seqs else 0.0) + (host.prefill_s(prompts) if final else 0.0)
    return _step_time(device, ks, sample, False, tp, tf32_matmul, h)


def chunk_sizes(tokens: int, budget: int) -> list[int]:
    """The chunks `tokens` prompt tokens are prefilled in when each step has `budget` tokens left beside the
    decodes: ceil(tokens / budget) chunks, all `budget` but the last (the rest)."""
    if budget <= 0:
        raise EngineConfigError("the token budget per step leaves no room for a prefill beside the running decodes")
    n = max(1, math.ceil(tokens / budget))
    return [budget] * (n - 1) + [tokens - budget * (n - 1)]


def default_batched_tokens(device: Device) -> int:
    """vLLM's default `--max-num-batched-tokens` for its OpenAI server on this GPU (or MIG slice): 8192 on >= 70 GiB
    other than an A100, else 2048 (`BATCHED_TOKENS_LARGE`)."""
    large = device.memory_mib / 1024 >= LARGE_GPU_GIB and not device.key.startswith("a100")
    return BATCHED_TOKENS_LARGE if large else BATCHED_TOKENS_SMALL


def batched_tokens_for(profile: EngineProfile, device: Device, asked: int | None = None) -> int:
    """The chunked-prefill token budget per step on a device: `asked` when given (0: no chunked prefill), else
    vLLM's default (`default_batched_tokens`) when the profile chunks prefills, else 0."""
    if asked is not None:
        return asked
    return default_batched_tokens(device) if profile.chunked_prefill else 0


@dataclass(frozen=True)
class Queue:
    """`requests` sequences asked at once of an engine whose KV pool holds `running` of them (ms): vLLM's scheduler
    admits a sequence only while the pool has its blocks, so `running` run and the rest wait. They are served in
    waves of `running` (the last one the rest), each wave the running sequences' end-to-end time `e2e_ms`: request
    i (0-based) waits floor(i / running) waves before its prefill."""

    requests: int
    running: int
    e2e_ms: float  # one wave: TTFT + (generate - 1) x TPOT of `running` sequences

    @property
    def waves(self) -> int:
        return math.ceil(self.requests / self.running)

    @property
    def all_done_ms(self) -> float:
        """When the last request's last token is out: waves x e2e_ms."""
        return self.waves * self.e2e_ms

    @property
    def mean_wait_ms(self) -> float:
        """Mean over the requests of the time before their prefill starts: e2e_ms x the mean of floor(i / running)."""
        full, last = self.waves - 1, self.requests - (self.waves - 1) * self.running
        waves_waited = self.running * full * (full - 1) / 2 + last * full  # sum over i of floor(i / running)
        return self.e2e_ms * waves_waited / self.requests

    def to_json(self) -> dict:
        return {
            "requests": self.requests,
            "running": self.running,
            "waves": self.waves,
            "wave_ms": self.e2e_ms,
            "all_done_ms": self.all_done_ms,
            "mean_wait_ms": self.mean_wait_ms,
        }


def device_link(device: Device) -> float | None:
    """NVLink bandwidth per direction of one GPU, bytes/s (None when the device table has none)."""
    gbs = getattr(device, "nvlink_gbs", None)
    return None if gbs is None else gbs * 1e9


# ---- memory: the paged KV cache -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineMemory:
    """vLLM's memory plan on one GPU (bytes unless named MiB): the KV pool is what is left of
    `utilization` x memory after weights, the profiling pass's activations and non-torch memory."""

    memory_mib: float
    utilization: float
    weight_bytes: float
    activation_bytes: float
    non_torch_mib: float
    block_size: int
    block_bytes: float  # one block: block_size tokens x 2 x kv_heads/GPU x head_dim x dtype bytes x layers
    window: int | None = None  # the model's sliding window (`Arch.window`): a sequence's blocks stop growing there

    @property
    def kv_pool_bytes(self) -> float:
        budget = self.memory_mib * MIB * self.utilization
        return max(0.0, budget - self.weight_bytes - self.activation_bytes - self.non_torch_mib * MIB)

    @property
    def blocks(self) -> int:
        """KV-cache blocks: floor(pool / block bytes)."""
        return int(self.kv_pool_bytes // self.block_bytes) if self.block_bytes > 0 else 0

    @property
    def fits(self) -> bool:
        """The weights fit with room for at least one block."""
        return self.blocks > 0

    def blocks_per_sequence(self, context: int) -> int:
        """ceil(min(context, window) / block size): vLLM 0.5 reuses a sliding-window sequence's blocks cyclically."""
        return math.ceil((context if self.window is None else min(context, self.window)) / self.block_size)

    def sequences(self, context: int) -> int:
        """Sequences of `context` tokens whose blocks fit the pool: floor(blocks / ceil(context / block size))."""
        return self.blocks // self.blocks_per_sequence(context) if context > 0 else 0

    def to_json(self, context: int) -> dict:
        return {
            "memory_mib": self.memory_mib,
            "gpu_memory_utilization": self.utilization,
            "weights_mib": self.weight_bytes / MIB,
            "activations_mib": self.activation_bytes / MIB,
            "non_torch_mib": self.non_torch_mib,
            "kv_pool_mib": self.kv_pool_bytes / MIB,
            "block_size": self.block_size,
            "block_bytes": int(self.block_bytes),
            "blocks": self.blocks,
            "fits": self.fits,
            "blocks_per_sequence": self.blocks_per_sequence(context),
            "sequences_that_fit": self.sequences(context),
        }


def weight_bytes_per_gpu(a: Arch, tp: int, eb: float) -> float:
    """Weights one GPU holds: every split matrix / tp (heads, intermediate, experts' intermediate, vocabulary;
    KV projections replicated when fewer KV heads than GPUs), norms and routers whole."""
    s = Split.of(a, tp)
    h, hd = a.hidden, a.head_dim
    attn = h * (s.heads * hd + 2 * s.kv_heads * hd) + s.heads * hd * h + 2 * h
    dense = (3 if a.gated else 2) * h * s.intermediate
    moe = 3 * h * s.expert_intermediate * a.experts + 3 * h * s.shared_intermediate + h * a.experts
    emb = s.vocab * h * (1 if a.tied else 2)
    return (a.layers * attn + a.dense_layers * dense + a.moe_layers * moe + emb + h) * eb


def profile_activation_bytes(a: Arch, tp: int, eb: float, tokens: int) -> float:
    """Peak activations of vLLM's profiling forward pass of `tokens` tokens on one GPU (the largest live set of a
    layer: residual, normed input, QKV, attention output, gate/up and its SiLU product; logits of 256 sequences in
    float32). A formula, not a liveness analysis."""
    s = Split.of(a, tp)
    inter = max(s.intermediate if a.dense_layers else 0, s.expert_intermediate * a.top_k + s.shared_intermediate)
    per_token = 3 * a.hidden + (s.heads + 2 * s.kv_heads) * a.head_dim + 3 * inter
    return tokens * per_token * eb + 256 * s.vocab * 4


def engine_memory(
    a: Arch,
    memory_mib: float,
    *,
    tp: int = 1,
    dtype: str = "bfloat16",
    utilization: float = GPU_MEMORY_UTILIZATION,
    block_size: int = BLOCK_SIZE,
    profile_tokens: int = PROFILE_TOKENS,
    non_torch_mib: float | None = None,
) -> EngineMemory:
    """vLLM's memory plan of one GPU (or MIG slice) of `memory_mib` MiB under tensor parallelism `tp`.

    `non_torch_mib`: memory outside the torch allocator per GPU (CUDA context, NCCL, CUDA graphs' pools), MiB;
    default `predictor.memory.context_mib(None, "vllm")`, the one runtime-context source (an assumed figure)."""
    if non_torch_mib is None:
        from .memory import context_mib

        non_torch_mib = context_mib(None, "vllm")
    eb = 4.0 if dtype == "float32" else 2.0
    s = Split.of(a, tp)
    block = block_size * 2 * s.kv_heads * a.head_dim * eb * a.layers
    return EngineMemory(
        memory_mib,
        utilization,
        weight_bytes_per_gpu(a, tp, eb),
        profile_activation_bytes(a, tp, eb, profile_tokens),
        non_torch_mib,
        block_size,
        block,
        a.window,
    )


# ---- a request served: what `preflight llm --runtime vllm` reports per GPU -------------------------------------------


@dataclass(frozen=True)
class Served:
    """`batch` sequences of `prompt` + `generate` tokens served by the engine on one GPU of `tp` (ms, J, W).

    tpot_ms = decode step at the mean live context (prompt + generate / 2) + the prefills of batch / generate new
    prompts per step (steady-state continuous batching without chunked prefill: every finished sequence is replaced
    by a new one whose prefill pauses the decodes; several new prompts are prefilled in one step); ttft_ms = one
    prompt's prefill in its own step (no queueing).
    energy_per_token_j = (decode step energy + the interleaved prefills' energy) / batch, on one GPU: the energy of a
    steady-state period over the tokens it outputs (`steady_state_energy`), each step at its own power; avg_power_w =
    that energy / the period (tpot_ms).
    """

    decode: StepTime
    prefill: StepTime
    prefills_per_step: float
    tpot_ms: float
    ttft_ms: float
    energy_per_token_j: float
    avg_power_w: float
    batched_tokens: int | None = None  # chunked prefill's token budget per step (None: no chunked prefill)
    prefill_chunks: int = 1  # steps one prompt's prefill takes (its chunks), for TTFT
    mixed_steps_per_step: float = 0.0  # chunked prefill: the share of steps that carry prefill chunks
    prefill_bound: bool = False  # chunked: prompts arrive faster than the budget can prefill them


def serve(
    a: Arch,
    device: Device,
    batch: int,
    prompt: int,
    generate: int,
    power,
    *,
    tp: int = 1,
    dtype: str = "bfloat16",
    tf32_matmul: bool = False,
    host: HostParams | None = None,
    batched_tokens: int | None = None,
) -> Served:
    """The vllm runtime's answer for one device (`power`: its `predictor.power.PowerParams`; `host`: default the
    device's `host_params`; `tf32_matmul`: float32 GEMMs on TF32 tensor cores; `batched_tokens`: chunked prefill
    with this token budget per step (`serve_chunked`), None or 0: none)."""
    host = host or host_params(device)
    kw = dict(tp=tp, dtype=dtype, tf32_matmul=tf32_matmul, host=host)
    step = decode_step(a, device, batch, prompt + generate / 2, **kw)
    if batched_tokens:
        return serve_chunked(a, device, batch, prompt, generate, power, step, batched_tokens, **kw)
    pre = prefill_step(a, device, 1, prompt, **kw)
    stalls = batch / generate
    # fewer than one new prompt per step: one prefill every 1 / stalls steps; more: they are prefilled together,
    # round(stalls) prompts in one step, the step's cost spread over stalls / round(stalls) of them
    group = max(1, round(stalls))
    batched = pre if group == 1 else prefill_step(a, device, group, prompt, **kw)
    share = stalls / group
    tpot = step.total_ms + share * batched.total_ms
    # the period of one decode step: the step (batch output tokens) and the share of a prefill step it carries
    e_token, watts, _ = steady_state_energy([(step, 1.0), (batched, share)], batch, power)
    return Served(step, pre, stalls, tpot, pre.total_ms, e_token, watts)


def serve_chunked(
    a: Arch,
    device: Device,
    batch: int,
    prompt: int,
    generate: int,
    power,
    step: StepTime,
    batched_tokens: int,
    **kw,
) -> Served:
    """`serve` with chunked prefill: every step runs the `batch` decodes (`step`, the decode step) and, when prompts
    wait, up to budget = `batched_tokens` - batch of their tokens in the same step (`mixed_step`).

    Steady state: batch / generate new prompts per step (each finished sequence replaced), gathered g =
    max(1, round(batch / generate)) at a time; a group's g x prompt tokens take the chunks `chunk_sizes` gives, each
    one mixed step, the group every g / (batch / generate) steps. TPOT = decode step + (batch / generate) / g x the
    sum over the group's chunks of (mixed step - decode step); energy likewise. `prefill_bound` when the chunks need
    more than every step ((batch / generate) / g x chunks > 1: the budget cannot admit prompts as fast as sequences
    finish, so the running batch would shrink; TPOT is then that of steps all carrying chunks, an underestimate).
    TTFT = one prompt's chunks (`chunk_sizes(prompt, budget)`) as mixed steps beside the running decodes."""
    context = prompt + generate / 2
    budget = batched_tokens - batch
    if budget <= 0:
        raise EngineConfigError(
            f"--max-num-batched-tokens {batched_tokens} leaves no room for a prefill beside {batch} running decodes"
        )
    rate = batch / generate
    group = max(1, round(rate))
    share = rate / group

    def steps(tokens: int, prompts: int) -> list[StepTime]:
        out, done = [], 0
        sizes = chunk_sizes(tokens, budget)
        for i, c in enumerate(sizes):
            final = i == len(sizes) - 1
            out.append(mixed_step(a, device, batch, context, c, done / prompts, prompts=prompts, final=final, **kw))
            done += c
        return out

    mixed = steps(group * prompt, group)
    own = mixed if group == 1 else steps(prompt, 1)
    busy = min(1.0, share * len(mixed))
    scale = busy / (share * len(mixed))  # 1 unless prefill-bound: then every step carries a chunk
    tpot = step.total_ms + share * scale * sum(m.total_ms - step.total_ms for m in mixed)
    # the period of one step: 1 - busy of it a plain decode step, share x scale of each mixed step (batch tokens)
    period = [(step, 1.0 - share * scale * len(mixed)), *((m, share * scale) for m in mixed)]
    e_token, watts, _ = steady_state_energy(period, batch, power)
    ttft = sum(m.total_ms for m in own)
    return Served(
        step,
        _sum_steps(own),
        rate,
        tpot,
        ttft,
        e_token,
        watts,
        batched_tokens,
        len(own),
        busy,
        share * len(mixed) > 1.0,
    )


def _sum_steps(steps: Sequence[StepTime]) -> StepTime:
    out = StepTime(0, 0, 0, 0, 0, 0, 0, 0)
    for st in steps:
        out = _plus(out, st)
    return out


def step_totals(a: Arch, seqs: int, length: int, *, prefill: bool, dtype: str = "bfloat16") -> dict[str, int]:
    """Counts of one step of the whole model (tensor parallel 1): FLOPs, MACs (GEMMs and attention), parameters and
    their bytes, bytes read and written, kernel launches; `seqs` sequences at `length` tokens (prompt or context)."""
    model, sample = step_kernels(a, 1, seqs, context=float(length), prompt=length if prefill else None, dtype=dtype)
    ks = model + sample
    eb = 4 if dtype == "float32" else 2
    flops = sum(k.flops * k.count for k in ks)
    macs = sum(k.flops * k.count / 2 for k in ks if k.kind in ("gemm", "attention"))
    return {
        "flops": int(round(flops)),
        "macs": int(round(macs)),
        "params": a.params(),
        "param_bytes": a.params() * eb,
        "bytes_read": int(round(sum(k.bytes_read * k.count for k in ks))),
        "bytes_written": int(round(sum(k.bytes_written * k.count for k in ks))),
        "op_count": int(round(sum(k.count for k in ks))),
    }
