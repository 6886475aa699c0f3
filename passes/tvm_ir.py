"""The one module that reads TVM IR objects.

TVM's Python API changes between releases (0.27 replaced `struct_info` by `ty`, moved relax
`Var`/`Call`/`Constant` into `tvm.ir`, and `estimate_tir_flops` into `tvm.s_tir`). Every accessor of
IR objects preflight needs lives here, so that an upgrade is a one-file change; the rest of
preflight works on the plain dataclasses of `passes.graph`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable

from .tvm_boot import faster_import

with faster_import():  # TVM's import, less its repeated listing of global functions (passes.tvm_boot)
    import tvm
    from tvm import relax
    from tvm.ir.prim import expr as PE
    from tvm.ir.prim.expr import FloatImm, IntImm

from ._gc import cold_start_over, gc_paused
from .costs.registry import GROUPED_MATMUL, HISTOGRAM
from .graph import BLAS_CALL_OPS, Operand, OpGraph, OpNode, SourceValue, TensorInfo
from .symbolic import Expr

cold_start_over()  # TVM, the last large import, is in: the program's collector back on, what is alive frozen (_gc)

# The call ops whose first argument names a function and second holds the tensor arguments.
_CALL_WITH_CALLEE = {
    "relax.call_tir",
    "relax.call_tir_inplace",
    "relax.call_dps_packed",
    "relax.call_tir_with_grad",
    "relax.dist.call_tir_local_view",
}
_TIR_CALL_OPS = _CALL_WITH_CALLEE - {"relax.call_dps_packed"}
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


# payload handle -> (the tensor, the tensor it was folded from), of each constant `_onnx_shape_only_weights` made as
# the fold of another weight (a Transpose of a tied embedding) in the latest ONNX import; both held so that no handle
# is reused while listed, cleared when the next import starts (a module imported before another and extracted after
# it keeps its folds as weights: counted, as before). `extract` marks such a weight `SourceValue.derived` where the
# weight it was folded from is in the graph too (else it is that weight's only form in the graph, and stands for it)
_DERIVED_CONSTANTS: dict[int, tuple[object, object]] = {}


def _constant_key(const) -> int:
    """Identity of a constant's payload: two Constant nodes sharing one tensor are one weight."""
    value = getattr(const, "value", None)
    handle = getattr(value, "__chandle__", None)
    return handle() if handle is not None else _key(const)


def _scalar_value(const, info: TensorInfo) -> float | None:
    """The value of a one-element numeric constant (a literal such as GELU's 1/sqrt(2)), else None."""
    if info.numel != 1 or not info.dtype.startswith(("float", "int", "uint", "bfloat")):
        return None
    return _read_scalar(const)


def _read_scalar(const) -> float | None:
    """The value of a one-element constant, else None (more elements, or a payload numpy cannot read, e.g.
    bfloat16)."""
    try:
        values = const.value.numpy()
    except (AttributeError, TypeError, ValueError):
        return None
    return float(values.reshape(-1)[0]) if values.size == 1 else None


def _is_call(expr) -> bool:
    return isinstance(expr, tvm.ir.Call)


def _op_name(call) -> str | None:
    op = call.op
    return op.name if isinstance(op, tvm.ir.Op) else None


_DIM_OPS = {
    PE.Add: "add",
    PE.Sub: "sub",
    PE.Mul: "mul",
    PE.FloorDiv: "floordiv",
    PE.FloorMod: "floormod",
    PE.Max: "max",
    PE.Min: "min",
}
MAX_DIM_EXPR_NODES = 256


def dim_expr(d, _budget: list[int] | None = None) -> Expr | int | None:
    """A shape dimension (a TIR integer expression) as a `passes.symbolic.Expr` (an int when constant), built
    node by node from TVM's expression objects (integer variables, + - * floordiv floormod max min, and a truncating
    division where it is exact: `_multiple_of`); None for anything else (another division, a cast, a select) or
    more than MAX_DIM_EXPR_NODES nodes."""
    budget = [MAX_DIM_EXPR_NODES] if _budget is None else _budget
    budget[0] -= 1
    if budget[0] < 0:
        return None
    if isinstance(d, IntImm):
        return int(d.value)
    if isinstance(d, PE.Var):
        return Expr("sym", str(d.name)) if str(getattr(d, "ty", "")).startswith("int") else None
    op = _DIM_OPS.get(type(d))
    if op is None and isinstance(d, PE.Div):
        # a truncating division: the floor division it equals where it is exact (a multiple of a positive constant
        # divided by it, whatever its sign; the ONNX importer's `batch * 64 / 64`); else none
        a, b = dim_expr(d.a, budget), dim_expr(d.b, budget)
        return Expr("floordiv", a, b) if isinstance(b, int) and b > 0 and _multiple_of(a, b) else None
    if op is None:
        return None
    a, b = dim_expr(d.a, budget), dim_expr(d.b, budget)
    return None if a is None or b is None else Expr(op, a, b)


def _multiple_of(e, k: int) -> bool:
    """Whether the dimension expression `e` (`dim_expr`'s) is a multiple of `k` at every point: an int that is, a
    product with a factor that is, a sum or difference of two that are."""
    if isinstance(e, int):
        return e % k == 0
    if not isinstance(e, Expr):
        return False
    if e.op == "mul":
        return any(_multiple_of(x, k) for x in e.args)
    return e.op in ("add", "sub") and all(_multiple_of(x, k) for x in e.args)


def _tensor_infos(ty, where: str, symbolic: bool = False) -> tuple[TensorInfo, ...] | None:
    """The tensors a value of type `ty` holds (a tuple flattens), or None if it holds none.

    `symbolic`: a dimension that is an integer expression of shape variables becomes a `passes.symbolic.Expr`
    (`dim_expr`) instead of raising DynamicShapeError."""
    if isinstance(ty, relax.TensorType):
        shape = ty.shape
        if shape is None:
            raise IRError(f"tensor '{where}' has unknown rank")
        if not isinstance(shape, relax.ShapeExpr):  # a shape variable: known only when the graph runs
            raise DataDependentShapeError(where)
        dims = []
        for i, d in enumerate(shape.values):
            if isinstance(d, IntImm):
                dims.append(int(d.value))
            elif symbolic and (e := dim_expr(d)) is not None:
                dims.append(e)
            else:
                raise DynamicShapeError(where, i, str(d))
        return (TensorInfo(tuple(dims), str(ty.dtype)),)
    if isinstance(ty, tvm.ir.TupleType):
        out: list[TensorInfo] = []
        for i, f in enumerate(ty.fields):
            sub = _tensor_infos(f, f"{where}[{i}]", symbolic)
            if sub:
                out.extend(sub)
        return tuple(out)
    return None


def _plain(value, symbolic: bool = False):
    """Convert an attribute value to plain Python (ints, floats, strs, lists, dicts); `symbolic`: an integer
    expression of shape variables becomes a `passes.symbolic.Expr` (`dim_expr`), not its text."""
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
        return {str(k): _plain(v, symbolic) for k, v in value.items()}
    if isinstance(value, Iterable) and not isinstance(value, tvm.ir.Expr):
        return [_plain(v, symbolic) for v in value]
    if symbolic and (e := dim_expr(value)) is not None:
        return e
    return str(value)


# ops whose slice bounds are call arguments (`attrs_to_dict` does not see them): the first such argument and the
# attribute names given to them ("steps", not "strides": `passes.features` reads a convolution's "strides")
_SLICE_ARGS = {
    "relax.strided_slice": (1, ("axes", "begin", "end", "steps")),
    "relax.slice_scatter": (2, ("start", "end", "step")),
}


def _static_ints(arg) -> list[int] | int | None:
    """A constant integer argument (an IntImm: TVM 0.27's prim values too) as an int, a tuple of them as a list;
    None if any is not."""
    if isinstance(arg, IntImm):
        return int(arg.value)
    fields = getattr(arg, "fields", None)
    if fields is not None:
        out = [_static_ints(f) for f in fields]
        return out if all(isinstance(v, int) for v in out) else None
    return None


def attrs_to_dict(attrs, symbolic: bool = False) -> dict:
    """A Relax op's attributes as a plain dict (empty when the op has none); `symbolic` as for `_plain`."""
    if attrs is None:
        return {}
    if isinstance(attrs, tvm.ir.DictAttrs):
        return {str(k): _plain(v, symbolic) for k, v in attrs.items()}
    out = {}
    info = type(attrs).__tvm_ffi_type_info__
    while info is not None:
        for f in info.fields:
            out.setdefault(f.name, _plain(getattr(attrs, f.name), symbolic))
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
    with native_stderr_captured():
        func = main_function(mod, func_name)
        bound = func.bind_symbolic_vars(values)
        return relax.transform.Normalize()(_replace(mod, func_name, bound))


# --------------------------------------------------------------------------------------------
# TVM's C++ log lines (its LOG(WARNING) writes to the process's stderr, file descriptor 2)
# --------------------------------------------------------------------------------------------
# A Relax BlockBuilder destroyed in the middle of a function (an importer or a pass that raised) logs
# "BlockBuilder destroyed with remaining blocks!" from its C++ destructor, straight to fd 2, past Python's
# sys.stderr. Every call into TVM's importers and passes that can fail goes through `native_stderr_captured`:
# fd 2 points at a temporary file meanwhile, the failed call's objects are destroyed before it is restored, and
# what TVM wrote is kept in NATIVE_LOG (and logged at debug level), never printed.

NATIVE_LOG: list[str] = []  # TVM's C++ log lines captured so far (the last MAX_NATIVE_LOG)
MAX_NATIVE_LOG = 200
_capturing = 0


@contextlib.contextmanager
def native_stderr_captured():
    """Point fd 2 at a temporary file while the body calls into TVM; keep what TVM writes in NATIVE_LOG.

    On an exception the finished frames of its traceback are cleared and the garbage collector run while fd 2 is
    still captured: the importer's BlockBuilder (referenced from those frames) is destroyed here, so its C++
    destructor's warning is captured too. Re-entrant; where fd 2 cannot be duplicated the body runs as is.
    """
    global _capturing
    if _capturing:
        yield
        return
    import gc
    import logging
    import os
    import sys
    import tempfile
    import traceback

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        _capturing += 1
        try:
            yield
        except BaseException as exc:
            chain, seen = [exc], set()
            while chain:  # the exception and the ones it was raised from (a converter's error, wrapped)
                e = chain.pop()
                if e is not None and id(e) not in seen:
                    seen.add(id(e))
                    traceback.clear_frames(e.__traceback__)
                    chain += [e.__cause__, e.__context__]
            gc.collect()
            raise
        finally:
            _capturing -= 1
            with contextlib.suppress(OSError, ValueError, AttributeError):
                sys.stderr.flush()  # Python's own text written meanwhile lands in the sink, not later on the terminal
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines = [ln for ln in sink.read().decode("utf-8", "replace").splitlines() if ln.strip()]
            if lines:
                NATIVE_LOG.extend(lines)
                del NATIVE_LOG[:-MAX_NATIVE_LOG]
                logging.getLogger("preflight.tvm").debug("TVM native log: %s", " | ".join(lines))


def from_exported_program(ep, custom_convert_map: dict):
    """TVM's `from_exported_program` (parameters kept as function inputs, no decomposition of its own) with
    `custom_convert_map`, its C++ log captured (`native_stderr_captured`)."""
    from tvm.relax.frontend.torch import from_exported_program as tvm_from_exported_program

    with native_stderr_captured():
        return tvm_from_exported_program(
            ep, keep_params_as_input=True, custom_convert_map=custom_convert_map, run_ep_decomposition=False
        )


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


def prim_func_macs(mod: tvm.IRModule, gvar) -> int | None:
    """The multiply-adds of a PrimFunc: for every block that reduces (a reduction iteration variable) by storing
    `acc + a * b` into the buffer it reads `acc` from (casts around the product allowed), the iterations of the
    loops around it, summed; None when a loop's extent is not a constant.

    `prim_func_flops` counts every add and multiply of the function, so a fused PrimFunc (`fused_matmul_add`:
    a matmul and its bias add) has 2 x MACs + the adds of the epilogue, and `flops // 2` would count the bias adds
    as half multiply-adds; this counts the products alone (a TOPI matmul or convolution: flops / 2 exactly).
    """
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import For, IfThenElse, SeqStmt

    def strip(e):
        while isinstance(e, PE.Cast):
            e = e.value
        return e

    def multiply_add(block) -> bool:
        store = block.body
        if not any(int(iv.iter_type) == 2 for iv in block.iter_vars) or not hasattr(store, "buffer"):
            return False  # 2: tvm's IterVar.CommReduce
        value = strip(getattr(store, "value", None))
        if not isinstance(value, PE.Add):
            return False
        for acc, product in ((value.a, value.b), (value.b, value.a)):
            loaded = getattr(strip(acc), "source", None)  # a TensorLoad's buffer (0.27; `buffer` before)
            if loaded is not None and loaded.same_as(store.buffer):
                return isinstance(strip(product), PE.Mul)
        return False

    def walk(stmt, trips: int) -> int | None:
        if isinstance(stmt, For):
            extent = stmt.extent
            if not isinstance(extent, IntImm):
                return None
            return walk(stmt.body, trips * int(extent.value))
        if isinstance(stmt, SeqStmt):
            total = 0
            for s in stmt.seq:
                n = walk(s, trips)
                if n is None:
                    return None
                total += n
            return total
        if isinstance(stmt, SBlockRealize):
            block = stmt.block
            return trips if multiply_add(block) else walk(block.body, trips)
        if isinstance(stmt, IfThenElse):
            parts = [walk(s, trips) for s in (stmt.then_case, stmt.else_case) if s is not None]
            return None if None in parts else max(parts, default=0)
        body = getattr(stmt, "body", None)
        return walk(body, trips) if body is not None else 0

    try:
        return walk(mod[gvar].body, 1)
    except Exception:  # noqa: BLE001 - a PrimFunc of another shape: no count
        return None


def estimate_module_tir_flops(mod: tvm.IRModule) -> int:
    """Sum of TVM's FLOP estimates over every PrimFunc call in `main`, weighted by call count."""
    graph = extract(mod)
    return sum(op.tir_flops or 0 for op in graph.ops if op.op in _CALL_WITH_CALLEE)


def legalize(mod: tvm.IRModule) -> tvm.IRModule:
    """Lower every Relax op to a `call_tir` of a PrimFunc with TVM's LegalizeOps."""
    with native_stderr_captured():
        return relax.transform.LegalizeOps()(mod)


# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------


class _Extractor:
    def __init__(self, mod: tvm.IRModule, tir_flops: bool, symbolic: bool = False):
        self.mod = mod
        self.symbolic = symbolic
        self.tir_flops = tir_flops
        self.ops: list[OpNode] = []
        self.sources: list[SourceValue] = []
        self.producer: dict[int, int] = {}
        self.weight_values: set[int] = set()
        self.next_value = 0
        # relax var handle -> list of (value id, field, TensorInfo) it refers to
        self.env: dict[int, list[tuple[int, int | None, TensorInfo]]] = {}
        self._prim_flops: dict[str, tuple[int | None, int | None]] = {}
        self.constants: dict[int, int] = {}  # constant payload -> value id

    def new_value(self) -> int:
        self.next_value += 1
        return self.next_value - 1

    def add_source(
        self,
        name: str,
        tensor: TensorInfo,
        kind: str,
        scalar_const: bool = False,
        scalar: float | None = None,
        derived: bool = False,
    ) -> int:
        vid = self.new_value()
        self.sources.append(SourceValue(vid, name, tensor, kind, scalar_const, scalar, derived))
        if kind == "weight":
            self.weight_values.add(vid)
        return vid

    # -- operand resolution -----------------------------------------------------------------
    def refs(self, expr, where: str) -> list[tuple[int, int | None, TensorInfo]]:
        if isinstance(expr, tvm.ir.Var):
            return self.env.get(_key(expr), [])
        if isinstance(expr, tvm.ir.Constant):
            infos = _tensor_infos(expr.ty, where, self.symbolic) if hasattr(expr, "ty") else None
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
                infos = _tensor_infos(p.ty, p.name, self.symbolic)
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
            raise IRError(
                "control flow (relax.If: a data-dependent branch, or a loop such as a Keras LSTM, GRU or RNN layer "
                "that is not unrolled) is not supported: export the model without it (Keras: unroll=True on the "
                "recurrent layers, with a fixed sequence length)"
            )
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
        outputs = _tensor_infos(var.ty, var.name, self.symbolic) or ()

        tir = tir_macs = None
        if name in _CALL_WITH_CALLEE and isinstance(call.args[0], tvm.ir.GlobalVar) and self.tir_flops:
            tir, tir_macs = self._tir(call.args[0])
        elif name == "relax.call_tir" and isinstance(call.op, tvm.ir.GlobalVar) and self.tir_flops:
            tir, tir_macs = self._tir(call.op)

        if self.symbolic and name in _TIR_CALL_OPS:
            raise IRError(f"{name} ({callee_name}) in a symbolic graph: its PrimFunc's cost needs fixed sizes")
        attrs = attrs_to_dict(call.attrs, symbolic=self.symbolic)
        if name == "relax.shape_to_tensor" and call.args:
            dims = getattr(getattr(call.args[0], "ty", None), "values", None)
            if dims is not None and all(isinstance(d, IntImm) for d in dims):
                attrs["shape"] = [int(d.value) for d in dims]  # the static shape it turns into a tensor
            elif dims is not None and self.symbolic and all(dim_expr(d) is not None for d in dims):
                attrs["shape"] = [dim_expr(d) for d in dims]
        elif name in _SLICE_ARGS and len(call.args) == _SLICE_ARGS[name][0] + len(_SLICE_ARGS[name][1]):
            # the slice's bounds are arguments, not attributes: the kernel view matches a scatter back into the
            # region a view took (`passes.kernels`: a functionalised in-place update); absent where not constant
            first, keys = _SLICE_ARGS[name]
            for key, arg in zip(keys, call.args[first:], strict=True):
                ints = _static_ints(arg)
                if ints is not None:
                    attrs[key] = ints
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
            tir_macs=tir_macs,
            weight_only=weight_only,
        )
        node.folded = weight_only and eager_folds(node)
        self.ops.append(node)
        refs = []
        for j, info in enumerate(outputs):
            vid = self.new_value()
            self.producer[vid] = index
            if weight_only:
                self.weight_values.add(vid)
            refs.append((vid, j if len(outputs) > 1 else None, info))
        self.env[_key(var)] = refs

    def _tir(self, gvar) -> tuple[int | None, int | None]:
        """(FLOPs, multiply-adds) of the PrimFunc `gvar` names (`prim_func_flops`, `prim_func_macs`)."""
        key = gvar.name_hint
        if key not in self._prim_flops:
            self._prim_flops[key] = (prim_func_flops(self.mod, gvar), prim_func_macs(self.mod, gvar))
        return self._prim_flops[key]


# Weight-only ops that stay folded although they count FLOPs: a weight's change of representation, which a model
# loaded in its dtype does not run per call (eager PyTorch quantized kernels take int8 weights as they are).
_REPRESENTATION_OPS = frozenset({"relax.astype", "relax.quantize", "relax.dequantize"})


def _at_some_point(op: OpNode) -> OpNode:
    """`op` with every symbolic dimension and attribute evaluated with each symbol at 2 (a symbolic export): whether
    an op computes anything does not depend on the sizes, and `cost_of` needs them concrete."""
    from .symbolic import evaluate, has_symbols

    tensors = [*(o.tensor for o in op.operands), *op.outputs]
    if not (has_symbols(op.attrs) or any(has_symbols(t.shape) for t in tensors)):
        return op
    names = set()
    for value in (op.attrs, *(t.shape for t in tensors)):
        stack = [value]
        while stack:
            v = stack.pop()
            if isinstance(v, Expr):
                names |= v.symbols()
            elif isinstance(v, list | tuple):
                stack.extend(v)
            elif isinstance(v, dict):
                stack.extend(v.values())
    env = dict.fromkeys(names, 2)

    def t(info: TensorInfo) -> TensorInfo:
        return TensorInfo(tuple(evaluate(d, env) for d in info.shape), info.dtype)

    return dataclasses.replace(
        op,
        attrs=evaluate(op.attrs, env),
        operands=[dataclasses.replace(o, tensor=t(o.tensor)) for o in op.operands],
        outputs=tuple(t(x) for x in op.outputs),
    )


def eager_folds(op: OpNode) -> bool:
    """Whether a weight-only op (`op.weight_only`) is also free in eager PyTorch: it computes nothing (a layout op or
    view: a linear layer's transposed weight, an expanded class token; a gather of a table by a constant index) or
    only changes a weight's representation (`_REPRESENTATION_OPS`). An op that computes on weights alone (SwinV2's
    position-bias MLP over a constant table, DeBERTa's relative-position projections, a resize of BEiT's bias table)
    runs on every eager call: counted, and marked weight-only for a compiler that folds it."""
    from .costs import cost_of

    return op.op in _REPRESENTATION_OPS or cost_of(_at_some_point(op)).flops == 0


@gc_paused
def extract(
    mod: tvm.IRModule,
    func_name: str = "main",
    *,
    n_inputs: int | None = None,
    tir_flops: bool = True,
    symbolic: bool = False,
) -> OpGraph:
    """Flatten a Relax function into an `OpGraph` of plain data.

    Args:
        mod: the IRModule; nested Relax functions it calls (e.g. after FuseOps) are inlined.
        func_name: the entry function.
        n_inputs: how many leading parameters are model inputs (the rest are weights). Defaults to
            the function's `num_input` attribute, or every parameter when it has none.
        tir_flops: estimate FLOPs of `call_tir` PrimFuncs with TVM's TIR estimator.
        symbolic: keep dimensions that are integer expressions of shape variables as `passes.symbolic.Expr`s
            (the graph of a `passes.symbolic.SymbolicGraph`; no pass runs on it before `SymbolicGraph.at`);
            refuses `call_tir` (a PrimFunc's estimate needs fixed sizes).

    Raises:
        DynamicShapeError: a tensor has a dimension that is not a known integer.
        IRError: the function cannot be flattened (e.g. it has control flow).
    """
    func = main_function(mod, func_name)
    if n_inputs is None:
        n_inputs = num_inputs(func)
    ex = _Extractor(mod, tir_flops, symbolic)
    result = ex.function(func, None, n_inputs)
    outputs = [(ex.producer.get(vid), vid) for vid, _, _ in result]
    folds = _DERIVED_CONSTANTS.items()
    derived = {ex.constants[k] for k, (_, src) in folds if k in ex.constants and src.__chandle__() in ex.constants}
    sources = [dataclasses.replace(s, derived=True) if s.value in derived else s for s in ex.sources]
    return OpGraph(ops=ex.ops, sources=sources, outputs=outputs, value_producer=ex.producer)


_EP_CONVERT_OPS: frozenset[str] | None = None


_NO_MODULE_PATH = "_empty_nn_module_stack"
TOP_LEVEL_SOURCE = "(top level)"  # the source of an op in the model's own forward (`analyzer.frontends.specs`)


#: ATen ops eager PyTorch on CUDA runs as one library call (`_cudnn_rnn`: cuDNN launches every layer's, direction's and
#: step's kernels itself) although torch's decomposition, which the importer converts, spells them out op by op.
LIBRARY_CALL_OPS = frozenset({"aten.lstm.input", "aten.gru.input", "aten.rnn_tanh.input", "aten.rnn_relu.input"})


def provenance(node) -> Iterable:
    """The nodes an fx node was made from, nearest first: torch.fx's provenance (`node.meta["from_node"]`, the chain
    of nodes each pass made it from), walked depth first."""
    stack = list((node.meta.get("from_node") if hasattr(node, "meta") else None) or ())
    seen = 0
    while stack and seen < 10_000:  # a provenance chain is short; the bound only guards a malformed one
        seen += 1
        src = stack.pop()
        yield src
        stack.extend(getattr(src, "from_node", None) or ())


def library_call_of(node) -> str | None:
    """The library call an fx node was decomposed from: "<aten op>:<its node name>" (e.g. "aten.lstm.input:lstm")
    when its `provenance` reaches an op of `LIBRARY_CALL_OPS`; for a node of a `graph.BLAS_CALL_OPS` op (baddbmm),
    the node's own call ("aten.baddbmm.default:baddbmm"); None otherwise."""
    target = str(getattr(node, "target", ""))
    if target in BLAS_CALL_OPS:
        return f"{target}:{getattr(node, 'name', '')}"
    for src in provenance(node):
        target = str(getattr(src, "target", ""))
        if target in LIBRARY_CALL_OPS:
            return f"{target}:{getattr(src, 'name', '')}"
    return None


_COPY_TARGETS = {"aten.clone.default": "clone", "aten.contiguous.default": "contiguous"}
# a `.pt2` archive's clone nodes, by name -> the ops they were made from (`pt2_safety.Pt2Plan.copy_origins`: the
# archive's node metadata is dropped, this much read from it), set in the child that imports the archive
COPY_ORIGINS: dict[str, tuple[str, ...]] = {}


def eager_copy_of(node) -> str | None:
    """The copy eager PyTorch makes where TVM's importer passes the value through (its `contiguous.default` and
    `clone.default` converters return their input): "clone" for a model's `.clone()` (a copy kernel whatever the
    layout, keeping a dense one; "clone_contiguous" with `memory_format=torch.contiguous_format`), "contiguous" for
    its `.contiguous()` into the contiguous format (a copy where the input is not
    contiguous; the kernel view decides it from its own strides); None for every other node. torch's
    decompositions write both as `aten.clone`, and write a `clone` for ops eager runs without a kernel too
    (`aten.dropout` in eval): the node's provenance (`node.meta["from_node"]`) says which it was."""
    target = str(getattr(node, "target", ""))
    if target not in _COPY_TARGETS:
        return None
    # (an archive's clone nodes carry no provenance: what the archive recorded of it, `COPY_ORIGINS`)
    origins = [target, *COPY_ORIGINS.get(str(getattr(node, "name", "")), ())]
    for src in provenance(node):
        origins += [str(getattr(src, "target", "")), *COPY_ORIGINS.get(str(getattr(src, "name", "")), ())]
    if any(o not in _COPY_TARGETS for o in origins):
        return None  # decomposed from another op (dropout in eval: eager returns its input)
    fmt = node.kwargs.get("memory_format", node.args[1] if len(node.args) > 1 else None)
    contiguous = str(fmt) == "torch.contiguous_format"
    if "aten.contiguous.default" in origins:
        return "contiguous" if fmt is None or contiguous else None
    return "clone_contiguous" if contiguous else "clone"


#: torch.export's spellings of a tensor's dtype cast (`x.to(dtype)`, `x.to(device, dtype)`, `x.type_as(y)`,
#: `x.float()`), one op for `node_dtype`: torch's decomposition writes each as a `_to_copy`
CAST_TARGETS = frozenset({"aten.to.dtype", "aten.to.dtype_layout", "aten.to.device", "aten.to.other",
                          "aten.type_as.default", "aten._to_copy.default"})  # fmt: skip


def node_dtype(node, node_dtypes: dict[str, str]) -> str | None:
    """The dtype `node_dtypes` (fx node name -> dtype) gives an fx node: where torch's re-trace made it (its
    `provenance`, which renames the nodes it keeps: a decomposition that adds a `cat` shifts the names of the later
    ones), the nearest node of its provenance with its target (the casts of `CAST_TARGETS` as one); else its own
    name's; None where neither."""
    target = str(getattr(node, "target", ""))
    same = CAST_TARGETS if target in CAST_TARGETS else frozenset({target})
    traced = False
    for src in provenance(node):
        traced = True
        if str(getattr(src, "target", "")) in same and str(getattr(src, "name", "")) in node_dtypes:
            return node_dtypes[str(src.name)]
    return None if traced else node_dtypes.get(str(getattr(node, "name", "")))


@contextlib.contextmanager
def recording_fx_sources(
    weight_names: dict[str, str] | None = None,
    calls: dict[str, str] | None = None,
    copies: dict[str, str] | None = None,
    node_dtypes: dict[str, str] | None = None,
    dtypes: dict[str, str] | None = None,
):
    """While active, TVM's ExportedProgram importer records where each Relax value comes from: a dict (yielded)
    from the name of every variable a converter returns to the fx node's module path (`layer4.2.conv3`), found in
    order: torch.export's `nn_module_stack`; else the module of a weight the node reads (`weight_names`: fx
    placeholder name -> parameter name, `layer4.2.conv3.weight`); else the source of the node's first input that
    has one (a ReLU after a batch norm belongs to the norm's module). Values a converter emits on the way to its
    result are not recorded: they take the source of the next recorded value (`source_names`). `calls`, when
    given, is filled likewise with every returned variable's library call (`library_call_of`; "" for none);
    `copies`, when given, with the variables eager copies where the importer passes them through (`eager_copy_of`:
    a model's `.contiguous()` or `.clone()` of them). `dtypes`, when given, with the float dtype `node_dtypes` (fx
    node name -> dtype) gives the node each returned variable comes from (`node_dtype`)."""
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    record: dict[str, str] = {}
    weights = {k: v.rsplit(".", 1)[0] if "." in v else v for k, v in (weight_names or {}).items()}
    known: dict[str, str | None] = {}
    nested: dict[int, bool] = {}  # per fx graph: whether any node's module stack goes below the root

    def below_root(graph) -> bool:
        if id(graph) not in nested:
            nested[id(graph)] = any(len(n.meta.get("nn_module_stack") or {}) > 1 for n in graph.nodes)
        return nested[id(graph)]

    def source_of(node) -> str | None:
        name = str(getattr(node, "name", ""))
        if name in known:
            return known[name]
        known[name] = None  # cycles cannot happen in an fx graph; this only guards re-entry
        found = None
        stack = node.meta.get("nn_module_stack") if hasattr(node, "meta") else None
        if stack:
            path = list(stack.values())[-1][0]
            # torch.export's placeholder path for nodes its symbolic-shape machinery adds (a symbolic export)
            found = path if isinstance(path, str) and path and not path.startswith(_NO_MODULE_PATH) else None
            if path == "" and getattr(node, "graph", None) is not None and below_root(node.graph):
                # the root module's own forward (a saved program's top-level ops), where other nodes name their
                # modules; a graph whose stacks all stop at the root (a wrapped meta module) says nothing
                found = TOP_LEVEL_SOURCE
        inputs = list(getattr(node, "all_input_nodes", ()))
        if found is None:
            found = next((weights[n.name] for n in inputs if n.name in weights), None)
        if found is None:
            found = next((src for n in inputs if n.op != "placeholder" and (src := source_of(n))), None)
        known[name] = found
        return found

    def names_in(out, bb=None) -> list[str]:
        if isinstance(out, relax.Var):
            # a converter's result that picks a field of the op's tuple (batch norm's `emit(bn[0])`): the op's own
            # value belongs to the node too, else it would take the next recorded value's source
            bound = bb.lookup_binding(out) if bb is not None else None
            return [out.name, *(names_in(bound.tuple_value) if isinstance(bound, relax.TupleGetItem) else [])]
        if isinstance(out, relax.TupleGetItem):
            return names_in(out.tuple_value)
        if isinstance(out, tuple | list):
            return [n for o in out for n in names_in(o)]
        return []

    def wrap(fn, importer):
        def converter(node, *args, **kwargs):
            out = fn(node, *args, **kwargs)
            try:
                names = names_in(out, getattr(importer, "block_builder", None))
                kind = eager_copy_of(node) if copies is not None and isinstance(out, relax.Var) else None
                if kind is not None:
                    copies[out.name] = kind
                if node_dtypes and dtypes is not None and isinstance(out, relax.Var):
                    dtype = node_dtype(node, node_dtypes)
                    if dtype is not None:
                        dtypes[out.name] = dtype
                if calls is not None:
                    call = library_call_of(node) or ""
                    for name in names:
                        calls.setdefault(name, call)
                source = source_of(node)
                for name in names if source else ():
                    record.setdefault(name, source)
            except Exception:  # noqa: BLE001 - a name is only a label: the import goes on without it
                pass
            return out

        return converter

    create, update = ExportedProgramImporter.create_convert_map, ExportedProgramImporter.update_convert_map

    def create_convert_map(self):
        return {k: wrap(v, self) for k, v in create(self).items()}

    def update_convert_map(self, custom):
        return update(self, {k: wrap(v, self) for k, v in custom.items()})

    ExportedProgramImporter.create_convert_map = create_convert_map
    ExportedProgramImporter.update_convert_map = update_convert_map
    _RECORDING.append((record, known, calls, copies, dtypes))
    try:
        yield record
    finally:
        _RECORDING.pop()
        ExportedProgramImporter.create_convert_map, ExportedProgramImporter.update_convert_map = create, update


_RECORDING: list[tuple] = []  # the dicts `recording_fx_sources` fills, innermost last


def restart_recording() -> None:
    """Forget what the active `recording_fx_sources` recorded: an import that failed and is tried again (on the
    decomposed program) names its variables anew, so an earlier attempt's names would land on other values."""
    if _RECORDING:
        for d in _RECORDING[-1]:
            if d is not None:
                d.clear()


def source_names(op_names: list[str], sources: dict[str, str]) -> list[str | None]:
    """The source of each op (in graph order) from `recording_fx_sources`' record: its own, else that of the next
    op that has one (an intermediate value belongs to the node whose result comes after it); None after the last."""
    out: list[str | None] = [None] * len(op_names)
    nxt = None
    for i in range(len(op_names) - 1, -1, -1):
        nxt = sources.get(op_names[i], nxt)
        out[i] = nxt
    return out


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


def defines_shape_vars(mod: tvm.IRModule, n_inputs: int | None = None) -> bool:
    """Whether `main` of `mod` defines shape variables (a dimension known only when the graph runs: TVM's ONNX
    importer names a `Range` of run-time bounds `range_len_0`) other than those of its first `n_inputs` inputs'
    shapes (None: all inputs; static inputs define none)."""
    func = main_function(mod)
    inputs = {
        str(d)
        for p in func.params[: n_inputs if n_inputs is not None else len(func.params)]
        if isinstance(p.ty, relax.TensorType) and p.ty.shape is not None
        for d in p.ty.shape.values
        if isinstance(d, PE.Var)
    }
    return any(str(v) not in inputs for v in relax.analysis.defined_symbolic_vars(func))


def has_unknown_rank(mod: tvm.IRModule) -> bool:
    """Whether a value bound in `main` of `mod` is a tensor of unknown rank (TVM's ONNX importer leaves one where a
    `Slice` bound or a `Reshape` target is computed from `Shape` at run time), though its inputs have static
    shapes."""
    func = main_function(mod)
    blocks = func.body.blocks if isinstance(func.body, relax.SeqExpr) else ()
    return any(
        isinstance(b.var.ty, relax.TensorType) and b.var.ty.shape is None for block in blocks for b in block.bindings
    )


def onnx_import(
    model, shape_dict: dict[str, list[int]], dtype_dict: dict[str, str], sources: dict[str, int] | None = None
) -> tvm.IRModule:
    """TVM's ONNX importer on `model` with ONNX_EXTRA_CONVERTERS added to its converter map. A dimension of
    `shape_dict` given as a name (a str) is a shape variable of that name, shared by every dimension so named.

    `sources`, when given, is filled with the ONNX node each Relax value comes from: variable name -> index of
    the node in `model.graph.node` (`_recording_onnx_nodes`).

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
        with contextlib.redirect_stdout(io.StringIO()), _onnx_shape_only_weights(), native_stderr_captured():
            return _onnx_from_model(model, shape_dict, dtype_dict, sources)
    finally:
        onnx_frontend._get_convert_map = base


def tflite_import(
    model, shape_dict: dict[str, list[int]], dtype_dict: dict[str, str], sources: dict[str, str] | None = None
) -> tvm.IRModule:
    """TVM's TFLite importer (`from_tflite`) on a parsed `tflite.Model`.

    `sources`, when given, is filled with the TFLite operator each Relax value comes from: variable name -> the
    name of the operator's first output tensor (TensorFlow's converter writes the Keras layer's name scope there:
    `cnn_1/conv2d_1/convolution`). The converter of every operator of the main subgraph is wrapped (as
    `_recording_onnx_nodes` does for ONNX) to collect what it returns.
    """
    from tvm.relax.frontend.tflite import tflite_frontend

    returned: list[tuple[object, str]] = []
    first = {"free": True}

    class Recording(tflite_frontend.OperatorConverter):
        _SUPPORTED_QUANTIZED_OPS = tflite_frontend.OperatorConverter._SUPPORTED_QUANTIZED_OPS | TFLITE_QDQ_OPS.keys()

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for name, lowered in TFLITE_QDQ_OPS.items():
                if name in self.convert_map and lowered:
                    self.convert_map[name] = self._qdq(self.convert_map[name], lowered)
            if sources is not None and first["free"]:  # the main subgraph's converter; control flow has its own
                first["free"] = False
                self.convert_map = {k: self._recording(v) for k, v in self.convert_map.items()}

        def _qdq(self, fn, how: str):
            """A quantized op TVM's importer has no int8 form of, as dequantize -> the float op -> quantize (the
            pattern `fuse_int8` turns into an int8 matmul where it is one)."""

            def convert(op):
                if not self.is_quantized(op):
                    return fn(op)
                inputs = {t.tensor_idx: t for t in self.get_input_tensors(op) if t.qnn_params is not None}
                outputs = self.get_output_tensors(op)
                own_get = self.get_expr

                def get_expr(idx):
                    expr = own_get(idx)
                    return self.bb.normalize(self.dequantize(expr, inputs[idx])) if idx in inputs else expr

                self.get_expr, self.is_quantized = get_expr, lambda op: False
                try:
                    # TVM's float GELU takes its constants' dtype from the (int8) tensor: relax's own GELU instead
                    out = relax.op.nn.gelu(get_expr(next(iter(inputs)))) if how == "gelu" else fn(op)
                finally:
                    del self.get_expr, self.is_quantized  # back to the class's methods
                if len(outputs) != 1 or outputs[0].qnn_params is None:
                    return out
                return self.quantize(self.bb.normalize(out), outputs[0])

            return convert

        def _recording(self, fn):
            def convert(*args, **kwargs):
                out = fn(*args, **kwargs)
                try:
                    op = kwargs.get("op", args[0] if args else None)
                    if isinstance(out, relax.Expr):
                        out = self.bb.normalize(out)  # what the importer does next: the same object
                    tensors = self.get_output_tensors(op)
                    if tensors:
                        name = tflite_frontend.get_tensor_name(self.subgraph, tensors[0].tensor_idx)
                        returned.append((out, str(name)))
                except Exception:  # noqa: BLE001 - a name is only a label: the import goes on without it
                    pass
                return out

            return convert

    mod = tflite_frontend.from_tflite(model, shape_dict=shape_dict, dtype_dict=dtype_dict, op_converter=Recording)
    if sources is None:
        return mod
    try:
        sources.update({k: str(v) for k, v in _bound_sources(main_function(mod), returned).items()})
    except Exception:  # noqa: BLE001 - a name is only a label: the import stands without it
        pass
    return mod


# Quantized TFLite ops TVM's importer refuses ("Quantized operators require explicit QDQ lowering") that a
# full-integer transformer block holds: name -> whether to lower it as dequantize -> float op -> quantize (an int8
# BATCH_MATMUL becomes an int8 matmul in `fuse_int8`; GELU, which the TFLite interpreter runs from a lookup table, is
# counted as the float GELU between a dequantize and a quantize); TRANSPOSE moves int8 values as they are.
TFLITE_QDQ_OPS = {"BATCH_MATMUL": "float", "GELU": "gelu", "TRANSPOSE": ""}


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


def _symbolic(d) -> bool:
    """A torch size that is a SymInt with no constant value (a dimension of a symbolic export)."""
    node = getattr(d, "node", None)
    return node is not None and getattr(node, "maybe_as_int", lambda: None)() is None


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
        vals = [v for v in vals if v is not None]
        if any(_symbolic(d) for v in vals for d in getattr(v, "shape", ())):
            # the fake tensor's hint (the example size) is no size of the symbolic graph: a static dimension
            # here would clash with the symbolic ones downstream once sizes are bound
            raise IRError(f"cannot represent {callee} with a symbolic output shape")
        out = [relax.TensorType([int(d) for d in v.shape], str(v.dtype).replace("torch.", "")) for v in vals]
        if not out:
            raise IRError(f"cannot represent {callee}: it has no tensor output")
        call = relax.call_dps_packed(callee, relax.Tuple(args), out if len(out) > 1 else out[0])
        return importer.block_builder.emit(call)

    return convert


# Packed callees the PyTorch importer emits for ops Relax has no op for (`passes.costs` has a rule for each):
# GROUPED_MATMUL and HISTOGRAM, imported from the cost registry above.


def _tensor_arg(importer, node, i: int, name: str):
    a = node.args[i] if len(node.args) > i else node.kwargs.get(name)
    x = importer.env.get(a) if a is not None else None
    if not isinstance(getattr(x, "ty", None), relax.TensorType):
        raise IRError(f"{node.target}: argument {name} is not a tensor")
    return x


def grouped_matmul_converter(node, importer):
    """A grouped (per-expert) matrix product: `transformers.grouped_mm_fallback(input, weight, offs)` and
    `aten._grouped_mm(input, weight, offs)`, as a packed call `GROUPED_MATMUL` with the same operands.

    input (S, K): the S = tokens x top_k routed rows, sorted by expert; weight (E, K, N): every expert's matrix;
    offs (E,): where each expert's rows end. Output (S, N), S symbolic when the input's is. Each row is multiplied
    by its own expert's matrix: S x K x N MACs in all whatever the routing (`passes.costs` counts them), which no
    Relax op expresses (a gather of each row's weight would count S x K x N weight bytes that no kernel moves).
    """
    x = _tensor_arg(importer, node, 0, "input" if "fallback" in str(node.target) else "self")
    w = _tensor_arg(importer, node, 1, "weight" if "fallback" in str(node.target) else "mat2")
    offs = _tensor_arg(importer, node, 2, "offs")
    xs, ws = list(x.ty.shape.values), list(w.ty.shape.values)
    if len(xs) != 2 or len(ws) != 3:
        raise IRError(f"{node.target}: grouped matmul of {len(xs)}-D rows by {len(ws)}-D expert weights")
    val = node.meta.get("val")
    dtype = str(getattr(val, "dtype", x.ty.dtype)).replace("torch.", "")
    out = relax.TensorType([xs[0], ws[2]], dtype)
    return importer.block_builder.emit(relax.call_dps_packed(GROUPED_MATMUL, relax.Tuple([x, w, offs]), out))


def histc_converter(node, importer):
    """`aten.histc(input, bins, min, max)` (transformers counts the rows routed to each expert with it): a packed
    call `HISTOGRAM` from the input to a (bins,) tensor of the input's dtype."""
    x = _tensor_arg(importer, node, 0, "self")
    bins = node.args[1] if len(node.args) > 1 else node.kwargs.get("bins", 100)
    out = relax.TensorType([int(bins)], x.ty.dtype)
    call = relax.call_dps_packed(HISTOGRAM, relax.Tuple([x]), out)
    return importer.block_builder.emit(call, name_hint="histc")


# torch's `quantized_decomposed` ops (a PT2E-quantized program: `convert_pt2e` writes them around float ops)
_TORCH_8BIT = {"torch.int8": "int8", "torch.uint8": "uint8"}


def _qparam(importer, node, i: int, name: str, dtype: str):
    """A scale or zero point of a quantized_decomposed op: a Python number (the `.default` overloads) as a Relax
    scalar constant, or a tensor argument (`.tensor`, per-channel) as it is."""
    a = node.args[i] if len(node.args) > i else node.kwargs.get(name)
    if a is None:
        return relax.const(0, dtype)
    if isinstance(a, int | float):
        return relax.const(a, dtype)
    x = importer.env.get(a)
    if not isinstance(getattr(x, "ty", None), relax.TensorType):
        raise IRError(f"{node.target}: argument {name} is neither a number nor a tensor")
    if _numel(x) == 1 and _rank(x) != 0:  # a 1-element scale or zero point: per tensor
        x = importer.block_builder.emit(relax.op.reshape(x, []))
    return x


def _qdtype(node, i: int) -> str:
    a = node.args[i] if len(node.args) > i else node.kwargs.get("dtype")
    dtype = _TORCH_8BIT.get(str(a))
    if dtype is None:
        raise IRError(f"{node.target}: quantized dtype {a} (preflight reads int8 and uint8)")
    return dtype


def quantize_converter(node, importer):
    """`quantized_decomposed.quantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype)` (scale and
    zero point numbers, or 1-element tensors in `.tensor`) and `quantize_per_channel(input, scales, zero_points, axis,
    quant_min, quant_max, dtype)`: `relax.quantize` to int8/uint8, same shape (3 FLOPs an element)."""
    x = _tensor_arg(importer, node, 0, "input")
    per_channel = "per_channel" in str(node.target)
    scale = _qparam(importer, node, 1, "scales" if per_channel else "scale", "float32")
    zp = _qparam(importer, node, 2, "zero_points" if per_channel else "zero_point", "int32")
    axis = int(node.args[3]) % _rank(x) if per_channel else 0
    dtype = _qdtype(node, 6 if per_channel else 5)
    return importer.block_builder.emit(relax.op.quantize(x, scale, _as_int32(zp), axis=axis, out_dtype=dtype))


def dequantize_converter(node, importer):
    """`quantized_decomposed.dequantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype, *,
    out_dtype)` and `dequantize_per_channel(input, scales, zero_points, axis, ...)`: `relax.dequantize` to float32
    (or `out_dtype`), same shape (2 FLOPs an element)."""
    x = _tensor_arg(importer, node, 0, "input")
    per_channel = "per_channel" in str(node.target)
    scale = _qparam(importer, node, 1, "scales" if per_channel else "scale", "float32")
    zp = _qparam(importer, node, 2, "zero_points" if per_channel else "zero_point", "int32")
    axis = int(node.args[3]) % _rank(x) if per_channel else 0
    out = node.kwargs.get("out_dtype")
    out_dtype = str(out).replace("torch.", "") if out is not None else "float32"
    return importer.block_builder.emit(relax.op.dequantize(x, scale, _as_int32(zp), axis=axis, out_dtype=out_dtype))


def input_names(mod: tvm.IRModule, n_inputs: int | None, func_name: str = "main") -> list[str]:
    """The names of the function's first `n_inputs` parameters (all when None), tensors or not."""
    params = main_function(mod, func_name).params
    return [p.name for p in params[: n_inputs if n_inputs is not None else len(params)]]


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

    def empty(t) -> bool:  # a 1-D tensor of static length 0 (symbolic dimensions are never empty here)
        shape = list(t.ty.shape)
        return len(shape) == 1 and isinstance(shape[0], IntImm) and int(shape[0]) == 0

    kept = [t for t in tensors if not empty(t)]
    return importer.block_builder.emit(relax.op.concat(kept or tensors, axis=axis))


# --------------------------------------------------------------------------------------------
# Quantized ONNX (int8): QDQ convolutions and matmuls as integer ops, QOperator converters
# --------------------------------------------------------------------------------------------
# An int8 runtime (onnxruntime, TensorRT) runs `DequantizeLinear -> Conv/MatMul/Gemm` (QDQ format) and the
# QOperator ops (QLinearConv, QLinearMatMul, QGemm, ConvInteger, MatMulInteger) as one integer kernel: 8-bit
# operands, int32 accumulation, then a rescale. The converters below import them that way: `relax.nn.conv*d` /
# `relax.matmul` on the int8 or uint8 operands with `out_dtype="int32"` (+ an int32 bias), then `relax.dequantize`
# by the product of the input scales (and `relax.quantize` where the op's output is quantized). The zero-point
# corrections (terms such as x_zp * sum(w), which int8 kernels precompute or fold into the epilogue) are not
# represented: the graph has the costs of an int8 kernel, not its exact arithmetic. The elementwise QLinear* ops
# of the com.microsoft domain become dequantize -> the float op -> quantize.

_INT8_DTYPES = ("int8", "uint8")


def _dtype_of(expr) -> str:
    ty = getattr(expr, "ty", None)
    return str(ty.dtype) if isinstance(ty, relax.TensorType) else ""


def _rank(expr) -> int:
    return len(expr.ty.shape.values)


def _dequantize_call(bb, expr):
    """The `relax.dequantize` call `expr` is (or a variable is bound to), else None."""
    call = bb.lookup_binding(expr) if isinstance(expr, tvm.ir.Var) else expr
    if call is None or not _is_call(call) or _op_name(call) != "relax.dequantize":
        return None
    return call


def _dequantized(bb, expr):
    """(quantized tensor, scale, zero point, axis) when `expr` is `relax.dequantize` of an 8-bit tensor, else None."""
    call = _dequantize_call(bb, expr)
    if call is None or _dtype_of(call.args[0]) not in _INT8_DTYPES:
        return None
    q, scale, zp = call.args[0], call.args[1], call.args[2]
    axis = int(call.attrs.axis)
    return q, scale, zp, axis + _rank(q) if axis < 0 else axis


def _numel(expr) -> int:
    n = 1
    for d in expr.ty.shape.values:
        n *= int(d.value) if isinstance(d, IntImm) else -1
    return n


def _per_tensor(scale) -> bool:
    return _numel(scale) == 1


def _same_pads(in_shape, kernel, strides, dilations, mode: str) -> list[int]:
    """ONNX auto_pad SAME_UPPER / SAME_LOWER as explicit [begin..., end...] pads (static shapes)."""
    begins, ends = [], []
    for n, k, s, d in zip(in_shape, kernel, strides, dilations, strict=True):
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        small, big = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else big)
        ends.append(big if mode == "SAME_UPPER" else small)
    return begins + ends


def _int_conv(bb, x, w, attr: dict, bias=None):
    """ONNX Conv attributes on integer operands: `relax.nn.conv{1,2,3}d(x, w, out_dtype="int32")` (+ int32 bias)."""
    ndim = _rank(x)
    if ndim not in (3, 4, 5):
        raise ValueError(f"integer convolution of a rank-{ndim} tensor")
    spatial = ndim - 2
    op, data_layout, kernel_layout = {
        3: (relax.op.nn.conv1d, "NCW", "OIW"),
        4: (relax.op.nn.conv2d, "NCHW", "OIHW"),
        5: (relax.op.nn.conv3d, "NCDHW", "OIDHW"),
    }[ndim]
    kernel = list(attr.get("kernel_shape") or [int(d.value) for d in w.ty.shape.values[2:]])
    strides = list(attr.get("strides", [1] * spatial))
    dilations = list(attr.get("dilations", [1] * spatial))
    pads = list(attr.get("pads", [0] * 2 * spatial))
    auto_pad = attr.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        in_shape = [int(d.value) for d in x.ty.shape.values[2:]]
        pads = _same_pads(in_shape, kernel, strides, dilations, auto_pad)
    elif auto_pad == "VALID":
        pads = [0] * 2 * spatial
    out = op(
        x,
        w,
        strides=strides,
        padding=pads,
        dilation=dilations,
        groups=int(attr.get("group", 1)),
        data_layout=data_layout,
        kernel_layout=kernel_layout,
        out_dtype="int32",
    )
    if bias is not None:
        out = relax.op.add(bb.normalize(out), relax.op.reshape(_as_int32(bias), [1, -1] + [1] * spatial))
    return bb.normalize(out)


def _as_int32(expr):
    return expr if _dtype_of(expr) == "int32" else relax.op.astype(expr, "int32")


def _int_matmul(bb, a, b, trans_a: bool = False, trans_b: bool = False, bias=None):
    """`relax.matmul(a, b, out_dtype="int32")` on integer operands (+ an int32 bias)."""
    if trans_a:
        a = relax.op.permute_dims(a, [1, 0])
    if trans_b:
        b = relax.op.permute_dims(b, [1, 0])
    out = relax.op.matmul(a, b, out_dtype="int32")
    if bias is not None:
        out = relax.op.add(bb.normalize(out), _as_int32(bias))
    return bb.normalize(out)


def _rescale(bb, acc, scale_a, scale_b, axis: int, y_scale=None, y_zero_point=None):
    """int32 accumulator -> float (x scale_a x scale_b), then quantized with (y_scale, y_zero_point) if given."""
    scale = relax.op.multiply(scale_a, scale_b) if scale_b is not None else scale_a
    y = relax.op.dequantize(acc, scale, relax.const(0, "int32"), axis=axis, out_dtype="float32")
    if y_scale is None:
        return y
    return _quantize(bb, y, y_scale, y_zero_point, axis)


def _quantize(bb, y, y_scale, y_zero_point, axis: int = -1):
    y = bb.normalize(y)
    zp = y_zero_point if y_zero_point is not None else relax.const(0, "uint8")
    rank = _rank(y)
    return relax.op.quantize(y, y_scale, zp, axis=axis % rank if rank else 0, out_dtype=_dtype_of(zp) or "uint8")


def _dequantize(x, scale, zero_point, axis: int = 1):
    zp = zero_point if zero_point is not None else relax.const(0, _dtype_of(x))
    rank = _rank(x)
    axis = (axis % rank) if rank else 0
    return relax.op.dequantize(x, scale, zp, axis=axis, out_dtype="float32")


def _input(inputs, i):
    return inputs[i] if len(inputs) > i else None


def _need(op: str, inputs, names: str) -> None:
    """Refuse a quantized op without its required inputs (onnx's checker does not check com.microsoft ops).

    `names` lists the inputs by position; an optional one is written "-"."""
    required = names.split(", ")
    missing = [n for i, n in enumerate(required) if n != "-" and _input(inputs, i) is None]
    if missing:
        raise ValueError(f"{op} lacks its required input(s) {', '.join(missing)}")


def _scale_fits(scale, axis: int, want_axis: int) -> bool:
    """A dequantize scale that factors out of a contraction: per tensor, or per channel along `want_axis`."""
    return _per_tensor(scale) or axis == want_axis


def _onnx_frontend():
    from tvm.relax.frontend.onnx import onnx_frontend

    return onnx_frontend


class _OnnxConverter:
    """The protocol of TVM's `OnnxOpConverter` (the `_impl_v<N>` class method for the model's opset), without
    importing the ONNX frontend when this module loads."""

    @classmethod
    def get_converter(cls, opset):
        versions = sorted(int(n[len("_impl_v") :]) for n in dir(cls) if n.startswith("_impl_v"))
        fit = [v for v in versions if v <= opset]
        return getattr(cls, f"_impl_v{max(fit) if fit else versions[0]}")


class _QdqFused(_OnnxConverter):
    """Base of the QDQ converters: `fuse` the int8 form when the operands are dequantized, else TVM's own."""

    base = ""  # the name of TVM's float converter

    @classmethod
    def get_converter(cls, opset):
        own = getattr(_onnx_frontend(), cls.base).get_converter(opset)

        def convert(bb, inputs, attr, params):
            fused = cls.fuse(bb, inputs, dict(attr))
            return fused if fused is not None else own(bb, inputs, attr, params)

        return convert

    @classmethod
    def fuse(cls, bb, inputs, attr):
        raise NotImplementedError


def _bias_int32(bb, bias):
    """The int32 tensor behind a dequantized bias (its scale is the input scale x the weight scale), else None."""
    call = _dequantize_call(bb, bias) if bias is not None else None
    return call.args[0] if call is not None and _dtype_of(call.args[0]) == "int32" else None


class _QdqConv(_QdqFused):
    """Conv(DequantizeLinear(x_q), DequantizeLinear(w_q)[, DequantizeLinear(b_int32)]) as an int8 conv."""

    base = "Conv"

    @classmethod
    def fuse(cls, bb, inputs, attr):
        dx, dw = _dequantized(bb, inputs[0]), _dequantized(bb, inputs[1])
        if dx is None or dw is None or not _per_tensor(dx[1]) or not _scale_fits(dw[1], dw[3], 0):
            return None
        bias = _input(inputs, 2)
        b_int = _bias_int32(bb, bias)
        y = _rescale(bb, _int_conv(bb, dx[0], dw[0], attr, bias=b_int), dx[1], dw[1], axis=1)
        if bias is not None and b_int is None:  # a float bias: added after the rescale
            y = relax.op.add(bb.normalize(y), relax.op.reshape(bias, [1, -1] + [1] * (_rank(dx[0]) - 2)))
        return y


class _QdqMatMul(_QdqFused):
    """MatMul(DequantizeLinear(a_q), DequantizeLinear(b_q)) as an int8 matmul."""

    base = "MatMul"

    @classmethod
    def fuse(cls, bb, inputs, attr):
        da, db = _dequantized(bb, inputs[0]), _dequantized(bb, inputs[1])
        if da is None or db is None or not _per_tensor(da[1]) or _rank(db[0]) < 2:
            return None
        if not _scale_fits(db[1], db[3], _rank(db[0]) - 1):
            return None
        acc = _int_matmul(bb, da[0], db[0])
        return _rescale(bb, acc, da[1], db[1], axis=_rank(acc) - 1)


class _QdqGemm(_QdqFused):
    """Gemm(DequantizeLinear(a_q), DequantizeLinear(b_q)[, DequantizeLinear(c_int32)]) as an int8 matmul."""

    base = "Gemm"

    @classmethod
    def fuse(cls, bb, inputs, attr):
        da, db = _dequantized(bb, inputs[0]), _dequantized(bb, inputs[1])
        if da is None or db is None or not _per_tensor(da[1]):
            return None
        if attr.get("alpha", 1.0) != 1.0 or attr.get("beta", 1.0) != 1.0:
            return None
        trans_a, trans_b = bool(attr.get("transA", 0)), bool(attr.get("transB", 0))
        if not _scale_fits(db[1], db[3], 0 if trans_b else 1):
            return None
        bias = _input(inputs, 2)
        b_int = _bias_int32(bb, bias)
        y = _rescale(bb, _int_matmul(bb, da[0], db[0], trans_a, trans_b, bias=b_int), da[1], db[1], axis=1)
        return y if bias is None or b_int is not None else relax.op.add(bb.normalize(y), bias)


class _QLinearConv(_OnnxConverter):
    """x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, B int32] -> int8 conv, rescale, quantize."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        _need("QLinearConv", inputs, "x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point")
        acc = _int_conv(bb, inputs[0], inputs[3], attr, bias=_input(inputs, 8))
        return _rescale(bb, acc, inputs[1], inputs[4], 1, inputs[6], _input(inputs, 7))


class _QLinearMatMul(_OnnxConverter):
    """a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp -> int8 matmul, rescale, quantize."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        _need("QLinearMatMul", inputs, "a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point")
        acc = _int_matmul(bb, inputs[0], inputs[3])
        return _rescale(bb, acc, inputs[1], inputs[4], _rank(acc) - 1, inputs[6], _input(inputs, 7))


class _QGemm(_OnnxConverter):
    """com.microsoft QGemm: A, a_scale, a_zp, B, b_scale, b_zp[, C int32][, y_scale, y_zp]; alpha, transA, transB.
    Without y_scale the output is float."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        _need("QGemm", inputs, "A, a_scale, a_zero_point, B, b_scale, b_zero_point")
        trans_a, trans_b = bool(attr.get("transA", 0)), bool(attr.get("transB", 0))
        acc = _int_matmul(bb, inputs[0], inputs[3], trans_a, trans_b, bias=_input(inputs, 6))
        alpha = float(attr.get("alpha", 1.0))
        scale = inputs[1] if alpha == 1.0 else relax.op.multiply(inputs[1], relax.const(alpha, "float32"))
        return _rescale(bb, acc, scale, inputs[4], 1, _input(inputs, 7), _input(inputs, 8))


class _ConvInteger(_OnnxConverter):
    """x, w[, x_zp, w_zp] -> int32: the int8 conv (zero points not represented)."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        return _int_conv(bb, inputs[0], inputs[1], attr)


class _MatMulInteger(_OnnxConverter):
    """a, b[, a_zp, b_zp] -> int32: the int8 matmul (TVM's own converter widens both operands to int32 first,
    which would cost it as an int32 matmul at 4 bytes per element)."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        return _int_matmul(bb, inputs[0], inputs[1])


def _qlinear_binary(fn):
    class QLinearBinary(_OnnxConverter):
        """A, A_scale, A_zp, B, B_scale, B_zp, C_scale[, C_zp] -> dequantize both, the float op, quantize."""

        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            _need("QLinearAdd/QLinearMul", inputs, "A, A_scale, -, B, B_scale, -, C_scale")
            a = _dequantize(inputs[0], inputs[1], inputs[2])
            b = _dequantize(inputs[3], inputs[4], inputs[5])
            return _quantize(bb, fn(a, b), inputs[6], _input(inputs, 7))

    return QLinearBinary


def _qlinear_unary(fn):
    class QLinearUnary(_OnnxConverter):
        """X, X_scale, X_zp, Y_scale[, Y_zp] -> dequantize, the float op, quantize."""

        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            _need("a QLinear op", inputs, "X, X_scale, -, Y_scale")
            x = bb.normalize(_dequantize(inputs[0], inputs[1], inputs[2]))
            return _quantize(bb, fn(bb, x, attr, params), inputs[3], _input(inputs, 4))

    return QLinearUnary


def _global_average_pool(bb, x, attr, params):
    rank = _rank(x)
    axes = list(range(1, rank - 1)) if attr.get("channels_last", 0) else list(range(2, rank))
    return relax.op.mean(x, axis=axes, keepdims=True)


def _softmax(bb, x, attr, params):
    opset = int(attr.get("opset", 13))
    axis = attr.get("axis", -1 if opset >= 13 else 1)
    return _onnx_frontend().Softmax.get_converter(opset)(bb, [x], {"axis": axis}, params)


def _average_pool(bb, x, attr, params):
    if attr.get("channels_last", 0):
        raise ValueError("QLinearAveragePool with channels_last=1 is not supported")
    pool_attr = {k: v for k, v in attr.items() if k != "channels_last"}
    return _onnx_frontend().AveragePool.get_converter(19)(bb, [x], pool_attr, params)


class _QLinearConcat(_OnnxConverter):
    """Y_scale, Y_zp, then (X, X_scale, X_zp) per input -> dequantize each, concat, quantize."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        if len(inputs) < 5 or (len(inputs) - 2) % 3 or any(inputs[i] is None for i in (0, 2, 3)) or "axis" not in attr:
            raise ValueError("QLinearConcat needs Y_scale, Y_zero_point, (X, X_scale, X_zero_point) per input and axis")
        parts = [_dequantize(inputs[i], inputs[i + 1], inputs[i + 2]) for i in range(2, len(inputs), 3)]
        return _quantize(bb, relax.op.concat(parts, axis=int(attr["axis"])), inputs[0], inputs[1])


class _OnnxRandomLike(_OnnxConverter):
    """`RandomUniformLike` / `RandomNormalLike` (ViTMAE's random masking in a legacy export): a fill of the input's
    shape and the `dtype` attribute's type (the input's when absent), not its values, as `random_fill_converter` does
    for torch's `randn`. On a GPU the op is one kernel that writes its output; preflight costs it as a fill (0 FLOPs,
    its output's bytes written). The values are never drawn: an analysis needs shapes. A `relax.zeros` of the static
    shape, with no operand: the input only lends its shape, so the noise (and what is computed from it) is not a
    value computed from weights alone, which a compiler would fold; it is new on every call."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        from tvm.relax.frontend.onnx.onnx_frontend import get_type

        x = inputs[0]
        dtype = get_type(int(attr["dtype"])) if "dtype" in attr else x.ty.dtype
        shape = getattr(x.ty, "shape", None)
        if isinstance(shape, relax.ShapeExpr):
            return relax.op.zeros(shape, dtype)
        return relax.op.zeros_like(x, dtype)


class _OnnxRandom(_OnnxConverter):
    """`RandomUniform` / `RandomNormal`: a fill of the `shape` attribute's shape and `dtype` (float32 by default),
    as `_OnnxRandomLike`."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        from tvm.relax.frontend.onnx.onnx_frontend import get_type

        return relax.op.zeros([int(d) for d in attr["shape"]], get_type(int(attr.get("dtype", 1))))


class _OnnxEinsum(_OnnxConverter):
    """ONNX `Einsum` as the Relax op `relax.einsum` (equation kept as its `subscripts`), where TVM's importer emits a
    TE PrimFunc whose equation is lost: the kernel view needs it to fold the operands as `torch.einsum` does (the
    copies of `sumproduct_pair`, `passes.kernels`)."""

    @classmethod
    def _impl_v12(cls, bb, inputs, attr, params):
        equation = attr["equation"]
        equation = equation.decode("utf-8") if isinstance(equation, bytes) else str(equation)
        return relax.op.einsum(list(inputs), equation.replace(" ", ""))


class _OnnxClip(_QdqFused):
    """ONNX Clip with constant scalar bounds (or none) on a float tensor as one `relax.clip`, as TVM's torch importer
    spells clamp, hardtanh and ReLU6 (one kernel in eager PyTorch, and the kernel view's hard-activation patterns
    read it); a NaN bound is no bound (ONNX Runtime's rule). TVM's own converter emits a `maximum` and a `minimum`
    PrimFunc (call_tir: two elementwise ops where torch runs one kernel, and no cost in a symbolic graph) behind NaN
    guards on the bounds; it still converts bounds computed in the graph."""

    base = "Clip"

    @classmethod
    def fuse(cls, bb, inputs, attr):
        x = inputs[0]
        if not _dtype_of(x).startswith(("float", "bfloat")):
            return None
        if len(inputs) == 1:  # opset 1-6: bounds as attributes
            lo, hi = float(attr.get("min", -math.inf)), float(attr.get("max", math.inf))
        else:
            bounds = [*inputs[1:3], None, None][:2]  # an omitted trailing bound: none
            lo, hi = (_constant_scalar(b, d) for b, d in zip(bounds, (-math.inf, math.inf), strict=True))
            if lo is None or hi is None:
                return None
        lo, hi = (d if math.isnan(v) else v for v, d in ((lo, -math.inf), (hi, math.inf)))
        if lo > hi:  # ONNX gives max there (min(max(x, lo), hi)); relax.clip would give lo: TVM's own converter
            return None
        return relax.op.clip(x, lo, hi)


class _OnnxTile(_QdqFused):
    """ONNX Tile with constant repeats as one `relax.tile` (what TVM's torch importer emits for `Tensor.repeat`);
    TVM's own converter emits a `tile` PrimFunc (call_tir: no cost in a symbolic graph) and still converts repeats
    computed in the graph."""

    base = "Tile"

    @classmethod
    def fuse(cls, bb, inputs, attr):
        reps = inputs[1]
        if not isinstance(reps, tvm.ir.Constant):
            return None
        return relax.op.tile(inputs[0], [int(r) for r in reps.value.numpy().reshape(-1)])


class _OnnxPad(_QdqFused):
    """ONNX Pad with constant, non-negative pads (and a constant value, constant axes) on a float tensor as one
    `relax.nn.pad`, as TVM's torch importer spells `F.pad` (one copy kernel in eager PyTorch, the same in the kernel
    view whatever the route). TVM's own converter emits a `pad` PrimFunc (call_tir: no cost in a symbolic graph, so
    a file with a Pad, Swin's window padding, could not be analysed with its batch symbolic); it still converts the
    rest (negative pads, pads computed in the graph). ONNX writes pads as [begin_0, .., begin_n, end_0, .., end_n],
    `relax.nn.pad` as [begin_0, end_0, begin_1, end_1, ..]; modes edge and wrap are replicate and circular."""

    base = "Pad"
    _MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}

    @classmethod
    def fuse(cls, bb, inputs, attr):
        x = inputs[0]
        if not _dtype_of(x).startswith(("float", "bfloat")) or not isinstance(x.ty.shape, relax.ShapeExpr):
            return None
        mode = attr.get("mode", b"constant")
        mode = cls._MODES.get(mode.decode() if isinstance(mode, bytes) else str(mode))
        rank = _rank(x)
        if len(inputs) == 1:  # opset 2-10: pads and value as attributes
            pads, value, axes = list(attr.get("pads") or ()), float(attr.get("value", 0.0)), None
        else:
            pads_in, axes_in = inputs[1], _input(inputs, 3)
            if not isinstance(pads_in, tvm.ir.Constant) or (
                axes_in is not None and not isinstance(axes_in, tvm.ir.Constant)
            ):
                return None
            pads = [int(v) for v in pads_in.value.numpy().reshape(-1)]
            value = _constant_scalar(_input(inputs, 2), 0.0)
            axes = None if axes_in is None else [int(a) for a in axes_in.value.numpy().reshape(-1)]
        if mode is None or value is None or any(p < 0 for p in pads):
            return None
        axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
        if len(pads) != 2 * len(axes) or sorted(set(axes)) != sorted(axes) or not all(0 <= a < rank for a in axes):
            return None
        width = [0] * (2 * rank)
        for i, a in enumerate(axes):
            width[2 * a], width[2 * a + 1] = pads[i], pads[len(axes) + i]
        return relax.op.nn.pad(x, width, mode, value)


def _constant_scalar(expr, default: float) -> float | None:
    """The value of a one-element Relax constant (`default` for an absent input, None), else None (a bound the
    graph computes)."""
    if expr is None:
        return default
    return _read_scalar(expr) if isinstance(expr, tvm.ir.Constant) else None


ONNX_EXTRA_CONVERTERS.update(
    {
        "Clip": _OnnxClip,
        "Tile": _OnnxTile,
        "Pad": _OnnxPad,
        "Conv": _QdqConv,
        "Einsum": _OnnxEinsum,
        "MatMul": _QdqMatMul,
        "Gemm": _QdqGemm,
        "QLinearConv": _QLinearConv,
        "QLinearMatMul": _QLinearMatMul,
        "QGemm": _QGemm,
        "ConvInteger": _ConvInteger,
        "MatMulInteger": _MatMulInteger,
        "QLinearAdd": _qlinear_binary(relax.op.add),
        "QLinearMul": _qlinear_binary(relax.op.multiply),
        "QLinearSigmoid": _qlinear_unary(lambda bb, x, attr, params: relax.op.sigmoid(x)),
        "QLinearLeakyRelu": _qlinear_unary(
            lambda bb, x, attr, params: relax.op.nn.leakyrelu(x, float(attr.get("alpha", 0.01)))
        ),
        "QLinearGlobalAveragePool": _qlinear_unary(_global_average_pool),
        "QLinearAveragePool": _qlinear_unary(_average_pool),
        "QLinearSoftmax": _qlinear_unary(_softmax),
        "QLinearConcat": _QLinearConcat,
        "RandomUniformLike": _OnnxRandomLike,
        "RandomNormalLike": _OnnxRandomLike,
        "RandomUniform": _OnnxRandom,
        "RandomNormal": _OnnxRandom,
    }
)


# --------------------------------------------------------------------------------------------
# ONNX recurrent layers (LSTM, GRU, RNN): converters for ONNX_EXTRA_CONVERTERS
# --------------------------------------------------------------------------------------------
# TVM 0.27's ONNX importer has no LSTM, GRU or RNN. These unroll the time loop (the sequence length is static) the
# way cuDNN's standard algorithm and torch's decomposition run it: per layer and direction one matmul projects the
# input of every step (X [T, B, I] @ W^T [I, G*H]), then per step one matmul with the recurrent weight
# (H_{t-1} [B, H] @ R^T [H, G*H]) and the gates' pointwise ops, G = 4 (LSTM), 3 (GRU), 1 (RNN). So a step of one
# direction costs G*H*(I+H) MACs per batch row, and the kernel view finds the recurrence (passes/kernels.py).


# Steps unrolled per recurrent node (sequence length x directions). Each step is about ten Relax bindings: 16,384
# steps took 35 s and 1.2 GB to analyse here; a hostile sequence of 10**6 steps would take an hour and 70 GB. A
# longer recurrence raises `LongRecurrence`: the ONNX frontend analyses the model at a few short sequences and
# extrapolates exactly (`passes.analysis.extrapolate_steps`), or refuses it.
MAX_RECURRENT_STEPS = 16_384


# --------------------------------------------------------------------------------------------
# Dequantize -> float conv/matmul (TFLite's and torch's PT2E int8 graphs) as integer ops
# --------------------------------------------------------------------------------------------
# TVM's TFLite importer reads a full-integer int8 model as `quantize -> dequantize -> float conv2d/matmul ->
# quantize` (the weights `dequantize`d constants); a PT2E-quantized `.pt2` holds the same pattern written by torch
# (`quantized_decomposed.dequantize_per_tensor/per_channel` around float `aten.conv2d`/`aten.linear`). An int8 runtime
# (the TFLite interpreter, XNNPACK, oneDNN, TensorRT) runs each such contraction as one integer kernel: `fuse_int8`
# rewrites them as the ONNX QDQ converters above do (`relax.nn.conv*d` / `relax.matmul` on the 8-bit operands with
# `out_dtype="int32"`, then `relax.dequantize` by the product of the scales), and drops the float copies of the
# weights that are then unused. Zero-point corrections are not represented (see the ONNX section above).


def _through_layout(bb, expr):
    """(quantized tensor, scale, zp, axis) for `dequantize(q)` of an 8-bit `q`, or for a `permute_dims` or `reshape`
    of one (TFLite's depthwise weights are reshaped after they are dequantized, a PT2E linear's are transposed): the
    layout op is then applied to `q` (emitted) and a per-channel scale's axis follows it."""
    found = _dequantized(bb, expr)
    if found is not None:
        return found
    call = bb.lookup_binding(expr) if isinstance(expr, tvm.ir.Var) else None
    name = _op_name(call) if call is not None and _is_call(call) else None
    if name not in ("relax.permute_dims", "relax.reshape"):
        return None
    inner = _dequantized(bb, call.args[0])
    if inner is None:
        return None
    q, scale, zp, axis = inner
    rank = _rank(q)
    if name == "relax.permute_dims":
        axes = [int(a) for a in call.attrs.axes] if call.attrs.axes is not None else list(range(rank))[::-1]
        new_q = bb.emit(relax.op.permute_dims(q, axes), name_hint="int8_weight")
        return new_q, scale, zp, axes.index(axis) if not _per_tensor(scale) else 0
    new_q = bb.emit(relax.op.reshape(q, call.args[1]), name_hint="int8_weight")
    if _per_tensor(scale):
        return new_q, scale, zp, 0
    # the channel axis survives a reshape where an axis of the same size has the same elements after it
    old = [int(d.value) for d in q.ty.shape.values]
    new = [int(d.value) for d in new_q.ty.shape.values]
    inner_old = _prod(old[axis + 1 :])
    for b, size in enumerate(new):
        if size == old[axis] and _prod(new[b + 1 :]) == inner_old:
            return new_q, scale, zp, b
    return None


def _prod(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


class _Int8Fuser:
    """The mutator `fuse_int8` runs (built lazily: `relax.expr_functor.mutator` registers a class with TVM)."""

    cls = None

    @classmethod
    def get(cls):
        if cls.cls is None:

            @relax.expr_functor.mutator
            class Fuser(relax.PyExprMutator):
                def __init__(self, mod):
                    super().__init__(mod)
                    self.fused = self.emitted = 0
                    self.accumulators: set[int] = set()  # the int32 results of the rewritten ops

                def visit_call_(self, call):
                    call = self.visit_expr_post_order(call)
                    name = _op_name(call) if _is_call(call) else None
                    try:
                        if name in ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d"):
                            fused = self._conv(call)
                        elif name == "relax.matmul":
                            fused = self._matmul(call)
                        elif name == "relax.add":
                            fused = self._bias(call)
                        else:
                            fused = None
                    except Exception:  # noqa: BLE001 - a pattern this pass does not know stays float, as imported
                        fused = None
                    if fused is None:
                        return call
                    self.fused += 1
                    return fused

                def _conv(self, call):
                    bb = self.builder_
                    dx, dw = _through_layout(bb, call.args[0]), _through_layout(bb, call.args[1])
                    if dx is None or dw is None or not _per_tensor(dx[1]):
                        return None
                    a = call.attrs
                    if not _scale_fits(dw[1], dw[3], str(a.kernel_layout).index("O")):
                        return None
                    op = {3: relax.op.nn.conv1d, 4: relax.op.nn.conv2d, 5: relax.op.nn.conv3d}[_rank(dx[0])]
                    out_layout = str(a.out_layout) or str(a.data_layout)
                    acc = self._emit(
                        accumulator=True,
                        expr=op(
                            dx[0],
                            dw[0],
                            strides=[int(v) for v in a.strides],
                            padding=[int(v) for v in a.padding],
                            dilation=[int(v) for v in a.dilation],
                            groups=int(a.groups),
                            data_layout=str(a.data_layout),
                            kernel_layout=str(a.kernel_layout),
                            out_layout=out_layout,
                            out_dtype="int32",
                        ),
                    )
                    return self._rescale(acc, dx[1], dw[1], out_layout.index("C"), _dtype_of(call))

                def _matmul(self, call):
                    bb = self.builder_
                    da = _through_layout(bb, call.args[0])  # PT2E flattens a dequantized activation
                    if da is None or not _per_tensor(da[1]):
                        return None
                    db = _through_layout(bb, call.args[1])
                    if db is None or _rank(db[0]) < 2 or not _scale_fits(db[1], db[3], _rank(db[0]) - 1):
                        return None
                    acc = self._emit(relax.op.matmul(da[0], db[0], out_dtype="int32"), accumulator=True)
                    return self._rescale(acc, da[1], db[1], _rank(acc) - 1, _dtype_of(call))

                def _bias(self, call):
                    # dequantize(acc) + dequantize(int32 bias) -> dequantize(acc + bias): an int8 kernel adds its
                    # bias to the int32 accumulator (TFLite's bias scale is the input scale x the weight scale)
                    bb = self.builder_
                    acc_call = _dequantize_call(bb, call.args[0])
                    bias_call = _dequantize_call(bb, call.args[1])
                    if acc_call is None or bias_call is None:
                        return None
                    acc, bias = acc_call.args[0], bias_call.args[0]
                    if not isinstance(acc, tvm.ir.Var) or _key(acc) not in self.accumulators:
                        return None
                    if _dtype_of(bias) != "int32" or _rank(bias) != 1 or int(acc_call.attrs.axis) != _rank(acc) - 1:
                        return None
                    summed = self._emit(relax.op.add(acc, bias), accumulator=True)
                    a = acc_call.attrs
                    return relax.op.dequantize(
                        summed, acc_call.args[1], acc_call.args[2], axis=int(a.axis), out_dtype=str(a.out_dtype)
                    )

                def _emit(self, expr, accumulator: bool = False):
                    # names no importer wrote: each new value takes the source (layer name) of the next op that
                    # has one, the rewritten binding's (`source_names`)
                    self.emitted += 1
                    var = self.builder_.emit(expr, name_hint=f"int8_{self.emitted}")
                    if accumulator:
                        self.accumulators.add(_key(var))
                    return var

                def _rescale(self, acc, scale_a, scale_b, axis, dtype):
                    scale = _constant_product(scale_a, scale_b)  # what an int8 kernel precomputes
                    if scale is None:  # scales that are graph inputs (a meta-device module): multiplied per call
                        scale = self._emit(relax.op.multiply(scale_a, scale_b))
                    zero = relax.const(0, "int32")
                    return relax.op.dequantize(acc, scale, zero, axis=axis, out_dtype=dtype or "float32")

            cls.cls = Fuser
        return cls.cls


def _constant_product(a, b):
    """The float32 constant a x b (broadcast) when both scales are constants with readable payloads, else None."""
    if not (isinstance(a, tvm.ir.Constant) and isinstance(b, tvm.ir.Constant)):
        return None
    try:
        return relax.const((a.value.numpy() * b.value.numpy()).astype("float32"))
    except (AttributeError, TypeError, ValueError):
        return None


def fuse_int8(mod: tvm.IRModule, func_name: str = "main") -> tuple[tvm.IRModule, int]:
    """`mod` with every float conv/matmul whose operands are `dequantize`d 8-bit tensors (activation per tensor,
    weight per tensor or per output channel) rewritten as an int8 x int8 -> int32 op and a `dequantize` of the
    accumulator (shapes unchanged), and the bindings that became unused removed; and how many were rewritten."""
    func = main_function(mod, func_name)
    fuser = _Int8Fuser.get()(mod)
    new = fuser.visit_expr(func)
    if not fuser.fused:
        return mod, 0
    new = relax.analysis.remove_all_unused(new)
    return _replace(mod, func_name, new), fuser.fused


class OnnxNodeFailed(Exception):
    """TVM's converter of one ONNX node raised: the node's op type and name, then the converter's message."""


class UnsupportedOnnxNode(IRError):
    """An ONNX node uses a feature preflight's conversion of it does not cover (e.g. LSTM peepholes)."""

    def __init__(self, op_type: str, node: str, what: str):
        super().__init__(f"{op_type} node '{node[:80]}': {what} is not supported")


class LongRecurrence(UnsupportedOnnxNode):
    """A recurrent node runs more than `MAX_RECURRENT_STEPS` steps (`steps` time steps in `dirs` directions)."""

    def __init__(self, op_type: str, node: str, steps: int, dirs: int):
        super().__init__(
            op_type,
            node,
            f"a sequence of {steps:,} steps{' in 2 directions' if dirs == 2 else ''} (more than the "
            f"{MAX_RECURRENT_STEPS:,} preflight unrolls per node)",
        )
        self.steps, self.dirs = steps, dirs


_RNN_ACTIVATIONS = {"sigmoid": relax.op.sigmoid, "tanh": relax.op.tanh, "relu": relax.op.nn.relu}


def _rnn_input(inputs, i: int):
    return inputs[i] if len(inputs) > i else None


def _static_shape(expr) -> list[int]:
    return [int(d) for d in expr.ty.shape]


def _zero_constant(bb, expr) -> bool:
    """Whether `expr` is a constant all-zero tensor, or a broadcast of one (an exporter's default initial state)."""
    import numpy as np

    for _ in range(8):
        if isinstance(expr, tvm.ir.Var):
            bound = bb.lookup_binding(expr)
            if bound is None:
                return False
            expr = bound
        elif _is_call(expr) and _op_name(expr) in ("relax.broadcast_to", "relax.reshape", "relax.astype"):
            expr = expr.args[0]
        else:
            break
    return isinstance(expr, tvm.ir.Constant) and not np.any(expr.value.numpy())


def _rnn_weight(bb, w, d: int, rows: tuple[int, int] | None = None):
    """Direction `d` of an ONNX weight [dirs, G*H, K], transposed to [K, G*H] (rows: a slice of G*H)."""
    if isinstance(w, tvm.ir.Constant):
        arr = w.value.numpy()[d]
        if rows is not None:
            arr = arr[rows[0] : rows[1]]
        return relax.const(arr.T.copy())
    n = _static_shape(w)[1]
    lo, hi = rows if rows is not None else (0, n)
    part = bb.emit(relax.op.strided_slice(w, axes=[0, 1], begin=[d, lo], end=[d + 1, hi]))
    return bb.emit(relax.op.permute_dims(relax.op.squeeze(part, [0]), [1, 0]))


def _rnn_bias(bb, b, d: int, lo: int, hi: int):
    """Elements [lo, hi) of direction `d` of an ONNX bias [dirs, 2*G*H]."""
    if isinstance(b, tvm.ir.Constant):
        return relax.const(b.value.numpy()[d, lo:hi].copy())
    return bb.emit(relax.op.squeeze(relax.op.strided_slice(b, axes=[0, 1], begin=[d, lo], end=[d + 1, hi]), [0]))


def _bound_now(bb, expr):
    """`expr` bound to a variable now if it is an unbound call that is not a zero initial state.

    TVM's ONNX converters may return an unbound call (an `Unsqueeze`'s `expand_dims`), which the block builder binds
    where a later node first uses it. Bound in the middle of the recurrence's ops (an initial state is first used
    after the input projection), it would cut them in two for `_recording_onnx_nodes`' labels: the ops before it
    take its node's label (`source_names`), and the input projection and its bias add would fall outside the
    recurrence's library call. Bound first, every op the recurrence emits comes after it. A zero state stays
    unbound (it is replaced by `relax.zeros`, `_rnn_state`)."""
    if expr is None or not _is_call(expr) or _zero_constant(bb, expr):
        return expr
    return bb.emit(expr)


def _rnn_state(bb, state, d: int, batch: int, hidden: int, dtype: str):
    """Direction `d` of an initial state [dirs, B, H]: zeros (a `relax.zeros`, as torch starts) when absent or 0."""
    if state is None or _zero_constant(bb, state):
        return bb.emit(relax.op.zeros((batch, hidden), dtype))
    return bb.emit(relax.op.squeeze(relax.op.strided_slice(state, axes=[0], begin=[d], end=[d + 1]), [0]))


def _rnn_slice(bb, v, lo: int, hi: int):
    """Elements [lo, hi) of the last axis of `v` (a new constant when `v` is one)."""
    if isinstance(v, tvm.ir.Constant):
        return relax.const(v.value.numpy()[..., lo:hi].copy())
    return bb.emit(relax.op.strided_slice(v, axes=[len(v.ty.shape) - 1], begin=[lo], end=[hi]))


def _rnn_split(bb, v, n: int, axis: int) -> list:
    """`v` split into `n` equal parts along `axis`."""
    if n == 1:
        return [v]
    parts = bb.emit(relax.op.split(v, n, axis=axis))
    return [bb.emit(relax.TupleGetItem(parts, k)) for k in range(n)]


def _recurrent_gemm(bb, h, r_t, rb, x_t=None):
    """h [B, H] @ r_t (R^T, [H, G*H]) (+ its bias, + the step's input projection): the step's recurrent GEMM."""
    out = bb.emit(relax.op.matmul(h, r_t))
    if rb is not None:
        out = bb.emit(relax.op.add(out, rb))
    if x_t is not None:
        out = bb.emit(relax.op.add(out, x_t))
    return out


def _rnn_stack(bb, states: list):
    """Final states [B, H] of each direction as [dirs, B, H] (one direction: a view, no copy)."""
    if len(states) == 1:
        return bb.emit(relax.op.expand_dims(states[0], 0))
    return bb.emit(relax.op.stack(states, axis=0))


class _OnnxRecurrent:
    """Shared unrolling of ONNX LSTM, GRU and RNN (layout 0: X [T, B, I], states [dirs, B, H]; layout 1: X
    [B, T, I], states [B, dirs, H]). Outputs Y [T, dirs, B, H] (layout 1: [B, T, dirs, H]), Y_h and (LSTM) Y_c
    [dirs, B, H]. Subclasses set `op_type`, `gates`, `default_activations` and define `cell`."""

    op_type = ""
    gates = 1
    default_activations: tuple[str, ...] = ()

    @classmethod
    def get_converter(cls, opset: int):
        """The conversion for any opset (7, 14 and 22 differ only in `layout` and accepted dtypes)."""
        return cls._impl_v7

    @classmethod
    def _impl_v7(cls, bb, inputs, attr, params):
        node = str(attr.get("tvm_custom", {}).get("name", "") or cls.op_type)

        def refuse(what):
            raise UnsupportedOnnxNode(cls.op_type, node, what)

        if attr.get("clip") is not None:
            refuse("the 'clip' attribute (cell clipping)")
        if attr.get("input_forget", 0):
            refuse("input_forget=1 (coupled input and forget gates)")
        if attr.get("activation_alpha") or attr.get("activation_beta"):
            refuse("activation_alpha / activation_beta")
        direction = attr.get("direction", b"forward")
        direction = direction.decode() if isinstance(direction, bytes) else str(direction)
        if direction not in ("forward", "reverse", "bidirectional"):
            refuse(f"direction '{direction}'")
        dirs = 2 if direction == "bidirectional" else 1
        layout = int(attr.get("layout", 0))
        inputs = [_bound_now(bb, v) for v in inputs]
        x, w, r = inputs[0], inputs[1], inputs[2]
        b, seq_lens = _rnn_input(inputs, 3), _rnn_input(inputs, 4)
        h0, c0 = _rnn_input(inputs, 5), _rnn_input(inputs, 6) if cls.gates == 4 else None
        if layout:  # batch-first
            x = bb.emit(relax.op.permute_dims(x, [1, 0, 2]))
            h0 = None if h0 is None else bb.emit(relax.op.permute_dims(h0, [1, 0, 2]))
            c0 = None if c0 is None else bb.emit(relax.op.permute_dims(c0, [1, 0, 2]))
        steps, batch, _ = _static_shape(x)
        if steps * dirs > MAX_RECURRENT_STEPS:
            raise LongRecurrence(cls.op_type, node, steps, dirs)
        hidden = int(attr["hidden_size"]) if "hidden_size" in attr else _static_shape(r)[-1]
        if seq_lens is not None:
            import numpy as np

            if not isinstance(seq_lens, tvm.ir.Constant) or np.any(seq_lens.value.numpy() != steps):
                refuse("sequence_lens other than a constant equal to the sequence length")
        names = attr.get("activations")
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in names] if names else []
        per_dir = len(cls.default_activations)
        names = names or list(cls.default_activations) * dirs
        if len(names) != per_dir * dirs or any(n.lower() not in _RNN_ACTIVATIONS for n in names):
            refuse(f"activations {names} (Sigmoid, Tanh or Relu, {per_dir} per direction)")
        dtype = str(x.ty.dtype)
        g = cls.gates * hidden
        ys, hs, cs = [], [], []
        for d in range(dirs):
            reverse = direction == "reverse" or d == 1
            acts = [_RNN_ACTIVATIONS[n.lower()] for n in names[d * per_dir : (d + 1) * per_dir]]
            xp = bb.emit(relax.op.matmul(x, _rnn_weight(bb, w, d)))  # [T, B, G*H]: every step's input projection
            if b is not None:
                xp = bb.emit(relax.op.add(xp, _rnn_bias(bb, b, d, 0, g)))
            xs = [bb.emit(relax.op.squeeze(p, [0])) for p in _rnn_split(bb, xp, steps, 0)]
            rb = None if b is None else _rnn_bias(bb, b, d, g, 2 * g)
            h = _rnn_state(bb, h0, d, batch, hidden, dtype)
            c = _rnn_state(bb, c0, d, batch, hidden, dtype) if cls.gates == 4 else None
            extra = cls.direction_inputs(bb, inputs, d, hidden)
            weights: dict = {}  # one R^T (or slice of it) per direction, shared by every step

            def r_t(rows=None, d=d, weights=weights):
                if rows not in weights:
                    weights[rows] = _rnn_weight(bb, r, d, rows)
                return weights[rows]

            out = []
            for t in reversed(range(steps)) if reverse else range(steps):
                h, c = cls.cell(bb, xs[t], h, c, r_t, rb, hidden, acts, attr, **extra)
                out.append(h)
            if reverse:
                out.reverse()
            ys.append(out)
            hs.append(h)
            cs.append(c)
        # Y [T, dirs, B, H] in one copy: every step's H_t of every direction stacked in (t, d) order, then a view
        y = bb.emit(relax.op.stack([ys[d][t] for t in range(steps) for d in range(dirs)], axis=0))
        results = [bb.emit(relax.op.reshape(y, (steps, dirs, batch, hidden))), _rnn_stack(bb, hs)]
        if cls.gates == 4:
            results.append(_rnn_stack(bb, cs))
        if layout:
            results = [bb.emit(relax.op.permute_dims(results[0], [2, 0, 1, 3]))] + [
                bb.emit(relax.op.permute_dims(s, [1, 0, 2])) for s in results[1:]
            ]
        return relax.Tuple(results)

    @classmethod
    def direction_inputs(cls, bb, inputs, d: int, hidden: int) -> dict:
        """Keyword arguments of `cell` for direction `d` from the node's further inputs (LSTM: peepholes)."""
        return {}

    @classmethod
    def cell(cls, bb, x_t, h, c, r_t, rb, hidden: int, acts: list, attr: dict):
        """One time step: (H_t, C_t or None) from the step's input projection x_t [B, G*H], the previous state
        h, c [B, H], r_t(rows) the recurrent weight R^T [H, G*H] (or its rows [lo, hi) of G*H) and bias rb."""
        raise NotImplementedError


class OnnxLSTM(_OnnxRecurrent):
    """ONNX LSTM: gates i, o, f, c; C_t = f*C_{t-1} + i*g(c); H_t = o*h(C_t). Peepholes (input P [dirs, 3H], order
    i, o, f) add P_i*C_{t-1} and P_f*C_{t-1} to the i and f gates, P_o*C_t to the o gate."""

    op_type = "LSTM"
    gates = 4
    default_activations = ("Sigmoid", "Tanh", "Tanh")

    @classmethod
    def direction_inputs(cls, bb, inputs, d, hidden):
        p = _rnn_input(inputs, 7)
        if p is None:
            return {"peep": None}
        return {"peep": [_rnn_bias(bb, p, d, k * hidden, (k + 1) * hidden) for k in range(3)]}

    @classmethod
    def cell(cls, bb, x_t, h, c, r_t, rb, hidden, acts, attr, peep=None):
        f_act, g_act, h_act = acts
        i, o, f, cc = _rnn_split(bb, _recurrent_gemm(bb, h, r_t(), rb, x_t), 4, 1)
        if peep is not None:
            i = bb.emit(relax.op.add(i, bb.emit(relax.op.multiply(peep[0], c))))
            f = bb.emit(relax.op.add(f, bb.emit(relax.op.multiply(peep[2], c))))
        i, f, cc = bb.emit(f_act(i)), bb.emit(f_act(f)), bb.emit(g_act(cc))
        c = bb.emit(relax.op.add(bb.emit(relax.op.multiply(f, c)), bb.emit(relax.op.multiply(i, cc))))
        if peep is not None:
            o = bb.emit(relax.op.add(o, bb.emit(relax.op.multiply(peep[1], c))))
        return bb.emit(relax.op.multiply(bb.emit(f_act(o)), bb.emit(h_act(c)))), c


class OnnxGRU(_OnnxRecurrent):
    """ONNX GRU: gates z, r, h; linear_before_reset=0 applies r before the recurrent GEMM of h (a second GEMM per
    step, same MACs), 1 after it (torch's nn.GRU); H_t = (1 - z)*h + z*H_{t-1}."""

    op_type = "GRU"
    gates = 3
    default_activations = ("Sigmoid", "Tanh")

    @classmethod
    def cell(cls, bb, x_t, h, c, r_t, rb, hidden, acts, attr):
        f_act, g_act = acts
        xz, xr, xh = _rnn_split(bb, x_t, 3, 1)
        if attr.get("linear_before_reset", 0):
            hz, hr, hh = _rnn_split(bb, _recurrent_gemm(bb, h, r_t(), rb), 3, 1)
            z = bb.emit(f_act(bb.emit(relax.op.add(xz, hz))))
            rr = bb.emit(f_act(bb.emit(relax.op.add(xr, hr))))
            n = bb.emit(g_act(bb.emit(relax.op.add(xh, bb.emit(relax.op.multiply(rr, hh))))))
        else:
            zr_b = None if rb is None else _rnn_slice(bb, rb, 0, 2 * hidden)
            h_b = None if rb is None else _rnn_slice(bb, rb, 2 * hidden, 3 * hidden)
            hz, hr = _rnn_split(bb, _recurrent_gemm(bb, h, r_t((0, 2 * hidden)), zr_b), 2, 1)
            z = bb.emit(f_act(bb.emit(relax.op.add(xz, hz))))
            rr = bb.emit(f_act(bb.emit(relax.op.add(xr, hr))))
            rh = bb.emit(relax.op.multiply(rr, h))
            hh = _recurrent_gemm(bb, rh, r_t((2 * hidden, 3 * hidden)), h_b)
            n = bb.emit(g_act(bb.emit(relax.op.add(xh, hh))))
        # (1 - z)*n + z*H_{t-1} written n + z*(H_{t-1} - n), as torch computes it
        return bb.emit(relax.op.add(n, bb.emit(relax.op.multiply(z, bb.emit(relax.op.subtract(h, n)))))), None


class OnnxRNN(_OnnxRecurrent):
    """ONNX RNN: H_t = f(X_t W^T + Wb + H_{t-1} R^T + Rb), f Tanh by default."""

    op_type = "RNN"
    gates = 1
    default_activations = ("Tanh",)

    @classmethod
    def cell(cls, bb, x_t, h, c, r_t, rb, hidden, acts, attr):
        return bb.emit(acts[0](_recurrent_gemm(bb, h, r_t(), rb, x_t))), None


ONNX_EXTRA_CONVERTERS.update({"LSTM": OnnxLSTM, "GRU": OnnxGRU, "RNN": OnnxRNN})


# --------------------------------------------------------------------------------------------
# Outside models: advanced indexing with sliced (None) axes (ConvBERT's unfold, tests/test_outside_models.py)
# --------------------------------------------------------------------------------------------


def index_tensor_converter(node, importer):
    """`aten.index.Tensor` (data, [idx or None per axis]) with torch's advanced-indexing semantics.

    TVM's converter turns each None (a sliced axis) into an `arange` reshaped to [n, 1, ...] and broadcasts it
    with the index tensors, which is wrong (and fails) when the index tensors have more dimensions or other
    shapes: `im2col`'s decomposition (ConvBERT's `nn.Unfold`) indexes a (1, 32, 20, 1) tensor with
    [None, None, (5, 16, 1, 1), (1, 1)]. torch's rule: the index tensors broadcast to a shape B; the result is
    the sliced axes before them, B, the sliced axes after them when the indexed axes are adjacent, else B
    followed by every sliced axis. Here: move the indexed axes to the front, `index_tensor` (broadcast, zipped),
    then move B into place. Cases without a None after an index, or with one index, stay TVM's.
    """
    indices = node.args[1]
    axes = [i for i, idx in enumerate(indices) if idx is not None]
    if len(axes) < 2 or len(axes) == len(indices):
        return importer._index_tensor(node)
    bb, env = importer.block_builder, importer.env
    data = env[node.args[0]]
    rank = len(data.ty.shape)
    sliced = [i for i in range(rank) if i not in axes]
    moved = bb.emit(relax.op.permute_dims(data, axes + sliced)) if axes + sliced != list(range(rank)) else data
    out = bb.emit(relax.op.index_tensor(moved, [env[indices[i]] for i in axes]))
    if axes != list(range(axes[0], axes[-1] + 1)):
        return out  # indexed axes not adjacent: B comes first, as index_tensor leaves it
    nb = len(out.ty.shape) - len(sliced)
    lead = axes[0]  # sliced axes before the indexed ones
    perm = list(range(nb, nb + lead)) + list(range(nb)) + list(range(nb + lead, nb + len(sliced)))
    return bb.emit(relax.op.permute_dims(out, perm)) if perm != list(range(len(perm))) else out


def arange_converter(node, importer):
    """`aten.arange` with a negative step: the same values as the flipped arange with the positive step.

    TVM 0.27's `relax.arange` infers the wrong length for a negative step (`arange(15, -17, -1)` gets 34
    elements, not 32: Funnel Transformer's relative positions), which then fails a broadcast further on. The
    length is torch's (the fx node's fake tensor); the values run from the last one up, then `flip`.
    """
    import numbers

    args = list(node.args) + [None] * (3 - len(node.args))
    start, end, step = (node.kwargs.get(k, a) for k, a in zip(("start", "end", "step"), args, strict=True))
    val = node.meta.get("val")
    if (
        len(node.args) < 3
        or not all(isinstance(v, numbers.Number) for v in (start, end, step))
        or step >= 0
        or val is None
    ):
        return importer._arange(node)
    n = int(val.shape[0])
    dtype = str(val.dtype).replace("torch.", "")
    last = start + (n - 1) * step
    up = -step
    top = start + 1 if dtype.startswith(("int", "uint")) else start + up / 2  # n values from `last`, exactly
    ascending = importer.block_builder.emit(relax.op.arange(last, top, up, dtype=dtype))
    if [int(d) for d in ascending.ty.shape] != [n]:
        return importer._arange(node)
    return importer.block_builder.emit(relax.op.flip(ascending, axis=0))


def random_fill_converter(node, importer):
    """`aten.randn` / `aten.randn_like` / `aten.rand` / `aten.rand_like`: a fill of the output's shape and dtype
    (`relax.zeros`), not its values.

    TVM's importer converts them by drawing the numbers in Python (`np.random.randn`) into a `relax.const`:
    an archive with a chain of `randn` nodes made preflight generate, hold and ship every tensor (4.9 GB, 75 s),
    and counted them as parameters. The analysis needs the shape; on a GPU the op is a kernel that writes its
    output, which is what a fill costs.
    """
    name = getattr(node.target, "__name__", str(node.target))
    if name.startswith(("randn_like", "rand_like")):
        x = importer.env[node.args[0]]
        dtype = node.kwargs.get("dtype")
        dtype = importer._convert_data_type(dtype, importer.env) if dtype is not None else x.ty.dtype
        return importer.block_builder.emit(relax.op.zeros_like(x, dtype))
    return importer._zeros(node)


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


def slice_converter(node, importer):
    """`aten.slice.Tensor` with the shape torch knows when a size is symbolic.

    TVM's conversion slices a static dimension N to a symbolic end s as `min(s, N)`, which it cannot simplify
    (it does not use the export's range constraint s <= N); adding that to a tensor of size s then has no known
    shape (BERT's and GPT-2's position table sliced to the sequence length). torch's fake tensor has the exact
    size; when every dimension of it is an integer or a plain symbol that is a shape variable of the function's
    inputs, the slice is `match_cast` to that shape. Otherwise TVM's own conversion stands.
    """
    out = importer._slice(node)
    val = node.meta.get("val")
    shape = getattr(val, "shape", None)
    ty = getattr(out, "ty", None)
    if shape is None or not isinstance(ty, relax.TensorType) or ty.shape is None:
        return out
    if all(isinstance(d, IntImm) for d in getattr(ty.shape, "values", [None])):
        return out  # already static
    known: dict[str, object] = {}
    for v in importer.env.values():  # the inputs' shape variables, by name
        vty = getattr(v, "ty", None)
        if isinstance(vty, relax.TensorType) and isinstance(vty.shape, relax.ShapeExpr):
            for d in vty.shape.values:
                if isinstance(d, PE.Var):
                    known.setdefault(str(d.name), d)
    dims = []
    for d in shape:
        if isinstance(d, int):
            dims.append(d)
            continue
        expr = getattr(getattr(d, "node", None), "expr", None)
        if expr is None or not getattr(expr, "is_Symbol", False) or str(expr) not in known:
            return out
        dims.append(known[str(expr)])
    # named apart from the importer's "lv" values, so that the graph's names match those of a static export
    return importer.block_builder.match_cast(out, relax.TensorType(dims, ty.dtype), name_hint="slice_cast")


def rounding_div_converter(node, importer):
    """`aten.div.Tensor_mode` (`torch.div(a, b, rounding_mode=...)`) computed in torch's result dtype.

    TVM's converter makes a Python number operand an int32 (or float32) constant whatever the tensor's dtype, so
    `torch.div(torch.arange(32), 2, rounding_mode="floor")` (DETR's sine position embedding, MoE routing) reached
    `relax.floor_divide` as int64 // int32 and the import failed. Here every operand takes the dtype of the node's
    result (`meta["val"]`, torch's promotion): a number becomes a constant of that dtype, a tensor of another
    dtype is cast. `floor` is `floor_divide`; `trunc` is an integer `divide` (TIR's integer division truncates) or
    `trunc(divide)` for floats; no mode is a true `divide`.
    """
    import numbers

    bb = importer.block_builder
    args = importer.retrieve_args(node)
    mode = node.kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)
    val = node.meta.get("val")
    want = str(getattr(val, "dtype", "")).replace("torch.", "")

    def tensor(x) -> bool:
        return isinstance(x, relax.Expr) and isinstance(getattr(x, "ty", None), relax.TensorType)

    operands = args[:2]
    if not want or not all(tensor(x) or isinstance(x, numbers.Number) for x in operands):
        return importer._div(node)  # symbolic sizes or no fake tensor: TVM's own conversion

    def operand(x):
        if not tensor(x):
            return relax.const(x, want)
        return x if str(x.ty.dtype) == want else bb.emit(relax.op.astype(x, want))

    a, b = (operand(x) for x in operands)
    if mode == "floor":
        return bb.emit(relax.op.floor_divide(a, b))
    quotient = bb.emit(relax.op.divide(a, b))
    if mode == "trunc" and want.startswith(("float", "bfloat")):
        return bb.emit(relax.op.trunc(quotient))
    return quotient


# --------------------------------------------------------------------------------------------
# ONNX import without weight data (issue 12: memory of the ONNX route)
# --------------------------------------------------------------------------------------------
# TVM's importer turns each initializer into a numpy array and then a TVM tensor (two copies of every weight) and
# runs onnx's checker on the whole ModelProto (a third, serialised). The analysis reads only shapes and dtypes, so
# the frontend leaves large weights' data out of the model and marks them `data_location == EXTERNAL`; here they
# become `tvm.runtime.empty` tensors: allocated but never written, so they cost address space, not memory, until
# something reads them (a converter folding a weight with numpy makes a real copy of that one result).

_ONNX_DTYPES = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64", 2: "uint8", 3: "int8"}

# TVM's importer computes a `Range` or a `ConstantOfShape` of constant operands with numpy into a constant (an ONNX
# Range of 400 M elements took 9.5 GB), and every converter after it folds on those values. Up to this many
# generated elements in all per model are still folded (models use small ones for shapes, positions and masks,
# and converters read their values); past it, each is a shape-only op (`arange`, `full`) of the same shape and
# dtype, which costs what the kernel that generates it costs and holds no data.
ONNX_FOLDED_ELEMENTS = 1 << 24


def _onnx_generated_elements(op_name: str, inputs, attrs) -> tuple[int, object] | None:
    """(elements, shape-only Relax op) of a `Range` or `ConstantOfShape` whose operands are all constants, or None
    (TVM's converter then decides, and raises for what is malformed: a zero delta, a negative dimension)."""
    import numpy as np

    consts = [x.value.numpy() for x in inputs if isinstance(x, tvm.ir.GenericConst)]
    if op_name == "Range" and len(inputs) == 3 and len(consts) == 3 and all(c.size == 1 for c in consts):
        start, limit, delta = (c.reshape(()) for c in consts)
        dtype = str(start.dtype)
        if delta == 0 or not np.all(np.isfinite([start, limit, delta])):
            return None
        if dtype.startswith(("int", "uint")):
            s, lim, d = int(start), int(limit), int(delta)
            count = max(-((s - lim) // d), 0)  # ceil((limit - start) / delta), exactly
        else:
            count = max(int(np.ceil(np.float64(limit - start) / np.float64(delta))), 0)
        return count, relax.op.arange(0, count, 1, dtype)
    if op_name == "ConstantOfShape" and len(inputs) == 1 and len(consts) == 1 and consts[0].ndim == 1:
        shape = [int(d) for d in consts[0]]
        if any(d < 0 for d in shape):
            return None
        value = attrs.get("value")
        if value is not None:
            from onnx import numpy_helper

            value = numpy_helper.to_array(value).reshape(-1)
            if value.size != 1:
                return None
            fill, dtype = value[0].item(), str(value.dtype)
        else:
            fill, dtype = 0.0, "float32"
        return int(np.prod(shape, dtype=object)), relax.op.full(relax.ShapeExpr(shape), relax.const(fill, dtype), dtype)
    return None


@contextlib.contextmanager
def _onnx_shape_only_weights():
    """While active, TVM's ONNX importer gives EXTERNAL-marked tensors an uninitialised tensor of their shape, and
    folds a Transpose of one (a tied embedding's output projection) or a Cast to another float or 8-bit type into
    another such tensor, as it would fold the data (the real fold copies the weight two or three times). A `Range`
    or `ConstantOfShape` of constants past `ONNX_FOLDED_ELEMENTS` generated elements becomes a shape-only op."""
    from onnx import TensorProto
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    parse_original, convert_original = ONNXGraphImporter._parse_array, ONNXGraphImporter._convert_operator
    shape_only: set[int] = set()  # handles of the uninitialised tensors
    _DERIVED_CONSTANTS.clear()

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

    folded = [0]  # generated elements folded into constants so far

    def convert_operator(self, op_name, inputs, attrs, opset):
        generated = None
        if op_name in ("Range", "ConstantOfShape"):
            generated = _onnx_generated_elements(op_name, inputs, attrs)
        if generated is not None:
            count, shape_only_op = generated
            if folded[0] + count > ONNX_FOLDED_ELEMENTS:
                return shape_only_op
            folded[0] += count
        value = getattr(inputs[0], "value", None) if inputs else None  # a Constant's tensor (IntImm: an int)
        if isinstance(value, tvm.runtime.Tensor) and value.__chandle__() in shape_only:
            data = inputs[0]
            shape = [int(d) for d in data.value.shape]
            if op_name == "Transpose":
                perm = attrs.get("perm") or list(reversed(range(len(shape))))  # numpy's default, as TVM's converter
                copy = empty([shape[p] for p in perm], str(data.value.dtype))
                _DERIVED_CONSTANTS[copy.__chandle__()] = (copy, data.value)
                return relax.const(copy)
            to = _ONNX_DTYPES.get(attrs.get("to")) if op_name == "Cast" else None
            if to is not None:  # a weight cast to another float type (a mixed-precision export)
                return relax.const(empty(shape, to))
        return convert_original(self, op_name, inputs, attrs, opset)

    ONNXGraphImporter._parse_array, ONNXGraphImporter._convert_operator = parse_array, convert_operator
    try:
        yield
    finally:
        ONNXGraphImporter._parse_array, ONNXGraphImporter._convert_operator = parse_original, convert_original


def _onnx_from_model(
    model, shape_dict: dict[str, list[int]], dtype_dict: dict[str, str], sources: dict[str, int] | None = None
) -> tvm.IRModule:
    """`tvm.relax.frontend.onnx.from_onnx(model, ...)` without its own run of onnx's checker (the frontend ran it
    on a copy without weight data; on `model` it would serialise every weight and then fail on the shape-only
    ones). `sources`: see `onnx_import`."""
    from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

    if model.ir_version < 3:
        raise ValueError(f"Model IR version {model.ir_version} not supported. Must be at least after 1.1.0.")
    opset = 1
    for op in model.opset_import:
        if str(op.domain) in ("ai.onnx", ""):
            opset = op.version
            break
    shape_vars: dict[str, PE.Var] = {}  # a dimension given as a name: one shape variable per name (symbolic import)
    shape_dict = {
        k: [d if isinstance(d, int) else shape_vars.setdefault(d, PE.Var(d, "int64")) for d in v]
        for k, v in shape_dict.items()
    }
    importer = ONNXGraphImporter(shape_dict, dtype_dict, keep_params_in_input=False, sanitize=True)
    if sources is None:
        return importer.from_onnx(model.graph, opset)
    returned = _recording_onnx_nodes(importer, model.graph)
    try:
        mod = importer.from_onnx(model.graph, opset)
    finally:
        del importer._convert_operator  # no reference cycle: a failed import's builder is freed at once
    try:
        sources.update(_bound_sources(main_function(mod), returned))
    except Exception:  # noqa: BLE001 - a name is only a label: the import stands without it
        pass
    return mod


def _recording_onnx_nodes(importer, graph) -> list[tuple[object, int]]:
    """Wrap `importer._convert_operator` (called once per node of `graph`, in order, by `_construct_nodes`) to
    collect what each node's converter returns: a list (filled during the import) of (Relax expression, node
    index). A converter returns a bound variable, or an expression the block builder binds later, when a later
    node's expression or the output uses it (`_bound_sources` finds it by identity). `If` nodes convert their
    branches' nodes through the same method: recording stops at the first call that is not the next node."""
    import weakref

    # the class's function and a weak reference: a failed import's traceback keeps this closure alive after
    # `native_stderr_captured` clears its frames, and it must not keep the importer (and its block builder) too
    convert, ref = type(importer)._convert_operator, weakref.ref(importer)
    listed = [(i, n) for i, n in enumerate(graph.node) if n.op_type != "If"]
    nodes = iter(listed)
    returned: list[tuple[object, int]] = []
    state = {"on": True, "at": 0}

    def converter(op_name, inputs, attrs, opset):
        custom = attrs.get("tvm_custom", {}) if isinstance(attrs, dict) else {}
        try:
            out = convert(ref(), op_name, inputs, attrs, opset)
        except IRError:
            raise
        except Exception as exc:  # TVM's converter of this node failed: say which node, keep its reason
            name = str(custom.get("name") or "")
            if not name and state["on"] and state["at"] < len(listed):  # unnamed: its type and index, as analyze
                index, node = listed[state["at"]]  # labels it
                name = f"{node.op_type}_{index}" if node.op_type == op_name else ""
            raise OnnxNodeFailed(f"{op_name} node '{name[:80]}' (opset {opset}): {exc}") from exc
        if state["on"]:
            state["at"] += 1
            index, node = next(nodes, (None, None))
            if node is None or node.op_type != op_name or node.name != custom.get("name"):
                state["on"] = False
            else:
                returned.append((out, index))
        return out

    importer._convert_operator = converter
    return returned


def _bound_sources(func, returned: list[tuple[object, object]]) -> dict[str, object]:
    """Variable name -> source (a node index, a tensor name) for every binding of `func` whose variable or value is
    an expression in `returned` (a tuple's fields and a tuple item's tuple count as the tuple's source); the first
    source wins."""
    by_handle: dict[int, object] = {}

    def note(expr, index) -> None:
        if isinstance(expr, relax.Tuple):
            for f in expr.fields:
                note(f, index)
        elif isinstance(expr, relax.TupleGetItem):
            note(expr.tuple_value, index)
        elif isinstance(expr, relax.Var | relax.Call):
            by_handle.setdefault(_key(expr), index)

    for expr, index in returned:
        note(expr, index)
    out: dict[str, object] = {}
    body = func.body
    for block in body.blocks if isinstance(body, relax.SeqExpr) else ():
        for b in block.bindings:
            index = by_handle.get(_key(b.var), by_handle.get(_key(b.value)))
            if index is not None:
                out.setdefault(b.var.name, index)
                # a converter's result that picks a field of a tuple it bound first (BatchNormalization's
                # `emit(bn)[0]`): the tuple's op is the node's too, not the next node's
                if isinstance(b.value, relax.TupleGetItem) and isinstance(b.value.tuple_value, relax.Var):
                    out.setdefault(b.value.tuple_value.name, index)
    return out


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
