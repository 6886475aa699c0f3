"""Pre-deployment gate for a build script: fail when a model's predicted latency or memory breaks its budget.

    python examples/predeploy_gate.py zoo:resnet50 --device h100-80gb --max-latency-ms 5 --max-memory-mb 4096 \
        --report build/resnet50-report.html

Exit 0 within budget, 1 over budget (the reasons on stderr), 2 for a bad model or arguments, as
`preflight predict ... --max-latency-ms X --max-memory-mb Y` does on the command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import analyzer
from analyzer.errors import PreflightError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--device", default="h100-80gb")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--max-latency-ms", type=float, default=None)
    ap.add_argument("--max-memory-mb", type=float, default=None)
    ap.add_argument("--report", default=None, help="also write a pre-deployment report (.html, .md or .json)")
    args = ap.parse_args(argv)
    try:
        if args.report:
            Path(args.report).parent.mkdir(parents=True, exist_ok=True)  # build/ need not exist yet
            report = analyzer.report(
                args.model, devices=[args.device], batch=args.batch, output=args.report, batches=[]
            )
        else:
            report = analyzer.predict(args.model, device=args.device, batch=args.batch)
    except PreflightError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    over = analyzer.check_budget(report, max_latency_ms=args.max_latency_ms, max_memory_mb=args.max_memory_mb)
    p = report.prediction
    print(f"{args.model} on {p.device}: {p.latency_ms:.3g} ms, {p.memory_mib:,.0f} MiB (predictor {p.predictor})")
    for reason in over:
        print(f"budget exceeded: {reason}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
