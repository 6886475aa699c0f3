"""preflight's exceptions. Each carries the CLI exit code of docs/design.md: 1 when a valid request
could not be analysed, 2 for bad usage or unreadable / hostile input."""

from __future__ import annotations


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


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message, at most 300 characters (for one-line user errors)."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
