"""Kernel view: the kernels eager PyTorch launches on a CUDA GPU for a Relax graph.

A Relax graph is not what eager PyTorch runs. This pass maps the ops of an extracted graph
(`passes.graph.OpGraph` and its `passes.costs.OpCost` list) to the CUDA kernels eager PyTorch launches for
the same model, dtype and shapes, each with its FLOPs, bytes, dtype, kind and sizes (the `Kernel` record,
shared with the time model). Pure Python on plain data: `predictor/` may import it.

Rules (docs/execution-model.md explains them for users):

* **Views are free.** reshape, flatten, expand_dims, squeeze, permute_dims, broadcast_to, split,
  strided_slice (basic slicing), take of one index (`x[:, 0]`), and astype to the same dtype launch nothing:
  torch returns a view with new strides. The pass follows every tensor's strides as torch does, so it also
  knows when a view is *not* free:
  - a reshape whose strides torch cannot express as a view (`computeStride` fails, e.g. merging a transposed
    head axis back, `x.transpose(1, 2).reshape(B, S, H * D)` after an attention that wrote (B, H, S, D))
    copies: one "copy" kernel;
  - ops that call `.contiguous()` on their input (softmax, layer/group/RMS/batch norm, convolution, pooling)
    get a copy kernel first when the input is a non-contiguous view; convolution, batch norm and pooling take a
    channels-last input as it is where torch's `suggest_memory_format` does (`is_channels_last`: size-1 dims'
    strides included, so a batch-1 view of (1, H x W, C) tokens is copied);
  - a model's own `.contiguous()` of a view that is not contiguous, and its `.clone()` of anything, is a copy
    kernel (`OpNode.eager_copy`: TVM's importer passes both through); an in-place update of a clone runs in place;
  - a matmul folds its batch dimensions with `reshape` (copying when that is not a view) and cuBLAS reads
    each operand's last two dimensions transposed or not, but not other strides (otherwise a copy);
  - such a copy, made inside an op, is that op's temporary: another op reading the same view copies it again
    (three `linear`s of one transposed input: three copies, as torch's profiler shows), except inside one
    library call (cuDNN's RNN copies its input once for both directions);
  - pointwise ops read strided and broadcast (stride-0) operands directly and write in the layout of their
    first full-size operand (TensorIterator keeps a permuted layout).
* **Attention is one kernel** (kind "attention", FLOPs of its two matmuls, bytes of Q, K, V, the output and
  a real mask) when torch's CUDA dispatcher would pick a fused backend; see `sdpa_backend`. Recognised:
  `relax.nn.attention[_bias]` (what preflight's PyTorch import keeps `scaled_dot_product_attention` as), and
  decomposed patterns matmul(Q, K^T) -> [scale] -> [+ mask] -> softmax -> [fix-ups] -> matmul(P, V) with
  torch's SDPA signature (Q and K^T both pre-scaled, as torch's math decomposition and the ONNX exporter
  emit; or torch's `_safe_softmax` chain), and, with `attention_patterns="all"`, any such pattern (for
  graphs whose source does not say whether the model used SDPA: ONNX from other producers, TensorFlow,
  Paddle). Torch's ONNX exporters (TorchScript symbolic and dynamo/onnxscript alike) write SDPA as
  `MatMul(Mul(Q, sqrt(scale)), Mul(K^T, sqrt(scale)))`, a model's own attention scales once (the scores, or
  Q alone): `attention_patterns="torch-onnx"` fuses only the former, as eager torch would have. K and V
  expanded or repeated over heads (GQA) are read once per K/V head by the fused kernel. The math backend is
  the separate kernels.
* **Constant masks collapse**: ops that depend on no model input and only build an attention mask launch
  nothing (eager PyTorch passes `is_causal` or no mask); a mask counts as "real" (and its bytes as read)
  only when it depends on a model input.
* **Folded**: ops on weights alone (`OpCost.folded`) launch nothing (a transposed linear weight is a
  view in torch); ops that compute on weights alone (`weight_only`, not folded: a position-bias MLP over a constant
  table) are a kernel each, as eager PyTorch runs them on every forward.
* **Epilogues**: a matmul with a 2-D weight followed by the add of a bias vector is one gemm kernel (addmm,
  cuBLASLt bias epilogue) when the input is contiguous or 2-D (torch's `linear`; a non-contiguous 3-D input runs
  matmul, which folds it with a copy, then `add_(bias)`); a depthwise 2-D convolution and its bias add are one
  kernel (`_conv_depthwise2d`); other convolutions add their bias in a second kernel, as cuDNN convolutions do,
  and so does a depthwise one of a channels-last input (cuDNN takes every channels-last convolution).
* **Channels-last**: a convolution, batch norm or pooling of a channels-last input writes a channels-last output
  (cuDNN's `suggest_memory_format`), so a layer norm over channels (permute to NHWC) after it copies nothing.
* **Recurrent layers** (unrolled by the importers): per step one GEMM and one pointwise kernel (`recurrences`),
  the first step's GEMM too where the initial state is a constant (zeros: not folded); the input projection's bias
  add, the concat of the steps' outputs (and of a bidirectional layer's two directions), the flip of the reverse
  direction's sequence and the stacks of the final states are cuDNN's own work, no kernel (`recurrence_io`). Only
  inside an RNN library call (`nn.LSTM`/`nn.GRU`/`nn.RNN`, an
  ONNX LSTM/GRU/RNN node: `OpNode.library_call`); a Python loop of `nn.GRUCell`s runs op by op.
* **Activations TVM's importers spell out**: hardsigmoid (`add(x, 3) -> clip(0, 6) -> divide(6)`) and
  hardswish (that, times x) are one kernel ("fused:hardsigmoid", "fused:hardswish"), in every graph; so is torch's
  clamp with tensor bounds (`maximum(x, lo) -> minimum(hi) -> clip(-inf, inf)`, "fused:clamp"); so are ELU
  (`relu(x) + (-alpha) * relu(1 - exp(x))`, "fused:elu") and GLU (`a * sigmoid(b)`, a and b the two halves of
  one tensor as strided slices, "fused:glu"), which TVM's torch importer writes for `F.elu` and `F.glu`; in
  graphs not from torch.export also GLU as torch's ONNX exporters write it (`Split` in two, the first output
  times the sigmoid of the second).
* **Other exporters' spellings of one torch op** (graphs not from torch.export: `attention_patterns="all"` or
  `"torch-onnx"`).
  ONNX, TFLite and Paddle (through paddle2onnx) graphs write out what eager PyTorch runs as one kernel; each
  exact spelling is one "elementwise" kernel named after the torch op ("fused:gelu", ...), reading its input
  and writing its output once (its one-element constants are kernel arguments, not memory reads):
  - GELU: a chain x -> pointwise ops -> erf / tanh -> up to four ops combining the running value with a
    constant or x, that computes torch's GELU (erf or tanh form) at eight points to 1e-5 relative: torch's
    ONNX exporters (`mul(mul(x, 1 + erf(x / sqrt 2)), 0.5)`, onnxscript's `mul(x, mul(0.5, ...))`, the tanh
    forms with `x * x * x` or `pow(x, 3)`), TVM's TFLite GELU (`x * (0.5 + erf(x * sqrt 0.5) * 0.5)`). A
    constant off by 1e-4 does not match. GELU written in Python (`0.5 * x * (1 + tanh(...))`, Hugging Face's
    `gelu_new`) makes `0.5 * x` a tensor of its own, which no exporter's GELU does: it stays separate
    kernels, as eager PyTorch runs it;
  - SiLU `mul(x, sigmoid(x))` (the same x), torch's clamp as TVM's ONNX `Clip` (TIR `maximum` then
    `minimum` with one-element bounds), hardsigmoid as ONNX's `HardSigmoid` with torch's constants (alpha
    1/6, beta 0.5: `clip(add(mul(x, 1/6), 0.5), 0, 1)`, and hardswish as x times it), TFLite's hardswish
    (`mul(x, clip(add(x, 3), 0, 6)) / 6`), rsqrt as `divide(1, sqrt(x))`, ne as `logical_not(equal(a, b))`;
  - softplus as TVM's ONNX importer writes ONNX `Softplus` (`F.softplus` with beta 1, both exporters):
    `add(maximum(x, 0), log(add(1, exp(negative(abs(x))))))`, constants checked ("fused:softplus");
  - `baddbmm(c, a, b, beta=, alpha=)` on every route (`_View.blas_calls`): TVM's torch importer writes `matmul`, a
    multiply by alpha, a multiply of c by beta and an `add`, the ONNX exporters the same ops; eager runs one
    dispatch: c copied (broadcast) into the result where beta != 0, then one GEMM reading it back ("copy" and
    "gemm", one `Kernel.call`). The PyTorch routes and the dynamo exporter's files name the call
    (`OpNode.library_call`), the TorchScript exporter's spelling is recognised where both scales are written;
  - where that spelling is not taken as the call (a graph of another producer, a matmul that is not batched), a
    multiply by 1 of the TorchScript exporter's `add(mul(matmul(a, b), alpha), mul(c, beta))` (both multiplies
    written even where the scale is 1) is a view: it launches nothing (`_View.is_unit_scale`);
  - the index normalisation TVM's ONNX importer puts before a gather, `where(i < 0, i + n, i)` with n the
    gathered axis's size (checked), is part of the gather (no traffic of its own);
  - instance and group norm as TVM's ONNX importer writes `InstanceNormalization` (the TorchScript exporter's
    `nn.InstanceNorm*` and `nn.GroupNorm`): `(x - mean(x)) / sqrt(variance(x) + eps)` over the same axes,
    scaled and shifted by input-independent tensors, and for a group norm reshaped back to the layer's input
    shape (views, covered by no kernel) and scaled and shifted again by the layer's affine: one "norm" kernel
    ("fused:instance_norm", "fused:group_norm": torch's `native_batch_norm` / `native_group_norm`) reading x and
    the scale and shift tensors, writing the output. A scale or shift computed from a model input (AdaIN) stays
    a kernel of its own;
  - adaptive average pooling as torch's dynamo ONNX exporter writes it where the input size does not divide the
    output size (torch's decomposition: x permuted, one `GatherND` of every window with constant indices, permuted
    back, then `mean` over the window axes, or two `where`s zeroing what lies beyond shorter windows, each window
    element taken out by a constant index (views), summed by `add`s and divided by the constant window sizes): one
    "pooling" kernel named as the module route's (`relax.nn.adaptive_avg_pool2d`), reading x and writing the
    output once (`_View.adaptive_pool_group`); its FLOPs are the decomposition's (2 x 2 to 7 x 7 of (2, 8): 9,408,
    where the module route's pooling rule counts numel(in) + numel(out), 848), which does not change the time of
    a kernel this memory-bound (both routes predict it at 0.0166 ms on h100-80gb, `tests/test_routes.py`).
  A fused kernel's FLOPs are the sum of its Relax ops' FLOPs, so the kernel view partitions the Relax-op
  view's FLOPs (for the exporters' GELU spellings that is the GELU rule's 5 or 9 per element; where a
  spelling has other ops, such as `1 / sqrt`, it differs by a FLOP or two per element of a memory-bound
  kernel, which does not change its time).
* **Inference fast paths of torch.nn layers.** torch.export and the ONNX exporters record
  `nn.MultiheadAttention`'s Python path; eager torch (eval, no grad, no autocast) runs a batch-first
  self-attention as `_native_multi_head_attention` (in-projection GEMM, attention, out-projection GEMM, no
  copies) and `nn.TransformerEncoderLayer` as `_transformer_encoder_layer_fwd` (the first feed-forward GEMM and
  its ReLU/GELU as one `_addmm_activation`), and with attention weights asked for, `mm`,
  `_transform_bias_rescale_qkv`, bmm, softmax, bmm, a copy, `addmm`, `sum`, `div_`; see `_View.mha_fast_paths`,
  `_View.mha_weights_paths` and `_View.encoder_ffn`.
* **In-place updates of a view** (`x.view(...)[:, 1:] *= m`, Funnel's `positional_attn *= cls_mask`): torch.export
  functionalises them into the pointwise op on the view, then `slice_scatter`s back into the base (one per slice of
  the view chain) and the base's views taken again; eager runs the one pointwise kernel, in place. A `slice_scatter`
  whose source is a pointwise op of exactly the region it writes (the same base, the same view steps: reshapes,
  permutes and slices normalised), or a view of such a scatter's result, with no reader of the old values after the
  update, launches nothing, and its result is the base's memory (`_View.inplace_scatters`). Another scatter
  (`x[:, :k] = y`) is one copy into the region (`copy_`).
* **masked_fill** is one kernel: TVM's torch importer writes it `where(mask, full_like(x, v), x)`; the `full_like`
  (whose only reader is that `where`, its other branch the same x) launches nothing and is read as a scalar.
* **A vector norm** (`linalg_vector_norm`: `F.normalize`, `x.norm(dim=...)`) is one "reduction" kernel
  ("fused:vector_norm"): TVM's torch importer writes it `power(sum(power(abs(x), p)), 1 / p)` (`max`/`min` of
  `abs(x)` for p = +-inf), in every graph; its ONNX importer writes `ReduceL2` as `sqrt(sum(x * x))`, taken in
  graphs not from torch.export (in a PyTorch model that chain is three kernels, as eager runs it).
* **Autocast casts** (`passes.graph.with_autocast`, `attrs["autocast"]`) are kernels on every forward, also
  those of weights (which are otherwise constants).
* **Everything else** is one kernel per Relax op with the op's own FLOPs and bytes (`OpCost`), reads of
  broadcast views counted once; batch norm in eval mode and layer norm are one kernel each; a global average
  pool (adaptive average pooling to 1 x 1) is a "reduction" kernel (torch runs `mean` for it); a gather reads
  its indices as they arrive (int64), not as the importer's integer cast made them; ops with no tensor output
  (`shape_of`) launch nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from ._gc import gc_paused
from .costs import OpCost
from .costs.registry import GROUPED_MATMUL
from .graph import BLAS_CALL_OPS, OpGraph, OpNode, TensorInfo, dtype_bytes, is_blas_call

KERNEL_KINDS = (
    "gemm",
    "conv",
    "attention",
    "elementwise",
    "reduction",
    "softmax",
    "norm",
    "pooling",
    "copy",
    "other",
)
KERNEL_KINDS_VERSION = 1
# which decomposed attention patterns `kernel_view` fuses, by where the graph comes from (see `kernel_view`)
ATTENTION_PATTERNS = ("sdpa", "torch-onnx", "torch-onnx-fx", "all")

# What each op becomes in the view.
ROLES = ("kernel", "view", "copy", "fused", "folded")


@dataclass(frozen=True)
class Kernel:
    """One kernel eager PyTorch launches (the contract shared with the time model).

    Attributes:
        index: position in launch order.
        kind: one of `KERNEL_KINDS`.
        op: the Relax op it comes from ("fused:attention" for a recognised attention pattern, "copy:<op>"
            for the copy torch makes of a non-contiguous view before `<op>`).
        ops: indices (`OpCost.index`) of the Relax ops it covers (an attention covers its pattern).
        flops: FLOPs under preflight's convention (2 x MACs for gemm, conv and attention).
        bytes_read: bytes read from device memory.
        bytes_written: bytes written.
        dtype: compute dtype ("float32", "float16", ...).
        params: kind-specific sizes (plain ints, strs, bools, lists): gemm {"b", "m", "n", "k"}, and "bias": True
            where the bias add is fused into the GEMM (`aten::addmm`: cuBLASLt's bias epilogue);
            conv {"n", "c_in", "c_out", "out_spatial", "kernel", "groups", "stride"}; attention {"b", "h",
            "h_kv", "s", "t", "d", "dv", "causal", "masked", "backend"}; others {"numel"}, and "strided": True on a
            "copy:<op>" copy (it gathers a non-contiguous view: `predictor.kernel_model`'s `e_strided`).
        call: the library call it is launched inside (`OpNode.library_call` of every op it covers, e.g.
            "aten.lstm.input:lstm_1": cuDNN's kernels of one `_cudnn_rnn`); None: dispatched by eager PyTorch on
            its own. The time model charges one host dispatch per run of one call
            (`predictor.kernel_model.inside_calls`).
    """

    index: int
    kind: str
    op: str
    ops: tuple[int, ...]
    flops: int
    bytes_read: int
    bytes_written: int
    dtype: str
    params: dict = field(default_factory=dict, hash=False, compare=True)
    call: str | None = None

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "kind": self.kind,
            "op": self.op,
            "ops": list(self.ops),
            "flops": self.flops,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "dtype": self.dtype,
            "params": dict(self.params),
        }


@dataclass(frozen=True)
class Launches:
    """`count` launches of one kernel: a recurrence's per-step kernel as one row, which
    `predictor.kernel_model.kernel_arrays` costs as `count` launches. The attributes the time model reads are the
    kernel's; this is the only type whose launch count the time model multiplies by."""

    kernel: Kernel
    count: int  # launches, >= 1

    kind = property(lambda self: self.kernel.kind)
    op = property(lambda self: self.kernel.op)
    flops = property(lambda self: self.kernel.flops)
    bytes_read = property(lambda self: self.kernel.bytes_read)
    bytes_written = property(lambda self: self.kernel.bytes_written)
    dtype = property(lambda self: self.kernel.dtype)
    params = property(lambda self: self.kernel.params)
    call = property(lambda self: self.kernel.call)


@dataclass(frozen=True)
class KernelSummary:
    """Totals of the kernel view beside the Relax-op view.

    Attributes:
        relax_ops: ops of the Relax view (weight-only ops excluded, as in `Totals.op_count`).
        kernels: kernels launched.
        bytes_ops: bytes read + written by the Relax ops (`Totals.bytes_read + bytes_written`).
        bytes_kernels: bytes read + written by the kernels.
        flops_kernels: FLOPs of the kernels.
        by_kind: kernel count per kind.
        by_role: op count per role ("kernel", "view", "copy", "fused", "folded").
        attention: attention kernels per backend ("flash", "efficient", "math").
    """

    relax_ops: int
    kernels: int
    bytes_ops: int
    bytes_kernels: int
    flops_kernels: int
    by_kind: dict[str, int]
    by_role: dict[str, int]
    attention: dict[str, int]

    def to_json(self) -> dict:
        return {
            "relax_ops": self.relax_ops,
            "kernels": self.kernels,
            "bytes_ops": self.bytes_ops,
            "bytes_kernels": self.bytes_kernels,
            "flops_kernels": self.flops_kernels,
            "by_kind": dict(self.by_kind),
            "by_role": dict(self.by_role),
            "attention": dict(self.attention),
        }


@dataclass(frozen=True)
class KernelView:
    """The kernels of one graph, and which kernels each Relax op maps to.

    Attributes:
        kernels: in launch order.
        op_kernels: for each op index, the indices of the kernels that cover it (empty for a free view, a
            folded op); an op may map to a copy kernel and its own kernel.
        roles: for each op index, one of `ROLES`.
        summary: totals beside the Relax-op view.
        recomputed: indices of the kernels that depend on no model input but run on every eager forward (a
            computation on weights alone and what eager PyTorch computes from it: BEiT's relative-position
            table resized, concatenated, gathered and padded as an attention mask, in every layer).
        unrun: op indices of views eager PyTorch never makes (the Python path's reshapes of a mask that
            nn.MultiheadAttention's fast path passes as it is): the liveness allocates nothing for them.
        writes_into: (op index, operand position) of ops whose result eager writes over that operand's storage:
            the fast path without SDPA writes the attention's output over Q (`bmm_nn(q, qkt, v)`) and, without a
            mask, the probabilities over the scores (`_softmax_out` in place; a spelled-out attention's softmax).
    """

    kernels: tuple[Kernel, ...]
    op_kernels: tuple[tuple[int, ...], ...]
    roles: tuple[str, ...]
    summary: KernelSummary
    recomputed: tuple[int, ...] = ()
    unrun: tuple[int, ...] = ()
    writes_into: tuple[tuple[int, int], ...] = ()


# --------------------------------------------------------------------------------------------
# The attention backend rule
# --------------------------------------------------------------------------------------------


def sdpa_backend(dtype: str, d: int, dv: int, s: int, t: int, *, masked: bool, causal: bool) -> str:
    """The backend torch's `scaled_dot_product_attention` picks on an A100/H100/H200 (sm80-sm90).

    Restated from torch's CUDA dispatcher, aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
    (`select_sdp_backend`, default priority flash > memory-efficient > math, for 4-D inputs with a unit
    last-dimension stride):
    - flash: fp16/bf16 (`check_dtypes_flash_attention`), no mask (`check_for_attn_mask`), q, k, v head dims
      equal and <= 256 (`check_head_dim_size_flash`), `is_causal` only with equal query and key lengths
      (`check_flash_causal_non_square_seqlens`); grouped-query K/V allowed;
    - efficient: fp16/bf16/fp32, q and k head dims equal, q and v head dims multiples of 8 (16-bit) or 4
      (fp32) (`check_head_dim_size_mem_efficient`, `minimum_gemm_alignment`); masks allowed;
    - math otherwise (separate kernels).
    On sm90 with cuDNN > 9.15 torch tries cuDNN attention first; it is one fused kernel like flash.
    """
    half = dtype in ("float16", "bfloat16")
    if half and not masked and d == dv <= 256 and not (causal and s != t):
        return "flash"
    align = 8 if half else 4
    if dtype in ("float16", "bfloat16", "float32") and d % align == 0 and dv % align == 0:
        return "efficient"
    return "math"


# --------------------------------------------------------------------------------------------
# Strides (element units), as torch keeps them
# --------------------------------------------------------------------------------------------

Strides = tuple[int, ...]


def contiguous_strides(shape: tuple[int, ...]) -> Strides:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


def view_strides(shape: tuple[int, ...], strides: Strides, new_shape: tuple[int, ...]) -> Strides | None:
    """Strides of `new_shape` viewing memory laid out as (shape, strides), or None if torch must copy.

    The algorithm of torch's `computeStride` (aten/src/ATen/TensorUtils.cpp): dimensions are grouped into
    chunks that are contiguous with each other, and a view may only split or merge within a chunk.
    """
    if math.prod(shape) != math.prod(new_shape):
        return None
    if not shape:
        return (1,) * len(new_shape)
    if math.prod(shape) == 0:
        return contiguous_strides(new_shape)
    new = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = strides[-1]
    tensor_numel = view_numel = 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[d]
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new[view_d] = view_numel * chunk_base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_base = strides[d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(new)


def is_contiguous(shape: tuple[int, ...], strides: Strides) -> bool:
    expected = 1
    for d, s in zip(reversed(shape), reversed(strides), strict=True):
        if d != 1 and s != expected:
            return False
        expected *= d
    return True


# `OpNode.eager_copy` values of a model's `.clone()`: a copy whatever the layout (`passes.tvm_ir.eager_copy_of`)
_CLONES = frozenset({"clone", "clone_contiguous"})


def is_channels_last(shape: tuple[int, ...], strides: Strides) -> bool:
    """(N, C, *spatial) laid out as (N, *spatial, C) in memory (torch.channels_last; for 3-D, what a 1-D pool's
    `unsqueeze(2)` makes channels-last 2-D: `_CONTIGUOUS_3D` says which ops copy it instead), and so taken by torch's
    `suggest_memory_format`, which cuDNN convolution, batch norm and pooling follow (`_strides_like_channels_last`)."""
    if len(shape) < 3:
        return False
    expected = 1
    for i in [1, *range(len(shape) - 1, 1, -1), 0]:
        if shape[i] != 1 and strides[i] != expected:
            return False
        expected *= shape[i]
    if len(shape) == 3:  # the 2-D kernel's view: `unsqueeze(2)` gives the new dim the stride size x stride of dim 2
        shape, strides = (*shape[:2], 1, shape[2]), (*strides[:2], shape[2] * strides[2], strides[2])
    return _strides_like_channels_last(shape, strides)


def _strides_like_channels_last(shape: tuple[int, ...], strides: Strides) -> bool:
    """torch's `is_channels_last_strides_2d_s4` / `_3d_s5` (c10/core/MemoryFormat.h), size-1 dims' strides included:
    a dense channels-last layout can still answer no, as a batch-1 view of a (1, H x W, C) tensor does, whose batch
    stride `computeStride` makes C (`view_strides`); torch then suggests the contiguous format and copies the input."""
    if len(shape) not in (4, 5) or strides[1] == 0:
        return False
    least = 0
    for d in [1, *range(len(shape) - 1, 1, -1), 0]:
        if shape[d] == 0 or strides[d] < least or (d == 0 and least == strides[1]):
            return False
        least = strides[d] * (shape[d] if shape[d] > 1 else 1)
    return True


def _dense_order(shape: tuple[int, ...], strides: Strides) -> list[int] | None:
    """The dimension order (outermost first) if (shape, strides) is a permuted contiguous layout, else None."""
    order = sorted(range(len(shape)), key=lambda i: (-strides[i], -i))
    expected = 1
    for i in reversed(order):
        if shape[i] == 1:
            continue
        if strides[i] != expected:
            return None
        expected *= shape[i]
    return order


def _permuted_contiguous(shape: tuple[int, ...], order: list[int]) -> Strides:
    out = [0] * len(shape)
    acc = 1
    for i in reversed(order):
        out[i] = acc
        acc *= max(shape[i], 1)
    return tuple(out)


def unique_elements(shape: tuple[int, ...], strides: Strides) -> int:
    """Elements of memory a view covers: broadcast (stride-0) dimensions are read once."""
    if 0 in shape:
        return 0
    return math.prod(d for d, s in zip(shape, strides, strict=True) if s != 0)


def _cublas_ok(shape: tuple[int, ...], strides: Strides) -> bool:
    """cuBLAS reads a matrix (last two dims) row- or column-major with any leading dimension >= its size."""
    if len(shape) < 2:
        return True
    r, c = shape[-2], shape[-1]
    sr, sc = strides[-2], strides[-1]
    if r == 1 or c == 1:
        return True
    return (sc == 1 and sr >= c) or (sr == 1 and sc >= r)


# --------------------------------------------------------------------------------------------
# Op vocabularies
# --------------------------------------------------------------------------------------------

_RESHAPES = {"relax.reshape", "relax.flatten", "relax.nn.batch_flatten"}
_VIEW_OPS = _RESHAPES | {
    "relax.permute_dims",
    "relax.expand_dims",
    "relax.squeeze",
    "relax.broadcast_to",
    "relax.strided_slice",
    "relax.split",
    "relax.nn.dropout",
    "relax.wrap_param",
}
# Ops that make their input contiguous first (`.contiguous()` in their CUDA implementation).
_NEED_CONTIGUOUS = {
    "relax.nn.softmax",
    "relax.nn.log_softmax",
    "relax.nn.layer_norm",
    "relax.nn.group_norm",
    "relax.nn.instance_norm",
    "relax.nn.rms_norm",
}
# Ops that take either memory format (`.contiguous(suggest_memory_format())`: cuDNN convolution and batch
# norm, pooling): they copy only an input that is neither contiguous nor channels-last.
_NEED_DENSE_NCHW_OR_NHWC = {
    "relax.nn.batch_norm",
    "relax.nn.conv1d",
    "relax.nn.conv2d",
    "relax.nn.conv3d",
    "relax.nn.conv1d_transpose",
    "relax.nn.conv2d_transpose",
    "relax.nn.conv3d_transpose",
    "relax.nn.max_pool1d",
    "relax.nn.max_pool2d",
    "relax.nn.max_pool3d",
    "relax.nn.avg_pool1d",
    "relax.nn.avg_pool2d",
    "relax.nn.avg_pool3d",
}
#: Ops of `_NEED_DENSE_NCHW_OR_NHWC` that take a 3-D (N, C, L) input only contiguous: `_convolution` makes a 3-D input
#: contiguous before viewing it as 2-D ("avoid accidentally going through NHWC for permuted 3d input",
#: Convolution.cpp) and cuDNN batch norm copies its input to `suggest_memory_format()`, contiguous for 3-D; so a
#: transposed (N, L, C) -> (N, C, L) input of a Conv1d or a BatchNorm1d is copied by each. (A 1-D pool runs the 2-D
#: pool on `unsqueeze(2)`, channels-last for that input: no copy.)
_CONTIGUOUS_3D = {"relax.nn.conv1d", "relax.nn.conv1d_transpose", "relax.nn.batch_norm"}
_GATHER_OPS = {"relax.take", "relax.gather_elements", "relax.gather_nd", "relax.index_tensor"}
_MAX_POOLS = {"relax.nn.max_pool1d", "relax.nn.max_pool2d", "relax.nn.max_pool3d"}
#: Data-movement ops on weights that launch a kernel when eager PyTorch runs them on a value it recomputes every
#: forward (`_View.live`): torch.cat and advanced indexing (never views).
_LIVE_COPIES = {"relax.concat", *_GATHER_OPS}
_CONVS = {"relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d"}
ATTENTION_OPS = frozenset({"relax.nn.attention", "relax.nn.attention_bias"})  # (B, S, H, D) in and out
_SCALE_OPS = {"relax.multiply", "relax.divide"}
_FILLS = {
    "relax.full",
    "relax.full_like",
    "relax.zeros",
    "relax.zeros_like",
    "relax.ones",
    "relax.ones_like",
    "relax.arange",
    "relax.eye",
    "relax.eye_like",
}
_CASTS = {"relax.astype", "relax.tril", "relax.triu", "relax.one_hot"}
_COMPARISONS = {"relax.less", "relax.less_equal", "relax.greater", "relax.greater_equal"}
# Pointwise ops the exporter-spelling matcher can evaluate on numbers (to check a chain is exactly GELU).
_EVAL_UNARY = {
    "relax.erf": math.erf,
    "relax.tanh": math.tanh,
    "relax.sqrt": math.sqrt,
    "relax.negative": lambda a: -a,
}
_EVAL_BINARY = {
    "relax.add": lambda a, b: a + b,
    "relax.subtract": lambda a, b: a - b,
    "relax.multiply": lambda a, b: a * b,
    "relax.divide": lambda a, b: a / b,
    "relax.power": lambda a, b: a**b,
}
_GELU_REFERENCE = {  # torch.nn.functional.gelu, approximate="none" (erf) and "tanh"
    "relax.erf": lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))),
    "relax.tanh": lambda x: 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
}
# Where the reference is compared: the negative side is where a wrong constant shows most (relative error).
_GELU_POINTS = (-3.0, -2.0, -1.25, -0.5, 0.25, 0.75, 1.5, 2.5)
_GELU_RTOL = 1e-5  # float32 constants (1/sqrt(2), 0.044715, ...) are within 6e-8; a constant 1e-4 off is not
_POINTWISE_CATEGORIES = {"elementwise"}


# View ops whose steps `_Alias` follows (a strided_slice with the bounds `passes.tvm_ir` records as attributes).
_ALIAS_VIEWS = _RESHAPES | {"relax.permute_dims", "relax.expand_dims", "relax.squeeze", "relax.strided_slice"}


@dataclass(frozen=True)
class _Alias:
    """Which memory a value is, as views see it: `root` (a value id) as the op `write` left it (-1: as produced; else
    the index of the pointwise op that updated part of it in place), seen through `steps` (normalised view steps:
    ("reshape", shape), ("permute", axes, shape), ("slice", axis, begin, end, step, shape); each ends with its output
    shape). `ops`: the view ops (and scatters) of the chain, each of which must be a view for the alias to hold."""

    root: int
    write: int
    steps: tuple
    ops: frozenset[int]


def _alias_push(steps: tuple, root_shape: tuple[int, ...], step: tuple) -> tuple:
    """`steps` followed by `step`, normalised: consecutive reshapes merge, consecutive permutes compose, and a step
    that changes nothing (a reshape to the same shape, the identity permute, a full unit-step slice) is dropped."""
    kind, out = step[0], step[-1]
    if steps and steps[-1][0] == kind == "reshape":
        steps = steps[:-1]
    elif steps and steps[-1][0] == kind == "permute":
        q = steps[-1][1]
        steps, step = steps[:-1], ("permute", tuple(q[a] for a in step[1]), out)
    before = steps[-1][-1] if steps else root_shape
    if kind == "reshape" and out == before:
        return steps
    if kind == "permute" and step[1] == tuple(range(len(step[1]))):
        return steps
    if kind == "slice" and step[2] == 0 and step[3] == before[step[1]] and step[4] == 1:
        return steps
    return (*steps, step)


def _slice_step(shape: tuple[int, ...], axis: int, begin: int, end: int, step: int) -> tuple | None:
    """One ("slice", ...) step of `shape` with torch's bounds normalised (negative from the end, clamped); None for
    a step torch's basic slicing does not take (< 1)."""
    if step < 1 or not -len(shape) <= axis < len(shape):
        return None
    axis %= len(shape)
    dim = shape[axis]
    b, e = (min(max(v + dim if v < 0 else v, 0), dim) for v in (begin, end))
    e = max(e, b)
    out = (*shape[:axis], -(-(e - b) // step), *shape[axis + 1 :])
    return ("slice", axis, b, e, step, out)


@dataclass(frozen=True)
class EinsumPlan:
    """How `torch.einsum` runs a two-operand einsum as one `bmm` (aten/src/ATen/native/Linear.cpp,
    `sumproduct_pair`): the labels are ordered output first, then the contracted ones (A-Z before a-z); each in
    both operands and the output is a batch dim (lro), in the left operand only a row dim (lo), in the right only a
    column dim (ro), in both and not the output a contracted dim. The left operand is permuted to (lro, lo, sum)
    and reshaped to 3-D, the right to (lro, sum, ro): a copy where that reshape is no view. The result is the bmm's
    (lro, lo, ro) memory permuted to the output's order (a view).

    Attributes:
        left, right: the operand's dimension order (indices into its shape) before the 3-D reshape.
        left_shape, right_shape: the 3-D shapes (lro, lo, sum) and (lro, sum, ro), elements.
        out_order: the output's dimensions outermost first in memory.
        b, m, n, k: the bmm's sizes (lro, lo, ro, sum).
    """

    left: tuple[int, ...]
    right: tuple[int, ...]
    left_shape: tuple[int, int, int]
    right_shape: tuple[int, int, int]
    out_order: tuple[int, ...]
    b: int
    m: int
    n: int
    k: int


def einsum_plan(subscripts: str, shapes: list[tuple[int, ...]]) -> EinsumPlan | None:
    """`EinsumPlan` of a two-operand einsum `subscripts` ("bind,bjnd->bnij") on operands of `shapes`; None for
    what it does not model (one or three operands, an ellipsis, a repeated label, a label summed in one operand
    only, no contracted label: torch runs `sum` or `mul` there)."""
    eq = subscripts.replace(" ", "")
    if "." in eq:
        return None
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if (
        len(terms) != 2
        or len(shapes) != 2
        or any(len(t) != len(s) or len(set(t)) != len(t) for t, s in zip(terms, shapes, strict=False))
    ):
        return None
    if not arrow:
        out = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    (lt, rt), (ls, rs) = terms, shapes
    lsize = {c: int(d) for c, d in zip(lt, ls, strict=True)}
    rsize = {c: int(d) for c, d in zip(rt, rs, strict=True)}
    full = list(out) + sorted(set(lt + rt) - set(out))
    lro, lo, ro, sums = [], [], [], []
    for c in full:
        sl, sr = lsize.get(c, 1) != 1, rsize.get(c, 1) != 1
        if c not in out:
            if sl != sr:
                return None  # torch sums it out of one operand first (a reduction kernel)
            if sl:
                sums.append(c)
        elif sl and sr:
            lro.append(c)
        elif sl:
            lo.append(c)
        else:
            ro.append(c)
    if not sums:
        return None

    def prod(labels, sizes):
        return math.prod(sizes.get(c, 1) for c in labels)

    b, m, n, k = prod(lro, lsize), prod(lo, lsize), prod(ro, rsize), prod(sums, lsize)
    return EinsumPlan(
        left=tuple(lt.index(c) for c in lro + lo + sums + ro if c in lt),
        right=tuple(rt.index(c) for c in lro + sums + ro + lo if c in rt),
        left_shape=(b, m, k),
        right_shape=(b, k, n),
        out_order=tuple(out.index(c) for c in lro + lo + ro if c in out),
        b=b,
        m=m,
        n=n,
        k=k,
    )


def _kind(cost: OpCost) -> str:
    op, category = cost.op, cost.category
    if op in ("relax.nn.softmax", "relax.nn.log_softmax") or (
        op.startswith("relax.call_tir") and "softmax" in (cost.callee or "")
    ):
        return "softmax"
    if category == "normalization":
        return "norm"
    if op in _FILLS or op in _CASTS:
        return "elementwise"
    return {
        "matmul": "gemm",
        "conv": "conv",
        "attention": "attention",
        "elementwise": "elementwise",
        "reduction": "reduction",
        "pooling": "pooling",
        "data_movement": "copy",
    }.get(category, "other")


# --------------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------------


@dataclass
class _Attention:
    """A recognised attention: the ops it covers, its operands (value ids) and sizes."""

    anchor: int  # op index where the kernel is launched (the last op of the pattern)
    covered: set[int]
    mask: int | None
    out_value: int
    b: int
    h: int
    h_kv: int
    s: int
    t: int
    d: int
    dv: int
    causal: bool
    bshd: bool  # q, k, v and the output are (B, S, H, D) (relax.nn.attention) rather than (B, H, S, D)
    dtype: str


def _row_params(numel: int, per_row: int) -> dict | None:
    """A group norm kernel's params: its elements and its (sample, group) rows, each of `per_row` elements, which
    torch reduces one per thread block (`predictor.kernel_model.row_floor_s`); None where `per_row` does not divide
    the tensor."""
    return {"numel": numel, "rows": numel // per_row} if per_row > 0 and numel % per_row == 0 else None


class _View:
    def __init__(self, graph: OpGraph, ops: list[OpCost], attention_patterns: str):
        self.graph, self.costs = graph, ops
        self.any_attention = attention_patterns == "all"  # fuse every matmul-softmax-matmul, not only SDPA's
        self.exporter_spelled = attention_patterns in ("all", "torch-onnx", "torch-onnx-fx")  # GELU, SiLU, ... spelled
        # an ONNX file of torch's TorchScript exporter: its baddbmm is recognised by its spelling (`exported_baddbmms`);
        # the dynamo exporter's files name their baddbmm nodes (`OpNode.library_call`)
        self.torchscript_onnx = attention_patterns == "torch-onnx"
        self._einsum_plans: dict[int, EinsumPlan | None] = {}  # op index -> `einsum_plan` (one per einsum op)
        self.node = graph.ops
        self.outputs_of: dict[int, list[int]] = {}
        for vid, i in graph.value_producer.items():
            self.outputs_of.setdefault(i, []).append(vid)
        for vids in self.outputs_of.values():
            vids.sort()
        self.producer = graph.value_producer
        self.consumers: dict[int, list[int]] = {}
        for op in self.node:
            for o in op.operands:
                self.consumers.setdefault(o.value, []).append(op.index)
        self.info: dict[int, TensorInfo] = {s.value: s.tensor for s in graph.sources}
        self.source = {s.value: s for s in graph.sources}
        for op in self.node:
            for vid, t in zip(self.outputs_of.get(op.index, []), op.outputs, strict=False):
                self.info[vid] = t
        self.graph_outputs = {vid for _, vid in graph.outputs}
        self.index_casts = self.find_index_casts()
        # values that depend on no model input (weights, constants, arange, and what is computed from them)
        self.indep: set[int] = {s.value for s in graph.sources if s.kind == "weight"}
        for op in self.node:
            if all(o.value in self.indep for o in op.operands):
                self.indep.update(self.outputs_of.get(op.index, []))
        # of those, the values eager PyTorch computes again on every forward: what a weight-only op that computes
        # (`weight_only`, not folded: BEiT's resize of its relative-position table) produces, and everything
        # computed from it (the concat and gather of that table that follow run every forward too)
        self.live: set[int] = set()
        self.recomputed_pads: set[int] = set()  # the efficient backend's padding of a `live` mask (kernel indices)
        # nn.MultiheadAttention fast paths that run `_native_multi_head_attention`'s branch without SDPA (its input's
        # last dimension not of stride 1, a head dim not a multiple of 8, SDPA's math backend, a mask):
        # attention op -> (the in-projection's bias add or None, the packed value)
        self.native_math: dict[int, tuple[int | None, int]] = {}
        # of those, the ones with a key padding or attention mask (`_masked_softmax`): attention op -> (the mask as
        # the module was given it (after `F._canonical_mask`), the bool mask's bytes the softmax reads)
        self.native_masks: dict[int, tuple[int, int]] = {}
        # the same branch where the fast path returns its weights: the Python path's add of the mask to the scores
        # -> (the mask as given, the bool mask's bytes, the softmax after it: `_masked_softmax`; `mha_weights_paths`)
        self.weight_masks: dict[int, tuple[int, int, int]] = {}
        self.unrun: set[int] = set()  # (`KernelView.unrun`)
        self.writes_into: list[tuple[int, int]] = []  # (`KernelView.writes_into`)
        # softmax ops of those fast paths whose weights the model drops: eager averages them all the same (sum,
        # div_; `average_attn_weights=True`, the default, assumed) -> heads
        self.dropped_weights: dict[int, int] = {}
        # in-projections of those fast paths whose (B, T, D) input torch copies to fold it for `mm` (not contiguous)
        self.fold_copies: set[int] = set()
        self.blas: dict[int, tuple] = {}  # a BLAS call's last op -> the call (`run`, `blas_calls`)
        self.call_of: dict[int, str | None] = {}  # an op's library call where `OpNode.library_call` is not it (`run`)
        for op in self.node:
            outs = self.outputs_of.get(op.index, [])
            if not outs or not all(v in self.indep for v in outs):
                continue
            if (op.weight_only and not op.folded) or any(o.value in self.live for o in op.operands):
                self.live.update(outs)

    # -- helpers ----------------------------------------------------------------------------
    def find_index_casts(self) -> set[int]:
        """Integer astype ops whose result is only ever used (through reshapes) as gather/take indices."""
        out: set[int] = set()
        for op in self.node:
            if op.op != "relax.astype" or not op.operands:
                continue
            src, dst = op.operands[0].tensor.dtype, op.output.dtype
            if not (src.startswith(("int", "uint")) and dst.startswith(("int", "uint"))):
                continue
            stack, ok = list(self.outputs_of.get(op.index, [])), True
            while stack and ok:
                v = stack.pop()
                users = self.consumers.get(v, [])
                if not users or v in self.graph_outputs:
                    ok = False
                for c in users:
                    user = self.node[c]
                    if user.op in _RESHAPES or user.op in ("relax.expand_dims", "relax.squeeze"):
                        stack.extend(self.outputs_of.get(c, []))
                    elif not (user.op in _GATHER_OPS and all(o.value != v for o in user.operands[:1])):
                        ok = False
            if ok:
                out.add(op.index)
        return out

    def index_source(self, vid: int) -> int:
        """The tensor an index operand is before the integer casts and views TVM's importers put on it."""
        while (op := self.op_of(vid)) is not None and op.operands:
            if not (
                op.index in self.index_casts or op.op in _RESHAPES or op.op in ("relax.expand_dims", "relax.squeeze")
            ):
                break
            if self.info[op.operands[0].value].numel != self.info[vid].numel:
                break
            vid = op.operands[0].value
        return vid

    def feeds(self, op: OpNode, targets: set[int], depth: int = 4) -> bool:
        """Whether an op of `targets` reads `op`'s output within `depth` ops (the first step's recurrent GEMM:
        its bias add, then the step's gates)."""
        frontier = list(self.outputs_of.get(op.index, []))
        for _ in range(depth):
            users = {c for v in frontier for c in self.consumers.get(v, [])}
            if users & targets:
                return True
            frontier = [v for c in users for v in self.outputs_of.get(c, [])]
        return False

    def view_source(self, vid: int) -> int:
        """The value `vid` is a view of, through any chain of view ops (itself if it is no view)."""
        while (p := self.op_of(vid)) is not None and p.operands and self.is_view_op(p):
            vid = p.operands[0].value
        return vid

    def op_of(self, vid: int) -> OpNode | None:
        i = self.producer.get(vid)
        return None if i is None else self.node[i]

    def only_consumer(self, vid: int) -> int | None:
        users = set(self.consumers.get(vid, []))
        if len(users) != 1 or vid in self.graph_outputs:
            return None
        return next(iter(users))

    def is_scalar_const(self, vid: int) -> bool:
        return vid in self.indep and self.info[vid].numel == 1

    def const_values(self, vid: int, depth: int = 0) -> list[float] | None:
        """The values of a small constant tensor (at most 8 elements), flattened, or None if unknown.

        Known: one-element literals (`SourceValue.scalar`), a static shape turned into a tensor, and what
        take, astype and views make of them (how TVM's ONNX importer computes `data.shape[axis]`).
        """
        if vid not in self.indep or depth > 8 or self.info[vid].numel > 8:
            return None
        op = self.op_of(vid)
        if op is None:
            src = self.source.get(vid)
            return None if src is None or src.scalar is None else [src.scalar]
        if op.op == "relax.shape_to_tensor":
            shape = op.attrs.get("shape")
            return [float(d) for d in shape] if isinstance(shape, list) else None
        if not op.operands:
            return None
        first = self.const_values(op.operands[0].value, depth + 1)
        if first is None:
            return None
        if op.op == "relax.take" and len(op.operands) == 2 and op.operands[0].tensor.ndim == 1:
            idx = self.const_values(op.operands[1].value, depth + 1)
            if idx is None or any(not 0 <= int(i) < len(first) for i in idx):
                return None
            return [first[int(i)] for i in idx]
        if op.op == "relax.astype" or (op.op in _VIEW_OPS and len(op.operands) == 1):
            return first
        return None

    def scalar_value(self, vid: int) -> float | None:
        """The value of a one-element constant, or None."""
        vals = self.const_values(vid)
        return vals[0] if vals is not None and len(vals) == 1 and self.info[vid].numel == 1 else None

    def is_view_op(self, op: OpNode) -> bool:
        if op.op in _VIEW_OPS:
            return True
        if op.op == "relax.astype" and op.operands:
            # the same dtype; or an integer cast TVM's importers put before take/gather indices (torch's index
            # kernels read int64 directly)
            return op.operands[0].tensor.dtype == op.output.dtype or op.index in self.index_casts
        if op.op == "relax.take" and len(op.operands) == 2 and op.operands[1].tensor.ndim == 0:
            return op.operands[1].value in self.indep  # x[:, i] with a constant i: torch's select, a view
        return self.is_unit_scale(op)

    def is_unit_scale(self, op: OpNode) -> bool:
        """`baddbmm(c, a, b, beta=, alpha=)` as torch's TorchScript ONNX exporter writes it, in a graph not from
        torch.export: `add(mul(matmul(a, b), alpha), mul(c, beta))`, both scales written even where they are 1;
        eager torch passes alpha and beta to the one kernel, and TVM's torch importer writes the multiplies only
        where they are not 1. A `mul` by 1 of that form (read only by that `add`) launches nothing: a view of its
        input. A model's own `x * 1.0` (BART's `embed_scale` without scaling) is not of that form and stays the
        kernel eager runs."""
        if self._scale_of(op) != 1.0:
            return False
        add = self.only_consumer(self.outputs_of[op.index][0])
        if add is None or self.node[add].op != "relax.add" or len(self.node[add].operands) != 2:
            return False
        # (a parameter bias's `Mul(initializer, beta)` is folded by the exporter into an initializer; `mul(matmul,
        # 1) + constant` is what a model's own code can be too, so that stays a kernel: one more than eager's)
        pair = [self.op_of(o.value) for o in self.node[add].operands]
        if any(p is None or self._scale_of(p) is None for p in pair) or pair[0] is pair[1]:
            return False
        if any(self.only_consumer(self.outputs_of[p.index][0]) != add for p in pair):
            return False
        return any((m := self.op_of(p.operands[0].value)) is not None and m.op == "relax.matmul" for p in pair)

    def _scale_of(self, op: OpNode) -> float | None:
        """s of `multiply(x, s)` (x not a constant, s a one-element constant, x's shape and dtype out) in a graph
        not from torch.export, or None."""
        if not self.exporter_spelled or op.op != "relax.multiply" or len(op.operands) != 2:
            return None
        x, s = op.operands
        if x.value in self.indep or x.tensor.shape != op.output.shape or x.tensor.dtype != op.output.dtype:
            return None
        return self.scalar_value(s.value) if len(self.outputs_of.get(op.index, [])) == 1 else None

    # -- attention --------------------------------------------------------------------------
    def find_attention(self) -> list[_Attention]:
        found: list[_Attention] = []
        claimed: set[int] = set()
        for op in self.node:
            att = None
            if op.op in ATTENTION_OPS and len(op.operands) >= 3:
                att = self.fused_op(op)
            elif op.op == "relax.nn.softmax" and op.attrs.get("axis", -1) in (-1, op.output.ndim - 1):
                att = self.decomposed(op)
            if att is not None and not (att.covered & claimed):
                claimed |= att.covered
                found.append(att)
        return found

    def fused_op(self, op: OpNode) -> _Attention:
        q, k, v = (o.value for o in op.operands[:3])
        covered = {op.index}
        b, s, h, d = self.info[q].shape
        t, dv = self.info[k].shape[1], self.info[v].shape[-1]
        _, k_ratio = self.absorb_operand(k, covered)
        _, v_ratio = self.absorb_operand(v, covered)
        h_kv = self.kv_heads(self.info[k].shape[2], min(k_ratio, v_ratio))
        mask = op.operands[3].value if len(op.operands) > 3 else None
        causal = op.attrs.get("causal_mask") not in (None, "", "None")
        mask, causal = self.classify_mask(mask, causal)
        out = self.outputs_of[op.index][0]
        return _Attention(op.index, covered, mask, out, b, h, h_kv, s, t, d, dv, causal, True, op.output.dtype)

    @staticmethod
    def kv_heads(heads: int, ratio: int) -> int:
        """K/V heads read once each: `heads` as K arrives, divided by how many times it was repeated."""
        return heads // ratio if ratio > 1 and heads % ratio == 0 else heads

    def absorb_operand(self, vid: int, covered: set[int], allow_scale: bool = False) -> tuple[bool, int]:
        """Absorb the views (and GQA repeats, and one scale by a constant) an attention operand goes through.

        Walks up from `vid` while the producer is a view, a `repeat`/`tile`, or (with `allow_scale`) a
        multiply/divide by a constant scalar, and nothing outside the pattern reads its output.
        Returns (whether a scale was absorbed, how many times the operand repeats its smallest source:
        the GQA head ratio when K/V were expanded over heads).
        """
        numel = self.info[vid].numel
        smallest = numel
        scaled = False
        cur = vid
        while True:
            op = self.op_of(cur)
            if op is None or not op.operands:
                break
            outs = self.outputs_of.get(op.index, [])
            if any(v in self.graph_outputs or not set(self.consumers.get(v, [])) <= covered for v in outs):
                break
            if self.is_packed_split(op):  # (a copy in eager: `.contiguous()`, charged by the walk)
                break
            if self.is_view_op(op) or self.is_repeat(op):
                nxt = op.operands[0].value
            elif allow_scale and not scaled and op.op in _SCALE_OPS and len(op.operands) == 2:
                a, b = (o.value for o in op.operands)
                if self.is_scalar_const(b):
                    nxt = a
                elif self.is_scalar_const(a) and op.op == "relax.multiply":
                    nxt = b
                else:
                    break
                scaled = True
            else:
                break
            covered.add(op.index)
            cur = nxt
            smallest = min(smallest, self.info[cur].numel)
        ratio = numel // smallest if smallest and numel % smallest == 0 else 1
        return scaled, ratio

    def is_repeat(self, op: OpNode) -> bool:
        """repeat / tile (also as a TIR call from the ONNX importer) of one tensor: a GQA head repeat."""
        if op.op in ("relax.repeat", "relax.tile"):
            return True
        return (
            op.op == "relax.call_tir"
            and (op.callee or "").startswith(("tile", "repeat"))
            and sum(1 for o in op.operands if o.value not in self.indep) == 1
        )

    def classify_mask(self, mask: int | None, causal: bool) -> tuple[int | None, bool]:
        """(real mask value or None, causal).

        A mask that depends on no model input and reads no weight tensor (it is built from positions:
        arange, comparisons, where) is not real: eager PyTorch passes `is_causal` or no mask at all, as
        Hugging Face models do outside tracing. It is causal when it compares two position ranges or uses
        tril/triu. A constant bias computed from weights (T5's relative position bias) is a real mask.
        """
        if mask is None or mask not in self.indep:
            return mask, causal
        reads_weights, builds_causal = self.mask_origin(mask)
        if reads_weights:
            return mask, causal
        return None, causal or builds_causal

    def mask_origin(self, vid: int) -> tuple[bool, bool]:
        """(reads a non-scalar weight, compares two position ranges or uses tril/triu) for a constant value."""
        seen: set[int] = set()
        stack = [vid]
        reads_weights = causal = False
        while stack:
            cur = stack.pop()
            op = self.op_of(cur)
            if op is None:
                if self.info[cur].numel > 1:
                    reads_weights = True
                continue
            if op.index in seen:
                continue
            seen.add(op.index)
            if op.op in ("relax.tril", "relax.triu"):
                causal = True
            if op.op in _COMPARISONS and len(op.operands) == 2:
                a, b = (o.tensor.shape for o in op.operands)
                if len(a) >= 2 and len(b) >= 2 and a[-2:] != b[-2:] and math.prod(a) > 1 and math.prod(b) > 1:
                    causal = True
            stack.extend(o.value for o in op.operands)
        return reads_weights, causal

    def decomposed(self, sm: OpNode) -> _Attention | None:
        """matmul(Q, K^T) -> [scale] -> [+mask] -> softmax -> [fix-ups] -> matmul(P, V), or None."""
        covered = {sm.index}
        scores = sm.operands[0].value
        # up from the softmax to the Q.K^T matmul
        mask = None
        cur = scores
        while True:
            op = self.op_of(cur)
            if op is None:
                return None
            covered.add(op.index)
            if op.op == "relax.matmul":
                m1 = op
                break
            a = op.operands[0].value if op.operands else None
            b = op.operands[1].value if len(op.operands) > 1 else None
            if self.is_view_op(op) or op.op == "relax.astype":
                cur = a
            elif op.op in _SCALE_OPS and b is not None and self.is_scalar_const(b):
                cur = a
            elif op.op == "relax.multiply" and b is not None and self.is_scalar_const(a):
                cur = b
            elif op.op == "relax.add" and b is not None and mask is None:
                if self.reaches_matmul(a):
                    cur, mask = a, b
                elif self.reaches_matmul(b):
                    cur, mask = b, a
                else:
                    return None
            else:
                return None
        # down from the softmax (and the scores, which torch's safe softmax also reads) to the P.V matmul
        region = {scores}
        for i in covered:
            region.update(self.outputs_of.get(i, []))
        m2 = None
        safe_softmax = False
        frontier = [scores, *self.outputs_of[sm.index]]
        while frontier:
            vid = frontier.pop()
            for c in sorted(set(self.consumers.get(vid, []))):
                if c in covered:
                    continue
                op = self.node[c]
                if op.op == "relax.matmul":
                    if m2 is not None or op.operands[0].value not in region or op.operands[1].value in region:
                        return None
                    m2 = op
                    covered.add(c)
                    continue
                if not all(o.value in region or o.value in self.indep for o in op.operands):
                    continue  # not yet: met again when its last operand joins the region (else it escapes, below)
                covered.add(c)
                if op.op in ("relax.equal", "relax.isnan", "relax.logical_not"):
                    safe_softmax = True
                for out in self.outputs_of.get(c, []):
                    region.add(out)
                    frontier.append(out)
        if m2 is None:
            return None
        q_scaled, _ = self.absorb_operand(m1.operands[0].value, covered, allow_scale=True)
        k_scaled, k_ratio = self.absorb_operand(m1.operands[1].value, covered, allow_scale=True)
        _, v_ratio = self.absorb_operand(m2.operands[1].value, covered)
        if not (safe_softmax or (q_scaled and k_scaled)) and not self.any_attention:
            return None  # attention the model writes out itself: eager torch runs it unfused
        # nothing computed inside may escape the pattern
        for i in covered - {m2.index}:
            for vid in self.outputs_of.get(i, []):
                if vid in self.graph_outputs or not set(self.consumers.get(vid, [])) <= covered:
                    return None
        q_shape, kt_shape = m1.operands[0].tensor.shape, m1.operands[1].tensor.shape
        v_shape, o_shape = m2.operands[1].tensor.shape, m2.output.shape
        if len(q_shape) < 3 or len(kt_shape) < 3 or len(o_shape) < 3 or len(v_shape) < 2:
            return None
        s, d, t, dv = q_shape[-2], q_shape[-1], kt_shape[-1], v_shape[-1]
        batch = o_shape[:-2]
        b, h = (math.prod(batch[:-1]), batch[-1]) if len(batch) >= 2 else (1, batch[0])
        kv_heads = kt_shape[-3] if len(kt_shape) >= 4 else h
        h_kv = self.kv_heads(kv_heads, min(k_ratio, v_ratio))
        mask, causal = self.classify_mask(mask, False)
        out = self.outputs_of[m2.index][0]
        return _Attention(m2.index, covered, mask, out, b, h, h_kv, s, t, d, dv, causal, False, m2.output.dtype)

    def reaches_matmul(self, vid: int) -> bool:
        for _ in range(8):
            op = self.op_of(vid)
            if op is None:
                return False
            if op.op == "relax.matmul":
                return True
            if not (self.is_view_op(op) or op.op in _SCALE_OPS or op.op == "relax.astype"):
                return False
            vid = next((o.value for o in op.operands if not self.is_scalar_const(o.value)), op.operands[0].value)
        return False

    # -- nn.MultiheadAttention's and nn.TransformerEncoderLayer's fast paths --------------------------
    def view_root(self, vid: int) -> tuple[int, set[int]]:
        """Walk up from `vid` through view ops (copying ones included) to the first value that is not a view.

        Returns (that value, the op indices walked).
        """
        walked: set[int] = set()
        while (op := self.op_of(vid)) is not None and op.operands:
            if not (op.op in _VIEW_OPS or op.op == "relax.take" and self.is_view_op(op)):
                break
            walked.add(op.index)
            vid = op.operands[0].value
        return vid, walked

    def shared_view_root(self, vids) -> tuple[int, set[int]] | None:
        """The one value that every value of `vids` is a view of (`view_root`: Q, K and V of an attention all
        views of one packed in-projection), and the view op indices walked from all of them; None when they reach
        different values."""
        walked: set[int] = set()
        roots = set()
        for v in vids:
            r, w = self.view_root(v)
            roots.add(r)
            walked |= w
        return (roots.pop(), walked) if len(roots) == 1 else None

    def is_packed_split(self, op: OpNode) -> bool:
        """The squeeze that ends nn.MultiheadAttention's Python-path split of its packed in-projection.

        `F._in_projection_packed` splits the (T, B, n x E) projection (n = 3: Q, K, V; n = 2: K, V of a
        cross-attention) as `proj.unflatten(-1, (n, E)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()`
        (torch/nn/functional.py): a reshape, an expand_dims at axis 0, a permute_dims that swaps axes 0 and -2,
        and a squeeze of axis -2, then `.contiguous()`, one copy of the whole (n, T, B, E) split, after which
        every view of Q, K and V is free. TVM's importers drop the `.contiguous()` (torch.export's clone; the ONNX
        exporters write nothing), so the graph keeps the signature and the copy is charged at its squeeze.
        """
        if op.op != "relax.squeeze" or not op.operands:
            return False
        tr = self.op_of(op.operands[0].value)
        if tr is None or tr.op != "relax.permute_dims" or tr.output.ndim < 4:
            return False
        nd = tr.output.ndim
        swap = list(range(nd))
        swap[0], swap[nd - 2] = nd - 2, 0
        if [int(a) % nd for a in tr.attrs.get("axes") or []] != swap:
            return False
        ex = self.op_of(tr.operands[0].value)
        if ex is None or ex.op != "relax.expand_dims" or ex.output.ndim != nd:
            return False
        if [int(a) % nd for a in ex.attrs.get("axis") or []] != [0]:
            return False
        squeezed = [int(a) % nd for a in op.attrs.get("axis") or []]
        return squeezed == [nd - 2] and tr.output.shape[nd - 2] == 1 and tr.output.shape[0] in (2, 3)

    def seq_first_transpose(self, vid: int) -> OpNode | None:
        """The op that makes `vid` as a (1, 0, 2) `permute_dims` of a 3-D tensor (nn.MultiheadAttention's Python path
        turning a (B, T, D) input into (T, B, D)), or None. Also a permute_dims that keeps the input's axis 0 as the
        batch, axis 1 of the output: the TorchScript ONNX exporter merges consecutive transposes, so a (B, D, T)
        convolution output transposed to (B, T, D) for the attention arrives as one (2, 0, 1) permutation
        (`batch_first_input` gives the (B, T, D) tensor it stands for)."""
        tr = self.op_of(vid)
        if tr is None or tr.op != "relax.permute_dims" or tr.operands[0].tensor.ndim != 3:
            return None
        axes = [int(a) % 3 for a in tr.attrs.get("axes") or []]
        if len(axes) != 3 or axes[1] != 0 or (axes != [1, 0, 2] and not self.exporter_spelled):
            return None
        return tr

    def batch_first_input(self, tr: OpNode) -> tuple[tuple[int, ...], Strides]:
        """(shape, strides) of the (B, T, D) input a `seq_first_transpose` transposes."""
        t, b, d = tr.output.shape
        axes = [int(a) % 3 for a in tr.attrs.get("axes")]
        st = self.static_strides(tr.operands[0].value)
        return (b, t, d), (st[axes[1]], st[axes[0]], st[axes[2]])

    def view_chain_down(self, vid: int) -> tuple[int, set[int]]:
        """Walk down from `vid` while its one consumer is a view op; (the last value, the op indices walked)."""
        walked: set[int] = set()
        while (c := self.only_consumer(vid)) is not None and self.node[c].op in _VIEW_OPS:
            outs = self.outputs_of.get(c, [])
            if len(outs) != 1:
                break
            walked.add(c)
            vid = outs[0]
        return vid, walked

    def linear_of(self, vid: int, fused_into: dict[int, int]) -> OpNode | None:
        """The matmul with a 2-D constant weight (and a fused bias add) whose output is `vid`, or None."""
        op = self.op_of(vid)
        if op is None:
            return None
        if op.index in fused_into:
            op = self.node[fused_into[op.index]]
        ok = op.op == "relax.matmul" and len(op.operands) == 2 and op.operands[1].tensor.ndim == 2
        return op if ok and op.operands[1].value in self.indep else None

    def mha_fast_paths(self, attentions: list[_Attention], backend: dict[int, str], fused_into: dict[int, int]):
        """nn.MultiheadAttention's fast path (`torch._native_multi_head_attention`) where eager torch takes it.

        torch.export always records MultiheadAttention's Python path (`F.multi_head_attention_forward`: the input
        transposed to (T, B, D), the packed in-projection, `.contiguous()` of the (3, T, B, D) split, SDPA, the
        output permuted and reshaped, the out-projection, transposed back); the ONNX exporters write the same.
        In eval mode without grad, a `batch_first` self-attention with an even head count and no mask runs
        `_native_multi_head_attention` instead (torch/nn/modules/activation.py), whose CUDA kernel
        (aten/src/ATen/native/transformers/cuda/attention.cu) runs, when the head dim is a multiple of 8 and SDPA
        picks flash or memory-efficient: `linear(x, in_proj)` on the (B, T, D) input, SDPA on views of its three
        chunks, a view of the output, `linear(., out_proj)`: three kernels, none of the Python path's copies.

        Recognised here: an attention (not causal, even heads; no mask or a bool one, below) whose
        Q, K and V are views of one linear layer's output (3 x H x D features) whose input is a (1, 0, 2)
        transpose of a 3-D tensor X, and whose output reaches, through views, a linear layer whose output goes
        through views back to X's shape. Every view op on the way is free (the kernels read and write contiguous
        (B, T, ...) memory). Returns (those view ops, the output value of each recognised attention block).

        SDPA's fused backends need the last dimension of Q, K and V at stride 1 (sdp_utils.cpp,
        `check_last_dim_stride_equals_1_dense`), and the CUDA kernel asks on views of X before projecting it: where
        X's last dimension is strided (X the transpose of a convolution's (B, D, T) output, say), it runs its other
        branch (`qkv_projection`: `matmul(x, in_proj^T)`, which copies the strided X to fold it, then `mm` without
        the bias; `_transform_bias_rescale_qkv`; `bmm`, softmax, `bmm`; the heads merged by a copy; `addmm`). Such
        a block is recorded in `native_math` (its attention costed as that branch); its Q, K, V views and the views
        after the out-projection are free, the views before the out-projection are walked as they are (the copy
        merging the heads falls out of the layouts). An X that is not contiguous is copied to fold it for `mm` in
        either branch (`fold_copies`, charged at the in-projection; `linear` then adds the bias in a kernel of its
        own in the SDPA branch).

        The same branch runs where the head dim is not a multiple of 8, and where the module is given a key padding
        mask or an attention mask (`merge_masks`; the CUDA kernel takes SDPA only without a mask): there the mask,
        as `F._canonical_mask` made it (float), is cast to bool (`_to_copy`) and the scores go through
        `_masked_softmax` (one kernel reading the bool mask) in place of softmax (`fast_path_mask`, `native_masks`).
        """
        free: set[int] = set()
        found: list[int] = []
        if any(op.attrs.get("autocast") for op in self.node):
            return free, found  # under autocast both modules take the Python path ("autocast is enabled")
        for att in attentions:
            be = backend.get(att.anchor)
            if att.causal or (be not in ("flash", "efficient") and not (be == "math" and att.bshd)):
                continue  # (a decomposed attention on the math backend is its own kernels already)
            if att.h % 2 or att.d != att.dv or att.h != att.h_kv or att.s != att.t:
                continue
            mask = None if att.mask is None else self.fast_path_mask(att.mask, att.b, att.h, att.s, att.t, att.covered)
            if att.mask is not None and mask is None:
                continue  # (a float mask: the Python path, `fast_path_mask`)
            inputs = {
                o.value
                for i in att.covered
                for o in self.node[i].operands
                if o.value not in self.indep and self.producer.get(o.value) not in att.covered
            } - {att.mask}
            shared = self.shared_view_root(inputs)
            if shared is None:
                continue
            packed, walked = shared
            m_in = self.linear_of(packed, fused_into)
            if m_in is None or self.info[packed].shape[-1] != 3 * att.h * att.d:
                continue
            tr = self.seq_first_transpose(m_in.operands[0].value)
            if tr is None:
                continue
            x_shape, x_strides = self.batch_first_input(tr)
            end, down = self.view_chain_down(att.out_value)
            m_out = next((self.node[c] for c in self.consumers.get(end, []) if self.node[c].op == "relax.matmul"), None)
            if (
                m_out is None
                or self.only_consumer(end) != m_out.index
                or self.linear_of(self.outputs_of[m_out.index][0], fused_into) is not m_out
            ):
                continue
            bias = next((c for c, p in fused_into.items() if p == m_out.index), None)
            out = self.outputs_of[bias if bias is not None else m_out.index][0]
            y, after = self.view_chain_down(out)
            if self.info[y].shape != x_shape:
                continue
            bias_in = next((c for c, p in fused_into.items() if p == m_in.index), None)
            if not is_contiguous(x_shape, x_strides):  # `matmul` folds X for `mm` with a copy
                self.fold_copies.add(m_in.index)
            if x_strides[-1] != 1 or att.d % 8 or mask is not None or be == "math":
                self.native_math[att.anchor] = (bias_in, packed)
                free |= walked | after | {tr.index}
                if mask is not None:
                    root, bool_bytes, mask_views = mask
                    self.native_masks[att.anchor] = (root, bool_bytes)
                    free |= mask_views
                    self.unrun |= mask_views
            else:
                free |= walked | down | after | {tr.index}
            found.append(y)
        return free, found

    def fast_path_mask(
        self, mask: int, b: int, h: int, s: int, t: int, own: set[int]
    ) -> tuple[int, int, set[int]] | None:
        """The mask `_native_multi_head_attention` takes where nn.MultiheadAttention's Python path reads `mask` in
        a (B, H, S, T) attention, or None for a mask it does not take as one (also for a float mask).

        The Python path (`F.multi_head_attention_forward`) reshapes a (B, T) key padding mask to (B x H, 1, T)
        (`view`, `expand`, `reshape`; then `view` to (B, H, 1, T) for SDPA) and a (S, T) attention mask to
        (1, S, T) (then (1, 1, S, T) for SDPA). The fast path passes the mask itself (`merge_masks`: mask type 1,
        the (B, T) mask; type 2, the (S, T) mask expanded to (B, H, S, T), a view) and casts it to bool, which for
        the expanded mask writes the whole (B, H, S, T) (`_to_copy` of a tensor that is not dense). Returns (the
        mask before those views, the bytes of the bool mask the masked softmax reads, the view ops walked that only
        this attention's ops `own` read (none of them runs in eager; a view the exporter shares between layers, or
        with an attention on the Python path, stays)). The mask must be `F._canonical_mask`'s of a bool one
        (`canonical_mask`): nn.MultiheadAttention takes its fast path for a bool mask only. (An
        nn.TransformerEncoderLayer takes it for a float one too, which no graph tells from a block written with
        nn.MultiheadAttention: a float mask is left to the Python path.)"""
        root, walked = self.view_root(mask)
        shape, n = tuple(self.info[mask].shape), self.info[root].numel
        if shape in ((b, h, 1, t), (b * h, 1, t)) and n == b * t:
            bool_bytes = n  # mask type 1: the key padding mask as given
        elif shape in ((1, 1, s, t), (1, s, t)) and n == s * t:
            bool_bytes = b * h * s * t  # mask type 2: the expanded attention mask, cast dense
        else:
            return None
        if not self.canonical_mask(root):
            return None
        mine = set(walked)
        for i in sorted(walked, reverse=True):  # (from the attention up: a view is its own when its readers are)
            for v in self.outputs_of.get(i, []):
                if not set(self.consumers.get(v, [])) <= (mine | own) or v in self.graph_outputs:
                    mine.discard(i)
        return root, bool_bytes, mine

    def through_unit_scales(self, vid: int) -> int:
        """The value `vid` is made from by multiplies or divides by one (`is_unit_scale`), or `vid`."""
        while (op := self.op_of(vid)) is not None and self.is_unit_scale(op):
            vid = next(o.value for o in op.operands if not self.is_scalar_const(o.value))
        return vid

    def canonical_mask(self, vid: int) -> bool:
        """Whether `vid` is `F._canonical_mask`'s float mask made from a bool one: `zeros_like(m, dtype=float)
        .masked_fill_(m, -inf)`, which TVM's torch importer writes `where(m, full_like(z, -inf), astype(z))` with
        `z = zeros_like(m)` (in m's dtype); an exporter folds the zeros into a constant of m's shape (so a float
        mask a model builds the same way reads the same there, and is taken as one)."""
        op = self.op_of(vid)
        if op is None or op.op != "relax.where" or len(op.operands) != 3:
            return False
        cond, fill, base = (o.value for o in op.operands)
        f = self.op_of(fill)
        if f is not None and f.op == "relax.full_like" and len(f.operands) == 2:
            fill = f.operands[1].value
        if self.info[cond].dtype != "bool" or self.scalar_value(fill) != -math.inf:
            return False
        b = self.op_of(base)
        if b is not None and b.op == "relax.astype" and b.operands:
            z = self.op_of(b.operands[0].value)
            return z is not None and z.op == "relax.zeros_like" and bool(z.operands) and z.operands[0].value == cond
        return self.exporter_spelled and base in self.indep and self.info[base].shape == self.info[cond].shape

    def static_strides(self, vid: int) -> Strides:
        """The strides the view ops above `vid` give it, from the contiguous output of the kernel they start at (the
        layout before the walk; a copying view starts afresh)."""
        root, walked = self.view_root(vid)
        known = {root: contiguous_strides(self.info[root].shape)}

        def strides(v: int) -> Strides:
            return known.get(v) or contiguous_strides(self.info[v].shape)

        for i in sorted(walked):
            outs = self.outputs_of.get(i, [])
            new = self.view_layout(self.node[i], strides) or [contiguous_strides(self.info[v].shape) for v in outs]
            known.update(zip(outs, new, strict=False))
        return strides(vid)

    def mha_weights_paths(self, roles: list[str], fused_into: dict[int, int]):
        """nn.MultiheadAttention's fast path where it returns attention weights (`mha(x, x, x)`'s default).

        With `need_weights=True` the Python path (what torch.export records) computes the attention itself: the
        packed in-projection of the transposed input, copies of Q, K and V to fold the heads, Q times the scale,
        bmm, softmax, bmm, the heads merged by a copy, the out-projection, and the weights averaged over heads
        (`mean`). Eager torch (eval, no grad, batch_first, even heads) runs `_native_multi_head_attention`'s other
        branch (aten/src/ATen/native/transformers/cuda/attention.cu): the in-projection as one `mm` without its
        bias, `_transform_bias_rescale_qkv` (one kernel: adds the bias, scales Q, writes Q, K, V as (B, H, T, Dh)),
        bmm, softmax, bmm, the copy merging the heads, `addmm`, then `sum` and `div_` for the average.

        With a bool key padding or attention mask the Python path adds the mask to the scores (`baddbmm`); the
        fast path casts it to bool and runs `_masked_softmax` (`fast_path_mask`): the add becomes the cast
        (`weight_masks`: the add -> (the mask, the bool mask's bytes)), the softmax the masked softmax.

        Returns (view and copy ops that become free, {the scale multiply: (the bias add, the packed projection,
        one of Q/K/V)}, the `mean` ops that are `sum` + `div_`).
        """
        free: set[int] = set()
        transforms: dict[int, tuple[int, int, int]] = {}
        means: set[int] = set()
        if any(op.attrs.get("autocast") for op in self.node):
            return free, transforms, means
        for sm in self.node:
            if sm.op != "relax.nn.softmax" or roles[sm.index] != "kernel" or not sm.operands:
                continue
            m1 = self.op_of(sm.operands[0].value)
            mask_add, mask_vid = None, None
            if m1 is not None and m1.op == "relax.add" and roles[m1.index] == "kernel" and len(m1.operands) == 2:
                # (baddbmm as the TorchScript exporter writes it: both terms times a unit alpha and beta)
                terms = [self.through_unit_scales(o.value) for o in m1.operands]
                made = [self.op_of(v) for v in terms]
                j = next((j for j, op in enumerate(made) if op is not None and op.op == "relax.matmul"), None)
                if j is None:
                    continue
                if self.only_consumer(self.outputs_of[m1.index][0]) != sm.index:
                    continue  # (the masked scores read by the softmax alone)
                mask_add, mask_vid, m1 = m1, terms[1 - j], made[j]
            if m1 is None or m1.op != "relax.matmul" or roles[m1.index] != "kernel" or m1.output.ndim != 3:
                continue
            probs = self.outputs_of[sm.index][0]
            users = set(self.consumers.get(probs, []))
            m2s = [c for c in users if self.node[c].op == "relax.matmul" and self.node[c].operands[0].value == probs]
            if len(m2s) != 1:
                continue
            m2 = self.node[m2s[0]]
            mul = self.op_of(m1.operands[0].value)
            if mul is None or mul.op != "relax.multiply" or roles[mul.index] != "kernel":
                continue
            q_in = [o.value for o in mul.operands if not self.is_scalar_const(o.value)]
            if len(q_in) != 1 or len(mul.operands) != 2:
                continue
            shared = self.shared_view_root((q_in[0], m1.operands[1].value, m2.operands[1].value))
            if shared is None:
                continue
            packed, walked = shared
            m_in = self.linear_of(packed, fused_into)
            bias = None if m_in is None else next((c for c, p in fused_into.items() if p == m_in.index), None)
            if m_in is None or bias is None:
                continue
            tr = self.seq_first_transpose(m_in.operands[0].value)
            if tr is None:
                continue
            x_shape, x_strides = self.batch_first_input(tr)
            b, _, d = x_shape
            bh, _, dh = self.info[q_in[0]].shape
            if self.info[packed].shape[-1] != 3 * d or bh % b or (bh // b) % 2 or (bh // b) * dh != d:
                continue
            mask = None
            if mask_add is not None:
                t = self.info[q_in[0]].shape[1]
                mask = self.fast_path_mask(mask_vid, b, bh // b, t, t, {mask_add.index})
                if mask is None:  # (a float mask: the Python path)
                    continue
            end, _ = self.view_chain_down(self.outputs_of[m2.index][0])
            m_out = self.only_consumer(end)
            if m_out is None or self.linear_of(self.outputs_of[m_out][0], fused_into) is not self.node[m_out]:
                continue
            out_bias = next((c for c, p in fused_into.items() if p == m_out), None)
            y, after = self.view_chain_down(self.outputs_of[out_bias if out_bias is not None else m_out][0])
            if self.info[y].shape != x_shape:
                continue
            found_means: set[int] = set()
            for c in users - {m2.index}:  # the attention weights: (B * H, T, S) -> (B, H, T, S) -> mean over heads
                nxt = self.only_consumer(self.outputs_of[c][0]) if self.node[c].op in _RESHAPES else None
                if nxt is None or self.node[nxt].op != "relax.mean":
                    break
                if [int(a) for a in self.node[nxt].attrs.get("axis") or []] != [1]:
                    break
                found_means.add(nxt)
            else:
                free |= walked | after | {tr.index}
                transforms[mul.index] = (bias, packed, q_in[0])
                if mask is not None:
                    self.weight_masks[mask_add.index] = (mask[0], mask[1], sm.index)
                    free |= mask[2]
                    self.unrun |= mask[2]
                if not is_contiguous(x_shape, x_strides):  # `qkv_projection`'s matmul folds X with a copy
                    self.fold_copies.add(m_in.index)
                means |= found_means
                if not users - {m2.index}:
                    self.dropped_weights[sm.index] = bh // b
        return free, transforms, means

    def encoder_ffn(self, y: int, roles: list[str], fused_into: dict[int, int]) -> tuple[int, int] | None:
        """nn.TransformerEncoderLayer's fast path (`torch._transformer_encoder_layer_fwd`) after its attention.

        aten/src/ATen/native/transformers/transformer.cpp runs the feed-forward block's first linear layer and its
        ReLU or GELU as one `_addmm_activation` (cuBLASLt's bias + activation epilogue). Recognised: the attention
        block's output `y` -> residual add -> layer norm -> linear (+ bias) -> relu or gelu -> linear (+ bias).
        Returns (the activation op, the matmul it joins), or None.
        """
        add = self.only_consumer(y)
        if add is None or self.node[add].op != "relax.add":
            return None
        outs = self.outputs_of.get(add, [])
        lns = [c for c in self.consumers.get(outs[0], []) if self.node[c].op == "relax.nn.layer_norm"] if outs else []
        if len(lns) != 1:
            return None
        h = self.outputs_of[lns[0]][0]
        for c in sorted(set(self.consumers.get(h, []))):
            m1 = self.node[c]
            if m1.op != "relax.matmul" or self.linear_of(self.outputs_of[c][0], fused_into) is not m1:
                continue
            bias = next((a for a, p in fused_into.items() if p == c), None)
            val = self.outputs_of[bias if bias is not None else c][0]
            act = self.only_consumer(val)
            if act is None or self.node[act].op not in ("relax.nn.relu", "relax.nn.gelu") or roles[act] != "kernel":
                continue
            nxt, _ = self.view_chain_down(self.outputs_of[act][0])
            m2 = self.only_consumer(nxt)
            if m2 is not None and self.linear_of(self.outputs_of[m2][0], fused_into) is self.node[m2]:
                return act, c
        return None

    # -- main -------------------------------------------------------------------------------
    def run(self) -> KernelView:
        n = len(self.node)
        attentions = self.find_attention()
        roles = ["kernel"] * n
        anchor_of: dict[int, _Attention] = {}
        backend: dict[int, str] = {}
        for att in attentions:
            masked = att.mask is not None
            be = sdpa_backend(att.dtype, att.d, att.dv, att.s, att.t, masked=masked, causal=att.causal)
            if be == "math" and att.bshd is False:
                continue  # the decomposed ops stay as they are: they are the math backend's kernels
            anchor_of[att.anchor] = att
            backend[att.anchor] = be
            for i in att.covered:
                if i != att.anchor:
                    roles[i] = "fused"

        # constants: ops that depend on no model input (weights, shapes, arange, masks built from positions)
        # are computed once, as a compiler folds them (and as the ONNX exporter already has)
        for op in self.node:
            outs = self.outputs_of.get(op.index, [])
            if outs and all(v in self.indep for v in outs) and not op.attrs.get("autocast"):
                # (autocast's weight casts and computations on weights alone run every forward)
                if not (op.weight_only and not op.folded):
                    roles[op.index] = "folded"

        # torch activations TVM's importers spell as several pointwise ops (one kernel in torch)
        act_groups: dict[int, list[int]] = {}
        self.group_names: dict[int, str] = {}  # the kernel name of a group (default: its last op)
        self.norm_inputs: dict[int, int] = {}  # a norm group's last op -> the value it normalises
        self.pool_inputs: dict[int, int] = {}  # an adaptive-pool group's last op -> the value it pools
        for op in self.node:
            if op.op == "relax.clip" and roles[op.index] == "kernel":
                group = self.hard_activation(op, roles)
                name = "fused:hardswish" if group and len(group) == 4 else "fused:hardsigmoid"
                if not group and (group := self.tensor_clamp(op, roles)):
                    name = "fused:clamp"
                if group:
                    act_groups[group[-1]] = group
                    self.group_names[group[-1]] = name
                    for i in group[:-1]:
                        roles[i] = "fused"
        for op in self.node:
            if roles[op.index] != "kernel":
                continue
            found = self.elu_group(op, roles) if op.op == "relax.exp" else None
            if op.op == "relax.sigmoid":
                found = self.glu_group(op, roles)
            if op.op == "relax.abs":
                found = self.vector_norm_group(op, roles)
            if found and all(roles[i] == "kernel" for i in found[1]):
                name, group = found
                act_groups[group[-1]] = group
                self.group_names[group[-1]] = name
                for i in group[:-1]:
                    roles[i] = "fused"

        # what other exporters and TVM's importers write as several ops for one torch kernel (GELU, SiLU,
        # clamp, hardsigmoid, rsqrt, ne, a gather's index normalisation): for graphs not from torch.export
        self.absorbed: dict[int, list[int]] = {}
        if self.exporter_spelled:
            groups, self.absorbed = self.exporter_spellings(roles)
            for last, (name, group) in groups.items():
                act_groups[last] = group
                self.group_names[last] = name
                for i in group[:-1]:
                    # (a norm's reshapes stay views: walked as such; an adaptive pool's views read nothing outside it)
                    if not self.is_view_op(self.node[i]) or last in self.pool_inputs:
                        roles[i] = "fused"
            for ops in self.absorbed.values():
                for i in ops:
                    roles[i] = "fused"

        # epilogue fusion: gemm + bias, depthwise conv + bias
        fused_into: dict[int, int] = {}  # add op -> producer op it is fused into
        for op in self.node:
            if roles[op.index] != "kernel" or op.op not in ("relax.matmul", *_CONVS):
                continue
            outs = self.outputs_of.get(op.index, [])
            if len(outs) != 1:
                continue
            c = self.only_consumer(outs[0])
            if c is None or self.node[c].op != "relax.add" or roles[c] != "kernel":
                continue
            add = self.node[c]
            other = [o for o in add.operands if o.value != outs[0]]
            if len(other) != 1 or other[0].value not in self.indep or add.output.shape != op.output.shape:
                continue
            if op.op == "relax.matmul":
                ok = len(op.operands) == 2 and op.operands[1].tensor.ndim == 2
                ok = ok and other[0].tensor.numel == op.output.shape[-1]
            else:
                x, w = op.operands[0].tensor, op.operands[1].tensor
                groups = int(op.attrs.get("groups", 1))
                ok = op.op == "relax.nn.conv2d" and groups > 1 and groups == x.shape[1] and w.shape[0] % groups == 0
                ok = ok and other[0].tensor.numel == op.output.shape[1]
            if ok:
                fused_into[c] = op.index
                roles[c] = "fused"

        for i, cost in enumerate(self.costs):
            if cost.folded:  # (the contract's rule; the constant rule above already covers it)
                roles[i] = "folded"
        # a concat or a gather of a value eager PyTorch computes on every forward (`live`) is a kernel on every
        # forward too, although it depends on no input (BEiT: `cat` and `index` of the resized relative-position
        # table in every layer; the eager dispatch trace has them)
        for op in self.node:
            if roles[op.index] == "folded" and op.op in _LIVE_COPIES and not self.is_view_op(op):
                if any(o.value in self.live for o in op.operands):
                    roles[op.index] = "kernel"

        # nn.MultiheadAttention's and nn.TransformerEncoderLayer's fast paths, as eager torch takes them
        fast_views, blocks = self.mha_fast_paths(list(anchor_of.values()), backend, fused_into)
        for anchor, (bias, _) in self.native_math.items():
            backend[anchor] = "math"  # the branch without SDPA: bmm, softmax, bmm
            if bias is not None:  # the in-projection's bias joins `_transform_bias_rescale_qkv`
                del fused_into[bias]
        for y in blocks:
            ffn = self.encoder_ffn(y, roles, fused_into)
            if ffn is not None:
                act, m1 = ffn
                fused_into[act] = m1  # `_addmm_activation`: the first feed-forward linear layer and its activation
                roles[act] = "fused"

        weight_views, transforms, means = self.mha_weights_paths(roles, fused_into)
        fast_views |= weight_views

        # one BLAS call TVM's converter wrote as several ops (baddbmm: matmul, its scales, the add): eager's copy of
        # the added term into the result, then one GEMM, emitted where the call's last op runs (c may be computed
        # after the matmul: an `expand`, autocast's cast). Not where a fast path above runs something else instead
        # (nn.MultiheadAttention's Python path adds its mask with `baddbmm`, its fast path masks the softmax): the
        # ops of a call not taken are no call (`call_of`: each is its own dispatch).
        taken = set(self.weight_masks) | fast_views | set(transforms) | means
        self.call_of = {op.index: None for op in self.node if is_blas_call(op.library_call)}
        for m, (rest, add, c, label) in self.blas_calls(roles).items():
            if {m, *rest} & taken:
                continue
            last = max(m, *rest)
            self.blas[last] = (m, rest, add, c)
            for j in (m, *rest):
                self.call_of[j] = label
                if j != last:
                    roles[j] = "fused"
        for bias, _, _ in transforms.values():  # the bias joins `_transform_bias_rescale_qkv`, not the GEMM
            del fused_into[bias]
        for m in self.fold_copies:  # `linear` on a non-contiguous input (SDPA's branch): matmul, then `add_(bias)`
            for c in [c for c, p in fused_into.items() if p == m and self.node[c].op == "relax.add"]:
                del fused_into[c]
                roles[c] = "kernel"

        # recurrent layers: one pointwise kernel per step for the gates (cuDNN's standard RNN algorithm)
        rnn_groups = self.recurrences(roles, fused_into)
        for group in rnn_groups:
            act_groups[group[-1]] = group
            for i in group[:-1]:
                roles[i] = "fused"
        rnn_calls = {self.node[i].library_call for g in rnn_groups for i in g} - {None}
        rnn_ops = {i for g in rnn_groups for i in g}
        for op in self.node:
            if op.op == "relax.matmul" and roles[op.index] == "folded" and op.library_call in rnn_calls:
                # the first step's recurrent GEMM on a constant initial state (zeros when none is given): folded
                # as input-independent, but cuDNN runs it in the call like every other step's
                if self.feeds(op, rnn_ops):
                    roles[op.index] = "kernel"
        rnn_written, rnn_input_gemms, rnn_outputs = self.recurrence_io(rnn_ops, rnn_calls, fused_into)
        fast_views |= rnn_written

        masked_fills = self.masked_fills(roles)
        typed_fills = self.typed_fills(roles)
        inplace = self.inplace_scatters(roles)
        in_place: set[int] = set()  # the scatters of `inplace` the walk took (their views held)

        # walk in launch order, following strides
        layout: dict[int, Strides] = {vid: (0,) * self.info[vid].ndim for vid in masked_fills}
        kernels: list[Kernel] = []
        op_kernels: list[list[int]] = [[] for _ in range(n)]

        # a copy torch makes inside an op (`matmul`'s fold, a kernel's `.contiguous()`) is a temporary of that op:
        # the op reads it, later readers of the value read the value as it is (and copy again where they need
        # to); inside one library call (cuDNN's RNN: one `.contiguous()` for both directions) the call's later
        # ops read the copy too
        op_layout: dict[int, Strides] = {}
        call_layout: dict[tuple[int, str], Strides] = {}
        current_call: list[str | None] = [None]

        def strides(vid: int) -> Strides:
            s = op_layout.get(vid)
            if s is None and current_call[0] is not None:
                s = call_layout.get((vid, current_call[0]))
            if s is None:
                s = layout.get(vid)
            return s if s is not None else contiguous_strides(self.info[vid].shape)

        def copied(vid: int) -> None:
            """torch copied `vid` contiguous inside the current op (after `copy`)."""
            st = contiguous_strides(self.info[vid].shape)
            op_layout[vid] = st
            if current_call[0] is not None:
                call_layout[(vid, current_call[0])] = st

        def nbytes(vid: int, elems: int | None = None) -> int:
            t = self.info[vid]
            return int(math.ceil((t.numel if elems is None else elems) * dtype_bytes(t.dtype)))

        def read_bytes(vid: int) -> int:
            t = self.info[vid]
            return nbytes(vid, unique_elements(t.shape, strides(vid)))

        def emit(kind, op_name, covered, flops, read, written, dtype, params) -> int:
            calls = {self.call_of[i] if i in self.call_of else self.node[i].library_call for i in covered}
            k = Kernel(
                len(kernels),
                kind,
                op_name,
                tuple(sorted(covered)),
                int(flops),
                int(read),
                int(written),
                dtype,
                params,
                calls.pop() if len(calls) == 1 else None,
            )
            kernels.append(k)
            for i in covered:
                op_kernels[i].append(k.index)
            return k.index

        def copy(vid: int, before: OpNode, shape: tuple[int, ...] | None = None, read: int | None = None) -> None:
            t = self.info[vid]
            out_shape = shape or t.shape
            emit(
                "copy",
                f"copy:{before.op}",
                (before.index,),
                0,
                read_bytes(vid) if read is None else read,
                int(math.ceil(math.prod(out_shape) * dtype_bytes(t.dtype))),
                t.dtype,
                {"numel": math.prod(out_shape), "strided": True},  # a gather of a strided view (kernel_model)
            )

        # the model's `.clone()` (or `.contiguous()`) of a kernel's result, fused op's included (a linear layer's bias
        # add): a copy launched after the kernel that wrote it, before the next op's (views: in their branch below)
        marked = [op.index for op in self.node if op.eager_copy]

        def flush(upto: int) -> None:
            while marked and marked[0] < upto:
                j = marked.pop(0)
                outs_j = self.outputs_of.get(j, [])
                if roles[j] not in ("kernel", "fused") or len(outs_j) != 1:
                    continue
                mark = self.node[j]
                st = layout.get(outs_j[0]) or contiguous_strides(mark.output.shape)
                if self.eager_copies(mark, st):
                    copy(outs_j[0], mark)
                    layout[outs_j[0]] = self.copy_layout(mark, st)

        for op in self.node:
            i = op.index
            flush(i)
            outs = self.outputs_of.get(i, [])
            role = roles[i]
            if role in ("folded", "fused"):
                continue
            op_layout.clear()
            current_call[0] = op.library_call
            if i in transforms:  # `_transform_bias_rescale_qkv`: bias, scale, Q, K, V as (B, H, T, Dh)
                bias, packed, q = transforms[i]
                flops = self.costs[bias].flops + self.costs[i].flops
                q_info = self.info[q]
                self.emit_qkv_transform(emit, (bias, i), bias, packed, flops, 3 * q_info.nbytes, q_info.dtype)
                for vid in outs:
                    layout[vid] = contiguous_strides(self.info[vid].shape)
                continue
            if i in means:  # the averaged attention weights: `sum` over heads, then `div_`
                src = op.operands[0].value
                self.emit_weight_mean(emit, i, read_bytes(src), self.info[src].numel, op.output.numel, op.output.dtype)
                continue
            if i in self.weight_masks:  # `_masked_softmax`'s cast of the mask to bool, then the masked softmax
                root, bool_bytes, sm_index = self.weight_masks[i]
                sm = self.node[sm_index]
                roles[sm.index] = "fused"
                scores = op.output.nbytes
                self.emit_masked_softmax(
                    emit, (i,), (sm.index,), read_bytes(root), bool_bytes, scores, sm.output.numel, sm.output.dtype
                )
                layout[self.outputs_of[sm.index][0]] = contiguous_strides(sm.output.shape)
                if sm.index in self.dropped_weights:
                    heads = self.dropped_weights[sm.index]
                    n = sm.output.numel
                    self.emit_weight_mean(emit, sm.index, scores, n, n // heads, sm.output.dtype)
                continue
            if i in typed_fills:  # a fill written in the cast's dtype: reads nothing
                emit("elementwise", self.node[typed_fills[i]].op, (typed_fills[i], i), 0, 0, op.output.nbytes,
                     op.output.dtype, {"numel": op.output.numel})  # fmt: skip
                continue
            if i in fast_views:  # inside a recognised fast path: contiguous (B, T, ...) memory, no copy
                roles[i] = "view"
                for vid in outs:
                    layout[vid] = contiguous_strides(self.info[vid].shape)
                continue
            if i in act_groups and i in self.pool_inputs:
                self.emit_adaptive_pool(act_groups[i], self.pool_inputs[i], emit, read_bytes)
                continue
            if i in act_groups:
                src = self.norm_inputs.get(i)
                if src is not None:  # a norm reads a dense NCHW or NHWC input (batch and group norm copy others)
                    shape, st = self.info[src].shape, strides(src)
                    if not (is_contiguous(shape, st) or is_channels_last(shape, st)):
                        copy(src, self.node[act_groups[i][0]])
                        copied(src)
                reduction = self.group_names.get(i) == "fused:vector_norm"
                kind = "norm" if src is not None else "reduction" if reduction else "elementwise"
                self.emit_group(act_groups[i], emit, read_bytes, kind)
                outs_last = self.outputs_of.get(i, [])
                x = self.node[act_groups[i][0]].operands
                for o in x:
                    if o.value not in self.indep and o.tensor.shape == op.output.shape and outs_last:
                        order = _dense_order(op.output.shape, strides(o.value))
                        if order is not None:
                            layout[outs_last[0]] = _permuted_contiguous(op.output.shape, order)
                        break
                continue
            if i in anchor_of:
                self.emit_attention(anchor_of[i], backend[i], emit, read_bytes, layout, op)
                continue
            if i in self.blas:  # the call's last op: c and the matmul's operands are computed by now
                m, rest, add, c = self.blas[i]
                if c is not None:  # beta != 0: `result.copy_(self)`, c broadcast into the result, then the GEMM
                    copy(c, self.node[add], self.node[add].output.shape)
                self.matmul_copies(self.node[m], strides, copied, copy)
                self.emit_blas(self.node[m], rest, c is not None, emit, read_bytes)
                continue
            if i in inplace and all(roles[j] == "view" or j in in_place for j in inplace[i][0]):
                in_place.add(i)
                base, src = (o.value for o in op.operands)
                if inplace[i][1]:  # `region.copy_(src)`: reads src, writes the region (strided where it is)
                    axis, step = int(op.attrs["axis"]) % op.output.ndim, int(op.attrs["step"])
                    region = tuple(st * (step if d == axis else 1) for d, st in enumerate(strides(base)))
                    shape = self.info[src].shape
                    dense = is_contiguous(shape, region) and is_contiguous(shape, strides(src))
                    numel = self.info[src].numel
                    emit("copy", op.op, (i,), 0, read_bytes(src), nbytes(src), op.output.dtype,
                         {"numel": numel, "strided": not dense})  # fmt: skip
                    roles[i] = "copy"
                else:
                    roles[i] = "view"  # the pointwise op before it wrote the region in place
                layout[outs[0]] = strides(base)  # the result is the base's memory
                continue
            if role == "kernel" and not op.outputs:  # shape_of and friends: host-side metadata, no kernel
                roles[i] = "view"
                continue
            if role == "kernel" and self.is_packed_split(op):  # the Python path's `.contiguous()` of the split
                new = self.view_layout(op, strides)
                if new is not None and not is_contiguous(op.output.shape, new[0]):
                    roles[i] = "copy"
                    copy(op.operands[0].value, op, op.output.shape)
                    layout[outs[0]] = contiguous_strides(op.output.shape)
                    continue
            if role == "kernel" and self.is_view_op(op):
                new = self.view_layout(op, strides)
                if (
                    new is None
                    and op.library_call in rnn_calls
                    and self.view_source(op.operands[0].value) in rnn_outputs
                ):
                    new = [contiguous_strides(self.info[vid].shape) for vid in outs]  # cuDNN writes this layout
                if new is not None and outs and self.eager_copies(op, new[0]):
                    # the model's `.contiguous()` (of a view that is not) or `.clone()`: eager copies the view,
                    # reading the elements it covers (a slice its part, a broadcast its source once)
                    roles[i] = "copy"
                    read = nbytes(op.operands[0].value, unique_elements(op.output.shape, new[0]))
                    copy(op.operands[0].value, op, op.output.shape, read)
                    layout[outs[0]] = self.copy_layout(op, new[0])
                    continue
                if new is not None:
                    roles[i] = "view"
                    for vid, st in zip(outs, new, strict=False):
                        layout[vid] = st
                    continue
                roles[i] = "copy"
                src = op.operands[0].value
                copy(src, op, op.output.shape)
                if op.eager_copy in _CLONES and outs:  # the model's `.clone()` of that copy: another
                    copy(outs[0], op)
                continue
            cost = self.costs[i]
            # operands the kernel needs contiguous (or cuBLAS-readable)
            if (op.op in _NEED_CONTIGUOUS or op.op in _NEED_DENSE_NCHW_OR_NHWC) and op.operands:
                src = op.operands[0].value
                shape, st = self.info[src].shape, strides(src)
                ok = is_contiguous(shape, st)
                if not ok and op.op in _NEED_DENSE_NCHW_OR_NHWC:
                    ok = is_channels_last(shape, st) and not (len(shape) == 3 and op.op in _CONTIGUOUS_3D)
                if not ok:
                    copy(src, op)
                    copied(src)
                elif op.op in _CONVS and not is_contiguous(shape, st):
                    # a channels-last input runs on cuDNN even when depthwise ("always use cudnn_depthwise for
                    # channels_last", Convolution.cpp use_cudnn_depthwise), which adds the bias in a kernel of its own
                    for c in [c for c, p in fused_into.items() if p == i and self.node[c].op == "relax.add"]:
                        del fused_into[c]
                        roles[c] = "kernel"
            elif op.op == "relax.einsum":
                self.einsum_copies(op, strides, copy)
            elif op.op == "relax.matmul" and len(op.operands) == 2:
                a = op.operands[0]
                if i in self.fold_copies:  # (an nn.MultiheadAttention fast path's strided input, `mha_fast_paths`)
                    copy(a.value, op)
                    copied(a.value)
                if (
                    i not in rnn_input_gemms
                    and a.tensor.ndim >= 3
                    and not is_contiguous(a.tensor.shape, strides(a.value))
                ):
                    # torch's linear fuses the bias (addmm) only for a contiguous input; otherwise it runs
                    # matmul, then `add_(bias)`: a kernel of its own
                    for c in [c for c, p in fused_into.items() if p == i and self.node[c].op == "relax.add"]:
                        del fused_into[c]
                        roles[c] = "kernel"
                self.matmul_copies(op, strides, copied, copy)
            self.emit_op(op, cost, fused_into, emit, read_bytes)
            if i in self.dropped_weights:  # the weights the fast path averages though the model drops them
                n = op.output.numel
                self.emit_weight_mean(emit, i, op.output.nbytes, n, n // self.dropped_weights[i], op.output.dtype)
            # output layout
            if op.op in _NEED_DENSE_NCHW_OR_NHWC and outs and op.output.ndim >= 4:
                # cuDNN convolution and batch norm, pooling: the output in the input's suggested memory format
                src = op.operands[0].value
                shape, st = self.info[src].shape, strides(src)
                if not is_contiguous(shape, st) and is_channels_last(shape, st):
                    out_shape = op.output.shape
                    layout[outs[0]] = _permuted_contiguous(out_shape, [0, *range(2, len(out_shape)), 1])
            elif op.op == "relax.einsum" and outs:
                plan = self.einsum_plan(op)
                if plan is not None:  # the bmm's (lro, lo, ro) memory, permuted to the output's order
                    layout[outs[0]] = _permuted_contiguous(op.output.shape, list(plan.out_order))
            elif cost.category in _POINTWISE_CATEGORIES or op.op in _CASTS:
                out_shape = op.output.shape
                for o in op.operands:
                    if o.tensor.shape == out_shape and o.tensor.ndim > 1:
                        order = _dense_order(out_shape, strides(o.value))
                        if order is not None and outs:
                            layout[outs[0]] = _permuted_contiguous(out_shape, order)
                        break
        flush(n)

        live = [c for c in self.costs if not c.folded]
        summary = KernelSummary(
            relax_ops=len(live),
            kernels=len(kernels),
            bytes_ops=sum(c.bytes_read + c.bytes_written for c in live),
            bytes_kernels=sum(k.bytes for k in kernels),
            flops_kernels=sum(k.flops for k in kernels),
            by_kind=dict(sorted(Counter(k.kind for k in kernels).items())),
            by_role=dict(sorted(Counter(roles).items())),
            attention=dict(sorted(Counter(k.params["backend"] for k in kernels if k.kind == "attention").items())),
        )
        recomputed = {k for i, ks in enumerate(op_kernels) if self.recomputes(i) for k in ks}
        recomputed |= self.recomputed_pads
        return KernelView(
            tuple(kernels),
            tuple(tuple(x) for x in op_kernels),
            tuple(roles),
            summary,
            tuple(sorted(recomputed)),
            tuple(sorted(self.unrun)),
            tuple(sorted(self.writes_into)),
        )

    def recomputes(self, i: int) -> bool:
        """Whether op `i` depends on no model input but eager PyTorch runs it on every forward (`live` outputs)."""
        outs = self.outputs_of.get(i, [])
        return bool(outs) and all(v in self.live for v in outs)

    def hard_activation(self, clip: OpNode, roles: list[str]) -> list[int] | None:
        """hardsigmoid = add(x, 3) -> clip(0, 6) -> divide(6); hardswish = x * hardsigmoid(x): op indices or None."""
        first = self.op_of(clip.operands[0].value) if clip.operands else None
        if first is None or first.op != "relax.add" or roles[first.index] != "kernel":
            return None
        xs = [o.value for o in first.operands if not self.is_scalar_const(o.value)]
        if len(xs) != 1 or self.only_consumer(self.outputs_of[first.index][0]) != clip.index:
            return None
        div_i = self.only_consumer(self.outputs_of[clip.index][0])
        if div_i is None or self.node[div_i].op not in _SCALE_OPS:
            return None
        div = self.node[div_i]
        if not any(self.is_scalar_const(o.value) for o in div.operands):
            return None
        group = [first.index, clip.index, div_i]
        mul_i = self.only_consumer(self.outputs_of[div_i][0])
        if mul_i is not None and self.node[mul_i].op == "relax.multiply":
            if {o.value for o in self.node[mul_i].operands} == {xs[0], self.outputs_of[div_i][0]}:
                group.append(mul_i)
        return group

    def tensor_clamp(self, clip: OpNode, roles: list[str]) -> list[int] | None:
        """torch's clamp with tensor bounds (`aten.clamp.Tensor`, T5's float16 clamp), one kernel in torch, as TVM's
        PyTorch importer writes it: `maximum(x, broadcast_to(lo))` and/or `minimum(., broadcast_to(hi))`, then
        `clip(., -inf, inf)` (a model's own `torch.maximum(a, b)` has no broadcast of b, and its `clamp(x, -inf, inf)`
        no maximum or minimum before it): op indices (the last the clip) or None."""
        if clip.attrs.get("min") != float("-inf") or clip.attrs.get("max") != float("inf") or len(clip.operands) != 1:
            return None
        group, x = [clip.index], clip.operands[0].value
        for name in ("relax.minimum", "relax.maximum"):
            prev = self.op_of(x)
            if prev is None or prev.op != name or roles[prev.index] != "kernel" or len(prev.operands) != 2:
                continue
            bound = self.op_of(prev.operands[1].value)  # the importer broadcasts each bound to x's shape first
            if bound is None or bound.op != "relax.broadcast_to":
                break
            if self.only_consumer(self.outputs_of[prev.index][0]) != group[0]:
                break
            group.insert(0, prev.index)
            x = prev.operands[0].value
        return group if len(group) > 1 else None

    def elu_group(self, e: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """ELU as TVM's torch importer writes it, ``relu(x) + c * relu(1 - exp(x))`` (c = -alpha): one torch kernel.

        The six ops (exp, subtract, relu, multiply, relu, add) are `F.elu`'s one elementwise kernel in eager
        torch; op indices with the add last, or None. The constants are checked: 1 in the subtraction, a negative
        one-element scale (-alpha).
        """
        if len(e.operands) != 1:
            return None
        x = e.operands[0].value
        sub = self.sole_user(e, roles)
        if sub is None or sub.op != "relax.subtract" or len(sub.operands) != 2:
            return None
        if self.scalar_value(sub.operands[0].value) != 1.0 or sub.operands[1].value != self.outputs_of[e.index][0]:
            return None
        neg_relu = self.sole_user(sub, roles)
        if neg_relu is None or neg_relu.op != "relax.nn.relu":
            return None
        mul = self.sole_user(neg_relu, roles)
        if mul is None or mul.op != "relax.multiply":
            return None
        scale = [self.scalar_value(o.value) for o in mul.operands if o.value != self.outputs_of[neg_relu.index][0]]
        if len(scale) != 1 or scale[0] is None or not scale[0] < 0:
            return None
        add = self.sole_user(mul, roles)
        if add is None or add.op != "relax.add" or add.output.shape != e.output.shape:
            return None
        other = [o.value for o in add.operands if o.value != self.outputs_of[mul.index][0]]
        pos_relu = self.op_of(other[0]) if len(other) == 1 else None
        if pos_relu is None or pos_relu.op != "relax.nn.relu" or roles[pos_relu.index] != "kernel":
            return None
        if pos_relu.operands[0].value != x or self.only_consumer(other[0]) != add.index:
            return None
        return "fused:elu", sorted([e.index, sub.index, neg_relu.index, mul.index, pos_relu.index, add.index])

    def glu_group(self, sig: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """GLU as TVM's torch importer writes it, ``a * sigmoid(b)`` with a, b the two halves of one tensor along
        a dimension (two strided slices, views): torch's one `glu` kernel. Op indices (multiply last) or None.

        In graphs not from torch.export (`exporter_spelled`) also as torch's ONNX exporters write `F.glu`: a
        `Split` into two outputs (one `relax.split`, a view), ``first * sigmoid(second)``.
        """
        if len(sig.operands) != 1:
            return None
        b = sig.operands[0].value
        b_op = self.op_of(b)
        mul = self.sole_user(sig, roles)
        if b_op is None or mul is None or mul.op != "relax.multiply":
            return None
        other = [o.value for o in mul.operands if o.value != self.outputs_of[sig.index][0]]
        if len(other) != 1:
            return None
        if b_op.op == "relax.split":  # ONNX `Split`: a, b = its first and second output
            halves = self.outputs_of.get(b_op.index, [])
            if not self.exporter_spelled or len(halves) != 2 or [other[0], b] != halves:
                return None
            src = b_op.operands[0].value
        else:
            a_op = self.op_of(other[0])
            if b_op.op != "relax.strided_slice" or a_op is None or a_op.op != "relax.strided_slice":
                return None
            if a_op.index == b_op.index:
                return None
            src = a_op.operands[0].value
        if b_op.operands[0].value != src or mul.output.shape != sig.output.shape:
            return None
        whole, half = self.info[src].shape, tuple(mul.output.shape)
        diff = [d for d in range(len(whole)) if whole[d] != half[d]] if len(whole) == len(half) else []
        if len(diff) != 1 or whole[diff[0]] != 2 * half[diff[0]]:
            return None
        return "fused:glu", [sig.index, mul.index]

    # -- spellings of one torch op by other exporters and importers ------------------------------
    def exporter_spellings(self, roles: list[str]) -> tuple[dict[int, tuple[str, list[int]]], dict[int, list[int]]]:
        """Op groups that other exporters and TVM's importers write for what eager PyTorch runs as one kernel.

        Returns (pointwise groups keyed by their last op, with the kernel's name ("fused:gelu", ...): one
        elementwise kernel each; index normalisations keyed by the gather op that absorbs them). Only exact
        patterns are taken: constants are checked (a GELU chain by evaluating it against torch's GELU), and
        every intermediate result is used only inside the group.
        """
        groups: dict[int, tuple[str, list[int]]] = {}
        absorbed: dict[int, list[int]] = {}
        matchers = {
            "relax.erf": self.gelu_group,
            "relax.tanh": self.gelu_group,
            "relax.sigmoid": self.silu_group,
            "relax.sqrt": self.rsqrt_group,
            "relax.equal": self.not_equal_group,
            "relax.clip": self.clip_group,
            "relax.call_tir": self.clamp_group,
            "relax.variance": self.norm_group,
            "relax.gather_nd": self.adaptive_pool_group,
            "relax.sum": self.l2_norm_group,
            "relax.log": self.softplus_group,
        }
        taken: set[int] = set()
        for op in self.node:
            match = matchers.get(op.op)
            if match is None or roles[op.index] != "kernel" or op.index in taken:
                continue
            found = match(op, roles)
            if found is None:
                continue
            name, group = found
            if not taken & set(group) and all(roles[i] == "kernel" for i in group):
                taken |= set(group)
                groups[group[-1]] = (name, group)
                if op.op == "relax.variance":
                    self.norm_inputs[group[-1]] = op.operands[0].value
                if op.op == "relax.gather_nd":  # (the group's first op is the permute of the pooled value)
                    self.pool_inputs[group[-1]] = self.node[group[0]].operands[0].value
        for op in self.node:
            if op.op == "relax.where" and roles[op.index] == "kernel" and op.index not in taken:
                found = self.index_normalisation(op, roles)
                if found is not None:
                    gather, ops = found
                    absorbed.setdefault(gather, []).extend(ops)
                    taken |= set(ops)
        return groups, absorbed

    def norm_group(self, var: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """Instance and group norm as TVM's ONNX importer writes `InstanceNormalization`: one torch kernel.

        ``(x - mean(x)) / sqrt(variance(x) + eps)`` (mean and variance over the same axes, kept; eps a positive
        one-element constant), then a multiply and an add by input-independent tensors (the node's scale and
        bias: either may be missing). The TorchScript exporter writes `nn.InstanceNorm*` so (eager torch:
        `instance_norm`, one batch-norm kernel) and `nn.GroupNorm` as that over x reshaped to (N, groups, -1)
        with a unit scale and a zero bias, reshaped back to x's shape and scaled and shifted by the layer's
        affine parameters (eager torch: one `native_group_norm`). The reshapes back are views in the group
        (they launch nothing; `emit_group` does not cover them). Op indices (the last op last) or None. A scale
        or shift that depends on a model input (AdaIN's style) is not part of the norm.
        """
        if len(var.operands) != 1 or var.operands[0].value in self.indep or not var.attrs.get("keepdims"):
            return None
        x, axes = var.operands[0].value, var.attrs.get("axis")
        x_shape = self.info[x].shape
        if not axes or not self.info[x].dtype.startswith(("float", "bfloat")):
            return None
        add = self.sole_user(var, roles)
        if add is None or add.op != "relax.add" or len(add.operands) != 2:
            return None
        eps = [self.scalar_value(o.value) for o in add.operands if o.value != self.outputs_of[var.index][0]]
        if len(eps) != 1 or eps[0] is None or not eps[0] > 0:
            return None
        sq = self.sole_user(add, roles)
        div = self.sole_user(sq, roles) if sq is not None and sq.op == "relax.sqrt" else None
        if div is None or div.op != "relax.divide" or len(div.operands) != 2 or div.output.shape != x_shape:
            return None
        if div.operands[1].value != self.outputs_of[sq.index][0]:
            return None
        sub = self.op_of(div.operands[0].value)
        if sub is None or sub.op != "relax.subtract" or roles[sub.index] != "kernel" or len(sub.operands) != 2:
            return None
        mean = self.op_of(sub.operands[1].value)
        if sub.operands[0].value != x or self.sole_user(sub, roles) is not div:
            return None
        if mean is None or mean.op != "relax.mean" or [o.value for o in mean.operands] != [x]:
            return None
        if mean.attrs.get("axis") != axes or not mean.attrs.get("keepdims") or self.sole_user(mean, roles) is not sub:
            return None
        group = [mean.index, sub.index, var.index, add.index, sq.index, div.index]
        cur, affine = self.affine_ops(div, roles)
        group += affine
        name = "fused:instance_norm"
        # a group norm: x is a reshape of the layer's input, reshaped back after the norm, then the layer's affine
        src = self.op_of(x)
        if src is not None and src.op in _RESHAPES and len(src.operands) == 1:
            views, nxt = [], self.sole_user(cur, roles)
            while nxt is not None and nxt.op in _RESHAPES and len(views) < 4:
                views.append(nxt)
                nxt = self.sole_user(nxt, roles)
            if views and views[-1].output.shape == src.operands[0].tensor.shape:
                _, outer = self.affine_ops(views[-1], roles)
                if outer:
                    group += [v.index for v in views] + outer
                    name = "fused:group_norm"
        return name, group

    def adaptive_pool_group(self, gather: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """Adaptive average pooling as torch's dynamo ONNX exporter writes it: one torch kernel.

        Where the input size does not divide the output size (VGG and AlexNet at 64 x 64: 2 x 2 or 1 x 1 to 7 x 7)
        the exporter writes torch's decomposition (`torch._decomp` `adaptive_avg_pool2d`): x (N, C, H, W) permuted to
        (H, W, N, C), one `GatherND` of every pooling window with input-independent indices ((oh, kh, ow, kw, 2),
        kh and kw the largest window), permuted back to (N, C, oh, kh, ow, kw), and then either `mean` over the kh
        and kw axes (every window as large), or up to two `where`s that zero the window elements beyond each
        window's length (input-independent masks, the constant 0), the kh x kw window elements taken out one by one
        (`take` of one constant index per window axis: views) and summed by kh x kw - 1 `add`s, divided by an
        input-independent (oh, ow) tensor of window sizes. Eager torch runs one `adaptive_avg_pool2d` kernel (the
        module route's): reading x once, writing the (N, C, oh, ow) output. Only that exact chain is taken: every
        value inside it is used only inside it, the output keeps x's N and C; op indices (the last op last) or None.
        """
        if len(gather.operands) != 2 or int(gather.attrs.get("batch_dims", 0) or 0) != 0:
            return None

        def users(v: int) -> list[int]:  # the ops reading v's data (`shape_of`, static shapes: the importer's)
            return sorted({c for c in self.consumers.get(v, []) if self.node[c].op != "relax.shape_of"})

        def sole(op: OpNode) -> OpNode | None:  # the one op (a kernel not yet grouped) reading op's one output
            outs = self.outputs_of.get(op.index, [])
            found = users(outs[0]) if len(outs) == 1 and outs[0] not in self.graph_outputs else []
            return self.node[found[0]] if len(found) == 1 and roles[found[0]] == "kernel" else None

        data, idx = (o.value for o in gather.operands)
        perm = self.op_of(data)
        if idx not in self.indep or perm is None or perm.op != "relax.permute_dims" or roles[perm.index] != "kernel":
            return None
        if len(perm.operands) != 1 or sole(perm) is not gather:
            return None
        x = perm.operands[0].value
        xs = self.info[x].shape
        if x in self.indep or len(xs) != 4 or not self.info[x].dtype.startswith(("float", "bfloat")):
            return None
        if list(perm.attrs.get("axes") or []) != [2, 3, 0, 1] or self.info[idx].shape[-1:] != (2,):
            return None
        back = sole(gather)
        if back is None or back.op != "relax.permute_dims" or list(back.attrs.get("axes") or []) != [4, 5, 0, 1, 2, 3]:
            return None
        vals = back.output.shape  # (N, C, oh, kh, ow, kw)
        if len(vals) != 6 or tuple(vals[:2]) != tuple(xs[:2]):
            return None
        out_shape = (vals[0], vals[1], vals[2], vals[4])
        group, cur = [perm.index, gather.index, back.index], back
        for _ in range(2):  # the masks of windows shorter than the largest: where(mask, 0, v)
            nxt = sole(cur)
            if nxt is None or nxt.op != "relax.where" or len(nxt.operands) != 3 or nxt.output.shape != vals:
                break
            cond, a, b = (o.value for o in nxt.operands)
            running = self.outputs_of[cur.index][0]
            if cond not in self.indep or running not in (a, b) or a == b:
                return None
            if self.scalar_value(b if a == running else a) != 0.0:
                return None
            group.append(nxt.index)
            cur = nxt
        nxt = sole(cur)
        if nxt is not None and nxt.op == "relax.mean":  # windows all as large: the mean over (kh, kw)
            axes = sorted(int(a) % 6 for a in nxt.attrs.get("axis") or [])
            if axes != [3, 5] or nxt.attrs.get("keepdims") or tuple(nxt.output.shape) != out_shape:
                return None
            return "relax.nn.adaptive_avg_pool2d", sorted([*group, nxt.index])
        # the window elements, one take of a constant index per window axis (views), down to (N, C, oh, ow)
        leaves, frontier = [], [(self.outputs_of[cur.index][0], (3, 5))]
        while frontier:
            v, axes = frontier.pop()
            if not axes:
                leaves.append(v)
                continue
            readers = users(v)
            if not readers or v in self.graph_outputs:
                return None
            taken_axes = set()
            for u in readers:
                t = self.node[u]
                if t.op != "relax.take" or roles[u] != "kernel" or not self.is_view_op(t) or t.operands[0].value != v:
                    return None
                taken_axes.add(int(t.attrs.get("axis", 0) or 0) % self.info[v].ndim)
            # one take per element of one window axis
            if (
                len(taken_axes) != 1
                or not taken_axes <= set(axes)
                or len(readers) != self.info[v].shape[min(taken_axes)]
            ):
                return None
            (axis,) = taken_axes
            for u in readers:
                group.append(u)
                frontier.append((self.outputs_of[u][0], tuple(a - (a > axis) for a in axes if a != axis)))
        if len(leaves) != vals[3] * vals[5] or any(tuple(self.info[v].shape) != out_shape for v in leaves):
            return None
        # the sum: kh x kw - 1 adds, each of two values of the sum so far, every leaf read once
        pending, adds = set(leaves), 0
        while len(pending) > 1:
            progressed = False
            for v in sorted(pending):
                found = users(v)
                add_i = found[0] if len(found) == 1 and v not in self.graph_outputs else None
                if add_i is None or roles[add_i] != "kernel" or add_i in group:
                    continue
                add = self.node[add_i]
                pair = [o.value for o in add.operands]
                if add.op != "relax.add" or len(pair) != 2 or pair[0] == pair[1] or not set(pair) <= pending:
                    continue
                if tuple(add.output.shape) != out_shape:
                    return None
                pending -= set(pair)
                pending.add(self.outputs_of[add_i][0])
                group.append(add_i)
                adds += 1
                progressed = True
                break
            if not progressed:
                return None
        (total,) = pending
        found = users(total)
        div_i = found[0] if len(found) == 1 and total not in self.graph_outputs else None
        div = self.node[div_i] if div_i is not None and roles[div_i] == "kernel" else None
        if div is None or div.op != "relax.divide" or len(div.operands) != 2 or div.operands[0].value != total:
            return None
        if div.operands[1].value not in self.indep or tuple(div.output.shape) != out_shape or adds != len(leaves) - 1:
            return None
        group = sorted([*group, div.index])
        members = set(group)
        for i in group[:-1]:  # nothing inside leaves it
            for v in self.outputs_of.get(i, []):
                if v in self.graph_outputs or not set(users(v)) <= members:
                    return None
        return "relax.nn.adaptive_avg_pool2d", group

    def emit_adaptive_pool(self, group: list[int], x: int, emit, read_bytes) -> None:
        """The one `adaptive_avg_pool2d` kernel of an `adaptive_pool_group`: as the module route's (`emit_op`), it
        reads x (N, C, H, W) once and writes the (N, C, oh, ow) output (bytes); its FLOPs are its Relax ops' sum."""
        last = self.node[group[-1]]
        covered = [i for i in group if i == last.index or not self.is_view_op(self.node[i])]
        flops = sum(self.costs[i].flops for i in covered)
        numel = max(self.info[x].numel, last.output.numel)
        kind = "reduction" if all(d == 1 for d in last.output.shape[2:]) else "pooling"  # (as `emit_op`)
        name = self.group_names.get(last.index, last.op)
        emit(kind, name, covered, flops, read_bytes(x), last.output.nbytes, last.output.dtype, {"numel": numel})

    def affine_ops(self, cur: OpNode, roles: list[str]) -> tuple[OpNode, list[int]]:
        """A multiply, then an add, each of `cur`'s result by an input-independent tensor that does not widen it
        (a norm's scale and shift; either may be missing): (the last op, the op indices taken)."""
        taken = []
        for want in ("relax.multiply", "relax.add"):
            nxt = self.sole_user(cur, roles)
            if nxt is None or nxt.op != want or len(nxt.operands) != 2 or nxt.output.shape != cur.output.shape:
                continue
            other = [o.value for o in nxt.operands if o.value != self.outputs_of[cur.index][0]]
            if len(other) == 1 and other[0] in self.indep:
                taken.append(nxt.index)
                cur = nxt
        return cur, taken

    def sole_user(self, op: OpNode, roles: list[str]) -> OpNode | None:
        """The one op reading `op`'s single output (a kernel not yet grouped), or None."""
        outs = self.outputs_of.get(op.index, [])
        if len(outs) != 1:
            return None
        c = self.only_consumer(outs[0])
        return None if c is None or roles[c] != "kernel" else self.node[c]

    def evaluate(self, group: set[int], x: int, out: int, xval: float) -> float | None:
        """The value of `out` for x = xval, computed through the ops of `group` (None if not computable)."""
        memo: dict[int, float] = {x: xval}

        def ev(v: int) -> float:
            if v in memo:
                return memo[v]
            c = self.scalar_value(v)
            if c is not None:
                return c
            op = self.op_of(v)
            if op is None or op.index not in group:
                raise ValueError(v)
            args = [ev(o.value) for o in op.operands]
            f = _EVAL_UNARY.get(op.op) if len(args) == 1 else _EVAL_BINARY.get(op.op)
            if f is None:
                raise ValueError(op.op)
            memo[v] = f(*args)
            return memo[v]

        try:
            val = ev(out)
        except (ValueError, ZeroDivisionError, OverflowError, RecursionError):
            return None
        return val if isinstance(val, float | int) else None

    def gelu_group(self, e: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """GELU written out by an exporter: x -> ... -> erf or tanh -> ... -> gelu(x), or None.

        The chain from x to the erf/tanh (any pointwise ops on x and one-element constants), then up to
        four ops after it, each combining the running value with a constant or x itself, must compute
        torch's GELU (erf form for erf, tanh form for tanh) at every point of `_GELU_POINTS`. This takes
        the spellings of torch's ONNX exporters (`mul(mul(x, 1 + erf(x / sqrt 2)), 0.5)`; onnxscript's
        `mul(x, mul(0.5, 1 + erf(...)))`; the tanh forms with `x * x * x` or `pow(x, 3)`), paddle2onnx's,
        and TVM's TFLite GELU (`x * (0.5 + erf(x * sqrt 0.5) * 0.5)`). It does not take GELU written out in
        Python (`0.5 * x * (1 + tanh(...))`, HF's `gelu_new` for GPT-2): Python multiplies 0.5 by x first,
        a tensor of its own, and eager PyTorch runs those ops as separate kernels.
        """
        if len(e.operands) != 1 or e.operands[0].value in self.indep:
            return None
        candidates: list[int] = []
        frontier = [e.operands[0].value]
        for _ in range(6):  # x is within a few pointwise ops of the erf / tanh
            nxt = []
            for v in frontier:
                op = self.op_of(v)
                if op is None or not (op.op in _EVAL_UNARY or op.op in _EVAL_BINARY):
                    continue
                for o in op.operands:
                    if o.value not in self.indep and o.value not in candidates:
                        candidates.append(o.value)
                        nxt.append(o.value)
            frontier = nxt
        for x in candidates:
            group = self.gelu_from(x, e, roles)
            if group:
                return ("fused:gelu" if e.op == "relax.erf" else "fused:gelu_tanh"), group
        return None

    def gelu_from(self, x: int, e: OpNode, roles: list[str]) -> list[int] | None:
        """The GELU group of `gelu_group` with `x` as its input, or None."""
        shape = e.output.shape
        if self.info[x].shape != shape or not self.info[x].dtype.startswith(("float", "bfloat")):
            return None
        group: set[int] = set()
        stack = [e.operands[0].value]
        while stack:  # the erf / tanh argument: pointwise ops on x and one-element constants only
            v = stack.pop()
            if v == x or self.scalar_value(v) is not None:
                continue
            op = self.op_of(v)
            if op is not None and op.index in group:
                continue
            if op is None or v in self.indep or roles[op.index] != "kernel" or len(group) >= 8:
                return None
            if not (op.op in _EVAL_UNARY or op.op in _EVAL_BINARY) or op.output.shape != shape:
                return None
            group.add(op.index)
            stack.extend(o.value for o in op.operands)
        group.add(e.index)
        cur = e
        for _ in range(4):
            nxt = self.sole_user(cur, roles)
            if nxt is None or nxt.op not in _EVAL_BINARY or nxt.output.shape != shape or len(nxt.operands) != 2:
                return None
            cur_out = self.outputs_of[cur.index][0]
            others = [o.value for o in nxt.operands if o.value != cur_out]
            if len(others) != 1 or not (others[0] == x or self.scalar_value(others[0]) is not None):
                return None
            group.add(nxt.index)
            cur = nxt
            out = self.outputs_of[cur.index][0]
            ref = _GELU_REFERENCE[e.op]
            if all(
                (y := self.evaluate(group, x, out, p)) is not None and abs(y - ref(p)) <= _GELU_RTOL * abs(ref(p))
                for p in _GELU_POINTS
            ):
                inside = group - {cur.index}
                for i in inside:
                    for v in self.outputs_of.get(i, []):
                        if v in self.graph_outputs or not set(self.consumers.get(v, [])) <= group:
                            return None
                return sorted(group)
        return None

    def silu_group(self, sig: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """SiLU as `mul(x, sigmoid(x))` (torch's ONNX exporters, TFLite's LOGISTIC + MUL): one kernel."""
        if len(sig.operands) != 1:
            return None
        x = sig.operands[0].value
        mul = self.sole_user(sig, roles)
        if mul is None or mul.op != "relax.multiply" or mul.output.shape != sig.output.shape:
            return None
        if sorted(o.value for o in mul.operands) != sorted([x, self.outputs_of[sig.index][0]]):
            return None
        return "fused:silu", [sig.index, mul.index]

    def softplus_group(self, log: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """Softplus as TVM's ONNX importer writes ONNX `Softplus` (torch's exporters' `F.softplus`, beta 1):
        `add(maximum(x, 0), log(add(1, exp(negative(abs(x))))))`: one kernel, as eager torch runs it. The two
        constants are checked; every intermediate result is read only by the next op of the chain."""
        if len(log.operands) != 1:
            return None
        one = self.op_of(log.operands[0].value)
        if one is None or one.op != "relax.add" or len(one.operands) != 2 or self.sole_user(one, roles) is not log:
            return None
        consts = [o.value for o in one.operands if self.scalar_value(o.value) is not None]
        exp = [self.op_of(o.value) for o in one.operands if o.value not in consts]
        if len(consts) != 1 or self.scalar_value(consts[0]) != 1.0 or len(exp) != 1 or exp[0] is None:
            return None
        chain = [exp[0]]  # exp <- negative <- abs <- x, each read only by the next
        for name in ("relax.exp", "relax.negative", "relax.abs"):
            op = chain[-1]
            if op.op != name or len(op.operands) != 1 or roles[op.index] != "kernel":
                return None
            if len(chain) > 1 and self.sole_user(op, roles) is not chain[-2]:
                return None
            if name != "relax.abs":
                nxt = self.op_of(op.operands[0].value)
                if nxt is None:
                    return None
                chain.append(nxt)
        if self.sole_user(exp[0], roles) is not one:
            return None
        x = chain[-1].operands[0].value
        total = self.sole_user(log, roles)
        if total is None or total.op != "relax.add" or len(total.operands) != 2:
            return None
        mx = [self.op_of(o.value) for o in total.operands if o.value != self.outputs_of[log.index][0]]
        if len(mx) != 1 or mx[0] is None or mx[0].op != "relax.maximum" or len(mx[0].operands) != 2:
            return None
        zero = [o.value for o in mx[0].operands if o.value != x]
        if len(zero) != 1 or self.scalar_value(zero[0]) != 0.0 or self.sole_user(mx[0], roles) is not total:
            return None
        if total.output.shape != self.info[x].shape:
            return None
        return "fused:softplus", sorted([mx[0].index, *(op.index for op in chain), one.index, log.index, total.index])

    def vector_norm_group(self, ab: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """torch's `linalg_vector_norm` (`F.normalize`, `x.norm(dim=...)`) as TVM's torch importer writes it
        (`_norm`): `power(sum(power(abs(x), p)), 1 / p)`, or `max`/`min` of `abs(x)` for p = +-inf: one reduction
        kernel, as eager runs it. p and 1 / p are checked; every intermediate result is read only by the next op."""
        nxt = self.sole_user(ab, roles)
        if nxt is None or not nxt.operands or nxt.operands[0].value != self.outputs_of[ab.index][0]:
            return None
        if nxt.op in ("relax.max", "relax.min") and len(nxt.operands) == 1:
            return "fused:vector_norm", [ab.index, nxt.index]
        if nxt.op != "relax.power" or len(nxt.operands) != 2:
            return None
        p = self.scalar_value(nxt.operands[1].value)
        total = self.sole_user(nxt, roles)
        if not p or total is None or total.op != "relax.sum" or len(total.operands) != 1:
            return None
        root = self.sole_user(total, roles)
        if root is None or root.op != "relax.power" or len(root.operands) != 2:
            return None
        q = self.scalar_value(root.operands[1].value)
        if root.operands[0].value != self.outputs_of[total.index][0] or q is None or abs(p * q - 1) > 1e-6:
            return None
        return "fused:vector_norm", [ab.index, nxt.index, total.index, root.index]

    def l2_norm_group(self, total: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """ONNX `ReduceL2` as TVM's importer writes it, `sqrt(sum(x * x))` (the same x twice): torch's
        `linalg_vector_norm`, one reduction kernel."""
        sq = self.op_of(total.operands[0].value) if len(total.operands) == 1 else None
        if sq is None or sq.op != "relax.multiply" or len(sq.operands) != 2 or roles[sq.index] != "kernel":
            return None
        if sq.operands[0].value != sq.operands[1].value or self.sole_user(sq, roles) is not total:
            return None
        root = self.sole_user(total, roles)
        if root is None or root.op != "relax.sqrt":
            return None
        return "fused:vector_norm", [sq.index, total.index, root.index]

    def rsqrt_group(self, sq: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """`1 / sqrt(x)`: torch's rsqrt as the ONNX exporter writes it (Sqrt, Reciprocal): one kernel."""
        div = self.sole_user(sq, roles)
        if div is None or div.op != "relax.divide" or len(div.operands) != 2:
            return None
        num, den = (o.value for o in div.operands)
        if den != self.outputs_of[sq.index][0] or self.scalar_value(num) != 1.0:
            return None
        return "fused:rsqrt", [sq.index, div.index]

    def not_equal_group(self, eq: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """`not(equal(a, b))`: torch's `ne` as the ONNX exporter writes it: one kernel."""
        neg = self.sole_user(eq, roles)
        return ("fused:ne", [eq.index, neg.index]) if neg is not None and neg.op == "relax.logical_not" else None

    def clamp_group(self, mx: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """TVM's ONNX `Clip` with min and max inputs: TIR `maximum` then `minimum` (torch's clamp, one kernel)."""
        if not (mx.callee or "").startswith("maximum") or len(mx.operands) != 2:
            return None
        if not self.is_scalar_const(mx.operands[1].value):  # (the importer's NaN guard makes the bound a folded op)
            return None
        mn = self.sole_user(mx, roles)
        if mn is None or mn.op != "relax.call_tir" or not (mn.callee or "").startswith("minimum"):
            return None
        if len(mn.operands) != 2 or not self.is_scalar_const(mn.operands[1].value):
            return None
        return "fused:clamp", [mx.index, mn.index]

    def clip_group(self, clip: OpNode, roles: list[str]) -> tuple[str, list[int]] | None:
        """Hard activations as the ONNX and TFLite importers write them (one kernel each in torch).

        hardsigmoid (ONNX `HardSigmoid`, alpha 1/6, beta 0.5): `clip(add(mul(x, 1/6), 0.5), 0, 1)`, and
        hardswish as `x * hardsigmoid(x)`; hardswish (TFLite `HARD_SWISH`): `mul(x, clip(add(x, 3), 0, 6)) / 6`.
        """
        lo, hi = clip.attrs.get("min"), clip.attrs.get("max")
        if len(clip.operands) != 1:
            return None
        add = self.op_of(clip.operands[0].value)
        if (
            add is None
            or add.op != "relax.add"
            or roles[add.index] != "kernel"
            or self.sole_user(add, roles) is not clip
        ):
            return None
        consts = [self.scalar_value(o.value) for o in add.operands]
        xs = [o.value for o, c in zip(add.operands, consts, strict=True) if c is None]
        const = next((c for c in consts if c is not None), None)
        if len(xs) != 1 or const is None:
            return None
        clip_out = self.outputs_of[clip.index][0]
        if (lo, hi) == (0.0, 1.0) and const == 0.5:  # hardsigmoid
            mul = self.op_of(xs[0])
            if mul is None or mul.op != "relax.multiply" or self.sole_user(mul, roles) is not add:
                return None
            scale = [self.scalar_value(o.value) for o in mul.operands]
            x = [o.value for o, c in zip(mul.operands, scale, strict=True) if c is None]
            alpha = next((c for c in scale if c is not None), None)
            if len(x) != 1 or alpha is None or abs(alpha * 6 - 1) > 1e-6:
                return None
            group = [mul.index, add.index, clip.index]
            swish = self.sole_user(clip, roles)
            if swish is not None and swish.op == "relax.multiply":
                if sorted(o.value for o in swish.operands) == sorted([x[0], clip_out]):
                    return "fused:hardswish", [*group, swish.index]
            return "fused:hardsigmoid", group
        if (lo, hi) == (0.0, 6.0) and const == 3.0:  # TFLite hardswish: x * relu6(x + 3) / 6
            mul = self.sole_user(clip, roles)
            if mul is None or mul.op != "relax.multiply":
                return None
            if sorted(o.value for o in mul.operands) != sorted([xs[0], clip_out]):
                return None
            div = self.sole_user(mul, roles)
            if div is None or div.op != "relax.divide" or len(div.operands) != 2:
                return None
            if self.scalar_value(div.operands[1].value) != 6.0:
                return None
            return "fused:hardswish", [add.index, clip.index, mul.index, div.index]
        return None

    def index_normalisation(self, where: OpNode, roles: list[str]) -> tuple[int, list[int]] | None:
        """`where(idx < 0, idx + n, idx)` before a gather, n = the gathered axis's size (TVM's ONNX Gather).

        torch's index kernels take the indices as they are: the three ops are part of the gather.
        Returns (the first gather reading it, the three op indices), or None.
        """
        if len(where.operands) != 3:
            return None
        cond, wrapped, idx = (o.value for o in where.operands)
        less, add = self.op_of(cond), self.op_of(wrapped)
        if less is None or add is None or less.op != "relax.less" or add.op != "relax.add":
            return None
        if roles[less.index] != "kernel" or roles[add.index] != "kernel":
            return None
        if [o.value for o in less.operands][:1] != [idx] or self.scalar_value(less.operands[1].value) != 0.0:
            return None
        others = [o.value for o in add.operands if o.value != idx]
        if len(add.operands) != 2 or len(others) != 1:
            return None
        n = self.scalar_value(others[0])
        if n is None or self.sole_user(less, roles) is not where or self.sole_user(add, roles) is not where:
            return None
        out = self.outputs_of[where.index][0]
        users = sorted(set(self.consumers.get(out, [])))
        if not users or out in self.graph_outputs:
            return None
        for u in users:
            g = self.node[u]
            if (
                g.op not in ("relax.take", "relax.gather_elements")
                or len(g.operands) != 2
                or g.operands[1].value != out
            ):
                return None
            data = g.operands[0].tensor
            axis = int(g.attrs.get("axis", 0) or 0) % max(data.ndim, 1)
            if data.ndim == 0 or data.shape[axis] != n or roles[u] != "kernel":
                return None
        return users[0], [less.index, add.index, where.index]

    def emit_group(self, group: list[int], emit, read_bytes, kind: str = "elementwise") -> None:
        """One kernel for a group of ops: reads the group's outside operands once, writes what leaves it.

        Views inside the group (a group norm's reshapes) are free: they pass values on and are not covered.
        """
        members = set(group)
        inside = {v for i in group for v in self.outputs_of.get(i, [])}
        # one-element constants (3 and 6 of hardswish, GELU's 0.5) are the kernel's arguments, not memory reads
        outside = {
            o.value
            for i in group
            for o in self.node[i].operands
            if o.value not in inside and not self.is_scalar_const(o.value)
        }
        read = sum(read_bytes(v) for v in outside)
        written = sum(
            self.info[v].nbytes
            for v in inside
            if v in self.graph_outputs or not set(self.consumers.get(v, [])) <= members
        )
        last = self.node[group[-1]]
        covered = [i for i in group if i == last.index or not self.is_view_op(self.node[i])]
        flops = sum(self.costs[i].flops for i in covered)
        numel = max(self.info[v].numel for v in inside | outside)
        name = self.group_names.get(last.index, last.op)
        params = {"numel": numel}
        if name == "fused:group_norm":  # x reshaped to (N, groups, -1), its variance over the last axes: the rows
            var = next(self.node[i] for i in group if self.node[i].op == "relax.variance")
            x = self.info[var.operands[0].value]
            per_row = math.prod(x.shape[int(a)] for a in var.attrs.get("axis") or [])
            params = _row_params(x.numel, per_row) or params
        emit(kind, name, covered, flops, read, written, last.output.dtype, params)

    def is_pointwise(self, op: OpNode) -> bool:
        cost = self.costs[op.index]
        return cost.category == "elementwise" or op.op in _CASTS or self.is_view_op(op) or op.op == "relax.split"

    def recurrences(self, roles: list[str], fused_into: dict[int, int]) -> list[list[int]]:
        """The per-step gate ops of recurrent layers: lists of op indices (the last one launches the kernel).

        A recurrence is a set of matmuls with one weight where each matmul's input depends, through pointwise
        ops only, on the previous one's result (an RNN unrolled over time). Each step's pointwise ops (the
        ops depending on step k's matmul, and on no later one) are one kernel, as cuDNN runs them. Only the ops
        of one RNN library call (`OpNode.library_call`: an `nn.LSTM`/`nn.GRU`/`nn.RNN`'s `_cudnn_rnn`, an ONNX
        LSTM/GRU/RNN node) count: a loop of `nn.GRUCell`s in Python is dispatched op by op.
        """
        by_weight: dict[tuple[str, int], list[OpNode]] = {}
        for op in self.node:
            if roles[op.index] not in ("kernel", "folded") or op.op != "relax.matmul" or len(op.operands) != 2:
                continue  # (the first step's matmul is folded when the initial state is a constant zero)
            if op.library_call is None:
                continue  # a Python loop of cells: eager PyTorch dispatches every op of every step
            w = op.operands[1].value
            if w not in self.indep or op.operands[1].tensor.ndim != 2:
                continue
            w = self.view_source(w)
            by_weight.setdefault((op.library_call, w), []).append(op)
        groups: list[list[int]] = []
        bias_of = {p: c for c, p in fused_into.items()}
        for gemms in by_weight.values():
            if len(gemms) < 2:
                continue
            step_of = {g.index: k for k, g in enumerate(gemms)}
            label: dict[int, int] = {}
            for g in gemms:
                for v in self.outputs_of.get(bias_of.get(g.index, g.index), []):
                    label[v] = step_of[g.index]
                if g.index in bias_of:
                    for v in self.outputs_of.get(g.index, []):
                        label[v] = step_of[g.index]
            cells: dict[int, list[int]] = {}
            recurrent = True
            for op in self.node[gemms[0].index :]:
                if op.index in step_of:
                    k = step_of[op.index]
                    if k > 0 and label.get(op.operands[0].value) != k - 1:
                        recurrent = False
                        break
                    continue
                if roles[op.index] not in ("kernel", "view", "folded") or not self.is_pointwise(op):
                    continue
                if op.library_call != gemms[0].library_call:
                    continue  # outside cuDNN's call: the model's own ops on the layer's results
                steps = [label[o.value] for o in op.operands if o.value in label]
                if not steps:
                    continue
                k = max(steps)
                for v in self.outputs_of.get(op.index, []):
                    label[v] = k
                if roles[op.index] == "kernel" and not self.is_view_op(op):
                    cells.setdefault(k, []).append(op.index)
            if recurrent:
                groups.extend(cell for _, cell in sorted(cells.items()) if len(cell) > 1)
        return groups

    def recurrence_io(
        self, in_group: set[int], rnn_calls: set[str], fused_into: dict[int, int]
    ) -> tuple[set[int], set[int], set[int]]:
        """What cuDNN's RNN call does around the steps' kernels (`recurrences`): (ops that launch nothing, GEMMs
        whose bias add stays fused, the values the call writes: its steps' results and their stacks).

        `in_group` are the ops of the step groups `recurrences` found, `rnn_calls` the library calls they run in
        (both as `run` derives them from the groups); of the ops around them, only those inside a
        library call (`OpNode.library_call`) count here: a model's own `torch.stack` of a GRUCell loop's states
        is a kernel. The importer's concat / stack of the steps' results (the output sequence, the final h and c)
        launch nothing: cuDNN writes them in place (a bidirectional layer's concat of both directions too); the
        importer's flip of the reverse direction's sequence launches nothing either (cuDNN reads it in reverse), nor
        does a view of its outputs inside the call that would need a copy (the third set returned; the walk's:
        ONNX's Y [T, dirs, B, H] transposed and reshaped to [T, B, dirs x H], which cuDNN writes in that layout).
        The GEMM of every step's input (one over the sequence) has its bias added inside cuDNN, whatever the
        input's layout (cuDNN copies a batch-first input to sequence-first, `input.contiguous()` in RNN.cpp: the
        copy stays, the bias add is no kernel of its own).
        """
        produced = {v for i in in_group for v in self.outputs_of.get(i, [])}
        written: set[int] = set()
        for op in self.node:  # in order: a bidirectional layer's concat reads the directions' stacks
            if op.library_call is None or not op.operands:  # the importer's ops inside the call only
                continue
            if op.op == "relax.flip" and op.library_call in rnn_calls:
                # the reverse direction's sequence flipped for its steps: cuDNN reads it in reverse, no copy
                written.add(op.index)
            elif op.op in ("relax.concat", "relax.stack"):
                if all(self.view_source(o.value) in produced for o in op.operands):
                    written.add(op.index)
                    produced.update(self.outputs_of.get(op.index, []))
        gemms = set()
        for i in in_group:
            for o in self.node[i].operands:
                p = self.op_of(self.view_source(o.value))
                if p is not None and p.index in fused_into and p.library_call is not None:
                    gemms.add(fused_into[p.index])
        return written, gemms, produced

    def masked_fills(self, roles: list[str]) -> list[int]:
        """masked_fill as TVM's torch importer writes it, `where(mask, full_like(x, v), x)`: eager runs one kernel,
        the fill value a scalar argument. Marks each such `full_like` "fused" and returns its output values (the walk
        reads them as stride-0 tensors: one element)."""
        out: list[int] = []
        for op in self.node:
            outs = self.outputs_of.get(op.index, [])
            if op.op != "relax.full_like" or roles[op.index] != "kernel" or len(outs) != 1 or not op.operands:
                continue
            w = self.sole_user(op, roles)
            if w is not None and w.op == "relax.where" and len(w.operands) == 3 and w.operands[1].value == outs[0]:
                x = self.op_of(w.operands[2].value)  # x itself, or x cast to the fill's dtype (below)
                cast = x is not None and x.op == "relax.astype" and x.operands[0].value == op.operands[0].value
                if w.operands[2].value == op.operands[0].value or cast:
                    roles[op.index] = "fused"
                    out.append(outs[0])
        return out

    def typed_fills(self, roles: list[str]) -> dict[int, int]:
        """`torch.zeros_like(m, dtype=f)` (`F._canonical_mask` turning a bool mask into a float one): TVM's torch
        importer writes `zeros_like(m)` in m's dtype, then the `masked_fill_` that follows as `where(m, full_like(z,
        v), astype(z, f))`. Eager fills the float tensor in one kernel. Returns {the astype: the zeros_like} for a
        zeros_like whose output only that astype and fused `full_like`s (`masked_fills`: they read its shape) use,
        where the cast is what that masked fill fills; the zeros_like is marked "fused"."""
        out: dict[int, int] = {}
        for op in self.node:
            outs = self.outputs_of.get(op.index, [])
            if op.op != "relax.zeros_like" or roles[op.index] != "kernel" or len(outs) != 1:
                continue
            users = [self.node[c] for c in set(self.consumers.get(outs[0], []))]
            casts = [u for u in users if u.op == "relax.astype" and roles[u.index] == "kernel"]
            fills = [u for u in users if u.op == "relax.full_like" and roles[u.index] == "fused"]
            if len(casts) != 1 or not fills or len(casts) + len(fills) != len(users):
                continue
            where = self.only_consumer(self.outputs_of[casts[0].index][0])
            filled = {self.only_consumer(self.outputs_of[f.index][0]) for f in fills}
            if where is not None and filled == {where}:  # the cast is what the masked fill fills
                roles[op.index] = "fused"
                out[casts[0].index] = op.index
        return out

    # -- functionalised in-place updates ------------------------------------------------------
    def alias_of(self, aliases: dict[int, _Alias], vid: int) -> _Alias:
        a = aliases.get(vid)
        return a if a is not None else _Alias(vid, -1, (), frozenset())

    def alias_step(self, op: OpNode, a: _Alias) -> _Alias | None:
        """`a` seen through the view op `op` (one of `_ALIAS_VIEWS`); None where the step is not followed (a
        symbolic shape, a slice whose bounds are not constants)."""
        root_shape = tuple(self.info[a.root].shape)
        shape = a.steps[-1][-1] if a.steps else root_shape
        out = tuple(op.output.shape)
        if not all(isinstance(d, int) for d in (*root_shape, *out)):
            return None
        steps = a.steps
        if op.op == "relax.permute_dims":
            axes = op.attrs.get("axes")
            nd = len(shape)
            axes = tuple(range(nd))[::-1] if axes is None else tuple(int(x) % nd for x in axes)
            steps = _alias_push(steps, root_shape, ("permute", axes, out))
        elif op.op == "relax.strided_slice":
            axes, begin, end = (op.attrs.get(k) for k in ("axes", "begin", "end"))
            step = op.attrs.get("steps") or [1] * len(axes or [])
            if not all(isinstance(v, list) and len(v) == len(axes) for v in (axes, begin, end, step)):
                return None
            for bounds in zip(axes, begin, end, step, strict=True):
                sl = _slice_step(shape, *bounds)
                if sl is None:
                    return None
                steps, shape = _alias_push(steps, root_shape, sl), sl[-1]
            if shape != out:
                return None
        else:  # reshape, flatten, expand_dims, squeeze
            steps = _alias_push(steps, root_shape, ("reshape", out))
        return _Alias(a.root, a.write, steps, a.ops | {op.index})

    def scatter_hit(
        self, op: OpNode, aliases: dict[int, _Alias], roles: list[str], writes: dict[int, int]
    ) -> tuple[_Alias, int, frozenset[int]] | None:
        """For a `slice_scatter(base, src)` as eager PyTorch ran it in place: the base's alias, the update (the index of
        the pointwise op that wrote the region, or of the scatter itself where it is `region.copy_(src)`) and the views
        and scatters it rests on; None where it cannot be (a symbolic shape, bounds that are not constants)."""
        base, src = (o.value for o in op.operands)
        b = self.alias_of(aliases, base)
        root_shape = tuple(self.info[b.root].shape)
        shape = b.steps[-1][-1] if b.steps else root_shape
        try:
            axis, start, end, step = (int(op.attrs[k]) for k in ("axis", "start", "end", "step"))
        except (KeyError, TypeError, ValueError):
            return None
        if not all(isinstance(d, int) for d in shape):
            return None
        sl = _slice_step(shape, axis, start, end, step)
        if sl is None or sl[-1] != tuple(self.info[src].shape):
            return None
        region = _alias_push(b.steps, root_shape, sl)
        copy_in = b, op.index, b.ops | {op.index}  # `region.copy_(src)`: one copy kernel into the base
        if self.consumers.get(src) != [op.index] or src in self.graph_outputs:
            return copy_in
        s = aliases.get(src)
        if s is not None and s.root == b.root and writes.get(s.write) == b.write and s.steps == region:
            return b, s.write, b.ops | s.ops | {op.index}  # a view of the update of a slice of this region
        p = self.op_of(src)
        if p is None or not p.operands or roles[p.index] != "kernel" or self.is_view_op(p):
            return copy_in
        if self.costs[p.index].category not in _POINTWISE_CATEGORIES:
            return copy_in
        x = p.operands[0].value  # `x.mul_(m)`: torch's functionalisation makes it `mul(x, m)`
        ax = self.alias_of(aliases, x)
        same = tuple(self.info[x].shape) == tuple(p.output.shape) and self.info[x].dtype == p.output.dtype
        if same and (ax.root, ax.write, ax.steps) == (b.root, b.write, region):
            return b, p.index, b.ops | ax.ops | {op.index}
        return copy_in

    def inplace_scatters(self, roles: list[str]) -> dict[int, tuple[frozenset[int], bool]]:
        """The `slice_scatter` ops that eager PyTorch ran in place: op index -> (the other ops, views and inner
        scatters, that must all be views for that to hold (checked in the walk); whether it is `region.copy_(src)`, one
        copy kernel, rather than the write-back of a pointwise update of the region, which launches nothing). Taken
        only if nothing but views reads the values the update overwrote after it (else eager could not have run it in
        place: the scatter stays a copy of the whole base)."""
        if not any(op.op == "relax.slice_scatter" for op in self.node):
            return {}
        rejected: set[int] = set()
        while True:
            aliases: dict[int, _Alias] = {}
            found: dict[int, tuple[int, int, int, frozenset[int]]] = {}  # scatter -> (root, old, write, ops)
            writes: dict[int, int] = {}  # an update's op index -> the write (version of its root) it overwrote
            for op in self.node:
                outs = self.outputs_of.get(op.index, [])
                if len(outs) != 1 or not op.operands:
                    continue
                if op.op in _ALIAS_VIEWS and op.eager_copy not in _CLONES:  # (a cloned view is memory of its own)
                    a = self.alias_step(op, self.alias_of(aliases, op.operands[0].value))
                    if a is not None:
                        aliases[outs[0]] = a
                elif op.op == "relax.slice_scatter" and len(op.operands) == 2 and op.index not in rejected:
                    hit = self.scatter_hit(op, aliases, roles, writes)
                    if hit is not None:
                        b, write, ops = hit
                        found[op.index] = (b.root, b.write, write, ops)
                        writes.setdefault(write, b.write)
                        aliases[outs[0]] = _Alias(b.root, write, b.steps, ops)
            last_read: dict[tuple[int, int], int] = {}  # (root, write) -> the last op reading it (not a view)
            for op in self.node:
                if op.op in _ALIAS_VIEWS and op.eager_copy not in _CLONES:
                    continue
                for k, o in enumerate(op.operands):
                    if k == 0 and op.index in found:
                        continue  # the write-back's base
                    a = self.alias_of(aliases, o.value)
                    last_read[(a.root, a.write)] = op.index
            for vid in self.graph_outputs:  # a value the model returns is read after every op
                a = self.alias_of(aliases, vid)
                last_read[(a.root, a.write)] = len(self.node)
            # a root the model cloned (`OpNode.eager_copy`, one copy kernel charged where it is made) is two buffers in
            # eager: the update runs in place on one while later readers of the old values read the other
            cloned = {r for r, *_ in found.values() if (p := self.op_of(r)) is not None and p.eager_copy in _CLONES}
            stale = {
                i
                for i, (root, old, write, _) in found.items()
                if last_read.get((root, old), -1) > write and root not in cloned
            }
            if not stale:
                return {i: (ops - {i}, write == i) for i, (_, _, write, ops) in found.items()}
            rejected |= stale

    @staticmethod
    def eager_copies(op: OpNode, strides: Strides) -> bool:
        """Whether eager PyTorch copies the result of `op`, laid out as `strides`, where the importer passed a
        `.clone()` (always) or a `.contiguous()` (when not contiguous) through (`OpNode.eager_copy`)."""
        if op.eager_copy in _CLONES:
            return True
        return op.eager_copy == "contiguous" and not is_contiguous(op.output.shape, strides)

    @staticmethod
    def copy_layout(op: OpNode, strides: Strides) -> Strides:
        """The strides of the copy `eager_copies` makes: `.clone()` keeps a dense layout (preserve_format), else
        contiguous."""
        shape = op.output.shape
        order = _dense_order(shape, strides) if op.eager_copy == "clone" else None
        return contiguous_strides(shape) if order is None else _permuted_contiguous(shape, order)

    def view_layout(self, op: OpNode, strides) -> list[Strides] | None:
        """Strides of the outputs of a view op, or None if torch has to copy."""
        src = op.operands[0].value
        t = self.info[src]
        st = strides(src)
        out = op.output.shape
        name = op.op
        if name in _RESHAPES:
            new = view_strides(t.shape, st, out)
            return None if new is None else [new]
        if name == "relax.permute_dims":
            axes = op.attrs.get("axes")
            axes = list(range(t.ndim))[::-1] if axes is None else [a % max(t.ndim, 1) for a in axes]
            return [tuple(st[a] for a in axes)]
        if name == "relax.broadcast_to":
            lead = len(out) - t.ndim
            new = [0] * lead
            for d, s, o in zip(t.shape, st, out[lead:], strict=True):
                new.append(0 if d == 1 and o != 1 else s)
            return [tuple(new)]
        if name in ("relax.expand_dims", "relax.squeeze") or (name == "relax.take"):
            keep = [(d, s) for d, s in zip(t.shape, st, strict=True) if d != 1]
            if name == "relax.take":
                axis = int(op.attrs.get("axis", 0) or 0) % t.ndim
                keep = [(d, s) for j, (d, s) in enumerate(zip(t.shape, st, strict=True)) if d != 1 and j != axis]
            it = iter(keep)
            new = []
            for d in out:
                if d == 1:
                    new.append(1)
                else:
                    nd, ns = next(it, (d, 1))
                    new.append(ns)
            return [tuple(new)]
        if name == "relax.split":
            return [st] * len(op.outputs)
        # strided_slice (unit steps), dropout and wrap_param keep the strides; astype to the same dtype too
        if len(out) == t.ndim:
            return [st]
        return [contiguous_strides(out)]

    def matmul_copies(self, op: OpNode, strides, copied, copy) -> None:
        """Copies torch makes to fold a matmul's operands for cuBLAS (`matmul` -> reshape -> mm/bmm): temporaries
        of the call (`copied`), which torch makes again for the next matmul of the same value (three projections
        of one transposed input: three copies, as torch's profiler shows)."""
        a, b = op.operands
        out = op.output.shape
        if a.tensor.ndim >= 2 and b.tensor.ndim == 2:
            shape, st = a.tensor.shape, strides(a.value)
            folded = (math.prod(shape[:-1]), shape[-1])
            new = view_strides(shape, st, folded)
            # (torch.matmul folds with this copy: `should_fold` does when the weight requires grad, as a module's
            # parameters do even under inference_mode)
            if new is None or not _cublas_ok(folded, new):
                copy(a.value, op)
                copied(a.value)
            if not _cublas_ok(b.tensor.shape, strides(b.value)):
                copy(b.value, op)
                copied(b.value)
            return
        if a.tensor.ndim >= 3 or b.tensor.ndim >= 3:
            batch = out[:-2]
            for o in (a, b):
                shape, st = o.tensor.shape, strides(o.value)
                if len(shape) < 2:
                    continue
                lead = len(batch) + 2 - len(shape)
                full = batch + shape[-2:]
                est = tuple(
                    [0] * lead
                    + [
                        0 if d == 1 and f != 1 else s
                        for d, s, f in zip(shape[:-2], st[:-2], batch[lead:], strict=False)
                    ]
                    + list(st[-2:])
                )
                folded = (math.prod(batch), *shape[-2:])
                new = view_strides(full, est, folded)
                if new is None or not _cublas_ok(folded, new):
                    copy(o.value, op, full)
                    copied(o.value)

    def einsum_plan(self, op: OpNode) -> EinsumPlan | None:
        """`einsum_plan` of a `relax.einsum` op, worked out once (the copies, the layout and the params read it)."""
        if op.index not in self._einsum_plans:
            shapes = [o.tensor.shape for o in op.operands]
            self._einsum_plans[op.index] = einsum_plan(str(op.attrs.get("subscripts", "")), shapes)
        return self._einsum_plans[op.index]

    def einsum_copies(self, op: OpNode, strides, copy) -> None:
        """Copies `torch.einsum` makes to reshape its permuted operands to the 3-D operands of its `bmm`
        (`EinsumPlan`): inside the call, so the operand keeps its own layout for other readers."""
        plan = self.einsum_plan(op)
        if plan is None:
            return
        for o, order, shape3 in (
            (op.operands[0], plan.left, plan.left_shape),
            (op.operands[1], plan.right, plan.right_shape),
        ):
            shape, st = o.tensor.shape, strides(o.value)
            new = view_strides(tuple(shape[d] for d in order), tuple(st[d] for d in order), shape3)
            if new is None or not _cublas_ok(shape3, new):
                copy(o.value, op)

    def blas_calls(self, roles: list[str]) -> dict[int, tuple[list[int], int | None, int | None, str]]:
        """The ops TVM's importers write for one eager BLAS call (`graph.BLAS_CALL_OPS`, `OpNode.library_call`; the
        TorchScript exporter's spelling, `exported_baddbmms`): `baddbmm(c, a, b, beta=, alpha=)` as `matmul(a, b)`,
        a multiply by alpha (alpha != 1), a multiply of c by beta (beta != 1) and an `add` (beta != 0). {the matmul:
        (the call's other ops in graph order, the add or None, c as the call reads it (before the beta multiply),
        None where it reads none, the call's label)}, only where every op of the call is still a kernel and of
        exactly that form (anything else stays op by op). Eager runs it as aten/src/ATen/native/LinearAlgebra.cpp
        and cuda/Blas.cpp do: the structured meta function copies c, broadcast, into the result (`result.copy_(self)`
        where beta != 0), then one batched GEMM with alpha and beta reads it back and writes the result: two kernels
        from one dispatch (`Kernel.call`)."""
        by_call: dict[str, list[OpNode]] = {}
        for op in self.node:
            if is_blas_call(op.library_call):
                by_call.setdefault(op.library_call, []).append(op)
        if self.torchscript_onnx:
            by_call.update(self.exported_baddbmms(roles, {o.index for ops in by_call.values() for o in ops}))
        out: dict[int, tuple[list[int], int | None, int | None, str]] = {}
        for label, ops in by_call.items():
            mms = [o for o in ops if o.op == "relax.matmul" and len(o.operands) == 2]
            if len(mms) != 1 or any(roles[o.index] != "kernel" for o in ops):
                continue
            rest = [o for o in ops if o is not mms[0]]
            if rest and all(o.op in ("relax.multiply", "relax.add") and len(o.operands) == 2 for o in rest):
                found = self.blas_form(mms[0], {o.index for o in rest})
                if found is not None:
                    out[mms[0].index] = (sorted(o.index for o in rest), *found, label)
        return out

    def exported_baddbmms(self, roles: list[str], labelled: set[int]) -> dict[str, list[OpNode]]:
        """`baddbmm` as torch's TorchScript ONNX exporter writes it (symbolic_opset9 `baddbmm`): `add(mul(matmul(a,
        b), alpha), mul(c, beta))`, both multiplies written whatever alpha and beta are, a and b 3-D values (batch1,
        batch2), each multiply read by that add alone: {a label: the matmul, the multiplies and the add} for
        `blas_calls`, in ONNX files of torch's TorchScript exporter only (the dynamo exporter's name their calls).
        `mul(c, beta)` of a constant c (BLOOM's ALiBi bias where no attention mask is given) is folded, computed
        once: the call reads its result. A model's own `q @ k * s + mask` has no multiply on the mask's side and
        stays op by op (its `bmm(q, k) * s + mask * t` would be taken: the one spelling both share)."""
        out: dict[str, list[OpNode]] = {}
        for add in self.node:
            if add.op != "relax.add" or roles[add.index] != "kernel" or add.index in labelled or len(add.operands) != 2:
                continue
            pair = [self.op_of(o.value) for o in add.operands]
            if any(p is None or p.index in labelled or not self.scales(p) for p in pair) or pair[0] is pair[1]:
                continue
            if any(self.only_consumer(self.outputs_of[p.index][0]) != add.index for p in pair):
                continue
            sides = [
                (p, m) for p in pair if (m := self.op_of(p.operands[0].value)) is not None and m.op == "relax.matmul"
            ]
            if len(sides) != 1 or len(sides[0][1].operands) != 2 or self._scale_of(sides[0][0]) is None:
                continue
            (alpha, mm), beta = sides[0], next(p for p in pair if p is not sides[0][0])
            a, b = mm.operands
            if a.tensor.ndim == b.tensor.ndim == 3 and a.value not in self.indep and b.value not in self.indep:
                # (labelled as the PyTorch routes label one call: one host dispatch, `Kernel.call`)
                ops = [mm, alpha, add] + ([beta] if roles[beta.index] == "kernel" else [])
                out[f"{BLAS_CALL_OPS[0]}:onnx_{add.index}"] = sorted(ops, key=lambda o: o.index)
        return out

    def scales(self, op: OpNode) -> bool:
        """Whether `op` is `multiply(x, s)`, s a one-element constant, x's shape and dtype out (x any tensor)."""
        if op.op != "relax.multiply" or len(op.operands) != 2:
            return False
        x, s = op.operands
        same = x.tensor.shape == op.output.shape and x.tensor.dtype == op.output.dtype
        return same and self.is_scalar_const(s.value) and not self.is_scalar_const(x.value)

    def blas_form(self, mm: OpNode, members: set[int]) -> tuple[int | None, int | None] | None:
        """(the add or None, c or None) where the ops `members` after the matmul `mm` are baddbmm's form
        (`blas_calls`): `mm` -> [`* alpha`] -> [`+ c` or `+ c * beta`], every intermediate read by the next op
        alone (c None where beta is 0: the exporters' `c * 0`, which eager never reads); None otherwise."""

        def scale_input(p: OpNode) -> int | None:
            """x of a scale multiply `x * s` (`scales`), or None."""
            return p.operands[0].value if self.scales(p) else None

        def next_op(vid: int) -> OpNode | None:
            """The one op of the call reading `vid` (an intermediate value nothing else reads), or None."""
            j = self.only_consumer(vid)
            return self.node[j] if j in members else None

        result, taken = self.outputs_of[mm.index][0], set()
        p = next_op(result)
        if p is not None and p.op == "relax.multiply":  # alpha
            if scale_input(p) != result:
                return None
            taken.add(p.index)
            result = self.outputs_of[p.index][0]
            p = next_op(result)
        add, c = None, None
        if p is not None:  # the add of c (times beta)
            other = [x.value for x in p.operands if x.value != result]
            if p.op != "relax.add" or len(other) != 1:
                return None
            add, c = p, other[0]
            taken.add(p.index)
            q = self.op_of(c)
            if q is not None and q.index in members:  # beta
                c = scale_input(q)
                if c is None or next_op(self.outputs_of[q.index][0]) is not add:
                    return None
                taken.add(q.index)
                if self.scalar_value(q.operands[1].value) == 0.0:  # an exporter's `c * 0`: eager reads no c
                    c = None
        return (None if add is None else add.index, c) if taken == members else None

    def emit_blas(self, mm: OpNode, rest: list[int], beta: bool, emit, read_bytes) -> None:
        """The GEMM of a BLAS call (`blas_calls`): a and b (broadcast reads once) and, where beta != 0, the result the
        copy wrote (C), read; the result written; the FLOPs of every op of the call (alpha and beta in the epilogue)."""
        out = self.node[rest[-1]].output
        read = sum(read_bytes(o.value) for o in mm.operands) + (out.nbytes if beta else 0)
        flops = sum(self.costs[j].flops for j in (mm.index, *rest))
        params = self.params(mm, "gemm")
        emit("gemm", mm.op, (mm.index, *rest), flops, read, out.nbytes, mm.operands[0].tensor.dtype, params)

    def emit_op(self, op: OpNode, cost: OpCost, fused_into: dict[int, int], emit, read_bytes) -> None:
        """One kernel for one Relax op (with a fused bias add): the op's FLOPs and bytes, broadcast reads once."""
        operand_bytes = sum(o.tensor.nbytes for o in op.operands)
        read = cost.bytes_read
        if read == operand_bytes:  # the rule reads its inputs whole: count a broadcast view once
            read = sum(read_bytes(o.value) if o.value in self.info else o.tensor.nbytes for o in op.operands)
        if op.op in _GATHER_OPS:  # torch's index kernels read the indices as the model gave them (int64)
            for o in op.operands[1:]:
                src = self.index_source(o.value)
                read += self.info[src].nbytes - o.tensor.nbytes
        written = cost.bytes_written
        flops = cost.flops
        covered = [op.index]
        bias = [c for c, p in fused_into.items() if p == op.index]
        for c in bias:
            add = self.node[c]
            covered.append(c)
            flops += self.costs[c].flops
            read += sum(o.tensor.nbytes for o in add.operands if o.value in self.indep)
        for i in self.absorbed.get(op.index, []):  # a gather's index normalisation: no traffic of its own
            covered.append(i)
            flops += self.costs[i].flops
        if op.op in _MAX_POOLS:
            written += op.output.numel * 8  # eager runs max_pool*_with_indices: it writes int64 indices too
        kind = _kind(cost)
        if op.op.startswith("relax.nn.adaptive_avg_pool") and op.outputs:
            # a global average pool: torch's adaptive_avg_pool runs `mean` for a 1x1 output
            layout = str(op.attrs.get("out_layout") or op.attrs.get("layout") or "NCHW")
            if len(layout) == op.output.ndim:
                if all(d == 1 for d, c in zip(op.output.shape, layout, strict=True) if c in "DHW"):
                    kind = "reduction"
        dtype = op.output.dtype if op.outputs else "float32"
        if kind in ("gemm", "conv") and op.operands:
            dtype = op.operands[0].tensor.dtype
        params = self.params(op, kind)
        if kind == "gemm" and any(self.node[c].op == "relax.add" for c in bias):
            params["bias"] = True  # torch's linear: addmm, the bias add in cuBLASLt's epilogue
        emit(kind, op.op, covered, flops, read, written, dtype, params)

    def params(self, op: OpNode, kind: str) -> dict:
        if kind == "gemm" and op.callee == GROUPED_MATMUL and len(op.operands) >= 2:
            # a grouped matmul: S rows (K wide) over g = min(E, S) experts' (K, N) matrices, like g GEMMs of
            # S / g rows each (balanced routing)
            (s, k), (e, _, n) = op.operands[0].tensor.shape, op.operands[1].tensor.shape
            g = max(min(e, s), 1)
            return {"b": g, "m": -(-s // g), "n": n, "k": k}
        if kind == "gemm" and op.op == "relax.einsum":
            plan = self.einsum_plan(op)
            if plan is not None:
                return {"b": plan.b, "m": plan.m, "n": plan.n, "k": plan.k}
        if kind == "gemm" and len(op.operands) == 2 and op.operands[0].tensor.ndim >= 1:
            a, b = (o.tensor.shape for o in op.operands)
            out = op.output.shape
            k = a[-1]
            n = out[-1] if len(out) >= 1 else 1
            if len(b) == 2 and len(a) >= 2:  # folded to one mm
                return {"b": 1, "m": math.prod(a[:-1]), "n": n, "k": k}
            m = out[-2] if len(out) >= 2 else 1
            return {"b": math.prod(out[:-2]) if len(out) > 2 else 1, "m": m, "n": n, "k": k}
        if kind == "conv" and len(op.operands) >= 2:
            x, w = op.operands[0].tensor.shape, op.operands[1].tensor.shape
            out = op.output.shape
            transposed = op.op.endswith("_transpose")
            return {
                "n": x[0],
                "c_in": x[1],
                "c_out": out[1],
                "out_spatial": list(out[2:]),
                "kernel": list(w[2:]),
                "groups": int(op.attrs.get("groups", 1)),
                "stride": [int(s) for s in op.attrs.get("strides", [1] * (len(x) - 2))],
                **({"transposed": True} if transposed else {}),
            }
        tensors = [o.tensor for o in op.operands] + list(op.outputs)
        numel = max((t.numel for t in tensors), default=0)
        if kind == "norm" and op.op == "relax.nn.group_norm" and op.operands:
            x = op.operands[0].tensor
            groups, axes = int(op.attrs.get("num_groups") or 0), op.attrs.get("axes") or []
            channels = x.shape[int(op.attrs.get("channel_axis", 1))] if x.ndim >= 2 else 0
            per_row = math.prod(x.shape[int(a)] for a in axes) * channels // groups if groups else 0
            if params := _row_params(x.numel, per_row):
                return params
        return {"numel": numel}

    def emit_attention(self, att: _Attention, be: str, emit, read_bytes, layout, op: OpNode) -> None:
        """The attention kernel of a recognised pattern, or the math backend's separate kernels."""
        covered = sorted(att.covered)
        params = {
            "b": att.b,
            "h": att.h,
            "h_kv": att.h_kv,
            "s": att.s,
            "t": att.t,
            "d": att.d,
            "dv": att.dv,
            "causal": att.causal,
            "masked": att.mask is not None,
            "backend": be,
        }
        flops = 2 * att.b * att.h * att.s * att.t * (att.d + att.dv)
        out_vid = att.out_value
        size = dtype_bytes(att.dtype)
        bh = att.b * att.h
        q_bytes = int(bh * att.s * att.d * size)
        k_bytes = int(att.b * att.h_kv * att.t * att.d * size)
        v_bytes = int(att.b * att.h_kv * att.t * att.dv * size)
        o_bytes = int(bh * att.s * att.dv * size)
        mask_bytes = read_bytes(att.mask) if att.mask is not None else 0
        if be != "math":
            idx = (op.index,)
            written = o_bytes
            if be == "flash":
                written += bh * att.s * 4  # flash always writes the fp32 logsumexp (B, H, S)
                if att.d % 8:  # attention.cpp pads q, k, v to a multiple of 8 for the flash kernel
                    padded = -(-att.d // 8) * 8
                    for heads, seq, nb in (
                        (att.h, att.s, q_bytes),
                        (att.h_kv, att.t, k_bytes),
                        (att.h_kv, att.t, v_bytes),
                    ):
                        out = int(att.b * heads * seq * padded * size)
                        emit("copy", "flash:pad_head_dim", idx, 0, nb, out, att.dtype, {"numel": int(out / size)})
                    q_bytes, k_bytes, v_bytes = (int(x * padded / att.d) for x in (q_bytes, k_bytes, v_bytes))
                    written += int(o_bytes * (padded / att.d - 1))  # the padded output, sliced after
            live_mask = att.mask is not None and (att.mask not in self.indep or att.mask in self.live)
            if be == "efficient" and live_mask and att.t % 16:
                # preprocess_mask (attention.cpp): the mask, expanded to (B, H, S, T), is padded to a multiple of 16
                # on every call (a constant mask is padded once, like every constant; a relative position bias that
                # eager recomputes every forward, `live`, is padded every forward)
                padded = int(bh * att.s * (-(-att.t // 16) * 16) * size)
                pad = emit(
                    "copy", "efficient:pad_mask", idx, 0, mask_bytes, padded, att.dtype, {"numel": int(padded / size)}
                )
                if att.mask in self.live:
                    self.recomputed_pads.add(pad)
                mask_bytes = int(bh * att.s * att.t * size)
            name = op.op if att.bshd else "fused:attention"
            emit(
                "attention", name, covered, flops, q_bytes + k_bytes + v_bytes + mask_bytes, written, att.dtype, params
            )
            if not att.bshd and len(self.info[out_vid].shape) == 4:
                # fused kernels write (B, S, H, D) memory and return it transposed to (B, H, S, D)
                b, h, s, dv = self.info[out_vid].shape
                layout[out_vid] = (s * h * dv, dv, h * dv, 1)
            return
        # math backend: the separate kernels of `_scaled_dot_product_attention_math`
        idx = (op.index,)
        if op.index in self.native_math:  # `_native_multi_head_attention` without SDPA (`mha_fast_paths`)
            bias, packed = self.native_math[op.index]
            covered = idx if bias is None else (bias, op.index)
            numel = self.info[packed].numel  # the bias added to all of it, Q (a third) scaled
            self.emit_qkv_transform(
                emit, covered, bias, packed, numel + numel // 3, q_bytes + k_bytes + v_bytes, att.dtype
            )
            masked = self.native_masks.get(op.index)
            if att.bshd:  # one op in the graph: its output is written over Q, its operand 0
                self.writes_into.append((op.index, 0))
            elif masked is None:  # spelled out: the softmax writes over the scores
                sm = next((i for i in sorted(att.covered) if self.node[i].op == "relax.nn.softmax"), None)
                if sm is not None:
                    self.writes_into.append((sm, 0))
            self.emit_scores(
                att, idx, emit, q_bytes, k_bytes, v_bytes, o_bytes, mask_bytes, layout, out_vid,
                bool_mask=None if masked is None else (read_bytes(masked[0]), masked[1]), op_native=True,
            )  # fmt: skip
            return
        if att.h_kv != att.h:  # repeat_interleave of K and V to the query heads
            for kv in (k_bytes, v_bytes):
                full = kv * att.h // att.h_kv
                emit("copy", "math:repeat_interleave", idx, 0, kv, full, att.dtype, {"numel": int(full / size)})
            k_bytes, v_bytes = k_bytes * att.h // att.h_kv, v_bytes * att.h // att.h_kv
        emit(
            "elementwise",
            "math:scale_q",
            idx,
            bh * att.s * att.d,
            q_bytes,
            q_bytes,
            att.dtype,
            {"numel": bh * att.s * att.d},
        )
        emit(
            "elementwise",
            "math:scale_k",
            idx,
            bh * att.t * att.d,
            k_bytes,
            k_bytes,
            att.dtype,
            {"numel": bh * att.t * att.d},
        )
        self.emit_scores(att, idx, emit, q_bytes, k_bytes, v_bytes, o_bytes, mask_bytes, layout, out_vid)

    @staticmethod
    def emit_masked_softmax(emit, cast_ops, ops, read: int, bool_bytes: int, scores: int, numel: int, dtype: str):
        """`masked_softmax` (aten/src/ATen/native/transformers/attention.cpp): the float mask (`read` bytes) cast to
        bool (`bool_bytes`), then `_masked_softmax`, one kernel reading the `scores` bytes of `numel` scores and the
        bool mask and writing the probabilities (5 FLOPs a score, as softmax)."""
        emit("elementwise", "mha:mask_to_bool", cast_ops, 0, read, bool_bytes, "bool", {"numel": bool_bytes})
        emit("softmax", "mha:masked_softmax", ops, 5 * numel, scores + bool_bytes, scores, dtype, {"numel": numel})

    @staticmethod
    def emit_weight_mean(emit, i: int, read: int, numel: int, n_out: int, dtype: str) -> None:
        """`_native_multi_head_attention`'s average of the (B, H, T, S) attention weights over heads: `sum` (reads
        `read` bytes of `numel` elements, writes the (B, T, S) `n_out`), then `div_` in place."""
        out = int(n_out * dtype_bytes(dtype))
        emit("reduction", "mha:sum", (i,), numel - n_out, read, out, dtype, {"numel": numel})
        emit("elementwise", "mha:div_", (i,), n_out, out, out, dtype, {"numel": n_out})

    def emit_qkv_transform(self, emit, covered, bias: int | None, packed: int, flops, written: int, dtype: str) -> None:
        """`_transform_bias_rescale_qkv`, one kernel: reads the packed (B, T, 3 x D) in-projection and the bias add
        `bias`'s constant operand, adds the bias, scales Q, writes Q, K and V as (B, H, T, Dh) (`written` bytes)."""
        add = () if bias is None else self.node[bias].operands
        read = self.info[packed].nbytes + sum(o.tensor.nbytes for o in add if o.value in self.indep)
        numel = self.info[packed].numel
        emit("elementwise", "fused:transform_bias_rescale_qkv", covered, flops, read, written, dtype, {"numel": numel})

    def emit_scores(
        self, att: _Attention, idx, emit, q_bytes, k_bytes, v_bytes, o_bytes, mask_bytes, layout, out_vid,
        bool_mask: tuple[int, int] | None = None, op_native: bool = False,
    ):  # fmt: skip
        """The math backend's score kernels after Q and K are scaled: Q K^T as a bmm, the mask added, softmax, the
        probabilities times V as a bmm (bytes as the operands are: Q, K, V, the output; the mask as read). With
        `bool_mask` (the float mask's bytes read, the bool mask's written), `_native_multi_head_attention`'s
        `masked_softmax` (attention.cpp): the mask cast to bool, then `_masked_softmax`, one kernel reading the
        scores and the bool mask, in place of the mask's add and softmax. `op_native`: that branch without a mask,
        whose softmax overwrites the scores ("mha:softmax_": the liveness allocates them once)."""
        size = dtype_bytes(att.dtype)
        bh = att.b * att.h
        scores = int(bh * att.s * att.t * size)
        gemm = {"b": bh, "m": att.s, "n": att.t, "k": att.d}
        emit("gemm", "math:matmul_qk", idx, 2 * bh * att.s * att.t * att.d, q_bytes + k_bytes, scores, att.dtype, gemm)
        if bool_mask is not None:
            self.emit_masked_softmax(emit, idx, idx, *bool_mask, scores, bh * att.s * att.t, att.dtype)
        elif att.mask is not None or att.causal:
            emit(
                "elementwise",
                "math:add_mask",
                idx,
                bh * att.s * att.t,
                scores + mask_bytes,
                scores,
                att.dtype,
                {"numel": bh * att.s * att.t},
            )
        if bool_mask is None:
            emit(
                "softmax",
                "mha:softmax_" if op_native else "math:softmax",  # (the fast path's `_softmax_out` is in place)
                idx,
                5 * bh * att.s * att.t,
                scores,
                scores,
                att.dtype,
                {"numel": bh * att.s * att.t},
            )
        gemm = {"b": bh, "m": att.s, "n": att.dv, "k": att.t}
        emit("gemm", "math:matmul_pv", idx, 2 * bh * att.s * att.t * att.dv, scores + v_bytes, o_bytes, att.dtype, gemm)
        if att.bshd:
            b, s, h, dv = self.info[out_vid].shape
            layout[out_vid] = (h * s * dv, dv, s * dv, 1)  # (B, H, S, D) memory seen as (B, S, H, D)


@gc_paused
def kernel_view(graph: OpGraph, ops: list[OpCost], *, attention_patterns: str = "sdpa") -> KernelView:
    """The kernels eager PyTorch launches on a CUDA GPU for `graph`.

    Args:
        graph: the extracted graph.
        ops: its op costs (`passes.costs.cost_of` of each op, same order).
        attention_patterns: which decomposed matmul-softmax-matmul patterns become one attention kernel:
            "sdpa" (only those with torch's SDPA signature: the right choice for graphs from torch.export,
            where an explicit pattern is attention the model writes out and eager torch runs unfused),
            "torch-onnx" (the same attention rule, for ONNX files torch's exporters wrote: they spell SDPA with
            Q and K^T each scaled by sqrt(scale), and a model's own attention as it is written; also
            recognises the exporter spellings below) or
            "all" (any pattern: for ONNX files of other producers, TensorFlow and Paddle graphs, assuming the
            model would run SDPA; also recognises how those exporters and TVM's importers spell GELU, SiLU,
            clamp, hardsigmoid, hardswish, rsqrt, ne and a gather's index normalisation, each one kernel as in
            torch).

    Returns:
        The kernels in launch order, each op's kernels and role, and a summary.
    """
    if attention_patterns not in ATTENTION_PATTERNS:
        raise ValueError(f"attention_patterns must be one of {ATTENTION_PATTERNS}, not {attention_patterns!r}")
    return _View(graph, ops, attention_patterns).run()
