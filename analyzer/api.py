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

    @property
    def totals(self):
        return self.analysis.totals

    def to_json(self) -> dict:
        from .report import report_json

        return report_json(self)


def _unsupported_message(unsupported: dict[str, int]) -> str:
    return ", ".join(f"{k} ({v})" for k, v in unsupported.items())


def analyze_loaded(loaded: LoadedModel, *, strict: bool = False) -> Report:
    """Run the passes over a loaded model and assemble the report."""
    from passes.analysis import analyze_graph
    from passes.graph import with_float_dtype
    from passes.tvm_ir import DynamicShapeError, IRError, extract

    try:
        graph = extract(loaded.mod, n_inputs=loaded.n_inputs)
    except DynamicShapeError as exc:
        from .errors import MissingShapeError

        raise MissingShapeError(f"{exc}; set every input dimension with --input NAME:DIMS or --batch N") from exc
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
    from predictor.devices import UnknownDeviceError, get_device
    from predictor.predict import predict as run

    from .errors import UsageError

    try:
        get_device(device)
    except UnknownDeviceError as exc:
        raise UsageError(str(exc)) from exc
    report = analyze(model, example_inputs, inputs=inputs, batch=batch, strict=strict)
    report.prediction, warnings = run(report.analysis, device, latency_slo_ms=latency_slo_ms)
    report.warnings.extend(warnings)
    return report
