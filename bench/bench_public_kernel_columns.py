"""The kernel-model and roofline columns of the public evaluation, without training (seconds, not minutes).

For every row of `predictor.public_train.training_rows()` (DLE A100 rows and MIGProfiler rows) this costs the row's
graph from `data/public-models/public-graphs.npz` with the kernel model exactly as `python -m
predictor.public_train evaluate` does (`examples`: the row's device, precision and harness terms) and prints, per
family and precision, the number of rows, the median ratio kernel model / measured and the MAPE / median APE of the
roofline bound and the kernel model, over every row and over the single-forward rows. `--rows FAMILY` prints that
family's rows one by one (source, batch, spec, device, measured ms, kernel-model ms, roofline ms).

Usage: python bench/bench_public_kernel_columns.py [--rows FAMILY]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor.public_train import examples, load_graphs, training_rows  # noqa: E402


def _ape(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(pred - meas) / meas * 100


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=None, help="print the rows of this family")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    rows = training_rows()
    exs = examples(rows, load_graphs(), kinds=())
    print(f"{len(exs)} rows costed in {time.perf_counter() - t:.1f} s\n")
    groups: dict[tuple[str, str, bool], list] = {}
    for e in exs:
        groups.setdefault((e.row.family, "all", False), []).append(e)
        groups.setdefault((e.row.family, e.row.precision, False), []).append(e)
        if e.row.single_forward:
            groups.setdefault((e.row.family, "all", True), []).append(e)
    print(
        f"{'family':<22} {'precision':<9} {'set':<6} {'rows':>4} {'km/meas':>8} {'roofline':>15} {'kernel model':>15}"
    )
    for (fam, prec, single), es in sorted(groups.items()):
        meas = np.array([e.row.latency_ms for e in es])
        km = np.array([e.view.estimate_ms for e in es])
        rf = np.array([e.view.bound_ms for e in es])
        a, b = _ape(rf, meas), _ape(km, meas)
        print(
            f"{fam:<22} {prec:<9} {'single' if single else 'every':<6} {len(es):>4} {np.median(km / meas):>8.2f}"
            f" {a.mean():>6.1f} / {np.median(a):>6.1f} {b.mean():>6.1f} / {np.median(b):>6.1f}"
        )
    if args.rows:
        head = f"{'source':<10} {'batch':>6} {'precision':<9} {'device':<18} {'meas ms':>9} {'km ms':>9} {'roof ms':>9}"
        print(f"\n{head}  spec")
        for e in exs:
            if e.row.family == args.rows:
                r = e.row
                print(
                    f"{r.source:<10} {r.batch:>6} {r.precision:<9} {r.device:<18} {r.latency_ms:>9.3f}"
                    f" {e.view.estimate_ms:>9.3f} {e.view.bound_ms:>9.3f}  {r.spec}"
                )


if __name__ == "__main__":
    main()
