"""Every single-GEMM kernel against the float64 reference, one parametrised suite:
``matmul`` (one program per tile), ``matmul_persistent``, ``matmul_tma`` and ``matmul_streamk``.

Ragged shapes (1, primes, sizes that are no multiple of any block), every dtype, strided,
transposed and negated views, every epilogue, both tile orders, empty dimensions, and the
input contract they share.  Outputs are NaN-poisoned (conftest), so an element a kernel never
wrote fails.  Kernel-specific behaviour (program counts, TMA layouts, Stream-K splits, traces)
lives in test_persistent.py and test_streamk.py.
"""

import pytest
import torch

from gemm_kernels import DEVICE, matmul, matmul_persistent, matmul_ref, matmul_streamk, matmul_tma, runtime
from gemm_kernels.kernels.tma import tma_aligned
from gemm_kernels.testing import STRIDED_LAYOUTS, assert_close, random_matrix, strided_operands

KERNELS = {"matmul": matmul, "persistent": matmul_persistent, "tma": matmul_tma, "streamk": matmul_streamk}
#: kernels that read through TMA descriptors: ragged operands are copied into 16-byte aligned rows
TMA_KERNELS = {"tma", "streamk"}
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# none of these is a multiple of the 32-wide interpreter blocks (or of the GPU configs' blocks);
# with 4 "SMs" most persistent programs walk several tiles; (30, 50, 2050) is split by Stream-K
SHAPES = [(1, 1, 1), (1, 17, 5), (31, 1, 7), (37, 61, 45), (97, 89, 101), (65, 33, 16), (2, 131, 67),
          (30, 50, 2050)]


def _ids(shape):
    return "M{}-N{}-K{}".format(*shape)


def _inputs(kind, M, N, K, dtype=torch.float16):
    a, b = random_matrix(M, K, dtype), random_matrix(K, N, dtype)
    if kind in TMA_KERNELS:
        a, b = tma_aligned(a), tma_aligned(b)
    return a, b


def _ref(a, b, **epilogue):
    return matmul_ref(a, b, out_dtype=torch.float64, **epilogue)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
@pytest.mark.parametrize("kind", KERNELS)
def test_ragged_shapes(kind, shape, dtype):
    a, b = _inputs(kind, *shape, dtype)
    out = KERNELS[kind](a, b)
    assert out.dtype == dtype and out.shape == (shape[0], shape[1]) and out.is_contiguous()
    assert_close(out, _ref(a, b), dtype)


@pytest.mark.parametrize("activation", [None, "relu", "leaky_relu", "gelu"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("kind", KERNELS)
def test_fused_epilogue(kind, activation, with_bias):
    M, N, K, dtype = 50, 67, 40, torch.float16
    a, b = _inputs(kind, M, N, K, dtype)
    bias = torch.randn(N).to(DEVICE, dtype) if with_bias else None
    out = KERNELS[kind](a, b, activation=activation, bias=bias)
    assert_close(out, _ref(a, b, activation=activation, bias=bias), dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kind", KERNELS)
def test_fused_epilogue_bf16_and_strided_bias(kind, dtype):
    a, b = _inputs(kind, 33, 48, 70, dtype)
    bias = torch.randn(96).to(DEVICE, dtype)[::2]  # a strided view: the launchers make it contiguous
    out = KERNELS[kind](a, b, activation="gelu", bias=bias)
    assert_close(out, _ref(a, b, activation="gelu", bias=bias), dtype)


@pytest.mark.parametrize("layout", STRIDED_LAYOUTS)
@pytest.mark.parametrize("kind", ["matmul", "persistent"])
def test_pointer_kernels_take_any_strides(kind, layout):
    a, b = strided_operands(45, 70, 39, torch.float16, layout)
    assert not (a.is_contiguous() and b.is_contiguous())
    assert_close(KERNELS[kind](a, b), _ref(a, b), torch.float16)


@pytest.mark.parametrize("layout", ["a_t", "b_t", "both_t"])
@pytest.mark.parametrize("kind", KERNELS)
def test_transposed_views(kind, layout):
    """Column-major operands (``.t()`` views; B^T is nn.Linear's weight layout)."""
    M, N, K, dtype = 45, 64, 40, torch.bfloat16
    a = tma_aligned(random_matrix(K, M, dtype)).t() if layout in ("a_t", "both_t") else tma_aligned(random_matrix(M, K, dtype))
    b = tma_aligned(random_matrix(N, K, dtype)).t() if layout in ("b_t", "both_t") else tma_aligned(random_matrix(K, N, dtype))
    assert_close(KERNELS[kind](a, b), _ref(a, b), dtype)


@pytest.mark.parametrize("order,group", [("row_major", 8), ("grouped", 1), ("grouped", 3), ("grouped", 1000)])
@pytest.mark.parametrize("kind", KERNELS)
def test_orders_give_the_same_answer(kind, order, group):
    a, b = _inputs(kind, 150, 130, 70)
    assert_close(KERNELS[kind](a, b, order=order, group_size_m=group), _ref(a, b))


@pytest.mark.parametrize("kind", KERNELS)
def test_empty_dimensions_behave_like_torch(kind):
    for M, N, K in [(0, 5, 3), (4, 0, 3), (0, 0, 0)]:
        assert KERNELS[kind](random_matrix(M, K), random_matrix(K, N)).shape == (M, N)
    a, b = random_matrix(4, 0), random_matrix(0, 6)
    assert torch.equal(KERNELS[kind](a, b).float().cpu(), torch.zeros(4, 6))
    bias = torch.randn(6).to(DEVICE, torch.float16)
    out = KERNELS[kind](a, b, bias=bias, activation="relu").float().cpu()
    assert torch.allclose(out, torch.relu(bias.float().cpu()).expand(4, 6))


def test_leaky_relu_is_the_standard_one():
    a = torch.tensor([[1.0], [-1.0]], dtype=torch.float16, device=DEVICE)
    b = torch.tensor([[-3.0, 2.0]], dtype=torch.float16, device=DEVICE)
    out = matmul(a, b, activation="leaky_relu").float().cpu()
    assert torch.allclose(out, torch.tensor([[-0.03, 2.0], [3.0, -0.02]]), atol=1e-3)


def test_bf16_interpreter_trap_is_handled():
    """Triton's interpreter mis-multiplies bf16 in tl.dot; the package widens tiles (one place)."""
    a, b = random_matrix(64, 64, torch.bfloat16), random_matrix(64, 64, torch.bfloat16)
    assert assert_close(matmul(a, b), _ref(a, b), torch.bfloat16) < 1e-2
    assert runtime.fp32_dot_operands(torch.bfloat16) == runtime.interpreted()
    assert not runtime.fp32_dot_operands(torch.float16)


# ---------------------------------------------------------------- the input contract they share
def _ab(M=8, N=8, K=8, dtype=torch.float16):
    return random_matrix(M, K, dtype), random_matrix(K, N, dtype)


@pytest.mark.parametrize("kind", KERNELS)
@pytest.mark.parametrize("make_args,exc,names", [
    (lambda: (torch.randn(2, 3, 4, dtype=torch.float16), _ab()[1]), ValueError, ["a", "2-D", "(2, 3, 4)"]),
    (lambda: (_ab()[0], torch.randn(8, dtype=torch.float16)), ValueError, ["b", "2-D"]),
    (lambda: (_ab(K=8)[0], _ab(K=9)[1]), ValueError, ["inner dimensions", "8 != 9"]),
    (lambda: (_ab()[0], _ab(dtype=torch.bfloat16)[1]), TypeError, ["dtype", "float16", "bfloat16"]),
    (lambda: (torch.ones(8, 8, dtype=torch.int32), _ab()[1]), TypeError, ["a", "int32"]),
    (lambda: (torch.ones(8, 8, dtype=torch.float64), _ab()[1]), TypeError, ["a", "float64"]),
    (lambda: ([[1.0]], _ab()[1]), TypeError, ["a", "torch.Tensor"]),
])
def test_bad_inputs_are_named(kind, make_args, exc, names):
    a, b = make_args()
    with pytest.raises(exc) as info:
        KERNELS[kind](a, b)
    for name in names:
        assert name in str(info.value)


@pytest.mark.parametrize("kind", KERNELS)
@pytest.mark.parametrize("kwargs,exc,names", [
    ({"order": "zigzag"}, ValueError, ["order", "zigzag"]),
    ({"group_size_m": 0}, ValueError, ["group_size_m", "0"]),
    ({"group_size_m": 2.5}, TypeError, ["group_size_m", "int"]),
    ({"activation": "swish"}, ValueError, ["activation", "swish"]),
    ({"bias": "wrong_shape"}, ValueError, ["bias", "[8]"]),
    ({"bias": "2d"}, ValueError, ["bias", "1-D"]),
])
def test_bad_options_are_named(kind, kwargs, exc, names):
    a, b = _inputs(kind, 8, 8, 8)
    if kwargs.get("bias") == "wrong_shape":
        kwargs = {"bias": torch.randn(7).to(DEVICE, torch.float16)}
    elif kwargs.get("bias") == "2d":
        kwargs = {"bias": torch.randn(1, 8).to(DEVICE, torch.float16)}
    with pytest.raises(exc) as info:
        KERNELS[kind](a, b, **kwargs)
    for name in names:
        assert name in str(info.value)


@pytest.mark.skipif(runtime.on_gpu(), reason="on a GPU the cpu-tensor test below covers this")
@pytest.mark.parametrize("kind", KERNELS)
def test_wrong_device_is_named(kind):
    a, b = torch.ones(8, 8, dtype=torch.float16, device="meta"), torch.ones(8, 8, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError) as info:
        KERNELS[kind](a, b)
    assert "meta" in str(info.value) and "cpu" in str(info.value)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KERNELS)
def test_cpu_tensor_rejected_when_compiled(kind):
    a, b = torch.ones(8, 8, dtype=torch.float16), torch.ones(8, 8, dtype=torch.float16)
    with pytest.raises(ValueError) as info:
        KERNELS[kind](a, b)
    assert "cpu" in str(info.value) and "cuda" in str(info.value)


# ---------------------------------------------------------------- real sizes on the GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (1000, 1003, 517), (1, 8191, 4099), (3000, 17, 2049),
                                   (512, 512, 16384)], ids=_ids)
@pytest.mark.parametrize("kind", KERNELS)
def test_gpu_real_sizes(kind, shape, dtype):
    a, b = _inputs(kind, *shape, dtype)
    bias = torch.randn(shape[1], device=DEVICE).to(dtype)
    out = KERNELS[kind](a, b, activation="gelu", bias=bias)
    assert_close(out, _ref(a, b, activation="gelu", bias=bias), dtype)
