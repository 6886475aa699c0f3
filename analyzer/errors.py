"""preflight's exceptions. Each carries its CLI exit code (the table below, docs/design.md and the README):

    0  success (and, with budgets, every budget met)
    1  a valid request that could not be analysed or predicted
    2  bad usage, or an unreadable, unsupported-format or unsafe input
    3  a resource cap of the analysis was hit (memory or time)
    4  a gate failed: a budget broken (--max-latency-ms, --max-memory-mb) or a --strict finding

so that a deployment script can tell "too slow" (4) from "broken" (1, 2, 3)."""

from __future__ import annotations

import re

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_LIMIT = 3
EXIT_GATE = 4


class PreflightError(Exception):
    """Base of every error preflight reports to a user."""

    exit_code = EXIT_FAILED


class UsageError(PreflightError):
    """Bad arguments, or an input file that cannot be read safely (exit code 2)."""

    exit_code = EXIT_USAGE


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


class StrictFindingError(UnsupportedOperatorsError):
    """--strict found operators without a cost rule in a model that was read and analysed (a failed gate, 4)."""

    exit_code = EXIT_GATE


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


def one_line(exc: BaseException, *, every_line: bool = False) -> str:
    """The first line of an exception's message (`every_line`: all its non-empty lines joined by spaces, for
    libraries that give the reason on a later line), long object reprs shortened (`shorten_reprs`), at most 300
    characters (for one-line user errors)."""
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if every_line and text:
        text = [" ".join(text)]
    return shorten_reprs(text[0] if text else type(exc).__name__)[:300]


_FLAG = re.compile(
    r"--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)"  # the flag
    r"(?: (?=[^\s'\"]*:)([^\s,;)]+)| (\d+)\b| (vllm|eager)\b)?"  # a spec NAME:DIMS, a number, a runtime
)
_FLAG_PARAMS = {"input": "inputs", "device": "devices"}  # a CLI flag whose keyword has another name


def in_api_terms(message: str, params) -> str:
    """`message` (a user error written for the CLI) with each `--flag` that is a keyword of the Python call
    (`params`: its parameter names) written as that keyword: `--batch must be ...` -> `batch= must be ...`,
    `--batch 8` -> `batch=8`, `--runtime vllm` -> `runtime='vllm'`, `--input x:1x3x224x224` ->
    `inputs=['x:1x3x224x224']`, `--matmul-precision` -> `matmul_precision=`; `--input` -> `inputs=` and
    `--device` -> `devices=` where the call has no `input` / `device` keyword. A flag the call does not take
    is left as the CLI spells it."""

    def keyword(m: re.Match) -> str:
        name = m.group(1).replace("-", "_")
        if name not in params:
            name = _FLAG_PARAMS.get(name, name)
        if name not in params:
            return m.group(0)
        if m.group(2):  # an --input spec: a list of strings in the API
            return f"{name}=[{m.group(2)!r}]" if name == "inputs" else f"{name}={m.group(2)!r}"
        if m.group(4):
            return f"{name}={m.group(4)!r}"
        return f"{name}={m.group(3) or ''}"

    return _FLAG.sub(keyword, message)


def api_call(module: str, name: str):
    """The function `name` of `module`, imported on first call, whose `PreflightError`s speak in the Python call's
    keywords rather than CLI flags (`in_api_terms`); the exception's type and other attributes are kept."""
    import functools
    import importlib
    import inspect

    target = getattr(importlib.import_module(module), name)
    params = frozenset(inspect.signature(target).parameters)

    @functools.wraps(target)
    def call(*args, **kwargs):
        try:
            return getattr(importlib.import_module(module), name)(*args, **kwargs)
        except PreflightError as exc:
            if exc.args and isinstance(exc.args[0], str):
                exc.args = (in_api_terms(exc.args[0], params), *exc.args[1:])
            raise

    return call
