"""What runs in the measuring process: the protocol for one config, as docs/design.md's measurement protocol defines it.

A :class:`Worker` is created once per worker process (:func:`worker_main`, started by
:mod:`predictor.measure.supervisor`): it imports torch and the zoo, creates the CUDA context and then measures
configs one after another. Per config (CUDA):

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
import math
import os
import platform
import re
import socket
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from predictor.measure import HarnessError
from predictor.measure.mig_profiles import device_key, profiles_for
from predictor.measure.nvml import Nvml, nvml_index

__all__ = [
    "MIB",
    "HarnessError",
    "Options",
    "Worker",
    "WorkerFactory",
    "latency_stats",
    "worker_main",
]

MIB = 2**20


@dataclass
class Options:
    """Measurement options (defaults follow docs/design.md's protocol).

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


def _safe(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:  # noqa: BLE001 - an environment detail is never worth a failed run
        return None


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


#: Makes the worker of a worker process from the options (:class:`Worker` itself by default). The supervisor
#: sends it to a spawned process, so it must pickle: a module-level class or function, or a
#: ``functools.partial`` of one with picklable arguments.
WorkerFactory = Callable[[Options], "Worker"]


class Worker:
    """State of the measuring process: torch, the device, NVML and the environment.

    :meth:`measure` labels one config's outcome; :meth:`run` does the measuring. A subclass passed as the
    supervisor's worker factory may override either (the tests do, to exercise the crash, hang, OOM and error
    paths of the supervisor).

    Args:
        opts: Measurement options.

    Raises:
        HarnessError: If ``opts.device`` is ``"cuda"`` and torch sees no GPU.
    """

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.seq = 0
        self.nvml: Nvml | None = None
        self.baseline_used: int | None = None
        if opts.device == "cuda":
            try:
                self.nvml = Nvml(nvml_index())
                self.baseline_used = self.nvml.used_bytes()  # before this process creates its context
            except Exception as exc:  # noqa: BLE001 - NVML missing: no energy, cruder context
                print(f"[measure] NVML unavailable ({exc}); energy_j will be null", file=sys.stderr)
        # torch and the zoo are imported here, in the worker process only: the supervisor never imports torch
        # (and a CUDA context must not exist before the NVML baseline above is read).
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
        import zoo

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
            env.update({"cpu": cpu_model(), "cpu_count": os.cpu_count(), "device_key": f"cpu-{host}"})
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
        self.seq += 1
        result: dict[str, Any] = {"status": "ok", "error": None, "worker_seq": self.seq}
        started = time.perf_counter()
        try:
            self.run(cfg, result)
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

    def run(self, cfg: dict, result: dict[str, Any]) -> None:
        """Build the config's model, time it and read its memory (and MIG fit), as the module docstring says.

        Args:
            cfg: The config (a :meth:`MeasureConfig.to_dict` dict).
            result: Filled in place with the result fields.

        Raises:
            Exception: Whatever building or running the model raises; :meth:`measure` labels an OOM type
                ``oom`` and anything else ``error``.
        """
        torch = self.torch
        cuda = self.opts.device == "cuda"
        self._reset()
        rss_reset = False
        rss0 = 0
        if not cuda:
            rss_reset = _reset_peak_rss()
            rss0 = _proc_status_kib("VmRSS") or 0
            maxrss0 = _max_rss_kib()
        result["clocks_start"] = self.nvml.clocks() if self.nvml else None
        t_build = time.perf_counter()
        if cfg.get("llm"):  # an LLM serving step (prefill / decode with a static KV cache): llm_steps.py
            from predictor.measure.llm_steps import build as build_llm_step

            fn, args, input_names = build_llm_step(cfg, self.opts.device)
        else:
            built = self.zoo.build(
                cfg["zoo"], batch=int(cfg["batch"]), dtype=getattr(torch, cfg["dtype"]), device=self.opts.device
            )
            fn, args, input_names = built.module.eval(), built.example_inputs, built.input_names
        result["inputs"] = [
            {"name": n, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
            for n, t in zip(input_names, args, strict=False)
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


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def worker_main(conn: Any, opts: dict, factory: WorkerFactory = Worker) -> None:
    """Entry point of the worker process: measure configs received over ``conn`` until ``None``.

    Sends ``{"ready": True, "env": ...}`` once the worker is made (or ``{"ready": False, "error": ...}``), then
    one :meth:`Worker.measure` result per config.

    Args:
        conn: This process's end of the pipe to the supervisor.
        opts: :class:`Options` as a dict.
        factory: Makes the worker from the options.
    """
    try:
        worker = factory(Options(**opts))
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
