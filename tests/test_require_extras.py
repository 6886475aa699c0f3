"""The PREFLIGHT_REQUIRE_EXTRAS=1 switch of tests/conftest.py, in an inner pytest session with the same conftest."""

from __future__ import annotations

from pathlib import Path

INNER = """
import pytest

def test_missing_extra():
    pytest.importorskip("no_such_module_for_preflight")

def test_host_dependent():
    pytest.skip("needs gcc to build the shared library payload")

@pytest.mark.skipif(True, reason="the tensorflow extra is not installed")
def test_marked():
    pass

@pytest.fixture
def zoo_model():
    pytest.skip("zoo model x does not build")

def test_fixture_skip(zoo_model):
    pass

@pytest.mark.xfail(reason="expected", strict=True)
def test_xfail():
    assert False

def test_runs():
    pass
"""


def _run(pytester, monkeypatch, value: str | None):
    pytester.makeconftest(Path(__file__).with_name("conftest.py").read_text())
    pytester.makepyfile(test_inner=INNER)
    if value is None:
        monkeypatch.delenv("PREFLIGHT_REQUIRE_EXTRAS", raising=False)
    else:
        monkeypatch.setenv("PREFLIGHT_REQUIRE_EXTRAS", value)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider")


def test_skips_stay_skips_without_the_switch(pytester, monkeypatch):
    _run(pytester, monkeypatch, None).assert_outcomes(passed=1, skipped=4, xfailed=1)
    _run(pytester, monkeypatch, "0").assert_outcomes(passed=1, skipped=4, xfailed=1)


def test_skips_fail_with_the_switch_but_host_dependent_ones(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, "1")
    # the importorskip in the test body fails; the skipif mark and the fixture skip happen in setup: errors
    result.assert_outcomes(passed=1, skipped=1, failed=1, errors=2, xfailed=1)
    result.stdout.fnmatch_lines(["*PREFLIGHT_REQUIRE_EXTRAS=1 and this test skipped*no_such_module_for_preflight*"])
