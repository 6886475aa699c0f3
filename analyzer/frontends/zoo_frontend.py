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


def _with_param(spec: str, key: str, value) -> str:
    """`spec` with its query parameter `key` set to `value` ("bert_tiny?seq_len=16", "seq_len", 17)."""
    name, _, query = spec.partition("?")
    parts = [p for p in query.split("&") if p and p.partition("=")[0] != key]
    return f"{name}?{'&'.join([*parts, f'{key}={value}'])}"


def _changed_axes(a_inputs, b_inputs, a: int, b: int, spec: str, what: str) -> list[int | None]:
    """Per input, the one axis whose size goes from `a` to `b` between the two builds (None: no axis changes)."""
    axes: list[int | None] = []
    for x, y in zip(a_inputs, b_inputs, strict=True):
        diff = [i for i, (m, n) in enumerate(zip(x.shape, y.shape, strict=True)) if m != n]
        if not diff:
            axes.append(None)
        elif len(diff) == 1 and (x.shape[diff[0]], y.shape[diff[0]]) == (a, b):
            axes.append(diff[0])
        else:
            raise UsageError(f"zoo:{spec}: an input's {what} is not one axis of the {what}'s size")
    return axes


#: families of other kinds than "language" whose sequence length stays symbolic through torch.export and TVM's
#: import, every count an exact polynomial (HiFi-GAN's mel frames). Tried and left out (2026-11-28): QuartzNet (its
#: stride-2 convolution makes every count after it depend on ceil(seq / 2): no polynomial in seq, and it would lose
#: the batch formulas it has alone), FastPitch, TFT, LSTM and GRU (torch.export specialises the length:
#: "Constraints violated"), wav2vec 2.0 (its feature encoder's lengths reach TVM as a tensor of unknown rank); each
#: of the last five would fall back to the batch alone after a failed export
SEQ_FAMILIES = ("hifigan",)


def zoo_symbol_axes(spec: str, seq: bool = False) -> tuple[list[dict[int, str]], dict[str, int]]:
    """({axis: symbol} per example input, {symbol: the spec's value}) of a zoo model: "batch", the one axis of each
    input whose size is the batch (the inputs built at batch 2 and 3, meta device: nothing is allocated); with
    `seq`, also "seq" for a family of kind "language" (or of `SEQ_FAMILIES`) with a `seq_len` of at least 2: the
    axes whose size is the sequence length (built at seq_len and seq_len +/- 1). UsageError if an input's batch is
    not one axis."""
    axes, values, _ = _symbol_axes(spec, seq)
    return axes, values


def _symbol_axes(spec: str, seq: bool):
    """`zoo_symbol_axes`, and the model built at batch 2 (the one a symbolic export traces)."""
    import zoo

    name, _ = split_dtype(spec)
    try:
        family, params = zoo.resolve(name)
        built = zoo.build(name, batch=2, device="meta")
        two, three = built.example_inputs, zoo.build(name, batch=3, device="meta").example_inputs
    except zoo.ZooError as exc:
        raise UsageError(f"zoo:{spec}: {exc}") from exc
    batch = _changed_axes(two, three, 2, 3, spec, "batch")
    if all(x is None for x in batch):
        raise UsageError(f"zoo:{spec}: no input has a batch axis")
    axes = [{} if a is None else {a: "batch"} for a in batch]
    values = {"batch": 2}
    s0 = params.get("seq_len")
    if seq and (family.kind == "language" or family.name in SEQ_FAMILIES) and isinstance(s0, int) and s0 >= 2:
        other = None
        for s1 in (s0 + 1, s0 - 1):
            try:
                other = zoo.build(_with_param(name, "seq_len", s1), batch=2, device="meta").example_inputs
                break
            except zoo.ZooError:
                continue
        if other is not None:
            for ax, a in zip(axes, _changed_axes(two, other, s0, s1, spec, "sequence length"), strict=True):
                if a is not None and a not in ax:
                    ax[a] = "seq"
            if any("seq" in ax.values() for ax in axes):
                values["seq"] = s0
    return axes, values, built


def load_zoo_symbolic(
    spec: str, seq: bool = False, half_casts: str | None = None
) -> tuple[LoadedModel, dict[str, int]]:
    """A zoo model exported with its batch (and with `seq`, its sequence length) symbolic
    (`from_module(..., symbol_axes=...)`), from example inputs of batch 2 (torch specialises sizes 0 and 1);
    and the spec's value of each symbol. AnalysisError when torch.export finds the batch fixed. `half_casts` as
    `load_zoo` takes it."""
    axes, values, built = _symbol_axes(spec, seq)
    loaded = load_zoo(spec, {}, 2, symbol_axes=axes, built=built, half_casts=half_casts)  # the batch-2 build again
    if "batch" not in {v[0] for v in loaded.symbols.values()}:
        raise AnalysisError(f"zoo:{spec}: torch.export fixed the batch size; no symbolic export")
    return loaded, values


def load_zoo(
    spec: str, specs: dict[str, InputSpec], batch: int | None, symbol_axes=None, built=None, half_casts=None
) -> LoadedModel:
    """Build a zoo model's shapes only (meta device) and import it; weights are never allocated. `built`: the model
    already built at `batch` (`zoo.build(spec without its dtype, batch=batch, device="meta")`), not built again.
    `half_casts`: the half dtype a float32 spec will be costed in (`from_module`; a spec's own `dtype=` comes first)."""
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
        if built is None:
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
        symbol_axes=symbol_axes,
        half_casts=half_casts if dtype is torch.float32 else str(dtype).removeprefix("torch."),  # own float32 casts
    )
    loaded.name = built.name
    if dtype is not torch.float32:
        loaded.float_dtype = str(dtype).removeprefix("torch.")
        loaded.name = f"{built.name}{'&' if '?' in built.name else '?'}dtype={loaded.float_dtype}"
    return loaded
