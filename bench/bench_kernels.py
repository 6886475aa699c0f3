"""Kernel view benchmarks (issue 17); prints two tables.

1. Warm analysis time of zoo:resnet50 and zoo:bert_base, before (torch's full core-ATen decomposition, as
   preflight imported PyTorch programs until this change) and after (decompose only what TVM's importer cannot
   convert). Median of `--repeat` runs after one warm-up, in one process. Goal: <= 2 s each.
2. For the smallest variant of every zoo family: Relax ops vs kernels, bytes of the Relax-op view vs the
   kernel view, the eager dispatch trace's kernels and bytes (tests/kernel_trace.py; input-dependent / all),
   analysis CPU time, the kernel pass's CPU time and its share of the analysis (goal <= 10%), and the roofline bound
   on an H100 (efficiency 1, no launch time) over the Relax ops vs over the kernels. The latency estimate of
   the kernel time model is not part of this bench.

Usage: python bench/bench_kernels.py [--repeat 3] [--skip-timing] [--skip-table] [--families resnet,bert]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

TIMED = ("zoo:resnet50", "zoo:bert_base")
_KIND_CATEGORY = {"gemm": "matmul", "conv": "conv", "attention": "attention"}


def _median_seconds(spec: str, repeat: int) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds of this process) of `repeat` warm analyses."""
    from analyzer import analyze

    analyze(spec)  # warm: imports, first trace, caches
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        analyze(spec)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def timing(repeat: int) -> None:
    from analyzer.frontends import torch_frontend

    after = {spec: _median_seconds(spec, repeat) for spec in TIMED}
    keep = torch_frontend._decompose_for_tvm
    torch_frontend._decompose_for_tvm = lambda ep, _keep: ep.run_decompositions()  # the old import path
    try:
        before = {spec: _median_seconds(spec, repeat) for spec in TIMED}
    finally:
        torch_frontend._decompose_for_tvm = keep
    print(f"\n1. Warm analysis time, median of {repeat} (goal <= 2 s each); wall and CPU seconds of this process")
    head = ("before wall", "after wall", "before CPU", "after CPU", "CPU ratio")
    print(f"{'model':16s} " + " ".join(f"{h:>11s}" for h in head))
    for spec in TIMED:
        (bw, bc), (aw, ac) = before[spec], after[spec]
        print(f"{spec:16s} {bw:11.2f} {aw:11.2f} {bc:11.2f} {ac:11.2f} {bc / ac:10.2f}x")


def _bound_ms(records, device, kind_of) -> float:
    from predictor.roofline import op_bound

    total = 0.0
    for r in records:
        category, dtype = kind_of(r)
        total += op_bound(0, r.flops, r.bytes_read + r.bytes_written, category, dtype, device).seconds
    return total * 1e3


def table(families: list[str] | None) -> None:
    from kernel_trace import trace_kernels

    import zoo
    from analyzer import analyze
    from passes.kernels import kernel_view
    from predictor.devices import get_device

    h100 = get_device("h100-80gb")
    print("\n2. Kernel view vs Relax ops, smallest variant of every zoo family (batch 1, float32)")
    print(
        f"{'model':20s} {'ops':>5s} {'kernels':>7s} {'trace':>11s} {'ops MB':>8s} {'kern MB':>8s} "
        f"{'trace MB':>17s} {'analysis CPU s':>10s} {'pass ms':>8s} {'pass %':>6s} {'bound ops ms':>12s} "
        f"{'bound kern ms':>13s}"
    )
    worst = 0.0
    for family in zoo.list_families():
        if families and family.name not in families:
            continue
        variant = next(iter(family.variants))
        t = time.process_time()
        report = analyze(f"zoo:{variant}")
        seconds = time.process_time() - t
        a = report.analysis
        t = time.process_time()
        view = kernel_view(a.graph, a.ops)
        pass_s = time.process_time() - t
        worst = max(worst, pass_s / seconds)
        built = zoo.build(variant, batch=1, device="meta")
        try:
            trace = trace_kernels(built.module, built.example_inputs)
        except (RuntimeError, NotImplementedError):  # a forward that reads data (HF decoders): on the CPU
            built = zoo.build(variant, batch=1, device="cpu")
            trace = trace_kernels(built.module, built.example_inputs)
        live = [c for c in a.ops if not c.folded]
        bound_ops = _bound_ms(live, h100, lambda c: (c.category, c.output.dtype))
        bound_kernels = _bound_ms(view.kernels, h100, lambda k: (_KIND_CATEGORY.get(k.kind, "other"), k.dtype))
        s = view.summary
        print(
            f"{variant:20s} {s.relax_ops:5d} {s.kernels:7d} {trace.dependent_count:5d}/{trace.count:<5d} "
            f"{s.bytes_ops / 1e6:8.2f} {s.bytes_kernels / 1e6:8.2f} "
            f"{trace.dependent_bytes / 1e6:8.2f}/{trace.bytes / 1e6:<8.2f} {seconds:10.2f} {pass_s * 1e3:8.1f} "
            f"{100 * pass_s / seconds:6.2f} {bound_ops:12.4f} {bound_kernels:13.4f}"
        )
    print(f"largest kernel-pass share of analysis time: {100 * worst:.2f}% (goal <= 10%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--skip-table", action="store_true")
    parser.add_argument("--families", default="", help="comma-separated zoo family names (default: all)")
    args = parser.parse_args()
    if not args.skip_timing:
        timing(args.repeat)
    if not args.skip_table:
        table([f for f in args.families.split(",") if f] or None)


if __name__ == "__main__":
    main()
