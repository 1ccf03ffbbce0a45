"""Triton GEMM, from pointers to persistent TMA: the kernels and tools behind the notebooks.

Importing this package first decides where kernels run (``gemm_kernels.runtime``):
compiled on a CUDA GPU, or in Triton's interpreter on the CPU.
"""

from . import runtime  # noqa: I001  (must run before any kernel module defines a @triton.jit)
from .runtime import DEVICE, describe, gpu_name, interpreted, num_sms, on_gpu, supports_tma
from .matmul import matmul, matmul_ref, trace_program_tiles
from .persistent import matmul_persistent, matmul_tma
from .streamk import matmul_streamk
from .grouped import GroupedMatmulPlan, grouped_matmul, grouped_matmul_ref
from .moe import grouped_mm, grouped_mm_ref, route_tokens

__all__ = [
    "DEVICE", "describe", "gpu_name", "interpreted", "num_sms", "on_gpu", "supports_tma",
    "matmul", "matmul_ref", "trace_program_tiles", "matmul_persistent", "matmul_tma", "matmul_streamk",
    "GroupedMatmulPlan", "grouped_matmul", "grouped_matmul_ref", "grouped_mm", "grouped_mm_ref", "route_tokens",
]

# Tile schedules you can see: the models are plain numpy (cheap to import); the explorers
# pull in ipywidgets and matplotlib, so they load on first use.
from .schedule import grouped_gemm_schedule, tile_schedule  # noqa: E402
from .l2model import H100_L2_BYTES, H100_NUM_SMS, l2_traffic, reuse_profile  # noqa: E402

_EXPLORERS = ("schedule_explorer", "pointer_explorer", "grouped_schedule_explorer")
__all__ += ["tile_schedule", "grouped_gemm_schedule", "l2_traffic", "reuse_profile", "H100_L2_BYTES",
            "H100_NUM_SMS", *_EXPLORERS]


def __getattr__(name):
    if name in _EXPLORERS:
        from . import widgets
        return getattr(widgets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
