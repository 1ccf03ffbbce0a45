"""Which output tile each program computes, in numpy: the mirror of ``kernels/tiles.py``.

A GEMM ``C[M, N] = A[M, K] @ B[K, N]`` is cut into ``BLOCK_M x BLOCK_N`` tiles of C,
``num_pid_m = cdiv(M, BLOCK_M)`` rows by ``num_pid_n = cdiv(N, BLOCK_N)`` columns.
Program (or, in a persistent kernel, *tile index*) ``pid`` is mapped to a tile
``(pid_m, pid_n)`` by one of two orders:

``row_major``  pid walks the tile grid row by row: consecutive programs share a row
               of A but each needs a different column of B.
``grouped``    pid walks *groups* of ``GROUP_SIZE_M`` tile rows column by column, so
               programs that run together reuse a few rows of A *and* a few columns
               of B from L2 (Triton's tutorial 03 "super-grouping").

The kernels call the ``@triton.jit`` helpers of ``gemm_kernels.kernels.tiles``; this module is
the same arithmetic in numpy, for drawings, widgets, the L2 model and tests
(``tests/test_tiles.py`` runs the Triton helpers and proves the two agree).  Plain numpy:
importable without Triton.
"""

from __future__ import annotations

import numpy as np

from ._ints import require_int

ORDERS = ("row_major", "grouped")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _check_ints(**values) -> tuple:
    """The values as Python ints, in order; TypeError unless every one is an int (numpy's too, whose
    fixed width would wrap in this module's arithmetic): sizes, blocks and counts are whole."""
    return tuple(require_int(value, name) for name, value in values.items())


def _check_order(order: str, group_size_m: int) -> None:
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    _check_ints(group_size_m=group_size_m)
    if group_size_m < 1:
        raise ValueError(f"group_size_m must be >= 1, got {group_size_m}")


def tile_coords_np(pid, num_pid_m: int, num_pid_n: int, order: str = "grouped", group_size_m: int = 8):
    """numpy mirror of :func:`tile_coords`; ``pid`` may be an int or an array."""
    _check_order(order, group_size_m)
    _check_ints(num_pid_m=num_pid_m, num_pid_n=num_pid_n)
    pid = np.asarray(pid)
    if pid.size and (not np.issubdtype(pid.dtype, np.integer) or pid.min() < 0 or pid.max() >= num_pid_m * num_pid_n):
        raise ValueError(f"pid must be integers in [0, {num_pid_m * num_pid_n}) for a {num_pid_m} x {num_pid_n} "
                         "grid of tiles")
    pid = pid.astype(np.int64)
    if order == "row_major":
        return pid // num_pid_n, pid % num_pid_n
    # a group taller than the grid is the same order, and keeps group_size_m * num_pid_n in int64
    group_size_m = min(group_size_m, max(num_pid_m, 1))
    num_pid_in_group = group_size_m * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * group_size_m
    rows_in_group = np.minimum(num_pid_m - first_pid_m, group_size_m)
    pid_in_group = pid % num_pid_in_group
    return first_pid_m + pid_in_group % rows_in_group, pid_in_group // rows_in_group


def tile_grid(M: int, N: int, block_m: int, block_n: int) -> tuple[int, int]:
    """(num_pid_m, num_pid_n): how many tiles of C along M and along N."""
    _check_ints(M=M, N=N, block_m=block_m, block_n=block_n)
    if min(M, N, block_m, block_n) < 1:
        raise ValueError(f"M, N, BLOCK_M, BLOCK_N must all be >= 1, got {M}, {N}, {block_m}, {block_n}")
    return cdiv(M, block_m), cdiv(N, block_n)


def program_tiles(M: int, N: int, block_m: int, block_n: int, order: str = "grouped", group_size_m: int = 8) -> np.ndarray:
    """``[num_programs, 2]`` array: row ``pid`` is the ``(pid_m, pid_n)`` program ``pid`` computes."""
    num_pid_m, num_pid_n = tile_grid(M, N, block_m, block_n)
    pid_m, pid_n = tile_coords_np(np.arange(num_pid_m * num_pid_n), num_pid_m, num_pid_n, order, group_size_m)
    return np.stack([pid_m, pid_n], axis=1)


def launch_order_grid(M: int, N: int, block_m: int, block_n: int, order: str = "grouped", group_size_m: int = 8) -> np.ndarray:
    """``[num_pid_m, num_pid_n]`` grid holding, for each C tile, the pid that computes it."""
    tiles = program_tiles(M, N, block_m, block_n, order, group_size_m)
    grid = np.full(tile_grid(M, N, block_m, block_n), -1, dtype=np.int64)
    grid[tiles[:, 0], tiles[:, 1]] = np.arange(len(tiles))
    return grid


def persistent_tile_ids(num_tiles: int, num_programs: int) -> list[np.ndarray]:
    """Tile indices each program of a persistent kernel walks: ``range(pid, num_tiles, num_programs)``."""
    _check_ints(num_tiles=num_tiles, num_programs=num_programs)
    if num_programs < 1:
        raise ValueError(f"num_programs must be >= 1, got {num_programs}")
    return [np.arange(p, num_tiles, num_programs) for p in range(num_programs)]


# ----------------------------------------------------------------------------- whole schedules
SCHEDULE_FIELDS = ("tile", "program", "step", "problem", "pid_m", "pid_n")


def persistent_schedule(M: int, N: int, block_m: int, block_n: int, num_programs: int,
                        order: str = "grouped", group_size_m: int = 8) -> np.ndarray:
    """Schedule of a persistent single-GEMM kernel (``matmul_persistent``, ``matmul_tma``).

    ``num_programs`` programs are launched; program ``p`` computes tile indices
    ``p, p + num_programs, ...`` (step 0, 1, ...), each mapped to ``(pid_m, pid_n)`` by
    :func:`tile_coords`.  Returns an int64 array ``[num_tiles, 6]`` with columns
    :data:`SCHEDULE_FIELDS`, sorted by tile index.  ``step`` is the wave a tile runs in
    when all programs are resident at once.
    """
    tile_grid(M, N, block_m, block_n)  # validates the sizes
    return multi_problem_schedule([(M, N)], block_m, block_n, num_programs, order, group_size_m)


def problem_tile_starts(problem_shapes, block_m: int, block_n: int) -> np.ndarray:
    """Prefix sums of tiles per problem: problem ``g`` owns tiles ``[starts[g], starts[g+1])``.

    ``problem_shapes`` is a list of ``(M, N)`` or ``(M, N, K)``; ``M`` may be 0 (no tiles)."""
    _check_ints(block_m=block_m, block_n=block_n)
    if min(block_m, block_n) < 1:
        raise ValueError(f"block_m and block_n must be >= 1, got {block_m}, {block_n}")
    counts = []
    for shape in problem_shapes:
        M, N = shape[0], shape[1]
        _check_ints(M=M, N=N)
        if M < 0 or N < 0:
            raise ValueError(f"problem sizes must be >= 0, got M={M}, N={N}")
        counts.append(cdiv(M, block_m) * cdiv(N, block_n))
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)


def locate_problem_np(tile, starts: np.ndarray):
    """Which problem a global tile index falls in, and its index inside that problem."""
    tile = np.asarray(tile, dtype=np.int64)
    problem = np.searchsorted(starts, tile, side="right") - 1
    return problem, tile - starts[problem]


def multi_problem_schedule(problem_shapes, block_m: int, block_n: int, num_programs: int,
                           order: str = "grouped", group_size_m: int = 8) -> np.ndarray:
    """Schedule of the grouped (multi-problem) kernels (``grouped_matmul``, ``grouped_mm``).

    The tiles of all problems are laid end to end (problem 0's tiles, then problem 1's, ...,
    each problem's own tiles in ``order``); ``num_programs`` programs stride over that list
    exactly like :func:`persistent_schedule`.  Returns ``[total_tiles, 6]`` int64 rows with
    columns :data:`SCHEDULE_FIELDS`.
    """
    _check_ints(num_programs=num_programs)
    if num_programs < 1:
        raise ValueError(f"num_programs must be >= 1, got {num_programs}")
    _check_order(order, group_size_m)
    starts = problem_tile_starts(problem_shapes, block_m, block_n)
    tiles = np.arange(starts[-1], dtype=np.int64)
    problem, local = locate_problem_np(tiles, starts)
    out = np.empty((len(tiles), len(SCHEDULE_FIELDS)), dtype=np.int64)
    out[:, 0] = tiles
    out[:, 1] = tiles % num_programs
    out[:, 2] = tiles // num_programs
    out[:, 3] = problem
    for g, shape in enumerate(problem_shapes):
        sel = problem == g
        if not sel.any():
            continue
        num_pid_m, num_pid_n = cdiv(int(shape[0]), block_m), cdiv(int(shape[1]), block_n)
        pm, pn = tile_coords_np(local[sel], num_pid_m, num_pid_n, order, group_size_m)
        out[sel, 4], out[sel, 5] = pm, pn
    return out


# ----------------------------------------------------------------------------- Stream-K: splitting the last wave along K
# A persistent kernel's last wave is partial when the tile count is not a multiple of the
# program count (512 tiles on 132 SMs: 3 full waves, then 116 tiles while 16 SMs idle).
# Stream-K (Osama et al., PPoPP 2023) hands out the *K iterations* of those last tiles instead:
# ``sk_tiles * k_tiles`` iterations split evenly over all programs, so every program finishes
# together.  A tile cut between programs is finished by the program holding its first K
# iteration, which adds the partial sums the others left in a workspace.


#: fewest K iterations per tile for the default split: each partial sum handed over costs about
#: as much as 5 K iterations (H100, 128x256 tiles: a 128 KiB round trip through L2), so short K
#: loops lose more to the hand-over than they gain from idle SMs (PERF_NOTES.md)
STREAMK_MIN_K_TILES = 64


def streamk_default_tiles(num_tiles: int, num_programs: int, k_tiles: int) -> int:
    """How many tiles the Stream-K kernel splits along K when not told: all of them when they
    would keep at most half of the programs busy and each has at least
    :data:`STREAMK_MIN_K_TILES` K iterations (few tiles, long K), else none.

    Measured on an H200 with 128x256 tiles, times from CUDA graphs (``images/bench/stream-k.csv``,
    "stream_k 128x256 tail split" against "tma 128x256"): splitting gains at 512 x 512 x 16384
    (8 tiles of 256 iterations: 84.9 us against 152 unsplit) and 1024 x 1024 x 8192 (32 of 128:
    52.9 against 80.7), loses at 1280^3 (50 of 20: 31.3 against 18.5), and splitting a multi-wave
    problem's partial last wave loses too (4096^3, 116 of 512 tiles split: 232 against 215 us), so
    those are left to ``sk_tiles``.  ``tests/test_prose_numbers.py`` checks these numbers against
    the CSV."""
    return num_tiles if 2 * num_tiles <= num_programs and k_tiles >= STREAMK_MIN_K_TILES else 0


#: columns of ``streamk_segments``' rows (and of ``streamk.trace_streamk_segments``)
STREAMK_FIELDS = ("program", "tile", "k_first", "k_end")


#: how the Stream-K kernel picks the tiles it splits: ``"tail"`` (``streamk_default_tiles``, or
#: ``sk_tiles``) or ``"hybrid"`` (``streamk_hybrid_tiles``: the paper's data-parallel + two-tile Stream-K)
STREAMK_SCHEDULES = ("tail", "hybrid")


def streamk_hybrid_tiles(num_tiles: int, num_programs: int) -> int:
    """Tiles the hybrid schedule splits (Osama et al., PPoPP 2023, "data-parallel + two-tile
    Stream-K"): the partial last wave *and one full wave* before it, so each program's share is
    between one and two tiles of K iterations and no tile is cut into more than two pieces (one
    hand-over); the waves before run whole tiles.  No partial wave: nothing split; fewer tiles
    than programs: all of them (each share under one tile, as Stream-K proper)."""
    _check_ints(num_tiles=num_tiles, num_programs=num_programs)
    if num_programs < 1 or num_tiles < 0:
        raise ValueError(f"need num_programs >= 1 and num_tiles >= 0; got {num_programs}, {num_tiles}")
    if num_tiles < num_programs:
        return num_tiles
    tail = num_tiles % num_programs
    return tail + num_programs if tail else 0


def streamk_rows_per_program(sk_tiles: int, num_programs: int) -> int:
    """Segments a program may run (rows per program in ``streamk_segments``): 2 while a share is
    at most one tile of K iterations (the end of one tile, the start of the next), 3 when it is
    up to two (the hybrid's: the end of one tile, a whole tile, the start of another)."""
    return 2 if sk_tiles <= num_programs else 3


def streamk_segments(num_tiles: int, k_tiles: int, num_programs: int, sk_tiles: int | None = None,
                     schedule: str = "tail") -> np.ndarray:
    """numpy mirror of the Stream-K kernel's schedule: who computes which K range of which tile.

    Tiles ``0 .. num_tiles - sk_tiles - 1`` are data-parallel: program ``p`` computes tiles
    ``p, p + num_programs, ...`` over all ``k_tiles`` K blocks, exactly as
    :func:`persistent_schedule`.  The last ``sk_tiles`` tiles (default
    :func:`streamk_default_tiles`; with ``schedule="hybrid"``, :func:`streamk_hybrid_tiles`) form
    ``sk_tiles * k_tiles`` K iterations, split by :func:`streamk_range`.  Returns an int64 array
    ``[num_tiles - sk_tiles + R * num_programs, 4]`` with columns :data:`STREAMK_FIELDS`, ``R``
    the :func:`streamk_rows_per_program`: row ``t`` for data-parallel tile ``t``; rows
    ``dp + R * p ...`` for program ``p``'s Stream-K segments, in the order it runs them; ``-1``
    rows where a program has fewer.  A segment with ``k_first == 0`` finishes its tile.
    """
    _check_ints(num_tiles=num_tiles, k_tiles=k_tiles, num_programs=num_programs,
                **({} if sk_tiles is None else {"sk_tiles": sk_tiles}))
    if num_programs < 1 or k_tiles < 1 or num_tiles < 0:
        raise ValueError(f"need num_programs >= 1, k_tiles >= 1, num_tiles >= 0; got {num_programs}, {k_tiles}, {num_tiles}")
    if schedule not in STREAMK_SCHEDULES:
        raise ValueError(f"schedule must be one of {STREAMK_SCHEDULES}, got {schedule!r}")
    if schedule == "hybrid":
        if sk_tiles is not None:
            raise ValueError("sk_tiles is for schedule='tail'; the hybrid schedule picks its own (streamk_hybrid_tiles)")
        sk_tiles = streamk_hybrid_tiles(num_tiles, num_programs)
    elif sk_tiles is None:
        sk_tiles = streamk_default_tiles(num_tiles, num_programs, k_tiles)
    elif not 0 <= sk_tiles <= min(num_tiles, num_programs):
        raise ValueError(f"sk_tiles must be in [0, min(num_tiles, num_programs)] = [0, {min(num_tiles, num_programs)}], "
                         f"got {sk_tiles}: a program's share of the split is then under one tile of K iterations")
    dp_tiles = num_tiles - sk_tiles
    rows = streamk_rows_per_program(sk_tiles, num_programs)
    out = np.full((dp_tiles + rows * num_programs, len(STREAMK_FIELDS)), -1, dtype=np.int64)
    tiles = np.arange(dp_tiles)
    out[:dp_tiles] = np.stack([tiles % num_programs, tiles, np.zeros_like(tiles), np.full_like(tiles, k_tiles)], axis=1)
    total = sk_tiles * k_tiles
    for p in range(num_programs):
        share = num_programs - 1 - p
        it, end = share * total // num_programs, (share + 1) * total // num_programs
        row = dp_tiles + rows * p
        while it < end:
            t, k_first = divmod(it, k_tiles)
            k_end = min(k_tiles, k_first + end - it)
            out[row] = (p, dp_tiles + t, k_first, k_end)
            row += 1
            it += k_end - k_first
    return out


def streamk_schedule(num_tiles: int, k_tiles: int, num_programs: int, sk_tiles: int | None = None,
                     schedule: str = "tail") -> dict:
    """What :func:`streamk_segments` means for the time: ``sk_tiles`` and ``dp_tiles``;
    ``iterations``, the K iterations each program runs (data-parallel and Stream-K together), and
    ``busiest``, the most of them (the launch ends with its busiest SM); ``handovers``, per split
    tile, how many partial sums are handed to the program that finishes it (its pieces minus one),
    with ``max_handovers`` and ``mean_handovers``; ``segments``, the most any program runs."""
    seg = streamk_segments(num_tiles, k_tiles, num_programs, sk_tiles, schedule)
    sk = streamk_hybrid_tiles(num_tiles, num_programs) if schedule == "hybrid" else (
        streamk_default_tiles(num_tiles, num_programs, k_tiles) if sk_tiles is None else sk_tiles)
    dp_tiles = num_tiles - sk
    ran = seg[seg[:, 0] >= 0]
    split = seg[dp_tiles:][seg[dp_tiles:, 0] >= 0]  # the Stream-K segments
    iterations = np.bincount(ran[:, 0], weights=ran[:, 3] - ran[:, 2], minlength=num_programs).astype(np.int64)
    handovers = np.bincount(split[:, 1], minlength=num_tiles).astype(np.int64)[dp_tiles:] - 1
    return {"sk_tiles": sk, "dp_tiles": dp_tiles, "iterations": iterations, "busiest": int(iterations.max()),
            "handovers": handovers, "max_handovers": int(handovers.max()) if sk else 0,
            "mean_handovers": float(handovers.mean()) if sk else 0.0,
            "segments": int(np.bincount(split[:, 0], minlength=num_programs).max()) if sk else 0}


#: how the Stream-K kernel adds the pieces of a split tile: ``"deterministic"`` (the program with the
#: tile's first iterations waits for the others' partial sums, flags in a workspace, adds them in a
#: fixed order), ``"atomic"`` (every piece atomically adds into a zeroed fp32 C: no waits, no
#: workspace, no non-linear epilogue) or ``"separate"`` (every piece stores its partial sum; a
#: second kernel adds them, in the same fixed order, and runs the epilogue)
STREAMK_REDUCTIONS = ("deterministic", "atomic", "separate")


def streamk_workspace_bytes(reduction: str, num_programs: int, block_m: int, block_n: int) -> int:
    """Bytes of workspace the Stream-K kernel needs beside A, B and C, for ``reduction`` (of
    :data:`STREAMK_REDUCTIONS`): one fp32 ``block_m x block_n`` slot per program and an int32
    flag per program plus the ticket counter (``deterministic``: a program hands over at most one
    partial sum, the end of its first tile); two slots per program (``separate``: a program may
    also leave the start of its last tile unfinished); none (``atomic``, whose C is fp32 instead:
    ``M * N * (4 - C's element size)`` bytes more than the others' C)."""
    _check_ints(num_programs=num_programs, block_m=block_m, block_n=block_n)
    if reduction not in STREAMK_REDUCTIONS:
        raise ValueError(f"reduction must be one of {STREAMK_REDUCTIONS}, got {reduction!r}")
    if min(num_programs, block_m, block_n) < 1:
        raise ValueError(f"num_programs, block_m and block_n must be >= 1, got {num_programs}, {block_m}, {block_n}")
    slot = 4 * block_m * block_n
    return {"deterministic": num_programs * slot + 4 * (num_programs + 1),
            "separate": 2 * num_programs * slot, "atomic": 0}[reduction]


# ----------------------------------------------------------------------------- split-K
#: fewest K blocks per split: a split's partial sum is a tile-sized fp32 round trip through L2
#: (about as much as 5 K iterations of a 128x256 tile on an H100, PERF_NOTES.md), so shorter
#: splits lose more to the hand-over than they gain from busier SMs
SPLITK_MIN_K_TILES = 8


def splitk_default_splits(num_tiles: int, k_tiles: int, num_sms: int) -> int:
    """How many pieces ``matmul_splitk`` cuts each tile's K loop into when not told: enough to
    fill one wave of ``num_sms`` programs, but each piece at least :data:`SPLITK_MIN_K_TILES`
    K blocks long; 1 (no split) when the tiles fill more than half the GPU already."""
    return max(1, min(num_sms // max(num_tiles, 1), k_tiles // SPLITK_MIN_K_TILES))


#: the smallest M and N that ``matmul_ws`` splits K for: with fewer rows (or columns) the product
#: streams one operand (a decode's weight) at DRAM speed, and split units tied ``matmul_splitk`` on
#: the GPU while their host time was longer (PERF_NOTES 36, then two launches: 16 x 4096 x 4096, 13.4
#: against 13.5 µs in CUDA graphs, 57.2 against 22.8 µs of host time); at 128 they won (16.2 against 19.1)
WS_SPLIT_MIN_SIDE = 128
#: the K block of every ``matmul_ws`` fp16/bf16 tile (its split rule counts K in these)
WS_BLOCK_K = 64


def ws_default_splits(M: int, N: int, K: int, tile: str, *, num_sms: int, block_k: int = WS_BLOCK_K) -> int:
    """How many pieces ``matmul_ws`` cuts each tile's K loop into when not told: the pieces of
    :func:`splitk_default_splits` for its ``tile``'s count, when M and N are both at least
    :data:`WS_SPLIT_MIN_SIDE`; else 1.  Never a piece wholly past K (see :func:`whole_pieces`)."""
    M, N, K, num_sms = _check_ints(M=M, N=N, K=K, num_sms=num_sms)
    if min(M, N) < WS_SPLIT_MIN_SIDE:
        return 1
    rows, cols = WS_TILES[tile][:2]
    k_tiles = cdiv(K, block_k)
    return whole_pieces(k_tiles, splitk_default_splits(cdiv(M, rows) * cdiv(N, cols), k_tiles, num_sms))


#: fp8's K block (``matmul_ws.FP8_CONFIGS``)
FP8_BLOCK_K = 128
#: what a split costs beside its pieces' K blocks, in K blocks of a 128 x 256 tile (H100, fitted to
#: PERF_NOTES 58's sweep by ``images/bench/entry58/fit_split_cost.py``): each wave of units pays one
#: unit's fixed cost (the ring's first fill, the partial's store, the last piece's adds), and every
#: piece's fp32 partial (M x N x 4 bytes) goes out to memory and back, a cost per MB of it
FP8_SPLIT_UNIT_K_BLOCKS = 13
FP8_SPLIT_K_BLOCKS_PER_PARTIAL_MB = 0.3
#: the least share of the busiest SM's work a split must save: the fit's median error is 8%
FP8_SPLIT_MIN_GAIN = 0.1
#: the most pieces ``fp8_ws_splits`` cuts a tile's K loop into, and the fewest K blocks a piece
#: holds (512 values of K, as :data:`SPLITK_MIN_K_TILES` blocks of 64 for fp16)
FP8_MAX_SPLITS = 8
FP8_MIN_PIECE_K_BLOCKS = 4


def fp8_block_weight(tile: str) -> float:
    """One K block of ``tile`` (an FP8_WS_TILES name) in K blocks of a 128 x 256 tile's time: its
    products' share of one, over its rate (the unit of ``fp8_ws_splits``'s costs and their fit)."""
    rows, cols, rate = FP8_WS_TILES[tile]
    return rows * cols / (128 * 256) / rate


def fp8_ws_splits(M: int, N: int, K: int, tile: str, *, num_sms: int) -> int:
    """Pieces per tile's K loop for fp8 ``scaled_mm`` on Hopper in ``tile`` (an FP8_WS_TILES name):
    the count that makes the busiest SM's work least, in K blocks of a 128 x 256 tile (a 128 x 128
    block weighs its rate's share of one).  That work is its waves of ``tiles x splits`` units over
    ``num_sms`` (a partly filled one counting whole) times each unit's K blocks, and, for a split,
    :data:`FP8_SPLIT_UNIT_K_BLOCKS` per wave plus every piece's partial round trip
    (:data:`FP8_SPLIT_K_BLOCKS_PER_PARTIAL_MB`).  A split must save :data:`FP8_SPLIT_MIN_GAIN` of
    the unsplit work, each piece at least :data:`FP8_MIN_PIECE_K_BLOCKS` long, and only fewer tiles
    than SMs split.  The fp8 suite's shapes, DeepSeek-V3's QKV at 1000 tokens included, stay whole,
    as measured (PERF_NOTES 58); few tiles with a long K split (a 512 x 512 output with K = 16384
    in 8 pieces took half the time of one K loop: that entry's rule check).  1 when M or N is under
    :data:`WS_SPLIT_MIN_SIDE`."""
    M, N, K, num_sms = _check_ints(M=M, N=N, K=K, num_sms=num_sms)
    if tile not in FP8_WS_TILES:
        raise ValueError(f"tile must be one of {sorted(FP8_WS_TILES)}, got {tile!r}")
    if min(M, N, K) < 0 or num_sms < 1:
        raise ValueError(f"M, N, K must be >= 0 and num_sms >= 1, got {M}, {N}, {K} and {num_sms}")
    rows, cols = FP8_WS_TILES[tile][:2]
    tiles, k_tiles = cdiv(M, rows) * cdiv(N, cols), cdiv(K, FP8_BLOCK_K)
    if min(M, N) < WS_SPLIT_MIN_SIDE or tiles >= num_sms or k_tiles < 2 * FP8_MIN_PIECE_K_BLOCKS:
        return 1
    block = fp8_block_weight(tile)
    partial_mb = M * N * 4 / 1e6

    def busiest(splits):
        waves = cdiv(tiles * splits, num_sms)
        if splits == 1:
            return waves * k_tiles * block
        return (waves * (cdiv(k_tiles, splits) + FP8_SPLIT_UNIT_K_BLOCKS) * block
                + splits * partial_mb * FP8_SPLIT_K_BLOCKS_PER_PARTIAL_MB)

    most = min(FP8_MAX_SPLITS, k_tiles // FP8_MIN_PIECE_K_BLOCKS)
    best = min(range(1, most + 1), key=lambda s: (busiest(s), s))
    if busiest(best) > (1 - FP8_SPLIT_MIN_GAIN) * busiest(1):
        return 1
    return whole_pieces(k_tiles, best)


def whole_pieces(k_tiles: int, splits: int) -> int:
    """``splits`` lowered until no piece of ``cdiv(k_tiles, splits)`` K blocks lies wholly past K
    (16 pieces of 130 blocks are 9 blocks each, and 15 of them cover all 130)."""
    if k_tiles < 1 or splits <= 1:
        return 1
    return cdiv(k_tiles, cdiv(k_tiles, splits))


# ----------------------------------------------------------------------------- matmul_ws's tile
#: ``matmul_ws``'s tiles (its CONFIGS names): rows, columns, and the rate of one SM working on such
#: tiles, relative to the 128 x 256 tile's (H100, the median over the shapes the rule was drawn
#: from: PERF_NOTES entry 33).  Smaller tiles waste less of a ragged last row or wave, but read
#: more bytes per product and give the tensor cores shorter instructions.
WS_TILES = {"cooperative": (128, 256, 1.0), "pingpong_64x256": (64, 256, 0.82), "pingpong_64x128": (64, 128, 0.49)}
#: the same for ``scaled_mm``'s fp8 tiles (``matmul_ws.FP8_CONFIGS``; H100, PERF_NOTES entry 34)
FP8_WS_TILES = {"128x256": (128, 256, 1.0), "128x128": (128, 128, 0.91)}


def ws_tile_cost(M: int, N: int, tile: str, num_sms: int, tiles: dict = WS_TILES) -> float:
    """Work of the busiest SM when ``matmul_ws`` runs an ``M x N`` product in ``tile`` (of
    ``tiles``): its tiles (the waves, a partly filled one counting whole) times a tile's area,
    over the tile's rate.  A mostly empty last row of tiles counts whole too: the tensor cores
    multiply the padding."""
    _check_ints(M=M, N=N, num_sms=num_sms)
    if M < 0 or N < 0 or num_sms < 1:
        raise ValueError(f"need M, N >= 0 and num_sms >= 1; got {M}, {N}, {num_sms}")
    rows, cols, rate = tiles[tile]
    return cdiv(cdiv(M, rows) * cdiv(N, cols), num_sms) * rows * cols / rate


def ws_default_tile(M: int, N: int, *, num_sms: int, tiles: dict = WS_TILES) -> str:
    """The tile ``matmul_ws`` runs an ``M x N`` product in when not told: the least
    :func:`ws_tile_cost` (K multiplies every tile's alike), the first of ``tiles`` on a tie
    (``WS_TILES`` for fp16/bf16, ``FP8_WS_TILES`` for ``scaled_mm``)."""
    return min(tiles, key=lambda tile: ws_tile_cost(M, N, tile, num_sms, tiles))


# ----------------------------------------------------------------------------- the default dispatch
#: the data-parallel tile of the big-problem kernels where wgmma cannot run (``matmul_ws``'s
#: cooperative tile: ``matmul_tma`` autotunes around it)
DISPATCH_TILE = WS_TILES["cooperative"][:2]
#: the launchers ``default_launcher`` picks from
DISPATCH_LAUNCHERS = ("matmul_splitk", "matmul_ws", "matmul_tma", "matmul")


def default_launcher(M: int, N: int, K: int, *, num_sms: int, tma: bool, wgmma: bool) -> tuple[str, str]:
    """The launcher ``matmul_auto`` calls for an ``M x N x K`` product, and why, in words.

    ``tma``: TMA can read both inputs on this GPU; ``wgmma``: ``matmul_ws`` can run them (sm_90,
    16-bit, TMA-readable), in the tile :func:`ws_default_tile` picks.  When the tiles (that one,
    else 128 x 256) would fill at most half the SMs (the line of ``splitk_default_splits``), no
    tile order or pipeline helps: K is cut into pieces, by ``matmul_ws`` itself where wgmma runs
    and it splits (:func:`ws_default_splits`: M and N at least 128, K long enough), else by
    ``matmul_splitk``, which autotunes smaller tiles too.  Otherwise the fastest data-parallel
    kernel the GPU and the layouts allow.
    Measured against the other choices in PERF_NOTES entries 30, 33 and 36."""
    _check_ints(M=M, N=N, K=K, num_sms=num_sms)
    if num_sms < 1:
        raise ValueError(f"num_sms must be >= 1, got {num_sms}")
    tile_name = ws_default_tile(M, N, num_sms=num_sms) if wgmma else None
    rows, cols = WS_TILES[tile_name][:2] if wgmma else DISPATCH_TILE
    tiles = cdiv(M, rows) * cdiv(N, cols)
    few = f"{tiles} tile{'s' * (tiles != 1)} of {rows}x{cols}"
    if 2 * tiles <= num_sms and wgmma:
        splits = ws_default_splits(M, N, K, tile_name, num_sms=num_sms)
        if splits > 1:
            return "matmul_ws", (f"{few} ({tile_name}) would fill at most half of {num_sms} SMs: the "
                                 f"warp-specialized kernel with each tile's K loop in {splits} pieces, the last "
                                 "piece of each tile adding them")
    if 2 * tiles <= num_sms:
        return "matmul_splitk", (f"{few} would fill at most half of {num_sms} SMs: smaller tiles, and K cut into "
                                 "pieces if they alone leave SMs idle")
    if wgmma:
        return "matmul_ws", f"{tiles} tiles of {rows}x{cols} ({tile_name}): the warp-specialized Hopper kernel"
    if tma:
        return "matmul_tma", f"{tiles} tiles: the persistent TMA kernel (no wgmma path for these inputs)"
    return "matmul", f"{tiles} tiles: the tiled pointer kernel (no TMA for these inputs on this GPU)"
