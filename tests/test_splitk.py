"""matmul_splitk against the float64 reference, with TMA loads (where the layouts allow) and with
pointer loads; its default split rule; its refusals.

The interpreter runs 32x32x32 blocks, so K = 300 is 10 K blocks: split_k = 3 cuts them 4 + 4 + 2,
split_k = 7 leaves a last piece empty (2 blocks per piece), and the default rule splits only
long-K problems with few tiles."""

import pytest
import torch
import triton

from gemm_kernels import DEVICE, matmul_ref, matmul_splitk, runtime
from gemm_kernels.kernels import configs, splitk
from gemm_kernels.kernels.tma import tma_aligned
from gemm_kernels.models import tiles
from gemm_kernels.testing import assert_close, random_matrix

SHAPES = [(1, 1, 1), (37, 61, 45), (40, 33, 300), (2, 131, 67), (30, 50, 2050), (70, 40, 999)]
DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def _ref(a, b, **epi):
    return matmul_ref(a, b, out_dtype=torch.float64, **epi)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "M{}-N{}-K{}".format(*s))
@pytest.mark.parametrize("split_k", [None, 1, 3, 7])
@pytest.mark.parametrize("use_tma", [False, True], ids=["pointer-loads", "tma-loads"])
def test_every_split_is_correct(shape, split_k, use_tma):
    M, N, K = shape
    a, b = random_matrix(M, K), random_matrix(K, N)
    if use_tma:  # ragged rows: copies with 16-byte aligned rows, which TMA can read
        a, b = tma_aligned(a), tma_aligned(b)
    bias = random_matrix(1, N)[0]
    assert_close(matmul_splitk(a, b, split_k=split_k, bias=bias, activation="relu", tma=use_tma),
                 _ref(a, b, bias=bias, activation="relu"))


@pytest.mark.parametrize("activation", [None, "relu", "leaky_relu", "gelu"])
def test_the_epilogue_runs_once_on_the_whole_sum(activation):
    """gelu of each piece's partial sum, added up, would be far off: the last piece adds first."""
    a, b = random_matrix(70, 500), random_matrix(500, 67)
    bias = random_matrix(1, 67)[0]
    assert_close(matmul_splitk(a, b, split_k=5, bias=bias, activation=activation),
                 _ref(a, b, bias=bias, activation=activation))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "a_t", "b_t", "b_negated", "b_expanded", "strided"])
@pytest.mark.parametrize("use_tma", [False, True], ids=["pointer-loads", "tma-loads"])
def test_dtypes_and_views(dtype, layout, use_tma):
    M, N, K = (48, 72, 336) if use_tma else (45, 70, 330)  # TMA: every row a whole number of 16 bytes
    a, b = random_matrix(M, K, dtype), random_matrix(K, N, dtype)
    if layout == "a_t":
        a = random_matrix(M, K, dtype, transposed=True)
    elif layout == "b_t":
        b = random_matrix(K, N, dtype, transposed=True)
    elif layout == "b_negated":
        b = -b
    elif layout == "b_expanded":
        b = random_matrix(K, 1, dtype).expand(K, N)  # stride 0 along N
    elif layout == "strided":
        a = random_matrix(M, 2 * K, dtype)[:, ::2]
        b = random_matrix(K + 3, N + 5, dtype)[3:, 5:]
    if use_tma and layout in ("strided", "b_expanded"):  # no unit stride / a zero stride: refused by name
        with pytest.raises(ValueError, match="cannot be read by TMA"):
            matmul_splitk(a, b, split_k=4, tma=True)
        return
    assert_close(matmul_splitk(a, b, split_k=4, tma=use_tma), _ref(a, b), dtype)


@pytest.mark.parametrize("use_tma", [False, True], ids=["pointer-loads", "tma-loads"])
def test_lazy_negated_view_is_resolved(use_tma):
    """torch's lazy negation (``_neg_view``) is only a flag: the kernel reads memory, so the
    launcher resolves it first."""
    a, b = random_matrix(33, 200), random_matrix(200, 40)
    lazy = b._neg_view()
    assert lazy.is_neg()
    assert_close(matmul_splitk(a, lazy, split_k=3, tma=use_tma), _ref(a, -b))


@pytest.mark.parametrize("use_tma", [False, True], ids=["pointer-loads", "tma-loads"])
def test_nan_in_an_input_reaches_only_its_row(use_tma):
    """A NaN in a's row 5 spoils row 5 of C and nothing else: the pieces' partial sums never
    cross tiles or rows (a poisoned workspace slot would spread further)."""
    a, b = random_matrix(64, 320), random_matrix(320, 48)
    a[5, 100] = float("nan")
    out = matmul_splitk(a, b, split_k=5, tma=use_tma)
    assert torch.isnan(out[5]).all() and not torch.isnan(out[torch.arange(64) != 5]).any()


def test_the_sum_is_in_split_order_so_results_repeat_bitwise():
    a, b = random_matrix(64, 1000, torch.float32), random_matrix(1000, 64, torch.float32)
    first = matmul_splitk(a, b, split_k=6)
    assert torch.equal(first, matmul_splitk(a, b, split_k=6))


def test_default_rule():
    # few tiles and a long K: one wave's worth of pieces, each at least SPLITK_MIN_K_TILES blocks
    assert tiles.splitk_default_splits(num_tiles=64, k_tiles=256, num_sms=132) == 2
    assert tiles.splitk_default_splits(num_tiles=8, k_tiles=256, num_sms=132) == 16
    assert tiles.splitk_default_splits(num_tiles=8, k_tiles=40, num_sms=132) == 40 // tiles.SPLITK_MIN_K_TILES
    assert tiles.splitk_default_splits(num_tiles=512, k_tiles=64, num_sms=132) == 1  # a full wave: no split
    assert tiles.splitk_default_splits(num_tiles=4, k_tiles=7, num_sms=132) == 1  # K too short to cut
    assert splitk._splits(64, 64, 1 << 14, 32, 32, 32, None) == tiles.splitk_default_splits(4, 512, runtime.num_sms())
    assert splitk._splits(64, 64, 64, 32, 32, 32, 9) == 2  # never more pieces than K blocks


def test_tma_loads_are_asked_for_and_refused_by_name(monkeypatch):
    a, b = random_matrix(40, 64), random_matrix(64, 48)
    assert splitk._tma_layouts(a, b, True) == (False, 64, False, 48)  # both row-major: the row strides
    a_t, w_t = random_matrix(40, 64, transposed=True), random_matrix(64, 48, transposed=True)  # b = W.t()
    assert splitk._tma_layouts(a_t, w_t, True) == (True, 40, True, 64)  # column-major: the column strides
    assert splitk._tma_layouts(a, b, False) is None  # the default: pointer loads
    with pytest.raises(ValueError, match="b cannot be read by TMA"):
        matmul_splitk(a, random_matrix(64, 99)[:, :48], tma=True)  # rows of 96 bytes from a 198-byte stride
    with pytest.raises(TypeError, match="tma must be True or False"):
        matmul_splitk(a, b, tma=None)
    monkeypatch.setattr(runtime, "supports_tma", lambda: False)  # an Ampere GPU
    with pytest.raises(RuntimeError, match="tma=False"):
        matmul_splitk(a, b, tma=True)


@pytest.mark.parametrize("bad, error, pattern", [
    (0, ValueError, "split_k"), (-2, ValueError, "split_k"), (2.5, TypeError, "split_k"), (True, TypeError, "split_k"),
])
def test_bad_split_k(bad, error, pattern):
    a, b = random_matrix(8, 64), random_matrix(64, 8)
    with pytest.raises(error, match=pattern):
        matmul_splitk(a, b, split_k=bad)


def test_bad_inputs_get_matmul_errors():
    a = random_matrix(8, 64)
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul_splitk(a, random_matrix(63, 8))
    with pytest.raises(TypeError, match="dtype"):
        matmul_splitk(a, random_matrix(64, 8, torch.float32))
    with pytest.raises(ValueError, match="requires grad"):
        matmul_splitk(a.requires_grad_(), random_matrix(64, 8))
    with pytest.raises(ValueError, match="BLOCK_M"):
        matmul_splitk(random_matrix(8, 64), random_matrix(64, 8),
                      config=triton.Config({"BLOCK_M": 24, "BLOCK_N": 32, "BLOCK_K": 32}))
    with pytest.raises(ValueError, match="FLATTEN"):
        matmul_splitk(random_matrix(8, 64), random_matrix(64, 8),
                      config=triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "FLATTEN": True}))


def test_empty_problems():
    for M, N, K in ((0, 5, 7), (5, 0, 7), (5, 6, 0)):
        out = matmul_splitk(random_matrix(M, K), random_matrix(K, N), split_k=3)
        assert out.shape == (M, N) and (K > 0 or (out == 0).all())


def test_autotune_key_holds_the_split_request():
    assert {"split_request", "TMA_LOADS", "A_COL_MAJOR", "B_COL_MAJOR"} <= set(splitk._splitk_tuned.keys)
    assert all(c.kwargs.keys() == {"BLOCK_M", "BLOCK_N", "BLOCK_K"} for c in configs.splitk_configs())


@pytest.mark.gpu
@pytest.mark.parametrize("split_k", [None, 1, 5, 16])
@pytest.mark.parametrize("shape", [(512, 512, 16384), (1024, 1024, 8192), (1000, 1003, 520), (96, 7000, 4097)])
@pytest.mark.parametrize("use_tma", [False, True], ids=["pointer-loads", "tma-loads"])
@pytest.mark.parametrize("b_layout", ["row-major", "W.t()"])
def test_gpu_correct_repeatable_and_counts_left_zero(shape, split_k, use_tma, b_layout):
    if use_tma and not runtime.supports_tma():
        pytest.skip("tma=True needs sm_90")
    M, N, K = shape
    a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
    b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
    if b_layout == "W.t()":
        b = b.t().contiguous().t()
    if use_tma:  # ragged rows (K = 4097, N = 1003): copies with 16-byte aligned rows, which TMA can read
        a = tma_aligned(a)
        b = tma_aligned(b.t()).t() if b_layout == "W.t()" else tma_aligned(b)
    first = matmul_splitk(a, b, split_k=split_k, activation="relu", tma=use_tma)
    assert_close(first, _ref(a, b, activation="relu"))
    for _ in range(3):  # back-to-back launches on one counter buffer: no reset needed, same bits
        assert torch.equal(matmul_splitk(a, b, split_k=split_k, activation="relu", tma=use_tma), first)
    torch.cuda.synchronize()
    counts = runtime.stream_buffer("splitk counts", 1, torch.int32, torch.cuda.current_device())
    assert int(counts.abs().sum()) == 0, "a launch left an arrival count raised"
