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
from dataclasses import dataclass

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
    """A model lowered once with its batch symbolic: the loaded module and its symbolic graph (symbol "batch")."""

    loaded: LoadedModel
    graph: SymbolicGraph

    @property
    def batch_range(self) -> tuple[int, int | None]:
        return self.graph.ranges[BATCH]

    def covers(self, batch: int) -> bool:
        lo, hi = self.batch_range
        return lo <= batch and (hi is None or batch <= hi)


def _with_batch(example_inputs: Sequence, batch: int, axes: Sequence[int | None]) -> tuple:
    """Example tensors with each batch axis set to `batch` (its first slice, expanded: a view)."""
    out = []
    for t, a in zip(example_inputs, axes, strict=True):
        if a is not None:
            t = t.narrow(a, 0, 1).expand(*t.shape[:a], batch, *t.shape[a + 1 :])
        out.append(t)
    return tuple(out)


def load_symbolic(model, example_inputs: Sequence | None = None) -> SymbolicModel:
    """Export `model` ("zoo:NAME[?...]", or an nn.Module with example inputs whose axis 0 is the batch) with the
    batch symbolic and extract its symbolic graph.

    Raises UsageError for a model symbolic analysis does not take (a file, an IRModule), AnalysisError when
    torch.export fixes the batch or the graph has a size the analysis cannot keep symbolic.
    """
    from passes import tvm_ir

    if isinstance(model, str) and model.startswith("zoo:"):
        from .frontends.zoo_frontend import load_zoo_symbolic

        loaded = load_zoo_symbolic(model[4:])
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
            batch_axes=axes,
        )
    else:
        raise UsageError("symbolic analysis takes zoo:NAME models and nn.Modules (files have fixed or named sizes)")
    if not loaded.symbols:
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
    return SymbolicModel(loaded=loaded, graph=sym)


def analyze_at(sm: SymbolicModel, batch: int, *, strict: bool = False, dtype: str | None = None) -> Report:
    """The Report at `batch`, from the symbolic graph evaluated there (every pass runs on that concrete graph)."""
    try:
        graph = sm.graph.at({BATCH: batch})
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
    lo, hi = sm.batch_range
    names = list(sm.loaded.input_names)
    return {
        "symbols": {
            BATCH: {
                "min": lo,
                "max": hi,
                "inputs": [
                    [names[i] if i < len(names) else s.name, axis] for i, s, axis in sm.graph.symbol_axes(BATCH)
                ],
            }
        },
        "method": METHOD,
        "points": list(costs.points),
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
    sym = block["symbols"][BATCH]
    width = max(len(v) for v in _LABELS.values())
    lines = [
        f"Costs as formulas of the batch, exact for {sym['min']} <= batch <= {sym['max']:,} "
        f"(fitted and checked at batch {', '.join(map(str, block['points']))}):"
    ]
    for k, f in block["totals"].items():
        lines.append(f"  {_LABELS[k]:<{width}} = {'no polynomial: computed per batch' if f is None else f['formula']}")
    steeper = sum(
        1
        for op in block["ops"]
        for k in COUNTS
        if op[k] is not None and max((sum(t["powers"].values()) for t in op[k]["terms"]), default=0) >= 2
    )
    if steeper:
        lines.append(f"  {steeper} operator counts grow faster than linearly in the batch (the JSON's symbolic.ops)")
    missing = sum(1 for op in block["ops"] for k in COUNTS if op[k] is None)
    if missing:
        lines.append(f"  {missing} operator counts have no polynomial: they are computed per batch")
    return "\n".join(lines) + "\n"
