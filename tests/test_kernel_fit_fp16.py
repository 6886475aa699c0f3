"""Half-precision kernel fits on the Vidur measurements (data/vidur-ops): the reader's shapes by hand, a GEMM
time by hand from the committed parameters, held-out models reproduced within a bound, and what the new
entries say they rest on."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from predictor import kernel_fit as kf
from predictor.devices import DEVICES
from predictor.kernel_model import kernel_latency, load_params

ROOT = Path(__file__).resolve().parents[1]
VIDUR = ROOT / "data" / "vidur-ops"


@dataclass(frozen=True)
class K:
    kind: str
    flops: int
    bytes_read: int
    bytes_written: int
    dtype: str = "float16"
    params: dict = field(default_factory=dict)


def _row(name: str, tokens: int, tp: int) -> dict:
    with open(VIDUR / name, newline="") as fh:
        return next(
            r for r in csv.DictReader(fh)
            if int(r["num_tokens"]) == tokens and int(r["num_tensor_parallel_workers"]) == tp
        )  # fmt: skip


def test_vidur_row_becomes_the_layer_kernels():
    """Llama-2-7B (h 4096, 32 heads of 128, f 11008, gated) at 4,096 tokens, TP 2."""
    recs = kf._vidur_kernels(_row("h100-meta-llama_Llama-2-7b-hf.csv", 4096, 2), "h100-80gb", "vidur:x")
    by_op = {r.op: r for r in recs}
    assert sorted(by_op) == ["add", "attn_post_proj", "attn_pre_proj", "input_layernorm", "mlp_down_proj",
                             "mlp_up_proj", "post_attention_layernorm"]  # fmt: skip
    qkv = by_op["attn_pre_proj"]
    assert qkv.params == {"b": 1, "m": 4096, "n": (32 + 2 * 32) * 128 // 2, "k": 4096}  # n = 6144
    assert qkv.flops == 2 * 4096 * 6144 * 4096
    assert (qkv.bytes_read, qkv.bytes_written) == (2 * (4096 * 4096 + 4096 * 6144), 2 * 4096 * 6144)
    assert by_op["mlp_up_proj"].params["n"] == 2 * 11008 // 2 and by_op["mlp_down_proj"].params["k"] == 5504
    assert by_op["add"].bytes_read == 2 * 2 * 4096 * 4096 and by_op["add"].kind == "elementwise"
    assert not any(r.includes_launch for r in recs) and all(r.dtype == "float16" for r in recs)


def test_gemm_time_by_hand_from_the_committed_parameters():
    """One token through Llama-2-7B's QKV (1 x 4096 by 4096 x 12288) on the H100: memory-bound, the weights
    streamed once, from the stored hopper float16 entry (e_compute 0.75229, e_memory 0.848202, tile_i0 92.052,
    k0 288.9794, exec 2.9944 us, tail 0.340719, ridge 0.307406, overlap 1).
    memory: 100,696,064 B / (3.35e12 x 0.848202) = 3.543793e-5 s.
    compute: best tile 32x128: 96 tiles = 0.727273 waves, run in 0.727273 + 0.340719 x 0.272727 = 0.820196 wave
    times: fill 12,288 / (0.820196 x 132 x 4,096) = 0.027710; rate (25.6 / 117.652) / (85.3333 / 177.3853) =
    0.452314; depth (w = 1) 4096 / (4096 + 288.9794) = 0.934098; e_c = 0.75229 x 0.027710 x 0.452314 x 0.934098
    = 0.0088074; 100,663,296 FLOPs / (989.4e12 x 0.0088074) = 1.155187e-5 s.
    ridge: 3.543793e-5 x (1 + (1.155187e-5 / 3.543793e-5)^(1 / 0.307406))^0.307406 = 3.571956e-5 s; + exec
    2.9944 us = 3.871396e-5 s."""
    p = load_params().lookup("h100-80gb", "gemm", "float16")
    m, n, k = 1, 12288, 4096
    read, written = 2 * (m * k + k * n), 2 * m * n  # 100,671,488 + 24,576 bytes
    kern = K("gemm", 2 * m * n * k, read, written, "float16", {"b": 1, "m": m, "n": n, "k": k})
    kt = kernel_latency([kern], DEVICES["h100-80gb"])
    by_hand = 3.871396e-5
    assert kt.memory_s[0] == pytest.approx(by_hand, rel=1e-5) and kt.compute_s[0] < kt.memory_s[0]
    assert kt.compute_s[0] == pytest.approx(1.155187e-5 + 2.9944e-6, rel=1e-5)  # the smaller term stays as it is
    assert kt.seconds[0] == pytest.approx(by_hand + p.launch_us * 1e-6, rel=1e-5)
    # measured by Vidur: 0.038 ms (median kernel duration, TP 1, 1 token); the fit gives 0.0387 ms (+1.9%; +16%
    # before the wave tail, ridge and epilogue overlap terms, docs/kernel-model.md "GEMM shape terms")
    assert float(_row("h100-meta-llama_Llama-2-7b-hf.csv", 1, 1)["time_stats.attn_pre_proj.median"]) == 0.038
    assert by_hand == pytest.approx(0.038e-3, rel=0.05)


@pytest.mark.parametrize("gpu, bound", [("h100", 9.0), ("a100", 9.0)])
def test_held_out_model_is_reproduced(gpu, bound):
    """Fit the family's float16 GEMMs on every model but Llama-2-7B, predict Llama-2-7B's GEMMs of >= 50 us.
    Measured here: MAPE 7.2% (H100, 2,149 kernels), 7.2% (A100, 3,373) (9.3% and 8.9% before the GEMM shape
    terms; KERNEL_EVAL.md's held-out rows are over all kernels); the bounds fail if the fit degrades by about 2
    points."""
    recs = [r for r in kf.read_vidur(VIDUR) if r.kind == "gemm" and r.device.startswith(gpu)]
    train = kf.Group.of([r for r in recs if "Llama-2-7b" not in r.source])
    test = kf.Group.of([r for r in recs if "Llama-2-7b" in r.source and r.latency_s >= 50e-6])
    p = kf.fit_with(train, None)
    ape = np.abs(test.predict(p) / test.latency - 1) * 100
    assert len(test.records) > 500 and ape.mean() < bound
    # the QKV and up projections at TP 1 and 4,096 tokens (compute-bound) each within 10% (measured: <= 6.4%)
    big = [i for i, r in enumerate(test.records) if r.params["m"] == 4096 and r.params["n"] in (12288, 22016)]
    assert len(big) >= 4 and (ape[big] < 10).all()


def test_new_entries_rest_on_the_gpus_they_measured():
    params = load_params()
    neusight_gemms = [r for r in kf.read_neusight(ROOT / "data" / "neusight-kernels") if r.kind == "gemm"]
    for key in ("h100-80gb", "a100-80gb"):
        for kind in ("gemm", "norm", "elementwise"):
            p = params.lookup(key, kind, "float16")
            assert p.source.startswith("fit: Vidur") and p.measured_on == (key,)
            assert p.basis(key) == "fitted_on_this_gpu"
            # bfloat16: the same parameters, recorded as an assumption, but for the H100's GEMMs: there the float16
            # GEMM fit pools the sweep's measured bfloat16 GEMMs (kernel_fit.sweep_entry, pooled_bfloat16_gemm)
            b = params.lookup(key, kind, "bfloat16")
            assert (b.e_compute, b.e_memory, b.exec_us) == (p.e_compute, p.e_memory, p.exec_us)
            pooled = key == "h100-80gb" and kind == "gemm"
            assert b.basis(key) == ("fitted_on_this_gpu" if pooled else "assumed")
        assert params.lookup("h200-141gb", "gemm", "float16").basis("h200-141gb") == "fitted_on_other_gpus"
        # the launch is the host-timed float32 fit's (NeuSight's calls fitted alone), never fitted on kernel
        # durations (nor taken from the H100 sweep's eager floors: kernel_fit.SWEEP_LAUNCH). On the A100 that is the
        # float32 entry; the hopper float32 entry joins NeuSight's calls and the sweep's durations
        # (kernel_fit.FREE_JOINT), and its own launch (exec apart) is not what the others take (kernel_fit.fit_groups)
        calls = [r for r in neusight_gemms if kf.family_of(r.device) == kf.family_of(key)]
        elem = params.lookup(key, "elementwise", "float32")  # e_memory 0.877243: the ampere NeuSight fit
        alone = kf.fit_with(kf.Group.of(calls), elem)
        assert params.lookup(key, "gemm", "float16").launch_us == pytest.approx(alone.launch_us, abs=1e-3)
    assert (
        params.lookup("a100-80gb", "gemm", "float16").launch_us
        == params.lookup("a100-80gb", "gemm", "float32").launch_us
    )


def test_bad_vidur_file_is_refused_with_its_line(tmp_path, capsys):
    """A Vidur file with a non-numeric shape: a one-line error naming file and line, exit code 2."""
    head = "time_stats.add.median,n_head,n_kv_head,n_embd,n_expanded_embd,use_gated_mlp,num_tokens,"
    (tmp_path / "h100-x_y.csv").write_text(head + "num_tensor_parallel_workers\n0.01,32,32,4096,11008,True,ten,1\n")
    with pytest.raises(kf.KernelParamsError, match=r"h100-x_y\.csv:2"):
        kf.read_vidur(tmp_path)
    assert kf.main(["fit", "--data", str(tmp_path), "--out", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and not (tmp_path / "t.json").exists()
