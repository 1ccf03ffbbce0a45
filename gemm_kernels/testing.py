"""Correctness helpers shared by tests, notebooks and exercise checks.

Errors are measured as ``||out - ref|| / ||ref||`` against a float64 reference, with a
tolerance per input dtype (accumulation is fp32 everywhere; the output rounding and,
on a GPU, TF32 for fp32 inputs set the floor).
"""

from __future__ import annotations

import torch

TOLERANCES = {
    torch.float16: 2e-3,   # fp16 output rounding ~5e-4
    torch.bfloat16: 1.6e-2,  # bf16 output rounding ~4e-3
    torch.float32: 2e-3,   # TF32 tensor cores on a GPU (~5e-4); exact in the interpreter
    # fp8 inputs, checked against the float64 product of their dequantized values (the
    # quantization error is the input's, not the kernel's): the bf16 output's rounding sets the floor
    torch.float8_e4m3fn: 1.6e-2,
    torch.float8_e5m2: 1.6e-2,
}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius-norm error; NaN anywhere in ``out`` gives inf.  Below the smallest
    normal number of ``out``'s dtype (fp16: 6.1e-5) the format has no relative precision left
    (a subnormal fp16 keeps fewer bits), so ``||ref||`` counts as at least that size per element."""
    out64, ref64 = out.detach().double().cpu(), ref.detach().double().cpu()
    if out64.shape != ref64.shape:
        raise ValueError(f"shape mismatch: out {tuple(out64.shape)} vs ref {tuple(ref64.shape)}")
    if not torch.isfinite(out64).all():
        return float("inf")
    floor = torch.finfo(out.dtype).tiny * out.numel() ** 0.5 if out.dtype.is_floating_point else 0.0
    denom = max(ref64.norm().item(), floor)
    diff = (out64 - ref64).norm().item()
    return diff if denom == 0 else diff / denom


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype | None = None, what: str = "result") -> float:
    """Raise AssertionError with the error, the tolerance and the worst element when out != ref."""
    dtype = dtype or out.dtype
    tol = TOLERANCES[dtype]
    err = rel_err(out, ref)
    if not err <= tol:
        diff = (out.detach().double().cpu() - ref.detach().double().cpu()).abs()
        diff = torch.nan_to_num(diff, nan=float("inf"))
        worst = divmod(int(diff.argmax()), diff.shape[-1]) if diff.dim() == 2 and diff.numel() else None
        n_bad = int((~torch.isfinite(out.detach().cpu().double())).sum())
        raise AssertionError(
            f"{what}: relative error {err:.3g} > tolerance {tol:g} for {dtype}"
            + (f"; {n_bad} non-finite elements (never written?)" if n_bad else "")
            + (f"; worst element at {worst}" if worst else "")
        )
    return err


def random_matrix(rows: int, cols: int, dtype=torch.float16, device=None, *, transposed=False, generator=None):
    """Fresh N(0, 1) values; ``transposed=True`` returns a column-major view of the same shape."""
    from . import runtime

    device = device or runtime.DEVICE
    if transposed:
        return torch.randn(cols, rows, generator=generator).to(device=device, dtype=dtype).t()
    return torch.randn(rows, cols, generator=generator).to(device=device, dtype=dtype)


#: the non-contiguous input layouts the single-GEMM tests run: transposed views and slices
STRIDED_LAYOUTS = ("a_t", "b_t", "both_t", "sliced", "strided_rows")


def strided_operands(M: int, N: int, K: int, dtype, layout: str):
    """``(a [M, K], b [K, N])`` in one of :data:`STRIDED_LAYOUTS`: ``a_t`` / ``b_t`` / ``both_t``
    column-major views, ``sliced`` views into bigger matrices (row stride larger than the width),
    ``strided_rows`` every other row of A and every third column of B."""
    if layout == "sliced":
        return (random_matrix(M + 3, K + 10, dtype)[2:2 + M, 5:5 + K],
                random_matrix(K + 1, N + 7, dtype)[1:, 3:3 + N])
    if layout == "strided_rows":
        return random_matrix(2 * M, K, dtype)[::2], random_matrix(K, 3 * N, dtype)[:, ::3]
    if layout not in STRIDED_LAYOUTS:
        raise ValueError(f"layout must be one of {STRIDED_LAYOUTS}, got {layout!r}")
    return (random_matrix(M, K, dtype, transposed=layout in ("a_t", "both_t")),
            random_matrix(K, N, dtype, transposed=layout in ("b_t", "both_t")))
