"""Board power under one kind of work at a time: the GPU held on a single workload for seconds under NVML.

Why: the power model (``predictor/power.py``) splits a run's energy into idle, memory-bound and compute-bound
power per GPU. Whole-model and serving measurements mix all three, and on a busy H100 the memory-bound figure is
not identifiable from them (docs/power-and-memory.md). Here each workload keeps the GPU on one class of kernel
back to back for ``hold_s`` seconds (default 6) after a warm-up, and NVML's energy counter over that window gives
its average board power directly:

===============  ===========  =====================================================================
workload         class        what runs (H100 sizes; ``scale`` divides every dimension for tests)
===============  ===========  =====================================================================
idle             idle         nothing: the CUDA context alive, the GPU waiting (sleep)
launch           launch       an add of two 4,096-element float32 vectors, back to back (host-bound)
copy-fp16        memory       ``dst.copy_(src)`` of 2^29 float16 elements (1 GiB read, 1 GiB written)
add-fp32         memory       ``torch.add(a, b, out=c)`` on 2^27 float32 elements (3 x 512 MiB)
decode-fp16      memory       ``x @ w``, x (8, 4,096), w (4,096, 14,336) float16: a decode step's GEMM at
                              batch 8, weight streaming (Llama-3-8B's MLP up projection)
decode-bf16      memory       the same in bfloat16
gemm-fp16        compute      (8,192 x 8,192) @ (8,192 x 8,192) float16 on tensor cores
gemm-bf16        compute      the same in bfloat16
gemm-tf32        compute      the same in float32 with ``allow_tf32`` (TF32 tensor cores)
gemm-fp32        compute      the same in float32 without TF32 (CUDA cores)
gemm-fp16-mid    compute      (2,048 x 4,096) @ (4,096 x 4,096) float16: a prefill-sized product
===============  ===========  =====================================================================

Each record (schema :data:`RECORD_SCHEMA`) holds the calls made, their GPU time (CUDA events around the whole
window), the wall time between the two synchronisations, NVML's energy over that wall time, the board power
sampled every 50 ms by a thread (median, p10, p90), clocks and temperature at start and end, and the achieved
rate: bytes moved per second for memory workloads, FLOP/s for products (2 m n k per call), both from the
shapes, not from the timer. ``busy_share`` is GPU time over wall time (1.0 for a GPU-bound workload; the
``launch`` workload's is its duty cycle).

Run as a lease step (``python3 -m predictor.measure.lease --out $OUT --step power``) or alone::

    python3 -m predictor.measure.power_probe run --out $OUT [--hold-s 6] [--deadline EPOCH]

Writes ``OUT/<device>/power/probes-<stamp>.jsonl`` (two folders deep: a device call returns it). Nothing here
changes clocks, power limits, compute mode or MIG; nothing resets the GPU. Pure torch + NVML (no TVM).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from predictor.measure import HarnessError
from predictor.measure.nvml import Nvml, detect_device, nvml_index

__all__ = ["RECORD_SCHEMA", "WORKLOADS", "Workload", "build", "main", "probe", "run_probes"]

RECORD_SCHEMA = "preflight.power-probe/1"
PROBE_VERSION = "power/1"
SAMPLE_S = 0.05  # NVML power sampling period of the background thread, seconds

ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class Workload:
    """One workload of the probe.

    Attributes:
        name: Key, e.g. ``"copy-fp16"``.
        cls: ``"idle"``, ``"launch"``, ``"memory"`` or ``"compute"``.
        op: ``"sleep"``, ``"add"``, ``"copy"`` or ``"matmul"``.
        dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"``.
        shape: The sizes at scale 1: ``(n,)`` elements for add/copy, ``(m, k, n)`` for matmul, ``()`` for sleep.
        tf32: ``allow_tf32`` for a float32 matmul (``None``: not a float32 matmul).
    """

    name: str
    cls: str
    op: str
    dtype: str
    shape: tuple[int, ...]
    tf32: bool | None = None

    def sized(self, scale: int) -> tuple[int, ...]:
        """The shape with every dimension divided by ``scale`` (at least 1)."""
        return tuple(max(1, d // scale) for d in self.shape)

    def bytes_per_call(self, scale: int = 1) -> int:
        """Bytes a call reads and writes (each operand once), from the shape.

        add: 3 n x itemsize (two inputs, one output); copy: 2 n x itemsize; matmul: (m k + k n + m n) x itemsize.
        """
        size = ITEMSIZE[self.dtype]
        s = self.sized(scale)
        if self.op == "add":
            return 3 * s[0] * size
        if self.op == "copy":
            return 2 * s[0] * size
        if self.op == "matmul":
            m, k, n = s
            return (m * k + k * n + m * n) * size
        return 0

    def flops_per_call(self, scale: int = 1) -> int:
        """FLOPs of a call: 2 m n k for a matmul, n for an add, 0 for a copy or sleep."""
        s = self.sized(scale)
        if self.op == "matmul":
            m, k, n = s
            return 2 * m * n * k
        return s[0] if self.op == "add" else 0

    @property
    def id(self) -> str:
        """Stable id of the workload at scale 1 (16 hex digits)."""
        content = {"name": self.name, "op": self.op, "dtype": self.dtype, "shape": self.shape, "tf32": self.tf32}
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


GEMM = (8192, 8192, 8192)
DECODE = (8, 4096, 14336)
WORKLOADS: tuple[Workload, ...] = (
    Workload("idle", "idle", "sleep", "float32", ()),
    Workload("launch", "launch", "add", "float32", (4096,)),
    Workload("copy-fp16", "memory", "copy", "float16", (2**29,)),
    Workload("add-fp32", "memory", "add", "float32", (2**27,)),
    Workload("decode-fp16", "memory", "matmul", "float16", DECODE),
    Workload("decode-bf16", "memory", "matmul", "bfloat16", DECODE),
    Workload("gemm-fp16", "compute", "matmul", "float16", GEMM),
    Workload("gemm-bf16", "compute", "matmul", "bfloat16", GEMM),
    Workload("gemm-tf32", "compute", "matmul", "float32", GEMM, tf32=True),
    Workload("gemm-fp32", "compute", "matmul", "float32", GEMM, tf32=False),
    Workload("gemm-fp16-mid", "compute", "matmul", "float16", (2048, 4096, 4096)),
)


def build(w: Workload, device: str, scale: int = 1) -> Callable[[], Any]:
    """Allocate a workload's tensors on ``device`` and return the call to repeat.

    Args:
        w: The workload.
        device: ``"cuda"`` or ``"cpu"``.
        scale: Divides every dimension (tests run at a tiny scale on the CPU).

    Returns:
        A zero-argument callable launching one call's kernel(s) (``idle``: sleeps ``SAMPLE_S``).
    """
    import torch

    dtype = getattr(torch, w.dtype)
    s = w.sized(scale)
    if w.op == "sleep":
        return lambda: time.sleep(SAMPLE_S)
    if w.op in ("add", "copy"):
        a = torch.rand(s[0], device=device).to(dtype)
        b = torch.rand(s[0], device=device).to(dtype)
        if w.op == "copy":
            return lambda: b.copy_(a)
        c = torch.empty_like(a)
        return lambda: torch.add(a, b, out=c)
    m, k, n = s
    x = torch.randn(m, k, device=device).to(dtype)
    y = torch.randn(k, n, device=device).to(dtype)
    out = torch.empty(m, n, device=device, dtype=dtype)
    return lambda: torch.matmul(x, y, out=out)


class _Sampler(threading.Thread):
    """Read NVML's instantaneous board power every :data:`SAMPLE_S` seconds until stopped."""

    def __init__(self, nvml: Any) -> None:
        super().__init__(daemon=True)
        self.nvml, self.samples, self._halt = nvml, [], threading.Event()

    def run(self) -> None:
        while not self._halt.wait(SAMPLE_S):
            watts = self.nvml.clocks().get("power_draw_w")
            if watts is not None:
                self.samples.append(watts)

    def stop(self) -> list[float]:
        self._halt.set()
        self.join(timeout=1.0)
        return self.samples


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * (len(ordered) - 1) + 0.5), len(ordered) - 1)]


def probe(
    w: Workload, device: str, nvml: Any = None, hold_s: float = 6.0, warm_s: float = 1.0, scale: int = 1
) -> dict[str, Any]:
    """Hold the GPU on one workload for ``hold_s`` seconds and measure its power.

    Args:
        w: The workload.
        device: ``"cuda"`` or ``"cpu"``.
        nvml: A :class:`predictor.measure.nvml.Nvml` (``None``: no power or energy, e.g. on the CPU).
        hold_s: Seconds of the measured window.
        warm_s: Seconds of warm-up before it (clocks and power settle; cuBLAS picks its kernel).
        scale: Divides every dimension.

    Returns:
        The record's measurement fields (see the module docstring).
    """
    import torch

    cuda = device == "cuda"
    if cuda and w.tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = w.tf32
    call = build(w, device, scale)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    # Calls per batch: enough that one batch of launches takes ~0.1 s of GPU time, so the host checks the
    # clock rarely and the queue never drains (a GPU-bound workload stays GPU-bound).
    end = time.perf_counter() + warm_s
    calls = 0
    sync()
    t0 = time.perf_counter()
    while calls == 0 or time.perf_counter() < end:
        call()
        calls += 1
        if calls % 8 == 0:
            sync()
    sync()
    per_call = max((time.perf_counter() - t0) / calls, 1e-7)
    batch = max(1, min(int(0.1 / per_call), 100_000))

    clocks_start = nvml.clocks() if nvml else {}
    sampler = _Sampler(nvml) if nvml else None
    events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
    sync()
    energy0 = nvml.energy_mj() if nvml else None
    if sampler:
        sampler.start()
    start = time.perf_counter()
    if events:
        events[0].record()
    made = 0
    while made == 0 or time.perf_counter() - start < hold_s:
        for _ in range(batch):
            call()
        made += batch
        if cuda and made % (batch * 4) == 0:
            torch.cuda.synchronize()  # bound the queue: the window ends when its work does
    if events:
        events[1].record()
    sync()
    wall_s = time.perf_counter() - start
    energy1 = nvml.energy_mj() if nvml else None
    samples = sampler.stop() if sampler else []
    clocks_end = nvml.clocks() if nvml else {}
    gpu_s = events[0].elapsed_time(events[1]) / 1e3 if events else wall_s
    energy_j = (energy1 - energy0) / 1e3 if energy0 is not None and energy1 is not None else None
    works = w.op != "sleep" and gpu_s > 0  # the idle workload has no GPU time and no rate
    record: dict[str, Any] = {
        "calls": made,
        "wall_s": round(wall_s, 4),
        "gpu_s": round(gpu_s, 4) if w.op != "sleep" else 0.0,
        "busy_share": round(min(gpu_s / wall_s, 1.0), 4) if w.op != "sleep" else 0.0,
        "bytes_per_call": w.bytes_per_call(scale),
        "flops_per_call": w.flops_per_call(scale),
        "achieved_bytes_per_s": round(made * w.bytes_per_call(scale) / gpu_s, 1) if works else None,
        "achieved_flops_per_s": round(made * w.flops_per_call(scale) / gpu_s, 1) if works else None,
        "energy_j": None if energy_j is None else round(energy_j, 3),
        "avg_power_w": None if energy_j is None else round(energy_j / wall_s, 2),
        "power_samples": (
            {
                "n": len(samples),
                "median_w": round(statistics.median(samples), 2),
                "p10_w": round(_quantile(samples, 0.1), 2),
                "p90_w": round(_quantile(samples, 0.9), 2),
            }
            if samples
            else None
        ),
        "clocks_start": clocks_start,
        "clocks_end": clocks_end,
    }
    return record


def _environment(device: str, nvml: Any) -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(
            {
                "gpu_name": torch.cuda.get_device_name(0),
                "gpu_total_mib": round(props.total_memory / 2**20, 1),
                "gpu_sms": props.multi_processor_count,
                "cuda": torch.version.cuda,
            }
        )
        if nvml:
            env.update(nvml.static())
    return env


def run_probes(
    out: str | Path,
    device: str = "auto",
    workloads: Sequence[str] | None = None,
    hold_s: float = 6.0,
    warm_s: float = 1.0,
    scale: int = 1,
    deadline: float | None = None,
) -> Path:
    """Probe each workload in turn until done or ``deadline``; append records to ``OUT/<device>/power/``.

    Args:
        out: Output directory (``$OUT`` on the GPU machine).
        device: ``"auto"``, ``"cuda"`` or ``"cpu"``.
        workloads: Names to run (default: all of :data:`WORKLOADS`, in order).
        hold_s: Seconds each workload is held.
        warm_s: Seconds of warm-up per workload.
        scale: Divides every dimension (tests).
        deadline: ``time.time()`` after which no new workload starts (one takes about ``hold_s + warm_s + 1``).

    Returns:
        The JSONL file written.

    Raises:
        ValueError: An unknown workload name.
    """
    import torch

    torch_device, key, name = detect_device(device)
    chosen = list(WORKLOADS) if workloads is None else []
    by_name = {w.name: w for w in WORKLOADS}
    for wanted in workloads or ():
        if wanted not in by_name:
            raise ValueError(f"unknown workload {wanted!r}; one of {', '.join(by_name)}")
        chosen.append(by_name[wanted])
    nvml = None
    if torch_device == "cuda":
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        try:
            nvml = Nvml(nvml_index())
        except Exception:  # noqa: BLE001 - no NVML: times only
            nvml = None
    env = _environment(torch_device, nvml)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = Path(out) / key / "power" / f"probes-{stamp}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    for w in chosen:
        if deadline is not None and time.time() + hold_s + warm_s + 2 > deadline:
            print(f"[power] stopped by the deadline before {w.name}", file=sys.stderr, flush=True)
            break
        rec: dict[str, Any] = {
            "schema": RECORD_SCHEMA,
            "version": PROBE_VERSION,
            "id": w.id,
            "device": key,
            "device_name": name,
            "workload": w.name,
            "class": w.cls,
            "op": w.op,
            "dtype": w.dtype,
            "shape": list(w.sized(scale)),
            "scale": scale,
            "tf32": w.tf32,
            "hold_s": hold_s,
            "env": {**env, "timestamp": datetime.now(UTC).isoformat(timespec="seconds")},
        }
        try:
            rec.update(probe(w, torch_device, nvml, hold_s, warm_s, scale))
            rec["status"], rec["error"] = "ok", None
        except Exception as exc:  # noqa: BLE001 - one workload failing (OOM, unsupported dtype) is recorded
            rec["status"], rec["error"] = "error", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            if torch_device == "cuda":
                torch.cuda.empty_cache()
        with path.open("a") as fh:
            fh.write(json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n")
        watts = rec.get("avg_power_w")
        print(f"[power] {w.name}: {rec['status']} {'' if watts is None else f'{watts:.0f} W'}", file=sys.stderr)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``run``: probe the workloads; exit 0 done, 2 bad usage."""
    p = argparse.ArgumentParser(prog="python -m predictor.measure.power_probe", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="hold each workload and measure its power")
    r.add_argument("--out", required=True, help="output directory ($OUT on the GPU machine)")
    r.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    r.add_argument("--workload", action="append", help="one workload (repeatable; default: all)")
    r.add_argument("--hold-s", type=float, default=6.0)
    r.add_argument("--warm-s", type=float, default=1.0)
    r.add_argument("--scale", type=int, default=1, help="divide every dimension (tests)")
    r.add_argument("--deadline", type=float, help="epoch seconds after which no workload starts")
    args = p.parse_args(argv)
    if args.scale < 1 or args.hold_s <= 0 or args.warm_s < 0:
        print("error: --scale >= 1, --hold-s > 0 and --warm-s >= 0", file=sys.stderr)
        return 2
    try:
        path = run_probes(args.out, args.device, args.workload, args.hold_s, args.warm_s, args.scale, args.deadline)
    except (ValueError, HarnessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
