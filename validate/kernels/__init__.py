"""Kernels measured by the harness.

- :mod:`validate.kernels.paged_attention` -- paged-KV decode attention (torch on CPU, Triton on CUDA).
- :mod:`validate.kernels.quant_matmul` -- weight-only int8 / int4 decode matmul and the dense baseline.
- :mod:`validate.kernels.decode_step` -- one decode step of a random-weight transformer layer stack.

Each kernel module has a naive counterpart in :mod:`validate.reference` and documents the
exact bytes it reads and writes, so the runner can report achieved GB/s.
"""
