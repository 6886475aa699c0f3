"""Sanity table of the published DLE A100 rows preflight maps: the compute rate each row implies.

For every zoo configuration the mapped rows use (``predictor.public_data``), the forward's FLOPs per example come
from torch's ``FlopCounterMode`` on the meta device (no weights allocated); a row's implied rate is
``FLOPs x batch / latency``. A rate above the A100's dense peak (156 TFLOP/s TF32, 312 float16/bfloat16) would
mean a wrong mapping (shape, batch or unit); low rates show where the timed loop is host-bound.

Usage: python bench/bench_public_data.py
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import zoo  # noqa: E402
from predictor.public_data import MappedRow, load_rows, map_rows  # noqa: E402

PEAK_TFLOPS = {"tf32": 156.0, "fp32": 156.0, "amp-fp16": 312.0, "fp16": 312.0, "amp-bf16": 312.0}


def flops_per_example(spec: str) -> float:
    """Forward FLOPs at batch 1 (FlopCounterMode on meta tensors)."""
    built = zoo.build(spec, batch=1, device="meta")
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        built.module(*built.example_inputs)
    return float(counter.get_total_flops())


def main() -> None:
    rows = [r for r in map_rows(load_rows()) if isinstance(r, MappedRow)]
    per_spec = {spec: flops_per_example(spec) for spec in sorted({r.spec for r in rows})}
    groups: dict[tuple[str, str, str], list[MappedRow]] = defaultdict(list)
    for r in rows:
        groups[(r.spec, r.precision, r.comparability)].append(r)
    print(f"{'zoo spec':<30} {'precision':<9} {'grade':<5} {'GFLOP/ex':>9} {'rows':>4} {'batches':>11} "
          f"{'TFLOP/s min':>11} {'max':>6} {'% peak':>6}")  # fmt: skip
    for (spec, precision, grade), group in sorted(groups.items()):
        rates = [per_spec[spec] * r.batch / (r.latency_ms / 1e3) / 1e12 for r in group]
        batches = f"{min(r.batch for r in group)}-{max(r.batch for r in group)}"
        peak = 100 * max(rates) / PEAK_TFLOPS[precision]
        print(
            f"{spec:<30} {precision:<9} {grade:<5} {per_spec[spec] / 1e9:>9.3f} {len(group):>4} {batches:>11} "
            f"{min(rates):>11.2f} {max(rates):>6.1f} {peak:>6.1f}"
        )


if __name__ == "__main__":
    main()
