"""The pre-deployment report (`preflight report`): one content model, rendered as HTML or Markdown.

`sections(report)` decides *what* the report says (tables, paragraphs, SVG charts); `render_html` and
`render_markdown` only decide how it looks, so the two formats always carry the same content. The JSON
format is the `preflight.report/1` document with its `predictions`, `predictors` and `sweep` blocks.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from passes.costs import compute_dtype
from passes.costs.registry import CATEGORIES
from predictor.devices import get_device
from predictor.fmt import g3
from predictor.llm import FULL_GPU, MAX_BATCH
from predictor.mig import HEADROOM, smallest_first
from predictor.mig import fits as mig_fits
from predictor.predict import op_times_ms
from predictor.roofline import peak_rate

from . import __version__, charts
from .errors import UsageError
from .render import (
    Figure,
    Section,
    Table,
    _module_rows,
    _shape,
    _summary,
    assumes_text,
    basis_text,
    html_page,
    markdown_page,
    mib,
    op_label,
    op_source_label,
    predictor_label,
    si,
)

FORMATS = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown", ".json": "json"}


# ---- per-op predicted time ------------------------------------------------------------------------


def _roofs(analysis, device) -> list[tuple[str, float]]:
    names = {v: k.upper() for k, v in device.peak_flops.items()}
    rates = {peak_rate(device, c.category, compute_dtype(c)) for c in analysis.ops if not c.folded}
    return sorted((names.get(r, f"{r / 1e12:g} TFLOP/s"), r) for r in rates)


# ---- content ---------------------------------------------------------------------------------------


def _iv(value: float, interval, fmt: str) -> str:
    lo, hi = interval
    f = g3 if fmt == ".3g" else lambda v: f"{v:{fmt}}"
    return f"{f(value)} ({f(lo)} – {f(hi)})"


def _llm_dtype(dtype: str, runtime: dict) -> str:
    """The LLM summary's dtype row: the dtype, and how float32 matmuls run when the user set them to TF32."""
    if runtime.get("tf32_matmul") and dtype == "float32":
        return f"float32 (matmuls on TF32 tensor cores: matmul precision '{runtime.get('matmul_precision')}')"
    return dtype


def _prediction_section(report) -> Section:
    sec = Section("Predictions")
    rows = []
    for p in report.predictions:
        rows.append(
            [
                p.device,
                predictor_label(p.predictor),
                _iv(p.latency_ms, p.latency_ms_interval, ".3g"),
                _iv(p.energy_j, p.energy_j_interval, ".3g"),
                _iv(p.memory_mib, p.memory_mib_interval, ",.0f"),
                g3(p.roofline_latency_ms),
                p.mig.summary() if p.mig.profile else "none",
            ]
        )
    sec.blocks.append(
        Table(
            [
                "device",
                "predictor",
                "latency ms (interval)",
                "energy J (interval)",
                "memory MiB (interval)",
                "roofline bound ms",
                "MIG slice",
            ],
            rows,
            {4, 5},
            "Point prediction with its interval; the MIG slice (its predicted latency and slowdown against the "
            "whole GPU) by the rule of docs/design.md.",
        )
    )
    sec.blocks.append([f"{p.device}: {p.mig.reason}" for p in report.predictions])
    sec.blocks.append([f"{p.device} rests on {basis_text(p.basis)}." for p in report.predictions])
    sec.blocks.append([f"{p.device} assumes {assumes_text(p.runtime)}." for p in report.predictions])
    for name, info in report.predictors.items():
        text = f"Predictor {predictor_label(name)}: {info['note']}."
        ev = info.get("evaluation") or {}
        lfo = ev.get("leave-family-out") or {}
        if lfo:
            text += (
                " Leave-family-out evaluation: "
                + ", ".join(
                    f"{t} MAPE {m['mape']}% ({m['coverage90']}% inside the 90% interval)" for t, m in lfo.items()
                )
                + "."
            )
        if info.get("evaluation_table"):
            text += f" Full table: {info['evaluation_table']}."
        sec.blocks.append(text)
    return sec


def _fit_mib(pt: dict) -> float:
    """A sweep point's memory (MiB) that MIG fit is decided on: `memory_fit_mib`, where the allocator's giving back
    makes it less than the interval's top; older JSON has only the interval."""
    return pt.get("memory_fit_mib", pt["memory_mib_interval"][1])


def _sweep_section(report) -> Section:
    sw = report.sweep
    sec = Section("Batch-size sweep")
    slo = (
        f" and the slice's predicted latency within the {sw['latency_slo_ms']:g} ms SLO (a slice's latency is the "
        "whole GPU's plus the extra time its kernels take on the slice: costed on the slice's share of SMs and "
        "bandwidth and issued asynchronously by a host the slice does not slow down)"
        if sw["latency_slo_ms"] is not None
        else ""
    )
    sec.blocks.append(
        f"The model analysed and predicted at batch sizes {', '.join(map(str, sw['batches']))}. "
        f"A batch fits a MIG profile when the memory it runs in (the upper end of its memory interval, with the "
        f"least the caching allocator gets by with where memory is short: 'runs in' where that is less) plus "
        f"{sw['headroom']:.0%} headroom is within the profile's usable memory{slo}; 'largest batch' "
        f"is the largest swept batch that fits."
        + (
            f" 'Largest batch that fits (solved)' is found over every batch up to {solve_max:,}, each evaluated from "
            f"one export with the batch symbolic (docs/symbolic.md)."
            if (solve_max := (sw.get("symbolic") or {}).get("solve_max"))
            else ""
        )
    )
    for dev in sw["devices"]:
        if not dev["points"]:
            continue
        device = get_device(dev["device"])
        order = smallest_first(device.mig)
        rows = []
        runs_in = any(_fit_mib(pt) < pt["memory_mib_interval"][1] for pt in dev["points"])
        for pt in dev["points"]:
            smallest = next((q.name for q in order if pt["fits"].get(q.name)), None)
            if smallest or pt["fits_full_gpu"]:
                where = smallest or ("fits the slice" if device.parent else "full GPU only")
            elif sw["latency_slo_ms"] is not None and mig_fits(device.memory_mib, _fit_mib(pt)):
                where = "misses the latency SLO"  # the memory fits
            else:
                where = "does not fit"
            thr = pt["throughput_per_s"]
            rows.append(
                [
                    str(pt["batch"]),
                    _iv(pt["latency_ms"], pt["latency_ms_interval"], ".3g"),
                    "-" if thr is None else f"{thr:,.0f}",
                    f"{pt['energy_j_per_sample']:.3g}",
                    _iv(pt["memory_mb"], pt["memory_mb_interval"], ",.0f"),
                    *([f"{_fit_mib(pt):,.0f}"] if runs_in else []),
                    where,
                ]
            )
        sec.blocks.append(
            Table(
                [
                    "batch",
                    "latency ms (interval)",
                    "samples/s",
                    "energy J/sample",
                    "memory MiB (interval)",
                    *(["runs in MiB"] if runs_in else []),
                    "smallest fitting slice",
                ],
                rows,
                {0, 2, 3, 5} if runs_in else {0, 2, 3},
                f"{dev['device']} ({predictor_label(dev['predictor'])})",
            )
        )
        lim_rows = [
            [
                q.name,
                f"{q.memory_mib:,.0f}" + ("" if q.measured else "*"),
                str(dev["largest_batch"].get(q.name) or "none"),
            ]
            for q in order
        ]
        lim_rows.append(
            [
                f"{'the slice' if device.parent else 'full GPU'} ({device.key})",
                f"{device.memory_mib:,.0f}",
                str(dev["largest_batch_full_gpu"] or "none"),
            ]
        )
        solved = dev.get("largest_batch_solved")  # from a symbolic export (docs/symbolic.md)
        if solved is not None:
            for row, q in zip(lim_rows, order, strict=False):
                row.append(f"{solved[q.name]:,}" if solved.get(q.name) is not None else "none")
            full = dev.get("largest_batch_full_gpu_solved")
            lim_rows[-1].append(f"{full:,}" if full is not None else "none")
        sec.blocks.append(
            Table(
                ["profile", "usable MiB", "largest batch"]
                + (["largest batch that fits (solved)"] if solved is not None else []),
                lim_rows,
                {1, 2, 3},
                f"{dev['device']}: largest swept batch per MIG profile"
                + (" (* derived lower bound of usable memory)" if any(not q.measured for q in order) else "")
                + (
                    f"; only batch {', '.join(map(str, sw['batches']))} could be analysed (see below why the "
                    f"others were skipped), so no larger batch can show here"
                    if sw["skipped"]
                    else ""
                ),
            )
        )
        limits = [(q.name, q.memory_mib) for q in order]
        limits.append(("the slice" if device.parent else "full GPU", float(device.memory_mib)))
        key = dev["device"]
        sec.blocks.append(
            Figure(
                f"sweep-latency-{key}",
                charts.sweep_latency(key, dev["points"]),
                f"{key}: predicted latency against batch size",
            )
        )
        sec.blocks.append(
            Figure(
                f"sweep-throughput-{key}",
                charts.sweep_throughput(key, dev["points"]),
                f"{key}: predicted throughput against batch size",
            )
        )
        sec.blocks.append(
            Figure(
                f"sweep-memory-{key}",
                charts.sweep_memory(key, dev["points"], limits),
                f"{key}: predicted memory against batch size; dashed lines: usable memory",
            )
        )
    if sw["skipped"]:
        sec.blocks.append([f"batch {s['batch']} skipped: {s['reason']}" for s in sw["skipped"]])
    return sec


def _cost_section(report, top: int) -> Section:

    a = report.analysis
    p = report.predictions[0] if report.predictions else None
    sec = Section("Where the cost is")
    times = op_times_ms(a, p) if p else {}
    live = [c for c in a.ops if not c.folded]
    total_flops = a.totals.flops or 1
    if p:
        sec.blocks.append(
            f"Predicted time per operator on {p.device}: the predicted latency ({g3(p.latency_ms)} ms) shared out "
            f"by the modelled time of the eager CUDA kernels each operator becomes (views and folded operators "
            f"launch nothing: 0). Ranked by predicted time. 'bound': compute or memory by the roofline, or launch "
            f"where every kernel of the operator is shorter than its launch floor (the host's dispatch sets its time)."
        )

        ranked = sorted(live, key=lambda c: times.get(c.index, (0, False))[0], reverse=True)[:top]
    else:
        ranked = sorted(live, key=lambda c: c.flops, reverse=True)[:top]
    rows = []
    for c in ranked:
        nbytes = c.bytes_read + c.bytes_written
        t, bound = times.get(c.index, (0.0, "none"))
        rows.append(
            [
                str(c.index),
                op_source_label(c),
                op_label(c),
                c.category,
                _shape(c.output.shape) if c.outputs else "-",
                si(c.flops),
                mib(nbytes),
                f"{c.flops / nbytes:.1f}" if nbytes else "-",
                *(
                    [
                        bound if bound != "none" else "-",
                        f"{t * 1e3:,.1f}",
                        f"{100 * t / p.latency_ms:.1f}%" if p.latency_ms > 0 else "-",  # 0: a graph of views only
                    ]
                    if p
                    else [f"{100 * c.flops / total_flops:.1f}%"]
                ),
            ]
        )
    header = [
        "index",  # the operator's position in the graph (the JSON's ops[].index), not its rank
        "name",
        "op",
        "category",
        "output",
        "FLOPs",
        "bytes moved",
        "FLOP/byte",
        *(["bound", "predicted µs", "time share"] if p else ["FLOPs share"]),
    ]
    sec.blocks.append(
        Table(
            header,
            rows,
            {0, 5, 6, 7, 9, 10} if p else {0, 5, 6, 7, 8},
            f"The costliest {len(rows)} of {len(live)} operators"
            + ("" if p else f" of {report.model.get('name', 'the graph')}, by FLOPs (no prediction for this graph)"),
        )
    )
    for depth in (1, 2):  # the same cost by the module each operator comes from (ops[].module)
        header, mod_rows = _module_rows(report, depth, top)
        if mod_rows:
            what = "top-level modules" if depth == 1 else "modules two levels deep"
            sec.blocks.append(Table(header, mod_rows, set(range(1, len(header))), f"The costliest {what}"))
    by_cat: dict[str, list] = {}
    for c in live:
        by_cat.setdefault(c.category, []).append(c)
    cat_rows, bars = [], []
    for cat in [c for c in CATEGORIES if c in by_cat]:
        ops = by_cat[cat]
        f = sum(c.flops for c in ops)
        t = sum(times.get(c.index, (0.0, False))[0] for c in ops)
        f_share = 100 * f / total_flops
        timed = p is not None and p.latency_ms > 0  # 0: a graph of views only, no time to share out
        t_share = 100 * t / p.latency_ms if timed else 0.0
        cat_rows.append(
            [
                cat,
                str(len(ops)),
                si(f),
                f"{f_share:.1f}%",
                *([f"{t:.3g}", f"{t_share:.1f}%" if timed else "-"] if p else []),
            ]
        )
        bars.append((cat, f_share, t_share))
    sec.blocks.append(
        Table(
            ["category", "ops", "FLOPs", "FLOPs share", *(["predicted ms", "time share"] if p else [])],
            cat_rows,
            {1, 2, 3, 4, 5} if p else {1, 2, 3},
            "FLOPs and predicted time by operator category" if p else "FLOPs by operator category",
        )
    )
    sec.blocks.append(Figure("categories", charts.category_bars(bars), "Share of FLOPs and of predicted time"))
    if p:
        device = get_device(p.device)
        pts = []
        for c in live:
            nbytes = c.bytes_read + c.bytes_written
            t = times.get(c.index, (0.0, False))[0]
            if c.flops > 0 and nbytes > 0 and t > 0:
                pts.append(
                    {
                        "intensity": c.flops / nbytes,
                        "flops_per_s": c.flops / (t / 1e3),
                        "category": c.category,
                        "label": f"#{c.index} {op_source_label(c)} ({op_label(c)}): {si(c.flops)}FLOP, "
                        f"{c.flops / nbytes:.1f} FLOP/B, {t * 1e3:.1f} µs",
                    }
                )
        if pts:
            sec.blocks.append(
                Figure(
                    f"roofline-{device.key}",
                    charts.roofline(device.key, pts, _roofs(a, device), device.bandwidth),
                    f"Each operator with FLOPs at its arithmetic intensity and predicted FLOP/s, "
                    f"under {device.key}'s compute roofs and bandwidth slope "
                    f"({len(live) - len(pts)} operators without FLOPs are not drawn)",
                )
            )
    m = a.memory
    if m.timeline:
        name = op_source_label(a.ops[m.peak_op]) if m.peak_op is not None else "?"
        label = f"peak {mib(m.peak_bytes)} at op #{m.peak_op} ({name})"
        sec.blocks.append(
            Figure(
                "memory-timeline",
                charts.memory_timeline(m.timeline, m.peak_op, label),
                f"Live activation memory over execution order (liveness pass); {label}. Weights "
                f"({mib(m.weight_bytes)}) are resident throughout and not drawn.",
            )
        )
    return sec


# ---- LLM serving (`preflight llm`) --------------------------------------------------------------------------


def _ms(v: float | None) -> str:
    """Milliseconds to 3 significant digits, without an exponent (12,345 rather than 1.23e+04)."""
    if v is None:
        return "-"
    return g3(v)


def _size(n: float) -> str:
    """Bytes in KiB below 1 MiB, else in MiB (a tiny model's KV cache is not "0.0 MiB")."""
    return f"{n / 1024:,.1f} KiB" if n < 2**20 else mib(n)


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _batch(v: int) -> str:
    return "none" if v == 0 else (f">= {v:,}" if v >= MAX_BATCH else f"{v:,}")


def llm_summary(report) -> list[tuple[str, str]]:
    """The summary rows of an LLM serving report (model, architecture, dtype, weights, request, graphs)."""
    llm = report.llm
    m = llm.model
    arch = (
        f"{m['class']}: {m['layers']} layers, {m['attention_heads']} query heads, {m['kv_heads']} KV heads x "
        f"{m['head_dim']}, vocabulary {m['vocab']:,}"
        + (f", {m['max_positions']:,} positions" if m["max_positions"] else "")
        + (f", sliding window {', '.join(map(str, m['sliding_window']))}" if m["sliding_window"] else "")
        + (", tied embeddings" if m["tied_embeddings"] else "")
    )
    d = llm.depth
    depth = (
        f"all {d['layers']} layers traced ({d['why']})"
        if d["mode"] == "full"
        else f"traced at depth 1 and 2, extrapolated exactly to {d['layers']} identical layers"
    )
    runtime = getattr(llm, "runtime", {"name": "eager"})
    if runtime.get("name") == "vllm":
        tp = runtime.get("tensor_parallel", 1)
        return [
            ("model", f"{m['name']} ({report.model['framework']}: {report.model['source']})"),
            ("architecture", arch),
            ("dtype", _llm_dtype(llm.dtype, runtime)),
            (
                "weights",
                f"{si(llm.params)} params, {mib(llm.param_bytes)}; {mib(runtime['weights_per_gpu_bytes'])} per GPU",
            ),
            (
                "runtime",
                f"vllm (CUDA-graph decode, continuous batching, paged KV cache in blocks of {runtime['block_size']}, "
                f"{runtime['gpu_memory_utilization']:g} of GPU memory), tensor parallel {tp}"
                + (f", engine profile {runtime['engine_profile']['name']}" if "engine_profile" in runtime else ""),
            ),
            (
                "request",
                f"{llm.batch:,} sequence{'s' if llm.batch != 1 else ''} at once, prompt {llm.prompt:,} tokens, "
                f"{llm.generate:,} generated "
                f"(mean live context {llm.prompt + llm.generate / 2:,.0f} tokens)"
                + "".join(
                    f"; {d.device}'s KV pool runs {q['running']:,} at once, the rest wait"
                    for d in llm.devices
                    if (q := (d.engine or {}).get("queue"))
                ),
            ),
            ("kernels", d["why"]),
        ]
    return [
        ("model", f"{m['name']} ({report.model['framework']}: {report.model['source']})"),
        ("architecture", arch),
        ("dtype", _llm_dtype(llm.dtype, runtime)),
        ("weights", f"{si(llm.params)} params, {mib(llm.param_bytes)}"),
        (
            "request",
            f"batch {llm.batch}, prompt {llm.prompt:,} tokens, {llm.generate:,} generated: a static cache of "
            f"{llm.request_context:,} slots per sequence",
        ),
        ("graphs", f"prefill {llm.batch}x{llm.prompt} tokens and one decode step at {llm.request_context:,}; {depth}"),
    ]


_STEP_TITLES = {
    "prefill": "Prefill (the whole prompt, batch sequences)",
    "decode": "Decode step (one token for each of batch sequences)",
}


def _formulas_section(llm) -> Section:
    """How the costs grow with the prompt and the context: each step's totals as exact formulas of the batch and
    the length (`analyzer.llm.context_formulas`; the vllm runtime's `engine_formulas`), printed as `analyze
    --symbolic` prints its own."""
    from .symbolic import formulas_text

    sec = Section("Costs as formulas of the context")
    if llm.runtime.get("name") == "vllm":
        intro = (
            "Each count of the engine's step of the whole model (all its layers, as on one GPU: tensor parallel 1), "
            "fitted exactly on its kernels counted from the config's sizes at sample points, and checked at the "
            "points left over (docs/symbolic.md); flash attention counts half the causal score matrix."
        )
        if any(f is None for b in llm.formulas.values() for f in b["totals"].values()):
            intro += " A mixture of experts reads the weights of the experts its tokens touch: no polynomial."
    else:
        intro = (
            "Each count of the whole model (all its layers), fitted exactly on the step's graph evaluated at sample "
            "points from its one symbolic export, and checked at the points left over (docs/symbolic.md)."
        )
    sec.blocks.append(intro)
    for kind, block in llm.formulas.items():
        lines = formulas_text(block, _STEP_TITLES[kind]).splitlines()
        sec.blocks.append(lines[0])
        sec.blocks.append([line.strip() for line in lines[1:]])
    return sec


def _queue_line(d, llm) -> str:
    """The vllm runtime's queue on one device: how many run, the waves, when all are done and the mean wait."""
    q = d.engine["queue"]
    return (
        f"{d.device}: its KV pool holds {q['running']:,} of the {q['requests']:,} sequences of {llm.request_context:,} "
        f"tokens, so {q['running']:,} run at once (the TTFT, TPOT and E2E above) and the rest wait, as vLLM's "
        f"scheduler queues them: {q['waves']:,} waves of {_ms(q['wave_ms'])} ms, all done in "
        f"{_ms(q['all_done_ms'])} ms ({_rate(d.output_tokens_per_s)} output tok/s), a mean wait of "
        f"{_ms(q['mean_wait_ms'])} ms before a request's prefill"
    )


def llm_sections(llm) -> list[Section]:
    """The sections of `preflight llm`: KV cache and steps, per-device serving, latency over context, capacity."""
    kv, c = llm.kv, llm.request_context
    serve = Section("LLM serving")
    bpt = kv.bytes_per_token
    sliding = sorted({w for w in kv.windows if w is not None})
    kv_rows = [
        [
            "per token",
            f"{bpt:,} B",
            f"2 (K, V) x {kv.layers} layers x {kv.kv_heads} KV heads x {kv.head_dim} x {kv.dtype_bytes:g} B",
        ],
        [
            f"per sequence at {c:,} tokens",
            _size(kv.bytes_per_sequence(c)),
            "sum over layers of min(context, window) slots" if sliding else f"{c:,} x per token",
        ],
        [f"batch of {llm.batch}", _size(kv.bytes(llm.batch, c)), f"{llm.batch} x per sequence"],
    ]
    serve.blocks.append(
        Table(
            ["KV cache", "bytes", "how"],
            kv_rows,
            {1},
            f"KV cache in {llm.dtype}" + (f" (sliding window {', '.join(map(str, sliding))})" if sliding else ""),
        )
    )
    step_rows = []
    pre_shape = f"{llm.prefill.batch} x {llm.prompt}"
    for s, shape in ((llm.prefill, pre_shape), (llm.decode, f"{llm.batch} x 1 at {c:,}")):
        t = s.totals
        step_rows.append(
            [
                s.kind,
                shape,
                si(t["flops"]),
                _size(t["bytes_read"] + t["bytes_written"]),
                _size(s.activation_bytes),
                f"{t['op_count']:,}",
            ]
        )
    serve.blocks.append(
        Table(
            ["step", "tokens", "FLOPs", "bytes read + written", "activations", "operators"],
            step_rows,
            {2, 3, 4, 5},
            "The two graphs (bytes: every graph operator's operands and results, views included, as the formulas "
            "below count them; activations: the peak live besides the KV cache)"
            if not _vllm(llm)
            else "The two steps, whole model, from the config's kernels: a prefill of one prompt and a decode step of "
            "the batch (activations: a formula)"
            + (
                "; a GPU whose KV pool holds fewer runs that many at once (below)"
                if any((d.engine or {}).get("queue") for d in llm.devices)
                else ""
            ),
        )
    )
    mem = llm.devices[0].memory if llm.devices else None
    if mem is not None:
        serve.blocks.append(
            Table(
                ["weights", "KV cache", "activations", "CUDA context", "workspace", "total"],
                [
                    [
                        f"{v:,.1f}"
                        for v in (
                            mem.weight_bytes / 2**20,
                            mem.kv_bytes / 2**20,
                            mem.activation_bytes / 2**20,
                            mem.context_mib,
                            mem.workspace_mib,
                            mem.total_mib,
                        )
                    ]
                ],
                {0, 1, 2, 3, 4, 5},
                "Device memory of the request, MiB (activations: the larger of the prefill's and the decode step's)"
                if not _vllm(llm)
                else "Device memory of the request per GPU, MiB (KV cache in whole blocks; activations: the engine's "
                "profiling pass, a formula; CUDA context: everything outside torch)",
            )
        )
    rows = []
    for d in llm.devices:
        # the recommendation's slice (memory and, with --ttft-ms/--tpot-ms, the latency targets): the same answer
        # as the line below the table
        rec = d.recommendation
        where = rec.profile or (
            "full GPU only"
            if rec.full_gpu_fits
            else "misses the latency targets"
            if d.fits.get(FULL_GPU)  # the memory fits: a TTFT/TPOT target is what the whole GPU misses
            else "does not fit"
        )
        rows.append(
            [
                d.device,
                predictor_label(d.predictor),
                _ms(d.ttft_ms),
                _ms(d.tpot_ms),
                _ms(d.e2e_ms),
                _rate(d.prefill_tokens_per_s),
                _rate(d.decode_tokens_per_s),
                where,
            ]
        )
    serve.blocks.append(
        Table(
            ["device", "predictor", "TTFT ms", "TPOT ms", "E2E ms", "prefill tok/s", "decode tok/s", "MIG slice"],
            rows,
            {2, 3, 4, 5, 6},
            (
                f"The request on each GPU: TTFT = the prefill, TPOT = one decode step at {c:,} slots, "
                if not _vllm(llm)
                else "The request on each GPU (vllm runtime): TTFT = one prompt's prefill (chunked prefill: its "
                "chunks beside the running decodes), TPOT = the mean inter-token latency (decode step at the mean live "
                "context + the prefills or prefill chunks interleaved with it), "
            )
            + f"E2E = TTFT + {llm.generate - 1} x TPOT",
        )
    )
    serve.blocks.append(
        [f"{d.device}, {llm.concurrency} x {llm.context:,} tokens: {d.recommendation.reason}" for d in llm.devices]
        + [_queue_line(d, llm) for d in llm.devices if (d.engine or {}).get("queue")]
    )
    serve.blocks.append(
        [
            f"{d.device} {what} rests on {basis_text(d.basis[key])}."
            for d in llm.devices
            for key, what in (("ttft", "TTFT"), ("tpot", "TPOT"))
            if d.basis.get(key)
        ]
    )
    if not _vllm(llm):
        serve.blocks.append(f"How the graphs were traced: {llm.depth['why']}.")
    serve.blocks.append(_llm_energy_lines(llm))
    out = [serve]

    sweep = Section("Latency over context")
    sweep.blocks.append(
        f"Batch {llm.batch}: TTFT is the prefill of a prompt of that many tokens, TPOT one decode step "
        + ("over that many live tokens per sequence (vllm runtime: no interleaved prefills)." if _vllm(llm) else "")
        + ("" if _vllm(llm) else "with a static cache of that many slots.")
    )
    for d in llm.devices:
        capped = any(p.get("sequences", llm.batch) != llm.batch for p in d.sweep)  # vllm: the pool's sequences
        sweep.blocks.append(
            Table(
                [
                    "context",
                    *(["running"] if capped else []),
                    "TTFT ms",
                    "TPOT ms",
                    "decode tok/s",
                    "decode activations",
                ],
                [
                    [
                        f"{p['context']:,}",
                        *([f"{p['sequences']:,}"] if capped else []),
                        _ms(p["ttft_ms"]),
                        _ms(p["tpot_ms"]),
                        _rate(p["decode_tokens_per_s"]),
                        _size(p["decode_activation_bytes"]),
                    ]
                    for p in d.sweep
                ],
                set(range(6 if capped else 5)),
                f"{d.device} ({predictor_label(d.predictor)})"
                + (
                    ": running = the sequences its KV pool holds at that context, when fewer than the batch"
                    if capped
                    else ""
                ),
            )
        )
        sweep.blocks.append(
            Figure(
                f"llm-latency-{d.device}",
                charts.llm_latency(d.device, [p["context"] for p in d.sweep], d.sweep),
                f"{d.device}: predicted TTFT and TPOT against context (batch {llm.batch})",
            )
        )
    out.append(sweep)

    cap = Section("Concurrency against context")
    cap.blocks.append(
        "The largest number of sequences of each context that fits each GPU and MIG profile: weights + their KV "
        "cache + the larger of the decode step's and the prefill's activations (the request's prompt, at most the "
        f"context) + CUDA context + workspace, plus {HEADROOM:.0%} headroom, within the usable memory (the MIG rule "
        "of docs/design.md)."
        if not _vllm(llm)
        else "The largest number of sequences of each context whose KV blocks fit the engine's pool on each GPU "
        "(per GPU of the tensor-parallel group) and MIG profile: blocks // ceil(context / block size), the pool being "
        "--gpu-memory-utilization x memory - weights - profiling activations - memory outside torch."
    )
    for d in llm.devices:
        k = d.capacity
        names = list(k.largest_batch)
        whole = "this slice" if ":" in d.device else FULL_GPU  # a MIG slice as the device: its own column
        header = ["context"] + [(whole if n == FULL_GPU else n) + ("*" if n in k.derived else "") for n in names]
        rows = [[f"{ctx:,}"] + [_batch(k.largest_batch[n][i]) for n in names] for i, ctx in enumerate(k.contexts)]
        cap.blocks.append(
            Table(
                header,
                rows,
                set(range(len(header))),
                f"{d.device}: largest batch" + (" (* derived lower bound of usable memory)" if k.derived else ""),
            )
        )
        cap.blocks.append(
            Figure(
                f"llm-capacity-{d.device}",
                charts.llm_capacity(d.device, list(k.contexts), [(n, list(k.largest_batch[n])) for n in names]),
                f"{d.device}: concurrent sequences against context, per MIG profile and the whole GPU",
            )
        )
    out.append(cap)
    if llm.formulas:
        out.append(_formulas_section(llm))
    out.append(Section("LLM serving assumptions", [list(llm.assumptions)]))
    return out


def sections(report, top: int = 15) -> tuple[str, list[Section]]:
    """The report's title and its sections."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    summary = Section(
        "Summary",
        [
            f"Generated by preflight {__version__} on {now}, "
            + (
                "from the model config's kernels (vllm runtime) "
                if getattr(report, "llm", None) is not None and _vllm(report.llm)
                else "from the model's TVM Relax graph "
            )
            + "(static analysis; nothing was run on a GPU).",
            Table(["", ""], [[k, v] for k, v in _summary(report)]),
        ],
    )
    out = [summary]
    llm = getattr(report, "llm", None)
    if llm is not None:  # `preflight llm`: the serving sections replace the single-graph summary's inputs table
        summary.blocks[1] = Table(["", ""], [[k, v] for k, v in llm_summary(report)])
        out.extend(llm_sections(llm))
    if report.predictions:
        out.append(_prediction_section(report))
    if report.sweep:
        out.append(_sweep_section(report))
    if llm is None or report.analysis.ops:
        out.append(_cost_section(report, top))
    unsupported = report.analysis.totals.unsupported
    issues = Section("Unsupported operators and warnings")
    if unsupported:
        issues.blocks.append(
            Table(
                ["operator", "count"],
                [[k, str(v)] for k, v in unsupported.items()],
                {1},
                "Operators without a cost rule (counted as 0 FLOPs)",
            )
        )
    issues.blocks.append(list(report.warnings) or ["none"])
    out.append(issues)
    if llm is not None:
        return f"LLM serving report: {llm.model['name']}", out
    return f"Pre-deployment report: {report.model['name']}", out


def render_html(report, top: int = 15) -> str:
    """The report as a self-contained HTML page."""
    return html_page(*sections(report, top))


def render_markdown(report, assets: str, top: int = 15) -> tuple[str, dict[str, str]]:
    """The report as Markdown, and its SVG charts (file name -> SVG) to write into the folder `assets`."""
    return markdown_page(*sections(report, top), assets)


# ---- writing ---------------------------------------------------------------------------------------


def format_for(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise UsageError(f"cannot tell the report format from '{Path(path).name}': use a .html, .md or .json file")
    return FORMATS[suffix]


def check_writable(path: str | Path) -> None:
    """`UsageError` unless `path` can be written: its folder exists and is writable, and it is no folder (checked
    before the long part of a command)."""
    import os

    folder = Path(path).parent
    if not folder.is_dir():
        raise UsageError(f"cannot write {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"cannot write {path}: the folder {folder} is not writable")
    if Path(path).is_dir():
        raise UsageError(f"cannot write {path}: it is a directory")


def check_output(path: str | Path) -> str:
    """The report format of `path`, after `check_writable`."""
    fmt = format_for(path)
    check_writable(path)
    return fmt


def write(report, path: str | Path, top: int = 15) -> list[Path]:
    """Write the report in the format its suffix names; returns every file written."""
    path = Path(path)
    fmt = format_for(path)
    written = [path]
    try:
        if fmt == "json":
            path.write_text(json.dumps(report.to_json(), indent=1) + "\n", encoding="utf-8")
        elif fmt == "html":
            path.write_text(render_html(report, top), encoding="utf-8")
        else:
            assets = f"{path.stem}_files"
            text, files = render_markdown(report, assets, top)
            folder = path.parent / assets
            try:
                folder.mkdir(exist_ok=True)
            except OSError as exc:
                raise UsageError(f"cannot write the report's charts into {folder}: {exc.strerror}") from exc
            for name, svg in files.items():
                (folder / name).write_text(svg + "\n", encoding="utf-8")
                written.append(folder / name)
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename or path}: {exc.strerror}") from exc
    return written


def _llm_energy_lines(llm) -> list[str]:
    """Per device: the runtime, energy per output token and average power, and (vllm) the engine's memory plan."""
    runtime = getattr(llm, "runtime", {"name": "eager"})
    lines = []
    for d in llm.devices:
        head = f"{d.device} ({runtime.get('name', 'eager')} runtime"
        if runtime.get("tensor_parallel", 1) > 1:
            head += f", tensor parallel {runtime['tensor_parallel']}"
        head += ")"
        if d.energy_per_token_j is not None:
            head += f": {d.energy_per_token_j:#.3g} J per output token per GPU at {d.avg_power_w:.0f} W average power"
            if (tp := runtime.get("tensor_parallel", 1)) > 1:
                head += f" ({tp * d.energy_per_token_j:#.3g} J per output token for the {tp} GPUs together)"
            if ":" in d.device:  # predictor.devices.slice_device: its power limit is compute slices / 7 of the GPU's
                head += " (the slice's share of the board's power, its compute slices of 7: an assumption)"
        eng = getattr(d, "engine", None)
        if eng:
            plan = eng["memory_per_gpu"].get(FULL_GPU, {})
            chunked = eng.get("chunked_prefill")
            prompts = (
                f"prefill chunks per step ({chunked['mixed_steps_per_step']:.3g} of the steps carry them)"
                if chunked
                else f"prefills per step ({eng['prefills_per_decode_step']:.3g} prompts)"
            )
            head += (
                f"; TPOT {d.tpot_ms:.3g} ms = decode step {eng['decode_step_ms']:.3g} ms (host "
                f"{eng['decode_step']['host_overhead_ms']:.3g} ms, all-reduce {eng['decode_step']['allreduce_ms']:.3g} "
                f"ms) + {d.tpot_ms - eng['decode_step_ms']:.3g} ms of {prompts}; "
                f"{plan.get('blocks', 0):,} KV blocks per GPU hold {plan.get('sequences_that_fit', 0):,} sequences of "
                "the request's context"
            )
            if not eng.get("fits_model", True):
                head += (
                    " (the weights do not fit this MIG slice: a larger profile or a whole GPU)"
                    if ":" in d.device
                    else " (the weights do not fit one GPU: raise --tensor-parallel)"
                )
        lines.append(head + ".")
    return lines


def _vllm(llm) -> bool:
    """The LLM report is for the vllm runtime (`preflight llm --runtime vllm`)."""
    return getattr(llm, "runtime", {}).get("name") == "vllm"
