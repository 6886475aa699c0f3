"""How far a whole-model calibration of the grouped/depthwise convolutions would move the H100 conv networks, each
convolutional family held out of its own calibration (an analysis; nothing here is adopted into the table).

For every convolutional-family record of data/h100-80gb/models (`bench_h100_whole_models.CONV_FAMILIES`): the
kernel view of the same zoo spec, batch and dtype, costed by the committed kernel model on `h100-80gb` (eager sum,
ms), split into G (the grouped and depthwise convolutions: `KernelArrays.grouped`) and R (every other kernel). One
multiplier s per dtype on G, fitted (grid of 400 values in [0.05, 2], least squares of log((s G + R) / measured))
on every family but one, predicts that family: s G + R. Prints, per dtype x batch, the latency MAPE of the kernel
model as it is and of the held-out calibration, and the range of s over the held-out fits.

Usage: python bench/bench_conv_grouped_lofo.py   (no GPU; about 4 min on the 2-core dev machine)
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_h100_whole_models import MODELS, conv_family  # noqa: E402


def fit_s(rows: list[tuple[float, float, float]]) -> float:
    """The multiplier on G minimising sum log^2((s G + R) / measured) over (G, R, measured) rows."""
    grid = np.exp(np.linspace(np.log(0.05), np.log(2.0), 400))
    g, r, y = (np.array(v) for v in zip(*rows, strict=True))
    cost = (np.log((grid[:, None] * g + r) / y) ** 2).sum(axis=1)
    return float(grid[int(np.argmin(cost))])


def main() -> int:
    warnings.filterwarnings("ignore")
    from analyzer.api import analyze_model
    from predictor.devices import get_device
    from predictor.kernel_model import kernel_arrays, kernel_latency_arrays

    device = get_device("h100-80gb")
    recs = [json.loads(line) for path in sorted(MODELS.glob("*.jsonl")) for line in path.open()]
    recs = [r for r in recs if r.get("status") == "ok" and conv_family(r["zoo"])]
    t0 = time.perf_counter()
    rows = []  # (record, family, G ms, R ms)
    for r in recs:
        analysis = analyze_model(f"zoo:{r['zoo']}", None, batch=r["batch"], dtype=r["dtype"]).analysis
        arrays = kernel_arrays(getattr(analysis, "launched_kernels", analysis.kernels))
        eager = kernel_latency_arrays(arrays, device).eager_s * 1e3
        grouped = arrays.grouped if arrays.grouped is not None else np.zeros(len(eager), dtype=bool)
        rows.append((r, conv_family(r["zoo"]), float(eager[grouped].sum()), float(eager[~grouped].sum())))
    print(f"{len(rows)} convolutional configs costed in {time.perf_counter() - t0:.0f} s\n")
    print("| configs | n | grouped share of predicted time | kernel model MAPE % | held-out calibrated MAPE % | s |")
    print("|---|---:|---:|---:|---:|---|")
    for dtype in sorted({r["dtype"] for r, *_ in rows}):
        mine = [row for row in rows if row[0]["dtype"] == dtype]
        by_batch: dict[int, list[tuple[float, float, float, float]]] = defaultdict(list)
        for fam in sorted({f for _, f, _, _ in mine}):
            s = fit_s([(g, rest, r["latency_ms"]["median"]) for r, f, g, rest in mine if f != fam])
            for r, f, g, rest in mine:
                if f == fam:
                    y, total = r["latency_ms"]["median"], g + rest
                    by_batch[r["batch"]].append((abs(total / y - 1), abs((s * g + rest) / y - 1), s, g / total))
        for batch, v in sorted(by_batch.items()):
            a = np.array(v)
            print(f"| {dtype} batch {batch} | {len(a)} | {a[:, 3].mean() * 100:.0f}% | {a[:, 0].mean() * 100:.1f} | "
                  f"{a[:, 1].mean() * 100:.1f} | {a[:, 2].min():.3f}-{a[:, 2].max():.3f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
