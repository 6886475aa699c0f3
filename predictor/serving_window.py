"""ML.ENERGY Leaderboard v2's aggregation of a vLLM 0.5.4 run, replayed on a simulated run: the steady state and the
drain after it (pure python; no TVM, no torch).

ML.ENERGY's aggregation (github.com/ml-energy/leaderboard-v2 @ c3af7f31e2, benchmark/llm_text_generation/{chat,code}/
scripts/aggregate_leaderboard_data.py) reads vLLM's per-iteration statistics of a run whose requests were all sent at
time 0 and takes

- energy, output tokens (`num_generation_tokens_iter`, a prefill's first token included), time and the running batch
  (`num_running_sys`, prefill iterations included) over the iterations before `ss_end_iter`, the first iteration from
  the third on whose waiting queue is empty: the steady state. A row's avg_batch_size / output_tokens_per_s is that
  window's time per output token of one sequence (seconds);
- "Avg TPOT" as the mean over every iteration that has any (`time_per_output_tokens_iter`: the decode iterations) of
  the mean over its running sequences of the time since that sequence's previous token, over the whole run: the drain
  after the queue empties included, when the batch shrinks and the steps get short.

vLLM 0.5.4 without chunked prefill (as ML.ENERGY ran it) schedules either a prefill-only iteration (waiting prompts
admitted while slots, `--max-num-seqs`, and the token budget, `MAX_BATCHED_TOKENS`, allow; each prompt yields its
first token) or a decode iteration of every running sequence (one token each). A sequence's time since its previous
token at a decode iteration is the time since the end of the last iteration that gave it a token: the previous decode
iteration and the prefills after it for a sequence that was running, the steps after its own prefill for a new one
(vLLM 0.5.4's `SequenceGroup.get_last_latency`).

With every request queued at time 0 the order of the iterations (`schedule`) does not depend on how long they take,
so both windows are linear in the step times (`Schedule.windows`): the host-time fit stays a least squares.

What is assumed (not in the rows): the output lengths of the requests (`output_lengths`: an exponential capped at the
task's `max_tokens`, its scale set so that the capped mean is the row's avg_output_len; chat requests drawn
independently, code requests greedy, so each of the 164 prompts' output repeated for every copy of the dataset) and
every prompt of one length (`predictor.serving_fit.PROMPT_TOKENS`). What the rows and the leaderboard's files give:
the mean output length (avg_output_len), `--max-num-seqs`, `max_tokens` of the clients (1024 chat, 512 code), the
request counts of the queue files (`requests`), the token budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: vLLM 0.5.4's token budget of one iteration without chunked prefill: max_num_batched_tokens defaults to
#: max(max_model_len, 2048), and ML.ENERGY ran --max-model-len 4096.
MAX_BATCHED_TOKENS = 4096
#: The clients' max_tokens (benchmark_client.py of each task).
MAX_TOKENS = {"chat": 1024, "code": 512}
#: Prompts of each task's dataset: chat, the first turns of ShareGPT_V3_filtered_500.json; code, HumanEval+.
DATASET = {"chat": 500, "code": 164}
#: --data-dup-factor of ML.ENERGY's queue files (benchmark/llm_text_generation/{chat,code}/pegasus/{A100,H100}/
#: queue_{N}gpu.yaml): requests of a run = dataset x factor. Per (task, GPU family), with the files' exceptions per
#: (model, GPU family, GPUs of the instance); an instance no file lists takes its task's and family's factor.
DUP_FACTOR = {("chat", "a100"): 4, ("chat", "h100"): 4, ("code", "a100"): 20, ("code", "h100"): 10}
DUP_EXCEPTIONS = {
    ("google/gemma-2-27b-it", "a100", 2): 1,
    ("mistralai/Mixtral-8x22B-Instruct-v0.1", "a100", 8): 2,
}


def requests(task: str, gpu: str, gpus: int, model: str = "", avg_output_len: float | None = None) -> int:
    """Requests of one run: the task's dataset x the queue files' duplication factor (`DUP_FACTOR`,
    `DUP_EXCEPTIONS`). A row's avg_output_len is total completion tokens / requests, so avg_output_len x requests is
    a whole number; when it is not with the queue files' count (a row measured with a queue the files do not hold),
    the multiple of the dataset nearest to it that makes it one is taken (25 of the 342 vLLM rows of
    data/public-models/mlenergy-llm-v2.jsonl: tests/test_serving_window.py)."""
    family = "a100" if "a100" in gpu.lower() else "h100"
    n = DATASET[task] * DUP_EXCEPTIONS.get((model, family, gpus), DUP_FACTOR[task, family])
    if avg_output_len is None or _whole(avg_output_len * n):
        return n
    fits = [k * DATASET[task] for k in range(1, 41) if _whole(avg_output_len * k * DATASET[task])]
    return min(fits, key=lambda m: abs(m - n)) if fits else n


def _whole(x: float) -> bool:
    return abs(x - round(x)) < 1e-4


def _capped_mean(scale: float, cap: int) -> float:
    return scale * (1.0 - math.exp(-cap / scale))


def output_lengths(mean: float, cap: int, n: int, distinct: int | None = None, seed: int = 0) -> np.ndarray:
    """Output tokens of `n` requests in the order they are queued (assumed distribution): `distinct` values (default
    n) at the quantiles (i + 1/2) / distinct of an exponential of scale s, rounded, within [1, cap], s chosen so that
    the continuous capped mean s (1 - exp(-cap / s)) is `mean`; shuffled with `seed`, then repeated n / distinct times
    (greedy decoding of a dataset sent several times: each copy yields the same outputs)."""
    if not 1.0 <= mean < cap:
        raise ValueError(f"mean output length {mean} outside [1, {cap})")
    lo, hi = mean, mean * 1e3
    for _ in range(200):  # the capped mean rises with the scale
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _capped_mean(mid, cap) < mean else (lo, mid)
    distinct = distinct or n
    u = (np.arange(distinct) + 0.5) / distinct
    one = np.clip(np.rint(-lo * np.log1p(-u)), 1, cap).astype(int)
    np.random.default_rng(seed).shuffle(one)
    return np.resize(one, n)


@dataclass(frozen=True)
class Schedule:
    """The iterations of one simulated run, in order (arrays of one entry per iteration).

    decode: a decode iteration (else a prefill-only one); seqs: its running sequences (decode) or the prompts it
    prefills; context: the sum over its decoding sequences of their live context (prompt + tokens generated before
    the iteration), tokens (0 for a prefill); tpot_weight: Avg TPOT = tpot_weight . step times; steady: `ss_end_iter`
    (the iterations before it are the steady state); steady_tokens, steady_batch: the output tokens and the mean
    running sequences of the steady state."""

    decode: np.ndarray
    seqs: np.ndarray
    context: np.ndarray
    tpot_weight: np.ndarray
    steady: int
    steady_tokens: int
    steady_batch: float

    def windows(self, step_s: np.ndarray) -> tuple[float, float]:
        """(Avg TPOT, steady-state time per output token of one sequence = mean running batch x time / tokens) for
        the iterations' times `step_s` (any unit; the result is in it). Both linear in `step_s`."""
        step_s = np.asarray(step_s, dtype=float)
        return float(self.tpot_weight @ step_s), self.steady_batch * float(step_s[: self.steady].sum()) / (
            self.steady_tokens
        )

    def steady_weight(self) -> np.ndarray:
        """w with steady-state time per output token = w . step times."""
        w = np.zeros(len(self.decode))
        w[: self.steady] = self.steady_batch / self.steady_tokens
        return w


def schedule(
    lengths, slots: int, prompt: int, max_batched_tokens: int = MAX_BATCHED_TOKENS, min_steady: int = 2
) -> Schedule:
    """The iterations vLLM 0.5.4 without chunked prefill runs for requests of output `lengths` (tokens, in queue
    order), all waiting at time 0, each a prompt of `prompt` tokens, at most `slots` running (--max-num-seqs; the KV
    cache assumed large enough), and ML.ENERGY's aggregation of them (`Schedule`). A prefill-only iteration whenever
    a prompt waits and a slot is free (first come, first served; as many as the slots and `max_batched_tokens`
    allow, at least one), else a decode iteration. `min_steady`: the steady state ends at the first iteration from
    this index on whose waiting queue is empty (the aggregation's `[2:]`)."""
    lengths = [int(x) for x in lengths]
    if not lengths or min(lengths) < 1 or slots < 1 or prompt < 1:
        raise ValueError("schedule needs requests of >= 1 output token, >= 1 slot and a prompt of >= 1 token")
    per_prefill = max(1, max_batched_tokens // prompt)
    decode, seqs, context, weight = [], [], [], []
    waiting = 0  # index of the next queued request
    # the running sequences as aggregates: how many, the sum of their generated tokens, how many had their previous
    # token at each iteration, and how many (with their generated tokens) end after each count of decode iterations
    b = gen_sum = n_decode = 0
    lasts: dict[int, int] = {}
    ends: dict[int, list[int]] = {}
    steady = None
    tokens = batch_sum = 0
    while waiting < len(lengths) or b:
        i = len(decode)
        k = min(slots - b, len(lengths) - waiting, per_prefill)
        weight.append(0.0)
        if k > 0:  # a prefill-only iteration: each prompt's first token; a 1-token request ends here
            new = lengths[waiting : waiting + k]
            waiting += k
            going = [n for n in new if n > 1]
            for n in going:
                e = ends.setdefault(n_decode + n - 1, [0, 0])
                e[0] += 1
                e[1] += n
            b += len(going)
            gen_sum += len(going)
            lasts[i] = len(going)
            decode.append(False)
            seqs.append(k)
            context.append(0)
            out, batch = k, b + (k - len(going))
        else:  # a decode iteration: one token for each running sequence
            decode.append(True)
            seqs.append(b)
            context.append(b * prompt + gen_sum)
            # each sequence's gap spans the iterations after its previous token up to this one
            for last, c in lasts.items():
                for j in range(last + 1, i + 1):
                    weight[j] += c / b
            out = batch = b
            gen_sum += b
            n_decode += 1
            done, done_gen = ends.pop(n_decode, (0, 0))
            b -= done
            gen_sum -= done_gen
            lasts = {i: b}
        if steady is None:
            tokens += out
            batch_sum += batch
            if i >= min_steady and waiting == len(lengths):
                # this iteration's waiting queue is empty: it is ss_end_iter, outside the window
                steady = (i, tokens - out, (batch_sum - batch) / i)
    if steady is None:  # the queue emptied before iteration `min_steady`: no window (the aggregation would fail)
        raise ValueError("the waiting queue empties before the steady state starts; more requests than slots needed")
    w = np.array(weight) / max(1, n_decode)
    return Schedule(
        np.array(decode), np.array(seqs), np.array(context, dtype=float), w, steady[0], steady[1], steady[2]
    )
