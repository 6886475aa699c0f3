"""Analysis passes over TVM Relax graphs. Each returns plain data (see `passes.graph`).

Only `passes.tvm_ir` reads TVM IR; `passes.costs`, `passes.features`, `passes.graph` and `passes.kernels`
work on plain data and import without TVM. `CostRecorder` (`passes.instrument`, a TVM pass instrument) is
imported lazily for the same reason.
"""

__all__ = ["CostRecorder"]

# `AnnotateCosts` and `read_annotation` live in `analyzer.annotate` (the pass runs the whole pipeline, which is
# analyzer's job); earlier releases exported them from here, so the old import keeps working with a warning.
_MOVED = {"AnnotateCosts": "analyzer.annotate", "read_annotation": "analyzer.annotate"}


def __getattr__(name: str):
    if name == "CostRecorder":
        from .instrument import CostRecorder

        return CostRecorder
    if name in _MOVED:
        import importlib
        import warnings

        warnings.warn(
            f"import {name} from analyzer (`from analyzer import {name}`); passes.{name} is deprecated",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'passes' has no attribute {name!r}")
