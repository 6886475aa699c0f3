"""The kernel model's busy time by kernel class for every whole model measured on our H100, for the power fit.

Writes data/h100-80gb/models-kernel-shares.json: for each successful record of data/h100-80gb/models (eager PyTorch,
the harness of `predictor.measure`: power_w = NVML energy over the timed loop / its duration), preflight's analysis
of the same zoo spec, batch and dtype, its kernel view costed by the kernel model on `h100-80gb` (torch's default
matmul precision, as the records ran: `env.tf32_matmul` false), and the kernels' eager time
(`KernelTimes.eager_s`, seconds) summed per class of `predictor.power.kernel_classes`:

    gap                  kernels at the launch floor
    memory               memory-bound kernels
    compute_tensor       compute-bound kernels on tensor cores (float16/bfloat16 gemm, conv, attention; float32 conv
                         on TF32)
    compute_cuda         compute-bound kernels on FP32 CUDA cores (float32 gemm and attention, every other kind)

and the same split once more by the kernels' dtype (`float32` or not: `*_fp32` keys), and each of these kernels'
time at the roofline's peak rate (`*_peak`: what the float32 power term reads, `power.shares_from_classes`). The
fit reads the shares of the kernel model's eager time (`eager_ms`). `python -m predictor.power_fit`
reads that file (predictor/ never imports TVM, so the analyses are cached here), with the measured power and the
timed loop's time per inference from the records themselves. The file records the SHA-256 of the kernel-parameter
table it was costed with; `power_fit` says so when the committed table has changed since.

Usage: python bench/h100_model_shares.py [--out PATH] [--limit N]   (101 analyses, ~2-60 s each here)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ROOT / "data" / "h100-80gb" / "models" / "shard-000-of-001.jsonl"
OUT = ROOT / "data" / "h100-80gb" / "models-kernel-shares.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--limit", type=int, default=0, help="only the first N records (0: all)")
    args = ap.parse_args()

    import warnings

    warnings.filterwarnings("ignore")
    from analyzer import analyze
    from predictor.devices import get_device
    from predictor.kernel_model import PARAMS_PATH, kernel_arrays, kernel_latency_arrays
    from predictor.power import kernel_classes

    dev = get_device("h100-80gb")
    recs = [json.loads(line) for line in MODELS.read_text().splitlines() if line.strip()]
    recs = [r for r in recs if r.get("status") == "ok"]
    if args.limit:
        recs = recs[: args.limit]
    rows, t0 = [], time.perf_counter()
    for r in recs:
        t1 = time.perf_counter()
        if r["env"].get("tf32_matmul"):
            raise SystemExit(f"{r['id']}: measured with TF32 matmuls, not costed here")
        a = analyze(f"zoo:{r['zoo']}", batch=r["batch"], dtype=r["dtype"]).analysis
        arrays = kernel_arrays(getattr(a, "launched_kernels", a.kernels))
        t = kernel_latency_arrays(arrays, dev)
        rows.append(
            {
                "id": r["id"],
                "zoo": r["zoo"],
                "family": r["family"],
                "dtype": r["dtype"],
                "batch": r["batch"],
                "eager_ms": round(t.eager_ms, 6),
                "class_ms": {k: round(v * 1e3, 6) for k, v in kernel_classes(arrays, t, dev).items()},
            }
        )
        print(f"{r['zoo'][:48]:48s} {r['dtype']:8s} {r['batch']:4d} {time.perf_counter() - t1:6.1f} s", flush=True)
    doc = {
        "schema": "preflight.h100_model_kernel_classes/1",
        "created_by": "python bench/h100_model_shares.py",
        "device": dev.key,
        "records": str(MODELS.relative_to(ROOT)),
        "kernel_params_sha256": hashlib.sha256(PARAMS_PATH.read_bytes()).hexdigest(),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(rows)} rows in {time.perf_counter() - t0:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
