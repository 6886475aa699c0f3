"""The Python API: `analyze`, `predict`, `report` and `check_budget` return what the CLI prints.

A thin front over `analyzer.pipeline`, which composes the frontends, the passes and the predictor.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .errors import MissingShapeError, UsageError
from .frontends import InputSpec
from .options import check_devices, check_dtype, check_host_overhead, check_matmul_precision, half_of
from .pipeline import Report, Verdict, analyze_model, budget_verdict, check_budget, predict_all


def analyze(
    model,
    example_inputs: Sequence | None = None,
    *,
    inputs: Sequence[InputSpec | str] | None = None,
    batch: int | None = None,
    strict: bool = False,
    dtype: str | None = None,
    symbolic: bool = False,
) -> Report:
    """Analyse a model: per-op FLOPs/MACs/bytes, totals, peak memory, graph features.

    Args:
        model: a path (`.onnx`, `.pt2`, `.keras`, `.tflite`, a SavedModel or Paddle inference directory),
            `"zoo:NAME[?key=value]"`, an `nn.Module`, or a Relax IRModule with static shapes.
        example_inputs: example tensors when `model` is an nn.Module (a tensor or a tuple of them).
        inputs: `"NAME:DIMS[:DTYPE]"` strings or `InputSpec`s that fix the file's input shapes.
        batch: sets dimension 0 of every input (of an nn.Module's example tensors too: their first row,
            expanded).
        strict: raise `UnsupportedOperatorsError` if any op has no cost rule.
        dtype: analyse as if the model computed in this float dtype ("float16", "bfloat16", "float32"):
            "what if I serve this in fp16?" (`model.to(dtype)`); or "amp-float16" / "amp-bfloat16": the model as
            it is under `torch.autocast("cuda", dtype)` (matmuls, convolutions and attention in 16 bits, softmax,
            norms and reductions in float32, and the cast kernels autocast launches every forward).
        symbolic: also give every total and each operator's counts as exact polynomials of the batch, and of
            the sequence length ("seq") for a zoo language model or HiFi-GAN (`report.symbolic`,
            docs/symbolic.md): a zoo model or an nn.Module (batch on axis 0) is exported once with those sizes
            symbolic, a `.pt2`, ONNX or Paddle file saved with a dynamic batch is imported once with its own
            dynamic dims; the report's own numbers are at `batch` (default: an nn.Module's example batch, else
            the lowest batch the graph holds for: 2 for an export, whose batch 1 is exported on its own, and for an
            ONNX or Paddle file; 1 for a `.pt2` file; a transformers config's: its `inputs`' batch) and the model's
            own sequence length. `inputs` only with a file: the values of its dynamic dims other than the batch
            (which stay symbols of the formulas).

    Returns:
        A `Report`; `report.to_json()` is the `preflight.report/1` document.
    """
    if not symbolic:
        return analyze_model(model, example_inputs, inputs=inputs, batch=batch, strict=strict, dtype=dtype)
    from .symbolic import analyze_at, formulas, load_symbolic, peak_function, require_values, symbolic_json

    check_dtype(dtype)
    sm = load_symbolic(model, example_inputs, seq=True, inputs=inputs, half_casts=half_of(dtype))
    require_values(sm)
    if batch is None:  # an nn.Module's own example batch (a config's: its --input's) where the symbolic graph holds
        # for it, else the lowest
        from .frontends import input_specs, module_examples, takes_config

        shown = [t.shape[0] for t in module_examples(example_inputs) if getattr(t, "ndim", 0) >= 1][:1]
        if not shown and inputs and takes_config(model):
            shown = [s.shape[0] for s in input_specs(inputs).values() if s.shape and s.shape[0]][:1]
        batch = int(shown[0]) if shown and sm.covers(int(shown[0])) else sm.batch_range[0]
    if sm.covers(batch):
        rep = analyze_at(sm, batch, strict=strict, dtype=dtype)
    else:
        rep = analyze_model(model, example_inputs, inputs=inputs, batch=batch, strict=strict, dtype=dtype)
    costs = formulas(sm, dtype=dtype)
    rep.symbolic = symbolic_json(sm, costs)
    _, law = peak_function(sm, dtype)
    rep.symbolic["peak_law"] = None if law is None else str(law)
    fitted = costs.totals.get("peak_activation_bytes")
    if law is not None and fitted is not None and not law.is_polynomial(fitted, sm.graph.ranges):
        # a polynomial fitted at the sample points that the law leaves beyond them (the peak moves to another
        # tensor past the points): no polynomial; the law, printed beside it, holds
        rep.symbolic["totals"]["peak_activation_bytes"] = None
        rep.symbolic["exact"] = False
    rep.warnings.extend(sm.notes)
    return rep


def predict(
    model,
    example_inputs: Sequence | None = None,
    *,
    device: str = "h100-80gb",
    inputs: Sequence[InputSpec | str] | None = None,
    batch: int | None = None,
    strict: bool = False,
    latency_slo_ms: float | None = None,
    max_slowdown: float | None = None,
    dtype: str | None = None,
    matmul_precision: str = "highest",
    largest_batch: bool = False,
    host_overhead: float = 1.0,
) -> Report:
    """Analyse `model` and predict its latency, energy, memory and MIG slice on `device`.

    Uses the newest trained predictor for the device (`predictor/checkpoints/<device>@<n>`), or the
    roofline estimate, labelled as such, when there is none. Arguments as for `analyze`, and:
        latency_slo_ms: the recommended MIG slice must also meet this latency.
        max_slowdown: also name the smallest slice at most this many times slower than the whole GPU.
        matmul_precision: what `torch.set_float32_matmul_precision` is set to where the model runs: "highest"
            (torch's default: float32 matmuls on FP32 CUDA cores), "high" or "medium" (float32 matmuls on TF32
            tensor cores, as NVIDIA's containers run them; on a GPU the two are the same). Only float32 matmuls
            move: a float16/bfloat16 model, its convolutions (TF32 already) and fused attention do not.
        host_overhead: the host's dispatch time per kernel as a multiple of preflight's launch floor (the kernel
            model's fitted per-kernel launch time): 1.0 (the default) the host it was fitted on, 2.35 a host like
            the one of the public MIG measurements (docs/devices.md). It scales the launch part of the latency on
            the whole GPU and on each MIG slice, and so the energy; positive and finite, else UsageError. At a
            value other than 1.0 the kernel-model estimate answers (a trained predictor takes no host factor).
            Recorded as `prediction.runtime["host_overhead"]`.
        largest_batch: also solve for the largest batch whose predicted memory fits each MIG profile and the whole
            GPU (`prediction.mig.largest_batch`, a `predictor.mig.LargestBatch`): a zoo model or an nn.Module
            (batch on axis 0) is exported once more with its batch symbolic, and the solve evaluates the memory
            at each batch from that one graph (docs/symbolic.md). Not with `inputs`. With `latency_slo_ms`, also
            the largest batch within the SLO on each (`LargestBatch.slo`, a `predictor.mig.SloBatch`).
    The result's `prediction` is a `predictor.predict.Prediction`.
    """
    devices = check_devices([device])
    check_matmul_precision(matmul_precision)
    host_overhead = check_host_overhead(host_overhead)
    sm, note = None, None
    if largest_batch:
        _check_solvable(model, inputs)
        if batch is None and not inputs:
            sm, batch, note = _file_batch(model)
    report = analyze_model(model, example_inputs, inputs=inputs, batch=batch, strict=strict, dtype=dtype)
    if note:
        report.warnings.append(note)
    predict_all(
        report, devices, latency_slo_ms, max_slowdown, matmul_precision=matmul_precision, host_overhead=host_overhead
    )
    if largest_batch:
        _solve_largest_batch(report, model, example_inputs, batch, dtype, inputs, latency_slo_ms, sm=sm)
    return report


def _file_batch(model) -> tuple:
    """(symbolic model, batch, note) for `predict --largest-batch` on a file saved with a dynamic batch and no
    --batch: the lowest batch its symbolic import holds for (as `analyze --symbolic` takes), where the file's own
    batch cannot be analysed; (None, None, None) for anything else (a zoo model or module, a static batch)."""
    from .errors import PreflightError
    from .frontends import takes_config
    from .symbolic import load_symbolic, takes_file

    if not takes_file(model) or takes_config(model):  # a config's batch is --batch's, as without the solve
        return None, None, None
    try:
        sm = load_symbolic(model, None)
    except PreflightError:  # not symbolic in its batch: analysed as it is, and the solve says why not
        return None, None, None
    lo = sm.batch_range[0]
    return sm, lo, f"the file's batch is dynamic: predicted at batch {lo}, the lowest its symbolic import holds for"


def calibrate_host(
    model,
    measured_ms: float,
    example_inputs: Sequence | None = None,
    *,
    device: str = "h100-80gb",
    inputs: Sequence[InputSpec | str] | None = None,
    batch: int | None = None,
    strict: bool = False,
    dtype: str | None = None,
    matmul_precision: str = "highest",
):
    """The host factor (`host_overhead` of `predict`, `--host-overhead`) of the machine on which `model`, run
    eagerly as analysed (arguments as for `predict`), took `measured_ms` per forward on the whole GPU `device`:
    the factor at which the kernel model's latency equals the measurement (`predictor.predict.calibrate_host`).
    Time a small batch, where the host sets most of the forward (`HostFit.determined`; its `host_share`).

    Returns (the analysis `Report`, the `predictor.predict.HostFit`). UsageError for a measurement that is not a
    positive number, a MIG slice, or a measurement no host factor explains (faster than the kernels' execution
    alone)."""
    from predictor.predict import calibrate_host as solve
    from predictor.predict import check_measured_ms, whole_gpu_for_calibration

    (device,) = check_devices([device])
    check_matmul_precision(matmul_precision)
    try:  # before the analysis: what can be refused without it
        measured_ms = check_measured_ms(measured_ms)
        whole_gpu_for_calibration(device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    report = analyze_model(model, example_inputs, inputs=inputs, batch=batch, strict=strict, dtype=dtype)
    try:
        return report, solve(report.analysis, device, measured_ms, matmul_precision)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_solvable(model, inputs) -> None:
    """UsageError unless the largest batch can be solved for `model`: a zoo model or an nn.Module (no --input), or
    a `.pt2`, ONNX or Paddle file or a transformers config (--input for its other dynamic dims)."""
    from .symbolic import takes_file

    torch = sys.modules.get("torch")
    if takes_file(model):
        return
    if not (isinstance(model, str) and model.startswith("zoo:")) and not (
        torch is not None and isinstance(model, torch.nn.Module)
    ):
        raise UsageError(
            "the largest batch is solved for zoo:NAME models, nn.Modules and transformers config.json files (they "
            "are exported with the batch symbolic) and .pt2, .onnx and Paddle files saved with a dynamic batch; for "
            "another file, `preflight report --batches` sweeps the batches given"
        )
    if inputs:
        raise UsageError("the largest batch is solved with the batch as the symbol: give --batch, not --input")


def _solve_largest_batch(
    report: Report,
    model,
    example_inputs,
    batch: int | None,
    dtype: str | None,
    inputs=None,
    latency_slo_ms=None,
    sm=None,
) -> None:
    """Attach `LargestBatch` to each prediction's MIG recommendation (with `latency_slo_ms`, the largest batch
    within it too); a warning says why where it cannot. `sm`: the symbolic model when already loaded."""
    from dataclasses import replace

    from .errors import PreflightError
    from .symbolic import load_symbolic, solve_largest_batch, solve_within_slo

    if batch is not None or (isinstance(model, str) and model.startswith("zoo:")):
        own = batch or 1  # a zoo model's batch, 1 by default
    else:  # an nn.Module's or a file's: axis 0 of its (first) input as analysed
        own = report.inputs[0]["shape"][0] if report.inputs and report.inputs[0]["shape"] else 1
    try:
        sm = sm or load_symbolic(model, example_inputs, inputs=inputs, half_casts=half_of(dtype))
    except PreflightError as exc:
        report.warnings.append(f"the largest batch that fits was not solved: {exc}")
        return
    solved = []
    for p in report.predictions:
        try:
            lb = solve_largest_batch(sm, p, report.analysis, batch=own, dtype=dtype)
        except PreflightError as exc:
            report.warnings.append(f"the largest batch that fits was not solved: {exc}")
            solved.append(p)
            continue
        if latency_slo_ms is not None:  # a failure here leaves the memory answer standing
            try:
                lb = replace(lb, slo=solve_within_slo(sm, p, lb, batch=own, latency_slo_ms=latency_slo_ms, dtype=dtype))
            except PreflightError as exc:
                report.warnings.append(f"the largest batch within the latency SLO was not solved: {exc}")
        p = replace(p, mig=replace(p.mig, largest_batch=lb))
        solved.append(p)
    report.predictions[:] = solved
    report.prediction = solved[0] if solved else None


def report(
    model,
    example_inputs: Sequence | None = None,
    *,
    devices: Sequence[str] = ("h100-80gb",),
    inputs: Sequence[InputSpec | str] | None = None,
    batch: int | None = None,
    batches: Sequence[int] | None = None,
    max_batch: int | None = None,
    latency_slo_ms: float | None = None,
    max_slowdown: float | None = None,
    strict: bool = False,
    output: str | None = None,
    top: int = 15,
    progress=None,
    dtype: str | None = None,
    matmul_precision: str = "highest",
    host_overhead: float = 1.0,
) -> Report:
    """The pre-deployment report: analysis, predictions on each device, and a batch-size sweep.

    Args as for `predict`, and:
        devices: the GPUs to predict for (the first one also gets the per-operator cost breakdown).
        batches: the batch sizes to sweep; or `max_batch` for 1, 2, 4, ... up to it (default 32);
            `batches=[]` skips the sweep.
        output: also write the report to this `.html`, `.md` (with its charts in `<stem>_files/`) or `.json`.
        top: how many of the costliest operators to list.
        progress: called as `progress(n)` after each of the sweep's batches.
        matmul_precision, host_overhead: as for `predict` (every device and every batch of the sweep).

    Returns:
        The `Report`; `report.to_json()` is the `preflight.report/1` document with `predictions`,
        `predictors` and `sweep` blocks.
    """
    # the report's own modules (the page writer, the sweep): imported here, not by `analyze` and `predict`
    from .predeploy import check_output, write
    from .sweep import DEFAULT_MAX_BATCH, batch_points, check_batches, run_sweep

    devices = check_devices(devices)
    check_dtype(dtype)
    check_matmul_precision(matmul_precision)
    host_overhead = check_host_overhead(host_overhead)
    if output is not None:
        check_output(output)  # fail before the long part
    if batches is not None and max_batch is not None:
        raise UsageError("give the sweep's batches or its max_batch, not both")
    batches = (
        check_batches(batches)
        if batches is not None
        else batch_points(DEFAULT_MAX_BATCH if max_batch is None else max_batch)
    )
    try:
        rep = analyze_model(model, example_inputs, inputs=inputs, batch=batch, strict=strict, dtype=dtype)
    except MissingShapeError:
        if batch is not None or not batches:
            raise
        # a dynamic batch the sweep sets anyway: the main analysis takes the sweep's first batch (if the
        # missing dimension is another one, this raises the same error)
        rep = analyze_model(model, example_inputs, inputs=inputs, batch=batches[0], strict=strict, dtype=dtype)
        rep.warnings.append(
            f"the model's batch dimension is dynamic: the report's own analysis uses batch "
            f"{batches[0]}, the sweep's first (set it with --batch)"
        )
    predict_all(
        rep, devices, latency_slo_ms, max_slowdown, matmul_precision=matmul_precision, host_overhead=host_overhead
    )
    if batches:
        dims0 = {i["shape"][0] if i["shape"] else None for i in rep.inputs}
        own = dims0.pop() if len(dims0) == 1 else None  # reuse the analysis only if every input has that batch
        rep.sweep, warnings = run_sweep(
            model,
            example_inputs,
            inputs=inputs,
            batches=list(batches),
            devices=devices,
            latency_slo_ms=latency_slo_ms,
            strict=strict,
            dtype=dtype,
            reuse={own: rep} if own is not None else None,
            progress=progress,
            matmul_precision=matmul_precision,
            host_overhead=host_overhead,
        )
        rep.warnings.extend(w for w in warnings if w not in rep.warnings)
    if output is not None:
        write(rep, output, top)
    return rep


__all__ = ["Report", "Verdict", "analyze", "budget_verdict", "check_budget", "check_devices", "predict", "report"]
