"""Fill the `prediction` block of a report: a trained predictor for the device, else the roofline estimate.

Roofline estimate (labelled `"predictor": "roofline"`, used for any device without a trained artifact):
- latency: the roofline bound plus a kernel-launch floor of LAUNCH_US per operator (eager PyTorch runs
  one kernel or more per op); interval from the bound to 3x the estimate;
- energy: latency x power, power taken as 60% of TDP (interval: 30% of TDP at the low latency to TDP at
  the high latency);
- memory: `roofline.memory_estimate` (weights + peak activations + context + workspace); interval from
  weights + activations + context to the estimate + 25% of the activations (allocator fragmentation).
These factors are assumptions, not fits: the report says so. A trained predictor replaces them with
its calibrated quantiles.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from .data import Sample
from .devices import Device, get_device
from .mig import recommend
from .roofline import CONTEXT_MIB, latency_bound_ms_arrays, memory_estimate, op_arrays

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
LAUNCH_US = 5.0
_ARTIFACT = re.compile(r"^(?P<device>[\w.-]+)@(?P<version>\d+)$")


def find_artifact(device: str, root: Path = CHECKPOINTS) -> Path | None:
    """The newest `<device>@<n>` artifact directory, or None."""
    if not root.is_dir():
        return None
    best = None
    for d in root.iterdir():
        m = _ARTIFACT.match(d.name)
        if m and m["device"] == device and (d / "meta.json").is_file():
            if best is None or int(m["version"]) > int(_ARTIFACT.match(best.name)["version"]):
                best = d
    return best


_LOADED: dict[tuple[Path, float], object] = {}


def _load_cached(directory: Path):
    """Load an artifact once per process (keyed by path and modification time)."""
    from .train import load

    key = (directory, (directory / "model.pt").stat().st_mtime)
    if key not in _LOADED:
        _LOADED[key] = load(directory)[0]
    return _LOADED[key]


def predictor_info(device_name: str, checkpoints: Path = CHECKPOINTS) -> dict:
    """Which predictor `predict` uses for a device, and its evaluation figures (for reports)."""
    device = get_device(device_name)
    artifact = find_artifact(device.key, checkpoints)
    if artifact is None:
        return {"name": "roofline", "trained": False, "evaluation": None, "evaluation_table": None,
                "note": f"roofline estimate: the roofline bound + {LAUNCH_US:g} us kernel launch per operator, energy "
                        f"at 60% of TDP, memory = weights + peak activations + {CONTEXT_MIB:g} MiB context + "
                        f"workspace; the intervals are assumptions, not calibrated on measurements"}
    import json

    meta = json.loads((artifact / "meta.json").read_text())
    table = artifact / "EVAL.md"
    return {"name": artifact.name, "trained": True, "evaluation": meta.get("evaluation"),
            "evaluation_table": str(table) if table.is_file() else None,
            "note": f"GraphSAGE trained on {meta.get('n_samples', '?')} measured configurations of "
                    f"{len(meta.get('families', []))} families ({meta.get('created', '?')})"}


def _sample_from_analysis(analysis, device: str, arrays: dict) -> Sample:
    return Sample(key="", family="", device=device, y=np.full(3, math.nan), x=analysis.x,
                  edge_index=analysis.edge_index, static=dict(analysis.static_features), ops=arrays, totals={})


def roofline_memory_mib(param_bytes: int, peak_activation_bytes: int) -> tuple[float, float, float]:
    """The roofline estimate's memory (low, point, high) in MiB (module docstring)."""
    est = memory_estimate(param_bytes, peak_activation_bytes)
    return (est.weights_mib + est.activations_mib + CONTEXT_MIB, est.total_mib,
            est.total_mib + 0.25 * est.activations_mib)


def _slice_latencies(arrays: dict, device: Device, bound: float, full_ms: float, launch_ms: float) -> dict[str, float]:
    """Predicted latency on each MIG slice.

    The kernel-launch floor (`launch_ms`: host-side work and launch latency, which a smaller slice does not
    slow down) is kept as it is; the rest of the full-GPU latency is scaled by the slice's roofline ratio (its
    share of SMs and of memory bandwidth) against `bound`, the whole GPU's roofline bound. Scaling the floor
    too would make a launch-bound model look up to 8x slower on a 1g slice than on the whole GPU.
    """
    fixed = min(launch_ms, full_ms)
    if bound <= 0:  # no work at all: only the floor
        return {p.name: full_ms for p in device.mig}
    return {p.name: fixed + (full_ms - fixed) * latency_bound_ms_arrays(arrays, device, p) / bound for p in device.mig}


def predict(analysis, device_name: str, *, latency_slo_ms: float | None = None,
            checkpoints: Path = CHECKPOINTS) -> tuple[dict, list[str]]:
    """The `prediction` block for `analysis` on `device_name`, and warnings to show the user."""
    device = get_device(device_name)
    warnings: list[str] = []
    arrays = op_arrays(analysis.ops)
    bound = latency_bound_ms_arrays(arrays, device)
    launch_ms = sum(1 for c in analysis.ops if not c.weight_only) * LAUNCH_US / 1e3
    artifact = find_artifact(device.key, checkpoints)
    if artifact is not None:
        from .train import prepare

        trained = _load_cached(artifact)
        q = trained.predict_prepared([prepare(_sample_from_analysis(analysis, device.key, arrays), trained.variant)])[0]
        (lat_lo, lat, lat_hi), (e_lo, e, e_hi), (m_lo, m, m_hi) = (tuple(float(v) for v in q[t]) for t in range(3))
        name = artifact.name
    else:
        lat = bound + launch_ms
        lat_lo, lat_hi = bound, 3 * lat
        e = lat / 1e3 * 0.6 * device.tdp_w
        e_lo, e_hi = lat_lo / 1e3 * 0.3 * device.tdp_w, lat_hi / 1e3 * device.tdp_w
        m_lo, m, m_hi = roofline_memory_mib(analysis.totals.param_bytes, analysis.totals.peak_activation_bytes)
        name = "roofline"
        warnings.append(f"no trained predictor for {device.key}: roofline estimate (bound + {LAUNCH_US:g} us launch "
                        f"per op; energy at 60% of TDP; intervals are assumptions, not calibrated)")
    slices = _slice_latencies(arrays, device, bound, lat, launch_ms)
    rec = recommend(device, m_hi, latency_ms_by_profile=slices, latency_slo_ms=latency_slo_ms)
    block = {
        "device": device.key, "predictor": name,
        "latency_ms": lat, "latency_ms_interval": [lat_lo, lat_hi],
        "energy_j": e, "energy_j_interval": [e_lo, e_hi],
        "memory_mb": m, "memory_mb_interval": [m_lo, m_hi],
        "roofline_latency_ms": bound,
        "mig": rec.to_json(),
    }
    return block, warnings
