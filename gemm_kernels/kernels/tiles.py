"""Which output tile each program computes, as ``@triton.jit`` helpers every kernel calls.

The pid -> (pid_m, pid_n) mapping is written once here (row-major and grouped order, see
``gemm_kernels.models.tiles`` for the orders explained and their numpy mirror, which
``tests/test_tiles.py`` proves equal), plus the lookups the grouped kernels use to find a
tile's problem, Stream-K's split of K iterations, and the one helper that records a tile in
TRACE mode.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .. import runtime as _runtime  # noqa: F401  (decides interpreter vs GPU first)
from ..models.tiles import STREAMK_MIN_K_TILES

#: tiles.STREAMK_MIN_K_TILES as a compile-time constant (a kernel may only read constexpr globals)
MIN_K_TILES_FOR_SPLIT = tl.constexpr(STREAMK_MIN_K_TILES)


# ----------------------------------------------------------------------------- one problem
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


# ----------------------------------------------------------------------------- several problems
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
    """``[first, end)``: the Stream-K iterations of share ``pid`` (the Stream-K kernel passes the
    ticket its program took, see ``streamk.py``), an even split of ``total_iters`` handed out
    from the *last* share down (share ``NUM_PROGRAMS - 1`` gets the first iterations).  So a
    tile's first iterations, whose program must wait for the rest of the tile, belong to a higher
    share than the ones it waits for (see ``streamk_segments``)."""
    share = (NUM_PROGRAMS - 1 - pid).to(tl.int64)  # int64: share * total_iters can pass 2**31
    first = (share * total_iters // NUM_PROGRAMS).to(tl.int32)
    end = ((share + 1) * total_iters // NUM_PROGRAMS).to(tl.int32)
    return first, end

@triton.jit
def record_tile(trace_ptr, row, f0, f1, f2, f3):
    """TRACE mode: row ``row`` of an int32 ``[rows, 4]`` trace gets ``(f0, f1, f2, f3)``.

    Every kernel's TRACE mode writes through this one helper; what the four fields mean is each
    trace's ``TRACE_FIELDS`` (``gemm_kernels.lab.traces``)."""
    base = trace_ptr + 4 * row
    tl.store(base, f0)
    tl.store(base + 1, f1)
    tl.store(base + 2, f2)
    tl.store(base + 3, f3)
