"""GPU script for matmul_ws: correctness sweep, then timings against cuBLAS measured in the same run.

    python3 tests/gpu_ws_bench.py [--quick] [--out DIR]

Timings: ``triton.testing.do_bench(..., return_mode="median")``, ROUNDS interleaved rounds
(ours, cuBLAS, ours, cuBLAS, ...), the median over rounds reported.  ratio = cuBLAS time / our
time (> 1: we are faster).  TFLOP/s = 2MNK / time; % of the 989.4 TFLOP/s dense fp16/bf16 peak.
The cuBLAS kernel's name comes from torch.profiler on one call of the same shape.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import triton

from gemm_kernels import matmul_ref
from gemm_kernels.kernels import matmul_ws as ws
from gemm_kernels.testing import rel_err, TOLERANCES

PEAK = 989.4
ROUNDS = 3


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3  # us


def cublas_kernel_name(fn):
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.key for e in prof.key_averages() if e.device_type.name == "CUDA" or "gemm" in e.key.lower()]
    gemm = [n for n in names if any(w in n.lower() for w in ("gemm", "nvjet", "xmma", "cutlass", "sm90"))]
    return (gemm or names or ["?"])[0][:90]


def compare(label, ours: dict, theirs, flops, out):
    """Interleaved rounds of every candidate in ``ours`` and of cuBLAS; one printed row per candidate."""
    times = {k: [] for k in ours}
    times["cublas"] = []
    for _ in range(ROUNDS):
        for k, fn in ours.items():
            times[k].append(bench(fn))
        times["cublas"].append(bench(theirs))
    t_ref = statistics.median(times["cublas"])
    spread = (max(times["cublas"]) - min(times["cublas"])) / t_ref
    rows = []
    for k in ours:
        t = statistics.median(times[k])
        tf = flops / t * 1e-6
        rows.append((k, t, tf))
        line = (f"{label:34s} {k:20s} ours {t:9.1f} us  cuBLAS {t_ref:9.1f} us  ratio {t_ref / t:6.3f}  "
                f"{tf:6.1f} TFLOP/s ({100 * tf / PEAK:4.1f}% peak)  cuBLAS {flops / t_ref * 1e-6:6.1f} TFLOP/s "
                f"(its spread {100 * spread:.1f}%)")
        print(line, flush=True)
        out.write(line + "\n")
    return rows


def correctness_sweep(out):
    torch.manual_seed(0)
    bad = 0
    for schedule in ws.SCHEDULES:
        for dtype in (torch.float16, torch.bfloat16):
            for (M, N, K) in [(1, 1, 8), (127, 257, 1000), (1000, 1000, 1000), (4096, 4096, 4096), (257, 6144, 4096)]:
                a = torch.randn(M, K, device="cuda").to(dtype)
                w = torch.randn(N, K, device="cuda").to(dtype)  # nn.Linear weight layout
                bias = torch.randn(N, device="cuda").to(dtype)
                for b, act, bi in ((w.t(), "gelu", bias), (w.t().contiguous(), None, None)):
                    c = ws._launch(a, b, activation=act, bias=bi, schedule=schedule)
                    err = rel_err(c, matmul_ref(a, b, activation=act, bias=bi, out_dtype=torch.float64))
                    ok = err <= TOLERANCES[dtype] and torch.isfinite(c).all().item()
                    bad += not ok
                    line = (f"check {schedule:11s} {str(dtype)[6:]:8s} {M}x{N}x{K} b{'^T' if b.stride(0) == 1 else ' '} "
                            f"{act or '-':5s} rel_err {err:.2e} {'ok' if ok else 'FAIL'}")
                    print(line, flush=True)
                    out.write(line + "\n")
    return bad


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--skip-check", action="store_true")
    p.add_argument("--llm", action="store_true", help="also the Llama-3-8B projection shapes")
    args = p.parse_args()
    out = open(os.path.join(args.out, "ws_bench.txt"), "a")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, flush=True)
    t0 = time.time()
    if not args.skip_check:
        bad = correctness_sweep(out)
        print(f"correctness: {bad} bad ({time.time() - t0:.0f}s)", flush=True)
        if bad:
            sys.exit(1)

    # square products, both schedules, fp16 and bf16
    sizes = [4096] if args.quick else [4096, 8192]
    for size in sizes:
        for dtype in (torch.float16, torch.bfloat16):
            a = torch.randn(size, size, device="cuda").to(dtype)
            b = torch.randn(size, size, device="cuda").to(dtype)
            name = cublas_kernel_name(lambda: torch.matmul(a, b))
            print(f"cuBLAS kernel {size}^3 {str(dtype)[6:]}: {name}", flush=True)
            out.write(f"cuBLAS kernel {size}^3 {str(dtype)[6:]}: {name}\n")
            ours = {s: (lambda s=s: ws._launch(a, b, schedule=s)) for s in ws.CONFIGS}
            compare(f"{size}^3 {str(dtype)[6:]}", ours, lambda: torch.matmul(a, b), 2 * size**3, out)

    # fused bias + GELU against torch.addmm + gelu
    for dtype in (torch.float16, torch.bfloat16):
        size = 4096
        a = torch.randn(size, size, device="cuda").to(dtype)
        b = torch.randn(size, size, device="cuda").to(dtype)
        bias = torch.randn(size, device="cuda").to(dtype)
        ours = {s: (lambda s=s: ws._launch(a, b, activation="gelu", bias=bias, schedule=s)) for s in ws.CONFIGS}
        compare(f"bias+gelu {size}^3 {str(dtype)[6:]}", ours,
                lambda: torch.nn.functional.gelu(torch.addmm(bias, a, b)), 2 * size**3, out)

    if args.llm:  # Llama-3-8B projections, bf16, b = weight.t() with weight [N, K]
        for M in (1024, 4096, 16384):
            for proj, K, N in (("qkv", 4096, 6144), ("o", 4096, 4096), ("gate_up", 4096, 28672), ("down", 14336, 4096)):
                a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
                w = torch.randn(N, K, device="cuda").to(torch.bfloat16)
                b = w.t()
                name = cublas_kernel_name(lambda: torch.matmul(a, b))
                ours = {s: (lambda s=s: ws._launch(a, b, schedule=s)) for s in ws.CONFIGS}
                rows = compare(f"llama3-8b {proj} M={M} N={N} K={K}", ours, lambda: torch.matmul(a, b), 2 * M * N * K, out)
                print(f"    cuBLAS kernel: {name}", flush=True)
                out.write(f"    cuBLAS kernel: {name}\n")
    print(f"done in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
