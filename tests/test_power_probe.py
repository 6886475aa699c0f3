"""The power probe (predictor/measure/power_probe.py): workload accounting by hand, a lease step on the CPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from predictor.measure import kernels as K
from predictor.measure import lease
from predictor.measure import power_probe as P
from predictor.measure.nvml import host_slug

ROOT = Path(__file__).resolve().parents[1]


def _w(name: str) -> P.Workload:
    return {w.name: w for w in P.WORKLOADS}[name]


def test_bytes_and_flops_per_call_by_hand() -> None:
    # copy: 2^29 float16 read and written: 2 x 2^29 x 2 B = 2^31 B
    assert _w("copy-fp16").bytes_per_call() == 2_147_483_648 and _w("copy-fp16").flops_per_call() == 0
    # add: two inputs and one output of 2^27 float32: 3 x 2^27 x 4 = 1,610,612,736 B; one FLOP an element
    assert _w("add-fp32").bytes_per_call() == 1_610_612_736 and _w("add-fp32").flops_per_call() == 134_217_728
    # decode: x 8 x 4096, w 4096 x 14336, out 8 x 14336, float16:
    # (32,768 + 58,720,256 + 114,688) x 2 = 117,735,424 B; 2 x 8 x 14,336 x 4,096 = 939,524,096 FLOPs
    assert _w("decode-fp16").bytes_per_call() == 117_735_424
    assert _w("decode-bf16").flops_per_call() == 939_524_096
    # 8192^3 float32: 2 x 8192^3 = 1,099,511,627,776 FLOPs; 3 x 8192^2 x 4 = 805,306,368 B
    assert _w("gemm-fp32").flops_per_call() == 1_099_511_627_776
    assert _w("gemm-fp32").bytes_per_call() == 805_306_368
    assert _w("idle").bytes_per_call() == 0 and _w("idle").flops_per_call() == 0
    # scale divides every dimension: 2^29 / 4096 = 131,072 elements; (8, 4096, 14336) / 4096 -> (1, 1, 3)
    assert _w("copy-fp16").sized(4096) == (131_072,) and _w("decode-fp16").sized(4096) == (1, 1, 3)
    assert _w("decode-fp16").bytes_per_call(4096) == (1 + 3 + 3) * 2  # 14 B
    classes = Counter(w.cls for w in P.WORKLOADS)
    assert classes == Counter(idle=1, launch=1, memory=4, compute=5)
    assert len({w.id for w in P.WORKLOADS}) == len(P.WORKLOADS)


def test_a_cpu_probe_runs_the_calls_it_counts() -> None:
    torch = pytest.importorskip("torch")
    w = _w("add-fp32")
    call = P.build(w, "cpu", scale=4096)
    out = call()
    assert isinstance(out, torch.Tensor) and out.shape == (32_768,)  # 2^27 / 4096
    rec = P.probe(w, "cpu", None, hold_s=0.05, warm_s=0.01, scale=4096)
    assert rec["calls"] >= 1 and rec["energy_j"] is None and rec["avg_power_w"] is None
    assert rec["bytes_per_call"] == 3 * 32_768 * 4  # 393,216 B
    assert rec["achieved_bytes_per_s"] == pytest.approx(rec["calls"] * 393_216 / rec["gpu_s"], rel=1e-3)
    idle = P.probe(_w("idle"), "cpu", None, hold_s=0.1, warm_s=0.0)
    assert idle["busy_share"] == 0.0 and idle["achieved_bytes_per_s"] is None and idle["wall_s"] >= 0.1


def test_lease_power_step_on_the_cpu_and_collect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, data = tmp_path / "out", tmp_path / "data"
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no nvidia-smi
    extra = ["--scale", "4096", "--hold-s", "0.05", "--warm-s", "0.01", "--workload", "idle", "--workload", "launch"]
    args = ["--out", str(out), "--step", "power", "--device", "cpu", "--data", str(data), "--budget-s", "120"]
    assert lease.main(args + [f"--power-arg={a}" for a in extra]) == 0
    device = f"cpu-{host_slug()}"
    files = list((out / device / "power").glob("probes-*.jsonl"))
    assert len(files) == 1
    recs = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert [r["workload"] for r in recs] == ["idle", "launch"] and all(r["status"] == "ok" for r in recs)
    assert all(r["schema"] == P.RECORD_SCHEMA and r["device"] == device for r in recs)
    # Everything a device call returns lies at most two folders below OUT.
    assert all(len(p.relative_to(out).parts) <= 3 for p in out.rglob("*") if p.is_file())
    summary = json.loads(next((out / device / "leases").glob("power-*.json")).read_text())
    assert summary["records"]["power"] == {"ok": 2} and summary["power"]["exit"] == 0
    report = lease.collect(out, data)
    assert report[f"{device}/power"] == Counter(added=2)
    assert lease.collect(out, data)[f"{device}/power"] == Counter(duplicate=2)  # merging twice adds nothing
    assert len(list(K.iter_records([data / device / "power"], P.RECORD_SCHEMA))) == 2


def test_unknown_workload_is_a_clean_error(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "predictor.measure.power_probe", "run", "--out", str(tmp_path), "--device", "cpu"]
    proc = subprocess.run(cmd + ["--workload", "nope"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown workload 'nope'" in proc.stderr and "Traceback" not in proc.stderr


def test_cuda_without_a_gpu_is_a_clean_error(tmp_path: Path) -> None:
    # this CPU machine has neither NVML nor nvidia-smi's GPU: asking for cuda is a one-line error, exit 2
    if shutil.which("nvidia-smi"):
        pytest.skip("a GPU tool is present on this host")
    cmd = [sys.executable, "-m", "predictor.measure.power_probe", "run", "--out", str(tmp_path), "--device", "cuda"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --device cuda") and "Traceback" not in proc.stderr


def test_device_detection_lives_in_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    # One detect_device, in predictor.measure.nvml, imported at module level by the lease and the probe (the probe
    # no longer imports the lease, which imports the probe's schema); each measure module imports first in a fresh
    # interpreter, so no import cycle is left among them.
    import ast

    from predictor.measure import nvml

    assert lease.detect_device is nvml.detect_device and P.detect_device is nvml.detect_device
    tree = ast.parse(Path(P.__file__).read_text())
    froms = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "predictor.measure.lease" not in froms and "predictor.measure.nvml" in froms
    for module in ("nvml", "power_probe", "lease", "worker", "kernels"):
        code = f"import predictor.measure.{module}"
        subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
    monkeypatch.setattr(nvml.socket, "gethostname", lambda: "GPU_Box.01")
    assert nvml.detect_device("cpu") == ("cpu", "cpu-gpu-box-01", "cpu")  # lower case, "_" and "." -> "-"
