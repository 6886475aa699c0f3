"""A transformers `config.json` on its own: the model it describes, built on the meta device.

No weights are read (there are none), nothing is fetched (the hub is never called: the config class comes from
transformers' own table of model types) and no code from the model's files is run: a config naming custom code
(`auto_map`, `trust_remote_code`) is refused. The model class is the config's `architectures[0]` when
transformers ships it, else its causal-LM class, else its base model; it is wrapped to take its main input
(`input_ids` or `pixel_values`) and return its first output, as the zoo wraps its transformers models.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import AnalysisError, UnreadableModelError, UsageError, one_line
from .loaded import LoadedModel
from .specs import InputSpec, resolve_shape

MAX_CONFIG_BYTES = 4 * 2**20  # a transformers config is a few KiB; anything this large is not one
FRAMEWORK = "transformers"
MAX_LAYERS = 4096  # building a model makes one Python module per layer: a config asking for millions is refused
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "num_decoder_layers", "num_encoder_layers")
_SIZE_KEYS = (
    "hidden_size",
    "n_embd",
    "d_model",
    "intermediate_size",
    "n_inner",
    "ffn_dim",
    "vocab_size",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "n_positions",
)


def _read(path: Path) -> dict | None:
    """The file's JSON object, or None when it is not a readable JSON object of sensible size."""
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def is_hf_config(path: Path) -> bool:
    """True for a `.json` file holding a JSON object with a string `model_type` (a transformers config)."""
    if path.suffix.lower() != ".json" or not path.is_file():
        return False
    doc = _read(path)
    return doc is not None and isinstance(doc.get("model_type"), str)


def config_path(path: Path) -> Path | None:
    """`path` itself when it is a transformers config, or the `config.json` of a model directory; else None."""
    if path.is_dir():
        path = path / "config.json"
    return path if is_hf_config(path) else None


def read_config(path: Path):
    """The transformers config object of a `config.json` (model type from transformers' own table; no code run).

    Raises:
        UnreadableModelError: not a transformers config, custom code named, an unknown model type, bad values.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    doc = _read(path)
    if doc is None or not isinstance(doc.get("model_type"), str):
        raise UnreadableModelError(f"{path}: not a transformers config (a JSON object with a 'model_type')")
    if "auto_map" in doc or doc.get("trust_remote_code"):
        raise UnreadableModelError(
            f"{path}: the config names custom model code (auto_map / trust_remote_code); preflight never runs "
            f"code from a model's files: use a model type that transformers ships"
        )
    _check_sizes(doc, path)
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = doc["model_type"]
    if model_type not in CONFIG_MAPPING:
        raise UnreadableModelError(
            f"{path}: model_type {model_type!r} is not a model transformers {transformers.__version__} ships"
        )
    try:
        return CONFIG_MAPPING[model_type].from_dict(doc)
    except Exception as exc:  # transformers validates fields with many error types
        why = one_line(exc, every_line=True)  # (transformers' validate_rope gives its reason on line 2)
        raise UnreadableModelError(f"{path}: transformers rejects the config: {why}") from exc


#: The sizes that fix a model's cost: a config that leaves one out gets transformers' default for its model type
COST_SIZES = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")


def defaulted_sizes(path: Path, config) -> list[str]:
    """The `COST_SIZES` that the config file at `path` does not set (under the name or one of the config class's
    aliases, `attribute_map`, at the top or in `text_config`): what `config` took from transformers' defaults."""
    doc = _read(path) or {}
    given = set(doc) | set(doc.get("text_config") or {} if isinstance(doc.get("text_config"), dict) else ())
    aliases = getattr(config, "attribute_map", {}) or {}  # size -> the name this model type stores it under
    given |= {size for size, own in aliases.items() if own in given}
    return [k for k in COST_SIZES if k not in given and getattr(config, k, None) is not None]


#: Head counts: sizes are divided by them, so 0 is refused (other sizes may be 0: a model without a decoder)
_HEAD_KEYS = (
    "num_attention_heads",
    "n_head",
    "n_heads",
    "num_heads",
    "num_key_value_heads",
    "num_kv_heads",
    "encoder_attention_heads",
    "decoder_attention_heads",
)


def _check_sizes(doc: dict, path: Path) -> None:
    """Refuse layer counts and sizes no model has (they would exhaust memory or overflow shapes, not analyse)."""
    from .specs import MAX_DIM

    for section in (doc, *(v for v in doc.values() if isinstance(v, dict))):
        for key in _LAYER_KEYS + _SIZE_KEYS:
            v = section.get(key)
            if v is None:
                continue
            limit = MAX_LAYERS if key in _LAYER_KEYS else MAX_DIM
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= limit:
                raise UnreadableModelError(f"{path}: {key} = {v!r} is not a size a model has (0 to {limit:,})")
        for key in _HEAD_KEYS:  # divisors of the hidden size (and of the query heads)
            if section.get(key) == 0 and not isinstance(section.get(key), bool):
                raise UnreadableModelError(f"{path}: {key} = 0: a model has at least one attention head")
        heads, kv = section.get("num_attention_heads"), section.get("num_key_value_heads")
        if isinstance(heads, int) and isinstance(kv, int) and kv > 0:
            from predictor.serving_engine import EngineConfigError, check_kv_heads

            try:
                check_kv_heads(heads, kv)
            except EngineConfigError as exc:
                raise UnreadableModelError(f"{path}: {exc}") from exc


def _model_class(config, causal_lm: bool):
    """The class to build: `architectures[0]` when transformers ships it, else the causal-LM or base model class."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_MAPPING

    for name in getattr(config, "architectures", None) or ():
        cls = getattr(transformers, str(name), None) if str(name).isidentifier() else None
        is_model = isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)
        if is_model and isinstance(config, cls.config_class) and (not causal_lm or _causal_lm_class(cls)):
            return cls
    if is_encoder_config(config):
        if causal_lm:
            raise UsageError(
                f"model_type {config.model_type!r} is an encoder (is_decoder is false), not a decoder LM: nothing to "
                f"serve token by token"
            )
        mappings: tuple = (MODEL_MAPPING,)  # not its causal-LM class: that is the decoder variant of the encoder
    else:
        mappings = (MODEL_FOR_CAUSAL_LM_MAPPING,) if causal_lm else (MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_MAPPING)
    for mapping in mappings:
        try:
            return mapping[type(config)]
        except KeyError:
            continue
    what = "causal language model" if causal_lm else "model"
    raise UsageError(f"transformers has no {what} class for model_type {config.model_type!r}")


def is_encoder_config(config) -> bool:
    """An encoder-only config (BERT, RoBERTa, ...): transformers ships a masked-LM class for its model type, it is
    not an encoder-decoder, and it does not ask to be a decoder (`is_decoder`)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return (
        config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES
        and not getattr(config, "is_decoder", False)
        and not getattr(config, "is_encoder_decoder", False)
    )


def build_model(config, *, causal_lm: bool = False):
    """The model of `config` on the meta device (shapes only), with sdpa attention where the class supports it."""
    import torch

    cls = _model_class(config, causal_lm)
    try:
        with torch.device("meta"):
            try:
                model = cls._from_config(config, attn_implementation="sdpa")
            except ValueError:  # the class has no sdpa attention
                model = cls._from_config(config, attn_implementation="eager")
    except Exception as exc:  # a model's __init__ can raise anything on odd values
        raise AnalysisError(f"building {cls.__name__} from the config failed: {one_line(exc)}") from exc
    return model.eval()


def _causal_lm_class(cls) -> bool:
    """`cls` (or a class it derives from) is one of transformers' causal-LM classes (its AutoModelForCausalLM
    table: LlamaForCausalLM, GPT2LMHeadModel, ...)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    names = set()
    for v in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        names.update(v if isinstance(v, list | tuple) else (v,))
    return any(c.__name__ in names for c in cls.__mro__)


def is_causal_lm(model) -> bool:
    """A transformers model that generates text: a causal-LM class, not an encoder-decoder."""
    config = getattr(model, "config", None)
    return config is not None and not getattr(config, "is_encoder_decoder", False) and _causal_lm_class(type(model))


def load_hf_config(
    path: Path, specs: dict[str, InputSpec], batch: int | None, half_casts: str | None = None
) -> LoadedModel:
    """Analyse the model a transformers `config.json` describes: input_ids (batch x sequence) or pixel_values.

    A stack of more than `EXTRAPOLATE_ABOVE` identical layers is traced at depth 2, with its depth-1 rebuild in
    `depth1` (`LoadedModel.layers`): the analysis extrapolates the totals exactly. More than `MAX_FULL_LAYERS`
    layers that cannot be extrapolated are refused (exit 1) rather than traced one by one. `half_casts`: the half dtype
    the model will be costed in (`torch_frontend.from_module`: its own float32 casts are kernels).
    """
    config = read_config(path)
    n = layer_count(config)
    if n is not None and n > EXTRAPOLATE_ABOVE:
        why = _why_not_identical_cached(path, config)
        if why is None:
            deep = _load_model(build_model(truncated_config(config, 2)), config, path, specs, batch, None, half_casts)
            deep.depth1 = _load_model(
                build_model(truncated_config(config, 1)), config, path, specs, batch, None, half_casts
            )
            deep.layers = n
            return deep
        if n > MAX_FULL_LAYERS:
            raise AnalysisError(
                f"{path}: {n:,} layers that preflight cannot extrapolate from the first two ({why}); it traces at "
                f"most {MAX_FULL_LAYERS} such layers (a config with fewer layers shows their cost per layer)"
            )
    declared = _declared_layers(config)
    if declared > MAX_FULL_LAYERS:
        raise AnalysisError(
            f"{path}: a stack of {declared:,} layers that preflight cannot extrapolate from the first two; it traces "
            f"at most {MAX_FULL_LAYERS} layers per stack (a config with fewer layers shows their cost per layer)"
        )
    return _load_model(build_model(config), config, path, specs, batch, None, half_casts)


# ---- identical layers: trace two, extrapolate the rest --------------------------------------------------------------

EXTRAPOLATE_ABOVE = 48  # layers: up to this many are traced one by one (exact op and kernel lists); above, two
MAX_FULL_LAYERS = 256  # layers a stack that cannot be extrapolated may have (tracing takes ~0.3 s per layer)
_INDEX_ATTR = re.compile(r"idx|index|^layer_(id|num|number)$")  # attributes that number a layer, not shape it
_identical_cache: dict[tuple, str | None] = {}


def layer_count(config) -> int | None:
    """The decoder (or encoder) stack's layer count of a one-stack model, or None (an encoder-decoder, a config
    with its text model nested, no count)."""
    if getattr(config, "is_encoder_decoder", False):
        return None
    n = getattr(config, "num_hidden_layers", None)
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _declared_layers(config) -> int:
    """The largest layer count anywhere in the config (nested sub-configs included)."""
    doc = config.to_dict()
    counts = [
        v
        for section in (doc, *(x for x in doc.values() if isinstance(x, dict)))
        for k, v in section.items()
        if k in _LAYER_KEYS and isinstance(v, int) and not isinstance(v, bool)
    ]
    return max(counts, default=0)


def truncated_config(config, depth: int):
    """A copy of `config` with its first `depth` layers (per-layer lists cut to `depth` entries)."""
    n = layer_count(config)
    out = copy.deepcopy(config)
    for key, v in list(vars(out).items()):
        if isinstance(v, list) and len(v) == n:
            setattr(out, key, v[:depth])
    out.num_hidden_layers = depth
    return out


def layer_signature(module) -> tuple:
    """What makes a layer the layer it is: per submodule, its class, its parameters' and buffers' names, shapes
    and dtypes, and its plain attributes (numbers, strings, flags: a sliding window, `is_sliding`, an attention
    type), except the ones that number the layer (`layer_idx`)."""
    out = []
    for name, m in module.named_modules():
        attrs = tuple(
            sorted(
                (k, repr(v))
                for k, v in vars(m).items()
                if not k.startswith("_")
                and not _INDEX_ATTR.search(k)
                and isinstance(v, int | float | str | bool | tuple | type(None))
            )
        )
        tensors = tuple(
            (k, tuple(t.shape), str(t.dtype))
            for k, t in (*m.named_parameters(recurse=False), *m.named_buffers(recurse=False))
        )
        out.append((name, type(m).__name__, attrs, tensors))
    return tuple(out)


def _layer_list(model, n: int):
    """The one ModuleList of `n` layers in `model`, or None (none, or several)."""
    import torch

    lists = [m for _, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    return lists[0] if len(lists) == 1 else None


def why_not_identical(config) -> str | None:
    """None when the n layers of `config`'s model are identical (same per-layer config entries, same layer
    signature, and the rebuilds with 1 and 2 layers hold that layer); else why not, in a few words.

    The n-layer model is built on the meta device with weight initialisation off (its modules only: 4,096 small
    layers in about 10 s)."""
    n = layer_count(config)
    if n is None or n <= 2:
        return "not a single stack of more than 2 layers"
    for key, v in vars(config).items():
        if isinstance(v, list) and len(v) == n and len({repr(x) for x in v}) > 1:
            return f"its {key} differ by layer"
    with _no_init_weights():
        model = build_model(config)
    layers = _layer_list(model, n)
    if layers is None:
        return f"no single list of {n} layers in {type(model).__name__}"
    first = layer_signature(layers[0])
    if any(layer_signature(m) != first for m in layers):
        return "its layers differ (shapes or attributes)"
    del model, layers
    for depth in (1, 2):
        probe = _layer_list(build_model(truncated_config(config, depth)), depth)
        if probe is None or any(layer_signature(m) != first for m in probe):
            return f"its rebuild with {depth} layer{'s' if depth > 1 else ''} has different layers"
    return None


def _why_not_identical_cached(path: Path, config) -> str | None:
    """`why_not_identical`, once per file (a report's batch sweep loads the config once per batch)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _identical_cache:
        _identical_cache[key] = why_not_identical(config)
    return _identical_cache[key]


def _no_init_weights():
    """transformers' context that skips weight initialisation (meta tensors need none), where it has one."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:
        try:
            from transformers.modeling_utils import no_init_weights
        except ImportError:
            return contextlib.nullcontext()
    return no_init_weights()


def load_hf_config_symbolic(
    path: Path, specs: dict[str, InputSpec], half_casts: str | None = None
) -> tuple[LoadedModel, dict[str, int]]:
    """The model a transformers `config.json` describes (a model directory: its `config.json`), exported once with
    its batch symbolic and, for text models, its sequence length ("seq"; where torch.export keeps it symbolic,
    else the batch alone, said in a warning): `analyzer.frontends.load_symbolic_file`'s contract. `--input` gives
    the sequence length (input_ids:BxS; its batch is the symbol's); the values are the symbols' at that input, the
    batch 2 (torch specialises 1). Every layer is traced (no extrapolation from two): a stack of more than
    `MAX_FULL_LAYERS` layers is refused, as the concrete route refuses one it cannot extrapolate."""
    cfg = config_path(path)
    if cfg is None:
        raise UsageError(f"{path}: not a transformers config.json")
    config = read_config(cfg)
    declared = _declared_layers(config)
    if declared > MAX_FULL_LAYERS:
        raise AnalysisError(
            f"{cfg}: a stack of {declared:,} layers; a symbolic export traces every layer, at most {MAX_FULL_LAYERS} "
            "(analyse it at each batch: `preflight report --batches`)"
        )
    model = build_model(config)
    name = getattr(model, "main_input_name", "input_ids")
    attempts = [{0: "batch", 1: "seq"}, {0: "batch"}] if name == "input_ids" else [{0: "batch"}]
    why = None
    for axes in attempts:
        try:
            loaded = _load_model(model, config, cfg, specs, 2, symbol_axes=[axes], half_casts=half_casts)
        except AnalysisError as exc:
            if axes is attempts[-1]:
                raise
            why = one_line(str(exc))
            continue
        break
    values = {"batch": 2}
    if "seq" in {user for user, _, _ in loaded.symbols.values()}:
        values["seq"] = int(specs[name].shape[1])  # the --input the trace took (the config route requires it)
    elif name == "input_ids":
        why = why or "torch.export specialises a length of 1"
        loaded.warnings.append(f"the sequence length could not stay symbolic ({why}): formulas of the batch only")
    return loaded, values


def _load_model(
    model, config, path: Path, specs: dict[str, InputSpec], batch: int | None, symbol_axes=None, half_casts=None
) -> LoadedModel:
    """Trace `model` (built from `config`) with its main input: input_ids (batch x sequence) or pixel_values;
    `symbol_axes` and `half_casts` as `torch_frontend.from_module` takes them (a symbolic export; the half dtype the
    model will be costed in)."""
    import inspect

    import torch

    from zoo._hf import HFWrapper

    from .torch_frontend import from_module

    if "decoder_input_ids" in inspect.signature(model.forward).parameters:
        raise UsageError(
            f"{path}: {type(model).__name__} is an encoder-decoder model (its forward takes decoder_input_ids); the "
            "config route traces one stack: name its encoder class in `architectures` (e.g. T5EncoderModel), or "
            "export the model yourself (torch.export .pt2 or ONNX) with both inputs"
        )
    name = getattr(model, "main_input_name", "input_ids")
    if name == "input_ids":
        file_dims: list = [None, None]
    elif name == "pixel_values":
        size = getattr(config, "image_size", None)
        h, w = (size, size) if isinstance(size, int) else tuple(size or (None, None))
        file_dims = [None, getattr(config, "num_channels", 3), h, w]
    else:
        raise UsageError(f"{path}: the model's input is {name!r}; the config route reads text and image models")
    unknown = set(specs) - {name}
    if unknown:
        raise UsageError(f"--input names {', '.join(sorted(unknown))} not among the model's inputs: {name}")
    spec = specs.get(name)
    shape = resolve_shape(name, file_dims, spec, batch, path.name)
    allowed = ("int64", "int32") if name == "input_ids" else ("float32",)
    dtype = spec.dtype if spec is not None and spec.dtype is not None else allowed[0]
    if dtype not in allowed:
        hint = "" if name == "input_ids" else " (--dtype float16 or bfloat16 analyses the model in that dtype)"
        raise UsageError(f"input '{name}' of {path} is {' or '.join(allowed)}, not {dtype}{hint}")
    example = torch.zeros(shape, dtype=getattr(torch, dtype), device="meta")
    # `use_cache=False` wherever the forward takes it: a decoder without its head (LlamaModel) builds a key/value
    # cache by default too, which one forward does not need (and whose first update concatenates an empty tensor)
    takes_cache = "use_cache" in inspect.signature(model.forward).parameters
    wrapper = HFWrapper(model, name, decoder=is_causal_lm(model) or takes_cache)
    try:
        loaded = from_module(
            wrapper,
            (example,),
            name=f"{config.model_type}:{type(model).__name__}",
            framework=FRAMEWORK,
            source=str(path),
            input_names=(name,),
            symbol_axes=symbol_axes,
            half_casts=half_casts,
        )
    except AnalysisError as exc:
        why = _export_hint(config, name, shape)
        if why is None:
            raise
        raise UsageError(f"{path}: {why} ({exc})") from exc
    pooler = getattr(model, "pooler", None)
    if isinstance(pooler, torch.nn.Module):  # BertModel & co.: the pooler makes the second output
        loaded.warnings.append(
            f"{type(model).__name__}'s pooler ({type(pooler).__name__}) is not in the graph: the config route "
            "traces the model's first output (the last hidden state), as a feature extractor runs it"
        )
    return loaded


def _export_hint(config, name: str, shape: Sequence[int]) -> str | None:
    """What in the config or the input most likely made the export of its model fail, or None."""
    positions = getattr(config, "max_position_embeddings", None)
    if name == "input_ids" and isinstance(positions, int) and len(shape) > 1 and shape[1] > positions:
        return (
            f"input_ids has {shape[1]:,} tokens, more than the config's max_position_embeddings = {positions:,}: "
            f"give at most that many (--input input_ids:{shape[0]}x{positions})"
        )
    hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
    explicit = getattr(config, "head_dim", None)
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 and hidden % heads and not explicit:
        return (
            f"hidden_size = {hidden:,} is not a multiple of num_attention_heads = {heads:,} and the config sets no "
            "head_dim: the model's attention cannot split its hidden size into heads"
        )
    return None
