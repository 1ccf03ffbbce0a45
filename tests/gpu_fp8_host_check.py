"""Where a small fp8 call's time goes (PERF_NOTES 34): ``scaled_mm`` timed per call (``do_bench``,
host included when the host is the slower side), in a CUDA graph (GPU only), and its host time
(``bench.core.host_ms``), per scaling.

    python tests/gpu_fp8_host_check.py
"""
import torch
from triton.testing import do_bench, do_bench_cudagraph

from gemm_kernels import runtime
from gemm_kernels.bench.core import host_ms
from gemm_kernels.kernels import fp8

for M, N, K in [(1024, 1024, 1024), (1000, 4096, 4096)]:
    x = torch.randn(M, K, device=runtime.DEVICE)
    w = torch.randn(N, K, device=runtime.DEVICE)
    for scaling in fp8.SCALINGS:
        ga, gb = fp8.granularities(scaling)
        a, sa = fp8.quantize_fp8(x, ga)
        b, sb = fp8.quantize_fp8(w.t(), gb)
        fn = lambda: fp8.scaled_mm(a, b, sa, sb)  # noqa: E731
        fn()
        print(f"{M}x{N}x{K} {scaling:6s} per call {do_bench(fn) * 1e3:7.1f} us, graph {do_bench_cudagraph(fn) * 1e3:7.1f} us,"
              f" host {host_ms(fn) * 1e3:6.1f} us", flush=True)
