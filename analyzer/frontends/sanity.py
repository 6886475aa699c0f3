"""One sanity check of every model's shapes and window attributes, whatever its frontend.

A corrupt or hostile file can declare shapes no GPU runs (an input dimension of 2**40, a -1 left in a
flatbuffer) or windows that make no sense (negative padding, a zero stride); the importers pass them
through and the analysis would print absurd (even negative) FLOPs. `check_graph` runs on the extracted
graph of every analysis, so each frontend is covered by one rule; frontends check what their importer
would choke on before this point (see `onnx_frontend.check_nodes`, `tensorflow_frontend._check_shapes`,
`pt2_safety`).
"""

from __future__ import annotations

import math

from ..errors import UnreadableModelError
from .specs import MAX_DIM

MAX_ELEMENTS = 2**48  # elements of one tensor (1 PiB of float32): more is a corrupt shape, not a model
_AT_LEAST_ONE = ("strides", "dilation", "pool_size", "groups", "kernel_size")
_AT_LEAST_ZERO = ("padding", "output_padding")


def check_graph(graph, source: str) -> None:
    """Raise `UnreadableModelError` (exit 2) for a tensor or window attribute no real model has.

    Args:
        graph: the `passes.graph.OpGraph` of the model.
        source: the model's name for the message.

    Rules: inputs and weights have dimensions from 0 to `MAX_DIM` (2**31 - 1, the `--input` limit); every
    tensor has non-negative dimensions and at most `MAX_ELEMENTS` (2**48) elements; `padding` and
    `output_padding` are at least 0, `strides`, `dilation`, `pool_size`, `groups` at least 1, all at most
    `MAX_DIM`.
    """
    for s in graph.sources:
        _check_tensor(s.tensor.shape, f"{s.kind} '{s.name}'", source, MAX_DIM)
    for op in graph.ops:
        for i, t in enumerate(op.outputs):
            _check_tensor(t.shape, f"tensor '{op.name}'" + (f"[{i}]" if len(op.outputs) > 1 else ""), source, None)
        for key in _AT_LEAST_ONE + _AT_LEAST_ZERO:
            low = 1 if key in _AT_LEAST_ONE else 0
            for v in _ints(op.attrs.get(key)):
                if not low <= v <= MAX_DIM:
                    raise UnreadableModelError(
                        f"{source}: operator '{op.name}' ({op.op.removeprefix('relax.')}) has {key} {v:,} "
                        f"(from {low} to {MAX_DIM:,}); the model file is corrupt"
                    )


def _ints(value) -> list[int]:
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _check_tensor(shape: tuple[int, ...], what: str, source: str, max_dim: int | None) -> None:
    for i, d in enumerate(shape):
        if d < 0 or (max_dim is not None and d > max_dim):
            raise UnreadableModelError(
                f"{source}: {what} has dimension {i} of {d:,} (from 0 to {max_dim or MAX_ELEMENTS:,}); "
                f"the model file is corrupt"
            )
    n = math.prod(shape)
    if n > MAX_ELEMENTS:
        raise UnreadableModelError(
            f"{source}: {what} has {n:,} elements (shape {'x'.join(map(str, shape))}), more than 2**48; "
            f"the model file is corrupt or its dimensions are not ones a GPU runs"
        )
