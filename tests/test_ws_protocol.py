"""Notebook 08's consumer-mainloop check plays the learner's ring (tests of
lab/exercises/warp_specialization.py and models/ws_timeline.simulate_ring).

Every wrong main loop below would hang or compute garbage on a GPU, or breaks the exercise's
rule: the check must never call it correct, and must say what is wrong at the learner's line.
The issue's four and the notebook's solution go through the whole check, compiled for sm_90 in
one compile-view worker (``compiled``: the checks find them in its cache); the other mistakes
skip the compile (``no_compile``; each compiled when it was written) so that the suite stays fast."""

import pytest
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait

from gemm_kernels import runtime
from gemm_kernels.kernels.matmul_ws import _acc_layout as acc_layout
from gemm_kernels.lab.exercises import CORRECT, WRONG
from gemm_kernels.lab.exercises import warp_specialization as ex
from gemm_kernels.lab.exercises._core import STRUCTURE_ONLY
from gemm_kernels.models import ws_timeline as wt

HOPPER = runtime.supports_wgmma()


# ----------------------------------------------------------------------------- right loops
@gluon.jit
def solution(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
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
def right_with_if(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                  WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    phase = (q0 // STAGES) & 1
    s = q0 % STAGES
    for kk in range(k_tiles):
        mbarrier.wait(ready_bars.index(s), phase)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        if kk > 0:
            mbarrier.arrive(empty_bars.index((s + STAGES - 1) % STAGES))
        s += 1
        if s == STAGES:
            s = 0
            phase ^= 1
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((s + STAGES - 1) % STAGES))
    return acc


@gluon.jit
def right_two_in_flight(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr,
                        A_PARTS: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(2, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 2) % STAGES), pred=kk > 1)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles + STAGES - 2) % STAGES), pred=k_tiles > 1)
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


# ----------------------------------------------------------------------------- the issue's four
@gluon.jit
def wrong_wait_parity(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                      WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), ((q // STAGES) & 1) ^ 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def no_arrive_in_loop(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                      WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def synchronous_mma(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                    WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=False)
        mbarrier.arrive(empty_bars.index(s))
    return acc


@gluon.jit
def wrong_a_slice(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                  WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


# ----------------------------------------------------------------------------- more wrong protocols
@gluon.jit
def parity_off_by_one(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                      WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), ((q + 1) // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def phase_not_parity(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                     WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), q // STAGES)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def arrives_on_ready(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                     WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(ready_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(ready_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def waits_on_next_slot(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                       WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index((q + 1) % STAGES), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def waits_on_empty(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                   WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(empty_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def double_arrive(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                  WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def arrive_count_two(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                     WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), count=2, pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES), count=2)
    return acc


@gluon.jit
def arrives_before_the_wgmma_is_done(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr,
                                     A_PARTS: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr,
                                     STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        mbarrier.arrive(empty_bars.index(s))
        acc = warpgroup_mma_wait(1, deps=(acc,))
    acc = warpgroup_mma_wait(0, deps=(acc,))
    return acc


@gluon.jit
def gives_back_the_slot_in_use(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr,
                               A_PARTS: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr,
                               STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index(s))
    acc = warpgroup_mma_wait(0, deps=(acc,))
    return acc


@gluon.jit
def no_final_arrive(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
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
    return acc


@gluon.jit
def no_final_wait(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                  WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def gives_back_the_last_slot_too_soon(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr,
                                      A_PARTS: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr,
                                      STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    acc = warpgroup_mma_wait(0, deps=(acc,))
    return acc


@gluon.jit
def arrive_without_pred(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr,
                        A_PARTS: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES))
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def negative_modulo(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                    WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q - 1) % STAGES))
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def ignores_q0(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
               WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        s = kk % STAGES
        mbarrier.wait(ready_bars.index(s), (kk // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((kk + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def same_a_for_both(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                    WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def wrong_b_slice(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                  WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s * A_PARTS + PART), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def keeps_only_the_last_block(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr,
                              A_PARTS: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, use_acc=False, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def fp16_accumulator(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                     WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float16, acc_layout(WG_M, BLOCK_N))
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
def waits_for_every_wgmma(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr,
                          A_PARTS: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty_bars.index(s))
    return acc


@gluon.jit
def loop_never_advances(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr,
                        A_PARTS: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    kk = 0
    while kk < k_tiles:
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty_bars.index(s))
    return acc


@gluon.jit
def expects_bytes(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
                  WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.expect(ready_bars.index(s), 16384)
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def reads_the_program_id(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr,
                         A_PARTS: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, acc_layout(WG_M, BLOCK_N))
    first = q0 + gl.program_id(0) * 0  # something the trace does not model
    for kk in range(k_tiles):
        q = first + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s * A_PARTS + PART), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


# ----------------------------------------------------------------------------- helpers
def line_of(fn, snippet: str) -> int:
    """The file line of the first line of ``fn`` that holds ``snippet``."""
    import inspect

    lines, start = inspect.getsourcelines(fn.fn)
    return start + next(i for i, line in enumerate(lines) if snippet in line)


ISSUE_ANSWERS = {  # the four the issue found called "correct", each with what its message must say
    "wrong wait parity": (wrong_wait_parity, [
        "step 3 of 4 (the ring, played against matmul_ws' producer)", "waits on ready[0] with parity 1",
        "a fresh barrier counts as having completed parity 1", "would read stale data"]),
    "no arrive in the loop": (no_arrive_in_loop, [
        "the producer waits forever for empty[0] before refilling slot 0 with ring position 4",
        "never gave slot 0 back after reading ring position 0"]),
    "is_async=False, no wgmma wait": (synchronous_mma, [
        "step 4 of 4 (keep one wgmma in flight)", "warpgroup_mma(..., is_async=False)", "is_async=True"]),
    "wrong A slice": (wrong_a_slice, [
        "step 2 of 4 (what each wgmma reads and adds up)", "reads a_bufs.index(1), expected a_bufs.index(2)",
        "a_bufs.index(slot * A_PARTS + PART)"]),
}
ISSUE_LINES = {"wrong wait parity": "mbarrier.wait(", "no arrive in the loop": None,
               "is_async=False, no wgmma wait": "is_async=False", "wrong A slice": "acc = warpgroup_mma("}


def _notebook_solution(directory):
    """Notebook 08's own consumer_mainloop (its solution cell), imported from a module of its own."""
    import importlib
    import json
    import sys
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "08_warp_specialization.ipynb").read_text())
    cell = next(c for c in nb["cells"] if "def consumer_mainloop" in "".join(c["source"]))
    (directory / "nb08_solution.py").write_text("".join(cell["source"]) + "\n")
    sys.path.insert(0, str(directory))
    try:
        return importlib.import_module("nb08_solution").consumer_mainloop
    finally:
        sys.path.remove(str(directory))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The loops the checks below compile, built in one compile-view worker: the checks find them in
    the compile cache (one worker start instead of six).  Returns the notebook's solution."""
    from gemm_kernels.lab.compile_view import compile_many

    notebook = _notebook_solution(tmp_path_factory.mktemp("nb08"))
    loops = [notebook, reads_the_program_id] + [answer for answer, _ in ISSUE_ANSWERS.values()]
    compile_many([ex._compile_request(*ex._answer_module(loop)) for loop in loops])
    return notebook


@pytest.fixture
def no_compile(monkeypatch):
    """The check without its sm_90 compile (these loops compile: the four above are compiled for real)
    and without a GPU run: the trace and the simulated ring alone decide."""
    monkeypatch.setattr(ex, "_compile_structure", lambda *a: {"wgmma": 8, "waits": 3, "expect_tx": 1, "arrives": 4})
    monkeypatch.setattr(ex, "_hopper", lambda: False)


# ----------------------------------------------------------------------------- the check, compiled
@pytest.mark.parametrize("case", list(ISSUE_ANSWERS))
def test_the_issues_answers_are_not_called_correct(case, compiled):
    answer, words = ISSUE_ANSWERS[case]
    result = ex.check_consumer_mainloop(answer)
    assert result.status == WRONG, str(result)
    for w in words:
        assert w in str(result), (w, str(result))
    if ISSUE_LINES[case]:  # at the learner's line
        assert f"line {line_of(answer, ISSUE_LINES[case])}: " in str(result), str(result)


def test_the_notebook_solution_is_correct(compiled):
    result = ex.check_consumer_mainloop(compiled)
    assert result.status == CORRECT, str(result)
    assert "never reads stale data" in str(result)


@pytest.mark.skipif(HOPPER, reason="on a Hopper GPU the check runs the kernel, which decides")
def test_a_loop_the_trace_cannot_follow_is_structure_only(compiled):
    result = ex.check_consumer_mainloop(reads_the_program_id)
    assert result.status == STRUCTURE_ONLY and not result.passed, str(result)
    assert str(result).startswith("[~] consumer_mainloop: structure only") and "gl.program_id" in str(result)
    assert "correct" not in result.message


# ----------------------------------------------------------------------------- mistakes, one by one
MISTAKES = [  # (loop, words its message must hold, the line of the learner's it names)
    (parity_off_by_one, ["waits on ready[3] with parity 1", "stale data"], "mbarrier.wait("),
    (phase_not_parity, ["waits on ready[0] with phase 2", "mbarrier.wait takes a parity, 0 or 1"], "mbarrier.wait("),
    (arrives_on_ready, ["arrives on ready[0] by consumer 0", "A consumer gives a slot back on empty_bars"],
     "mbarrier.arrive(ready_bars"),
    (waits_on_next_slot, ["consumer 0 waits forever on ready[1]", "reads slot 0, announced by ready[0]"],
     "mbarrier.wait("),
    (waits_on_empty, ["waits forever on empty[0]", "the producer waits on empty_bars; a consumer waits on ready_bars"],
     "mbarrier.wait("),
    (double_arrive, ["before consumer 1 has read ring position 0", "consumer 0 arrived 2 times"], "mbarrier.arrive("),
    (arrive_count_two, ["with count=2", "an arrive with count > 1 counts for more than one consumer"],
     "mbarrier.arrive("),
    (arrives_before_the_wgmma_is_done, ["while consumer 0's wgmma of ring position 0", "is still reading it"],
     "mbarrier.arrive("),
    (gives_back_the_slot_in_use, ["while consumer 0's wgmma of ring position 0", "warpgroup_mma_wait(1) leaves only"],
     "mbarrier.arrive("),
    (no_final_arrive, ["the producer waits forever for empty[2]", "never gave slot 2 back"], None),
    (no_final_wait, ["returns from tile 0", "1 wgmma(s) still in flight", "warpgroup_mma_wait(0"], "return acc"),
    (gives_back_the_last_slot_too_soon, ["is still reading it", "retired the wgmma that read it"],
     "mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1)"),
    (arrive_without_pred, ["refills slot 3 with ring position 7 before consumer 0 has read ring position 3"],
     "mbarrier.arrive("),
    (negative_modulo, ["empty_bars.index(-1)", "% keeps the sign"], "mbarrier.arrive(empty_bars.index((q - 1)"),
    (ignores_q0, ["step 2 of 4", "the slot of kk = 0", "q = q0 + kk"], "acc = warpgroup_mma("),
    (same_a_for_both, ["reads a_bufs.index(0), expected a_bufs.index(1)", "the other consumer's half of slot 0"],
     "acc = warpgroup_mma("),
    (wrong_b_slice, ["reads b_bufs.index(2), expected b_bufs.index(1)", "b_bufs.index(slot)"], "acc = warpgroup_mma("),
    (keeps_only_the_last_block, ["sums the wgmmas of K block(s) 2 of 0 to 2", "use_acc left True"], None),
    (fp16_accumulator, ["a gl.float16 accumulator", "fp32 accumulator"], None),
    (waits_for_every_wgmma, ["step 4 of 4", "warpgroup_mma_wait(0)", "keeps one in flight"], "warpgroup_mma_wait(0"),
    (loop_never_advances, ["your loop never ended", "while kk < k_tiles"], "while kk < k_tiles"),
    (expects_bytes, ["a consumer does not call mbarrier.expect"], "mbarrier.expect("),
]


@pytest.mark.parametrize("answer, words, line", MISTAKES, ids=[m[0].__name__ for m in MISTAKES])
def test_a_wrong_protocol_is_caught_and_explained(answer, words, line, no_compile):
    result = ex.check_consumer_mainloop(answer)
    assert result.status == WRONG, str(result)
    for w in words:
        assert w in str(result), (w, str(result))
    if line:
        assert f"line {line_of(answer, line)}: " in str(result), str(result)


@pytest.mark.parametrize("answer", [solution, right_with_if, right_two_in_flight], ids=lambda f: f.__name__)
def test_other_right_loops_pass(answer, no_compile):
    result = ex.check_consumer_mainloop(answer)
    assert result.status == CORRECT, str(result)


@pytest.mark.parametrize("answer", [len, lambda *args: None, 42], ids=["a builtin", "a lambda", "a number"])
def test_an_answer_that_is_no_gluon_function_is_named(answer):
    result = ex.check_consumer_mainloop(answer)
    assert result.status == WRONG and "expected" in result.message + str(result.details), str(result)
    assert "inspect" not in str(result)


def test_the_package_own_loop_is_refused():
    from gemm_kernels.kernels import matmul_ws as ws

    result = ex.check_consumer_mainloop(ws._mainloop)
    assert result.status == WRONG and "gemm_kernels' own kernels.matmul_ws._mainloop" in str(result), str(result)


# ----------------------------------------------------------------------------- exercise 1: the reference is refused
def _generator_of_the_reference(q, stages):
    yield from ex.ring_phases_ref(q, stages)


@pytest.mark.parametrize("answer", [
    ex.ring_phases_ref,
    lambda q, s: ex.ring_phases_ref(q, s),
    __import__("functools").partial(ex.ring_phases_ref),
    _generator_of_the_reference,
], ids=["the reference", "returns the reference's", "a partial", "a generator"])
def test_ring_phases_refuses_the_reference(answer):
    result = ex.check_ring_phases(answer)
    assert result.status == WRONG, str(result)
    assert "ring_phases_ref" in str(result) and "this returns the reference's table, not yours" in str(result)


def test_ring_phases_of_ones_own_pass_and_show_the_table_from_it():
    def own(q, stages):
        return q % stages, (q // stages) % 2, 1 - (q // stages) % 2

    result = ex.check_ring_phases(own)
    assert result.status == CORRECT, str(result)
    assert result.details == ["your ring for STAGES = 4:", "q    : 0 1 2 3 4 5 6 7 8 9", "slot : 0 1 2 3 0 1 2 3 0 1",
                              "ready: 0 0 0 0 1 1 1 1 0 0", "empty: 1 1 1 1 0 0 0 0 1 1"]
    assert "your ring for" not in str(ex.check_ring_phases(lambda q, s: (q % s, 0, 1)))  # a wrong one: no table


def test_notebook_08_shows_no_reference_before_its_exercise():
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "08_warp_specialization.ipynb").read_text())
    sources = ["".join(c["source"]) for c in nb["cells"]]
    assert not any("ring_phases_ref" in s for s in sources)
    exercise = next(i for i, s in enumerate(sources) if s.startswith("### Exercise 1"))
    assert not any("(q // STAGES) & 1" in s for s in sources[:exercise])  # the formula is the answer


# ----------------------------------------------------------------------------- the model and the trace
def test_an_mbarrier_passes_the_parity_of_its_last_completed_phase():
    bar = wt._Barrier("empty", 0, count=2)
    assert bar.passes(1) and not bar.passes(0)  # fresh: as if parity 1 had completed
    bar.arrive("consumer 0")
    assert not bar.passes(0)
    bar.arrive("consumer 1")
    assert bar.passes(0) and not bar.passes(1) and bar.completed == 1
    ready = wt._Barrier("ready", 0, count=1)
    ready.arrive("producer", tx=1)  # expect: the arrive is in, the bytes are not
    assert ready.completed == 0
    ready.land()
    assert ready.completed == 1


def _hand_ops(k_tiles, tiles, *, give_back=True, index=None):
    """A right consumer loop written as RingOps (the tracer's output for the solution)."""
    ops = []
    for t in range(tiles):
        for kk in range(k_tiles):
            q = t * k_tiles + kk
            ops.append(wt.RingOp("wait", "ready", q % 4 if index is None else index, (q // 4) & 1, tile=t, kblock=kk))
            ops.append(wt.RingOp("mma", tile=t, kblock=kk))
            ops.append(wt.RingOp("mma_wait", value=1, tile=t, kblock=kk))
            if kk > 0 and give_back:
                ops.append(wt.RingOp("arrive", "empty", (q + 3) % 4, 1, tile=t, kblock=kk))
        ops.append(wt.RingOp("mma_wait", value=0, tile=t, kblock=k_tiles - 1))
        if give_back:
            ops.append(wt.RingOp("arrive", "empty", (t * k_tiles + k_tiles - 1) % 4, 1, tile=t, kblock=k_tiles - 1))
        ops.append(wt.RingOp("return", tile=t, kblock=k_tiles - 1))
    return ops


@pytest.mark.parametrize("schedule", wt.RING_SCHEDULES)
def test_simulate_ring_plays_a_right_ring_and_catches_a_wrong_one(schedule):
    ops = _hand_ops(3, 3)
    assert wt.simulate_ring([ops, ops], tiles=3, k_tiles=3, stages=4, schedule=schedule) is None
    hang = _hand_ops(3, 3, give_back=False)
    fault = wt.simulate_ring([hang, hang], tiles=3, k_tiles=3, stages=4, schedule=schedule)
    assert fault.kind == "deadlock" and "never arrives on empty_bars" in fault.message
    outside = _hand_ops(3, 3, index=5)
    fault = wt.simulate_ring([outside, outside], tiles=3, k_tiles=3, stages=4, schedule=schedule)
    assert fault.kind == "barrier" and "ready_bars.index(5)" in fault.message


def test_the_trace_computes_integers_as_the_kernel_does():
    tracer = ex._Tracer(solution.fn, 0, 0, 1)
    minus_one, minus_seven = ex._RInt(-1, tracer), ex._RInt(-7, tracer)
    assert (minus_one % 4) == -1 and (minus_seven // 2) == -3  # // and % round toward zero, as in the kernel
    assert (ex._RInt(7, tracer) // 2) == 3 and (3 + ex._RInt(1, tracer)) % 4 == 0
