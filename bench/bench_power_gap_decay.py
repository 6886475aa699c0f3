"""Issue 24's power question on the vLLM 0.5.4 rows: does gap power depend on the gap's length? (docs/llm-serving.md,
"Issue 24 checked like for like, and the power on these rows", candidate 1; the rule was written there first).

    PYTHONPATH=. python bench/bench_power_gap_decay.py [--taus 0,1,2,5,10,20,50]

The power fit (`predictor.power_fit`) as committed, with one change to the vLLM rows the serving engine costs: after
each engine step of GPU time t the host gap of length g draws P_gap x g + (P_k - P_gap) x tau x (1 - exp(-g / tau)),
P_k the step's kernel power, i.e. the row's compute and memory shares are scaled by 1 + tau (1 - exp(-g / tau)) / t
(capped so they sum to at most 1). A row's period is its measured avg_batch_size / output_tokens_per_s; it holds 1 + s
steps (the decode step and the share s of a prefill step `power_fit.engine_shares` charges), its host time (the period
less the engine's GPU time) split evenly over them. Diffusion rows and our H100 whole models are unchanged. tau is
chosen per GPU from `--taus` (ms) by the fit's own objective on the training rows of each held-out fold (nested), and
the fold's rows predicted with it.

Prints, per GPU: the held-out energy MAPE on ML.ENERGY (all, diffusion, LLM rows), on our H100 whole models, the
held-out power MAPE and median predicted / measured of the dense 8-32B vLLM rows the engine costs (tensor parallel
any, chat and code), the tau chosen in each fold (counts), and, with tau = 0, the same (the committed fit); then per
row of the H100 dense 8-32B group the power the host time would have to draw (the "implied gap power") under the
committed figures, against the gap per step.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter

import numpy as np

from predictor import power_fit as pf
from predictor.devices import DEVICES
from predictor.power import load_power_params


def row_times(r: dict) -> dict | None:
    """The engine's GPU time of one vLLM row's period as `power_fit.engine_shares` costs it (s): compute, memory,
    kernel gaps; the period (measured); the steps in it. None where the engine does not build the model."""
    e = pf.engine_row(r)
    if e is None:
        return None
    task = r["task"].split("/")[-1]
    return {
        "c": e.decode.compute_s + e.share * e.prefill.compute_s,
        "m": e.decode.memory_s + e.share * e.prefill.memory_s,
        "gpu": e.decode.total_s + e.share * e.prefill.total_s,
        "period": pf.step_time_s(r),
        "steps": 1.0 + e.share,
        "params_b": e.arch.params() / 1e9,
        "moe": bool(e.arch.experts),
        "task": task,
        "label": f"{r['model'].split('/')[-1]} {task} tp{e.tp} B{e.batch}",
    }


def decay_shares(t: dict, tau_s: float) -> tuple[float, float]:
    """(s_compute, s_memory) of a row with the gap-decay rule at time constant `tau_s` (module docstring)."""
    c, m, period = t["c"], t["m"], t["period"]
    k = min(1.0, period / (c + m)) if c + m > 0 else 1.0
    c, m = c * k, m * k
    g = max(0.0, period - t["gpu"]) / t["steps"]
    step_gpu = t["gpu"] / t["steps"]
    scale = 1.0 + (tau_s * (1.0 - math.exp(-g / tau_s)) / step_gpu if tau_s > 0 and step_gpu > 0 else 0.0)
    s_c, s_m = c * scale / period, m * scale / period
    if s_c + s_m > 1.0:
        s_c, s_m = s_c / (s_c + s_m), s_m / (s_c + s_m)
    return s_c, s_m


def rows_at(base: list[pf.Row], times: list[dict | None], tau_s: float) -> list[pf.Row]:
    """`base` with each engine-costed vLLM row's shares under the gap-decay rule (`times[i]` None: unchanged)."""
    import dataclasses

    out = []
    for r, t in zip(base, times, strict=True):
        if t is None:
            out.append(r)
        else:
            s_c, s_m = decay_shares(t, tau_s)
            out.append(dataclasses.replace(r, s_compute=s_c, s_memory=s_m))
    return out


def loss(coef, rows: list[pf.Row], limit: float) -> float:
    """The fit's objective: sum of squared relative power errors."""
    return float(sum((pf.predict_w(coef, r, limit) / r.power_w - 1.0) ** 2 for r in rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--taus", default="0,1,2,5,10,20,50", help="time constants to choose from (ms)")
    args = ap.parse_args()
    taus = [float(x) / 1e3 for x in args.taus.split(",")]
    recs = [r for r in pf._jsonl(pf.DATA / "mlenergy-llm-v2.jsonl") if "vLLM" in str(r.get("runtime"))]
    llm = pf.llm_rows(pf.DATA / "mlenergy-llm-v2.jsonl")
    assert len(llm) == len(recs)
    times = [row_times(r) for r in recs]
    diff = pf.diffusion_rows(pf.DATA / "mlenergy-diffusion-v2.jsonl")
    ours = pf.h100_model_rows(pf.H100_MODELS, pf.H100_CLASSES, pf.FP32_COMPUTE, pf.H100_SHARES)
    base = diff + llm + ours
    tms = [None] * len(diff) + times + [None] * len(ours)
    variants = {tau: rows_at(base, tms, tau) for tau in taus}
    committed = load_power_params()
    for dev in ("a100-40gb", "h100-80gb"):
        limit = DEVICES[dev].tdp_w
        idx = [i for i, r in enumerate(base) if r.device == dev]
        fp32 = any(base[i].kind == "h100-model" for i in idx)
        groups = sorted({base[i].model for i in idx})
        print(f"\n{dev}: {len(idx)} rows, {len(groups)} held-out groups")
        for label, choose in (("tau = 0 (committed rule)", [0.0]), (f"tau chosen from {args.taus} ms", taus)):
            pred, meas, chosen = {}, {}, Counter()
            for g in groups:
                best = None
                for tau in choose:
                    train = [variants[tau][i] for i in idx if base[i].model != g]
                    coef = pf.fit(train, limit, fp32)
                    lo = loss(coef, train, limit)
                    if best is None or lo < best[0]:
                        best = (lo, tau, coef)
                _, tau, coef = best
                chosen[tau * 1e3] += 1
                for i in idx:
                    if base[i].model == g:
                        pred[i] = pf.predict_w(coef, variants[tau][i], limit)
                        meas[i] = base[i].power_w

            def mape(sel, pred=pred, meas=meas):
                p = np.array([pred[i] for i in sel])
                m = np.array([meas[i] for i in sel])
                return float(np.mean(np.abs(p - m) / m) * 100), float(np.median(p / m))

            public = [i for i in idx if base[i].kind != "h100-model"]
            kinds = {k: [i for i in public if base[i].kind == k] for k in ("diffusion", "llm")}
            serving = [i for i in idx if tms[i] is not None and not tms[i]["moe"] and 7.9 <= tms[i]["params_b"] <= 32.5]
            cells = [f"ML.ENERGY {mape(public)[0]:.2f}%", f"diffusion {mape(kinds['diffusion'])[0]:.1f}%",
                     f"LLM {mape(kinds['llm'])[0]:.1f}%"]  # fmt: skip
            if fp32:
                cells.append(f"H100 whole models {mape([i for i in idx if base[i].kind == 'h100-model'])[0]:.1f}%")
            e, r = mape(serving)
            for task in ("chat", "code"):
                sub = [i for i in serving if tms[i]["task"] == task]
                cells.append(f"dense 8-32B {task} {mape(sub)[0]:.1f}% ({mape(sub)[1]:.2f})")
            coef_all = pf.fit([variants[max(chosen, key=chosen.get) / 1e3][i] for i in idx], limit, fp32)
            print(
                f"  {label}: " + ", ".join(cells) + f"; dense 8-32B vLLM power {e:.1f}% ({r:.2f}, {len(serving)} rows)"
                f"; tau chosen (ms: folds) {dict(sorted(chosen.items()))}; all-rows fit "
                + " / ".join(f"{c:.0f}" for c in coef_all)
                + " W"
            )
        p = committed[dev]
        print(f"  implied host-gap power per row, committed figures (P_gap {p.gap_w:.0f} W):")
        for i in idx:
            t = tms[i]
            if t is None or t["moe"] or not 7.9 <= t["params_b"] <= 32.5:
                continue
            e = base[i].power_w * t["period"] - p.compute_w * t["c"] - p.memory_w * t["m"]
            g = t["period"] - t["c"] - t["m"]
            print(f"    {t['label']:45} gap per step {g / t['steps'] * 1e3:6.1f} ms  implied gap power {e / g:5.0f} W")


if __name__ == "__main__":
    main()
