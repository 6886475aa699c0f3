"""Analyzer benchmarks; prints one table per goal (issue 2).

1. `preflight analyze` end to end on a ~4000-node ONNX model vs. TVM's ONNX import alone
   (python start, `import tvm`, `from_onnx`), both as fresh processes in the same run. Goal <= 1.5x.
2. Pass time per operator at 1k and 10k operators (extraction + every pass): goal within 1.5x.
3. A Llama-7B-sized config on the meta device: wall time and peak RSS. Goal <= 30 s, <= 2 GB.

Usage: python bench/bench_analyze.py [--repeat 3] [--skip-llama]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def onnx_chain(path: Path, blocks: int, width: int = 64) -> int:
    """A residual MLP: each block MatMul, Add(bias), Relu, Add(residual) = 4 nodes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    for i in range(blocks):
        w, b = f"w{i}", f"b{i}"
        inits += [
            numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), w),
            numpy_helper.from_array(rng.standard_normal((width,)).astype(np.float32), b),
        ]
        nodes += [
            helper.make_node("MatMul", [prev, w], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", b], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
            helper.make_node("Add", [f"r{i}", prev], [f"y{i}"]),
        ]
        prev = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, width])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [8, width])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return len(nodes)


IMPORT_ONLY = (
    "import onnx, tvm, sys; from tvm.relax.frontend.onnx import from_onnx; "
    "from_onnx(onnx.load(sys.argv[1]), shape_dict={'x': [8, 64]})"
)


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def bench_onnx(repeat: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "chain.onnx"
        n = onnx_chain(path, 1000)
        cli = [sys.executable, "-m", "analyzer.cli", "analyze", str(path), "--format", "json", "-o", os.devnull]
        imp = [sys.executable, "-c", IMPORT_ONLY, str(path)]
        timed(imp)  # warm the file cache
        t_imp = statistics.median(timed(imp) for _ in range(repeat))
        t_cli = statistics.median(timed(cli) for _ in range(repeat))
    print(f"\n1. ONNX model with {n} nodes, median of {repeat} fresh processes")
    print("| what | seconds |\n|---|---:|")
    print(f"| TVM import alone (python, import tvm, from_onnx) | {t_imp:.2f} |")
    print(f"| preflight analyze --format json | {t_cli:.2f} |")
    print(f"| ratio (goal <= 1.5) | {t_cli / t_imp:.2f} |")


def relax_chain(n_ops: int):
    from tvm import relax

    x = relax.Var("x", relax.TensorType([8, 64], "float32"))
    w = relax.Var("w", relax.TensorType([64, 64], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w], attrs={"num_input": 1}):
        with bb.dataflow():
            y = x
            for i in range(n_ops // 3):
                h = bb.emit(relax.op.matmul(y, w))
                h = bb.emit(relax.op.nn.relu(h))
                y = bb.emit(relax.op.add(h, y)) if i % 2 else bb.emit(relax.op.nn.gelu(h))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def bench_scaling(repeat: int) -> None:
    from passes.analysis import analyze_graph
    from passes.tvm_ir import extract

    print(f"\n2. Pass time per operator (extract + costs + liveness + features), best of {repeat}")
    print("| ops | total ms | us per op |\n|---:|---:|---:|")
    per = {}
    for n in (1000, 10000):
        mod = relax_chain(n)
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            a = analyze_graph(extract(mod))
            _ = a.x, a.edge_index
            best = min(best, time.perf_counter() - t)
        ops = len(a.ops)
        per[n] = best / ops
        print(f"| {ops} | {best * 1e3:.0f} | {per[n] * 1e6:.1f} |")
    print(f"| ratio 10k/1k per op (goal <= 1.5) | | {per[10000] / per[1000]:.2f} |")


LLAMA = """
import resource, time, sys
t = time.perf_counter()
from analyzer.api import analyze
r = analyze('zoo:llama_7b')
dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f'{dt:.1f} {rss:.0f} {r.totals.params} {r.totals.flops} {r.totals.op_count}')
"""


def bench_llama() -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    out = subprocess.run(
        [sys.executable, "-c", LLAMA], check=True, capture_output=True, text=True, cwd=ROOT, env=env
    ).stdout.split()
    dt, rss, params, flops, ops = out[-5:]
    print("\n3. zoo:llama_7b (meta device, batch 1, default sequence length), one fresh process")
    print("| wall s (goal <= 30) | peak RSS MiB (goal <= 2048) | params | FLOPs | ops |\n|---:|---:|---:|---:|---:|")
    print(f"| {dt} | {rss} | {int(params):,} | {int(flops):.3e} | {ops} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-llama", action="store_true")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores")
    bench_onnx(args.repeat)
    bench_scaling(args.repeat)
    if not args.skip_llama:
        bench_llama()


if __name__ == "__main__":
    main()
