"""preflight: what a model will cost on a data-centre GPU, from its TVM Relax graph.

The public API is imported lazily so that `analyzer.zoo` stays importable without TVM.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["Report", "analyze", "check_budget", "load", "predict", "report", "__version__"]


def __getattr__(name: str):
    if name in ("analyze", "predict", "report", "check_budget", "Report"):
        from . import api

        return getattr(api, name)
    if name == "load":
        from .frontends import load

        return load
    raise AttributeError(f"module 'analyzer' has no attribute {name!r}")
