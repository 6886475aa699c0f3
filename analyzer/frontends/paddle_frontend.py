"""PaddlePaddle frontend: inference models as `paddle.jit.save` writes them.

Route: Relax has no Paddle importer, so paddle2onnx converts the model (`model.json` of Paddle 3's PIR, or
a legacy `model.pdmodel`, with `model.pdiparams`) to ONNX in memory, and the ONNX frontend imports it.
paddle2onnx runs in a spawned child process with resource limits (`isolate.py`: a corrupt parameter file
can abort its C++ code) and is called with
`save_file=None`, so none of its Python post-optimizers runs (its default,
polygraphy, installs packages at run time); its built-in C++ graph optimizer does.

Safety: paddle2onnx reads the program (JSON or protobuf) and the parameter file (a raw tensor stream)
directly; nothing is unpickled, and `pickle.load`/`loads` refuse while it runs, so a hostile file that
reaches a pickle fallback inside paddle is refused rather than executed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path

from ..errors import AnalysisError, MissingExtraError, PreflightError, UnreadableModelError
from .isolate import GIB, Limits, restrict_writes, run_isolated
from .loaded import LoadedModel
from .native import install_hint, quiet_native_output
from .specs import InputSpec

CONVERT_TIMEOUT_S = 600

OPSET = 17  # LayerNormalization is a single ONNX op from 17; paddle2onnx raises it if an op needs more


def _model_files(path: Path) -> tuple[Path, Path]:
    """(program file, parameter file) for a `.json`, `.pdmodel` or `.pdiparams` path."""
    if path.suffix.lower() == ".pdiparams":
        candidates = [path.with_suffix(".json"), path.with_suffix(".pdmodel")]
        found = [c for c in candidates if c.is_file()]
        if not found:
            raise UnreadableModelError(
                f"{path.name}: a Paddle parameter file without its program "
                f"({path.stem}.json or {path.stem}.pdmodel) beside it"
            )
        return found[0], path
    params = path.with_suffix(".pdiparams")
    if not params.is_file():
        raise UnreadableModelError(
            f"{path.name}: its parameter file {params.name} is missing (keep the files paddle.jit.save writes together)"
        )
    return path, params


def _check_program(program: Path) -> None:
    """Refuse a program file that is not what paddle.jit.save writes, before paddle2onnx sees it."""
    if program.stat().st_size == 0:
        raise UnreadableModelError(f"{program.name}: the file is empty")
    if program.suffix == ".json":
        try:
            doc = json.loads(program.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UnreadableModelError(f"{program.name}: not a Paddle program (invalid JSON: {exc})") from exc
        except RecursionError as exc:  # json's C decoder recurses once per nested array or object
            raise UnreadableModelError(
                f"{program.name}: not a Paddle program (its JSON nests arrays or objects deeper than Python's "
                f"recursion limit, {sys.getrecursionlimit():,} levels)"
            ) from exc
        if not isinstance(doc, dict) or "program" not in doc:
            raise UnreadableModelError(f"{program.name}: not a Paddle program (no 'program' in the JSON)")
        return
    if program.read_bytes()[:1] in (b"{", b"["):
        raise UnreadableModelError(f"{program.name}: a JSON file named .pdmodel; name it model.json")


@contextlib.contextmanager
def _no_unpickling(label: str):
    def refuse(*args, **kwargs):
        raise UnreadableModelError(
            f"{label}: the model asks to unpickle Python objects; preflight never unpickles files (it could run code)"
        )

    real = pickle.load, pickle.loads
    pickle.load, pickle.loads = refuse, refuse
    try:
        yield
    finally:
        pickle.load, pickle.loads = real


def _float_constants(model) -> tuple[int, int]:
    """Elements and bytes of the floating-point weights in an ONNX graph: initializers and the
    non-scalar float `Constant` nodes paddle2onnx writes its parameters as."""
    from .onnx_frontend import _file_params

    return _file_params(model)  # (it counts float Constant nodes)


def load_paddle(path: Path, specs: dict[str, InputSpec], batch: int | None) -> LoadedModel:
    """Convert a Paddle inference model to ONNX with paddle2onnx and import it with static shapes."""
    from .onnx_frontend import load_onnx

    return _via_onnx(path, lambda onnx_path: load_onnx(onnx_path, specs, batch))


def load_paddle_symbolic(path: Path, specs: dict[str, InputSpec]) -> tuple[LoadedModel, dict[str, int]]:
    """A Paddle inference model converted once and imported with its dynamic dims symbolic
    (`onnx_frontend.load_onnx_symbolic`: paddle2onnx writes a `None` dimension of the saved `InputSpec` as a
    dynamic ONNX dimension): the loaded model and the values `specs` give the symbols other than the batch."""
    from .onnx_frontend import DYNAMIC_BATCH_HINT, load_onnx_symbolic

    values: dict[str, int] = {}

    def load(onnx_path: Path) -> LoadedModel:
        try:
            loaded, found = load_onnx_symbolic(onnx_path, specs)
        except PreflightError as exc:  # a fixed batch: say how to save a Paddle model with a dynamic one
            hint = "save the model with None on dimension 0 of its paddle.static.InputSpec"
            exc.args = tuple(a.replace(DYNAMIC_BATCH_HINT, hint) if isinstance(a, str) else a for a in exc.args)
            raise
        values.update(found)
        return loaded

    return _via_onnx(path, load), values


def _via_onnx(path: Path, load) -> LoadedModel:
    """`load(onnx_path)` of the model's ONNX conversion, labelled as the Paddle model it came from."""
    program, params = _model_files(path)
    _check_program(program)
    for module in ("paddle", "paddle2onnx"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(
                f"PaddlePaddle models need the optional dependency '{module}': {install_hint('paddle')}"
            )
    if params.stat().st_size == 0:
        raise UnreadableModelError(f"{params.name}: the file is empty")

    import onnx

    with tempfile.TemporaryDirectory(prefix="preflight-paddle-") as tmp:
        onnx_path = Path(tmp) / f"{program.stem}.onnx"
        _convert(program, params, onnx_path)
        try:
            loaded = load(onnx_path)
        except UnreadableModelError as exc:
            cause = str(exc).removeprefix(f"{onnx_path.name}: ")
            raise UnreadableModelError(
                f"{params.name}: paddle2onnx turned {program.name} and {params.name} into an invalid ONNX graph; "
                f"the parameter file may be truncated or belong to another program ({cause[:160]})"
            ) from exc
        except PreflightError as exc:  # the ONNX file's name means nothing to the user: name the program
            exc.args = tuple(a.replace(onnx_path.name, program.name) if isinstance(a, str) else a for a in exc.args)
            raise
        weights = _float_constants(onnx.load(str(onnx_path)))
    loaded.framework = "paddle"
    # paddle.jit.save's files are usually named model.* or inference.*: then the folder names the model
    generic = program.stem.lower() in ("model", "inference", "__model__", "infer")
    loaded.name = program.parent.resolve().name if generic and program.parent.resolve().name else program.stem
    loaded.source = str(path)
    loaded.source_params = weights
    return loaded


PADDLE_STEP = "paddle2onnx"


def _convert(program: Path, params: Path, onnx_path: Path) -> None:
    """Run paddle2onnx in a child process (`isolate.py`, forked from a zygote that imported paddle once): a
    corrupt parameter file can make its C++ code abort, and paddle's protobuf runtime then never meets
    TensorFlow's in one process."""
    size = program.stat().st_size + params.stat().st_size
    result = run_isolated(
        f"{__name__}:onnx_in_child",
        [str(program.absolute()), str(params.absolute())],  # the child works in its scratch directory
        label=program.name,
        what=PADDLE_STEP,
        limits=Limits(memory=6 * GIB + 8 * size, cpu_s=2 * CONVERT_TIMEOUT_S, wall_s=CONVERT_TIMEOUT_S),
        start="zygote",
        preload=("paddle", "paddle2onnx", __name__),
    )
    onnx_path.write_bytes(result.data)


def onnx_in_child(program: str, params: str) -> tuple[dict, bytes]:
    """Child process: the ONNX bytes paddle2onnx makes of `program` + `params`.

    HOME and the cache folders are the child's scratch directory (its working directory, `isolate.py`), and
    Landlock, where the kernel has it, lets it write nowhere else (`restrict_writes`)."""
    scratch = os.getcwd()
    for key in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
        os.environ[key] = scratch
    restrict_writes(Path(scratch))
    try:
        import paddle  # noqa: F401 - paddle2onnx needs it; imported first to report it by name
        import paddle2onnx
    except ImportError as exc:
        raise MissingExtraError(
            f"PaddlePaddle models need the optional dependency '{exc.name or exc}': {install_hint('paddle')}"
        ) from exc
    onnx_bytes = None
    with quiet_native_output() as captured, _no_unpickling(Path(program).name):
        try:
            onnx_bytes = paddle2onnx.export(
                program,
                params,
                save_file=None,
                opset_version=OPSET,
                auto_upgrade_opset=True,
                verbose=False,
                enable_onnx_checker=True,
                enable_optimize=True,
                optimize_tool="onnxoptimizer",
            )
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - paddle2onnx logs its error, then fails or exits
            captured.text += f"\n{type(exc).__name__}: {exc}"
    if not onnx_bytes:
        raise _conversion_error(Path(program).name, captured.text)
    return {}, onnx_bytes


def _conversion_error(label: str, log: str) -> PreflightError:
    """paddle2onnx failed: unsupported operators are an analysis failure (1), anything else unreadable (2)."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip() and not ln.lstrip().startswith(("File ", "^"))]
    ops = sorted(
        {ln.split("Oops, there are some operators not supported yet")[-1] for ln in lines if "not supported yet" in ln}
    )
    unsupported = [ln for ln in lines if "not supported" in ln.lower() or "no converter" in ln.lower()]
    detail = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else "")
    if ops or unsupported:
        return AnalysisError(f"{label}: paddle2onnx cannot convert the model: {(unsupported or ops)[-1][:300]}")
    return UnreadableModelError(f"{label}: paddle2onnx could not read the model ({detail[:300] or 'no details'})")
