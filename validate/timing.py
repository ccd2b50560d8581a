"""Timing, device fingerprints and the two roofline probes (STREAM bandwidth, GEMM peak).

Conventions: times in milliseconds; bandwidth in GB/s with GB = 1e9 bytes; compute in TFLOP/s
with T = 1e12. CPU timings use ``time.perf_counter`` around each call; CUDA timings use a pair of
CUDA events per rep (recorded on the current stream) and one ``synchronize`` after all reps.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable, TypedDict

import torch

__all__ = [
    "TimingStats",
    "StreamResult",
    "time_fn",
    "llc_bytes",
    "device_fingerprint",
    "stream_bandwidth_gbs",
    "gemm_peak_tflops",
]


class _TimingBase(TypedDict):
    """Summary of ``reps`` timed calls (milliseconds). ``flushed``: the LLC was flushed before each
    rep (a "cold" measurement); otherwise operands may stay cached from the previous rep ("hot")."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    mean_ms: float
    std_ms: float
    reps: int
    flushed: bool
    flush_bytes: int


class TimingStats(_TimingBase, total=False):
    """Also: ``method`` (perf_counter / cuda-events[+host-ahead]), ``spread_pct`` ((p90 - p10) / median, %),
    ``rounds`` (rep blocks run to get the spread under the bound) and ``graph_ms`` (CUDA-graph replay per call)."""

    method: str
    spread_pct: float
    rounds: int
    graph_ms: float


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _quantile(sorted_ms: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list (numpy's default method)."""
    if len(sorted_ms) == 1:
        return sorted_ms[0]
    pos = q * (len(sorted_ms) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_ms) - 1)
    return sorted_ms[lo] + (sorted_ms[hi] - sorted_ms[lo]) * (pos - lo)


GRAPH_BELOW_MS = 0.05  # CUDA calls faster than 50 us are also timed as a CUDA-graph replay
GRAPH_INNER = 20       # calls captured per graph (the replay's time / GRAPH_INNER is one call)
MAX_SPREAD_PCT = 10.0  # CPU: repeat the reps until (p90 - p10) / median is under this, ...
MAX_ROUNDS = 3         # ... at most this many rounds; the spread is recorded either way


def _host_ahead(device: torch.device, seconds: float) -> bool:
    """Enqueue a GPU busy-wait of about ``seconds`` (``torch.cuda._sleep``, in SM clock cycles) so the host runs
    ahead of the GPU: the kernels timed after it are all enqueued before the GPU reaches the start event, and
    host launch time does not leak into the events. False where the op is missing (then plain events)."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return False
    props = torch.cuda.get_device_properties(device)
    hz = float(getattr(props, "clock_rate", 0) or 0) * 1e3 or 2.0e9  # clock_rate is in kHz where present
    sleep(int(min(seconds, 0.01) * hz))  # at most ~10 ms a rep: bounded even where the clock reads low
    return True


def _summary(times_ms: list[float]) -> dict:
    ordered = sorted(times_ms)
    med = statistics.median(ordered)
    return dict(median_ms=med, p10_ms=_quantile(ordered, 0.10), p90_ms=_quantile(ordered, 0.90), min_ms=ordered[0],
                mean_ms=statistics.fmean(ordered), std_ms=statistics.stdev(ordered) if len(ordered) > 1 else 0.0)


def spread_pct(stats) -> float:
    """(p90 - p10) / median in %: the noise of one measurement."""
    return 100.0 * (stats["p90_ms"] - stats["p10_ms"]) / stats["median_ms"]


def _cuda_times(fn, reps, device, flush_buf) -> tuple[list[float], str]:
    t0 = time.perf_counter()
    fn()  # host time of one enqueue (no sync): how far ahead the host must be
    host_s = time.perf_counter() - t0
    torch.cuda.synchronize(device)
    method = "cuda-events"
    events = []
    for _ in range(reps):
        if flush_buf is not None:
            flush_buf.zero_()
        if _host_ahead(device, 2.0 * host_s + 20e-6):
            method = "cuda-events+host-ahead"
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) for s, e in events], method


def cuda_graph_ms(fn, reps: int, device, inner: int = GRAPH_INNER) -> float | None:
    """Median per-call time of ``inner`` calls captured in one CUDA graph and replayed ``reps`` times (no host
    launch cost; operands hot in L2). None when the call cannot be captured (a host sync inside, say)."""
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(inner):
                fn()
        graph.replay()
        torch.cuda.synchronize(device)
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            times.append((start, end))
        torch.cuda.synchronize(device)
        return statistics.median(s.elapsed_time(e) for s, e in times) / inner
    except Exception:  # noqa: BLE001 - capture is best effort; the eager time stands alone then
        torch.cuda.synchronize(device)
        return None


def time_fn(
    fn: Callable[[], Any],
    *,
    warmup: int,
    reps: int,
    device: torch.device | str,
    flush_bytes: int | None = None,
    max_spread_pct: float | None = None,
    max_rounds: int = MAX_ROUNDS,
    graph: bool = True,
) -> TimingStats:
    """Time ``fn()`` ``reps`` times after ``warmup`` untimed calls.

    With ``flush_bytes`` (choose > the last-level cache, e.g. ``2 * llc_bytes()``), a buffer of that
    size is overwritten before every rep, outside the timed region, so each rep starts with cold
    caches. On CUDA the flush is a ``zero_`` kernel enqueued before the start event, then a GPU busy-wait
    (``_host_ahead``) keeps the host ahead so launch time stays out of the events; calls under GRAPH_BELOW_MS
    are also timed as a CUDA-graph replay (``graph_ms``). On CPU, with ``max_spread_pct``, the reps are repeated
    (up to ``max_rounds`` rounds, all reps kept) until (p90 - p10) / median is under that bound; ``spread_pct``
    and ``rounds`` say how it ended, so noisy records can be told from model error.
    """
    device = torch.device(device)
    if reps < 1:
        raise ValueError("reps must be >= 1")
    flush_buf = (
        torch.empty(max(1, flush_bytes // 4), dtype=torch.float32, device=device)
        if flush_bytes
        else None
    )
    for _ in range(warmup):
        fn()
    _sync(device)
    graph_ms = None
    rounds = 1
    if device.type == "cuda":
        times_ms, method = _cuda_times(fn, reps, device, flush_buf)
        if graph and statistics.median(times_ms) < GRAPH_BELOW_MS:
            graph_ms = cuda_graph_ms(fn, reps, device)
    else:
        method = "perf_counter"
        times_ms = []
        while True:
            for _ in range(reps):
                if flush_buf is not None:
                    flush_buf.fill_(1.0)
                t0 = time.perf_counter()
                fn()
                times_ms.append((time.perf_counter() - t0) * 1e3)
            if max_spread_pct is None or rounds >= max_rounds or spread_pct(_summary(times_ms)) <= max_spread_pct:
                break
            rounds += 1
    st = _summary(times_ms)
    out = TimingStats(**st, reps=len(times_ms), flushed=flush_buf is not None, flush_bytes=int(flush_bytes or 0))
    out.update(method=method, spread_pct=round(spread_pct(st), 2), rounds=rounds)
    if graph_ms is not None:
        out["graph_ms"] = graph_ms
    return out


# --------------------------------------------------------------------------------------------
# fingerprint
# --------------------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _parse_cache_size(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3}
    if text and text[-1] in mult:
        return int(float(text[:-1]) * mult[text[-1]])
    return int(text)


def llc_bytes() -> int | None:
    """Size in bytes of the host's last-level cache (as seen by cpu0, from sysfs), or None."""
    best_level, best_size = -1, None
    for idx in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((idx / "level").read_text())
            kind = (idx / "type").read_text().strip()
            size = _parse_cache_size((idx / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and level > best_level:
            best_level, best_size = level, size
    return best_size


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return str(triton.__version__)


def _nvml_info(index: int) -> dict[str, Any]:
    """Driver, clocks (MHz) and power limit (W) via pynvml (package ``nvidia-ml-py``), if present."""
    try:
        import pynvml
    except ImportError:
        return {"nvml": "unavailable (pip install nvidia-ml-py)"}
    info: dict[str, Any] = {}
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        driver = pynvml.nvmlSystemGetDriverVersion()
        info["driver_version"] = driver.decode() if isinstance(driver, bytes) else driver
        info["sm_clock_max_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
        info["mem_clock_max_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
        info["sm_clock_mhz"] = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        info["mem_clock_mhz"] = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
        info["power_limit_w"] = pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:  # no driver / not permitted: record why, keep going
        info["nvml_error"] = str(exc)
    return info


def device_fingerprint(device: torch.device | str) -> dict[str, Any]:
    """What a measurement ran on: host CPU model, cores, torch threads, LLC bytes, 1-min load
    average, torch/triton versions, and on CUDA the GPU name, memory (GiB = 2^30 bytes), compute
    capability, SM count, and NVML driver and clocks. Plain JSON-serializable values."""
    device = torch.device(device)
    llc = llc_bytes()
    fp: dict[str, Any] = {
        "device_type": device.type,
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        # other work on the host at measurement time (1-min load average; > 0.5 on an idle-meant
        # box means the numbers are contaminated by other processes)
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "llc_bytes": llc,
        "torch_version": torch.__version__,
        "triton_version": _triton_version(),
        "python_version": platform.python_version(),
        "platform": platform.platform(),
    }
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        fp.update(
            gpu_name=props.name,
            gpu_memory_gib=props.total_memory / 2**30,
            compute_capability=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count,
            cuda_version=torch.version.cuda,
        )
        fp.update(_nvml_info(index))
    return fp


# --------------------------------------------------------------------------------------------
# roofline probes
# --------------------------------------------------------------------------------------------


class StreamResult(TypedDict):
    """STREAM-style bandwidth (GB/s, 1e9 bytes) over arrays of ``array_bytes`` each."""

    copy_gbs: float
    triad_gbs: float
    copy_ms: float
    triad_ms: float
    array_bytes: int


def stream_bandwidth_gbs(
    device: torch.device | str, n_bytes: int | None = None, reps: int = 5
) -> StreamResult:
    """Memory bandwidth from two STREAM kernels over fp32 arrays of ``n_bytes`` each.

    * copy ``b = a``: counted as ``2 * n_bytes`` (one read, one write);
    * triad ``a = b + s * c`` (one ``torch.add(..., alpha=s, out=a)`` call): ``3 * n_bytes``.

    This is STREAM's convention: write-allocate reads (a CPU reading a line before overwriting it)
    are not counted, so on CPUs the hardware moves up to 1.5x (copy) / 1.33x (triad) what is
    reported. ``n_bytes`` defaults to ``max(4 * LLC, 256 MiB)`` on CPU and 1 GiB on CUDA, far beyond
    any cache. Times are medians of ``reps``.
    """
    device = torch.device(device)
    if n_bytes is None:
        n_bytes = 2**30 if device.type == "cuda" else max(4 * (llc_bytes() or 0), 256 * 2**20)
    n = n_bytes // 4
    a = torch.ones(n, dtype=torch.float32, device=device)
    b = torch.empty_like(a)
    c = torch.full_like(a, 2.0)
    copy = time_fn(lambda: b.copy_(a), warmup=1, reps=reps, device=device)
    triad = time_fn(lambda: torch.add(b, c, alpha=3.0, out=a), warmup=1, reps=reps, device=device)
    nb = n * 4
    return StreamResult(
        copy_gbs=2 * nb / (copy["median_ms"] * 1e-3) / 1e9,
        triad_gbs=3 * nb / (triad["median_ms"] * 1e-3) / 1e9,
        copy_ms=copy["median_ms"],
        triad_ms=triad["median_ms"],
        array_bytes=nb,
    )


def gemm_peak_tflops(
    device: torch.device | str, dtype: torch.dtype = torch.float32, n: int = 2048, reps: int = 5
) -> float:
    """Achieved dense GEMM throughput of an ``n x n @ n x n`` matmul: ``2 n^3 / median time``,
    in TFLOP/s (1e12). A measured ceiling for the roofline, not a datasheet peak."""
    device = torch.device(device)
    x = torch.randn(n, n, device=device).to(dtype)
    y = torch.randn(n, n, device=device).to(dtype)
    stats = time_fn(lambda: torch.mm(x, y), warmup=2, reps=reps, device=device)
    return 2 * n**3 / (stats["median_ms"] * 1e-3) / 1e12
