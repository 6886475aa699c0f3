"""preflight: what a model will cost on a data-centre GPU, from its TVM Relax graph.

The public API is imported lazily: `import analyzer` costs nothing until a function is used.
"""

from __future__ import annotations

import warnings

__version__ = "0.1.0"

# torch.export copies its own tree specs through a deprecated isinstance check (torch 2.13, copyreg): a warning about
# torch's internals that a user of preflight's Python API can do nothing about, printed once per export
warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning)

_LAZY = {
    "Report": "analyzer.pipeline",
    "analyze": "analyzer.api",
    "predict": "analyzer.api",
    "calibrate_host": "analyzer.api",
    "report": "analyzer.api",
    "check_budget": "analyzer.api",
    "budget_verdict": "analyzer.api",
    "load": "analyzer.frontends",
    "AnnotateCosts": "analyzer.annotate",
    "read_annotation": "analyzer.annotate",
    "CostRecorder": "passes.instrument",
}
__all__ = [*_LAZY, "__version__"]


def lazy_attributes(module: str, table: dict[str, str]):
    """`__getattr__` and `__dir__` for a package whose names in `table` (name -> module that defines it) are
    imported on first use."""

    def __getattr__(name: str):
        if name in table:
            import importlib

            return getattr(importlib.import_module(table[name]), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted([*table, "__version__"])

    return __getattr__, __dir__


__getattr__, __dir__ = lazy_attributes("analyzer", _LAZY)
