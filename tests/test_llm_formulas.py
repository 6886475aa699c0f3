"""`preflight llm`'s costs as formulas of the batch and the prompt / context (analyzer.llm.context_formulas,
docs/symbolic.md): coefficients by hand for a tiny Llama, and the formulas against the llm's own counts."""

from __future__ import annotations

import json
import os
from fractions import Fraction
from pathlib import Path

import jsonschema
import pytest

from analyzer.llm import llm
from analyzer.predeploy import sections
from analyzer.render import sections_text

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytestmark = pytest.mark.slow  # one llm() of a 4-layer Llama: ~60 s wall at load 11 on 2 shared cores
SCHEMA = json.loads((Path(__file__).parents[1] / "analyzer" / "schema" / "report-1.schema.json").read_text())

# a tiny Llama: 4 layers, hidden 64 = 4 heads x head_dim 16, 2 KV heads, feed-forward 128, vocabulary 256
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 4, 64, 4, 2, 16, 128, 256
TINY = (
    f"zoo:llama?layers={LAYERS}&hidden={HIDDEN}&heads={HEADS}&kv_heads={KV_HEADS}&intermediate={FFN}&vocab={VOCAB}"
    "&max_pos=512&seq_len=16"
)


def coefficient(block: dict, count: str, powers: dict) -> Fraction:
    for t in block["totals"][count]["terms"]:
        if t["powers"] == powers:
            return Fraction(t["coefficient"])
    return Fraction(0)


def value(block: dict, count: str, env: dict) -> Fraction:
    total = Fraction(0)
    for t in block["totals"][count]["terms"]:
        term = Fraction(t["coefficient"])
        for s, p in t["powers"].items():
            term *= env[s] ** p
        total += term
    return total


@pytest.fixture(scope="module")
def report():
    # batch 5, prompt 12, context 12 + 4 = 16: none of them a sample point (batch 1, 2, 3, 41; lengths 2..6, 42)
    return llm(TINY, prompt=12, generate=4, batch=5, contexts=[16, 32])


def test_context_formulas_coefficients_by_hand(report):
    f = report.llm.formulas
    assert set(f) == {"prefill", "decode"} and f["prefill"]["exact"] and f["decode"]["exact"]
    assert report.llm.depth["mode"] == "extrapolated"  # traced at depths 1 and 2, the formulas of all 4 layers
    dec, pre = f["decode"], f["prefill"]
    # KV cache: 2 (K and V) x layers x kv_heads x head_dim x 2 bytes (float16) = 2 x 4 x 2 x 16 x 2 = 512 per token
    assert dec["totals"]["kv_cache_bytes"]["formula"] == "512 x batch x context"
    assert 2 * LAYERS * KV_HEADS * HEAD_DIM * 2 == 512
    # decode MACs: attention reads the context: per layer heads x context x (head_dim for QK^T + head_dim for PV)
    # = 4 x 32 = 128 per cached token, x 4 layers = 512 x batch x context; per token the projections q 64x64,
    # k and v 64x32 each, o 64x64, the MLP 3 x 64x128 = 36,864 per layer (147,456 for 4) + the LM head 64 x 256
    # = 16,384: 163,840 x batch
    per_layer = HIDDEN * HIDDEN * 2 + 2 * HIDDEN * KV_HEADS * HEAD_DIM + 3 * HIDDEN * FFN
    assert per_layer == 36_864
    assert coefficient(dec, "macs", {"batch": 1, "context": 1}) == LAYERS * HEADS * 2 * HEAD_DIM == 512
    assert coefficient(dec, "macs", {"batch": 1}) == LAYERS * per_layer + HIDDEN * VOCAB == 163_840
    assert dec["totals"]["macs"]["formula"] == "512 x batch x context + 163,840 x batch"
    # prefill MACs: attention over the prompt (not halved for the causal mask: the fused op's cost rule)
    # 512 x batch x prompt^2; the projections 147,456 per token; the LM head on the last position only: 16,384
    assert pre["totals"]["macs"]["formula"] == "512 x batch x prompt^2 + 147,456 x batch x prompt + 16,384 x batch"
    # FLOPs grow as prompt^2 in prefill and linearly in the context in decode
    assert max(t["powers"].get("prompt", 0) for t in pre["totals"]["flops"]["terms"]) == 2
    assert max(t["powers"].get("context", 0) for t in dec["totals"]["flops"]["terms"]) == 1


def test_context_formulas_equal_the_llm_counts_at_its_own_point(report):
    info = report.llm
    pre, dec = info.formulas["prefill"], info.formulas["decode"]
    for count in ("flops", "macs", "bytes_read"):
        assert value(pre, count, {"batch": 5, "prompt": 12}) == info.prefill.totals[count], count
        assert value(dec, count, {"batch": 5, "context": 16}) == info.decode.totals[count], count
    assert value(dec, "kv_cache_bytes", {"batch": 5, "context": 16}) == info.kv.bytes(5, 16)


def test_context_formulas_in_json_and_text(report):
    doc = report.to_json()
    jsonschema.validate(doc, SCHEMA)
    assert doc["llm"]["formulas"]["decode"]["symbols"]["context"]["min"] == 2
    title, secs = sections(report)
    text = sections_text(title, secs)
    assert "Costs as formulas of the context" in text
    assert "KV cache (bytes) = 512 x batch x context" in " ".join(text.split())
