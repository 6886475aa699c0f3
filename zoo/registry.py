"""Family registry, spec parsing and the ``build`` entry point of the model zoo."""

from __future__ import annotations

import difflib
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = [
    "FAMILIES",
    "Bounds",
    "Expr",
    "Family",
    "ZooError",
    "ZooModel",
    "build",
    "list_families",
    "register",
    "registrar",
    "resolve",
]

KINDS = (
    "cnn",
    "vision_transformer",
    "language",
    "sequence",
    "nas",
    "segmentation",
    "detection",
    "recommendation",
    "forecasting",
    "speech",
)


class ZooError(ValueError):
    """Raised for unknown model names, unknown parameters or invalid values."""


@dataclass(frozen=True)
class Expr:
    """A limit computed from a family's resolved parameters, e.g. ``Expr("8 * patch", lambda p: 8 * p["patch"])``.

    Attributes:
        text: How error messages show the limit.
        fn: ``fn(params)`` returns the limit's value.
    """

    text: str
    fn: Callable[[dict], float]


#: A limit of :class:`Bounds`: a number, the name of another parameter of the family, or an :class:`Expr`.
Limit = int | float | str | Expr


@dataclass(frozen=True)
class Bounds:
    """The valid values of one family parameter, declared in the registry and checked by :func:`resolve`.

    Every numeric parameter must also be ``>= 0`` (checked first). Limits that are numbers (and ``choices``)
    are checked for all parameters before limits that refer to other parameters, so a relation is only
    checked between values that are valid on their own.

    Attributes:
        choices: The allowed values.
        ge: Inclusive lower limit.
        gt: Exclusive lower limit.
        le: Inclusive upper limit.
        lt: Exclusive upper limit.
        multiple_of: The value must be a multiple of this (a positive limit).
    """

    choices: tuple | None = None
    ge: Limit | None = None
    gt: Limit | None = None
    le: Limit | None = None
    lt: Limit | None = None
    multiple_of: Limit | None = None


# Bounds attribute -> (how a message says it, whether a value satisfies it).
_LIMITS: dict[str, tuple[str, Callable[[float, float], bool]]] = {
    "multiple_of": ("a multiple of", lambda value, limit: limit > 0 and value % limit == 0),
    "ge": (">=", operator.ge),
    "gt": (">", operator.gt),
    "le": ("<=", operator.le),
    "lt": ("<", operator.lt),
}


@dataclass(frozen=True)
class Family:
    """A parameterised family of models.

    Attributes:
        name: Family name, e.g. ``"resnet"``.
        kind: One of ``KINDS``: ``"cnn"``, ``"vision_transformer"``, ``"language"``, ``"sequence"``,
            ``"nas"``, ``"segmentation"``, ``"detection"``, ``"recommendation"``, ``"forecasting"`` or
            ``"speech"``.
        params: Parameter names mapped to their default values. The type of a
            default decides how spec values are parsed.
        variants: Named variants mapped to parameter overrides.
        builder: ``builder(**params)`` returns an ``nn.Module``.
        make_inputs: ``make_inputs(batch=, dtype=, device=, **params)`` returns
            the example input tensors.
        description: One-line human readable description.
        input_names: Names of the forward arguments, in order.
        bounds: Valid values per parameter name (see :class:`Bounds`); parameters without an entry need
            only be ``>= 0`` when numeric.
    """

    name: str
    kind: str
    params: dict[str, object]
    variants: dict[str, dict]
    builder: Callable[..., torch.nn.Module]
    make_inputs: Callable[..., tuple[torch.Tensor, ...]]
    description: str
    input_names: tuple[str, ...] = ("x",)
    bounds: dict[str, Bounds] = field(default_factory=dict)


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
        ZooError: If the family or one of its variant names is already taken, a variant overrides an
            unknown parameter, a bound names an unknown parameter, or the defaults or a variant are out of
            bounds.
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
    for key, bounds in family.bounds.items():
        named = {key} | {getattr(bounds, a) for a in _LIMITS if isinstance(getattr(bounds, a), str)}
        unknown = named - set(family.params)
        if unknown:
            raise ZooError(f"family {family.name!r}: bounds of {key!r} name unknown params {sorted(unknown)}")
    for overrides in (family.params, *family.variants.values()):
        _check_params(family, {**family.params, **overrides})
    FAMILIES[family.name] = family
    for variant in family.variants:
        _VARIANTS[variant] = family.name
    return family


def registrar(
    kind: str,
    make_inputs: Callable[..., tuple[torch.Tensor, ...]],
    input_names: tuple[str, ...] = ("x",),
    bounds: dict[str, Bounds] | None = None,
) -> Callable[..., Family]:
    """A ``register`` for the families of one kind, which share their inputs (and default bounds).

    Args:
        kind: One of ``KINDS``.
        make_inputs: The kind's example-input builder (see :class:`Family`).
        input_names: Names of the forward arguments.
        bounds: The kind's bounds, for the parameters a family has and gives no bounds of its own.

    Returns:
        ``add(name, builder, params, variants, description, bounds=None)``, which registers the
        family and returns it.
    """
    kind_bounds = dict(bounds or {})

    def add(
        name: str,
        builder: Callable[..., torch.nn.Module],
        params: dict[str, object],
        variants: dict[str, dict],
        description: str,
        bounds: dict[str, Bounds] | None = None,
    ) -> Family:
        inherited = {key: b for key, b in kind_bounds.items() if key in params}
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
                bounds={**inherited, **(bounds or {})},
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
    return value


def _check_params(family: Family, params: dict) -> None:
    """Check resolved parameters against the family's bounds: values on their own first, then relations.

    Raises:
        ZooError: Naming the first parameter out of bounds, its value and the bound.
    """
    for relative in (False, True):
        for key, value in params.items():
            _check_value(family, key, value, params, relative)


def _check_value(family: Family, key: str, value: object, params: dict, relative: bool) -> None:
    bounds = family.bounds.get(key, Bounds())
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not relative:
        if bounds.choices is not None and value not in bounds.choices:
            shown = ", ".join(repr(a) for a in bounds.choices)
            raise ZooError(f"{family.name}: bad value {value!r} for {key!r} (choices: {shown})")
        if numeric and value < 0:
            raise ZooError(f"{family.name}: bad value {value!r} for {key!r} (must be >= 0)")
    if not numeric:
        return
    for attr, (says, holds) in _LIMITS.items():
        limit = getattr(bounds, attr)
        if limit is None or isinstance(limit, (str, Expr)) != relative:
            continue
        if isinstance(limit, str):
            bound, shown = params[limit], f"{limit} = {params[limit]}"
        elif isinstance(limit, Expr):
            bound = limit.fn(params)
            shown = f"{limit.text} = {bound}"
        else:
            bound, shown = limit, str(limit)
        if not holds(value, bound):
            raise ZooError(f"{family.name}: bad value {value!r} for {key!r} (must be {says} {shown})")


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
        ZooError: For an unknown name, unknown key, unparseable value or a value out of the family's
            bounds (:class:`Bounds`).
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
    _check_params(family, params)
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
