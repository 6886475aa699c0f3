"""Every Relax op TVM registers is costed, zero-cost on purpose, or listed unsupported."""

from __future__ import annotations

from passes.costs import CATEGORIES, IGNORED, RULES, TIR_CALLS, UNSUPPORTED
from passes.tvm_ir import registered_relax_ops


def test_every_registered_relax_op_has_a_decision():
    ops = registered_relax_ops()
    assert len(ops) > 200  # TVM 0.27 registers 230; guards against an empty listing
    undecided = [
        op for op in ops if op not in RULES and op not in IGNORED and op not in UNSUPPORTED and op not in TIR_CALLS
    ]
    assert undecided == [], f"new Relax ops need a cost rule, an ignore or an unsupported entry: {undecided}"


def test_decisions_are_disjoint_and_categorised():
    assert not (set(RULES) & set(IGNORED))
    assert not (set(RULES) & set(UNSUPPORTED))
    assert not (set(IGNORED) & set(UNSUPPORTED))
    assert all(e.category in CATEGORIES for e in RULES.values())


def test_the_ops_the_importers_emit_most_are_costed():
    for op in (
        "relax.nn.conv2d",
        "relax.matmul",
        "relax.nn.softmax",
        "relax.nn.layer_norm",
        "relax.add",
        "relax.nn.gelu",
        "relax.reshape",
        "relax.permute_dims",
        "relax.take",
        "relax.einsum",
        "relax.nn.attention",
        "relax.nn.batch_norm",
        "relax.nn.max_pool2d",
        "relax.mean",
    ):
        assert op in RULES
