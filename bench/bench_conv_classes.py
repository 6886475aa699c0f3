"""The kernel model's error on the H100 sweep's convolutions, per convolution class and layout.

Reads the graph-timed convolution records of data/h100-80gb/kernels (`predictor.kernel_fit.read_sweep`: float32
records with cuDNN TF32 on or unset, float16; cuDNN-TF32-off ones left out) and prints, per dtype, class and layout,
the count, the MAPE and the median signed error (predicted / measured - 1, %) of the kernel model's execution time
(no launch: `kernel_fit.Group.predict`) with the committed table, and with a second table given by `--params`
(e.g. an earlier commit's: `git show REV:predictor/kernel_params.json > old.json`). Classes: transposed, conv1d,
conv3d, grouped (groups > 1, depthwise included), first (2-D, <= 4 input channels), pointwise (2-D 1x1), dense
(2-D k x k). Only contiguous records are fitted; channels_last ones are evaluated here.

Usage: python bench/bench_conv_classes.py [--params OTHER_TABLE.json]   (no GPU; a few seconds)
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def conv_class(params: dict) -> str:
    """The class of a sweep convolution (contract params: `c_in`, `groups`, `kernel`, `transposed`)."""
    kernel = params["kernel"]
    if params.get("transposed"):
        return "transposed"
    if len(kernel) != 2:
        return f"conv{len(kernel)}d"
    if params.get("groups", 1) > 1:
        return "grouped"
    if params["c_in"] <= 4:
        return "first"
    return "pointwise" if all(k == 1 for k in kernel) else "dense"


def _cells(err: dict[str, np.ndarray], idx: list[int]) -> str:
    """MAPE and median signed error (%) of each table's errors on the rows `idx`."""
    return " | ".join(f"{np.abs(e[idx]).mean() * 100:.1f} | {np.median(e[idx]) * 100:+.1f}" for e in err.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", help="a second parameter table to compare with the committed one")
    args = parser.parse_args()
    from predictor import kernel_fit as kf
    from predictor.kernel_model import load_params

    tables = {"committed": load_params()}
    if args.params:
        tables["--params"] = load_params(args.params)
    recs = [r for r in kf.read_sweep(ROOT / "data" / "h100-80gb" / "kernels") if r.kind == "conv"]
    head = " | ".join(f"{name} MAPE % | {name} median signed %" for name in tables)
    print(f"| dtype | class | layout | n | {head} |")
    print("|---|---|---|---:|" + "---:|---:|" * len(tables))
    for dtype in sorted({r.dtype for r in recs}):
        mine = [r for r in recs if r.dtype == dtype]
        group = kf.Group.of(mine)
        err = {
            name: group.predict(t.lookup("h100-80gb", "conv", dtype)) / group.latency - 1 for name, t in tables.items()
        }
        rows: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, r in enumerate(mine):
            rows[(conv_class(r.params), r.layout)].append(i)
        for (cls, layout), idx in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            print(f"| {dtype} | {cls} | {layout} | {len(idx)} | {_cells(err, idx)} |")
        for layout in ("contiguous", "channels_last"):
            idx = [i for i, r in enumerate(mine) if r.layout == layout]
            print(f"| {dtype} | all | {layout} | {len(idx)} | {_cells(err, idx)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
