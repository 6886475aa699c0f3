"""Input specifications: `--input NAME:DIMS[:DTYPE]` and `--batch N`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import MissingShapeError, UsageError

MAX_DIM = 2**31 - 1  # larger dimensions are typos; they would overflow the importers' int64 shape arithmetic
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")


def printable(text: str) -> str:
    """`text` with control characters escaped (`\\n`, `\\x00`): names from a model file can hold any, and an
    error message stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


MAX_NAME = 200  # characters of an op's source name or module path kept in reports; longer ones end in an ellipsis
TOP_LEVEL = "(top level)"  # the module of an op in the model's own forward (as the PyTorch route names it)


def short_name(text: str) -> str:
    """A name from a model file as reports show it: `printable`, at most MAX_NAME characters."""
    text = printable(text)
    return text if len(text) <= MAX_NAME else text[: MAX_NAME - 1] + "\u2026"


def _looks_like_dims(text: str) -> bool:
    """Whether `text` reads as DIMS: sizes or `?` separated by `x`."""
    return all(d == "?" or d.isdigit() for d in text.lower().split("x"))


@dataclass(frozen=True)
class InputSpec:
    """A user's shape (and optionally dtype) for one named model input."""

    name: str
    shape: tuple[int | None, ...]  # None: keep the file's value (`?` in DIMS)
    dtype: str | None = None

    @classmethod
    def parse(cls, text: str) -> InputSpec:
        """Parse `NAME:DIMS[:DTYPE]`, DIMS `x`-separated, e.g. `pixel_values:8x3x224x224:float16`; a `?` in
        DIMS keeps the file's value of that dimension (`x:?x3x64x64`)."""
        parts = text.rsplit(":", 2) if text.count(":") >= 2 else text.rsplit(":", 1)
        if len(parts) == 3 and parts[2] not in DTYPES:
            if _looks_like_dims(parts[1]) and not _looks_like_dims(parts[2]):  # NAME:DIMS:<a dtype misspelt>
                raise UsageError(f"--input {text!r}: unknown dtype {parts[2]!r} (one of {', '.join(DTYPES)})")
            # the name itself may contain ':' (ONNX names like "input:0"): re-split keeping it
            parts = text.rsplit(":", 1)
        if len(parts) < 2 or not parts[0]:
            raise UsageError(f"--input {text!r}: expected NAME:DIMS[:DTYPE], e.g. x:1x3x224x224")
        name, dims = parts[0], parts[1]
        dtype = parts[2] if len(parts) == 3 else None
        bad = f"--input {text!r}: DIMS must be positive integers (or ? for the file's value) separated by 'x'"
        try:
            shape = tuple(None if d == "?" else int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise UsageError(bad) from None
        if not shape or any(d is not None and d <= 0 for d in shape):
            raise UsageError(bad)
        if any(d is not None and d > MAX_DIM for d in shape):
            raise UsageError(f"--input {text!r}: a dimension is larger than {MAX_DIM}")
        if dtype is not None and dtype not in DTYPES:
            raise UsageError(f"--input {text!r}: unknown dtype {dtype!r} (one of {', '.join(DTYPES)})")
        return cls(name, shape, dtype)


def batch_per_input(inputs_dims: Sequence[Sequence], batch: int | None) -> list[int | None]:
    """What `--batch` sets, per input (`inputs_dims`: each input's file dimensions, an int when fixed): dimension 0
    of every input when no input's dimension 0 is dynamic (a fixed one must then equal it, `resolve_shape`), else
    only of the inputs whose dimension 0 is dynamic: an input with a fixed first dimension beside a dynamic batch
    (a scale vector of 16, a position table) is no batched input and keeps its size."""
    dynamic = any(dims and not isinstance(dims[0], int) for dims in inputs_dims)
    return [None if batch is None or (dynamic and dims and isinstance(dims[0], int)) else batch for dims in inputs_dims]


def resolve_shape(
    name: str, file_dims: list[int | str | None], spec: InputSpec | None, batch: int | None, source: str
) -> tuple[int, ...]:
    """The concrete shape of input `name`.

    `file_dims` are the model file's dimensions: an int when fixed, a string or None when dynamic.
    A user's `--input` wins over the file for dynamic dims (a None in it, `?`, keeps the file's);
    `--batch` sets dimension 0. A dim that stays dynamic, or a user value that contradicts a fixed
    dim, raises an error naming the input, the dimension and the flag that sets it; its `--input`
    hint writes each dynamic dimension as N, to be replaced by a size.
    """
    dims = list(file_dims)
    if spec is not None:
        if len(spec.shape) != len(dims):
            raise UsageError(f"input '{name}' has {len(dims)} dimensions in {source}, --input gives {len(spec.shape)}")
        for i, (f, u) in enumerate(zip(dims, spec.shape, strict=True)):
            if u is None:
                continue
            if isinstance(f, int) and f != u:
                raise UsageError(
                    f"input '{name}' dimension {i} is fixed to {f} in {source}; --input asks for {u} "
                    f"(re-export the model with that dimension dynamic)"
                )
            dims[i] = u
    if batch is not None and dims:
        if isinstance(file_dims[0], int) and file_dims[0] != batch:
            raise UsageError(
                f"input '{name}' dimension 0 is fixed to {file_dims[0]} in {source}; --batch {batch} "
                f"cannot change it (re-export the model with a dynamic batch dimension)"
            )
        dims[0] = batch
    dynamic = [i for i, d in enumerate(dims) if not isinstance(d, int)]
    if dynamic:  # every dynamic dim in one message: a user sets them in one go
        named = [f"{i}" + (f" ('{dims[i]}')" if dims[i] else "") for i in dynamic]
        hint = f"--input {name}:{'x'.join(str(x) if isinstance(x, int) else 'N' for x in dims)}"
        if len(dynamic) == 1:
            what = f"dimension {named[0]} is dynamic: set it with " + ("--batch N or " if dynamic == [0] else "")
            hint += " (each N a size; ? keeps the file's value)"
        else:
            what = f"dimensions {', '.join(named[:-1])} and {named[-1]} are dynamic: set them with "
            hint += " (each N a size; ? keeps the file's value" + (
                "; --batch N sets dimension 0)" if 0 in dynamic else ")"
            )
        raise MissingShapeError(f"input '{name}' {what}{hint}")
    return tuple(dims)


def record_symbol_value(values: dict[str, int], symbol: str, spec: InputSpec | None, name: str, axis: int) -> None:
    """Record in `values` the size `--input` (`spec`, of input `name`) gives dimension `axis`, the file's dynamic dim
    `symbol` of a symbolic analysis (nothing when the spec has none there, `?`). UsageError when it is the batch
    (the analysis's symbol: set by --batch) or when another input gave the same symbol another size."""
    given = None if spec is None else spec.shape[axis]
    if given is None:
        return
    if symbol == "batch":
        raise UsageError(
            f"input '{name}' dimension {axis} is the batch, the symbol of the analysis: give --batch, and ? for it "
            "in --input"
        )
    if values.setdefault(symbol, given) != given:
        raise UsageError(
            f"dimension '{symbol}' is shared by several inputs and given both {values[symbol]} and {given}"
        )


def check_fixed_dim(name: str, axis: int, fixed: int, spec: InputSpec | None, source: str) -> None:
    """UsageError when `--input` (`spec`, of input `name`) asks dimension `axis`, fixed to `fixed` in the file, for
    another size (as `resolve_shape` refuses it without a symbolic analysis)."""
    given = None if spec is None else spec.shape[axis]
    if given is not None and given != fixed:
        raise UsageError(
            f"input '{name}' dimension {axis} is fixed to {fixed} in {source}; --input asks for {given} "
            f"(re-export the model with that dimension dynamic)"
        )
