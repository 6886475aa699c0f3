"""Hostile files that aim at memory, time or the interpreter's stack rather than at code execution: each is
rebuilt small from what hostile users sent, and must end in a one-line error (exit 2 for a refused file, 3
for an analysis over its memory or time budget), never in an internal error or an exhausted machine."""

from __future__ import annotations

import pytest
from test_hostile_inputs import DYN_ARGS, _edit_program, _graph, _rewrite_archive, files, refused  # noqa: F401

from analyzer.frontends import sym_expr

# ---- 1. recursion: nested expressions ----------------------------------------------------------------------

NEG_CHAIN = "- " * 5000 + "s77"  # 5,000 unary minus signs: 5,000 nested calls in a recursive-descent parser


def test_negation_chain_is_refused_by_the_grammar():
    with pytest.raises(sym_expr.ExprError, match="nested more than 64 levels"):
        sym_expr.parse(NEG_CHAIN)
    with pytest.raises(sym_expr.ExprError, match="nested more than 64 levels"):
        sym_expr.parse("2**-" * 3000 + "2")  # the exponent's unary minus nests the same way


def test_negation_within_the_depth_limit_still_parses():
    # 60 minus signs: an even count, so the tree is 60 nested negations of the symbol (no folding: not a literal)
    tree = sym_expr.parse("- " * 60 + "s0")
    depth = 0
    while tree[0] == "neg":
        tree, depth = tree[1], depth + 1
    assert (depth, tree) == (60, ("sym", "s0", ()))
    assert sym_expr.parse("- - 3") == ("int", 3)  # two minus signs of a literal fold to the literal


def _neg_chain_editor(where: str):
    def edit(doc):
        g = _graph(doc)
        expr = {"as_expr": {"expr_str": NEG_CHAIN, "hint": None}}
        if where == "size":
            g["tensor_values"]["x"]["sizes"][0] = expr
        elif where == "stride":
            g["tensor_values"]["reshape"]["strides"][0] = expr
        elif where == "offset":
            g["tensor_values"]["linear"]["storage_offset"] = expr
        elif where == "sym_int":
            g["sym_int_values"]["floordiv"] = expr

    return edit


@pytest.mark.parametrize("where", ["size", "stride", "offset", "sym_int"])
def test_negation_chain_in_a_pt2_expression(tmp_path, files, where):  # noqa: F811
    """Was `internal error (RecursionError)`; now the grammar's depth limit refuses it (exit 2, one line)."""
    p = _edit_program(files["dyn"], tmp_path / "neg.pt2", _neg_chain_editor(where))
    msg = refused(p, 2, *DYN_ARGS)
    assert "is not a shape expression (nested more than 64 levels)" in msg, msg


def test_deeply_nested_json_in_model_json(tmp_path, files):  # noqa: F811
    """100,000 nested lists in models/model.json: json's C parser raises RecursionError, reported as unreadable."""

    def member(name, data):
        if name.endswith("models/model.json"):
            return name, data[:-1] + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        return name, data

    _rewrite_archive(files["pt2"], p := tmp_path / "deep.pt2", member)
    assert "models/model.json is nested too deeply" in refused(p)
