"""One command per step of a GPU lease, and the commands that file its output into ``data/``.

On the GPU machine, from the repository root (each step stays inside ``--budget-s``, default 540 s, so it ends
well inside a 10-minute device call, and writes only under ``--out``)::

    python3 -m predictor.measure.lease --out $OUT --step smoke     # nvidia-smi -q, 5 configs, 30 s of kernels
    python3 -m predictor.measure.lease --out $OUT --step kernels   # the kernel sweep until the budget
    python3 -m predictor.measure.lease --out $OUT --step models    # whole models, plus 5% re-measured for noise
    python3 -m predictor.measure.lease --out $OUT --step power     # board power per workload class (~90 s)
    python3 -m predictor.measure.lease --out $OUT --step kernels-l2  # measured convolutions again, L2 flushed

Back on the development machine::

    python -m predictor.measure.lease collect <folder the device call's files landed in>
    python -m predictor.measure.lease summary --device h100-80gb   # Markdown for data/README.md

**Layout under OUT** (at most 2 folders deep and a handful of files, so a device call returns all of it):
``OUT/<device>/kernels/shard-000-of-001[.N].jsonl`` (kernel records), ``OUT/models/<device>/shard-000-of-001.jsonl``
(whole-model records), ``OUT/noise/<device>/shard-000-of-001.jsonl`` (re-measured configs),
``OUT/<device>/power/probes-<stamp>.jsonl`` (power probes, :mod:`predictor.measure.power_probe`),
``OUT/<device>/kernels-l2flush/shard-000-of-001.jsonl`` (the ``kernels-l2`` step's records),
``OUT/<device>/leases/nvidia-smi-q-<stamp>.txt`` and ``OUT/<device>/leases/<step>-<stamp>.json`` (what the step
did). ``collect`` merges records by id into ``data/<device>/{kernels,kernels-l2flush,models,noise,power}/`` and copies
the lease files to ``data/<device>/leases/``.

**The L2 study** (``kernels-l2``): the sweep times each kernel in CUDA-graph replays of the same call, so a kernel
whose operands fit the L2 cache (50 MiB on an H100) reads them from L2 after the first replay. The kernel model's
largest per-class errors on the H100 sweep are such kernels (1x1 and depthwise convolutions priced 30-110% slower
than measured: docs/kernel-model.md). This step measures again, with ``--flush-l2`` (twice the L2 overwritten
before every replay), convolutions the committed data already holds (`l2_study_entries`: pointwise, grouped and
dense 2-D convolutions, per dtype and layout, spread over their measured times), so each record pairs with its
warm-L2 twin by id. The records stay out of the kernel fit (``data/<device>/kernels-l2flush/``).

**Resume.** Every step counts what ``--data`` (default ``data``, committed and sent with the working tree) and
``OUT`` already hold as done, so each call continues where the last collected one stopped; run ``collect``
(and commit) after every call, including one that ran out of time.

**Order.** Whole models follow :func:`predictor.measure.configs.stratified_order` (every prefix covers each
family, batch size and dtype); kernels follow the kernel list's order (every prefix covers each op and
variant). **Noise**: the configs whose id is divisible by 20 (5%) are measured a second time, in a later
call than their first measurement (a fresh process, another moment); ``models`` gives them ``--noise-share``
(10%) of its budget, or all of what is left once every config is measured.

Nothing here changes clocks, power limits, compute mode or MIG, and nothing resets the GPU: ``nvidia-smi``
is only asked to print (``-q``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from predictor.devices import DEVICES
from predictor.measure.configs import MeasureConfig, load_configs, stratified_order
from predictor.measure.harness import RECORD_SCHEMA, HarnessError, Options, run_shard
from predictor.measure.kernels import L2_FLUSH_FOLDER, conv_class, iter_records, load_list
from predictor.measure.kernels import RECORD_SCHEMA as KERNEL_SCHEMA
from predictor.measure.nvml import detect_device
from predictor.measure.power_probe import RECORD_SCHEMA as POWER_SCHEMA

__all__ = ["collect", "detect_device", "main", "noise_ids", "run_step", "summary_markdown"]

ROOT = Path(__file__).resolve().parents[2]
LISTS = ROOT / "predictor" / "measure" / "lists"
STEPS = ("smoke", "kernels", "models", "power", "kernels-l2")
#: The L2 study (`l2_study_entries`): 2-D convolution classes re-measured with the L2 flushed, entries per
#: (class, dtype, layout) cell.
L2_CLASSES = ("pointwise", "grouped", "dense")
L2_PER_CELL = 10
NOISE_EVERY = 20  # 1 config in 20 (5%) is measured twice
SMOKE_CONFIGS = 5
TIMED_OUT = "killed: ran past its deadline"  # what `_run_child` reports for a child it killed at its timeout
EXIT_BROKEN = 3  # the kernel sweep's code for "the CUDA context broke: run again"


def _log(message: str) -> None:
    print(f"[lease] {message}", file=sys.stderr, flush=True)


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


# ----------------------------------------------------------------------------------------- device


def save_nvidia_smi(folder: Path) -> str:
    """Save ``nvidia-smi -q`` (clocks, power limit, driver, ECC, MIG mode, persistence) to ``folder``.

    Args:
        folder: Where ``nvidia-smi-q-<stamp>.txt`` goes.

    Returns:
        ``"saved"``, or ``"absent"`` (no ``nvidia-smi``: the file says so) or ``"failed"``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"nvidia-smi-q-{_stamp()}.txt"
    if shutil.which("nvidia-smi") is None:
        path.write_text("nvidia-smi: absent (not on PATH): no GPU driver on this machine\n")
        return "absent"
    try:
        proc = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        path.write_text(f"nvidia-smi -q failed: {exc}\n")
        return "failed"
    path.write_text(proc.stdout + (f"\n[stderr]\n{proc.stderr}" if proc.stderr else ""))
    return "saved" if proc.returncode == 0 else "failed"


# ----------------------------------------------------------------------------------------- steps


def noise_ids(configs: Iterable[MeasureConfig]) -> list[str]:
    """Ids of the configs measured twice for the noise figure: one in :data:`NOISE_EVERY` (5%), by id.

    Args:
        configs: The config list.

    Returns:
        The ids, in list order.
    """
    return [c.id for c in configs if int(c.id, 16) % NOISE_EVERY == 0]


def _model_ids(dirs: Iterable[Path], device: str, statuses: set[str] | None = None) -> set[str]:
    return {
        r["id"]
        for r in iter_records(dirs, RECORD_SCHEMA)
        if r.get("device") == device and (statuses is None or r.get("status") in statuses)
    }


def _default_list(kind: str, key: str, device: str) -> Path:
    if kind == "kernels":
        own = LISTS / f"kernels-{key}.jsonl"
        return own if own.exists() else LISTS / "kernels-h100-80gb.jsonl"
    own = LISTS / f"{key}.jsonl"
    if own.exists():
        return own
    return LISTS / ("cpu-dev.jsonl" if device == "cpu" else "h100-80gb.jsonl")


class _Clock:
    def __init__(self, budget_s: float) -> None:
        self.start = time.perf_counter()
        self.budget_s = budget_s

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.start)


def _models(
    configs: Sequence[MeasureConfig], out: Path, skip_from: Path, opts: Options, budget_s: float, timeout: float
) -> dict[str, Any]:
    if budget_s < 20 or not configs:
        return {"measured": 0, "statuses": {}, "skipped_reason": "no time" if configs else "nothing to do"}
    try:
        summary = run_shard(
            list(configs),
            out,
            opts,
            budget_s=budget_s,
            timeout=min(timeout, max(budget_s - 10, 10)),
            skip_from=[skip_from],
        )
    except HarnessError as exc:
        return {"measured": 0, "statuses": {}, "error": str(exc)}
    return {
        "measured": summary.measured,
        "statuses": summary.statuses,
        "elapsed_s": round(summary.elapsed_s, 1),
        "stopped_by_budget": summary.stopped_by_budget,
        "left": summary.assigned - summary.skipped - summary.measured,
        "file": summary.path,
        "device": summary.device,
    }


def _run_child(cmd: list[str], timeout: float) -> tuple[int, str]:
    """Run a measuring child process from the repository root: (exit code, last line of its stdout); (-9,
    :data:`TIMED_OUT`) when it ran past ``timeout`` seconds and was killed."""
    _log(" ".join(cmd))
    try:
        proc = subprocess.run(cmd, cwd=ROOT, timeout=timeout, stdout=subprocess.PIPE, text=True)
    except subprocess.TimeoutExpired:
        return -9, TIMED_OUT
    return proc.returncode, (proc.stdout.strip().splitlines() or [""])[-1]


def _kernels(
    device: str,
    kernel_list: Path,
    out: Path,
    data: Path,
    key: str,
    budget_s: float,
    extra: Sequence[str],
    folder: str = "kernels",
) -> dict[str, Any]:
    """Run the sweep in child processes until the budget; a child that dies or breaks its context is replaced.
    ``folder``: where the sweep's records go under ``OUT/<key>/`` and ``data/<key>/`` (``kernels``, or
    ``kernels-l2flush`` for a sweep with ``--flush-l2`` in ``extra``)."""
    deadline = time.time() + budget_s
    runs: list[dict[str, Any]] = []
    while deadline - time.time() > 5 and len(runs) < 5:
        left = deadline - time.time()
        cmd = [
            sys.executable,
            "-m",
            "predictor.measure.kernels",
            "run",
            "--device",
            device,
            "--list",
            str(kernel_list),
            "--out",
            str(out),
            "--deadline",
            f"{deadline:.1f}",
            "--skip-from",
            str(data / key / folder),
            *extra,
        ]
        code, tail = _run_child(cmd, left + 60)
        if tail == TIMED_OUT:  # not a child the OS killed (also -9): that one's in-flight entry crashed it
            for marker in (out / key / folder).glob("*.inflight"):
                marker.unlink()  # killed by us, not crashed by its entry: measure that entry again
        runs.append({"exit": code, "summary": tail})
        _log(f"kernel sweep exit {code}: {tail}")
        if code in (0, 2, 4):
            break  # done or stopped by the deadline, bad usage, or failing everywhere: a restart would not help
    return {"runs": runs}


def conv2d_class(rec: dict) -> str | None:
    """`kernels.conv_class` of a sweep record's 2-D convolution (its ``params``: ``c`` input channels, ``g``
    groups, ``k`` kernel size); None for another op (transposed, 1-D and 3-D convolutions included)."""
    if rec.get("op") != "conv2d":
        return None
    p = rec.get("params") or {}
    return conv_class(p.get("c", 0), p.get("g", 1), p.get("k", ()))


def l2_study_entries(kernel_list: Path, data: Path, key: str, per_cell: int = L2_PER_CELL) -> list[dict]:
    """The ``kernels-l2`` step's entries: those of ``kernel_list`` that ``data/<key>/kernels`` holds as ``ok`` (timed
    without a flush), 2-D convolutions of `L2_CLASSES`; per (class, dtype, layout) cell at most
    ``per_cell``, picked at evenly spaced ranks of the cell's measured medians (shortest to longest), the cells
    interleaved (every prefix of the list covers each cell).

    Returns:
        Kernel-list entries, in sweep order.
    """
    by_id = {e["id"]: e for e in load_list(kernel_list)}
    cells: dict[tuple, list[tuple[float, str]]] = defaultdict(list)
    seen: set[str] = set()
    for r in iter_records([data / key / "kernels"], KERNEL_SCHEMA):
        cls = conv2d_class(r)
        ok = r.get("status") == "ok" and not r.get("l2_flush")
        if cls in L2_CLASSES and ok and r.get("device") == key and r["id"] in by_id and r["id"] not in seen:
            seen.add(r["id"])
            cells[cls, r.get("dtype"), r.get("layout")].append((r["latency_ms"]["median"], r["id"]))
    picked = []
    for cell in sorted(cells):
        rows = sorted(cells[cell])
        n = min(per_cell, len(rows))
        ranks = sorted({round(i * (len(rows) - 1) / max(n - 1, 1)) for i in range(n)})
        picked.append([rows[i][1] for i in ranks])
    order = [ids[i] for i in range(max(map(len, picked), default=0)) for ids in picked if i < len(ids)]
    return [by_id[i] for i in order]


def _count(dirs: Iterable[Path], schema: str, device: str) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for rec in iter_records(dirs, schema):
        if rec.get("device") == device:
            counts[rec.get("status", "?")] += 1
    return dict(counts)


def run_step(
    step: str,
    out: str | Path,
    budget_s: float = 540.0,
    device: str = "auto",
    data: str | Path = "data",
    configs_path: str | Path | None = None,
    kernel_list: str | Path | None = None,
    smoke_kernel_s: float = 30.0,
    noise_share: float = 0.1,
    timeout: float = 120.0,
    sweep_args: Sequence[str] = (),
    harness_opts: Options | None = None,
    power_args: Sequence[str] = (),
) -> dict[str, Any]:
    """Run one lease step and write its summary to ``OUT/<device>/leases/<step>-<stamp>.json``.

    Args:
        step: ``"smoke"``, ``"kernels"``, ``"models"`` or ``"power"``.
        out: Output directory (``$OUT`` on the GPU machine).
        budget_s: Seconds the whole step may take.
        device: ``"auto"``, ``"cuda"`` or ``"cpu"``.
        data: Committed data directory whose records count as done.
        configs_path: Whole-model config list (default: the device's list in ``predictor/measure/lists``).
        kernel_list: Kernel list (default: ``kernels-<device>.jsonl``, else the H100's).
        smoke_kernel_s: Seconds of kernel sweep in the smoke step.
        noise_share: Share of the models step's budget for noise re-measurements.
        timeout: Seconds per whole-model config.
        sweep_args: Extra arguments for the kernel sweep (e.g. ``["--runs", "3"]`` in tests).
        harness_opts: Whole-model measurement options (default: the protocol's).
        power_args: Extra arguments for the power probe (e.g. ``["--scale", "4096"]`` in tests).

    Returns:
        The summary dict (also written as JSON).

    Raises:
        HarnessError: Bad step, or ``--device cuda`` without a GPU.
    """
    if step not in STEPS:
        raise HarnessError(f"unknown step {step!r}; one of {', '.join(STEPS)}")
    clock = _Clock(budget_s)
    torch_device, key, name = detect_device(device)
    out, data = Path(out), Path(data)
    leases = out / key / "leases"
    leases.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    configs = stratified_order(load_configs(configs_path or _default_list("models", key, torch_device)))
    klist = Path(kernel_list or _default_list("kernels", key, torch_device))
    opts = harness_opts or Options(device=torch_device, min_window_s=1.0 if torch_device == "cuda" else 0.0)
    result: dict[str, Any] = {
        "step": step,
        "device": key,
        "device_name": name,
        "torch_device": torch_device,
        "started": started,
        "budget_s": budget_s,
    }
    _log(f"{step} on {name} ({key}), budget {budget_s:.0f} s")
    if step == "smoke":
        result["nvidia_smi"] = save_nvidia_smi(leases)
        done = _model_ids([data / key / "models", out / "models"], key)
        picks = [c for c in configs if c.id not in done and not c.expected_oom][:SMOKE_CONFIGS]
        budget = clock.left() - smoke_kernel_s - 20
        result["models"] = _models(picks, out / "models", data / key / "models", opts, budget, timeout)
        result["kernels"] = _kernels(torch_device, klist, out, data, key, min(smoke_kernel_s, clock.left()), sweep_args)
    elif step == "kernels":
        result["kernels"] = _kernels(torch_device, klist, out, data, key, clock.left() - 5, sweep_args)
    elif step == "power":
        result["power"] = _power(torch_device, out, clock.left() - 5, power_args)
    elif step == "kernels-l2":
        entries = l2_study_entries(klist, data, key)
        study = leases / f"l2-list-{_stamp()}.jsonl"
        study.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in entries))
        result["l2_entries"] = len(entries)
        extra = [*sweep_args, "--flush-l2"]
        result["kernels"] = _kernels(torch_device, study, out, data, key, clock.left() - 5, extra, L2_FLUSH_FOLDER)
    else:
        done = _model_ids([data / key / "models", out / "models"], key)
        todo = [c for c in configs if c.id not in done]
        share = noise_share if todo else 1.0
        budget = clock.left() * (1 - share) - 5
        result["models"] = _models(todo, out / "models", data / key / "models", opts, budget, timeout)
        # an earlier call's ok records (another process): one pass gives their ids and the batch inversions
        before = [
            r
            for r in iter_records([data / key / "models"], RECORD_SCHEMA)
            if r.get("device") == key and r.get("status") == "ok"
        ]
        measured_before = {r["id"] for r in before}
        noise_done = _model_ids([data / key / "noise", out / "noise"], key)
        # both records of a batch inversion first (one of them is wrong), then the 5% noise sample
        inverted = batch_inversions(before)[1]
        suspect = {r["id"] for pair in inverted for r in pair}
        wanted = (set(noise_ids(configs)) | suspect) & (measured_before - noise_done)
        again = sorted((c for c in configs if c.id in wanted), key=lambda c: c.id not in suspect)
        result["noise"] = _models(again, out / "noise", data / key / "noise", opts, clock.left() - 5, timeout)
    result["records"] = {
        "kernels": _count([out / key / "kernels"], KERNEL_SCHEMA, key),
        "models": _count([out / "models"], RECORD_SCHEMA, key),
        "noise": _count([out / "noise"], RECORD_SCHEMA, key),
        "power": _count([out / key / "power"], POWER_SCHEMA, key),
        "kernels-l2flush": _count([out / key / L2_FLUSH_FOLDER], KERNEL_SCHEMA, key),
    }
    result["elapsed_s"] = round(time.perf_counter() - clock.start, 1)
    result["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    path = leases / f"{step}-{_stamp()}.json"
    path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    result["summary_file"] = str(path)
    return result


def _power(device: str, out: Path, budget_s: float, extra: Sequence[str]) -> dict[str, Any]:
    """Run the power probe in a child process (its CUDA context ends with it) until the budget."""
    deadline = time.time() + budget_s
    cmd = [sys.executable, "-m", "predictor.measure.power_probe", "run", "--device", device, "--out", str(out)]
    cmd += ["--deadline", f"{deadline:.1f}", *extra]
    code, tail = _run_child(cmd, budget_s + 30)
    _log(f"power probe exit {code}: {tail}")
    return {"exit": code, "file": tail}


# ----------------------------------------------------------------------------------------- collect


def collect(files_at: str | Path, data: str | Path = "data") -> dict[str, Counter[str]]:
    """Merge a device call's output into ``data/``: records by id (no duplicates), lease files by name.

    Kernel records go to ``data/<device>/kernels/`` (gzip-compressed: ``<name>.jsonl.gz``), whole-model
    records to ``data/<device>/models/`` (or ``noise/`` when they came from ``OUT/noise``), each appended to
    the file of the same name; a record whose id that folder already holds is skipped (noise records: whose
    id and timestamp it holds). Files under a ``leases`` folder are copied to ``data/<device>/leases/``.

    Args:
        files_at: The folder the device call's ``$OUT`` files landed in.
        data: The data directory.

    Returns:
        ``{"<device>/<folder>": Counter(added=..., duplicate=..., unreadable=...)}``.
    """
    files_at, data = Path(files_at), Path(data)
    report: dict[str, Counter[str]] = defaultdict(Counter)
    seen: dict[Path, set] = {}
    pending: dict[Path, list[str]] = {}
    for path in sorted(files_at.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(files_at)
        if "leases" in rel.parts[:-1]:
            device = rel.parts[rel.parts.index("leases") - 1] if rel.parts.index("leases") else "unknown"
            dest = data / device / "leases" / path.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                shutil.copyfile(path, dest)
                report[f"{device}/leases"]["added"] += 1
            continue
        if path.suffix != ".jsonl":
            continue
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
                schema, device = rec["schema"], rec["device"]
            except (json.JSONDecodeError, KeyError, TypeError):
                report["unreadable"]["lines"] += bool(line.strip())
                continue
            if schema == KERNEL_SCHEMA:
                folder = L2_FLUSH_FOLDER if L2_FLUSH_FOLDER in rel.parts[:-1] else "kernels"
            elif schema == RECORD_SCHEMA:
                folder = "noise" if "noise" in rel.parts[:-1] else "models"
            elif schema == POWER_SCHEMA:
                folder = "power"
            else:
                report["unreadable"]["lines"] += 1
                continue
            target = data / device / folder
            if target not in seen:
                seen[target] = {_key(r, folder) for r in iter_records([target], schema)}
            key = _key(rec, folder)
            if key in seen[target]:
                report[f"{device}/{folder}"]["duplicate"] += 1
                continue
            seen[target].add(key)
            target.mkdir(parents=True, exist_ok=True)
            line = json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n"
            gz = folder in ("kernels", L2_FLUSH_FOLDER)
            pending.setdefault(target / (path.name + (".gz" if gz else "")), []).append(line)
            report[f"{device}/{folder}"]["added"] += 1
    for dest, lines in pending.items():
        # Kernel records are kept compressed (about 9x smaller): the committed data travels to the GPU
        # machine with the code, inside a size limit. Appending adds a gzip member; readers take all members.
        with gzip.open(dest, "at") if dest.name.endswith(".gz") else dest.open("a") as fh:
            fh.writelines(lines)
    return dict(report)


def _key(rec: dict, folder: str) -> Any:
    # Noise and power records repeat an id on purpose (another process, another moment): keyed with their time.
    repeats = folder in ("noise", "power")
    return (rec.get("id"), rec.get("env", {}).get("timestamp")) if repeats else rec.get("id")


# ----------------------------------------------------------------------------------------- summary


def _q(values: Sequence[float], q: float) -> float:
    values = sorted(values)
    return values[min(int(q * (len(values) - 1) + 0.5), len(values) - 1)]


def summary_markdown(data: str | Path, device: str) -> str:
    """A Markdown summary of one device's data for ``data/README.md``, with the sanity checks of issue 18.

    Args:
        data: The data directory.
        device: Device key.

    Returns:
        Markdown text.
    """
    root = Path(data) / device
    models = [r for r in iter_records([root / "models"], RECORD_SCHEMA) if r.get("device") == device]
    noise = [r for r in iter_records([root / "noise"], RECORD_SCHEMA) if r.get("device") == device]
    kernels = [r for r in iter_records([root / "kernels"], KERNEL_SCHEMA) if r.get("device") == device]
    lines = [f"### {device}", ""]
    envs = [r.get("env", {}) for r in models] + kernels
    names = Counter(e.get("gpu_name") or e.get("device_name") or e.get("cpu") for e in envs if e)
    drivers = Counter(e.get("driver") for e in envs if e)
    stamps = sorted(e.get("timestamp") for e in envs if e and e.get("timestamp"))
    lines.append(
        f"- GPU: {', '.join(f'{n} ({c})' for n, c in names.most_common()) or '-'}; "
        f"driver {', '.join(str(d) for d in drivers) or '-'}; "
        f"measured {stamps[0][:10] if stamps else '-'} to {stamps[-1][:10] if stamps else '-'}"
    )
    clocks = [r["clocks"]["sm_clock_mhz"] for r in kernels if r.get("clocks") and r["clocks"].get("sm_clock_mhz")]
    clocks += [
        r["env"]["clocks_timed"]["sm_clock_mhz"]
        for r in models
        if (r.get("env") or {}).get("clocks_timed") and r["env"]["clocks_timed"].get("sm_clock_mhz")
    ]
    if clocks:
        lines.append(
            f"- SM clock at start (kernels) or timed window (models): median {statistics.median(clocks):.0f} MHz, "
            f"range {min(clocks)}-{max(clocks)} MHz"
        )
    ok = [r for r in models if r.get("status") == "ok"]
    statuses = Counter(r.get("status") for r in models)
    lines.append(
        f"- whole models: {len(models)} configs ({', '.join(f'{k} {v}' for k, v in statuses.most_common())}); "
        f"{len({r['family'] for r in ok})} families; OOM {statuses.get('oom', 0)}"
    )
    if ok:
        per = Counter((r["family"], r["dtype"]) for r in ok)
        fams = sorted({f for f, _ in per})
        lines.append("")
        lines.append("| family | float32 | float16 |")
        lines.append("|---|---:|---:|")
        lines += [f"| {f} | {per[(f, 'float32')]} | {per[(f, 'float16')]} |" for f in fams]
        lines.append("")
        for label, get in (
            ("latency_ms", lambda r: r["latency_ms"]["median"]),
            ("energy_j", lambda r: r["energy_j"]),
            ("memory_mb", lambda r: r["memory_mb"]["total"]),
        ):
            vals = [v for v in (get(r) for r in ok) if v is not None]
            if vals:
                bad = sum(v <= 0 for v in vals)
                lines.append(
                    f"- {label}: {min(vals):.4g} to {max(vals):.4g} (median {statistics.median(vals):.4g}); "
                    f"zero or negative: {bad}"
                )
        lines += _sanity(ok, device)
    lines += _noise(ok, noise)
    if kernels:
        kinds = Counter((r["kind"], r["status"]) for r in kernels)
        lines.append(
            f"- kernels: {len(kernels)} records; "
            + "; ".join(
                f"{k}: " + ", ".join(f"{s} {kinds[(k, s)]}" for s in sorted({s for kk, s in kinds if kk == k}))
                for k in sorted({k for k, _ in kinds})
            )
        )
    return "\n".join(lines) + "\n"


def batch_inversions(ok: Sequence[dict]) -> tuple[int, list[tuple[dict, dict]]]:
    """Pairs of whole-model records of one zoo spec and dtype at consecutive measured batches where the larger batch
    ran more than 5% faster (median latency): physically one of the two is wrong (a slow host, another process).

    Args:
        ok: Records with status "ok" (`zoo`, `dtype`, `batch`, `latency_ms.median` in ms).

    Returns:
        (the number of consecutive-batch pairs, the inverted pairs as (smaller batch, larger batch) records).
    """
    by_spec: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in ok:
        by_spec[(r["zoo"], r["dtype"])].append(r)
    pairs, inverted = 0, []
    for recs in by_spec.values():
        recs.sort(key=lambda r: r["batch"])
        for a, b in zip(recs, recs[1:], strict=False):
            pairs += 1
            if b["latency_ms"]["median"] < a["latency_ms"]["median"] * 0.95:
                inverted.append((a, b))
    return pairs, inverted


def _sanity(ok: Sequence[dict], device: str) -> list[str]:
    """Issue 18's checks: latency grows with batch, energy between idle and TDP power, memory within the GPU."""
    out = []
    pairs, inverted = batch_inversions(ok)
    named = ", ".join(f"{a['zoo']} {a['dtype']} b{a['batch']}/b{b['batch']}" for a, b in inverted)
    out.append(
        f"- latency vs batch (same spec and dtype): {len(inverted)} of {pairs} batch doublings got >5% faster"
        + (f": {named}" if inverted else "")
    )
    dev = DEVICES.get(device)
    powers = [r["power_w"] for r in ok if r.get("power_w")]
    if powers and dev:
        high = sum(p > dev.tdp_w * 1.05 for p in powers)
        out.append(
            f"- power over the timed window: {min(powers):.0f}-{max(powers):.0f} W (TDP {dev.tdp_w:.0f} W; "
            f"{high} above 105% of TDP)"
        )
    if dev:
        over = sum(r["memory_mb"]["total"] > dev.memory_mib for r in ok)
        out.append(f"- memory above the GPU's {dev.memory_mib} MiB: {over}")
    return out


def _noise(ok: Sequence[dict], noise: Sequence[dict]) -> list[str]:
    first = {r["id"]: r for r in ok}
    rel: dict[str, list[float]] = defaultdict(list)
    for r in noise:
        base = first.get(r["id"])
        if r.get("status") != "ok" or base is None:
            continue
        for label, get in (
            ("latency_ms", lambda x: x["latency_ms"]["median"]),
            ("energy_j", lambda x: x["energy_j"]),
            ("memory_mb", lambda x: x["memory_mb"]["total"]),
        ):
            a, b = get(base), get(r)
            if a and b:
                rel[label].append(abs(b - a) / ((a + b) / 2))
    if not rel:
        return ["- noise: no configs re-measured yet"]
    return [
        f"- noise ({len(rel['latency_ms'])} configs measured twice), |difference| / mean: "
        + "; ".join(
            f"{k} median {100 * statistics.median(v):.1f}%, p90 {100 * _q(v, 0.9):.1f}%" for k, v in rel.items()
        )
    ]


# ----------------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """Run a lease step, ``collect`` or ``summary``.

    Args:
        argv: Command-line arguments.

    Returns:
        Exit code: 0 done, 2 bad usage.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("collect", "summary"):
        p = argparse.ArgumentParser(prog=f"python -m predictor.measure.lease {argv[0]}")
        if argv[0] == "collect":
            p.add_argument("files_at", help="the folder the device call's $OUT files landed in")
        else:
            p.add_argument("--device", required=True, help="device key, e.g. h100-80gb")
        p.add_argument("--data", default="data")
        args = p.parse_args(argv[1:])
        if argv[0] == "summary":
            print(summary_markdown(args.data, args.device), end="")
            return 0
        if not Path(args.files_at).is_dir():
            print(f"error: {args.files_at} is not a folder", file=sys.stderr)
            return 2
        for where, counts in sorted(collect(args.files_at, args.data).items()):
            print(f"{where}: {', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}")
        return 0
    p = argparse.ArgumentParser(prog="python -m predictor.measure.lease", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory ($OUT on the GPU machine)")
    p.add_argument("--step", choices=STEPS, required=True)
    p.add_argument("--budget-s", type=float, default=540.0, help="seconds the step may take in all")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--data", default="data", help="committed data; its records count as done")
    p.add_argument("--configs", help="whole-model config list (default: the device's)")
    p.add_argument("--kernel-list", help="kernel list (default: kernels-<device>.jsonl, else the H100's)")
    p.add_argument("--smoke-kernel-s", type=float, default=30.0)
    p.add_argument("--noise-share", type=float, default=0.1, help="share of a models step spent re-measuring")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per whole-model config")
    p.add_argument("--sweep-arg", action="append", default=[], help="pass an argument to the kernel sweep")
    p.add_argument("--power-arg", action="append", default=[], help="pass an argument to the power probe")
    args = p.parse_args(argv)
    try:
        result = run_step(
            args.step,
            args.out,
            args.budget_s,
            args.device,
            args.data,
            args.configs,
            args.kernel_list,
            args.smoke_kernel_s,
            args.noise_share,
            args.timeout,
            args.sweep_arg,
            power_args=args.power_arg,
        )
    except (HarnessError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rec = result["records"]
    print(
        f"{result['step']} on {result['device']} in {result['elapsed_s']:.0f} s: "
        + "; ".join(
            f"{k} {sum(v.values())} ({', '.join(f'{s} {n}' for s, n in sorted(v.items()))})" for k, v in rec.items()
        )
        + f"; nvidia-smi {result.get('nvidia_smi', '-')} -> {result['summary_file']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
