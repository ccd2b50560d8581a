"""Regenerate the README's screenshots with Debian's headless Chromium: `python3 docs/take_screenshots.py`.

docs/screenshot.png        desktop (1400 x 1000): H100 vs H200 vs MI300X for Llama-3.1-8B at batch 64, prompt 2048
docs/screenshot-phone.png  phone (390 x 844 CSS px, 2x): the default page's first screen
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.ui.browser import chromium, metrics, running_app, wait_for  # noqa: E402

PAGES = (("screenshot.png", 1400, 1000, "?model=llama-3.1-8b&hardware=h100-sxm,h200-sxm,mi300x&batch=64&prompt=2048"),
         ("screenshot-phone.png", 390, 844, "?model=llama-3.1-8b&hardware=h100-sxm,rtx-4090"))


def main() -> None:
    with running_app() as url:
        for name, w, h, query in PAGES:
            with chromium(w, h) as driver:
                driver.get(url + "/" + query)
                n = query.split("hardware=")[1].split("&")[0].count(",") + 1
                wait_for(lambda: len([v for lab, v in metrics(driver) if lab == "Tokens/s total"]) == n, 60,
                         "the headline")
                time.sleep(2.0)
                driver.save_screenshot(str(REPO / "docs" / name))
                print(f"wrote docs/{name}")


if __name__ == "__main__":
    main()
