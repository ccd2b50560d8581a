"""How fast the web UI reacts to a widget change. Prints figures; asserts nothing (not a test).

Run from the repository root:  python -m bench.ui_speed [--repeats 10] [--no-browser]

1. AppTest (the script run alone, in-process): after the first load and a warm-up, each change sets a widget to a
   value not seen before (so the estimates are computed, not served from st.cache_data) and times
   `widget.set_value(v).run()`. AppTest polls the script thread every few ms, so this slightly overstates it.
2. Real browser (Debian headless Chromium + `streamlit run app.py`): one arrow key on the batch slider, timed until
   the headline "Tokens/s total" shows the planner's own number for the new batch. Includes the slider's
   debounce, the websocket round trip, the script run and React/Vega drawing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def _stats(label: str, xs: list[float]) -> None:
    ms = sorted(1e3 * x for x in xs)
    print(f"  {label:46s} median {statistics.median(ms):7.1f} ms   min {ms[0]:7.1f}   max {ms[-1]:7.1f}   (n={len(ms)})")


def bench_apptest(repeats: int) -> None:
    from streamlit.testing.v1 import AppTest

    t0 = time.perf_counter()
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update({"hardware": "h100-sxm,rtx-4090"})
    at.run()
    print(f"AppTest: first load {1e3 * (time.perf_counter() - t0):.0f} ms (imports, catalog, first estimates)")
    at.slider(key="batch").set_value(2).run()  # warm-up

    def timed(change) -> float:
        t = time.perf_counter()
        change().run()
        assert not at.exception, [e.value for e in at.exception]
        return time.perf_counter() - t

    _stats("batch slider, new value (cache miss)",
           [timed(lambda b=b: at.slider(key="batch").set_value(b)) for b in range(3, 3 + repeats)])
    _stats("batch slider, value seen before (cache hit)",
           [timed(lambda b=b: at.slider(key="batch").set_value(b)) for b in range(3, 3 + repeats)])
    fmts = ["int8", "int4-g128", "q4_k_m", "fp8", "q8_0", "bf16", "q4_0", "nf4", "awq-int4", "q6_k", "fp16"]
    _stats("weight format (cache miss)",
           [timed(lambda f=f: at.selectbox(key="weights").set_value(f)) for f in fmts[:repeats]])
    models = ["mistral-7b", "qwen2.5-7b", "llama-2-7b", "phi-3-mini", "gemma-2-9b", "llama-2-13b", "llama-3.1-8b"]
    _stats("model (cache miss)", [timed(lambda m=m: at.selectbox(key="model").set_value(m)) for m in models])
    for section in ("Batching", "Context length", "Roofline", "Quantization"):
        at.session_state["section"] = section
        at.run()
        _stats(f"batch slider with the {section} tab open",
               [timed(lambda b=b: at.slider(key="batch").set_value(b)) for b in range(40, 40 + repeats)])
    at.session_state["section"] = "Memory"
    at.run()


def bench_browser(repeats: int) -> None:
    from planner import estimate
    from tests.ui.browser import browser_missing, chromium, metric, press_slider, running_app, wait_for

    why = browser_missing()
    if why:
        print(f"browser: skipped ({why})")
        return
    with running_app() as url, chromium() as driver:
        t0 = time.perf_counter()
        driver.get(f"{url}/?model=llama-3.1-8b&hardware=h100-sxm,rtx-4090&batch=1")
        want = f"{estimate('llama-3.1-8b', 'h100-sxm', batch=1).decode.tokens_per_s_total:,.1f}"
        wait_for(lambda: metric(driver, "Tokens/s total") == want, 60, "first page")
        print(f"browser: first page with numbers {1e3 * (time.perf_counter() - t0):.0f} ms (cold server)")
        times = []
        for b in range(2, 2 + repeats):
            want = f"{estimate('llama-3.1-8b', 'h100-sxm', batch=b).decode.tokens_per_s_total:,.1f}"
            time.sleep(0.5)  # the page is idle
            t = time.perf_counter()
            press_slider(driver, 1)
            wait_for(lambda w=want: metric(driver, "Tokens/s total") == w, 20, f"batch {b}", poll_s=0.005)
            times.append(time.perf_counter() - t)
        _stats("one arrow key on the batch slider -> new headline", times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    bench_apptest(args.repeats)
    if not args.no_browser:
        bench_browser(args.repeats)


if __name__ == "__main__":
    main()
