"""Triton, where it is installed (CUDA machines, and the CPU interpreter tests): one optional import for every kernel
module. On a CPU-only install without it, HAS_TRITON is False and the kernels take their torch paths."""

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - depends on the install
    triton = None
    tl = None
    HAS_TRITON = False
