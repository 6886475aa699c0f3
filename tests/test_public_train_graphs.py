"""The graph file (`predictor.public_train`, `analyzer.public_dataset`) holds every input of the kernel model: the
time training computes from the packed arrays is the time `preflight predict` computes from the live analysis."""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pytest

from predictor import public_train as pt
from predictor.devices import get_device
from predictor.kernel_model import KernelArrays, kernel_latency

#: (zoo spec, batch, analysis dtype, the per-kernel flags its kernel view must hold). nnU-Net at 32 x 32 (two levels):
#: four transposed convolutions; in float16, where the hopper entry's `e_transposed` is 0.66 (float32's is 1).
#: ShuffleNet v2 at 64 px: depthwise convolutions (groups > 1), the channel shuffle's strided copies
#: (transpose + contiguous) and the classifier's nn.Linear (a GEMM with a fused bias); hopper float32 entries:
#: e_grouped 0.42, e_strided 0.65, e_bias 0.94.
CASES = [
    ("nnunet?height=32&width=32", 1, "amp-float16", ("transposed",)),
    ("shufflenet_v2_x0_5?resolution=64", 2, "float32", ("grouped", "strided", "bias")),
    ("poolformer_s12?resolution=64", 2, "float32", ("rows", "row_numel")),  # GroupNorm(1, C): batch rows
]
FLAGS = ("inside", "bias", "transposed", "grouped", "strided")


def _drop(src, dst, columns) -> None:
    """Copy the packed graph file `src` to `dst` without `columns` (and their offsets): a file written before them."""
    with np.load(src, allow_pickle=False) as z:
        kept = {n: z[n] for n in z.files if n.removesuffix("__ptr") not in columns}
    np.savez_compressed(dst, **kept)


def test_graph_file_holds_every_kernel_array_field():
    """A field added to KernelArrays (an input of the kernel model) must get its column in the graph file."""
    fields = {f"k_{f.name}" for f in dataclasses.fields(KernelArrays)}
    assert fields <= set(pt._KERNEL)
    assert set(pt._KERNEL_DEFAULTS) <= set(pt._KERNEL)


def test_committed_graph_file_is_complete():
    assert pt.missing_kernel_columns(pt.GRAPHS_PATH) == []


@pytest.mark.parametrize(("spec", "batch", "dtype", "flags"), CASES, ids=[c[0].split("?")[0] for c in CASES])
def test_packed_kernel_times_equal_the_live_kernel_model(tmp_path, monkeypatch, spec, batch, dtype, flags):
    """featurise -> pack -> load -> `kernel_times` gives the kernel model's time of the live analysis (kernel by
    kernel, to 1e-9) on an H100 and an A100 (TF32 and FP32 matmuls); a file without the flag columns (written before
    them, read back with `_KERNEL_DEFAULTS`) does not on the H100, whose entries carry the factors."""
    import analyzer.api
    from analyzer.public_dataset import featurize_public

    reports = []
    analyze = analyzer.api.analyze

    def keep(*args, **kwargs):
        reports.append(analyze(*args, **kwargs))
        return reports[-1]

    monkeypatch.setattr(analyzer.api, "analyze", keep)
    arrays = featurize_public(spec, batch, dtype)
    (report,) = reports
    live_kernels = report.analysis.kernels
    for f in flags:  # the case exercises what it is for
        assert any(arrays[f"k_{f}"]), f
    gid = pt.graph_id(spec, batch, dtype)
    config = {"config": np.array(json.dumps([spec, batch, dtype]))}
    pt.pack_graphs({gid: arrays | config}, tmp_path / "new.npz")
    old_columns = ("k_count", "k_bias", "k_transposed", "k_grouped", "k_strided", "k_rows", "k_row_numel")
    _drop(tmp_path / "new.npz", tmp_path / "old.npz", old_columns)
    assert pt.missing_kernel_columns(tmp_path / "new.npz") == []
    assert pt.missing_kernel_columns(tmp_path / "old.npz") == list(old_columns)
    g_new = pt.load_graphs(tmp_path / "new.npz")[gid]
    g_old = pt.load_graphs(tmp_path / "old.npz")[gid]
    for device_key, tf32 in (("h100-80gb", False), ("a100-80gb", False), ("a100-80gb", True)):
        device = get_device(device_key)
        live = kernel_latency(live_kernels, device, tf32_matmul=tf32)
        packed = pt.kernel_times(pt.graph_kernel_arrays(g_new), device, tf32)
        for name in ("eager_s", "seconds", "bound_s"):
            np.testing.assert_allclose(getattr(packed, name), getattr(live, name), rtol=1e-9, atol=0)
        stale = pt.kernel_times(pt.graph_kernel_arrays(g_old), device, tf32)
        if device_key == "h100-80gb":  # the hopper factors (< 1) make each flagged kernel slower: the skew
            assert (stale.seconds <= live.seconds).all() and (stale.seconds / live.seconds).min() < 0.99


def test_old_graph_file_reads_with_defaults(tmp_path):
    """A file written before the flag and count columns loads (backward compatible) with one launch per kernel and
    no flag set: what the kernel model then costed."""
    k = 3
    arrays = {
        "x": np.zeros((2, 4), np.float32),
        "edge_index": np.array([[0], [1]], np.int64),
        "static_names": np.array(["a"]),
        "static": np.array([1.0]),
        **{n: np.zeros(2) for n in ("op_flops", "op_bytes")},
        "op_category": np.array(["matmul", "conv"]),
        "op_dtype": np.array(["float32", "float32"]),
        "op_folded": np.zeros(2, bool),
        "k_kind": np.array(["gemm", "conv", "copy"]),
        "k_dtype": np.array(["float32"] * k),
        **{n: np.ones(k) for n in ("k_flops", "k_nbytes", "k_b", "k_m", "k_n", "k_k")},
        "k_op_ptr": np.array([0, 1, 2, 2]),
        "k_op_idx": np.array([0, 1]),
        "input_bytes": np.array(8),
        "feature_version": np.array("v"),
        "config": np.array(json.dumps(["s", 1, "float32"])),
    }
    pt.pack_graphs({"g": arrays}, tmp_path / "g.npz")
    _drop(tmp_path / "g.npz", tmp_path / "old.npz", [f"k_{f}" for f in ("count", *FLAGS)])
    assert pt.missing_kernel_columns(tmp_path / "old.npz") == [f"k_{f}" for f in ("count", *FLAGS)]
    back = pt.unpack_graphs(tmp_path / "old.npz")["g"]
    assert back["k_count"].tolist() == [1.0, 1.0, 1.0]
    for f in FLAGS:
        assert back[f"k_{f}"].dtype == bool and back[f"k_{f}"].tolist() == [False] * k


def _example(family: str, device: str, gid: str, target: float) -> pt.Example:
    row = pt.TrainRow("s", family, "spec", 1, "float32", "fp32", device, 1.0, "A")
    item = pt.Item(np.zeros((1, 1), np.float32), np.zeros((2, 0), np.int64), np.zeros(1, np.float32), target, 1.0, 1.0)
    return pt.Example(row, gid, None, {"residual": item})


def test_train_items_weigh_every_family_and_gpu_alike():
    """Cells (family, GPU): (a, A100) 2 items (g1 twice on one device: merged into one, mean target; g2), (a, H100)
    1 item, (b, A100) 1 item: n = 4 items, 3 cells; weights 4 / (3 x 2) = 2/3 for the two-item cell, 4 / 3 else."""
    exs = [
        _example("a", "a100-80gb", "g1", 0.1),
        _example("a", "a100-80gb", "g1", 0.3),  # the same measurement published twice: one item, target 0.2
        _example("a", "a100-40gb:1g.5gb", "g2", 0.0),  # a MIG slice is an A100
        _example("a", "h100-80gb", "g3", 0.0),
        _example("b", "a100-80gb", "g4", 0.0),
    ]
    items = pt.train_items(exs, "residual")
    assert [it.target for it in items] == pytest.approx([0.2, 0.0, 0.0, 0.0])
    assert [it.weight for it in items] == pytest.approx([2 / 3, 2 / 3, 4 / 3, 4 / 3])


def test_weighted_pinball_by_hand():
    """Quantiles (0.05, 0.5, 0.95); row 0: prediction 0 for target 1 -> (0.05 + 0.5 + 0.95) / 3 = 0.5; row 1:
    prediction 0 for target -2 -> 2 x (0.95 + 0.5 + 0.05) / 3 = 1.0; weights 3 and 1: (3 x 0.5 + 1.0) / 4 = 0.625."""
    import torch

    pred = torch.zeros(2, 3, 3)
    y = torch.tensor([[1.0, float("nan"), float("nan")], [-2.0, float("nan"), float("nan")]])
    assert float(pt._weighted_pinball(pred, y, torch.tensor([3.0, 1.0]))) == pytest.approx(0.625)


#: Configurations of the committed file, one per kind of change that has left it stale: an encoder's attention
#: (the liveness of its scores: `peak_activation_bytes` was stale in 112 of 384 graphs after the liveness learnt that
#: the fused softmax writes over the scores) and FastPitch's Conv1d on a transposed input (a copy per convolution
#: since 2026-11-29: 10 kernels more in the smallest variant); each featurises in 0.2-1.3 s.
COMMITTED = [("distilbert_base?seq_len=128", 1, "float32"), ("fastpitch_v1_1", 1, "float32")]


@functools.cache
def _committed() -> dict:
    """The committed graph file, unpacked once for the cases above."""
    return pt.unpack_graphs(pt.GRAPHS_PATH)


@pytest.mark.parametrize(("spec", "batch", "dtype"), COMMITTED, ids=[c[0].split("?")[0] for c in COMMITTED])
def test_committed_graphs_are_todays_analysis(spec, batch, dtype):
    """Every array the committed graph file holds for these configurations (node features, edges, static features,
    the roofline's per-op arrays, the kernel view) equals what today's analyzer featurises: the GraphSAGE trains on
    the file and predicts on the live analysis, so a file the analyzer has moved away from is a skew between the
    two. Rebuild with `python -m analyzer.public_dataset --no-reuse` (then `python -m predictor.public_train
    evaluate`) when this fails."""
    from analyzer.public_dataset import featurize_public

    packed = _committed()[pt.graph_id(spec, batch, dtype)]
    live = featurize_public(spec, batch, dtype)
    assert set(live) <= set(packed)
    stale = [k for k in live if not np.array_equal(np.asarray(live[k]), np.asarray(packed[k]))]
    assert not stale, f"{spec} batch {batch} {dtype}: {stale} differ from today's analysis"
