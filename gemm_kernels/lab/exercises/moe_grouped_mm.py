"""Checks for notebook 07 (MoE grouped_mm): ``offs`` from per-expert counts, the tiles each
expert costs, the rows a tile computes only to throw away, and a kernel's expert lookup from
``offs`` with the store that stops at the expert's last row (:func:`run_expert_kernel`; compiled
for sm_90 too: see ``_kernel_checks``)."""

from __future__ import annotations

import numpy as np
import torch

from ... import runtime
from ...kernels.moe import grouped_mm_ref
from ...models.tiles import cdiv, problem_tile_starts
from . import _kernel_checks as kc
from ._core import AnswerShapeError, Hints, answer_array, call, plural, shown, unseen_cases, whole

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




def _draw_counts(rng) -> list[int]:
    """Rows routed to each of 1 to 8 experts, as COUNT_CASES lists them: up to 200 each, a third of them idle."""
    return [0 if rng.random() < 1 / 3 else rng.randint(1, 200) for _ in range(rng.randint(1, 8))]


# ----------------------------------------------------------------------------- exercise 1
@kc.reference
def offs_ref(counts) -> torch.Tensor:
    """What ``grouped_mm`` (and ``torch._grouped_mm``) want: int32 cumulative row ends, one per expert."""
    return torch.cumsum(torch.as_tensor(counts, dtype=torch.int64), 0).to(torch.int32)


@kc.plain_exercise("offs_from_counts", hints=Hints(
    nudge="offs[e] is the row just after expert e's last row: what is offs[-1], and what is offs[0]?",
    approach="a running total of the counts, one entry per expert (no leading 0), in the int32 that grouped_mm takes",
    solution="return torch.cumsum(counts, 0).to(torch.int32)"))
def check_offs_from_counts(offs_from_counts):
    problems = _offs_problems(offs_from_counts, COUNT_CASES)
    return problems or _offs_problems(offs_from_counts, unseen_cases(_draw_counts))


def _offs_problems(offs_from_counts, cases) -> list[str]:
    problems = []
    for counts in cases:
        case = f"counts {counts}"
        got = call(offs_from_counts, torch.tensor(counts, dtype=torch.int64))
        expected = offs_ref(counts)
        if not isinstance(got, torch.Tensor):
            problems.append(f"{case}: expected a torch.Tensor, got {type(got).__name__} {shown(got)}")
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


@kc.reference
def tiles_per_expert_ref(counts, N, block_m, block_n) -> np.ndarray:
    """Tiles of each expert, from the same tile starts the kernels use (``tiles.problem_tile_starts``)."""
    return np.diff(problem_tile_starts([(int(c), N) for c in counts], block_m, block_n))


@kc.plain_exercise("tiles_per_expert", hints=Hints(
    nudge="an expert with c rows is its own small GEMM: how many tiles does a c x N output need?",
    approach="tile rows and tile columns each round up; an expert with no rows has none",
    solution="return [cdiv(c, BLOCK_M) * cdiv(N, BLOCK_N) for c in counts]"))
def check_tiles_per_expert(tiles_per_expert):
    problems = _tiles_problems(tiles_per_expert, [(counts, *shape) for counts in COUNT_CASES for shape in TILE_SHAPES])
    return problems or _tiles_problems(tiles_per_expert, unseen_cases(lambda rng: (
        _draw_counts(rng), rng.randint(1, 5000), rng.choice([16, 32, 64, 128]), rng.choice([16, 32, 64, 128, 256]))))


def _tiles_problems(tiles_per_expert, cases) -> list[str]:
    """``cases``: (counts, N, BLOCK_M, BLOCK_N)."""
    problems, wrong = [], []
    for counts, N, bm, bn in cases:
        case = f"counts {counts}, N={N}, tiles {bm}x{bn}"
        got = call(tiles_per_expert, list(counts), N, bm, bn)
        expected = tiles_per_expert_ref(counts, N, bm, bn)
        try:  # never more of it than one number per expert and one more
            got = answer_array(got, expected.shape, np.int64).reshape(-1)
        except AnswerShapeError as exc:
            problems.append(f"{case}: expected {len(expected)} numbers (one per expert), got {exc}")
            continue
        except (TypeError, ValueError, OverflowError):
            problems.append(f"{case}: expected one number of tiles per expert, got {shown(got)}")
            continue
        if got.shape != expected.shape:
            problems.append(f"{case}: expected {len(expected)} numbers (one per expert), got {len(got)}")
            continue
        if (got != expected).any():
            wrong.append((case, counts, N, bm, bn, got, expected))

    def fits(formula, counts, N, bm, bn, got):
        return all(got[i] == formula(counts[i], N, bm, bn) for i in range(len(counts)))

    # the mistake that explains every wrong case at once (two formulas may agree on one case)
    everywhere = next((why for formula, why in _TILE_MISTAKES
                       if wrong and all(fits(formula, *w[1:6]) for w in wrong)), None)
    for case, counts, N, bm, bn, got, expected in wrong:
        bad = np.nonzero(got != expected)[0]
        e = int(bad[0])
        c = counts[e]
        why = everywhere or next((why for formula, why in _TILE_MISTAKES if fits(formula, counts, N, bm, bn, got)), "")
        if not why and c == 0 and got[e] > 0:
            why = ": an expert with no rows has no tiles"
        problems.append(f"{case}: expert {e} ({c} rows): expected {plural(int(expected[e]), 'tile')} = cdiv({c}, {bm}) "
                        f"x cdiv({N}, {bn}), got {got[e]}{why}"
                        + (f" ({len(bad) - 1} more experts wrong)" if len(bad) > 1 else ""))
    return problems


#: (the count a common mistake gives for an expert of c rows, why): matched against every expert
#: of a case at once, so a formula that agrees with the right one on some experts is not blamed
_TILE_MISTAKES = (
    (lambda c, N, bm, bn: cdiv(c, bm), ": only the tile rows are counted: each tile row has cdiv(N, BLOCK_N) tiles "
                                       "across the N columns"),
    (lambda c, N, bm, bn: cdiv(c, bm) * cdiv(N, bm), ": the tile columns are counted with BLOCK_M: N is cut in "
                                                    "BLOCK_N-wide tiles"),
    (lambda c, N, bm, bn: cdiv(c, bn) * cdiv(N, bn), ": the tile rows are counted with BLOCK_N: an expert's rows "
                                                    "are cut in BLOCK_M-high tiles"),
    (lambda c, N, bm, bn: (c // bm) * cdiv(N, bn), ": the rows are rounded down, but an expert's last partial "
                                                  "tile row needs tiles too (cdiv, not //)"),
    (lambda c, N, bm, bn: cdiv(c, bm) * (N // bn), ": the last tile column (N is not a multiple of BLOCK_N) "
                                                  "counts too (cdiv, not //)"),
    (lambda c, N, bm, bn: max(1, cdiv(c, bm)) * cdiv(N, bn), ": an expert with no rows has no tiles"),
)


# ----------------------------------------------------------------------------- exercise 3
PADDING_BLOCKS = [16, 32, 64, 128]


@kc.reference
def padded_rows_ref(counts, block_m) -> int:
    """Rows the kernel computes and never stores: each expert's last tile row, filled up to BLOCK_M."""
    return int(sum(cdiv(c, block_m) * block_m - c for c in counts))


@kc.plain_exercise("padded_rows", hints=Hints(
    nudge="only an expert's last tile row can be partly empty: how many of its BLOCK_M rows hold no token?",
    approach="per expert, the rows its tile rows cover minus the rows it really has; sum over the experts (an "
             "expert with no rows has no tile, hence no padding)",
    solution="return sum(cdiv(c, BLOCK_M) * BLOCK_M - c for c in counts)"))
def check_padded_rows(padded_rows):
    problems = _padding_problems(padded_rows, [(counts, bm) for counts in COUNT_CASES for bm in PADDING_BLOCKS])
    return problems or _padding_problems(padded_rows, unseen_cases(
        lambda rng: (_draw_counts(rng), rng.choice(PADDING_BLOCKS))))


def _padding_problems(padded_rows, cases) -> list[str]:
    """``cases``: (counts, BLOCK_M)."""
    problems = []
    for counts, bm in cases:
        case = f"counts {counts}, BLOCK_M={bm}"
        got = call(padded_rows, list(counts), bm)
        expected = padded_rows_ref(counts, bm)
        try:
            got = whole(got)
        except (TypeError, ValueError):
            problems.append(f"{case}: expected a whole number of rows, got {shown(got)}")
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


# ----------------------------------------------------------------------------- exercise 4: the expert's rows in a kernel
#: block sizes the check launches the learner's kernel with
EXPERT_BLOCKS = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}


def run_expert_kernel(kernel, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Launch ``kernel`` (the notebook's ``moe_tile_kernel`` signature) on a grid of (experts,
    tile rows of the busiest expert, tile columns); returns the output (NaN where nothing was stored)."""
    T, K = x.shape
    E, _, N = w.shape
    out = torch.full((T, N), float("nan"), dtype=x.dtype, device=x.device)
    counts = torch.diff(offs.to(torch.int64).cpu(), prepend=torch.zeros(1, dtype=torch.int64))
    grid = (E, max(1, cdiv(int(counts.max()), EXPERT_BLOCKS["BLOCK_M"])), cdiv(N, EXPERT_BLOCKS["BLOCK_N"]))
    kernel[grid](x, w, out, offs, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2),
                 out.stride(0), out.stride(1), **EXPERT_BLOCKS)
    return out


#: (counts per expert, N, K): ragged with idle experts (first, middle, last), one expert, every
#: count a multiple of BLOCK_M
EXPERT_CASES = [([20, 0, 7, 33, 0], 24, 16), ([5], 17, 8), ([0, 16, 32], 16, 24), ([3, 18, 1, 0, 9], 20, 40)]


def _expert_case(kernel, counts, N, K, seed) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    dtype = torch.float16
    T, E = sum(counts), len(counts)
    x = torch.randn(T, K, generator=gen).to(runtime.DEVICE, dtype)
    w = torch.randn(E, K, N, generator=gen).to(runtime.DEVICE, dtype)
    offs = offs_ref(counts).to(runtime.DEVICE)
    case = f"counts {counts}, N={N}, K={K}"
    out = call(run_expert_kernel, kernel, x, w, offs, what=f"your kernel ({case})")
    ref = grouped_mm_ref(x, w, offs, out_dtype=torch.float64).cpu()
    got = out.double().cpu()
    bad = ~torch.isclose(got, ref, atol=5e-2, rtol=1e-2)
    problems = []
    if not bad.any():
        return problems
    for e in range(E):
        start, end = int(sum(counts[:e])), int(sum(counts[:e + 1]))
        rows = torch.nonzero(bad[start:end].any(1)).flatten()
        if not len(rows):
            continue
        never = bool(torch.isnan(got[start:end][rows]).all())
        problems.append(f"{case}: expert {e} (rows {start}..{end - 1}): rows "
                        f"{start + int(rows.min())}..{start + int(rows.max())} "
                        + ("never written: check the expert's first row and the store mask" if never else
                           "wrong: an expert's tile computed other rows, or another expert's tile wrote over them")
                        + f" ({plural(int(bad[start:end].sum()), 'element')})")
    return problems


def _expert_rows_diagnosis(log, failure) -> list[str]:
    """A store past ``out``'s last row comes from a row limit that is not the expert's own end."""
    from ..checked import OutOfBounds

    if not isinstance(failure, OutOfBounds) or failure.access.kind != "store" or failure.access.pointer != "out_ptr":
        return []
    if not any("needs the row limit" in line for line in kc.access_diagnosis(failure, log)):
        return []  # not the rows (the columns, say): the generic diagnosis says which
    return ["rows past the last expert's end are stored: the store's row limit is this expert's own end, "
            "row_end = offs[expert] (rows[:, None] < row_end), not out's row count: rows past an expert's end "
            "belong to the next expert, and past the last expert's, to no one"]


@kc.kernel_exercise("expert_rows_kernel", kind="kernel", diagnose=_expert_rows_diagnosis,
                    gpu_case=lambda kernel: _expert_case(kernel, *EXPERT_CASES[0], seed=7), hints=Hints(
    nudge="program_id(0) is the expert: where do its rows start and end in x and out, given offs?",
    approach="offs[e] is the row after expert e's last row, so its rows are [offs[e - 1], offs[e]) with 0 before "
             "expert 0 (a load masked on e > 0 never touches offs[-1]); the store keeps only rows below that end "
             "and columns below N",
    solution="row_start = tl.load(offs_ptr + expert - 1, mask=expert > 0, other=0); row_end = tl.load(offs_ptr + "
             "expert); ... mask = (rows[:, None] < row_end) & (cols[None, :] < N)"))
def check_expert_rows_kernel(kernel):
    problems = []
    for n, (counts, N, K) in enumerate(EXPERT_CASES):
        problems += _expert_case(kernel, counts, N, K, seed=7 + n)
        if problems:
            break
    return problems
