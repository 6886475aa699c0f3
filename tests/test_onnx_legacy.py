"""Legacy ONNX exports (`torch.onnx.export(..., dynamo=False)`, issue 25 item 4): the shape, index and mask arithmetic
on constants they write out is folded before TVM's import (`onnx_frontend.fold_constant_indices`).

Patterns, each as a tiny hand-made graph: RoFormer's (and Marian's, Pegasus's, mBART's) attention mask expanded to a
shape computed by `Where(Equal(shape, -1), ConstantOfShape(...), shape)` (TVM: "broadcast_to ... target shape has
ndim 0"); SwinV2's window padding, pads computed by `Mod`/`Sub` on constant sizes, then a `Reshape` with -1 (TVM:
"Reshape expects the input tensor to have known shape"). Oracle: onnxruntime runs the file before and after folding.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from analyzer.api import analyze  # noqa: E402
from analyzer.frontends.onnx_frontend import FOLD_ELEMENTS, fold_constant_indices, fold_static_shapes  # noqa: E402


def _const(name, values, dtype=np.int64):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(values, dtype=dtype), name))


def _model(nodes, x_shape, y_shape, opset=17):
    graph = helper.make_graph(
        nodes,
        "legacy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def roformer_mask():
    """y = Where(mask, x, -10000) with the (2, 1, 16, 16) mask as the legacy export builds it from constants: a
    scalar True (ConstantOfShape of an empty shape) And (positions >= 0), expanded to Where(Equal(c, -1), ones, c)
    for c = [2, -1, 16, 16]."""
    nodes = [
        _const("empty", [], np.int64),
        helper.make_node("ConstantOfShape", ["empty"], ["true"], value=numpy_helper.from_array(np.array([True]))),
        _const("pos", np.arange(16).reshape(1, 1, 16, 1)),
        _const("zero", 0),
        helper.make_node("GreaterOrEqual", ["pos", "zero"], ["ge"]),
        helper.make_node("And", ["true", "ge"], ["mask0"]),
        _const("c", [2, -1, 16, 16]),
        _const("four", [4]),
        helper.make_node("ConstantOfShape", ["four"], ["ones"], value=numpy_helper.from_array(np.array([1]))),
        _const("m1", -1),
        helper.make_node("Mul", ["ones", "m1"], ["neg"]),
        helper.make_node("Equal", ["c", "neg"], ["eq"]),
        helper.make_node("Where", ["eq", "ones", "c"], ["shape"]),
        helper.make_node("Expand", ["mask0", "shape"], ["mask"]),
        _const("low", -10000.0, np.float32),
        helper.make_node("Where", ["mask", "x", "low"], ["y"]),
    ]
    return _model(nodes, [2, 1, 16, 16], [2, 1, 16, 16])


def swin_padding():
    """x (1, 6, 6, 4) padded to whole 4 x 4 windows, pads computed on the constant sizes (pad = (4 - 6 % 4) % 4 = 2
    at the end of H and W), then reshaped into windows: (1, 2, 4, 2, 4, 4) with a -1."""
    nodes = [
        _const("hw", [6, 6]),
        _const("win", [4, 4]),
        helper.make_node("Mod", ["hw", "win"], ["rem"]),
        helper.make_node("Sub", ["win", "rem"], ["gap"]),
        helper.make_node("Mod", ["gap", "win"], ["pad_hw"]),
        _const("zeros2", [0, 0]),
        _const("zero1", [0]),
        helper.make_node("Concat", ["zero1", "zeros2", "zero1", "zero1", "pad_hw", "zero1"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["padded"]),
        _const("windows", [1, 2, 4, -1, 4, 4]),
        helper.make_node("Reshape", ["padded", "windows"], ["y"]),
    ]
    return _model(nodes, [1, 6, 6, 4], [1, 2, 4, 2, 4, 4])


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize(
    ("build", "x_shape", "n_folded"),
    [
        # ConstantOfShape x 2, GreaterOrEqual, And, Mul, Equal, Where, Expand: the float Where on x stays
        (roformer_mask, (2, 1, 16, 16), 8),
        # Mod, Sub, Mod, Concat: the Pad and Reshape of x stay
        (swin_padding, (1, 6, 6, 4), 4),
    ],
)
def test_folding_keeps_the_values_onnxruntime_computes(build, x_shape, n_folded):
    model = build()
    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    before = _run(model, x)
    assert fold_constant_indices(model) == n_folded
    onnx.checker.check_model(model)
    np.testing.assert_array_equal(_run(model, x), before)


def test_legacy_mask_pattern_analyses(tmp_path):
    path = tmp_path / "mask.onnx"
    onnx.save(roformer_mask(), path)
    report = analyze(str(path))
    (where,) = [c for c in report.analysis.ops if not c.folded]
    assert where.op == "relax.where" and where.output.shape == (2, 1, 16, 16)


def test_legacy_window_padding_analyses(tmp_path):
    path = tmp_path / "pad.onnx"
    onnx.save(swin_padding(), path)
    report = analyze(str(path))
    ops = [c for c in report.analysis.ops if not c.folded]
    assert len(ops) == 2 and ops[1].op == "relax.reshape"  # the pad: TVM's converter emits a call_tir
    # the padded (1, 8, 8, 4) float32 tensor: 1,024 B written by the pad
    assert ops[0].output.shape == (1, 8, 8, 4) and ops[0].bytes_written == 8 * 8 * 4 * 4
    assert ops[1].output.shape == (1, 2, 4, 2, 4, 4)


def test_float_arithmetic_and_large_values_are_not_folded():
    """Folding is for integer and boolean values of at most FOLD_ELEMENTS elements: float arithmetic on constants
    stays an op (its FLOPs are counted where the file has them); a ConstantOfShape past the cap, or an Expand to
    10**10 elements, is never evaluated (the output shape is inferred first)."""
    nodes = [
        _const("a", [1.0, 2.0], np.float32),
        helper.make_node("Add", ["a", "a"], ["b"]),
        _const("big", [FOLD_ELEMENTS + 1]),
        helper.make_node("ConstantOfShape", ["big"], ["ones"], value=numpy_helper.from_array(np.array([1]))),
        _const("one", [1]),
        _const("huge", [100_000, 100_000]),
        helper.make_node("Expand", ["one", "huge"], ["wide"]),
        # a float tensor past the cap, although only an integer Cast reads it (size arithmetic would be folded)
        helper.make_node("ConstantOfShape", ["big"], ["halves"], value=numpy_helper.from_array(np.array([0.5], "f4"))),
        helper.make_node("Cast", ["halves"], ["counts"], to=TensorProto.INT64),
        helper.make_node("Add", ["x", "b"], ["y"]),
    ]
    model = _model(nodes, [2], [2])
    assert fold_constant_indices(model) == 0
    assert [n.op_type for n in model.graph.node].count("Constant") == 4


def mobilevit_unfold():
    """MobileViT's unfolding as its legacy export writes it: the patch grid's size `int(ceil(h / p) * p)` computed
    from float scalar constants (`Div`, `Ceil`, `Mul`, then a `Cast` to int64), made a shape by `Unsqueeze` and `Concat`
    (TVM: "Reshape requires the input new shape to be Shape"). x (1, 3, 8, 8), p = 2: y = x reshaped to
    (1 * 3 * 4, 2, 4, 2) = (12, 2, 4, 2)."""
    nodes = [_const("h", 8.0, np.float32), _const("p", 2.0, np.float32), _const("ax", [0])]
    nodes += [
        helper.make_node("Div", ["h", "p"], ["q"]),
        helper.make_node("Ceil", ["q"], ["c"]),
        helper.make_node("Mul", ["c", "p"], ["hf"]),  # 8.0
        helper.make_node("Cast", ["hf"], ["hi"], to=TensorProto.INT64),
        _const("pi", 2),
        helper.make_node("Div", ["hi", "pi"], ["n"]),  # 4 patches a side
        _const("bc", 3),
        helper.make_node("Mul", ["bc", "n"], ["rows"]),
        helper.make_node("Unsqueeze", ["rows", "ax"], ["rows1"]),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        _const("p1", [2]),
        helper.make_node("Concat", ["rows1", "p1", "n1", "p1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    return _model(nodes, [1, 3, 8, 8], [12, 2, 4, 2])


def test_size_arithmetic_in_floats_folds_to_what_onnxruntime_computes(tmp_path):
    """The float steps of a size (Div, Ceil, Mul: only a Cast to int64 reads them) fold with the integer chain after
    them: Div, Ceil, Mul, Cast, Div, Mul, Unsqueeze x 2, Concat = 9 nodes; the Reshape of x stays and imports."""
    model = mobilevit_unfold()
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    before = _run(model, x)
    assert fold_constant_indices(model) == 9
    assert [n.op_type for n in model.graph.node if n.op_type != "Constant"] == ["Reshape"]
    np.testing.assert_array_equal(_run(model, x), before)
    path = tmp_path / "unfold.onnx"
    onnx.save(mobilevit_unfold(), path)
    (reshape,) = [c for c in analyze(str(path)).analysis.ops if not c.folded]
    assert reshape.op == "relax.reshape" and reshape.output.shape == before.shape == (12, 2, 4, 2)


def test_mobilevit_unfolding_exported_by_torch_matches_the_module(tmp_path, monkeypatch):
    """A module whose forward unfolds and folds patches with sizes from `x.shape` as Hugging Face's MobileViT does
    (under tracing, `torch.ceil(h / p) * p` cast to int64): its TorchScript ONNX file imports, with the module
    route's kernels and FLOPs (conv, bias add, 4 reshape copies, the per-pixel linear's matmul: 7 kernels) and the
    output shape onnxruntime computes. Without the float size folding it does not import."""
    import math

    torch = pytest.importorskip("torch")
    from route_export import KEEP_BN, export_onnx

    from analyzer.errors import AnalysisError
    from analyzer.frontends import onnx_frontend

    class Unfold(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            x = self.conv(x)
            b, c, h, w = x.shape
            p = 2
            if torch.jit.is_tracing():
                nh, nw = ((torch.ceil(d / p) * p).to(torch.int64) for d in (h, w))
            else:
                nh, nw = (int(math.ceil(d / p) * p) for d in (h, w))
            ph, pw = nh // p, nw // p
            t = x.reshape(b * c * ph, p, pw, p).transpose(1, 2).reshape(b, c, ph * pw, p * p).transpose(1, 3)
            t = self.fc(t.reshape(b * p * p, ph * pw, -1))
            t = t.reshape(b, p * p, ph * pw, -1).transpose(1, 3).reshape(b * c * ph, pw, p, p)
            return t.transpose(1, 2).reshape(b, c, nh, nw)

    module, x = Unfold().eval(), torch.randn(2, 3, 8, 8)
    path = export_onnx(module, (x,), tmp_path / "unfold.onnx", KEEP_BN)
    assert "Ceil" in [n.op_type for n in onnx.load(str(path)).graph.node]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    eager, from_file = analyze(module, (x,)).analysis, analyze(str(path)).analysis
    assert from_file.ops[-1].output.shape == expected.shape == (2, 8, 8, 8)
    assert len(from_file.kernels) == len(eager.kernels) == 7
    assert from_file.totals.flops == eager.totals.flops
    monkeypatch.setattr(onnx_frontend, "_size_floats", lambda model: set())
    with pytest.raises(AnalysisError, match="Reshape requires"):
        analyze(str(path))


def _shape_dim(x, axis, tag):
    """Nodes computing Gather(Shape(x), [axis]) -> `{tag}` (an int64 vector of one element)."""
    return [
        helper.make_node("Shape", [x], [f"{tag}_shape"]),
        _const(f"{tag}_axis", [axis]),
        helper.make_node("Gather", [f"{tag}_shape", f"{tag}_axis"], [tag], axis=0),
    ]


def mamba_chunk():
    """Mamba's `chunk(2, dim=1)` as the legacy export writes it, twice: the bounds computed from `Shape` at run time
    ((n + 1) / 2), so TVM loses the first half's shape and then fails on the second `Shape` ("shape_of expects a
    tensor input, but received R.Shape"). x (1, 8, 4) -> a = x[:, 0:4] -> y = a[:, 0:2], (1, 2, 4)."""
    nodes = [*_shape_dim("x", 1, "n"), _const("one", [1]), _const("two", [2]), _const("ax", [1]), _const("z", [0])]
    nodes += [
        helper.make_node("Add", ["n", "one"], ["n1"]),
        helper.make_node("Div", ["n1", "two"], ["half"]),  # (8 + 1) / 2 = 4
        helper.make_node("Slice", ["x", "z", "half", "ax"], ["a"]),
        *_shape_dim("a", 1, "m"),
        helper.make_node("Add", ["m", "one"], ["m1"]),
        helper.make_node("Div", ["m1", "two"], ["mhalf"]),  # (4 + 1) / 2 = 2
        helper.make_node("Slice", ["a", "z", "mhalf", "ax"], ["y"]),
    ]
    return _model(nodes, [1, 8, 4], [1, 2, 4])


def wavlm_chunk():
    """WavLM's gated relative position bias: a `chunk(2)` with bounds read by `Shape` (as `mamba_chunk`), then a
    `Reshape` with -1 (TVM: "Reshape expects the input tensor to have known shape"). x (1, 8, 4) -> a = x[:, 0:4]
    (1, 4, 4) -> y (1, 16)."""
    nodes = [*_shape_dim("x", 1, "n"), _const("one", [1]), _const("two", [2]), _const("ax", [1]), _const("z", [0])]
    nodes += [
        helper.make_node("Add", ["n", "one"], ["n1"]),
        helper.make_node("Div", ["n1", "two"], ["half"]),  # (8 + 1) / 2 = 4
        helper.make_node("Slice", ["x", "z", "half", "ax"], ["a"]),
        _const("flat", [1, -1]),
        helper.make_node("Reshape", ["a", "flat"], ["y"]),
    ]
    return _model(nodes, [1, 8, 4], [1, 16])


def rwkv_range():
    """A `Range` whose end is a size read by `Shape` (RWKV's legacy export builds its padding this way): TVM makes
    its length a shape variable (`range_len_0`), a dimension preflight cannot cost. y = x + float(range(0, 6)),
    x (2, 6); then `Pad` with pads computed from the same size: (0, 6 - 6, 0, 1) at the ends -> (2, 7)."""
    nodes = [*_shape_dim("x", 1, "n"), _const("zero", 0), _const("step", 1), _const("zeros1", [0])]
    nodes += [
        _const("axes0", [0]),
        helper.make_node("Squeeze", ["n", "axes0"], ["n0"]),
        helper.make_node("Range", ["zero", "n0", "step"], ["idx"]),
        helper.make_node("Cast", ["idx"], ["fidx"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "fidx"], ["s"]),
        helper.make_node("Sub", ["n", "n"], ["none"]),  # 6 - 6 = 0
        _const("one1", [1]),
        helper.make_node("Concat", ["zeros1", "none", "zeros1", "one1"], ["pads"], axis=0),
        helper.make_node("Pad", ["s", "pads"], ["y"]),
    ]
    return _model(nodes, [2, 6], [2, 7])


def vitmae_argsort():
    """ViTMAE's random masking without the random numbers: an argsort written as `TopK` with k = the sorted axis's
    size read by `Shape` of a `TopK`'s output (TVM: "TopK k must be a constant"), twice (ids_shuffle, ids_restore),
    then the first 4 of 8 patches gathered. x (2, 8) -> y (2, 4)."""
    nodes = [*_shape_dim("x", 1, "k1")]
    nodes += [
        helper.make_node("TopK", ["x", "k1"], ["v1", "shuffle"], axis=1, largest=0),
        helper.make_node("Cast", ["shuffle"], ["shuffle_f"], to=TensorProto.FLOAT),
        *_shape_dim("shuffle_f", 1, "k2"),
        helper.make_node("TopK", ["shuffle_f", "k2"], ["v2", "restore"], axis=1, largest=0),
        _const("s0", [0]),
        _const("s4", [4]),
        _const("ax", [1]),
        helper.make_node("Slice", ["restore", "s0", "s4", "ax"], ["keep"]),
        helper.make_node("GatherElements", ["x", "keep"], ["y"], axis=1),
    ]
    return _model(nodes, [2, 8], [2, 4])


@pytest.mark.parametrize(
    ("build", "x_shape", "n_folded"),
    [
        # Shape x 2 made constants; then Gather, Add, Div (first half) and Gather, Add, Div (second) folded: 8
        (mamba_chunk, (1, 8, 4), 8),
        # Shape made constant; Gather, Add, Div folded: 4
        (wavlm_chunk, (1, 8, 4), 4),
        # Shape made constant; Gather, Squeeze, Range, Sub, Concat folded (the Cast of the range is float): 6
        (rwkv_range, (2, 6), 6),
        # Shape x 2 made constants (the second once the first k is folded), Gather x 2 folded: 4
        (vitmae_argsort, (2, 8), 4),
    ],
)
def test_static_shapes_fold_to_the_values_onnxruntime_computes(build, x_shape, n_folded):
    model = build()
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    before = _run(model, x)
    assert fold_constant_indices(model) == 0  # every chain starts at a Shape of a tensor: nothing constant yet
    assert fold_static_shapes(model, {"x": list(x_shape)}) == n_folded
    assert "Shape" not in [n.op_type for n in model.graph.node]
    onnx.checker.check_model(model)
    np.testing.assert_array_equal(_run(model, x), before)


@pytest.mark.parametrize(
    ("build", "shape"),
    [(mamba_chunk, (1, 2, 4)), (wavlm_chunk, (1, 16)), (rwkv_range, (2, 7)), (vitmae_argsort, (2, 4))],
)
def test_static_shape_patterns_analyse(tmp_path, build, shape):
    """Each fails in TVM's importer (or leaves a shape variable) as the file stands; preflight folds the static
    shapes and imports again."""
    path = tmp_path / "m.onnx"
    onnx.save(build(), path)
    report = analyze(str(path))
    assert report.analysis.ops[-1].output.shape == shape


def test_random_uniform_like_is_a_fill(tmp_path):
    """ViTMAE's noise, `RandomUniformLike` of a (2, 16) float32 ConstantOfShape: costed as one kernel that writes
    its output (0 FLOPs, 2 x 16 x 4 B = 128 B written), never drawn; y = x + noise."""
    nodes = [
        _const("dims", [2, 16]),
        helper.make_node("ConstantOfShape", ["dims"], ["base"], value=numpy_helper.from_array(np.array([0.0], "f4"))),
        helper.make_node("RandomUniformLike", ["base"], ["noise"], dtype=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "noise"], ["y"]),
    ]
    path = tmp_path / "noise.onnx"
    onnx.save(_model(nodes, [2, 16], [2, 16]), path)
    ops = [c for c in analyze(str(path)).analysis.ops if not c.folded]
    (fill,) = [c for c in ops if c.op == "relax.zeros"]
    assert fill.flops == 0 and fill.bytes_written == 2 * 16 * 4 and fill.output.shape == (2, 16)
    assert ops[-1].op == "relax.add" and ops[-1].flops == 2 * 16


def _pad_file(path, opset: int, mode: str, pads: list[int], axes: list[int] | None = None, value: float = 0.0):
    """x [2, 3, 5] float32 padded by one ONNX Pad node (opset < 11: pads and value as attributes)."""
    from onnx import TensorProto, helper, numpy_helper, save

    attrs = {"mode": mode}
    inits, ins = [], ["x"]
    if opset < 11:
        attrs |= {"pads": pads, "value": value}
    else:
        inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
        inits.append(numpy_helper.from_array(np.array(value, np.float32), "value"))
        ins += ["pads", "value"]
        if axes is not None:
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
            ins.append("axes")
    graph = helper.make_graph(
        [helper.make_node("Pad", ins, ["y"], **attrs)],
        "pad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["d0", "d1", "d2"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    save(model, str(path))
    return str(path)


@pytest.mark.parametrize(
    "opset, mode, pads, axes, op",
    [
        (17, "constant", [0, 1, 2, 0, 0, 3], None, "relax.nn.pad"),
        (10, "constant", [0, 1, 2, 0, 0, 3], None, "relax.nn.pad"),
        (18, "constant", [1, 2, 0, 3], [1, -1], "relax.nn.pad"),
        (17, "reflect", [0, 0, 2, 0, 0, 3], None, "relax.nn.pad"),
        (17, "edge", [0, 1, 2, 0, 0, 3], None, "relax.nn.pad"),
        (19, "wrap", [0, 1, 2, 0, 0, 3], None, "relax.nn.pad"),
        (18, "wrap", [0, 1, 2, 0, 0, 3], None, "relax.nn.pad"),  # before opset 19's spec: onnxruntime runs it
        (17, "constant", [0, 1, 2, 0, 0, -1], None, "relax.call_tir"),  # a crop: TVM's own converter
    ],
)
def test_an_onnx_pad_is_one_pad_op(tmp_path, opset, mode, pads, axes, op):
    """ONNX Pad with constant pads is one `relax.nn.pad` (what TVM's torch importer emits for `F.pad`), whatever the
    opset's form and the mode; the output shape is onnxruntime's (the oracle), and the op reads its input (2 x 3 x 5
    x 4 = 120 B) and writes its output. Negative pads (a crop) stay with TVM's own converter."""
    import onnxruntime as ort

    path = _pad_file(tmp_path / "pad.onnx", opset, mode, pads, axes, value=1.5)
    x = np.arange(30, dtype=np.float32).reshape(2, 3, 5)
    (want,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (c,) = [c for c in analyze(path).analysis.ops if not c.folded]
    assert c.op == op and tuple(c.outputs[0].shape) == want.shape
    assert (c.bytes_read, c.bytes_written) == (120, 4 * want.size)
