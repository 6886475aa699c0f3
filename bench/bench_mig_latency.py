"""preflight's per-MIG-slice latency against the MIGProfiler measurements (data/public-models/mig-a100-40gb.jsonl).

224 rows: four sentence-transformer encoders on the 1g.5gb, 2g.10gb, 3g.20gb and 7g.40gb slices of an A100-SXM4-40GB,
float32 eager with TF32 matmuls (`predictor.public_train.MIG_PRECISION`), CUDA events around `AutoModel(input_ids)`
on a GPU-resident batch (no tokenisation, no host-to-device copy in the timed loop: docs/public-data.md), batch
1-256 at 64 tokens (`bsz` sweep) and 32-512 tokens at batch 32 (`seq` sweep; batch 32 x 64 tokens is in both).

Each configuration's kernels come from the graph cache `data/public-models/public-graphs.npz` (the 39 MIG graphs
that `python -m analyzer.public_dataset` featurised: 3 architectures x 13 points; distiluse v1 and v2 share one
graph); nothing here imports TVM. Every kernel is costed with `kernel_latency_arrays(arrays, a100, profile,
tf32_matmul=True)`: the slice's share of SMs (profile SMs / 108) and memory bandwidth (memory slices / 8).

Four slice models, each giving a latency per row and a slowdown against 7g.40gb (predicted ratio slice / 7g.40gb
against the measured ratio of the same encoder, batch and sequence):
- `kernel`: the kernel model as it ran before this bench (each kernel max(execution, launch), summed: `eager_ms`)
  with the kernel model's own launch floor (this workplace's host).
- `+host`: the same with the measuring host's dispatch: every launch time x `h`, the one constant of the
  MIGProfiler host (torch of 2022, transformers 4.21: its Python dispatch per op was slower), fitted
  leave-one-architecture-out: for each of MiniLM (BERT), mpnet (XLM-R) and distiluse v1+v2 (DistilBERT, one
  architecture, held out together) `h` minimises the latency MAPE of the other architectures' rows on every
  slice over a grid 1.00, 1.05, ..., 4.00, and that fold's `h` predicts the held-out rows.
- `ratio`: the kernels issued asynchronously (`predictor.mig.queued_s`: a long kernel lets the host run ahead)
  with the same fitted `h`, the slice's latency the 7g.40gb estimate (`eager_ms`) times the queued ratio slice /
  7g.40gb (the rule preflight shipped before the difference; kept here for the comparison).
- `diff`: THE RULE PREFLIGHT SHIPS, `predictor.mig.slice_latencies` itself with the same fitted `h`: the 7g.40gb
  estimate plus the queued difference, 1000 x (queued(slice) - queued(7g.40gb)).
- `diff+g`: the same rule with the measuring stack's kernel speed as well: every kernel's execution x `g`
  (`slice_latencies(..., exec_scale=g)`, and in the 7g.40gb estimate), `h` and `g` fitted together
  leave-one-architecture-out (coordinate descent over the `h` grid and a `g` grid 0.80, 0.82, ..., 1.40, from g = 1;
  each fold's pair predicts only the held-out architecture). `g` is the GPU-side twin of `h`: the 2022 stack
  (torch 1.12's cuBLAS TF32 kernels) against the kernel model's fitted efficiencies.
- `async+g`: NOT SHIPPED, the evidence for a kernel-model change: as `diff+g`, but the whole GPU's estimate is the
  kernels issued asynchronously too (`queued_s` on 7g.40gb instead of the per-kernel sum of max(execution,
  launch)), so a slice's latency is its own queued time; `h` and `g` fitted the same way.

Then `+host`, `ratio` and `diff` at one `h` for every row, unfitted (h = 1: what preflight predicts, its own launch
floor), the choice: `kernel`, `ratio` and `diff` at h = 1 and at the fitted `h`, and the issue's bar (latency within
15%, slowdown within 8%) per slice at preflight's own speeds (h = g = 1), with `h` fitted and with `h` and `g` fitted.

Then the user-facing setting: `h` fitted on all 224 rows (the same grid, the shipped rule), and the latency and
slowdown MAPE at it, which is what `preflight predict MODEL --device a100-40gb:PROFILE --matmul-precision high
--host-overhead H` states for these rows; checked through the product's own path (`analyzer.api.analyze` of the
zoo encoder, then `analyzer.pipeline.predict_all`, what `preflight predict` and `report` run, on every slice with
`host_overhead=H`, the kernel-model estimate: `PREFLIGHT_PREDICTOR=kernel`) on `--product N` configurations (those
nearest batch 32 x 64 tokens; default 1, 0 skips it: each is one TVM analysis, about a minute here), each slice's
latency equal to the bench's `diff` at the same `h` (to 1e-9).

Last, the issue's memory line on the same rows' framebuffer readings (`predictor.memory_fit`): what grows with the
batch and the sequence (least-squares slope in MiB per sample, and the increments between consecutive points, so the
fixed part cancels) predicted against measured per encoder and slice, the fixed part at batch 1 term by term, and
the fixed part per runtime with its source (`--no-memory` skips it).

Usage: python bench/bench_mig_latency.py [--rows] [--no-memory] [--product N]
       (about 10 s here without the product check; --rows prints every row)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor.devices import get_device  # noqa: E402
from predictor.kernel_model import kernel_latency_arrays  # noqa: E402
from predictor.mig import queued_s, slice_latencies  # noqa: E402
from predictor.public_train import MIG_PATH, graph_id, graph_kernel_arrays, load_graphs, mig_rows  # noqa: E402

WHOLE = "7g.40gb"  # the reference of the measured slowdown: the largest slice the rows ran on
GRID = np.round(np.arange(1.0, 4.0001, 0.05), 2)  # the host's dispatch factor h
G_GRID = np.round(np.arange(0.8, 1.4001, 0.02), 2)  # the measuring stack's kernel-execution factor g
MODELS = ("kernel", "+host", "ratio", "diff", "diff+g", "async+g")
FITTED_HG = ("diff+g", "async+g")  # h and g fitted together
SHIPPED = "diff"  # predictor.mig.slice_latencies
SHORT = {
    "paraphrase-multilingual-MiniLM-L12-v2": "MiniLM-L12 (bert)",
    "paraphrase-multilingual-mpnet-base-v2": "mpnet-base (xlm-r)",
    "distiluse-base-multilingual-cased-v1": "distiluse-v1 (distilbert)",
    "distiluse-base-multilingual-cased-v2": "distiluse-v2 (distilbert)",
}


def load_rows() -> list[dict]:
    """The MIG rows with their encoder, architecture (the unit of the split), slice, sweep and graph."""
    lines = Path(MIG_PATH).read_text(encoding="utf-8").splitlines()
    out = []
    for r in mig_rows()[0]:
        raw = json.loads(lines[int(r.source.split(":")[1])])
        out.append(
            {
                "model": raw["model"],
                "family": r.family,
                "batch": r.batch,
                "seq": int(raw["seq_len"]),
                "profile": raw["mig_profile"],
                "measured": r.latency_ms,
                "sweep": "seq" if "infer_seq" in raw["source"] else "bsz",
                "graph": graph_id(*r.config),
                "spec": r.spec,
            }
        )
    return out


def cost(rows: list[dict]):
    """KernelTimes per (graph, profile) on the A100-40GB, TF32 matmuls."""
    a100, graphs, times = get_device("a100-40gb"), load_graphs(), {}
    for r in rows:
        for p in (r["profile"], WHOLE):
            if (r["graph"], p) not in times:
                arrays = graph_kernel_arrays(graphs[r["graph"]])
                times[r["graph"], p] = kernel_latency_arrays(arrays, a100, a100.profile(p), tf32_matmul=True)
    return times


def eager_ms(t, h: float, g: float = 1.0) -> float:
    """Sum over kernels of max(g x execution, h x launch), ms (`KernelTimes.eager_ms` at h = g = 1)."""
    return float(np.maximum(np.maximum(t.compute_s, t.memory_s) * g, t.launch_s * h).sum() * 1e3)


def predict(model: str, times, r: dict, h: float, g: float = 1.0) -> tuple[float, float]:
    """(latency ms on the row's slice, predicted slowdown against 7g.40gb) of one slice model (`g`: `diff+g` only)."""
    t, w = times[r["graph"], r["profile"]], times[r["graph"], WHOLE]
    if model in ("diff", "diff+g", "async+g"):  # the shipped rule (async+g: on a queued whole-GPU estimate)
        g = g if model in FITTED_HG else 1.0
        if model == "async+g":
            full = queued_s(np.maximum(w.compute_s, w.memory_s) * g, w.launch_s * h) * 1e3
        else:
            full = eager_ms(w, h, g)
        lat = slice_latencies(full, w, {"s": t}, host_scale=h, exec_scale=g)["s"]
        return lat, lat / full
    if model == "ratio":
        full = eager_ms(w, h)
        lat = (
            full
            * queued_s(np.maximum(t.compute_s, t.memory_s), t.launch_s * h)
            / queued_s(np.maximum(w.compute_s, w.memory_s), w.launch_s * h)
        )
        return lat, lat / full
    hh = 1.0 if model == "kernel" else h
    lat = eager_ms(t, hh)
    return lat, lat / eager_ms(w, hh)


def errors(model: str, times, rows: list[dict], h_of, measured_whole: dict) -> list[tuple[dict, float, float | None]]:
    """Per row: (row, latency APE %, slowdown APE % or None on 7g.40gb); `h_of(row)` is h or (h, g)."""
    out = []
    for r in rows:
        hg = h_of(r)
        lat, slow = predict(model, times, r, *(hg if isinstance(hg, tuple) else (hg,)))
        m_slow = r["measured"] / measured_whole[r["model"], r["batch"], r["seq"], r["sweep"]]
        s_err = None if r["profile"] == WHOLE else abs(slow - m_slow) / m_slow * 100
        out.append((r, abs(lat - r["measured"]) / r["measured"] * 100, s_err))
    return out


def fit_h(model: str, times, rows: list[dict], g: float = 1.0) -> float:
    """The grid's h with the smallest latency MAPE on `rows` at kernel-execution factor `g` (first of ties)."""
    best, score = GRID[0], np.inf
    for h in GRID:
        s = np.mean([abs(predict(model, times, r, h, g)[0] - r["measured"]) / r["measured"] for r in rows])
        if s < score - 1e-12:
            best, score = h, s
    return float(best)


def fit_hg(model: str, times, rows: list[dict], rounds: int = 3) -> tuple[float, float]:
    """(h, g) of `model` (`diff+g`, `async+g`) with the smallest latency MAPE on `rows`: from g = 1, the best h on
    its grid, then the best g at that h, `rounds` times (coordinate descent; stops early when neither moves)."""
    g, h = 1.0, None
    for _ in range(rounds):
        h_new = fit_h(model, times, rows, g)
        best, score = g, np.inf
        for gg in G_GRID:
            s = np.mean([abs(predict(model, times, r, h_new, gg)[0] - r["measured"]) / r["measured"] for r in rows])
            if s < score - 1e-12:
                best, score = float(gg), s
        if (h_new, best) == (h, g):
            break
        h, g = h_new, best
    return h, g


def _cell(errs: list) -> str:
    lat = np.mean([e[1] for e in errs])
    slow = [e[2] for e in errs if e[2] is not None]
    return f"{lat:6.1f} {np.mean(slow):6.1f}" if slow else f"{lat:6.1f}      -"


def product_check(rows: list[dict], times, h: float, n: int) -> list[str]:
    """The product's own path at `--host-overhead h` on the `n` configurations nearest 32 x 64 tokens: each is
    analysed once (`analyzer.api.analyze` of its zoo spec, float32) and predicted on every slice the rows ran on by
    `analyzer.pipeline.predict_all` (TF32 matmuls, `host_overhead=h`, the kernel-model estimate); per slice, the
    product's latency against the bench's `diff` at `h` and against the measured row. Lines to print."""
    os.environ["PREFLIGHT_PREDICTOR"] = "kernel"  # the estimate, whatever the checkpoints hold
    import warnings

    from analyzer.api import analyze
    from analyzer.pipeline import predict_all

    warnings.filterwarnings("ignore")  # the exporter's deprecation notes
    # nearest batch x tokens to 32 x 64 first (in both sweeps; between host- and GPU-bound, so the slices differ)
    configs = sorted({(abs(np.log2(r["batch"] * r["seq"] / 2048)), r["spec"], r["batch"]) for r in rows})[:n]
    out = []
    for _, spec, batch in configs:
        here = [r for r in rows if (r["spec"], r["batch"]) == (spec, batch)]
        devices = [f"a100-40gb:{p}" for p in sorted({r["profile"] for r in here})]
        t0 = time.perf_counter()
        report = analyze(f"zoo:{spec}", batch=batch)
        predict_all(report, devices, matmul_precision="high", host_overhead=h)
        for p in report.predictions:
            assert p.runtime["host_overhead"] == h and p.predictor == "roofline", p.runtime
            r = next(r for r in here if f"a100-40gb:{r['profile']}" == p.device)
            bench = predict(SHIPPED, times, r, h)[0]
            assert abs(p.latency_ms / bench - 1) < 1e-9, (p.device, p.latency_ms, bench)
            out.append(
                f"  {SHORT[r['model']]:<26} batch {batch:>3} x {r['seq']:>3} tokens {p.device:<18} product "
                f"{p.latency_ms:8.3f} ms = bench {bench:8.3f} ms; measured {r['measured']:8.3f} ms "
                f"({(p.latency_ms / r['measured'] - 1) * 100:+.1f}%)"
            )
        out.append(f"  ({time.perf_counter() - t0:.0f} s: one analysis, {len(report.predictions)} slices)")
    return out


def memory_tables() -> None:
    """The memory line of the same rows: growth (slope and steps), fixed part at batch 1, fixed part per runtime."""
    from predictor.memory import load_memory_params
    from predictor.memory_fit import DATA, fixed_lines, growth_lines, load, runtime_lines

    rows = load(DATA)
    print("\nMemory: what grows with the batch (batch sweep at 64 tokens) and the sequence (batch 32), predicted (the")
    print("allocator replay; context and workspace cancel) against the framebuffer readings, per encoder and slice")
    print("\n".join(growth_lines(rows)))
    print("\nThe fixed part at batch 1 x 64 tokens (MiB): framebuffer = context + workspace + weight segments")
    print("+ batch-1 reserve + residual (context: the torch 1.12 fit with the encoder held out)")
    print("\n".join(fixed_lines(rows)))
    print("\nThe fixed part per runtime (MiB; predictor/memory_params.json)")
    print("\n".join(runtime_lines(load_memory_params())))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory tables")
    ap.add_argument(
        "--product", type=int, default=1, metavar="N", help="check N configurations through preflight's own path"
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = load_rows()
    times = cost(rows)
    measured_whole = {
        (r["model"], r["batch"], r["seq"], r["sweep"]): r["measured"] for r in rows if r["profile"] == WHOLE
    }
    families = sorted({r["family"] for r in rows})
    fold_h = {m: {f: fit_h(m, times, [r for r in rows if r["family"] != f]) for f in families} for m in MODELS[1:4]}
    fold_h["kernel"] = dict.fromkeys(families, 1.0)
    for m in FITTED_HG:
        fold_h[m] = {f: fit_hg(m, times, [r for r in rows if r["family"] != f]) for f in families}
    errs = {m: errors(m, times, rows, lambda r, m=m: fold_h[m][r["family"]], measured_whole) for m in MODELS}
    print(f"{len(rows)} rows, {len(times)} (graph, slice) costings, {time.perf_counter() - t0:.1f} s")
    print(
        f"shipped rule (predictor.mig.slice_latencies): `{SHIPPED}`, whole-GPU estimate + queued(slice) - queued(whole)"
    )
    for m in MODELS[1:4]:
        print(f"host dispatch factor h of `{m}`, fitted leave-one-architecture-out: " + ", ".join(
            f"{f} held out {h:.2f}" for f, h in fold_h[m].items()))  # fmt: skip
    for m in FITTED_HG:
        print(f"(h, g) of `{m}`, fitted leave-one-architecture-out: " + ", ".join(
            f"{f} held out ({h:.2f}, {g:.2f})" for f, (h, g) in fold_h[m].items()))  # fmt: skip
    print("\nMAPE % of the latency and of the slowdown against 7g.40gb (slowdown: rows on 1g/2g/3g only)\n")
    head = f"{'encoder':<26} {'slice':<8} {'sweep':<5} {'rows':>4}" + "".join(f" {m + ' lat/slow':>14}" for m in MODELS)
    print(head)
    print("-" * len(head))

    def line(label: str, slice_: str, sweep: str, pick) -> None:
        cells = [[e for e in errs[m] if pick(e[0])] for m in MODELS]
        if cells[0]:
            print(f"{label:<26} {slice_:<8} {sweep:<5} {len(cells[0]):>4}" + "".join(f" {_cell(c):>14}" for c in cells))

    profiles = sorted({r["profile"] for r in rows}, key=lambda p: int(p.split("g")[0]))
    for model in SHORT:
        for p in profiles:
            for sw in ("bsz", "seq"):
                line(
                    SHORT[model],
                    p,
                    sw,
                    lambda r, model=model, p=p, sw=sw: (r["model"], r["profile"], r["sweep"]) == (model, p, sw),
                )
    print("-" * len(head))
    for p in profiles:
        for sw in ("bsz", "seq", "all"):
            line("all encoders", p, sw, lambda r, p=p, sw=sw: r["profile"] == p and sw in ("all", r["sweep"]))
    for sw in ("bsz", "seq", "all"):
        line("all encoders", "all", sw, lambda r, sw=sw: sw in ("all", r["sweep"]))
    print("\nPredicted / measured latency (median) by what bounds the slice's kernels: GPU-bound where their")
    print("execution (x g) sums to over twice the host's issue time (h x launch), host-bound under half, between else")
    for m in (SHIPPED, "diff+g"):
        print(f"`{m}`\n{'slice':<8}" + "".join(f" {b:>16}" for b in ("host-bound", "between", "GPU-bound")))
        for p in profiles:
            cells = []
            for bound in ("host-bound", "between", "GPU-bound"):
                ratios = []
                for r in rows:
                    hg = fold_h[m][r["family"]]
                    h, g = hg if isinstance(hg, tuple) else (hg, 1.0)
                    t = times[r["graph"], p]
                    x = float(np.maximum(t.compute_s, t.memory_s).sum() * g / (t.launch_s.sum() * h))
                    kind = "GPU-bound" if x > 2 else "host-bound" if x < 0.5 else "between"
                    if r["profile"] == p and kind == bound:
                        ratios.append(predict(m, times, r, h, g)[0] / r["measured"])
                cells.append(f"{np.median(ratios):.2f} ({len(ratios):>3} rows)" if ratios else "-")
            print(f"{p:<8}" + "".join(f" {c:>16}" for c in cells))
    print()
    for m in MODELS:
        worst = max((e for e in errs[m] if e[2] is not None), key=lambda e: e[2])
        r = worst[0]
        where = f"{SHORT[r['model']]} {r['profile']} batch {r['batch']} x {r['seq']} tokens"
        print(f"`{m}` worst slowdown: {where} {worst[2]:.1f}%")
    print("\nMAPE % at one h for every row (no fit): h = 1 is preflight's own (`host_scale` 1, the kernel model's")
    print("launch floor); `+host` at h = 1 is `kernel`")
    print(f"{'h':>5}" + "".join(f" {m + ' lat/slow':>15}" for m in MODELS[1:4]))
    for h in (1.0, 1.5, 2.0, 2.3, 2.5, 3.0):
        cells = [_cell(errors(m, times, rows, lambda r, h=h: h, measured_whole)) for m in MODELS[1:4]]
        print(f"{h:>5.2f}" + "".join(f" {c:>15}" for c in cells))
    print(
        "\nThe choice, MAPE % lat/slow over all 224 rows: the old per-kernel sum (`kernel`), the queued ratio and the"
    )
    print(
        f"queued difference (shipped: `{SHIPPED}`), at h = 1 (preflight's own) and at the leave-one-architecture-out h"
    )
    print(f"{'':<22}" + "".join(f" {m + ' lat/slow':>15}" for m in ("kernel", "ratio", "diff")))
    at1 = [_cell(errors(m, times, rows, lambda r: 1.0, measured_whole)) for m in ("kernel", "ratio", "diff")]
    print(f"{'h = 1':<22}" + "".join(f" {c:>15}" for c in at1))
    fitted = [_cell(errs["kernel"]), _cell(errs["ratio"]), _cell(errs["diff"])]
    print(f"{'h fitted (LOAO)':<22}" + "".join(f" {c:>15}" for c in fitted) + "   (`kernel`: h = 1, no h in it)")
    print(
        "\nThe issue's bar (latency MAPE <= 15%, slowdown MAPE <= 8%), the shipped rule, per slice: at preflight's own"
    )
    print("speeds (what `preflight` states: h = g = 1), with the host factor h fitted, with h and g fitted (both LOAO)")
    settings = {
        "h = 1, g = 1 (preflight)": errors(SHIPPED, times, rows, lambda r: 1.0, measured_whole),
        "h fitted, g = 1": errs[SHIPPED],
        "h, g fitted": errs["diff+g"],
        "async+g (not shipped)": errs["async+g"],
    }
    print(f"{'':<26}" + "".join(f" {p + ' lat/slow':>16}" for p in [*profiles, "all"]))
    for label, es in settings.items():
        cells = [_cell([e for e in es if p in ("all", e[0]["profile"])]) for p in [*profiles, "all"]]
        worst = max(e[2] for e in es if e[2] is not None)
        print(f"{label:<26}" + "".join(f" {c:>16}" for c in cells) + f"   worst slowdown {worst:.1f}%")
    h_all = fit_h(SHIPPED, times, rows)
    at = errors(SHIPPED, times, rows, lambda r: h_all, measured_whole)
    print(
        f"\nThe user-facing setting: h fitted on all {len(rows)} rows (shipped rule, grid {GRID[0]:g}..{GRID[-1]:g}):"
    )
    print(f"`--host-overhead {h_all:g}`; MAPE % lat/slow at it (what preflight then states for these rows)")
    print(f"{'':<26}" + "".join(f" {p + ' lat/slow':>16}" for p in [*profiles, "all"]))
    for label, es in (("--host-overhead 1", settings["h = 1, g = 1 (preflight)"]), (f"--host-overhead {h_all:g}", at)):
        cells = [_cell([e for e in es if p in ("all", e[0]["profile"])]) for p in [*profiles, "all"]]
        print(f"{label:<26}" + "".join(f" {c:>16}" for c in cells))
    if args.product > 0:
        print(
            f"Through preflight's own path (analyze + predict_all, --host-overhead {h_all:g}), {args.product} config(s)"
        )
        print("\n".join(product_check(rows, times, h_all, args.product)))
    if not args.no_memory:
        memory_tables()
    if args.rows:
        cols = "".join(f" {m + ' ms':>10} {'slow':>5}" for m in MODELS)
        print(f"\n{'encoder':<26} {'slice':<8} {'sweep':<5} {'batch':>5} {'seq':>4} {'meas ms':>8} {'slow':>5}" + cols)
        for r in rows:
            m_slow = r["measured"] / measured_whole[r["model"], r["batch"], r["seq"], r["sweep"]]
            cells = "".join(
                f" {lat:>10.2f} {slow:>5.2f}"
                for m in MODELS
                for hg in [fold_h[m][r["family"]]]
                for lat, slow in [predict(m, times, r, *(hg if isinstance(hg, tuple) else (hg,)))]
            )
            key = f"{SHORT[r['model']]:<26} {r['profile']:<8} {r['sweep']:<5} {r['batch']:>5} {r['seq']:>4}"
            print(f"{key} {r['measured']:>8.2f} {m_slow:>5.2f}" + cells)


if __name__ == "__main__":
    main()
