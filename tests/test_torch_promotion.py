"""Integer operands of ops whose torch result is float (issue 11), and error messages that keep their cause.

torch computes `int_tensor / 16` and `torch.log(int_tensor)` in float32; TVM's PyTorch importer kept the integer
dtype, so DeBERTa-v2's relative-position buckets (`log(abs_pos / mid)`) failed with `relax.log` of an int64 tensor,
in a message cut at 300 characters mostly by the op's repr. Oracle: torch's FlopCounterMode on the same module.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from analyzer.api import analyze
from analyzer.errors import one_line, shorten_reprs
from passes.costs import MULTIPLY_ADD_CATEGORIES

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def oracle_flops(module: torch.nn.Module, inputs: tuple) -> int:
    """FlopCounterMode on a real CPU forward (MATH attention). Parameters stop requiring grad first: FlopCounterMode's
    module tracker fails on DeBERTa's relative embeddings (a parameter fed to a submodule) under no_grad."""
    module.requires_grad_(False)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH), counter:
        module(*inputs)
    return counter.get_total_flops()


def matrix_flops(report, *, weight_only: bool) -> int:
    """2 x MACs of the conv/matmul/attention ops; with or without those whose operands are all weights."""
    return sum(
        2 * op.macs
        for op in report.analysis.ops
        if op.category in MULTIPLY_ADD_CATEGORIES and (weight_only or not op.weight_only)
    )


def deberta_v2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.DebertaV2Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        vocab_size=1000,
        max_position_embeddings=128,
        relative_attention=True,
        position_buckets=32,
        pos_att_type=["p2c", "c2p"],
    )
    return transformers.DebertaV2Model(config).eval(), (torch.ones(2, 16, dtype=torch.long),)


@pytest.mark.parametrize("route", ["module", "pt2"])
def test_deberta_v2_analyses_and_matches_flop_counter(route, tmp_path):
    module, inputs = deberta_v2()
    if route == "module":
        report = analyze(module, inputs)
    else:
        path = tmp_path / "deberta_v2.pt2"
        torch.export.save(torch.export.export(module, inputs), path)
        report = analyze(str(path))
    oracle = oracle_flops(module, inputs)
    ours = matrix_flops(report, weight_only=True)
    assert abs(ours - oracle) <= 0.001 * oracle, (ours, oracle)
    # Ops on weights alone: the relative-position embeddings (2 x position_buckets = 64 rows, after their LayerNorm,
    # all weights) through each layer's key and query projections (64 -> 64): 2 layers x 2 projections x 2 x 64 x 64
    # x 64 = 2,097,152 FLOPs, which eager torch runs on every call (counted in the totals) and a compiler computes
    # ahead of time (marked weight_only).
    assert ours - matrix_flops(report, weight_only=False) == 2 * 2 * 2 * 64 * 64 * 64
    assert sum(2 * c.macs for c in report.analysis.ops if c.folded) == 0
    # params: every parameter and buffer (the embeddings' position_ids, 1 x 128)
    expected = sum(p.numel() for p in module.parameters()) + sum(b.numel() for b in module.buffers())
    assert report.totals.params == expected


class IntLog(torch.nn.Module):
    """x * log(idx / 4 + 1) with idx an int64 input: torch divides and takes the log in float32."""

    def forward(self, x, idx):
        return x * torch.log(idx / 4 + 1) + torch.sqrt(idx)


def test_integer_operands_are_promoted_as_torch_does():
    x, idx = torch.randn(3, 8), torch.arange(24, dtype=torch.long).reshape(3, 8)
    report = analyze(IntLog(), (x, idx))
    by_op = {op.op: op for op in report.analysis.graph.ops}
    assert by_op["relax.log"].inputs[0].dtype == "float32" and by_op["relax.log"].output.dtype == "float32"
    assert by_op["relax.sqrt"].inputs[0].dtype == "float32"
    assert by_op["relax.divide"].inputs[0].dtype == "float32"
    casts = [o for o in report.analysis.graph.ops if o.op == "relax.astype"]
    assert [(c.inputs[0].dtype, c.output.dtype) for c in casts] == [("int64", "float32")] * 2  # one per float use
    assert report.inputs[1] == {"name": report.inputs[1]["name"], "shape": [3, 8], "dtype": "int64"}


def test_tvm_error_keeps_its_cause_within_one_line():
    """The real error TVM raises for `relax.log` of an int64 tensor: its Op repr alone is ~300 characters."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "int64"))
    with pytest.raises(Exception) as info, bb.function("main", [x]):  # TVM raises its own error type
        bb.emit_func_output(bb.emit(relax.op.log(x)))
    raw = str(info.value).strip().splitlines()[0]
    assert len(raw) > 300 and "span=None" in raw  # what the user used to see, cut before the dtype
    msg = one_line(info.value)
    assert msg.startswith("relax.log requires the input tensor to have float dtype") and "int64" in msg
    assert "span=None" not in msg and len(msg) <= 300


def test_shorten_reprs_keeps_short_calls_and_unnamed_long_ones():
    long = "x" * 70
    assert shorten_reprs("ir.Foo(1, 2) failed") == "ir.Foo(1, 2) failed"
    assert shorten_reprs(f"ir.Foo({long}) failed") == "ir.Foo(...) failed"
    assert shorten_reprs(f'a relax.Call(op=ir.Op(name="relax.add", {long}), {long}) b') == "a relax.add b"
    assert shorten_reprs("unbalanced ir.Foo(" + long) == "unbalanced ir.Foo(" + long


class SinePositions(torch.nn.Module):
    """DETR's sine position embedding core, `temperature ** (2 * (i // 2) / 32)` with i an int64 `arange` (TVM's
    importer made the 2 an int32 constant: int64 // int32 failed), a float `trunc` division by a number, a linear."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(32, 16)

    def forward(self, x):  # x: (4, 32) float32
        dim_t = 10000 ** (2 * torch.div(torch.arange(32), 2, rounding_mode="floor") / 32)
        return self.proj(torch.div(x, 2, rounding_mode="trunc") / dim_t)


@pytest.mark.parametrize("route", ["module", "pt2"])
def test_int64_floor_divide_by_a_number_imports(route, tmp_path):
    module, inputs = SinePositions().eval(), (torch.randn(4, 32),)
    if route == "module":
        report = analyze(module, inputs)
    else:
        path = tmp_path / "sine.pt2"
        torch.export.save(torch.export.export(module, inputs), path)
        report = analyze(str(path))
    ops = report.analysis.graph.ops
    floor = [o for o in ops if o.op == "relax.floor_divide"]
    assert [(o.inputs[0].dtype, o.inputs[1].dtype, o.output.dtype, o.output.shape) for o in floor] == [
        ("int64", "int64", "int64", (32,))
    ]
    assert [o.output.dtype for o in ops if o.op == "relax.trunc"] == ["float32"]  # x // 2 rounded toward zero
    assert matrix_flops(report, weight_only=True) == oracle_flops(module, inputs) == 2 * 4 * 32 * 16  # the linear
