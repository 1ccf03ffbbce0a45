"""Checks for notebook 06 (grouped GEMM): the masks that fix the "assume full tiles" kernel,
which tiles of which problems one program of the grouped launch computes, and the device-side
lookup tile -> (problem, pid_m, pid_n) inside a grouped kernel (:func:`run_grouped_lookup`); the
``@triton.jit`` answers are compiled for sm_90 too (``_kernel_checks``)."""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from .. import teaching
from ... import runtime
from ...kernels.epilogue import mma_operand, widen_for_dot
from ...kernels.grouped import TL_DTYPES
from ...kernels.tiles import record_tile
from ...models.tiles import multi_problem_schedule, problem_tile_starts
from ...kernels.tiles import locate_problem, locate_problem_in_ends
from ..checked import OutOfBounds
from . import _kernel_checks as kc
from ._core import Hints, call, out_of_bounds_result, plural, read_items, shown, unseen_cases, whole
from .persistent_tma import compare_schedule

# ----------------------------------------------------------------------------- exercise 1
#: (row0, col0, k0, M, N, K): the blocks a tile loads and stores, inside and across every edge
MASK_CASES = [
    (0, 0, 0, 64, 64, 64),      # a whole tile: every lane in
    (32, 0, 0, 40, 64, 64),     # rows 40..63 past M
    (0, 32, 0, 64, 50, 64),     # columns 50..63 past N
    (0, 0, 32, 64, 64, 40),     # K indices 40..63 past K
    (0, 32, 32, 20, 36, 40),    # past all three edges at once
    (32, 32, 0, 33, 33, 1),     # one row, one column, one K index left
]
#: the problems of the end-to-end run: whole tiles, each edge ragged alone, all ragged
SENTINEL_SHAPES = [(64, 64, 64), (40, 64, 64), (64, 50, 64), (64, 64, 40), (20, 36, 40)]


def _mask_problems(name, got, expected, index_names, limits, matrix, case):
    """Lines for one mask: which lanes are wrong, and what that does."""
    bad = got != expected
    if not bad.any():
        return []
    lines = []
    if got.shape == expected.shape and np.array_equal(got, _transposed(expected, index_names, limits)):
        (_, i_name), (_, j_name) = index_names
        i_var, j_var = _VARIABLES[i_name], _VARIABLES[j_name]
        return [f"{case}: {name} is transposed: {i_var} go down the block ({i_var}[:, None] < {limits[0][0]}) and "
                f"{j_var} across ({j_var}[None, :] < {limits[1][0]}); yours compares them the other way round"]
    (i0, i_name), (j0, j_name) = index_names
    extra = np.argwhere(got & ~expected)   # lanes switched on outside the matrix
    missing = np.argwhere(~got & expected)  # lanes switched off inside it
    if len(extra):
        i, j = extra[0]
        gi, gj = i0 + i, j0 + j
        why = " and ".join(f"{n} {v} >= {lim_name} = {lim}" for n, v, (lim_name, lim) in
                           ((i_name, gi, limits[0]), (j_name, gj, limits[1])) if v >= lim)
        verb = "stores past the end of" if name == "c_mask" else "reads past the end of"
        lines.append(f"{case}: {name} has {len(extra)} lanes on outside {matrix}, e.g. ({i_name} {gi}, {j_name} {gj}): "
                     f"{why}; that {verb} {matrix}")
    if len(missing):
        i, j = missing[0]
        verb = "is never stored" if name == "c_mask" else "is never loaded (it reads as 0)"
        lines.append(f"{case}: {name} has {len(missing)} lanes off inside {matrix}, e.g. ({i_name} {i0 + i}, "
                     f"{j_name} {j0 + j}): that element {verb}")
    return lines


#: the index vectors the exercise's function receives, by the name the feedback gives them
_VARIABLES = {"row": "rows", "k": "ks", "column": "cols"}


def _transposed(expected, index_names, limits):
    """The mask a transposed broadcast gives: lane (i, j) on by index j's first limit and index i's second."""
    (i0, _), (j0, _) = index_names
    (_, lim_i), (_, lim_j) = limits
    n_i, n_j = expected.shape
    first = (i0 + np.arange(n_j)) < lim_i   # the first index vector, laid across the block
    second = (j0 + np.arange(n_i)) < lim_j  # the second, laid down it
    return second[:, None] & first[None, :]


def _mask_cases(bounds_masks) -> list[str]:
    problems = []
    for row0, col0, k0, M, N, K in MASK_CASES:
        case = (f"M={M}, N={N}, K={K}, block at row {row0}, column {col0}, K index {k0}")
        got = call(teaching.record_masks, bounds_masks, row0, col0, k0, M, N, K,
                   what=f"a kernel calling bounds_masks ({case})")
        expected = teaching.expected_masks(row0, col0, k0, M, N, K)
        for name, g, e, idx, limits, matrix in [
            ("a_mask", got[0], expected[0], ((row0, "row"), (k0, "k")), (("M", M), ("K", K)), "A"),
            ("b_mask", got[1], expected[1], ((k0, "k"), (col0, "column")), (("K", K), ("N", N)), "B"),
            ("c_mask", got[2], expected[2], ((row0, "row"), (col0, "column")), (("M", M), ("N", N)), "C"),
        ]:
            problems += _mask_problems(name, g, e, idx, limits, matrix, case)
    return problems


@kc.kernel_exercise("bounds_masks", kind="jit", gpu_case=_mask_cases,
                    hints=Hints(
    nudge="each of the three blocks has two index vectors: which limit does each index have?",
    approach="A's block is indexed by (rows, ks), B's by (ks, cols), C's by (rows, cols); a lane is inside when both "
             "of its indices are below their limits; broadcast a column of one comparison against a row of the other",
    solution="a_mask = (rows[:, None] < M) & (ks[None, :] < K); b_mask = (ks[:, None] < K) & (cols[None, :] < N); "
             "c_mask = (rows[:, None] < M) & (cols[None, :] < N); return a_mask, b_mask, c_mask"))
def check_bounds_masks(bounds_masks):
    problems = _mask_cases(bounds_masks)
    # end to end: the kernel with these masks, on views inside sentinel-filled buffers, checked: the
    # kernel reaches A, B and C through pointer arrays, so their views are named as reachable
    group = teaching.sentinel_group(SENTINEL_SHAPES)
    try:
        with kc.recording(reachable=_views(group.group_a, group.group_b, group.group_c)):
            teaching.pointer_array_matmul(group.group_a, group.group_b, group.group_c, masks=bounds_masks)
    except OutOfBounds as err:
        result = out_of_bounds_result("bounds_masks", err, "pointer_array_matmul(..., masks=bounds_masks)")
        generic = "check the offsets and loop bounds"  # the masks' own lines say what is wrong
        result.details = problems + [d for d in result.details if not (problems and generic in d)]
        return result
    problems += [f"run on sentinel buffers: {d.describe()}" for d in teaching.damage_report(group) if not d.ok]
    return problems


def _views(group_a, group_b, group_c) -> dict:
    """{name: tensor} of every problem's A, B and C, as a checked run names them."""
    out = {}
    for g, (a, b, c) in enumerate(zip(group_a, group_b, group_c)):
        out.update({f"A[{g}]": a, f"B[{g}]": b, f"C[{g}]": c})
    return out


# ----------------------------------------------------------------------------- exercise 2
#: (problem shapes (M, N), BLOCK_M, BLOCK_N, NUM_PROGRAMS): the seed tutorial's first table in
#: 128-tiles on 16 programs, ragged problems with an empty one in the middle, one problem, many
#: small ones; blocks that are not square, both ways, so BLOCK_M taken for BLOCK_N shows
WALK_CASES = [
    ([(128, 128), (256, 256), (512, 512), (1024, 1024)], 128, 128, 16),
    ([(40, 64), (0, 32), (64, 50), (20, 36)], 32, 16, 4),
    ([(100, 100)], 32, 32, 3),
    ([(32, 32)] * 10, 32, 32, 4),
    ([(96, 64), (32, 160)], 16, 64, 5),
]


@kc.reference
def program_tiles_ref(shapes, block_m, block_n, num_programs, pid):
    """(problem, pid_m, pid_n) of every tile program ``pid`` computes, in order (row-major inside
    each problem, as ``teaching.pointer_array_matmul`` walks them)."""
    table = multi_problem_schedule(shapes, block_m, block_n, num_programs, "row_major")
    return [tuple(int(v) for v in row) for row in table[table[:, 1] == pid][:, 3:6]]


def _restarting_walk(shapes, block_m, block_n, num_programs, pid):
    """The classic mistake: every problem's walk starts again at program 0."""
    out = []
    for g, (M, N) in enumerate(shapes):
        num_pid_n = -(-N // block_n)
        for t in range(pid, -(-M // block_m) * num_pid_n, num_programs):
            out.append((g, t // num_pid_n, t % num_pid_n))
    return out


def _column_major_walk(shapes, block_m, block_n, num_programs, pid):
    """The other common mistake: each problem's tiles numbered down the columns."""
    laid_out = []
    for g, (M, N) in enumerate(shapes):
        num_pid_m = -(-M // block_m)
        laid_out += [(g, local % num_pid_m, local // num_pid_m) for local in range(num_pid_m * -(-N // block_n))]
    return laid_out[pid::num_programs]


def _grouped_models():
    """The package's functions that compute a grouped walk: an answer calling one is refused."""
    from .. import traces
    from ...models import schedule

    return multi_problem_schedule, schedule.grouped_gemm_schedule, traces.trace_grouped_schedule


@kc.plain_exercise("program_tiles", forbid=lambda: _grouped_models(), hints=Hints(
    nudge="lay all the problems' tiles end to end (problem 0's first, each problem's numbered along its rows): "
          "which of them does program pid take?",
    approach="number the tiles of every problem in one sequence (problem 0's first, each problem row-major); program "
             "pid takes every NUM_PROGRAMS-th of them from pid on; translate each global tile back into its problem "
             "and the tile inside that problem",
    solution="starts = running sum of cdiv(M, BM) * cdiv(N, BN); for t in range(pid, total, NUM_PROGRAMS): g = last "
             "problem with starts[g] <= t; local = t - starts[g]; n = cdiv(N_g, BN); yield (g, local // n, local % n)"))
def check_program_tiles(program_tiles):
    problems = _program_tiles_problems(program_tiles, WALK_CASES)
    return problems or _program_tiles_problems(program_tiles, unseen_cases(_draw_walk_case))


def _draw_walk_case(rng) -> tuple:
    """One to five problems of up to 160 x 160 (an empty one now and then) in blocks of 16 to 64, on 1 to 9
    programs, as WALK_CASES lists them."""
    shapes = [(0 if rng.random() < 0.1 else rng.randint(1, 160), rng.randint(1, 160))
              for _ in range(rng.randint(1, 5))]
    return shapes, rng.choice([16, 32, 64]), rng.choice([16, 32, 64]), rng.randint(1, 9)


def _program_tiles_problems(program_tiles, cases) -> list[str]:
    problems = []
    for shapes, bm, bn, programs in cases:
        total = sum(-(-M // bm) * -(-N // bn) for M, N in shapes)
        case = f"problems {', '.join(f'{M}x{N}' for M, N in shapes[:4])}{' ...' if len(shapes) > 4 else ''} " \
               f"in {bm}x{bn} tiles ({plural(total, 'tile')}), {plural(programs, 'program')}"
        wrong = []
        for pid in range(min(programs, total)):
            answer = call(program_tiles, list(shapes), bm, bn, programs, pid)
            expected = program_tiles_ref(shapes, bm, bn, programs, pid)
            try:  # never more than one triple past the expected ones: an endless answer is not read to its end
                got = read_items(answer, len(expected), inner=3).mapped(lambda triple: tuple(whole(v) for v in triple))
                if any(len(t) != 3 for t in got):
                    raise ValueError
            except (TypeError, ValueError, OverflowError):
                return [f"{case}: expected a list of (problem, pid_m, pid_n) triples, got {shown(answer)}"]
            if got != expected:
                wrong.append((pid, expected, got))
        floored = [(M - M % bm, N - N % bn) for M, N in shapes]  # what floor division counts: whole tiles only
        for pid, expected, got in wrong[:2]:
            if floored != list(shapes) and got == program_tiles_ref(floored, bm, bn, programs, pid):
                problems.append(f"{case}: program {pid}: the partial tiles at the problems' edges are left out: "
                                "M // block_m counts whole tiles only; a problem has cdiv(M, block_m) * "
                                "cdiv(N, block_n) tiles (triton.cdiv, or -(-M // block_m))")
            elif got == _restarting_walk(shapes, bm, bn, programs, pid):
                problems.append(f"{case}: program {pid}: your walk starts every problem again at program 0; the "
                                "tiles are laid end to end, so a problem's first tile goes to program "
                                "(its global index) % NUM_PROGRAMS")
            elif got == _column_major_walk(shapes, bm, bn, programs, pid):
                problems.append(f"{case}: program {pid}: your tiles inside each problem are numbered down the "
                                "columns (column-major); the teaching kernel numbers them along the rows: local "
                                "tile t of a problem is (t // num_pid_n, t % num_pid_n), with num_pid_n = "
                                "cdiv(N, block_n)")
            elif len(got) != len(expected):
                problems.append(f"{case}: program {pid}: expected {len(expected)} tiles, got {got.count_text()}")
            else:
                step = next(i for i, (e, g) in enumerate(zip(expected, got)) if e != g)
                e, g = expected[step], got[step]
                problems.append(f"{case}: program {pid}, step {step} (global tile {pid + step * programs}): expected "
                                f"problem {e[0]} tile ({e[1]}, {e[2]}), got problem {g[0]} tile ({g[1]}, {g[2]})")
        if len(wrong) > 2:
            problems.append(f"{case}: {len(wrong) - 2} more programs walk the wrong tiles")
        if problems:
            break  # one case at a time: the next one after this one passes
    return problems


# ----------------------------------------------------------------------------- exercise 3: the lookup inside the kernel
#: block sizes of the grouped kernel the learner's lookup runs in (not square: BLOCK_M taken for
#: BLOCK_N shows)
LOOKUP_BLOCKS = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16}


@triton.jit
def _grouped_lookup_kernel(a_ptrs, b_ptrs, c_ptrs, sizes, tile_starts, num_problems, trace_ptr,
                           DTYPE: tl.constexpr, NUM_PROGRAMS: tl.constexpr, FIND_TILE: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           WIDEN: tl.constexpr):
    """A grouped GEMM whose tile -> (problem, pid_m, pid_n) lookup is the learner's FIND_TILE:
    program p computes global tiles p, p + NUM_PROGRAMS, ... (contiguous rows: lds = N or K)."""
    total = tl.load(tile_starts + num_problems)
    for tile in range(tl.program_id(0), total, NUM_PROGRAMS):
        problem, pid_m, pid_n = FIND_TILE(tile, tile_starts, sizes, num_problems, BLOCK_M, BLOCK_N)
        record_tile(trace_ptr, tile, tl.program_id(0), problem, pid_m, pid_n)
        M = tl.load(sizes + 3 * problem)
        N = tl.load(sizes + 3 * problem + 1)
        K = tl.load(sizes + 3 * problem + 2)
        a_ptr = tl.load(a_ptrs + problem).to(tl.pointer_type(DTYPE))
        b_ptr = tl.load(b_ptrs + problem).to(tl.pointer_type(DTYPE))
        c_ptr = tl.load(c_ptrs + problem).to(tl.pointer_type(DTYPE))
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K),
                        other=0.0)
            b = tl.load(b_ptr + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N),
                        other=0.0)
            acc = tl.dot(mma_operand(a, WIDEN), mma_operand(b, WIDEN), acc)
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(DTYPE), mask=(rows[:, None] < M) & (cols[None, :] < N))


def run_grouped_lookup(find_tile, shapes, num_programs: int, *, seed: int = 0):
    """Run the grouped kernel with ``find_tile`` on random fp16 problems of ``shapes`` ((M, N, K)
    each); returns ``(group_a, group_b, group_c, trace)``, trace int32 [tiles, 4] on the CPU with
    (program, problem, pid_m, pid_n) per global tile (-1: not recorded)."""
    gen = torch.Generator().manual_seed(seed)
    dtype = torch.float16
    group_a = [torch.randn(M, K, generator=gen).to(runtime.DEVICE, dtype) for M, N, K in shapes]
    group_b = [torch.randn(K, N, generator=gen).to(runtime.DEVICE, dtype) for M, N, K in shapes]
    group_c = [torch.full((M, N), float("nan"), dtype=dtype, device=runtime.DEVICE) for M, N, K in shapes]
    starts = problem_tile_starts(shapes, LOOKUP_BLOCKS["BLOCK_M"], LOOKUP_BLOCKS["BLOCK_N"])
    total = int(starts[-1])
    trace = torch.full((max(total, 1), 4), -1, dtype=torch.int32, device=runtime.DEVICE)

    def pointers(group):
        return torch.tensor([t.data_ptr() for t in group], dtype=torch.int64).to(runtime.DEVICE)

    sizes = torch.tensor(list(shapes), dtype=torch.int32).to(runtime.DEVICE)
    tile_starts = torch.tensor(starts, dtype=torch.int32).to(runtime.DEVICE)
    with kc.recording(reachable=_views(group_a, group_b, group_c)):
        _grouped_lookup_kernel[(num_programs,)](
            pointers(group_a), pointers(group_b), pointers(group_c), sizes, tile_starts, len(shapes), trace,
            DTYPE=TL_DTYPES[dtype], NUM_PROGRAMS=num_programs, FIND_TILE=find_tile,
            WIDEN=widen_for_dot(dtype), **LOOKUP_BLOCKS)
    return group_a, group_b, group_c, trace[:total].cpu()


#: (problem shapes (M, N, K), programs): ragged problems with an empty one in the middle and at
#: the end, one problem, many small ones
LOOKUP_CASES = [
    ([(40, 20, 16), (0, 16, 16), (17, 33, 8), (16, 16, 16)], 3),
    ([(33, 40, 24)], 4),
    ([(16, 16, 16)] * 5 + [(0, 32, 16)], 2),
]


def _find_tile_case(find_tile, shapes, programs) -> list[str]:
    bm, bn = LOOKUP_BLOCKS["BLOCK_M"], LOOKUP_BLOCKS["BLOCK_N"]
    case = f"problems {', '.join(f'{M}x{N}x{K}' for M, N, K in shapes)} in {bm}x{bn} tiles, {plural(programs, 'program')}"
    a, b, c, trace = call(run_grouped_lookup, find_tile, shapes, programs, what=f"the grouped kernel ({case})")
    expected = multi_problem_schedule(shapes, bm, bn, programs, "row_major")
    problems = compare_schedule(trace.numpy(), expected, case, problem_names=True)
    for g, (ag, bg, cg) in enumerate(zip(a, b, c)):
        ref = ag.double() @ bg.double()
        bad = ~torch.isclose(cg.double(), ref, atol=5e-2, rtol=1e-2)
        if bad.any():
            rows, cols = torch.nonzero(bad, as_tuple=True)
            problems.append(f"{case}: problem {g}: {int(bad.sum())} of {plural(bad.numel(), 'element')} of C wrong (rows "
                            f"{int(rows.min())}..{int(rows.max())}, cols {int(cols.min())}..{int(cols.max())})")
    return problems


@kc.kernel_exercise("find_tile", kind="jit", forbid=(locate_problem, locate_problem_in_ends),
                    gpu_case=lambda answer: _find_tile_case(answer, *LOOKUP_CASES[0]), hints=Hints(
    nudge="tile_starts[g] is the first global tile of problem g (tile_starts[num_problems] is the total): which g "
          "owns a given tile?",
    approach="the tile's problem is the last g with tile_starts[g] <= tile (an empty problem owns no tile, so the "
             "next one wins); subtract that problem's first tile and split the rest row-major with its cdiv(N, "
             "BLOCK_N) tile columns (N from sizes[3 * g + 1])",
    solution="problem = 0; for g in range(num_problems): if tl.load(tile_starts_ptr + g) <= tile: problem = g  -- "
             "then local = tile - tl.load(tile_starts_ptr + problem); num_pid_n = tl.cdiv(tl.load(sizes_ptr + 3 * "
             "problem + 1), BLOCK_N); return problem, local // num_pid_n, local % num_pid_n"))
def check_find_tile(find_tile):
    problems = []
    for shapes, programs in LOOKUP_CASES:
        problems += _find_tile_case(find_tile, shapes, programs)
        if problems:
            break
    return problems
