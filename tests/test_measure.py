"""Tests for the measurement harness (``predictor.measure``) on the CPU: real measurements, failure labels,
resume, sharding and the config sampler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from measure_faults import FaultyWorker

from predictor.measure import configs as cfgmod
from predictor.measure.__main__ import main as cli_main
from predictor.measure.configs import (
    MeasureConfig,
    config_id,
    estimate_memory_mib,
    load_configs,
    sample_configs,
    save_configs,
    shard_of,
    spec_info,
    stratified_order,
)
from predictor.measure.harness import RECORD_SCHEMA, Options, done_ids, latency_stats, run_shard
from predictor.measure.mig_profiles import DEVICE_MEMORY_MIB, MIG_PROFILES, device_key
from zoo import list_families

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FAST = Options(device="cpu", warmup=1, runs=5, min_window_s=0.0)
RECORD_KEYS = {
    "schema", "id", "zoo", "family", "params", "batch", "dtype", "inputs", "device", "status", "latency_ms",
    "energy_j", "power_w", "memory_mb", "mig_fit", "mig_fit_measured", "error", "env", "harness_version",
}  # fmt: skip


def _config(spec: str, batch: int) -> MeasureConfig:
    info = spec_info(spec)
    assert info is not None
    return cfgmod._make_config(info, spec, batch, "float32", estimate_memory_mib(info, batch, "float32"), False)


def _records(root: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(root.rglob("*.jsonl")) for line in path.read_text().splitlines()]


def test_cpu_measures_real_model_and_resumes(tmp_path: Path) -> None:
    small, large = _config("resnet18?resolution=32", 1), _config("resnet18?resolution=32", 16)
    summary = run_shard([small, large], tmp_path, FAST, log=None)
    assert summary.measured == 2 and summary.statuses == {"ok": 2}
    recs = {r["batch"]: r for r in _records(tmp_path)}
    assert Path(summary.path).name == "shard-000-of-001.jsonl" and summary.device.startswith("cpu-")
    for rec in recs.values():
        assert RECORD_KEYS <= set(rec)
        assert rec["schema"] == RECORD_SCHEMA and rec["status"] == "ok" and rec["error"] is None
        assert rec["device"] == summary.device and rec["zoo"] == "resnet18?resolution=32"
        lat = rec["latency_ms"]
        assert lat["runs"] == 5 and 0 < lat["p10"] <= lat["median"] <= lat["p90"] < 10_000
        assert rec["energy_j"] is None and rec["power_w"] is None and rec["mig_fit"] is None
        assert rec["memory_mb"]["total"] > 0 and rec["memory_mb"]["reserved"] is None
        assert rec["env"]["torch"] and rec["env"]["timestamp"] and rec["harness_version"]
    assert recs[16]["inputs"] == [{"name": "x", "shape": [16, 3, 32, 32], "dtype": "float32"}]
    assert recs[16]["latency_ms"]["median"] > recs[1]["latency_ms"]["median"]
    assert recs[16]["memory_mb"]["total"] > recs[1]["memory_mb"]["total"] * 0.5
    # Resume: nothing left to do; a new config in the list is the only one measured.
    again = run_shard([small, large], tmp_path, FAST, log=None)
    assert again.measured == 0 and again.skipped == 2
    assert done_ids([tmp_path], summary.device) == {small.id, large.id}


def test_failures_are_labels_and_do_not_lose_other_configs(tmp_path: Path) -> None:
    ok_spec = "lstm_small?seq_len=8"  # pure torch: a fresh worker need not import transformers
    cfgs = [_config(ok_spec, batch) for batch in (1, 3, 4, 5, 2)]  # distinct batches: distinct config ids
    by_fault = dict(zip(("oom", "crash", "hang", "error", None), (c.id for c in cfgs), strict=True))
    faulty = partial(FaultyWorker, faults={cfg_id: fault for fault, cfg_id in by_fault.items() if fault})
    summary = run_shard(cfgs, tmp_path, FAST, timeout=4.0, log=None, worker_factory=faulty)
    recs = {r["id"]: r for r in _records(tmp_path)}
    assert len(recs) == 5 and summary.measured == 5
    assert recs[by_fault["oom"]]["status"] == "oom" and "OutOfMemoryError" in recs[by_fault["oom"]]["error"]
    assert recs[by_fault["crash"]]["status"] == "crash" and "exit" in recs[by_fault["crash"]]["error"]
    assert recs[by_fault["hang"]]["status"] == "timeout"
    assert recs[by_fault["error"]]["status"] == "error" and "simulated" in recs[by_fault["error"]]["error"]
    ok = recs[by_fault[None]]
    assert ok["status"] == "ok" and ok["latency_ms"]["median"] > 0
    for rec in recs.values():
        if rec["status"] != "ok":
            assert rec["latency_ms"] is None and rec["memory_mb"] is None
    assert summary.worker_starts == 5  # a fresh worker after each failure
    # retry_failed re-measures timeout/crash/error but not oom/ok.
    retry = run_shard(cfgs[1:2], tmp_path, FAST, retry_failed=True, log=None, worker_factory=faulty)
    assert retry.measured == 1 and retry.statuses == {"crash": 1}


def test_cli_limit_shard_and_configs_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfgs = [_config("lstm_small?seq_len=8", b) for b in (1, 2, 4, 8)]
    save_configs(cfgs, tmp_path / "configs.jsonl")
    assert [c.id for c in load_configs(tmp_path / "configs.jsonl")] == [c.id for c in cfgs]
    out = tmp_path / "out"
    base = ["--device", "cpu", "--out", str(out), "--configs", str(tmp_path / "configs.jsonl")]
    fast = ["--warmup", "1", "--runs", "3", "--shard", "0/1"]
    assert cli_main([*base, *fast, "--limit", "1"]) == 0
    line = capsys.readouterr().out.strip()
    # one of the four configs measured, none done before, three left (4 - 0 - 1)
    assert " shard 0/1: measured 1 (ok=1) in " in line and "; 0 were done, 3 left -> " in line
    assert len(_records(out)) == 1
    assert cli_main([*base, *fast]) == 0
    assert len({r["id"] for r in _records(out)}) == 4
    with pytest.raises(SystemExit):
        cli_main([*base, "--shard", "2/2"])


def test_shards_partition_the_list() -> None:
    ids = [config_id("resnet", {"depth": d, "resolution": r}, b, "float32") for d in (18, 50) for r in (32, 64)
           for b in (1, 2, 4, 8, 16)]  # fmt: skip
    for n in (1, 2, 3, 7):
        parts = [{i for i in ids if shard_of(i, n) == k} for k in range(n)]
        assert sum(len(p) for p in parts) == len(ids) and set().union(*parts) == set(ids)
    assert len({shard_of(i, 3) for i in ids}) == 3


def test_config_ids_are_stable() -> None:
    info = spec_info("resnet18?resolution=32")
    assert info is not None
    # The id is a hash of canonical content: pinned so that a change is deliberate (it orphans old records).
    assert config_id(info.family, info.params, 1, "float32") == "45e41b2bf1d49337"
    assert spec_info("resnet?depth=18&resolution=32").params == info.params
    assert config_id("resnet", {"a": 1, "b": 2}, 1, "float16") == config_id("resnet", {"b": 2, "a": 1}, 1, "float16")
    assert config_id("resnet", {}, 1, "float16") != config_id("resnet", {}, 2, "float16")


def _identity(cfgs: list[MeasureConfig]) -> list[tuple]:
    return [(c.id, c.zoo, c.batch, c.dtype, c.expected_oom) for c in cfgs]


def test_sampler_is_deterministic() -> None:
    some = ["resnet", "bert", "randwire", "swin"]
    first = sample_configs("h100-80gb", per_family=6, seed=0, max_expected_oom=0, families=some)
    assert {c.family for c in first} == set(some) and len(first) == 24
    cfgmod._SPEC_CACHE.clear()  # determinism must not depend on the cache
    second = sample_configs("h100-80gb", per_family=6, seed=0, max_expected_oom=0, families=some)
    assert _identity(second) == _identity(first)
    other = sample_configs("h100-80gb", per_family=6, seed=1, max_expected_oom=0, families=some)
    assert {c.id for c in other} != {c.id for c in second}
    for cfg in first:
        assert cfg.batch in cfgmod.BATCHES and cfg.dtype in cfgmod.DTYPES and not cfg.expected_oom
        assert cfg.est_memory_mb <= DEVICE_MEMORY_MIB["h100-80gb"]
        assert cfg.inputs and cfg.inputs[0]["shape"][0] == cfg.batch
        assert cfg.mem_method == "meta-live"
        assert cfgmod.spec_info(cfg.zoo) is not None  # the spec string is usable as zoo:SPEC


def test_every_family_has_a_space() -> None:
    for family in list_families():
        space = list(cfgmod.enumerate_space(family.name))
        assert {b for _, b, _ in space} == set(cfgmod.BATCHES)
        if family.name in ("nnunet", "dlrm"):  # no size parameter: each variant at 9 batches x 2 dtypes
            assert len(space) == len(cfgmod._variants(family)) * 18, family.name
        else:
            assert len(space) >= 30 * 4, family.name
        specs = sorted({s for s, _, _ in space})
        if family.name in cfgmod.SIZE_AXES:  # every spec builds (dlrm's and nnunet's had a seq_len they do not take)
            assert all(cfgmod.spec_info(spec) is not None for spec in specs), family.name
        else:  # the space is unvalidated (a resolution too small for the family): some of it builds
            assert any(cfgmod.spec_info(spec) is not None for spec in specs), family.name


def test_wav2vec2_space_is_in_audio_samples_and_counts_its_flops() -> None:
    space = {spec for spec, _, _ in cfgmod.enumerate_space("wav2vec2")}
    assert "wav2vec2_base?seq_len=104640" in space and "wav2vec2_base?seq_len=16000" in space
    info = cfgmod.spec_info("wav2vec2_base?seq_len=16000")
    # its weight-normed positional conv broke FlopCounterMode (AttributeError): 0 FLOPs, a fallback memory estimate
    assert info.mem_method == "meta-live"
    # by hand, a lower bound: 16,000 samples -> (16,000 - 400) // 320 + 1 = 49 frames; each of the 12 layers' linears
    # 4 x 768^2 + 2 x 768 x 3,072 = 7,077,888 MACs per frame
    assert info.flops >= 2 * 49 * 12 * 7_077_888


def test_public_configs_are_the_mapped_rows_in_both_dtypes() -> None:
    from predictor.public_data import MappedRow, load_rows, map_rows

    mapped = {(r.spec, r.batch) for r in map_rows(load_rows()) if isinstance(r, MappedRow)}
    cfgs, skipped = cfgmod.public_configs("h100-80gb")
    assert skipped == 0
    got = {(c.zoo, c.batch, c.dtype) for c in cfgs}
    assert got == {(spec, batch, d) for spec, batch in mapped for d in ("float32", "float16")}
    assert len({c.id for c in cfgs}) == len(cfgs) == 2 * len(mapped)
    assert {c.family for c in cfgs} == {"nnunet", "dlrm", "tft", "ssd300", "quartznet", "wav2vec2", "fastpitch"}
    shipped = load_configs(Path(__file__).resolve().parents[1] / "predictor" / "measure" / "lists" / "public-dle.jsonl")
    assert [c.id for c in shipped] == [c.id for c in cfgs]


@pytest.mark.parametrize("target", ["h100-80gb", "h200-141gb"])
def test_shipped_config_lists(target: str) -> None:
    lists = Path(__file__).resolve().parents[1] / "predictor" / "measure" / "lists"
    cfgs = load_configs(lists / f"{target}.jsonl")
    families = {f.name for f in list_families()}
    per = {name: sum(c.family == name for c in cfgs) for name in families}
    assert len(cfgs) >= 2900 and len(families) == 45 and min(per.values()) >= 40, per
    assert len({c.id for c in cfgs}) == len(cfgs)
    assert [c.id for c in cfgs] == [c.id for c in stratified_order(cfgs)]
    assert {c.id for c in load_configs(lists / "public-dle.jsonl")} <= {c.id for c in cfgs}
    for cfg in cfgs:
        assert cfg.id == config_id(cfg.family, cfg.params, cfg.batch, cfg.dtype)
    memory = DEVICE_MEMORY_MIB[target]
    oom = [c for c in cfgs if c.expected_oom]
    # 8 over the first 34 families, then 3 over the 11 added for the public DLE tables
    assert 1 <= len(oom) <= 11 and all(c.est_memory_mb > memory for c in oom)
    assert all(c.est_memory_mb <= memory for c in cfgs if not c.expected_oom)
    assert all(0 < c.est_run_ms <= cfgmod.MAX_RUN_MS for c in cfgs if not c.expected_oom)
    smallest = MIG_PROFILES[target][0].memory_mib
    assert sum(c.est_memory_mb > smallest for c in cfgs) >= 20  # too big for the smallest slice


def test_sampler_skips_what_cannot_fit_and_flags_a_few() -> None:
    cfgs = sample_configs("custom", per_family=8, families=["gpt2"], memory_mib=3000.0, max_expected_oom=2)
    fitting = [c for c in cfgs if not c.expected_oom]
    assert len(fitting) == 8 and all(c.est_memory_mb <= 3000 * cfgmod.FIT_FRACTION for c in fitting)
    flagged = [c for c in cfgs if c.expected_oom]
    assert 1 <= len(flagged) <= 2 and all(c.est_memory_mb > 3000 for c in flagged)


def test_memory_estimate_scales_with_batch_and_dtype() -> None:
    info = spec_info("gpt2_tiny?seq_len=64")
    assert info is not None and info.mem_method == "meta-live"  # HF decoders trace on meta
    assert info.weight_bytes["float16"] * 2 == pytest.approx(info.weight_bytes["float32"], rel=0.01)
    assert estimate_memory_mib(info, 64, "float32") > estimate_memory_mib(info, 1, "float32")
    assert estimate_memory_mib(info, 8, "float16") < estimate_memory_mib(info, 8, "float32")


def test_skip_estimate_is_the_predictor_figures_plus_margins() -> None:
    assert cfgmod.SKIP_CONTEXT_MIB == 600.0 and cfgmod.SKIP_WORKSPACE_MIB == 256.0  # 500 + 100, 64 + 192
    info = cfgmod.SpecInfo("f", {}, {"float32": 2**20}, {"float32": 10 * 2**20}, (), "meta-live")
    # 600 + 256 MiB + 1 MiB weights + 4 x 10 MiB activations x 1.3 = 909 MiB
    assert estimate_memory_mib(info, 4, "float32") == pytest.approx(909.0)


def test_latency_stats() -> None:
    stats = latency_stats([float(v) for v in range(1, 101)])
    assert stats["median"] == 50.5 and stats["runs"] == 100
    assert stats["p10"] == pytest.approx(10.9) and stats["p90"] == pytest.approx(90.1)


@pytest.mark.parametrize(
    ("name", "mib", "key"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, "h100-80gb"),
        ("NVIDIA H200", 143771, "h200-141gb"),
        ("NVIDIA A100-SXM4-40GB", 40960, "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", 81920, "a100-80gb"),
        ("NVIDIA A100-SXM4-80GB", 81920, "a100-80gb"),
        ("NVIDIA H100 NVL", 95830, "h100-nvl-94gb"),
        ("NVIDIA L4", 23034, "nvidia-l4"),
    ],
)
def test_device_key(name: str, mib: int, key: str) -> None:
    assert device_key(name, mib) == key


def test_mig_table_is_consistent() -> None:
    for key, profiles in MIG_PROFILES.items():
        usable = [p.memory_mib for p in profiles]
        assert usable == sorted(usable) and usable[-1] < DEVICE_MEMORY_MIB[key]


def test_measure_package_imports_neither_tvm_nor_passes() -> None:
    code = (
        "import sys, predictor.measure.harness, predictor.measure.configs, predictor.measure.__main__\n"
        "import predictor.measure.worker, predictor.measure.supervisor, predictor.measure.nvml\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tvm', 'passes', 'analyzer')]\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
