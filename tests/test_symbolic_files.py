"""Symbolic analysis of a model file (docs/symbolic.md): a `.pt2` archive or an ONNX file imported once with its
own dynamic dims, every batch (and sequence length) evaluated from that one graph.

The oracle of each point is the same file analysed concretely at that point (`--batch`, `--input`: the file's graph
bound there, or imported there, by TVM), op for op; the formulas are checked against hand arithmetic and the
concrete counts.
"""

from __future__ import annotations

import json
import warnings

import jsonschema
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from test_symbolic import SCHEMA, SEQ_MODELS, _op_key  # tests/ is on sys.path (pytest prepend import mode)

import zoo
from analyzer.api import analyze
from analyzer.api import predict as predict_model
from analyzer.cli import cli
from analyzer.errors import AnalysisError, MissingShapeError, UsageError
from analyzer.pipeline import analyze_model
from analyzer.sweep import run_sweep
from analyzer.symbolic import analyze_at, formulas, load_symbolic
from predictor.predict import predict

FORMATS = ("pt2", "onnx")
# the sequence length's name: a .pt2 keeps torch's names (s77), so its input and axis; ONNX its dim_param
SEQ = {"pt2": "x[1]", "onnx": "seq"}
LOW = {"pt2": 1, "onnx": 2}  # a .pt2 holds one program, bound at 1 too; TVM's ONNX importer specialises a 1


def _save(module, inputs: tuple, dynamic, path, fmt: str) -> str:
    """`module` as a user brings it: `torch.export.save` with `dynamic` ({axis: Dim} per input, or None) for a
    .pt2; the TorchScript ONNX exporter with the same axes named by the Dims (`dynamic_axes`) for ONNX."""
    module = module.eval()
    if fmt == "pt2":
        torch.export.save(torch.export.export(module, inputs, dynamic_shapes=dynamic), path)
        return str(path)
    names = [f"x{i}" if i else "x" for i in range(len(inputs))]
    axes = {n: {a: d.__name__ for a, d in dims.items()} for n, dims in zip(names, dynamic or (), strict=False) if dims}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, inputs, str(path), dynamo=False, opset_version=17, input_names=names, dynamic_axes=axes
        )
    return str(path)


@pytest.fixture(scope="module", params=FORMATS)
def files(request, tmp_path_factory):
    fmt = request.param
    d = tmp_path_factory.mktemp(fmt)
    batch = torch.export.Dim("batch", max=4096)
    resnet = zoo.build("resnet18?resolution=64", batch=2)
    bert = zoo.build("bert_tiny?seq_len=16", batch=2)
    linear = torch.nn.Linear(8, 4096)
    seq = torch.export.Dim("seq", min=2, max=128)
    return fmt, {
        "resnet": _save(resnet.module, tuple(resnet.example_inputs), ({0: batch},), d / f"resnet18.{fmt}", fmt),
        "bert": _save(bert.module, tuple(bert.example_inputs), ({0: batch, 1: seq},), d / f"bert_tiny.{fmt}", fmt),
        "linear": _save(linear, (torch.randn(2, 8),), ({0: torch.export.Dim("batch")},), d / f"linear.{fmt}", fmt),
        "fixed": _save(linear, (torch.randn(2, 8),), None, d / f"fixed.{fmt}", fmt),
    }


@pytest.fixture(scope="module")
def resnet(files):
    fmt, f = files
    sm = load_symbolic(f["resnet"])
    return fmt, f, sm, formulas(sm)


@pytest.fixture(scope="module")
def bert(files):
    fmt, f = files
    sm = load_symbolic(f["bert"], inputs=["x:?x16"])
    return fmt, f, sm, formulas(sm)


def _same(ours, oracle) -> None:
    a, o = ours.analysis, oracle.analysis
    assert [_op_key(c) for c in a.ops] == [_op_key(c) for c in o.ops]
    assert a.totals == o.totals and a.memory == o.memory
    assert a.kernels == o.kernels  # the kernel view, re-decided at this point
    assert ours.inputs == oracle.inputs
    p, q = predict(a, "h100-80gb")[0], predict(o, "h100-80gb")[0]
    assert (p.latency_ms, p.memory_mib, p.mig.fits) == (q.latency_ms, q.memory_mib, q.mig.fits)


@pytest.mark.parametrize("batch", (1, 2, 13, 100))  # 1: a .pt2's one program, bound there or evaluated there
def test_a_files_batch_symbolic_equals_the_file_bound_at_every_op(resnet, batch):
    fmt, files, sm, costs = resnet
    assert sm.graph.symbols == ("batch",)
    assert sm.batch_range == (LOW[fmt], 4096 if fmt == "pt2" else 2**31 - 1)  # ONNX: no Dim bound in the file
    oracle = analyze_model(files["resnet"], batch=batch)
    if batch < LOW[fmt]:  # below the range: refused, and `analyze(..., symbolic=True)` imports it on its own
        with pytest.raises(UsageError, match="outside the range"):
            analyze_at(sm, batch)
        _same(analyze(files["resnet"], batch=batch, symbolic=True), oracle)
        return
    _same(analyze_at(sm, batch), oracle)
    assert costs.exact
    env = {"batch": batch}
    for formula, c in zip(costs.ops, oracle.analysis.ops, strict=True):
        assert {k: f.at(env) for k, f in formula.items() if k != "output_elements"} == {
            "macs": c.macs,
            "flops": c.flops,
            "bytes_read": c.bytes_read,
            "bytes_written": c.bytes_written,
        }, c.name
    for k, f in costs.totals.items():
        assert f.at(env) == getattr(oracle.analysis.totals, k), k


def test_the_formats_give_one_formula(resnet):
    """ResNet-18 from its .pt2 and from its ONNX file: the MACs by hand from the zoo's symbolic export, which the
    module route checks against FlopCounterMode (tests/test_symbolic.py)."""
    fmt, _, _, costs = resnet
    zoo_costs = formulas(load_symbolic("zoo:resnet18?resolution=64"))
    assert costs.totals["macs"] == zoo_costs.totals["macs"]
    if fmt == "pt2":  # the ONNX exporter folds the batch norms into the convolutions: other parameters
        assert costs.totals["params"] == zoo_costs.totals["params"]


@pytest.mark.parametrize(("batch", "seq"), [(2, 2), (2, 16), (3, 33), (5, 100)])
def test_a_files_batch_and_sequence_length_equal_the_file_bound(bert, batch, seq):
    fmt, files, sm, costs = bert
    name = SEQ[fmt]
    assert sm.graph.symbols == ("batch", name) and sm.values == {name: 16}
    assert sm.graph.ranges[name] == ((2, 128) if fmt == "pt2" else (2, 2**31 - 1))
    oracle = analyze_model(files["bert"], batch=batch, inputs=[f"x:?x{seq}"])
    _same(analyze_at(sm, batch, **{name: seq}), oracle)
    env = {"batch": batch, name: seq}
    for k, f in costs.totals.items():
        assert f.at(env) == getattr(oracle.analysis.totals, k), k


def test_a_files_attention_macs_by_hand(bert):
    fmt, _, _, costs = bert
    layers, hidden, inter, _ = SEQ_MODELS["bert_tiny"]
    macs, s = costs.totals["macs"], SEQ[fmt]
    # Q K^T and the scores times V: 2 x b x s^2 x hidden per layer; per token the q, k, v, o projections (4 H^2)
    # and the feed-forward (2 H I) of each layer: 2 x 128 x 2 = 512 and 2 x (65,536 + 131,072) = 393,216
    assert macs.coefficient((("batch", 1), (s, 2))) == 2 * layers * hidden == 512
    assert macs.coefficient((("batch", 1), (s, 1))) == layers * (4 * hidden * hidden + 2 * hidden * inter) == 393_216
    assert len(macs.terms) == 2


def test_cli_symbolic_of_a_file(files):
    fmt, f = files
    res = CliRunner().invoke(
        cli, ["analyze", f["bert"], "--symbolic", "--input", "x:?x16", "--batch", "3", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    jsonschema.validate(doc, SCHEMA)
    high = 128 if fmt == "pt2" else 2**31 - 1
    assert doc["symbolic"]["symbols"][SEQ[fmt]] == {"min": 2, "max": high, "value": 16, "inputs": [["x", 1]]}
    assert doc["inputs"][0]["shape"] == [3, 16]  # the report's own numbers at --batch and the --input's length
    # Linear(8, 4096): b x 8 x 4,096 MACs, 8 x 4,096 + 4,096 parameters
    res = CliRunner().invoke(cli, ["analyze", f["linear"], "--symbolic"])
    assert res.exit_code == 0, res.output
    assert "MACs                     = 32,768 x batch" in res.output
    assert "parameters               = 36,864" in res.output


def test_symbolic_file_refusals(files):
    fmt, f = files
    with pytest.raises(MissingShapeError, match=r"x:\?xN"):  # the sequence length needs a value
        analyze(f["bert"], symbolic=True)
    with pytest.raises(UsageError, match="the batch, the symbol"):
        load_symbolic(f["bert"], inputs=["x:4x16"])
    if fmt == "pt2":  # the Dim's bound; an ONNX file has none
        with pytest.raises(UsageError, match="outside the range"):
            load_symbolic(f["bert"], inputs=["x:?x129"])
    with pytest.raises(UsageError, match="dimension 0 of the inputs is fixed"):
        load_symbolic(f["fixed"])
    x = "input" if fmt == "pt2" else "x"  # Linear's forward argument; the ONNX file's input_names
    with pytest.raises(UsageError, match="dimension 1 is fixed to 8"):  # Linear(8, 4096)'s input: b x 8
        load_symbolic(f["linear"], inputs=[f"{x}:?x9"])
    if fmt == "pt2":  # an exported program fixes its dtypes (an ONNX input takes another, as without --symbolic)
        with pytest.raises(UsageError, match="fixes its dtypes"):
            load_symbolic(f["linear"], inputs=[f"{x}:?x8:float16"])
    with pytest.raises(UsageError, match="give --batch, not --input"):
        load_symbolic("zoo:resnet18", inputs=["x:2x3x64x64"])
    res = CliRunner().invoke(cli, ["analyze", f["fixed"], "--symbolic"])
    assert res.exit_code == 2 and res.output.count("\n") == 1


def test_a_file_sweep_from_one_import_equals_the_sweep_that_binds_each_batch(files):
    fmt, f = files
    kwargs = {"inputs": None, "batches": [1, 2, 4, 8], "devices": ["h100-80gb"], "latency_slo_ms": None}
    one, _ = run_sweep(f["resnet"], None, strict=False, **kwargs)
    each, _ = run_sweep(f["resnet"], None, strict=False, symbolic=False, **kwargs)
    assert one["symbolic"]["batches"] == [b for b in (1, 2, 4, 8) if b >= LOW[fmt]]
    assert each["symbolic"]["batches"] == []
    assert one["devices"][0]["points"] == each["devices"][0]["points"]


def test_a_files_largest_batch_against_the_file_bound(files):
    _, f = files
    rep = predict_model(f["linear"], device="a100-40gb", batch=2, largest_batch=True)
    solved = rep.predictions[0].mig.largest_batch.per_profile

    def fits(b: int, profile: str) -> bool:  # the oracle: the file bound at batch b, predicted
        return predict(analyze_model(f["linear"], batch=b).analysis, "a100-40gb")[0].mig.fits[profile]

    b = solved["1g.5gb"]
    assert 2 < b and fits(b, "1g.5gb") and not fits(b + 1, "1g.5gb")


class _Steps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(8, 8, batch_first=True)

    def forward(self, x):
        return self.rnn(x)[0]


def test_an_onnx_recurrence_is_refused(tmp_path):
    path = _save(_Steps(), (torch.randn(2, 5, 8),), ({0: torch.export.Dim("batch")},), tmp_path / "lstm.onnx", "onnx")
    with pytest.raises(AnalysisError, match="LSTM runs once per time step"):
        load_symbolic(path)


def _clip_tile_file(path) -> str:
    """An ONNX file (opset 17) with a dynamic batch: x [batch, 3, 4] -> Clip(0, 6) -> Clip(max 5, no min) ->
    Tile(repeats [1, 2, 1]) -> y [batch, 6, 4]. Bounds and repeats are constants (initializers); TVM's own converters
    emit Clip and Tile as PrimFuncs (call_tir), which a symbolic graph cannot cost."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save

    graph = helper.make_graph(
        [
            helper.make_node("Clip", ["x", "zero", "six"], ["a"]),
            helper.make_node("Clip", ["a", "", "five"], ["b"]),
            helper.make_node("Tile", ["b", "reps"], ["y"]),
        ],
        "clip_tile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6, 4])],
        [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("zero", 0.0), ("six", 6.0), ("five", 5.0))]
        + [numpy_helper.from_array(np.array([1, 2, 1], np.int64), "reps")],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.mark.parametrize("batch", (2, 7))
def test_an_onnx_clip_and_tile_stay_symbolic(tmp_path, batch):
    """The file imports with its batch symbolic and each point equals the file imported at that batch, op for op;
    each Clip is one `relax.clip` (eager PyTorch's one clamp kernel), the Tile one `relax.tile`; by hand, per
    sample: x is 3 x 4 float32 = 48 B, each clip reads and writes 48 B, the tile reads 48 B and writes 96 B."""
    path = _clip_tile_file(tmp_path / "c.onnx")
    sm = load_symbolic(path)
    oracle = analyze_model(path, batch=batch)
    _same(analyze_at(sm, batch), oracle)
    ops = [c for c in oracle.analysis.ops if not c.folded]
    assert [c.op for c in ops] == ["relax.clip", "relax.clip", "relax.tile"]
    assert [(c.bytes_read, c.bytes_written) for c in ops] == [(48 * batch, 48 * batch)] * 2 + [(48 * batch, 96 * batch)]
    attrs = [oracle.analysis.graph.ops[c.index].attrs for c in ops[:2]]
    assert [(a["min"], a["max"]) for a in attrs] == [(0.0, 6.0), (float("-inf"), 5.0)]


def _chunk_file(path) -> str:
    """An ONNX file (opset 17) with a dynamic batch that computes slice bounds from the channel count, as the
    TorchScript exporter writes `torch.chunk` (ShuffleNet's channel split): x [batch, 4, 3]; c = Gather(Shape(x), [1])
    (4, static); half = (c + 1) / 2 (2); a = x[:, 0:half], b = x[:, half:2 half]; y = Concat(b, a) [batch, 4, 3];
    then y reshaped to [Gather(Shape(y), 0) (the batch, dynamic), 2, 2, 3]."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save

    def const(name, v):
        return numpy_helper.from_array(np.array(v, np.int64), name)

    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["sx"]),
            helper.make_node("Gather", ["sx", "one"], ["c"], axis=0),
            helper.make_node("Add", ["c", "one"], ["c1"]),
            helper.make_node("Div", ["c1", "two"], ["half"]),
            helper.make_node("Mul", ["half", "two"], ["end"]),
            helper.make_node("Slice", ["x", "zero", "half", "one"], ["a"]),
            helper.make_node("Slice", ["x", "half", "end", "one"], ["b"]),
            helper.make_node("Concat", ["b", "a"], ["y"], axis=1),
            helper.make_node("Shape", ["y"], ["sy"]),
            helper.make_node("Gather", ["sy", "first"], ["n"], axis=0),
            helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
            helper.make_node("Concat", ["n1", "rest"], ["shape"], axis=0),
            helper.make_node("Reshape", ["y", "shape"], ["z"]),
        ],
        "chunk",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 2, 2, 3])],
        [const("zero", [0]), const("one", [1]), const("two", [2]), const("rest", [2, 2, 3]), const("first", 0)],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.mark.parametrize("batch", (2, 7))
def test_onnx_sizes_read_from_static_dims_stay_symbolic(tmp_path, batch):
    """Slice bounds computed from a static dim of a `Shape` whose batch is dynamic: TVM's importer computes them at
    run time and loses the shape of everything after (the next `Shape` is an `R.Shape` without values and its
    `Gather` fails). The channel count is read as the constant it is, the batch stays a symbol, and each point
    equals the file imported at that batch, op for op; by hand, per sample: the concatenation reads the two 2 x 3
    float32 halves (24 B each) and writes 4 x 3 x 4 B = 48 B, and the output is [batch, 2, 2, 3]."""
    path = _chunk_file(tmp_path / "chunk.onnx")
    sm = load_symbolic(path)
    oracle = analyze_model(path, batch=batch)
    _same(analyze_at(sm, batch), oracle)
    cat = [c for c in oracle.analysis.ops if c.op == "relax.concat"]
    assert [(c.bytes_read, c.bytes_written) for c in cat] == [(48 * batch, 48 * batch)]
    assert list(oracle.analysis.ops[-1].outputs[0].shape) == [batch, 2, 2, 3]


def test_a_declared_output_batch_is_not_folded_into_a_symbolic_graph(tmp_path):
    """An exporter given dynamic axes on the inputs only declares the output with the traced batch (1): y = Relu(x)
    declared [1, 4, 3] while x is [batch, 4, 3], then y reshaped to [Gather(Shape(y), [0]), 12] (a 1-D index: TVM's
    importer computes that shape at run time, so the static dims are folded and the file imported again). The
    symbolic graph must not take the declared 1 as a static size of y: refused, or the reshape is [batch, 12]."""
    from onnx import TensorProto, helper, numpy_helper, save

    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["y"]),
            helper.make_node("Shape", ["y"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
            helper.make_node("Concat", ["n", "twelve"], ["shape"], axis=0),
            helper.make_node("Reshape", ["y", "shape"], ["z"]),
        ],
        "declared",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 12])],
        [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("zero", [0]), ("twelve", [12]))],
    )  # fmt: skip
    path = tmp_path / "declared.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    try:
        sm = load_symbolic(str(path))
    except AnalysisError:
        return  # refused: no symbolic graph at all
    for batch in (2, 7):
        reshape = next(c for c in analyze_at(sm, batch).analysis.ops if c.op == "relax.reshape")
        assert reshape.outputs[0].shape == (batch, 12)


def _one_clip(path, opset: int, inputs: list[str], attrs: dict, dtype=None, constants=None) -> str:
    """x [batch, 4] -> Clip -> y, at `opset`; `constants` {name: value} as Constant nodes (not initializers)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save

    dtype = dtype or TensorProto.FLOAT
    np_dtype = np.float32 if dtype == TensorProto.FLOAT else np.int32
    nodes = [
        helper.make_node("Constant", [], [n], value=numpy_helper.from_array(np.array(v, np_dtype), n))
        for n, v in (constants or {}).items()
    ]
    nodes.append(helper.make_node("Clip", ["x", *inputs], ["y"], **attrs))
    graph = helper.make_graph(
        nodes,
        "clip",
        [helper.make_tensor_value_info("x", dtype, ["batch", 4])],
        [helper.make_tensor_value_info("y", dtype, ["batch", 4])],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return str(path)


@pytest.mark.parametrize(
    ("opset", "inputs", "attrs", "constants", "want"),
    [
        (6, [], {"min": -1.0, "max": 2.0}, None, (-1.0, 2.0)),  # opset 6: bounds as attributes
        (13, ["lo", "hi"], {}, {"lo": 0.0, "hi": 6.0}, (0.0, 6.0)),  # Constant nodes, not initializers
        (13, ["lo", "hi"], {}, {"lo": float("nan"), "hi": 6.0}, (float("-inf"), 6.0)),  # a NaN bound: none
        (13, ["lo"], {}, {"lo": 1.0}, (1.0, float("inf"))),  # max omitted
    ],
)
def test_onnx_clip_forms_as_one_clip(tmp_path, opset, inputs, attrs, constants, want):
    path = _one_clip(tmp_path / "c.onnx", opset, inputs, attrs, constants=constants)
    a = analyze_model(path, batch=3).analysis
    ops = [c for c in a.ops if not c.folded]
    assert [c.op for c in ops] == ["relax.clip"]
    got = a.graph.ops[ops[0].index].attrs
    assert (got["min"], got["max"]) == want
    assert (ops[0].bytes_read, ops[0].bytes_written) == (3 * 4 * 4, 3 * 4 * 4)  # batch 3 x 4 float32, by hand


def test_onnx_clip_left_to_tvm_where_one_clip_would_differ(tmp_path):
    """min > max (ONNX returns max there, relax.clip would give min) and an int32 tensor: TVM's own converter
    (its maximum and minimum PrimFuncs)."""
    from onnx import TensorProto

    crossed = _one_clip(tmp_path / "x.onnx", 13, ["lo", "hi"], {}, constants={"lo": 5.0, "hi": 1.0})
    ints = _one_clip(tmp_path / "i.onnx", 13, ["lo", "hi"], {}, TensorProto.INT32, {"lo": 0, "hi": 6})
    for path in (crossed, ints):
        ops = [c.op for c in analyze_model(path, batch=3).analysis.ops if not c.folded]
        assert "relax.clip" not in ops and ops.count("relax.call_tir") == 2, (path, ops)


@pytest.mark.parametrize("overridden", [False, True])
def test_a_gather_index_a_graph_input_overrides_is_not_folded(overridden):
    """`Gather(Shape(x), idx)` with x [batch, 4, 3] and idx an initializer [1]: folded to the constant [4] (the static
    channel dim), unless idx is also a graph input, whose value the caller may replace at run time (then idx is no
    constant and the Gather stays)."""
    from onnx import TensorProto, helper, numpy_helper

    from analyzer.frontends import onnx_frontend

    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 3])]
    if overridden:
        inputs.append(helper.make_tensor_value_info("idx", TensorProto.INT64, [1]))
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "idx"], ["n"], axis=0)],
        "g",
        inputs,
        [helper.make_tensor_value_info("n", TensorProto.INT64, [1])],
        [numpy_helper.from_array(np.array([1], np.int64), "idx")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx_frontend._fold_static_shapes(model, {"x": ["batch", 4, 3]})
    producer = next(n for n in model.graph.node if n.output[0] == "n")
    if overridden:
        assert producer.op_type == "Gather"
    else:
        assert producer.op_type == "Constant"
        assert numpy_helper.to_array(producer.attribute[0].t).tolist() == [4]


def _shape_arithmetic_file(path, pad: bool) -> str:
    """x [batch, 4, 8] reshaped to [(batch * 64) / 64, 32] (the size read from Shape and divided back, as the
    TorchScript exporter writes Swin's window sizes: TVM's importer keeps a truncating division of the batch), then,
    with `pad`, padded by 1 before and 2 after on axis 1 (ONNX pads [0, 1, 0, 2]) to [batch, 35]."""
    from onnx import TensorProto, helper, numpy_helper, save

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Mul", ["b", "k"], ["bk"]),
        helper.make_node("Div", ["bk", "k"], ["n"]),
        helper.make_node("Cast", ["n"], ["nc"], to=TensorProto.INT64),
        helper.make_node("Unsqueeze", ["nc", "axes0"], ["nu"]),
        helper.make_node("Concat", ["nu", "thirtytwo"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    out = ("y", ["batch", 32])
    if pad:
        nodes.append(helper.make_node("Pad", ["y", "pads"], ["z"]))
        out = ("z", ["batch", 35])
    consts = (("zero", 0), ("k", 64), ("axes0", [0]), ("thirtytwo", [32]), ("pads", [0, 1, 0, 2]))
    graph = helper.make_graph(
        nodes,
        "shape_arithmetic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8])],
        [helper.make_tensor_value_info(out[0], TensorProto.FLOAT, out[1])],
        [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in consts],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.mark.parametrize("pad", [False, True], ids=["divided-batch", "and-pad"])
def test_an_exact_division_of_the_batch_and_a_pad_stay_symbolic(tmp_path, pad):
    """A size TVM writes as a truncating division, (batch * 64) / 64, is the batch (an exact division: refused as
    a size before), and a Pad with constant pads is one `relax.nn.pad` (TVM's own converter's PrimFunc has no cost in
    a symbolic graph: refused before; Swin's ONNX file). Each point equals the file imported there, op for op; by
    hand, per sample: the reshape moves 4 x 8 x 4 = 128 B each way, the pad reads 128 B and writes 35 x 4 = 140 B."""
    path = _shape_arithmetic_file(tmp_path / "m.onnx", pad)
    sm = load_symbolic(path)
    for batch in (2, 5, 17):
        oracle = analyze_model(path, batch=batch)
        _same(analyze_at(sm, batch), oracle)
        got = [(c.op, c.bytes_read, c.bytes_written, tuple(c.outputs[0].shape)) for c in oracle.analysis.ops]
        want = [("relax.reshape", 128 * batch, 128 * batch, (batch, 32))]
        want += [("relax.nn.pad", 128 * batch, 140 * batch, (batch, 35))] if pad else []
        assert got == want


# ---- a transformers config.json: built on the meta device, exported once with the batch and the sequence symbolic

_TINY_BERT = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 100,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
}


@pytest.fixture(scope="module")
def bert_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf") / "config.json"
    path.write_text(json.dumps(_TINY_BERT))
    return str(path), load_symbolic(str(path), inputs=["input_ids:1x16"])


@pytest.mark.parametrize(("batch", "seq"), [(2, 16), (3, 24), (7, 40)])
def test_a_configs_batch_and_sequence_equal_the_config_exported_there(bert_config, batch, seq):
    path, sm = bert_config
    assert sm.graph.symbols == ("batch", "seq") and sm.values == {"batch": 2, "seq": 16}
    assert sm.graph.ranges["seq"][1] == 64  # torch.export's bound from max_position_embeddings
    ours = analyze_at(sm, batch, seq=seq)
    oracle = analyze_model(path, inputs=[f"input_ids:{batch}x{seq}"])  # the config route, exported at that point
    a, o = ours.analysis, oracle.analysis
    assert [_op_key(c) for c in a.ops] == [_op_key(c) for c in o.ops]
    assert a.kernels == o.kernels and a.memory == o.memory
    assert a.totals == o.totals
    p, q = predict(a, "h100-80gb")[0], predict(o, "h100-80gb")[0]
    assert (p.latency_ms, p.memory_mib) == (q.latency_ms, q.memory_mib)


def test_a_configs_largest_batch_against_the_config_exported(bert_config):
    path, _ = bert_config
    rep = predict_model(path, device="a100-40gb", inputs=["input_ids:2x16"], largest_batch=True)
    assert not [w for w in rep.warnings if "largest batch" in w]
    b = rep.predictions[0].mig.largest_batch.per_profile["1g.5gb"]

    def fits(n: int) -> bool:  # the oracle: the config exported at batch n, predicted
        return predict(analyze_model(path, inputs=[f"input_ids:{n}x16"]).analysis, "a100-40gb")[0].mig.fits["1g.5gb"]

    assert 2 < b and fits(b) and not fits(b + 1)


def test_a_config_with_too_many_layers_is_refused_symbolically(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**_TINY_BERT, "num_hidden_layers": 300}))
    with pytest.raises(AnalysisError, match="a symbolic export traces every layer, at most 256"):
        load_symbolic(str(path), inputs=["input_ids:1x16"])


def test_a_folder_with_a_graph_beside_its_config_is_not_read_as_the_config(tmp_path):
    # as the concrete route (`frontends._load_dir`): an exporter's folder (model.onnx beside config.json) is refused
    # as ambiguous, so the symbolic route does not take its config either
    from analyzer.frontends import takes_config, takes_symbolic

    (tmp_path / "config.json").write_text(json.dumps(_TINY_BERT))
    assert takes_config(tmp_path) and takes_symbolic(tmp_path)
    (tmp_path / "model.onnx").write_bytes(b"")
    assert not takes_config(tmp_path) and not takes_symbolic(tmp_path)
    assert takes_config(tmp_path / "config.json")  # the config itself, named


def test_a_configs_symbolic_analysis_is_at_its_inputs_batch(bert_config):
    # `analyze --symbolic --input input_ids:8x16` shows the batch the user gave (8), not the export's lowest (2)
    path, _ = bert_config
    rep = analyze(path, inputs=["input_ids:8x16"], symbolic=True)
    assert rep.inputs[0]["shape"] == [8, 16]
    assert rep.analysis.totals == analyze_model(path, inputs=["input_ids:8x16"]).analysis.totals  # the oracle


def test_a_report_whose_own_batch_leaves_one_to_sweep_still_solves(bert_config):
    # `report --input input_ids:8x16 --batches 1,8,64`: the report's own analysis is batch 8, so the sweep analyses
    # 1 and 64 alone; the largest batch that fits is still solved from one symbolic export (it was left out)
    from analyzer.api import report as report_model

    path, _ = bert_config
    rep = report_model(path, inputs=["input_ids:8x16"], devices=["a100-40gb"], batches=[1, 8, 64])
    entry = rep.sweep["devices"][0]
    solved = entry["largest_batch_solved"]["1g.5gb"]
    want = predict_model(path, device="a100-40gb", inputs=["input_ids:8x16"], largest_batch=True)
    assert solved == want.predictions[0].mig.largest_batch.per_profile["1g.5gb"] > 64  # predict's solve, the oracle
