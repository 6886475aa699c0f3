"""Device memory as `nvidia-smi` counts it for a PyTorch inference process (docs/power-and-memory.md).

    total = CUDA context (runtime, SMs) + cuBLAS workspace (architecture) + weights (allocator-rounded)
            + reserve x peak activations (allocator-rounded)

- CUDA context: driver state, the kernels loaded into it and the per-SM reservations, per runtime
  (`RuntimeMemory`, from `predictor/memory_params.json`): `fixed_mib + per_sm_mib x SMs` of the GPU or MIG slice.
  For torch 1.12 / CUDA 11 (all kernels loaded at start) both terms are fitted on the MIGProfiler framebuffer
  readings (`python -m predictor.memory_fit`). For the runtime predictions assume (torch >= 1.13 with CUDA >= 11.7,
  which set CUDA_MODULE_LOADING=LAZY: pytorch/pytorch#86509) the context is a published figure, about 400 MB at
  the first CUDA operation (pytorch/pytorch#109888), kernels being loaded as they are first used.
- cuBLAS workspace: PyTorch gives each (cuBLAS handle, stream) a workspace from its caching allocator,
  `CUBLAS_WORKSPACE_CONFIG` default :4096:2:16:8 = 4096 KiB x 2 + 16 KiB x 8 = 8.125 MiB, and 4096 KiB x 8 =
  32 MiB on Hopper (aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize); one stream assumed.
- The caching allocator (c10/cuda/CUDACachingAllocator.cpp): a request is rounded up to a multiple of 512 B
  (`block_bytes`); requests up to 1 MiB are carved from 2 MiB segments, requests below 10 MiB from 20 MiB
  segments, larger ones get a segment of their own rounded up to 2 MiB (`segment_bytes`). Freed blocks stay
  reserved (nvidia-smi keeps counting them), and a block freed by one tensor is reused only by a request that
  fits it, so what eager inference reserves exceeds the liveness peak: `reserve` (reserved / peak activations)
  is fitted on the batch-dependent growth of the MIGProfiler readings.
- cuDNN's convolution workspace is allocated and freed around each convolution through the same allocator; it
  is not modelled on its own (graphs with convolutions carry `CUDNN_WORKSPACE_MIB`, an assumption).

The tensor peak (weights + peak live activations, what preflight's liveness pass finds) is kept beside the total
(`MemoryEstimate.tensor_peak_mib`); MIG fit is decided on the total.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

SCHEMA = "preflight.memory_params/1"
PARAMS_PATH = Path(__file__).resolve().parent / "memory_params.json"
MIB = 2**20

MIN_BLOCK = 512  # kMinBlockSize: every request is rounded up to a multiple of 512 B
SMALL_SIZE = 1 * MIB  # kSmallSize: requests up to this come from the small pool
SMALL_BUFFER = 2 * MIB  # kSmallBuffer: the small pool's segment size
MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc: requests below this (and above SMALL_SIZE) use 20 MiB segments
LARGE_BUFFER = 20 * MIB  # kLargeBuffer
ROUND_LARGE = 2 * MIB  # kRoundLarge: larger requests get their own segment, rounded up to 2 MiB

CUBLAS_WORKSPACE_MIB = {"hopper": 32.0, "other": 8.125}  # parseChosenWorkspaceSize defaults
CUDNN_WORKSPACE_MIB = 32.0  # assumed, for graphs with convolutions (the earlier 64 MiB minus cuBLAS's 32)
DEFAULT_RUNTIME = "torch-2-cuda12-lazy"


class MemoryParamsError(ValueError):
    """The memory-parameter file is missing, malformed or lacks a runtime (the message says which)."""


def block_bytes(nbytes: int) -> int:
    """Bytes the caching allocator hands out for a request of `nbytes`: rounded up to a multiple of 512 B."""
    if nbytes <= 0:
        return 0
    return MIN_BLOCK * math.ceil(nbytes / MIN_BLOCK)


def segment_bytes(nbytes: int) -> int:
    """Bytes of the cudaMalloc segment a request of `nbytes` causes when no cached block fits it: a 2 MiB segment
    (small pool, <= 1 MiB), a 20 MiB segment (< 10 MiB), else the block rounded up to a multiple of 2 MiB."""
    size = block_bytes(nbytes)
    if size == 0:
        return 0
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * math.ceil(size / ROUND_LARGE)


def reserved_bytes(sizes) -> int:
    """Bytes reserved for tensors of `sizes` (bytes each) that all stay alive, allocated one after another:
    small blocks are packed into 2 MiB segments, 1-10 MiB blocks into 20 MiB segments (a new segment when the
    open one cannot hold the block), larger ones get their own segment (`segment_bytes`)."""
    total, room = 0, {SMALL_BUFFER: 0, LARGE_BUFFER: 0}
    for n in sizes:
        size = block_bytes(int(n))
        if size == 0:
            continue
        if size <= SMALL_SIZE:
            pool = SMALL_BUFFER
        elif size < MIN_LARGE_ALLOC:
            pool = LARGE_BUFFER
        else:
            total += segment_bytes(size)
            continue
        if room[pool] < size:  # open a new segment of the pool
            total += pool
            room[pool] = pool
        room[pool] -= size
    return total


def _round_large(nbytes: int) -> int:
    return ROUND_LARGE * math.ceil(nbytes / ROUND_LARGE) if nbytes > 0 else 0


@dataclass(frozen=True)
class RuntimeMemory:
    """What a runtime adds to the tensors, in MiB: context = fixed_mib + per_sm_mib x SMs; `reserve` = reserved /
    peak live activations. `source` says where each figure comes from."""

    fixed_mib: float
    per_sm_mib: float
    reserve: float
    source: str

    def context_mib(self, sms: int) -> float:
        return self.fixed_mib + self.per_sm_mib * sms


_CACHE: dict[tuple[Path, float], dict[str, RuntimeMemory]] = {}


def load_memory_params(path: Path | str | None = None) -> dict[str, RuntimeMemory]:
    """Runtime name -> `RuntimeMemory` (default file: the committed `predictor/memory_params.json`); raises
    `MemoryParamsError` when the file is missing or malformed: no silent fallback."""
    p = Path(path) if path is not None else PARAMS_PATH
    try:
        key = (p.resolve(), p.stat().st_mtime)
    except OSError as e:
        raise MemoryParamsError(f"cannot read memory-parameter file {p}: {e.strerror}") from e
    if key not in _CACHE:
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise MemoryParamsError(f"cannot read memory-parameter file {p}: {e}") from e
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise MemoryParamsError(f"{p} is not a memory-parameter file (expected schema {SCHEMA!r})")
        out = {}
        for name, e in doc.get("runtimes", {}).items():
            try:
                out[name] = RuntimeMemory(
                    float(e["fixed_mib"]), float(e["per_sm_mib"]), float(e["reserve"]), str(e["source"])
                )
            except (KeyError, TypeError, ValueError) as err:
                raise MemoryParamsError(f"bad memory-parameter entry for {name!r} in {p}: {err}") from err
        _CACHE[key] = out
    return _CACHE[key]


def runtime_memory(name: str = DEFAULT_RUNTIME, path: Path | str | None = None) -> RuntimeMemory:
    table = load_memory_params(path)
    if name not in table:
        raise MemoryParamsError(f"no memory parameters for runtime {name!r} in {path or PARAMS_PATH}")
    return table[name]


@dataclass(frozen=True)
class GpuMemory:
    """Device memory of one model on one GPU or MIG slice, term by term, in MiB (2**20 bytes)."""

    weights_mib: float  # allocator-rounded parameter bytes
    activations_mib: float  # reserve x peak live activations, allocator-rounded
    context_mib: float
    workspace_mib: float  # cuBLAS (+ cuDNN for graphs with convolutions)
    tensor_peak_mib: float  # weights + peak live activations as the liveness pass finds them (unrounded)
    peak_activations_mib: float  # the liveness peak of activations alone

    @property
    def total_mib(self) -> float:
        return self.weights_mib + self.activations_mib + self.context_mib + self.workspace_mib


def gpu_memory(
    param_bytes: int,
    peak_activation_bytes: int,
    *,
    sms: int,
    hopper: bool,
    has_conv: bool = False,
    runtime: RuntimeMemory | None = None,
) -> GpuMemory:
    """`GpuMemory` for a graph with `param_bytes` of weights and `peak_activation_bytes` of live activations at
    its peak, on a GPU (or slice) with `sms` SMs; `hopper` picks cuBLAS's 32 MiB workspace. The weights are
    rounded up to a whole 2 MiB segment, and so are the reserved activations (both are many tensors: their
    per-tensor packing, `reserved_bytes`, is not known from the totals)."""
    rt = runtime if runtime is not None else runtime_memory()
    weights = _round_large(param_bytes)
    act = _round_large(int(math.ceil(rt.reserve * max(peak_activation_bytes, 0))))
    workspace = CUBLAS_WORKSPACE_MIB["hopper" if hopper else "other"] + (CUDNN_WORKSPACE_MIB if has_conv else 0.0)
    return GpuMemory(
        weights_mib=weights / MIB,
        activations_mib=act / MIB,
        context_mib=rt.context_mib(sms),
        workspace_mib=workspace,
        tensor_peak_mib=(param_bytes + peak_activation_bytes) / MIB,
        peak_activations_mib=peak_activation_bytes / MIB,
    )
