"""Measure latency, energy, memory and MIG fit of zoo configurations, as docs/design.md's protocol defines them.

:func:`run_shard` measures the configs of one shard and writes one record per config. The work is split:

- :mod:`predictor.measure.worker`: what runs in the measuring process (the protocol for one config);
- :mod:`predictor.measure.supervisor`: the parent's handle of that process;
- :mod:`predictor.measure.nvml`: the NVML queries (energy, clocks, per-process memory);
- this module: the shard loop, failure labels and record writing.

The parent (this module) never touches CUDA. It starts one persistent worker process that measures configs
one after another and waits for each answer with a timeout: a hang is recorded as ``status: "timeout"`` and a
worker that dies (segfault, ``os._exit``, a CUDA fatal error) as ``"crash"``; in both cases, and after
``"oom"`` and ``"error"``, the worker is replaced by a fresh one, so one bad config never loses the others and
every measurement after a failure starts from a clean process. Records are appended and flushed one per
config, so an interrupted shard resumes where it stopped (config ids already present are skipped).

Nothing here changes GPU settings (clocks, power, MIG, compute mode) or resets the GPU.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from predictor.measure.configs import MeasureConfig, shard_of
from predictor.measure.supervisor import WorkerHandle
from predictor.measure.worker import MIB, HarnessError, Options, Worker, WorkerFactory, latency_stats

__all__ = [
    "HARNESS_VERSION",
    "MIB",
    "RECORD_SCHEMA",
    "HarnessError",
    "Options",
    "ShardSummary",
    "Worker",
    "WorkerFactory",
    "WorkerHandle",
    "done_ids",
    "latency_stats",
    "run_shard",
    "shard_path",
]

HARNESS_VERSION = "measure/1"
RECORD_SCHEMA = "preflight.measurement/1"


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
        **({"llm": cfg.llm} if cfg.llm else {}),  # an LLM serving step, not the model's forward
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
    worker_factory: WorkerFactory = Worker,
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
        worker_factory: Makes the worker in each worker process (default :class:`Worker`, the protocol); it
            must pickle (see :data:`predictor.measure.worker.WorkerFactory`). The tests pass a subclass that
            crashes, hangs or raises on chosen configs.

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
    worker: WorkerHandle | None = WorkerHandle(opts, startup_timeout, worker_factory)
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
                    worker = WorkerHandle(opts, startup_timeout, worker_factory)
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
