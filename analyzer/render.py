"""Text at the edge: the JSON document, the terminal table and Markdown for an analysis report."""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from predictor.fmt import g3

from . import __version__
from .frontends.specs import TOP_LEVEL
from .provenance import model_sha256, tool_block

SCHEMA = "preflight.report/1"
SCHEMA_FILE = Path(__file__).resolve().parent / "schema" / "report-1.schema.json"  # JSON Schema of the document


def op_json(cost) -> dict:
    return {
        "index": cost.index,
        "name": cost.name,
        "source": cost.source,
        "module": cost.module,
        "op": cost.op,
        "category": cost.category,
        "flops": cost.flops,
        "macs": cost.macs,
        "bytes_read": cost.bytes_read,
        "bytes_written": cost.bytes_written,
        "inputs": [t.to_json() for t in cost.inputs],
        "output": cost.output.to_json() if cost.outputs else None,
        "weight_bytes": cost.weight_bytes,
        "folded": cost.folded,
        "weight_only": cost.weight_only,
        "supported": cost.supported,
    }


def report_json(report) -> dict:
    """The `preflight.report/1` document (docs/design.md; JSON Schema in `SCHEMA_FILE`)."""
    a = report.analysis
    t = a.totals
    doc = {
        "schema": SCHEMA,
        "tool": tool_block(__version__),
        "model": {**report.model, "sha256": model_sha256(str(report.model.get("source", "")))},
        "inputs": [dict(i) for i in report.inputs],
        "totals": {
            "flops": t.flops,
            "macs": t.macs,
            "params": t.params,
            "param_bytes": t.param_bytes,
            "peak_activation_bytes": t.peak_activation_bytes,
            "bytes_read": t.bytes_read,
            "bytes_written": t.bytes_written,
            "op_count": t.op_count,
            "unsupported": dict(t.unsupported),
            "incomplete": t.incomplete,
            "macs_by_dtype": dict(t.macs_by_dtype),
        },
        "ops": [op_json(c) for c in a.ops],
        "modules": module_rollup(report),
        "kernels": {**a.kernel_view.summary.to_json(), "list": [k.to_json() for k in a.kernels]},
        "graph": {"nodes": len(a.ops), "edges": len(a.edges)},
        "warnings": list(report.warnings),
    }
    if report.prediction is not None:
        doc["prediction"] = report.prediction.to_json()
    if report.predictions:
        doc["predictions"] = [p.to_json() for p in report.predictions]
    if report.predictors:
        doc["predictors"] = dict(report.predictors)
    if report.sweep is not None:
        doc["sweep"] = report.sweep
    if getattr(a, "repeat", None) is not None:
        doc["layers"] = a.repeat.to_json()
    if getattr(a, "steps", None) is not None:
        doc["recurrence"] = a.steps.to_json()
    if getattr(report, "symbolic", None) is not None:
        doc["symbolic"] = report.symbolic
    if getattr(report, "verdict", None) is not None:
        doc["verdict"] = report.verdict.to_json()
    llm = getattr(report, "llm", None)  # `preflight llm` (analyzer.llm.LlmReport)
    if llm is not None:
        doc["llm"] = llm.to_json()
    return doc


# ---- the content model every page format renders ----


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


def ranking(report) -> str:
    """How every operator table ranks (one order for table, Markdown, HTML and CSV): by predicted time on the first
    device when there is a prediction, else by FLOPs (then bytes moved)."""
    p = report.predictions[0] if report.predictions else report.prediction
    return f"predicted time on {p.device}" if p is not None else "FLOPs"


def ranked_ops(report) -> list[tuple[object, float | None]]:
    """The live (not folded) operators in `ranking` order, each with its predicted time in ms (None: no
    prediction; the latency shared out over the kernels each operator becomes, `predictor.predict.op_times_ms`)."""
    a = report.analysis
    live = [c for c in a.ops if not c.folded]
    p = report.predictions[0] if report.predictions else report.prediction
    if p is None:
        order = sorted(live, key=lambda c: (c.flops, c.bytes_read + c.bytes_written), reverse=True)
        return [(c, None) for c in order]
    from predictor.predict import op_times_ms

    times = op_times_ms(a, p)
    order = sorted(live, key=lambda c: (times.get(c.index, (0.0, "none"))[0], c.flops), reverse=True)
    return [(c, times.get(c.index, (0.0, "none"))[0]) for c in order]


def op_source_label(cost) -> str:
    """The op's name for a table: where it comes from in the source model (a module path, an ONNX node, a TFLite
    tensor) with the module it belongs to where the name does not say it (`node_conv2d_1 (layer1.0.conv1)`), else
    the Relax value's name (`lv190`)."""
    src, module = cost.source, cost.module
    if not src:
        return cost.name
    if ";" in src:  # a TFLite operator that fused several TensorFlow ops names them all: the first stands for them
        src = src.split(";", 1)[0] + ";\u2026"
    if not module or module == src or module == TOP_LEVEL:
        return src
    if src.startswith("/") or module in src or module.replace(".", "/") in src:  # a scoped name shows it
        return src
    return f"{src} ({module})"


def op_label(cost) -> str:
    """The op's name for a table: the Relax op without `relax.`, or for a packed call with a cost rule (a grouped
    matmul of MoE experts) its callee without `preflight.`."""
    from passes.costs import PACKED_RULES

    if cost.op == "relax.call_dps_packed" and cost.callee in PACKED_RULES:
        return cost.callee.removeprefix("preflight.")
    return cost.op.removeprefix("relax.")


def module_rollup(report, depths: tuple[int, ...] = (1, 2)) -> list[dict]:
    """The live operators' cost summed by module: each op counts toward the first `depth` dotted parts of its
    `module` (`layer4.2.conv3` -> `layer4` at depth 1, `layer4.2` at depth 2), for every depth asked; ops without
    a module are left out. Rows in the operator tables' order (`ranking`); time_ms is None without a prediction."""
    timed = {c.index: t for c, t in ranked_ops(report)}
    rows: dict[tuple[int, str], dict] = {}
    for c in report.analysis.ops:
        if c.folded or not c.module:
            continue
        parts = c.module.split(".")
        for depth in depths:
            if len(parts) < depth and depth > 1:
                continue
            key = (depth, ".".join(parts[:depth]))
            row = rows.setdefault(
                key, {"module": key[1], "depth": depth, "ops": 0, "flops": 0, "macs": 0, "bytes": 0, "time_ms": None}
            )
            row["ops"] += 1
            row["flops"] += c.flops
            row["macs"] += c.macs
            row["bytes"] += c.bytes_read + c.bytes_written
            if timed.get(c.index) is not None:
                row["time_ms"] = (row["time_ms"] or 0.0) + timed[c.index]
    return sorted(rows.values(), key=lambda r: (r["depth"], -(r["time_ms"] or 0.0), -r["flops"], r["module"]))


def _module_rows(report, depth: int, top: int) -> tuple[list[str], list[list[str]]]:
    mods = module_rollup(report, (depth,))[:top]
    p = report.predictions[0] if report.predictions else report.prediction
    latency = p.latency_ms if p is not None else None
    header = ["module", "ops", "FLOPs", "bytes moved", "time (ms)", "share of latency"]
    rows = [
        [
            r["module"],
            str(r["ops"]),
            si(r["flops"]),
            mib(r["bytes"]),
            f"{r['time_ms']:,.4g}" if r["time_ms"] is not None else "-",
            f"{100 * r['time_ms'] / latency:.1f}%" if r["time_ms"] is not None and latency else "-",
        ]
        for r in mods
    ]
    if p is None:  # no prediction: no time columns
        header, rows = header[:4], [r[:4] for r in rows]
    return header, rows


def predictor_label(name: str | None) -> str:
    """A predictor's name for people: "kernel model" for the estimate without a trained predictor (the JSON keeps
    its schema name, "roofline"), else the trained predictor's "name@version"."""
    return "kernel model" if name in (None, "roofline") else name


def _rows(report, top: int) -> tuple[list[str], list[list[str]]]:
    a = report.analysis
    total = a.totals.flops or 1
    ranked = ranked_ops(report)[:top]
    timed = bool(ranked) and ranked[0][1] is not None
    header = ["index", "name", "op", "category", "output", "FLOPs", "share", "bytes moved"]
    if timed:
        latency = (report.predictions[0] if report.predictions else report.prediction).latency_ms
        header = [*header[:6], "bytes moved", "time (ms)", "share of latency"]
    rows = []
    for c, t in ranked:
        row = [str(c.index), op_source_label(c), op_label(c), c.category]
        row += [_shape(c.output.shape) if c.outputs else "-", si(c.flops)]
        if timed:
            row += [mib(c.bytes_read + c.bytes_written), f"{t:,.4g}", f"{100 * t / latency:.1f}%" if latency else "-"]
        else:
            row += [f"{100 * c.flops / total:.1f}%", mib(c.bytes_read + c.bytes_written)]
        rows.append(row)
    return header, rows


def _computes_in(report) -> str:
    from predictor.predict import runtime_of

    return runtime_of(report.analysis.ops)["dtype"]


def _summary(report) -> list[tuple[str, str]]:
    t = report.analysis.totals
    inputs = ", ".join(f"{i['name']} {_shape(i['shape'])} {i['dtype']}" for i in report.inputs)
    return [
        ("model", f"{report.model['name']} ({report.model['framework']}: {report.model['source']})"),
        ("inputs", inputs or "-"),
        ("computes in", _computes_in(report)),
        ("FLOPs", f"{_at_least(t)}{si(t.flops)} ({t.flops:,}){_incomplete_note(t)}"),
        ("MACs", f"{_at_least(t)}{si(t.macs)} ({t.macs:,})"),
        *([("MACs by dtype", dtype_mix(t.macs_by_dtype))] if _mixed(t.macs_by_dtype) else []),
        ("params", f"{si(t.params)} ({t.params:,}), {mib(t.param_bytes)}"),
        ("peak activations", mib(t.peak_activation_bytes)),
        ("bytes read / written", f"{mib(t.bytes_read)} / {mib(t.bytes_written)}"),
        ("operators", f"{t.op_count:,} ({len(report.analysis.edges):,} data-flow edges{_folded_note(report)})"),
        ("CUDA kernels", _kernel_line(report.analysis.kernel_view.summary, _repeat_of(report.analysis))),
        *([("layers", _layers_line(report.analysis.repeat))] if getattr(report.analysis, "repeat", None) else []),
        *([("recurrence", _steps_line(report.analysis.steps))] if getattr(report.analysis, "steps", None) else []),
        ("unsupported", ", ".join(f"{k} x{v}" for k, v in t.unsupported.items()) or "none"),
    ]


def _layers_line(repeat) -> str:
    n = repeat.layers
    return (
        f"{n:,}; layers 3..{n:,} extrapolated from layers 1-2 (identical): totals exact; the operator and kernel "
        f"lists and the edges show the embedding, layers 1-2 and the head"
    )


def _steps_line(steps) -> str:
    t1, t2, t3 = steps.sampled
    return (
        f"{steps.steps:,} steps costed from {t1}/{t2} steps (checked at {t3}), exact: every count is affine in the "
        f"step count; the operator and kernel lists and the edges show {t3} steps"
    )


def _at_least(totals) -> str:
    return "at least " if totals.incomplete else ""


def _incomplete_note(totals) -> str:
    """', incomplete: N operators count 0 (...)' when some operator's work is not in the totals, else ''."""
    if not totals.incomplete:
        return ""
    n = totals.uncounted_ops
    return f", incomplete: {n} operator{'s' if n != 1 else ''} count 0 (no cost rule sees their work; see unsupported)"


def dtype_mix(macs_by_dtype: dict[str, int]) -> str:
    """{"int8": 85, "float32": 15} -> 'int8 85.0%, float32 15.0%' (shares of the MACs, largest first)."""
    total = sum(macs_by_dtype.values()) or 1
    ranked = sorted(macs_by_dtype.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{d} {100 * n / total:.1f}%" for d, n in ranked)


def _mixed(macs_by_dtype: dict[str, int]) -> bool:
    """Whether the dtype mix says something: MACs in more than one dtype, or in an integer one (a quantized model).
    A model all in one float dtype shows it on the `inputs` and `assumes` rows already."""
    return len(macs_by_dtype) > 1 or any(not d.startswith(("float", "bfloat")) for d in macs_by_dtype)


def _repeat_of(analysis):
    """The analysis's extrapolation (`Analysis.repeat` or `Analysis.steps`), or None."""
    return getattr(analysis, "repeat", None) or getattr(analysis, "steps", None)


def _kernel_line(k, repeat=None) -> str:
    """What eager PyTorch launches, beside the Relax ops: '121 (91 views free, 1 fused attention), 180.2 MiB moved';
    with layers extrapolated (`repeat`), the whole model's launches, then the listed 2-layer graph's line."""
    if repeat is not None:
        listed = "layers 1-2" if hasattr(repeat, "layers") else f"{repeat.sampled[-1]} steps"
        return f"{repeat.kernels:,} launched; {listed} listed: {_kernel_line(k)}"
    roles = k.by_role
    parts = [
        f"{roles[r]} {one if roles[r] == 1 else many}"
        for r, one, many in (("view", "view free", "views free"), ("fused", "op fused", "ops fused"))
        if roles.get(r)
    ]
    att = sum(k.attention.values())
    if att:
        parts.append(f"{att} attention kernel{'s' if att > 1 else ''} ({', '.join(sorted(k.attention))})")
    return f"{k.kernels:,}" + (f" ({'; '.join(parts)})" if parts else "") + f", {mib(k.bytes_kernels)} moved"


def _folded_note(report) -> str:
    """The operators line's note on the ops left out of the count (on weights alone, folded): their indices still
    number the whole graph, so a table's index can be above the count."""
    if _repeat_of(report.analysis) is not None:  # (the count covers every layer or step, the ops a few of them)
        return ""
    folded = sum(1 for c in report.analysis.ops if c.folded)
    return f"; {folded:,} more on weights alone, folded" if folded else ""


def basis_text(basis: dict) -> str:
    """One line on what a prediction rests on (`Prediction.basis`)."""
    if not basis:
        return "?"
    whole = basis.get("whole_model")
    if whole == "measured" and basis.get("whole_model_training"):
        head = f"a GraphSAGE trained on {basis['whole_model_training']}"
    elif whole == "measured":
        head = "whole-model measurements of this GPU"
    elif whole == "transferred":
        head = f"whole-model measurements of {basis.get('whole_model_device')}, transferred"
    elif basis.get("whole_model_fallback"):
        head = "no whole-model measurements (the trained predictor's training graphs are too far from this one)"
    elif basis.get("whole_model_note"):  # why no trained predictor answers
        head = f"no whole-model measurements; {basis['whole_model_note']}"
    else:
        head = "no whole-model measurements"
    share = basis.get("kernel_time_share") or {}
    parts = [
        f"{share.get(key, 0.0):.0%} {what}"
        for key, what in (
            ("fitted_on_this_gpu", "fitted on this GPU"),
            ("fitted_on_other_gpus", "on other GPUs"),
            ("calibrated", "calibrated to one figure"),
            ("assumed", "assumed"),
        )
        if share.get(key, 0.0) >= 0.005
    ]
    gpus = ", ".join(basis.get("kernel_measured_on") or [])
    where = f"kernels measured on {gpus}" if gpus else "no kernel of it fitted on measurements"
    return f"{head}; kernel time: {', '.join(parts) or 'none'} ({where})"


def assumes_text(runtime: dict) -> str:
    """What a prediction assumes runs the model (its `runtime` block), in words: the framework, the dtype and
    how float32 convolutions and matmuls run ("eager PyTorch on CUDA, float32 (TF32 convolutions, FP32 matmuls:
    torch defaults)")."""
    dtype = runtime.get("dtype", "?")
    precision = runtime.get("matmul_precision", "highest")
    if dtype == "float32" and runtime.get("tf32_matmul"):
        how = f"TF32 convolutions, TF32 matmuls: torch.set_float32_matmul_precision('{precision}')"
    elif dtype == "float32":
        how = "TF32 convolutions, FP32 matmuls: torch defaults"
    elif runtime.get("tf32_matmul"):
        how = f"tensor cores; matmul precision '{precision}' moves float32 matmuls only"
    else:
        how = "tensor cores"
    host = runtime.get("host_overhead", 1.0)
    on = "" if host == 1.0 else f", on a host dispatching each kernel {host:g}x preflight's launch floor"
    return f"eager PyTorch on CUDA, {dtype} ({how}){on}"


def _prediction(report) -> list[tuple[str, str]]:
    p = report.prediction
    if not p:
        return []

    def iv(value: float, interval, unit: str, fmt: str = ".3g") -> str:
        lo, hi = interval
        f = g3 if fmt == ".3g" else lambda v: f"{v:{fmt}}"
        return f"{f(value)} {unit} ({f(lo)} to {f(hi)})"

    return [
        ("device", f"{p.device} (predictor: {predictor_label(p.predictor)})"),
        ("rests on", basis_text(p.basis)),
        ("assumes", assumes_text(p.runtime)),
        ("latency", iv(p.latency_ms, p.latency_ms_interval, "ms")),
        ("energy", iv(p.energy_j, p.energy_j_interval, "J") + _power_text(p)),
        ("memory", iv(p.memory_mib, p.memory_mib_interval, "MiB", ",.0f") + _tensor_text(p)),
        ("roofline bound", f"{g3(p.roofline_latency_ms)} ms"),
        ("MIG slice", p.mig.summary()),
        ("MIG reason", p.mig.reason),
    ] + ([] if p.mig.largest_batch is None else [("MIG largest batch", p.mig.largest_batch.summary(p.mig.profile))])


def _power_text(p) -> str:
    """The average power and busy shares of an estimate (docs/power-and-memory.md); "" with a trained predictor."""
    if p.power_w is None:
        return ""
    s = p.power_shares or {}
    return (
        f" at {p.power_w:.0f} W average ({s.get('compute', 0):.0%} of the time compute-bound, "
        f"{s.get('memory', 0):.0%} memory-bound, {s.get('gap', 0):.0%} at the launch floor)"
    )


def _tensor_text(p) -> str:
    """The tensor peak beside the predicted nvidia-smi total, and the memory MIG fit is decided on where the caching
    allocator's giving back makes it less than the interval's top."""
    out = ""
    if p.memory_tensor_peak_mib is not None:
        out = f"; weights + peak activations alone {p.memory_tensor_peak_mib:,.0f} MiB"
    fit = getattr(p, "memory_fit_mib", None)
    if fit is not None and fit < p.memory_mib_interval[1]:
        out += f"; runs in {fit:,.0f} MiB at most where memory is short (the allocator gives cached segments back)"
    return out


def _text_table(header: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    """Aligned plain-text columns: the header, a rule, the rows (`right`: right-aligned column indexes)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(r: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()

    return [fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)]


# What each row of the text and Markdown views means (`--explain`).
EXPLAIN: tuple[tuple[str, str], ...] = (
    ("model", "the model's name, and the route it was read by (framework: the file or zoo name)"),
    ("inputs", "each input's name, shape and dtype, as analysed (after --batch, --input and --dtype)"),
    (
        "computes in",
        "the dtype most of the graph's multiply-add operators compute in (the model's own, or --dtype's); an LLM "
        "config's torch_dtype counts, so `predict` and `llm` of one model may differ here",
    ),
    (
        "FLOPs",
        "floating-point operations of one forward pass: 2 per multiply-accumulate for conv, matmul and "
        "attention; a small documented constant per element for the other ops (softmax 5, GELU 5, add 1, ...)",
    ),
    ("MACs", "multiply-accumulates of conv, matmul and attention (FLOPs = 2 x MACs for those ops)"),
    (
        "MACs by dtype",
        "the share of the MACs computed in each dtype: the operands' dtype; int8 counts int8 and uint8 operands "
        "(quantized models: an integer conv or matmul accumulating in int32 runs on int8 tensor cores); shown "
        "when the MACs are not all in one float dtype (the JSON report always has it)",
    ),
    (
        "params",
        "elements of every weight tensor the graph reads: learnable parameters and constant buffers such "
        "as batch-norm statistics; the MiB figure is their size at the model's dtype. Routes can differ: an ONNX "
        "file counts its initializers, and exporters merge identical constants, fold batch norm into "
        "convolutions or store computed tables (rotary, masks), so the same model may show other counts as "
        "ONNX than as nn.Module or .pt2",
    ),
    (
        "peak activations",
        "the largest total size of intermediate tensors alive at once during one forward pass "
        "(liveness over the execution order), weights not included",
    ),
    (
        "bytes read / written",
        "memory traffic of every operator of the Relax graph: its inputs and weights read, "
        "its outputs written, at their dtypes (views and fusion in eager PyTorch can move less)",
    ),
    (
        "operators",
        "operators of the Relax graph that run (ops on weights alone are folded ahead of time and left "
        "out); data-flow edges are producer -> consumer pairs",
    ),
    (
        "CUDA kernels",
        "the kernels eager PyTorch launches for the graph on a CUDA GPU, what the prediction costs: views launch "
        "nothing, some ops fuse into one kernel (a bias into its matmul, attention into one SDPA kernel, with the "
        "backend torch picks), and the bytes those kernels read and write (docs/execution-model.md)",
    ),
    (
        "unsupported",
        "operators with no cost rule, with their counts: they count 0 FLOPs and bytes (`--strict` fails instead)",
    ),
    (
        "device",
        "the GPU predicted for, and the predictor: a trained one (name@version) or the kernel model (the estimate; "
        '"roofline" in the JSON)',
    ),
    (
        "latency / energy / memory",
        "the point prediction for one forward pass, and in brackets an interval: "
        "the kernel model's interval runs from each kernel's roofline time or half its launch "
        "floor, whichever is larger (a host that dispatches twice as fast), to 2x the estimate: assumptions, not "
        "calibrated on whole-model measurements; a trained predictor's is its calibrated 90% interval "
        "(transferred from another GPU: that GPU's interval, scaled); memory is device memory in MiB as nvidia-smi "
        "counts it: the CUDA context, library workspaces and the caching allocator's reserve included",
    ),
    (
        "rests on",
        "what the prediction rests on: whole-model measurements of this GPU (a trained predictor), of another "
        "GPU (transferred by the kernel model's ratio of the two GPUs), or none; and the share of the kernel "
        "model's time whose parameters were fitted on single-kernel measurements of this GPU, of other GPUs "
        "(carried over through the datasheet peaks), calibrated to one published or measured figure, or assumed "
        "from another kernel kind or dtype (docs/kernel-model.md); for the kernel model, why no trained predictor "
        "answers (none for this GPU, one held back by its evaluation, `--predictor kernel`)",
    ),
    (
        "assumes",
        "what the prediction takes to run the model: eager PyTorch on CUDA in this dtype; float32 convolutions on "
        "TF32 tensor cores (torch's default), float32 matmuls on FP32 CUDA cores (torch's default, "
        "--matmul-precision highest) or on TF32 tensor cores (--matmul-precision high or medium, "
        "torch.set_float32_matmul_precision)",
    ),
    ("roofline bound", "the fastest the graph can run: each op at the device's peak compute or bandwidth"),
    (
        "MIG slice",
        "the smallest MIG profile whose usable memory holds the upper end of the memory interval plus "
        "5% headroom, with its predicted latency and slowdown against the whole GPU",
    ),
    ("MIG reason", "why that profile: its usable memory against the predicted upper bound, and its latency"),
    (
        "MIG largest batch",
        "with --largest-batch: the largest batch whose upper memory bound plus 5% headroom fits each MIG profile "
        "and the whole GPU, solved from one export with the batch symbolic; with --latency-slo, also the largest "
        "batch predicted within it on each (docs/symbolic.md)",
    ),
)


def _explained(rows: list[str]) -> list[tuple[str, str]]:
    """The EXPLAIN entries of the rows shown (an entry "a / b / c" explains rows a, b and c)."""
    shown = set(rows)
    return [(k, v) for k, v in EXPLAIN if shown & set(k.split(" / ")) or k in shown]


def explain_lines(rows: list[str] | None = None) -> list[str]:
    """The `--explain` footer: what each of `rows` (default: every row there is) means."""
    import textwrap

    entries = EXPLAIN if rows is None else _explained(rows)
    width = max(len(k) for k, _ in entries)
    out = ["what the rows mean:"]
    for k, v in entries:
        wrapped = textwrap.wrap(v, 112 - width)
        out += [f"  {k:<{width}}  {wrapped[0]}"] + [f"  {'':<{width}}  {w}" for w in wrapped[1:]]
    return out


def render_table(report, top: int = 15, explain: bool = False, by_module: int = 0) -> str:
    """Plain-text view for a terminal: totals, the prediction, the costliest operators, and with `by_module` the
    costliest modules at that depth."""
    lines = []
    summary = _summary(report) + _prediction(report)
    width = max(len(k) for k, _ in summary)
    lines += [f"{k:<{width}}  {v}" for k, v in summary]
    header, rows = _rows(report, top)
    if rows:
        right = set(range(5, len(header))) | {0}
        lines += ["", f"costliest {len(rows)} operators by {ranking(report)}:", *_text_table(header, rows, right)]
    if by_module:
        header, rows = _module_rows(report, by_module, top or 15)
        if rows:
            title = f"costliest {len(rows)} modules at depth {by_module} by {ranking(report)}:"
            lines += ["", title, *_text_table(header, rows, set(range(1, len(header))))]
        else:
            deepest = max((len(c.module.split(".")) for c in report.analysis.ops if c.module), default=0)
            lines += [
                "",
                f"modules: no module path is {by_module} levels deep (the deepest: {deepest})"
                if deepest
                else "modules: the model file records no module paths for its operators (a PyTorch model, an ONNX "
                "file from torch.onnx or a TensorFlow model names them)",
            ]
    if report.warnings:
        lines += [""] + [f"warning: {w}" for w in report.warnings]
    if explain:
        lines += ["", *explain_lines([k for k, _ in summary])]
    return "\n".join(lines) + "\n"


def render_markdown(report, top: int = 15, explain: bool = False) -> str:
    """Markdown for `preflight analyze`: a totals table, the costliest operators, the warnings."""
    summary = _summary(report) + _prediction(report)
    secs = [Section("Summary", [Table(["", ""], [[k, v] for k, v in summary])])]
    header, rows = _rows(report, top)
    if rows:
        right = set(range(5, len(header))) | {0}
        secs.append(Section(f"Costliest {len(rows)} operators by {ranking(report)}", [Table(header, rows, right)]))
    if report.warnings:
        secs.append(Section("Warnings", [list(report.warnings)]))
    if explain:
        rows_meant = [list(e) for e in _explained([k for k, _ in summary])]
        secs.append(Section("What the rows mean", [Table(["row", "meaning"], rows_meant)]))
    return markdown_page(f"preflight analysis: {report.model['name']}", secs)[0]


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
        rows.append(
            [
                name,
                si(a.flops),
                mib(a.bytes_read + a.bytes_written),
                mib(a.peak_activation_bytes),
                f"{a.op_count:,}",
                f"{a.tir_calls:,}",
                change,
            ]
        )
    return "\n".join(_text_table(header, rows)) + "\n"


def sections_text(title: str, secs: list[Section]) -> str:
    """A report's sections as plain text for a terminal: aligned tables, paragraphs, bullets (figures left out)."""
    import textwrap

    lines = [title, "=" * len(title)]
    for s in secs:
        lines += ["", s.title, "-" * len(s.title)]
        for b in s.blocks:
            if isinstance(b, Table):
                if b.caption:
                    lines.append(b.caption + ":")
                header = b.header if any(b.header) else None
                if header is None:
                    width = max((len(r[0]) for r in b.rows), default=0)
                    lines += [f"{r[0]:<{width}}  {r[1]}" for r in b.rows]
                else:
                    lines += _text_table(header, b.rows, b.right)
                lines.append("")
            elif isinstance(b, list):
                for x in b:
                    lines += textwrap.wrap(str(x), 118, initial_indent="- ", subsequent_indent="  ")
            elif isinstance(b, str):
                lines += textwrap.wrap(b, 120)
    return "\n".join(lines).rstrip() + "\n"


# ---- the HTML writer ------------------------------------------------------------------------------------------

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
    head = (
        ""
        if not any(t.header)
        else "<tr>" + "".join(f"<th{cls(i)}>{escape(h)}</th>" for i, h in enumerate(t.header)) + "</tr>"
    )
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{escape(c)}</td>" for i, c in enumerate(r)) + "</tr>" for r in t.rows)
    cap = f"<caption>{escape(t.caption)}</caption>" if t.caption else ""
    return f'<div class="table-wrap"><table>{cap}{head}{body}</table></div>'


def html_page(title: str, secs: list[Section]) -> str:
    """A self-contained HTML page: inline CSS and SVG, no scripts, nothing fetched at view time."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
    ]
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


# ---- the Markdown writer --------------------------------------------------------------------------------------


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


def markdown_page(title: str, secs: list[Section], assets: str = "") -> tuple[str, dict[str, str]]:
    """Markdown text, and the SVG files it links (file name -> SVG) to write into the folder `assets`.

    The one Markdown writer: every cell and paragraph goes through `_md_text` (one line, HTML escaped) and
    table cells also escape `|`.
    """
    from urllib.parse import quote

    lines, files = [f"# {_md_text(title)}", ""], {}
    for s in secs:
        lines += [f"## {_md_text(s.title)}", ""]
        for b in s.blocks:
            if isinstance(b, Table):
                lines += _md_table(b)
            elif isinstance(b, Figure):
                files[f"{b.name}.svg"] = b.svg
                lines += [
                    f"![{_md_cell(b.caption)}]({quote(assets)}/{quote(b.name)}.svg)",
                    "",
                    f"*{_md_cell(b.caption)}*",
                    "",
                ]
            elif isinstance(b, list):
                lines += [f"- {_md_text(x)}" for x in b] + [""]
            else:
                lines += [_md_text(b), ""]
    return "\n".join(lines), files


OP_CSV_COLUMNS = (
    "index", "name", "op", "category", "flops", "macs", "bytes_read", "bytes_written", "weight_bytes",
    "output_shape", "output_dtype", "folded", "supported", "time_ms", "compute_bound", "source", "module",
)  # fmt: skip
KERNEL_CSV_COLUMNS = (
    "index", "kind", "op", "ops", "flops", "bytes_read", "bytes_written", "dtype", "time_ms", "compute_bound",
    "timed_by",
)  # fmt: skip


def render_csv(report, what: str = "ops") -> str:
    """One row per operator (`what="ops"`, graph order, folded ones included and marked) or per CUDA kernel of the
    eager kernel view (`"kernels"`), for pandas and spreadsheets. Counts in FLOPs and bytes; shapes as `8x3x224x224`;
    with a prediction, `time_ms` is each one's share of the first device's predicted latency, `compute_bound`
    whether the roofline finds it compute-bound (peak rates, no launch) and, per kernel, `timed_by` the term of the
    kernel model that sets its time: "compute" or "memory" (the larger of its fitted terms) or "launch" (both
    under its launch floor), the classes the energy line's busy shares sum (empty without a prediction)."""
    import csv
    import io

    a = report.analysis
    p = report.predictions[0] if report.predictions else report.prediction
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    if what == "ops":
        times = {}
        if p is not None:
            from predictor.predict import op_times_ms

            times = op_times_ms(a, p)
        out.writerow(OP_CSV_COLUMNS)
        for c in a.ops:
            t = times.get(c.index)
            out.writerow(
                [
                    c.index,
                    c.name,
                    c.op,
                    c.category,
                    c.flops,
                    c.macs,
                    c.bytes_read,
                    c.bytes_written,
                    c.weight_bytes,
                    "x".join(map(str, c.output.shape)) if c.outputs else "",
                    c.output.dtype if c.outputs else "",
                    c.folded,
                    c.supported,
                    f"{t[0]:.6g}" if t else "",
                    t[1] == "compute" if t else "",
                    c.source or "",
                    c.module or "",
                ]  # fmt: skip
            )
        return buf.getvalue()
    if what != "kernels":
        raise ValueError("what is 'ops' or 'kernels'")
    secs = bound = timed_by = None
    if p is not None:
        from predictor.devices import get_device
        from predictor.kernel_model import kernel_arrays, kernel_latency_arrays
        from predictor.power import timed_by as kernel_timed_by
        from predictor.predict import host_overhead_of_prediction, host_times

        tf32, host = bool(p.runtime.get("tf32_matmul", False)), host_overhead_of_prediction(p)

        def times(kernels):
            costed = kernel_latency_arrays(kernel_arrays(kernels), get_device(p.device), tf32_matmul=tf32)
            return host_times(costed, host)

        kt = times(a.kernels)
        whole = times(a.launched_kernels) if a.repeat or a.steps else kt
        scale = p.latency_ms / (float(whole.eager_s.sum()) * 1e3) if float(whole.eager_s.sum()) > 0 else 0.0
        secs, bound = kt.eager_s * 1e3 * scale, kt.compute_bound
        timed_by = kernel_timed_by(kt.compute_s, kt.memory_s, kt.launch_s)
    out.writerow(KERNEL_CSV_COLUMNS)
    for i, k in enumerate(a.kernels):
        out.writerow(
            [
                k.index,
                k.kind,
                k.op,
                " ".join(map(str, k.ops)),
                k.flops,
                k.bytes_read,
                k.bytes_written,
                k.dtype,
                f"{secs[i]:.6g}" if secs is not None else "",
                bool(bound[i]) if bound is not None else "",
                timed_by[i] if bound is not None else "",
            ]  # fmt: skip
        )
    return buf.getvalue()
