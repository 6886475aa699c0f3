"""Check a TensorFlow SavedModel's graph before TensorFlow sees it: only pure tensor ops may appear.

Why: TensorFlow runs graph ops while it *loads* a SavedModel (a `TrackableResource`'s initializer, a TF1
model's restore and init ops) and its converter may run more (constant folding). A graph op can write, read,
list or delete files (`WriteFile`, `ReadFile`, `MatchingFiles`, `DeleteFile` is `tf.io.gfile` and has no op,
but `Save`/`SaveV2` write anywhere), call back into Python (`PyFunc`, `EagerPyFunc`), print to a file
(`PrintV2` with `output_stream='file://...'`), open datasets, queues, summary writers, lookup tables from text
files, RPCs, or compiled StableHLO with host callbacks (`XlaCallModule`). So preflight parses
`saved_model.pb` with the protobuf classes (parsing runs no op), walks every node of every meta graph's
`graph_def` and every function of its library, and refuses the model, naming the op and the node, unless
every op is in `ALLOWED_OPS` (pure math, nn, array, shape and control-flow ops and resource-variable
handles) or is a call of a function in the library (itself walked).

Checkpoint ops (`SaveV2`, `RestoreV2`, `MergeV2Checkpoints`) are in every TF2 SavedModel: `tf.saved_model.save`
writes a `_traced_save` and a `_traced_restore` function, called by two top-level nodes that `saver_def`
names, with the `saver_filename` placeholder as their first input. TensorFlow's TF2 loader never calls them (it
restores variables from `variables/` with ops it builds itself); a TF1-style load calls the restore function
with the model's own `variables/variables` path fed into that placeholder. They are allowed only there:

  - a function holding a checkpoint op is a *saver function*: it may be called only by a top-level node named
    by `saver_def` (`save_tensor_name`, `restore_op_name`) whose first input is `saver_def`'s filename
    placeholder; no other node and no object of the object graph may name it;
  - inside it, every path operand of a checkpoint op must be the function's first argument, possibly with a
    constant suffix appended (`StringJoin(prefix, '_temp/part')`, `ShardedFilename`, `Pack`), where a suffix
    holds no `..` component. The written or read files are then the loader's path plus a fixed suffix.

A checkpoint op in the top-level graph (TF1 `tf.compat.v1.saved_model` exports keep their saver there) is
refused: re-export with TF2 (`model.export(dir)` or `tf.saved_model.save`).

Also refused: a call (`StatefulPartitionedCall`, `If`, `While`, ... or any function-valued attribute) naming
something that is not a function of the library (TensorFlow would instantiate a registered op of that name),
a node placed on a remote job (`/job:worker`), and a `saved_model.pb` over 2 GiB (protobuf's limit).

This module imports only TensorFlow's generated protobuf classes, in the limited child (`isolate.py`),
before any loader call.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UnreadableModelError, one_line
from .specs import printable

MAX_PB_BYTES = (2 << 30) - 1  # protobuf cannot parse a larger message
MAX_PBTXT_BYTES = 256 << 20

# ---- the allowlist ----------------------------------------------------------------------------------------
# Every op here computes tensors from tensors (or creates / reads / writes a resource variable held in memory):
# none opens a file, a socket, a process, a queue, a dataset or a summary writer, or calls Python. Grouped
# as TensorFlow's op files group them. Ops outside it are refused even when harmless: add one here only after
# reading its kernel.
ALLOWED_OPS: frozenset[str] = frozenset(
    {
        # graph plumbing and calls of library functions (the callee is walked too)
        "Const", "Identity", "IdentityN", "NoOp", "Placeholder", "PlaceholderWithDefault", "StopGradient",
        "PreventGradient", "Snapshot", "EnsureShape", "CheckNumerics", "CheckNumericsV2", "Assert",
        "PartitionedCall", "StatefulPartitionedCall", "If", "StatelessIf", "While", "StatelessWhile", "Case",
        "StatelessCase", "Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "ControlTrigger",
        # resource variables (in memory): handles, reads, assignments
        "VarHandleOp", "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
        "VarIsInitializedOp", "DestroyResourceOp", "ResourceGather", "ResourceGatherNd", "VariableShape",
        "DisableCopyOnRead", "VariableV2", "Variable", "IsVariableInitialized", "Assign",
        # elementwise math
        "Abs", "Acos", "Acosh", "Add", "AddN", "AddV2", "Asin", "Asinh", "Atan", "Atan2", "Atanh", "Ceil",
        "ClipByValue", "Cos", "Cosh", "Div", "DivNoNan", "Erf", "Erfc", "Exp", "Expm1", "Floor", "FloorDiv",
        "FloorMod", "Inv", "Reciprocal", "IsFinite", "IsInf", "IsNan", "Lgamma", "Log", "Log1p", "Maximum",
        "Minimum", "Mod", "Mul", "MulNoNan", "Neg", "Pow", "RealDiv", "Rint", "Round", "Rsqrt", "Sigmoid", "Sign",
        "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Square", "SquaredDifference", "Sub", "Tan", "Tanh",
        "TruncateDiv", "TruncateMod", "Xdivy", "Xlogy", "Xlog1py", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
        "LeftShift", "RightShift", "Invert", "Cast", "Bitcast", "Complex", "Real", "Imag", "ComplexAbs", "Angle",
        "Conj", "SigmoidGrad", "TanhGrad", "RsqrtGrad", "SqrtGrad", "ReciprocalGrad",
        # comparison and logic
        "Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual", "LogicalAnd", "LogicalOr",
        "LogicalNot", "Select", "SelectV2", "ApproximateEqual",
        # reductions, scans, top-k
        "Sum", "Prod", "Mean", "Max", "Min", "All", "Any", "ArgMax", "ArgMin", "Cumsum", "Cumprod",
        "CumulativeLogsumexp", "TopKV2", "EuclideanNorm", "SegmentSum", "SegmentMax", "SegmentMean",
        "UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd", "Bincount",
        "DenseBincount",
        # linear algebra
        "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "MatrixBandPart", "MatrixDiag",
        "MatrixDiagV2", "MatrixDiagV3", "MatrixDiagPart", "MatrixDiagPartV2", "MatrixDiagPartV3",
        "MatrixSetDiag", "MatrixSetDiagV2", "MatrixSetDiagV3", "Cross", "Cholesky", "MatrixInverse",
        "MatrixDeterminant", "Qr", "Svd", "SelfAdjointEigV2", "MatrixTriangularSolve", "MatrixSolve",
        # neural network
        "BiasAdd", "BiasAddV1", "Conv", "Conv2D", "Conv3D", "Conv2DBackpropInput", "Conv3DBackpropInputV2",
        "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput", "AvgPool", "AvgPool3D", "MaxPool",
        "MaxPoolV2", "MaxPool3D", "MaxPoolWithArgmax", "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3",
        "LRN", "Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "Softmax", "LogSoftmax", "InTopKV2",
        "Dilation2D", "FusedPadConv2D", "FusedResizeAndPadConv2D", "NthElement", "DataFormatDimMap",
        "DataFormatVecPermute",
        # images (pure resampling)
        "ResizeBilinear", "ResizeNearestNeighbor", "ResizeBicubic", "ResizeArea", "ScaleAndTranslate",
        "CropAndResize", "ExtractImagePatches", "ExtractVolumePatches", "AdjustContrastv2", "RGBToHSV",
        "HSVToRGB", "ImageProjectiveTransformV2", "ImageProjectiveTransformV3",
        # shapes and arrays
        "Shape", "ShapeN", "Size", "Rank", "Reshape", "Squeeze", "ExpandDims", "Transpose", "ConjugateTranspose",
        "ConcatV2", "Concat", "ConcatOffset", "Pack", "Unpack", "Split", "SplitV", "Slice", "StridedSlice",
        "TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub", "TensorScatterMax", "TensorScatterMin",
        "ScatterNd", "Gather", "GatherV2", "GatherNd", "Tile", "Pad", "PadV2", "MirrorPad", "Fill", "ZerosLike",
        "OnesLike", "Range", "LinSpace", "OneHot", "Reverse", "ReverseV2", "ReverseSequence", "BroadcastTo",
        "BroadcastArgs", "BroadcastGradientArgs", "Where", "Unique", "UniqueV2", "SpaceToBatchND",
        "BatchToSpaceND", "SpaceToDepth", "DepthToSpace", "InvertPermutation", "BatchMatrixBandPart", "Diag",
        "DiagPart", "Roll", "SearchSorted", "LowerBound", "UpperBound", "Bucketize", "ListDiff", "SetSize",
        "Empty", "StridedSliceGrad", "UnravelIndex", "TensorStridedSliceUpdate", "DynamicStitch",
        "ParallelDynamicStitch", "DynamicPartition",
        # dense TensorLists and TensorArrays (in memory; Keras RNNs and tf.while_loop use them)
        "TensorListReserve", "TensorListFromTensor", "TensorListStack", "TensorListGetItem", "TensorListSetItem",
        "TensorListLength", "TensorListElementShape", "TensorListPushBack", "TensorListPopBack",
        "EmptyTensorList", "TensorListConcatV2", "TensorListSplit", "TensorListGather",
        "TensorListScatterIntoExistingList",
        "TensorArrayV3", "TensorArrayReadV3", "TensorArrayWriteV3", "TensorArrayGatherV3", "TensorArrayScatterV3",
        "TensorArraySizeV3", "TensorArrayConcatV3", "TensorArraySplitV3", "TensorArrayCloseV3",
        # random numbers (no file, no seed state outside the process)
        "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
        "StatelessRandomUniform", "StatelessRandomUniformV2", "StatelessRandomUniformInt",
        "StatelessRandomUniformIntV2", "StatelessRandomNormal", "StatelessRandomNormalV2",
        "StatelessTruncatedNormal", "StatelessTruncatedNormalV2", "StatelessRandomGetKeyCounter",
        "StatelessRandomGetAlg", "StatelessRandomGetKeyCounterAlg", "StatelessRandomUniformFullInt",
        "StatelessRandomUniformFullIntV2",
        # fake quantisation (quantisation-aware training graphs)
        "FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel", "FakeQuantWithMinMaxArgs",
        "QuantizeAndDequantizeV2", "QuantizeAndDequantizeV3", "QuantizeAndDequantizeV4",
        # strings: pure formatting and matching (the checkpoint path is built with them; no op here opens a file)
        "StringJoin", "StaticRegexFullMatch", "ShardedFilename", "StringFormat", "AsString", "RegexFullMatch",
        "StaticRegexReplace", "StringLength", "Substr", "StringStrip", "StringLower", "StringUpper",
    }
)  # fmt: skip

# checkpoint ops: allowed only in the saver functions, on paths derived from the loader's filename (see above)
CHECKPOINT_OPS: frozenset[str] = frozenset({"SaveV2", "RestoreV2", "MergeV2Checkpoints"})
# which inputs of a checkpoint op are paths
_PATH_INPUTS = {"SaveV2": (0,), "RestoreV2": (0,), "MergeV2Checkpoints": (0, 1)}


class _Refused(Exception):
    """Internal: why the graph is refused (one line, without the file's name)."""


def _name(text: str) -> str:
    return printable(text)[:120]


def _base(ref: str) -> str:
    """The node name of an input reference (`^ctrl`, `node:0`, `node:output:0` inside functions)."""
    return ref.lstrip("^").split(":", 1)[0]


def _func_refs(node) -> list[str]:
    """Names of the functions a NodeDef calls through function-valued attributes (`f`, `then_branch`, ...)."""
    out = []
    for value in node.attr.values():
        if value.HasField("func"):
            out.append(value.func.name)
        if value.HasField("list"):
            out.extend(f.name for f in value.list.func)
    return out


def _object_graph_refs(meta) -> set[str]:
    """Functions the object graph names (the TF2 loader turns each into a callable)."""
    refs: set[str] = set()
    for obj in meta.object_graph_def.nodes:
        kind = obj.WhichOneof("kind")
        if kind == "function":
            refs.update(obj.function.concrete_functions)
        elif kind == "bare_concrete_function":
            refs.add(obj.bare_concrete_function.concrete_function_name)
    for fn in meta.object_graph_def.concrete_functions:
        refs.add(fn)
    return refs


def _where(fn: str | None) -> str:
    return f"in function '{_name(fn)}'" if fn else "in the top-level graph"


def _check_node(node, fn: str | None, library: set[str]) -> None:
    if "/job:" in node.device and "/job:localhost" not in node.device:
        raise _Refused(f"node '{_name(node.name)}' {_where(fn)} is placed on a remote device '{_name(node.device)}'")
    if node.op not in ALLOWED_OPS and node.op not in CHECKPOINT_OPS and node.op not in library:
        raise _Refused(
            f"op '{_name(node.op)}' (node '{_name(node.name)}' {_where(fn)}) is not a pure tensor op preflight allows"
        )
    for ref in _func_refs(node):
        if ref not in library:
            raise _Refused(
                f"node '{_name(node.name)}' {_where(fn)} calls '{_name(ref)}', which is not a function of the "
                f"model's library"
            )


def _check_path(fdef, inputs: list[str], arg0: str, nodes: dict, seen: set[str] | None = None) -> None:
    """Each of `inputs` (references inside `fdef`) is `arg0` plus, at most, constant suffixes without '..'."""
    seen = set() if seen is None else seen
    for ref in inputs:
        base = _base(ref)
        if base == arg0:
            continue
        if base in seen:
            continue
        seen.add(base)
        node = nodes.get(base)
        if node is None:
            raise _Refused(f"a checkpoint path in '{_name(fdef.signature.name)}' comes from '{_name(base)}'")
        data = [i for i in node.input if not i.startswith("^")]
        if node.op in ("Identity", "Pack") and data:
            _check_path(fdef, data, arg0, nodes, seen)
        elif node.op in ("StringJoin", "ShardedFilename") and data:
            _check_path(fdef, data[:1], arg0, nodes, seen)  # the prefix; the rest are suffix or shard numbers
            if node.op == "StringJoin":
                _check_join(fdef, node, data[1:], nodes)
        else:
            raise _Refused(
                f"a checkpoint path in '{_name(fdef.signature.name)}' is built by op '{_name(node.op)}' "
                f"(node '{_name(node.name)}'), not from the loader's filename"
            )


MAX_SUFFIX_CHOICES = 64


def _check_join(fdef, join, suffixes: list[str], nodes: dict) -> None:
    """What a StringJoin appends to the path, with its separator, in every combination of its constant
    choices, holds no '..' path component (pieces '/.' and './x' are harmless alone, '/../x' together)."""
    sep = join.attr["separator"].s.decode("utf-8", "replace") if "separator" in join.attr else ""
    tails = [""]
    for ref in suffixes:
        tails = [t + sep + piece for t in tails for piece in _suffix_choices(fdef, ref, nodes)]
        if len(tails) > MAX_SUFFIX_CHOICES:
            raise _Refused(f"a checkpoint path in '{_name(fdef.signature.name)}' has too many constant suffixes")
    for tail in tails:
        parts = tail.replace("\\", "/").split("/")[1:]  # the first part extends the loader's last component
        if ".." in parts or "\x00" in tail:
            raise _Refused(f"a checkpoint path suffix in '{_name(fdef.signature.name)}' holds '..' ({_name(tail)!r})")


def _suffix_choices(fdef, ref: str, nodes: dict) -> list[str]:
    """The strings a StringJoin suffix can be: a constant, or a Select between suffixes."""
    node = nodes.get(_base(ref))
    if node is None:
        raise _Refused(f"a checkpoint path suffix in '{_name(fdef.signature.name)}' comes from '{_name(_base(ref))}'")
    if node.op == "Select":
        choices: list[str] = []
        for r in [i for i in node.input if not i.startswith("^")][1:]:
            choices += _suffix_choices(fdef, r, nodes)
            if len(choices) > MAX_SUFFIX_CHOICES:  # a tree of Selects sharing nodes would double at every level
                raise _Refused(f"a checkpoint path in '{_name(fdef.signature.name)}' has too many constant suffixes")
        return choices
    if node.op != "Const" or "value" not in node.attr or len(node.attr["value"].tensor.string_val) != 1:
        raise _Refused(
            f"a checkpoint path suffix in '{_name(fdef.signature.name)}' is built by op '{_name(node.op)}' "
            f"(node '{_name(node.name)}'), not a constant string"
        )
    return [node.attr["value"].tensor.string_val[0].decode("utf-8", "replace")]


def check_meta_graph(meta) -> None:
    """Raise _Refused unless every op of `meta` (a MetaGraphDef) is allowed (see the module's docstring)."""
    graph = meta.graph_def
    functions = {f.signature.name: f for f in graph.library.function}
    library = set(functions)
    saver = meta.saver_def
    saver_nodes = {_base(saver.save_tensor_name), _base(saver.restore_op_name)} - {""}
    filename = _base(saver.filename_tensor_name)

    # who references each function: (caller function or None for the top level, node)
    callers: dict[str, list[tuple[str | None, object]]] = {}
    for node in graph.node:
        _check_node(node, None, library)
        if node.op in CHECKPOINT_OPS:
            raise _Refused(
                f"checkpoint op '{node.op}' (node '{_name(node.name)}') is in the top-level graph (a TF1 saver); "
                f"preflight reads TF2 SavedModels only: re-export with model.export(dir) or tf.saved_model.save"
            )
        for ref in [*_func_refs(node), *([node.op] if node.op in library else [])]:
            callers.setdefault(ref, []).append((None, node))
    for name, fdef in functions.items():
        for node in fdef.node_def:
            _check_node(node, name, library)
            for ref in [*_func_refs(node), *([node.op] if node.op in library else [])]:
                callers.setdefault(ref, []).append((name, node))
    named_by_objects = _object_graph_refs(meta)

    for name, fdef in functions.items():
        ckpt = [n for n in fdef.node_def if n.op in CHECKPOINT_OPS]
        if not ckpt:
            continue
        first = ckpt[0]
        where = f"op '{first.op}' (node '{_name(first.name)}')"
        if name in named_by_objects:
            raise _Refused(f"{where} is in function '{_name(name)}', which the object graph exposes")
        for caller, node in callers.get(name, []):
            data = [i for i in node.input if not i.startswith("^")]
            if caller is not None or node.name not in saver_nodes or not data or _base(data[0]) != filename:
                raise _Refused(
                    f"{where} is in function '{_name(name)}', called by node '{_name(node.name)}' "
                    f"{_where(caller)}, which is not the saver's save or restore call with its filename"
                )
        args = fdef.signature.input_arg
        if not args:
            raise _Refused(f"{where} is in function '{_name(name)}', which takes no filename argument")
        nodes = {n.name: n for n in fdef.node_def}
        for op in ckpt:
            data = [i for i in op.input if not i.startswith("^")]
            _check_path(fdef, [data[i] for i in _PATH_INPUTS[op.op] if i < len(data)], args[0].name, nodes)


def check_saved_model(path: Path) -> None:
    """Refuse (UnreadableModelError, one line) a SavedModel directory whose graph holds any op outside the
    allowlist. Parses `saved_model.pb` (or `.pbtxt`) with TensorFlow's protobuf classes; runs no op."""
    from google.protobuf import message, text_format
    from tensorflow.core.protobuf import saved_model_pb2

    label = path.name
    files = [p for p in (path / "saved_model.pb", path / "saved_model.pbtxt") if p.is_file()]
    if not files:
        raise UnreadableModelError(f"{label}: no saved_model.pb in the directory")
    for file in files:
        cap = MAX_PB_BYTES if file.suffix == ".pb" else MAX_PBTXT_BYTES
        size = file.stat().st_size
        if size > cap:
            raise UnreadableModelError(f"{label}: {file.name} is {size:,} bytes (at most {cap:,} can be parsed)")
        sm = saved_model_pb2.SavedModel()
        try:
            if file.suffix == ".pb":
                sm.ParseFromString(file.read_bytes())
            else:
                text_format.Parse(file.read_text(encoding="utf-8"), sm)
        except (message.DecodeError, text_format.ParseError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise UnreadableModelError(f"{label}: not a loadable SavedModel ({one_line(exc)})") from exc
        if not sm.meta_graphs:
            raise UnreadableModelError(f"{label}: not a loadable SavedModel (no meta graph in {file.name})")
        for meta in sm.meta_graphs:
            try:
                check_meta_graph(meta)
            except RecursionError:  # a chain of thousands of Identity or Select nodes on a checkpoint path
                raise UnreadableModelError(
                    f"{label}: refused: a checkpoint path is built by a chain of ops too long to follow"
                ) from None
            except _Refused as why:
                raise UnreadableModelError(
                    f"{label}: refused: {why} (TensorFlow would run it while loading or converting the model; "
                    f"see docs/safety.md)"
                ) from None
