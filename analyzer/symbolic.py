"""Symbolic analysis (docs/symbolic.md): a model loaded once with its batch symbolic, analysed at any batch from
that one graph, and its costs as exact formulas of the batch.

    sm = load_symbolic("zoo:resnet18")          # one torch.export + import, batch left symbolic
    report = analyze_at(sm, 8)                  # the Report at batch 8, from sm's graph (no export)
    costs = formulas(sm)                        # passes.symbolic.SymbolicCosts: per-op and total polynomials
    block = symbolic_json(sm, costs)            # the JSON `symbolic` block
    solve_largest_batch(sm, prediction, analysis, batch=1)   # the largest batch that fits each MIG profile
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from passes.symbolic import COUNTS, SymbolicCosts, SymbolicError, SymbolicGraph, peak_law, symbolic_costs

from .errors import AnalysisError, PreflightError, UsageError
from .frontends.loaded import LoadedModel
from .pipeline import Report, analyze_loaded

if TYPE_CHECKING:
    from passes.memory import Fusion

BATCH = "batch"
METHOD = (
    "each count is fitted by exact rational interpolation at the sample points (the lowest degree, at most "
    "4, through the first ones) and accepted only if it equals the concrete count at every other sample point; "
    "a count that fails has no formula (null) and is computed per point"
)


@dataclass
class SymbolicModel:
    """A model lowered once with its batch (and maybe its sequence length, "seq") symbolic: the loaded module,
    its symbolic graph and each symbol's value in the model as given (batch 2; seq: the spec's seq_len)."""

    loaded: LoadedModel
    graph: SymbolicGraph
    values: dict[str, int]
    notes: list[str] = field(default_factory=list)  # what could not stay symbolic, for the report's warnings
    _fused: dict = field(default_factory=dict, repr=False, compare=False)  # dtype -> `fused_at`'s groups

    @property
    def batch_range(self) -> tuple[int, int | None]:
        return self.graph.ranges[BATCH]

    def covers(self, batch: int) -> bool:
        lo, hi = self.batch_range
        return lo <= batch and (hi is None or batch <= hi)

    def point(self, batch: int | None = None, **values: int) -> dict[str, int]:
        """{symbol: value} for every symbol: `batch`, `values`, and the model's own value of the others."""
        out = {**self.values, **values}
        if batch is not None:
            out[BATCH] = batch
        return out


def load_symbolic(
    model,
    example_inputs: Sequence | None = None,
    *,
    seq: bool = False,
    inputs: Sequence | None = None,
    half_casts: str | None = None,
) -> SymbolicModel:
    """Export `model` ("zoo:NAME[?...]", or an nn.Module with example inputs whose axis 0 is the batch) with the
    batch symbolic and extract its symbolic graph. `seq`: also the sequence length ("seq") of a zoo language
    model or of `zoo_frontend.SEQ_FAMILIES` (`zoo_symbol_axes`); when it cannot stay symbolic, the batch alone,
    and `SymbolicModel.notes` says why.
    A `.pt2`, ONNX or Paddle file is imported once with its own dynamic dims (`frontends.load_symbolic_file`:
    dimension 0 is the batch); `inputs` (`--input` specs) give the other symbols' values.

    Raises UsageError for a model symbolic analysis does not take (another file, an IRModule; `inputs` with a
    zoo model or an nn.Module), AnalysisError when torch.export fixes the batch or the graph has a size the
    analysis cannot keep symbolic. `half_casts`: the half dtype the model will be costed in (`frontends.load`).
    """
    if inputs and not is_file(model):
        raise UsageError("symbolic analysis takes the batch as its symbol: give --batch, not --input")
    if seq and isinstance(model, str) and model.startswith("zoo:"):
        import gc

        from passes.tvm_ir import native_stderr_captured

        why = None
        # a failed import's TVM objects log from their C++ destructors when collected: collect them here
        with native_stderr_captured():
            try:
                return _load_symbolic(model, example_inputs, seq=True, half_casts=half_casts)
            except AnalysisError as exc:
                why = str(exc)
            gc.collect()
        sm = _load_symbolic(model, example_inputs, half_casts=half_casts)
        sm.notes.append(f"the sequence length could not stay symbolic ({why}): formulas of the batch only")
        return sm
    return _load_symbolic(model, example_inputs, inputs=inputs, half_casts=half_casts)


def is_file(model) -> bool:
    """Whether `model` names a model file (a path or a string that is no zoo spec)."""
    return isinstance(model, str | Path) and not str(model).startswith("zoo:")


def takes_file(model) -> bool:
    """Whether `model` names a file of a format whose own dynamic dims symbolic analysis keeps (`.pt2`, `.onnx`, a
    Paddle inference model: `frontends.takes_symbolic`), or a transformers config (exported with its batch and
    sequence symbolic), `--input` giving those other than the batch."""
    from .frontends import takes_symbolic

    return is_file(model) and takes_symbolic(model)


def _load_symbolic(
    model, example_inputs: Sequence | None = None, *, seq: bool = False, inputs=None, half_casts=None
) -> SymbolicModel:
    from passes import tvm_ir

    if is_file(model):
        from .frontends import load_symbolic_file

        loaded, values = load_symbolic_file(Path(model), inputs, half_casts)
    elif isinstance(model, str) and model.startswith("zoo:"):
        from .frontends.zoo_frontend import load_zoo_symbolic

        loaded, values = load_zoo_symbolic(model[4:], seq=seq, half_casts=half_casts)
    elif (torch := sys.modules.get("torch")) is not None and isinstance(model, torch.nn.Module):
        from .frontends import module_examples, with_batch
        from .frontends.torch_frontend import from_module

        example_inputs = module_examples(example_inputs)
        if not example_inputs:
            raise UsageError("an nn.Module needs example inputs (a tensor or a tuple of tensors)")
        axes = [0 if getattr(t, "ndim", 0) >= 1 else None for t in example_inputs]
        loaded = from_module(
            model,
            with_batch(example_inputs, 2, axes),  # torch specialises sizes 0 and 1
            source=f"<{type(model).__name__}>",
            symbol_axes=[{} if a is None else {a: BATCH} for a in axes],
            half_casts=half_casts,
        )
        values = {BATCH: 2}
    else:
        raise UsageError(
            "symbolic analysis takes zoo:NAME models, nn.Modules (re-exported with the batch left symbolic), "
            "transformers config.json files and .pt2, .onnx and Paddle files saved with a dynamic batch"
        )
    if BATCH not in {user for user, _, _ in loaded.symbols.values()}:
        raise AnalysisError(f"{loaded.source}: torch.export fixed the batch size; no symbolic export")
    try:
        graph = tvm_ir.extract(loaded.mod, n_inputs=loaded.n_inputs, symbolic=True)
        aliases = {internal: user for internal, (user, _, _) in loaded.symbols.items()}
        ranges = {}
        for user, lo, hi in loaded.symbols.values():
            old = ranges.get(user, (lo, hi))
            ranges[user] = (max(lo, old[0]), min(hi, old[1]))
        sym = SymbolicGraph(graph, ranges=ranges, aliases=aliases)
    except (tvm_ir.IRError, SymbolicError) as exc:
        raise AnalysisError(f"{loaded.source}: no symbolic analysis: {exc}") from exc
    values = {k: v for k, v in values.items() if k in ranges}
    return SymbolicModel(loaded=loaded, graph=sym, values=values)


def require_values(sm: SymbolicModel) -> None:
    """MissingShapeError unless every symbol but the batch has a value (a file's other dynamic dims: `--input`)."""
    from .errors import MissingShapeError

    names = list(sm.loaded.input_names)
    for sym in sm.graph.symbols:
        if sym == BATCH or sym in sm.values:
            continue
        i, source, axis = sm.graph.symbol_axes(sym)[0]
        name = names[i] if i < len(names) else source.name
        dims = ["?" if a == 0 else "N" if a == axis else "?" for a in range(len(source.tensor.shape))]
        raise MissingShapeError(
            f"input '{name}' dimension {axis} ('{sym}') is dynamic: set it with --input {name}:{'x'.join(dims)} "
            "(N a size; it stays a symbol of the formulas, the rest of the output is at that size)"
        )


def analyze_at(
    sm: SymbolicModel, batch: int | None = None, *, strict: bool = False, dtype: str | None = None, **values: int
) -> Report:
    """The Report at `batch` (and `values` of the other symbols; by default the model's own), from the symbolic
    graph evaluated there (every pass runs on that concrete graph)."""
    try:
        graph = sm.graph.at(sm.point(batch, **values))
    except SymbolicError as exc:
        raise UsageError(f"{sm.loaded.source}: {exc}") from exc
    return analyze_loaded(sm.loaded, strict=strict, dtype=dtype, graph=graph)


def formulas(sm: SymbolicModel, *, dtype: str | None = None) -> SymbolicCosts:
    """Every per-op count and total of `sm` as an exact polynomial in the batch (`passes.symbolic.symbolic_costs`),
    with the pipeline's dtype retargeting and parameter count."""

    def analyze(graph):
        return analyze_loaded(sm.loaded, dtype=dtype, graph=graph).analysis

    try:
        return symbolic_costs(sm.graph, analyze)
    except PreflightError:
        raise
    except SymbolicError as exc:
        raise AnalysisError(f"{sm.loaded.source}: {exc}") from exc


def _formula(p) -> dict | None:
    return None if p is None else {"formula": str(p), "terms": p.to_json()}


def symbolic_json(sm: SymbolicModel, costs: SymbolicCosts) -> dict:
    """The JSON `symbolic` block: the symbol, its range and inputs, the sample points, totals' and per-op formulas
    (each {"formula": text, "terms": [{"coefficient", "powers"}]}, or null where no polynomial passed the check)."""
    names = list(sm.loaded.input_names)
    return {
        "symbols": {
            sym: {
                "min": lo,
                "max": hi,
                "value": sm.values.get(sym),
                "inputs": [[names[i] if i < len(names) else s.name, axis] for i, s, axis in sm.graph.symbol_axes(sym)],
            }
            for sym, (lo, hi) in sm.graph.ranges.items()
        },
        "method": METHOD,
        "points": {k: list(v) for k, v in costs.points.items()},
        "exact": costs.exact,
        "totals": {k: _formula(p) for k, p in costs.totals.items()},
        "ops": [
            {"index": i, "name": node.name, "op": node.op, **{k: _formula(p) for k, p in op.items()}}
            for (i, op), node in zip(enumerate(costs.ops), sm.graph.graph.ops, strict=True)
            if any(p is None or p.degree > 0 for p in op.values())  # ops whose counts do not depend on the batch
        ],
    }


_LABELS = {
    "flops": "FLOPs",
    "macs": "MACs",
    "bytes_read": "bytes read",
    "bytes_written": "bytes written",
    "peak_activation_bytes": "peak activations (bytes)",
    "params": "parameters",
    "param_bytes": "parameter bytes",
    "kv_cache_bytes": "KV cache (bytes)",
}


def formulas_text(block: dict, title: str = "Costs") -> str:
    """The `symbolic` block (`symbolic_json`) as lines of text: 'FLOPs = 3,642,975,208 x batch'; `title` starts
    the first line ('Costs as formulas of batch, exact for ...'). `preflight llm` prints its steps' blocks
    (`analyzer.llm.context_formulas`) with it too."""
    symbols = block["symbols"]
    width = max(len(_LABELS[k]) for k in block["totals"])
    ranges = ", ".join(f"{v['min']} <= {k} <= {v['max']:,}" for k, v in symbols.items())
    points = "; ".join(f"{k} = {', '.join(map(str, p))}" for k, p in block["points"].items())
    lines = [f"{title} as formulas of {' and '.join(symbols)}, exact for {ranges} (fitted and checked at {points}):"]
    for k, f in block["totals"].items():
        lines.append(f"  {_LABELS[k]:<{width}} = {'no polynomial: computed per point' if f is None else f['formula']}")
    if block.get("peak_law"):  # the liveness peak derived, not fitted (passes.symbolic.peak_law)
        lines.append(f"  peak activations (bytes), liveness over the execution order = {block['peak_law']}")
    for sym in symbols:
        power = {}
        for op in block["ops"]:
            top = max((t["powers"].get(sym, 0) for k in COUNTS if op[k] is not None for t in op[k]["terms"]), default=0)
            if top >= 2:
                power[top] = power.get(top, 0) + 1
        for p, n in sorted(power.items()):
            lines.append(f"  {n} operators have counts that grow as {sym}^{p} (the JSON's symbolic.ops)")
    missing = sum(1 for op in block["ops"] for k in COUNTS if op[k] is None)
    if missing:
        lines.append(f"  {missing} operator counts have no polynomial: they are computed per point")
    return "\n".join(lines) + "\n"


SOLVE_MAX = 2**24  # the largest batch `solve_largest_batch` looks at (as analyzer.sweep.SOLVE_MAX)
SOLVE_METHOD = (
    "memory: the liveness peak of the activations as a maximum of exact polynomials of the "
    "batch (passes.symbolic.peak_law) plus the memory model's weights, CUDA context, workspace and allocator terms, "
    "evaluated exactly at each batch; exponential search from the export's lowest batch, then bisection"
)
SOLVE_METHOD_PROBE = (
    "memory: the liveness pass on the symbolic graph evaluated at each batch (no formula: "
    "autocast, or a size that is no polynomial) plus the memory model's terms; exponential search, then bisection"
)


def peak_function(sm: SymbolicModel, dtype: str | None = None):
    """(batch -> peak live activation bytes, the PeakLaw or None) of `sm` analysed with `dtype`: the law's exact
    value (`passes.symbolic.peak_law` on the graph the pipeline prepares), or, where no law is built (autocast,
    which inserts casts by size; a size that is no polynomial), the liveness pass on the graph evaluated at the
    batch. Either way the same number as `analyze_at(sm, batch, dtype=dtype)`'s peak; no export. The law's
    function raises AnalysisError where the law has no value (a peak that is not a whole number of bytes): the
    callers then leave the largest batch unsolved with a warning (`predict --largest-batch`) or probe with full
    analyses instead (the report's sweep, `analyzer.sweep._solve_by_formula`)."""
    from passes.graph import AMP_DTYPES

    from .pipeline import prepare_graph

    if dtype not in AMP_DTYPES:
        try:
            law = peak_law(sm.graph, prepare_graph(sm.loaded, sm.graph.graph, dtype), fused_at(sm, dtype))
        except SymbolicError:
            law = None
        if law is not None:

            def at(b: int) -> int:
                try:
                    return law.at(sm.point(b))
                except SymbolicError as exc:
                    raise AnalysisError(f"{sm.loaded.source}: no peak formula at batch {b}: {exc}") from exc

            return at, law

    def probe(b: int) -> int:
        return liveness_at(sm, b, dtype).peak_bytes

    return probe, None


def fused_at(sm: SymbolicModel, dtype: str | None = None) -> Fusion:
    """The kernels that run several ops at once in `sm`'s graph prepared with `dtype` (`passes.analysis.fused_in`),
    as the kernel view decides them at the export's lowest batch from 2 (torch specialises 1): a structure, the same
    at every batch (the attention backend depends on the head size, dtype and lengths, not on the batch); computed
    once. Not for autocast dtypes, whose casts (and so op indices) depend on sizes: `liveness_at` decides per batch."""
    from passes.analysis import fused_in

    from .pipeline import attention_patterns, prepare_graph

    if dtype not in sm._fused:
        lo, hi = sm.batch_range
        b = lo if hi is not None and hi < 2 else max(lo, 2)
        graph = prepare_graph(sm.loaded, sm.graph.at(sm.point(b)), dtype)
        sm._fused[dtype] = fused_in(graph, attention_patterns(sm.loaded))
    return sm._fused[dtype]


def liveness_at(sm: SymbolicModel, batch: int, dtype: str | None = None):
    """`passes.memory.MemoryProfile` of `sm`'s graph evaluated at `batch` and prepared with `dtype`, as
    `analyze_at` finds it (with `fused_at`'s kernels; under autocast the kernel view decided at `batch`); no
    export."""
    from passes.analysis import fused_in
    from passes.graph import AMP_DTYPES
    from passes.memory import liveness

    from .pipeline import attention_patterns, prepare_graph

    graph = prepare_graph(sm.loaded, sm.graph.at(sm.point(batch)), dtype)
    fused = fused_in(graph, attention_patterns(sm.loaded)) if dtype in AMP_DTYPES else fused_at(sm, dtype)
    return liveness(graph, fused)


def solve_largest_batch(sm: SymbolicModel, prediction, analysis, *, batch: int, dtype: str | None = None):
    """`predictor.mig.LargestBatch`: the largest batch whose predicted memory fits each MIG profile of
    `prediction.device` (or the one slice it names) and the whole GPU, solved from `sm` without exporting again.

    `analysis` and `prediction` are the model's at `batch` (with `dtype`): the weights and whether convolutions
    run (cuDNN's workspace) come from them, and they check the solve: the memory model at the analysis's own peak
    must give the prediction's upper memory bound (it does not when a trained predictor predicted the memory:
    AnalysisError), and the peak formula at `batch` must equal the analysis's peak (when `batch` is in the export's
    range). Memory is the figure the MIG rule takes (`Prediction.memory_fit_mib`: the interval's upper end with the
    least reserve the allocator runs the loop in, `predictor.predict.fit_memory_mib`; `predictor.mig.fits`). Where the
    prediction replays the caching allocator on the analysis's allocation trace (`predictor.predict.allocator_reserve`)
    so does the solve, on the trace of the graph evaluated at each batch it tries (the liveness pass; no export):
    `monotone` then speaks for the peak, and the replayed reserve is assumed to grow with it. Memory only: the
    latency SLO is `solve_within_slo`'s."""
    from predictor.devices import get_device
    from predictor.mig import LargestBatch, fits, largest_fitting_batch
    from predictor.predict import allocator_reserve, allocator_rooms, fit_memory_mib, replay_reserve

    device = get_device(prediction.device)
    param_bytes = analysis.totals.param_bytes
    has_conv = any(k.kind == "conv" for k in getattr(analysis, "launched_kernels", analysis.kernels))
    own_peak = analysis.totals.peak_activation_bytes
    own_high = prediction.fit_mib
    rooms = allocator_rooms(device, has_conv)  # the targets the least reserve is checked on, as `predict` does
    own_reserved = allocator_reserve(analysis, rooms=rooms)  # as `predict` costs it: replayed, or the factor (None)
    replayed = own_reserved is not None
    if fit_memory_mib(param_bytes, own_peak, device, has_conv, own_reserved) != own_high:
        raise AnalysisError(
            f"the memory on {device.key} is predicted by {prediction.predictor}, not the memory model the solve "
            f"evaluates: no largest batch solved"
        )
    peak_at, law = peak_function(sm, dtype)
    if sm.covers(batch) and peak_at(batch) != own_peak:
        raise AnalysisError(f"{sm.loaded.source}: the symbolic peak at batch {batch} differs from the analysis's")
    lo, hi_range = sm.batch_range
    hi = min(hi_range or SOLVE_MAX, SOLVE_MAX)
    peaks: dict[int, int] = {}

    highs: dict[int, float] = {}

    def need(b: int) -> float:
        if b not in highs:
            peaks[b] = peak_at(b)
            reserved = None
            if replayed:  # the allocator replayed on the trace at b, as `predict` would at batch b
                memory = liveness_at(sm, b, dtype)
                reserved = replay_reserve(memory, param_bytes, rooms=rooms)
            highs[b] = fit_memory_mib(param_bytes, peaks[b], device, has_conv, reserved)
        return highs[b]

    if replayed and sm.covers(batch) and need(batch) != own_high:  # the graph evaluated there replays as predict did
        raise AnalysisError(f"{sm.loaded.source}: the symbolic graph's memory at batch {batch} differs from predict's")
    peaks.clear()  # the check is not one of the search's evaluations
    highs.clear()

    def solve(usable_mib: float) -> int | None:
        best, _ = largest_fitting_batch(need, usable_mib, lo, hi)
        if best is None and batch < lo and fits(usable_mib, own_high):
            return batch  # batch 1, below the export's range, is the analysis's own
        return best

    if device.parent is not None:  # a MIG slice as the target: that profile alone
        name = device.slice_profile
        per_profile, full = {name: solve(device.memory_mib)}, None
    else:
        per_profile = {p.name: solve(p.memory_mib) for p in device.mig}
        full = solve(device.memory_mib)
    monotone = law is not None and law.monotone
    return LargestBatch(
        per_profile,
        full,
        lo,
        hi,
        None if law is None else str(law),
        monotone,
        len(peaks),
        SOLVE_METHOD if law is not None else SOLVE_METHOD_PROBE,
        whole_gpu=device.parent is None,
    )


def solve_within_slo(sm: SymbolicModel, prediction, fitting, *, batch: int, latency_slo_ms: float, dtype=None):
    """`predictor.mig.SloBatch`: per MIG profile of `prediction.device` (or the one slice it names) and the whole
    GPU, the largest batch up to the one that fits there (`fitting`, the `LargestBatch` of `solve_largest_batch`)
    whose predicted latency there is at most `latency_slo_ms` (ms). Each batch tried is the symbolic graph evaluated
    there (`analyze_at`: the kernel view re-decided) and predicted as `prediction` was (device, matmul precision,
    host factor), one cache of predicted batches for every profile. `batch` is the model's own (that of
    `prediction`): predicted from the graph it must come out as `prediction` (AnalysisError otherwise); below the
    graph's range (batch 1) it is the answer where nothing in the range meets the SLO and it does.

    Latency is not proven to grow with the batch: an answer below its memory cap meets the SLO and the next batch
    does not; an answer at the cap meets it and the next batch does not fit."""
    from predictor.devices import get_device
    from predictor.mig import SloBatch, largest_batch_where
    from predictor.predict import DEFAULT_MATMUL_PRECISION, host_overhead_of_prediction, predict

    kwargs = {
        "matmul_precision": prediction.runtime.get("matmul_precision", DEFAULT_MATMUL_PRECISION),
        "host_overhead": host_overhead_of_prediction(prediction),
    }
    slice_target = get_device(prediction.device).parent is not None
    latencies: dict[int, dict[str | None, float]] = {}

    def latency(b: int) -> dict[str | None, float]:
        """{profile: ms on it, None: the whole GPU (or the target slice)} at batch b."""
        if b not in latencies:
            p, _ = predict(analyze_at(sm, b, dtype=dtype).analysis, prediction.device, **kwargs)
            latencies[b] = {**({} if slice_target else dict(p.mig.latency_ms or {})), None: p.latency_ms}
        return latencies[b]

    if sm.covers(batch) and latency(batch)[None] != prediction.latency_ms:
        raise AnalysisError(f"{sm.loaded.source}: the symbolic graph's latency at batch {batch} differs from predict's")
    lo = fitting.lo
    own = {None: prediction.latency_ms, **({} if slice_target else dict(prediction.mig.latency_ms or {}))}

    def within(profile: str | None, top: int | None) -> int | None:
        """The largest batch in lo..top whose latency on `profile` is within the SLO; the model's own batch below
        the range where none is and it meets the SLO; None when top is None (nothing fits) or nothing meets it."""
        best = None
        if top is not None and top >= lo:
            best, _ = largest_batch_where(lambda b: latency(b).get(profile, math.inf) <= latency_slo_ms, lo, top)
        if best is None and top is not None and batch < lo and own.get(profile, math.inf) <= latency_slo_ms:
            return batch
        return best

    if slice_target:  # the target slice's latency is the prediction's own
        answers, whole = {name: within(None, top) for name, top in fitting.per_profile.items()}, None
    else:
        answers = {name: within(name, top) for name, top in fitting.per_profile.items()}
        whole = within(None, fitting.full_gpu)
    method = "exponential search and bisection on the latency predicted at each batch from the symbolic graph"
    return SloBatch(float(latency_slo_ms), answers, whole, len(latencies), method)
