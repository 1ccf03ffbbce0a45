"""The block-copy kernel of notebook 01: each program loads one masked block of a matrix and
stores it, padded as it is, in its own slot of the output, so a notebook can look at exactly
what every program saw.

It lives in a module (not in the notebook) so that the compile view
(:func:`gemm_kernels.lab.compile_view.compile_for`) can build it for a GPU from any machine:
notebook 01 compiles it for a row-major matrix and for a transposed view and compares the
layouts of the two loads (:meth:`CompileView.op_layouts`)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..models._ints import check_int


@triton.jit
def blocks_kernel(x_ptr, out_ptr, M, N, stride_m, stride_n,
                  OTHER: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    block = tl.load(x_ptr + rows[:, None] * stride_m + cols[None, :] * stride_n, mask=mask, other=OTHER)
    # the output is padded to whole blocks, so this store needs no mask
    slot = (pid_m * tl.num_programs(1) + pid_n) * BLOCK_M * BLOCK_N
    local = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(out_ptr + slot + local, block)


def blocks_of(x: torch.Tensor, block_m: int, block_n: int, other: float = -1.0) -> torch.Tensor:
    """Every ``block_m x block_n`` block of the 2-D tensor ``x`` (any strides), as the kernel
    loaded it: ``out[pid_m, pid_n]`` is block ``(pid_m, pid_n)``, lanes outside ``x`` set to
    ``other``."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise TypeError(f"x must be a 2-D torch.Tensor, got {type(x).__name__}"
                        + (f" with {x.dim()} dimensions" if isinstance(x, torch.Tensor) else ""))
    block_m = check_int(block_m, "block_m", minimum=1)
    block_n = check_int(block_n, "block_n", minimum=1)
    if block_m & (block_m - 1) or block_n & (block_n - 1):
        raise ValueError(f"block sizes must be powers of 2 (tl.arange needs them), got {block_m} x {block_n}")
    M, N = x.shape
    if M == 0 or N == 0:
        raise ValueError(f"x is empty ({M} x {N}): there are no blocks to copy")
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    out = torch.empty((*grid, block_m, block_n), dtype=x.dtype, device=x.device)
    blocks_kernel[grid](x, out, M, N, x.stride(0), x.stride(1), OTHER=other, BLOCK_M=block_m, BLOCK_N=block_n)
    return out
