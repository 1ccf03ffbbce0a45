"""MoE weight gradient: ``dw[e] = x_eᵀ · dy_e``, a grouped GEMM whose ragged dimension is the reduction.

``x [T, K]`` and ``dy [T, N]`` are sorted by expert as for :func:`~gemm_kernels.kernels.moe.grouped_mm`
(expert ``e`` owns rows ``offs[e-1]:offs[e]``); ``dw [E, K, N]``.  It is ``torch._grouped_mm``'s
2-D x 2-D case with ``offs`` (``torch._grouped_mm(x.t(), dy, offs=offs)``).

Where the ragged dimension sits changes the tiling.  In the forward pass the tokens are the
*rows* of each expert's output, so the number of tiles per expert follows the routing and a
tile's expert must be looked up in a running sum (``tiles.locate_problem_in_ends``).  Here
every expert's output ``dw[e]`` is a full ``K x N`` matrix: every expert has the same number of
tiles, a tile's expert is a division (:func:`wgrad_tile`), and what the routing changes is the
length of each tile's K loop, ``rows_e / BLOCK_K`` steps over the expert's tokens.  An idle
expert's tiles run no step and store zeros (its weights get a zero gradient, as in torch).
Programs stride over the tiles (``pid, pid + num_programs, ...``); consecutive tiles share an
expert, so one wave of programs has the same loop length, reads the same ``x_e`` and ``dy_e``
blocks (they stay in L2), and a skewed routing does not leave programs waiting on a hot one.

TMA (when x and dy can be read by descriptors): per tile, two descriptors whose base is the
expert's first row and whose length is its row count, so the copy engine zero-fills the rows
past the expert, which must not enter the sum (the tiles of the forward pass may read them:
there they land in rows that are never stored).  ``x_eᵀ`` is the column-major view of ``x_e``,
read through the shared ``tma.k_loop`` like any transposed operand.  Otherwise masked pointer
loads (``matmul.k_loop_pointers``, whose K edge mask stops at the expert's last row).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import runtime
from ..runtime import ensure_tma_allocator
from . import checks, configs, launches, tma
from .epilogue import store_tile_masked, widen_for_dot
from .matmul import k_loop_pointers
from .tma import tma_strides
from .tiles import tile_coords


# ----------------------------------------------------------------------------- device side
@triton.jit
def wgrad_tile(tile, offs_ptr, T, num_pid_m, num_pid_n, GROUP_SIZE_M: tl.constexpr):
    """Tile ``tile`` of the weight gradient -> ``(expert, pid_m, pid_n, first_row, rows)``.

    Tiles are numbered expert by expert, ``num_pid_m * num_pid_n`` per expert (dw[e] is
    K x N whatever the routing); inside an expert the grouped order of ``tiles.tile_coords``.
    ``first_row, rows``: the expert's token rows, ``offs[e-1]:offs[e]``, clamped into [0, T]
    (a decreasing pair gives no rows), the reduction range of the tile."""
    tiles_per_expert = num_pid_m * num_pid_n
    expert = tile // tiles_per_expert
    pid_m, pid_n = tile_coords(tile % tiles_per_expert, num_pid_m, num_pid_n, True, GROUP_SIZE_M)
    row_end = tl.load(offs_ptr + expert)
    row_start = tl.load(offs_ptr + expert - 1, mask=expert > 0, other=0)
    row_start = tl.minimum(tl.maximum(row_start, 0), T)
    row_end = tl.minimum(tl.maximum(row_end, row_start), T)
    return expert, pid_m, pid_n, row_start, row_end - row_start


@triton.jit
def _grouped_mm_wgrad_kernel(
    x_ptr, dy_ptr, dw_ptr, offs_ptr,
    T, K, N, E,
    stride_xt, stride_xk, stride_yt, stride_yn, stride_we, stride_wk, stride_wn,
    t_bucket,  # autotune key only: next power of two of T
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    USE_TMA: tl.constexpr, WIDEN: tl.constexpr,
):
    # dw[e] (K x N) = x_eᵀ (K x rows_e) @ dy_e (rows_e x N): BLOCK_M runs over K, BLOCK_K over rows
    num_pid_m = tl.cdiv(K, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    total_tiles = E * num_pid_m * num_pid_n
    for tile in range(tl.program_id(0), total_tiles, tl.num_programs(0)):
        expert, pid_m, pid_n, first_row, rows = wgrad_tile(tile, offs_ptr, T, num_pid_m, num_pid_n, GROUP_SIZE_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        x_e = x_ptr + first_row.to(tl.int64) * stride_xt
        dy_e = dy_ptr + first_row.to(tl.int64) * stride_yt
        if USE_TMA:  # descriptors end at the expert's last row: the next expert's rows read as zeros
            x_desc, dy_desc = tma.input_descriptors(x_e, dy_e, K, N, tl.maximum(rows, 1), stride_xt, stride_yt,
                                                    True, False, BLOCK_M, BLOCK_N, BLOCK_K)
            acc = tma.k_loop(x_desc, dy_desc, off_m, off_n, 0, tl.cdiv(rows, BLOCK_K), True, False, WIDEN,
                             BLOCK_M, BLOCK_N, BLOCK_K)
        else:  # K and N wrap (those results are never stored); the rows past the expert are masked
            offs_m = (off_m + tl.arange(0, BLOCK_M)) % K
            offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
            acc = k_loop_pointers(x_e, dy_e, offs_m, offs_n, rows, tl.cast(stride_xk, tl.int64),
                                  tl.cast(stride_xt, tl.int64), tl.cast(stride_yt, tl.int64),
                                  tl.cast(stride_yn, tl.int64), BLOCK_M, BLOCK_N, BLOCK_K, WIDEN)
        store_tile_masked(acc, dw_ptr + expert.to(tl.int64) * stride_we, off_m, off_n, K, N, stride_wk, stride_wn,
                          BLOCK_M, BLOCK_N)


_wgrad_tuned = configs.TunedKernel(
    _grouped_mm_wgrad_kernel, configs.moe_wgrad_configs(),
    key=["K", "N", "E", "t_bucket", "USE_TMA"],  # x/dy dtypes are added by Triton
)


# ----------------------------------------------------------------------------- host side
def _check(x, dy, offs) -> None:
    checks.check_tensor(x, "x", 2)
    checks.check_tensor(dy, "dy", 2)
    if x.shape[0] != dy.shape[0]:
        raise ValueError(f"x is [T, K] = {list(x.shape)} but dy is [T, N] = {list(dy.shape)}: T must match")
    checks.check_same({"x": x, "dy": dy}, "dtype")
    if not isinstance(offs, torch.Tensor):
        raise TypeError(f"offs must be a torch.Tensor (int32 [E]), got {type(offs).__name__}")
    checks.check_same({"x": x, "dy": dy, "offs": offs}, "device")
    if offs.dtype != torch.int32 or offs.dim() != 1 or offs.shape[0] == 0:
        raise ValueError(f"offs must be int32 [E] with E >= 1, got {str(offs.dtype).replace('torch.', '')} "
                         f"{list(offs.shape)}")
    if x.shape[1] * dy.shape[1] > checks.MAX_INDEX:
        raise ValueError(f"dw[e] would be {x.shape[1]}x{dy.shape[1]} elements: more than 32-bit offsets address")


#: ``tma=None`` reads by TMA only when experts average at least this many rows: each tile builds
#: two descriptors in the kernel, a cost that only a long K loop (the expert's rows) hides.
#: Measured on an H100 (PERF_NOTES 20): pointer loads were 4-25% faster up to 512 rows per
#: expert on DeepSeek-V2-Lite and Qwen3-30B shapes; at 2048 rows TMA won on one of the two.
TMA_MIN_ROWS_PER_EXPERT = 1024


def _use_tma(x, dy, tma, experts: int = 1) -> bool:
    if tma is False or not runtime.supports_tma():
        return False
    if tma is None and x.shape[0] < TMA_MIN_ROWS_PER_EXPERT * experts:
        return False
    return tma_strides(x, (0, 1)) is not None and tma_strides(dy, (0, 1)) is not None


def _launch_key(x, dy, offs, tma) -> tuple:
    """What a launch's plan and compiled kernel depend on (as ``moe._launch_key``): equal keys, equal launches."""
    return (x.shape, x.stride(), dy.shape, dy.stride(), x.dtype, dy.dtype, offs.shape, offs.stride(), offs.dtype,
            x.device, dy.device, x.data_ptr() % 16, dy.data_ptr() % 16, offs.data_ptr() % 16, tma)


#: bound launches by _launch_key (GPU only), kept without their tensors: (dw's shape, BoundLaunch, TMA?)
_LAUNCHES = launches.LaunchCache()


def launch(x, dy, offs, tma) -> torch.Tensor:
    """The weight gradient's launch, unchecked (the backward pass's inputs were checked by the
    forward).  On a GPU a repeated shape takes a bound launch: no argument handling."""
    if x.is_neg() or dy.is_neg() or offs.is_neg() or x.is_conj() or dy.is_conj():  # the kernel reads memory,
        x, dy, offs = checks.resolve_lazy_views(x, dy, offs)  # not the lazy bit (offs' too)
    key = _launch_key(x, dy, offs, tma) if runtime.on_gpu() else None
    kept = _LAUNCHES.get(key)
    if kept is not None:
        dw_shape, bound, uses_tma = kept
        dw = torch.empty(dw_shape, device=x.device, dtype=x.dtype)
        if uses_tma:
            ensure_tma_allocator()
        bound.launch_with(x_ptr=x, dy_ptr=dy, dw_ptr=dw, offs_ptr=offs)
        return dw
    T, K = x.shape
    N, E = dy.shape[1], offs.shape[0]
    dw = torch.empty((E, K, N), device=x.device, dtype=x.dtype)
    if K == 0 or N == 0:
        return dw
    if T == 0:  # no token reached any expert: every gradient is zero
        return dw.zero_()
    use_tma = _use_tma(x, dy, tma, E)
    if use_tma:
        ensure_tma_allocator()
    xs = tma_strides(x, (0, 1)) if use_tma else x.stride()
    ys = tma_strides(dy, (0, 1)) if use_tma else dy.stride()
    grid = lambda meta: (max(1, min(runtime.num_sms(),  # noqa: E731
                                    E * triton.cdiv(K, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]))),)
    args = (x, dy, dw, offs, T, K, N, E, xs[0], xs[1], ys[0], ys[1], *dw.stride(), triton.next_power_of_2(T))
    flags = dict(USE_TMA=use_tma, WIDEN=widen_for_dot(x.dtype))
    bound = _wgrad_tuned.bind(grid, *args, **flags) if key is not None and offs.is_contiguous() else None
    if hasattr(bound, "launch_with"):
        bound()
        bound.scratch_allocator = runtime.tma_scratch  # descriptor scratch handed over directly
        _LAUNCHES.keep(key, ((E, K, N), bound.forget("x_ptr", "dy_ptr", "dw_ptr", "offs_ptr"),
                             use_tma and not bound.owns_scratch))
    elif bound is not None:  # the autotuner's choice is not readable here: launch through it
        bound()
    else:
        _wgrad_tuned[grid](*args[:3], offs.contiguous(), *args[4:], **flags)
    return dw


@torch.library.custom_op("gemm_kernels::grouped_mm_wgrad", mutates_args=())
def _wgrad_op(x: torch.Tensor, dy: torch.Tensor, offs: torch.Tensor, tma: bool | None) -> torch.Tensor:
    return launch(x, dy, offs, tma)


@_wgrad_op.register_fake
def _(x, dy, offs, tma):
    _check(x, dy, offs)
    return x.new_empty((offs.shape[0], x.shape[1], dy.shape[1]))


# The differentiable grouped_mm_wgrad and this op's backward (grouped_mm's forward) live in moe.py,
# which imports this module: never the reverse.


def grouped_mm_wgrad_ref(x, dy, offs) -> torch.Tensor:
    """float64 reference of :func:`~gemm_kernels.kernels.moe.grouped_mm_wgrad` (a loop over experts)."""
    ends = offs.tolist()
    dw = torch.zeros((len(ends), x.shape[1], dy.shape[1]), dtype=torch.float64, device=x.device)
    start = 0
    for e, end in enumerate(ends):
        dw[e] = x[start:end].double().T @ dy[start:end].double()
        start = end
    return dw
