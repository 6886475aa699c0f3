"""`preflight calibrate-host` / `analyzer.calibrate_host` / `predictor.predict.solve_host_overhead`: the host factor
at which the kernel model's eager latency equals a latency the user measured.

The expected factors are worked out by hand from per-kernel times written here, or from the kernel model's parameter
table (an elementwise kernel's `launch_us`) for a model whose every kernel is launch-bound, never from the code
under test."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from predictor.kernel_model import KernelTimes
from predictor.predict import solve_host_overhead

US = 1e-6


def _times(execution_us, launch_us) -> KernelTimes:
    """Kernel times with the given execution (as the compute term) and launch floor per kernel, in microseconds."""
    e, lau = np.array(execution_us, float) * US, np.array(launch_us, float) * US
    z = np.zeros_like(e)
    return KernelTimes(compute_s=e, memory_s=z, launch_s=lau, bound_compute_s=z, bound_memory_s=z)


def test_solve_by_hand_on_each_segment():
    """Kernels of 10, 1 and 1 us execution, each with a 2 us launch floor: latency(h) = max(10, 2h) + 2 max(1, 2h).
    - 16 us: for 0.5 <= h <= 5, 10 + 4h = 16 -> h = 1.5; the two short kernels at their floor: 2 x 3 = 6 of 16 us.
    - 32 us: beyond h = 5 every kernel is at its floor, 6h = 32 -> h = 5.333, all of it the host's.
    - 40 us: 6h = 40 -> h = 6.667.
    - 13 us: 10 + 4h = 13 -> h = 0.75; the short kernels at their floor, 2 x 1.5 = 3 of 13 us.
    At h = 1 the model says 10 + 2 + 2 = 14 us; the execution alone is 12 us, the floor 6 us."""
    t = _times([10, 1, 1], [2, 2, 2])
    fit = solve_host_overhead(t, 0.016)
    assert fit.host_overhead == pytest.approx(1.5, rel=1e-12)
    assert fit.host_share == pytest.approx(6 / 16, rel=1e-12) and not fit.determined
    assert (fit.gpu_ms, fit.floor_ms, fit.default_ms) == pytest.approx((0.012, 0.006, 0.014), rel=1e-12)
    assert fit.default_floor_ms == pytest.approx(0.004, rel=1e-12)  # at factor 1 the two short kernels: 2 + 2 us
    for measured_us, h, share in ((32, 32 / 6, 1.0), (40, 40 / 6, 1.0), (13, 0.75, 3 / 13)):
        fit = solve_host_overhead(t, measured_us * 1e-3)
        assert fit.host_overhead == pytest.approx(h, rel=1e-12), measured_us
        assert fit.host_share == pytest.approx(share, rel=1e-12), measured_us


def test_a_kernel_launched_inside_a_library_call_adds_its_execution_only():
    """A third kernel with no host launch (launch 0: launched on the device by a library call) of 4 us:
    latency(h) = max(10, 2h) + max(1, 2h) + 4; at 20 us, 10 + 2h + 4 = 20 -> h = 3 (0.5 <= 3 <= 5)."""
    fit = solve_host_overhead(_times([10, 1, 4], [2, 2, 0]), 0.020)
    assert fit.host_overhead == pytest.approx(3.0, rel=1e-12)
    assert fit.host_share == pytest.approx(6 / 20, rel=1e-12)


def test_no_factor_explains_a_run_faster_than_the_kernels():
    t = _times([10, 1, 1], [2, 2, 2])
    for measured in (0.012, 0.005):  # at or under the 12 us of execution alone
        with pytest.raises(ValueError, match="not above the kernels' predicted execution"):
            solve_host_overhead(t, measured)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive number"):
            solve_host_overhead(t, bad)
    with pytest.raises(ValueError, match="no kernel the host launches"):
        solve_host_overhead(_times([10], [0]), 0.02)


def test_a_measurement_within_rounding_of_the_execution_gives_a_finite_factor():
    """Just above the execution alone (the next float): a factor >= 0, finite, whatever the rounding."""
    rng = np.random.default_rng(1)
    for _ in range(100):
        n = int(rng.integers(1, 30))
        t = _times(rng.exponential(5, n), rng.uniform(1, 5, n))
        gpu_ms = float((np.maximum(t.compute_s, t.memory_s) * 1e3).sum())  # as the solve sums it
        fit = solve_host_overhead(t, float(np.nextafter(gpu_ms, np.inf)))
        assert np.isfinite(fit.host_overhead) and fit.host_overhead >= 0


def test_random_graphs_reproduce_the_measurement():
    """For random kernel times, predicting at the solved factor (`host_times`, the path `predict` takes) gives the
    measurement back."""
    from predictor.predict import host_times

    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        t = _times(rng.exponential(5, n), rng.choice([0.0, 1.0], n) * rng.uniform(1, 5, n))
        if t.launch_s.sum() == 0:
            continue
        measured = t.eager_ms * rng.uniform(1.0, 6.0) + 1e-6
        fit = solve_host_overhead(t, measured)
        assert host_times(t, fit.host_overhead).eager_ms == pytest.approx(measured, rel=1e-9)


torch = pytest.importorskip("torch")


def test_a_launch_bound_model_by_hand():
    """SmallChain (16 float32 elementwise adds on 8 x 8, each under its launch floor: checked in
    test_host_overhead.py) on the A100-40GB: latency = 16 x h x launch_us, so a measurement of M ms gives
    h = M / (16 x launch_us x 1e-3), all of it host-bound; and `predict` at that factor gives M back."""
    from test_host_overhead import _chain

    import analyzer
    from predictor.devices import get_device
    from predictor.kernel_model import load_params, param_dtype

    model, args = _chain()
    entry = load_params().lookup(get_device("a100-40gb").key, "elementwise", param_dtype("elementwise", "float32"))
    measured = 16 * 2.35 * entry.launch_us * 1e-3
    report, fit = analyzer.calibrate_host(model, measured, args, device="a100-40gb")
    assert fit.host_overhead == pytest.approx(2.35, rel=1e-9)
    assert fit.host_share == pytest.approx(1.0) and fit.determined
    assert fit.default_ms == pytest.approx(16 * entry.launch_us * 1e-3, rel=1e-12)
    again = analyzer.predict(model, args, device="a100-40gb", host_overhead=fit.host_overhead)
    assert again.prediction.latency_ms == pytest.approx(measured, rel=1e-9)


def test_the_api_refuses_what_it_cannot_calibrate():
    from test_host_overhead import _chain

    import analyzer
    from analyzer.errors import UsageError

    model, args = _chain()
    with pytest.raises(UsageError, match="MIG slice: calibrate the host on the whole GPU"):
        analyzer.calibrate_host(model, 1.0, args, device="a100-40gb:1g.5gb")
    with pytest.raises(UsageError, match="positive number"):
        analyzer.calibrate_host(model, 0, args, device="a100-40gb")
    with pytest.raises(UsageError, match="not above the kernels' predicted execution"):
        analyzer.calibrate_host(model, 1e-6, args, device="a100-40gb")
    with pytest.raises(UsageError, match="unknown|Unknown"):
        analyzer.calibrate_host(model, 1.0, args, device="no-such-gpu")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "analyzer.cli", "calibrate-host", *args], capture_output=True, text=True, timeout=600
    )


def test_cli_json_and_text(tmp_path):
    """The CLI on a zoo model at batch 1 on the H100: the JSON's factor reproduces the measurement through
    `preflight predict --host-overhead` (the predicted latency printed by predict's JSON); a measurement under the
    kernels' execution, a MIG slice and a second --device exit 2 with one line, no traceback."""
    measured = 9.0
    r = _cli("zoo:resnet18?resolution=64", "--batch", "1", "--measured-ms", str(measured), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["measured_ms"] == measured and doc["device"] == "h100-80gb" and doc["determined"] is True
    assert doc["schema"] == "preflight.host_calibration/1" and doc["warnings"] == []
    assert doc["kernel_model"]["execution_ms"] < doc["kernel_model"]["latency_ms"] < measured
    p = subprocess.run(
        [sys.executable, "-m", "analyzer.cli", "predict", "zoo:resnet18?resolution=64", "--batch", "1",
         "--host-overhead", repr(doc["host_overhead"]), "--format", "json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["prediction"]["latency_ms"] == pytest.approx(measured, rel=1e-4)  # factor rounded

    t = _cli("zoo:resnet18?resolution=64", "--batch", "1", "--measured-ms", str(measured))
    assert t.returncode == 0 and f"Use --host-overhead {doc['host_overhead']:.3g}" in t.stdout
    for args, msg in (
        (("--measured-ms", "0.001"), "not above the kernels' predicted execution"),
        (("--measured-ms", "5", "--device", "a100-40gb:1g.5gb"), "MIG slice"),
        (("--measured-ms", "5", "--device", "h100-80gb", "--device", "a100-40gb"), "takes one GPU"),
        (("--measured-ms", "-3"), "--measured-ms"),
    ):
        bad = _cli("zoo:resnet18?resolution=64", "--batch", "1", *args)
        assert bad.returncode == 2 and msg in bad.stderr and "Traceback" not in bad.stderr, (args, bad.stderr)


def test_cli_warns_on_a_forward_it_predicts_gpu_bound():
    """ResNet-18 (64 px) at batch 512 on the H100: at factor 1 most of the predicted time is execution, not the
    launch floor (the JSON says both). A measurement at 1.1x the prediction gets no GPU-bound caution (not far
    above); one of 3x gets it, in the text (stderr) and in the JSON's warnings; one of 20x needs a factor above 10,
    with the plausibility caution."""
    model = "zoo:resnet18?resolution=64"
    doc = json.loads(_cli(model, "--batch", "512", "--measured-ms", "1000", "--format", "json").stdout)
    km = doc["kernel_model"]
    assert km["at_launch_floor_ms"] < km["latency_ms"] / 2
    assert any("a factor above 10" in w for w in doc["warnings"])
    near = _cli(model, "--batch", "512", "--measured-ms", repr(1.1 * km["latency_ms"]))
    assert near.returncode == 0 and "GPU-bound" not in near.stderr
    r = _cli(model, "--batch", "512", "--measured-ms", repr(3 * km["latency_ms"]), "--format", "json")
    assert r.returncode == 0 and any("predicts this forward GPU-bound" in w for w in json.loads(r.stdout)["warnings"])
    r = _cli(model, "--batch", "512", "--measured-ms", repr(3 * km["latency_ms"]))
    assert "predicts this forward GPU-bound" in r.stderr and "Traceback" not in r.stderr
    r = _cli(model, "--batch", "512", "--measured-ms", repr(20 * km["latency_ms"]))
    assert r.returncode == 0 and "a factor above 10" in r.stderr


def test_cli_does_not_recommend_an_undetermined_factor():
    """Just above the kernels' execution at batch 1 (the host sets almost none of it at the solution): no "Use
    --host-overhead" line, the caution instead, and `determined` false in the JSON."""
    model = "zoo:resnet18?resolution=64"
    km = json.loads(_cli(model, "--batch", "1", "--measured-ms", "50", "--format", "json").stdout)["kernel_model"]
    just_above = repr(km["execution_ms"] * 1.001)
    r = _cli(model, "--batch", "1", "--measured-ms", just_above)
    assert r.returncode == 0 and "Use --host-overhead" not in r.stdout and "Not determined" in r.stdout
    assert "not determined" in r.stderr
    doc = json.loads(_cli(model, "--batch", "1", "--measured-ms", just_above, "--format", "json").stdout)
    assert doc["determined"] is False and any("not determined" in w for w in doc["warnings"])
