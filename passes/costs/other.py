"""Resize and sampling, plus the ops that cost nothing on purpose and those not costed at all."""

from __future__ import annotations

from ..graph import TensorInfo
from .registry import Cost, ignore, per_input_element, per_output_element, register, unsupported

# Interpolation: NB nearest copies (0 FLOPs); linear blends 2^d neighbours with 2^d multiplies
# and 2^d - 1 adds (bilinear 7, trilinear 15, linear 3); cubic blends 4^d (bicubic 31).
_INTERP_FLOPS = {"nearest_neighbor": {1: 0, 2: 0, 3: 0}, "linear": {1: 3, 2: 7, 3: 15}, "cubic": {1: 7, 2: 31, 3: 127}}


def _resize(spatial_dims: int):
    def rule(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
        method = str(attrs.get("method", "linear"))
        per = _INTERP_FLOPS.get(method, _INTERP_FLOPS["linear"])[spatial_dims]
        return Cost(flops=per * outputs[0].numel)

    rule.__doc__ = f"{spatial_dims}-D resize: 0 (nearest), 2^d multiplies + 2^d - 1 adds (linear) per output."
    return rule


register("relax.image.resize2d", category="data_movement")(_resize(2))
register("relax.image.resize3d", category="data_movement")(_resize(3))
register("relax.image.grid_sample", category="other")(per_output_element(7))
register("relax.image.affine_grid", category="other")(per_output_element(4))
register("relax.bucketize", category="other")(per_output_element(8))
register("relax.nn.cross_entropy_with_logits", category="other")(per_input_element(5))  # log-softmax + pick


@register("relax.nn.nll_loss", category="other")
def _nll_loss(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """1 FLOP per target element (pick, weight and reduce)."""
    return Cost(flops=inputs[1].numel if len(inputs) > 1 else outputs[0].numel)


ignore(
    "shape queries, markers, allocations and runtime bookkeeping: no arithmetic, no tensor traffic",
    "relax.shape_of",
    "relax.null_value",
    "relax.print",
    "relax.assert_op",
    "relax.hint_on_device",
    "relax.to_vdevice",
    "relax.builtin.stop_lift_params",
    "relax.size",
    "relax.shape_to_tensor",
    "relax.tensor_to_shape",
    "relax.memory.alloc_storage",
    "relax.memory.alloc_tensor",
    "relax.memory.kill_storage",
    "relax.memory.kill_tensor",
    "relax.memory.view",
    "relax.memory.ensure_zero_offset",
    "relax.vm.alloc_storage",
    "relax.vm.alloc_tensor",
    "relax.vm.kill_object",
    "relax.builtin.alloc_tensor",
    "relax.grad.start_checkpoint",
    "relax.grad.end_checkpoint",
    "relax.grad.no_grad",
    "relax.dist.annotate_sharding",
    "relax.inspect.tensor_dtype_bits",
    "relax.inspect.tensor_dtype_code",
    "relax.inspect.tensor_dtype_lanes",
    "relax.inspect.tensor_byte_offset",
    "relax.inspect.tensor_elem_offset",
    "relax.inspect.tensor_ndim",
    "relax.inspect.tensor_shape_i",
    "relax.inspect.tensor_stride_i",
    "relax.make_closure",
)

unsupported(
    "data-dependent output size or detection post-processing: cost depends on the data",
    "relax.nonzero",
    "relax.unique",
    "relax.multinomial_from_uniform",
    "relax.nn.attention_var_len",
)
unsupported(
    "collective communication and distributed ops: cost is network traffic, not modelled",
    "relax.ccl.allgather",
    "relax.ccl.allreduce",
    "relax.ccl.broadcast_from_worker0",
    "relax.ccl.scatter_from_worker0",
    "relax.dist.redistribute",
    "relax.dist.redistribute_replica_to_shard",
)
unsupported(
    "training-only gradient ops: preflight models inference",
    "relax.grad.avg_pool2d_backward",
    "relax.grad.max_pool2d_backward",
    "relax.grad.nll_loss_backward",
    "relax.grad.take_backward",
)
unsupported(
    "opaque calls into code preflight cannot see (packed functions, closures, Python)",
    "relax.call_dps_packed",
    "relax.call_pure_packed",
    "relax.call_inplace_packed",
    "relax.call_builtin_with_ctx",
    "relax.invoke_closure",
    "relax.invoke_pure_closure",
    "relax.call_py_func",
    "relax.vm.call_tir_dyn",
    "relax.call_closure",
)
