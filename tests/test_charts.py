"""Chart axes a person can read: exact counts as numbers, at least two ticks on every log axis, x labels that do
not overlap, and capacity lines that stay visible when two targets nearly coincide."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from analyzer.charts import Axis, fmt_value, llm_capacity, llm_latency

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(
    ("value", "label"),
    [(8192, "8192"), (1024, "1024"), (32768, "32768"), (131072, "131k"), (1500.5, "1.5k"), (0.25, "0.25")],
)
def test_tick_labels(value, label):
    assert fmt_value(value) == label


@pytest.mark.parametrize(("lo", "hi"), [(1020, 1280), (1.5, 9.0), (40, 700), (3, 3000), (16, 1000)])
def test_a_log_axis_has_two_ticks_or_more_inside_its_range(lo, hi):
    ticks = Axis(lo, hi, 0, 100, log=True).ticks()
    assert len(ticks) >= 2 and all(lo <= t <= hi for t in ticks), ticks


def _x_labels(svg: str) -> list[tuple[float, str]]:
    root = ET.fromstring(svg)
    return [
        (float(t.get("x")), t.text)
        for t in root.iter(f"{SVG}text")
        if t.get("text-anchor") == "middle" and t.get("font-size") == "10"
    ]


def test_x_labels_of_many_contexts_do_not_overlap():
    contexts = [256, 512, 1024, 1280, 1536, 2048, 4096, 8192, 16384, 32768]
    points = [{"ttft_ms": 10.0 * c / 256, "tpot_ms": 20 + c / 1000} for c in contexts]
    labels = _x_labels(llm_latency("h100-80gb", contexts, points))
    assert labels[0][1] == "256" and "8192" in [t for _, t in labels]  # exact counts, not 8.19k
    for (xa, a), (xb, b) in zip(labels, labels[1:], strict=False):
        assert xb - xa >= 3.1 * (len(a) + len(b)), (a, b, xb - xa)  # half widths at ~6.2 px a character


def test_a_slice_line_under_the_whole_gpu_stays_visible():
    series = [("1g.20gb", [20, 5]), ("7g.80gb", [63, 15]), ("full GPU", [64, 16])]
    svg = llm_capacity("h100-80gb", [1024, 4096], series)
    widths = [float(w) for w in re.findall(r'<polyline [^>]*stroke-width="([0-9.]+)"', svg)]
    assert widths == [2, 6, 2]  # 7g.80gb is within 8% of the whole GPU at every context: wider, underneath
