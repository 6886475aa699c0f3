"""Kernel time model benchmark: how long costing N kernels takes (the report sweeps many batches and slices).

Random kernels of every kind and dtype of the kernel contract (seeded); times, median of --repeat runs:
building the arrays (`kernel_arrays`), the whole `kernel_latency` call on one device, costing the prepared arrays
on every MIG slice of that device (`kernel_latency_arrays`), and `latency_bound_ms`.

Usage: python bench/bench_kernel_model.py [--kernels 5000] [--device h100-80gb] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KINDS = ("gemm", "conv", "attention", "elementwise", "reduction", "softmax", "norm", "pooling", "copy", "other")
DTYPES = ("float32", "float16", "bfloat16", "int8")


@dataclass(frozen=True)
class Kernel:
    kind: str
    flops: int
    bytes_read: int
    bytes_written: int
    dtype: str
    params: dict = field(default_factory=dict)


def random_kernels(n: int, seed: int = 0) -> list[Kernel]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        kind, dtype = str(rng.choice(KINDS)), str(rng.choice(DTYPES))
        flops, nbytes = int(rng.integers(0, 10**12)), int(rng.integers(0, 10**10))
        if kind == "gemm":
            params = {"b": 1, "m": int(rng.integers(1, 8192)), "n": int(rng.integers(1, 8192)), "k": 1024}
        elif kind == "conv":
            params = {"n": 8, "c_in": 64, "c_out": 128, "out_spatial": [56, 56], "kernel": [3, 3], "groups": 1}
        elif kind == "attention":
            params = {"b": 8, "h": 16, "h_kv": 16, "s": 512, "t": 512, "d": 64, "dv": 64, "backend": "flash"}
        else:
            params = {"numel": nbytes // 4}
        out.append(Kernel(kind, flops, nbytes // 2, nbytes - nbytes // 2, dtype, params))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=5000)
    ap.add_argument("--device", default="h100-80gb")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    from predictor.devices import get_device
    from predictor.kernel_model import kernel_arrays, kernel_latency, kernel_latency_arrays, latency_bound_ms

    device = get_device(args.device)
    kernels = random_kernels(args.kernels)
    kernel_latency(kernels[:10], device)  # load the table once

    def timed(fn) -> float:
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3

    arrays = kernel_arrays(kernels)
    rows = [
        ("kernel_arrays", timed(lambda: kernel_arrays(kernels))),
        ("kernel_latency (whole GPU)", timed(lambda: kernel_latency(kernels, device))),
        (
            f"kernel_latency_arrays x {len(device.mig)} MIG slices",
            timed(lambda: [kernel_latency_arrays(arrays, device, p) for p in device.mig]),
        ),
        ("latency_bound_ms", timed(lambda: latency_bound_ms(kernels, device))),
    ]
    print(f"{args.kernels:,} kernels on {device.key}, median of {args.repeat} runs")
    for name, ms in rows:
        print(f"  {name:<40} {ms:8.1f} ms")


if __name__ == "__main__":
    main()
