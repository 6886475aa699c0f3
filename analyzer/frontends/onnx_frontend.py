"""ONNX frontend: `.onnx` files (weights inline or in external data files beside the model)."""

from __future__ import annotations

from pathlib import Path

from ..errors import (
    AnalysisError,
    PreflightError,
    UnreadableModelError,
    UnsupportedOperatorsError,
    UsageError,
    one_line,
)
from .loaded import LoadedModel
from .specs import MAX_DIM, InputSpec, resolve_shape


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


def _supported_ops() -> set[str]:
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    return set(_get_convert_map().keys())


def _file_dims(value_info) -> list[int | str | None]:
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return []
    # a dim_value is static, 0 included (an empty tensor); only a dim_param or an unset dim is dynamic
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


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


def load_onnx(path: Path, specs: dict[str, InputSpec], batch: int | None) -> LoadedModel:
    """Read, validate and import an ONNX file with static input shapes."""
    import onnx
    from onnx import helper

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
    shape_dict, dtype_dict = {}, {}
    for inp in graph_inputs:
        spec = specs.get(inp.name)
        shape_dict[inp.name] = list(resolve_shape(inp.name, _file_dims(inp), spec, batch, path.name))
        elem = inp.type.tensor_type.elem_type
        try:
            dtype = str(helper.tensor_dtype_to_np_dtype(elem)) if elem else "float32"
        except (KeyError, TypeError, ValueError) as exc:
            raise UnreadableModelError(
                f"{path.name}: input '{inp.name}' has element type {elem}, which TVM cannot read"
            ) from exc
        dtype_dict[inp.name] = spec.dtype if spec and spec.dtype else dtype

    from passes.tvm_ir import onnx_import

    try:
        mod = onnx_import(model, shape_dict, dtype_dict)
    except PreflightError:
        raise
    except Exception as exc:  # the importer raises many error types
        raise AnalysisError(f"{path.name}: TVM's ONNX importer failed: {one_line(exc)}") from exc
    return LoadedModel(
        mod=mod,
        framework="onnx",
        name=model_name(model.graph.name, path),
        source=str(path),
        n_inputs=len(graph_inputs),
        input_names=tuple(shape_dict),
        source_params=_file_params(model),
    )


_FLOAT_TYPES = {1: 4, 10: 2, 16: 2, 11: 8}  # TensorProto FLOAT, FLOAT16, BFLOAT16, DOUBLE -> bytes


def _file_params(model) -> tuple[int, int]:
    """Elements and bytes of the file's non-scalar floating-point initializers: the weights it stores.

    Integer initializers are shape and index constants; TVM's importer folds weight transforms
    (Transpose of a tied embedding, Gather of position tables) into new constants, so counting the
    IR's constants would count some weights twice.
    """
    sizes = [float_tensor_size(t) for t in model.graph.initializer]
    return sum(n for n, _ in sizes), sum(b for _, b in sizes)


def float_tensor_size(t) -> tuple[int, int]:
    """(elements, bytes) of a non-scalar floating-point TensorProto; (0, 0) for anything else."""
    if t.data_type not in _FLOAT_TYPES or not len(t.dims):
        return 0, 0
    n = 1
    for d in t.dims:
        n *= d
    return n, n * _FLOAT_TYPES[t.data_type]
