"""Helpers for the real-browser checks (tests/ui/test_browser.py, bench/ui_speed.py): start `streamlit run app.py`
on a free localhost port, drive Debian's headless Chromium through Debian's chromedriver (never a downloaded
browser), and read the headline metrics off the page."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "app.py"
ARTIFACTS = REPO / "artifacts" / "ui"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage")


def browser_missing() -> str | None:
    """Why the browser cannot run here, or None."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        return (f"{', '.join(missing)} not found: install Debian's chromium and chromium-driver "
                f"(bash scripts/install_browser.sh)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[test]'"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_app(timeout_s: float = 40.0):
    """Start the app on a free 127.0.0.1 port; yield its URL; always stop it (and only it) afterwards."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="streamlit-", suffix=".log", delete=False)
    cmd = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true",
           "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {proc.returncode}: {Path(log.name).read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not answer on {url} within {timeout_s:.0f} s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        os.unlink(log.name)


@contextmanager
def chromium(width: int = 1500, height: int = 1150):
    """Headless Debian Chromium via Debian's chromedriver, with a fresh profile directory."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    why = browser_missing()
    if why:
        raise RuntimeError(why)
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    if width < 500:  # Chromium's windows are at least 500 px wide: emulate a phone's viewport instead
        phone_viewport(driver, width, height)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def phone_viewport(driver, width: int, height: int) -> None:
    """A phone-sized, touch-style viewport (CSS pixels) through the DevTools protocol."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 2, "mobile": True})


_METRICS_JS = """
return Array.from(document.querySelectorAll('[data-testid="stMetric"]')).map(el => [
  (el.querySelector('[data-testid="stMetricLabel"]') || {}).innerText || '',
  (el.querySelector('[data-testid="stMetricValue"]') || {}).innerText || '']);
"""


def metrics(driver) -> list[tuple[str, str]]:
    """(label, value) of every st.metric on the page, in page order (one round trip to the browser)."""
    return [(lab.strip(), val.strip()) for lab, val in driver.execute_script(_METRICS_JS)]


def metric(driver, label: str) -> str | None:
    """The first metric with this label (the first device's), or None while the page is not drawn yet."""
    return next((v for lab, v in metrics(driver) if lab == label), None)


def wait_for(predicate, timeout_s: float, what: str, poll_s: float = 0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = predicate()
        if v:
            return v
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def press_slider(driver, key_count: int, key: str = "RIGHT"):
    """Focus the batch slider's thumb and press an arrow key `key_count` times (one step each)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    thumb = driver.find_element(By.CSS_SELECTOR, '.st-key-batch [role="slider"], .st-key-batch input[type="range"]')
    driver.execute_script("arguments[0].focus();", thumb)
    chain = ActionChains(driver)
    for _ in range(key_count):
        chain.send_keys(getattr(Keys, key))
    chain.perform()
