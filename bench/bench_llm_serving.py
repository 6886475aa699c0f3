"""`preflight llm --runtime vllm` against ML.ENERGY Leaderboard v2's vLLM 0.5.4 measurements (TPOT, energy).

    PYTHONPATH=. python bench/bench_llm_serving.py [--prompt 256] [--gpu h100|a100|all] [--rows] [--lomo]
        [--engine-profile NAME|FILE]... [--kernel-model-attention] [--host-model block|seq|seq+prompt|...]

For every vLLM row of data/public-models/mlenergy-llm-v2.jsonl whose model is a text decoder with a published
architecture below (vision-language models and pipeline-parallel rows left out), the model's config is built with
its transformers config class from the published sizes (no download, no weights), read by the vllm runtime's
engine model (`predictor.serving_engine.serve`, the function `preflight llm --runtime vllm` reports from) at the
row's average running batch (rounded) and tensor parallel degree, and compared with the row:

- inter-token latency, issue 24's check, like for like (columns ITL(a), ITL(b)): (a) the engine's TPOT, a
  steady-state mean inter-token latency, against the rows' steady-state inter-token latency over their energy window,
  avg_batch_size / output_tokens_per_s (Little's law); (b) with --lomo, the engine's steps replayed through the
  leaderboard's aggregation (`predictor.serving_window`: the drain after the steady state included) against
  `avg_tpot_s`; column "old TPOT": the engine's TPOT against `avg_tpot_s` (a steady-state figure against a mean that
  the drain pulls down); the last line says whether issue 24's targets hold on the H100 dense 8-32B rows;
- energy per output token per GPU: `energy_per_request_j / avg_output_len / num_gpus` (the row's energy counts
  every GPU of the instance and the request's prefill too; so does the prediction).

Generated tokens: the row's `avg_output_len`. Prompt tokens are not recorded in the data: the defaults are the
estimates of `predictor.serving_fit.PROMPT_TOKENS` from the datasets ML.ENERGY sent (ShareGPT chat prompts with the
client's system prompt, HumanEval+ code prompts); `--prompt-chat`, `--prompt-code` or `--prompt` override them.
The engine's host time per step is an engine profile of `predictor/serving_params.json` (`--engine-profile`,
repeatable; default both built-in ones, one table each: `vllm-0.5.4`, fitted on these rows by
`python -m predictor.serving_fit`, and `vllm-overlapped`, not fitted); `--lomo` gives each model the `vllm-0.5.4`
figures fitted on the other models' rows of its GPU (held out: the MoE rows get the all-dense fit, as they are not in
it; `--host-fit-on`: on both of the leaderboard's windows replayed, as the profile is fitted, the default; on
avg_tpot_s alone, the fit until 2026-11-26; or on the steady state alone; `--host-model`: which host figures,
`predictor.serving_fit.HOST_MODELS`, default the committed profile's) and prints the replayed Avg TPOT against
avg_tpot_s (ITL(b)), `--no-host` leaves the host time out.
Last, each profile (and none) for Llama-3.1-8B on one H100 against the
public figures issue 24 quotes (batch 8: 7.3 ms, 490 W; batch 256: 26 ms, 690 W), at three request shapes, each
profile with its own prefill scheduling (`vllm-overlapped`: chunked, vLLM's default budget; the ML.ENERGY rows above
ran vLLM 0.5.4 without chunked prefill, so the tables cost every profile without it). `--kernel-model-attention`: the
same with paged decode attention at the kernel model's attention entry instead of the committed `decode_attention` fit
(`predictor.serving_fit.fit_decode_attention`, public H100 paged-decode timings; the engine's cost before 2026-11-27:
docs/llm-serving.md).
Power: measured per GPU = energy per request x output tokens/s / output tokens / GPUs, against the predicted
`avg_power_w`. The rows' energy per token is power x (average batch / output tokens/s) over the steady state; that
time per token is longer than their avg_tpot_s on many rows (column B/tput:TPOT: its median ratio to TPOT), as their
TPOT is a mean over every engine iteration including the drain after the steady state
(`bench/bench_mlenergy_window.py`), while the engine model's energy per token is that of its steady state
(`serving_engine.steady_state_energy`: decode and prefill steps each at its own power, over the tokens output); the
host figures are fitted on both windows (`predictor.serving_fit.fit_windows`). Prints one line per row with --rows,
then MAPE per group (dense 8-32B, all dense, MoE), task and GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

from predictor import serving_engine as eng
from predictor.devices import get_device
from predictor.power import power_params
from predictor.serving_fit import (
    ARCH,
    HOST_MODEL,
    HOST_MODELS,
    PROMPT_TOKENS,
    coef_of,
    fit,
    fit_windows,
    host_params,
    load_rows,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "public-models" / "mlenergy-llm-v2.jsonl"
GPUS = {"NVIDIA H100 80GB HBM3": "h100-80gb", "NVIDIA A100-SXM4-40GB": "a100-40gb"}


def config(name: str) -> dict:
    """The model's transformers config (its own class) as a dict."""
    import transformers

    kind, layers, hidden, heads, kv, head_dim, inter, vocab, tied = ARCH[name]
    cls = transformers.AutoConfig.for_model(kind).__class__
    kw = dict(
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_word_embeddings=tied,
    )
    if kind == "mixtral":
        kw |= {"num_local_experts": 8, "num_experts_per_tok": 2}
    return cls(**kw).to_dict()


#: Issue 24's public figures for Llama-3.1-8B on one H100 in bfloat16 (a newer vLLM with continuous batching; engine
#: version and prompt lengths not stated): batch -> (ms per output token, board power W).
PUBLIC_LLAMA31_8B_H100 = {8: (7.3, 490.0), 256: (26.0, 690.0)}
#: Llama-3.1-8B's published config.json sizes (meta-llama/Llama-3.1-8B on the Hugging Face Hub).
LLAMA31_8B = dict(
    model_type="llama",
    num_hidden_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=14336,
    vocab_size=128256,
    tie_word_embeddings=False,
)
#: Request shapes (prompt, generated tokens) tried against the public figures, whose prompts are not stated.
PUBLIC_SHAPES = ((128, 128), (512, 256), (1024, 256))


def public(profiles: list[eng.EngineProfile]) -> None:
    """Each profile's TPOT and power for Llama-3.1-8B on one H100 against issue 24's public figures."""
    a, dev, pw = eng.Arch.from_config(LLAMA31_8B), get_device("h100-80gb"), power_params("h100-80gb")
    print("\nLlama-3.1-8B, h100-80gb, bfloat16, against issue 24's public figures (newer vLLM; prompts not stated)")
    print(
        f"{'profile':16} {'batch':>5} {'prompt/gen':>10} {'host ms':>8} {'TPOT ms':>8} {'meas':>6} {'ratio':>6}", end=""
    )
    print(f" {'power W':>8} {'meas':>6} {'ratio':>6}")
    for prof in [*profiles, eng.EngineProfile("(no host)", "none", any_device=eng.HostParams(0.0, 0.0, 0.0))]:
        for batch, (ms, watts) in PUBLIC_LLAMA31_8B_H100.items():
            for prompt, gen in PUBLIC_SHAPES:
                s = eng.serve(
                    a,
                    dev,
                    batch,
                    prompt,
                    gen,
                    pw,
                    host=prof.host(dev),
                    batched_tokens=eng.batched_tokens_for(prof, dev),
                )
                print(
                    f"{prof.name:16} {batch:5d} {f'{prompt}/{gen}':>10} {s.decode.host_s * 1e3:8.2f} "
                    f"{s.tpot_ms:8.2f} {ms:6.1f} {s.tpot_ms / ms:6.2f} {s.avg_power_w:8.0f} {watts:6.0f} "
                    f"{s.avg_power_w / watts:6.2f}"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=None, help="prompt tokens of every request (not in the data)")
    ap.add_argument("--prompt-chat", type=int, default=PROMPT_TOKENS["chat"], help="prompt tokens of a chat request")
    ap.add_argument("--prompt-code", type=int, default=PROMPT_TOKENS["code"], help="prompt tokens of a code request")
    ap.add_argument("--gpu", choices=("h100", "a100", "all"), default="all")
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument(
        "--engine-profile",
        action="append",
        default=None,
        metavar="NAME|FILE",
        help="the engine profiles to compare (repeatable; default: vllm-0.5.4 and vllm-overlapped)",
    )
    ap.add_argument("--no-host", action="store_true", help="leave the engine's host time out (the GPU's share)")
    ap.add_argument(
        "--kernel-model-attention",
        action="store_true",
        help="cost paged decode attention at the kernel model's attention entry instead of the committed "
        "decode_attention fit (public H100 paged-decode timings): the engine before 2026-11-27 (docs/llm-serving.md)",
    )
    ap.add_argument(
        "--lomo",
        action="store_true",
        help="vllm-0.5.4: each model's host figures fitted on the other models' rows of its GPU (held out)",
    )
    ap.add_argument(
        "--host-fit-on",
        choices=("tpot", "throughput", "windows"),
        default="windows",
        help="with --lomo: fit the held-out host figures on the rows' avg_tpot_s, on their steady-state time per "
        "output token, avg_batch_size / output_tokens_per_s, or on both through the leaderboard's aggregation "
        "replayed (predictor.serving_window; serving_fit.fit_windows)",
    )
    ap.add_argument(
        "--host-model",
        choices=tuple(HOST_MODELS),
        default=HOST_MODEL,
        help="with --lomo: the host figures fitted (predictor.serving_fit.HOST_MODELS; default %(default)s)",
    )
    args = ap.parse_args()
    if args.kernel_model_attention:
        from predictor import serving_fit as sf

        with sf.streaming_override(eng.streaming_gemm_table(), {}):
            run(args)
    else:
        run(args)


def steady_ms(row) -> float:
    """A `serving_fit.Row`'s steady-state time per output token of one sequence, avg_batch_size / output_tokens_per_s
    (ms), looked up in the data file by (model, GPU, task, tensor parallel, rounded batch)."""
    return _STEADY[row.model, row.device, row.task, row.tp, row.batch]


def _steady_table() -> dict:
    out = {}
    for line in DATA.read_text().splitlines():
        r = json.loads(line) if line.strip() else None
        if r and r["runtime"].startswith("vLLM") and r["gpu"] in GPUS:
            key = (r["model"], GPUS[r["gpu"]], r["task"].split("/")[-1], r["parallelization"]["tp"])
            out[(*key, max(1, round(r["avg_batch_size"])))] = r["avg_batch_size"] / r["output_tokens_per_s"] * 1e3
    return out


_STEADY = _steady_table()
#: The rows' replayed windows (`serving_fit.Window`) by (model, GPU, task, tensor parallel, rounded batch), with --lomo.
_WINDOWS: dict = {}


def run(args) -> None:
    """The tables of `main` (ML.ENERGY rows per engine profile, then the public Llama-3.1-8B figures)."""
    profiles = [eng.engine_profile(n) for n in args.engine_profile or ("vllm-0.5.4", "vllm-overlapped")]
    held = {}
    if args.lomo and not args.no_host:
        every = load_rows(windows=True)
        global _WINDOWS
        _WINDOWS = {(r.model, r.device, r.task, r.tp, r.batch): r.window for r in every}
        fit_rows = [r for r in every if not r.moe]
        fitter = fit_windows if args.host_fit_on == "windows" else fit
        if args.host_fit_on == "throughput":
            fit_rows = [dataclasses.replace(r, tpot_ms=steady_ms(r)) for r in fit_rows]
        for dev, model in {(r.device, r.model) for r in every}:
            c = fitter([r for r in fit_rows if r.device == dev and r.model != model], args.host_model)
            held[dev, model] = host_params(c, "leave-one-model-out")
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    for prof in profiles:
        if args.no_host:
            how = "none"
        elif args.lomo and prof.name == "vllm-0.5.4":
            how = f"held out per model, host model {args.host_model}, fitted on {args.host_fit_on}"
        else:
            how = f"engine profile {prof.name} ({'fitted' if prof.fitted else 'not fitted'})"

        def host_of(dev: str, model: str, prof=prof) -> eng.HostParams:
            if args.no_host:
                return eng.HostParams(0.0, 0.0, 0.0, "none")
            if args.lomo and prof.name == "vllm-0.5.4":
                return held[dev, model]
            return prof.host(get_device(dev))

        table(rows, args, host_of, how)
        if args.no_host:
            break
    public(profiles)


def table(rows: list[dict], args, host_of, how: str) -> None:
    """TPOT, energy per token and power of every usable row with the host figures `host_of(device, model)`,
    printed as MAPE per group, task and GPU."""
    out = []
    for r in rows:
        if not r["runtime"].startswith("vLLM") or r["model"] not in ARCH or r["parallelization"]["pp"] != 1:
            continue
        dev = GPUS[r["gpu"]]
        if args.gpu != "all" and not dev.startswith(args.gpu):
            continue
        arch = eng.Arch.from_config(config(r["model"]))
        tp = r["parallelization"]["tp"]
        batch = max(1, round(r["avg_batch_size"]))
        gen = max(2, round(r["avg_output_len"]))
        task = r["task"].split("/")[-1]
        prompt = args.prompt or (args.prompt_code if task == "code" else args.prompt_chat)
        host = host_of(dev, r["model"])
        s = eng.serve(arch, get_device(dev), batch, prompt, gen, power_params(dev), tp=tp, host=host)
        meas_tpot = r["avg_tpot_s"] * 1e3
        meas_e = r["energy_per_request_j"] / r["avg_output_len"] / r["num_gpus"]
        params = arch.params() / 1e9
        group = ("moe" if arch.experts else "dense") + ("-8-32b" if 7.9 <= params <= 32.5 and not arch.experts else "")
        meas_w = r["energy_per_request_j"] * r["output_tokens_per_s"] / r["avg_output_len"] / r["num_gpus"]
        row = (r["model"], dev, tp, batch, params, group, meas_tpot, s.tpot_ms, meas_e, s.energy_per_token_j, task)
        cycle = r["avg_batch_size"] / r["output_tokens_per_s"] * 1e3  # ms per token of one sequence, from throughput
        row += (meas_w, s.avg_power_w, cycle / meas_tpot, cycle)
        w = _WINDOWS.get((r["model"], dev, task, tp, batch))
        row += (w.tpot_ms(coef_of(host)) if w is not None else float("nan"),)
        out.append(row)
        if args.rows:
            print(
                f"{r['model'][:40]:40} {dev:10} tp{tp} B={batch:4d} {params:6.1f}B  TPOT {meas_tpot:7.2f} "
                f"pred {s.tpot_ms:7.2f}  J/tok {meas_e:6.3f} pred {s.energy_per_token_j:6.3f}  "
                f"P {meas_w:4.0f} W pred {s.avg_power_w:4.0f} W"
            )

    def mape(sel, i, j):
        a = np.array([x[i] for x in sel])
        b = np.array([x[j] for x in sel])
        return float(np.mean(np.abs(b - a) / a) * 100), float(np.median(b / a))

    prompts = args.prompt or f"chat {args.prompt_chat}, code {args.prompt_code}"
    print(f"\nprompt tokens: {prompts}; host time: {how}; MAPE %, median predicted/measured")
    print(
        "issue-24 inter-token latency, like for like: ITL(a) = the engine's TPOT (steady-state mean inter-token "
        "latency)\n  against the rows' steady-state inter-token latency over their energy window, avg_batch_size / "
        "output_tokens_per_s\n  (Little's law); ITL(b) = the engine's steps replayed through the leaderboard's "
        "aggregation (drain included,\n  predictor.serving_window) against avg_tpot_s (--lomo only, else nan); "
        "old = the engine's TPOT against avg_tpot_s\n  (a steady-state figure against a mean that counts the drain)"
    )
    head = f"{'group':22} {'task':5} {'gpu':10} {'rows':>4}"
    print(
        head + f" {'ITL(a) MAPE':>11} {'ratio':>6} {'ITL(b) MAPE':>11} {'ratio':>6} {'J/tok MAPE':>10} {'ratio':>6} "
        f"{'power MAPE':>10} {'ratio':>6} {'old TPOT MAPE':>13} {'ratio':>6} {'B/tput:TPOT':>11}"
    )
    summary = None
    for dev in sorted({x[1] for x in out}):
        for group in ("dense-8-32b", "dense (all)", "moe"):
            for task in ("all", "chat", "code"):
                sel = [
                    x
                    for x in out
                    if x[1] == dev
                    and (x[5] == group or (group == "dense (all)" and x[5].startswith("dense")))
                    and task in ("all", x[10])
                ]
                if not sel:
                    continue
                t, tr = mape(sel, 6, 7)
                e, er = mape(sel, 8, 9)
                w, wr = mape(sel, 11, 12)
                c, cr = mape(sel, 14, 7)
                p, pr = mape(sel, 6, 15)
                print(
                    f"{group:22} {task:5} {dev:10} {len(sel):4d} {c:11.1f} {cr:6.2f} {p:11.1f} {pr:6.2f} "
                    f"{e:10.1f} {er:6.2f} {w:10.1f} {wr:6.2f} {t:13.1f} {tr:6.2f} "
                    f"{np.median([x[13] for x in sel]):11.2f}"
                )
                if (dev, group, task) == ("h100-80gb", "dense-8-32b", "all"):
                    summary = (len(sel), c, p, e)
    if summary is not None:
        n, c, p, e = summary
        ok = c <= 15 and (np.isnan(p) or p <= 15) and e <= 20
        print(
            f"issue 24 ({how}), h100-80gb dense 8-32B ({n} rows): ITL(a) {c:.1f}% and ITL(b) {p:.1f}% (target <= 15%), "
            f"energy per output token {e:.1f}% (target <= 20%): {'met' if ok else 'not met'}"
        )


if __name__ == "__main__":
    main()
