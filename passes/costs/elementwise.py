"""Elementwise arithmetic and activations: a documented number of FLOPs per output element.

NB: a transcendental (exp, log, tanh, erf, sin, ...) counts as 1 FLOP, like an add; composite
activations count the primitive ops of their usual formula:
sigmoid = neg, exp, add, div (4); silu = sigmoid x x (5); gelu = x/sqrt2, erf, +1, x0.5, xx (5);
gelu_tanh = x^3 (2), x0.044715, +x, xsqrt(2/pi), tanh, +1, x0.5, xx (9); softplus = exp, +1, log (3);
selu = exp, -1, xalpha, select, xscale (5); leaky_relu / prelu = multiply, select (2); clip = max, min (2).
"""

from __future__ import annotations

from .registry import per_output_element, register

FLOPS_PER_ELEMENT: dict[str, float] = {
    # binary arithmetic and comparison
    **dict.fromkeys(
        [
            "relax.add",
            "relax.subtract",
            "relax.multiply",
            "relax.divide",
            "relax.floor_divide",
            "relax.mod",
            "relax.floor_mod",
            "relax.maximum",
            "relax.minimum",
            "relax.power",
            "relax.atan2",
            "relax.equal",
            "relax.not_equal",
            "relax.less",
            "relax.less_equal",
            "relax.greater",
            "relax.greater_equal",
            "relax.logical_and",
            "relax.logical_or",
            "relax.logical_xor",
            "relax.bitwise_and",
            "relax.bitwise_or",
            "relax.bitwise_xor",
            "relax.left_shift",
            "relax.right_shift",
            "relax.where",
        ],
        1,
    ),
    # unary arithmetic and transcendentals
    **dict.fromkeys(
        [
            "relax.negative",
            "relax.abs",
            "relax.sign",
            "relax.floor",
            "relax.ceil",
            "relax.round",
            "relax.trunc",
            "relax.square",
            "relax.sqrt",
            "relax.rsqrt",
            "relax.exp",
            "relax.log",
            "relax.erf",
            "relax.sin",
            "relax.cos",
            "relax.tan",
            "relax.sinh",
            "relax.cosh",
            "relax.tanh",
            "relax.asin",
            "relax.acos",
            "relax.atan",
            "relax.asinh",
            "relax.acosh",
            "relax.atanh",
            "relax.logical_not",
            "relax.bitwise_not",
            "relax.isfinite",
            "relax.isinf",
            "relax.isnan",
            "relax.nn.relu",
        ],
        1,
    ),
    "relax.clip": 2,
    "relax.nn.leakyrelu": 2,
    "relax.nn.prelu": 2,
    "relax.ewise_fma": 2,
    "relax.sigmoid": 4,
    "relax.nn.silu": 5,
    "relax.nn.gelu": 5,
    "relax.nn.gelu_tanh": 9,
    "relax.nn.softplus": 3,
    "relax.nn.selu": 5,
    "relax.log_add_exp": 4,  # max, sub, exp, log1p-add
    "relax.quantize": 3,  # divide, round, add zero point (clamp folded into the store)
    "relax.dequantize": 2,  # subtract zero point, multiply
    "relax.hamming_window": 3,
}

for _op, _k in FLOPS_PER_ELEMENT.items():
    register(_op, category="elementwise")(per_output_element(_k))
