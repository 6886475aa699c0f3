"""Per-kernel time model: what eager PyTorch's kernels take on a GPU, with the roofline bound beside it.

For each kernel of the kernel view (`passes.kernels.Kernel`, or any object with `kind`, `flops`, `bytes_read`,
`bytes_written`, `dtype` and `params`):

    time = max(FLOPs / (peak x e_c), bytes / (bandwidth x e_m)) + exec + launch

- `peak` is `predictor.roofline.peak_rate` for the kernel's kind and dtype (gemm and attention in float32 on
  CUDA cores, float32 conv on TF32 tensor cores, float16/bfloat16 gemm/conv/attention on tensor cores,
  everything else at the fp32 CUDA-core rate), times the MIG slice's share of SMs; `bandwidth` is the
  datasheet bandwidth times the slice's share of memory slices (`roofline.shares`).
- `tf32_matmul` (keyword of `kernel_latency`, `kernel_latency_arrays`, `latency_bound_ms`, `kernel_basis`;
  default False, torch's default): float32 gemm kernels (matmul, linear, bmm, and the math-fallback attention's
  two products) run on TF32 tensor cores, as under `torch.set_float32_matmul_precision("high")`: the TF32 peak,
  and the table's entry of dtype "tf32" (`TF32`, `param_dtype`). Fused float32 attention does not move (torch's
  memory-efficient kernel computes float32 in 3xTF32 whatever the flag says; `roofline` docstring).
- `e_m` = `e_memory`, a constant per (device family, kind, dtype).
- `ridge` (default 0): the execution is max(compute, memory) with `ridge` 0, and the p-norm
  (compute^(1/r) + memory^(1/r))^r with r = `ridge` > 0 (`overlap_terms`; 1: their sum): near the ridge a
  GEMM's operand traffic is not wholly hidden behind its math. Fitted on GEMM kernel durations only.
- `e_c` = min(1, `e_compute` x q x k / (k + `k0`)) for gemm-like kinds (gemm, conv, attention), `e_compute`
  for the others. A gemm-like kernel is seen as `b` independent products of an (m x k) by (k x n) matrix:
  - gemm: the contract's `b, m, n, k`;
  - conv: implicit GEMM, m = batch x output pixels, n = output channels, k = input channels per group x
    kernel window (b = 1; a depthwise conv has k = the window, so it is inefficient at compute and
    memory-bound, as it is on a GPU);
  - attention (flash / memory-efficient): b = batch x heads work units of `s` query rows, tiles of 128
    query rows x the whole head (tiles `[[128, 1]]`, n = 1), depth k = keys `t`. A decode step (`s` = 1, one
    query row per head) has no tile shape: the fused backends' decode paths split the keys over the SMs
    (flash-decoding) and pack the single row into one tensor-core tile, so a 128-row tile would charge it 128x
    the work it does; at <= (query heads / KV heads) FLOP per byte it is memory-bound on every GPU (ridge
    >= 100 FLOP/byte), which the H100 sweep's 64 decode records torch's auto picks confirm (all cuDNN, 2.2-3.1
    TB/s from 30 MB of keys and values up: docs/kernel-model.md); the math fallback is
    costed as a gemm of (b x h, s, t, d).
  q is the wave quantisation of the output tiles over the SMs, for the best of a few candidate tiles
  (the tile sizes cuBLAS / CUTLASS kernels use): for a tile tm x tn, T = b x ceil(m/tm) x ceil(n/tn) tiles
  run in W = T / SMs waves, of which the last, partial one costs `tail` of a full wave for its idle slots (1:
  whole waves; fitted 0.335 on hopper, 0.129 on ampere: a partial wave's tiles run faster than a full wave's, they
  share the memory and L2 with fewer), so the useful fraction of the tile slots is
  b m n / ((W + tail (ceil(W) - W)) x SMs x tm tn);
  a smaller tile fills the machine better but runs at a lower rate, I / (I + `tile_i0`) with
  I = tm tn / (tm + tn) its arithmetic intensity, relative to the largest candidate's (so `e_compute` is the
  efficiency of a large, evenly tiled problem); q is the best product over the candidates (a library
  heuristic picks the tile). k / (k + `k0`) is the cost of a shallow reduction (prologue and epilogue of
  each tile); with `overlap` > 0 it is w k / (w k + k0 (1 + (w - 1)(1 - overlap))) per candidate tile, w = its
  whole waves: a persistent kernel (Hopper's warp-specialised cuBLAS / CUTLASS 3 kernels) runs the epilogue of
  one tile under the main loop of its next, so the fixed cost is paid once per SM, not once per tile.
  Small problems are inefficient through both: one partial wave of small tiles, a short k.
  A convolution's class scales both its efficiencies (compute and memory): `e_transposed` for a transposed
  convolution (params `"transposed": True`; cuDNN runs it as a convolution's data gradient), `e_grouped` for a
  grouped or depthwise one (`groups` > 1), `e_grouped_transposed` for one that is both (where fitted; else the
  product), 1 for a dense one or where the entry has no factor (`class_efficiency`; fitted on the H100 sweep's
  convolutions, docs/kernel-model.md).
  A gemm whose bias add is fused into the library call (params `"bias": True`: `nn.Linear` -> `aten::addmm`,
  cuBLASLt's bias epilogue) runs at e_c x `e_bias` (default 1: no entry but the fitted ones tells a bias
  epilogue apart; docs/kernel-model.md).
- A copy kernel that materialises a strided view (params `"strided": True`: the `.contiguous()` torch makes of a
  permuted or sliced tensor, `passes.kernels` "copy:<op>" kernels; the sweep's `permute` records) moves its bytes at
  e_m x `e_strided` (default 1; the hopper copy entries fit it on the sweep: a float16 permute moves 0.40-0.44 of
  the bandwidth where a contiguous clone moves 0.8-0.9; docs/kernel-model.md).
- A kernel that reduces one row per thread block (torch's group norm: its statistics, `RowwiseMomentsCUDAKernel`,
  one (sample, group) row per block; params `"rows"`, with `"numel"`) takes at least t x max(1, rows / SMs) (at most
  2: `row_turns`) x (numel / rows) nanoseconds: with fewer rows than SMs most SMs idle and the time follows one
  row's elements, not the tensor's bytes. t is `row_ns` while the tensor (`row_tensor_mib`) is at most
  `row_cache_mib`, else `row_ns_large` (the rows then stream from memory, not from L2); `row_ns` 0: no such floor
  (docs/kernel-model.md; the hopper norm entries fit them on the H100 sweep's `group_norm` records, `kernel_fit
  rows`).
- `exec` (`exec_us`, default 0) is a fixed device-side time per kernel (prologue, epilogue, the ramp of the first
  wave), fitted only on kernel durations read from a profiler trace (data/vidur-ops: no host time in them); entries
  fitted on host-timed calls (NeuSight) keep 0, their `launch` holds it.
- `launch` (`launch_us`) is a constant per (family, kind, dtype): the time the smallest kernels take, i.e.
  host-side dispatch + launch latency + the minimum kernel duration, as measured op by op. Any saturation of
  memory bandwidth with size ("a small kernel cannot reach full bandwidth") is carried by this constant: for a
  memory-bound kernel an efficiency e(B) = e_inf B / (B + B_half) is exactly bytes / (bandwidth e_inf) +
  B_half / (bandwidth e_inf), i.e. an added constant that single-device data cannot tell from launch.
- Kernels a library launches inside one call (`inside`: cuDNN's per-step kernels of a recurrent layer, the kernels
  after the first of one `_cudnn_rnn` call; `passes.kernels.Kernel.call`) are issued by the library's C++ back to
  back, with no eager dispatch of their own: such a kernel costs its execution max(compute, memory) plus
  `DEVICE_LAUNCH_US` (the device-side gap between two kernels issued without host work in between, the figure the
  CUDA-graph runtime uses: `serving_engine.GRAPH_GAP_US`), never the `launch` floor. The call's first kernel keeps
  the eager rule: it carries the host's one dispatch of the call (docs/kernel-model.md, "Kernels inside one library
  call").

The roofline bound of a kernel is the same with e_c = e_m = 1 and no launch. Every efficiency is clipped to
(0, 1] and every launch is >= 0, so the bound never exceeds the estimate, kernel by kernel.

All parameters live in one versioned table, `predictor/kernel_params.json` (`SCHEMA`), keyed by
(scope, kind, dtype): scope is a device key or a device family (`families` in the table: "ampere" for the A100s,
"hopper" for H100/H200), dtype may be "*". Lookup tries (device, kind, dtype), (device, kind, "*"), (family,
kind, dtype), (family, kind, "*"); the pseudo-dtype "tf32" (float32 gemm on TF32 tensor cores) never falls back
to "*" (that is the FP32 CUDA-core fit): without a "tf32" entry the kind's float16 entry is used, its source
marked "assumed". Each entry says where its numbers come from (`source`: "fit: ...",
"transfer: ...", "default: ..."). `python -m predictor.kernel_fit fit --data DIR_OR_JSONL --out TABLE`
refits it (`predictor.kernel_fit`) and writes the evaluation table `KERNEL_EVAL.md` beside it; see
docs/kernel-model.md. The model itself needs only numpy and is vectorised over kernels.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from passes.graph import dtype_bytes
from passes.kernels import Launches

from .devices import Device, MigProfile
from .roofline import peak_rate, shares

SCHEMA = "preflight.kernel_params/1"
PARAMS_PATH = Path(__file__).resolve().parent / "kernel_params.json"

#: Kinds whose compute efficiency follows the tile / wave / depth form (the others: a constant).
GEMM_LIKE = ("gemm", "conv", "attention")
#: What a kernel's parameters rest on, for one device (`KernelParams.basis`), best first.
BASES = ("fitted_on_this_gpu", "fitted_on_other_gpus", "calibrated", "assumed")
#: Kernel kind -> the roofline category whose peak applies (`roofline.peak_rate`); other kinds map to themselves.
_CATEGORY = {"gemm": "matmul", "conv": "conv", "attention": "attention"}
#: Device-side time between two kernels issued without host work in between (a replayed CUDA graph, the kernels one
#: library call launches back to back), microseconds. Assumed, not measured here: the launch of the next kernel's
#: grid once the previous one retires. One figure for both runtimes (`serving_engine.GRAPH_GAP_US` is this one).
DEVICE_LAUNCH_US = 1.0
#: The table's pseudo-dtype of float32 gemm kernels on TF32 tensor cores (`param_dtype`).
TF32 = "tf32"
#: `torch.set_float32_matmul_precision`'s values -> whether float32 matmuls run on TF32 tensor cores on a GPU.
#: "highest" is torch's default (FP32 CUDA cores). "high" and "medium" both let cuBLAS use TF32 (torch's
#: `Context::allowTF32CuBLAS` is `precision != HIGHEST`); "medium"'s bfloat16 internal computation is a CPU
#: (oneDNN) path, so on a CUDA GPU "medium" is costed as "high".
MATMUL_PRECISIONS = {"highest": False, "high": True, "medium": True}
DEFAULT_MATMUL_PRECISION = "highest"


def is_host_overhead(value) -> bool:
    """Whether `value` is a valid host factor: a real number (not a bool), finite and positive (the host's dispatch
    time per kernel as a multiple of the fitted launch floor)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def tf32_matmul_of(matmul_precision: str) -> bool:
    """Whether `matmul_precision` (`MATMUL_PRECISIONS`) puts float32 matmuls on TF32 tensor cores; ValueError for
    a value torch does not accept."""
    try:
        return MATMUL_PRECISIONS[matmul_precision]
    except (KeyError, TypeError):
        raise ValueError(
            f"matmul precision must be one of {', '.join(MATMUL_PRECISIONS)} (got {matmul_precision!r})"
        ) from None


def param_dtype(kind: str, dtype: str, tf32_matmul: bool = False) -> str:
    """The dtype a kernel's parameters are looked up under: `TF32` for a float32 gemm when float32 matmuls run on
    TF32 tensor cores (`tf32_matmul`), else the kernel's own dtype."""
    return TF32 if tf32_matmul and kind == "gemm" and dtype == "float32" else dtype


class KernelParamsError(ValueError):
    """A parameter table or a measurement file that cannot be used (the message says why)."""


@dataclass(frozen=True)
class KernelParams:
    """One entry of the table: the efficiencies and launch time of one (scope, kind, dtype).

    Attributes:
        e_compute: fraction of `peak_rate` a large, evenly tiled, deep kernel reaches, in (0, 1].
        e_memory: fraction of the datasheet bandwidth the kernel's bytes move at, in (0, 1].
        launch_us: time added per kernel, microseconds (>= 0).
        tiles: candidate output tiles (tm, tn) for the wave quantisation; empty: no quantisation.
        tile_i0: tile-intensity half point (see the module docstring), >= 0.
        k0: reduction-depth half point, >= 0.
        exec_us: fixed device-side time of one kernel, microseconds (>= 0), part of its execution (so hidden
            behind nothing: inside a model it adds to the kernel's time, where the launch only floors it).
        e_bias: factor on a gemm's compute efficiency when its bias add is fused into it (the cuBLASLt bias
            epilogue of `aten::addmm`), in (0, 1]; 1: no difference (the entry was not fitted with it).
        e_transposed: factor on both efficiencies (compute and memory) of a transposed convolution (params
            `"transposed": True`: cuDNN runs it as the data gradient of a convolution), in (0, 1]; 1: as a
            convolution (the entry was not fitted with it).
        e_grouped: factor on both efficiencies of a grouped or depthwise convolution (params `groups` > 1), in
            (0, 1]; 1: as a dense one.
        e_grouped_transposed: factor on both efficiencies of a grouped transposed convolution, in (0, 1], in
            place of `e_transposed` x `e_grouped`; 1: that product (the entry was not fitted with it). cuDNN runs
            a depthwise transposed convolution through another kernel than a depthwise convolution: on the H100
            sweep the product fitted to both classes at once priced depthwise convolutions 87% (float16) and 75%
            (float32) slow at the median, the transposed ones right.
        e_strided: factor on a copy's memory efficiency when it gathers a strided view into contiguous memory
            (params `"strided": True`), in (0, 1]; 1: no difference (the entry was not fitted with it).
        row_ns: nanoseconds per element of one row of a kernel that reduces a row per thread block (`KernelArrays`
            `rows`: group norm), the floor `row_floor_s`, for a tensor of at most `row_cache_mib`; 0: no floor.
        row_ns_large: the same beyond `row_cache_mib` (0: `row_ns` at every size).
        row_cache_mib: the tensor size (MiB, `row_tensor_mib`) up to which `row_ns` holds.
        source: where the numbers come from, a chain read left to right: "fit: ..." (fitted on single-kernel
            measurements), "transfer: ..." (another family's fit), "default: ..." (a published or measured
            figure), "assumed: ..." (a stated assumption), each followed by the source of what it came from.
        measured_on: device keys whose single-kernel measurements the fit at the root of the chain used (empty
            when no measurement is behind the entry).
    """

    e_compute: float
    e_memory: float
    launch_us: float
    tiles: tuple[tuple[int, int], ...] = ()
    tile_i0: float = 0.0
    k0: float = 0.0
    source: str = ""
    measured_on: tuple[str, ...] = ()
    exec_us: float = 0.0
    e_bias: float = 1.0
    e_transposed: float = 1.0
    e_grouped: float = 1.0
    e_strided: float = 1.0
    tail: float = 1.0
    e_grouped_transposed: float = 1.0
    ridge: float = 0.0
    overlap: float = 0.0
    row_ns: float = 0.0
    row_ns_large: float = 0.0
    row_cache_mib: float = 0.0

    def __post_init__(self) -> None:
        for name in ("e_bias", "e_transposed", "e_grouped", "e_strided", "e_grouped_transposed"):
            if not (0 < getattr(self, name) <= 1):
                raise KernelParamsError(f"{name} must be in (0, 1]: {getattr(self, name)} ({self.source or 'entry'})")
        if not (0 < self.e_compute <= 1 and 0 < self.e_memory <= 1):
            raise KernelParamsError(
                f"efficiencies must be in (0, 1]: e_compute {self.e_compute}, e_memory {self.e_memory}"
            )
        if not (0 <= self.tail <= 1 and 0 <= self.ridge <= 1 and 0 <= self.overlap <= 1):
            where = self.source or "entry"
            raise KernelParamsError(
                f"tail, ridge and overlap must be in [0, 1]: {self.tail}, {self.ridge}, {self.overlap} ({where})"
            )
        rows = (self.row_ns, self.row_ns_large, self.row_cache_mib)
        if self.launch_us < 0 or self.tile_i0 < 0 or self.k0 < 0 or self.exec_us < 0 or min(rows) < 0:
            raise KernelParamsError(
                f"launch_us, exec_us, tile_i0, k0 and the row floor must be >= 0 ({self.source or 'entry'})"
            )
        if any(tm < 1 or tn < 1 for tm, tn in self.tiles):
            raise KernelParamsError(f"tiles must be positive: {self.tiles}")

    def to_json(self) -> dict:
        doc = {
            "e_compute": round(self.e_compute, 6),
            "e_memory": round(self.e_memory, 6),
            "launch_us": round(self.launch_us, 4),
        }
        if self.tiles:
            doc |= {"tiles": [list(t) for t in self.tiles], "tile_i0": round(self.tile_i0, 4), "k0": round(self.k0, 4)}
        elif self.k0:
            doc["k0"] = round(self.k0, 4)
        if self.exec_us:
            doc["exec_us"] = round(self.exec_us, 4)
        if self.e_bias != 1.0:
            doc["e_bias"] = round(self.e_bias, 6)
        for name in ("e_transposed", "e_grouped", "e_grouped_transposed", "e_strided", "tail"):
            if getattr(self, name) != 1.0:
                doc[name] = round(getattr(self, name), 6)
        for name in ("ridge", "overlap", "row_ns", "row_ns_large", "row_cache_mib"):
            if getattr(self, name):
                doc[name] = round(getattr(self, name), 6)
        doc["source"] = self.source
        if self.measured_on:
            doc["measured_on"] = list(self.measured_on)
        return doc

    def basis(self, device_key: str) -> str:
        """How this entry's numbers relate to `device_key` (one of `BASES`): fitted on that device's own
        single-kernel measurements, fitted on other GPUs' (the same or another family, carried over through the
        datasheet peaks), calibrated to a published or measured figure, or assumed from another entry."""
        tag = self.source.split(":", 1)[0].strip()
        if tag == "fit":  # a MIG slice ("h100-80gb:3g.40gb") runs on its whole GPU's measured kernels
            return "fitted_on_this_gpu" if device_key.split(":")[0] in self.measured_on else "fitted_on_other_gpus"
        if tag == "transfer":
            return "fitted_on_other_gpus"
        return "calibrated" if tag == "default" else "assumed"

    @classmethod
    def from_json(cls, doc: dict) -> KernelParams:
        try:
            return cls(
                e_compute=float(doc["e_compute"]),
                e_memory=float(doc["e_memory"]),
                launch_us=float(doc["launch_us"]),
                tiles=tuple((int(a), int(b)) for a, b in doc.get("tiles", ())),
                tile_i0=float(doc.get("tile_i0", 0.0)),
                k0=float(doc.get("k0", 0.0)),
                source=str(doc.get("source", "")),
                measured_on=tuple(str(d) for d in doc.get("measured_on", ())),
                exec_us=float(doc.get("exec_us", 0.0)),
                e_bias=float(doc.get("e_bias", 1.0)),
                e_transposed=float(doc.get("e_transposed", 1.0)),
                e_grouped=float(doc.get("e_grouped", 1.0)),
                e_grouped_transposed=float(doc.get("e_grouped_transposed", 1.0)),
                e_strided=float(doc.get("e_strided", 1.0)),
                tail=float(doc.get("tail", 1.0)),
                ridge=float(doc.get("ridge", 0.0)),
                overlap=float(doc.get("overlap", 0.0)),
                row_ns=float(doc.get("row_ns", 0.0)),
                row_ns_large=float(doc.get("row_ns_large", 0.0)),
                row_cache_mib=float(doc.get("row_cache_mib", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, KernelParamsError):
                raise
            raise KernelParamsError(f"bad kernel-parameter entry {doc!r}: {e}") from e


@dataclass(frozen=True)
class ParamTable:
    """The parameter table: entries keyed by (scope, kind, dtype), and the device families."""

    entries: dict[tuple[str, str, str], KernelParams]
    families: dict[str, tuple[str, ...]]
    version: str = ""
    meta: dict = field(default_factory=dict)

    def family(self, device_key: str) -> str | None:
        """The family a device key belongs to, or None. A device the table does not list (one added from a user's
        device file) belongs to the family its `kernel_family` names, if the table has it."""
        device_key = device_key.split(":")[0]  # a MIG slice belongs to its whole GPU's family
        for fam, keys in self.families.items():
            if device_key in keys:
                return fam
        from .devices import DEVICES

        device = DEVICES.get(device_key)
        if device is not None and device.kernel_family in self.families:
            return device.kernel_family
        return None

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted({k for _, k, _ in self.entries}))

    def lookup(self, device_key: str, kind: str, dtype: str) -> KernelParams:
        """The entry for a kernel of `kind` computing in `dtype` on `device_key` (module docstring: lookup order)."""
        scopes = [device_key] if ":" not in device_key else [device_key, device_key.split(":")[0]]  # slice, its GPU
        fam = self.family(device_key)
        if fam is not None:
            scopes.append(fam)
        for scope in scopes:
            for dt in (dtype,) if dtype == TF32 else (dtype, "*"):
                entry = self.entries.get((scope, kind, dt))
                if entry is not None:
                    return entry
        if dtype == TF32:  # no TF32 entry: the kind's float16 tensor-core entry, at the TF32 peak (an assumption)
            half = self.lookup(device_key, kind, "float16")
            note = "assumed: TF32 tensor cores at the float16 entry (the table has no tf32 entry); "
            return replace(half, source=note + half.source)
        families = ", ".join(sorted(self.families))
        where = f"device {device_key!r}" + (
            f" (family {fam!r})"
            if fam
            else f' (in no family of the table: a GPU of a device file borrows one with "kernel_family": one of '
            f"{families}; docs/devices.md)"
        )
        raise KernelParamsError(f"no kernel parameters for kind {kind!r}, dtype {dtype!r} on {where}")

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "version": self.version,
            **self.meta,
            "families": {k: list(v) for k, v in self.families.items()},
            "entries": [
                {"scope": s, "kind": k, "dtype": d, **p.to_json()} for (s, k, d), p in sorted(self.entries.items())
            ],
        }

    @classmethod
    def from_json(cls, doc: dict) -> ParamTable:
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
            raise KernelParamsError(f"not a kernel-parameter table (schema {got!r}, expected {SCHEMA!r})")
        entries: dict[tuple[str, str, str], KernelParams] = {}
        for e in doc.get("entries", []):
            try:
                key = (str(e["scope"]), str(e["kind"]), str(e["dtype"]))
            except (KeyError, TypeError) as err:
                raise KernelParamsError(f"kernel-parameter entry without scope/kind/dtype: {e!r}") from err
            if key in entries:
                raise KernelParamsError(f"duplicate kernel-parameter entry {key}")
            entries[key] = KernelParams.from_json(e)
        meta = {k: v for k, v in doc.items() if k not in ("schema", "version", "families", "entries")}
        families = {str(k): tuple(str(x) for x in v) for k, v in doc.get("families", {}).items()}
        return cls(entries, families, str(doc.get("version", "")), meta)


_CACHE: dict[tuple[Path, float], ParamTable] = {}


def load_params(path: Path | str | None = None) -> ParamTable:
    """Read a parameter table (default: the committed `predictor/kernel_params.json`), once per file version."""
    p = Path(path) if path is not None else PARAMS_PATH
    try:
        key = (p.resolve(), p.stat().st_mtime)
    except OSError as e:
        raise KernelParamsError(f"cannot read kernel-parameter table {p}: {e.strerror}") from e
    if key not in _CACHE:
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise KernelParamsError(f"cannot read kernel-parameter table {p}: {e}") from e
        _CACHE[key] = ParamTable.from_json(doc)
    return _CACHE[key]


@dataclass(frozen=True)
class KernelArrays:
    """Kernels as arrays (one row per kernel), what the model computes on.

    `b, m, n, k` are the gemm-like dimensions of the module docstring (0 where unknown or not gemm-like);
    `kind` is the kind the parameters are looked up under (math-fallback attention becomes "gemm").
    `count`: how many times each row's kernel is launched (None: once each); a row launched c times costs c times
    its time, so a recurrence of 10**6 identical steps is one row (`passes.analysis.Launches`).
    `inside`: True where the row's kernels are launched by a library call an earlier row's kernel dispatched
    (`DEVICE_LAUNCH_US` instead of the launch floor; module docstring); None: every row dispatched by the host.
    `bias`: per row, True for a gemm with its bias add fused (the kernel's params `"bias": True`), or None when no
    row has one. `transposed` / `grouped`: per row, True for a transposed convolution (params `"transposed": True`)
    / a convolution of `groups` > 1 (grouped or depthwise), or None when no row is one (`class_efficiency`).
    `strided`: per row, True for a copy that gathers a strided view (params `"strided": True`), or None when no row
    is one. `rows` / `row_numel`: per row, the rows a kernel reduces one per thread block and the elements of one
    (params `"rows"` and `"numel"`: a group norm's N x groups), 0 elsewhere; None when no row has them
    (`row_floor_s`).
    """

    kind: np.ndarray  # (N,) str
    dtype: np.ndarray  # (N,) str
    flops: np.ndarray  # (N,) float64
    nbytes: np.ndarray  # (N,) float64, read + written
    b: np.ndarray  # (N,) float64
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    count: np.ndarray | None = None  # (N,) float64 launches per row, or None for one each
    inside: np.ndarray | None = None  # (N,) bool launched inside a library call, or None for none
    bias: np.ndarray | None = None  # (N,) bool: a gemm with a fused bias epilogue, or None for none
    transposed: np.ndarray | None = None  # (N,) bool: a transposed convolution, or None for none
    grouped: np.ndarray | None = None  # (N,) bool: a convolution with groups > 1, or None for none
    strided: np.ndarray | None = None  # (N,) bool: a copy of a strided view, or None for none
    rows: np.ndarray | None = None  # (N,) float64: rows reduced one per thread block (0: none), or None for none
    row_numel: np.ndarray | None = None  # (N,) float64: elements of one such row (0: none), or None for none

    def __len__(self) -> int:
        return len(self.flops)

    @cached_property
    def grouped_transposed(self) -> np.ndarray | None:
        """(N,) bool: a grouped transposed convolution (`transposed` and `grouped`), or None for none (computed once:
        the fits' residuals read it at every step)."""
        if self.transposed is None or self.grouped is None:
            return None
        both = self.transposed & self.grouped
        return both if both.any() else None

    @cached_property
    def groups(self) -> list[tuple[str, str, np.ndarray]]:
        """(kind, dtype, row indices) for each (kind, dtype) present (computed once)."""
        if not len(self):
            return []
        keys, inverse = np.unique(np.char.add(np.char.add(self.kind, "|"), self.dtype), return_inverse=True)
        return [(*str(key).split("|", 1), np.flatnonzero(inverse == i)) for i, key in enumerate(keys)]

    def subset(self, index: np.ndarray) -> KernelArrays:
        return KernelArrays(
            *(None if getattr(self, f) is None else getattr(self, f)[index] for f in self.__dataclass_fields__)
        )


def _groups(params: dict) -> int:
    """A conv kernel's `groups` (1 when absent or not a number)."""
    try:
        return int(params.get("groups", 1))
    except (TypeError, ValueError):
        return 1


def _prod(values) -> int:
    return math.prod(int(v) for v in values) if isinstance(values, list | tuple) else int(values)


def gemm_dims(kind: str, params: dict) -> tuple[str, tuple[float, float, float, float]]:
    """(kind to look parameters up under, (b, m, n, k)) for one kernel; zeros when the params lack the sizes
    or hold anything but non-negative numbers (the kernel is then costed without a shape penalty)."""
    dims: tuple = (0, 0, 0, 0)
    try:
        if kind == "gemm":
            dims = (params.get("b", 1), params["m"], params["n"], params["k"])
        elif kind == "conv":
            groups = max(int(params.get("groups", 1)), 1)
            m = int(params["n"]) * _prod(params["out_spatial"])
            dims = (1, m, params["c_out"], int(params["c_in"]) // groups * _prod(params["kernel"]))
        elif kind == "attention":
            bh = int(params["b"]) * int(params["h"])
            if params.get("backend") == "math":
                kind, dims = "gemm", (bh, params["s"], params["t"], params["d"])
            elif int(params["s"]) == 1:  # a decode step: split-KV kernel, no tile shape penalty (module docstring)
                return kind, (0.0, 0.0, 0.0, 0.0)
            else:
                dims = (bh, params["s"], 1, params["t"])
        dims = tuple(float(v) for v in dims)
    except (KeyError, TypeError, ValueError):
        return kind, (0.0, 0.0, 0.0, 0.0)
    if not all(math.isfinite(v) and v >= 0 for v in dims):
        return kind, (0.0, 0.0, 0.0, 0.0)
    return kind, dims


def inside_calls(calls: Sequence) -> list[bool]:
    """Which kernels of a launch sequence a library launches inside a call another kernel dispatched: a kernel whose
    `call` (`passes.kernels.Kernel.call`, None outside any library call) is the previous kernel's. Each run of one
    call is one host dispatch, paid by its first kernel (a layer block repeated by `LayerRepeat` repeats its calls:
    each copy is a run of its own)."""
    out, prev = [], None
    for c in calls:
        out.append(c is not None and c == prev)
        prev = c
    return out


def kernel_arrays(kernels: Iterable) -> KernelArrays:
    """Arrays of `kernels` (objects with kind, flops, bytes_read, bytes_written, dtype, params, and optionally
    `call`, the library call it is launched in: `inside_calls`). A `passes.kernels.Launches` row stands for `count`
    launches of its kernel; any other object for one launch, whatever attributes it has (a serving engine's
    per-layer `count` is not a launch count)."""
    kinds, dtypes, flops, nbytes, dims, counts, calls, biases = [], [], [], [], [], [], [], []
    transposed, grouped, strided, rows, row_numel = [], [], [], [], []
    for kern in kernels:
        counts.append(kern.count if isinstance(kern, Launches) else 1)
        calls.append(getattr(kern, "call", None))
        kind, d = gemm_dims(kern.kind, kern.params or {}) if kern.kind in GEMM_LIKE else (kern.kind, (0, 0, 0, 0))
        biases.append(kern.kind == "gemm" and (kern.params or {}).get("bias") is True)
        is_conv = kern.kind == "conv" and kind == "conv"
        transposed.append(is_conv and (kern.params or {}).get("transposed") is True)
        grouped.append(is_conv and _groups(kern.params or {}) > 1)
        strided.append(kern.kind == "copy" and (kern.params or {}).get("strided") is True)
        r, numel = _row_shape(kern.kind, kern.params or {})
        rows.append(r)
        row_numel.append(numel)
        kinds.append(kind)
        dtypes.append(kern.dtype)
        flops.append(kern.flops)
        nbytes.append(kern.bytes_read + kern.bytes_written)
        dims.append(d)
    dim = np.array(dims, dtype=np.float64).reshape(-1, 4)
    inside = inside_calls(calls)
    arrays = KernelArrays(
        np.array(kinds, dtype=str),
        np.array(dtypes, dtype=str),
        np.array(flops, dtype=np.float64),
        np.array(nbytes, dtype=np.float64),
        *dim.T.copy(),
        None if all(c == 1 for c in counts) else np.array(counts, dtype=np.float64),
        np.array(inside, dtype=bool) if any(inside) else None,
        np.array(biases, dtype=bool) if any(biases) else None,
        np.array(transposed, dtype=bool) if any(transposed) else None,
        np.array(grouped, dtype=bool) if any(grouped) else None,
        np.array(strided, dtype=bool) if any(strided) else None,
        np.array(rows, dtype=np.float64) if any(rows) else None,
        np.array(row_numel, dtype=np.float64) if any(rows) else None,
    )
    if (arrays.flops < 0).any() or (arrays.nbytes < 0).any():
        raise KernelParamsError("kernel FLOPs and bytes must be >= 0")
    return arrays


def _row_shape(kind: str, params: dict) -> tuple[float, float]:
    """(rows, elements per row) of a norm kernel that reduces one row per thread block (params `"rows"` and
    `"numel"`), else (0, 0)."""
    if kind != "norm" or "rows" not in params:  # (every kernel of every analysis passes here)
        return 0.0, 0.0
    try:
        rows, numel = float(params.get("rows", 0)), float(params.get("numel", 0))
    except (TypeError, ValueError):
        return 0.0, 0.0
    return (rows, numel / rows) if rows > 0 and numel > 0 else (0.0, 0.0)


def row_floor_s(arrays: KernelArrays, p: KernelParams, sms: float | np.ndarray) -> np.ndarray | float:
    """Per kernel, the least execution time (seconds) of a kernel that reduces one row per thread block:
    t x `row_turns` (max(1, rows / SMs), at most 2) x elements per row; t = `row_ns` for a tensor (`row_tensor_mib`)
    of at most `row_cache_mib`, else `row_ns_large` (0 where the kernel has no rows or the entry no `row_ns`). With
    fewer rows than SMs each row's block runs alone on an SM, so the time is one row's; with more, the SMs take the
    rows in turns (docs/kernel-model.md, "Ops the table does not describe")."""
    if arrays.rows is None or not p.row_ns:
        return 0.0
    t = p.row_ns
    if p.row_ns_large and p.row_cache_mib:
        t = np.where(row_tensor_mib(arrays) > p.row_cache_mib, p.row_ns_large, p.row_ns)
    return t * 1e-9 * row_turns(arrays.rows, sms) * arrays.row_numel


#: the most turns of rows `row_turns` counts: beyond two rows per SM torch's 512-thread blocks share SMs (up to
#: four at once), which the one-block-per-SM law does not describe; the H100 sweep's group norms of 2.2 to 3.2 rows
#: per SM took 2.0 to 2.3 turns' time, and beyond them the kernel's bytes decide (docs/kernel-model.md)
ROW_TURNS_MAX = 2.0


def row_turns(rows: np.ndarray, sms: float | np.ndarray) -> np.ndarray:
    """How many rows' time a row-reducing kernel takes: max(1, rows / SMs), at most `ROW_TURNS_MAX`."""
    return np.clip(rows / sms, 1.0, ROW_TURNS_MAX)


def row_tensor_mib(arrays: KernelArrays) -> np.ndarray:
    """(N,) MiB of the tensor a row-reducing kernel normalises: rows x elements per row x the dtype's size (0 where
    the kernel has no rows)."""
    if arrays.rows is None:
        return np.zeros(len(arrays))
    size = np.array([dtype_bytes(str(d)) for d in arrays.dtype], dtype=np.float64)
    return arrays.rows * arrays.row_numel * size / 2**20


def tile_efficiency(
    b: np.ndarray,
    m: np.ndarray,
    n: np.ndarray,
    sms: float | np.ndarray,
    tiles: Sequence[tuple[int, int]],
    i0: float,
    tail: float = 1.0,
    k: np.ndarray | None = None,
    k0: float = 0.0,
    overlap: float = 0.0,
) -> np.ndarray:
    """q of the module docstring: the best (wave-quantised fill x tile rate) over the candidate tiles.

    `tail` (in [0, 1]): what an idle tile slot of the last, partial wave costs, as a fraction of a busy one: a
    tile count of W = T / SMs waves runs in W + tail x (ceil(W) - W) wave times (1: whole waves, the classic wave
    quantisation; 0: none). With `k` given, each candidate's fill is also times its reduction-depth factor
    w k / (w k + k0 (1 + (w - 1)(1 - `overlap`))), w = ceil(W) the tiles each SM runs in turn: a tile's fixed
    cost (prologue, epilogue: k0 of depth) is paid once per tile with `overlap` 0 (the classic k / (k + k0)), once
    per SM with `overlap` 1 (a persistent kernel overlapping each tile's epilogue with the next tile's main loop).

    Rows with unknown dimensions (b m n = 0) get 1. Shapes: b, m, n, k (N,), sms scalar or (N,); result (N,).
    """
    work = b * m * n
    if not tiles:
        return np.ones_like(work)
    rate = {t: t[0] * t[1] / (t[0] + t[1]) for t in tiles}  # arithmetic intensity of each tile
    top = max(rate.values())
    best = np.zeros_like(work)
    for (tm, tn), intensity in rate.items():
        count = b * np.ceil(m / tm) * np.ceil(n / tn)
        waves = count / sms
        slots = (waves + tail * (np.ceil(waves) - waves)) * sms * (tm * tn)
        relative = (intensity / (intensity + i0)) / (top / (top + i0))  # 1 for the largest tile
        with np.errstate(invalid="ignore", divide="ignore"):
            fill = work / slots * relative
            if k is not None and k0:
                w = np.maximum(np.ceil(waves), 1.0)
                fill = fill * np.where(k > 0, w * k / (w * k + k0 * (1.0 + (w - 1.0) * (1.0 - overlap))), 1.0)
            best = np.maximum(best, fill)
    return np.where(work > 0, best, 1.0)


def class_efficiency(arrays: KernelArrays, p: KernelParams) -> np.ndarray | float:
    """The convolution-class factor per row (`e_transposed` on transposed convolutions, `e_grouped` on grouped and
    depthwise ones, `e_grouped_transposed` on a grouped transposed one where the entry has it, else the product,
    1 elsewhere), applied to both efficiencies: (N,)
    array, or the scalar 1.0 when no row has a class or the entry has no factor."""
    factor: np.ndarray | float = 1.0
    if arrays.transposed is not None and p.e_transposed != 1.0:
        factor = factor * np.where(arrays.transposed, p.e_transposed, 1.0)
    if arrays.grouped is not None and p.e_grouped != 1.0:
        factor = factor * np.where(arrays.grouped, p.e_grouped, 1.0)
    both = arrays.grouped_transposed
    if both is not None and p.e_grouped_transposed != 1.0:
        factor = np.where(both, p.e_grouped_transposed, factor)
    return factor


def compute_efficiency(arrays: KernelArrays, p: KernelParams, sms: float | np.ndarray) -> np.ndarray:
    """e_c per kernel for one parameter entry (all rows of `arrays` use `p`), times `e_bias` on the rows with a
    fused bias epilogue (`arrays.bias`) and the convolution-class factor (`class_efficiency`)."""
    epilogue = 1.0 if arrays.bias is None or p.e_bias == 1.0 else np.where(arrays.bias, p.e_bias, 1.0)
    epilogue = epilogue * class_efficiency(arrays, p)
    if not p.tiles and not p.k0:
        return np.clip(np.full(len(arrays), p.e_compute) * epilogue, 1e-9, 1.0)
    if p.tiles:  # the depth factor per candidate tile: it depends on the tile's waves unless `overlap` is 0
        q = tile_efficiency(arrays.b, arrays.m, arrays.n, sms, p.tiles, p.tile_i0, p.tail, arrays.k, p.k0, p.overlap)
        return np.clip(p.e_compute * q * epilogue, 1e-9, 1.0)
    depth = np.where(arrays.k > 0, arrays.k / (arrays.k + p.k0), 1.0)  # no tiles: the depth factor alone
    return np.clip(p.e_compute * depth * epilogue, 1e-9, 1.0)


def memory_efficiency(arrays: KernelArrays, p: KernelParams) -> np.ndarray | float:
    """e_m per kernel for one parameter entry (all rows of `arrays` use `p`): `e_memory`, times the convolution-class
    factor (`class_efficiency`) and `e_strided` on the rows that copy a strided view (`arrays.strided`)."""
    e_m = p.e_memory * class_efficiency(arrays, p)
    if arrays.strided is None or p.e_strided == 1.0:
        return e_m
    return e_m * np.where(arrays.strided, p.e_strided, 1.0)


def overlap_terms(compute: np.ndarray, memory: np.ndarray, ridge: float) -> tuple[np.ndarray, np.ndarray]:
    """The two execution terms (seconds, (N,) each, without `exec_us`) after the ridge overlap of an entry:
    the larger term becomes the p-norm (compute^(1/r) + memory^(1/r))^r of both (r = `ridge`), the smaller one
    stays, so max(compute, memory) is that norm and the larger term still says which one bounds the kernel.

    r = 0: max(compute, memory) (compute and memory traffic overlap perfectly); r = 1: their sum (no overlap).
    Between, a kernel far from the ridge (one term 10x the other) pays (1 + 0.1^(1/r))^r - 1 of its larger term
    more (r = 0.4: 0.13%), a kernel on the ridge (equal terms) 2^r - 1 (r = 0.4: 32%): the part of a tile's
    operand traffic its pipeline does not hide when neither the tensor cores nor the memory has slack."""
    if ridge <= 0:
        return compute, memory
    hi = np.maximum(compute, memory)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(hi > 0, np.minimum(compute, memory) / hi, 0.0)
    both = hi * (1.0 + ratio ** (1.0 / ridge)) ** ridge
    larger = compute >= memory
    return np.where(larger, both, compute), np.where(larger, memory, both)


@dataclass(frozen=True)
class KernelTimes:
    """Per-kernel times in seconds ((N,) arrays, launch order), and their sums.

    `compute_s`/`memory_s` are the two terms of the estimate (at fitted efficiencies, each with the entry's
    `exec_us`: a kernel's execution is max(compute_s, memory_s)), `launch_s` its constant;
    `bound_compute_s`/`bound_memory_s` the roofline terms (efficiency 1, no launch).
    """

    compute_s: np.ndarray
    memory_s: np.ndarray
    launch_s: np.ndarray
    bound_compute_s: np.ndarray
    bound_memory_s: np.ndarray

    @property
    def seconds(self) -> np.ndarray:
        """Estimated time per kernel."""
        return np.maximum(self.compute_s, self.memory_s) + self.launch_s

    @property
    def eager_s(self) -> np.ndarray:
        """Time per kernel inside a model run eagerly, back to back: max(compute, memory, launch).

        `seconds` adds the launch to the kernel's execution, as a kernel timed on its own pays it. Inside a
        model the host dispatches the next kernel while the GPU runs this one, so the launch overlaps a long
        kernel's execution and is only a floor for short ones (the GPU cannot run kernels faster than the host
        issues them). An assumption until whole-model GPU measurements calibrate it (docs/kernel-model.md).
        """
        return np.maximum(np.maximum(self.compute_s, self.memory_s), self.launch_s)

    @property
    def eager_ms(self) -> float:
        """Sum of `eager_s`: the model's predicted latency, in milliseconds."""
        return float(self.eager_s.sum() * 1e3)

    @property
    def floor_ms(self) -> float:
        """The part of `eager_ms` spent at the launch floor (kernels too short to hide it), in milliseconds."""
        execution = np.maximum(self.compute_s, self.memory_s)
        return float(np.where(self.launch_s >= execution, self.launch_s, 0.0).sum() * 1e3)

    @property
    def bound_s(self) -> np.ndarray:
        """Roofline bound per kernel."""
        return np.maximum(self.bound_compute_s, self.bound_memory_s)

    @property
    def compute_bound(self) -> np.ndarray:
        """Per kernel: True where the roofline's compute term is the larger (the kernel is compute-bound)."""
        return self.bound_compute_s >= self.bound_memory_s

    @property
    def total_ms(self) -> float:
        return float(self.seconds.sum() * 1e3)

    @property
    def bound_ms(self) -> float:
        return float(self.bound_s.sum() * 1e3)

    @property
    def launch_ms(self) -> float:
        return float(self.launch_s.sum() * 1e3)

    def summary(self) -> dict:
        return {
            "kernels": len(self.launch_s),
            "latency_ms": self.total_ms,
            "roofline_latency_ms": self.bound_ms,
            "launch_ms": self.launch_ms,
            "compute_bound_kernels": int(self.compute_bound.sum()),
        }


def _resources(device: Device, profile: MigProfile | None) -> tuple[float, float, int]:
    sm_share, bw_share = shares(device, profile)
    return sm_share, bw_share, profile.sms if profile is not None else device.sms


def kernel_latency_arrays(
    arrays: KernelArrays,
    device: Device,
    profile: MigProfile | None = None,
    params: ParamTable | None = None,
    *,
    tf32_matmul: bool = False,
) -> KernelTimes:
    """`kernel_latency` from `kernel_arrays` (compute the arrays once, cost them on many devices and slices)."""
    table = params if params is not None else load_params()
    sm_share, bw_share, sms = _resources(device, profile)
    n = len(arrays)
    out = {f: np.zeros(n) for f in KernelTimes.__dataclass_fields__}
    bandwidth = device.bandwidth * bw_share
    out["bound_memory_s"] = arrays.nbytes / bandwidth
    for kind, dtype, rows in arrays.groups:
        p = table.lookup(device.key, kind, param_dtype(kind, dtype, tf32_matmul))
        rate = peak_rate(device, _CATEGORY.get(kind, kind), dtype, tf32_matmul=tf32_matmul) * sm_share
        sub = arrays.subset(rows)
        out["bound_compute_s"][rows] = sub.flops / rate
        compute = sub.flops / (rate * compute_efficiency(sub, p, sms))
        compute, memory = overlap_terms(compute, sub.nbytes / (bandwidth * memory_efficiency(sub, p)), p.ridge)
        memory = np.maximum(memory, row_floor_s(sub, p, sms))
        out["compute_s"][rows] = compute + p.exec_us * 1e-6
        out["memory_s"][rows] = memory + p.exec_us * 1e-6
        out["launch_s"][rows] = p.launch_us * 1e-6
    if arrays.inside is not None and arrays.inside.any():  # launched by a library call: execution + device gap
        gap = DEVICE_LAUNCH_US * 1e-6
        out["compute_s"][arrays.inside] += gap
        out["memory_s"][arrays.inside] += gap
        out["launch_s"][arrays.inside] = 0.0
    if arrays.count is not None:  # c launches of a kernel: c times each term, so every max and sum is of all c
        out = {f: v * arrays.count for f, v in out.items()}
    return KernelTimes(**out)


def kernel_basis(
    arrays: KernelArrays,
    device: Device,
    times: KernelTimes,
    params: ParamTable | None = None,
    *,
    tf32_matmul: bool = False,
) -> dict[str, float]:
    """The share of the estimate's time (`times.eager_s`, the kernels of `arrays` on `device`) whose kernel
    parameters rest on each basis of `BASES` (`KernelParams.basis`); the shares add up to 1 (all 0 when the
    estimate is 0). `tf32_matmul` as the `times` were computed with."""
    table = params if params is not None else load_params()
    total = float(times.eager_s.sum())
    share = dict.fromkeys(BASES, 0.0)
    for kind, dtype, rows in arrays.groups:
        entry = table.lookup(device.key, kind, param_dtype(kind, dtype, tf32_matmul))
        share[entry.basis(device.key)] += float(times.eager_s[rows].sum())
    return {b: (v / total if total > 0 else 0.0) for b, v in share.items()}


def kernel_latency(
    kernels: Iterable,
    device: Device,
    profile: MigProfile | None = None,
    params: ParamTable | None = None,
    *,
    tf32_matmul: bool = False,
) -> KernelTimes:
    """Estimated and roofline time of every kernel on `device` (or one of its MIG slices).

    Args:
        kernels: the kernel view, in launch order (`passes.kernels.Kernel` or alike).
        device: the GPU.
        profile: a MIG profile of `device`, or None for the whole GPU.
        params: a parameter table (default: the committed one).
        tf32_matmul: float32 gemm kernels on TF32 tensor cores (`torch.set_float32_matmul_precision("high")`);
            False (torch's default): on FP32 CUDA cores. Other dtypes and kinds are not affected.
    """
    return kernel_latency_arrays(kernel_arrays(kernels), device, profile, params, tf32_matmul=tf32_matmul)


def latency_bound_ms(
    kernels: Iterable, device: Device, profile: MigProfile | None = None, *, tf32_matmul: bool = False
) -> float:
    """The roofline bound of a kernel sequence in milliseconds (efficiency 1, no launch; `tf32_matmul` as in
    `kernel_latency`)."""
    arrays = kernel_arrays(kernels)
    sm_share, bw_share, _ = _resources(device, profile)
    total = 0.0
    for kind, dtype, rows in arrays.groups:
        rate = peak_rate(device, _CATEGORY.get(kind, kind), dtype, tf32_matmul=tf32_matmul) * sm_share
        total += float(np.maximum(arrays.flops[rows] / rate, arrays.nbytes[rows] / (device.bandwidth * bw_share)).sum())
    return total * 1e3
