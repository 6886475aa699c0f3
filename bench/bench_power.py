"""The power model's fit before and after the vLLM rows took the serving engine's shares, and what it predicts.

    PYTHONPATH=. python bench/bench_power.py [--skip-models]

Prints (no GPU needed; docs/power-and-memory.md quotes the tables):
1. the leave-one-model-out energy MAPE per GPU with the vLLM rows' shares from the serving engine over the rows'
   avg_tpot_s (the fit before `predictor.power_fit.STEP_TIME`), the roofline proxy (the fit before the engine) and
   the serving engine (`predictor.power_fit.engine_shares`, the fit now), both over the steady-state step time,
   with the fitted watts;
2. how well the rows pin P_memory: the held-out MAPE with P_memory held at each value of a grid (P_gap and
   P_compute refitted on the other models), engine shares; then (2b) with P_gap held at values our H100 models
   measure at the launch floor (table 4), P_compute and P_memory refitted;
3. Llama-3.1-8B bfloat16 on one H100 with the `vllm-overlapped` profile at batch 8 and 256 (three request shapes),
   its predicted power under both fits, beside issue 24's public figures (a check, not fitted on);
4. the five whole models measured on our H100 (data/h100-80gb/models: eager float32, batch 1): measured power
   against the power both fits predict from the kernel model's busy shares (`predictor.power.busy_shares`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from predictor import power_fit as pf  # noqa: E402
from predictor.devices import get_device  # noqa: E402
from predictor.power import PowerParams, busy_shares  # noqa: E402

MODELS = ROOT / "data" / "h100-80gb" / "models" / "shard-000-of-001.jsonl"


def params_of(doc: dict, dev: str) -> PowerParams:
    e = doc["devices"][dev]
    return PowerParams(e["gap_w"], e["compute_w"], e["memory_w"], e["limit_w"], e["ratio_p10"], e["ratio_p90"])


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
    ap.add_argument("--skip-models", action="store_true", help="leave out table 4 (it imports every model: slow)")
    args = ap.parse_args()
    docs = {}
    print("1. leave-one-model-out energy MAPE (ML.ENERGY rows) by how the vLLM rows get their shares")
    # the engine's shares over the rows' avg_tpot_s (the fit of 2026-11-26 before the step time became the steady
    # state's avg_batch_size / output_tokens_per_s), for comparison; then the fits the tables below use
    for shares, step in (("engine", "tpot"), ("roofline", pf.STEP_TIME), ("engine", pf.STEP_TIME)):
        default, pf.STEP_TIME = pf.STEP_TIME, step
        docs[shares], table = pf.run(pf.DATA, shares=shares)
        pf.STEP_TIME = default
        print(f"shares: {shares}, over the rows' {step} step time\n{table}")

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

    print("\n3. Llama-3.1-8B bf16, h100-80gb, vllm-overlapped: predicted power (W) before / now vs issue 24's figures")
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
                for s in ("roofline", "engine")
            ]  # fmt: skip
            print(f"batch {batch:3d} {prompt:4d}/{gen:<3d}: {w[0]:4.0f} / {w[1]:4.0f} W   public {watts:.0f} W")
    if args.skip_models:
        return

    print("\n4. our H100 whole models (eager float32, batch 1): measured vs predicted power (W) before / now")
    from analyzer import analyze
    from predictor.kernel_model import kernel_latency

    for line in MODELS.read_text().splitlines():
        rec = json.loads(line)
        view = analyze(f"zoo:{rec['zoo']}", batch=rec["batch"], dtype=rec["dtype"]).analysis.kernel_view
        t = kernel_latency(view.kernels, dev)
        s_c, s_m, s_g = busy_shares(t.compute_s, t.memory_s, t.launch_s)
        w = [params_of(docs[s], "h100-80gb").power_w(s_c, s_m) for s in ("roofline", "engine")]
        print(
            f"{rec['zoo']:32} shares c/m/gap {s_c:.2f}/{s_m:.2f}/{s_g:.2f}  measured {rec['power_w']:4.0f}  "
            f"predicted {w[0]:4.0f} / {w[1]:4.0f}"
        )


if __name__ == "__main__":
    main()
