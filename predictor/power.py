"""Board power of a GPU running a model's kernels, and so energy per inference (docs/power-and-memory.md).

Average board power over an inference, in watts:

    P = P_gap + (P_compute - P_gap) x s_compute + (P_memory - P_gap) x s_memory
              + (P_compute_fp32 - P_gap) x s_compute_fp32,                          capped at the power limit

- s_compute, s_memory (`busy_shares`): the shares of the kernel model's predicted time (`KernelTimes.eager_s`)
  spent in compute-bound and in memory-bound kernels; the rest, s_gap = 1 - s_compute - s_memory, is time at
  the launch floor (kernels too short to hide the host's dispatch: the GPU mostly waits). A kernel is counted
  compute-bound when its compute term (at the fitted efficiency) is at least its memory term and above the
  launch floor, memory-bound when its memory term is the larger and above the floor, a gap otherwise.
- s_compute_fp32 (where the GPU has `compute_fp32_w`; `kernel_classes`, `shares_from_classes`, rule
  `FP32_COMPUTE`): the compute-bound float32 kernels' time at the roofline's peak rate over the predicted time, i.e.
  their time x the fraction of peak FLOP/s they reach; the rest of their time counts as gap, and s_compute then
  holds the other compute-bound kernels only. A float32 kernel near peak draws P_compute_fp32, a tiny one (a
  recurrent step, a batch-1 GEMM a few tiles wide) little more than P_gap.
- P_gap, P_compute, P_memory, P_compute_fp32 (`PowerParams`, W): fitted per GPU (`python -m predictor.power_fit`,
  which writes `predictor/power_params.json` with each figure's source and the held-out evaluation) on the ML.ENERGY
  Leaderboard v2 measurements (float16 diffusion, bfloat16 vLLM serving) and, on the H100, our own whole-model
  measurements (data/h100-80gb/models: eager float32 and float16): P_compute_fp32 only where float32 work was
  measured (the H100); elsewhere float32 compute-bound kernels draw P_compute (assumed, stated in `source`). GPUs
  without measurements carry another GPU's figures, scaled by the ratio of the power limits (`source` says which).

Energy per inference (J) = P x latency. The interval multiplies the latency interval by the power interval, the
power interval being the 10th and 90th percentiles of measured / predicted power over the held-out rows of the
fit (`ratio_p10`, `ratio_p90`), capped at the power limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SCHEMA = "preflight.power_params/1"
PARAMS_PATH = Path(__file__).resolve().parent / "power_params.json"


class PowerParamsError(ValueError):
    """The power-parameter file is missing, malformed or lacks a device (the message says which)."""


@dataclass(frozen=True)
class PowerParams:
    """Power figures of one GPU, in watts, with where they come from.

    Attributes:
        gap_w: board power while the GPU waits between short kernels (the launch floor).
        compute_w: board power while compute-bound kernels run (fitted on float16 tensor-core work).
        memory_w: board power while memory-bound kernels run.
        limit_w: the board's power limit (TDP); predicted power never exceeds it.
        ratio_p10, ratio_p90: 10th / 90th percentile of measured / predicted power on held-out rows.
        source: how the figures were obtained ("fit: ..." or "transfer: ...").
        compute_fp32_w: board power while compute-bound float32 kernels run (FP32 CUDA cores, TF32 convolutions),
            where the fit had float32 measurements; None: `compute_w` applies to them too.
    """

    gap_w: float
    compute_w: float
    memory_w: float
    limit_w: float
    ratio_p10: float = 1.0
    ratio_p90: float = 1.0
    source: str = ""
    compute_fp32_w: float | None = None

    @property
    def fp32_w(self) -> float:
        """Board power of compute-bound float32 kernels (W): `compute_fp32_w`, or `compute_w` where none was fitted."""
        return self.compute_w if self.compute_fp32_w is None else self.compute_fp32_w

    def power_w(self, s_compute: float, s_memory: float, s_compute_fp32: float = 0.0) -> float:
        """Average board power (W) for the given busy shares (each in [0, 1], summing to <= 1): `s_compute` of the
        compute-bound kernels but the float32 ones, `s_memory` of the memory-bound kernels, `s_compute_fp32` of the
        compute-bound float32 kernels (`busy_shares_fp32`)."""
        p = (
            self.gap_w
            + (self.compute_w - self.gap_w) * s_compute
            + (self.memory_w - self.gap_w) * s_memory
            + (self.fp32_w - self.gap_w) * s_compute_fp32
        )
        return float(min(max(p, 0.0), self.limit_w))

    def interval_w(self, power_w: float) -> tuple[float, float]:
        """(low, high) power around a prediction, from the held-out error percentiles, capped at the limit."""
        return min(power_w * self.ratio_p10, self.limit_w), min(power_w * self.ratio_p90, self.limit_w)


def busy_shares(compute_s: np.ndarray, memory_s: np.ndarray, launch_s: np.ndarray) -> tuple[float, float, float]:
    """(s_compute, s_memory, s_gap) of a kernel sequence: the shares of its eager time (per kernel
    max(compute, memory, launch), seconds, (N,) arrays) in compute-bound kernels, memory-bound kernels and at the
    launch floor (module docstring). All 0 for an empty sequence."""
    eager = np.maximum(np.maximum(compute_s, memory_s), launch_s)
    total = float(eager.sum())
    if total <= 0:
        return 0.0, 0.0, 0.0
    by = timed_by(compute_s, memory_s, launch_s)
    s_c, s_m = float(eager[by == "compute"].sum() / total), float(eager[by == "memory"].sum() / total)
    return s_c, s_m, max(0.0, 1.0 - s_c - s_m)


def timed_by(compute_s: np.ndarray, memory_s: np.ndarray, launch_s: np.ndarray) -> np.ndarray:
    """(N,) str: the term that sets each kernel's eager time, "launch" (its execution, max(compute, memory), is not
    above its launch floor), else "compute" (compute >= memory) or "memory"; the classes `busy_shares` sums."""
    execution = np.maximum(compute_s, memory_s)
    return np.where(launch_s >= execution, "launch", np.where(compute_s >= memory_s, "compute", "memory"))


#: The kernel classes of `kernel_classes`: the launch floor, memory-bound kernels, compute-bound kernels on tensor
#: cores and compute-bound kernels on FP32 CUDA cores.
CLASSES = ("gap", "memory", "compute_tensor", "compute_cuda")


def tensor_core_mask(arrays, device, *, tf32_matmul: bool = False) -> np.ndarray:
    """(N,) bool: the kernels of `arrays` (`kernel_model.KernelArrays`) that the kernel model costs at a tensor-core
    peak (`roofline.peak_rate` above the device's FP32 CUDA-core peak: float16/bfloat16 gemm, conv and attention,
    float32 conv on TF32, float32 gemm under `tf32_matmul`)."""
    from .kernel_model import _CATEGORY
    from .roofline import peak_rate

    out = np.zeros(len(arrays), dtype=bool)
    fp32 = device.peak_flops["fp32"]
    for kind, dtype, rows in arrays.groups:
        out[rows] = peak_rate(device, _CATEGORY.get(kind, kind), dtype, tf32_matmul=tf32_matmul) > fp32
    return out


def kernel_classes(arrays, times, device, *, tf32_matmul: bool = False) -> dict[str, float]:
    """Eager time (seconds, `KernelTimes.eager_s` summed) per class of `CLASSES`, each also restricted to the
    float32 kernels (`<class>_fp32`); and the same kernels' time at the roofline's peak rate (`<class>_peak`,
    `<class>_fp32_peak`: `bound_compute_s` of the compute-bound ones, `bound_memory_s` of the memory-bound ones, 0 at
    the launch floor). A kernel is in the class `busy_shares` gives it (launch floor, memory-bound, compute-bound), a
    compute-bound one split by `tensor_core_mask`."""
    eager = times.eager_s
    executing = np.maximum(times.compute_s, times.memory_s) > times.launch_s
    comp = executing & (times.compute_s >= times.memory_s)
    tensor = tensor_core_mask(arrays, device, tf32_matmul=tf32_matmul)
    masks = {
        "gap": ~executing,
        "memory": executing & ~comp,
        "compute_tensor": comp & tensor,
        "compute_cuda": comp & ~tensor,
    }
    fp32 = arrays.dtype == "float32"
    peak = np.where(comp, times.bound_compute_s, np.where(executing, times.bound_memory_s, 0.0))
    out = {}
    for name, mask in masks.items():
        out[name] = float(eager[mask].sum())
        out[f"{name}_fp32"] = float(eager[mask & fp32].sum())
        out[f"{name}_peak"] = float(peak[mask].sum())
        out[f"{name}_fp32_peak"] = float(peak[mask & fp32].sum())
    return out


#: Which compute-bound kernel time is priced at `PowerParams.compute_fp32_w` (`shares_from_classes`): "none" (all at
#: `compute_w`), "float32" (float32 kernels, on CUDA cores or TF32 tensor cores: their eager time), "float32-peak"
#: (the same kernels' time at the roofline's peak rate, i.e. their eager time x the fraction of peak they reach),
#: "cuda" (kernels on FP32 CUDA cores, any dtype). The fit (`predictor.power_fit`) compares them by held-out error;
#: this is the one it adopted.
FP32_COMPUTE_MODES = ("none", "float32", "float32-peak", "cuda")
FP32_COMPUTE = "float32-peak"


def shares_from_classes(
    classes: dict[str, float], total_s: float, fp32_compute: str = FP32_COMPUTE
) -> tuple[float, float, float]:
    """(s_compute, s_memory, s_compute_fp32) of `PowerParams.power_w` from `kernel_classes`' times (seconds) over
    `total_s` (the kernels' eager time for a prediction), the float32 part by `fp32_compute` (`FP32_COMPUTE_MODES`).
    All 0 when `total_s` <= 0."""
    if fp32_compute not in FP32_COMPUTE_MODES:
        raise ValueError(f"fp32_compute must be one of {', '.join(FP32_COMPUTE_MODES)} (got {fp32_compute!r})")
    if total_s <= 0:
        return 0.0, 0.0, 0.0
    comp, c32 = classes["compute_tensor"] + classes["compute_cuda"], 0.0
    if fp32_compute == "float32":
        c32 = classes["compute_tensor_fp32"] + classes["compute_cuda_fp32"]
        comp -= c32
    elif fp32_compute == "float32-peak":  # the rest of the float32 kernels' time counts as gap
        c32 = classes["compute_tensor_fp32_peak"] + classes["compute_cuda_fp32_peak"]
        comp -= classes["compute_tensor_fp32"] + classes["compute_cuda_fp32"]
    elif fp32_compute == "cuda":
        c32 = classes["compute_cuda"]
        comp -= c32
    return comp / total_s, classes["memory"] / total_s, c32 / total_s


_CACHE: dict[tuple[Path, float], dict[str, PowerParams]] = {}


def load_power_params(path: Path | str | None = None) -> dict[str, PowerParams]:
    """Device key -> `PowerParams` from the parameter file (default: the committed `predictor/power_params.json`).

    Raises `PowerParamsError` when the file is missing or malformed: predictions never fall back silently.
    """
    p = Path(path) if path is not None else PARAMS_PATH
    try:
        key = (p.resolve(), p.stat().st_mtime)
    except OSError as e:
        raise PowerParamsError(f"cannot read power-parameter file {p}: {e.strerror}") from e
    if key not in _CACHE:
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise PowerParamsError(f"cannot read power-parameter file {p}: {e}") from e
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise PowerParamsError(f"{p} is not a power-parameter file (expected schema {SCHEMA!r})")
        out = {}
        for dev, e in doc.get("devices", {}).items():
            try:
                out[dev] = PowerParams(
                    float(e["gap_w"]),
                    float(e["compute_w"]),
                    float(e["memory_w"]),
                    float(e["limit_w"]),
                    float(e["ratio_p10"]),
                    float(e["ratio_p90"]),
                    str(e["source"]),
                    float(e["compute_fp32_w"]) if e.get("compute_fp32_w") is not None else None,
                )
            except (KeyError, TypeError, ValueError) as err:
                raise PowerParamsError(f"bad power-parameter entry for {dev!r} in {p}: {err}") from err
        _CACHE[key] = out
    return _CACHE[key]


def power_params(device_key: str, path: Path | str | None = None) -> PowerParams:
    """The power figures of one device; `PowerParamsError` when the file has none for it."""
    table = load_power_params(path)
    if device_key in table:
        return table[device_key]
    if ":" in device_key:  # a MIG slice: its GPU's figures scaled by its compute slices of 7 (`slice_device`)
        from .devices import get_device

        whole = power_params(device_key.split(":")[0], path)
        r = get_device(device_key).tdp_w / whole.limit_w
        return PowerParams(
            gap_w=whole.gap_w * r,
            compute_w=whole.compute_w * r,
            memory_w=whole.memory_w * r,
            limit_w=whole.limit_w * r,
            ratio_p10=whole.ratio_p10,
            ratio_p90=whole.ratio_p90,
            source=f"{whole.source}; x {r:.4g} for MIG slice {device_key} (its compute slices of 7; assumed)",
            compute_fp32_w=None if whole.compute_fp32_w is None else whole.compute_fp32_w * r,
        )
    transferred = _transfer_to_user_device(device_key, table)
    if transferred is None:
        raise PowerParamsError(f"no power parameters for {device_key!r} in {path or PARAMS_PATH}")
    return transferred


# the fitted GPU whose figures a device of each kernel family borrows (docs/devices.md)
_FAMILY_REFERENCE = {"ampere": "a100-40gb", "hopper": "h100-80gb"}


def _transfer_to_user_device(device_key: str, table: dict[str, PowerParams]) -> PowerParams | None:
    """A GPU added from a user's device file: its kernel family's fitted figures scaled by the power-limit ratio,
    as the table does for the built-in GPUs without measurements; None when it names no family with a fit."""
    from .devices import DEVICES

    device = DEVICES.get(device_key)
    ref = table.get(_FAMILY_REFERENCE.get(device.kernel_family or "", "")) if device is not None else None
    if ref is None:
        return None
    r = device.tdp_w / ref.limit_w
    return PowerParams(
        gap_w=ref.gap_w * r,
        compute_w=ref.compute_w * r,
        memory_w=ref.memory_w * r,
        limit_w=device.tdp_w,
        ratio_p10=ref.ratio_p10,
        ratio_p90=ref.ratio_p90,
        source=(
            f"transfer: {_FAMILY_REFERENCE[device.kernel_family]}'s fit x {r:.4g} (power-limit ratio "
            f"{device.tdp_w:g} / {ref.limit_w:g} W; kernel family {device.kernel_family}); no power measurements "
            f"of {device_key}"
        ),
        compute_fp32_w=None if ref.compute_fp32_w is None else ref.compute_fp32_w * r,
    )
