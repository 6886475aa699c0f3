"""Graph extraction, data-flow edges, node features and liveness on hand-built Relax graphs."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from passes import features, tvm_ir
from passes.analysis import analyze_graph, analyze_module, fused_in
from passes.memory import liveness


def _diamond(names=("x", "a", "b", "c", "d")):
    """x:(2,8) f32 -> a=relu(x) -> b=exp(x) -> c=a+b -> d=c*a; returns d."""
    x = relax.Var(names[0], relax.TensorType([2, 8], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.relu(x), name_hint=names[1])
            b = bb.emit(relax.op.exp(x), name_hint=names[2])
            c = bb.emit(relax.op.add(a, b), name_hint=names[3])
            d = bb.emit_output(relax.op.multiply(c, a), name_hint=names[4])
        bb.emit_func_output(d)
    return bb.get()


def test_edges_are_every_producer_consumer_pair():
    graph = tvm_ir.extract(_diamond())
    assert [op.op for op in graph.ops] == ["relax.nn.relu", "relax.exp", "relax.add", "relax.multiply"]
    # relu(0) and exp(1) feed add(2); add(2) and relu(0) feed multiply(3): not a chain 0-1-2-3
    assert sorted(graph.edges()) == [(0, 2), (0, 3), (1, 2), (2, 3)]
    analysis = analyze_module(_diamond())
    assert analysis.edge_index.shape == (2, 4)
    assert {tuple(e) for e in analysis.edge_index.T.tolist()} == {(0, 2), (0, 3), (1, 2), (2, 3)}


def test_features_do_not_change_under_renaming():
    a = analyze_module(_diamond())
    b = analyze_module(_diamond(("inp", "r", "e", "s", "out")))
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.edge_index, b.edge_index)
    assert a.static_features == b.static_features


def test_feature_layout_is_versioned_and_one_hot():
    a = analyze_module(_diamond())
    assert a.x.shape == (4, features.NUM_FEATURES)
    assert len(features.FEATURE_COLUMNS) == features.NUM_FEATURES
    assert features.FEATURE_VERSION == "preflight.features/2"
    n_vocab = len(features.OP_VOCAB) + 1
    # exactly one op slot and one category slot per row
    assert (a.x[:, :n_vocab].sum(axis=1) == 1).all()
    assert (a.x[:, n_vocab : n_vocab + 9].sum(axis=1) == 1).all()
    relu_col = features.FEATURE_COLUMNS.index("op=relax.nn.relu")
    assert a.x[0, relu_col] == 1
    flops_col = features.FEATURE_COLUMNS.index("log_flops")
    # relu on 2x8: 16 FLOPs -> log1p(16)
    assert a.x[0, flops_col] == pytest.approx(np.log1p(16))
    # the kernel view: the relu is a kernel of its own, reading and writing 2x8 float32 = 64 B each way
    col = features.FEATURE_COLUMNS.index
    assert a.x[0, col("launches")] == 1 and a.x[0, col("log_kernel_bytes")] == pytest.approx(np.log1p(128))


def test_unknown_op_goes_to_other_slot():
    x = relax.Var("x", relax.TensorType([4, 4], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.cumsum(x, axis=0))
        bb.emit_func_output(y)
    a = analyze_module(bb.get())
    assert a.x[0, features.OTHER_SLOT] == 1


def test_liveness_peak_on_diamond():
    # every tensor is 2x8 float32 = 64 B. x lives until exp (op 1); a until multiply (op 3);
    # op 0: x, a = 128; op 1: x, a, b = 192; op 2: a, b, c = 192; op 3: a, c, d = 192
    mem = liveness(tvm_ir.extract(_diamond()))
    assert mem.timeline == (128, 192, 192, 192)
    assert mem.peak_bytes == 192
    assert mem.peak_op == 1
    assert mem.input_bytes == 64
    # the allocation trace (birth op, last op, bytes): x is an input (-1) read last by exp (1); a = relu (0) read
    # last by multiply (3); b = exp (1) and c = add (2) read by the next op; d = multiply (3) is the output: to the
    # end, 4 = the number of ops
    assert mem.blocks == ((-1, 1, 64), (0, 3, 64), (1, 2, 64), (2, 3, 64), (3, 4, 64))


def test_views_share_storage_and_weights_are_not_activations():
    x = relax.Var("x", relax.TensorType([4, 16], "float32"))  # 256 B
    w = relax.Var("w", relax.TensorType([16, 16], "float32"))  # 1024 B, a weight
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w], attrs={"num_input": 1}):
        with bb.dataflow():
            wt = bb.emit(relax.op.permute_dims(w))  # weight-only: folded
            y = bb.emit(relax.op.matmul(x, wt))  # 4x16 = 256 B
            r = bb.emit(relax.op.reshape(y, [64]))  # view of y
            z = bb.emit_output(relax.op.nn.relu(r))  # 256 B
        bb.emit_func_output(z)
    analysis = analyze_module(bb.get())
    graph = analysis.graph
    assert graph.ops[0].folded and not graph.ops[1].folded
    # op0 (folded): x = 256; op1 matmul: x + y = 512; op2 reshape (view): y = 256; op3 relu: y + z = 512
    assert analysis.memory.timeline == (256, 512, 256, 512)
    assert analysis.totals.peak_activation_bytes == 512
    assert analysis.totals.params == 256 and analysis.totals.param_bytes == 1024
    # the folded transpose is listed but not counted: matmul 4*16*16 = 1024 MACs, relu 64 FLOPs
    assert analysis.totals.macs == 1024
    assert analysis.totals.flops == 2 * 1024 + 64
    assert analysis.totals.op_count == 3


def _written_out_attention(d: int, s: int = 256, heads: int = 4):
    """q, k, v: (1, heads, s, d) float32 -> softmax(q @ k^T * 0.25) @ v, written out as five Relax ops."""
    q, k, v = (relax.Var(n, relax.TensorType([1, heads, s, d], "float32")) for n in "qkv")
    bb = relax.BlockBuilder()
    with bb.function("main", [q, k, v]):
        with bb.dataflow():
            kt = bb.emit(relax.op.permute_dims(k, [0, 1, 3, 2]))
            scores = bb.emit(relax.op.matmul(q, kt))
            scaled = bb.emit(relax.op.multiply(scores, relax.const(0.25, "float32")))
            probs = bb.emit(relax.op.nn.softmax(scaled, axis=-1))
            out = bb.emit_output(relax.op.matmul(probs, v))
        bb.emit_func_output(out)
    return tvm_ir.extract(bb.get())


def test_a_fused_attention_allocates_no_scores():
    # d = 16: q, k, v and the output are 1*4*256*16*4 = 65,536 B each; the scores 1*4*256*256*4 = 1,048,576 B.
    graph = _written_out_attention(16)
    # the graph's liveness: at the multiply, v + scores + scaled = 65,536 + 2 * 1,048,576 (q, k and k^T are dead)
    assert liveness(graph).peak_bytes == 2_162_688
    # eager runs it as one memory-efficient kernel (float32, d % 4 == 0) over all five ops: it allocates its output
    # alone, and reads q, k and v at once: 4 * 65,536
    analysis = analyze_graph(graph, attention_patterns="all")
    assert [(k.kind, k.ops, k.params["backend"]) for k in analysis.kernels] == [
        ("attention", (0, 1, 2, 3, 4), "efficient")
    ]
    assert analysis.totals.peak_activation_bytes == 262_144
    assert analysis.memory.blocks == ((-1, 4, 65_536), (-1, 4, 65_536), (-1, 4, 65_536), (4, 5, 65_536))
    assert fused_in(graph, "all").groups == ((0, 1, 2, 3, 4),)  # the same without the analysis
    assert liveness(graph, fused_in(graph, "all")).peak_bytes == 262_144


def test_the_math_backend_allocates_the_scores():
    # d = 6 (not a multiple of 4): torch's math backend, the graph's own kernels, which allocate the scores as the
    # graph does: q, k, v 1*4*256*6*4 = 24,576 B each; at the multiply, v + 2 * 1,048,576
    graph = _written_out_attention(6)
    analysis = analyze_graph(graph, attention_patterns="all")
    assert [(k.kind, k.ops) for k in analysis.kernels] == [
        ("gemm", (1,)),
        ("elementwise", (2,)),
        ("softmax", (3,)),
        ("gemm", (4,)),
    ]
    assert analysis.totals.peak_activation_bytes == liveness(graph).peak_bytes == 2_121_728


def test_a_math_backend_attention_op_allocates_its_scores():
    """One SDPA op (as torch.export's graphs hold it) that runs on the math backend writes its (B, H, S, T) scores and
    then the probabilities, which the graph holds no value for (`passes.memory.Fusion.scores`)."""
    # q, k, v (B, S, H, D) = (1, 256, 4, 6) float32: 24,576 B each, the output too; d = 6: the math backend
    q, k, v = (relax.Var(n, relax.TensorType([1, 256, 4, 6], "float32")) for n in "qkv")
    bb = relax.BlockBuilder()
    with bb.function("main", [q, k, v]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.attention(q, k, v))
        bb.emit_func_output(out)
    graph = tvm_ir.extract(bb.get())
    analysis = analyze_graph(graph)
    assert [k.op for k in analysis.kernels] == [
        "math:scale_q",
        "math:scale_k",
        "math:matmul_qk",
        "math:softmax",
        "math:matmul_pv",
    ]
    assert liveness(graph).peak_bytes == 4 * 24_576  # the graph alone: q, k, v and the output
    # with the scores and the probabilities, 1 * 4 * 256 * 256 * 4 = 1,048,576 B each, live at the op
    assert analysis.totals.peak_activation_bytes == 4 * 24_576 + 2 * 1_048_576 == 2_195_456
    assert fused_in(graph).scores == (0,)


def test_dynamic_shape_is_reported_not_guessed():
    x = relax.Var("x", relax.TensorType([tvm.tirx.Var("n", "int64"), 8], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.relu(x))
        bb.emit_func_output(y)
    mod = bb.get()
    assert tvm_ir.symbolic_dims(mod) == [("x", 0, "n")]
    with pytest.raises(tvm_ir.DynamicShapeError) as err:
        tvm_ir.extract(mod)
    assert "x" in str(err.value) and "dimension 0" in str(err.value)
    bound = tvm_ir.bind_symbolic_dims(mod, {"n": 3})
    graph = tvm_ir.extract(bound)
    assert graph.ops[0].output.shape == (3, 8)


def test_float16_retargeting_keeps_arithmetic_and_halves_bytes():
    from passes.analysis import analyze_graph
    from passes.graph import with_float_dtype

    graph = tvm_ir.extract(_diamond())
    a32 = analyze_graph(graph)
    a16 = analyze_graph(with_float_dtype(graph, "float16"))
    assert a16.totals.flops == a32.totals.flops
    # every tensor is 2x8: 64 B in float32, 32 B in float16
    assert a16.totals.bytes_read * 2 == a32.totals.bytes_read
    assert a16.totals.peak_activation_bytes == 96  # 192 / 2
    assert {s.tensor.dtype for s in with_float_dtype(graph, "float16").sources} == {"float16"}


def test_half_precision_module_is_analysed_in_half():
    import torch

    from analyzer import analyze

    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)).eval()
    x = torch.randn(1, 3, 8, 8)
    r32 = analyze(m, (x,))
    r16 = analyze(m.half(), (x.half(),))
    # conv 3->8 3x3 on 8x8 -> 6x6: MACs = 8*6*6*27 = 7776 in both precisions
    assert r16.totals.macs == r32.totals.macs == 7776
    # weights 8*27 + 8 (conv) + 4*8 (BN) = 256 elements: 1024 B in float32, 512 B in float16
    assert (r32.totals.param_bytes, r16.totals.param_bytes) == (1024, 512)
    assert r16.inputs[0]["dtype"] == "float16"
