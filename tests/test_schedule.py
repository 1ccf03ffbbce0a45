"""Schedule model: every tile runs exactly once, waves are what the kernels launch together."""

import numpy as np
import pytest

from gemm_kernels.models import tiles
from gemm_kernels.models.schedule import SCHEDULE_ORDERS, grouped_gemm_schedule, tile_schedule


def _random_cases(seed, n):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        M, N = (int(x) for x in rng.integers(1, 2000, size=2))
        bm, bn = (int(x) for x in rng.choice([16, 32, 64, 128, 100], size=2))
        yield M, N, bm, bn, int(rng.integers(1, 12)), int(rng.integers(1, 300))


@pytest.mark.parametrize("order", SCHEDULE_ORDERS)
def test_every_tile_exactly_once_random_shapes(order):
    for M, N, bm, bn, group, in_flight in _random_cases(1, 150):
        s = tile_schedule(M, N, bm, bn, order, group, programs_in_flight=in_flight)
        num_pid_m, num_pid_n = tiles.tile_grid(M, N, bm, bn)
        assert s.num_tiles == num_pid_m * num_pid_n
        launched = s.pid_m * num_pid_n + s.pid_n
        assert np.array_equal(np.sort(launched), np.arange(s.num_tiles)), (M, N, bm, bn, group)
        # every wave is full except maybe the last, and a program never runs two tiles at once
        sizes = np.diff(s.wave_starts)
        assert (sizes[:-1] == in_flight).all() and 1 <= sizes[-1] <= in_flight
        for w in (0, s.num_waves - 1):
            rows = s.wave_rows(w)
            assert len(np.unique(s.program[rows])) == rows.stop - rows.start
        assert sorted(s.launch_grid().ravel()) == list(range(s.num_tiles))


@pytest.mark.parametrize("order", ["row_major", "grouped"])
def test_one_program_per_tile_uses_the_kernels_pid_mapping(order):
    s = tile_schedule(1000, 700, 64, 32, order, 3, programs_in_flight=7)
    np.testing.assert_array_equal(np.stack([s.pid_m, s.pid_n], 1), tiles.program_tiles(1000, 700, 64, 32, order, 3))
    np.testing.assert_array_equal(s.launch_grid(), tiles.launch_order_grid(1000, 700, 64, 32, order, 3))
    np.testing.assert_array_equal(s.wave, np.arange(s.num_tiles) // 7)
    np.testing.assert_array_equal(s.program, np.arange(s.num_tiles))


def test_persistent_waves_are_the_steps_of_tiles_persistent_schedule():
    s = tile_schedule(900, 1300, 128, 64, "persistent", 4, programs_in_flight=13)
    ref = tiles.persistent_schedule(900, 1300, 128, 64, 13, "grouped", 4)
    np.testing.assert_array_equal(s.table, ref)
    assert s.num_waves == tiles.cdiv(s.num_tiles, 13)
    # program p walks tiles p, p + 13, ... one per wave
    assert all(np.array_equal(s.table[s.program == p, 0], np.arange(p, s.num_tiles, 13)) for p in range(13))
    # same tiles per wave as grouped one-program-per-tile order with 13 programs in flight
    g = tile_schedule(900, 1300, 128, 64, "grouped", 4, programs_in_flight=13)
    np.testing.assert_array_equal(s.wave_grid(), g.wave_grid())


def test_multi_problem_schedule_covers_each_problem_once():
    rng = np.random.default_rng(2)
    for _ in range(40):
        shapes = [(int(m), int(n), 64) for m, n in rng.integers(0, 500, size=(int(rng.integers(1, 6)), 2))]
        shapes.append((65, 33, 16))  # at least one problem with tiles
        progs = int(rng.integers(1, 40))
        s = grouped_gemm_schedule(shapes, 32, 32, progs, "grouped", int(rng.integers(1, 5)))
        ref = tiles.multi_problem_schedule([x[:2] for x in shapes], 32, 32, progs, s.tile_order, s.group_size_m)
        np.testing.assert_array_equal(s.table, ref)
        for g, (M, N, _) in enumerate(shapes):
            grid = s.launch_grid(g)
            assert grid.shape == (tiles.cdiv(M, 32), tiles.cdiv(N, 32))
            assert (grid >= 0).all() and len(np.unique(grid)) == grid.size
        assert (np.diff(s.wave_starts)[:-1] == progs).all()


def test_seed_example_footprints():
    # 9x9 tiles, 9 programs in flight: row-major reads 1 row of A and 9 columns of B;
    # grouped (3 rows per group) reads 3 and 3
    rm = tile_schedule(9, 9, 1, 1, "row_major", programs_in_flight=9)
    gr = tile_schedule(9, 9, 1, 1, "grouped", 3, programs_in_flight=9)
    a, b = rm.wave_footprint(0)
    assert list(a) == [0] and list(b) == list(range(9))
    a, b = gr.wave_footprint(0)
    assert list(a) == [0, 1, 2] and list(b) == [0, 1, 2]
    assert gr.num_waves == 9
    np.testing.assert_array_equal(gr.group_grid()[:, 0], np.repeat(np.arange(3), 3))


def test_tail_group_and_tail_wave():
    # 10 tile rows, groups of 4: the last group has 2 rows; 7 programs in flight
    s = tile_schedule(10, 5, 1, 1, "grouped", 4, programs_in_flight=7)
    last_group = s.table[40:]
    assert set(last_group[:, 4]) == {8, 9}
    assert np.diff(s.wave_starts)[-1] == 50 - 7 * 7


def test_bad_arguments_raise_readable_errors():
    with pytest.raises(ValueError, match="order"):
        tile_schedule(64, 64, 16, 16, "diagonal", programs_in_flight=4)
    with pytest.raises(ValueError, match="block_m must be >= 1"):
        tile_schedule(64, 64, 0, 16, programs_in_flight=4)
    with pytest.raises(ValueError, match="programs_in_flight"):
        tile_schedule(64, 64, 16, 16, programs_in_flight=0)
    with pytest.raises(TypeError, match="M must be an int"):
        tile_schedule(64.0, 64, 16, 16, programs_in_flight=4)
    with pytest.raises(ValueError, match="no output tiles"):
        grouped_gemm_schedule([(0, 64, 64)], 16, 16, 4)
    with pytest.raises(ValueError, match="wave must be"):
        tile_schedule(64, 64, 16, 16, programs_in_flight=4).wave_rows(4)
