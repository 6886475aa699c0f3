"""The board-power probes (data/<device>/power, `predictor.power_fit.probe_records`) and the committed power figures
checked against them."""

from __future__ import annotations

import json

import pytest

from predictor.devices import get_device
from predictor.power import PowerParams, power_params
from predictor.power_fit import (
    PowerDataError,
    main,
    probe_dir,
    probe_groups,
    probe_records,
    probe_shares,
    probe_table,
)

H100 = get_device("h100-80gb")  # fp32 peak 67e12 FLOP/s, fp16 989.4e12, bandwidth 3.35e12 B/s


def _probe(workload, cls, dtype, median_w, *, status="ok", tf32=None, flops=None, nbytes=None):
    return {"schema": "preflight.power-probe/1", "device": "h100-80gb", "workload": workload, "class": cls,
            "dtype": dtype, "tf32": tf32, "status": status, "achieved_flops_per_s": flops,
            "achieved_bytes_per_s": nbytes,
            "power_samples": None if median_w is None else {"median_w": median_w}}  # fmt: skip


def test_probe_reader_on_a_hand_written_file(tmp_path):
    # Three ok probes and one that failed (left out): two memory-bound at 400 and 500 W, a float32 GEMM (no TF32) at
    # 650 W reaching 33.5 TFLOP/s = 0.5 of the H100's 67 TFLOP/s FP32 peak; the float16 GEMM errored.
    lines = [
        _probe("copy-fp16", "memory", "float16", 400.0, nbytes=3.015e12),  # 0.9 of 3.35 TB/s
        _probe("gemm-fp16", "compute", "float16", None, status="error"),
        _probe("decode-bf16", "memory", "bfloat16", 500.0, nbytes=2.5125e12),  # 0.75
        _probe("gemm-fp32", "compute", "float32", 650.0, tf32=False, flops=33.5e12),
    ]
    folder = tmp_path / "h100-80gb" / "power"
    folder.mkdir(parents=True)
    (folder / "probes-1.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n\n")
    (folder / "notes.txt").write_text("not a probe file")
    assert probe_dir("h100-80gb", tmp_path) == folder
    recs = probe_records(folder)
    assert [r["workload"] for r in recs] == ["copy-fp16", "decode-bf16", "gemm-fp32"]
    groups = probe_groups(recs)
    assert list(groups) == ["memory", "compute_fp32"]  # float32 compute on its own; no ok float16 compute probe
    assert groups["memory"].workloads == ("copy-fp16", "decode-bf16")
    assert groups["memory"].median_w == 450.0 and groups["memory"].range_w == (400.0, 500.0)
    assert groups["compute_fp32"].median_w == 650.0
    # the model's shares of each: memory all memory-bound; the float32 GEMM by the float32-peak rule 0.5, the rest gap
    assert probe_shares(recs[0], H100) == (0.0, 1.0, 0.0)
    assert probe_shares(recs[2], H100) == pytest.approx((0.0, 0.0, 0.5))
    assert probe_shares(recs[2], H100, "float32") == (0.0, 0.0, 1.0)
    entry = {"gap_w": 100.0, "compute_w": 690.0, "memory_w": 495.0, "compute_fp32_w": 700.0, "limit_w": 700.0}
    table = probe_table("h100-80gb", entry, recs)
    # P_memory 495 W against the median 450 W: +10.0%; P_compute_fp32 700 against 650: +7.7%
    assert "| P_memory | 495.0 | memory | copy-fp16, decode-bf16 | 450.0 (400.0-500.0) | +10.0% |" in table
    assert "| P_compute_fp32 | 700.0 | compute_fp32 | gemm-fp32 | 650.0 | +7.7% |" in table
    # the GEMM priced by the model: 100 + 0.5 x (700 - 100) = 400 W against 650 W measured: -38.5%
    assert "| gemm-fp32 | compute_fp32 | 50% | 0.00 / 0.00 / 0.50 | 400.0 | 650.0 | -38.5% |" in table
    assert "| copy-fp16 | memory | 90% | 0.00 / 1.00 / 0.00 | 495.0 | 400.0 | +23.8% |" in table


def test_probe_reader_rejects_bad_records(tmp_path, capsys):
    bad = tmp_path / "p.jsonl"
    for text, msg in (
        ("{not json\n", r"p\.jsonl:1: not a JSON record"),
        ('\n{"schema": "other"}\n', r"p\.jsonl:2: not a power-probe record"),
        (json.dumps(_probe("idle", "idle", "float32", None)), r"p\.jsonl:1: an ok probe without power_samples"),
        (json.dumps(_probe("idle", "idle", "float32", -3.0)), "must be a positive number"),
    ):
        bad.write_text(text)
        with pytest.raises(PowerDataError, match=msg):
            probe_records(tmp_path)
    bad.write_text(json.dumps(_probe("x", "warm-up", "float32", 100.0)))
    with pytest.raises(PowerDataError, match=r"p\.jsonl:1: power probe 'x' has an unknown class 'warm-up'"):
        probe_records(tmp_path)
    bad.write_text(json.dumps(_probe("copy", "memory", "float16", 500.0)))  # no achieved bytes/s
    with pytest.raises(PowerDataError, match="a memory probe needs a workload name and a positive achieved_bytes"):
        probe_records(tmp_path)
    # the command: a parameter file that is not one is one line and exit 2
    (tmp_path / "p.json").write_text('{"schema": "other"}')
    assert main(["--check-probes", "--out", str(tmp_path / "p.json")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


#: The committed H100 probes (data/h100-80gb/power/probes-20261127T033044Z.jsonl), read off the file by hand: each
#: probe's power_samples.median_w, W. Memory: copy-fp16 512.32, add-fp32 521.3, decode-fp16 493.94, decode-bf16
#: 473.03 -> median (493.94 + 512.32) / 2 = 503.13; float16/bfloat16 GEMMs 697.91, 697.64, 699.1 -> 697.91; float32
#: GEMMs (TF32 698.35, FP32 697.7) -> 698.025; idle 126.03; launch 129.63.
H100_PROBES = {"memory": (503.13, 473.03, 521.3), "compute": 697.91, "compute_fp32": 698.025, "idle": 126.03,
               "launch": 129.63}  # fmt: skip


def _disagreements(p: PowerParams, probes: dict) -> list[str]:
    """The fitted figures outside their stated tolerance of the probes' measurements (the measured oracle):
    P_compute and P_compute_fp32 within 5% of their probes' median (power-capped GEMMs: the limit itself); P_memory
    within 10% of the memory probes' range (0.9 x the lowest to 1.1 x the highest median: memory-bound work at
    75-91% of peak bandwidth); P_gap from the idle probe (a GPU between kernels draws at least what an idle one
    does) to 1.5 x the launch probe (host waits of eager whole models sit between the two: launch-bound H100 whole
    models measured 146-191 W, docs/power-and-memory.md)."""
    _, lo, hi = probes["memory"]
    out = []
    if abs(p.compute_w / probes["compute"] - 1) > 0.05:
        out.append("compute")
    if abs(p.fp32_w / probes["compute_fp32"] - 1) > 0.05:
        out.append("compute_fp32")
    if not 0.9 * lo <= p.memory_w <= 1.1 * hi:
        out.append("memory")
    if not probes["idle"] <= p.gap_w <= 1.5 * probes["launch"]:
        out.append("gap")
    return out


def test_committed_h100_power_figures_agree_with_the_power_probes():
    groups = probe_groups(probe_records(probe_dir("h100-80gb")))
    assert groups["memory"].median_w == pytest.approx(H100_PROBES["memory"][0])
    assert groups["memory"].range_w == H100_PROBES["memory"][1:]
    for cls in ("compute", "compute_fp32", "idle", "launch"):
        assert groups[cls].median_w == pytest.approx(H100_PROBES[cls]), cls
    p = power_params("h100-80gb")
    assert _disagreements(p, H100_PROBES) == []
    # the check fails on figures that drift: the H100's P_memory before our whole models pinned it (677 W), a
    # float32 compute power fitted on the float32 kernels' whole time (246 W), a gap power at idle less 10 W
    drifted = PowerParams(gap_w=116.0, compute_w=p.compute_w, memory_w=677.0, limit_w=700.0, compute_fp32_w=246.0)
    assert _disagreements(drifted, H100_PROBES) == ["compute_fp32", "memory", "gap"]
