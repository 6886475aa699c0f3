"""Pre-deployment report benchmark: where the time of `preflight report` goes; prints one table.

For a CNN and a transformer, one and two devices, batches 1, 2, 4, 8 (the sweep re-analyses the model at
every batch), in one warm process: the whole `analyzer.report(...)` call, the analyses it runs, and the time
to render the finished report as HTML, Markdown (+ SVG files) and JSON.

Usage: python bench/bench_report.py [--models resnet18,bert_base] [--max-batch 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEVICE_SETS = (("h100-80gb",), ("h100-80gb", "a100-40gb"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,bert_base", help="zoo names, comma-separated")
    ap.add_argument("--max-batch", type=int, default=8)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from analyzer import api, pipeline
    from analyzer.predeploy import write
    from analyzer.sweep import batch_points

    batches = batch_points(args.max_batch)
    models = args.models.split(",")
    for name in models:  # warm imports (TVM, torch.export, transformers) and caches
        api.analyze(f"zoo:{name}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; batches {', '.join(map(str, batches))}")
    print(
        "| model | devices | analyses | report s | s per analysis | render HTML ms | render Markdown ms | "
        "render JSON ms | HTML KiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    calls = {"n": 0}
    original = pipeline.analyze_graph  # every analysis, the report's own and the sweep's, runs it once

    def counted(*a, **k):
        calls["n"] += 1
        return original(*a, **k)

    pipeline.analyze_graph = counted
    try:
        for name in models:
            for devices in DEVICE_SETS:
                calls["n"] = 0
                t = time.perf_counter()
                rep = api.report(f"zoo:{name}", devices=devices, batches=batches)
                total = time.perf_counter() - t
                renders = {}
                with tempfile.TemporaryDirectory() as d:
                    for fmt in ("html", "md", "json"):
                        path = Path(d) / f"report.{fmt}"
                        t = time.perf_counter()
                        write(rep, str(path))
                        renders[fmt] = time.perf_counter() - t
                    size = (Path(d) / "report.html").stat().st_size / 1024
                n = calls["n"]
                ms = {fmt: f"{seconds * 1e3:.0f}" for fmt, seconds in renders.items()}
                print(
                    f"| {name} | {len(devices)} | {n} | {total:.1f} | {total / n:.2f} | {ms['html']} | {ms['md']} | "
                    f"{ms['json']} | {size:.0f} |"
                )
    finally:
        pipeline.analyze_graph = original


if __name__ == "__main__":
    main()
