"""The app in a real browser: `streamlit run app.py` on a free localhost port, Debian's headless Chromium through
Debian's chromedriver (Selenium; no browser download). Waits for the headline numbers, moves the batch slider with
the keyboard, checks the numbers and the shareable URL changed, and saves a screenshot to artifacts/ui/.

The expected numbers are the planner's own (the page must show what `planner estimate` prints); the UI's arithmetic
is covered by tests/ui/test_app.py. If Chromium is missing this FAILS (CI installs it: scripts/install_browser.sh).
"""

from __future__ import annotations

import time

import pytest

from planner import estimate
from tests.ui.browser import ARTIFACTS, browser_missing, chromium, metric, press_slider, running_app, wait_for

pytestmark = pytest.mark.browser

QUERY = "?model=llama-3.1-8b&hardware=h100-sxm,rtx-4090&weights=fp16&kv=fp16&batch=1&prompt=512&output=128&eff=auto"


def _shown(x: float) -> str:
    """How the app prints a tokens/s figure (app.py `_rate`)."""
    return f"{x:,.1f}"


def test_app_in_headless_chromium():
    why = browser_missing()
    if why:
        pytest.fail(why)
    from selenium.webdriver.common.by import By

    want_b1 = _shown(estimate("llama-3.1-8b", "h100-sxm", batch=1).decode.tokens_per_s_total)
    want_b8 = _shown(estimate("llama-3.1-8b", "h100-sxm", batch=8).decode.tokens_per_s_total)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with running_app() as url, chromium(1500, 1700) as driver:
        try:
            driver.get(url + "/" + QUERY)
            wait_for(lambda: metric(driver, "Tokens/s total") == want_b1, 45, f"headline tokens/s total {want_b1}")
            assert metric(driver, "TTFT").endswith(" ms") and metric(driver, "Time per output token").endswith(" ms")
            assert "Fits" in driver.find_element(By.CSS_SELECTOR, '[data-testid="stAlert"]').text

            t0 = time.perf_counter()
            press_slider(driver, 7)  # batch 1 -> 8, one step per arrow key
            wait_for(lambda: metric(driver, "Tokens/s total") == want_b8, 20, f"tokens/s total {want_b8} at batch 8")
            print(f"batch 1 -> 8 by keyboard: headline updated after {time.perf_counter() - t0:.2f} s")
            wait_for(lambda: "batch=8" in driver.current_url, 5, "batch=8 in the page URL")

            tab = next(t for t in driver.find_elements(By.CSS_SELECTOR, '[role="tab"]') if t.text == "Batching")
            driver.execute_script("arguments[0].click();", tab)
            wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, '[data-testid="stVegaLiteChart"] canvas, '
                                                  '[data-testid="stVegaLiteChart"] svg'), 20, "the batching chart")
            time.sleep(1.0)  # let Vega finish drawing before the screenshot
            assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
        finally:
            driver.save_screenshot(str(ARTIFACTS / "app.png"))
    assert (ARTIFACTS / "app.png").stat().st_size > 10_000
