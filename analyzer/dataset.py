"""Dataset builder, analyzer side: derive and cache the graph of every measured configuration.

Measurement records (`data/<device>/*.jsonl`, schema `preflight.measurement/1`) name a zoo config
(`zoo`, `batch`, `dtype`). For each distinct config this runs the analyzer once and caches what the
predictor needs as one `.npz` file: X, edge_index, the static features, the totals, and the per-op
arrays the roofline bound needs (so the predictor never imports TVM). Caches are rebuilt from the
records, never committed, never hand-edited; the file name hashes the config and the feature version.

Usage: python -m analyzer.dataset data/h100-80gb [data/...] [--cache cache/graphs]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

DEFAULT_CACHE = Path("cache/graphs")


def read_records(paths: Iterable[str | Path]) -> Iterator[dict]:
    """Every JSON record in the given .jsonl files or directories (recursively)."""
    for p in map(Path, paths):
        files = sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]
        for f in files:
            with open(f, encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        yield json.loads(line)


def config_spec(record: dict) -> tuple[str, int, str]:
    """(zoo spec, batch, dtype) of a record: what determines its graph."""
    return record["zoo"], int(record["batch"]), record.get("dtype", "float32")


def graph_key(spec: str, batch: int, dtype: str) -> str:
    from passes.features import FEATURE_VERSION

    text = json.dumps([spec, batch, dtype, FEATURE_VERSION])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def cache_path(cache: Path, spec: str, batch: int, dtype: str) -> Path:
    return Path(cache) / f"{graph_key(spec, batch, dtype)}.npz"


def _zoo_model(spec: str, dtype: str) -> str:
    if dtype == "float32":
        return f"zoo:{spec}"
    return f"zoo:{spec}{'&' if '?' in spec else '?'}dtype={dtype}"


def featurize(spec: str, batch: int, dtype: str) -> dict[str, np.ndarray]:
    """The arrays cached for one configuration."""
    from passes.features import FEATURE_VERSION
    from predictor.roofline import op_arrays

    from .api import analyze

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
        "totals": np.array(json.dumps({k: getattr(t, k) for k in (
            "flops", "macs", "params", "param_bytes", "peak_activation_bytes", "bytes_read", "bytes_written",
            "op_count")} | {"unsupported": t.unsupported})),
        "feature_version": np.array(FEATURE_VERSION),
        "config": np.array(json.dumps({"zoo": spec, "batch": batch, "dtype": dtype})),
    }


def build_cache(records: Iterable[dict], cache: Path = DEFAULT_CACHE, *, log=None) -> dict[str, Path]:
    """Featurize every distinct config of `records` not cached yet; returns config key -> cache file."""
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    todo = []
    for rec in records:
        spec, batch, dtype = config_spec(rec)
        key = graph_key(spec, batch, dtype)
        if key in out:
            continue
        out[key] = cache_path(cache, spec, batch, dtype)
        if not out[key].exists():
            todo.append((spec, batch, dtype, out[key]))
    for i, (spec, batch, dtype, path) in enumerate(todo, 1):
        t = time.perf_counter()
        arrays = featurize(spec, batch, dtype)
        tmp = path.with_suffix(".tmp.npz")
        np.savez_compressed(tmp, **arrays)
        tmp.replace(path)
        if log:
            log(f"[{i}/{len(todo)}] {spec} batch={batch} {dtype}: {time.perf_counter() - t:.1f}s")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Derive and cache the graphs of measured configurations.")
    ap.add_argument("data", nargs="+", help="measurement .jsonl files or directories")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args(argv)
    import warnings

    warnings.filterwarnings("ignore")
    records = list(read_records(args.data))
    files = build_cache(records, args.cache, log=lambda s: print(s, file=sys.stderr))
    print(f"{len(records)} records, {len(files)} distinct configurations cached in {args.cache}", file=sys.stderr)


if __name__ == "__main__":
    main()
