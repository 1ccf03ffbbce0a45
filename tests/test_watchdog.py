"""The watchdog (``gemm_kernels.lab.watchdog``): no learner code hangs a check or the notebook.

Each hang a learner can write (a K loop that never advances, a persistent loop without its step,
``while True`` in a plain answer, a recursion, a loop of a kernel with no Triton operation in it,
a grid of very many programs) comes back as "wrong" quickly, naming the loop's line; afterwards
the process is as before (no trace function, no thread, no lock held, no patch left) and a
correct answer still passes.  And errors point at the learner's line, never at a checker's.

The learner's code below lives in this file, outside the package: to the checks it is the
learner's, as a notebook cell is."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import gemm_kernels as gk
from gemm_kernels import _triton_compat as compat
from gemm_kernels.kernels.tiles import tile_grouped
from gemm_kernels.lab import checked, watchdog
from gemm_kernels.lab.exercises import CORRECT, WRONG
from gemm_kernels.lab.exercises import grouped_l2_ordering as ordering
from gemm_kernels.lab.exercises import naive_tiling as tiling
from gemm_kernels.lab.exercises import persistent_tma as persistent_ex
from gemm_kernels.lab.exercises import pointer_arithmetic as pointers
from gemm_kernels.lab.exercises import start_here
from gemm_kernels.lab.exercises._core import AnswerRaised, Hints, call, exercise
from gemm_kernels.lab.watchdog import NeverEnded, Watchdog
from gemm_kernels.models.tiles import tile_coords_np

THIS_FILE = Path(__file__).resolve()
SOURCE = THIS_FILE.read_text().splitlines()


def line_of(marker: str) -> int:
    """The line of this file that holds ``marker`` (a comment on the learner's line)."""
    found = [i + 1 for i, text in enumerate(SOURCE) if marker in text and "line_of(" not in text
             and not text.lstrip().startswith(("assert", '"', 'f"'))]
    assert len(found) == 1, (marker, found)
    return found[0]


def assert_never_ended(result, *fragments):
    text = str(result)
    assert result.status == WRONG, text
    assert "never ended" in text or "never finished" in text, text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"


def assert_process_as_before():
    """After a check stopped the learner's code: no trace function, no watchdog thread, the
    interpreter lock free (for another thread), no checked-run patch left on the builder."""
    assert sys.gettrace() is None
    assert not [t for t in threading.enumerate() if t.name == "gemm_kernels check watchdog"]
    got = []

    def other():
        ok = compat.INTERPRETER_LOCK.acquire(timeout=5)
        got.append(ok)
        if ok:
            compat.INTERPRETER_LOCK.release()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert got == [True]
    builder = compat.interpreter_internals()[0]
    assert "create_masked_load" not in vars(builder) and "set_grid_idx" not in vars(builder)
    assert watchdog.current() is None


@pytest.fixture
def timed():
    start = time.monotonic()
    yield
    assert time.monotonic() - start < 30, "the check took too long to stop the learner's code"


# ----------------------------------------------------------------------------- the learner's code
@triton.jit
def matmul_k_never_advances(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                            stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    rows = (pid // num_pid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % num_pid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k = 0
    while k < K:  # the K loop that never advances
        a = tl.load(a_ptr + rows[:, None] * stride_am + (k + ks)[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & ((k + ks)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + ks)[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=((k + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(tl.float16),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def my_matmul_never_advancing(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float16, device=a.device)
    matmul_k_never_advances[(triton.cdiv(M, 32) * triton.cdiv(N, 32),)](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c


@triton.jit
def persistent_without_step(a_ptr, b_ptr, c_ptr, trace_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                            stride_cm, stride_cn, NUM_PROGRAMS: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tile = tl.program_id(0)
    while tile < num_pid_m * num_pid_n:  # the persistent loop without its step
        pid_m, pid_n = tile_grouped(tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        persistent_ex.matmul_tile(a_ptr, b_ptr, c_ptr, trace_ptr, tile, pid_m, pid_n, M, N, K, stride_am,
                                  stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K)


def spin_forever():
    while True:  # the plain loop that never ends
        pass


def launch_stats_spinning(n, block):
    spin_forever()
    return 1, 0


def launch_stats_swallowing(n, block):
    try:
        while n > 0:  # a loop inside try/except Exception
            n += 1
    except Exception:  # noqa: BLE001  (the learner's: it must not swallow the watchdog)
        return 0, 0
    return 1, 0


def launch_stats_recursive(n, block):
    return launch_stats_recursive(n, block)  # the recursion without an end


@triton.jit
def column_grouped_recursive(pid, num_pid_m, num_pid_n, GROUP_SIZE_N: tl.constexpr):
    return column_grouped_recursive(pid, num_pid_m, num_pid_n, GROUP_SIZE_N)  # a jit recursion


@triton.jit
def column_grouped_spinning(pid, num_pid_m, num_pid_n, GROUP_SIZE_N: tl.constexpr):
    while True:  # a kernel loop with no Triton operation in it
        pass
    return pid, pid


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def outer_loop_that_ends(x_ptr, n, BLOCK: tl.constexpr):
    for i in range(3):  # an outer loop that ends
        inner_loop_forever(x_ptr, n, BLOCK)


@triton.jit
def inner_loop_forever(x_ptr, n, BLOCK: tl.constexpr):
    j = 0
    while j < n:  # the inner loop that never ends
        tl.store(x_ptr + tl.arange(0, BLOCK), tl.zeros((BLOCK,), dtype=tl.float32))


@triton.jit
def outer_loop_forever(x_ptr, n, BLOCK: tl.constexpr):
    i = 0
    while i < n:  # the outer loop that never ends
        inner_loop_that_ends(x_ptr, n, BLOCK)


@triton.jit
def inner_loop_that_ends(x_ptr, n, BLOCK: tl.constexpr):
    for j in range(2):  # the inner loop that ends
        tl.store(x_ptr + tl.arange(0, BLOCK), tl.zeros((BLOCK,), dtype=tl.float32))


def python_outer_that_ends():
    for i in range(3):  # a Python outer loop that ends
        python_inner_forever()


def python_inner_forever():
    n = 1
    while n:  # a Python inner loop that never ends
        n += 1


def python_outer_forever():
    n = 1
    while n:  # a Python outer loop that never ends
        python_inner_that_ends()


def python_inner_that_ends():
    return sum(range(3))


# ----------------------------------------------------------------------------- hangs: the cases
def test_a_k_loop_that_never_advances_is_stopped_at_its_line(timed):
    result = tiling.check_my_matmul(my_matmul_never_advancing)
    line = line_of("# the K loop that never advances")
    assert_never_ended(result, "your loop never ended: `while k < K:  # the K loop that never advances` "
                               f"(line {line} of matmul_k_never_advances, program_id (0)) was still going",
                       "the limit for one program of a kernel")
    assert_process_as_before()


def test_a_persistent_loop_without_its_step_is_stopped_at_its_line(timed):
    result = persistent_ex.check_persistent_loop(persistent_without_step)
    line = line_of("# the persistent loop without its step")
    assert_never_ended(result, "your loop never ended: `while tile < num_pid_m * num_pid_n:",
                       f"(line {line} of persistent_without_step, program_id (0))")
    assert_process_as_before()


def test_while_true_in_a_plain_answers_helper_is_stopped_at_its_line(timed):
    result = start_here.check_launch_stats(launch_stats_spinning)
    assert_never_ended(result, "your loop never ended: `while True:  # the plain loop that never ends` "
                               f"(line {line_of('# the plain loop that never ends')} of spin_forever)",
                       "the limit for one call of your code")
    assert_process_as_before()


def test_the_learners_except_exception_does_not_swallow_the_stop(timed):
    result = start_here.check_launch_stats(launch_stats_swallowing)
    assert_never_ended(result, f"(line {line_of('# a loop inside try/except Exception')} of launch_stats_swallowing)")
    assert_process_as_before()


def test_a_recursion_is_stopped_and_named(timed):
    result = start_here.check_launch_stats(launch_stats_recursive)
    assert_never_ended(result, "launch_stats_recursive called itself more than 100 times deep",
                       f"at line {line_of('# the recursion without an end')} of launch_stats_recursive")
    assert_process_as_before()


def test_a_jit_recursion_is_stopped_before_the_interpreters_messages_explode(timed):
    # Python's RecursionError would come out of the interpreter wrapped once per level, each wrap
    # quoting the last with its quotes escaped: a message that doubles per level (gigabytes)
    result = ordering.check_column_grouped_triton(column_grouped_recursive)
    assert_never_ended(result, "column_grouped_recursive called itself more than 100 times deep",
                       f"at line {line_of('# a jit recursion')} of column_grouped_recursive")
    assert len(str(result)) < 5000
    assert_process_as_before()


def test_a_kernel_loop_without_operations_is_stopped_by_the_clock(monkeypatch, timed):
    # no interpreter operation in the loop: the last resort (a thread watching the clock) stops it
    monkeypatch.setattr(watchdog, "TIME_BUDGET", 1.0)
    result = ordering.check_column_grouped_triton(column_grouped_spinning)
    assert_never_ended(result, "your loop never ended: `while True:  # a kernel loop with no Triton operation",
                       f"(line {line_of('# a kernel loop with no Triton operation')} of column_grouped_spinning)",
                       "the limit of 1 s for one call of your code")
    assert_process_as_before()


def test_the_process_is_usable_after_a_stop(monkeypatch):
    monkeypatch.setattr(watchdog, "KERNEL_OPS", 3000)
    assert tiling.check_my_matmul(my_matmul_never_advancing).status == WRONG
    assert_process_as_before()
    # a correct answer, right after: checked, compiled and correct
    result = start_here.check_launch_stats(lambda n, block: (triton.cdiv(n, block), triton.cdiv(n, block) * block - n))
    assert result.status == CORRECT, str(result)
    x, y, out = torch.randn(300), torch.randn(300), torch.zeros(300)
    gk.run_checked(add_kernel, (3,), x, y, out, 300, BLOCK=128)
    assert torch.equal(out, x + y)


# ----------------------------------------------------------------------------- the budgets, one by one
def test_one_program_past_its_budget_names_its_loop_not_the_outer_one():
    x = torch.zeros(16)
    with Watchdog(kernel_ops=3000), pytest.raises(NeverEnded) as info:
        gk.run_checked(outer_loop_that_ends, (2,), x, 10, BLOCK=16)
    text = info.value.message
    assert f"`while j < n:  # the inner loop that never ends` (line {line_of('# the inner loop that never ends')} " \
           "of inner_loop_forever, program_id (0))" in text, text
    assert "the limit for one program of a kernel" in text
    assert_process_as_before()


def test_an_outer_loop_that_never_ends_is_named_over_the_inner_one_that_does():
    x = torch.zeros(16)
    with Watchdog(kernel_ops=3000), pytest.raises(NeverEnded) as info:
        gk.run_checked(outer_loop_forever, (1,), x, 10, BLOCK=16)
    text = info.value.message
    assert f"`while i < n:  # the outer loop that never ends` (line {line_of('# the outer loop that never ends')} " \
           "of outer_loop_forever, program_id (0))" in text, text


def test_a_grid_of_very_many_programs_is_stopped_as_such():
    x, y, out = torch.randn(64), torch.randn(64), torch.zeros(64)
    with Watchdog(launch_ops=2000), pytest.raises(NeverEnded) as info:
        gk.run_checked(add_kernel, (100_000,), x, y, out, 64, BLOCK=1)
    text = str(info.value.message) + "\n".join(info.value.details)
    assert "your kernel add_kernel never finished: its launch of 100,000 programs" in text, text
    assert "the limit for one launch" in text and "grid and the block sizes" in text


def test_python_loops_inner_and_outer_are_told_apart():
    with Watchdog(steps=50_000), pytest.raises(NeverEnded) as info:
        python_outer_that_ends()
    assert f"(line {line_of('# a Python inner loop that never ends')} of python_inner_forever)" in info.value.message
    with Watchdog(steps=50_000), pytest.raises(NeverEnded) as info:
        python_outer_forever()
    assert f"(line {line_of('# a Python outer loop that never ends')} of python_outer_forever)" in info.value.message
    assert sys.gettrace() is None


def test_a_checks_budget_can_be_set_per_exercise():
    @exercise("tight_budget", hints=Hints("n", "a", "s"), budget={"call_steps": 5_000})
    def check_tight(answer):
        return [] if call(answer) == 1 else ["wrong"]

    def slow_but_finite():
        total = 0
        for i in range(20_000):
            total += i
        return 1

    assert "the limit for one call of your code" in str(check_tight(slow_but_finite))
    assert check_tight(lambda: 1).status == CORRECT


def test_a_debuggers_trace_function_is_left_alone_and_kernels_are_still_metered(monkeypatch):
    events = []

    def debugger(frame, event, arg):  # a stand-in for pdb / a debugger's trace function
        events.append(event)
        return None

    monkeypatch.setattr(watchdog, "KERNEL_OPS", 3000)
    sys.settrace(debugger)
    try:
        result = tiling.check_my_matmul(my_matmul_never_advancing)
        still = sys.gettrace()
    finally:
        sys.settrace(None)
    assert still is debugger and events
    assert_never_ended(result, "while k < K:")


def test_the_solutions_budgets_leave_room():
    """The defaults are many times what the notebooks' solutions use (measured: tests/test_exercises.py
    runs every solution under them)."""
    assert watchdog.KERNEL_OPS >= 20 * 2_400 and watchdog.LAUNCH_OPS >= 30 * 15_000
    assert watchdog.CALL_STEPS >= 1000 * 1_000 and watchdog.CHECK_STEPS >= 100 * 64_000
    assert watchdog.TIME_BUDGET >= 30


# ----------------------------------------------------------------------------- whose line
def test_learner_files_and_library_files():
    assert watchdog.learner_file(str(THIS_FILE))
    assert watchdog.learner_file("<ipython-input-3-0123456789ab>")
    assert watchdog.learner_file("<02_naive_tiling.ipynb cell 28>")
    assert watchdog.learner_file("/tmp/ipykernel_1234/2893746.py")
    for library in (checked.__file__, tiling.__file__, triton.__file__, np.__file__, torch.__file__, os.__file__,
                    "<frozen importlib._bootstrap>", "<string>"):
        assert not watchdog.learner_file(library), library


def persistent_tiles_one_past(pid, num_pid_m, num_pid_n, NUM_PROGRAMS, GROUP_SIZE_M):
    walk = []
    for t in range(pid, num_pid_m * num_pid_n + NUM_PROGRAMS, NUM_PROGRAMS):
        pid_m, pid_n = tile_coords_np(t, num_pid_m, num_pid_n, "grouped", GROUP_SIZE_M)  # one tile too many
        walk.append((int(pid_m), int(pid_n)))
    return walk


def test_a_library_error_names_the_learners_line_and_argument_not_raise_valueerror():
    # notebook 05, exercise 2: the package's tile_coords_np refuses a tile index past the grid
    text = str(persistent_ex.check_persistent_tiles(persistent_tiles_one_past))
    assert f"line {line_of('# one tile too many')} of persistent_tiles_one_past: pid_m, pid_n = tile_coords_np(" in text
    assert "raised inside the package's tile_coords_np, which this line calls: its pid is your t = 36" in text, text
    assert "raise ValueError" not in text and "tiles.py" not in text


def wrong_numpy_call(pid_m, pid_n, bm, bn, sm, sn):
    return np.reshape(np.arange(6), (bm + 1, bn))  # the learner's numpy call


def test_an_error_inside_numpy_points_at_the_learners_call():
    text = str(pointers.check_block_offsets(wrong_numpy_call))
    assert f"line {line_of('# the learner' + chr(39) + 's numpy call')} of wrong_numpy_call" in text, text
    assert "raised inside reshape, which this line calls" in text
    assert "fromnumeric" not in text and "return bound(" not in text


@triton.jit
def column_grouped_one_value(pid, num_pid_m, num_pid_n, GROUP_SIZE_N: tl.constexpr):
    return pid // num_pid_n  # one value, not a pair


def test_an_error_in_the_checks_kernel_names_the_learners_function_not_the_checks_line():
    # notebook 03, exercise 3: the check's kernel unpacks what the learner's function returned
    with checked.checked_launches(), pytest.raises(AnswerRaised) as info:
        call(ordering.run_tile_fn, column_grouped_one_value, 9, 9, 3, what="a kernel calling it")
    text = str(info.value)
    assert ("in the check's code right after your column_grouped_one_value returned: `pid_m, pid_n = "
            "column_grouped_one_value(pid, num_pid_m, num_pid_n, GROUP_SIZE)`") in text, text
    assert "TILE_FN" not in text
    result = str(ordering.check_column_grouped_triton(column_grouped_one_value))
    assert "TILE_FN" not in result and "grouped_l2_ordering" not in result, result


@triton.jit
def column_grouped_past_the_grid(pid, num_pid_m, num_pid_n, GROUP_SIZE_N: tl.constexpr):
    return pid // num_pid_n, pid % num_pid_n + 1


def test_an_out_of_bounds_store_of_the_checks_kernel_shows_no_line_of_the_check():
    result = ordering.check_column_grouped_triton(column_grouped_past_the_grid)
    text = str(result)
    assert "in the check's kernel (it calls your column_grouped_past_the_grid)" in text, text
    assert "store through owner_ptr at line" not in text
    assert "the values your column_grouped_past_the_grid returned" in text


@triton.jit
def persistent_one_tile_too_many(a_ptr, b_ptr, c_ptr, trace_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                                 stride_cm, stride_cn, NUM_PROGRAMS: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n + NUM_PROGRAMS, NUM_PROGRAMS):
        pid_m, pid_n = tile_grouped(tile, num_pid_m, num_pid_n, GROUP_SIZE_M)
        persistent_ex.matmul_tile(a_ptr, b_ptr, c_ptr, trace_ptr, tile, pid_m, pid_n, M, N, K,  # the call
                                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                                  BLOCK_M, BLOCK_N, BLOCK_K)


def test_an_out_of_bounds_access_in_a_package_helper_points_at_the_learners_call():
    text = str(persistent_ex.check_persistent_loop(persistent_one_tile_too_many))
    line = line_of("M, N, K,  # the call")
    assert f"store through trace_ptr at line {line}: persistent_ex.matmul_tile(" in text, text
    assert f"in matmul_tile, the package's helper called from line {line} of persistent_one_tile_too_many" in text
    assert "record_tile(" not in text


def test_a_loop_in_a_notebook_cell_is_quoted_from_the_cell():
    """Code run as a notebook cell (its source registered with linecache under the cell's name, as
    IPython does): the report quotes the cell's own line."""
    import linecache

    source = "def launch_stats(n, block):\n    programs = 0\n    while programs * block < n:\n        n += block\n" \
             "    return programs, 0\n"
    name = "<ipython-input-7-watchdog>"
    linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
    namespace: dict = {}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102  (the test's own source)
    result = start_here.check_launch_stats(namespace["launch_stats"])
    assert_never_ended(result, "your loop never ended: `while programs * block < n:` (line 3 of launch_stats)")


_TRACE_SEEN: list = []


def _note_the_trace_function():
    _TRACE_SEEN.append(sys.gettrace())


@triton.jit
def kernel_noting_the_trace_function(x_ptr):
    _note_the_trace_function()  # runs in the interpreter only: the probe of this test
    tl.store(x_ptr, 1.0)


def test_no_line_tracing_inside_a_kernel_even_under_nested_watchdogs():
    """Tracing would double an interpreted kernel's time: a checked run turns the watchdog's off
    (the outer one's, when an inner watchdog does not trace), and back on after."""
    _TRACE_SEEN.clear()
    x = torch.zeros(1)
    with Watchdog() as outer, Watchdog() as inner:
        assert outer.tracing and not inner.tracing
        gk.run_checked(kernel_noting_the_trace_function, (1,), x)
        after = sys.gettrace()
    assert _TRACE_SEEN == [None] and after == outer._call and x.item() == 1.0
    assert sys.gettrace() is None
