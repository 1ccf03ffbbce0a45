"""Time ``scaled_mm``'s kernel with explicit configs on a GPU (PERF_NOTES 27): which tile, pipeline
depth and warp count the fp8 tuning list should hold.  Prints a table and writes JSON:

    python tests/gpu_fp8_configs.py OUT.json
"""
import json
import statistics
import sys

import torch
import triton
from triton.testing import do_bench

from gemm_kernels import runtime
from gemm_kernels.kernels import fp8

CONFIGS = [(128, 256, 3, 8), (128, 256, 4, 8), (256, 128, 3, 8), (256, 128, 4, 8), (128, 128, 4, 4), (128, 128, 5, 8),
           (128, 128, 4, 8), (64, 256, 4, 4)]
rows = []
for n in (4096, 8192):
    gen = torch.Generator(device=runtime.DEVICE).manual_seed(0)
    for scaling in ("tensor", "block"):
        ga, gb = fp8.granularities(scaling)
        a, sa = fp8.quantize_fp8(torch.randn(n, n, device=runtime.DEVICE, generator=gen), ga)
        b, sb = fp8.quantize_fp8(torch.randn(n, n, device=runtime.DEVICE, generator=gen).t(), gb)
        c = torch.empty(n, n, device=runtime.DEVICE, dtype=torch.bfloat16)
        runtime.ensure_tma_allocator()
        for promote in ((128, None) if scaling == "tensor" else (128,)):
            args = fp8.kernel_args(a, b, c, sa, sb, None, scaling, promote, True)
            calls = {}
            for bm, bn, stages, warps in CONFIGS:
                for group in (8, 16):
                    grid = (triton.cdiv(n, bm) * triton.cdiv(n, bn),)
                    calls[(bm, bn, stages, warps, group)] = (lambda grid=grid, bm=bm, bn=bn, s=stages, w=warps, g=group:
                        fp8._scaled_mm_kernel[grid](**args, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=128, GROUP_SIZE_M=g,
                                                    num_stages=s, num_warps=w))
            ok = {}
            for key, fn in calls.items():
                try:
                    fn()
                    torch.cuda.synchronize()
                    ok[key] = fn
                except Exception as exc:  # out of shared memory, etc.
                    print("skip", key, type(exc).__name__, str(exc)[:100])
            vendor = (lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=promote is None)) \
                if scaling == "tensor" else None
            samples = {k: [] for k in ok}
            if vendor:
                samples["torch"] = []
            for r in range(3):
                for k in list(samples):
                    samples[k].append(do_bench(vendor if k == "torch" else ok[k], warmup=25, rep=100))
            base = statistics.median(samples["torch"]) if vendor else None
            for k, ms in samples.items():
                t = statistics.median(ms)
                rows.append({"size": n, "scaling": scaling, "promote": promote, "config": str(k), "ms": t,
                             "tflops": 2 * n**3 / t / 1e9, "vs_torch": base / t if base else None})
                print(n, scaling, promote, k, f"{2 * n**3 / t / 1e9:.0f} TF", f"{base / t:.3f}" if base else "", flush=True)
json.dump(rows, open(sys.argv[1], "w"), indent=1)
