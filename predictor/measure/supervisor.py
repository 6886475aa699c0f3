"""The parent side of the measuring process: start a worker, send it one config at a time, notice hangs and crashes.

The parent never touches CUDA. A :class:`WorkerHandle` starts one persistent **worker** process
(``multiprocessing`` spawn context) running :func:`predictor.measure.worker.worker_main`, which imports torch
once, creates the CUDA context and answers each config over a pipe. :meth:`WorkerHandle.ask` waits for each
answer with a timeout, so the caller (:func:`predictor.measure.harness.run_shard`) can tell a result from a hang
(``"timeout"``) and from a worker that died (``"crash"``: a segfault, ``os._exit``, a CUDA fatal error) and
replace the worker.
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import asdict
from typing import Any

from predictor.measure.worker import HarnessError, Options, Worker, WorkerFactory, worker_main

__all__ = ["WorkerHandle"]


class WorkerHandle:
    """Parent-side handle of one worker process, started and ready when the constructor returns.

    Args:
        opts: Measurement options.
        startup_timeout: Seconds the worker may take to report ready (importing torch, creating the context).
        factory: Makes the worker in the worker process (see :data:`predictor.measure.worker.WorkerFactory`).

    Raises:
        HarnessError: If the worker does not start in time, dies at start or reports that it cannot start.
    """

    def __init__(self, opts: Options, startup_timeout: float, factory: WorkerFactory = Worker) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child, asdict(opts), factory), daemon=True)
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
        """Wait up to 5 s for the process to end; return its exit code (``None`` if it still runs)."""
        self.proc.join(5)
        return self.proc.exitcode

    def close(self) -> None:
        """Ask the worker to stop, wait up to 10 s, then kill it if it still runs."""
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(10)
        self.kill()

    def kill(self) -> None:
        """Kill the worker process (if alive) and close the pipe."""
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)
        self.conn.close()
