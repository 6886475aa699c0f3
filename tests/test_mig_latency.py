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
    3-33, kernel 2 33-35: 35 us. A whole-GPU prediction of 0.016 ms becomes 0.016 x 35 / 14 = 0.04 ms.

    host_scale 2 (issued every 6 us): whole max(18 host, 0 + 12, 6 + 11, 12 + 1) = 18; slice max(18, 34, 6 + 32,
    12 + 2) = 38: 0.016 x 38 / 18."""
    whole, part = _times([1, 10, 1], [3, 3, 3]), _times([2, 30, 2], [3, 3, 3])
    got = slice_latencies(0.016, whole, {"1g": part, "7g": whole})
    assert got["1g"] == pytest.approx(0.04) and got["7g"] == pytest.approx(0.016)
    assert slice_latencies(0.016, whole, {"1g": part}, host_scale=2.0)["1g"] == pytest.approx(0.016 * 38 / 18)
    empty = _times([], [])
    assert slice_latencies(0.5, empty, {"1g": empty}) == {"1g": 0.5}
