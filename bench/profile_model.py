"""Profile one eager forward of a zoo model: GPU kernels, host-device copies and synchronisations, GPU idle time.

For a GPU session (docs/kernel-model.md, "Whole models on the H100: where the time goes"): it says whether a
model's measured time is in its kernels, in the host's dispatch, or in synchronisations such as the per-layer copy
of BEiT's CPU position index. The model is built and timed as `predictor.measure.worker` does (eval,
`inference_mode`, `cudnn.benchmark`, warm-ups), then `--runs` forwards are profiled with `torch.profiler` and
printed per forward:

- the wall time between the first and last GPU activity of the forwards;
- GPU busy time: the union of the kernels' and copies' intervals; idle = wall - busy;
- kernels by name: count and total GPU time (the top `--top`);
- copies on the device timeline (`Memcpy HtoD` and the like: count) and the CUDA runtime's synchronising
  calls (`cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaMemcpy`/`cudaMemcpyAsync`) with their host time.

Only torch and the zoo are needed (both on the device machines); `--device cpu` runs the same code without a GPU
(CPU operators only: a dry run). Prints a table; `--json PATH` also writes the numbers.

Usage: python bench/profile_model.py 'beit_base?resolution=224' [--batch 1] [--dtype float32] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cudaMemcpyAsync", "cudaEventSynchronize")


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length of a union of [start, end) intervals (us)."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="zoo spec, e.g. 'beit_base?resolution=224'")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    import zoo

    cuda = args.device == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
    built = zoo.build(args.spec, batch=args.batch, dtype=getattr(torch, args.dtype), device=args.device)
    model, inputs = built.module.eval(), built.example_inputs
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.inference_mode():
        for _ in range(args.warmup):
            model(*inputs)
        if cuda:
            torch.cuda.synchronize()
        with profile(activities=activities) as prof:
            for _ in range(args.runs):
                model(*inputs)
            if cuda:
                torch.cuda.synchronize()
    events = prof.events()
    gpu, kernels, copies, syncs = [], defaultdict(lambda: [0, 0.0]), [0], defaultdict(lambda: [0, 0.0])
    for e in events:
        start, dur = e.time_range.start, e.time_range.elapsed_us()
        on_gpu = getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
        if on_gpu:
            gpu.append((start, start + dur))
            if "Memcpy" in e.name:
                copies[0] += 1
            kernels[e.name[:90]][0] += 1
            kernels[e.name[:90]][1] += dur
        elif e.name in SYNC_CALLS:
            syncs[e.name][0] += 1
            syncs[e.name][1] += dur
    n = max(args.runs, 1)
    wall = (max(e for _, e in gpu) - min(s for s, _ in gpu)) if gpu else 0.0
    busy = _union_us(gpu)
    print(f"{args.spec} batch {args.batch} {args.dtype} on {args.device}, per forward ({args.runs} profiled):")
    if cuda:
        print(
            f"  GPU span {wall / n / 1e3:.3f} ms, busy {busy / n / 1e3:.3f} ms, idle {(wall - busy) / n / 1e3:.3f} ms"
        )
        print(f"  device activities {len(gpu) / n:.1f}, of which copies (Memcpy) {copies[0] / n:.1f}")
    for name, (count, us) in sorted(syncs.items()):
        print(f"  host {name}: {count / n:.1f} calls, {us / n / 1e3:.3f} ms")
    print(f"  {'GPU activity (first 90 chars)':90s} {'per fwd':>8s} {'ms/fwd':>8s}")
    for name, (count, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"  {name:90s} {count / n:8.1f} {us / n / 1e3:8.3f}")
    if not cuda:
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top)
        print(table)
    if args.json:
        doc = {
            "spec": args.spec,
            "batch": args.batch,
            "dtype": args.dtype,
            "device": args.device,
            "runs": args.runs,
            "gpu_span_ms": wall / n / 1e3,
            "gpu_busy_ms": busy / n / 1e3,
            "copies": copies[0] / n,
            "sync_calls": {k: {"calls": c / n, "ms": us / n / 1e3} for k, (c, us) in syncs.items()},
            "kernels": {k: {"count": c / n, "ms": us / n / 1e3} for k, (c, us) in kernels.items()},
            "torch": torch.__version__,
        }
        Path(args.json).write_text(json.dumps(doc, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
