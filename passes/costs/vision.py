"""Detection heads (`relax.vision.*`): documented approximations, not silence.

These ops' work depends on the data (how many boxes survive, how large each region of interest is), which a
static analysis cannot know. Each rule counts a stated case, so a detection model is not silently partial:

- roi_align: each output element averages s x s bilinear samples (s = `sample_ratio`; an adaptive ratio, -1,
  depends on each RoI's size and is taken as 2, torchvision's Mask R-CNN default). NB: one bilinear sample is
  6 FLOPs for its 4 weights and 4 multiplies + 3 adds, 13 in all; averaging adds 1 per sample and 1 divide
  per output: numel(out) x (14 s^2 + 1). It reads the RoIs and at most 4 input values per sample.
- roi_pool: each output element takes the max over its bin; a bin's size depends on the RoI and is taken as an
  RoI covering the whole feature map: ceil(H / ph) x ceil(W / pw) compares per output element (an upper bound).
- non_max_suppression, all_class_non_max_suppression: the worst case, every box compared with every other
  (no box suppressed early) per batch and class: a sort of n scores (n log2 n compares) and n (n - 1) / 2
  IoUs of 14 FLOPs each (intersection: 2 max, 2 min, 2 subtract, 2 clamp, 1 multiply; union: 2 adds and a
  subtract of the two areas, the ratio, the threshold compare). They read the boxes and scores and write the
  selection.
- get_valid_counts: one compare and one prefix-sum add per box.
- multibox_transform_loc: a softmax over the class scores (5 FLOPs per element, as `relax.nn.softmax`) and a
  box decode of 20 FLOPs per anchor (centre and size from the anchor, 4 variance scalings, 2 exps, corners).
"""

from __future__ import annotations

import math

from ..graph import TensorInfo
from .registry import Cost, register

ADAPTIVE_SAMPLE_RATIO = 2  # torchvision's Mask R-CNN default, for sample_ratio <= 0 (adaptive)
BILINEAR_SAMPLE_FLOPS = 13
IOU_FLOPS = 14
BOX_DECODE_FLOPS = 20


def _spatial(data: TensorInfo, layout: str) -> tuple[int, int]:
    """(H, W) of an NCHW or NHWC feature map."""
    if layout == "NHWC":
        return data.shape[1], data.shape[2]
    return data.shape[2], data.shape[3]


@register("relax.vision.roi_align", category="pooling")
def _roi_align(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """numel(out) x (14 s^2 + 1) FLOPs; reads the RoIs and up to 4 values per sample."""
    data, rois = inputs[0], inputs[1]
    s = int(attrs.get("sample_ratio", -1))
    s = s if s > 0 else ADAPTIVE_SAMPLE_RATIO
    out = outputs[0]
    samples = out.numel * s * s
    itemsize = data.nbytes // data.numel if data.numel else 0
    read = rois.nbytes + min(data.nbytes, 4 * samples * itemsize)
    return Cost(flops=samples * (BILINEAR_SAMPLE_FLOPS + 1) + out.numel, bytes_read=read)


@register("relax.vision.roi_pool", category="pooling")
def _roi_pool(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """numel(out) x ceil(H / ph) x ceil(W / pw) compares (an RoI as large as the feature map)."""
    data, rois = inputs[0], inputs[1]
    h, w = _spatial(data, str(attrs.get("layout", "NCHW")))
    ph, pw = (list(attrs.get("pooled_size", [1, 1])) * 2)[:2]
    window = math.ceil(h / ph) * math.ceil(w / pw)
    out = outputs[0]
    itemsize = data.nbytes // data.numel if data.numel else 0
    return Cost(flops=out.numel * window, bytes_read=rois.nbytes + min(data.nbytes, out.numel * window * itemsize))


def nms_flops(groups: int, n: int) -> int:
    """Worst-case NMS over `groups` independent sets of `n` boxes: sort + every pair's IoU."""
    sort = math.ceil(n * math.log2(n)) if n > 1 else 0
    return groups * (sort + IOU_FLOPS * n * (n - 1) // 2)


@register("relax.vision.all_class_non_max_suppression", category="other")
def _all_class_nms(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """boxes (B, N, 4), scores (B, C, N): B x C sets of N boxes, worst case."""
    scores = inputs[1]
    b, c, n = scores.shape
    return Cost(flops=nms_flops(b * c, n))


@register("relax.vision.non_max_suppression", category="other")
def _nms(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """data (B, N, K): B sets of N boxes (class-aware suppression compares within a class: fewer), worst case."""
    b, n = inputs[0].shape[0], inputs[0].shape[1]
    return Cost(flops=nms_flops(b, n))


@register("relax.vision.get_valid_counts", category="other")
def _get_valid_counts(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """2 FLOPs per box of data (B, N, K)."""
    b, n = inputs[0].shape[0], inputs[0].shape[1]
    return Cost(flops=2 * b * n)


@register("relax.vision.multibox_transform_loc", category="other")
def _multibox_transform_loc(attrs: dict, inputs: list[TensorInfo], outputs: tuple[TensorInfo, ...]) -> Cost:
    """5 x numel(class scores) (softmax) + 20 per anchor and batch (box decode)."""
    cls_pred, anchor = inputs[0], inputs[2]
    anchors = anchor.numel // 4
    return Cost(flops=5 * cls_pred.numel + BOX_DECODE_FLOPS * cls_pred.shape[0] * anchors)
