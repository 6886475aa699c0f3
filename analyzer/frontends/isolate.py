"""Run a frontend step in a child process with resource limits, and get its result back as bytes.

The steps that hand a model file to a large native library (torch's deserializer and decompositions with
TVM's PyTorch importer, TensorFlow's Keras loader and TFLite converter, paddle2onnx) run here: a crash,
a runaway allocation or an endless loop in that library becomes a one-line error instead of taking
preflight down. This is defence in depth, not a security boundary: the child runs as the same user; what
keeps a hostile file from running code are the checks before it (`pt2_safety`, Keras' safe_mode, ...).

The child gets
  - address-space, CPU-time and file-size limits (RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE; no core dumps),
  - a wall-clock limit (its whole process group is killed),
  - a fresh scratch directory as its working directory and TMPDIR, deleted afterwards,
  - its stdout and stderr in a log file there (native libraries print to the file descriptors),
  - on request of the step (`restrict_writes`, the TensorFlow step calls it), Landlock: no file written,
    created, renamed or deleted outside the scratch directory and no TCP connection, where the kernel has it.

Two ways to start it:
  - "fork" (Linux, macOS): the child is a copy of this process, so torch and TVM, already imported here,
    cost nothing to start; the step is any callable. The child sets torch to one thread (no OpenMP pool
    inherited from a parent that used one) and leaves with `os._exit`, running no atexit handler.
  - "spawn": a fresh interpreter runs `module:function` with JSON arguments; for steps whose library this
    process must not import (TensorFlow, Paddle) or where fork is unavailable.

The step returns `(meta, data)`: a JSON-able dict and bytes. A `PreflightError` it raises is re-raised
here with its class and message; anything else becomes an `AnalysisError` naming the step.
"""

from __future__ import annotations

import atexit
import errno
import gc
import importlib
import json
import os
import selectors
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import errors
from ..errors import AnalysisError, PreflightError, UnreadableModelError, one_line
from .native import QUIET_ENV

GIB = 1 << 30
_MAGIC = b"PFCHILD1"
_LOG = "child.log"


@dataclass(frozen=True)
class Limits:
    """What a child may use. `memory` is address space on top of what the child holds when it starts."""

    memory: int = 8 * GIB
    cpu_s: int = 1800
    wall_s: float = 1800.0
    file_bytes: int = 1 * GIB

    def capped(self) -> Limits:
        """The same limits with memory at most this machine's physical memory."""
        try:
            phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return self
        return Limits(min(self.memory, phys), self.cpu_s, self.wall_s, self.file_bytes)


@dataclass
class ChildResult:
    meta: dict
    data: bytes


# --------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------


def fork_available() -> bool:
    return hasattr(os, "fork") and sys.platform != "win32"


def run_isolated(
    target: Callable | str,
    args: tuple | list = (),
    *,
    label: str,
    what: str,
    limits: Limits | None = None,
    start: str = "spawn",
    preload: tuple[str, ...] = (),
) -> ChildResult:
    """Run `target(*args)` in a limited child and return its `(meta, data)`.

    Args:
        target: a callable (fork) or `"package.module:function"` (either way of starting).
        args: the arguments; JSON-able for "spawn".
        label: what error messages start with (the model file's name).
        what: the step, for messages ("torch's loader").
        limits: resource limits (default `Limits()`), memory capped at physical memory.
        start: "fork", "spawn" or "zygote"; "fork" and "zygote" fall back to "spawn" (with a string target)
            where os.fork is unavailable.
        preload: for "zygote", the modules the zygote imports once (one zygote per distinct tuple).

    Raises:
        PreflightError: the class the step raised; `UnreadableModelError` when the child crashed, was
            killed or ran past a limit.
    """
    from .. import budget

    own = (limits or Limits()).capped()
    limits = child_limits(own)
    if start in ("fork", "zygote") and not fork_available():
        if not isinstance(target, str):
            raise AnalysisError(f"{label}: {what} needs os.fork on this platform")
        start = "spawn"
    if start != "fork" and not isinstance(target, str):
        raise AnalysisError(f"{label}: {what}: a spawned step is named 'module:function'")
    scratch = Path(tempfile.mkdtemp(prefix="preflight-child-"))
    child = None
    try:
        if start == "zygote":
            zygote = _zygote(tuple(preload))
            budget.track(zygote.proc.pid)  # the zygote's memory (a library imported once) is this analysis's too
            with zygote.lock:
                child = zygote.start(target, list(args), limits, scratch)
                budget.track(child.pid, scratch)
                payload, timed_out = _collect(child, limits.wall_s)
                signum, code = child.wait()
        else:
            if start == "fork":
                child = _start_fork(target, args, limits, scratch)
            else:
                child = _start_spawn(target, list(args), limits, scratch)
            budget.track(child.pid, scratch)
            payload, timed_out = _collect(child, limits.wall_s)
            signum, code = child.wait()
        log = _log_tail(scratch)
    finally:
        if child is not None:
            budget.untrack(child.pid)
        shutil.rmtree(scratch, ignore_errors=True)
    try:
        return _outcome(payload, signum, code, timed_out, log, label, what, limits)
    except UnreadableModelError as exc:
        over = _over_budget(exc, timed_out, own, limits)
        if over is not None:
            raise over from exc
        raise


def child_limits(limits: Limits) -> Limits:
    """`limits` with wall and CPU time at most what is left of the analysis's time budget (`analyzer.budget`).

    Memory stays the step's own address-space limit: a child's address space holds parameters it never touches
    (a 7 B model's 14 GB), which the budget must not refuse; the budget's watchdog counts the child's resident
    memory instead, with this process's."""
    from .. import budget

    left = budget.remaining_s()
    if budget.active() is None or left is None:
        return limits
    wall = min(limits.wall_s, max(left, 1.0))
    return Limits(limits.memory, min(limits.cpu_s, int(wall) + 1), wall, limits.file_bytes)


def _over_budget(exc: UnreadableModelError, timed_out: bool, own: Limits, used: Limits):
    """The budget's error (exit 3) when the child tripped a limit that the budget, not the step, had set."""
    from .. import budget

    active = budget.active()
    if active is None:
        return None
    if (timed_out or "CPU time" in str(exc)) and used.wall_s < own.wall_s:
        return budget.BudgetExceededError(active.time_message())
    return None


class _Child:
    """A started child: its pid, the read end of its result pipe, and how to reap it."""

    def __init__(self, pid: int, rfd: int, proc=None, zygote=None):
        self.pid, self.rfd, self.proc, self.zygote = pid, rfd, proc, zygote

    def kill(self) -> None:
        for kill in (lambda: os.killpg(self.pid, signal.SIGKILL), lambda: os.kill(self.pid, signal.SIGKILL)):
            try:
                kill()
                return
            except (ProcessLookupError, PermissionError):
                continue

    def wait(self) -> tuple[int | None, int | None]:
        """(signal that ended it, or None; exit code, or None)."""
        if self.zygote is not None:
            return self.zygote.status(self.pid)
        if self.proc is not None:
            rc = self.proc.wait()
            return (-rc, None) if rc < 0 else (None, rc)
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            return os.WTERMSIG(status), None
        return None, os.WEXITSTATUS(status)


def _start_fork(target, args, limits: Limits, scratch: Path) -> _Child:
    if isinstance(target, str):
        target = _resolve(target)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or odd stream: nothing to flush
            pass
    rfd, wfd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(rfd)
        os.close(wfd)
        raise
    if pid == 0:  # the child: never returns
        try:
            # The child freezes what it inherited (an O(1) move of the collector's lists), so that its collections
            # leave those objects alone: fewer copy-on-write page faults. Here, not in the parent around the fork:
            # the parent would have to `gc.unfreeze()` after it, which also thaws what the program's cold start
            # froze (passes._gc.cold_start_over: the objects of the torch and TVM imports), and its later full
            # collections would scan them all again.
            gc.freeze()
            os.close(rfd)
            os.setpgid(0, 0)
            _run_and_report(wfd, lambda: _enter_child(limits, scratch) or target(*args))
        finally:
            os._exit(0)
    os.close(wfd)
    try:
        os.setpgid(pid, pid)  # also here: a kill must find the group even before the child ran
    except OSError:
        pass
    return _Child(pid, rfd)


def _start_spawn(target: str, args: list, limits: Limits, scratch: Path) -> _Child:
    import subprocess

    rfd, wfd = os.pipe()
    env = _env()
    request = json.dumps(
        {"target": target, "args": args, "limits": asdict(limits), "scratch": str(scratch), "fd": wfd}
    ).encode()
    with open(scratch / _LOG, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from analyzer.frontends.isolate import spawned_main; spawned_main()"],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            cwd=scratch,
            env=env,
            pass_fds=(wfd,),
            start_new_session=True,
        )
    os.close(wfd)
    try:
        proc.stdin.write(request)
        proc.stdin.close()
    except OSError:  # the child died at once; its status says why
        pass
    return _Child(proc.pid, rfd, proc)


def _env() -> dict:
    env = dict(os.environ, **{k: os.environ.get(k, v) for k, v in QUIET_ENV.items()})
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _send(sock, obj: dict, fds: list[int] = ()) -> None:
    raw = json.dumps(obj).encode()
    msg = struct.pack("<Q", len(raw)) + raw
    if fds:
        socket.send_fds(sock, [msg], list(fds))
    else:
        sock.sendall(msg)


def _recv(sock, with_fds: bool = False) -> tuple[dict | None, list[int]]:
    """One message (and the descriptors sent with it); (None, []) when the other side has gone."""
    fds: list[int] = []
    if with_fds:
        first, fds, _, _ = socket.recv_fds(sock, 8, 4)
    else:
        first = sock.recv(8)
    head = first
    while len(head) < 8:
        more = sock.recv(8 - len(head))
        if not more:
            return None, fds
        head += more
    (n,) = struct.unpack("<Q", head)
    body = b""
    while len(body) < n:
        more = sock.recv(min(1 << 20, n - len(body)))
        if not more:
            return None, fds
        body += more
    return json.loads(body), fds


_ZYGOTES: dict[tuple[str, ...], _Zygote] = {}
_ZYGOTES_LOCK = threading.Lock()
ZYGOTE_IDLE_S = 600  # a zygote nobody used for this long exits (the next request starts another)


def _zygote(preload: tuple[str, ...]) -> _Zygote:
    with _ZYGOTES_LOCK:
        z = _ZYGOTES.get(preload)
        if z is None or not z.alive():
            if z is not None:
                z.close()
            z = _ZYGOTES[preload] = _Zygote(preload)
        return z


class _Zygote:
    """A spawned process that imported a heavy library once (and never ran it) and forks one limited child
    per request: TensorFlow costs its import once per preflight process, not once per conversion."""

    def __init__(self, preload: tuple[str, ...]):
        import subprocess

        self.preload = preload
        self.lock = threading.Lock()
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from analyzer.frontends.isolate import zygote_main; zygote_main()",
                    str(child_sock.fileno()),
                    json.dumps(list(preload)),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=tempfile.gettempdir(),
                env=_env(),
                pass_fds=(child_sock.fileno(),),
                start_new_session=True,
            )
        finally:
            child_sock.close()
        self.sock = parent_sock

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()

    def start(self, target: str, args: list, limits: Limits, scratch: Path) -> _Child:
        rfd, wfd = os.pipe()
        self.sock.settimeout(limits.wall_s)  # the first request also waits for the zygote's imports
        try:
            _send(self.sock, {"target": target, "args": args, "limits": asdict(limits), "scratch": str(scratch)}, [wfd])
            reply, _ = _recv(self.sock)
        except OSError:
            reply = None
        finally:
            os.close(wfd)
        if not reply or "pid" not in reply:
            os.close(rfd)
            self.close()
            raise AnalysisError("the child process server stopped; run the analysis again")
        return _Child(int(reply["pid"]), rfd, zygote=self)

    def status(self, pid: int) -> tuple[int | None, int | None]:
        try:
            reply, _ = _recv(self.sock)
        except OSError:
            reply = None
        if not reply or reply.get("pid") != pid:
            self.close()
            return None, 70
        return reply.get("signal"), reply.get("code")


@atexit.register
def _close_zygotes() -> None:
    for z in list(_ZYGOTES.values()):
        try:
            z.close()
        except OSError:
            pass
    _ZYGOTES.clear()


def zygote_main() -> None:
    """Entry point of a zygote: import the preload modules, then fork a child for each request."""
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.settimeout(ZYGOTE_IDLE_S)
    for module in json.loads(sys.argv[2]):
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - the child imports it again and reports the error
            pass
    while True:
        try:
            request, fds = _recv(sock, with_fds=True)
        except (OSError, ValueError):
            request, fds = None, []
        if request is None or len(fds) != 1:
            os._exit(0)
        (wfd,) = fds
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                os.setpgid(0, 0)
                _run_and_report(wfd, _step_of(request))
            finally:
                os._exit(0)
        os.close(wfd)
        try:
            _send(sock, {"pid": pid})
        except OSError:
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        try:
            _send(sock, {"pid": pid, "signal": sig, "code": code})
        except OSError:
            os._exit(0)


def _collect(child: _Child, wall_s: float) -> tuple[bytes, bool]:
    """Read the child's result until it closes the pipe; kill its group after `wall_s` seconds."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + wall_s
    timed_out = False
    sel = selectors.DefaultSelector()
    sel.register(child.rfd, selectors.EVENT_READ)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if not sel.select(timeout=min(left, 1.0)):
                continue
            chunk = os.read(child.rfd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    except BaseException:  # KeyboardInterrupt while waiting: take the child down with us
        child.kill()
        child.wait()
        raise
    finally:
        sel.close()
        os.close(child.rfd)
    if timed_out:
        child.kill()
    return b"".join(chunks), timed_out


def _log_tail(scratch: Path) -> str:
    try:
        with open(scratch / _LOG, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 65536))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _last_line(log: str) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if any(k in ln for k in ("Error", "error", "Exception", "failed", "terminate", "what()")):
            return ln[:200]
    return lines[-1][:200] if lines else ""


_ERRORS = {
    c.__name__: c
    for c in (
        errors.PreflightError,
        errors.UsageError,
        errors.UnreadableModelError,
        errors.MissingShapeError,
        errors.MissingExtraError,
        errors.AnalysisError,
    )
}


def _outcome(payload, signum, code, timed_out: bool, log: str, label: str, what: str, limits: Limits) -> ChildResult:
    frame = _parse_frame(payload)
    if frame is not None:
        head, data = frame
        if head.get("ok"):
            return ChildResult(head.get("meta") or {}, data)
        raise _rebuild_error(head, label, what, limits)
    detail = _last_line(log)
    suffix = f" ({detail})" if detail else ""
    if timed_out:
        raise UnreadableModelError(f"{label}: {what} did not finish in {limits.wall_s:g} s; stopped it")
    if signum == signal.SIGXCPU:
        raise UnreadableModelError(f"{label}: {what} ran past its CPU time limit ({limits.cpu_s} s)")
    if "bad_alloc" in log or "Cannot allocate memory" in log or "can't allocate memory" in log:
        raise _memory_error(label, what, limits)
    if signum == signal.SIGKILL:
        raise UnreadableModelError(f"{label}: {what} was killed (out of memory or CPU time){suffix}")
    if signum is not None:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        raise UnreadableModelError(
            f"{label}: {what} crashed ({name}) on this model; the file is corrupt, hostile or beyond what the "
            f"library handles{suffix}"
        )
    raise UnreadableModelError(f"{label}: {what} exited with status {code} without a result{suffix}")


def _memory_error(label: str, what: str, limits: Limits) -> UnreadableModelError:
    return UnreadableModelError(
        f"{label}: {what} needed more than its memory limit ({limits.memory / GIB:.1f} GiB beyond its start)"
    )


def _rebuild_error(head: dict, label: str, what: str, limits: Limits) -> PreflightError:
    kind = head.get("type", "")
    message = str(head.get("message", ""))[:2000]
    if kind == "memory":
        exc: PreflightError = _memory_error(label, what, limits)
    elif kind == "file_size":
        exc = UnreadableModelError(f"{label}: {what} wrote more than its file-size limit ({limits.file_bytes:,} bytes)")
    elif kind == "UnsupportedOperatorsError":
        ops = head.get("operators") or {}
        exc = errors.UnsupportedOperatorsError(message, {str(k): int(v) for k, v in ops.items() if isinstance(v, int)})
    elif kind in _ERRORS:
        exc = _ERRORS[kind](message)
    else:
        exc = AnalysisError(f"{label}: {what} failed: {message}")
    if head.get("traceback") and os.environ.get("PREFLIGHT_DEBUG", "") not in ("", "0"):
        exc.add_note("child process traceback:\n" + str(head["traceback"]))
    return exc


def _parse_frame(payload: bytes) -> tuple[dict, bytes] | None:
    n = len(_MAGIC) + 16
    if len(payload) < n or not payload.startswith(_MAGIC):
        return None
    head_len, data_len = struct.unpack("<QQ", payload[len(_MAGIC) : n])
    if n + head_len + data_len != len(payload):
        return None
    try:
        head = json.loads(payload[n : n + head_len])
    except ValueError:
        return None
    return (head, payload[n + head_len :]) if isinstance(head, dict) else None


# --------------------------------------------------------------------------------------------
# Child side
# --------------------------------------------------------------------------------------------


def _resolve(target: str) -> Callable:
    module, _, func = target.partition(":")
    if not module.startswith("analyzer.") or not func.isidentifier():
        raise AnalysisError(f"not a preflight step: {target!r}")
    return getattr(importlib.import_module(module), func)


def _memory_now() -> int:
    """This process's address-space size in bytes (VmSize)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    except (ImportError, OSError):
        return 0


def _enter_child(limits: Limits, scratch: Path) -> None:
    """Limits, scratch directory, quiet descriptors: everything a child does before the step."""
    import resource

    def setlimit(which, value: int) -> None:
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        try:
            resource.setrlimit(which, (value, value if which != resource.RLIMIT_CPU else value + 5))
        except (ValueError, OSError):
            pass

    setlimit(resource.RLIMIT_CORE, 0)
    setlimit(resource.RLIMIT_CPU, int(limits.cpu_s))
    setlimit(resource.RLIMIT_FSIZE, int(limits.file_bytes))
    if hasattr(resource, "RLIMIT_AS"):
        setlimit(resource.RLIMIT_AS, _memory_now() + int(limits.memory))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-limit write fails with EFBIG instead of killing
    os.chdir(scratch)
    for key in ("TMPDIR", "TEMP", "TMP"):
        os.environ[key] = str(scratch)
    tempfile.tempdir = str(scratch)
    log = os.open(scratch / _LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(devnull)
    torch = sys.modules.get("torch")
    if torch is not None:  # a forked child of a process that used torch's OpenMP pool: stay on one thread
        torch.set_num_threads(1)


# Landlock (Linux 5.13+, unprivileged): the step may create, write, rename or delete files only below its
# scratch directory; reading stays open (libraries, the model). Access rights from <linux/landlock.h>.
_LL_FS_WRITE = {
    1: (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12),
    2: 1 << 13,  # REFER (rename and link across directories)
    3: 1 << 14,  # TRUNCATE
}
_LL_NET_TCP = (1 << 0) | (1 << 1)  # BIND_TCP, CONNECT_TCP (ABI 4)
_SYS_LANDLOCK = (444, 445, 446)  # create_ruleset, add_rule, restrict_self: the same number on every architecture


def restrict_writes(scratch: Path) -> str | None:
    """Child: from now on this process (and any thread or child of it) may write only below `scratch` and
    open no TCP connection, using Landlock. Returns None when in force, else why not (an old kernel, no
    Landlock in the kernel, a seccomp filter): then only the resource limits and the scratch working
    directory remain."""
    if sys.platform != "linux":
        return "not Linux"
    import ctypes
    import platform

    if platform.machine() not in ("x86_64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x"):
        return f"unknown syscall numbers on {platform.machine()}"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    create, add_rule, restrict = _SYS_LANDLOCK
    abi = libc.syscall(ctypes.c_long(create), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return f"no Landlock ({os.strerror(ctypes.get_errno())})"
    fs = 0
    for version, bits in _LL_FS_WRITE.items():
        if abi >= version:
            fs |= bits
    net = _LL_NET_TCP if abi >= 4 else 0
    attr = struct.pack("<QQ", fs, net) if abi >= 4 else struct.pack("<Q", fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(ctypes.c_long(create), buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"landlock_create_ruleset failed ({os.strerror(ctypes.get_errno())})"
    try:
        fd = os.open(scratch, os.O_PATH | os.O_CLOEXEC)
        try:
            rule = ctypes.create_string_buffer(struct.pack("<Qi", fs, fd), 12)  # packed path_beneath_attr
            if libc.syscall(ctypes.c_long(add_rule), ctypes.c_int(ruleset), ctypes.c_int(1), rule, ctypes.c_uint32(0)):
                return f"landlock_add_rule failed ({os.strerror(ctypes.get_errno())})"
        finally:
            os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0):  # PR_SET_NO_NEW_PRIVS, required for an unprivileged restrict_self
            return f"PR_SET_NO_NEW_PRIVS failed ({os.strerror(ctypes.get_errno())})"
        if libc.syscall(ctypes.c_long(restrict), ctypes.c_int(ruleset), ctypes.c_uint32(0)):
            return f"landlock_restrict_self failed ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    return None


def _run_and_report(wfd: int, step: Callable[[], tuple[dict, bytes]]) -> None:
    try:
        meta, data = step()
        head = {"ok": True, "meta": meta}
    except MemoryError:
        head, data = {"ok": False, "type": "memory"}, b""
    except OSError as exc:
        kind = "file_size" if exc.errno == errno.EFBIG else "internal"
        head = {"ok": False, "type": kind, "message": f"{type(exc).__name__}: {one_line(exc)}"}
        head["traceback"], data = traceback.format_exc(), b""
    except PreflightError as exc:
        head = {"ok": False, "type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()}
        if isinstance(exc, errors.UnsupportedOperatorsError):
            head["operators"] = exc.operators
        data = b""
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as one line
        text = f"{type(exc).__name__}: {one_line(exc)}"
        kind = "memory" if "bad_alloc" in text or "can't allocate memory" in text else "internal"
        head = {"ok": False, "type": kind, "message": text, "traceback": traceback.format_exc()}
        data = b""
    raw = json.dumps(head, default=str).encode()
    frame = _MAGIC + struct.pack("<QQ", len(raw), len(data)) + raw
    with os.fdopen(wfd, "wb", buffering=0) as out:
        out.write(frame)
        view = memoryview(data)
        for at in range(0, len(view), 1 << 24):
            out.write(view[at : at + (1 << 24)])


def _step_of(request: dict) -> Callable[[], tuple[dict, bytes]]:
    """The step a request names, run after the child's limits and scratch directory are in place."""

    def step():
        _enter_child(Limits(**request["limits"]), Path(request["scratch"]))
        return _resolve(request["target"])(*request["args"])

    return step


def spawned_main() -> None:
    """Entry point of a spawned child: the request (JSON) arrives on stdin."""
    request = json.loads(sys.stdin.buffer.read())
    _run_and_report(int(request["fd"]), _step_of(request))
