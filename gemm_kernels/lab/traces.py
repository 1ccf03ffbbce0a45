"""Traces: run the real kernels with TRACE on and read back which program did what.

Every kernel has a ``TRACE`` constexpr; when it is on, each tile (or Stream-K segment) is
recorded by ``kernels.tiles.record_tile`` into an int32 ``[rows, 4]`` tensor poisoned with -1,
so a tile no program reached shows.  Tests compare these traces with the numpy mirrors of
``gemm_kernels.models.tiles`` and the notebooks draw them: a picture is then a fact about the
kernel, not an illustration of it.
"""

from __future__ import annotations

import torch
import triton

from .. import runtime
from ..kernels import checks, configs
from ..kernels.epilogue import widen_for_dot
from ..kernels.grouped import TL_DTYPES, USE_POINTER_PATH, _autotune_key, _grouped_matmul_kernel, _prepare
from ..kernels.matmul import _matmul_kernel
from ..kernels.moe import _check_inputs as _check_moe_inputs, _grouped_mm_kernel, _launch_args, _plan_tma, num_programs_for
from ..kernels.persistent import _launch as _launch_persistent
from ..kernels.streamk import _launch_streamk
from ..kernels.tma import tma_aligned
from ..models.tiles import STREAMK_FIELDS, cdiv, streamk_default_tiles
from ..runtime import ensure_tma_allocator

#: columns of ``trace_persistent_tiles``' result, per tile index (the last four of models.tiles.SCHEDULE_FIELDS)
PERSISTENT_TRACE_FIELDS = ("program", "step", "pid_m", "pid_n")
#: columns of ``trace_grouped_schedule``'s result, one row per tile
GROUPED_TRACE_FIELDS = ("program", "problem", "pid_m", "pid_n")
#: columns of ``trace_moe_schedule``'s result, one row per tile
MOE_TRACE_FIELDS = ("program", "expert", "pid_m", "pid_n")


def trace_program_tiles(M, N, K=16, *, block_m=None, block_n=None, block_k=None, order="grouped",
                        group_size_m=8, dtype=torch.float16):
    """Run the real ``_matmul_kernel`` with tracing on and return what it did.

    Returns a ``[num_programs, 2]`` int tensor: row ``pid`` is the ``(pid_m, pid_n)`` tile that
    program ``pid`` computed (poisoned with -1 first, so a program that wrote nothing shows).
    Block sizes default to the interpreter's fixed config.
    """
    blocks = configs.INTERPRETER_BLOCKS
    bm, bn, bk = configs.blocks_or_defaults(blocks, block_m, block_n, block_k)
    M, N, K = (checks.check_int(v, name, minimum=0) for v, name in ((M, "M"), (N, "N"), (K, "K")))
    a = torch.randn(M, K, device=runtime.DEVICE).to(dtype)
    b = torch.randn(K, N, device=runtime.DEVICE).to(dtype)
    _, group_size_m = checks.check_matmul_inputs(a, b, order, group_size_m, None, None)
    c = torch.empty((M, N), device=a.device, dtype=dtype)
    num_programs = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    trace = torch.full((num_programs, 4), -1, dtype=torch.int32, device=a.device)
    _matmul_kernel[(num_programs,)](
        a, b, c, c, trace,
        M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
        GROUPED=order == "grouped", GROUP_SIZE_M=group_size_m,
        HAS_BIAS=False, ACTIVATION=None, WIDEN=widen_for_dot(dtype), TRACE=True,
    )
    return trace[:, 2:].cpu()  # record_tile wrote (pid, 0, pid_m, pid_n)


def trace_persistent_tiles(M, N, K=16, *, tma=False, block_m=None, block_n=None, block_k=None,
                           order="grouped", group_size_m=8, num_programs=None, dtype=torch.float16):
    """Run the real persistent kernel (TMA one if ``tma``) with tracing on and return what it did.

    Returns an int ``[num_tiles, 4]`` tensor indexed by tile: columns :data:`PERSISTENT_TRACE_FIELDS`
    ``(program, step, pid_m, pid_n)``: the program that computed the tile, how many tiles it
    had done before, and the tile's coordinates.  Poisoned with -1 first, so a tile no program
    reached shows.  Compare with ``tiles.persistent_schedule(...)[:, 1:6]`` minus the problem column.
    """
    blocks = configs.INTERPRETER_BLOCKS
    bm, bn, bk = configs.blocks_or_defaults(blocks, block_m, block_n, block_k)
    M, N, K = (checks.check_int(v, name, minimum=0) for v, name in ((M, "M"), (N, "N"), (K, "K")))
    a = torch.randn(M, K).to(runtime.DEVICE, dtype)
    b = torch.randn(K, N).to(runtime.DEVICE, dtype)
    if tma:  # any M, N: give TMA 16-byte aligned rows
        a, b = tma_aligned(a), tma_aligned(b)
    num_tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    trace = torch.full((num_tiles, 4), -1, dtype=torch.int32, device=a.device)
    config = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk},
                           num_warps=4, num_stages=1 if runtime.interpreted() else 3)
    _launch_persistent("tma" if tma else "persistent", a, b, activation=None, bias=None, order=order,
            group_size_m=group_size_m, num_programs=num_programs, config=config, trace=trace)
    return trace.cpu()


def trace_streamk_segments(M, N, K, *, block_m=None, block_n=None, block_k=None, order="grouped", group_size_m=8,
                           num_programs=None, sk_tiles=None, dtype=torch.float16):
    """Run the Stream-K kernel with tracing on; returns the int ``[rows, 4]`` tensor of
    ``tiles.streamk_segments`` (columns :data:`STREAMK_FIELDS`) as the kernel recorded it.
    Poisoned with -1 first, so a segment no program ran shows."""
    blocks = configs.INTERPRETER_BLOCKS
    bm, bn, bk = configs.blocks_or_defaults(blocks, block_m, block_n, block_k)
    M, N, K = (checks.check_int(v, name, minimum=0) for v, name in ((M, "M"), (N, "N"), (K, "K")))
    num_programs = checks.check_num_programs(num_programs)
    a = tma_aligned(torch.randn(M, K).to(runtime.DEVICE, dtype))
    b = tma_aligned(torch.randn(K, N).to(runtime.DEVICE, dtype))
    num_tiles = cdiv(M, bm) * cdiv(N, bn)
    dp_tiles = num_tiles - (streamk_default_tiles(num_tiles, num_programs, cdiv(K, bk)) if sk_tiles is None else sk_tiles)
    # max(0, ...): an sk_tiles out of range is reported by the launcher, not by torch.full
    trace = torch.full((max(0, dp_tiles) + 2 * num_programs, len(STREAMK_FIELDS)), -1, dtype=torch.int32,
                       device=a.device)
    config = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk},
                           num_warps=4, num_stages=1 if runtime.interpreted() else 3)
    _launch_streamk(a, b, activation=None, bias=None, order=order, group_size_m=group_size_m,
                    num_programs=num_programs, config=config, sk_tiles=sk_tiles, trace=trace)
    return trace.cpu()


def trace_grouped_schedule(group_a, group_b, *, tma=False, block_m=None, block_n=None, block_k=None,
                           group_size_m=None, num_programs=None):
    """Run the real ``_grouped_matmul_kernel`` with tracing on; returns ``(outputs, trace)``.

    ``trace`` is an int32 ``[total_tiles, 4]`` CPU tensor with columns :data:`GROUPED_TRACE_FIELDS`
    (-1 where no program wrote), row ``t`` describing global tile ``t``: the same rows, in the
    same order, as the ``program, problem, pid_m, pid_n`` columns of ``tiles.multi_problem_schedule``.
    Blocks default to the config the kernel uses on this machine (the interpreter's fixed one or the
    first GPU config); ``num_programs`` defaults to ``min(num_sms(), total_tiles)``.
    """
    if tma is True:
        runtime.require_tma("trace_grouped_schedule(tma=True)", USE_POINTER_PATH)
    if num_programs is not None:  # a launch grid: a positive int (-2 launched nothing, 2.5 crashed)
        num_programs = checks.check_int(num_programs, "num_programs")
    cfg = configs.grouped_configs()[0].kwargs
    bm, bn, bk = configs.blocks_or_defaults(cfg, block_m, block_n, block_k)
    group = cfg["GROUP_SIZE_M"] if group_size_m is None else checks.check_int(group_size_m, "group_size_m")
    shapes, group_c, problems, tile_starts, facts, total_tiles = _prepare(group_a, group_b, tma, [(bm, bn)])
    total = total_tiles[(bm, bn)]
    trace = torch.full((total, len(GROUPED_TRACE_FIELDS)), -1, dtype=torch.int32, device=problems.device)
    if total:
        if tma:
            ensure_tma_allocator()
        dtype = group_a[0].dtype
        programs = min(runtime.num_sms(), total) if num_programs is None else num_programs
        _grouped_matmul_kernel[(programs,)](
            problems, tile_starts, trace,
            len(shapes), **_autotune_key(shapes),
            DTYPE=TL_DTYPES[dtype], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_SIZE_M=group, STARTS_ROW=0,
            USE_TMA=tma, **facts, WIDEN=widen_for_dot(dtype), TRACE=True,
        )
    return group_c, trace.cpu()


def trace_moe_schedule(x, w, offs, *, tma=False, block_m=None, block_n=None, block_k=None,
                       group_size_m=None, num_programs=None):
    """Run the real ``_grouped_mm_kernel`` with tracing on; returns ``(out, trace)``.

    ``trace`` is an int32 ``[total_tiles, 4]`` CPU tensor, columns :data:`MOE_TRACE_FIELDS` (-1 where
    no program wrote), row ``t`` for global tile ``t``: equal to the ``program, problem, pid_m,
    pid_n`` columns of ``tiles.multi_problem_schedule([(rows_e, N) ...], ..., num_programs)``.
    Blocks default to the config used on this machine; ``num_programs`` to the launcher's grid.
    """
    if num_programs is not None:  # a launch grid: a positive int (-2 launched nothing, 2.5 crashed)
        num_programs = checks.check_int(num_programs, "num_programs")
    offs = _check_moe_inputs(x, w, offs, check_offs=True)
    cfg = configs.moe_configs()[0].kwargs
    bm, bn, bk = configs.blocks_or_defaults(cfg, block_m, block_n, block_k)
    group = cfg["GROUP_SIZE_M"] if group_size_m is None else checks.check_int(group_size_m, "group_size_m")
    T, K = x.shape
    E, _, N = w.shape
    ends = [0] + offs.tolist() + [T]  # the last "problem" is the tail offs[-1]:T, stored as zeros
    total = sum(triton.cdiv(ends[e + 1] - ends[e], bm) for e in range(E + 1)) * triton.cdiv(N, bn)
    out = torch.empty((T, N), device=x.device, dtype=x.dtype)
    trace = torch.full((total, len(MOE_TRACE_FIELDS)), -1, dtype=torch.int32, device=x.device)
    if total and K:
        flags = _plan_tma(x, w, out, tma)
        if flags["USE_TMA"] or flags["OUT_TMA"]:
            ensure_tma_allocator()
        programs = num_programs_for(T, E, N, bm, bn) if num_programs is None else num_programs
        _grouped_mm_kernel[(programs,)](
            x, w, out, offs, offs, trace, offs, offs,
            **_launch_args(x, w, offs, out, flags),
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_SIZE_M=group, TRACE=True, CHECK_OFFS=False,
        )
    return out, trace.cpu()
