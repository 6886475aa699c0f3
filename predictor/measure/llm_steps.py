"""LLM serving steps as measurement configs: a prefill or one decode step of a zoo decoder, static KV cache.

A config with an ``llm`` block (:class:`~predictor.measure.configs.MeasureConfig`) is measured like every other
(warm-ups, CUDA events, NVML energy, peak memory, MIG fit), but the timed call is one serving step built by
:func:`build` from ``zoo.serving`` (the modules ``preflight llm`` analyses):

- ``{"step": "prefill", "prompt": P}``: ``PrefillStep`` on ``batch x P`` token ids (last-position logits, and the
  keys and values to store);
- ``{"step": "decode", "context": L}``: ``DecodeStep(in_place=True)`` on ``batch`` token ids with a static KV cache
  of ``L`` slots per layer allocated on the device (``min(L, window)`` for a sliding-window layer): the new entries
  are written into the cache with ``index_copy_`` and attention reads all its slots. The same slot is rewritten on
  every timed run, so each run is the same step.

The memory label therefore includes the KV cache. Pure torch + transformers: no TVM, no analyzer.

``python -m predictor.measure.llm_steps --zoo llama_7b --batches 1,8 --prompts 128,1024 --contexts 1024,4096
--out configs.jsonl`` writes such a list; ``python -m predictor.measure --configs configs.jsonl ...`` measures it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

import zoo
from predictor.measure.configs import SKIP_CONTEXT_MIB, MeasureConfig, config_id, save_configs

__all__ = ["STEPS", "build", "step_config", "step_configs"]

STEPS = ("prefill", "decode")
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _check(llm: dict) -> tuple[str, int]:
    step = llm.get("step")
    key = "prompt" if step == "prefill" else "context"
    length = llm.get(key)
    if step not in STEPS or not isinstance(length, int) or length < 1:
        shapes = "{'step': 'prefill', 'prompt': P} or {'step': 'decode', 'context': L}"
        raise ValueError(f"an llm step is {shapes}, not {llm}")
    return step, length


def build(cfg: dict, device: str) -> tuple[Callable, tuple, tuple[str, ...]]:
    """The timed callable of an LLM step config, its arguments on `device`, and their names.

    Args:
        cfg: A :meth:`MeasureConfig.to_dict` dict with an ``llm`` block.
        device: ``"cuda"`` or ``"cpu"``.

    Returns:
        ``(fn, args, names)``: ``fn(*args)`` runs one step.
    """
    from zoo.serving import DecodeStep, PrefillStep, cache_layout, decode_inputs, prefill_inputs

    step, length = _check(cfg["llm"])
    dtype = _DTYPES[cfg["dtype"]]
    built = zoo.build(cfg["zoo"], batch=1, dtype=dtype, device=device)
    lm = getattr(built.module, "model", built.module)
    layout = cache_layout(lm.config)
    batch = int(cfg["batch"])
    if step == "prefill":
        return (
            PrefillStep(lm, layout).eval(),
            prefill_inputs(batch, length, vocab=layout.vocab, device=device),
            ("input_ids",),
        )
    names = ["input_ids"]
    for i in range(layout.layers):
        names += [f"past_key_{i}", f"past_value_{i}"]
    args = decode_inputs(layout, batch, length, dtype=dtype, device=device)
    return DecodeStep(lm, length, in_place=True, layout=layout).eval(), args, tuple(names)


def step_config(spec: str, step: str, batch: int, length: int, dtype: str = "float16") -> MeasureConfig:
    """One LLM step config of the zoo decoder `spec` (its KV cache and weights give `est_memory_mb`)."""
    from zoo.serving import cache_layout

    llm = {"step": step, "prompt" if step == "prefill" else "context": length}
    _check(llm)
    family, params = zoo.resolve(spec)
    built = zoo.build(spec, device="meta")
    lm = getattr(built.module, "model", built.module)
    layout = cache_layout(lm.config)
    nbytes = _DTYPES[dtype].itemsize
    weights = sum(t.numel() for t in {id(p): p for p in lm.parameters()}.values()) * nbytes
    kv = 0
    if step == "decode":
        slots = sum(layout.slots(i, length) for i in range(layout.layers))
        kv = batch * slots * 2 * layout.kv_heads * layout.head_dim * nbytes
    inputs = [{"name": "input_ids", "shape": [batch, length if step == "prefill" else 1], "dtype": "int64"}]
    return MeasureConfig(
        id=config_id(family.name, params, batch, dtype, llm=llm),
        family=family.name,
        zoo=built.name,
        params=params,
        batch=batch,
        dtype=dtype,
        inputs=inputs,
        weight_mb=round(weights / 2**20, 3),
        est_memory_mb=round(SKIP_CONTEXT_MIB + (weights + kv) / 2**20, 3),
        mem_method="weights+kv",
        llm=llm,
    )


def step_configs(
    specs: Sequence[str],
    batches: Sequence[int],
    prompts: Sequence[int],
    contexts: Sequence[int],
    dtype: str = "float16",
) -> list[MeasureConfig]:
    """Prefill configs at every (batch, prompt) and decode configs at every (batch, context), per spec."""
    out = []
    for spec in specs:
        for b in batches:
            out += [step_config(spec, "prefill", b, p, dtype) for p in prompts]
            out += [step_config(spec, "decode", b, c, dtype) for c in contexts]
    return out


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main(argv: Sequence[str] | None = None) -> int:
    """Write LLM step configs as JSON lines for ``python -m predictor.measure --configs``."""
    p = argparse.ArgumentParser(prog="python -m predictor.measure.llm_steps", description=__doc__.splitlines()[0])
    p.add_argument("--zoo", action="append", required=True, help="zoo decoder spec (repeatable), e.g. llama_7b")
    p.add_argument("--batches", type=_ints, default=[1, 8])
    p.add_argument("--prompts", type=_ints, default=[128, 1024])
    p.add_argument("--contexts", type=_ints, default=[1024, 4096])
    p.add_argument("--dtype", choices=sorted(_DTYPES), default="float16")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    try:
        configs = step_configs(args.zoo, args.batches, args.prompts, args.contexts, args.dtype)
    except (ValueError, zoo.ZooError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n = save_configs(configs, Path(args.out))
    print(json.dumps({"configs": n, "out": args.out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
