"""Every model of the ONNX backend test suite: no crash, no internal error, nothing on stdout, and the outcome
committed in tests/data/onnx_backend_expected.json (regenerate it with `python tests/onnx_backend.py --write`
when a change is meant to move a model from one outcome to another, and say why in the commit)."""

from __future__ import annotations

import json

import pytest
from onnx_backend import EXPECTED, run_suite


@pytest.fixture(scope="module")
def results():
    return run_suite()


def test_no_model_crashes_or_prints(results):
    crashes = {k: r["outcome"] for k, r in results.items() if r["outcome"].startswith("crash:")}
    assert not crashes, crashes
    printed = {k: r["stdout"][:200] for k, r in results.items() if r["stdout"]}
    assert not printed, printed  # --format json keeps stdout for the document alone


def test_outcomes_match_the_committed_table(results):
    expected = json.loads(EXPECTED.read_text())
    got = {k: r["outcome"] for k, r in results.items()}
    assert set(got) == set(expected), "the onnx package's backend suite changed: regenerate the table"
    changed = {k: (expected[k], got[k]) for k in got if got[k] != expected[k]}
    assert not changed, changed
