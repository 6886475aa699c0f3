"""Where the committed kernel table is far off on this project's own kernel sweep, op by op, and the law that the
worst of them follow (no GPU needed: the committed records).

Part 1: for each (kind, op, dtype, layout) of a device's graph-timed sweep records, the kernels that took at least
`--min-us`: how many, the median of predicted / measured, its 10th and 90th percentiles, and the MAPE. A kind's
fit (`predictor/kernel_params.json`) is one set of parameters per (GPU family, kind, dtype); an op whose median
ratio is far from 1 is one its kind's fit does not describe.

Part 2: `group_norm`, whose statistics are reduced one (sample, group) row per thread block (torch's
`RowwiseMomentsCUDAKernel`): with fewer rows than the GPU has SMs, most SMs idle, so the time follows the elements
of one row, not the bytes of the tensor. The law tried: time = max(1, rows / SMs) x (elements per row) x t, with one
constant t per dtype fitted here (the median over the records, then the MAPE of that law), against the committed
table's MAPE on the same records.

Usage: python bench/bench_kernel_ops.py [--device h100-80gb] [--min-us 50]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="h100-80gb", help="a device with sweep records under data/")
    parser.add_argument("--min-us", type=float, default=50.0, help="only kernels measured at least this long")
    parser.add_argument("--data", default=str(ROOT / "data"), help="folder holding <device>/kernels")
    args = parser.parse_args()

    from predictor.kernel_fit import DEVICES, Group, lookup_kind, read_sweep
    from predictor.kernel_model import load_params

    table = load_params()
    records = read_sweep(Path(args.data) / args.device / "kernels")
    cells = defaultdict(list)
    for r in records:
        cells[(lookup_kind(r), r.dtype, r.layout)].append(r)
    print(f"{len(records):,} ok graph-timed records on {args.device}; kernel table version {table.version}\n")
    print(
        f"| kind | op | dtype | layout | kernels >= {args.min_us:g} us "
        "| predicted / measured: median (p10-p90) | MAPE % |"
    )
    print("|---|---|---|---|---:|---|---:|")
    for (kind, dtype, layout), recs in sorted(cells.items()):
        group = Group.of(recs)
        ratio = group.predict(table.lookup(args.device, kind, dtype)) / group.latency
        large = group.latency >= args.min_us * 1e-6
        by_op = defaultdict(list)
        for r, q, big in zip(recs, ratio, large, strict=True):
            if big:
                by_op[r.op].append(q)
        for op, qs in sorted(by_op.items()):
            q = np.array(qs)
            p10, p50, p90 = np.percentile(q, [10, 50, 90])
            mape = np.mean(np.abs(q - 1)) * 100
            print(f"| {kind} | {op} | {dtype} | {layout} | {len(q)} | {p50:.2f} ({p10:.2f}-{p90:.2f}) | {mape:.0f} |")

    sms = DEVICES[args.device].sms
    print(f"\ngroup_norm, contiguous, every record: time = max(1, rows / {sms} SMs) x elements per row x t")
    print(
        "\n| dtype | records | t, ns per element of a row (median) | law: MAPE / median APE % "
        "| table: MAPE / median APE % |"
    )
    print("|---|---:|---:|---:|---:|")
    for dtype in ("float32", "float16", "bfloat16"):
        recs = [r for r in records if r.op == "group_norm" and r.layout == "contiguous" and r.dtype == dtype]
        if not recs:
            continue
        group = Group.of(recs)
        rows = np.array([r.params["n"] * r.params["g"] for r in recs], dtype=float)
        per_row = np.array([r.params["c"] * r.params["hw"] / r.params["g"] for r in recs], dtype=float)
        work = np.maximum(1.0, rows / sms) * per_row
        t = float(np.median(group.latency / work))
        table_err = np.abs(group.predict(table.lookup(args.device, "norm", dtype)) / group.latency - 1) * 100
        # the law as a floor under the table's own prediction (what a kernel-model term would add)
        law = np.maximum(work * t, group.predict(table.lookup(args.device, "norm", dtype)))
        law_err = np.abs(law / group.latency - 1) * 100
        print(
            f"| {dtype} | {len(recs)} | {t * 1e9:.3f} | {law_err.mean():.1f} / {np.median(law_err):.1f} "
            f"| {table_err.mean():.1f} / {np.median(table_err):.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
