"""The `Prediction` of a model on a device: a trained predictor for the device, else the kernel-model estimate.

What is predicted is eager PyTorch on a CUDA GPU: the kernels of the analysis's kernel view (`passes.kernels`:
views free, attention one fused kernel, constant work folded), each costed by the per-kernel time model
(`predictor.kernel_model`: fitted efficiencies and launch overhead, see docs/kernel-model.md).

Estimate without a trained predictor (labelled `"predictor": "roofline"`, as the schema has always called it):
- latency: the sum over kernels of max(compute, memory, launch) from the kernel model (the launch of the next
  kernel overlaps the current one's execution: `KernelTimes.eager_s`); interval from the sum over the same
  kernels of max(roofline time, half the fitted launch floor) (`estimate_low_ms`: a faster host may dispatch up
  to twice as fast; the bare roofline, without launch, sits 100x below the point for small models) to 2x the
  estimate (the model's held-out errors, and the sanity checks against published eager measurements in
  docs/kernel-model.md, are well inside 2x);
- energy: latency x average board power, the power from the kernels' busy shares (`predictor.power`: the share
  of the time in compute-bound kernels, in memory-bound kernels and at the launch floor, each with a power
  fitted per GPU on ML.ENERGY measurements, `predictor/power_params.json`); interval: the low latency x the
  power's held-out 10th-percentile ratio to the high latency x its 90th-percentile ratio (capped at the limit);
- memory: as nvidia-smi counts it (`predictor.memory.gpu_memory`: CUDA context of the runtime (eager PyTorch's,
  measured on our H100, or the device file's `cuda_context_mib`: `predictor.memory.runtime_for`) + cuBLAS
  workspace + what PyTorch's caching allocator reserves, replayed on the graph's weights and allocation trace
  (`allocator_reserve`; without a trace, or with one it cannot replay (a warning says so), a reserve factor
  fitted on MIG framebuffer readings, `predictor/memory_params.json`)); interval from the tensor peak + context +
  workspace (no allocator reserve) to the estimate + 25% of the reserved activations. The tensor peak (weights +
  peak live activations) is kept beside it (`Prediction.memory_tensor_peak_mib`); MIG fit uses the upper end.
A trained predictor replaces them with its calibrated quantiles.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from passes.costs import INT8_DTYPES, compute_dtype

from .data import Sample
from .devices import DEVICES, Device, get_device
from .kernel_model import (
    DEFAULT_MATMUL_PRECISION,
    KernelTimes,
    is_host_overhead,
    kernel_arrays,
    kernel_basis,
    kernel_latency_arrays,
    load_params,
    param_dtype,
    tf32_matmul_of,
)
from .memory import MIB, AllocationTraceError, Reserved, gpu_memory, least_reserved, runtime_for, simulate_reserved
from .mig import MigRecommendation, fits, recommend, slice_latencies
from .power import busy_shares, kernel_classes, power_params, shares_from_classes
from .roofline import op_arrays, peak_rate

#: Where trained predictors are looked up: `predictor/checkpoints/`, or the folder `PREFLIGHT_CHECKPOINTS` names (an
#: empty or missing folder: the kernel-model estimate everywhere; the test suite sets one, tests/conftest.py).
SHIPPED_CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"
CHECKPOINTS = (
    Path(os.environ["PREFLIGHT_CHECKPOINTS"]) if os.environ.get("PREFLIGHT_CHECKPOINTS") else SHIPPED_CHECKPOINTS
)
ESTIMATE_HIGH = 2.0  # the estimate's interval reaches this many times the estimate
# The estimate's low end: each kernel at least its roofline time or this share of its fitted launch floor (the
# floor is one host's dispatch time; a faster host may issue kernels up to twice as fast): never the bare roofline,
# which leaves out the launch and sits 100x below the point for small models.
ESTIMATE_LOW_LAUNCH = 0.5
#: The host's dispatch time per kernel as a multiple of the kernel model's fitted launch floor (`predict`'s
#: `host_overhead`, `preflight --host-overhead`): 1.0 is the host the floor was fitted on.
DEFAULT_HOST_OVERHEAD = 1.0


def estimate_low_ms(times: KernelTimes) -> float:
    """The low end of the estimate's latency interval, in ms: sum over kernels of max(roofline time,
    ESTIMATE_LOW_LAUNCH x launch floor)."""
    return float(np.maximum(times.bound_s, ESTIMATE_LOW_LAUNCH * times.launch_s).sum() * 1e3)


_ARTIFACT = re.compile(r"^(?P<device>[\w.-]+)@(?P<version>\d+)$")

#: Which whole-model predictor answers, `PREFLIGHT_PREDICTOR` (`preflight --predictor`): "auto" (the default: the
#: GraphSAGE trained on public and own whole-model measurements, `predictor.public_train`, on the GPUs where its
#: held-out evaluation passed the default rule, its `meta.json` "default_devices"; the kernel-model estimate
#: elsewhere, and a predictor trained on this project's own GPU measurements where one is in the checkpoints),
#: "kernel" (never the public GraphSAGE) or "public" (the public GraphSAGE on every GPU it was measured on, its
#: "devices"). The rule (`predictor.public_train.DEFAULT_TOLERANCE_PP`) and the table: docs/predictor-training.md.
PREDICTOR_ENV = "PREFLIGHT_PREDICTOR"
PREDICTOR_CHOICES = ("auto", "kernel", "public")
PUBLIC_SCHEMA = "preflight.public_residual/1"


def predictor_mode() -> str:
    """`PREFLIGHT_PREDICTOR`: "auto" (unset or unknown), "kernel" or "public" (`PREDICTOR_CHOICES`)."""
    mode = os.environ.get(PREDICTOR_ENV, "auto")
    return mode if mode in PREDICTOR_CHOICES else "auto"


def public_predictor_enabled() -> bool:
    """Whether `PREFLIGHT_PREDICTOR` asks for the public GraphSAGE on every GPU it was measured on (`public`)."""
    return predictor_mode() == "public"


def _public_devices(artifact: Path, measured: tuple[str, ...]) -> tuple[str, ...]:
    """The GPUs a public GraphSAGE answers on under `predictor_mode`: none ("kernel"), every one it was measured on
    ("public"), those its evaluation put on by default ("auto": `meta.json` "default_devices")."""
    mode = predictor_mode()
    if mode == "kernel":
        return ()
    if mode == "public":
        return measured
    on = _meta(artifact).get("default_devices")
    return tuple(k for k in measured if isinstance(on, list) and k in on)


def held_back(device: str, root: Path = CHECKPOINTS) -> Path | None:
    """The newest public GraphSAGE measured on `device` (or on the GPU of a MIG slice `device`) that
    `predictor_mode` keeps from answering there (its evaluation did not put it on by default, or `--predictor
    kernel`), else None."""
    gpu = device.split(":")[0]
    if predictor_mode() == "public":
        return None
    best: tuple[int, Path] | None = None
    for d, version, measured, public in _artifacts(root):
        if public and gpu in measured and gpu not in _public_devices(d, measured):
            if best is None or version > best[0]:
                best = (version, d)
    return best[1] if best else None


def _artifacts(root: Path):
    """Each `<device>@<n>` artifact directory of `root` with a `meta.json`, as (directory, n, the GPUs it was
    measured on, whether it is a public-data GraphSAGE): the one scan `newest_artifacts` and `held_back` share."""
    if not root.is_dir():
        return
    for d in sorted(root.iterdir()):  # ties (a@1 and a@01) resolve by name, not by the filesystem's order
        m = _ARTIFACT.match(d.name)
        if m and (d / "meta.json").is_file():
            yield d, int(m["version"]), (m["device"], *_also_measured_on(d)), _meta(d).get("schema") == PUBLIC_SCHEMA


def newest_artifacts(root: Path = CHECKPOINTS) -> dict[str, Path]:
    """Device key -> its newest `<device>@<n>` artifact directory (one with a `meta.json`), in one scan of `root`."""
    best: dict[str, tuple[int, Path]] = {}
    for d, version, keys, public in _artifacts(root):
        for key in _public_devices(d, keys) if public else keys:  # PREDICTOR_ENV
            if version > best.get(key, (-1, d))[0]:
                best[key] = (version, d)
    return {k: d for k, (_, d) in best.items()}


_METAS: dict[Path, tuple[tuple[int, int, int], dict]] = {}  # meta.json -> (its stat key, its object), `_meta`


def _meta(artifact: Path) -> dict:
    """An artifact's `meta.json` as an object ({} when it does not read as one), parsed again only when the file
    changes (its inode, size or modification time): a sweep predicts many points, and the public checkpoint's
    meta.json took a third of each point's prediction (7 of 22 ms for ResNet-18) when read every time. Read only."""
    path = artifact / "meta.json"
    try:
        st = path.stat()
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        hit = _METAS.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    meta = meta if isinstance(meta, dict) else {}
    _METAS[path] = (key, meta)
    return meta


def _also_measured_on(artifact: Path) -> list[str]:
    """The other GPUs an artifact's measurements came from (`devices` of a public-data predictor's meta.json)."""
    devices = _meta(artifact).get("devices")
    return [str(k) for k in devices if isinstance(k, str)] if isinstance(devices, list) else []


def _transfers(artifact: Path) -> bool:
    """Whether an artifact may be transferred to GPUs it was not measured on (a public-data residual predictor is
    not: no measurement on another GPU has tested that transfer)."""
    return _meta(artifact).get("schema") != PUBLIC_SCHEMA


def find_artifact(device: str, root: Path = CHECKPOINTS) -> Path | None:
    """The newest `<device>@<n>` artifact directory, or None."""
    return newest_artifacts(root).get(device)


def predictor_candidates(device: str, root: Path = CHECKPOINTS) -> Iterator[tuple[Path, str]]:
    """The trained predictors `predict` may use on `device`, best first, each with the device its measurements
    came from: the device's own newest artifact; then, to be transferred (`predict` scales it by the kernel
    model's ratio of the two devices), the newest artifact of each other GPU of the device table, GPUs of the same
    family of the kernel table first (H100 -> H200), in table order. Only artifacts whose `meta.json` reads and
    matches this code's feature layout count (`usable`); they are read as the caller asks for the next one."""
    artifacts = newest_artifacts(root)
    if not artifacts:
        return
    family = load_params().family
    whole = device.split(":")[0]  # a MIG slice: its GPU's measurements are its own
    others = [k for k in DEVICES if k != whole and k in artifacts]
    others.sort(key=lambda k: family(k) is None or family(k) != family(device))  # same family first (stable)
    if whole in artifacts:
        yield artifacts[whole], whole
    for key in others:
        if usable(artifacts[key]) and _transfers(artifacts[key]):
            yield artifacts[key], key


def usable(artifact: Path) -> bool:
    """Whether an artifact's `meta.json` reads as an object of this code's feature layout (a cheap check; loading
    the model may still fail)."""
    from passes.features import FEATURE_VERSION

    return _meta(artifact).get("feature_version") == FEATURE_VERSION


def first_loadable(device: str, root: Path = CHECKPOINTS) -> tuple[object | None, Path | None, str | None, list[str]]:
    """(the loaded predictor, its artifact, its device, warnings) of the first of `predictor_candidates` that
    loads; a candidate that does not (stale, corrupt) gives a warning and way to the next. (None, None, None,
    warnings) when none loads: the estimate answers. The training code (and torch_geometric) is imported only when
    there is a candidate to load."""
    candidates = list(predictor_candidates(device, root))
    if not candidates:
        return None, None, None, []
    from .train import ArtifactError

    warnings = []
    for candidate, key in candidates:
        try:
            return _load_cached(candidate), candidate, key, warnings
        except ArtifactError as exc:
            warnings.append(f"{exc}; using the next trained predictor or the kernel-model estimate instead")
    return None, None, None, warnings


def find_predictor(device: str, root: Path = CHECKPOINTS) -> tuple[Path | None, str | None]:
    """The first of `predictor_candidates` that is usable, and its device; (None, None) when there is none."""
    return next(((a, k) for a, k in predictor_candidates(device, root) if usable(a)), (None, None))


_LOADED: dict[tuple[Path, float], object] = {}


def _load_cached(directory: Path):
    """Load an artifact once per process (keyed by path and modification time)."""
    from .train import ArtifactError, load

    try:
        key = (directory, (directory / "model.pt").stat().st_mtime)
    except OSError as exc:
        raise ArtifactError(f"cannot load the predictor in {directory}: {exc.strerror}") from exc
    if key not in _LOADED:
        _LOADED[key] = load(directory)[0]
    return _LOADED[key]


def predictor_info(device_name: str, checkpoints: Path = CHECKPOINTS, name: str | None = None) -> dict:
    """What the predictor `name` (default: the one `predict` looks for on the device) is, and its evaluation
    figures (for reports). `name="roofline"` describes the roofline estimate."""
    device = get_device(device_name)
    if name == "roofline":
        artifact, source = None, None
    elif name is not None and _ARTIFACT.match(name) and (checkpoints / name / "meta.json").is_file():
        artifact, source = checkpoints / name, _ARTIFACT.match(name)["device"]
    else:
        _, artifact, source, _ = first_loadable(device.key, checkpoints)
    if artifact is None:
        return {
            "name": "roofline",
            "trained": False,
            "evaluation": None,
            "evaluation_table": None,
            "note": "estimate: the eager CUDA kernels of the graph, each timed by the kernel model (fitted on "
            "single-kernel measurements, public and our own H100 sweep; see docs/kernel-model.md), power from the "
            "kernels' compute/memory/"
            "idle shares fitted on ML.ENERGY measurements, memory as nvidia-smi counts it (context "
            "measured on our H100 + cuBLAS workspace + allocator reserve replayed on the trace; docs/memory.md); the "
            "latency interval is an assumption, not calibrated on whole-model measurements",
        }
    try:
        meta = json.loads((artifact / "meta.json").read_text())
    except (OSError, ValueError):  # it changed under us: describe the estimate
        return predictor_info(device_name, checkpoints, "roofline")
    table = artifact / "EVAL.md"
    note = (
        f"GraphSAGE trained on {meta.get('n_samples', '?')} measured configurations of "
        f"{len(meta.get('families', []))} families ({meta.get('created', '?')})"
    )
    return {
        "name": artifact.name,
        "trained": True,
        "measured_on": source,
        "evaluation": meta.get("evaluation"),
        "evaluation_table": str(table) if table.is_file() else None,
        "note": note,
    }


def _sample_from_analysis(analysis, device: str, arrays: dict) -> Sample:
    return Sample(
        key="",
        family="",
        device=device,
        y=np.full(3, math.nan),
        x=analysis.x,
        edge_index=analysis.edge_index,
        static=dict(analysis.static_features),
        ops=arrays,
        totals={},
    )


def roofline_memory_mib(
    param_bytes: int,
    peak_activation_bytes: int,
    device: Device | None = None,
    has_conv: bool = False,
    reserved: Reserved | None = None,
) -> tuple[float, float, float]:
    """The estimate's memory (low, point, high) in MiB, as nvidia-smi counts it on `device` (default: H100,
    the default device of `predict`) under the default runtime (module docstring); `reserved`: the caching
    allocator replayed on the graph's trace (`allocator_reserve`, what `predict` passes), else the fallback
    reserve factor."""
    m = estimate_memory(param_bytes, peak_activation_bytes, device or get_device("h100-80gb"), has_conv, reserved)
    low = m.tensor_peak_mib + m.context_mib + m.workspace_mib
    return low, m.total_mib, m.total_mib + 0.25 * m.activations_mib


def fit_memory_mib(
    param_bytes: int,
    peak_activation_bytes: int,
    device: Device,
    has_conv: bool = False,
    reserved: Reserved | None = None,
) -> float:
    """The memory (MiB) the MIG rule decides on: `roofline_memory_mib`'s upper bound with the least reserve the
    replayed loop runs in (`Reserved.least`: on a device with less memory than the loop keeps cached, the caching
    allocator gives its free segments back when a cudaMalloc fails and tries again); the same upper bound without a
    replay."""
    if reserved is not None and reserved.least is not None:
        reserved = reserved.at_least()
    return roofline_memory_mib(param_bytes, peak_activation_bytes, device, has_conv, reserved)[2]


def _released_note(m: float, m_hi: float, m_fit: float, device: Device) -> str:
    """The line saying that the memory a run needs is less than what the allocator keeps cached."""
    return (
        f"the caching allocator keeps freed blocks cached: with room it holds {m:,.0f} MiB on {device.key} (upper "
        f"bound {m_hi:,.0f}); where memory is short it gives its free segments back when a cudaMalloc fails and the "
        f"loop runs in less, upper bound {m_fit:,.0f} MiB (memory_fit_mib), which MIG fit is decided on"
    )


def estimate_memory(
    param_bytes: int,
    peak_activation_bytes: int,
    device: Device,
    has_conv: bool = False,
    reserved: Reserved | None = None,
):
    """`predictor.memory.GpuMemory` of a graph on `device` (a whole GPU or a MIG slice) under eager PyTorch
    (`predictor.memory.runtime_for`: the measured context, or the device file's); `reserved` is the caching
    allocator replayed on the graph's trace (`allocator_reserve`), else the fallback reserve factor."""
    return gpu_memory(
        param_bytes,
        peak_activation_bytes,
        sms=device.sms,
        hopper=get_params_family(device.key) == "hopper",
        has_conv=has_conv,
        runtime=runtime_for(device),
        reserved=reserved,
    )


def allocator_reserve(analysis, warnings: list[str] | None = None, rooms: Sequence[int] = ()) -> Reserved | None:
    """The caching allocator replayed on `analysis`'s weights and allocation trace (`predictor.memory`); None when
    the analysis carries no trace, or one that cannot be replayed (`replay_reserve`: a line joins `warnings`).
    With layers extrapolated from 2 (`analysis.repeat`) the trace is the 2-layer graph's (what later identical
    layers allocate reuses the same cached blocks) and the weights are every layer's
    (`passes.memory.repeat_weight_sizes`); where those are not known, the missing bytes are one tensor.
    Recurrences extrapolated in their step count (`analysis.steps`) keep the factor: their trace is a shorter
    sample's."""
    if getattr(analysis, "steps", None) is not None:
        return None
    return replay_reserve(getattr(analysis, "memory", None), analysis.totals.param_bytes, warnings, rooms=rooms)


def allocator_rooms(device: Device, has_conv: bool = False) -> list[int]:
    """The bytes the caching allocator has on each target the MIG rule decides on for `device` (the GPU and its
    profiles, or the one slice it names): usable memory less the CUDA context and the library workspace; the rooms
    `memory.least_reserved` checks its answer at."""
    m = estimate_memory(0, 0, device, has_conv)
    usable = [device.memory_mib, *(p.memory_mib for p in device.mig)]
    return [int((u - m.context_mib - m.workspace_mib) * MIB) for u in usable if u > m.context_mib + m.workspace_mib]


def replay_reserve(
    memory, param_bytes: int, warnings: list[str] | None = None, rooms: Sequence[int] = ()
) -> Reserved | None:
    """`allocator_reserve` of a `passes.memory.MemoryProfile` (its `blocks` and `weight_sizes`) and the model's
    `param_bytes` (the bytes `weight_sizes` misses are one more tensor); None when the profile has no trace, or
    when its trace is one no eager loop produces (`memory.AllocationTraceError`: a storage born after the last op
    or freed before it is born, a fault of the liveness pass): then the memory is costed as without a trace, by
    the fitted reserve factor, and a line saying so joins `warnings` (when given). `rooms`: the allocator's bytes on
    the targets a fit decision will rest on (`allocator_rooms`), where the least reserve is checked to run."""
    blocks = getattr(memory, "blocks", ())
    if not blocks:
        return None
    sizes = list(memory.weight_sizes)
    missing = param_bytes - sum(sizes)
    if missing > 0:
        sizes.append(missing)
    try:
        n_ops = len(memory.timeline) or None
        r = simulate_reserved(sizes, blocks, n_ops=n_ops)
        return replace(r, least=least_reserved(sizes, blocks, total=r.total, check=rooms, n_ops=n_ops))
    except AllocationTraceError as exc:
        if warnings is not None:
            warnings.append(
                f"the allocation trace cannot be replayed through the caching allocator ({exc}): the memory uses "
                "the fitted reserve factor, as for a graph without a trace"
            )
        return None


def get_params_family(device_key: str) -> str | None:
    """The kernel table's family of a device ("ampere", "hopper"), None when it has none."""
    return load_params().family(device_key)


@dataclass(frozen=True)
class Prediction:
    """What preflight predicts for one model on one device (the `prediction` block of the report).

    Latency in milliseconds, energy in joules per inference, memory in MiB (2**20 bytes; the JSON keys keep
    the schema's `memory_mb` names, which have always held MiB). Each `*_interval` is (low, high).
    """

    device: str
    predictor: str  # "name@version" of a trained predictor, or "roofline"
    latency_ms: float
    latency_ms_interval: tuple[float, float]
    energy_j: float
    energy_j_interval: tuple[float, float]
    memory_mib: float
    memory_mib_interval: tuple[float, float]
    roofline_latency_ms: float  # the roofline bound on the whole GPU
    mig: MigRecommendation
    runtime: dict = field(default_factory=dict)  # what the prediction assumes runs the model (`runtime_of`)
    #: What the numbers rest on: "whole_model" "measured" (a predictor trained on this GPU's whole-model
    #: measurements), "transferred" (trained on `whole_model_device`'s, scaled by the kernel model's ratio) or
    #: "none" (the kernel-model estimate); "kernel_time_share": the share of the kernel model's time whose
    #: parameters were fitted on this GPU's single-kernel measurements, on other GPUs', calibrated to one figure,
    #: or assumed (`kernel_model.BASES`); "kernel_measured_on": the GPUs those fits measured; "whole_model_note"
    #: (kernel-model estimate only): why no trained predictor answers (none for this GPU, one held back by its
    #: evaluation, `--predictor kernel`).
    basis: dict = field(default_factory=dict)
    #: Weights + peak live activations (MiB) as preflight's liveness pass finds them, beside `memory_mib` (what
    #: nvidia-smi would count: + context, workspace and the allocator's reserve), with either predictor.
    memory_tensor_peak_mib: float | None = None
    #: The memory the MIG rule and the largest batch decide on (MiB): the upper bound of what the model runs in where
    #: memory is short, the caching allocator giving its free segments back when a cudaMalloc fails
    #: (`memory.least_reserved`); `memory_mib_interval`'s top where that gives nothing back or a trained predictor
    #: predicted the memory. None: the same as that top (a Prediction built without it).
    memory_fit_mib: float | None = None
    #: Average board power (W) of the estimate and the busy shares it rests on ({"compute", "memory", "gap"}: the
    #: kernels' time compute-bound, memory-bound and at the launch floor, `power.busy_shares`); None with a trained
    #: predictor (its energy is predicted directly).
    power_w: float | None = None
    power_shares: dict | None = None
    #: The same time as `power_w` prices it ({"compute", "memory", "compute_fp32", "gap"}, summing to 1): where the
    #: GPU's power figures have `compute_fp32_w`, compute-bound float32 kernels' time at the roofline's peak rate is
    #: `compute_fp32` and the rest of their time is `gap` (`power.shares_from_classes`); elsewhere `compute_fp32` is
    #: 0 and the rest is `power_shares`. power_w = min(limit_w, gap_w x gap + compute_w x compute + memory_w x memory
    #: + compute_fp32_w x compute_fp32), the watts from predictor/power_params.json. None with a trained predictor.
    power_split: dict | None = None

    @property
    def fit_mib(self) -> float:
        """`memory_fit_mib`, else the top of `memory_mib_interval`: the memory the MIG rule takes (MiB)."""
        return self.memory_mib_interval[1] if self.memory_fit_mib is None else self.memory_fit_mib

    def to_json(self) -> dict:
        """The `prediction` block of `preflight.report/1`."""
        return (
            {
                "device": self.device,
                "predictor": self.predictor,
                "latency_ms": self.latency_ms,
                "latency_ms_interval": list(self.latency_ms_interval),
                "energy_j": self.energy_j,
                "energy_j_interval": list(self.energy_j_interval),
                "memory_mib": self.memory_mib,
                "memory_mib_interval": list(self.memory_mib_interval),
                # deprecated: the same MiB under the old name, kept through preflight.report/1 (schema description)
                "memory_mb": self.memory_mib,
                "memory_mb_interval": list(self.memory_mib_interval),
                "roofline_latency_ms": self.roofline_latency_ms,
                "mig": self.mig.to_json(),
                "runtime": dict(self.runtime),
                "basis": dict(self.basis),
            }
            | ({} if self.memory_tensor_peak_mib is None else {"memory_tensor_peak_mib": self.memory_tensor_peak_mib})
            | {"memory_fit_mib": self.fit_mib}
            | ({} if self.power_w is None else {"power_w": self.power_w, "power_shares": dict(self.power_shares)})
            | ({} if self.power_split is None else {"power_split": dict(self.power_split)})
        )


def runtime_of(
    ops, matmul_precision: str = DEFAULT_MATMUL_PRECISION, host_overhead: float = DEFAULT_HOST_OVERHEAD
) -> dict:
    """What a prediction assumes executes the model: eager PyTorch on CUDA, `torch.backends.cudnn.allow_tf32` True
    (torch's default: float32 convolutions on TF32 tensor cores) and float32 matmuls as
    `torch.set_float32_matmul_precision(matmul_precision)` runs them ("highest", torch's default: FP32 CUDA cores,
    `tf32_matmul` False; "high" or "medium": TF32 tensor cores, `tf32_matmul` True), in the dtype most of the
    graph's multiply-add ops (else its ops) compute in ("int8" for int8 or uint8 operands: a quantized model).
    The matmul setting changes float32 matmuls only: a float16/bfloat16 graph's numbers do not move.
    `host_overhead`: the host's dispatch time per kernel as a multiple of the kernel model's fitted launch floor
    (1.0: the host the floor was fitted on; `predict`)."""
    live = [c for c in ops if not c.folded and c.outputs]
    heavy = [c for c in live if c.category in ("conv", "matmul", "attention")] or live
    dtypes = Counter("int8" if d in INT8_DTYPES else d for d in map(compute_dtype, heavy))
    return {
        "framework": "pytorch-eager-cuda",
        "dtype": dtypes.most_common(1)[0][0] if dtypes else "float32",
        "tf32_conv": True,
        "tf32_matmul": tf32_matmul_of(matmul_precision),
        "matmul_precision": matmul_precision,
        "host_overhead": float(host_overhead),
    }


def tf32_matmul_of_prediction(prediction: Prediction) -> bool:
    """Whether `prediction` was made with float32 matmuls on TF32 tensor cores (its `runtime` block)."""
    return bool(prediction.runtime.get("tf32_matmul", False))


def host_overhead_of_prediction(prediction: Prediction) -> float:
    """The host-overhead factor `prediction` was made with (its `runtime` block; 1.0 when absent)."""
    return float(prediction.runtime.get("host_overhead", DEFAULT_HOST_OVERHEAD))


def host_times(times: KernelTimes, host_overhead: float = DEFAULT_HOST_OVERHEAD) -> KernelTimes:
    """`times` on a host that dispatches each kernel `host_overhead` times as long as the kernel model's fitted
    launch floor: `launch_s` (s per kernel, (N,)) times `host_overhead`, the execution terms unchanged (a kernel a
    library call launches on the device has `launch_s` 0 and stays so). `times` itself at 1.0."""
    if host_overhead == DEFAULT_HOST_OVERHEAD:
        return times
    return replace(times, launch_s=times.launch_s * host_overhead)


@dataclass(frozen=True)
class HostFit:
    """The host factor that makes the kernel model's eager latency equal a measured one (`solve_host_overhead`).

    `host_overhead`: the factor (`--host-overhead`); `gpu_ms`: the kernels' execution alone (the latency as the
    factor goes to 0); `floor_ms`: the launch floor at factor 1, summed over every kernel; `default_ms`: the eager
    latency at factor 1, what the kernel model predicts without the calibration, `default_floor_ms` the part of it
    at the launch floor (all ms); `host_share`: the part of the measured time the host's dispatch sets at the
    solution (the kernels at their floor), 0 to 1."""

    measured_ms: float
    host_overhead: float
    gpu_ms: float
    floor_ms: float
    default_ms: float
    host_share: float
    default_floor_ms: float = 0.0

    @property
    def determined(self) -> bool:
        """Whether the host sets at least half the measured time: below that the measurement says little about the
        host (a 10% error in the kernels' execution moves the factor far)."""
        return self.host_share >= 0.5


def check_measured_ms(value) -> float:
    """`value` as a measured latency in milliseconds: a real number (not a bool), finite and positive; ValueError
    otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < float(value) < math.inf:
        raise ValueError(f"the measured latency must be a positive number of milliseconds (got {value!r})")
    return float(value)


def solve_host_overhead(times: KernelTimes, measured_ms: float) -> HostFit:
    """The factor h for which sum_i max(execution_i, h x launch_i), the eager latency `host_times(times, h)` gives,
    equals `measured_ms` (> 0): exact, by the sorted breakpoints execution_i / launch_i of that piecewise-linear,
    non-decreasing function of h. `times`: the kernel model's times of one graph at host factor 1 ((N,) arrays).

    ValueError when no positive factor gives the measurement: it is at most the kernels' execution alone (the
    kernel model is slower than the run, whatever the host) or the graph launches nothing from the host."""
    measured_ms = check_measured_ms(measured_ms)
    execution = np.maximum(times.compute_s, times.memory_s) * 1e3
    launch = times.launch_s * 1e3
    if not (np.isfinite(execution).all() and np.isfinite(launch).all()):
        raise ValueError("the kernel model gave a time that is not finite: no host factor can be solved")
    gpu_ms = float(execution.sum())
    floor_ms = float(launch.sum())
    if floor_ms <= 0:
        raise ValueError("the graph has no kernel the host launches: no host factor applies")
    if measured_ms <= gpu_ms:
        raise ValueError(
            f"the measurement ({measured_ms:.4g} ms) is not above the kernels' predicted execution alone "
            f"({gpu_ms:.4g} ms): no host factor explains it (the kernel model is slower than this run)"
        )
    hosted = launch > 0
    ratio = execution[hosted] / launch[hosted]  # h at which each kernel's floor reaches its execution
    order = np.argsort(ratio, kind="stable")
    ratio, lau, exe = ratio[order], launch[hosted][order], execution[hosted][order]
    rest = float(execution[~hosted].sum())  # kernels with no host launch (inside a library call): execution only
    # at h in [ratio[k-1], ratio[k]]: kernels 0..k-1 at their floor, f(h) = h x sum(lau[:k]) + sum(exe[k:]) + rest
    at_floor = np.concatenate([[0.0], np.cumsum(lau)])
    above = rest + np.concatenate([[0.0], np.cumsum(exe[::-1])])[::-1]
    # f at each breakpoint; the first at or above the measurement ends the segment that holds it (never the first:
    # f(ratio[0]) is the execution alone); none: beyond the last breakpoint, every kernel at its floor (k = n)
    # (at least 1: a measurement within rounding of the execution alone would otherwise land on the empty segment)
    k = max(int(np.searchsorted(ratio * at_floor[1:] + above[1:], measured_ms, side="left")), 1)
    h = max((measured_ms - above[k]) / at_floor[k], 0.0)
    share = float(h * at_floor[k] / measured_ms)
    return HostFit(float(measured_ms), float(h), gpu_ms, floor_ms, times.eager_ms, share, times.floor_ms)


def whole_gpu_for_calibration(device_name: str) -> Device:
    """The device a host calibration runs on; ValueError for a MIG slice (the host is the same on every slice)."""
    device = get_device(device_name)
    if device.parent is not None:
        raise ValueError(
            f"{device.key} is a MIG slice: calibrate the host on the whole GPU ({device.parent}); the factor is the "
            "host's and applies on every slice"
        )
    return device


def calibrate_host(
    analysis, device_name: str, measured_ms: float, matmul_precision: str = DEFAULT_MATMUL_PRECISION
) -> HostFit:
    """The host factor (`--host-overhead`) at which the kernel model's eager latency of `analysis` on the whole GPU
    `device_name` equals `measured_ms`, a forward the user timed on their machine (`solve_host_overhead`). The
    factor is the host's: calibrated on one model, it applies to the others on that machine.

    ValueError for a MIG slice (calibrate on the whole GPU: the host is the same on every slice), an unknown
    device or matmul precision, or a measurement no factor explains (`solve_host_overhead`)."""
    device = whole_gpu_for_calibration(device_name)
    tf32 = tf32_matmul_of(matmul_precision)
    launched = getattr(analysis, "launched_kernels", analysis.kernels)  # as `predict` costs them
    return solve_host_overhead(kernel_latency_arrays(kernel_arrays(launched), device, tf32_matmul=tf32), measured_ms)


def predict(
    analysis,
    device_name: str,
    *,
    latency_slo_ms: float | None = None,
    max_slowdown: float | None = None,
    checkpoints: Path = CHECKPOINTS,
    matmul_precision: str = DEFAULT_MATMUL_PRECISION,
    host_overhead: float = DEFAULT_HOST_OVERHEAD,
) -> tuple[Prediction, list[str]]:
    """The prediction for `analysis` on `device_name`, and warnings to show the user.

    `latency_slo_ms` and `max_slowdown` go to the MIG recommender (`predictor.mig.recommend`).
    `matmul_precision`: `torch.set_float32_matmul_precision`'s setting the model runs under ("highest", torch's
    default; "high" or "medium": float32 matmuls on TF32 tensor cores, `kernel_model.MATMUL_PRECISIONS`);
    ValueError for another value. An allocation trace the caching allocator cannot replay (a liveness fault) costs
    the memory by the fitted reserve factor, as a graph without a trace, with a warning (`replay_reserve`).
    `host_overhead`: the host's dispatch time per kernel as a multiple of the kernel model's fitted launch floor
    (> 0; 1.0, the default, is the host the floor was fitted on; 2.35 a host like MIGProfiler's, docs/devices.md):
    every kernel's `launch_s` is multiplied by it (`host_times`) wherever the kernel model's times enter, so the
    whole GPU's latency (sum of max(execution, launch)), each MIG slice's (`predictor.mig.slice_latencies`: the
    queued host issue), the interval's low end, the busy shares and so the power and energy (latency x power) all
    see the same host. A trained predictor learned the hosts it was measured on and takes no host factor: at a
    factor other than 1.0 the kernel-model estimate answers, with a warning. ValueError for a factor that is not
    positive and finite (`analyzer.options.check_host_overhead` says it to users).
    """
    if not is_host_overhead(host_overhead):
        raise ValueError(f"host_overhead must be a positive finite number (got {host_overhead!r})")
    tf32 = tf32_matmul_of(matmul_precision)
    device = get_device(device_name)
    warnings: list[str] = []
    launched = getattr(analysis, "launched_kernels", analysis.kernels)  # layers 3..n repeated when extrapolated
    karrays = kernel_arrays(launched)

    def costed(dev: Device, mig_profile=None) -> KernelTimes:
        """The kernel model's times of the graph on `dev` (a MIG profile's share of it) on the user's host."""
        return host_times(kernel_latency_arrays(karrays, dev, mig_profile, tf32_matmul=tf32), host_overhead)

    whole = costed(device)
    bound = whole.bound_ms
    parent = profile = parent_times = parent_ms = None
    if device.parent is not None:  # a MIG slice as the target: its GPU's latency plus the slice's extra time
        parent = get_device(device.parent)
        profile = parent.profile(device.slice_profile)
        parent_times = costed(parent)
        parent_ms = parent_times.eager_ms  # the whole GPU's predicted latency (a transferred predictor's below)

    def on_slice(full_ms: float) -> float:
        """A whole-GPU latency (ms) of `parent` on the target slice (`predictor.mig.slice_latencies`; the host
        factor is already in both times' `launch_s`)."""
        return slice_latencies(full_ms, parent_times, {profile.name: whole})[profile.name]

    trained, artifact, source, skipped = first_loadable(device.key, checkpoints)
    warnings += skipped
    loaded = artifact.name if trained is not None else None  # (one set aside below says why in a warning)
    if trained is not None and host_overhead != DEFAULT_HOST_OVERHEAD:
        warnings.append(
            f"host overhead {host_overhead:g}: the trained predictor {artifact.name} learned the hosts it was measured "
            "on and takes no host factor: the kernel-model estimate is used instead"
        )
        trained = None
    if trained is not None and getattr(analysis, "repeat", None) is not None:
        trained = None  # it reads the op graph, which holds 2 of the layers: the kernel model costs all of them
        warnings.append(
            f"the trained predictor for {device.key} reads the operator graph, which holds 2 of the "
            f"{analysis.repeat.layers} extrapolated layers: the kernel-model estimate is used instead"
        )
    if trained is not None and getattr(analysis, "steps", None) is not None:
        trained = None  # the op graph holds a few of the steps: the kernel model costs all of them
        warnings.append(
            f"the trained predictor for {device.key} reads the operator graph, which holds {analysis.steps.sampled[-1]}"
            f" of the {analysis.steps.steps:,} extrapolated recurrence steps: the kernel-model estimate is used instead"
        )
    residual = None  # a GraphSAGE trained on public measurements, correcting the kernel model (predictor.public_train)
    if trained is not None and getattr(trained, "kind", None) == "residual":
        residual, trained = trained, None
    power, power_shares, power_split = None, None, None
    tensor_peak = (analysis.totals.param_bytes + analysis.totals.peak_activation_bytes) / 2**20
    note = None  # how the kernel-model estimate came to answer (`basis["whole_model_note"]`)
    if trained is not None:
        from .train import prepare

        arrays = op_arrays(analysis.ops)
        q = trained.predict_prepared([prepare(_sample_from_analysis(analysis, source, arrays), trained.variant)])[0]
        (lat_lo, lat, lat_hi), (e_lo, e, e_hi), (m_lo, m, m_hi) = (tuple(float(v) for v in q[t]) for t in range(3))
        m_fit = m_hi  # the trained predictor's memory: no allocator replay to give segments back
        name = artifact.name
        if source != device.key:  # measured on another GPU (or a slice's whole GPU): scale to the target
            src = get_device(source)
            src_ms = costed(src).eager_ms
            to_ms = whole.eager_ms if parent is None else parent_times.eager_ms  # the kernel model's ratio of GPUs
            r = to_ms / src_ms if src_ms > 0 else 1.0
            if parent is not None:  # then the GPU's latency on the slice; the interval and energy by the same factor
                parent_ms = lat * r
                r = on_slice(parent_ms) / lat if lat > 0 else r
            lat_lo, lat, lat_hi = lat_lo * r, lat * r, lat_hi * r
            power = device.tdp_w / src.tdp_w
            e_lo, e, e_hi = e_lo * r * power, e * r * power, e_hi * r * power
            warnings.append(
                f"no whole-model measurements on {device.key}: {name} (measured on {source}) transferred by the "
                f"kernel model's latency ratio {r:.3g}"
                + ("" if parent is None else " (its whole GPU's plus the slice's extra time, mig.slice_latencies)")
                + f" and TDP ratio {power:.3g}; the transfer's error is not measured"
            )
        if tf32:
            warnings.append(
                f"matmul precision {matmul_precision!r}: {name} does not take it as an input (only the MIG slices "
                "and any transfer between GPUs see TF32 matmuls)"
            )
    else:
        lat = whole.eager_ms if parent is None else on_slice(parent_times.eager_ms)
        lat_lo, lat_hi = min(estimate_low_ms(whole), lat), ESTIMATE_HIGH * lat
        pw = power_params(device.key)
        busy_s = float(whole.eager_s.sum())
        # the busy split, once: the kernels' time compute-bound, memory-bound and at the launch floor
        if pw.compute_fp32_w is None:
            s_c, s_m, s_gap = busy_shares(whole.compute_s, whole.memory_s, whole.launch_s)
            priced = (s_c, s_m, 0.0)
        else:  # compute-bound float32 kernels at their own power (`power.shares_from_classes`)
            classes = kernel_classes(karrays, whole, device, tf32_matmul=tf32)
            priced = shares_from_classes(classes, busy_s)
            s_c, s_m, _ = shares_from_classes(classes, busy_s, "none")  # = busy_shares, from the same classes
            s_gap = max(0.0, 1.0 - s_c - s_m) if busy_s > 0 else 0.0
        power = pw.power_w(*priced)
        power_split = {
            "compute": max(0.0, priced[0]),  # max: a float32-only model's compute - float32 may round below 0
            "memory": priced[1],
            "compute_fp32": priced[2],
            "gap": max(0.0, 1.0 - sum(priced)) if busy_s > 0 else 1.0,
        }
        p_lo, p_hi = pw.interval_w(power)
        e, e_lo, e_hi = lat / 1e3 * power, lat_lo / 1e3 * p_lo, lat_hi / 1e3 * p_hi
        power_shares = {"compute": round(s_c, 4), "memory": round(s_m, 4), "gap": round(s_gap, 4)}
        has_conv = any(k.kind == "conv" for k in launched)
        reserved = allocator_reserve(analysis, warnings, rooms=allocator_rooms(device, has_conv))
        m_lo, m, m_hi = roofline_memory_mib(
            analysis.totals.param_bytes, analysis.totals.peak_activation_bytes, device, has_conv, reserved
        )
        m_fit = fit_memory_mib(analysis.totals.param_bytes, analysis.totals.peak_activation_bytes, device, has_conv,
                               reserved)  # fmt: skip
        name = "roofline"
        fallback = None
        if residual is not None:
            from .public_train import precision_of, predict_analysis

            precision = precision_of(runtime_of(analysis.ops, matmul_precision), analysis.ops)
            q, dist, _ = predict_analysis(residual, analysis, device.key, precision)
            if dist <= residual.ood_threshold:
                lat_lo, lat, lat_hi = (float(v) for v in q)
                e, e_lo, e_hi = lat / 1e3 * power, lat_lo / 1e3 * p_lo, lat_hi / 1e3 * p_hi
                name = artifact.name
                if parent is not None:  # it predicts the slice as a device of its own (it was trained on slices):
                    # the slowdown is against its own prediction of the whole GPU, not the kernel model's
                    parent_ms = float(predict_analysis(residual, analysis, parent.key, precision)[0][1])
            else:
                fallback = (
                    f"out of distribution: the graph is {dist:.2f} from the nearest training graph of {artifact.name}, "
                    f"beyond its threshold {residual.ood_threshold:.2f}: kernel-model estimate"
                )
        if name == "roofline":
            kept = None if fallback else held_back(device.key, checkpoints)
            if fallback:
                why = f"{artifact.name}: {fallback}"
            elif kept is not None and predictor_mode() == "kernel":
                why = f"--predictor kernel: {kept.name} not used on {device.key}: kernel-model estimate"
            elif kept is not None:
                why = (
                    f"kernel-model estimate: the GraphSAGE trained on whole-model measurements (checkpoint "
                    f"{kept.name}) is not the default on {device.key}, its held-out evaluation (EVAL.md) did not pass "
                    "the default rule (`preflight --predictor public predict ...` uses it)"
                )
            elif loaded is not None:
                why = (
                    f"the trained predictor {loaded} is not used for this analysis (a warning says why): kernel-model "
                    "estimate"
                )
            else:
                why = f"no trained predictor for {device.key}: kernel-model estimate"
            why += "; its interval is assumed, not calibrated on whole-model measurements"
            # out of distribution is about this model (a warning); the rest is how preflight is set up, said once in
            # the prediction's basis ("rests on"), not as a warning on every run
            if fallback:
                warnings.append(why)
            else:
                note = why
    if parent is not None:  # a MIG slice as the target: does the model fit it, and how it compares
        target, slices, full_ms = replace(parent, mig=(profile,)), {profile.name: lat}, parent_ms
    else:
        # each slice: the whole GPU's latency `lat` (the estimate's or a trained predictor's) plus the extra time the
        # asynchronously issued kernels take on the slice's share of SMs and bandwidth (`mig.slice_latencies`)
        target, full_ms = device, lat
        slices = slice_latencies(lat, whole, {p.name: costed(device, p) for p in device.mig})

    def decide(memory_high: float) -> MigRecommendation:
        return recommend(
            target,
            memory_high,
            latency_ms_by_profile=slices,
            latency_slo_ms=latency_slo_ms,
            full_gpu_latency_ms=full_ms,
            max_slowdown=max_slowdown,
            # (below the interval's top: the allocator gives its cached blocks back where memory is short)
            bound="predicted upper bound"
            if memory_high >= m_hi
            else "upper bound of what it runs in (cached blocks given back):",
        )

    rec = decide(m_fit)
    if m_fit < m_hi and (
        decide(m_hi).profile != rec.profile or fits(device.memory_mib, m_hi) != fits(device.memory_mib, m_fit)
    ):  # the allocator's giving back changes the answer: say why
        warnings.append(_released_note(m, m_hi, m_fit, device))
    if min(m, m_fit) > device.memory_mib:  # the prediction stands, but the run it describes would not happen
        what = "MIG slice" if parent is not None else "GPU"
        warnings.append(
            f"does not fit: the predicted device memory, {m:,.0f} MiB, exceeds the {device.memory_mib:,.0f} MiB of the "
            f"{what} {device.key}; eager PyTorch would fail with CUDA out of memory at these input sizes (a smaller "
            "batch, 16-bit weights or a larger GPU; `preflight report` solves the largest batch that fits)"
        )
    prediction = Prediction(
        device=device.key,
        predictor=name,
        latency_ms=lat,
        latency_ms_interval=(lat_lo, lat_hi),
        energy_j=e,
        energy_j_interval=(e_lo, e_hi),
        memory_mib=m,
        memory_mib_interval=(m_lo, m_hi),
        memory_fit_mib=m_fit,
        roofline_latency_ms=bound,
        mig=rec,
        runtime=runtime_of(analysis.ops, matmul_precision, host_overhead),
        basis=_basis(karrays, device, whole, None if trained is None else source, tf32)
        | (_public_basis(residual, device, name != "roofline", fallback) if residual is not None else {})
        | ({"whole_model_note": note} if note else {}),
        memory_tensor_peak_mib=tensor_peak,
        power_w=power,
        power_shares=power_shares,
        power_split=power_split,
    )
    return prediction, warnings


def _public_basis(residual, device: Device, used: bool, fallback: str | None) -> dict:
    """The `basis` entries of a prediction by the GraphSAGE trained on public measurements (`predictor.public_train`):
    what it was trained on, and why it was not used (out of distribution)."""
    info = residual.info
    doc = {
        "whole_model_training": f"{info.get('training_data', 'public measurements')}; "
        f"{len(info.get('families', []))} families, {info.get('n_rows', '?')} rows in all"
    }
    if used:
        doc |= {"whole_model": "measured", "whole_model_device": device.key}
    else:
        doc["whole_model_fallback"] = fallback
    return doc


def _basis(karrays, device: Device, whole: KernelTimes, source: str | None, tf32_matmul: bool = False) -> dict:
    """The `basis` block of a prediction (`Prediction.basis`)."""
    table = load_params()
    measured_on = set()
    for kind, dtype, _ in karrays.groups:
        entry = table.lookup(device.key, kind, param_dtype(kind, dtype, tf32_matmul))
        if entry.basis(device.key).startswith("fitted"):
            measured_on.update(entry.measured_on)
    return {
        "whole_model": "none" if source is None else "measured" if source == device.key else "transferred",
        "whole_model_device": source,
        "kernel_time_share": {
            k: round(v, 4) for k, v in kernel_basis(karrays, device, whole, table, tf32_matmul=tf32_matmul).items()
        },
        "kernel_measured_on": sorted(measured_on),
    }


#: What bounds an op's kernels, strongest first: any compute-bound kernel (roofline terms) makes the op compute-bound;
#: else any kernel whose execution is over its launch floor, memory-bound; else every kernel sits at the floor
#: ("launch": the host's dispatch, not the GPU, sets its time); "none": the op launches no kernel (a view, folded)
OP_BOUNDS = ("compute", "memory", "launch", "none")


def _split_weights(kernel, ops: dict, device, tf32: bool) -> list[float]:
    """The shares (summing to 1) of `kernel`'s time that go to each op it covers (`kernel.ops`; `ops`: index ->
    OpCost): proportional to the op's own roofline time on `device`, max(FLOPs / `roofline.peak_rate` of its
    category in the kernel's dtype, (bytes read + written) / bandwidth); even when every op's is 0 or an op is not in
    `ops`."""
    n = len(kernel.ops)
    if n <= 1:
        return [1.0] * n
    costs = [ops.get(i) for i in kernel.ops]
    if any(c is None for c in costs):
        return [1.0 / n] * n
    t = [
        max(c.flops / peak_rate(device, c.category, kernel.dtype, tf32_matmul=tf32),
            (c.bytes_read + c.bytes_written) / device.bandwidth)
        for c in costs
    ]  # fmt: skip
    total = sum(t)
    return [x / total for x in t] if total > 0 else [1.0 / n] * n


def op_times_ms(analysis, prediction: Prediction) -> dict[int, tuple[float, str]]:
    """A prediction's latency apportioned over the live Relax ops: op index -> (ms, what bounds it: `OP_BOUNDS`).

    Each kernel's modelled time goes to the ops it covers; one that covers several (a GEMM with its bias add, a fused
    attention) splits its time in proportion to each op's own roofline time on the device, max(FLOPs / peak of the
    kernel's dtype, bytes read and written / bandwidth) (`_split_weights`: a bias add gets a sliver of its GEMM's
    time, not half), evenly when every op's is 0; views and folded ops get 0. With the estimate the shares add up
    to its latency exactly; a trained predictor's latency (it predicts the graph, not each op) is spread the same
    way. With layers extrapolated (`Analysis.repeat`) the listed ops (2 of n layers) get their own share of the
    n-layer latency.
    """
    tf32, host = tf32_matmul_of_prediction(prediction), host_overhead_of_prediction(prediction)
    device = get_device(prediction.device)
    times = host_times(kernel_latency_arrays(kernel_arrays(analysis.kernels), device, tf32_matmul=tf32), host)
    per_op: dict[int, float] = {}
    bound: dict[int, str] = {}
    ops = {c.index: c for c in analysis.ops}
    at_floor = times.launch_s >= np.maximum(times.compute_s, times.memory_s)
    for kern, sec, cb, fl in zip(analysis.kernels, times.eager_s, times.compute_bound, at_floor, strict=True):
        what = "compute" if cb else "launch" if fl else "memory"
        for i, w in zip(kern.ops, _split_weights(kern, ops, device, tf32), strict=True):
            per_op[i] = per_op.get(i, 0.0) + sec * w
            bound[i] = min(bound.get(i, "none"), what, key=OP_BOUNDS.index)
    total = sum(per_op.values())
    if getattr(analysis, "repeat", None) is not None or getattr(analysis, "steps", None) is not None:
        # the listed ops are 2 of n layers (a few of T steps): scale by all of them
        launched = kernel_latency_arrays(kernel_arrays(analysis.launched_kernels), device, tf32_matmul=tf32)
        total = float(host_times(launched, host).eager_s.sum())
    scale = prediction.latency_ms / (total * 1e3) if total > 0 else 0.0
    return {
        c.index: (per_op.get(c.index, 0.0) * 1e3 * scale, bound.get(c.index, "none"))
        for c in analysis.ops
        if not c.folded
    }
