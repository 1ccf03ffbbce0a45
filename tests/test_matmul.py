"""gemm_kernels.matmul against the float64 reference: ragged shapes, layouts, dtypes, epilogues, bad input."""

import pytest
import torch

from gemm_kernels import DEVICE, matmul, matmul_ref, runtime
from gemm_kernels.testing import STRIDED_LAYOUTS, assert_close, random_matrix, strided_operands

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# none of these is a multiple of the 32-wide interpreter blocks (or of the GPU configs' blocks)
SHAPES = [(1, 1, 1), (1, 17, 5), (31, 1, 7), (37, 61, 45), (97, 89, 101), (65, 33, 16), (2, 131, 67)]


def _ids(shape):
    return "M{}-N{}-K{}".format(*shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
def test_ragged_shapes(shape, dtype):
    M, N, K = shape
    a, b = random_matrix(M, K, dtype), random_matrix(K, N, dtype)
    assert_close(matmul(a, b), matmul_ref(a, b, out_dtype=torch.float64), dtype)


@pytest.mark.parametrize("layout", STRIDED_LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_transposed_and_strided_inputs(layout, dtype):
    M, N, K = 45, 70, 39
    a, b = strided_operands(M, N, K, dtype, layout)
    assert not (a.is_contiguous() and b.is_contiguous())
    assert_close(matmul(a, b), matmul_ref(a, b, out_dtype=torch.float64), dtype)


@pytest.mark.parametrize("activation", [None, "relu", "leaky_relu", "gelu"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_fused_epilogue(activation, with_bias, dtype):
    M, N, K = 50, 67, 41
    a, b = random_matrix(M, K, dtype), random_matrix(K, N, dtype)
    bias = torch.randn(N).to(DEVICE, dtype) if with_bias else None
    out = matmul(a, b, activation=activation, bias=bias)
    ref = matmul_ref(a, b, activation=activation, bias=bias, out_dtype=torch.float64)
    assert out.dtype == dtype and out.shape == (M, N)
    assert_close(out, ref, dtype)


def test_leaky_relu_is_the_standard_one():
    a = torch.tensor([[1.0], [-1.0]], dtype=torch.float16, device=DEVICE)
    b = torch.tensor([[-3.0, 2.0]], dtype=torch.float16, device=DEVICE)
    out = matmul(a, b, activation="leaky_relu").float().cpu()
    assert torch.allclose(out, torch.tensor([[-0.03, 2.0], [3.0, -0.02]]), atol=1e-3)


@pytest.mark.parametrize("order,group", [("row_major", 8), ("grouped", 1), ("grouped", 3), ("grouped", 8), ("grouped", 1000)])
def test_orders_give_the_same_answer(order, group):
    a, b = random_matrix(150, 70, torch.float16), random_matrix(70, 130, torch.float16)
    assert_close(matmul(a, b, order=order, group_size_m=group), matmul_ref(a, b, out_dtype=torch.float64))


def test_bf16_interpreter_trap_is_handled():
    """Triton's interpreter mis-multiplies bf16 in tl.dot; the package widens tiles (one place)."""
    a, b = random_matrix(64, 64, torch.bfloat16), random_matrix(64, 64, torch.bfloat16)
    err = assert_close(matmul(a, b), matmul_ref(a, b, out_dtype=torch.float64), torch.bfloat16)
    assert err < 1e-2
    assert runtime.fp32_dot_operands(torch.bfloat16) == runtime.interpreted()
    assert not runtime.fp32_dot_operands(torch.float16)


def test_empty_dimensions_behave_like_torch():
    for M, N, K in [(0, 5, 3), (4, 0, 3), (0, 0, 0)]:
        out = matmul(random_matrix(M, K), random_matrix(K, N))
        assert out.shape == (M, N)
    a, b = random_matrix(4, 0), random_matrix(0, 6)
    assert torch.equal(matmul(a, b).float().cpu(), torch.zeros(4, 6))
    bias = torch.randn(6).to(DEVICE, torch.float16)
    out = matmul(a, b, bias=bias, activation="relu").float().cpu()
    assert torch.allclose(out, torch.relu(bias.float().cpu()).expand(4, 6))


# ---------------------------------------------------------------- bad input -> clear errors
def _ab(M=8, N=8, K=8, dtype=torch.float16):
    return random_matrix(M, K, dtype), random_matrix(K, N, dtype)


@pytest.mark.parametrize("make_args,exc,pattern", [
    (lambda: (torch.randn(2, 3, 4, dtype=torch.float16), _ab()[1]), ValueError, r"a must be 2-D, got shape \(2, 3, 4\)"),
    (lambda: (_ab()[0], torch.randn(8, dtype=torch.float16)), ValueError, "b must be 2-D"),
    (lambda: (_ab(K=8)[0], _ab(K=9)[1]), ValueError, r"inner dimensions must match \(8 != 9\)"),
    (lambda: (_ab()[0], _ab(dtype=torch.bfloat16)[1]), TypeError, "share one dtype"),
    (lambda: (torch.ones(8, 8, dtype=torch.int32), _ab()[1]), TypeError, "dtype int32"),
    (lambda: (torch.ones(8, 8, dtype=torch.float64), _ab()[1]), TypeError, "dtype float64"),
    (lambda: ([[1.0]], _ab()[1]), TypeError, "torch.Tensor"),
])
def test_bad_inputs(make_args, exc, pattern):
    a, b = make_args()
    with pytest.raises(exc, match=pattern):
        matmul(a, b)


@pytest.mark.parametrize("kwargs,exc,pattern", [
    ({"order": "zigzag"}, ValueError, "order must be one of"),
    ({"group_size_m": 0}, ValueError, "group_size_m must be >= 1, got 0"),
    ({"group_size_m": 2.5}, TypeError, "group_size_m must be an int"),
    ({"activation": "swish"}, ValueError, "activation must be one of"),
    ({"bias": "bias_wrong_shape"}, ValueError, r"bias must have shape \[N\] = \[8\]"),
    ({"bias": "bias_2d"}, ValueError, "bias must be 1-D"),
])
def test_bad_options(kwargs, exc, pattern):
    a, b = _ab()
    if kwargs.get("bias") == "bias_wrong_shape":
        kwargs = {"bias": torch.randn(7).to(DEVICE, torch.float16)}
    elif kwargs.get("bias") == "bias_2d":
        kwargs = {"bias": torch.randn(1, 8).to(DEVICE, torch.float16)}
    with pytest.raises(exc, match=pattern):
        matmul(a, b, **kwargs)


@pytest.mark.skipif(runtime.on_gpu(), reason="on a GPU the meta device check below covers this")
def test_wrong_device_is_named():
    a, b = _ab()
    with pytest.raises(ValueError, match="is on meta"):
        matmul(a.to("meta"), b)


@pytest.mark.gpu
def test_cpu_tensor_rejected_when_compiled():
    a, b = _ab()
    with pytest.raises(ValueError, match="is on cpu but kernels run compiled on the GPU"):
        matmul(a.cpu(), b)
    with pytest.raises(ValueError, match="share one device|is on cpu"):
        matmul(a, b, bias=torch.randn(8, dtype=torch.float16))


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
