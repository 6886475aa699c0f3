"""Issue 24's power question, candidate 2: the vLLM rows' busy shares taken from their replayed energy window
(docs/llm-serving.md, "Issue 24 checked like for like, and the power on these rows"; the rule was written there first).

    PYTHONPATH=. python bench/bench_power_window.py

The power fit (`predictor.power_fit`) as committed, with one change: each vLLM row of `serving_fit.ARCH` without
pipeline parallelism takes its compute and memory shares from ML.ENERGY's energy window replayed on a simulated run
(`predictor.serving_window.schedule` on `serving_window.output_lengths`, as `serving_fit.replay_row` replays it): every
iteration before `ss_end_iter`, a decode iteration of b sequences costed by the engine at its captured batch and the
prompt's context plus the attention's time per extra live token (compute and memory separately, as
`serving_fit.StepCache` does for the total), a prefill iteration as the engine's prefill step of the prompts it admits;
summed with the weights that make the window's steady-state time per output token of one sequence, then over the
row's measured avg_batch_size / output_tokens_per_s (scaled down together where they exceed it). Other rows unchanged.

Prints, per GPU and for both shares (the committed engine's steady state, the replayed window): the held-out energy MAPE
on ML.ENERGY (all, diffusion, LLM), on our H100 whole models, and the held-out power MAPE (median predicted /
measured) of the dense 8-32B vLLM rows, chat and code, and the all-rows fit.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from bench_power_gap_decay import row_times

from predictor import power_fit as pf
from predictor import serving_engine as eng
from predictor import serving_window as win
from predictor.devices import DEVICES, get_device
from predictor.serving_fit import ARCH, PROMPT_TOKENS, arch_of

ZERO = eng.HostParams(0.0, 0.0, 0.0, "none")


def window_shares(r: dict) -> tuple[float, float] | None:
    """(s_compute, s_memory) of one vLLM row from its replayed energy window (module docstring); None where the rule
    does not apply (not in `ARCH`, or pipeline parallel)."""
    if r["model"] not in ARCH or int(r["parallelization"]["pp"]) != 1:
        return None
    dev = pf.GPUS[r["gpu"]]
    a, d, tp = arch_of(r["model"]), get_device(dev), int(r["parallelization"]["tp"])
    task = r["task"].split("/")[-1]
    prompt = PROMPT_TOKENS[task]
    n = win.requests(task, dev, r["num_gpus"], r["model"], r["avg_output_len"])
    distinct = win.DATASET[task] if task == "code" else None
    lengths = win.output_lengths(r["avg_output_len"], win.MAX_TOKENS[task], n, distinct=distinct)
    s = win.schedule(lengths, r["max_num_seqs"], prompt)
    lo = eng.decode_step(a, d, 8, prompt, tp=tp, host=ZERO)
    hi = eng.decode_step(a, d, 8, prompt + 1024, tp=tp, host=ZERO)
    slope_c = (hi.compute_s - lo.compute_s) / (8 * 1024)
    slope_m = (hi.memory_s - lo.memory_s) / (8 * 1024)
    dec: dict[int, eng.StepTime] = {}
    pre: dict[int, eng.StepTime] = {}
    c = m = 0.0
    for is_decode, b, ctx in zip(s.decode[: s.steady], s.seqs[: s.steady], s.context[: s.steady], strict=True):
        b = int(b)
        if is_decode:
            at = b if b <= eng.CAPTURED_BATCHES[-1] else 8 * round(b / 8)
            if at not in dec:
                dec[at] = eng.decode_step(a, d, at, prompt, tp=tp, host=ZERO)
            extra = ctx - b * prompt
            c += dec[at].compute_s + slope_c * extra
            m += dec[at].memory_s + slope_m * extra
        else:
            if b not in pre:
                pre[b] = eng.prefill_step(a, d, b, prompt, tp=tp, host=ZERO)
            c += pre[b].compute_s
            m += pre[b].memory_s
    w = s.steady_batch / s.steady_tokens
    c, m, period = c * w, m * w, pf.step_time_s(r)
    k = min(1.0, period / (c + m)) if c + m > 0 else 1.0
    return c * k / period, m * k / period


def main() -> None:
    recs = [r for r in pf._jsonl(pf.DATA / "mlenergy-llm-v2.jsonl") if "vLLM" in str(r.get("runtime"))]
    llm = pf.llm_rows(pf.DATA / "mlenergy-llm-v2.jsonl")
    assert len(llm) == len(recs)
    times = [row_times(r) for r in recs]
    replaced = []
    for row, r in zip(llm, recs, strict=True):
        sh = window_shares(r)
        replaced.append(row if sh is None else dataclasses.replace(row, s_compute=sh[0], s_memory=sh[1]))
    diff = pf.diffusion_rows(pf.DATA / "mlenergy-diffusion-v2.jsonl")
    ours = pf.h100_model_rows(pf.H100_MODELS, pf.H100_CLASSES, pf.FP32_COMPUTE, pf.H100_SHARES)
    tms = [None] * len(diff) + times + [None] * len(ours)
    variants = {"engine steady state (committed)": diff + llm + ours, "replayed energy window": diff + replaced + ours}
    for dev in ("a100-40gb", "h100-80gb"):
        limit = DEVICES[dev].tdp_w
        print(f"\n{dev}")
        for label, rows in variants.items():
            idx = [i for i, r in enumerate(rows) if r.device == dev]
            sub = [rows[i] for i in idx]
            fp32 = any(r.kind == "h100-model" for r in sub)
            pred, meas = pf.evaluate(sub, limit, fp32)
            at = {i: j for j, i in enumerate(idx)}

            def mape(sel, pred=pred, meas=meas, at=at):
                p = np.array([pred[at[i]] for i in sel])
                m = np.array([meas[at[i]] for i in sel])
                return float(np.mean(np.abs(p - m) / m) * 100), float(np.median(p / m))

            public = [i for i in idx if rows[i].kind != "h100-model"]
            cells = [f"ML.ENERGY {mape(public)[0]:.2f}%"]
            cells += [f"{k} {mape([i for i in public if rows[i].kind == k])[0]:.1f}%" for k in ("diffusion", "llm")]
            if fp32:
                cells.append(f"H100 whole models {mape([i for i in idx if rows[i].kind == 'h100-model'])[0]:.1f}%")
            serving = [i for i in idx if tms[i] is not None and not tms[i]["moe"] and 7.9 <= tms[i]["params_b"] <= 32.5]
            e, ratio = mape(serving)
            parts = []
            for task in ("chat", "code"):
                t = mape([i for i in serving if tms[i]["task"] == task])
                parts.append(f"{task} {t[0]:.1f}% ({t[1]:.2f})")
            coef = pf.fit(sub, limit, fp32)
            print(
                f"  {label}: " + ", ".join(cells) + f"; dense 8-32B vLLM power {e:.1f}% ({ratio:.2f}, {len(serving)} "
                f"rows; {', '.join(parts)}); all-rows fit " + " / ".join(f"{c:.0f}" for c in coef) + " W"
            )


if __name__ == "__main__":
    main()
