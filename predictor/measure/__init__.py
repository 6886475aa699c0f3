"""GPU (and CPU) measurement harness that produces the predictor's training labels.

Pure torch + transformers (+ ``nvidia-ml-py`` imported lazily on CUDA); never imports TVM or ``passes/``.

- :mod:`predictor.measure.configs`: seeded, enumerable config sampler over the zoo with a memory estimate.
- :mod:`predictor.measure.harness`: persistent-worker harness that measures latency, energy, memory and
  MIG fit as docs/design.md's protocol defines them, writing ``preflight.measurement/1`` JSON lines; it drives
  :mod:`predictor.measure.supervisor` (the parent's handle of the worker process), which runs
  :mod:`predictor.measure.worker` (the protocol for one config) with :mod:`predictor.measure.nvml`.
- :mod:`predictor.measure.mig_profiles`: minimal device memory and MIG profile table.
- :mod:`predictor.measure.kernels`: the single-operator kernel sweep (``preflight.kernel-measurement/1``);
  :mod:`predictor.measure.kernel_list` derives its list from the zoo config list on the meta device.
- :mod:`predictor.measure.lease`: one command per step of a GPU session (smoke, kernels, models), and
  ``collect``/``summary`` that file its output into ``data/``.

Run ``python -m predictor.measure --help``, ``python -m predictor.measure.kernels --help`` and
``python -m predictor.measure.lease --help``; ``docs/measuring.md`` walks through a GPU session.
"""

from __future__ import annotations

import argparse


class HarnessError(RuntimeError):
    """The harness itself cannot proceed (e.g. the worker cannot start or CUDA is missing)."""


def shard_arg(text: str) -> tuple[int, int]:
    """``--shard i/n`` as (i, n), 0 <= i < n; an `argparse` type."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected i/n, got {text!r}") from None
    if not (count >= 1 and 0 <= index < count):
        raise argparse.ArgumentTypeError(f"need 0 <= i < n, got {text!r}")
    return index, count


def shard_summary(summary, shard: tuple[int, int], what: str = "", rate_digits: int = 1) -> str:
    """The line a sweep prints when its shard ends: "<device> [what ]shard i/n: measured N (status=count, ...) in
    T s = R/min; S were done, L left (budget)". `summary` has device, measured, statuses, elapsed_s,
    skipped, assigned and stopped_by_budget (the model harness's and the kernel sweep's summaries both do)."""
    rate = summary.measured / summary.elapsed_s * 60 if summary.elapsed_s else 0.0
    statuses = ", ".join(f"{k}={v}" for k, v in sorted(summary.statuses.items())) or "none"
    left = summary.assigned - summary.skipped - summary.measured
    return (
        f"{summary.device} {what + ' ' if what else ''}shard {shard[0]}/{shard[1]}: measured "
        f"{summary.measured} ({statuses}) in {summary.elapsed_s:.0f} s = {rate:.{rate_digits}f}/min; "
        f"{summary.skipped} were done, {left} left{' (budget)' if summary.stopped_by_budget else ''}"
    )
