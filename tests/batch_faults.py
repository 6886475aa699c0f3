"""Misbehaving tasks for tests/test_analyze_many.py. Test-only: no production code path runs them.

`analyzer.batch.run_jobs` runs whatever module-level task function it is given, on the same Ray workers and
under the same supervision as `analyzer.batch.analyze_task`. `misbehave` is `analyze_task`, except for the
models whose file stem names a fault (the files need not exist):

  crash  the worker process kills itself with SIGSEGV, as a segfault inside a native importer would;
  hang   it sleeps for an hour: the per-model time limit must stop it;
  hog    it asks for HOG_BYTES (2 GiB) at once, which this machine grants (the test checks) but a memory
         cap of 1 GiB must refuse.

The test registers this module with cloudpickle to be sent by value, so the workers need not import it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from analyzer.batch import Job, analyze_task

HOG_BYTES = 2 * 2**30


def misbehave(job: Job) -> dict:
    fault = Path(job.path).stem
    if fault == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(60)  # the signal is delivered before this returns
    elif fault == "hang":
        time.sleep(3600)
    elif fault == "hog":
        return {"allocated": len(bytearray(HOG_BYTES))}
    return analyze_task(job)
