"""Why ML.ENERGY v2's vLLM rows have a time per output token from throughput longer than their `avg_tpot_s`.

    PYTHONPATH=. python bench/bench_mlenergy_window.py [--gpu h100|a100] [--seed 0] [--engine-profile vllm-0.5.4]
        [--all-tp]

ML.ENERGY's aggregation (github.com/ml-energy/leaderboard-v2 @ c3af7f31e2,
benchmark/llm_text_generation/*/scripts/aggregate_leaderboard_data.py) takes energy, output tokens, time and average
running batch over the steady state only (up to the first engine iteration at which the waiting queue is empty), but
"Avg TPOT" as the mean over *every* engine iteration's mean time since each running sequence's previous token,
including the drain after the queue empties, when the running batch shrinks and steps get shorter. So a row's
avg_batch_size / output_tokens_per_s (the steady state's time per output token of one sequence, the time its energy
per token was counted over) is longer than its avg_tpot_s.

This script replays that aggregation (`predictor.serving_window`, through `predictor.serving_fit.replay_row`) on a
simulated vLLM 0.5.4 run of every one-GPU (`--all-tp`: every tensor-parallel) dense 8-32B row: the row's
--max-num-seqs, the request count of ML.ENERGY's queue files (checked against the row's mean output length),
output lengths from an exponential capped at max_tokens (1024 chat, 512 code) whose capped mean is the row's
avg_output_len (the real distribution is not published: an assumption; code requests greedy, so each HumanEval+
prompt's output repeats in every copy of the dataset), the engine model's decode and prefill step times with the
engine profile's host figures (default `vllm-0.5.4`), prompts `predictor.serving_fit.PROMPT_TOKENS`. Prints, per
row, the simulated and the measured ratio (avg_batch_size / output_tokens_per_s) / avg_tpot_s and the simulated
steady-state running batch against the row's, then per task the medians, correlation and mean difference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor import serving_engine as eng  # noqa: E402
from predictor.devices import get_device  # noqa: E402
from predictor.serving_fit import ARCH, DATA, GPUS, StepCache, arch_of, coef_of, replay_row  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", choices=("h100", "a100"), default="h100")
    ap.add_argument("--seed", type=int, default=0, help="the order the output lengths are queued in")
    ap.add_argument("--engine-profile", default="vllm-0.5.4")
    ap.add_argument("--all-tp", action="store_true", help="tensor-parallel rows too (default: one GPU)")
    args = ap.parse_args()
    prof = eng.engine_profile(args.engine_profile)
    cache = StepCache()
    out = []
    for line in DATA.read_text().splitlines():
        r = json.loads(line) if line.strip() else None
        if not r or not r["runtime"].startswith("vLLM") or r["model"] not in ARCH or r["parallelization"]["pp"] != 1:
            continue
        if r["num_gpus"] != 1 and not args.all_tp:
            continue
        dev = GPUS[r["gpu"]]
        a = arch_of(r["model"])
        if not dev.startswith(args.gpu) or a.experts or not 7.9 <= a.params() / 1e9 <= 32.5:
            continue
        h = prof.host(get_device(dev))
        coef = coef_of(h)
        w = replay_row(r, a, dev, cache, seed=args.seed)
        sim = w.steady_ms(coef) / w.tpot_ms(coef)
        meas = r["avg_batch_size"] / r["output_tokens_per_s"] / r["avg_tpot_s"]
        task = r["task"].split("/")[-1]
        out.append((task, sim, meas))
        print(
            f"{r['model'][:34]:34} {task:4} tp{r['parallelization']['tp']} max_num_seqs {r['max_num_seqs']:4d} "
            f"requests {w.requests:5d}  batch {w.steady_batch:7.1f} (meas {r['avg_batch_size']:7.1f})  "
            f"simulated {sim:5.2f}  measured {meas:5.2f}"
        )
    for task in ("all", "chat", "code"):
        sel = [x for x in out if task in ("all", x[0])]
        if len(sel) < 2:
            continue
        s, m = np.array([x[1] for x in sel]), np.array([x[2] for x in sel])
        print(
            f"{task:4} {len(s):3d} rows: median simulated {np.median(s):.2f}, measured {np.median(m):.2f}; "
            f"correlation {np.corrcoef(s, m)[0, 1]:.2f}; mean |simulated - measured| / measured "
            f"{np.mean(np.abs(s - m) / m) * 100:.1f}%"
        )


if __name__ == "__main__":
    main()
