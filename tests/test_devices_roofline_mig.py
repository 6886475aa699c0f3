"""Device table, roofline bound and MIG rule on hand-computed examples."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from passes.graph import TensorInfo
from predictor.devices import DEVICES, UnknownDeviceError, get_device
from predictor.mig import recommend
from predictor.roofline import latency_bound_ms, peak_rate


@dataclass
class Op:
    index: int
    category: str
    flops: int
    bytes_read: int
    bytes_written: int
    dtype: str = "float32"
    folded: bool = False

    @property
    def outputs(self):
        return (TensorInfo((1,), self.dtype),)

    @property
    def output(self):
        return self.outputs[0]


H100 = get_device("h100-80gb")


def test_every_required_device_is_in_the_table_with_mig():
    for key in ("a100-40gb", "a100-80gb", "h100-80gb", "h100-nvl-94gb", "h200-141gb"):
        d = DEVICES[key]
        assert d.mig and d.bandwidth > 0 and d.peak_flops["fp16"] > d.peak_flops["fp32"]
        assert all(p.memory_mib < d.memory_mib for p in d.mig)
    assert get_device("H100").key == "h100-80gb" and get_device("h200").key == "h200-141gb"
    with pytest.raises(UnknownDeviceError):
        get_device("tpu-v5")


def test_design_md_example_a100_7g40gb_is_39_50_gib():
    assert DEVICES["a100-40gb"].profile("7g.40gb").memory_mib == 39.50 * 1024  # = 40448 MiB


def test_peak_rate_follows_pytorch_defaults():
    assert peak_rate(H100, "conv", "float32") == 494.7e12  # cuDNN may use TF32
    assert peak_rate(H100, "matmul", "float32") == 67e12  # matmul TF32 is off by default
    assert peak_rate(H100, "matmul", "float16") == 989.4e12
    assert peak_rate(H100, "elementwise", "float16") == 67e12


def test_roofline_on_hand_computed_ops():
    ops = [
        # fp16 matmul: compute 2e12 / 989.4e12 = 2.02143 ms; memory 1e9 / 3.35e12 = 0.29851 ms -> 2.02143
        Op(0, "matmul", 2_000_000_000_000, 600_000_000, 400_000_000, "float16"),
        # fp32 add: compute 1e9 / 67e12 = 0.014925 ms; memory 6.7e9 / 3.35e12 = 2.0 ms -> 2.0
        Op(1, "elementwise", 1_000_000_000, 4_700_000_000, 2_000_000_000),
        # folded weight transpose: costs nothing at run time
        Op(2, "data_movement", 0, 10**12, 10**12, folded=True),
    ]
    assert latency_bound_ms(ops, H100) == pytest.approx(2.02143 + 2.0, rel=1e-5)
    # 1g.10gb: 16 of 132 SMs, 1 of 8 memory slices.
    # matmul: compute 2.02143 * 132 / 16 = 16.6768; memory 0.29851 * 8 = 2.388 -> 16.6768
    # add: compute 0.014925 * 8.25 = 0.12313; memory 2.0 * 8 = 16.0 -> 16.0
    assert latency_bound_ms(ops, H100, H100.profile("1g.10gb")) == pytest.approx(16.6768 + 16.0, rel=1e-4)


@pytest.mark.parametrize("key", sorted(DEVICES))
def test_mig_boundaries_on_every_device(key):
    d = DEVICES[key]
    smallest = min(d.mig, key=lambda p: (p.memory_mib, p.sms))
    # exactly at the usable memory (no headroom): fits
    assert recommend(d, smallest.memory_mib, headroom=0).profile == smallest.name
    # just under: fits
    assert recommend(d, smallest.memory_mib - 1, headroom=0).profile == smallest.name
    # just over: the next larger profile
    over = recommend(d, smallest.memory_mib + 1, headroom=0)
    assert over.profile != smallest.name and over.fits[smallest.name] is False
    nxt = min((p for p in d.mig if p.memory_mib > smallest.memory_mib), key=lambda p: (p.memory_mib, p.sms))
    assert over.profile == nxt.name
    # headroom counts: 5% over the bound must fit too
    assert recommend(d, smallest.memory_mib / 1.05 + 1).profile != smallest.name
    assert recommend(d, smallest.memory_mib / 1.05 - 1).profile == smallest.name
    # nothing fits
    largest = max(d.mig, key=lambda p: p.memory_mib)
    none = recommend(d, largest.memory_mib + 1, headroom=0)
    assert none.profile is None and "no profile fits" in none.reason and not any(none.fits.values())


def test_a_slice_asked_for_is_not_called_the_smallest_profile():
    """`--device GPU:PROFILE` recommends among one profile: the reason names it, not "the smallest profile"."""
    from dataclasses import replace

    h100 = get_device("h100-80gb")
    p = h100.profile("3g.40gb")
    rec = recommend(replace(h100, mig=(p,)), 1000.0)  # 1,000 MiB + 5% = 1,050 MiB
    assert rec.profile == "3g.40gb"
    assert rec.reason.startswith(f"3g.40gb: its usable {p.memory_mib:,.0f} MiB holds the predicted upper bound 1,000")
    assert recommend(h100, 1000.0).reason.startswith("1g.10gb is the smallest profile whose usable")


def test_smallest_means_fewest_sms_at_equal_memory():
    # H100 1g.20gb (26 SMs) and 2g.20gb (32 SMs) both hold 19.62 GiB: pick 1g.20gb
    assert recommend(H100, 15_000, headroom=0).profile == "1g.20gb"


def test_latency_slo_moves_to_a_bigger_slice():
    lat = {"1g.10gb": 9.0, "1g.20gb": 7.0, "2g.20gb": 4.5, "3g.40gb": 2.5, "4g.40gb": 2.2, "7g.80gb": 1.1}
    rec = recommend(H100, 5_000, latency_ms_by_profile=lat, latency_slo_ms=5.0, headroom=0)
    assert rec.profile == "2g.20gb" and "5 ms SLO" in rec.reason
    none = recommend(H100, 5_000, latency_ms_by_profile=lat, latency_slo_ms=1.0, headroom=0)
    assert none.profile is None and "SLO" in none.reason
    with pytest.raises(ValueError):
        recommend(H100, 5_000, latency_slo_ms=5.0)


def test_recommendation_states_its_slowdown_and_the_smallest_slice_within_a_bound():
    lat = {"1g.10gb": 9.0, "1g.20gb": 7.0, "2g.20gb": 4.5, "3g.40gb": 2.5, "4g.40gb": 2.2, "7g.80gb": 1.1}
    rec = recommend(H100, 5_000, latency_ms_by_profile=lat, full_gpu_latency_ms=1.0, max_slowdown=3.0, headroom=0)
    # the smallest that fits 5,000 MiB is 1g.10gb: 9.0 ms = 9.0 / 1.0 = 9x the whole GPU
    assert rec.profile == "1g.10gb" and "9 ms, 9x the whole GPU's 1 ms" in rec.reason
    assert (rec.chosen.latency_ms, rec.chosen.slowdown) == (9.0, 9.0)
    # within 3x: 1g.10gb 9x, 1g.20gb 7x, 2g.20gb 4.5x, 3g.40gb 2.5x <= 3 -> 3g.40gb
    assert rec.within_slowdown.profile == "3g.40gb" and rec.within_slowdown.slowdown == 2.5
    doc = rec.to_json()
    assert doc["profile_latency_ms"] == 9.0 and doc["slowdown"] == 9.0 and doc["max_slowdown"] == 3.0
    assert doc["within_slowdown"] == {"profile": "3g.40gb", "latency_ms": 2.5, "slowdown": 2.5}
    assert rec.summary() == "1g.10gb (9 ms, 9x the whole GPU); smallest within 3x slowdown: 3g.40gb (2.5 ms, 2.5x)"
    # no slice within 1.05x (7g.80gb is 1.1x): said, not hidden
    tight = recommend(H100, 5_000, latency_ms_by_profile=lat, full_gpu_latency_ms=1.0, max_slowdown=1.05)
    assert tight.within_slowdown is None and tight.to_json()["within_slowdown"] is None
    assert tight.summary().endswith("smallest within 1.05x slowdown: none")
    with pytest.raises(ValueError):
        recommend(H100, 5_000, latency_ms_by_profile=lat, max_slowdown=2.0)  # needs the whole GPU's latency


def test_slice_latency_keeps_the_launch_floor():
    """x + y on 2^20 fp32 values, through `predict` (the estimate: no artifact for the device).

    The kernel-parameter table's hopper elementwise float32 entry (asserted below; fitted on the H100 kernel
    sweep): e_memory 1.0, exec 1.4828 us, launch 16.621 us (the host-timed elementwise fit's), e_compute 1. By
    hand: one memory-bound kernel moving 3 x 4 x 2^20 = 12,582,912 bytes. Whole H100: bound 12,582,912 / 3.35e12
    s = 0.00375609 ms; at e_memory 1 plus exec the kernel runs 0.00375609 + 0.0014828 = 0.00523889 ms, under the
    0.016621 ms launch floor, so it takes 0.016621 ms. 1g.10gb owns 1 of 8 memory slices (compute 2^20 / (67e12 x
    16/132) s = 0.000129 ms + exec, still memory-bound): 8 x 0.00375609 + 0.0014828 = 0.0315315 ms, now above the
    floor (which a slice does not scale, nor the exec). 7g.80gb owns all 8 slices and all 132 SMs: the whole-GPU
    latency. A slice's latency is the whole GPU's plus the queued difference (`predictor.mig.slice_latencies`); for
    one kernel queued = max(execution, issue): whole max(0.00523889, 0.016621) = 0.016621 ms, 1g.10gb max(0.0315315,
    0.016621) = 0.0315315 ms, so 1g.10gb = 0.016621 + (0.0315315 - 0.016621) = 0.0315315 ms and 7g.80gb 0.016621 +
    0 = 0.016621 ms.
    """
    from predictor.kernel_model import load_params

    entry = load_params().lookup("h100-80gb", "elementwise", "float32")
    assert (entry.e_memory, entry.launch_us, entry.e_compute, entry.exec_us) == (1.0, 16.621, 1.0, 1.4828)
    import torch

    from analyzer.api import predict

    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    x = torch.zeros(1, 2**20)
    report = predict(Add(), (x, x), device="h100-80gb")
    assert len(report.analysis.ops) == 1 and report.prediction.predictor == "roofline"
    assert report.prediction.runtime == {
        "framework": "pytorch-eager-cuda",
        "dtype": "float32",
        "tf32_conv": True,
        "tf32_matmul": False,
        "matmul_precision": "highest",
        "host_overhead": 1.0,
    }
    assert report.prediction.latency_ms == pytest.approx(0.016621, rel=1e-5)
    assert report.prediction.roofline_latency_ms == pytest.approx(0.00375609, rel=1e-5)
    slices = report.prediction.mig.latency_ms
    assert slices["1g.10gb"] == pytest.approx(0.0315315, rel=1e-5)
    assert slices["7g.80gb"] == pytest.approx(0.016621, rel=1e-4)


def test_no_profile_fits_says_whether_the_whole_gpu_does():
    # H200: 7g.141gb has 131,072 MiB usable, the GPU 143,771. 130,000 MiB + 5% = 136,500: no profile, the GPU
    # holds it; 140,000 + 5% = 147,000: not even the GPU. One slice asked for (`--device GPU:PROFILE`): no word on
    # the GPU.
    h200 = get_device("h200-141gb")
    rec = recommend(h200, 130_000)
    assert rec.profile is None and rec.reason.endswith("; the whole GPU's 143,771 MiB holds it (full GPU only)")
    rec = recommend(h200, 140_000)
    assert rec.profile is None and rec.reason.endswith(", more than the whole GPU's 143,771 MiB")
    from dataclasses import replace

    one = recommend(replace(h200, mig=(h200.mig[-1],)), 130_000)
    assert one.profile is None and "whole GPU" not in one.reason


def test_a_slice_asked_for_that_the_model_does_not_fit_says_so():
    # `--device a100-40gb:1g.5gb` (the GPU with that one profile, as `predict` asks) with a model needing 6,000 MiB
    # + 5%: the profile asked for does not hold it
    from dataclasses import replace

    a100 = get_device("a100-40gb")
    p = a100.profile("1g.5gb")
    rec = recommend(replace(a100, mig=(p,)), 6000.0)
    assert rec.profile is None
    assert rec.reason == (
        f"the model does not fit 1g.5gb: its usable {p.memory_mib:,.0f} MiB is less than the 6,300 MiB the model "
        "needs (upper bound + 5% headroom)"
    )
