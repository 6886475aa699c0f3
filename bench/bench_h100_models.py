"""Where the whole-model time on the H100 goes: the kernel model against the kernel sweep, model by model.

For each whole model measured on the H100 (data/h100-80gb/models: eager PyTorch, CUDA events around each forward,
back to back), print:

1. the measurement (median, p10, min latency in ms, energy per inference, average power) and preflight's estimate
   (the kernel model's eager sum, `KernelTimes.eager_ms`);
2. per kernel kind of preflight's kernel view (`+bias`: a GEMM with its bias add fused): the kernel count, the
   model's execution time (max(compute, memory), no launch), the execution "as the sweep measured it", and the
   eager sum. "As the sweep measured it": each kernel's nearest record of the H100 kernel sweep
   (data/h100-80gb/kernels: graph-timed kernel executions, no launch; same kind and dtype, same op for the
   memory-bound kinds, nearest shape in log space, a GEMM's bias epilogue matched where the sweep has both), its
   measured time scaled by the model's ratio between the two shapes (the model only interpolates between the
   record and the kernel; the time is the measurement's);
3. two sums built from those measured executions: `max` = sum over kernels of max(measured execution, launch floor)
   (the eager composition the kernel model uses, with the sweep's executions), and `host+gpu` = the sum of the
   measured executions plus the host's dispatch of every kernel at `--host-us` each (no overlap at all: an upper
   bound for a forward that synchronises often).

A model measured slower than `host+gpu` spends its time in neither the kernels' execution nor their dispatch
(docs/kernel-model.md, "Whole models on the H100: where the time goes"). No GPU needed (the committed data).

Usage: python bench/bench_h100_models.py [--host-us 19.1] [--kernels] [--dtype float16] [--batch 256] [--only SPEC ...]

(`--dtype`, `--batch`, `--only`: only the records of that dtype, batch, or whose zoo spec starts with one of the
given prefixes; the 101 records take about 15 minutes, one model 10-60 s.)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ROOT / "data" / "h100-80gb" / "models"
SWEEP = ROOT / "data" / "h100-80gb" / "kernels"
# the sweep's op names for the kernel view's memory-bound ops (compared op with op)
OPS = {
    "relax.add": "add",
    "relax.multiply": "mul",
    "relax.nn.gelu": "gelu",
    "relax.nn.relu": "relu",
    "relax.nn.layer_norm": "layer_norm",
    "relax.nn.max_pool2d": "max_pool2d",
    "relax.nn.adaptive_avg_pool2d": "adaptive_avg_pool2d",
    "relax.concat": "cat",
    "relax.take": "embedding",
    "relax.mean": "mean",
    "relax.tanh": "tanh",
    "relax.nn.softmax": "softmax",
    "relax.image.resize2d": "interpolate",
    "relax.subtract": "sub",
    "relax.divide": "div",
    "relax.exp": "exp",
    "relax.sqrt": "sqrt",
    "relax.rsqrt": "rsqrt",
    "relax.sigmoid": "sigmoid",
    "relax.nn.silu": "silu",
    "relax.power": "pow",
    "relax.negative": "neg",
    "relax.permute_dims": "permute",
    "relax.astype": "cast",
    "relax.nn.rms_norm": "rms_norm",
    "relax.max": "amax",
    "relax.sum": "sum",
    "relax.variance": "var",
    "relax.erf": "erf",
    "relax.clip": "clamp",
    "relax.nn.avg_pool2d": "avg_pool2d",
}
STRIDED_COPY = "permute"  # the view's "copy:<op>" kernels gather a strided view: the sweep's permute records
SHAPED = ("gemm", "attention", "conv")


def _features(kind: str, params: dict, flops: float, nbytes: float) -> np.ndarray:
    if kind == "gemm":
        return np.log([params.get("b", 1) * params["m"], params["n"], params["k"]])
    if kind == "attention":
        return np.log([params["b"] * params["h"], params["s"], params["t"], params["d"]])
    if kind == "conv":
        return np.log([max(flops, 1.0), max(nbytes, 1.0)])
    return np.log([max(nbytes, 1.0)])


def _has_bias(kind: str, op: str, params: dict, flops: float) -> bool | None:
    """A GEMM's bias epilogue: the sweep's `linear` records say it (`bias`), and so does the kernel view
    (`params["bias"]` True where the bias add is fused: `passes.kernels.Kernel`); None for other kinds."""
    if kind != "gemm":
        return None
    return bool(params.get("bias"))


class Sweep:
    """The sweep's contiguous records with the model's execution for each, searchable by kernel."""

    def __init__(self, device) -> None:
        from predictor.kernel_fit import read_sweep
        from predictor.kernel_model import kernel_arrays, kernel_latency_arrays

        self.recs = [r for r in read_sweep(SWEEP) if r.layout == "contiguous"]
        t = kernel_latency_arrays(kernel_arrays(self.recs), device)
        self.model_s = np.maximum(t.compute_s, t.memory_s)
        self.by: dict[tuple, list[int]] = defaultdict(list)
        for i, r in enumerate(self.recs):
            key = (r.kind, r.dtype) if r.kind in SHAPED else ("*", r.dtype, r.op)
            self.by[key].append(i)
        self.feat = [_features(r.kind, r.params, r.flops, r.bytes_read + r.bytes_written) for r in self.recs]
        self.bias = [_has_bias(r.kind, r.op, r.params, r.flops) for r in self.recs]

    def nearest(self, kern) -> int | None:
        """Index of the sweep record nearest to a kernel-view kernel, or None."""
        if kern.kind in SHAPED:
            key = (kern.kind, kern.dtype)
        elif kern.op in OPS:
            key = ("*", kern.dtype, OPS[kern.op])
        elif kern.kind == "copy" and kern.op.startswith("copy:"):
            key = ("*", kern.dtype, STRIDED_COPY)
        else:
            return None
        f = _features(kern.kind, kern.params, kern.flops, kern.bytes_read + kern.bytes_written)
        bias = _has_bias(kern.kind, kern.op, kern.params, kern.flops)
        best, dist = None, np.inf
        for i in self.by.get(key, ()):
            if len(self.feat[i]) != len(f):
                continue
            d = float(np.abs(self.feat[i] - f).sum())
            if bias is not None and self.bias[i] not in (None, bias):
                d += 0.7  # another epilogue: only where no record of the same one is near
            if d < dist:
                best, dist = i, d
        return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host-us", type=float, default=19.1, help="host dispatch per kernel (DeiT-base's, us)")
    parser.add_argument("--kernels", action="store_true", help="print every kernel with its nearest record")
    parser.add_argument("--dtype", help="only records of this dtype")
    parser.add_argument("--batch", type=int, help="only records of this batch size")
    parser.add_argument("--only", nargs="*", default=(), help="only zoo specs starting with one of these")
    args = parser.parse_args()

    from analyzer import analyze
    from predictor.devices import get_device
    from predictor.kernel_model import kernel_latency

    h100 = get_device("h100-80gb")
    sweep = Sweep(h100)
    for path in sorted(MODELS.glob("*.jsonl")):
        for line in path.open():
            rec = json.loads(line)
            if rec.get("status") != "ok" or (args.dtype and rec["dtype"] != args.dtype):
                continue
            if args.batch and rec["batch"] != args.batch or args.only and not rec["zoo"].startswith(tuple(args.only)):
                continue
            lat = rec["latency_ms"]
            view = analyze(f"zoo:{rec['zoo']}", batch=rec["batch"], dtype=rec["dtype"]).analysis.kernel_view
            kernels = view.kernels
            t = kernel_latency(kernels, h100)
            execution = np.maximum(t.compute_s, t.memory_s)
            measured = execution.copy()
            rows: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(4))
            for j, kern in enumerate(kernels):
                i = sweep.nearest(kern)
                if i is not None and sweep.model_s[i] > 0:
                    r = sweep.recs[i]
                    measured[j] = r.latency_s * execution[j] / sweep.model_s[i]
                    if args.kernels:
                        print(
                            f"    {kern.kind:11s} {kern.op:26s} {json.dumps(kern.params)[:64]:64s} model "
                            f"{execution[j] * 1e6:7.1f} us | {r.op:10s} {json.dumps(r.params)[:56]:56s} "
                            f"{r.latency_s * 1e6:7.1f} us -> {measured[j] * 1e6:7.1f} us"
                        )
                bias = _has_bias(kern.kind, kern.op, kern.params, kern.flops)
                rows[kern.kind + ("+bias" if bias else "")] += [1, execution[j], measured[j], t.eager_s[j]]
            eager = t.eager_ms
            floor = float(np.maximum(measured, t.launch_s).sum() * 1e3)
            serial = float(measured.sum() * 1e3 + len(kernels) * args.host_us * 1e-3)
            print(
                f"\n{rec['zoo']} (batch {rec['batch']}, {rec['dtype']}): measured median {lat['median']:.3f} ms "
                f"(p10 {lat['p10']:.3f}, min {lat['min']:.3f}), {rec['energy_j']:.3f} J at {rec['power_w']:.0f} W; "
                f"preflight {eager:.3f} ms ({(eager / lat['median'] - 1) * 100:+.1f}%), {len(kernels)} kernels"
            )
            print(f"  {'kind':16s} {'n':>4s} {'model exec ms':>14s} {'sweep exec ms':>14s} {'model eager ms':>15s}")
            for kind, v in sorted(rows.items()):
                print(f"  {kind:16s} {int(v[0]):4d} {v[1] * 1e3:14.3f} {v[2] * 1e3:14.3f} {v[3] * 1e3:15.3f}")
            print(
                f"  {'all':16s} {len(kernels):4d} {execution.sum() * 1e3:14.3f} {measured.sum() * 1e3:14.3f} "
                f"{eager:15.3f}   max(sweep exec, launch) {floor:.3f} ms; host+gpu ({args.host_us:g} us/kernel) "
                f"{serial:.3f} ms"
            )


if __name__ == "__main__":
    main()
