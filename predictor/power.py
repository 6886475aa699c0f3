"""Board power of a GPU running a model's kernels, and so energy per inference (docs/power-and-memory.md).

Average board power over an inference, in watts:

    P = P_gap + (P_compute - P_gap) x s_compute + (P_memory - P_gap) x s_memory,   capped at the power limit

- s_compute, s_memory (`busy_shares`): the shares of the kernel model's predicted time (`KernelTimes.eager_s`)
  spent in compute-bound and in memory-bound kernels; the rest, s_gap = 1 - s_compute - s_memory, is time at
  the launch floor (kernels too short to hide the host's dispatch: the GPU mostly waits). A kernel is counted
  compute-bound when its compute term (at the fitted efficiency) is at least its memory term and above the
  launch floor, memory-bound when its memory term is the larger and above the floor, a gap otherwise.
- P_gap, P_compute, P_memory (`PowerParams`, W): fitted per GPU on the ML.ENERGY Leaderboard v2 measurements
  (`python -m predictor.power_fit`, which writes `predictor/power_params.json` with each figure's source and the
  leave-one-model-out evaluation). P_compute was fitted on float16 tensor-core work (diffusion denoisers) and is
  applied to every precision: no public per-precision power data for these GPUs (an assumption, stated in the
  file). GPUs without public measurements carry another GPU's figures, scaled by the ratio of the power limits
  (`source` says which).

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
    """

    gap_w: float
    compute_w: float
    memory_w: float
    limit_w: float
    ratio_p10: float = 1.0
    ratio_p90: float = 1.0
    source: str = ""

    def power_w(self, s_compute: float, s_memory: float) -> float:
        """Average board power (W) for the given busy shares (each in [0, 1], summing to <= 1)."""
        p = self.gap_w + (self.compute_w - self.gap_w) * s_compute + (self.memory_w - self.gap_w) * s_memory
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
    executing = np.maximum(compute_s, memory_s) > launch_s
    comp = executing & (compute_s >= memory_s)
    mem = executing & ~comp
    s_c, s_m = float(eager[comp].sum() / total), float(eager[mem].sum() / total)
    return s_c, s_m, max(0.0, 1.0 - s_c - s_m)


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
    )
