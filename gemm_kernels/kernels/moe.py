"""MoE grouped GEMM: ``grouped_mm(x, w, offs)``, tokens sorted by expert times each expert's weights.

Contract (the 2-D x 3-D case of ``torch._grouped_mm``): ``x [T, K]`` holds the routed tokens,
expert ``e`` owning rows ``offs[e-1]:offs[e]`` (``offs`` int32 ``[E]``, cumulative, ``offs[-1] <= T``);
``w [E, K, N]``; ``out[rows of e] = x[rows of e] @ w[e]``.  Rows past ``offs[-1]`` belong to no
expert: this package writes zeros there (torch leaves them uninitialised and says to ignore them).

Design: ``offs`` comes from the router on the device, so the host cannot count an expert's tiles
without a sync.  Each program loads ``offs`` as a vector, turns it into tiles per expert and a
running sum (``tl.cumsum``), and finds a tile's expert with ``tiles.locate_problem_in_ends``; the
grid is an upper bound known without reading ``offs``.  The walk is
``tiles.multi_problem_schedule``, which the TRACE test proves.

No host sync: the default call's kernel checks ``offs`` itself and reports a bad entry through a
pinned host record (``host_record``) that the next call turns into a ValueError; the CUDA context
survives.  ``check_offs=True`` checks on the host before the launch instead (a sync).  A
``tl.device_assert`` would compile to a call that makes ptxas serialise the wgmma pipeline.

Memory safety: stores are masked or clipped at the expert's last row, w is read as a 3-D array,
and ``offs`` is clamped to ``[0, T]`` in the kernel, so even a bad ``offs`` touches nothing
outside x, w and out.  TMA (``tma=None``: when the GPU has it and x, w are aligned) reads x, w
through descriptors and stores out through one ``[T, N]`` descriptor plus one per expert's last
row tile; otherwise masked pointer loads (any strides).

Training: differentiable, in eager mode through a ``torch.autograd.Function`` and under
``torch.compile`` through the custom op ``gemm_kernels::grouped_mm``: ``dx = grouped_mm(dy, wᵀ)``
and ``dw[e] = x_eᵀ · dy_e`` (:mod:`.moe_wgrad`, a grouped GEMM over a ragged reduction).  The
history and measurements of these choices are in ``bench/PERF_NOTES.md`` (entries 19-23).
"""

from __future__ import annotations

import math

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from .. import runtime
from ..runtime import ensure_tma_allocator
from . import checks, configs, launches, moe_wgrad, tma  # moe_wgrad defines the wgrad op; its autograd is below
from .autograd import grad_enabled_for
from .epilogue import output_values, widen_for_dot
from .grouped import USE_POINTER_PATH
from .matmul import k_loop_pointers
from .tma import tma_strides
from .host_record import HostRecord, publish
from .tiles import locate_problem_in_ends, record_tile, tile_coords


# ----------------------------------------------------------------------------- device side
@triton.jit
def _expert_tiles(offs_ptr, T, E, num_pid_n, E_PAD: tl.constexpr, BLOCK_M: tl.constexpr):
    """Per-expert row ranges and cumulative tile counts, from the device-side ``offs``.

    Returns vectors over E_PAD lanes: first row, last row + 1, the running total of tiles
    (``tile_ends``); then the first lane whose entries break the rules (E_PAD when none) and
    the raw values it checked (lane e: ``offs[e-1]``, or 0, and ``offs[e]``, or T for the
    tail).  Lane E is the tail (rows ``offs[E-1]:T``, owned by no expert); lanes past it are
    empty.  Offsets are clamped to
    [0, T] and a decreasing pair gives an empty expert, so bad offsets cannot send a tile out of
    bounds."""
    lanes = tl.arange(0, E_PAD)
    raw_ends = tl.load(offs_ptr + lanes, mask=lanes < E, other=0)
    raw_starts = tl.load(offs_ptr + lanes - 1, mask=(lanes > 0) & (lanes <= E), other=0)
    raw_ends = tl.where(lanes == E, T, raw_ends)
    # lane e checks offs[e-1] >= 0 and offs[e-1] <= offs[e]; the tail lane checks offs[E-1] <= T
    bad = (lanes <= E) & ((raw_starts < 0) | (raw_ends < raw_starts) | (raw_ends > T))
    first_bad = tl.min(tl.where(bad, lanes, E_PAD), axis=0)
    row_ends = tl.minimum(tl.maximum(raw_ends, 0), T)
    row_starts = tl.minimum(tl.maximum(raw_starts, 0), T)
    rows = tl.maximum(row_ends - row_starts, 0)
    tile_ends = tl.cumsum(tl.cdiv(rows, BLOCK_M) * num_pid_n, axis=0)
    return row_starts, row_starts + rows, tile_ends, first_bad, raw_starts, raw_ends


@triton.jit
def _pick(vector, lanes, lane):
    """vector[lane] for a register vector (a masked sum: registers cannot be indexed)."""
    return tl.sum(tl.where(lanes == lane, vector, 0), axis=0)


@triton.jit
def _wide(stride):
    """A stride as int64, so that index * stride cannot wrap at 2**31 (Triton types a stride
    argument int32 when it fits, or makes it the constant 1)."""
    return tl.cast(stride, tl.int64)


@triton.jit
def _grouped_mm_kernel(
    x_ptr, w_ptr, out_ptr, offs_ptr, error_ptr, trace_ptr,
    sx_ptr, sw_ptr,  # fp8 only (SCALED): float32 scales, one per row of x and per (expert, column) of w
    T, N, K, E,
    stride_xt, stride_xk, stride_we, stride_wk, stride_wn, stride_ot, stride_on, stride_swe,
    t_bucket,  # autotune key only: next power of two of T
    E_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    USE_TMA: tl.constexpr, W_NK: tl.constexpr, OUT_TMA: tl.constexpr,
    WIDEN: tl.constexpr, TRACE: tl.constexpr, CHECK_OFFS: tl.constexpr, OUT_SHARED_DESC: tl.constexpr = True,
    SCALED: tl.constexpr = False, PROMOTE: tl.constexpr = None,
):
    num_pid_n = tl.cdiv(N, BLOCK_N)
    row_starts, row_ends, tile_ends, first_bad, raw_starts, raw_ends = _expert_tiles(
        offs_ptr, T, E, num_pid_n, E_PAD, BLOCK_M)
    experts = tl.arange(0, E_PAD)
    total_tiles = tl.max(tile_ends, axis=0)
    dtype = out_ptr.dtype.element_ty
    pid = tl.program_id(0)
    if CHECK_OFFS:  # a bad offs goes to the pinned host record the next call reads: no host sync
        if (pid == 0) & (first_bad < E_PAD):
            publish(error_ptr, first_bad, _pick(raw_starts, experts, first_bad), _pick(raw_ends, experts, first_bad),
                    T, E, SYSTEM_FENCE=True)

    if USE_TMA:  # the same x and w descriptors serve every tile of this program
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[T, K], strides=[stride_xt, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
        if W_NK:  # w is a transposed view of [E, N, K] weights: describe the storage
            w_desc = tl.make_tensor_descriptor(w_ptr, shape=[E, N, K], strides=[stride_we, stride_wn, 1],
                                               block_shape=[1, BLOCK_N, BLOCK_K])
        else:
            w_desc = tl.make_tensor_descriptor(w_ptr, shape=[E, K, N], strides=[stride_we, stride_wk, 1],
                                               block_shape=[1, BLOCK_K, BLOCK_N])

    if OUT_TMA and OUT_SHARED_DESC:  # one out descriptor for the tiles that end inside their expert
        out_all_desc = tl.make_tensor_descriptor(out_ptr, shape=[T, N], strides=[stride_ot, 1],
                                                 block_shape=[BLOCK_M, BLOCK_N])

    for tile in range(pid, total_tiles, tl.num_programs(0)):
        expert, local_tile = locate_problem_in_ends(tile, tile_ends)
        row_start = _pick(row_starts, experts, expert)
        row_end = _pick(row_ends, experts, expert)
        rows = row_end - row_start
        pid_m, pid_n = tile_coords(local_tile, tl.cdiv(rows, BLOCK_M), num_pid_n, True, GROUP_SIZE_M)
        if TRACE:  # which program computed which tile of which expert (tests and notebooks read it)
            record_tile(trace_ptr, tile, pid, expert, pid_m, pid_n)
        first_row = row_start + pid_m * BLOCK_M
        k_len = tl.where(expert < E, K, 0)  # the tail (expert E) has no weights: an empty sum, zeros

        if USE_TMA:
            acc = tma.k_loop(x_desc, w_desc, first_row, pid_n * BLOCK_N, 0, tl.cdiv(k_len, BLOCK_K), False, W_NK,
                             WIDEN, BLOCK_M, BLOCK_N, BLOCK_K, b_batch=expert, B_BATCHED=True, PROMOTE=PROMOTE)
        else:
            # rows past the expert's end wrap inside the expert (columns past N wrap too): loads
            # stay in bounds without an M/N mask, and those results are never stored.
            offs_m = (row_start + (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % rows).to(tl.int64)
            offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
            acc = k_loop_pointers(x_ptr, w_ptr + expert.to(tl.int64) * stride_we, offs_m, offs_n, k_len,
                                  _wide(stride_xt), _wide(stride_xk), _wide(stride_wk), _wide(stride_wn),
                                  BLOCK_M, BLOCK_N, BLOCK_K, WIDEN, PROMOTE)
        if SCALED:  # row-wise fp8: a scale per token (row of x) and per output channel of the expert
            rows_m = first_row + tl.arange(0, BLOCK_M)
            cols_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            # the tail (expert E, rows past offs[-1]) reads no scale: a NaN one would turn its zeros NaN
            sx = tl.load(sx_ptr + rows_m, mask=rows_m < tl.where(expert < E, row_end, 0), other=0.0)
            n_scaled = tl.where(expert < E, N, 0)  # the tail (expert E) has no scales
            sw = tl.load(sw_ptr + expert.to(tl.int64) * stride_swe + cols_n, mask=cols_n < n_scaled, other=0.0)
            acc = acc * sx[:, None] * sw[None, :]  # one after the other: their product may overflow (fp8.py)

        if OUT_TMA:
            if OUT_SHARED_DESC and first_row + BLOCK_M <= row_end:
                out_all_desc.store([first_row, pid_n * BLOCK_N], output_values(acc, dtype))
            else:  # the expert's last row tile: a descriptor whose shape ends at the expert's last row
                # clips the rows after it (making one costs a global write and a fence per tile)
                out_desc = tl.make_tensor_descriptor(out_ptr, shape=[row_end, N], strides=[stride_ot, 1],
                                                     block_shape=[BLOCK_M, BLOCK_N])
                out_desc.store([first_row, pid_n * BLOCK_N], output_values(acc, dtype))
        else:
            offs_om = first_row + tl.arange(0, BLOCK_M)
            offs_on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            out_ptrs = out_ptr + offs_om.to(tl.int64)[:, None] * stride_ot + offs_on[None, :] * _wide(stride_on)
            tl.store(out_ptrs, output_values(acc, dtype), mask=(offs_om[:, None] < row_end) & (offs_on[None, :] < N))


_grouped_mm_tuned = configs.TunedKernel(
    _grouped_mm_kernel, configs.moe_configs(),
    key=["N", "K", "E", "t_bucket", "USE_TMA", "W_NK", "OUT_TMA"],  # x/w dtypes are added by Triton
)


# ----------------------------------------------------------------------------- host side
def check_offs_values(ends: list, T: int) -> None:
    """The eager check of offs (already on the host): ValueError naming the first bad entry."""
    for e, end in enumerate(ends):
        if end < 0:
            raise ValueError(f"offs[{e}] = {end} is negative: offs are cumulative row ends (0 <= offs[e] <= T)")
        if e and end < ends[e - 1]:
            raise ValueError(
                f"offs must be non-decreasing (cumulative row ends per expert), but offs[{e - 1}] = "
                f"{ends[e - 1]} > offs[{e}] = {end}"
            )
    if ends and ends[-1] > T:
        raise ValueError(f"offs[-1] = {ends[-1]} but x has only T = {T} rows: the experts' rows must lie "
                         "inside x (offs[-1] <= T; rows past offs[-1] come out as zeros)")


def _check_shapes(x, w, offs, dtypes=checks.SUPPORTED_DTYPES) -> None:
    """Everything about x, w and offs but offs' values (the checks the fake implementation runs too)."""
    checks.check_tensor(x, "x", 2, dtypes)
    checks.check_tensor(w, "w", 3, dtypes)
    T, K = x.shape
    E, Kw, N = w.shape
    if K != Kw:
        raise ValueError(
            f"x is [T, K] = {list(x.shape)} but w is [E, K, N] = {list(w.shape)}: "
            f"K must match ({K} != {Kw})"
        )
    if E == 0:
        raise ValueError(f"w is {list(w.shape)}: it must hold at least one expert (E >= 1)")
    checks.check_same({"x": x, "w": w}, "dtype")
    if not isinstance(offs, torch.Tensor):
        raise TypeError(f"offs must be a torch.Tensor (int32 [E]), got {type(offs).__name__}")
    checks.check_strided(offs, "offs")
    checks.check_same({"x": x, "w": w, "offs": offs}, "device")
    if offs.dtype != torch.int32:
        raise TypeError(f"offs must be int32 (like torch._grouped_mm), got {str(offs.dtype).replace('torch.', '')}")
    if offs.dim() != 1 or offs.shape[0] != E:
        raise ValueError(f"offs must have shape [E] = [{E}] (one row end per expert), got {list(offs.shape)}")


def _check_inputs(x, w, offs, check_offs: bool, dtypes=checks.SUPPORTED_DTYPES) -> torch.Tensor:
    """The launch's checks; ``check_offs`` also checks offs' values on the host (a sync on a GPU).
    Returns ``offs`` contiguous (the kernel reads ``offs_ptr + e``).  ``dtypes``: x's and w's
    (the fp8 ones for ``scaled_grouped_mm``)."""
    _check_shapes(x, w, offs, dtypes)
    if check_offs:
        check_offs_values(offs.tolist(), x.shape[0])
    return offs.contiguous()


def _plan_tma(x, w, out, tma, check_gpu=True) -> dict:
    """Decide the TMA flags; ``tma=None`` picks TMA where it works, ``True`` insists (or raises).
    ``check_gpu=False`` (the compile view) skips asking whether this machine's GPU has TMA."""
    if tma is False:
        return {"USE_TMA": False, "W_NK": False, "OUT_TMA": False}
    if tma is True and check_gpu:
        runtime.require_tma("grouped_mm(tma=True)", USE_POINTER_PATH)
    elif tma is None and not runtime.supports_tma():
        return {"USE_TMA": False, "W_NK": False, "OUT_TMA": False}
    x_ok = tma_strides(x, (0, 1)) is not None
    w_kn = tma_strides(w, (0, 1, 2))
    w_nk = tma_strides(w, (0, 2, 1))
    if not x_ok or (w_kn is None and w_nk is None):
        if tma is None:
            return {"USE_TMA": False, "W_NK": False, "OUT_TMA": False}
        name, t = ("x", x) if not x_ok else ("w", w)
        raise ValueError(
            f"tma=True: {name} (shape {list(t.shape)}, strides {list(t.stride())}, data_ptr % 16 = "
            f"{t.data_ptr() % 16}) cannot be read through a tensor descriptor: TMA needs a unit stride "
            "along its last (or, for w, its K) dimension, the other strides nonzero multiples of 16 bytes and "
            "a 16-byte-aligned base. Use tma=False (or None to choose automatically)."
        )
    return {"USE_TMA": True, "W_NK": w_kn is None, "OUT_TMA": tma_strides(out, (0, 1)) is not None}


def _tma_strides_or_own(t, order, use):
    """Strides to pass for ``t``: the TMA-normalized ones when a descriptor reads it."""
    if use:
        norm = tma_strides(t, order)
        if norm is not None:
            return [norm[order.index(d)] for d in range(t.dim())]
    return list(t.stride())


def num_programs_for(T: int, E: int, N: int, block_m: int, block_n: int) -> int:
    """Programs launched: ``min(num_sms, upper bound of tiles)``, known without reading offs.

    Each of the E experts and the tail adds at most one partial row tile, so
    ``cdiv(T, BLOCK_M) + E + 1`` bounds the tile rows of all of them together (and T does:
    every tile row holds at least one of the T rows)."""
    bound = min(triton.cdiv(T, block_m) + E + 1, T) * triton.cdiv(N, block_n)
    return max(1, min(runtime.num_sms(), bound))


def _launch_args(x, w, offs, out, flags, scale_w=None, promote=None):
    """The kernel's size, stride and switch arguments; ``scale_w`` (fp8, row-wise scales) turns
    SCALED on, ``promote`` is its promotion interval (``fp8.py``)."""
    T, K = x.shape
    E, _, N = w.shape
    xs = _tma_strides_or_own(x, (0, 1), flags["USE_TMA"])
    ws = _tma_strides_or_own(w, (0, 2, 1) if flags["W_NK"] else (0, 1, 2), flags["USE_TMA"])
    os_ = _tma_strides_or_own(out, (0, 1), flags["OUT_TMA"])
    return dict(
        T=T, N=N, K=K, E=E,
        stride_xt=xs[0], stride_xk=xs[1], stride_we=ws[0], stride_wk=ws[1], stride_wn=ws[2],
        stride_ot=os_[0], stride_on=os_[1], stride_swe=scale_w.stride(0) if scale_w is not None else 0,
        t_bucket=triton.next_power_of_2(T), E_PAD=max(2, triton.next_power_of_2(E + 1)),
        **flags, WIDEN=widen_for_dot(x.dtype), SCALED=scale_w is not None, PROMOTE=promote,
    )


def _launch_key(x, w, offs, tma, check_offs, fp8=None) -> tuple:
    """Everything a launch's checks, plan and compiled kernel depend on, except the tensors'
    addresses (of which only the 16-byte alignment matters): equal keys, equal launches.
    ``fp8``: ``(scale_x, scale_w, out_dtype, promote)`` of a scaled call."""
    scaled = () if fp8 is None else (*((t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16)
                                       for t in fp8[:2]), *fp8[2:], *map(type, fp8[2:]))
    # the options' types too (launches.call_key): tma=1 equals tma=True, but only True passes the checks
    return (x.shape, x.stride(), w.shape, w.stride(), x.dtype, w.dtype, offs.dtype, offs.shape, offs.stride(),
            x.device, w.device, offs.device, x.data_ptr() % 16, w.data_ptr() % 16, offs.data_ptr() % 16, tma,
            check_offs, type(tma), type(check_offs), scaled)


class _Launch(NamedTuple):
    out_shape: tuple
    bound: object    # a BoundLaunch, or None: an empty problem, nothing to launch (out is zeros)
    uses_tma: bool   # descriptors made in the kernel need Triton's scratch allocator


#: bound launches by _launch_key (GPU only): a repeated call skips the checks and argument handling
_LAUNCHES = launches.LaunchCache()


def _forward(x, w, offs, tma, check_offs, fp8=None):
    """``grouped_mm``'s forward: ``check_offs`` None (device-side check on a GPU, host check on the
    CPU), True (host check) or False (none).  On a GPU a repeated shape takes a bound launch.
    ``fp8``: ``(scale_x, scale_w, out_dtype, promote)``, the scaled fp8 product
    (:func:`scaled_grouped_mm`, which has checked everything but offs' values)."""
    if _errors.raised():  # an earlier call's kernel found a bad offs
        raise_pending_offs_error()
    if not (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and isinstance(offs, torch.Tensor)) or (
            x.layout is not torch.strided or w.layout is not torch.strided or offs.layout is not torch.strided):
        _check_shapes(x, w, offs)  # a TypeError naming the argument, before any attribute (a stride) is read
    if x.is_neg() or w.is_neg() or offs.is_neg() or x.is_conj() or w.is_conj():  # the memory holds the values
        x, w, offs = checks.resolve_lazy_views(x, w, offs)  # before it; the kernel reads offs' memory too
    sx, sw, out_dtype, promote = fp8 if fp8 is not None else (offs, offs, x.dtype, None)  # offs: unused pointers
    on_gpu = runtime.on_gpu()
    device_check = check_offs is None and on_gpu
    if on_gpu and not check_offs:
        out = kept_forward(x, w, offs, tma, check_offs, fp8)
        if out is not None:
            return out
    offs = _check_inputs(x, w, offs, check_offs is True or (check_offs is None and not on_gpu),
                         checks.SUPPORTED_DTYPES if fp8 is None else (x.dtype,))
    T, K = x.shape
    N = w.shape[2]
    out = torch.empty((T, N), device=x.device, dtype=out_dtype)
    if T == 0 or N == 0 or K == 0:  # no tile, or an empty sum: every row (the tail too) is zero
        if on_gpu and not check_offs:
            _remember(x, w, offs, tma, check_offs, fp8, _Launch((T, N), None, False))
        return out.zero_()
    flags = _plan_tma(x, w, out, tma)
    uses_tma = flags["USE_TMA"] or flags["OUT_TMA"]
    if uses_tma:
        ensure_tma_allocator()
    args = _launch_args(x, w, offs, out, flags, sw if fp8 is not None else None, promote)
    # the record (written only when CHECK_OFFS); on a GPU always it, so that a kept launch holds
    # no caller's tensor; the interpreter takes any int32 tensor (no pinned memory without CUDA)
    error = error_record() if on_gpu else offs
    grid = lambda meta: (num_programs_for(T, w.shape[0], N, meta["BLOCK_M"], meta["BLOCK_N"]),)  # noqa: E731
    bound = (_grouped_mm_tuned.bind(grid, x, w, out, offs, error, offs, sx, sw, **args, TRACE=False,
                                    CHECK_OFFS=device_check) if on_gpu else None)
    if hasattr(bound, "launch_with"):
        bound()  # binding may have launched through the autotuner: this launch is the one that counts
        if not check_offs:  # kept without this call's tensors (the cache must not hold their memory)
            # error_ptr, the record, is kept
            bound.forget("x_ptr", "w_ptr", "out_ptr", "offs_ptr", "trace_ptr", "sx_ptr", "sw_ptr")
            bound.scratch_allocator = runtime.tma_scratch  # descriptor scratch handed over directly
            _remember(x, w, offs, tma, check_offs, fp8, _Launch((T, N), bound, uses_tma and not bound.owns_scratch))
    elif bound is not None:  # the autotuner's choice is not readable here: launch through it
        bound()
    else:
        _grouped_mm_tuned[grid](x, w, out, offs, error, offs, sx, sw, **args, TRACE=False, CHECK_OFFS=device_check)
    return out


def kept_forward(x, w, offs, tma, check_offs, fp8=None):
    """The fast path of a call whose launch is kept (same key as an earlier call): no Python
    checks, no argument binding; None when there is none (GPU only; ``check_offs`` not True)."""
    launch = _LAUNCHES.get(_launch_key(x, w, offs, tma, check_offs, fp8))
    if launch is None:
        return None
    sx, sw, out_dtype, _ = fp8 if fp8 is not None else (offs, offs, x.dtype, None)  # offs: unused pointers
    out = x.new_empty(launch.out_shape, dtype=out_dtype)
    if launch.bound is None:
        return out.zero_()
    if launch.uses_tma:
        ensure_tma_allocator()
    launch.bound.launch_with(x_ptr=x, w_ptr=w, out_ptr=out, offs_ptr=offs, trace_ptr=offs, sx_ptr=sx, sw_ptr=sw)
    return out


# The default call's report of a bad offs: fields [lane, offs[lane-1] (or 0), offs[lane] (or T), T, E].
_errors = HostRecord()


def error_record() -> torch.Tensor:
    """The pinned host record a default call's kernel writes a bad offs to (made on first use)."""
    return _errors.tensor


def raise_pending_offs_error() -> None:
    """Raise the ValueError for a bad ``offs`` that a default ``grouped_mm`` call's kernel found
    (and clear it); do nothing if none did.  ``grouped_mm`` calls this first on every call, so a
    bad offs is reported at the first call after the GPU ran the bad one; call it after a
    ``torch.cuda.synchronize()`` to check every call launched so far."""
    fields = _errors.take()
    if fields is None:
        return
    lane, start, end, T = fields[:4]
    raise ValueError("grouped_mm: a call launched earlier had a bad offs (checked on the GPU, reported at the "
                     f"next call): {describe_bad_offs(lane, start, end, T)}; the rows of that call's output "
                     "are not the product (every access stayed inside x, w and out). check_offs=True checks before "
                     "the launch")


def describe_bad_offs(lane: int, start: int, end: int, T: int) -> str:
    """What the kernel's check found at its first bad ``lane`` (lane e checks offs[e-1] = ``start``,
    0 for e = 0, and offs[e] = ``end``).  At the first bad lane the fault is always offs[lane]
    itself: negative, below the entry before it, or past T (a negative offs[lane-1], or
    offs[-1] > T at the tail lane, would have marked an earlier lane)."""
    if end < 0:
        return f"offs[{lane}] = {end} is negative"
    if end < start:
        return f"offs must be non-decreasing, but offs[{lane - 1}] = {start} > offs[{lane}] = {end}"
    return f"offs[{lane}] = {end} but x has only T = {T} rows (every entry must be <= T)"


def _remember(x, w, offs, tma, check_offs, fp8, launch: _Launch) -> None:
    _LAUNCHES.keep(_launch_key(x, w, offs, tma, check_offs, fp8), launch)


# ----------------------------------------------------------------------------- PyTorch op and backward
@torch.library.custom_op("gemm_kernels::grouped_mm", mutates_args=())
def _grouped_mm_op(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, tma: bool | None,
                   check_offs: bool | None) -> torch.Tensor:
    return _forward(x, w, offs, tma, check_offs)


@_grouped_mm_op.register_fake
def _(x, w, offs, tma, check_offs):
    _check_shapes(x, w, offs)
    return x.new_empty((x.shape[0], w.shape[2]))


def _setup_backward(ctx, inputs, output):
    x, w, offs, tma, _ = inputs
    ctx.save_for_backward(x, w, offs)
    ctx.tma = tma


def _backward(ctx, dy):
    x, w, offs = ctx.saved_tensors
    if torch.is_grad_enabled():  # create_graph=True: the gradients must be differentiable themselves
        return (*_differentiable_grads(x, w, offs, dy, ctx.tma, ctx.needs_input_grad), None, None, None)
    # Eager autograd calls the launchers directly: each custom-op dispatch costs host time that
    # small experts' kernels do not cover (PERF_NOTES 20).  A traced backward (fake or functional
    # tensors, torch.compile) must see the ops.
    direct = type(dy) is torch.Tensor and type(x) is torch.Tensor and not torch.compiler.is_compiling()
    forward = _forward if direct else torch.ops.gemm_kernels.grouped_mm
    wgrad = moe_wgrad.launch if direct else torch.ops.gemm_kernels.grouped_mm_wgrad
    dx = dw = None
    if ctx.needs_input_grad[0]:  # dx = dy @ w[e]ᵀ per expert: the same kernel, w read transposed
        dx = forward(dy, w.transpose(1, 2), offs, ctx.tma, False)
    if ctx.needs_input_grad[1]:  # dw[e] = x_eᵀ dy_e, computed in w's layout
        if w.stride(1) < w.stride(2):  # w is a transposed view of [E, N, K] weights: dwᵀ[e] = dy_eᵀ x_e
            dw = wgrad(dy, x, offs, ctx.tma).transpose(1, 2)
        else:
            dw = wgrad(x, dy, offs, ctx.tma)
    return dx, dw, None, None, None


def _differentiable_grads(x, w, offs, dy, tma, needs_input_grad) -> tuple:
    """``(dx, dw)`` as ops autograd records, for double backward (a gradient penalty):
    ``grouped_mm`` and the weight-gradient op, whose backward is ``grouped_mm`` again."""
    dx = dw = None
    if needs_input_grad[0]:
        dx = grouped_mm(dy, w.transpose(1, 2), offs, tma=tma, check_offs=False)
    if needs_input_grad[1]:
        wgrad = torch.ops.gemm_kernels.grouped_mm_wgrad
        dw = wgrad(dy, x, offs, tma).transpose(1, 2) if w.stride(1) < w.stride(2) else wgrad(x, dy, offs, tma)
    return dx, dw


_grouped_mm_op.register_autograd(_backward, setup_context=_setup_backward)


def _setup_wgrad_backward(ctx, inputs, output):
    x, dy, offs, tma = inputs
    ctx.save_for_backward(x, dy, offs)
    ctx.tma = tma


def _wgrad_backward(ctx, g):
    """Of ``dw[e] = x_eᵀ dy_e`` (``moe_wgrad``'s op): ``dx_e = dy_e g[e]ᵀ`` and ``ddy_e = x_e g[e]``,
    both ``grouped_mm`` (rows past offs[-1] get zeros).  What makes ``grouped_mm``'s double backward;
    registered here, where ``grouped_mm`` lives, so that ``moe_wgrad`` needs nothing from this module."""
    x, dy, offs = ctx.saved_tensors
    gx = grouped_mm(dy, g.transpose(1, 2), offs, tma=ctx.tma, check_offs=False) if ctx.needs_input_grad[0] else None
    gdy = grouped_mm(x, g, offs, tma=ctx.tma, check_offs=False) if ctx.needs_input_grad[1] else None
    return gx, gdy, None, None


moe_wgrad._wgrad_op.register_autograd(_wgrad_backward, setup_context=_setup_wgrad_backward)


def grouped_mm_wgrad(x, dy, offs, *, tma=None):
    """``dw[e] = x[offs[e-1]:offs[e]]ᵀ @ dy[offs[e-1]:offs[e]]`` for every expert e: ``[E, K, N]``
    in x's dtype (fp32 accumulation).  Rows past ``offs[-1]`` take no part; an expert with no rows
    gets zeros.  ``offs`` is trusted as in ``grouped_mm(check_offs=False)``: clamped into x,
    never checked (the forward pass checked it).  ``tma``: None uses TMA where x and dy allow it and
    experts average ``moe_wgrad.TMA_MIN_ROWS_PER_EXPERT`` rows or more, else pointer loads."""
    moe_wgrad._check(x, dy, offs)
    if tma is not None and not isinstance(tma, bool):
        raise TypeError(f"tma must be None, True or False, got {tma!r}")
    if grad_enabled_for(x, dy):  # differentiable through the op (its backward is grouped_mm)
        return torch.ops.gemm_kernels.grouped_mm_wgrad(x, dy, offs, tma)
    return moe_wgrad.launch(x, dy, offs, tma)


class _GroupedMMFunction(torch.autograd.Function):
    """Eager autograd of grouped_mm: the custom op's forward and backward without its dispatch,
    which cost ~200 µs of host time per training step on an H100's host (PERF_NOTES 20).  The
    forward takes ``ctx`` itself: with a separate ``setup_context``, ``Function.apply`` binds
    the arguments through ``inspect.signature`` on every call (~50 µs of host time per training
    step in a cProfile run, images/bench/moe_step_profile.txt, PERF_NOTES 22)."""

    @staticmethod
    def forward(ctx, x, w, offs, tma, check_offs):
        out = _forward(x, w, offs, tma, check_offs)
        _setup_backward(ctx, (x, w, offs, tma, check_offs), out)
        return out

    @staticmethod
    def backward(ctx, dy):
        return _backward(ctx, dy)


def grouped_mm(x, w, offs, *, tma=None, check_offs=None):
    """``out[offs[e-1]:offs[e]] = x[offs[e-1]:offs[e]] @ w[e]`` for every expert e, in x's dtype.

    x: [T, K] routed tokens sorted by expert; w: [E, K, N] (contiguous, or a transposed view
    ``w_nk.transpose(1, 2)`` of [E, N, K] weights); offs: int32 [E] cumulative row ends on x's
    device, ``0 <= offs[0] <= ... <= offs[-1] <= T`` (experts with zero rows are fine; rows past
    ``offs[-1]`` come out as zeros; ``torch._grouped_mm`` leaves them uninitialised).  fp16, bf16 or fp32.

    ``tma``: None (default) uses TMA where the GPU has it and x, w are 16-byte aligned for it;
    True insists (RuntimeError before sm_90, ValueError naming the unaligned tensor); False uses
    pointer loads.  ``check_offs``: None (default) checks offs without a host sync on a GPU (the
    kernel records a bad offs in pinned host memory and the next ``grouped_mm`` call, whichever
    it is, raises a ValueError naming the entry, or :func:`raise_pending_offs_error` after a
    synchronize; capturable in CUDA graphs; an empty problem, T, N or K zero, launches nothing
    and so is not checked) and on the host on the CPU, where that is free; True checks on the
    host (a device-to-host copy: a sync), with a ValueError naming the bad entry; False checks
    nothing (the kernel still clamps every range into x, so a bad offs gives wrong rows, never
    out-of-bounds memory).

    Differentiable in x and w (``dx = grouped_mm(dy, wᵀ)``, ``dw[e] = x_eᵀ dy_e``), twice too
    (``create_graph=True``, e.g. a gradient penalty), and a PyTorch custom op
    (``torch.ops.gemm_kernels.grouped_mm``) that ``torch.compile`` traces without a graph break.
    """
    if check_offs is not None and not isinstance(check_offs, bool):
        raise TypeError(f"check_offs must be None, True or False, got {check_offs!r}")
    if tma is not None and not isinstance(tma, bool):  # not `in (None, True, False)`: 0 == False
        raise TypeError(f"tma must be None, True or False, got {tma!r}")
    if grad_enabled_for(x, w):
        _check_shapes(x, w, offs)
        if torch.compiler.is_compiling() or type(x) is not torch.Tensor or type(w) is not torch.Tensor:
            return torch.ops.gemm_kernels.grouped_mm(x, w, offs, tma, check_offs)
        return _GroupedMMFunction.apply(x, w, offs, tma, check_offs)
    return _forward(x, w, offs, tma, check_offs)


def grouped_mm_ref(x, w, offs, *, out_dtype=None):
    """Plain-torch reference: a loop over experts in float64, returned in x's dtype
    (``out_dtype=torch.float64`` keeps full precision).  Rows no expert owns are zero."""
    _check_inputs(x, w, offs, check_offs=True)
    out = torch.zeros((x.shape[0], w.shape[2]), dtype=torch.float64, device=x.device)
    start = 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end].double() @ w[e].double()
        start = end
    return out.to(out_dtype or x.dtype)


# ----------------------------------------------------------------------------- routing, for tests and notebooks
class Routing(NamedTuple):
    """Tokens routed to experts: ``counts[e]`` rows for expert e, ``offs`` their cumulative ends
    (int32, on ``gemm_kernels.DEVICE``, ready for :func:`grouped_mm`), and ``experts[t]`` the
    ``top_k`` experts token t was sent to."""

    counts: torch.Tensor
    offs: torch.Tensor
    experts: torch.Tensor


def route_tokens(num_tokens: int, num_experts: int, top_k: int, skew: float = 0.0, generator=None) -> Routing:
    """Send each of ``num_tokens`` tokens to ``top_k`` distinct experts out of ``num_experts``.

    ``skew=0`` picks experts uniformly; ``skew > 0`` is Zipf-like, expert ``e`` weighted by
    ``1 / (e + 1) ** skew`` (expert 0 the most popular; ``skew=1`` already leaves the last
    experts of a large model nearly idle).  x for :func:`grouped_mm` then has
    ``num_tokens * top_k`` rows.  ``generator``: a ``torch.Generator`` for reproducible draws.

    The draw is a weighted sample without replacement done in log space (the Gumbel top-k
    trick: ``top_k`` largest of ``log weight + Gumbel noise``), so a large skew cannot underflow
    the weights to 0: it tends to experts 0..top_k-1, as the weights say.
    """
    num_tokens = checks.check_int(num_tokens, "num_tokens", minimum=0)
    num_experts = checks.check_int(num_experts, "num_experts")
    top_k = checks.check_int(top_k, "top_k")
    if top_k > num_experts:
        raise ValueError(f"top_k = {top_k} but there are only {num_experts} experts (each token picks distinct ones)")
    if isinstance(skew, bool) or not isinstance(skew, (int, float)):
        raise TypeError(f"skew must be a number (0 = uniform, 1 = Zipf), got {type(skew).__name__} {skew!r}")
    if not 0 <= skew < math.inf:
        raise ValueError(f"skew must be finite and >= 0 (0 = uniform), got {skew}")
    log_weights = -float(skew) * torch.log(torch.arange(1, num_experts + 1, dtype=torch.float64))
    uniform = torch.rand((num_tokens, num_experts), dtype=torch.float64, generator=generator)
    gumbel = -torch.log(-torch.log(uniform.clamp_(min=1e-300)))  # +inf never: u < 1 always
    experts = torch.topk(log_weights + gumbel, top_k, dim=1).indices
    counts = torch.bincount(experts.flatten(), minlength=num_experts)
    offs = torch.cumsum(counts, 0).to(torch.int32).to(runtime.DEVICE)
    return Routing(counts=counts, offs=offs, experts=experts)
