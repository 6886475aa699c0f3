"""ONNX frontend: `.onnx` files (weights inline or in external data files beside the model)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ..errors import (
    AnalysisError,
    MissingShapeError,
    PreflightError,
    UnreadableModelError,
    UnsupportedOperatorsError,
    UsageError,
    one_line,
)
from .loaded import LoadedModel
from .specs import (
    MAX_DIM,
    TOP_LEVEL,
    InputSpec,
    batch_per_input,
    check_fixed_dim,
    printable,
    record_symbol_value,
    resolve_shape,
    short_name,
)


def _check_external_data(model, base: Path, name: str) -> None:
    """Every external-data reference must name a file inside the model's folder and a byte range inside that file
    exactly as long as the tensor's shape and dtype need. Checks the references only: no data is read."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    root = base.resolve()
    for tensor in _get_all_tensors(model):
        if not uses_external_data(tensor):
            continue
        info = {e.key: e.value for e in tensor.external_data}
        loc = info.get("location", "")
        if "\x00" in loc or len(loc) > 4096:
            raise UnreadableModelError(
                f"{name}: external data of tensor '{tensor.name[:80]}' names an impossible file ({loc[:80]!r})"
            )
        try:
            target = (root / loc).resolve()
        except (OSError, RuntimeError, ValueError) as exc:
            raise UnreadableModelError(
                f"{name}: external data of tensor '{tensor.name[:80]}' names a path that cannot be resolved "
                f"({loc[:80]!r}: {one_line(exc)})"
            ) from exc
        if Path(loc).is_absolute() or not target.is_relative_to(root):
            raise UnreadableModelError(
                f"{name}: external data of tensor '{tensor.name}' points outside the "
                f"model's folder ({loc!r}); refusing to read it"
            )
        if not target.is_file():
            raise UnreadableModelError(
                f"{name}: external data file {loc!r} of tensor '{tensor.name}' is missing (keep it beside the model)"
            )
        _check_external_range(tensor, info, target.stat().st_size, name)


def _check_external_range(tensor, info: dict[str, str], file_size: int, name: str) -> None:
    """`offset` and `length` of an external tensor lie inside its file, and `length` is what its shape needs
    (onnx reads the rest of the file when `length` is absent)."""
    try:
        offset = int(info.get("offset") or 0)
        length = int(info["length"]) if info.get("length") else file_size - offset
    except ValueError:
        raise UnreadableModelError(
            f"{name}: external data of tensor '{tensor.name[:80]}' has offset {info.get('offset', '')[:40]!r} "
            f"and length {info.get('length', '')[:40]!r}, not integers"
        ) from None
    if offset < 0 or length < 0 or offset + length > file_size:
        raise UnreadableModelError(
            f"{name}: external data of tensor '{tensor.name[:80]}' lies at bytes {offset:,} to {offset + length:,} "
            f"of a {file_size:,}-byte file; the file is truncated or the reference is corrupt"
        )
    need = tensor_nbytes(tensor)
    if need is not None and length != need:
        raise UnreadableModelError(
            f"{name}: tensor '{tensor.name[:80]}' holds {length} bytes of data, its shape needs {need}"
        )


def tensor_nbytes(t) -> int | None:
    """Bytes of data a TensorProto's dims and dtype need; None for strings and unknown element types."""
    from onnx import helper

    if t.data_type in (0, 8):  # UNDEFINED, STRING
        return None
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return None
    n = 1
    for d in t.dims:
        n *= d
    if t.data_type in (21, 22, 23):  # UINT4, INT4, FLOAT4E2M1 pack two elements per byte
        return (n + 1) // 2
    return n * itemsize


def _check_raw_sizes(model, name: str) -> None:
    """Every initializer's raw bytes must match its shape (onnx < 1.18's checker does not look)."""
    for t in model.graph.initializer:
        if not t.HasField("raw_data"):
            continue
        need = tensor_nbytes(t)
        if need is not None and len(t.raw_data) != need:
            raise UnreadableModelError(
                f"{name}: tensor '{t.name}' holds {len(t.raw_data)} bytes of data, its shape needs {need}"
            )


# Weights the analysis needs only the shape and dtype of: floating-point and 8-bit initializers of the main graph
# of at least SHAPE_ONLY_MIN_BYTES. Their data is never read (external) or dropped once checked (inline), and TVM's
# importer gets uninitialised tensors of their shape. Smaller and integer tensors (Reshape targets, Slice bounds,
# Gather indices) keep their values: converters read them.
_SHAPE_ONLY_TYPES = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64", 2: "uint8", 3: "int8"}
SHAPE_ONLY_MIN_BYTES = 1 << 16
# the typed field an inline tensor of each of those types may hold its values in instead of raw_data
_TYPED_FIELD = {1: "float_data", 11: "double_data"} | dict.fromkeys((10, 16, 2, 3), "int32_data")


def _shape_only(t) -> bool:
    return t.data_type in _SHAPE_ONLY_TYPES and (tensor_nbytes(t) or 0) >= SHAPE_ONLY_MIN_BYTES


def _load_weights_lazily(model, base: Path, name: str) -> None:
    """Leave the large weights' data out of `model`; load every other tensor's external data.

    After this, a tensor is marked `data_location == EXTERNAL` exactly when it is a shape-only main-graph
    initializer (see `passes.tvm_ir.onnx_import`). Inline shape-only tensors are checked against their shape
    (raw bytes or typed values) before their data is dropped. External references were checked by
    `_check_external_data`.
    """
    from onnx import TensorProto
    from onnx.external_data_helper import _get_all_tensors, load_external_data_for_tensor, uses_external_data

    lazy = []
    for t in model.graph.initializer:
        if not _shape_only(t):
            continue
        lazy.append(t)
        if uses_external_data(t):
            continue
        n = 1
        for d in t.dims:
            n *= d
        field = _TYPED_FIELD[t.data_type]
        if t.HasField("raw_data") and len(getattr(t, field)):
            raise UnreadableModelError(f"{name}: tensor '{t.name[:80]}' holds its data twice (raw and {field})")
        held = len(t.raw_data) if t.HasField("raw_data") else len(getattr(t, field))
        need = tensor_nbytes(t) if t.HasField("raw_data") else n
        if held != need:
            unit = "bytes of data" if t.HasField("raw_data") else "values"
            raise UnreadableModelError(f"{name}: tensor '{t.name[:80]}' holds {held} {unit}, its shape needs {need}")
    for t in lazy:
        for f in ("raw_data", "float_data", "int32_data", "double_data", "external_data"):
            t.ClearField(f)
        t.data_location = TensorProto.EXTERNAL
    for t in _get_all_tensors(model):
        if uses_external_data(t) and len(t.external_data):
            load_external_data_for_tensor(t, str(base))
            t.data_location = TensorProto.DEFAULT
            del t.external_data[:]


def _check_model(model, name: str) -> None:
    """onnx's checker on `model` with its shape-only initializers turned into graph inputs of the same type: the
    checker wants data in every initializer; their references and sizes were checked beforehand."""
    import onnx
    from onnx import TensorProto, helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # cheap: shape-only initializers hold no data
    graph = copy.graph
    inputs = {i.name for i in graph.input}
    for i in reversed(range(len(graph.initializer))):
        t = graph.initializer[i]
        if t.data_location == TensorProto.EXTERNAL:
            if t.name not in inputs:
                graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
            del graph.initializer[i]
    try:
        onnx.checker.check_model(copy)
    except Exception as exc:  # ValidationError and friends
        raise UnreadableModelError(f"{name}: invalid ONNX model: {one_line(exc)}") from exc


# window attributes of convolutions and pools: (lowest value, highest value)
_WINDOW_ATTRS = {
    "kernel_shape": (1, MAX_DIM),
    "strides": (1, MAX_DIM),
    "dilations": (1, MAX_DIM),
    "group": (1, MAX_DIM),
    "pads": (0, MAX_DIM),
    "output_padding": (0, MAX_DIM),
    "output_shape": (0, MAX_DIM),
}


def check_nodes(model, name: str) -> None:
    """Refuse what TVM's importer would take at face value: an opset newer than onnx knows, an input element
    type that is not one, input dimensions above MAX_DIM, window attributes out of range (`pads=-5`,
    `kernel_shape=[2**40]`)."""
    import onnx
    from onnx import TensorProto

    newest = onnx.defs.onnx_opset_version()
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx") and not 1 <= op.version <= newest:
            raise UnreadableModelError(
                f"{name}: the model imports ONNX opset {op.version}; this preflight knows opsets 1 to {newest}"
            )
    known = set(TensorProto.DataType.values())
    for inp in model.graph.input:
        t = inp.type.tensor_type
        if t.elem_type not in known:
            raise UnreadableModelError(
                f"{name}: input '{inp.name[:80]}' has element type {t.elem_type}, not an ONNX one"
            )
        if t.elem_type in (TensorProto.STRING,):
            raise UnreadableModelError(f"{name}: input '{inp.name[:80]}' holds strings; preflight analyses tensors")
        for i, d in enumerate(t.shape.dim if t.HasField("shape") else ()):
            if d.HasField("dim_value") and d.dim_value > MAX_DIM:
                raise UnreadableModelError(
                    f"{name}: input '{inp.name[:80]}' dimension {i} is {d.dim_value:,} (at most {MAX_DIM:,})"
                )
    for node in model.graph.node:
        for attr in node.attribute:
            bounds = _WINDOW_ATTRS.get(attr.name)
            if bounds is None:
                continue
            values = list(attr.ints) if attr.ints else ([attr.i] if attr.type == onnx.AttributeProto.INT else [])
            for v in values:
                if not bounds[0] <= v <= bounds[1]:
                    raise UnreadableModelError(
                        f"{name}: node '{(node.name or node.op_type)[:80]}' ({node.op_type}) has {attr.name} {v:,} "
                        f"(from {bounds[0]} to {bounds[1]:,}); the file is corrupt"
                    )


def _file_dims(value_info) -> list[int | str | None]:
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return []
    # a dim_value is static, 0 included (an empty tensor); only a dim_param or an unset dim is dynamic
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


# ONNX ops whose constant input fixes a shape (input index): a first element equal to the file's batch pins it
_SHAPE_INPUTS = {"Reshape": 1, "Expand": 1, "Tile": 1, "ConstantOfShape": 0}


def _constant_values(model, names: set[str]) -> dict:
    """{tensor name: numpy array} of the initializers and Constant nodes' values named in `names` (the shape
    operands: small; the large weights are kept shape-only and never read)."""
    import numpy as np
    from onnx import checker, helper, numpy_helper

    values = {t.name: t for t in model.graph.initializer if t.name in names}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output and node.output[0] in names:
            for attr in node.attribute:
                if attr.name in ("value", "value_ints", "value_int"):
                    values[node.output[0]] = helper.get_attribute_value(attr)
    out = {}
    for name, v in values.items():
        try:
            out[name] = numpy_helper.to_array(v) if hasattr(v, "dims") else np.asarray(v)
        except (TypeError, ValueError, checker.ValidationError):  # numpy cannot read it (external data, shape-only)
            continue
    return out


def _pins(op: str, shape, from_inputs: bool, old: int) -> bool:
    """Whether `op` with the constant shape (Tile: repeats) `shape` hard-codes batch `old`.

    Reshape of the inputs' data to a first dimension `old` pins it, 1 included (`[1, -1]`); -1 and 0 follow the
    input. Expand broadcasts a dimension of 1, so it pins only a batch above 1: an Expand to `[old, ...]`.
    Tile pins when it repeats a constant (a class token) `old` times, above 1; repeats of the inputs' data follow
    their batch. ConstantOfShape pins when it makes a tensor of rank 2 or more whose first dimension is `old`,
    above 1 (a `[1, N]` fill broadcasts; where it cannot, ONNX shape inference fails after the rewrite).
    """
    if not shape.size or int(shape[0]) != old:
        return False
    if op == "Reshape":
        return from_inputs
    if op == "Expand":
        return old != 1
    if op == "Tile":
        return old != 1 and not from_inputs
    return old != 1 and shape.size >= 2  # ConstantOfShape


def _batch_pins(model, inputs: set[str], old: int) -> list[str]:
    """Nodes whose constant shape hard-codes batch `old` (`_pins`), as 'name' (Op to [shape]); `inputs` are the
    graph inputs that carry the batch."""
    operands = {
        node.input[at]
        for node in model.graph.node
        if node.domain in ("", "ai.onnx")
        and (at := _SHAPE_INPUTS.get(node.op_type)) is not None
        and len(node.input) > at
    }
    consts = _constant_values(model, operands)
    derived = set(inputs)
    pins = []
    for node in model.graph.node:
        at = _SHAPE_INPUTS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if at is not None and len(node.input) > at and node.input[at] in consts:
            shape = consts[node.input[at]].reshape(-1)
            from_inputs = bool(node.input) and node.input[0] in derived
            if _pins(node.op_type, shape, from_inputs, old):
                label = f"'{node.name[:80]}'" if node.name else f"writing '{(node.output or ['?'])[0][:80]}'"
                pins.append(printable(f"{label} ({node.op_type} to {[int(d) for d in shape]})"))
        if any(i in derived for i in node.input):
            derived.update(o for o in node.output if o)
    return pins


def _rebatch(model, graph_inputs, specs: dict[str, InputSpec], batch: int | None, name: str):
    """(model, warning): `model` with the fixed batch (dimension 0) of its inputs changed to the one asked for,
    or unchanged (warning None) when nothing asks for a different batch.

    The batch asked for is `--batch`, or else an `--input` whose dimension 0 differs from the file's fixed one while
    its other dimensions agree. Every input whose dimension 0 equals the file's batch is rewritten, the graph's
    value_info and output shapes are dropped and ONNX shape inference re-run. Refused (UsageError naming the node)
    when a constant shape hard-codes the old batch (`_batch_pins`), or when shape inference fails or gives an
    output a dimension 0 that follows neither batch.
    """
    import onnx

    asked: dict[str, tuple[int, int]] = {}  # input -> (file's batch, batch asked for)
    all_dims = [_file_dims(inp) for inp in graph_inputs]
    for inp, dims, want in zip(graph_inputs, all_dims, batch_per_input(all_dims, batch), strict=True):
        if not dims or not isinstance(dims[0], int):
            continue
        spec = specs.get(inp.name)
        if want is None and spec is not None and len(spec.shape) == len(dims):
            rest_ok = all(not isinstance(f, int) or f == u for f, u in zip(dims[1:], spec.shape[1:], strict=True))
            want = spec.shape[0] if rest_ok else None
        if want is not None and want != dims[0]:
            asked[inp.name] = (dims[0], want)
    if not asked:
        return model, None
    pairs = set(asked.values())
    if len(pairs) != 1:
        return model, None  # inputs with different fixed batches: resolve_shape names the conflict
    ((old, new),) = pairs
    if old == 0:
        return model, None
    targets = {i.name for i in graph_inputs if _file_dims(i)[:1] == [old]}
    first = sorted(targets)[0]
    flag = f"--batch {new}" if batch is not None else f"--input {first}:{new}x..."

    def refused(why: str) -> UsageError:
        return UsageError(
            printable(f"{name}: input '{first}' dimension 0 is fixed to {old} in the file; {flag} cannot re-batch it: ")
            + f"{why}; re-export the model with a dynamic batch dimension"
        )

    pins = _batch_pins(model, targets, old)
    if pins:
        more = f" (and {len(pins) - 1} more)" if len(pins) > 1 else ""
        raise refused(f"node {pins[0]} hard-codes the batch{more}")
    graph = model.graph  # (this load's own copy of the file)
    for inp in graph.input:
        if inp.name in targets:
            inp.type.tensor_type.shape.dim[0].dim_value = new
    old_outputs = {o.name: _file_dims(o) for o in graph.output}
    del graph.value_info[:]
    for out in graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    try:
        rebatched = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as exc:  # InferenceError and friends
        raise refused(f"ONNX shape inference fails ({one_line(exc)})") from exc
    for out in rebatched.graph.output:
        before, after = old_outputs.get(out.name, []), _file_dims(out)
        if before[:1] == [old] and after and isinstance(after[0], int) and after[0] != new:
            kept = f"output '{printable(out.name[:80])}' keeps dimension 0 = {after[0]} (a constant fixes it)"
            raise refused(kept)
    inputs = printable(", ".join(sorted(targets)))
    return rebatched, f"re-batched from {old} to {new}: the file fixes dimension 0 of {inputs} to {old}"


# Graph names exporters write whatever the model: torch.onnx.export (both exporters, old and new spellings),
# tf2onnx, paddle2onnx, MXNet, CNTK, and placeholder words. Such a model is named after its file.
GENERIC_GRAPH_NAMES = frozenset(
    {
        "main_graph",
        "torch-jit-export",
        "torch_jit",
        "tf2onnx",
        "model from paddlepaddle.",
        "mxnet_converted_model",
        "cntkgraph",
        "graph",
        "main",
        "model",
        "onnx",
    }
)


def model_name(graph_name: str, path: Path) -> str:
    """The model's name in reports: the ONNX graph's name, or the file's stem when that is empty or generic."""
    return path.stem if graph_name.strip().lower() in GENERIC_GRAPH_NAMES or not graph_name.strip() else graph_name


def node_label(node, index: int) -> str:
    """How reports name ONNX node `index` of the graph: its name, else `<op_type>_<index>` (`Relu_2`)."""
    return short_name(node.name or f"{node.op_type}_{index}")


def _name_scopes(text: str) -> list[str] | None:
    """The list literal torch's dynamo exporter writes into `pkg.torch.onnx.name_scopes` (`['', 'layer1',
    'layer1.0', 'conv2d']`), read as data (never evaluated); None when it is not a list of strings."""
    import ast

    if len(text) > 4096:
        return None
    try:
        scopes = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return scopes if isinstance(scopes, list) and all(isinstance(x, str) for x in scopes) else None


def node_module(node) -> str | None:
    """The PyTorch module path an ONNX node was exported from, where the exporter recorded it, else None.

    torch.onnx's dynamo exporter writes the module stack into the node's metadata (`pkg.torch.onnx.name_scopes`:
    `['', 'layer1', 'layer1.0', 'layer1.0.conv1', 'conv2d']`, the last entry the fx node); the TorchScript
    exporter names nodes by scope (`/layer1/layer1.0/conv1/Conv`: a child of a Sequential is written
    `parent.index`). An op in the model's own forward is `(top level)`."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            scopes = _name_scopes(prop.value)
            if scopes:
                module = scopes[-2] if len(scopes) >= 2 else ""
                return short_name(module) if module else TOP_LEVEL
    name = node.name
    if not name.startswith("/") or len(name) > 4096:
        return None
    segments = [s for s in name.split("/")[1:-1] if s]
    path: list[str] = []
    for i, seg in enumerate(segments):
        parent, _, last = seg.rpartition(".")
        path.append(last if i and parent and parent == segments[i - 1] else seg)
    return short_name(".".join(path)) if path else TOP_LEVEL


# Constant's scalar and list attributes (opset 12+) as the tensor they stand for: (numpy dtype, is a list)
_CONSTANT_FORMS = {"value_int": ("int64", False), "value_ints": ("int64", True),
                   "value_float": ("float32", False), "value_floats": ("float32", True)}  # fmt: skip


def _constants_as_tensors(model) -> None:
    """Rewrite, in place, `Constant` nodes written with `value_int(s)` / `value_float(s)` (onnxscript and the
    unoptimised dynamo exporter write them) to the `value` tensor form, the only one TVM's importer reads."""
    import numpy as np
    from onnx import helper, numpy_helper

    for node in model.graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1:
            continue
        attr = node.attribute[0]
        form = _CONSTANT_FORMS.get(attr.name)
        if form is None:
            continue
        dtype, is_list = form
        raw = helper.get_attribute_value(attr)
        value = np.asarray(list(raw) if is_list else raw, dtype=dtype)
        del node.attribute[:]
        node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(value)))


# Integer and boolean values computed from constants alone are folded before TVM's import (`fold_constant_indices`)
# when each holds at most this many elements: the shape, index and mask arithmetic legacy (TorchScript-based) exports
# write out, which TVM's converters mis-type (an Expand to a shape computed by Where/Equal/ConstantOfShape is
# "broadcast_to ... target shape has ndim 0").
FOLD_ELEMENTS = 1 << 16
_FOLD_TYPES = {2, 3, 4, 5, 6, 7, 9, 12, 13}  # TensorProto UINT8, INT8, UINT16, INT16, INT32, INT64, BOOL, UINT32/64
_NO_FOLD = frozenset({"If", "Loop", "Scan", "SequenceMap", "RandomNormal", "RandomUniform", "RandomNormalLike"})
_NO_FOLD |= frozenset({"RandomUniformLike", "Multinomial", "Bernoulli", "Constant"})
# Float size arithmetic (`_size_floats`) folds only through these cheap elementwise and shape ops, each float input
# and output of at most `SIZE_FLOAT_ELEMENTS` elements: a Conv or MatMul of two small weights feeding a Cast to int64
# would otherwise be run by the reference evaluator at any cost (a 1x1x128x128 Conv with pads=63: 6 GB, 15 s).
SIZE_FLOAT_ELEMENTS = 64
_SIZE_FLOAT_OPS = frozenset({"Div", "Mul", "Add", "Sub", "Ceil", "Floor", "Round", "Neg", "Abs", "Sqrt", "Min", "Max"})
_SIZE_FLOAT_OPS |= frozenset({"Cast", "Unsqueeze", "Squeeze", "Concat", "Gather", "Reshape", "Identity", "Shape"})
_SIZE_FLOAT_OPS |= frozenset({"Constant"})


def _small_constants(model) -> dict:
    """{value name: TensorProto} of the graph's constants of at most `FOLD_ELEMENTS` elements: `Constant` nodes (default
    domain, one `value`) and initializers whose data is in the file and that no graph input overrides at run time."""
    import numpy as np

    graph_inputs = {i.name for i in model.graph.input}
    out = {}
    for init in model.graph.initializer:
        size = int(np.prod(list(init.dims), dtype=object))
        if init.name not in graph_inputs and size <= FOLD_ELEMENTS and init.data_location != 1:
            out[init.name] = init
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.attribute) == 1:
            attr = node.attribute[0]
            if attr.name == "value" and len(node.output) == 1:
                if int(np.prod(list(attr.t.dims), dtype=object)) <= FOLD_ELEMENTS:
                    out[node.output[0]] = attr.t
    return out


def fold_constant_indices(model) -> int:
    """Replace, in place, each node of the default domain whose every input is a constant (a `Constant` node, an
    initializer with its data of at most `FOLD_ELEMENTS` elements that is no graph input, or a value folded before)
    and whose every output is an integer or boolean tensor of at most `FOLD_ELEMENTS` elements by `Constant` nodes
    of its values; returns how many nodes were folded.

    Each node's output shapes are inferred first (onnx's shape inference with data propagation, on a graph of that
    node alone); a node whose outputs cannot be shown small is left as it is. Values come from onnx's reference
    evaluator (numpy; no code from the file). Float arithmetic is folded only where it is size arithmetic: every
    output only feeds, through more such nodes, `Cast`s to an integer type (`_size_floats`; MobileViT's legacy
    export writes `int(math.ceil(h / p) * p)` as `Cast(Mul(Ceil(Div(...))))` on float scalars). Other float
    arithmetic on constants stays: its FLOPs are counted where the file has them.
    """
    import numpy as np
    from onnx import helper, numpy_helper, shape_inference
    from onnx.reference import ReferenceEvaluator

    known: dict[str, object] = dict(_small_constants(model))  # value name -> numpy array (a TensorProto: parsed on use)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)

    def value(name):
        v = known[name]
        if not isinstance(v, np.ndarray):
            v = known[name] = numpy_helper.to_array(v)
        return v

    def small_float_step(node, ins) -> bool:
        """Whether `node` (with an output in `size_floats`) is an allowed size op whose float inputs each hold at most
        `SIZE_FLOAT_ELEMENTS` elements (its float outputs are checked after shape inference)."""
        if node.op_type not in _SIZE_FLOAT_OPS:
            return False
        for name in ins:
            v = known[name]
            if isinstance(v, np.ndarray):
                is_float, size = v.dtype.kind not in "biu", v.size
            else:
                is_float, size = v.data_type not in _FOLD_TYPES, int(np.prod(list(v.dims), dtype=object))
            if is_float and size > SIZE_FLOAT_ELEMENTS:
                return False
        return True

    folded = 0
    nodes = list(model.graph.node)
    size_floats = _size_floats(model)
    out_nodes = []
    for node in nodes:
        ins = [i for i in node.input if i]
        if (
            node.domain not in ("", "ai.onnx")
            or node.op_type in _NO_FOLD
            or not ins
            or not all(i in known for i in ins)
            or any(a.type in (5, 10) for a in node.attribute)  # GRAPH, GRAPHS
            or (any(o in size_floats for o in node.output) and not small_float_step(node, ins))
        ):
            out_nodes.append(node)
            continue
        try:
            consts = [numpy_helper.from_array(value(i), i) for i in dict.fromkeys(ins)]
            outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
            one = helper.make_graph([node], "fold", [], outputs, initializer=consts)
            one_model = helper.make_model(one, opset_imports=[helper.make_opsetid("", opset)])
            one_model.ir_version = model.ir_version
            inferred = shape_inference.infer_shapes(one_model, strict_mode=True, data_prop=True)
        except Exception:  # noqa: BLE001 - onnx raises many types; the node is left as it is
            out_nodes.append(node)
            continue
        small = True
        for vi in inferred.graph.output:
            tt = vi.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if tt.elem_type not in _FOLD_TYPES and vi.name not in size_floats:
                small = False
            elif not tt.HasField("shape") or None in dims:
                small = False
            elif int(np.prod(dims, dtype=object)) > FOLD_ELEMENTS:
                small = False
            elif tt.elem_type not in _FOLD_TYPES and int(np.prod(dims, dtype=object)) > SIZE_FLOAT_ELEMENTS:
                small = False
        if not small or len(inferred.graph.output) != len([o for o in node.output if o]):
            out_nodes.append(node)
            continue
        try:
            results = ReferenceEvaluator(one_model).run(None, {})
        except Exception:  # noqa: BLE001 - a node the reference evaluator cannot run stays for TVM
            out_nodes.append(node)
            continue
        outs = [o for o in node.output if o]
        if any(np.asarray(r).size > FOLD_ELEMENTS for r in results):
            out_nodes.append(node)
            continue
        for name, result in zip(outs, results, strict=True):
            arr = np.asarray(result)
            known[name] = arr
            out_nodes.append(
                helper.make_node(
                    "Constant",
                    [],
                    [name],
                    name=f"{node.name or node.op_type}_folded_{name}"[:200],
                    value=numpy_helper.from_array(arr, name),
                )
            )
        folded += 1
    if folded:
        del model.graph.node[:]
        model.graph.node.extend(out_nodes)
    return folded


def _size_floats(model) -> set[str]:
    """Names of the values of `model`, each the output of a node in `_SIZE_FLOAT_OPS`, whose every use, through nodes
    of the default domain in `_SIZE_FLOAT_OPS` whose outputs are all such values, ends in a `Cast` to an integer or
    boolean type (the float steps of a size computed as `int(math.ceil(h / p))`); a graph output or a value read by
    any other node is not one. One pass over the nodes in reverse order (an ONNX graph is topologically sorted), so
    the cost is linear in the graph."""
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for name in dict.fromkeys(i for i in node.input if i):
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in model.graph.output}
    sized: set[str] = set()

    def to_size(node) -> bool:
        if node.domain not in ("", "ai.onnx") or node.op_type not in _SIZE_FLOAT_OPS:
            return False
        if node.op_type == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            return to in _FOLD_TYPES or (node.output[0] in sized)
        outs = [o for o in node.output if o]
        return bool(outs) and all(o in sized for o in outs)

    for node in reversed(model.graph.node):
        if node.op_type not in _SIZE_FLOAT_OPS:
            continue  # a Conv or MatMul read only by an int Cast is no size arithmetic: never folded
        for name in node.output:
            uses = consumers.get(name)
            if name and uses and name not in outputs and all(to_size(c) for c in uses):
                sized.add(name)
    return sized


def fold_static_shapes(model, shape_dict: dict[str, list[int]]) -> int:
    """`_fold_static_shapes` until it folds nothing more (at most 8 rounds): a folded `k` lets shape inference see the
    shape of a `TopK`'s output, whose `Shape` the next round folds (ViTMAE's argsort of its noise, twice)."""
    total = 0
    for _ in range(8):
        done = _fold_static_shapes(model, shape_dict)
        if not done:
            break
        total += done
    return total


def _fold_static_shapes(model, shape_dict: dict[str, list[int]]) -> int:
    """Replace, in place, each `Shape` node (default domain) whose input's shape onnx's shape inference shows static
    at the input shapes `shape_dict` (input name -> dims) by a `Constant` (int64, its `start`/`end` slice), then fold
    the integer chains that follow (`fold_constant_indices`); returns how many nodes were replaced in all.

    Legacy exports compute sizes from `Shape` at run time (Mamba's `chunk` bounds, RWKV's padding, ViTMAE's number of
    kept patches, the `k` of its `TopK`); TVM's converters take a `Shape` of a tensor whose shape they lost as a
    run-time `shape_of` and then fail ("shape_of expects a tensor input, but received R.Shape"). Shape inference runs
    on a copy of the graph without weight data (initializers of more than `FOLD_ELEMENTS` elements become typed
    inputs), so its cost does not grow with the weights. The folded file holds these shapes: it is only valid at
    `shape_dict`, which is what preflight analyses."""
    import numpy as np
    from onnx import GraphProto, helper, numpy_helper, shape_inference

    shape_nodes = [n for n in model.graph.node if n.op_type == "Shape" and n.domain in ("", "ai.onnx")]
    if not shape_nodes:
        return 0
    graph = GraphProto()
    graph.name = model.graph.name
    graph.node.extend(model.graph.node)
    if all(isinstance(d, int) for dims in shape_dict.values() for d in dims):
        graph.output.extend(model.graph.output)
    else:  # symbolic sizes: a declared output dim (a batch of 1 where only the inputs were made dynamic) would win
        # over the inferred symbol and be folded as static
        graph.output.extend(helper.make_empty_tensor_value_info(o.name) for o in model.graph.output)
    inits = {t.name for t in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        dims = shape_dict.get(inp.name)
        elem = inp.type.tensor_type.elem_type or 1
        graph.input.append(helper.make_tensor_value_info(inp.name, elem, dims) if dims is not None else inp)
    for t in model.graph.initializer:
        if int(np.prod(list(t.dims), dtype=object)) <= FOLD_ELEMENTS and t.data_location != 1:
            graph.initializer.append(t)
        else:
            graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    copy = helper.make_model(graph, opset_imports=model.opset_import)
    copy.ir_version = model.ir_version
    try:
        inferred = shape_inference.infer_shapes(copy, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - onnx raises many types; nothing is folded
        return 0
    shapes: dict[str, list[int]] = {k: v for k, v in shape_dict.items() if all(isinstance(d, int) for d in v)}
    partial: dict[str, list[int | None]] = {}  # value name -> dims, None where not static
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            partial.setdefault(vi.name, dims)
            if None not in dims:
                shapes.setdefault(vi.name, dims)
    gathered = _static_dims_gathered(model, shape_nodes, shapes, partial)
    replaced = 0
    out_nodes = []
    for node in model.graph.node:
        dims = shapes.get(node.input[0]) if node in shape_nodes else None
        value = gathered.get(node.output[0]) if node.op_type == "Gather" else None
        if dims is None and value is None:
            out_nodes.append(node)
            continue
        if value is None:
            attrs = {a.name: a.i for a in node.attribute}
            rank = len(dims)
            start, end = attrs.get("start", 0), attrs.get("end", rank)
            value = np.array(dims[slice(start, end)], dtype=np.int64)
        name = node.output[0]
        folded = helper.make_node(
            "Constant",
            [],
            [name],
            name=f"{node.name or 'Shape'}_static"[:200],
            value=numpy_helper.from_array(value, name),
        )
        out_nodes.append(folded)
        replaced += 1
    if replaced:
        del model.graph.node[:]
        model.graph.node.extend(out_nodes)
        replaced += fold_constant_indices(model)
    return replaced


def _static_dims_gathered(model, shape_nodes: list, static: dict[str, list[int]], partial: dict[str, list]) -> dict:
    """{output name: int64 array} for each `Gather` (default domain) that reads, at constant indices, only dims that
    onnx's shape inference shows static from a `Shape` whose input is not static as a whole: with a symbolic batch,
    ShuffleNet's `chunk` takes `Gather(Shape(x), 1)` (the channels) through `Add`, `Div` and `Mul` into its `Slice`
    bounds, which TVM's importer then computes at run time and loses the shape of what follows. The value does not
    depend on the dynamic dims, so the file stays valid at every size."""
    import numpy as np
    from onnx import numpy_helper

    of_shape = {}  # Shape output name -> its input's dims (None where not static), sliced by start/end
    for node in shape_nodes:
        dims = partial.get(node.input[0])
        if dims is None or node.input[0] in static:
            continue
        attrs = {a.name: a.i for a in node.attribute}
        of_shape[node.output[0]] = dims[slice(attrs.get("start", 0), attrs.get("end", len(dims)))]
    if not of_shape:
        return {}
    consts = _small_constants(model)
    out = {}
    for node in model.graph.node:
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        dims, idx = of_shape.get(node.input[0]), consts.get(node.input[1])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if dims is None or idx is None or axis != 0:
            continue
        k = numpy_helper.to_array(idx)
        if k.dtype.kind not in "iu" or k.size > len(dims) or ((k < -len(dims)) | (k >= len(dims))).any():
            continue
        picked = [dims[int(i)] for i in k.reshape(-1)]
        if None not in picked:
            out[node.output[0]] = np.array(picked, dtype=np.int64).reshape(k.shape)
    return out


# ONNX operands that set shapes, axes or counts (op type -> input slot -> what it sets): TVM's importer needs
# them as constants, and so does any static analysis
_SHAPE_OPERANDS = {
    "Reshape": {1: "a shape"},
    "Expand": {1: "a shape"},
    "ConstantOfShape": {0: "a shape"},
    "Tile": {1: "repeat counts"},
    "Slice": {1: "slice starts", 2: "slice ends", 3: "slice axes", 4: "slice steps"},
    "Pad": {1: "pads", 3: "pad axes"},
    "Resize": {1: "a region of interest", 2: "scales", 3: "sizes"},
    "Upsample": {1: "scales"},
    "TopK": {1: "k"},
    "Split": {1: "split sizes"},
    "Squeeze": {1: "axes"},
    "Unsqueeze": {1: "axes"},
    "OneHot": {1: "a depth"},
    "CumSum": {1: "an axis"},
    "Range": {0: "a start", 1: "a limit", 2: "a delta"},
    "Trilu": {1: "a diagonal offset"},
    "CenterCropPad": {1: "a shape"},
    "AffineGrid": {1: "a size"},
    **{
        op: {1: "axes"}
        for op in (
            "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
            "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
        )
    },
}  # fmt: skip


#: ONNX ops preflight costs as one library call (cuDNN's RNN, as ONNX Runtime's CUDA provider and, for the nn.LSTM /
#: nn.GRU / nn.RNN a torch export writes them from, eager PyTorch run them): `LoadedModel.op_calls`.
LIBRARY_CALL_NODES = frozenset({"LSTM", "GRU", "RNN"})


# the fx node torch's dynamo exporter records for each ONNX node (`pkg.torch.onnx.fx_node`: "%baddbmm : [num_users=1] =
# call_function[target=torch.ops.aten.baddbmm.default](...)"): its name and target, matched on a bounded prefix
_FX_NODE = re.compile(r"%([A-Za-z_]\w{0,127}) : [^\n]{0,256}?call_function\[target=torch\.ops\.([\w.]{1,128})\]")


def fx_blas_call(node) -> str | None:
    """ "aten.baddbmm.default:<fx node>" for an ONNX node torch's dynamo exporter wrote for one op eager runs as a BLAS
    call (`passes.graph.BLAS_CALL_OPS`: its `MatMul`, `Mul` and `Add` of one `baddbmm`, each recording that fx node
    in `pkg.torch.onnx.fx_node`), as the PyTorch routes label the same ops (`passes.tvm_ir.library_call_of`); None
    for any other node. The metadata is text from the file: matched, never evaluated."""
    from passes.graph import BLAS_CALL_OPS

    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.fx_node":
            m = _FX_NODE.match(prop.value[:1024])
            if m is not None and m.group(2) in BLAS_CALL_OPS:
                return f"{m.group(2)}:{m.group(1)}"
    return None


def _library_calls(nodes, recorded: dict[str, int], labels: dict[int, str]) -> dict[str, str]:
    """Relax variable -> library-call label ("" for none) of the ONNX nodes run as one library call: a recurrent node
    (`LIBRARY_CALL_NODES`) is one call ("onnx.LSTM:<node label>"); where the exporter recorded the PyTorch module
    it comes from (`node_module`), every node of that module is part of one call ("onnx.rnn:<module path>"): a torch
    export writes an `nn.LSTM` of L layers as L nodes with transposes, reshapes and concats of the states between
    them, all of which eager PyTorch runs inside its one `_cudnn_rnn` (the `nn.Module` route's one call). The nodes
    of one `baddbmm` torch's dynamo exporter wrote are one BLAS call (`fx_blas_call`)."""

    def is_rnn(node) -> bool:
        return node.domain in ("", "ai.onnx") and node.op_type in LIBRARY_CALL_NODES

    rnn_modules = {m for n in nodes if is_rnn(n) and (m := node_module(n)) is not None}
    out = {}
    for var, i in recorded.items():
        module = node_module(nodes[i]) if rnn_modules else None
        if module is not None and module in rnn_modules:
            out[var] = f"onnx.rnn:{module}"
        else:
            out[var] = f"onnx.{nodes[i].op_type}:{labels[i]}" if is_rnn(nodes[i]) else fx_blas_call(nodes[i]) or ""
    return out


def _fed_operands(model, graph_inputs) -> str | None:
    """'input NAME sets OPERAND of OP node NODE' for the first graph input that feeds a shape-like operand
    (`_SHAPE_OPERANDS`) directly, or None."""
    names = {i.name for i in graph_inputs}
    for node in model.graph.node:
        for slot, what in _SHAPE_OPERANDS.get(node.op_type, {}).items():
            if slot < len(node.input) and node.input[slot] in names:
                label = printable((node.name or node.op_type)[:60])
                return f"input '{printable(node.input[slot][:60])}' sets {what} of {node.op_type} node '{label}'"
    return None


def _long_recurrence(model, shape_dict: dict[str, list[int]], name: str) -> tuple[int, str] | None:
    """(steps, the refusal) for the first LSTM, GRU or RNN fed by a graph input whose sequence is longer than
    preflight unrolls (`passes.tvm_ir.MAX_RECURRENT_STEPS`), found before the import; None if there is none (the
    converter raises `LongRecurrence` for the others). Shapes are `shape_dict`'s."""
    from onnx import helper

    from passes.tvm_ir import MAX_RECURRENT_STEPS

    for node in model.graph.node:
        if node.op_type not in ("LSTM", "GRU", "RNN") or not node.input or node.input[0] not in shape_dict:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        shape = shape_dict[node.input[0]]
        if len(shape) != 3:
            continue
        steps = shape[1] if attrs.get("layout", 0) else shape[0]
        dirs = 2 if attrs.get("direction", b"forward") == b"bidirectional" else 1
        if steps * dirs > MAX_RECURRENT_STEPS:
            label = printable((node.name or node.op_type)[:80])
            return steps, (
                f"{name}: {node.op_type} node '{label}': a sequence of {steps:,} steps"
                f"{' in 2 directions' if dirs == 2 else ''} is more than preflight unrolls ({MAX_RECURRENT_STEPS:,} "
                f"per node)"
            )
    return None


# The step counts a model with a recurrence longer than preflight unrolls is analysed at (evenly spaced: two to
# extrapolate from, the third to check; `passes.analysis.extrapolate_steps`). At least 12 so that no tensor sized
# by the sequence (T x dirs x B x H) has a step's size (at most 8 x B x H for a bidirectional LSTM's gates), which
# would merge their kernels.
STEP_SAMPLES = (12, 13, 14)
_MAX_SCANNED_CONSTANT = 4096  # integer constants longer than this are data, not shapes: not scanned for T


def _full_sequence_lens(model, steps: int) -> list:
    """The initializers that are only the `sequence_lens` input of recurrent nodes and hold `steps` for every
    batch row (every sequence runs the whole length): they follow the sequence when it is shortened."""
    import numpy as np
    from onnx import numpy_helper

    lens = {n.input[4] for n in model.graph.node if n.op_type in ("LSTM", "GRU", "RNN") and len(n.input) > 4}
    other = {i for n in model.graph.node for k, i in enumerate(n.input) if not (k == 4 and i in lens)}
    out = []
    for t in model.graph.initializer:
        if t.name in lens and t.name not in other and t.data_type in (6, 7) and len(t.dims) == 1:
            if t.dims[0] <= _MAX_SCANNED_CONSTANT and np.all(numpy_helper.to_array(t) == steps):
                out.append(t)
    return out


def _sequence_in_constants(model, steps: int, skip=()) -> str | None:
    """The name of an integer constant of `model` holding a multiple of `steps` (a shape or length with the
    sequence written into the graph, which a shorter sequence would contradict), or None. `skip`: names not
    looked at."""
    import numpy as np
    from onnx import numpy_helper

    tensors = [t for t in model.graph.initializer if t.name not in skip]
    tensors += [a.t for n in model.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
    for t in tensors:
        if t.data_type not in (6, 7) or not 0 < np.prod(t.dims, dtype=np.int64) <= _MAX_SCANNED_CONSTANT:
            continue  # INT32, INT64 only
        try:
            v = numpy_helper.to_array(t).astype(np.int64).ravel()
        except Exception:  # noqa: BLE001 - an external or malformed tensor: nothing to read here
            continue
        if np.any((v >= steps) & (v % steps == 0)):
            return printable(t.name[:60]) or "a Constant"
    return None


def load_onnx(path: Path, specs: dict[str, InputSpec], batch: int | None) -> LoadedModel:
    """Read, validate and import an ONNX file with static input shapes."""
    model, graph_inputs = _read_checked(path, specs)
    initializers = {t.name for t in model.graph.initializer}
    model, rebatched = _rebatch(model, graph_inputs, specs, batch, path.name)
    if rebatched:
        graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    shape_dict = {}
    all_dims = [_file_dims(inp) for inp in graph_inputs]
    for inp, dims, inp_batch in zip(graph_inputs, all_dims, batch_per_input(all_dims, batch), strict=True):
        shape_dict[inp.name] = list(resolve_shape(inp.name, dims, specs.get(inp.name), inp_batch, path.name))
    dtype_dict, retyped = _input_dtypes(graph_inputs, specs, path.name)

    _constants_as_tensors(model)
    fold_constant_indices(model)
    from passes.tvm_ir import LongRecurrence, defines_shape_vars, has_unknown_rank

    long = _long_recurrence(model, shape_dict, path.name)
    if long is None:
        try:
            loaded = _imported(model, shape_dict, dtype_dict, graph_inputs, retyped, path, rebatched)
            unknown = defines_shape_vars(loaded.mod) or has_unknown_rank(loaded.mod)
            if not unknown or not fold_static_shapes(model, shape_dict):
                return loaded
            # a dimension computed at run time from `Shape` (RWKV's `Range`, a one-layer Mamba's `Slice` bounds):
            # static at these input shapes
            try:
                return _imported(model, shape_dict, dtype_dict, graph_inputs, retyped, path, rebatched)
            except PreflightError:
                return loaded
        except LongRecurrence as exc:
            long = exc.steps, f"{path.name}: {exc}"
        except (AnalysisError, MissingShapeError):  # a size computed by `Shape` at run time may be static here
            if not fold_static_shapes(model, shape_dict):
                raise
            try:
                return _imported(model, shape_dict, dtype_dict, graph_inputs, retyped, path, rebatched)
            except LongRecurrence as exc:
                long = exc.steps, f"{path.name}: {exc}"
    return _sampled_steps(model, shape_dict, dtype_dict, graph_inputs, retyped, path, rebatched, *long)


# ops that run once per time step of a sequence: a symbolic import would need the step count as a number
_STEPPED_OPS = ("LSTM", "GRU", "RNN", "Loop", "Scan")
#: dim_params an exporter makes up for an unnamed dynamic dim (paddle2onnx: one per dimension): named by input and
#: axis instead, as an unnamed dim is (the symbols are the same either way: one per dim_param)
#: how to make a file whose batch is fixed symbolic (the Paddle frontend says it in Paddle's terms)
DYNAMIC_BATCH_HINT = "export with a dynamic batch: dynamic_axes or dynamic_shapes"
_GENERATED_DIM = re.compile(r"DynamicDimension\.\d+")


def load_onnx_symbolic(path: Path, specs: dict[str, InputSpec]) -> tuple[LoadedModel, dict[str, int]]:
    """An ONNX file imported once with its dynamic input dims left symbolic (TVM's importer keeps each as a shape
    variable): the same checks as `load_onnx`, no re-batching. `LoadedModel.symbols` names each: "batch" for
    dimension 0 of the inputs whose dimension 0 is dynamic (one symbol: a batch is one size), any other by its
    `dim_param` (one symbol per name, as ONNX means it) or, unnamed (or named by paddle2onnx, `_GENERATED_DIM`),
    "INPUT[AXIS]"; each holds from 2 (the
    importer specialises a size of 1, below) up to MAX_DIM. Returns the loaded model and the values `specs`
    (`--input`) give the symbols other than the batch.

    UsageError when no input's dimension 0 is dynamic, an `--input` sets the batch axis or gives a symbol two
    values; AnalysisError when the graph has per-step ops (`_STEPPED_OPS`) or computes a size at run time."""
    from passes.tvm_ir import defines_shape_vars, has_unknown_rank

    model, graph_inputs = _read_checked(path, specs)
    all_dims = [_file_dims(inp) for inp in graph_inputs]
    if not any(dims and not isinstance(dims[0], int) for dims in all_dims):
        raise UsageError(
            f"{path.name}: dimension 0 of the inputs is fixed in the file; symbolic analysis takes the batch as its "
            f"symbol ({DYNAMIC_BATCH_HINT})"
        )
    stepped = sorted({n.op_type for n in model.graph.node if n.op_type in _STEPPED_OPS})
    if stepped:
        raise AnalysisError(
            f"{path.name}: {', '.join(stepped)} runs once per time step; no symbolic analysis (analyse it at the "
            "sizes given, or sweep them with `preflight report --batches`)"
        )
    internal: dict[str, str] = {}  # user name -> the shape variable's name in the import
    values: dict[str, int] = {}
    shape_dict: dict[str, list] = {}
    for inp, dims in zip(graph_inputs, all_dims, strict=True):
        spec = specs.get(inp.name)
        if spec is not None and len(spec.shape) != len(dims):
            raise UsageError(
                f"input '{inp.name}' has {len(dims)} dimensions in {path.name}, --input gives {len(spec.shape)}"
            )
        shape = []
        for axis, d in enumerate(dims):
            if isinstance(d, int):
                check_fixed_dim(inp.name, axis, d, spec, path.name)
                shape.append(d)
                continue
            named = d and d != "batch" and not _GENERATED_DIM.fullmatch(d)
            user = "batch" if axis == 0 else printable(d if named else f"{inp.name}[{axis}]")
            shape.append(internal.setdefault(user, f"preflight_dim{len(internal)}"))
            record_symbol_value(values, user, spec, inp.name, axis)
        shape_dict[inp.name] = shape
    dtype_dict, retyped = _input_dtypes(graph_inputs, specs, path.name)
    _constants_as_tensors(model)
    fold_constant_indices(model)
    try:
        first_error = None
        try:
            loaded = _imported(model, shape_dict, dtype_dict, graph_inputs, retyped, path, None)
            unknown = defines_shape_vars(loaded.mod, loaded.n_inputs) or has_unknown_rank(loaded.mod)
        except (AnalysisError, MissingShapeError) as exc:
            loaded, unknown, first_error = None, True, exc
        # sizes the graph reads from `Shape` that do not depend on the dynamic dims (ShuffleNet's channels), folded
        # as the concrete import folds them, then imported again
        if unknown and fold_static_shapes(model, shape_dict):
            loaded = _imported(model, shape_dict, dtype_dict, graph_inputs, retyped, path, None)
        elif first_error is not None:
            raise first_error
    except AnalysisError as exc:  # the file imports at given sizes; its dims cannot stay symbolic in TVM's importer
        raise AnalysisError(
            f"no symbolic analysis: TVM's ONNX importer does not take the file with its dynamic dims symbolic ({exc}); "
            "it analyses at the sizes given (--batch, --input), and `preflight report --batches` sweeps them"
        ) from exc
    if defines_shape_vars(loaded.mod, loaded.n_inputs) or has_unknown_rank(loaded.mod):
        raise AnalysisError(
            f"{path.name}: the graph computes a size from its input sizes at run time (Shape into Range, Slice or "
            "Reshape) that TVM's importer cannot keep as an expression of them; no symbolic analysis"
        )
    # from 2: TVM's importer specialises a size of 1 (BERT's ONNX file imported at batch 1 drops a broadcast: 102
    # operators against the 103 of the graph imported at a symbolic batch, evaluated at 1)
    for user, v in values.items():
        if v < 2:
            raise UsageError(f"{path.name}: '{user}' = {v} is below 2, the lowest a symbolic import holds for")
    loaded.symbols = {name: (user, 2, MAX_DIM) for user, name in internal.items()}
    return loaded, values


def _input_dtypes(graph_inputs, specs: dict[str, InputSpec], name: str) -> tuple[dict[str, str], list[str]]:
    """({input: dtype} as the import takes them: `--input`'s where given, else the file's; the inputs given another
    dtype than the file's, as messages (fine where no weight meets them))."""
    from onnx import helper

    dtype_dict, retyped = {}, []
    for inp in graph_inputs:
        spec = specs.get(inp.name)
        elem = inp.type.tensor_type.elem_type
        try:
            dtype = str(helper.tensor_dtype_to_np_dtype(elem)) if elem else "float32"
        except (KeyError, TypeError, ValueError) as exc:
            raise UnreadableModelError(
                f"{name}: input '{inp.name}' has element type {elem}, which TVM cannot read"
            ) from exc
        if spec is not None and spec.dtype is not None and elem and spec.dtype != dtype:
            retyped.append(f"input '{inp.name}' is {dtype} in {name}; --input asks for {spec.dtype}")
        dtype_dict[inp.name] = spec.dtype if spec and spec.dtype else dtype
    return dtype_dict, retyped


def _read_checked(path: Path, specs: dict[str, InputSpec]) -> tuple:
    """(the ONNX model, its graph inputs that are no initializer): read without external data, every check of
    a hostile or unsupported file passed (external data, raw sizes, the model, the nodes, TVM's operators) and
    `specs` naming only inputs the graph has."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError, RuntimeWarning...
        raise UnreadableModelError(f"{path.name}: not a valid ONNX file ({one_line(exc)})") from exc
    if not model.graph.node:
        raise UnreadableModelError(f"{path.name}: not a valid ONNX model (its graph has no nodes)")
    _check_external_data(model, path.parent, path.name)
    try:
        _load_weights_lazily(model, path.parent, path.name)
    except OSError as exc:
        raise UnreadableModelError(f"{path.name}: cannot read external data ({one_line(exc)})") from exc
    _check_raw_sizes(model, path.name)
    _check_model(model, path.name)
    check_nodes(model, path.name)

    from passes.tvm_ir import onnx_convert_ops

    supported = onnx_convert_ops()
    missing: dict[str, int] = {}
    for node in model.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        if node.op_type not in supported or node.domain not in ("", "ai.onnx", "com.microsoft"):
            missing[key] = missing.get(key, 0) + 1
    if missing:
        listed = ", ".join(f"{k} ({v})" for k, v in sorted(missing.items()))
        raise UnsupportedOperatorsError(f"{path.name}: ONNX operators TVM's importer cannot read: {listed}", missing)

    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    unknown = set(specs) - {i.name for i in graph_inputs}
    if unknown:
        raise UsageError(
            f"--input names {', '.join(sorted(unknown))} not among the model's inputs: "
            f"{', '.join(i.name for i in graph_inputs)}"
        )
    return model, graph_inputs


def _sampled_steps(model, shape_dict, dtype_dict, graph_inputs, retyped, path: Path, rebatched, steps, refusal):
    """A model whose recurrences run `steps` (> `MAX_RECURRENT_STEPS`) time steps, loaded at the `STEP_SAMPLES`
    step counts instead: every input dimension equal to `steps` (the sequence axis; shapes as `shape_dict`) set to
    each sample. The analysis extrapolates the totals at `steps` (`passes.analysis.extrapolate_steps`, which checks
    the third sample). Refused (exit 1, `refusal` and why) when no input dimension carries the sequence, when an
    integer constant of the graph holds it, or when a sample cannot be imported."""
    import numpy as np
    from onnx import numpy_helper

    axes = tuple((n, i) for n, shape in shape_dict.items() for i, v in enumerate(shape) if v == steps)
    lens = _full_sequence_lens(model, steps)
    why = None
    if not axes:
        why = "no input dimension sets the sequence length, so preflight cannot analyse shorter ones"
    elif steps <= STEP_SAMPLES[-1]:
        why = "a shorter sequence is unrolled instead"  # MAX_RECURRENT_STEPS lowered below the samples (tests)
    elif (const := _sequence_in_constants(model, steps, {t.name for t in lens})) is not None:
        why = f"constant '{const}' holds the sequence length, so a shorter sequence would contradict it"
    if why is not None:
        raise AnalysisError(f"{refusal}; {why}")
    from passes.tvm_ir import LongRecurrence

    samples = []
    for t in STEP_SAMPLES:
        at_t = {n: [t if (n, i) in axes else v for i, v in enumerate(shape)] for n, shape in shape_dict.items()}
        for tensor in lens:  # sequence_lens of the whole sequence: the whole shorter one
            full = numpy_helper.to_array(tensor)
            tensor.CopyFrom(numpy_helper.from_array(np.full_like(full, t), tensor.name))
        try:
            samples.append((t, _imported(model, at_t, dtype_dict, graph_inputs, retyped, path, rebatched)))
        except LongRecurrence as exc:  # another recurrence, not fed by the sequence axis, is as long
            raise AnalysisError(f"{path.name}: {exc}") from exc
        except PreflightError as exc:
            raise AnalysisError(f"{refusal}; at {t} steps the model does not import ({exc})") from exc
    for tensor in lens:  # as the file has it again
        tensor.CopyFrom(numpy_helper.from_array(np.full_like(numpy_helper.to_array(tensor), steps), tensor.name))
    nodes = tuple(
        f"{n.op_type} '{node_label(n, i)}'"
        for i, n in enumerate(model.graph.node)
        if n.op_type in ("LSTM", "GRU", "RNN") and n.domain in ("", "ai.onnx")
    )
    loaded = replace(samples[-1][1], steps=steps, step_samples=tuple(samples), step_axes=axes, step_nodes=nodes)
    loaded.input_names = tuple(shape_dict)
    return loaded


def _imported(model, shape_dict, dtype_dict, graph_inputs, retyped, path: Path, rebatched) -> LoadedModel:
    """`model` through TVM's ONNX importer at the input shapes `shape_dict` (the rest of `load_onnx`)."""
    from passes.tvm_ir import LongRecurrence, UnsupportedOnnxNode, onnx_import

    recorded: dict[str, int] = {}
    try:
        mod = onnx_import(model, shape_dict, dtype_dict, recorded)
    except PreflightError:
        raise
    except LongRecurrence:
        raise
    except UnsupportedOnnxNode as exc:
        raise AnalysisError(f"{path.name}: {exc}") from exc
    except Exception as exc:  # the importer raises many error types
        fed = _fed_operands(model, graph_inputs)
        if fed:
            raise MissingShapeError(
                f"{path.name}: {fed}, which a static analysis needs in the file; the model takes it at run time "
                f"(make it a constant: export it as one, or fold it with onnx-simplifier). TVM's importer: "
                f"{one_line(exc)[:120]}"
            ) from exc
        if retyped and ("datatype" in str(exc) or "dtype" in str(exc)):
            floats = all(r.rsplit(" ", 1)[-1].startswith(("float", "bfloat")) for r in retyped)
            hint = "; --dtype float16 or bfloat16 analyses the whole model in that dtype" if floats else ""
            raise UsageError(
                f"{'; '.join(retyped)}, and the graph does not take it (its ops meet the file's dtypes: "
                f"{one_line(exc)}){hint}"
            ) from exc
        raise AnalysisError(f"{path.name}: TVM's ONNX importer failed: {one_line(exc)}") from exc
    params = file_params(model)
    nodes = model.graph.node
    labels = {i: node_label(nodes[i], i) for i in set(recorded.values())}
    modules = {labels[i]: m for i in labels if (m := node_module(nodes[i])) is not None}
    return LoadedModel(
        mod=mod,
        framework="onnx",
        producer=model.producer_name,
        fx_nodes=any(p.key == "pkg.torch.onnx.fx_node" for n in nodes for p in n.metadata_props),
        op_sources={var: labels[i] for var, i in recorded.items()},
        op_calls=_library_calls(nodes, recorded, labels),
        source_modules=modules,
        name=model_name(model.graph.name, path),
        source=str(path),
        n_inputs=len(graph_inputs),
        input_names=tuple(shape_dict),
        source_params=params[:2],
        warnings=([rebatched] if rebatched else []) + params[2],
    )


_FLOAT_TYPES = {1: 4, 10: 2, 16: 2, 11: 8}  # TensorProto FLOAT, FLOAT16, BFLOAT16, DOUBLE -> bytes
_INT_TYPES = {2: 1, 3: 1, 4: 2, 5: 2, 6: 4}  # UINT8, INT8, UINT16, INT16, INT32 -> bytes

# Quantized ops: (input slots holding quantized data or an int32 bias, input slots holding scales and zero
# points). An integer initializer in a data slot is a weight; a scale or zero point is not a parameter.
_QUANT_SLOTS = {
    "QuantizeLinear": ({0}, {1, 2}),
    "DequantizeLinear": ({0}, {1, 2}),
    "DynamicQuantizeLinear": ({0}, set()),
    "QLinearConv": ({0, 3, 8}, {1, 2, 4, 5, 6, 7}),
    "QLinearMatMul": ({0, 3}, {1, 2, 4, 5, 6, 7}),
    "QGemm": ({0, 3, 6}, {1, 2, 4, 5, 7, 8}),
    "ConvInteger": ({0, 1}, {2, 3}),
    "MatMulInteger": ({0, 1}, {2, 3}),
    "QLinearAdd": ({0, 3}, {1, 2, 4, 5, 6, 7}),
    "QLinearMul": ({0, 3}, {1, 2, 4, 5, 6, 7}),
}
_QUANT_UNARY = (
    "QLinearSigmoid",
    "QLinearLeakyRelu",
    "QLinearGlobalAveragePool",
    "QLinearAveragePool",
    "QLinearSoftmax",
)


def _quant_roles(model) -> tuple[set[str], set[str]]:
    """(names in quantized-data slots, names in scale / zero-point slots) over the graph's nodes."""
    data, qparams = set(), set()
    for node in model.graph.node:
        op = node.op_type
        if op in _QUANT_SLOTS:
            d, q = _QUANT_SLOTS[op]
        elif op in _QUANT_UNARY:
            d, q = {0}, {1, 2, 3, 4}
        elif op == "QLinearConcat":
            d = {i for i in range(2, len(node.input)) if (i - 2) % 3 == 0}
            q = set(range(len(node.input))) - d
        else:
            continue
        for i, name in enumerate(node.input):
            if i in d:
                data.add(name)
            elif i in q:
                qparams.add(name)
    return data, qparams


def _file_params(model) -> tuple[int, int]:
    """Elements and bytes of the weights the file carries (see `file_params`)."""
    elements, nbytes, _ = file_params(model)
    return elements, nbytes


# ONNX ops that compute with weights: a constant tensor one of them reads beside the inputs' data is a weight
_WEIGHT_CONSUMERS = frozenset(
    {
        "MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "LSTM", "GRU", "RNN", "Gather",
        "BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
        "SkipLayerNormalization", "Add", "Sub", "Mul", "Div", "PRelu",
    }
)  # fmt: skip


def file_params(model) -> tuple[int, int, list[str]]:
    """(elements, bytes, notes) of the file's weights.

    Counted: every non-scalar floating-point initializer (what the file stores), and the weights the graph holds
    elsewhere (`_graph_weights`): float `Constant` nodes and tensors the graph computes from integer constants
    alone (a ConstantOfShape...), when an op of `_WEIGHT_CONSUMERS` reads them (directly or through ops on
    constants) beside the inputs' data. `notes` names computed weights whose size ONNX shape inference cannot
    tell (they are left out of the count).
    Quantized models: their integer initializers that hold quantized weights or int32 biases count too.

    Other integer initializers are shape and index constants; scales and zero points of quantized ops are not
    parameters. TVM's importer folds weight transforms (Transpose of a tied embedding, Gather of position
    tables) into new constants, so counting the IR's constants would count some weights twice.
    """
    n_stored, b_stored, counted = _stored_weights(model)
    extra, extra_bytes, notes = _graph_weights(model, counted)
    return n_stored + extra, b_stored + extra_bytes, notes


def _stored_weights(model) -> tuple[int, int, set[str]]:
    """(elements, bytes, names) of the initializers that are weights: non-scalar floating-point ones, and in
    quantized models the integer ones that hold quantized weights or int32 biases."""
    data, qparams = _quant_roles(model)
    n_total = b_total = 0
    counted: set[str] = set()
    for t in model.graph.initializer:
        if t.name in qparams:
            continue
        n, b = float_tensor_size(t)
        if not n and t.name in data and t.data_type in _INT_TYPES and len(t.dims):
            n = 1
            for d in t.dims:
                n *= d
            b = n * _INT_TYPES[t.data_type]
        n_total, b_total = n_total + n, b_total + b
        if n:
            counted.add(t.name)
    return n_total, b_total, counted


def _graph_weights(model, counted: set[str]) -> tuple[int, int, list[str]]:
    """(elements, bytes, notes) of the weights that are not initializers (see `file_params`). A float Constant
    counts at its own size; a computed tensor at the size of what the consumer reads, from ONNX shape inference.
    An exporter's literal (a zero initial state broadcast to the batch, a mask fill) reaches no weight consumer
    as a constant and is not counted."""
    import onnx

    initializers = {t.name for t in model.graph.initializer}
    derived = {i.name for i in model.graph.input if i.name not in initializers}  # values computed from the inputs
    stored = set(counted)  # initializers counted already, and what is computed from them
    constants: dict[str, tuple[int, int]] = {}  # float Constant node output -> (elements, bytes)
    origin: dict[str, frozenset] = {}  # constant value -> the float Constant outputs it is computed from
    made: dict[str, str] = {}  # value computed from integer constants alone -> the node that made it
    for node in model.graph.node:
        ins = [i for i in node.input if i]
        outs = [o for o in node.output if o]
        if any(i in derived for i in ins) or node.op_type in ("If", "Loop", "Scan"):
            derived.update(outs)
        elif node.op_type == "Constant":
            for a in node.attribute:
                n, b = float_tensor_size(a.t) if a.name == "value" else (0, 0)
                if n and outs:
                    constants[outs[0]] = (n, b)
                    origin[outs[0]] = frozenset(outs[:1])
        elif any(i in stored for i in ins):
            stored.update(outs)
        elif any(i in origin for i in ins):
            merged = frozenset().union(*(origin[i] for i in ins if i in origin))
            origin.update((o, merged) for o in outs)
        else:
            made.update((o, node.name or node.op_type) for o in outs)
    used: set[str] = set()  # float Constant outputs a consumer reads
    boundary: dict[str, str] = {}  # computed tensor a consumer reads -> its maker
    for node in model.graph.node:
        if node.op_type not in _WEIGHT_CONSUMERS or not any(i in derived for i in node.input if i):
            continue
        for i in node.input:
            if i in origin:
                used.update(origin[i])
            elif i in made:
                boundary[i] = made[i]
    elements = sum(constants[c][0] for c in used)
    nbytes = sum(constants[c][1] for c in used)
    if not boundary:
        return elements, nbytes, []
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - inference failing only leaves the sizes unknown
        inferred = model
    infos = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    unknown = []
    for name, maker in boundary.items():
        info = infos.get(name)
        t = info.type.tensor_type if info is not None else None
        if t is None or not t.elem_type:
            unknown.append(maker)
            continue
        if t.elem_type not in _FLOAT_TYPES:  # integer indices
            continue
        dims = _file_dims(info)
        if not t.HasField("shape") or not all(isinstance(d, int) for d in dims):
            unknown.append(maker)
            continue
        if not dims:  # a scalar is a literal
            continue
        n = 1
        for d in dims:
            n *= d
        elements, nbytes = elements + n, nbytes + n * _FLOAT_TYPES[t.elem_type]
    notes = []
    if unknown:
        names = ", ".join(printable(f"'{m[:60]}'") for m in sorted(set(unknown))[:3])
        notes.append(
            f"params leave out weights the graph computes whose size ONNX shape inference cannot tell "
            f"(made by {names}{' and more' if len(set(unknown)) > 3 else ''})"
        )
    return elements, nbytes, notes


def float_tensor_size(t) -> tuple[int, int]:
    """(elements, bytes) of a non-scalar floating-point TensorProto; (0, 0) for anything else."""
    if t.data_type not in _FLOAT_TYPES or not len(t.dims):
        return 0, 0
    n = 1
    for d in t.dims:
        n *= d
    return n, n * _FLOAT_TYPES[t.data_type]
