"""preflight's exceptions. Each carries the CLI exit code of docs/design.md: 1 when a valid request
could not be analysed, 2 for bad usage or unreadable / hostile input."""

from __future__ import annotations

import re


class PreflightError(Exception):
    """Base of every error preflight reports to a user."""

    exit_code = 1


class UsageError(PreflightError):
    """Bad arguments, or an input file that cannot be read safely (exit code 2)."""

    exit_code = 2


class UnreadableModelError(UsageError):
    """The model file is missing, corrupt, of an unknown format, or refused as unsafe."""


class MissingShapeError(UsageError):
    """An input dimension is dynamic and the user did not set it."""


class MissingExtraError(UsageError):
    """An optional dependency is not installed."""


class AnalysisError(PreflightError):
    """The model was read but could not be analysed (exit code 1)."""


class UnsupportedOperatorsError(AnalysisError):
    """Operators without a conversion or cost rule; `operators` maps each to its count."""

    def __init__(self, message: str, operators: dict[str, int]):
        super().__init__(message)
        self.operators = operators


_REPR_START = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\(")  # `ir.Op(`, `relax.TensorType(`
_REPR_NAME = re.compile(r'\bname="([^"]{1,80})"')
_LONG_REPR = 60  # characters between the parentheses


def shorten_reprs(text: str) -> str:
    """`text` with every long object repr (`ir.Op(span=None, ..., name="relax.log", ...)`, as TVM's errors
    print them) replaced by its name (`relax.log`), or by `ir.Op(...)` when it has none; the rest is kept."""
    out, at = [], 0
    for m in _REPR_START.finditer(text):
        if m.start() < at:
            continue  # inside a repr already replaced
        depth, end = 0, None
        for i in range(m.end() - 1, len(text)):
            if text[i] == "(":
                depth += 1
            elif text[i] == ")":
                depth -= 1
                if depth == 0:
                    end = i + 1
                    break
        if end is None or end - m.end() <= _LONG_REPR:
            continue
        name = _REPR_NAME.search(text, m.end(), end)
        out.append(text[at : m.start()])
        out.append(name.group(1) if name else f"{m.group(0)}...)")
        at = end
    out.append(text[at:])
    return "".join(out)


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message, long object reprs shortened (`shorten_reprs`), at most 300
    characters (for one-line user errors)."""
    text = str(exc).strip().splitlines()
    return shorten_reprs(text[0] if text else type(exc).__name__)[:300]
