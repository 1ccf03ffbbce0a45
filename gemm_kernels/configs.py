"""Tuning, kept apart from the math: block shapes, warps and pipeline depth per kernel.

On a GPU each kernel is autotuned over a small, pruned list of configs (Hopper-friendly
shapes first).  In the interpreter every kernel gets one small fixed config: autotuning
needs a GPU driver to time anything, and small blocks keep the CPU emulation quick.
"""

from __future__ import annotations

import triton

from . import runtime

#: the single config used by every kernel in the interpreter (tl.dot needs blocks >= 16)
INTERPRETER_BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}


def _cfg(bm, bn, bk, stages, warps, **extra):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, **extra}, num_stages=stages, num_warps=warps)


def _interpreter(**extra):
    return [triton.Config({**INTERPRETER_BLOCKS, **extra}, num_stages=1, num_warps=4)]


def matmul_configs():
    """Configs for the one-program-per-tile kernel (naive and grouped order)."""
    if runtime.interpreted():
        return _interpreter()
    return [
        _cfg(128, 256, 64, 3, 8),
        _cfg(256, 128, 64, 3, 8),
        _cfg(128, 128, 64, 4, 8),
        _cfg(128, 128, 64, 4, 4),
        _cfg(128, 64, 64, 4, 4),
        _cfg(64, 128, 64, 4, 4),
        _cfg(64, 64, 64, 4, 4),
        _cfg(64, 32, 32, 5, 2),
    ]


#: GROUP_SIZE_M of the grouped kernels in the interpreter: small, so the interpreter's few tile
#: rows per problem still form several groups (and a short last one).
INTERPRETER_GROUP_SIZE_M = 4


def grouped_configs(gpu: bool | None = None):
    """Configs for ``grouped_matmul`` (pointer-array grouped GEMM, both the pointer and TMA paths).

    A short Hopper list to start from; GROUP_SIZE_M is part of the config so it can be tuned too.
    ``gpu=True`` gives the GPU list even in the interpreter (for the compile view)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(GROUP_SIZE_M=INTERPRETER_GROUP_SIZE_M)
    cfgs = [
        _cfg(128, 128, 64, 4, 8, GROUP_SIZE_M=8),
        _cfg(128, 128, 64, 3, 4, GROUP_SIZE_M=8),
        _cfg(128, 256, 64, 3, 8, GROUP_SIZE_M=8),
        _cfg(64, 128, 64, 4, 4, GROUP_SIZE_M=8),
        _cfg(128, 64, 64, 4, 4, GROUP_SIZE_M=8),
        _cfg(64, 64, 64, 4, 4, GROUP_SIZE_M=8),
    ]
    return cfgs if gpu or runtime.autotune_enabled() else cfgs[:1]  # GEMM_KERNELS_AUTOTUNE=0: the default only


def moe_configs(gpu: bool | None = None):
    """Configs for ``grouped_mm`` (MoE: many experts, often few rows each, so BLOCK_M=64 is in).
    ``gpu=True`` gives the GPU list even in the interpreter (for the compile view)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(GROUP_SIZE_M=INTERPRETER_GROUP_SIZE_M)
    cfgs = [
        _cfg(128, 128, 64, 4, 8, GROUP_SIZE_M=8),
        _cfg(128, 256, 64, 3, 8, GROUP_SIZE_M=8),
        _cfg(64, 128, 64, 4, 4, GROUP_SIZE_M=8),
        _cfg(64, 256, 64, 3, 8, GROUP_SIZE_M=8),
        _cfg(64, 64, 64, 4, 4, GROUP_SIZE_M=8),
    ]
    return cfgs if gpu or runtime.autotune_enabled() else cfgs[:1]  # GEMM_KERNELS_AUTOTUNE=0: the default only
