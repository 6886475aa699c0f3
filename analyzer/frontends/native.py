"""Helpers for frontends that drive heavy native frameworks (TensorFlow, PaddlePaddle).

Those frameworks log from C++ straight to file descriptors 1 and 2 and print from Python; preflight's
`--format json` must keep stdout pure JSON and its errors short. `quiet_native_output` sends both
descriptors to a temporary file while a framework runs, and hands back what it wrote so that an error
can quote its last meaningful line.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator

from ..errors import MissingExtraError

# set before a framework is first imported: C++ log levels are read once, at import
QUIET_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "3",  # TensorFlow C++: errors only
    "TF_ENABLE_ONEDNN_OPTS": "0",  # no "oneDNN custom operations are on" banner
    "GLOG_minloglevel": "3",  # paddle / glog
    "GLOG_v": "0",
    "FLAGS_print_model_stats": "0",
}
_NOISY_LOGGERS = ("absl", "tensorflow", "keras", "paddle", "paddle2onnx", "h5py")


def quiet_environment() -> None:
    """Set the frameworks' log-level variables, keeping any value the user set."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)


def import_extra(module: str, extra: str, what: str):
    """Import an optional dependency, or raise `MissingExtraError` naming the install that fixes it."""
    import importlib

    quiet_environment()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{what} need the optional dependency '{module}' ({exc.name or exc}): {install_hint(extra)}"
        ) from exc


def install_hint(extra: str) -> str:
    """The command that installs an optional extra, as the README's install does it (from the checkout)."""
    return f'pip install -c constraints.txt -e ".[{extra}]" in the preflight checkout'


def require_extra(module: str, extra: str, what: str) -> None:
    """Raise `MissingExtraError` unless `module` is installed (without importing it: a child process will)."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingExtraError(f"{what} need the optional dependency '{module}': {install_hint(extra)}")


class CapturedOutput:
    """What a framework wrote to stdout / stderr inside `quiet_native_output`."""

    def __init__(self) -> None:
        self.text = ""

    def last_line(self, default: str = "") -> str:
        """The last line that looks like an error message, for a one-line report."""
        lines = [ln.strip() for ln in self.text.splitlines() if ln.strip()]
        for ln in reversed(lines):
            if any(k in ln for k in ("Error", "error", "Exception", "failed", "not supported")):
                return ln[:300]
        return (lines[-1] if lines else default)[:300]


@contextlib.contextmanager
def quiet_native_output() -> Iterator[CapturedOutput]:
    """Redirect fds 1 and 2, Python warnings and the frameworks' loggers while a framework runs."""
    captured = CapturedOutput()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved: list[tuple[int, int]] = []
    py_out = io.StringIO()  # sys.stdout may be a test runner's buffer rather than fd 1
    levels = {name: logging.getLogger(name).level for name in _NOISY_LOGGERS}
    with tempfile.TemporaryFile(mode="w+b") as sink:
        try:
            for fd in (1, 2):
                try:
                    saved.append((fd, os.dup(fd)))
                    os.dup2(sink.fileno(), fd)
                except OSError:  # no such descriptor (embedded interpreters): nothing to silence
                    continue
            for name in _NOISY_LOGGERS:
                logging.getLogger(name).setLevel(logging.CRITICAL)
            with warnings.catch_warnings(), contextlib.redirect_stdout(py_out), contextlib.redirect_stderr(py_out):
                warnings.simplefilter("ignore")
                yield captured
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            for fd, dup in saved:
                os.dup2(dup, fd)
                os.close(dup)
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)
            sink.seek(0)
            captured.text = sink.read().decode("utf-8", "replace") + py_out.getvalue()
