"""Measure latency, energy, memory and MIG fit of zoo configurations, as DESIGN.md's protocol defines them.

Process layout: the parent (this module's :func:`run_shard`) never touches CUDA. It starts one
persistent **worker** process (``multiprocessing`` spawn context) that imports torch once, creates the CUDA
context, measures configs one after another and answers each over a pipe. The parent waits for each
answer with a timeout: a hang is recorded as ``status: "timeout"`` and a worker that dies (segfault,
``os._exit``, a CUDA fatal error) as ``"crash"``; in both cases, and after ``"oom"`` and ``"error"``, the
worker is replaced by a fresh one, so one bad config never loses the others and every measurement after
a failure starts from a clean process. Records are appended and flushed one per config, so an
interrupted shard resumes where it stopped (config ids already present are skipped).

Protocol per config (CUDA):

- ``model.eval()`` (the zoo builds in eval mode), ``torch.inference_mode()``,
  ``torch.backends.cudnn.benchmark = True``, weights and inputs on the device, float32 (TF32 at torch
  defaults) or float16;
- ``warmup`` (>= 5) untimed runs, then back-to-back timed runs, each between two CUDA events, until at
  least ``runs`` (>= 30) runs **and** ``min_window_s`` (1 s) have passed: ``latency_ms`` median, p10, p90
  and mean over all timed runs;
- ``energy_j``: NVML's total-energy counter (mJ) read right before and after that same window, divided
  by the number of runs; ``power_w`` is the energy over the window's wall time;
- ``memory_mb``: ``context`` (this process's device memory that PyTorch's allocator does not hold:
  NVML's per-process used memory minus ``torch.cuda.memory_reserved()``, or, without a per-process
  figure, device used memory minus the NVML reading taken before CUDA was initialised minus reserved;
  measured after the runs, so lazily loaded kernels count) + ``torch.cuda.max_memory_reserved()`` over the
  timed runs; ``allocated`` is ``max_memory_allocated``. The peak is restarted after the warm-ups (cache
  emptied) because ``cudnn.benchmark`` tries candidate algorithms with their workspaces during the first
  run; that transient peak is kept as ``timing.warmup_peak_reserved_mb``;
- ``mig_fit``: per MIG profile of the measured GPU (:mod:`predictor.measure.mig_profiles`), whether the
  config runs inside the profile's usable memory. Inferred where the answer is clear: ``context +
  allocated > usable`` cannot fit; ``(context + reserved) x 1.1 <= usable`` fits. Otherwise measured: the
  cache is emptied, ``torch.cuda.set_per_process_memory_fraction((usable - context) / total)`` caps the
  allocator, and one forward pass runs (OOM -> false). ``mig_fit_measured`` lists the measured profiles.

CPU mode runs the same code path with wall-clock latency (``time.perf_counter``), memory as the peak RSS
increase over the config (``/proc/self/clear_refs`` resets the high-water mark per config; without it,
``ru_maxrss``), and ``energy_j``, ``power_w`` and ``mig_fit`` null.

Nothing here changes GPU settings (clocks, power, MIG, compute mode) or resets the GPU.
"""

from __future__ import annotations

import gc
import json
import math
import multiprocessing as mp
import os
import platform
import re
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from predictor.measure.configs import MeasureConfig, shard_of
from predictor.measure.mig_profiles import device_key, profiles_for

__all__ = [
    "HARNESS_VERSION",
    "RECORD_SCHEMA",
    "HarnessError",
    "Options",
    "ShardSummary",
    "done_ids",
    "run_shard",
    "shard_path",
]

HARNESS_VERSION = "measure/1"
RECORD_SCHEMA = "preflight.measurement/1"
MIB = 2**20
FAULTS = ("oom", "crash", "hang", "error")


class HarnessError(RuntimeError):
    """The harness itself cannot proceed (e.g. the worker cannot start or CUDA is missing)."""


@dataclass
class Options:
    """Measurement options (defaults follow DESIGN.md's protocol).

    Attributes:
        device: ``"cuda"`` or ``"cpu"``.
        warmup: Untimed runs before timing (protocol: >= 5).
        runs: Minimum timed runs (protocol: >= 30).
        min_window_s: Minimum wall time of the timed window on CUDA (energy needs >= 1 s).
        max_runs: Upper bound on timed runs (tiny models would otherwise need thousands).
        mig: Whether to label MIG fit.
        mig_margin: A profile surely fits when ``(context + reserved) x mig_margin <= usable``.
    """

    device: str = "cuda"
    warmup: int = 5
    runs: int = 30
    min_window_s: float = 1.0
    max_runs: int = 20000
    mig: bool = True
    mig_margin: float = 1.1


# --------------------------------------------------------------------------------------------- worker


class _Nvml:
    """Lazy, failure-tolerant access to the few NVML queries the protocol needs."""

    def __init__(self, index: int) -> None:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        self.nv = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - an unsupported query is recorded as null
            return None

    def energy_mj(self) -> int | None:
        return self._call(self.nv.nvmlDeviceGetTotalEnergyConsumption, self.handle)

    def used_bytes(self) -> int | None:
        info = self._call(self.nv.nvmlDeviceGetMemoryInfo, self.handle)
        return None if info is None else int(info.used)

    def process_used_bytes(self, pid: int) -> int | None:
        procs = self._call(self.nv.nvmlDeviceGetComputeRunningProcesses, self.handle) or []
        for proc in procs:
            used = getattr(proc, "usedGpuMemory", None)
            if getattr(proc, "pid", None) == pid and isinstance(used, int) and used > 0:
                return used
        return None

    def clocks(self) -> dict[str, Any]:
        nv = self.nv
        return {
            "sm_clock_mhz": self._call(nv.nvmlDeviceGetClockInfo, self.handle, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": self._call(nv.nvmlDeviceGetClockInfo, self.handle, nv.NVML_CLOCK_MEM),
            "temperature_c": self._call(nv.nvmlDeviceGetTemperature, self.handle, nv.NVML_TEMPERATURE_GPU),
            "power_draw_w": _scale(self._call(nv.nvmlDeviceGetPowerUsage, self.handle), 1e-3),
        }

    def static(self) -> dict[str, Any]:
        nv = self.nv
        driver = self._call(nv.nvmlSystemGetDriverVersion)
        return {
            "driver": driver.decode() if isinstance(driver, bytes) else driver,
            "max_sm_clock_mhz": self._call(nv.nvmlDeviceGetMaxClockInfo, self.handle, nv.NVML_CLOCK_SM),
            "max_mem_clock_mhz": self._call(nv.nvmlDeviceGetMaxClockInfo, self.handle, nv.NVML_CLOCK_MEM),
            "power_limit_w": _scale(self._call(nv.nvmlDeviceGetEnforcedPowerLimit, self.handle), 1e-3),
        }


def _safe(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:  # noqa: BLE001 - an environment detail is never worth a failed run
        return None


def _scale(value: float | None, factor: float) -> float | None:
    return None if value is None else round(value * factor, 3)


def _nvml_index() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(visible) if visible.isdigit() else 0


def _proc_status_kib(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _max_rss_kib() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in [0, 100]) of already sorted values."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def latency_stats(times_ms: Sequence[float]) -> dict[str, float | int]:
    """Summarise per-run latencies.

    Args:
        times_ms: Per-run latencies in milliseconds.

    Returns:
        ``{"median", "p10", "p90", "mean", "min", "max", "runs"}``.
    """
    values = sorted(times_ms)
    return {
        "median": round(statistics.median(values), 6),
        "p10": round(_percentile(values, 10), 6),
        "p90": round(_percentile(values, 90), 6),
        "mean": round(statistics.fmean(values), 6),
        "min": round(values[0], 6),
        "max": round(values[-1], 6),
        "runs": len(values),
    }


class _Worker:
    """State of the measuring process: torch, the device, NVML and the environment."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.seq = 0
        self.nvml: _Nvml | None = None
        self.baseline_used: int | None = None
        if opts.device == "cuda":
            try:
                self.nvml = _Nvml(_nvml_index())
                self.baseline_used = self.nvml.used_bytes()  # before this process creates its context
            except Exception as exc:  # noqa: BLE001 - NVML missing: no energy, cruder context
                print(f"[measure] NVML unavailable ({exc}); energy_j will be null", file=sys.stderr)
        import torch

        self.torch = torch
        self.oom_types: tuple[type[BaseException], ...] = (getattr(torch, "OutOfMemoryError", MemoryError),)
        if opts.device == "cuda":
            if not torch.cuda.is_available():
                raise HarnessError("--device cuda but torch.cuda.is_available() is False")
            torch.backends.cudnn.benchmark = True
            torch.zeros(1, device="cuda")  # create the context now
            torch.cuda.synchronize()
            self.oom_types = (torch.cuda.OutOfMemoryError, *self.oom_types)
        from analyzer import zoo

        self.zoo = zoo
        self.env = self._environment()

    def _environment(self) -> dict[str, Any]:
        torch = self.torch
        try:
            from importlib.metadata import version

            transformers_version: str | None = version("transformers")
        except Exception:  # noqa: BLE001
            transformers_version = None
        env: dict[str, Any] = {
            "hostname": socket.gethostname(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers_version,
            "platform": platform.platform(),
            "worker_pid": os.getpid(),
            "torch_threads": torch.get_num_threads(),
        }
        if self.opts.device == "cuda":
            props = torch.cuda.get_device_properties(0)
            total_mib = props.total_memory / MIB
            name = torch.cuda.get_device_name(0)
            env.update(
                {
                    "gpu_name": name,
                    "gpu_total_mib": round(total_mib, 1),
                    "gpu_sms": props.multi_processor_count,
                    "cuda": torch.version.cuda,
                    "cudnn": torch.backends.cudnn.version(),
                    "tf32_matmul": _safe(lambda: torch.backends.cuda.matmul.allow_tf32),
                    "tf32_cudnn": _safe(lambda: torch.backends.cudnn.allow_tf32),
                    "device_key": device_key(name, total_mib),
                }
            )
            env.update(self.nvml.static() if self.nvml else {"driver": None})
        else:
            host = re.sub(r"[^a-z0-9]+", "-", socket.gethostname().lower()).strip("-") or "host"
            env.update({"cpu": _cpu_model(), "cpu_count": os.cpu_count(), "device_key": f"cpu-{host}"})
        return env

    # -- measurement -----------------------------------------------------------------------------

    def _sync(self) -> None:
        if self.opts.device == "cuda":
            self.torch.cuda.synchronize()

    def _reset(self) -> None:
        gc.collect()
        if self.opts.device == "cuda":
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()

    def measure(self, cfg: dict) -> dict[str, Any]:
        """Measure one config (a :meth:`MeasureConfig.to_dict` dict) and return the result fields.

        Args:
            cfg: The config.

        Returns:
            Result fields of the record (status, latency, energy, memory, MIG fit, ...).
        """
        fault = cfg.get("fault")
        if fault == "crash":
            os._exit(70)
        if fault == "hang":
            time.sleep(10**6)
        self.seq += 1
        result: dict[str, Any] = {"status": "ok", "error": None, "worker_seq": self.seq}
        started = time.perf_counter()
        try:
            self._measure(cfg, fault, result)
        except self.oom_types as exc:
            result.update(status="oom", error=_short(exc))
        except Exception as exc:  # noqa: BLE001 - any model failure is a labelled error
            result.update(status="error", error=_short(exc))
        if result["status"] == "oom" and self.opts.mig and self.opts.device == "cuda":
            # Does not fit the whole GPU, so no slice of it either.
            profiles = profiles_for(self.env.get("device_key", ""))
            result["mig_fit"] = {p.name: False for p in profiles} or None
            result["mig_fit_measured"] = []
        try:
            self._reset()
        except Exception as exc:  # noqa: BLE001 - e.g. a sticky CUDA error: the parent restarts the worker
            if result["status"] == "ok":
                result.update(status="error", error=_short(exc))
        result["measure_s"] = round(time.perf_counter() - started, 4)
        return result

    def _measure(self, cfg: dict, fault: str | None, result: dict[str, Any]) -> None:
        torch = self.torch
        cuda = self.opts.device == "cuda"
        self._reset()
        rss_reset = False
        rss0 = 0
        if not cuda:
            rss_reset = _reset_peak_rss()
            rss0 = _proc_status_kib("VmRSS") or 0
            maxrss0 = _max_rss_kib()
        if fault == "oom":
            raise torch.OutOfMemoryError("simulated out of memory (test fault)")
        if fault == "error":
            raise RuntimeError("simulated error (test fault)")
        result["clocks_start"] = self.nvml.clocks() if self.nvml else None
        t_build = time.perf_counter()
        built = self.zoo.build(
            cfg["zoo"], batch=int(cfg["batch"]), dtype=getattr(torch, cfg["dtype"]), device=self.opts.device
        )
        fn = built.module.eval()
        args = built.example_inputs
        result["inputs"] = [
            {"name": n, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
            for n, t in zip(built.input_names, args, strict=False)
        ]
        self._sync()
        result["build_s"] = round(time.perf_counter() - t_build, 4)
        result["warmup_runs"] = self.opts.warmup
        with torch.inference_mode():
            t0 = time.perf_counter()
            for _ in range(self.opts.warmup):
                fn(*args)
            self._sync()
            warm_s = time.perf_counter() - t0
            per_run = warm_s / max(self.opts.warmup, 1)
            result["warmup_s"] = round(warm_s, 4)
            if cuda:
                # cudnn.benchmark tries algorithms (and their workspaces) during the first run; the memory
                # label is the steady state of the timed runs, so drop those blocks and restart the peak.
                result["warmup_peak_reserved_mb"] = round(torch.cuda.max_memory_reserved() / MIB, 3)
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            result["clocks_timed"] = self.nvml.clocks() if self.nvml else None
            if cuda:
                times, window_s, energy = self._timed_cuda(fn, args, per_run)
            else:
                t1 = time.perf_counter()
                times, energy = self._timed_cpu(fn, args), None
                window_s = time.perf_counter() - t1
        result["latency_ms"] = latency_stats(times)
        result["timed_window_s"] = None if window_s is None else round(window_s, 4)
        if energy is not None and window_s:
            result["energy_j"] = round(energy / len(times), 6)
            result["power_w"] = round(energy / window_s, 3)
        else:
            result["energy_j"] = None
            result["power_w"] = None
        if cuda:
            self._sync()
            reserved = torch.cuda.max_memory_reserved()
            allocated = torch.cuda.max_memory_allocated()
            context, method = self._context_bytes()
            result["memory_mb"] = {
                "total": round((context + reserved) / MIB, 3),
                "context": round(context / MIB, 3),
                "reserved": round(reserved / MIB, 3),
                "allocated": round(allocated / MIB, 3),
                "context_method": method,
            }
            if self.opts.mig:
                self._mig_fit(fn, args, context, reserved, allocated, result)
            else:
                result["mig_fit"], result["mig_fit_measured"] = None, None
        else:
            if rss_reset:
                peak_kib = _proc_status_kib("VmHWM") or 0
                method = "clear_refs"
            else:
                peak_kib, rss0, method = _max_rss_kib(), maxrss0, "ru_maxrss"
            result["memory_mb"] = {
                "total": round(max(peak_kib - rss0, 0) / 1024, 3),
                "context": None,
                "reserved": None,
                "allocated": None,
                "rss_baseline": round(rss0 / 1024, 3),
                "method": method,
            }
            result["mig_fit"], result["mig_fit_measured"] = None, None
        del fn, args, built

    def _timed_cuda(self, fn: Callable, args: tuple, per_run: float) -> tuple[list[float], float, float | None]:
        torch = self.torch
        opts = self.opts
        want = max(opts.runs, math.ceil(opts.min_window_s / max(per_run, 1e-6) * 1.1))
        n = min(want, opts.max_runs)
        times: list[float] = []
        torch.cuda.synchronize()
        e0 = self.nvml.energy_mj() if self.nvml else None
        t0 = time.perf_counter()
        while True:
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            for start, end in zip(starts, ends, strict=True):
                start.record()
                fn(*args)
                end.record()
            ends[-1].synchronize()
            times.extend(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
            elapsed = time.perf_counter() - t0
            if len(times) >= opts.max_runs or (len(times) >= opts.runs and elapsed >= opts.min_window_s):
                break
            per = elapsed / len(times)
            short = max(opts.runs - len(times), math.ceil((opts.min_window_s - elapsed) / per * 1.1), 1)
            n = min(short, opts.max_runs - len(times))
        window = time.perf_counter() - t0
        e1 = self.nvml.energy_mj() if self.nvml else None
        energy = (e1 - e0) / 1000.0 if e0 is not None and e1 is not None and e1 >= e0 else None
        return times, window, energy

    def _timed_cpu(self, fn: Callable, args: tuple) -> list[float]:
        times = []
        for _ in range(self.opts.runs):
            t = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - t) * 1000.0)
        return times

    def _context_bytes(self) -> tuple[int, str]:
        torch = self.torch
        reserved_now = torch.cuda.memory_reserved()
        if self.nvml is not None:
            used = self.nvml.process_used_bytes(os.getpid())
            if used is not None:
                return max(used - reserved_now, 0), "nvml-process"
        free, total = torch.cuda.mem_get_info()
        baseline = self.baseline_used or 0
        method = "mem_get_info-minus-baseline" if self.baseline_used is not None else "mem_get_info"
        return max(total - free - baseline - reserved_now, 0), method

    def _mig_fit(
        self, fn: Callable, args: tuple, context: int, reserved: int, allocated: int, result: dict[str, Any]
    ) -> None:
        profiles = profiles_for(self.env.get("device_key", ""))
        if not profiles:
            result["mig_fit"], result["mig_fit_measured"] = None, None
            return
        fits: dict[str, bool] = {}
        measured: list[str] = []
        cache: dict[int, bool] = {}
        for profile in profiles:
            usable = profile.memory_mib * MIB
            if context + allocated > usable:
                fits[profile.name] = False
            elif (context + reserved) * self.opts.mig_margin <= usable:
                fits[profile.name] = True
            else:
                if usable not in cache:
                    cache[usable] = self._capped_forward(fn, args, usable - context)
                fits[profile.name] = cache[usable]
                measured.append(profile.name)
        result["mig_fit"] = fits
        result["mig_fit_measured"] = measured
        result["mig_usable_mib"] = {p.name: p.memory_mib for p in profiles}

    def _capped_forward(self, fn: Callable, args: tuple, budget_bytes: int) -> bool:
        torch = self.torch
        total = torch.cuda.get_device_properties(0).total_memory
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        if budget_bytes <= 0 or torch.cuda.memory_reserved() > budget_bytes:
            return False
        torch.cuda.set_per_process_memory_fraction(min(budget_bytes / total, 1.0))
        ok = True
        try:
            with torch.inference_mode():
                out = fn(*args)
                del out
            torch.cuda.synchronize()
        except self.oom_types:
            ok = False
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
            gc.collect()
            torch.cuda.empty_cache()
        return ok


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 500 else text[:497] + "..."


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _worker_main(conn: Any, opts: dict) -> None:
    """Entry point of the worker process: measure configs received over ``conn`` until ``None``."""
    try:
        worker = _Worker(Options(**opts))
    except BaseException as exc:  # noqa: BLE001 - report why the worker cannot start
        conn.send({"ready": False, "error": _short(exc)})
        return
    conn.send({"ready": True, "env": worker.env})
    while True:
        try:
            msg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if msg is None:
            return
        conn.send(worker.measure(msg))


# --------------------------------------------------------------------------------------------- parent


class _WorkerHandle:
    """Parent-side handle of one worker process."""

    def __init__(self, opts: Options, startup_timeout: float) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, asdict(opts)), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(startup_timeout):
            self.kill()
            raise HarnessError(f"measurement worker did not start within {startup_timeout:.0f} s")
        try:
            hello = self.conn.recv()
        except EOFError:
            self.kill()
            raise HarnessError(f"measurement worker died at start (exit code {self.proc.exitcode})") from None
        if not hello.get("ready"):
            self.kill()
            raise HarnessError(f"measurement worker failed to start: {hello.get('error')}")
        self.env: dict[str, Any] = hello["env"]

    def ask(self, cfg: dict, timeout: float) -> tuple[str, dict | None]:
        """Send one config; return ``("ok", result)``, ``("timeout", None)`` or ``("crash", None)``."""
        try:
            self.conn.send(cfg)
        except (BrokenPipeError, OSError):
            return "crash", None
        if not self.conn.poll(timeout):
            return "timeout", None
        try:
            return "ok", self.conn.recv()
        except (EOFError, OSError):
            return "crash", None

    def exitcode(self) -> int | None:
        self.proc.join(5)
        return self.proc.exitcode

    def close(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(10)
        self.kill()

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)
        self.conn.close()


@dataclass
class ShardSummary:
    """What one :func:`run_shard` call did.

    Attributes:
        device: Device key the records carry.
        path: The shard's JSON-lines file.
        assigned: Configs of this shard in the list.
        skipped: Of those, already measured (resume).
        measured: Records written by this call.
        statuses: Records written, by status.
        elapsed_s: Wall time of the call.
        worker_starts: Worker processes started.
        stopped_by_budget: Whether the time budget ended the call early.
        config_wall_s: Parent-side wall time per measured config, in order.
        config_measure_s: Worker-side measuring time per config (``None`` for timeout/crash).
    """

    device: str
    path: str
    assigned: int = 0
    skipped: int = 0
    measured: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    worker_starts: int = 0
    stopped_by_budget: bool = False
    config_wall_s: list[float] = field(default_factory=list)
    config_measure_s: list[float | None] = field(default_factory=list)


def shard_path(out_dir: str | Path, device: str, shard: tuple[int, int]) -> Path:
    """Return ``OUT/<device>/shard-III-of-NNN.jsonl``.

    Args:
        out_dir: Output directory.
        device: Device key.
        shard: ``(index, count)``.

    Returns:
        The path.
    """
    index, count = shard
    return Path(out_dir) / device / f"shard-{index:03d}-of-{count:03d}.jsonl"


def done_ids(dirs: Iterable[str | Path], device: str, statuses: Iterable[str] | None = None) -> set[str]:
    """Collect config ids already recorded for ``device`` in any ``*.jsonl`` under ``dirs``.

    Args:
        dirs: Directories searched recursively.
        device: Device key the records must carry.
        statuses: Count only these statuses as done (default: any).

    Returns:
        The ids.
    """
    wanted = set(statuses) if statuses is not None else None
    ids: set[str] = set()
    for root in dirs:
        root = Path(root)
        if not root.exists():
            continue
        for path in sorted(root.rglob("*.jsonl")):
            with path.open() as fh:
                for line in fh:
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut short by a kill
                    if not isinstance(rec, dict) or rec.get("schema") != RECORD_SCHEMA:
                        continue
                    if rec.get("device") == device and (wanted is None or rec.get("status") in wanted):
                        ids.add(rec.get("id"))
    return ids


def _record(cfg: MeasureConfig, status: str, result: dict | None, env: dict, error: str | None) -> dict:
    result = result or {}
    static_env = {k: v for k, v in env.items() if k != "device_key"}
    record_env = {
        **static_env,
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "clocks_start": result.get("clocks_start"),
        "clocks_timed": result.get("clocks_timed"),
        "worker_seq": result.get("worker_seq"),
    }
    ok = status == "ok"
    return {
        "schema": RECORD_SCHEMA,
        "id": cfg.id,
        "zoo": cfg.zoo,
        "family": cfg.family,
        "params": cfg.params,
        "batch": cfg.batch,
        "dtype": cfg.dtype,
        "inputs": result.get("inputs") or cfg.inputs,
        "device": env["device_key"],
        "status": status,
        "latency_ms": result.get("latency_ms") if ok else None,
        "energy_j": result.get("energy_j") if ok else None,
        "power_w": result.get("power_w") if ok else None,
        "memory_mb": result.get("memory_mb") if ok else None,
        "mig_fit": result.get("mig_fit"),
        "mig_fit_measured": result.get("mig_fit_measured"),
        "mig_usable_mib": result.get("mig_usable_mib"),
        "error": error if error is not None else result.get("error"),
        "expected_oom": cfg.expected_oom,
        "est_memory_mb": cfg.est_memory_mb,
        "timing": {
            "warmup_runs": result.get("warmup_runs"),
            "warmup_s": result.get("warmup_s"),
            "warmup_peak_reserved_mb": result.get("warmup_peak_reserved_mb"),
            "timed_window_s": result.get("timed_window_s"),
            "build_s": result.get("build_s"),
            "measure_s": result.get("measure_s"),
        },
        "env": record_env,
        "harness_version": HARNESS_VERSION,
    }


def _log(message: str) -> None:
    print(f"[measure] {message}", file=sys.stderr, flush=True)


def run_shard(
    configs: Sequence[MeasureConfig] | Callable[[str], Sequence[MeasureConfig]],
    out_dir: str | Path,
    opts: Options | None = None,
    shard: tuple[int, int] = (0, 1),
    limit: int | None = None,
    timeout: float = 120.0,
    budget_s: float | None = None,
    skip_from: Iterable[str | Path] = (),
    retry_failed: bool = False,
    startup_timeout: float = 300.0,
    log: Callable[[str], None] | None = _log,
) -> ShardSummary:
    """Measure the configs of one shard, appending one JSON line per config as it goes.

    Args:
        configs: The full config list (every shard sees the same list), or a function of the device key
            that returns it (called once the worker has reported which device it measures).
        out_dir: Output directory; records go to ``OUT/<device>/shard-III-of-NNN.jsonl``.
        opts: Measurement options.
        shard: ``(index, count)``; a config belongs to shard ``int(id, 16) % count``.
        limit: Measure at most this many configs in this call.
        timeout: Seconds one config may take (model build included) before it is labelled ``timeout``.
        budget_s: Stop starting configs after this many seconds (the unfinished rest resumes later); a
            config cut short by the budget rather than by ``timeout`` is not recorded.
        skip_from: More directories whose records (for this device) count as done.
        retry_failed: Count only ``ok`` and ``oom`` records as done, so ``timeout``/``crash``/``error``
            configs are measured again.
        startup_timeout: Seconds a worker may take to start.
        log: Progress sink (``None`` for silence).

    Returns:
        A :class:`ShardSummary`.

    Raises:
        HarnessError: If the worker cannot start, or for a bad shard.
    """
    opts = opts or Options()
    index, count = shard
    if not (count >= 1 and 0 <= index < count):
        raise HarnessError(f"bad shard {index}/{count}: need 0 <= i < n")
    say = log or (lambda _m: None)
    t_start = time.perf_counter()
    worker: _WorkerHandle | None = _WorkerHandle(opts, startup_timeout)
    env = worker.env
    device = env["device_key"]
    summary = ShardSummary(device=device, path=str(shard_path(out_dir, device, shard)), worker_starts=1)
    try:
        listed = configs(device) if callable(configs) else configs
        mine = [c for c in listed if shard_of(c.id, count) == index]
        statuses = ("ok", "oom") if retry_failed else None
        done = done_ids([out_dir, *skip_from], device, statuses)
        pending = [c for c in mine if c.id not in done]
        summary.assigned, summary.skipped = len(mine), len(mine) - len(pending)
        if limit is not None:
            pending = pending[:limit]
        say(f"{device}: shard {index}/{count}: {len(mine)} configs, {summary.skipped} done, measuring {len(pending)}")
        path = Path(summary.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            for k, cfg in enumerate(pending, 1):
                remaining = None if budget_s is None else budget_s - (time.perf_counter() - t_start)
                if remaining is not None and remaining <= 1.0:
                    summary.stopped_by_budget = True
                    break
                if worker is None:
                    worker = _WorkerHandle(opts, startup_timeout)
                    summary.worker_starts += 1
                cut = remaining is not None and remaining < timeout
                wait = min(timeout, remaining) if remaining is not None else timeout
                t0 = time.perf_counter()
                answer, result = worker.ask(cfg.to_dict(), wait)
                wall = time.perf_counter() - t0
                error = None
                if answer == "timeout":
                    worker.kill()
                    worker = None
                    if cut:
                        summary.stopped_by_budget = True
                        say(f"budget reached during {cfg.zoo}; it is left for the next run")
                        break
                    status, error = "timeout", f"no result within {timeout:g} s"
                elif answer == "crash":
                    code = worker.exitcode()
                    worker.kill()
                    worker = None
                    status, error = "crash", f"worker exited with code {code}"
                else:
                    status = result["status"] if result else "error"
                    if status != "ok":
                        worker.close()  # a fresh process after any failure
                        worker = None
                rec = _record(cfg, status, result, env, error)
                out.write(json.dumps(rec, sort_keys=True) + "\n")
                out.flush()
                os.fsync(out.fileno())
                summary.measured += 1
                summary.statuses[status] = summary.statuses.get(status, 0) + 1
                summary.config_wall_s.append(wall)
                summary.config_measure_s.append(result.get("measure_s") if result else None)
                lat = rec["latency_ms"]["median"] if rec["latency_ms"] else None
                shown = f"{lat:.3f} ms" if lat is not None else (rec["error"] or "")[:80]
                say(f"[{k}/{len(pending)}] {status:7s} {cfg.zoo} b={cfg.batch} {cfg.dtype}: {shown} ({wall:.1f} s)")
    finally:
        if worker is not None:
            worker.close()
    summary.elapsed_s = time.perf_counter() - t_start
    return summary
