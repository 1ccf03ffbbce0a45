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


def _tuning_list(cfgs, gpu=None):
    """All configs to autotune over, or only the first (the default) with GEMM_KERNELS_AUTOTUNE=0.
    ``gpu=True`` (the compile view) always gets the whole list."""
    cfgs = [c for c in cfgs if c is not None]
    return cfgs if gpu or runtime.autotune_enabled() else cfgs[:1]


def matmul_configs():
    """Configs for the one-program-per-tile kernel (naive and grouped order)."""
    if runtime.interpreted():
        return _interpreter()
    return _tuning_list([
        _cfg(128, 256, 64, 3, 8),
        _cfg(256, 128, 64, 3, 8),
        _cfg(128, 128, 64, 4, 8),
        _cfg(128, 128, 64, 4, 4),
        _cfg(128, 64, 64, 4, 4),
        _cfg(64, 128, 64, 4, 4),
        _cfg(64, 64, 64, 4, 4),
        _cfg(64, 32, 32, 5, 2),
    ])


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
    # Measured on an H100 (2026-11-22, 4096^3 / 8192^3 fp16 and bf16): 128x256x64, 3 stages,
    # 8 warps led (0.89-1.02x cuBLAS); 128x128 tiles trailed by 10-15%.  The smaller ones are
    # for small or thin problems, where 128x256 tiles leave most SMs idle.
    return _tuning_list([
        _persistent_cfg(128, 256, 64, 3, 8),
        _persistent_cfg(128, 256, 64, 3, 8, FLATTEN=True),
        _persistent_cfg(256, 128, 64, 3, 8),
        _persistent_cfg(128, 128, 64, 4, 4),
        _persistent_cfg(64, 128, 64, 4, 4),
        _persistent_cfg(128, 64, 64, 4, 4),
    ], gpu)


def tma_configs(gpu: bool | None = None):
    """Configs for ``matmul_tma`` (Hopper): as persistent_configs, plus EPILOGUE_SUBTILE."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(**PERSISTENT_LOOP_DEFAULTS, EPILOGUE_SUBTILE=False)
    # Same H100 sweep: 128x256x64/3 stages/8 warps with and without the subtiled epilogue, the
    # flattened loop and warp specialization all land within the run-to-run noise of each other
    # (0.93-1.01x cuBLAS), so all four stay and the autotuner picks per shape.
    return _tuning_list([
        _persistent_cfg(128, 256, 64, 3, 8, EPILOGUE_SUBTILE=False),
        _persistent_cfg(128, 256, 64, 3, 8, EPILOGUE_SUBTILE=True),
        _persistent_cfg(128, 256, 64, 3, 8, FLATTEN=True, EPILOGUE_SUBTILE=True),
        _persistent_cfg(128, 256, 64, 3, 8, WARP_SPECIALIZE=True, EPILOGUE_SUBTILE=True),
        _persistent_cfg(256, 128, 64, 3, 8, EPILOGUE_SUBTILE=True),
        _persistent_cfg(128, 128, 64, 4, 4, EPILOGUE_SUBTILE=False),
        _persistent_cfg(64, 128, 64, 4, 4, EPILOGUE_SUBTILE=False),
        _persistent_cfg(128, 64, 64, 4, 4, EPILOGUE_SUBTILE=False),
    ], gpu)


#: GROUP_SIZE_M of the grouped kernels in the interpreter: small, so the interpreter's few tile
#: rows per problem still form several groups (and a short last one).
INTERPRETER_GROUP_SIZE_M = 4


def grouped_configs(gpu: bool | None = None):
    """Configs for ``grouped_matmul`` (pointer-array grouped GEMM, both the pointer and TMA paths).

    A short Hopper list to start from; GROUP_SIZE_M is part of the config so it can be tuned too.
    ``gpu=True`` gives the GPU list even in the interpreter (for the compile view)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(GROUP_SIZE_M=INTERPRETER_GROUP_SIZE_M)
    return _tuning_list([
        _cfg(128, 128, 64, 4, 8, GROUP_SIZE_M=8),
        _cfg(128, 128, 64, 3, 4, GROUP_SIZE_M=8),
        _cfg(128, 256, 64, 3, 8, GROUP_SIZE_M=8),
        _cfg(64, 128, 64, 4, 4, GROUP_SIZE_M=8),
        _cfg(128, 64, 64, 4, 4, GROUP_SIZE_M=8),
        _cfg(64, 64, 64, 4, 4, GROUP_SIZE_M=8),
    ], gpu)


def moe_configs(gpu: bool | None = None):
    """Configs for ``grouped_mm`` (MoE: many experts, often few rows each, so BLOCK_M=64 is in).
    ``gpu=True`` gives the GPU list even in the interpreter (for the compile view)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(GROUP_SIZE_M=INTERPRETER_GROUP_SIZE_M)
    # H100 sweep over Mixtral / DeepSeek-V3 / DeepSeek-V2-Lite shapes (2026-11-22): 128x256x64
    # won most rows (up to 1.26x torch._grouped_mm); 64-row tiles won where experts get few
    # rows; 64x64 tiles never won (0.4-0.9x) and were dropped.
    return _tuning_list([
        _cfg(128, 256, 64, 3, 8, GROUP_SIZE_M=8),
        _cfg(128, 128, 64, 4, 8, GROUP_SIZE_M=8),
        _cfg(128, 128, 64, 4, 4, GROUP_SIZE_M=8),
        _cfg(128, 128, 128, 3, 8, GROUP_SIZE_M=8),
        _cfg(64, 256, 64, 4, 4, GROUP_SIZE_M=8),
        _cfg(64, 256, 64, 3, 8, GROUP_SIZE_M=8),
        _cfg(64, 128, 128, 3, 4, GROUP_SIZE_M=8),
    ], gpu)
