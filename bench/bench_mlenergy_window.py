"""Why ML.ENERGY v2's vLLM rows have a time per output token from throughput longer than their `avg_tpot_s`.

    PYTHONPATH=. python bench/bench_mlenergy_window.py [--gpu h100|a100] [--seed 0]

ML.ENERGY's aggregation (github.com/ml-energy/leaderboard-v2 @ c3af7f31e2,
benchmark/llm_text_generation/*/scripts/aggregate_leaderboard_data.py) takes energy, output tokens, time and average
running batch over the steady state only (up to the first engine iteration at which the waiting queue is empty), but
"Avg TPOT" as the mean over *every* engine iteration's mean time since each running sequence's previous token,
including the drain after the queue empties, when the running batch shrinks and steps get shorter. So a row's
avg_batch_size / output_tokens_per_s (the steady state's time per output token of one sequence, the time its energy
per token was counted over) is longer than its avg_tpot_s.

This script replays that aggregation on a simulated vLLM 0.5.4 run (no chunked prefill: a prefill-only iteration
admits waiting prompts whenever slots are free, then a decode iteration over the running sequences) for every
one-GPU dense 8-32B row: the row's max_num_seqs, the request count of ML.ENERGY's queue files (chat: 500 ShareGPT
prompts x 4; code: 164 HumanEval+ prompts x 10 on H100, x 20 on A100), output lengths drawn from an exponential of
the row's average output length capped at max_tokens (1024 chat, 512 code; the real distribution is not published:
an assumption), the engine model's decode and prefill step times (`predictor.serving_engine`, profile
`vllm-0.5.4`), prompts `predictor.serving_fit.PROMPT_TOKENS`. Prints, per row, the simulated and the measured ratio
(avg_batch_size / output_tokens_per_s) / avg_tpot_s, then their medians and correlation.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor import serving_engine as eng  # noqa: E402
from predictor.devices import get_device  # noqa: E402
from predictor.serving_fit import ARCH, GPUS, PROMPT_TOKENS, arch_of  # noqa: E402

DATA = ROOT / "data" / "public-models" / "mlenergy-llm-v2.jsonl"
#: ML.ENERGY's queue files (benchmark/llm_text_generation/{chat,code}/pegasus/*/queue_1gpu.yaml): requests per run.
REQUESTS = {
    ("chat", "h100"): 500 * 4,
    ("chat", "a100"): 500 * 4,
    ("code", "h100"): 164 * 10,
    ("code", "a100"): 164 * 20,
}
MAX_TOKENS = {"chat": 1024, "code": 512}


def simulate(decode_s, prefill_s, slots: int, lengths: np.ndarray) -> tuple[float, float]:
    """(steady-state time per output token of one sequence, mean over decode iterations of the time since each
    sequence's previous token), seconds, of a run of `lengths` output tokens per request all queued at time 0 with
    `slots` running sequences at most; `decode_s(b)`, `prefill_s(k)`: step times of b decodes, k prompts."""
    waiting, running = list(lengths), []
    t = since = 0.0
    tpots, tokens, batch_sum, iters, steady = [], 0, 0, 0, None
    while waiting or running:
        k = min(slots - len(running), len(waiting))
        if k > 0:  # a prefill-only iteration: each new prompt yields its first token
            new = [waiting.pop() for _ in range(k)]
            dt = prefill_s(k)
            t, since, tokens, batch_sum, iters = t + dt, since + dt, tokens + k, batch_sum + len(running) + k, iters + 1
            running = [x for x in running + [n - 1 for n in new] if x > 0]
        else:  # a decode iteration: its TPOT entry is the time since the previous decode (prefills in between)
            b = len(running)
            dt = decode_s(b)
            t, tokens, batch_sum, iters = t + dt, tokens + b, batch_sum + b, iters + 1
            tpots.append(dt + since)
            since = 0.0
            running = [x - 1 for x in running if x > 1]
        if steady is None and not waiting:
            steady = (t, tokens, batch_sum / iters)
    time, out, batch = steady
    return batch / (out / time), float(np.mean(tpots))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", choices=("h100", "a100"), default="h100")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    prof = eng.engine_profile("vllm-0.5.4")
    sim, meas = [], []
    for line in DATA.read_text().splitlines():
        r = json.loads(line) if line.strip() else None
        if not r or not r["runtime"].startswith("vLLM") or r["model"] not in ARCH or r["num_gpus"] != 1:
            continue
        dev_key = GPUS[r["gpu"]]
        a = arch_of(r["model"])
        if not dev_key.startswith(args.gpu) or a.experts or not 7.9 <= a.params() / 1e9 <= 32.5:
            continue
        dev, task = get_device(dev_key), r["task"].split("/")[-1]
        host, prompt, mean_out = prof.host(dev), PROMPT_TOKENS[task], r["avg_output_len"]

        @functools.lru_cache(None)
        def decode_s(b, a=a, dev=dev, host=host, ctx=prompt + mean_out / 2):
            return eng.decode_step(a, dev, b, ctx, host=host).total_s

        @functools.lru_cache(None)
        def prefill_s(k, a=a, dev=dev, host=host, prompt=prompt):
            return eng.prefill_step(a, dev, k, prompt, host=host).total_s

        n = REQUESTS[task, args.gpu]
        lengths = np.clip(rng.exponential(mean_out, n).round(), 1, MAX_TOKENS[task]).astype(int)
        cycle, tpot = simulate(decode_s, prefill_s, r["max_num_seqs"], lengths)
        m = r["avg_batch_size"] / r["output_tokens_per_s"] / r["avg_tpot_s"]
        sim.append(cycle / tpot)
        meas.append(m)
        print(f"{r['model'][:34]:34} {task:4} max_num_seqs {r['max_num_seqs']:4d}  simulated {cycle / tpot:5.2f}  "
              f"measured {m:5.2f}")  # fmt: skip
    s, m = np.array(sim), np.array(meas)
    print(
        f"\n{len(s)} rows: median simulated {np.median(s):.2f}, measured {np.median(m):.2f}; "
        f"correlation {np.corrcoef(s, m)[0, 1]:.2f}; mean |simulated - measured| / measured "
        f"{np.mean(np.abs(s - m) / m) * 100:.1f}%"
    )


if __name__ == "__main__":
    main()
