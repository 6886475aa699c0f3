"""Build the public training set: the graph of every configuration of the public whole-model measurements.

The rows are `predictor.public_train.training_rows()` (NVIDIA DeepLearningExamples on A100, mapped by
`predictor.public_data`, and the MIGProfiler encoders on every MIG slice of an A100-40GB). For every distinct
(zoo spec, batch, analysis dtype) this runs the analyzer once and keeps what training needs without TVM:

- the node features X (|V|, F) float32 and the data-flow edges (2, |E|) int64,
- the static features (names, values) and the per-op arrays of the roofline bound (`predictor.roofline.op_arrays`),
- the kernel view as `predictor.kernel_model.kernel_arrays` holds it, every field per kernel (kind, dtype, FLOPs,
  bytes, b, m, n, k, launch count, and the flags: launched inside a library call, GEMM with a fused bias,
  transposed / grouped convolution, copy of a strided view), so that `kernel_latency_arrays` costs it on any device
  and precision at train time exactly as `preflight predict` costs the live analysis
  (`tests/test_public_train_graphs.py`),
- the bytes of the graph's inputs (the batch a timed loop may copy from the host),
- which ops each kernel covers (CSR: `k_op_ptr` (K+1,), `k_op_idx`), to spread each kernel's modelled time over
  its nodes (the per-node kernel-model time feature).

Each configuration is cached as `cache/public-graphs/<key>.npz` (gitignored; reused on a rerun); `pack` then writes
all of them into one compressed file committed with the repository (`predictor.public_train.GRAPHS_PATH`), so
that training needs neither TVM nor the analyzer.

Configurations the committed file already holds are taken from it (`--reuse`, default the committed file; its
feature version must be this preflight's), so a rebuild after a mapping change featurises only the new ones. A file
or cached configuration without one of the kernel columns (`predictor.public_train._KERNEL`: written before the
column existed) is not reused: every configuration is featurised anew.

Usage: python -m analyzer.public_dataset [--cache cache/public-graphs] [--out PATH] [--limit N] [--reverse]
       [--reuse PATH | --no-reuse]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from predictor.public_train import (
    _KERNEL,
    _KERNEL_DEFAULTS,
    GRAPHS_PATH,
    graph_id,
    missing_kernel_columns,
    pack_graphs,
    training_rows,
    unpack_graphs,
)

DEFAULT_CACHE = Path("cache/public-graphs")


def featurize_public(spec: str, batch: int, dtype: str) -> dict[str, np.ndarray]:
    """The arrays kept for one configuration (module docstring); `dtype` as `analyzer.api.analyze` takes it
    ("float32", "float16", "bfloat16", "amp-float16", "amp-bfloat16")."""
    from passes.features import FEATURE_VERSION
    from predictor.kernel_model import kernel_arrays
    from predictor.roofline import op_arrays

    from .api import analyze

    report = analyze(f"zoo:{spec}", batch=batch, dtype=None if dtype == "float32" else dtype)
    a = report.analysis
    if getattr(a, "repeat", None) is not None or getattr(a, "steps", None) is not None:
        # the graph holds 2 layers (a few steps) of the model: `predict` answers such a graph with the kernel model,
        # and its kernel list is not the model's (`Analysis.launched_kernels`)
        raise ValueError("layers or steps extrapolated: not a training graph")
    names = sorted(a.static_features)
    kernels = a.kernels
    ka = kernel_arrays(kernels)
    ptr = np.zeros(len(kernels) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(k.ops) for k in kernels])
    idx = np.array([i for k in kernels for i in k.ops], dtype=np.int64)
    return {
        "x": np.asarray(a.x, dtype=np.float32),
        "edge_index": np.asarray(a.edge_index, dtype=np.int64),
        "static_names": np.array(names),
        "static": np.array([a.static_features[k] for k in names], dtype=np.float64),
        **op_arrays(a.ops),
        # every field of the kernel arrays, one entry per kernel: `count` and the flags are None when no row has one
        # (an object array np.load(allow_pickle=False) refuses), stored as their value then (one launch, False)
        **{f"k_{f}": v for f in ka.__dataclass_fields__ if (v := getattr(ka, f)) is not None},
        **{n: f(len(kernels)) for n, f in _KERNEL_DEFAULTS.items() if getattr(ka, n[2:]) is None},
        "k_op_ptr": ptr,
        "k_op_idx": idx,
        "input_bytes": np.array(sum(v.tensor.nbytes for v in a.graph.inputs), dtype=np.int64),
        "feature_version": np.array(FEATURE_VERSION),
    }


def _complete(path: Path) -> bool:
    """Whether a cached configuration holds every kernel array (`_KERNEL`); False for a missing or unreadable one."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return set(_KERNEL) <= set(z.files)
    except (OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Featurise every configuration of the public measurements.")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--out", type=Path, default=GRAPHS_PATH)
    ap.add_argument("--limit", type=int, default=None, help="featurise at most N new configurations (testing)")
    ap.add_argument("--reverse", action="store_true", help="featurise in reverse order (a second process)")
    ap.add_argument("--reuse", type=Path, default=GRAPHS_PATH, help="a packed graph file to take configurations from")
    ap.add_argument("--no-reuse", action="store_true", help="featurise every configuration anew")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    args.cache.mkdir(parents=True, exist_ok=True)
    configs = sorted({(r.spec, r.batch, r.analysis_dtype) for r in training_rows()})
    stale = [c for c in configs if not _complete(args.cache / f"{graph_id(*c)}.npz")]
    for c in stale:  # a cached configuration from before a kernel column existed: featurised anew
        (args.cache / f"{graph_id(*c)}.npz").unlink(missing_ok=True)
    lacks = missing_kernel_columns(args.reuse) if not args.no_reuse and args.reuse.exists() else []
    if lacks:
        print(f"{args.reuse} lacks {', '.join(lacks)}: featurising every configuration anew", file=sys.stderr)
    elif not args.no_reuse and args.reuse.exists():
        from passes.features import FEATURE_VERSION

        packed = unpack_graphs(args.reuse)
        reused = 0
        for c in configs:
            arrays = packed.get(graph_id(*c))
            path = args.cache / f"{graph_id(*c)}.npz"
            if arrays is None or path.exists() or str(arrays["feature_version"]) != FEATURE_VERSION:
                continue
            np.savez_compressed(path, **{k: v for k, v in arrays.items() if k != "config"})
            reused += 1
        print(f"{reused} configurations taken from {args.reuse}", file=sys.stderr)
    todo = [c for c in configs if not (args.cache / f"{graph_id(*c)}.npz").exists()]
    if args.reverse:
        todo.reverse()
    if args.limit is not None:
        todo = todo[: args.limit]
    for n, (spec, batch, dtype) in enumerate(todo, 1):
        if (args.cache / f"{graph_id(spec, batch, dtype)}.npz").exists():  # another process made it
            continue
        t = time.perf_counter()
        try:
            arrays = featurize_public(spec, batch, dtype)
        except Exception as exc:  # noqa: BLE001 - name the config and go on; the pack step reports what is missing
            print(f"[{n}/{len(todo)}] {spec} batch={batch} {dtype}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        path = args.cache / f"{graph_id(spec, batch, dtype)}.npz"
        tmp = path.with_suffix(".tmp.npz")
        np.savez_compressed(tmp, **arrays)
        tmp.replace(path)
        print(f"[{n}/{len(todo)}] {spec} batch={batch} {dtype}: {time.perf_counter() - t:.1f}s", file=sys.stderr)
    graphs = {}
    missing = []
    for c in configs:
        path = args.cache / f"{graph_id(*c)}.npz"
        if not path.exists():
            missing.append(c)
            continue
        with np.load(path, allow_pickle=False) as z:
            graphs[graph_id(*c)] = {k: z[k] for k in z.files} | {"config": np.array(json.dumps(c))}
    if missing:
        sys.exit(f"error: {len(missing)} of {len(configs)} configurations not featurised, e.g. {missing[0]}")
    pack_graphs(graphs, args.out)
    print(f"{len(configs)} configurations -> {args.out} ({args.out.stat().st_size / 1e6:.2f} MB)", file=sys.stderr)


if __name__ == "__main__":
    main()
