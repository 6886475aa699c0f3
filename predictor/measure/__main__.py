"""``python -m predictor.measure``: measure one shard of the config list on this machine's GPU or CPU."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from predictor.measure import shard_arg, shard_summary
from predictor.measure.configs import MeasureConfig, load_configs, sample_configs
from predictor.measure.harness import HarnessError, Options, run_shard


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser.

    Returns:
        The parser.
    """
    p = argparse.ArgumentParser(
        prog="python -m predictor.measure",
        description="Measure latency, energy, memory and MIG fit of zoo configs (docs/design.md protocol).",
    )
    p.add_argument("--device", choices=("cuda", "cpu"), required=True)
    p.add_argument("--shard", type=shard_arg, default=(0, 1), help="i/n: measure the configs of shard i of n")
    p.add_argument("--out", required=True, help="output directory; records go to OUT/<device>/<shard>.jsonl")
    p.add_argument("--configs", help="config list (JSON lines from python -m predictor.measure.configs)")
    p.add_argument("--limit", type=int, default=None, help="measure at most N configs in this call")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per config before 'timeout'")
    p.add_argument("--budget", type=float, default=540.0, help="stop starting configs after S seconds (0: none)")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs (protocol: >= 5)")
    p.add_argument("--runs", type=int, default=30, help="minimum timed runs (protocol: >= 30)")
    p.add_argument("--min-window", type=float, default=1.0, help="minimum timed window in s on CUDA (energy)")
    p.add_argument("--no-mig", action="store_true", help="skip the MIG fit labels")
    p.add_argument("--skip-from", action="append", default=[], help="more dirs whose records count as done")
    p.add_argument("--retry-failed", action="store_true", help="measure timeout/crash/error configs again")
    p.add_argument("--families", help="comma-separated families to keep")
    p.add_argument("--target", help="device key for sampling when --configs is not given (default: measured)")
    p.add_argument("--per-family", type=int, default=64, help="configs per family when sampling")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness.

    Args:
        argv: Command-line arguments.

    Returns:
        Exit code: 0 done (including early stop by budget), 2 bad usage or the harness could not start.
    """
    args = build_parser().parse_args(argv)
    families = set(args.families.split(",")) if args.families else None

    def configs_for(device: str) -> list[MeasureConfig]:
        if args.configs:
            listed = load_configs(args.configs)
        else:
            target = args.target or device
            print(f"[measure] sampling configs for {target} (pass --configs to skip this)", file=sys.stderr)
            listed = sample_configs(target, args.per_family, args.seed, families)
        return [c for c in listed if families is None or c.family in families]

    opts = Options(
        device=args.device,
        warmup=args.warmup,
        runs=args.runs,
        min_window_s=args.min_window if args.device == "cuda" else 0.0,
        mig=not args.no_mig,
    )
    try:
        summary = run_shard(
            configs_for,
            args.out,
            opts,
            shard=args.shard,
            limit=args.limit,
            timeout=args.timeout,
            budget_s=args.budget or None,
            skip_from=args.skip_from,
            retry_failed=args.retry_failed,
        )
    except (HarnessError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{shard_summary(summary, args.shard)} -> {summary.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
