"""Compiler-pipeline integration: a TVM module pass that attaches preflight's analysis (and prediction)
to an IRModule, and a pass instrument that records how the static costs change as a pipeline runs.

    import tvm
    from tvm import relax
    from passes import AnnotateCosts, CostRecorder, read_annotation

    recorder = CostRecorder()
    with tvm.transform.PassContext(instruments=[recorder]):
        mod = tvm.transform.Sequential([relax.transform.LegalizeOps(),
                                        AnnotateCosts(device="h100-80gb")])(mod)
    read_annotation(mod)["prediction"]["latency_ms"]
    recorder.records  # one PassRecord (before / after costs) per pass that ran

`AnnotateCosts` leaves the module unchanged apart from attributes:
- module attribute `preflight` : a map of the totals and (with `predict=True`) the prediction's point values;
- module attribute `preflight.report` : the `preflight.report/1` JSON document as a string, without its
  per-operator `ops` list unless `include_ops=True` (so it validates against the schema only with them);
- attributes `preflight.flops`, `preflight.macs`, `preflight.bytes_read`, `preflight.bytes_written`,
  `preflight.peak_activation_bytes`, `preflight.op_count` (and `preflight.latency_ms`, `preflight.memory_mb`,
  `preflight.energy_j`, `preflight.device`) on the analysed function.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from . import tvm_ir
from .costs import TIR_CALLS

MODULE_KEY = "preflight"
REPORT_KEY = "preflight.report"
_FUNC_TOTALS = ("flops", "macs", "bytes_read", "bytes_written", "peak_activation_bytes", "op_count")


def _register_errors() -> None:
    from analyzer.errors import AnalysisError, MissingShapeError, UsageError

    tvm_ir.register_errors(UsageError, MissingShapeError, AnalysisError)


_register_errors()


def _report(mod, func_name: str, device: str | None, latency_slo_ms: float | None):
    from analyzer.api import add_prediction, analyze_loaded
    from analyzer.frontends import LoadedModel

    loaded = LoadedModel(mod=mod, framework="relax", name=func_name, source="<IRModule>", n_inputs=None)
    report = analyze_loaded(loaded, func_name=func_name, shape_hint="bind it first (relax.transform.BindSymbolicVars)")
    if device is not None:
        report.prediction = add_prediction(report, device, latency_slo_ms)
    return report


def annotate(mod, *, device: str | None = "h100-80gb", predict: bool = True, func_name: str = "main",
             latency_slo_ms: float | None = None, include_ops: bool = False):
    """`mod` with preflight's analysis (and prediction on `device`) attached as attributes (module docstring)."""
    if predict:
        from analyzer.api import check_devices

        check_devices([device or ""])
    report = _report(mod, func_name, device if predict else None, latency_slo_ms)
    doc = report.to_json()
    if not include_ops:
        doc.pop("ops")
    t = report.analysis.totals
    summary = {k: int(getattr(t, k)) for k in _FUNC_TOTALS}
    summary.update(params=int(t.params), param_bytes=int(t.param_bytes),
                   unsupported=int(sum(t.unsupported.values())), function=func_name)
    func_attrs = {f"preflight.{k}": int(getattr(t, k)) for k in _FUNC_TOTALS}
    p = report.prediction
    if p is not None:
        point = {"device": p["device"], "predictor": p["predictor"], "latency_ms": float(p["latency_ms"]),
                 "energy_j": float(p["energy_j"]), "memory_mb": float(p["memory_mb"]),
                 "roofline_latency_ms": float(p["roofline_latency_ms"]), "mig_profile": p["mig"]["profile"] or ""}
        summary.update(point)
        func_attrs.update({f"preflight.{k}": point[k] for k in ("device", "latency_ms", "energy_j", "memory_mb")})
    mod = tvm_ir.without_attrs(mod, "preflight")  # a second annotation replaces the first, stale keys included
    mod = tvm_ir.with_function_attrs(mod, func_name, func_attrs)
    return tvm_ir.with_module_attrs(mod, {MODULE_KEY: summary, REPORT_KEY: json.dumps(doc)})


def AnnotateCosts(device: str | None = "h100-80gb", predict: bool = True, func_name: str = "main",  # noqa: N802
                  latency_slo_ms: float | None = None, include_ops: bool = False):
    """A `tvm.transform` module pass that runs `annotate` (named like TVM's own pass constructors).

    Args:
        device: the GPU to predict for (`preflight devices`); ignored when `predict` is False.
        predict: add the prediction block (trained predictor or labelled roofline estimate).
        func_name: the Relax function to analyse.
        latency_slo_ms: the latency SLO for the MIG recommendation.
        include_ops: keep the per-op list in the `preflight.report` document (large for big models).
    """
    return tvm_ir.module_pass(
        lambda mod: annotate(mod, device=device, predict=predict, func_name=func_name,
                             latency_slo_ms=latency_slo_ms, include_ops=include_ops),
        name="preflight.AnnotateCosts")


def read_annotation(mod) -> dict | None:
    """The `preflight.report/1` document `AnnotateCosts` attached to `mod` (no `ops` unless it was run with
    `include_ops=True`), or None."""
    text = tvm_ir.module_attr(mod, REPORT_KEY)
    return None if text is None else json.loads(text)


# ---- pass instrument ----------------------------------------------------------------------------

@dataclass(frozen=True)
class CostSnapshot:
    """Static costs of one function at one point of a pipeline; `error` says why they could not be taken."""

    flops: int = 0
    macs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    peak_activation_bytes: int = 0
    op_count: int = 0
    tir_calls: int = 0
    unsupported: int = 0
    error: str | None = None

    @classmethod
    def of(cls, mod, func_name: str = "main") -> CostSnapshot:
        from .analysis import analyze_graph

        try:
            a = analyze_graph(tvm_ir.extract(mod, func_name))
        except Exception as exc:  # noqa: BLE001 - a snapshot must never break the user's build
            return cls(error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200])
        t = a.totals
        tir = sum(1 for op in a.graph.ops if op.op in TIR_CALLS and not op.weight_only)
        return cls(t.flops, t.macs, t.bytes_read, t.bytes_written, t.peak_activation_bytes, t.op_count, tir,
                   sum(t.unsupported.values()))


_DELTA_FIELDS = ("flops", "macs", "bytes_read", "bytes_written", "peak_activation_bytes", "op_count", "tir_calls",
                 "unsupported")


@dataclass(frozen=True)
class PassRecord:
    """One pass of a pipeline: its name, nesting depth, and the costs before and after it."""

    name: str
    depth: int
    before: CostSnapshot
    after: CostSnapshot

    @property
    def delta(self) -> dict[str, int]:
        """after - before for every cost that changed (empty when the pass changed none, or a side failed)."""
        if self.before.error or self.after.error:
            return {}
        d = {f: getattr(self.after, f) - getattr(self.before, f) for f in _DELTA_FIELDS}
        return {k: v for k, v in d.items() if v}

    def to_json(self) -> dict:
        from dataclasses import asdict

        return {"pass": self.name, "depth": self.depth, "before": asdict(self.before), "after": asdict(self.after),
                "delta": self.delta}


class _CostRecorder:
    """Records a `PassRecord` for every pass that runs (use `CostRecorder()`, the TVM instrument)."""

    def __init__(self, func_name: str = "main", only: tuple[str, ...] | None = None):
        self.func_name = func_name
        self.only = None if only is None else set(only)
        self.records: list[PassRecord] = []
        self._stack: list[CostSnapshot | None] = []
        self._last: tuple[object, CostSnapshot] | None = None
        self._busy = False  # taking a snapshot runs TVM passes (the TIR FLOP estimator): not the user's

    def _snapshot(self, mod) -> CostSnapshot:
        if self._last is not None and self._last[0].same_as(mod):
            return self._last[1]
        self._busy = True
        try:
            snap = CostSnapshot.of(mod, self.func_name)
        finally:
            self._busy = False
        self._last = (mod, snap)
        return snap

    def _wanted(self, mod, info) -> bool:
        """A pass named in `only` (all by default), on a module that has the function (TVM's inner builds,
        e.g. FoldConstant compiling a subgraph, run TIR-only modules through passes too: not recorded)."""
        return (self.only is None or tvm_ir.pass_name(info) in self.only) and self.func_name in \
            tvm_ir.function_names(mod)

    def run_before_pass(self, mod, info) -> None:
        if self._busy:
            return
        self._stack.append(self._snapshot(mod) if self._wanted(mod, info) else None)

    def run_after_pass(self, mod, info) -> None:
        if self._busy:
            return
        before = self._stack.pop() if self._stack else None
        if before is not None:
            self.records.append(PassRecord(tvm_ir.pass_name(info), len(self._stack), before, self._snapshot(mod)))

    def to_json(self) -> list[dict]:
        return [r.to_json() for r in self.records]


CostRecorder = tvm_ir.pass_instrument(_CostRecorder)
CostRecorder.__doc__ = """TVM pass instrument: `CostRecorder(func_name="main", only=None)`.

Pass it to `tvm.transform.PassContext(instruments=[...])`; after the pipeline, `.records` holds one
`PassRecord` per pass (in the order the passes finished; `only` limits it to the named passes), with the
function's FLOPs, bytes, peak activation bytes, op and `call_tir` counts before and after the pass.
A side the analyser cannot read (e.g. symbolic shapes) has `error` set; the pipeline itself is never
interrupted."""
