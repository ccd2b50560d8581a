"""Weight-only quantized decode matmul ``y = x @ W^T`` and the dense baseline.

Shapes: ``x`` [M, K] activations (bf16 / fp16 / fp32, M = 1..256 decode rows), ``W`` [N, K]
(``nn.Linear`` layout: N outputs, K inputs), ``y`` [M, N] in ``x.dtype``.

Formats and the kernels that run them:

=========  ==============================================  =====================================
format     quantizer                                       kernel
=========  ==============================================  =====================================
``fp32``,  none                                            ``torch.nn.functional.linear``
``bf16``,
``fp16``
``int8``   per-output-channel symmetric:                   ``aten._weight_int8pack_mm`` (CPU and
           ``s = amax_row / 127``, ``q = round(w / s)``    CUDA); dequant + matmul fallback
           in [-127, 127], ``w ~= q * s``
``int4``   group-wise (g = 32/64/128 along K), asymmetric  CPU: ``aten._weight_int4pack_mm_for_cpu``;
           in tinygemm's convention: codes 0..15,          CUDA: ``aten._weight_int4pack_mm``
           ``w ~= (q - 8) * s + z``, ``s = (max-min)/15``, (tinygemm, bf16 only); dequant + matmul
           ``z = min + 8 s`` (the value of code 8)          fallback otherwise
=========  ==============================================  =====================================

Op signatures as found in torch 2.13 (CPU, by experiment)::

    _weight_int8pack_mm(Tensor self[M,K], Tensor mat2[N,K] int8, Tensor scales[N]) -> [M,N]
        scales.dtype must equal self.dtype (bf16 / fp16 / fp32)
    _convert_weight_to_int4pack_for_cpu(Tensor self[N,K] int32 codes 0..15, int innerKTiles)
        -> uint8 [N, K/2]; N % 16 == 0; innerKTiles (2/4/8) does not change the CPU layout
    _weight_int4pack_mm_for_cpu(Tensor self[M,K], Tensor mat2, int qGroupSize,
        Tensor qScaleAndZeros[K/g, N, 2]) -> [M,N]
        qScaleAndZeros[..., 0] = scale, [..., 1] = zero, dtype must equal self.dtype;
        dequant = (q - 8) * scale + zero
    (CUDA) _convert_weight_to_int4pack(Tensor self[N, K/2] uint8, int innerKTiles): two codes per
        byte, even k in the high nibble: (q[:, ::2] << 4) | q[:, 1::2]; then
        _weight_int4pack_mm(x bf16, packed, group, qScaleAndZeros bf16 [K/g, N, 2]).

The kernels read scales in the activation dtype (the fused ops require it); the quantizer rounds
scales to ``scale_dtype`` (fp16 / bf16) and :class:`QuantizedLinear` casts them to the activation
dtype once at preparation (exact for fp32 activations or equal dtypes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F

from ._triton import HAS_TRITON, tl, triton  # noqa: F401  (optional: absent on CPU-only installs)

__all__ = [
    "WeightFormat",
    "WEIGHT_FORMATS",
    "Int8Weight",
    "Int4Weight",
    "BytesMoved",
    "quantize_int8_per_channel",
    "quantize_int4_groupwise",
    "pack_int4",
    "int4_scales_and_zeros",
    "dense_matmul",
    "int8_weight_matmul",
    "int4_weight_matmul",
    "QuantizedLinear",
    "bytes_moved",
    "matmul_flops",
    "effective_bits_per_weight",
]

WeightFormat = Literal["fp32", "bf16", "fp16", "int8", "int4"]
WEIGHT_FORMATS: tuple[WeightFormat, ...] = ("fp32", "bf16", "fp16", "int8", "int4")
_DENSE_DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
INT4_MID_CODE = 8
INT4_INNER_K_TILES = 8  # tinygemm tiles of 16 K elements per inner loop (2, 4 or 8)


# --------------------------------------------------------------------------------------------
# quantizers (unpacked, device-independent form)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Int8Weight:
    """Per-output-channel symmetric int8: ``w[n, k] ~= qweight[n, k] * scales[n]``.

    ``qweight`` [N, K] int8 in [-127, 127]; ``scales`` [N] in ``scale_dtype``.
    """

    qweight: torch.Tensor
    scales: torch.Tensor

    def dequantize(self) -> torch.Tensor:
        """fp32 [N, K] weight the codes stand for."""
        return self.qweight.float() * self.scales.float()[:, None]


@dataclass(frozen=True)
class Int4Weight:
    """Group-wise asymmetric int4 in tinygemm's convention.

    ``w[n, k] ~= (qweight[n, k] - 8) * scales[n, k // g] + zeros[n, k // g]``; ``qweight`` [N, K]
    int32 codes 0..15 (unpacked, one per element); ``scales``/``zeros`` [N, K // g].
    """

    qweight: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor
    group_size: int

    def dequantize(self) -> torch.Tensor:
        """fp32 [N, K] weight the codes stand for."""
        s = self.scales.float().repeat_interleave(self.group_size, dim=1)
        z = self.zeros.float().repeat_interleave(self.group_size, dim=1)
        return (self.qweight.float() - INT4_MID_CODE) * s + z


def quantize_int8_per_channel(
    w: torch.Tensor, scale_dtype: torch.dtype = torch.bfloat16
) -> Int8Weight:
    """Symmetric per-row int8: ``s = max|w[n, :]| / 127`` (rounded to ``scale_dtype``),
    ``q = clamp(round(w / s), -127, 127)``. Codes use the rounded scale, so
    ``|w - q s| <= s / 2`` for every element (all-zero rows get ``s = 1``)."""
    wf = w.float()
    amax = wf.abs().amax(dim=1)
    scales = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax)).to(scale_dtype)
    q = torch.round(wf / scales.float()[:, None]).clamp_(-127, 127).to(torch.int8)
    return Int8Weight(qweight=q, scales=scales)


def quantize_int4_groupwise(
    w: torch.Tensor, group_size: int = 128, scale_dtype: torch.dtype = torch.bfloat16
) -> Int4Weight:
    """Asymmetric min/max int4 per group of ``group_size`` inputs (as gpt-fast / torchao do).

    Per group: ``s = (max - min) / 15`` and ``z = min + 8 s``, both rounded to ``scale_dtype``;
    codes ``q = clamp(round((w - (z - 8 s)) / s), 0, 15)`` use the *rounded* s and z, so that
    ``(q - 8) s + z`` reproduces w to within ``s / 2`` plus the rounding of s and z
    (``max - min`` is floored at 1e-6 so a constant group does not divide by zero).
    """
    n, k = w.shape
    if k % group_size:
        raise ValueError(f"K={k} is not a multiple of group_size={group_size}")
    wg = w.float().reshape(n, k // group_size, group_size)
    wmin = wg.amin(dim=-1)
    wmax = wg.amax(dim=-1)
    scales = ((wmax - wmin).clamp(min=1e-6) / 15.0).to(scale_dtype)
    zeros = (wmin + INT4_MID_CODE * scales.float()).to(scale_dtype)
    s = scales.float()[..., None]
    lo = zeros.float()[..., None] - INT4_MID_CODE * s  # real value of code 0
    q = torch.round((wg - lo) / s).clamp_(0, 15).to(torch.int32).reshape(n, k)
    return Int4Weight(qweight=q, scales=scales, zeros=zeros, group_size=group_size)


def int4_scales_and_zeros(w: Int4Weight, dtype: torch.dtype) -> torch.Tensor:
    """tinygemm's ``qScaleAndZeros`` [K / g, N, 2] (scale, zero) in ``dtype``."""
    return torch.stack([w.scales.T, w.zeros.T], dim=-1).to(dtype).contiguous()


def pack_int4(
    qweight: torch.Tensor, device: torch.device | str, inner_k_tiles: int = INT4_INNER_K_TILES
) -> torch.Tensor:
    """Pack int32 codes [N, K] (0..15) into the layout of the device's int4 kernel.

    CPU: ``_convert_weight_to_int4pack_for_cpu(int32 [N, K])`` -> uint8 [N, K / 2].
    CUDA: bytes ``(q[:, ::2] << 4) | q[:, 1::2]`` (uint8 [N, K / 2]) ->
    ``_convert_weight_to_int4pack`` (tinygemm tiles; needs K % (inner_k_tiles * 16) == 0, N % 8 == 0).
    Either way the packed weight holds exactly N * K / 2 bytes. See :func:`int4_pack_variant` for the
    torch versions whose CUDA op wanted the int32 [N, K] codes instead.
    """
    device = torch.device(device)
    q = qweight.to(device, torch.int32).contiguous()
    if device.type == "cpu":
        return torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, inner_k_tiles)
    if int4_pack_variant(torch.__version__) == "int32":
        return torch.ops.aten._convert_weight_to_int4pack(q, inner_k_tiles)
    as_bytes = ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8).contiguous()
    return torch.ops.aten._convert_weight_to_int4pack(as_bytes, inner_k_tiles)


def int4_pack_variant(torch_version: str) -> str:
    """Input of tinygemm's CUDA ``_convert_weight_to_int4pack`` in this torch: ``"int32"`` codes [N, K] before
    torch 2.5, ``"uint8"`` packed pairs [N, K / 2] from 2.5 on (pytorch/pytorch#129940). ``_weight_int4pack_mm``
    itself kept ``(x, packed, group_size, qScaleAndZeros [K/g, N, 2])`` through 2.13."""
    parts = torch_version.split("+")[0].split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return "uint8"
    return "int32" if (major, minor) < (2, 5) else "uint8"


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------


def dense_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Dense baseline ``x [M, K] @ w [N, K]^T`` in the common dtype (fp32 / bf16 / fp16)."""
    return F.linear(x, w)


def int8_weight_matmul(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Fused int8 weight-only matmul: ``y = (x @ qweight^T) * scales`` via ``_weight_int8pack_mm``.

    ``qweight`` [N, K] int8, ``scales`` [N] in ``x.dtype``. Falls back to dequantize + matmul if the
    op is unavailable for this device / dtype. On CUDA, :func:`int8_w8a16_triton` is the production path.
    """
    try:
        return torch.ops.aten._weight_int8pack_mm(x, qweight, scales)
    except (RuntimeError, NotImplementedError):  # e.g. fp16 on a CUDA build without the kernel
        return F.linear(x, qweight.to(x.dtype) * scales[:, None])


if HAS_TRITON:

    @triton.jit
    def _w8a16_kernel(
        x_ptr, w_ptr, s_ptr, y_ptr, M, N, K,
        stride_xm, stride_wn, stride_ym,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):
        """y[m, n] = (sum_k x[m, k] * w[n, k]) * s[n]: int8 codes widened to x's dtype in registers,
        tensor-core dot with fp32 accumulation, one scale per output channel at the end."""
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + rk
            x = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :],
                        mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
            w = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None],
                        mask=(rn[None, :] < N) & (kk[:, None] < K), other=0)
            if x.dtype == tl.float16:
                acc += tl.dot(x, w.to(tl.float16))  # int8 codes are exact in fp16
            elif x.dtype == tl.bfloat16:
                # bf16 values and int8 codes are exact in tf32, so the tf32 dot computes the bf16 products
                # (and the Triton interpreter's bf16 dot is broken in triton 3.9)
                acc += tl.dot(x.to(tl.float32), w.to(tl.float32), input_precision="tf32")
            else:
                acc += tl.dot(x, w.to(tl.float32), input_precision="ieee")
        s = tl.load(s_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
        y = acc * s[None, :]
        tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))


def int8_w8a16_triton(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
                      block_n: int = 64, block_k: int = 128) -> torch.Tensor:
    """Triton weight-only int8 GEMM/GEMV (w8a16): ``y = (x @ qweight^T) * scales``, one read of the int8
    weight, no dequantized copy in memory. ``x`` [M, K] bf16 / fp16 (fp32 runs tf32-free fp32 dots),
    ``qweight`` [N, K] int8 contiguous, ``scales`` [N]. Rows are tiled by 16 (decode: one row tile)."""
    if not HAS_TRITON:
        raise RuntimeError("int8_w8a16_triton needs triton")
    m, k = x.shape
    n = qweight.shape[0]
    x = x.contiguous()
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    block_m = 16 if m <= 16 else (32 if m <= 32 else 64)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    _w8a16_kernel[grid](x, qweight, scales, y, m, n, k, x.stride(0), qweight.stride(0), y.stride(0),
                        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return y


def int4_weight_matmul(
    x: torch.Tensor, packed: torch.Tensor, scales_and_zeros: torch.Tensor, group_size: int
) -> torch.Tensor:
    """Fused int4 group-wise weight-only matmul (tinygemm convention, see module docstring).

    ``packed`` from :func:`pack_int4` on ``x.device``; ``scales_and_zeros`` [K/g, N, 2] in
    ``x.dtype``. CPU: ``_weight_int4pack_mm_for_cpu``; CUDA: ``_weight_int4pack_mm`` (bf16).
    """
    if x.device.type == "cpu":
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group_size, scales_and_zeros)
    return torch.ops.aten._weight_int4pack_mm(x, packed, group_size, scales_and_zeros)


# --------------------------------------------------------------------------------------------
# byte / flop accounting
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BytesMoved:
    """Exact bytes one ``y[M, N] = x[M, K] @ W^T`` call reads and writes (bytes, not GB).

    * ``weight_bytes = N * K * bits / 8`` (32 / 16 / 8 / 4 bits);
    * ``scale_bytes``: int8 ``N * s``; int4 ``N * (K / g) * s`` (``s`` = bytes of the scale dtype
      the kernel reads); ``zero_bytes``: int4 ``N * (K / g) * s``; 0 for dense formats;
    * ``act_in_bytes = M * K * a``, ``out_bytes = M * N * a`` (``a`` = activation bytes).

    Each operand is counted once (ideal caching: W streamed once, x reused from cache).
    """

    weight_bytes: int
    scale_bytes: int
    zero_bytes: int
    act_in_bytes: int
    out_bytes: int

    @property
    def total_bytes(self) -> int:
        """Sum of the parts."""
        return (
            self.weight_bytes + self.scale_bytes + self.zero_bytes + self.act_in_bytes + self.out_bytes
        )


_BITS: dict[str, int] = {"fp32": 32, "bf16": 16, "fp16": 16, "int8": 8, "int4": 4}


def bytes_moved(
    fmt: WeightFormat,
    m: int,
    n: int,
    k: int,
    *,
    act_dtype: torch.dtype,
    group_size: int | None = None,
    scale_dtype: torch.dtype | None = None,
) -> BytesMoved:
    """Bytes of one call in format ``fmt`` (formulas in :class:`BytesMoved`).

    ``scale_dtype`` defaults to ``act_dtype`` (what the fused kernels read); ``group_size`` is
    required for int4.
    """
    if fmt not in _BITS:
        raise ValueError(f"unknown weight format {fmt!r}; known: {WEIGHT_FORMATS}")
    a = act_dtype.itemsize
    s = (scale_dtype or act_dtype).itemsize
    scale_bytes = zero_bytes = 0
    if fmt == "int8":
        scale_bytes = n * s
    elif fmt == "int4":
        if group_size is None or k % group_size:
            raise ValueError("int4 needs a group_size dividing K")
        scale_bytes = zero_bytes = n * (k // group_size) * s
    if (n * k * _BITS[fmt]) % 8:
        raise ValueError("N * K * bits is not a whole number of bytes")
    return BytesMoved(
        weight_bytes=n * k * _BITS[fmt] // 8,
        scale_bytes=scale_bytes,
        zero_bytes=zero_bytes,
        act_in_bytes=m * k * a,
        out_bytes=m * n * a,
    )


def matmul_flops(m: int, n: int, k: int) -> int:
    """``2 * M * N * K`` (one multiply and one add per weight per row); dequant ops not counted."""
    return 2 * m * n * k


def effective_bits_per_weight(
    fmt: WeightFormat, *, group_size: int | None = None, scale_bits: int = 16, k: int | None = None
) -> float:
    """Weight bits including metadata: int4 g-wise with scale and zero = ``4 + 2 * scale_bits / g``
    (g128, 16-bit: 4.25); int8 per-channel = ``8 + scale_bits / K`` (K needed, else 8)."""
    if fmt == "int4":
        if group_size is None:
            raise ValueError("int4 needs group_size")
        return 4 + 2 * scale_bits / group_size
    if fmt == "int8":
        return 8 + (scale_bits / k if k else 0.0)
    return float(_BITS[fmt])


# --------------------------------------------------------------------------------------------
# a prepared linear layer
# --------------------------------------------------------------------------------------------


@dataclass
class QuantizedLinear:
    """A weight ``[N, K]`` prepared once for one format, activation dtype and device.

    Build with :meth:`from_float`; call with ``x [M, K]`` of ``act_dtype``. :meth:`dequantized`
    returns the fp32 weight the kernel effectively multiplies by (scales after their cast to the
    activation dtype), which is what references should use.
    """

    fmt: WeightFormat
    n: int
    k: int
    act_dtype: torch.dtype
    device: torch.device
    group_size: int | None = None
    dense: torch.Tensor | None = None  # dense formats: [N, K] in the format's dtype
    int8: Int8Weight | None = None  # int8: codes + scales in act_dtype
    int4: Int4Weight | None = None  # int4: unpacked codes + scales/zeros in act_dtype
    packed: torch.Tensor | None = None  # int4: device-specific packed codes
    scales_and_zeros: torch.Tensor | None = None  # int4: [K/g, N, 2] in act_dtype
    use_fused: bool = field(default=True)
    int8_kernel: str = "aten"  # int8: "triton-w8a16" (CUDA with triton) or "aten" (_weight_int8pack_mm)

    @classmethod
    def from_float(
        cls,
        w: torch.Tensor,
        fmt: WeightFormat,
        *,
        act_dtype: torch.dtype,
        device: torch.device | str = "cpu",
        group_size: int = 128,
        scale_dtype: torch.dtype = torch.bfloat16,
    ) -> "QuantizedLinear":
        """Quantize (if needed) and pack ``w [N, K]``.

        Dense formats store ``w`` in their own dtype (``bf16`` weights need bf16 activations etc.,
        since ``F.linear`` needs one dtype; the dense ``fmt`` must match ``act_dtype``).
        int4 on CUDA uses tinygemm only for bf16 activations and falls back to dequant + matmul
        otherwise.
        """
        device = torch.device(device)
        n, k = w.shape
        if fmt in _DENSE_DTYPES:
            if _DENSE_DTYPES[fmt] != act_dtype:
                raise ValueError(f"dense {fmt} weights need {_DENSE_DTYPES[fmt]} activations")
            return cls(fmt, n, k, act_dtype, device, dense=w.to(device, act_dtype).contiguous())
        if fmt == "int8":
            q = quantize_int8_per_channel(w, scale_dtype)
            q = Int8Weight(q.qweight.to(device).contiguous(), q.scales.to(device, act_dtype))
            kern = "triton-w8a16" if device.type == "cuda" and HAS_TRITON else "aten"
            return cls(fmt, n, k, act_dtype, device, int8=q, int8_kernel=kern)
        if fmt == "int4":
            q = quantize_int4_groupwise(w, group_size, scale_dtype)
            q = Int4Weight(
                q.qweight.to(device),
                q.scales.to(device, act_dtype),
                q.zeros.to(device, act_dtype),
                group_size,
            )
            fused = device.type == "cpu" or act_dtype == torch.bfloat16
            if device.type == "cpu" and n % 16:
                fused = False  # _convert_weight_to_int4pack_for_cpu needs N % 16 == 0
            return cls(
                fmt,
                n,
                k,
                act_dtype,
                device,
                group_size=group_size,
                int4=q,
                packed=pack_int4(q.qweight, device) if fused else None,
                scales_and_zeros=int4_scales_and_zeros(q, act_dtype) if fused else None,
                use_fused=fused,
            )
        raise ValueError(f"unknown weight format {fmt!r}; known: {WEIGHT_FORMATS}")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x [M, K] -> y [M, N]`` in ``act_dtype``."""
        if self.dense is not None:
            return dense_matmul(x, self.dense)
        if self.int8 is not None:
            if self.int8_kernel == "triton-w8a16":
                return int8_w8a16_triton(x, self.int8.qweight, self.int8.scales)
            return int8_weight_matmul(x, self.int8.qweight, self.int8.scales)
        assert self.int4 is not None
        if self.use_fused:
            assert self.packed is not None and self.scales_and_zeros is not None
            return int4_weight_matmul(x, self.packed, self.scales_and_zeros, self.int4.group_size)
        return F.linear(x, self.int4.dequantize().to(x.dtype))

    @property
    def kernel_name(self) -> str:
        """The kernel a call runs, for records: ``F.linear``, ``triton-w8a16``, ``aten._weight_int8pack_mm``,
        ``tinygemm._weight_int4pack_mm[_for_cpu]`` or ``dequant+F.linear`` (int4 without a fused kernel)."""
        if self.dense is not None:
            return "F.linear"
        if self.int8 is not None:
            return "triton-w8a16" if self.int8_kernel == "triton-w8a16" else "aten._weight_int8pack_mm"
        if not self.use_fused:
            return "dequant+F.linear"
        cpu = "_for_cpu" if self.device.type == "cpu" else ""
        return f"tinygemm._weight_int4pack_mm{cpu}"

    def dequantized(self) -> torch.Tensor:
        """fp32 [N, K] weight the kernel multiplies by."""
        if self.dense is not None:
            return self.dense.float()
        if self.int8 is not None:
            return self.int8.dequantize()
        assert self.int4 is not None
        return self.int4.dequantize()

    def bytes_moved(self, m: int) -> BytesMoved:
        """Bytes one call with ``m`` rows moves (scales counted in ``act_dtype``, as read)."""
        return bytes_moved(
            self.fmt, m, self.n, self.k, act_dtype=self.act_dtype, group_size=self.group_size
        )
