"""Kernel time model benchmark: how long costing N kernels takes (the report sweeps many batches and slices).

Random kernels of every kind and dtype of the kernel contract (seeded); times, median of --repeat runs:
building the arrays (`kernel_arrays`), the whole `kernel_latency` call on one device, costing the prepared arrays
on every MIG slice of that device (`kernel_latency_arrays`), and `latency_bound_ms`.

Then the committed table's half-precision entries against the Vidur float16 kernel durations (data/vidur-ops):
per GPU and kind, the fitted parameters and the MAPE of the model's execution time (no launch: the data has none)
on kernels >= 50 us and on all, beside the roofline bound; and how long costing those kernels takes. The
before / held-out-model figures are in predictor/KERNEL_EVAL.md (`python -m predictor.kernel_fit fit`).

Usage: python bench/bench_kernel_model.py [--kernels 5000] [--device h100-80gb] [--repeat 7] [--no-fp16]
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
    ap.add_argument("--no-fp16", action="store_true", help="skip the half-precision table")
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
    if not args.no_fp16:
        half_table(args.repeat)


def half_table(repeat: int) -> None:
    """The committed half-precision entries on the Vidur kernel durations (module docstring)."""
    from predictor import kernel_fit as kf
    from predictor.devices import DEVICES
    from predictor.kernel_model import kernel_arrays, kernel_latency_arrays, load_params

    table = load_params()
    start = time.perf_counter()
    records = kf.read_vidur(ROOT / "data" / "vidur-ops")
    read_s = time.perf_counter() - start
    print(f"\nVidur float16 kernel durations: {len(records):,} kernels read in {read_s:.2f} s; committed table")
    head = f"  {'device':<10} {'kind':<12} {'n':>6} {'e_compute':>9} {'e_memory':>8} {'exec us':>7}"
    print(head + f" {'MAPE>=50us':>10} {'MAPE all':>8} {'roofline>=50us':>14} {'cost ms':>8}")
    for dev in sorted({r.device for r in records}):
        for kind in ("gemm", "norm", "elementwise"):
            recs = [r for r in records if r.device == dev and r.kind == kind]
            arrays = kernel_arrays(recs)
            y = np.array([r.latency_s for r in recs])
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                kt = kernel_latency_arrays(arrays, DEVICES[dev], params=table)
                times.append(time.perf_counter() - t0)
            execution = np.maximum(kt.compute_s, kt.memory_s)  # exec_us included, no launch
            ape = np.abs(execution / y - 1) * 100
            bound = np.abs(kt.bound_s / y - 1) * 100
            big = y >= 50e-6
            p = table.lookup(dev, kind, "float16")
            print(
                f"  {dev:<10} {kind:<12} {len(recs):>6,} {p.e_compute:>9.3f} {p.e_memory:>8.3f} {p.exec_us:>7.2f}"
                f" {ape[big].mean():>10.1f} {ape.mean():>8.1f} {bound[big].mean():>14.1f}"
                f" {statistics.median(times) * 1e3:>8.1f}"
            )


if __name__ == "__main__":
    main()
