"""transformers models saved as `.pt2` the obvious way (`torch.export.save(torch.export.export(model, ...))`): their
outputs are `ModelOutput` dataclasses, which torch can rebuild only by importing transformers. preflight reads the
output as a tuple of its tensors (it never imports a class an archive names) and says so; each file is analysed in
a fresh process, as a user's first `preflight analyze` is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]


def _albert():
    from transformers import AlbertConfig, AlbertModel

    cfg = AlbertConfig(vocab_size=1000, embedding_size=32, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=128)  # fmt: skip
    return AlbertModel(cfg), (torch.randint(0, 1000, (1, 16)),), "BaseModelOutputWithPooling"


def _whisper_encoder():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = WhisperConfig(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
                        num_mel_bins=16, max_source_positions=32)  # fmt: skip
    return WhisperEncoder(cfg), (torch.randn(1, 16, 64),), "BaseModelOutput"


def _qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, use_cache=False)  # fmt: skip
    return Qwen2ForCausalLM(cfg), (torch.randint(0, 1000, (1, 16)),), "CausalLMOutputWithPast"


@pytest.mark.parametrize("build", [_albert, _whisper_encoder, _qwen2], ids=["albert", "whisper_encoder", "qwen2"])
def test_transformers_pt2_round_trips_in_a_fresh_process(tmp_path, build):
    import analyzer

    model, inputs, output_class = build()
    model.eval()
    path = tmp_path / "model.pt2"
    torch.export.save(torch.export.export(model, inputs), path)
    proc = subprocess.run(
        [sys.executable, "-m", "analyzer.cli", "analyze", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert any(output_class in w and "read as a tuple" in w for w in doc["warnings"]), doc["warnings"]
    # the same numbers as the module itself analysed in this process (the oracle: the nn.Module route)
    direct = analyzer.analyze(model, inputs).totals
    assert doc["totals"]["flops"] == direct.flops and doc["totals"]["macs"] == direct.macs
