"""PyTorch frontend: nn.Module + example inputs, `torch.export` `.pt2` files, zoo models.

Route: `torch.export` -> a decomposition of only what TVM cannot convert (attention, linear and
normalisation layers stay whole) -> TVM's `from_exported_program`, parameters kept as function inputs
(never bound as constants) so that shapes, not weights, are what the analysis needs. Operators TVM's
importer lacks or misreads get a conversion through `custom_convert_map` (built in `passes.tvm_ir`), and
an opaque placeholder for the rest so the analysis still runs and lists them in `totals.unsupported`.
A `.pt2` file is checked by `pt2_safety` before torch sees it and loaded in a limited child process.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import AnalysisError, PreflightError, UsageError, one_line
from .isolate import GIB, Limits, restrict_writes, run_isolated
from .loaded import LoadedModel
from .pt2_safety import (  # noqa: F401 - PICKLE_SUFFIXES, refuse_pickle, sniff_pickle: used by frontends.load
    PICKLE_SUFFIXES,
    SAVE_HINT,
    build_exported_program,
    inspect_pt2,
    refuse_pickle,
    sniff_pickle,
)
from .specs import (
    MAX_DIM,
    TOP_LEVEL,
    InputSpec,
    batch_per_input,
    check_fixed_dim,
    printable,
    record_symbol_value,
    resolve_shape,
)

UNCONVERTED_PREFIX = "torch:"  # callee name of placeholders for ATen ops TVM cannot import


def _converters() -> dict[str, Callable]:
    """Conversions TVM's importer lacks or gets wrong, by ATen target (passes.tvm_ir builds them: it owns every
    access to importer internals). Anything else TVM cannot import becomes an opaque placeholder
    (`tvm_ir.opaque_converter`) so the analysis still runs and lists it in `totals.unsupported`."""
    from passes import tvm_ir

    promoting = {t: tvm_ir.float_promoting_converter(t) for t in tvm_ir.TORCH_FLOAT_RESULT_OPS}
    return {
        **promoting,
        "amax.default": tvm_ir.reduce_converter("max"),
        "amin.default": tvm_ir.reduce_converter("min"),
        "any.default": tvm_ir.reduce_converter("max"),  # (a bool tensor's any: its max, one reduction kernel)
        "index.Tensor": tvm_ir.index_tensor_converter,
        "arange.start_step": tvm_ir.arange_converter,
        "randn.default": tvm_ir.random_fill_converter,
        "randn_like.default": tvm_ir.random_fill_converter,
        "rand.default": tvm_ir.random_fill_converter,
        "rand_like.default": tvm_ir.random_fill_converter,
        "div.Tensor_mode": tvm_ir.rounding_div_converter,
        "grouped_mm_fallback.default": tvm_ir.grouped_matmul_converter,  # transformers' MoE experts on CPU
        "_grouped_mm.default": tvm_ir.grouped_matmul_converter,
        "histc.default": tvm_ir.histc_converter,
        # torch's quantized_decomposed ops (a PT2E-quantized program); fused into int8 ops by tvm_ir.fuse_int8
        **dict.fromkeys(QUANTIZE_OPS, tvm_ir.quantize_converter),
        **dict.fromkeys(DEQUANTIZE_OPS, tvm_ir.dequantize_converter),
        "slice.Tensor": tvm_ir.slice_converter,
    }


QUANTIZE_OPS = ("quantize_per_tensor.default", "quantize_per_tensor.tensor", "quantize_per_channel.default")
DEQUANTIZE_OPS = ("dequantize_per_tensor.default", "dequantize_per_tensor.tensor", "dequantize_per_channel.default")


def _whole_op_converters() -> dict[str, Callable]:
    """Conversions of ATen ops kept whole (not decomposed) whose TVM conversion misreads them."""
    from passes import tvm_ir

    return {
        "batch_norm.default": tvm_ir.batch_norm_eval_converter,
        "scaled_dot_product_attention.default": tvm_ir.sdpa_converter,
        "cat.default": tvm_ir.cat_converter,
    }


# ATen ops TVM converts but torch's decomposition represents better: TVM unrolls recurrent layers with an input
# projection per step (and refuses more than one layer); torch's computes it once per layer, as cuDNN does.
_DECOMPOSE_ANYWAY = frozenset({"lstm.input", "gru.input", "rnn_tanh.input", "rnn_relu.input"})


def _targets(ep) -> set[str]:
    return {n.target.__name__ for n in ep.graph.nodes if n.op == "call_function"}


def _decompose_for_tvm(ep, keep: frozenset[str] | set[str]):
    """Decompose only the ATen ops outside `keep` (the ops TVM's importer converts, and ours).

    torch's full core-ATen decomposition re-traces the program and breaks `scaled_dot_product_attention`,
    `linear`, `layer_norm` into their arithmetic; TVM converts those whole. When every op of the exported
    graph is already in `keep` and the graph mutates nothing, the program is imported as exported (no
    re-trace at all).
    """
    import torch

    mutating = any(
        getattr(getattr(n.target, "_schema", None), "is_mutable", False)
        for n in ep.graph.nodes
        if n.op == "call_function"
    )
    signature = ep.graph_signature
    mutates = mutating or signature.buffers_to_mutate or signature.user_inputs_to_mutate
    if _targets(ep) <= keep and not mutates:
        # what the re-trace would have done: drop outputs the module computes but does not return
        if ep.graph_module.graph.eliminate_dead_code():
            ep.graph_module.recompile()
        return ep
    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        name = op.name().split("::", 1)[-1]
        if (name if "." in name else f"{name}.default") in keep:
            table.pop(op)
    return ep.run_decompositions(table)


def _import(ep, converters: dict[str, Callable]):
    """TVM's `from_exported_program` with our conversions and opaque placeholders; (mod, missing ops)."""
    from passes import tvm_ir

    targets = _targets(ep)
    supported = tvm_ir.exported_program_convert_ops()
    custom = {t: converters[t] for t in targets if t in converters}
    missing = sorted(t for t in targets if t not in supported and t not in converters)
    custom.update({t: tvm_ir.opaque_converter(f"{UNCONVERTED_PREFIX}aten.{t}") for t in missing})
    mod = tvm_ir.from_exported_program(ep, custom)
    return mod, missing


def import_exported_program(
    ep,
    *,
    n_inputs: int | None = None,
    sources: dict | None = None,
    weight_names: dict | None = None,
    calls: dict | None = None,
    copies: dict | None = None,
    node_dtypes: dict | None = None,
    dtypes: dict | None = None,
):
    """Relax IRModule of an ExportedProgram, plus the ATen ops that had no conversion.

    Decomposes only what TVM's importer cannot take (`_decompose_for_tvm`): attention stays one
    `relax.nn.attention`, linear and normalisation layers stay whole, and most models skip torch's re-trace.
    If TVM's conversion of a kept op fails (e.g. its multi-layer LSTM), the program is fully decomposed to
    core ATen and imported again. `sources`, when given, is filled with each Relax variable's source (module path
    path, `tvm_ir.recording_fx_sources`); `weight_names` maps the placeholders that carry weights as inputs (a
    meta-device module, `_ParamsAsInputs`) to their parameter names; `calls`, when given with `sources`, is filled
    with each Relax variable's library call (`tvm_ir.library_call_of`: the ops of one `aten.lstm.input`);
    `copies`, when given with `sources`, with the variables eager copies where TVM passes them through (a model's
    `.contiguous()` and `.clone()`: `tvm_ir.eager_copy_of`); `dtypes`, when given with `sources`, with the float
    dtype `node_dtypes` (fx node name -> dtype) gives each variable's node (`tvm_ir.node_dtype`).
    """
    from passes import tvm_ir

    if sources is not None:
        lifted = {
            s.arg.name: s.target
            for s in ep.graph_signature.input_specs
            if s.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR") and getattr(s, "target", None)
        }
        names = {**lifted, **(weight_names or {})}
        with tvm_ir.recording_fx_sources(names, calls, copies, node_dtypes, dtypes) as record:
            out = import_exported_program(ep, n_inputs=n_inputs)
        sources.update(record)
        return out

    converters = _converters()
    whole = {**converters, **_whole_op_converters()}
    keep = (tvm_ir.exported_program_convert_ops() | whole.keys()) - _DECOMPOSE_ANYWAY
    mod = None
    try:
        mod, missing = _import(_decompose_for_tvm(ep, keep), whole)
    except Exception:  # noqa: BLE001 - a kept op TVM cannot convert: fall back to the core-ATen decomposition
        mod = None
    if mod is None:
        tvm_ir.restart_recording()  # the retry names its variables anew
        try:
            ep = ep.run_decompositions()
        except Exception as exc:
            raise AnalysisError(f"torch could not decompose the exported program: {one_line(exc)}") from exc
        try:
            mod, missing = _import(ep, converters)
        except PreflightError:
            raise
        except Exception as exc:
            raise AnalysisError(f"TVM's PyTorch importer failed: {one_line(exc)}") from exc
    mod = tvm_ir.strip_param_data(mod)
    if _targets(ep) & set(DEQUANTIZE_OPS):  # PT2E int8: dequantize -> float conv/linear as int8 ops
        mod, _ = tvm_ir.fuse_int8(mod)
    if n_inputs is None:
        n_inputs = tvm_ir.num_inputs(tvm_ir.main_function(mod))
    return mod, n_inputs, missing


class _ParamsAsInputs:
    """Wraps a module so that its parameters and buffers are graph inputs (for meta-device models).

    TVM's importer copies every parameter's data; a model on the meta device has none. Passing the
    weights as ordinary inputs keeps them symbolic: only their shapes enter the IR.
    """

    @staticmethod
    def wrap(module, n_inputs: int):
        import torch

        names_values = list(module.named_parameters()) + list(module.named_buffers())
        names = [n for n, _ in names_values]

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.__dict__["inner"] = module  # not registered: its weights are not lifted

            def forward(self, *args):
                real, weights = args[:n_inputs], args[n_inputs:]
                return torch.func.functional_call(self.inner, dict(zip(names, weights, strict=True)), real)

        return Wrapper(), [v for _, v in names_values]


class _TensorOutputs:
    """Wraps a module so that it returns only tensors, dropping objects torch.export cannot return.

    A transformers causal LM called with `use_cache=True` (its default) returns a `DynamicCache` with its
    logits; torch.export refuses it ("Found DynamicCache in output"). The wrapper returns the tensors of the
    output (a tuple, a dict or a ModelOutput, flattened in order) and records the type of what it dropped.
    """

    @staticmethod
    def wrap(module):
        import torch

        dropped: list[str] = []

        def tensors(out) -> list:
            if isinstance(out, torch.Tensor):
                return [out]
            if isinstance(out, dict):  # also transformers' ModelOutput
                return [t for v in out.values() for t in tensors(v)]
            if isinstance(out, list | tuple):
                return [t for v in out for t in tensors(v)]
            if out is not None:
                dropped.append(type(out).__name__)
            return []

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = module

            def forward(self, *args):
                out = tensors(self.inner(*args))
                return out[0] if len(out) == 1 else tuple(out)

        return Wrapper(), dropped


def _below(path: str, root: str) -> str:
    """`path` (a module path of the wrapped export) without `root.` (else without `inner.`): `inner.model.encoder`
    below `inner.model` is `encoder`."""
    return path[len(root) + 1 :] if path.startswith(root + ".") else path.removeprefix("inner.")


@contextlib.contextmanager
def _no_stack_traces():
    """torch.export without a Python stack trace per graph node (~15% of its CPU time; preflight never shows them),
    and without fake tensors' own log of a failing op: an export that fails raises, and the user gets one line
    (fake_tensor logs the op's whole chained traceback at ERROR level first, ~100 lines on stderr)."""
    import logging

    import torch.fx.config

    before = torch.fx.config.do_not_emit_stack_traces
    log = logging.getLogger("torch._subclasses.fake_tensor")
    disabled = log.disabled
    torch.fx.config.do_not_emit_stack_traces = True
    log.disabled = True
    try:
        yield
    finally:
        torch.fx.config.do_not_emit_stack_traces = before
        log.disabled = disabled


def _on_meta(module) -> bool:
    return any(p.is_meta for p in module.parameters())


def from_module(
    module,
    example_inputs: Sequence,
    *,
    name: str | None = None,
    framework: str = "torch",
    source: str = "<nn.Module>",
    input_names: Sequence[str] | None = None,
    symbol_axes: Sequence[dict[int, str]] | None = None,
    half_casts: str | None = None,
) -> LoadedModel:
    """Export an nn.Module with its example inputs and import it to Relax.

    `half_casts` ("float16" or "bfloat16"): a float32 module that is costed in that dtype (`dtype="float16"`, the
    zoo's `dtype=float16`): its copy in that dtype (`_as_half`: weights never allocated) is exported as well, so that
    its own float32 casts are known (`LoadedModel.op_dtypes`, `_half_node_dtypes`), as for a module given in it.

    `symbol_axes`, one {axis: symbol name} per example input (e.g. {0: "batch", 1: "seq"}; {} for an input with
    none), exports a symbolic program: each name is one `torch.export.Dim`, left as a shape variable in the Relax
    module; `LoadedModel.symbols` names them and says the range over which the export holds. torch.export
    refuses (AnalysisError) a model whose code fixes such a size (e.g. a state built for the example's batch).
    """
    import torch

    from passes.tvm_boot import prime_backtraces

    prime_backtraces()  # TVM's first native backtrace, on the second core while torch exports (passes.tvm_boot)
    if not isinstance(module, torch.nn.Module):
        raise UsageError("analyze() takes an nn.Module (with example inputs), a file path, or 'zoo:NAME'")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    if not example_inputs:
        raise UsageError("an nn.Module needs example inputs (a tensor or a tuple of tensors)")
    try:
        module = module.eval()
    except NotImplementedError:
        # `ExportedProgram.module()` (and a PT2E-quantized module made from one) refuses train/eval switches: its
        # behaviour was fixed when it was exported, so it is exported again as it is
        pass
    n_inputs = len(example_inputs)
    float_dtype = _float_dtype(module, example_inputs)
    half = None
    if float_dtype is not None:  # TVM's importer cannot import float16 convs: import in float32, retarget after
        half = (module, example_inputs)
        module, example_inputs = _as_float32(module, example_inputs)
    elif half_casts in ("float16", "bfloat16"):
        half = _as_half(module, example_inputs, half_casts)
    tensor_outputs, dropped = _TensorOutputs.wrap(module)
    dynamic = None
    if symbol_axes is not None:
        if len(symbol_axes) != n_inputs:
            raise UsageError(f"symbol_axes holds one {{axis: symbol}} per example input ({n_inputs})")
        # the batch: one named Dim, shared by every input; any other size (a sequence length, which the model's
        # position table bounds): dynamic with the range torch infers
        dims = {
            n: torch.export.Dim(n, min=1, max=MAX_DIM) if n == "batch" else torch.export.Dim.DYNAMIC
            for axes in symbol_axes
            for n in axes.values()
        }
        dynamic = [{a: dims[n] for a, n in axes.items()} or None for axes in symbol_axes]
    nested, hooks = _nested_tensor_encoders(module)
    try:
        ep = _export(tensor_outputs, example_inputs, dynamic)
    except Exception as exc:
        raise AnalysisError(f"torch.export could not export the module: {one_line(exc)}") from exc
    finally:
        for hook in hooks:
            hook.remove()
    node_dtypes = _half_node_dtypes(ep, *half, dynamic) if half is not None else {}
    sources: dict[str, str] = {}
    weight_names = {}
    if _on_meta(module):  # weights enter as inputs after the model's own: name their placeholders
        users = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
        params = [n for n, _ in tensor_outputs.named_parameters()] + [n for n, _ in tensor_outputs.named_buffers()]
        weight_names = dict(zip(users[n_inputs:], params, strict=False))
    calls: dict[str, str] = {}
    copies: dict[str, str] = {}
    dtypes: dict[str, str] = {}
    mod, n_inputs, missing = import_exported_program(
        ep,
        n_inputs=n_inputs,
        sources=sources,
        weight_names=weight_names,
        calls=calls,
        copies=copies,
        node_dtypes=node_dtypes,
        dtypes=dtypes,
    )
    # module paths as the user's model names them: without _TensorOutputs' `inner.` (its own forward: top level),
    # nor a wrapper's attribute that holds the user's model (`preflight_wraps`: the zoo's and config route's
    # transformers wrapper, `model.`)
    root = "inner"
    wraps = getattr(type(module), "preflight_wraps", None)
    if isinstance(wraps, str) and isinstance(getattr(module, wraps, None), torch.nn.Module):
        root = f"inner.{wraps}"
    sources = {k: TOP_LEVEL if v in ("inner", root) else _below(v, root) for k, v in sources.items()}
    warnings = []
    if dropped:
        kinds = ", ".join(sorted(set(dropped)))
        warnings.append(
            f"{type(module).__name__} also returns {kinds} (e.g. a key/value cache with use_cache=True); "
            "analysed the forward that returns only its tensors"
        )
    if nested:
        names = ", ".join(sorted(set(nested)))
        warnings.append(
            f"nn.TransformerEncoder {names} is given a src_key_padding_mask and no mask: in eval, eager PyTorch (with "
            "enable_nested_tensor=True, the default) turns its input into a nested tensor when the mask pads the "
            "end of each sequence, and runs the layers on the unpadded tokens only, after a device-to-host sync; "
            "preflight costs the padded batch (the layers' work at most). Build it with enable_nested_tensor=False "
            "to predict exactly what runs"
        )
    return LoadedModel(
        mod=mod,
        framework=framework,
        name=name or type(module).__name__,
        source=source,
        n_inputs=n_inputs,
        unconverted=missing,
        input_names=tuple(input_names or ()),
        warnings=warnings,
        float_dtype=float_dtype,
        op_sources=sources,
        op_calls=calls,
        op_copies=copies,
        op_dtypes=dtypes,
        symbols=_export_symbols(ep, symbol_axes) if dynamic is not None else {},
    )


def _export(tensor_outputs, example_inputs: tuple, dynamic: list | None):
    """torch.export of a `_TensorOutputs`-wrapped module (a meta-device one with its weights as inputs,
    `_ParamsAsInputs`); `dynamic`: one {axis: Dim} (or None) per example input."""
    import torch

    with torch.inference_mode(False), torch.no_grad(), _no_stack_traces():
        if _on_meta(tensor_outputs):
            wrapper, weights = _ParamsAsInputs.wrap(tensor_outputs, len(example_inputs))
            shapes = None if dynamic is None else ((*dynamic, *([None] * len(weights))),)
            return torch.export.export(wrapper, (*example_inputs, *weights), dynamic_shapes=shapes)
        shapes = None if dynamic is None else (tuple(dynamic),)  # forward(*args): one varargs tuple
        return torch.export.export(tensor_outputs, example_inputs, dynamic_shapes=shapes)


def _half_node_dtypes(ep, module, example_inputs: tuple, dynamic: list | None) -> dict[str, str]:
    """fx node name (of `ep`) -> the float dtype it computes in, for a half-precision `module` whose float32 copy was
    exported as `ep`: what the module's own casts make of its dtypes (Llama's RMSNorm upcasts to float32, which the
    float32 copy's export cannot show: its casts are float32 to float32). The module is exported as it is only where
    `ep` names a float dtype (a cast, a softmax's `dtype=`) or makes a float tensor (`torch.ones(8)`: float32 whatever
    the module's dtype) anywhere; {} where it does not, where that export fails, where it computes nothing in float32,
    or where the two programs' tensor ops (`_tensor_nodes`, in order) differ in number or target (the two exports took
    different paths: a forward that branches on its dtype).

    Otherwise `ep` is made the module's own program, in place: each tensor op reads what its twin (the op at its
    place) reads (a no-op `.to()` in float32 returns its input, and the export then feeds every later use of that
    input from the `to` node), and each cast that changes the dtype in the module's own program becomes a `_to_copy`
    (which torch's decomposition keeps, `tvm_ir.CAST_TARGETS`). Twins are paired by place, not by name: a symbolic
    export's size arithmetic (`sym_size`, integer `mul`) is interleaved differently in the two programs."""
    import torch

    from passes import tvm_ir

    def makes_float(node) -> bool:
        if any(isinstance(a, torch.dtype) and a.is_floating_point for a in [*node.args, *node.kwargs.values()]):
            return True
        val = node.meta.get("val")
        return str(node.target).startswith(_FACTORIES) and isinstance(val, torch.Tensor) and val.is_floating_point()

    if not any(makes_float(n) for n in ep.graph.nodes if n.op == "call_function"):
        return {}
    wrapped, _ = _TensorOutputs.wrap(module)
    before = logging.root.manager.disable
    logging.disable(max(before, logging.WARNING))  # torch logs and prints a failed export's graph (BART's isfinite)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            half = _export(wrapped, example_inputs, dynamic)
    except Exception:  # noqa: BLE001 - the float32 export stands; only the module's own casts are not known
        return {}
    finally:
        logging.disable(before)
    mine, theirs = _tensor_nodes(ep), _tensor_nodes(half)
    paired = _paired(mine, theirs)
    if paired is None:
        return {}
    twin, inserts = paired
    out = {m.name: dtype for h, m in twin.items() if h.op != "output" and (dtype := _float_dtype_of(h))}
    if "float32" not in out.values() and not inserts:  # no float island: the retarget alone is the module
        return {}
    planned = twin | {h: h for _, block in inserts for h in block}  # (validation: the inserted ones will exist)
    for h in (*twin, *(h for _, block in inserts for h in block)):
        if h.op in ("call_function", "output"):
            m = twin.get(h, h)
            if _rewire((m.args, m.kwargs), (h.args, h.kwargs), planned) is _MISMATCH:
                return {}
    vals = {}
    if inserts:
        mode = torch._guards.detect_fake_mode([n.meta.get("val") for n in mine])
        vals = _insert_values(inserts, twin, mode) if mode is not None else None
        if vals is None:
            return {}
    pairs = list(twin.items())
    for anchor, block in inserts:  # ops only the module's own program runs (T5's fp16 clamp, its cast back)
        for h in block:
            twin[h] = _inserted(ep, anchor, h, twin, vals[h])
            if (dtype := _float_dtype_of(h)) is not None:
                out[twin[h].name] = dtype
    wired = {}
    for h, m in pairs:
        if h.op in ("call_function", "output"):
            wired[m] = _rewire((m.args, m.kwargs), (h.args, h.kwargs), twin)
    for m, (args, kwargs) in wired.items():
        m.args, m.kwargs = args, kwargs
    for n in mine:  # the module's own casts
        if str(n.target) not in tvm_ir.CAST_TARGETS or not n.args or not isinstance(n.args[0], torch.fx.Node):
            continue
        was = out.get(n.args[0].name)
        if n.name in out and was is not None and was != out[n.name]:
            n.target, n.args, n.kwargs = torch.ops.aten._to_copy.default, (n.args[0],), {"dtype": torch.float32}
    ep.graph_module.recompile()
    return out


def _paired(mine: list, theirs: list):
    """(twin: each node of `theirs` -> its node of `mine`, inserts: [(the node of `mine` to insert before, the nodes of
    `theirs` only it has)]) for two exports' tensor nodes (`_tensor_nodes`) paired in order by target, where `theirs`
    (the module's own program) may run ops that `mine` (its float32 copy's) does not: a cast the module makes only in
    half precision (T5's norm: `if self.weight.dtype in [torch.float16, torch.bfloat16]`), a clamp it runs only in
    float16. None where `mine` has an op `theirs` lacks, or where the two differ otherwise (a branch on the dtype that
    replaces ops: not the same model), or where an op only `theirs` runs reads a size or is not a call."""
    import difflib

    a, b = [str(n.target) for n in mine], [str(n.target) for n in theirs]
    twin, inserts = {}, []
    # the same ops (Llama, Mistral, OPT): paired by place, no alignment to search
    opcodes = (
        [("equal", 0, len(a), 0, len(b))]
        if a == b
        else difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    )
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            twin.update(zip(theirs[j1:j2], mine[i1:i2], strict=True))
        elif tag != "insert" or not all(_insertable(h) for h in theirs[j1:j2]):
            return None
        elif b[j1 - 1] == b[j2 - 1] or b[j1] == b[j2]:  # the block could sit one op earlier or later (`y * 3` only
            return None  # in half precision between a `y * 2` and a `y * 4`): which op is whose twin is not known
        else:  # (the output node closes both lists: an insert always has a node of `mine` after it)
            inserts.append((mine[i1], [h for h in theirs[j1:j2] if "assert" not in str(h.target)]))
    # twins compute tensors of one shape: an insert aligned one op off (`y * 3` only in half precision, before a
    # `y * 4` both run) pairs ops of the same target but not the same work
    if not all(_same_shape(h, m) for h, m in twin.items()):
        return None
    return twin, inserts


def _insertable(node) -> bool:
    """Whether `node`, an op only the module's own program runs, can be copied into its float32 copy's program: a call
    on tensors (not a factory, which reads none), reading no size (a symbolic export's sizes are the other program's
    own nodes), whose value's shape depends on no tensor's values (`x[x > 1]`)."""
    import torch
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    if node.op != "call_function" or _is_size(node) or not node.all_input_nodes:
        return False
    if any(_is_size(a) for a in node.all_input_nodes):
        return False
    vals = [v for v in torch.utils._pytree.tree_leaves(node.meta.get("val")) if isinstance(v, torch.Tensor)]
    return not any(free_unbacked_symbols(v) for v in vals)


def _same_shape(a, b) -> bool:
    """Whether two exports' nodes compute tensors of one shape (sizes both programs know as numbers compared; a
    symbolic size matches any), or both compute something other than a tensor."""
    import torch

    va, vb = a.meta.get("val"), b.meta.get("val")
    if not (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)):
        return not isinstance(va, torch.Tensor) and not isinstance(vb, torch.Tensor)
    if va.dim() != vb.dim():
        return False
    return all(
        not (isinstance(x, int) and isinstance(y, int)) or x == y for x, y in zip(va.shape, vb.shape, strict=True)
    )


def _insert_call(h, arg):
    """(target, args, kwargs) of the copy of `h` (a node only the module's own program has) in its float32 copy's
    program, each node it reads given by `arg(node)`: a cast becomes a `_to_copy` to float32 and any other half dtype
    it names float32, as everywhere in that program (the importer records the half dtypes apart, `node_dtypes`)."""
    import torch

    def mapped(a):
        if isinstance(a, torch.fx.Node):
            return arg(a)
        if a in (torch.float16, torch.bfloat16):
            return torch.float32
        return a

    if str(h.target) in _CASTS:
        return torch.ops.aten._to_copy.default, (arg(h.args[0]),), {"dtype": torch.float32}
    args, kwargs = torch.fx.node.map_aggregate((h.args, h.kwargs), mapped)
    return h.target, tuple(args), dict(kwargs)


def _insert_values(inserts: list, twin: dict, mode) -> dict | None:
    """The fake value of each op to insert (`_paired`), computed under the float32 export's fake `mode` on its inputs'
    values (a twin's, or an inserted op's before it), before anything is changed; None where one cannot be computed."""
    vals: dict = {}
    try:
        for _, block in inserts:
            for h in block:
                target, args, kwargs = _insert_call(h, lambda a: vals[a] if a in vals else twin[a].meta["val"])
                with mode:
                    vals[h] = target(*args, **kwargs)
    except Exception:  # noqa: BLE001 - not insertable: the float32 route stands alone
        return None
    return vals


def _inserted(ep, anchor, h, twin: dict, val):
    """The copy of `h` (`_insert_call`) in `ep` before `anchor`, reading the twins of what it reads, with the fake
    value `_insert_values` computed for it."""
    target, args, kwargs = _insert_call(h, lambda a: twin[a])
    with ep.graph.inserting_before(anchor):
        node = ep.graph.create_node("call_function", target, args, kwargs)
    node.meta.update({k: v for k, v in h.meta.items() if k in ("nn_module_stack", "stack_trace", "source_fn_stack")})
    node.meta["val"] = val
    return node


#: the casts a half-precision module's own program may run where its float32 copy's does not
_CASTS = ("aten.to.dtype", "aten._to_copy.default", "aten.to.dtype_layout", "aten.type_as.default")

#: the ATen factories whose float tensor a half-precision module makes in the default dtype (float32)
_FACTORIES = ("aten.ones", "aten.zeros", "aten.full", "aten.empty", "aten.arange", "aten.scalar_tensor", "aten.rand",
              "aten.linspace", "aten.eye")  # fmt: skip


def _is_size(node) -> bool:
    """Whether an fx node computes a size (a symbolic export's `sym_size`, integer arithmetic), not a tensor."""
    import torch

    val = node.meta.get("val") if hasattr(node, "meta") else None
    return isinstance(val, int | float | bool | torch.SymInt | torch.SymFloat | torch.SymBool)


def _tensor_nodes(program) -> list:
    """The placeholders, the ops that are not size arithmetic (`_is_size`) and the output of an exported program, in
    order."""
    return [n for n in program.graph.nodes if n.op in ("placeholder", "output") or not _is_size(n)]


def _float_dtype_of(node) -> str | None:
    """The float dtype of an exported program's node ("float16"), from its fake value; None for any other value."""
    import torch

    val = node.meta.get("val")
    return str(val.dtype).removeprefix("torch.") if isinstance(val, torch.Tensor) and val.is_floating_point() else None


_MISMATCH = object()


def _rewire(mine, theirs, twin: dict):
    """`mine` (a node's args and kwargs) reading the tensors `theirs` reads (their twins in `twin`), its constants and
    sizes kept (a float32 program's dtypes stay float32, a symbolic program's sizes its own); `_MISMATCH` where the
    two differ in shape."""
    import torch

    if isinstance(theirs, torch.fx.Node):
        if not isinstance(mine, torch.fx.Node):
            return _MISMATCH
        if _is_size(theirs):
            return mine if _is_size(mine) else _MISMATCH
        return twin.get(theirs, _MISMATCH)
    if isinstance(mine, torch.fx.Node):
        return _MISMATCH
    if isinstance(theirs, tuple | list):
        if not isinstance(mine, tuple | list) or len(mine) != len(theirs):
            return _MISMATCH
        items = [_rewire(a, b, twin) for a, b in zip(mine, theirs, strict=True)]
        return _MISMATCH if any(i is _MISMATCH for i in items) else type(mine)(items)
    if isinstance(theirs, dict):
        if not isinstance(mine, dict) or mine.keys() != theirs.keys():
            return _MISMATCH
        items = {k: _rewire(mine[k], theirs[k], twin) for k in mine}
        return _MISMATCH if any(v is _MISMATCH for v in items.values()) else items
    return mine


def _nested_tensor_encoders(module) -> tuple[list[str], list]:
    """(the paths of the nn.TransformerEncoders a forward calls with a key padding mask, the hooks that record them:
    remove them after the export).

    `nn.TransformerEncoder.forward` with `use_nested_tensor` (`enable_nested_tensor=True`, the default, where its
    first layer allows it) and a `src_key_padding_mask` converts a left-aligned padded batch into a nested tensor in
    eval (`torch._nested_tensor_from_mask`, torch/nn/modules/transformer.py) when no `mask` is given and the padding
    mask pads the end of each sequence, which torch.export never records (the fake tensors of the export fail its
    checks)."""
    import torch

    seen: list[str] = []
    hooks = []
    if not torch.backends.mha.get_fastpath_enabled():
        return seen, hooks
    for path, sub in module.named_modules():
        if not (isinstance(sub, torch.nn.TransformerEncoder) and getattr(sub, "use_nested_tensor", False)):
            continue

        def record(_mod, args, kwargs, path=path or "(the model)"):
            src = kwargs.get("src", args[0] if args else None)
            mask = kwargs.get("mask", args[1] if len(args) > 1 else None)
            padding = kwargs.get("src_key_padding_mask", args[2] if len(args) > 2 else None)
            # (the conditions of TransformerEncoder.forward that the example's sizes decide; the mask's alignment
            # is data, which the export's fake tensors do not hold)
            if padding is not None and mask is None and getattr(src, "ndim", 0) == 3:
                seen.append(path)

        hooks.append(sub.register_forward_pre_hook(record, with_kwargs=True))
    return seen, hooks


def _is_integer(v) -> bool:
    """A finite integer bound of a torch value range (an int or a sympy Integer; not int_oo)."""
    return isinstance(v, int) or bool(getattr(v, "is_Integer", False))


def _export_symbols(ep, symbol_axes: Sequence[dict[int, str]]) -> dict[str, tuple[str, int, int | None]]:
    """The symbolic sizes of an exported program's inputs: torch's symbol name (the Relax shape variable's) ->
    (the Dim's name, lowest, highest) from its range constraints, found through the user inputs' fake tensors.
    A size torch specialised, or made an expression of another, is not listed."""
    import torch

    users = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    vals = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
    names: dict[str, str] = {}
    for user, axes in zip(users, symbol_axes, strict=False):
        shape = getattr(vals.get(user), "shape", ())
        for axis, name in axes.items():
            d = shape[axis] if axis < len(shape) else None
            if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol:
                names[str(d.node.expr)] = name
    out = {}
    for sym, vr in ep.range_constraints.items():
        if str(sym) not in names:
            continue
        lo, hi = vr.lower, vr.upper
        # at least 2: torch specialises size 1 (a graph traced at 2 may drop a broadcast a graph at 1 has)
        lo = max(2, int(lo)) if _is_integer(lo) else 2
        hi = min(int(hi), MAX_DIM) if _is_integer(hi) else MAX_DIM  # int_oo: unbounded
        out[str(sym)] = (names[str(sym)], lo, hi)
    return out


def _float_dtype(module, example_inputs) -> str | None:
    """'float16'/'bfloat16' when the module computes in half precision, else None."""
    import torch

    dtypes = {p.dtype for p in module.parameters() if p.is_floating_point()}
    dtypes |= {t.dtype for t in example_inputs if isinstance(t, torch.Tensor) and t.is_floating_point()}
    half = dtypes & {torch.float16, torch.bfloat16}
    if not half:
        return None
    if len(half) > 1 or torch.float32 in dtypes:
        raise UsageError("the module mixes float dtypes; cast it and its inputs to one dtype")
    return str(half.pop()).removeprefix("torch.")


def _as_half(module, example_inputs, dtype: str, device=None):
    """A copy of a float32 module and its float inputs in `dtype` ("float16", "bfloat16"), for torch.export to trace
    (fake tensors: no value is ever read). Its weights are empty tensors (`torch.empty_like`), on `device` (default:
    each weight's own; "meta" where the program they are paired with has meta stand-ins, `analyzer.llm`): address
    space the system hands out when written, which tracing never does, so a large model is not copied (a weight shared
    by two modules stays shared). None when the module cannot be copied (`copy.deepcopy` refuses it, a lazy module's
    weights have no shape yet...): its own casts are then not known, and the float32 route stands."""
    import copy
    import itertools

    import torch

    to = getattr(torch, dtype)
    try:
        memo: dict[int, torch.Tensor] = {}
        for t in itertools.chain(module.parameters(), module.buffers()):
            if id(t) not in memo:
                empty = torch.empty_like(t, dtype=to if t.is_floating_point() else t.dtype, device=device)
                memo[id(t)] = torch.nn.Parameter(empty, t.requires_grad) if isinstance(t, torch.nn.Parameter) else empty
        copied = copy.deepcopy(module, memo)
        inputs = tuple(
            torch.empty_strided(t.shape, t.stride(), dtype=to, device=device or t.device)  # a view's size at most
            if isinstance(t, torch.Tensor) and t.is_floating_point()
            else t
            for t in example_inputs
        )
    except Exception:  # noqa: BLE001 - only the module's own casts are at stake (the float32 route stands)
        return None
    return copied, inputs


def _as_float32(module, example_inputs):
    """A float32 copy of a half-precision module (on the meta device the copy allocates nothing)."""
    import copy

    import torch

    copied = copy.deepcopy(module).float()
    inputs = tuple(t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in example_inputs)
    return copied, inputs


# --------------------------------------------------------------------------------------------
# .pt2 files: checked by pt2_safety, loaded and imported in a limited child process
# --------------------------------------------------------------------------------------------

PT2_STEP = "torch's .pt2 loader"


def pt2_limits(plan) -> Limits:
    """Resources of the child that loads a checked archive: its parameters' memory (never read), three times
    its buffers and constants (file bytes, torch tensors, the module dump), and 6 GiB of working memory."""
    return Limits(memory=6 * GIB + plan.param_bytes + 3 * plan.data_bytes, file_bytes=64 << 20)


_PT2_LOADS = {"n": 0}


@functools.cache
def _warm_up() -> None:
    """Load, decompose and import a small archive of our own here, once per process, so that every forked
    child starts with torch's and TVM's lazy initialisation and per-operator caches filled for the common
    operators (each child would otherwise pay it again: about 2 s for the first, and per operator). A process
    that loads one archive (the CLI) skips it: its one child pays that once, as an in-process load would."""
    import tempfile

    import torch

    from passes import tvm_ir

    class Warm(torch.nn.Module):  # conv nets and transformers: the operators most models use
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)
            self.emb = torch.nn.Embedding(10, 8)
            self.ln = torch.nn.LayerNorm(8)
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x, ids):
            y = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
            y = torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
            h = self.ln(self.emb(ids))
            q = self.fc(h).view(1, 4, 2, 4).transpose(1, 2)
            a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            h = torch.nn.functional.gelu(self.fc(a.transpose(1, 2).reshape(1, 4, 8))).softmax(-1)
            return y.sum() + torch.tanh(h).mean() + torch.cat([h, h], 1).sum()

    with tempfile.TemporaryDirectory(prefix="preflight-warm-") as tmp:
        path = Path(tmp) / "warm.pt2"
        example = (torch.ones(1, 3, 8, 8), torch.zeros(1, 4, dtype=torch.long))
        torch.export.save(torch.export.export(Warm().eval(), example), path)
        plan = inspect_pt2(path)
        try:
            mod, _, _ = import_exported_program(build_exported_program(plan))
        finally:
            plan.close()
    tvm_ir.load_module(tvm_ir.dump_module(mod))


def load_pt2(path: Path, specs: dict[str, InputSpec], batch: int | None) -> LoadedModel:
    """Load a `torch.export.save` archive safely and import it, binding dynamic dims.

    The archive is checked first (`pt2_safety.inspect_pt2`: no pickles, no compiled code, no string torch
    would evaluate); torch then deserializes it, decomposes it and TVM imports it in a forked child with
    resource limits, which returns the Relax module as bytes.
    """
    mod, meta, plan_warnings = _import_pt2(path)
    n_inputs = meta.get("n_inputs")
    upper = {str(k): int(v) for k, v in dict(meta.get("upper") or {}).items()}
    mod = bind_input_shapes(mod, n_inputs, specs, batch, path.name, upper)
    return _pt2_loaded(path, mod, meta, plan_warnings)


def load_pt2_symbolic(path: Path, specs: dict[str, InputSpec]) -> tuple[LoadedModel, dict[str, int]]:
    """A `torch.export.save` archive imported (as `load_pt2`, checked and isolated) with its dynamic dims left
    symbolic, as the file's own program holds them: no re-export. `LoadedModel.symbols` names each shape variable
    of the inputs: "batch" for the one on dimension 0 of the inputs, "INPUT[AXIS]" (where it first appears) for any
    other, with the range its range constraints give, from 1: unlike a re-export (which torch specialises at size
    1), the file has one program, and binding it at 1 (`load_pt2`) gives the same graph as evaluating it there.
    Returns the loaded model and the values `specs` (`--input`) give the symbols other than the batch.

    UsageError when the file's batch is fixed, an `--input` sets the batch axis (the batch is the symbol) or
    gives a shared symbol two values, or a value lies outside the symbol's range."""
    from passes import tvm_ir

    mod, meta, plan_warnings = _import_pt2(path)
    n_inputs = meta.get("n_inputs")
    upper = {str(k): int(v) for k, v in dict(meta.get("upper") or {}).items()}
    lower = {str(k): int(v) for k, v in dict(meta.get("lower") or {}).items()}
    inputs = tvm_ir.input_dims(mod, n_inputs)
    unknown = set(specs) - {name for name, _, _ in inputs}
    if unknown:
        names = ", ".join(name for name, _, _ in inputs)
        raise UsageError(f"--input names {', '.join(sorted(unknown))} not among the model's inputs: {names}")
    batch_syms = {dims[0] for _, dims, _ in inputs if dims and isinstance(dims[0], str)}
    if len(batch_syms) != 1:
        why = "fixed in the file" if not batch_syms else f"{len(batch_syms)} different sizes ({', '.join(batch_syms)})"
        raise UsageError(
            f"{path.name}: dimension 0 of the inputs is {why}; symbolic analysis takes the batch as its symbol "
            "(export with one torch.export.Dim on dimension 0 of every batched input)"
        )
    users: dict[str, str] = {batch_syms.pop(): "batch"}
    values: dict[str, int] = {}
    for name, dims, dtype in inputs:
        spec = specs.get(name)
        if spec is not None and len(spec.shape) != len(dims):
            raise UsageError(
                f"input '{name}' has {len(dims)} dimensions in {path.name}, --input gives {len(spec.shape)}"
            )
        if spec is not None and spec.dtype is not None and spec.dtype != dtype:
            raise UsageError(
                f"input '{name}' is {dtype} in {path.name}; an exported program fixes its dtypes "
                f"(re-export with {spec.dtype} example inputs)"
            )
        for axis, d in enumerate(dims):
            if not isinstance(d, str):
                check_fixed_dim(name, axis, d, spec, path.name)
                continue
            user = users.setdefault(d, printable(f"{name}[{axis}]"))
            record_symbol_value(values, user, spec, name, axis)
    symbols = {}
    for sym, user in users.items():
        # from 1: the file holds one program, which its concrete analysis binds at batch 1 too (`load_pt2`)
        lo, hi = max(1, lower.get(sym, 1)), min(upper.get(sym, MAX_DIM), MAX_DIM)
        v = values.get(user)
        if v is not None and not lo <= v <= hi:
            raise UsageError(f"{path.name}: '{user}' = {v:,} is outside the range its graph holds for ({lo} to {hi:,})")
        symbols[sym] = (user, lo, hi)
    loaded = _pt2_loaded(path, mod, meta, plan_warnings)
    loaded.symbols = symbols
    return loaded, values


def _pt2_loaded(path: Path, mod, meta: dict, warnings: list[str]) -> LoadedModel:
    """The LoadedModel of an imported archive (`_import_pt2`'s module, bound or not, and its meta)."""
    from passes import tvm_ir

    n_inputs, missing = meta.get("n_inputs"), list(meta.get("missing", []))
    return LoadedModel(
        mod=mod,
        framework="torch",
        name=path.stem,
        source=str(path),
        n_inputs=n_inputs,
        unconverted=missing,
        input_names=tuple(tvm_ir.input_names(mod, n_inputs or 0)),
        warnings=list(warnings),
        op_sources={str(k): str(v) for k, v in dict(meta.get("sources") or {}).items()},
        op_calls={str(k): str(v) for k, v in dict(meta.get("calls") or {}).items()},
        op_copies={str(k): str(v) for k, v in dict(meta.get("copies") or {}).items()},
    )


def _import_pt2(path: Path) -> tuple:
    """(Relax module with the file's dynamic dims, the child's meta, the archive check's warnings): the archive
    checked (`inspect_pt2`), deserialized and imported in an isolated child (`_pt2_in_child`)."""
    plan = inspect_pt2(path)  # first: a file that is no archive is refused before TVM and torch are imported (~3 s)
    from passes import tvm_ir  # before the fork: the child inherits it

    try:
        if _PT2_LOADS["n"]:  # a process that loads several archives (a sweep, the API) forks warm children
            _warm_up()
        _PT2_LOADS["n"] += 1
        result = run_isolated(
            _pt2_in_child,
            (str(path.absolute()), plan),
            label=path.name,
            what=PT2_STEP,
            limits=pt2_limits(plan),
            start="fork",
        )
    finally:
        plan.close()
    try:
        mod = tvm_ir.load_module(result.data)
    except ValueError as exc:
        raise AnalysisError(f"{path.name}: {PT2_STEP} returned no module ({exc})") from exc
    return mod, result.meta, list(plan.warnings)


def _pt2_in_child(path: str, plan=None) -> tuple[dict, bytes]:
    """Child process: deserialize the checked archive, decompose, import; the Relax module as bytes.

    `plan` comes from the parent when forked; a spawned child (no fork on this platform) checks the file itself.
    Landlock, where the kernel has it, lets it write only in its scratch directory (`restrict_writes`).
    """
    from passes import tvm_ir

    restrict_writes(Path(os.getcwd()))  # isolate.py made the child's working directory its scratch directory

    if plan is None:
        plan = inspect_pt2(Path(path))
    ep = build_exported_program(plan)
    tvm_ir.COPY_ORIGINS.update(plan.copy_origins)  # (this child imports one archive)
    sources: dict[str, str] = {}
    calls: dict[str, str] = {}
    copies: dict[str, str] = {}
    mod, n_inputs, missing = import_exported_program(ep, sources=sources, calls=calls, copies=copies)
    # the largest size each dynamic dimension's export holds for (a `Dim(max=...)`); unbounded ones left out
    upper = {str(sym): int(vr.upper) for sym, vr in ep.range_constraints.items() if _is_integer(vr.upper)}
    lower = {str(sym): int(vr.lower) for sym, vr in ep.range_constraints.items() if _is_integer(vr.lower)}
    meta = {
        "n_inputs": n_inputs,
        "missing": missing,
        "sources": sources,
        "calls": calls,
        "copies": copies,
        "upper": upper,
        "lower": lower,
    }
    return meta, tvm_ir.dump_module(mod)


def bind_input_shapes(
    mod,
    n_inputs: int | None,
    specs: dict[str, InputSpec],
    batch: int | None,
    source: str,
    upper: dict[str, int] | None = None,
):
    """Bind the symbolic input dims of a Relax module to the user's `--input` / `--batch` values (the module's
    inputs read by `passes.tvm_ir.input_dims`: name, dims as ints or symbol names, dtype). `upper`: the largest
    value of a symbol the program was exported for (torch.export's range constraints); a larger one is refused."""
    from passes import tvm_ir

    names = tvm_ir.input_names(mod, n_inputs)
    unknown = set(specs) - set(names)
    if unknown:
        raise UsageError(f"--input names {', '.join(sorted(unknown))} not among the model's inputs: {', '.join(names)}")
    values: dict[str, int] = {}
    inputs = tvm_ir.input_dims(mod, n_inputs)
    batches = batch_per_input([file_dims for _, file_dims, _ in inputs], batch)
    for (name, file_dims, dtype), inp_batch in zip(inputs, batches, strict=True):
        spec = specs.get(name)
        if spec is not None and spec.dtype is not None and spec.dtype != dtype:
            raise UsageError(
                f"input '{name}' is {dtype} in {source}; an exported program fixes its dtypes "
                f"(re-export with {spec.dtype} example inputs)"
            )
        shape = resolve_shape(name, file_dims, spec, inp_batch, source)
        for f, v in zip(file_dims, shape, strict=True):
            if isinstance(f, str):
                if f in values and values[f] != v:
                    raise UsageError(f"dimension '{f}' is shared by several inputs and given both {values[f]} and {v}")
                top = (upper or {}).get(f)
                if top is not None and v > top:
                    raise UsageError(
                        f"input '{name}' dimension {file_dims.index(f)} ('{f}') was exported for at most {top:,} "
                        f"in {source}; {v:,} is outside the range its graph holds for (re-export with a larger "
                        f"Dim max)"
                    )
                values[f] = v
    if not values:
        return mod
    try:
        return tvm_ir.bind_symbolic_dims(mod, values)
    except Exception as exc:
        raise AnalysisError(f"could not bind the input shapes: {one_line(exc)}") from exc
