"""The kernel model's error on the H100 sweep's convolutions, per convolution class and layout.

Reads the graph-timed convolution records of data/h100-80gb/kernels (`predictor.kernel_fit.read_sweep`: float32
records with cuDNN TF32 on or unset, float16; cuDNN-TF32-off ones left out) and prints, per dtype, class and layout,
the count, the MAPE and the median signed error (predicted / measured - 1, %) of the kernel model's execution time
(no launch: `kernel_fit.Group.predict`) with the committed table, and with a second table given by `--params`
(e.g. an earlier commit's: `git show REV:predictor/kernel_params.json > old.json`). Classes: transposed, conv1d,
conv3d, grouped (groups > 1, depthwise included), first (2-D, <= 4 input channels), pointwise (2-D 1x1), dense
(2-D k x k). Only contiguous records are fitted; channels_last ones are evaluated here.

`--transfer` prints instead what carries the A100's convolutions (no A100 convolution is measured; the ampere conv
entries are the hopper fits, transferred: docs/kernel-model.md, "A100 float16 and TF32 rows per kernel class"): per
dtype, over the contiguous sweep convolutions, the median of measured / the hopper GEMM entry's execution time of
the same implicit GEMM (float16: the float16 GEMM entry; float32: the tf32 one), over all and over those >= 50 us;
and on the a100-80gb the median and MAPE of (the committed ampere conv entry's time) / (the ampere GEMM entry's
time of the implicit GEMM x that H100 ratio, kernel by kernel), i.e. the transfer against the ratio alternative.

`--l2` compares instead the L2 study's records (`python -m predictor.measure.lease --step kernels-l2`: the same
convolutions timed again with the L2 cache overwritten before every replay, data/h100-80gb/kernels-l2flush) with
their warm-L2 twins (same op, shape, dtype and layout): per dtype, class and layout, the pairs, the median of flushed
/ warm time, and the committed kernel model's median signed error against each.

Usage: python bench/bench_conv_classes.py [--params OTHER_TABLE.json] [--transfer] [--l2]   (no GPU; a few seconds)
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor.measure.kernels import conv_class  # noqa: E402


def params_class(params: dict) -> str:
    """`kernels.conv_class` of a fit record's convolution (contract params: c_in, groups, kernel, transposed)."""
    return conv_class(params["c_in"], params.get("groups", 1), params["kernel"], bool(params.get("transposed")))


def _cells(err: dict[str, np.ndarray], idx: list[int]) -> str:
    """MAPE and median signed error (%) of each table's errors on the rows `idx`."""
    return " | ".join(f"{np.abs(e[idx]).mean() * 100:.1f} | {np.median(e[idx]) * 100:+.1f}" for e in err.values())


def l2_check(table, recs: list) -> None:
    """The `--l2` table (module docstring): the L2-flushed convolution records against their warm twins in `recs`."""
    from predictor import kernel_fit as kf

    folder = ROOT / "data" / "h100-80gb" / "kernels-l2flush"
    flushed = [r for r in kf.read_sweep(folder) if r.kind == "conv"] if folder.exists() else []
    if not flushed:
        print(f"no L2-flushed convolution records in {folder.relative_to(ROOT)} yet (a GPU lease's kernels-l2 step)")
        return
    warm = {(r.shape_key, r.dtype, r.layout): r for r in recs}
    pairs = [(warm[k], r) for r in flushed if (k := (r.shape_key, r.dtype, r.layout)) in warm]
    print("| dtype | class | layout | pairs | flushed / warm, median | model vs warm, median signed % | model vs "
          "flushed, median signed % |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|")
    cells: dict[tuple[str, str, str], list[tuple]] = defaultdict(list)
    for w, f in pairs:
        cells[(w.dtype, params_class(w.params), w.layout)].append((w, f))
    for (dtype, cls, layout), rows in sorted(cells.items()):
        model = kf.Group.of([w for w, _ in rows]).predict(table.lookup("h100-80gb", "conv", dtype))
        w_s = np.array([w.latency_s for w, _ in rows])
        f_s = np.array([f.latency_s for _, f in rows])
        print(f"| {dtype} | {cls} | {layout} | {len(rows)} | {np.median(f_s / w_s):.2f} | "
              f"{np.median(model / w_s - 1) * 100:+.1f} | {np.median(model / f_s - 1) * 100:+.1f} |")  # fmt: skip


def transfer_check(table, recs: list) -> None:
    """The `--transfer` table (module docstring) for the committed `table` and the sweep convolution `recs`."""
    from dataclasses import replace

    from predictor.devices import get_device
    from predictor.kernel_model import ParamTable, kernel_arrays, kernel_latency_arrays

    def execution(arrays, device: str, family: str, dtype: str, entry) -> np.ndarray:
        t = replace(table, entries={**table.entries, (family, "conv", dtype): entry})
        assert isinstance(t, ParamTable)
        times = kernel_latency_arrays(arrays, get_device(device), params=t)
        return np.maximum(times.compute_s, times.memory_s)

    print("| dtype | n (>= 50 us) | H100 measured / GEMM entry, median (>= 50 us) "
          "| A100 transfer / ratio, median (>= 50 us) | MAPE between them % (>= 50 us) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for dtype, gemm in (("float16", "float16"), ("float32", "tf32")):
        mine = [r for r in recs if r.dtype == dtype and r.layout == "contiguous"]
        arrays = kernel_arrays(mine)
        measured = np.array([r.latency_s for r in mine])
        big = measured >= 50e-6
        ratio = measured / execution(arrays, "h100-80gb", "hopper", dtype, table.lookup("h100-80gb", "gemm", gemm))
        pseudo = execution(arrays, "a100-80gb", "ampere", dtype, table.lookup("a100-80gb", "gemm", gemm)) * ratio
        q = execution(arrays, "a100-80gb", "ampere", dtype, table.lookup("a100-80gb", "conv", dtype)) / pseudo
        print(
            f"| {dtype} | {len(mine)} ({big.sum()}) | {np.median(ratio):.2f} ({np.median(ratio[big]):.2f}) "
            f"| {np.median(q):.3f} ({np.median(q[big]):.3f}) | {np.abs(q - 1).mean() * 100:.1f} "
            f"({np.abs(q[big] - 1).mean() * 100:.1f}) |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", help="a second parameter table to compare with the committed one")
    parser.add_argument("--transfer", action="store_true", help="the A100 convolution transfer check (docstring)")
    parser.add_argument("--l2", action="store_true", help="the L2 study: flushed against warm timings (docstring)")
    args = parser.parse_args()
    from predictor import kernel_fit as kf
    from predictor.kernel_model import load_params

    tables = {"committed": load_params()}
    if args.params:
        tables["--params"] = load_params(args.params)
    recs = [r for r in kf.read_sweep(ROOT / "data" / "h100-80gb" / "kernels") if r.kind == "conv"]
    if args.transfer:
        transfer_check(tables["committed"], recs)
        return 0
    if args.l2:
        l2_check(tables["committed"], recs)
        return 0
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
            rows[(params_class(r.params), r.layout)].append(i)
        for (cls, layout), idx in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            print(f"| {dtype} | {cls} | {layout} | {len(idx)} | {_cells(err, idx)} |")
        for layout in ("contiguous", "channels_last"):
            idx = [i for i, r in enumerate(mine) if r.layout == layout]
            print(f"| {dtype} | all | {layout} | {len(idx)} | {_cells(err, idx)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
