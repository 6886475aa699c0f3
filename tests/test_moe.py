"""Mixture-of-experts models (transformers' Mixtral): the routed expert GEMMs counted by hand, the symbolic prefill
export of `preflight llm`, totals that say when they leave work out, and TVM's C++ log kept off stderr.

transformers runs a Mixtral layer's experts on CPU as two `transformers.grouped_mm_fallback` calls (gate+up, then
down) over the S = tokens x top_k routed rows sorted by expert: S x hidden x 2 intermediate and S x intermediate x
hidden MACs whatever the routing. Before, TVM's importer had no conversion: an opaque call of 0 FLOPs, with a static
size (the example's S) that broke the symbolic prefill export.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from analyzer.api import analyze
from analyzer.batch import Summary
from analyzer.llm import StepGraph, load_llm
from analyzer.render import render_table, report_json
from passes import tvm_ir
from passes.costs.registry import GROUPED_MATMUL
from zoo.serving import cache_layout

os.environ.setdefault("HF_HUB_OFFLINE", "1")

transformers = pytest.importorskip("transformers")

# tiny Mixtral: hidden 64, intermediate 128, 4 experts, top-2, 2 layers
HIDDEN, INTER, EXPERTS, TOP_K, LAYERS = 64, 128, 4, 2, 2
# one routed row: gate+up (64 x 256) and down (128 x 64) MACs = 16,384 + 8,192 = 24,576
ROW_MACS = HIDDEN * 2 * INTER + INTER * HIDDEN


def tiny_config():
    return transformers.MixtralConfig(
        hidden_size=HIDDEN,
        intermediate_size=INTER,
        num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=512,
        architectures=["MixtralForCausalLM"],
    )


@pytest.fixture(scope="module")
def config_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixtral") / "config.json"
    tiny_config().to_json_file(path)
    return path


@pytest.fixture(scope="module")
def lm(config_path):
    return load_llm(config_path)


def expert_ops(analysis):
    return [c for c in analysis.ops if c.callee == GROUPED_MATMUL]


def test_routed_expert_gemms_counted_by_hand(config_path):
    report = analyze(str(config_path), inputs=["input_ids:2x8"])
    experts = expert_ops(report.analysis)
    assert len(experts) == 2 * LAYERS  # gate+up and down per layer
    # 2 x 8 = 16 tokens x top-2 = 32 routed rows per layer; 2 layers x 32 x 24,576 = 1,572,864 MACs
    assert sum(c.macs for c in experts) == LAYERS * 32 * ROW_MACS == 1_572_864
    assert all(c.category == "matmul" and c.flops == 2 * c.macs for c in experts)
    # rows, the min(4 experts, 32 rows) = 4 experts' matrices and the 4 offsets: gate+up reads 32 x 64 x 4 B
    # + 4 x 64 x 256 x 4 B + 4 x 4 B (int32) = 8,192 + 262,144 + 16 = 270,352 B
    gate_up = [c for c in experts if c.output.shape == (32, 2 * INTER)]
    assert [c.bytes_read for c in gate_up] == [270_352] * LAYERS
    t = report.analysis.totals
    assert not t.unsupported and not t.incomplete  # histc (tokens per expert) has its rule too
    assert report_json(report)["totals"]["incomplete"] is False


def test_decode_step_reads_only_the_routed_experts(lm):
    """One token routed to top-2 of 4 experts: each grouped matmul reads 2 experts' matrices, not 4."""
    m = lm
    g = StepGraph("decode", m.lm, cache_layout(m.config), "float32", name="t", source="t", framework="transformers")
    a = g.point(1, 16, 512).analysis
    experts = expert_ops(a)
    assert sum(c.macs for c in experts) == LAYERS * TOP_K * ROW_MACS  # 1 token x top-2 rows per layer
    down = [c for c in experts if c.output.shape == (TOP_K, HIDDEN)]
    # 2 rows x 128 x 4 B + 2 of 4 experts x 128 x 64 x 4 B + 4 offsets x 4 B = 1,024 + 65,536 + 16 = 66,576 B
    assert [c.bytes_read for c in down] == [66_576] * LAYERS


def test_symbolic_prefill_export_binds_every_point(lm):
    """`preflight llm` exports the prefill once with a symbolic batch and prompt and binds each point: the routed
    rows (batch x prompt x top_k) follow the bound sizes (they were the example's 3 x 19 x 2 = 114, fixed)."""
    m = lm
    g = StepGraph("prefill", m.lm, cache_layout(m.config), "float32", name="t", source="t", framework="transformers")
    for batch, prompt in ((1, 24), (2, 40)):
        a = g.point(batch, prompt, 512).analysis
        assert sum(c.macs for c in expert_ops(a)) == LAYERS * batch * prompt * TOP_K * ROW_MACS
        assert not a.totals.incomplete
    assert not g.warnings  # no fallback to one export per point
    assert len(g._symbolic) == 1


class Logits(torch.nn.Module):
    """A causal LM's logits (no cache): what torch.export and preflight's nn.Module route take."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids, use_cache=False).logits


@pytest.fixture(scope="module")
def default_mixtral():
    """The tiny Mixtral with random weights and transformers' default experts (`grouped_mm`: on CPU two
    `transformers.grouped_mm_fallback` calls per layer)."""
    torch.manual_seed(0)
    return Logits(transformers.MixtralForCausalLM(tiny_config()).eval())


IDS = (torch.zeros(2, 8, dtype=torch.long),)  # 2 x 8 = 16 tokens x top-2 = 32 routed rows per layer


def test_pt2_of_the_default_experts_is_costed_like_the_module(default_mixtral, tmp_path):
    """A `.pt2` exported from transformers' default MoE calls `torch.ops.transformers.grouped_mm_fallback`: read
    by its known schema (not refused as a custom op) and costed as the nn.Module route costs it."""
    path = tmp_path / "mixtral.pt2"
    ep = torch.export.export(default_mixtral, IDS)
    assert "transformers.grouped_mm_fallback.default" in {str(n.target) for n in ep.graph.nodes}
    torch.export.save(ep, path)
    from_file = analyze(str(path)).analysis
    from_module = analyze(default_mixtral, IDS).analysis
    for a in (from_file, from_module):
        experts = expert_ops(a)
        assert len(experts) == 2 * LAYERS
        # 2 layers x 32 routed rows x 24,576 MACs = 1,572,864, whatever the (random) routing
        assert sum(c.macs for c in experts) == LAYERS * 32 * ROW_MACS == 1_572_864
        assert not a.totals.unsupported and not a.totals.incomplete
    assert from_file.totals.flops == from_module.totals.flops
    assert from_file.totals.macs == from_module.totals.macs


# Qwen2-MoE and OLMoE, tiny: hidden 64, 4 experts of intermediate 32, top-2, 2 layers (Qwen2-MoE also has a dense
# shared expert of intermediate 64, a plain MLP). One routed row: gate+up 64 x 64 + down 32 x 64 = 6,144 MACs.
_SMALL_MOE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                  max_position_embeddings=512, num_experts=4, num_experts_per_tok=2)  # fmt: skip


@pytest.mark.slow  # about 20 s each here (two exports, two analyses)
@pytest.mark.parametrize(
    ("config", "model"),
    [
        ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
        ("OlmoeConfig", "OlmoeForCausalLM"),
    ],
)
def test_other_default_moe_models_through_pt2(config, model, tmp_path):
    """Qwen2-MoE and OLMoE in transformers' default experts implementation: the `.pt2` is read and costed as the
    nn.Module route costs it; the routed expert GEMMs equal the hand count."""
    extra = {"moe_intermediate_size": 32, "shared_expert_intermediate_size": 64, "intermediate_size": 128}
    cfg = getattr(transformers, config)(
        **_SMALL_MOE, **(extra if config == "Qwen2MoeConfig" else {"intermediate_size": 32})
    )
    torch.manual_seed(0)
    module = Logits(getattr(transformers, model)(cfg).eval())
    path = tmp_path / "moe.pt2"
    torch.export.save(torch.export.export(module, IDS), path)
    from_file, from_module = analyze(str(path)).analysis, analyze(module, IDS).analysis
    for a in (from_file, from_module):
        # 2 layers x 32 routed rows x 6,144 MACs = 393,216
        assert sum(c.macs for c in expert_ops(a)) == 2 * 32 * (64 * 2 * 32 + 32 * 64) == 393_216
        assert not a.totals.unsupported
    assert from_file.totals.flops == from_module.totals.flops


def test_pt2_library_op_is_defined_without_importing_the_library(default_mixtral, tmp_path):
    """In a process without transformers, the `.pt2` loader registers the op from the schema preflight writes
    (`pt2_safety.LIBRARY_OPS`) and never imports transformers: the file names the op, nothing more."""
    path = tmp_path / "mixtral.pt2"
    torch.export.save(torch.export.export(default_mixtral, IDS), path)
    code = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from analyzer.frontends.pt2_safety import build_exported_program, inspect_pt2
        plan = inspect_pt2(Path({str(path)!r}))
        ep = build_exported_program(plan)
        calls = sorted({{str(n.target) for n in ep.graph.nodes if "transformers" in str(n.target)}})
        print(calls, sorted(plan.library_ops), "transformers" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    last = out.stdout.strip().splitlines()[-1]
    target = "torch.ops.transformers.grouped_mm_fallback.default"
    assert last == f"['transformers.grouped_mm_fallback.default'] ['{target}'] False", out.stderr[-2000:]


def test_batched_formulation_counts_what_eager_runs_and_says_so():
    """transformers' `batched_mm` experts gather each routed row's expert matrix, then run a batched matmul: the same
    routed FLOPs as the grouped formulation, plus the gathered matrices that eager PyTorch moves, and a warning."""
    model = transformers.MixtralForCausalLM._from_config(tiny_config(), experts_implementation="batched_mm").eval()
    report = analyze(Logits(model), IDS)
    routed = [
        c
        for c in report.analysis.ops
        if c.op == "relax.matmul" and len(c.output.shape) == 3 and c.output.shape[-1] == 1
    ]
    # 32 routed rows per layer, each (1 x K) @ (K x N): the same 2 layers x 32 x 24,576 MACs as the grouped matmul
    assert sum(c.macs for c in routed) == LAYERS * 32 * ROW_MACS
    # gathered per layer: 32 x 256 x 64 x 4 B = 2 MiB (gate+up) + 32 x 64 x 128 x 4 B = 1 MiB (down); 2 layers: 6 MiB
    (warning,) = [w for w in report.warnings if w.startswith("mixture-of-experts in the batched formulation")]
    assert "4 matmuls" in warning and "6.0 MiB of gathered matrices" in warning


def test_batched_formulation_over_onnx(tmp_path):
    """The same model exported by torch's ONNX exporter (dynamo, opset 18): the gathered expert matrices are a
    GatherND with (S, 1) indices, then a batched MatMul; the routed MACs are the hand count and the warning is the
    nn.Module route's. (transformers' default `grouped_mm` experts do not export: torch's exporter has no ONNX
    function for `transformers.grouped_mm_fallback`, docs/moe.md.)"""
    config = tiny_config()
    config.use_cache = False
    model = transformers.MixtralForCausalLM._from_config(config, experts_implementation="batched_mm").eval()
    path = tmp_path / "mixtral.onnx"
    torch.onnx.export(model, IDS, str(path), dynamo=True, input_names=["input_ids"], external_data=False)
    report = analyze(str(path))
    routed = [c for c in report.analysis.ops if c.op == "relax.matmul" and c.module and c.module.endswith("experts")]
    # per layer, 32 routed rows: gate+up 32 x 64 x 256 = 524,288 MACs, down 32 x 128 x 64 = 262,144
    assert sorted(c.macs for c in routed) == [262_144] * LAYERS + [524_288] * LAYERS
    assert sum(c.macs for c in routed) == LAYERS * 32 * ROW_MACS == 1_572_864
    (warning,) = [w for w in report.warnings if w.startswith("mixture-of-experts in the batched formulation")]
    assert "4 matmuls" in warning and "6.0 MiB of gathered matrices" in warning


class Opaque(torch.nn.Module):
    """A linear, then `aten.kthvalue` (TVM's importer has no conversion: an opaque call counted as 0)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 8)

    def forward(self, x):  # x: (4, 16)
        return torch.kthvalue(self.proj(x), 2, dim=-1).values


def test_a_total_that_leaves_out_work_says_so(tmp_path):
    report = analyze(Opaque(), (torch.randn(4, 16),))
    t = report.analysis.totals
    assert (
        t.incomplete
        and t.uncounted_ops == 1
        and list(t.unsupported) == ["relax.call_dps_packed:torch:aten.kthvalue.default"]
    )
    assert t.flops >= 2 * 4 * 16 * 8  # the linear alone: a lower bound
    doc = report_json(report)
    assert doc["totals"]["incomplete"] is True
    flops_row = next(ln for ln in render_table(report).splitlines() if ln.startswith("FLOPs"))
    assert "at least" in flops_row and "incomplete: 1 operator count 0" in flops_row
    # analyze-many's summary says so too
    rows = [
        {
            "model": "a.onnx",
            "status": "ok",
            "seconds": 1,
            "totals": {"flops": 10, "unsupported": {}, "incomplete": False},
        },
        {"model": "b.pt2", "status": "ok", "seconds": 1, "totals": doc["totals"]},
    ]
    summary = Summary(rows=rows, output="r.jsonl", ran=2, workers=1).text()
    assert "at least" in summary and "incomplete: 1 model has operators that count 0" in summary and "b.pt2" in summary


def test_tvm_native_warnings_never_reach_stderr(capfd):
    """A conversion that fails mid-function leaves a half-built BlockBuilder, whose C++ destructor logs
    'BlockBuilder destroyed with remaining blocks!' on fd 2: captured, kept in NATIVE_LOG, never printed."""

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2

    ep = torch.export.export(M(), (torch.randn(2, 3),))

    def failing(node, importer):
        raise ValueError("no conversion")

    before = len(tvm_ir.NATIVE_LOG)
    capfd.readouterr()
    with pytest.raises(ValueError, match="no conversion"):
        tvm_ir.from_exported_program(ep, {"mul.Tensor": failing})
    out, err = capfd.readouterr()
    assert err == "" and out == ""
    assert any("BlockBuilder destroyed" in ln for ln in tvm_ir.NATIVE_LOG[before:])
