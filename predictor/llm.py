"""LLM serving arithmetic: KV-cache sizing, memory per (batch, context), capacity search, slice choice.

Pure python (no TVM, no analyzer): the analyzer supplies the graph-derived numbers (weights, activations,
step latencies) and this module does the arithmetic, so every rule here is testable by hand.

Serving model (docs/llm-serving.md): a static batch of `batch` sequences, each with a preallocated static KV
cache of `context` slots (prompt + generated tokens) per layer, `min(context, window)` for a sliding-window
layer. Per token and layer the cache holds one key and one value vector per KV head:

    KV bytes per token = 2 (K and V) x layers x kv_heads x head_dim x dtype bytes
    KV bytes per sequence at context L = sum over layers of 2 x kv_heads x head_dim x dtype bytes x min(L, window)

Device memory to serve `batch` sequences at context L (MiB):

    weights + batch x KV per sequence(L) + activations(batch, L) + CUDA context + workspace

with the CUDA context and library workspace of `predictor.memory` (`context_mib`, `workspace_mib`: the runtime's
context on the device, cuBLAS's workspace; docs/memory.md). A (batch,
context) fits a GPU or MIG profile by `predictor.mig.fits`: the need plus `HEADROOM` within its usable memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .devices import Device, get_device
from .fmt import g3
from .memory import context_mib, workspace_mib
from .mig import HEADROOM, fits, smallest_first

MIB = 2**20
MAX_BATCH = 2**20  # the capacity search stops here (a million concurrent sequences is past any real budget)


class LlmConfigError(ValueError):
    """A config this arithmetic cannot read (missing layer or head counts, an unknown layer type)."""


def _first(config: Mapping, keys: Sequence[str]):
    for k in keys:
        v = config.get(k)
        if v is not None:
            return v
    return None


@dataclass(frozen=True)
class KvCacheSpec:
    """The shape of a decoder's KV cache and the dtype it is stored in.

    Attributes:
        kv_heads: Key/value heads per layer (fewer than the query heads with grouped- or multi-query attention).
        head_dim: Elements per head.
        windows: Per layer, its sliding window in tokens, or None for full attention.
        dtype_bytes: Bytes per element (2 for float16 / bfloat16, 4 for float32).
    """

    kv_heads: int
    head_dim: int
    windows: tuple[int | None, ...]
    dtype_bytes: float

    @property
    def layers(self) -> int:
        return len(self.windows)

    @property
    def bytes_per_token_layer(self) -> int:
        """One token in one layer: 2 (K and V) x kv_heads x head_dim x dtype bytes."""
        return int(2 * self.kv_heads * self.head_dim * self.dtype_bytes)

    @property
    def bytes_per_token(self) -> int:
        """One token in every layer: 2 x layers x kv_heads x head_dim x dtype bytes (before any window caps it)."""
        return self.layers * self.bytes_per_token_layer

    def slots(self, layer: int, context: int) -> int:
        """Cache slots of `layer` for a sequence of `context` tokens: min(context, window)."""
        w = self.windows[layer]
        return context if w is None else min(context, w)

    def bytes_per_sequence(self, context: int) -> int:
        """One sequence of `context` tokens: sum over layers of bytes per token and layer x min(context, window)."""
        return sum(self.slots(i, context) for i in range(self.layers)) * self.bytes_per_token_layer

    def bytes(self, batch: int, context: int) -> int:
        """`batch` sequences of `context` tokens."""
        return batch * self.bytes_per_sequence(context)

    @property
    def uniform(self) -> bool:
        """Every layer has the same window (or none)."""
        return len(set(self.windows)) <= 1

    def to_json(self) -> dict:
        return {
            "layers": self.layers,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "dtype_bytes": self.dtype_bytes,
            "sliding_windows": sorted({w for w in self.windows if w is not None}),
            "sliding_layers": sum(w is not None for w in self.windows),
            "bytes_per_token": self.bytes_per_token,
        }

    @classmethod
    def from_config(cls, config: Mapping, dtype_bytes: float) -> KvCacheSpec:
        """The cache of a transformers decoder config (its `config.json` as a dict), without building the model.

        Field conventions (transformers'): layers = `num_hidden_layers` (GPT-2: `n_layer`); query heads =
        `num_attention_heads` (`n_head`); `num_key_value_heads` when set (grouped-query attention), else 1 with
        `multi_query`, else the query heads; head_dim = `head_dim` when set, else hidden size / query heads.
        Windows: `layer_types` when given ("full_attention" or "sliding_attention" with `sliding_window`), else
        `sliding_window` on every layer when set (and `use_sliding_window` is not false), else none.

        Raises:
            LlmConfigError: a count is missing, or a layer type other than full or sliding-window attention.
        """
        text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
        layers = _first(text, ("num_hidden_layers", "n_layer", "num_layers", "n_layers"))
        heads = _first(text, ("num_attention_heads", "n_head", "num_heads", "n_heads"))
        hidden = _first(text, ("hidden_size", "n_embd", "d_model", "dim"))
        if not isinstance(layers, int) or not isinstance(heads, int) or layers < 1 or heads < 1:
            raise LlmConfigError("the config names no layer count or attention-head count")
        kv = text.get("num_key_value_heads")
        if kv is None:
            kv = 1 if text.get("multi_query") else heads
        head_dim = text.get("head_dim")
        if head_dim is None:
            if not isinstance(hidden, int):
                raise LlmConfigError("the config names neither head_dim nor a hidden size")
            head_dim = hidden // heads
        window = text.get("sliding_window")
        if text.get("use_sliding_window") is False:
            window = None
        types = text.get("layer_types")
        if types is not None:
            if len(types) != layers:
                raise LlmConfigError(f"layer_types lists {len(types)} layers, the config has {layers}")
            windows = []
            for t in types:
                if t == "full_attention":
                    windows.append(None)
                elif t == "sliding_attention" and window:
                    windows.append(int(window))
                else:
                    raise LlmConfigError(f"layer type {t!r} is not full or sliding-window attention")
        else:
            windows = [int(window) if window else None] * layers
        return cls(int(kv), int(head_dim), tuple(windows), dtype_bytes)


# ---- memory --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServingMemory:
    """Device memory to serve `batch` sequences at `context` tokens, term by term, in bytes (MiB for the constants)."""

    batch: int
    context: int
    weight_bytes: int
    kv_bytes: int
    activation_bytes: int
    #: CUDA context and library workspace, MiB; default: eager PyTorch's measured context and Hopper's cuBLAS
    #: workspace (the larger); `preflight llm` passes each device's (`predictor.memory.context_mib`, `workspace_mib`)
    context_mib: float = field(default_factory=context_mib)
    workspace_mib: float = field(default_factory=workspace_mib)

    @property
    def total_mib(self) -> float:
        """weights + KV cache + activations + CUDA context + workspace."""
        return (self.weight_bytes + self.kv_bytes + self.activation_bytes) / MIB + self.context_mib + self.workspace_mib

    def to_json(self) -> dict:
        return {
            "batch": self.batch,
            "context": self.context,
            "weights_mib": self.weight_bytes / MIB,
            "kv_cache_mib": self.kv_bytes / MIB,
            "activations_mib": self.activation_bytes / MIB,
            "cuda_context_mib": self.context_mib,
            "workspace_mib": self.workspace_mib,
            "total_mib": self.total_mib,
        }


def largest_fitting(need_mib: Callable[[int], float], usable_mib: float, headroom: float = HEADROOM) -> int:
    """The largest batch b in [0, MAX_BATCH] whose `need_mib(b)` fits `usable_mib` by the MIG rule (`mig.fits`).

    `need_mib` must not decrease with the batch (more sequences never need less memory). 0 when not even one fits.
    Galloping then bisection: O(log b) calls.
    """

    def ok(b: int) -> bool:
        return fits(usable_mib, need_mib(b), headroom=headroom)

    if not ok(1):
        return 0
    lo, hi = 1, 2
    while hi <= MAX_BATCH and ok(hi):
        lo, hi = hi, hi * 2
    if hi > MAX_BATCH:
        if ok(MAX_BATCH):
            return MAX_BATCH
        hi = MAX_BATCH
    while hi - lo > 1:  # lo fits, hi does not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


@dataclass(frozen=True)
class Capacity:
    """The largest batch that fits each target at each context.

    `largest_batch[target][i]` is the largest number of concurrent sequences of `contexts[i]` tokens that fit
    `target` ("full GPU" or a MIG profile name); 0 when not even one fits.
    """

    device: str
    contexts: tuple[int, ...]
    usable_mib: dict[str, float]  # target -> usable MiB
    largest_batch: dict[str, tuple[int, ...]]
    derived: tuple[str, ...] = ()  # MIG profiles whose usable memory is a derived lower bound
    headroom: float = HEADROOM

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "contexts": list(self.contexts),
            "headroom": self.headroom,
            "targets": [
                {
                    "target": t,
                    "usable_mib": self.usable_mib[t],
                    "derived": t in self.derived,
                    "largest_batch": list(self.largest_batch[t]),
                }
                for t in self.largest_batch
            ],
        }


FULL_GPU = "full GPU"


def targets(device: Device) -> list[tuple[str, float, bool]]:
    """(name, usable MiB, measured) of the whole GPU and each MIG profile, smallest profile first."""
    out = [(p.name, p.memory_mib, p.measured) for p in smallest_first(device.mig)]
    return out + [(FULL_GPU, float(device.memory_mib), True)]


def capacity(
    device: Device,
    contexts: Sequence[int],
    need_mib: Callable[[int, int], float],
    headroom: float = HEADROOM,
) -> Capacity:
    """The largest batch per target and context (`need_mib(batch, context)`, non-decreasing in the batch)."""
    largest: dict[str, tuple[int, ...]] = {}
    usable: dict[str, float] = {}
    derived = []
    for name, mib, measured in targets(device):
        usable[name] = mib
        if not measured:
            derived.append(name)
        largest[name] = tuple(largest_fitting(lambda b, c=c: need_mib(b, c), mib, headroom) for c in contexts)
    return Capacity(device.key, tuple(contexts), usable, largest, tuple(derived), headroom)


@dataclass(frozen=True)
class BilinearTimeline:
    """Live bytes at each operator of one decode-step graph as a function of (batch, slots).

    Every tensor of a decode step holds the batch dimension at most once and the cache-slots dimension at most
    once, so its size is c, c x batch, c x slots or c x batch x slots, and the live bytes at each operator (a sum
    of such sizes) are bilinear: four evaluations, at batch 1 and 2 and slots s and s + 1, give them exactly at
    every (batch, slots). `slots(context)` maps a context to the cache's slots (min(context, window)).
    """

    base: np.ndarray  # live bytes per operator at (1, s)
    d_batch: np.ndarray  # at (2, s) minus at (1, s)
    d_slots: np.ndarray  # at (1, s + 1) minus at (1, s)
    d_both: np.ndarray  # the change of d_batch per slot
    s: int
    slots: Callable[[int], int]

    @classmethod
    def fit(cls, samples: Mapping[tuple[int, int], Sequence[int]], slots: Callable[[int], int]) -> BilinearTimeline:
        """From timelines at (batch, slots) = (1, s), (2, s), (1, s + 1), (2, s + 1)."""
        s = min(k[1] for k in samples)
        f = {k: np.asarray(v, dtype=np.int64) for k, v in samples.items()}
        if set(f) != {(1, s), (2, s), (1, s + 1), (2, s + 1)} or len({len(v) for v in f.values()}) != 1:
            raise ValueError("need timelines of one graph at batch 1 and 2, slots s and s + 1")
        d_batch = f[2, s] - f[1, s]
        d_slots = f[1, s + 1] - f[1, s]
        d_both = (f[2, s + 1] - f[2, s]) - d_slots
        return cls(f[1, s], d_batch, d_slots, d_both, s, slots)

    @classmethod
    def in_batch(cls, one: Sequence[int], two: Sequence[int]) -> BilinearTimeline:
        """A graph without cache slots (a prefill at one prompt length): live bytes per operator affine in the batch,
        from its timelines at batch 1 and 2; `peak(batch, 0)` evaluates it."""
        base = np.asarray(one, dtype=np.int64)
        d_batch = np.asarray(two, dtype=np.int64) - base
        zero = np.zeros_like(base)
        return cls(base, d_batch, zero, zero, 0, lambda _: 0)

    def at(self, batch: int, slots: int) -> np.ndarray:
        """Live bytes per operator at `batch` sequences and `slots` cache slots."""
        return self.base + (batch - 1) * self.d_batch + (slots - self.s) * (self.d_slots + (batch - 1) * self.d_both)

    def peak(self, batch: int, context: int) -> int:
        """The peak live bytes at `batch` sequences of `context` tokens."""
        return int(self.at(batch, self.slots(context)).max()) if len(self.base) else 0


# ---- the slice for a stated concurrency and context ----------------------------------------------------


@dataclass(frozen=True)
class SliceLatency:
    """Predicted step latencies on one target."""

    ttft_ms: float  # prefill of the batch's prompts
    tpot_ms: float  # one decode step of the batch

    def to_json(self) -> dict:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms}


@dataclass(frozen=True)
class LlmRecommendation:
    """The smallest MIG profile that serves `concurrency` sequences of `context` tokens (None: none does), and why.

    A profile qualifies when `memory_mib` (the need at that concurrency and context) plus headroom fits its usable
    memory (`predictor.mig.fits`) and, when targets are given, its predicted TTFT and TPOT meet them.
    """

    device: str
    concurrency: int
    context: int
    memory_mib: float
    profile: str | None
    reason: str
    fits: dict[str, bool]
    latency: dict[str, SliceLatency] = field(default_factory=dict)  # per profile and FULL_GPU
    ttft_target_ms: float | None = None
    tpot_target_ms: float | None = None
    full_gpu_fits: bool = False
    #: memory alone, whatever the targets: `fits` and `full_gpu_fits` are "holds it and meets the targets"
    memory_fits: dict[str, bool] = field(default_factory=dict)
    full_gpu_memory_fits: bool = False

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "concurrency": self.concurrency,
            "context": self.context,
            "memory_mib": self.memory_mib,
            "profile": self.profile,
            "reason": self.reason,
            "fits": dict(self.fits),
            "full_gpu_fits": self.full_gpu_fits,
            "memory_fits": dict(self.memory_fits),
            "full_gpu_memory_fits": self.full_gpu_memory_fits,
            "latency": {k: v.to_json() for k, v in self.latency.items()},
            "ttft_target_ms": self.ttft_target_ms,
            "tpot_target_ms": self.tpot_target_ms,
        }


def recommend(
    device: Device,
    concurrency: int,
    context: int,
    memory_mib: float,
    latency: Mapping[str, SliceLatency],
    *,
    ttft_target_ms: float | None = None,
    tpot_target_ms: float | None = None,
    headroom: float = HEADROOM,
    no_slices: str | None = None,
    need_how: str | None = None,
) -> LlmRecommendation:
    """The smallest profile of `device` that holds `memory_mib` (+ headroom) and meets the latency targets.

    `latency` maps each profile (and FULL_GPU) to its predicted TTFT and TPOT; it is needed for the profiles only
    when a target is given. `no_slices`: why no MIG profile is considered although the GPU has them (tensor
    parallelism: a slice has no NVLink); the whole GPU is then the only target. `need_how`: how `memory_mib` was
    reached, for the reason (default: "M MiB + H headroom = N MiB"). A MIG slice as `device` (`h100-80gb:3g.40gb`)
    is the one target: its profile when the request fits it, else None.
    """

    def meets(name: str) -> bool:
        lat = latency.get(name)
        if ttft_target_ms is not None and (lat is None or lat.ttft_ms > ttft_target_ms):
            return False
        return tpot_target_ms is None or (lat is not None and lat.tpot_ms <= tpot_target_ms)

    need = memory_mib * (1 + headroom)
    targets_text = " and ".join(
        t
        for t in (
            f"TTFT <= {ttft_target_ms:g} ms" if ttft_target_ms is not None else "",
            f"TPOT <= {tpot_target_ms:g} ms" if tpot_target_ms is not None else "",
        )
        if t
    )
    full_memory = fits(device.memory_mib, memory_mib, headroom=headroom)
    full = full_memory and meets(FULL_GPU)
    per: dict[str, bool] = {}
    per_memory: dict[str, bool] = {}
    chosen = None
    for p in () if no_slices else smallest_first(device.mig):
        per_memory[p.name] = fits(p.memory_mib, memory_mib, headroom=headroom)
        ok = per_memory[p.name] and meets(p.name)
        per[p.name] = ok
        if ok and chosen is None:
            chosen = p
    what = f"{concurrency} sequence{'s' if concurrency != 1 else ''} of {context:,} tokens"
    how = need_how or f"{memory_mib:,.0f} MiB + {headroom:.0%} headroom = {need:,.0f} MiB"
    args = dict(
        device=device.key,
        concurrency=concurrency,
        context=context,
        memory_mib=memory_mib,
        fits=per,
        latency=dict(latency),
        ttft_target_ms=ttft_target_ms,
        tpot_target_ms=tpot_target_ms,
        full_gpu_fits=full,
        memory_fits=per_memory,
        full_gpu_memory_fits=full_memory,
    )
    if device.parent is not None and not no_slices:  # a MIG slice as the target: that slice alone
        name = device.slice_profile
        ok = full_memory and meets(FULL_GPU)
        args |= {"fits": {name: ok}, "full_gpu_fits": False}
        args |= {"memory_fits": {name: full_memory}, "full_gpu_memory_fits": False}
        room = f"its usable {device.memory_mib:,.0f} MiB"
        held = f"{what} ({how})"
        if ok:
            reason = f"{device.key} is a MIG slice: {room} holds {held}" + (
                f" and it meets {targets_text}" if targets_text else ""
            )
        elif need > device.memory_mib:
            whole = get_device(device.parent)
            larger = [p for p in smallest_first(whole.mig) if p.memory_mib >= need]
            reason = f"{device.key} is a MIG slice: {room} does not hold {held}: " + (
                f"{larger[0].name} is the smallest profile of {whole.key} that would hold it"
                if larger
                else f"no profile of {whole.key} would hold it"
                + ("" if need > whole.memory_mib else f" (the whole {whole.key} would)")
            )
        else:
            reason = f"{device.key} is a MIG slice: it holds {held} but misses {targets_text}"
        return LlmRecommendation(profile=name if ok else None, reason=reason, **args)
    if no_slices or not device.mig:
        return LlmRecommendation(profile=None, reason=no_slices or f"{device.key} does not support MIG", **args)
    if chosen is not None:
        lat = latency.get(chosen.name)
        reason = (
            f"{chosen.name} is the smallest profile whose usable {chosen.memory_mib:,.0f} MiB holds {what} "
            f"({how})" + ("" if chosen.measured else " (its usable memory is a derived lower bound)")
        )
        if targets_text:
            reason += f" and meets {targets_text}"
        if lat is not None:
            reason += f"; predicted TTFT {g3(lat.ttft_ms)} ms, TPOT {g3(lat.tpot_ms)} ms on it"
        return LlmRecommendation(profile=chosen.name, reason=reason, **args)
    largest = smallest_first(device.mig)[-1]
    if largest.memory_mib < need:
        reason = (
            f"no profile holds {what}: the largest, {largest.name}, has {largest.memory_mib:,.0f} MiB usable and "
            f"they need {need:,.0f} MiB ({how})"
        )
    else:
        reason = f"no profile with enough memory for {what} meets {targets_text}"
    return LlmRecommendation(profile=None, reason=reason, **args)
