"""Where the committed kernel table is far off on this project's own kernel sweep, op by op, and the law that the
worst of them follow (no GPU needed: the committed records).

Part 1: for each (kind, op, dtype, layout) of a device's graph-timed sweep records, the kernels that took at least
`--min-us`: how many, the median of predicted / measured, its 10th and 90th percentiles, and the MAPE. A kind's
fit (`predictor/kernel_params.json`) is one set of parameters per (GPU family, kind, dtype); an op whose median
ratio is far from 1 is one its kind's fit does not describe.

Part 2: `group_norm`, whose statistics are reduced one (sample, group) row per thread block (torch's
`RowwiseMomentsCUDAKernel`): with fewer rows than the GPU has SMs, most SMs idle, so the time follows the elements
of one row, not the bytes of the tensor. The table's norm entries carry the floor t x min(max(1, rows / SMs), 2) x
(elements per row), t one constant up to a tensor size and another beyond it (`kernel_model.row_floor_s`, fitted by
`python -m predictor.kernel_fit rows`): its MAPE on the records with and without it.

Usage: python bench/bench_kernel_ops.py [--device h100-80gb] [--min-us 50]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import replace
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
    print(f"\ngroup_norm, contiguous, every record: the floor t x min(max(1, rows / {sms} SMs), 2) x elements per row")
    print(
        "\n| dtype | records | ns per element of a row: tensor <= line / beyond (line) | with the floor: MAPE / median "
        "APE % | without it: MAPE / median APE % |"
    )
    print("|---|---:|---|---:|---:|")
    for dtype in ("float32", "float16"):
        recs = [r for r in records if r.op == "group_norm" and r.layout == "contiguous" and r.dtype == dtype]
        if not recs:
            continue
        group = Group.of(recs)
        entry = table.lookup(args.device, "norm", dtype)
        err = {
            name: np.abs(group.predict(p) / group.latency - 1) * 100
            for name, p in (("with", entry), ("without", replace(entry, row_ns=0.0)))
        }
        print(
            f"| {dtype} | {len(recs)} | {entry.row_ns:.3f} / {entry.row_ns_large:.3f} ({entry.row_cache_mib:g} MiB) "
            f"| {err['with'].mean():.1f} / {np.median(err['with']):.1f} "
            f"| {err['without'].mean():.1f} / {np.median(err['without']):.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
