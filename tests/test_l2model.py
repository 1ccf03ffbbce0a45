"""L2 reuse model: the seed notes' 90/54/9 example, agreement with a brute-force LRU
simulation of the same lockstep trace, and monotonicity in the cache size."""

import numpy as np
import pytest

from gemm_kernels.models.l2model import H100_L2_BYTES, H100_NUM_SMS, l2_to_sm_bytes, l2_traffic, reuse_profile
from gemm_kernels.models.schedule import grouped_gemm_schedule, tile_schedule

BLOCK = 64


def seed_example(order):
    # 9x9 blocks of C, K loop over 9 blocks, 9 programs at once, groups of 3 rows
    s = tile_schedule(9 * BLOCK, 9 * BLOCK, BLOCK, BLOCK, order, 3, programs_in_flight=9)
    return l2_traffic(s, block_k=BLOCK, K=9 * BLOCK)


@pytest.mark.parametrize("order,reads", [("row_major", 90), ("grouped", 54)])
def test_seed_notes_first_wave(order, reads):
    first = seed_example(order).upto(0)
    assert first["misses"] == reads
    assert first["c_writes"] == 9
    assert first["loads"] == 9 * 2 * 9  # every program issues 9 A and 9 B block loads
    assert first["hits"] == first["loads"] - reads


def test_seed_example_holds_for_any_cache_size():
    # the first wave starts from a cold cache, so its reads do not depend on the L2 size
    for order, reads in [("row_major", 90), ("grouped", 54)]:
        s = tile_schedule(9 * BLOCK, 9 * BLOCK, BLOCK, BLOCK, order, 3, programs_in_flight=9)
        profile = reuse_profile(s, BLOCK, K=9 * BLOCK)
        for blocks in (0, 1, 10, 100, None):
            l2 = None if blocks is None else blocks * BLOCK * BLOCK * 2
            assert profile.traffic(l2).upto(0)["misses"] == reads


def brute_force_lru(schedule, block_k, K, l2_bytes, element_bytes=2):
    """The model's trace, simulated load by load: in each wave, for k in 0..k_blocks-1, every
    program loads block k of its A row-block and of its B column-block.  Blocks loaded in
    the same step share one LRU age; a block hits iff the bytes of every block at least as
    recent as it fit in l2_bytes."""
    k_blocks = -(-K // block_k)
    stamp, size = {}, {}
    misses = np.zeros(schedule.num_waves, dtype=np.int64)
    t = 0
    for w in range(schedule.num_waves):
        rows = schedule.table[schedule.wave_rows(w)]
        for k in range(k_blocks):
            step = set()
            for _, _, _, g, m, n in rows:
                M, N, _ = schedule.problem_shapes[g]
                rm = min(schedule.block_m, M - m * schedule.block_m)
                cn = min(schedule.block_n, N - n * schedule.block_n)
                for key, nbytes in (((g, "A", m, k), rm), ((g, "B", n, k), cn)):
                    step.add(key)
                    size[key] = nbytes * block_k * element_bytes
            for key in step:
                if key in stamp:
                    recent = sum(size[y] for y, s in stamp.items() if s >= stamp[key])
                    if l2_bytes is not None and recent > l2_bytes:
                        misses[w] += 1
                else:
                    misses[w] += 1
            for key in step:
                stamp[key] = t
            t += 1
    return misses


@pytest.mark.parametrize("case", range(12))
def test_model_equals_brute_force_simulation(case):
    rng = np.random.default_rng(case)
    order = ["row_major", "grouped", "persistent"][case % 3]
    bm, bn, bk = 16, int(rng.choice([16, 32])), 16
    M, N = int(rng.integers(1, 130)), int(rng.integers(1, 130))
    K = bk * int(rng.integers(1, 5))
    s = tile_schedule(M, N, bm, bn, order, int(rng.integers(1, 4)), programs_in_flight=int(rng.integers(1, 9)))
    profile = reuse_profile(s, bk, K=K)
    for l2 in [None, *rng.integers(0, 40 * bm * bk * 2, size=4)]:
        l2 = None if l2 is None else int(l2)
        np.testing.assert_array_equal(profile.traffic(l2).misses, brute_force_lru(s, bk, K, l2), err_msg=f"l2={l2}")


def test_multi_problem_model_equals_brute_force():
    s = grouped_gemm_schedule([(40, 70), (0, 30), (33, 17), (64, 64)], 16, 16, num_programs=5, group_size_m=2)
    profile = reuse_profile(s, 16, K=48)
    for l2 in (None, 0, 3000, 9000, 20000):
        np.testing.assert_array_equal(profile.traffic(l2).misses, brute_force_lru(s, 16, 48, l2))


def test_more_cache_never_means_more_misses():
    rng = np.random.default_rng(7)
    for _ in range(60):
        order = str(rng.choice(["row_major", "grouped", "persistent"]))
        M, N = (int(x) for x in rng.integers(1, 3000, size=2))
        bm, bn = (int(x) for x in rng.choice([32, 64, 128], size=2))
        s = tile_schedule(M, N, bm, bn, order, int(rng.integers(1, 10)), programs_in_flight=int(rng.integers(1, 200)))
        profile = reuse_profile(s, 32, K=int(rng.integers(1, 2000)))
        sizes = np.sort(rng.integers(0, 2**26, size=8))
        misses = [profile.traffic(int(c)).misses for c in sizes]
        for smaller, larger in zip(misses, misses[1:]):
            assert (larger <= smaller).all()  # per wave, not only in total
        t = profile.traffic(int(sizes[-1])).totals()
        assert t["compulsory_misses"] <= t["misses"] <= t["loads"]
        assert profile.traffic(None).totals()["misses"] == t["compulsory_misses"]


def test_mixed_k_problems_stay_monotone_and_bounded():
    s = grouped_gemm_schedule([(256, 256, 64), (128, 512, 1024), (300, 100, 200)], 64, 64, num_programs=6)
    profile = reuse_profile(s, 32)
    prev = None
    for c in range(0, 2_000_000, 50_000):
        t = profile.traffic(c).totals()
        assert t["compulsory_misses"] <= t["misses"] <= t["loads"]
        assert prev is None or t["misses"] <= prev
        prev = t["misses"]


def test_h100_sized_problem_gives_sensible_numbers():
    # 8192^2 fp16, 128x128 tiles, BLOCK_K 64, 132 programs in flight, 50 MiB L2
    results = {}
    for order in ("row_major", "grouped"):
        s = tile_schedule(8192, 8192, 128, 128, order, 8, programs_in_flight=H100_NUM_SMS)
        results[order] = l2_traffic(s, block_k=64, K=8192, l2_bytes=H100_L2_BYTES).totals()
    rm, gr = results["row_major"], results["grouped"]
    assert rm["loads"] == gr["loads"] == 4096 * 2 * 128
    assert rm["c_writes"] == gr["c_writes"] == 4096
    compulsory = 2 * 8192 * 8192 * 2  # A and B once each: 256 MiB
    assert rm["compulsory_misses"] == 128 * 128
    assert compulsory <= gr["dram_read_bytes"] < rm["dram_read_bytes"]
    # row-major streams all of B (128 MiB) past a 50 MiB L2 in every one of its 32 waves
    assert rm["dram_read_bytes"] > 3 * 2**30
    assert gr["dram_read_bytes"] < rm["dram_read_bytes"] / 2


def test_bad_arguments():
    s = tile_schedule(64, 64, 16, 16, programs_in_flight=4)
    with pytest.raises(ValueError, match="pass K="):
        l2_traffic(s, block_k=16)
    with pytest.raises(ValueError, match="block_k"):
        l2_traffic(s, block_k=0, K=64)
    with pytest.raises(ValueError, match="l2_bytes"):
        l2_traffic(s, block_k=16, K=64, l2_bytes=-1)


# ------------------------------------------------------------------------------ effective capacity


def test_effective_l2_bytes_full_or_half():
    from gemm_kernels.models.l2model import PARTITION_DUPLICATED_FRACTION, effective_l2_bytes

    assert effective_l2_bytes() == H100_L2_BYTES
    assert effective_l2_bytes(duplicated=True) == H100_L2_BYTES * PARTITION_DUPLICATED_FRACTION == 25 * 2**20
    assert effective_l2_bytes(1000, duplicated=True) == 500
    for bad in (-1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="l2_bytes"):
            effective_l2_bytes(bad)


def test_effective_fraction_is_the_same_as_a_smaller_cache():
    from gemm_kernels.models.l2model import H100_PROGRAMS_IN_FLIGHT

    # 4096^3: A and B (64 MiB) fit in 50 MiB of L2 across waves only with all of it
    s = tile_schedule(4096, 4096, 128, 128, "row_major", programs_in_flight=H100_PROGRAMS_IN_FLIGHT)
    half = l2_traffic(s, block_k=64, K=4096, l2_bytes=H100_L2_BYTES, effective_fraction=0.5)
    smaller = l2_traffic(s, block_k=64, K=4096, l2_bytes=H100_L2_BYTES // 2)
    full = l2_traffic(s, block_k=64, K=4096, l2_bytes=H100_L2_BYTES)
    assert half.totals() == smaller.totals()
    compulsory = 2 * 4096 * 4096 * 2
    assert full.totals()["dram_read_bytes"] == compulsory  # every block fetched once
    assert half.totals()["dram_read_bytes"] > 2 * compulsory  # half the cache: re-reads across waves
    unlimited = l2_traffic(s, block_k=64, K=4096, effective_fraction=0.5)  # no capacity: nothing to scale
    assert unlimited.totals() == l2_traffic(s, block_k=64, K=4096).totals()
    for bad in (0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match="effective_fraction"):
            l2_traffic(s, block_k=64, K=4096, l2_bytes=H100_L2_BYTES, effective_fraction=bad)


def test_h100_programs_in_flight_is_two_per_sm_as_in_the_ncu_table():
    import csv
    from pathlib import Path

    from gemm_kernels.models.l2model import H100_PROGRAMS_IN_FLIGHT

    assert H100_PROGRAMS_IN_FLIGHT == 2 * H100_NUM_SMS
    table = Path(__file__).resolve().parents[1] / "images" / "bench" / "l2.csv"
    with table.open(newline="") as f:
        assert {int(r["programs_in_flight"]) for r in csv.DictReader(f)} == {H100_PROGRAMS_IN_FLIGHT}


def test_group_size_rule_of_notebook_03():
    """03's rule: a wave of P programs in groups of G rows needs about G + P/G blocks per step of K,
    fewest near G = sqrt(P) (16 for 264 programs at 8192³ in 128 × 128 tiles); a group smaller than a
    wave (G = 2, 4: G × 64 tiles < 264) covers every column of B, so it is no better than row-major."""
    from gemm_kernels.models.l2model import H100_PROGRAMS_IN_FLIGHT, effective_l2_bytes

    P = H100_PROGRAMS_IN_FLIGHT
    blocks, dram = {}, {}
    for g in (1, 2, 4, 8, 16, 32, 64):
        s = tile_schedule(8192, 8192, 128, 128, "row_major" if g == 1 else "grouped", group_size_m=g,
                          programs_in_flight=P)
        a_rows, b_cols = s.wave_footprint(0)
        blocks[g] = len(a_rows) + len(b_cols)
        dram[g] = l2_traffic(s, block_k=64, K=8192, l2_bytes=effective_l2_bytes(H100_L2_BYTES)).totals()["dram_read_bytes"]
        if g * 64 > P:  # a group larger than a wave: the rule's count, give or take a partial column
            assert abs(blocks[g] - (g + P / g)) <= 1, (g, blocks[g])
    assert P == 264 and round(P ** 0.5) == 16
    assert min(blocks, key=blocks.get) == 16 == min(dram, key=dram.get)
    assert (blocks[16], blocks[8], blocks[32]) == (33, 41, 41)  # the reveal's counts
    assert round(dram[16] / 2**30, 1) == 1.1 and round(dram[1] / 2**30, 1) == 2.2
    assert min(blocks[2], blocks[4]) >= blocks[1] and min(dram[2], dram[4]) >= dram[1]


def test_l2_to_sm_bytes_counts_every_tiles_blocks_and_a_multicast_shares_b():
    """4096^3 fp16 in 128 x 256 tiles: 512 tiles, each reading 4096 x (128 + 256) elements; a pair
    sharing B reads half of B: a third less in all.  Brute force over the tiles agrees."""
    full = l2_to_sm_bytes(4096, 4096, 4096, 128, 256)
    shared = l2_to_sm_bytes(4096, 4096, 4096, 128, 256, cluster_m=2)
    assert full == 512 * 4096 * 384 * 2 and shared == 512 * 4096 * 256 * 2 and shared * 3 == full * 2
    for M, N, K, tm, tn in [(1000, 257, 64, 64, 128), (1, 1, 1, 128, 256), (300, 700, 33, 128, 128), (257, 256, 64, 128, 256)]:
        for cluster in (1, 2, 3):  # brute force: each tile reads its A block; B once per (cluster, column)
            a_reads = sum(K * tm for m in range(0, M, tm) for n in range(0, N, tn))
            b_reads = len({(m // (tm * cluster), n) for m in range(0, M, tm) for n in range(0, N, tn)}) * K * tn
            assert l2_to_sm_bytes(M, N, K, tm, tn, cluster_m=cluster, element_bytes=1) == a_reads + b_reads
    assert l2_to_sm_bytes(0, 5, 7, 128, 256) == 0
    with pytest.raises(ValueError, match="cluster_m"):
        l2_to_sm_bytes(64, 64, 64, 64, 64, cluster_m=0)
    with pytest.raises(TypeError, match="tile_n"):
        l2_to_sm_bytes(64, 64, 64, 64, 64.0)
