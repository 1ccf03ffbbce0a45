"""Which output tile each program computes: written once for the kernels, mirrored once in numpy.

A GEMM ``C[M, N] = A[M, K] @ B[K, N]`` is cut into ``BLOCK_M x BLOCK_N`` tiles of C,
``num_pid_m = cdiv(M, BLOCK_M)`` rows by ``num_pid_n = cdiv(N, BLOCK_N)`` columns.
Program (or, in a persistent kernel, *tile index*) ``pid`` is mapped to a tile
``(pid_m, pid_n)`` by one of two orders:

``row_major``  pid walks the tile grid row by row: consecutive programs share a row
               of A but each needs a different column of B.
``grouped``    pid walks *groups* of ``GROUP_SIZE_M`` tile rows column by column, so
               programs that run together reuse a few rows of A *and* a few columns
               of B from L2 (Triton's tutorial 03 "super-grouping").

The ``@triton.jit`` helpers are what every kernel calls; the numpy functions below
them are the same arithmetic for drawings, widgets, the L2 model and tests.
``tests/test_tiles.py`` runs the Triton helpers and proves the two agree.
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from . import runtime as _runtime  # noqa: F401  (decides interpreter vs GPU first)
from ._validate import require_int

ORDERS = ("row_major", "grouped")


# ----------------------------------------------------------------------------- device side
@triton.jit
def tile_row_major(pid, num_pid_n):
    """Row-major order: pid -> (pid // num_pid_n, pid % num_pid_n)."""
    return pid // num_pid_n, pid % num_pid_n


@triton.jit
def tile_grouped(pid, num_pid_m, num_pid_n, GROUP_SIZE_M: tl.constexpr):
    """Grouped order: GROUP_SIZE_M tile rows form a group, walked column by column."""
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    # the last group may have fewer rows when num_pid_m is not a multiple of GROUP_SIZE_M
    rows_in_group = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_in_group = pid % num_pid_in_group
    pid_m = first_pid_m + pid_in_group % rows_in_group
    pid_n = pid_in_group // rows_in_group
    return pid_m, pid_n


@triton.jit
def tile_coords(pid, num_pid_m, num_pid_n, GROUPED: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    """The one pid -> (pid_m, pid_n) mapping all single-GEMM kernels use."""
    if GROUPED:
        pid_m, pid_n = tile_grouped(pid, num_pid_m, num_pid_n, GROUP_SIZE_M)
    else:
        pid_m, pid_n = tile_row_major(pid, num_pid_n)
    return pid_m, pid_n


# ----------------------------------------------------------------------------- numpy mirror
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _check_ints(**values) -> None:
    """TypeError unless every value is an int (numpy's too): sizes, blocks and counts are whole."""
    for name, value in values.items():
        require_int(value, name)


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


# ----------------------------------------------------------------------------- several problems, on the device
# The grouped kernels walk the tiles of all problems laid end to end (``multi_problem_schedule``).
# A tile index is turned back into (problem, tile inside the problem) by one of two helpers,
# both the device twin of ``locate_problem_np`` (``searchsorted(starts, tile, "right") - 1``):
# problems with no tiles own an empty range, so they are skipped without special cases.


@triton.jit
def locate_problem(tile, tile_starts_ptr, num_problems):
    """Global tile index -> (problem, tile inside it); ``grouped_matmul``'s lookup.

    ``tile_starts_ptr`` points at ``problem_tile_starts`` (``num_problems + 1`` entries, int32 or
    int64, computed on the host; tile indices themselves are int32).  Binary search for the last
    problem whose first tile is <= ``tile``: log2(num_problems) scalar loads from a small array
    that stays in L1/L2.
    """
    lo = tile * 0  # a tensor (not a Python int), so the loop below carries it whatever num_problems is
    hi = lo + num_problems - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tl.load(tile_starts_ptr + mid).to(tl.int32) <= tile:
            lo = mid
        else:
            hi = mid - 1
    return lo, tile - tl.load(tile_starts_ptr + lo).to(tl.int32)


@triton.jit
def locate_problem_in_ends(tile, tile_ends):
    """Global tile index -> (problem, tile inside it), from tile counts held in registers.

    ``tile_ends`` is a vector of cumulative tile counts (problem p owns tiles
    ``[tile_ends[p-1], tile_ends[p])``; padding lanes hold the total).  ``grouped_mm`` builds it
    in the kernel from the device-side ``offs``, so the host never needs per-expert counts.
    The problem is the number of problems that end at or before ``tile``; its first tile is
    the largest such end.
    """
    ended = tile_ends <= tile
    problem = tl.sum(ended.to(tl.int32), axis=0)
    first_tile = tl.max(tl.where(ended, tile_ends, 0), axis=0)
    return problem, tile - first_tile


# ----------------------------------------------------------------------------- Stream-K: splitting the last wave along K
# A persistent kernel's last wave is partial when the tile count is not a multiple of the
# program count (512 tiles on 132 SMs: 3 full waves, then 116 tiles while 16 SMs idle).
# Stream-K (Osama et al., PPoPP 2023) hands out the *K iterations* of those last tiles instead:
# ``sk_tiles * k_tiles`` iterations split evenly over all programs, so every program finishes
# together.  A tile cut between programs is finished by the program holding its first K
# iteration, which adds the partial sums the others left in a workspace.


@triton.jit
def streamk_range(pid, total_iters, NUM_PROGRAMS: tl.constexpr):
    """``[first, end)``: the Stream-K iterations program ``pid`` runs, an even split of
    ``total_iters`` handed out from the *last* program down (program ``NUM_PROGRAMS - 1`` gets
    the first share).  So a tile's first iterations, whose program must wait for the rest of the
    tile, belong to a higher pid than the programs it waits for (see ``streamk_segments``)."""
    share = (NUM_PROGRAMS - 1 - pid).to(tl.int64)  # int64: share * total_iters can pass 2**31
    first = (share * total_iters // NUM_PROGRAMS).to(tl.int32)
    end = ((share + 1) * total_iters // NUM_PROGRAMS).to(tl.int32)
    return first, end


#: fewest K iterations per tile for the default split: each partial sum handed over costs about
#: as much as 5 K iterations (H100, 128x256 tiles: a 128 KiB round trip through L2), so short K
#: loops lose more to the hand-over than they gain from idle SMs (PERF_NOTES.md entry 14)
STREAMK_MIN_K_TILES = 64


def streamk_default_tiles(num_tiles: int, num_programs: int, k_tiles: int) -> int:
    """How many tiles the Stream-K kernel splits along K when not told: all of them when they
    would keep at most half of the programs busy and each has at least
    :data:`STREAMK_MIN_K_TILES` K iterations (few tiles, long K), else none.

    Measured on an H100 with 128x256 tiles, times from CUDA graphs (PERF_NOTES.md entry 14):
    splitting gains at 512 x 512 x 16384 (8 tiles of 256 iterations: 88 us against 148 unsplit)
    and 1024 x 1024 x 8192 (32 of 128: 56 against 79), loses at 1280^3 (50 of 20: 29 against 18),
    and splitting a multi-wave problem's partial last wave loses too (4096^3, 116 of 512 tiles
    split: 242 against 212), so those are left to ``sk_tiles``."""
    return num_tiles if 2 * num_tiles <= num_programs and k_tiles >= STREAMK_MIN_K_TILES else 0


#: columns of ``streamk_segments``' rows (and of ``streamk.trace_streamk_segments``)
STREAMK_FIELDS = ("program", "tile", "k_first", "k_end")


def streamk_segments(num_tiles: int, k_tiles: int, num_programs: int, sk_tiles: int | None = None) -> np.ndarray:
    """numpy mirror of the Stream-K kernel's schedule: who computes which K range of which tile.

    Tiles ``0 .. num_tiles - sk_tiles - 1`` are data-parallel: program ``p`` computes tiles
    ``p, p + num_programs, ...`` over all ``k_tiles`` K blocks, exactly as
    :func:`persistent_schedule`.  The last ``sk_tiles`` tiles (default
    :func:`streamk_default_tiles`) form ``sk_tiles * k_tiles`` K
    iterations, split by :func:`streamk_range`.  Returns an int64 array
    ``[num_tiles - sk_tiles + 2 * num_programs, 4]`` with columns :data:`STREAMK_FIELDS`: row
    ``t`` for data-parallel tile ``t``; rows ``dp + 2 * p`` and ``dp + 2 * p + 1`` for program
    ``p``'s (at most two) Stream-K segments, in the order it runs them; ``-1`` rows where a
    program has fewer.  A segment with ``k_first == 0`` finishes its tile (epilogue and store).
    """
    _check_ints(num_tiles=num_tiles, k_tiles=k_tiles, num_programs=num_programs,
                **({} if sk_tiles is None else {"sk_tiles": sk_tiles}))
    if num_programs < 1 or k_tiles < 1 or num_tiles < 0:
        raise ValueError(f"need num_programs >= 1, k_tiles >= 1, num_tiles >= 0; got {num_programs}, {k_tiles}, {num_tiles}")
    if sk_tiles is None:
        sk_tiles = streamk_default_tiles(num_tiles, num_programs, k_tiles)
    if not 0 <= sk_tiles <= min(num_tiles, num_programs):
        raise ValueError(f"sk_tiles must be in [0, min(num_tiles, num_programs)] = [0, {min(num_tiles, num_programs)}], "
                         f"got {sk_tiles}: a program's share of the split is then under one tile of K iterations")
    dp_tiles = num_tiles - sk_tiles
    out = np.full((dp_tiles + 2 * num_programs, len(STREAMK_FIELDS)), -1, dtype=np.int64)
    tiles = np.arange(dp_tiles)
    out[:dp_tiles] = np.stack([tiles % num_programs, tiles, np.zeros_like(tiles), np.full_like(tiles, k_tiles)], axis=1)
    total = sk_tiles * k_tiles
    for p in range(num_programs):
        share = num_programs - 1 - p
        it, end = share * total // num_programs, (share + 1) * total // num_programs
        row = dp_tiles + 2 * p
        while it < end:
            t, k_first = divmod(it, k_tiles)
            k_end = min(k_tiles, k_first + end - it)
            out[row] = (p, dp_tiles + t, k_first, k_end)
            row += 1
            it += k_end - k_first
    return out
