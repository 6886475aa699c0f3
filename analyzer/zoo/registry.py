"""Family registry, spec parsing and the ``build`` entry point of the model zoo."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = [
    "FAMILIES",
    "Family",
    "ZooError",
    "ZooModel",
    "build",
    "list_families",
    "register",
    "registrar",
    "resolve",
]

KINDS = ("cnn", "vision_transformer", "language", "sequence", "nas")


class ZooError(ValueError):
    """Raised for unknown model names, unknown parameters or invalid values."""


@dataclass(frozen=True)
class Family:
    """A parameterised family of models.

    Attributes:
        name: Family name, e.g. ``"resnet"``.
        kind: One of ``"cnn"``, ``"vision_transformer"``, ``"language"``,
            ``"sequence"`` or ``"nas"``.
        params: Parameter names mapped to their default values. The type of a
            default decides how spec values are parsed.
        variants: Named variants mapped to parameter overrides.
        builder: ``builder(**params)`` returns an ``nn.Module``.
        make_inputs: ``make_inputs(batch=, dtype=, device=, **params)`` returns
            the example input tensors.
        description: One-line human readable description.
        input_names: Names of the forward arguments, in order.
        choices: Optional allowed values per parameter name.
    """

    name: str
    kind: str
    params: dict[str, object]
    variants: dict[str, dict]
    builder: Callable[..., torch.nn.Module]
    make_inputs: Callable[..., tuple[torch.Tensor, ...]]
    description: str
    input_names: tuple[str, ...] = ("x",)
    choices: dict[str, tuple] = field(default_factory=dict)


@dataclass
class ZooModel:
    """A built model together with example inputs.

    Attributes:
        name: Canonical spec string, e.g. ``"resnet50"`` or
            ``"resnet?depth=34&width=64"``.
        family: Family name.
        params: Fully resolved parameters (defaults, variant, overrides).
        module: The model, in eval mode.
        example_inputs: Example positional inputs for ``module``.
        input_names: Names of the positional inputs.
    """

    name: str
    family: str
    params: dict
    module: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    input_names: tuple[str, ...]


_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)

FAMILIES: dict[str, Family] = {}
_VARIANTS: dict[str, str] = {}


def register(family: Family) -> Family:
    """Add a family to the registry.

    Args:
        family: The family to register.

    Returns:
        The same family, so this can be used in assignments.

    Raises:
        ZooError: If the family or one of its variant names is already taken,
            or a variant overrides an unknown parameter.
    """
    if family.kind not in KINDS:
        raise ZooError(f"family {family.name!r}: unknown kind {family.kind!r}")
    if family.name in FAMILIES:
        raise ZooError(f"family {family.name!r} registered twice")
    if _VARIANTS.get(family.name, family.name) != family.name:
        raise ZooError(f"family name {family.name!r} is already a variant of another family")
    for variant, overrides in family.variants.items():
        owner = _VARIANTS.get(variant)
        if owner is not None or (variant in FAMILIES and variant != family.name):
            raise ZooError(f"variant {variant!r} already registered")
        unknown = set(overrides) - set(family.params)
        if unknown:
            raise ZooError(f"variant {variant!r} overrides unknown params {sorted(unknown)}")
    FAMILIES[family.name] = family
    for variant in family.variants:
        _VARIANTS[variant] = family.name
    return family


def registrar(
    kind: str,
    make_inputs: Callable[..., tuple[torch.Tensor, ...]],
    input_names: tuple[str, ...] = ("x",),
    choices: dict[str, tuple] | None = None,
) -> Callable[..., Family]:
    """A ``register`` for the families of one kind, which share their inputs (and default choices).

    Args:
        kind: One of ``KINDS``.
        make_inputs: The kind's example-input builder (see :class:`Family`).
        input_names: Names of the forward arguments.
        choices: Allowed values per parameter for families that give none.

    Returns:
        ``add(name, builder, params, variants, description, choices=None)``, which registers the
        family and returns it.
    """

    def add(
        name: str,
        builder: Callable[..., torch.nn.Module],
        params: dict[str, object],
        variants: dict[str, dict],
        description: str,
        choices: dict[str, tuple] | None = choices,
    ) -> Family:
        return register(
            Family(
                name=name,
                kind=kind,
                params=params,
                variants=variants,
                builder=builder,
                make_inputs=make_inputs,
                description=description,
                input_names=input_names,
                choices=dict(choices or {}),
            )
        )

    return add

def list_families() -> list[Family]:
    """Return all registered families, sorted by name.

    Returns:
        The registered families.
    """
    return [FAMILIES[name] for name in sorted(FAMILIES)]


def _all_names() -> list[str]:
    return sorted(set(FAMILIES) | set(_VARIANTS))


def _hint(word: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(word, valid, n=5, cutoff=0.5)
    if close:
        return "did you mean: " + ", ".join(close)
    shown = ", ".join(valid[:40])
    more = f", ... ({len(valid)} total)" if len(valid) > 40 else ""
    return f"valid: {shown}{more}"


def _parse_value(family: Family, key: str, raw: str) -> object:
    default = family.params[key]
    try:
        if isinstance(default, bool):
            low = raw.strip().lower()
            if low not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(raw)
            value: object = low in ("1", "true", "yes")
        elif isinstance(default, int):
            value = int(raw)
        elif isinstance(default, float):
            value = float(raw)
        else:
            value = raw
    except ValueError:
        kind = type(default).__name__
        raise ZooError(f"{family.name}: bad value {raw!r} for {key!r} (expected {kind}, default {default!r})") from None
    _check_value(family, key, value)
    return value


def _check_value(family: Family, key: str, value: object) -> None:
    allowed = family.choices.get(key)
    if allowed is not None and value not in allowed:
        shown = ", ".join(repr(a) for a in allowed)
        raise ZooError(f"{family.name}: bad value {value!r} for {key!r} (choices: {shown})")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        raise ZooError(f"{family.name}: bad value {value!r} for {key!r} (must be >= 0)")


def _split_spec(spec: str) -> tuple[str, list[tuple[str, str]]]:
    if not isinstance(spec, str) or not spec.strip():
        raise ZooError(f"empty or invalid model spec {spec!r}")
    name, _, query = spec.strip().partition("?")
    pairs: list[tuple[str, str]] = []
    for item in query.split("&") if query else []:
        if not item:
            continue
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ZooError(f"malformed parameter {item!r} in {spec!r} (expected key=value)")
        pairs.append((key.strip(), raw.strip()))
    return name.strip(), pairs


def resolve(spec: str) -> tuple[Family, dict]:
    """Parse a model spec into its family and fully resolved parameters.

    Args:
        spec: ``"NAME"`` or ``"NAME?key=value&key2=value2"`` where ``NAME`` is a
            variant name (e.g. ``"resnet50"``) or a family name (e.g.
            ``"resnet"``, meaning the family defaults).

    Returns:
        ``(family, params)`` with ``params`` = defaults, then variant
        overrides, then spec overrides.

    Raises:
        ZooError: For an unknown name, unknown key or unparseable value.
    """
    name, pairs = _split_spec(spec)
    if name in _VARIANTS:
        family = FAMILIES[_VARIANTS[name]]
        params = {**family.params, **family.variants[name]}
    elif name in FAMILIES:
        family = FAMILIES[name]
        params = dict(family.params)
    else:
        raise ZooError(f"unknown model {name!r}; {_hint(name, _all_names())}")
    for key, raw in pairs:
        if key not in family.params:
            raise ZooError(f"{family.name}: unknown parameter {key!r}; {_hint(key, sorted(family.params))}")
        params[key] = _parse_value(family, key, raw)
    return family, params


def _canonical(spec: str) -> str:
    name, pairs = _split_spec(spec)
    if not pairs:
        return name
    merged = dict(pairs)
    return name + "?" + "&".join(f"{k}={merged[k]}" for k in merged)


def build(
    spec: str,
    batch: int = 1,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> ZooModel:
    """Build a model and example inputs from a spec string.

    Weights are random (``torch.manual_seed(0)`` is set first). With
    ``device="meta"`` no weight memory is allocated.

    Args:
        spec: Model spec, see :func:`resolve`.
        batch: Batch size of the example inputs.
        dtype: Floating point dtype of the weights and float inputs.
        device: Device to build on, e.g. ``"cpu"``, ``"cuda"`` or ``"meta"``.

    Returns:
        The built :class:`ZooModel`.

    Raises:
        ZooError: For an invalid spec, batch or dtype.
    """
    family, params = resolve(spec)
    if not isinstance(batch, int) or batch < 1:
        raise ZooError(f"batch must be a positive int, got {batch!r}")
    if dtype not in _DTYPES:
        raise ZooError(f"dtype must be one of {', '.join(map(str, _DTYPES))}, got {dtype}")
    device = torch.device(device)
    torch.manual_seed(0)
    # On accelerators create weights directly in ``dtype`` (a 7B model would not fit
    # in float32 first); on CPU float32 initialisation is faster, so convert after.
    previous = torch.get_default_dtype()
    if device.type != "cpu":
        torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            module = family.builder(**params)
    finally:
        torch.set_default_dtype(previous)
    module = module.to(dtype=dtype).eval()
    torch.manual_seed(1)
    inputs = family.make_inputs(batch=batch, dtype=dtype, device=device, **params)
    return ZooModel(
        name=_canonical(spec),
        family=family.name,
        params=params,
        module=module,
        example_inputs=tuple(inputs),
        input_names=family.input_names,
    )
