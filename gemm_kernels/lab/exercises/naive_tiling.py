"""Checks for notebook 02 (naive tiling): one program's work in numpy, the row-major launch
order, and a small Triton matmul kernel."""

from __future__ import annotations

import numpy as np
import torch

from ... import runtime
from ...kernels.matmul import matmul_ref
from ...testing import TOLERANCES, rel_err
from ...models.tiles import cdiv, launch_order_grid
from ._core import AnswerShapeError, Hints, answer_array, call, compare_arrays, exercise, shown

# (M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, pid): an exact fit, a ragged corner tile, an inside tile of
# the same ragged problem, a 1x1 problem, a K much longer than BLOCK_K
ONE_PROGRAM_CASES = [
    (8, 8, 8, 4, 4, 4, 3),
    (7, 9, 5, 4, 4, 2, 5),
    (7, 9, 5, 4, 4, 2, 1),
    (1, 1, 1, 4, 4, 4, 0),
    (5, 3, 11, 2, 2, 4, 4),
]


def one_program_ref(A: np.ndarray, B: np.ndarray, pid: int, block_m: int, block_n: int, block_k: int) -> np.ndarray:
    """The full BLOCK_M x BLOCK_N accumulator of program ``pid`` (row-major order), every load
    masked with other=0: lanes outside C hold 0."""
    M, K = A.shape
    N = B.shape[1]
    num_pid_n = cdiv(N, block_n)
    pid_m, pid_n = pid // num_pid_n, pid % num_pid_n
    a_pad = np.zeros((cdiv(M, block_m) * block_m, cdiv(K, block_k) * block_k))
    b_pad = np.zeros((cdiv(K, block_k) * block_k, cdiv(N, block_n) * block_n))
    a_pad[:M, :K], b_pad[:K, :N] = A, B
    rows = slice(pid_m * block_m, (pid_m + 1) * block_m)
    cols = slice(pid_n * block_n, (pid_n + 1) * block_n)
    return a_pad[rows] @ b_pad[:, cols]


@exercise("one_program", hints=Hints(
    nudge="first find which tile program pid owns (row-major order), then think of the K loop one block at a time",
    approach="turn pid into (pid_m, pid_n); start a BLOCK_M x BLOCK_N zero accumulator; for each K block take the "
             "A and B blocks, with every element outside the matrices read as 0 (zero-pad them), and add their product",
    solution="pid_m, pid_n = pid // cdiv(N, BLOCK_N), pid % cdiv(N, BLOCK_N); pad A and B with zeros to whole blocks; "
             "acc = sum over k0 in range(0, K, BLOCK_K) of A_pad[rows, k0:k0+BLOCK_K] @ B_pad[k0:k0+BLOCK_K, cols]"))
def check_one_program(one_program):
    problems = []
    rng = np.random.default_rng(2)
    for M, N, K, bm, bn, bk, pid in ONE_PROGRAM_CASES:
        A, B = rng.standard_normal((M, K)), rng.standard_normal((K, N))
        num_pid_n = cdiv(N, bn)
        case = (f"M={M}, N={N}, K={K}, blocks {bm}x{bn}x{bk}, program {pid} "
                f"(tile ({pid // num_pid_n}, {pid % num_pid_n}))")
        expected = one_program_ref(A, B, pid, bm, bn, bk)
        answer = call(one_program, A.copy(), B.copy(), pid, bm, bn, bk)
        try:
            got = answer_array(answer, expected.shape, np.float64)
        except AnswerShapeError as exc:
            problems.append(f"{case}: expected the whole [{bm}, {bn}] accumulator (zeros outside C), got {exc}")
            continue
        except (TypeError, ValueError, OverflowError):  # not numbers in a grid: a generator, strings, ...
            problems.append(f"{case}: expected the whole [{bm}, {bn}] accumulator (zeros outside C) as an array of "
                            f"numbers, got {shown(answer)}")
            continue
        if got.shape != expected.shape:
            problems.append(f"{case}: expected the whole [{bm}, {bn}] accumulator (zeros outside C), "
                            f"got shape {list(got.shape)}")
            continue
        if np.allclose(got, expected):
            continue
        other = [p for p in range(cdiv(M, bm) * num_pid_n)
                 if p != pid and np.allclose(got, one_program_ref(A, B, p, bm, bn, bk))]
        if other:
            p = other[0]
            problems.append(f"{case}: you returned the accumulator of program {p} "
                            f"(tile ({p // num_pid_n}, {p % num_pid_n})): check pid -> (pid_m, pid_n)")
            continue
        problems += compare_arrays(expected, got, case, index_names=("acc row", "acc col"), atol=1e-6)
    return problems


# (num_pid_m, num_pid_n): wide, tall, one row, one column, the seed notes' 9x9
LAUNCH_ORDER_CASES = [(3, 5), (5, 3), (1, 4), (4, 1), (9, 9)]


@exercise("row_major_launch_order", hints=Hints(
    nudge="row-major: the programs fill the first row of tiles, then the second...",
    approach="the answer is a num_pid_m x num_pid_n grid whose entry at (m, n) is the program that computes tile "
             "(m, n); count how many programs come before row m, then add the column",
    solution="return np.arange(num_pid_m * num_pid_n).reshape(num_pid_m, num_pid_n)  (entry m * num_pid_n + n)"))
def check_row_major_launch_order(row_major_launch_order):
    problems = []
    for num_pid_m, num_pid_n in LAUNCH_ORDER_CASES:
        got = call(row_major_launch_order, num_pid_m, num_pid_n)
        expected = launch_order_grid(num_pid_m, num_pid_n, 1, 1, order="row_major")
        case = f"{num_pid_m}x{num_pid_n} tiles"
        try:
            got_arr = answer_array(got, expected.shape)
        except AnswerShapeError as exc:
            problems.append(f"{case}: expected a [{num_pid_m}, {num_pid_n}] grid of program ids, got {exc}")
            continue
        if got_arr.shape != expected.shape:
            problems.append(f"{case}: expected a [{num_pid_m}, {num_pid_n}] grid of program ids, "
                            f"got shape {list(got_arr.shape)}")
            continue
        wrong = np.argwhere(got_arr != expected)
        for m, n in wrong[:3]:
            problems.append(f"{case}: tile ({m}, {n}): expected program {expected[m, n]}, got {got_arr[m, n]}")
        if len(wrong) > 3:
            problems.append(f"{case}: {len(wrong) - 3} more tiles with the wrong program")
    return problems


# (M, N, K): one element, ragged everywhere, K smaller and larger than a typical BLOCK_K
MATMUL_CASES = [(1, 1, 1), (20, 36, 40), (33, 17, 70), (64, 48, 16)]


@exercise("my_matmul", hints=Hints(
    nudge="one program per tile of C: which loads and which store can run past an edge when M, N or K is ragged?",
    approach="pid -> (pid_m, pid_n); rows and columns of the tile; an fp32 accumulator; a K loop whose A and B loads "
             "are masked (other=0) on M/K and K/N; a store masked on M and N",
    solution="see notebook 02's solution cell: a = tl.load(a_ptr + rm[:, None]*sam + rk[None, :]*sak, "
             "mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0), b likewise, acc += tl.dot(a, b); "
             "tl.store(c_ptr + rm[:, None]*scm + rn[None, :]*scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))"))
def check_my_matmul(my_matmul):
    problems = []
    gen = torch.Generator().manual_seed(3)
    dtype = torch.float16
    for M, N, K in MATMUL_CASES:
        a = torch.randn(M, K, generator=gen).to(runtime.DEVICE, dtype)
        b = torch.randn(K, N, generator=gen).to(runtime.DEVICE, dtype)
        out = call(my_matmul, a, b)
        case = f"M={M}, N={N}, K={K}"
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (M, N):
            shape = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            problems.append(f"{case}: expected a [{M}, {N}] tensor, got {shape}")
            continue
        ref = matmul_ref(a, b, out_dtype=torch.float64)
        err = rel_err(out, ref)
        if not err <= TOLERANCES[dtype]:
            worst = compare_arrays(ref.cpu(), out.double().cpu(), case, atol=1e-2, rtol=1e-2,
                                   index_names=("row", "col"))
            problems += worst or [f"{case}: relative error {err:.3g} > {TOLERANCES[dtype]:g}"]
    return problems
