"""Notebook 08's Gluon primer: one tiny ``@gluon.jit`` kernel per idea the consumer-mainloop
exercise uses, each compiled for sm_90 on any machine through the compile view.

* ``layout_copy``: a register layout (``gl.BlockedLayout``) spelled out, and the vector loads it gives;
* ``tma_copy``: shared memory, a TMA tensor descriptor, and an mbarrier (init, expect, wait);
* ``one_wgmma``: ``warpgroup_mma`` on two shared-memory tiles, asynchronous, then ``warpgroup_mma_wait``;
* ``two_partitions``: ``gl.warp_specialize``, a worker warp arriving on a barrier the default
  partition waits on.

Only the Gluon calls ``kernels/matmul_ws.py`` makes, plus ``gl.BlockedLayout`` (the Triton 3.6
to 3.9 API the package supports).  The kernels show the calls, not the ring protocol: that is the exercise.
"""

from __future__ import annotations

import re

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .compile_view import KernelExample, compile_many

# Triton 3.6 names the TMA copies async_copy_global_to_shared / async_copy_shared_to_global (as matmul_ws)
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

#: the tile every example moves: 64 x 64 fp16 (8 KiB), a wgmma m64n64k16 shape
TILE = 64


@gluon.jit
def layout_copy(x_ptr, out_ptr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    # 8 fp16 (16 bytes) per thread along a row; a warp covers 4 rows x 64 columns; 4 warps stacked down
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 8], threads_per_warp=[4, 8], warps_per_cta=[4, 1],
                                            order=[1, 0])
    rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))  # a 1-D slice of the 2-D layout
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(rows, 1) * BLOCK_N + gl.expand_dims(cols, 0)
    x = gl.load(x_ptr + offs)  # each thread loads its 8 neighbours in one 16-byte access
    gl.store(out_ptr + offs, x * 2)


@gluon.jit
def tma_copy(in_desc, out_desc):
    smem = gl.allocate_shared_memory(in_desc.dtype, in_desc.block_type.shape, in_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    bar = bars.index(0)
    mbarrier.init(bar, count=1)  # one arrival completes a phase: the expect below
    mbarrier.expect(bar, in_desc.block_type.nbytes)  # ... and the phase also waits for these bytes
    # _tma_load is tma.async_load (async_copy_global_to_shared on Triton 3.6): the copy engine counts
    # the bytes on bar as they land
    _tma_load(in_desc, [0, 0], bar, smem)
    mbarrier.wait(bar, 0)  # phase 0 completed: the tile is in shared memory
    _tma_store(out_desc, [0, 0], smem)  # tma.async_store: shared memory -> global, by the copy engine
    tma.store_wait(0)


@gluon.jit
def one_wgmma(a_desc, b_desc, c_ptr, M: gl.constexpr, N: gl.constexpr):
    a_smem = gl.allocate_shared_memory(a_desc.dtype, a_desc.block_type.shape, a_desc.layout)
    b_smem = gl.allocate_shared_memory(b_desc.dtype, b_desc.block_type.shape, b_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    bar = bars.index(0)
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    _tma_load(a_desc, [0, 0], bar, a_smem)
    _tma_load(b_desc, [0, 0], bar, b_smem)
    mbarrier.wait(bar, 0)
    # the wgmma accumulator of one warpgroup (4 warps down M): matmul_ws's _acc_layout, the exercise's acc_layout
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N, 16])
    acc = gl.zeros([M, N], gl.float32, acc_layout)
    acc = warpgroup_mma(a_smem, b_smem, acc, is_async=True)  # issued: the tensor cores read shared memory
    acc = warpgroup_mma_wait(0, deps=(acc,))  # 0 left in flight: acc holds the product
    rows = gl.arange(0, M, layout=gl.SliceLayout(1, acc_layout))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, acc_layout))
    gl.store(c_ptr + gl.expand_dims(rows, 1) * N + gl.expand_dims(cols, 0), acc.to(gl.float16))


@gluon.jit
def _waiter(bar, out_ptr):
    mbarrier.wait(bar, 0)  # the default partition (this kernel's 4 warps) waits for the worker
    gl.store(out_ptr, 1)


@gluon.jit
def _signaller(bar, out_ptr):
    mbarrier.arrive(bar)  # the worker (1 warp) completes phase 0


@gluon.jit
def two_partitions(out_ptr):
    bars = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    bar = bars.index(0)
    mbarrier.init(bar, count=1)
    gl.warp_specialize([(_waiter, (bar, out_ptr)), (_signaller, (bar, out_ptr))], [1], [40])


# ----------------------------------------------------------------------------- the compiled examples
def _descriptor(t: torch.Tensor) -> TensorDescriptor:
    block = [TILE, TILE]
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block,
                            gl.NVMMASharedLayout.get_default_for(block, gl.float16))


def examples() -> dict[str, KernelExample]:
    """The four kernels as a launch on 64 x 64 fp16 tiles would compile them (no GPU needed)."""
    x = torch.zeros(TILE, TILE, dtype=torch.float16)
    one_warpgroup = triton.Config({}, num_warps=4)
    return {
        "layouts": KernelExample("layout_copy", layout_copy, dict(x_ptr=x, out_ptr=x, BLOCK_M=TILE, BLOCK_N=TILE),
                                 one_warpgroup, targets=(90,)),
        "tma": KernelExample("tma_copy", tma_copy, dict(in_desc=_descriptor(x), out_desc=_descriptor(x)),
                             one_warpgroup, targets=(90,), expect={90: ("cp.async.bulk.tensor", "mbarrier")}),
        "wgmma": KernelExample("one_wgmma", one_wgmma, dict(a_desc=_descriptor(x), b_desc=_descriptor(x), c_ptr=x,
                                                            M=TILE, N=TILE),
                               one_warpgroup, targets=(90,), expect={90: ("wgmma", "cp.async.bulk.tensor")}),
        "partitions": KernelExample("two_partitions", two_partitions, dict(out_ptr=torch.zeros(1, dtype=torch.int32)),
                                    one_warpgroup, targets=(90,), expect={90: ("mbarrier",)}),
    }


def compile_examples(target="sm_90") -> dict:
    """Every example compiled for ``target``, in one worker process: name -> CompileView."""
    found = examples()
    views = compile_many([ex.request(target) for ex in found.values()])
    return dict(zip(found, views))


def ptx_lines(view, pattern: str, limit: int = 4, width: int = 100) -> list[str]:
    """The first ``limit`` PTX lines of ``view`` matching the regex ``pattern``, stripped and cut
    to ``width`` characters (a wgmma lists all its accumulator registers)."""
    found = [" ".join(line.split()) for line in view.ptx.splitlines() if re.search(pattern, line)][:limit]
    return [line if len(line) <= width else line[:width - 3] + "..." for line in found]
