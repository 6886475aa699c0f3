"""Analyse the four sentence-transformer encoders of data/public-models/mig-a100-40gb.jsonl with preflight.

Writes data/public-models/mig-encoders-analysis.json: per encoder and (batch, seq), the weights (param bytes), the
peak live activations preflight's liveness pass finds, and its allocation trace (`blocks`: [birth op, last op,
bytes] per activation storage, `passes.memory.MemoryProfile.blocks`), in bytes; per encoder the size of each weight
tensor in parameter order (`weight_sizes`). `python -m predictor.memory_fit` reads that file (predictor/ never
imports TVM, so the analyses are cached here). One point per line.

The encoders as transformers configs (float32, eager attention as transformers 4.21 ran them; random weights:
only shapes matter):
- paraphrase-multilingual-MiniLM-L12-v2: BertModel, hidden 384, 12 layers, 12 heads, intermediate 1536,
  vocab 250037 (117,653,760 parameters in the data file; BertModel's pooler, 147,840, is not in the graph);
- paraphrase-multilingual-mpnet-base-v2: despite its name an XLM-RoBERTa base (XLMRobertaModel: hidden 768,
  12 layers, intermediate 3072, vocab 250002, 514 positions), 278,043,648 parameters as in the data file;
- distiluse-base-multilingual-cased v1/v2: DistilBERT multilingual base (hidden 768, 6 layers, intermediate
  3072, vocab 119547), 134,734,080 parameters; the sentence-transformers dense layer after pooling (768 x 512,
  1.5 MiB, a batch x 512 output) is left out.

Usage: python bench/mig_encoders.py [--out PATH]   (3 architectures x 13 points = 39 analyses, 2-11 s each here)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ENCODERS = {
    "paraphrase-multilingual-MiniLM-L12-v2": "zoo:bert?vocab=250037&hidden=384&layers=12&heads=12"
    "&intermediate=1536&max_pos=512&attn=eager",
    "paraphrase-multilingual-mpnet-base-v2": "zoo:roberta?vocab=250002&hidden=768&layers=12&heads=12"
    "&intermediate=3072&max_pos=514&attn=eager",
    "distiluse-base-multilingual-cased": "zoo:distilbert?vocab=119547&hidden=768&layers=6&heads=12"
    "&intermediate=3072&max_pos=512&attn=eager",
}
#: distiluse v2's readings grow by 32-36 KiB per token more than v1's (docs/power-and-memory.md): the hypothesis that
#: its checkpoint's config returns every hidden state (`output_hidden_states`, as distilbert-base-multilingual-cased's
#: config did until February 2020: huggingface/transformers#2462) is analysed as this entry: the same graph, with the
#: output of the embedding's layer norm and of each layer's output layer norm kept to the end as outputs.
HIDDEN_STATES = "distiluse-base-multilingual-cased+output_hidden_states"
POINTS = [(b, 64) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)] + [(32, s) for s in (32, 128, 256, 512)]


def _hidden_states(report) -> list[list[int]]:
    """The trace of a DistilBERT graph with every hidden state returned: the layer norms' outputs alternate
    (embedding, then per layer the attention's and the output's); the embedding's and each output one live to the
    end (last = the number of ops)."""
    a = report.analysis
    n = len(a.graph.ops)
    norms = [i for i, b in enumerate(a.memory.blocks) if b[0] >= 0 and a.graph.ops[b[0]].op == "relax.nn.layer_norm"]
    if len(norms) != 13:  # 1 + 2 x 6 layers
        raise SystemExit(f"expected 13 layer norms in DistilBERT's trace, found {len(norms)}")
    kept = set(norms[0::2])
    return [[b, n if i in kept else e, nb] for i, (b, e, nb) in enumerate(a.memory.blocks)]


def dumps(doc: dict) -> str:
    """The analysis file: one line per point and per weight list, so that a diff shows which point changed."""
    lines = ["{", ' "encoders": {']
    names = list(doc["encoders"])
    for i, name in enumerate(names):
        e = doc["encoders"][name]
        lines.append(f"  {json.dumps(name)}: {{")
        lines.append(f'   "spec": {json.dumps(e["spec"])},')
        lines.append(f'   "weight_sizes": {json.dumps(e.get("weight_sizes", []), separators=(",", ":"))},')
        lines.append('   "points": [')
        pts = e["points"]
        for j, p in enumerate(pts):
            lines.append(f"    {json.dumps(p, separators=(',', ':'))}" + ("," if j < len(pts) - 1 else ""))
        lines.append("   ]")
        lines.append("  }" + ("," if i < len(names) - 1 else ""))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "data/public-models/mig-encoders-analysis.json"))
    args = ap.parse_args()
    from analyzer.api import analyze

    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.is_file() else {"encoders": {}}
    for name, spec in [*ENCODERS.items(), (HIDDEN_STATES, ENCODERS["distiluse-base-multilingual-cased"])]:
        rows = doc["encoders"].setdefault(name, {"spec": spec, "points": []})
        done = {(p["batch"], p["seq_len"]) for p in rows["points"] if "blocks" in p}
        rows["points"] = [p for p in rows["points"] if "blocks" in p]
        for batch, seq in POINTS:
            if (batch, seq) in done:
                continue
            t = time.time()
            r = analyze(f"{spec}&seq_len={seq}", batch=batch)
            blocks = _hidden_states(r) if name == HIDDEN_STATES else [list(b) for b in r.analysis.memory.blocks]
            rows["points"].append(
                {
                    "batch": batch,
                    "seq_len": seq,
                    "param_bytes": int(r.totals.param_bytes),
                    "peak_activation_bytes": int(r.totals.peak_activation_bytes),
                    "blocks": blocks,
                }
            )
            if r.analysis.repeat is not None:
                raise SystemExit(f"{name}: layers extrapolated; the allocation trace needs the whole graph")
            rows["weight_sizes"] = [int(w.tensor.nbytes) for w in r.analysis.graph.weights if not w.scalar_const]
            rows["points"].sort(key=lambda p: (p["seq_len"], p["batch"]))
            out.write_text(dumps(doc))
            print(
                f"{name} b={batch} s={seq}: {r.totals.peak_activation_bytes / 2**20:.1f} MiB ({time.time() - t:.0f} s)"
            )


if __name__ == "__main__":
    main()
