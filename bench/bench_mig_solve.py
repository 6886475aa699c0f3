"""The largest batch that fits each MIG profile (and the whole GPU): the solve over the symbolic analysis against
searching by analysing the model at each probed batch; prints one table.

In one warm process (a warm-up run of each path first), for each model on one device (default H100 80GB), each
case finding the largest batch for the 7 MIG profiles and the whole GPU:
  symbolic export  `load_symbolic(zoo:NAME)`: the one export + import + extraction the solve needs (paid once)
  solve            `solve_largest_batch`: the liveness peak as a max of polynomials of the batch
                   (`passes.symbolic.peak_law`) + the memory model, evaluated exactly at each probed batch;
                   exponential search then bisection
  probe points     the same search (`predictor.mig.largest_fitting_batch`), each probed batch a full analysis +
                   prediction of the graph evaluated from the symbolic export (`analyze_at` + `predict`: what the
                   report sweep's `_solve_device` does per probe)
  re-export scan   the same search, each probed batch the model exported at that batch, analysed and predicted
                   (`analyzer.api.predict(zoo:NAME, batch=b)`: what a user without a symbolic graph does);
                   only for the models of --scan-models (it is slow)
Every case's answers are compared with the solve's and must be identical. Times are the best of --repeat runs
(wall clock, `time.perf_counter`); "probes" counts the distinct batches evaluated.

Usage: python bench/bench_mig_solve.py [--models resnet18,resnet50,bert_base] [--scan-models resnet18]
       [--device h100-80gb] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_symbolic_sweep import best  # noqa: E402  (best of N wall times, one helper for both benches)


def search(memory_at, device) -> tuple[dict, int]:
    """({profile or None (whole GPU): largest batch}, distinct batches probed) with `memory_at(b)` -> upper MiB."""
    from analyzer.symbolic import SOLVE_MAX
    from predictor.mig import largest_fitting_batch

    cache: dict[int, float] = {}

    def need(b: int) -> float:
        if b not in cache:
            cache[b] = memory_at(b)
        return cache[b]

    limits = {p.name: p.memory_mib for p in device.mig} | {None: device.memory_mib}
    return {n: largest_fitting_batch(need, mib, 2, SOLVE_MAX)[0] for n, mib in limits.items()}, len(cache)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,resnet50,bert_base", help="zoo names, comma-separated")
    ap.add_argument("--scan-models", default="resnet18", help="the models that also get the re-export scan")
    ap.add_argument("--device", default="h100-80gb")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")

    from analyzer.api import predict as api_predict
    from analyzer.symbolic import analyze_at, load_symbolic, solve_largest_batch
    from predictor.devices import get_device
    from predictor.predict import predict

    device = get_device(args.device)
    scan = set(filter(None, args.scan_models.split(",")))
    rows = []
    for name in filter(None, args.models.split(",")):
        model = f"zoo:{name}"
        rep = api_predict(model, device=device.key)  # batch 1: the report `predict --largest-batch` starts from
        t_export, sm = best(lambda model=model: load_symbolic(model), args.repeat)

        def solve(sm=sm, rep=rep):
            lb = solve_largest_batch(sm, rep.prediction, rep.analysis, batch=1)
            return {**lb.per_profile, None: lb.full_gpu}, lb.evaluations

        def probe_points(sm=sm):
            return search(lambda b: predict(analyze_at(sm, b).analysis, device.key)[0].fit_mib, device)

        def rescan(model=model):
            def at(b: int) -> float:
                return api_predict(model, device=device.key, batch=b).prediction.fit_mib

            return search(at, device)

        solve(), probe_points()  # warm-up
        t_solve, (answers, n_solve) = best(solve, args.repeat)
        t_probe, (by_probe, n_probe) = best(probe_points, args.repeat)
        assert by_probe == answers, (name, by_probe, answers)
        t_scan, n_scan = None, None
        if name in scan:
            t_scan, (by_scan, n_scan) = best(rescan, 1)
            assert by_scan == answers, (name, by_scan, answers)
        rows.append((name, answers, t_export, t_solve, n_solve, t_probe, n_probe, t_scan, n_scan))

    n = len(device.mig)
    print(f"\nlargest batch that fits, {device.key}, {n} MIG profiles + the whole GPU (best of {args.repeat})")
    print(
        "| model | largest batch (MIG profiles, smallest first; whole GPU) | symbolic export (once) | solve "
        "| probe points | re-export scan |"
    )
    print("|---|---|---|---|---|---|")
    for name, answers, t_export, t_solve, n_solve, t_probe, n_probe, t_scan, n_scan in rows:
        ans = ", ".join(f"{v:,}" for k, v in answers.items() if k is not None) + f"; {answers[None]:,}"
        scan_txt = "-" if t_scan is None else f"{t_scan:.1f} s ({n_scan} exports, {t_scan / t_solve:,.0f}x)"
        print(
            f"| {name} | {ans} | {t_export:.2f} s | {t_solve * 1e3:.1f} ms ({n_solve} probes) | "
            f"{t_probe:.2f} s ({n_probe} probes, {t_probe / t_solve:,.0f}x) | {scan_txt} |"
        )


if __name__ == "__main__":
    main()
