"""Data movement: 0 FLOPs, but every byte read and written counts (docs/design.md).

Gathers and slices read only what they copy; the rest read their inputs and write their outputs.
"""

from __future__ import annotations

from ..graph import TensorInfo
from .registry import Cost, no_arithmetic, reads_output_sized, register

register(
    "relax.reshape",
    "relax.permute_dims",
    "relax.expand_dims",
    "relax.squeeze",
    "relax.flatten",
    "relax.nn.batch_flatten",
    "relax.concat",
    "relax.split",
    "relax.broadcast_to",
    "relax.tile",
    "relax.repeat",
    "relax.flip",
    "relax.layout_transform",
    "relax.astype",
    "relax.nn.pad",
    "relax.nn.pixel_shuffle",
    "relax.stack",
    "relax.tril",
    "relax.triu",
    "relax.nn.dropout",
    "relax.wrap_param",
    "relax.reverse_sequence",
    "relax.scatter_elements",
    "relax.scatter_nd",
    "relax.slice_scatter",
    "relax.index_put",
    category="data_movement",
)(no_arithmetic)

register(
    "relax.one_hot",
    "relax.meshgrid",
    category="data_movement",
)(no_arithmetic)

register(
    "relax.take",
    "relax.strided_slice",
    "relax.dynamic_strided_slice",
    "relax.gather_elements",
    "relax.gather_nd",
    "relax.index_tensor",
    category="data_movement",
)(reads_output_sized)


@register(
    "relax.full",
    "relax.full_like",
    "relax.zeros",
    "relax.zeros_like",
    "relax.ones",
    "relax.ones_like",
    "relax.eye",
    "relax.eye_like",
    "relax.arange",
    category="data_movement",
)
def _fill(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """0 FLOPs; writes its output, reads nothing but a fill value (a `*_like` input only lends its shape)."""
    return Cost(bytes_read=sum(t.nbytes for t in inputs if not t.shape))
