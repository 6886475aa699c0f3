"""The composition: frontends -> passes -> predictor, in one place.

`analyzer.api` (the public front), the batch sweep, the report and the TVM pass `AnnotateCosts` all run a
model through these functions, so the three layers meet here and nowhere else:

    load (frontends) -> analyze_loaded (passes) -> add_prediction (predictor) -> Report
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from passes.analysis import Analysis, analyze_graph, extrapolate_layers, extrapolate_steps, gathered_expert_matmuls
from passes.graph import (
    AMP_DTYPES,
    OpGraph,
    dtype_bytes,
    with_autocast,
    with_compute_dtype,
    with_eager_copies,
    with_float_dtype,
    with_library_calls,
    with_own_dtypes,
    with_weight_only_folded,
)
from predictor.devices import get_device
from predictor.kernel_model import DEFAULT_MATMUL_PRECISION, KernelParamsError
from predictor.predict import Prediction, predictor_info
from predictor.predict import predict as run_predictor

from .errors import AnalysisError, MissingShapeError, StrictFindingError, UsageError
from .frontends import InputSpec, LoadedModel, load
from .options import check_dtype, check_host_overhead, check_matmul_precision, half_of

TORCH_EXPORTED = ("torch", "zoo", "transformers")  # frameworks whose graphs come from torch.export
# frameworks whose runtime folds constant subgraphs when it loads the model (ONNX Runtime, TensorFlow, TFLite, Paddle
# Inference): every weight-only op is folded there; graphs from PyTorch count the ones that compute, as eager PyTorch
# runs them on every call (docs/weight_only.md)
FOLDING_RUNTIMES = ("onnx", "tensorflow", "tflite", "paddle")


@dataclass
class Report:
    """One model's analysis, and its predictions when asked for, ready for `to_json()` or the renderers."""

    model: dict  # {"source", "framework", "name"}
    inputs: list[dict]  # [{"name", "shape", "dtype"}] in the model's input order
    analysis: Analysis
    warnings: list[str] = field(default_factory=list)
    prediction: Prediction | None = None  # the first device's prediction
    predictions: list[Prediction] = field(default_factory=list)  # one per device (report); [0] is `prediction`
    predictors: dict[str, dict] = field(default_factory=dict)  # predictor name -> what it is, its evaluation
    sweep: dict | None = None  # the batch-size sweep block (report)
    symbolic: dict | None = None  # the formulas block (analyze --symbolic: analyzer.symbolic.symbolic_json)
    verdict: Verdict | None = None  # the budget gate's verdict (predict with budgets)

    @property
    def totals(self):
        return self.analysis.totals

    def to_json(self) -> dict:
        from .render import report_json

        return report_json(self)


def _unsupported_message(unsupported: dict[str, int]) -> str:
    return ", ".join(f"{k} ({v})" for k, v in unsupported.items())


def _symbol_source(loaded: LoadedModel, func_name: str, symbol: str) -> str:
    """Which input dimensions a dynamic size comes from ("s77" means nothing to a user): ", from input 'x' axis 0"."""
    import re

    from passes.tvm_ir import symbolic_dims

    try:
        dims = symbolic_dims(loaded.mod, func_name)
    except Exception:  # noqa: BLE001 - only a better message is at stake
        return ""
    hits = [
        f"input '{name}' axis {axis}"
        for name, axis, sym in dims
        if re.search(rf"(?<![\w]){re.escape(sym)}(?![\w])", symbol)
    ]
    return f", from {' and '.join(hits)}" if hits else ""


def attention_patterns(loaded: LoadedModel) -> str:
    """Which decomposed matmul-softmax-matmul patterns the kernel view fuses into one attention kernel
    (`passes.kernels.kernel_view`), by where the graph comes from.

    Graphs from torch.export keep torch's SDPA signature ("sdpa"). ONNX files torch's exporters wrote (producer
    "pytorch", TorchScript or dynamo) spell `scaled_dot_product_attention` with Q and K^T each scaled by
    sqrt(scale) before the first MatMul, and attention the model writes out as the model wrote it, which eager
    PyTorch runs as separate kernels: fuse only the SDPA spelling ("torch-onnx"). Other producers (tf2onnx,
    paddle2onnx, unknown) and TensorFlow graphs do not say whether the model would have used SDPA: fuse every
    pattern ("all"). A file of torch's dynamo exporter records each node's fx node ("torch-onnx-fx": the same rules,
    its baddbmm calls named by the file, `passes.kernels._View.blas_calls`).
    """
    if loaded.framework in TORCH_EXPORTED:
        return "sdpa"
    if loaded.framework == "onnx" and loaded.producer == "pytorch":
        return "torch-onnx-fx" if loaded.fx_nodes else "torch-onnx"
    return "all"


def prepare_graph(loaded: LoadedModel, graph: OpGraph, dtype: str | None = None) -> OpGraph:
    """`graph` as the passes take it: ops marked with the library call eager runs them in, weight-only ops folded
    for runtimes that fold them, the model's float dtype, then `dtype` (`analyze_loaded`). Shapes never change; op
    indices change only under autocast (casts inserted)."""
    if any(loaded.op_calls.values()):  # ops eager PyTorch runs inside one library call (cuDNN's recurrent layers)
        from passes.tvm_ir import source_names

        graph = with_library_calls(graph, source_names([op.name for op in graph.ops], loaded.op_calls))
    if loaded.op_copies:  # a model's `.contiguous()` and `.clone()`, which TVM's importer passes through
        graph = with_eager_copies(graph, loaded.op_copies)
    if loaded.framework in FOLDING_RUNTIMES:
        graph = with_weight_only_folded(graph)
    if loaded.float_dtype:
        graph = with_float_dtype(graph, loaded.float_dtype)
    if dtype in AMP_DTYPES:
        graph = with_autocast(graph, AMP_DTYPES[dtype])  # weights stay as they are; autocast casts them per forward
    elif dtype is not None:
        graph = with_compute_dtype(graph, dtype)
    half = loaded.float_dtype if dtype is None else dtype
    if loaded.op_dtypes and half in ("float16", "bfloat16"):  # `model.to(half)` keeps its own float32 casts
        graph = with_own_dtypes(graph, own_dtypes(loaded.op_dtypes, half))
    return graph


def own_dtypes(op_dtypes: dict[str, str], dtype: str) -> dict[str, str]:
    """`LoadedModel.op_dtypes` (recorded in float16 or bfloat16) for the model computed in the half dtype `dtype`:
    float32 stays, a half dtype becomes `dtype`."""
    return {k: v if v == "float32" else dtype for k, v in op_dtypes.items()}


def analyze_loaded(
    loaded: LoadedModel,
    *,
    strict: bool = False,
    func_name: str = "main",
    shape_hint: str = "set every input dimension with --input NAME:DIMS or --batch N",
    dtype: str | None = None,
    graph: OpGraph | None = None,
) -> Report:
    """Run the passes over a loaded model's function `func_name` and assemble the report.

    `graph`: the function's graph already extracted (a symbolic graph evaluated at a point,
    `passes.symbolic.SymbolicGraph.at`): used instead of extracting `loaded.mod` again.

    `shape_hint` follows the error when a dimension is still symbolic (a pipeline binds it, a user sets it).
    `dtype` ("float16", "bfloat16", "float32"): analyse the model as if it computed in that float dtype;
    "amp-float16" / "amp-bfloat16": the model as it is, run under `torch.autocast("cuda", dtype)`
    (`passes.graph.with_autocast`: matmuls, convolutions and attention in 16 bits, the casts autocast launches).
    """
    # imported here, not at the top: a model is built and exported by torch before TVM is needed (a cold start
    # overlaps TVM's first backtrace with the export, `passes.tvm_boot`)
    from passes.tvm_ir import DataDependentShapeError, DynamicShapeError, IRError, extract, source_names

    check_dtype(dtype)
    if loaded.depth1 is not None and loaded.layers:
        return _extrapolated(loaded, strict=strict, func_name=func_name, shape_hint=shape_hint, dtype=dtype)
    if loaded.steps is not None and loaded.step_samples:
        return _extrapolated_steps(loaded, strict=strict, func_name=func_name, shape_hint=shape_hint, dtype=dtype)
    try:
        if graph is None:
            graph = extract(loaded.mod, func_name, n_inputs=loaded.n_inputs)
    except DynamicShapeError as exc:
        raise MissingShapeError(f"{exc}{_symbol_source(loaded, func_name, exc.symbol)}; {shape_hint}") from exc
    except DataDependentShapeError as exc:
        raise MissingShapeError(
            f"{exc}, which a static analysis cannot know; export the model with that shape fixed "
            f"(e.g. make the shape a constant, not an input)"
        ) from exc
    except IRError as exc:
        raise AnalysisError(str(exc)) from exc
    loaded.check_graph(graph)  # every shape and window sane before any pass sizes anything from them
    graph = prepare_graph(loaded, graph, dtype)
    analysis = analyze_graph(graph, attention_patterns=attention_patterns(loaded))
    if loaded.op_sources:  # names a user can act on (layer4.2.conv3), beside the Relax ones (lv190)
        sources = source_names([c.name for c in analysis.ops], loaded.op_sources)
        mods = loaded.source_modules
        analysis.ops = [
            replace(c, source=s, module=s if mods is None or s is None else mods.get(s))
            for c, s in zip(analysis.ops, sources, strict=True)
        ]
    if loaded.source_params is not None:
        params, param_bytes = loaded.source_params  # the file's float weights
        if dtype is not None and dtype not in AMP_DTYPES:
            param_bytes = int(params * dtype_bytes(dtype))
        analysis.totals = replace(analysis.totals, params=params, param_bytes=param_bytes)
        analysis.static_features.update(params=params, param_bytes=param_bytes)
    unsupported = analysis.totals.unsupported
    if strict and unsupported:
        raise StrictFindingError(
            f"{sum(unsupported.values())} operators have no cost rule: {_unsupported_message(unsupported)}",
            unsupported,
        )
    warnings = list(loaded.warnings)
    if loaded.unconverted:
        warnings.append(
            f"TVM cannot import these PyTorch operators; kept as opaque calls: {', '.join(loaded.unconverted)}"
        )
    if unsupported:
        warnings.append(
            f"operators without a cost rule count 0 FLOPs (use --strict to fail): {_unsupported_message(unsupported)}"
        )
    eager_weight_ops = [c for c in analysis.ops if c.weight_only and not c.folded]
    if eager_weight_ops:
        flops = sum(c.flops for c in eager_weight_ops)
        share = flops / analysis.totals.flops if analysis.totals.flops else 0.0
        warnings.append(
            f"{len(eager_weight_ops)} operators compute on weights alone ({flops:,} FLOPs, {share:.1%} of the total; "
            f"e.g. {eager_weight_ops[0].source or eager_weight_ops[0].name}): counted, as eager PyTorch runs them on "
            f"every call; a compiler (torch.compile, TensorRT, ONNX Runtime) folds them ahead of time "
            f"(weight_only in the op list; docs/weight_only.md)"
        )
    expert_matmuls, gathered = gathered_expert_matmuls(graph)
    if expert_matmuls:
        warnings.append(
            f"mixture-of-experts in the batched formulation: {expert_matmuls} matmuls multiply each routed row by "
            f"its own expert's matrix, gathered from the expert weights ({gathered / 2**20:,.1f} MiB of gathered "
            f"matrices); counted as eager PyTorch runs it (transformers' experts_implementation='batched_mm'): the "
            f"routed FLOPs, and weight traffic a grouped kernel, which reads each expert's matrix once, does not "
            f"pay (docs/moe.md)"
        )
    names = list(loaded.input_names)
    inputs = [
        {"name": names[i] if i < len(names) else s.name, "shape": list(s.tensor.shape), "dtype": s.tensor.dtype}
        for i, s in enumerate(graph.inputs)
    ]
    model = {"source": loaded.source, "framework": loaded.framework, "name": loaded.name}
    if dtype is not None:
        warnings.append(f"analysed as if computed in {dtype} (--dtype): every float tensor of the model is {dtype}")
    return Report(model=model, inputs=inputs, analysis=analysis, warnings=warnings)


def _extrapolated(loaded: LoadedModel, **kw) -> Report:
    """The report of a model of `loaded.layers` identical layers: `loaded` holds its first 2, `loaded.depth1` its
    first; counts extrapolated exactly (`passes.analysis.extrapolate_layers`), lists of the 2-layer graph."""
    n = loaded.layers
    two = analyze_loaded(replace(loaded, layers=None, depth1=None), **kw)
    one = analyze_loaded(loaded.depth1, **kw)
    try:
        two.analysis = extrapolate_layers(one.analysis, two.analysis, n)
    except ValueError as exc:
        raise AnalysisError(f"{loaded.source}: extrapolating {n} identical layers from 2 failed: {exc}") from exc
    note = (
        f"layers 3..{n} extrapolated from layers 1-2 (identical): totals (FLOPs, MACs, bytes, params, operators) "
        f"and the predicted latency are exact for {n} layers; the peak activations are the 2-layer graph's (the same "
        f"at any depth); the operator, module and kernel lists show the embedding, layers 1-2 and the head only"
    )
    two.warnings.append(note)
    return two


def _extrapolated_steps(loaded: LoadedModel, **kw) -> Report:
    """The report of a model whose recurrences run `loaded.steps` time steps: analysed at each of the
    `loaded.step_samples` step counts, the totals extrapolated exactly (`passes.analysis.extrapolate_steps`, which
    refuses counts that are not affine in the step count); lists of the last sample's graph."""
    reports = [(t, analyze_loaded(m, **kw)) for t, m in loaded.step_samples]
    last = reports[-1][1]
    try:
        last.analysis = extrapolate_steps([(t, r.analysis) for t, r in reports], loaded.steps, loaded.step_nodes)
    except ValueError as exc:
        raise AnalysisError(
            f"{loaded.source}: a recurrence of {loaded.steps:,} steps could not be extrapolated from "
            f"{', '.join(str(t) for t, _ in reports)} steps: {exc}"
        ) from exc
    for inp in last.inputs:  # the sequence axes at the model's length, not the last sample's
        for name, axis in loaded.step_axes:
            if inp["name"] == name:
                inp["shape"][axis] = loaded.steps
    last.warnings.append(last.analysis.steps.note)
    return last


def analyze_model(
    model,
    example_inputs: Sequence | None = None,
    *,
    inputs: Sequence[InputSpec | str] | None = None,
    batch: int | None = None,
    strict: bool = False,
    dtype: str | None = None,
) -> Report:
    """`load` then `analyze_loaded` (arguments as for `analyzer.analyze`)."""
    check_dtype(dtype)
    if dtype is not None and inputs:  # `--dtype float16 --input x:...:float16`: the input is float16 because the
        # model is analysed in float16; the file's dtype is what its loader must be given
        from .frontends.specs import InputSpec

        specs = [InputSpec.parse(s) if isinstance(s, str) else s for s in inputs]
        inputs = [replace(s, dtype=None) if s.dtype is not None and s.dtype == dtype else s for s in specs]
    loaded = load(model, inputs=inputs, batch=batch, example_inputs=example_inputs, half_casts=half_of(dtype))
    return analyze_loaded(loaded, strict=strict, dtype=dtype)


def add_prediction(
    report: Report,
    device: str,
    latency_slo_ms: float | None = None,
    max_slowdown: float | None = None,
    *,
    matmul_precision: str = DEFAULT_MATMUL_PRECISION,
    host_overhead: float = 1.0,
) -> Prediction:
    """Predict `report`'s analysis on `device` (float32 matmuls as `matmul_precision` runs them, on a host dispatching
    each kernel `host_overhead` times the kernel model's launch floor); the predictor's warnings join the report's."""
    try:
        prediction, warnings = run_predictor(
            report.analysis,
            device,
            latency_slo_ms=latency_slo_ms,
            max_slowdown=max_slowdown,
            matmul_precision=check_matmul_precision(matmul_precision),
            host_overhead=check_host_overhead(host_overhead),
        )
    except KernelParamsError as exc:  # an edited or corrupt kernel-parameter table
        raise AnalysisError(str(exc)) from exc
    report.warnings.extend(w for w in warnings if w not in report.warnings)
    return prediction


def predict_all(
    report: Report,
    devices: Sequence[str],
    latency_slo_ms: float | None = None,
    max_slowdown: float | None = None,
    *,
    matmul_precision: str = DEFAULT_MATMUL_PRECISION,
    host_overhead: float = 1.0,
) -> Report:
    """Fill `report.predictions` (one per device, in order), `report.prediction` and `report.predictors`;
    `matmul_precision` as `torch.set_float32_matmul_precision` takes it, `host_overhead` the host's dispatch time
    per kernel as a multiple of the launch floor (`add_prediction`)."""
    if max_slowdown is not None and not max_slowdown >= 1:
        raise UsageError(f"the maximum slowdown is a factor of at least 1 (got {max_slowdown})")
    check_matmul_precision(matmul_precision)
    check_host_overhead(host_overhead)
    for d in devices:
        p = add_prediction(
            report, d, latency_slo_ms, max_slowdown, matmul_precision=matmul_precision, host_overhead=host_overhead
        )
        report.predictions.append(p)
        if p.predictor not in report.predictors:
            report.predictors[p.predictor] = predictor_info(d, name=p.predictor)
    report.prediction = report.predictions[0] if report.predictions else None
    return report


@dataclass(frozen=True)
class BudgetCheck:
    """One budget against one device's prediction. `limit`, `value` and `margin` are in `unit` (ms or MiB);
    `value` is the point prediction or the upper end of its interval, as the verdict's `bound` says;
    margin = limit - value (negative: over budget), margin_fraction = margin / limit."""

    device: str
    quantity: str  # "latency" | "memory"
    unit: str  # "ms" | "MiB"
    limit: float
    value: float
    interval: tuple[float, float]
    predictor: str
    against: str = "budget"  # "budget": the user's; "device": the GPU's own memory (checked where it is exceeded)

    @property
    def passed(self) -> bool:
        return self.value <= self.limit

    @property
    def margin(self) -> float:
        return self.limit - self.value

    def reason(self, bound: str) -> str:
        from .render import predictor_label  # ("kernel model", as the tables say; the JSON keeps "roofline")

        label = "predicted" if bound == "point" else "upper end of the predicted"
        lo, hi = self.interval
        by = predictor_label(self.predictor)
        if self.against == "device":
            return (
                f"{label} memory {self.value:,.0f} MiB exceeds the {self.limit:,.0f} MiB of {self.device}: the model "
                f"would not load there (CUDA out of memory), whatever the budget (predictor: {by})"
            )
        return (
            f"{label} {self.quantity} {self.value:,.4g} {self.unit} on {self.device} exceeds the budget of "
            f"{self.limit:,.4g} {self.unit} (interval {lo:,.4g} to {hi:,.4g} {self.unit}; predictor: {by})"
        )

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "quantity": self.quantity,
            "unit": self.unit,
            "limit": self.limit,
            "value": self.value,
            "interval": list(self.interval),
            "pass": self.passed,
            "margin": self.margin,
            "margin_fraction": self.margin / self.limit if self.limit else None,
            "predictor": self.predictor,
            "against": self.against,
        }


@dataclass(frozen=True)
class Verdict:
    """The pre-deployment gate's answer: every budget on every device of a report, and whether all are met."""

    bound: str  # "point" | "upper"
    checks: tuple[BudgetCheck, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def reasons(self) -> list[str]:
        """One line per broken budget (empty: within budget)."""
        return [c.reason(self.bound) for c in self.checks if not c.passed]

    def to_json(self) -> dict:
        return {"pass": self.passed, "bound": self.bound, "checks": [c.to_json() for c in self.checks]}


def budget_verdict(
    report: Report, *, max_latency_ms: float | None = None, max_memory_mb: float | None = None, bound: str = "point"
) -> Verdict:
    """The budget gate over every device of `report`: a `Verdict` with one `BudgetCheck` per budget and device, and
    one against the device's own memory (`against="device"`) where the model does not fit it: that fails the gate
    whatever the budgets.

    `max_memory_mb` is in MiB. `bound="point"` compares the point predictions, `"upper"` the upper ends of their
    intervals. A value exactly at its limit is within budget.
    """
    blocks = report.predictions or ([report.prediction] if report.prediction is not None else [])
    if not blocks:
        raise ValueError("the report has no prediction: use analyzer.predict or analyzer.report")
    if bound not in ("point", "upper"):
        raise ValueError("bound is 'point' or 'upper'")
    checks = []
    for p in blocks:
        for what, point, interval, limit, unit in (
            ("latency", p.latency_ms, p.latency_ms_interval, max_latency_ms, "ms"),
            ("memory", p.memory_mib, p.memory_mib_interval, max_memory_mb, "MiB"),
        ):
            if limit is None:
                continue
            value = point if bound == "point" else interval[1]
            checks.append(BudgetCheck(p.device, what, unit, float(limit), float(value), tuple(interval), p.predictor))
        # a model the GPU cannot hold fails the gate whatever the budgets (the memory it runs in: `fit_mib`, the
        # caching allocator giving cached segments back, as the MIG rule takes it)
        need = min(p.memory_mib, p.fit_mib) if bound == "point" else p.fit_mib
        if need > (room := get_device(p.device).memory_mib):
            checks.append(
                BudgetCheck(p.device, "memory", "MiB", room, need, tuple(p.memory_mib_interval), p.predictor, "device")
            )
    return Verdict(bound, tuple(checks))


def check_budget(
    report: Report, *, max_latency_ms: float | None = None, max_memory_mb: float | None = None, bound: str = "point"
) -> list[str]:
    """Why `report`'s predictions break the budget (empty: within it): `budget_verdict(...).reasons`.

    Every device of the report is checked; each reason names its device. `max_memory_mb` is in MiB.
    """
    verdict = budget_verdict(report, max_latency_ms=max_latency_ms, max_memory_mb=max_memory_mb, bound=bound)
    return verdict.reasons
