"""What the measurement harness needs of the device table: GPU name -> device key, memory, MIG profiles.

The values come from ``predictor/devices.py`` (the one device table, no dependencies, importable on the GPU
machine); see its docstring for where each figure comes from and which MIG rows are derived lower bounds.
The harness records the usable memory it used in every record (``mig_usable_mib``), so a later correction of
the table can re-derive the inferred fits from ``memory_mb``.
"""

from __future__ import annotations

import re

from predictor.devices import DEVICES, MigProfile
from predictor.mig import smallest_first

__all__ = [
    "DEVICE_MEMORY_MIB",
    "MIG_PROFILES",
    "MigProfile",
    "device_key",
    "profiles_for",
]


#: Total device memory in MiB as ``nvidia-smi`` / NVML report it, from the one device table.
DEVICE_MEMORY_MIB: dict[str, int] = {key: d.memory_mib for key, d in DEVICES.items()}

#: MIG profiles per device key, smallest first (``predictor.devices.MigProfile``: ``memory_mib`` usable,
#: ``sms``, ``measured`` False for derived lower bounds).
MIG_PROFILES: dict[str, tuple[MigProfile, ...]] = {key: tuple(smallest_first(d.mig)) for key, d in DEVICES.items()}

_NAME_RULES: tuple[tuple[str, str], ...] = (
    (r"h100.*nvl", "h100-nvl-94gb"),
    (r"h100.*pcie", "h100-pcie-80gb"),  # not an SXM part: keep it apart from h100-80gb
    (r"h200", "h200-141gb"),
    (r"h100", "h100-80gb"),
    (r"a100.*80\s*gb", "a100-80gb"),
    (r"a100", "a100-40gb"),
)


def device_key(gpu_name: str, total_mib: float | None = None) -> str:
    """Map a CUDA device name to the device key used in dataset paths and records.

    Args:
        gpu_name: Name as ``torch.cuda.get_device_name`` or NVML reports it
            (``"NVIDIA H100 80GB HBM3"``, ``"NVIDIA A100-SXM4-40GB"``).
        total_mib: Total memory in MiB; disambiguates A100 40 GB from 80 GB
            when the name does not say.

    Returns:
        A key such as ``"h100-80gb"``; unknown GPUs give a slug of the name
        (``"nvidia-l4"``) so records are never mislabelled as a known device.
    """
    low = gpu_name.lower()
    if " mig " in f" {low} ":
        # Measuring inside a MIG slice is not this harness's protocol; keep the slice in the key.
        slug = re.sub(r"[^a-z0-9.]+", "-", low).strip("-")
        return slug
    for pattern, key in _NAME_RULES:
        if re.search(pattern, low):
            if key == "a100-40gb" and total_mib is not None and total_mib > 50_000:
                return "a100-80gb"
            return key
    return re.sub(r"[^a-z0-9]+", "-", low).strip("-") or "unknown-gpu"


def profiles_for(key: str) -> tuple[MigProfile, ...]:
    """Return the MIG profiles of a device key (empty for devices without MIG).

    Args:
        key: Device key, e.g. ``"h100-80gb"``.

    Returns:
        The profiles, smallest first.
    """
    return MIG_PROFILES.get(key, ())
