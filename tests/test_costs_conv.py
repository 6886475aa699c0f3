"""Hand-computed cost checks for the convolution rules in passes/costs/conv.py.

Convention: MACs = numel(out) x (I/g) x kernel window; FLOPs = 2 x MACs.
Transposed convs: MACs = numel(in) x (O/g) x kernel window.
"""

from __future__ import annotations

from passes.costs import RULES, cost_of
from passes.graph import Operand, OpNode, TensorInfo


def T(*shape: int, dtype: str = "float32") -> TensorInfo:
    return TensorInfo(tuple(shape), dtype)


def rule(op: str, attrs: dict, inputs: list[TensorInfo], *outputs: TensorInfo):
    return RULES[op].fn(attrs, inputs, tuple(outputs))


# ---- conv1d / conv2d / conv3d ------------------------------------------------------------


def test_conv1d():
    # conv1d NCW: in 1x4x16, weight OIW 8x4x3, out 1x8x14
    # MACs = 1*8*14 * (4*3) = 112 * 12 = 1344
    cost = rule("relax.nn.conv1d", {}, [T(1, 4, 16), T(8, 4, 3)], T(1, 8, 14))
    assert cost.macs == 1344 and cost.flops == 2688  # 2 * 1344


def test_conv2d_nchw():
    # conv2d NCHW: out 1x8x14x14, weight 8x3x3x3 -> MACs = 1*8*14*14 * (3*3*3) = 1568 * 27 = 42336
    cost = rule(
        "relax.nn.conv2d",
        {"data_layout": "NCHW", "kernel_layout": "OIHW"},
        [T(1, 3, 16, 16), T(8, 3, 3, 3)],
        T(1, 8, 14, 14),
    )
    assert cost.macs == 42336 and cost.flops == 84672  # 2 * 42336


def test_conv2d_default_layout_is_oihw():
    # no layout attrs: same as OIHW -> 1568 * 27 = 42336
    cost = rule("relax.nn.conv2d", {}, [T(1, 3, 16, 16), T(8, 3, 3, 3)], T(1, 8, 14, 14))
    assert cost.macs == 42336


def test_conv2d_batch():
    # batch 4: out 4x8x14x14 = 6272 elements, x 27 = 169344
    cost = rule("relax.nn.conv2d", {}, [T(4, 3, 16, 16), T(8, 3, 3, 3)], T(4, 8, 14, 14))
    assert cost.macs == 169344 and cost.flops == 338688  # 2 * 169344


def test_conv3d():
    # conv3d NCDHW: in 1x2x8x8x8, weight OIDHW 4x2x3x3x3, out 1x4x6x6x6
    # out numel = 4*6*6*6 = 864; window = 2*3*3*3 = 54 -> MACs = 864 * 54 = 46656
    cost = rule("relax.nn.conv3d", {}, [T(1, 2, 8, 8, 8), T(4, 2, 3, 3, 3)], T(1, 4, 6, 6, 6))
    assert cost.macs == 46656 and cost.flops == 93312  # 2 * 46656


# ---- groups ------------------------------------------------------------------------------


def test_conv2d_grouped_groups4():
    # groups=4: in 1x8x10x10, weight 16x(8/4=2)x3x3, out 1x16x8x8
    # MACs = 16*8*8 * (2*3*3) = 1024 * 18 = 18432
    cost = rule("relax.nn.conv2d", {"groups": 4}, [T(1, 8, 10, 10), T(16, 2, 3, 3)], T(1, 16, 8, 8))
    assert cost.macs == 18432 and cost.flops == 36864  # 2 * 18432


def test_conv2d_depthwise():
    # depthwise groups=C=8: in 1x8x10x10, weight 8x1x3x3, out 1x8x8x8
    # MACs = 8*8*8 * (1*3*3) = 512 * 9 = 4608
    cost = rule("relax.nn.conv2d", {"groups": 8}, [T(1, 8, 10, 10), T(8, 1, 3, 3)], T(1, 8, 8, 8))
    assert cost.macs == 4608 and cost.flops == 9216  # 2 * 4608


def test_conv1d_depthwise():
    # depthwise conv1d groups=6: in 2x6x20, weight 6x1x5, out 2x6x16
    # MACs = 2*6*16 * (1*5) = 192 * 5 = 960
    cost = rule("relax.nn.conv1d", {"groups": 6}, [T(2, 6, 20), T(6, 1, 5)], T(2, 6, 16))
    assert cost.macs == 960 and cost.flops == 1920  # 2 * 960


# ---- stride and dilation: MACs follow the output shape -----------------------------------


def test_conv2d_stride2():
    # stride 2, no pad: in 32x32, k=3 -> out floor((32-3)/2)+1 = 15 -> out 1x8x15x15 = 1800
    # MACs = 1800 * (3*3*3) = 48600
    cost = rule(
        "relax.nn.conv2d",
        {"strides": [2, 2], "padding": [0, 0, 0, 0]},
        [T(1, 3, 32, 32), T(8, 3, 3, 3)],
        T(1, 8, 15, 15),
    )
    assert cost.macs == 48600 and cost.flops == 97200  # 2 * 48600


def test_conv2d_dilation2():
    # dilation 2, k=3 -> effective kernel 5 -> out 32-5+1 = 28 -> out 1x8x28x28 = 6272
    # MACs = 6272 * 27 = 169344 (the dilated window still has 3*3 taps)
    cost = rule("relax.nn.conv2d", {"dilation": [2, 2]}, [T(1, 3, 32, 32), T(8, 3, 3, 3)], T(1, 8, 28, 28))
    assert cost.macs == 169344 and cost.flops == 338688  # 2 * 169344


def test_conv2d_stride_and_padding():
    # stride 2, pad 1: out floor((32+2-3)/2)+1 = 16 -> out 1x8x16x16 = 2048; MACs = 2048 * 27 = 55296
    cost = rule(
        "relax.nn.conv2d",
        {"strides": [2, 2], "padding": [1, 1, 1, 1]},
        [T(1, 3, 32, 32), T(8, 3, 3, 3)],
        T(1, 8, 16, 16),
    )
    assert cost.macs == 55296


# ---- layouts -----------------------------------------------------------------------------


def test_conv2d_nhwc_hwio_matches_nchw_oihw():
    # I=4 differs from the 3x3 kernel so a wrong output-channel axis would show.
    # NCHW/OIHW: out 1x8x14x14 = 1568; window 4*3*3 = 36 -> MACs = 1568 * 36 = 56448
    nchw = rule(
        "relax.nn.conv2d",
        {"data_layout": "NCHW", "kernel_layout": "OIHW"},
        [T(1, 4, 16, 16), T(8, 4, 3, 3)],
        T(1, 8, 14, 14),
    )
    # NHWC/HWIO (TFLite style): weight 3x3x4x8, out 1x14x14x8 -> same 56448
    nhwc = rule(
        "relax.nn.conv2d",
        {"data_layout": "NHWC", "kernel_layout": "HWIO"},
        [T(1, 16, 16, 4), T(3, 3, 4, 8)],
        T(1, 14, 14, 8),
    )
    assert nchw.macs == 56448 and nhwc.macs == 56448
    assert nhwc.flops == 112896  # 2 * 56448


def test_conv2d_nhwc_ohwi():
    # OHWI: weight 8x3x3x4 -> O axis 0; MACs = 1568 * (3*3*4) = 56448
    cost = rule(
        "relax.nn.conv2d",
        {"data_layout": "NHWC", "kernel_layout": "OHWI"},
        [T(1, 16, 16, 4), T(8, 3, 3, 4)],
        T(1, 14, 14, 8),
    )
    assert cost.macs == 56448


def test_conv2d_tflite_depthwise_hwoi():
    # TFLite depthwise as HWOI: weight 3x3x8x1, groups 8, out 1x8x8x8 (NHWC)
    # MACs = 8*8*8 * (3*3*1) = 512 * 9 = 4608, same as the NCHW depthwise case
    cost = rule(
        "relax.nn.conv2d",
        {"data_layout": "NHWC", "kernel_layout": "HWOI", "groups": 8},
        [T(1, 10, 10, 8), T(3, 3, 8, 1)],
        T(1, 8, 8, 8),
    )
    assert cost.macs == 4608


def test_conv1d_nwc_wio():
    # conv1d NWC/WIO: in 1x16x4, weight 3x4x8, out 1x14x8 -> MACs = 112 * (3*4) = 1344
    cost = rule(
        "relax.nn.conv1d", {"data_layout": "NWC", "kernel_layout": "WIO"}, [T(1, 16, 4), T(3, 4, 8)], T(1, 14, 8)
    )
    assert cost.macs == 1344


def test_conv3d_ndhwc_dhwio():
    # conv3d NDHWC/DHWIO: weight 3x3x3x2x4, out 1x6x6x6x4 = 864 -> MACs = 864 * (27*2) = 46656
    cost = rule(
        "relax.nn.conv3d",
        {"data_layout": "NDHWC", "kernel_layout": "DHWIO"},
        [T(1, 8, 8, 8, 2), T(3, 3, 3, 2, 4)],
        T(1, 6, 6, 6, 4),
    )
    assert cost.macs == 46656


def test_conv2d_blocked_layout():
    # NCHW4c / OIHW4o4i: C=8 -> in 1x2x8x8x4; O=16, I=8 -> weight (16/4, 8/4, 3, 3, 4, 4)
    # out NCHW4c 1x4x6x6x4 = 576 elements (16 channels x 6x6)
    # MACs = 576 * (I*kh*kw = 8*3*3 = 72) = 41472
    cost = rule(
        "relax.nn.conv2d",
        {"data_layout": "NCHW4c", "kernel_layout": "OIHW4o4i", "out_layout": "NCHW4c"},
        [T(1, 2, 8, 8, 4), T(4, 2, 3, 3, 4, 4)],
        T(1, 4, 6, 6, 4),
    )
    assert cost.macs == 41472


# ---- transposed convs --------------------------------------------------------------------


def test_conv2d_transpose():
    # IOHW weight 4x6x3x3: in 1x4x5x5 = 100 elements, out 1x6x7x7
    # MACs = in_numel * O/g * kh*kw = 100 * 6 * 9 = 5400
    cost = rule("relax.nn.conv2d_transpose", {"kernel_layout": "IOHW"}, [T(1, 4, 5, 5), T(4, 6, 3, 3)], T(1, 6, 7, 7))
    assert cost.macs == 5400 and cost.flops == 10800  # 2 * 5400


def test_conv2d_transpose_groups():
    # groups=4, IOHW weight (I=8, O/g=2, 3, 3); stride 2: out (5-1)*2+3 = 11 -> out 1x8x11x11
    # MACs = in_numel * O/g * kh*kw = (8*5*5 = 200) * 2 * 9 = 3600
    cost = rule(
        "relax.nn.conv2d_transpose", {"groups": 4, "strides": [2, 2]}, [T(1, 8, 5, 5), T(8, 2, 3, 3)], T(1, 8, 11, 11)
    )
    assert cost.macs == 3600 and cost.flops == 7200  # 2 * 3600


def test_conv1d_transpose():
    # IOW weight 4x2x3: in 1x4x10 = 40, out 1x2x12 -> MACs = 40 * 2 * 3 = 240
    cost = rule("relax.nn.conv1d_transpose", {}, [T(1, 4, 10), T(4, 2, 3)], T(1, 2, 12))
    assert cost.macs == 240 and cost.flops == 480  # 2 * 240


def test_conv3d_transpose():
    # IODHW weight 2x3x2x2x2, stride 2: in 1x2x4x4x4 = 128, out 1x3x8x8x8
    # MACs = 128 * 3 * (2*2*2) = 128 * 24 = 3072
    cost = rule(
        "relax.nn.conv3d_transpose", {"strides": [2, 2, 2]}, [T(1, 2, 4, 4, 4), T(2, 3, 2, 2, 2)], T(1, 3, 8, 8, 8)
    )
    assert cost.macs == 3072 and cost.flops == 6144  # 2 * 3072


# ---- byte accounting through cost_of -----------------------------------------------------


def _conv_node(dtype: str) -> OpNode:
    x = T(1, 3, 16, 16, dtype=dtype)
    w = T(8, 3, 3, 3, dtype=dtype)
    return OpNode(
        index=0,
        name="lv0",
        op="relax.nn.conv2d",
        attrs={"kernel_layout": "OIHW"},
        operands=[Operand(x, None, "input", 0), Operand(w, None, "weight", 1)],
        outputs=(T(1, 8, 14, 14, dtype=dtype),),
    )


def test_conv2d_cost_of_bytes_float32():
    c = cost_of(_conv_node("float32"))
    assert c.category == "conv" and c.supported
    assert c.macs == 42336 and c.flops == 84672  # 1568 * 27, x2
    # read: x 3*16*16 = 768 el * 4 B = 3072; w 8*27 = 216 el * 4 B = 864 -> 3936
    assert c.bytes_read == 3936
    # written: out 1568 el * 4 B = 6272
    assert c.bytes_written == 6272
    # weight bytes: only the weight operand, 864
    assert c.weight_bytes == 864


def test_conv2d_cost_of_bytes_float16_halves():
    c = cost_of(_conv_node("float16"))
    assert c.macs == 42336  # dtype does not change the arithmetic
    assert c.bytes_read == 1968  # 3936 / 2 = (768 + 216) * 2 B
    assert c.bytes_written == 3136  # 1568 * 2 B
    assert c.weight_bytes == 432  # 216 * 2 B
