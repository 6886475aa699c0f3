"""The command-line tail the parameter fits share (`predictor.power_fit`, `predictor.memory_fit`): check the input
files, run the fit, write its parameter file, print its evaluation table."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path


def fit_main(
    data: Path,
    required: Iterable[str],
    fit: Callable[[], tuple[dict, str] | None],
    out: str,
    errors: tuple[type[Exception], ...] = (ValueError,),
) -> int:
    """Run a fit as its `main` does; returns the exit code.

    Each name of `required` must be a file in `data` (else "error: <path> not found" on stderr, exit 2, nothing
    written); then `fit()` runs: it returns (the parameter document, the evaluation table), or None when it printed
    all it had to say and writes nothing (exit 0). One of `errors` raised by it: "error: <message>" on stderr,
    exit 2, nothing written. Otherwise the document goes to `out` as indented JSON (indent 1, a final newline), the
    table and "wrote <out>" to stdout, exit 0; an `out` that cannot be written: "error: cannot write <out>: <why>" on
    stderr, exit 2."""
    for name in required:
        if not (data / name).is_file():
            print(f"error: {data / name} not found", file=sys.stderr)
            return 2
    try:
        result = fit()
    except errors as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if result is None:
        return 0
    doc, table = result
    try:
        Path(out).write_text(json.dumps(doc, indent=1) + "\n")
    except OSError as e:
        print(f"error: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(table)
    print(f"wrote {out}")
    return 0
