"""Seeded, enumerable sampler of measurement configurations over the model zoo.

A configuration is (zoo family, variant, resolution or sequence length, batch size, dtype). The space per
family is the product of

- the family's named variants (deduplicated by their resolved parameters), plus a few extra axes for
  families whose parameters are the interesting part (``randwire``: graph seed);
- a size axis: ``resolution`` for image models, ``seq_len`` for language and sequence models, from
  :data:`RESOLUTIONS` / :data:`SEQ_LENS` / :data:`RNN_SEQ_LENS` (values a builder rejects, e.g. a
  resolution that is not a multiple of the patch size, are dropped);
- batch sizes :data:`BATCHES` (powers of two, 1 to 256) and dtypes :data:`DTYPES`.

:func:`enumerate_space` lists a family's whole space; :func:`sample_configs` draws from it
deterministically: per family it picks ``ceil(per_family / 4)`` (variant, size) "specs", round-robin over
variants so each appears, then deals out (batch, dtype) pairs round-robin over the specs, so every spec is
measured at several batch sizes (the predictor must learn batch scaling) and big specs simply contribute
their small batches.

**Memory estimate** (used to skip configs that cannot fit the target device): ``weights`` is the exact
byte size of the meta-built module's parameters and buffers at the config's dtype; ``activations`` is the
peak of **live** tensor bytes during one meta-device forward pass at batch 1 under
``torch.inference_mode()``, found by a ``TorchDispatchMode`` that adds each freshly allocated op output
(outputs that alias an input, i.e. views and in-place ops, are not new memory) and subtracts it when its
storage is freed (``weakref.finalize`` on the storage). That models what eager inference keeps alive,
including residual branches and fused attention (SDPA is one op; no score matrix), without allocating
anything. The estimate is ``context + weights + batch x activations x 1.3 + workspace`` with
``context`` = :data:`SKIP_CONTEXT_MIB` (600 MiB) and ``workspace`` = :data:`SKIP_WORKSPACE_MIB` (256 MiB): the
predictor's figures when the lists were sampled (context 500, workspace 64 MiB) plus margins, because this
estimate decides what to skip, not what to predict (see the constants); data-dependent host reads
(``.item()`` in Hugging Face mask code) are answered with 1 so that decoders trace on meta. Where the
meta forward fails anyway the activations fall back to ``8 x`` the largest module output seen so far or
``4 x`` the input bytes (``mem_method`` says which).

The live-bytes peak of a spec can differ by a few MiB between the first and later builds of the same
architecture in one process (Hugging Face ``lru_cache``-d helpers allocate once), so estimates, and in rare
borderline cases a fit decision, may depend on sampling history. Config ids and shard assignment never
do; generate the list once (``python -m predictor.measure.configs``) and give every shard that file.

**Time estimate**: the same meta forward runs under ``FlopCounterMode``; configs whose estimated run
time (:func:`estimate_run_ms`) exceeds ``max_run_ms`` (500 ms) are skipped, so a config's >= 35 runs take
well under a minute and a 10-minute shard stays near 30 configs per minute.

Configs whose estimate exceeds 97% of the target's memory are skipped, except a handful (at most two per
family, ``max_expected_oom`` overall) kept and flagged ``expected_oom`` so the OOM label path is exercised
on the real GPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from itertools import product
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import zoo
from predictor.measure.mig_profiles import DEVICE_MEMORY_MIB

__all__ = [
    "BATCHES",
    "DTYPES",
    "RESOLUTIONS",
    "SEQ_LENS",
    "MeasureConfig",
    "MetaDispatch",
    "SpecInfo",
    "config_id",
    "enumerate_space",
    "load_configs",
    "public_configs",
    "sample_configs",
    "save_configs",
    "shard_of",
    "spec_info",
    "stratified_order",
    "target_memory_mib",
]

CONFIG_SCHEMA = "preflight.measure-config/1"
BATCHES: tuple[int, ...] = tuple(2**i for i in range(9))
DTYPES: tuple[str, ...] = ("float32", "float16")
RESOLUTIONS: tuple[int, ...] = (32, 64, 96, 112, 128, 160, 168, 192, 224, 256, 288, 320, 336, 384, 448, 512)
SEQ_LENS: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
RNN_SEQ_LENS: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512, 1024)
EXTRA_AXES: dict[str, dict[str, tuple]] = {"randwire": {"seed": tuple(range(8))}}
#: Families whose size axis is not :data:`RESOLUTIONS` / :data:`SEQ_LENS`: wav2vec 2.0's ``seq_len`` counts audio
#: samples at 16 kHz (1 to 15 s; 104,640 is the average utterance of the public LibriSpeech rows), and nnU-Net's and
#: DLRM's sizes are their variants' own (no size parameter: ``None``, the variants alone).
SIZE_AXES: dict[str, tuple[str, tuple] | None] = {
    "wav2vec2": ("seq_len", (16000, 32000, 64000, 104640, 160000, 240000)),
    "nnunet": None,
    "dlrm": None,
}

# The skip estimate's fixed terms (MiB) were the predictor's figures of the time (context 500, workspace 64) plus
# margins, so the estimate errs high: an under-estimate costs a GPU run that ends in OOM, an over-estimate only
# drops a borderline config. They stay as the committed config lists (lists/*.jsonl, est_memory_mb) were sampled
# with: their sum, 856 MiB, still exceeds what the H100 rows measured outside the tensors (context 686-706 MiB +
# cuBLAS's 32 MiB workspace, docs/memory.md); the predictor's own context is predictor.memory's. The workspace
# margin covers the warm-up, which the predictor's figure leaves out: the harness runs with cudnn.benchmark, which
# tries candidate algorithms with their workspaces during the first run (the transient peak the harness records
# as timing.warmup_peak_reserved_mb). The context margin covers the context's spread across drivers and CUDA/torch
# versions and the kernels loaded lazily during the runs (the harness measures the context after them).
CONTEXT_MARGIN_MIB = 100.0
WARMUP_WORKSPACE_MARGIN_MIB = 192.0
SKIP_CONTEXT_MIB = 500.0 + CONTEXT_MARGIN_MIB  # 500 + 100 = 600
SKIP_WORKSPACE_MIB = 64.0 + WARMUP_WORKSPACE_MARGIN_MIB  # 64 + 192 = 256
ACT_SAFETY = 1.3
FIT_FRACTION = 0.97
SUSTAINED_FLOPS = {"float32": 40e12, "float16": 400e12}
MAX_RUN_MS = 500.0
_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def config_id(family: str, params: dict, batch: int, dtype: str, llm: dict | None = None) -> str:
    """Return the stable id of a configuration: a hash of its canonical content.

    Args:
        family: Zoo family name.
        params: Fully resolved family parameters.
        batch: Batch size.
        dtype: ``"float32"`` or ``"float16"``.
        llm: An LLM serving step (:mod:`predictor.measure.llm_steps`; part of the id only when set).

    Returns:
        16 hex digits of SHA-256 over the sorted-key JSON of the content.
    """
    content: dict[str, object] = {"family": family, "params": params, "batch": batch, "dtype": dtype}
    if llm:
        content["llm"] = llm
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class MeasureConfig:
    """One configuration to measure.

    Attributes:
        id: Stable id, see :func:`config_id`.
        family: Zoo family.
        zoo: Spec string usable as ``zoo:SPEC`` (variant plus overrides).
        params: Fully resolved family parameters.
        batch: Batch size.
        dtype: Weight and float-input dtype name.
        inputs: ``[{"name", "shape", "dtype"}]`` of the example inputs.
        weight_mb: Parameter and buffer MiB at ``dtype``.
        est_memory_mb: Estimated peak device MiB (context included).
        mem_method: How activations were estimated (``"meta-live"``, ``"fallback"``).
        expected_oom: The estimate exceeds the target device's memory.
        gflops: Forward GFLOPs at this batch (``FlopCounterMode`` count; 0 if unknown).
        est_run_ms: :func:`estimate_run_ms` (a sampling filter, not a label).
        llm: When set, the config measures an LLM serving step (``{"step": "prefill", "prompt": P}`` or
            ``{"step": "decode", "context": L}``, :mod:`predictor.measure.llm_steps`) rather than the forward.
    """

    id: str
    family: str
    zoo: str
    params: dict
    batch: int
    dtype: str
    inputs: list[dict] = field(default_factory=list)
    weight_mb: float = 0.0
    est_memory_mb: float = 0.0
    mem_method: str = ""
    expected_oom: bool = False
    gflops: float = 0.0
    est_run_ms: float = 0.0
    llm: dict | None = None  # an LLM serving step instead of the model's forward (predictor.measure.llm_steps)

    def to_dict(self) -> dict:
        """Return a JSON-serialisable dict (with the config schema tag).

        Returns:
            The config as a plain dict.
        """
        return {"schema": CONFIG_SCHEMA, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> MeasureConfig:
        """Build a config from :meth:`to_dict` output; keys that are not fields are ignored.

        Args:
            data: The dict.

        Returns:
            The config.
        """
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class SpecInfo:
    """Batch-independent facts about one zoo spec, from a meta-device build.

    Attributes:
        family: Family name.
        params: Resolved parameters.
        weight_bytes: Bytes of parameters and buffers per dtype name.
        act_bytes: Peak live activation bytes at batch 1 per dtype name.
        inputs: Input specs at batch 1 (float inputs as ``"float"``).
        mem_method: ``"meta-live"`` or ``"fallback"``.
        flops: FLOPs of one forward at batch 1 (``FlopCounterMode`` on meta; 0 if unknown).
    """

    family: str
    params: dict
    weight_bytes: dict[str, int]
    act_bytes: dict[str, int]
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]
    mem_method: str
    flops: int = 0


class MetaDispatch(TorchDispatchMode):
    """The meta-device forward trace shared by the memory estimate and the kernel list.

    Answers data-dependent host reads (``.item()`` in Hugging Face mask code) with 1 so that decoders
    trace on meta, runs every other ATen op (through :meth:`run`) and hands :meth:`observe` the outputs
    whose storage is fresh: an output that aliases an input (a view, an in-place result) is not new
    memory and was not written by a kernel of its own. Subclasses override :meth:`observe` (and
    :meth:`run` to short-cut an op whose meta implementation is slow).
    """

    def run(self, func, args: tuple, kwargs: dict):
        """Execute one op (the default: call it)."""
        return func(*args, **kwargs)

    def observe(self, func, args: tuple, kwargs: dict, out: object, fresh: list[torch.Tensor]) -> None:
        """Look at one executed op; ``fresh``: its outputs with storage no input shares."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._schema.name in _HOST_READS:
            # Data-dependent host reads (HF mask helpers) cannot run on meta; answer "true"/1.
            tensor = args[0]
            return True if tensor.dtype == torch.bool else (1.0 if tensor.is_floating_point() else 1)
        out = self.run(func, args, kwargs)
        seen = {t.untyped_storage()._cdata for t in _flat_tensors((args, kwargs))}
        fresh = []
        for t in _flat_tensors(out):
            storage = t.untyped_storage()
            if storage._cdata in seen:  # a view or an in-place result: no new memory
                continue
            seen.add(storage._cdata)
            fresh.append(t)
        self.observe(func, args, kwargs, out, fresh)
        return out


class _LiveBytes(MetaDispatch):
    """Track the peak of live, freshly allocated tensor bytes (two dtype currencies at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.live = {name: 0 for name in DTYPES}
        self.peak = dict(self.live)
        self.largest = 0

    def _free(self, sizes: dict[str, int]) -> None:
        for name, n in sizes.items():
            self.live[name] -= n

    def observe(self, func, args: tuple, kwargs: dict, out: object, fresh: list[torch.Tensor]) -> None:
        for t in fresh:
            storage = t.untyped_storage()
            n = storage.nbytes()
            sizes = {"float32": n, "float16": n // 2 if t.dtype == torch.float32 else n}
            for name, s in sizes.items():
                self.live[name] += s
                self.peak[name] = max(self.peak[name], self.live[name])
            self.largest = max(self.largest, n)
            weakref.finalize(storage, self._free, sizes)


_HOST_READS = frozenset({"aten::_local_scalar_dense", "aten::is_nonzero", "aten::item", "aten::equal"})


def _flat_tensors(obj: object) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _flat_tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _flat_tensors(item)


_SPEC_CACHE: dict[str, SpecInfo | None] = {}


def _tensor_bytes(tensors: Iterable[torch.Tensor], dtype: torch.dtype) -> int:
    total = 0
    for t in tensors:
        size = dtype.itemsize if t.is_floating_point() else t.element_size()
        total += t.numel() * size
    return total


def _bake_parametrizations(module: torch.nn.Module) -> None:
    """Replace each parametrized tensor by its value, in place (a meta module: no data). FlopCounterMode's module
    tracker breaks a parametrization's weight property (wav2vec 2.0's weight-normed positional conv raised
    AttributeError, and the estimate fell back to counting no FLOPs); the weight norm's own few kernels per forward
    are negligible in an estimate."""
    from torch.nn.utils import parametrize

    for sub in list(module.modules()):
        if parametrize.is_parametrized(sub):
            for name in list(sub.parametrizations):
                parametrize.remove_parametrizations(sub, name, leave_parametrized=True)


def spec_info(spec: str) -> SpecInfo | None:
    """Return cached batch-independent facts about a spec, or ``None`` if the zoo rejects it.

    Args:
        spec: Zoo spec string.

    Returns:
        The :class:`SpecInfo`, or ``None`` for a spec the builder rejects.
    """
    if spec in _SPEC_CACHE:
        return _SPEC_CACHE[spec]
    try:
        model = zoo.build(spec, batch=1, dtype=torch.float32, device="meta")
    except zoo.ZooError:
        _SPEC_CACHE[spec] = None
        return None
    tensors = list(model.module.parameters()) + list(model.module.buffers())
    weights = {name: _tensor_bytes(tensors, _TORCH_DTYPES[name]) for name in DTYPES}
    inputs = tuple(
        (name, tuple(t.shape), "float" if t.is_floating_point() else str(t.dtype).removeprefix("torch."))
        for name, t in zip(model.input_names, model.example_inputs, strict=False)
    )
    _bake_parametrizations(model.module)
    tracker = _LiveBytes()
    counter = FlopCounterMode(display=False)
    method = "meta-live"
    flops = 0
    try:
        with torch.inference_mode(), counter, tracker:
            out = model.module(*model.example_inputs)
        del out
        acts = dict(tracker.peak)
        flops = int(counter.get_total_flops())
    except Exception:  # noqa: BLE001 - any meta failure falls back to a formula
        method = "fallback"
        in_bytes = sum(t.numel() * t.element_size() for t in model.example_inputs)
        base = max(8 * tracker.largest, 4 * in_bytes)
        acts = {"float32": base, "float16": base // 2}
    info = SpecInfo(model.family, dict(model.params), weights, acts, inputs, method, flops)
    _SPEC_CACHE[spec] = info
    return info


def estimate_memory_mib(info: SpecInfo, batch: int, dtype: str) -> float:
    """Estimate the peak device memory (MiB) of one config on the high side, to decide what to skip.

    ``SKIP_CONTEXT_MIB + SKIP_WORKSPACE_MIB + weights + batch x activations x ACT_SAFETY`` (module docstring).

    Args:
        info: The spec's :class:`SpecInfo`.
        batch: Batch size.
        dtype: Dtype name.

    Returns:
        Estimated MiB.
    """
    weights = info.weight_bytes[dtype]
    acts = info.act_bytes[dtype] * batch * ACT_SAFETY
    return SKIP_CONTEXT_MIB + SKIP_WORKSPACE_MIB + (weights + acts) / 2**20


def estimate_run_ms(info: SpecInfo, batch: int, dtype: str) -> float:
    """Rough time of one forward on an H100-class GPU (ms), to keep each config's measurement short.

    FLOPs over a sustained rate (float32 at torch defaults runs matmuls without TF32: 40 TFLOP/s;
    float16: 400 TFLOP/s) plus 0.05 ms per launch-bound run. Only a sampling filter, never a label.

    Args:
        info: The spec's :class:`SpecInfo`.
        batch: Batch size.
        dtype: Dtype name.

    Returns:
        Estimated milliseconds per run.
    """
    rate = SUSTAINED_FLOPS.get(dtype, SUSTAINED_FLOPS["float32"])
    return info.flops * batch / rate * 1e3 + 0.05


def _size_axis(family: zoo.Family) -> tuple[str | None, tuple]:
    if family.name in SIZE_AXES:
        return SIZE_AXES[family.name] or (None, (None,))
    if "resolution" in family.params:
        return "resolution", RESOLUTIONS
    if family.kind == "sequence":
        return "seq_len", RNN_SEQ_LENS
    return "seq_len", SEQ_LENS


def _variants(family: zoo.Family) -> list[str]:
    seen: dict[str, str] = {}
    for name in [*family.variants, family.name]:
        _, params = zoo.resolve(name)
        key = json.dumps(params, sort_keys=True, default=str)
        seen.setdefault(key, name)
    return list(seen.values())


def _spec_string(variant: str, overrides: dict[str, object]) -> str:
    if not overrides:
        return variant
    return variant + "?" + "&".join(f"{k}={v}" for k, v in sorted(overrides.items()))


def _family_specs(family: zoo.Family) -> list[list[str]]:
    """Spec strings per variant (each list covers that variant's size and extra axes)."""
    size_key, sizes = _size_axis(family)
    extra = EXTRA_AXES.get(family.name, {})
    keys = [*([size_key] if size_key else []), *extra]
    values = [*([sizes] if size_key else []), *extra.values()]
    out = []
    for variant in _variants(family):  # the family's variants in registry order (small to large), then defaults
        _, base = zoo.resolve(variant)
        limit = base.get("max_pos")
        specs = []
        for combo in product(*values):
            overrides = dict(zip(keys, combo, strict=True))
            if size_key == "seq_len" and isinstance(limit, int) and overrides["seq_len"] > limit:
                continue
            specs.append(_spec_string(variant, overrides))
        out.append(specs)
    return out


def enumerate_space(family: str) -> Iterator[tuple[str, int, str]]:
    """Yield every (spec, batch, dtype) of a family's configuration space, unvalidated.

    Args:
        family: Family name.

    Yields:
        ``(spec, batch, dtype)`` triples in a fixed order.
    """
    fam = zoo.FAMILIES[family]
    for specs in _family_specs(fam):
        for spec in specs:
            for batch in BATCHES:
                for dtype in DTYPES:
                    yield spec, batch, dtype


def target_memory_mib(target: str) -> float:
    """Return the memory (MiB) of a target device key; host RAM for ``cpu-*`` targets.

    Args:
        target: Device key (``"h100-80gb"``) or ``"cpu-<host>"``.

    Returns:
        Memory in MiB.

    Raises:
        ValueError: For an unknown GPU key.
    """
    if target in DEVICE_MEMORY_MIB:
        return float(DEVICE_MEMORY_MIB[target])
    if target.startswith("cpu"):
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
        except (ValueError, OSError, AttributeError):
            return 16 * 1024.0
    raise ValueError(f"unknown target device {target!r}; known: {', '.join(sorted(DEVICE_MEMORY_MIB))}, cpu-*")


def _make_config(info: SpecInfo, spec: str, batch: int, dtype: str, est: float, oom: bool) -> MeasureConfig:
    inputs = [
        {"name": name, "shape": [batch, *shape[1:]], "dtype": dtype if kind == "float" else kind}
        for name, shape, kind in info.inputs
    ]
    return MeasureConfig(
        id=config_id(info.family, info.params, batch, dtype),
        family=info.family,
        zoo=spec,
        params=info.params,
        batch=batch,
        dtype=dtype,
        inputs=inputs,
        weight_mb=round(info.weight_bytes[dtype] / 2**20, 3),
        est_memory_mb=round(est, 1),
        mem_method=info.mem_method,
        expected_oom=oom,
        gflops=round(info.flops * batch / 1e9, 3),
        est_run_ms=round(estimate_run_ms(info, batch, dtype), 3),
    )


def _fitting_config(
    info: SpecInfo, spec: str, batch: int, dtype: str, limit_mib: float, max_run_ms: float
) -> MeasureConfig | None:
    """The config of (spec, batch, dtype) where its memory estimate is within `limit_mib` and its time estimate
    within `max_run_ms`, else None (what `sample_configs` and `public_configs` keep)."""
    est = estimate_memory_mib(info, batch, dtype)
    if est <= limit_mib and estimate_run_ms(info, batch, dtype) <= max_run_ms:
        return _make_config(info, spec, batch, dtype, est, False)
    return None


def _pick_specs(per_variant: list[list[str]], n_specs: int, rng: random.Random) -> list[tuple[str, SpecInfo]]:
    queues = [rng.sample(specs, len(specs)) for specs in per_variant]
    rng.shuffle(queues)
    picked: list[tuple[str, SpecInfo]] = []
    seen: set[str] = set()
    while len(picked) < n_specs and any(queues):
        for queue in queues:
            while queue:
                spec = queue.pop()
                info = spec_info(spec)
                if info is None:
                    continue
                key = json.dumps(info.params, sort_keys=True, default=str)
                if key in seen:
                    continue
                seen.add(key)
                picked.append((spec, info))
                break
            if len(picked) >= n_specs:
                break
    return picked


def sample_configs(
    target: str = "h100-80gb",
    per_family: int = 64,
    seed: int = 0,
    families: Iterable[str] | None = None,
    max_expected_oom: int = 8,
    memory_mib: float | None = None,
    batches: Iterable[int] | None = None,
    dtypes: Iterable[str] | None = None,
    max_est_mib: float | None = None,
    progress: bool = False,
    max_run_ms: float = MAX_RUN_MS,
) -> list[MeasureConfig]:
    """Draw a deterministic sample of configurations that fit the target device.

    Args:
        target: Device key whose memory bounds the configs (see :func:`target_memory_mib`).
        per_family: Configs per family (fewer only if a family's space is smaller).
        seed: Sampling seed; the same seed, code and zoo give the same list.
        families: Restrict to these families (default: all).
        max_expected_oom: How many configs over the device memory to keep, flagged ``expected_oom``
            (at most two per family: its smallest and largest over-size config).
        memory_mib: Override the target's memory.
        batches: Restrict batch sizes (default :data:`BATCHES`).
        dtypes: Restrict dtypes (default :data:`DTYPES`).
        max_est_mib: Also skip configs estimated above this (e.g. small configs for CPU tests).
        progress: Print one line per family to stderr.
        max_run_ms: Skip configs whose :func:`estimate_run_ms` exceeds this, so that >= 35 runs of every
            config fit comfortably in the per-config timeout and a shard keeps its pace.

    Returns:
        Configs in :func:`stratified_order`.
    """
    mem = memory_mib if memory_mib is not None else target_memory_mib(target)
    limit = mem * FIT_FRACTION if max_est_mib is None else min(mem * FIT_FRACTION, max_est_mib)
    names = sorted(families) if families is not None else [f.name for f in zoo.list_families()]
    pairs = [(b, d) for b in (tuple(batches) if batches else BATCHES) for d in (tuple(dtypes) if dtypes else DTYPES)]
    chosen: list[MeasureConfig] = []
    oom_candidates: list[MeasureConfig] = []
    for name in names:
        rng = random.Random(f"preflight-measure:{seed}:{name}")
        specs = _pick_specs(_family_specs(zoo.FAMILIES[name]), max(1, math.ceil(per_family / 4)), rng)
        decks = [rng.sample(pairs, len(pairs)) for _ in specs]
        taken: list[MeasureConfig] = []
        while len(taken) < per_family and any(decks):
            for (spec, info), deck in zip(specs, decks, strict=True):
                while deck:
                    batch, dtype = deck.pop()
                    if (cfg := _fitting_config(info, spec, batch, dtype, limit, max_run_ms)) is not None:
                        taken.append(cfg)
                        break
                if len(taken) >= per_family:
                    break
        chosen.extend(taken)
        if max_est_mib is None and max_expected_oom > 0:
            # The family's over-size candidate: the smallest config (of its picked specs) over the memory.
            probes = list(specs)
            # The last two variant lists hold the largest named variant (registry order is small to large,
            # family defaults come last); probe each at its largest size.
            largest = [specs[-1] for specs in _family_specs(zoo.FAMILIES[name])[-2:] if specs]
            probes += [(spec, info) for spec in largest if (info := spec_info(spec)) is not None]
            over = [
                (estimate_memory_mib(info, b, d), spec, info, b, d)
                for spec, info in probes
                for b, d in pairs
                if estimate_memory_mib(info, b, d) > mem
            ]
            over.sort(key=lambda item: (item[0], item[1], item[3], item[4]))
            # The smallest over-size config (borderline: tests the estimate) and the largest (a clear OOM).
            for est, spec, info, batch, dtype in {id(o): o for o in over[:1] + over[-1:]}.values():
                oom_candidates.append(_make_config(info, spec, batch, dtype, est, True))
        if progress:
            print(f"  {name}: {len(taken)} configs from {len(specs)} specs", file=sys.stderr, flush=True)
    rng = random.Random(f"preflight-measure:{seed}:expected-oom")
    chosen.extend(rng.sample(oom_candidates, min(max_expected_oom, len(oom_candidates))))
    unique = {c.id: c for c in chosen}
    return stratified_order(unique.values())


def public_configs(
    target: str, path: str | Path | None = None, max_run_ms: float = MAX_RUN_MS
) -> tuple[list[MeasureConfig], int]:
    """The configurations of the public whole-model rows preflight maps (:mod:`predictor.public_data`: NVIDIA
    DeepLearningExamples' A100 tables), each (zoo spec, batch) in float32 and float16, so that our own GPU measures
    the very shapes whose public latencies the kernel model misses (nnU-Net, SSD300, TFT, wav2vec 2.0): measured in
    a plain eager loop, they tell the kernel model's error from the public harness's own work. The public AMP rows
    ran under autocast and their TF32 rows with TF32 matmuls; these run as every config does (``.half()``, and
    float32 with torch's defaults), so they test the kernel model on the same shapes, not the rows' precision modes.

    Args:
        target: Device key whose memory bounds the configs.
        path: The public rows (default: the committed ``data/public-models/dle-a100.jsonl``).
        max_run_ms: Skip configs estimated slower than this, as :func:`sample_configs` does.

    Returns:
        (the configs, deduplicated by id, in stratified order; how many (spec, batch, dtype) were skipped by
        the memory or time bound).
    """
    from predictor.public_data import DEFAULT_PATH, MappedRow, load_rows, map_rows

    limit = target_memory_mib(target) * FIT_FRACTION
    chosen: dict[str, MeasureConfig] = {}
    skipped: set[tuple[str, int, str]] = set()
    for row in map_rows(load_rows(path or DEFAULT_PATH)):
        if not isinstance(row, MappedRow) or (info := spec_info(row.spec)) is None:
            continue
        for dtype in DTYPES:
            if (cfg := _fitting_config(info, row.spec, row.batch, dtype, limit, max_run_ms)) is not None:
                chosen[cfg.id] = cfg
            else:
                skipped.add((row.spec, row.batch, dtype))
    return stratified_order(chosen.values()), len(skipped)


#: Batch sizes in the order a family's configs are dealt out: each prefix spreads over the range.
_BATCH_SPREAD = (1, 256, 16, 4, 64, 2, 128, 8, 32)


def stratified_order(configs: Iterable[MeasureConfig]) -> list[MeasureConfig]:
    """Order configs so that every prefix is a stratified sample of family, batch size and dtype.

    Within a family, configs are bucketed by (batch, dtype); the buckets are visited round-robin, batches
    in :data:`_BATCH_SPREAD` order with the dtype alternating (batch 1 float32, 256 float16, 16 float32,
    ..., then each batch in its other dtype), each bucket yielding its configs sorted by spec. The
    families are then interleaved round-robin (alphabetically), so the first ``k x F`` configs hold about
    ``k`` of each of the ``F`` families. The harness measures a list (and each shard of it, see
    :func:`shard_of`) in list order, so a run stopped by its time budget still covers every family,
    batch size and dtype a little. Ids and shard membership do not depend on the order.

    Args:
        configs: The configs (any order).

    Returns:
        The same configs in stratified order (deterministic: independent of the input order).
    """
    batch_rank = {b: i for i, b in enumerate(_BATCH_SPREAD)}
    dtype_rank = {d: i for i, d in enumerate(DTYPES)}
    per_family: dict[str, list[MeasureConfig]] = {}
    for cfg in sorted(configs, key=lambda c: (c.family, c.zoo, c.batch, c.dtype, c.id)):
        per_family.setdefault(cfg.family, []).append(cfg)
    queues = []
    for family in sorted(per_family):
        buckets: dict[tuple[int, str], list[MeasureConfig]] = {}
        for cfg in per_family[family]:
            buckets.setdefault((cfg.batch, cfg.dtype), []).append(cfg)

        def bucket_key(key: tuple[int, str]) -> tuple:
            b_rank = batch_rank.get(key[0], len(batch_rank))
            return ((dtype_rank.get(key[1], 0) + b_rank) % 2, b_rank, key[0], key[1])

        keys = sorted(buckets, key=bucket_key)
        queues.append(_round_robin([buckets[k] for k in keys]))
    return _round_robin(queues)


def _round_robin(lists: list[list]) -> list:
    """Interleave lists: the first item of each, then the second of each, and so on."""
    out = []
    for i in range(max((len(items) for items in lists), default=0)):
        out.extend(items[i] for items in lists if i < len(items))
    return out


def shard_of(config_id_: str, n: int) -> int:
    """Return the shard (0-based) a config id belongs to among ``n``: independent of list order.

    Args:
        config_id_: The config id (hex).
        n: Number of shards.

    Returns:
        The shard index.
    """
    return int(config_id_, 16) % n


def save_configs(configs: Iterable[MeasureConfig], path: str | Path) -> int:
    """Write configs as JSON lines.

    Args:
        configs: The configs.
        path: Output file.

    Returns:
        The number written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w") as fh:
        for cfg in configs:
            fh.write(json.dumps(cfg.to_dict(), sort_keys=True) + "\n")
            n += 1
    return n


def load_configs(path: str | Path) -> list[MeasureConfig]:
    """Read configs written by :func:`save_configs`.

    Args:
        path: The JSON-lines file.

    Returns:
        The configs.
    """
    out = []
    with Path(path).open() as fh:
        for line in fh:
            if line.strip():
                out.append(MeasureConfig.from_dict(json.loads(line)))
    return out


def main(argv: list[str] | None = None) -> int:
    """Write a sampled config list: ``python -m predictor.measure.configs --target h100-80gb --out FILE``.

    Args:
        argv: Command-line arguments.

    Returns:
        Exit code.
    """
    parser = argparse.ArgumentParser(prog="python -m predictor.measure.configs", description=main.__doc__)
    parser.add_argument("--target", default="h100-80gb", help="device key whose memory bounds the configs")
    parser.add_argument("--per-family", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--families", default=None, help="comma-separated subset")
    parser.add_argument("--max-expected-oom", type=int, default=8)
    parser.add_argument(
        "--public", action="store_true", help="the public rows' configurations instead (see public_configs)"
    )
    parser.add_argument(
        "--add-to",
        default=None,
        help="keep this list's configs and add the new ones (by id; the list re-saved in stratified order)",
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    families = args.families.split(",") if args.families else None
    if args.public:
        configs, skipped = public_configs(args.target)
        print(f"public rows: {skipped} (spec, batch, dtype) over the memory or time bound", file=sys.stderr)
    else:
        configs = sample_configs(
            args.target, args.per_family, args.seed, families, args.max_expected_oom, progress=True
        )
    if args.add_to:
        kept = load_configs(args.add_to)
        known = {c.id for c in kept}
        added = [c for c in configs if c.id not in known]
        print(f"{len(added)} of {len(configs)} configs new to {args.add_to} ({len(kept)} kept)", file=sys.stderr)
        configs = stratified_order([*kept, *added])
    n = save_configs(configs, args.out)
    per: dict[str, int] = {}
    for cfg in configs:
        per[cfg.family] = per.get(cfg.family, 0) + 1
    oom = sum(c.expected_oom for c in configs)
    print(f"{n} configs, {len(per)} families (min {min(per.values())}/family), {oom} expected_oom -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
