"""How much host time an eager forward spends per kernel, family by family, on each H100 lease (issue 30's H100
default rule). Prints one table per lease and a summary.

For each own-H100 whole-model row that the kernel model calls host-bound (its launch floor at least half of its
eager estimate, `View.floor_ms`), the measured milliseconds per launched kernel and the residual the GraphSAGE is
trained on, t = log(measured / kernel model). Rows come from `data/h100-80gb/models/*.jsonl`, graphs and kernel
arrays from the committed graph file (no analysis, no training: a few seconds). A lease is the hour its records
were timed in (each lease is another machine).

Usage: python bench/bench_h100_host_per_kernel.py [--floor-share 0.5]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--floor-share", type=float, default=0.5, help="host-bound: launch floor share of the estimate")
    args = ap.parse_args()
    from predictor import public_train as pt

    graphs = pt.load_graphs()
    records: dict[str, list] = {}
    leases: dict[str, list] = defaultdict(list)
    for r in pt.training_rows():
        if not r.source.startswith("h100:"):
            continue
        _, name, line = r.source.split(":")
        if name not in records:
            with open(pt.H100_DIR / name, encoding="utf-8") as f:
                records[name] = [json.loads(x) for x in f]
        g = graphs[pt.graph_id(*r.config)]
        v = pt.kernel_view_of(g, r.device, r.precision, False)
        if v.floor_ms < args.floor_share * v.estimate_ms:
            continue
        launches = float(np.asarray(g.kernels["k_count"], dtype=float).sum())
        lease = records[name][int(line)]["env"]["timestamp"][:13]
        t = math.log(r.latency_ms / v.estimate_ms)
        leases[lease].append((1e3 * r.latency_ms / launches, r.family, r.batch, r.analysis_dtype, t))
    print(f"host-bound own H100 rows (launch floor >= {args.floor_share:.0%} of the kernel model's estimate)")
    for lease, rows in sorted(leases.items()):
        us = np.array([x[0] for x in rows])
        ts = np.array([x[4] for x in rows])
        lo, hi = min(rows), max(rows)
        print(
            f"\nlease {lease}: {len(rows)} rows, us per kernel min {us.min():.1f} ({lo[1]} b{lo[2]} {lo[3]}), median "
            f"{np.median(us):.1f}, max {us.max():.1f} ({hi[1]} b{hi[2]} {hi[3]}), max/min {us.max() / us.min():.2f}; "
            f"t median {np.median(ts):+.2f}, from {ts.min():+.2f} to {ts.max():+.2f}"
        )
        for us_k, fam, b, dt, t in sorted(rows):
            print(f"  {fam:<14} b{b:<4} {dt:<8} {us_k:6.1f} us/kernel  t {t:+.2f}")


if __name__ == "__main__":
    main()
