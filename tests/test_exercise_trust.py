"""Checks a learner can trust (issue 27): "correct" means the code would run on a GPU.

Every answer the issue lists as accepted though it would fail on a GPU, or though it runs no
kernel of the learner's, must not be called correct; then learner mistakes, each with the
specific diagnosis it gets (swapped strides, floor for ceiling, a missing K mask, a transposed
mask, pid_m and pid_n swapped, ...).  The learner's kernels are compiled for sm_90 by the
checks' worker (``_kernel_checks``); the GPU run is tested through its plumbing here and for real
under ``@pytest.mark.gpu``."""

from __future__ import annotations

import time

import pytest
import torch
import triton
import triton.language as tl

import gemm_kernels as gk
from gemm_kernels.kernels.matmul import matmul_ref
from gemm_kernels.kernels.moe_wgrad import wgrad_tile as package_wgrad_tile
from gemm_kernels.kernels.tiles import locate_problem, streamk_range, tile_coords, tile_grouped
from gemm_kernels.lab.exercises import CORRECT, WRONG, CheckResult
from gemm_kernels.lab.exercises import _kernel_checks as kc
from gemm_kernels.lab.exercises import grouped_gemm as grouped_ex
from gemm_kernels.lab.exercises import grouped_l2_ordering as ordering
from gemm_kernels.lab.exercises import kernel_fusion as fusion
from gemm_kernels.lab.exercises import moe_grouped_mm as moe_ex
from gemm_kernels.lab.exercises import moe_training as training_ex
from gemm_kernels.lab.exercises import naive_tiling as tiling
from gemm_kernels.lab.exercises import persistent_tma as persistent_ex
from gemm_kernels.lab.exercises import pointer_arithmetic as pointers
from gemm_kernels.lab.exercises import start_here
from gemm_kernels.lab.exercises import stream_k as streamk_ex
from _fixed_launch import Bound


def assert_wrong(result: CheckResult, *fragments: str):
    assert isinstance(result, CheckResult)
    assert result.status == WRONG, str(result)
    text = str(result)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"


def assert_correct(result: CheckResult, *fragments: str):
    assert result.status == CORRECT, str(result)
    for fragment in fragments:
        assert fragment in str(result), str(result)


# ----------------------------------------------------------------------------- a learner's matmul, with mistakes
@triton.jit
def mm_variant(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MISTAKE: tl.constexpr):
    pid = tl.program_id(0)
    if MISTAKE == "num_pid_n floor":
        num_pid_n = N // BLOCK_N
    else:
        num_pid_n = tl.cdiv(N, BLOCK_N)
    if MISTAKE == "pid swapped":
        pid_m = pid % num_pid_n
        pid_n = pid // num_pid_n
    else:
        pid_m = pid // num_pid_n
        pid_n = pid % num_pid_n
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    if MISTAKE == "fp16 accumulator":
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        if MISTAKE == "no K mask":
            a_mask = rows[:, None] < M
            b_mask = cols[None, :] < N
        else:
            a_mask = (rows[:, None] < M) & ((k + ks)[None, :] < K)
            b_mask = ((k + ks)[:, None] < K) & (cols[None, :] < N)
        if MISTAKE == "strides ignored":
            a = tl.load(a_ptr + rows[:, None] * K + (k + ks)[None, :], mask=a_mask, other=0.0)
            b = tl.load(b_ptr + (k + ks)[:, None] * N + cols[None, :], mask=b_mask, other=0.0)
        elif MISTAKE == "b strides swapped":
            a = tl.load(a_ptr + rows[:, None] * stride_am + (k + ks)[None, :] * stride_ak, mask=a_mask, other=0.0)
            b = tl.load(b_ptr + (k + ks)[:, None] * stride_bn + cols[None, :] * stride_bk, mask=b_mask, other=0.0)
        else:
            a = tl.load(a_ptr + rows[:, None] * stride_am + (k + ks)[None, :] * stride_ak, mask=a_mask, other=0.0)
            b = tl.load(b_ptr + (k + ks)[:, None] * stride_bk + cols[None, :] * stride_bn, mask=b_mask, other=0.0)
        if MISTAKE == "fp16 accumulator":
            acc += tl.dot(a, b)  # fp16 + fp32: the interpreter promotes, a compiled loop refuses
        elif MISTAKE == "out_dtype fp16":
            acc = tl.dot(a, b, acc.to(tl.float16), out_dtype=tl.float16).to(tl.float32)
        else:
            acc = tl.dot(a, b, acc)
    if MISTAKE == "transposed store mask":
        c_mask = (rows[None, :] < M) & (cols[:, None] < N)
    else:
        c_mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(tl.float16), mask=c_mask)


def matmul_launcher(mistake="none", *, block=32, grid="cdiv", strides="right", result="c"):
    """A learner's my_matmul around mm_variant, with one mistake in the kernel or the launcher."""

    def my_matmul(a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=torch.float16, device=a.device)
        if grid == "cdiv":
            programs = triton.cdiv(M, block) * triton.cdiv(N, block)
        else:  # rounded down (at least one program: a launch of none is refused by name)
            programs = max(1, (M // block) * (N // block))
        sb = {"right": (b.stride(0), b.stride(1)), "swapped": (b.stride(1), b.stride(0)), "contiguous": (N, 1)}[strides]
        mm_variant[(programs,)](a, b, c, M, N, K, a.stride(0), a.stride(1), *sb, c.stride(0), c.stride(1),
                                BLOCK_M=block, BLOCK_N=block, BLOCK_K=block, MISTAKE=mistake)
        return c if result == "c" else (a.float() @ b.float()).half()

    return my_matmul


# ----------------------------------------------------------------------------- the list: not correct
def test_the_variant_itself_is_correct_and_compiles():
    assert_correct(tiling.check_my_matmul(matmul_launcher()), "It compiles for a GPU (sm_90, Hopper)")


def test_my_matmul_with_an_fp16_accumulator_does_not_compile_for_sm_90():
    result = tiling.check_my_matmul(matmul_launcher("fp16 accumulator"))
    assert_wrong(result, "it runs in the interpreter, but it does not compile for a GPU (sm_90, Hopper)",
                 "of mm_variant: for k in range(0, K, BLOCK_K):",
                 "Loop-carried variable acc has initial type", "tl.zeros(..., dtype=tl.float32)")


def test_my_matmul_accumulating_in_fp16_through_out_dtype_is_refused():
    result = tiling.check_my_matmul(matmul_launcher("out_dtype fp16"))
    assert_wrong(result, "out_dtype=tl.float16", "accumulates in fp16: the exercise asks for an fp32 accumulator")


@triton.jit
def cg_with_a_python_helper(pid, num_pid_m, num_pid_n, GROUP_SIZE_N: tl.constexpr):
    num_pid_in_group = GROUP_SIZE_N * num_pid_m
    first_pid_n = (pid // num_pid_in_group) * GROUP_SIZE_N
    group_size_n = plain_min(num_pid_n - first_pid_n, GROUP_SIZE_N)
    pid_in_group = pid % num_pid_in_group
    return pid_in_group // group_size_n, first_pid_n + pid_in_group % group_size_n


def plain_min(a, b):
    return a if a < b else b


def test_column_grouped_triton_calling_a_plain_python_helper_does_not_compile():
    result = ordering.check_column_grouped_triton(cg_with_a_python_helper)
    assert_wrong(result, "does not compile for a GPU", "of cg_with_a_python_helper: group_size_n = plain_min(",
                 "Unsupported function referenced", "`plain_min` is a plain Python function",
                 "put @triton.jit above its def")


def test_my_matmul_ignoring_its_strides_fails_on_a_transposed_b():
    result = tiling.check_my_matmul(matmul_launcher("strides ignored"))
    assert_wrong(result, "b transposed (strides a (70, 1), b (1, 70))",
                 "diagnosis: your kernel reads b as if it were contiguous (rows 17 apart), but b here has strides "
                 "(1, 70)")


@triton.jit
def gelu_through_exp(x):
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    e = tl.exp(2.0 * u)
    return 0.5 * x * (1.0 + (e - 1.0) / (e + 1.0))


def test_gelu_tanh_through_exp_returns_nan_where_exp_overflows():
    result = fusion.check_gelu_tanh(gelu_through_exp)
    assert_wrong(result, "large points (|x| from 10.4 to 1e30) are off", "worst at x=10.4: expected 10.4, got nan",
                 "returns NaN from |x| = 10.4 on", "tl.sigmoid saturates")


@triton.jit
def wgrad_tile_without_the_clamp(tile, offs_ptr, T, num_pid_m, num_pid_n, GROUP_SIZE_M: tl.constexpr):
    tiles_per_expert = num_pid_m * num_pid_n
    expert = tile // tiles_per_expert
    pid_m, pid_n = tile_coords(tile % tiles_per_expert, num_pid_m, num_pid_n, True, GROUP_SIZE_M)
    row_end = tl.load(offs_ptr + expert)
    first_row = tl.load(offs_ptr + expert - 1, mask=expert > 0, other=0)
    return expert, pid_m, pid_n, first_row, row_end - first_row


def test_wgrad_tile_without_the_clamp_is_wrong_on_corrupt_offsets():
    result = training_ex.check_wgrad_tile(wgrad_tile_without_the_clamp)
    assert_wrong(result, "corrupt offs [3, 3, 40, 41] with T=30: tile 4: rows 37 (expected 27)",
                 "the exercise asks to clamp them into [0, T]")


def test_my_matmul_answers_without_a_kernel_are_refused():
    for answer in (lambda a, b: a @ b, matmul_ref):
        assert_wrong(tiling.check_my_matmul(answer), "this returns the right numbers without your kernel",
                     "launched no @triton.jit kernel you wrote")
    # the package's kernel is stopped at its launch (its autotuning would outlast the time limit on a GPU)
    assert_wrong(tiling.check_my_matmul(gk.matmul), "this launches no kernel of yours",
                 "gemm_kernels.kernels.matmul._matmul_kernel, the package's", "no @triton.jit kernel you wrote")


def test_axpy_in_torch_is_refused():
    assert_wrong(start_here.check_axpy(lambda alpha, x, y: alpha * x + y),
                 "this returns the right numbers without your kernel")


@pytest.mark.parametrize("check, reference", [
    (start_here.check_launch_stats, start_here.launch_stats_ref),
    (pointers.check_block_offsets, pointers.block_offsets_ref),
    (pointers.check_block_mask, pointers.block_mask_ref),
    (tiling.check_one_program, tiling.one_program_ref),
    (ordering.check_column_grouped_tile, ordering.column_grouped_tile_ref),
    (persistent_ex.check_waves_and_tail, persistent_ex.waves_ref),
    (persistent_ex.check_persistent_tiles, persistent_ex.persistent_tiles_ref),
    (streamk_ex.check_streamk_share, streamk_ex.share_ref),
    (grouped_ex.check_program_tiles, grouped_ex.program_tiles_ref),
    (moe_ex.check_tiles_per_expert, moe_ex.tiles_per_expert_ref),
    (moe_ex.check_padded_rows, moe_ex.padded_rows_ref),
    (training_ex.check_wgrad_work, training_ex.wgrad_work_ref),
])
def test_a_ref_function_passed_as_the_answer_is_refused(check, reference):
    assert_wrong(check(reference), "this is the package's own", reference.__name__, "not your code")


def test_a_lambda_around_a_ref_function_is_refused():
    assert_wrong(tiling.check_one_program(lambda *args: tiling.one_program_ref(*args)),
                 "your answer calls one_program_ref, the check's own reference")
    assert_wrong(start_here.check_launch_stats(lambda n, block: start_here.launch_stats_ref(n, block)),
                 "your answer calls launch_stats_ref")


def test_a_ref_called_with_a_mistake_gets_the_mistake_explained():
    # the reference as a building block of a wrong answer: the wrong numbers are what the learner needs to see
    assert_wrong(start_here.check_launch_stats(lambda n, block: start_here.launch_stats_ref(n, 2 * block)),
                 "n=1000, BLOCK=256: expected 4 programs")


def test_the_package_answers_of_jit_exercises_are_refused():
    assert_wrong(training_ex.check_wgrad_tile(package_wgrad_tile), "this is the package's own",
                 "moe_wgrad.wgrad_tile")
    assert_wrong(ordering.check_column_grouped_triton(tile_grouped), "this is the package's own")
    assert_wrong(persistent_ex.check_persistent_loop(persistent_ex.matmul_tile), "this is the package's own")
    assert_wrong(streamk_ex.check_streamk_loop(streamk_ex.run_segment), "this is the package's own")


@triton.jit
def wgrad_tile_through_the_package(tile, offs_ptr, T, num_pid_m, num_pid_n, GROUP_SIZE_M: tl.constexpr):
    return package_wgrad_tile(tile, offs_ptr, T, num_pid_m, num_pid_n, GROUP_SIZE_M)


def test_a_jit_answer_that_calls_the_package_answer_is_refused():
    assert_wrong(training_ex.check_wgrad_tile(wgrad_tile_through_the_package),
                 "your code calls gemm_kernels.kernels.moe_wgrad.wgrad_tile, the package's own answer")


@triton.jit
def find_tile_through_the_package(tile, tile_starts_ptr, sizes_ptr, num_problems, BLOCK_M: tl.constexpr,
                                  BLOCK_N: tl.constexpr):
    problem, local = locate_problem(tile, tile_starts_ptr, num_problems)
    num_pid_n = tl.cdiv(tl.load(sizes_ptr + 3 * problem + 1), BLOCK_N)
    return problem, local // num_pid_n, local % num_pid_n


def test_find_tile_through_the_package_lookup_is_refused():
    assert_wrong(grouped_ex.check_find_tile(find_tile_through_the_package),
                 "your code calls gemm_kernels.kernels.tiles.locate_problem")


def test_a_launcher_that_returns_torch_numbers_after_its_launch_is_refused():
    assert_wrong(tiling.check_my_matmul(matmul_launcher(result="torch")),
                 "this returns the right numbers without your kernel: with its launch skipped")


# ----------------------------------------------------------------------------- my_matmul: the common mistakes
@pytest.mark.parametrize("mistake, block, fragments", [
    ("pid swapped", 16, ["M=33, N=17, K=70: ", "reaches came out right: pid_m and pid_n swapped (pid // num_pid_n is "
                         "the tile row"]),
    ("num_pid_n floor", 32, ["reaches came out right: num_pid_n rounded down (N // BLOCK_N = 1, but 2 tile columns "
                             "cover N = 48: tl.cdiv(N, BLOCK_N))"]),
    ("no K mask", 32, ["load through a_ptr", "past a's last column: K = 1 column) are active",
                       "has no K limit: the last K block runs past K"]),
    ("b strides swapped", 32, ["load through b_ptr", "the two strides are swapped (stride_bk and stride_bn)"]),
    ("transposed store mask", 32, ["store through c_ptr", "the mask of this store is transposed",
                                   "rows go down the block (rows[:, None] < 20), columns across (cols[None, :] < 36)"]),
])
def test_my_matmul_kernel_mistakes_are_named(mistake, block, fragments):
    assert_wrong(tiling.check_my_matmul(matmul_launcher(mistake, block=block)), *fragments)


@pytest.mark.parametrize("options, fragments", [
    ({"grid": "floor"}, ["the grid launches 1 program for 1 x 2 = 2 tiles of C",
                         "rounds the ragged last row or column of tiles away; use triton.cdiv"]),
    ({"strides": "swapped", "block": 16}, ["the launch passes b.stride(1) = 1 as stride_bk and b.stride(0) = 48 as "
                                           "stride_bn: swapped"]),
    ({"strides": "contiguous"}, ["the launch passes (17, 1) as b's strides, as if it were contiguous, but b here "
                                 "has strides (1, 70)"]),
])
def test_my_matmul_launcher_mistakes_are_named(options, fragments):
    assert_wrong(tiling.check_my_matmul(matmul_launcher(**options)), *fragments)


# ----------------------------------------------------------------------------- axpy
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, alpha * tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


OFFSET = 0  # a plain global: the interpreter reads it, a compiled kernel refuses it


@triton.jit
def axpy_reading_a_global(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK) + OFFSET
    mask = offsets < n
    tl.store(out_ptr + offsets, alpha * tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


ZERO = tl.constexpr(0)  # a constexpr global: fine on a GPU


@triton.jit
def axpy_reading_a_constexpr(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK) + ZERO
    mask = offsets < n
    tl.store(out_ptr + offsets, alpha * tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


def axpy_with(kernel, grid="cdiv", block=1024):
    def axpy(alpha, x, y):
        out = torch.empty_like(x)
        programs = triton.cdiv(x.numel(), block) if grid == "cdiv" else x.numel() // block
        kernel[(programs,)](x, y, out, alpha, x.numel(), BLOCK=block)
        return out
    return axpy


def test_axpy_reading_a_plain_global_does_not_compile():
    assert_wrong(start_here.check_axpy(axpy_with(axpy_reading_a_global)), "does not compile for a GPU",
                 "of axpy_reading_a_global: offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK) + OFFSET",
                 "Cannot access global variable OFFSET", "`OFFSET = tl.constexpr(...)`")


def test_axpy_reading_a_constexpr_global_is_correct():
    assert_correct(start_here.check_axpy(axpy_with(axpy_reading_a_constexpr)), "compiles for a GPU")


def test_axpy_with_a_grid_rounded_down_is_named():
    result = start_here.check_axpy(axpy_with(axpy_kernel, grid="floor"))
    assert_wrong(result, "every launch grid size must be at least 1",
                 "(line ", "kernel[(programs,)](x, y, out, alpha, x.numel(), BLOCK=block))",
                 "the grid has 0 programs of BLOCK = 1024 for n = 1 element: n // BLOCK rounds down")
    assert "_kernel_checks.py" not in str(result) and "return run_checked" not in str(result)


def test_axpy_with_blocks_of_a_non_power_of_two_is_refused():
    assert_wrong(start_here.check_axpy(axpy_with(axpy_kernel, block=1000)), "power of 2")


# ----------------------------------------------------------------------------- transpose
@triton.jit
def transpose_variant(x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, MISTAKE: tl.constexpr):
    if MISTAKE == "pid swapped":
        rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    else:
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    if MISTAKE == "transposed mask":
        mask = (rows[None, :] < M) & (cols[:, None] < N)
    else:
        mask = (rows[:, None] < M) & (cols[None, :] < N)
    if MISTAKE == "x strides swapped":
        block = tl.load(x_ptr + rows[:, None] * stride_xn + cols[None, :] * stride_xm, mask=mask)
    else:
        block = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    if MISTAKE == "no transpose":
        tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, block, mask=mask)
    else:
        tl.store(out_ptr + cols[None, :] * stride_om + rows[:, None] * stride_on, block, mask=mask)


def transpose_launcher(mistake="none", grid="right", strides="right"):
    def transpose(x):
        M, N = x.shape
        out = torch.empty((N, M), dtype=x.dtype, device=x.device)
        g = {"right": (triton.cdiv(M, 16), triton.cdiv(N, 16)), "swapped": (triton.cdiv(N, 16), triton.cdiv(M, 16)),
             "floor": (max(1, M // 16), max(1, N // 16))}[grid]
        sx = (x.stride(0), x.stride(1)) if strides == "right" else (x.stride(1), x.stride(0))
        transpose_variant[g](x, out, M, N, *sx, out.stride(0), out.stride(1), BLOCK_M=16, BLOCK_N=16, MISTAKE=mistake)
        return out
    return transpose


@pytest.mark.parametrize("launcher, fragments", [
    (transpose_launcher("pid swapped"), ["a kernel taking its rows from program_id(1) reaches on the grid (3, 2)"]),
    (transpose_launcher("transposed mask"), ["the mask of this load is transposed"]),
    (transpose_launcher("x strides swapped"), ["the two strides are swapped (stride_xm and stride_xn)"]),
    (transpose_launcher("no transpose"), ["this store puts x[i, j] at out[i, j]", "x[i, j] goes to out[j, i]"]),
    (transpose_launcher(grid="swapped"), ["the grid is (3, 2) = (cdiv(N, BLOCK_N), cdiv(M, BLOCK_M))"]),
    (transpose_launcher(grid="floor"), ["the grid (1, 2) covers 16 rows and 32 columns of the 20 x 33 x",
                                        "use (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N)) = (2, 3)"]),
    (transpose_launcher(strides="swapped"), ["the launch passes x.stride(1) = 1 as stride_xm and x.stride(0) = 66 "
                                             "as stride_xn: swapped"]),
], ids=["pid swapped", "transposed mask", "x strides swapped", "no transpose", "grid swapped", "grid floor",
        "launch strides swapped"])
def test_transpose_mistakes_are_named(launcher, fragments):
    assert_wrong(pointers.check_transpose(launcher), *fragments)


def test_transpose_in_torch_is_refused():
    assert_wrong(pointers.check_transpose(lambda x: x.t().contiguous().clone()),
                 "this returns the right numbers without your kernel")


# ----------------------------------------------------------------------------- column_grouped_triton
@triton.jit
def cg_returning_n_first(pid, num_pid_m, num_pid_n, GROUP_SIZE_N: tl.constexpr):
    num_pid_in_group = GROUP_SIZE_N * num_pid_m
    first_pid_n = (pid // num_pid_in_group) * GROUP_SIZE_N
    group_size_n = tl.minimum(num_pid_n - first_pid_n, GROUP_SIZE_N)
    pid_in_group = pid % num_pid_in_group
    return first_pid_n + pid_in_group % group_size_n, pid_in_group // group_size_n


@triton.jit
def cg_without_the_clamp(pid, num_pid_m, num_pid_n, GROUP_SIZE_N: tl.constexpr):
    in_group = GROUP_SIZE_N * num_pid_m
    first_n = (pid // in_group) * GROUP_SIZE_N
    return (pid % in_group) // GROUP_SIZE_N, first_n + (pid % in_group) % GROUP_SIZE_N


@triton.jit
def cg_through_tile_grouped(pid, num_pid_m, num_pid_n, GROUP_SIZE_N: tl.constexpr):
    pid_n, pid_m = tile_grouped(pid, num_pid_n, num_pid_m, GROUP_SIZE_N)  # the row-grouped order, turned
    return pid_m, pid_n


def cg_in_plain_python(pid, num_pid_m, num_pid_n, GROUP_SIZE_N):
    return ordering.column_grouped_tile_ref(pid, num_pid_m, num_pid_n, GROUP_SIZE_N)


def test_column_grouped_triton_returning_the_pair_backwards_is_named():
    assert_wrong(ordering.check_column_grouped_triton(cg_returning_n_first),
                 "every program returned (pid_n, pid_m): return the pair the other way round")


def test_column_grouped_triton_without_the_clamp_names_the_short_last_group():
    result = ordering.check_column_grouped_triton(cg_without_the_clamp)
    assert_wrong(result, "program 17 maps to tile (0, 5), outside the 4 x 5 grid of tiles",
                 "the last group starts at column 4 and is only 1 wide, not GROUP_SIZE_N = 2",
                 "tl.minimum(num_pid_n - first_n, GROUP_SIZE_N)")
    assert "check the offsets and loop bounds" not in str(result)  # the generic hint gives way to the diagnosis


def test_column_grouped_triton_through_the_package_row_order_turned_is_refused():
    """Right numbers, but 03's exercise hands no package helper (issue 48: the package's @triton.jit
    helpers did a kernel exercise's work): tiles.tile_grouped is refused by name."""
    assert_wrong(ordering.check_column_grouped_triton(cg_through_tile_grouped),
                 "your code uses gemm_kernels.kernels.tiles.tile_grouped, which this exercise does not hand you",
                 "(here: none)")


def test_column_grouped_triton_in_plain_python_asks_for_triton_jit():
    assert_wrong(ordering.check_column_grouped_triton(cg_in_plain_python),
                 "expected a @triton.jit function, got a plain Python function (cg_in_plain_python)",
                 "put @triton.jit on the line above `def cg_in_plain_python`")


# ----------------------------------------------------------------------------- 04, 05, 06, 07
def test_gelu_tanh_in_plain_python_asks_for_triton_jit():
    assert_wrong(fusion.check_gelu_tanh(lambda x: x), "expected a @triton.jit function")


@triton.jit
def persistent_with_a_floor(a_ptr, b_ptr, c_ptr, trace_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                            stride_cm, stride_cn, NUM_PROGRAMS: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    num_pid_m = M // BLOCK_M  # the partial last tile row is left out
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS):
        pid_m, pid_n = tile_grouped(tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        persistent_ex.matmul_tile(a_ptr, b_ptr, c_ptr, trace_ptr, tile, pid_m, pid_n, M, N, K, stride_am, stride_ak,
                                  stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K)


def test_persistent_loop_with_the_tile_count_rounded_down_is_named():
    assert_wrong(persistent_ex.check_persistent_loop(persistent_with_a_floor),
                 "the tiles never computed are the last (partial) tile row: M // BLOCK counts whole tiles only")


@triton.jit
def masks_transposed(rows, cols, ks, M, N, K):
    a_mask = (rows[None, :] < M) & (ks[:, None] < K)
    b_mask = (ks[:, None] < K) & (cols[None, :] < N)
    c_mask = (rows[:, None] < M) & (cols[None, :] < N)
    return a_mask, b_mask, c_mask


def test_bounds_masks_with_a_transposed_a_mask_is_named():
    assert_wrong(grouped_ex.check_bounds_masks(masks_transposed),
                 "a_mask is transposed: rows go down the block (rows[:, None] < M) and ks across (ks[None, :] < K)")


@triton.jit
def moe_variant(x_ptr, w_ptr, out_ptr, offs_ptr, N, K, stride_xt, stride_xk, stride_we, stride_wk, stride_wn,
                stride_ot, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                MISTAKE: tl.constexpr):
    expert = tl.program_id(0)
    row_start = tl.load(offs_ptr + expert - 1, mask=expert > 0, other=0)
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
    if MISTAKE == "no row limit":
        mask = cols[None, :] < N
    elif MISTAKE == "transposed mask":
        mask = (rows[None, :] < row_end) & (cols[:, None] < N)
    else:
        mask = (rows[:, None] < row_end) & (cols[None, :] < N)
    tl.store(out_ptr + rows[:, None] * stride_ot + cols[None, :] * stride_on, acc.to(out_ptr.dtype.element_ty),
             mask=mask)




def test_expert_store_without_the_row_limit_is_named():
    result = moe_ex.check_expert_rows_kernel(Bound(moe_variant, MISTAKE="no row limit"))
    assert_wrong(result, "store through out_ptr", "the store's row limit is this expert's own end, row_end = "
                 "offs[expert] (rows[:, None] < row_end), not out's row count")
    assert "rows[:, None] < 60" not in str(result)  # out's rows are not the limit an expert's tile needs


# ----------------------------------------------------------------------------- more mistakes, across the exercises
def scale(alpha, x):
    return alpha * x


@triton.jit
def axpy_calling_python(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, scale(alpha, tl.load(x_ptr + offsets, mask=mask)) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


@triton.jit
def axpy_block_not_constexpr(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, alpha * tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


def test_axpy_calling_a_plain_python_function_does_not_compile():
    assert_wrong(start_here.check_axpy(axpy_with(axpy_calling_python)), "does not compile for a GPU",
                 "`scale` is a plain Python function", "of axpy_calling_python: tl.store(out_ptr + offsets, scale(")


def test_axpy_with_a_block_size_that_is_not_constexpr_is_refused():
    assert_wrong(start_here.check_axpy(axpy_with(axpy_block_not_constexpr)), "constexpr")


def test_my_matmul_returning_fp32_is_wrong():
    def fp32_out(a, b):
        c = matmul_launcher()(a, b)
        return c.float()

    assert_wrong(tiling.check_my_matmul(fp32_out), "M=1, N=1, K=1: expected a new fp16 tensor, as the exercise asks, "
                 "got float32")


GROUP = 2  # not a constexpr


@triton.jit
def cg_reading_a_global(pid, num_pid_m, num_pid_n, GROUP_SIZE_N: tl.constexpr):
    num_pid_in_group = GROUP_SIZE_N * num_pid_m
    first_pid_n = (pid // num_pid_in_group) * GROUP_SIZE_N
    group_size_n = min(num_pid_n - first_pid_n, GROUP_SIZE_N) + GROUP * 0
    pid_in_group = pid % num_pid_in_group
    return pid_in_group // group_size_n, first_pid_n + pid_in_group % group_size_n


def test_column_grouped_triton_reading_a_plain_global_does_not_compile():
    assert_wrong(ordering.check_column_grouped_triton(cg_reading_a_global), "Cannot access global variable GROUP",
                 "of cg_reading_a_global: group_size_n = min(")


@triton.jit
def wgrad_tile_clamping_only_the_end(tile, offs_ptr, T, num_pid_m, num_pid_n, GROUP_SIZE_M: tl.constexpr):
    tiles_per_expert = num_pid_m * num_pid_n
    expert = tile // tiles_per_expert
    pid_m, pid_n = tile_coords(tile % tiles_per_expert, num_pid_m, num_pid_n, True, GROUP_SIZE_M)
    first_row = tl.load(offs_ptr + expert - 1, mask=expert > 0, other=0)
    row_end = tl.minimum(tl.maximum(tl.load(offs_ptr + expert), first_row), T)
    return expert, pid_m, pid_n, first_row, row_end - first_row


@triton.jit
def wgrad_tile_reading_before_offs(tile, offs_ptr, T, num_pid_m, num_pid_n, GROUP_SIZE_M: tl.constexpr):
    tiles_per_expert = num_pid_m * num_pid_n
    expert = tile // tiles_per_expert
    pid_m, pid_n = tile_coords(tile % tiles_per_expert, num_pid_m, num_pid_n, True, GROUP_SIZE_M)
    first_row = tl.load(offs_ptr + expert - 1)  # expert 0 reads offs[-1]
    row_end = tl.load(offs_ptr + expert)
    return expert, pid_m, pid_n, first_row, row_end - first_row


def test_wgrad_tile_clamping_only_the_end_is_wrong_on_a_negative_offset():
    assert_wrong(training_ex.check_wgrad_tile(wgrad_tile_clamping_only_the_end),
                 "corrupt offs [-5, 6, 6] with T=8: tile 1: first_row -5 (expected 0)")


def test_wgrad_tile_reading_offs_minus_one_is_stopped():
    assert_wrong(training_ex.check_wgrad_tile(wgrad_tile_reading_before_offs), "left its tensor",
                 "load through offs_ptr")


@triton.jit
def persistent_stepping_by_one(a_ptr, b_ptr, c_ptr, trace_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                               stride_cm, stride_cn, NUM_PROGRAMS: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n):  # every program walks to the end
        pid_m, pid_n = tile_grouped(tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        persistent_ex.matmul_tile(a_ptr, b_ptr, c_ptr, trace_ptr, tile, pid_m, pid_n, M, N, K, stride_am, stride_ak,
                                  stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K)


def test_persistent_loop_stepping_by_one_names_the_programs():
    assert_wrong(persistent_ex.check_persistent_loop(persistent_stepping_by_one),
                 "was computed by program 3, expected program 1 (tile index 5 = program + step * NUM_PROGRAMS)")


@triton.jit
def streamk_calling_python(a_ptr, b_ptr, c_ptr, partial_ptr, flag_ptr, trace_ptr, M, N, K, sk_tiles,
                           NUM_PROGRAMS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    dp_tiles = num_tiles - sk_tiles
    for tile in range(pid, dp_tiles, NUM_PROGRAMS):
        streamk_ex.run_segment(a_ptr, b_ptr, c_ptr, partial_ptr, flag_ptr, trace_ptr, M, N, K, sk_tiles,
                               tile, 0, k_tiles, NUM_PROGRAMS, BLOCK_M, BLOCK_N, BLOCK_K)
    it, end = streamk_range(pid, sk_tiles * k_tiles, NUM_PROGRAMS)
    while it < end:
        t = it // k_tiles
        k_first = it - t * k_tiles
        k_end = smaller(k_tiles, k_first + (end - it))
        streamk_ex.run_segment(a_ptr, b_ptr, c_ptr, partial_ptr, flag_ptr, trace_ptr, M, N, K, sk_tiles,
                               dp_tiles + t, k_first, k_end, NUM_PROGRAMS, BLOCK_M, BLOCK_N, BLOCK_K)
        it += k_end - k_first


def smaller(a, b):
    return a if a < b else b


def test_streamk_loop_calling_a_plain_python_function_does_not_compile():
    assert_wrong(streamk_ex.check_streamk_loop(streamk_calling_python), "does not compile for a GPU",
                 "of streamk_calling_python: k_end = smaller(", "`smaller` is a plain Python function")


@triton.jit
def moe_rows_from_their_end(x_ptr, w_ptr, out_ptr, offs_ptr, N, K, stride_xt, stride_xk, stride_we, stride_wk,
                            stride_wn, stride_ot, stride_on, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr):
    expert = tl.program_id(0)
    row_start = tl.load(offs_ptr + expert)  # the expert's end, not its start
    row_end = tl.load(offs_ptr + expert + 1, mask=expert + 1 < tl.num_programs(0), other=0)
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
    tl.store(out_ptr + rows[:, None] * stride_ot + cols[None, :] * stride_on, acc.to(out_ptr.dtype.element_ty),
             mask=(rows[:, None] < row_end) & (cols[None, :] < N))


def test_expert_rows_shifted_by_one_expert_names_the_experts():
    assert_wrong(moe_ex.check_expert_rows_kernel(moe_rows_from_their_end), "counts [20, 0, 7, 33, 0], N=24, K=16: "
                 "expert 0 (rows 0..19): rows 0..19 never written")


def test_gelu_tanh_with_a_safe_tanh_through_exp_is_correct():
    assert_correct(fusion.check_gelu_tanh(gelu_with_a_safe_exp), "compiles for a GPU")


@triton.jit
def gelu_with_a_safe_exp(x):
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    e = tl.exp(-2.0 * tl.abs(u))  # never overflows: tanh(|u|) = (1 - e) / (1 + e)
    t = (1.0 - e) / (1.0 + e)
    return 0.5 * x * (1.0 + tl.where(u >= 0, t, -t))


def test_expert_store_with_a_transposed_mask_is_named():
    assert_wrong(moe_ex.check_expert_rows_kernel(Bound(moe_variant, MISTAKE="transposed mask")), "store through out_ptr",
                 "the mask of this store is transposed")


def test_expert_kernel_variant_is_correct():
    assert_correct(moe_ex.check_expert_rows_kernel(Bound(moe_variant, MISTAKE="none")), "compiles for a GPU")


@triton.jit
def masks_with_swapped_limits(rows, cols, ks, M, N, K):
    a_mask = (rows[:, None] < M) & (ks[None, :] < K)
    b_mask = (ks[:, None] < N) & (cols[None, :] < K)  # each index against the other's limit
    c_mask = (rows[:, None] < M) & (cols[None, :] < N)
    return a_mask, b_mask, c_mask


def test_bounds_masks_comparing_against_the_wrong_limits_names_the_lanes():
    assert_wrong(grouped_ex.check_bounds_masks(masks_with_swapped_limits),
                 "b_mask has", "lanes on outside B", "reads past the end of B")


# ----------------------------------------------------------------------------- the machinery
def test_a_second_check_of_the_same_answer_reuses_the_compile():
    answer = axpy_with(axpy_kernel)
    assert_correct(start_here.check_axpy(answer))  # compiled (or cached by an earlier test)
    before = dict(kc._COMPILED)
    start = time.perf_counter()
    assert_correct(start_here.check_axpy(answer), "compiles for a GPU")
    assert kc._COMPILED == before  # nothing new was compiled
    assert time.perf_counter() - start < 5


def test_the_compile_worker_is_one_process_kept_for_the_session():
    assert_correct(start_here.check_axpy(axpy_with(axpy_kernel)))
    pid = kc._SERVER.proc.pid
    assert_correct(pointers.check_transpose(transpose_launcher()))
    assert kc._SERVER.proc.pid == pid and kc._SERVER.proc.poll() is None


def test_an_idle_compile_worker_is_stopped(monkeypatch):
    monkeypatch.setattr(kc, "COMPILE_WORKER_IDLE_S", 0.4)
    server = kc._CompileServer()
    server.start()
    proc = server.proc
    try:
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is not None and server.proc is None
    finally:
        server.stop()


def test_fp16_dots_are_read_from_the_ttir_at_the_learners_line():
    module = kc.AnswerModule()
    module.add_jit(mm_variant)
    module.text()
    info = module.functions["mm_variant"]
    index = next(i for i, text in enumerate(info.lines) if "pid = tl.program_id(0)" in text)
    line = info.module_line + index  # that line, in the written module
    ttir = ('%5 = tt.dot %1, %2, %3, inputPrecision = tf32 : tensor<32x32xf16> * tensor<32x32xf16> -> '
            'tensor<32x32xf16> loc(#loc7)\n'
            f'#loc3 = loc("/tmp/gk_answer_0123.py":{line}:8)\n#loc7 = loc("acc"(#loc3))\n')
    assert kc.fp16_dots(ttir, module) == [f"line {info.def_line + index} of mm_variant: pid = tl.program_id(0) "
                                          "accumulates in fp16"]
    assert kc.fp16_dots(ttir.replace("-> tensor<32x32xf16>", "-> tensor<32x32xf32>"), module) == []


def test_a_machine_that_cannot_compile_is_not_the_learners_fault(monkeypatch):
    def broken(requests, timeout=0):
        return [{"error": {"frames": [{"type": "RuntimeError", "message": "ptxas: not found"}]}} for _ in requests]

    monkeypatch.setattr(kc._SERVER, "run", broken)
    monkeypatch.setattr(kc, "_COMPILED", {})
    monkeypatch.setattr(kc, "_CANARY", [])
    result = start_here.check_axpy(axpy_with(axpy_kernel))
    assert_correct(result, "Not compiled for a GPU (sm_90, Hopper) here: this machine cannot compile for sm_90")


def test_the_gpu_run_is_compared_like_the_interpreted_cases(monkeypatch):
    """The GPU path's plumbing, on the CPU: the check runs its GPU case with plain launches and
    reports what that run gets wrong (here an answer that goes wrong on its tenth call)."""
    monkeypatch.setattr(kc, "_gpu_run_possible", lambda launches: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    good = axpy_with(axpy_kernel)
    assert_correct(start_here.check_axpy(good), "It ran on this GPU too.")
    calls = []

    def late_mistake(alpha, x, y):
        calls.append(1)
        out = good(alpha, x, y)
        return out + 1 if len(calls) > 9 else out  # 8 cases and the check without its kernel, then the GPU's

    assert_wrong(start_here.check_axpy(late_mistake), "it passes in the interpreter, but not on this GPU",
                 "n=4099, alpha=2.5")


@triton.jit
def find_tile_solution(tile, tile_starts_ptr, sizes_ptr, num_problems, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    problem = 0
    for g in range(num_problems):
        if tl.load(tile_starts_ptr + g) <= tile:
            problem = g
    local = tile - tl.load(tile_starts_ptr + problem)
    num_pid_n = tl.cdiv(tl.load(sizes_ptr + 3 * problem + 1), BLOCK_N)
    return problem, local // num_pid_n, local % num_pid_n


def test_the_gpu_run_launches_plainly_even_inside_a_checks_own_harness(monkeypatch):
    """find_tile's harness opens its own checked recording; on the GPU run its launch stays plain."""
    monkeypatch.setattr(kc, "_gpu_run_possible", lambda launches: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    plain = []
    real = kc._plain_launch

    def counting(kernel, grid, *args, **kwargs):
        plain.append(kc.python_function(kernel).__name__)
        return real(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(kc, "_plain_launch", counting)
    assert_correct(grouped_ex.check_find_tile(find_tile_solution), "It ran on this GPU too.")
    assert plain == ["_grouped_lookup_kernel"]


# ----------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
def test_on_a_gpu_a_solution_also_runs_there():
    assert_correct(start_here.check_axpy(axpy_with(axpy_kernel)), "It ran on this GPU too.")
    assert_correct(tiling.check_my_matmul(matmul_launcher()), "It ran on this GPU too.")
    assert_correct(ordering.check_column_grouped_triton(cg_through_tile_grouped), "It ran on this GPU too.")


@pytest.mark.gpu
def test_on_a_gpu_the_fp16_accumulator_is_still_refused():
    assert_wrong(tiling.check_my_matmul(matmul_launcher("fp16 accumulator")), "does not compile for a GPU")


def test_a_package_drawing_that_computes_the_answer_is_refused():
    """A teacher's review: viz.drawings.block_pointers computes 01's offsets and masks, and no check
    named it; a plain answer may now call no package function but the harmless ones."""
    from gemm_kernels.viz.drawings import block_pointers

    def block_offsets(pid_m, pid_n, block_m, block_n, stride_m, stride_n):
        return block_pointers(pid_m * block_m, pid_n * block_n, block_m, block_n, stride_m, stride_n, 10**9,
                              10**9)[0]

    assert_wrong(pointers.check_block_offsets(block_offsets), "your answer calls viz.drawings.block_pointers")


def test_a_lookup_table_of_the_listed_cases_is_refused():
    """A teacher's review: a dict of the check's own public cases passed launch_stats. Once the listed
    cases pass, each check tries cases drawn afresh (unseen_cases), in the notebook and in the grader."""
    from gemm_kernels.lab.exercises import pointer_arithmetic as pa

    table = {case: start_here.launch_stats_ref(*case) for case in start_here.LAUNCH_CASES}
    assert_wrong(start_here.check_launch_stats(lambda n, b: table.get((n, b), (0, 0))), "expected")
    offsets = {case[1:]: pa.block_offsets_ref(*case[1:]) for case in pa.OFFSET_CASES}
    assert_wrong(pa.check_block_offsets(lambda *args: offsets.get(args)), "returned None")
    masks = {(pm, pn, bm, bn, M, N): pa.block_mask_ref(pm, pn, bm, bn, M, N) for M, N, pm, pn, bm, bn in pa.MASK_CASES}
    assert_wrong(pa.check_block_mask(lambda *args: masks.get(args)), "returned None")


def _lookup(table, key):
    """An answer that knows the listed cases only: table[key(args)], None for any other input."""
    return lambda *args: table.get(key(*args))


def _lookup_answers():
    """check name -> (check, a lookup table of its listed cases from its reference, what the verdict says)."""
    import numpy as np

    from gemm_kernels.bench.fp8_numerics import load
    from gemm_kernels.lab.exercises import fp8 as fp8_ex
    from gemm_kernels.lab.exercises import measuring as measuring_ex
    from gemm_kernels.lab.exercises import warp_specialization as ws_ex
    from gemm_kernels.models.l2model import l2_traffic
    from gemm_kernels.models.tiles import launch_order_grid

    def same(*args):
        return tuple(tuple(a) if isinstance(a, list) else a for a in args)

    def table(cases, ref):
        return {same(*case): ref(*case) for case in cases}

    def fetches():
        out = {}
        for m, n, order, group, in_flight, k in ordering.FETCH_CASES:
            schedule, tiles = ordering.first_wave(m, n, order, group, in_flight)
            traffic = l2_traffic(schedule, block_k=ordering._BLOCK, K=k * ordering._BLOCK)
            out[(tiles.tobytes(), k)] = traffic.upto(0)["misses"]
        return _lookup(out, lambda tiles, k: (np.asarray(tiles).tobytes(), k))

    def one_program():
        rng, out = np.random.default_rng(2), {}
        for M, N, K, bm, bn, bk, pid in tiling.ONE_PROGRAM_CASES:
            A, B = rng.standard_normal((M, K)), rng.standard_normal((K, N))
            out[(A.tobytes(), B.tobytes(), pid, bm, bn, bk)] = tiling.one_program_ref(A, B, pid, bm, bn, bk)
        return _lookup(out, lambda A, B, *rest: (A.tobytes(), B.tobytes(), *rest))

    def values(x):
        return str(x.dtype), tuple(x.shape), x.float().cpu().numpy().tobytes()

    def scales():
        out = {(*values(x), tuple(block)): fp8_ex.block_scales_ref(x, block) for _, x, block in fp8_ex._block_cases()}
        return _lookup(out, lambda x, block: (*values(x), tuple(block)))

    def errors_of(rows, kind, K):
        return tuple(sorted(r["rel_err"] for r in rows if r["provider"] == "scaled_mm" and r["kind"] == kind
                            and r["K"] == K))

    def promotion():
        out = {(errors_of(t, kind, K), kind, K, budget): fp8_ex.promotion_interval_ref(t, kind, K, budget)
               for _, t, kind, K, budget in fp8_ex.promotion_cases(load()["errors"])}
        return _lookup(out, lambda rows, kind, K, budget: (errors_of(rows, kind, K), kind, K, budget))

    def variant():
        x = torch.tensor(fusion.VARIANT_POINTS)
        out = {tuple(x.tolist()): fusion.apply_elementwise(fusion.leaky_relu_variant, x)}
        return _lookup(out, lambda x: tuple(x.tolist()))

    def tma():
        def layout(x):
            return tuple(x.shape), tuple(x.stride()), x.dtype, x.data_ptr() % 16
        out = {layout(make()): persistent_ex.tma_view_ref(make())[0] or False for _, make in persistent_ex.TMA_CASES}
        return _lookup(out, layout)

    def tiles_of(cases, ref):
        return _lookup(table(cases, ref), same)

    persistent_walks = [(pid, m, n, p, g) for m, n, p, g in persistent_ex.WALK_CASES for pid in range(min(p, m * n))]
    shares = [(pid, *case) for case in streamk_ex.SHARE_CASES for pid in range(case[2])]
    walks = [(list(shapes), bm, bn, p, pid) for shapes, bm, bn, p in grouped_ex.WALK_CASES for pid in range(p)]
    return {
        "column_grouped_tile": (ordering.check_column_grouped_tile, tiles_of(
            [(pid, m, n, g) for m, n, g in ordering.COLUMN_GROUP_CASES for pid in range(m * n)],
            lambda *a: tuple(int(v) for v in ordering.column_grouped_tile_ref(*a)))),
        "wave_block_fetches": (ordering.check_wave_block_fetches, fetches()),
        "program_tiles": (grouped_ex.check_program_tiles, tiles_of(walks, grouped_ex.program_tiles_ref)),
        "block_scales": (fp8_ex.check_block_scales, scales()),
        "promotion_interval": (fp8_ex.check_promotion_interval, promotion(), "got None"),
        "activation_pass_bytes": (fusion.check_activation_pass_bytes, tiles_of(fusion.BYTES_CASES,
                                                                               lambda M, N, b: 2 * M * N * b)),
        "variant_reference": (fusion.check_variant_reference, variant()),
        "do_bench_reading": (measuring_ex.check_do_bench_reading,
                             tiles_of(measuring_ex.READING_CASES, measuring_ex.do_bench_reading_ref)),
        "timing_verdict": (measuring_ex.check_timing_verdict,
                           tiles_of(measuring_ex.VERDICT_CASES, measuring_ex.timing_verdict_ref)),
        "offs_from_counts": (moe_ex.check_offs_from_counts, _lookup(
            {tuple(c): moe_ex.offs_ref(c) for c in moe_ex.COUNT_CASES}, lambda counts: tuple(counts.tolist()))),
        "tiles_per_expert": (moe_ex.check_tiles_per_expert, tiles_of(
            [(c, *s) for c in moe_ex.COUNT_CASES for s in moe_ex.TILE_SHAPES], moe_ex.tiles_per_expert_ref)),
        "padded_rows": (moe_ex.check_padded_rows, tiles_of(
            [(c, bm) for c in moe_ex.COUNT_CASES for bm in moe_ex.PADDING_BLOCKS], moe_ex.padded_rows_ref)),
        "wgrad_work": (training_ex.check_wgrad_work, tiles_of(training_ex.WORK_CASES, training_ex.wgrad_work_ref)),
        "one_program": (tiling.check_one_program, one_program()),
        "row_major_launch_order": (tiling.check_row_major_launch_order, tiles_of(
            tiling.LAUNCH_ORDER_CASES, lambda m, n: launch_order_grid(m, n, 1, 1, order="row_major"))),
        "waves_and_tail": (persistent_ex.check_waves_and_tail, tiles_of(persistent_ex.WAVE_CASES,
                                                                        persistent_ex.waves_ref)),
        "persistent_tiles": (persistent_ex.check_persistent_tiles, tiles_of(persistent_walks,
                                                                            persistent_ex.persistent_tiles_ref)),
        "tma_view": (persistent_ex.check_tma_view, tma()),
        "streamk_share": (streamk_ex.check_streamk_share, tiles_of(shares, streamk_ex.share_ref)),
        "ring_phases": (ws_ex.check_ring_phases, tiles_of(  # and the praise's table of the ring of 4 slots
            [*ws_ex.PHASE_CASES, *((q, 4) for q in range(10))], ws_ex.ring_phases_ref)),
    }


@pytest.mark.parametrize("name", ["column_grouped_tile", "wave_block_fetches", "program_tiles", "block_scales",
                                  "promotion_interval", "activation_pass_bytes", "variant_reference",
                                  "do_bench_reading", "timing_verdict", "offs_from_counts", "tiles_per_expert",
                                  "padded_rows", "wgrad_work", "one_program", "row_major_launch_order",
                                  "waves_and_tail", "persistent_tiles", "tma_view", "streamk_share", "ring_phases"])
def test_every_plain_check_refuses_a_lookup_table_of_its_listed_cases(name, monkeypatch):
    """The same review, for every other plain check: an answer that knows only the listed cases (from
    the check's reference) passes them, then meets the cases drawn afresh and returns None."""
    import sys

    check, answer, *said = _lookup_answers()[name]
    assert_wrong(check(answer), *(said or ["returned None"]))
    with monkeypatch.context() as m:  # the table itself is right: with no case drawn, it passes
        m.setattr(sys.modules[check.__module__], "unseen_cases", lambda draw, count=3: [])
        assert_correct(check(answer))
