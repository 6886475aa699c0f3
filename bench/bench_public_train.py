"""Time training the GraphSAGE on the whole set, public A100 and own H100 (issue 30 asks < 10 min on 2 cores).

Reads only the committed data (data/public-models/*.jsonl, data/h100-80gb/models/*.jsonl and public-graphs.npz; no
TVM), builds the inputs, trains the shipped configuration (`predictor.public_train.FitConfig` defaults) on every
trainable row and prints a table.

Usage: python bench/bench_public_train.py [--epochs N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=None)
    args = ap.parse_args()
    import torch

    from predictor import public_train as pt

    torch.set_num_threads(1)  # as `python -m predictor.public_train` (two threads: 17x slower here)
    t0 = time.perf_counter()
    graphs = pt.load_graphs()
    rows = pt.training_rows()
    t1 = time.perf_counter()
    exs = pt.examples(rows, graphs)
    t2 = time.perf_counter()
    cfg = pt.FitConfig() if args.epochs is None else pt.FitConfig(epochs=args.epochs)
    fitted, train = pt.train_final(exs, graphs, None, cfg)
    t3 = time.perf_counter()
    print(f"{'step':<44}{'seconds':>9}")
    print(f"{'load graphs + rows':<44}{t1 - t0:>9.1f}")
    print(f"{'kernel model + inputs':<44}{t2 - t1:>9.1f}")
    what = f"train ({len(train)} rows, {cfg.epochs} epochs, {cfg.ensemble} network{'s' if cfg.ensemble > 1 else ''})"
    print(f"{what:<44}{t3 - t2:>9.1f}")
    print(f"{'total':<44}{t3 - t0:>9.1f}")


if __name__ == "__main__":
    main()
