"""The MIG slice latency model: each slice's share of SMs and memory bandwidth, and the asynchronously issued
kernels of `predictor.mig.queued_s` / `slice_latencies`, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from predictor.devices import get_device
from predictor.kernel_model import KernelArrays, KernelTimes, kernel_latency_arrays
from predictor.mig import queued_s, slice_latencies

US = 1e-6

#: NVIDIA's Multi-Instance GPU user guide, "A100 MIG profiles" (A100-SXM4-40GB): SMs per GPU instance, and memory
#: slices of 8 (each 1/8 of the memory, the memory bandwidth and the L2 cache); 98 of the GPU's 108 SMs are usable
#: under MIG (7 x 14).
A100_40GB_MIG = {"1g.5gb": (14, 1), "2g.10gb": (28, 2), "3g.20gb": (42, 4), "4g.20gb": (56, 4), "7g.40gb": (98, 8)}


def _times(execution_us: list[float], launch_us: list[float]) -> KernelTimes:
    e, zero = np.array(execution_us) * US, np.zeros(len(execution_us))
    return KernelTimes(e, e, np.array(launch_us) * US, zero, zero)


def test_a100_profiles_own_the_user_guides_sms_and_memory_slices():
    a100 = get_device("a100-40gb")
    assert a100.sms == 108
    assert {p.name: (p.sms, p.memory_slices) for p in a100.mig} == A100_40GB_MIG


def test_a_roofline_bound_kernel_on_3g_20gb_takes_the_exact_fractions():
    """One float32 GEMM (CUDA cores) and one copy on 3g.20gb: 42 of 108 SMs and 4 of 8 memory slices.

    GEMM 2 x 4096^3 = 137,438,953,472 FLOP at 19.5e12 x 42 / 108 = 7.5833e12 FLOP/s: 18.1238 ms (whole GPU 7.04815
    ms, x 108 / 42 = 2.5714). Copy of 2^30 bytes at 1555e9 x 4 / 8 = 777.5e9 B/s: 1.38102 ms (whole 0.690509 ms, x 2).
    """
    a100 = get_device("a100-40gb")
    n = 4096.0
    arrays = KernelArrays(
        np.array(["gemm", "copy"]), np.array(["float32", "float32"]), np.array([2 * n**3, 0.0]),
        np.array([3 * 4 * n * n, 2.0**30]), np.array([1.0, 0.0]), np.array([n, 0.0]), np.array([n, 0.0]),
        np.array([n, 0.0]),
    )  # fmt: skip
    part = kernel_latency_arrays(arrays, a100, a100.profile("3g.20gb"))
    whole = kernel_latency_arrays(arrays, a100)
    assert part.bound_compute_s[0] * 1e3 == pytest.approx(18.1238, rel=1e-5)
    assert part.bound_compute_s[0] / whole.bound_compute_s[0] == pytest.approx(108 / 42)
    assert part.bound_memory_s[1] * 1e3 == pytest.approx(1.38102, rel=1e-5)
    assert part.bound_memory_s[1] / whole.bound_memory_s[1] == pytest.approx(2.0)
    assert (part.launch_s == whole.launch_s).all()  # host work: not scaled


def test_queued_by_hand():
    # one kernel: max(execution, issue), as the per-kernel model
    assert queued_s(np.array([5.0]), np.array([16.0])) == 16.0
    assert queued_s(np.array([31.0]), np.array([16.0])) == 31.0
    # executions 1, 10, 1 issued every 3: kernel 0 runs 0-1, kernel 1 (issued by 3) 3-13, kernel 2 (issued by 6)
    # waits for the GPU, 13-14; the host is done at 9. The per-kernel max would be 3 + 10 + 3 = 16.
    assert queued_s(np.array([1.0, 10.0, 1.0]), np.array([3.0, 3.0, 3.0])) == 14.0
    # host-bound: executions 1 each, issued every 3: the host's 9
    assert queued_s(np.array([1.0, 1.0, 1.0]), np.array([3.0, 3.0, 3.0])) == 9.0
    assert queued_s(np.array([]), np.array([])) == 0.0


def test_queued_a_row_of_c_launches_is_c_rows():
    """`KernelArrays.count`: a row's times are the sums of its c launches; the oracle spells the launches out."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        e, d = rng.exponential(size=8), rng.exponential(size=8)
        c = rng.integers(1, 5, size=8)
        assert queued_s(e * c, d * c) == pytest.approx(queued_s(np.repeat(e, c), np.repeat(d, c)), rel=1e-12)


def test_slice_latencies_by_hand():
    """Whole GPU: executions 1, 10, 1 us issued every 3 us: 14 us (test above). Slice: 2, 30, 2 us: kernel 1 runs
    3-33, kernel 2 33-35: 35 us. A whole-GPU prediction of 0.016 ms becomes 0.016 + (35 - 14) / 1000 = 0.037 ms
    (the ratio rule would give 0.016 x 35 / 14 = 0.04: it would scale the prediction's 2 us over the queued 14).

    host_scale 2 (issued every 6 us): whole max(18 host, 0 + 12, 6 + 11, 12 + 1) = 18; slice max(18, 34, 6 + 32,
    12 + 2) = 38: 0.016 + (38 - 18) / 1000 = 0.036 ms."""
    whole, part = _times([1, 10, 1], [3, 3, 3]), _times([2, 30, 2], [3, 3, 3])
    got = slice_latencies(0.016, whole, {"1g": part, "7g": whole})
    assert got["1g"] == pytest.approx(0.037) and got["7g"] == pytest.approx(0.016)
    assert slice_latencies(0.016, whole, {"1g": part}, host_scale=2.0)["1g"] == pytest.approx(0.036)
    # a trained predictor's whole-GPU 0.020 ms: its own 0.006 ms over the queued 14 us is carried over, 0.020 + 0.021
    assert slice_latencies(0.020, whole, {"1g": part})["1g"] == pytest.approx(0.041)
    empty = _times([], [])
    assert slice_latencies(0.5, empty, {"1g": empty}) == {"1g": 0.5}


def test_slice_latencies_exec_scale_stretches_gpu_time_not_host_time():
    """The same kernels as above with every execution x 2 (`exec_scale`), the issue time unscaled.

    Whole: executions 2, 20, 2 issued every 3 us: max(host 9, 0 + 24, 3 + 22, 6 + 2) = 25 us. Slice: 4, 60, 4:
    max(9, 68, 3 + 64, 6 + 4) = 68 us. 0.016 ms + (68 - 25) / 1000 = 0.059 ms.
    With host_scale 2 as well (issued every 6 us): whole max(18, 24, 6 + 22, 12 + 2) = 28; slice max(18, 68, 6 + 64,
    12 + 4) = 70: 0.016 + (70 - 28) / 1000 = 0.058 ms. A host-bound graph (executions 1, 1, 1 on the whole GPU and
    1, 1, 1 on the slice, issued every 3 us) is not slowed by either scale: 9 - 9, the whole GPU's 0.016 ms."""
    whole, part = _times([1, 10, 1], [3, 3, 3]), _times([2, 30, 2], [3, 3, 3])
    assert slice_latencies(0.016, whole, {"1g": part}, exec_scale=2.0)["1g"] == pytest.approx(0.059)
    assert slice_latencies(0.016, whole, {"1g": part}, host_scale=2.0, exec_scale=2.0)["1g"] == pytest.approx(0.058)
    short = _times([1, 1, 1], [3, 3, 3])
    assert slice_latencies(0.016, short, {"1g": short}, exec_scale=2.0)["1g"] == pytest.approx(0.016)


def _issued_asynchronously_s(times: KernelTimes) -> float:
    """The oracle of `queued_s`, as an event loop over the kernels in launch order: the host begins issuing kernel i
    when it is done with kernel i-1; kernel i starts then or when the GPU finishes kernel i-1, whichever is later;
    the run ends when both the GPU and the host are done."""
    host = gpu = 0.0
    for c, m, d in zip(times.compute_s, times.memory_s, times.launch_s, strict=True):
        gpu = max(host, gpu) + max(c, m)
        host += d
    return max(host, gpu)


def test_predict_states_each_slice_as_the_whole_gpu_plus_the_queued_difference():
    """A 2048^3 float32 GEMM then 16 small elementwise kernels, through `predict` (the estimate on the H100: no
    artifact for it), on the whole GPU and with a slice as the target.

    The rule: a slice's latency = the whole GPU's predicted latency + (kernels issued asynchronously on the slice)
    - (on the whole GPU), the two computed here by an event loop over the kernel model's times. Where the rule bites:
    the GEMM (2 x 2048^3 = 17.2 GFLOP) runs for hundreds of us while the host issues the 16 short kernels behind it
    (each far under its launch floor), so they add ~their execution, not their floor, after it; the per-kernel sum
    (the whole GPU's eager estimate) counts each at the floor. That excess of the estimate over the queued time is
    host time, carried over to a slice unscaled: the ratio rule (whole x queued slice / queued whole), which scales
    it, differs from the difference by over 5% on 1g.10gb (16 of 132 SMs; asserted), so it would fail here."""
    from oracle_models import gemm_then_small

    import analyzer

    model, args = gemm_then_small()
    report = analyzer.predict(model, args, device="h100-80gb")
    p = report.prediction
    assert p.predictor == "roofline"
    h100 = get_device("h100-80gb")
    kernels = getattr(report.analysis, "launched_kernels", report.analysis.kernels)
    assert len(kernels) == 17 and kernels[0].kind in ("gemm", "matmul")
    from predictor.kernel_model import kernel_arrays

    arrays = kernel_arrays(kernels)
    whole = kernel_latency_arrays(arrays, h100)
    assert p.latency_ms == pytest.approx(whole.eager_ms, rel=1e-12)  # the estimate: the per-kernel sum
    base = _issued_asynchronously_s(whole)
    for q in h100.mig:
        part = kernel_latency_arrays(arrays, h100, q)
        want = p.latency_ms + 1e3 * (_issued_asynchronously_s(part) - base)
        assert p.mig.latency_ms[q.name] == pytest.approx(want, rel=1e-9), q.name
    one = kernel_latency_arrays(arrays, h100, h100.profile("1g.10gb"))
    on_one = p.latency_ms + 1e3 * (_issued_asynchronously_s(one) - base)
    assert abs(p.latency_ms * _issued_asynchronously_s(one) / base / on_one - 1) > 0.05  # not the ratio rule
    # the slice as the target: the same latency, its slowdown against the whole GPU's prediction
    part = analyzer.predict(model, args, device="h100-80gb:1g.10gb").prediction
    assert part.latency_ms == pytest.approx(on_one, rel=1e-9)
    assert part.mig.chosen.slowdown == pytest.approx(on_one / p.latency_ms, rel=1e-9)


def test_a_trained_predictors_slices_take_the_same_rule(tmp_path, monkeypatch):
    """The shipped GraphSAGE (`predictor/checkpoints/`, `--predictor public`; a copy with its OOD threshold lifted, so
    it answers for any graph) on the A100-40GB, a GPU it was measured on: each slice of the recommender is its
    whole-GPU prediction + the queued difference of the event loop above (not the kernel model's own slice
    estimate). With
    a slice as the target it predicts the slice as a device of its own (it was trained on the A100's MIG slices),
    and the slowdown stated is against its own whole-GPU prediction."""
    import json
    import shutil

    import torch

    from analyzer import analyze
    from predictor.kernel_model import kernel_arrays
    from predictor.predict import SHIPPED_CHECKPOINTS, find_artifact, predict

    monkeypatch.setenv("PREFLIGHT_PREDICTOR", "public")  # before the lookup: whatever the shipped default devices are
    shipped = find_artifact("a100-80gb", SHIPPED_CHECKPOINTS)
    assert shipped is not None, "the committed GraphSAGE checkpoint (predictor/checkpoints/a100-80gb@1) is missing"
    art = tmp_path / shipped.name
    shutil.copytree(shipped, art)
    meta = json.loads((art / "meta.json").read_text())
    meta["ood"]["threshold"] = 1e9
    (art / "meta.json").write_text(json.dumps(meta))
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 512)).eval()
    analysis = analyze(model, (torch.randn(64, 512),)).analysis
    p, _ = predict(analysis, "a100-40gb", checkpoints=tmp_path)
    assert p.predictor == shipped.name
    a100 = get_device("a100-40gb")
    arrays = kernel_arrays(getattr(analysis, "launched_kernels", analysis.kernels))
    assert abs(p.latency_ms / kernel_latency_arrays(arrays, a100).eager_ms - 1) > 1e-3  # not the kernel model's
    base = _issued_asynchronously_s(kernel_latency_arrays(arrays, a100))
    for q in a100.mig:
        want = p.latency_ms + 1e3 * (_issued_asynchronously_s(kernel_latency_arrays(arrays, a100, q)) - base)
        assert p.mig.latency_ms[q.name] == pytest.approx(want, rel=1e-9), q.name
    part, _ = predict(analysis, "a100-40gb:3g.20gb", checkpoints=tmp_path)
    assert part.predictor == shipped.name
    assert part.mig.full_gpu_latency_ms == pytest.approx(p.latency_ms, rel=1e-9)
    assert part.mig.chosen.slowdown == pytest.approx(part.latency_ms / p.latency_ms, rel=1e-9)
