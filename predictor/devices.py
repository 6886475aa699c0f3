"""The one table of devices: peak rates, bandwidth, memory, TDP and MIG profiles.

The built-in GPUs are data, `predictor/devices.json` (`preflight.devices/1`: units MiB, GB/s, dense TFLOP/s or
TOPS, W; each device names its source); users add their own GPUs in files of the same layout (`preflight --devices
FILE`, $PREFLIGHT_DEVICES, ~/.config/preflight/devices.json; docs/devices.md), validated field by field.

Sources of the built-in figures, per field:
- peak dense FLOP/s, bandwidth and TDP: the vendors' datasheets (SXM parts unless named);
- peak dense INT8 tensor-core rate (`peak_flops["int8"]`, integer operations per second, 2 per MAC as for
  FLOPs): the datasheets' INT8 Tensor Core TOPS without sparsity (the headline figures with sparsity are twice
  these): NVIDIA A100 Tensor Core GPU datasheet, 624 TOPS (SXM and PCIe); NVIDIA H100 Tensor Core GPU
  datasheet, 3,958 TOPS with sparsity -> 1,979 dense (H100 SXM) and 3,341 -> 1,670.5 dense (H100 NVL, the
  datasheet's per-GPU column); NVIDIA H200 Tensor Core GPU datasheet, 3,958 -> 1,979 dense (H200 SXM);
- total memory: what `nvidia-smi` reports (H100 81559 MiB and H200 143771 MiB were read on this
  workplace's GPU machines, see ../.library/device/KINDS.md; A100 values as NVIDIA documents them);
- MIG profiles: usable memory and SM count as `nvidia-smi mig -lgip` prints them. Published outputs
  exist for A100-40GB, A100-80GB, H100-80GB and H200's 1g.18gb (16.00 GiB, 16 SMs). The other H200
  profiles and all H100-NVL profiles are *derived lower bounds* (`MigProfile.measured` False): k memory
  slices x 16.00 GiB for the H200, and x 16.00 x 94/141 GiB for the H100 NVL (the H200's per-slice
  figure scaled by memory size; on the H100-80GB a slice gives 9.75 GiB of 79.65, a larger share, so
  the bound is conservative); SM counts follow the H100-80GB's layout of the same GH100 chip. A lower
  bound keeps the recommender from promising memory a slice may not have; replace these rows with
  `nvidia-smi mig -lgip` output when a machine with MIG enabled is at hand.
- H100 NVL total memory (95830 MiB) is the datasheet's 94 GB as nvidia-smi reports it; not read here.
- A100 PCIe parts (the GPUs of the NeuSight kernel measurements in data/neusight-kernels/, kept apart from
  the SXM parts because they differ in bandwidth and power): 1,555 GB/s and 250 W (40 GB), 1,935 GB/s and
  300 W (80 GB), peak rates as the SXM parts, from the NVIDIA A100 Tensor Core GPU datasheet (PCIe columns).
  Their MIG rows repeat the SXM rows of the same memory size (same GA100 chip and memory stacks) and are
  marked derived (`measured` False): no `nvidia-smi mig -lgip` output of a PCIe part was read.
- `nvlink_gbs` (optional): NVLink bandwidth of one GPU per direction, GB/s, half the datasheets' bidirectional
  "NVLink: 900 GB/s" (H100 SXM, H200 SXM; NVIDIA H100 and H200 Tensor Core GPU datasheets) and "600 GB/s"
  (A100 SXM: NVIDIA A100 Tensor Core GPU datasheet; H100 NVL: its NVLink bridge, H100 datasheet NVL column).
  PCIe A100 parts carry none (their NVLink bridge pairs two cards only). Used for tensor-parallel all-reduces
  (`predictor.serving_engine`).
- `nvlink_gpus` (optional, with `nvlink_gbs`): the GPUs that NVLink connects all to all, the most that
  `--tensor-parallel` may span: 8 on the SXM parts (an HGX/DGX board's NVSwitch), 2 on the H100 NVL (a pair of
  PCIe cards joined by NVLink bridges). A device with `nvlink_gbs` and no `nvlink_gpus` is taken as 8.
- `measured_*`: ceilings measured on this workplace's GPU machines (KINDS.md): an 8192^3 bf16 matmul
  and a device-to-device copy.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

GIB = 1024  # MiB per GiB


@dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile."""

    name: str  # "1g.10gb"
    memory_mib: float  # usable memory, as nvidia-smi mig -lgip reports it
    sms: int
    memory_slices: int  # of 8: the share of memory bandwidth and L2 the instance owns
    compute_slices: int  # of 7
    measured: bool = True  # False: a derived lower bound (see the module docstring)


@dataclass(frozen=True)
class Device:
    """A data-centre GPU."""

    key: str  # "h100-80gb"
    name: str  # what nvidia-smi calls it
    memory_mib: int
    bandwidth: float  # bytes/s
    peak_flops: dict[str, float]  # dense, by kind: fp32 (CUDA cores), tf32, fp16, bf16, int8 (tensor cores; OP/s)
    tdp_w: float
    sms: int
    mig: tuple[MigProfile, ...] = ()
    measured_bandwidth: float | None = None  # achieved copy bandwidth here (bytes/s)
    measured_bf16_flops: float | None = None  # achieved bf16 matmul rate here
    aliases: tuple[str, ...] = field(default_factory=tuple)
    kernel_family: str | None = None  # a user device: the kernel-table family whose parameters it borrows
    source: str = ""  # where the figures come from
    parent: str | None = None  # a MIG slice as a target ("h100-80gb:3g.40gb"): the whole GPU's key
    nvlink_gbs: float | None = None  # NVLink bandwidth per direction per GPU, GB/s (tensor-parallel all-reduces)
    nvlink_gpus: int | None = None  # GPUs NVLink connects all to all (the largest tensor parallel); None: 8
    #: CUDA context per process (MiB, what nvidia-smi counts beyond the allocator) where a device file sets it: it
    #: replaces the runtime's measured figure (`predictor.memory.runtime_for`) for this GPU and its MIG slices
    cuda_context_mib: float | None = None

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 2**20

    @property
    def slice_profile(self) -> str | None:
        """The MIG profile a slice target is ("3g.40gb" of "h100-80gb:3g.40gb"); None for a whole GPU."""
        return None if self.parent is None else self.key.split(":", 1)[1]

    def profile(self, name: str) -> MigProfile:
        for p in self.mig:
            if p.name == name:
                return p
        raise KeyError(f"{self.key} has no MIG profile {name!r}: {', '.join(p.name for p in self.mig)}")


DEVICES_FILE = Path(__file__).resolve().parent / "devices.json"  # the built-in GPUs (`preflight.devices/1`)
DEVICES_SCHEMA = "preflight.devices/1"
DEVICES_ENV = "PREFLIGHT_DEVICES"  # more device files, separated by os.pathsep
_MAX_DEVICE_FILE = 1 << 20  # bytes: a device file is a few KiB

_DEVICE_KEYS = {
    "key": str,
    "name": str,
    "aliases": list,
    "source": str,
    "memory_mib": (int, float),
    "bandwidth_gbs": (int, float),
    "peak_tflops": dict,
    "tdp_w": (int, float),
    "sms": int,
    "mig": list,
    "measured_bandwidth_gbs": (int, float),
    "measured_bf16_tflops": (int, float),
    "kernel_family": str,
    "nvlink_gbs": (int, float),
    "nvlink_gpus": int,
    "cuda_context_mib": (int, float),
}
_REQUIRED = ("key", "name", "memory_mib", "bandwidth_gbs", "peak_tflops", "tdp_w", "sms")
_PEAK_KINDS = ("fp32", "tf32", "fp16", "bf16", "int8")
_MIG_KEYS = {
    "profile": str,
    "memory_mib": (int, float),
    "sms": int,
    "memory_slices": int,
    "compute_slices": int,
    "measured": bool,
}
# Plausibility bounds (a typo of three orders of magnitude is refused): generous around today's parts.
_BOUNDS = {
    "memory_mib": (1024, 16 * 2**20),  # 1 GiB .. 16 TiB
    "bandwidth_gbs": (50, 100_000),  # 50 GB/s .. 100 TB/s
    "tdp_w": (10, 5000),
    "sms": (1, 2048),
    "peak_tflops": (0.1, 100_000),
    "nvlink_gbs": (1, 10_000),
    "nvlink_gpus": (2, 1024),
    "cuda_context_mib": (0, 65_536),
}


class DeviceFileError(ValueError):
    """A device file that does not read as `preflight.devices/1` (one line: the file and what is wrong)."""


def _number_in(label: str, value, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DeviceFileError(f"{label} must be a number, not {value!r}")
    if not lo <= value <= hi:
        raise DeviceFileError(f"{label} = {value:g} is outside {lo:g} .. {hi:g}")
    return float(value)


def _check_keys(label: str, entry: dict, allowed: dict) -> None:
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise DeviceFileError(f"{label}: unknown key {unknown[0]!r} (known: {', '.join(allowed)})")
    for k, v in entry.items():
        if not isinstance(v, allowed[k]) or (allowed[k] is int and isinstance(v, bool)):
            raise DeviceFileError(f"{label}: {k} must be {_type_name(allowed[k])}, not {type(v).__name__}")


def _type_name(t) -> str:
    names = {str: "a string", int: "an integer", list: "a list", dict: "an object", bool: "true or false"}
    return names.get(t, "a number")


def _parse_mig(label: str, rows: list, memory_mib: float, sms: int) -> tuple[MigProfile, ...]:
    out = []
    for i, row in enumerate(rows):
        where = f"{label} mig[{i}]"
        if not isinstance(row, dict):
            raise DeviceFileError(f"{where} must be an object")
        _check_keys(where, row, _MIG_KEYS)
        missing = [k for k in ("profile", "memory_mib", "sms", "memory_slices", "compute_slices") if k not in row]
        if missing:
            raise DeviceFileError(f"{where}: missing {missing[0]!r}")
        mem = _number_in(f"{where} memory_mib", row["memory_mib"], 256, memory_mib)
        if not 1 <= row["sms"] <= sms:
            raise DeviceFileError(f"{where} sms = {row['sms']} is outside 1 .. {sms} (the GPU's SMs)")
        if not 1 <= row["memory_slices"] <= 8 or not 1 <= row["compute_slices"] <= 7:
            raise DeviceFileError(f"{where}: memory_slices is 1 .. 8 and compute_slices 1 .. 7")
        out.append(
            MigProfile(
                row["profile"], mem, row["sms"], row["memory_slices"], row["compute_slices"], row.get("measured", True)
            )
        )
    return tuple(out)


def parse_device(entry: dict, label: str = "device") -> Device:
    """One device object of a `preflight.devices/1` file (units: MiB, GB/s, dense TFLOP/s or TOPS, W) as a
    `Device`; `DeviceFileError` names the first thing wrong (unknown key, missing field, implausible number)."""
    if not isinstance(entry, dict):
        raise DeviceFileError(f"{label} must be an object")
    label = f"{label} {entry['key']!r}" if isinstance(entry.get("key"), str) else label
    _check_keys(label, entry, _DEVICE_KEYS)
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise DeviceFileError(f"{label}: missing {missing[0]!r}")
    key = entry["key"].strip().lower()
    if not key or any(c.isspace() or c == ":" for c in key):
        raise DeviceFileError(f"{label}: a key is one word without ':' (e.g. 'l40s-48gb')")
    memory = _number_in(f"{label} memory_mib", entry["memory_mib"], *_BOUNDS["memory_mib"])
    bandwidth = _number_in(f"{label} bandwidth_gbs", entry["bandwidth_gbs"], *_BOUNDS["bandwidth_gbs"])
    peaks = entry["peak_tflops"]
    unknown = sorted(set(peaks) - set(_PEAK_KINDS))
    if unknown or "fp32" not in peaks:
        raise DeviceFileError(
            f"{label} peak_tflops: "
            + (f"unknown kind {unknown[0]!r}" if unknown else "needs at least fp32")
            + f" (kinds: {', '.join(_PEAK_KINDS)})"
        )
    peak_flops = {
        k: float(round(_number_in(f"{label} peak_tflops.{k}", v, *_BOUNDS["peak_tflops"]) * 1e12))
        for k, v in peaks.items()
    }
    sms = entry["sms"]
    _number_in(f"{label} sms", sms, *_BOUNDS["sms"])
    optional = {}
    if "measured_bandwidth_gbs" in entry:
        mbw = _number_in(f"{label} measured_bandwidth_gbs", entry["measured_bandwidth_gbs"], 1, bandwidth)
        optional["measured_bandwidth"] = float(round(mbw * 1e9))
    if "measured_bf16_tflops" in entry:
        top = peak_flops.get("bf16", math.inf) / 1e12
        mbf = _number_in(f"{label} measured_bf16_tflops", entry["measured_bf16_tflops"], 0.1, top)
        optional["measured_bf16_flops"] = float(round(mbf * 1e12))
    if "nvlink_gbs" in entry:
        optional["nvlink_gbs"] = _number_in(f"{label} nvlink_gbs", entry["nvlink_gbs"], *_BOUNDS["nvlink_gbs"])
    if "nvlink_gpus" in entry:
        if "nvlink_gbs" not in entry:
            raise DeviceFileError(f"{label} nvlink_gpus needs nvlink_gbs (the NVLink bandwidth it connects them with)")
        optional["nvlink_gpus"] = int(_number_in(f"{label} nvlink_gpus", entry["nvlink_gpus"], *_BOUNDS["nvlink_gpus"]))
    if "cuda_context_mib" in entry:
        optional["cuda_context_mib"] = _number_in(
            f"{label} cuda_context_mib", entry["cuda_context_mib"], *_BOUNDS["cuda_context_mib"]
        )
    return Device(
        key=key,
        name=entry["name"],
        memory_mib=int(memory) if float(memory).is_integer() else memory,
        bandwidth=float(round(bandwidth * 1e9)),
        peak_flops=peak_flops,
        tdp_w=_number_in(f"{label} tdp_w", entry["tdp_w"], *_BOUNDS["tdp_w"]),
        sms=sms,
        mig=_parse_mig(label, entry.get("mig", []), memory, sms),
        aliases=tuple(a.strip().lower() for a in entry.get("aliases", []) if isinstance(a, str)),
        kernel_family=entry.get("kernel_family"),
        source=entry.get("source", ""),
        **optional,
    )


def read_device_file(path: str | Path) -> list[Device]:
    """The devices of one `preflight.devices/1` file (`DeviceFileError`: one line naming the file and the fault)."""
    path = Path(path)
    try:
        if path.stat().st_size > _MAX_DEVICE_FILE:
            raise DeviceFileError(f"{path}: a device file is at most 1 MiB")
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DeviceFileError(f"{path}: {exc.strerror or exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise DeviceFileError(f"{path}: not JSON ({str(exc).splitlines()[0][:120]})") from exc
    if not isinstance(doc, dict) or doc.get("schema") != DEVICES_SCHEMA or not isinstance(doc.get("devices"), list):
        raise DeviceFileError(
            f'{path}: not a device file (expected {{"schema": "{DEVICES_SCHEMA}", "devices": [...]}})'
        )
    extra = sorted(set(doc) - {"schema", "devices"})
    if extra:
        raise DeviceFileError(f"{path}: unknown key {extra[0]!r}")
    try:
        return [parse_device(e, f"devices[{i}]") for i, e in enumerate(doc["devices"])]
    except DeviceFileError as exc:
        raise DeviceFileError(f"{path}: {exc}") from None


def add_devices(devices: list[Device], origin: str) -> None:
    """Add user devices to `DEVICES`; a key or alias that names a device already known is refused."""
    devices = [d for d in devices if DEVICES.get(d.key) != d]  # the same file read twice adds nothing
    taken = {n: d.key for d in DEVICES.values() for n in (d.key, *d.aliases)}
    for d in devices:
        for n in (d.key, *d.aliases):
            if n in taken:
                raise DeviceFileError(f"{origin}: {n!r} already names device {taken[n]!r}")
            taken[n] = d.key
    for d in devices:
        DEVICES[d.key] = d


def add_device_file(path: str | Path) -> list[Device]:
    """Read a user device file and add its devices (`preflight --devices FILE`); returns them."""
    devices = read_device_file(path)
    add_devices(devices, str(path))
    return devices


def device_json(d: Device) -> dict:
    """A device as one object of a `preflight.devices/1` file (what `preflight devices --show` prints)."""
    out = {
        "key": d.key,
        "name": d.name,
        "aliases": list(d.aliases),
        "source": d.source,
        "memory_mib": d.memory_mib,
        "bandwidth_gbs": d.bandwidth / 1e9,
        "peak_tflops": {k: v / 1e12 for k, v in d.peak_flops.items()},
        "tdp_w": d.tdp_w,
        "sms": d.sms,
    }
    if d.measured_bandwidth:
        out["measured_bandwidth_gbs"] = d.measured_bandwidth / 1e9
    if d.measured_bf16_flops:
        out["measured_bf16_tflops"] = d.measured_bf16_flops / 1e12
    if d.kernel_family:
        out["kernel_family"] = d.kernel_family
    if d.nvlink_gbs is not None:
        out["nvlink_gbs"] = d.nvlink_gbs
    if d.nvlink_gpus is not None:
        out["nvlink_gpus"] = d.nvlink_gpus
    if d.cuda_context_mib is not None:
        out["cuda_context_mib"] = d.cuda_context_mib
    out["mig"] = [
        {
            "profile": p.name,
            "memory_mib": p.memory_mib,
            "sms": p.sms,
            "memory_slices": p.memory_slices,
            "compute_slices": p.compute_slices,
            "measured": p.measured,
        }
        for p in d.mig
    ]
    return out


def _builtin() -> dict[str, Device]:
    return {d.key: d for d in read_device_file(DEVICES_FILE)}


DEVICES: dict[str, Device] = _builtin()


def _load_user_files() -> None:
    """Device files named by $PREFLIGHT_DEVICES (os.pathsep-separated) and the user's config
    ($XDG_CONFIG_HOME or ~/.config, then preflight/devices.json), added at import."""
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "preflight" / "devices.json"
    paths = [p for p in os.environ.get(DEVICES_ENV, "").split(os.pathsep) if p]
    if config.is_file():
        paths.insert(0, str(config))
    for p in paths:
        add_device_file(p)


class UnknownDeviceError(KeyError):
    """No device with that name."""

    def __str__(self) -> str:
        return self.args[0]


def slice_device(device: Device, profile: MigProfile) -> Device:
    """A MIG slice of `device` as a device of its own (`h100-80gb:3g.40gb`): the profile's usable memory and SMs,
    the peak rates scaled by its share of SMs and the bandwidth by its share of memory slices (as the MIG
    recommender scales them), and the power limit by its compute slices of 7 (an assumption: no per-slice power is
    published). Its kernels are costed with the whole GPU's kernel parameters."""
    sm_share, bw_share = profile.sms / device.sms, profile.memory_slices / 8
    return Device(
        key=f"{device.key}:{profile.name}",
        name=f"{device.name} MIG {profile.name}",
        memory_mib=profile.memory_mib,
        bandwidth=device.bandwidth * bw_share,
        peak_flops={k: v * sm_share for k, v in device.peak_flops.items()},
        tdp_w=device.tdp_w * profile.compute_slices / 7,
        sms=profile.sms,
        kernel_family=device.kernel_family,
        source=f"{device.key}'s figures scaled to MIG profile {profile.name}",
        parent=device.key,
        cuda_context_mib=device.cuda_context_mib,
    )


def get_device(name: str) -> Device:
    """Look a device up by key or alias, case-insensitively (`H100`, `h100-80gb`); `DEVICE:PROFILE`
    (`h100:3g.40gb`) names one MIG slice of it as a target (`slice_device`). UnknownDeviceError for a name that is
    not a string (a list where one GPU is asked for, None)."""
    if not isinstance(name, str):
        raise UnknownDeviceError(
            f"a device is named by a string such as 'h100-80gb', not {type(name).__name__} {name!r} (several GPUs: "
            "report(devices=[...]) or --device repeated)"
        )
    key = name.strip().lower()
    if ":" in key:
        whole, _, profile = key.partition(":")
        parent = get_device(whole)
        try:
            return slice_device(parent, parent.profile(profile))
        except KeyError:
            names = ", ".join(p.name for p in parent.mig) or "none: it does not support MIG"
            raise UnknownDeviceError(f"{parent.key} has no MIG profile {profile!r} (its profiles: {names})") from None
    for d in DEVICES.values():
        if key == d.key or key in d.aliases:
            return d
    raise UnknownDeviceError(
        f"unknown device {name!r}; known: {', '.join(DEVICES)} (a MIG slice: DEVICE:PROFILE, e.g. "
        f"h100-80gb:3g.40gb; more GPUs: `preflight --devices FILE` or preflight.add_device_file(FILE), docs/devices.md)"
    )


_load_user_files()
