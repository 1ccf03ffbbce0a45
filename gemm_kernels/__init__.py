"""Triton GEMM, from pointers to persistent TMA: the kernels and tools behind the notebooks.

Importing this package first decides where kernels run (``gemm_kernels.runtime``):
compiled on a CUDA GPU, or in Triton's interpreter on the CPU.
"""

from . import runtime  # noqa: I001  (must run before any kernel module defines a @triton.jit)
from .runtime import DEVICE, describe, gpu_name, interpreted, num_sms, on_gpu, supports_tma
from .matmul import matmul, matmul_ref, trace_program_tiles
from .grouped import grouped_matmul, grouped_matmul_ref
from .moe import grouped_mm, grouped_mm_ref, route_tokens

__all__ = [
    "DEVICE", "describe", "gpu_name", "interpreted", "num_sms", "on_gpu", "supports_tma",
    "matmul", "matmul_ref", "trace_program_tiles",
    "grouped_matmul", "grouped_matmul_ref", "grouped_mm", "grouped_mm_ref", "route_tokens",
]
