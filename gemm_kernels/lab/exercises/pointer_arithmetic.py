"""Checks for notebook 01 (pointer arithmetic): block offsets, edge masks, a transpose kernel (the
learner's own, compiled for sm_90: see ``_kernel_checks``)."""

from __future__ import annotations

import numpy as np
import torch

from ... import runtime
from . import _kernel_checks as kc
from ._core import AnswerShapeError, Hints, answer_array, call, compare_arrays, unseen_cases


@kc.reference
def block_offsets_ref(pid_m, pid_n, block_m, block_n, stride_m, stride_n) -> np.ndarray:
    """Offsets (in elements, from the matrix's first element) of block (pid_m, pid_n)."""
    rows = pid_m * block_m + np.arange(block_m)
    cols = pid_n * block_n + np.arange(block_n)
    return rows[:, None] * stride_m + cols[None, :] * stride_n


@kc.reference
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


@kc.plain_exercise("block_offsets", hints=Hints(
    nudge="which rows and which columns does block (pid_m, pid_n) cover? Each gets its own 1-D range first.",
    approach="build the block's row indices and column indices as two ranges, then combine them into a 2-D grid "
             "by broadcasting a column vector against a row vector, each index multiplied by its stride",
    solution="rows = pid_m * BLOCK_M + np.arange(BLOCK_M); cols = pid_n * BLOCK_N + np.arange(BLOCK_N); "
             "return rows[:, None] * stride_m + cols[None, :] * stride_n"))
def check_block_offsets(block_offsets):
    problems = _offsets_problems(block_offsets, OFFSET_CASES)
    return problems or _offsets_problems(block_offsets, unseen_cases(lambda rng: (
        "unseen", rng.randint(0, 9), rng.randint(0, 9), rng.choice([1, 2, 4, 8, 16]), rng.choice([1, 2, 4, 8, 16]),
        rng.randint(1, 500), rng.randint(1, 500))))


def _offsets_problems(block_offsets, cases) -> list[str]:
    problems = []
    for desc, pm, pn, bm, bn, sm, sn in cases:
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


@kc.plain_exercise("block_mask", hints=Hints(
    nudge="a lane may be past the bottom edge, past the right edge, or both: which conditions must hold for it "
          "to be inside?",
    approach="compute the block's rows and columns as in block_offsets, compare each with its limit, and combine "
             "the two comparisons with a logical and, broadcast to the block's shape",
    solution="rows = pid_m * BLOCK_M + np.arange(BLOCK_M); cols = pid_n * BLOCK_N + np.arange(BLOCK_N); "
             "return (rows[:, None] < M) & (cols[None, :] < N)"))
def check_block_mask(block_mask):
    problems = _mask_problems(block_mask, MASK_CASES)
    return problems or _mask_problems(block_mask, unseen_cases(lambda rng: (
        rng.randint(1, 40), rng.randint(1, 40), rng.randint(0, 5), rng.randint(0, 5), rng.choice([1, 2, 4, 8]),
        rng.choice([1, 2, 4, 8]))))


def _mask_problems(block_mask, cases) -> list[str]:
    problems = []
    for M, N, pm, pn, bm, bn in cases:
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


def _transpose_case(transpose, desc: str, x: torch.Tensor) -> list[str]:
    before = x.clone()
    out = call(transpose, x, inputs_checked=True)
    case = f"x {desc}"
    if not isinstance(out, torch.Tensor):
        return [f"{case}: expected a tensor, got {type(out).__name__}"]
    if not torch.equal(x, before):
        return [f"{case}: your transpose changed x; write into a new tensor"]
    if out.data_ptr() == x.data_ptr() or not out.is_contiguous():
        return [f"{case}: return a new contiguous [N, M] tensor (x.t() is only a view of x)"]
    lines = compare_arrays(before.t().double(), out.double(), case, index_names=("out row", "out col"))
    if lines:
        log = kc.current_log()
        lines += [f"diagnosis: {d}" for d in _swapped_programs(x, out, log.last_learner() if log else None)]
    return lines


def _swapped_programs(x: torch.Tensor, out: torch.Tensor, launch) -> list[str]:
    """The elements written are those a kernel taking its rows from program_id(1) reaches."""
    if launch is None or launch.grid is None or out.shape != x.t().shape:
        return []
    bm, bn = launch.constexpr("BLOCK_M", "BM"), launch.constexpr("BLOCK_N", "BN")
    if not isinstance(bm, int) or not isinstance(bn, int):
        return []
    M, N = x.shape
    g0, g1 = launch.grid[:2]
    written = ~torch.isnan(out.double().cpu()).t()
    rows, cols = torch.arange(M)[:, None], torch.arange(N)[None, :]
    swapped = (rows < g1 * bm) & (cols < g0 * bn)
    plain = (rows < g0 * bm) & (cols < g1 * bn)
    if written.all() or torch.equal(written, plain) or not torch.equal(written, swapped):
        return []
    return [f"only x's first {min(M, g1 * bm)} rows and {min(N, g0 * bn)} columns were transposed: that is what a "
            f"kernel taking its rows from program_id(1) reaches on the grid ({g0}, {g1}); rows come from "
            "program_id(0) (the grid's first size, cdiv(M, BLOCK_M)) and columns from program_id(1)"]


def transpose_diagnosis(log, failure) -> list[str]:
    """The grid, the strides the launch passes, and an output store that does not transpose."""
    launch = log.last_learner() if log is not None else None
    if launch is None:
        return []
    tensors = list(launch.tensor_names().items())
    lines = kc.stride_diagnosis(launch, {p.split("_")[0]: t for p, t in tensors})
    x = tensors[0][1] if tensors else None
    bm, bn = launch.constexpr("BLOCK_M", "BM"), launch.constexpr("BLOCK_N", "BN")
    if x is not None and x.dim() == 2 and isinstance(bm, int) and isinstance(bn, int) and launch.grid is not None:
        M, N = x.shape
        g0, g1 = launch.grid[:2]
        want = (-(-M // bm), -(-N // bn))
        if (g0, g1) != want and (g0, g1) == (-(-N // bn), -(-M // bm)):
            lines.append(f"the grid is ({g0}, {g1}) = (cdiv(N, BLOCK_N), cdiv(M, BLOCK_M)): program_id(0) walks the "
                         f"rows of x, so the grid is (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)) = {want}")
        elif g0 < want[0] or g1 < want[1]:
            lines.append(f"the grid ({g0}, {g1}) covers {g0 * bm} rows and {g1 * bn} columns of the {M} x {N} x: M // "
                         f"BLOCK_M rounds a partial block away; use (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N)) "
                         f"= {want}")
    if x is not None and len(tensors) > 1:
        lines += _untransposed_store(failure, x.shape, tensors[1][0]) or _mirrored_store_mask(failure, tensors[1][0])
    return lines


def _mirrored_store_mask(failure, out_name: str) -> list[str]:
    """A store into the output whose addresses are mirrored, as they must be, but whose mask was
    mirrored too (the block is still x's block: x's mask keeps it inside out)."""
    from ..checked import OutOfBounds

    if not isinstance(failure, OutOfBounds) or failure.access.region is None or failure.access.region.name != out_name:
        return []
    a = failure.access
    fit = kc._affine(np.asarray(a.offsets))
    t = a.region.tensor
    if fit is None or t.dim() != 2 or (fit[1], fit[2]) != (t.stride(1), t.stride(0)) or t.stride(0) == t.stride(1):
        return []
    return ["this store's addresses are mirrored, as they should be (block lane (i, j) goes to out[j, i]); its mask "
            "is what is wrong: the block is still x's block, so it takes x's mask, (rows[:, None] < M) & "
            "(cols[None, :] < N), whatever the output's shape"]


def _untransposed_store(failure, x_shape, out_name: str) -> list[str]:
    """A store into the [N, M] output whose active lanes are x's [M, N] block at out[row, col]."""
    from ..checked import OutOfBounds

    if not isinstance(failure, OutOfBounds) or failure.access.region is None or failure.access.region.name != out_name:
        return []
    a = failure.access
    t = a.region.tensor
    fit = kc._affine(np.asarray(a.offsets))
    if fit is None or t.dim() != 2 or (fit[1], fit[2]) != tuple(t.stride()):
        return []
    origin = kc._origin(fit[0], tuple(t.stride()), tuple(t.shape))
    if origin is None:
        return []
    R, C = a.offsets.shape
    rows, cols = origin[0] + np.arange(R), origin[1] + np.arange(C)
    as_x = (rows[:, None] < x_shape[0]) & (cols[None, :] < x_shape[1])
    active = np.broadcast_to(np.asarray(a.active, dtype=bool), (R, C))
    if not np.array_equal(active, as_x):
        return []
    return [f"this store puts x[i, j] at out[i, j] (its lanes follow x's {x_shape[0]} x {x_shape[1]} mask), but out "
            f"is {x_shape[1]} x {x_shape[0]}: x[i, j] goes to out[j, i], so address out with cols[None, :] * "
            "stride_om + rows[:, None] * stride_on (and keep x's mask)"]


@kc.kernel_exercise("transpose", kind="launcher", diagnose=transpose_diagnosis,
                    gpu_case=lambda answer: _transpose_case(answer, *list(_transpose_inputs())[3]), hints=Hints(
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
        problems += _transpose_case(transpose, desc, x)
    if not problems:
        x = torch.randn(33, 17, generator=torch.Generator().manual_seed(2)).to(runtime.DEVICE)
        kc.without_your_kernels(transpose, (x,), x.t(), what="transpose(x)",
                                close=lambda got, want: isinstance(got, torch.Tensor) and got.shape == want.shape
                                and bool(torch.equal(got.cpu(), want.cpu())))
    return problems
