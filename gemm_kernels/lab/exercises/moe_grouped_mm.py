"""Checks for notebook 07 (MoE grouped_mm): ``offs`` from per-expert counts, the tiles each
expert costs, and the rows a tile computes only to throw away."""

from __future__ import annotations

import numpy as np
import torch

from ...models.tiles import cdiv, problem_tile_starts
from ._core import call, exercise

#: rows routed to each expert: skewed with idle experts, uniform, one busy expert, a single expert,
#: every expert idle but one at the end
COUNT_CASES = [
    [50, 32, 0, 12, 6, 0, 5, 3],
    [16, 16, 16, 16],
    [0, 0, 100, 0],
    [7],
    [0, 0, 0, 1],
    [129, 1, 64, 63, 65, 0, 2, 31],
]


# ----------------------------------------------------------------------------- exercise 1
def offs_ref(counts) -> torch.Tensor:
    """What ``grouped_mm`` (and ``torch._grouped_mm``) want: int32 cumulative row ends, one per expert."""
    return torch.cumsum(torch.as_tensor(counts, dtype=torch.int64), 0).to(torch.int32)


@exercise("offs_from_counts",
          hint="offs[e] is the row *after* expert e's last row: torch.cumsum(counts, 0), one entry per expert "
               "(offs[-1] == T), converted to int32 with .to(torch.int32)")
def check_offs_from_counts(offs_from_counts):
    problems = []
    for counts in COUNT_CASES:
        case = f"counts {counts}"
        got = call(offs_from_counts, torch.tensor(counts, dtype=torch.int64))
        expected = offs_ref(counts)
        if not isinstance(got, torch.Tensor):
            problems.append(f"{case}: expected a torch.Tensor, got {type(got).__name__} {got!r}")
            continue
        if got.dtype != torch.int32:
            problems.append(f"{case}: offs has dtype {str(got.dtype).replace('torch.', '')}; grouped_mm and "
                            "torch._grouped_mm take int32 offsets (.to(torch.int32))")
            continue
        values = got.detach().cpu().flatten().tolist()
        want = expected.tolist()
        if got.dim() != 1 or values != want:
            why = ""
            starts = [0] + want[:-1]
            if values == starts:
                why = " (those are the row starts, an exclusive prefix sum: offs holds the row *ends*)"
            elif values == [0] + want:
                why = " (one entry per expert: no leading 0)"
            elif values == list(counts):
                why = " (those are the counts themselves: accumulate them)"
            problems.append(f"{case}: expected offs {want}, got {values}{why}")
    return problems


# ----------------------------------------------------------------------------- exercise 2
#: (N, BLOCK_M, BLOCK_N) pairs the checks try with every COUNT_CASES routing
TILE_SHAPES = [(64, 32, 32), (100, 64, 128), (4096, 128, 128)]


def tiles_per_expert_ref(counts, N, block_m, block_n) -> np.ndarray:
    """Tiles of each expert, from the same tile starts the kernels use (``tiles.problem_tile_starts``)."""
    return np.diff(problem_tile_starts([(int(c), N) for c in counts], block_m, block_n))


@exercise("tiles_per_expert",
          hint="an expert with c rows is a c x N GEMM: cdiv(c, BLOCK_M) tile rows times cdiv(N, BLOCK_N) tile "
               "columns; an expert with no rows has no tiles at all")
def check_tiles_per_expert(tiles_per_expert):
    problems = []
    for counts in COUNT_CASES:
        for N, bm, bn in TILE_SHAPES:
            case = f"counts {counts}, N={N}, tiles {bm}x{bn}"
            got = call(tiles_per_expert, list(counts), N, bm, bn)
            expected = tiles_per_expert_ref(counts, N, bm, bn)
            try:
                got = np.asarray(got, dtype=np.int64).reshape(-1)
            except (TypeError, ValueError):
                problems.append(f"{case}: expected one number of tiles per expert, got {got!r}")
                continue
            if got.shape != expected.shape:
                problems.append(f"{case}: expected {len(expected)} numbers (one per expert), got {len(got)}")
                continue
            bad = np.nonzero(got != expected)[0]
            if not len(bad):
                continue
            e = int(bad[0])
            c = counts[e]
            why = ""
            if c == 0 and got[e] > 0:
                why = ": an expert with no rows has no tiles"
            elif got[e] == (c // bm) * cdiv(N, bn) or got[e] == (c // bm) * (N // bn):
                why = f": rounded down, but its last {c % bm} rows need a tile too" if c % bm else ": N rounded down"
            elif got[e] == cdiv(c, bm) * (N // bn):
                why = ": the last tile column (N is not a multiple of BLOCK_N) counts too"
            problems.append(f"{case}: expert {e} ({c} rows): expected {expected[e]} tiles = cdiv({c}, {bm}) x "
                            f"cdiv({N}, {bn}), got {got[e]}{why}"
                            + (f" ({len(bad) - 1} more experts wrong)" if len(bad) > 1 else ""))
    return problems


# ----------------------------------------------------------------------------- exercise 3
PADDING_BLOCKS = [16, 32, 64, 128]


def padded_rows_ref(counts, block_m) -> int:
    """Rows the kernel computes and never stores: each expert's last tile row, filled up to BLOCK_M."""
    return int(sum(cdiv(c, block_m) * block_m - c for c in counts))


@exercise("padded_rows",
          hint="an expert with c rows gets cdiv(c, BLOCK_M) tile rows of BLOCK_M rows each: "
               "cdiv(c, BLOCK_M) * BLOCK_M - c of them are padding (0 for an expert with no rows)")
def check_padded_rows(padded_rows):
    problems = []
    for counts in COUNT_CASES:
        for bm in PADDING_BLOCKS:
            case = f"counts {counts}, BLOCK_M={bm}"
            got = call(padded_rows, list(counts), bm)
            expected = padded_rows_ref(counts, bm)
            try:
                got = int(got)
            except (TypeError, ValueError):
                problems.append(f"{case}: expected a number of rows, got {got!r}")
                continue
            if got == expected:
                continue
            why = ""
            if got == sum(bm - c % bm for c in counts):
                why = (" (that adds BLOCK_M - c % BLOCK_M for every expert, but an expert whose rows fill whole "
                       "tiles, c % BLOCK_M == 0, has no padding, and one with no rows has no tile at all)")
            elif got == expected + bm * sum(1 for c in counts if c == 0):
                why = " (an expert with no rows has no tile, hence no padding)"
            per = [cdiv(c, bm) * bm - c for c in counts]
            problems.append(f"{case}: expected {expected} padded rows (per expert {per}), got {got}{why}")
    return problems
