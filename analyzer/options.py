"""Checks of the user's options that every entry point shares (CLI, Python API, the Ray driver).

Light on purpose: it imports neither TVM nor torch, so a command can refuse a bad option before it pays for them.
"""

from __future__ import annotations

from collections.abc import Sequence

from passes.graph import COMPUTE_DTYPES  # plain python: no TVM
from predictor.devices import UnknownDeviceError, get_device
from predictor.kernel_model import MATMUL_PRECISIONS, is_host_overhead

from .errors import UsageError


def check_devices(devices: Sequence[str], where: str | None = None) -> list[str]:
    """The device keys of `devices` (aliases resolved, duplicates dropped; one string is one GPU); UsageError for an
    unknown one or none.

    `where` (e.g. "manifest line 3") prefixes the message.
    """
    prefix = f"{where}: " if where else ""
    if isinstance(devices, str):  # one GPU named where several may be: the name, not its letters
        devices = [devices]
    out: list[str] = []
    for d in devices:
        try:
            key = get_device(d).key
        except UnknownDeviceError as exc:
            raise UsageError(f"{prefix}{exc}") from exc
        if key not in out:
            out.append(key)
    if not out:
        raise UsageError(f"{prefix}give at least one --device")
    return out


def check_dtype(dtype: str | None) -> None:
    """UsageError unless `dtype` is None, a float dtype preflight can retarget a model to, or "amp-float16" /
    "amp-bfloat16" (the model as it is, run under `torch.autocast`)."""
    if dtype is not None and dtype not in COMPUTE_DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(COMPUTE_DTYPES)} (got {dtype!r})")


def half_of(dtype: str | None) -> str | None:
    """The half dtype a model analysed with `--dtype dtype` computes in ("float16", "bfloat16"; what loaders take as
    `half_casts`, to trace its own float32 casts), else None (float32, autocast, no retarget)."""
    return dtype if dtype in ("float16", "bfloat16") else None


def check_matmul_precision(matmul_precision: str, where: str | None = None) -> str:
    """`matmul_precision` if it is one of `torch.set_float32_matmul_precision`'s values ("highest", "high",
    "medium": `predictor.kernel_model.MATMUL_PRECISIONS`), else UsageError (`where` prefixes the message)."""
    if not isinstance(matmul_precision, str) or matmul_precision not in MATMUL_PRECISIONS:
        prefix = f"{where}: " if where else ""
        raise UsageError(
            f"{prefix}--matmul-precision must be one of {', '.join(MATMUL_PRECISIONS)} (got {matmul_precision!r})"
        )
    return matmul_precision


def check_host_overhead(host_overhead, where: str | None = None) -> float:
    """`host_overhead` as a float if it is a positive finite number (the host's dispatch time per kernel as a
    multiple of the kernel model's fitted launch floor: 1.0 the host it was fitted on, 2.35 a host like
    MIGProfiler's, docs/devices.md), else UsageError (`where` prefixes the message)."""
    if not is_host_overhead(host_overhead):
        prefix = f"{where}: " if where else ""
        raise UsageError(
            f"{prefix}--host-overhead must be a positive finite number, a multiple of preflight's launch floor "
            f"(got {host_overhead!r})"
        )
    return float(host_overhead)
