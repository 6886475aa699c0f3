"""PyTorch frontend: nn.Module + example inputs, `torch.export` `.pt2` files, zoo models.

Route: `torch.export` -> core ATen decomposition -> TVM's `from_exported_program`, parameters
kept as function inputs (never bound as constants) so that shapes, not weights, are what the
analysis needs. Operators TVM's importer lacks get a conversion through `custom_convert_map`:
real ones for what the zoo and tests need (`CONVERTERS`), and an opaque placeholder for the rest
so the analysis still runs and lists them in `totals.unsupported`.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import AnalysisError, PreflightError, UnreadableModelError, UsageError, one_line
from .loaded import LoadedModel
from .specs import InputSpec, resolve_shape

UNCONVERTED_PREFIX = "torch:"  # callee name of placeholders for ATen ops TVM cannot import


# --------------------------------------------------------------------------------------------
# Conversions TVM's importer lacks (torch.fx node, importer) -> relax.Var
# --------------------------------------------------------------------------------------------

def _reduce(op_name: str) -> Callable:
    def convert(node, importer):
        from tvm import relax

        x = importer.env[node.args[0]]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", None)
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        if isinstance(dim, int):
            dim = [dim]
        axis = list(dim) if dim else None  # aten: an empty dim list reduces over everything
        return importer.block_builder.emit(getattr(relax.op, op_name)(x, axis=axis, keepdims=bool(keepdim)))

    return convert


CONVERTERS: dict[str, Callable] = {
    "amax.default": _reduce("max"),
    "amin.default": _reduce("min"),
}


def _opaque(target: str) -> Callable:
    """A placeholder for an ATen op with no conversion: a packed call with the right output types."""

    def convert(node, importer):
        from tvm import relax
        args = [importer.env[a] for a in node.all_input_nodes if a in importer.env
                and isinstance(importer.env[a], relax.Expr) and _is_tensor(importer.env[a])]
        vals = node.meta.get("val")
        vals = list(vals) if isinstance(vals, list | tuple) else [vals]
        out = [relax.TensorType([int(d) for d in v.shape], _dtype_name(v.dtype)) for v in vals if v is not None]
        if not out:
            raise AnalysisError(f"cannot represent the unsupported ATen op {target}")
        call = relax.call_dps_packed(f"{UNCONVERTED_PREFIX}aten.{target}", relax.Tuple(args),
                                     out if len(out) > 1 else out[0])
        return importer.block_builder.emit(call)

    return convert


def _is_tensor(expr) -> bool:
    from tvm import relax

    return isinstance(getattr(expr, "ty", None), relax.TensorType)


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


# --------------------------------------------------------------------------------------------
# Import
# --------------------------------------------------------------------------------------------

def _supported_targets() -> set[str]:
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    return set(ExportedProgramImporter().create_convert_map().keys())


def import_exported_program(ep, *, n_inputs: int | None = None):
    """Relax IRModule of an ExportedProgram, plus the ATen ops that had no conversion."""
    from tvm.relax.frontend.torch import from_exported_program

    from passes import tvm_ir

    try:
        ep = ep.run_decompositions()
    except Exception as exc:  # noqa: BLE001 - torch raises many error types here
        raise AnalysisError(f"torch could not decompose the exported program: {one_line(exc)}") from exc
    targets = {n.target.__name__ for n in ep.graph.nodes if n.op == "call_function"}
    supported = _supported_targets()
    custom = {t: CONVERTERS[t] for t in targets if t in CONVERTERS}
    missing = sorted(t for t in targets if t not in supported and t not in CONVERTERS)
    custom.update({t: _opaque(t) for t in missing})
    try:
        mod = from_exported_program(ep, keep_params_as_input=True, custom_convert_map=custom,
                                    run_ep_decomposition=False)
    except PreflightError:
        raise
    except Exception as exc:  # noqa: BLE001 - TVM's importer raises AssertionError, ValueError, TVMError...
        raise AnalysisError(f"TVM's PyTorch importer failed: {one_line(exc)}") from exc
    mod = tvm_ir.strip_param_data(mod)
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


def _on_meta(module) -> bool:
    return any(p.is_meta for p in module.parameters())


def from_module(module, example_inputs: Sequence, *, name: str | None = None, framework: str = "torch",
                source: str = "<nn.Module>", input_names: Sequence[str] | None = None) -> LoadedModel:
    """Export an nn.Module with its example inputs and import it to Relax."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise UsageError("analyze() takes an nn.Module (with example inputs), a file path, or 'zoo:NAME'")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    if not example_inputs:
        raise UsageError("an nn.Module needs example inputs (a tensor or a tuple of tensors)")
    module = module.eval()
    n_inputs = len(example_inputs)
    float_dtype = _float_dtype(module, example_inputs)
    if float_dtype is not None:  # TVM's importer cannot import float16 convs: import in float32, retarget after
        module, example_inputs = _as_float32(module, example_inputs)
    try:
        with torch.inference_mode(False), torch.no_grad():
            if _on_meta(module):
                wrapper, weights = _ParamsAsInputs.wrap(module, n_inputs)
                ep = torch.export.export(wrapper, (*example_inputs, *weights))
            else:
                ep = torch.export.export(module, example_inputs)
    except Exception as exc:  # noqa: BLE001 - torch.export raises many error types
        raise AnalysisError(f"torch.export could not export the module: {one_line(exc)}") from exc
    mod, n_inputs, missing = import_exported_program(ep, n_inputs=n_inputs)
    return LoadedModel(mod=mod, framework=framework, name=name or type(module).__name__, source=source,
                       n_inputs=n_inputs, unconverted=missing, input_names=tuple(input_names or ()),
                       float_dtype=float_dtype)


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


def _as_float32(module, example_inputs):
    """A float32 copy of a half-precision module (on the meta device the copy allocates nothing)."""
    import copy

    import torch

    copied = copy.deepcopy(module).float()
    inputs = tuple(t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in example_inputs)
    return copied, inputs


# --------------------------------------------------------------------------------------------
# .pt2 files, loaded without ever unpickling
# --------------------------------------------------------------------------------------------

PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt", ".tar", ".joblib")
SAVE_HINT = ("save the model with torch.export.save(torch.export.export(model, example_inputs), 'model.pt2') "
             "or export it to ONNX")


def refuse_pickle(path: Path, why: str) -> UnreadableModelError:
    return UnreadableModelError(f"{path.name}: {why}; preflight never unpickles files (it could run code): "
                                f"{SAVE_HINT}")


@contextlib.contextmanager
def _no_unpickling(path: Path):
    """Inside: torch.load only loads plain tensors (weights_only=True), and pickle.loads refuses."""
    import torch

    real_load, real_loads = torch.load, pickle.loads
    real_obj = getattr(torch._C, "_pickle_load_obj", None)

    def safe_load(*args, **kwargs):
        kwargs["weights_only"] = True
        return real_load(*args, **kwargs)

    def refuse(*args, **kwargs):
        raise refuse_pickle(path, "the archive holds pickled Python objects")

    torch.load, pickle.loads = safe_load, refuse
    if real_obj is not None:
        torch._C._pickle_load_obj = refuse
    try:
        yield
    finally:
        torch.load, pickle.loads = real_load, real_loads
        if real_obj is not None:
            torch._C._pickle_load_obj = real_obj


@contextlib.contextmanager
def _quiet_torch_export_log():
    """torch.export.load logs a traceback when it falls back to its legacy reader; errors are ours to report."""
    logger = logging.getLogger("torch.export")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def check_pt2_archive(path: Path) -> None:
    """Refuse anything but a torch.export archive (a torch.save zip is a pickle)."""
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise UnreadableModelError(f"{path.name}: not a torch.export .pt2 archive ({one_line(exc)})") from exc
    if any(n.endswith("data.pkl") or n.endswith(".pkl") for n in names):
        raise refuse_pickle(path, "this is a torch.save pickle archive, not a torch.export program")
    if not any(n.endswith("archive_format") or n.endswith("serialized_exported_program.json") for n in names):
        raise UnreadableModelError(f"{path.name}: not a torch.export .pt2 archive (no exported program inside)")


def load_pt2(path: Path, specs: dict[str, InputSpec], batch: int | None) -> LoadedModel:
    """Load a `torch.export.save` archive safely and import it, binding dynamic dims."""
    import torch

    from passes import tvm_ir

    check_pt2_archive(path)
    try:
        with _no_unpickling(path), _quiet_torch_export_log():
            ep = torch.export.load(str(path))
    except UnreadableModelError:
        raise
    except pickle.UnpicklingError as exc:  # weights_only=True met something other than plain tensors
        raise refuse_pickle(path, "the archive holds pickled Python objects") from exc
    except Exception as exc:  # noqa: BLE001
        raise UnreadableModelError(f"{path.name}: torch.export.load failed: {one_line(exc)}") from exc
    mod, n_inputs, missing = import_exported_program(ep)
    mod = bind_input_shapes(mod, n_inputs, specs, batch, path.name)
    names = tuple(n for n, _ in tvm_ir.param_types(mod)[: n_inputs or 0])
    return LoadedModel(mod=mod, framework="torch", name=path.stem, source=str(path), n_inputs=n_inputs,
                       unconverted=missing, input_names=names)


def bind_input_shapes(mod, n_inputs: int | None, specs: dict[str, InputSpec], batch: int | None, source: str):
    """Bind the symbolic input dims of a Relax module to the user's `--input` / `--batch` values."""
    from tvm import relax

    from passes import tvm_ir

    params = tvm_ir.param_types(mod)
    user = params[: n_inputs if n_inputs is not None else len(params)]
    unknown = set(specs) - {n for n, _ in user}
    if unknown:
        raise UsageError(f"--input names {', '.join(sorted(unknown))} not among the model's inputs: "
                         f"{', '.join(n for n, _ in user)}")
    values: dict[str, int] = {}
    for name, ty in user:
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            continue
        file_dims = [int(d.value) if hasattr(d, "value") else str(d) for d in ty.shape.values]
        spec = specs.get(name)
        if spec is not None and spec.dtype is not None and spec.dtype != str(ty.dtype):
            raise UsageError(f"input '{name}' is {ty.dtype} in {source}; an exported program fixes its dtypes "
                             f"(re-export with {spec.dtype} example inputs)")
        shape = resolve_shape(name, file_dims, spec, batch, source)
        for f, v in zip(file_dims, shape, strict=True):
            if isinstance(f, str):
                if f in values and values[f] != v:
                    raise UsageError(f"dimension '{f}' is shared by several inputs and given both {values[f]} and {v}")
                values[f] = v
    if not values:
        return mod
    try:
        return tvm_ir.bind_symbolic_dims(mod, values)
    except Exception as exc:  # noqa: BLE001
        raise AnalysisError(f"could not bind the input shapes: {one_line(exc)}") from exc


def sniff_pickle(path: Path) -> bool:
    """True for a raw pickle stream (protocol 2+ starts with 0x80) or a torch.save zip archive."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:1] == b"\x80":
        return True
    if head == b"PK\x03\x04":
        with contextlib.suppress(zipfile.BadZipFile, OSError), zipfile.ZipFile(path) as z:
            return any(n.endswith(".pkl") for n in z.namelist())
    return False
