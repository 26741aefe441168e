"""The HTML report of a real run, opened offline in headless Chromium: the charts render with a
non-zero size, every run is a dot, the verdicts are on the page, nothing is fetched; a
screenshot is saved in the test's temp dir (path printed; REFBENCH_SCREENSHOT copies it)."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from conftest import need, run_bench
from refbench import results as rs
from refbench.render.format import fmt_pct

CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1280,1000"]


def _find_browser() -> tuple[str | None, str | None]:
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                   None)
    return browser, shutil.which("chromedriver")


@pytest.fixture(scope="session")
def chrome():
    try:
        from selenium import webdriver
    except ImportError:
        need("selenium", "pip install -e '.[test]'")
    from selenium.webdriver.chrome.service import Service

    browser, driver = _find_browser()
    if not (browser and driver):  # installed by the set-up step (scripts/setup.sh), never by a test
        need("chromium/chromedriver", "run `make setup` (Debian packages chromium, chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    profile = tempfile.mkdtemp(prefix="refbench-chrome-")
    for a in CHROME_FLAGS + [f"--user-data-dir={profile}"]:
        opts.add_argument(a)
    d = webdriver.Chrome(options=opts, service=Service(driver))
    d.set_page_load_timeout(60)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.slow
def test_html_report_renders_in_chromium(s5_run, chrome, tmp_path):
    from selenium.webdriver.common.by import By

    html = tmp_path / "report.html"
    proc = run_bench("report", str(s5_run["results"]), "--html", str(html))
    assert proc.returncode == 0, proc.stderr
    results = rs.load(s5_run["results"])
    steps = [(sc.name, st) for sc, st in results.steps()]
    n_runs = sum(len(b.times) for _, st in steps for b in st.builds.values())

    chrome.get(html.as_uri())
    assert chrome.title.startswith("refbench: ")
    charts = chrome.find_elements(By.CSS_SELECTOR, "svg.chart")
    dists = chrome.find_elements(By.CSS_SELECTOR, "svg.chart.dist")
    assert len(dists) == len(steps) and chrome.find_elements(By.CSS_SELECTOR, "svg.chart.forest")
    for svg in charts:
        size = svg.size
        assert size["width"] > 100 and size["height"] > 40, size
    # every run is a drawn dot with a non-empty box
    dots = chrome.execute_script(
        "return Array.from(document.querySelectorAll('svg.dist circle.run'))"
        ".filter(c => { const r = c.getBoundingClientRect(); return r.width > 0 && r.height > 0; }).length")
    assert dots == n_runs
    body = chrome.find_element(By.TAG_NAME, "body").text
    for name, st in steps:
        for c in st.comparisons:
            assert f"{name} / {st.name}" in body
            assert f"{fmt_pct(c.rel)} {c.verdict}" in body  # the step's verdict badge
    counts = results.verdict_counts()
    assert f"{counts['slower']} slower" in body and f"{counts['faster']} faster" in body
    # opened offline: nothing was requested beyond the file itself
    assert chrome.execute_script("return performance.getEntriesByType('resource').length") == 0

    shot = tmp_path / "report.png"
    height = chrome.execute_script("return document.body.scrollHeight")
    chrome.set_window_size(1280, min(max(height, 600), 8000))
    assert chrome.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    if os.environ.get("REFBENCH_SCREENSHOT"):
        shutil.copy(shot, os.environ["REFBENCH_SCREENSHOT"])
