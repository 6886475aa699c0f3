"""Provenance of a report: what produced it, from what, and when, so that two reports can be compared honestly.

The `tool` block of `preflight.report/1` names preflight's version, the library stack it ran on (read from the
installed distributions' metadata: nothing is imported for it), the digest of the kernel-model parameter table
the predictions used and the time; the `model` block gains the sha256 of the model file (or folder) read.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

STACK = ("torch", "apache-tvm", "onnx", "transformers", "numpy")  # the distributions whose versions change counts
_CHUNK = 1 << 20  # bytes read per step while hashing (1 MiB)


@cache
def stack() -> dict[str, str | None]:
    """{"python": "3.11.7", "torch": "2.13.0+cpu", "apache-tvm": ..., ...}: None for one that is not installed."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in STACK:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def file_sha256(path: Path) -> str:
    """sha256 (hex) of a file's bytes, read 1 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


@cache
def _digest(path: str, size: int, mtime_ns: int) -> str:
    """One digest per file version in a process (a batch sweep renders the same file many times)."""
    p = Path(path)
    if not p.is_dir():
        return file_sha256(p)
    # a folder (SavedModel, Paddle program): sha256 over its files in path order, each as "relpath\0sha256\n"
    h = hashlib.sha256()
    for f in sorted(q for q in p.rglob("*") if q.is_file() and not q.is_symlink()):
        h.update(f"{f.relative_to(p).as_posix()}\0{file_sha256(f)}\n".encode())
    return h.hexdigest()


def model_sha256(source: str) -> str | None:
    """sha256 of the model file or folder `source` names; None for a zoo name, an in-memory module or a path that
    is gone. A folder's digest covers every file under it (names and contents)."""
    if not source or source.startswith("zoo:") or not os.path.exists(source):
        return None
    st = os.stat(source)
    newest = st.st_mtime_ns
    if os.path.isdir(source):
        newest = max([newest, *(q.stat().st_mtime_ns for q in Path(source).rglob("*") if q.is_file())])
    return _digest(str(Path(source).resolve()), st.st_size, newest)


def kernel_params_sha256() -> str | None:
    """sha256 of the kernel-model parameter table the predictions read (`predictor/kernel_params.json`)."""
    from predictor.kernel_model import PARAMS_PATH

    try:
        return _digest(str(PARAMS_PATH), PARAMS_PATH.stat().st_size, PARAMS_PATH.stat().st_mtime_ns)
    except OSError:
        return None


def tool_block(version: str) -> dict:
    """The `tool` block: name, version, stack, kernel_params_sha256 and created (UTC, ISO 8601, seconds)."""
    return {
        "name": "preflight",
        "version": version,
        "stack": dict(stack()),
        "kernel_params_sha256": kernel_params_sha256(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
