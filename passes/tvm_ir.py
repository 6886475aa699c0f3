"""The one module that reads TVM IR objects.

TVM's Python API changes between releases (0.27 replaced `struct_info` by `ty`, moved relax
`Var`/`Call`/`Constant` into `tvm.ir`, and `estimate_tir_flops` into `tvm.s_tir`). Every accessor of
IR objects preflight needs lives here, so that an upgrade is a one-file change; the rest of
preflight works on the plain dataclasses of `passes.graph`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import tvm
from tvm import relax
from tvm.ir.prim.expr import FloatImm, IntImm

from ._gc import gc_paused
from .graph import Operand, OpGraph, OpNode, SourceValue, TensorInfo

# The call ops whose first argument names a function and second holds the tensor arguments.
_CALL_WITH_CALLEE = {
    "relax.call_tir",
    "relax.call_tir_inplace",
    "relax.call_dps_packed",
    "relax.call_tir_with_grad",
    "relax.dist.call_tir_local_view",
}
_PACKED_CALLS = {"relax.call_pure_packed", "relax.call_inplace_packed", "relax.call_builtin_with_ctx"}


class IRError(ValueError):
    """The IRModule cannot be analysed as it is (dynamic shapes, control flow, ...)."""


class DataDependentShapeError(IRError):
    """A tensor's shape is computed from input values (e.g. ONNX ConstantOfShape of an input), not from shapes."""

    def __init__(self, tensor: str):
        self.tensor = tensor
        super().__init__(f"tensor '{tensor}' has a shape computed from the values of the inputs")


class DynamicShapeError(IRError):
    """A tensor has a dimension that is not a known integer."""

    def __init__(self, tensor: str, dim: int, symbol: str):
        self.tensor, self.dim, self.symbol = tensor, dim, symbol
        super().__init__(f"tensor '{tensor}' dimension {dim} is dynamic ('{symbol}')")


# --------------------------------------------------------------------------------------------
# Small accessors
# --------------------------------------------------------------------------------------------


def _key(obj) -> int:
    return obj.__chandle__()


def _constant_key(const) -> int:
    """Identity of a constant's payload: two Constant nodes sharing one tensor are one weight."""
    value = getattr(const, "value", None)
    handle = getattr(value, "__chandle__", None)
    return handle() if handle is not None else _key(const)


def _scalar_value(const, info: TensorInfo) -> float | None:
    """The value of a one-element numeric constant (a literal such as GELU's 1/sqrt(2)), else None."""
    if info.numel != 1 or not info.dtype.startswith(("float", "int", "uint", "bfloat")):
        return None
    try:
        return float(const.value.numpy().reshape(-1)[0])
    except (AttributeError, TypeError, ValueError):  # a payload numpy cannot read (e.g. bfloat16)
        return None


def _is_call(expr) -> bool:
    return isinstance(expr, tvm.ir.Call)


def _op_name(call) -> str | None:
    op = call.op
    return op.name if isinstance(op, tvm.ir.Op) else None


def _tensor_infos(ty, where: str) -> tuple[TensorInfo, ...] | None:
    """The tensors a value of type `ty` holds (a tuple flattens), or None if it holds none."""
    if isinstance(ty, relax.TensorType):
        shape = ty.shape
        if shape is None:
            raise IRError(f"tensor '{where}' has unknown rank")
        if not isinstance(shape, relax.ShapeExpr):  # a shape variable: known only when the graph runs
            raise DataDependentShapeError(where)
        dims = []
        for i, d in enumerate(shape.values):
            if not isinstance(d, IntImm):
                raise DynamicShapeError(where, i, str(d))
            dims.append(int(d.value))
        return (TensorInfo(tuple(dims), str(ty.dtype)),)
    if isinstance(ty, tvm.ir.TupleType):
        out: list[TensorInfo] = []
        for i, f in enumerate(ty.fields):
            sub = _tensor_infos(f, f"{where}[{i}]")
            if sub:
                out.extend(sub)
        return tuple(out)
    return None


def _plain(value):
    """Convert an attribute value to plain Python (ints, floats, strs, lists, dicts)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):  # also TVM's dtype, a str subclass
        return str(value)
    if isinstance(value, IntImm):
        return int(value.value)
    if isinstance(value, FloatImm):
        return float(value.value)
    if isinstance(value, tvm.ir.StringImm):
        return value.value
    if isinstance(value, tvm.ir.PrimType):
        return str(value)
    if hasattr(value, "items") and not isinstance(value, tvm.ir.Attrs):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Iterable) and not isinstance(value, tvm.ir.Expr):
        return [_plain(v) for v in value]
    return str(value)


def attrs_to_dict(attrs) -> dict:
    """A Relax op's attributes as a plain dict (empty when the op has none)."""
    if attrs is None:
        return {}
    if isinstance(attrs, tvm.ir.DictAttrs):
        return {str(k): _plain(v) for k, v in attrs.items()}
    out = {}
    info = type(attrs).__tvm_ffi_type_info__
    while info is not None:
        for f in info.fields:
            out.setdefault(f.name, _plain(getattr(attrs, f.name)))
        info = info.parent_type_info
    return out


def _func_attr(func, name: str):
    attrs = func.attrs
    if attrs is None or name not in attrs.keys():
        return None
    return attrs[name]


def num_inputs(func) -> int | None:
    """The `num_input` attribute importers set when weights follow the inputs as parameters."""
    n = _func_attr(func, "num_input")
    return None if n is None else int(n)


def main_function(mod: tvm.IRModule, name: str = "main"):
    try:
        func = mod[name]
    except Exception as exc:  # KeyError, ValueError or TVM's own error, by release
        raise IRError(f"the IRModule has no Relax function '{name}'") from exc
    if not isinstance(func, relax.Function):
        raise IRError(f"'{name}' is not a Relax function")
    return func


def with_num_inputs(mod: tvm.IRModule, n_inputs: int, func_name: str = "main") -> tvm.IRModule:
    """Set the function's `num_input` attribute (its first `n_inputs` parameters are inputs, the rest weights)."""
    func = main_function(mod, func_name)
    if num_inputs(func) == n_inputs or n_inputs >= len(func.params):
        return mod
    return with_function_attrs(mod, func_name, {"num_input": n_inputs})


def param_types(mod: tvm.IRModule, func_name: str = "main") -> list[tuple[str, object]]:
    """(name, TensorType) of every parameter of the function."""
    func = main_function(mod, func_name)
    return [(p.name, p.ty) for p in func.params]


def symbolic_dims(mod: tvm.IRModule, func_name: str = "main") -> list[tuple[str, int, str]]:
    """(parameter, dimension, symbol name) for every non-constant input dimension."""
    out = []
    for name, ty in param_types(mod, func_name):
        if isinstance(ty, relax.TensorType) and ty.shape is not None:
            for i, d in enumerate(ty.shape.values):
                if not isinstance(d, IntImm):
                    out.append((name, i, str(d)))
    return out


def bind_symbolic_dims(mod: tvm.IRModule, values: dict[str, int], func_name: str = "main") -> tvm.IRModule:
    """Replace symbolic dimension variables by integers and re-infer every shape."""
    func = main_function(mod, func_name)
    bound = func.bind_symbolic_vars(values)
    return relax.transform.Normalize()(_replace(mod, func_name, bound))


def _replace(mod: tvm.IRModule, name: str, func) -> tvm.IRModule:
    return tvm.IRModule({gv: (func if gv.name_hint == name else f) for gv, f in mod.functions.items()})


def strip_param_data(mod: tvm.IRModule, func_name: str = "main") -> tvm.IRModule:
    """Drop the `params` payload importers attach to the function (weights are not needed)."""
    func = main_function(mod, func_name)
    if _func_attr(func, "params") is None:
        return mod
    func = func.without_attr("params")
    return _replace(mod, func_name, func)


def prim_func_flops(mod: tvm.IRModule, gvar) -> int | None:
    """TVM's own FLOP estimate of a PrimFunc (every add and multiply counts 1), or None."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        func = mod[gvar]
        return int(estimate_tir_flops(tvm.IRModule({"main": func})))
    except Exception:  # noqa: BLE001 - TVM raises many error types for functions it cannot estimate
        return None


def estimate_module_tir_flops(mod: tvm.IRModule) -> int:
    """Sum of TVM's FLOP estimates over every PrimFunc call in `main`, weighted by call count."""
    graph = extract(mod)
    return sum(op.tir_flops or 0 for op in graph.ops if op.op in _CALL_WITH_CALLEE)


def legalize(mod: tvm.IRModule) -> tvm.IRModule:
    """Lower every Relax op to a `call_tir` of a PrimFunc with TVM's LegalizeOps."""
    return relax.transform.LegalizeOps()(mod)


# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------


class _Extractor:
    def __init__(self, mod: tvm.IRModule, tir_flops: bool):
        self.mod = mod
        self.tir_flops = tir_flops
        self.ops: list[OpNode] = []
        self.sources: list[SourceValue] = []
        self.producer: dict[int, int] = {}
        self.weight_values: set[int] = set()
        self.next_value = 0
        # relax var handle -> list of (value id, field, TensorInfo) it refers to
        self.env: dict[int, list[tuple[int, int | None, TensorInfo]]] = {}
        self._prim_flops: dict[str, int | None] = {}
        self.constants: dict[int, int] = {}  # constant payload -> value id

    def new_value(self) -> int:
        self.next_value += 1
        return self.next_value - 1

    def add_source(
        self, name: str, tensor: TensorInfo, kind: str, scalar_const: bool = False, scalar: float | None = None
    ) -> int:
        vid = self.new_value()
        self.sources.append(SourceValue(vid, name, tensor, kind, scalar_const, scalar))
        if kind == "weight":
            self.weight_values.add(vid)
        return vid

    # -- operand resolution -----------------------------------------------------------------
    def refs(self, expr, where: str) -> list[tuple[int, int | None, TensorInfo]]:
        if isinstance(expr, tvm.ir.Var):
            return self.env.get(_key(expr), [])
        if isinstance(expr, tvm.ir.Constant):
            infos = _tensor_infos(expr.ty, where) if hasattr(expr, "ty") else None
            if not infos:
                return []
            info = infos[0]
            key = _constant_key(expr)
            if key not in self.constants:  # one weight, however many ops read it
                self.constants[key] = self.add_source(
                    f"const{len(self.constants)}",
                    info,
                    "weight",
                    scalar_const=not info.shape,
                    scalar=_scalar_value(expr, info),
                )
            return [(self.constants[key], None, info)]
        if isinstance(expr, tvm.ir.Tuple):
            out = []
            for i, f in enumerate(expr.fields):
                out.extend(self.refs(f, f"{where}[{i}]"))
            return out
        if isinstance(expr, tvm.ir.TupleGetItem):
            parts = self.refs(expr.tuple_value, where)
            idx = int(expr.index)
            return [parts[idx]] if idx < len(parts) else []
        return []  # shapes, prim values, strings: not tensors

    # -- walking ----------------------------------------------------------------------------
    def function(self, func, args: list[list[tuple[int, int | None, TensorInfo]]] | None, n_inputs: int | None):
        if args is None:
            for i, p in enumerate(func.params):
                infos = _tensor_infos(p.ty, p.name)
                if not infos:
                    self.env[_key(p)] = []
                    continue
                kind = "input" if n_inputs is None or i < n_inputs else "weight"
                refs = []
                for j, info in enumerate(infos):
                    vid = self.add_source(p.name if len(infos) == 1 else f"{p.name}[{j}]", info, kind)
                    refs.append((vid, None, info))
                self.env[_key(p)] = refs
        else:
            for p, a in zip(func.params, args, strict=False):
                self.env[_key(p)] = a
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            return self.refs(body, "result")
        for block in body.blocks:
            for b in block.bindings:
                self.binding(b)
        return self.refs(body.body, "result")

    def binding(self, b) -> None:
        var, value = b.var, (b.value if isinstance(b, relax.VarBinding) else b.value)
        if isinstance(value, relax.If):
            raise IRError("control flow (relax.If) is not supported: export the model without data-dependent branches")
        if _is_call(value):
            self.call(var, value)
        else:
            self.env[_key(var)] = self.refs(value, var.name)

    def call(self, var, call) -> None:
        name = _op_name(call)
        if name is None and isinstance(call.op, tvm.ir.GlobalVar):
            callee = self.mod[call.op]
            if isinstance(callee, relax.Function):  # a fused or user-defined Relax subfunction: inline it
                args = [self.refs(a, var.name) for a in call.args]
                self.env[_key(var)] = self.function(callee, args, None)
                return
            name = "relax.call_tir"  # direct call of a PrimFunc
            callee_name, tensor_args = call.op.name_hint, list(call.args)
        elif name is None:
            name = "relax.call_closure"
            callee_name, tensor_args = None, list(call.args)
        elif name in _CALL_WITH_CALLEE:
            target = call.args[0]
            callee_name = (
                target.name_hint
                if isinstance(target, tvm.ir.GlobalVar)
                else _plain(getattr(target, "global_symbol", target))
            )
            tensor_args = list(call.args[1:])
        elif name in _PACKED_CALLS:
            target = call.args[0]
            callee_name = _plain(getattr(target, "global_symbol", target))
            tensor_args = list(call.args[1:])
        else:
            callee_name, tensor_args = None, list(call.args)

        operands: list[Operand] = []
        for i, a in enumerate(tensor_args):
            for vid, fld, info in self.refs(a, f"{var.name}.arg{i}"):
                src = self.producer.get(vid)
                kind = "weight" if vid in self.weight_values else ("activation" if src is not None else "input")
                operands.append(Operand(info, src, kind, vid, fld))
        outputs = _tensor_infos(var.ty, var.name) or ()

        tir = None
        if name in _CALL_WITH_CALLEE and isinstance(call.args[0], tvm.ir.GlobalVar) and self.tir_flops:
            tir = self._tir(call.args[0])
        elif name == "relax.call_tir" and isinstance(call.op, tvm.ir.GlobalVar) and self.tir_flops:
            tir = self._tir(call.op)

        attrs = attrs_to_dict(call.attrs)
        if name == "relax.shape_to_tensor" and call.args:
            dims = getattr(getattr(call.args[0], "ty", None), "values", None)
            if dims is not None and all(isinstance(d, IntImm) for d in dims):
                attrs["shape"] = [int(d.value) for d in dims]  # the static shape it turns into a tensor
        elif name == "relax.clip" and len(call.args) == 3:
            bounds = [a.value for a in call.args[1:] if isinstance(a, IntImm | FloatImm)]
            if len(bounds) == 2:
                attrs["min"], attrs["max"] = (float(b) for b in bounds)  # relax.clip takes them as arguments

        index = len(self.ops)
        weight_only = bool(operands) and all(o.kind == "weight" for o in operands)
        node = OpNode(
            index=index,
            name=var.name,
            op=name,
            attrs=attrs,
            operands=operands,
            outputs=outputs,
            callee=callee_name,
            tir_flops=tir,
            weight_only=weight_only,
        )
        self.ops.append(node)
        refs = []
        for j, info in enumerate(outputs):
            vid = self.new_value()
            self.producer[vid] = index
            if weight_only:
                self.weight_values.add(vid)
            refs.append((vid, j if len(outputs) > 1 else None, info))
        self.env[_key(var)] = refs

    def _tir(self, gvar) -> int | None:
        key = gvar.name_hint
        if key not in self._prim_flops:
            self._prim_flops[key] = prim_func_flops(self.mod, gvar)
        return self._prim_flops[key]


@gc_paused
def extract(
    mod: tvm.IRModule, func_name: str = "main", *, n_inputs: int | None = None, tir_flops: bool = True
) -> OpGraph:
    """Flatten a Relax function into an `OpGraph` of plain data.

    Args:
        mod: the IRModule; nested Relax functions it calls (e.g. after FuseOps) are inlined.
        func_name: the entry function.
        n_inputs: how many leading parameters are model inputs (the rest are weights). Defaults to
            the function's `num_input` attribute, or every parameter when it has none.
        tir_flops: estimate FLOPs of `call_tir` PrimFuncs with TVM's TIR estimator.

    Raises:
        DynamicShapeError: a tensor has a dimension that is not a known integer.
        IRError: the function cannot be flattened (e.g. it has control flow).
    """
    func = main_function(mod, func_name)
    if n_inputs is None:
        n_inputs = num_inputs(func)
    ex = _Extractor(mod, tir_flops)
    result = ex.function(func, None, n_inputs)
    outputs = [(ex.producer.get(vid), vid) for vid, _, _ in result]
    return OpGraph(ops=ex.ops, sources=ex.sources, outputs=outputs, value_producer=ex.producer)


_EP_CONVERT_OPS: frozenset[str] | None = None


def exported_program_convert_ops() -> frozenset[str]:
    """The ATen targets TVM's exported-program importer converts itself ("linear.default", "add.Tensor", ...).

    The keys of its converter map, named as `torch.fx` node targets' `__name__` (`OpOverload` name without
    the `aten.` namespace). Read once per process.
    """
    global _EP_CONVERT_OPS
    if _EP_CONVERT_OPS is None:
        from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

        _EP_CONVERT_OPS = frozenset(ExportedProgramImporter().create_convert_map().keys())
    return _EP_CONVERT_OPS


def registered_relax_ops() -> list[str]:
    """Names of every `relax.*` operator registered in this TVM build."""
    return sorted(str(n) for n in tvm.ir.Op.list_op_names() if str(n).startswith("relax."))


# --------------------------------------------------------------------------------------------
# Attributes, passes and instruments (used by analyzer.annotate and passes.instrument)
# --------------------------------------------------------------------------------------------


def function_names(mod: tvm.IRModule) -> list[str]:
    """Names of the Relax functions of the module."""
    return [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, relax.Function)]


def with_module_attrs(mod: tvm.IRModule, attrs: dict) -> tvm.IRModule:
    """The module with `attrs` (str keys; str, int, float, bool, list, dict values) added."""
    return mod.with_attrs(attrs)


def with_function_attrs(mod: tvm.IRModule, func_name: str, attrs: dict) -> tvm.IRModule:
    """A copy of the module with `attrs` added to the Relax function `func_name`."""
    func = main_function(mod, func_name)
    for k, v in attrs.items():
        func = func.with_attr(k, v)
    out = mod.clone()
    out.update_func(out.get_global_var(func_name), func)
    return out


def module_attr(mod: tvm.IRModule, key: str):
    """A module attribute as plain Python data, or None."""
    attrs = mod.attrs
    if attrs is None or key not in attrs.keys():
        return None
    return _plain(attrs[key])


def function_attrs(mod: tvm.IRModule, func_name: str = "main") -> dict:
    """Every attribute of the Relax function `func_name`, as plain Python data."""
    attrs = main_function(mod, func_name).attrs
    return {} if attrs is None else {str(k): _plain(v) for k, v in attrs.items()}


def without_attrs(mod: tvm.IRModule, prefix: str) -> tvm.IRModule:
    """A copy of the module without the module and function attributes whose key starts with `prefix`."""
    out = mod.clone()
    for gv, f in mod.functions.items():
        if isinstance(f, relax.Function) and f.attrs is not None:
            keys = [str(k) for k in f.attrs.keys() if str(k).startswith(prefix)]
            for k in keys:
                f = f.without_attr(k)
            if keys:
                out.update_func(out.get_global_var(gv.name_hint), f)
    if out.attrs is not None:
        for k in [str(k) for k in out.attrs.keys() if str(k).startswith(prefix)]:
            out = out.without_attr(k)
    return out


def structural_equal(a, b) -> bool:
    """TVM's structural equality of two IR objects (module attributes included)."""
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(a, b))


def module_pass(transform, name: str):
    """A `tvm.transform` module pass (opt_level 0) running `transform(mod) -> mod`."""
    return tvm.transform.module_pass(lambda mod, _ctx: transform(mod), opt_level=0, name=name)


def pass_instrument(cls):
    """Register `cls` (with `run_before_pass(mod, info)` / `run_after_pass(mod, info)`) as a TVM pass instrument."""
    return tvm.instrument.pass_instrument(cls)


def register_errors(*classes: type) -> None:
    """Let these exception types cross TVM's FFI (e.g. raised inside a pass) as themselves, not RuntimeError.

    Each must take the message as its only constructor argument."""
    import tvm_ffi

    for cls in classes:
        tvm_ffi.register_error(cls)


def pass_name(info) -> str:
    """The name of the pass a `PassInfo` describes."""
    return str(info.name)


# --------------------------------------------------------------------------------------------
# TVM importers' internals (converter maps, custom converters) used by analyzer/frontends
# --------------------------------------------------------------------------------------------


# ONNX op type -> converter class (an `OnnxOpConverter` subclass with `_impl_v<N>` class methods) for ops TVM's
# ONNX importer lacks or converts wrongly; `onnx_import` hands them to the importer beside its own.
ONNX_EXTRA_CONVERTERS: dict[str, type] = {}


def onnx_convert_ops() -> set[str]:
    """ONNX op types the ONNX import converts: TVM's importer's own and ONNX_EXTRA_CONVERTERS."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    return set(_get_convert_map().keys()) | set(ONNX_EXTRA_CONVERTERS)


def onnx_import(model, shape_dict: dict[str, list[int]], dtype_dict: dict[str, str]) -> tvm.IRModule:
    """TVM's ONNX importer on `model` with ONNX_EXTRA_CONVERTERS added to its converter map.

    Initializers marked `data_location == EXTERNAL` are shape-only: they become uninitialised constants of their
    shape and dtype (no data is read; see `_onnx_shape_only_weights`). Every other tensor must hold its data.

    The importer prints the failing operator's inputs to stdout before re-raising; that print is swallowed
    (stdout belongs to the CLI's output) and the exception propagates unchanged.
    """
    import contextlib
    import io

    from tvm.relax.frontend.onnx import onnx_frontend

    base = onnx_frontend._get_convert_map

    def extended():
        return {**base(), **ONNX_EXTRA_CONVERTERS}

    onnx_frontend._get_convert_map = extended
    try:
        with contextlib.redirect_stdout(io.StringIO()), _onnx_shape_only_weights():
            return _onnx_from_model(model, shape_dict, dtype_dict)
    finally:
        onnx_frontend._get_convert_map = base


def tflite_convert_ops(model, subgraph) -> set[str]:
    """TFLite builtin operator names TVM's TFLite importer converts (it builds its map per model)."""
    from tvm.relax.frontend.tflite.tflite_frontend import ExprTable, OperatorConverter

    return set(OperatorConverter(model, subgraph, ExprTable(), relax.BlockBuilder()).convert_map)


def reduce_converter(op_name: str):
    """A `custom_convert_map` entry for an ATen reduction (`amax`, `amin`) as the Relax op `op_name`.

    The importer calls it as `convert(fx_node, importer)`; `dim` and `keepdim` follow ATen (an empty dim
    list reduces over everything).
    """

    def convert(node, importer):
        x = importer.env[node.args[0]]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", None)
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        if isinstance(dim, int):
            dim = [dim]
        axis = list(dim) if dim else None
        return importer.block_builder.emit(getattr(relax.op, op_name)(x, axis=axis, keepdims=bool(keepdim)))

    return convert


def opaque_converter(callee: str):
    """A `custom_convert_map` entry for an op TVM cannot import: a packed call `callee` with the right outputs.

    The outputs' shapes and dtypes come from the fx node's `meta["val"]` (fake tensors); the call's arguments
    are the node's tensor inputs, so the data flow stays intact. Returns None from `convert` when the node has
    no tensor output to represent.
    """

    def convert(node, importer):
        args = [
            importer.env[a]
            for a in node.all_input_nodes
            if a in importer.env
            and isinstance(importer.env[a], relax.Expr)
            and isinstance(getattr(importer.env[a], "ty", None), relax.TensorType)
        ]
        vals = node.meta.get("val")
        vals = list(vals) if isinstance(vals, list | tuple) else [vals]
        out = [
            relax.TensorType([int(d) for d in v.shape], str(v.dtype).replace("torch.", ""))
            for v in vals
            if v is not None
        ]
        if not out:
            raise IRError(f"cannot represent {callee}: it has no tensor output")
        call = relax.call_dps_packed(callee, relax.Tuple(args), out if len(out) > 1 else out[0])
        return importer.block_builder.emit(call)

    return convert


def input_dims(mod: tvm.IRModule, n_inputs: int | None, func_name: str = "main") -> list[tuple[str, list, str]]:
    """(name, dims, dtype) of the function's first `n_inputs` tensor parameters (all when None).

    A dim is an int when static and the symbol's name (a str) when dynamic.
    """
    params = main_function(mod, func_name).params
    out = []
    for p in params[: n_inputs if n_inputs is not None else len(params)]:
        ty = p.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            continue
        dims = [int(d.value) if isinstance(d, IntImm) else str(d) for d in ty.shape.values]
        out.append((p.name, dims, str(ty.dtype)))
    return out


def batch_norm_eval_converter(node, importer):
    """`aten.batch_norm` (input, weight, bias, mean, var, training, momentum, eps, cudnn) in eval mode.

    TVM's converter map sends it to the `_native_batch_norm_legit_no_training` converter, which reads the
    arguments of that op (momentum, eps at 5, 6) and marks it training; this reads them where they are.
    """
    import numpy as np

    args, env = node.args, importer.env
    if len(args) > 5 and args[5]:
        raise NotImplementedError("batch_norm in training mode")
    x = env[args[0]]
    channels = int(x.ty.shape[1])
    dtype = x.ty.dtype

    def tensor(i, fill):
        return env[args[i]] if args[i] is not None else relax.const(np.full(channels, fill), dtype=dtype)

    eps = args[7] if len(args) > 7 else node.kwargs.get("eps", 1e-5)
    bn = relax.op.nn.batch_norm(
        x, tensor(1, 1.0), tensor(2, 0.0), tensor(3, 0.0), tensor(4, 1.0), axis=1, epsilon=eps, training=False
    )
    return importer.block_builder.emit(relax.TupleGetItem(importer.block_builder.emit(bn), 0))


def sdpa_converter(node, importer):
    """`aten.scaled_dot_product_attention` kept whole: `relax.nn.attention` on (B, S, H, D) views.

    TVM's own converter refuses boolean masks and drops `scale` and `enable_gqa`; this one turns a boolean
    mask into the additive mask torch builds (`where(mask, 0, -inf)`), passes the scale, and leaves fewer
    key/value heads as they are (relax.nn.attention accepts them, as torch's fused kernels do).
    """
    env, bb = importer.env, importer.block_builder
    args, kwargs = node.args, node.kwargs

    def arg(i, name, default=None):
        return args[i] if len(args) > i else kwargs.get(name, default)

    q, k, v = (env[args[i]] for i in range(3))
    if any(len(t.ty.shape) != 4 for t in (q, k, v)) or arg(4, "dropout_p", 0.0):
        return importer._scaled_dot_product_attention(node)  # 2-D inputs: TVM's own conversion
    mask = arg(3, "attn_mask")
    bias = None
    if mask is not None:
        bias = env[mask]
        if not str(bias.ty.dtype).startswith(("float", "bfloat")):  # a boolean mask (TVM may carry it as int)
            if str(bias.ty.dtype) != "bool":
                bias = bb.emit(relax.op.astype(bias, "bool"))
            zero = relax.const(0.0, q.ty.dtype)
            neg_inf = relax.const(float("-inf"), q.ty.dtype)
            bias = bb.emit(relax.op.where(bias, zero, neg_inf))
    causal = "TopLeft" if arg(5, "is_causal", False) else None
    scale = kwargs.get("scale", args[6] if len(args) > 6 else None)

    def bshd(t):
        return bb.emit(relax.op.permute_dims(t, [0, 2, 1, 3]))

    out = bb.emit(
        relax.op.nn.attention(
            bshd(q), bshd(k), bshd(v), bias=bias, scale=None if scale is None else float(scale), causal_mask=causal
        )
    )
    return bshd(out)


def cat_converter(node, importer):
    """`aten.cat`, skipping empty 1-D tensors as torch does (a fresh transformers DynamicCache holds one)."""
    tensors = importer.retrieve_args(node)[0]
    axis = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    kept = [t for t in tensors if [int(d) for d in t.ty.shape] != [0]]
    return importer.block_builder.emit(relax.op.concat(kept or tensors, axis=axis))


# --------------------------------------------------------------------------------------------
# PyTorch import: integer inputs of ops whose torch result is floating point (issue 11: DeBERTa-v2)
# --------------------------------------------------------------------------------------------
# torch promotes integer operands of true division and of transcendental functions to the default float dtype
# (`int64_tensor / 16` is float32; `torch.log(int_tensor)` is float32). TVM's converters keep the integer dtype, so
# DeBERTa-v2's relative-position buckets (`log(abs_pos / mid)`) reach `relax.log` as int64 and the import fails.

# ATen ops (core-ATen names, each one TVM converts) whose integer operands torch promotes to float
TORCH_FLOAT_RESULT_OPS = (
    "div.Tensor",
    "div.Scalar",
    "log.default",
    "log2.default",
    "log10.default",
    "log1p.default",
    "exp.default",
    "expm1.default",
    "sqrt.default",
    "rsqrt.default",
    "reciprocal.default",
    "sigmoid.default",
    "tanh.default",
    "erf.default",
    "sin.default",
    "cos.default",
)


def float_promoting_converter(target: str):
    """A `custom_convert_map` entry for ATen op `target`: TVM's own conversion, after casting each integer (or
    bool) tensor operand to the float dtype torch computes the node's result in (`meta["val"].dtype`)."""

    def convert(node, importer):
        base = getattr(importer, "_preflight_tvm_convert_map", None)
        if base is None:  # TVM's converters, before custom_convert_map replaced this one
            base = importer._preflight_tvm_convert_map = importer.create_convert_map()
        val = node.meta.get("val")
        want = str(getattr(val, "dtype", "")).replace("torch.", "")
        swapped = {}
        if want.startswith(("float", "bfloat")):
            for a in node.all_input_nodes:
                x = importer.env.get(a)
                ty = getattr(x, "ty", None)
                if isinstance(ty, relax.TensorType) and not str(ty.dtype).startswith(("float", "bfloat")):
                    swapped[a] = x
                    importer.env[a] = importer.block_builder.emit(relax.op.astype(x, want))
        try:
            return base[target](node)
        finally:
            importer.env.update(swapped)  # other users of the operand see its own dtype

    return convert


# --------------------------------------------------------------------------------------------
# ONNX import without weight data (issue 12: memory of the ONNX route)
# --------------------------------------------------------------------------------------------
# TVM's importer turns each initializer into a numpy array and then a TVM tensor (two copies of every weight) and
# runs onnx's checker on the whole ModelProto (a third, serialised). The analysis reads only shapes and dtypes, so
# the frontend leaves large weights' data out of the model and marks them `data_location == EXTERNAL`; here they
# become `tvm.runtime.empty` tensors: allocated but never written, so they cost address space, not memory, until
# something reads them (a converter folding a weight with numpy makes a real copy of that one result).

_ONNX_DTYPES = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64", 2: "uint8", 3: "int8"}


@contextlib.contextmanager
def _onnx_shape_only_weights():
    """While active, TVM's ONNX importer gives EXTERNAL-marked tensors an uninitialised tensor of their shape, and
    folds a Transpose of one (a tied embedding's output projection) or a Cast to another float or 8-bit type into
    another such tensor, as it would fold the data (the real fold copies the weight two or three times)."""
    from onnx import TensorProto
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    parse_original, convert_original = ONNXGraphImporter._parse_array, ONNXGraphImporter._convert_operator
    shape_only: set[int] = set()  # handles of the uninitialised tensors

    def empty(shape, dtype):
        t = tvm.runtime.empty(tuple(int(d) for d in shape), dtype)
        shape_only.add(t.__chandle__())
        return t

    def parse_array(self, tensor_proto):
        if tensor_proto.data_location == TensorProto.EXTERNAL:
            dtype = _ONNX_DTYPES.get(tensor_proto.data_type)
            if dtype is None:
                raise IRError(f"tensor {tensor_proto.name[:80]!r} has no data (element type {tensor_proto.data_type})")
            return empty(tensor_proto.dims, dtype)
        return parse_original(self, tensor_proto)

    def convert_operator(self, op_name, inputs, attrs, opset):
        value = getattr(inputs[0], "value", None) if inputs else None  # a Constant's tensor (IntImm: an int)
        if isinstance(value, tvm.runtime.Tensor) and value.__chandle__() in shape_only:
            data = inputs[0]
            shape = [int(d) for d in data.value.shape]
            if op_name == "Transpose":
                perm = attrs.get("perm") or list(reversed(range(len(shape))))  # numpy's default, as TVM's converter
                return relax.const(empty([shape[p] for p in perm], str(data.value.dtype)))
            to = _ONNX_DTYPES.get(attrs.get("to")) if op_name == "Cast" else None
            if to is not None:  # a weight cast to another float type (a mixed-precision export)
                return relax.const(empty(shape, to))
        return convert_original(self, op_name, inputs, attrs, opset)

    ONNXGraphImporter._parse_array, ONNXGraphImporter._convert_operator = parse_array, convert_operator
    try:
        yield
    finally:
        ONNXGraphImporter._parse_array, ONNXGraphImporter._convert_operator = parse_original, convert_original


def _onnx_from_model(model, shape_dict: dict[str, list[int]], dtype_dict: dict[str, str]) -> tvm.IRModule:
    """`tvm.relax.frontend.onnx.from_onnx(model, ...)` without its own run of onnx's checker (the frontend ran it
    on a copy without weight data; on `model` it would serialise every weight and then fail on the shape-only
    ones)."""
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    if model.ir_version < 3:
        raise ValueError(f"Model IR version {model.ir_version} not supported. Must be at least after 1.1.0.")
    opset = 1
    for op in model.opset_import:
        if str(op.domain) in ("ai.onnx", ""):
            opset = op.version
            break
    importer = ONNXGraphImporter(shape_dict, dtype_dict, keep_params_in_input=False, sanitize=True)
    return importer.from_onnx(model.graph, opset)


# --------------------------------------------------------------------------------------------
# Moving a module between processes (a frontend's child process hands its IRModule back)
# --------------------------------------------------------------------------------------------
# NB: tvm.ir.save_json (TVM 0.27.0.post1 with apache-tvm-ffi 0.1.15.post2) crashes with SIGSEGV in
# tvm::ffi::ToJSONGraph on any IntImm, and a TVMScript round trip fails on `R.const("-inf")`, so the
# object graph is written here from TVM's reflection: every object once (shared references kept), its
# type key and fields; tensors (bound constants) as raw bytes after the JSON.

_DUMP_MAGIC = b"PFIR0001"
_LOADABLE_PREFIXES = ("ir.", "relax.", "tirx.", "prim.")


def _field_names(cls, cache: dict) -> tuple[str, list[str]]:
    out = cache.get(cls)
    if out is None:
        chain = []
        info = cls.__tvm_ffi_type_info__
        while info is not None:
            chain.append(info)
            info = info.parent_type_info
        names = [f.name for info in reversed(chain) for f in info.fields]
        out = cache[cls] = (chain[0].type_key, names)
    return out


@gc_paused
def dump_module(mod: tvm.IRModule) -> bytes:
    """The module as bytes that `load_module` turns back into an equal module (in another process)."""
    import json
    import struct

    import tvm_ffi

    nodes: list = []
    index: dict[int, int] = {}
    blobs: list[bytes] = []
    cache: dict = {}

    def enc(obj):
        if obj is None or isinstance(obj, bool | int | float):
            return ["v", obj]
        if isinstance(obj, tvm_ffi.dtype):
            return ["dt", str(obj)]
        if isinstance(obj, str):
            return ["v", str(obj)]
        handle = obj.__chandle__() if hasattr(obj, "__chandle__") else None
        if handle is not None and handle in index:
            return ["r", index[handle]]
        if isinstance(obj, tvm.ir.Op):
            node = ["op", obj.name]
        elif isinstance(obj, tvm.ir.EnvFunc):  # a registered global function (e.g. a FuncType's derive_func)
            node = ["env", obj.name]
        elif isinstance(obj, tvm.runtime.Tensor):
            arr = obj.numpy()
            blobs.append(arr.tobytes())
            node = ["t", arr.dtype.name, list(arr.shape), len(blobs) - 1]
        elif isinstance(obj, tvm_ffi.Array | list | tuple):
            node = ["a", [enc(x) for x in obj]]
        elif isinstance(obj, tvm_ffi.Map | dict):
            node = ["m", [[enc(k), enc(v)] for k, v in obj.items()]]
        elif not hasattr(type(obj), "__tvm_ffi_type_info__"):
            raise ValueError(f"cannot write a {type(obj).__name__} into a module dump")
        else:
            key, names = _field_names(type(obj), cache)
            if key == "ir.DictAttrs":
                node = ["da", [[str(k), enc(v)] for k, v in obj.items()]]
            else:
                node = ["o", key, {n: enc(getattr(obj, n)) for n in names}]
        nodes.append(node)
        if handle is not None:
            index[handle] = len(nodes) - 1
        return ["r", len(nodes) - 1]

    root = enc(mod)
    head = json.dumps({"nodes": nodes, "root": root, "blobs": [len(b) for b in blobs]}).encode()
    return b"".join([_DUMP_MAGIC, struct.pack("<Q", len(head)), head, *blobs])


@gc_paused
def load_module(data: bytes) -> tvm.IRModule:
    """The IRModule `dump_module` wrote. Raises ValueError if `data` is not such a dump."""
    import json
    import struct

    import numpy as np
    import tvm_ffi

    try:
        import ml_dtypes  # noqa: F401 - registers bfloat16 and float8 with numpy
    except ImportError:
        pass

    if not data.startswith(_DUMP_MAGIC):
        raise ValueError("not a preflight module dump")
    (head_len,) = struct.unpack("<Q", data[8:16])
    doc = json.loads(data[16 : 16 + head_len])
    nodes = doc["nodes"]
    offsets, at = [], 16 + head_len
    for n in doc["blobs"]:
        offsets.append((at, at + n))
        at += n
    objs: list = [None] * len(nodes)
    done = [False] * len(nodes)

    def dec(ref):
        kind, value = ref[0], ref[1]
        if kind == "v":
            return value
        if kind == "dt":
            return tvm.DataType(value)
        if done[value]:
            return objs[value]
        node = nodes[value]
        tag = node[0]
        if tag == "op":
            obj = tvm.ir.Op.get(node[1])
        elif tag == "env":
            obj = tvm.ir.EnvFunc.get(node[1])
        elif tag == "t":
            lo, hi = offsets[node[3]]
            arr = np.frombuffer(data[lo:hi], dtype=np.dtype(node[1])).reshape(node[2])
            obj = tvm.runtime.tensor(arr)
        elif tag == "a":
            obj = tvm_ffi.convert([dec(x) for x in node[1]])
        elif tag == "m":
            obj = tvm_ffi.convert({dec(k): dec(v) for k, v in node[1]})
        elif tag == "da":
            obj = tvm.ir.make_node("ir.DictAttrs", **{k: dec(v) for k, v in node[1]})
        elif tag == "o" and str(node[1]).startswith(_LOADABLE_PREFIXES):
            obj = tvm.ir.make_node(node[1], **{k: dec(v) for k, v in node[2].items()})
        else:
            raise ValueError(f"unexpected node {str(node)[:80]} in a module dump")
        objs[value], done[value] = obj, True
        return obj

    mod = dec(doc["root"])
    if not isinstance(mod, tvm.IRModule):
        raise ValueError("a module dump whose root is not an IRModule")
    return mod
