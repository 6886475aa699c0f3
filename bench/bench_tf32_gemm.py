"""Float32 GEMMs with and without TF32 on a GPU against the kernel model (`kernel_latency(..., tf32_matmul=...)`).

On a CUDA machine it times `a @ b` (float32, random data) for each shape with
`torch.backends.cuda.matmul.allow_tf32` False and True: 3 warm-up calls, then the median of 25 calls each timed
with CUDA events around the call (synchronised after each). Without a GPU, `--from FILE` reads such timings (JSON
Lines {m, n, k, tf32, ms}) and compares them. Prints measured ms and TFLOP/s, the model's estimate (execution +
launch) and its error.

Usage: python bench/bench_tf32_gemm.py [--device h100-80gb] [--from FILE.jsonl] [--save FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor.devices import get_device  # noqa: E402
from predictor.kernel_model import kernel_latency  # noqa: E402

SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 2048, 2048), (1024, 768, 768), (1024, 3072, 768),
          (1024, 768, 3072), (16384, 1024, 512), (512, 512, 512)]  # fmt: skip


class Gemm:
    """A float32 (m x k) @ (k x n) kernel of the contract."""

    def __init__(self, m: int, n: int, k: int):
        self.kind, self.dtype, self.flops = "gemm", "float32", 2 * m * n * k
        self.bytes_read, self.bytes_written = 4 * (m * k + k * n), 4 * m * n
        self.params = {"b": 1, "m": m, "n": n, "k": k}


def measure() -> list[dict]:
    import torch

    rows = []
    for m, n, k in SHAPES:
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            for _ in range(3):
                a @ b
            torch.cuda.synchronize()
            times = []
            for _ in range(25):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                a @ b
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            rows.append({"m": m, "n": n, "k": k, "tf32": tf32, "ms": sorted(times)[len(times) // 2]})
    torch.backends.cuda.matmul.allow_tf32 = False
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="h100-80gb")
    ap.add_argument("--from", dest="source", default=None)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    rows = [json.loads(x) for x in Path(args.source).read_text().splitlines()] if args.source else measure()
    if args.save:
        Path(args.save).write_text("".join(json.dumps(r) + "\n" for r in rows))
    device = get_device(args.device)
    print(f"{'m x n x k':>18} {'tf32':>5} {'meas ms':>8} {'TFLOP/s':>8} {'model ms':>9} {'error':>7}")
    for r in rows:
        kt = kernel_latency([Gemm(r["m"], r["n"], r["k"])], device, tf32_matmul=r["tf32"])
        est = float(kt.seconds[0]) * 1e3
        shape = f"{r['m']}x{r['n']}x{r['k']}"
        print(f"{shape:>18} {r['tf32']!s:>5} {r['ms']:>8.4f} {2 * r['m'] * r['n'] * r['k'] / r['ms'] / 1e9:>8.1f} "
              f"{est:>9.4f} {100 * (est / r['ms'] - 1):>6.1f}%")  # fmt: skip


if __name__ == "__main__":
    main()
