"""Text at the edge: the JSON document, the terminal table and Markdown for an analysis report."""

from __future__ import annotations

from pathlib import Path

from . import __version__

SCHEMA = "preflight.report/1"
SCHEMA_FILE = Path(__file__).resolve().parent / "schema" / "report-1.schema.json"  # JSON Schema of the document


def op_json(cost) -> dict:
    return {
        "index": cost.index, "name": cost.name, "op": cost.op, "category": cost.category,
        "flops": cost.flops, "macs": cost.macs, "bytes_read": cost.bytes_read, "bytes_written": cost.bytes_written,
        "inputs": [t.to_json() for t in cost.inputs],
        "output": cost.output.to_json() if cost.outputs else None,
        "weight_bytes": cost.weight_bytes,
        "folded": cost.weight_only,
        "supported": cost.supported,
    }


def report_json(report) -> dict:
    """The `preflight.report/1` document (DESIGN.md)."""
    a = report.analysis
    t = a.totals
    doc = {
        "schema": SCHEMA,
        "tool": {"name": "preflight", "version": __version__},
        "model": dict(report.model),
        "inputs": [dict(i) for i in report.inputs],
        "totals": {
            "flops": t.flops, "macs": t.macs, "params": t.params, "param_bytes": t.param_bytes,
            "peak_activation_bytes": t.peak_activation_bytes, "bytes_read": t.bytes_read,
            "bytes_written": t.bytes_written, "op_count": t.op_count, "unsupported": dict(t.unsupported),
        },
        "ops": [op_json(c) for c in a.ops],
        "graph": {"nodes": len(a.ops), "edges": len(a.edges)},
        "warnings": list(report.warnings),
    }
    if report.prediction is not None:
        doc["prediction"] = report.prediction
    if report.predictions:
        doc["predictions"] = list(report.predictions)
    if report.predictors:
        doc["predictors"] = dict(report.predictors)
    if report.sweep is not None:
        doc["sweep"] = report.sweep
    return doc


# ---- human units ---------------------------------------------------------------------------

def si(n: float, unit: str = "") -> str:
    """1234567 -> '1.23 M' (powers of 1000)."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= factor:
            return f"{n / factor:.2f} {prefix}{unit}"
    return f"{n:.0f} {unit}".rstrip()


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _shape(s) -> str:
    return "x".join(str(d) for d in s) or "scalar"


def _rows(report, top: int) -> tuple[list[str], list[list[str]]]:
    a = report.analysis
    total = a.totals.flops or 1
    live = [c for c in a.ops if not c.weight_only]
    ranked = sorted(live, key=lambda c: (c.flops, c.bytes_read + c.bytes_written), reverse=True)[:top]
    header = ["#", "name", "op", "category", "output", "FLOPs", "share", "bytes moved"]
    rows = [[str(c.index), c.name, c.op.removeprefix("relax."), c.category,
             _shape(c.output.shape) if c.outputs else "-", si(c.flops), f"{100 * c.flops / total:.1f}%",
             mib(c.bytes_read + c.bytes_written)] for c in ranked]
    return header, rows


def _summary(report) -> list[tuple[str, str]]:
    t = report.analysis.totals
    inputs = ", ".join(f"{i['name']} {_shape(i['shape'])} {i['dtype']}" for i in report.inputs)
    return [
        ("model", f"{report.model['name']} ({report.model['framework']}: {report.model['source']})"),
        ("inputs", inputs or "-"),
        ("FLOPs", f"{si(t.flops)} ({t.flops:,})"),
        ("MACs", f"{si(t.macs)} ({t.macs:,})"),
        ("params", f"{si(t.params)} ({t.params:,}), {mib(t.param_bytes)}"),
        ("peak activations", mib(t.peak_activation_bytes)),
        ("bytes read / written", f"{mib(t.bytes_read)} / {mib(t.bytes_written)}"),
        ("operators", f"{t.op_count:,} ({len(report.analysis.edges):,} data-flow edges)"),
        ("unsupported", ", ".join(f"{k} x{v}" for k, v in t.unsupported.items()) or "none"),
    ]


def _prediction(report) -> list[tuple[str, str]]:
    p = report.prediction
    if not p:
        return []

    def iv(key: str, unit: str, fmt: str = ".3g") -> str:
        lo, hi = p[f"{key}_interval"]
        return f"{p[key]:{fmt}} {unit} ({lo:{fmt}} to {hi:{fmt}})"

    mig = p["mig"]
    return [
        ("device", f"{p['device']} (predictor: {p['predictor']})"),
        ("latency", iv("latency_ms", "ms")),
        ("energy", iv("energy_j", "J")),
        ("memory", iv("memory_mb", "MiB", ",.0f")),
        ("roofline bound", f"{p['roofline_latency_ms']:.3g} ms"),
        ("MIG slice", f"{mig['profile'] or 'none'}: {mig['reason']}"),
    ]


def _text_table(header: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    """Aligned plain-text columns: the header, a rule, the rows (`right`: right-aligned column indexes)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()

    return [fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)]


def render_table(report, top: int = 15) -> str:
    """Plain-text view for a terminal: totals, the prediction, then the costliest operators."""
    lines = []
    summary = _summary(report) + _prediction(report)
    width = max(len(k) for k, _ in summary)
    lines += [f"{k:<{width}}  {v}" for k, v in summary]
    header, rows = _rows(report, top)
    if rows:
        lines += ["", f"costliest {len(rows)} operators by FLOPs:", *_text_table(header, rows, {0, 5, 6, 7})]
    if report.warnings:
        lines += [""] + [f"warning: {w}" for w in report.warnings]
    return "\n".join(lines) + "\n"


def render_markdown(report, top: int = 15) -> str:
    """Markdown: a totals table and the costliest operators."""
    lines = [f"# preflight analysis: {report.model['name']}", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v.replace('|', '/')} |" for k, v in _summary(report) + _prediction(report)]
    header, rows = _rows(report, top)
    if rows:
        lines += ["", f"## Costliest {len(rows)} operators", "", "| " + " | ".join(header) + " |",
                  "|" + "|".join("---:" if i in (0, 5, 6, 7) else "---" for i in range(len(header))) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    if report.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in report.warnings]
    return "\n".join(lines) + "\n"


def render_pass_records(records) -> str:
    """A table of `passes.CostRecorder` records: what each pass did to FLOPs, bytes, ops and kernels."""
    header = ["pass", "FLOPs", "bytes moved", "peak activations", "ops", "call_tir", "change"]
    rows = []
    for r in records:
        a, b = r.after, r.before
        name = "  " * r.depth + r.name
        if a.error or b.error:
            rows.append([name, "-", "-", "-", "-", "-", f"not analysable: {a.error or b.error}"])
            continue
        d = r.delta
        change = ", ".join(f"{k} {v:+,}" for k, v in d.items()) or "no change"
        rows.append([name, si(a.flops), mib(a.bytes_read + a.bytes_written), mib(a.peak_activation_bytes),
                     f"{a.op_count:,}", f"{a.tir_calls:,}", change])
    return "\n".join(_text_table(header, rows)) + "\n"
