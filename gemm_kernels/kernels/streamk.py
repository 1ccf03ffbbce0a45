"""Stream-K: the persistent TMA kernel, with some tiles split along K between programs.

``matmul_tma`` gives each of its ``P`` programs whole tiles: when the tile count ``T`` is not a
multiple of ``P`` the last wave is partial, and with ``T`` much smaller than ``P`` most SMs idle.
Stream-K (Osama et al., PPoPP 2023, arXiv:2301.03598) hands out *K iterations* instead: the last
``sk_tiles`` tiles' ``sk_tiles * k_tiles`` iterations are split evenly over all ``P`` programs,
after the other tiles ran data-parallel (``tiles.streamk_segments`` is the numpy mirror, which the
kernel's trace matches).  ``schedule="tail"`` splits few-tile, long-K problems by default
(``tiles.streamk_default_tiles``) or ``sk_tiles`` tiles; ``schedule="hybrid"`` is the course's
variant of the paper's two-tile Stream-K + data-parallel: the partial wave and one full wave are
split, so each share is one to two tiles and a tile has at most two pieces
(``tiles.streamk_hybrid_tiles``).  The paper and CUTLASS run the Stream-K blocks first, then the
data-parallel tiles; here each program runs its data-parallel tiles first and its share last.

A split tile's pieces are added one of three ways (``reduction``, ``tiles.STREAMK_REDUCTIONS``;
workspace in ``tiles.streamk_workspace_bytes``).  ``deterministic``: the program holding the
tile's first iteration finishes it; the others write fp32 partial sums to a workspace and raise a
flag; it waits for the flags and adds them in a fixed order.  ``atomic``: every piece adds into a
zeroed fp32 C (no waits, no workspace; no activation, as no program knows when the sum is whole).
``separate``: every piece stores its sum; a second kernel adds them in the fixed order.

Waiting on another program is only safe if it is running: CUDA promises neither that programs
start in pid order nor that all fit on the GPU at once.  So deterministic shares are handed out by
an atomic ticket, not by pid: a program waits only for lower tickets, taken by programs already
running.  Every launch leaves its flags and ticket counter at zero, so back-to-back launches,
autotuner replays and CUDA-graph replays need no reset; the buffer is kept per stream.  Every wait
is bounded (``SPIN_LIMIT`` polls): past it the kernel reports the wait through a pinned host record
and moves on, and the next call raises a ``RuntimeError``.
Layers: ``_matmul_streamk_kernel`` (+ ``_streamk_reduce_kernel``), ``matmul_streamk``, ``configs.streamk_configs``.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from .. import runtime
from ..models import tiles
from ..models.tiles import cdiv
from . import checks, configs, launches, tma
from .host_record import HostRecord, publish
from .epilogue import bias_and_activation, load_bias, store_tile_masked
from .matmul import POINTER_SOURCES, matmul
from .persistent import _tma_args
from .tiles import MIN_K_TILES_FOR_SPLIT, record_tile, streamk_range, tile_coords

# ----------------------------------------------------------------------------- device helpers
@triton.jit
def _partial_offsets(slot, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Element offsets of workspace slot ``slot``: one fp32 BLOCK_M x BLOCK_N tile per program."""
    return slot * (BLOCK_M * BLOCK_N) + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]


@triton.jit
def _publish_partial(acc, partial_ptr, flag_ptr, share, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Leave this share's partial sum in its workspace slot, then raise its flag."""
    tl.store(partial_ptr + _partial_offsets(share, BLOCK_M, BLOCK_N), acc)
    tl.debug_barrier()  # every thread's stores are issued before the flag goes up...
    tl.atomic_xchg(flag_ptr + share, 1, sem="release", scope="gpu")  # ...and visible to whoever sees it


#: what a Stream-K error record's field 1 says (``host_record``): a wait ran out of polls, or a
#: ticket came out past the last share (the flag buffer was not zero when the launch began)
WAIT_TIMED_OUT, TICKET_OUT_OF_RANGE = tl.constexpr(1), tl.constexpr(2)

#: ``sk_tiles_requested`` below zero: the kernel picks the split itself, by the tail rule
#: (``tiles.streamk_default_tiles``) or the hybrid one (``tiles.streamk_hybrid_tiles``)
DEFAULT_SPLIT, HYBRID_SPLIT = tl.constexpr(-1), tl.constexpr(-2)
#: the kernel's REDUCTION, the index of ``tiles.STREAMK_REDUCTIONS``' names
DETERMINISTIC, ATOMIC, SEPARATE = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)


@triton.jit
def _wait_for_flag(flag_ptr, other, share, spin_limit, error_ptr, NUM_PROGRAMS: tl.constexpr,
                   SYSTEM_FENCE: tl.constexpr):
    """Wait (at most ``spin_limit`` polls) for share ``other``'s flag and lower it in the same
    atomic.  True when it came; otherwise the wait is reported to the host record."""
    polls = 0
    seen = tl.atomic_cas(flag_ptr + other, 1, 0, sem="acquire", scope="gpu")
    while (seen != 1) & (polls < spin_limit):
        polls += 1
        seen = tl.atomic_cas(flag_ptr + other, 1, 0, sem="acquire", scope="gpu")
    if seen != 1:
        publish(error_ptr, WAIT_TIMED_OUT, share, other, polls, NUM_PROGRAMS, SYSTEM_FENCE)
    return seen == 1


@triton.jit
def _add_partials(acc, partial_ptr, flag_ptr, share, done, tile_end, total_iters, spin_limit, error_ptr,
                  NUM_PROGRAMS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  SYSTEM_FENCE: tl.constexpr):
    """Add the partial sums of the shares that ran K iterations ``[done, tile_end)`` of this
    tile: shares ``share - 1, share - 2, ...`` (``streamk_range`` hands them out in that order),
    held by programs that took their tickets before this one, so are running or done."""
    other = share - 1
    while done < tile_end:
        first, end = streamk_range(other, total_iters, NUM_PROGRAMS)
        if end > first:  # a program with an empty share published nothing
            if _wait_for_flag(flag_ptr, other, share, spin_limit, error_ptr, NUM_PROGRAMS, SYSTEM_FENCE):
                # .cg: read from L2, where the other SM's stores went, never from this SM's L1
                acc += tl.load(partial_ptr + _partial_offsets(other, BLOCK_M, BLOCK_N), cache_modifier=".cg")
        done = end
        other -= 1
    return acc


@triton.jit
def _take_ticket(flag_ptr, error_ptr, NUM_PROGRAMS: tl.constexpr, SYSTEM_FENCE: tl.constexpr):
    """This program's share: the next ticket.  The last ticket resets the counter (every program
    has taken one by then), so the launch leaves it at zero for the next.  A ticket past the
    last share means the buffer was not zero: reported, and the program takes no share."""
    share = tl.atomic_add(flag_ptr + NUM_PROGRAMS, 1, sem="relaxed", scope="gpu")
    if share == NUM_PROGRAMS - 1:
        tl.atomic_xchg(flag_ptr + NUM_PROGRAMS, 0, sem="relaxed", scope="gpu")
    if share >= NUM_PROGRAMS:
        publish(error_ptr, TICKET_OUT_OF_RANGE, share, -1, 0, NUM_PROGRAMS, SYSTEM_FENCE)
    return share


@triton.jit
def _add_into_c(acc, c_ptr, off_m, off_n, M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """ATOMIC: add this piece's fp32 sum into the zeroed fp32 C.  No program knows when the last
    piece has landed, so nothing may run after the sum: no activation (gelu of each piece is not
    gelu of the sum), no rounding to fp16; and the order of the additions is the GPU's."""
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.atomic_add(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc, mask=mask, sem="relaxed")


@triton.jit
def _streamk_reduce_kernel(partial_ptr, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, k_tiles, dp_tiles, sk_tiles,
                           HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, GROUPED: tl.constexpr,
                           GROUP_SIZE_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr):
    """SEPARATE's second kernel, one program per split tile: add the pieces' partial sums in
    iteration order (the owner's first, as DETERMINISTIC does), then the epilogue and the store.
    Share ``s`` left the end of a tile in slot ``2 s`` and the start of one in slot ``2 s + 1``."""
    t = tl.program_id(0)
    total_iters = sk_tiles * k_tiles
    tile_first = t * k_tiles
    tile_end = tile_first + k_tiles
    # the share holding the tile's first iteration: the highest j with j * total // P <= tile_first
    j = (((tile_first + 1).to(tl.int64) * NUM_PROGRAMS - 1) // total_iters).to(tl.int32)
    first, end = streamk_range(NUM_PROGRAMS - 1 - j, total_iters, NUM_PROGRAMS)
    if (first > tile_first) | (end < tile_end):  # split: a whole tile was stored by its program
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        while first < tile_end:
            if end > first:  # an empty share left nothing
                slot = 2 * (NUM_PROGRAMS - 1 - j) + (first <= tile_first).to(tl.int32)
                acc += tl.load(partial_ptr + _partial_offsets(slot, BLOCK_M, BLOCK_N))
            j += 1
            first, end = streamk_range(NUM_PROGRAMS - 1 - j, total_iters, NUM_PROGRAMS)
        pid_m, pid_n = tile_coords(dp_tiles + t, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUPED, GROUP_SIZE_M)
        bias = load_bias(bias_ptr, pid_n * BLOCK_N, N, BLOCK_N, HAS_BIAS)
        acc = bias_and_activation(acc, bias, HAS_BIAS, ACTIVATION)
        store_tile_masked(acc, c_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)


# ----------------------------------------------------------------------------- kernel
@triton.jit(do_not_specialize=configs.ROWS)  # M only bounds TMA's tiles
def _matmul_streamk_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, trace_ptr, partial_ptr,
    flag_ptr,  # int32 [NUM_PROGRAMS + 1], zero, left zero: a flag per share, then the ticket counter
    error_ptr,  # host_record's int32 [8] record
    M, N, K,
    stride_a, stride_b, stride_c, stride_cn,
    sk_tiles_requested,  # DEFAULT_SPLIT, HYBRID_SPLIT or a count
    spin_limit,  # most polls of one wait
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUPED: tl.constexpr, GROUP_SIZE_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    A_COL_MAJOR: tl.constexpr, B_COL_MAJOR: tl.constexpr, C_TMA: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, WIDEN: tl.constexpr, TRACE: tl.constexpr,
    FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
    SYSTEM_FENCE: tl.constexpr = True,  # False in the interpreter (the record is a CPU tensor)
    REDUCTION: tl.constexpr = 0,  # DETERMINISTIC, ATOMIC (C is fp32 and zeroed) or SEPARATE
):
    a_desc, b_desc = tma.input_descriptors(a_ptr, b_ptr, M, N, K, stride_a, stride_b,
                                           A_COL_MAJOR, B_COL_MAJOR, BLOCK_M, BLOCK_N, BLOCK_K)
    c_out = tma.output_target(c_ptr, M, N, stride_c, C_TMA, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)

    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    # default (tiles.streamk_default_tiles): split every tile when they would busy at most half
    # the programs and their K loops are long
    sk_tiles = tl.where((2 * num_tiles <= NUM_PROGRAMS) & (k_tiles >= MIN_K_TILES_FOR_SPLIT), num_tiles, 0)
    # hybrid (tiles.streamk_hybrid_tiles): the partial wave and one full wave, or every tile of under one wave
    tail = num_tiles % NUM_PROGRAMS
    hybrid = tl.where(num_tiles < NUM_PROGRAMS, num_tiles, tl.where(tail == 0, 0, tail + NUM_PROGRAMS))
    sk_tiles = tl.where(sk_tiles_requested == HYBRID_SPLIT, hybrid, sk_tiles)
    sk_tiles = tl.where(sk_tiles_requested < 0, sk_tiles, sk_tiles_requested)
    dp_tiles = num_tiles - sk_tiles
    rows_per_share = tl.where(sk_tiles > NUM_PROGRAMS, 3, 2)  # trace rows: tiles.streamk_rows_per_program

    # 1. Data-parallel: the full waves, exactly matmul_tma's loop.
    for tile in tl.range(pid, dp_tiles, NUM_PROGRAMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUPED, GROUP_SIZE_M)
        if TRACE:
            record_tile(trace_ptr, tile, pid, tile, 0, k_tiles)
        tma.whole_tile(a_desc, b_desc, c_out, bias_ptr, pid_m, pid_n, M, N, k_tiles, stride_c, stride_cn,
                       A_COL_MAJOR, B_COL_MAJOR, C_TMA, HAS_BIAS, ACTIVATION, WIDEN, EPILOGUE_SUBTILE,
                       BLOCK_M, BLOCK_N, BLOCK_K)

    # 2. Stream-K: a share of the last sk_tiles tiles' K iterations (at most two segments: the end
    #    of one tile, then the start of the next).  The share is the next ticket, not the pid:
    #    lower tickets, the only ones a share waits for, were taken by programs already running.
    if REDUCTION == DETERMINISTIC:
        share = _take_ticket(flag_ptr, error_ptr, NUM_PROGRAMS, SYSTEM_FENCE)
    else:  # no program waits for another: any order is safe
        share = pid
    total_iters = sk_tiles * k_tiles
    it, it_end = streamk_range(share, total_iters, NUM_PROGRAMS)
    if share >= NUM_PROGRAMS:
        it_end = it
    segment = 0
    while it < it_end:
        t = it // k_tiles
        k_first = it - t * k_tiles
        k_end = tl.minimum(k_tiles, k_first + (it_end - it))
        tile = dp_tiles + t
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUPED, GROUP_SIZE_M)
        if TRACE:
            record_tile(trace_ptr, dp_tiles + rows_per_share * share + segment, share, tile, k_first, k_end)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tma.k_loop(a_desc, b_desc, off_m, off_n, k_first, k_end, A_COL_MAJOR, B_COL_MAJOR, WIDEN,
                         BLOCK_M, BLOCK_N, BLOCK_K)
        if REDUCTION == DETERMINISTIC:
            if k_first > 0:  # the tile's first iterations belong to a higher share, which finishes it
                _publish_partial(acc, partial_ptr, flag_ptr, share, BLOCK_M, BLOCK_N)
            else:  # this program finishes the tile
                acc = _add_partials(acc, partial_ptr, flag_ptr, share, t * k_tiles + k_end, (t + 1) * k_tiles,
                                    total_iters, spin_limit, error_ptr, NUM_PROGRAMS, BLOCK_M, BLOCK_N, SYSTEM_FENCE)
                bias = load_bias(bias_ptr, off_n, N, BLOCK_N, HAS_BIAS)
                tma.finish_tile(acc, bias, c_out, off_m, off_n, M, N, stride_c, stride_cn, HAS_BIAS, ACTIVATION,
                                C_TMA, EPILOGUE_SUBTILE, BLOCK_M, BLOCK_N)
        elif (k_first == 0) & (k_end == k_tiles):  # a whole tile: nothing to hand over
            bias = load_bias(bias_ptr, off_n, N, BLOCK_N, HAS_BIAS)
            tma.finish_tile(acc, bias, c_out, off_m, off_n, M, N, stride_c, stride_cn, HAS_BIAS, ACTIVATION, C_TMA,
                            EPILOGUE_SUBTILE, BLOCK_M, BLOCK_N)
        elif REDUCTION == ATOMIC:  # the piece holding the tile's first iterations adds the bias, once
            if k_first == 0:
                acc += load_bias(bias_ptr, off_n, N, BLOCK_N, HAS_BIAS)[None, :]
            _add_into_c(acc, c_ptr, off_m, off_n, M, N, stride_c, stride_cn, BLOCK_M, BLOCK_N)
        else:  # SEPARATE: _streamk_reduce_kernel adds the pieces
            tl.store(partial_ptr + _partial_offsets(2 * share + (k_first == 0).to(tl.int32), BLOCK_M, BLOCK_N), acc)
        it += k_end - k_first
        segment += 1


_streamk_tuned = configs.TunedKernel(_matmul_streamk_kernel, configs.streamk_configs(),
                                    key=[*configs.SINGLE_GEMM_KEY, "A_COL_MAJOR", "B_COL_MAJOR", "REDUCTION",
                                         "sk_tiles_requested"])


# ----------------------------------------------------------------------------- launcher
#: most programs a launch may ask for, per SM (the default is one per SM).  More than fit on the
#: GPU at once is safe: the ticket order (module docstring) never waits for a program not yet started.
MAX_PROGRAMS_PER_SM = 16

#: fp32 elements of one workspace slot when autotuning: the largest tile of any candidate config
_MAX_TILE_ELEMENTS = max(c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] for c in configs.streamk_configs())


def _tile_elements(config) -> int:
    return _MAX_TILE_ELEMENTS if config is None else config.kwargs["BLOCK_M"] * config.kwargs["BLOCK_N"]


_KEPT = launches.LaunchCache()


def _launch_streamk(a, b, *, activation, bias, order, group_size_m, num_programs, config, sk_tiles, trace=None,
                    schedule="tail", reduction="deterministic"):
    key = None
    if trace is None and launches.keeping() and reduction == "deterministic":
        key = launches.call_key((a, b, bias), (order, group_size_m, activation, num_programs,
                                               launches.config_key(config), sk_tiles, schedule))
        kept = _KEPT.get(key)
        if kept is not None:  # checked before with these shapes, strides, dtypes and options
            raise_pending_streamk_error()
            return kept(a=a, b=b, bias=bias)
    a, b, bias = checks.resolve_lazy_views(a, b, bias)
    bias, group_size_m = checks.check_matmul_inputs(a, b, order, group_size_m, activation, bias)
    num_programs = checks.check_num_programs(num_programs)
    if num_programs > MAX_PROGRAMS_PER_SM * runtime.num_sms():
        raise ValueError(f"num_programs={num_programs} is more than {MAX_PROGRAMS_PER_SM} per SM "
                         f"({MAX_PROGRAMS_PER_SM} x {runtime.num_sms()} SMs): every Stream-K program is launched "
                         "and keeps a tile-sized fp32 workspace, so the extra ones would only wait and take memory")
    _check_schedule_and_reduction(schedule, reduction, sk_tiles, activation)
    raise_pending_streamk_error()
    config_kwargs = None if config is None else configs.explicit_config_kwargs(config, "tma")
    runtime.require_tma("matmul_streamk", "Use matmul_persistent (pointer loads) instead.")
    M, K = a.shape
    N = b.shape[1]
    if sk_tiles is not None:
        sk_tiles = checks.check_int(sk_tiles, "sk_tiles", minimum=0)
        if config is None:
            raise ValueError("sk_tiles needs an explicit config: the tile count it is checked against depends on "
                             "BLOCK_M and BLOCK_N (pass config=triton.Config(...), or sk_tiles=None)")
        num_tiles = cdiv(M, config.kwargs["BLOCK_M"]) * cdiv(N, config.kwargs["BLOCK_N"])
        if sk_tiles > min(num_tiles, num_programs):
            raise ValueError(f"sk_tiles={sk_tiles} is more than min(tiles, num_programs) = min({num_tiles}, "
                             f"{num_programs}): each program's share must stay under one tile of K iterations")
    if M == 0 or N == 0 or K == 0:
        out = matmul(a, b, activation=activation, bias=bias)
        return out.float() if reduction == "atomic" else out
    c = torch.empty((M, N), device=a.device, dtype=torch.float32 if reduction == "atomic" else a.dtype)
    args = _tma_args(a, b, c, bias, trace, order=order, group_size_m=group_size_m, num_programs=num_programs,
                     activation=activation, launcher="matmul_streamk")
    tile_elements, device = _tile_elements(config), a.device
    partials, flags = _workspace(num_programs, tile_elements, device, reduction)
    # a mode without a buffer passes another tensor in its place: its kernel never touches it
    partials = c if partials is None else partials
    flags = partials if flags is None else flags
    requested = sk_tiles if sk_tiles is not None else (HYBRID_SPLIT.value if schedule == "hybrid" else DEFAULT_SPLIT.value)
    if reduction == "atomic":  # fp32 C by pointer stores: a TMA store would stage a whole fp32 tile in shared
        args["C_TMA"] = False  # memory (128 KiB at 128 x 256), past the limit beside three pipeline stages
    args.update(partial_ptr=partials, flag_ptr=flags, error_ptr=_errors.tensor, spin_limit=SPIN_LIMIT,
                sk_tiles_requested=requested, SYSTEM_FENCE=runtime.on_gpu(),
                REDUCTION=tiles.STREAMK_REDUCTIONS.index(reduction))
    runtime.ensure_tma_allocator()
    grid = (num_programs,)  # every program takes part in the split, even with fewer tiles than programs
    if reduction != "deterministic":  # no kept launch: C is zeroed (atomic) or a second kernel runs (separate)
        _launch_without_waits(args, grid, config_kwargs, reduction, schedule, sk_tiles, K)
        raise_pending_streamk_error()
        return c

    def workspace():  # per call: the buffers are kept per stream
        partials, flags = _workspace(num_programs, tile_elements, device)
        return {"partial_ptr": partials, "flag_ptr": flags}

    launches.launch_and_keep(_KEPT, key, _streamk_tuned, grid, args, c, POINTER_SOURCES,
                             config_kwargs=config_kwargs, uses_tma=True, workspace=workspace)
    raise_pending_streamk_error()  # a tuning run has synchronised: report its waits now
    return c


def _check_schedule_and_reduction(schedule, reduction, sk_tiles, activation) -> None:
    if schedule not in tiles.STREAMK_SCHEDULES:
        raise ValueError(f"schedule must be one of {tiles.STREAMK_SCHEDULES}, got {schedule!r}")
    if reduction not in tiles.STREAMK_REDUCTIONS:
        raise ValueError(f"reduction must be one of {tiles.STREAMK_REDUCTIONS}, got {reduction!r}")
    if schedule == "hybrid" and sk_tiles is not None:
        raise ValueError("sk_tiles is for schedule='tail'; schedule='hybrid' splits the partial wave and one full "
                         "wave (tiles.streamk_hybrid_tiles)")
    if reduction == "atomic" and activation is not None:
        raise ValueError(f"reduction='atomic' cannot apply activation={activation!r}: each piece of a split tile "
                         "adds its partial sum into C on its own and none knows when the sum is complete, so only a "
                         "linear epilogue (a bias, added once) fits; use reduction='deterministic' or 'separate'")


def _launch_without_waits(args, grid, config_kwargs, reduction, schedule, sk_tiles, K) -> None:
    """ATOMIC and SEPARATE: the config first (tuning, if it must, launches through the autotuner:
    its runs leave C and the workspace dirty, so C is zeroed after), then the launch that counts,
    then SEPARATE's reduction kernel over the split tiles."""
    if config_kwargs is None:
        chosen = _streamk_tuned.config_for(grid, **args)
        if chosen is None:
            raise RuntimeError(f"matmul_streamk(reduction={reduction!r}) could not read the autotuner's choice of "
                               "config, which the zeroing and the reduction kernel need; pass config=")
        config_kwargs = {**chosen.kwargs, "num_warps": chosen.num_warps, "num_stages": chosen.num_stages}
    c, M, N = args["c_ptr"], args["M"], args["N"]
    bm, bn, bk = config_kwargs["BLOCK_M"], config_kwargs["BLOCK_N"], config_kwargs["BLOCK_K"]
    num_pid_m, num_pid_n = cdiv(M, bm), cdiv(N, bn)
    num_tiles, k_tiles, programs = num_pid_m * num_pid_n, cdiv(K, bk), args["NUM_PROGRAMS"]
    split = (tiles.streamk_hybrid_tiles(num_tiles, programs) if schedule == "hybrid" else
             tiles.streamk_default_tiles(num_tiles, programs, k_tiles) if sk_tiles is None else sk_tiles)
    dp_tiles = num_tiles - split
    if reduction == "atomic" and split:  # the rows of tiles holding split tiles (they come last in either order)
        first_row = int(tiles.tile_coords_np(np.arange(dp_tiles, num_tiles), num_pid_m, num_pid_n,
                                             "grouped" if args["GROUPED"] else "row_major",
                                             args["GROUP_SIZE_M"])[0].min())
        c[first_row * bm:].zero_()
    _streamk_tuned.fn[grid](**args, **config_kwargs)
    if reduction == "separate" and split:
        _streamk_reduce_kernel[(split,)](
            args["partial_ptr"], c, args["bias_ptr"], M, N, c.stride(0), c.stride(1), k_tiles, dp_tiles, split,
            HAS_BIAS=args["HAS_BIAS"], ACTIVATION=args["ACTIVATION"], GROUPED=args["GROUPED"],
            GROUP_SIZE_M=args["GROUP_SIZE_M"], NUM_PROGRAMS=programs, BLOCK_M=bm, BLOCK_N=bn,
            num_warps=config_kwargs["num_warps"])


def _workspace(num_programs: int, tile_elements: int, device: torch.device, reduction: str = "deterministic"):
    """The fp32 partial-sum slots and the int32 flags + ticket (zero, and left zero by every
    launch): kept per stream on a GPU, fresh in the interpreter.  ``separate`` has two slots per
    program and no flags, ``atomic`` neither (None for a buffer a mode does without;
    ``tiles.streamk_workspace_bytes`` counts them)."""
    if reduction == "atomic":
        return None, None
    slots = 2 * num_programs if reduction == "separate" else num_programs
    wanted = [(f"streamk partials {reduction}", slots * tile_elements, torch.float32, False)]
    if reduction == "deterministic":
        wanted.append(("streamk flags deterministic", num_programs + 1, torch.int32, True))
    if runtime.interpreted():
        buffers = [(torch.zeros if zeroed else torch.empty)(numel, dtype=dtype, device=device)
                   for _, numel, dtype, zeroed in wanted]
    else:
        index = device.index if device.index is not None else torch.cuda.current_device()
        buffers = list(runtime.stream_buffers(index, wanted))
    return buffers[0], (buffers[1] if len(buffers) > 1 else None)


#: most polls of one wait for another program's partial sum.  A legitimate wait is for one
#: share of K iterations (well under a millisecond); a poll is an L2 atomic (about a microsecond),
#: so a wait that runs out has waited seconds and is reported, never hung.
SPIN_LIMIT = 1 << 22

_errors = HostRecord()


def raise_pending_streamk_error() -> None:
    """Raise the RuntimeError for a Stream-K wait that ran out of polls in a launch that has
    finished (and clear it); nothing if none did.  ``matmul_streamk`` calls it before and after
    every launch; call it after a ``torch.cuda.synchronize()`` to check every launch so far."""
    fields = _errors.take()
    if fields is None:
        return
    what, share, other, polls, programs = fields[:5]
    runtime.reset_stream_buffers("streamk flags deterministic")  # a wait that gave up may have left a flag raised
    if what == WAIT_TIMED_OUT.value:
        detail = (f"the program holding share {share} waited {polls} polls for the partial sum of share {other}, "
                  "which never came")
    else:
        detail = (f"a program drew ticket {share} of {programs}: the flag buffer was not zero when the launch "
                  "began (a launch that failed earlier left it so)")
    raise RuntimeError(f"matmul_streamk: a launch of _matmul_streamk_kernel ({programs} programs) stopped "
                       f"early: {detail}. Its output is wrong; the flags are reset, so the next call starts clean. If "
                       "this repeats, report it with the shapes and config")


def matmul_streamk(a, b, *, activation=None, bias=None, order="grouped", group_size_m=8, num_programs=None,
                   config=None, sk_tiles=None, schedule="tail", reduction="deterministic"):
    """``activation(a @ b + bias)`` by the Stream-K kernel: ``matmul_tma``'s schedule for the
    first tiles, then the K iterations of the last ``sk_tiles`` tiles split evenly over all programs.

    Same contract and TMA layout rules as :func:`gemm_kernels.matmul_tma` (sm_90+ on
    a GPU; runs in the interpreter).  ``sk_tiles`` (with an explicit ``config``, which fixes the
    tile count) goes from 0 (``matmul_tma``'s schedule) to ``min(tiles, num_programs)``, e.g.
    ``tiles % num_programs`` to split just the partial last wave.  The default splits every tile
    when there are at most half as many tiles as programs and K has at least
    ``tiles.STREAMK_MIN_K_TILES`` blocks, else none (``tiles.streamk_default_tiles``).

    ``schedule="hybrid"``: the paper's data-parallel + two-tile Stream-K, the partial wave and one
    full wave split, so every share is one to two tiles long and a tile has at most two pieces
    (``tiles.streamk_hybrid_tiles``, ``tiles.streamk_schedule``).  ``reduction`` says how a split
    tile's pieces are added (``tiles.STREAMK_REDUCTIONS``, workspace in
    ``tiles.streamk_workspace_bytes``): ``"deterministic"`` (the default), ``"atomic"`` (returns
    fp32 C; no activation) or ``"separate"`` (a second kernel).
    """
    return _launch_streamk(a, b, activation=activation, bias=bias, order=order, group_size_m=group_size_m,
                           num_programs=num_programs, config=config, sk_tiles=sk_tiles, schedule=schedule,
                           reduction=reduction)
