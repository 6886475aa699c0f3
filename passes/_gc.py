"""Pause Python's cyclic garbage collector while a pass builds many small objects.

The passes create no reference cycles worth collecting, but the collector's generational scans
grow with the number of live objects and made the passes super-linear in graph size (measured:
107 -> 127 us per op from 1k to 10k ops with it on, 79 -> 86 with it paused; bench/bench_analyze.py).
"""

from __future__ import annotations

import functools
import gc


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
