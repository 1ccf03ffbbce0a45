"""FP8 for training: both operands' layouts quantized in one pass, power-of-two scales, and the
output's amax captured in the GEMM's epilogue.

A linear layer ``y = x @ W.t()`` has three products.  The forward and the input gradient
``dx = dy @ W`` contract over the rows' own axis (K, then N): ``x`` and ``dy`` quantized in 1x128
blocks along their rows serve as fp8 wgmma wants them, K-major.  The weight gradient
``dW = dy.t() @ x`` contracts over the tokens (M): both operands must be K-major along M, i.e.
``x.t()`` and ``dy.t()`` stored row-major, with their 1x128 blocks along M.  The quantized ``x``
cannot be transposed instead (its blocks run along the wrong axis); DeepSeek-V3 and Transformer
Engine quantize the other axis too.  :func:`quantize_fp8_transposed` does both from one read of
``x``: each program loads a 128x128 tile, takes its row maxima (``q``'s scales) and its column
maxima (``q_t``'s scales), and stores ``q`` and the transposed ``q_t``.  The rules are
``quantize_fp8``'s (``quantize_fp8(x, (1, 128))`` and ``quantize_fp8(x.t(), (1, 128))`` give the
same bits); :func:`quantize_fp8_transposed_ref` is its float64 reference.

``scale_format="ue8m0"`` rounds each scale up to a power of two (DeepSeek-V3's and MXFP8's
UE8M0: the scale is one exponent byte).  Multiplying by a power of two only moves a float's
exponent, so dequantizing (``q * scale``) is exact in float32, and moving a block to another
power-of-two scale is exact unless it leaves the fp8 range.  Requantizing ``q * scale`` with the
same scale gives ``q`` back for a float32 scale too: that is not what UE8M0 adds.  The price: up
to a factor 2 of the fp8 range is left unused.

:func:`scaled_mm_amax` is ``scaled_mm`` that also returns its output's largest finite |value|
(each tile's maximum, one ``atomic_max`` into an fp32 scalar): the next layer's per-tensor
scale, without a second pass over the output.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from .. import runtime
from . import checks, configs
from .fp8 import (FP8_DTYPES, PROMOTE_EVERY, SCALE_BLOCK, _scaled_mm_kernel, check_has_values, check_scaled_mm_inputs,
                  fp8_max, kernel_args, nan_bits, require_fp8)
from .tma import tma_strides

#: how a block's scale is stored: any float32, or a power of two (one exponent byte, UE8M0)
SCALE_FORMATS = ("fp32", "ue8m0")
_F32 = torch.finfo(torch.float32)
_TL_FP8 = {torch.float8_e4m3fn: tl.float8e4nv, torch.float8_e5m2: tl.float8e5}


class TransposedFp8(NamedTuple):
    """``x ~ q * scale`` with 1x128 blocks along x's rows, and ``x.t() ~ q_t * scale_t`` with
    1x128 blocks along x.t()'s rows (x's columns); ``q`` [M, K] and ``q_t`` [K, M] row-major."""
    q: torch.Tensor
    scale: torch.Tensor  # float32 [M, ceil(K/128)]
    q_t: torch.Tensor
    scale_t: torch.Tensor  # float32 [K, ceil(M/128)]


# ----------------------------------------------------------------------------- device side
@triton.jit
def _block_scale(amax, FMAX: tl.constexpr, TINY: tl.constexpr, POW2: tl.constexpr):
    """quantize_fp8's scale of a block with this finite amax: amax / FMAX (IEEE-rounded), at least
    float32's smallest normal, 1 for an all-zero block; POW2 rounds it up to a power of two (a
    nonzero mantissa carries into the exponent)."""
    s = tl.maximum(tl.math.div_rn(amax, tl.zeros_like(amax) + FMAX), TINY)
    if POW2:
        s = ((s.to(tl.int32, bitcast=True) + 0x7FFFFF) & 0x7F800000).to(tl.float32, bitcast=True)
    return tl.where(amax > 0, s, 1.0)


@triton.jit
def _round_to_fp8_grid(q, MANTISSA_BITS: tl.constexpr, MIN_EXPONENT: tl.constexpr):
    """q (|q| <= the format's max) rounded to the nearest fp8 value, ties to even, in float32:
    adding and subtracting 2^(e + 23 - MANTISSA_BITS), whose float32 ulp is the fp8 step of q's
    binade (subnormals: the lowest binade's), rounds as the hardware's cvt does.  The cast after
    it is then exact; Triton's interpreter rounds a cast half up and loses a mantissa carry."""
    mag = tl.abs(q)
    e = tl.maximum(((mag.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, MIN_EXPONENT)
    magic = ((e + (150 - MANTISSA_BITS)) << 23).to(tl.float32, bitcast=True)
    r = (mag + magic) - magic
    sign = q.to(tl.int32, bitcast=True) & -2147483648  # the sign bit: -0.0 and a tiny negative stay -0.0
    return (r.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def _fp8_bits(x, negative, scale, FP8: tl.constexpr, FMAX: tl.constexpr, IS_E5M2: tl.constexpr):
    """x (float32) / scale rounded to the nearest fp8 value (saturating), as uint8 bits.  A NaN stays
    NaN with its sign bit, ``negative`` (:func:`_sign_bits`; fp8.nan_bits); an inf stays inf in e5m2
    and becomes NaN in e4m3fn, which has none (the cast would saturate it)."""
    q = tl.math.div_rn(x, scale)  # IEEE division, as torch's (the default '/' may be approximate)
    q = tl.minimum(tl.maximum(q, -FMAX), FMAX)
    if IS_E5M2:
        q = _round_to_fp8_grid(q, 2, -14)
    else:
        q = _round_to_fp8_grid(q, 3, -6)
    bits = q.to(FP8).to(tl.uint8, bitcast=True)
    # inf and NaN: S.1111111 is the fp8 NaN with x's sign (fp8.nan_bits); e5m2's inf is S.11111.00,
    # its first six bits; e4m3fn has no inf: +NaN
    special = tl.where(negative, 0xFF, 0x7F)
    is_inf = tl.abs(x) == float("inf")
    if IS_E5M2:
        special = tl.where(is_inf, special & 0xFC, special)
    else:
        special = tl.where(is_inf, 0x7F, special)
    return tl.where(tl.abs(x) < float("inf"), bits, special.to(tl.uint8)).to(tl.uint8)


@triton.jit
def _sign_bits(x):
    """x's sign bits, read before any widening: the GPU's float16 -> float32 conversion makes every
    NaN the positive canonical one (a GPU test caught the lost sign; numpy's keeps it)."""
    if x.dtype.primitive_bitwidth == 16:
        negative = x.to(tl.int16, bitcast=True) < 0
    else:
        negative = x.to(tl.int32, bitcast=True) < 0
    return negative


@triton.jit
def _cast_transpose_kernel(x_ptr, q_ptr, s_ptr, qt_ptr, st_ptr, M, K, stride_xm, stride_xk, stride_sm, stride_stk,
                           FP8: tl.constexpr, FMAX: tl.constexpr, TINY: tl.constexpr, IS_E5M2: tl.constexpr,
                           POW2: tl.constexpr, BLOCK: tl.constexpr):
    """One 128x128 tile of x: q (row blocks) and q_t (column blocks, stored transposed) from one load."""
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = pid_m * BLOCK + tl.arange(0, BLOCK)
    offs_k = pid_k * BLOCK + tl.arange(0, BLOCK)
    in_m = offs_m < M
    in_k = offs_k < K
    mask = in_m[:, None] & in_k[None, :]
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk, mask=mask, other=0.0)
    negative = _sign_bits(x)  # a NaN's sign, which the widening below may drop
    x = x.to(tl.float32)
    finite = tl.where(tl.abs(x) < float("inf"), tl.abs(x), 0.0)  # NaN and inf count as 0: only their element changes
    row_scale = _block_scale(tl.max(finite, axis=1), FMAX, TINY, POW2)  # one per row of x: a 1x128 block
    col_scale = _block_scale(tl.max(finite, axis=0), FMAX, TINY, POW2)  # one per row of x.t()
    q = _fp8_bits(x, negative, row_scale[:, None], FP8, FMAX, IS_E5M2)
    tl.store(q_ptr + offs_m[:, None] * K + offs_k[None, :], q, mask=mask)
    tl.store(s_ptr + offs_m * stride_sm + pid_k, row_scale, mask=in_m)
    qt = tl.trans(_fp8_bits(x, negative, col_scale[None, :], FP8, FMAX, IS_E5M2))
    tl.store(qt_ptr + offs_k[:, None] * M + offs_m[None, :], qt, mask=in_k[:, None] & in_m[None, :])
    tl.store(st_ptr + offs_k * stride_stk + pid_m, col_scale, mask=in_k)


#: the tile is fixed (one 128-value scale block each way); the warp count is what a GPU tunes
CAST_TRANSPOSE_CONFIGS = [triton.Config({}, num_warps=8), triton.Config({}, num_warps=4)]
_cast_transpose_tuned = triton.autotune(CAST_TRANSPOSE_CONFIGS, key=["M", "K", "FP8", "POW2"],
                                        do_bench=configs.time_candidate)(_cast_transpose_kernel)


# ----------------------------------------------------------------------------- host side
def check_cast_transpose_operands(x, dtype, scale_format) -> None:
    """What ``quantize_fp8_transposed``'s arguments must be whoever quantizes, its kernel or
    :func:`quantize_fp8_transposed_ref` (one check, one message): x a 2-D float16, bfloat16 or
    float32 tensor of values in strided memory, ``dtype`` an fp8 dtype, ``scale_format`` one of
    SCALE_FORMATS.  Not the kernel's device and offsets: the reference runs on any device."""
    # bf16 is only loaded, never multiplied: any GPU reads it (runs_here=False)
    checks.check_tensor(x, "x", 2, runs_here=False, any_device=True)
    check_has_values(x, "x")
    if not isinstance(dtype, torch.dtype) or dtype not in FP8_DTYPES:
        raise TypeError(f"dtype must be torch.float8_e4m3fn or torch.float8_e5m2, got {dtype!r}")
    if not isinstance(scale_format, str) or scale_format not in SCALE_FORMATS:
        raise ValueError(f"scale_format must be one of {SCALE_FORMATS} (float32 scales, or powers of two), "
                         f"got {scale_format!r}")


def _check_cast_transpose_inputs(x, dtype, scale_format) -> None:
    check_cast_transpose_operands(x, dtype, scale_format)
    checks.check_kernel_device(x, "x")
    checks.check_span(x, "x")
    if x.numel() - 1 > checks.MAX_INDEX:
        raise ValueError(f"x has {x.numel()} elements: more than 32-bit kernel offsets address "
                         f"(at most {checks.MAX_INDEX + 1}); quantize it in row blocks")


def _empty_outputs(M, K, dtype, device) -> TransposedFp8:
    kb, mb = triton.cdiv(K, SCALE_BLOCK), triton.cdiv(M, SCALE_BLOCK)
    return TransposedFp8(torch.empty((M, K), dtype=dtype, device=device),
                         torch.empty((M, kb), dtype=torch.float32, device=device),
                         torch.empty((K, M), dtype=dtype, device=device),
                         torch.empty((K, mb), dtype=torch.float32, device=device))


def quantize_fp8_transposed(x, *, dtype=torch.float8_e4m3fn, scale_format="fp32") -> TransposedFp8:
    """x [M, K] (float16, bfloat16 or float32, any strides) -> ``TransposedFp8(q, scale, q_t,
    scale_t)`` in one pass: ``q`` as ``quantize_fp8(x, (1, 128))``, ``q_t`` [K, M] row-major as
    ``quantize_fp8(x.t(), (1, 128))`` (the operand a weight gradient reads K-major along M).
    ``scale_format="ue8m0"``: each scale rounded up to a power of two, so that ``q * scale`` is
    exact in float32 (module docstring).  Ragged M and K are padded with zeros
    inside the kernel; a NaN or inf changes only its own element, as in ``quantize_fp8``."""
    require_fp8("quantize_fp8_transposed")  # Triton casts to fp8 on sm_89+ only
    (x,) = checks.resolve_lazy_views(x)  # the kernel reads memory, not torch's lazy negation
    _check_cast_transpose_inputs(x, dtype, scale_format)
    M, K = x.shape
    out = _empty_outputs(M, K, dtype, x.device)
    if M == 0 or K == 0:
        return out
    args = dict(x_ptr=x, q_ptr=out.q.view(torch.uint8), s_ptr=out.scale, qt_ptr=out.q_t.view(torch.uint8),
                st_ptr=out.scale_t, M=M, K=K, stride_xm=x.stride(0), stride_xk=x.stride(1),
                stride_sm=out.scale.stride(0), stride_stk=out.scale_t.stride(0), FP8=_TL_FP8[dtype],
                FMAX=fp8_max(dtype), TINY=_F32.tiny, IS_E5M2=dtype == torch.float8_e5m2,
                POW2=scale_format == "ue8m0", BLOCK=SCALE_BLOCK)
    grid = (triton.cdiv(M, SCALE_BLOCK), triton.cdiv(K, SCALE_BLOCK))
    if runtime.autotune_enabled():
        _cast_transpose_tuned[grid](**args)
    else:
        config = CAST_TRANSPOSE_CONFIGS[0]
        _cast_transpose_kernel[grid](**args, num_warps=config.num_warps)
    return out


def _ref_scales(amax, fmax, scale_format):
    """float64 amax per block -> float32 scales by quantize_fp8's rule (then rounded up to 2^e)."""
    scale = torch.where(amax > 0, (amax / fmax).clamp(_F32.tiny, _F32.max), torch.ones_like(amax)).float()
    if scale_format == "ue8m0":
        mantissa, exponent = torch.frexp(scale.double())  # scale = mantissa * 2**exponent, mantissa in [0.5, 1)
        scale = torch.ldexp(torch.ones_like(mantissa), torch.where(mantissa == 0.5, exponent - 1, exponent)).float()
    return scale


def _ref_rows(x64, dtype, scale_format, nans):
    """1x128 blocks along the rows of a float64 matrix -> (q, scale); ``nans``: the bits of its NaNs
    (fp8.nan_bits of the matrix before float64: a cast may drop a NaN's sign)."""
    rows, cols = x64.shape
    kb = triton.cdiv(cols, SCALE_BLOCK)
    blocks = torch.nn.functional.pad(x64, (0, kb * SCALE_BLOCK - cols)).reshape(rows, kb, SCALE_BLOCK)
    amax = torch.where(torch.isfinite(blocks), blocks.abs(), torch.zeros_like(blocks)).amax(dim=2)
    fmax = fp8_max(dtype)
    scale = _ref_scales(amax, fmax, scale_format)
    per_element = scale.double().repeat_interleave(SCALE_BLOCK, 1)[:, :cols]
    q = (x64 / per_element).float().double()  # rounded to float32 first, as the kernel divides in float32
    q = torch.where(torch.isfinite(x64), q.clamp(-fmax, fmax), x64)
    if dtype == torch.float8_e4m3fn:
        q = torch.where(torch.isinf(x64), torch.full_like(q, float("nan")), q)
    q = q.float().to(dtype)
    return torch.where(torch.isnan(x64), nans, q.view(torch.uint8)).view(dtype), scale


def quantize_fp8_transposed_ref(x, *, dtype=torch.float8_e4m3fn, scale_format="fp32") -> TransposedFp8:
    """Plain-torch float64 reference of :func:`quantize_fp8_transposed` (any device); refuses what
    the kernel refuses for its arguments (:func:`check_cast_transpose_operands`)."""
    check_cast_transpose_operands(x, dtype, scale_format)
    x = x.resolve_neg().resolve_conj()
    x64, nans = x.double(), nan_bits(x)
    q, scale = _ref_rows(x64, dtype, scale_format, nans)
    q_t, scale_t = _ref_rows(x64.t(), dtype, scale_format, nans.t())
    return TransposedFp8(q.contiguous(), scale, q_t.contiguous(), scale_t)


# ----------------------------------------------------------------------------- the amax in the epilogue
_scaled_mm_amax_tuned = configs.TunedKernel(_scaled_mm_kernel, configs.fp8_configs(),
                                            key=["M", "N", "K", "SCALING", "PROMOTE", "USE_TMA", "HAS_BIAS",
                                                 "HAS_AMAX"], variant="-amax")


def _scaled_mm_pointer_kernel(a, b, scale_a, scale_b, *, out_dtype=torch.bfloat16, bias=None, use_fast_accum=False,
                              promote_every=PROMOTE_EVERY, amax=True):
    """``scaled_mm`` through ``_scaled_mm_kernel`` (one program per tile; never the warp-specialized
    kernel), with or without the amax epilogue: ``(out, amax or None)``."""
    require_fp8("scaled_mm_amax")
    a, b, scale_a, scale_b, bias = checks.resolve_lazy_views(a, b, scale_a, scale_b, bias)
    scaling = check_scaled_mm_inputs(a, b, scale_a, scale_b, out_dtype, bias, promote_every, use_fast_accum)
    if bias is not None and bias.stride(0) != 1:  # the kernel reads bias_ptr + n
        bias = bias.contiguous()
    M, K = a.shape
    N = b.shape[1]
    out = torch.empty((M, N), device=a.device, dtype=out_dtype)
    peak = torch.zeros((), device=a.device, dtype=torch.float32) if amax else None  # atomic_max starts from 0
    if M == 0 or N == 0:
        return out, peak
    if K == 0:  # an empty sum, then the bias
        out.copy_(bias.expand(M, N) if bias is not None else torch.zeros_like(out))
        if amax:
            peak.copy_(largest_finite_magnitude(out))
        return out, peak
    use_tma = runtime.supports_tma() and tma_strides(a, (0, 1)) is not None and tma_strides(b, (1, 0)) is not None
    if use_tma:
        runtime.ensure_tma_allocator()
    args = kernel_args(a, b, out, scale_a, scale_b, bias, scaling, None if use_fast_accum else promote_every, use_tma)
    args.update(amax_ptr=peak if amax else out, HAS_AMAX=amax)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    _scaled_mm_amax_tuned[grid](**args)
    return out, peak


def scaled_mm_amax(a, b, scale_a, scale_b, *, out_dtype=torch.bfloat16, bias=None, use_fast_accum=False,
                   promote_every=PROMOTE_EVERY):
    """``(out, amax)``: ``scaled_mm``'s product (same arguments and checks) and, from its epilogue,
    ``amax`` = the largest finite |out| (a 0-d float32 tensor, as stored in ``out_dtype``): what the
    next per-tensor quantization needs (``quantize_fp8(out)``'s scale is ``amax / fp8_max``).
    NaN and inf elements are skipped, as ``quantize_fp8`` skips them; ``out.isfinite()`` tells
    whether there were any.  Runs the one-program-per-tile kernel (not the warp-specialized one)."""
    return _scaled_mm_pointer_kernel(a, b, scale_a, scale_b, out_dtype=out_dtype, bias=bias,
                                     use_fast_accum=use_fast_accum, promote_every=promote_every, amax=True)


def largest_finite_magnitude(t: torch.Tensor) -> torch.Tensor:
    """Plain-torch reference of the epilogue's amax: max |t| over finite elements (0 if none), float32."""
    mags = t.float().abs()
    return torch.where(torch.isfinite(mags), mags, torch.zeros_like(mags)).amax() if t.numel() else mags.new_zeros(())
