"""Units, converted once at the edge.

GB means 1e9 bytes (what datasheets and serving tools print); GiB means 2**30 bytes. Bandwidths are
always decimal (GB/s = 1e9 B/s), compute is TFLOP/s = 1e12 FLOP/s. Never mix the two byte units.
"""

from __future__ import annotations

GB = 1e9
GIB = float(2**30)
MIB = float(2**20)
MB = 1e6
TERA = 1e12
MS = 1e-3
US = 1e-6

# The largest count any input takes (batch, tokens, degrees), from a flag or the Python API: far beyond any real
# deployment (a billion tokens of context, a billion sequences), well inside float64's exact integers (2^53) and
# int64, so no arithmetic wraps and the closed-form limits stay inside their search range.
MAX_COUNT = 1_000_000_000


def bytes_to_gb(n_bytes):
    """Bytes -> decimal GB (1e9)."""
    return n_bytes / GB


def bytes_to_gib(n_bytes):
    """Bytes -> GiB (2**30)."""
    return n_bytes / GIB


def fmt_bytes(n_bytes: float) -> str:
    """Human-readable decimal size, e.g. '13.48 GB'."""
    n = float(n_bytes)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_ms(latency_ms: float) -> str:
    """Latency with a sensible unit."""
    if latency_ms >= 10_000:
        return f"{latency_ms / 1000:.1f} s"
    if latency_ms >= 1:
        return f"{latency_ms:.2f} ms"
    return f"{latency_ms * 1000:.0f} us"
