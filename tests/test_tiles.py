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
    """tiles.fp8_ws_splits on an H100's 132 SMs: DeepSeek-V3's QKV at 1000 tokens (72 tiles of 56 K
    blocks) splits; a GPU full of tiles, a short K, or a side under 128 does not; every piece holds
    a real K block; the count minimises the busiest SM's K blocks plus each unit's fixed cost."""
    from gemm_kernels.models import tiles

    sms = 132
    split = tiles.fp8_ws_splits(1000, 2112, 7168, "128x256", num_sms=sms)
    assert split > 1
    k_tiles = 7168 // 128
    assert (split - 1) * -(-k_tiles // split) < k_tiles  # no piece wholly past K
    assert tiles.fp8_ws_splits(8192, 8192, 8192, "128x256", num_sms=sms) == 1
    assert tiles.fp8_ws_splits(4096, 4096, 4096, "128x256", num_sms=sms) == 1
    assert tiles.fp8_ws_splits(100, 2112, 7168, "128x256", num_sms=sms) == 1  # M under 128
    assert tiles.fp8_ws_splits(1000, 2112, 128, "128x256", num_sms=sms) == 1  # one K block
    assert tiles.fp8_ws_splits(1000, 2112, 0, "128x256", num_sms=sms) == 1
    cost = lambda s: -(-72 * s // sms) * (-(-k_tiles // s) + tiles.FP8_SPLIT_UNIT_K_BLOCKS)  # noqa: E731
    assert cost(split) == min(cost(s) for s in range(1, tiles.FP8_MAX_SPLITS + 1))
    with pytest.raises(TypeError):
        tiles.fp8_ws_splits(1000.0, 2112, 7168, "128x256", num_sms=sms)
