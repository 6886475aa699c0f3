"""A measurement worker that fails on purpose, so the tests exercise the supervisor's failure labels.

Passed to ``run_shard`` as ``worker_factory=functools.partial(FaultyWorker, faults={config_id: fault})``; the
partial is pickled into the spawned worker process, which imports this module (the tests directory is on the
path the worker inherits). Production code has no fault branch: only this test worker fails on purpose.
"""

from __future__ import annotations

import os
import time
from typing import Any

from predictor.measure.worker import Options, Worker

FAULTS = ("oom", "crash", "hang", "error")


class FaultyWorker(Worker):
    """A :class:`Worker` that crashes, hangs, runs out of memory or raises on the configs named in ``faults``.

    Args:
        opts: Measurement options.
        faults: Config id -> ``"crash"`` (the process exits with code 70), ``"hang"`` (sleeps for 11.6 days),
            ``"oom"`` (raises ``torch.OutOfMemoryError``) or ``"error"`` (raises ``RuntimeError``).
    """

    def __init__(self, opts: Options, faults: dict[str, str]) -> None:
        unknown = set(faults.values()) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
        super().__init__(opts)
        self.faults = faults

    def measure(self, cfg: dict) -> dict[str, Any]:
        fault = self.faults.get(cfg["id"])
        if fault == "crash":
            os._exit(70)
        if fault == "hang":
            time.sleep(10**6)
        return super().measure(cfg)

    def run(self, cfg: dict, result: dict[str, Any]) -> None:
        fault = self.faults.get(cfg["id"])
        if fault == "oom":
            raise self.torch.OutOfMemoryError("simulated out of memory (test fault)")
        if fault == "error":
            raise RuntimeError("simulated error (test fault)")
        super().run(cfg, result)
