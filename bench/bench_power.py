"""The power model's fits, before and after each change, and what they predict.

    PYTHONPATH=. python bench/bench_power.py [--rows]

Prints (no GPU needed; docs/power-and-memory.md quotes the tables):
1. the leave-one-model-out energy MAPE per GPU on the ML.ENERGY rows alone, with the vLLM rows' shares from the
   serving engine over the rows' avg_tpot_s (`step_time="tpot"`: the fit before the steady-state step time), the
   roofline proxy (the fit before the engine) and the serving engine (`predictor.power_fit.engine_shares`), both over
   the steady-state step time, with the fitted watts;
2. how well the ML.ENERGY rows pin P_memory: the held-out MAPE with P_memory held at each value of a grid (P_gap and
   P_compute refitted on the other models), engine shares; then (2b) with P_gap held at values our H100 models
   measure at the launch floor, P_compute and P_memory refitted;
3. the fit with our H100 whole models (data/h100-80gb/models, kernel classes cached by bench/h100_model_shares.py),
   for each float32 rule (`predictor.power.FP32_COMPUTE_MODES`) and each choice of what their fit shares are of
   (`predictor.power_fit.H100_SHARE_MODES`): held-out MAPE on ML.ENERGY (by model) and on the H100 models (by family);
4. the H100 whole models' power error per dtype x batch before (the ML.ENERGY-only fit) and now (held out by
   family); `--rows`: every row;
5. Llama-3.1-8B bfloat16 on one H100 with the `vllm-overlapped` profile at batch 8 and 256 (three request shapes),
   its predicted power under the fits, beside issue 24's public figures (a check, not fitted on).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor import power_fit as pf  # noqa: E402
from predictor.devices import get_device  # noqa: E402
from predictor.power import FP32_COMPUTE, FP32_COMPUTE_MODES, PowerParams  # noqa: E402


def params_of(doc: dict, dev: str) -> PowerParams:
    e = doc["devices"][dev]
    return PowerParams(
        e["gap_w"], e["compute_w"], e["memory_w"], e["limit_w"], e["ratio_p10"], e["ratio_p90"],
        compute_fp32_w=e.get("compute_fp32_w"),
    )  # fmt: skip


def fixed_memory_fit(p_mem: float):
    """A fit of (P_gap, P_compute) with P_memory held at p_mem (W), same weighting as `power_fit.fit`."""

    def f(rows, limit_w):
        from scipy.optimize import lsq_linear

        s_c = np.array([r.s_compute for r in rows])
        s_m = np.array([r.s_memory for r in rows])
        p = np.array([r.power_w for r in rows])
        a = np.stack([1 - s_c - s_m, s_c], axis=1) / p[:, None]
        gap, comp = lsq_linear(a, 1.0 - p_mem * s_m / p, bounds=(0.0, limit_w)).x
        return float(gap), float(comp), float(p_mem)

    return f


def fixed_gap_fit(p_gap: float):
    """A fit of (P_compute, P_memory) with P_gap held at p_gap (W), same weighting as `power_fit.fit`."""

    def f(rows, limit_w):
        from scipy.optimize import lsq_linear

        s_c = np.array([r.s_compute for r in rows])
        s_m = np.array([r.s_memory for r in rows])
        p = np.array([r.power_w for r in rows])
        a = np.stack([s_c, s_m], axis=1) / p[:, None]
        comp, mem = lsq_linear(a, 1.0 - p_gap * (1 - s_c - s_m) / p, bounds=(0.0, limit_w)).x
        return float(p_gap), float(comp), float(mem)

    return f


def lomo_mape(rows, limit_w, fitter) -> float:
    pred = np.empty(len(rows))
    for model in {r.model for r in rows}:
        coef = fitter([r for r in rows if r.model != model], limit_w)
        for i, r in enumerate(rows):
            if r.model == model:
                pred[i] = pf.predict_w(coef, r, limit_w)
    return pf._mape(pred, np.array([r.power_w for r in rows]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", action="store_true", help="table 4: every H100 whole model's row")
    args = ap.parse_args()
    docs = {}
    print("1. leave-one-model-out energy MAPE (ML.ENERGY rows) by how the vLLM rows get their shares")
    # the engine's shares over the rows' avg_tpot_s (the fit of 2026-11-26 before the step time became the steady
    # state's avg_batch_size / output_tokens_per_s), for comparison; then the fits the tables below use
    for shares, step in (("engine", "tpot"), ("roofline", pf.STEP_TIME), ("engine", pf.STEP_TIME)):
        docs[shares], table = pf.run(pf.DATA, shares=shares, step_time=step, h100_models=False)
        print(f"shares: {shares}, over the rows' {step} step time, ML.ENERGY rows only\n{table}")

    print("\n2. held-out MAPE with P_memory held fixed (engine shares; P_gap, P_compute refitted per held-out model)")
    diff = pf.diffusion_rows(pf.DATA / "mlenergy-diffusion-v2.jsonl")
    llm = pf.llm_rows(pf.DATA / "mlenergy-llm-v2.jsonl", shares="engine")
    for dev, grid in (("a100-40gb", (150, 200, 250, 300, 350, 400)), ("h100-80gb", (300, 400, 500, 600, 700))):
        sub = [r for r in diff + llm if r.device == dev]
        limit = get_device(dev).tdp_w
        cells = [f"{w} W: {lomo_mape(sub, limit, fixed_memory_fit(w)):.1f}%" for w in grid]
        print(f"{dev}: " + ", ".join(cells))
    print("\n2b. P_gap held fixed (h100-80gb, engine shares): held-out MAPE, and P_compute / P_memory on all rows")
    sub = [r for r in diff + llm if r.device == "h100-80gb"]
    for gap in (128, 142, 146, 172, 191):
        c = fixed_gap_fit(gap)(sub, 700.0)
        print(f"P_gap {gap} W: {lomo_mape(sub, 700.0, fixed_gap_fit(gap)):.1f}%, {c[1]:.0f} / {c[2]:.0f} W")

    print("\n3. with our H100 whole models (leave-one-family-out on them, leave-one-model-out on ML.ENERGY as above):")
    print("   which compute-bound kernels get P_compute_fp32, and what their fit shares are of")
    print("| float32 term | fit shares of | ML.ENERGY a100-40gb | ML.ENERGY h100-80gb | H100 whole models | "
          "P_gap / P_compute / P_memory / P_compute_fp32 (W) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for fp32 in FP32_COMPUTE_MODES:
        for h100_shares in pf.H100_SHARE_MODES:
            doc, _ = pf.run(pf.DATA, fp32_compute=fp32, h100_shares=h100_shares)
            e, d = doc["evaluation"], doc["devices"]["h100-80gb"]
            if (fp32, h100_shares) == (FP32_COMPUTE, pf.H100_SHARES):
                docs["now"] = doc
            watts = f"{d['gap_w']:.0f} / {d['compute_w']:.0f} / {d['memory_w']:.0f} / {d.get('compute_fp32_w', '-')}"
            print(
                f"| {fp32} | {h100_shares} | {e['a100-40gb']['mape_pct']:.1f}% | {e['h100-80gb']['mape_pct']:.1f}% | "
                f"{e['h100-80gb']['mape_h100_models_pct']:.1f}% | {watts} |"
            )

    print("\n4. our H100 whole models: power MAPE per dtype x batch; before = the ML.ENERGY-only fit (the kernel")
    print("   model's shares, no float32 term: what `predict` gave), now = held out by family (the fit adopted)")
    before_rows = pf.h100_model_rows(fp32_compute="none", shares="predicted")
    now_rows = pf.h100_model_rows(fp32_compute=FP32_COMPUTE, shares=pf.H100_SHARES)
    public = [r for r in diff + llm if r.device == "h100-80gb"]
    before_coef = pf.fit(public, 700.0)
    before = np.array([pf.predict_w(before_coef, r, 700.0) for r in before_rows])
    allrows = public + now_rows
    pred, _ = pf.evaluate(allrows, 700.0, FP32_COMPUTE != "none")
    now = pred[len(public) :]
    meas = np.array([r.power_w for r in now_rows])
    groups = {}
    for i, r in enumerate(now_rows):
        dtype, batch = r.label.split(" ")[1], r.label.split(" ")[-1]
        groups.setdefault(f"{dtype} batch {batch}", []).append(i)
    groups["all"] = list(range(len(now_rows)))
    print("| rows | n | measured W (median) | before: MAPE (median pred/meas) | now: MAPE (median pred/meas) |")
    print("|---|---|---|---|---|")
    for key, idx in groups.items():
        m = meas[idx]
        cells = [f"{pf._mape(x[idx], m):.1f}% ({np.median(x[idx] / m):.2f})" for x in (before, now)]
        print(f"| {key} | {len(idx)} | {np.median(m):.0f} | {cells[0]} | {cells[1]} |")
    if args.rows:
        for r, b, n, m in zip(now_rows, before, now, meas, strict=True):
            print(f"{r.label[:60]:60s} measured {m:4.0f}  before {b:4.0f}  now {n:4.0f}")

    print("\n5. Llama-3.1-8B bf16, h100-80gb, vllm-overlapped: predicted power (W), the fits of table 1 (roofline")
    print("   proxy, engine shares) and with our H100 models (now), vs issue 24's figures (a check, not fitted on)")
    from bench_llm_serving import LLAMA31_8B, PUBLIC_LLAMA31_8B_H100, PUBLIC_SHAPES

    from predictor import serving_engine as eng

    a, dev = eng.Arch.from_config(LLAMA31_8B), get_device("h100-80gb")
    prof = eng.engine_profile("vllm-overlapped")
    for batch, (_, watts) in PUBLIC_LLAMA31_8B_H100.items():
        for prompt, gen in PUBLIC_SHAPES:
            w = [
                eng.serve(
                    a, dev, batch, prompt, gen, params_of(docs[s], "h100-80gb"), host=prof.host(dev),
                    batched_tokens=eng.batched_tokens_for(prof, dev),
                ).avg_power_w
                for s in ("roofline", "engine", "now")
            ]  # fmt: skip
            cells = " / ".join(f"{x:4.0f}" for x in w)
            print(f"batch {batch:3d} {prompt:4d}/{gen:<3d}: {cells} W   public {watts:.0f} W")


if __name__ == "__main__":
    main()
