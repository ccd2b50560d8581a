"""The one tolerance table of the kernel tests.

Every comparison in ``tests/validate`` takes its (atol, rtol) from :data:`TOLERANCES`; nothing is
computed and then overwritten elsewhere. A comparison passes when, elementwise,

    |actual - expected| <= atol + rtol * |expected|          (``torch.testing.assert_close``)

with both tensors upcast to fp32 first. Test inputs are scaled so outputs are O(1) with rms ~1
(activations ~ N(0, 1), weights ~ N(0, 1/K), K/V ~ N(0, 1)), which is what makes one absolute
floor per entry meaningful.

Two kinds of entries:

* **kernel vs naive reference**, keyed by the output dtype (``fp32``, ``bf16``, ``fp16``): both
  sides see exactly the same stored values (the same cache, the same quantized codes and
  scales); only the order of accumulation and the rounding of intermediates/outputs differ.
  This is how every kernel is checked, including the int8/fp8-KV and int8/int4-weight kernels.
* **whole decode stacks** (``fp32_stack``, ``bf16_stack``, ``fp16_stack``): the 2-layer test stack
  against the fp32 reference stack; every intermediate the kernel path keeps in the activation
  dtype is one more rounding, so these are wider than the single-kernel entries.
* **quantized vs full precision**, keyed by format (``int8_kv``, ``fp8_kv``, ``int8_weight``,
  ``int4_weight``): the kernel on quantized data against the fp32 result on the original data.
  This is the format's quantization error -- what a planner user trades for the bandwidth saving --
  and the bounds below are derived from the step size of each format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

__all__ = ["Tolerance", "TOLERANCES", "get_tolerance", "tolerance_key_for_dtype", "assert_close"]


@dataclass(frozen=True)
class Tolerance:
    """Absolute and relative tolerance, with the reason for the values."""

    atol: float
    rtol: float
    why: str


TOLERANCES: Final[dict[str, Tolerance]] = {
    # fp32 everywhere: the kernel (batched einsum / online softmax over chunks) and the reference
    # (token-by-token walk) sum in different orders; over <= 1000 terms that is a few ulps of 2^-24.
    "fp32": Tolerance(
        atol=1e-5, rtol=1e-5, why="fp32 accumulation-order differences over <= 1000 terms"
    ),
    # bf16 has an 8-bit significand: rounding the output alone is up to 2^-9 relative (half an ulp),
    # the fused int8/int4 CPU ops and the bf16 decode stack also round intermediates (projection
    # outputs, the residual stream) to bf16, hence ~4 half-ulps (2^-9 = 2e-3 each) and a floor.
    "bf16": Tolerance(
        atol=1.6e-2, rtol=1.6e-2, why="bf16: 2^-9 rel per rounding, output plus a few intermediates"
    ),
    # fp16 has an 11-bit significand: 2^-12 = 2.4e-4 relative per rounding; ~8 roundings' worth.
    "fp16": Tolerance(atol=2e-3, rtol=2e-3, why="fp16: 2^-12 rel per rounding, ~8 roundings"),
    # Whole decode stacks (the test-sized 2-layer "tiny" config) against the fp32 reference. The
    # kernel path rounds ~12 intermediates per layer to the activation dtype (normed input, q/k/v,
    # RoPE output, cache write, attention output, each projection output, silu*up, the residual
    # stream), and later layers amplify earlier errors. With ~24 independent roundings of
    # quantities of rms ~2, the output error has rms ~sqrt(24) * 2 * u (u = 2^-9 bf16, 2^-12
    # fp16) ~ 0.02 (bf16) / 0.0025 (fp16), and its max over ~800 outputs ~3.5 rms. Observed over
    # 12 seeds: worst error at ~50 % of these bounds (bf16, fp16); fp32 at < 10 % (K <= 512 sums).
    "fp32_stack": Tolerance(atol=5e-5, rtol=1e-5, why="fp32, 2 layers of K <= 512 sums"),
    "bf16_stack": Tolerance(
        atol=6e-2, rtol=2e-2, why="~24 bf16 roundings (2^-9) across a 2-layer stack"
    ),
    "fp16_stack": Tolerance(
        atol=8e-3, rtol=3e-3, why="~24 fp16 roundings (2^-12) across a 2-layer stack"
    ),
    # int8 KV with a symmetric absmax scale per (block, kv head): each K/V element is off by at most
    # scale/2 = amax/254, i.e. <= ~0.016 for N(0,1) data (amax ~4 over a 16x64 page). The worst
    # output is context_len = 1, where the output *is* one dequantized V row; longer contexts
    # average the errors down. Per-tensor scales have a larger amax (~5), hence the margin.
    "int8_kv": Tolerance(
        atol=2.5e-2, rtol=2e-2, why="int8 absmax step amax/127, error <= amax/254 per element"
    ),
    # fp8 e4m3fn KV: 3 mantissa bits, each element is rounded by up to 2^-4 = 6.25 % relative
    # (0.25 absolute for a value of 4). Worst case is again context_len = 1 (output = one V row):
    # covered by rtol = 2^-4 plus a floor for the q.k score errors feeding the softmax.
    "fp8_kv": Tolerance(
        atol=1e-1, rtol=6.25e-2, why="fp8 e4m3 rounding, 2^-4 relative per K/V element"
    ),
    # int8 per-channel weights: step s = amax_row/127 ~ 4.5 sigma/127 for N(0, sigma^2) rows, error
    # uniform in +-s/2 (rms s/sqrt(12) ~ 0.01 sigma); y = sum over K of x*err, so the output error
    # has rms ~0.01 (relative to rms(y) = 1) and its max over ~6e4 outputs is ~4.5 rms ~ 0.05.
    "int8_weight": Tolerance(
        atol=8e-2, rtol=2e-2, why="int8 per-channel step amax/127; output error rms ~1 %"
    ),
    # int4 group-wise (min/max, 16 levels): s = range/15 ~ 5 sigma/15 for g = 128 (less for
    # g = 32), error rms s/sqrt(12) ~ 0.1 sigma, so output error rms ~0.1 and max ~0.5 over
    # ~6e4 outputs. This loose bound only catches convention errors (a wrong zero sign or offset
    # is off by > 5); the quantizer's exact per-element bound |w - dq(w)| <= s/2 is tested apart.
    "int4_weight": Tolerance(
        atol=8e-1, rtol=5e-2, why="int4 g-wise step range/15; output error rms ~10 %"
    ),
}


def get_tolerance(key: str) -> Tolerance:
    """Return the table entry ``key`` (raises ``KeyError`` listing the valid keys)."""
    try:
        return TOLERANCES[key]
    except KeyError:
        raise KeyError(f"unknown tolerance key {key!r}; known: {sorted(TOLERANCES)}") from None


def tolerance_key_for_dtype(dtype: "torch.dtype") -> str:
    """Map a floating torch dtype to its table key (``torch.bfloat16`` -> ``"bf16"``)."""
    import torch

    keys = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
    if dtype not in keys:
        raise KeyError(f"no tolerance entry for dtype {dtype}")
    return keys[dtype]


def assert_close(actual: "torch.Tensor", expected: "torch.Tensor", key: str, msg: str = "") -> None:
    """``torch.testing.assert_close`` in fp32 with the table entry ``key``.

    NaN anywhere in ``actual`` fails (``equal_nan=False``), which is how NaN-poisoned padding
    that leaked into a kernel shows up.
    """
    import torch

    tol = get_tolerance(key)
    torch.testing.assert_close(
        actual.float(),
        expected.float(),
        atol=tol.atol,
        rtol=tol.rtol,
        equal_nan=False,
        msg=lambda m: f"[{key}: {tol.why}] {msg}\n{m}",
    )
