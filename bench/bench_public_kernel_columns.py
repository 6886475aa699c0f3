"""The kernel-model and roofline columns of the public evaluation, without training (seconds, not minutes).

For every row of `predictor.public_train.training_rows()` (DLE A100 rows and MIGProfiler rows) this costs the row's
graph from `data/public-models/public-graphs.npz` with the kernel model exactly as `python -m
predictor.public_train evaluate` does (`examples`: the row's device, precision and harness terms) and prints, per
family and precision, the number of rows, the median ratio kernel model / measured and the MAPE / median APE of the
roofline bound and the kernel model, over every row and over the single-forward rows. `--rows FAMILY` prints that
family's rows one by one (source, batch, spec, device, measured ms, kernel-model ms, roofline ms). `--classes`
prints the A100 rows (DLE and MIGProfiler: every device key "a100-*") grouped by family x precision x batch x device:
rows, median measured ms, median kernel-model ms, their ratio, the group's MAPE, and the kernel-model time split
per kernel class (`CLASSES`: GEMM, conv, attention, elementwise/norm/copy, each the eager time of its kernels that run
above the launch floor, and the launch floor: every kernel's time where its launch floor is the larger), in ms,
with per family the class whose share of the estimate is largest.

`--hosts` prints the single-forward rows with the measuring host's dispatch factor (`--host-overhead`), held out by
family, each row's kernels costed on its device as the public evaluation costs them (a MIG slice's on the slice, the
plain eager sum; `predict` on a slice adds the queued difference of `predictor.mig.slice_latencies`, which
bench/bench_mig_latency.py evaluates with a fitted factor): per host (the MIGProfiler
machine; DLE's; each lease of this project's H100 machine, by the hour its records were timed), each family's
rows at the median of the factors `predictor.predict.solve_host_overhead` finds on the other families' rows of
that host where the host sets at least half the measured time; MAPE / median APE and rows off by more than 35%
at factor 1 and at that factor, per host, per GPU, and per family; then the same with DLE's rows grouped by NGC
container release.

Usage: python bench/bench_public_kernel_columns.py [--rows FAMILY] [--classes] [--hosts]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor.devices import get_device  # noqa: E402
from predictor.public_train import examples, graph_kernel_arrays, kernel_times, load_graphs, training_rows  # noqa: E402

#: Kernel classes of the `--classes` split: name -> the kernel kinds in it ("other": every kind not named).
CLASSES = {"gemm": ("gemm",), "conv": ("conv",), "attention": ("attention",), "other": ()}


def _ape(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(pred - meas) / meas * 100


def class_split(arrays, times) -> dict[str, float]:
    """The eager time (`KernelTimes.eager_s`) of one graph split into `CLASSES` and "floor", milliseconds.

    A kernel whose launch floor is at least its execution counts under "floor", every other under its class.
    `arrays`: the graph's `KernelArrays` (N kernels), `times`: its `KernelTimes` ((N,) each)."""
    eager = times.eager_s
    at_floor = times.launch_s >= np.maximum(times.compute_s, times.memory_s)
    named = {k for ks in CLASSES.values() for k in ks}
    out = {"floor": float(eager[at_floor].sum() * 1e3)}
    for name, kinds in CLASSES.items():
        mask = ~np.isin(arrays.kind, list(named)) if not kinds else np.isin(arrays.kind, list(kinds))
        out[name] = float(eager[mask & ~at_floor].sum() * 1e3)
    return out


def print_classes(exs: list, graphs: dict) -> None:
    """The `--classes` table (module docstring) of the A100 examples among `exs`."""
    a100 = [e for e in exs if e.row.device.startswith("a100")]
    split: dict[tuple, dict[str, float]] = {}
    groups: dict[tuple, list] = {}
    for e in a100:
        r = e.row
        key = (e.gid, r.device, r.precision == "tf32")
        if key not in split:
            arrays = graph_kernel_arrays(graphs[e.gid])
            split[key] = class_split(arrays, kernel_times(arrays, get_device(r.device), r.precision == "tf32"))
        groups.setdefault((r.family, r.precision, r.batch, r.device), []).append((e, split[key]))
    names = (*CLASSES, "floor")
    head = f"{'family':<11} {'prec':<8} {'batch':>6} {'device':<19} {'n':>3} {'meas ms':>9} {'km ms':>9} {'km/m':>5}"
    print(f"\nA100 rows by family x precision x batch x device (medians; km split in ms)\n{head} {'APE%':>5}  "
          + " ".join(f"{n:>9}" for n in names))  # fmt: skip
    fam_share: dict[str, dict[str, float]] = {}
    fam_ape: dict[str, list[float]] = {}
    for (fam, prec, batch, dev), es in sorted(groups.items()):
        meas = np.array([e.row.latency_ms for e, _ in es])
        km = np.array([e.view.estimate_ms for e, _ in es])
        ape = _ape(km, meas)
        parts = {n: float(np.median([s[n] for _, s in es])) for n in names}
        for n in names:
            fam_share.setdefault(fam, dict.fromkeys(names, 0.0))[n] += sum(s[n] for _, s in es)
        fam_ape.setdefault(fam, []).extend(ape.tolist())
        print(
            f"{fam:<11} {prec:<8} {batch:>6} {dev:<19} {len(es):>3} {np.median(meas):>9.3f} {np.median(km):>9.3f}"
            f" {np.median(km / meas):>5.2f} {ape.mean():>5.1f}  " + " ".join(f"{parts[n]:>9.3f}" for n in names)
        )
    print(f"\n{'family':<11} {'rows':>4} {'MAPE':>6} {'median':>6} {'>35%':>4}  share of the estimate per class (%)")
    for fam, tot in sorted(fam_share.items()):
        s = sum(tot.values()) or 1.0
        a = np.array(fam_ape[fam])
        print(f"{fam:<11} {len(a):>4} {a.mean():>6.1f} {np.median(a):>6.1f} {(a > 35).sum():>4}  "
              + " ".join(f"{n} {100 * tot[n] / s:>5.1f}" for n in names))  # fmt: skip
    a = np.concatenate([np.array(v) for v in fam_ape.values()])
    print(f"{'all':<11} {len(a):>4} {a.mean():>6.1f} {np.median(a):>6.1f} {(a > 35).sum():>4}")


def host_of(row, records: dict, by_container: bool = False) -> str:
    """The machine that timed `row`: the MIGProfiler host, DLE's (`by_container`: per NGC container release), or
    this project's H100 host of one lease (the hour its record was timed in: each lease is another machine);
    `records` caches the files read ({file: [record per line]})."""
    src = row.source.split(":")
    if src[0] == "dle" and by_container:  # the NGC container release its README row names
        if "dle" not in records:
            with open(ROOT / "data" / "public-models" / "dle-a100.jsonl", encoding="utf-8") as f:
                records["dle"] = [json.loads(line) for line in f]
        found = re.search(r"container (\d\d\.\d\d)", records["dle"][int(src[1])]["notes"])
        return "DLE container " + (found.group(1) if found else "not stated")
    if src[0] != "h100":
        return {"mig": "MIGProfiler", "dle": "DLE"}.get(src[0], src[0])
    if src[1] not in records:
        with open(ROOT / "data" / "h100-80gb" / "models" / src[1], encoding="utf-8") as f:
            records[src[1]] = [json.loads(line) for line in f]
    return "H100 lease " + records[src[1]][int(src[2])]["env"]["timestamp"][:13]


def print_hosts(exs: list, graphs: dict, by_container: bool = False) -> None:
    """The `--hosts` table (module docstring) over the single-forward rows of `exs`; `by_container`: DLE's rows
    grouped by container release instead of as one host."""
    from predictor.predict import host_times, solve_host_overhead

    records: dict = {}
    costed: dict[tuple, object] = {}
    rows = []  # (host, family, row, times, harness ms, fitted factor or None)
    for e in exs:
        r = e.row
        if not r.single_forward:
            continue
        key = (e.gid, r.device, r.precision == "tf32")
        if key not in costed:
            costed[key] = kernel_times(graph_kernel_arrays(graphs[e.gid]), get_device(r.device), key[2])
        times = costed[key]
        extra = e.view.estimate_ms - times.eager_ms  # the harness terms (host-to-device copy) on top of the kernels
        try:
            fit = solve_host_overhead(times, r.latency_ms - extra)
            h = fit.host_overhead if fit.determined else None
        except ValueError:  # faster than the kernels' execution alone: says nothing of the host
            h = None
        rows.append((host_of(r, records, by_container), r.family, r, times, extra, h))
    out = []  # (host, family, row, before ms, after ms, factor used)
    folds: dict[str, list[float]] = {}
    for host in sorted({x[0] for x in rows}):
        mine = [x for x in rows if x[0] == host]
        for fam in sorted({x[1] for x in mine}):
            others = [x[5] for x in mine if x[1] != fam and x[5] is not None]
            h = float(np.median(others)) if others else 1.0
            folds.setdefault(host, []).append(h)
            for _, _, r, times, extra, _ in (x for x in mine if x[1] == fam):
                out.append((host, fam, r, times.eager_ms + extra, host_times(times, h).eager_ms + extra, h))
    print("\nThe measuring host's dispatch factor, calibrated leave-one-family-out (per host: the median of the")
    print("factors `calibrate-host` finds on the other families' host-bound rows, host share >= 50%); single-forward")
    print("rows, kernel model at factor 1 -> at the held-out calibration; MAPE / median APE %, rows off by > 35%")
    print(f"{'host':<27} {'factor (folds)':>15} {'rows':>5} {'factor 1':>20} {'calibrated':>20}")

    def line(label: str, sel: list, factors: str = "") -> None:
        if not sel:
            return
        meas = np.array([x[2].latency_ms for x in sel])
        a, b = _ape(np.array([x[3] for x in sel]), meas), _ape(np.array([x[4] for x in sel]), meas)
        print(
            f"{label:<27} {factors:>15} {len(sel):>5} {a.mean():>6.1f} / {np.median(a):>5.1f} {(a > 35).sum():>4}"
            f" {b.mean():>6.1f} / {np.median(b):>5.1f} {(b > 35).sum():>4}"
        )

    for host, hs in folds.items():
        line(host, [x for x in out if x[0] == host], f"{min(hs):.2f}-{max(hs):.2f}")
    for gpu in ("a100", "h100"):
        sel = [x for x in out if x[2].device.startswith(gpu)]
        line(f"all {gpu.upper()}", sel)
        line(f"all {gpu.upper()}, not fp32", [x for x in sel if x[2].precision != "fp32"])
    if not by_container:  # DLE's families ran their own scripts in five container releases: no one host to calibrate
        sel = [(*x[:4], x[3], 1.0) if x[0] == "DLE" else x for x in out if x[2].device.startswith("a100")]
        line("all A100, DLE at factor 1", sel)
    print(f"\n{'family / host':<40} {'rows':>4} {'factor':>6} {'factor 1':>14} {'calibrated':>14}")
    for host, fam in sorted({(x[0], x[1]) for x in out}):
        sel = [x for x in out if x[0] == host and x[1] == fam]
        meas = np.array([x[2].latency_ms for x in sel])
        a, b = _ape(np.array([x[3] for x in sel]), meas), _ape(np.array([x[4] for x in sel]), meas)
        print(
            f"{fam + ' / ' + host:<40} {len(sel):>4} {sel[0][5]:>6.2f} {a.mean():>6.1f} / {np.median(a):>5.1f}"
            f" {b.mean():>6.1f} / {np.median(b):>5.1f}"
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=None, help="print the rows of this family")
    ap.add_argument("--classes", action="store_true", help="the A100 rows' kernel-model split per kernel class")
    ap.add_argument("--hosts", action="store_true", help="with each measuring host's factor, held out by family")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    rows = training_rows()
    graphs = load_graphs()
    exs = examples(rows, graphs, kinds=())
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
    if args.classes:
        print_classes([e for e in exs if e.row.single_forward], graphs)
    if args.hosts:
        print_hosts(exs, graphs)
        print_hosts(exs, graphs, by_container=True)


if __name__ == "__main__":
    main()
