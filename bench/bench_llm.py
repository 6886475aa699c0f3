"""LLM serving benchmark: wall time and peak RSS of `preflight llm` on a 70B-class config and on llama_7b.

Each case runs the CLI in a fresh process (imports included, nothing cached), as a user would:
`preflight llm MODEL --prompt 1024 --generate 256 --batch 8 --device h100-80gb --format json`. The 70B-class model
is a transformers config.json alone (80 layers, hidden 8192, 64 query heads, 8 KV heads, intermediate 28672,
vocabulary 128256): no weights exist, the model is built on the meta device. Goal (issue 16): <= 60 s and
<= 2 GB peak RSS on the 2-core development machine. `--full-depth` adds the 70B case with every layer traced.

Usage: python bench/bench_llm.py [--full-depth]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LLAMA_70B_CLASS = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 80,
    "hidden_size": 8192,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "intermediate_size": 28672,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
ARGS = ["--prompt", "1024", "--generate", "256", "--batch", "8", "--device", "h100-80gb", "--format", "json"]


def run(model: str, extra: list[str], workdir: Path) -> tuple[float, float, dict | None, str]:
    """(wall s, peak RSS MiB, the JSON document or None, stderr tail) of one `preflight llm` process."""
    out, err = workdir / "out.json", workdir / "err.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "analyzer.cli", "llm", model, *ARGS, *extra]
    with out.open("w") as fo, err.open("w") as fe:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
    rss_mib = usage.ru_maxrss / 1024  # KiB on Linux
    doc = json.loads(out.read_text()) if os.waitstatus_to_exitcode(status) == 0 else None
    lines = err.read_text().strip().splitlines()
    return wall, rss_mib, doc, lines[-1] if lines else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full-depth", action="store_true", help="also trace all 80 layers of the 70B-class config")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        config = work / "config.json"
        config.write_text(json.dumps(LLAMA_70B_CLASS))
        cases = [("70B-class config.json", str(config), []), ("zoo:llama_7b", "zoo:llama_7b", [])]
        if args.full_depth:
            cases.append(("70B-class config.json", str(config), ["--full-depth"]))
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; `preflight llm MODEL {' '.join(ARGS)}`")
        print("| model | mode | wall s | peak RSS MiB | dtype | KV B/token | TTFT ms | TPOT ms | <= 60 s, <= 2 GB |")
        print("|---|---|---:|---:|---|---:|---:|---:|---|")
        for label, model, extra in cases:
            wall, rss, doc, tail = run(model, extra, work)
            if doc is None:
                print(f"| {label} | {' '.join(extra) or 'default'} | {wall:.1f} | {rss:,.0f} | failed: {tail} |")
                continue
            s = doc["llm"]
            dev = s["devices"][0]
            ok = "met" if wall <= 60 and rss <= 2048 else "missed"
            print(
                f"| {label} | {s['depth']['mode']} | {wall:.1f} | {rss:,.0f} | {s['dtype']} | "
                f"{s['kv_cache']['bytes_per_token']:,} | {dev['ttft_ms']:,.1f} | {dev['tpot_ms']:,.2f} | {ok} |"
            )


if __name__ == "__main__":
    main()
