"""Notebook 08's exercise checks (lab/exercises/warp_specialization.py): a right answer passes, a
stub is "not attempted", each kind of mistake gets its step and hint, and nothing raises.  The
Gluon main loops below are compiled for sm_90 by the compile view on any machine, and their ring
played against the producer (tests/test_ws_protocol.py has the mistakes one by one); on a Hopper
GPU the check also runs them (``gpu`` tests)."""

import pytest
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from gemm_kernels import runtime
from gemm_kernels.kernels.matmul_ws import _acc_layout as acc_layout
from gemm_kernels.lab.exercises import CORRECT, NOT_ATTEMPTED, WRONG
from gemm_kernels.lab.exercises import warp_specialization as ex

HOPPER = runtime.on_gpu() and runtime.RUNTIME.capability is not None and runtime.RUNTIME.capability[0] == 9


def phases(q, stages):
    lap = q // stages
    return q % stages, lap & 1, (lap & 1) ^ 1


@pytest.mark.parametrize("answer, status, words", [
    (phases, CORRECT, ""),
    (lambda q, s: (q % s, (q // s) % 2, (q // s) % 2), WRONG, "step 3 of 3 (empty)"),
    (lambda q, s: (q % s, q & 1, (q & 1) ^ 1), WRONG, "step 2 of 3 (ready)"),
    (lambda q, s: (q // s, 0, 1), WRONG, "step 1 of 3 (slot)"),
    (lambda q, s: q, WRONG, "expected (slot, ready_phase, empty_phase)"),
    (lambda q, s: 1 / 0, WRONG, "ZeroDivisionError"),
    (None, NOT_ATTEMPTED, ""),
])
def test_ring_phases(answer, status, words):
    result = ex.check_ring_phases(answer)
    assert result.status == status and words in str(result), str(result)
    if status == WRONG and "step" in words:
        step = words.split("(")[1].rstrip(")")
        assert ex.STEP_NUDGES[step] in str(result)  # a nudge for the wrong step, never the formula
        assert "lap & 1" not in str(result) and "% stages" not in str(result)
        assert "lap & 1" in str(ex.check_ring_phases.hint(level=3))  # the solution only on request


@gluon.jit
def right_mainloop(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                   WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def never_waits(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        s = (q0 + kk) % STAGES
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty_bars.index(s))
    return acc


@gluon.jit
def never_gives_back(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                     WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
    return acc


@gluon.jit
def stub_mainloop(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                  WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    raise NotImplementedError("your turn")


@gluon.jit
def does_not_compile(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                     WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    return undefined_name  # noqa: F821


@pytest.fixture(scope="module")
def compiled():
    """The loops below that compile, built in one compile-view worker (the checks find them in its cache)."""
    from gemm_kernels.lab.compile_view import compile_many

    compile_many([ex._compile_request(*ex._answer_module(f)) for f in (right_mainloop, never_waits, never_gives_back)])


@pytest.mark.skipif(HOPPER, reason="on a Hopper GPU the check also runs the kernel (test_gpu_* below)")
@pytest.mark.parametrize("answer, status, words", [
    (right_mainloop, CORRECT, "compiles for sm_90"),
    (never_waits, WRONG, "step 3 of 4 (the ring, played against matmul_ws' producer): consumer 0, tile 0, "
                         "K block 0 (ring position 0, slot 0)"),
    (never_gives_back, WRONG, "the producer waits forever for empty[0] before refilling slot 0 with ring position 4"),
    (does_not_compile, WRONG, "step 1 of 4 (compile for sm_90): NameError: undefined_name is not defined, at line "
                              f"{does_not_compile.fn.__code__.co_firstlineno + 3} of your does_not_compile: "
                              "return undefined_name"),
    (stub_mainloop, NOT_ATTEMPTED, ""),
])
def test_consumer_mainloop_structure(answer, status, words, compiled):
    result = ex.check_consumer_mainloop(answer)
    assert result.status == status and words in str(result), str(result)
    if answer is never_gives_back:
        assert "your loop never arrives on empty_bars" in str(result)
    if answer is never_waits:
        assert "There is no mbarrier.wait before this wgmma" in str(result)


def test_the_note_says_what_runs_here():
    assert ("runs your kernel" in ex.gpu_note()) == HOPPER


@gluon.jit
def waits_for_the_wrong_lap(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr,
                            A_PARTS: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), ((q // STAGES) & 1) ^ 1)  # passes before the data is there
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="runs the exercise kernel: an sm_90 GPU")
def test_gpu_right_answer_computes_and_a_wrong_phase_is_caught(monkeypatch):
    assert ex.check_consumer_mainloop(right_mainloop).status == CORRECT
    monkeypatch.setattr(ex, "GPU_TIME_LIMIT_S", 60)
    result = ex.check_consumer_mainloop(waits_for_the_wrong_lap)  # the ring played on the CPU catches it first
    assert result.status == WRONG and "stale data" in str(result), str(result)
    problems = ex._run_on_gpu(*ex._answer_module(waits_for_the_wrong_lap))  # and the GPU run, on its own
    assert problems and ("relative error" in problems[0] or "did not finish" in problems[0]), problems
