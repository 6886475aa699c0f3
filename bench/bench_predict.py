"""Dataset-builder and prediction benchmarks; prints two tables.

1. Analysis time per configuration (what `analyzer.dataset` spends deriving a graph), over the first N
   configurations of the CPU development list `predictor/measure/lists/cpu-dev.jsonl`.
2. Prediction time after analysis (issue 6 goal: <= 20 ms on this CPU): the roofline fallback, and a
   GraphSAGE artifact of the shipped architecture (weights untrained: inference costs the same),
   loaded once, then timed per call on models of different sizes.

Usage: python bench/bench_predict.py [--configs 10] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def bench_analysis(n: int) -> None:
    from analyzer.dataset import featurize

    rows = [json.loads(line) for line in open(ROOT / "predictor/measure/lists/cpu-dev.jsonl")][:n]
    featurize(rows[0]["zoo"], rows[0]["batch"], rows[0]["dtype"])  # warm imports
    times = []
    for r in rows:
        t = time.perf_counter()
        featurize(r["zoo"], r["batch"], r["dtype"])
        times.append(time.perf_counter() - t)
    print(f"\n1. Analysis per configuration ({len(rows)} configurations of the CPU dev list, warm process)")
    print("| median s | min s | max s |\n|---:|---:|---:|")
    print(f"| {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} |")


def bench_predict(repeat: int) -> None:
    import numpy as np

    from analyzer import analyze
    from predictor import predict as pp
    from predictor.model import CostPredictor
    from predictor.train import OURS, Normaliser, Trained, graph_vector, save

    reports = {name: analyze(f"zoo:{name}") for name in ("resnet50", "bert_base", "llama_small")}
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        # an artifact with the shipped architecture and feature widths
        a = next(iter(reports.values())).analysis
        node_dim = a.x.shape[1]
        static_dim = len(graph_vector(a.static_features, "h100-80gb", (1.0, 1.0)))
        model = CostPredictor(node_dim, static_dim)
        norm = Normaliser(
            np.zeros(node_dim, np.float32),
            np.ones(node_dim, np.float32),
            np.zeros(static_dim, np.float32),
            np.ones(static_dim, np.float32),
            np.zeros(3, np.float32),
            np.ones(3, np.float32),
        )
        save(Trained(model, norm, OURS), root / "h100-80gb@1", {"name": "h100-80gb@1"})
        print(f"\n2. Prediction after analysis, median of {repeat} calls (device h100-80gb)")
        print("| model | ops | roofline fallback ms | GraphSAGE artifact ms (first call, with load) |")
        print("|---|---:|---:|---:|")
        for name, r in reports.items():
            fallback = []
            for _ in range(repeat):
                t = time.perf_counter()
                pp.predict(r.analysis, "h100-80gb", checkpoints=root / "none")
                fallback.append(time.perf_counter() - t)
            t = time.perf_counter()
            pp.predict(r.analysis, "h100-80gb", checkpoints=root)
            first = time.perf_counter() - t
            gnn = []
            for _ in range(repeat):
                t = time.perf_counter()
                pp.predict(r.analysis, "h100-80gb", checkpoints=root)
                gnn.append(time.perf_counter() - t)
            print(
                f"| {name} | {len(r.analysis.ops)} | {statistics.median(fallback) * 1e3:.1f} | "
                f"{statistics.median(gnn) * 1e3:.1f} ({first * 1e3:.0f}) |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import os

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores")
    bench_analysis(args.configs)
    bench_predict(args.repeat)


if __name__ == "__main__":
    main()
