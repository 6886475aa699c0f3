"""One memory and time budget for a whole analysis: a watchdog thread that stops preflight cleanly.

A hostile (or merely enormous) model file can make any reader or pass allocate or loop: TVM's importers fold
constants with numpy, a graph of millions of nodes takes minutes to walk, a recurrence unrolls per step. The
per-format checks refuse what they know; this budget bounds everything else, in every reader and pass.

How: while a CLI command analyses a model, a daemon thread reads, every `POLL_S` seconds, the resident memory
(RSS, from `/proc/<pid>/statm`) this process added since the command started plus that of the child processes
it started (`isolate` registers them), and the wall clock. Past either cap it kills those children, removes
their scratch folders, prints one line (`error: <file>: the analysis went over its memory budget (8.0 GiB;
--max-memory raises it); stopped it`) and ends the process with `EXIT_CODE` (3), whatever the main thread is
doing, even inside a native library that never returns to Python. The isolated children also get their wall
and CPU time lowered to what is left of the budget (`isolate.child_limits`).

Why not RLIMIT_AS on this process: torch and TVM reserve large virtual mappings (thread arenas, CUDA-less
allocators), so an address-space limit fails healthy analyses long before their RSS is anywhere near it, and
a failed allocation inside a native library ends in an abort or an internal error, not in a clean message.
RSS is what exhausts a machine. A poll can overshoot by what the process allocates in one interval (numpy
fills about 5 GB/s: well under a gigabyte in 0.1 s).

Library callers (`analyzer.api`) get no watchdog (an `os._exit` is the CLI's business); `analyze-many` limits
each model in its worker (`--timeout`, `--memory-mb`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import EXIT_LIMIT, PreflightError
from .frontends.specs import printable

GIB = 1 << 30
DEFAULT_MEMORY_GIB = 8.0
DEFAULT_TIMEOUT_S = 600.0
EXIT_CODE = EXIT_LIMIT  # the README's exit-code table
POLL_S = 0.1


class BudgetExceededError(PreflightError):
    """The analysis went over its memory or time budget (exit code 3)."""

    exit_code = EXIT_CODE


@dataclass(frozen=True)
class Budget:
    """Caps of one analysis: `memory` bytes of RSS (what this process adds to its size at the start, plus its
    children's), `timeout_s` seconds of wall time from the start; 0 for either means no cap. `label` names the
    model in messages."""

    memory: int
    timeout_s: float
    label: str

    def memory_message(self) -> str:
        return (
            f"{self.label}: the analysis went over its memory budget ({self.memory / GIB:g} GiB; --max-memory "
            f"raises it); stopped it"
        )

    def time_message(self) -> str:
        return (
            f"{self.label}: the analysis did not finish within its time budget ({self.timeout_s:g} s; --timeout "
            f"raises it); stopped it"
        )


_lock = threading.Lock()
_active: dict = {}  # "budget": Budget, "deadline": monotonic seconds or None
_children: dict[int, Path | None] = {}  # pid -> its scratch folder (removed when the budget stops everything)


def active() -> Budget | None:
    return _active.get("budget")


def remaining_s() -> float | None:
    """Seconds left before the time cap, or None without one."""
    deadline = _active.get("deadline")
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def track(pid: int, scratch: Path | None = None) -> None:
    """Count child `pid` (and its process group) in the budget; `scratch` is removed if the budget stops it."""
    with _lock:
        _children[pid] = scratch


def untrack(pid: int) -> None:
    with _lock:
        _children.pop(pid, None)


def rss_bytes(pid: int | str = "self") -> int:
    """Resident memory of a process in bytes (0 when it is gone): `/proc/<pid>/statm`'s second field, in pages."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def used_bytes(base: int) -> int:
    """RSS this process holds beyond `base`, plus its tracked children's."""
    with _lock:
        pids = list(_children)
    return max(0, rss_bytes() - base) + sum(rss_bytes(p) for p in pids)


def _stop(message: str) -> None:
    """Kill the tracked children, remove their scratch folders, print `message`, exit with EXIT_CODE."""
    with _lock:
        children = dict(_children)
    for pid, scratch in children.items():
        for kill in (os.killpg, os.kill):  # its process group (a forked child leads one), else the process
            try:
                kill(pid, signal.SIGKILL)
                break
            except (ProcessLookupError, PermissionError):
                continue
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - a closed stdout: nothing to flush
        pass
    os.write(2, f"error: {message}\n".encode("utf-8", "replace"))
    os._exit(EXIT_CODE)


def _watch(budget: Budget, base: int, deadline: float | None, stop: threading.Event) -> None:
    while not stop.wait(POLL_S):
        if budget.memory and used_bytes(base) > budget.memory:
            _stop(budget.memory_message())
        if deadline is not None and time.monotonic() > deadline:
            _stop(budget.time_message())


@contextlib.contextmanager
def watch(label: str, memory_gib: float | None = DEFAULT_MEMORY_GIB, timeout_s: float | None = DEFAULT_TIMEOUT_S):
    """Run the body under a budget of `memory_gib` GiB of RSS and `timeout_s` seconds (0 or None: no cap).
    Past either, the process ends with a one-line error and exit code 3 (see the module docstring)."""
    name = Path(label).name if not label.startswith("zoo:") else label
    budget = Budget(int((memory_gib or 0) * GIB), float(timeout_s or 0), printable(name[:200]))
    if not budget.memory and not budget.timeout_s:
        yield budget
        return
    stop = threading.Event()
    deadline = time.monotonic() + budget.timeout_s if budget.timeout_s else None
    _active.update(budget=budget, deadline=deadline)
    args = (budget, rss_bytes(), deadline, stop)
    thread = threading.Thread(target=_watch, args=args, name="preflight-budget", daemon=True)
    thread.start()
    try:
        yield budget
    finally:
        stop.set()
        thread.join()
        _active.clear()
