"""Fit the power model (`predictor.power`) on the ML.ENERGY Leaderboard v2 measurements and our H100 whole models;
evaluate it by leaving one model (one H100 family) out; write `predictor/power_params.json` and print the evaluation
table of docs/power-and-memory.md.

Usage: python -m predictor.power_fit [--data data/public-models] [--out predictor/power_params.json]
       [--shares engine|roofline] [--step-time throughput|tpot] [--sensitivity] [--without-h100-models]
       [--fp32-compute none|float32|float32-peak|cuda] [--h100-shares predicted|measured]
       python -m predictor.power_fit --check-probes [--out predictor/power_params.json]

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

Our own H100 whole models (`h100_model_rows`: data/h100-80gb/models, 101 rows of 34 families, eager PyTorch in
float32 at batch 1 and 16 and float16 at batch 256; power = NVML energy over the timed loop / its duration): the
kernel model's own shares of each row (the kernel classes of `power.kernel_classes`, cached with the analyses by
bench/h100_model_shares.py, as predictor/ never imports TVM) over its predicted time (`H100_SHARES`), exactly what
`predictor.predict` reads; with them the H100 also gets P_compute_fp32 (`power.FP32_COMPUTE`: the float32 kernels'
time at peak rate). These rows span host-bound, memory-bound and compute-bound work in two precisions, which the
ML.ENERGY rows alone cannot separate (docs/power-and-memory.md).

Power probes (data/<device>/power/*.jsonl, `predictor.measure.power_probe`: the GPU held seconds on one workload
class under NVML): not fitted on. After the fit, each fitted GPU with probes gets `probe_table` printed under the
evaluation: each fitted figure against the median of its class's probes (`probe_groups`: idle and launch against
P_gap, memory-bound against P_memory, float16/bfloat16 products against P_compute, float32 ones against
P_compute_fp32), and each probe as the model prices it. `--check-probes` prints the same for a parameter file
without fitting.

The fit: per GPU, least squares of relative power error (rows weighted 1 / measured power) for
(P_gap, P_compute, P_memory[, P_compute_fp32]), each in [0, power limit]. Held out: each ML.ENERGY model's rows
predicted by a fit on every other row of that GPU (the other models and all H100 families), each H100 family's rows
by a fit on every other row (leave-one-family-out). Energy error = power error here, as each row's measured latency
is used.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .devices import DEVICES, get_device
from .fit_cli import fit_main
from .kernel_model import load_params
from .power import FP32_COMPUTE, FP32_COMPUTE_MODES, PARAMS_PATH, SCHEMA, shares_from_classes

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
    """One measured row: device key, model (the group a held-out evaluation leaves out together: an ML.ENERGY model,
    or "h100-models/<family>" for our H100 whole models), kind ("diffusion", "llm" or "h100-model"), busy shares,
    measured power (W).

    `s_compute` is the compute-bound share of every kernel but the float32 compute the fit may price on its own,
    `s_compute_fp32` that share (`FP32_COMPUTE`; 0 for the ML.ENERGY rows); `held_out`: the shares
    (s_compute, s_memory, s_compute_fp32) a prediction of the row reads, where they differ from the fit's (our H100
    whole models: the shares of the kernel model's predicted time, as `predictor.predict` reads them); None: the
    same."""

    device: str
    model: str
    kind: str
    s_compute: float
    s_memory: float
    power_w: float
    label: str  # batch or running batch, for tables
    s_compute_fp32: float = 0.0
    held_out: tuple[float, float, float] | None = None


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


@dataclass(frozen=True)
class EngineRow:
    """One vLLM row costed by the serving engine with no host time: `decode`, a decode step of the row's mean batch
    at its mean live context, and `prefill`, one group of the prompts it admits; `share` prefill groups run per
    decode step (prompts admitted per step / group size). `decode`/`prefill` are `serving_engine` step times (s)."""

    arch: object  # serving_fit's architecture (one pipeline stage of it)
    tp: int
    batch: int
    decode: object
    prefill: object
    share: float


def engine_row(r: dict) -> EngineRow | None:
    """The serving engine's steps of one vLLM row (`EngineRow`), or None when the engine does not build the row's
    model (neither in `serving_fit.ARCH` nor in `EXTRA_ARCH`). A pipeline-parallel row (pp stages of tp GPUs) is
    costed as one stage: layers / pp at tensor parallel tp, as each GPU runs its stage's layers once per output
    token. The prompts prefilled per decode step are grouped as `serving_engine.serve` groups them."""
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
    stalls = batch / gen  # prompts prefilled per decode step
    group = max(1, round(stalls))
    pre = eng.prefill_step(a, d, group, prompt, tp=tp, host=none)
    return EngineRow(a, tp, batch, step, pre, stalls / group)


def engine_shares(r: dict, step_time: str = "throughput") -> tuple[float, float] | None:
    """(s_compute, s_memory) of one vLLM row from the serving engine's kernels (module docstring; `engine_row`), or
    None when the engine does not build the row's model. `step_time`: the time per decode step the shares are of
    (`step_time_s`)."""
    e = engine_row(r)
    if e is None:
        return None
    c = e.decode.compute_s + e.share * e.prefill.compute_s
    m = e.decode.memory_s + e.share * e.prefill.memory_s
    tpot = step_time_s(r, step_time)
    k = min(1.0, tpot / (c + m)) if c + m > 0 else 1.0  # the engine's GPU time longer than measured: scale down
    return c * k / tpot, m * k / tpot


#: The default time per decode step the vLLM rows' shares are taken of (the `step_time` argument of `run`, `llm_rows`,
#: `engine_shares`, `step_time_s`; `--step-time`): "throughput" (the steady-state time per output token of one
#: running sequence, avg_batch_size / output_tokens_per_s: the window the rows' energy and throughput span) or "tpot"
#: (the rows' avg_tpot_s, a mean over all engine iterations including the drain after the steady state: the fit
#: before 2026-11-26). docs/llm-serving.md, "What the rows' TPOT and energy span". Never reassigned.
STEP_TIME = "throughput"
STEP_TIMES = ("throughput", "tpot")


def step_time_s(r: dict, how: str = STEP_TIME) -> float:
    """Seconds per decode step of one vLLM row: `how` = "throughput", steady-state avg_batch_size /
    output_tokens_per_s; "tpot", the row's avg_tpot_s."""
    if how not in STEP_TIMES:
        raise ValueError(f"step time must be one of {', '.join(STEP_TIMES)} (got {how!r})")
    if how == "tpot":
        return float(r["avg_tpot_s"])
    return float(r["avg_batch_size"]) / float(r["output_tokens_per_s"])


#: How the vLLM rows get their shares: "engine" (`engine_shares` where the engine builds the model, the roofline
#: proxy elsewhere) or "roofline" (the proxy on every row: the fit before the engine existed, kept for comparison).
SHARES = "engine"


def llm_rows(
    path: Path, prompt_tokens: int = PROMPT_TOKENS, shares: str = SHARES, step_time: str = STEP_TIME
) -> list[Row]:
    """vLLM serving rows with the shares of the module docstring (`shares`: "engine" or "roofline"; `step_time`:
    the time per decode step they are taken of, `step_time_s`)."""
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
        engine = engine_shares(r, step_time) if shares == "engine" else None
        if engine is not None:
            out.append(Row(dev, r["model"], "llm", *engine, power, f"batch {r['avg_batch_size']:.0f}"))
            continue
        total_b, active_b, layers, kv_heads, head_dim = LLM_ARCH[r["model"]]
        batch = r["avg_batch_size"]
        context = prompt_tokens + r["avg_output_len"] / 2  # tokens in a request's KV cache, on average
        kv_bytes = batch * context * 2 * layers * kv_heads * head_dim * 2  # K and V, float16
        t_m = (2.0 * total_b * 1e9 + kv_bytes) / n / (d.bandwidth * e.e_memory)
        t_c = 2.0 * active_b * 1e9 * batch / n / (d.peak_flops["fp16"] * e.e_compute)
        s = min(1.0, max(t_m, t_c) / step_time_s(r, step_time))
        s_c, s_m = (s, 0.0) if t_c >= t_m else (0.0, s)
        out.append(Row(dev, r["model"], "llm", s_c, s_m, power, f"batch {batch:.0f}"))
    return out


#: Our own H100 whole models (data/h100-80gb/models, README there): eager PyTorch, power_w = NVML energy over the
#: timed loop / its duration. Their kernel-class times come from `bench/h100_model_shares.py`'s cache (predictor/
#: never imports TVM).
H100_MODELS = ROOT / "data" / "h100-80gb" / "models" / "shard-000-of-001.jsonl"
H100_CLASSES = ROOT / "data" / "h100-80gb" / "models-kernel-shares.json"
CLASSES_SCHEMA = "preflight.h100_model_kernel_classes/1"

#: What the H100 whole models' fit shares are of: "measured" (each class's predicted time over the measured time per
#: inference, the rest gap, as the vLLM rows' engine shares are) or "predicted" (over the kernel model's predicted
#: time, the shares a prediction reads).
H100_SHARE_MODES = ("measured", "predicted")


class PowerDataError(ValueError):
    """A data file the fit reads is missing or does not match another (the message says which)."""


def h100_model_rows(
    records: Path = H100_MODELS,
    classes: Path = H100_CLASSES,
    fp32_compute: str = "none",
    shares: str = "measured",
) -> list[Row]:
    """Our H100 whole models as fit rows: measured power (the record's power_w) against the kernel model's busy time
    per kernel class (`classes`, written by bench/h100_model_shares.py; `predictor.power.kernel_classes`).

    Fit shares (`shares`): "measured": class time / the measured time per inference (timed window / runs), scaled
    down together where they add up to more than 1, the rest gap (host time the kernel model does not see is time the
    GPU waits); "predicted": class time / the kernel model's eager time. `held_out` always holds the predicted-time
    shares (what `predictor.predict` reads). `fp32_compute` (`FP32_COMPUTE_MODES`) says which compute-bound time is
    `s_compute_fp32`. Rows are grouped by family (`Row.model` = "h100-models/<family>") for leave-one-family-out.
    """
    if fp32_compute not in FP32_COMPUTE_MODES or shares not in H100_SHARE_MODES:
        raise ValueError(f"fp32_compute in {FP32_COMPUTE_MODES}, shares in {H100_SHARE_MODES}")
    try:
        doc = json.loads(Path(classes).read_text())
        recs = [r for r in _jsonl(Path(records)) if r.get("status") == "ok"]
    except (OSError, ValueError) as e:
        raise PowerDataError(f"cannot read the H100 whole-model data: {e}") from e
    if not isinstance(doc, dict) or doc.get("schema") != CLASSES_SCHEMA:
        raise PowerDataError(f"{classes} is not a kernel-class cache (expected schema {CLASSES_SCHEMA!r})")
    by_id = {c["id"]: c for c in doc["rows"]}
    missing = [r["id"] for r in recs if r["id"] not in by_id]
    if missing:
        raise PowerDataError(
            f"{len(missing)} records of {records} have no kernel classes in {classes} (first {missing[0]}): "
            "run python bench/h100_model_shares.py"
        )
    out = []
    for r in recs:
        c = by_id[r["id"]]
        ms = c["class_ms"]
        held = shares_from_classes(ms, float(c["eager_ms"]), fp32_compute)
        if shares == "measured":
            measured_ms = r["timing"]["timed_window_s"] * 1e3 / r["latency_ms"]["runs"]
            busy = ms["compute_tensor"] + ms["compute_cuda"] + ms["memory"]
            fit_shares = shares_from_classes(ms, max(measured_ms, busy), fp32_compute)
        else:
            fit_shares = held
        label = f"{r['zoo']} {r['dtype']} batch {r['batch']}"
        out.append(
            Row(
                "h100-80gb", f"h100-models/{r['family']}", "h100-model", fit_shares[0], fit_shares[1],
                float(r["power_w"]), label, fit_shares[2], held,
            )
        )  # fmt: skip
    return out


#: Board-power probes of the GPU runbook (`predictor.measure.power_probe`, schema there): each holds the GPU on one
#: workload for seconds under NVML. Read from `data/<device>/power/*.jsonl` (`probe_records`); not fitted on: the
#: fit's figures are checked against them (`probe_table`, docs/power-and-memory.md).
PROBE_SCHEMA = "preflight.power-probe/1"

#: Probe classes (`probe_class`) and the fitted figure of `power.PowerParams` each one measures: "idle" and "launch"
#: -> P_gap (neither is quite the gap state: see `probe_table`), "memory" -> P_memory, "compute" (float16/bfloat16
#: tensor-core products) -> P_compute, "compute_fp32" (float32 products, on FP32 CUDA cores or TF32 tensor cores, as
#: `power.FP32_COMPUTE` prices every float32 kernel) -> P_compute_fp32.
PROBE_CLASSES = {
    "idle": "gap_w",
    "launch": "gap_w",
    "memory": "memory_w",
    "compute": "compute_w",
    "compute_fp32": "compute_fp32_w",
}
_FIGURE = {"gap_w": "P_gap", "memory_w": "P_memory", "compute_w": "P_compute", "compute_fp32_w": "P_compute_fp32"}
#: The figures in `fit`'s coefficient order.
FIT_ORDER = ("gap_w", "compute_w", "memory_w", "compute_fp32_w")


def probe_class(rec: dict) -> str:
    """The `PROBE_CLASSES` key of one probe record: its own class ("idle", "launch", "memory", "compute"), a
    "compute" probe in float32 (TF32 or not) as "compute_fp32". `PowerDataError` for any other class."""
    cls = rec.get("class")
    if cls not in ("idle", "launch", "memory", "compute"):
        raise PowerDataError(f"power probe {rec.get('workload')!r} has an unknown class {cls!r}")
    return "compute_fp32" if cls == "compute" and rec.get("dtype") == "float32" else cls


def _positive(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def probe_records(folder: Path) -> list[dict]:
    """The probe records (`PROBE_SCHEMA`) of every `*.jsonl` file in `folder` (a `data/<device>/power` folder), in
    file-name then line order, those whose status is not "ok" left out. `PowerDataError` (naming the file and line)
    for a line that is not JSON, another schema, or an ok record without its NVML power samples' median (W), a known
    class (`probe_class`), a workload name, or (memory and compute probes) its achieved rate."""
    out = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise PowerDataError(f"cannot read power probes {path}: {e}") from e
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise PowerDataError(f"{path}:{n}: not a JSON record ({e})") from e
            if not isinstance(rec, dict) or rec.get("schema") != PROBE_SCHEMA:
                raise PowerDataError(f"{path}:{n}: not a power-probe record (expected schema {PROBE_SCHEMA!r})")
            if rec.get("status") != "ok":
                continue
            try:
                median = float(rec["power_samples"]["median_w"])
            except (KeyError, TypeError, ValueError) as e:
                raise PowerDataError(f"{path}:{n}: an ok probe without power_samples.median_w") from e
            if not math.isfinite(median) or median <= 0:
                raise PowerDataError(f"{path}:{n}: power_samples.median_w must be a positive number (got {median})")
            try:
                cls = probe_class(rec)
            except PowerDataError as e:
                raise PowerDataError(f"{path}:{n}: {e}") from e
            rate = {"memory": "achieved_bytes_per_s", "compute": "achieved_flops_per_s"}.get(rec["class"])
            if not isinstance(rec.get("workload"), str) or (rate and not _positive(rec.get(rate))):
                raise PowerDataError(f"{path}:{n}: a {cls} probe needs a workload name and a positive {rate}")
            out.append(rec)
    return out


@dataclass(frozen=True)
class ProbeGroup:
    """The ok probes of one `PROBE_CLASSES` class: their workload names and each one's median board power (W, the
    median of its NVML samples), in record order."""

    cls: str
    workloads: tuple[str, ...]
    medians_w: tuple[float, ...]

    @property
    def median_w(self) -> float:
        """Median over the probes of their median power (W)."""
        return float(np.median(self.medians_w))

    @property
    def range_w(self) -> tuple[float, float]:
        """(lowest, highest) probe median (W)."""
        return min(self.medians_w), max(self.medians_w)


def probe_groups(records: list[dict]) -> dict[str, ProbeGroup]:
    """Probe records (`probe_records`) grouped by `probe_class`, in `PROBE_CLASSES` order; absent classes left out."""
    by: dict[str, list[dict]] = {}
    for r in records:
        by.setdefault(probe_class(r), []).append(r)
    return {
        c: ProbeGroup(
            c, tuple(str(r["workload"]) for r in rs), tuple(float(r["power_samples"]["median_w"]) for r in rs)
        )
        for c in PROBE_CLASSES
        if (rs := by.get(c))
    }


#: The probe classes whose figure a GPU's probes measure directly, with what the probes are: held at the probes'
#: median of medians where a GPU has them (`measured_pins`), the other figures fitted around them.
PINNED_BY_PROBES = {"compute": "compute-bound float16/bfloat16 GEMM", "memory": "memory-bound"}


def measured_pins(records: list[dict]) -> dict[str, ProbeGroup]:
    """The `PINNED_BY_PROBES` classes of a GPU's ok probes (`device_probes`): class -> its `ProbeGroup`, whose
    `median_w` the fit holds its figure at. P_compute from the float16/bfloat16 GEMMs held at the power limit,
    P_memory from the copies, adds and decode GEMMs. Decided on held-out error with 169 H100 whole models (`python
    bench/bench_power_probes.py`): leave-one-family-out power MAPE 27.3% (free fit) -> 22.9%, ML.ENERGY H100 held-out
    energy 15.3% -> 11.4% (docs/power-and-memory.md)."""
    groups = probe_groups(records)
    return {c: groups[c] for c in PINNED_BY_PROBES if c in groups}


def device_probes(device: str, root: Path | None = ROOT / "data") -> list[dict]:
    """The ok probes of `device` (`probe_records` of `probe_dir(device, root)`; empty where it has none or `root` is
    None). `PowerDataError` when the folder holds another device's probes."""
    folder = None if root is None else probe_dir(device, root)
    recs = probe_records(folder) if folder is not None and folder.is_dir() else []
    other = sorted({str(r.get("device")) for r in recs} - {device})
    if other:
        raise PowerDataError(f"{folder} holds power probes of another device ({', '.join(other)})")
    return recs


def probe_dir(device: str, root: Path = ROOT / "data") -> Path:
    """The folder a device's power probes are committed in: `root/<device>/power`."""
    return Path(root) / device / "power"


def _peak_fraction(rec: dict, device) -> float | None:
    """The share of the roofline's peak a probe reached (achieved rate from its shapes and time): bandwidth for a
    memory probe, `roofline.peak_rate` of a matmul in its dtype (TF32 where the probe allowed it) for a compute one;
    None for idle and launch probes."""
    from .roofline import peak_rate

    if rec["class"] == "memory":
        return float(rec["achieved_bytes_per_s"]) / device.bandwidth
    if rec["class"] == "compute":
        return float(rec["achieved_flops_per_s"]) / peak_rate(
            device, "matmul", rec["dtype"], tf32_matmul=bool(rec.get("tf32"))
        )
    return None


def probe_shares(rec: dict, device, fp32_compute: str = FP32_COMPUTE) -> tuple[float, float, float]:
    """(s_compute, s_memory, s_compute_fp32) the power model gives a probe's held workload, one kernel class all the
    time, from its measured rate: idle and launch all gap (the model has no idle state), memory 1, a tensor-core
    product s_compute 1, a float32 product as `power.shares_from_classes` prices it under `fp32_compute` ("float32":
    s_compute_fp32 1; "float32-peak": its achieved fraction of peak, the rest gap; "none" and "cuda": s_compute 1,
    or s_compute_fp32 1 for "cuda" without TF32)."""
    cls = probe_class(rec)
    if cls in ("idle", "launch"):
        return 0.0, 0.0, 0.0
    if cls == "memory":
        return 0.0, 1.0, 0.0
    if cls == "compute":
        return 1.0, 0.0, 0.0
    if fp32_compute == "float32":
        return 0.0, 0.0, 1.0
    if fp32_compute == "float32-peak":
        return 0.0, 0.0, min(1.0, _peak_fraction(rec, device))
    if fp32_compute == "cuda" and not rec.get("tf32"):
        return 0.0, 0.0, 1.0
    return 1.0, 0.0, 0.0


def _pct(a: float, b: float) -> str:
    return f"{(a - b) / b * 100:+.1f}%"


def probe_table(device: str, entry: dict, records: list[dict], fp32_compute: str = FP32_COMPUTE) -> str:
    """Markdown: the fitted figures of one device (`entry`: its `power_params.json` entry, W) against its ok power
    probes (`probe_records`): per fitted state, the probes' median of medians (W, lowest-highest) and the relative
    difference (fitted - measured) / measured; then per probe, the power the model gives its workload
    (`probe_shares` from its measured rate) against its measured median."""
    from .power import PowerParams

    d = get_device(device)
    p = PowerParams(entry["gap_w"], entry["compute_w"], entry["memory_w"], entry["limit_w"],
                    compute_fp32_w=entry.get("compute_fp32_w"))  # fmt: skip
    fitted = {"gap_w": p.gap_w, "memory_w": p.memory_w, "compute_w": p.compute_w, "compute_fp32_w": p.fp32_w}
    groups = probe_groups(records)
    lines = [
        f"The fitted figures against the {device} power probes ({len(records)} ok probes, "
        f"data/{device}/power; power: the median of each probe's NVML samples, W):",
        "",
        "| fitted figure | fitted (W) | probe class | probes | measured median (lowest-highest), W "
        "| fitted vs measured |",
        "|---|---:|---|---|---:|---:|",
    ]
    for cls, g in groups.items():
        key = PROBE_CLASSES[cls]
        lo, hi = g.range_w
        spread = f" ({lo:.1f}-{hi:.1f})" if len(g.medians_w) > 1 else ""
        lines.append(
            f"| {_FIGURE[key]} | {fitted[key]:.1f} | {cls} | {', '.join(g.workloads)} | {g.median_w:.1f}{spread} | "
            f"{_pct(fitted[key], g.median_w)} |"
        )
    lines += [
        "",
        f"Each probe as the power model prices its workload (shares from its measured rate; float32 products by the "
        f"{fp32_compute!r} rule):",
        "",
        "| probe | class | achieved, of peak | shares compute / memory / compute_fp32 | model (W) | measured (W) "
        "| model vs measured |",
        "|---|---|---:|---|---:|---:|---:|",
    ]
    for r in records:
        frac = _peak_fraction(r, d)
        sh = probe_shares(r, d, fp32_compute)
        model, meas = p.power_w(*sh), float(r["power_samples"]["median_w"])
        lines.append(
            f"| {r['workload']} | {probe_class(r)} | {'-' if frac is None else f'{frac:.0%}'} | "
            f"{sh[0]:.2f} / {sh[1]:.2f} / {sh[2]:.2f} | {model:.1f} | {meas:.1f} | {_pct(model, meas)} |"
        )
    return "\n".join(lines)


def probe_tables(devices: dict[str, dict], fp32_compute: str = FP32_COMPUTE, root: Path = ROOT / "data") -> list[str]:
    """`probe_table` of every device of `devices` (key -> its `power_params.json` entry) that has ok probes in
    `probe_dir(key, root)`, each preceded by an empty line; `fp32_compute` applies where an entry has
    `compute_fp32_w` ("none" elsewhere). `PowerDataError` when a folder holds another device's probes."""
    out = []
    for dev, entry in devices.items():
        recs = device_probes(dev, root)
        if recs:
            out += ["", probe_table(dev, entry, recs, fp32_compute if "compute_fp32_w" in entry else "none")]
    return out


def classes_current(classes: Path = H100_CLASSES) -> bool:
    """Whether the kernel-class cache was costed with the committed kernel-parameter table (its SHA-256)."""
    import hashlib

    from .kernel_model import PARAMS_PATH as KERNEL_PARAMS

    doc = json.loads(Path(classes).read_text())
    return doc.get("kernel_params_sha256") == hashlib.sha256(KERNEL_PARAMS.read_bytes()).hexdigest()


def _design(rows: list[Row], fp32: bool, held_out: bool = False) -> np.ndarray:
    """(N, 3 or 4) shares per row: gap, compute, memory[, float32 compute] (float32 compute in compute unless
    `fp32`); `held_out`: the shares a prediction reads (`Row.held_out`)."""
    sh = np.array([(r.held_out if held_out and r.held_out else (r.s_compute, r.s_memory, r.s_compute_fp32))
                   for r in rows], dtype=float).reshape(-1, 3)  # fmt: skip
    s_c, s_m, s_32 = sh.T
    gap = 1 - s_c - s_m - s_32
    return np.stack([gap, s_c, s_m, s_32] if fp32 else [gap, s_c + s_32, s_m], axis=1)


def fit(rows: list[Row], limit_w: float, fp32: bool = False, pins: dict[int, float] | None = None) -> tuple[float, ...]:
    """(P_gap, P_compute, P_memory) in W, and P_compute_fp32 when `fp32`: least squares of the relative error over
    `rows`, each figure bounded to [0, limit_w] (a board cannot draw more than its power limit in any state).
    `pins`: figures held at a measured value (index in that order -> W), the others fitted around them."""
    from scipy.optimize import lsq_linear

    p = np.array([r.power_w for r in rows])
    a = _design(rows, fp32) / p[:, None]
    lo, hi = np.zeros(a.shape[1]), np.full(a.shape[1], float(limit_w))
    for i, w in (pins or {}).items():
        lo[i], hi[i] = w, w + 1e-9  # lsq_linear needs lo < hi
    coef = lsq_linear(a, np.ones_like(p), bounds=(lo, hi)).x
    return tuple(float(c) for c in coef)


def predict_w(coef: tuple[float, ...], row: Row, limit_w: float) -> float:
    """Predicted power (W) of `row` from `fit`'s coefficients (3: no float32 term; 4: with it), from the shares a
    prediction reads (`Row.held_out` where set)."""
    x = _design([row], len(coef) == 4, held_out=True)[0]
    return float(min(max(float(x @ np.array(coef)), 0.0), limit_w))


def evaluate(
    rows: list[Row],
    limit_w: float,
    fp32: bool = False,
    pins: dict[int, float] | None = None,
    extra: Sequence[Row] = (),
) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-model-out (a `Row.model` group at a time: an ML.ENERGY model, an H100 family): (predicted W,
    measured W) per row, in `rows` order; `pins` as `fit`'s (measured figures, the same in every fold); `extra`
    rows join every fold's training set and are never predicted."""
    pred = np.empty(len(rows))
    for model in {r.model for r in rows}:
        coef = fit([r for r in rows if r.model != model] + list(extra), limit_w, fp32, pins)
        for i, r in enumerate(rows):
            if r.model == model:
                pred[i] = predict_w(coef, r, limit_w)
    return pred, np.array([r.power_w for r in rows])


def _mape(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - meas) / meas) * 100) if len(meas) else float("nan")


_FP32_WORDS = {
    "float32": "float32 kernels (their time)",
    "float32-peak": "float32 kernels (their time at the roofline's peak rate, the rest gap)",
    "cuda": "kernels on FP32 CUDA cores",
}

#: The fit's default for our H100 whole models' shares (`H100_SHARE_MODES`; the float32 rule is
#: `power.FP32_COMPUTE`), chosen by held-out error (docs/power-and-memory.md).
H100_SHARES = "predicted"


def run(
    data: Path,
    prompt_tokens: int = PROMPT_TOKENS,
    shares: str = SHARES,
    step_time: str = STEP_TIME,
    *,
    h100_models: bool = True,
    fp32_compute: str = FP32_COMPUTE,
    h100_shares: str = H100_SHARES,
    models: Path = H100_MODELS,
    classes: Path = H100_CLASSES,
    probes: Path | None = ROOT / "data",
) -> tuple[dict, str]:
    """Fit every GPU with data, evaluate, and return (the parameter document, the Markdown evaluation table).

    `prompt_tokens`, `shares`, `step_time`: how the vLLM rows get their shares (`llm_rows`); `h100_models`: also fit
    the h100-80gb figures on our H100 whole models (`h100_model_rows` of `models` and `classes`, with `fp32_compute`
    and `h100_shares`; where `fp32_compute` is not "none", that GPU gets P_compute_fp32). Held out: each ML.ENERGY
    model and each H100 family (`evaluate`); `mape_pct` is over the ML.ENERGY rows only (the target of issue 30),
    `mape_h100_models_pct` over our H100 whole models. `probes`: the data folder whose `<device>/power/*.jsonl`
    power probes each fitted GPU's figures are checked against (`probe_table`, appended to the table; not fitted
    on); None: no check.
    """
    rows = diffusion_rows(data / "mlenergy-diffusion-v2.jsonl") + llm_rows(
        data / "mlenergy-llm-v2.jsonl", prompt_tokens, shares, step_time
    )
    if h100_models:
        rows += h100_model_rows(models, classes, fp32_compute, h100_shares)
    devices, evaluation = {}, {}
    lines = [
        "| GPU | ML.ENERGY rows | models | held-out energy MAPE, ML.ENERGY | diffusion | LLM serving "
        "| 60%-of-TDP rule, ML.ENERGY | H100 whole models (rows, families) | held-out power MAPE, H100 whole models "
        "| P_gap / P_compute / P_memory / P_compute_fp32 (W, all rows) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dev in sorted({r.device for r in rows}):
        d = DEVICES[dev]
        sub = [r for r in rows if r.device == dev]
        own = any(r.kind == "h100-model" for r in sub)
        fp32 = own and fp32_compute != "none"
        measured = measured_pins(device_probes(dev, probes))
        pins = {FIT_ORDER.index(PROBE_CLASSES[c]): g.median_w for c, g in measured.items()} or None
        pred, meas = evaluate(sub, d.tdp_w, fp32, pins)
        kinds = np.array([r.kind for r in sub])
        public = kinds != "h100-model"
        ratio = meas / pred
        coef = fit(sub, d.tdp_w, fp32, pins)
        old = np.full(len(sub), 0.6 * d.tdp_w)
        ev = {
            "rows": int(public.sum()),
            "models": len({r.model for r in sub if r.kind != "h100-model"}),
            "mape_pct": round(_mape(pred[public], meas[public]), 2),
            "mape_diffusion_pct": round(_mape(pred[kinds == "diffusion"], meas[kinds == "diffusion"]), 2),
            "mape_llm_pct": round(_mape(pred[kinds == "llm"], meas[kinds == "llm"]), 2),
            "mape_60pct_tdp_rule_pct": round(_mape(old[public], meas[public]), 2),
        }
        if own:
            ev |= {
                "h100_model_rows": int((~public).sum()),
                "h100_model_families": len({r.model for r in sub if r.kind == "h100-model"}),
                "mape_h100_models_pct": round(_mape(pred[~public], meas[~public]), 2),
            }
        evaluation[dev] = ev
        entry = {
            "gap_w": round(coef[0], 2),
            "compute_w": round(coef[1], 2),
            "memory_w": round(coef[2], 2),
        }
        if fp32:
            entry["compute_fp32_w"] = round(coef[3], 2)
        ours = (
            f"; our H100 whole models (data/h100-80gb/models: {ev['h100_model_rows']} rows of "
            f"{ev['h100_model_families']} families, eager float32/float16, NVML energy; kernel-model shares over the "
            f"{h100_shares} time) -> leave-one-family-out power MAPE {ev['mape_h100_models_pct']:.1f}%"
            if own
            else ""
        )
        precision = (
            f"; P_compute_fp32 for compute-bound {_FP32_WORDS[fp32_compute]}"
            if fp32
            else "; P_compute measured on float16 tensor-core work, applied to every precision (assumed)"
        )
        pinned = "".join(
            f"; {_FIGURE[PROBE_CLASSES[c]]} measured, not fitted: the median of {len(g.medians_w)} "
            f"{PINNED_BY_PROBES[c]} power probes (data/{dev}/power, each held 6 s)"
            for c, g in measured.items()
        )
        pinned += ", the other figures fitted around them" if measured else ""
        devices[dev] = entry | {
            "limit_w": d.tdp_w,
            "ratio_p10": round(float(np.percentile(ratio, 10)), 4),
            "ratio_p90": round(float(np.percentile(ratio, 90)), 4),
            "source": f"fit: ML.ENERGY Leaderboard v2 (Apache-2.0; data/public-models), {ev['rows']} rows of "
            f"{ev['models']} models on {dev} (diffusion fp16 -> compute; vLLM rows -> the serving engine's "
            f"compute/memory kernel shares, a roofline proxy where it does not build the model: "
            f"predictor/power_fit.py){ours}; leave-one-model-out energy MAPE {ev['mape_pct']:.1f}% on ML.ENERGY"
            f"{precision}{pinned}",
        }
        c32 = f"{coef[3]:.0f}" if fp32 else "-"
        h100 = (
            (f"{ev['h100_model_rows']}, {ev['h100_model_families']}", f"{ev['mape_h100_models_pct']:.1f}%")
            if own
            else ("-", "-")
        )
        lines.append(
            f"| {dev} | {ev['rows']} | {ev['models']} | {ev['mape_pct']:.1f}% | {ev['mape_diffusion_pct']:.1f}% | "
            f"{ev['mape_llm_pct']:.1f}% | {ev['mape_60pct_tdp_rule_pct']:.1f}% | {h100[0]} | {h100[1]} | "
            f"{coef[0]:.0f} / {coef[1]:.0f} / {coef[2]:.0f} / {c32} |"
        )
    for dev, (src, why) in TRANSFERS.items():
        base, scale = devices[src], DEVICES[dev].tdp_w / DEVICES[src].tdp_w
        devices[dev] = {
            **{k: round(base[k] * scale, 2) for k in ("gap_w", "compute_w", "memory_w", "compute_fp32_w") if k in base},
            "limit_w": DEVICES[dev].tdp_w,
            "ratio_p10": base["ratio_p10"],
            "ratio_p90": base["ratio_p90"],
            "source": f"transfer: {src}'s fit x {scale:.4g} (power-limit ratio {DEVICES[dev].tdp_w:g} / "
            f"{DEVICES[src].tdp_w:g} W; {why}); no public power measurements of {dev}",
        }
    if probes is not None:
        lines += probe_tables({dev: devices[dev] for dev in sorted({r.device for r in rows})}, fp32_compute, probes)
    missing = sorted(set(DEVICES) - set(devices))
    if missing:
        raise SystemExit(f"no power parameters for {', '.join(missing)}: add them to TRANSFERS")
    sources = "data/public-models/mlenergy-diffusion-v2.jsonl, mlenergy-llm-v2.jsonl (ML.ENERGY Leaderboard v2, "
    sources += "github.com/ml-energy/leaderboard-v2 @ c3af7f31e2, Apache-2.0)"
    doc = {
        "schema": SCHEMA,
        "created_by": "python -m predictor.power_fit",
        "prompt_tokens_assumed": prompt_tokens,
        "llm_shares": shares,
        "llm_step_time": step_time,
        "data": sources,
    }
    if h100_models:
        doc["h100_models"] = {
            "data": f"{Path(models).relative_to(ROOT)} (this project's measurements), kernel classes "
            f"{Path(classes).relative_to(ROOT)} (python bench/h100_model_shares.py)",
            "fp32_compute": fp32_compute,
            "shares": h100_shares,
        }
    doc |= {"evaluation": evaluation, "devices": {k: devices[k] for k in DEVICES}}
    return doc, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Fit the power model on ML.ENERGY and our H100 measurements.")
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
        choices=STEP_TIMES,
        default=STEP_TIME,
        help="the vLLM rows' time per decode step the shares are taken of (default: throughput, the steady state "
        "avg_batch_size / output_tokens_per_s; tpot: the rows' avg_tpot_s, the fit before 2026-11-26)",
    )
    ap.add_argument(
        "--without-h100-models",
        action="store_true",
        help="fit on the ML.ENERGY rows alone (the fit before our H100 whole models were added)",
    )
    ap.add_argument(
        "--fp32-compute",
        choices=FP32_COMPUTE_MODES,
        default=FP32_COMPUTE,
        help="which compute-bound kernels get P_compute_fp32 (default: %(default)s)",
    )
    ap.add_argument(
        "--h100-shares",
        choices=H100_SHARE_MODES,
        default=H100_SHARES,
        help="what our H100 whole models' fit shares are of (default: %(default)s time per inference)",
    )
    ap.add_argument(
        "--check-probes",
        action="store_true",
        help="fit nothing: print the parameter file's (--out) figures against the committed power probes "
        "(data/<device>/power) and exit",
    )
    args = ap.parse_args(argv)
    data = Path(args.data)
    ours = {
        "h100_models": not args.without_h100_models,
        "fp32_compute": args.fp32_compute,
        "h100_shares": args.h100_shares,
    }

    def fit() -> tuple[dict, str] | None:
        if args.check_probes:
            try:
                doc = json.loads(Path(args.out).read_text())
            except (OSError, ValueError) as e:
                raise PowerDataError(f"cannot read power-parameter file {args.out}: {e}") from e
            if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("devices"), dict):
                raise PowerDataError(f"{args.out} is not a power-parameter file (expected schema {SCHEMA!r})")
            rule = doc.get("h100_models", {}).get("fp32_compute", FP32_COMPUTE)
            print("\n".join(probe_tables(doc["devices"], rule)[1:]) or "no power probes in data/<device>/power")
            return None
        if ours["h100_models"] and not classes_current():
            print(
                f"warning: {H100_CLASSES.relative_to(ROOT)} was costed with another kernel-parameter table: "
                "rerun python bench/h100_model_shares.py",
                file=sys.stderr,
            )
        if args.sensitivity:
            print("| prompt tokens assumed | " + " | ".join(GPUS_FITTED) + " |")
            print("|---|" + "---|" * len(GPUS_FITTED))
            for tokens in (0, 128, 256, 512, 1024):
                doc, _ = run(data, tokens, args.shares, args.step_time, **ours)
                cells = " | ".join(f"{doc['evaluation'][g]['mape_pct']:.1f}%" for g in GPUS_FITTED)
                print(f"| {tokens} | {cells} |")
            return None
        return run(data, shares=args.shares, step_time=args.step_time, **ours)

    required = ("mlenergy-diffusion-v2.jsonl", "mlenergy-llm-v2.jsonl")
    return fit_main(data, required, fit, args.out, errors=(PowerDataError, OSError, ValueError, KeyError))


if __name__ == "__main__":
    raise SystemExit(main())
