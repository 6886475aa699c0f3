"""PT2E-quantized `.pt2` files (torch's `quantized_decomposed` quantize/dequantize ops around float convolutions and
linear layers), against hand counts and torch's FlopCounterMode on the float model.

The pinned torch (2.13, CPU) no longer ships the PT2E quantizer flow: `from torch.ao.quantization.quantize_pt2e
import prepare_pt2e, convert_pt2e` raises "ModuleNotFoundError: No module named
'torch.ao.quantization.quantize_pt2e'" (and `torch.ao.quantization.quantizer.xnnpack_quantizer`: "No module named
'torch.ao.quantization.quantizer'"); it moved to torchao, which is not installed. torch still defines the ops
`convert_pt2e` writes (torch/ao/quantization/fx/_decomposed.py). `QuantCNN` below writes the same program by hand:
for XNNPACKQuantizer's static config, `convert_pt2e` replaces each observer by `quantize_per_tensor ->
dequantize_per_tensor` on activations (int8, asymmetric) and stores each conv/linear weight as an int8 tensor read
through `dequantize_per_channel` (axis 0, symmetric, -127..127), the bias float32. It is exported with
`torch.export.export` and saved with `torch.export.save`, as a user's converted model would be.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from analyzer import analyze
from passes.costs import compute_dtype

# conv1 3->8 k3 p1 on 8x8: 8x8x8 = 512 outputs x 27 = 13,824 MACs; conv2 8->16 k3 s2 p1: 16x4x4 = 256 outputs x 72 =
# 18,432; linear 256->10: 2,560                                                              total 34,816
MACS = 512 * 27 + 256 * 72 + 10 * 256
WEIGHTS, BIASES = 8 * 27 + 16 * 72 + 10 * 256, 8 + 16 + 10  # 3,928 int8 weights; 34 float32 biases
SCALES = 8 + 16 + 10  # one float32 scale per output channel (the int64 zero points are all 0 and unused)


class FloatCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        return self.fc(x.flatten(1))


class QuantCNN(nn.Module):
    """FloatCNN as `convert_pt2e` writes it (see the module docstring)."""

    def __init__(self, f: FloatCNN):
        super().__init__()
        for name in ("c1", "c2", "fc"):
            m = getattr(f, name)
            w = m.weight.detach()
            scale = w.abs().flatten(1).amax(1) / 127
            q = torch.round(w / scale.view(-1, *[1] * (w.dim() - 1))).clamp(-127, 127).to(torch.int8)
            self.register_buffer(f"{name}_w", q)
            self.register_buffer(f"{name}_scale", scale.float())
            self.register_buffer(f"{name}_zp", torch.zeros(scale.shape[0], dtype=torch.int64))
            self.register_parameter(f"{name}_b", nn.Parameter(m.bias.detach().clone()))

    def _act(self, x, scale, zp):
        qd = torch.ops.quantized_decomposed
        x = qd.quantize_per_tensor(x, scale, zp, -128, 127, torch.int8)
        return qd.dequantize_per_tensor(x, scale, zp, -128, 127, torch.int8)

    def _weight(self, name):
        w, s, z = (getattr(self, f"{name}_{k}") for k in ("w", "scale", "zp"))
        return torch.ops.quantized_decomposed.dequantize_per_channel(w, s, z, 0, -127, 127, torch.int8)

    def forward(self, x):
        f = nn.functional
        x = self._act(x, 0.02, -3)
        x = self._act(torch.relu(f.conv2d(x, self._weight("c1"), self.c1_b, padding=1)), 0.01, -128)
        x = self._act(torch.relu(f.conv2d(x, self._weight("c2"), self.c2_b, stride=2, padding=1)), 0.01, -128)
        return f.linear(x.flatten(1), self._weight("fc"), self.fc_b)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    pytest.importorskip("torch.ao.quantization.fx._decomposed")  # registers torch.ops.quantized_decomposed here
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("pt2e")
    f = FloatCNN().eval()
    q = QuantCNN(f).eval()
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        assert (f(x) - q(x)).abs().max() < 0.05  # the quantized model is the float one, to int8 precision
        with FlopCounterMode(display=False) as counter:
            f(x)
    paths = {"float": root / "float.pt2", "int8": root / "int8.pt2"}
    torch.export.save(torch.export.export(f, (x,)), paths["float"])
    ep = torch.export.export(q, (x,))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {
        "quantized_decomposed.quantize_per_tensor.default",
        "quantized_decomposed.dequantize_per_tensor.default",
        "quantized_decomposed.dequantize_per_channel.default",
    } <= targets
    torch.export.save(ep, paths["int8"])
    return paths, counter.get_total_flops()


def test_int8_pt2_macs_params_and_bytes(files):
    paths, oracle_flops = files
    assert oracle_flops == 2 * MACS  # FlopCounterMode on the float model: 2 FLOPs a MAC
    f = analyze(paths["float"]).totals
    r = analyze(paths["int8"])
    t = r.totals
    assert not t.unsupported
    assert t.macs == f.macs == MACS
    assert f.macs_by_dtype == {"float32": MACS} and t.macs_by_dtype == {"int8": MACS}
    assert f.params == WEIGHTS + BIASES
    # int8 weights at 1 byte; float32 biases and per-channel scales at 4
    assert t.params == WEIGHTS + BIASES + SCALES == 3_996
    assert t.param_bytes == WEIGHTS + (BIASES + SCALES) * 4 == 4_200
    ops = [c for c in r.analysis.ops if c.macs and not c.folded]
    assert sorted(c.op for c in ops) == ["relax.matmul", "relax.nn.conv2d", "relax.nn.conv2d"]
    # the rescale factors (input scale x weight scales) are constants, as an int8 kernel precomputes them: no op
    # computes on weights alone per call
    assert not [c for c in r.analysis.ops if c.weight_only and not c.folded]
    assert not [w for w in r.warnings if "compute on weights alone" in w]
    for c in ops:
        a, w = c.inputs[0], c.inputs[1]
        assert a.dtype == w.dtype == "int8" and c.output.dtype == "int32"
        assert a.nbytes == a.numel and w.nbytes == w.numel
        assert c.flops == 2 * c.macs and compute_dtype(c) == "int8"


def test_int8_pt2_quantize_dequantize_ops_are_counted(files):
    """Three activation quantizes (the input, each ReLU's output) at 3 FLOPs an element; each integer op's int32
    result rescaled by one dequantize at 2 FLOPs an element; the activations' dequantizes are absorbed."""
    paths, _ = files
    r = analyze(paths["int8"])
    quant = [c for c in r.analysis.ops if c.op == "relax.quantize"]
    # 1x3x8x8 = 192, 1x8x8x8 = 512, 1x16x4x4 = 256 elements
    assert [c.flops for c in quant] == [192 * 3, 512 * 3, 256 * 3]
    assert all(c.output.dtype == "int8" for c in quant)
    deq = [c for c in r.analysis.ops if c.op == "relax.dequantize"]
    assert [(c.inputs[0].dtype, c.flops) for c in deq] == [("int32", 512 * 2), ("int32", 256 * 2), ("int32", 10 * 2)]


def test_int8_module_and_exported_graph_module_routes(files):
    """The same program through the nn.Module route, and as the GraphModule `ExportedProgram.module()` gives (what
    `convert_pt2e` returns; its `.eval()` raises NotImplementedError): the `.pt2`'s numbers."""
    torch.manual_seed(0)
    q = QuantCNN(FloatCNN().eval()).eval()
    x = torch.randn(1, 3, 8, 8)
    gm = torch.export.export(q, (x,)).module()
    with pytest.raises(NotImplementedError):
        gm.eval()
    for model in (q, gm):
        t = analyze(model, (x,)).totals
        assert t.macs_by_dtype == {"int8": MACS}
    t = analyze(q, (x,)).totals
    assert (t.params, t.param_bytes) == (WEIGHTS + BIASES + SCALES, WEIGHTS + (BIASES + SCALES) * 4)
