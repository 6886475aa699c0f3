"""The whole GPU's eager estimate two ways, against every single-forward whole-model row preflight trains on.

`eager`: what preflight states, the per-kernel sum of max(execution, launch) (`KernelTimes.eager_ms`). `queued`:
the same kernels issued asynchronously by a host that spends each kernel's launch time issuing it and runs ahead
of the GPU (`predictor.mig.queued_s`, the rule MIG slices already use for the slice-minus-whole difference):
a long kernel lets the host queue the short ones after it, so queued <= eager. docs/devices.md ("MIG slice
latency") found `queued` better for the MIGProfiler slowdowns and left its adoption for the whole GPU to this
check. Both add the row's modelled harness terms (the host-to-device copy where the loop holds one) alike.

Rows: `predictor.public_train.training_rows` with `single_forward` (public DLE A100 rows, the MIGProfiler rows on
A100 MIG slices, this project's own H100 rows), kernels from the graph file `data/public-models/public-graphs.npz`
(no TVM; about 2 s). Per family and GPU: MAPE and median APE (%), and the median of estimate / measured.

Usage: python bench/bench_queued_whole_gpu.py
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor import public_train as pt  # noqa: E402
from predictor.devices import get_device  # noqa: E402
from predictor.mig import queued_s  # noqa: E402


def estimates(rows, graphs) -> dict[tuple[str, str], np.ndarray]:
    """{(GPU group, family): (n, 3) array of measured, eager and queued ms} over the single-forward rows."""
    cache: dict[tuple, tuple[float, float]] = {}
    out: dict[tuple[str, str], list] = defaultdict(list)
    for r in rows:
        if not r.single_forward:
            continue
        gid = pt.graph_id(*r.config)
        g, h2d = graphs[gid], bool(r.harness.get("h2d"))
        key = (gid, r.device, r.precision == "tf32", h2d)
        if key not in cache:
            t = pt.kernel_times(pt.graph_kernel_arrays(g), get_device(r.device), r.precision == "tf32")
            view = pt.view_of_times(g, t, g.input_bytes / (pt.PCIE_GBS * 1e9) * 1e3 if h2d else 0.0)
            harness = view.estimate_ms - t.eager_ms  # the modelled harness terms, the same under both rules
            queued = queued_s(np.maximum(t.compute_s, t.memory_s), t.launch_s) * 1e3 + harness
            cache[key] = (view.estimate_ms, queued)
        group = pt.device_group(r.device) + (" MIG" if get_device(r.device).parent else "")
        out[(group, r.family)].append((r.latency_ms, *cache[key]))
    return {k: np.array(v) for k, v in out.items()}


def line(group: str, family: str, a: np.ndarray) -> str:
    cells = []
    for col in (1, 2):
        ratio = a[:, col] / a[:, 0]
        ape = np.abs(ratio - 1) * 100
        cells.append(f"{ape.mean():7.1f} {np.median(ape):6.1f} {np.median(ratio):6.2f}")
    return f"{group:9} {family:14} {len(a):4d}   {cells[0]}   {cells[1]}"


def main() -> None:
    table = estimates(pt.training_rows(), pt.load_graphs())
    print(f"{'GPU':9} {'family':14} {'rows':>4}   {'eager: MAPE  median  est/meas':>29}   "
          f"{'queued: MAPE  median  est/meas':>30}")  # fmt: skip
    for (group, family), a in sorted(table.items()):
        print(line(group, family, a))
    print()
    groups = sorted({g for g, _ in table})
    for group in groups:
        print(line(group, "all", np.concatenate([a for (g, _), a in table.items() if g == group])))
    print(line("all", "all", np.concatenate(list(table.values()))))
    better = sum(
        np.mean(np.abs(a[:, 2] / a[:, 0] - 1)) < np.mean(np.abs(a[:, 1] / a[:, 0] - 1)) for a in table.values()
    )
    print(f"\nqueued has the lower MAPE on {better} of {len(table)} (GPU, family) cells")


if __name__ == "__main__":
    main()
