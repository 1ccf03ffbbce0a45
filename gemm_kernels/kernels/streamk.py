"""Stream-K: the persistent TMA kernel, with some tiles split along K between programs.

``matmul_tma`` gives each of its ``P`` programs whole tiles.  When the tile count ``T`` is not a
multiple of ``P`` the last wave is partial, and when ``T`` is much smaller than ``P`` (a small
C with a long K: 1024 x 1024 x 8192 is 32 tiles of 128 x 256 for 132 SMs) most SMs never get
any work.

Stream-K (Osama et al., PPoPP 2023, arXiv:2301.03598) hands out *K iterations* instead of tiles: the last ``sk_tiles`` tiles' ``sk_tiles * k_tiles`` iterations are split
evenly over all ``P`` programs, after the other tiles ran data-parallel
(``tiles.streamk_segments`` is the numpy mirror; ``trace_streamk_segments`` proves the kernel
follows it).  A tile cut between programs is finished by the program holding its first K
iteration: the others write their fp32 partial sums to a workspace and raise a flag; it waits
for the flags, adds the partials and runs the epilogue.

It pays with few tiles and a long K, and loses with a short K or a multi-wave problem's last
wave (each partial sum is a tile-sized round trip through L2): so by default only few-tile,
long-K problems are split (``tiles.streamk_default_tiles`` gives the rule and its measurements);
``sk_tiles`` sets any other split.

Waiting on another program is only safe if that program is running: CUDA promises neither that
programs start in pid order nor that all of them fit on the GPU at once.  So Stream-K shares are
handed out by an atomic ticket, not by pid: a program waits only for lower tickets, taken by
programs already running.  Every launch leaves its flags and ticket counter at zero (the
consumer lowers each flag it reads, the last ticket resets the counter), so back-to-back
launches, autotuner replays and CUDA-graph replays need no reset in between; the buffer is kept
per stream.  Every wait has a bound (``SPIN_LIMIT`` polls): past it the kernel reports the wait
through a pinned host record and moves on, and the next call raises a ``RuntimeError``.
Three layers: ``_matmul_streamk_kernel``, the launcher ``matmul_streamk``, ``configs.streamk_configs``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import runtime
from ..models.tiles import cdiv
from . import checks, configs, launches, tma
from .host_record import HostRecord, publish
from .epilogue import load_bias
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


# ----------------------------------------------------------------------------- kernel
@triton.jit(do_not_specialize=configs.ROWS)  # M only bounds TMA's tiles
def _matmul_streamk_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, trace_ptr, partial_ptr,
    flag_ptr,  # int32 [NUM_PROGRAMS + 1], zero, left zero: a flag per share, then the ticket counter
    error_ptr,  # host_record's int32 [8] record
    M, N, K,
    stride_a, stride_b, stride_c, stride_cn,
    sk_tiles_requested,  # < 0: tiles.streamk_default_tiles
    spin_limit,  # most polls of one wait
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUPED: tl.constexpr, GROUP_SIZE_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    A_COL_MAJOR: tl.constexpr, B_COL_MAJOR: tl.constexpr, C_TMA: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, WIDEN: tl.constexpr, TRACE: tl.constexpr,
    FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
    SYSTEM_FENCE: tl.constexpr = True,  # False in the interpreter (the record is a CPU tensor)
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
    sk_tiles = tl.where(sk_tiles_requested < 0, sk_tiles, sk_tiles_requested)
    dp_tiles = num_tiles - sk_tiles

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
    share = _take_ticket(flag_ptr, error_ptr, NUM_PROGRAMS, SYSTEM_FENCE)
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
            record_tile(trace_ptr, dp_tiles + 2 * share + segment, share, tile, k_first, k_end)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tma.k_loop(a_desc, b_desc, off_m, off_n, k_first, k_end, A_COL_MAJOR, B_COL_MAJOR, WIDEN,
                         BLOCK_M, BLOCK_N, BLOCK_K)
        if k_first > 0:  # the tile's first iterations belong to a higher share, which finishes it
            _publish_partial(acc, partial_ptr, flag_ptr, share, BLOCK_M, BLOCK_N)
        else:  # this program finishes the tile
            acc = _add_partials(acc, partial_ptr, flag_ptr, share, t * k_tiles + k_end, (t + 1) * k_tiles,
                                total_iters, spin_limit, error_ptr, NUM_PROGRAMS, BLOCK_M, BLOCK_N, SYSTEM_FENCE)
            bias = load_bias(bias_ptr, off_n, N, BLOCK_N, HAS_BIAS)
            tma.finish_tile(acc, bias, c_out, off_m, off_n, M, N, stride_c, stride_cn, HAS_BIAS, ACTIVATION, C_TMA,
                            EPILOGUE_SUBTILE, BLOCK_M, BLOCK_N)
        it += k_end - k_first
        segment += 1


_streamk_tuned = configs.TunedKernel(_matmul_streamk_kernel, configs.streamk_configs(),
                                    key=[*configs.SINGLE_GEMM_KEY, "A_COL_MAJOR", "B_COL_MAJOR"])


# ----------------------------------------------------------------------------- launcher
#: most programs a launch may ask for, per SM (the default is one per SM).  More than fit on the
#: GPU at once is safe: the ticket order (module docstring) never waits for a program not yet started.
MAX_PROGRAMS_PER_SM = 16

#: fp32 elements of one workspace slot when autotuning: the largest tile of any candidate config
_MAX_TILE_ELEMENTS = max(c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] for c in configs.streamk_configs())


def _tile_elements(config) -> int:
    return _MAX_TILE_ELEMENTS if config is None else config.kwargs["BLOCK_M"] * config.kwargs["BLOCK_N"]


_KEPT = launches.LaunchCache()


def _launch_streamk(a, b, *, activation, bias, order, group_size_m, num_programs, config, sk_tiles, trace=None):
    key = None
    if trace is None and launches.keeping():
        key = launches.call_key((a, b, bias), (order, group_size_m, activation, num_programs,
                                               launches.config_key(config), sk_tiles))
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
        return matmul(a, b, activation=activation, bias=bias)
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    args = _tma_args(a, b, c, bias, trace, order=order, group_size_m=group_size_m, num_programs=num_programs,
                     activation=activation)
    tile_elements, device = _tile_elements(config), a.device
    partials, flags = _workspace(num_programs, tile_elements, device)
    args.update(partial_ptr=partials, flag_ptr=flags, error_ptr=_errors.tensor, spin_limit=SPIN_LIMIT,
                sk_tiles_requested=-1 if sk_tiles is None else sk_tiles, SYSTEM_FENCE=runtime.on_gpu())
    runtime.ensure_tma_allocator()
    grid = (num_programs,)  # every program takes part in the split, even with fewer tiles than programs

    def workspace():  # per call: the buffers are kept per stream
        partials, flags = _workspace(num_programs, tile_elements, device)
        return {"partial_ptr": partials, "flag_ptr": flags}

    launches.launch_and_keep(_KEPT, key, _streamk_tuned, grid, args, c, POINTER_SOURCES,
                             config_kwargs=config_kwargs, uses_tma=True, workspace=workspace)
    raise_pending_streamk_error()  # a tuning run has synchronised: report its waits now
    return c


def _workspace(num_programs: int, tile_elements: int, device: torch.device):
    """The fp32 partial-sum slots and the int32 flags + ticket (zero, and left zero by every
    launch): kept per stream on a GPU, fresh in the interpreter."""
    if runtime.interpreted():
        return (torch.empty(num_programs * tile_elements, dtype=torch.float32, device=device),
                torch.zeros(num_programs + 1, dtype=torch.int32, device=device))
    index = device.index if device.index is not None else torch.cuda.current_device()
    return runtime.stream_buffers(index, (("streamk partials", num_programs * tile_elements, torch.float32, False),
                                          ("streamk flags", num_programs + 1, torch.int32, True)))


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
    runtime.reset_stream_buffers("streamk flags")  # a wait that gave up may have left a flag raised
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
                   config=None, sk_tiles=None):
    """``activation(a @ b + bias)`` by the Stream-K kernel: ``matmul_tma``'s schedule for the
    first tiles, then the K iterations of the last ``sk_tiles`` tiles split evenly over all programs.

    Same contract and TMA layout rules as :func:`gemm_kernels.matmul_tma` (sm_90+ on
    a GPU; runs in the interpreter).  ``sk_tiles`` (with an explicit ``config``, which fixes the
    tile count) goes from 0 (``matmul_tma``'s schedule) to ``min(tiles, num_programs)``, e.g.
    ``tiles % num_programs`` to split just the partial last wave.  The default splits every tile
    when there are at most half as many tiles as programs and K has at least
    ``tiles.STREAMK_MIN_K_TILES`` blocks, else none (``tiles.streamk_default_tiles``).
    """
    return _launch_streamk(a, b, activation=activation, bias=bias, order=order, group_size_m=group_size_m,
                           num_programs=num_programs, config=config, sk_tiles=sk_tiles)
