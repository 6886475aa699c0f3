"""Helpers to wrap Hugging Face ``transformers`` models as single-tensor modules."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn


class HFWrapper(nn.Module):
    """Call a ``transformers`` model with one input and return one tensor.

    The wrapped model is called with ``return_dict=False`` (and
    ``use_cache=False`` for decoders) and the first output (logits or last
    hidden state) is returned, so the module is ``torch.export`` friendly.

    Args:
        model: The ``transformers`` model.
        input_name: Keyword of the single input (``"input_ids"`` or ``"pixel_values"``).
        decoder: Whether to pass ``use_cache=False``.
    """

    #: The attribute holding the user's model: preflight reports module paths below it (``encoder.layer.0``, as
    #: ``model.named_modules()`` names them), not ``model.encoder.layer.0``.
    preflight_wraps = "model"

    def __init__(self, model: nn.Module, input_name: str, decoder: bool = False) -> None:
        super().__init__()
        self.model = model
        self.input_name = input_name
        self.decoder = decoder

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kwargs: dict[str, Any] = {self.input_name: x, "return_dict": False}
        if self.decoder:
            kwargs["use_cache"] = False
        out = self.model(**kwargs)
        return out[0] if isinstance(out, (tuple, list)) else out


def hf_class(name: str) -> Any:
    """Return ``transformers.<name>``, importing ``transformers`` lazily.

    Args:
        name: Attribute name, e.g. ``"BertConfig"``.

    Returns:
        The class.
    """
    import transformers

    return getattr(transformers, name)


def hf_module(
    model_cls: str,
    config: Any,
    input_name: str,
    decoder: bool = False,
) -> nn.Module:
    """Instantiate ``transformers.<model_cls>(config)`` with random weights and wrap it.

    Args:
        model_cls: Name of a ``transformers`` model class.
        config: Its configuration object (built with ``attn_implementation=``).
        input_name: Keyword of the single model input.
        decoder: Whether the model is a decoder (``use_cache=False`` is passed).

    Returns:
        The wrapped model.
    """
    cls = hf_class(model_cls)
    try:
        model = cls(config)
    except ValueError as exc:
        # Older/newer transformers releases differ in which models support SDPA.
        if getattr(config, "_attn_implementation", None) != "sdpa":
            raise
        warnings.warn(f"{model_cls}: sdpa unsupported, using eager ({exc})", stacklevel=2)
        config._attn_implementation = "eager"
        model = cls(config)
    return HFWrapper(model, input_name, decoder)
