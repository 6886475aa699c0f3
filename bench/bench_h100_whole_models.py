"""preflight's default prediction against every whole model this project measured on a GPU (its H100 by default),
one row each.

For each successful record of data/<device>/models (eager PyTorch, CUDA events around each forward, back to back,
the harness of `predictor.measure`), `analyzer.predict` of the same zoo spec, batch and dtype on that device with the
default predictor (the kernel model), and the comparison:

- latency: predicted vs the measured median (ms), the error in %, and whether the median lies in the predicted
  interval;
- power: predicted average board power vs the measured (energy / time over the timed loop, NVML), in %;
- memory: the predicted device memory (`memory_mib`, what nvidia-smi would count) vs the measured process total
  (`memory_mb.total`: NVML's process memory, CUDA context included), in %.

Then MAPE and median APE per dtype x batch and overall, and the same for the convolutional families only
(`CONV_FAMILIES`, rows "... conv"). No GPU needed (the committed data). The records are measured; the
predictions are made here, so the table changes when the cost model does.

Usage: python bench/bench_h100_whole_models.py [--device h100-80gb|h200-141gb] [--only-measured-on DEVICE] [--limit N]
       [--rows]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT / "data"
#: Zoo name prefixes of the convolutional families (a zoo spec's name before "?"; longest first where one prefixes
#: another): the rows "... conv" of the table.
CONV_FAMILIES = ("wide_resnet", "resnext", "resnet", "densenet", "efficientnet", "mobilenet_v2", "mobilenet_v3",
                 "mnasnet", "regnet", "googlenet", "squeezenet", "vgg", "alexnet", "shufflenet_v2", "convnext",
                 "randwire", "poolformer", "mobilevit", "levit")  # fmt: skip


def conv_family(zoo: str) -> str | None:
    """The convolutional family of a zoo spec ("resnet152?resolution=320" -> "resnet"), or None."""
    name = zoo.split("?", 1)[0]
    return next((f for f in CONV_FAMILIES if name.startswith(f)), None)


def measured(device: str) -> list[dict]:
    """The successful whole-model records of data/<device>/models, in file order."""
    recs = [json.loads(line) for path in sorted((DATA / device / "models").glob("*.jsonl")) for line in path.open()]
    return [r for r in recs if r.get("status") == "ok"]


def _ape(pred: float, meas: float) -> float:
    return abs(pred / meas - 1.0) * 100.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="h100-80gb", help="measured GPU: data/DEVICE/models (default: %(default)s)")
    parser.add_argument(
        "--only-measured-on", metavar="DEVICE", help="only the configs (spec, batch, dtype) DEVICE measured too"
    )
    parser.add_argument("--limit", type=int, default=0, help="only the first N records (0: all)")
    parser.add_argument("--rows", action="store_true", help="print every record's row")
    args = parser.parse_args()

    import warnings

    warnings.filterwarnings("ignore")
    from analyzer import predict

    recs = measured(args.device)
    if args.only_measured_on:
        both = {(r["zoo"], r["batch"], r["dtype"]) for r in measured(args.only_measured_on)}
        recs = [r for r in recs if (r["zoo"], r["batch"], r["dtype"]) in both]
    if args.limit:
        recs = recs[: args.limit]
    groups: dict[str, list[tuple[float, float, float, bool]]] = defaultdict(list)
    failed = []
    t0 = time.perf_counter()
    if args.rows:
        print(f"{'model':48s} {'dtype':8s} {'b':>4s} {'meas ms':>9s} {'pred ms':>9s} {'err %':>7s} in  "
              f"{'W err %':>7s} {'MiB err %':>9s}")  # fmt: skip
    for r in recs:
        try:
            p = predict(f"zoo:{r['zoo']}", batch=r["batch"], dtype=r["dtype"], device=args.device).prediction
        except Exception as exc:  # noqa: BLE001 (a zoo model that no longer builds: counted, not hidden)
            failed.append(f"{r['zoo']} b={r['batch']} {r['dtype']}: {type(exc).__name__}: {str(exc)[:80]}")
            continue
        meas = r["latency_ms"]["median"]
        lo, hi = p.latency_ms_interval
        lat = (p.latency_ms / meas - 1.0) * 100.0
        power = _ape(p.power_w, r["power_w"]) if r.get("power_w") else float("nan")
        total = (r.get("memory_mb") or {}).get("total")
        mem = _ape(p.memory_mib, total) if total else float("nan")
        inside = lo <= meas <= hi
        key = f"{r['dtype']} batch {r['batch']}"
        for k in (key, "all") if conv_family(r["zoo"]) is None else (key, "all", f"{key} conv", "all conv"):
            groups[k].append((abs(lat), power, mem, inside))
        if args.rows:
            print(f"{r['zoo'][:48]:48s} {r['dtype']:8s} {r['batch']:4d} {meas:9.3f} {p.latency_ms:9.3f} {lat:+7.1f} "
                  f"{'y' if inside else 'n'}   {power:7.1f} {mem:9.1f}")  # fmt: skip
    print(f"\n{len(recs)} measured configs, {len(recs) - len(failed)} predicted in {time.perf_counter() - t0:.0f} s")
    print("\n| configs | n | latency MAPE % | latency median APE % | in interval | power MAPE % | memory MAPE % |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for key in sorted(groups, key=lambda k: (k.startswith("all"), k)):
        a = np.array(groups[key], dtype=float)
        print(
            f"| {key} | {len(a)} | {a[:, 0].mean():.1f} | {np.median(a[:, 0]):.1f} | {a[:, 3].mean() * 100:.0f}% | "
            f"{np.nanmean(a[:, 1]):.1f} | {np.nanmean(a[:, 2]):.1f} |"
        )
    for line in failed:
        print("not predicted:", line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
