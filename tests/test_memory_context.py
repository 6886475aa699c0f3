"""The one runtime-context source (predictor.memory.runtime_for / context_mib): per runtime, per device, the device
file's override, and that predict, MIG fit and `preflight llm` all take it. Figures by hand from the committed data."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from predictor.devices import DeviceFileError, get_device, parse_device, slice_device
from predictor.memory import (
    DEFAULT_RUNTIME,
    MIB,
    Reserved,
    context_mib,
    runtime_for,
    runtime_memory,
    workspace_mib,
)

ROOT = Path(__file__).resolve().parents[1]
H100 = get_device("h100-80gb")
A100 = get_device("a100-40gb")


def _user_gpu(**extra) -> dict:
    return {
        "key": "my-h100",
        "name": "my H100",
        "memory_mib": 81559,
        "bandwidth_gbs": 3350,
        "peak_tflops": {"fp32": 67, "fp16": 989.4},
        "tdp_w": 700,
        "sms": 132,
        "kernel_family": "hopper",
        "mig": [{"profile": "1g.10gb", "memory_mib": 9984, "sms": 16, "memory_slices": 1, "compute_slices": 1}],
        **extra,
    }


def test_eager_context_is_the_median_the_h100_rows_measured():
    # the 229 successful rows of data/h100-80gb/models (four leases) measured 684-706 MiB of context (NVML process
    # memory - torch's reserved); their median is 698 MiB: the default runtime's context, on every GPU and slice (no
    # per-SM term)
    rows = [json.loads(line) for line in (ROOT / "data/h100-80gb/models/shard-000-of-001.jsonl").open()]
    ctx = [r["memory_mb"]["context"] for r in rows if r["status"] == "ok"]
    assert len(ctx) == 229 and (min(ctx), statistics.median(ctx), max(ctx)) == (684.0, 698.0, 706.0)
    assert runtime_memory().fixed_mib == 698.0 and runtime_memory().per_sm_mib == 0.0
    assert DEFAULT_RUNTIME == "torch-2.11-cuda13" and "measured" in runtime_memory().source
    for dev in (H100, A100, get_device("h100-80gb:1g.10gb")):
        assert context_mib(dev) == context_mib(dev, "cuda-graph") == 698.0
    # a vLLM-style engine: 1024 MiB outside torch's allocator (assumed), the published older-torch figure kept
    assert context_mib(H100, "vllm") == 1024.0
    assert runtime_memory("torch-2-cuda12-lazy").fixed_mib == 400.0
    # the torch 1.12 fit keeps its per-SM term: 1443.67 + 4.2699 x 14 SMs (A100 1g.5gb) = 1503.45 MiB
    assert runtime_memory("torch-1.12-cuda11").context_mib(14) == pytest.approx(1503.4486)


def test_workspace_per_device_class():
    # cuBLAS: 4096 KiB x 8 = 32 MiB on Hopper, 4096 KiB x 2 + 16 KiB x 8 = 8.125 MiB otherwise; + 4 with
    # convolutions (cuDNN's steady-state excess, the median of the H100 conv rows)
    assert workspace_mib(H100) == 32.0 and workspace_mib(get_device("h100-80gb:3g.40gb")) == 32.0
    assert workspace_mib(A100) == 8.125 and workspace_mib(A100, has_conv=True) == 12.125
    assert workspace_mib() == 32.0  # no device: Hopper's, the larger


def test_device_file_overrides_the_context():
    mine = parse_device(_user_gpu(cuda_context_mib=512))
    assert mine.cuda_context_mib == 512.0
    assert context_mib(mine) == 512.0 and runtime_for(mine).per_sm_mib == 0.0
    # a slice of it keeps the override; the engine keeps its own part beyond the eager context: 512 + (1024 - 698)
    assert context_mib(slice_device(mine, mine.mig[0])) == 512.0
    assert context_mib(mine, "vllm") == 838.0
    assert context_mib(parse_device(_user_gpu())) == 698.0  # no override: the measured figure
    with pytest.raises(DeviceFileError, match="cuda_context_mib = -1 is outside 0 .. 65536"):
        parse_device(_user_gpu(cuda_context_mib=-1))


def test_predict_memory_takes_the_device_context(monkeypatch):
    from predictor import devices
    from predictor.predict import roofline_memory_mib

    # weights 24 MiB and activations 16 MiB as replayed (given); context 698; cuBLAS 32 (Hopper):
    # point 24 + 16 + 698 + 32 = 770; low = tensor peak 22 + 16 = 38 + 698 + 32 = 768; high = 770 + 0.25 x 16 = 774
    r = Reserved(weights=24 * MIB, total=40 * MIB)
    assert roofline_memory_mib(22 * MIB, 16 * MIB, H100, False, r) == pytest.approx((768.0, 770.0, 774.0))
    mine = parse_device(_user_gpu(cuda_context_mib=512))
    monkeypatch.setitem(devices.DEVICES, mine.key, mine)
    # the same on a GPU whose device file says 512 MiB: 24 + 16 + 512 + 32 = 584
    assert roofline_memory_mib(22 * MIB, 16 * MIB, mine, False, r)[1] == pytest.approx(584.0)
