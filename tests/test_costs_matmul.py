"""Hand-computed cost checks for passes/costs/matmul.py: matmul, outer, einsum, attention.

Convention: matmul MACs = numel(out) x K; einsum MACs = (n_operands - 1) x prod(every index size);
attention MACs = B x N x S x T x (D + Dv); FLOPs = 2 x MACs.
"""

from __future__ import annotations

from passes.costs import RULES, cost_of
from passes.graph import Operand, OpNode, TensorInfo


def T(*shape: int, dtype: str = "float32") -> TensorInfo:
    return TensorInfo(tuple(shape), dtype)


def rule(op: str, attrs: dict, inputs: list[TensorInfo], *outputs: TensorInfo):
    return RULES[op].fn(attrs, inputs, tuple(outputs))


# ---- matmul ------------------------------------------------------------------------------


def test_matmul_2d():
    # a 8x16 @ b 16x32 -> out 8x32 = 256 elements, K = 16 -> MACs = 256 * 16 = 4096
    cost = rule("relax.matmul", {}, [T(8, 16), T(16, 32)], T(8, 32))
    assert cost.macs == 4096 and cost.flops == 8192  # 2 * 4096


def test_matmul_batched():
    # a 2x8x16 @ b 2x16x4 -> out 2x8x4 = 64 elements, K = 16 -> MACs = 64 * 16 = 1024
    cost = rule("relax.matmul", {}, [T(2, 8, 16), T(2, 16, 4)], T(2, 8, 4))
    assert cost.macs == 1024 and cost.flops == 2048  # 2 * 1024


def test_matmul_broadcast_batch():
    # a 4x1x5x6 @ b 3x6x7 -> out 4x3x5x7 = 420 elements, K = 6 -> MACs = 420 * 6 = 2520
    cost = rule("relax.matmul", {}, [T(4, 1, 5, 6), T(3, 6, 7)], T(4, 3, 5, 7))
    assert cost.macs == 2520 and cost.flops == 5040  # 2 * 2520


def test_matmul_1d_by_2d():
    # a (6,) @ b 6x7 -> out (7,), K = 6 -> MACs = 7 * 6 = 42
    cost = rule("relax.matmul", {}, [T(6), T(6, 7)], T(7))
    assert cost.macs == 42 and cost.flops == 84  # 2 * 42


def test_matmul_2d_by_1d():
    # a 5x6 @ b (6,) -> out (5,), K = 6 -> MACs = 5 * 6 = 30
    cost = rule("relax.matmul", {}, [T(5, 6), T(6)], T(5))
    assert cost.macs == 30 and cost.flops == 60  # 2 * 30


def test_matmul_1d_by_1d():
    # dot product: a (6,) @ b (6,) -> out () = 1 element, K = 6 -> MACs = 6
    cost = rule("relax.matmul", {}, [T(6), T(6)], T())
    assert cost.macs == 6 and cost.flops == 12


def test_matmul_batched_by_1d():
    # a 3x5x6 @ b (6,) -> out 3x5 = 15 elements, K = 6 -> MACs = 90
    cost = rule("relax.matmul", {}, [T(3, 5, 6), T(6)], T(3, 5))
    assert cost.macs == 90


def test_matmul_cost_of_bytes_and_weight_bytes():
    # linear layer in float16: x 8x16 activation, w 16x32 weight, out 8x32
    x, w, out = T(8, 16, dtype="float16"), T(16, 32, dtype="float16"), T(8, 32, dtype="float16")
    node = OpNode(
        index=3,
        name="lv3",
        op="relax.matmul",
        attrs={},
        operands=[Operand(x, 2, "activation", 10), Operand(w, None, "weight", 4)],
        outputs=(out,),
    )
    c = cost_of(node)
    assert c.category == "matmul" and c.supported
    assert c.macs == 4096 and c.flops == 8192  # 8*32 * 16
    assert c.bytes_read == 1280  # x 128 el * 2 B = 256 + w 512 el * 2 B = 1024 -> 1280
    assert c.bytes_written == 512  # 256 el * 2 B
    assert c.weight_bytes == 1024  # only w


# ---- outer -------------------------------------------------------------------------------


def test_outer():
    # a (3,) outer b (4,) -> out 3x4: 1 multiply per output, no accumulation -> 12 FLOPs, 0 MACs
    cost = rule("relax.outer", {}, [T(3), T(4)], T(3, 4))
    assert cost.macs == 0 and cost.flops == 12


# ---- einsum ------------------------------------------------------------------------------


def test_einsum_batched_matmul():
    # "bij,bjk->bik": a 2x3x4, b 2x4x5 -> b=2, i=3, j=4, k=5 -> MACs = 2*3*4*5 = 120
    cost = rule("relax.einsum", {"subscripts": "bij,bjk->bik"}, [T(2, 3, 4), T(2, 4, 5)], T(2, 3, 5))
    assert cost.macs == 120 and cost.flops == 240  # 2 * 120


def test_einsum_matches_matmul():
    # "ij,jk->ik" on 8x16, 16x32: i*j*k = 8*16*32 = 4096, same as relax.matmul
    cost = rule("relax.einsum", {"subscripts": "ij,jk->ik"}, [T(8, 16), T(16, 32)], T(8, 32))
    assert cost.macs == 4096


def test_einsum_ellipsis():
    # "...ij,...jk->...ik": a 2x3x4x5 (ellipsis 2x3, i=4, j=5), b 3x5x6 (ellipsis 3, j=5, k=6)
    # broadcast ellipsis 2x3 -> MACs = 2*3*4*5*6 = 720 (= numel(out 2x3x4x6 = 144) * K 5)
    cost = rule("relax.einsum", {"subscripts": "...ij,...jk->...ik"}, [T(2, 3, 4, 5), T(3, 5, 6)], T(2, 3, 4, 6))
    assert cost.macs == 720 and cost.flops == 1440  # 2 * 720


def test_einsum_spaces_in_subscripts():
    # "bij, bjk -> bik" with spaces: same as test_einsum_batched_matmul, 120
    cost = rule("relax.einsum", {"subscripts": "bij, bjk -> bik"}, [T(2, 3, 4), T(2, 4, 5)], T(2, 3, 5))
    assert cost.macs == 120


def test_einsum_three_operands():
    # "ij,jk,kl->il": i=2, j=3, k=4, l=5, contracted left to right like torch.einsum:
    # ij,jk -> ik costs i*j*k = 2*3*4 = 24 MACs; ik,kl -> il costs i*k*l = 2*4*5 = 40; total 64
    cost = rule("relax.einsum", {"subscripts": "ij,jk,kl->il"}, [T(2, 3), T(3, 4), T(4, 5)], T(2, 5))
    assert cost.macs == 64 and cost.flops == 128  # 2 * 64


def test_einsum_single_operand_reduction():
    # "ij->i" on 3x4: no multiplies; sums drop j: 3*4 - 3 = 9 adds
    cost = rule("relax.einsum", {"subscripts": "ij->i"}, [T(3, 4)], T(3))
    assert cost.macs == 0 and cost.flops == 9


def test_einsum_single_operand_full_sum():
    # "ij->" on 3x4: 12 elements summed into 1 -> 11 adds
    cost = rule("relax.einsum", {"subscripts": "ij->"}, [T(3, 4)], T())
    assert cost.macs == 0 and cost.flops == 11


def test_einsum_trace():
    # "ii->" on 4x4: i=4, sum of 4 diagonal elements -> 3 adds
    cost = rule("relax.einsum", {"subscripts": "ii->"}, [T(4, 4)], T())
    assert cost.macs == 0 and cost.flops == 3


def test_einsum_transpose_is_free():
    # "ij->ji": nothing dropped -> 0 FLOPs
    cost = rule("relax.einsum", {"subscripts": "ij->ji"}, [T(3, 4)], T(4, 3))
    assert cost.macs == 0 and cost.flops == 0


def test_einsum_single_operand_ellipsis_reduction():
    # "...ij->...i" on 2x3x4: ellipsis 2, i=3, j=4 -> total 24, kept 2*3 = 6 -> 24 - 6 = 18 adds
    cost = rule("relax.einsum", {"subscripts": "...ij->...i"}, [T(2, 3, 4)], T(2, 3))
    assert cost.macs == 0 and cost.flops == 18


# ---- attention ---------------------------------------------------------------------------


def test_attention_t_neq_s_dv_neq_d():
    # q (B=2, S=8, N=4, D=16), k (2, T=10, 4, 16), v (2, 10, 4, Dv=32) -> out 2x8x4x32
    # MACs = B*N*S*T*(D + Dv) = 2*4*8*10 * (16 + 32) = 640 * 48 = 30720
    cost = rule("relax.nn.attention", {}, [T(2, 8, 4, 16), T(2, 10, 4, 16), T(2, 10, 4, 32)], T(2, 8, 4, 32))
    assert cost.macs == 30720 and cost.flops == 61440  # 2 * 30720


def test_attention_self():
    # self-attention q = k = v = 1x128x8x64: MACs = 1*8*128*128 * (64 + 64) = 131072 * 128 = 16777216
    q = T(1, 128, 8, 64)
    cost = rule("relax.nn.attention", {}, [q, q, q], q)
    assert cost.macs == 16777216 and cost.flops == 33554432  # 2 * 16777216


def test_attention_bias():
    # same shapes as test_attention_t_neq_s_dv_neq_d plus a bias (B, N, S, T) = 2x4x8x10: MACs 30720
    cost = rule(
        "relax.nn.attention_bias",
        {},
        [T(2, 8, 4, 16), T(2, 10, 4, 16), T(2, 10, 4, 32), T(2, 4, 8, 10)],
        T(2, 8, 4, 32),
    )
    assert cost.macs == 30720 and cost.flops == 61440


def test_attention_category_and_bytes():
    q, k, v, out = T(2, 8, 4, 16), T(2, 10, 4, 16), T(2, 10, 4, 32), T(2, 8, 4, 32)
    node = OpNode(
        index=0,
        name="lv0",
        op="relax.nn.attention",
        attrs={},
        operands=[Operand(t, None, "input", i) for i, t in enumerate((q, k, v))],
        outputs=(out,),
    )
    c = cost_of(node)
    assert c.category == "attention"
    # q 1024 el + k 1280 el + v 2560 el = 4864 el * 4 B = 19456
    assert c.bytes_read == 19456
    assert c.bytes_written == 8192  # 2048 el * 4 B
    assert c.weight_bytes == 0
