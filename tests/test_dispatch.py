"""matmul_auto, the default dispatch: its rule (``tiles.default_launcher``), what it picks for
tensors (``pick_launcher``), and every launcher it can pick against the float64 reference on
ragged shapes, views and dtypes, with gradients (twice through matmul_tma) and named errors.

In the interpreter (4 "SMs") small problems pick split-K; ``num_sms`` is patched to 1 to reach
the data-parallel picks."""

import numpy as np
import pytest
import torch

import gemm_kernels as gk
from gemm_kernels import DEVICE, matmul_auto, matmul_ref, pick_launcher, runtime
from gemm_kernels.kernels import dispatch, launches
from gemm_kernels.models.tiles import (DISPATCH_LAUNCHERS, WS_TILES, default_launcher, splitk_default_splits,
                                       whole_pieces, ws_default_splits, ws_default_tile, ws_tile_cost)
from gemm_kernels.testing import STRIDED_LAYOUTS, assert_close, random_matrix, strided_operands

H100_SMS = 132


@pytest.mark.parametrize("shape, gpu, expected", [
    ((512, 512, 16384), "hopper", "matmul_ws"),  # 32 tiles of 64x128: matmul_ws splits K in 4
    ((512, 512, 16384), "tma-only", "matmul_splitk"),  # e.g. fp32 inputs on an H100: 8 tiles of 128x256
    ((257, 4096, 14336), "hopper", "matmul_ws"),  # 80 tiles of 64x256 (48 of 128x256: under half of 132)
    ((257, 4096, 14336), "tma-only", "matmul_splitk"),  # 48 tiles of 128x256
    ((257, 8192, 8192), "hopper", "matmul_ws"),  # 96 tiles of 128x256
    ((129, 2048, 8192), "hopper", "matmul_ws"),  # 48 tiles of 64x128, even the smallest under half: in 2 pieces
    ((4096, 4096, 4096), "hopper", "matmul_ws"),
    ((4096, 4096, 4096), "tma-only", "matmul_tma"),  # e.g. fp32 inputs on an H100
    ((4096, 4096, 4096), "ampere", "matmul"),
    ((512, 512, 16384), "ampere", "matmul_splitk"),  # split-K reads through pointers: any GPU
    ((0, 5, 7), "hopper", "matmul_splitk"),  # no tiles: split-K hands an empty problem to matmul
])
def test_the_rule(shape, gpu, expected):
    name, why = default_launcher(*shape, num_sms=H100_SMS, tma=gpu != "ampere", wgmma=gpu == "hopper")
    assert name == expected and name in DISPATCH_LAUNCHERS and why


def test_the_half_wave_line():
    """The split rule's line: 66 tiles of 128x256 fill exactly half of 132 SMs, so split-K (which
    then cuts K in two, ``splitk_default_splits``); 67: data-parallel.  With wgmma the tiles are
    ``matmul_ws``'s pick and matmul_ws splits itself: 66 tiles of 64 x 128 in 2 pieces, 67 whole."""
    assert default_launcher(128 * 33, 256 * 2, 4096, num_sms=H100_SMS, tma=True, wgmma=False)[0] == "matmul_splitk"
    assert splitk_default_splits(66, 64, H100_SMS) == 2 and splitk_default_splits(67, 64, H100_SMS) == 1
    assert default_launcher(128 * 67, 256, 4096, num_sms=H100_SMS, tma=True, wgmma=False)[0] == "matmul_tma"
    for n_tiles, pieces in ((66, "in 2 pieces"), (68, "the warp-specialized Hopper kernel")):  # 2 rows of tiles
        assert ws_default_tile(128, 64 * n_tiles, num_sms=H100_SMS) == "pingpong_64x128"
        name, why = default_launcher(128, 64 * n_tiles, 4096, num_sms=H100_SMS, tma=True, wgmma=True)
        assert name == "matmul_ws" and pieces in why


@pytest.mark.parametrize("M, N, K, expected", [
    (16, 4096, 4096, "matmul_splitk"),  # a decode: 16 rows stream the weight; split units would only add a launch
    (64, 2048, 8192, "matmul_splitk"),
    (4096, 64, 8192, "matmul_splitk"),  # the same for few columns
    (128, 1024, 16384, "matmul_ws"),  # 16 tiles of 64 x 128, 8 pieces each
    (512, 512, 256, "matmul_splitk"),  # 4 K blocks: too short for pieces of 8, matmul_splitk tries smaller tiles
    (0, 4096, 4096, "matmul_splitk"),  # no tiles: split-K hands the empty product to matmul
])
def test_split_units_where_they_pay(M, N, K, expected):
    """On Hopper the few-tile problems go to matmul_ws's split units only where tiles.ws_default_splits
    cuts K (M and N >= 128, K long enough); the others stay with matmul_splitk."""
    assert default_launcher(M, N, K, num_sms=H100_SMS, tma=True, wgmma=True)[0] == expected
    tile = ws_default_tile(M, N, num_sms=H100_SMS)
    assert (ws_default_splits(M, N, K, tile, num_sms=H100_SMS) > 1) == (expected == "matmul_ws")


@pytest.mark.parametrize("k_tiles, asked, pieces", [(130, 16, 15), (256, 4, 4), (17, 7, 6), (5, 8, 5), (9, 1, 1),
                                                    (0, 4, 1)])
def test_no_piece_lies_wholly_past_k(k_tiles, asked, pieces):
    assert whole_pieces(k_tiles, asked) == pieces
    if k_tiles:
        per = -(-k_tiles // pieces)
        assert (pieces - 1) * per < k_tiles <= pieces * per  # the last piece holds at least one real K block


def test_the_ws_split_counts_k_in_matmul_ws_blocks():
    """tiles.WS_BLOCK_K (numpy-only, for the rule) is every fp16/bf16 matmul_ws tile's BLOCK_K."""
    ws = pytest.importorskip("gemm_kernels.kernels.matmul_ws")
    from gemm_kernels.models.tiles import WS_BLOCK_K
    assert {ws.CONFIGS[name]["BLOCK_K"] for name in WS_TILES} == {WS_BLOCK_K}


@pytest.mark.parametrize("M, N, expected", [
    (4096, 4096, "cooperative"), (8192, 8192, "cooperative"), (3001, 28672, "cooperative"),
    (257, 4096, "pingpong_64x256"),  # 5 rows of 64 (320) against 3 of 128 (384), and one wave either way
    (1000, 5120, "pingpong_64x256"),  # 320 tiles in 3 waves against 160 in 2 (the 2nd barely used)
    (129, 3072, "pingpong_64x128"),  # 72 tiles: 128 x 256 would leave 120 of 132 SMs idle
    (1, 1, "pingpong_64x128"),  # one tile whichever: the smallest does the least
    (0, 7, "cooperative"),  # no tiles, a tie: the big tile
])
def test_matmul_ws_tile_rule(M, N, expected):
    assert ws_default_tile(M, N, num_sms=H100_SMS) == expected


def test_matmul_ws_tile_rule_is_the_least_cost():
    """The pick is the least busiest-SM work over every tile, for any shape and SM count."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        M, N, sms = (int(x) for x in torch.randint(1, 20000, (3,), generator=gen))
        pick = ws_default_tile(M, N, num_sms=sms)
        costs = {t: ws_tile_cost(M, N, t, sms) for t in WS_TILES}
        assert costs[pick] == min(costs.values())
        rows, cols, rate = WS_TILES[pick]
        busiest = max(np.bincount(np.arange(-(-M // rows) * -(-N // cols)) % sms))  # tiles dealt round-robin
        assert costs[pick] == busiest * rows * cols / rate
    with pytest.raises(TypeError, match="num_sms"):
        ws_default_tile(4, 4, num_sms=1.5)


def test_the_rule_refuses_bad_sizes():
    with pytest.raises((TypeError, ValueError), match="M"):
        default_launcher(2.5, 4, 4, num_sms=4, tma=False, wgmma=False)
    for wgmma in (False, True):
        with pytest.raises(ValueError, match="num_sms"):
            default_launcher(5, 7, 5, num_sms=0, tma=True, wgmma=wgmma)
    with pytest.raises(ValueError, match="M, N >= 0"):
        ws_default_tile(-1, 7, num_sms=4)


def test_pick_for_tensors(monkeypatch):
    a, b = random_matrix(64, 96), random_matrix(96, 48)
    assert pick_launcher(a, b)[0] == "matmul_splitk"
    monkeypatch.setattr(runtime, "num_sms", lambda: 1)  # every problem fills "the GPU"
    assert pick_launcher(a, b)[0] == ("matmul_tma" if runtime.supports_tma() else "matmul")
    assert pick_launcher(random_matrix(64, 45), random_matrix(45, 48))[0] == "matmul"  # 90-byte rows: no TMA
    assert pick_launcher([[1.0]], b)[0] == "matmul"  # matmul's checks will name it
    monkeypatch.setattr(runtime, "supports_tma", lambda: False)
    assert pick_launcher(a, b)[0] == "matmul"
    monkeypatch.setattr(runtime, "num_sms", lambda: 4)  # few tiles again: split-K, unless gradients are needed
    assert pick_launcher(a, b)[0] == "matmul_splitk"
    assert pick_launcher(a.requires_grad_(), b)[0] == "matmul"


def test_a_call_that_needs_gradients_picks_a_differentiable_launcher(monkeypatch):
    a, b = random_matrix(64, 96).requires_grad_(), random_matrix(96, 48)
    assert pick_launcher(a, b)[0] == ("matmul_tma" if runtime.supports_tma() else "matmul")
    with torch.no_grad():
        assert pick_launcher(a, b)[0] == "matmul_splitk"


def _forced(monkeypatch, name):
    """Make pick_launcher name ``name`` (the others are reached by their own rule above), with no
    pick kept from an earlier test."""
    monkeypatch.setattr(dispatch, "pick_launcher", lambda a, b, bias=None: (name, "forced"))
    monkeypatch.setattr(dispatch, "_PICKS", launches.LaunchCache())


PICKABLE = ["matmul_splitk", "matmul_tma", "matmul"]  # matmul_ws: sm_90 only (the GPU tests)


@pytest.mark.parametrize("name", PICKABLE)
@pytest.mark.parametrize("shape", [(1, 1, 1), (37, 61, 45), (40, 48, 304), (70, 40, 999)],
                         ids=lambda s: "M{}-N{}-K{}".format(*s))
# seeded: unseeded, 2 in 300 draws of the 1x1x1 case put its lone output in GELU's tail (x near -4), where
# gelu_erf's absolute bound (3e-7 * |x|) is about 0.5% of the output, over fp16's relative tolerance
@pytest.mark.usefixtures("seed")
def test_every_pick_is_correct(monkeypatch, name, shape):
    if name == "matmul_tma" and not runtime.supports_tma():  # e.g. GEMM_KERNELS_ARCH=sm_86: it raises, as it should
        pytest.skip("matmul_tma needs TMA, and without it pick_launcher never names it (test_the_rule)")
    _forced(monkeypatch, name)
    M, N, K = shape
    a, b = random_matrix(M, K), random_matrix(K, N)
    if name == "matmul_tma":  # TMA needs 16-byte aligned rows
        a, b = gk.kernels.tma.tma_aligned(a), gk.kernels.tma.tma_aligned(b)
    bias = random_matrix(1, N)[0]
    out = matmul_auto(a, b, activation="gelu", bias=bias)
    assert_close(out, matmul_ref(a, b, out_dtype=torch.float64, activation="gelu", bias=bias))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("layout", [*STRIDED_LAYOUTS, "b_negated", "b_expanded"])
def test_views_and_dtypes_by_the_rule(dtype, layout):
    M, N, K = 48, 72, 336
    if layout in STRIDED_LAYOUTS:
        a, b = strided_operands(M, N, K, dtype, layout)
    else:  # torch's lazy negation, and a stride-0 expanded view
        a = random_matrix(M, K, dtype)
        b = random_matrix(K, N, dtype)._neg_view() if layout == "b_negated" else random_matrix(K, 1, dtype).expand(K, N)
    assert_close(matmul_auto(a, b), matmul_ref(a, b, out_dtype=torch.float64), dtype)


def test_nan_stays_in_its_row():
    a, b = random_matrix(64, 320), random_matrix(320, 48)
    a[5, 100] = float("nan")
    out = matmul_auto(a, b)
    assert torch.isnan(out[5]).all() and not torch.isnan(out[torch.arange(64) != 5]).any()


def test_gradients_twice_against_float64():
    gen = torch.Generator().manual_seed(0)
    a64, b64 = torch.randn(40, 48, generator=gen, dtype=torch.float64), torch.randn(48, 32, generator=gen, dtype=torch.float64)
    a = a64.to(DEVICE, torch.float32).requires_grad_()
    b = b64.to(DEVICE, torch.float32).requires_grad_()
    a64.requires_grad_(), b64.requires_grad_()
    (ga,) = torch.autograd.grad(matmul_auto(a, b, activation="gelu").square().sum(), a, create_graph=True)
    (ga64,) = torch.autograd.grad(matmul_ref(a64, b64, out_dtype=torch.float64, activation="gelu").square().sum(),
                                  a64, create_graph=True)
    assert_close(ga, ga64, torch.float32, what="d/da")
    (gb,) = torch.autograd.grad(ga.sum(), b)  # second order: through the backward's own products
    (gb64,) = torch.autograd.grad(ga64.sum(), b64)
    assert_close(gb, gb64, torch.float32, what="d/db of d/da")


def test_a_sparse_input_gets_matmuls_named_error():
    a = random_matrix(8, 64)
    with pytest.raises(TypeError, match="to_dense"):
        matmul_auto(a.to_sparse_csr(), random_matrix(64, 8))


def test_torch_compile_traces_it_without_a_graph_break():
    a, b = random_matrix(32, 48, torch.float32), random_matrix(48, 16, torch.float32)
    compiled = torch.compile(lambda x, y: matmul_auto(x, y, activation="relu"), fullgraph=True, backend="aot_eager")
    assert_close(compiled(a, b), matmul_ref(a, b, out_dtype=torch.float64, activation="relu"), torch.float32)


def test_bad_inputs_get_the_launchers_errors():
    a = random_matrix(8, 64)
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul_auto(a, random_matrix(63, 8))
    with pytest.raises(TypeError, match="dtype"):
        matmul_auto(a, random_matrix(64, 8, torch.float32))
    with pytest.raises(TypeError):
        matmul_auto([[1.0]], random_matrix(64, 8))
    with pytest.raises(ValueError, match="activation"):
        matmul_auto(a, random_matrix(64, 8), activation="tanh")


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(512, 512, 16384), (257, 4096, 14336), (1000, 1024, 8192), (2048, 2048, 2048),
                                   (3001, 5120, 4096), (1, 4096, 4096), (96, 7000, 4097)])
@pytest.mark.parametrize("b_layout", ["row-major", "W.t()"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_gpu_every_pick(shape, b_layout, dtype):
    M, N, K = shape
    a = torch.randn(M, K, device=DEVICE, dtype=dtype)
    b = torch.randn(K, N, device=DEVICE, dtype=dtype)
    if b_layout == "W.t()":
        b = b.t().contiguous().t()
    bias = torch.randn(N, device=DEVICE, dtype=dtype)
    name, _ = pick_launcher(a, b, bias)
    if not runtime.supports_tma():
        assert name in ("matmul_splitk", "matmul")
    ref = matmul_ref(a, b, out_dtype=torch.float64, activation="relu", bias=bias)
    for _ in range(3):  # the first call picks and checks, the others take the kept pick and launch
        assert_close(matmul_auto(a, b, activation="relu", bias=bias), ref, dtype, what=f"{name} {shape}")
