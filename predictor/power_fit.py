"""Fit the power model (`predictor.power`) on the ML.ENERGY Leaderboard v2 measurements; evaluate it by leaving
one model out; write `predictor/power_params.json` and print the evaluation table of docs/power-and-memory.md.

Usage: python -m predictor.power_fit [--data data/public-models] [--out predictor/power_params.json]
       [--shares engine|roofline] [--sensitivity]

Rows and what each measures (data/public-models/README.md):
- diffusion (mlenergy-diffusion-v2.jsonl, 118 rows, float16 eager diffusers pipelines): average board power
  = energy_j_per_inference x batch / batch latency.
- LLM serving (mlenergy-llm-v2.jsonl, the 342 vLLM 0.5.4 rows): power per GPU = energy_per_request_j x
  requests per second / num_gpus, requests per second = output_tokens_per_s / avg_output_len.
  (The 84 HF-eager v1 rows are left out: their GPU is "A100, variant not stated", so the power limit is unknown.)

Busy shares of a row (the kernel breakdown of these pipelines is unknown to preflight, so each row gets a
row-level proxy, stated here and in the doc):
- diffusion -> compute-bound. Per (GPU, model) the batch latency is fitted as a + b x batch (least squares over
  the model's batch sizes); s_compute = b x batch / latency (the share of the time that grows with the work),
  clipped to [0, 1]; s_memory = 0; the rest is gap (text encoder, VAE, host work and launch floors that do not
  grow with the batch). The denoiser's own memory-bound kernels (norms, elementwise) are folded into P_compute.
- LLM serving (every vLLM row: `engine_shares`; the decoders of `predictor.serving_fit.ARCH` and `EXTRA_ARCH`,
  the vision-language models' vision encoders not counted; a pipeline-parallel row as one stage,
  layers / pp): the shares the vllm runtime itself
  gives the row, so that the fit and a prediction read the same kernel classes. The engine model
  (`predictor.serving_engine`) costs one decode step at the row's running batch (rounded), tensor parallel degree
  and mean live context (prompt `serving_fit.PROMPT_TOKENS[task]` + half the output) and the prefills interleaved
  per step (batch / output tokens prompts, as `serving_engine.serve`), with no host time; its compute-bound and
  memory-bound kernel time (decode + prefill share) over the row's steady-state time per decode step
  (`step_time_s`: avg_batch_size / output_tokens_per_s, the window its energy was counted over) are s_compute
  and s_memory (scaled down together when they add up to more than 1: the engine predicts more GPU time than was
  measured). The rest (host scheduling, sampling, all-reduces, launch floors) is gap.
- LLM decode, other rows (vision-language models, pipeline parallel: the roofline proxy) -> memory-bound below
  the ridge, compute-bound above it. Per GPU and decode step: the bytes read are
  the weights (2 bytes x parameters) and the running requests' KV cache (avg_batch_size x context x 2 x layers x
  KV heads x head dimension x 2 bytes, context = `PROMPT_TOKENS` + half the average output: an assumption, the
  rows give no prompt lengths), divided over the GPUs (tensor x pipeline parallel), at the kernel model's fp16
  GEMM memory efficiency: t_m = bytes / (bandwidth x e_memory); the FLOPs are 2 x active parameters x
  avg_batch_size / GPUs: t_c = FLOPs / (fp16 peak x e_compute). The larger of the two is the step's busy time,
  given to memory (t_m > t_c) or compute, as a share of the steady-state time per decode step:
  s = min(1, max(t_m, t_c) / `step_time_s`). The rest (host scheduling, tensor-parallel all-reduce, sampling,
  prefill not overlapped) is gap. Attention FLOPs and vision encoders are not counted. Architectures:
  `LLM_ARCH`.

The fit: per GPU, least squares of relative power error (rows weighted 1 / measured power) for
(P_gap, P_compute, P_memory). Leave-one-model-out: each model's rows predicted by a fit on the other models of
that GPU. Energy error = power error here, as each row's measured latency is used.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .devices import DEVICES, get_device
from .kernel_model import load_params
from .power import PARAMS_PATH, SCHEMA

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "public-models"

#: GPU names in the data -> device keys of `predictor.devices`.
GPUS = {"A100-SXM4-40GB": "a100-40gb", "NVIDIA A100-SXM4-40GB": "a100-40gb", "H100-80GB-HBM3 (SXM)": "h100-80gb",
        "NVIDIA H100 80GB HBM3": "h100-80gb"}  # fmt: skip

#: The LLMs of mlenergy-llm-v2.jsonl: (parameters, parameters active per token (billions; the two differ for the
#: mixture-of-experts Mixtrals, 2 of 8 experts), layers, KV heads, head dimension), from the models' published
#: configs (rounded parameter counts from the model cards).
LLM_ARCH = {
    "bigcode/starcoder2-15b": (16.0, 16.0, 40, 4, 128),
    "bigcode/starcoder2-3b": (3.0, 3.0, 30, 2, 128),
    "bigcode/starcoder2-7b": (7.2, 7.2, 32, 4, 128),
    "codellama/CodeLlama-13b-hf": (13.0, 13.0, 40, 40, 128),
    "codellama/CodeLlama-34b-hf": (33.7, 33.7, 48, 8, 128),
    "codellama/CodeLlama-70b-hf": (69.0, 69.0, 80, 8, 128),
    "codellama/CodeLlama-7b-hf": (6.7, 6.7, 32, 32, 128),
    "facebook/chameleon-30b": (34.0, 34.0, 48, 64, 128),
    "facebook/chameleon-7b": (7.0, 7.0, 32, 32, 128),
    "google/codegemma-1.1-2b": (2.5, 2.5, 18, 1, 256),
    "google/codegemma-7b": (8.5, 8.5, 28, 16, 256),
    "google/gemma-2-27b-it": (27.2, 27.2, 46, 16, 128),
    "google/gemma-2-2b-it": (2.6, 2.6, 26, 4, 256),
    "google/gemma-2-9b-it": (9.2, 9.2, 42, 8, 256),
    "llava-hf/llama3-llava-next-8b-hf": (8.4, 8.4, 32, 8, 128),
    "llava-hf/llava-1.5-13b-hf": (13.4, 13.4, 40, 40, 128),
    "llava-hf/llava-1.5-7b-hf": (7.1, 7.1, 32, 32, 128),
    "meta-llama/Meta-Llama-3.1-405B-Instruct": (405.0, 405.0, 126, 8, 128),
    "meta-llama/Meta-Llama-3.1-70B-Instruct": (70.6, 70.6, 80, 8, 128),
    "microsoft/Phi-3-medium-4k-instruct": (14.0, 14.0, 40, 10, 128),
    "microsoft/Phi-3-mini-4k-instruct": (3.8, 3.8, 32, 32, 96),
    "microsoft/Phi-3-small-8k-instruct": (7.4, 7.4, 32, 8, 128),
    "microsoft/Phi-3-vision-128k-instruct": (4.2, 4.2, 32, 32, 96),
    "mistralai/Mistral-7B-Instruct-v0.3": (7.3, 7.3, 32, 8, 128),
    "mistralai/Mistral-Large-Instruct-2407": (123.0, 123.0, 88, 8, 128),
    "mistralai/Mistral-Nemo-Instruct-2407": (12.2, 12.2, 40, 8, 128),
    "mistralai/Mixtral-8x22B-Instruct-v0.1": (141.0, 39.1, 56, 8, 128),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": (46.7, 12.9, 32, 8, 128),
}
#: Prompt tokens assumed per request (the rows give output lengths only): a request's KV cache during decode holds
#: PROMPT_TOKENS + half its output on average. An assumption; docs/power-and-memory.md shows the fit's sensitivity.
PROMPT_TOKENS = 256

GPUS_FITTED = ("a100-40gb", "h100-80gb")

#: Devices without public power measurements: (device the figures come from, why).
TRANSFERS = {
    "a100-80gb": ("a100-40gb", "same GA100 chip and 400 W limit"),
    "a100-pcie-40gb": ("a100-40gb", "same GA100 chip, 250 W limit"),
    "a100-pcie-80gb": ("a100-40gb", "same GA100 chip, 300 W limit"),
    "h200-141gb": ("h100-80gb", "same GH100 chip and 700 W limit"),
    "h100-nvl-94gb": ("h100-80gb", "same GH100 chip, 400 W limit"),
}


@dataclass(frozen=True)
class Row:
    """One measured row: device key, model, kind ("diffusion" or "llm"), busy shares, measured power (W)."""

    device: str
    model: str
    kind: str
    s_compute: float
    s_memory: float
    power_w: float
    label: str  # batch or running batch, for tables


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def diffusion_rows(path: Path) -> list[Row]:
    """Diffusion rows with the latency-scaling proxy of the module docstring."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in _jsonl(path):
        groups.setdefault((GPUS[r["gpu"]], r["model"]), []).append(r)
    out = []
    for (dev, model), rows in sorted(groups.items()):
        b = np.array([r["batch"] for r in rows], dtype=float)
        lat = np.array([r["latency_ms_avg"] for r in rows], dtype=float)
        if len(set(b)) >= 2:
            slope, _ = np.polyfit(b, lat, 1)
        else:  # one batch size: no scaling to read, the whole time counts as busy
            slope = lat[0] / b[0]
        for r, bi, li in zip(rows, b, lat, strict=True):
            s = float(np.clip(slope * bi / li, 0.0, 1.0))
            power = r["energy_j_per_inference"] * r["batch"] / (li / 1e3)
            out.append(Row(dev, model, "diffusion", s, 0.0, power, f"batch {r['batch']}"))
    return out


def engine_shares(r: dict) -> tuple[float, float] | None:
    """(s_compute, s_memory) of one vLLM row from the serving engine's kernels (module docstring), or None when the
    engine does not build the row's model (neither in `serving_fit.ARCH` nor in `EXTRA_ARCH`). A pipeline-parallel
    row (pp stages of tp GPUs) is costed as one stage: layers / pp at tensor parallel tp, as each GPU runs its
    stage's layers once per output token."""
    import dataclasses

    from . import serving_engine as eng
    from .serving_fit import ARCH, EXTRA_ARCH, arch_of
    from .serving_fit import PROMPT_TOKENS as ENGINE_PROMPTS

    if r["model"] not in ARCH and r["model"] not in EXTRA_ARCH:
        return None
    a = arch_of(r["model"])
    pp = int(r["parallelization"]["pp"])
    if pp > 1:
        stage = math.ceil(a.layers / pp)
        a = dataclasses.replace(a, layers=stage, moe_layers=stage if a.moe_layers else 0)
    d, tp = get_device(GPUS[r["gpu"]]), int(r["parallelization"]["tp"])
    batch, gen = max(1, round(r["avg_batch_size"])), max(2, round(r["avg_output_len"]))
    prompt = ENGINE_PROMPTS["code" if r["task"].split("/")[-1] == "code" else "chat"]
    none = eng.HostParams(0.0, 0.0, 0.0, "none")
    step = eng.decode_step(a, d, batch, prompt + gen / 2, tp=tp, host=none)
    stalls = batch / gen  # prompts prefilled per decode step, grouped as `serving_engine.serve` groups them
    group = max(1, round(stalls))
    pre = eng.prefill_step(a, d, group, prompt, tp=tp, host=none)
    c = step.compute_s + stalls / group * pre.compute_s
    m = step.memory_s + stalls / group * pre.memory_s
    tpot = step_time_s(r)
    k = min(1.0, tpot / (c + m)) if c + m > 0 else 1.0  # the engine's GPU time longer than measured: scale down
    return c * k / tpot, m * k / tpot


#: The time per decode step the vLLM rows' shares are taken of: "throughput" (the steady-state time per output token
#: of one running sequence, avg_batch_size / output_tokens_per_s: the window the rows' energy and throughput span) or
#: "tpot" (the rows' avg_tpot_s, a mean over all engine iterations including the drain after the steady state: the
#: fit before 2026-11-26). docs/llm-serving.md, "What the rows' TPOT and energy span".
STEP_TIME = "throughput"


def step_time_s(r: dict, how: str | None = None) -> float:
    """Seconds per decode step of one vLLM row (`STEP_TIME` unless `how` says): steady-state avg_batch_size /
    output_tokens_per_s, or the row's avg_tpot_s."""
    if (how or STEP_TIME) == "tpot":
        return float(r["avg_tpot_s"])
    return float(r["avg_batch_size"]) / float(r["output_tokens_per_s"])


#: How the vLLM rows get their shares: "engine" (`engine_shares` where the engine builds the model, the roofline
#: proxy elsewhere) or "roofline" (the proxy on every row: the fit before the engine existed, kept for comparison).
SHARES = "engine"


def llm_rows(path: Path, prompt_tokens: int = PROMPT_TOKENS, shares: str = SHARES) -> list[Row]:
    """vLLM serving rows with the shares of the module docstring (`shares`: "engine" or "roofline")."""
    table = load_params()
    out = []
    for r in _jsonl(path):
        if "vLLM" not in str(r.get("runtime")):
            continue
        dev = GPUS[r["gpu"]]
        d = get_device(dev)
        e = table.lookup(dev, "gemm", "float16")
        n = int(r["num_gpus"])
        power = r["energy_per_request_j"] * r["output_tokens_per_s"] / r["avg_output_len"] / n
        engine = engine_shares(r) if shares == "engine" else None
        if engine is not None:
            out.append(Row(dev, r["model"], "llm", *engine, power, f"batch {r['avg_batch_size']:.0f}"))
            continue
        total_b, active_b, layers, kv_heads, head_dim = LLM_ARCH[r["model"]]
        batch = r["avg_batch_size"]
        context = prompt_tokens + r["avg_output_len"] / 2  # tokens in a request's KV cache, on average
        kv_bytes = batch * context * 2 * layers * kv_heads * head_dim * 2  # K and V, float16
        t_m = (2.0 * total_b * 1e9 + kv_bytes) / n / (d.bandwidth * e.e_memory)
        t_c = 2.0 * active_b * 1e9 * batch / n / (d.peak_flops["fp16"] * e.e_compute)
        s = min(1.0, max(t_m, t_c) / step_time_s(r))
        s_c, s_m = (s, 0.0) if t_c >= t_m else (0.0, s)
        out.append(Row(dev, r["model"], "llm", s_c, s_m, power, f"batch {batch:.0f}"))
    return out


def fit(rows: list[Row], limit_w: float) -> tuple[float, float, float]:
    """(P_gap, P_compute, P_memory) in W: least squares of the relative error over `rows`, each figure bounded
    to [0, limit_w] (a board cannot draw more than its power limit in any state)."""
    from scipy.optimize import lsq_linear

    s_c = np.array([r.s_compute for r in rows])
    s_m = np.array([r.s_memory for r in rows])
    p = np.array([r.power_w for r in rows])
    a = np.stack([1 - s_c - s_m, s_c, s_m], axis=1) / p[:, None]
    coef = lsq_linear(a, np.ones_like(p), bounds=(0.0, limit_w)).x
    return tuple(float(c) for c in coef)


def predict_w(coef: tuple[float, float, float], row: Row, limit_w: float) -> float:
    gap, comp, mem = coef
    return min(gap + (comp - gap) * row.s_compute + (mem - gap) * row.s_memory, limit_w)


def evaluate(rows: list[Row], limit_w: float) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-model-out: (predicted W, measured W) per row, in `rows` order."""
    pred = np.empty(len(rows))
    for model in {r.model for r in rows}:
        coef = fit([r for r in rows if r.model != model], limit_w)
        for i, r in enumerate(rows):
            if r.model == model:
                pred[i] = predict_w(coef, r, limit_w)
    return pred, np.array([r.power_w for r in rows])


def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - meas) / meas) * 100) if len(meas) else float("nan")


def run(data: Path, prompt_tokens: int = PROMPT_TOKENS, shares: str = SHARES) -> tuple[dict, str]:
    """Fit every GPU with data, evaluate, and return (the parameter document, the Markdown evaluation table)."""
    rows = diffusion_rows(data / "mlenergy-diffusion-v2.jsonl") + llm_rows(
        data / "mlenergy-llm-v2.jsonl", prompt_tokens, shares
    )
    devices, evaluation = {}, {}
    lines = [
        "| GPU | rows | models | held-out energy MAPE, all | diffusion | LLM serving | 60%-of-TDP rule, all "
        "| P_gap / P_compute / P_memory (W, all rows) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for dev in sorted({r.device for r in rows}):
        d = DEVICES[dev]
        sub = [r for r in rows if r.device == dev]
        pred, meas = evaluate(sub, d.tdp_w)
        kinds = np.array([r.kind for r in sub])
        ratio = meas / pred
        coef = fit(sub, d.tdp_w)
        old = np.full(len(sub), 0.6 * d.tdp_w)
        ev = {
            "rows": len(sub),
            "models": len({r.model for r in sub}),
            "mape_pct": round(_mape(pred, meas), 2),
            "mape_diffusion_pct": round(_mape(pred[kinds == "diffusion"], meas[kinds == "diffusion"]), 2),
            "mape_llm_pct": round(_mape(pred[kinds == "llm"], meas[kinds == "llm"]), 2),
            "mape_60pct_tdp_rule_pct": round(_mape(old, meas), 2),
        }
        evaluation[dev] = ev
        devices[dev] = {
            "gap_w": round(coef[0], 2),
            "compute_w": round(coef[1], 2),
            "memory_w": round(coef[2], 2),
            "limit_w": d.tdp_w,
            "ratio_p10": round(float(np.percentile(ratio, 10)), 4),
            "ratio_p90": round(float(np.percentile(ratio, 90)), 4),
            "source": f"fit: ML.ENERGY Leaderboard v2 (Apache-2.0; data/public-models), {len(sub)} rows of "
            f"{ev['models']} models on {dev} (diffusion fp16 -> compute; vLLM rows -> the serving engine's "
            f"compute/memory kernel shares, a roofline proxy where it does not build the model: "
            f"predictor/power_fit.py); leave-one-model-out energy MAPE {ev['mape_pct']:.1f}%; P_compute measured "
            f"on float16 tensor-core work, applied to every precision (assumed)",
        }
        lines.append(
            f"| {dev} | {ev['rows']} | {ev['models']} | {ev['mape_pct']:.1f}% | {ev['mape_diffusion_pct']:.1f}% | "
            f"{ev['mape_llm_pct']:.1f}% | {ev['mape_60pct_tdp_rule_pct']:.1f}% | "
            f"{coef[0]:.0f} / {coef[1]:.0f} / {coef[2]:.0f} |"
        )
    for dev, (src, why) in TRANSFERS.items():
        base, scale = devices[src], DEVICES[dev].tdp_w / DEVICES[src].tdp_w
        devices[dev] = {
            **{k: round(base[k] * scale, 2) for k in ("gap_w", "compute_w", "memory_w")},
            "limit_w": DEVICES[dev].tdp_w,
            "ratio_p10": base["ratio_p10"],
            "ratio_p90": base["ratio_p90"],
            "source": f"transfer: {src}'s fit x {scale:.4g} (power-limit ratio {DEVICES[dev].tdp_w:g} / "
            f"{DEVICES[src].tdp_w:g} W; {why}); no public power measurements of {dev}",
        }
    missing = sorted(set(DEVICES) - set(devices))
    if missing:
        raise SystemExit(f"no power parameters for {', '.join(missing)}: add them to TRANSFERS")
    doc = {
        "schema": SCHEMA,
        "created_by": "python -m predictor.power_fit",
        "prompt_tokens_assumed": prompt_tokens,
        "llm_shares": shares,
        "llm_step_time": STEP_TIME,
        "data": "data/public-models/mlenergy-diffusion-v2.jsonl, mlenergy-llm-v2.jsonl (ML.ENERGY Leaderboard v2, "
        "github.com/ml-energy/leaderboard-v2 @ c3af7f31e2, Apache-2.0)",
        "evaluation": evaluation,
        "devices": {k: devices[k] for k in DEVICES},
    }
    return doc, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    global STEP_TIME
    ap = argparse.ArgumentParser(description="Fit the power model on ML.ENERGY measurements.")
    ap.add_argument("--data", default=str(DATA), help="folder with the mlenergy-*.jsonl files")
    ap.add_argument("--out", default=str(PARAMS_PATH), help="parameter file to write")
    ap.add_argument(
        "--sensitivity", action="store_true", help="print the held-out MAPE for other prompt-length assumptions"
    )
    ap.add_argument(
        "--shares",
        choices=("engine", "roofline"),
        default=SHARES,
        help="how the vLLM rows get their busy shares (default: engine; roofline: the earlier proxy on every row)",
    )
    ap.add_argument(
        "--step-time",
        choices=("throughput", "tpot"),
        default="throughput",
        help="the vLLM rows' time per decode step the shares are taken of (default: throughput, the steady state "
        "avg_batch_size / output_tokens_per_s; tpot: the rows' avg_tpot_s, the fit before 2026-11-26)",
    )
    args = ap.parse_args(argv)
    STEP_TIME = args.step_time
    data = Path(args.data)
    if args.sensitivity:
        print("| prompt tokens assumed | " + " | ".join(GPUS_FITTED) + " |")
        print("|---|" + "---|" * len(GPUS_FITTED))
        for tokens in (0, 128, 256, 512, 1024):
            doc, _ = run(data, tokens, args.shares)
            print(f"| {tokens} | " + " | ".join(f"{doc['evaluation'][g]['mape_pct']:.1f}%" for g in GPUS_FITTED) + " |")
        return 0
    for name in ("mlenergy-diffusion-v2.jsonl", "mlenergy-llm-v2.jsonl"):
        if not (data / name).is_file():
            print(f"error: {data / name} not found", file=sys.stderr)
            return 2
    doc, table = run(data, shares=args.shares)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(table)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
