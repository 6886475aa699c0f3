"""Symbolic batch benchmark: an 8-point batch sweep from one symbolic export against the sweep that exports the
model again at every batch, beside one analysis of the same model; prints one table.

In one warm process (imports and first-call costs paid by a warm-up run of each path first), for each model:
  one analysis   `analyze_model(zoo:NAME, batch=1)` + one prediction (what `preflight predict` does)
  sweep, before  `run_sweep(..., symbolic=False)`: batches 1, 2, 4, ..., 128, each exported and imported again
  sweep, after   `run_sweep(..., solve=False)`: batch 1 exported on its own, 2..128 evaluated from one symbolic
                 export
  + solve        `run_sweep(...)`: the same, and the largest batch fitting each MIG profile solved exactly
  formulas       `formulas(load_symbolic(...))`: the export and the fits of every per-op count (8 sample points)
Each timing is the best of --repeat runs (wall clock, `time.perf_counter`). The two sweeps' points are compared
and must be identical.

Usage: python bench/bench_symbolic_sweep.py [--models resnet18,bert_tiny] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]
DEVICES = ["h100-80gb"]


def best(fn, repeat: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,bert_tiny", help="zoo names, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from analyzer.pipeline import analyze_model
    from analyzer.sweep import run_sweep
    from analyzer.symbolic import formulas, load_symbolic
    from predictor.predict import predict

    def one(model):
        rep = analyze_model(model, batch=1)
        return predict(rep.analysis, DEVICES[0])

    def sweep(model, symbolic, solve=False):
        return run_sweep(
            model, None, inputs=None, batches=BATCHES, devices=DEVICES, latency_slo_ms=None, strict=False,
            symbolic=symbolic, solve=solve,
        )  # fmt: skip

    rows = []
    for name in args.models.split(","):
        model = f"zoo:{name}"
        one(model), sweep(model, True), sweep(model, False)  # warm-up: imports, first-call costs
        t_one, _ = best(lambda: one(model), args.repeat)  # noqa: B023
        t_old, (old, _) = best(lambda: sweep(model, False), args.repeat)  # noqa: B023
        t_new, (new, _) = best(lambda: sweep(model, True), args.repeat)  # noqa: B023
        t_solve, _ = best(lambda: sweep(model, True, True), args.repeat)  # noqa: B023
        t_fit, _ = best(lambda: formulas(load_symbolic(model)), args.repeat)  # noqa: B023
        same = old["devices"] == new["devices"] and old["batches"] == new["batches"]
        rows.append((name, t_one, t_old, t_new, t_solve, t_fit, same))

    print(f"{len(BATCHES)}-point batch sweep ({', '.join(map(str, BATCHES))}), one device; best of {args.repeat}")
    head = ("model", "one analysis s", "sweep before s", "x one", "sweep after s", "x one", "+ solve s", "x one")
    print(" | ".join((*head, "formulas s", "same points")))
    for name, t_one, t_old, t_new, t_solve, t_fit, same in rows:
        print(
            f"{name} | {t_one:.2f} | {t_old:.2f} | {t_old / t_one:.1f}x | {t_new:.2f} | {t_new / t_one:.1f}x | "
            f"{t_solve:.2f} | {t_solve / t_one:.1f}x | {t_fit:.2f} | {'yes' if same else 'NO'}"
        )


if __name__ == "__main__":
    main()
