"""A progress line on waits: after about 2 s of silence, `analysing MODEL ... 7 s` on stderr, updated in place
once a second and cleared when the work ends. Only on a terminal (a pipe or a log file gets nothing), unless
PREFLIGHT_PROGRESS=1; PREFLIGHT_PROGRESS=0 turns it off."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

AFTER_S = 2.0  # seconds of silence before the line appears


def _wanted(stream) -> bool:
    flag = os.environ.get("PREFLIGHT_PROGRESS", "")
    if flag in ("0", "1"):
        return flag == "1"
    return bool(getattr(stream, "isatty", lambda: False)())


@contextlib.contextmanager
def progress(what: str, stream=None, after_s: float | None = None, enabled: bool = True):
    """While the body runs: after `after_s` (default AFTER_S, or $PREFLIGHT_PROGRESS_AFTER) seconds, a line
    `what ... N s` on `stream` (default stderr), rewritten each second; erased at the end."""
    stream = stream or sys.stderr
    if not enabled or not _wanted(stream):
        yield
        return
    delay = after_s if after_s is not None else float(os.environ.get("PREFLIGHT_PROGRESS_AFTER", AFTER_S))
    done = threading.Event()
    start = time.monotonic()
    shown = [0]

    def tick() -> None:
        if done.wait(delay):
            return
        while not done.is_set():
            line = f"{what} ... {time.monotonic() - start:.0f} s"
            stream.write("\r" + line)
            stream.flush()
            shown[0] = max(shown[0], len(line))
            done.wait(1.0)

    thread = threading.Thread(target=tick, name="preflight-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=2)
        if shown[0]:
            stream.write("\r" + " " * shown[0] + "\r")
            stream.flush()
