"""Prefill and decode-step modules of a ``transformers`` causal LM served with a static KV cache.

Pure torch + transformers (no TVM): the analyzer exports these modules to graphs, and the GPU harness
(``predictor.measure``) times the very same modules on a GPU.

- :class:`PrefillStep`: ``batch x prompt`` tokens; returns the last position's logits and, per layer, the keys
  and values to store in the cache (``(batch, kv_heads, min(prompt, window), head_dim)``). The cache is empty
  before a prefill, so attention runs over the prompt only (causal).
- :class:`DecodeStep`: ``batch x 1`` new token at position ``context - 1`` attending to a static cache of
  ``context`` slots per layer (``min(context, window)`` for a sliding-window layer); the cache tensors are
  inputs, ``(batch, kv_heads, slots, head_dim)`` each, keys then values, layer by layer.

Why not ``transformers.StaticCache`` itself: its layers own their tensors (allocated lazily inside the
forward, so an exported graph would hold them as constants, not inputs) and write them with ``index_copy_``,
which under ``torch.export`` becomes a functional ``index_put`` that TVM's importer rejects (its index tensors
carry ``None`` slices) and that would copy the whole cache in the graph. The cache here is transformers' own
``Cache`` (:func:`serving_cache`) over :class:`ServingLayer` objects (its layer protocol), whose tensors are the
step's inputs:

- ``in_place=False`` (the analysed graph): the new token's keys and values are *returned* (what an engine writes
  into its preallocated cache) and attention reads the cache input, slot ``context - 1`` standing for the new
  token. The graph has the shapes and FLOPs of one eager decode step with an in-place static cache and, for the
  write, the layout copy of the new entries (``batch x kv_heads x head_dim`` per layer and tensor, what
  ``index_copy_`` moves), without a functional copy of the whole cache that eager PyTorch never makes.
- ``in_place=True`` (the GPU harness): the new entries are written into the cache tensors with ``index_copy_``
  at their slot (sliding-window layers as a ring buffer) and attention reads the updated cache: a real step.

Attention is transformers' ``sdpa`` as it runs *eagerly*: for one query token with grouped KV heads eager
transformers folds the query heads onto the KV heads (``pack_gqa``), while under ``torch.export`` it would take
its compile branch and repeat K and V for every query head (a copy eager decoding does not make);
:func:`eager_attention` keeps the eager branch while tracing.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn
from transformers.cache_utils import Cache, CacheLayerMixin

__all__ = [
    "CacheLayout",
    "DecodeStep",
    "PrefillStep",
    "serving_cache",
    "ServingLayer",
    "StepError",
    "cache_layout",
    "decode_inputs",
    "eager_attention",
    "prefill_inputs",
]


class StepError(ValueError):
    """The model cannot be served as prefill + decode steps (not a causal LM, an unsupported cache layout)."""


@dataclass(frozen=True)
class CacheLayout:
    """Per-layer shape of a decoder's KV cache.

    Attributes:
        kv_heads: Key/value heads per layer (``num_key_value_heads``; equal to the query heads without GQA).
        head_dim: Width of one head.
        windows: Per layer, the sliding window in tokens, or None for full attention.
        vocab: Vocabulary size (the logits' last dimension).
    """

    kv_heads: int
    head_dim: int
    windows: tuple[int | None, ...]
    vocab: int

    @property
    def layers(self) -> int:
        return len(self.windows)

    def slots(self, layer: int, context: int) -> int:
        """Cache slots of ``layer`` at ``context`` tokens: ``min(context, window)``."""
        w = self.windows[layer]
        return context if w is None else min(context, w)


_FULL = ("full_attention",)
_SLIDING = ("sliding_attention",)


def cache_layout(config) -> CacheLayout:
    """The KV-cache layout a ``transformers`` decoder config implies (the layer types transformers' own cache uses).

    Raises:
        StepError: a layer type other than full or sliding-window attention (chunked, linear, shared KV, ...).
    """
    from transformers.cache_utils import get_layer_types_and_kwargs

    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    try:
        types, kwargs = get_layer_types_and_kwargs(text)
    except Exception as exc:  # a config transformers' cache cannot describe
        raise StepError(f"cannot tell the KV-cache layout of this config: {exc}") from exc
    windows: list[int | None] = []
    for t, kw in zip(types, kwargs, strict=True):
        if t in _FULL:
            windows.append(None)
        elif t in _SLIDING:
            windows.append(int(kw["sliding_window"]))
        else:
            raise StepError(
                f"layer type {t!r} is not supported: preflight serves decoders whose layers are full or "
                f"sliding-window attention"
            )
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = getattr(text, "head_dim", None) or int(text.hidden_size) // heads
    return CacheLayout(kv_heads=kv_heads, head_dim=int(head_dim), windows=tuple(windows), vocab=int(text.vocab_size))


# --------------------------------------------------------------------------------------------- the cache


class ServingLayer(CacheLayerMixin):
    """One layer of a static KV cache whose tensors are a step's inputs (module docstring).

    Args:
        keys: ``(batch, kv_heads, slots, head_dim)``, or None for a prefill (the cache is empty before it).
        values: Same shape as ``keys``.
        past: Tokens before this step (the new tokens take positions ``past, past + 1, ...``).
        window: The layer's sliding window, or None for full attention.
        in_place: Write the new entries into ``keys``/``values`` (module docstring).
    """

    is_compileable = True  # a static cache: transformers builds the explicit decode mask, as for its StaticCache
    is_croppable = False

    def __init__(
        self, keys: torch.Tensor | None, values: torch.Tensor | None, *, past: int, window: int | None, in_place: bool
    ):
        super().__init__()
        self.keys, self.values = keys, values
        self.is_initialized = keys is not None
        self.past, self.window, self.in_place = past, window, in_place
        self.is_sliding = window is not None
        self.new: tuple[torch.Tensor, torch.Tensor] | None = None  # what this step adds (returned by the step)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        return None  # the tensors are given, never allocated here

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        q = key_states.shape[-2]
        if self.keys is None:  # prefill: attention over the prompt itself; the cache keeps the last `window`
            keys, values = key_states, value_states
            if self.window is not None and q > self.window:  # a static slice from the end: no symbolic start
                keys, values = keys[:, :, -self.window :], values[:, :, -self.window :]
            self.new = (keys.contiguous(), values.contiguous())
            return key_states, value_states
        slots = self.keys.shape[-2]
        first = self.past if self.window is None else self.past % slots  # a sliding window is a ring buffer
        if self.in_place:
            index = torch.arange(first, first + q, device=self.keys.device)
            self.keys.index_copy_(2, index, key_states)
            self.values.index_copy_(2, index, value_states)
        else:  # the entries an engine writes into its cache (their layout copy stands for the in-place write)
            self.new = (key_states.contiguous(), value_states.contiguous())
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        if self.keys is None:
            return query_length, 0
        slots = self.keys.shape[-2]
        return slots, self.past + query_length - slots  # the slots hold the last `slots` positions

    def get_seq_length(self) -> int:
        return self.past

    def get_max_length(self) -> int:
        return -1 if self.keys is None else self.keys.shape[-2]


def serving_cache(layers: list[ServingLayer]) -> Cache:
    """transformers' ``Cache`` over :class:`ServingLayer` objects."""
    return Cache(layers=layers)


# --------------------------------------------------------------------------------------------- attention


@contextlib.contextmanager
def eager_attention() -> Iterator[None]:
    """Trace transformers' sdpa attention down its eager branch (``pack_gqa`` for one query token with grouped KV
    heads) rather than the compile branch it takes under ``torch.export`` (``repeat_kv``: a copy of K and V per
    query head that eager decoding does not make). No-op when the transformers release has no such switch."""
    try:
        sdpa = importlib.import_module("transformers.integrations.sdpa_attention")
    except ImportError:
        yield
        return
    original = getattr(sdpa, "is_torchdynamo_compiling", None)
    if original is None:
        yield
        return
    sdpa.is_torchdynamo_compiling = lambda: False
    try:
        yield
    finally:
        sdpa.is_torchdynamo_compiling = original


# --------------------------------------------------------------------------------------------- the steps


def _causal_lm(model: nn.Module) -> nn.Module:
    """The transformers causal LM inside ``model`` (the zoo wraps it in an ``HFWrapper``)."""
    inner = getattr(model, "model", None)
    if getattr(model, "config", None) is None and inner is not None and getattr(inner, "config", None) is not None:
        model = inner
    if getattr(model, "config", None) is None:
        raise StepError(f"{type(model).__name__} is not a transformers model (it has no .config)")
    return model


def _outputs(logits: torch.Tensor, cache) -> tuple[torch.Tensor, ...]:
    out = [logits]
    for layer in cache.layers:
        out += list(layer.new)
    return tuple(out)


class PrefillStep(nn.Module):
    """``batch x prompt`` tokens -> (logits of the last position, then per layer the keys and values to cache).

    Args:
        model: A transformers causal LM (or the zoo's wrapper of one).
        layout: Its cache layout (:func:`cache_layout`); default: from ``model.config``.
    """

    def __init__(self, model: nn.Module, layout: CacheLayout | None = None):
        super().__init__()
        self.lm = _causal_lm(model)
        self.layout = layout or cache_layout(self.lm.config)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cache = serving_cache([ServingLayer(None, None, past=0, window=w, in_place=False) for w in self.layout.windows])
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        with eager_attention():
            out = self.lm(
                input_ids=input_ids,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
                return_dict=False,
            )
        return _outputs(out[0], cache)


class DecodeStep(nn.Module):
    """One new token per sequence at position ``context - 1``, attending to a static cache of ``context`` slots.

    ``forward(input_ids, k_0, v_0, k_1, v_1, ...)``: ``input_ids`` is ``(batch, 1)`` int64; each cache tensor is
    ``(batch, kv_heads, layout.slots(layer, context), head_dim)``. Returns the logits ``(batch, 1, vocab)`` then,
    per layer, the new token's keys and values ``(batch, kv_heads, 1, head_dim)``.

    Args:
        model: A transformers causal LM (or the zoo's wrapper of one).
        context: Tokens in the cache once the new one is written (the prompt so far plus this token); None: as
            many as the cache tensors have slots (a full-attention layer's), so that it follows a symbolic length.
        in_place: Write the new entries into the cache tensors (a real step, for the GPU harness) rather than
            only returning them (the analysed graph; module docstring).
        layout: Its cache layout; default: from ``model.config``.
    """

    def __init__(
        self, model: nn.Module, context: int | None = None, *, in_place: bool = False, layout: CacheLayout | None = None
    ):
        super().__init__()
        if context is not None and context < 1:
            raise StepError(f"the decode context must be at least 1 token (got {context})")
        self.lm = _causal_lm(model)
        self.layout = layout or cache_layout(self.lm.config)
        self.context = context
        self.in_place = in_place

    def forward(self, input_ids: torch.Tensor, *kv: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = self.layout.layers
        if len(kv) != 2 * n:
            raise StepError(f"a decode step takes {2 * n} cache tensors (keys and values of {n} layers), got {len(kv)}")
        q = input_ids.shape[1]
        if self.context is not None:
            past = self.context - q
        else:  # the cache is full: the new tokens take its last slots (a symbolic length exports as such)
            full = [i for i, w in enumerate(self.layout.windows) if w is None]
            past = kv[2 * (full[0] if full else 0)].shape[2] - q
        cache = serving_cache(
            [
                ServingLayer(kv[2 * i], kv[2 * i + 1], past=past, window=w, in_place=self.in_place)
                for i, w in enumerate(self.layout.windows)
            ]
        )
        positions = torch.arange(past, past + q, device=input_ids.device).unsqueeze(0)
        with eager_attention():
            out = self.lm(
                input_ids=input_ids,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
                return_dict=False,
            )
        return out[0] if self.in_place else _outputs(out[0], cache)


def prefill_inputs(batch: int, prompt: int, *, vocab: int, device: str | torch.device = "cpu") -> tuple[torch.Tensor]:
    """Example inputs of :class:`PrefillStep`: random token ids ``(batch, prompt)``."""
    return (torch.randint(0, vocab, (batch, prompt), dtype=torch.int64, device=device),)


def decode_inputs(
    layout: CacheLayout,
    batch: int,
    context: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, ...]:
    """Example inputs of :class:`DecodeStep`: token ids ``(batch, 1)`` and the cache tensors (zeros), layer by layer."""
    ids = torch.randint(0, layout.vocab, (batch, 1), dtype=torch.int64, device=device)
    kv = []
    for i in range(layout.layers):
        shape = (batch, layout.kv_heads, layout.slots(i, context), layout.head_dim)
        kv += [torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)]
    return (ids, *kv)
