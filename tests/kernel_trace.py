"""Test oracle for the kernel view: the kernels eager PyTorch launches on a CUDA GPU, traced without one.

Eager PyTorch launches one kernel (or one library call) per non-view ATen op it dispatches. This module runs
the model's forward on the meta device (or any device: no data is touched when the tensors are meta) under a
`TorchDispatchMode` and records every dispatched ATen op that is not a view, with the bytes of its tensor
inputs and outputs. A view (schema alias annotation, `OpOverload.is_view`) and allocation-only or metadata-only
ops launch nothing.

Where eager CUDA dispatches differently from the meta device, the trace emulates CUDA:

- **Attention.** `F.scaled_dot_product_attention` picks a backend on CUDA (aten/src/ATen/native/transformers/
  cuda/sdp_utils.cpp, `select_sdp_backend`: flash, then memory-efficient, then math, for sm80-sm121 GPUs).
  `cuda_sdpa_backend` below restates its filters; the fused backends are traced as the one ATen op they call
  (`_scaled_dot_product_flash_attention` / `_scaled_dot_product_efficient_attention`, whose meta kernels give
  the real output and logsumexp shapes), the math backend as the ops of `_scaled_dot_product_attention_math`.
  A boolean mask is first turned into an additive one (`convert_boolean_attn_mask`, one `where`), and the
  efficient backend pads a mask whose last dimension is not a multiple of 16 (`preprocess_mask`), as
  aten/src/ATen/native/transformers/attention.cpp does.
- **Convolution bias.** cuDNN convolutions do not add the bias: aten/src/ATen/native/Convolution.cpp
  (`_convolution`, `ConvBackend::Cudnn`) calls `cudnn_convolution` and then `output.add_(bias)`, two kernels;
  depthwise 2-D convolutions run `_conv_depthwise2d` with the bias fused (one kernel).
- **Recurrent layers.** `nn.LSTM`/`nn.GRU`/`nn.RNN` run on cuDNN (`_cudnn_rnn`, one ATen op): its standard
  algorithm (CUDNN_RNN_ALGO_STANDARD) computes, per layer and direction, the input projection of every step
  in one GEMM, then per step one GEMM with the recurrent weight and one pointwise kernel for the gates. The
  trace records those kernels (bytes: the GEMM operands and results; the pointwise kernel reads both gate
  blocks, the biases and the previous state, and writes the new state). A batch-first input is first copied
  to sequence-first (`input.transpose(0, 1)`, then `input.contiguous()`), a kernel when the batch is over 1.
- **baddbmm.** Its structured meta function copies `self` (broadcast) into the result where beta != 0
  (`result.copy_(self)`, aten/src/ATen/native/LinearAlgebra.cpp), then CUDA's one batched GEMM reads that back
  with beta (cuda/Blas.cpp): two kernels, the GEMM reading the result too; with beta 0, one GEMM reading neither.
- **Copies inside kernels.** CUDA layer norm (`input.expect_contiguous()`, layer_norm_kernel.cu) and softmax
  (`input_.contiguous()`, SoftMax.cu) copy a non-contiguous input; cuDNN convolution, cuDNN batch norm and
  pooling copy an input that is neither contiguous nor channels-last (`contiguous(suggest_memory_format())`).
  These calls happen inside the kernel's C++ and never reach a dispatch mode; the trace adds them.

Every kernel is also marked *input-dependent* or not: whether any tensor it reads derives from the model's
inputs (a dependence set propagated through every dispatched op, views included). Kernels that are not
(position ids, rotary tables, masks built from `arange`, lookups of buffers) are what a compiler folds and
what preflight's kernel view folds; the `dependent` totals compare like with like.

This is a test helper, not part of preflight: it needs the model's Python code and runs its forward.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch._prims_common import suggest_memory_format
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

aten = torch.ops.aten

# Ops that alias their input without an alias annotation in their schema (metadata only). `unsafe_split` /
# `unsafe_chunk` (LSTMCell's and GRUCell's gate blocks) return `split`'s views with their version counters
# detached (aten/src/ATen/native/TensorShape.cpp `unsafe_split`): no copy.
_VIEW_LIKE = {
    aten._unsafe_view.default,
    aten.lift_fresh.default,
    aten.unsafe_split.Tensor,
    aten.unsafe_split_with_sizes.default,
    aten.unsafe_chunk.default,
}

# Ops that launch no kernel: allocation without initialisation, metadata queries, shape assertions.
_NO_KERNEL_PACKETS = {
    aten.empty,
    aten.empty_strided,
    aten.empty_like,
    aten.empty_permuted,
    aten.new_empty,
    aten.new_empty_strided,
    aten.sym_size,
    aten.sym_stride,
    aten.sym_numel,
    aten.sym_storage_offset,
    aten.is_same_size,
    aten._assert_async,
    aten._assert_scalar,
    aten._assert_tensor_metadata,
    aten.resize_,
    aten.as_strided_,  # restrides in place (adaptive_avg_pool2d's 1 x 1 mean of a channels-last input)
}


# Gathers read only the rows they copy (output-sized) plus their indices, not the whole table.
_GATHERS = {
    aten.embedding.default,
    aten.index_select.default,
    aten.gather.default,
    aten.index.Tensor,
    aten.take.default,
}


def _is_kernel(func) -> bool:
    if func.is_view or func in _VIEW_LIKE:
        return False
    return func.overloadpacket not in _NO_KERNEL_PACKETS


def unique_bytes(t: torch.Tensor) -> int:
    """Bytes of memory a tensor (view) covers: broadcast (stride-0) dimensions are read once."""
    if t.numel() == 0:
        return 0
    elems = math.prod(s for s, st in zip(t.shape, t.stride(), strict=True) if st != 0)
    return elems * t.element_size()


def _tensors(obj) -> list[torch.Tensor]:
    return [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]


@dataclass(frozen=True)
class TracedKernel:
    """One kernel eager PyTorch launches: the ATen op, the bytes of its tensor inputs and outputs."""

    op: str
    bytes_in: int
    bytes_out: int
    shapes: tuple[tuple[int, ...], ...] = ()
    dependent: bool = True  # reads a tensor derived from the model's inputs

    @property
    def bytes(self) -> int:
        return self.bytes_in + self.bytes_out


@dataclass
class KernelTrace:
    """Every kernel of one forward, in launch order."""

    kernels: list[TracedKernel] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.kernels)

    @property
    def bytes(self) -> int:
        return sum(k.bytes for k in self.kernels)

    @property
    def dependent(self) -> list[TracedKernel]:
        """The kernels that read something derived from the model's inputs."""
        return [k for k in self.kernels if k.dependent]

    @property
    def dependent_count(self) -> int:
        return len(self.dependent)

    @property
    def dependent_bytes(self) -> int:
        return sum(k.bytes for k in self.dependent)

    def counts(self) -> Counter:
        return Counter(k.op for k in self.kernels)

    def attention(self) -> list[TracedKernel]:
        return [k for k in self.kernels if "scaled_dot_product" in k.op]

    def backends(self) -> dict[str, int]:
        """{SDPA backend ("flash", "efficient", "math"...): attention kernels}, as `KernelViewSummary.attention`."""
        out: dict[str, int] = {}
        for k in self.attention():
            backend = k.op.split("_scaled_dot_product_")[-1].split("_attention")[0]
            out[backend] = out.get(backend, 0) + 1
        return out


#: How close preflight's kernel view of a model is held to the trace: kernels, bytes (relative).
COUNT_TOL, BYTES_TOL = 0.10, 0.15


def input_dependent(analysis) -> tuple[int, int, int]:
    """(kernels, bytes, kernels left out) of preflight's kernel view of `analysis` less the kernels on weights alone:
    ops marked `weight_only` (eager runs them every call, outside the trace's input-dependent set) and what eager
    recomputes from them (`KernelView.recomputed`), to compare with `KernelTrace.dependent_count` / `_bytes`."""
    view = analysis.kernel_view
    ops = {c.index: c for c in analysis.ops}
    recomputed = set(view.recomputed)
    left = [k for k in analysis.kernels if k.index in recomputed or all(ops[i].weight_only for i in k.ops)]
    return (
        view.summary.kernels - len(left),
        view.summary.bytes_kernels - sum(k.bytes for k in left),
        len(left),
    )


class _Recorder(TorchDispatchMode):
    def __init__(self, trace: KernelTrace):
        super().__init__()
        self.trace = trace
        self.muted = 0
        self.derived = WeakIdKeyDictionary()  # tensors computed from the inputs (keyed by identity)

    def mark(self, tensors: Sequence[torch.Tensor]) -> None:
        for t in tensors:
            self.derived[t] = True

    def is_derived(self, tensors: Sequence[torch.Tensor]) -> bool:
        return any(t in self.derived for t in tensors)

    def record_bytes(self, name: str, bytes_in: int, bytes_out: int, dependent: bool) -> None:
        if self.muted <= 1:
            self.trace.kernels.append(TracedKernel(name, int(bytes_in), int(bytes_out), (), dependent))

    @contextlib.contextmanager
    def resumed(self) -> Iterator[None]:
        muted, self.muted = self.muted, 0
        try:
            yield
        finally:
            self.muted = muted

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.muted += 1
        try:
            yield
        finally:
            self.muted -= 1

    def record(
        self,
        name: str,
        inputs: Sequence[torch.Tensor],
        outputs: Sequence[torch.Tensor],
        dependent: bool | None = None,
    ) -> None:
        if self.muted > 1:
            return
        shapes = tuple(tuple(t.shape) for t in inputs)
        self.trace.kernels.append(
            TracedKernel(
                name,
                sum(unique_bytes(t) for t in inputs),
                sum(unique_bytes(t) for t in outputs),
                shapes,
                dependent if dependent is not None else self.is_derived(inputs),
            )
        )

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs, outputs = _tensors((args, kwargs)), _tensors(out)
        dependent = self.is_derived(inputs)
        if dependent:
            self.mark(outputs)
        if self.muted or not _is_kernel(func):
            return out
        if func in _CONTIGUOUS_INSIDE and not _layout_ok(args[0], func):
            self.record("aten.clone.default", [args[0]], [args[0]], dependent)  # the kernel's own .contiguous()
        if func is aten.convolution.default and _cudnn_adds_bias(*args[:3], transposed=args[6], groups=args[8]):
            self.record("aten.convolution.default", inputs[:2], outputs, dependent)
            self.record("aten.add_.Tensor", [outputs[0], inputs[2]], outputs, dependent)  # cuDNN: output.add_(bias)
            return out
        if func is aten.baddbmm.default:
            # the structured meta function (aten/src/ATen/native/LinearAlgebra.cpp, `common_checks_baddbmm_bmm`)
            # copies self, broadcast, into the result where beta != 0; then one GEMM reads it back (beta) and writes
            # it; with beta 0 the GEMM reads neither self nor the result
            beta = kwargs.get("beta", args[3] if len(args) > 3 else 1) != 0
            if beta:
                self.record("aten.copy_.default", [args[0]], outputs, dependent)
            self.record(str(func), [*inputs[1:3], *(outputs if beta else [])], outputs, dependent)
            return out
        if func in _GATHERS:
            table = args[0]
            gathered = sum(unique_bytes(t) for t in outputs)
            rest = [t for t in inputs if t is not table]
            self.trace.kernels.append(
                TracedKernel(
                    str(func),
                    gathered + sum(unique_bytes(t) for t in rest),
                    gathered,
                    tuple(tuple(t.shape) for t in inputs),
                    dependent,
                )
            )
            return out
        self.record(str(func), inputs, outputs, dependent)
        return out


# Kernels whose CUDA implementation makes its input contiguous: True = any non-contiguous input is copied,
# False = contiguous or channels-last inputs are taken as they are (suggest_memory_format).
_CONTIGUOUS_INSIDE = {
    aten.native_layer_norm.default: True,
    aten._softmax.default: True,
    aten._log_softmax.default: True,
    aten.convolution.default: False,
    aten.native_batch_norm.default: False,
    aten._native_batch_norm_legit_no_training.default: False,
    aten.max_pool2d_with_indices.default: False,
    aten.avg_pool2d.default: False,
}


def _channels_last(x: torch.Tensor) -> bool:
    """What CUDA's kernels take as channels-last: `suggest_memory_format` (torch._prims_common's mirror of the C++,
    size-1 dims' strides included) and dense in that format."""
    return (
        x.dim() == 4
        and suggest_memory_format(x) == torch.channels_last
        and x.is_contiguous(memory_format=torch.channels_last)
    )


def _layout_ok(x: torch.Tensor, func) -> bool:
    if x.is_contiguous():
        return True
    return not _CONTIGUOUS_INSIDE[func] and _channels_last(x)


def _cudnn_adds_bias(x, weight, bias, *, transposed: bool, groups: int) -> bool:
    """True when CUDA runs this convolution on cuDNN and adds the bias as a second kernel."""
    if bias is None:
        return False
    depthwise = (
        not transposed and x.dim() == 4 and groups > 1 and x.shape[1] == groups and weight.shape[0] % groups == 0
    )
    # depthwise 2-D convs run _conv_depthwise2d with the bias fused (fp32), unless the input is channels-last:
    # Convolution.cpp `use_cudnn_depthwise` "always use cudnn_depthwise for channels_last format"
    channels_last = not x.is_contiguous() and _channels_last(x)
    return not depthwise or channels_last


# ---- attention backends ---------------------------------------------------------------------


def cuda_sdpa_backend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> str:
    """The backend torch's `select_sdp_backend` picks on an sm80-sm90 GPU (A100, H100, H200): flash, efficient, math.

    Restates the filters of aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (default priority order flash,
    efficient, math; cuDNN attention, first only on sm90+ with cuDNN > 9.15, is a fused kernel like flash):
    - both: 4-D q, k, v (`check_tensor_shapes`); last-dim stride 1; equal batch; GQA allowed (k, v heads divide
      q heads);
    - flash: no mask (`check_for_attn_mask`); q, k, v head dims equal and <= 256; fp16 or bf16; `is_causal` only
      with equal query and key lengths (`check_flash_causal_non_square_seqlens`);
    - efficient: fp16, bf16 or fp32; q and k head dims equal; q and v head dims divisible by the GEMM alignment
      (8 for 16-bit, 4 for fp32 on sm80+, `minimum_gemm_alignment`); masks allowed;
    - math otherwise.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or dropout_p > 0.0:
        return "math"
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        return "math"
    if not (q.shape[0] == k.shape[0] == v.shape[0]) or k.shape[1] != v.shape[1] or q.shape[1] % k.shape[1]:
        return "math"
    d_q, d_k, d_v = q.shape[-1], k.shape[-1], v.shape[-1]
    half = q.dtype in (torch.float16, torch.bfloat16)
    if half and attn_mask is None and d_q == d_k == d_v <= 256 and not (is_causal and q.shape[-2] != k.shape[-2]):
        return "flash"
    align = 8 if half else 4
    if (
        q.dtype in (torch.float16, torch.bfloat16, torch.float32)
        and d_q == d_k
        and d_q % align == 0
        and d_v % align == 0
    ):
        return "efficient"
    return "math"


_RNN_GATES = {
    torch._C._VariableFunctions.lstm: 4,
    torch._C._VariableFunctions.gru: 3,
    torch._C._VariableFunctions.rnn_tanh: 1,
    torch._C._VariableFunctions.rnn_relu: 1,
}


class _SdpaOnCuda(TorchFunctionMode):
    """Replaces `F.scaled_dot_product_attention` by what CUDA's dispatcher runs for the same arguments."""

    def __init__(self, recorder: _Recorder):
        super().__init__()
        self.recorder = recorder
        self.backends: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            return self.sdpa(*args, **kwargs)
        gates = _RNN_GATES.get(func)
        if gates is not None and not kwargs and len(args) == 9 and isinstance(args[3], bool):
            return self.cudnn_rnn(func, gates, *args)
        return func(*args, **kwargs)

    def cudnn_rnn(self, func, gates, x, hx, weights, has_biases, layers, dropout, train, bidirectional, batch_first):
        """cuDNN's standard RNN algorithm: per layer and direction one input GEMM, then per step a GEMM + gates."""
        with self.recorder.paused():
            out = func(x, hx, weights, has_biases, layers, dropout, train, bidirectional, batch_first)
        dependent = self.recorder.is_derived([x, *(_tensors(hx))])
        steps, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
        dirs = 2 if bidirectional else 1
        per_layer = len(weights) // (layers * dirs)
        hidden = weights[1].shape[1]
        size = x.element_size()
        g = gates * hidden
        if batch_first and not x.transpose(0, 1).is_contiguous():  # RNN.cpp: input.transpose(0, 1).contiguous()
            self.recorder.record("aten.clone.default", [x], [x], dependent)
        for layer in range(layers):
            features = x.shape[-1] if layer == 0 else hidden * dirs
            for d in range(dirs):
                w = weights[(layer * dirs + d) * per_layer : (layer * dirs + d + 1) * per_layer]
                w_hh = w[1]
                biases = sum(unique_bytes(b) for b in w[2:4]) if has_biases else 0
                self.recorder.record_bytes(
                    "cudnn_rnn:input_gemm",
                    (steps * batch * features + g * features) * size,
                    steps * batch * g * size,
                    dependent,
                )
                state = 2 if gates == 4 else 1  # LSTM carries h and c
                for _ in range(steps):
                    self.recorder.record_bytes(
                        "cudnn_rnn:recurrent_gemm",
                        (batch * hidden + unique_bytes(w_hh) // size) * size,
                        batch * g * size,
                        dependent,
                    )
                    self.recorder.record_bytes(
                        "cudnn_rnn:pointwise",
                        (2 * batch * g + batch * hidden * state) * size + biases,
                        batch * hidden * state * size,
                        dependent,
                    )
        if dependent:
            self.recorder.mark(_tensors(out))
        return out

    def sdpa(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        backend = cuda_sdpa_backend(q, k, v, attn_mask, dropout_p, is_causal)
        self.backends.append(backend)
        if attn_mask is not None and attn_mask.dtype == torch.bool:  # convert_boolean_attn_mask
            attn_mask = torch.where(attn_mask, 0.0, torch.scalar_tensor(-math.inf, dtype=q.dtype, device=q.device))
        if backend == "math":
            return aten._scaled_dot_product_attention_math(
                q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
            )[0]
        if backend == "efficient" and attn_mask is not None:  # preprocess_mask
            attn_mask = attn_mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
            if attn_mask.shape[-1] % 16:
                last = attn_mask.shape[-1]
                attn_mask = F.pad(attn_mask, (0, 16 - last % 16))[..., :last]
            elif any(s % 16 for s in attn_mask.stride()[:3]):
                attn_mask = attn_mask.contiguous()
        with self.recorder.paused():
            # the fused op's meta kernel gives its outputs (attention in (B, S, H, D) memory, logsumexp, seeds);
            # the values, where the model needs them (a CPU forward), come from the math backend
            meta = [None if t is None else _meta_like(t) for t in (q, k, v, attn_mask)]
            if backend == "flash":
                d = q.shape[-1]
                if d % 8:  # attention.cpp pads the head dim to a multiple of 8 for the flash kernel (then slices)
                    with self.recorder.resumed():
                        meta[:3] = [F.pad(t, (0, 8 - d % 8)) for t in meta[:3]]
                    scale = scale if scale is not None else 1 / math.sqrt(d)
                outs = aten._scaled_dot_product_flash_attention(*meta[:3], dropout_p, is_causal, False, scale=scale)
            else:
                mk, mv = meta[1], meta[2]
                if mk.shape[1] != q.shape[1]:  # the efficient kernel reads one K/V head per query head
                    rep = q.shape[1] // mk.shape[1]
                    mk, mv = mk.repeat_interleave(rep, dim=1), mv.repeat_interleave(rep, dim=1)
                outs = aten._scaled_dot_product_efficient_attention(
                    meta[0], mk, mv, meta[3], False, dropout_p, is_causal, scale=scale
                )
            inputs = [t for t in meta if t is not None]
            dependent = self.recorder.is_derived([t for t in (q, k, v, attn_mask) if t is not None])
            self.recorder.record(f"aten._scaled_dot_product_{backend}_attention", inputs, _tensors(outs), dependent)
            out = outs[0][..., : v.shape[-1]]  # (the flash padding is sliced off: a view)
            if not q.is_meta:
                value = aten._scaled_dot_product_attention_math(
                    q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
                )[0]
                out = torch.empty_strided(out.shape, out.stride(), dtype=value.dtype, device=value.device)
                out.copy_(value)
        if dependent:
            self.recorder.mark([out])
        return out


class _InferenceRecorder(_Recorder):
    """The recorder for a forward under `torch.inference_mode()`, with no torch-function mode in the way.

    Under inference mode the autograd keys are off, so composite ATen ops (`linear`, `layer_norm`, `dropout`,
    `scaled_dot_product_attention`, ...) reach the dispatch mode whole: each runs its C++
    CompositeImplicitAutograd kernel here, the mode still active (as `make_fx` decomposes), so the kernels its
    parts launch are recorded (eval-mode dropout returns its input: no kernel). Where CUDA runs something else,
    it is restated:

    - `scaled_dot_product_attention`: the CUDA backend choice (`_SdpaOnCuda.sdpa`);
    - `_native_multi_head_attention` (nn.MultiheadAttention's fast path: eval, no grad, batch_first
      self-attention, ...): its CUDA kernel, aten/src/ATen/native/transformers/cuda/attention.cu
      (`native_multi_head_attention_cuda`): with q is k is v, head dim % 8 == 0, no mask, no weights wanted and
      SDPA picking flash or efficient, `linear(x, in_proj)`, SDPA on views of its three chunks, a view, and
      `linear(., out_proj)`; otherwise (a mask, attention weights wanted) its other branch: one `mm`,
      `_transform_bias_rescale_qkv`, `bmm`, (masked) softmax, `bmm`, a copy merging the heads, `addmm`, and
      for averaged weights a `sum` and a `div_`;
    - `_transformer_encoder_layer_fwd` (nn.TransformerEncoderLayer's fast path): as
      aten/src/ATen/native/transformers/transformer.cpp runs it (`_native_multi_head_attention`, `add_`, layer
      norms, the feed-forward block's first linear layer and activation as one `_addmm_activation`, whose CUDA
      kernel is cuBLASLt's bias + ReLU/GELU epilogue, the second as `addmm`);
    - recurrent layers: cuDNN (`_SdpaOnCuda.cudnn_rnn`).
    No torch-function mode is active, so `torch.overrides.has_torch_function` is false for plain tensors and the
    modules take their fast paths as in eager PyTorch (on CPU or CUDA tensors: their checks refuse meta tensors).
    """

    def __init__(self, trace: KernelTrace):
        super().__init__(trace)
        self.cuda = _SdpaOnCuda(self)
        self.emulated = {
            aten.scaled_dot_product_attention.default: self.sdpa,
            aten._native_multi_head_attention.default: self.native_mha,
            aten._transformer_encoder_layer_fwd.default: self.encoder_layer,
            aten.lstm.input: self.rnn(aten.lstm.input, 4),
            aten.gru.input: self.rnn(aten.gru.input, 3),
            aten.rnn_tanh.input: self.rnn(aten.rnn_tanh.input, 1),
            aten.rnn_relu.input: self.rnn(aten.rnn_relu.input, 1),
        }

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = self.emulated.get(func)
        if handler is not None and not self.muted:
            with self:
                return handler(*args, **kwargs)
        composite = torch._C.DispatchKey.CompositeImplicitAutograd
        if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), composite):
            with self:  # the C++ kernel eager runs (`decompose` would prefer a Python one: dropout's clones)
                return func._op_dk(composite, *args, **kwargs)
        return super().__torch_dispatch__(func, types, args, kwargs)

    def sdpa(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return self.cuda.sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)

    def rnn(self, op, gates: int):
        def run(*args):
            return self.cuda.cudnn_rnn(lambda *a: op.decompose(*a), gates, *args)

        return run

    def native_mha(
        self, query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias, mask=None,
        need_weights=True, average_attn_weights=True, mask_type=None,
    ):  # fmt: skip
        dh = embed_dim // num_head
        b = query.shape[0]
        if query is key and key is value and dh % 8 == 0 and not need_weights and mask is None:
            view = query.view(b, -1, num_head, dh).transpose(1, 2)
            if cuda_sdpa_backend(view, view, view) in ("flash", "efficient"):
                x = F.linear(query, qkv_weight, qkv_bias)
                q, k, v = (c.view(b, -1, num_head, dh).transpose(1, 2) for c in x.chunk(3, -1))
                y = F.scaled_dot_product_attention(q, k, v)
                return F.linear(y.transpose(1, 2).reshape(b, -1, embed_dim), proj_weight, proj_bias), None
        if not (query is key and key is value):
            raise NotImplementedError("the oracle restates native_multi_head_attention_cuda for self-attention")
        # the other branch: qkv_projection (gemm_nt: one mm), _transform_bias_rescale_qkv, bmm_nt, masked_softmax,
        # bmm_nn, transform0213_gemm_nt_bias (a copy, addmm), and the averaged attention weights (sum, div_)
        t = query.shape[1]
        qkv = torch.mm(query.reshape(b * t, embed_dim), qkv_weight.t()).view(b, t, 3 * embed_dim)
        q, k, v = aten._transform_bias_rescale_qkv(qkv, qkv_bias, num_head)
        qkt = torch.bmm(q.reshape(b * num_head, t, dh), k.reshape(b * num_head, t, dh).transpose(1, 2))
        qkt = qkt.view(b, num_head, t, t)
        if mask is None:
            qkt = torch.softmax(qkt, -1)
        else:
            if mask.dtype != torch.bool:
                mask = mask.to(torch.bool)
            qkt = aten._masked_softmax(qkt, mask, qkt.dim() - 1, mask_type)
        ctx = torch.bmm(qkt.view(b * num_head, t, t), v.reshape(b * num_head, t, dh)).view(b, num_head, t, dh)
        merged = ctx.permute(0, 2, 1, 3).contiguous().view(b * t, embed_dim)
        proj = torch.addmm(proj_bias, merged, proj_weight.t()).view(b, t, embed_dim)
        if need_weights and average_attn_weights:
            qkt = qkt.sum(1)
            qkt /= num_head
        return proj, (qkt if need_weights else None)

    def encoder_layer(
        self, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
        ln1_weight, ln1_bias, ln2_weight, ln2_bias, w1, b1, w2, b2, mask=None, mask_type=None,
    ):  # fmt: skip
        def norm(t, w, bias):
            return F.layer_norm(t, (embed_dim,), w, bias, eps)

        def linear_for_ffn(bias, t, w, gelu=None):
            flat = t.view(t.shape[0] * t.shape[1], t.shape[2])
            out = (
                aten._addmm_activation(bias, flat, w.t(), use_gelu=gelu)
                if gelu is not None
                else aten.addmm(bias, flat, w.t())
            )
            return out.view(t.shape[0], t.shape[1], -1)

        x = norm(src, ln1_weight, ln1_bias) if norm_first else src
        x = aten._native_multi_head_attention(
            x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, False, True, mask_type
        )[0]
        x.add_(src)
        if not norm_first:
            x = norm(x, ln1_weight, ln1_bias)
        pre = x
        if norm_first:
            x = norm(x, ln2_weight, ln2_bias)
        x = linear_for_ffn(b2, linear_for_ffn(b1, x, w1, bool(use_gelu)), w2)
        x.add_(pre)
        if not norm_first:
            x = norm(x, ln2_weight, ln2_bias)
        return x


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_meta else torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


@contextlib.contextmanager
def tracing() -> Iterator[tuple[KernelTrace, _SdpaOnCuda]]:
    """Inside: every kernel eager CUDA PyTorch would launch is appended to the yielded trace."""
    trace = KernelTrace()
    recorder = _Recorder(trace)
    sdpa = _SdpaOnCuda(recorder)
    with torch.no_grad(), sdpa, recorder:
        yield trace, sdpa


def trace_kernels(
    module: torch.nn.Module, example_inputs: Sequence[torch.Tensor], *, inference: bool = False
) -> KernelTrace:
    """The kernels eager CUDA PyTorch launches for one forward of `module` (eval mode) on `example_inputs`.

    Run on meta tensors (the zoo's `device="meta"` builds) it allocates nothing and takes about as long as a
    CPU forward's Python overhead. `inference=True` runs the forward under `torch.inference_mode()` with only a
    dispatch mode (`_InferenceRecorder`), so modules take their inference fast paths (nn.MultiheadAttention,
    nn.TransformerEncoderLayer) as in eager PyTorch: the oracle for those (on CPU tensors).
    """
    module = module.eval()
    if inference:
        trace = KernelTrace()
        recorder = _InferenceRecorder(trace)
        with torch.inference_mode(), recorder:
            recorder.mark([t for t in example_inputs if isinstance(t, torch.Tensor)])
            module(*example_inputs)
        return trace
    with tracing() as (trace, sdpa):
        sdpa.recorder.mark([t for t in example_inputs if isinstance(t, torch.Tensor)])
        module(*example_inputs)
    return trace
