"""Fit the memory model's runtime terms (`predictor.memory`) on the MIGProfiler framebuffer readings; evaluate by
leaving one encoder out; write `predictor/memory_params.json` and print the tables of docs/power-and-memory.md.

Usage: python -m predictor.memory_fit [--data data/public-models] [--h100 data/h100-80gb/models]
       [--out predictor/memory_params.json]

Inputs: data/public-models/mig-a100-40gb.jsonl (MIGProfiler, MIT: four sentence-transformer encoders, float32 eager
with TF32 matmuls, every input padded or truncated to exactly its `seq_len` (docs/public-data.md), every MIG slice
of an A100-SXM4-40GB, `framebuffer_used_mb` as nvidia-smi counts it) and
data/public-models/mig-encoders-analysis.json (weights, peak live activations and allocation trace of the same
encoders at every batch and sequence, from preflight's analysis: `python bench/mig_encoders.py`; predictor/ never
imports TVM).

- Allocator reserve: `simulate_reserved` of each encoder's weights and trace (the documented caching-allocator
  rules; nothing fitted). What grows with the batch and the sequence is its difference from batch 1 at 64 tokens.
- torch 1.12 context: at batch 1 and 64 tokens, framebuffer - simulated reserve - cuBLAS workspace
  = fixed_mib + per_sm_mib x the slice's SMs (least squares over encoders and slices): the one fitted term.
- Fallback reserve for graphs without a trace (`RuntimeMemory.reserve`): the median, over the batch-sweep rows with
  batch >= 16, of (framebuffer(b) - framebuffer(1)) / (peak(b) - peak(1)) on the same slice (the model before the
  trace; its held-out errors are printed beside the trace model's).
- Eager context of torch 2.11 / CUDA 13 (the default runtime): the median of the `memory_mb.context` our H100
  whole-model rows measured (data/h100-80gb/models, `h100_context`); the published ~400 MB of older lazy-loading
  torch and a vLLM-style engine's assumed memory outside the allocator are written beside it (docs/memory.md).
Leave-one-encoder-out: each encoder's rows are predicted with the fitted terms from the other three. The growth
check (framebuffer(b, s) - framebuffer(1, 64) on the same slice, MiB) is reported for the batch sweep (batch >= 16
at 64 tokens) and the sequence sweep (batch 32 at 32-512 tokens).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from .devices import DEVICES
from .fit_cli import fit_main
from .memory import (
    CUBLAS_WORKSPACE_MIB,
    CUDNN_WORKSPACE_MIB,
    DEFAULT_RUNTIME,
    MIB,
    PARAMS_PATH,
    SCHEMA,
    Reserved,
    RuntimeMemory,
    gpu_memory,
    simulate_reserved,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "public-models"
#: Our H100 whole-model measurements (eager torch 2.11, CUDA 13.0): the measured context of the default runtime.
H100_MODELS = ROOT / "data" / "h100-80gb" / "models"
#: The published context of the first CUDA operation with lazy module loading (torch 1.13 .. 2.x, CUDA >= 11.7):
#: "about 400 MB" (pytorch/pytorch#109888, #86509). Kept as a runtime for those versions; not measured here.
PUBLISHED_LAZY_MIB = 400.0
PUBLISHED_RUNTIME = "torch-2-cuda12-lazy"
#: A vLLM-style engine's memory outside torch's allocator per GPU (CUDA context, NCCL, CUDA graphs' pools): assumed,
#: the figure `preflight llm --runtime vllm` has used; not measured (no engine ran on our GPUs).
VLLM_NON_TORCH_MIB = 1024.0
A100 = DEVICES["a100-40gb"]
FIT_RUNTIME = "torch-1.12-cuda11"
MIN_BATCH = 16

#: MIGProfiler's result folders (the encoder variants) -> the architecture analysed for them.
VARIANTS = {
    "MiniLM": "paraphrase-multilingual-MiniLM-L12-v2",
    "mpnet": "paraphrase-multilingual-mpnet-base-v2",
    "distil_v1": "distiluse-base-multilingual-cased",
    "distil_v2": "distiluse-base-multilingual-cased",
}


#: distiluse v2 analysed as if its config returned every hidden state (bench/mig_encoders.py, HIDDEN_STATES): a
#: hypothesis for its extra growth, evaluated beside the main table, not used by the fit.
HYPOTHESIS = {"distil_v2": "distiluse-base-multilingual-cased+output_hidden_states"}


def load(data: Path) -> list[dict]:
    """Measured rows joined with the analysis: variant, slice SMs, sweep, batch, seq, weights, peak, framebuffer,
    and the simulated allocator reserve at the row's point (`reserved`) and at batch 1 x 64 tokens (`reserved1`)."""
    analysis = json.loads((data / "mig-encoders-analysis.json").read_text())["encoders"]
    sims: dict[tuple[str, int, int], Reserved] = {}

    def sim(arch: str, p: dict) -> Reserved:
        key = (arch, p["batch"], p["seq_len"])
        if key not in sims:
            sims[key] = simulate_reserved(analysis[arch]["weight_sizes"], p["blocks"])
        return sims[key]

    out = []
    for line in (data / "mig-a100-40gb.jsonl").read_text().splitlines():
        r = json.loads(line)
        variant = r["source"].split("/")[-2]
        arch = VARIANTS[variant]
        points = {(p["batch"], p["seq_len"]): p for p in analysis[arch]["points"]}
        p, p1 = points[(r["batch"], r["seq_len"])], points[(1, 64)]
        hypo = {}
        if HYPOTHESIS.get(variant) in analysis:
            h = HYPOTHESIS[variant]
            hp = {(q["batch"], q["seq_len"]): q for q in analysis[h]["points"]}
            hypo = {"hypothesis": (sim(h, hp[(r["batch"], r["seq_len"])]), sim(h, hp[(1, 64)]))}
        out.append(
            {
                "variant": variant,
                "profile": r["mig_profile"],
                "sms": A100.profile(r["mig_profile"]).sms,
                "sweep": "batch" if "infer_bsz" in r["source"] else "seq",
                "batch": r["batch"],
                "seq_len": r["seq_len"],
                "param_bytes": p["param_bytes"],
                "peak": p["peak_activation_bytes"],
                "peak1": p1["peak_activation_bytes"],
                "reserved": sim(arch, p),
                "reserved1": sim(arch, p1),
                "fb": r["framebuffer_used_mb"],
            }
            | hypo
        )
    return out


def _base(rows: list[dict]) -> dict[tuple[str, str], dict]:
    return {(r["variant"], r["profile"]): r for r in rows if r["sweep"] == "batch" and r["batch"] == 1}


def fit(rows: list[dict]) -> RuntimeMemory:
    """The torch 1.12 runtime terms from `rows` (module docstring): context on the simulated reserve, fallback
    reserve factor on the batch growth."""
    base = _base(rows)
    ratios = [
        (r["fb"] - base[(r["variant"], r["profile"])]["fb"]) / ((r["peak"] - r["peak1"]) / MIB)
        for r in rows
        if r["sweep"] == "batch" and r["batch"] >= MIN_BATCH
    ]
    reserve = float(np.median(ratios))
    probe = RuntimeMemory(0.0, 0.0, reserve, "")
    sms, rest = [], []
    for b in base.values():
        sms.append(b["sms"])
        rest.append(b["fb"] - predict_mib(probe, b))
    per_sm, fixed = np.polyfit(np.array(sms, dtype=float), np.array(rest), 1)
    return RuntimeMemory(float(fixed), float(per_sm), reserve, "")


def predict_mib(rt: RuntimeMemory, r: dict, *, trace: bool = True) -> float:
    """Predicted framebuffer of row `r` (MiB): with the simulated reserve, or (`trace=False`) the fallback factor."""
    reserved = r["reserved"] if trace else None
    return gpu_memory(r["param_bytes"], r["peak"], sms=r["sms"], hopper=False, runtime=rt, reserved=reserved).total_mib


def _growth_errors(rt: RuntimeMemory, test: list[dict], trace: bool) -> tuple[list[float], list[float]]:
    """|predicted - measured| / measured growth from batch 1 x 64 tokens on the same slice, batch and sequence sweep."""
    base = _base(test)
    batch, seq = [], []
    for r in test:
        if r["batch"] < MIN_BATCH:
            continue
        b = base[(r["variant"], r["profile"])]
        measured = r["fb"] - b["fb"]
        err = abs(predict_mib(rt, r, trace=trace) - predict_mib(rt, b, trace=trace) - measured) / measured
        (batch if r["sweep"] == "batch" else seq).append(err)
    return batch, seq


def evaluate(rows: list[dict]) -> tuple[list[str], dict]:
    """Leave-one-encoder-out tables (Markdown lines) and figures."""
    lines = [
        f"| held-out encoder | batch growth (b >= {MIN_BATCH}, seq 64) MAPE: allocator replay | fitted reserve "
        "factor | sequence growth (b 32, seq 32-512) MAPE: allocator replay | fitted reserve factor | framebuffer "
        "MAPE, batch sweep | framebuffer MAPE, sequence sweep | previous rule (weights + peak + 500 + 64 MiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    figures = {}
    pct = lambda xs: round(100 * float(np.mean(xs)), 2)  # noqa: E731
    for variant in VARIANTS:
        train = [r for r in rows if r["variant"] != variant]
        test = [r for r in rows if r["variant"] == variant]
        rt = fit(train)
        grow, seq_grow = _growth_errors(rt, test, trace=True)
        grow_f, seq_grow_f = _growth_errors(rt, test, trace=False)
        fb_b, fb_s, old = [], [], []
        for r in test:
            previous = (r["param_bytes"] + r["peak"]) / MIB + 500.0 + 64.0  # the rule before the fitted model
            old.append(abs(previous - r["fb"]) / r["fb"])
            (fb_b if r["sweep"] == "batch" else fb_s).append(abs(predict_mib(rt, r) - r["fb"]) / r["fb"])
        f = {
            "context_fixed_mib": round(rt.fixed_mib, 2),
            "context_per_sm_mib": round(rt.per_sm_mib, 4),
            "growth_mape_pct": pct(grow),
            "seq_growth_mape_pct": pct(seq_grow),
            "factor_reserve": round(rt.reserve, 4),
            "factor_growth_mape_pct": pct(grow_f),
            "factor_seq_growth_mape_pct": pct(seq_grow_f),
            "framebuffer_batch_mape_pct": pct(fb_b),
            "framebuffer_seq_mape_pct": pct(fb_s),
            "previous_rule_mape_pct": pct(old),
        }
        figures[variant] = f
        lines.append(
            f"| {variant} | {f['growth_mape_pct']:.1f}% | {f['factor_growth_mape_pct']:.1f}% | "
            f"{f['seq_growth_mape_pct']:.1f}% | {f['factor_seq_growth_mape_pct']:.1f}% | "
            f"{f['framebuffer_batch_mape_pct']:.1f}% | {f['framebuffer_seq_mape_pct']:.1f}% | "
            f"{f['previous_rule_mape_pct']:.1f}% |"
        )
    for variant, arch in HYPOTHESIS.items():
        test = [r | {"reserved": r["hypothesis"][0]} for r in rows if r["variant"] == variant and "hypothesis" in r]
        if test:
            rt = fit([r for r in rows if r["variant"] != variant])
            grow, seq_grow = _growth_errors(rt, test, trace=True)
            figures[f"{variant} as {arch}"] = {"growth_mape_pct": pct(grow), "seq_growth_mape_pct": pct(seq_grow)}
            lines.append(
                f"| {variant} analysed as {arch} (hypothesis) | {pct(grow):.1f}% | | {pct(seq_grow):.1f}% | | | | |"
            )
    lines += [
        "",
        "| encoder | slice | batch | seq | measured growth (MiB) | allocator replay | replay, hypothesis | "
        "peak-activation growth |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = _base(rows)
    for r in rows:
        if r["profile"] != "1g.5gb" or r["batch"] < MIN_BATCH or (r["sweep"] == "seq" and r["seq_len"] == 64):
            continue
        b = base[(r["variant"], r["profile"])]
        replay = (r["reserved"].total - b["reserved"].total) / MIB
        h = r.get("hypothesis")
        hypo = f"{(h[0].total - h[1].total) / MIB:.0f}" if h else ""
        lines.append(
            f"| {r['variant']} | {r['profile']} | {r['batch']} | {r['seq_len']} | {r['fb'] - b['fb']:.0f} | "
            f"{replay:.0f} | {hypo} | {(r['peak'] - r['peak1']) / MIB:.0f} |"
        )
    return lines, figures


def _slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of y against x."""
    return float(np.polyfit(np.array(x, dtype=float), np.array(y, dtype=float), 1)[0])


def growth_figures(rows: list[dict]) -> dict[tuple[str, str], dict]:
    """What grows with the batch and the sequence, per (encoder, slice), measured against preflight's prediction,
    where the fixed part (context, workspace, weights) cancels: differences between points of one sweep on one
    slice, never against an absolute reading.

    - `slope`: MiB per sample, the least-squares slope of the framebuffer against the batch over the batch sweep's
      points with batch >= `MIN_BATCH` at 64 tokens (`slope_all`: over every batch, 1 .. 256), measured and
      predicted (the prediction's difference is the allocator replay's: context and workspace do not depend on the
      batch), and the predicted slope's error in %.
    - `steps`: the MAPE (%) of the increments between consecutive points, predicted against measured: along the
      batch (16 -> 32 -> ... -> 256, four steps) and along the sequence at batch 32 (32 -> 64 -> ... -> 512).
    The prediction is `predict_mib` with any runtime terms (context and workspace do not depend on the batch: a
    difference does not see them; zero here). `rows` as `load` returns them, for the encoders and slices present;
    a row with a `hypothesis` reserve (distil_v2) is evaluated with it as well, under the key "hypothesis"."""
    rt = RuntimeMemory(0.0, 0.0, 1.0, "differences: the fixed terms cancel")
    out = {}
    for variant in dict.fromkeys(r["variant"] for r in rows):
        for profile in sorted({r["profile"] for r in rows}, key=lambda p: int(p.split("g")[0])):
            sel = [r for r in rows if r["variant"] == variant and r["profile"] == profile]
            if not sel:
                continue
            bat = sorted((r for r in sel if r["sweep"] == "batch"), key=lambda r: r["batch"])
            seq = sorted((r for r in sel if r["sweep"] == "seq"), key=lambda r: r["seq_len"])
            figs = {}
            for tag, reserved in [("", "reserved")] + (
                [("hypothesis", "hypothesis")] if "hypothesis" in sel[0] else []
            ):

                def pred(r: dict, reserved: str = reserved) -> float:
                    res = r[reserved][0] if reserved == "hypothesis" else r[reserved]
                    return predict_mib(rt, r | {"reserved": res})

                big = [r for r in bat if r["batch"] >= MIN_BATCH]
                m_slope = _slope([r["batch"] for r in big], [r["fb"] for r in big])
                p_slope = _slope([r["batch"] for r in big], [pred(r) for r in big])
                m_all = _slope([r["batch"] for r in bat], [r["fb"] for r in bat])
                p_all = _slope([r["batch"] for r in bat], [pred(r) for r in bat])

                def steps(pts: list[dict], pred=pred) -> float:
                    errs = [
                        abs((pred(b) - pred(a)) - (b["fb"] - a["fb"])) / (b["fb"] - a["fb"])
                        for a, b in zip(pts, pts[1:], strict=False)
                    ]
                    return 100 * float(np.mean(errs))

                figs[tag or "model"] = {
                    "slope_measured": m_slope,
                    "slope_predicted": p_slope,
                    "slope_err_pct": 100 * (p_slope / m_slope - 1),
                    "slope_all_measured": m_all,
                    "slope_all_predicted": p_all,
                    "slope_all_err_pct": 100 * (p_all / m_all - 1),
                    "batch_steps_mape_pct": steps(big),
                    "seq_steps_mape_pct": steps(seq),
                }
            out[variant, profile] = figs
    return out


def growth_lines(rows: list[dict]) -> list[str]:
    """`growth_figures` as a Markdown table, one line per encoder and slice (the hypothesis on its own line)."""
    lines = [
        f"| encoder | slice | slope b >= {MIN_BATCH}, MiB/sample: measured | predicted | error | slope b 1-256: "
        "measured | predicted | error | batch steps MAPE | sequence steps MAPE |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (variant, profile), figs in growth_figures(rows).items():
        for tag, f in figs.items():
            name = variant if tag == "model" else f"{variant} ({HYPOTHESIS.get(variant, tag)}, hypothesis)"
            lines.append(
                f"| {name} | {profile} | {f['slope_measured']:.3f} | {f['slope_predicted']:.3f} | "
                f"{f['slope_err_pct']:+.1f}% | {f['slope_all_measured']:.3f} | {f['slope_all_predicted']:.3f} | "
                f"{f['slope_all_err_pct']:+.1f}% | {f['batch_steps_mape_pct']:.1f}% | {f['seq_steps_mape_pct']:.1f}% |"
            )
    return lines


def fixed_lines(rows: list[dict]) -> list[str]:
    """The fixed part at batch 1 x 64 tokens, term by term (MiB), per encoder on the smallest and the largest slice:
    measured framebuffer = context (the torch 1.12 fit, leave-one-encoder-out) + cuBLAS workspace + the allocator's
    weight segments + its batch-1 activation reserve + the residual."""
    lines = [
        "| encoder | slice | framebuffer, batch 1 | context (held out) | cuBLAS workspace | weights (tensors) | "
        "weight segments | batch-1 activation reserve | residual |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant in VARIANTS:
        rt = fit([r for r in rows if r["variant"] != variant])
        for b in _base([r for r in rows if r["variant"] == variant]).values():
            if b["profile"] not in ("1g.5gb", "7g.40gb"):
                continue
            ctx, ws = rt.context_mib(b["sms"]), CUBLAS_WORKSPACE_MIB["other"]
            seg, act = b["reserved"].weights / MIB, b["reserved"].activations / MIB
            lines.append(
                f"| {variant} | {b['profile']} | {b['fb']:.0f} | {ctx:.0f} | {ws:g} | {b['param_bytes'] / MIB:.1f} | "
                f"{seg:.0f} | {act:.0f} | {b['fb'] - ctx - ws - seg - act:+.0f} |"
            )
    return lines


def runtime_lines(params: dict[str, RuntimeMemory]) -> list[str]:
    """The fixed part per runtime (MiB), one Markdown line each: the context on the A100-40GB's 1g.5gb (14 SMs) and
    on the whole GPU (108 SMs), what the framework allocates through its caching allocator whatever the batch (cuBLAS
    workspace on Ampere / Hopper, cuDNN's with convolutions), and where the context comes from (`params`:
    `load_memory_params()`, the committed terms)."""
    lines = [
        "| runtime | context on 1g.5gb (14 SMs) | context on the whole A100 (108 SMs) | cuBLAS workspace Ampere / "
        "Hopper | cuDNN (convs) | source of the context |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, rt in params.items():
        depth, cut = 0, len(rt.source)  # the source up to its first "; " outside parentheses
        for i, ch in enumerate(rt.source):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if ch == ";" and depth == 0:
                cut = i
                break
        src = rt.source[:cut]
        lines.append(
            f"| {name} | {rt.context_mib(14):.0f} | {rt.context_mib(A100.sms):.0f} | "
            f"{CUBLAS_WORKSPACE_MIB['other']:g} / {CUBLAS_WORKSPACE_MIB['hopper']:g} | {CUDNN_WORKSPACE_MIB:g} | "
            f"{src} |"
        )
    return lines


def h100_context(models: Path = H100_MODELS) -> tuple[float, dict]:
    """The eager context (MiB) measured on our H100: the median of `memory_mb.context` (NVML's process memory -
    torch's reserved, after the timed runs) over the successful rows, and what it rests on. Leave-one-family-out
    (each family's rows against the median of the others') is in bench/bench_h100_memory_terms.py. ValueError when
    a file cannot be read or no row has a measured context."""
    try:
        rows = [json.loads(line) for path in sorted(models.glob("*.jsonl")) for line in path.read_text().splitlines()]
        rows = [r for r in rows if r.get("status") == "ok" and (r.get("memory_mb") or {}).get("context") is not None]
        ctx = [float(r["memory_mb"]["context"]) for r in rows]
        env = sorted({(r["env"]["torch"], r["env"]["cuda"], r["env"]["driver"], r["env"]["gpu_name"]) for r in rows})
        first = sorted({float(r["memory_mb"]["context"]) for r in rows if r["env"].get("worker_seq") == 1})
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"cannot read the H100 whole-model measurements in {models}: {e}") from e
    if not ctx:
        raise ValueError(f"no successful rows with a measured memory_mb.context in {models}")
    info = {
        "rows": len(rows),
        "families": len({r["family"] for r in rows}),
        "median_mib": float(np.median(ctx)),
        "min_mib": min(ctx),
        "max_mib": max(ctx),
        "first_config_mib": first,
        "env": [list(e) for e in env],
    }
    return info["median_mib"], info


def run(data: Path, h100: Path = H100_MODELS) -> tuple[dict, str]:
    rows = load(data)
    ctx, ctx_info = h100_context(h100)
    rt = fit(rows)
    lines, figures = evaluate(rows)
    lines += ["", *growth_lines(rows), "", *fixed_lines(rows)]
    lines += [
        "",
        f"All four encoders: torch 1.12 context {rt.fixed_mib:.0f} MiB + {rt.per_sm_mib:.2f} MiB x SMs "
        f"({rt.context_mib(14):.0f} MiB on 1g.5gb, {rt.context_mib(98):.0f} MiB on 7g.40gb); fallback reserve factor "
        f"{rt.reserve:.3f}.",
    ]
    src = (
        f"fit: MIGProfiler (MIT; data/public-models/mig-a100-40gb.jsonl), {len(rows)} framebuffer readings of 4 "
        f"encoders on every MIG slice of an A100-SXM4-40GB, torch of mid-2022 (not recorded; the repository's "
        f"requirements, committed a month after the runs, name 1.12; no lazy module loading); context = batch-1 "
        f"framebuffer - the caching allocator replayed on the trace (simulate_reserved) - cuBLAS workspace, linear in "
        f"SMs; fallback reserve (graphs without a trace) = median growth / peak-activation growth over the batch "
        f"sweep's batch >= {MIN_BATCH} at 64 tokens; leave-one-encoder-out in predictor/memory_fit.py"
    )
    torch_, cuda, driver, gpu = ctx_info["env"][0] if len(ctx_info["env"]) == 1 else ("?", "?", "?", "?")
    first = ", ".join(f"{v:g}" for v in ctx_info["first_config_mib"])
    measured = (
        f"context: measured, the median of NVML's process memory - torch.cuda.memory_reserved() after the timed runs "
        f"over {ctx_info['rows']} eager whole-model rows of {ctx_info['families']} families on our {gpu} "
        f"(data/h100-80gb/models; torch {torch_}, CUDA {cuda}, driver {driver}, lazy module loading): "
        f"{ctx_info['min_mib']:g}-{ctx_info['max_mib']:g} MiB ({first}"
        f" at a process's first config, growing as later configs load kernels); not scaled by SMs (a MIG slice gets "
        f"the whole GPU's figure, conservative); other GPUs get the H100's (not measured there); the cuBLAS "
        f"workspace is counted apart (allocator memory); allocator: replayed on the trace; fallback reserve factor as "
        f"{FIT_RUNTIME}"
    )
    doc = {
        "schema": SCHEMA,
        "created_by": "python -m predictor.memory_fit",
        "evaluation": figures,
        "h100_context": ctx_info,
        "runtimes": {
            DEFAULT_RUNTIME: {
                "fixed_mib": round(ctx, 2),
                "per_sm_mib": 0.0,
                "reserve": round(rt.reserve, 4),
                "source": measured,
            },
            "vllm": {
                "fixed_mib": VLLM_NON_TORCH_MIB,
                "per_sm_mib": 0.0,
                "reserve": round(rt.reserve, 4),
                "source": f"assumed: memory outside torch's allocator of a vLLM-style engine per GPU (CUDA context, "
                f"NCCL, CUDA graphs' pools), the eager context measured on the H100 ({ctx:g} MiB) plus "
                f"{VLLM_NON_TORCH_MIB - ctx:g} MiB for the rest; no engine was measured",
            },
            PUBLISHED_RUNTIME: {
                "fixed_mib": PUBLISHED_LAZY_MIB,
                "per_sm_mib": 0.0,
                "reserve": round(rt.reserve, 4),
                "source": "context: published, about 400 MB at the first CUDA operation with CUDA >= 11.7 and lazy "
                "module loading, the PyTorch default since 1.13 (pytorch/pytorch#109888, #86509); for torch 1.13 to "
                "2.x with CUDA 11.7-12 (the previous default; our torch 2.11 / CUDA 13 H100 rows measure "
                f"{ctx:g} MiB); not scaled by SMs; allocator: replayed on the trace; fallback reserve factor as "
                f"{FIT_RUNTIME}",
            },
            FIT_RUNTIME: {
                "fixed_mib": round(rt.fixed_mib, 2),
                "per_sm_mib": round(rt.per_sm_mib, 4),
                "reserve": round(rt.reserve, 4),
                "source": src,
            },
        },
    }
    lines.append(
        f"Eager context, torch {torch_} / CUDA {cuda} on {gpu}: {ctx:g} MiB (median of {ctx_info['rows']} rows, "
        f"{ctx_info['min_mib']:g}-{ctx_info['max_mib']:g})."
    )
    return doc, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Fit the memory model on the MIGProfiler framebuffer readings.")
    ap.add_argument("--data", default=str(DATA), help="folder with mig-a100-40gb.jsonl and mig-encoders-analysis.json")
    ap.add_argument("--out", default=str(PARAMS_PATH), help="parameter file to write")
    ap.add_argument("--h100", default=str(H100_MODELS), help="folder of our H100 whole-model measurements (*.jsonl)")
    args = ap.parse_args(argv)
    data, h100 = Path(args.data), Path(args.h100)

    def fit() -> tuple[dict, str]:
        if not any(h100.glob("*.jsonl")):
            raise ValueError(f"no *.jsonl measurements in {h100}")
        return run(data, h100)

    return fit_main(data, ("mig-a100-40gb.jsonl", "mig-encoders-analysis.json"), fit, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
