"""Automatic mixed precision (`--dtype amp-float16` / `amp-bfloat16`): the model as it is, under `torch.autocast`.

Checked two ways:
  * by hand, with the arithmetic beside each literal (CUDA autocast's policy: matmul, convolution and attention in
    16 bits, softmax and layer norm in float32, a `_to_copy` kernel for every cast);
  * against a dispatch trace of eager PyTorch under `torch.autocast("cpu", dtype=torch.bfloat16)` (this machine has
    no GPU). CPU autocast's op lists differ from CUDA's: both run linear layers and convolutions in 16 bits (the
    oracle for those models), but CPU autocast keeps softmax and layer norm in the 16-bit dtype where CUDA computes
    them in float32 (`test_float32_ops_cast_up`: the CUDA view has exactly those casts more than the CPU trace).
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from click.testing import CliRunner
from kernel_trace import tracing
from torch import nn

from analyzer import analyze
from analyzer.cli import cli
from passes.graph import with_autocast


def _cpu_autocast_trace(module: nn.Module, inputs: tuple):
    """Every kernel of one eager forward under CPU bfloat16 autocast (one autocast region: one weight cast each)."""
    module.eval()
    with tracing() as (trace, sdpa), torch.autocast("cpu", dtype=torch.bfloat16):
        sdpa.recorder.mark(list(inputs))
        module(*inputs)
    return trace


def _casts(kernels):
    return [k for k in kernels if k.op == "relax.astype"]


def test_linear_layer_by_hand():
    """Linear(1024, 1024) at batch 8: autocast casts the input, the weight and the bias (addmm's three floating
    arguments), then one 16-bit GEMM."""
    torch.manual_seed(0)
    module, x = nn.Linear(1024, 1024).eval(), torch.randn(8, 1024)
    kernels = analyze(module, (x,), dtype="amp-float16").analysis.kernels
    assert [(k.kind, k.dtype) for k in kernels] == [("elementwise", "float16")] * 3 + [("gemm", "float16")]
    assert sorted((k.bytes_read, k.bytes_written) for k in _casts(kernels)) == [
        (1024 * 4, 1024 * 2),  # the bias: 4 KiB read, 2 KiB written
        (8 * 1024 * 4, 8 * 1024 * 2),  # the input: 32 KiB -> 16 KiB
        (1024 * 1024 * 4, 1024 * 1024 * 2),  # the weight: 4 MiB -> 2 MiB, every forward
    ]
    gemm = kernels[-1]
    # reads x (16 KiB), W (2 MiB), b (2 KiB) in float16; writes 8 x 1024 x 2 = 16 KiB; 2 x 8 x 1024 x 1024 + 8 x 1024
    assert (gemm.bytes_read, gemm.bytes_written) == (16_384 + 2_097_152 + 2_048, 16_384)
    assert gemm.flops == 2 * 8 * 1024 * 1024 + 8 * 1024
    # the same kernels and bytes as eager PyTorch under CPU bfloat16 autocast (bf16 is 2 bytes too)
    trace = _cpu_autocast_trace(module, (x,))
    assert Counter(k.op for k in trace.kernels) == {"aten._to_copy.default": 3, "aten.addmm.default": 1}
    assert sorted((k.bytes_read, k.bytes_written) for k in kernels) == sorted(
        (k.bytes_in, k.bytes_out) for k in trace.kernels
    )
    # without autocast: one float32 GEMM
    assert [k.kind for k in analyze(module, (x,)).analysis.kernels] == ["gemm"]


class ConvMLP(nn.Module):
    """Convolution, batch norm, ReLU, pooling, two linear layers with GELU, and the add of a float32 input."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)  # on no autocast list: bfloat16 in, float32 statistics, bfloat16 out
        self.pool = nn.AdaptiveAvgPool2d(4)
        self.fc1 = nn.Linear(128, 64)
        self.fc2 = nn.Linear(64, 128)

    def forward(self, x, y):
        h = self.pool(torch.relu(self.bn(self.conv(x)))).flatten(1)  # (2, 8 * 4 * 4), bfloat16 from the convolution on
        return y + self.fc2(nn.functional.gelu(self.fc1(h)))


def test_conv_and_linear_layers_match_cpu_autocast_trace():
    torch.manual_seed(0)
    module, inputs = ConvMLP().eval(), (torch.randn(2, 3, 16, 16), torch.randn(2, 128))
    kernels = analyze(module, inputs, dtype="amp-bfloat16").analysis.kernels
    trace = _cpu_autocast_trace(module, inputs)
    # casts: x, the conv's weight and bias, fc1's and fc2's weights and biases (their inputs are bfloat16 already)
    assert len(_casts(kernels)) == Counter(k.op for k in trace.kernels)["aten._to_copy.default"] == 7
    assert len(kernels) == trace.count == 7 + 9  # + conv, its bias add, batch norm, relu, pool, fc1, gelu, fc2, add
    assert sorted(k.bytes for k in _casts(kernels)) == sorted(
        k.bytes for k in trace.kernels if k.op == "aten._to_copy.default"
    )
    assert abs(sum(k.bytes for k in kernels) / trace.bytes - 1) < 0.01
    # the last add: bfloat16 + float32 is float32 (type promotion inside one kernel, no cast):
    # reads 2 x 128 x 2 + 2 x 128 x 4 = 1,536 B, writes 2 x 128 x 4 = 1,024 B
    assert (kernels[-1].kind, kernels[-1].dtype, kernels[-1].bytes_read, kernels[-1].bytes_written) == (
        "elementwise",
        "float32",
        1_536,
        1_024,
    )
    assert (trace.kernels[-1].bytes_in, trace.kernels[-1].bytes_out) == (1_536, 1_024)


class SoftmaxNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 256)
        self.norm = nn.LayerNorm(256)
        self.fc2 = nn.Linear(256, 256)

    def forward(self, x):
        return self.fc2(self.norm(torch.softmax(self.fc1(x), dim=-1)))


def test_float32_ops_cast_up():
    """CUDA autocast runs softmax and layer norm in float32: fc1's float16 output is cast up (a kernel), layer norm
    reads float32 as it is, and fc2 casts it back down."""
    torch.manual_seed(0)
    module, x = SoftmaxNorm().eval(), torch.randn(4, 256)
    kernels = analyze(module, (x,), dtype="amp-float16").analysis.kernels
    act = 4 * 256  # elements of one activation
    assert [(k.kind, k.dtype, k.bytes_read, k.bytes_written) for k in kernels] == [
        ("elementwise", "float16", 256 * 4, 256 * 2),  # fc1.bias
        ("elementwise", "float16", act * 4, act * 2),  # x
        ("elementwise", "float16", 256 * 256 * 4, 256 * 256 * 2),  # fc1.weight
        ("gemm", "float16", act * 2 + 256 * 256 * 2 + 256 * 2, act * 2),
        ("elementwise", "float32", act * 2, act * 4),  # fc1's output cast up for softmax
        ("softmax", "float32", act * 4, act * 4),
        ("norm", "float32", act * 4 + 2 * 256 * 4, act * 4),  # layer norm in float32, its weight and bias
        ("elementwise", "float16", 256 * 4, 256 * 2),  # fc2.bias
        ("elementwise", "float16", act * 4, act * 2),  # the normalised activation cast down
        ("elementwise", "float16", 256 * 256 * 4, 256 * 256 * 2),  # fc2.weight
        ("gemm", "float16", act * 2 + 256 * 256 * 2 + 256 * 2, act * 2),
    ]
    # CPU autocast keeps softmax and layer norm in bfloat16: the same kernels but those two casts
    trace = _cpu_autocast_trace(module, (x,))
    assert len(kernels) == trace.count + 2


def test_a_weight_used_twice_is_cast_once():
    """Autocast caches the casts of parameters for the autocast region: a tied weight is cast once per forward."""

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 64, bias=False)

        def forward(self, x):
            return self.fc(self.fc(x))

    torch.manual_seed(0)
    module, x = Tied().eval(), torch.randn(2, 64)
    kernels = analyze(module, (x,), dtype="amp-float16").analysis.kernels
    # the input, the weight (once), two GEMMs; the second GEMM's input is already float16
    assert [k.kind for k in kernels] == ["elementwise", "elementwise", "gemm", "gemm"]
    assert len(_cpu_autocast_trace(module, (x,)).kernels) == 4


def test_attention_runs_flash_in_float16():
    """SDPA is on CUDA autocast's lower-precision list: float16 Q, K, V without a mask run the flash backend."""

    class Sdpa(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(64, 192)

        def forward(self, x):
            q, k, v = self.qkv(x).view(2, 16, 3, 4, 16).permute(2, 0, 3, 1, 4).unbind(0)
            return nn.functional.scaled_dot_product_attention(q, k, v)

    torch.manual_seed(0)
    x = torch.randn(2, 16, 64)
    fp32 = [k for k in analyze(Sdpa().eval(), (x,)).analysis.kernels if k.kind == "attention"]
    amp = [k for k in analyze(Sdpa().eval(), (x,), dtype="amp-float16").analysis.kernels if k.kind == "attention"]
    assert [(k.dtype, k.params["backend"]) for k in fp32] == [("float32", "efficient")]
    assert [(k.dtype, k.params["backend"]) for k in amp] == [("float16", "flash")]
    # q, k, v: 3 x 2 x 4 x 16 x 16 x 2 B = 12,288; writes the output (4,096 B) and the float32 logsumexp (2x4x16x4)
    assert (amp[0].bytes_read, amp[0].bytes_written) == (12_288, 4_096 + 512)


def test_autocast_turns_the_transformer_fast_paths_off():
    """nn.TransformerEncoderLayer and nn.MultiheadAttention refuse their fast paths when autocast is enabled
    (torch/nn/modules/transformer.py, activation.py: "autocast is enabled"): the exported Python path is what
    runs, with its copies and a separate ReLU, plus autocast's casts."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    module, x = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval(), torch.randn(2, 32, 64)
    fast = analyze(module, (x,)).analysis.kernels
    amp = analyze(module, (x,), dtype="amp-float16").analysis.kernels
    assert [k.kind for k in fast] == ["gemm", "attention", "gemm", "elementwise", "norm", "gemm", "gemm"] + [
        "elementwise",
        "norm",
    ]
    no_casts = [k for k in amp if k.op != "relax.astype"]
    assert "relax.nn.relu" in [k.op for k in no_casts]  # not fused into the GEMM: no `_addmm_activation`
    # the Python path: 9 kernels + the copies of the transposed input, split and heads, the in-projection's bias add
    # (`linear` on a non-contiguous input adds it apart), relu
    assert len(no_casts) == 14


def test_amp_is_not_half():
    """`--dtype float16` is `model.half()` (weights in float16, no casts); amp keeps float32 weights."""
    torch.manual_seed(0)
    module, x = nn.Linear(1024, 1024).eval(), torch.randn(8, 1024)
    half = analyze(module, (x,), dtype="float16")
    amp = analyze(module, (x,), dtype="amp-float16")
    assert [k.kind for k in half.analysis.kernels] == ["gemm"]
    assert half.totals.param_bytes == (1024 * 1024 + 1024) * 2
    assert amp.totals.param_bytes == (1024 * 1024 + 1024) * 4


def test_cli_takes_amp(tmp_path):
    path = tmp_path / "conv.onnx"
    torch.manual_seed(0)
    torch.onnx.export(nn.Conv2d(3, 4, 3, padding=1).eval(), (torch.randn(2, 3, 8, 8),), str(path), dynamo=False)
    res = CliRunner().invoke(cli, ["analyze", str(path), "--dtype", "amp-float16", "--format", "json"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["analyze", str(path), "--dtype", "amp-float8"])
    assert res.exit_code == 2 and "amp-float16" in res.output


def test_with_autocast_refuses_other_dtypes():
    from passes.graph import OpGraph

    with pytest.raises(ValueError):
        with_autocast(OpGraph(ops=[], sources=[], outputs=[]), "float32")


def test_amp_report_validates_against_the_schema():
    """The report of an autocast analysis (inserted cast ops, a sweep at two batches) is a valid preflight.report/1."""
    import json

    import jsonschema

    from analyzer import report
    from analyzer.render import SCHEMA_FILE

    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64), nn.Linear(64, 8)).eval()
    rep = report(module, (torch.randn(4, 64),), devices=("h100-80gb",), batches=[1, 4], dtype="amp-float16")
    jsonschema.validate(rep.to_json(), json.loads(SCHEMA_FILE.read_text()))
    # per linear layer: its bias, input and weight cast, then one float16 GEMM; layer norm in float32 between them
    kinds = [(k.kind, k.dtype) for k in rep.analysis.kernels]
    gemm = [("elementwise", "float16")] * 3 + [("gemm", "float16")]
    assert kinds == [*gemm, ("elementwise", "float32"), ("norm", "float32"), *gemm]
