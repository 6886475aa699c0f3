"""`zoo:NAME[?key=value...]`: built-in models, built on the meta device (no weights allocated)."""

from __future__ import annotations

from ..errors import AnalysisError, UsageError
from .loaded import LoadedModel
from .specs import InputSpec
from .torch_frontend import from_module


def load_zoo(spec: str, specs: dict[str, InputSpec], batch: int | None) -> LoadedModel:
    """Build a zoo model's shapes only (meta device) and import it; weights are never allocated."""
    from .. import zoo

    if specs:
        raise UsageError("zoo models take their shapes from parameters: use zoo:NAME?resolution=...&seq_len=... "
                         "and --batch (see `preflight zoo`)")
    try:
        built = zoo.build(spec, batch=batch or 1, device="meta")
    except zoo.ZooError as exc:
        raise UsageError(f"zoo:{spec}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - a family's builder failed
        raise AnalysisError(f"zoo:{spec}: building the model failed: {exc}") from exc
    loaded = from_module(built.module, built.example_inputs, name=built.name, framework="zoo",
                         source=f"zoo:{spec}", input_names=built.input_names)
    loaded.name = built.name
    return loaded
