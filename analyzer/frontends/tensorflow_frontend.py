"""TensorFlow frontend: Keras `.keras` files, SavedModel directories and `.tflite` flatbuffers.

Route: Relax has no TensorFlow GraphDef importer, so a Keras model or SavedModel is traced into a
concrete function at the input shapes the user asks for (`--batch`, `--input`), its variables are frozen
into constants, and TensorFlow's own TFLite converter (builtin ops only) lowers it to a TFLite flatbuffer
that TVM's `from_tflite` imports. A `.tflite` file goes straight to `from_tflite`. TFLite tensors are
NHWC with HWIO/OHWI kernels; the Relax ops carry those layouts and the cost rules read them.

Safety: Keras files are loaded with `safe_mode=True` (a Lambda layer's Python code is refused);
legacy `.h5` files, where Keras ignores safe_mode, are refused outright; a `.keras` zip's directory is
checked first (`check_keras_zip`: member count, JSON members at most 64 MiB). TensorFlow runs graph ops
while it loads a SavedModel (resource initializers), so the child first parses `saved_model.pb` with the
protobuf classes and refuses any op outside an allowlist of pure tensor ops (`tf_graph_safety.py`), before
any loader call. TensorFlow loads, traces and converts in a child process with resource limits
(`isolate.py`; forked from a zygote that imported TensorFlow once), HOME and TMPDIR in its scratch
directory, and Landlock (where the kernel has it) allowing writes only there: a model can crash
TensorFlow's graph optimiser (a Keras input of 2x100000x100000x3 does), and this process never imports
TensorFlow. A `.tflite` file is parsed here (the `tflite` flatbuffer reader) and every tensor's
dimensions checked before TVM's importer sees it. See docs/safety.md.
"""

from __future__ import annotations

import gc
import math
import os
from pathlib import Path

from ..errors import (
    AnalysisError,
    PreflightError,
    UnreadableModelError,
    UnsupportedOperatorsError,
    UsageError,
    one_line,
)
from .isolate import GIB, Limits, restrict_writes, run_isolated
from .loaded import LoadedModel
from .native import import_extra, quiet_native_output, require_extra
from .specs import MAX_DIM, TOP_LEVEL, InputSpec, batch_per_input, printable, resolve_shape, short_name
from .tf_graph_safety import check_saved_model

# tflite.TensorType -> numpy dtype name; bytes per element of the floating-point types (weights)
_TFLITE_DTYPES = {
    0: "float32",
    1: "float16",
    2: "int32",
    3: "uint8",
    4: "int64",
    6: "bool",
    7: "int16",
    9: "int8",
    10: "float64",
    16: "bfloat16",
}
_FLOAT_BYTES = {0: 4, 1: 2, 10: 8, 16: 2}
# bytes per element of quantized weights (int8/uint8/int16) and biases (int32, int64 for 16-bit activations)
_QUANTIZED_BYTES = {9: 1, 3: 1, 7: 2, 2: 4, 4: 8}
_H5_HINT = (
    "legacy HDF5 Keras files can carry marshalled Python code that Keras loads without safe_mode; "
    "re-save the model with model.save('model.keras') or model.export('saved_model_dir')"
)


def _import_tensorflow():
    tf = import_extra("tensorflow", "tensorflow", "Keras and SavedModel models")
    tf.get_logger().setLevel("ERROR")
    return tf


# --------------------------------------------------------------------------------------------
# .tflite
# --------------------------------------------------------------------------------------------


def _op_name(model, op, builtin_names: dict[int, str]) -> str:
    code = model.OperatorCodes(op.OpcodeIndex())
    opc = max(code.DeprecatedBuiltinCode(), code.BuiltinCode())
    name = builtin_names.get(opc, f"BUILTIN_{opc}")
    if name == "CUSTOM":
        custom = code.CustomCode()
        name = f"CUSTOM:{custom.decode('utf-8', 'replace') if custom else '?'}"
    return name


def _check_ops(model, subgraph, label: str) -> None:
    """Raise once, naming every TFLite operator (with its count) that TVM's importer cannot convert."""
    from tflite.BuiltinOperator import BuiltinOperator

    from passes.tvm_ir import tflite_convert_ops

    builtin_names = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
    convert_map = tflite_convert_ops(model, subgraph)
    missing: dict[str, int] = {}
    for i in range(subgraph.OperatorsLength()):
        name = _op_name(model, subgraph.Operators(i), builtin_names)
        if name not in convert_map and name != "CUSTOM:TFLite_Detection_PostProcess":
            missing[name] = missing.get(name, 0) + 1
    if missing:
        listed = ", ".join(f"{k} ({v})" for k, v in sorted(missing.items()))
        raise UnsupportedOperatorsError(f"{label}: TFLite operators TVM's importer cannot read: {listed}", missing)


def _file_params(model, subgraph) -> tuple[int, int]:
    """Elements and bytes of the flatbuffer's weights (each buffer once): floating-point constant tensors, and the
    8-bit weights and int32 biases of a quantized model (constant tensors with quantization parameters; int32
    constants without them are shapes and indices, not weights).

    NB: TensorFlow's converter folds batch norm into the preceding conv's weights and bias, stores
    identical constants once and drops all-zero biases, as ONNX exporters do.
    """
    inputs = set(subgraph.InputsAsNumpy().tolist()) if subgraph.InputsLength() else set()
    seen: set[int] = set()
    elements = nbytes = 0
    for i in range(subgraph.TensorsLength()):
        t = subgraph.Tensors(i)
        b = t.Buffer()
        if i in inputs or b <= 0 or b in seen or t.ShapeLength() == 0:
            continue
        size = _FLOAT_BYTES.get(t.Type()) or (_QUANTIZED_BYTES.get(t.Type()) if _quantized(t) else None)
        if size is None:
            continue
        buf = model.Buffers(b)
        if buf is None or (buf.DataLength() == 0 and buf.Size() == 0):
            continue
        seen.add(b)
        n = math.prod(int(d) for d in t.ShapeAsNumpy())
        elements += n
        nbytes += n * size
    return elements, nbytes


def _quantized(t) -> bool:
    """A tensor with quantization scales (a quantized weight or bias)."""
    q = t.Quantization()
    return q is not None and q.ScaleLength() > 0


def _dynamic(model) -> bool:
    """True when an input's shape signature leaves a dimension dynamic (-1)."""
    subgraph = model.Subgraphs(0)
    for i in range(subgraph.InputsLength()):
        t = subgraph.Tensors(subgraph.Inputs(i))
        if t.ShapeSignatureLength() and any(int(d) < 0 for d in t.ShapeSignatureAsNumpy()):
            return True
    return False


def _check_shapes(model, label: str) -> None:
    """Every tensor's shape holds dimensions from 0 to MAX_DIM (a -1 would count negative FLOPs)."""
    for g in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(g)
        for i in range(subgraph.TensorsLength()):
            t = subgraph.Tensors(i)
            if not t.ShapeLength():
                continue
            for d, size in enumerate(int(x) for x in t.ShapeAsNumpy()):
                if not 0 <= size <= MAX_DIM:
                    name = (t.Name() or b"?").decode("utf-8", "replace")[:80]
                    raise UnreadableModelError(
                        f"{label}: tensor '{name}' has dimension {d} of {size:,} (dimensions are 0 to {MAX_DIM:,}); "
                        f"the file is corrupt"
                    )


# TVM's TFLite importer reads the flatbuffer through the pure-Python `tflite` package: about 1 ms per operator
# here (20,000 RELUs: 26 s, 0.48 GB in all); 200,000 ops ran past 120 s. The largest real models measured
# (docs/safety.md) have a few thousand operators.
MAX_TFLITE_OPS = 20_000
MAX_TFLITE_TENSORS = 4 * MAX_TFLITE_OPS
MAX_TFLITE_SUBGRAPHS = 1_000


def _check_size(model, label: str) -> None:
    """Refuse, from the flatbuffer's vector lengths and before any per-operator work, a file with more subgraphs,
    operators or tensors than preflight reads in its time budget (exit 2)."""
    n_graphs = model.SubgraphsLength()
    if n_graphs > MAX_TFLITE_SUBGRAPHS:
        raise UnreadableModelError(
            f"{label}: {n_graphs:,} subgraphs; preflight reads TFLite files of at most {MAX_TFLITE_SUBGRAPHS:,}"
        )
    ops = tensors = 0
    for g in range(n_graphs):
        sg = model.Subgraphs(g)
        ops, tensors = ops + sg.OperatorsLength(), tensors + sg.TensorsLength()
    if ops > MAX_TFLITE_OPS or tensors > MAX_TFLITE_TENSORS:
        raise UnreadableModelError(
            f"{label}: {ops:,} operators and {tensors:,} tensors; preflight reads TFLite files of at most "
            f"{MAX_TFLITE_OPS:,} operators and {MAX_TFLITE_TENSORS:,} tensors (TVM's importer takes about 1 ms "
            f"per operator; real models have a few thousand)"
        )


def _parse_tflite(buf: bytes, label: str):
    if len(buf) < 8 or buf[4:8] != b"TFL3":
        raise UnreadableModelError(f"{label}: not a TFLite flatbuffer (no 'TFL3' file identifier)")
    tflite = import_extra("tflite", "tensorflow", "TFLite models")
    try:
        model = tflite.Model.GetRootAsModel(buf, 0)
        if model.SubgraphsLength() < 1:
            raise UnreadableModelError(f"{label}: the TFLite model has no subgraph")
        _check_size(model, label)
        subgraph = model.Subgraphs(0)
        _check_shapes(model, label)
        inputs = []
        for i in range(subgraph.InputsLength()):
            t = subgraph.Tensors(subgraph.Inputs(i))
            dims = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
            inputs.append((t.Name().decode("utf-8", "replace"), dims, _TFLITE_DTYPES.get(t.Type(), f"type{t.Type()}")))
        _check_ops(model, subgraph, label)
        params = _file_params(model, subgraph)
    except PreflightError:
        raise
    except Exception as exc:  # a corrupt flatbuffer raises IndexError, struct.error...
        raise UnreadableModelError(f"{label}: corrupt TFLite file ({one_line(exc)})") from exc
    return model, inputs, params


def tensor_module(name: str) -> str | None:
    """The Keras layer path of a TFLite tensor, from the name scopes TensorFlow's converter writes into its name.

    A fused operator's tensor lists every op it fused, `;`-separated (`cnn_1/re_lu_1/Relu;cnn_1/conv2d_1/
    convolution`); the layer is the scope all of them share, less the last segment of each (the TensorFlow op) and
    the first scope (the model's: `cnn_1`), dotted (`multi_head_attention_1.key_1`; TensorFlow's tracing suffixes
    such as `_1` are kept as written). Where they share only the model's scope, the layers they come from joined
    by `+` (`re_lu_1+batch_normalization_1+conv2d_1`), or `(top level)` if none has a layer; None where the name
    has no scope (`Identity`, `StatefulPartitionedCall:0`)."""
    if len(name) > 8192:
        return None
    common: list[str] | None = None
    layers: list[str] = []  # each part's layer under the model's scope, in order
    for part in name.split(";"):
        scopes = part.split("/")[:-1]
        if not scopes:
            return None
        if len(scopes) > 1 and scopes[1] not in layers:
            layers.append(scopes[1])
        if common is None:
            common = scopes
        else:
            n = 0
            while n < min(len(common), len(scopes)) and common[n] == scopes[n]:
                n += 1
            common = common[:n]
    if not common:
        return None
    if len(common) > 1:
        return short_name(".".join(common[1:]))
    # ops of several layers fused into one (a convolution with its batch norm and ReLU): all of them, `+`-joined
    return short_name("+".join(layers)) if layers else TOP_LEVEL


def _import_tflite(
    buf: bytes,
    label: str,
    shapes: dict[str, list[int]],
    dtypes: dict[str, str],
    *,
    framework: str,
    name: str,
    source: str,
    model=None,
    params=None,
    dynamic: bool = False,
) -> LoadedModel:
    from passes import tvm_ir

    if model is None:
        model, _, params = _parse_tflite(buf, label)
    failure = None
    recorded: dict[str, str] = {}
    with quiet_native_output():
        try:
            mod = tvm_ir.tflite_import(model, shapes, dtypes, recorded)
            mod, _ = tvm_ir.fuse_int8(mod)  # full-integer int8: dequantize -> float conv/matmul as int8 ops
        except PreflightError:
            raise
        except Exception as exc:  # noqa: BLE001 - the importer raises OpNotImplemented, TVMError, AssertionError...
            failure = one_line(exc)
        if failure is not None:
            gc.collect()  # the half-built BlockBuilder logs a warning when freed: free it while output is quiet
    if failure is not None:
        if "READ_VARIABLE" in failure or "VAR_HANDLE" in failure:
            failure += (
                " (the file keeps its weights in resource variables; convert with "
                "TFLiteConverter.from_keras_model or from_saved_model, which freeze them, or give preflight "
                "the Keras model or SavedModel)"
            )
        elif "dynamic range quantization" in failure:
            failure = (
                "the file is dynamic-range quantized (int8 weights, float activations quantized at run time), "
                "which TVM's TFLite importer does not read; analyse the float model (the Keras model or SavedModel) "
                "or a full-integer conversion (converter.representative_dataset with "
                "target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8])"
            )
        elif dynamic:
            failure += (
                " (this .tflite has a dynamic batch and computes shapes at run time, which TVM cannot "
                "import: analyse the Keras model or SavedModel with --batch N, or convert at a fixed batch)"
            )
        raise AnalysisError(f"{label}: TVM's TFLite importer failed: {failure}")
    mod = tvm_ir.strip_param_data(mod)
    return LoadedModel(
        mod=mod,
        framework=framework,
        name=name,
        source=source,
        n_inputs=len(shapes),
        input_names=tuple(shapes),
        source_params=params,
        op_sources={var: short_name(name) for var, name in recorded.items()},
        source_modules={short_name(n): m for n in set(recorded.values()) if (m := tensor_module(n)) is not None},
    )


def load_tflite(path: Path, specs: dict[str, InputSpec], batch: int | None) -> LoadedModel:
    """Import a `.tflite` file. Its shapes are fixed: `--batch`/`--input` may only restate them."""
    buf = path.read_bytes()
    model, inputs, params = _parse_tflite(buf, path.name)
    names = [n for n, _, _ in inputs]
    unknown = set(specs) - set(names)
    if unknown:
        raise UsageError(f"--input names {', '.join(sorted(unknown))} not among the model's inputs: {', '.join(names)}")
    shapes, dtypes = {}, {}
    for name, dims, dtype in inputs:
        spec = specs.get(name)
        wanted = list(dims)
        if spec is not None:  # a ? (None) keeps the file's value; a rank mismatch is refused below
            wanted = [d if u is None else u for u, d in zip(spec.shape, dims, strict=False)]
            wanted += list(spec.shape[len(dims) :])
        if batch is not None and wanted:
            wanted[0] = batch
        if wanted != dims:
            raise UsageError(
                f"input '{name}' is {'x'.join(map(str, dims))} in {path.name}, and a .tflite file fixes "
                f"every shape inside it, so it cannot become {'x'.join(map(str, wanted))}; analyse the "
                f"Keras model or SavedModel instead (preflight converts it at the shape you ask for)"
            )
        if spec is not None and spec.dtype is not None and spec.dtype != dtype:
            raise UsageError(f"input '{name}' is {dtype} in {path.name}; a .tflite file fixes its dtypes")
        shapes[name] = resolve_shape(name, dims, None, None, path.name)
        dtypes[name] = dtype
    return _import_tflite(
        buf,
        path.name,
        shapes,
        dtypes,
        framework="tflite",
        name=path.stem,
        source=str(path),
        model=model,
        params=params,
        dynamic=_dynamic(model),
    )


# --------------------------------------------------------------------------------------------
# Keras and SavedModel: trace at the requested shapes, freeze, convert to TFLite (in a child process)
# --------------------------------------------------------------------------------------------

TF_STEP = "TensorFlow's converter"


def _size_on_disk(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for i, p in enumerate(path.rglob("*")):
        if i > 100_000:
            break
        if p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def _tf_limits(path: Path) -> Limits:
    """TensorFlow itself maps about 2 GB; the model's weights are held as variables, frozen constants and the
    TFLite flatbuffer at once."""
    size = _size_on_disk(path)
    return Limits(memory=6 * GIB + 8 * size, file_bytes=2 * GIB + 4 * size)


MAX_KERAS_JSON = 64 << 20  # a large Keras model's config.json is a few MB; the 1 GB bomb peaked at 2.2 GB


def check_keras_zip(path: Path) -> None:
    """Refuse a `.keras` archive before Keras reads it: at most `pt2_safety.MAX_MEMBERS` members, every `.json`
    member (config.json, metadata.json) at most MAX_KERAS_JSON bytes uncompressed and every other member at
    most the child's memory limit, all as the zip's central directory declares them (Python's zipfile then
    reads no more than a member declares)."""
    import struct
    import zipfile

    from .pt2_safety import MAX_MEMBERS, zip_entry_count

    label = path.name
    try:
        with open(path, "rb") as fp:
            count = zip_entry_count(fp)
            if count is not None and count > MAX_MEMBERS:
                raise UnreadableModelError(
                    f"{label}: the zip archive declares {count:,} members (at most {MAX_MEMBERS:,})"
                )
            fp.seek(0)
            with zipfile.ZipFile(fp) as zf:
                infos = zf.infolist()
    except UnreadableModelError:
        raise
    except UnicodeDecodeError as exc:
        raise UnreadableModelError(f"{label}: a zip member name is not valid UTF-8; the archive is corrupt") from exc
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, struct.error) as exc:
        raise UnreadableModelError(f"{label}: not a loadable Keras file ({one_line(exc)})") from exc
    memory = _tf_limits(path).memory
    for info in infos:
        cap = MAX_KERAS_JSON if info.filename.lower().endswith(".json") else memory
        if info.file_size > cap:
            raise UnreadableModelError(
                f"{label}: member {printable(info.filename)[:120]!r} declares {info.file_size:,} bytes uncompressed "
                f"(at most {cap:,}); the archive is corrupt or a zip bomb"
            )


def load_keras(path: Path, specs: dict[str, InputSpec], batch: int | None) -> LoadedModel:
    """Load a `.keras` file with safe_mode=True and convert it at the requested input shapes (in a child)."""
    if path.suffix.lower() in (".h5", ".hdf5"):
        raise UnreadableModelError(f"{path.name}: {_H5_HINT}")
    require_extra("tensorflow", "tensorflow", "Keras and SavedModel models")  # a missing extra is named first
    check_keras_zip(path)
    return _convert_in_child("keras", path, specs, batch)


def load_saved_model(path: Path, specs: dict[str, InputSpec], batch: int | None) -> LoadedModel:
    """Load a SavedModel directory's serving signature and convert it at the requested input shapes (in a child)."""
    return _convert_in_child("saved_model", path, specs, batch)


def _convert_in_child(kind: str, path: Path, specs: dict[str, InputSpec], batch: int | None) -> LoadedModel:
    """TensorFlow loads, traces and converts in a child with resource limits (a hostile or huge model can crash
    its graph optimiser), forked from a zygote that imported TensorFlow once; this process only parses the
    TFLite flatbuffer it returns."""
    require_extra("tensorflow", "tensorflow", "Keras and SavedModel models")
    if kind == "keras":
        require_extra("keras", "tensorflow", "Keras models")
    spec_list = [[s.name, list(s.shape), s.dtype] for s in specs.values()]
    result = run_isolated(
        f"{__name__}:tflite_in_child",
        [kind, str(path.absolute()), spec_list, batch],  # the child works in its scratch directory
        label=path.name,
        what=TF_STEP,
        limits=_tf_limits(path),
        start="zygote",
        preload=("tensorflow", "keras", __name__),
    )
    meta = result.meta
    return _finish(result.data, path, list(meta["names"]), [list(s) for s in meta["shapes"]], list(meta["dtypes"]))


def tflite_in_child(kind: str, path: str, spec_list: list, batch: int | None) -> tuple[dict, bytes]:
    """Child process: load the Keras model or SavedModel, trace it at the requested shapes, convert it."""
    specs = {n: InputSpec(n, tuple(shape), dtype) for n, shape, dtype in spec_list}
    p = Path(path)
    scratch = os.getcwd()  # isolate.py made the child's working directory its empty scratch directory
    for key in ("HOME", "KERAS_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        os.environ[key] = scratch
    sandbox = restrict_writes(Path(scratch))  # None: Landlock holds writes to the scratch directory
    tf = _import_tensorflow()
    if kind == "saved_model":
        check_saved_model(p)  # before any TensorFlow loader call: only pure tensor ops (tf_graph_safety.py)
    if kind == "keras":
        names, tensor_specs, call, what = _keras_signature(tf, p, specs, batch)
    else:
        names, tensor_specs, call, what = _saved_model_signature(tf, p, specs, batch)
    concrete = _trace(tf, call, p, tensor_specs, what)
    buf = _convert(tf, concrete, p.name)
    meta = {
        "names": names,
        "shapes": [[int(d) for d in ts.shape] for ts in tensor_specs],
        "dtypes": [ts.dtype.name for ts in tensor_specs],
        "sandbox": sandbox or "landlock",
    }
    return meta, buf


def _resolve(name: str, dims, dtype: str, specs: dict[str, InputSpec], batch: int | None, label: str):
    spec = specs.get(name)
    file_dims = [int(d) if d is not None else None for d in dims]
    shape = resolve_shape(name, file_dims, spec, batch, label)
    return shape, (spec.dtype if spec is not None and spec.dtype else dtype)


def _convert(tf, concrete, label: str) -> bytes:
    """Freeze a concrete function's variables and convert it to a TFLite flatbuffer (builtin ops only)."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    with quiet_native_output() as out:
        try:
            frozen = convert_variables_to_constants_v2(concrete)
            converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
            return converter.convert()
        except Exception as exc:  # noqa: BLE001 - ConverterError, ValueError...
            err = exc
    detail = _converter_message(err, out.text)
    raise AnalysisError(f"{label}: TensorFlow's TFLite converter failed: {detail}") from err


def _converter_message(exc: BaseException, log: str) -> str:
    text = f"{exc}\n{log}"
    ops = sorted({w.strip(",.;:'\"") for w in text.split() if w.startswith("tf.") and len(w) > 3})
    if ops and ("not supported" in text or "Select TF" in text or "Flex" in text):
        return f"TensorFlow ops with no TFLite builtin equivalent (TVM reads builtins only): {', '.join(ops)}"
    return one_line(exc)


def _keras_signature(tf, path: Path, specs: dict[str, InputSpec], batch: int | None):
    """(input names, TensorSpecs at the requested shapes, the call, what) of a `.keras` file (child)."""
    keras = import_extra("keras", "tensorflow", "Keras models")
    with quiet_native_output() as out:
        try:
            model = keras.saving.load_model(str(path), safe_mode=True, compile=False)
        except Exception as exc:  # noqa: BLE001 - ValueError, TypeError, OSError, zipfile errors...
            err = exc
        else:
            err = None
    if err is not None:
        text = f"{err}"
        if "safe_mode" in text or "lambda" in text.lower():
            raise UnreadableModelError(
                f"{path.name}: the model contains a Lambda layer (arbitrary Python code); preflight loads Keras "
                f"files with safe_mode=True and refuses it: replace the Lambda with a built-in layer"
            ) from err
        raise UnreadableModelError(
            f"{path.name}: not a loadable Keras file ({one_line(err) or out.last_line()})"
        ) from err
    inputs = list(getattr(model, "inputs", None) or [])
    if not inputs:
        raise UnreadableModelError(
            f"{path.name}: the Keras model has no input signature; build it with "
            f"keras.Input(...) (a functional or Sequential model) before saving"
        )
    names = [str(getattr(t, "name", f"input_{i}")).split(":")[0] for i, t in enumerate(inputs)]
    unknown = set(specs) - set(names)
    if unknown:
        raise UsageError(f"--input names {', '.join(sorted(unknown))} not among the model's inputs: {', '.join(names)}")
    tensor_specs = []
    batches = batch_per_input([list(t.shape) for t in inputs], batch)
    for name, t, inp_batch in zip(names, inputs, batches, strict=True):
        shape, dtype = _resolve(name, t.shape, str(t.dtype), specs, inp_batch, path.name)
        tensor_specs.append(tf.TensorSpec(shape, dtype, name=name))

    def call(*xs):
        return model(xs[0] if len(xs) == 1 else list(xs), training=False)

    return names, tensor_specs, call, "the model"


def _trace(tf, call, path: Path, tensor_specs: list, what: str):
    """The concrete function of `call` at the given input specs (child)."""
    with quiet_native_output():
        try:
            return tf.function(call).get_concrete_function(*tensor_specs)
        except Exception as exc:
            raise AnalysisError(f"{path.name}: TensorFlow could not trace {what}: {one_line(exc)}") from exc


def _finish(buf: bytes, path: Path, names: list[str], shapes: list[list[int]], dtypes: list[str]) -> LoadedModel:
    """Import the converted flatbuffer (parent); `names`, `shapes`, `dtypes` are the traced signature's."""
    model, inputs, params = _parse_tflite(buf, path.name)
    tfl_names = [n for n, _, _ in inputs]
    # the converter names inputs after the TensorSpecs; map by position if it did not
    order = tfl_names if set(tfl_names) == set(names) else names
    by_name = {n: (s, d) for n, s, d in zip(names, shapes, dtypes, strict=True)}
    shape_of = {tfl: list(by_name[user][0]) for tfl, user in zip(tfl_names, order, strict=True)}
    dtype_of = {tfl: by_name[user][1] for tfl, user in zip(tfl_names, order, strict=True)}
    loaded = _import_tflite(
        buf,
        path.name,
        shape_of,
        dtype_of,
        framework="tensorflow",
        name=path.stem or path.name,
        source=str(path),
        model=model,
        params=params,
    )
    loaded.input_names = tuple(order)
    return loaded


def _saved_model_signature(tf, path: Path, specs: dict[str, InputSpec], batch: int | None):
    """(input names, TensorSpecs at the requested shapes, the call, what) of a SavedModel's signature (child)."""
    with quiet_native_output() as out:
        try:
            obj = tf.saved_model.load(str(path))
        except Exception as exc:  # noqa: BLE001 - DecodeError, NotFoundError, ValueError...
            err = exc
        else:
            err = None
    if err is not None:
        raise UnreadableModelError(
            f"{path.name}: not a loadable SavedModel ({one_line(err) or out.last_line()})"
        ) from err
    signatures = dict(getattr(obj, "signatures", {}) or {})
    if not signatures:
        raise UnreadableModelError(
            f"{path.name}: the SavedModel has no serving signature; export it with "
            f"model.export(dir) or tf.saved_model.save(obj, dir, signatures=...)"
        )
    key = "serving_default" if "serving_default" in signatures else sorted(signatures)[0]
    sig = signatures[key]
    kw = sig.structured_input_signature[1] if sig.structured_input_signature else {}
    if not kw:
        raise UnreadableModelError(f"{path.name}: signature '{key}' has no named tensor inputs")
    names = list(kw)
    unknown = set(specs) - set(names)
    if unknown:
        raise UsageError(f"--input names {', '.join(sorted(unknown))} not among the model's inputs: {', '.join(names)}")
    tensor_specs = []
    for name in names:
        if kw[name].shape.rank is None:
            raise UsageError(f"input '{name}' has unknown rank in {path.name}; give its shape with --input {name}:DIMS")
    all_dims = [kw[name].shape.as_list() for name in names]
    for name, dims, inp_batch in zip(names, all_dims, batch_per_input(all_dims, batch), strict=True):
        spec = kw[name]
        shape, dtype = _resolve(name, dims, spec.dtype.name, specs, inp_batch, path.name)
        tensor_specs.append(tf.TensorSpec(shape, dtype, name=name))

    def call(*xs):
        return sig(**dict(zip(names, xs, strict=True)))

    call.keep_alive = obj  # the signature's variables live as long as the loaded object
    return names, tensor_specs, call, f"signature '{key}'"
