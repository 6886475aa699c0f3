"""`preflight llm --runtime vllm` against ML.ENERGY Leaderboard v2's vLLM 0.5.4 measurements (TPOT, energy).

    PYTHONPATH=. python bench/bench_llm_serving.py [--prompt 256] [--gpu h100|a100|all] [--rows]

For every vLLM row of data/public-models/mlenergy-llm-v2.jsonl whose model is a text decoder with a published
architecture below (vision-language models and pipeline-parallel rows left out), the model's config is built with
its transformers config class from the published sizes (no download, no weights), read by the vllm runtime's
engine model (`predictor.serving_engine.serve`, the function `preflight llm --runtime vllm` reports from) at the
row's average running batch (rounded) and tensor parallel degree, and compared with the row:

- TPOT: the row's `avg_tpot_s`;
- energy per output token per GPU: `energy_per_request_j / avg_output_len / num_gpus` (the row's energy counts
  every GPU of the instance and the request's prefill too; so does the prediction).

Generated tokens: the row's `avg_output_len`. Prompt tokens are not recorded in the data: 1024 for chat and 256 for
code requests (`--prompt-chat`, `--prompt-code`, or `--prompt` for all) are assumptions. Prints one line per row
with --rows, then MAPE per group (dense 8-32B, all dense, MoE), task and GPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from predictor import serving_engine as eng
from predictor.devices import get_device
from predictor.power import power_params

DATA = Path(__file__).resolve().parent.parent / "data" / "public-models" / "mlenergy-llm-v2.jsonl"
GPUS = {"NVIDIA H100 80GB HBM3": "h100-80gb", "NVIDIA A100-SXM4-40GB": "a100-40gb"}

# Published architectures (each model's config.json on the Hugging Face Hub): (config class, sizes).
L = "llama"
ARCH = {
    "meta-llama/Meta-Llama-3.1-70B-Instruct": (L, 80, 8192, 64, 8, 128, 28672, 128256, False),
    "mistralai/Mistral-7B-Instruct-v0.3": ("mistral", 32, 4096, 32, 8, 128, 14336, 32768, False),
    "mistralai/Mistral-Nemo-Instruct-2407": ("mistral", 40, 5120, 32, 8, 128, 14336, 131072, False),
    "mistralai/Mistral-Large-Instruct-2407": ("mistral", 88, 12288, 96, 8, 128, 28672, 32768, False),
    "google/gemma-2-2b-it": ("gemma2", 26, 2304, 8, 4, 256, 9216, 256000, True),
    "google/gemma-2-9b-it": ("gemma2", 42, 3584, 16, 8, 256, 14336, 256000, True),
    "google/gemma-2-27b-it": ("gemma2", 46, 4608, 32, 16, 128, 36864, 256000, True),
    "google/codegemma-1.1-2b": ("gemma", 18, 2048, 8, 1, 256, 16384, 256000, True),
    "google/codegemma-7b": ("gemma", 28, 3072, 16, 16, 256, 24576, 256000, True),
    "microsoft/Phi-3-mini-4k-instruct": ("phi3", 32, 3072, 32, 32, 96, 8192, 32064, False),
    "microsoft/Phi-3-small-8k-instruct": (L, 32, 4096, 32, 8, 128, 14336, 100352, True),  # phi3small: custom code
    "microsoft/Phi-3-medium-4k-instruct": ("phi3", 40, 5120, 40, 10, 128, 17920, 32064, False),
    "codellama/CodeLlama-7b-hf": (L, 32, 4096, 32, 32, 128, 11008, 32016, False),
    "codellama/CodeLlama-13b-hf": (L, 40, 5120, 40, 40, 128, 13824, 32016, False),
    "codellama/CodeLlama-34b-hf": (L, 48, 8192, 64, 8, 128, 22016, 32000, False),
    "codellama/CodeLlama-70b-hf": (L, 80, 8192, 64, 8, 128, 28672, 32016, False),
    "bigcode/starcoder2-3b": ("starcoder2", 30, 3072, 24, 2, 128, 12288, 49152, True),
    "bigcode/starcoder2-7b": ("starcoder2", 32, 4608, 36, 4, 128, 18432, 49152, True),
    "bigcode/starcoder2-15b": ("starcoder2", 40, 6144, 48, 4, 128, 24576, 49152, False),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": ("mixtral", 32, 4096, 32, 8, 128, 14336, 32000, False),
    "mistralai/Mixtral-8x22B-Instruct-v0.1": ("mixtral", 56, 6144, 48, 8, 128, 16384, 32768, False),
}


def config(name: str) -> dict:
    """The model's transformers config (its own class) as a dict."""
    import transformers

    kind, layers, hidden, heads, kv, head_dim, inter, vocab, tied = ARCH[name]
    cls = transformers.AutoConfig.for_model(kind).__class__
    kw = dict(
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_word_embeddings=tied,
    )
    if kind == "mixtral":
        kw |= {"num_local_experts": 8, "num_experts_per_tok": 2}
    return cls(**kw).to_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=None, help="prompt tokens of every request (not in the data)")
    ap.add_argument("--prompt-chat", type=int, default=1024, help="prompt tokens of a chat request (assumed)")
    ap.add_argument("--prompt-code", type=int, default=256, help="prompt tokens of a code request (assumed)")
    ap.add_argument("--gpu", choices=("h100", "a100", "all"), default="all")
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument(
        "--overhead-per-seq-ms",
        type=float,
        default=eng.STEP_OVERHEAD_PER_SEQ_MS,
        help="the engine's host time per running sequence and step (a sensitivity study; default the model's)",
    )
    args = ap.parse_args()
    eng.STEP_OVERHEAD_PER_SEQ_MS = args.overhead_per_seq_ms
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    out = []
    for r in rows:
        if not r["runtime"].startswith("vLLM") or r["model"] not in ARCH or r["parallelization"]["pp"] != 1:
            continue
        dev = GPUS[r["gpu"]]
        if args.gpu != "all" and not dev.startswith(args.gpu):
            continue
        arch = eng.Arch.from_config(config(r["model"]))
        tp = r["parallelization"]["tp"]
        batch = max(1, round(r["avg_batch_size"]))
        gen = max(2, round(r["avg_output_len"]))
        task = r["task"].split("/")[-1]
        prompt = args.prompt or (args.prompt_code if task == "code" else args.prompt_chat)
        s = eng.serve(arch, get_device(dev), batch, prompt, gen, power_params(dev), tp=tp)
        meas_tpot = r["avg_tpot_s"] * 1e3
        meas_e = r["energy_per_request_j"] / r["avg_output_len"] / r["num_gpus"]
        params = arch.params() / 1e9
        group = ("moe" if arch.experts else "dense") + ("-8-32b" if 7.9 <= params <= 32.5 and not arch.experts else "")
        row = (r["model"], dev, tp, batch, params, group, meas_tpot, s.tpot_ms, meas_e, s.energy_per_token_j, task)
        out.append(row)
        if args.rows:
            print(
                f"{r['model'][:40]:40} {dev:10} tp{tp} B={batch:4d} {params:6.1f}B  TPOT {meas_tpot:7.2f} "
                f"pred {s.tpot_ms:7.2f}  J/tok {meas_e:6.3f} pred {s.energy_per_token_j:6.3f}  "
                f"P {s.avg_power_w:4.0f} W"
            )

    def mape(sel, i, j):
        a = np.array([x[i] for x in sel])
        b = np.array([x[j] for x in sel])
        return float(np.mean(np.abs(b - a) / a) * 100), float(np.median(b / a))

    prompts = args.prompt or f"chat {args.prompt_chat}, code {args.prompt_code}"
    print(
        f"\nprompt tokens (assumed): {prompts}; host overhead {eng.STEP_OVERHEAD_MS} ms + "
        f"{eng.STEP_OVERHEAD_PER_SEQ_MS} ms per sequence; MAPE %, median predicted/measured"
    )
    head = f"{'group':22} {'task':5} {'gpu':10} {'rows':>4} {'TPOT MAPE':>9} {'ratio':>6}"
    print(head + f" {'J/tok MAPE':>10} {'ratio':>6}")
    for dev in sorted({x[1] for x in out}):
        for group in ("dense-8-32b", "dense (all)", "moe"):
            for task in ("all", "chat", "code"):
                sel = [
                    x
                    for x in out
                    if x[1] == dev
                    and (x[5] == group or (group == "dense (all)" and x[5].startswith("dense")))
                    and task in ("all", x[10])
                ]
                if not sel:
                    continue
                t, tr = mape(sel, 6, 7)
                e, er = mape(sel, 8, 9)
                print(f"{group:22} {task:5} {dev:10} {len(sel):4d} {t:9.1f} {tr:6.2f} {e:10.1f} {er:6.2f}")


if __name__ == "__main__":
    main()
