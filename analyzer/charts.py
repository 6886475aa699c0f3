"""Self-contained SVG charts for the pre-deployment report (no JavaScript, no fonts or files to fetch).

Each function returns one `<svg>` element as a string, with a `<title>` and an `aria-label`, that renders
the same inline in HTML and as a standalone `.svg` file beside a Markdown report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

W, H = 560, 300
PAD_L, PAD_R, PAD_T, PAD_B = 68, 128, 34, 46
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
CATEGORY_COLOURS = {
    "conv": "#1f77b4",
    "matmul": "#d62728",
    "attention": "#9467bd",
    "elementwise": "#2ca02c",
    "reduction": "#ff7f0e",
    "normalization": "#8c564b",
    "pooling": "#17becf",
    "data_movement": "#7f7f7f",
    "other": "#bcbd22",
}


def _num(v: float) -> str:
    return f"{v:.1f}"


def fmt_value(v: float) -> str:
    """Short tick label: 1.5k, 20, 0.25, 3e-05; a whole number below 100,000 as it is (8192, not 8.19k: contexts
    and batch sizes are read as exact counts)."""
    if v == 0:
        return "0"
    a = abs(v)
    if a < 1e5 and float(v).is_integer():
        return str(int(v))
    for factor, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= factor:
            return f"{v / factor:.3g}{suffix}"
    return f"{v:.3g}" if a >= 1e-3 else f"{v:.0e}"


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step + 1e-9) + 1)]


class Axis:
    """Maps data values to pixels; log or linear."""

    def __init__(self, lo: float, hi: float, p0: float, p1: float, log: bool = False):
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        self.lo, self.hi, self.p0, self.p1, self.log = lo, hi, p0, p1, log

    def __call__(self, v: float) -> float:
        if self.log:
            v = math.log10(max(v, 1e-300))
        return self.p0 + (v - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)

    def ticks(self) -> list[float]:
        """At least two ticks inside the range: powers of ten on a log axis (when three or more fall inside), else
        1x, 2x and 5x of them, then finer steps where the range spans less than one such step."""
        if not self.log:
            return _nice_ticks(self.lo, self.hi)
        inside = lambda t: self.lo - 1e-9 <= math.log10(t) <= self.hi + 1e-9  # noqa: E731
        decades = range(math.floor(self.lo) - 1, math.ceil(self.hi) + 1)
        for mults, enough in (((1,), 3), ((1, 2, 5), 2), ((1, 1.5, 2, 3, 5, 7), 2)):
            ticks = [m * 10.0**e for e in decades for m in mults if inside(m * 10.0**e)]
            if len(ticks) >= enough:
                return ticks
        return [t for t in _nice_ticks(10**self.lo, 10**self.hi) if t > 0 and inside(t)]


class Chart:
    """One plot area with axes; shapes are appended as SVG fragments."""

    def __init__(
        self,
        title: str,
        xlabel: str,
        ylabel: str,
        x: tuple[float, float],
        y: tuple[float, float],
        logx: bool = False,
        logy: bool = False,
        xticks: Sequence[float] | None = None,
    ):
        self.title, self.xlabel, self.ylabel = title, xlabel, ylabel
        self.x = Axis(*x, PAD_L, W - PAD_R, logx)
        self.y = Axis(*y, H - PAD_B, PAD_T, logy)
        self.xticks = list(xticks) if xticks is not None else self.x.ticks()
        self.body: list[str] = []  # drawn clipped to the plot area
        self.labels: list[tuple[float, str, str]] = []  # (y, colour, text) of limit lines, named inside the plot
        self.legend: list[tuple[str, str, str]] = []  # (label, colour, kind: line|dot|band)

    def polyline(self, xs, ys, colour: str, label: str | None = None, width: float = 2, dash: str = "") -> None:
        pts = " ".join(f"{_num(self.x(a))},{_num(self.y(b))}" for a, b in zip(xs, ys, strict=True))
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.body.append(
            f'<polyline class="series" points="{pts}" fill="none" stroke="{colour}" stroke-width="{width}"{extra}/>'
        )
        if label:
            self.legend.append((label, colour, "line"))

    def band(self, xs, lo, hi, colour: str, label: str | None = None) -> None:
        top = [f"{_num(self.x(a))},{_num(self.y(b))}" for a, b in zip(xs, hi, strict=True)]
        bottom = [f"{_num(self.x(a))},{_num(self.y(b))}" for a, b in zip(reversed(xs), reversed(lo), strict=True)]
        self.body.append(
            f'<polygon class="band" points="{" ".join(top + bottom)}" fill="{colour}" '
            f'fill-opacity="0.18" stroke="none"/>'
        )
        if label:
            self.legend.append((label, colour, "band"))

    def dots(self, xs, ys, colour: str, label: str | None = None, r: float = 3, titles=None) -> None:
        for i, (a, b) in enumerate(zip(xs, ys, strict=True)):
            tip = f"<title>{escape(titles[i])}</title>" if titles else ""
            self.body.append(
                f'<circle class="point" cx="{_num(self.x(a))}" cy="{_num(self.y(b))}" r="{r}" '
                f'fill="{colour}" fill-opacity="0.75">{tip}</circle>'
            )
        if label:
            self.legend.append((label, colour, "dot"))

    def hline(self, value: float, colour: str, label: str) -> None:
        y = _num(self.y(value))
        self.body.append(
            f'<line class="limit" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y}" y2="{y}" stroke="{colour}" '
            f'stroke-width="1.2" stroke-dasharray="5 3"/>'
        )
        self.labels.append((float(y), colour, label))

    def marker(self, x: float, y: float, label: str) -> None:
        px, py = self.x(x), self.y(y)
        anchor = "end" if px > (PAD_L + W - PAD_R) / 2 else "start"
        dx = -6 if anchor == "end" else 6
        self.body.append(
            f'<circle class="peak" cx="{_num(px)}" cy="{_num(py)}" r="4.5" fill="none" '
            f'stroke="#d62728" stroke-width="2"/>'
        )
        self.body.append(
            f'<text x="{_num(px + dx)}" y="{_num(max(py - 6, PAD_T + 8))}" font-size="11" '
            f'text-anchor="{anchor}" fill="#d62728">{escape(label)}</text>'
        )

    def svg(self) -> str:
        x0, x1, y0, y1 = PAD_L, W - PAD_R, H - PAD_B, PAD_T
        out = [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {W} {H}" width="{W}" '
            f'height="{H}" role="img" aria-label="{escape(self.title)}" font-family="sans-serif">',
            f"<title>{escape(self.title)}</title>",
            f'<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>',
            f'<text x="{x0}" y="16" font-size="13" font-weight="bold">{escape(self.title)}</text>',
        ]
        right_edge = -1e9  # where the last x label drawn ends: a label that would overlap it is left out
        for t in self.xticks:
            px = self.x(t)
            if x0 - 0.5 <= px <= x1 + 0.5:
                out.append(f'<line x1="{_num(px)}" x2="{_num(px)}" y1="{y1}" y2="{y0}" stroke="#eee"/>')
                text = fmt_value(t)
                half = 3.1 * len(text) + 2  # half the label's width at font-size 10 (~6.2 px a character), + gap
                if px - half >= right_edge:
                    out.append(f'<text x="{_num(px)}" y="{y0 + 14}" font-size="10" text-anchor="middle">{text}</text>')
                    right_edge = px + half
        for t in self.y.ticks():
            py = self.y(t)
            if y1 - 0.5 <= py <= y0 + 0.5:
                out.append(f'<line x1="{x0}" x2="{x1}" y1="{_num(py)}" y2="{_num(py)}" stroke="#eee"/>')
                out.append(
                    f'<text x="{x0 - 4}" y="{_num(py + 3)}" font-size="10" text-anchor="end">{fmt_value(t)}</text>'
                )
        out.append(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#999"/>')
        out.append(
            f'<text x="{(x0 + x1) / 2}" y="{H - 8}" font-size="11" text-anchor="middle">{escape(self.xlabel)}</text>'
        )
        out.append(
            f'<text transform="translate(14 {(y0 + y1) / 2}) rotate(-90)" font-size="11" '
            f'text-anchor="middle">{escape(self.ylabel)}</text>'
        )
        out.append(
            f'<svg x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" '
            f'viewBox="{x0} {y1} {x1 - x0} {y0 - y1}" overflow="hidden">'
        )
        out += self.body
        out.append("</svg>")
        last = -1e9
        for y, colour, label in sorted(self.labels, reverse=True):  # bottom up, at least 11 px apart
            y = min(y, last - 11) if last > -1e9 else y
            last = y
            # inside the plot, right-aligned just above its line: the right margin is the legend's, on every chart
            out.append(
                f'<text x="{x1 - 4}" y="{_num(y - 3)}" font-size="10" fill="{colour}" '
                f'text-anchor="end">{escape(label)}</text>'
            )
        for i, (label, colour, kind) in enumerate(self.legend):
            lx, ly = W - PAD_R + 8, PAD_T + 14 + 16 * i
            if kind == "dot":
                out.append(f'<circle cx="{lx + 6}" cy="{ly - 4}" r="4" fill="{colour}"/>')
            elif kind == "band":
                out.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="10" fill="{colour}" fill-opacity="0.25"/>')
            else:
                out.append(
                    f'<line x1="{lx}" x2="{lx + 12}" y1="{ly - 4}" y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>'
                )
            out.append(f'<text x="{lx + 16}" y="{ly}" font-size="10">{escape(label)}</text>')
        out.append("</svg>")
        return "\n".join(out)


def _range(values: Sequence[float], log: bool, pad: float = 0.08) -> tuple[float, float]:
    vals = [v for v in values if v is not None and math.isfinite(v) and (v > 0 or not log)]
    if not vals:
        return (1, 10) if log else (0, 1)
    lo, hi = min(vals), max(vals)
    if log:
        return lo / 1.5, hi * 1.5
    span = (hi - lo) or abs(hi) or 1
    return min(0.0, lo - pad * span), hi + pad * span


# ---- the report's charts --------------------------------------------------------------------------


def _batch_range(xs: Sequence[int]) -> tuple[float, float]:
    """x range of a sweep chart (log scale when several batches), padded so that end points show whole."""
    return (min(xs) / 1.15, max(xs) * 1.15) if len(xs) > 1 else (min(xs) - 0.5, max(xs) + 0.5)


def _sweep_chart(
    device: str,
    points: list[dict],
    key: str,
    what: str,
    ylabel: str,
    colour: str,
    tip: str,
    limits: list[tuple[str, float]] | None = None,
) -> str:
    """`points[i][key]` (with its `_interval` band) against batch size; `limits` as labelled dashed lines.

    Points whose value or interval is missing or not finite (a graph with no work has no throughput) are left out.
    """

    def finite(v) -> bool:
        return v is not None and math.isfinite(v)

    points = [p for p in points if finite(p[key]) and all(finite(v) for v in p[f"{key}_interval"])] or [
        {"batch": 1, key: 0.0, f"{key}_interval": [0.0, 0.0]}
    ]
    xs = [p["batch"] for p in points]
    ys = [p[key] for p in points]
    lo = [p[f"{key}_interval"][0] for p in points]
    hi = [p[f"{key}_interval"][1] for p in points]
    yrange = _range(lo + hi, log=False)
    shown = []
    if limits is not None:  # the usable-memory lines up to the first one above the data
        top = max(hi) * 1.15
        ordered = sorted(limits, key=lambda nv: nv[1])
        above = [nv for nv in ordered if nv[1] > top][:1]
        shown = [nv for nv in ordered if nv[1] <= top] + above
        yrange = (0, max([top] + [v * 1.05 for _, v in shown]))
    c = Chart(
        f"{device}: predicted {what}", "batch size", ylabel, _batch_range(xs), yrange, logx=len(xs) > 1, xticks=xs
    )
    for i, (name, v) in enumerate(shown):
        c.hline(v, PALETTE[(i + 3) % len(PALETTE)], name)
    c.band(xs, lo, hi, colour, "interval")
    c.polyline(xs, ys, colour, "predicted")
    c.dots(xs, ys, colour, titles=[f"batch {b}: {v:{tip}}" for b, v in zip(xs, ys, strict=True)])
    return c.svg()


def sweep_latency(device: str, points: list[dict]) -> str:
    """Predicted latency (with interval) against batch size."""
    return _sweep_chart(device, points, "latency_ms", "latency", "latency (ms)", PALETTE[0], ".3g")


def sweep_throughput(device: str, points: list[dict]) -> str:
    """Predicted throughput (samples/s) against batch size."""
    return _sweep_chart(device, points, "throughput_per_s", "throughput", "samples / s", PALETTE[2], ",.0f")


def sweep_memory(device: str, points: list[dict], limits: list[tuple[str, float]]) -> str:
    """Predicted memory (with interval) against batch size, with each MIG profile's usable memory as a line."""
    return _sweep_chart(device, points, "memory_mb", "memory", "device memory (MiB)", PALETTE[1], ",.0f", limits)


def roofline(device: str, ops: list[dict], roofs: list[tuple[str, float]], bandwidth: float) -> str:
    """Each op by arithmetic intensity (FLOP/byte) and predicted FLOP/s, under the device's roofs.

    `ops`: dicts with `intensity`, `flops_per_s`, `category`, `label`; `roofs`: (name, FLOP/s).
    """
    xs = [o["intensity"] for o in ops]
    ys = [o["flops_per_s"] for o in ops]
    peak = max(r for _, r in roofs)
    xlo = min(xs + [peak / bandwidth / 100]) / 2
    xhi = max(xs + [peak / bandwidth * 10]) * 2
    ylo = min(ys + [xlo * bandwidth]) / 2
    c = Chart(
        f"{device}: roofline (ops by arithmetic intensity)",
        "arithmetic intensity (FLOP / byte)",
        "FLOP/s",
        (xlo, xhi),
        (ylo, peak * 3),
        logx=True,
        logy=True,
    )
    for i, (name, rate) in enumerate(sorted(roofs, key=lambda r: r[1])):
        ridge = rate / bandwidth
        grid = [xlo, ridge, xhi]
        c.polyline(
            grid,
            [min(x * bandwidth, rate) for x in grid],
            "#444" if i == len(roofs) - 1 else "#999",
            f"{name} roof",
            width=1.5,
            dash="" if i == len(roofs) - 1 else "4 3",
        )
    for cat in sorted({o["category"] for o in ops}):
        sel = [o for o in ops if o["category"] == cat]
        c.dots(
            [o["intensity"] for o in sel],
            [o["flops_per_s"] for o in sel],
            CATEGORY_COLOURS.get(cat, "#000"),
            cat,
            titles=[o["label"] for o in sel],
        )
    return c.svg()


def memory_timeline(timeline: Sequence[int], peak_op: int | None, peak_label: str) -> str:
    """Live activation bytes (MiB) over execution order, with the peak marked."""
    n = len(timeline)
    mib = [v / 2**20 for v in timeline]
    xs, ys = [], []
    for i, v in enumerate(mib):  # a step line: op i holds v from i to i+1
        xs += [i, i + 1]
        ys += [v, v]
    c = Chart(
        "memory timeline: live activations",
        "operator (execution order)",
        "live activations (MiB)",
        (0, max(n, 1)),
        (0, max(mib + [1e-3]) * 1.15),
    )
    c.polyline(xs or [0, 1], ys or [0, 0], PALETTE[0], "live bytes", width=1.5)
    if peak_op is not None and n:
        c.marker(peak_op + 0.5, mib[peak_op], peak_label)
    return c.svg()


def category_bars(rows: list[tuple[str, float, float]]) -> str:
    """Horizontal bars: share of FLOPs and of predicted time per category (`rows`: name, flops %, time %)."""
    bar_h, gap = 9, 8
    height = PAD_T + len(rows) * (2 * bar_h + gap) + 30
    x0, x1 = 110, W - 150
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {W} {height}" width="{W}" '
        f'height="{height}" role="img" aria-label="FLOPs and predicted time by category" font-family="sans-serif">',
        "<title>FLOPs and predicted time by category</title>",
        f'<rect x="0" y="0" width="{W}" height="{height}" fill="white"/>',
        '<text x="8" y="18" font-size="13" font-weight="bold">FLOPs and predicted time by category</text>',
    ]
    for i, (name, f, t) in enumerate(rows):
        y = PAD_T + i * (2 * bar_h + gap)
        out.append(f'<text x="{x0 - 6}" y="{y + bar_h + 3}" font-size="11" text-anchor="end">{escape(name)}</text>')
        for j, (v, colour) in enumerate(((f, PALETTE[0]), (t, PALETTE[4]))):
            w = max((x1 - x0) * v / 100, 0.5 if v > 0 else 0)
            out.append(
                f'<rect class="bar" x="{x0}" y="{y + j * bar_h}" width="{_num(w)}" height="{bar_h - 1}" '
                f'fill="{colour}"><title>{escape(name)}: {v:.1f}%</title></rect>'
            )
            out.append(f'<text x="{_num(x0 + w + 4)}" y="{y + j * bar_h + bar_h - 1}" font-size="9">{v:.1f}%</text>')
    ly = height - 12
    out.append(
        f'<rect x="{x0}" y="{ly - 8}" width="10" height="8" fill="{PALETTE[0]}"/>'
        f'<text x="{x0 + 14}" y="{ly}" font-size="10">share of FLOPs</text>'
    )
    out.append(
        f'<rect x="{x0 + 120}" y="{ly - 8}" width="10" height="8" fill="{PALETTE[4]}"/>'
        f'<text x="{x0 + 134}" y="{ly}" font-size="10">share of predicted time</text>'
    )
    out.append("</svg>")
    return "\n".join(out)


# ---- LLM serving (`preflight llm`) --------------------------------------------------------------------------


def _context_axis(contexts: Sequence[int]) -> tuple[float, float]:
    return (min(contexts) / 1.2, max(contexts) * 1.2) if len(contexts) > 1 else (contexts[0] / 2, contexts[0] * 2)


def _context_chart(title: str, ylabel: str, contexts: Sequence[int], values: Sequence[float]) -> Chart:
    """An empty chart of `values` (log y, their range) against context (tokens, log x, a tick at each context)."""
    return Chart(
        title,
        "context (tokens)",
        ylabel,
        _context_axis(contexts),
        _range(values, log=True),
        logx=True,
        logy=True,
        xticks=list(contexts),
    )


def llm_latency(device: str, contexts: Sequence[int], points: Sequence[dict]) -> str:
    """Predicted TTFT and TPOT (ms, log) against context (tokens, log); `points[i]` has `ttft_ms`, `tpot_ms`."""
    series = [("TTFT (prefill)", "ttft_ms", PALETTE[0]), ("TPOT (decode step)", "tpot_ms", PALETTE[1])]
    values = [p[k] for p in points for _, k, _ in series if p.get(k) is not None and p[k] > 0]
    c = _context_chart(f"{device}: latency against context", "predicted ms", contexts, values)
    for label, key, colour in series:
        pts = [(x, p[key]) for x, p in zip(contexts, points, strict=True) if p.get(key) is not None and p[key] > 0]
        if pts:
            xs, ys = [x for x, _ in pts], [y for _, y in pts]
            c.polyline(xs, ys, colour, label)
            c.dots(xs, ys, colour, titles=[f"{label} at {x:,} tokens: {y:.3g} ms" for x, y in pts])
    return c.svg()


def llm_capacity(device: str, contexts: Sequence[int], series: Sequence[tuple[str, Sequence[int]]]) -> str:
    """Largest number of concurrent sequences (log) against context (log), one line per GPU or MIG profile.

    Targets with identical values share a line and a legend entry; a target that holds no sequence at a context
    has no point there.
    """
    merged: list[tuple[str, list[int]]] = []
    for name, values in series:
        for i, (label, vals) in enumerate(merged):
            if vals == list(values):
                merged[i] = (f"{label} / {name}", vals)
                break
        else:
            merged.append((name, list(values)))
    positive = [v for _, vals in merged for v in vals if v > 0]
    c = _context_chart(f"{device}: concurrency against context", "sequences that fit", contexts, positive)
    for i, (label, vals) in enumerate(merged):
        pts = [(x, v) for x, v in zip(contexts, vals, strict=True) if v > 0]
        colour = PALETTE[i % len(PALETTE)]
        if not pts:
            c.legend.append((f"{label}: none", colour, "line"))
            continue
        xs, ys = [x for x, _ in pts], [y for _, y in pts]
        # a line that nearly coincides with one drawn after it (7g.80gb under the whole GPU's) is drawn wider
        # underneath, so that both show
        close = any(
            all(a > 0 and b > 0 and abs(a - b) <= 0.08 * max(a, b) for a, b in zip(vals, later, strict=True))
            for _, later in merged[i + 1 :]
        )
        c.polyline(xs, ys, colour, label, width=6 if close else 2)
        c.dots(xs, ys, colour, titles=[f"{label}: {y:,} sequences of {x:,} tokens" for x, y in pts])
    return c.svg()
