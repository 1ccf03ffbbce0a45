"""Checks for notebook 03 (grouped L2 ordering): the grouped mapping turned on its side (groups
of tile columns) in Python, the block fetches of one wave (against the L2 model), and the
column-grouped mapping as a ``@triton.jit`` helper (compiled for sm_90 too: see ``_kernel_checks``)."""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ... import runtime
from ...models.l2model import l2_traffic
from ...models.schedule import tile_schedule
from ...models.tiles import tile_coords_np
from . import _kernel_checks as kc
from ._core import AnswerRaised, Hints, call, read_items, shown, unseen_cases, whole

# (num_pid_m, num_pid_n, GROUP_SIZE_N): a square grid, a ragged last group, a group wider than the
# grid, groups of one column (= column-major), a wide grid
COLUMN_GROUP_CASES = [(9, 9, 3), (4, 5, 2), (3, 7, 4), (6, 2, 8), (4, 4, 1), (3, 10, 3)]


@kc.reference
def column_grouped_tile_ref(pid, num_pid_m: int, num_pid_n: int, group_size_n: int):
    """Groups of GROUP_SIZE_N tile *columns*, each walked row by row: the grouped order of the
    transposed tile grid (``tiles.tile_coords_np`` with M and N swapped)."""
    pid_n, pid_m = tile_coords_np(pid, num_pid_n, num_pid_m, "grouped", group_size_n)
    return pid_m, pid_n


def _column_grouped_expected(num_pid_m, num_pid_n, group):
    n = num_pid_m * num_pid_n
    return np.stack(column_grouped_tile_ref(np.arange(n), num_pid_m, num_pid_n, group), axis=1)


def _compare_tiles(expected: np.ndarray, got: np.ndarray, case: str) -> list[str]:
    """expected/got: [num_programs, 2] (pid_m, pid_n) per program.  Names wrong programs, then
    the tiles nobody computes and the tiles computed twice."""
    wrong = np.nonzero((got != expected).any(axis=1))[0]
    if not len(wrong):
        return []
    lines = [f"{case}: program {p}: expected tile ({expected[p, 0]}, {expected[p, 1]}), "
             f"got ({got[p, 0]}, {got[p, 1]})" for p in wrong[:3]]
    if len(wrong) > 3:
        lines.append(f"{case}: {len(wrong) - 3} more programs map to the wrong tile")
    seen: dict[tuple, int] = {}
    for pm, pn in map(tuple, got.tolist()):
        seen[(pm, pn)] = seen.get((pm, pn), 0) + 1
    all_tiles = set(map(tuple, expected.tolist()))
    missing = sorted(all_tiles - set(seen))
    twice = sorted(t for t, c in seen.items() if c > 1)
    if missing:
        lines.append(f"{case}: tiles never computed: {', '.join(map(str, missing[:6]))}"
                     + (" ..." if len(missing) > 6 else ""))
    if twice:
        lines.append(f"{case}: tiles computed more than once: {', '.join(map(str, twice[:6]))}"
                     + (" ..." if len(twice) > 6 else ""))
    return lines


def _as_pair(value, case: str):
    try:
        pm, pn = (whole(v) for v in read_items(value, 2))
    except (TypeError, ValueError, OverflowError):
        raise AnswerRaised(case, TypeError(f"expected a pair of whole numbers (pid_m, pid_n), got {shown(value)}")) from None
    return pm, pn


@kc.plain_exercise("column_grouped_tile", hints=Hints(
    nudge="this is the grouped order of the notebook with the roles of rows and columns swapped: which group does "
          "pid fall in, and where is it inside that group?",
    approach="a group is GROUP_SIZE_N tile columns times all num_pid_m rows; find the group and its first column; "
             "the last group may be narrower (take the minimum); inside the group, consecutive pids move along a "
             "row of tiles (across the group's columns) before going down",
    solution="in_group = GROUP_SIZE_N * num_pid_m; first_n = (pid // in_group) * GROUP_SIZE_N; "
             "cols = min(num_pid_n - first_n, GROUP_SIZE_N); pid_n = first_n + (pid % in_group) % cols; "
             "pid_m = (pid % in_group) // cols; return pid_m, pid_n"))
def check_column_grouped_tile(column_grouped_tile):
    problems = _column_grouped_problems(column_grouped_tile, COLUMN_GROUP_CASES)
    return problems or _column_grouped_problems(column_grouped_tile, unseen_cases(
        lambda rng: (rng.randint(1, 10), rng.randint(1, 10), rng.randint(1, 6))))


def _column_grouped_problems(column_grouped_tile, cases) -> list[str]:
    problems = []
    for num_pid_m, num_pid_n, group in cases:
        n = num_pid_m * num_pid_n
        case = f"{num_pid_m}x{num_pid_n} tiles, GROUP_SIZE_N={group}"
        got = np.array([_as_pair(call(column_grouped_tile, pid, num_pid_m, num_pid_n, group), case)
                        for pid in range(n)])
        problems += _compare_tiles(_column_grouped_expected(num_pid_m, num_pid_n, group), got, case)
    return problems


# (num_pid_m, num_pid_n, order, GROUP_SIZE_M, programs in flight, K blocks)
FETCH_CASES = [
    (9, 9, "row_major", 1, 9, 9),     # the seed notes' 90
    (9, 9, "grouped", 3, 9, 9),       # ... and 54
    (9, 9, "grouped", 2, 9, 9),       # a wave that spills into a second group
    (5, 7, "row_major", 1, 4, 3),
    (64, 64, "row_major", 1, 132, 128),  # 8192^2 in 128x128 tiles on an H100
    (64, 64, "grouped", 8, 132, 128),
]
_BLOCK = 16  # any block size: the counts are in blocks


def first_wave(num_pid_m, num_pid_n, order, group, in_flight):
    s = tile_schedule(num_pid_m * _BLOCK, num_pid_n * _BLOCK, _BLOCK, _BLOCK, order, group, programs_in_flight=in_flight)
    rows = s.wave_rows(0)
    return s, np.stack([s.pid_m[rows], s.pid_n[rows]], axis=1)


@kc.plain_exercise("wave_block_fetches", hints=Hints(
    nudge="two programs of one wave that share a tile row read the same blocks of A: how often does DRAM deliver "
          "a block that several of them read?",
    approach="count the distinct A row-blocks and the distinct B column-blocks the wave's tiles touch; each of "
             "them streams k_blocks blocks from DRAM once",
    solution="return (len(np.unique(tiles[:, 0])) + len(np.unique(tiles[:, 1]))) * k_blocks"))
def check_wave_block_fetches(wave_block_fetches):
    problems = _fetches_problems(wave_block_fetches, FETCH_CASES)
    return problems or _fetches_problems(wave_block_fetches, unseen_cases(_draw_fetch_case))


def _draw_fetch_case(rng) -> tuple:
    """A wave of a grid of up to 16 x 16 tiles, in either order, as FETCH_CASES lists them."""
    order = rng.choice(["row_major", "grouped"])
    return (rng.randint(1, 16), rng.randint(1, 16), order, rng.randint(1, 8) if order == "grouped" else 1,
            rng.randint(1, 40), rng.randint(1, 64))


def _fetches_problems(wave_block_fetches, cases) -> list[str]:
    problems = []
    for num_pid_m, num_pid_n, order, group, in_flight, k_blocks in cases:
        schedule, tiles = first_wave(num_pid_m, num_pid_n, order, group, in_flight)
        expected = l2_traffic(schedule, block_k=_BLOCK, K=k_blocks * _BLOCK).upto(0)["misses"]
        got = call(wave_block_fetches, tiles.copy(), k_blocks)
        name = order + (f" (GROUP_SIZE_M={group})" if order == "grouped" else "")
        case = f"first wave of {num_pid_m}x{num_pid_n} tiles, {name}, {in_flight} programs, {k_blocks} K blocks"
        try:
            got_int = whole(got)
        except (TypeError, ValueError):
            problems.append(f"{case}: expected a number of blocks, got {shown(got)}")
            continue
        if got_int != expected:
            rows, cols = len(np.unique(tiles[:, 0])), len(np.unique(tiles[:, 1]))
            why = ""
            if got_int == 2 * len(tiles) * k_blocks:
                why = " (that is every program's loads: programs of one wave share a block)"
            problems.append(f"{case}: expected {expected} = ({rows} A row-blocks + {cols} B column-blocks) x "
                            f"{k_blocks}, got {got_int}{why}")
    return problems


@triton.jit
def _record_tiles_kernel(out_ptr, owner_ptr, owner_stride, num_pid_m, num_pid_n, TILE_FN: tl.constexpr,
                         GROUP_SIZE: tl.constexpr):
    """Each program stores the tile the learner's TILE_FN maps its pid to, and writes its pid into
    that tile of a [num_pid_m, num_pid_n] owner grid, as a kernel stores its C tile: a tile outside
    the grid is an out-of-bounds store (a checked run stops it)."""
    pid = tl.program_id(0)
    pid_m, pid_n = TILE_FN(pid, num_pid_m, num_pid_n, GROUP_SIZE)
    tl.store(out_ptr + 2 * pid, pid_m)
    tl.store(out_ptr + 2 * pid + 1, pid_n)
    tl.store(owner_ptr + pid_m * owner_stride + pid_n, pid)


def run_tile_fn(tile_fn, num_pid_m: int, num_pid_n: int, group_size: int) -> np.ndarray:
    """Launch one program per tile, each calling ``tile_fn(pid, num_pid_m, num_pid_n, GROUP_SIZE)``;
    returns the ``[num_programs, 2]`` tiles they report (-1 where a program stored nothing)."""
    n = num_pid_m * num_pid_n
    out = torch.full((n, 2), -1, dtype=torch.int32, device=runtime.DEVICE)
    # the owner grid is a view with GROUP_SIZE spare columns after each row: a pid_n past the last
    # column lands there, outside the view, instead of on the next row's first tiles
    owner = torch.full((num_pid_m, num_pid_n + group_size), -1, dtype=torch.int32, device=runtime.DEVICE)
    owner = owner[:, :num_pid_n]
    try:
        _record_tiles_kernel[(n,)](out, owner, owner.stride(0), num_pid_m, num_pid_n, TILE_FN=tile_fn,
                                   GROUP_SIZE=group_size)
    except Exception as err:  # the tiles the programs reported before it stopped: for the diagnosis
        err.gemm_kernels_tiles = out.cpu().numpy()
        raise
    return out.cpu().numpy()


def _swapped_pair(expected: np.ndarray, got: np.ndarray) -> list[str]:
    reported = (got >= 0).all(axis=1)
    if reported.any() and np.array_equal(got[reported], expected[reported][:, ::-1]) and \
            not np.array_equal(got[reported], expected[reported]):
        return ["every program returned (pid_n, pid_m): return the pair the other way round, (pid_m, pid_n)"]
    return []


def tile_fn_diagnosis(log, failure) -> list[str]:
    """For a mapping stopped outside the grid: which program mapped where, and why."""
    tiles = getattr(failure, "gemm_kernels_tiles", None)
    launch = log.last_learner() if log is not None else None
    if tiles is None or launch is None or not getattr(failure, "program", None):
        return []
    num_pid_m, num_pid_n = launch.named.get("num_pid_m"), launch.named.get("num_pid_n")
    group = launch.named.get("GROUP_SIZE")
    pid = int(failure.program[0])
    pm, pn = (int(v) for v in tiles[pid])
    expected = _column_grouped_expected(num_pid_m, num_pid_n, group)
    done = tiles[:pid + 1]
    lines = _swapped_pair(expected[:pid + 1], done)
    where = []
    if not 0 <= pm < num_pid_m:
        where.append(f"pid_m must stay in 0..{num_pid_m - 1}")
    if not 0 <= pn < num_pid_n:
        where.append(f"pid_n must stay in 0..{num_pid_n - 1}")
        last_first = ((num_pid_n - 1) // group) * group
        if num_pid_n % group and pn >= num_pid_n and pn < last_first + group:
            where.append(f"the last group starts at column {last_first} and is only {num_pid_n - last_first} wide, "
                         f"not GROUP_SIZE_N = {group}: take its width with "
                         "tl.minimum(num_pid_n - first_n, GROUP_SIZE_N)")
    return lines + [f"program {pid} maps to tile ({pm}, {pn}), outside the {num_pid_m} x {num_pid_n} grid of tiles"
                    + (f": {'; '.join(where)}" if where else "") + f" (the check expected tile "
                    f"({expected[pid, 0]}, {expected[pid, 1]}))"]


def _column_grouped_case(column_grouped_triton, num_pid_m, num_pid_n, group) -> list[str]:
    case = f"{num_pid_m}x{num_pid_n} tiles, GROUP_SIZE_N={group}"
    got = call(run_tile_fn, column_grouped_triton, num_pid_m, num_pid_n, group,
               what=f"a kernel calling column_grouped_triton ({case})")
    expected = _column_grouped_expected(num_pid_m, num_pid_n, group)
    lines = _compare_tiles(expected, got, case)
    return lines + [f"diagnosis: {d}" for d in _swapped_pair(expected, got)] if lines else []


@kc.kernel_exercise("column_grouped_triton", kind="jit", diagnose=tile_fn_diagnosis,
                    gpu_case=lambda answer: _column_grouped_case(answer, 4, 5, 2), hints=Hints(
    nudge="you wrote this mapping in Python already: what has to change for it to run inside a kernel?",
    approach="the same integer arithmetic on pid, num_pid_m and num_pid_n; Python's min becomes tl.minimum; return "
             "the pair (pid_m, pid_n). A tile outside the grid is stopped by the checked run, with its lanes drawn",
    solution="in_group = GROUP_SIZE_N * num_pid_m; first_n = (pid // in_group) * GROUP_SIZE_N; "
             "cols = tl.minimum(num_pid_n - first_n, GROUP_SIZE_N); pid_n = first_n + (pid % in_group) % cols; "
             "pid_m = (pid % in_group) // cols; return pid_m, pid_n"))
def check_column_grouped_triton(column_grouped_triton):
    problems = []
    for num_pid_m, num_pid_n, group in COLUMN_GROUP_CASES:
        problems += _column_grouped_case(column_grouped_triton, num_pid_m, num_pid_n, group)
    return problems
