"""The pre-deployment report (`preflight report`): one content model, rendered as HTML or Markdown.

`sections(report)` decides *what* the report says (tables, paragraphs, SVG charts); `render_html` and
`render_markdown` only decide how it looks, so the two formats always carry the same content. The JSON
format is the `preflight.report/1` document with its `predictions`, `predictors` and `sweep` blocks.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from . import __version__, charts
from .errors import UsageError
from .render import _shape, _summary, mib, si

FORMATS = {".html": "html", ".htm": "html", ".md": "markdown", ".markdown": "markdown", ".json": "json"}


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    right: set[int] = field(default_factory=set)  # right-aligned (numeric) columns
    caption: str = ""


@dataclass
class Figure:
    name: str  # file stem for Markdown's SVG files
    svg: str
    caption: str


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)  # str (a paragraph) | Table | Figure | list[str] (bullets)


# ---- per-op predicted time ------------------------------------------------------------------------

def op_times_ms(analysis, prediction: dict) -> dict[int, tuple[float, bool]]:
    """Predicted latency apportioned over the live ops: op index -> (ms, compute bound).

    The share of op i is (its roofline time + one kernel launch) / the sum over ops; with the roofline
    estimate this is exactly each op's bound plus its launch, with a trained predictor it spreads the
    predicted total the same way (a GraphSAGE predictor predicts the graph, not each op).
    """
    from predictor.devices import get_device
    from predictor.predict import LAUNCH_US
    from predictor.roofline import op_bounds

    bounds = op_bounds(analysis.ops, get_device(prediction["device"]))
    weights = [b.seconds * 1e3 + LAUNCH_US / 1e3 for b in bounds]
    total = sum(weights) or 1.0
    scale = prediction["latency_ms"] / total
    return {b.index: (w * scale, b.compute_bound) for b, w in zip(bounds, weights, strict=True)}


def _roofs(analysis, device) -> list[tuple[str, float]]:
    from predictor.roofline import peak_rate

    names = {v: k.upper() for k, v in device.peak_flops.items()}
    rates = {peak_rate(device, c.category, c.output.dtype if c.outputs else "float32")
             for c in analysis.ops if not c.weight_only}
    return sorted((names.get(r, f"{r / 1e12:g} TFLOP/s"), r) for r in rates)


# ---- content ---------------------------------------------------------------------------------------

def _iv(p: dict, key: str, fmt: str) -> str:
    lo, hi = p[f"{key}_interval"]
    return f"{p[key]:{fmt}} ({lo:{fmt}} – {hi:{fmt}})"


def _prediction_section(report) -> Section:
    sec = Section("Predictions")
    rows = []
    for p in report.predictions:
        rows.append([p["device"], p["predictor"], _iv(p, "latency_ms", ".3g"), _iv(p, "energy_j", ".3g"),
                     _iv(p, "memory_mb", ",.0f"), f"{p['roofline_latency_ms']:.3g}", p["mig"]["profile"] or "none"])
    sec.blocks.append(Table(["device", "predictor", "latency ms (interval)", "energy J (interval)",
                             "memory MiB (interval)", "roofline bound ms", "MIG slice"], rows, {4, 5},
                            "Point prediction with its interval; the MIG slice by the rule of DESIGN.md."))
    sec.blocks.append([f"{p['device']}: {p['mig']['reason']}" for p in report.predictions])
    for name, info in report.predictors.items():
        text = f"Predictor {name}: {info['note']}."
        ev = info.get("evaluation") or {}
        lfo = ev.get("leave-family-out") or {}
        if lfo:
            text += " Leave-family-out evaluation: " + ", ".join(
                f"{t} MAPE {m['mape']}% ({m['coverage90']}% inside the 90% interval)" for t, m in lfo.items()) + "."
        if info.get("evaluation_table"):
            text += f" Full table: {info['evaluation_table']}."
        sec.blocks.append(text)
    return sec


def _sweep_section(report) -> Section:
    from predictor.devices import get_device
    from predictor.mig import smallest_first

    sw = report.sweep
    sec = Section("Batch-size sweep")
    slo = f" and the slice's predicted latency within the {sw['latency_slo_ms']:g} ms SLO (on a slice the " \
        "per-operator launch floor stays as on the whole GPU; the rest scales with the slice's share of SMs and " \
        "bandwidth)" if sw["latency_slo_ms"] is not None else ""
    sec.blocks.append(f"The model analysed and predicted at batch sizes {', '.join(map(str, sw['batches']))}. "
                      f"A batch fits a MIG profile when the upper end of its memory interval plus "
                      f"{sw['headroom']:.0%} headroom is within the profile's usable memory{slo}; 'largest batch' "
                      f"is the largest swept batch that fits.")
    for dev in sw["devices"]:
        if not dev["points"]:
            continue
        device = get_device(dev["device"])
        order = smallest_first(device.mig)
        rows = []
        for pt in dev["points"]:
            smallest = next((q.name for q in order if pt["fits"].get(q.name)), None)
            where = smallest or ("full GPU only" if pt["fits_full_gpu"] else "does not fit")
            thr = pt["throughput_per_s"]
            rows.append([str(pt["batch"]), _iv(pt, "latency_ms", ".3g"), "-" if thr is None else f"{thr:,.0f}",
                         f"{pt['energy_j_per_sample']:.3g}", _iv(pt, "memory_mb", ",.0f"), where])
        sec.blocks.append(Table(["batch", "latency ms (interval)", "samples/s", "energy J/sample",
                                 "memory MiB (interval)", "smallest fitting slice"], rows, {0, 2, 3},
                                f"{dev['device']} ({dev['predictor']})"))
        lim_rows = [[q.name, f"{q.memory_mib:,.0f}" + ("" if q.measured else "*"),
                     str(dev["largest_batch"].get(q.name) or "none")] for q in order]
        lim_rows.append([f"full GPU ({device.key})", f"{device.memory_mib:,.0f}",
                         str(dev["largest_batch_full_gpu"] or "none")])
        sec.blocks.append(Table(["profile", "usable MiB", "largest batch"], lim_rows, {1, 2},
                                f"{dev['device']}: largest swept batch per MIG profile"
                                + (" (* derived lower bound of usable memory)" if any(not q.measured for q in order)
                                   else "")))
        limits = [(q.name, q.memory_mib) for q in order] + [("full GPU", float(device.memory_mib))]
        key = dev["device"]
        sec.blocks.append(Figure(f"sweep-latency-{key}", charts.sweep_latency(key, dev["points"]),
                                 f"{key}: predicted latency against batch size"))
        sec.blocks.append(Figure(f"sweep-throughput-{key}", charts.sweep_throughput(key, dev["points"]),
                                 f"{key}: predicted throughput against batch size"))
        sec.blocks.append(Figure(f"sweep-memory-{key}", charts.sweep_memory(key, dev["points"], limits),
                                 f"{key}: predicted memory against batch size; dashed lines: usable memory"))
    if sw["skipped"]:
        sec.blocks.append([f"batch {s['batch']} skipped: {s['reason']}" for s in sw["skipped"]])
    return sec


def _cost_section(report, top: int) -> Section:
    from passes.costs.registry import CATEGORIES
    from predictor.devices import get_device

    a = report.analysis
    p = report.predictions[0] if report.predictions else None
    sec = Section("Where the cost is")
    times = op_times_ms(a, p) if p else {}
    live = [c for c in a.ops if not c.weight_only]
    total_flops = a.totals.flops or 1
    if p:
        sec.blocks.append(f"Predicted time per operator on {p['device']}: the predicted latency "
                          f"({p['latency_ms']:.3g} ms) shared out by each operator's roofline time plus one kernel "
                          f"launch. Ranked by predicted time.")
        ranked = sorted(live, key=lambda c: times.get(c.index, (0, False))[0], reverse=True)[:top]
    else:
        ranked = sorted(live, key=lambda c: c.flops, reverse=True)[:top]
    rows = []
    for c in ranked:
        nbytes = c.bytes_read + c.bytes_written
        t, cb = times.get(c.index, (0.0, False))
        rows.append([str(c.index), c.name, c.op.removeprefix("relax."), c.category,
                     _shape(c.output.shape) if c.outputs else "-", si(c.flops), mib(nbytes),
                     f"{c.flops / nbytes:.1f}" if nbytes else "-",
                     ("compute" if cb else "memory") if p else "-",
                     f"{t * 1e3:,.1f}" if p else "-",
                     f"{100 * t / p['latency_ms']:.1f}%" if p else f"{100 * c.flops / total_flops:.1f}%"])
    sec.blocks.append(Table(["#", "name", "op", "category", "output", "FLOPs", "bytes moved", "FLOP/byte", "bound",
                             "predicted µs", "time share" if p else "FLOPs share"], rows, {0, 5, 6, 7, 9, 10},
                            f"The costliest {len(rows)} of {len(live)} operators"))
    by_cat: dict[str, list] = {}
    for c in live:
        by_cat.setdefault(c.category, []).append(c)
    cat_rows, bars = [], []
    for cat in [c for c in CATEGORIES if c in by_cat]:
        ops = by_cat[cat]
        f = sum(c.flops for c in ops)
        t = sum(times.get(c.index, (0.0, False))[0] for c in ops)
        f_share = 100 * f / total_flops
        t_share = 100 * t / p["latency_ms"] if p else 0.0
        cat_rows.append([cat, str(len(ops)), si(f), f"{f_share:.1f}%", f"{t:.3g}" if p else "-",
                         f"{t_share:.1f}%" if p else "-"])
        bars.append((cat, f_share, t_share))
    sec.blocks.append(Table(["category", "ops", "FLOPs", "FLOPs share", "predicted ms", "time share"], cat_rows,
                            {1, 2, 3, 4, 5}, "FLOPs and predicted time by operator category"))
    sec.blocks.append(Figure("categories", charts.category_bars(bars), "Share of FLOPs and of predicted time"))
    if p:
        device = get_device(p["device"])
        pts = []
        for c in live:
            nbytes = c.bytes_read + c.bytes_written
            t = times.get(c.index, (0.0, False))[0]
            if c.flops > 0 and nbytes > 0 and t > 0:
                pts.append({"intensity": c.flops / nbytes, "flops_per_s": c.flops / (t / 1e3), "category": c.category,
                            "label": f"#{c.index} {c.name} ({c.op.removeprefix('relax.')}): {si(c.flops)}FLOP, "
                                     f"{c.flops / nbytes:.1f} FLOP/B, {t * 1e3:.1f} µs"})
        if pts:
            sec.blocks.append(Figure(f"roofline-{device.key}", charts.roofline(device.key, pts, _roofs(a, device),
                                                                               device.bandwidth),
                                     f"Each operator with FLOPs at its arithmetic intensity and predicted FLOP/s, "
                                     f"under {device.key}'s compute roofs and bandwidth slope "
                                     f"({len(live) - len(pts)} operators without FLOPs are not drawn)"))
    m = a.memory
    if m.timeline:
        name = a.ops[m.peak_op].name if m.peak_op is not None else "?"
        label = f"peak {mib(m.peak_bytes)} at op #{m.peak_op} ({name})"
        sec.blocks.append(Figure("memory-timeline", charts.memory_timeline(m.timeline, m.peak_op, label),
                                 f"Live activation memory over execution order (liveness pass); {label}. Weights "
                                 f"({mib(m.weight_bytes)}) are resident throughout and not drawn."))
    return sec


def sections(report, top: int = 15) -> tuple[str, list[Section]]:
    """The report's title and its sections."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    summary = Section("Summary", [f"Generated by preflight {__version__} on {now}, from the model's TVM Relax graph "
                                  f"(static analysis; nothing was run on a GPU).",
                                  Table(["", ""], [[k, v] for k, v in _summary(report)])])
    out = [summary]
    if report.predictions:
        out.append(_prediction_section(report))
    if report.sweep:
        out.append(_sweep_section(report))
    out.append(_cost_section(report, top))
    unsupported = report.analysis.totals.unsupported
    issues = Section("Unsupported operators and warnings")
    if unsupported:
        issues.blocks.append(Table(["operator", "count"], [[k, str(v)] for k, v in unsupported.items()], {1},
                                   "Operators without a cost rule (counted as 0 FLOPs)"))
    issues.blocks.append(list(report.warnings) or ["none"])
    out.append(issues)
    return f"Pre-deployment report: {report.model['name']}", out


# ---- HTML ------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1180px;padding:16px 24px;
color:#1b1b1b;line-height:1.45}
h1{font-size:1.6em;margin:.2em 0 .4em}h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;
margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0 1em;font-size:.9em}caption{text-align:left;font-weight:600;
padding:.2em 0}
th,td{border:1px solid #ddd;padding:3px 8px;vertical-align:top}th{background:#f4f6f8;text-align:left}
tr:nth-child(even) td{background:#fafbfc}td.r,th.r{text-align:right;font-variant-numeric:tabular-nums}
.figures{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0 0 10px;flex:1 1 520px;max-width:580px}
figcaption{font-size:.85em;color:#555}svg.chart{width:100%;height:auto;border:1px solid #eee}
.table-wrap{overflow-x:auto}code{background:#f4f6f8;padding:0 3px}
@media print{body{max-width:none;padding:0}h2{break-after:avoid}figure,table{break-inside:avoid}
.table-wrap{overflow:visible}}
"""


def _html_table(t: Table) -> str:
    cls = lambda i: ' class="r"' if i in t.right else ""  # noqa: E731
    head = "" if not any(t.header) else "<tr>" + "".join(f"<th{cls(i)}>{escape(h)}</th>"
                                                         for i, h in enumerate(t.header)) + "</tr>"
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{escape(c)}</td>" for i, c in enumerate(r)) + "</tr>"
                   for r in t.rows)
    cap = f"<caption>{escape(t.caption)}</caption>" if t.caption else ""
    return f'<div class="table-wrap"><table>{cap}{head}{body}</table></div>'


def render_html(report, top: int = 15) -> str:
    """A self-contained HTML page: inline CSS and SVG, no scripts, nothing fetched at view time."""
    title, secs = sections(report, top)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>", f"<h1>{escape(title)}</h1>"]
    for s in secs:
        parts.append(f"<section><h2>{escape(s.title)}</h2>")
        figs: list[str] = []
        for b in s.blocks + [None]:
            if isinstance(b, Figure):
                figs.append(f"<figure>{b.svg}<figcaption>{escape(b.caption)}</figcaption></figure>")
                continue
            if figs:
                parts.append('<div class="figures">' + "".join(figs) + "</div>")
                figs = []
            if isinstance(b, Table):
                parts.append(_html_table(b))
            elif isinstance(b, list):
                parts.append("<ul>" + "".join(f"<li>{escape(x)}</li>" for x in b) + "</ul>")
            elif isinstance(b, str):
                parts.append(f"<p>{escape(b)}</p>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# ---- Markdown --------------------------------------------------------------------------------------

def _md_text(text: str) -> str:
    """Plain text for Markdown: one line, and no raw HTML (a model or file name could carry some)."""
    return escape(" ".join(str(text).split()), quote=False)


def _md_cell(text: str) -> str:
    return _md_text(text).replace("|", "\\|")


def _md_table(t: Table) -> list[str]:
    lines = [f"**{_md_cell(t.caption)}**", ""] if t.caption else []
    header = t.header if any(t.header) else ["", ""]
    lines.append("| " + " | ".join(_md_cell(h) for h in header) + " |")
    lines.append("|" + "|".join("---:" if i in t.right else "---" for i in range(len(header))) + "|")
    lines += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in t.rows]
    return lines + [""]


def render_markdown(report, assets: str, top: int = 15) -> tuple[str, dict[str, str]]:
    """Markdown text, and the SVG files it links (file name -> SVG) to write into the folder `assets`."""
    from urllib.parse import quote

    title, secs = sections(report, top)
    lines, files = [f"# {_md_text(title)}", ""], {}
    for s in secs:
        lines += [f"## {_md_text(s.title)}", ""]
        for b in s.blocks:
            if isinstance(b, Table):
                lines += _md_table(b)
            elif isinstance(b, Figure):
                files[f"{b.name}.svg"] = b.svg
                lines += [f"![{_md_cell(b.caption)}]({quote(assets)}/{quote(b.name)}.svg)", "",
                          f"*{_md_cell(b.caption)}*", ""]
            elif isinstance(b, list):
                lines += [f"- {_md_text(x)}" for x in b] + [""]
            else:
                lines += [_md_text(b), ""]
    return "\n".join(lines), files


# ---- writing ---------------------------------------------------------------------------------------

def format_for(path: str | Path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise UsageError(f"cannot tell the report format from '{Path(path).name}': use a .html, .md or .json file")
    return FORMATS[suffix]


def check_output(path: str | Path) -> str:
    """The report format of `path`, after checking that its folder exists and is writable (before the long part)."""
    import os

    fmt = format_for(path)
    folder = Path(path).parent
    if not folder.is_dir():
        raise UsageError(f"cannot write {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"cannot write {path}: the folder {folder} is not writable")
    if Path(path).is_dir():
        raise UsageError(f"cannot write {path}: it is a directory")
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
