"""Pause Python's cyclic garbage collector while a pass builds many small objects, and while the preflight program
imports torch and TVM.

The passes create no reference cycles worth collecting, but the collector's generational scans
grow with the number of live objects and made the passes super-linear in graph size (measured:
107 -> 127 us per op from 1k to 10k ops with it on, 79 -> 86 with it paused; bench/bench_analyze.py).

The cold start (`cold_start`): importing torch, torch.export's tracer and TVM creates about a million objects that
live as long as the process, and the collector, scanning them again and again, ran about 1,060 collections, 7 of
them full ones of 0.08-0.26 s each, in a cold `preflight analyze zoo:resnet50` (0.76-1.57 s, a `gc.callbacks`
timer, 6 runs at load 2-4, 2026-11-26); the garbage it found was under 10 MB (peak RSS 519 MB with it, 529 MB
without). The program's analysis commands therefore run with the collector paused until TVM is imported, the
last of the large imports (`passes.tvm_boot.faster_import` calls `cold_start_over`), then move every object alive
to the permanent generation (`gc.freeze`, so later collections skip them) and turn the collector back on.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os

_cold = False  # inside `cold_start`, the collector paused by it and not yet turned back on


def _after_fork_in_child() -> None:
    """A process forked inside the cold start (an isolation child or zygote, analyzer.frontends.isolate) does its own
    work, maybe for long: its collector is on."""
    global _cold
    if _cold:
        _cold = False
        gc.enable()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def gc_paused(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return wrapper


@contextlib.contextmanager
def cold_start(enabled: bool = True):
    """Around a command of the preflight program (not a library call: the freeze is the process's business): the
    collector paused until `cold_start_over()` or the block's end, whichever comes first. A no-op when `enabled`
    is false or the collector is already off."""
    global _cold
    if not enabled or not gc.isenabled() or _cold:
        yield
        return
    gc.disable()
    _cold = True
    try:
        yield
    finally:
        if _cold:
            _cold = False
            gc.enable()


def cold_start_over() -> None:
    """The large imports are done (TVM's is the last): inside `cold_start`, freeze what is alive and turn the
    collector back on; elsewhere nothing."""
    global _cold
    if _cold:
        _cold = False
        gc.freeze()
        gc.enable()
