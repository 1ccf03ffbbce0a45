"""A persistent, warp-specialized Hopper GEMM written in Gluon: ``C = act(A @ B + bias)``.

``matmul_tma`` leaves the schedule to Triton's compiler: every warp loads, multiplies and runs the
epilogue in turn, so a tile's epilogue stalls the tensor cores.  Here the schedule is explicit
(``triton.experimental.gluon``: layouts, shared memory, barriers and warps written out):

* a **producer** warp issues TMA loads of A and B blocks into a ring of ``STAGES`` shared-memory
  slots, each with a ``ready`` mbarrier (completed by the TMA unit when the bytes land; with fp8
  block scales, also by the producer once it stored the slot's scales) and an ``empty`` one
  (arrived on by the consumers when their wgmma has read the slot);
* two **consumer** warpgroups run ``warpgroup_mma`` (wgmma) on the slots, then the epilogue.

``SCHEDULE``: ``pingpong`` gives each consumer whole tiles (128 x 128) in turn, ordered by a pair
of *turn* mbarriers (one runs its epilogue while the other multiplies; the turns also keep a
parity wait from passing on a phase two fills old); ``cooperative`` splits every 128 x 256 tile
between both consumers, 64 rows each.  ``matmul_ws`` picks the tile per shape
(``tiles.ws_default_tile``), and with few tiles and a long K runs ``split_k`` pieces of every
tile's K loop as separate *units* (``SPLIT``), the last piece of a tile adding them up.

Tiles follow ``matmul_tma``'s grouped persistent order (``ws_schedule`` is the numpy mirror;
``trace_ws_tiles`` records which warpgroup ran which tile, and when).  Ring position ``q`` (the
q-th K block a program loads) is slot ``q % STAGES``, phase ``(q // STAGES) & 1``, computed from
the tile and K indices, never carried between loops, so producer and consumers agree by
construction.  Needs an sm_90 GPU; fp16 and bf16; any M, N, K (TMA zero-fills and clips); the
same input contract and errors as ``matmul_tma``.  ``fp8.scaled_mm`` runs it with fp8 operands
(``scaled_mm_ws``: scales, and promotion in the consumers, ``_mainloop_promoted``; block scales are
loaded by the producer and stored beside each ring slot, so no consumer's K loop loads from global memory).
"""

from __future__ import annotations

import numpy as np
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# Triton 3.6 (the GPU machine's) names the TMA copies async_copy_global_to_shared and
# async_copy_shared_to_global; newer Triton renamed them async_load / async_store and made the
# old names raise.  Same arguments in the forms used here.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
# A barrier of the calling partition's threads: 3.6's gl.thread_barrier, gl.barrier in newer Triton.
_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

# --- the package helpers this module uses (one block, to re-point when the package moves) ---
from .. import _triton_compat, runtime
from . import launches
from ..models.tiles import (FP8_MAX_SPLITS, FP8_WS_TILES, cdiv, fp8_ws_splits, tile_coords_np, whole_pieces,
                           ws_default_splits, ws_default_tile)
from .checks import check_int, check_matmul_inputs as _check_matmul_inputs, resolve_lazy_views
from .epilogue import _TAIL_COEFFS, LEAKY_RELU_SLOPE, activation_ref
from .tma import tma_aligned, tma_layout
# ----------------------------------------------------------------------------------------------

#: the super-grouping of the tile order (as ``matmul_tma``'s default)
GROUP_SIZE_M = 8
SCHEDULES = ("pingpong", "cooperative")
#: columns of ``trace_ws_tiles``' result: one row per (tile, warpgroup that worked on it)
TRACE_FIELDS = ("tile", "program", "consumer", "step", "pid_m", "pid_n", "start_ns", "mainloop_end_ns", "end_ns")

# exact-GELU tail polynomial, shared with epilogue.gelu_erf (same numbers, same error bound)
_Q0, _Q1, _Q2, _Q3, _Q4, _Q5, _Q6 = (gl.constexpr(c) for c in _TAIL_COEFFS)
_SLOPE = gl.constexpr(LEAKY_RELU_SLOPE)


# ----------------------------------------------------------------------------- device helpers
@gluon.jit
def _tile_grouped(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    """tiles.tile_grouped, line for line (a Gluon kernel cannot call a @triton.jit function)."""
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    rows_in_group = gl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_in_group = tile % num_pid_in_group
    return first_pid_m + pid_in_group % rows_in_group, pid_in_group // rows_in_group


@gluon.jit
def _program_share(M, N, K, TILE_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                   SPLIT: gl.constexpr = False, splits=1):
    """This program's part of the persistent walk, the same for the producer and the consumers:
    (pid, num_programs, num_pid_m, num_pid_n, k_tiles, how many tiles this program runs).
    SPLIT: the walk is over *units*, ``splits`` pieces of every tile's K loop (piece-major), and
    k_tiles is a piece's K blocks (the last piece's past K are TMA's zero fill)."""
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    num_pid_m = gl.cdiv(M, TILE_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    units = num_pid_m * num_pid_n
    if SPLIT:
        k_tiles = gl.cdiv(k_tiles, splits)
        units = units * splits
    my_tiles = gl.cdiv(units - pid, num_programs)
    return pid, num_programs, num_pid_m, num_pid_n, k_tiles, my_tiles


@gluon.jit
def _activation(x, ACTIVATION: gl.constexpr):
    """epilogue.apply_activation on the fp32 accumulator: NaN stays NaN in every branch."""
    if ACTIVATION == "relu":
        x = gl.where(x < 0, 0.0, x)
    elif ACTIVATION == "leaky_relu":
        x = gl.where(x >= 0, x, _SLOPE * x)
    elif ACTIVATION == "gelu":  # epilogue.gelu_erf: x * Phi(x), Phi(-|x|) = q(|x|)^-16
        t = gl.abs(x)
        q = _Q6 * t + _Q5
        q = q * t + _Q4
        q = q * t + _Q3
        q = q * t + _Q2
        q = q * t + _Q1
        q = q * t + _Q0
        tail = gl.fdiv(1.0, q, ieee_rounding=False)
        tail = tail * tail
        tail = tail * tail
        tail = tail * tail
        tail = tail * tail
        x = x * gl.where(x >= 0, 1.0 - tail, tail)
    return x


@gluon.jit
def _globaltimer():
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.constexpr_function
def _acc_layout(WG_M, BLOCK_N, dtype=gl.float16):
    """wgmma accumulator layout of one warpgroup: 4 warps down M, one m64nNkK instruction wide
    (K = 32 bytes of the operands' dtype: 16 for fp16/bf16, 32 for fp8)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                     instr_shape=[16, BLOCK_N, 256 // dtype.primitive_bitwidth])


# ----------------------------------------------------------------------------- partitions
@gluon.jit
def _load_block_scales(sa_ptr, sb_ptr, off_m, off_n, kk, M, N, K, stride_sam, stride_sak, stride_sbk, stride_sbn,
                       TILE_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """One warp, block scales (fp8.py): K block kk's scales of the tile's rows (TILE_M of them) and of
    its one or two 128-column pieces of B, each b-scale copied to TILE_M rows (as the consumers
    read them); the second piece's is the first's when there is one piece.  Zero past K (the last
    split piece may end there; TMA's zero fill makes its products zero, and 0 x 0 stays zero)."""
    rows: gl.constexpr = gl.BlockedLayout([TILE_M // 32], [32], [1], [0])
    offs_m = off_m + gl.arange(0, TILE_M, layout=rows)
    k_ok = kk * 128 < K
    sa = gl.load(sa_ptr + offs_m * stride_sam + kk * stride_sak, mask=(offs_m < M) & k_ok, other=0.0)
    col = off_n // 128
    sb0 = gl.full([TILE_M], gl.load(sb_ptr + kk * stride_sbk + col * stride_sbn, mask=k_ok, other=0.0), gl.float32,
                  rows)
    sb1 = sb0
    if BLOCK_N == 256:
        sb1 = gl.full([TILE_M], gl.load(sb_ptr + kk * stride_sbk + (col + 1) * stride_sbn,
                                        mask=((col + 1) * 128 < N) & k_ok, other=0.0), gl.float32, rows)
    return sa, sb0, sb1


@gluon.jit
def _producer(a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K,
              SCHEDULE: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
              STAGES: gl.constexpr, A_COL_MAJOR: gl.constexpr, B_COL_MAJOR: gl.constexpr, GROUP_M: gl.constexpr,
              BLOCK_SCALES: gl.constexpr = False, s_bufs=None, sa_ptr=None, sb_ptr=None,
              stride_sam=0, stride_sak=0, stride_sbk=0, stride_sbn=0, SPLIT: gl.constexpr = False, splits=1):
    """One warp: walk this program's tiles and K blocks in order, one TMA load per ring position.
    BLOCK_SCALES (fp8): also store each slot's scales in ``s_bufs`` (a consumer that loaded them
    in its K loop stalled on the loads, PERF_NOTES 35).  SPLIT: units of ``_program_share``, each
    a piece's K blocks of its tile."""
    A_PARTS: gl.constexpr = 2 if SCHEDULE == "cooperative" else 1  # A rows per slot, in WG_M blocks
    TILE_M: gl.constexpr = A_PARTS * WG_M
    PIECES: gl.constexpr = BLOCK_N // 128  # block scales: one b-scale per 128 columns
    SCALE_ROWS: gl.constexpr = PIECES + 1  # block scales: s_bufs rows per slot, the a-scales' then each piece's b-scale
    slot_bytes: gl.constexpr = A_PARTS * a_desc.block_type.nbytes + b_desc.block_type.nbytes

    pid, num_programs, num_pid_m, num_pid_n, k_tiles, my_tiles = _program_share(M, N, K, TILE_M, BLOCK_N, BLOCK_K,
                                                                                SPLIT, splits)
    for t in range(my_tiles):
        tile = pid + t * num_programs
        if SPLIT:  # unit -> (piece, tile): the piece's K blocks start at piece * k_tiles
            k_first = (tile // (num_pid_m * num_pid_n)) * k_tiles
            tile = tile % (num_pid_m * num_pid_n)
        pid_m, pid_n = _tile_grouped(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * TILE_M
        off_n = pid_n * BLOCK_N
        for kk in range(k_tiles):
            q = t * k_tiles + kk
            s = q % STAGES
            if SPLIT:
                k_block = k_first + kk
            else:
                k_block = kk
            if BLOCK_SCALES:  # loaded before the wait for the slot, so the wait hides their latency
                sa, sb0, sb1 = _load_block_scales(sa_ptr, sb_ptr, off_m, off_n, k_block, M, N, K, stride_sam, stride_sak,
                                                  stride_sbk, stride_sbn, TILE_M, BLOCK_N)
            # Wait until the consumers gave slot s back.  A fresh barrier counts as having
            # completed phase "-1", so the first lap (parity 1) passes at once.
            mbarrier.wait(empty_bars.index(s), ((q // STAGES) & 1) ^ 1)
            ready = ready_bars.index(s)
            mbarrier.expect(ready, slot_bytes)
            off_k = k_block * BLOCK_K
            for part in gl.static_range(A_PARTS):
                if A_COL_MAJOR:  # A^T is the contiguous one: described as [K, M]
                    _tma_load(a_desc, [off_k, off_m + part * WG_M], ready,
                                                    a_bufs.index(s * A_PARTS + part))
                else:
                    _tma_load(a_desc, [off_m + part * WG_M, off_k], ready,
                                                    a_bufs.index(s * A_PARTS + part))
            if B_COL_MAJOR:  # B^T contiguous (an nn.Linear weight): described as [N, K]
                _tma_load(b_desc, [off_n, off_k], ready, b_bufs.index(s))
            else:
                _tma_load(b_desc, [off_k, off_n], ready, b_bufs.index(s))
            if BLOCK_SCALES:  # the a-scales and each piece's b-scale, apart (their product may overflow);
                s_bufs.index(s * SCALE_ROWS).store(sa)  # then the slot's second arrival
                s_bufs.index(s * SCALE_ROWS + 1).store(sb0)
                if PIECES == 2:
                    s_bufs.index(s * SCALE_ROWS + 2).store(sb1)
                mbarrier.arrive(ready)


@gluon.jit
def _mainloop(a_bufs, b_bufs, ready_bars, empty_bars, turn_bar, q0, k_tiles, PART: gl.constexpr, A_PARTS: gl.constexpr,
              WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              A_COL_MAJOR: gl.constexpr, B_COL_MAJOR: gl.constexpr, PINGPONG: gl.constexpr):
    """fp32 [WG_M, BLOCK_N] sum over the K blocks at ring positions q0 .. q0 + k_tiles - 1."""
    acc = gl.zeros([WG_M, BLOCK_N], gl.float32, _acc_layout(WG_M, BLOCK_N, a_bufs.dtype))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        a = a_bufs.index(s * A_PARTS + PART)
        if A_COL_MAJOR:
            a = a.permute((1, 0))  # wgmma reads 16-bit operands in either orientation
        b = b_bufs.index(s)
        if B_COL_MAJOR:
            b = b.permute((1, 0))
        acc = warpgroup_mma(a, b, acc, is_async=True)
        # Keep one wgmma in flight: once only this one is pending, the previous slot is read.
        acc = warpgroup_mma_wait(1, deps=(acc,))
        mbarrier.arrive(empty_bars.index((q + STAGES - 1) % STAGES), pred=kk > 0)
    if PINGPONG:
        # Every ready wait of this tile is behind us and its last wgmma is queued: the other
        # consumer may start issuing now, its wgmmas queue behind ours (no bubble on the tensor cores).
        mbarrier.arrive(turn_bar)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty_bars.index((q0 + k_tiles - 1) % STAGES))
    return acc


@gluon.jit
def _mainloop_promoted(a_bufs, b_bufs, s_bufs, ready_bars, empty_bars, q0, k_tiles, PART: gl.constexpr,
                       A_PARTS: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                       BLOCK_SCALES: gl.constexpr):
    """fp8 with promotion (fp8.py): each K block's product starts from zero on the tensor cores
    and is added here to the fp32 sums, times the block's scales when BLOCK_SCALES (the a- and
    b-scales the producer stored beside the slot, read while the wgmmas run, applied one after
    the other: their product can overflow float32 where the result does not).  The add
    waits for this warpgroup's wgmma; the other consumer's wgmmas keep the tensor cores busy.
    The tile's columns go in PIECE-wide pieces, one partial reused: a sum of 64 x 256 and a
    partial beside it would not fit in a thread's registers, two 64 x 128 sums and one partial do.
    Returns the sums of columns [0, PIECE) and [PIECE, 2 PIECE) (the second unused when BLOCK_N is PIECE)."""
    PIECE: gl.constexpr = 128  # = fp8.SCALE_BLOCK: a piece has one block scale of B per K block
    gl.static_assert(BLOCK_N == PIECE or BLOCK_N == 2 * PIECE)
    SCALE_ROWS: gl.constexpr = BLOCK_N // PIECE + 1  # block scales: s_bufs rows per slot, as the producer stores them
    layout: gl.constexpr = _acc_layout(WG_M, PIECE, a_bufs.dtype)
    rows: gl.constexpr = gl.SliceLayout(1, layout)
    acc0 = gl.zeros([WG_M, PIECE], gl.float32, layout)
    acc1 = gl.zeros([WG_M, PIECE], gl.float32, layout)
    zero = gl.zeros([WG_M, PIECE], gl.float32, layout)
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        a = a_bufs.index(s * A_PARTS + PART)
        b = b_bufs.index(s)  # [BLOCK_N, BLOCK_K]: B's K-major rows
        part = warpgroup_mma(a, b.slice(0, PIECE).permute((1, 0)), zero, use_acc=False, is_async=True)
        if BLOCK_SCALES:
            scale_a = s_bufs.index(s * SCALE_ROWS).slice(PART * WG_M, WG_M).load(rows)
            scale_b = s_bufs.index(s * SCALE_ROWS + 1).slice(PART * WG_M, WG_M).load(rows)
        part = warpgroup_mma_wait(0, deps=(part,))
        if BLOCK_N == PIECE:
            # (The scales were read before this arrive: Gluon syncs the warpgroup first, then one
            # thread arrives, so the producer cannot overwrite them while a thread still reads.)
            mbarrier.arrive(empty_bars.index(s))
        if BLOCK_SCALES:
            acc0 += part * gl.expand_dims(scale_a, 1) * gl.expand_dims(scale_b, 1)
        else:
            acc0 += part
        if BLOCK_N == 2 * PIECE:
            part = warpgroup_mma(a, b.slice(PIECE, PIECE).permute((1, 0)), zero, use_acc=False, is_async=True)
            if BLOCK_SCALES:
                scale_b = s_bufs.index(s * SCALE_ROWS + 2).slice(PART * WG_M, WG_M).load(rows)
            part = warpgroup_mma_wait(0, deps=(part,))
            mbarrier.arrive(empty_bars.index(s))
            if BLOCK_SCALES:
                acc1 += part * gl.expand_dims(scale_a, 1) * gl.expand_dims(scale_b, 1)
            else:
                acc1 += part
    return acc0, acc1


@gluon.jit
def _apply_scales(acc, sa_ptr, sb_ptr, off_m, off_n, M, N, stride_sam, stride_sbn,
                  SCALING: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """fp8's tensor- or row-wise dequantization of the fp32 sum (fp8.py); nothing otherwise."""
    layout: gl.constexpr = acc.type.layout
    if SCALING == "tensor":  # one scale, then the other: their product can overflow where the result does not
        acc = acc * gl.load(sa_ptr) * gl.load(sb_ptr)
    elif SCALING == "row":
        offs_m = off_m + gl.arange(0, WG_M, layout=gl.SliceLayout(1, layout))
        offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
        sa = gl.load(sa_ptr + offs_m * stride_sam, mask=offs_m < M, other=0.0)
        sb = gl.load(sb_ptr + offs_n * stride_sbn, mask=offs_n < N, other=0.0)
        acc = acc * gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0)
    return acc


@gluon.jit
def _epilogue(acc, c_desc, c_smem, c_ptr, bias_ptr, off_m, off_n, M, N, stride_cm,
              WG_M: gl.constexpr, BLOCK_N: gl.constexpr, EPI_SPLIT: gl.constexpr, C_TMA: gl.constexpr,
              HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr):
    """Bias, activation, cast and store of one [WG_M, BLOCK_N] accumulator."""
    acc_layout: gl.constexpr = acc.type.layout
    dtype: gl.constexpr = c_ptr.dtype.element_ty
    offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
    if HAS_BIAS:
        bias = gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(gl.float32)
        acc = acc + gl.expand_dims(bias, 0)
    acc = _activation(acc, ACTIVATION)
    if C_TMA:
        # The hardware clips the rows/columns past M and N.  Before c_smem is written again, the
        # previous store from it (one tile ago, long overlapped by the main loop) must be done.
        if EPI_SPLIT == 1:
            tma.store_wait(0)
            c_smem.store(acc.to(dtype))
            fence_async_shared()
            _tma_store(c_desc, [off_m, off_n], c_smem)
        else:  # two halves, each through half the shared memory
            halves = acc.reshape([WG_M, 2, BLOCK_N // 2]).permute((0, 2, 1))
            left, right = halves.split()
            tma.store_wait(0)
            c_smem.store(left.to(dtype))
            fence_async_shared()
            _tma_store(c_desc, [off_m, off_n], c_smem)
            tma.store_wait(0)
            c_smem.store(right.to(dtype))
            fence_async_shared()
            _tma_store(c_desc, [off_m, off_n + BLOCK_N // 2], c_smem)
    else:  # C's rows are not 16-byte aligned: masked pointer stores
        offs_m = off_m + gl.arange(0, WG_M, layout=gl.SliceLayout(1, acc_layout))
        ptrs = c_ptr + gl.expand_dims(offs_m, 1) * stride_cm + gl.expand_dims(offs_n, 0)
        mask = (gl.expand_dims(offs_m, 1) < M) & (gl.expand_dims(offs_n, 0) < N)
        gl.store(ptrs, acc.to(dtype), mask=mask)


@gluon.jit
def _add_split_unit(acc, ws_ptr, count_ptr, c_ptr, bias_ptr, piece, part_tile, part_tiles, splits, off_m, off_n,
                    M, N, stride_cm, WG_M: gl.constexpr, BLOCK_N: gl.constexpr, HAS_BIAS: gl.constexpr,
                    ACTIVATION: gl.constexpr):
    """Split-K's fix-up in the GEMM kernel (``matmul_splitk``'s, one warpgroup's rows at a time): store
    this piece's fp32 sum in its workspace slot, then bump the count of ``part_tile`` (a tile's
    WG_M rows); the piece that arrives last adds all ``splits`` slots in piece order (the same bits
    whichever came last), applies bias and activation and stores C.  No piece waits for another."""
    acc_layout: gl.constexpr = acc.type.layout
    SLOT: gl.constexpr = WG_M * BLOCK_N
    rows = gl.arange(0, WG_M, layout=gl.SliceLayout(1, acc_layout))
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
    slots = ws_ptr + part_tile.to(gl.int64) * SLOT  # slot (s, part_tile) at slots + s * part_tiles * SLOT
    gl.store(slots + piece.to(gl.int64) * part_tiles * SLOT + gl.expand_dims(rows, 1) * BLOCK_N
             + gl.expand_dims(cols, 0), acc)
    _barrier()  # every thread of the warpgroup stored its part before the count goes up...
    arrived = gl.atomic_add(count_ptr + part_tile, 1, sem="acq_rel", scope="gpu")  # ...and is seen with it
    if arrived == splits - 1:
        gl.atomic_xchg(count_ptr + part_tile, 0, sem="relaxed", scope="gpu")  # left zero for the next launch
        # Chunks of 32 fp32 per thread (WG_M x CHUNK over 128 threads, 16-byte loads): with 64, the
        # sum and the loads ptxas keeps in flight spilled registers in the cooperative tiles.
        CHUNK: gl.constexpr = 4096 // WG_M
        gl.static_assert(BLOCK_N % CHUNK == 0)
        layout: gl.constexpr = gl.BlockedLayout([1, 4], [32 // (CHUNK // 4), CHUNK // 4], [4, 1], [1, 0])
        dtype: gl.constexpr = c_ptr.dtype.element_ty
        r = gl.arange(0, WG_M, layout=gl.SliceLayout(1, layout))
        for h in gl.static_range(BLOCK_N // CHUNK):
            cc = h * CHUNK + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout))
            offs = gl.expand_dims(r, 1) * BLOCK_N + gl.expand_dims(cc, 0)
            total = gl.zeros([WG_M, CHUNK], gl.float32, layout)
            piece_ptrs = slots + offs
            step = part_tiles.to(gl.int64) * SLOT
            for s in range(0, splits - splits % 4, 4):  # four pieces' loads in flight, then added in order
                x0 = gl.load(piece_ptrs + s * step, cache_modifier=".cg")
                x1 = gl.load(piece_ptrs + (s + 1) * step, cache_modifier=".cg")
                x2 = gl.load(piece_ptrs + (s + 2) * step, cache_modifier=".cg")
                x3 = gl.load(piece_ptrs + (s + 3) * step, cache_modifier=".cg")
                total = (((total + x0) + x1) + x2) + x3
            for s in range(splits - splits % 4, splits):  # piece order throughout: deterministic
                total += gl.load(piece_ptrs + s * step, cache_modifier=".cg")
            offs_n = off_n + cc
            if HAS_BIAS:
                bias = gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(gl.float32)
                total = total + gl.expand_dims(bias, 0)
            total = _activation(total, ACTIVATION)
            offs_m = off_m + r
            mask = (gl.expand_dims(offs_m, 1) < M) & (gl.expand_dims(offs_n, 0) < N)
            rows_at = gl.expand_dims(offs_m.to(gl.int64), 1) * stride_cm  # a forced split of M x N >= 2^31 too
            gl.store(c_ptr + rows_at + gl.expand_dims(offs_n, 0), total.to(dtype), mask=mask)


@gluon.jit
def _consumer(c_desc, a_bufs, b_bufs, c_bufs, s_bufs, ready_bars, empty_bars, turn_bars, c_ptr, bias_ptr, trace_ptr,
              sa_ptr, sb_ptr, ws_ptr, count_ptr, M, N, K, stride_cm, stride_sam, stride_sbn,
              SCALING: gl.constexpr, PROMOTE: gl.constexpr, SCHEDULE: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
              STAGES: gl.constexpr, EPI_SPLIT: gl.constexpr, A_COL_MAJOR: gl.constexpr, B_COL_MAJOR: gl.constexpr,
              C_TMA: gl.constexpr, HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr, TRACE: gl.constexpr,
              GROUP_M: gl.constexpr, CONSUMER: gl.constexpr, SPLIT: gl.constexpr = False, splits=1):
    """One warpgroup: main loop and epilogue of its tiles (pingpong) or tile halves (cooperative).
    SPLIT: the epilogue of its units is ``_add_split_unit``'s (the last piece of a tile adds them)."""
    PINGPONG: gl.constexpr = SCHEDULE == "pingpong"
    A_PARTS: gl.constexpr = 1 if PINGPONG else 2
    TILE_M: gl.constexpr = A_PARTS * WG_M
    PART: gl.constexpr = 0 if PINGPONG else CONSUMER  # which WG_M rows of the slot's A are ours
    FIRST: gl.constexpr = CONSUMER if PINGPONG else 0
    STEP: gl.constexpr = 2 if PINGPONG else 1

    pid, num_programs, num_pid_m, num_pid_n, k_tiles, my_tiles = _program_share(M, N, K, TILE_M, BLOCK_N, BLOCK_K,
                                                                                SPLIT, splits)
    gl.static_assert(not (SPLIT and (TRACE or C_TMA)), "split-K units store C with pointer stores")
    c_smem = c_bufs.index(CONSUMER)
    for t in range(FIRST, my_tiles, STEP):
        if PINGPONG:
            # Our turn on the tensor cores: wait until the other consumer's main loop (of the tile
            # before ours) is done.  Besides ordering the main loops, this keeps every ready-barrier
            # wait at most one phase ahead, which a parity wait needs: without it, consumer 1 would
            # wait on ring positions a whole tile ahead and pass on an older phase of the same parity.
            # Consumer 0's first wait (parity 1 on a fresh barrier) passes at once.
            mbarrier.wait(turn_bars.index(CONSUMER), ((t // 2) & 1) ^ (CONSUMER == 0))
        if TRACE:
            start = _globaltimer()
        tile = pid + t * num_programs
        if SPLIT:  # unit -> (piece, tile), as the producer walks them
            piece = tile // (num_pid_m * num_pid_n)
            tile = tile % (num_pid_m * num_pid_n)
        pid_m, pid_n = _tile_grouped(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * TILE_M + PART * WG_M
        off_n = pid_n * BLOCK_N
        if PROMOTE:  # fp8: the sums come in 128-column pieces, each stored as one EPI_SPLIT part
            gl.static_assert(not PINGPONG, "fp8 promotion runs the cooperative schedule")
            gl.static_assert(BLOCK_N // EPI_SPLIT == 128)
            acc, acc_hi = _mainloop_promoted(a_bufs, b_bufs, s_bufs, ready_bars, empty_bars, t * k_tiles, k_tiles,
                                             PART, A_PARTS, WG_M, BLOCK_N, STAGES, SCALING == "block")
            if TRACE:
                mainloop_end = _globaltimer()
            # The scales are linear, so a split unit applies them to its own part of the sum.  Split
            # units add up per 128-column piece: piece h of warpgroup tile p is split tile 2p + h.
            acc = _apply_scales(acc, sa_ptr, sb_ptr, off_m, off_n, M, N, stride_sam, stride_sbn, SCALING, WG_M, 128)
            if SPLIT:
                _add_split_unit(acc, ws_ptr, count_ptr, c_ptr, bias_ptr, piece, (tile * A_PARTS + PART) * EPI_SPLIT,
                                num_pid_m * num_pid_n * A_PARTS * EPI_SPLIT, splits, off_m, off_n, M, N, stride_cm,
                                WG_M, 128, HAS_BIAS, ACTIVATION)
            else:
                _epilogue(acc, c_desc, c_smem, c_ptr, bias_ptr, off_m, off_n,
                          M, N, stride_cm, WG_M, 128, 1, C_TMA, HAS_BIAS, ACTIVATION)
            if EPI_SPLIT == 2:
                acc = _apply_scales(acc_hi, sa_ptr, sb_ptr, off_m, off_n + 128, M, N, stride_sam, stride_sbn,
                                    SCALING, WG_M, 128)
                if SPLIT:
                    _add_split_unit(acc, ws_ptr, count_ptr, c_ptr, bias_ptr, piece, (tile * A_PARTS + PART) * EPI_SPLIT + 1,
                                    num_pid_m * num_pid_n * A_PARTS * EPI_SPLIT, splits, off_m, off_n + 128, M, N,
                                    stride_cm, WG_M, 128, HAS_BIAS, ACTIVATION)
                else:
                    _epilogue(acc, c_desc, c_smem, c_ptr, bias_ptr, off_m, off_n + 128,
                              M, N, stride_cm, WG_M, 128, 1, C_TMA, HAS_BIAS, ACTIVATION)
        else:
            acc = _mainloop(a_bufs, b_bufs, ready_bars, empty_bars, turn_bars.index(1 - CONSUMER), t * k_tiles,
                            k_tiles, PART, A_PARTS, WG_M, BLOCK_N, STAGES, A_COL_MAJOR, B_COL_MAJOR, PINGPONG)
            if TRACE:
                mainloop_end = _globaltimer()  # every wgmma of the tile done: the epilogue starts
            acc = _apply_scales(acc, sa_ptr, sb_ptr, off_m, off_n, M, N, stride_sam, stride_sbn, SCALING, WG_M, BLOCK_N)
            if SPLIT:
                _add_split_unit(acc, ws_ptr, count_ptr, c_ptr, bias_ptr, piece, tile * A_PARTS + PART,
                                num_pid_m * num_pid_n * A_PARTS, splits, off_m, off_n, M, N, stride_cm,
                                WG_M, BLOCK_N, HAS_BIAS, ACTIVATION)
            else:
                _epilogue(acc, c_desc, c_smem, c_ptr, bias_ptr, off_m, off_n,
                          M, N, stride_cm, WG_M, BLOCK_N, EPI_SPLIT, C_TMA, HAS_BIAS, ACTIVATION)
        if TRACE:  # one row per (tile, consumer): TRACE_FIELDS
            row = trace_ptr + (tile * A_PARTS + PART) * 9
            gl.store(row, tile.to(gl.int64))
            gl.store(row + 1, pid.to(gl.int64))
            gl.store(row + 2, gl.to_tensor(CONSUMER).to(gl.int64))
            gl.store(row + 3, gl.to_tensor(t).to(gl.int64))
            gl.store(row + 4, pid_m.to(gl.int64))
            gl.store(row + 5, pid_n.to(gl.int64))
            gl.store(row + 6, start)
            gl.store(row + 7, mainloop_end)
            gl.store(row + 8, _globaltimer())
    if C_TMA:
        tma.store_wait(0)


@gluon.jit
def _matmul_ws_kernel(a_desc, b_desc, c_desc, c_ptr, bias_ptr, trace_ptr, sa_ptr, sb_ptr, ws_ptr, count_ptr,
                      M, N, K, stride_cm,
                      stride_sam, stride_sak, stride_sbk, stride_sbn, splits,
                      SCALING: gl.constexpr, PROMOTE: gl.constexpr, SCHEDULE: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                      STAGES: gl.constexpr, EPI_SPLIT: gl.constexpr,
                      A_COL_MAJOR: gl.constexpr, B_COL_MAJOR: gl.constexpr, C_TMA: gl.constexpr,
                      HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr, TRACE: gl.constexpr,
                      GROUP_SIZE_M: gl.constexpr, PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                      SPLIT: gl.constexpr):
    gl.static_assert(SCHEDULE == "pingpong" or SCHEDULE == "cooperative")
    A_PARTS: gl.constexpr = 2 if SCHEDULE == "cooperative" else 1
    BLOCK_SCALES: gl.constexpr = SCALING == "block"

    # Every buffer and barrier, allocated together: the ring (STAGES slots of A and B blocks, and
    # block-wise their scales), one C staging buffer per consumer, and the ring's two barriers per slot.
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES * A_PARTS] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    if C_TMA:
        c_bufs = gl.allocate_shared_memory(c_desc.dtype, [2] + c_desc.block_type.shape, c_desc.layout)
    else:
        c_bufs = a_bufs  # unused: C goes out through pointer stores
    if BLOCK_SCALES:  # per slot, each tile row's a-scale, then per 128-column piece its b-scale in every row
        s_bufs = gl.allocate_shared_memory(gl.float32, [STAGES * (BLOCK_N // 128 + 1), A_PARTS * WG_M],
                                           gl.SwizzledSharedLayout(1, 1, 1, order=[0]))  # a 1-D layout: each row is indexed
    else:
        s_bufs = a_bufs  # unused
    ready_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # pingpong: whose main loop
    mbarrier.init(turn_bars.index(0), count=1)
    mbarrier.init(turn_bars.index(1), count=1)
    for i in gl.static_range(STAGES):
        if BLOCK_SCALES:  # the producer's expect + the TMA bytes, then its arrive once the scales are stored
            mbarrier.init(ready_bars.index(i), count=2)
        else:  # the producer's expect + the TMA bytes
            mbarrier.init(ready_bars.index(i), count=1)
        mbarrier.init(empty_bars.index(i), count=A_PARTS)  # every consumer that read the slot

    # default partition (this kernel's 4 warps) = consumer 0; workers: consumer 1 (4 warps), producer (1 warp)
    # (The argument tuples are written out: a tuple assigned to a name turns its constexprs into tensors.)
    gl.warp_specialize([
        (_consumer, (c_desc, a_bufs, b_bufs, c_bufs, s_bufs, ready_bars, empty_bars, turn_bars, c_ptr, bias_ptr, trace_ptr,
                     sa_ptr, sb_ptr, ws_ptr, count_ptr, M, N, K, stride_cm, stride_sam, stride_sbn,
                     SCALING, PROMOTE, SCHEDULE, WG_M, BLOCK_N, BLOCK_K, STAGES, EPI_SPLIT, A_COL_MAJOR, B_COL_MAJOR, C_TMA,
                     HAS_BIAS, ACTIVATION, TRACE, GROUP_SIZE_M, 0, SPLIT, splits)),
        (_consumer, (c_desc, a_bufs, b_bufs, c_bufs, s_bufs, ready_bars, empty_bars, turn_bars, c_ptr, bias_ptr, trace_ptr,
                     sa_ptr, sb_ptr, ws_ptr, count_ptr, M, N, K, stride_cm, stride_sam, stride_sbn,
                     SCALING, PROMOTE, SCHEDULE, WG_M, BLOCK_N, BLOCK_K, STAGES, EPI_SPLIT, A_COL_MAJOR, B_COL_MAJOR, C_TMA,
                     HAS_BIAS, ACTIVATION, TRACE, GROUP_SIZE_M, 1, SPLIT, splits)),
        (_producer, (a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K,
                     SCHEDULE, WG_M, BLOCK_N, BLOCK_K, STAGES, A_COL_MAJOR, B_COL_MAJOR, GROUP_SIZE_M,
                     BLOCK_SCALES, s_bufs, sa_ptr, sb_ptr, stride_sam, stride_sak, stride_sbk, stride_sbn,
                     SPLIT, splits)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


#: the same kernel, not specialised on M: an unsplit fp16/bf16 launch reads and stores rows only
#: through TMA and masks, so a new M reuses its compiled code (the compile view's PTX is the same).
#: Split units and fp8 block scales keep M specialised (with Triton 3.9 the split units' code
#: spills 8 bytes without it, tests/test_matmul_ws.py).
_matmul_ws_kernel_any_m = gluon.jit(_matmul_ws_kernel.fn, do_not_specialize=["M"])


# ----------------------------------------------------------------------------- configs
#: Tile shapes per schedule.  WG_M rows per consumer warpgroup: a pingpong tile is WG_M x BLOCK_N,
#: a cooperative one 2*WG_M x BLOCK_N.  Shared memory (fp16): pingpong 5 x 32 KiB ring + 2 x 32 KiB
#: C = 224 KiB; cooperative 4 x 48 KiB + 2 x 16 KiB = 224 KiB (of 227 KiB).
CONFIGS = {
    "pingpong": dict(SCHEDULE="pingpong", WG_M=128, BLOCK_N=128, BLOCK_K=64, STAGES=5, EPI_SPLIT=1),
    "cooperative": dict(SCHEDULE="cooperative", WG_M=64, BLOCK_N=256, BLOCK_K=64, STAGES=4, EPI_SPLIT=2),
    # cuBLAS's tile on this GPU (nvjet ..._256x128_64x4_..._coopA): 2 x 128 rows, 4 x 48 KiB + 2 x 16 KiB
    "cooperative_256x128": dict(SCHEDULE="cooperative", WG_M=128, BLOCK_N=128, BLOCK_K=64, STAGES=4, EPI_SPLIT=2),
    # 64-row tiles for ragged or few rows (tiles.ws_default_tile): 4 x 40 KiB + 2 x 16 KiB; 8 x 24 KiB + 2 x 16 KiB
    "pingpong_64x256": dict(SCHEDULE="pingpong", WG_M=64, BLOCK_N=256, BLOCK_K=64, STAGES=4, EPI_SPLIT=2),
    "pingpong_64x128": dict(SCHEDULE="pingpong", WG_M=64, BLOCK_N=128, BLOCK_K=64, STAGES=8, EPI_SPLIT=1),
}
#: the tile of problems that fill the GPU (measured: WS_NOTES.md, entry 4); ``matmul_ws`` picks
#: per shape by ``tiles.ws_default_tile``
DEFAULT_SCHEDULE = "cooperative"
#: 12 warps (3 warpgroups, the producer's rounded up) x 32 threads x MAXNREG <= 64 Ki registers;
#: setmaxnreg then moves registers from the producer to the consumers (40 + 232 + 232 = 3 x 168).
MAXNREG = 168
PRODUCER_REGS = 40
CONSUMER_REGS = 232

_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}  # matmul_ws's inputs
_GL_TYPES = {**_GL_DTYPES, torch.float32: gl.float32,  # and fp8's inputs and outputs (fp8.scaled_mm)
             torch.float8_e4m3fn: gl.float8e4nv, torch.float8_e5m2: gl.float8e5}

#: fp8 tiles (``fp8.scaled_mm`` on Hopper), cooperative, BLOCK_K = 128 (128 bytes of fp8), picked
#: per shape by ``tiles.ws_default_tile(..., tiles=FP8_WS_TILES)``.  Promoting keeps a partial
#: product beside the sums, so it runs the tile in 128-column pieces (``_mainloop_promoted``),
#: each stored as one EPI_SPLIT part.  STAGES is the most the shared memory holds beside C
#: (``_fit_stages``).
FP8_CONFIGS = {
    "128x256": dict(SCHEDULE="cooperative", WG_M=64, BLOCK_N=256, BLOCK_K=128, STAGES=4, EPI_SPLIT=2),
    "128x128": dict(SCHEDULE="cooperative", WG_M=64, BLOCK_N=128, BLOCK_K=128, STAGES=6, EPI_SPLIT=1),
}
#: dynamic shared memory of one sm_90 program (227 KiB), less room for the barriers
_SMEM_BYTES = 227 * 1024 - 1024


def _tile_m(config) -> int:
    return config["WG_M"] * (2 if config["SCHEDULE"] == "cooperative" else 1)


def _require_hopper() -> None:
    if runtime.supports_wgmma():
        return
    raise RuntimeError(runtime.missing_feature(
        "matmul_ws", "an sm_90 (Hopper: H100/H200) GPU: it is a Gluon kernel built on wgmma (warpgroup_mma), TMA "
        "and mbarriers, and does not run in Triton's interpreter",
        "Use matmul_tma (sm_90+) or matmul_persistent (any GPU, or the interpreter) instead."))


def _fit_stages(config, in_bytes: int, out_bytes: int, *, block_scales: bool = False) -> dict:
    """``config`` with as many ring slots (at most its STAGES) as fit beside the two C buffers
    (``block_scales``: each slot also holds a row of float32 a-scales and one of each 128-column
    piece's b-scale, a float per tile row each)."""
    a_parts = 2 if config["SCHEDULE"] == "cooperative" else 1
    slot = (a_parts * config["WG_M"] + config["BLOCK_N"]) * config["BLOCK_K"] * in_bytes
    if block_scales:
        slot += a_parts * config["WG_M"] * (config["BLOCK_N"] // 128 + 1) * 4
    c_bytes = 2 * config["WG_M"] * config["BLOCK_N"] // config["EPI_SPLIT"] * out_bytes
    return {**config, "STAGES": min(config["STAGES"], (_SMEM_BYTES - c_bytes) // slot)}


def _kernel_args(a, b, c, bias, trace, config, *, activation, group_size_m=GROUP_SIZE_M, scales=None, splits=1,
                 workspace=None):
    """Descriptors and arguments of ``_matmul_ws_kernel`` by name (host side; no GPU needed;
    the compile view builds its sm_90 example from this too).  ``scales``: fp8's
    ``(scale_a, scale_b, scaling, promote)`` (``fp8.scaled_mm``), None for fp16 and bf16.
    ``splits`` > 1: split-K units, ``workspace`` their ``(slots, counts)`` (``_split_workspace``);
    C is then stored with pointer stores."""
    if (splits > 1) != (workspace is not None):
        raise ValueError(f"split units need their workspace and only they take one (splits={splits}, "
                         f"workspace {'given' if workspace is not None else 'missing'})")
    M, K = a.shape
    N = b.shape[1]
    a_col_major, stride_a = tma_layout(a, "a")
    b_col_major, stride_b = tma_layout(b, "b")
    wg_m, bn, bk = config["WG_M"], config["BLOCK_N"], config["BLOCK_K"]
    a_block = [bk, wg_m] if a_col_major else [wg_m, bk]
    b_block = [bn, bk] if b_col_major else [bk, bn]

    def desc(t, shape, stride, block):
        layout = gl.NVMMASharedLayout.get_default_for(block, _GL_TYPES[t.dtype])
        return TensorDescriptor(t, shape, [stride, 1], block, layout)

    a_desc = desc(a, [K, M] if a_col_major else [M, K], stride_a, a_block)
    b_desc = desc(b, [N, K] if b_col_major else [K, N], stride_b, b_block)
    # C is ours, contiguous: TMA stores need its rows 16-byte aligned (a single row has no row stride)
    itemsize = c.element_size()
    rows = c.shape[0]
    c_tma = (splits == 1 and c.data_ptr() % runtime.TMA_ALIGN_BYTES == 0
             and (c.stride(0) * itemsize % runtime.TMA_ALIGN_BYTES == 0 or rows == 1))
    c_desc = None
    if c_tma:
        stride_c = c.stride(0) if rows > 1 else runtime.tma_row_length(N, itemsize)
        c_desc = desc(c, [rows, N], stride_c, [wg_m, bn // config["EPI_SPLIT"]])
    sa, sb, scaling, promote = scales if scales is not None else (c, c, "none", False)
    if scaling == "tensor":
        sa, sb = sa.reshape(1, 1), sb.reshape(1, 1)
    sa, sb = (s if s.dim() == 2 else s.reshape(1, -1) for s in (sa, sb))  # (c, c): never read
    slots, counts = workspace if workspace is not None else (c, c)
    return dict(
        a_desc=a_desc, b_desc=b_desc, c_desc=c_desc, c_ptr=c, bias_ptr=bias if bias is not None else c,
        trace_ptr=trace if trace is not None else c, sa_ptr=sa, sb_ptr=sb, ws_ptr=slots, count_ptr=counts,
        M=M, N=N, K=K, stride_cm=c.stride(0),
        stride_sam=sa.stride(0), stride_sak=sa.stride(1), stride_sbk=sb.stride(0), stride_sbn=sb.stride(1),
        splits=splits, SCALING=scaling, PROMOTE=promote, **config, A_COL_MAJOR=a_col_major, B_COL_MAJOR=b_col_major, C_TMA=c_tma,
        HAS_BIAS=bias is not None, ACTIVATION=activation, TRACE=trace is not None, GROUP_SIZE_M=group_size_m,
        PRODUCER_REGS=PRODUCER_REGS, CONSUMER_REGS=CONSUMER_REGS, SPLIT=splits > 1,
    )


def _check_ws_inputs(a, b, activation, bias):
    """matmul_tma's contract (shapes, dtypes, devices, TMA layout), fp32 refused; returns bias."""
    bias, _ = _check_matmul_inputs(a, b, "grouped", GROUP_SIZE_M, activation, bias)
    if a.dtype not in _GL_DTYPES:
        raise TypeError(f"matmul_ws takes float16 or bfloat16 inputs, got {str(a.dtype).replace('torch.', '')}: "
                        "fp32 would need tf32 wgmma, which reads K-major operands only; use matmul_tma for fp32")
    if bias is not None and bias.dtype != a.dtype:
        bias = bias.to(a.dtype)
    if min(a.shape[0], a.shape[1], b.shape[1]) > 0:
        tma_layout(a, "a", "matmul_ws")
        tma_layout(b, "b", "matmul_ws")
    return bias


# ----------------------------------------------------------------------------- host side: plans
#
# A launch through ``kernel[grid](...)`` costs ~100 µs of Python on an H100's host (Triton binds
# and specialises 30 arguments, three of them descriptors whose layouts it prints to a string),
# more than the whole GPU time of a 1024 x 4096 x 4096 product.  Everything but the tensors'
# addresses is the same from one call to the next with the same shapes, so it is worked out
# once per *plan key* and kept: the checks' verdict, the config, the grid, the descriptors
# (re-pointed at the new tensors with ``descriptor_on``) and the compiled kernel
# (``SpecializedLaunch``).  Measured before/after: WS_NOTES.md, entry 6.

_PLANS: dict = {}
launches.register_store(_PLANS)
#: plans kept (one per shape, layout, dtype, epilogue, schedule); the oldest goes first
MAX_PLANS = 256
_A, _B, _C, _C_PTR, _BIAS, _TRACE, _SA, _SB, _WS, _COUNT = range(10)  # positions of the kernel's first parameters


def _plan_key(a, b, activation, bias, config_name, num_programs, traced, split_k=None):
    """``launches.call_key`` of the call: None when a tensor must be checked every call."""
    return launches.call_key((a, b, bias), (activation, config_name, num_programs, traced, split_k))


class _Plan:
    """One (shape, layout, dtype, epilogue, schedule): checked once, compiled once, then each call
    allocates C, re-points three descriptors (split units: fetches the stream's workspace) and
    calls the compiled kernel."""

    def __init__(self, a, b, c, bias, trace, config, activation, programs, *, bias_contiguous, scales=None, splits=1):
        workspace = _split_workspace(a.shape[0], b.shape[1], config, splits, a.device) if splits > 1 else None
        named = _kernel_args(a, b, c, bias, trace, config, activation=activation, scales=scales, splits=splits,
                             workspace=workspace)
        kernel = _matmul_ws_kernel_any_m if splits == 1 and scales is None else _matmul_ws_kernel
        self.launch = _triton_compat.SpecializedLaunch(kernel, (programs,), (), named,
                                                       {"num_warps": 4, "maxnreg": MAXNREG})
        self.arguments = _triton_compat.ordered_arguments(kernel, (), named)
        # descriptors expanded here, their CUtensorMaps kept per address (None: Triton's launcher does it)
        self.descriptors = _triton_compat.DescriptorArguments.make(self.launch, self.arguments)
        self.moved = _triton_compat.descriptor_mover()  # chosen once: no environment look-up per call
        for i in (_C_PTR, _BIAS, _TRACE, _SA, _SB, _WS, _COUNT):  # never keep the first call's tensors alive
            self.arguments[i] = None
        stand_in = torch.empty(8, device=a.device, dtype=a.dtype)  # 16 bytes, aligned: a template's base
        for i in (_A, _B, _C):
            if self.arguments[i] is not None:
                self.arguments[i] = self.moved(self.arguments[i], stand_in)
        (self.c_rows, self.c_cols), self.c_dtype = c.shape, c.dtype  # ints: torch.empty is slower given a Size
        self.bias_dtype = None if scales is not None else a.dtype  # fp8: the bias is read as it is
        self.bias_contiguous = bias_contiguous  # of the caller's bias (the checked one is made contiguous)
        self.c_tma = named["C_TMA"]
        self.splits = splits
        self.workspace = (a.shape[0], b.shape[1], config, splits, a.device) if splits > 1 else None
        self.tile = (_tile_m(config), config["BLOCK_N"], config["SCHEDULE"])  # what ran, for tests and notes
        # pointer parameters as addresses: the C launcher then asks the driver about none of them
        # (seven per call, most of them C: launches.KeptLaunch does the same)
        self.addresses = self.launch.takes_addresses

    def __call__(self, a, b, bias, trace, scale_a=None, scale_b=None):
        c = torch.empty(self.c_rows, self.c_cols, device=a.device, dtype=self.c_dtype)
        return self.run(c, a, b, bias, trace, scale_a, scale_b)

    def run(self, c, a, b, bias, trace, scale_a=None, scale_b=None):
        """The launch into ``c`` (of the plan's shape and dtype); returns ``c``."""
        if bias is not None:
            bias = bias if self.bias_dtype in (None, bias.dtype) else bias.to(self.bias_dtype)
            bias = bias if self.bias_contiguous else bias.contiguous()
        args = list(self.arguments)
        workspace = None if self.workspace is None else _split_workspace(*self.workspace)  # held until launched
        if self.addresses:
            c_address = c.data_ptr()
            args[_C_PTR] = args[_SA] = args[_SB] = args[_WS] = args[_COUNT] = args[_BIAS] = args[_TRACE] = c_address
            if bias is not None:
                args[_BIAS] = bias.data_ptr()
            if trace is not None:
                args[_TRACE] = trace.data_ptr()
            if scale_a is not None:
                args[_SA], args[_SB] = scale_a.data_ptr(), scale_b.data_ptr()
            if workspace is not None:
                args[_WS], args[_COUNT] = workspace[0].data_ptr(), workspace[1].data_ptr()
        else:
            args[_C_PTR], args[_BIAS], args[_TRACE] = c, c if bias is None else bias, c if trace is None else trace
            args[_SA], args[_SB] = (c, c) if scale_a is None else (scale_a, scale_b)
            args[_WS], args[_COUNT] = (c, c) if workspace is None else workspace
        if self.descriptors is not None:
            if self.descriptors.launch(args, [(a, b, c)[i] for i in self.descriptors.indices]):
                return c
        args[_A] = self.moved(args[_A], a)
        args[_B] = self.moved(args[_B], b)
        if self.c_tma:
            args[_C] = self.moved(args[_C], c)
        self.launch.launch(args)
        return c


def _split_workspace(M, N, config, splits, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Split-K units' fp32 slots, ``splits`` per warpgroup tile (WG_M x BLOCK_N, padding included,
    so no store is masked), and an int32 arrival count per 128 columns of a warpgroup tile (zero,
    and left zero by every launch).  Kept per stream (under a CUDA graph capture: fresh slots, counts from
    ``runtime``'s pool)."""
    wg_m, bn, tile_m = config["WG_M"], config["BLOCK_N"], _tile_m(config)
    part_tiles = cdiv(M, tile_m) * cdiv(N, bn) * (tile_m // wg_m)  # every consumer's rows, past M too
    index = device.index if device.index is not None else torch.cuda.current_device()
    # a count per 128 columns: fp8's promoted tiles add their 128-column pieces up one by one
    return runtime.stream_buffers(index, (("ws split-k pieces", splits * part_tiles * wg_m * bn, torch.float32, False),
                                          ("ws split-k counts", part_tiles * cdiv(bn, 128), torch.int32,
                                           runtime.ALWAYS_LEFT_ZERO)))


def _keep(key, plan):
    """``plan``, kept under ``key`` (None: not kept); the oldest plan goes when MAX_PLANS are kept."""
    if key is not None:
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.pop(next(iter(_PLANS)))
        _PLANS[key] = plan
        launches.heard(plan)
    return plan


def _launch(a, b, *, activation=None, bias=None, schedule=None, num_programs=None, trace=None, config=None,
            split_k=None):
    """Launch through the plan of these inputs' key, making it first when new (checks included).
    ``schedule``: a CONFIGS name; None: the tile ``tiles.ws_default_tile`` picks for the shape.
    ``split_k``: pieces per tile's K loop (None: ``tiles.ws_default_splits`` for the default tile,
    1 for a tile given by ``schedule`` or ``config``; never with a trace)."""
    if split_k is not None:  # before the plan's key: 4.0 or True must not find the plan of 4 or 1
        split_k = check_int(split_k, "split_k")
        if trace is not None and split_k > 1:
            raise ValueError("a traced launch records whole tiles: it cannot split K (split_k=1 or None)")
    try:
        key = None if config is not None else _plan_key(a, b, activation, bias, schedule, num_programs,
                                                         trace is not None, split_k)
        plan = _PLANS.get(key) if key is not None else None
    except TypeError:  # something unhashable (a bad activation): the checks below say what is wrong
        key = plan = None
    if plan is not None:
        launches.heard(plan)
        return plan(a, b, bias, trace)

    if config is None and schedule is not None and not (isinstance(schedule, str) and schedule in CONFIGS):
        raise ValueError(f"schedule must be one of {tuple(CONFIGS)} (or None: by the shape), got {schedule!r}")
    a, b, bias = resolve_lazy_views(a, b, bias)  # the kernel reads memory, not torch's lazy negation
    bias_in = bias
    bias = _check_ws_inputs(a, b, activation, bias)
    _require_hopper()
    M, K = a.shape
    N = b.shape[1]
    given_config = config is not None
    config = dict(config or CONFIGS[schedule or ws_default_tile(M, N, num_sms=runtime.num_sms())])
    if config["SCHEDULE"] not in SCHEDULES:
        raise ValueError(f"SCHEDULE must be one of {SCHEDULES}, got {config['SCHEDULE']!r}")
    if M == 0 or N == 0 or K == 0:  # no tile, or an empty sum: zero (then bias and activation), like torch
        acc = torch.zeros((M, N), device=a.device, dtype=torch.float32)
        if bias is not None:
            acc += bias.float()
        return activation_ref(acc, activation).to(a.dtype)
    num_tiles = cdiv(M, _tile_m(config)) * cdiv(N, config["BLOCK_N"])
    max_programs = runtime.num_sms() if num_programs is None else check_int(num_programs, "num_programs")
    k_tiles = cdiv(K, config["BLOCK_K"])
    if trace is not None or (split_k is None and (schedule is not None or given_config)):
        splits = 1  # a pinned tile runs as asked
    elif split_k is None:
        splits = ws_default_splits(M, N, K, ws_default_tile(M, N, num_sms=runtime.num_sms()),
                                   num_sms=runtime.num_sms(), block_k=config["BLOCK_K"])
    else:
        splits = whole_pieces(k_tiles, split_k)  # no piece wholly past K: it would only add zeros
    bias_contiguous = bias_in is None or bias_in.stride(0) == 1
    if splits > 1:
        config = _fit_stages(config, a.element_size(), 0)  # no C buffers: split units store C with pointers
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    plan = _keep(key, _Plan(a, b, c, bias, trace, config, activation, min(num_tiles * splits, max_programs),
                            bias_contiguous=bias_contiguous, splits=splits))
    return plan(a, b, bias, trace)


def matmul_ws(a, b, *, activation=None, bias=None, split_k=None):
    """``activation(a @ b + bias)`` with the warp-specialized Gluon kernel, in the tile
    ``tiles.ws_default_tile`` picks for the shape (128 x 256 cooperative, or 64-row ping-pong
    tiles where M leaves a 128-row tile mostly padding or the tiles would leave most of a wave idle).
    When even those tiles would fill at most half the SMs (and M and N are both at least 128),
    each tile's K loop is cut into pieces run as separate units, the last of a tile's pieces
    adding them (``_add_split_unit``); ``split_k`` sets the pieces per tile (1: never split; default
    ``tiles.ws_default_splits``).

    a: [M, K], b: [K, N], fp16 or bf16, each row- or column-major with 16-byte aligned base and
    other stride (``b = weight.t()`` of an ``nn.Linear`` is fine): the rules and errors of
    ``matmul_tma``.  ``activation``: None, "relu", "leaky_relu" (slope 0.01) or "gelu" (exact);
    ``bias``: shape [N].  Both are applied to the fp32 accumulator before the single store.
    Needs an sm_90 GPU (RuntimeError otherwise, no silent fallback).  The host work of a call
    is done once per shape, layout and dtype and kept (see ``_Plan``).
    """
    return _launch(a, b, activation=activation, bias=bias, split_k=split_k)


def fp8_tile(M, N, scaling) -> str:
    """The FP8_CONFIGS tile ``scaled_mm_ws`` runs an ``M x N`` product in: the waves rule's; block
    scales run 128 x 128 (128 x 256 spills registers and ran at half its speed, PERF_NOTES 34; it
    still spills, entry 35)."""
    return "128x128" if scaling == "block" else ws_default_tile(M, N, num_sms=runtime.num_sms(), tiles=FP8_WS_TILES)


def fp8_config(M, N, scaling, *, use_fast_accum, out_bytes, tile=None):
    """``scaled_mm_ws``'s config for an ``M x N`` fp8 product and whether it promotes (block scales
    always do): ``tile`` (an FP8_CONFIGS name) or ``fp8_tile``'s."""
    tile = tile or fp8_tile(M, N, scaling)
    return (_fit_stages(FP8_CONFIGS[tile], 1, out_bytes, block_scales=scaling == "block"),
            scaling == "block" or not use_fast_accum)


def tma_readable(a, b) -> bool:
    """Whether ``_kernel_args`` can describe both operands (``tma_layout``'s rules; overlapping
    rows, for one, are refused there): ``fp8.scaled_mm`` takes its other kernel otherwise."""
    try:
        tma_layout(a, "a")
        tma_layout(b, "b")
    except ValueError:
        return False
    return True


def scaled_mm_ws(a, b, scale_a, scale_b, scaling, *, out_dtype, bias, use_fast_accum, key=None, strided_bias=False,
                 tile=None, split_k=None):
    """``fp8.scaled_mm`` on Hopper, for inputs ``fp8.check_scaled_mm_inputs`` passed (a row-major,
    b column-major, both TMA-readable): the same warp-specialized kernel, with fp8 operands, the
    promotion every 128 (``_mainloop_promoted``; block scales always promote) and the scales.
    Keeps the plan under ``key`` (``fp8.scaled_mm``'s call key) for ``run_kept_scaled_mm``;
    ``strided_bias``: the caller's bias was strided (``bias`` is its contiguous copy); ``tile``: an
    FP8_CONFIGS name for every M (the batch-invariant mode: one K loop per tile), else the waves
    rule's pick for this M; ``split_k``: pieces per tile's K loop (None: ``tiles.fp8_ws_splits``
    for the rule's tile, 1 for a given one), added in piece order."""
    if tile is not None and tile not in FP8_CONFIGS:
        raise ValueError(f"tile must be one of {sorted(FP8_CONFIGS)}, got {tile!r}")
    if split_k is not None and check_int(split_k, "split_k") > FP8_MAX_SPLITS:  # a slot of M x N fp32 each
        raise ValueError(f"split_k must be at most {FP8_MAX_SPLITS}, got {split_k}")
    _require_hopper()
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=out_dtype)
    name = tile or fp8_tile(M, N, scaling)
    if split_k is not None:
        splits = whole_pieces(cdiv(K, FP8_CONFIGS[name]["BLOCK_K"]), int(split_k))
    else:
        splits = 1 if tile is not None else fp8_ws_splits(M, N, K, name, num_sms=runtime.num_sms())
    # split units store C with pointer stores: the ring gets C's staging buffers
    out_bytes = 0 if splits > 1 else c.element_size()
    config, promote = fp8_config(M, N, scaling, use_fast_accum=use_fast_accum, out_bytes=out_bytes, tile=name)
    num_units = cdiv(M, _tile_m(config)) * cdiv(N, config["BLOCK_N"]) * splits
    plan = _keep(None if key is None else ("scaled_mm", *key),
                 _Plan(a, b, c, bias, None, config, None, min(num_units, runtime.num_sms()),
                       bias_contiguous=not strided_bias, scales=(scale_a, scale_b, scaling, promote), splits=splits))
    return plan(a, b, bias, None, scale_a, scale_b)


def run_kept_scaled_mm(key, a, b, scale_a, scale_b, bias):
    """C from the plan ``scaled_mm_ws`` kept under ``key``, or None when there is none."""
    plan = _PLANS.get(("scaled_mm", *key))
    return None if plan is None else plan(a, b, bias, None, scale_a, scale_b)


# ----------------------------------------------------------------------------- schedule mirror and trace
def ws_schedule(M: int, N: int, *, schedule: str = DEFAULT_SCHEDULE, num_programs: int, group_size_m: int = GROUP_SIZE_M,
                config=None) -> np.ndarray:
    """numpy mirror of the kernel's schedule: int64 rows of the first six TRACE_FIELDS
    ``(tile, program, consumer, step, pid_m, pid_n)``, one per (tile, consumer that worked on it),
    sorted by tile (cooperative: two rows per tile, consumers 0 and 1)."""
    if config is None and schedule not in CONFIGS:
        raise ValueError(f"schedule must be one of {tuple(CONFIGS)}, got {schedule!r}")
    M, N = check_int(M, "M", 0), check_int(N, "N", 0)  # a model's arguments, checked as the launchers' are
    num_programs, group_size_m = check_int(num_programs, "num_programs"), check_int(group_size_m, "group_size_m")
    config = config or CONFIGS[schedule]
    num_pid_m, num_pid_n = cdiv(M, _tile_m(config)), cdiv(N, config["BLOCK_N"])
    num_tiles = num_pid_m * num_pid_n
    programs = min(num_programs, num_tiles)
    tile = np.arange(num_tiles)
    program, step = tile % programs, tile // programs
    pid_m, pid_n = tile_coords_np(tile, num_pid_m, num_pid_n, "grouped", group_size_m)
    if config["SCHEDULE"] == "pingpong":
        rows = [np.stack([tile, program, step % 2, step, pid_m, pid_n], axis=1)]
    else:
        rows = [np.stack([tile, program, np.full_like(tile, c), step, pid_m, pid_n], axis=1) for c in (0, 1)]
        rows = [np.stack(rows, axis=1).reshape(-1, 6)]
    return rows[0].astype(np.int64)


def trace_ws_tiles(M, N, K=64, *, schedule=DEFAULT_SCHEDULE, num_programs=None, dtype=torch.float16,
                   activation=None, bias=False):
    """Run the kernel with TRACE on: an int64 ``[rows, 9]`` tensor of TRACE_FIELDS, one row per
    (tile, consumer warpgroup), sorted by tile; ``start_ns``, ``mainloop_end_ns`` and ``end_ns``
    are ``%globaltimer`` readings (ns) when the warpgroup starts the tile's main loop, when its
    last wgmma has finished (the epilogue starts) and after its store was issued.  Poisoned with
    -1 first, so a row no warpgroup wrote shows.  Compare columns 0-5 with :func:`ws_schedule`.
    ``activation`` and ``bias`` (True: a random one) choose the epilogue."""
    config = CONFIGS[schedule]
    a = tma_aligned(torch.randn(M, K, device=runtime.DEVICE).to(dtype))  # any M, N, K: rows padded to 16 bytes
    b = tma_aligned(torch.randn(K, N, device=runtime.DEVICE).to(dtype))
    bias_t = torch.randn(N, device=runtime.DEVICE).to(dtype) if bias else None
    rows = cdiv(M, _tile_m(config)) * cdiv(N, config["BLOCK_N"]) * (2 if config["SCHEDULE"] == "cooperative" else 1)
    trace = torch.full((rows, len(TRACE_FIELDS)), -1, dtype=torch.int64, device=runtime.DEVICE)
    _launch(a, b, schedule=schedule, num_programs=num_programs, trace=trace, activation=activation, bias=bias_t)
    return trace.cpu()
