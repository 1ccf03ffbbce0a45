"""GPU script for matmul_ws's host side and its timeline: ``python tests/gpu_ws_host.py OUT_DIR``.

1. Host time per call (``host.json``): the launch as it was before the per-shape plans (checks,
   three descriptors and Triton's JIT launch on every call), the plans with Triton's internals
   (C launcher, descriptor copies) and without them (public fallbacks), and cuBLAS; each timed
   as ``time.perf_counter`` over many calls with one ``torch.cuda.synchronize`` at the end, on a
   tiny product (GPU time ~5 µs: the loop measures the host) and a Llama-3-8B O projection.
2. Same-run ratios against cuBLAS (``ws_rows.csv``): 4096^3 and 8192^3, fused bias+GELU at
   4096^3 against addmm + gelu, Llama-3-8B QKV/O at M=1024; each with ``do_bench`` (median, L2
   flushed, host time included when it exceeds the GPU's) and ``do_bench_cudagraph`` (median,
   GPU time only), 3 interleaved rounds, and cuBLAS's kernel name.
3. One timeline trace (``ws_trace.csv``): ``trace_ws_tiles`` for both schedules on a few tiles
   per program, plain and with bias+GELU, and the cooperative kernel on all SMs at 4096^3.
"""

import csv
import json
import os
import statistics
import sys
import time

import torch
import triton
from triton.testing import do_bench, do_bench_cudagraph

from gemm_kernels import _triton_compat, runtime
from gemm_kernels.bench.core import vendor_kernel_of as vendor_kernel_name
from gemm_kernels.kernels import matmul_ws as ws

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)
dev = runtime.DEVICE


def before_plans(a, b, activation=None, bias=None):
    """matmul_ws's launch before the plans, line for line: checks, descriptors, kernel[grid] every
    call (in the tile the plans' rule picks, so both time the same kernel)."""
    bias = ws._check_ws_inputs(a, b, activation, bias)
    ws._require_hopper()
    M, K = a.shape
    N = b.shape[1]
    config = dict(ws.CONFIGS[ws.ws_default_tile(M, N, num_sms=runtime.num_sms())])
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    programs = min(ws.cdiv(M, ws._tile_m(config)) * ws.cdiv(N, config["BLOCK_N"]), runtime.num_sms())
    ws._matmul_ws_kernel[(programs,)](**ws._kernel_args(a, b, c, bias, None, config, activation=activation),
                                      num_warps=4, maxnreg=ws.MAXNREG)
    return c


def per_call_us(fn, calls=400):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return {"enqueue_us": (t1 - t0) / calls * 1e6, "with_sync_us": (t2 - t0) / calls * 1e6}


def host_times():
    out = {}
    for label, (M, N, K, dtype, weight) in {"256^3 fp16": (256, 256, 256, torch.float16, False),
                                            "Llama-3-8B O M=1024 bf16": (1024, 4096, 4096, torch.bfloat16, True)}.items():
        a = torch.randn(M, K, device=dev, dtype=dtype)
        b = torch.randn(N, K, device=dev, dtype=dtype).t() if weight else torch.randn(K, N, device=dev, dtype=dtype)
        ref = (a.double() @ b.double()).float()
        rows = {}
        ws._PLANS.clear()
        rows["before (kernel[grid] every call)"] = per_call_us(lambda: before_plans(a, b))
        ws._PLANS.clear()
        os.environ[_triton_compat.INTERNALS_ENV] = "0"
        rows["plans, public fallbacks"] = per_call_us(lambda: ws.matmul_ws(a, b))
        fast_off = not next(iter(ws._PLANS.values())).launch.fast
        os.environ.pop(_triton_compat.INTERNALS_ENV)
        ws._PLANS.clear()
        rows["plans (after)"] = per_call_us(lambda: ws.matmul_ws(a, b))
        fast_on = next(iter(ws._PLANS.values())).launch.fast
        rows["cuBLAS torch.matmul"] = per_call_us(lambda: torch.matmul(a, b))
        err = float((ws.matmul_ws(a, b).float() - ref).norm() / ref.norm())
        gpu_us = do_bench_cudagraph(lambda: ws.matmul_ws(a, b), rep=50, return_mode="median") * 1e3
        out[label] = {"rows": rows, "gpu_us_cuda_graph": gpu_us, "rel_err": err, "fast_path": fast_on,
                      "fallback_is_public": fast_off}
        print(label, json.dumps(out[label], indent=1), flush=True)
    return out


def ratio_rows():
    rows = []
    cases = [("4096^3", 4096, 4096, 4096, False, None), ("8192^3", 8192, 8192, 8192, False, None),
             ("bias+GELU 4096^3", 4096, 4096, 4096, False, "gelu"),
             ("Llama-3-8B QKV M=1024", 1024, 6144, 4096, True, None), ("Llama-3-8B O M=1024", 1024, 4096, 4096, True, None)]
    for dtype in (torch.float16, torch.bfloat16):
        for label, M, N, K, weight, act in cases:
            a = torch.randn(M, K, device=dev, dtype=dtype)
            b = torch.randn(N, K, device=dev, dtype=dtype).t() if weight else torch.randn(K, N, device=dev, dtype=dtype)
            bias = torch.randn(N, device=dev, dtype=dtype) if act else None
            if act:
                base = lambda: torch.nn.functional.gelu(torch.addmm(bias, a, b))  # noqa: E731
            else:
                base = lambda: torch.matmul(a, b)  # noqa: E731
            providers = {"cuBLAS" if not act else "addmm+gelu": base}
            schedules = ["cooperative"] + (["pingpong"] if M == 4096 and N == 4096 else [])
            for s in schedules:
                providers[f"ws {s}"] = (lambda s=s: ws._launch(a, b, activation=act, bias=bias, schedule=s))
            ref = a.double() @ b.double() + (bias.double() if act else 0)
            ref = torch.nn.functional.gelu(ref).float() if act else ref.float()
            errs = {k: float((f().float() - ref).norm() / ref.norm()) for k, f in providers.items()}
            samples = {k: {"do_bench": [], "cuda_graph": []} for k in providers}
            names = list(providers)
            for r in range(3):
                for j in range(len(names)):
                    k = names[(j + r) % len(names)]
                    samples[k]["do_bench"].append(do_bench(providers[k], warmup=25, rep=100, return_mode="median"))
                    samples[k]["cuda_graph"].append(do_bench_cudagraph(providers[k], rep=100, return_mode="median"))
            kernel_name = vendor_kernel_name(base)
            base_name = names[0]
            for k in names:
                row = {"case": label, "dtype": str(dtype).replace("torch.", ""), "provider": k, "rel_err": errs[k],
                       "baseline": base_name, "baseline_kernel": kernel_name}
                for method in ("do_bench", "cuda_graph"):
                    t = statistics.median(samples[k][method])
                    tb = statistics.median(samples[base_name][method])
                    row[f"{method}_us"] = t * 1e3
                    row[f"{method}_ratio"] = tb / t
                    row[f"{method}_tflops"] = 2 * M * N * K / (t * 1e-3) / 1e12
                    row[f"{method}_baseline_spread"] = (max(samples[base_name][method]) - min(samples[base_name][method])) \
                        / tb
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def traces():
    out = []
    for label, (M, N, K, programs, act, bias, schedules) in {
        "few tiles": (1024, 1024, 4096, 4, None, False, ws.SCHEDULES),
        "few tiles, bias+GELU": (1024, 1024, 4096, 4, "gelu", True, ws.SCHEDULES),
        "4096^3, every SM": (4096, 4096, 4096, None, None, False, ("cooperative",)),
    }.items():
        for schedule in schedules:
            t = ws.trace_ws_tiles(M, N, K, schedule=schedule, num_programs=programs, activation=act, bias=bias).numpy()
            t0 = t[:, 6].min()
            for r in t:
                rec = dict(zip(ws.TRACE_FIELDS, (int(v) for v in r)))
                for f in ("start_ns", "mainloop_end_ns", "end_ns"):
                    rec[f] -= int(t0)
                out.append({"trace": label, "schedule": schedule, "M": M, "N": N, "K": K,
                            "num_programs": programs or runtime.num_sms(), "dtype": "float16",
                            "epilogue": "bias+gelu" if act else "none", **rec})
    return out


if __name__ == "__main__":
    stage = sys.argv[2] if len(sys.argv) > 2 else "all"
    info = {"gpu": runtime.gpu_name(), "torch": torch.__version__, "triton": triton.__version__}
    if stage in ("all", "host"):
        host = host_times()
        with open(os.path.join(OUT, "host.json"), "w") as f:
            json.dump({**info, "host": host}, f, indent=1)
    if stage in ("all", "trace"):
        rows = traces()
        with open(os.path.join(OUT, "ws_trace.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if stage in ("all", "ratios"):
        rows = ratio_rows()
        with open(os.path.join(OUT, "ws_rows.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    print("done", flush=True)
