"""The README's examples run: the pre-deployment gate script and the TVM pipeline example."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import analyzer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gate_script_fails_over_budget_and_passes_within(tmp_path, capsys):
    gate = _example("predeploy_gate")
    p = analyzer.predict("zoo:mobilenet_v3_small", device="a100-80gb").prediction
    tight = ["zoo:mobilenet_v3_small", "--device", "a100-80gb", "--max-memory-mb", f"{p.memory_mib * 0.99:.3f}"]
    verdict = tmp_path / "verdict.json"
    assert gate.main([*tight, "--verdict", str(verdict)]) == 4  # a failed gate (the README's exit-code table)
    assert "budget exceeded: predicted memory" in capsys.readouterr().err
    doc = json.loads(verdict.read_text())
    assert doc["pass"] is False and doc["checks"][0]["quantity"] == "memory"
    assert doc["checks"][0]["margin"] < 0  # limit 0.99 x the prediction: about -1% of it
    page = tmp_path / "build" / "r.html"  # a folder that does not exist yet, as on a fresh clone
    ok = [
        "zoo:mobilenet_v3_small",
        "--device",
        "a100-80gb",
        "--max-latency-ms",
        f"{p.latency_ms * 1.01:.6f}",
        "--report",
        str(page),
    ]
    assert gate.main(ok) == 0
    assert page.read_text().startswith("<!DOCTYPE html>")
    assert gate.main(["zoo:no_such_model"]) == 2


def test_tvm_pipeline_example(capsys):
    assert _example("tvm_pipeline").main(["zoo:mobilenet_v3_small"]) == 0
    out = capsys.readouterr().out
    for name in ("preflight.AnnotateCosts", "LegalizeOps", "FuseTIR"):
        assert name in out
    assert "predicted" in out and "MIG" in out
