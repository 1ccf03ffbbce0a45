"""MoE grouped GEMM: ``grouped_mm(x, w, offs)``, tokens sorted by expert times each expert's weights.

``x [T, K]`` holds the routed tokens, sorted so that expert ``e`` owns rows
``offs[e-1]:offs[e]`` (``offs`` int32 ``[E]``, cumulative row ends, ``offs[-1] == T``);
``w [E, K, N]`` holds one weight matrix per expert.  ``out[rows of e] = x[rows of e] @ w[e]``:
the 2-D x 3-D case of ``torch._grouped_mm`` / ``torch.nn.functional.grouped_mm``.

The design point: ``offs`` is produced on the device by the router, so the host cannot know
how many tiles each expert has without a sync.  The kernel works it out itself: every program
loads ``offs`` as a vector of ``E_PAD`` lanes, turns it into tile counts per expert and a
running sum (``tl.cumsum``), and finds a tile's expert with ``tiles.locate_problem_in_ends``
(the number of experts whose tiles end at or before it).  The grid is an upper bound,
``min(num_sms, (cdiv(T, BLOCK_M) + E) * cdiv(N, BLOCK_N))``, known without reading ``offs``;
programs stride over the device-computed total.  The walk is ``tiles.multi_problem_schedule``
with problem ``e`` of shape ``(rows_e, N)``, which the TRACE test proves.

Memory safety: stores are masked by the expert's last row (or clipped by a descriptor that
ends there), so a tile never writes another expert's rows; w is read as a 3-D array, so a tile
never reads another expert's K rows.  ``offs`` values are also clamped to ``[0, T]`` in the
kernel, so even unchecked bad offsets cannot make it touch memory outside x, w and out.

TMA (``tma=None`` chooses it when the GPU has TMA and x, w are aligned for it): x through one
``[T, K]`` descriptor (rows past an expert's end belong to the next expert, are in bounds and
their results are never stored), w through one 3-D ``[E, K, N]`` descriptor with a
``[1, BLOCK_K, BLOCK_N]`` block (or ``[E, N, K]`` when w is a transposed view of ``[E, N, K]``
weights), out through a per-tile descriptor whose shape ends at the expert's last row.
Otherwise plain masked pointer loads (any strides).
"""

from __future__ import annotations

import math

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from .. import runtime
from ..runtime import ensure_tma_allocator
from . import checks, configs, tma
from .epilogue import widen_for_dot
from .grouped import USE_POINTER_PATH
from .matmul import k_loop_pointers
from .tma import tma_strides
from .tiles import locate_problem_in_ends, record_tile, tile_coords


# ----------------------------------------------------------------------------- device side
@triton.jit
def _expert_tiles(offs_ptr, T, E, num_pid_n, E_PAD: tl.constexpr, BLOCK_M: tl.constexpr):
    """Per-expert row ranges and cumulative tile counts, from the device-side ``offs``.

    Returns vectors over E_PAD lanes (padding lanes: empty experts): first row, last row + 1,
    and the running total of tiles (``tile_ends``).  Offsets are clamped to [0, T] and a
    decreasing pair gives an empty expert, so bad offsets cannot send a tile out of bounds."""
    experts = tl.arange(0, E_PAD)
    row_ends = tl.load(offs_ptr + experts, mask=experts < E, other=0)
    row_starts = tl.load(offs_ptr + experts - 1, mask=(experts > 0) & (experts < E), other=0)
    row_ends = tl.minimum(tl.maximum(row_ends, 0), T)
    row_starts = tl.minimum(tl.maximum(row_starts, 0), T)
    rows = tl.maximum(row_ends - row_starts, 0)
    tile_ends = tl.cumsum(tl.cdiv(rows, BLOCK_M) * num_pid_n, axis=0)
    return row_starts, row_starts + rows, tile_ends


@triton.jit
def _pick(vector, lanes, lane):
    """vector[lane] for a register vector (a masked sum: registers cannot be indexed)."""
    return tl.sum(tl.where(lanes == lane, vector, 0), axis=0)


@triton.jit
def _grouped_mm_kernel(
    x_ptr, w_ptr, out_ptr, offs_ptr, trace_ptr,
    T, N, K, E,
    stride_xt, stride_xk, stride_we, stride_wk, stride_wn, stride_ot, stride_on,
    t_bucket,  # autotune key only: next power of two of T
    E_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    USE_TMA: tl.constexpr, W_NK: tl.constexpr, OUT_TMA: tl.constexpr,
    WIDEN: tl.constexpr, TRACE: tl.constexpr,
):
    num_pid_n = tl.cdiv(N, BLOCK_N)
    row_starts, row_ends, tile_ends = _expert_tiles(offs_ptr, T, E, num_pid_n, E_PAD, BLOCK_M)
    experts = tl.arange(0, E_PAD)
    total_tiles = tl.max(tile_ends, axis=0)
    dtype = out_ptr.dtype.element_ty

    if USE_TMA:  # the same x and w descriptors serve every tile of this program
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[T, K], strides=[stride_xt, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
        if W_NK:  # w is a transposed view of [E, N, K] weights: describe the storage
            w_desc = tl.make_tensor_descriptor(w_ptr, shape=[E, N, K], strides=[stride_we, stride_wn, 1],
                                               block_shape=[1, BLOCK_N, BLOCK_K])
        else:
            w_desc = tl.make_tensor_descriptor(w_ptr, shape=[E, K, N], strides=[stride_we, stride_wk, 1],
                                               block_shape=[1, BLOCK_K, BLOCK_N])

    pid = tl.program_id(0)
    for tile in range(pid, total_tiles, tl.num_programs(0)):
        expert, local_tile = locate_problem_in_ends(tile, tile_ends)
        row_start = _pick(row_starts, experts, expert)
        row_end = _pick(row_ends, experts, expert)
        rows = row_end - row_start
        pid_m, pid_n = tile_coords(local_tile, tl.cdiv(rows, BLOCK_M), num_pid_n, True, GROUP_SIZE_M)
        if TRACE:  # which program computed which tile of which expert (tests and notebooks read it)
            record_tile(trace_ptr, tile, pid, expert, pid_m, pid_n)
        first_row = row_start + pid_m * BLOCK_M

        if USE_TMA:
            acc = tma.k_loop(x_desc, w_desc, first_row, pid_n * BLOCK_N, 0, tl.cdiv(K, BLOCK_K), False, W_NK, WIDEN,
                             BLOCK_M, BLOCK_N, BLOCK_K, b_batch=expert, B_BATCHED=True)
        else:
            # rows past the expert's end wrap inside the expert (columns past N wrap too): loads
            # stay in bounds without an M/N mask, and those results are never stored.
            # 64-bit row offsets: T * stride_xt and E * stride_we may pass 2**31 at MoE sizes.
            offs_m = (row_start + (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % rows).to(tl.int64)
            offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
            acc = k_loop_pointers(x_ptr, w_ptr + expert.to(tl.int64) * stride_we, offs_m, offs_n, K,
                                  stride_xt, stride_xk, stride_wk, stride_wn, BLOCK_M, BLOCK_N, BLOCK_K, WIDEN)

        if OUT_TMA:  # shape ends at the expert's last row: the rows after it are clipped
            out_desc = tl.make_tensor_descriptor(out_ptr, shape=[row_end, N], strides=[stride_ot, 1],
                                                 block_shape=[BLOCK_M, BLOCK_N])
            out_desc.store([first_row, pid_n * BLOCK_N], acc.to(dtype))
        else:
            offs_om = first_row + tl.arange(0, BLOCK_M)
            offs_on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            out_ptrs = out_ptr + offs_om.to(tl.int64)[:, None] * stride_ot + offs_on[None, :] * stride_on
            tl.store(out_ptrs, acc.to(dtype), mask=(offs_om[:, None] < row_end) & (offs_on[None, :] < N))


_grouped_mm_tuned = configs.TunedKernel(
    _grouped_mm_kernel, configs.moe_configs(),
    key=["N", "K", "E", "t_bucket", "USE_TMA", "W_NK", "OUT_TMA"],  # x/w dtypes are added by Triton
)


# ----------------------------------------------------------------------------- host side
def _check_inputs(x, w, offs, check_offs: bool) -> torch.Tensor:
    """The launch's checks; returns ``offs`` contiguous (the kernel reads ``offs_ptr + e``)."""
    checks.check_tensor(x, "x", 2)
    checks.check_tensor(w, "w", 3)
    checks.check_no_grad({"x": x, "w": w})
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
    checks.check_same({"x": x, "w": w, "offs": offs}, "device")
    if offs.dtype != torch.int32:
        raise TypeError(f"offs must be int32 (like torch._grouped_mm), got {str(offs.dtype).replace('torch.', '')}")
    if offs.dim() != 1 or offs.shape[0] != E:
        raise ValueError(f"offs must have shape [E] = [{E}] (one row end per expert), got {list(offs.shape)}")
    if not check_offs:
        return offs.contiguous()
    ends = offs.tolist()  # the one host sync: values are checked here, never needed by the launch
    for e, end in enumerate(ends):
        if end < 0:
            raise ValueError(f"offs[{e}] = {end} is negative: offs are cumulative row ends (0 <= offs[e] <= T)")
        if e and end < ends[e - 1]:
            raise ValueError(
                f"offs must be non-decreasing (cumulative row ends per expert), but offs[{e - 1}] = "
                f"{ends[e - 1]} > offs[{e}] = {end}"
            )
    if ends[-1] != T:
        raise ValueError(f"offs[-1] = {ends[-1]} but x has T = {T} rows: the experts' rows must cover x exactly")
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

    Each expert adds at most one partial row tile, so ``cdiv(T, BLOCK_M) + E`` bounds the
    tile rows of all experts together."""
    bound = min(triton.cdiv(T, block_m) + E, T) * triton.cdiv(N, block_n)
    return max(1, min(runtime.num_sms(), bound))


def _launch_args(x, w, offs, out, flags):
    T, K = x.shape
    E, _, N = w.shape
    xs = _tma_strides_or_own(x, (0, 1), flags["USE_TMA"])
    ws = _tma_strides_or_own(w, (0, 2, 1) if flags["W_NK"] else (0, 1, 2), flags["USE_TMA"])
    os_ = _tma_strides_or_own(out, (0, 1), flags["OUT_TMA"])
    return dict(
        T=T, N=N, K=K, E=E,
        stride_xt=xs[0], stride_xk=xs[1], stride_we=ws[0], stride_wk=ws[1], stride_wn=ws[2],
        stride_ot=os_[0], stride_on=os_[1],
        t_bucket=triton.next_power_of_2(T), E_PAD=max(2, triton.next_power_of_2(E)),
        **flags, WIDEN=widen_for_dot(x.dtype),
    )


def grouped_mm(x, w, offs, *, tma=None, check_offs=True):
    """``out[offs[e-1]:offs[e]] = x[offs[e-1]:offs[e]] @ w[e]`` for every expert e, in x's dtype.

    x: [T, K] routed tokens sorted by expert; w: [E, K, N] (contiguous, or a transposed view
    ``w_nk.transpose(1, 2)`` of [E, N, K] weights); offs: int32 [E] cumulative row ends on x's
    device (``offs[-1] == T``; experts with zero rows are fine).  fp16, bf16 or fp32.

    ``tma``: None (default) uses TMA where the GPU has it and x, w are 16-byte aligned for it;
    True insists (RuntimeError before sm_90, ValueError naming the unaligned tensor); False uses
    pointer loads.  ``check_offs=True`` validates offs on the host, which costs one device-to-host
    copy (a sync); pass False when offs is known good (benchmarks) and nothing waits.
    """
    if not isinstance(check_offs, bool):
        raise TypeError(f"check_offs must be True or False, got {check_offs!r}")
    if tma is not None and not isinstance(tma, bool):  # not `in (None, True, False)`: 0 == False
        raise TypeError(f"tma must be None, True or False, got {tma!r}")
    offs = _check_inputs(x, w, offs, check_offs)
    T, K = x.shape
    N = w.shape[2]
    out = torch.empty((T, N), device=x.device, dtype=x.dtype)
    if T == 0 or N == 0:
        return out
    if K == 0:  # an empty sum: every row of every expert is zero
        return out.zero_()
    flags = _plan_tma(x, w, out, tma)
    if flags["USE_TMA"] or flags["OUT_TMA"]:
        ensure_tma_allocator()
    args = _launch_args(x, w, offs, out, flags)
    grid = lambda meta: (num_programs_for(T, w.shape[0], N, meta["BLOCK_M"], meta["BLOCK_N"]),)  # noqa: E731
    _grouped_mm_tuned[grid](x, w, out, offs, offs, **args, TRACE=False)
    return out


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
    """
    num_tokens = checks.check_int(num_tokens, "num_tokens", minimum=0)
    num_experts = checks.check_int(num_experts, "num_experts")
    top_k = checks.check_int(top_k, "top_k")
    if top_k > num_experts:
        raise ValueError(f"top_k = {top_k} but there are only {num_experts} experts (each token picks distinct ones)")
    if not 0 <= skew < math.inf:
        raise ValueError(f"skew must be finite and >= 0 (0 = uniform), got {skew}")
    weights = 1.0 / torch.arange(1, num_experts + 1, dtype=torch.float64) ** float(skew)
    if num_tokens:
        experts = torch.multinomial(weights.expand(num_tokens, num_experts), top_k, replacement=False,
                                    generator=generator)
    else:
        experts = torch.empty((0, top_k), dtype=torch.int64)
    counts = torch.bincount(experts.flatten(), minlength=num_experts)
    offs = torch.cumsum(counts, 0).to(torch.int32).to(runtime.DEVICE)
    return Routing(counts=counts, offs=offs, experts=experts)
