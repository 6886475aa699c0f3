"""Symbolic analysis (docs/symbolic.md): a model loaded once with its batch symbolic, analysed at any batch from
that one graph, and its costs as exact formulas of the batch.

    sm = load_symbolic("zoo:resnet18")          # one torch.export + import, batch left symbolic
    report = analyze_at(sm, 8)                  # the Report at batch 8, from sm's graph (no export)
    costs = formulas(sm)                        # passes.symbolic.SymbolicCosts: per-op and total polynomials
    block = symbolic_json(sm, costs)            # the JSON `symbolic` block
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from passes.symbolic import COUNTS, SymbolicCosts, SymbolicError, SymbolicGraph, symbolic_costs

from .errors import AnalysisError, PreflightError, UsageError
from .frontends.loaded import LoadedModel
from .pipeline import Report, analyze_loaded

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


def _with_batch(example_inputs: Sequence, batch: int, axes: Sequence[int | None]) -> tuple:
    """Example tensors with each batch axis set to `batch` (its first slice, expanded: a view)."""
    out = []
    for t, a in zip(example_inputs, axes, strict=True):
        if a is not None:
            t = t.narrow(a, 0, 1).expand(*t.shape[:a], batch, *t.shape[a + 1 :])
        out.append(t)
    return tuple(out)


def load_symbolic(model, example_inputs: Sequence | None = None, *, seq: bool = False) -> SymbolicModel:
    """Export `model` ("zoo:NAME[?...]", or an nn.Module with example inputs whose axis 0 is the batch) with the
    batch symbolic and extract its symbolic graph. `seq`: also the sequence length ("seq") of a zoo language
    model (`zoo_symbol_axes`); when it cannot stay symbolic, the batch alone, and `SymbolicModel.notes` says why.

    Raises UsageError for a model symbolic analysis does not take (a file, an IRModule), AnalysisError when
    torch.export fixes the batch or the graph has a size the analysis cannot keep symbolic.
    """
    if seq and isinstance(model, str) and model.startswith("zoo:"):
        import gc

        from passes.tvm_ir import native_stderr_captured

        why = None
        # a failed import's TVM objects log from their C++ destructors when collected: collect them here
        with native_stderr_captured():
            try:
                return _load_symbolic(model, example_inputs, seq=True)
            except AnalysisError as exc:
                why = str(exc)
            gc.collect()
        sm = _load_symbolic(model, example_inputs)
        sm.notes.append(f"the sequence length could not stay symbolic ({why}): formulas of the batch only")
        return sm
    return _load_symbolic(model, example_inputs)


def _load_symbolic(model, example_inputs: Sequence | None = None, *, seq: bool = False) -> SymbolicModel:
    from passes import tvm_ir

    if isinstance(model, str) and model.startswith("zoo:"):
        from .frontends.zoo_frontend import load_zoo_symbolic

        loaded, values = load_zoo_symbolic(model[4:], seq=seq)
    elif (torch := sys.modules.get("torch")) is not None and isinstance(model, torch.nn.Module):
        from .frontends.torch_frontend import from_module

        if isinstance(example_inputs, torch.Tensor):
            example_inputs = (example_inputs,)
        if not example_inputs:
            raise UsageError("an nn.Module needs example inputs (a tensor or a tuple of tensors)")
        axes = [0 if getattr(t, "ndim", 0) >= 1 else None for t in example_inputs]
        loaded = from_module(
            model,
            _with_batch(example_inputs, 2, axes),  # torch specialises sizes 0 and 1
            source=f"<{type(model).__name__}>",
            symbol_axes=[{} if a is None else {a: BATCH} for a in axes],
        )
        values = {BATCH: 2}
    else:
        raise UsageError("symbolic analysis takes zoo:NAME models and nn.Modules (files have fixed or named sizes)")
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
}


def formulas_text(block: dict) -> str:
    """The `symbolic` block (`symbolic_json`) as lines of text: 'FLOPs = 3,642,975,208 x batch'."""
    symbols = block["symbols"]
    width = max(len(v) for v in _LABELS.values())
    ranges = ", ".join(f"{v['min']} <= {k} <= {v['max']:,}" for k, v in symbols.items())
    points = "; ".join(f"{k} = {', '.join(map(str, p))}" for k, p in block["points"].items())
    lines = [f"Costs as formulas of {' and '.join(symbols)}, exact for {ranges} (fitted and checked at {points}):"]
    for k, f in block["totals"].items():
        lines.append(f"  {_LABELS[k]:<{width}} = {'no polynomial: computed per point' if f is None else f['formula']}")
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
