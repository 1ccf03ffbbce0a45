"""FP8 numerics without a GPU: the formats' facts, realistic activations, and a *model* of how
Hopper's fp8 tensor cores accumulate.

The model (a hypothesis, labelled as such wherever it is shown): wgmma adds the products of each
32-wide K step exactly, then adds that to an accumulator that keeps only ``mantissa_bits`` bits
after the leading one, rounding toward zero.  DeepSeek-V3's report (section 3.3.2) says the
H800's fp8 accumulation retains "around 14 bits"; notebook 10 fits ``mantissa_bits`` to errors
measured on an H100 (``bench.fp8_numerics``) and shows where the model and the GPU agree.
``promote_every``: every that many K elements, the partial sum is added to a true fp32
accumulator and restarted from zero, as ``max_num_imprecise_acc`` makes Triton do.

Triton's interpreter multiplies fp8 exactly in fp32, so on a CPU this model is the only way to
see the effect; it is an emulation, never a measurement.
"""

from __future__ import annotations

import torch

#: wgmma's K per instruction for 8-bit operands
WGMMA_K_FP8 = 32


def format_facts(dtype) -> dict:
    """Range and precision of an fp8 dtype, read from ``torch.finfo``."""
    info = torch.finfo(dtype)
    mantissa = {torch.float8_e4m3fn: 3, torch.float8_e5m2: 2}[dtype]
    return {"dtype": str(dtype).replace("torch.", ""), "exponent_bits": 7 - mantissa, "mantissa_bits": mantissa,
            "max": float(info.max), "smallest_normal": float(info.tiny),
            "smallest_subnormal": float(info.tiny) * 2.0 ** -mantissa,
            "eps": float(info.eps), "has_inf": dtype == torch.float8_e5m2}


def outlier_activations(rows: int, cols: int, *, outlier_channels: int = 4, outlier_scale: float = 50.0,
                        generator=None) -> torch.Tensor:
    """N(0, 1) activations with a few large channels (columns), as LLM activations have: the
    same ``outlier_channels`` columns are ``outlier_scale`` times larger in every row."""
    x = torch.randn(rows, cols, generator=generator)
    idx = torch.randperm(cols, generator=generator)[:outlier_channels]
    x[:, idx] *= outlier_scale
    return x


def truncate_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """``x`` (float64) with ``bits`` bits kept after the leading one, rounded toward zero."""
    mant, exp = torch.frexp(x)  # x = mant * 2**exp, 0.5 <= |mant| < 1
    scale = 2.0 ** (bits + 1)
    return torch.ldexp(torch.trunc(mant * scale) / scale, exp)


def accumulate_model(a: torch.Tensor, b: torch.Tensor, *, mantissa_bits: int = 13, promote_every: int | None = None,
                     chunk: int = WGMMA_K_FP8) -> torch.Tensor:
    """``a @ b`` (float64 values of fp8 numbers) as the model of Hopper's fp8 accumulation
    computes it: exact 32-wide partial products, a truncated running sum, and, with
    ``promote_every``, an exact fp32-style sum of the partial sums every that many K elements."""
    a, b = a.double(), b.double()
    K = a.shape[1]
    if promote_every is not None and promote_every % chunk:
        raise ValueError(f"promote_every must be a multiple of {chunk} (the wgmma K step), got {promote_every}")
    total = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64)
    partial = torch.zeros_like(total)
    since_promotion = 0
    for k in range(0, K, chunk):
        partial = truncate_mantissa(partial + a[:, k:k + chunk] @ b[k:k + chunk], mantissa_bits)
        since_promotion += chunk
        if promote_every is not None and since_promotion >= promote_every:
            total = (total + partial).float().double()  # the fp32 add of the promotion
            partial.zero_()
            since_promotion = 0
    return (total + partial).float().double()
