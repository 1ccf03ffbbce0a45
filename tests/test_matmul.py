"""What only ``matmul`` (one program per tile) has: its two tile orders at real sizes, and the
wrapped offsets that must not claim contiguity.  The correctness suite every single-GEMM kernel
shares is test_single_gemm.py."""

import pytest
import torch

from gemm_kernels import DEVICE, matmul, matmul_ref, runtime
from gemm_kernels.testing import assert_close, random_matrix


def _ids(shape):
    return "M{}-N{}-K{}".format(*shape)


# ---------------------------------------------------------------- real sizes on the GPU
# Each new (shape, dtype, epilogue) autotunes and compiles every config once: keep the list short.
@pytest.mark.gpu
@pytest.mark.parametrize("dtype,shape,order,activation", [
    (torch.float16, (4096, 4096, 4096), "grouped", None),
    (torch.bfloat16, (4096, 4096, 4096), "row_major", "gelu"),
    (torch.float16, (1000, 1003, 517), "row_major", "leaky_relu"),
    (torch.bfloat16, (1, 8191, 4099), "grouped", None),
    (torch.float32, (3000, 17, 2049), "grouped", "relu"),
], ids=lambda v: _ids(v) if isinstance(v, tuple) else str(v))
def test_gpu_real_sizes(dtype, shape, order, activation):
    M, N, K = shape
    a, b = random_matrix(M, K, dtype), random_matrix(K, N, dtype, transposed=True)
    bias = torch.randn(N, device=DEVICE).to(dtype)
    out = matmul(a, b, order=order, activation=activation, bias=bias)
    ref = matmul_ref(a, b, activation=activation, bias=bias, out_dtype=torch.float64)
    assert_close(out, ref, dtype)


def _padded_rows(rows, cols, dtype, *, transposed=False):
    """rows x cols with each storage row padded to a multiple of 16 bytes (ragged size, aligned stride)."""
    if transposed:
        return _padded_rows(cols, rows, dtype).t()
    return torch.randn(rows, -(-cols // 8) * 8).to(DEVICE, dtype)[:, :cols]


@pytest.mark.parametrize("order", ["row_major", "grouped"])
@pytest.mark.parametrize("b_layout", ["row", "col"])
def test_ragged_sizes_with_aligned_padded_strides(order, b_layout):
    """N (or M) % 8 != 0 while every row stride is 16-byte aligned: the layout where a false
    contiguity hint on the wrapped offsets makes 16-byte loads start mid-vector (on a GPU:
    'misaligned address'; the sizes are large enough to wrap inside real blocks too)."""
    M, N, K = (1000, 1003, 520) if runtime.on_gpu() else (37, 43, 24)
    a = _padded_rows(M, K, torch.float16, transposed=True)  # column-major A: M is its unit-stride dim
    b = _padded_rows(K, N, torch.float16, transposed=b_layout == "col")
    out = matmul(a, b, order=order, activation="relu")
    assert_close(out, matmul_ref(a, b, activation="relu", out_dtype=torch.float64), torch.float16)
