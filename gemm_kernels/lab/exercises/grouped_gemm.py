"""Checks for notebook 06 (grouped GEMM): the masks that fix the "assume full tiles" kernel, and
which tiles of which problems one program of the grouped launch computes."""

from __future__ import annotations

import numpy as np

from .. import teaching
from ...models.tiles import multi_problem_schedule
from ._core import call, exercise

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


@exercise("bounds_masks",
          hint="a lane may touch memory only inside its matrix: a_mask = (rows[:, None] < M) & (ks[None, :] < K), "
               "b_mask = (ks[:, None] < K) & (cols[None, :] < N), c_mask = (rows[:, None] < M) & (cols[None, :] < N)")
def check_bounds_masks(bounds_masks):
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
    # end to end: the kernel with these masks, on views inside sentinel-filled buffers
    group = teaching.sentinel_group(SENTINEL_SHAPES)
    call(teaching.pointer_array_matmul, group.group_a, group.group_b, group.group_c, masks=bounds_masks,
         what="pointer_array_matmul(..., masks=bounds_masks)")
    problems += [f"run on sentinel buffers: {d.describe()}" for d in teaching.damage_report(group) if not d.ok]
    return problems


# ----------------------------------------------------------------------------- exercise 2
#: (problem shapes (M, N), BLOCK_M, BLOCK_N, NUM_PROGRAMS): the seed tutorial's first table in
#: 128-tiles on 16 programs, ragged problems with an empty one, one problem, many small ones
WALK_CASES = [
    ([(128, 128), (256, 256), (512, 512), (1024, 1024)], 128, 128, 16),
    ([(40, 64), (0, 32), (64, 50), (20, 36)], 32, 32, 4),
    ([(100, 100)], 32, 32, 3),
    ([(32, 32)] * 10, 32, 32, 4),
    ([(96, 64), (32, 160)], 32, 32, 5),
]


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


@exercise("program_tiles",
          hint="lay the tiles of all problems end to end (problem 0's tiles first, each problem row-major); "
               "program pid computes global tiles pid, pid + NUM_PROGRAMS, ...; a problem of tiles [first, end) "
               "maps global tile t to local tile t - first, then (local // num_pid_n, local % num_pid_n)")
def check_program_tiles(program_tiles):
    problems = []
    for shapes, bm, bn, programs in WALK_CASES:
        total = sum(-(-M // bm) * -(-N // bn) for M, N in shapes)
        case = f"problems {', '.join(f'{M}x{N}' for M, N in shapes[:4])}{' ...' if len(shapes) > 4 else ''} " \
               f"in {bm}x{bn} tiles ({total} tiles), {programs} programs"
        wrong = []
        for pid in range(min(programs, total)):
            got = call(program_tiles, list(shapes), bm, bn, programs, pid)
            try:
                got = [tuple(int(v) for v in triple) for triple in got]
                if any(len(t) != 3 for t in got):
                    raise ValueError
            except (TypeError, ValueError):
                return [f"{case}: expected a list of (problem, pid_m, pid_n) triples, got {got!r}"]
            expected = program_tiles_ref(shapes, bm, bn, programs, pid)
            if got != expected:
                wrong.append((pid, expected, got))
        for pid, expected, got in wrong[:2]:
            if got == _restarting_walk(shapes, bm, bn, programs, pid):
                problems.append(f"{case}: program {pid}: your walk starts every problem again at program 0; the "
                                "tiles are laid end to end, so a problem's first tile goes to program "
                                "(its global index) % NUM_PROGRAMS")
            elif len(got) != len(expected):
                problems.append(f"{case}: program {pid}: expected {len(expected)} tiles, got {len(got)}")
            else:
                step = next(i for i, (e, g) in enumerate(zip(expected, got)) if e != g)
                e, g = expected[step], got[step]
                problems.append(f"{case}: program {pid}, step {step} (global tile {pid + step * programs}): expected "
                                f"problem {e[0]} tile ({e[1]}, {e[2]}), got problem {g[0]} tile ({g[1]}, {g[2]})")
        if len(wrong) > 2:
            problems.append(f"{case}: {len(wrong) - 2} more programs walk the wrong tiles")
    return problems
