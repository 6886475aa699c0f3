"""Hand-computed cost checks for the non-GEMM rules (elementwise, normalization, pooling, reduction,
data movement, resize and friends), the call_tir / ignored / unsupported paths of `cost_of`, and
the registry itself.
"""

from __future__ import annotations

import pytest

from passes.costs import CATEGORIES, IGNORED, RULES, UNSUPPORTED, cost_of, register, tir_category
from passes.costs.registry import ignore
from passes.graph import Operand, OpNode, TensorInfo


def T(*shape: int, dtype: str = "float32") -> TensorInfo:
    return TensorInfo(tuple(shape), dtype)


def rule(op: str, attrs: dict, inputs: list[TensorInfo], *outputs: TensorInfo):
    return RULES[op].fn(attrs, inputs, tuple(outputs))


def node(
    op: str,
    inputs: list[TensorInfo],
    outputs: list[TensorInfo],
    attrs: dict | None = None,
    kinds: list[str] | None = None,
    **kw,
) -> OpNode:
    kinds = kinds or ["activation"] * len(inputs)
    operands = [
        Operand(t, 0 if k == "activation" else None, k, 100 + i)
        for i, (t, k) in enumerate(zip(inputs, kinds, strict=True))
    ]
    return OpNode(index=1, name="lv1", op=op, attrs=attrs or {}, operands=operands, outputs=tuple(outputs), **kw)


# ---- elementwise -------------------------------------------------------------------------

X = T(2, 3, 4)  # 24 elements, 96 bytes in float32


@pytest.mark.parametrize(
    ("op", "flops"),
    [
        ("relax.add", 24),  # 1 * 24
        ("relax.multiply", 24),  # 1 * 24
        ("relax.nn.relu", 24),  # 1 * 24
        ("relax.exp", 24),  # transcendental = 1 -> 24
        ("relax.sigmoid", 96),  # 4 * 24
        ("relax.nn.silu", 120),  # 5 * 24
        ("relax.nn.gelu", 120),  # 5 * 24
        ("relax.nn.gelu_tanh", 216),  # 9 * 24
        ("relax.clip", 48),  # 2 * 24
        ("relax.nn.leakyrelu", 48),  # 2 * 24
        ("relax.nn.prelu", 48),  # 2 * 24
        ("relax.nn.softplus", 72),  # 3 * 24
        ("relax.nn.selu", 120),  # 5 * 24
        ("relax.ewise_fma", 48),  # 2 * 24
        ("relax.log_add_exp", 96),  # 4 * 24
        ("relax.quantize", 72),  # 3 * 24
        ("relax.dequantize", 48),  # 2 * 24
    ],
)
def test_elementwise_flops_per_element(op, flops):
    cost = rule(op, {}, [X, X], X)
    assert cost.macs == 0 and cost.flops == flops
    assert RULES[op].category == "elementwise"


def test_add_broadcast_counts_output_elements():
    # a 4x1 + b 1x5 -> out 4x5 = 20 elements -> 20 FLOPs
    assert rule("relax.add", {}, [T(4, 1), T(1, 5)], T(4, 5)).flops == 20


def test_add_bytes_via_cost_of():
    c = cost_of(node("relax.add", [X, X], [X]))
    assert c.flops == 24
    assert c.bytes_read == 192  # 2 inputs * 24 el * 4 B
    assert c.bytes_written == 96  # 24 el * 4 B
    assert c.weight_bytes == 0


def test_add_float16_halves_bytes():
    h = T(2, 3, 4, dtype="float16")
    c = cost_of(node("relax.add", [h, h], [h]))
    assert c.flops == 24  # dtype does not change arithmetic
    assert c.bytes_read == 96  # 2 * 24 el * 2 B (half of 192)
    assert c.bytes_written == 48  # 24 el * 2 B (half of 96)


def test_where_with_bool_condition():
    cond = T(2, 3, 4, dtype="bool")
    c = cost_of(node("relax.where", [cond, X, X], [X]))
    assert c.flops == 24  # 1 * 24
    assert c.bytes_read == 216  # cond 24 el * 1 B + x 96 + y 96
    assert c.bytes_written == 96


def test_comparison_writes_bool():
    out = T(2, 3, 4, dtype="bool")
    c = cost_of(node("relax.less", [X, X], [out]))
    assert c.flops == 24
    assert c.bytes_written == 24  # 24 el * 1 B (bool is one byte)


def test_tensor_nbytes_sub_byte_and_vector_dtypes():
    assert T(3, dtype="int4").nbytes == 2  # ceil(3 * 0.5)
    assert T(2, 3, dtype="bfloat16").nbytes == 12  # 6 * 2
    assert T(4, dtype="float16x4").nbytes == 32  # 4 * (2 * 4 lanes)
    assert T(dtype="float32").nbytes == 4  # a 0-d scalar is one element


# ---- normalization -----------------------------------------------------------------------


@pytest.mark.parametrize("op", ["relax.nn.softmax", "relax.nn.log_softmax"])
def test_softmax(op):
    # 5 FLOPs per element * 24 = 120
    cost = rule(op, {"axis": -1}, [X], X)
    assert cost.flops == 120 and cost.macs == 0


def test_layer_norm_with_scale_and_center():
    # x 2x3x8 = 48 elements; (5 + 1 + 1) * 48 = 336
    x = T(2, 3, 8)
    cost = rule("relax.nn.layer_norm", {"axes": [-1], "scale": True, "center": True}, [x, T(8), T(8)], x)
    assert cost.flops == 336


def test_layer_norm_default_is_affine():
    # attrs absent -> scale and center default on -> 7 * 48 = 336
    x = T(2, 3, 8)
    assert rule("relax.nn.layer_norm", {}, [x, T(8), T(8)], x).flops == 336


def test_layer_norm_without_scale_or_center():
    # (5 + 0 + 0) * 48 = 240
    x = T(2, 3, 8)
    cost = rule("relax.nn.layer_norm", {"scale": False, "center": False}, [x, T(8), T(8)], x)
    assert cost.flops == 240


def test_layer_norm_scale_only():
    # (5 + 1 + 0) * 48 = 288
    x = T(2, 3, 8)
    assert rule("relax.nn.layer_norm", {"scale": True, "center": False}, [x, T(8), T(8)], x).flops == 288


def test_group_norm():
    # x 1x8x4x4 = 128 elements, groups 2, affine -> 7 * 128 = 896
    x = T(1, 8, 4, 4)
    cost = rule("relax.nn.group_norm", {"num_groups": 2, "scale": True, "center": True}, [x, T(8), T(8)], x)
    assert cost.flops == 896


def test_instance_norm():
    # x 1x8x4x4 = 128 elements, affine -> 7 * 128 = 896
    x = T(1, 8, 4, 4)
    assert rule("relax.nn.instance_norm", {}, [x, T(8), T(8)], x).flops == 896


def test_rms_norm():
    # x 2x3x8 = 48 elements; 3 + scale = 4 -> 4 * 48 = 192
    x = T(2, 3, 8)
    assert rule("relax.nn.rms_norm", {"axes": [-1]}, [x, T(8)], x).flops == 192


def _batch_norm_node(training: bool) -> OpNode:
    x = T(2, 4, 3, 3)  # 72 elements, 288 bytes
    c = T(4)  # 16 bytes each
    return node(
        "relax.nn.batch_norm",
        [x, c, c, c, c],
        [x, c, c],
        attrs={"axis": 1, "training": training},
        kinds=["activation", "weight", "weight", "weight", "weight"],
    )


def test_batch_norm_inference():
    c = cost_of(_batch_norm_node(False))
    assert c.category == "normalization"
    assert c.flops == 288  # 4 * 72
    # bytes_written counts only the first output: 72 * 4 B = 288 (not + 16 + 16 for mean/var)
    assert c.bytes_written == 288
    assert c.bytes_read == 352  # x 288 + gamma, beta, mean, var 4 * 16
    assert c.weight_bytes == 64  # 4 * 16


def test_batch_norm_training():
    c = cost_of(_batch_norm_node(True))
    assert c.flops == 504  # (4 + 3) * 72
    assert c.bytes_written == 288  # still only the first output


# ---- pooling -----------------------------------------------------------------------------


def test_max_pool2d_2x2_stride2():
    # in 1x4x8x8, pool 2x2 stride 2 -> out 1x4x4x4 = 64; 64 * (2*2) = 256
    cost = rule("relax.nn.max_pool2d", {"pool_size": [2, 2], "strides": [2, 2]}, [T(1, 4, 8, 8)], T(1, 4, 4, 4))
    assert cost.flops == 256 and cost.macs == 0


def test_max_pool2d_3x3_stride1():
    # in 1x4x8x8, pool 3x3 stride 1 -> out 1x4x6x6 = 144; 144 * 9 = 1296
    cost = rule("relax.nn.max_pool2d", {"pool_size": [3, 3], "strides": [1, 1]}, [T(1, 4, 8, 8)], T(1, 4, 6, 6))
    assert cost.flops == 1296


def test_avg_pool2d_3x3_stride2():
    # in 1x4x8x8, pool 3x3 stride 2 -> out floor((8-3)/2)+1 = 3 -> 1x4x3x3 = 36; 36 * 9 = 324
    cost = rule("relax.nn.avg_pool2d", {"pool_size": [3, 3], "strides": [2, 2]}, [T(1, 4, 8, 8)], T(1, 4, 3, 3))
    assert cost.flops == 324


def test_max_pool1d():
    # in 1x2x10, pool 3 stride 1 -> out 1x2x8 = 16; 16 * 3 = 48
    cost = rule("relax.nn.max_pool1d", {"pool_size": [3], "strides": [1]}, [T(1, 2, 10)], T(1, 2, 8))
    assert cost.flops == 48


def test_avg_pool3d():
    # in 1x1x4x4x4, pool 2x2x2 stride 2 -> out 1x1x2x2x2 = 8; 8 * 8 = 64
    cost = rule(
        "relax.nn.avg_pool3d", {"pool_size": [2, 2, 2], "strides": [2, 2, 2]}, [T(1, 1, 4, 4, 4)], T(1, 1, 2, 2, 2)
    )
    assert cost.flops == 64


def test_pool_nhwc():
    # layout does not matter: in 1x8x8x4 NHWC, pool 2x2 stride 2 -> out 1x4x4x4 = 64; 64 * 4 = 256
    cost = rule(
        "relax.nn.max_pool2d",
        {"pool_size": [2, 2], "strides": [2, 2], "layout": "NHWC"},
        [T(1, 8, 8, 4)],
        T(1, 4, 4, 4),
    )
    assert cost.flops == 256


def test_adaptive_avg_pool2d_global():
    # in 1x8x7x7 = 392, out 1x8x1x1 = 8 -> 392 + 8 = 400
    cost = rule("relax.nn.adaptive_avg_pool2d", {"output_size": [1, 1]}, [T(1, 8, 7, 7)], T(1, 8, 1, 1))
    assert cost.flops == 400


def test_adaptive_avg_pool1d():
    # in 1x4x10 = 40, out 1x4x5 = 20 -> 60
    assert rule("relax.nn.adaptive_avg_pool1d", {"output_size": [5]}, [T(1, 4, 10)], T(1, 4, 5)).flops == 60


def test_adaptive_avg_pool3d():
    # in 1x2x4x4x4 = 128, out 1x2x2x2x2 = 16 -> 144
    cost = rule("relax.nn.adaptive_avg_pool3d", {"output_size": [2, 2, 2]}, [T(1, 2, 4, 4, 4)], T(1, 2, 2, 2, 2))
    assert cost.flops == 144


# ---- reduction ---------------------------------------------------------------------------

R = T(4, 5, 6)  # 120 elements


@pytest.mark.parametrize(
    "op", ["relax.sum", "relax.mean", "relax.max", "relax.min", "relax.prod", "relax.cumsum", "relax.cumprod"]
)
def test_reduction_one_per_input_element(op):
    # 1 * 120 input elements (the output size does not matter)
    cost = rule(op, {"axis": [1]}, [R], T(4, 6))
    assert cost.flops == 120 and cost.macs == 0
    assert RULES[op].category == "reduction"


@pytest.mark.parametrize("op", ["relax.argmax", "relax.argmin"])
def test_argmax(op):
    # 1 * 120; output int64 4x6
    c = cost_of(node(op, [R], [T(4, 6, dtype="int64")], attrs={"axis": 1}))
    assert c.flops == 120
    assert c.bytes_read == 480  # 120 * 4 B
    assert c.bytes_written == 192  # 24 * 8 B


def test_sum_bytes():
    c = cost_of(node("relax.sum", [R], [T(4, 6)], attrs={"axis": [1]}))
    assert c.bytes_read == 480  # 120 el * 4 B
    assert c.bytes_written == 96  # 24 el * 4 B


@pytest.mark.parametrize("op", ["relax.variance", "relax.std"])
def test_variance(op):
    # 4 per input element * 120 = 480
    assert rule(op, {"axis": [1]}, [R], T(4, 6)).flops == 480


def test_sort_last_axis():
    # x 4x8 = 32 elements, axis -1 length 8 -> 32 * log2(8) = 32 * 3 = 96
    assert rule("relax.sort", {"axis": -1}, [T(4, 8)], T(4, 8)).flops == 96


def test_sort_axis0():
    # x 4x8 = 32, axis 0 length 4 -> 32 * log2(4) = 32 * 2 = 64
    assert rule("relax.sort", {"axis": 0}, [T(4, 8)], T(4, 8)).flops == 64


def test_argsort_non_power_of_two():
    # x 3x5 = 15, axis length 5 -> 15 * log2(5) = 15 * 2.3219 = 34.83 -> 34 (truncated)
    assert rule("relax.argsort", {"axis": -1}, [T(3, 5)], T(3, 5, dtype="int64")).flops == 34


def test_topk():
    # topk k=2 on x 4x8 along -1: input 32 * log2(8) = 96 (counted on the input, not the k outputs)
    cost = rule("relax.topk", {"k": 2, "axis": -1}, [T(4, 8)], T(4, 2), T(4, 2, dtype="int64"))
    assert cost.flops == 96


def test_median_with_axis():
    # median along axis 1 of 4x8 -> 32 * log2(8) = 96
    assert rule("relax.median", {"axis": [1]}, [T(4, 8)], T(4)).flops == 96


def test_median_axis_none_sorts_everything():
    # x 4x8 = 32 elements flattened: 32 * log2(32) = 32 * 5 = 160
    assert rule("relax.median", {"axis": None}, [T(4, 8)], T()).flops == 160


# ---- data movement -----------------------------------------------------------------------


def test_take_embedding_reads_only_rows():
    table = T(1000, 64)  # 64000 el * 4 B = 256000 B
    idx = T(2, 8, dtype="int64")  # 16 el * 8 B = 128 B
    out = T(2, 8, 64)  # 1024 el * 4 B = 4096 B
    c = cost_of(node("relax.take", [table, idx], [out], attrs={"axis": 0}, kinds=["weight", "input"]))
    assert c.category == "data_movement"
    assert c.flops == 0 and c.macs == 0
    assert c.bytes_read == 4224  # out 4096 + indices 128, NOT the 256000 B table
    assert c.bytes_written == 4096
    assert c.weight_bytes == 256000  # the table still counts as weight storage


def test_take_int32_indices():
    # out 2x8x64 float16 = 1024 * 2 B = 2048; indices 16 * 4 B = 64 -> 2112
    cost = rule(
        "relax.take", {"axis": 0}, [T(1000, 64, dtype="float16"), T(2, 8, dtype="int32")], T(2, 8, 64, dtype="float16")
    )
    assert cost.bytes_read == 2112


def test_strided_slice():
    # x 4x16 float32 -> out 4x8 = 32 el * 4 B = 128 B read, 128 written
    c = cost_of(node("relax.strided_slice", [T(4, 16)], [T(4, 8)], attrs={"axes": [1], "begin": [0], "end": [8]}))
    assert c.flops == 0
    assert c.bytes_read == 128 and c.bytes_written == 128


def test_dynamic_strided_slice_counts_index_tensors():
    # out 4x8 float32 = 128 B; begin/end/strides int64 (2,) = 16 B each = 48 -> 176
    i = T(2, dtype="int64")
    assert rule("relax.dynamic_strided_slice", {}, [T(4, 16), i, i, i], T(4, 8)).bytes_read == 176


def test_gather_elements():
    # out 4x3 float32 = 48 B; indices 4x3 int64 = 96 B -> 144
    cost = rule("relax.gather_elements", {"axis": 1}, [T(4, 16), T(4, 3, dtype="int64")], T(4, 3))
    assert cost.bytes_read == 144 and cost.flops == 0


def test_gather_nd():
    # data 5x6x7, indices 3x2 int64 = 48 B, out 3x7 = 21 el * 4 B = 84 B -> 132
    cost = rule("relax.gather_nd", {}, [T(5, 6, 7), T(3, 2, dtype="int64")], T(3, 7))
    assert cost.bytes_read == 132


@pytest.mark.parametrize(
    ("op", "out"),
    [
        ("relax.reshape", T(6, 4)),
        ("relax.permute_dims", T(4, 3, 2)),
        ("relax.flatten", T(24)),
        ("relax.expand_dims", T(1, 2, 3, 4)),
    ],
)
def test_pure_data_movement(op, out):
    # x 2x3x4 float32: 0 FLOPs; reads 24 * 4 = 96 B, writes 96 B
    c = cost_of(node(op, [X], [out]))
    assert c.category == "data_movement"
    assert c.flops == 0 and c.macs == 0
    assert c.bytes_read == 96 and c.bytes_written == 96


def test_concat_bytes():
    # a 2x3 (24 B) + b 2x5 (40 B) -> out 2x8 (64 B)
    c = cost_of(node("relax.concat", [T(2, 3), T(2, 5)], [T(2, 8)], attrs={"axis": 1}))
    assert c.flops == 0 and c.bytes_read == 64 and c.bytes_written == 64


def test_split_bytes_count_every_output():
    # x 2x8 (64 B) -> two 2x4 outputs (32 B each) -> written 64
    c = cost_of(node("relax.split", [T(2, 8)], [T(2, 4), T(2, 4)], attrs={"indices_or_sections": 2}))
    assert c.bytes_read == 64 and c.bytes_written == 64


def test_astype_bytes():
    # float32 2x3x4 (96 B) -> float16 (48 B)
    c = cost_of(node("relax.astype", [X], [T(2, 3, 4, dtype="float16")], attrs={"dtype": "float16"}))
    assert c.flops == 0 and c.bytes_read == 96 and c.bytes_written == 48


def test_full_reads_only_fill_scalar():
    # fill value 0-d float32 (4 B); out 2x3 float32 = 24 B
    c = cost_of(node("relax.full", [T()], [T(2, 3)]))
    assert c.flops == 0 and c.bytes_read == 4 and c.bytes_written == 24


def test_full_like_reads_only_fill_scalar():
    # x 2x3 only lends its shape; fill value 4 B -> read 4
    assert rule("relax.full_like", {}, [T(2, 3), T()], T(2, 3)).bytes_read == 4


@pytest.mark.parametrize(
    ("op", "inputs"),
    [
        ("relax.zeros", []),
        ("relax.ones", []),
        ("relax.zeros_like", [T(2, 3)]),
        ("relax.ones_like", [T(2, 3)]),
    ],
)
def test_zeros_reads_nothing(op, inputs):
    c = cost_of(node(op, inputs, [T(2, 3)]))
    assert c.bytes_read == 0 and c.bytes_written == 24  # 6 el * 4 B


def test_one_hot_reads_its_indices():
    # indices (4,) int64 = 32 B; on/off values are PrimValues; out 4x10 float32
    assert cost_of(node("relax.one_hot", [T(4, dtype="int64")], [T(4, 10)], {"depth": 10})).bytes_read == 32


def test_meshgrid_reads_its_inputs():
    # inputs (3,) 12 B + (4,) 16 B = 28 B
    assert cost_of(node("relax.meshgrid", [T(3), T(4)], [T(3, 4), T(3, 4)], {"indexing": "ij"})).bytes_read == 28


# ---- resize and other --------------------------------------------------------------------


def test_resize2d_nearest():
    # in 1x3x4x4 = 48 el (192 B), out 1x3x8x8 = 192 el (768 B): 0 FLOPs
    c = cost_of(node("relax.image.resize2d", [T(1, 3, 4, 4)], [T(1, 3, 8, 8)], attrs={"method": "nearest_neighbor"}))
    assert c.flops == 0
    assert c.bytes_read == 192 and c.bytes_written == 768


def test_resize2d_linear():
    # 7 per output * 192 = 1344
    cost = rule("relax.image.resize2d", {"method": "linear"}, [T(1, 3, 4, 4)], T(1, 3, 8, 8))
    assert cost.flops == 1344


def test_resize2d_default_method_is_linear():
    # 7 * 192 = 1344
    assert rule("relax.image.resize2d", {}, [T(1, 3, 4, 4)], T(1, 3, 8, 8)).flops == 1344


def test_resize2d_cubic():
    # 4^2 = 16 taps: 16 mul + 15 add = 31 per output; 31 * 192 = 5952
    assert rule("relax.image.resize2d", {"method": "cubic"}, [T(1, 3, 4, 4)], T(1, 3, 8, 8)).flops == 5952


def test_resize3d():
    # out 1x1x4x4x4 = 64; linear 2^3 mul + 7 add = 15 -> 960; nearest 0
    inp, out = [T(1, 1, 2, 2, 2)], T(1, 1, 4, 4, 4)
    assert rule("relax.image.resize3d", {"method": "linear"}, inp, out).flops == 960
    assert rule("relax.image.resize3d", {"method": "nearest_neighbor"}, inp, out).flops == 0


def test_grid_sample():
    # out 1x3x5x5 = 75 -> 7 * 75 = 525
    assert rule("relax.image.grid_sample", {}, [T(1, 3, 8, 8), T(1, 5, 5, 2)], T(1, 3, 5, 5)).flops == 525


def test_affine_grid():
    # out 1x5x5x2 = 50 -> 4 * 50 = 200
    assert rule("relax.image.affine_grid", {}, [T(1, 2, 3)], T(1, 5, 5, 2)).flops == 200


def test_bucketize():
    # out (10,) -> 8 * 10 = 80
    assert rule("relax.bucketize", {}, [T(10), T(16)], T(10, dtype="int64")).flops == 80


def test_nll_loss_no_reduction():
    # reduction none: out (8,) -> 1 * 8 = 8
    cost = rule("relax.nn.nll_loss", {"reduction": "none"}, [T(8, 10), T(8, dtype="int64")], T(8))
    assert cost.flops == 8


def test_cross_entropy_scales_with_input():
    # predictions and labels 8x10 = 80 elements -> 5 * 80 = 400 (output is a 0-d scalar)
    cost = rule("relax.nn.cross_entropy_with_logits", {}, [T(8, 10), T(8, 10)], T())
    assert cost.flops == 400


# ---- cost_of: weights, ignored, unsupported, call_tir ------------------------------------


def test_weight_bytes_counts_only_weight_operands():
    # activation 2x3x4 (96 B), input 2x3x4 (96 B), weight 3x4 float16 (24 B) -> weight_bytes 24
    w = T(3, 4, dtype="float16")
    c = cost_of(node("relax.add", [X, X, w], [X], kinds=["activation", "input", "weight"]))
    assert c.weight_bytes == 24
    assert c.bytes_read == 216  # 96 + 96 + 24


def test_ignored_op_costs_nothing():
    assert "relax.shape_of" in IGNORED
    c = cost_of(node("relax.shape_of", [X], [T(3, dtype="int64")]))
    assert c.supported and c.unsupported_key is None
    assert c.flops == 0 and c.macs == 0 and c.bytes_read == 0 and c.bytes_written == 0


def test_unknown_op_is_unsupported_but_bytes_count():
    c = cost_of(node("relax.made_up_op", [X, T(4)], [X]))
    assert not c.supported and c.unsupported_key == "relax.made_up_op"
    assert c.flops == 0 and c.macs == 0
    assert c.bytes_read == 112  # 96 + 4 el * 4 B
    assert c.bytes_written == 96


def test_registered_unsupported_op():
    assert "relax.nonzero" in UNSUPPORTED
    c = cost_of(node("relax.nonzero", [X], [T(3, 24, dtype="int64")]))
    assert not c.supported and c.unsupported_key == "relax.nonzero"
    assert c.bytes_read == 96  # 24 * 4 B
    assert c.bytes_written == 576  # 72 el * 8 B


def test_unsupported_key_includes_callee():
    c = cost_of(node("relax.call_dps_packed", [X], [X], callee="my_packed_fn"))
    assert not c.supported and c.unsupported_key == "relax.call_dps_packed:my_packed_fn"


def test_call_tir_with_flops():
    c = cost_of(node("relax.call_tir", [T(8, 16), T(16, 32)], [T(8, 32)], callee="fused_einsum", tir_flops=1000))
    assert c.supported and c.category == "matmul"
    assert c.flops == 1000 and c.macs == 500  # 1000 // 2
    assert c.bytes_read == 2560  # (128 + 512) el * 4 B
    assert c.bytes_written == 1024  # 256 el * 4 B


def test_call_tir_macs_are_the_prim_funcs_products_when_counted():
    # fused_matmul_add of (8, 16) x (16, 32) + bias: TIR FLOPs 2 x 4,096 + 256 bias adds; MACs the products alone
    op = node("relax.call_tir", [T(8, 16), T(16, 32)], [T(8, 32)], callee="fused_matmul_add", tir_flops=8448)
    assert cost_of(op).macs == 4224  # not counted: half the FLOPs, the bias adds among them
    op.tir_macs = 4096  # 8 x 16 x 32
    c = cost_of(op)
    assert c.macs == 4096 and c.flops == 8448


def test_call_tir_elementwise_has_no_macs():
    c = cost_of(node("relax.call_tir", [X], [X], callee="fused_add_relu", tir_flops=48))
    assert c.category == "elementwise" and c.flops == 48 and c.macs == 0


def test_call_tir_inplace_conv():
    c = cost_of(node("relax.call_tir_inplace", [X], [X], callee="fused_conv2d_add", tir_flops=101))
    assert c.category == "conv" and c.macs == 50  # 101 // 2


def test_call_tir_without_flops_is_unsupported():
    c = cost_of(node("relax.call_tir", [T(8, 16), T(16, 32)], [T(8, 32)], callee="fused_einsum", tir_flops=None))
    assert not c.supported and c.unsupported_key == "relax.call_tir:fused_einsum"
    assert c.category == "matmul" and c.flops == 0 and c.macs == 0
    assert c.bytes_read == 2560 and c.bytes_written == 1024  # bytes are still counted


@pytest.mark.parametrize(
    ("callee", "category"),
    [
        ("conv2d_nchw", "conv"),
        ("add", "elementwise"),
        (None, "elementwise"),
        ("fused_conv2d_add_relu", "conv"),
        ("Fused_MatMul_Add", "matmul"),
        ("dense", "matmul"),
        ("softmax", "normalization"),  # "softmax" contains "max" but must not be a reduction
        ("layer_norm", "normalization"),
        ("max_pool2d", "pooling"),
        ("sum", "reduction"),
        ("argmax", "reduction"),
        ("transpose", "data_movement"),
        ("conv2d_transpose_nchw", "conv"),
    ],
)
def test_tir_category(callee, category):
    assert tir_category(callee) == category


@pytest.mark.parametrize("callee", ["maximum", "minimum"])
def test_tir_category_binary_max_min_is_elementwise(callee):
    assert tir_category(callee) == "elementwise"


# ---- registry ----------------------------------------------------------------------------


def test_duplicate_registration_raises():
    def fn(attrs, inputs, outputs):
        raise AssertionError("never called")

    try:
        register("relax.test_dup", category="other")(fn)
        with pytest.raises(ValueError):
            register("relax.test_dup", category="other")(fn)
    finally:
        RULES.pop("relax.test_dup", None)
    assert "relax.test_dup" not in RULES


def test_register_over_existing_rule_or_ignored_raises():
    with pytest.raises(ValueError):
        register("relax.add", category="elementwise")(lambda a, i, o: None)
    with pytest.raises(ValueError):
        ignore("dup", "relax.shape_of")
    assert RULES["relax.add"].category == "elementwise"


def test_unknown_category_raises():
    with pytest.raises(ValueError):
        register("relax.test_bad_category", category="not_a_category")
    assert "relax.test_bad_category" not in RULES


def test_every_rule_category_known():
    assert RULES
    for op, entry in RULES.items():
        assert entry.category in CATEGORIES, op
        assert entry.op == op


def test_rule_sets_are_disjoint():
    assert not set(RULES) & set(IGNORED)
    assert not set(RULES) & set(UNSUPPORTED)
    assert not set(IGNORED) & set(UNSUPPORTED)


# ---- detection heads (relax.vision): documented approximations -------------------------------------------


def _vision_cost(build, shapes):
    import tvm  # noqa: F401
    from tvm import relax

    from passes import tvm_ir
    from passes.costs import cost_of

    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", xs):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(build(relax.op.vision, *xs)))
        bb.emit_func_output(out)
    return cost_of(tvm_ir.extract(bb.get()).ops[0])


def test_roi_align_counts_its_bilinear_samples():
    c = _vision_cost(lambda v, d, r: v.roi_align(d, r, (7, 7), 0.0625, 2), [[1, 256, 50, 50], [100, 5]])
    # out 100 x 256 x 7 x 7 = 1,254,400 elements, 2 x 2 samples each: 5,017,600 samples;
    # 5,017,600 x (13 + 1) + 1,254,400 = 71,500,800 FLOPs
    assert c.supported and c.category == "pooling" and c.flops == 71_500_800
    # reads: rois 100 x 5 x 4 B = 2,000 B + min(feature map 2,560,000 B, 4 x 5,017,600 x 4 B) = 2,562,000 B
    assert c.bytes_read == 2_562_000 and c.bytes_written == 1_254_400 * 4


def test_roi_pool_and_nms_worst_cases():
    c = _vision_cost(lambda v, d, r: v.roi_pool(d, r, (7, 7), 0.0625), [[1, 256, 50, 50], [100, 5]])
    # bins of ceil(50 / 7)^2 = 8 x 8 = 64 compares for each of 1,254,400 outputs = 80,281,600
    assert c.flops == 80_281_600
    from tvm import relax

    nms = _vision_cost(
        lambda v, b, s: v.all_class_non_max_suppression(
            b, s, relax.const(10, "int64"), relax.const(0.5, "float32"), relax.const(0.1, "float32")
        ),
        [[1, 1000, 4], [1, 80, 1000]],
    )
    # 80 classes x (sort ceil(1000 log2 1000) = 9,966 + 14 x 1000 x 999 / 2 = 6,993,000) = 560,232,480
    assert nms.supported and nms.flops == 80 * (9_966 + 6_993_000)
