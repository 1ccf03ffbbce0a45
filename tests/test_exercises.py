"""Every exercise check, down each of its three paths: not attempted, wrong (with a precise
explanation), correct.  The correct answers are the notebooks' own solutions, run in-process
(one source of truth: the code a learner sees in the solution notebook).  Every exercise whose
answer runs a kernel gets a missing-mask answer (OutOfBounds feedback with its picture, no
crash); every check gets answers of the wrong type (feedback, never a traceback); the hints come
in steps."""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from gemm_kernels import DEVICE
from gemm_kernels.kernels.tiles import streamk_range, tile_grouped
from gemm_kernels.lab.exercises import CORRECT, NOT_ATTEMPTED, WRONG, CheckResult, reset_hints
from gemm_kernels.lab.exercises import grouped_gemm as grouped_ex
from gemm_kernels.lab.exercises import grouped_l2_ordering as ordering
from gemm_kernels.lab.exercises import kernel_fusion as fusion
from gemm_kernels.lab.exercises import moe_grouped_mm as moe_ex
from gemm_kernels.lab.exercises import naive_tiling as tiling
from gemm_kernels.lab.exercises import persistent_tma as persistent_ex
from gemm_kernels.lab.exercises import pointer_arithmetic as pointers
from gemm_kernels.lab.exercises import fp8 as fp8_ex
from gemm_kernels.lab.exercises import start_here
from gemm_kernels.lab.exercises import stream_k as streamk_ex
from gemm_kernels.lab.exercises._core import compare_arrays
from gemm_kernels.lab.student import exercise_results
from gemm_kernels.models.tiles import tile_coords_np
from _fixed_launch import Bound as _Bound

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

# notebook -> the checks its Exercises section calls, in order
CHECKS = {
    "00_start_here.ipynb": ["launch_stats", "axpy"],
    "01_pointer_arithmetic.ipynb": ["block_offsets", "block_mask", "transpose"],
    "02_naive_tiling.ipynb": ["one_program", "row_major_launch_order", "my_matmul"],
    "03_grouped_l2_ordering.ipynb": ["column_grouped_tile", "wave_block_fetches", "column_grouped_triton"],
    "04_kernel_fusion.ipynb": ["activation_pass_bytes", "variant_reference", "gelu_tanh"],
    "05_persistent_tma.ipynb": ["waves_and_tail", "persistent_tiles", "tma_view", "persistent_loop"],
    "05b_stream_k.ipynb": ["streamk_share", "streamk_loop", "rows_match"],
    "06_grouped_gemm.ipynb": ["bounds_masks", "program_tiles", "find_tile"],
    "07_moe_grouped_mm.ipynb": ["offs_from_counts", "tiles_per_expert", "padded_rows", "expert_rows_kernel"],
    "10_fp8.ipynb": ["block_scales", "block_scaled_loop", "promotion_interval"],
}


@pytest.fixture(scope="module")
def solutions():
    """name -> (namespace, results) of each notebook's Exercises section, solutions included."""
    out = {}
    for name in CHECKS:
        namespace: dict = {}
        results = exercise_results(nbformat.read(NOTEBOOKS / name, as_version=4), name, namespace)
        out[name] = (namespace, results)
    return out


def solution(solutions, notebook, fn_name):
    return solutions[notebook][0][fn_name]


def assert_wrong(result: CheckResult, *fragments: str):
    assert isinstance(result, CheckResult)
    assert result.status == WRONG, str(result)
    text = str(result)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"


def stub(*_args, **_kwargs):
    raise NotImplementedError("your turn")


@triton.jit
def jit_stub(x):
    raise NotImplementedError("your turn")


@triton.jit
def jit_tile_stub(pid, num_pid_m, num_pid_n, GROUP_SIZE: tl.constexpr):
    raise NotImplementedError("your turn")


@triton.jit
def jit_masks_stub(rows, cols, ks, M, N, K):
    raise NotImplementedError("your turn")


@triton.jit
def jit_persistent_stub(a_ptr, b_ptr, c_ptr, trace_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        stride_cm, stride_cn, NUM_PROGRAMS: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    raise NotImplementedError("your turn")


@triton.jit
def jit_streamk_stub(a_ptr, b_ptr, c_ptr, partial_ptr, flag_ptr, trace_ptr, M, N, K, sk_tiles,
                     NUM_PROGRAMS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)  # the data-parallel part of the scaffold runs first; the stub follows
    raise NotImplementedError("your turn")


@triton.jit
def jit_block_scaled_stub(a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, M, N, K, stride_am, stride_bn, stride_cm,
                          stride_sam, stride_sak, stride_sbk, stride_sbn,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # the scaffold runs up to the K loop
    for ki in range(0, tl.cdiv(K, BLOCK_K)):
        raise NotImplementedError("your turn")


@triton.jit
def jit_find_tile_stub(tile, tile_starts_ptr, sizes_ptr, num_problems, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    raise NotImplementedError("your turn")


@triton.jit
def jit_moe_stub(x_ptr, w_ptr, out_ptr, offs_ptr, N, K, stride_xt, stride_xk, stride_we, stride_wk, stride_wn,
                 stride_ot, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    expert = tl.program_id(0)
    raise NotImplementedError("your turn")


ALL_CHECKS = {
    "launch_stats": start_here.check_launch_stats,
    "axpy": start_here.check_axpy,
    "block_offsets": pointers.check_block_offsets,
    "block_mask": pointers.check_block_mask,
    "transpose": pointers.check_transpose,
    "one_program": tiling.check_one_program,
    "row_major_launch_order": tiling.check_row_major_launch_order,
    "my_matmul": tiling.check_my_matmul,
    "column_grouped_tile": ordering.check_column_grouped_tile,
    "wave_block_fetches": ordering.check_wave_block_fetches,
    "column_grouped_triton": ordering.check_column_grouped_triton,
    "activation_pass_bytes": fusion.check_activation_pass_bytes,
    "variant_reference": fusion.check_variant_reference,
    "gelu_tanh": fusion.check_gelu_tanh,
    "waves_and_tail": persistent_ex.check_waves_and_tail,
    "persistent_tiles": persistent_ex.check_persistent_tiles,
    "tma_view": persistent_ex.check_tma_view,
    "bounds_masks": grouped_ex.check_bounds_masks,
    "program_tiles": grouped_ex.check_program_tiles,
    "offs_from_counts": moe_ex.check_offs_from_counts,
    "tiles_per_expert": moe_ex.check_tiles_per_expert,
    "padded_rows": moe_ex.check_padded_rows,
    "persistent_loop": persistent_ex.check_persistent_loop,
    "find_tile": grouped_ex.check_find_tile,
    "expert_rows_kernel": moe_ex.check_expert_rows_kernel,
    "streamk_share": streamk_ex.check_streamk_share,
    "streamk_loop": streamk_ex.check_streamk_loop,
    "rows_match": streamk_ex.check_rows_match,
    "block_scales": fp8_ex.check_block_scales,
    "block_scaled_loop": fp8_ex.check_block_scaled_loop,
    "promotion_interval": fp8_ex.check_promotion_interval,
}
JIT_ANSWERS = {"column_grouped_triton": jit_tile_stub, "gelu_tanh": jit_stub, "bounds_masks": jit_masks_stub,
               "persistent_loop": jit_persistent_stub, "find_tile": jit_find_tile_stub,
               "expert_rows_kernel": jit_moe_stub, "streamk_loop": jit_streamk_stub,
               "block_scaled_loop": jit_block_scaled_stub}


# ----------------------------------------------------------------------------- correct
@pytest.mark.parametrize("notebook", list(CHECKS))
def test_notebook_solutions_pass_their_checks(solutions, notebook):
    results = solutions[notebook][1]
    assert [r.exercise for r in results] == CHECKS[notebook]
    for r in results:
        assert r.status == CORRECT and r.passed, str(r)
        assert "correct" in str(r)


def test_every_check_is_covered():
    assert sorted(ALL_CHECKS) == sorted(n for names in CHECKS.values() for n in names)
    for name, check in ALL_CHECKS.items():
        assert check.title == name


# ----------------------------------------------------------------------------- not attempted
@pytest.mark.parametrize("name", list(ALL_CHECKS))
@pytest.mark.parametrize("answer", ["raises", "None", "Ellipsis"])
def test_untouched_stub_is_not_attempted(name, answer):
    if answer == "raises":
        value = JIT_ANSWERS.get(name, stub)
    else:
        value = {"None": None, "Ellipsis": ...}[answer]
    result = ALL_CHECKS[name](value)
    assert result.status == NOT_ATTEMPTED, str(result)
    assert not result.attempted and not result.passed
    assert "not attempted yet" in str(result)
    assert "not attempted yet" in result._repr_html_()


@pytest.mark.parametrize("name", [n for n in ALL_CHECKS if n not in JIT_ANSWERS])
def test_a_missing_return_is_a_wrong_answer_not_a_stub(name):
    """The learner replaced the stub but forgot `return`: wrong, and the feedback says so (never
    "not attempted"); notebook 10's promotion_interval explains None in its own words."""
    def no_return(*args):
        args  # noqa: B018  (a body that computes and forgets to return)

    result = ALL_CHECKS[name](no_return)
    assert result.status == WRONG and result.attempted, str(result)
    assert ("no `return`" in str(result)) or (name == "promotion_interval" and "'fast'" in str(result)), str(result)


@pytest.mark.parametrize("name", ["launch_stats", "block_offsets", "activation_pass_bytes"])
def test_an_answer_that_crashes_is_explained_not_raised(name):
    def crashes(*args):
        return 1 // 0

    result = ALL_CHECKS[name](crashes)
    assert_wrong(result, "raised ZeroDivisionError", "1 // 0")


def test_a_value_instead_of_a_function_is_explained():
    assert_wrong(start_here.check_launch_stats(42), "expected a function", "got int: 42")


# ----------------------------------------------------------------------------- wrong: 00
def test_launch_stats_wrong():
    result = start_here.check_launch_stats(lambda n, block: (n // block, 0))
    assert_wrong(result, "n=1000, BLOCK=256: expected 4 programs with 24 idle lanes, got 3 programs with 0 idle lanes",
                 "hint 1 (nudge):")
    # n=1024 is a multiple of the block: that case is right and must not be listed
    assert "n=1024," not in str(result)
    assert_wrong(start_here.check_launch_stats(lambda n, block: n // block), "expected a pair")


def test_axpy_ignoring_alpha(solutions):
    result = start_here.check_axpy(lambda alpha, x, y: x + y)
    assert_wrong(result, "n=1, alpha=2.5: 1 of 1 element wrong; i=0: expected")


def test_axpy_missing_the_last_block_is_reported_as_never_written(solutions):
    kernel = solution(solutions, "00_start_here.ipynb", "axpy_kernel")

    def floor_grid(alpha, x, y):  # cdiv forgotten: the ragged tail gets no program
        out = torch.empty_like(x)
        kernel[(x.numel() // 1024,)](x, y, out, alpha, x.numel(), BLOCK=1024)
        return out

    # n=1: a grid of 0 programs; a checked launch refuses it by name (Triton would run nothing)
    assert_wrong(start_here.check_axpy(floor_grid), "raised ValueError: every launch grid size must be at least 1")


def test_axpy_writing_into_y():
    def in_place(alpha, x, y):
        return y.add_(alpha * x)

    assert_wrong(start_here.check_axpy(in_place), "changed its inputs")


# ----------------------------------------------------------------------------- wrong: 01
def test_block_offsets_with_swapped_strides():
    def swapped(pid_m, pid_n, bm, bn, sm, sn):
        return pointers.block_offsets_ref(pid_m, pid_n, bm, bn, sn, sm)

    result = pointers.check_block_offsets(swapped)
    expected = pointers.block_offsets_ref(1, 2, 2, 3, 8, 1)
    got = pointers.block_offsets_ref(1, 2, 2, 3, 1, 8)
    assert_wrong(result, f"block (1, 2) of 2x3, strides (8, 1) [6x8 row-major matrix]: ",
                 f"row=0, col=0: expected {expected[0, 0]}, got {got[0, 0]}")


def test_block_offsets_wrong_shape():
    assert_wrong(pointers.check_block_offsets(lambda *a: np.zeros(3, dtype=int)), "expected shape [2, 3], got [3]")


def test_block_mask_checking_rows_only():
    def rows_only(pid_m, pid_n, bm, bn, M, N):
        rows = pid_m * bm + np.arange(bm)
        return np.broadcast_to(rows[:, None] < M, (bm, bn)).copy()

    result = pointers.check_block_mask(rows_only)
    # block (1, 1) of 4x4 in a 5x7 matrix: row 4 is inside, column 7 is not
    assert_wrong(result, "M=5, N=7, block (1, 1) of 4x4: 1 of 16 lanes wrong", "row=0, col=3: expected False, got True")
    assert "M=5, N=7, block (0, 0)" not in str(result)  # the block fully inside is right


def test_block_mask_not_bool():
    assert_wrong(pointers.check_block_mask(lambda *a: np.ones((4, 4))), "expected a bool array")


def test_transpose_returning_a_view():
    assert_wrong(pointers.check_transpose(lambda x: x.t()), "x.t() is only a view")


def test_transpose_with_one_wrong_element():
    def off_by_one(x):
        out = x.t().contiguous()
        out[0, 0] += 1
        return out

    # a 1x1 x.t() is already contiguous: .contiguous() returns x itself, and "+= 1" writes into x
    assert_wrong(pointers.check_transpose(off_by_one), "x 1x1: your transpose changed x",
                 "x 5x7: 1 of 35 elements wrong (rows 0..0, cols 0..0); out row=0, out col=0: expected")


# ----------------------------------------------------------------------------- wrong: 02
def test_one_program_in_column_major_order():
    def column_major(A, B, pid, bm, bn, bk):
        num_pid_m = -(-A.shape[0] // bm)
        pid_m, pid_n = pid % num_pid_m, pid // num_pid_m
        num_pid_n = -(-B.shape[1] // bn)
        return tiling.one_program_ref(A, B, pid_m * num_pid_n + pid_n, bm, bn, bk)

    result = tiling.check_one_program(column_major)
    assert_wrong(result, "M=7, N=9, K=5, blocks 4x4x2, program 1 (tile (0, 1)): you returned the accumulator "
                 "of program 3 (tile (1, 0)): check pid -> (pid_m, pid_n)")
    assert "M=8, N=8" not in str(result)  # 2x2 tiles: program 3 is tile (1, 1) in both orders


def test_one_program_without_zero_padding():
    def unpadded(A, B, pid, bm, bn, bk):
        full = tiling.one_program_ref(A, B, pid, bm, bn, bk)
        M, N = A.shape[0], B.shape[1]
        num_pid_n = -(-N // bn)
        rows = pid // num_pid_n * bm + np.arange(bm)
        out = full.copy()
        out[rows >= M] = 1.0  # garbage where masked loads should have given zeros
        return out

    result = tiling.check_one_program(unpadded)
    assert_wrong(result, "program 5 (tile (1, 2))", "acc row=3, acc col=0: expected 0, got 1")


def test_one_program_sliced_instead_of_padded():
    def sliced(A, B, pid, bm, bn, bk):
        M, N = A.shape[0], B.shape[1]
        full = tiling.one_program_ref(A, B, pid, bm, bn, bk)
        num_pid_n = -(-N // bn)
        pm, pn = pid // num_pid_n, pid % num_pid_n
        return full[: min(bm, M - pm * bm), : min(bn, N - pn * bn)]

    assert_wrong(tiling.check_one_program(sliced), "expected the whole [4, 4] accumulator (zeros outside C), got shape [3, 1]")


def test_row_major_launch_order_column_major():
    def column_major(num_pid_m, num_pid_n):
        return np.arange(num_pid_m * num_pid_n).reshape(num_pid_n, num_pid_m).T

    result = tiling.check_row_major_launch_order(column_major)
    # 3x5 tiles: tile (0, 1) is program 0*5 + 1 = 1 in row-major order, 1*3 + 0 = 3 in column-major
    assert_wrong(result, "3x5 tiles: tile (0, 1): expected program 1, got 3")
    assert "1x4 tiles" not in str(result) and "4x1 tiles" not in str(result)  # both orders agree there


def test_my_matmul_that_misses_tiles(solutions):
    kernel = solution(solutions, "02_naive_tiling.ipynb", "my_matmul_kernel")

    def floor_grid(a, b):  # (M // 32) * (N // 32) programs: ragged tiles never computed
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=torch.float16, device=a.device)
        kernel[((M // 32) * (N // 32),)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                          c.stride(0), c.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
        return c

    result = tiling.check_my_matmul(floor_grid)
    # M=1, N=1: a grid of 0 programs, refused by name (Triton would run nothing), at the learner's line
    assert_wrong(result, "raised ValueError: every launch grid size must be at least 1", "kernel[((M // 32)")


def test_my_matmul_wrong_region():
    def last_row_zero(a, b):
        c = (a.float() @ b.float()).half()
        c[-1] = 0
        return c

    result = tiling.check_my_matmul(last_row_zero)
    assert_wrong(result, "M=33, N=17, K=70: 17 of 561 elements wrong (rows 32..32, cols 0..16)")


def test_my_matmul_wrong_shape():
    assert_wrong(tiling.check_my_matmul(lambda a, b: a), "M=20, N=36, K=40: expected a [20, 36] tensor, got [20, 40]")


# ----------------------------------------------------------------------------- wrong: 03
def row_grouped(pid, num_pid_m, num_pid_n, group):
    pm, pn = tile_coords_np(pid, num_pid_m, num_pid_n, "grouped", group)
    return int(pm), int(pn)


def test_column_grouped_tile_given_the_row_grouped_order():
    result = ordering.check_column_grouped_tile(row_grouped)
    assert_wrong(result, "9x9 tiles, GROUP_SIZE_N=3: program 1: expected tile (0, 1), got (1, 0)")


def test_column_grouped_tile_forgetting_the_short_last_group():
    def fixed_width(pid, num_pid_m, num_pid_n, group):
        num_pid_in_group = group * num_pid_m
        first_pid_n = (pid // num_pid_in_group) * group
        pid_in_group = pid % num_pid_in_group
        return pid_in_group // group, first_pid_n + pid_in_group % group  # GROUP_SIZE_N, not the real width

    result = ordering.check_column_grouped_tile(fixed_width)
    # 4x5 tiles in groups of 2 columns: the last group is 1 column wide
    assert_wrong(result, "4x5 tiles, GROUP_SIZE_N=2: program 17: expected tile (1, 4), got (0, 5)",
                 "4x5 tiles, GROUP_SIZE_N=2: tiles never computed: (2, 4), (3, 4)")
    assert "9x9 tiles" not in str(result)  # 9 = 3 groups of 3: no short group, no error


def test_column_grouped_tile_not_a_pair():
    assert_wrong(ordering.check_column_grouped_tile(lambda *a: 3), "expected a pair of whole numbers (pid_m, pid_n), got 3")


def test_wave_block_fetches_counting_every_load():
    result = ordering.check_wave_block_fetches(lambda tiles, k: 2 * len(tiles) * k)
    assert_wrong(result, "first wave of 9x9 tiles, row_major, 9 programs, 9 K blocks: expected 90 = (1 A row-blocks + "
                 "9 B column-blocks) x 9, got 162 (that is every program's loads",
                 "GROUP_SIZE_M=3), 9 programs, 9 K blocks: expected 54")


def test_wave_block_fetches_counting_tiles():
    result = ordering.check_wave_block_fetches(lambda tiles, k: len(tiles) * k)
    assert_wrong(result, "expected 3200 = (8 A row-blocks + 17 B column-blocks) x 128, got 16896")


@triton.jit
def row_grouped_triton(pid, num_pid_m, num_pid_n, GROUP_SIZE: tl.constexpr):
    num_pid_in_group = GROUP_SIZE * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE
    rows = min(num_pid_m - first_pid_m, GROUP_SIZE)
    return first_pid_m + (pid % num_pid_in_group) % rows, (pid % num_pid_in_group) // rows


def test_column_grouped_triton_given_the_row_grouped_order():
    result = ordering.check_column_grouped_triton(row_grouped_triton)
    assert_wrong(result, "9x9 tiles, GROUP_SIZE_N=3: program 1: expected tile (0, 1), got (1, 0)")


@triton.jit
def does_not_compile(pid, num_pid_m, num_pid_n, GROUP_SIZE: tl.constexpr):
    return pid, undefined_name  # noqa: F821


def test_column_grouped_triton_that_fails_to_run():
    assert_wrong(ordering.check_column_grouped_triton(does_not_compile),
                 "a kernel calling column_grouped_triton (9x9 tiles, GROUP_SIZE_N=3) raised")


# ----------------------------------------------------------------------------- wrong: 04
def test_activation_pass_bytes_one_direction():
    result = fusion.check_activation_pass_bytes(lambda M, N, b: M * N * b)
    assert_wrong(result, "M=4096, N=4096, 2-byte elements: expected 67,108,864 bytes (read C 33,554,432 + "
                 "write C 33,554,432), got 33,554,432 (that is one direction only")


def test_activation_pass_bytes_in_elements():
    assert_wrong(fusion.check_activation_pass_bytes(lambda M, N, b: 2 * M * N), "that counts elements")


def test_variant_reference_given_the_real_leaky_relu():
    result = fusion.check_variant_reference(lambda x: F.leaky_relu(x, 0.01))
    assert_wrong(result, "x=-0.5: leaky_relu_variant gives 0.5, yours gives -0.005",
                 "x=0: leaky_relu_variant gives 1, yours gives 0")


def test_variant_reference_wrong_shape():
    assert_wrong(fusion.check_variant_reference(lambda x: x.sum()), "expected a tensor of shape [10]")


@triton.jit
def gelu_erf(x):
    return 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))


def test_gelu_tanh_given_exact_gelu():
    result = fusion.check_gelu_tanh(gelu_erf)
    assert_wrong(result, "points in [-8, 8] are off by more than 1e-5; worst at x=")


def test_apply_elementwise_runs_a_jit_function_on_every_element():
    x = torch.linspace(-3, 3, 2500, device=DEVICE).reshape(50, 50)
    out = fusion.apply_elementwise(fusion.leaky_relu_variant, x)
    torch.testing.assert_close(out, F.leaky_relu(x + 1, 0.01))
    assert fusion.apply_elementwise(fusion.leaky_relu_variant, x[:0]).shape == (0, 50)


# ----------------------------------------------------------------------------- helpers
def test_compare_arrays_names_positions_and_never_written():
    expected = np.arange(6.0).reshape(2, 3)
    got = expected.copy()
    got[1, 2] = np.nan
    lines = compare_arrays(expected, got, "case", index_names=("r", "c"))
    assert lines == ["case: 1 of 6 elements wrong (rows 1..1, cols 2..2); r=1, c=2: expected 5, got nan (never written?)"]
    assert compare_arrays(expected, expected.copy(), "case") == []


def test_checks_leave_torch_empty_unpatched():
    before = torch.empty
    start_here.check_axpy(lambda alpha, x, y: x)
    assert torch.empty is before


# ----------------------------------------------------------------------------- notebook 05
def test_waves_and_tail_rounding_down_and_busy_for_idle():
    result = persistent_ex.check_waves_and_tail(lambda M, N, bm, bn, sms: ((M // bm) * (N // bn) // sms, 0))
    assert_wrong(result, "waves rounded down", "expected 8 waves with 32 idle")
    busy = persistent_ex.check_waves_and_tail(
        lambda M, N, bm, bn, sms: (-(-(-(-M // bm) * -(-N // bn)) // sms),
                                   (-(-M // bm) * -(-N // bn)) % sms or sms))
    assert_wrong(busy, "number of *busy* programs")


def test_persistent_tiles_row_major_instead_of_grouped():
    def row_major(pid, num_pid_m, num_pid_n, programs, group):
        return [(t // num_pid_n, t % num_pid_n) for t in range(pid, num_pid_m * num_pid_n, programs)]

    assert_wrong(persistent_ex.check_persistent_tiles(row_major), "GROUP_SIZE_M=2", "expected tile")


def test_persistent_tiles_missing_the_last_tiles():
    def short(pid, num_pid_m, num_pid_n, programs, group):
        return [tuple(int(v) for v in tile_coords_np(t, num_pid_m, num_pid_n, "grouped", group))
                for t in range(pid, num_pid_m * num_pid_n - 1, programs)]

    assert_wrong(persistent_ex.check_persistent_tiles(short), "tiles, got")


def test_tma_view_that_ignores_alignment():
    def unit_stride_only(x):
        if x.stride(1) == 1:
            return False, x.stride(0)
        if x.stride(0) == 1:
            return True, x.stride(1)
        return False

    assert_wrong(persistent_ex.check_tma_view(unit_stride_only), "TMA cannot read it", "not a multiple of 16")


def test_tma_view_that_refuses_transposes():
    def rows_only(x):
        ok = x.stride(1) == 1 and x.stride(0) * x.element_size() % 16 == 0 and x.data_ptr() % 16 == 0
        return (False, x.stride(0)) if ok else False

    assert_wrong(persistent_ex.check_tma_view(rows_only), "TMA can read it", "but you returned False")


# ----------------------------------------------------------------------------- notebook 05b
def _share(pid, num_tiles, k_tiles, num_programs, sk_tiles):
    return streamk_ex.share_ref(pid, num_tiles, k_tiles, num_programs, sk_tiles)


def test_streamk_share_handed_out_from_program_0_up():
    result = streamk_ex.check_streamk_share(lambda pid, nt, kt, p, sk: _share(p - 1 - pid, nt, kt, p, sk))
    assert_wrong(result, "6 tiles of 8 K iterations, 4 programs, sk_tiles=2: program 0: expected (5, 4, 8); "
                 "got (4, 0, 4)", "handed out from the *last* program down")


def test_streamk_share_numbering_split_tiles_from_zero():
    def from_zero(pid, nt, kt, p, sk):
        return [(t - (nt - sk), k0, k1) for t, k0, k1 in _share(pid, nt, kt, p, sk)]

    assert_wrong(streamk_ex.check_streamk_share(from_zero), "program 0: expected (5, 4, 8); got (1, 4, 8)",
                 "tile numbers start at 4")


def test_streamk_share_not_cut_at_the_tile_edge():
    def uncut(pid, nt, kt, p, sk):
        total, share = sk * kt, p - 1 - pid
        it, end = share * total // p, (share + 1) * total // p
        return [(nt - sk + it // kt, it % kt, it % kt + end - it)] if end > it else []

    result = streamk_ex.check_streamk_share(uncut)
    assert_wrong(result, "32 tiles of 128 K iterations, 132 programs, sk_tiles=32: program 4: expected (30, 100, 128), "
                 "(31, 0, 3); got (30, 100, 131)", "every segment lies inside one tile")
    assert "6 tiles of 8" not in str(result)  # shares of 4 there never cross a tile edge


def test_streamk_share_not_triples():
    assert_wrong(streamk_ex.check_streamk_share(lambda *a: [(1, 2)]), "expected a list of (tile, k_first, k_end) triples")


@triton.jit
def streamk_loop_variant(a_ptr, b_ptr, c_ptr, partial_ptr, flag_ptr, trace_ptr, M, N, K, sk_tiles,
                         NUM_PROGRAMS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, MISTAKE: tl.constexpr):
    pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    dp_tiles = num_tiles - sk_tiles
    for tile in range(pid, dp_tiles, NUM_PROGRAMS):
        streamk_ex.run_segment(a_ptr, b_ptr, c_ptr, partial_ptr, flag_ptr, trace_ptr, M, N, K, sk_tiles,
                               tile, 0, k_tiles, NUM_PROGRAMS, BLOCK_M, BLOCK_N, BLOCK_K)
    if MISTAKE == "from program 0 up":
        it, end = streamk_range(NUM_PROGRAMS - 1 - pid, sk_tiles * k_tiles, NUM_PROGRAMS)
    else:
        it, end = streamk_range(pid, sk_tiles * k_tiles, NUM_PROGRAMS)
    while it < end:
        t = it // k_tiles
        k_first = it - t * k_tiles
        if MISTAKE == "to the tile's end":
            k_end = k_tiles + 0 * it
        else:
            k_end = tl.minimum(k_tiles, k_first + (end - it))
        tile = t if MISTAKE == "split tiles from 0" else dp_tiles + t
        streamk_ex.run_segment(a_ptr, b_ptr, c_ptr, partial_ptr, flag_ptr, trace_ptr, M, N, K, sk_tiles,
                               tile, k_first, k_end, NUM_PROGRAMS, BLOCK_M, BLOCK_N, BLOCK_K)
        if MISTAKE != "never moves on":
            it += k_end - k_first
    if MISTAKE == "raises its own flag":  # the output stays right; the next launch would see a stale flag
        tl.atomic_xchg(flag_ptr + pid, 1)


def test_streamk_loop_solution_shape_passes_as_a_variant():
    """The test variant itself is right when it makes no mistake (so the failures below are the mistakes')."""
    assert streamk_ex.check_streamk_loop(_Bound(streamk_loop_variant, MISTAKE="none")).passed


def test_streamk_loop_that_never_moves_on_is_stopped_and_drawn():
    # program 0 runs its first piece again and again: its records run down the trace, past its end
    assert_out_of_bounds(streamk_ex.check_streamk_loop(_Bound(streamk_loop_variant, MISTAKE="never moves on")),
                         "store through trace_ptr", "called from line", "program_id 0", "(trace_ptr is 12x4)")


def test_streamk_loop_running_to_the_tiles_end_names_the_programs():
    assert_wrong(streamk_ex.check_streamk_loop(_Bound(streamk_loop_variant, MISTAKE="to the tile's end")),
                 "M=40, N=20, K=72: 6 tiles of 5 K iterations, 4 programs, sk_tiles=2: program 1 ran (tile, k_first, "
                 "k_end) (1, 0, 5), (5, 0, 5); expected (1, 0, 5), (5, 0, 2)")


def test_streamk_loop_leaving_a_flag_raised_is_refused():
    result = streamk_ex.check_streamk_loop(_Bound(streamk_loop_variant, MISTAKE="raises its own flag"))
    assert_wrong(result, "left its flag raised after the launch")


def test_streamk_loop_running_past_its_share_is_named():
    @triton.jit
    def past_the_end(a_ptr, b_ptr, c_ptr, partial_ptr, flag_ptr, trace_ptr, M, N, K, sk_tiles,
                     NUM_PROGRAMS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        pid = tl.program_id(0)
        k_tiles = tl.cdiv(K, BLOCK_K)
        dp_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N) - sk_tiles
        for tile in range(pid, dp_tiles, NUM_PROGRAMS):
            streamk_ex.run_segment(a_ptr, b_ptr, c_ptr, partial_ptr, flag_ptr, trace_ptr, M, N, K, sk_tiles,
                                   tile, 0, k_tiles, NUM_PROGRAMS, BLOCK_M, BLOCK_N, BLOCK_K)
        it, end = streamk_range(pid, sk_tiles * k_tiles, NUM_PROGRAMS)
        while it <= end:
            t = it // k_tiles
            k_first = it - t * k_tiles
            k_end = tl.minimum(k_tiles, k_first + (end - it))
            streamk_ex.run_segment(a_ptr, b_ptr, c_ptr, partial_ptr, flag_ptr, trace_ptr, M, N, K, sk_tiles,
                                   dp_tiles + t, k_first, k_end, NUM_PROGRAMS, BLOCK_M, BLOCK_N, BLOCK_K)
            it += k_end - k_first  # at it == end: an empty segment, again and again

    assert_out_of_bounds(streamk_ex.check_streamk_loop(past_the_end), "store through trace_ptr",
                         "ran more Stream-K segments than its share holds")


def test_streamk_loop_split_tiles_numbered_from_0_is_named_first():
    result = streamk_ex.check_streamk_loop(_Bound(streamk_loop_variant, MISTAKE="split tiles from 0"))
    assert_wrong(result, "a Stream-K segment ran on tile 0 (K iterations 0 to 1), one of the 4 data-parallel tiles",
                 "the t-th split tile is tile dp_tiles + t")
    assert "program 0 ran" not in str(result)  # its record was overwritten: "ran none" would be false


def test_streamk_loop_from_program_0_up_names_the_programs():
    assert_wrong(streamk_ex.check_streamk_loop(_Bound(streamk_loop_variant, MISTAKE="from program 0 up")),
                 "sk_tiles=2: program 0 ran (tile, k_first, k_end) (0, 0, 5), (4, 0, 2); expected (0, 0, 5), (5, 2, 5)",
                 "each program ran the Stream-K share of program NUM_PROGRAMS - 1 - pid")


def test_streamk_share_one_short_k_end_is_named():
    def inclusive(pid, nt, kt, p, sk):
        return [(t, k0, k1 - 1) for t, k0, k1 in _share(pid, nt, kt, p, sk)]

    result = streamk_ex.check_streamk_share(inclusive)
    assert_wrong(result, "expected (5, 4, 8); got (5, 4, 7)", "each k_end is one short")
    assert "runs 4 iterations" not in str(result)  # not blamed on the share


def test_streamk_share_one_segment_too_many_shows_no_false_more():
    result = streamk_ex.check_streamk_share(lambda *a: _share(*a) + _share(*a)[-1:])
    assert_wrong(result, "got (5, 4, 8), (5, 4, 8) (program 0 runs 4 iterations")
    assert "more)" not in str(result)  # every segment the answer has is shown


def test_streamk_share_an_endless_answer_says_perhaps_more():
    import itertools

    result = streamk_ex.check_streamk_share(lambda *a: itertools.repeat((5, 4, 8)))
    assert_wrong(result, "(5, 4, 8), (5, 4, 8), ... (perhaps more)")



def _shared_rows(matmul, a, b, m1, m2):
    rows = min(m1, m2)
    return matmul(a[:m1], b)[:rows], matmul(a[:m2], b)[:rows]


def _same_bits(first, second):
    width = {2: torch.int16, 4: torch.int32}[first.element_size()]
    return torch.equal(first.view(width), second.view(width))


def test_rows_match_within_a_tolerance_is_named():
    result = streamk_ex.check_rows_match(lambda *args: torch.allclose(*_shared_rows(*args)))
    assert_wrong(result, "row 0 one bit higher in the batch of 40 rows, m1=3, m2=40: expected False, got True",
                 "differ in the last bit: a tolerance (allclose, isclose) calls them the same")


def test_rows_match_by_value_is_named_at_the_nan_and_the_signed_zero():
    result = streamk_ex.check_rows_match(lambda *args: torch.equal(*_shared_rows(*args)))
    assert_wrong(result, "NaN at row 1, column 3 in both batches, m1=2, m2=9: expected True, got False",
                 "NaN != NaN as a value", "equal as values, but their sign bits differ")


def test_rows_match_of_row_0_alone_is_named():
    def row_0(matmul, a, b, m1, m2):
        return _same_bits(matmul(a[:m1], b)[:1], matmul(a[:m2], b)[:1])

    assert_wrong(streamk_ex.check_rows_match(row_0), "row 4 changed by 1 in the batch of 5 rows",
                 "compare every row the two batches share, the first min(m1, m2) = 5, not row 0 alone")


def test_rows_match_of_the_whole_batch_twice_is_named():
    def whole(matmul, a, b, m1, m2):
        rows = min(m1, m2)
        return _same_bits(matmul(a, b)[:rows], matmul(a, b)[:rows])

    assert_wrong(streamk_ex.check_rows_match(whole), "your function multiplied batches of 40 rows: the question is "
                 "about the batches a[:m1] and a[:m2], here 3 and 40 rows")


def test_rows_match_taking_m1_rows_from_both_is_named():
    def m1_rows(matmul, a, b, m1, m2):
        return _same_bits(matmul(a[:m1], b)[:m1], matmul(a[:m2], b)[:m1])

    assert_wrong(streamk_ex.check_rows_match(m1_rows), "m1=16, m2=6: expected True, got False",
                 "only the first min(m1, m2) = 6 rows are in both batches")


def test_rows_match_accepts_a_one_element_bool_tensor_and_refuses_other_values():
    def as_tensor(*args):
        first, second = _shared_rows(*args)
        width = {2: torch.int16, 4: torch.int32}[first.element_size()]
        return (first.view(width) == second.view(width)).all()

    assert streamk_ex.check_rows_match(as_tensor).passed
    assert_wrong(streamk_ex.check_rows_match(lambda *args: 1), "expected True or False, got 1")
    assert_wrong(streamk_ex.check_rows_match(lambda *args: _shared_rows(*args)[0]), "expected True or False, got tensor")


def test_rows_match_reference_sees_the_batch_invariant_mode_keep_its_bits():
    """What the check's last cases rest on: matmul_auto's batch-invariant rows keep their bits
    (on a GPU in fp16 at 8 and 4096 rows, interpreted in fp32 at 5 and 300)."""
    from gemm_kernels.kernels.dispatch import matmul_auto

    *_, a, b, m1, m2 = streamk_ex._rows_cases()[-1]
    with torch.no_grad():
        assert streamk_ex.rows_match_ref(lambda x, w: matmul_auto(x, w, batch_invariant=True), a, b, m1, m2)


@pytest.mark.gpu
def test_rows_match_check_on_the_gpu():
    """The check on CUDA tensors: the notebook's solution passes, three mistakes are named, and
    the default path changes a row's bits between 8 and 4096 rows where the batch-invariant one does not
    (PERF_NOTES entry 41: every M up to 128 at N = 4096)."""
    from gemm_kernels.kernels.dispatch import matmul_auto

    nb = nbformat.read(NOTEBOOKS / "05b_stream_k.ipynb", as_version=4)
    namespace: dict = {}
    results = {r.exercise: r for r in exercise_results(nb, "05b_stream_k", namespace)}
    assert results["rows_match"].passed, str(results["rows_match"])
    test_rows_match_within_a_tolerance_is_named()
    test_rows_match_by_value_is_named_at_the_nan_and_the_signed_zero()
    test_rows_match_of_row_0_alone_is_named()
    cases = {what: (a, b, m1, m2) for what, _, a, b, m1, m2 in streamk_ex._rows_cases()}
    a, b, m1, m2 = cases["matmul_auto by default"]
    assert a.is_cuda and a.dtype == torch.float16 and (m1, m2) == (8, 4096)
    with torch.no_grad():
        assert not streamk_ex.rows_match_ref(matmul_auto, a, b, m1, m2)
        assert streamk_ex.rows_match_ref(lambda x, w: matmul_auto(x, w, batch_invariant=True), a, b, m1, m2)


# ----------------------------------------------------------------------------- notebook 06
@triton.jit
def _masks_without_k(rows, cols, ks, M, N, K):
    return rows[:, None] < M, cols[None, :] < N, (rows[:, None] < M) & (cols[None, :] < N)


@triton.jit
def _masks_without_store(rows, cols, ks, M, N, K):
    a_mask = (rows[:, None] < M) & (ks[None, :] < K)
    b_mask = (ks[:, None] < K) & (cols[None, :] < N)
    return a_mask, b_mask, (rows[:, None] >= 0) & (cols[None, :] >= 0)


def test_bounds_masks_forgetting_k_reads_past_a_and_b():
    assert_wrong(grouped_ex.check_bounds_masks(_masks_without_k), "a_mask has", "reads past the end of A",
                 "k 40 >= K = 40")


def test_bounds_masks_with_an_unmasked_store_is_stopped_before_it_writes():
    result = grouped_ex.check_bounds_masks(_masks_without_store)
    assert_wrong(result, "c_mask has", "stores past the end of C", "left its tensor",
                 "_pointer_array_kernel: store through C[", "address memory outside C[")
    assert result.picture is not None


def test_program_tiles_restarting_every_problem():
    assert_wrong(grouped_ex.check_program_tiles(grouped_ex._restarting_walk), "starts every problem again")


def test_program_tiles_not_triples():
    assert_wrong(grouped_ex.check_program_tiles(lambda *a: [(0, 0)]), "expected a list of (problem, pid_m, pid_n)")


# ----------------------------------------------------------------------------- notebook 07
def test_offs_from_counts_wrong_dtype_and_starts():
    assert_wrong(moe_ex.check_offs_from_counts(lambda c: torch.cumsum(c, 0)), "dtype int64", "int32")
    starts = moe_ex.check_offs_from_counts(lambda c: (torch.cumsum(c, 0) - c).to(torch.int32))
    assert_wrong(starts, "row starts")


def test_tiles_per_expert_rounding_down_and_empty_experts():
    down = moe_ex.check_tiles_per_expert(lambda counts, N, bm, bn: [(c // bm) * -(-N // bn) for c in counts])
    assert_wrong(down, "rounded down")
    busy_empty = moe_ex.check_tiles_per_expert(lambda counts, N, bm, bn: [max(1, -(-c // bm)) * -(-N // bn)
                                                                          for c in counts])
    assert_wrong(busy_empty, "no rows has no tiles")


def test_padded_rows_counting_full_and_empty_experts():
    assert_wrong(moe_ex.check_padded_rows(lambda counts, bm: sum(bm - c % bm for c in counts)),
                 "has no padding")


# ----------------------------------------------------------------------------- missing masks: checked, drawn, no crash
def assert_out_of_bounds(result: CheckResult, *fragments: str):
    """The feedback of a kernel stopped by a checked run: the report and its picture."""
    assert_wrong(result, "left its tensor (stopped before it touched memory)", "active lanes", *fragments)
    assert result.picture is not None and result.picture.startswith(b"\x89PNG")
    assert "data:image/png;base64," in result._repr_html_()


@triton.jit
def axpy_no_mask_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, alpha * tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))


def axpy_no_mask(alpha, x, y):
    out = torch.empty_like(x)
    axpy_no_mask_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, alpha, x.numel(), BLOCK=1024)
    return out


def test_axpy_without_a_mask_is_stopped_and_drawn():
    assert_out_of_bounds(start_here.check_axpy(axpy_no_mask), "axpy_no_mask_kernel: load through x_ptr",
                         "1023 of 1024 active lanes", "element 1 (x_ptr has 1 element: 0..0)")


@triton.jit
def transpose_no_mask_kernel(x_ptr, out_ptr, M, N, sxm, sxn, som, son, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    block = tl.load(x_ptr + rows[:, None] * sxm + cols[None, :] * sxn)
    tl.store(out_ptr + cols[None, :] * som + rows[:, None] * son, block)


def transpose_no_mask(x):
    M, N = x.shape
    out = torch.empty((N, M), dtype=x.dtype, device=x.device)
    transpose_no_mask_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](
        x, out, M, N, x.stride(0), x.stride(1), out.stride(0), out.stride(1), BLOCK_M=16, BLOCK_N=16)
    return out


def test_transpose_without_a_mask_is_stopped_and_drawn():
    # the first case is x[:1, :1] of a 40x66 buffer: lane (0, 1) reads x's neighbour in the same storage
    assert_out_of_bounds(pointers.check_transpose(transpose_no_mask), "load through x_ptr",
                         "255 of 256 active lanes", "index (0, 1) (x_ptr is 1x1)")


def my_matmul_without_store_mask(solutions):
    @triton.jit
    def kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        pid = tl.program_id(0)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        rows = (pid // num_pid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = (pid % num_pid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = tl.load(a_ptr + rows[:, None] * sam + (k + ks)[None, :] * sak,
                        mask=(rows[:, None] < M) & ((k + ks)[None, :] < K), other=0.0)
            b = tl.load(b_ptr + (k + ks)[:, None] * sbk + cols[None, :] * sbn,
                        mask=((k + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rows[:, None] * scm + cols[None, :] * scn, acc.to(tl.float16))

    def my_matmul(a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=torch.float16, device=a.device)
        kernel[(triton.cdiv(M, 16) * triton.cdiv(N, 16),)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                                          b.stride(1), c.stride(0), c.stride(1),
                                                          BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
        return c
    return my_matmul


def test_my_matmul_without_a_store_mask_is_stopped_and_drawn(solutions):
    assert_out_of_bounds(tiling.check_my_matmul(my_matmul_without_store_mask(solutions)),
                         "kernel: store through c_ptr", "255 of 256 active lanes", "(c_ptr is 1x1)")


@triton.jit
def column_grouped_without_min(pid, num_pid_m, num_pid_n, GROUP_SIZE: tl.constexpr):
    in_group = GROUP_SIZE * num_pid_m
    first_n = (pid // in_group) * GROUP_SIZE
    pid_n = first_n + (pid % in_group) % GROUP_SIZE  # the short last group is not clamped
    pid_m = (pid % in_group) // GROUP_SIZE
    return pid_m, pid_n


def test_column_grouped_triton_without_the_clamp_is_stopped_and_drawn():
    assert_out_of_bounds(ordering.check_column_grouped_triton(column_grouped_without_min),
                         "_record_tiles_kernel: store through owner_ptr", "index (0, 5) (owner_ptr is 4x5")


@triton.jit
def persistent_past_the_last_tile(a_ptr, b_ptr, c_ptr, trace_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                                  stride_bn, stride_cm, stride_cn, NUM_PROGRAMS: tl.constexpr,
                                  GROUP_SIZE_M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                  BLOCK_K: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n + NUM_PROGRAMS, NUM_PROGRAMS):  # one step too many
        pid_m, pid_n = tile_grouped(tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        persistent_ex.matmul_tile(a_ptr, b_ptr, c_ptr, trace_ptr, tile, pid_m, pid_n, M, N, K, stride_am, stride_ak,
                                  stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def persistent_without_a_tile_bound(a_ptr, b_ptr, c_ptr, trace_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                                    stride_bn, stride_cm, stride_cn, NUM_PROGRAMS: tl.constexpr,
                                    GROUP_SIZE_M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                    BLOCK_K: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for step in range(0, tl.cdiv(num_pid_m * num_pid_n, NUM_PROGRAMS)):  # every program takes as many steps
        tile = tl.program_id(0) + step * NUM_PROGRAMS  # no `if tile < num_tiles`
        pid_m, pid_n = tile_grouped(tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        persistent_ex.matmul_tile(a_ptr, b_ptr, c_ptr, trace_ptr, tile, pid_m, pid_n, M, N, K, stride_am, stride_ak,
                                  stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K)


def test_persistent_loop_with_no_bound_on_the_tile_is_stopped():
    """Unequal shares (6 tiles on 4 programs): the last steps run past the last tile, as the exercise
    text promises the check stops (every case had tiles divisible by programs, so it passed)."""
    assert_out_of_bounds(persistent_ex.check_persistent_loop(persistent_without_a_tile_bound),
                         "store through trace_ptr", "trace_ptr is 6x4")


def test_persistent_loop_past_the_last_tile_is_stopped_and_drawn():
    assert_out_of_bounds(persistent_ex.check_persistent_loop(persistent_past_the_last_tile),
                         "store through trace_ptr", "called from line", "of persistent_past_the_last_tile",
                         "index (12, 0) (trace_ptr is 12x4)")


@triton.jit
def persistent_row_major(a_ptr, b_ptr, c_ptr, trace_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                         stride_cm, stride_cn, NUM_PROGRAMS: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * num_pid_n, NUM_PROGRAMS):
        persistent_ex.matmul_tile(a_ptr, b_ptr, c_ptr, trace_ptr, tile, tile // num_pid_n, tile % num_pid_n, M, N, K,
                                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                                  BLOCK_M, BLOCK_N, BLOCK_K)


def test_persistent_loop_in_row_major_order_names_the_wrong_tiles():
    assert_wrong(persistent_ex.check_persistent_loop(persistent_row_major),
                 "program 1, step 0 (tile index 1) computed tile (0, 1), expected tile (1, 0)")


@triton.jit
def find_tile_one_past(tile, tile_starts_ptr, sizes_ptr, num_problems, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    problem = 0
    for g in range(num_problems + 1):
        if tl.load(tile_starts_ptr + g + 1) <= tile:  # reads tile_starts[num_problems + 1]: one past the end
            problem = g + 1
    local = tile - tl.load(tile_starts_ptr + problem)
    num_pid_n = tl.cdiv(tl.load(sizes_ptr + 3 * problem + 1), BLOCK_N)
    return problem, local // num_pid_n, local % num_pid_n


@triton.jit
def find_tile_without_the_offset(tile, tile_starts_ptr, sizes_ptr, num_problems, BLOCK_M: tl.constexpr,
                                 BLOCK_N: tl.constexpr):
    problem = 0
    for g in range(num_problems):
        if tl.load(tile_starts_ptr + g) <= tile:
            problem = g
    num_pid_n = tl.cdiv(tl.load(sizes_ptr + 3 * problem + 1), BLOCK_N)
    return problem, tile // num_pid_n, tile % num_pid_n  # the global index, not the problem's own


def test_find_tile_reading_past_tile_starts_is_stopped_and_drawn():
    assert_out_of_bounds(grouped_ex.check_find_tile(find_tile_one_past), "load through tile_starts",
                         "called from the check's kernel", "element 5 (tile_starts has 5 elements: 0..4)")


def test_find_tile_without_the_problem_offset_names_the_wrong_tiles():
    assert_wrong(grouped_ex.check_find_tile(find_tile_without_the_offset), "computed problem 2 tile (")


@triton.jit
def moe_kernel(x_ptr, w_ptr, out_ptr, offs_ptr, N, K, stride_xt, stride_xk, stride_we, stride_wk, stride_wn,
               stride_ot, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               ROWS_MASK: tl.constexpr, START_FROM_OFFS: tl.constexpr):
    expert = tl.program_id(0)
    if START_FROM_OFFS:
        row_start = tl.load(offs_ptr + expert - 1, mask=expert > 0, other=0)
    else:
        row_start = expert * 0
    row_end = tl.load(offs_ptr + expert)
    rows = row_start + tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rows[:, None] * stride_xt + (k + ks)[None, :] * stride_xk,
                    mask=(rows[:, None] < row_end) & ((k + ks)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + expert * stride_we + (k + ks)[:, None] * stride_wk + cols[None, :] * stride_wn,
                    mask=((k + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(x, w, acc)
    if ROWS_MASK:
        mask = (rows[:, None] < row_end) & (cols[None, :] < N)
    else:
        mask = (rows[:, None] >= 0) & (cols[None, :] < N)
    tl.store(out_ptr + rows[:, None] * stride_ot + cols[None, :] * stride_on, acc.to(out_ptr.dtype.element_ty),
             mask=mask)




def moe_kernel_with(store_rows_mask: bool, first_row_from_offs: bool = True):
    return _Bound(moe_kernel, ROWS_MASK=store_rows_mask, START_FROM_OFFS=first_row_from_offs)


def test_expert_store_without_the_row_mask_is_stopped_and_drawn():
    assert_out_of_bounds(moe_ex.check_expert_rows_kernel(moe_kernel_with(store_rows_mask=False)),
                         "store through out_ptr", "program_id 1, 2, 0", "(out_ptr is 60x24)")


def test_expert_rows_starting_at_zero_names_the_experts():
    assert_wrong(moe_ex.check_expert_rows_kernel(moe_kernel_with(True, first_row_from_offs=False)),
                 "expert 2 (rows 20..26): rows 20..26")


# ----------------------------------------------------------------------------- answers of the wrong type
class _Meta:
    def __repr__(self):
        return "meta"


def _odd_values():
    return {
        "a tuple": (1, 2, 3),
        "a dict": {"programs": 3},
        "a tensor that requires grad": torch.ones(3, requires_grad=True),
        "a meta tensor": torch.empty(3, 3, device="meta"),
        "10**400": 10**400,
    }


@pytest.mark.parametrize("name", list(ALL_CHECKS))
@pytest.mark.parametrize("kind", list(_odd_values()))
def test_an_answer_of_the_wrong_type_gets_feedback_not_a_traceback(name, kind):
    value = _odd_values()[kind]
    as_answer = ALL_CHECKS[name](value)
    assert isinstance(as_answer, CheckResult) and as_answer.status == WRONG, str(as_answer)
    returned = ALL_CHECKS[name](lambda *args, **kwargs: _odd_values()[kind])
    assert isinstance(returned, CheckResult) and returned.status == WRONG, str(returned)
    assert str(returned) and returned._repr_html_()


# ----------------------------------------------------------------------------- hints in steps
def test_hints_come_in_steps_and_the_solution_only_on_request():
    reset_hints()
    check = start_here.check_launch_stats
    wrong = lambda n, block: (n // block, 0)  # noqa: E731
    first, second, third = check(wrong), check(wrong), check(wrong)
    nudge, approach, solution = check.hints.nudge, check.hints.approach, check.hints.solution
    assert nudge in str(first) and approach not in str(first) and solution not in str(first)
    assert "(n + block - 1) // block" not in str(first)  # never the formula on the first wrong answer
    assert nudge in str(second) and approach in str(second) and solution not in str(second)
    assert solution not in str(third) and "check_launch_stats.hint(level=3)" in str(third)
    assert solution in str(check.hint(level=3)) and nudge in str(check.hint(1))
    # the button (a <details> that opens on a click) comes with the text's "stuck?" line: after both hints
    assert "show a solution" not in first._repr_html_() and "show a solution" in second._repr_html_()
    assert first.show_hint(2).text == approach
    reset_hints()
    assert approach not in str(check(wrong))


def test_every_check_has_three_distinct_hint_steps():
    for name, check in ALL_CHECKS.items():
        levels = [check.hint(level).text for level in (1, 2, 3)]
        assert len(set(levels)) == 3 and all(levels), name


# ----------------------------------------------------------------------------- endless and huge answers
class _Runaway(BaseException):
    """An endless answer read far past any length a check expects: escapes every check (a check
    that reads it to the end would fill memory until the OOM killer ended the process)."""


class Endless:
    """An endless iterable, as ``itertools.count()`` or a generator that never stops, that counts
    how many of its items a check reads."""

    LIMIT = 100_000

    def __init__(self, item=lambda i: i):
        self.item, self.read = item, 0

    def __iter__(self):
        while True:
            self.read += 1
            if self.read > self.LIMIT:
                raise _Runaway(f"a check read {self.LIMIT} items of an endless answer")
            yield self.item(self.read - 1)


class Huge(Endless):
    """A sequence of 10**12 items, as ``range(10**12)``: sized, indexable, far too long to read."""

    def __len__(self):
        return 10**12

    def __getitem__(self, index):
        if isinstance(index, slice):
            raise TypeError("no slices")
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        self.read += 1
        if self.read > self.LIMIT:
            raise _Runaway(f"a check read {self.LIMIT} items of a huge answer")
        return self.item(index)


_ENDLESS = {
    "count": lambda: Endless(),
    "endless pairs": lambda: Endless(lambda i: (0, 0)),
    "endless triples": lambda: Endless(lambda i: (0, 0, 0)),
    "a pair of endless": lambda: (Endless(), Endless()),
    "rows of endless": lambda: [Endless(), Endless()],
    "endless rows": lambda: Endless(lambda i: Endless()),
    "huge": lambda: Huge(),
    "huge rows": lambda: Huge(lambda i: (0, 0, 0)),
    "rows of huge": lambda: [Huge(), Huge(), Huge()],
}


def _plain_checks():
    """Every check whose answer is a plain Python function (whose return value the check reads)."""
    from gemm_kernels.lab.exercises import moe_training as moe_training_ex
    from gemm_kernels.lab.exercises import warp_specialization as ws_ex

    checks = {name: check for name, check in ALL_CHECKS.items() if name not in JIT_ANSWERS}
    checks["ring_phases"] = ws_ex.check_ring_phases
    checks["wgrad_work"] = moe_training_ex.check_wgrad_work
    return checks


@pytest.mark.parametrize("name", sorted(_plain_checks()))
@pytest.mark.parametrize("kind", list(_ENDLESS))
def test_an_endless_or_huge_answer_is_wrong_at_once(name, kind):
    """A learner's function that returns itertools.count() (or a list of them, a generator that never
    stops, range(10**12)) where a list is expected: the check reads no further than the expected
    length plus one and says "wrong"; it used to grow until the OOM killer ended the process."""
    made = []

    def answer(*args, **kwargs):
        value = _ENDLESS[kind]()
        made.append(value)
        return value

    result = _plain_checks()[name](answer)
    assert result.status == WRONG, str(result)
    assert "MemoryError" not in str(result), str(result)

    def endless_in(value):
        if isinstance(value, Endless):
            yield value
        if isinstance(value, (list, tuple)):
            for v in value:
                yield from endless_in(v)

    for value in made:
        for endless in endless_in(value):
            assert endless.read <= 1000, f"{name} read {endless.read} items of an endless answer"


_ITERTOOLS_SCRIPT = """
import itertools, resource, sys
from gemm_kernels.lab.exercises import grouped_gemm, moe_training, persistent_tma, start_here, stream_k
from gemm_kernels.lab.exercises import warp_specialization
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
with open("/proc/self/statm") as f:
    used = int(f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + 2**30, hard))  # a GiB more than now
checks = [start_here.check_launch_stats, persistent_tma.check_persistent_tiles, stream_k.check_streamk_share,
          grouped_gemm.check_program_tiles, moe_training.check_wgrad_work, warp_specialization.check_ring_phases]
answers = [lambda *a: itertools.count(), lambda *a: itertools.repeat((0, 0, 0)),
           lambda *a: (itertools.count(), itertools.count()), lambda *a: range(10**12),
           lambda *a: [range(10**12)] * 3]
for check in checks:
    for answer in answers:
        result = check(answer)
        assert result.status == "wrong" and "MemoryError" not in str(result), str(result)
print("ok")
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="measures memory through /proc")
def test_itertools_count_as_an_answer_is_wrong_in_bounded_memory(tmp_path):
    """The review's own case, in a process whose memory is capped: itertools.count() and friends."""
    import os
    import subprocess
    import sys

    try:
        out = subprocess.run([sys.executable, "-c", _ITERTOOLS_SCRIPT], capture_output=True, text=True,
                             timeout=180, env={**os.environ})
    except subprocess.TimeoutExpired:
        pytest.fail("checks given itertools.count() did not finish in 180 s")
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_messages_count_in_the_singular_and_the_plural():
    from gemm_kernels.lab.exercises._core import compare_arrays, plural

    assert (plural(1, "program"), plural(0, "program"), plural(3, "idle lane")) == ("1 program", "0 programs",
                                                                                  "3 idle lanes")
    assert compare_arrays(np.zeros(1), np.ones(1), "c")[0].startswith("c: 1 of 1 element wrong")
    assert compare_arrays(np.zeros(2), np.ones(2), "c")[0].startswith("c: 2 of 2 elements wrong")


def test_a_verdict_shows_once_in_a_notebook_whatever_follows_it(monkeypatch):
    """In Jupyter a check shows its verdict when it runs (a `print` after it in the cell hid it
    before), and the same result as the cell's last expression is not shown twice."""
    import IPython
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append(obj))
    result = start_here.check_launch_stats(lambda n, block: (1, 0))
    assert result.status == WRONG and len(shown) == 1
    assert shown[0]["text/plain"] == str(result) and "launch_stats" in shown[0]["text/html"]
    result._ipython_display_()  # the cell's last expression: already shown
    assert len(shown) == 1


def test_an_exit_or_the_learners_own_error_after_a_stub_is_wrong_not_unattempted():
    """SystemExit from an answer is reported, never raised into the notebook; a learner's own error
    raised while handling a stub's NotImplementedError is theirs (it read "not attempted")."""
    import sys

    def helper():
        raise NotImplementedError("your turn")

    def block_offsets(*args):
        try:
            return helper()
        except NotImplementedError:
            raise ValueError("my own bug")  # noqa: B904  (its context is the stub's error, as a learner writes it)

    result = pointers.check_block_offsets(block_offsets)
    assert result.status == WRONG and "my own bug" in str(result), str(result)
    result = pointers.check_block_offsets(lambda *args: sys.exit(3))
    assert result.status == WRONG and "SystemExit" in str(result), str(result)


def _order_by_the_package(num_pid_m, num_pid_n):
    from gemm_kernels.models import tiles as model

    return model.launch_order_grid(num_pid_m * 16, num_pid_n * 16, 16, 16, order="row_major")


def _waves_by_the_package(M, N, bm, bn, sms):
    from gemm_kernels.models.schedule import tile_schedule

    s = tile_schedule(M, N, bm, bn, "grouped", programs_in_flight=sms)
    return s.num_waves, s.num_waves * sms - s.num_tiles


def _share_by_the_package(pid, num_tiles, k_tiles, num_programs, sk_tiles):
    from gemm_kernels.models.tiles import streamk_segments

    table = streamk_segments(num_tiles, k_tiles, num_programs, sk_tiles)
    return [tuple(int(v) for v in r[1:]) for r in table if r[0] == pid and r[1] >= num_tiles - sk_tiles]


def _walk_by_the_package(shapes, bm, bn, programs, pid):
    from gemm_kernels.models.tiles import multi_problem_schedule

    table = multi_problem_schedule(shapes, bm, bn, programs, "row_major")
    return [tuple(int(v) for v in row) for row in table[table[:, 1] == pid][:, 3:6]]


@pytest.mark.parametrize("check, answer, helper", [
    (tiling.check_row_major_launch_order, _order_by_the_package, "launch_order_grid"),
    (persistent_ex.check_waves_and_tail, _waves_by_the_package, "tile_schedule"),
    (streamk_ex.check_streamk_share, _share_by_the_package, "streamk_segments"),
    (grouped_ex.check_program_tiles, _walk_by_the_package, "multi_problem_schedule"),
], ids=["02-launch-order", "05-waves", "05b-share", "06-program-tiles"])
def test_an_answer_that_calls_the_packages_model_of_it_is_refused(check, answer, helper):
    """Right numbers from the package's own model of the exercise are not the learner's work."""
    result = check(answer)
    assert result.status == WRONG and helper in str(result) and "computes this exercise's answer" in str(result)


@triton.jit
def column_major_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    pid_m, pid_n = pid % num_pid_m, pid // num_pid_m   # column-major
    rm = pid_m * BM + tl.arange(0, BM); rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None]*sam + rk[None, :]*sak, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None]*sbk + rn[None, :]*sbn, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None]*scm + rn[None, :]*scn, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))
def column_major_matmul(a, b):
    M, K = a.shape; N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float16, device=a.device)
    column_major_matmul_kernel[(triton.cdiv(M, 16) * triton.cdiv(N, 16),)](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BM=16, BN=16, BK=16)
    return c


def test_my_matmul_in_column_major_order_is_refused():
    """Exercise 3 asks for row-major program order; C comes out right either way, so the order is
    read from where each program's first store landed."""
    result = tiling.check_my_matmul(column_major_matmul)
    assert_wrong(result, "C is right, but your programs take the tiles in column-major", "row-major order")


@triton.jit
def column_grouped_with_tl_min(pid, num_pid_m, num_pid_n, GROUP_SIZE_N: tl.constexpr):
    num_pid_in_group = GROUP_SIZE_N * num_pid_m
    first_pid_n = (pid // num_pid_in_group) * GROUP_SIZE_N
    group_size_n = tl.min(num_pid_n - first_pid_n, GROUP_SIZE_N)  # a reduction, not the smaller of two
    pid_in_group = pid % num_pid_in_group
    return pid_in_group // group_size_n, first_pid_n + pid_in_group % group_size_n


def test_tl_min_of_two_values_is_named_as_the_reduction_it_is():
    assert_wrong(ordering.check_column_grouped_triton(column_grouped_with_tl_min),
                 "of column_grouped_with_tl_min: tl.min(x, axis) is a reduction", "tl.minimum(a, b)")


def _walk_with_floor_division(shapes, block_m, block_n, num_programs, pid):
    laid_out = []
    for problem, (M, N) in enumerate(shapes):
        num_pid_n = N // block_n
        for local in range((M // block_m) * num_pid_n):
            laid_out.append((problem, local // num_pid_n, local % num_pid_n))
    return laid_out[pid::num_programs]


def test_program_tiles_with_floor_division_names_the_partial_tiles():
    assert_wrong(grouped_ex.check_program_tiles(_walk_with_floor_division),
                 "partial tiles at the problems' edges are left out", "cdiv(M, block_m)")


def test_hints_name_the_exercises_own_parameters():
    """03's hint 3 said GROUP_SIZE where the exercise has GROUP_SIZE_N; 02's solution hint padded
    and sliced where the exercise says "no slicing shortcuts"."""
    assert "GROUP_SIZE_N" in ordering.check_column_grouped_triton.hint(3).text
    assert "GROUP_SIZE " not in ordering.check_column_grouped_triton.hint(3).text
    assert "pad" not in tiling.check_one_program.hint(3).text and "np.where" in tiling.check_one_program.hint(3).text


def test_rows_match_solution_reads_one_byte_outputs():
    """05b's rows_match solution and the reference read an fp8 (1-byte) output's bits too: the
    solution's width table once lacked 1 and raised a KeyError."""
    import json

    (cell,) = [c for c in json.loads((NOTEBOOKS / "05b_stream_k.ipynb").read_text())["cells"]
               if c.get("id") == "05b-rows-match-answer"]
    namespace = {"torch": torch}
    exec("".join(cell["source"]), namespace)

    def fp8_matmul(x, w):
        return (x @ w).to(torch.float8_e4m3fn)

    a, b = torch.randn(6, 8), torch.randn(8, 4)
    for rows_match in (namespace["rows_match"], streamk_ex.rows_match_ref):
        assert rows_match(fp8_matmul, a, b, 3, 6) is True
        assert rows_match(lambda x, w: fp8_matmul(x + (x.shape[0] == 6), w), a, b, 3, 6) is False
