"""Issue 28's huge-model families, in a real CLI process: a transformers config of 4,096 layers, TFLite files
with more operators than preflight reads, and ONNX recurrences of 10**6 and 2**31 - 1 steps. Each asserts the
exit code, one line on stderr when it fails, no traceback, the mechanism (layers or steps extrapolated; the
operator cap named) and the peak resident memory of the CLI process under 2 GiB (its own
`getrusage(RUSAGE_CHILDREN)`, measured in a fresh wrapper process so no earlier child of the test run counts).
Wall time is measured by bench/bench_fuzz.py and docs/safety.md, not asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fuzzing import hf_config_layers, onnx_resource_vector, tflite_chain

from analyzer.frontends.tensorflow_frontend import MAX_TFLITE_OPS

REPO = Path(__file__).resolve().parents[1]
_MEASURED = (
    "import json, resource, subprocess, sys\n"
    "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"  # KiB on Linux
    "print(json.dumps({'rc': p.returncode, 'out': p.stdout, 'err': p.stderr, 'peak_kib': peak}))\n"
)


def _analyze(path: Path, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "analyzer.cli", "analyze", str(path), *args, "--timeout", "600"]
    out = subprocess.run(
        [sys.executable, "-c", _MEASURED, *cmd], capture_output=True, text=True, env=env, cwd=REPO, timeout=900
    )
    res = json.loads(out.stdout)
    assert "Traceback" not in res["err"] and "internal error" not in res["err"], res["err"][-2000:]
    assert res["peak_kib"] < 2 * 2**20, res["peak_kib"]  # 2 GiB
    return res


def _one_line(res: dict, code: int) -> str:
    assert res["rc"] == code, res["err"][-2000:]
    lines = res["err"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res["err"]
    return lines[0]


@pytest.mark.slow
def test_a_config_of_4096_identical_layers_is_extrapolated(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf_config_layers(4096)))
    res = _analyze(path, "--input", "input_ids:1x8", "--format", "json")
    assert res["rc"] == 0, res["err"][-2000:]
    doc = json.loads(res["out"])
    assert doc["layers"]["layers"] == 4096 and doc["layers"]["traced"] == [1, 2]
    # wte 1000 x 64 + wpe 128 x 64 + 4,096 x 49,984 (tests/test_config_depth.py) + ln_f 128
    assert doc["totals"]["params"] == 64_000 + 8_192 + 4096 * 49_984 + 128 == 204_806_784
    assert any("layers 3..4096 extrapolated from layers 1-2 (identical)" in w for w in doc["warnings"])


def test_a_config_of_4096_layers_that_differ_is_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf_config_layers(4096, alternating=True)))
    line = _one_line(_analyze(path), 1)
    assert "4,096 layers that preflight cannot extrapolate" in line and "its attention_layers differ" in line


def test_a_tflite_file_past_the_operator_cap_is_refused(tmp_path):
    path = tmp_path / "chain.tflite"
    path.write_bytes(tflite_chain(MAX_TFLITE_OPS + 1))
    line = _one_line(_analyze(path), 2)
    assert f"{MAX_TFLITE_OPS + 1:,} operators" in line and f"at most {MAX_TFLITE_OPS:,} operators" in line


@pytest.mark.parametrize(
    ("vector", "steps", "macs"),
    [
        # LSTM, B 1, I 3, H 4: 10**6 steps x 4 gates x 4 x (3 + 4) = 112,000,000 MACs
        ("lstm_1e6_steps", 10**6, 10**6 * 16 * 7),
        # GRU over the largest dimension: (2**31 - 1) x 3 gates x 4 x (3 + 4) = 180,388,626,348 MACs
        ("gru_max_dim_steps", 2**31 - 1, (2**31 - 1) * 12 * 7),
    ],
)
def test_the_hostile_recurrences_are_costed_in_closed_form(tmp_path, vector, steps, macs):
    """Issue 28's files (killed at 120 s and 10 GB; 16.8 GB peak): analysed at 12, 13 and 14 steps and
    extrapolated exactly (tests/test_onnx_rnn.py checks the closed form against the unrolled graph)."""
    path = tmp_path / "rnn.onnx"
    onnx_resource_vector(vector, path)
    res = _analyze(path, "--format", "json")
    assert res["rc"] == 0, res["err"][-2000:]
    doc = json.loads(res["out"])
    assert doc["recurrence"]["steps"] == steps and doc["recurrence"]["sampled"] == [12, 13, 14]
    assert doc["totals"]["macs"] == macs
    assert doc["inputs"][0]["shape"] == [steps, 1, 3]
