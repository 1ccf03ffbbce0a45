"""The pid -> tile mapping exists once in Triton and once in numpy; these tests prove they agree."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from gemm_kernels import DEVICE, trace_program_tiles
from gemm_kernels.kernels.tiles import tile_coords
from gemm_kernels.models.tiles import launch_order_grid, persistent_tile_ids, program_tiles, tile_coords_np, tile_grid


@triton.jit
def _record_tiles(out_ptr, num_pid_m, num_pid_n, GROUPED: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = tile_coords(pid, num_pid_m, num_pid_n, GROUPED, GROUP_SIZE_M)
    tl.store(out_ptr + 2 * pid, pid_m)
    tl.store(out_ptr + 2 * pid + 1, pid_n)


GRIDS = [(1, 1), (1, 7), (7, 1), (3, 3), (9, 9), (5, 8), (13, 4), (4, 13), (16, 16)]


@pytest.mark.parametrize("order,group", [("row_major", 1), ("grouped", 1), ("grouped", 2), ("grouped", 3), ("grouped", 8)])
@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: f"{g[0]}x{g[1]}")
def test_triton_helper_equals_numpy_mirror(grid, order, group):
    num_pid_m, num_pid_n = grid
    n = num_pid_m * num_pid_n
    out = torch.full((n, 2), -1, dtype=torch.int32, device=DEVICE)
    _record_tiles[(n,)](out, num_pid_m, num_pid_n, GROUPED=order == "grouped", GROUP_SIZE_M=group)
    pm, pn = tile_coords_np(np.arange(n), num_pid_m, num_pid_n, order, group)
    np.testing.assert_array_equal(out.cpu().numpy(), np.stack([pm, pn], 1))


@pytest.mark.parametrize("M,N,order,group", [
    (100, 70, "grouped", 2), (33, 129, "row_major", 8), (97, 31, "grouped", 3), (1, 1, "grouped", 8), (64, 96, "grouped", 8),
])
def test_real_matmul_kernel_computes_the_mirrored_tiles(M, N, order, group):
    """The trace comes from _matmul_kernel itself, the kernel matmul() launches."""
    traced = trace_program_tiles(M, N, order=order, group_size_m=group).numpy()
    np.testing.assert_array_equal(traced, program_tiles(M, N, 32, 32, order, group))


@pytest.mark.parametrize("order", ["row_major", "grouped"])
def test_every_tile_exactly_once(order):
    rng = np.random.default_rng(0)
    for _ in range(200):
        M, N = rng.integers(1, 3000, size=2)
        bm, bn = rng.choice([16, 32, 64, 128], size=2)
        group = int(rng.integers(1, 12))
        grid = launch_order_grid(int(M), int(N), int(bm), int(bn), order, group)
        assert sorted(grid.ravel()) == list(range(grid.size))


def test_seed_notes_grouped_example():
    # 9x9 tiles, groups of 3 rows: the first 9 programs cover a 3x3 square of C
    tiles = program_tiles(9, 9, 1, 1, "grouped", 3)[:9]
    assert set(map(tuple, tiles)) == {(m, n) for m in range(3) for n in range(3)}
    assert [tuple(t) for t in program_tiles(9, 9, 1, 1, "row_major")[:9]] == [(0, n) for n in range(9)]


def test_persistent_walk_covers_tiles_once():
    for tiles, progs in [(1, 4), (10, 4), (132, 132), (1000, 132)]:
        walked = np.concatenate(persistent_tile_ids(tiles, progs))
        assert sorted(walked) == list(range(tiles))


def test_mirror_rejects_bad_arguments():
    with pytest.raises(ValueError, match="order"):
        tile_coords_np(0, 2, 2, "diagonal")
    with pytest.raises(ValueError, match="group_size_m"):
        tile_coords_np(0, 2, 2, "grouped", 0)
    with pytest.raises(ValueError, match=">= 1"):
        tile_grid(0, 5, 16, 16)


def test_fp8_split_rule_cuts_few_long_tiles_only():
    """tiles.fp8_ws_splits: few tiles with a long K split, into pieces of at least
    FP8_MIN_PIECE_K_BLOCKS K blocks and never one wholly past K; a GPU every SM has a tile of, a
    short K, a side under 128, or partials that cost more than the pieces save (PERF_NOTES 58's
    sweep: the fp8 suite's shapes) do not; the count is the one with the least busiest-SM cost."""
    from gemm_kernels.models import tiles

    split = lambda M, N, K, tile="128x256", sms=132: tiles.fp8_ws_splits(M, N, K, tile, num_sms=sms)  # noqa: E731
    assert split(512, 512, 16384) == 8  # 8 tiles of 128 K blocks
    assert split(256, 4096, 14336) == 4 and split(384, 4096, 14336) == 2  # Llama-3-8B's down at 256, 384 tokens
    assert split(1000, 2112, 7168) == 1  # DeepSeek-V3's QKV at 1000 tokens: 3 pieces measured slower
    assert split(1024, 1024, 1024, "128x128") == 1 and split(1000, 4096, 14336) == 1  # also measured
    assert split(4096, 2112, 7168, "128x128") == 1  # 544 tiles: every SM has some
    assert split(1000, 7168, 16384) == 1  # 224 tiles
    assert split(8192, 8192, 8192) == 1 and split(4096, 4096, 4096) == 1
    assert split(512, 512, 7 * 128) == 1  # 7 K blocks: no two pieces of 4
    assert split(100, 2112, 16384) == 1 and split(512, 100, 16384) == 1  # a side under 128
    assert split(1000, 2112, 0) == 1 and split(128, 256, 256) == 1
    splits_seen = set()
    for M, N, K, sms in [(512, 512, 16384, 132), (512, 512, 16384 + 1, 132), (256, 4096, 14336, 114),
                         (300, 520, 20000, 78), (1000, 2112, 7168, 114), (1000, 2112, 7168, 78), (300, 520, 1792, 132),
                         (200, 300, 1792, 132), (2000, 1000, 30000, 132), (1000, 2112, 7168 + 1, 132)]:
        s = split(M, N, K, sms=sms)
        k_tiles = -(-K // 128)
        piece = -(-k_tiles // s)
        assert s == 1 or (piece >= tiles.FP8_MIN_PIECE_K_BLOCKS and (s - 1) * piece < k_tiles), (M, N, K, sms, s)
        assert s == 1 or -(-M // 128) * -(-N // 256) < sms
        splits_seen.add(s)
    assert len(splits_seen) > 2  # the loop checked split counts, not only 1
    assert split(512, 512, 16384, sms=8) == 1  # 8 tiles on 8 SMs: one wave already
    # a 128 x 128 tile's K blocks weigh its share of a 128 x 256 one's (the fit's unit)
    assert split(512, 512, 16384, "128x128") == 8 and split(256, 4096, 14336, "128x128") == 2
    assert split(256, 1536, 7168, "128x128") == 5 and split(384, 4096, 14336, "128x128") == 1
    # each constant decides somewhere: the unit cost per wave, the least gain
    assert split(256, 2048, 4096) == 8 and split(256, 4096, 4096, "128x128") == 1
    assert split(768, 2048, 32768, "128x128") == 1  # 4 pieces would save under FP8_SPLIT_MIN_GAIN
    # numpy's fixed-width ints are taken as Python ints (uint64's negation would wrap in cdiv)
    assert tiles.fp8_ws_splits(*map(np.uint64, (512, 512, 16384)), "128x256", num_sms=np.uint64(132)) == 8
    assert type(tiles.fp8_ws_splits(np.int32(512), 512, 16384, "128x256", num_sms=132)) is int
    for bad in [dict(tile="bogus"), dict(tile="cooperative"), dict(num_sms=0), dict(M=-5), dict(K=-1)]:
        kwargs = dict(M=512, N=512, K=16384, tile="128x256", num_sms=132) | bad
        with pytest.raises(ValueError, match="tile must be one of|must be >= 0"):
            tiles.fp8_ws_splits(kwargs.pop("M"), kwargs.pop("N"), kwargs.pop("K"), kwargs.pop("tile"), **kwargs)
    with pytest.raises(TypeError):
        tiles.fp8_ws_splits(1000.0, 2112, 7168, "128x256", num_sms=132)
