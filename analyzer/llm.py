"""`preflight llm`: a decoder LM served with a static KV cache, from its prefill and decode-step graphs.

The model (a zoo decoder, a transformers `config.json`, or a transformers causal-LM `nn.Module`) is built on the
meta device and traced as two steps (`zoo.serving`): a prefill of `batch x prompt` tokens and one decode step of
`batch` new tokens attending to a static cache of `context` slots. Both go through the house path: torch.export,
TVM's importer (`frontends.torch_frontend.import_exported_program`), the passes (`pipeline.analyze_loaded`) and the
predictor (`predictor.predict.predict`, the function `preflight predict` uses). The arithmetic on top (KV-cache
bytes, memory per batch and context, capacity search, the MIG choice) is `predictor.llm`.

Speed without approximation:
- Each step is exported once with a symbolic batch and length, and its graph extracted once with those sizes as
  expressions (`passes.tvm_ir.extract(..., symbolic=True)`, a `passes.symbolic.SymbolicGraph`); each (batch,
  length) it is asked for is that graph evaluated there (`SymbolicGraph.at`: integer arithmetic, no TVM), instead
  of one export per point. Where the graph cannot stay symbolic (a size of another form), the export is bound to
  the point instead (TVM's `bind_symbolic_vars`) and extracted again: the same graph (tests/test_llm.py compares
  the two at three points).
- A decoder whose layers are identical (same parameter shapes, same attention window) is traced at depth 1 and 2.
  Every count of the graph (FLOPs, MACs, bytes, parameters, operators) and every latency of an additive predictor
  (the roofline estimate, a per-kernel time model: sums over operators) is then exactly x(1) + (n - 1)(x(2) - x(1))
  for n layers, and the transient activations (what is live besides the KV cache) peak at depth 2 as at any
  larger depth. `full_depth=True`, a mixed stack, or a trained (not additive) predictor trace all n layers instead.
  tests/test_llm.py checks the extrapolation against full-depth graphs.
- The decode step's transient activations at any (batch, slots) come from four bound graphs: every tensor of one
  decode step holds a batch dimension at most once and a slots dimension at most once, so the live bytes at each
  operator are bilinear in (batch, slots) (`predictor.llm.BilinearTimeline`); the capacity search evaluates that,
  after checking it against the request's own graph.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from passes.analysis import Analysis, Totals, fused_groups
from passes.graph import OpGraph, TensorInfo, dtype_bytes
from passes.memory import Fusion, MemoryProfile, liveness
from predictor import llm as serving
from predictor import serving_engine as engine
from predictor.devices import get_device
from predictor.kernel_model import tf32_matmul_of
from predictor.memory import context_mib, workspace_mib
from predictor.mig import fits as mig_fits
from predictor.predict import Prediction, predictor_info
from predictor.predict import predict as run_predictor

from .errors import AnalysisError, PreflightError, UsageError, one_line
from .frontends.loaded import LoadedModel
from .frontends.specs import MAX_DIM, TOP_LEVEL
from .options import check_devices, check_dtype, check_host_overhead, check_matmul_precision
from .pipeline import Report, analyze_loaded

DEFAULT_DTYPE = "float16"
MAX_CONTEXT_GRID = 131072  # the context sweep stops here by default
MIN_CONTEXT_GRID = 512
_EXAMPLE_BATCH, _EXAMPLE_LENGTH = 3, 19  # example sizes of a symbolic export: unlike any fixed dimension


# ---- the model ------------------------------------------------------------------------------------------------


@dataclass
class LlmModel:
    """A transformers causal LM (on the meta device unless a user passed theirs) and what describes it."""

    lm: object  # transformers PreTrainedModel
    config: object
    name: str
    source: str
    framework: str
    declared_dtype: str | None = None  # zoo ?dtype= or the config's dtype
    defaulted: tuple[str, ...] = ()  # sizes the config file left to transformers' defaults (`defaulted_sizes`)

    def __post_init__(self) -> None:
        # a config may leave a stack empty (an encoder-decoder's), but a served decoder needs a layer and a vocabulary
        for key, what in (
            ("num_hidden_layers", "a served decoder has at least one layer"),
            ("vocab_size", "a language model's tokens come from a vocabulary of at least one"),
        ):
            v = getattr(self.config, key, None)
            if isinstance(v, int) and not isinstance(v, bool) and v < 1:
                raise UsageError(f"{self.source}: {key} = {v}: {what}")

    @property
    def layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def max_positions(self) -> int | None:
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            v = getattr(self.config, key, None)
            if isinstance(v, int) and v > 0:
                return v
        return None


def _declared(config) -> str | None:
    import torch

    # transformers >= 4.56 names it `dtype` (reading `torch_dtype` there warns of its deprecation); older ones
    d = config.dtype if hasattr(config, "dtype") else getattr(config, "torch_dtype", None)
    if isinstance(d, torch.dtype):
        d = str(d).removeprefix("torch.")
    return d if d in ("float16", "bfloat16", "float32") else None


def load_llm(model) -> LlmModel:
    """The causal LM behind `model`: "zoo:NAME[?k=v]", a `config.json` (or a model directory holding one), a
    transformers config object, or a transformers causal-LM `nn.Module`.

    Raises:
        UsageError: not a decoder LM, an unreadable or unsafe config, an unknown zoo name.
    """
    from .frontends.hf_config import build_model, config_path, defaulted_sizes, is_causal_lm, read_config

    if isinstance(model, str) and model.startswith("zoo:"):
        return _load_zoo(model[4:])
    if isinstance(model, str | Path):
        path = Path(model)
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory")
        cfg_path = config_path(path)
        json_file = path / "config.json" if path.is_dir() else path
        if cfg_path is None and json_file.suffix == ".json" and json_file.is_file():
            read_config(json_file)  # a JSON file that is no transformers config: its own reason
        if cfg_path is None:
            raise UsageError(
                f"{path.name}: preflight llm reads zoo:NAME, a transformers config.json or a model directory holding "
                f"one (a .pt2 or .onnx file holds one fixed graph, not the prefill and decode steps)"
            )
        config = read_config(cfg_path)
        lm = build_model(config, causal_lm=True)
        name = f"{config.model_type}:{type(lm).__name__}"
        defaulted = tuple(defaulted_sizes(cfg_path, config))
        return LlmModel(lm, lm.config, name, str(cfg_path), "transformers", _declared(config), defaulted)
    if _is_hf_config(model):
        lm = build_model(model, causal_lm=True)
        name = f"{model.model_type}:{type(lm).__name__}"
        return LlmModel(lm, lm.config, name, f"<{type(model).__name__}>", "transformers", _declared(model))
    import torch

    if isinstance(model, torch.nn.Module):
        if not is_causal_lm(model):
            raise UsageError(
                f"{type(model).__name__} is not a transformers causal LM (a *ForCausalLM model with a .config)"
            )
        return LlmModel(
            model, model.config, type(model).__name__, f"<{type(model).__name__}>", "torch", _declared(model.config)
        )
    raise UsageError(f"cannot serve a {type(model).__name__}: give zoo:NAME, a config.json or a causal-LM nn.Module")


def _is_hf_config(obj) -> bool:
    return type(obj).__module__.startswith("transformers") and hasattr(obj, "model_type") and hasattr(obj, "to_dict")


def _load_zoo(spec: str) -> LlmModel:
    import zoo

    from .frontends.hf_config import is_causal_lm
    from .frontends.zoo_frontend import split_dtype

    plain, dtype = split_dtype(spec)
    try:
        built = zoo.build(plain, device="meta")
    except zoo.ZooError as exc:
        raise UsageError(f"zoo:{spec}: {exc}") from exc
    except Exception as exc:  # a family's builder failed
        raise AnalysisError(f"zoo:{spec}: building the model failed: {one_line(exc)}") from exc
    lm = getattr(built.module, "model", None)
    if lm is None or not is_causal_lm(lm):
        raise UsageError(
            f"zoo:{spec} is not a decoder LM (of the zoo, the llama, mistral, gpt2 and opt families are; a "
            "transformers config.json of any decoder, e.g. Qwen2 or Gemma, works too)"
        )
    declared = str(dtype).removeprefix("torch.") if "dtype=" in spec else None
    return LlmModel(lm, lm.config, built.name, f"zoo:{spec}", "zoo", declared)


# ---- depth: identical layers -----------------------------------------------------------------------------------


def _layer_list(lm, n: int):
    """The ModuleList of the decoder's n layers."""
    import torch

    for _, m in lm.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) == n and n > 0:
            return m
    return None


def _signature(module) -> tuple:
    """A layer's class and its parameters' and buffers' names and shapes. Not their dtypes: the step graphs are
    traced with float32 stand-ins and retargeted to the serving dtype (`StepGraph._export`), and a config that
    declares a dtype (`torch_dtype`) builds its model in it but its rebuild with fewer layers in float32."""
    named = [(k, tuple(v.shape)) for k, v in module.named_parameters()]
    named += [(k, tuple(v.shape)) for k, v in module.named_buffers()]
    return (type(module).__name__, tuple(named))


def identical_layers(lm, layout) -> bool:
    """Every decoder layer has the same parameter shapes and the same attention window."""
    if len(set(layout.windows)) > 1:
        return False
    layers = _layer_list(lm, layout.layers)
    if layers is None:
        return False
    first = _signature(layers[0])
    return all(_signature(m) == first for m in layers)


def truncated(lm, depth: int):
    """The same architecture with its first `depth` decoder layers, on the meta device (weights never allocated)."""
    import torch

    config = copy.deepcopy(lm.config)
    config.num_hidden_layers = depth
    for key in ("layer_types",):
        v = getattr(config, key, None)
        if isinstance(v, list):
            setattr(config, key, v[:depth])
    with torch.device("meta"):
        probe = type(lm)(config)
    return probe.eval()


# ---- one step graph --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphPoint:
    """One step graph bound to one (batch, length): its analysis and its transient activations."""

    analysis: Analysis
    transient_bytes: int  # peak live bytes besides the KV cache (cache inputs and the entries to store left out)
    timeline: tuple[int, ...]  # live bytes at each operator, same exclusions
    kv_input_bytes: int  # bytes of the cache tensors the graph reads (decode)
    warnings: tuple[str, ...] = ()


def transient(
    graph: OpGraph, cache_values: set[int], fused: Fusion | Sequence[Sequence[int]] = ()
) -> tuple[int, tuple[int, ...]]:
    """Peak and timeline of the live activations of `graph` without the KV cache: the cache inputs count 0 bytes
    (they are the resident cache, counted apart) and only the first output (the logits) is kept live to the end
    (the returned keys and values are written into the resident cache). `fused`: the kernels that run several ops
    at once (`passes.analysis.fused_groups`; a decomposed attention run as one kernel allocates no scores)."""
    sources = [
        replace(s, tensor=TensorInfo((0,), s.tensor.dtype)) if s.value in cache_values else s for s in graph.sources
    ]
    g = OpGraph(ops=graph.ops, sources=sources, outputs=graph.outputs[:1], value_producer=graph.value_producer)
    prof = liveness(g, fused)
    return prof.peak_bytes, prof.timeline


class StepGraph:
    """A prefill or decode step of one model at one depth, exported with symbolic sizes, bound per point.

    Prefill inputs: input_ids (batch, prompt). Decode inputs: input_ids (batch, 1) and per layer the key and value
    cache (batch, kv_heads, slots, head_dim), slots = min(context, window).
    """

    evaluate = True  # False: bind every point in TVM and extract it again (the slower path; the same graph)

    def __init__(self, kind: str, lm, layout, dtype: str, *, name: str, source: str, framework: str):
        if kind not in ("prefill", "decode"):
            raise ValueError(kind)
        self.kind, self.lm, self.layout, self.dtype = kind, lm, layout, dtype
        self.name, self.source, self.framework = name, source, framework
        self._symbolic: dict[tuple, tuple | None] = {}  # segment -> (mod, n_inputs, batch sym, length syms) | None
        # segment -> its SymbolicGraph, or None where extraction could not keep the sizes symbolic (bind instead)
        self._graphs: dict[tuple, object | None] = {}
        self._points: dict[tuple[int, int], GraphPoint] = {}
        self.warnings: list[str] = []

    # -- export

    def _module(self, context: int | None):
        from zoo.serving import DecodeStep, PrefillStep

        if self.kind == "prefill":
            return PrefillStep(self.lm, self.layout)
        return DecodeStep(self.lm, context, layout=self.layout)

    def _inputs(self, batch: int, length: int):
        from zoo.serving import decode_inputs, prefill_inputs

        if self.kind == "prefill":
            return prefill_inputs(batch, length, vocab=self.layout.vocab, device="meta")
        return decode_inputs(self.layout, batch, length, device="meta")

    def _export(self, batch: int, length: int, dynamic: tuple | None):
        """(Relax module, number of ops, unconverted ops, number of inputs, op sources, op marks) of the step at
        (batch, length), symbolic when `dynamic`; op sources: each Relax variable's module path in the transformers
        model (`model.layers.0.self_attn.q_proj`, as `preflight analyze` names a model's operators); op marks: the
        library calls eager runs ops in and the copies it makes where TVM passes a value through, and in a half serving
        dtype the float dtype of each op the model's own casts change (`LoadedModel.op_calls`, `.op_copies`,
        `.op_dtypes`: BLOOM's baddbmm, the cache's `.contiguous()`, Llama's RMSNorm in float32)."""
        import torch

        from passes.tvm_boot import prime_backtraces

        from .frontends.torch_frontend import (
            _as_half,
            _below,
            _half_node_dtypes,
            _ParamsAsInputs,
            import_exported_program,
        )

        prime_backtraces()  # TVM's first native backtrace, on the second core while torch exports (passes.tvm_boot)
        module = self._module(None if (dynamic is not None or self.kind == "prefill") else length)
        inputs = self._inputs(batch, length)
        wrapper, weights = _ParamsAsInputs.wrap(module, len(inputs))
        # float32 stand-ins on the meta device: a user's real weights are never read or copied, and the graph is
        # retargeted to the serving dtype after import (as every float32-imported model is)
        weights = [
            torch.empty(w.shape, dtype=torch.float32 if w.is_floating_point() else w.dtype, device="meta")
            for w in weights
        ]
        shapes = None if dynamic is None else ((*dynamic, *[None] * len(weights)),)
        try:
            with torch.inference_mode(False), torch.no_grad():
                ep = torch.export.export(wrapper, (*inputs, *weights), dynamic_shapes=shapes)
        except PreflightError:
            raise
        except Exception as exc:  # torch.export raises many error types
            raise AnalysisError(f"torch.export could not export the {self.kind} step: {one_line(exc)}") from exc
        node_dtypes = {}
        # (on the meta device, as the float32 stand-ins: a user's module with real weights is paired the same way)
        if self.dtype in ("float16", "bfloat16") and (half := _as_half(module, inputs, self.dtype, "meta")) is not None:
            node_dtypes = _half_node_dtypes(ep, *half, None if dynamic is None else list(dynamic))  # own casts
        users = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
        params = [n for n, _ in module.named_parameters()] + [n for n, _ in module.named_buffers()]
        sources: dict[str, str] = {}
        calls: dict[str, str] = {}
        copies: dict[str, str] = {}
        dtypes: dict[str, str] = {}
        names = dict(zip(users[len(inputs) :], params, strict=False))  # weight placeholders -> parameter names
        mod, n, missing = import_exported_program(
            ep,
            n_inputs=len(inputs),
            sources=sources,
            weight_names=names,
            calls=calls,
            copies=copies,
            node_dtypes=node_dtypes,
            dtypes=dtypes,
        )
        # the step module's causal LM (`lm`): its module paths as the model names them (`transformer.h.0.mlp.c_fc`)
        sources = {k: TOP_LEVEL if v in ("", "inner", "lm") else _below(v, "lm") for k, v in sources.items()}
        return mod, n, missing, len(inputs), sources, (calls, copies, dtypes)

    def _dynamic_spec(self, lo: int, hi: int) -> tuple:
        from torch.export import Dim

        batch = Dim(f"{self.kind}_batch", min=1, max=MAX_DIM - 1)
        if self.kind == "prefill":
            return ({0: batch, 1: Dim("prompt", min=lo, max=hi)},)
        by_window = {}
        spec = [{0: batch}]
        for w in self.layout.windows:
            if w not in by_window:
                top = hi if w is None else min(hi, w)
                by_window[w] = Dim("slots" if w is None else f"slots_w{w}", min=min(lo, top), max=top)
            spec += [{0: batch, 2: by_window[w]}] * 2
        return tuple(spec)

    def _segment(self, length: int, max_length: int) -> tuple[int, int]:
        """The range of lengths one symbolic export covers: a prefill longer than the smallest window keeps only the
        window's entries (another graph); everything else is one range."""
        w = min((x for x in self.layout.windows if x is not None), default=None)
        if self.kind == "prefill" and w is not None:
            return (2, w) if length <= w else (w + 1, max(max_length, w + 1))
        return (2, max(max_length, 2))

    def _symbolic_graph(self, key: tuple, mod, n_inputs: int, symbols: Sequence[str]):
        """The segment's export extracted once with its sizes symbolic (`passes.symbolic.SymbolicGraph`), memoised;
        None when a dimension is not an expression of the input sizes `symbols` (then each point is bound)."""
        if key not in self._graphs:
            from passes import tvm_ir
            from passes.symbolic import SymbolicError, SymbolicGraph

            try:
                graph = tvm_ir.extract(mod, n_inputs=n_inputs, symbolic=True)
                # every size is checked by the segment (`_segment`): the graph holds at any value of each symbol
                self._graphs[key] = SymbolicGraph(graph, ranges=dict.fromkeys(symbols, (0, None)))
            except (tvm_ir.IRError, SymbolicError):
                self._graphs[key] = None
        return self._graphs[key]

    def _bound(self, batch: int, length: int, max_length: int):
        """(Relax module, n_inputs, unconverted ops, OpGraph at (batch, length) or None, op sources, op marks): the
        symbolic export and its graph evaluated at the point when the graph stays symbolic, else the export bound to
        the point (graph None: extract the module); a point outside a symbolic segment is exported on its own."""
        from passes import tvm_ir

        lo, hi = self._segment(length, max_length)
        key = (lo, hi)
        if length >= 2 and lo < hi and key not in self._symbolic:
            ex = max(lo, min(_EXAMPLE_LENGTH, hi))
            try:
                mod, n, missing, n_inputs, sources, marks = self._export(_EXAMPLE_BATCH, ex, self._dynamic_spec(lo, hi))
                self._symbolic[key] = (mod, n_inputs, missing, sources, marks)
            except PreflightError as exc:  # fall back to one export per point (slower, same graph)
                self._symbolic[key] = None
                self.warnings.append(f"{self.kind} step: symbolic export failed ({exc}); exporting each point")
        sym = self._symbolic.get(key) if length >= 2 and lo < hi else None
        if sym is None:
            mod, n, missing, n_inputs, sources, marks = self._export(batch, length, None)
            return mod, n_inputs, missing, None, sources, marks
        mod, n_inputs, missing, sources, marks = sym
        dims = [d for _, d, _ in tvm_ir.input_dims(mod, n_inputs)]
        values: dict[str, int] = {}
        for i, d in enumerate(dims):
            if i == 0 and self.kind == "prefill":
                values.update({str(d[0]): batch, str(d[1]): length})
            elif i == 0:
                values[str(d[0])] = batch
            else:  # decode cache input i: layer (i - 1) // 2
                values[str(d[2])] = self.layout.slots((i - 1) // 2, length)
        values = {k: v for k, v in values.items() if not k.lstrip("-").isdigit()}
        if self.evaluate and (sg := self._symbolic_graph(key, mod, n_inputs, sorted(values))) is not None:
            return mod, n_inputs, missing, sg.at(values), sources, marks
        try:
            return tvm_ir.bind_symbolic_dims(mod, values), n_inputs, missing, None, sources, marks
        except Exception as exc:
            raise AnalysisError(f"could not bind the {self.kind} step's sizes: {one_line(exc)}") from exc

    # -- points

    def point(self, batch: int, length: int, max_length: int) -> GraphPoint:
        """The step at `batch` sequences and `length` tokens (prompt, or context for decode), memoised."""
        key = (batch, length)
        if key in self._points:
            return self._points[key]
        mod, n_inputs, missing, graph, sources, (calls, copies, dtypes) = self._bound(batch, length, max_length)
        loaded = LoadedModel(
            mod=mod,
            framework=self.framework,
            name=self.name,
            source=self.source,
            n_inputs=n_inputs,
            unconverted=list(missing),
            input_names=self._input_names(),
            op_sources=sources,
            op_calls=calls,
            op_copies=copies,
            op_dtypes=dtypes,
        )
        report = analyze_loaded(loaded, dtype=self.dtype, graph=graph)
        graph = report.analysis.graph
        inputs = graph.inputs
        cache = {s.value for s in inputs[1:]} if self.kind == "decode" else set()
        peak, timeline = transient(graph, cache, fused_groups(report.analysis.kernel_view, graph))
        kv = sum(s.tensor.nbytes for s in inputs[1:]) if self.kind == "decode" else 0
        warnings = tuple(w for w in report.warnings if not w.startswith("analysed as if computed"))
        pt = GraphPoint(report.analysis, peak, timeline, kv, warnings)
        self._points[key] = pt
        return pt

    def _input_names(self) -> tuple[str, ...]:
        if self.kind == "prefill":
            return ("input_ids",)
        names = ["input_ids"]
        for i in range(self.layout.layers):
            names += [f"past_key_{i}", f"past_value_{i}"]
        return tuple(names)


# ---- one step at every depth: extrapolated counts and predictions -----------------------------------------------


def _extrapolate(x1: float, x2: float, n: int) -> float:
    """x at n identical layers from x at 1 and 2: x1 + (n - 1) (x2 - x1)."""
    return x1 + (n - 1) * (x2 - x1)


_ADDITIVE = ("flops", "macs", "params", "param_bytes", "bytes_read", "bytes_written", "op_count")


@dataclass(frozen=True)
class StepCost:
    """One step (prefill or decode) at one (batch, length), for the whole model.

    Counts are the n-layer graph's (extrapolated exactly from depth 1 and 2 when the layers are identical);
    `activation_bytes` is the peak of the transient activations (besides the KV cache); latencies are predicted
    per device: the whole GPU (`latency_ms`) and each MIG profile (`slice_ms`).
    """

    kind: str
    batch: int
    length: int  # prompt tokens (prefill) or context tokens (decode)
    totals: dict  # flops, macs, params, param_bytes, bytes_read, bytes_written, op_count
    activation_bytes: int
    latency_ms: dict[str, float]
    roofline_ms: dict[str, float]
    slice_ms: dict[str, dict[str, float]]
    predictor: dict[str, str]
    basis: dict[str, dict] = field(default_factory=dict)  # per device: what the latency rests on (Prediction.basis)
    energy_j: dict[str, float] = field(default_factory=dict)  # per device: the step's predicted energy (J)
    # vllm: per device whose KV pool holds fewer than `batch`, the sequences its latency and energy are of
    running: dict[str, int] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        """Tokens this step processes: batch x prompt (prefill) or batch (decode)."""
        return self.batch * (self.length if self.kind == "prefill" else 1)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "batch": self.batch,
            "length": self.length,
            **{k: int(v) for k, v in self.totals.items()},
            "activation_bytes": self.activation_bytes,
            "latency_ms": dict(self.latency_ms),
            "roofline_latency_ms": dict(self.roofline_ms),
            "slice_latency_ms": {d: dict(v) for d, v in self.slice_ms.items()},
            "predictor": dict(self.predictor),
            "basis": {d: dict(b) for d, b in self.basis.items()},
            "energy_j": dict(self.energy_j),
        } | ({"running": dict(self.running)} if self.running else {})


class Step:
    """A step of the whole model: graphs at the traced depths, predictions per device, memoised per point."""

    def __init__(
        self,
        kind: str,
        graphs: dict[int, StepGraph],
        layers: int,
        devices: Sequence[str],
        max_length: int,
        matmul_precision: str = "highest",
        host_overhead: float = 1.0,
    ):
        self.kind, self.graphs, self.layers, self.devices, self.max_length = kind, graphs, layers, devices, max_length
        self.matmul_precision = matmul_precision  # torch.set_float32_matmul_precision's setting (`predict`)
        self.host_overhead = host_overhead  # the host's dispatch time per kernel / the launch floor (`predict`)
        self._costs: dict[tuple[int, int], StepCost] = {}
        self.predict_warnings: list[str] = []

    @property
    def depths(self) -> tuple[int, ...]:
        return tuple(sorted(self.graphs))

    def point(self, depth: int, batch: int, length: int) -> GraphPoint:
        return self.graphs[depth].point(batch, length, self.max_length)

    def _combine(self, values: dict[int, float]) -> float:
        if len(values) == 1:
            return next(iter(values.values()))
        return _extrapolate(values[1], values[2], self.layers)

    def activation_bytes(self, batch: int, length: int) -> int:
        """Peak transient activations, from the deepest graph traced: at depth 2 they are those of any deeper stack
        of identical layers (a layer fed by a layer, not by the embedding, is the repeating pattern)."""
        return self.point(max(self.depths), batch, length).transient_bytes

    def _basis(self, preds: dict[int, Prediction]) -> dict:
        """The basis of the n-layer step: at one traced depth its prediction's; from depths 1 and 2, the kernel
        time of each basis extrapolated like the latency (share x latency per depth), then made shares again."""
        first = next(iter(preds.values())).basis
        if len(preds) == 1 or not first:
            return dict(first)
        times = {}
        for key in first["kernel_time_share"]:
            by_depth = {d: p.basis["kernel_time_share"][key] * p.latency_ms for d, p in preds.items()}
            times[key] = max(0.0, self._combine(by_depth))
        total = sum(times.values())
        measured = sorted({g for p in preds.values() for g in p.basis["kernel_measured_on"]})
        share = {k: round(v / total, 4) if total > 0 else 0.0 for k, v in times.items()}
        return {**first, "kernel_time_share": share, "kernel_measured_on": measured}

    def cost(self, batch: int, length: int) -> StepCost:
        key = (batch, length)
        if key in self._costs:
            return self._costs[key]
        points = {d: self.point(d, batch, length) for d in self.depths}
        totals = {
            k: int(round(self._combine({d: getattr(p.analysis.totals, k) for d, p in points.items()})))
            for k in _ADDITIVE
        }
        lat, roof, slices, names, bases, energy = {}, {}, {}, {}, {}, {}
        for dev in self.devices:
            preds: dict[int, Prediction] = {}
            for d, p in points.items():
                pred, warnings = run_predictor(
                    p.analysis, dev, matmul_precision=self.matmul_precision, host_overhead=self.host_overhead
                )
                preds[d] = pred
                self.predict_warnings.extend(w for w in warnings if w not in self.predict_warnings)
            lat[dev] = self._combine({d: p.latency_ms for d, p in preds.items()})
            energy[dev] = max(0.0, self._combine({d: p.energy_j for d, p in preds.items()}))
            roof[dev] = self._combine({d: p.roofline_latency_ms for d, p in preds.items()})
            profiles = next(iter(preds.values())).mig.latency_ms or {}
            slices[dev] = {q: self._combine({d: p.mig.latency_ms[q] for d, p in preds.items()}) for q in profiles}
            names[dev] = next(iter(preds.values())).predictor
            bases[dev] = self._basis(preds)
        cost = StepCost(
            self.kind,
            batch,
            length,
            totals,
            self.activation_bytes(batch, length),
            lat,
            roof,
            slices,
            names,
            bases,
            energy,
        )
        self._costs[key] = cost
        return cost


FORMULA_POINTS = 5  # consecutive sample points of the length (and one far one): fits up to degree 3, checked at 2+
FORMULA_BATCH_POINTS = 3  # of the batch: 1, 2, 3 and 41, a degree up to 1 (a step is linear in its sequences)
FORMULA_TOTALS = ("flops", "macs", "bytes_read")
FORMULA_METHOD = (
    "each count of the whole model (extrapolated from the traced depths as the step's own totals are) is evaluated "
    "from the step's symbolic graph on the grid of sample points and fitted by exact rational interpolation (the "
    "lowest degree, at most 3, through the first ones), accepted only if it equals the count at every other point"
)


def _count(pt: GraphPoint, key: str) -> int:
    return pt.kv_input_bytes if key == "kv_cache_bytes" else getattr(pt.analysis.totals, key)


def _formula_block(
    length: str, lo: int, hi: int, counts: Callable[[int, int], dict[str, int]], keys: Sequence[str], method: str
) -> dict:
    """The formulas block (`analyze --symbolic`'s keys, schema `$defs/symbolic`) of `keys`' counts, each an exact
    polynomial of the batch and `length` fitted with `passes.symbolic.fit_grid` on the grid of batch 1, 2, 3, 41
    and `length` lo..lo+4, lo+40 (within hi); `counts(batch, n)` gives the counts at one point. A count that no
    polynomial fits (checked at the spare points) is null and "exact" false."""
    from passes.symbolic import fit_grid, sample_points

    from .symbolic import _formula

    top = MAX_DIM - 1
    points = {"batch": sample_points(1, top, FORMULA_BATCH_POINTS), length: sample_points(lo, hi, FORMULA_POINTS)}
    values: dict[str, dict[tuple, int]] = {k: {} for k in keys}
    for b in points["batch"]:
        for n in points[length]:
            at = counts(b, n)
            for k in keys:
                values[k][(b, n)] = at[k]
    axes = [points["batch"], points[length]]
    totals = {k: fit_grid(("batch", length), axes, values[k]) for k in keys}
    return {
        "symbols": {"batch": {"min": 1, "max": top}, length: {"min": lo, "max": hi}},
        "method": method,
        "points": points,
        "exact": all(p is not None for p in totals.values()),
        "totals": {k: _formula(p) for k, p in totals.items()},
        "ops": [],
    }


def context_formulas(step: Step) -> tuple[dict | None, str | None]:
    """(the step's counts as exact polynomials of the batch and the prompt (prefill) or context (decode), or None;
    why not). The block has the keys of `analyze --symbolic`'s (`analyzer.symbolic.symbolic_json`, schema
    `$defs/symbolic`): totals "flops", "macs", "bytes_read" per step and, for decode, "kv_cache_bytes" (the cache
    inputs). Every sample point is the step's graph evaluated from its one symbolic export (`StepGraph.point`),
    so the formulas cost no export; the range of the length ends at the smallest sliding window (past it the
    windowed layers' slots stop growing: another polynomial). None when a step has no symbolic graph."""
    length = "prompt" if step.kind == "prefill" else "context"
    first = step.graphs[min(step.depths)]
    lo, hi = first._segment(2, step.max_length)
    windows = [w for w in first.layout.windows if w is not None]
    if windows:
        hi = min(hi, min(windows))
    if hi - lo < FORMULA_POINTS:
        return None, f"the {length} range {lo} to {hi} is too short to fit a formula"
    for g in step.graphs.values():
        g.point(1, lo, step.max_length)
        key = g._segment(lo, step.max_length)
        if not g.evaluate or g._graphs.get(key) is None:
            return None, f"the {step.kind} step has no symbolic graph (each point is exported on its own)"
    keys = (*FORMULA_TOTALS, *(("kv_cache_bytes",) if step.kind == "decode" else ()))

    def counts(b: int, n: int) -> dict[str, int]:
        pts = {d: step.point(d, b, n) for d in step.depths}
        return {k: step._combine({d: _count(p, k) for d, p in pts.items()}) for k in keys}

    return _formula_block(length, lo, hi, counts, keys, FORMULA_METHOD), None


ENGINE_FORMULA_METHOD = (
    "each count of the engine's step of the whole model (predictor.serving_engine.step_totals: its kernels from the "
    "config's sizes, tensor parallel 1) is evaluated on the grid of sample points and fitted by exact rational "
    "interpolation (the lowest degree, at most 3, through the first ones), accepted only if it equals the count at "
    "every other point"
)


def engine_formulas(
    arch: engine.Arch, kv: serving.KvCacheSpec, dtype: str, max_length: int
) -> tuple[dict[str, dict], list[str]]:
    """({"prefill": block, "decode": block}, why a step has none): the vllm runtime's counts as exact polynomials of
    the batch and the prompt (prefill: `batch` prompts at once) or the live context (decode), as `context_formulas`
    gives the eager runtime's: totals "flops", "macs", "bytes_read" (whole model) and, for decode, "kv_cache_bytes"
    (the tokens' K and V, `kv.bytes`; the engine allocates whole blocks of them). Flash attention counts half the
    causal score matrix (prompt^2 / 2 pairs), the eager runtime's fused op the whole. The length runs from 1 to the
    smallest sliding window (past it a windowed layer's cache, and where every layer has the window its attention,
    stop growing: another polynomial) or `max_length` (the model's positions or the request's longest), whichever is
    less. A mixture of experts' weight bytes follow the expected number of
    experts the tokens touch, no polynomial: that count is null."""
    hi = min([max_length, *(w for w in kv.windows if w is not None)])
    if hi - 1 < FORMULA_POINTS:
        return {}, [f"no formulas of the engine's steps: the length range 1 to {hi} is too short to fit a formula"]
    out = {}
    for kind, length in (("prefill", "prompt"), ("decode", "context")):
        keys = (*FORMULA_TOTALS, *(("kv_cache_bytes",) if kind == "decode" else ()))

        def counts(b: int, n: int, kind: str = kind) -> dict[str, int]:
            tot = engine.step_totals(arch, b, n, prefill=kind == "prefill", dtype=dtype)
            return tot | {"kv_cache_bytes": kv.bytes(b, n)}

        out[kind] = _formula_block(length, 1, hi, counts, keys, ENGINE_FORMULA_METHOD)
    return out, []


# ---- the whole analysis --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceServing:
    """The stated request on one device: latencies, throughput, memory, where it fits, and the MIG choice."""

    device: str
    predictor: str
    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    prefill_tokens_per_s: float | None
    decode_tokens_per_s: float | None
    output_tokens_per_s: float | None
    memory: serving.ServingMemory
    fits: dict[str, bool]  # target (MIG profile or "full GPU") -> the request fits
    sweep: list[dict]  # per context: ttft_ms, tpot_ms, decode tokens/s
    capacity: serving.Capacity
    recommendation: serving.LlmRecommendation
    basis: dict = field(default_factory=dict)  # {"ttft": the prefill's basis, "tpot": the decode step's}
    energy_per_token_j: float | None = None  # energy per output token on one GPU (J), power model x time
    avg_power_w: float | None = None  # average board power of one GPU while decoding (W)
    engine: dict | None = None  # --runtime vllm: the engine's step breakdown and memory plan (docs/llm-serving.md)

    def to_json(self) -> dict:
        extra = {} if self.engine is None else {"engine": self.engine}
        return {
            "device": self.device,
            "predictor": self.predictor,
            "basis": {k: dict(v) for k, v in self.basis.items()},
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "e2e_ms": self.e2e_ms,
            "prefill_tokens_per_s": self.prefill_tokens_per_s,
            "decode_tokens_per_s": self.decode_tokens_per_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "memory": self.memory.to_json(),
            "fits": dict(self.fits),
            "sweep": [dict(p) for p in self.sweep],
            "capacity": self.capacity.to_json(),
            "recommendation": self.recommendation.to_json(),
            "energy_per_token_j": self.energy_per_token_j,
            "avg_power_w": self.avg_power_w,
            **extra,
        }


@dataclass
class LlmServing:
    """Everything `preflight llm` says about serving one model (the report's `llm` block)."""

    model: dict  # architecture summary
    dtype: str
    kv: serving.KvCacheSpec
    batch: int
    prompt: int
    generate: int
    concurrency: int
    context: int  # of the recommendation
    params: int
    param_bytes: int
    prefill: StepCost
    decode: StepCost
    devices: list[DeviceServing]
    contexts: tuple[int, ...]
    depth: dict  # how the graphs were traced
    assumptions: list[str] = field(default_factory=list)
    runtime: dict = field(default_factory=lambda: {"name": "eager"})  # --runtime and its settings
    # {"prefill": block, "decode": block} (`context_formulas`; vllm: `engine_formulas`): costs as formulas of batch and
    # prompt/context
    formulas: dict | None = None

    @property
    def request_context(self) -> int:
        """Cache slots of the stated request: prompt + generated tokens."""
        return self.prompt + self.generate

    def to_json(self) -> dict:
        c = self.request_context
        return {
            "model": dict(self.model),
            "dtype": self.dtype,
            "request": {"batch": self.batch, "prompt": self.prompt, "generate": self.generate, "context": c},
            "kv_cache": {
                **self.kv.to_json(),
                "bytes_per_sequence": self.kv.bytes_per_sequence(c),
                "bytes_batch": self.kv.bytes(self.batch, c),
            },
            "weights": {"params": self.params, "bytes": self.param_bytes},
            "prefill": self.prefill.to_json(),
            "decode": self.decode.to_json(),
            "concurrency": self.concurrency,
            "context": self.context,
            "contexts": list(self.contexts),
            "devices": [d.to_json() for d in self.devices],
            "depth": dict(self.depth),
            "assumptions": list(self.assumptions),
            "runtime": dict(self.runtime),
        } | ({} if self.formulas is None else {"formulas": self.formulas})


@dataclass
class LlmReport(Report):
    """A `Report` of the decode step with the serving analysis in `llm`."""

    llm: LlmServing | None = None


ASSUMPTIONS = (
    "eager PyTorch on CUDA, transformers' sdpa attention, one static batch (no continuous batching, no paged "
    "attention): every sequence of the batch has the same prompt and generates the same number of tokens",
    "static KV cache preallocated for prompt + generated tokens per sequence (min(context, window) slots in a "
    "sliding-window layer); a prefill attends over the prompt (the cache is empty before it) and returns only the "
    "last position's logits; a decode step at context L attends over L slots",
    "TPOT is the decode step at the full static cache (every step of a static cache attends over all its slots); "
    "E2E = TTFT + (generated - 1) x TPOT",
    "memory = weights + KV cache + activations + CUDA context + workspace; activations are the liveness pass's peak "
    "of the graph besides the cache (attention one op where the model's class uses sdpa: no score matrix; an "
    "eager-attention class keeps its score matrices in them); the capacity table counts the decode step's",
    "latencies are predictions from the graphs (predictor as `preflight predict`), nothing was run on a GPU",
)


def context_grid(max_positions: int | None, extra: Sequence[int] = ()) -> tuple[int, ...]:
    """Powers of two from MIN_CONTEXT_GRID to the model's positions (at most MAX_CONTEXT_GRID), and `extra`."""
    top = min(max_positions or MAX_CONTEXT_GRID, MAX_CONTEXT_GRID)
    grid = {2**k for k in range(int(math.log2(MIN_CONTEXT_GRID)), int(math.log2(max(top, 1))) + 1)}
    grid |= {c for c in extra if c <= (max_positions or c)}
    if max_positions and max_positions <= MAX_CONTEXT_GRID:
        grid.add(max_positions)
    return tuple(sorted(c for c in grid if c >= 2))


MAX_CONTEXTS = 32  # points of the context sweep


def parse_contexts(text: str) -> list[int]:
    """'1024,4096' -> [1024, 4096] (sorted, unique; each at least 2 tokens, at most MAX_CONTEXTS of them)."""
    parts = [v for v in text.replace(" ", "").split(",") if v]
    if not parts or not all(v.isdigit() for v in parts):
        raise UsageError(f"--contexts takes comma-separated token counts, e.g. 1024,4096 (got {text!r})")
    return check_contexts(int(v) for v in parts)


def check_contexts(values) -> list[int]:
    """The sweep's contexts, sorted and unique: integers from 2 to MAX_DIM, at most MAX_CONTEXTS."""
    values = list(values)
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and 2 <= v <= MAX_DIM for v in values):
        raise UsageError(f"contexts must be integers from 2 to {MAX_DIM} tokens (got {values!r})")
    out = sorted(set(values))
    if len(out) > MAX_CONTEXTS:
        raise UsageError(f"at most {MAX_CONTEXTS} contexts")
    return out


def _check_int(name: str, value, lo: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= MAX_DIM:
        raise UsageError(f"{name} must be an integer from {lo} to {MAX_DIM} (got {value!r})")
    return value


def kv_cache_spec(layout, dtype: str) -> serving.KvCacheSpec:
    """The KV cache `preflight llm` reports for a cache layout (`zoo.serving.cache_layout`) stored in `dtype`.

    A layer holds min(context, window) slots per sequence (context for a full-attention layer): the static cache's
    allocation, transformers' `StaticSlidingWindowLayer`'s, and the keys and values attention reads in the decode
    step that brings a sequence to `context` tokens (transformers' dynamic cache keeps window - 1 of them visible
    between steps). tests/test_kv_oracle.py checks it against transformers' own caches.
    """
    return serving.KvCacheSpec(layout.kv_heads, layout.head_dim, layout.windows, dtype_bytes(dtype))


def llm(
    model,
    *,
    prompt: int = 1024,
    generate: int = 256,
    batch: int = 1,
    devices: Sequence[str] = ("h100-80gb",),
    dtype: str | None = None,
    concurrency: int | None = None,
    context: int | None = None,
    ttft_ms: float | None = None,
    tpot_ms: float | None = None,
    contexts: Sequence[int] | None = None,
    full_depth: bool = False,
    log: Callable[[str], None] | None = None,
    runtime: str = "eager",
    tensor_parallel: int = 1,
    gpu_memory_utilization: float = engine.GPU_MEMORY_UTILIZATION,
    block_size: int = engine.BLOCK_SIZE,
    matmul_precision: str = "highest",
    engine_profile: str | None = None,
    max_num_batched_tokens: int | None = None,
    host_overhead: float = 1.0,
) -> LlmReport:
    """Serve a decoder LM with a static KV cache: KV-cache bytes, TTFT/TPOT, capacity per GPU and MIG slice.

    Args:
        model: "zoo:NAME", a transformers `config.json` (or model directory), a transformers config, or a
            transformers causal-LM `nn.Module`.
        prompt: Prompt tokens per sequence.
        generate: Tokens generated per sequence (the static cache holds prompt + generate).
        batch: Sequences served together.
        devices: GPUs to predict for.
        dtype: Serving dtype ("float16", "bfloat16", "float32"); default: the model's declared one, else float16.
        concurrency: Sequences of the MIG recommendation (default `batch`).
        context: Their cache length in tokens (default prompt + generate); must exceed `prompt`.
        ttft_ms: The recommended slice must also predict at most this TTFT (prefill of `concurrency` prompts).
        tpot_ms: ... and at most this TPOT (one decode step of `concurrency` sequences at `context`).
        contexts: Contexts of the latency sweep and the capacity table (default: powers of two up to the model's
            positions).
        full_depth: Trace all layers even when they are identical (exact per-operator list, slower).
        log: Called with a line of progress now and then.
        runtime: "eager" (transformers, static cache; the graphs' predictions) or "vllm" (a serving engine: CUDA-graph
            decode, continuous batching, paged KV cache; `predictor.serving_engine`): the latencies, energy and
            fits of `llm.devices[]` are the runtime's.
        tensor_parallel: GPUs one model is split over (vllm runtime; Megatron-style, all-reduces over NVLink).
        gpu_memory_utilization: Fraction of each GPU's memory the engine may use (vllm runtime).
        block_size: Tokens per KV-cache block (vllm runtime).
        matmul_precision: `torch.set_float32_matmul_precision` where the model is served: "highest" (torch's
            default) or "high"/"medium" (float32 matmuls on TF32 tensor cores); only a float32 model moves.
        host_overhead: The host's dispatch time per kernel as a multiple of preflight's launch floor (eager runtime;
            `predictor.predict.predict`): 1.0 the host the kernel model was fitted on. The vllm runtime's host time
            is its engine profile's (`engine_profile`); a value other than 1.0 there is a UsageError.
        engine_profile: The engine's host time per decode step (vllm runtime): a built-in profile's name
            (`vllm-overlapped`, the default: host work overlapped with the GPU; `vllm-0.5.4`: fitted on ML.ENERGY
            v2's vLLM 0.5.4 rows) or the path of a profile .json file (docs/llm-serving.md).
        max_num_batched_tokens: Chunked prefill's token budget per step (vllm runtime): prompts are prefilled in
            chunks of up to this many tokens minus the running decodes, in the decodes' steps; 0: no chunked
            prefill (each prefill its own step); None: the engine profile's default (`vllm-overlapped`: vLLM's
            default budget for the GPU, 8192 on >= 70 GiB other than A100, else 2048; `vllm-0.5.4`: none).

    Returns:
        An `LlmReport`: the decode step's report (totals; per-operator list with full depth) with the `llm` block.
        The serving figures are in `report.llm`: per GPU `report.llm.devices[i]` (`ttft_ms`, `tpot_ms`, `e2e_ms`,
        tokens/s, `energy_per_token_j`, `memory`, `capacity`, `recommendation`), the steps' counts in
        `report.llm.prefill` / `report.llm.decode`. `report.prediction` is None: no single latency stands for a
        served model (TTFT and TPOT are two).
    """
    say = log or (lambda _m: None)
    if runtime not in RUNTIMES:
        raise UsageError(f"--runtime must be one of {', '.join(RUNTIMES)} (got {runtime!r})")
    tensor_parallel = _check_int("--tensor-parallel", tensor_parallel)
    block_size = _check_int("--block-size", block_size)
    if block_size not in engine.BLOCK_SIZES:
        raise UsageError(
            f"--block-size must be one of {', '.join(map(str, engine.BLOCK_SIZES))} (vLLM 0.5's choices; got "
            f"{block_size})"
        )
    if not (isinstance(gpu_memory_utilization, int | float) and 0 < gpu_memory_utilization <= 1):
        raise UsageError(f"--gpu-memory-utilization must be in (0, 1] (got {gpu_memory_utilization!r})")
    if runtime == "eager" and tensor_parallel != 1:
        raise UsageError("--tensor-parallel needs --runtime vllm (the eager runtime runs one GPU)")
    if runtime == "eager" and engine_profile is not None:
        raise UsageError("--engine-profile needs --runtime vllm (the eager runtime has no serving engine)")
    pool = (block_size, gpu_memory_utilization)
    if runtime == "eager" and pool != (engine.BLOCK_SIZE, engine.GPU_MEMORY_UTILIZATION):
        raise UsageError(
            "--block-size and --gpu-memory-utilization need --runtime vllm (the eager runtime has no KV block pool)"
        )
    host_overhead = check_host_overhead(host_overhead)
    if runtime == "vllm" and host_overhead != 1.0:
        raise UsageError(
            "--host-overhead needs --runtime eager (the vllm runtime's host time per step is its --engine-profile)"
        )
    if runtime == "eager" and max_num_batched_tokens is not None:
        raise UsageError("--max-num-batched-tokens needs --runtime vllm (the eager runtime has no scheduler)")
    if max_num_batched_tokens is not None:
        max_num_batched_tokens = _check_int("--max-num-batched-tokens", max_num_batched_tokens, 0)
    profile = None
    if runtime == "vllm":
        try:
            profile = engine.engine_profile(engine_profile)
        except engine.ServingParamsError as exc:
            raise UsageError(f"--engine-profile: {exc}") from exc
    prompt = _check_int("--prompt", prompt)
    generate = _check_int("--generate", generate)
    batch = _check_int("--batch", batch)
    concurrency = batch if concurrency is None else _check_int("--concurrency", concurrency)
    devices = check_devices(devices)
    check_dtype(dtype)
    check_matmul_precision(matmul_precision)
    for name, v in (("--ttft-ms", ttft_ms), ("--tpot-ms", tpot_ms)):
        if v is not None and not (isinstance(v, int | float) and v > 0 and math.isfinite(v)):
            raise UsageError(f"{name} must be a positive number of milliseconds (got {v!r})")

    from zoo.serving import StepError, cache_layout

    m = load_llm(model)
    dtype = dtype or m.declared_dtype or DEFAULT_DTYPE
    request_context = prompt + generate
    context = request_context if context is None else _check_int("--context", context, 2)
    if context <= prompt:
        raise UsageError(f"--context ({context}) must exceed --prompt ({prompt}): the cache holds the prompt and more")
    limit = m.max_positions
    for what, v in (("prompt + generate", request_context), ("--context", context)):
        if limit is not None and v > limit:
            raise UsageError(f"{what} = {v:,} tokens exceeds the model's {limit:,} positions")
    grid = tuple(check_contexts(contexts)) if contexts is not None else context_grid(limit, (request_context, context))
    for c in grid:
        if limit is not None and c > limit:
            raise UsageError(f"context {c:,} exceeds the model's {limit:,} positions")
    try:
        layout = cache_layout(m.config)
    except StepError as exc:
        raise UsageError(f"{m.name}: {exc}") from exc
    kv = kv_cache_spec(layout, dtype)
    n = layout.layers
    if runtime == "vllm":  # the engine's kernels from the config: nothing to trace
        say(f"serving engine (vllm runtime, tensor parallel {tensor_parallel}, engine profile {profile.name})")
        report = _llm_vllm(
            m,
            layout,
            kv,
            dtype=dtype,
            prompt=prompt,
            generate=generate,
            batch=batch,
            concurrency=concurrency,
            context=context,
            devices=devices,
            grid=grid,
            ttft_ms=ttft_ms,
            tpot_ms=tpot_ms,
            tp=tensor_parallel,
            utilization=gpu_memory_utilization,
            block_size=block_size,
            matmul_precision=matmul_precision,
            profile=profile,
            batched_tokens=max_num_batched_tokens,
        )
        return _note_defaults(report, m)

    depths, depth = choose_depths(m.lm, layout, full_depth=full_depth, devices=devices)
    max_length = max([*grid, request_context, context, prompt])

    def graphs(kind: str) -> dict[int, StepGraph]:
        return {
            d: StepGraph(
                kind,
                lm,
                replace(layout, windows=layout.windows[:d]),
                dtype,
                name=f"{m.name} {kind} step",
                source=m.source,
                framework=m.framework,
            )
            for d, lm in depths.items()
        }

    prefill = Step("prefill", graphs("prefill"), n, devices, max_length, matmul_precision, host_overhead)
    decode = Step("decode", graphs("decode"), n, devices, max_length, matmul_precision, host_overhead)

    say(f"tracing the prefill step ({batch} x {prompt} tokens)")
    pre = prefill.cost(batch, prompt)
    say(f"tracing the decode step ({batch} sequences, {request_context} cache slots)")
    dec = decode.cost(batch, request_context)

    # the graph's cache inputs are the KV cache: its bytes must be the formula's
    top_depth = max(decode.depths)
    graph_kv = decode.point(top_depth, batch, request_context).kv_input_bytes
    expect = batch * sum(layout.slots(i, request_context) for i in range(top_depth)) * kv.bytes_per_token_layer
    if graph_kv != expect:
        raise AnalysisError(f"the decode graph's cache inputs hold {graph_kv:,} bytes, the KV formula {expect:,}")

    say("activation model of the decode step")
    act_decode = _decode_timeline(decode, (batch, request_context))

    weights = dec.totals["param_bytes"]

    act_prefill = _prefill_peaks(prefill, (batch, prompt))

    def need_mib(b: int, c: int, prompt_tokens: int | None = None, *, device) -> serving.ServingMemory:
        act = act_decode(b, c)
        if prompt_tokens is not None:
            act = max(act, act_prefill(b, prompt_tokens))
        ctx, ws = context_mib(device, "eager"), workspace_mib(device)  # the runtime's context, cuBLAS's workspace
        return serving.ServingMemory(b, c, weights, kv.bytes(b, c), act, ctx, ws)

    rec_pre = pre if concurrency == batch else prefill.cost(concurrency, prompt)
    rec_dec = dec if (concurrency, context) == (batch, request_context) else decode.cost(concurrency, context)

    say(f"latency sweep over {len(grid)} contexts")
    sweep_pts = [(c, prefill.cost(batch, c) if c <= max_length else None, decode.cost(batch, c)) for c in grid]

    out: list[DeviceServing] = []
    for dev in devices:
        device = get_device(dev)
        say(f"capacity on {dev}")
        request_mem = need_mib(batch, request_context, prompt, device=device)
        rec_mem = (
            request_mem
            if (concurrency, context) == (batch, request_context)
            else need_mib(concurrency, context, prompt, device=device)
        )
        # each context's sequences as the request's: a prompt (at most the context) prefilled, then decoded
        cap = serving.capacity(device, grid, lambda b, c, d=device: need_mib(b, c, min(prompt, c), device=d).total_mib)
        fits = {name: mig_fits(mib, request_mem.total_mib) for name, mib, _ in serving.targets(device)}
        lat = {serving.FULL_GPU: serving.SliceLatency(rec_pre.latency_ms[dev], rec_dec.latency_ms[dev])}
        for q in rec_dec.slice_ms[dev]:
            lat[q] = serving.SliceLatency(rec_pre.slice_ms[dev][q], rec_dec.slice_ms[dev][q])
        rec = serving.recommend(
            device,
            concurrency,
            context,
            rec_mem.total_mib,
            lat,
            ttft_target_ms=ttft_ms,
            tpot_target_ms=tpot_ms,
        )
        ttft, tpot = pre.latency_ms[dev], dec.latency_ms[dev]
        e2e = ttft + (generate - 1) * tpot
        e_step = dec.energy_j.get(dev)
        out.append(
            DeviceServing(
                device=dev,
                predictor=dec.predictor[dev],
                ttft_ms=ttft,
                tpot_ms=tpot,
                e2e_ms=e2e,
                prefill_tokens_per_s=_per_s(batch * prompt, ttft),
                decode_tokens_per_s=_per_s(batch, tpot),
                output_tokens_per_s=_per_s(batch * generate, e2e),
                memory=request_mem,
                fits=fits,
                sweep=[
                    {
                        "context": c,
                        "ttft_ms": None if p is None else p.latency_ms[dev],
                        "tpot_ms": d.latency_ms[dev],
                        "decode_tokens_per_s": _per_s(batch, d.latency_ms[dev]),
                        "prefill_activation_bytes": None if p is None else p.activation_bytes,
                        "decode_activation_bytes": d.activation_bytes,
                    }
                    for c, p, d in sweep_pts
                ],
                capacity=cap,
                recommendation=rec,
                basis={"ttft": pre.basis.get(dev, {}), "tpot": dec.basis.get(dev, {})},
                energy_per_token_j=None if e_step is None else e_step / batch,
                avg_power_w=None if e_step is None or tpot <= 0 else e_step / (tpot / 1e3),
            )
        )

    say("costs as formulas of the prompt and the context")
    formulas, why_not = {}, []
    for step in (prefill, decode):
        block, why = context_formulas(step)
        if block is not None:
            formulas[step.kind] = block
        else:
            why_not.append(f"no formulas of the {step.kind} step: {why}")

    info = LlmServing(
        model=_model_summary(m, layout),
        dtype=dtype,
        kv=kv,
        batch=batch,
        prompt=prompt,
        generate=generate,
        concurrency=concurrency,
        context=context,
        params=dec.totals["params"],
        param_bytes=weights,
        prefill=pre,
        decode=dec,
        devices=out,
        contexts=grid,
        depth=depth,
        assumptions=list(ASSUMPTIONS),
        runtime={"name": "eager", **_precision(matmul_precision), "host_overhead": host_overhead},
        formulas=formulas or None,
    )
    report = _decode_report(m, decode, dec, batch, request_context, kv, depth)
    report.warnings.extend(why_not)
    for d in out:
        if not d.fits[serving.FULL_GPU]:
            d_dev = get_device(d.device)
            most = serving.largest_fitting(
                lambda b, dv=d_dev: need_mib(b, request_context, device=dv).total_mib,
                d.capacity.usable_mib[serving.FULL_GPU],
                d.capacity.headroom,
            )
            report.warnings.append(_too_many(d.device, batch, request_context, most, "eager"))
    report.llm = info
    for g in (*prefill.graphs.values(), *decode.graphs.values()):
        for w in [*g.warnings, *(w for pt in g._points.values() for w in pt.warnings)]:
            if w not in report.warnings:
                report.warnings.append(w)
    for w in prefill.predict_warnings + decode.predict_warnings:
        if w not in report.warnings:
            report.warnings.append(w)
    report.warnings.append(
        f"analysed as if served in {dtype}: weights, activations and the KV cache are {dtype}"
        + ("" if m.declared_dtype or dtype != DEFAULT_DTYPE else " (the default; set --dtype)")
    )
    return _note_defaults(report, m)


def _note_defaults(report: LlmReport, m: LlmModel) -> LlmReport:
    """`report` with a warning naming the sizes the config file left to transformers' defaults, if any."""
    if m.defaulted:
        sizes = ", ".join(f"{k} = {getattr(m.config, k):,}" for k in m.defaulted)
        report.warnings.insert(
            0,
            f"the config does not set {sizes}: transformers' defaults for {m.config.model_type}, which the costs "
            "rest on (set them in the config if the model differs)",
        )
    return report


def choose_depths(lm, layout, *, full_depth: bool, devices: Sequence[str]) -> tuple[dict[int, object], dict]:
    """The models to trace by depth ({1: ..., 2: ...} or {n: lm}) and how the choice is reported (`depth` block).

    Depth 1 and 2 (then extrapolated) when the n layers are identical, the depth-1 rebuild has the same layer,
    and every device's predictor is additive (no trained artifact); otherwise all n layers.
    """
    n = layout.layers

    def full(why: str) -> tuple[dict[int, object], dict]:
        return {n: lm}, {"mode": "full", "layers": n, "traced": [n], "why": why}

    if full_depth:
        return full("asked for (full depth)")
    if n <= 2:
        return full("the model has at most 2 layers")
    if not identical_layers(lm, layout):
        return full("its layers differ (shapes or attention windows)")
    trained = [d for d in devices if predictor_info(d)["trained"]]
    if trained:
        return full(f"a trained predictor (for {', '.join(trained)}) is not additive over layers")
    try:
        probes = {1: truncated(lm, 1), 2: truncated(lm, 2)}
    except Exception as exc:  # noqa: BLE001 - a class that cannot be rebuilt from its config: trace every layer
        return full(f"rebuilding it with fewer layers failed ({one_line(exc)})")
    first = _signature(_layer_list(lm, n)[0])
    if any(_signature(_layer_list(p, d)[0]) != first for d, p in probes.items()):
        return full("its rebuild with fewer layers has different layers")
    return probes, {
        "mode": "extrapolated",
        "layers": n,
        "traced": [1, 2],
        "why": f"the {n} decoder layers are identical: counts and additive latencies are x(1) + (n - 1)(x(2) - x(1)); "
        f"transient activations are the same at depth 2 as at any larger depth",
    }


def _model_summary(m: LlmModel, layout) -> dict:
    return {
        "name": m.name,
        "model_type": getattr(m.config, "model_type", None),
        "class": type(m.lm).__name__,
        "layers": layout.layers,
        "hidden_size": getattr(m.config, "hidden_size", None),
        "attention_heads": getattr(m.config, "num_attention_heads", None),
        "kv_heads": layout.kv_heads,
        "head_dim": layout.head_dim,
        "vocab": layout.vocab,
        "max_positions": m.max_positions,
        "tied_embeddings": bool(getattr(m.config, "tie_word_embeddings", False)),
        "sliding_window": sorted({w for w in layout.windows if w is not None}) or None,
    }


def _per_s(tokens: int, ms: float) -> float | None:
    return 1e3 * tokens / ms if ms > 0 else None


def _decode_timeline(decode: Step, request: tuple[int, int]) -> Callable[[int, int], int]:
    """The decode step's transient peak at any (batch, context).

    Uniform windows: a bilinear timeline over (batch, slots) from four bound graphs (`predictor.llm.BilinearTimeline`),
    checked against the request's own graph; otherwise (or when the check fails) each point's own graph.
    """
    depth = max(decode.depths)  # depth 2 already has every layer-to-layer liveness pattern of a deeper stack
    layout = decode.graphs[depth].layout

    def direct(b: int, c: int) -> int:
        return decode.point(depth, b, c).transient_bytes

    if len(set(layout.windows)) > 1:
        return direct
    samples = {(b, s): decode.point(depth, b, s).timeline for b in (1, 2) for s in (2, 3)}
    tl = serving.BilinearTimeline.fit(samples, slots=lambda c: layout.slots(0, c))
    b, c = request
    if tl.peak(b, c) != direct(b, c):
        decode.predict_warnings.append(
            "the decode step's activations are not bilinear in (batch, slots); the capacity search analysed each point"
        )
        return direct
    return tl.peak


def _prefill_peaks(prefill: Step, request: tuple[int, int]) -> Callable[[int, int], int]:
    """The prefill's transient peak at any (batch, prompt length): per length, each operator's live bytes affine in
    the batch (every activation has a batch dimension or none: `predictor.llm.BilinearTimeline.in_batch`), fitted on
    batch 1 and 2 and checked at batch 3 and at the request's batch; a length where the check fails (or whose graphs
    differ in their operators) takes each point's own graph."""
    depth = max(prefill.depths)
    fitted: dict[int, serving.BilinearTimeline | None] = {}

    def direct(b: int, length: int) -> int:
        return prefill.point(depth, b, length).transient_bytes

    def peak(b: int, length: int) -> int:
        if length not in fitted:
            one, two = (prefill.point(depth, n, length).timeline for n in (1, 2))
            tl = serving.BilinearTimeline.in_batch(one, two) if len(one) == len(two) else None
            checks = {3, request[0]} if length == request[1] else {3}
            if tl is not None and any(tl.peak(n, 0) != direct(n, length) for n in checks):
                tl = None
            fitted[length] = tl
            if tl is None:
                prefill.predict_warnings.append(
                    f"the prefill's activations at {length:,} tokens are not affine in the batch; the capacity search "
                    "analysed each point"
                )
        tl = fitted[length]
        return direct(b, length) if tl is None else tl.peak(b, 0)

    return peak


def _scaled_mix(mix: dict[str, int], macs: int) -> dict[str, int]:
    """The sampled graph's MACs-per-dtype shares applied to the extrapolated `macs` (exact for one dtype)."""
    total = sum(mix.values())
    if not total or not macs:
        return {}
    out = {d: macs * n // total for d, n in mix.items()}
    top = max(out, key=lambda d: (out[d], d))
    out[top] += macs - sum(out.values())
    return {d: n for d, n in out.items() if n}


def _decode_report(m: LlmModel, decode: Step, dec: StepCost, batch: int, ctx: int, kv, depth: dict) -> LlmReport:
    """The top-level report: the decode step (its full graph with full depth; otherwise its n-layer totals)."""
    top = max(decode.depths)
    pt = decode.point(top, batch, ctx)
    a = pt.analysis
    model = {"source": m.source, "framework": m.framework, "name": f"{m.name} decode step"}
    names = decode.graphs[top]._input_names()
    n_cache = 2 * m.layers
    inputs = [{"name": "input_ids", "shape": [batch, 1], "dtype": "int64"}]
    if depth["mode"] == "full":
        inputs = [
            {"name": names[i] if i < len(names) else s.name, "shape": list(s.tensor.shape), "dtype": s.tensor.dtype}
            for i, s in enumerate(a.graph.inputs)
        ]
        # peak activations as the other mode says them: the KV cache + the step's transient peak (`transient`: the
        # logits kept to the end), not the graph's own liveness
        full = replace(a, totals=replace(a.totals, peak_activation_bytes=kv.bytes(batch, ctx) + dec.activation_bytes))
        full.__dict__["kernel_view"] = a.kernel_view  # (the same graph)
        return LlmReport(model=model, inputs=inputs, analysis=full, warnings=list(pt.warnings))
    first = a.graph.inputs[1].tensor if len(a.graph.inputs) > 1 else None
    if first is not None:
        for i in range(n_cache):
            layer = i // 2
            shape = [batch, kv.kv_heads, kv.slots(layer, ctx), kv.head_dim]
            name = f"past_{('key', 'value')[i % 2]}_{layer}"  # as `_input_names` names a full-depth graph's
            inputs.append({"name": name, "shape": shape, "dtype": first.dtype})
    kv_bytes = kv.bytes(batch, ctx)
    totals = Totals(
        flops=dec.totals["flops"],
        macs=dec.totals["macs"],
        params=dec.totals["params"],
        param_bytes=dec.totals["param_bytes"],
        peak_activation_bytes=kv_bytes + dec.activation_bytes,
        bytes_read=dec.totals["bytes_read"],
        bytes_written=dec.totals["bytes_written"],
        op_count=dec.totals["op_count"],
        unsupported=dict(a.totals.unsupported),
        macs_by_dtype=_scaled_mix(a.totals.macs_by_dtype, dec.totals["macs"]),
    )
    # no per-operator list, so no op graph either: the kernel view of the summary is empty, like its op list
    summary = Analysis(
        graph=OpGraph(ops=[], sources=list(a.graph.sources), outputs=[]),
        ops=[],
        totals=totals,
        memory=a.memory,
        edges=[],
        static_features=dict(a.static_features),
    )
    warnings = list(pt.warnings) + [
        f"the {m.layers} identical decoder layers were traced at depth 1 and 2 and the totals extrapolated exactly; "
        f"no per-operator list (use --full-depth for it); peak activations = KV cache + the step's transient peak"
    ]
    return LlmReport(model=model, inputs=inputs, analysis=summary, warnings=warnings)


# ---- --runtime vllm: a serving engine (predictor.serving_engine) ---------------------------------------------------

RUNTIMES = ("eager", "vllm")

VLLM_ASSUMPTIONS = (
    "vLLM-style engine (its kernels as vLLM runs them; the host time per step is the engine profile's, below): "
    "decode steps replayed as CUDA graphs (batches padded to the captured sizes 1, 2, 4, "
    "8..256; eager above), prefills eager; kernels from the config: fused add+RMSNorm, QKV/O/gate-up/down GEMMs "
    "(cuBLAS, the kernel model's fitted float16 GEMM parameters, decode-sized ones of <= 64 tokens at their own "
    "weight-streaming fit on Vidur's layers, blended up to 256; bfloat16 as float16), rotary, KV-cache write, "
    "paged attention over each sequence's live context (on Hopper at a fit on public paged decode-attention "
    "timings), SiLU-and-multiply, LM head and sampler",
    "continuous batching: --batch sequences run at once (when the KV pool holds fewer, that many, the rest waiting in "
    "waves: llm.devices[].engine.queue), at uniformly spread progress, so the mean live context is "
    "prompt + generate / 2 and TPOT (mean inter-token latency) = the decode step at that context + the prefills "
    "that interleave with it (batch / generate new prompts per step). Without chunked prefill each prefill pauses "
    "the decodes and TTFT is one prompt's prefill in its own step; with chunked prefill (--max-num-batched-tokens, "
    "llm.devices[].engine.chunked_prefill) the prompts' tokens fill the step's budget beside the decodes, chunked, "
    "as eager mixed steps, and TTFT is one prompt's chunks beside the running decodes (no wait for a free slot "
    "either way, but for a batch the KV pool cannot hold)",
    "every decode step adds the engine's host time the GPU waits for: step + per running sequence + per KV block "
    "of the running sequences + per extra tensor-parallel worker, the figures of the engine profile below "
    "(--engine-profile; llm.runtime.engine_profile, llm.devices[].engine.host)",
    "tensor parallel N: heads, KV heads (replicated below N), MLP and vocabulary split N ways; two ring "
    "all-reduces per layer (and one after the embedding) over NVLink: 2(N-1)/N x bytes / link + 8 us",
    "KV cache in blocks of --block-size tokens: the pool is --gpu-memory-utilization x memory - weights - the "
    "profiling pass's activations - 1 GiB outside torch; sequences that fit = blocks / ceil(context / block)",
    "energy = the power model's board power (busy shares of the steps; the host's time counts as idle) x time, "
    "per GPU; latencies and energy are predictions, nothing was run on a GPU",
)


def _precision(matmul_precision: str) -> dict:
    """The `llm.runtime` keys of `torch.set_float32_matmul_precision`'s setting (as `prediction.runtime` has them)."""
    return {"matmul_precision": matmul_precision, "tf32_matmul": tf32_matmul_of(matmul_precision)}


def _profile_assumption(p: engine.EngineProfile) -> str:
    """The report's line on the engine profile: its name, what it describes, whether fitted, its source."""
    where = f" (file {p.file})" if p.file else ""
    how = "fitted" if p.fitted else "not fitted"
    return f"engine profile {p.name}{where}, {how}: {p.description or 'no description'}; source: {p.source}"


def _too_many(device: str, batch: int, context: int, most: int, runtime: str) -> str:
    """The warning of a request whose batch the whole GPU cannot hold: what the runtime does instead (the vllm
    runtime's queue: `engine.Queue`, the eager runtime: out of memory)."""
    if runtime == "vllm" and most == 0:
        return (
            f"{device}: not one sequence of {context:,} tokens fits its KV pool (vllm runtime): vLLM would refuse the "
            f"request; the latencies and throughput stated are for {batch:,} sequence{'s' if batch != 1 else ''} this "
            "GPU cannot hold (a shorter context, more --gpu-memory-utilization, a larger GPU or, on whole GPUs, "
            "--tensor-parallel)"
        )
    if runtime == "vllm":
        return (
            f"{device}: {batch:,} sequences of {context:,} tokens do not fit its KV pool at once, at most {most:,} "
            f"{'does' if most == 1 else 'do'} (vllm runtime): as vLLM's scheduler does, {most:,} run and the rest "
            f"wait for their blocks, in {math.ceil(batch / most):,} waves; TTFT, TPOT and E2E are the running "
            "sequences', the wait and the time to serve all are the queue's (llm.devices[].engine.queue; more run on a "
            "larger GPU or, on whole GPUs, with --tensor-parallel)"
        )
    if most == 0:
        return (
            f"{device}: not one sequence of {context:,} tokens fits its memory ({runtime} runtime): eager PyTorch "
            f"would run out of memory; the latencies and throughput stated are for {batch:,} "
            f"sequence{'s' if batch != 1 else ''} this GPU cannot hold (a larger GPU or MIG slice, or a shorter "
            "context where the weights fit)"
        )
    return (
        f"{device}: {batch:,} sequences of {context:,} tokens do not fit its memory, at most {most:,} "
        f"{'does' if most == 1 else 'do'} ({runtime} runtime): eager PyTorch would run out of memory; the latencies "
        "and throughput stated are for a batch this GPU cannot hold (lower --batch)"
    )


def _arch(m: LlmModel, layout) -> engine.Arch:
    """The engine's sizes of `m`; a sliding window where every layer has the same one (`layout.windows`, as the
    eager runtime reads the config; layers that differ, as Gemma-2's: none, every layer's blocks grow)."""
    try:
        arch = engine.Arch.from_config(m.config.to_dict())
    except engine.EngineConfigError as exc:
        raise UsageError(f"{m.name}: {exc}") from exc
    windows = set(layout.windows)
    return replace(arch, window=windows.pop()) if len(windows) == 1 else arch


def _llm_vllm(
    m: LlmModel,
    layout,
    kv: serving.KvCacheSpec,
    *,
    dtype: str,
    prompt: int,
    generate: int,
    batch: int,
    concurrency: int,
    context: int,
    devices: Sequence[str],
    grid: Sequence[int],
    ttft_ms: float | None,
    tpot_ms: float | None,
    tp: int,
    utilization: float,
    block_size: int,
    matmul_precision: str = "highest",
    profile: engine.EngineProfile,
    batched_tokens: int | None = None,
) -> LlmReport:
    """`preflight llm --runtime vllm`: every number from the config's sizes (`predictor.serving_engine`), per GPU of
    `tp`; no graph is traced (the kernels of these architectures are a formula; tests/test_llm_serving.py checks
    the GEMM FLOPs against the traced decode graph's)."""
    from predictor.power import power_params

    tf32 = tf32_matmul_of(matmul_precision)
    arch = _arch(m, layout)
    try:
        engine.Split.of(arch, tp)
    except engine.EngineConfigError as exc:
        raise UsageError(f"{m.name}: {exc}") from exc
    eb = dtype_bytes(dtype)
    request_context = prompt + generate
    weights = engine.weight_bytes_per_gpu(arch, tp, eb)

    def plan(memory_mib: float, n: int, device) -> engine.EngineMemory:
        return engine.engine_memory(
            arch,
            memory_mib,
            tp=n,
            dtype=dtype,
            utilization=utilization,
            block_size=block_size,
            non_torch_mib=context_mib(device, "vllm"),  # outside torch's allocator: predictor.memory's "vllm" entry
        )

    def act(tokens: int) -> int:
        return int(engine.profile_activation_bytes(arch, tp, eb, tokens))

    def need(p: engine.EngineMemory, b: int, c: int) -> serving.ServingMemory:
        kv_bytes = b * p.blocks_per_sequence(c) * p.block_bytes
        return serving.ServingMemory(b, c, int(weights), int(kv_bytes), int(p.activation_bytes), p.non_torch_mib, 0.0)

    pre_tot = engine.step_totals(arch, batch, prompt, prefill=True, dtype=dtype)
    dec_tot = engine.step_totals(arch, batch, request_context, prefill=False, dtype=dtype)
    steps = {k: {f: {} for f in ("lat", "roof", "slices", "names", "energy")} for k in ("prefill", "decode")}
    running_on: dict[str, int] = {}  # devices whose KV pool runs fewer than --batch at once
    out: list[DeviceServing] = []
    for dev in devices:
        device = get_device(dev)
        if tp > 1 and device.parent is not None:
            raise UsageError(
                f"--tensor-parallel {tp} on {dev}: a MIG slice has no NVLink; tensor parallelism runs on whole GPUs"
            )
        if tp > 1 and engine.device_link(device) is None:
            raise UsageError(
                f"--tensor-parallel {tp} on {dev}: the device table gives it no NVLink bandwidth (nvlink_gbs)"
            )
        if tp > (domain := device.nvlink_gpus or 8):
            raise UsageError(
                f"--tensor-parallel {tp} on {dev}: NVLink connects {domain} of these GPUs (nvlink_gpus); beyond them "
                "the all-reduces leave NVLink (PCIe, or the network between nodes), which preflight does not model"
            )
        pw = power_params(dev)
        try:
            host = profile.host(device)
        except engine.ServingParamsError as exc:
            raise UsageError(f"--engine-profile: {exc}") from exc
        plans = {serving.FULL_GPU: plan(device.memory_mib, tp, device)}
        if tp == 1:
            plans |= {q.name: plan(q.memory_mib, 1, device) for q in device.mig}
        full = plans[serving.FULL_GPU]
        # the sequences that run at once: the pool's, when it holds fewer than --batch (the rest wait: `queue`)
        most = full.sequences(request_context)
        running = min(batch, most) if most >= 1 else batch
        budget = engine.batched_tokens_for(profile, device, batched_tokens)
        if budget and budget <= running:
            raise UsageError(
                f"--max-num-batched-tokens {budget} on {dev} leaves no room for a prefill beside {running} decodes"
                f" (give more than {running}, or 0 for no chunked prefill)"
            )
        served = engine.serve(
            arch, device, running, prompt, generate, pw, tp=tp, dtype=dtype, tf32_matmul=tf32, host=host,
            batched_tokens=budget,
        )  # fmt: skip
        e2e = served.ttft_ms + (generate - 1) * served.tpot_ms
        queue = engine.Queue(batch, running, e2e) if running < batch else None
        if queue is not None:
            running_on[dev] = running
        step, pre, stalls = served.decode, served.prefill, served.prefills_per_step
        name = f"vllm engine model (kernel model, CUDA graphs, host time: {profile.name})"
        lat = {serving.FULL_GPU: serving.SliceLatency(served.ttft_ms, served.tpot_ms)}
        slice_ms: dict[str, float] = {}
        if tp == 1:  # a MIG slice has no NVLink: tensor parallel 1 only
            for q in device.mig:
                sd = get_device(f"{dev}:{q.name}")
                b_q = engine.batched_tokens_for(profile, sd, batched_tokens)
                s_q = engine.serve(
                    arch,
                    sd,
                    concurrency,
                    prompt,
                    generate,
                    power_params(sd.key),
                    dtype=dtype,
                    tf32_matmul=tf32,
                    host=host,
                    batched_tokens=b_q if b_q > concurrency else 0,
                )
                lat[q.name] = serving.SliceLatency(s_q.ttft_ms, s_q.tpot_ms)
                slice_ms[q.name] = s_q.tpot_ms
        for kind, st, energy in (
            ("prefill", pre, engine.step_energy_j(pre, pw)[0]),
            ("decode", step, engine.step_energy_j(step, pw)[0]),
        ):
            steps[kind]["lat"][dev] = st.total_ms
            steps[kind]["roof"][dev] = st.bound_s * 1e3
            steps[kind]["slices"][dev] = slice_ms if kind == "decode" else {}
            steps[kind]["names"][dev] = name
            steps[kind]["energy"][dev] = energy
        fits = {t: p.sequences(request_context) >= batch for t, p in plans.items()}
        cap = serving.Capacity(
            dev,
            tuple(grid),
            {t: p.memory_mib for t, p in plans.items()},
            {t: tuple(min(p.sequences(c), serving.MAX_BATCH) for c in grid) for t, p in plans.items()},
            tuple(q.name for q in device.mig if not q.measured and q.name in plans),
            0.0,
        )
        rec_total = need(full, concurrency, context).total_mib
        rec_need = rec_total / utilization  # fits iff need <= utilization x memory
        rec = serving.recommend(
            device,
            concurrency,
            context,
            rec_need,
            lat,
            ttft_target_ms=ttft_ms,
            tpot_target_ms=tpot_ms,
            headroom=0.0,
            no_slices=f"tensor parallel {tp} runs on whole GPUs (a MIG slice has no NVLink)" if tp > 1 else None,
            need_how=f"{rec_total:,.0f} MiB needed, within --gpu-memory-utilization {utilization:g} of the memory: "
            f"{rec_total:,.0f} / {utilization:g} = {rec_need:,.0f} MiB",
        )
        sweep = []
        for c in grid:
            at_c = min(batch, full.sequences(c)) or batch  # as at the request: the pool's sequences, if fewer
            s_c = engine.decode_step(arch, device, at_c, c, tp=tp, dtype=dtype, tf32_matmul=tf32, host=host)
            sweep.append(
                {
                    "context": c,
                    "sequences": at_c,
                    "ttft_ms": engine.prefill_step(
                        arch, device, 1, c, tp=tp, dtype=dtype, tf32_matmul=tf32, host=host
                    ).total_ms,
                    "tpot_ms": s_c.total_ms,
                    "decode_tokens_per_s": _per_s(at_c, s_c.total_ms),
                    "prefill_activation_bytes": act(c),
                    "decode_activation_bytes": act(at_c),
                }
            )
        info = {
            "runtime": "vllm",
            "tensor_parallel": tp,
            "decode_step_ms": step.total_ms,
            "decode_step": {
                "compute_ms": step.compute_s * 1e3,
                "memory_ms": step.memory_s * 1e3,
                "gap_ms": step.gap_s * 1e3,
                "allreduce_ms": step.comm_s * 1e3,
                "host_overhead_ms": step.host_s * 1e3,
                "kernels": step.kernels,
                "running": running,
                "cuda_graph_batch": engine.captured_batch(running),
                "gemm_flops": step.gemm_flops,
                "gemm_bytes": step.gemm_bytes,
                "mean_context": prompt + generate / 2,
            },
            "prefill_ms": pre.total_ms,
            "prefills_per_decode_step": stalls,
            "chunked_prefill": None
            if not served.batched_tokens
            else {
                "max_num_batched_tokens": served.batched_tokens,
                "prefill_tokens_per_step": served.batched_tokens - running,
                "prefill_chunks": served.prefill_chunks,
                "mixed_steps_per_step": served.mixed_steps_per_step,
                "prefill_bound": served.prefill_bound,
            },
            "host": host.to_json(),
            "power_shares": dict(zip(("compute", "memory", "gap"), (round(x, 4) for x in step.shares()), strict=True)),
            "memory_per_gpu": {t: p.to_json(request_context) for t, p in plans.items()},
            "fits_model": full.fits,
            "queue": None if queue is None else queue.to_json(),
        }
        if arch.experts:
            info["moe"] = {
                "experts": arch.experts,
                "top_k": arch.top_k,
                "moe_layers": arch.moe_layers,
                "expected_experts_decode": engine.expected_experts(arch.experts, arch.top_k, running),
                "expected_experts_prefill": engine.expected_experts(arch.experts, arch.top_k, prompt),
            }
        out.append(
            DeviceServing(
                device=dev,
                predictor=name,
                ttft_ms=served.ttft_ms,
                tpot_ms=served.tpot_ms,
                e2e_ms=e2e,
                prefill_tokens_per_s=_per_s(prompt, served.ttft_ms),
                decode_tokens_per_s=_per_s(running, served.tpot_ms),
                output_tokens_per_s=_per_s(batch * generate, e2e if queue is None else queue.all_done_ms),
                memory=need(full, running, request_context),
                fits=fits,
                sweep=sweep,
                capacity=cap,
                recommendation=rec,
                energy_per_token_j=served.energy_per_token_j,
                avg_power_w=served.avg_power_w,
                engine=info,
            )
        )

    def cost(kind: str, b: int, length: int, totals: dict, activation: int) -> StepCost:
        f = steps[kind]
        return StepCost(
            kind, b, length, totals, activation, f["lat"], f["roof"], f["slices"], f["names"], {}, f["energy"],
            running_on if kind == "decode" else {},
        )  # fmt: skip

    pre_cost = cost("prefill", 1, prompt, engine.step_totals(arch, 1, prompt, prefill=True, dtype=dtype), act(prompt))
    dec_cost = cost("decode", batch, request_context, dec_tot, act(batch))
    depth = {
        "mode": "formula",
        "layers": arch.layers,
        "traced": [],
        "why": "the vllm runtime's kernels come from the config's sizes (predictor.serving_engine); nothing traced",
    }
    longest = max([*grid, request_context, context, prompt, m.max_positions or 0])  # the law holds to the window
    formulas, why_not = engine_formulas(arch, kv, dtype, longest)
    info = LlmServing(
        model=_model_summary(m, layout),
        dtype=dtype,
        kv=kv,
        batch=batch,
        prompt=prompt,
        generate=generate,
        concurrency=concurrency,
        context=context,
        params=arch.params(),
        param_bytes=arch.params() * int(eb),
        prefill=pre_cost,
        decode=dec_cost,
        devices=out,
        contexts=tuple(grid),
        depth=depth,
        assumptions=[*VLLM_ASSUMPTIONS, _profile_assumption(profile)],
        runtime={
            "name": "vllm",
            **_precision(matmul_precision),
            "tensor_parallel": tp,
            "gpu_memory_utilization": utilization,
            "block_size": block_size,
            "weights_per_gpu_bytes": int(weights),
            "params": arch.params(),
            "engine_profile": profile.to_json(),
            "host_params": "the engine profile's figures per device: llm.devices[].engine.host",
            "graph_gap_us": engine.GRAPH_GAP_US,
            "allreduce_latency_us": engine.ALLREDUCE_LATENCY_US,
            "whole_model_prefill": pre_tot,
        },
        formulas=formulas or None,
    )
    kv_bytes = kv.bytes(batch, request_context)
    totals = Totals(
        flops=dec_tot["flops"],
        macs=dec_tot["macs"],
        params=dec_tot["params"],
        param_bytes=dec_tot["param_bytes"],
        peak_activation_bytes=kv_bytes + act(batch),
        bytes_read=dec_tot["bytes_read"],
        bytes_written=dec_tot["bytes_written"],
        op_count=dec_tot["op_count"],
        unsupported={},
        macs_by_dtype={dtype: dec_tot["macs"]},
    )
    summary = Analysis(
        graph=OpGraph(ops=[], sources=[], outputs=[]),
        ops=[],
        totals=totals,
        memory=MemoryProfile((), 0, None, dec_tot["param_bytes"], 0),
        edges=[],
        static_features={},
    )
    report = LlmReport(
        model={"source": m.source, "framework": m.framework, "name": f"{m.name} decode step (vllm runtime)"},
        inputs=[{"name": "input_ids", "shape": [batch, 1], "dtype": "int64"}],
        analysis=summary,
        warnings=[
            f"vllm runtime: the kernels of a decode step of {batch} sequence{'s' if batch != 1 else ''}, counted from "
            "the config's sizes "
            f"(whole model; latencies, energy and memory per GPU of tensor parallel {tp}); no per-operator list",
            f"analysed as if served in {dtype}: weights, activations and the KV cache are {dtype}",
            *why_not,
        ],
    )
    for dev in devices:
        h = profile.host(get_device(dev))
        if h.extrapolates(prompt + generate / 2) and h.context_range:
            lo, hi = h.context_range
            report.warnings.append(
                f"{dev}: the engine's host time per step (engine profile {profile.name}) is fitted on mean live "
                f"contexts of {lo:.0f}-{hi:.0f} tokens; at {prompt + generate / 2:.0f} it is an extrapolation "
                "(docs/llm-serving.md)"
            )
    for d in out:
        if not d.engine["fits_model"]:
            report.warnings.append(
                f"{d.device}: the weights ({weights / 2**30:.1f} GiB per GPU) leave no room for one KV block within "
                f"{utilization:g} of its memory; "
                + (
                    "a larger MIG profile or a whole GPU (a slice has no NVLink for --tensor-parallel)"
                    if get_device(d.device).parent is not None
                    else "raise --tensor-parallel"
                )
            )
        elif not d.fits[serving.FULL_GPU]:
            most = d.engine["memory_per_gpu"][serving.FULL_GPU]["sequences_that_fit"]
            report.warnings.append(_too_many(d.device, batch, request_context, most, "vllm"))
    report.llm = info
    return report
