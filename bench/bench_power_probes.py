"""Would the H100 power probes improve the power fit? (docs/power-and-memory.md, "The fitted figures against the H100
power probes").

    PYTHONPATH=. python bench/bench_power_probes.py

The power fit (`predictor.power_fit`) as committed, on the h100-80gb rows (ML.ENERGY and our H100 whole models with
kernel classes in data/h100-80gb/models-kernel-shares.json; records without are left out and counted), and four ways
of letting the probes of data/h100-80gb/power (`power_fit.probe_records`) into it:

- "probe rows": the launch, memory and compute probes as ten more fit rows (shares `power_fit.probe_shares`: launch
  all gap, memory s_memory 1, tensor-core products s_compute 1, float32 products their fraction of peak under
  `power.FP32_COMPUTE`), weighted like every row (relative error); never held out (the idle probe is no model state);
- "P_memory pinned": P_memory fixed at the memory probes' median of medians, the other figures fitted;
- "P_gap pinned": P_gap fixed at the launch probe's median, the other figures fitted;
- both pinned.

The rule, fixed before any of these was run: a variant is adopted only if the held-out power MAPE on our H100 whole
models (leave one family out) falls by at least 1.0 point and the held-out energy MAPE on ML.ENERGY h100-80gb (leave
one model out) rises by at most 0.5 point. Prints one row per variant: both held-out figures and the all-row
figures (W); then the memory probes' power against the fraction of peak bandwidth they reach (least-squares line).
About 10 s on a 2-core machine.
"""

from __future__ import annotations

import json

import numpy as np

from predictor import power_fit as pf
from predictor.devices import get_device
from predictor.power import FP32_COMPUTE

DEVICE = "h100-80gb"


def main() -> None:
    d = get_device(DEVICE)
    have = {c["id"] for c in json.loads(pf.H100_CLASSES.read_text())["rows"]}
    recs = [ln for ln in pf.H100_MODELS.read_text().splitlines() if ln.strip() and json.loads(ln)["status"] == "ok"]
    kept = [ln for ln in recs if json.loads(ln)["id"] in have]
    tmp = pf.ROOT / "build" / "bench_power_probes_models.jsonl"
    tmp.parent.mkdir(exist_ok=True)
    tmp.write_text("\n".join(kept) + "\n")
    rows = pf.diffusion_rows(pf.DATA / "mlenergy-diffusion-v2.jsonl") + pf.llm_rows(pf.DATA / "mlenergy-llm-v2.jsonl")
    rows = [r for r in rows if r.device == DEVICE] + pf.h100_model_rows(
        tmp, pf.H100_CLASSES, FP32_COMPUTE, pf.H100_SHARES
    )
    probes = pf.probe_records(pf.probe_dir(DEVICE))
    groups = pf.probe_groups(probes)
    extra = [
        pf.Row(DEVICE, "h100-probes", "probe", *pf.probe_shares(r, d)[:2], float(r["power_samples"]["median_w"]),
               r["workload"], pf.probe_shares(r, d)[2])
        for r in probes if pf.probe_class(r) != "idle"
    ]  # fmt: skip
    print(f"{DEVICE}: {len(kept)} of {len(recs)} whole-model records have kernel classes; {len(probes)} probes")
    print()
    print("| variant | held-out power MAPE, H100 whole models | held-out energy MAPE, ML.ENERGY h100 "
          "| P_gap / P_compute / P_memory / P_compute_fp32 (W, all rows) |")  # fmt: skip
    print("|---|---:|---:|---|")
    public = np.array([r.kind != "h100-model" for r in rows])
    meas = np.array([r.power_w for r in rows])
    variants = {
        "free fit (the form before 2026-11-27)": ([], {}),
        "probe rows": (extra, {}),
        f"P_memory pinned at {groups['memory'].median_w:.1f} W": ([], {2: groups["memory"].median_w}),
        f"P_memory and P_compute pinned ({groups['compute'].median_w:.1f} W; committed since 2026-11-27)": (
            [],
            {1: groups["compute"].median_w, 2: groups["memory"].median_w},
        ),
        f"P_gap pinned at {groups['launch'].median_w:.1f} W": ([], {0: groups["launch"].median_w}),
        "both pinned": ([], {0: groups["launch"].median_w, 2: groups["memory"].median_w}),
    }
    for name, (ex, pins) in variants.items():
        pred, _ = pf.evaluate(rows, d.tdp_w, True, pins, ex)
        coef = pf.fit(rows + ex, d.tdp_w, True, pins)
        print(
            f"| {name} | {pf._mape(pred[~public], meas[~public]):.2f}% | {pf._mape(pred[public], meas[public]):.2f}% "
            f"| {' / '.join(f'{c:.1f}' for c in coef)} |"
        )
    mem = [r for r in probes if r["class"] == "memory"]
    f = np.array([r["achieved_bytes_per_s"] / d.bandwidth for r in mem])
    w = np.array([r["power_samples"]["median_w"] for r in mem])
    slope, icpt = np.polyfit(f, w, 1)
    print()
    print(
        f"memory probes at {f.min():.1%}-{f.max():.1%} of peak bandwidth, {w.min():.1f}-{w.max():.1f} W: least-squares "
        f"line {icpt:.1f} W + {slope:.1f} W x (fraction of peak), {icpt + slope:.1f} W at peak"
    )


if __name__ == "__main__":
    main()
