"""Dataset builder, analyzer side: featurise and cache the graph of every measured configuration.

The record format and the cache key are `predictor.data`'s (`config_spec`, `graph_key`, `cache_path`).
For each distinct config this runs the analyzer once and caches what the predictor needs as one `.npz`
file: X, edge_index, the static features, the totals, and the per-op arrays the roofline bound needs (so
the predictor never imports TVM). Caches are rebuilt from the records, never committed, never hand-edited.

The configurations are featurised on Ray by the engine of `preflight analyze-many` (`analyzer.batch`): the same
long-lived workers, time limit, memory cap and crash supervision; this process only writes the `.npz` files.

Usage: python -m analyzer.dataset data/h100-80gb [data/...] [--cache cache/graphs] [--workers N] [--address ADDR]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from predictor.data import DEFAULT_CACHE, cache_path, config_spec, graph_key, measurements

from .batch import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, Outcome, ray_cluster, run_jobs
from .errors import AnalysisError, PreflightError


def _zoo_model(spec: str, dtype: str) -> str:
    if dtype == "float32":
        return f"zoo:{spec}"
    return f"zoo:{spec}{'&' if '?' in spec else '?'}dtype={dtype}"


def featurize(spec: str, batch: int, dtype: str) -> dict[str, np.ndarray]:
    """The arrays cached for one configuration."""
    from passes.features import FEATURE_VERSION
    from predictor.roofline import op_arrays

    from .pipeline import analyze_model as analyze

    report = analyze(_zoo_model(spec, dtype), batch=batch)
    a = report.analysis
    t = a.totals
    static_names = sorted(a.static_features)
    ops = a.ops
    return {
        "x": a.x,
        "edge_index": a.edge_index,
        "static_names": np.array(static_names),
        "static": np.array([a.static_features[k] for k in static_names], dtype=np.float64),
        **op_arrays(ops),
        "totals": np.array(
            json.dumps(
                {
                    k: getattr(t, k)
                    for k in (
                        "flops",
                        "macs",
                        "params",
                        "param_bytes",
                        "peak_activation_bytes",
                        "bytes_read",
                        "bytes_written",
                        "op_count",
                    )
                }
                | {"unsupported": t.unsupported}
            )
        ),
        "feature_version": np.array(FEATURE_VERSION),
        "config": np.array(json.dumps({"zoo": spec, "batch": batch, "dtype": dtype})),
    }


def featurize_config(config: tuple[str, int, str]) -> dict[str, np.ndarray]:
    """`featurize` of one (zoo spec, batch, dtype) configuration: the task a Ray worker runs."""
    return featurize(*config)


def build_cache(
    records: Iterable[dict],
    cache: Path = DEFAULT_CACHE,
    *,
    log=None,
    workers: int | None = None,
    address: str | None = None,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    memory_mb: int | None = DEFAULT_MEMORY_MB,
) -> dict[str, Path]:
    """Featurize every distinct config of `records` not cached yet, on Ray; returns config key -> cache file.

    Args:
        records: measurement records (`predictor.data`).
        cache: the cache folder.
        log: called with one line per configuration featurised.
        workers, address: as for `analyzer.batch.ray_cluster` (default: a local Ray on this machine's cores).
        timeout_s, memory_mb: per-configuration limits (`analyzer.batch.run_jobs`).

    Raises:
        AnalysisError: some configurations could not be featurised (each is named with its error); the others
            are cached, so a rerun does only the failed ones.
    """
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    todo: list[tuple[str, int, str]] = []
    for rec in records:
        spec, batch, dtype = config_spec(rec)
        key = graph_key(spec, batch, dtype)
        if key in out:
            continue
        out[key] = cache_path(cache, spec, batch, dtype)
        if not out[key].exists():
            todo.append((spec, batch, dtype))
    failed: list[str] = []
    done = 0

    def on_result(config: tuple[str, int, str], result: Outcome) -> None:
        nonlocal done
        done += 1
        spec, batch, dtype = config
        label = f"{spec} batch={batch} {dtype}"
        if not result.ok:
            failed.append(f"{label} ({result.error_class}: {result.message})")
            if log:
                log(f"[{done}/{len(todo)}] {label}: {result.error_class}: {result.message}")
            return
        path = cache_path(cache, spec, batch, dtype)
        tmp = path.with_suffix(".tmp.npz")
        np.savez_compressed(tmp, **result.value)
        tmp.replace(path)
        if log:
            log(f"[{done}/{len(todo)}] {label}: {result.seconds:.1f}s")

    if todo:
        with ray_cluster(workers, address) as n:
            run_jobs(
                todo,
                featurize_config,
                on_result,
                workers=min(n, len(todo)),
                timeout_s=timeout_s,
                memory_mb=memory_mb,
                check_package=address is None,
            )
    if failed:
        shown = "; ".join(failed[:3]) + (f"; and {len(failed) - 3} more" if len(failed) > 3 else "")
        raise AnalysisError(f"{len(failed)} of {len(todo)} configurations could not be featurised: {shown}")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Derive and cache the graphs of measured configurations.")
    ap.add_argument("data", nargs="+", help="measurement .jsonl files or directories")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--workers", type=int, default=None, help="Ray workers (default: this machine's cores)")
    ap.add_argument("--address", default=None, help="join this Ray cluster instead of starting a local one")
    args = ap.parse_args(argv)
    import warnings

    warnings.filterwarnings("ignore")
    records = measurements(args.data)
    try:
        files = build_cache(
            records, args.cache, log=lambda s: print(s, file=sys.stderr), workers=args.workers, address=args.address
        )
    except PreflightError as exc:
        sys.exit(f"error: {exc}")
    print(f"{len(records)} records, {len(files)} distinct configurations cached in {args.cache}", file=sys.stderr)


if __name__ == "__main__":
    main()
