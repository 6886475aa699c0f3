"""Minimal GPU memory and MIG profile table for the measurement harness (no dependencies).

``predictor/devices.py`` holds the full device table; this module keeps only what the harness needs to
label MIG fit: each device's total memory and each MIG GPU-instance profile's **usable** memory as
``nvidia-smi mig -lgip`` reports it (GiB column times 1024 = MiB), with its SM count.

Provenance: values marked ``certain=True`` match ``nvidia-smi mig -lgip`` output reproduced in NVIDIA's
MIG user guide and public logs; ``certain=False`` values are best recollection or interpolation and must
be checked (``nvidia-smi mig -lgip`` on a MIG-enabled card, read only) before a label set built on them
is trusted. The harness records the table it used in every record (``mig_usable_mib``), so a later
correction can re-derive the inferred fits from ``memory_mb``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DEVICE_MEMORY_MIB",
    "MIG_PROFILES",
    "MigProfile",
    "device_key",
    "profiles_for",
]


@dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile.

    Attributes:
        name: Profile name, e.g. ``"1g.10gb"``.
        usable_mib: Usable memory in MiB (``nvidia-smi mig -lgip`` GiB x 1024).
        sms: Streaming multiprocessors of the instance.
        certain: Whether ``usable_mib`` was checked against a real ``-lgip`` listing.
    """

    name: str
    usable_mib: int
    sms: int
    certain: bool


#: Total device memory in MiB as ``nvidia-smi`` / NVML report it.
DEVICE_MEMORY_MIB: dict[str, int] = {
    "h100-80gb": 81559,  # seen on the lent H100 80GB HBM3 (driver 580)
    "h200-141gb": 143771,  # seen on the lent H200
    "a100-40gb": 40960,  # A100-SXM4-40GB; PCIe cards report 40536 (uncertain)
    "a100-80gb": 81920,
    "h100-nvl-94gb": 95830,  # uncertain
}

#: MIG profiles per device key, smallest first. "+me" media-extension twins are omitted (same memory).
MIG_PROFILES: dict[str, tuple[MigProfile, ...]] = {
    "h100-80gb": (
        MigProfile("1g.10gb", 9984, 16, True),  # 9.75 GiB
        MigProfile("1g.20gb", 20096, 26, True),  # 19.62 GiB
        MigProfile("2g.20gb", 20096, 32, True),
        MigProfile("3g.40gb", 40448, 60, True),  # 39.50 GiB
        MigProfile("4g.40gb", 40448, 64, True),
        MigProfile("7g.80gb", 81152, 132, True),  # 79.25 GiB
    ),
    "h200-141gb": (
        MigProfile("1g.18gb", 16384, 16, True),  # 16.00 GiB (seen in -lgip logs and torch on a slice)
        MigProfile("1g.35gb", 33280, 26, False),  # 32.50 GiB? uncertain
        MigProfile("2g.35gb", 33280, 32, False),
        MigProfile("3g.71gb", 71424, 60, False),  # 69.75 GiB? torch reported ~69.8 on a slice
        MigProfile("4g.71gb", 71424, 64, False),
        MigProfile("7g.141gb", 142848, 132, False),  # 139.50 GiB? uncertain
    ),
    "a100-40gb": (
        MigProfile("1g.5gb", 4864, 14, True),  # 4.75 GiB
        MigProfile("1g.10gb", 9984, 14, False),
        MigProfile("2g.10gb", 9984, 28, True),  # 9.75 GiB
        MigProfile("3g.20gb", 20096, 42, True),  # 19.62 GiB
        MigProfile("4g.20gb", 20096, 56, True),
        MigProfile("7g.40gb", 40448, 98, True),  # 39.50 GiB (DESIGN.md)
    ),
    "a100-80gb": (
        MigProfile("1g.10gb", 9728, 14, False),  # 9.50 GiB? uncertain
        MigProfile("1g.20gb", 19968, 14, False),  # 19.50 GiB?
        MigProfile("2g.20gb", 19968, 28, False),
        MigProfile("3g.40gb", 40192, 42, False),  # 39.25 GiB?
        MigProfile("4g.40gb", 40192, 56, False),
        MigProfile("7g.80gb", 80896, 98, False),  # 79.00 GiB?
    ),
    "h100-nvl-94gb": (
        MigProfile("1g.12gb", 11008, 16, False),  # 10.75 GiB? all NVL values uncertain
        MigProfile("1g.24gb", 22016, 26, False),
        MigProfile("2g.24gb", 22016, 32, False),
        MigProfile("3g.47gb", 44800, 60, False),
        MigProfile("4g.47gb", 44800, 64, False),
        MigProfile("7g.94gb", 89600, 132, False),
    ),
}

_NAME_RULES: tuple[tuple[str, str], ...] = (
    (r"h100.*nvl", "h100-nvl-94gb"),
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
