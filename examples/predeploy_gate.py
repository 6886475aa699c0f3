"""Pre-deployment gate for a build script: fail when a model's predicted latency or memory breaks its budget.

    python examples/predeploy_gate.py zoo:resnet50 --device h100-80gb --max-latency-ms 5 --max-memory-mb 4096 \
        --report build/resnet50-report.html

Exit 0 within budget, 4 over budget (the reasons on stderr), 1 when the model could not be analysed, 2 for a bad
model or arguments, as `preflight predict ... --max-latency-ms X --max-memory-mb Y` does on the command line
(the README's exit-code table). `--verdict FILE` writes the gate's verdict as JSON (each budget, the predicted
value, pass/fail and the margin), the `verdict` block of `preflight predict --format json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import analyzer
from analyzer.errors import EXIT_GATE, EXIT_OK, PreflightError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--device", default="h100-80gb")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--max-latency-ms", type=float, default=None)
    ap.add_argument("--max-memory-mb", type=float, default=None)
    ap.add_argument("--report", default=None, help="also write a pre-deployment report (.html, .md or .json)")
    ap.add_argument("--verdict", default=None, help="also write the gate's verdict as JSON")
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
    verdict = analyzer.budget_verdict(report, max_latency_ms=args.max_latency_ms, max_memory_mb=args.max_memory_mb)
    p = report.prediction
    label = "kernel model" if p.predictor == "roofline" else p.predictor  # the JSON schema's name for the estimate
    print(f"{args.model} on {p.device}: {p.latency_ms:.3g} ms, {p.memory_mib:,.0f} MiB (predictor {label})")
    if args.verdict:
        Path(args.verdict).parent.mkdir(parents=True, exist_ok=True)
        Path(args.verdict).write_text(json.dumps(verdict.to_json(), indent=2) + "\n")
    for reason in verdict.reasons:
        print(f"budget exceeded: {reason}", file=sys.stderr)
    return EXIT_OK if verdict.passed else EXIT_GATE


if __name__ == "__main__":
    sys.exit(main())
