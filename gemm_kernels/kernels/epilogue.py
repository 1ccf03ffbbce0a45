"""What happens to a tile after the K loop, while the accumulator is still fp32.

Fusing the bias and the activation here saves a full extra pass over C in
device memory (read M*N, write M*N) that a separate ``torch`` call would cost.
The same names are used on both sides: ``apply_activation`` in kernels,
``activation_ref`` in the torch references.  The masked pointer store of a tile lives here too
(the TMA store is in ``tma.py``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import runtime as _runtime

ACTIVATIONS = (None, "relu", "leaky_relu", "gelu")
LEAKY_RELU_SLOPE = 0.01  # torch.nn.functional.leaky_relu's default


def check_activation(activation) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


@triton.jit
def apply_activation(x, ACTIVATION: tl.constexpr):
    """x is the fp32 accumulator tile; ACTIVATION is a compile-time string (or None)."""
    if ACTIVATION == "relu":
        x = tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)  # relu(NaN) = NaN, as in torch
    elif ACTIVATION == "leaky_relu":
        # the standard definition: no "+ 1" before the select (notebook 04 explains why it matters)
        x = tl.where(x >= 0, x, 0.01 * x)
    elif ACTIVATION == "gelu":
        x = gelu_erf(x)  # exact (erf) GELU, like torch.nn.functional.gelu's default
    return x


# GELU(x) = x * Phi(x), and for t >= 0 the normal tail Phi(-t) = (1 - erf(t / sqrt 2)) / 2.
# Abramowitz & Stegun 7.1.28: 1 - erf(u) = (1 + a1 u + ... + a6 u^6)^-16 within 3e-7 (u >= 0).
# Substituting u = t / sqrt 2 and folding both that and the 1/2 (as 2^(1/16) under the 16th
# power) into the coefficients leaves Phi(-t) = q(t)^-16 for the polynomial q below.
_AS_7_1_28 = (1.0, 0.0705230784, 0.0422820123, 0.0092705272, 0.0001520143, 0.0002765672, 0.0000430638)
_TAIL_COEFFS = [a * 2.0 ** (1 / 16) * 2.0 ** (-i / 2) for i, a in enumerate(_AS_7_1_28)]
_Q0, _Q1, _Q2, _Q3, _Q4, _Q5, _Q6 = (tl.constexpr(c) for c in _TAIL_COEFFS)


@triton.jit
def gelu_erf(x):
    """Exact (erf) GELU of the fp32 tile ``x``, within 3e-7 * |x| of ``x * Phi(x)``.

    Six FMAs, one approximate reciprocal and four squarings per element, where libdevice's
    ``erff`` (``tl.math.erf``) costs about twice as many instructions: in a GEMM epilogue
    every one of them runs while the tensor cores wait (PERF_NOTES.md).  The error is
    far below the fp16/bf16 rounding of the result.  Large |x|: the reciprocal underflows to 0,
    so GELU(x) is exactly x (x > 0) or 0 (x < 0); NaN stays NaN, as in torch."""
    t = tl.abs(x)
    q = _Q6 * t + _Q5
    q = q * t + _Q4
    q = q * t + _Q3
    q = q * t + _Q2
    q = q * t + _Q1
    q = q * t + _Q0
    tail = tl.fdiv(1.0, q, ieee_rounding=False)  # Phi(-t) = tail ** 16
    tail = tail * tail
    tail = tail * tail
    tail = tail * tail
    tail = tail * tail
    return x * tl.where(x >= 0, 1.0 - tail, tail)  # x * Phi(x); +inf stays inf, like torch


#: compiled kernels convert fp32 to bf16 rounding to nearest even; Triton's interpreter truncates
#: (twice the error), so in the interpreter ``output_values`` rounds first
_INTERPRETED = tl.constexpr(_runtime.interpreted())


@triton.jit
def output_values(acc, dtype: tl.constexpr):
    """The fp32 tile in the output dtype, rounded to nearest even as a GPU converts."""
    if _INTERPRETED and dtype == tl.bfloat16:
        bits = acc.to(tl.uint32, bitcast=True)
        bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even in the top 16 bits (inf, NaN kept)
        acc = (bits & 0xFFFF0000).to(tl.float32, bitcast=True)  # exactly a bf16 value: nothing to truncate
    return acc.to(dtype)


@triton.jit
def mma_operand(tile, WIDEN: tl.constexpr):
    """Tile as fed to tl.dot: widened to fp32 only where runtime.fp32_dot_operands says so."""
    if WIDEN:
        tile = tile.to(tl.float32)
    return tile


@triton.jit
def dot_promoted(a, b, acc, PROMOTE: tl.constexpr):
    """``acc + a @ b``.  fp8 on Hopper: wgmma sums its products in a narrower accumulator than fp32;
    with PROMOTE set, that partial sum is added to the fp32 ``acc`` every PROMOTE elements of K
    (or every block, when the block is shorter).  None: Triton's default, fp32 adds only in the
    tensor cores (for fp8 on sm_90, every product summed there).  Other dtypes: ignored."""
    if PROMOTE is None:
        acc = tl.dot(a, b, acc)
    elif PROMOTE > a.shape[1]:
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=a.shape[1])
    else:
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=PROMOTE)
    return acc


@triton.jit
def load_bias(bias_ptr, off_n, N, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr):
    """The tile's BLOCK_N bias values (0 without a bias).  Issued before the K loop, so the load's
    latency hides behind the MMAs instead of stalling the epilogue (one register per thread)."""
    offs_n = off_n + tl.arange(0, BLOCK_N)
    if HAS_BIAS:
        return tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    return tl.zeros((BLOCK_N,), dtype=tl.float32)


@triton.jit
def bias_and_activation(acc, bias, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    if HAS_BIAS:
        acc += bias[None, :]
    return apply_activation(acc, ACTIVATION)


@triton.jit
def store_tile_masked(acc, c_ptr, off_m, off_n, M, N, stride_cm, stride_cn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Masked pointer store of one C tile (the rows/columns past M/N are dropped)."""
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, output_values(acc, c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def activation_ref(x: torch.Tensor, activation) -> torch.Tensor:
    """torch reference for :func:`apply_activation` (on an fp32/fp64 tensor)."""
    check_activation(activation)
    if activation == "relu":
        return torch.relu(x)
    if activation == "leaky_relu":
        return torch.nn.functional.leaky_relu(x, LEAKY_RELU_SLOPE)
    if activation == "gelu":
        return torch.nn.functional.gelu(x)
    return x


def widen_for_dot(dtype: torch.dtype) -> bool:
    return _runtime.fp32_dot_operands(dtype)
