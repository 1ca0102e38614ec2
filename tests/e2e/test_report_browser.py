"""report.html of the default bundle in headless Chromium: it loads cleanly, shows every verdict and plot.

Needs Debian's chromium and chromium-driver (scripts/install.sh --dev installs them as root). Without
them the test skips, unless EDGEKIT_REQUIRE_BROWSER=1 (set by CI), where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgekit.pipeline.build import BuildResult

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                  "--disable-dev-shm-usage", "--window-size=1280,900")  # fmt: skip


def _missing() -> str | None:
    for tool in ("chromium", "chromedriver"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install 'edgekit[dev]')"
    return None


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    reason = _missing()
    if reason:
        if os.environ.get("EDGEKIT_REQUIRE_BROWSER") == "1":
            pytest.fail(f"EDGEKIT_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    options.binary_location = shutil.which("chromium") or "chromium"
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def test_report_html_renders_in_chromium(default_build: BuildResult, browser: object, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    driver = browser  # type: ignore[assignment]
    report = json.loads((default_build.bundle / "report.json").read_text())
    driver.get((default_build.bundle / "report.html").resolve().as_uri())  # type: ignore[attr-defined]

    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]  # type: ignore[attr-defined]
    assert not severe, severe

    text = driver.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]
    assert f"edgekit accuracy sign-off: {report['bundle']}" in text
    rows = driver.find_elements(By.CSS_SELECTOR, "#summary-table tbody tr")  # type: ignore[attr-defined]
    shown = {r.find_element(By.CSS_SELECTOR, "td.name a").text: r.find_element(By.CSS_SELECTOR, ".badge").text
             for r in rows}  # fmt: skip
    for artifact in report["artifacts"]:
        assert shown[artifact["name"]] == artifact["verdict"].upper(), (artifact["name"], shown)
        card = driver.find_element(By.ID, "artifact-" + artifact["name"].replace("_", "-"))  # type: ignore[attr-defined]
        assert card.is_displayed() and artifact["verdict"].upper() in card.text
    assert "noise floor (bfloat16 reference)" in shown and "Sign-off" in text
    for artifact in report["artifacts"]:  # where it differs: the worst spans and the completions, shown
        anchor = "artifact-" + artifact["name"].replace("_", "-")
        section = driver.find_element(By.ID, anchor + "-differs")  # type: ignore[attr-defined]
        assert section.is_displayed() and section.text == "Where it differs"
        card = driver.find_element(By.ID, anchor)  # type: ignore[attr-defined]
        assert len(card.find_elements(By.CSS_SELECTOR, ".span")) == 10
        assert len(card.find_elements(By.CSS_SELECTOR, "table.completions tbody tr")) == 5
        assert len(card.find_elements(By.CSS_SELECTOR, ".tok.worst")) == 10
    assert "Scored token range 0–8,192" in text and "runtime engine" in text

    images = driver.find_elements(By.TAG_NAME, "img")  # type: ignore[attr-defined]
    assert len(images) >= 4
    for img in images:
        width = driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img)  # type: ignore[attr-defined]
        assert width and width > 100, img.get_attribute("alt")

    height = driver.execute_script("return document.body.scrollHeight")  # type: ignore[attr-defined]
    driver.set_window_size(1280, min(int(height) + 100, 16000))  # type: ignore[attr-defined]
    shot = tmp_path / "report.png"
    assert driver.save_screenshot(str(shot))  # type: ignore[attr-defined]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 100_000


def test_ladder_and_imatrix_sections_render_in_chromium(levers_build: BuildResult, browser: object, tmp_path: Path
                                                        ) -> None:  # fmt: skip
    from selenium.webdriver.common.by import By

    driver = browser  # type: ignore[assignment]
    report = json.loads((levers_build.bundle / "report.json").read_text())
    driver.get((levers_build.bundle / "report.html").resolve().as_uri())  # type: ignore[attr-defined]
    assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]  # type: ignore[attr-defined]
    (ladder,) = report["ladders"]
    card = driver.find_element(By.ID, "ladder-gguf-auto")  # type: ignore[attr-defined]
    assert card.is_displayed() and f"Why {ladder['kept']}:" in card.text
    rows = card.find_elements(By.CSS_SELECTOR, ".ladder-table tbody tr")
    assert [r.find_element(By.CSS_SELECTOR, "td.name").text.split(" ←")[0] for r in rows] == [
        c["label"] for c in ladder["candidates"]
    ]
    assert "← kept" in card.find_element(By.CSS_SELECTOR, "tr.kept").text
    comparison = driver.find_element(By.CSS_SELECTOR, ".comparison-table")  # type: ignore[attr-defined]
    assert comparison.is_displayed() and "with imatrix" in comparison.text and "difference (paired)" in comparison.text
    height = driver.execute_script("return document.body.scrollHeight")  # type: ignore[attr-defined]
    driver.set_window_size(1280, min(int(height) + 100, 16000))  # type: ignore[attr-defined]
    shot = tmp_path / "report-levers.png"
    assert driver.save_screenshot(str(shot)) and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # type: ignore[attr-defined]
    if keep := os.environ.get("EDGEKIT_SCREENSHOTS"):
        shutil.copyfile(shot, Path(keep) / shot.name)
