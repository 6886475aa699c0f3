"""`--host-overhead` / `host_overhead`: the host's dispatch time per kernel as a multiple of the kernel model's
fitted launch floor, through `predict`, the Python API, the CLI and analyze-many manifests, by hand.

The hand figures come from the kernel view (the kernels `predict` costs) and the kernel model's parameter table
(each kernel's `launch_us`), and from an event loop over the kernels written here (the queueing rule of
`predictor.mig.queued_s`), never from the prediction under test."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from oracle_models import gemm_then_small  # noqa: E402

import analyzer  # noqa: E402
from analyzer.errors import UsageError  # noqa: E402
from analyzer.render import assumes_text  # noqa: E402
from predictor.devices import get_device  # noqa: E402
from predictor.kernel_model import kernel_arrays, kernel_latency_arrays, load_params, param_dtype  # noqa: E402
from predictor.power import power_params  # noqa: E402


class SmallChain(torch.nn.Module):
    """16 elementwise adds on an 8 x 8 float32 tensor: 16 kernels of 256 bytes, each far under its launch floor."""

    def forward(self, s):
        for _ in range(16):
            s = s + 1.0
        return s


def _chain():
    return SmallChain(), (torch.zeros(8, 8),)


def _gemm():
    return gemm_then_small()


def _kernels(report):
    return getattr(report.analysis, "launched_kernels", report.analysis.kernels)


def _event_loop_s(execution_s, issue_s) -> float:
    """Kernels issued asynchronously, as an event loop: the host begins issuing kernel i when done with kernel i-1;
    kernel i starts then or when the GPU finishes kernel i-1, whichever is later; the run ends when both are done."""
    host = gpu = 0.0
    for e, d in zip(execution_s, issue_s, strict=True):
        gpu = max(host, gpu) + e
        host += d
    return max(host, gpu)


def test_doubling_the_host_adds_one_launch_floor_per_launch_bound_kernel():
    """SmallChain on the A100-40GB: 16 elementwise float32 kernels, each launch-bound (its execution, the table's
    exec_us + 256 bytes at the bandwidth, is under its launch_us: checked). Latency = sum over kernels of
    max(execution, h x launch) = 16 x h x launch_us, so h = 2 adds exactly 16 x launch_us (ms: x 1e-3). All the time
    is at the launch floor, so the power is the GPU's gap_w and the energy = latency x gap_w: h = 2 adds
    16 x launch_us x 1e-6 s x gap_w."""
    model, args = _chain()
    one = analyzer.predict(model, args, device="a100-40gb")
    two = analyzer.predict(model, args, device="a100-40gb", host_overhead=2.0)
    kernels = _kernels(one)
    assert len(kernels) == 16 and {k.kind for k in kernels} == {"elementwise"}
    a100 = get_device("a100-40gb")
    entry = load_params().lookup(a100.key, "elementwise", param_dtype("elementwise", "float32"))
    launch_ms = entry.launch_us * 1e-3
    t = kernel_latency_arrays(kernel_arrays(kernels), a100)
    assert (t.compute_s < entry.launch_us * 1e-6).all() and (t.memory_s < entry.launch_us * 1e-6).all()
    assert one.prediction.latency_ms == pytest.approx(16 * launch_ms, rel=1e-12)
    assert two.prediction.latency_ms - one.prediction.latency_ms == pytest.approx(16 * launch_ms, rel=1e-9)
    gap_w = power_params(a100.key).gap_w
    assert two.prediction.power_w == pytest.approx(gap_w) and one.prediction.power_w == pytest.approx(gap_w)
    assert two.prediction.energy_j - one.prediction.energy_j == pytest.approx(16 * launch_ms / 1e3 * gap_w, rel=1e-9)
    # the interval's low end: max(roofline, half the launch floor) per kernel, so 16 x h x launch_us / 2
    assert two.prediction.latency_ms_interval[0] == pytest.approx(16 * 2 * launch_ms / 2, rel=1e-9)
    # a host-bound chain is no slower on a slice: the host issues as slowly there (h x launch each)
    assert two.prediction.mig.latency_ms["1g.5gb"] == pytest.approx(two.prediction.latency_ms, rel=1e-9)
    assert two.prediction.runtime["host_overhead"] == 2.0 and one.prediction.runtime["host_overhead"] == 1.0
    assert "each kernel 2x preflight's launch floor" in assumes_text(two.prediction.runtime)
    assert "launch floor" not in assumes_text(one.prediction.runtime)


def test_whole_gpu_and_slices_see_the_same_host():
    """GemmThenSmall on the H100 at h = 2: whole GPU = sum over kernels of max(execution, 2 x launch) from the kernel
    view's per-kernel times; each slice = that + event loop(slice, issue 2 x launch) - event loop(whole, same); and
    with a slice as the target the same figure. The change from h = 1 on the whole GPU is the sum over the kernels of
    max(e, 2 l) - max(e, l): the GEMM (execution over 2 l) adds nothing, each short kernel adds its floor."""
    model, args = _gemm()
    one = analyzer.predict(model, args, device="h100-80gb").prediction
    p = analyzer.predict(model, args, device="h100-80gb", host_overhead=2.0).prediction
    assert p.predictor == "roofline"
    h100 = get_device("h100-80gb")
    arrays = kernel_arrays(_kernels(analyzer.analyze(model, args)))
    t = kernel_latency_arrays(arrays, h100)
    execution = [max(c, m) for c, m in zip(t.compute_s, t.memory_s, strict=True)]
    launch = list(t.launch_s)
    want_whole = sum(max(e, 2 * d) for e, d in zip(execution, launch, strict=True)) * 1e3
    assert p.latency_ms == pytest.approx(want_whole, rel=1e-12)
    delta = sum(max(e, 2 * d) - max(e, d) for e, d in zip(execution, launch, strict=True)) * 1e3
    assert p.latency_ms - one.latency_ms == pytest.approx(delta, rel=1e-9)
    assert execution[0] > 2 * launch[0] and delta == pytest.approx(sum(launch[1:]) * 1e3, rel=1e-12)
    base = _event_loop_s(execution, [2 * d for d in launch])
    for q in h100.mig:
        s = kernel_latency_arrays(arrays, h100, q)
        ex = [max(c, m) for c, m in zip(s.compute_s, s.memory_s, strict=True)]
        want = want_whole + 1e3 * (_event_loop_s(ex, [2 * d for d in s.launch_s]) - base)
        assert p.mig.latency_ms[q.name] == pytest.approx(want, rel=1e-9), q.name
    target = analyzer.predict(model, args, device="h100-80gb:1g.10gb", host_overhead=2.0).prediction
    assert target.latency_ms == pytest.approx(p.mig.latency_ms["1g.10gb"], rel=1e-9)
    assert target.mig.full_gpu_latency_ms == pytest.approx(want_whole, rel=1e-12)
    assert target.runtime["host_overhead"] == 2.0


def test_the_default_is_the_unscaled_kernel_model():
    """host_overhead 1.0 (default): the latency is the per-kernel sum of max(execution, launch) of the kernel view."""
    model, args = _gemm()
    p = analyzer.predict(model, args, device="h100-80gb").prediction
    t = kernel_latency_arrays(kernel_arrays(_kernels(analyzer.analyze(model, args))), get_device("h100-80gb"))
    want = sum(max(c, m, d) for c, m, d in zip(t.compute_s, t.memory_s, t.launch_s, strict=True)) * 1e3
    assert p.latency_ms == pytest.approx(want, rel=1e-12)
    assert analyzer.predict(model, args, device="h100-80gb", host_overhead=1.0).prediction == p


def test_op_times_apportion_the_scaled_kernel_times():
    """`op_times_ms` (the per-operator table) at h = 2 on GemmThenSmall (H100): the GEMM's op gets its kernel's
    max(execution, 2 x launch) and each short add its own, from the kernel view's per-kernel times (by hand: the
    GEMM's execution is over 2 x launch, each add's under it), so the GEMM's share of the total is
    e_gemm / (e_gemm + 2 x sum of the adds' launch), not its h = 1 share."""
    from predictor.predict import op_times_ms

    model, args = _gemm()
    rep = analyzer.predict(model, args, device="h100-80gb", host_overhead=2.0)
    kernels = _kernels(rep)
    t = kernel_latency_arrays(kernel_arrays(kernels), get_device("h100-80gb"))
    execution = [max(c, m) for c, m in zip(t.compute_s, t.memory_s, strict=True)]
    assert execution[0] > 2 * t.launch_s[0] and all(e < d for e, d in zip(execution[1:], t.launch_s[1:], strict=True))
    want = [1e3 * max(e, 2 * d) for e, d in zip(execution, t.launch_s, strict=True)]
    times = op_times_ms(rep.analysis, rep.prediction)
    for kernel, ms in zip(kernels, want, strict=True):
        (op,) = kernel.ops
        assert times[op][0] == pytest.approx(ms, rel=1e-9)
    # the GEMM compute-bound; each add under its (doubled) launch floor: the host's dispatch sets its time
    assert times[kernels[0].ops[0]][1] == "compute" and {times[k.ops[0]][1] for k in kernels[1:]} == {"launch"}


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "2", True, None])
def test_api_refuses_a_bad_factor(bad):
    model, args = _chain()
    with pytest.raises(UsageError, match="host-overhead must be a positive finite number"):
        analyzer.predict(model, args, host_overhead=bad)


def test_api_takes_any_real_factor():
    """A numpy scalar (what a user's sweep over np.linspace hands in) is the same factor as the Python float."""
    import numpy as np

    model, args = _chain()
    want = analyzer.predict(model, args, device="a100-40gb", host_overhead=2.0).prediction.latency_ms
    got = analyzer.predict(model, args, device="a100-40gb", host_overhead=np.float32(2.0)).prediction.latency_ms
    assert got == want


def test_a_trained_predictor_gives_way_to_the_estimate(tmp_path, monkeypatch):
    """The shipped GraphSAGE (`--predictor public`, OOD threshold lifted) answers on the A100-40GB at h = 1; at h = 2
    the kernel-model estimate does, with a warning (the GraphSAGE learned its hosts and takes no host factor)."""
    import shutil

    from predictor.predict import SHIPPED_CHECKPOINTS, find_artifact, predict

    monkeypatch.setenv("PREFLIGHT_PREDICTOR", "public")
    shipped = find_artifact("a100-80gb", SHIPPED_CHECKPOINTS)
    assert shipped is not None
    art = tmp_path / shipped.name
    shutil.copytree(shipped, art)
    meta = json.loads((art / "meta.json").read_text())
    meta["ood"]["threshold"] = 1e9
    (art / "meta.json").write_text(json.dumps(meta))
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()).eval()
    analysis = analyzer.analyze(model, (torch.randn(4, 64),)).analysis
    p1, _ = predict(analysis, "a100-40gb", checkpoints=tmp_path)
    p2, warnings = predict(analysis, "a100-40gb", checkpoints=tmp_path, host_overhead=2.0)
    assert p1.predictor == shipped.name and p2.predictor == "roofline"
    assert any("takes no host factor" in w for w in warnings)
    # the prediction's basis names it too, not "no trained predictor" (a contradiction a review found)
    note = p2.basis["whole_model_note"]
    assert note.startswith(f"the trained predictor {shipped.name} is not used for this analysis (a warning says why)")


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "analyzer.cli", *args], capture_output=True, text=True, timeout=600, cwd=cwd
    )


@pytest.mark.parametrize("bad", ["0", "-2", "nan", "inf", "abc"])
def test_cli_refuses_a_bad_factor(bad, tmp_path):
    for command in (
        ["predict", "zoo:resnet18?resolution=32"],
        ["report", "zoo:resnet18", "-o", str(tmp_path / "r.json")],
    ):
        r = _cli(*command, "--host-overhead", bad)
        assert r.returncode == 2, r.stderr
        assert "--host-overhead" in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) <= 2


def test_cli_records_the_factor_and_a_manifest_row_may_set_it(tmp_path):
    doc = json.loads(_cli("predict", "zoo:resnet18?resolution=32", "--host-overhead", "2.3", "--format", "json").stdout)
    assert doc["prediction"]["runtime"]["host_overhead"] == 2.3
    from analyzer.batch import read_manifest

    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"model": "zoo:resnet18"}\n{"model": "zoo:resnet34", "host_overhead": 1.5}\n')
    jobs, _ = read_manifest(manifest, host_overhead=2.0)
    assert [j.host_overhead for j in jobs] == [2.0, 1.5]
    assert jobs[1].request()["host_overhead"] == 1.5 and "host_overhead" not in read_manifest(manifest)[0][0].request()
    manifest.write_text('{"model": "zoo:resnet18", "host_overhead": -1}\n')
    with pytest.raises(UsageError, match="m.jsonl line 1: --host-overhead"):
        read_manifest(manifest)
    r = _cli("analyze-many", str(manifest), "-o", str(tmp_path / "out.jsonl"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "host-overhead" in r.stderr


def test_llm_eager_takes_it_and_vllm_refuses_it():
    """`preflight llm`: the eager runtime predicts its steps with the factor (recorded in `llm.runtime`; a launch-bound
    tiny GPT-2's prefill at h = 2 is over 1.9x its h = 1 figure, all but its few long kernels at the floor); the vllm
    runtime's host time is its engine profile, so a factor other than 1 there is a usage error."""
    from analyzer.llm import llm

    spec = "zoo:gpt2?layers=2&hidden=64&heads=4&intermediate=256&vocab=256&max_pos=128&seq_len=16"
    args = dict(prompt=16, generate=4, batch=1, devices=["a100-80gb"], contexts=[32])
    docs = {h: llm(spec, **args, host_overhead=h).llm.to_json() for h in (1.0, 2.0)}
    assert docs[2.0]["runtime"]["host_overhead"] == 2.0 and docs[1.0]["runtime"]["host_overhead"] == 1.0
    ttft = {h: d["devices"][0]["ttft_ms"] for h, d in docs.items()}
    assert 1.9 < ttft[2.0] / ttft[1.0] <= 2.0
    with pytest.raises(UsageError, match="--host-overhead needs --runtime eager"):
        llm(spec, runtime="vllm", host_overhead=2.0)
    with pytest.raises(UsageError, match="--host-overhead must be a positive finite number"):
        llm(spec, host_overhead=float("nan"))


def test_op_times_split_a_fused_kernel_by_each_ops_roofline_time():
    """nn.Linear(256, 512) on a (64, 256) float32 input is one GEMM kernel with its bias add fused (addmm). By hand:
    the matmul 2 x 64 x 256 x 512 = 16,777,216 FLOPs and (64 x 256 + 256 x 512 + 64 x 512) x 4 = 720,896 bytes, the
    add 64 x 512 = 32,768 FLOPs and (2 x 64 x 512 + 512) x 4 = 264,192 bytes; each op's roofline time on the H100 is
    max(FLOPs / FP32 peak, bytes / bandwidth), and the kernel's time is split in that proportion (not half each)."""
    import torch

    from predictor.predict import op_times_ms

    rep = analyzer.predict(torch.nn.Linear(256, 512), (torch.randn(64, 256),), device="h100-80gb")
    (kernel,) = rep.analysis.kernels
    mm, add = kernel.ops
    ops = {c.index: c for c in rep.analysis.ops}
    assert (ops[mm].flops, ops[mm].bytes_read + ops[mm].bytes_written) == (16_777_216, 720_896)
    assert (ops[add].flops, ops[add].bytes_read + ops[add].bytes_written) == (32_768, 264_192)
    h100 = get_device("h100-80gb")
    t_mm = max(16_777_216 / h100.peak_flops["fp32"], 720_896 / h100.bandwidth)
    t_add = max(32_768 / h100.peak_flops["fp32"], 264_192 / h100.bandwidth)
    times = op_times_ms(rep.analysis, rep.prediction)
    assert times[mm][0] + times[add][0] == pytest.approx(rep.prediction.latency_ms, rel=1e-9)
    assert times[add][0] / times[mm][0] == pytest.approx(t_add / t_mm, rel=1e-9)
    assert times[add][0] < 0.5 * times[mm][0]
