"""Triton GEMM, from pointers to persistent TMA: the kernels and tools behind the notebooks.

Importing this package first decides where kernels run (``gemm_kernels.runtime``): compiled on
a CUDA GPU, or in Triton's interpreter on the CPU.  The layers, bottom up (a module imports only
from its own layer, without a cycle, and from those below: ``tests/test_layers.py``):

``runtime``   where kernels run                      ``models/``   numpy mirrors and models (no Triton)
``kernels/``  the Triton kernels and their launchers ``results``   the committed GPU results, read
``viz/``      drawings and ipywidgets explorers      ``bench/``    the benchmark harness
``lab/``      traces, compile view, exercises        ``book/``     the course as a website

The public names below are the package's API; each loads its layer on first use.
"""

from __future__ import annotations

import importlib

from . import runtime  # noqa: I001  (must run before any kernel module defines a @triton.jit)
from .runtime import (DEVICE, default_autotune, describe, free_gpu_bytes, gpu_name, half_dtype, interpreted, num_sms,
                      on_gpu, set_autotune, supports_bf16, supports_fp8, supports_tma, supports_wgmma)

#: public name -> the module that defines it
_PUBLIC = {
    **dict.fromkeys(["matmul", "matmul_ref"], "kernels.matmul"),
    **dict.fromkeys(["matmul_persistent", "matmul_tma"], "kernels.persistent"),
    "matmul_streamk": "kernels.streamk",
    "matmul_splitk": "kernels.splitk",
    **dict.fromkeys(["matmul_auto", "pick_launcher"], "kernels.dispatch"),
    **dict.fromkeys(["matmul_ws", "trace_ws_tiles", "ws_schedule"], "kernels.matmul_ws"),
    **dict.fromkeys(["GroupedMatmulPlan", "grouped_matmul", "grouped_matmul_ref"], "kernels.grouped"),
    **dict.fromkeys(["grouped_mm", "grouped_mm_ref", "route_tokens", "raise_pending_offs_error"], "kernels.moe"),
    **dict.fromkeys(["scaled_mm", "scaled_mm_ref", "quantize_fp8", "scaled_grouped_mm", "scaled_grouped_mm_ref",
                     "quantize_experts"], "kernels.fp8"),
    **dict.fromkeys(["quantize_fp8_transposed", "quantize_fp8_transposed_ref", "scaled_mm_amax"],
                    "kernels.fp8_training"),
    **dict.fromkeys(["trace_program_tiles", "trace_persistent_tiles", "trace_streamk_segments",
                     "trace_grouped_schedule", "trace_moe_schedule"], "lab.traces"),
    **dict.fromkeys(["tile_schedule", "grouped_gemm_schedule"], "models.schedule"),
    **dict.fromkeys(["l2_traffic", "reuse_profile", "H100_L2_BYTES", "H100_NUM_SMS"], "models.l2model"),
    **dict.fromkeys(["schedule_explorer", "pointer_explorer", "grouped_schedule_explorer"], "viz.widgets"),
    **dict.fromkeys(["run_checked", "OutOfBounds"], "lab.checked"),
    "ws_timeline_explorer": "viz.timeline",
    "raise_pending_streamk_error": "kernels.streamk",
}

__all__ = ["DEVICE", "default_autotune", "describe", "free_gpu_bytes", "gpu_name", "half_dtype", "interpreted", "num_sms",
           "on_gpu", "set_autotune", "supports_bf16", "supports_fp8", "supports_tma", "supports_wgmma", *_PUBLIC]


def __getattr__(name):
    if name == "lab":  # the subpackage itself: gk.lab.progress()
        return importlib.import_module(".lab", __name__)
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
