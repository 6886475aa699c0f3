"""Every zoo family: the analysis from one symbolic export equals the concrete analysis (docs/symbolic.md).

The smallest variant of each family, exported once with its batch (and a language model's sequence length)
symbolic, against the model exported at batch 2 and 13 (and seq_len + 3 at batch 13): every operator's counts and
shapes, the totals, liveness and the kernel view, and the formulas' totals. The module paths operators are
labelled with (`source`) are compared in tests/test_symbolic.py only: a symbolic export attributes a few
intermediate values to a neighbouring module (distilbert_tiny, tft_tiny). 6 min 56 s on 2 busy cores (45 passed).
"""

from __future__ import annotations

import pytest

import zoo
from analyzer.pipeline import analyze_model
from analyzer.symbolic import analyze_at, formulas, load_symbolic, peak_function

SMALLEST = [next(iter(f.variants)) for f in zoo.list_families()]


def _counts(c):
    return (c.index, c.name, c.op, c.category, c.macs, c.flops, c.bytes_read, c.bytes_written, c.inputs, c.outputs)


@pytest.mark.slow
@pytest.mark.parametrize("variant", SMALLEST)
def test_every_family_symbolic_equals_concrete(variant):
    sm = load_symbolic(f"zoo:{variant}", seq=True)
    costs = formulas(sm)
    _, law = peak_function(sm)
    seq = sm.values.get("seq")
    for batch, s in ((2, seq), (13, None if seq is None else seq + 3)):
        values = {} if s is None else {"seq": s}
        spec = variant if s is None else f"{variant}{'&' if '?' in variant else '?'}seq_len={s}"
        a = analyze_at(sm, batch, **values).analysis
        o = analyze_model(f"zoo:{spec}", batch=batch).analysis
        assert [_counts(c) for c in a.ops] == [_counts(c) for c in o.ops]
        assert a.totals == o.totals and a.memory == o.memory and a.kernels == o.kernels
        env = {"batch": batch, **values}
        for k, f in costs.totals.items():
            assert f is None or f.at(env) == getattr(o.totals, k), k
        if law is not None:  # the liveness peak derived as a max of polynomials (passes.symbolic.peak_law)
            assert law.at(env) == o.totals.peak_activation_bytes
