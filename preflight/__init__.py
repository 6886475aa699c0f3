"""preflight's public Python API: what a model will cost on a data-centre GPU, without running it.

`import preflight` is the name to import; the implementation lives in the packages of the architecture
(`analyzer`: frontends, pipeline, reports; `passes`: Relax graph to data; `predictor`: devices, kernel model,
predictors, MIG; `zoo`: built-in models). Everything here is imported lazily: `import preflight` costs nothing
until a function is used (TVM and torch are imported then).

    import preflight
    report = preflight.predict("zoo:resnet50", batch=8, device="h100-80gb")
    print(report.prediction.latency_ms)
"""

from __future__ import annotations

from analyzer import __version__, lazy_attributes

_LAZY = {
    "analyze": "analyzer.api",  # counts: FLOPs, MACs, bytes, params, peak activations (a Report)
    "predict": "analyzer.api",  # counts + latency, energy, memory and MIG slice on one GPU (a Report)
    "calibrate_host": "analyzer.api",  # the --host-overhead of a machine, from one forward timed on it
    "report": "analyzer.api",  # pre-deployment report over GPUs and batch sizes
    "check_budget": "analyzer.api",
    "budget_verdict": "analyzer.api",  # the gate's verdict: each budget, the predicted value, pass/fail, margin
    "llm": "analyzer.llm",  # LLM serving: KV cache, TTFT, TPOT, capacity
    "load": "analyzer.frontends",
    "Report": "analyzer.pipeline",
    "AnnotateCosts": "analyzer.annotate",  # a TVM module pass
    "read_annotation": "analyzer.annotate",
    "CostRecorder": "passes.instrument",  # a TVM pass instrument
    "DEVICES": "predictor.devices",
    "get_device": "predictor.devices",
    "add_device_file": "predictor.devices",  # a preflight.devices/1 file's GPUs, as `preflight --devices FILE`
}
__all__ = [*_LAZY, "__version__"]

_lazy_getattr, __dir__ = lazy_attributes("preflight", _LAZY)
# the calls whose user errors name their keywords (`batch=`), not the CLI's flags (`--batch`)
_CALLS = ("analyze", "predict", "report", "check_budget", "budget_verdict", "llm", "load")


def __getattr__(name: str):
    if name in _CALLS:
        from analyzer.errors import api_call

        globals()[name] = api_call(_LAZY[name], name)
        return globals()[name]
    return _lazy_getattr(name)
