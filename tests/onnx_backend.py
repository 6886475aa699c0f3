"""The ONNX project's own backend test models (shipped inside the `onnx` package) run through preflight.

Each `model.onnx` under `onnx/backend/test/data/<suite>/<test>/` is analysed in-process, as `preflight analyze`
would, and gets one outcome: "ok", "ok:unsupported" (analysed, with operators that have no cost rule listed), or
the class of the clean error preflight raised (`UnsupportedOperatorsError`, `MissingShapeError`, ...). Anything
else (an exception that is not a `PreflightError`) is a crash.

    python tests/onnx_backend.py            # print the outcome counts and the operators TVM cannot import
    python tests/onnx_backend.py --write    # regenerate tests/data/onnx_backend_expected.json
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import warnings
from collections import Counter
from pathlib import Path

EXPECTED = Path(__file__).resolve().parent / "data" / "onnx_backend_expected.json"


def backend_models() -> list[tuple[str, Path]]:
    """(suite/test, path) of every backend test model, sorted."""
    import onnx

    root = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data"
    return sorted((f"{p.parent.parent.name}/{p.parent.name}", p) for p in root.glob("*/*/model.onnx"))


def run_one(path: Path) -> tuple[str, dict, str]:
    """(outcome, unsupported operators -> count, what was printed to stdout) of one model."""
    from analyzer.errors import PreflightError, UnsupportedOperatorsError
    from analyzer.pipeline import analyze_model

    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            report = analyze_model(str(path))
        except UnsupportedOperatorsError as exc:
            return type(exc).__name__, dict(exc.operators), out.getvalue()
        except PreflightError as exc:
            return type(exc).__name__, {}, out.getvalue()
        except Exception as exc:  # noqa: BLE001 - a crash is the outcome the suite exists to find
            return f"crash:{type(exc).__name__}: {str(exc)[:200]}", {}, out.getvalue()
    unsupported = dict(report.totals.unsupported)
    return ("ok:unsupported" if unsupported else "ok"), unsupported, out.getvalue()


def run_suite() -> dict[str, dict]:
    """name -> {"outcome", "unsupported", "stdout"} for every backend model."""
    return {
        name: dict(zip(("outcome", "unsupported", "stdout"), run_one(path), strict=True))
        for name, path in backend_models()
    }


def summary(results: dict[str, dict]) -> tuple[Counter, Counter]:
    """(outcome counts, operator -> number of models that TVM's importer cannot read because of it)."""
    outcomes = Counter(r["outcome"] for r in results.values())
    ops: Counter = Counter()
    for r in results.values():
        if r["outcome"] == "UnsupportedOperatorsError":
            ops.update(r["unsupported"].keys())
    return outcomes, ops


def main(argv: list[str]) -> int:
    results = run_suite()
    outcomes, ops = summary(results)
    print(f"{len(results)} models: " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()))
    print("operators TVM's importer cannot read (models): " + ", ".join(f"{k} {v}" for k, v in ops.most_common()))
    if "--write" in argv:
        EXPECTED.parent.mkdir(exist_ok=True)
        EXPECTED.write_text(json.dumps({k: r["outcome"] for k, r in results.items()}, indent=0) + "\n")
        print(f"wrote {EXPECTED}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main(sys.argv[1:]))
