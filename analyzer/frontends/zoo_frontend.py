"""`zoo:NAME[?key=value...]`: built-in models, built on the meta device (no weights allocated)."""

from __future__ import annotations

from ..errors import AnalysisError, UsageError
from .loaded import LoadedModel
from .specs import InputSpec
from .torch_frontend import from_module

ZOO_DTYPES = ("float32", "float16", "bfloat16")


def split_dtype(spec: str):
    """Take the `dtype=...` pseudo-parameter out of a zoo spec: ("resnet50?dtype=float16") -> ("resnet50", fp16)."""
    import torch

    name, _, query = spec.partition("?")
    keep, dtype = [], "float32"
    for part in filter(None, query.split("&")):
        key, _, value = part.partition("=")
        if key == "dtype":
            if value not in ZOO_DTYPES:
                raise UsageError(f"zoo:{spec}: dtype must be one of {', '.join(ZOO_DTYPES)}")
            dtype = value
        else:
            keep.append(part)
    return (name + ("?" + "&".join(keep) if keep else "")), getattr(torch, dtype)


def zoo_batch_axes(spec: str) -> list[int | None]:
    """The batch axis of each of a zoo model's example inputs (None: an input without one): the one axis whose
    size is the batch, found by building the inputs at batch 2 and 3 (meta device: nothing is allocated).
    UsageError if an input's batch is not one axis of exactly that size (e.g. 2 x batch rows)."""
    import zoo

    name, _ = split_dtype(spec)
    try:
        two, three = (zoo.build(name, batch=b, device="meta").example_inputs for b in (2, 3))
    except zoo.ZooError as exc:
        raise UsageError(f"zoo:{spec}: {exc}") from exc
    axes: list[int | None] = []
    for a, b in zip(two, three, strict=True):
        diff = [i for i, (x, y) in enumerate(zip(a.shape, b.shape, strict=True)) if x != y]
        if not diff:
            axes.append(None)
        elif len(diff) == 1 and (a.shape[diff[0]], b.shape[diff[0]]) == (2, 3):
            axes.append(diff[0])
        else:
            raise UsageError(f"zoo:{spec}: an input's batch is not one axis of the batch's size")
    if all(x is None for x in axes):
        raise UsageError(f"zoo:{spec}: no input has a batch axis")
    return axes


def load_zoo_symbolic(spec: str) -> LoadedModel:
    """A zoo model exported with its batch symbolic (`from_module(..., batch_axes=...)`), from example inputs of
    batch 2 (torch specialises sizes 0 and 1). AnalysisError when torch.export finds the batch fixed."""
    loaded = load_zoo(spec, {}, 2, batch_axes=zoo_batch_axes(spec))
    if not loaded.symbols:
        raise AnalysisError(f"zoo:{spec}: torch.export fixed the batch size; no symbolic export")
    return loaded


def load_zoo(spec: str, specs: dict[str, InputSpec], batch: int | None, batch_axes=None) -> LoadedModel:
    """Build a zoo model's shapes only (meta device) and import it; weights are never allocated."""
    import torch

    import zoo

    if specs:
        raise UsageError(
            "zoo models take their shapes from parameters: use zoo:NAME?resolution=...&seq_len=... "
            "and --batch (see `preflight zoo`)"
        )
    source = f"zoo:{spec}"
    spec, dtype = split_dtype(spec)
    try:
        # float32 on purpose: TVM's importer cannot import float16 convs; the graph is retargeted after
        built = zoo.build(spec, batch=batch or 1, device="meta")
    except zoo.ZooError as exc:
        raise UsageError(f"zoo:{spec}: {exc}") from exc
    except Exception as exc:  # a family's builder failed
        raise AnalysisError(f"zoo:{spec}: building the model failed: {exc}") from exc
    loaded = from_module(
        built.module,
        built.example_inputs,
        name=built.name,
        framework="zoo",
        source=source,
        input_names=built.input_names,
        batch_axes=batch_axes,
    )
    loaded.name = built.name
    if dtype is not torch.float32:
        loaded.float_dtype = str(dtype).removeprefix("torch.")
        loaded.name = f"{built.name}{'&' if '?' in built.name else '?'}dtype={loaded.float_dtype}"
    return loaded
