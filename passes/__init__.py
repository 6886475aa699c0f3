"""Analysis passes over TVM Relax graphs. Each returns plain data (see `passes.graph`).

`AnnotateCosts`, `CostRecorder` and `read_annotation` (compiler-pipeline integration, `passes.annotate`) are
imported lazily, so that `passes.costs` and `passes.features` stay importable without TVM.
"""

__all__ = ["AnnotateCosts", "CostRecorder", "read_annotation"]


def __getattr__(name: str):
    if name in __all__:
        from . import annotate

        return getattr(annotate, name)
    raise AttributeError(f"module 'passes' has no attribute {name!r}")
