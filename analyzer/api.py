"""Python API: `analyze(...)` returns the same report the CLI prints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .errors import AnalysisError, UnsupportedOperatorsError
from .frontends import InputSpec, LoadedModel, load


@dataclass
class Report:
    """One model's analysis (and, later, prediction), ready for `to_json()` or the renderers."""

    model: dict
    inputs: list[dict]
    analysis: object  # passes.analysis.Analysis
    warnings: list[str] = field(default_factory=list)
    prediction: dict | None = None
    predictions: list[dict] = field(default_factory=list)  # one block per device (report); [0] is `prediction`
    predictors: dict[str, dict] = field(default_factory=dict)  # predictor name -> what it is, its evaluation
    sweep: dict | None = None  # the batch-size sweep (report)

    @property
    def totals(self):
        return self.analysis.totals

    def to_json(self) -> dict:
        from .render import report_json

        return report_json(self)


def _unsupported_message(unsupported: dict[str, int]) -> str:
    return ", ".join(f"{k} ({v})" for k, v in unsupported.items())


def analyze_loaded(loaded: LoadedModel, *, strict: bool = False, func_name: str = "main",
                   shape_hint: str = "set every input dimension with --input NAME:DIMS or --batch N") -> Report:
    """Run the passes over a loaded model's function `func_name` and assemble the report.

    `shape_hint` follows the error when a dimension is still symbolic (a pipeline binds it, a user sets it)."""
    from passes.analysis import analyze_graph
    from passes.graph import with_float_dtype
    from passes.tvm_ir import DynamicShapeError, IRError, extract

    try:
        graph = extract(loaded.mod, func_name, n_inputs=loaded.n_inputs)
    except DynamicShapeError as exc:
        from .errors import MissingShapeError

        raise MissingShapeError(f"{exc}; {shape_hint}") from exc
    except IRError as exc:
        raise AnalysisError(str(exc)) from exc
    if loaded.float_dtype:
        graph = with_float_dtype(graph, loaded.float_dtype)
    analysis = analyze_graph(graph)
    if loaded.source_params is not None:
        params, param_bytes = loaded.source_params
        analysis.totals = replace(analysis.totals, params=params, param_bytes=param_bytes)
        analysis.static_features.update(params=params, param_bytes=param_bytes)
    unsupported = analysis.totals.unsupported
    if strict and unsupported:
        raise UnsupportedOperatorsError(
            f"{sum(unsupported.values())} operators have no cost rule: {_unsupported_message(unsupported)}",
            unsupported)
    warnings = list(loaded.warnings)
    if loaded.unconverted:
        warnings.append(f"TVM cannot import these PyTorch operators; kept as opaque calls: "
                        f"{', '.join(loaded.unconverted)}")
    if unsupported:
        warnings.append(f"operators without a cost rule count 0 FLOPs (use --strict to fail): "
                        f"{_unsupported_message(unsupported)}")
    names = list(loaded.input_names)
    inputs = [{"name": names[i] if i < len(names) else s.name, "shape": list(s.tensor.shape),
               "dtype": s.tensor.dtype} for i, s in enumerate(graph.inputs)]
    model = {"source": loaded.source, "framework": loaded.framework, "name": loaded.name}
    return Report(model=model, inputs=inputs, analysis=analysis, warnings=warnings)


def analyze(model, example_inputs: Sequence | None = None, *, inputs: Sequence[InputSpec | str] | None = None,
            batch: int | None = None, strict: bool = False) -> Report:
    """Analyse a model: per-op FLOPs/MACs/bytes, totals, peak memory, graph features.

    Args:
        model: a path (`.onnx`, `.pt2`), `"zoo:NAME[?key=value]"`, an `nn.Module`, or a Relax IRModule.
        example_inputs: example tensors when `model` is an nn.Module.
        inputs: `"NAME:DIMS[:DTYPE]"` strings or `InputSpec`s that fix the file's input shapes.
        batch: sets dimension 0 of every input.
        strict: raise `UnsupportedOperatorsError` if any op has no cost rule.

    Returns:
        A `Report`; `report.to_json()` is the `preflight.report/1` document.
    """
    return analyze_loaded(load(model, inputs=inputs, batch=batch, example_inputs=example_inputs), strict=strict)


def predict(model, example_inputs: Sequence | None = None, *, device: str = "h100-80gb",
            inputs: Sequence[InputSpec | str] | None = None, batch: int | None = None, strict: bool = False,
            latency_slo_ms: float | None = None) -> Report:
    """Analyse `model` and predict its latency, energy, memory and MIG slice on `device`.

    Uses the newest trained predictor for the device (`predictor/checkpoints/<device>@<n>`), or the
    roofline estimate, labelled as such, when there is none. Arguments as for `analyze`.
    """
    check_devices([device])
    report = analyze(model, example_inputs, inputs=inputs, batch=batch, strict=strict)
    report.prediction = add_prediction(report, device, latency_slo_ms)
    return report


def add_prediction(report: Report, device: str, latency_slo_ms: float | None = None) -> dict:
    """Predict `report`'s analysis on `device`: returns the `prediction` block; its warnings join the report's."""
    from predictor.predict import predict as run

    block, warnings = run(report.analysis, device, latency_slo_ms=latency_slo_ms)
    report.warnings.extend(w for w in warnings if w not in report.warnings)
    return block


def check_devices(devices: Sequence[str]) -> list[str]:
    from predictor.devices import UnknownDeviceError, get_device

    from .errors import UsageError

    out = []
    for d in devices:
        try:
            key = get_device(d).key
        except UnknownDeviceError as exc:
            raise UsageError(str(exc)) from exc
        if key not in out:
            out.append(key)
    if not out:
        raise UsageError("give at least one --device")
    return out


def report(model, example_inputs: Sequence | None = None, *, devices: Sequence[str] = ("h100-80gb",),
           inputs: Sequence[InputSpec | str] | None = None, batch: int | None = None,
           batches: Sequence[int] | None = None, max_batch: int | None = None, latency_slo_ms: float | None = None,
           strict: bool = False, output: str | None = None, top: int = 15, progress=None) -> Report:
    """The pre-deployment report: analysis, predictions on each device, and a batch-size sweep.

    Args as for `predict`, and:
        devices: the GPUs to predict for (the first one also gets the per-operator cost breakdown).
        batches: the batch sizes to sweep; or `max_batch` for 1, 2, 4, ... up to it (default 32);
            `batches=[]` skips the sweep.
        output: also write the report to this `.html`, `.md` (with its charts in `<stem>_files/`) or `.json`.
        top: how many of the costliest operators to list.
        progress: called as `progress(n)` after each of the sweep's batches (`progress.total` is not needed).

    Returns:
        The `Report`; `report.to_json()` is the `preflight.report/1` document with `predictions`,
        `predictors` and `sweep` blocks.
    """
    from predictor.predict import predictor_info

    from .errors import MissingShapeError, UsageError
    from .predeploy import check_output, write
    from .sweep import DEFAULT_MAX_BATCH, batch_points, check_batches, run_sweep

    devices = check_devices(devices)
    if output is not None:
        check_output(output)  # fail before the long part
    if batches is not None and max_batch is not None:
        raise UsageError("give the sweep's batches or its max_batch, not both")
    batches = check_batches(batches) if batches is not None else \
        batch_points(DEFAULT_MAX_BATCH if max_batch is None else max_batch)
    try:
        rep = analyze(model, example_inputs, inputs=inputs, batch=batch, strict=strict)
    except MissingShapeError:
        if batch is not None or not batches:
            raise
        # a dynamic batch the sweep sets anyway: the main analysis takes the sweep's first batch (if the
        # missing dimension is another one, this raises the same error)
        rep = analyze(model, example_inputs, inputs=inputs, batch=batches[0], strict=strict)
        rep.warnings.append(f"the model's batch dimension is dynamic: the report's own analysis uses batch "
                            f"{batches[0]}, the sweep's first (set it with --batch)")
    for d in devices:
        block = add_prediction(rep, d, latency_slo_ms)
        rep.predictions.append(block)
        if block["predictor"] not in rep.predictors:
            rep.predictors[block["predictor"]] = predictor_info(d)
    rep.prediction = rep.predictions[0]
    if batches:
        dims0 = {i["shape"][0] if i["shape"] else None for i in rep.inputs}
        own = dims0.pop() if len(dims0) == 1 else None  # reuse the analysis only if every input has that batch
        rep.sweep, warnings = run_sweep(model, example_inputs, inputs=inputs, batches=list(batches), devices=devices,
                                        latency_slo_ms=latency_slo_ms, strict=strict,
                                        reuse={own: rep} if own is not None else None, progress=progress)
        rep.warnings.extend(w for w in warnings if w not in rep.warnings)
    if output is not None:
        write(rep, output, top)
    return rep


def check_budget(report: Report, *, max_latency_ms: float | None = None, max_memory_mb: float | None = None,
                 bound: str = "point") -> list[str]:
    """Why `report`'s predictions break the budget (empty: within it); the pre-deployment gate.

    Every device of the report is checked (`analyzer.report` with several devices); each reason names its device.

    `bound="point"` compares the point predictions, `"upper"` the upper ends of their intervals.
    """
    blocks = report.predictions or ([report.prediction] if report.prediction is not None else [])
    if not blocks:
        raise ValueError("the report has no prediction: use analyzer.predict or analyzer.report")
    if bound not in ("point", "upper"):
        raise ValueError("bound is 'point' or 'upper'")
    out = []
    for p in blocks:  # every device of a multi-device report
        for key, limit, unit, what in (("latency_ms", max_latency_ms, "ms", "latency"),
                                       ("memory_mb", max_memory_mb, "MiB", "memory")):
            if limit is None:
                continue
            value = p[key] if bound == "point" else p[f"{key}_interval"][1]
            if value > limit:
                lo, hi = p[f"{key}_interval"]
                label = "predicted" if bound == "point" else "upper end of the predicted"
                out.append(f"{label} {what} {value:,.4g} {unit} on {p['device']} exceeds the budget of "
                           f"{limit:,.4g} {unit} (interval {lo:,.4g} to {hi:,.4g} {unit}; predictor {p['predictor']})")
    return out
