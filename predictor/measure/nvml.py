"""The few NVML queries the measurement protocol needs, each failure-tolerant (an unsupported query reads ``None``),
and which device a measurement runs on (:func:`detect_device`: NVML, then ``nvidia-smi``, else the CPU).

``pynvml`` (package ``nvidia-ml-py``) is imported when an :class:`Nvml` is created or :func:`detect_device` asks
NVML, so this module imports on a machine without it; only the CUDA worker creates an :class:`Nvml`.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Callable
from typing import Any

from predictor.measure import HarnessError
from predictor.measure.mig_profiles import device_key

__all__ = ["Nvml", "detect_device", "host_slug", "nvml_index"]


def nvml_index() -> int:
    """Return the NVML index of the GPU this process sees as ``cuda:0``.

    Returns:
        The first entry of ``CUDA_VISIBLE_DEVICES`` when it is a plain index, else 0.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(visible) if visible.isdigit() else 0


def host_slug() -> str:
    """This host's name as a device key's tail (``cpu-<slug>``): lower case, runs of other characters as one ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", socket.gethostname().lower()).strip("-") or "host"


def detect_device(requested: str = "auto") -> tuple[str, str, str]:
    """Find the device to measure without creating a CUDA context (NVML, then ``nvidia-smi``).

    Args:
        requested: ``"auto"`` (a GPU if one answers, else the CPU), ``"cuda"`` or ``"cpu"``.

    Returns:
        ``(torch device, device key, name)``, e.g. ``("cuda", "h100-80gb", "NVIDIA H100 80GB HBM3")``.

    Raises:
        HarnessError: ``"cuda"`` was asked for and no GPU answers.
    """
    if requested in ("auto", "cuda"):
        found = _nvml_name() or _smi_name()
        if found:
            name, total_mib = found
            return "cuda", device_key(name, total_mib), name
        if requested == "cuda":
            raise HarnessError("--device cuda but neither NVML nor nvidia-smi finds a GPU")
    return "cpu", f"cpu-{host_slug()}", "cpu"


def _nvml_name() -> tuple[str, float] | None:
    try:
        import pynvml  # nvidia-ml-py: present on the GPU machines, optional elsewhere

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index())
        name = pynvml.nvmlDeviceGetName(handle)
        total = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**20
        return (name.decode() if isinstance(name, bytes) else name), total
    except Exception:  # noqa: BLE001 - no NVML or no GPU
        return None


def _smi_name() -> tuple[str, float] | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        name, mib = out.splitlines()[0].rsplit(",", 1)
        return name.strip(), float(mib)
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _scale(value: float | None, factor: float) -> float | None:
    return None if value is None else round(value * factor, 3)


class Nvml:
    """Lazy, failure-tolerant access to one GPU's NVML counters.

    Args:
        index: NVML device index (see :func:`nvml_index`).

    Raises:
        Exception: Whatever ``pynvml`` raises when NVML is missing or the index is invalid.
    """

    def __init__(self, index: int) -> None:
        import pynvml  # nvidia-ml-py: present only on GPU machines

        pynvml.nvmlInit()
        self.nv = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - an unsupported query is recorded as null
            return None

    def energy_mj(self) -> int | None:
        """Total energy the GPU used since the driver loaded, in mJ (``None`` if unsupported)."""
        return self._call(self.nv.nvmlDeviceGetTotalEnergyConsumption, self.handle)

    def used_bytes(self) -> int | None:
        """Device memory in use by all processes, in bytes."""
        info = self._call(self.nv.nvmlDeviceGetMemoryInfo, self.handle)
        return None if info is None else int(info.used)

    def process_used_bytes(self, pid: int) -> int | None:
        """Device memory in use by process ``pid``, in bytes (``None`` where NVML gives no per-process figure)."""
        procs = self._call(self.nv.nvmlDeviceGetComputeRunningProcesses, self.handle) or []
        for proc in procs:
            used = getattr(proc, "usedGpuMemory", None)
            if getattr(proc, "pid", None) == pid and isinstance(used, int) and used > 0:
                return used
        return None

    def clocks(self) -> dict[str, Any]:
        """Current SM and memory clocks (MHz), temperature (deg C) and power draw (W)."""
        nv = self.nv
        return {
            "sm_clock_mhz": self._call(nv.nvmlDeviceGetClockInfo, self.handle, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": self._call(nv.nvmlDeviceGetClockInfo, self.handle, nv.NVML_CLOCK_MEM),
            "temperature_c": self._call(nv.nvmlDeviceGetTemperature, self.handle, nv.NVML_TEMPERATURE_GPU),
            "power_draw_w": _scale(self._call(nv.nvmlDeviceGetPowerUsage, self.handle), 1e-3),
        }

    def static(self) -> dict[str, Any]:
        """Driver version, maximum SM and memory clocks (MHz) and the enforced power limit (W)."""
        nv = self.nv
        driver = self._call(nv.nvmlSystemGetDriverVersion)
        return {
            "driver": driver.decode() if isinstance(driver, bytes) else driver,
            "max_sm_clock_mhz": self._call(nv.nvmlDeviceGetMaxClockInfo, self.handle, nv.NVML_CLOCK_SM),
            "max_mem_clock_mhz": self._call(nv.nvmlDeviceGetMaxClockInfo, self.handle, nv.NVML_CLOCK_MEM),
            "power_limit_w": _scale(self._call(nv.nvmlDeviceGetEnforcedPowerLimit, self.handle), 1e-3),
        }
