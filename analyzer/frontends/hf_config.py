"""A transformers `config.json` on its own: the model it describes, built on the meta device.

No weights are read (there are none), nothing is fetched (the hub is never called: the config class comes from
transformers' own table of model types) and no code from the model's files is run: a config naming custom code
(`auto_map`, `trust_remote_code`) is refused. The model class is the config's `architectures[0]` when
transformers ships it, else its causal-LM class, else its base model; it is wrapped to take its main input
(`input_ids` or `pixel_values`) and return its first output, as the zoo wraps its transformers models.
"""

from __future__ import annotations

import json
import os
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
        raise UnreadableModelError(f"{path}: transformers rejects the config: {one_line(exc)}") from exc


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


def load_hf_config(path: Path, specs: dict[str, InputSpec], batch: int | None) -> LoadedModel:
    """Analyse the model a transformers `config.json` describes: input_ids (batch x sequence) or pixel_values."""
    import torch

    from zoo._hf import HFWrapper

    from .torch_frontend import from_module

    config = read_config(path)
    model = build_model(config)
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
    wrapper = HFWrapper(model, name, decoder=is_causal_lm(model))
    loaded = from_module(
        wrapper,
        (example,),
        name=f"{config.model_type}:{type(model).__name__}",
        framework=FRAMEWORK,
        source=str(path),
        input_names=(name,),
    )
    return loaded
