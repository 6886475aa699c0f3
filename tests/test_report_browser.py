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
    for chart in charts:
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
