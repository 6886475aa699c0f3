"""The HTML report in a real headless browser (Debian's chromium + chromedriver, driven by selenium).

Skipped when the browser is not installed, unless PREFLIGHT_REQUIRE_BROWSER=1 (set by `.ci/run`, which
installs it), in which case a missing browser fails the test. Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import pytest

import analyzer

ARTIFACTS = Path(os.environ.get("PREFLIGHT_TEST_ARTIFACTS", Path(__file__).resolve().parent / "artifacts"))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# as root, with this machine's closed network: no sandbox, no background connections
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1366,900",
]


def _requests(driver) -> list[str]:
    """URLs the browser requested since the last call (from the DevTools network events)."""
    import json

    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def _browser_missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            return f"{path} not found (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    missing = _browser_missing()
    if missing:
        if os.environ.get("PREFLIGHT_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser test required but {missing}")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield d
    d.quit()


@pytest.mark.parametrize(
    "model, devices, batches",
    [
        ("zoo:resnet18", ["h100-80gb", "a100-40gb"], [1, 4, 16]),
        ("zoo:bert_tiny", ["h200-141gb"], [1, 8]),
    ],
)
def test_html_report_renders_in_chromium(driver, tmp_path, model, devices, batches):
    page = tmp_path / "report.html"
    analyzer.report(model, devices=devices, batches=batches, output=str(page))
    _requests(driver)
    driver.get(page.as_uri())
    assert driver.title.startswith("Pre-deployment report")
    errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    assert errors == []
    # self-contained: the page itself is the only request
    assert _requests(driver) == [page.as_uri()]
    charts = driver.find_elements("css selector", "svg.chart")
    assert len(charts) == 3 * len(devices) + 3
    boxes = driver.execute_script(_LABEL_BOXES)
    for chart in charts:
        assert _overlaps(boxes[chart.get_attribute("aria-label")]) == [], chart.get_attribute("aria-label")
        size = chart.size
        assert size["width"] > 200 and size["height"] > 100, chart.get_attribute("aria-label")
        drawn = chart.find_elements("css selector", ".point, .series, .bar")
        assert drawn, f"empty chart: {chart.get_attribute('aria-label')}"
        visible = [e for e in drawn if e.size["width"] > 0 or e.size["height"] > 0]
        assert visible, f"nothing visible in {chart.get_attribute('aria-label')}"
    # no horizontal overflow at a laptop width
    assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": 1366, "height": height, "scale": 1},
        },
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = ARTIFACTS / f"report-{model.removeprefix('zoo:')}.png"
    out.write_bytes(base64.b64decode(shot["data"]))
    assert out.stat().st_size > 20_000


# Rendered boxes of every chart's own text (tick labels, line labels, legend, titles): {chart label: [[x, y, w, h,
# text], ...]}, read after layout; text in the plot's nested <svg> (the data) is not a label.
_LABEL_BOXES = """
const out = {};
for (const chart of document.querySelectorAll('svg.chart')) {
  out[chart.getAttribute('aria-label')] = [...chart.children].filter(e => e.tagName === 'text').map(e => {
    const r = e.getBoundingClientRect();
    return [r.x, r.y, r.width, r.height, e.textContent];
  });
}
return out;
"""


def _overlaps(boxes: list) -> list[tuple[str, str]]:
    """Pairs of labels whose rendered boxes overlap by more than a pixel each way."""
    hits = []
    for i, (x, y, w, h, a) in enumerate(boxes):
        for x2, y2, w2, h2, b in boxes[i + 1 :]:
            if min(x + w, x2 + w2) - max(x, x2) > 1 and min(y + h, y2 + h2) - max(y, y2) > 1:
                hits.append((a, b))
    return hits


def test_llm_report_charts_render_readably_in_chromium(driver, tmp_path):
    """The LLM serving report's charts (latency against context, concurrency against context) drawn in the
    browser: no console error, something drawn in each, at least two tick labels on each axis, and no two labels
    on top of each other (the overlapping `1.02k`/`1.28k` ticks and the line label hidden under another that a
    person found)."""
    from analyzer.charts import PAD_L
    from analyzer.llm import llm
    from analyzer.predeploy import write

    tiny = "gpt2?layers=2&hidden=64&heads=4&intermediate=256&vocab=256&max_pos=128&seq_len=16"
    report = llm(f"zoo:{tiny}", prompt=16, generate=4, devices=["h100-80gb", "a100-40gb"], dtype="float32")
    page = tmp_path / "llm.html"
    write(report, page)
    driver.get(page.as_uri())
    assert [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []
    charts = driver.find_elements("css selector", "svg.chart")
    assert len(charts) >= 4  # latency and capacity, per device
    boxes = driver.execute_script(_LABEL_BOXES)
    y_axis_x = str(PAD_L - 4)
    for chart in charts:
        label = chart.get_attribute("aria-label")
        assert chart.size["width"] > 200 and chart.size["height"] > 100, label
        drawn = [e for e in chart.find_elements("css selector", "polyline, circle, rect, path") if e.size["width"]]
        assert len(drawn) > 2, f"empty chart: {label}"  # more than the background and the plot frame
        texts = boxes[label]
        assert all(w > 0 and h > 0 for _, _, w, h, _ in texts), label
        assert _overlaps(texts) == [], label
        if not chart.find_elements("css selector", ":scope > svg"):
            continue  # no plot area, no axes: the bar chart of shares by category
        # tick labels (font-size 10): the y axis's end at the plot's left edge, the x axis's are centred below it
        ticks = chart.find_elements("css selector", ":scope > text[font-size='10']")
        y_ticks = [t for t in ticks if t.get_attribute("text-anchor") == "end" and t.get_attribute("x") == y_axis_x]
        x_ticks = [t for t in ticks if t.get_attribute("text-anchor") == "middle"]
        assert len(y_ticks) >= 2 and len(x_ticks) >= 2, f"{label}: {[t.text for t in ticks]}"


def test_the_overlap_check_sees_overlapping_labels():
    """Negative control for `_overlaps`: two labels drawn at one place overlap; side by side they do not."""
    assert _overlaps([[0, 0, 30, 12, "1.02k"], [20, 0, 30, 12, "1.28k"]]) == [("1.02k", "1.28k")]
    assert _overlaps([[0, 0, 30, 12, "1.02k"], [31, 0, 30, 12, "2.05k"]]) == []


def test_the_browser_check_catches_errors_and_fetches(driver, tmp_path):
    """Negative control: the checks above would see a console error and a fetched resource."""
    page = tmp_path / "bad.html"
    (tmp_path / "style.css").write_text("body { color: black }")
    page.write_text(
        '<!DOCTYPE html><html><head><title>bad</title><link rel="stylesheet" href="style.css"></head>'
        '<body><img src="missing-image.png"><script>console.error("boom")</script></body></html>'
    )
    _requests(driver)
    driver.get(page.as_uri())
    messages = " ".join(e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE")
    assert "boom" in messages and "missing-image.png" in messages
    fetched = _requests(driver)
    assert page.as_uri() in fetched and any(u.endswith("style.css") for u in fetched)
