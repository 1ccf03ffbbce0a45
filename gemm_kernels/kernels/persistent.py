"""Persistent GEMM kernels: a fixed number of programs, each looping over many output tiles.

``matmul`` (one program per tile) lets the hardware schedule programs in waves; when the tile
count is not a multiple of what fits on the GPU, the last wave runs half empty.  A persistent
kernel launches ``min(num_sms, num_tiles)`` programs once and each walks the tiles
``pid, pid + NUM_PROGRAMS, pid + 2 * NUM_PROGRAMS, ...`` (``models.tiles.persistent_schedule`` is
the numpy mirror; ``lab.traces.trace_persistent_tiles`` proves the kernel does exactly that).

Two kernels, same schedule, same epilogue (bias + activation on the fp32 accumulator):

``matmul_persistent``  pointer loads with masks, any strides.
``matmul_tma``         Hopper's Tensor Memory Accelerator: tensor descriptors built in the kernel
                       (``tma.py``).  The hardware bounds-checks every block (zero fill on reads,
                       clipped writes), so ragged shapes need no masks; in exchange every input
                       needs a unit-stride dimension and 16-byte aligned base and strides
                       (``tma.tma_layout`` says what is wrong and how to fix it).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import runtime
from ..runtime import TMA_ALIGN_BYTES
from . import checks, configs, launches, tma
from .autograd import grad_enabled_for, matmul_grads
from .epilogue import bias_and_activation, load_bias, store_tile_masked, widen_for_dot
from .matmul import POINTER_SOURCES, k_loop_pointers, matmul
from .tiles import record_tile, tile_coords


# ----------------------------------------------------------------------------- persistent, pointer loads
@triton.jit
def _matmul_persistent_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, trace_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUPED: tl.constexpr, GROUP_SIZE_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, WIDEN: tl.constexpr, TRACE: tl.constexpr,
    FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    step = 0  # how many tiles this program has done so far (TRACE records it)
    # The grid has at most NUM_PROGRAMS programs, so striding by NUM_PROGRAMS visits every tile once.
    for tile in tl.range(pid, num_tiles, NUM_PROGRAMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUPED, GROUP_SIZE_M)
        if TRACE:
            record_tile(trace_ptr, tile, pid, step, pid_m, pid_n)
        # As in matmul: rows/columns past the edge wrap (% M, % N) so loads need no M/N mask
        # (their results are never stored); only the K tail is masked to zero.  No contiguity
        # hints: after the wrap they would be false (see matmul.py).
        offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        bias = load_bias(bias_ptr, pid_n * BLOCK_N, N, BLOCK_N, HAS_BIAS)
        acc = k_loop_pointers(a_ptr, b_ptr, offs_m, offs_n, K, stride_am, stride_ak, stride_bk, stride_bn,
                              BLOCK_M, BLOCK_N, BLOCK_K, WIDEN)
        acc = bias_and_activation(acc, bias, HAS_BIAS, ACTIVATION)
        store_tile_masked(acc, c_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)
        step += 1


# ----------------------------------------------------------------------------- persistent, TMA
@triton.jit(do_not_specialize=configs.ROWS)  # M only bounds TMA's tiles
def _matmul_tma_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, trace_ptr,
    M, N, K,
    stride_a, stride_b, stride_c,  # the one non-unit stride of each matrix (in elements)
    stride_cn,  # C's column stride, used only by the pointer-store fallback (C_TMA=False)
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUPED: tl.constexpr, GROUP_SIZE_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    A_COL_MAJOR: tl.constexpr, B_COL_MAJOR: tl.constexpr, C_TMA: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, WIDEN: tl.constexpr, TRACE: tl.constexpr,
    FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
):
    a_desc, b_desc = tma.input_descriptors(a_ptr, b_ptr, M, N, K, stride_a, stride_b,
                                           A_COL_MAJOR, B_COL_MAJOR, BLOCK_M, BLOCK_N, BLOCK_K)
    c_out = tma.output_target(c_ptr, M, N, stride_c, C_TMA, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)

    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    step = 0
    for tile in tl.range(pid, num_tiles, NUM_PROGRAMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUPED, GROUP_SIZE_M)
        if TRACE:
            record_tile(trace_ptr, tile, pid, step, pid_m, pid_n)
        tma.whole_tile(a_desc, b_desc, c_out, bias_ptr, pid_m, pid_n, M, N, k_tiles, stride_c, stride_cn,
                       A_COL_MAJOR, B_COL_MAJOR, C_TMA, HAS_BIAS, ACTIVATION, WIDEN, EPILOGUE_SUBTILE,
                       BLOCK_M, BLOCK_N, BLOCK_K)
        step += 1


# Autotune keys (configs.SINGLE_GEMM_KEY): sizes, order, epilogue and layout flags, never pointers.
_persistent_tuned = configs.TunedKernel(_matmul_persistent_kernel, configs.persistent_configs(),
                                       key=configs.SINGLE_GEMM_KEY)
_tma_tuned = configs.TunedKernel(_matmul_tma_kernel, configs.tma_configs(),
                                key=[*configs.SINGLE_GEMM_KEY, "A_COL_MAJOR", "B_COL_MAJOR"])


# ----------------------------------------------------------------------------- launchers
def _persistent_grid(M, N, num_programs):
    return lambda meta: (min(num_programs, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)


def _persistent_args(a, b, c, bias, trace, *, order, group_size_m, num_programs, activation):
    """Every argument of ``_matmul_persistent_kernel`` except the config's (blocks, loop switches)."""
    M, K = a.shape
    N = b.shape[1]
    return dict(
        a_ptr=a, b_ptr=b, c_ptr=c, bias_ptr=bias if bias is not None else c, trace_ptr=trace if trace is not None else c,
        M=M, N=N, K=K,
        stride_am=a.stride(0), stride_ak=a.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1),
        stride_cm=c.stride(0), stride_cn=c.stride(1),
        GROUPED=order == "grouped", GROUP_SIZE_M=group_size_m, NUM_PROGRAMS=num_programs,
        HAS_BIAS=bias is not None, ACTIVATION=activation, WIDEN=widen_for_dot(a.dtype), TRACE=trace is not None,
    )


def _tma_args(a, b, c, bias, trace, *, order, group_size_m, num_programs, activation, launcher="matmul_tma"):
    """Every argument of ``_matmul_tma_kernel`` except the config's; checks TMA can read a and b
    (an error names ``launcher``, the call that needs it)."""
    M, K = a.shape
    N = b.shape[1]
    a_col_major, stride_a = tma.tma_layout(a, "a", launcher)
    b_col_major, stride_b = tma.tma_layout(b, "b", launcher)
    # C is ours (contiguous, fresh allocation): TMA stores need its rows 16-byte aligned too.
    c_tma = c.stride(1) == 1 and c.data_ptr() % TMA_ALIGN_BYTES == 0 and (
        c.stride(0) * c.element_size() % TMA_ALIGN_BYTES == 0 or M == 1)
    stride_c = c.stride(0) if (M > 1 or not c_tma) else runtime.tma_row_length(N, c.element_size())
    return dict(
        a_ptr=a, b_ptr=b, c_ptr=c, bias_ptr=bias if bias is not None else c, trace_ptr=trace if trace is not None else c,
        M=M, N=N, K=K, stride_a=stride_a, stride_b=stride_b, stride_c=stride_c, stride_cn=c.stride(1),
        GROUPED=order == "grouped", GROUP_SIZE_M=group_size_m, NUM_PROGRAMS=num_programs,
        A_COL_MAJOR=a_col_major, B_COL_MAJOR=b_col_major, C_TMA=c_tma,
        HAS_BIAS=bias is not None, ACTIVATION=activation, WIDEN=widen_for_dot(a.dtype), TRACE=trace is not None,
    )


_KEPT = {"persistent": launches.LaunchCache(), "tma": launches.LaunchCache()}


def _launch(kind, a, b, *, activation, bias, order, group_size_m, num_programs, config, trace=None):
    """Shared body of both launchers (and of the trace helper).  Returns C."""
    key = None
    if trace is None and launches.keeping():
        key = launches.call_key((a, b, bias), (order, group_size_m, activation, num_programs,
                                               launches.config_key(config)))
        kept = _KEPT[kind].get(key)
        if kept is not None:  # checked before with this key: launch
            return kept(a=a, b=b, bias=bias)
    a, b, bias = checks.resolve_lazy_views(a, b, bias)
    bias, group_size_m = checks.check_matmul_inputs(a, b, order, group_size_m, activation, bias)
    num_programs = checks.check_num_programs(num_programs)
    config_kwargs = None if config is None else configs.explicit_config_kwargs(config, kind)
    M, K = a.shape
    N = b.shape[1]
    if kind == "tma":
        runtime.require_tma("matmul_tma", "Use matmul_persistent (same schedule, pointer loads) instead.")
    if M == 0 or N == 0 or K == 0:  # no tile or an empty sum: matmul already handles it like torch
        return matmul(a, b, activation=activation, bias=bias)
    # more programs than C has elements only add idle ones (the grid is capped at the tiles): the
    # same launch, and a NUM_PROGRAMS constexpr within 32 bits (10**30 would not compile)
    num_programs = min(num_programs, M * N)
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    make_args = _tma_args if kind == "tma" else _persistent_args
    args = make_args(a, b, c, bias, trace, order=order, group_size_m=group_size_m,
                     num_programs=num_programs, activation=activation)
    if kind == "tma":
        runtime.ensure_tma_allocator()
    grid = _persistent_grid(M, N, num_programs)
    launches.launch_and_keep(_KEPT[kind], key, _tma_tuned if kind == "tma" else _persistent_tuned, grid, args, c,
                             POINTER_SOURCES, config_kwargs=config_kwargs, uses_tma=kind == "tma")
    return c


def matmul_persistent(a, b, *, activation=None, bias=None, order="grouped", group_size_m=8,
                      num_programs=None, config=None):
    """``activation(a @ b + bias)`` with a persistent kernel: ``min(num_programs, tiles)`` programs
    each loop over the tiles ``pid, pid + num_programs, ...`` of C (``tiles.persistent_schedule``).

    Same contract as :func:`gemm_kernels.kernels.matmul` (any M, N, K >= 0 and strides; fp16/bf16/fp32;
    ``order`` "grouped" or "row_major").  ``num_programs`` defaults to the SM count
    (``runtime.num_sms()``).  ``config`` (a ``triton.Config``) skips autotuning and runs that config.
    """
    return _launch("persistent", a, b, activation=activation, bias=bias, order=order,
                   group_size_m=group_size_m, num_programs=num_programs, config=config)


def matmul_tma(a, b, *, activation=None, bias=None, order="grouped", group_size_m=8, num_programs=None,
               config=None):
    """Persistent matmul whose A/B tiles (and C tiles) move through TMA tensor descriptors.

    Like :func:`matmul_persistent`, plus what TMA demands of its inputs: each of ``a`` and ``b``
    must be row-major or column-major (one stride equal to 1) with the other stride and the base
    address 16-byte aligned; anything else raises ValueError saying which tensor and why
    (``tma_aligned(x)`` makes a readable copy).  C is written by TMA when its rows are 16-byte
    aligned (``N * itemsize % 16 == 0``) and by masked stores otherwise.

    Needs sm_90+ on a GPU: on an older GPU it raises RuntimeError (no silent fallback, so a
    benchmark never reports pointer-kernel numbers under the TMA name).  Runs in the interpreter.

    Differentiable in a, b and bias, twice too (``create_graph=True``): the backward products
    run through this kernel (``kernels.autograd``; a gradient whose rows TMA cannot read is
    copied into aligned rows).
    """
    if grad_enabled_for(a, b, bias):
        options = dict(order=order, group_size_m=group_size_m, num_programs=num_programs, config=config)
        return _MatmulTma.apply(a, b, bias, activation, options)
    return _launch("tma", a, b, activation=activation, bias=bias, order=order, group_size_m=group_size_m,
                   num_programs=num_programs, config=config)


class _MatmulTma(torch.autograd.Function):
    """``matmul_tma`` with its backward (``kernels.autograd.matmul_grads``) through ``matmul_tma``."""

    @staticmethod
    def forward(ctx, a, b, bias, activation, options):
        ctx.save_for_backward(a, b, bias)
        ctx.activation, ctx.options = activation, options
        return _launch("tma", a, b, activation=activation, bias=bias, **options)

    @staticmethod
    def backward(ctx, dc):
        a, b, bias = ctx.saved_tensors

        def product(x, y, bias):  # TMA reads any row-/column-major view with 16-byte aligned rows
            x = x if tma.descriptor_layouts(x) else tma.tma_aligned(x)
            y = y if tma.descriptor_layouts(y) else tma.tma_aligned(y)
            # matmul_tma itself: differentiable again under create_graph=True (double backward)
            return matmul_tma(x, y, activation=None, bias=bias, **ctx.options)

        da, db, dbias = matmul_grads(product, a, b, bias, ctx.activation, dc, ctx.needs_input_grad[:3])
        return da, db, dbias, None, None
