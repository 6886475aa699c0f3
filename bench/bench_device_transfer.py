"""How the committed kernel table transfers from the GPU it was fitted on to another one of its family, on kernels
both GPUs measured (the kernel sweep runs one list in one order on every GPU, so the same problems pair up).

For each (kind, dtype, layout) of the sweep records of `--to` (default h200-141gb), paired with `--from`'s records of
the same problem (op and shape, `MeasuredKernel.shape_key`; float32 GEMMs on TF32 kept apart):
- n: the paired problems;
- measured ratio: median of time on `--to` / time on `--from` (CUDA-graph replays, no launch);
- model ratio: the same median of the kernel model's predictions (the table's entry for each device, which the
  table's device families share: the ratio comes from the devices' peaks and bandwidths alone);
- MAPE and median APE of the model on `--to` (a transfer: `--to`'s records are in no fit) and on `--from` (in the
  fit where its records are), beside the roofline bound's on `--to`;
each on every paired problem ("all") and on those that took at least `--min-us` on `--from` (default 50 us: past
the fixed cost of a kernel, where a faster memory or more compute can show).

No GPU needed (the committed data). Usage: python bench/bench_device_transfer.py [--from h100-80gb] [--to h200-141gb]
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
    parser.add_argument("--from", dest="src", default="h100-80gb", help="the GPU the table was fitted on")
    parser.add_argument("--to", dest="dst", default="h200-141gb", help="the GPU it is transferred to")
    parser.add_argument("--min-us", type=float, default=50.0, help="the size line's floor, us on --from")
    parser.add_argument("--data", default=str(ROOT / "data"), help="folder holding <device>/kernels")
    args = parser.parse_args()

    from predictor.kernel_fit import Group, lookup_kind, read_sweep
    from predictor.kernel_model import load_params

    table = load_params()
    recs = {d: read_sweep(Path(args.data) / d / "kernels") for d in (args.src, args.dst)}

    def key(r) -> tuple:
        return lookup_kind(r), r.dtype, r.layout, r.measured_dtype, r.shape_key

    src = {key(r): r for r in recs[args.src]}
    cells: dict[tuple[str, str, str], list[tuple]] = defaultdict(list)
    for r in recs[args.dst]:
        if (k := key(r)) in src:
            cells[k[:3]].append((src[k], r))
    print(f"{len(recs[args.dst]):,} ok graph-timed records on {args.dst}, {sum(map(len, cells.values())):,} paired "
          f"with {args.src}'s; kernel table version {table.version}")  # fmt: skip
    print(
        f"\n| kind | dtype | layout | problems | n | measured {args.dst} / {args.src}, median | model ratio, median "
        f"| model on {args.dst}: MAPE / med % | model on {args.src}: MAPE / med % "
        f"| roofline on {args.dst}: MAPE / med % |"
    )
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    totals = defaultdict(list)
    for (kind, dtype, layout), pairs in sorted(cells.items()):
        a, b = Group.of([p[0] for p in pairs]), Group.of([p[1] for p in pairs])
        pa = a.predict(table.lookup(args.src, kind, dtype))
        pb = b.predict(table.lookup(args.dst, kind, dtype))
        large = a.latency >= args.min_us * 1e-6
        for name, sel in (("all", np.ones(len(pairs), dtype=bool)), (f">= {args.min_us:g} us", large)):
            if not sel.any():
                continue
            errs = {k: np.abs(v[sel] / y[sel] - 1) * 100 for k, v, y in
                    (("b", pb, b.latency), ("a", pa, a.latency), ("r", b.bound(), b.latency))}  # fmt: skip
            for k, v in errs.items():
                totals[(name, k)].append(v)
            cells_ = " | ".join(f"{v.mean():.1f} / {np.median(v):.1f}" for v in errs.values())
            print(
                f"| {kind} | {dtype} | {layout} | {name} | {int(sel.sum())} | "
                f"{np.median(b.latency[sel] / a.latency[sel]):.3f} | {np.median(pb[sel] / pa[sel]):.3f} | {cells_} |"
            )
    for name in ("all", f">= {args.min_us:g} us"):
        if (name, "b") in totals:
            errs = [np.concatenate(totals[(name, k)]) for k in "bar"]
            cells_ = " | ".join(f"{v.mean():.1f} / {np.median(v):.1f}" for v in errs)
            print(f"| every kind | | | {name} | {len(errs[0])} | | | {cells_} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
