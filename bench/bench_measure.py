"""Measurement-harness benchmark on the CPU: configs measured per minute and the harness overhead per config.

Runs the real harness (persistent worker, one JSON line per config, fsync) on small zoo configs, once with
the protocol's run counts (5 warm-ups, 30 timed runs) and once with a minimal count (1 + 3) that exposes
the harness's own cost, and prints one table. Columns:

- ``configs/min``: records written per minute of wall time, worker start included;
- ``worker start``: seconds until the first worker reported ready (import torch, the zoo, NVML on CUDA);
- ``per config``: median parent-side wall time per config;
- ``model runs``: median time spent in warm-up plus timed runs (the part the protocol asks for);
- ``overhead``: ``per config - model runs``: model build, cache reset, pipe round trip, record write.

Usage: python bench/bench_measure.py [--configs 12]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor.measure.configs import _make_config, estimate_memory_mib, spec_info  # noqa: E402
from predictor.measure.harness import Options, WorkerHandle, run_shard  # noqa: E402

SPECS = ("resnet18?resolution=32", "lstm_small?seq_len=16", "mobilenet_v2?resolution=32", "bert_tiny?seq_len=16")


def small_configs(n: int) -> list:
    """Return ``n`` small CPU configs (specs x batch 1, 2, 4)."""
    out = []
    for batch in (1, 2, 4, 8):
        for spec in SPECS:
            info = spec_info(spec)
            out.append(_make_config(info, spec, batch, "float32", estimate_memory_mib(info, batch, "float32"), False))
    return out[:n]


def bench(configs: list, opts: Options) -> dict:
    """Measure ``configs`` into a temporary directory and summarise the timings."""
    t0 = time.perf_counter()
    handle = WorkerHandle(opts, 300)
    start_s = time.perf_counter() - t0
    handle.close()
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_shard(configs, tmp, opts, log=None)
        recs = [json.loads(line) for line in Path(summary.path).read_text().splitlines()]
    model = [r["timing"]["warmup_s"] + r["timing"]["timed_window_s"] for r in recs]
    per = statistics.median(summary.config_wall_s)
    return {
        "configs": summary.measured,
        "rate": summary.measured / summary.elapsed_s * 60,
        "start": start_s,
        "per": per,
        "model": statistics.median(model),
        "overhead": statistics.median(w - m for w, m in zip(summary.config_wall_s, model, strict=True)),
        "ok": summary.statuses.get("ok", 0),
    }


def main() -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", type=int, default=12)
    args = parser.parse_args()
    configs = small_configs(args.configs)
    rows = [
        ("protocol (5 + 30 runs)", bench(configs, Options(device="cpu"))),
        ("minimal (1 + 3 runs)", bench(configs, Options(device="cpu", warmup=1, runs=3))),
    ]
    print(f"CPU, {len(configs)} small configs ({', '.join(SPECS)}; batch 1-{max(c.batch for c in configs)})")
    head = f"{'runs':24s} {'ok':>4s} {'configs/min':>12s} {'worker start':>13s} {'per config':>11s}"
    print(head + f" {'model runs':>11s} {'overhead':>9s}")
    for name, r in rows:
        print(
            f"{name:24s} {r['ok']:>4d} {r['rate']:>12.1f} {r['start']:>12.2f}s {r['per']:>10.3f}s"
            f" {r['model']:>10.3f}s {r['overhead']:>8.3f}s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
