"""One entry point for every model source: `load(model, inputs=..., batch=...)`."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import PreflightError, UnreadableModelError, UsageError
from .loaded import LoadedModel
from .specs import MAX_DIM, InputSpec, printable


def input_specs(inputs: Sequence[InputSpec | str] | None) -> dict[str, InputSpec]:
    out: dict[str, InputSpec] = {}
    for s in inputs or ():
        spec = s if isinstance(s, InputSpec) else InputSpec.parse(s)
        if spec.name in out:
            raise UsageError(f"--input {spec.name} given twice")
        out[spec.name] = spec
    return out


def load(
    model,
    *,
    inputs: Sequence[InputSpec | str] | None = None,
    batch: int | None = None,
    example_inputs: Sequence | None = None,
    half_casts: str | None = None,
) -> LoadedModel:
    """Lower `model` to a Relax IRModule with static shapes.

    Args:
        model: a path (`.onnx`, `.pt2`, `.keras`, `.tflite`, a SavedModel or Paddle inference directory,
            a Paddle `.json`/`.pdmodel` file), `"zoo:NAME[?key=value...]"`, an `nn.Module` (with
            `example_inputs`), or a Relax `tvm.IRModule` with static shapes.
        inputs: `InputSpec`s or `"NAME:DIMS[:DTYPE]"` strings for the file's inputs.
        batch: sets dimension 0 of every input.
        example_inputs: tensors for an nn.Module.
        half_casts: "float16" or "bfloat16" when the model will be costed in that dtype (`--dtype`): a float32
            nn.Module, zoo model or transformers config is also traced in it, so that its own float32 casts (Llama's
            RMSNorm, a rotary embedding's `.float()`) are kernels in float32 (`LoadedModel.op_dtypes`).

    Raises:
        UsageError: bad arguments, unreadable or unsafe files, dynamic dims left unset (exit 2).
        AnalysisError: the model was read but could not be lowered (exit 1).
    """
    try:
        loaded = _load(model, inputs, batch, example_inputs, half_casts)
    except PreflightError as exc:
        exc.args = tuple(printable(a) if isinstance(a, str) else a for a in exc.args)
        raise
    if loaded.n_inputs is not None:
        from passes.tvm_ir import with_num_inputs

        # the module says which parameters are inputs, so passes that see only the module (AnnotateCosts) agree
        loaded.mod = with_num_inputs(loaded.mod, loaded.n_inputs)
        if loaded.depth1 is not None:  # the 1-layer rebuild of an extrapolated config (hf_config.py)
            loaded.depth1.mod = with_num_inputs(loaded.depth1.mod, loaded.depth1.n_inputs)
        for _, sample in loaded.step_samples:  # the sampled step counts of a long recurrence (onnx_frontend.py)
            if sample is not loaded:
                sample.mod = with_num_inputs(sample.mod, sample.n_inputs)
    return loaded


def _load(model, inputs, batch: int | None, example_inputs, half_casts: str | None = None) -> LoadedModel:
    if batch is not None and not 0 < batch <= MAX_DIM:
        raise UsageError(f"--batch must be an integer from 1 to {MAX_DIM}")
    specs = input_specs(inputs)
    if _is_module(model):
        from .torch_frontend import from_module

        if specs:
            raise UsageError("an nn.Module takes example inputs, not --input specs")
        examples = module_examples(example_inputs)
        if batch is not None:
            examples = with_batch(examples, batch)
        return from_module(model, examples, source=f"<{type(model).__name__}>", half_casts=half_casts)
    if _is_irmodule(model):
        if specs or batch is not None:
            raise UsageError(
                "an IRModule's shapes are fixed: --batch/--input do not apply (bind its symbolic "
                "dimensions before passing it)"
            )
        return LoadedModel(mod=model, framework="relax", name="IRModule", source="<IRModule>", n_inputs=None)
    if not isinstance(model, str | Path):
        raise UsageError(f"cannot analyse a {type(model).__name__}: give a path, 'zoo:NAME' or an nn.Module")
    text = str(model)
    if text.startswith("zoo:"):
        from .zoo_frontend import load_zoo

        return load_zoo(text[4:], specs, batch, half_casts=half_casts)
    return _load_file(Path(text), specs, batch, half_casts)


def module_examples(example_inputs) -> tuple:
    """An nn.Module's example inputs as a tuple: one tensor is a tuple of one (`None`: no inputs)."""
    torch = sys.modules.get("torch")
    if example_inputs is None:
        return ()
    if torch is not None and isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    return tuple(example_inputs)


def with_batch(example_inputs: Sequence, batch: int, axes: Sequence[int | None] | None = None) -> tuple:
    """Example tensors with their batch axis set to `batch` (what `batch=` means for an nn.Module): the first
    slice along it, expanded (a view: nothing is allocated). `axes`: each input's batch axis, None for an input
    without one; default axis 0 of every tensor of at least one dimension. Other inputs as given."""
    if axes is None:
        axes = [0 if getattr(t, "ndim", 0) >= 1 else None for t in example_inputs]
    out = []
    for t, a in zip(example_inputs, axes, strict=True):
        if a is not None:
            t = t.narrow(a, 0, 1).expand(*t.shape[:a], batch, *t.shape[a + 1 :])
        out.append(t)
    return tuple(out)


def _is_module(model) -> bool:
    torch = sys.modules.get("torch")  # an nn.Module exists only if torch is imported: don't import it
    return torch is not None and isinstance(model, torch.nn.Module)


def _is_irmodule(model) -> bool:
    return type(model).__name__ == "IRModule" and type(model).__module__.startswith("tvm")


def _load_file(
    path: Path, specs: dict[str, InputSpec], batch: int | None, half_casts: str | None = None
) -> LoadedModel:
    if not path.exists():
        raise UnreadableModelError(f"{path}: no such file or directory")
    if path.is_dir():
        return _load_dir(path, specs, batch, half_casts)
    suffix = _checked_file(path)
    if suffix in FILE_LOADERS:
        module, function = FILE_LOADERS[suffix]
        return getattr(importlib.import_module(module, __name__), function)(path, specs, batch)
    if path.name in SAVED_MODEL_MARKERS:
        return _load_dir(path.parent, specs, batch, half_casts)
    if is_paddle_program(path) or suffix == PADDLE_PARAMS:
        from .paddle_frontend import load_paddle

        return load_paddle(path, specs, batch)
    # --- a transformers config.json (a JSON object with "model_type"; not a Paddle program): see hf_config.py ---
    if suffix == ".json":
        from .hf_config import is_hf_config, load_hf_config

        if is_hf_config(path):
            return load_hf_config(path, specs, batch, half_casts=half_casts)
        if (why := _json_error(path)) is not None:
            raise UnreadableModelError(f"{path}: not valid JSON ({why})")
        raise UnreadableModelError(
            f"{path}: a JSON file that is neither a transformers config (a JSON object with a 'model_type') nor "
            f"a Paddle program (a .pdiparams file beside it); {_FORMATS}"
        )
    raise UnreadableModelError(f"{path.name}: unknown model format '{suffix or '(no suffix)'}'; {_FORMATS}")


def _json_error(path: Path) -> str | None:
    """Why `path` is not JSON at all (a truncated or hand-edited config.json), None when it parses (or cannot be
    read: the caller's message stands)."""
    import json

    from .hf_config import MAX_CONFIG_BYTES

    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:  # never read a huge file whole to say why
            return None
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, RecursionError):
        return None
    except ValueError as exc:  # json.JSONDecodeError: "Expecting value: line 1 column 48 (char 47)"
        return str(exc)
    return None


def _checked_file(path: Path) -> str:
    """`path`'s suffix (lower case), once the file is known to exist, hold bytes and be no Python pickle."""
    from .torch_frontend import PICKLE_SUFFIXES, refuse_pickle, sniff_pickle

    try:
        if not path.is_file():
            raise UnreadableModelError(f"{path}: no such file")
        if path.stat().st_size == 0:
            raise UnreadableModelError(f"{path.name}: the file is empty")
        suffix = path.suffix.lower()
        if suffix in PICKLE_SUFFIXES:
            raise refuse_pickle(path, f"'{suffix}' files are Python pickles")
        if sniff_pickle(path):
            raise refuse_pickle(path, "the file is a Python pickle")
    except OSError as exc:
        raise UnreadableModelError(f"{path}: cannot read the file ({exc.strerror})") from exc
    return suffix


def load_symbolic_file(
    path: Path, inputs: Sequence[InputSpec | str] | None = None, half_casts: str | None = None
) -> tuple[LoadedModel, dict]:
    """A model file imported once with its dynamic input dims left symbolic (`SYMBOLIC_LOADERS`; a Paddle
    inference model, a folder or its files, through its ONNX conversion): the loaded model, whose `symbols` name
    them ("batch" for dimension 0), and the values `inputs` (`--input`) give the others. UsageError for a file of
    another format, or one its loader refuses; UnreadableModelError for a path that does not exist. `half_casts`
    as `load` takes it (a transformers config's)."""
    try:
        if not path.exists():
            raise UnreadableModelError(f"{path}: no such file or directory")
        paddle = _paddle_program(path, strict=True)
        if paddle is not None:
            from .paddle_frontend import load_paddle_symbolic

            return load_paddle_symbolic(paddle, input_specs(inputs))
        if _symbolic_config(path) is not None:
            from .hf_config import load_hf_config_symbolic

            return load_hf_config_symbolic(path, input_specs(inputs), half_casts)
        suffix = None if path.is_dir() else _checked_file(path)
        if suffix not in SYMBOLIC_LOADERS:
            raise UsageError(
                f"{path.name}: symbolic analysis reads {', '.join(SYMBOLIC_LOADERS)} and Paddle files with a dynamic "
                "batch and transformers config.json files; another file's dynamic sizes are analysed at the values "
                "given (--batch, --input), and `preflight report --batches 1,8,64` sweeps them"
            )
        module, function = SYMBOLIC_LOADERS[suffix]
        return getattr(importlib.import_module(module, __name__), function)(path, input_specs(inputs))
    except PreflightError as exc:
        exc.args = tuple(printable(a) if isinstance(a, str) else a for a in exc.args)
        raise


def takes_symbolic(path: str | Path) -> bool:
    """Whether `load_symbolic_file` takes `path` (by its name; a folder, or a Paddle file, by the names of the files
    in or beside it): a file of `SYMBOLIC_LOADERS`, a Paddle inference model, or a transformers config
    (`_symbolic_config`, which reads the JSON)."""
    path = Path(path)
    return (
        path.suffix.lower() in SYMBOLIC_LOADERS
        or _paddle_program(path) is not None
        or _symbolic_config(path) is not None
    )


def takes_config(path: str | Path) -> bool:
    """Whether `path` names a transformers config that `load_symbolic_file` exports (`_symbolic_config`)."""
    return _symbolic_config(Path(path)) is not None


def _symbolic_config(path: Path) -> Path | None:
    """The transformers config `path` names as the concrete route reads it (`load`: a `.json` config file, or a
    folder that holds a `config.json` and no SavedModel, Paddle program or graph file, `_load_dir`), else None
    (also for a path that cannot be read)."""
    from .hf_config import config_path

    try:
        if path.is_dir() and (
            any((path / m).is_file() for m in SAVED_MODEL_MARKERS)
            or any(is_paddle_program(p) or p.suffix.lower() in FILE_LOADERS for p in path.iterdir())
        ):
            return None
        return config_path(path)
    except OSError:
        return None


def _paddle_program(path: Path, strict: bool = False) -> Path | None:
    """The file to give `paddle_frontend` for `path` when it names a Paddle inference model: a program file
    (`.pdmodel`, or a PIR `.json` beside its `.pdiparams`), a `.pdiparams` file, or a folder holding a program (no
    SavedModel); else None. A folder with several programs: the first (`strict`: UsageError, as `_load_dir`)."""
    try:
        if path.is_dir():
            if any((path / m).is_file() for m in SAVED_MODEL_MARKERS):
                return None
            programs = sorted(p for p in path.iterdir() if is_paddle_program(p))
            if strict and len(programs) > 1:
                raise _several_paddle_models(path, programs)
            return programs[0] if programs else None
        if path.is_file() and (is_paddle_program(path) or path.suffix.lower() == PADDLE_PARAMS):
            return path
    except OSError:
        pass
    return None


def _several_paddle_models(path: Path, programs: list[Path]) -> UsageError:
    names = ", ".join(p.name for p in programs)
    return UsageError(f"{path}: several Paddle models in one directory ({names}); give the model file's path")


# The files whose own dynamic dims a symbolic analysis keeps (analyzer.symbolic): suffix -> (module, loader); and
# Paddle inference models (`_paddle_program`), converted to ONNX and imported as those are
SYMBOLIC_LOADERS: dict[str, tuple[str, str]] = {
    ".onnx": (".onnx_frontend", "load_onnx_symbolic"),
    ".pt2": (".torch_frontend", "load_pt2_symbolic"),
}


# The one table of model files: suffix -> (frontend module, loader). Directories: a SavedModel holds one of
# SAVED_MODEL_MARKERS; a Paddle inference model is a program (`.pdmodel`, or a PIR `.json`) beside its `.pdiparams`.
# `analyzer.batch` walks folders with the same table. (A transformers config.json is recognised by content.)
FILE_LOADERS: dict[str, tuple[str, str]] = {
    ".onnx": (".onnx_frontend", "load_onnx"),
    ".pt2": (".torch_frontend", "load_pt2"),
    ".tflite": (".tensorflow_frontend", "load_tflite"),
    ".keras": (".tensorflow_frontend", "load_keras"),
    ".h5": (".tensorflow_frontend", "load_keras"),  # refused there with a hint: legacy Keras ignores safe_mode
    ".hdf5": (".tensorflow_frontend", "load_keras"),
    ".pdmodel": (".paddle_frontend", "load_paddle"),
}
SAVED_MODEL_MARKERS = ("saved_model.pb", "saved_model.pbtxt")
PADDLE_PROGRAM, PADDLE_PARAMS = ".pdmodel", ".pdiparams"


def is_paddle_program(path: Path) -> bool:
    """A Paddle program file: a legacy `.pdmodel`, or a PIR `.json` beside its `.pdiparams`."""
    suffix = path.suffix.lower()
    return suffix == PADDLE_PROGRAM or (suffix == ".json" and path.with_suffix(PADDLE_PARAMS).is_file())


_FORMATS = (
    "preflight reads .onnx, .pt2 (torch.export.save), .keras, .tflite and Paddle (.json/.pdmodel + "
    ".pdiparams) files, transformers config.json files, SavedModel and Paddle inference directories, and zoo:NAME"
)


def _load_dir(path: Path, specs: dict[str, InputSpec], batch: int | None, half_casts: str | None = None) -> LoadedModel:
    """A SavedModel directory (saved_model.pb) or a Paddle inference directory (model files + .pdiparams)."""
    if any((path / m).is_file() for m in SAVED_MODEL_MARKERS):
        from .tensorflow_frontend import load_saved_model

        return load_saved_model(path, specs, batch)
    paddle_models = sorted(p for p in path.iterdir() if is_paddle_program(p))
    if len(paddle_models) == 1:
        from .paddle_frontend import load_paddle

        return load_paddle(paddle_models[0], specs, batch)
    if len(paddle_models) > 1:
        raise _several_paddle_models(path, paddle_models)
    from .hf_config import is_hf_config, load_hf_config

    if is_hf_config(path / "config.json"):  # a transformers model directory: its config (weights never read)
        graphs = sorted(p.name for p in path.iterdir() if p.suffix.lower() in FILE_LOADERS)
        if graphs:  # an exporter's folder (optimum: model.onnx beside config.json): which one is meant?
            raise UsageError(
                f"{path}: holds {', '.join(graphs[:3])}{' ...' if len(graphs) > 3 else ''} and a transformers "
                f"config.json: give {path / graphs[0]} to analyse that graph, or {path / 'config.json'} for the "
                f"model the config describes"
            )
        return load_hf_config(path / "config.json", specs, batch, half_casts=half_casts)
    if (path / "config.json").is_file() and (why := _json_error(path / "config.json")) is not None:
        raise UnreadableModelError(f"{path / 'config.json'}: not valid JSON ({why})")
    raise UnreadableModelError(
        f"{path}: a directory that is neither a TensorFlow SavedModel (saved_model.pb), "
        f"a Paddle inference model (*.pdmodel or *.json with *.pdiparams) nor a transformers model (config.json); "
        f"{_FORMATS}"
    )


__all__ = ["InputSpec", "LoadedModel", "load"]
