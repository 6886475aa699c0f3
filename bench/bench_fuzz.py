"""Fuzzing benchmark: the fuzz suite of tests/test_fuzz.py at a larger size; prints one table.

Seeded mutation and structure-aware fuzzing of every format (tests/fuzzing.py), one worker process
restarted only when a case kills or hangs it; per format: cases, exit codes, cases with a problem
(traceback, internal error, signal, hang, marker file, noisy stderr, wrong exit code) and time. Lists every
problem case after the table; exits 1 if there is one.

Usage: python bench/bench_fuzz.py [--cases 2100] [--seed 2026] [--formats pt2,onnx,tflite,keras,saved_model,paddle]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

# share of the cases per format (TensorFlow and Paddle cases cost the most: a forked child each)
WEIGHTS = {"pt2": 0.30, "onnx": 0.22, "tflite": 0.12, "keras": 0.12, "saved_model": 0.10, "paddle": 0.14}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=2100)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--formats", default=",".join(WEIGHTS))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from fuzzing import make_seeds, run_cases

    formats = args.formats.split(",")
    total_w = sum(WEIGHTS[f] for f in formats)
    n = {f: max(1, round(args.cases * WEIGHTS[f] / total_w)) for f in formats}
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; {sum(n.values())} cases, seed {args.seed}")
    done = collections.Counter()

    def progress(o) -> None:
        done[o.fmt] += 1
        if sum(done.values()) % 100 == 0:
            print(f"  ... {sum(done.values())} cases", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="preflight-fuzz-") as tmp:
        t = time.perf_counter()
        seeds = make_seeds(Path(tmp), tuple(formats))
        seed_s = time.perf_counter() - t
        t = time.perf_counter()
        outcomes = run_cases(seeds, n, Path(tmp) / "work", seed=args.seed, case_timeout_s=600, progress=progress)
        run_s = time.perf_counter() - t
    print(f"seeds made in {seed_s:.0f} s; cases run in {run_s:.0f} s ({len(outcomes) / run_s:.1f} cases/s)")
    print("| format | cases | exit 0 | exit 1 | exit 2 | died/hung | problems | seconds | median ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for fmt in formats:
        rows = [o for o in outcomes if o.fmt == fmt]
        codes = collections.Counter(o.code for o in rows)
        secs = sorted(o.seconds for o in rows)
        print(
            f"| {fmt} | {len(rows)} | {codes[0]} | {codes[1]} | {codes[2]} | {codes[None]} | "
            f"{sum(1 for o in rows if o.problems)} | {sum(secs):.0f} | {secs[len(secs) // 2] * 1e3:.0f} |"
        )
    kinds = collections.Counter((o.fmt, o.kind.split(":")[0]) for o in outcomes)
    print("mutators: " + ", ".join(f"{f}/{k} {c}" for (f, k), c in sorted(kinds.items())))
    bad = [o for o in outcomes if o.problems]
    for o in bad:
        print(f"PROBLEM {o.case}: {'; '.join(o.problems)} [exit {o.code}] {o.stderr.strip()[:400]}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
