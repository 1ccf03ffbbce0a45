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


def range_options_supported() -> set:
    """Loop options of ``tl.range`` the installed Triton knows (``flatten``, ``warp_specialize``, ...).

    The persistent kernels always pass FLATTEN / WARP_SPECIALIZE to ``tl.range``; a config may
    switch one on only where Triton has it (both exist from Triton 3.4 on)."""
    import inspect

    import triton.language as tl

    return set(inspect.signature(tl.range.__init__).parameters) - {"self", "arg1", "arg2", "step"}


# Loop/epilogue switches of the persistent kernels (constexprs), off unless a config turns them on:
# FLATTEN merges the tile loop and the K loop so the pipeline keeps loading across tiles,
# WARP_SPECIALIZE splits producer (loads) and consumer (MMA) warps, EPILOGUE_SUBTILE (TMA only)
# stores C in two halves so the epilogue needs half the registers/shared memory at a time.
PERSISTENT_LOOP_DEFAULTS = {"FLATTEN": False, "WARP_SPECIALIZE": False}


def _persistent_cfg(bm, bn, bk, stages, warps, **extra):
    unknown = {k.lower() for k, v in extra.items() if v and k in PERSISTENT_LOOP_DEFAULTS} - range_options_supported()
    if unknown:  # never hand the kernel a loop option this Triton would reject
        return None
    return _cfg(bm, bn, bk, stages, warps, **{**PERSISTENT_LOOP_DEFAULTS, **extra})


def persistent_configs(gpu: bool | None = None):
    """Configs for ``matmul_persistent``.  ``gpu=True`` gives the GPU list even in the interpreter
    (the compile view builds Hopper code on a CPU machine)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(**PERSISTENT_LOOP_DEFAULTS)
    cfgs = [
        _persistent_cfg(128, 128, 64, 3, 8),
        _persistent_cfg(128, 256, 64, 3, 8),
        _persistent_cfg(128, 128, 64, 4, 4),
        _persistent_cfg(64, 128, 64, 4, 4),
        _persistent_cfg(128, 64, 64, 4, 4),
        _persistent_cfg(128, 128, 64, 3, 8, FLATTEN=True),
    ]
    return [c for c in cfgs if c is not None]


def tma_configs(gpu: bool | None = None):
    """Configs for ``matmul_tma`` (Hopper): as persistent_configs, plus EPILOGUE_SUBTILE."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(**PERSISTENT_LOOP_DEFAULTS, EPILOGUE_SUBTILE=False)
    cfgs = [
        _persistent_cfg(128, 128, 64, 4, 8, EPILOGUE_SUBTILE=False),
        _persistent_cfg(128, 256, 64, 3, 8, EPILOGUE_SUBTILE=True),
        _persistent_cfg(128, 128, 64, 4, 4, EPILOGUE_SUBTILE=False),
        _persistent_cfg(64, 128, 64, 4, 4, EPILOGUE_SUBTILE=False),
        _persistent_cfg(128, 64, 64, 4, 4, EPILOGUE_SUBTILE=False),
        _persistent_cfg(128, 128, 64, 4, 8, FLATTEN=True, EPILOGUE_SUBTILE=True),
    ]
    return [c for c in cfgs if c is not None]


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
