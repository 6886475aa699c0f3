"""A progress line on long waits, on a terminal only (forced here with PREFLIGHT_PROGRESS=1), erased at the end."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

from analyzer.progress import progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_wait_longer_than_the_delay_shows_and_erases_a_line(monkeypatch):
    monkeypatch.delenv("PREFLIGHT_PROGRESS", raising=False)
    out = _Tty()
    with progress("analyze: m.onnx", stream=out, after_s=0.05):
        time.sleep(0.3)
    text = out.getvalue()
    assert text.startswith("\ranalyze: m.onnx ... 0 s") and text.endswith("\r")
    assert text.rstrip("\r").split("\r")[-1].strip() == ""  # the last write blanks the line


def test_nothing_on_a_pipe_or_for_a_short_wait(monkeypatch):
    monkeypatch.delenv("PREFLIGHT_PROGRESS", raising=False)
    pipe = io.StringIO()  # not a terminal
    with progress("x", stream=pipe, after_s=0.0):
        time.sleep(0.1)
    short = _Tty()
    with progress("x", stream=short, after_s=5.0):
        pass
    assert pipe.getvalue() == "" and short.getvalue() == ""


def test_the_cli_shows_it_on_analyze():
    env = {**os.environ, "PREFLIGHT_PROGRESS": "1", "PREFLIGHT_PROGRESS_AFTER": "0.2"}
    argv = ["preflight", "analyze", "zoo:resnet18", "--top", "0"]
    code = f"from analyzer.cli import main; import sys; sys.argv = {argv!r}; main()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300, env=env)  # bytes: \r kept
    assert proc.returncode == 0, proc.stderr
    assert b"\ranalyze: zoo:resnet18 ... " in proc.stderr and b"\r" not in proc.stdout
