"""What a prediction rests on (`Prediction.basis`): the kernel model's time by the basis of its parameters, and
a trained predictor used on its own GPU (measured) or carried to another GPU by the kernel model's ratio
(transferred). Shares and ratios are worked out by hand or from independent calls of the kernel model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_kernel_model import ADD_2E20, GEMM_4096

from predictor.devices import get_device
from predictor.kernel_model import (
    BASES,
    KernelParams,
    ParamTable,
    kernel_arrays,
    kernel_basis,
    kernel_latency,
    kernel_latency_arrays,
    load_params,
)
from predictor.predict import find_predictor, predict, predictor_info

ROOT = Path(__file__).resolve().parents[1]
FIT_H100 = KernelParams(0.8, 0.9, 10.0, ((128, 128),), 0.0, 64.0, "fit: test gemm on H100", ("h100-80gb",))
TRANSFERRED = KernelParams(
    1.0, 0.9, 5.0, source="transfer: the ampere fit (no hopper data); fit: test", measured_on=("a",)
)
CALIBRATED = KernelParams(1.0, 0.5, 7.0, source="default: a published figure")
ASSUMED = KernelParams(1.0, 0.5, 7.0, source="assumed: as elementwise; fit: test", measured_on=("h100-80gb",))


def test_each_source_tag_gives_its_basis():
    assert FIT_H100.basis("h100-80gb") == "fitted_on_this_gpu"
    assert FIT_H100.basis("h200-141gb") == "fitted_on_other_gpus"  # same family, another GPU's measurements
    assert TRANSFERRED.basis("h100-80gb") == "fitted_on_other_gpus"
    assert CALIBRATED.basis("h100-80gb") == "calibrated"
    assert ASSUMED.basis("h100-80gb") == "assumed"  # the chain's first step decides, not what it rests on
    doc = FIT_H100.to_json()
    assert doc["measured_on"] == ["h100-80gb"] and KernelParams.from_json(doc) == FIT_H100
    assert "measured_on" not in CALIBRATED.to_json()


def test_kernel_time_shares_by_hand():
    table = ParamTable(
        {("hopper", "gemm", "*"): FIT_H100, ("hopper", "elementwise", "*"): TRANSFERRED},
        {"hopper": ("h100-80gb", "h200-141gb")},
    )
    arrays = kernel_arrays([GEMM_4096, ADD_2E20])
    h100 = get_device("h100-80gb")
    times = kernel_latency_arrays(arrays, h100, params=table)
    # eager time per kernel = max(compute, memory, launch) (tests/test_kernel_model.py works both out by hand):
    # gemm fp16 4096^3: compute 1.818634e-4 s; add fp32 2^20: memory 4.173436e-6 s < launch 5e-6 s.
    # gemm share 1.818634e-4 / (1.818634e-4 + 5e-6) = 0.973243, add 5e-6 / 1.868634e-4 = 0.026757.
    share = kernel_basis(arrays, h100, times, table)
    assert list(share) == list(BASES)
    assert share["fitted_on_this_gpu"] == pytest.approx(0.973243, rel=1e-5)
    assert share["fitted_on_other_gpus"] == pytest.approx(0.026757, rel=1e-4)
    assert share["calibrated"] == share["assumed"] == 0.0
    h200 = get_device("h200-141gb")  # the same entries; none measured on the H200
    share = kernel_basis(arrays, h200, kernel_latency_arrays(arrays, h200, params=table), table)
    assert share["fitted_on_other_gpus"] == pytest.approx(1.0) and share["fitted_on_this_gpu"] == 0.0
    empty = kernel_arrays([])
    assert kernel_basis(empty, h100, kernel_latency_arrays(empty, h100, params=table), table) == dict.fromkeys(
        BASES, 0.0
    )


def test_committed_table_says_which_gpus_each_fit_measured():
    """The NeuSight data measured float32 GEMMs on one H100 and two A100 PCIe cards (its CSVs' device columns)."""
    table = load_params()
    assert table.entries[("hopper", "gemm", "float32")].measured_on == ("h100-80gb",)
    assert table.entries[("ampere", "gemm", "float32")].measured_on == ("a100-pcie-40gb", "a100-pcie-80gb")
    # the hopper float32 norm is the ampere fit carried over (the H100 sweep's fit was rejected): it rests on the
    # A100s' measurements; the hopper softmax is fitted on this project's H100 kernel sweep
    norm = table.entries[("hopper", "norm", "float32")]
    assert norm.basis("h100-80gb") == "fitted_on_other_gpus"
    assert norm.measured_on == ("a100-pcie-40gb", "a100-pcie-80gb")
    soft = table.entries[("hopper", "softmax", "float32")]
    assert soft.basis("h100-80gb") == "fitted_on_this_gpu" and soft.measured_on == ("h100-80gb",)


def _linear_model():
    return torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 512)).eval()


def test_estimate_basis_on_a_measured_and_an_unmeasured_gpu():
    from analyzer import analyze

    analysis = analyze(_linear_model(), (torch.randn(64, 512),)).analysis
    # on the H100: the float32 GEMMs (NeuSight measured them on this GPU) and the GELU (the H100 kernel sweep's
    # elementwise fit): every kernel rests on this GPU's measurements
    p, _ = predict(analysis, "h100-80gb")
    basis = p.to_json()["basis"]
    assert basis["whole_model"] == "none" and basis["whole_model_device"] is None
    assert {k.kind for k in analysis.kernels} <= {"gemm", "elementwise"}
    assert basis["kernel_time_share"]["fitted_on_this_gpu"] == pytest.approx(1.0, abs=1e-4)
    assert sum(basis["kernel_time_share"].values()) == pytest.approx(1.0, abs=1e-3)
    assert basis["kernel_measured_on"] == ["h100-80gb"]
    # on an A100 40 GB (SXM, not measured): the GEMMs and the GELU rest on the A100 PCIe fits (NeuSight)
    r, _ = predict(analysis, "a100-40gb")
    kt = kernel_latency(analysis.kernels, get_device("a100-40gb"))
    assert r.basis["kernel_time_share"]["fitted_on_other_gpus"] == pytest.approx(1.0, abs=1e-4)
    assert kt.eager_s.sum() > 0
    # on the H200 nothing was measured: the same kernels rest on other GPUs' fits
    q, _ = predict(analysis, "h200-141gb")
    assert q.basis["kernel_time_share"]["fitted_on_this_gpu"] == 0.0
    assert q.basis["kernel_time_share"]["fitted_on_other_gpus"] > 0.9


def _fake_artifact(root: Path, name: str) -> None:
    """An artifact as far as choosing one looks: a meta.json of this code's feature layout."""
    from passes.features import FEATURE_VERSION

    (root / name).mkdir(parents=True)
    (root / name / "meta.json").write_text(json.dumps({"feature_version": FEATURE_VERSION}))


def test_find_predictor_prefers_the_gpu_then_its_family(tmp_path):
    assert find_predictor("h200-141gb", tmp_path) == (None, None)
    _fake_artifact(tmp_path, "a100-80gb@1")
    assert find_predictor("h200-141gb", tmp_path) == (tmp_path / "a100-80gb@1", "a100-80gb")  # another family
    _fake_artifact(tmp_path, "h100-80gb@1")
    _fake_artifact(tmp_path, "h100-80gb@2")
    _fake_artifact(tmp_path, "cpu-vm@1")  # not a GPU of the device table: never transferred
    assert find_predictor("h200-141gb", tmp_path) == (tmp_path / "h100-80gb@2", "h100-80gb")  # same family, newest
    assert find_predictor("a100-pcie-40gb", tmp_path) == (tmp_path / "a100-80gb@1", "a100-80gb")
    _fake_artifact(tmp_path, "h200-141gb@1")
    assert find_predictor("h200-141gb", tmp_path) == (tmp_path / "h200-141gb@1", "h200-141gb")  # its own


@pytest.fixture(scope="module")
def trained_h100(tmp_path_factory):
    """A small GraphSAGE trained on the committed CPU-VM measurements, saved as if it were the H100's."""
    from analyzer.dataset import build_cache
    from predictor.data import load_samples, read_records
    from predictor.train import TrainConfig, save, train

    tmp = tmp_path_factory.mktemp("ckpt")
    records = sorted(
        (r for r in read_records([ROOT / "data" / "cpu-vm"]) if r.get("schema") == "preflight.measurement/1"),
        key=lambda r: r["id"],
    )[:8]
    samples = load_samples(records, build_cache(records, tmp / "graphs"))
    artifact = tmp / "ckpt" / "h100-80gb@1"
    meta = {"name": artifact.name, "n_samples": len(samples), "families": ["a"], "created": "2026-11-23"}
    save(train(samples, cfg=TrainConfig(epochs=2, hidden=8)), artifact, meta)
    return artifact.parent


def test_a_trained_predictor_is_transferred_by_the_kernel_model_ratio(trained_h100):
    from analyzer import analyze

    analysis = analyze(_linear_model(), (torch.randn(64, 512),)).analysis
    own, warnings = predict(analysis, "h100-80gb", checkpoints=trained_h100)
    assert own.predictor == "h100-80gb@1" and warnings == []
    assert own.basis["whole_model"] == "measured" and own.basis["whole_model_device"] == "h100-80gb"
    for target, tdp_ratio in (("h200-141gb", 700 / 700), ("a100-80gb", 400 / 700)):
        other, warnings = predict(analysis, target, checkpoints=trained_h100)
        ratio = (
            kernel_latency(analysis.kernels, get_device(target)).eager_ms
            / kernel_latency(analysis.kernels, get_device("h100-80gb")).eager_ms
        )
        assert other.predictor == "h100-80gb@1"
        assert other.basis["whole_model"] == "transferred" and other.basis["whole_model_device"] == "h100-80gb"
        assert other.latency_ms == pytest.approx(own.latency_ms * ratio, rel=1e-9)
        assert other.latency_ms_interval == pytest.approx([v * ratio for v in own.latency_ms_interval], rel=1e-9)
        assert other.energy_j == pytest.approx(own.energy_j * ratio * tdp_ratio, rel=1e-9)
        assert other.memory_mib == own.memory_mib and other.memory_mib_interval == own.memory_mib_interval
        assert len(warnings) == 1 and f"{ratio:.3g}" in warnings[0] and "measured on h100-80gb" in warnings[0]
        # a slice as the target: its GPU's transferred latency plus the queued slice difference, the number the whole
        # GPU's recommender states for that slice (its rule checked against an oracle in tests/test_mig_latency.py)
        profile = get_device(target).mig[0].name
        part, warnings = predict(analysis, f"{target}:{profile}", checkpoints=trained_h100)
        assert part.predictor == "h100-80gb@1" and "mig.slice_latencies" in warnings[0]
        assert part.latency_ms == pytest.approx(other.mig.latency_ms[profile], rel=1e-9)
        assert part.mig.full_gpu_latency_ms == pytest.approx(other.latency_ms, rel=1e-9)
        # its interval by the same factor as the latency (slice / the GPU's transferred latency)
        k = part.latency_ms / other.latency_ms
        assert part.latency_ms_interval == pytest.approx([v * k for v in other.latency_ms_interval], rel=1e-9)
    part, _ = predict(analysis, "h100-80gb:1g.10gb", checkpoints=trained_h100)  # the slice of its own GPU
    assert part.latency_ms == pytest.approx(own.mig.latency_ms["1g.10gb"], rel=1e-9)
    assert part.mig.chosen.slowdown == pytest.approx(own.mig.latency_ms["1g.10gb"] / own.latency_ms, rel=1e-9)
    info = predictor_info("h200-141gb", checkpoints=trained_h100)
    assert info["trained"] and info["name"] == "h100-80gb@1" and info["measured_on"] == "h100-80gb"


def test_report_json_and_text_say_what_the_prediction_rests_on():
    import jsonschema

    import analyzer
    from analyzer.render import render_table

    rep = analyzer.predict(_linear_model(), (torch.randn(64, 512),), device="h200-141gb")
    schema = json.loads((ROOT / "analyzer" / "schema" / "report-1.schema.json").read_text())
    doc = rep.to_json()
    jsonschema.validate(doc, schema)
    share = doc["prediction"]["basis"]["kernel_time_share"]
    line = next(x for x in render_table(rep).splitlines() if x.startswith("rests on"))
    assert "no whole-model measurements" in line
    assert f"kernel time: {share['fitted_on_other_gpus']:.0%} on other GPUs" in line  # none fitted on an H200
    assert "(kernels measured on h100-80gb)" in line  # NeuSight's H100 GEMMs and the H100 sweep's GELU


def test_a_broken_artifact_gives_way_to_the_next(trained_h100, tmp_path):
    """A corrupt or half-written artifact never breaks a prediction: it is skipped, with a warning when it was the
    device's own, and the next one (or the estimate) answers."""
    import shutil

    from analyzer import analyze
    from passes.features import FEATURE_VERSION

    shutil.copytree(trained_h100 / "h100-80gb@1", tmp_path / "h100-80gb@1")
    (tmp_path / "h100-nvl-94gb@1").mkdir()
    (tmp_path / "h100-nvl-94gb@1" / "meta.json").write_text("{")  # corrupt
    (tmp_path / "h200-141gb@1").mkdir()  # this code's features, but no model layout
    (tmp_path / "h200-141gb@1" / "meta.json").write_text(json.dumps({"feature_version": FEATURE_VERSION}))
    torch.save({}, tmp_path / "h200-141gb@1" / "model.pt")
    (tmp_path / "a100-40gb@1").mkdir()
    (tmp_path / "a100-40gb@1" / "meta.json").write_text("{")
    analysis = analyze(_linear_model(), (torch.randn(64, 512),)).analysis
    for device in ("h100-nvl-94gb", "h200-141gb"):
        p, warnings = predict(analysis, device, checkpoints=tmp_path)
        assert p.predictor == "h100-80gb@1" and p.basis["whole_model"] == "transferred"
        assert any(f"{device}@1" in w and "next trained predictor" in w for w in warnings)
        assert predictor_info(device, checkpoints=tmp_path)["name"] == "h100-80gb@1"
    # another GPU's corrupt artifact is no candidate at all
    p, warnings = predict(analysis, "a100-80gb", checkpoints=tmp_path)
    assert p.predictor == "h100-80gb@1" and not any("a100-40gb@1" in w for w in warnings)
    assert find_predictor("a100-pcie-40gb", tmp_path) == (tmp_path / "h100-80gb@1", "h100-80gb")


def test_no_training_code_is_imported_without_a_trained_artifact(tmp_path):
    """With no artifact to load, predict imports neither preflight's training code nor torch_geometric."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from analyzer.api import analyze\n"
        "from predictor.predict import predict\n"
        "rep = analyze(torch.nn.Linear(8, 4), (torch.randn(2, 8),))\n"
        f"predict(rep.analysis, 'h100-80gb', checkpoints=__import__('pathlib').Path({str(tmp_path)!r}))\n"
        "print(sorted(m for m in ('predictor.train', 'predictor.model', 'torch_geometric') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
