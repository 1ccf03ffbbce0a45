"""Checks for notebook 01 (pointer arithmetic): block offsets, edge masks, a transpose kernel."""

from __future__ import annotations

import numpy as np
import torch

from ... import runtime
from ._core import AnswerShapeError, Hints, answer_array, call, compare_arrays, exercise


def block_offsets_ref(pid_m, pid_n, block_m, block_n, stride_m, stride_n) -> np.ndarray:
    """Offsets (in elements, from the matrix's first element) of block (pid_m, pid_n)."""
    rows = pid_m * block_m + np.arange(block_m)
    cols = pid_n * block_n + np.arange(block_n)
    return rows[:, None] * stride_m + cols[None, :] * stride_n


def block_mask_ref(pid_m, pid_n, block_m, block_n, M, N) -> np.ndarray:
    """True where block (pid_m, pid_n) lies inside an M x N matrix."""
    rows = pid_m * block_m + np.arange(block_m)
    cols = pid_n * block_n + np.arange(block_n)
    return (rows[:, None] < M) & (cols[None, :] < N)


# (description, pid_m, pid_n, BLOCK_M, BLOCK_N, stride_m, stride_n)
OFFSET_CASES = [
    ("6x8 row-major matrix", 1, 2, 2, 3, 8, 1),
    ("6x8 row-major matrix", 0, 0, 4, 4, 8, 1),
    ("transposed view of an 8x6 matrix", 1, 2, 2, 3, 1, 6),
    ("every other column of a 6x16 matrix", 2, 1, 2, 2, 16, 2),
    ("single row, 1x4 blocks", 0, 3, 1, 4, 100, 1),
]


@exercise("block_offsets", hints=Hints(
    nudge="which rows and which columns does block (pid_m, pid_n) cover? Each gets its own 1-D range first.",
    approach="build the block's row indices and column indices as two ranges, then combine them into a 2-D grid "
             "by broadcasting a column vector against a row vector, each index multiplied by its stride",
    solution="rows = pid_m * BLOCK_M + np.arange(BLOCK_M); cols = pid_n * BLOCK_N + np.arange(BLOCK_N); "
             "return rows[:, None] * stride_m + cols[None, :] * stride_n"))
def check_block_offsets(block_offsets):
    problems = []
    for desc, pm, pn, bm, bn, sm, sn in OFFSET_CASES:
        got = call(block_offsets, pm, pn, bm, bn, sm, sn)
        case = f"block ({pm}, {pn}) of {bm}x{bn}, strides ({sm}, {sn}) [{desc}]"
        problems += compare_arrays(block_offsets_ref(pm, pn, bm, bn, sm, sn), got, case,
                                   what="offset", index_names=("row", "col"))
    return problems


# (M, N, pid_m, pid_n, BLOCK_M, BLOCK_N)
MASK_CASES = [
    (5, 7, 0, 0, 4, 4),   # fully inside
    (5, 7, 1, 1, 4, 4),   # over the bottom and the right edge
    (5, 7, 1, 0, 4, 4),   # over the bottom edge only
    (5, 7, 0, 1, 4, 4),   # over the right edge only
    (1, 1, 0, 0, 4, 4),   # a 1x1 matrix in a 4x4 block
    (8, 3, 1, 1, 4, 2),   # a narrow matrix: one of the block's two columns is past N
]


@exercise("block_mask", hints=Hints(
    nudge="a lane may be past the bottom edge, past the right edge, or both: which conditions must hold for it "
          "to be inside?",
    approach="compute the block's rows and columns as in block_offsets, compare each with its limit, and combine "
             "the two comparisons with a logical and, broadcast to the block's shape",
    solution="rows = pid_m * BLOCK_M + np.arange(BLOCK_M); cols = pid_n * BLOCK_N + np.arange(BLOCK_N); "
             "return (rows[:, None] < M) & (cols[None, :] < N)"))
def check_block_mask(block_mask):
    problems = []
    for M, N, pm, pn, bm, bn in MASK_CASES:
        got = call(block_mask, pm, pn, bm, bn, M, N)
        case = f"M={M}, N={N}, block ({pm}, {pn}) of {bm}x{bn}"
        try:
            got_arr = answer_array(got, (bm, bn))
        except AnswerShapeError as exc:
            problems.append(f"{case}: expected a [{bm}, {bn}] bool array, got {exc}")
            continue
        if got_arr.dtype != bool:
            problems.append(f"{case}: expected a bool array, got dtype {got_arr.dtype}")
            continue
        problems += compare_arrays(block_mask_ref(pm, pn, bm, bn, M, N), got_arr, case,
                                   what="lane", index_names=("row", "col"))
    return problems


def _transpose_inputs():
    """Fresh storage per case, so a learner's kernel that writes into x cannot spoil later cases."""
    gen = torch.Generator().manual_seed(1)

    def base():
        return torch.randn(40, 66, generator=gen).to(runtime.DEVICE)

    yield "1x1", base()[:1, :1]
    yield "5x7", base()[:5, :7]
    yield "33x17", base()[:33, :17]
    yield "17x33 transposed view (strides (1, 66))", base()[:33, :17].t()
    yield "20x33 every other column (strides (66, 2))", base()[:20, ::2]


@exercise("transpose", hints=Hints(
    nudge="element (i, j) of x goes to (j, i) of the output: which addresses does one program read, and which does "
          "it write?",
    approach="one program per block of x: load it with x's strides and a 2-D mask, then store the same values at "
             "the output's addresses for (column, row), using the output's strides and the same mask",
    solution="rows = pid_m * BM + tl.arange(0, BM); cols = pid_n * BN + tl.arange(0, BN); "
             "mask = (rows[:, None] < M) & (cols[None, :] < N); "
             "x = tl.load(x_ptr + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask); "
             "tl.store(out_ptr + cols[None, :] * som + rows[:, None] * son, x, mask=mask)"))
def check_transpose(transpose):
    problems = []
    for desc, x in _transpose_inputs():
        before = x.clone()
        out = call(transpose, x)
        case = f"x {desc}"
        if not isinstance(out, torch.Tensor):
            problems.append(f"{case}: expected a tensor, got {type(out).__name__}")
            continue
        if not torch.equal(x, before):
            problems.append(f"{case}: your transpose changed x; write into a new tensor")
            continue
        if out.data_ptr() == x.data_ptr() or not out.is_contiguous():
            problems.append(f"{case}: return a new contiguous [N, M] tensor (x.t() is only a view of x)")
            continue
        problems += compare_arrays(before.t().double(), out.double(), case,
                                   index_names=("out row", "out col"))
    return problems
