"""Device memory as `nvidia-smi` counts it for a PyTorch inference process (docs/power-and-memory.md).

    total = CUDA context (runtime, SMs) + cuBLAS workspace (architecture)
            + what the caching allocator reserves for the weights and over an inference loop's activations

- CUDA context: driver state, the kernels loaded into it and the per-SM reservations, per runtime
  (`RuntimeMemory`, from `predictor/memory_params.json`): `fixed_mib + per_sm_mib x SMs` of the GPU or MIG slice.
  For torch 1.12 / CUDA 11 (all kernels loaded at start) both terms are fitted on the MIGProfiler framebuffer
  readings (`python -m predictor.memory_fit`). For the runtime predictions assume (torch >= 1.13 with CUDA >= 11.7,
  which set CUDA_MODULE_LOADING=LAZY: pytorch/pytorch#86509) the context is a published figure, about 400 MB at
  the first CUDA operation (pytorch/pytorch#109888), kernels being loaded as they are first used.
- cuBLAS workspace: PyTorch gives each (cuBLAS handle, stream) a workspace, `CUBLAS_WORKSPACE_CONFIG` default
  :4096:2:16:8 = 4096 KiB x 2 + 16 KiB x 8 = 8.125 MiB, and 4096 KiB x 8 = 32 MiB on Hopper
  (aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize); one stream assumed; counted on its own.
- The caching allocator (c10/cuda/CUDACachingAllocator.cpp), replayed on the graph's allocation trace
  (`simulate_reserved`, `CachingAllocator`): a request is rounded up to a multiple of 512 B (`block_bytes`);
  requests up to 1 MiB come from the small pool, carved from 2 MiB segments; larger ones from the large pool,
  from 20 MiB segments below 10 MiB and otherwise from a segment of their own rounded up to 2 MiB
  (`segment_bytes`); the smallest cached free block that holds a request is split and reused; freed blocks stay
  reserved (nvidia-smi keeps counting them). The reserve is therefore the most reserved over the loop, which
  depends on the sizes and lifetimes of the tensors, not on their peak sum alone. No parameter is fitted for it.
  Where memory is short the allocator gives its free segments back when a cudaMalloc fails and retries
  (`CachingAllocator(limit=...)`): `least_reserved` is the smallest limit the loop runs in, what MIG fit takes.
  Without a trace, `RuntimeMemory.reserve` (reserved / peak activations, fitted) is the fallback.
- cuDNN's convolution workspace is allocated and freed around each convolution through the same allocator; it
  is not replayed (graphs with convolutions carry `CUDNN_WORKSPACE_MIB`, the median steady-state excess our H100
  rows show, 4 MiB; docs/memory.md).
- CUDA context: one source for every command (`runtime_for`, `context_mib`): eager PyTorch 2.11 / CUDA 13 measured
  on our H100 (698 MiB, `DEFAULT_RUNTIME`), the same for a CUDA-graph replay, a vLLM-style engine's own figure
  (`RUNTIMES`), or a device file's `cuda_context_mib`.

The tensor peak (weights + peak live activations, what preflight's liveness pass finds) is kept beside the total
(`GpuMemory.tensor_peak_mib`); MIG fit is decided on the total.
"""

from __future__ import annotations

import bisect
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
#: cuDNN's steady-state workspace beyond the replay, graphs with convolutions (cudnn.benchmark on): the median of
#: reserved - replay - cuBLAS over the 72 conv rows of our H100 measurements (2-4 MiB with each family held out:
#: bench/bench_h100_memory_terms.py); it was 32 MiB assumed. Large-batch ResNet-style nets reserve far more (docs).
CUDNN_WORKSPACE_MIB = 4.0
#: The default runtime entry of `predictor/memory_params.json`: eager PyTorch 2.11 with CUDA 13.0 (lazy module
#: loading), its context measured on our H100 (`python -m predictor.memory_fit`, docs/memory.md).
DEFAULT_RUNTIME = "torch-2.11-cuda13"
#: How a model runs -> the runtime entry whose context it gets. A CUDA-graph replay of the same eager model runs in
#: the same process with the same kernels loaded: the same context (no reading of its own; the graph's private pool
#: is allocator memory, not context). A vLLM-style engine counts everything outside torch's allocator (context,
#: NCCL, CUDA graphs' pools) as one figure of its own.
RUNTIMES = {"eager": DEFAULT_RUNTIME, "cuda-graph": DEFAULT_RUNTIME, "vllm": "vllm"}


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


class CachingAllocator:
    """PyTorch's CUDA caching allocator on one stream, as c10/cuda/CUDACachingAllocator.cpp documents it (no
    `PYTORCH_CUDA_ALLOC_CONF`): a request is rounded up to a multiple of 512 B (`block_bytes`); requests up to
    1 MiB use the small pool, larger ones the large pool; the smallest free block of the pool that holds the
    request is taken (best fit), and split when what is left is >= 512 B (small pool) or > 1 MiB (large pool);
    with no free block a new segment is cudaMalloc'd (`segment_bytes`). A freed block merges with free neighbours
    of its segment and stays reserved. Segments are given back only when a cudaMalloc fails: with a `limit` (bytes
    the allocator may reserve: the device's memory less what is not its own), a new segment that would pass it first
    frees every segment that is one free block (`release_cached`, c10's `release_cached_blocks`, the retry after a
    failed `alloc_block` when `max_split_size` is not set) and is then tried again; failing again raises
    `AllocatorOutOfMemory`. `reserved` (bytes) is what nvidia-smi counts of the allocator."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.reserved = 0
        self.peak = 0  # the most reserved so far
        self._segments: list[int] = []  # per segment: its bytes (0 once given back)
        self._free: dict[bool, list[tuple[int, int, int]]] = {True: [], False: []}  # small? -> (size, seg, offset)
        self._size: dict[tuple[int, int], int] = {}  # (seg, offset) -> block size
        self._is_free: dict[tuple[int, int], bool] = {}
        self._start: dict[tuple[int, int], int] = {}  # (seg, end offset) -> offset of the block ending there
        self._small: list[bool] = []  # per segment: small pool?

    def _put(self, seg: int, off: int, size: int, free: bool) -> None:
        self._size[(seg, off)] = size
        self._is_free[(seg, off)] = free
        self._start[(seg, off + size)] = off
        if free:
            bisect.insort(self._free[self._small[seg]], (size, seg, off))

    def _drop(self, seg: int, off: int) -> int:
        size = self._size.pop((seg, off))
        if self._is_free.pop((seg, off)):
            pool = self._free[self._small[seg]]
            del pool[bisect.bisect_left(pool, (size, seg, off))]
        del self._start[(seg, off + size)]
        return size

    def malloc(self, nbytes: int) -> tuple[int, int] | None:
        """Allocate `nbytes`; returns the block's handle (segment, offset in bytes), or None for a request of 0 bytes:
        the allocator hands out a null pointer for those and reserves nothing (`NativeCachingAllocator::allocate`
        calls `malloc` only when `size != 0`); 1-511 B take one 512 B block."""
        if nbytes <= 0:
            return None
        size = block_bytes(nbytes)
        small = size <= SMALL_SIZE
        pool = self._free[small]
        i = bisect.bisect_left(pool, (size, -1, -1))
        if i < len(pool):
            _, seg, off = pool[i]
            have = self._drop(seg, off)
        else:
            have = segment_bytes(size)
            if self.limit is not None and self.reserved + have > self.limit:
                self.release_cached()
                if self.reserved + have > self.limit:
                    raise AllocatorOutOfMemory(
                        f"a {have / MIB:,.0f} MiB segment beyond the {self.limit / MIB:,.0f} MiB limit "
                        f"({self.reserved / MIB:,.0f} MiB in use)"
                    )
            seg, off = len(self._small), 0
            self._small.append(small)
            self._segments.append(have)
            self.reserved += have
            self.peak = max(self.peak, self.reserved)
        rest = have - size
        if (rest >= MIN_BLOCK) if small else (rest > SMALL_SIZE):  # should_split
            self._put(seg, off + size, rest, True)
            have = size
        self._put(seg, off, have, False)
        return seg, off

    def release_cached(self) -> None:
        """Give back (cudaFree) every segment that is one free block: what c10's `release_cached_blocks` frees."""
        for seg, size in enumerate(self._segments):
            if size and self._is_free.get((seg, 0)) and self._size[(seg, 0)] == size:
                self._drop(seg, 0)
                self._segments[seg] = 0
                self.reserved -= size

    def free(self, handle: tuple[int, int] | None) -> None:
        """Free the block `handle`: merged with its free neighbours, it stays in its segment's pool (None, the handle
        of a 0-byte request, frees nothing)."""
        if handle is None:
            return
        seg, off = handle
        size = self._drop(seg, off)
        nxt = (seg, off + size)
        if self._is_free.get(nxt):
            size += self._drop(*nxt)
        prev = self._start.get((seg, off))
        if prev is not None and self._is_free[(seg, prev)]:
            size += self._drop(seg, prev)
            off = prev
        self._put(seg, off, size, True)


class AllocatorOutOfMemory(MemoryError):
    """A replay under a limit (`CachingAllocator(limit=...)`) needed a segment beyond it after giving back every
    free segment: CUDA out of memory."""


@dataclass(frozen=True)
class Reserved:
    """What the caching allocator reserves for one model, bytes: after loading the weights, and the most over the
    steps replayed (weights included), on a device with room for all it keeps cached. `least` (None: not worked out)
    is the smallest limit the same loop runs within, segments given back when a cudaMalloc fails (`least_reserved`):
    what a device with less memory needs (MIG fit is decided on it)."""

    weights: int
    total: int
    least: int | None = None

    @property
    def activations(self) -> int:
        return self.total - self.weights

    def at_least(self) -> Reserved:
        """The same reserve with `total` the least the loop runs in (weights kept)."""
        return self if self.least is None else Reserved(self.weights, min(self.total, self.least), self.least)


class AllocationTraceError(ValueError):
    """An allocation trace no eager loop can produce: a storage born at or after the graph's last op, or freed
    before it is born (`simulate_reserved`); the message names the storage."""


def simulate_reserved(
    weight_sizes,
    blocks,
    *,
    steps: int = 3,
    n_ops: int | None = None,
    hold_outputs: bool = True,
    limit: int | None = None,
) -> Reserved:
    """Replay an eager inference loop through `CachingAllocator`: the weights (`weight_sizes`, bytes each, in
    parameter order, as `model.to("cuda")` copies them) are allocated once and kept; then `steps` forward passes of
    the liveness trace `blocks` ((birth op, last op, bytes) per activation storage, `passes.memory.MemoryProfile`):
    the graph inputs (birth -1) are allocated once before the first pass and kept (the caller holds the batch), each
    storage is allocated when its op runs and freed after its last reader, and a pass's outputs (last >= `n_ops`)
    stay alive until the next pass has produced its own (`out = model(x)` in a loop). Without a `limit` segments
    are never given back, so the reserve is the most reserved over the steps; 3 steps reach the steady state of a
    repeated pass
    (the second pass starts with the first's free blocks; the third with the same layout as the second).

    `n_ops` is the graph's number of ops (`len(MemoryProfile.timeline)`): ops 0 .. n_ops - 1 run, and a storage
    whose last op is `n_ops` (or later) is an output. Without it, it is inferred as max(largest last op, largest
    birth + 1): right when some output is an activation (its last op is the op count); when none is (the graph
    returns a weight or an input) the storages read last are taken for outputs and kept over the next pass, so
    callers that know the op count pass it. 0-byte storages reserve nothing (`CachingAllocator.malloc`).
    `hold_outputs=False` replays a loop that drops each pass's outputs when it returns (`model(x)` with the result
    unused, as preflight's own measuring harness times it): they are freed after the last op.

    `limit`: the bytes the allocator may reserve (`CachingAllocator`); a loop that needs more raises
    `AllocatorOutOfMemory`, and `total` is then the most reserved under the limit.

    Raises AllocationTraceError (a ValueError) for a storage born at or after op `n_ops`, or freed before it is
    born."""
    alloc = CachingAllocator(limit)
    for n in weight_sizes:
        alloc.malloc(int(n))
    weights = alloc.reserved
    trace = [(int(b), int(e), int(n)) for b, e, n in blocks]
    if n_ops is None:
        n_ops = max((max(e, b + 1) for b, e, _ in trace), default=0)
    for b, e, _ in trace:
        if b >= n_ops or e < max(b, 0):
            raise AllocationTraceError(f"storage (birth {b}, last {e}) does not fit a graph of {n_ops} ops")
    for b, _, n in trace:
        if b < 0:
            alloc.malloc(n)
    born: dict[int, list[int]] = {}
    dies: dict[int, list[int]] = {}
    outputs = []
    for k, (b, e, _) in enumerate(trace):
        if b >= 0:
            born.setdefault(b, []).append(k)
            if e >= n_ops:
                outputs.append(k)
            else:
                dies.setdefault(e, []).append(k)
    held: list = []  # the previous pass's outputs
    for _ in range(steps):
        live: dict[int, tuple[int, int] | None] = {}
        for i in range(n_ops):
            for k in born.get(i, ()):
                live[k] = alloc.malloc(trace[k][2])
            for k in dies.get(i, ()):
                alloc.free(live.pop(k))
        for h in held:
            alloc.free(h)
        held = [live.pop(k) for k in outputs]
        if not hold_outputs:
            for h in held:
                alloc.free(h)
            held = []
    return Reserved(weights, alloc.peak)


def _most_live(blocks) -> int:
    """The most bytes (whole blocks) a pass of the trace `blocks` ((birth op, last op, bytes)) holds at once: the
    inputs (birth -1) beside the storages live at its fullest op."""
    delta: dict[int, int] = {}
    inputs = 0
    for b, e, n in blocks:
        size = block_bytes(int(n))
        if b < 0:
            inputs += size
            continue
        delta[b] = delta.get(b, 0) + size
        delta[e + 1] = delta.get(e + 1, 0) - size
    most = run = 0
    for i in sorted(delta):
        run += delta[i]
        most = max(most, run)
    return inputs + most


def least_reserved(weight_sizes, blocks, *, total: int | None = None, check=(), **replay) -> int:
    """The smallest limit (bytes, a multiple of 2 MiB: every segment is one) within which `simulate_reserved`'s loop
    runs, segments given back when a cudaMalloc fails: the bisection between 0 and `total` (the replay without a
    limit, which always runs; given, or replayed here) over the limits the loop runs within. `replay`: the
    keywords of `simulate_reserved` (`steps`, `n_ops`, `hold_outputs`).

    The loop does not always run within every limit above one it runs within (more room gives back later and
    fragments otherwise), so a device whose allocator has more room than the answer may still fail. `check`: the
    rooms (bytes) of the devices a decision will rest on (a GPU's and its MIG slices': usable memory less what is
    not the allocator's): each one at or above the answer is replayed, and where the loop fails within it the
    answer is searched again above that room, until every checked room at or above the answer runs."""
    top = total if total is not None else simulate_reserved(weight_sizes, blocks, **replay).total

    def runs(limit: int) -> bool:
        try:
            simulate_reserved(weight_sizes, blocks, limit=limit, **replay)
        except AllocatorOutOfMemory:
            return False
        return True

    hi = top // ROUND_LARGE
    # (lo, hi]: hi runs, lo does not: below the bytes live at once (weights, inputs and one pass's storages at its
    # fullest op, each a whole block) nothing runs
    live = sum(block_bytes(int(n)) for n in weight_sizes) + _most_live(blocks)
    lo = max(0, min(hi - 1, math.ceil(live / ROUND_LARGE) - 1))
    while True:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if runs(mid * ROUND_LARGE) else (mid, hi)
        failed = next((c for c in sorted(check) if hi * ROUND_LARGE <= c < top and not runs(c)), None)
        if failed is None:
            return hi * ROUND_LARGE
        # fails at `failed`: search above it, below the next checked room that runs (a limit c acts as c rounded
        # down to 2 MiB: every segment is a multiple), else below the whole reserve
        above = next((c for c in sorted(check) if failed < c < top and runs(c)), top)
        lo, hi = failed // ROUND_LARGE, above // ROUND_LARGE


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
    """The terms of runtime `name`: an entry of the parameter file or a way of running a model (`RUNTIMES`)."""
    table = load_memory_params(path)
    name = RUNTIMES.get(name, name)
    if name not in table:
        raise MemoryParamsError(f"no memory parameters for runtime {name!r} in {path or PARAMS_PATH}")
    return table[name]


def runtime_for(device=None, runtime: str = "eager") -> RuntimeMemory:
    """The one source of the runtime's memory terms on `device` (a `predictor.devices.Device`, MIG slices included):
    `runtime_memory(runtime)`, with the context replaced by the device's `cuda_context_mib` where its device file
    sets one (docs/devices.md): the override for a driver, CUDA or torch other than the measured one."""
    rt = runtime_memory(runtime)
    own = getattr(device, "cuda_context_mib", None)
    if own is None:
        return rt
    extra = 0.0  # an engine's own figure holds the eager context and more (NCCL, graphs' pools): the more is kept
    if RUNTIMES.get(runtime, runtime) != DEFAULT_RUNTIME and runtime in RUNTIMES:
        extra = max(rt.context_mib(device.sms) - runtime_memory(DEFAULT_RUNTIME).context_mib(device.sms), 0.0)
    return RuntimeMemory(
        float(own) + extra, 0.0, rt.reserve, f"context: {own:g} MiB from the device file of {device.key} (+ {extra:g})"
    )


def context_mib(device=None, runtime: str = "eager") -> float:
    """CUDA context (MiB, as nvidia-smi counts it beyond the allocator) of `runtime` on `device`: `runtime_for`'s
    `fixed_mib + per_sm_mib x SMs` (the device's or slice's SMs; the measured runtimes have no per-SM term)."""
    return runtime_for(device, runtime).context_mib(getattr(device, "sms", 0))


def workspace_mib(device=None, has_conv: bool = False) -> float:
    """Library workspace (MiB) on `device`: cuBLAS's (32 MiB on Hopper, else 8.125) + `CUDNN_WORKSPACE_MIB` with
    convolutions. Without a device: Hopper's, the larger."""
    return _workspace(hopper=device is None or _is_hopper(device), has_conv=has_conv)


def _is_hopper(device) -> bool:
    from .kernel_model import load_params

    return load_params().family(device.key) == "hopper"  # a MIG slice: its whole GPU's family


def _workspace(*, hopper: bool, has_conv: bool) -> float:
    return CUBLAS_WORKSPACE_MIB["hopper" if hopper else "other"] + (CUDNN_WORKSPACE_MIB if has_conv else 0.0)


@dataclass(frozen=True)
class GpuMemory:
    """Device memory of one model on one GPU or MIG slice, term by term, in MiB (2**20 bytes)."""

    weights_mib: float  # what the allocator reserves for the parameters
    activations_mib: float  # what it reserves beyond them over an inference loop
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
    reserved: Reserved | None = None,
) -> GpuMemory:
    """`GpuMemory` for a graph with `param_bytes` of weights and `peak_activation_bytes` of live activations at
    its peak, on a GPU (or slice) with `sms` SMs; `hopper` picks cuBLAS's 32 MiB workspace.

    With `reserved` (`simulate_reserved` of the graph's weights and allocation trace) the weights and activations
    are what the caching allocator reserves for them. Without it (no trace: recurrences extrapolated in their step
    count, `predictor.predict.allocator_reserve`) the weights are rounded up to a whole 2 MiB segment and the
    activations are the runtime's `reserve` x the peak, rounded the same way (a fallback fitted on the MIG
    readings, docs/power-and-memory.md)."""
    rt = runtime if runtime is not None else runtime_memory()
    if reserved is not None:
        weights, act = reserved.weights, reserved.activations
    else:
        weights = _round_large(param_bytes)
        act = _round_large(int(math.ceil(rt.reserve * max(peak_activation_bytes, 0))))
    workspace = _workspace(hopper=hopper, has_conv=has_conv)
    return GpuMemory(
        weights_mib=weights / MIB,
        activations_mib=act / MIB,
        context_mib=rt.context_mib(sms),
        workspace_mib=workspace,
        tensor_peak_mib=(param_bytes + peak_activation_bytes) / MIB,
        peak_activations_mib=peak_activation_bytes / MIB,
    )
