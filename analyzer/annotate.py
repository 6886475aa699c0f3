"""Compiler-pipeline integration: a TVM module pass that attaches preflight's analysis (and prediction)
to an IRModule. With `passes.CostRecorder`, a pass instrument that records how the static costs change
as a pipeline runs:

    import tvm
    from tvm import relax
    from analyzer import AnnotateCosts, CostRecorder, read_annotation

    recorder = CostRecorder()
    with tvm.transform.PassContext(instruments=[recorder]):
        mod = tvm.transform.Sequential([AnnotateCosts(device="h100-80gb"),  # the graph as imported
                                        relax.transform.LegalizeOps()])(mod)
    read_annotation(mod)["prediction"]["latency_ms"]
    recorder.records  # one PassRecord (before / after costs) per pass that ran

The prediction is what eager PyTorch runs for the graph, so the pass belongs where the graph is still Relax operators
(before `LegalizeOps`): after legalization or fusion the operators are TIR functions (`call_tir`), which the kernel
view costs one kernel each, as a compiled TVM module would run them, not as eager PyTorch; the report then says so
in its warnings. The counts (FLOPs, bytes) are the graph's at that point either way (`CostRecorder` follows them).

`AnnotateCosts` leaves the module unchanged apart from attributes:
- module attribute `preflight` : a map of the totals and (with `predict=True`) the prediction's point values;
- module attribute `preflight.report` : the `preflight.report/1` JSON document as a string, without its
  per-operator `ops` list and the kernel list unless `include_ops=True` (so it validates against the schema
  only with them);
- attributes `preflight.flops`, `preflight.macs`, `preflight.bytes_read`, `preflight.bytes_written`,
  `preflight.peak_activation_bytes`, `preflight.op_count` (and `preflight.latency_ms`, `preflight.memory_mb`,
  `preflight.energy_j`, `preflight.device`) on the analysed function.
"""

from __future__ import annotations

import json

from passes import tvm_ir

from .errors import AnalysisError, MissingShapeError, UsageError
from .frontends import LoadedModel
from .options import check_devices
from .pipeline import analyze_loaded, predict_all

MODULE_KEY = "preflight"
REPORT_KEY = "preflight.report"
_FUNC_TOTALS = ("flops", "macs", "bytes_read", "bytes_written", "peak_activation_bytes", "op_count")


# preflight's errors raised inside the pass cross TVM's FFI as themselves (exit codes and messages kept)
tvm_ir.register_errors(UsageError, MissingShapeError, AnalysisError)


LOWERED_WARNING = (
    "{n} of the {total} operators are TIR functions (call_tir: the module was legalized or fused): each is costed as "
    "one kernel of its own, as a compiled TVM module runs it, not as eager PyTorch runs the graph; put AnnotateCosts "
    "before LegalizeOps for the eager prediction"
)


def _report(mod, func_name: str, device: str | None, latency_slo_ms: float | None):
    loaded = LoadedModel(mod=mod, framework="relax", name=func_name, source="<IRModule>", n_inputs=None)
    report = analyze_loaded(loaded, func_name=func_name, shape_hint="bind it first (relax.transform.BindSymbolicVars)")
    if device is not None:
        lowered = sum(1 for c in report.analysis.ops if c.op.startswith("relax.call_tir"))
        if lowered:
            report.warnings.append(LOWERED_WARNING.format(n=lowered, total=len(report.analysis.ops)))
        predict_all(report, [device], latency_slo_ms)
    return report


def annotate(
    mod,
    *,
    device: str | None = "h100-80gb",
    predict: bool = True,
    func_name: str = "main",
    latency_slo_ms: float | None = None,
    include_ops: bool = False,
):
    """`mod` with preflight's analysis (and prediction on `device`) attached as attributes (module docstring)."""
    if predict:
        if device is None:
            raise UsageError(
                "AnnotateCosts predicts for a GPU: give device='h100-80gb' (or predict=False: counts only)"
            )
        check_devices([device])
    report = _report(mod, func_name, device if predict else None, latency_slo_ms)
    doc = report.to_json()
    if not include_ops:
        doc.pop("ops")
        doc["kernels"].pop("list")
    t = report.analysis.totals
    summary = {k: int(getattr(t, k)) for k in _FUNC_TOTALS}
    summary.update(
        params=int(t.params),
        param_bytes=int(t.param_bytes),
        unsupported=int(sum(t.unsupported.values())),
        function=func_name,
    )
    func_attrs = {f"preflight.{k}": int(getattr(t, k)) for k in _FUNC_TOTALS}
    p = report.prediction
    if p is not None:
        point = {
            "device": p.device,
            "predictor": p.predictor,
            "latency_ms": float(p.latency_ms),
            "energy_j": float(p.energy_j),
            "memory_mb": float(p.memory_mib),
            "roofline_latency_ms": float(p.roofline_latency_ms),
            "mig_profile": p.mig.profile or "",
        }
        summary.update(point)
        func_attrs.update({f"preflight.{k}": point[k] for k in ("device", "latency_ms", "energy_j", "memory_mb")})
    mod = tvm_ir.without_attrs(mod, "preflight")  # a second annotation replaces the first, stale keys included
    mod = tvm_ir.with_function_attrs(mod, func_name, func_attrs)
    return tvm_ir.with_module_attrs(mod, {MODULE_KEY: summary, REPORT_KEY: json.dumps(doc)})


def AnnotateCosts(
    device: str | None = "h100-80gb",
    predict: bool = True,
    func_name: str = "main",
    latency_slo_ms: float | None = None,
    include_ops: bool = False,
):
    """A `tvm.transform` module pass that runs `annotate` (named like TVM's own pass constructors).

    Args:
        device: the GPU to predict for (`preflight devices`); ignored when `predict` is False.
        predict: add the prediction block (trained predictor or labelled roofline estimate).
        func_name: the Relax function to analyse.
        latency_slo_ms: the latency SLO for the MIG recommendation.
        include_ops: keep the per-op list in the `preflight.report` document (large for big models).
    """
    return tvm_ir.module_pass(
        lambda mod: annotate(
            mod,
            device=device,
            predict=predict,
            func_name=func_name,
            latency_slo_ms=latency_slo_ms,
            include_ops=include_ops,
        ),
        name="preflight.AnnotateCosts",
    )


def read_annotation(mod) -> dict | None:
    """The `preflight.report/1` document `AnnotateCosts` attached to `mod` (no `ops` unless it was run with
    `include_ops=True`), or None."""
    text = tvm_ir.module_attr(mod, REPORT_KEY)
    return None if text is None else json.loads(text)
