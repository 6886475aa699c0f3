"""The asynchronous-issue rule for the whole-GPU eager latency, evaluated (not shipped): public A100 rows and MIG rows.

`KernelTimes.eager_ms` (shipped) sums max(execution, launch) per kernel; the candidate is
`predictor.mig.queued_s(max(compute_s, memory_s), launch_s)`, the kernels issued by a host running ahead of the GPU.
This bench prints, for both rules:

- the kernel-model column of the public A100 single-forward rows (`predictor.public_train.examples`, as
  `bench/bench_public_kernel_columns.py`): MAPE / median APE % and the median ratio predicted / measured per family;
- the MIG rows of `bench/bench_mig_latency.py`: `diff` (shipped) against `async+g` at h = g = 1 (preflight's own
  speeds) and with (h, g) fitted leave-one-architecture-out.

The H100 whole-model comparison is `bench/bench_h100_whole_models.py --rows` run as it is and with
`KernelTimes.eager_ms` replaced by the queued total (docs/kernel-model.md, "Asynchronous issue"). About 30 s here.

Usage: python bench/bench_async_issue.py
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_mig_latency as mig  # noqa: E402

from predictor import kernel_model  # noqa: E402
from predictor.mig import queued_s  # noqa: E402
from predictor.public_train import examples, load_graphs, training_rows  # noqa: E402

SHIPPED = kernel_model.KernelTimes.eager_ms
QUEUED = property(lambda self: queued_s(np.maximum(self.compute_s, self.memory_s), self.launch_s) * 1e3)


def public_table() -> None:
    rows, graphs, est = training_rows(), load_graphs(), {}
    try:
        for name, prop in (("before", SHIPPED), ("after", QUEUED)):
            kernel_model.KernelTimes.eager_ms = prop
            est[name] = [(e.row, e.view.estimate_ms) for e in examples(rows, graphs, kinds=())]
    finally:
        kernel_model.KernelTimes.eager_ms = SHIPPED
    keep = [i for i, (r, _) in enumerate(est["before"]) if r.single_forward and "a100" in r.device.lower()]
    fam = defaultdict(list)
    for i in keep:
        fam[est["before"][i][0].family].append(i)
    print(f"{len(keep)} public single-forward A100 rows, kernel-model column: per-kernel max (before), queued (after)")
    head = "| family | n | MAPE before | median before | km/meas before | MAPE after | median after | km/meas after |"
    print(head)
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for f, idx in [*sorted(fam.items()), ("all", keep)]:
        cells = []
        for name in ("before", "after"):
            ratio = np.array([est[name][i][1] / est[name][i][0].latency_ms for i in idx])
            ape = np.abs(ratio - 1) * 100
            cells += [f"{ape.mean():.2f}", f"{np.median(ape):.2f}", f"{np.median(ratio):.2f}"]
        print(f"| {f} | {len(idx)} | " + " | ".join(cells) + " |")


def mig_table() -> None:
    rows = mig.load_rows()
    times = mig.cost(rows)
    whole = {(r["model"], r["batch"], r["seq"], r["sweep"]): r["measured"] for r in rows if r["profile"] == mig.WHOLE}
    fams = sorted({r["family"] for r in rows})
    print(f"\n{len(rows)} MIG rows: latency MAPE / median / worst APE %, slowdown MAPE %")
    for model, fitted in (("diff", "diff+g"), ("async+g", "async+g")):
        fold = {f: mig.fit_hg(fitted, times, [r for r in rows if r["family"] != f]) for f in fams}
        runs = ((f"{model} h=g=1", model, lambda r: (1.0, 1.0)),
                (f"{fitted} (h, g) fitted", fitted, lambda r, fold=fold: fold[r["family"]]))  # fmt: skip
        for label, m, h_of in runs:
            errs = mig.errors(m, times, rows, h_of, whole)
            lat = np.array([e[1] for e in errs])
            slow = np.mean([e[2] for e in errs if e[2] is not None])
            print(f"{label:<26} {lat.mean():6.1f} {np.median(lat):6.1f} {lat.max():6.1f} {slow:6.1f}")


if __name__ == "__main__":
    public_table()
    mig_table()
