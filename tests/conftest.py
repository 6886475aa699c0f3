"""Suite-wide switch: with PREFLIGHT_REQUIRE_EXTRAS=1 (CI sets it) a skipped test fails instead.

A test skips where something it needs is missing: an extra (tensorflow, paddle, onnxruntime, transformers), a zoo
model that does not build, an export that fails. On a developer's machine that keeps the suite usable without
every extra; in CI, where `.ci/run` installs `.[all,dev]`, the same skip would silently shrink the suite, so there
it is a failure naming the skip's reason. Only skips that depend on the host rather than on what CI installs
(HOST_SKIPS) stay skips.
"""

from __future__ import annotations

import os

import pytest

# Predictions in tests are the kernel-model estimate unless a test passes `checkpoints=` (the shipped GraphSAGE,
# predictor/checkpoints/, is tested in test_public_train.py): set before any test imports predictor.predict, and
# inherited by the CLI subprocesses tests start.
os.environ.setdefault("PREFLIGHT_CHECKPOINTS", os.path.join(os.path.dirname(__file__), "no-checkpoints"))

pytest_plugins = ["pytester"]  # tests/test_require_extras.py runs this hook in an inner session

REQUIRE_EXTRAS = "PREFLIGHT_REQUIRE_EXTRAS"
# reasons (substrings) of skips that depend on the host, not on the installed environment
HOST_SKIPS = (
    "needs gcc",  # test_hostile_inputs: the shared-library payload is compiled on the spot
    "RLIMIT_AS cap needs Linux /proc",  # test_analyze_many
)


def extras_required() -> bool:
    """True when every skip but a host-dependent one must fail (PREFLIGHT_REQUIRE_EXTRAS=1)."""
    return os.environ.get(REQUIRE_EXTRAS) == "1"


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and extras_required()) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if any(h in reason for h in HOST_SKIPS):
        return
    report.outcome = "failed"
    report.longrepr = f"{REQUIRE_EXTRAS}=1 and this test skipped: {reason}"
