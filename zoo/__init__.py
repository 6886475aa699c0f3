"""Parameterised model zoo in plain torch and transformers (no TVM dependency).

Models are named by spec strings: ``"NAME"`` or ``"NAME?key=value&key2=value2"``,
where ``NAME`` is a variant (``"resnet50"``, ``"llama_7b"``) or a family
(``"resnet"``, meaning its defaults) and keys are the family's parameters
(``Family.params``), whose valid values each family declares (``Family.bounds``,
checked when a spec is resolved). All weights are random (seeded); ``transformers`` is only
imported when a Hugging Face based model is built, and ``device="meta"`` builds
without allocating weight memory.

Example:
    >>> from zoo import build
    >>> m = build("resnet18?resolution=64", batch=2)
    >>> m.module(*m.example_inputs).shape
    torch.Size([2, 1000])
"""

from zoo import (  # noqa: F401  (importing registers the families)
    cnn_classic,
    cnn_efficient,
    cnn_mobile,
    cnn_resnet,
    detection,
    forecasting,
    hf_language,
    hf_vision,
    randwire,
    recommendation,
    segmentation,
    seq2seq,
    sequence,
    speech,
)
from zoo.registry import (
    FAMILIES,
    Bounds,
    Expr,
    Family,
    ZooError,
    ZooModel,
    build,
    list_families,
    register,
    resolve,
)

__all__ = [
    "FAMILIES",
    "Bounds",
    "Expr",
    "Family",
    "ZooError",
    "ZooModel",
    "build",
    "list_families",
    "register",
    "resolve",
]
