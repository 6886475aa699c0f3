"""The one table of devices: peak rates, bandwidth, memory, TDP and MIG profiles.

Sources, per field:
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
- `measured_*`: ceilings measured on this workplace's GPU machines (KINDS.md): an 8192^3 bf16 matmul
  and a device-to-device copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1024  # MiB per GiB

# Device memory a PyTorch inference process needs besides its weights and activations, in MiB: the one
# definition, used by the roofline memory estimate (`predictor.roofline.MemoryEstimate`) and, plus margins, by
# the measurement sampler's skip estimate (`predictor.measure.configs`). Both are assumptions until calibrated
# from GPU measurements (the harness records the context it measures, `memory_mb.context`).
CONTEXT_MIB = 500.0  # CUDA context + cuBLAS/cuDNN handles with PyTorch on Hopper
WORKSPACE_MIB = 64.0  # cuBLAS (32 MiB on Hopper) + cuDNN conv workspace, in steady state


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

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 2**20

    def profile(self, name: str) -> MigProfile:
        for p in self.mig:
            if p.name == name:
                return p
        raise KeyError(f"{self.key} has no MIG profile {name!r}: {', '.join(p.name for p in self.mig)}")


def _mig(rows: list[tuple[str, float, int, int, int]], measured: bool | set[str] = True) -> tuple[MigProfile, ...]:
    out = []
    for name, gib, sms, mem_slices, compute_slices in rows:
        is_measured = measured if isinstance(measured, bool) else name in measured
        out.append(MigProfile(name, gib * GIB, sms, mem_slices, compute_slices, is_measured))
    return tuple(out)


# Smallest usable GiB per memory slice on a Hopper part with published numbers: H200 1g.18gb = 16.00.
_HOPPER_SLICE_FLOOR_GIB = {"h200": 16.00}

DEVICES: dict[str, Device] = {
    d.key: d
    for d in (
        Device(
            key="a100-40gb",
            name="NVIDIA A100-SXM4-40GB",
            memory_mib=40960,
            bandwidth=1555e9,
            peak_flops={"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12, "bf16": 312e12, "int8": 624e12},
            tdp_w=400,
            sms=108,
            mig=_mig(
                [
                    ("1g.5gb", 4.75, 14, 1, 1),
                    ("2g.10gb", 9.75, 28, 2, 2),
                    ("3g.20gb", 19.62, 42, 4, 3),
                    ("4g.20gb", 19.62, 56, 4, 4),
                    ("7g.40gb", 39.50, 98, 8, 7),
                ]
            ),
            aliases=("a100", "a100-sxm4-40gb"),
        ),
        Device(
            key="a100-80gb",
            name="NVIDIA A100-SXM4-80GB",
            memory_mib=81920,
            bandwidth=2039e9,
            peak_flops={"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12, "bf16": 312e12, "int8": 624e12},
            tdp_w=400,
            sms=108,
            mig=_mig(
                [
                    ("1g.10gb", 9.50, 14, 1, 1),
                    ("1g.20gb", 19.50, 14, 2, 1),
                    ("2g.20gb", 19.50, 28, 2, 2),
                    ("3g.40gb", 39.25, 42, 4, 3),
                    ("4g.40gb", 39.25, 56, 4, 4),
                    ("7g.80gb", 79.00, 98, 8, 7),
                ]
            ),
            aliases=("a100-sxm4-80gb",),
        ),
        Device(
            key="a100-pcie-40gb",
            name="NVIDIA A100-PCIE-40GB",
            memory_mib=40960,
            bandwidth=1555e9,
            peak_flops={"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12, "bf16": 312e12, "int8": 624e12},
            tdp_w=250,
            sms=108,
            mig=_mig(
                [
                    ("1g.5gb", 4.75, 14, 1, 1),
                    ("2g.10gb", 9.75, 28, 2, 2),
                    ("3g.20gb", 19.62, 42, 4, 3),
                    ("4g.20gb", 19.62, 56, 4, 4),
                    ("7g.40gb", 39.50, 98, 8, 7),
                ],
                measured=False,
            ),
            aliases=("a100-40gb-pcie",),
        ),
        Device(
            key="a100-pcie-80gb",
            name="NVIDIA A100 80GB PCIe",
            memory_mib=81920,
            bandwidth=1935e9,
            peak_flops={"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12, "bf16": 312e12, "int8": 624e12},
            tdp_w=300,
            sms=108,
            mig=_mig(
                [
                    ("1g.10gb", 9.50, 14, 1, 1),
                    ("1g.20gb", 19.50, 14, 2, 1),
                    ("2g.20gb", 19.50, 28, 2, 2),
                    ("3g.40gb", 39.25, 42, 4, 3),
                    ("4g.40gb", 39.25, 56, 4, 4),
                    ("7g.80gb", 79.00, 98, 8, 7),
                ],
                measured=False,
            ),
            aliases=("a100-80gb-pcie",),
        ),
        Device(
            key="h100-80gb",
            name="NVIDIA H100 80GB HBM3",
            memory_mib=81559,
            bandwidth=3.35e12,
            peak_flops={"fp32": 67e12, "tf32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12, "int8": 1979e12},
            tdp_w=700,
            sms=132,
            mig=_mig(
                [
                    ("1g.10gb", 9.75, 16, 1, 1),
                    ("1g.20gb", 19.62, 26, 2, 1),
                    ("2g.20gb", 19.62, 32, 2, 2),
                    ("3g.40gb", 39.50, 60, 4, 3),
                    ("4g.40gb", 39.50, 64, 4, 4),
                    ("7g.80gb", 79.25, 132, 8, 7),
                ]
            ),
            measured_bandwidth=3.0e12,
            measured_bf16_flops=798e12,
            aliases=("h100", "h100-sxm", "h100-sxm5-80gb"),
        ),
        Device(
            key="h100-nvl-94gb",
            name="NVIDIA H100 NVL",
            memory_mib=95830,
            bandwidth=3.9e12,
            peak_flops={"fp32": 60e12, "tf32": 417.5e12, "fp16": 835e12, "bf16": 835e12, "int8": 1670.5e12},
            tdp_w=400,
            sms=132,
            mig=_mig(
                [
                    (n, _HOPPER_SLICE_FLOOR_GIB["h200"] * 94 / 141 * k, sms, k, c)
                    for n, sms, k, c in (
                        ("1g.12gb", 16, 1, 1),
                        ("1g.24gb", 26, 2, 1),
                        ("2g.24gb", 32, 2, 2),
                        ("3g.47gb", 60, 4, 3),
                        ("4g.47gb", 64, 4, 4),
                        ("7g.94gb", 132, 8, 7),
                    )
                ],
                measured=False,
            ),
            aliases=("h100-nvl",),
        ),
        Device(
            key="h200-141gb",
            name="NVIDIA H200",
            memory_mib=143771,
            bandwidth=4.8e12,
            peak_flops={"fp32": 67e12, "tf32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12, "int8": 1979e12},
            tdp_w=700,
            sms=132,
            mig=_mig(
                [
                    (n, _HOPPER_SLICE_FLOOR_GIB["h200"] * k, sms, k, c)
                    for n, sms, k, c in (
                        ("1g.18gb", 16, 1, 1),
                        ("1g.35gb", 26, 2, 1),
                        ("2g.35gb", 32, 2, 2),
                        ("3g.71gb", 60, 4, 3),
                        ("4g.71gb", 64, 4, 4),
                        ("7g.141gb", 132, 8, 7),
                    )
                ],
                measured={"1g.18gb"},
            ),
            measured_bandwidth=4.3e12,
            measured_bf16_flops=788e12,
            aliases=("h200", "h200-sxm"),
        ),
    )
}


class UnknownDeviceError(KeyError):
    """No device with that name."""

    def __str__(self) -> str:
        return self.args[0]


def get_device(name: str) -> Device:
    """Look a device up by key or alias, case-insensitively (`H100`, `h100-80gb`)."""
    key = name.strip().lower()
    for d in DEVICES.values():
        if key == d.key or key in d.aliases:
            return d
    raise UnknownDeviceError(f"unknown device {name!r}; known: {', '.join(DEVICES)}")
