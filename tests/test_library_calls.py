"""Kernels launched inside one library call (cuDNN's recurrent layers): one host dispatch per call, not per step.

Eager PyTorch runs an `nn.LSTM` forward as one `_cudnn_rnn` (every layer, direction and step: cuDNN launches the
kernels from C++ without a dispatch of their own). The kernel view marks those kernels (`Kernel.call`) and the
kernel model charges the call's first kernel the eager rule and every other one its execution plus
`DEVICE_LAUNCH_US` (docs/kernel-model.md, "Kernels inside one library call").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from passes.analysis import Launches
from passes.kernels import Kernel
from predictor.devices import get_device
from predictor.kernel_model import (
    DEVICE_LAUNCH_US,
    KernelParams,
    ParamTable,
    inside_calls,
    kernel_arrays,
    kernel_latency,
    kernel_latency_arrays,
)


def test_inside_calls_runs():
    # a run of one call pays one dispatch at its first kernel; the same call after another one is a new run
    assert inside_calls([None, "a", "a", "a", None, "a", "b", "b", "a"]) == [
        False, False, True, True, False, False, False, True, False,
    ]  # fmt: skip


def test_hand_computed_latency_inside_a_call():
    """Kernels with no FLOPs and no bytes: each costs its fixed terms only, so the sum is plain arithmetic."""
    dev = get_device("h100-80gb")
    table = ParamTable(
        {
            ("h100-80gb", "gemm", "*"): KernelParams(1.0, 1.0, launch_us=20.0, exec_us=2.0, source="assumed: test"),
            ("h100-80gb", "elementwise", "*"): KernelParams(1.0, 1.0, launch_us=10.0, source="assumed: test"),
        },
        {},
    )

    def k(i, kind, call):
        return Kernel(i, kind, f"k{i}", (i,), 0, 0, 0, "float32", {}, call)

    kernels = [
        k(0, "gemm", "c"),  # first of call c: max(exec 2, launch 20) = 20 us
        k(1, "gemm", "c"),  # inside c: exec 2 + gap 1 = 3 us
        k(2, "elementwise", "c"),  # inside c: exec 0 + gap 1 = 1 us
        k(3, "elementwise", None),  # eager: max(0, 10) = 10 us
        k(4, "gemm", "d"),  # first of call d: 20 us
        Launches(k(5, "gemm", "d"), 4),  # 4 launches inside d: 4 x (2 + 1) = 12 us
        k(6, "elementwise", "c"),  # c again after d: a new run, its first kernel: 10 us
    ]
    assert DEVICE_LAUNCH_US == 1.0
    times = kernel_latency(kernels, dev, params=table)
    assert times.eager_ms == pytest.approx((20 + 3 + 1 + 10 + 20 + 12 + 10) * 1e-3)  # 76 us
    assert times.floor_ms == pytest.approx((20 + 10 + 20 + 10) * 1e-3)  # only the host-dispatched kernels floor
    # the same kernels dispatched one by one: 20 + 20 + 10 + 10 + 20 + 4 x 20 + 10 = 170 us
    eager = [replace(x, call=None) if isinstance(x, Kernel) else Launches(replace(x.kernel, call=None), x.count)
             for x in kernels]  # fmt: skip
    assert kernel_latency(eager, dev, params=table).eager_ms == pytest.approx(170e-3)


# ---- the kernel view of real modules (TVM import) ------------------------------------------------------------


def _small_lstm():
    torch = pytest.importorskip("torch")
    from torch import nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(8, 16, num_layers=2, bidirectional=True)
            self.head = nn.Linear(32, 4)

        def forward(self, x):
            return self.head(self.rnn(x)[0])

    torch.manual_seed(0)
    return M().eval(), (torch.randn(3, 2, 8),)  # T = 3 steps, batch 2


def _kernels(source, inputs=None):
    from analyzer import analyze

    report = analyze(source, example_inputs=inputs) if inputs is not None else analyze(source)
    return report.analysis.launched_kernels


@pytest.fixture(scope="module")
def lstm_kernels():
    model, x = _small_lstm()
    return _kernels(model, x)


def test_small_lstm_is_one_call(lstm_kernels):
    ks = lstm_kernels
    # per layer and direction (T = 3, zero initial state): the input GEMM over all steps, T gate kernels, T
    # recurrent GEMMs (cuDNN runs the first step's on the zero state too): 7; cuDNN writes the step outputs in place
    # and reads the reverse direction in reverse (the importer's stacks, its flip and the concat of both directions:
    # no kernel): 14 a layer, 28 for 2 layers; then the head's GEMM (bias fused): 29 kernels
    assert len(ks) == 29
    assert {k.call for k in ks[:28]} == {"aten.lstm.input:lstm"} and ks[28].call is None
    assert Counter(k.kind for k in ks[:28]) == {"gemm": 16, "elementwise": 12}  # (4 x (1 + 3) GEMMs, 4 x 3 gates)
    assert sum(k.kind == "gemm" and k.params["m"] == 6 and k.params["n"] == 64 for k in ks) == 4  # input GEMMs
    # host dispatches: one for the whole nn.LSTM (one `_cudnn_rnn`, not 2 layers x 2 directions, not x 3 steps)
    # and one for the head
    inside = kernel_arrays(ks).inside
    assert int((~inside).sum()) == 2 and int(inside.sum()) == 27


def test_small_lstm_prediction_by_hand(lstm_kernels):
    """The prediction = the call's first kernel and the head at the eager rule + every other LSTM kernel at its
    execution + 1 us, with each kernel's terms from the same kernels costed one by one."""
    ks = lstm_kernels
    dev = get_device("a100-80gb")
    one_by_one = kernel_latency([replace(k, call=None) for k in ks], dev)
    execution = [max(c, m) for c, m in zip(one_by_one.compute_s, one_by_one.memory_s, strict=True)]
    expected = one_by_one.eager_s[0] + one_by_one.eager_s[28] + sum(e + 1e-6 for e in execution[1:28])
    got = kernel_latency(ks, dev)
    assert got.eager_ms == pytest.approx(expected * 1e3, rel=1e-12)
    # what the change removes: 27 launch floors (16.6 to 23.1 us on ampere) above 27 x 1 us of gaps
    assert one_by_one.eager_ms - got.eager_ms > 27 * (16.0 - 1.0) * 1e-3


def test_python_loop_is_not_a_call():
    """The same recurrence written as a Python loop runs op by op in eager PyTorch: every kernel dispatched."""
    torch = pytest.importorskip("torch")
    from zoo.sequence import RecurrentTagger

    model = RecurrentTagger("lstm", 8, 16, 1, False, 4, "unrolled").eval()
    ks = _kernels(model, (torch.randn(2, 3, 8),))
    assert len(ks) > 3 and all(k.call is None for k in ks)
    assert kernel_arrays(ks).inside is None


def test_routes_agree_on_the_call(tmp_path, lstm_kernels):
    """`.pt2` and the ONNX file `torch.onnx.export` writes (one LSTM node per layer, transposes and concats between):
    the same kernels, one call, one prediction."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    model, x = _small_lstm()
    pt2, onnx_path = tmp_path / "m.pt2", tmp_path / "m.onnx"
    torch.export.save(torch.export.export(model, x), pt2)
    torch.onnx.export(model, x, str(onnx_path), dynamo=False, opset_version=17)
    dev = get_device("a100-80gb")
    want = kernel_latency_arrays(kernel_arrays(lstm_kernels), dev).eager_ms
    for path in (pt2, onnx_path):
        ks = _kernels(str(path))
        a = kernel_arrays(ks)
        assert int((~a.inside).sum()) == 2, path.suffix  # one dispatch for the LSTM, one for the head
        assert kernel_latency_arrays(a, dev).eager_ms == pytest.approx(want, rel=0.05), path.suffix


def test_autocast_casts_inside_a_call_keep_it_one_dispatch():
    """Under `--dtype amp-float16` the casts autocast inserts before the LSTM's matmuls sit among the call's ops: they
    belong to its run, so the nn.LSTM is still one host dispatch (and the head, with its own casts, the rest)."""
    from analyzer import analyze

    model, x = _small_lstm()
    ks = analyze(model, example_inputs=x, dtype="amp-float16").analysis.launched_kernels
    lstm = [k for k in ks if k.call == "aten.lstm.input:lstm"]
    casts = [k for k in lstm if k.op == "relax.astype"]
    assert casts  # autocast's `_to_copy` kernels inside the call's ops
    calls = [k.call for k in ks]
    # one run of the call: every kernel from its first to its last carries it, with nothing else in between
    first, last = calls.index("aten.lstm.input:lstm"), len(calls) - 1 - calls[::-1].index("aten.lstm.input:lstm")
    assert set(calls[first : last + 1]) == {"aten.lstm.input:lstm"}
    assert sum(1 for c, inside in zip(calls, inside_calls(calls), strict=True) if c and not inside) == 1


def test_layers_repeated_by_extrapolation_are_calls_of_their_own():
    """A 4-layer model extrapolated from its first 2 layers (`LayerRepeat`), each layer one library call (layer 1
    "lstm", layer 2 "lstm_1", two kernels each): layers 3 and 4 repeat layer 2's kernels, and each is a call of its own.
    Host dispatches: the embedding, one per layer (4) and the head = 6; the rest (4 x 1 kernels) inside their call."""
    from types import SimpleNamespace

    from passes.analysis import Analysis, LayerRepeat

    def kern(i, call):
        return Kernel(i, "elementwise", "relax.add", (i,), 10, 40, 40, "float32", {"numel": 10}, call)

    ks = (kern(0, None), kern(1, "lstm"), kern(2, "lstm"), kern(3, "lstm_1"), kern(4, "lstm_1"), kern(5, None))
    a = Analysis(None, [], None, None, [], {}, repeat=LayerRepeat(4, (3, 5), 10))
    a.__dict__["kernel_view"] = SimpleNamespace(kernels=ks)
    launched = a.launched_kernels
    assert len(launched) == 10  # 6 + 2 copies of layer 2's 2 kernels
    inside = kernel_arrays(launched).inside
    assert int((~inside).sum()) == 6 and int(inside.sum()) == 4
