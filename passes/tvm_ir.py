"""The one module that reads TVM IR objects.

TVM's Python API changes between releases (0.27 replaced `struct_info` by `ty`, moved relax
`Var`/`Call`/`Constant` into `tvm.ir`, and `estimate_tir_flops` into `tvm.s_tir`). Every accessor of
IR objects preflight needs lives here, so that an upgrade is a one-file change; the rest of
preflight works on the plain dataclasses of `passes.graph`.
"""

from __future__ import annotations

from collections.abc import Iterable

import tvm
from tvm import relax
from tvm.ir.prim.expr import FloatImm, IntImm

from ._gc import gc_paused
from .graph import Operand, OpGraph, OpNode, SourceValue, TensorInfo

# The call ops whose first argument names a function and second holds the tensor arguments.
_CALL_WITH_CALLEE = {
    "relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed", "relax.call_tir_with_grad",
    "relax.dist.call_tir_local_view",
}
_PACKED_CALLS = {"relax.call_pure_packed", "relax.call_inplace_packed", "relax.call_builtin_with_ctx"}


class IRError(ValueError):
    """The IRModule cannot be analysed as it is (dynamic shapes, control flow, ...)."""


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
    except Exception as exc:  # noqa: BLE001 - KeyError, ValueError or TVM's own error, by release
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

    def add_source(self, name: str, tensor: TensorInfo, kind: str, scalar_const: bool = False) -> int:
        vid = self.new_value()
        self.sources.append(SourceValue(vid, name, tensor, kind, scalar_const))
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
                self.constants[key] = self.add_source(f"const{len(self.constants)}", info, "weight",
                                                      scalar_const=not info.shape)
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
            callee_name = target.name_hint if isinstance(target, tvm.ir.GlobalVar) else _plain(
                getattr(target, "global_symbol", target))
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

        index = len(self.ops)
        weight_only = bool(operands) and all(o.kind == "weight" for o in operands)
        node = OpNode(index=index, name=var.name, op=name, attrs=attrs_to_dict(call.attrs), operands=operands,
                      outputs=outputs, callee=callee_name, tir_flops=tir, weight_only=weight_only)
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
def extract(mod: tvm.IRModule, func_name: str = "main", *, n_inputs: int | None = None,
            tir_flops: bool = True) -> OpGraph:
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


def registered_relax_ops() -> list[str]:
    """Names of every `relax.*` operator registered in this TVM build."""
    return sorted(str(n) for n in tvm.ir.Op.list_op_names() if str(n).startswith("relax."))


# --------------------------------------------------------------------------------------------
# Attributes, passes and instruments (used by passes.annotate)
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
