"""Many models at once on Ray: the engine behind `preflight analyze-many` and the dataset builder.

The driver (this process) turns a manifest into jobs, starts a local Ray or joins a cluster, and keeps one job
in flight on each of N long-lived worker actors (`Worker`, which imports TVM and torch once). It supervises
them: a job that runs past its time limit has its actor killed; an actor that dies (a segfault inside an
importer, the kernel's OOM killer) costs only the job it was running; either way the actor is replaced and the
rest of the job goes on. Inside the worker each job runs under an address-space cap (`RLIMIT_AS`).

Results come back to the driver as they finish: `analyze_many` streams one JSON row per model to a JSON Lines
file (flushed and fsync'd, so a killed job loses nothing and `resume` skips what is there), the dataset builder
(`analyzer.dataset.build_cache`) writes each configuration's `.npz`. Both run their task function through the
same `run_jobs`, on the same `Worker`.

The driver imports neither TVM nor torch: it reads manifests, supervises and writes; the workers analyse
(`Worker` and `analyze_task` import the pipeline inside, on purpose). Ray itself is imported inside the functions
that talk to it, so that reading a manifest and `preflight --help` do not pay for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import math
import os
import socket
import time
import traceback
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from passes.graph import FLOAT_DTYPES  # plain python: no TVM

from . import __version__
from .errors import AnalysisError, PreflightError, UsageError, one_line
from .frontends import FILE_LOADERS, PADDLE_PARAMS, PADDLE_PROGRAM, SAVED_MODEL_MARKERS, is_paddle_program
from .frontends.hf_config import is_hf_config
from .frontends.specs import MAX_DIM, InputSpec
from .options import check_devices, check_host_overhead, check_matmul_precision, half_of
from .render import _text_table, si

ROW_SCHEMA = "preflight.batch/1"
DEFAULT_DEVICES = ("h100-80gb",)
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MEMORY_MB = 8192
OBJECT_STORE_BYTES = 512 * 2**20  # an embedded Ray's shared-memory store: rows and feature arrays are small
START_TIMEOUT_S = 600.0  # no worker started in this long: the cluster has no free CPU, or cannot start one
_TICK_S = 0.5  # how often the driver checks time limits

# What a failure that is not the model's own error is recorded as (the row's error class)
WORKER_DIED = "WorkerDied"
TIMEOUT = "Timeout"
MEMORY_LIMIT = "MemoryLimitExceeded"

# ---- manifests ------------------------------------------------------------------------------------------------

# What `analyzer.frontends.load` reads (its dispatch in `_load_file` / `_load_dir`), as the directory walk needs
# it: model files by suffix, and the directories and file pairs that make one model. tests/test_analyze_many.py
# checks the two agree.
MODEL_SUFFIXES = tuple(FILE_LOADERS)  # the frontends' own table (a light import: no TVM, no torch)

_ROW_KEYS = ("model", "inputs", "batch", "dtype", "devices", "matmul_precision", "host_overhead")
DEFAULT_MATMUL_PRECISION = "highest"  # torch's default (predictor.kernel_model.DEFAULT_MATMUL_PRECISION)


@dataclass(frozen=True)
class Job:
    """One model to analyse and predict, as a manifest names it."""

    model: str  # as the manifest gives it: the row's "model"
    path: str  # what the worker loads: `model` as an absolute path (relative ones from the manifest's folder)
    inputs: tuple[str, ...] = ()  # "NAME:DIMS[:DTYPE]"
    batch: int | None = None
    dtype: str | None = None
    devices: tuple[str, ...] = DEFAULT_DEVICES  # device keys (aliases resolved)
    matmul_precision: str = DEFAULT_MATMUL_PRECISION  # torch.set_float32_matmul_precision's setting
    host_overhead: float = 1.0  # the host's dispatch time per kernel, a multiple of the launch floor
    # other rows of this run analyse the same zoo model at other batches (>= 2): its worker exports it once with
    # the batch symbolic and evaluates each row from that graph (`analyze_task`); not part of the row's identity
    shared: bool = field(default=False, compare=False)
    # with `shared`: the half dtype that export is traced in as well (`frontends.load`'s `half_casts`: the model's own
    # float32 casts; the rows of one model in float32 and in a half dtype share no export, their op lists differ)
    half_casts: str | None = field(default=None, compare=False)

    def request(self) -> dict:
        """What was asked of this model, as its row records it (`matmul_precision` only when not torch's default,
        `host_overhead` only when not 1.0, so that results files written before they existed still resume)."""
        req = {"inputs": list(self.inputs), "batch": self.batch, "dtype": self.dtype, "devices": list(self.devices)}
        if self.matmul_precision != DEFAULT_MATMUL_PRECISION:
            req["matmul_precision"] = self.matmul_precision
        if self.host_overhead != 1.0:
            req["host_overhead"] = self.host_overhead
        return req

    @property
    def key(self) -> str:
        """Identity of a job in a results file: the model and its request."""
        return row_key({"model": self.model, "request": self.request()})

    def __str__(self) -> str:
        extra = f" batch={self.batch}" if self.batch is not None else ""
        return self.model + extra


def row_key(row: dict) -> str:
    """The key of a results row (`Job.key` of the job that wrote it)."""
    return json.dumps([row.get("model"), row.get("request")], sort_keys=True)


def walk_models(root: Path) -> tuple[list[Path], Counter]:
    """Every model under `root` that preflight reads, each once, in sorted order; and what was skipped.

    A SavedModel directory is one model (the directory); a Paddle model is its `.pdmodel` file or its `.json`
    program beside a `.pdiparams` file; a transformers `config.json` (a JSON object with a `model_type`) is one.
    Hidden files and folders are skipped. Returns the model paths and a count of the skipped files by suffix.
    """
    found: list[Path] = []
    skipped: Counter = Counter()
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if any(m in files for m in SAVED_MODEL_MARKERS):
            found.append(here)
            dirs[:] = []  # its variables/ and assets/ are parts of this model
            continue
        for name in sorted(f for f in files if not f.startswith(".")):
            p = here / name
            suffix = p.suffix.lower()
            if suffix in MODEL_SUFFIXES or is_paddle_program(p) or is_hf_config(p):
                found.append(p)  # a transformers config.json is a model too, as `preflight analyze` reads it
            elif suffix == PADDLE_PARAMS and any(p.with_suffix(s).is_file() for s in (PADDLE_PROGRAM, ".json")):
                continue  # the weights of the Paddle model beside it
            else:
                skipped[suffix or "(no suffix)"] += 1
    return found, skipped


def _resolve(model: str, base: Path) -> str:
    if model.startswith("zoo:") or Path(model).is_absolute():
        return model
    return str(base / model)


def _jsonl_job(
    row: object,
    where: str,
    base: Path,
    devices: tuple[str, ...],
    batch: int | None,
    dtype: str | None,
    matmul_precision: str = DEFAULT_MATMUL_PRECISION,
    host_overhead: float = 1.0,
) -> Job:
    if not isinstance(row, dict):
        raise UsageError(f'{where}: a row is a JSON object with a "model" key')
    unknown = sorted(set(row) - set(_ROW_KEYS))
    if unknown:
        raise UsageError(f"{where}: unknown key {', '.join(map(repr, unknown))} (a row has {', '.join(_ROW_KEYS)})")
    model = row.get("model")
    if not isinstance(model, str) or not model.strip():
        raise UsageError(f'{where}: "model" must be a path or zoo:NAME')
    inputs = row.get("inputs") or []
    if not isinstance(inputs, list) or not all(isinstance(s, str) for s in inputs):
        raise UsageError(f'{where}: "inputs" is a list of "NAME:DIMS[:DTYPE]" strings')
    try:
        specs = [InputSpec.parse(s) for s in inputs]
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from exc
    if len({s.name for s in specs}) < len(specs):
        raise UsageError(f"{where}: an input is given twice")
    batch = row["batch"] if row.get("batch") is not None else batch
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or not 0 < batch <= MAX_DIM):
        raise UsageError(f'{where}: "batch" must be an integer from 1 to {MAX_DIM}')
    dtype = row["dtype"] if row.get("dtype") is not None else dtype
    if dtype is not None and dtype not in FLOAT_DTYPES:
        raise UsageError(f'{where}: "dtype" must be one of {", ".join(FLOAT_DTYPES)}')
    own = row.get("devices")
    if own is not None:
        if isinstance(own, str):
            own = [own]
        if not isinstance(own, list) or not all(isinstance(d, str) for d in own):
            raise UsageError(f'{where}: "devices" is a list of device names')
        devices = tuple(check_devices(own, where))
    if row.get("matmul_precision") is not None:
        matmul_precision = check_matmul_precision(row["matmul_precision"], where)
    if row.get("host_overhead") is not None:
        host_overhead = check_host_overhead(row["host_overhead"], where)
    model = model.strip()
    return Job(model, _resolve(model, base), tuple(inputs), batch, dtype, devices, matmul_precision, host_overhead)


def read_manifest(
    manifest: str | Path,
    devices: Sequence[str] = DEFAULT_DEVICES,
    batch: int | None = None,
    dtype: str | None = None,
    matmul_precision: str = DEFAULT_MATMUL_PRECISION,
    host_overhead: float = 1.0,
) -> tuple[list[Job], list[str]]:
    """The jobs a manifest names, in its order, duplicates dropped; and notes for the user.

    Args:
        manifest: a directory (every model preflight reads, found recursively: `walk_models`), a text file
            with one MODEL per line (blank lines and `#` comments skipped), or a JSON Lines file (`.jsonl`, or
            a text file whose first entry starts with `{`) whose rows are
            `{"model": ..., "inputs": ["x:1x3x224x224"], "batch": 8, "dtype": "float16", "devices": [...],
            "matmul_precision": "high", "host_overhead": 2.3}` (every key but "model" optional). Relative model
            paths are relative to the manifest's folder.
        devices: the GPUs to predict for where a row names none.
        batch, dtype: the batch and dtype of every model whose row names none (a directory's or a text file's
            models: all of them).
        matmul_precision: `torch.set_float32_matmul_precision`'s setting for the models whose row names none.
        host_overhead: the host's dispatch time per kernel as a multiple of preflight's launch floor, for the
            models whose row names none (`predictor.predict.predict`).

    Raises:
        UsageError: a missing or unreadable manifest, a malformed row (naming its line), an unknown device,
            or a manifest that names no model (exit 2).
    """
    path = Path(manifest)
    devices = tuple(check_devices(devices, "--device"))
    matmul_precision = check_matmul_precision(matmul_precision)
    host_overhead = check_host_overhead(host_overhead, "--host-overhead")
    notes: list[str] = []
    if path.is_dir():
        found, skipped = walk_models(path)
        if skipped:
            kinds = ", ".join(f"{k} ({v})" for k, v in sorted(skipped.items()))
            notes.append(f"skipped {sum(skipped.values())} files preflight does not read: {kinds}")
        jobs = [
            Job(str(p), str(p.absolute()), (), batch, dtype, devices, matmul_precision, host_overhead) for p in found
        ]
        if not jobs:
            raise UsageError(
                f"{path}: no model files found (preflight reads {', '.join(MODEL_SUFFIXES)} files, "
                "SavedModel and Paddle models)"
            )
        return jobs, notes
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise UsageError(f"{path}: no such manifest") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the manifest ({one_line(exc)})") from exc
    entries = [
        (n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip() and not line.startswith("#")
    ]
    as_jsonl = path.suffix.lower() == ".jsonl" or (entries and entries[0][1].startswith("{"))
    base = path.absolute().parent  # absolute: a worker's working folder is not the driver's on a cluster
    jobs: list[Job] = []
    for n, line in entries:
        where = f"{path.name} line {n}"
        if as_jsonl:
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{where}: not JSON ({exc.msg})") from exc
            jobs.append(_jsonl_job(row, where, base, devices, batch, dtype, matmul_precision, host_overhead))
        else:
            jobs.append(Job(line, _resolve(line, base), (), batch, dtype, devices, matmul_precision, host_overhead))
    if not jobs:
        raise UsageError(f"{path}: the manifest names no model")
    seen: set[str] = set()
    unique = [j for j in jobs if not (j.key in seen or seen.add(j.key))]  # the first of each
    if len(unique) < len(jobs):
        notes.append(f"{len(jobs) - len(unique)} duplicate entries of the manifest skipped")
    return unique, notes


# ---- the worker -----------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one job came to: the task's value, or an error with its class and one-line message."""

    ok: bool
    value: Any = None
    error_class: str | None = None
    message: str | None = None
    exit_code: int | None = None  # the CLI exit code of the error (docs/design.md), for the model's own errors
    seconds: float = 0.0  # wall time of the job in its worker (for an engine failure: since it was sent)
    cpu_seconds: float | None = None  # CPU time of the worker process during the job (below `seconds`: it waited)
    worker: dict = field(default_factory=dict)  # node, pid, max_rss_mib of the worker that ran it
    detail: str | None = None  # the traceback, when PREFLIGHT_DEBUG is set
    recycle: bool = False  # the worker should be replaced (a failed allocation may have left it damaged)

    def error_json(self) -> dict | None:
        if self.ok:
            return None
        out = {"class": self.error_class, "message": self.message, "exit_code": self.exit_code}
        if self.detail:
            out["traceback"] = self.detail
        return out


def _debug() -> bool:
    return os.environ.get("PREFLIGHT_DEBUG", "") not in ("", "0")


def _vm_bytes() -> int | None:
    """This process's address space (Linux /proc), or None where unknown."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def address_space_cap(memory_mb: int | None) -> Iterator[None]:
    """Inside: this process may grow its address space by at most `memory_mb` MiB (soft RLIMIT_AS over what it
    holds now; restored after). A larger allocation fails: MemoryError in Python, a failed native allocation in a
    library. No-op where RLIMIT_AS or /proc is unavailable."""
    try:
        import resource
    except ImportError:  # not POSIX
        yield
        return
    now = _vm_bytes()
    if memory_mb is None or now is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = now + memory_mb * 2**20
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


_ALLOCATION_FAILURES = ("can't allocate memory", "cannot allocate memory", "bad_alloc", "out of memory")


def _allocation_failure(exc: BaseException) -> bool:
    """A failed allocation, as Python (MemoryError) or a native library (torch, TVM) reports it."""
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or any(s in text for s in _ALLOCATION_FAILURES)


class Worker:
    """A long-lived worker: imports TVM and torch once, then runs job after job (as a Ray actor, one at a time).

    `run(task, job, memory_mb)` calls the module-level function `task(job)` under the address-space cap and
    returns an `Outcome`; an exception becomes the job's error, never the worker's. A worker that dies is
    replaced by the driver.
    """

    def __init__(self) -> None:
        import warnings

        if not _debug():
            warnings.filterwarnings("ignore")
        from . import pipeline  # noqa: F401 - TVM, torch and the passes: imported once per worker, on purpose

        self._info = {"node": _node_id(), "pid": os.getpid()}

    def ready(self) -> dict:
        """Where this worker runs and which preflight it imports (the driver checks it is its own)."""
        return dict(self._info, version=__version__, package=str(Path(__file__).resolve().parent))

    def keys(self, affinity: Callable[[Sequence[Any]], list[tuple[str, ...]]], jobs: Sequence[Any]) -> list | None:
        """`affinity(jobs)`: each job's affinity key (`run_jobs`), computed here because it may need the modules
        a worker imports (the zoo's registry imports torch); None if it fails (the driver then goes in order)."""
        try:
            return [tuple(k) for k in affinity(jobs)]
        except Exception:  # noqa: BLE001 - affinity only orders the jobs: without it they run in manifest order
            return None

    def run(self, task: Callable[[Any], Any], job: Any, memory_mb: int | None) -> Outcome:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            with address_space_cap(memory_mb):
                value = task(job)
            out = Outcome(ok=True, value=value)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever a model does is its own row's error
            out = _failure(exc, memory_mb)
        out.seconds, out.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
        out.worker = dict(self._info, max_rss_mib=_max_rss_mib())
        return out


def _failure(exc: BaseException, memory_mb: int | None) -> Outcome:
    detail = traceback.format_exc() if _debug() else None
    if isinstance(exc, PreflightError):
        return Outcome(False, None, type(exc).__name__, one_line(exc), exc.exit_code, detail=detail)
    if _allocation_failure(exc):
        cap = f"more than the {memory_mb} MiB of memory a model may use (--memory-mb)" if memory_mb else "memory"
        return Outcome(False, None, MEMORY_LIMIT, f"the model needed {cap}: {one_line(exc)}", 1, detail, recycle=True)
    return Outcome(False, None, type(exc).__name__, one_line(exc), 1, detail=detail)


def _node_id() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - outside Ray (a plain Worker in a test): no node
        return None


def _max_rss_mib() -> float | None:
    try:
        import resource

        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux
    except (ImportError, OSError):
        return None


# ---- the engine -----------------------------------------------------------------------------------------------


def local_cores() -> int:
    """The CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def ray_cluster(workers: int | None = None, address: str | None = None) -> Iterator[int]:
    """Inside: a connected Ray; yields the number of workers to run.

    With no `address`, starts a local Ray with `workers` CPUs (default: this machine's cores) and shuts it down
    after; its workers import preflight from where this process does. With `address` ("auto", "HOST:PORT" or
    "ray://HOST:PORT"), joins that cluster (default workers: its CPUs) and disconnects after. If Ray is already
    initialised in this process (the caller's own session), uses it as it is.
    Ray's logs stay in its session folder: nothing from Ray reaches this process's stdout or stderr.
    Ray is the optional extra `ray` (in `all`): without it, a `MissingExtraError` names the install.
    """
    from .frontends.native import import_extra

    ray = import_extra("ray", "ray", "analyze-many and the dataset builder")

    if ray.is_initialized():
        yield workers or _cluster_cpus()
        return
    quiet = {"log_to_driver": False, "logging_level": logging.ERROR}
    if address is None:
        n = workers or local_cores()
        # the workers are children of the raylet, which inherits this environment: put this process's preflight
        # first on their path, so that they run exactly the code the driver does
        root = str(Path(__file__).resolve().parents[1])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        with _env(PYTHONPATH=path, RAY_USAGE_STATS_ENABLED="0"):
            ray.init(
                address="local",
                num_cpus=n,
                include_dashboard=False,
                object_store_memory=OBJECT_STORE_BYTES,
                **quiet,
            )
    else:
        _probe(address)
        try:
            ray.init(address=address, **quiet)
        except Exception as exc:  # ConnectionError, RuntimeError, ValueError, auth errors...
            raise UsageError(f"cannot join the Ray cluster at {address}: {_join_error(exc)}") from exc
        n = workers or _cluster_cpus()
    try:
        yield n
    finally:
        ray.shutdown()


def _probe(address: str) -> None:
    """UsageError now if nothing answers at a cluster's address (Ray itself would retry for minutes)."""
    target = address.removeprefix("ray://")
    if target == address:  # "auto" or HOST:PORT: where Ray would connect
        try:
            from ray._private.services import canonicalize_bootstrap_address

            target = canonicalize_bootstrap_address(address) or ""
        except Exception:  # noqa: BLE001 - no cluster recorded for "auto" (ray.init says so), or Ray moved this
            return
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise UsageError(
            f"cannot join the Ray cluster at {address}: nothing answers at {target} ({exc.strerror or exc})"
        ) from exc


def _join_error(exc: BaseException) -> str:
    """One line for a failed `ray.init`: token authentication named when that is what failed."""
    chain: list[str] = []
    e: BaseException | None = exc
    while e is not None and len(chain) < 5:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    if any("InvalidAuthToken" in t or "AuthenticationError" in t for t in chain):
        return (
            "the cluster uses token authentication: set RAY_AUTH_MODE=token and give its token "
            "(~/.ray/auth_token or RAY_AUTH_TOKEN; `ray get-auth-token` on the head)"
        )
    return one_line(exc)


def _cluster_cpus() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


@dataclass
class _Slot:
    actor: Any
    ready: Any  # ObjectRef of `ready()` while the worker starts, else None
    spawned: float
    n: int = 0  # which worker (a replacement is a new one: it has met nothing)
    ref: Any = None  # ObjectRef of the running job
    job: Any = None
    sent: float = 0.0
    info: dict = field(default_factory=dict)


class AffinityQueue:
    """The jobs waiting for a worker, handed out by affinity: each worker gets the job it has the most in common with.

    A job's key is a tuple from coarse to fine, e.g. `("zoo.hf", "zoo.hf_language", "bert", "zoo:bert_tiny")`
    (`job_affinity`): what a worker pays for only the first time it meets it (importing a library, a family's
    modelling code, torch's and TVM's first calls of a kind, a symbolic export). `pop(worker)` returns, in order
    of preference:

    1. a job whose key shares the longest prefix with a key this worker has been given (its own model again,
       then its family, then its library);
    2. among the others, the one whose key shares the shortest prefix with what the other workers have been given
       (a family nobody has met before one another worker has: a new worker claims a family of its own);
    3. ties (and everything, with no keys): the manifest's order.

    So a family's models go to the worker that has met it, and a worker that runs out of its own steals the work
    the others have met least. Each `pop` looks at the distinct keys still waiting (not at every job).
    """

    def __init__(self, jobs: Sequence[Any], keys: Sequence[tuple[str, ...]] | None = None):
        self.jobs = list(jobs)
        self._fifo: deque[int] | None = deque(range(len(self.jobs)))  # the waiting jobs, without keys
        self._left: dict[tuple[str, ...], deque[int]] = {}  # key -> its waiting jobs (indices), keys in order
        self._mine: dict[int, set[tuple[str, ...]]] = {}  # worker -> the key prefixes it has been given
        self._claimed: dict[tuple[str, ...], set[int]] = {}  # key prefix -> the workers given it
        self._n = len(self.jobs)
        self.set_keys(keys)

    def set_keys(self, keys: Sequence[tuple[str, ...]] | None) -> None:
        """Order what is still waiting by `keys` (one per job of the constructor's list; None: in order)."""
        waiting = sorted(self._waiting())
        if keys is None or len(keys) != len(self.jobs):
            self._fifo, self._left = deque(waiting), {}
            return
        self._fifo, self._left = None, {}
        for i in waiting:
            self._left.setdefault(tuple(keys[i]), deque()).append(i)

    def _waiting(self) -> Iterator[int]:
        if self._fifo is not None:
            yield from self._fifo
        else:
            for q in self._left.values():
                yield from q

    def __len__(self) -> int:
        return self._n

    def pop(self, worker: int) -> Any:
        """The next job for `worker` (IndexError when none is left)."""
        if not self._n:
            raise IndexError("no job left")
        self._n -= 1
        if self._fifo is not None:
            return self.jobs[self._fifo.popleft()]
        mine = self._mine.setdefault(worker, set())
        best, best_rank = None, None
        for key, q in self._left.items():
            prefixes = [key[:n] for n in range(1, len(key) + 1)]
            own = max((n for n, p in enumerate(prefixes, 1) if p in mine), default=0)
            others = max((n for n, p in enumerate(prefixes, 1) if self._claimed.get(p, set()) - {worker}), default=0)
            rank = (-own, others, q[0])
            if best_rank is None or rank < best_rank:
                best, best_rank = key, rank
        q = self._left[best]
        i = q.popleft()
        if not q:
            del self._left[best]
        for n in range(1, len(best) + 1):
            mine.add(best[:n])
            self._claimed.setdefault(best[:n], set()).add(worker)
        return self.jobs[i]


def run_jobs(
    jobs: Sequence[Any],
    task: Callable[[Any], Any],
    on_result: Callable[[Any, Outcome], None],
    *,
    workers: int,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    memory_mb: int | None = DEFAULT_MEMORY_MB,
    check_package: bool = True,
    on_start: Callable[[], None] | None = None,
    affinity: Callable[[Sequence[Any]], list[tuple[str, ...]]] | None = None,
) -> None:
    """Run `task(job)` for every job on `workers` Ray actors; call `on_result(job, outcome)` as each finishes.

    Needs a connected Ray (`ray_cluster`). `task` is a module-level function the workers can import (Ray sends
    it by reference) and `jobs` are picklable. Each job gets at most `timeout_s` seconds (then its worker is
    killed and replaced) and `memory_mb` MiB of address space over what its worker held before it (None: no
    limit). A worker that dies costs only its own job (error class `WorkerDied`). `check_package`: refuse to
    run if a worker imports another copy of preflight than this process (an embedded Ray's workers must run the
    driver's code). `on_start()` is called once, when the first worker is ready.

    The actors are a warm pool: each lives for the whole run, job after job. `affinity` (a module-level function
    like `task`): `affinity(jobs)` gives each job a key, computed once by the first worker that is ready, and the
    jobs are handed out by it (`AffinityQueue`: a family's jobs go to the worker that has met it); without it, or
    if it fails, in order.

    Raises:
        AnalysisError: no worker could start (their error), or none started within `START_TIMEOUT_S`.
    """
    import ray
    from ray.exceptions import RayActorError

    queue = AffinityQueue(jobs)
    if not queue:
        return
    remote = ray.remote(Worker).options(num_cpus=1, max_restarts=0, max_task_retries=0)
    here = str(Path(__file__).resolve().parent)
    numbers = itertools.count()

    def spawn() -> _Slot:
        actor = remote.remote()
        return _Slot(actor, actor.ready.remote(), time.monotonic(), n=next(numbers))

    slots = [spawn() for _ in range(min(workers, len(queue)))]
    failed_starts = 0

    def replace(s: _Slot, kill: bool) -> None:
        if kill:
            ray.kill(s.actor, no_restart=True)
        slots.remove(s)
        if queue:
            slots.append(spawn())

    def finish(s: _Slot, out: Outcome) -> None:
        job = s.job
        s.ref, s.job = None, None
        on_result(job, out)

    try:
        while queue or any(s.ref is not None for s in slots):
            waiting = {(s.ready if s.ready is not None else s.ref): s for s in slots}
            waiting.pop(None, None)
            if not waiting:
                raise AnalysisError("no Ray worker is left to run the job")  # unreachable: a slot is always there
            done, _ = ray.wait(list(waiting), num_returns=1, timeout=_TICK_S)
            now = time.monotonic()
            for ref in done:
                s = waiting[ref]
                if ref is s.ready:  # a worker started, or failed to
                    try:
                        s.info = ray.get(ref)
                    except Exception as exc:
                        failed_starts += 1
                        if failed_starts > 2 * workers + 2:
                            raise AnalysisError(f"Ray workers cannot start: {_cause(exc)}") from exc
                        replace(s, kill=True)
                        continue
                    if check_package and s.info.get("package") != here:
                        raise AnalysisError(
                            f"the Ray workers import preflight from {s.info.get('package')}, this process from "
                            f"{here}: install the same preflight on every node"
                        )
                    s.ready, failed_starts = None, 0
                    if affinity is not None:  # once, before the first job goes out (the keys take milliseconds)
                        with contextlib.suppress(Exception):
                            queue.set_keys(ray.get(s.actor.keys.remote(affinity, queue.jobs), timeout=START_TIMEOUT_S))
                        affinity = None
                    if on_start is not None:
                        on_start()
                        on_start = None
                    continue
                try:
                    out = ray.get(ref)
                except RayActorError:
                    out = _engine_failure(WORKER_DIED, DIED_MESSAGE, s, now)
                    finish(s, out)
                    replace(s, kill=False)
                    continue
                finish(s, out)
                if out.recycle:
                    replace(s, kill=True)
            for s in list(slots):
                if s.ref is not None and timeout_s is not None and now - s.sent > timeout_s:
                    out = _engine_failure(
                        TIMEOUT, f"no result after {timeout_s:g} s (--timeout); its worker was stopped", s, now
                    )
                    finish(s, out)
                    replace(s, kill=True)
                elif s.ready is not None and now - s.spawned > START_TIMEOUT_S:
                    if not any(o.ready is None for o in slots):
                        raise AnalysisError(
                            f"no Ray worker started within {START_TIMEOUT_S:g} s: does the cluster have a free "
                            "CPU (`ray status`)?"
                        )
                    slots.remove(s)  # more workers asked for than the cluster places: go on with the others
                    ray.kill(s.actor, no_restart=True)
            for s in list(slots):
                if s.ready is None and s.ref is None:
                    if queue:
                        s.job = queue.pop(s.n)
                        s.ref = s.actor.run.remote(task, s.job, memory_mb)
                        s.sent = time.monotonic()
                    else:  # nothing left for it: free its CPU
                        slots.remove(s)
                        ray.kill(s.actor, no_restart=True)
    finally:
        for s in slots:
            with contextlib.suppress(Exception):
                ray.kill(s.actor, no_restart=True)


def _engine_failure(error_class: str, message: str, s: _Slot, now: float) -> Outcome:
    worker = {k: s.info.get(k) for k in ("node", "pid")}
    return Outcome(False, None, error_class, message, 1, seconds=now - s.sent, worker=worker)


DIED_MESSAGE = (
    "the worker process died while analysing this model (a crash in a native library, or killed by the system, "
    "e.g. for memory); the job went on with a new worker"
)


def _cause(exc: BaseException) -> str:
    """The first line of what made a Ray worker fail to start (its creation task's error, if Ray kept it)."""
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    useful = [t for t in text if "Error" in t or "error" in t] or text or [type(exc).__name__]
    return useful[-1].strip()[:300]


# ---- analyze-many ---------------------------------------------------------------------------------------------


SYMBOLIC_MODELS = 4  # symbolic exports a worker keeps (a zoo model is built on the meta device: no weights)
_symbolic: OrderedDict[tuple, Any] = OrderedDict()  # this worker's: `_symbolic_key` -> SymbolicModel, or None (none)


def _symbolic_key(job: Job) -> tuple[str, str | None] | None:
    """What rows that can share one symbolic export have in common, (path, the half dtype a traced model is traced in
    as well: `Job.half_casts`): a zoo model, its shapes from the spec, at a batch of at least 2 (torch specialises 1:
    batch 1 is exported on its own, as `report --batches` does); or a `.pt2`, ONNX or Paddle file or a transformers
    config without `inputs` (one import with its own dynamic dims, `frontends.load_symbolic_file`; the rows its range
    does not cover are analysed on their own)."""
    from .frontends import takes_config, takes_symbolic

    if job.inputs or job.batch is None:
        return None
    if job.path.startswith("zoo:"):
        return (job.path, half_of(job.dtype)) if job.batch >= 2 else None
    if not takes_symbolic(job.path):
        return None
    return job.path, (half_of(job.dtype) if takes_config(job.path) else None)


def mark_shared(jobs: Sequence[Job]) -> list[Job]:
    """`jobs` with `shared` set on the rows whose model (a zoo model, a `.pt2`, ONNX or Paddle file) at least one
    other row analyses at another batch (the rule of `analyzer.sweep`: one symbolic export pays from two batches)."""
    keys = [_symbolic_key(j) for j in jobs]  # once per row: a Paddle folder's key lists the folder
    count = Counter(k for k in keys if k is not None)
    return [
        dataclasses.replace(j, shared=count[k] >= 2, half_casts=k[1]) if k else j
        for j, k in zip(jobs, keys, strict=True)
    ]


def _symbolic_model(key: tuple[str, str | None]):
    """This worker's symbolic export of the model `key` (path, `Job.half_casts`) names: a zoo model's export, a
    file's import with its dynamic dims symbolic (`analyzer.symbolic.load_symbolic`, done once per worker and kept
    for the next rows), or None when the model has none (torch.export fixes its batch, the file's batch is fixed...)."""
    from .symbolic import load_symbolic

    if key not in _symbolic:
        path, half = key
        try:
            _symbolic[key] = load_symbolic(path, half_casts=half)
        except Exception as exc:  # no symbolic export: each row is exported on its own instead
            if _allocation_failure(exc):
                raise
            _symbolic[key] = None
        while len(_symbolic) > SYMBOLIC_MODELS:
            _symbolic.popitem(last=False)
    _symbolic.move_to_end(key)
    return _symbolic[key]


def _analyze(job: Job):
    """The Report of a row: from the worker's symbolic export of its model when the row is `shared` and the
    export covers its batch (`analyzer.symbolic.analyze_at`, the graph `report --batches` evaluates), else
    loaded and analysed on its own (`analyze_model`); both give the same report (docs/symbolic.md)."""
    from .pipeline import analyze_model
    from .symbolic import analyze_at

    if job.shared and job.batch is not None:
        sm = _symbolic_model((job.path, job.half_casts))
        if sm is not None and sm.covers(job.batch):
            try:
                return analyze_at(sm, job.batch, dtype=job.dtype)
            except PreflightError:
                pass  # the row's own export says what is wrong, as a row analysed on its own would
    return analyze_model(job.path, inputs=list(job.inputs), batch=job.batch, dtype=job.dtype)


def analyze_task(job: Job) -> dict:
    """The worker's side of one manifest row: analyse, predict on every device, and keep what a row holds.

    Returns the row's result fields (the driver adds model, request, status, error, seconds and worker):
    framework, name, inputs, totals and graph as in `preflight.report/1`, `predictions` as
    `Prediction.to_json()`, one per device, and the report's warnings. Rows that share a zoo model (`Job.shared`)
    are evaluated from one symbolic export (a file: one import) of it per worker (`_analyze`).
    """
    from .pipeline import predict_all

    report = _analyze(job)
    predict_all(report, job.devices, matmul_precision=job.matmul_precision, host_overhead=job.host_overhead)
    doc = report.to_json()
    return {
        "framework": doc["model"]["framework"],
        "name": doc["model"]["name"],
        "inputs": doc["inputs"],
        "totals": doc["totals"],
        "graph": doc["graph"],
        "predictions": doc.get("predictions", []),
        "warnings": doc["warnings"],
    }


_HF_MODULES = ("zoo.hf_", "zoo._hf", "zoo.seq2seq", "zoo.serving", "zoo.speech")  # zoo modules using transformers


def job_affinity(jobs: Sequence[Job]) -> list[tuple[str, ...]]:
    """Each job's affinity key (`AffinityQueue`), coarse to fine: for a zoo model (library, the zoo module of its
    family, the family, the model) where the library is "transformers" for the families built on it and "torch"
    for the others; for a file (its format, the file). Runs in a worker (the zoo's registry imports torch)."""
    import zoo

    out: list[tuple[str, ...]] = []
    for j in jobs:
        if j.path.startswith("zoo:"):
            try:
                family, _ = zoo.resolve(j.path[4:].partition("?")[0])
                module = getattr(family.builder, "__module__", "") or ""
                library = "transformers" if module.startswith(_HF_MODULES) else "torch"
                out.append(("zoo:" + library, module, family.name, j.path))
            except Exception:  # noqa: BLE001 - an unknown model: its row gets the error, from any worker
                out.append(("zoo:?", j.path))
        else:
            out.append(("file" + Path(j.path).suffix.lower(), j.path))
    return out


def make_row(job: Job, out: Outcome) -> dict:
    """The results row of a finished job (`preflight.batch/1`)."""
    row = {
        "schema": ROW_SCHEMA,
        "model": job.model,
        "request": job.request(),
        "status": "ok" if out.ok else "error",
        "error": out.error_json(),
        "seconds": round(out.seconds, 3),
        "cpu_seconds": None if out.cpu_seconds is None else round(out.cpu_seconds, 3),
        "worker": out.worker,
    }
    if out.ok:
        row.update(out.value)
    return row


class ResultsFile:
    """The JSON Lines results of a job: rows appended as they come, each flushed and fsync'd.

    With `resume`, the rows already there are read (a last line cut short by a killed job is dropped from the
    file); without it, an existing non-empty file is refused rather than overwritten.
    """

    def __init__(self, path: str | Path, resume: bool):
        self.path = Path(path)
        self.rows: dict[str, dict] = {}
        if self.path.is_dir():
            raise UsageError(f"{self.path} is a directory")
        exists = self.path.is_file() and self.path.stat().st_size > 0
        if exists and not resume:
            raise UsageError(f"{self.path} exists: give --resume to continue it, or another -o")
        if exists:
            self._read()
        folder = self.path.absolute().parent
        if not folder.is_dir() or not os.access(self.path if self.path.exists() else folder, os.W_OK):
            raise UsageError(f"cannot write {self.path}: no such folder, or no permission")
        self._f: IO[str] | None = None  # opened at the first row: a job that cannot start leaves no file

    def _read(self) -> None:
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # the job was killed while writing its last row: that model runs again
            with open(self.path, "r+b") as f:
                f.truncate(end)
            data = data[:end]
        for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(
                    f"{self.path} line {n}: not a results row ({exc.msg}); is this the right file?"
                ) from exc
            if not isinstance(row, dict) or row.get("schema") != ROW_SCHEMA:
                raise UsageError(f"{self.path} line {n}: not a row of preflight analyze-many")
            self.rows[row_key(row)] = row

    def write(self, row: dict) -> None:
        if self._f is None:
            self._f = open(self.path, "a", encoding="utf-8")
        self._f.write(json.dumps(row, separators=(",", ":")) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        self.rows[row_key(row)] = row

    def close(self) -> None:
        if self._f is not None:
            self._f.close()


def _duration(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Progress on a stream (stderr): done / total, rate in models per minute, ETA and failures.

    On a terminal one line redrawn as a bar; otherwise one line per finished model (a log a CI job keeps).
    """

    def __init__(self, total: int, stream: IO[str] | None, width: int = 24):
        self.total, self.stream, self.width = total, stream, width
        self.done = self.failed = 0
        self.t0 = time.monotonic()
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())

    def start(self) -> None:
        """Count the rate from now (the first worker is ready)."""
        self.t0 = time.monotonic()

    def update(self, label: str, out: Outcome) -> None:
        self.done += 1
        self.failed += not out.ok
        if self.stream is None:
            return
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        rate = self.done / elapsed * 60  # models per minute
        eta = (self.total - self.done) / (self.done / elapsed)
        stats = f"{rate:.1f} models/min, ETA {_duration(eta)}, {self.failed} failed"
        if self.tty:
            filled = round(self.width * self.done / max(self.total, 1))
            bar = "#" * filled + "." * (self.width - filled)
            end = "\n" if self.done == self.total else ""
            self.stream.write(f"\r[{bar}] {self.done}/{self.total}  {stats}\x1b[K{end}")
        else:
            what = "ok" if out.ok else out.error_class
            self.stream.write(f"[{self.done}/{self.total}] {stats} | {label}: {what} in {out.seconds:.1f}s\n")
        self.stream.flush()


@dataclass
class Summary:
    """The rows of one manifest's models in a results file, and the table `text()` prints at the end."""

    rows: list[dict]
    output: str
    ran: int = 0  # models run by this invocation (the rest were in the file already)
    workers: int = 0

    @property
    def ok(self) -> list[dict]:
        return [r for r in self.rows if r["status"] == "ok"]

    def failures(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for r in self.rows:
            if r["status"] != "ok":
                out.setdefault((r.get("error") or {}).get("class") or "?", []).append(r)
        return dict(sorted(out.items(), key=lambda kv: (-len(kv[1]), kv[0])))

    def latencies(self) -> dict[str, list[float]]:
        """Predicted latency (ms) of every ok model, per device."""
        out: dict[str, list[float]] = {}
        for r in self.ok:
            for p in r.get("predictions", []):
                out.setdefault(p["device"], []).append(float(p["latency_ms"]))
        return out

    def text(self, slowest: int = 5) -> str:
        n, ok = len(self.rows), len(self.ok)
        lines = [
            f"analyze-many: {n} models, {ok} ok, {n - ok} failed ({self.ran} run now on {self.workers} workers; "
            f"rows in {self.output})",
            "",
        ]
        failures = self.failures()
        if failures:
            rows = []
            for cls, rs in failures.items():
                example = (rs[0].get("error") or {}).get("message") or ""
                rows.append([cls, str(len(rs)), example[:100] + ("..." if len(example) > 100 else "")])
            lines += [*_text_table(["failed: error class", "models", "first message"], rows, {1}), ""]
        top = sorted(self.rows, key=lambda r: -float(r.get("seconds") or 0))[:slowest]
        if top:
            rows = [[r["model"], f"{float(r.get('seconds') or 0):.1f}", r["status"]] for r in top]
            lines += [*_text_table(["slowest models", "seconds", "status"], rows, {1}), ""]
        flops = sum(int(r["totals"]["flops"]) for r in self.ok)
        incomplete = [r for r in self.ok if _incomplete(r["totals"])]
        line = f"total FLOPs of the {ok} ok models: {si(flops, 'FLOP')} ({flops:,})"
        if incomplete:
            models = f"{len(incomplete)} model{'s have' if len(incomplete) != 1 else ' has'}"
            line = (
                f"total FLOPs of the {ok} ok models: at least {si(flops, 'FLOP')} ({flops:,}); incomplete: {models} "
                f"operators that count 0 (no cost rule sees their work; their rows' totals.unsupported), e.g. "
                f"{incomplete[0]['model']}"
            )
        lines += [line, ""]
        lat = self.latencies()
        if lat:
            rows = []
            for device, values in lat.items():
                q = np.percentile(values, [0, 10, 50, 90, 100])
                rows.append([device, str(len(values)), *(f"{v:.3g}" for v in q)])
            header = ["predicted latency (ms)", "models", "min", "p10", "median", "p90", "max"]
            lines += _text_table(header, rows, {1, 2, 3, 4, 5, 6})
        return "\n".join(lines).rstrip() + "\n"


def _incomplete(totals: dict) -> bool:
    """A row's totals leave out work (`totals.incomplete`; rows written before that field: any unsupported op)."""
    return bool(totals.get("incomplete", bool(totals.get("unsupported"))))


def analyze_many(
    manifest: str | Path,
    output: str | Path,
    *,
    devices: Sequence[str] = DEFAULT_DEVICES,
    batch: int | None = None,
    dtype: str | None = None,
    matmul_precision: str = DEFAULT_MATMUL_PRECISION,
    host_overhead: float = 1.0,
    workers: int | None = None,
    address: str | None = None,
    resume: bool = False,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    memory_mb: int | None = DEFAULT_MEMORY_MB,
    progress: IO[str] | None = None,
    task: Callable[[Job], dict] = analyze_task,
) -> Summary:
    """Analyse every model of `manifest` on Ray and stream one row per model to `output` (JSON Lines).

    Args:
        manifest: a directory, a text file or a JSONL file (`read_manifest`).
        output: the results file; rows are appended as models finish, flushed and fsync'd.
        devices: the GPUs to predict for, for manifest rows that name none.
        batch, dtype, matmul_precision: the batch, dtype and `torch.set_float32_matmul_precision` setting of the
            models whose manifest row names none (`read_manifest`); host_overhead likewise (the host's dispatch time
            per kernel as a multiple of preflight's launch floor).
        workers: worker processes (default: this machine's cores, or with `address` the cluster's CPUs).
        address: join this Ray cluster ("auto", "HOST:PORT", "ray://HOST:PORT") instead of starting one.
        resume: keep `output`'s rows and run only the models it has no row for.
        timeout_s: per-model time limit (seconds); memory_mb: per-model memory cap (MiB of address space).
        progress: where progress lines go (stderr in the CLI); None: silent.
        task: what a worker runs per job (`analyze_task`; tests pass one that misbehaves on purpose).

    Returns:
        The `Summary` of the manifest's rows (this run's and those already in `output`).

    Raises:
        UsageError: a bad manifest or output file, or a cluster that cannot be joined (exit 2).
    """
    jobs, notes = read_manifest(manifest, devices, batch, dtype, matmul_precision, host_overhead)
    results = ResultsFile(output, resume)
    say = (lambda m: (progress.write(m + "\n"), progress.flush())) if progress is not None else (lambda m: None)
    for note in notes:
        say(f"note: {note}")
    todo = mark_shared([j for j in jobs if j.key not in results.rows])
    if len(todo) < len(jobs):
        say(f"resuming: {len(jobs) - len(todo)} of {len(jobs)} models already in {output}")
    n_workers = 0
    try:
        if todo:
            if address is None:
                say(f"starting a local Ray with {workers or local_cores()} workers")
            with ray_cluster(workers, address) as n_workers:
                n_workers = min(n_workers, len(todo))
                where = f"the Ray cluster at {address}" if address else "the local Ray"
                say(f"analysing {len(todo)} models with {n_workers} workers on {where}")
                bar = Progress(len(todo), progress)

                def on_result(job: Job, out: Outcome) -> None:
                    results.write(make_row(job, out))
                    bar.update(str(job), out)

                run_jobs(
                    todo,
                    task,
                    on_result,
                    workers=n_workers,
                    timeout_s=timeout_s,
                    memory_mb=memory_mb,
                    check_package=address is None,
                    on_start=bar.start,
                    affinity=job_affinity,
                )
    finally:
        results.close()
    rows = [results.rows[j.key] for j in jobs if j.key in results.rows]
    return Summary(rows, str(output), ran=len(todo), workers=n_workers)


__all__ = [
    "AffinityQueue",
    "Job",
    "Outcome",
    "Summary",
    "Worker",
    "analyze_many",
    "analyze_task",
    "job_affinity",
    "mark_shared",
    "ray_cluster",
    "read_manifest",
    "run_jobs",
    "walk_models",
]
