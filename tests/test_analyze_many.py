"""`preflight analyze-many` and the dataset builder on Ray (analyzer/batch.py).

One local Ray with 2 workers analyses a JSONL manifest of small models in four formats (ONNX, .pt2, .tflite,
zoo:) plus broken and hostile files; the job is killed half-way (SIGKILL of the driver process) and resumed.
Every number of a row is checked against the single-process API (`analyzer.analyze`, `analyzer.predict`) run
here, and every error against the error that API raises for the same model. A second Ray session runs the
faults of tests/batch_faults.py (a worker that segfaults, a model that hangs, one that asks for too much memory)
and the dataset builder. Manifests, the directory walk and exit code 2 for bad input need no Ray.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import time
import types
import zipfile
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from fuzzing import onnx_conv_model

import analyzer
from analyzer import batch
from analyzer.cli import cli
from analyzer.errors import AnalysisError, PreflightError, UnreadableModelError, one_line

REPO = Path(__file__).resolve().parents[1]
HAS_TF = find_spec("tensorflow") is not None and find_spec("tflite") is not None

# ---- models ---------------------------------------------------------------------------------------------------


class Touch:
    """Unpickling this creates `marker`: the proof that code from a model file ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


TFLITE = """
import sys
import tensorflow as tf
m = tf.keras.Sequential([tf.keras.Input((8,), batch_size=1), tf.keras.layers.Dense(4)])
open(sys.argv[1], "wb").write(tf.lite.TFLiteConverter.from_keras_model(m).convert())
"""


def _evil_weight_pt2(src: Path, dst: Path, marker: Path) -> None:
    """`src` with its first weight replaced by a torch.save pickle that touches `marker` (marked use_pickle)."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save(Touch(marker), buf)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("data/weights/weight_0"):
                data = buf.getvalue()
            elif info.filename.endswith("data/weights/model_weights_config.json"):
                cfg = json.loads(data)
                for entry in cfg["config"].values():
                    entry["use_pickle"] = entry["path_name"] == "weight_0" or entry.get("use_pickle", False)
                data = json.dumps(cfg).encode()
            zout.writestr(info.filename, data)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """A folder of small models in four formats, and broken and hostile files (with the marker they'd touch)."""
    import torch

    d = tmp_path_factory.mktemp("models")
    tf = (
        subprocess.Popen([sys.executable, "-c", TFLITE, str(d / "dense.tflite")], stderr=subprocess.DEVNULL)
        if HAS_TF
        else None
    )
    onnx.save(onnx_conv_model(1), d / "conv.onnx")
    onnx.save(onnx_conv_model("N"), d / "dyn.onnx")  # dynamic batch: needs --batch or --input
    (d / "trunc.onnx").write_bytes((d / "conv.onnx").read_bytes()[:60])

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return torch.relu(self.fc(x))

    torch.export.save(torch.export.export(Net().eval(), (torch.randn(2, 4),)), d / "net.pt2")
    marker = d / "PWNED"
    (d / "pickle.pt2").write_bytes(pickle.dumps(Touch(marker)))  # a pickle renamed .pt2
    _evil_weight_pt2(d / "net.pt2", d / "evil.pt2", marker)  # a real archive whose weight is a pickle
    if tf is not None:
        assert tf.wait(timeout=300) == 0
    return d


# The manifest of the Ray job, in order: quick failures first, so that the kill lands half-way.
ROWS = [
    {"model": "trunc.onnx"},
    {"model": "pickle.pt2"},
    {"model": "gone.onnx"},
    {"model": "conv.onnx"},
    {"model": "dyn.onnx"},
    {"model": "evil.pt2"},
    {"model": "zoo:no_such_model"},
    {"model": "conv.onnx", "devices": ["a100-40gb", "h100-80gb"]},
    {"model": "dyn.onnx", "batch": 4},
    {"model": "dyn.onnx", "inputs": ["x:2x3x8x8"], "dtype": "float16"},
    {"model": "net.pt2"},
    {"model": "zoo:alexnet_x0_25", "batch": 2},
    *([{"model": "dense.tflite"}] if HAS_TF else []),
]
FAILS = {  # model -> error class; the others analyse
    "trunc.onnx": "UnreadableModelError",
    "pickle.pt2": "UnreadableModelError",
    "gone.onnx": "UnreadableModelError",
    "evil.pt2": "UnreadableModelError",
    "zoo:no_such_model": "UsageError",
}


def _api_args(row: dict) -> dict:
    req = row["request"]
    return {"inputs": req["inputs"], "batch": req["batch"], "dtype": req["dtype"]}


def _complete_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "analyzer.cli", "analyze-many", *args]


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a process we started in its own session, and what is left of its process group."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # Ray's agents outlive a SIGKILLed driver for a while


@pytest.fixture(scope="module")
def job(models, tmp_path_factory):
    """The CLI over the manifest, killed (SIGKILL) after 3 rows, then run again with --resume."""
    manifest = models / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path_factory.mktemp("job") / "results.jsonl"
    args = _cli(str(manifest), "-o", str(out), "--workers", "2", "--timeout", "300")
    log = out.with_suffix(".log")
    with open(log, "w") as err:
        first = subprocess.Popen(
            args, env=_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 300
            while _complete_lines(out) < 3 and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            _kill_group(first)
    assert first.returncode == -signal.SIGKILL, log.read_text()
    data = out.read_bytes()
    kept = data[: data.rfind(b"\n") + 1]
    with open(out, "ab") as f:  # the cut row a kill during a write leaves
        f.write(b'{"schema": "preflight.batch/1", "model": "conv.on')
    second = subprocess.run(
        [*args, "--resume"], env=_env(), cwd=REPO, capture_output=True, text=True, timeout=600, start_new_session=True
    )
    text = out.read_text()
    rows = [json.loads(line) for line in text.splitlines()]
    jobs, _ = batch.read_manifest(manifest)
    return types.SimpleNamespace(
        kept=kept.decode(), n_kept=kept.count(b"\n"), second=second, text=text, rows=rows, jobs=jobs, out=out
    )


def test_resume_after_a_killed_job_gives_exactly_one_row_per_model(job):
    assert job.second.returncode == 0, job.second.stderr
    assert 3 <= job.n_kept < len(ROWS), "the kill did not land half-way"
    keys = [batch.row_key(r) for r in job.rows]
    assert len(keys) == len(set(keys)) == len(ROWS)
    assert set(keys) == {j.key for j in job.jobs}
    assert job.text.startswith(job.kept)  # the rows of the killed run are kept as written; the cut one is gone
    assert f"resuming: {job.n_kept} of {len(ROWS)} models already in" in job.second.stderr


def test_rows_equal_the_single_process_api(job, models):
    ok = [r for r in job.rows if r["status"] == "ok"]
    assert len(ok) == len(ROWS) - len(FAILS) - 1  # and dyn.onnx without a batch
    for row in ok:
        assert row["error"] is None and row["schema"] == "preflight.batch/1"
        path = row["model"] if row["model"].startswith("zoo:") else str(models / row["model"])
        doc = analyzer.analyze(path, **_api_args(row)).to_json()
        assert row["totals"] == doc["totals"], row["model"]
        assert row["inputs"] == doc["inputs"] and row["graph"] == doc["graph"]
        assert (row["framework"], row["name"]) == (doc["model"]["framework"], doc["model"]["name"])
        assert [p["device"] for p in row["predictions"]] == row["request"]["devices"]
        for p in row["predictions"]:
            oracle = analyzer.predict(path, device=p["device"], **_api_args(row)).prediction.to_json()
            assert p == json.loads(json.dumps(oracle)), (row["model"], p["device"])
    conv = next(r for r in ok if r["model"] == "conv.onnx")
    # conv: 2 * (4 * 3 * 3 * 3) * (8 * 8) = 13,824 FLOPs (6,912 MACs); relu: 4 * 8 * 8 = 256
    assert (conv["totals"]["flops"], conv["totals"]["macs"]) == (13_824 + 256, 6_912)
    dyn4 = next(r for r in ok if r["model"] == "dyn.onnx" and r["request"]["batch"] == 4)
    assert dyn4["totals"]["macs"] == 4 * 6_912  # batch 4 from the manifest row


def test_broken_and_hostile_files_get_their_own_one_line_error_and_run_nothing(job, models):
    failed = {
        (r["model"], r["request"]["batch"], tuple(r["request"]["inputs"])): r for r in job.rows if r["status"] != "ok"
    }
    expected = {(m, None, ()) for m in FAILS} | {("dyn.onnx", None, ())}
    assert set(failed) == expected
    for (model, _, _), row in failed.items():
        path = model if model.startswith("zoo:") else str(models / model)
        with pytest.raises(PreflightError) as exc:
            analyzer.analyze(path, **_api_args(row))
        err = row["error"]
        assert (err["class"], err["message"], err["exit_code"]) == (
            type(exc.value).__name__,
            one_line(exc.value),
            exc.value.exit_code,
        )
        assert err["class"] == FAILS.get(model, "MissingShapeError") and "\n" not in err["message"]
        assert "predictions" not in row and "totals" not in row
    assert "pickle" in failed[("pickle.pt2", None, ())]["error"]["message"]
    assert "pickle" in failed[("evil.pt2", None, ())]["error"]["message"]
    assert not (models / "PWNED").exists(), "code from a model file ran"


def test_progress_on_stderr_and_the_summary_on_stdout(job):
    err, out = job.second.stderr, job.second.stdout
    lines = err.splitlines()
    assert lines and all(line.startswith(("resuming:", "starting a local Ray", "analysing", "[")) for line in lines), (
        err
    )
    assert "models/min" in lines[-1] and "ETA" in lines[-1]
    ok = [r for r in job.rows if r["status"] == "ok"]
    n, n_ok = len(ROWS), len(ok)
    assert f"analyze-many: {n} models, {n_ok} ok, {n - n_ok} failed" in out
    assert any(line.split()[:2] == ["UnreadableModelError", "4"] for line in out.splitlines())
    assert any(line.split()[:2] == ["MissingShapeError", "1"] for line in out.splitlines())
    assert f"({sum(r['totals']['flops'] for r in ok):,})" in out  # total FLOPs of the ok rows
    assert any(line.split()[:2] == ["h100-80gb", str(n_ok)] for line in out.splitlines())
    assert any(line.split()[:2] == ["a100-40gb", "1"] for line in out.splitlines())


# ---- no Ray: manifests, the directory walk, exit code 2 --------------------------------------------------------


def test_directory_walk_finds_every_format_and_nothing_else(tmp_path, monkeypatch):
    files = [
        "a.onnx", "b.pt2", "c.tflite", "d.keras", "e.h5", "f.HDF5",
        "saved/saved_model.pb", "saved/variables/variables.index", "saved/nested.onnx",
        "pir/model.json", "pir/model.pdiparams",
        "legacy/m.pdmodel", "legacy/m.pdiparams",
        "sub/deeper/g.onnx",
        # not models preflight reads
        "w.pt", "w.pth", "state.pkl", "notes.txt", "config.json", "README", "orphan.pdiparams",
        ".hidden/h.onnx", ".i.onnx",
    ]  # fmt: skip
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_bytes(b"x")
    (tmp_path / "bert").mkdir()  # a transformers config.json (a JSON object with a model_type) is a model
    (tmp_path / "bert" / "config.json").write_text('{"model_type": "bert", "num_hidden_layers": 2}')
    found, skipped = batch.walk_models(tmp_path)
    rel = [p.relative_to(tmp_path).as_posix() for p in found]
    assert rel == [
        "a.onnx", "b.pt2", "c.tflite", "d.keras", "e.h5", "f.HDF5",
        "bert/config.json", "legacy/m.pdmodel", "pir/model.json", "saved", "sub/deeper/g.onnx",
    ]  # fmt: skip
    assert skipped == {".pt": 1, ".pth": 1, ".pkl": 1, ".txt": 1, ".json": 1, "(no suffix)": 1, ".pdiparams": 1}

    # the walk agrees with the loader's dispatch: every entry reaches a loader, every skipped file is refused
    class Reached(Exception):
        pass

    import analyzer.frontends as fe
    from analyzer.frontends import hf_config, onnx_frontend, paddle_frontend, tensorflow_frontend, torch_frontend

    for mod, name in [
        (onnx_frontend, "load_onnx"),
        (torch_frontend, "load_pt2"),
        (tensorflow_frontend, "load_tflite"),
        (tensorflow_frontend, "load_keras"),
        (tensorflow_frontend, "load_saved_model"),
        (paddle_frontend, "load_paddle"),
        (hf_config, "load_hf_config"),
    ]:
        monkeypatch.setattr(mod, name, lambda *a, _n=name, **k: (_ for _ in ()).throw(Reached(_n)))
    for p in found:
        with pytest.raises(Reached):
            fe.load(p)
    for f in ("w.pt", "w.pth", "state.pkl", "notes.txt", "config.json", "README"):
        with pytest.raises(UnreadableModelError):
            fe.load(tmp_path / f)


def test_manifest_forms(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.onnx").write_bytes(b"x")
    text = tmp_path / "list.txt"
    text.write_text("# models to screen\nm/a.onnx\n\nzoo:resnet18\n/abs/b.onnx\nm/a.onnx\n")
    jobs, notes = batch.read_manifest(text, ["h100"])
    assert [(j.model, j.path, j.devices) for j in jobs] == [
        ("m/a.onnx", str(tmp_path / "m" / "a.onnx"), ("h100-80gb",)),  # relative to the manifest; alias resolved
        ("zoo:resnet18", "zoo:resnet18", ("h100-80gb",)),
        ("/abs/b.onnx", "/abs/b.onnx", ("h100-80gb",)),
    ]
    assert notes == ["1 duplicate entries of the manifest skipped"]
    rows = tmp_path / "rows.txt"  # JSON Lines, recognised by its first entry
    rows.write_text('{"model": "zoo:bert_tiny", "batch": 8, "inputs": ["ids:8x64:int64"], "devices": "a100-40gb"}\n')
    (job,) = batch.read_manifest(rows)[0]
    assert (job.batch, job.inputs, job.devices, job.dtype) == (8, ("ids:8x64:int64",), ("a100-40gb",), None)
    jobs, _ = batch.read_manifest(tmp_path / "m")
    assert [j.model for j in jobs] == [str(tmp_path / "m" / "a.onnx")]
    # --batch / --dtype: for every model whose row names none; a row's own values win
    jobs, _ = batch.read_manifest(text, ["h100"], 4, "float16")
    assert [(j.batch, j.dtype) for j in jobs] == [(4, "float16")] * 3
    rows.write_text(
        '{"model": "zoo:bert_tiny", "batch": 8}\n{"model": "zoo:gpt2_tiny", "dtype": "bfloat16"}\n'
        '{"model": "zoo:resnet18", "batch": null, "dtype": null}\n'  # null names none
    )
    jobs, _ = batch.read_manifest(rows, ["h100"], 4, "float16")
    assert [(j.batch, j.dtype) for j in jobs] == [(8, "float16"), (4, "bfloat16"), (4, "float16")]
    assert [(j.batch, j.dtype) for j in batch.read_manifest(tmp_path / "m", batch=2)[0]] == [(2, None)]


@pytest.mark.parametrize(
    "manifest, message",
    [
        ('{"model": "a.onnx"}\n{"model": \n', "m.jsonl line 2: not JSON"),
        ('{"batch": 2}\n', 'm.jsonl line 1: "model" must be a path or zoo:NAME'),
        ('{"model": "a.onnx", "batchsize": 2}\n', "m.jsonl line 1: unknown key 'batchsize'"),
        ('{"model": "a.onnx", "batch": 0}\n', 'm.jsonl line 1: "batch" must be an integer from 1'),
        ('{"model": "a.onnx", "inputs": ["x"]}\n', "m.jsonl line 1: --input 'x': expected NAME:DIMS"),
        ('{"model": "a.onnx", "devices": ["h900"]}\n', "m.jsonl line 1: unknown device"),
        ('{"model": "a.onnx", "dtype": "int8"}\n', 'm.jsonl line 1: "dtype" must be one of'),
        ("[1, 2]\n", "m.jsonl line 1: a row is a JSON object"),
        ("# nothing\n\n", "the manifest names no model"),
        (None, "no model files found"),  # an empty directory
    ],
)
def test_a_bad_manifest_exits_2_with_one_line(tmp_path, manifest, message):
    if manifest is None:
        path = tmp_path / "empty"
        path.mkdir()
        (path / "notes.txt").write_text("x")
    else:
        path = tmp_path / "m.jsonl"
        path.write_text(manifest)
    res = CliRunner().invoke(cli, ["analyze-many", str(path), "-o", str(tmp_path / "out.jsonl")])
    assert res.exit_code == 2, (res.output, res.exception)
    assert res.stderr.startswith("error: ") and message in res.stderr and len(res.stderr.splitlines()) == 1
    assert "Traceback" not in res.output and not (tmp_path / "out.jsonl").exists()


def test_bad_devices_outputs_and_results_files_exit_2(tmp_path):
    manifest = tmp_path / "m.txt"
    manifest.write_text("zoo:resnet18\n")
    out = tmp_path / "out.jsonl"

    def run(*args):
        return CliRunner().invoke(cli, ["analyze-many", str(manifest), "-o", str(out), *args])

    res = run("--device", "h900")
    assert res.exit_code == 2 and "--device: unknown device" in res.stderr
    res = run("--address", "127.0.0.1:1")  # nothing listens on port 1: refused at once, not after Ray's retries
    assert res.exit_code == 2 and "cannot join the Ray cluster at 127.0.0.1:1: nothing answers" in res.stderr
    assert not out.exists()  # a job that could not start leaves no results file
    res = CliRunner().invoke(cli, ["analyze-many", str(manifest), "-o", str(tmp_path / "no" / "out.jsonl")])
    assert res.exit_code == 2 and "cannot write" in res.stderr
    out.write_text("results of another job\n")
    res = run()
    assert res.exit_code == 2 and "exists: give --resume" in res.stderr
    res = run("--resume")
    assert res.exit_code == 2 and "line 1: not a results row" in res.stderr
    assert out.read_text() == "results of another job\n"  # refused, untouched
    res = CliRunner().invoke(cli, ["analyze-many", str(tmp_path / "nope.txt"), "-o", str(out)])
    assert res.exit_code == 2 and "does not exist" in res.stderr


def test_fail_on_error_exits_1_after_the_summary_when_a_model_failed(tmp_path, monkeypatch):
    """`--fail-on-error` (CI): the job's rows and summary as always, then exit 1 when any model failed; without the
    flag, or with no failure, exit 0. The job itself is replaced by its summary (the engine runs in other tests)."""
    manifest = tmp_path / "m.txt"
    manifest.write_text("zoo:resnet18\n")
    failed = {"model": "bad.onnx", "status": "failed", "seconds": 0.1, "error": {"class": "X", "message": "m"}}
    rows: list[dict] = []
    monkeypatch.setattr(batch, "analyze_many", lambda *a, **k: batch.Summary(rows=list(rows), output="out.jsonl"))

    def run(*args):
        return CliRunner().invoke(cli, ["analyze-many", str(manifest), "-o", str(tmp_path / "o.jsonl"), *args])

    rows[:] = [failed, {**failed, "model": "worse.onnx"}]
    res = run("--fail-on-error")
    assert res.exit_code == 1 and "analyze-many: 2 models, 0 ok, 2 failed" in res.stdout
    assert res.stderr.strip().splitlines()[-1] == "error: 2 of 2 models failed (--fail-on-error)"
    assert run().exit_code == 0  # the default: the job ran, each row says how its model did
    rows[:] = []
    assert run("--fail-on-error").exit_code == 0


def test_results_file_drops_a_row_cut_by_a_kill(tmp_path):
    path = tmp_path / "r.jsonl"
    row = {"schema": batch.ROW_SCHEMA, "model": "a.onnx", "request": {"batch": None}, "status": "ok"}
    path.write_text(json.dumps(row) + "\n" + '{"schema": "preflight.batch/1", "mod')
    f = batch.ResultsFile(path, resume=True)
    assert list(f.rows) == [batch.row_key(row)]
    f.write(dict(row, model="b.onnx"))
    f.close()
    assert [json.loads(line)["model"] for line in path.read_text().splitlines()] == ["a.onnx", "b.onnx"]


def test_progress_is_a_bar_on_a_terminal_and_a_line_per_model_elsewhere():
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty, log = Terminal(), io.StringIO()
    for stream in (tty, log):
        p = batch.Progress(2, stream, width=4)
        p.update("a.onnx", batch.Outcome(ok=True, seconds=1.0))
        p.update("b.onnx", batch.Outcome(ok=False, error_class="Timeout", seconds=600.0))
    assert tty.getvalue().startswith("\r[##..] 1/2  ") and "\r[####] 2/2  " in tty.getvalue()
    assert tty.getvalue().endswith("1 failed\x1b[K\n")  # the finished bar keeps its line
    first, second = log.getvalue().splitlines()
    assert first.startswith("[1/2] ") and "models/min, ETA " in first and first.endswith("| a.onnx: ok in 1.0s")
    assert second.endswith("ETA 0s, 1 failed | b.onnx: Timeout in 600.0s")


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="RLIMIT_AS cap needs Linux /proc")
def test_the_memory_cap_refuses_a_larger_allocation_and_is_lifted_after():
    with batch.address_space_cap(256), pytest.raises(MemoryError):
        bytearray(1024 * 2**20)
    assert len(bytearray(1024 * 2**20)) == 1024 * 2**20


# ---- rows that share a model, and the affinity schedule (no Ray) ------------------------------------------------


def test_mark_shared_picks_the_rows_of_a_model_with_two_batches(tmp_path):
    manifest = tmp_path / "m.jsonl"
    rows = [
        {"model": "zoo:alexnet_x0_25", "batch": 2},
        {"model": "zoo:alexnet_x0_25", "batch": 8, "dtype": "float32"},
        {"model": "zoo:alexnet_x0_25", "batch": 8, "dtype": "float16"},  # traced in float16 too: its own export
        {"model": "zoo:alexnet_x0_25", "batch": 1},  # torch specialises batch 1: its own export
        {"model": "zoo:alexnet_x0_25"},  # the zoo's default batch (1)
        {"model": "zoo:alexnet_x0_25", "batch": 4, "inputs": ["x:4x3x224x224"]},  # shapes from --input
        {"model": "zoo:resnet18", "batch": 4},  # the only row of its model
        {"model": "conv.onnx", "batch": 2},  # a file: one import with its own dynamic dims
        {"model": "conv.onnx", "batch": 1},  # (its range decides whether batch 1 comes from it)
        {"model": "conv.onnx", "batch": 4, "inputs": ["x:4x3x8x8"]},  # shapes from --input: on its own
        {"model": "net.tflite", "batch": 2},  # a format whose dynamic dims are not kept
        {"model": "net.tflite", "batch": 4},
    ]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    jobs, _ = batch.read_manifest(manifest)
    shared = [True, True, False, False, False, False, False, True, True, False, False, False]
    assert [j.shared for j in batch.mark_shared(jobs)] == shared
    assert batch.mark_shared(jobs)[0] == jobs[0] and batch.mark_shared(jobs)[0].key == jobs[0].key  # no new identity


def test_affinity_queue_gives_a_family_to_the_worker_that_met_it():
    keys = [
        ("torch", "resnet", "r18"),  # 0
        ("hf", "bert", "b1"),  # 1
        ("torch", "vgg", "v1"),  # 2
        ("hf", "gpt2", "g1"),  # 3
        ("torch", "resnet", "r18"),  # 4: worker 0's own model again
        ("torch", "resnet", "r50"),  # 5: worker 0's family
    ]
    q = batch.AffinityQueue(list(range(6)), keys)
    assert q.pop(0) == 0  # nothing met anywhere: the manifest's order
    assert q.pop(1) == 1  # the first job of a library worker 0 has not met
    assert q.pop(0) == 4  # its own model, then its family, then its library
    assert q.pop(0) == 5
    assert q.pop(1) == 3  # worker 1's library
    assert q.pop(0) == 2
    assert len(q) == 0
    with pytest.raises(IndexError):
        q.pop(0)
    # a worker that has met nothing steals what the others have met least: the family nobody has been given
    q = batch.AffinityQueue(list(range(3)), [("t", "a", "1"), ("t", "a", "2"), ("t", "b", "3")])
    assert (q.pop(0), q.pop(1), q.pop(1)) == (0, 2, 1)
    # without keys, or with keys that do not fit the jobs: in order
    for k in (None, [("a",)]):
        q = batch.AffinityQueue(list(range(3)), [("b",), ("a",), ("a",)])
        q.set_keys(k)
        assert [q.pop(1), q.pop(0), q.pop(0)] == [0, 1, 2]


def _no_envelope(value: dict) -> dict:
    return json.loads(json.dumps(value))  # as the row carries it (tuples as lists)


@pytest.fixture()
def shared_jobs(tmp_path):
    rows = [
        {"model": "zoo:alexnet_x0_25", "batch": 2},
        {"model": "zoo:alexnet_x0_25", "batch": 5, "devices": ["a100-40gb", "h100-80gb"]},
        {"model": "zoo:alexnet_x0_25", "batch": 3, "dtype": "float16"},
        {"model": "zoo:alexnet_x0_25", "batch": 4, "dtype": "float16"},
        {"model": "zoo:alexnet_x0_25", "batch": 1},
    ]
    manifest = tmp_path / "shared.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    jobs = batch.mark_shared(batch.read_manifest(manifest)[0])
    assert [j.shared for j in jobs] == [True, True, True, True, False]
    assert [j.half_casts for j in jobs] == [None, None, "float16", "float16", None]
    return jobs


def _check_rows_equal_one_by_one(jobs, rows):
    """Field by field, each row equals the row of its model analysed alone (`analyzer.analyze` and
    `analyzer.predict` in this process, no symbolic export)."""
    for job, row in zip(jobs, rows, strict=True):
        args = {"inputs": list(job.inputs), "batch": job.batch, "dtype": job.dtype}
        doc = analyzer.analyze(job.path, **args).to_json()
        for k in ("inputs", "totals", "graph"):
            assert row[k] == doc[k], (str(job), k)
        assert (row["framework"], row["name"]) == (doc["model"]["framework"], doc["model"]["name"])
        assert [p["device"] for p in row["predictions"]] == list(job.devices)
        warnings: list[str] = []  # the analysis's, then each device's predictor's, each once
        for p in row["predictions"]:
            one = analyzer.predict(job.path, device=p["device"], **args).to_json()
            assert p == _no_envelope(one["prediction"]), (str(job), p["device"])
            warnings += [w for w in one["warnings"] if w not in warnings]
        assert row["warnings"] == warnings, str(job)


def _count_exports(monkeypatch) -> list[str]:
    from analyzer import pipeline

    calls: list[str] = []
    real = pipeline.analyze_model
    monkeypatch.setattr(pipeline, "analyze_model", lambda m, *a, **k: (calls.append(m), real(m, *a, **k))[1])
    monkeypatch.setattr(batch, "_symbolic", batch.OrderedDict())  # this test's worker cache, empty
    return calls


def test_rows_that_share_a_model_equal_rows_analysed_one_by_one(shared_jobs, monkeypatch):
    calls = _count_exports(monkeypatch)
    rows = [_no_envelope(batch.analyze_task(j)) for j in shared_jobs]
    assert calls == ["zoo:alexnet_x0_25"]  # only batch 1 exported on its own: the others from one symbolic export
    # one export per (model, the half dtype it is traced in as well): float32's and float16's
    keys = [("zoo:alexnet_x0_25", None), ("zoo:alexnet_x0_25", "float16")]
    assert list(batch._symbolic) == keys and all(batch._symbolic[k] is not None for k in keys)
    assert rows[1]["totals"]["macs"] == 5 * rows[0]["totals"]["macs"] // 2  # a CNN's MACs are linear in the batch
    monkeypatch.undo()
    _check_rows_equal_one_by_one(shared_jobs, rows)


def test_rows_that_share_a_file_equal_rows_analysed_one_by_one(tmp_path, monkeypatch):
    import torch
    from test_symbolic_files import _save

    onnx = _save(
        torch.nn.Conv2d(3, 4, 3), (torch.randn(2, 3, 8, 8),), ({0: torch.export.Dim("b")},), tmp_path / "c.onnx", "onnx"
    )
    rows = [{"model": onnx, "batch": b} for b in (1, 2, 6)]
    manifest = tmp_path / "files.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    jobs = batch.mark_shared(batch.read_manifest(manifest)[0])
    assert [j.shared for j in jobs] == [True, True, True]
    calls = _count_exports(monkeypatch)
    done = [_no_envelope(batch.analyze_task(j)) for j in jobs]
    assert calls == [onnx]  # batch 1, below an ONNX file's symbolic range (from 2), imported on its own
    assert list(batch._symbolic) == [(onnx, None)] and batch._symbolic[(onnx, None)] is not None
    # Conv2d(3, 4, 3) on 8 x 8: 4 x 6 x 6 outputs of 27 MACs = 3,888 per sample
    assert [r["totals"]["macs"] for r in done] == [3_888, 7_776, 23_328]
    monkeypatch.undo()
    _check_rows_equal_one_by_one(jobs, done)


def test_shared_rows_of_a_model_without_a_symbolic_export_fall_back_per_row(shared_jobs, monkeypatch):
    from analyzer import symbolic

    calls = _count_exports(monkeypatch)

    def refuse(model, *a, **k):
        raise AnalysisError(f"{model}: torch.export fixed the batch size; no symbolic export")

    monkeypatch.setattr(symbolic, "load_symbolic", refuse)
    rows = [_no_envelope(batch.analyze_task(j)) for j in shared_jobs]
    assert calls == [j.path for j in shared_jobs]  # every row exported on its own
    # tried once per worker and export (float32's, float16's), not once per row
    assert batch._symbolic == {("zoo:alexnet_x0_25", None): None, ("zoo:alexnet_x0_25", "float16"): None}
    monkeypatch.undo()
    _check_rows_equal_one_by_one(shared_jobs, rows)


# ---- faults and the dataset builder: one Ray session in this process (the last tests of the file) ---------------


@pytest.fixture(scope="module")
def ray_session():
    import batch_faults  # tests/ is on pytest's path, not the workers': send the module by value
    import ray

    ray.cloudpickle.register_pickle_by_value(batch_faults)
    with batch.ray_cluster(workers=2) as n:
        yield n
    ray.cloudpickle.unregister_pickle_by_value(batch_faults)


def test_a_worker_that_dies_a_hang_and_a_hog_lose_only_their_own_model(ray_session, models, tmp_path):
    from batch_faults import HOG_BYTES, misbehave

    assert len(bytearray(HOG_BYTES)) == HOG_BYTES  # control: without a cap the hog's request is granted
    rows = [  # the hang first: one worker waits out its time limit while the other goes on
        {"model": str(models / "hang.onnx")},
        {"model": str(models / "conv.onnx")},
        {"model": str(models / "crash.onnx")},
        {"model": str(models / "dyn.onnx"), "batch": 4},
        {"model": str(models / "hog.onnx")},
        {"model": str(models / "conv.onnx"), "devices": ["a100-80gb"]},
    ]
    manifest = tmp_path / "faults.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "results.jsonl"
    summary = batch.analyze_many(manifest, out, workers=2, timeout_s=15, memory_mb=1024, task=misbehave)
    got = {(Path(r["model"]).name, r["request"]["batch"], tuple(r["request"]["devices"])): r for r in summary.rows}
    assert len(got) == len(rows) == len(out.read_text().splitlines())
    errors = {k[0]: (r["error"] or {}).get("class") for k, r in got.items() if r["status"] != "ok"}
    assert errors == {"crash.onnx": "WorkerDied", "hang.onnx": "Timeout", "hog.onnx": "MemoryLimitExceeded"}
    assert got[("hang.onnx", None, ("h100-80gb",))]["seconds"] >= 15
    for (name, b, devices), row in got.items():
        if row["status"] == "ok":
            doc = analyzer.predict(str(models / name), batch=b, device=devices[0]).to_json()
            assert row["totals"] == doc["totals"] and row["predictions"] == [json.loads(json.dumps(doc["prediction"]))]
    # the dead, stopped and recycled workers were replaced: more workers than the 2 the job started with
    assert len({r["worker"]["pid"] for r in summary.rows}) >= 3
    text = summary.text()
    assert all(c in text for c in ("WorkerDied", "Timeout", "MemoryLimitExceeded"))


def test_the_dataset_builder_runs_on_the_engine(ray_session, tmp_path):
    from analyzer.dataset import build_cache, featurize
    from predictor.data import config_spec, load_graph, read_records, record_key

    records = sorted(read_records([REPO / "data" / "cpu-vm"]), key=lambda r: r["id"])[:2]
    bogus = dict(records[0], zoo="no_such_family", id="bogus")
    with pytest.raises(AnalysisError, match=r"1 of 3 configurations could not be featurised: no_such_family"):
        build_cache([*records, bogus], tmp_path, workers=2)
    graphs = build_cache(records, tmp_path)  # the good ones were cached before the error: no Ray needed now
    for rec in records:
        cached = load_graph(graphs[record_key(rec)])
        oracle = featurize(*config_spec(rec))  # in this process
        assert sorted(cached) == sorted(oracle)
        for k, v in oracle.items():
            np.testing.assert_array_equal(cached[k], v, err_msg=k)


@pytest.mark.slow  # 31 to 56 s here: 6 rows on Ray, then each analysed again in this process
def test_affinity_and_shared_rows_on_ray_equal_the_single_process_rows(ray_session, shared_jobs, tmp_path):
    # two families on two workers: the rows of each model (three from one symbolic export) and bert's
    manifest = tmp_path / "families.jsonl"
    rows = [{"model": j.model, "batch": j.batch, "dtype": j.dtype, "devices": list(j.devices)} for j in shared_jobs]
    rows += [{"model": "zoo:bert_tiny", "batch": 2}, {"model": "zoo:bert_tiny", "batch": 3}]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = batch.analyze_many(manifest, tmp_path / "out.jsonl", workers=2)
    jobs, _ = batch.read_manifest(manifest)
    assert [r["status"] for r in summary.rows] == ["ok"] * len(jobs)
    for job, row in zip(jobs, summary.rows, strict=True):  # each row as one process analyses it on its own
        alone = _no_envelope(batch.analyze_task(job))  # read_manifest's jobs are not shared: exported one by one
        assert {k: row[k] for k in alone} == alone, str(job)
