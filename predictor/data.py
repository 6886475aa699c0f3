"""The dataset contract and the predictor's side of it: records, graph cache keys, samples, splits (no TVM).

Measurement records (`data/<device>/*.jsonl`, schema `preflight.measurement/1`) name a zoo config (`zoo`,
`batch`, `dtype`); `config_spec` says what determines a record's graph and `graph_key` / `cache_path` where
its featurised graph is cached. `analyzer.dataset` writes that cache (it needs the analyzer); this module
pairs every measured record with its graph and splits them randomly or leave-family-out (a family never
straddles train and test).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

TARGETS = ("latency_ms", "energy_j", "memory_mb")  # memory in MiB (2**20 bytes), as the harness records it
DEFAULT_CACHE = Path("cache/graphs")


#: The static graph features the predictors read (log-scaled), and the DIPPM-style ablation's subset.
STATIC_NAMES = (
    "macs",
    "flops",
    "params",
    "param_bytes",
    "peak_activation_bytes",
    "bytes_read",
    "bytes_written",
    "op_count",
    "batch_size",
    "n_conv",
    "n_dense",
    "n_relu",
    "n_attention",
    "n_elementwise",
    "n_reduction",
    "n_normalization",
    "n_pooling",
    "n_data_movement",
    "n_other",
)
DIPPM_STATIC = ("macs", "batch_size", "n_conv", "n_dense", "n_relu")


def read_records(paths: Iterable[str | Path]) -> Iterator[dict]:
    """Every JSON record in the given .jsonl files or directories (recursively)."""
    for p in map(Path, paths):
        files = sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]
        for f in files:
            with open(f, encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        yield json.loads(line)


MEASUREMENT_SCHEMA = "preflight.measurement/1"  # a whole-model record (the harness's RECORD_SCHEMA)


def measurements(paths: Iterable[str | Path], device: str | None = None) -> list[dict]:
    """The whole-model measurement records under `paths`, once per config id (the first seen), optionally of one
    device. Kernel-sweep records (another schema), LLM serving-step records (an `llm` key) and the noise
    re-measurements (`noise/` folders, repeats of ids measured elsewhere) are left out."""
    out, seen = [], set()
    for p in map(Path, paths):
        files = sorted(f for f in p.rglob("*.jsonl") if "noise" not in f.relative_to(p).parts) if p.is_dir() else [p]
        for rec in read_records(files):
            if rec.get("schema") != MEASUREMENT_SCHEMA or (device is not None and rec.get("device") != device):
                continue
            if rec.get("llm"):  # an LLM prefill / decode step, not the model's forward at that batch
                continue
            key = rec.get("id")
            if key is None or key not in seen:
                seen.add(key)
                out.append(rec)
    return out


def config_spec(record: dict) -> tuple[str, int, str]:
    """(zoo spec, batch, dtype) of a record: what determines its graph."""
    return record["zoo"], int(record["batch"]), record.get("dtype", "float32")


def graph_key(spec: str, batch: int, dtype: str) -> str:
    """The cache key of a configuration's graph: 20 hex digits over the config and the feature layout version."""
    from passes.features import FEATURE_VERSION

    text = json.dumps([spec, batch, dtype, FEATURE_VERSION])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def record_key(record: dict) -> str:
    """`graph_key` of a record's configuration."""
    return graph_key(*config_spec(record))


def cache_path(cache: Path, spec: str, batch: int, dtype: str) -> Path:
    """The `.npz` file that caches a configuration's graph."""
    return Path(cache) / f"{graph_key(spec, batch, dtype)}.npz"


def labels(record: dict) -> tuple[float, float, float]:
    """(latency_ms median, energy_j per inference, memory_mb total) of a record; NaN where absent."""
    lat = record.get("latency_ms") or {}
    mem = record.get("memory_mb") or {}
    energy = record.get("energy_j")

    def num(v) -> float:
        return float(v) if isinstance(v, int | float) and v > 0 else math.nan

    return num(lat.get("median")), num(energy), num(mem.get("total"))


@dataclass
class Sample:
    """One measured configuration with its graph."""

    key: str  # the config's graph key
    family: str
    device: str
    y: np.ndarray  # (3,) TARGETS, NaN where not measured
    x: np.ndarray  # (|V|, F) node features
    edge_index: np.ndarray  # (2, |E|)
    static: dict[str, float]
    ops: dict[str, np.ndarray]  # per-op arrays for the roofline bound
    totals: dict
    record: dict = field(repr=False, default_factory=dict)


def load_graph(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def load_samples(
    records: Iterable[dict], graphs: dict[str, Path], *, feature_version: str | None = None, key_of=None
) -> list[Sample]:
    """Pair every successful record (`status == "ok"`) with its cached graph.

    Args:
        records: measurement records.
        graphs: graph key -> cache file, as `analyzer.dataset.build_cache` returns.
        feature_version: refuse graphs cached with another feature layout.
        key_of: record -> graph key (default `record_key`).
    """
    key_of = key_of or record_key
    loaded: dict[str, dict] = {}
    out = []
    for rec in records:
        if rec.get("status") != "ok":
            continue
        key = key_of(rec)
        if key not in loaded:
            g = load_graph(graphs[key])
            if feature_version and str(g["feature_version"]) != feature_version:
                raise ValueError(
                    f"graph cache {graphs[key]} has features {g['feature_version']}, "
                    f"expected {feature_version}: rebuild the cache"
                )
            loaded[key] = g
        g = loaded[key]
        static = dict(zip((str(n) for n in g["static_names"]), (float(v) for v in g["static"]), strict=True))
        ops = {k: g[k] for k in ("op_flops", "op_bytes", "op_category", "op_dtype", "op_folded")}
        out.append(
            Sample(
                key=key,
                family=rec["family"],
                device=rec["device"],
                y=np.array(labels(rec)),
                x=g["x"],
                edge_index=g["edge_index"],
                static=static,
                ops=ops,
                totals=json.loads(str(g["totals"])),
                record=rec,
            )
        )
    return out


def random_split(samples: Sequence[Sample], test_fraction: float = 0.2, seed: int = 0) -> tuple[list[int], list[int]]:
    """Indices of a seeded random split of the samples."""
    idx = list(range(len(samples)))
    random.Random(seed).shuffle(idx)
    n_test = max(1, round(test_fraction * len(idx))) if idx else 0
    return sorted(idx[n_test:]), sorted(idx[:n_test])


def family_split(
    samples: Sequence[Sample], test_fraction: float = 0.2, seed: int = 0, test_families: Iterable[str] | None = None
) -> tuple[list[int], list[int], list[str]]:
    """Leave-family-out split: whole families go to test (about `test_fraction` of the samples).

    Returns train indices, test indices and the held-out families.
    """
    families = sorted({s.family for s in samples})
    if test_families is None:
        order = families[:]
        random.Random(seed).shuffle(order)
        held, count = [], 0
        for fam in order:
            if count >= test_fraction * len(samples):
                break
            held.append(fam)
            count += sum(1 for s in samples if s.family == fam)
    else:
        held = list(test_families)
    held_set = set(held)
    train = [i for i, s in enumerate(samples) if s.family not in held_set]
    test = [i for i, s in enumerate(samples) if s.family in held_set]
    return train, test, sorted(held)


def data_hash(records: Iterable[dict]) -> str:
    """A stable hash of the training records (their ids and labels), recorded in each artifact."""
    h = hashlib.sha256()
    for rec in sorted(records, key=lambda r: str(r.get("id"))):
        h.update(json.dumps([rec.get("id"), rec.get("device"), labels(rec)], sort_keys=True).encode())
    return h.hexdigest()[:16]
