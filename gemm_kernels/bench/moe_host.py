"""``python -m gemm_kernels.bench.moe_host``: grouped_mm's host time per call, and GPU time with and
without a CUDA graph, on a small MoE problem (8 experts, 512 rows, 256 x 256 weights) where the
GPU is faster than the host, so the host's Python is what a call costs.

Host time: 2000 calls back to back (the GPU queue absorbs them), wall time per call, then one
sync.  GPU time: ``do_bench`` and ``do_bench_cudagraph`` medians.  A call that syncs
(``check_offs=True``) cannot be captured in a graph: that line says so.  GPU only.
"""

from __future__ import annotations

import time

import torch


def host_us(fn, calls: int = 2000) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return host


def parts(x, w, offs, repeats: int = 5) -> dict:
    """The default call's steps rebuilt one at a time and timed the way the whole call is (in
    sequence, GPU queue absorbing the launches), each variant ``repeats`` times interleaved;
    prints and returns the medians.  The differences between neighbouring lines are what each
    added step costs inside a call, which timing a step alone did not show (PERF_NOTES 20).
    The "fresh" lines allocate what the call keeps per stream (the flag, Triton's descriptor
    scratch: runtime.stream_buffer), as before PERF_NOTES 22."""
    import statistics

    import triton

    import gemm_kernels as gk
    from gemm_kernels.kernels import moe

    gk.grouped_mm(x, w, offs)  # makes the bound launch
    launch = moe._LAUNCHES[moe._launch_key(x, w, offs, None, None)]
    bound, shape, msg = launch.bound, launch.out_shape, moe.BAD_OFFS_MESSAGE
    flag = moe._offs_flag(x)

    def fresh_scratch(size, alignment, stream):
        return torch.empty(size, device=x.device, dtype=torch.uint8)

    def run(out_alloc=True, fresh_flag=False, fresh=False, assert_=True):
        def call():
            out = torch.empty(shape, device=x.device, dtype=x.dtype) if out_alloc else x
            ok = torch.empty(1, device=x.device, dtype=torch.int32) if fresh_flag else flag
            if launch.uses_tma:
                triton.set_allocator(fresh_scratch) if fresh else moe.ensure_tma_allocator()
            bound.launch_with(x_ptr=x, w_ptr=w, out_ptr=out, offs_ptr=offs, ok_ptr=ok, trace_ptr=ok)
            if assert_:
                torch._assert_async(ok, msg)
            return out
        return call

    variants = {
        "launch only (kept output, flag and scratch)": run(out_alloc=False, assert_=False),
        "launch only, fresh descriptor scratch": run(out_alloc=False, fresh=True, assert_=False),
        "+ torch.empty(out)": run(assert_=False),
        "+ torch._assert_async(flag, message)": run(),
        "+ fresh flag (torch.empty)": run(fresh_flag=True),
        "+ fresh flag and scratch": run(fresh_flag=True, fresh=True),
        "grouped_mm(check_offs=False)": lambda: gk.grouped_mm(x, w, offs, check_offs=False),
        "grouped_mm default": lambda: gk.grouped_mm(x, w, offs),
        "torch._grouped_mm": lambda: torch._grouped_mm(x, w, offs=offs),
    }
    times = {name: [] for name in variants}
    try:
        for _ in range(repeats):
            for name, fn in variants.items():
                times[name].append(host_us(fn, calls=1000))
    finally:
        moe.ensure_tma_allocator()
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, t in medians.items():
        print(f"parts, host us per call (median of {repeats}), {name}: {t:.1f}", flush=True)
    return medians


def main(argv=None) -> None:
    import argparse
    import datetime
    import json

    import triton

    import gemm_kernels as gk
    from triton.testing import do_bench, do_bench_cudagraph

    parser = argparse.ArgumentParser(prog="python -m gemm_kernels.bench.moe_host", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="also write the numbers there (images/bench/moe_host.json)")
    args = parser.parse_args(argv)
    if not gk.on_gpu():
        raise SystemExit("moe_host measures host time on a CUDA GPU; none here")
    x = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8, 256, 256, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    offs = torch.tensor([64 * (i + 1) for i in range(8)], device="cuda", dtype=torch.int32)
    calls = {
        "grouped_mm default": lambda: gk.grouped_mm(x, w, offs),
        "grouped_mm check_offs=False": lambda: gk.grouped_mm(x, w, offs, check_offs=False),
        "grouped_mm check_offs=True": lambda: gk.grouped_mm(x, w, offs, check_offs=True),
        "torch.ops.gemm_kernels.grouped_mm": lambda: torch.ops.gemm_kernels.grouped_mm(x, w, offs, None, None),
        "torch._grouped_mm": lambda: torch._grouped_mm(x, w, offs=offs),
    }
    host = {}
    for name, fn in calls.items():
        host[name] = round(host_us(fn), 1)
        print(f"host time per call, {name}: {host[name]:.1f} us", flush=True)
    steps = {name: round(t, 1) for name, t in parts(x, w, offs).items()}
    gpu = {}
    for name in ("grouped_mm default", "grouped_mm check_offs=True", "torch._grouped_mm"):
        fn = calls[name]
        plain = do_bench(fn, return_mode="median")
        try:
            graph = f"{do_bench_cudagraph(fn, return_mode='median') * 1e3:.1f} us"
        except Exception as exc:  # a host sync inside a capture
            graph = f"not capturable: {type(exc).__name__}"
        gpu[name] = {"do_bench_us": round(plain * 1e3, 1), "cuda_graph": graph}
        print(f"{name}: do_bench {plain * 1e3:.1f} us, cuda graph {graph}", flush=True)
    if args.json:
        record = {"command": "python -m gemm_kernels.bench.moe_host", "device": torch.cuda.get_device_name(),
                  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                  "torch": torch.__version__, "triton": triton.__version__,
                  "problem": "8 experts x 512 rows x 256 x 256, bf16; host us per call over 2000 calls then one sync",
                  "host_us": host, "parts_host_us_median_of_5": steps, "gpu": gpu}
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2, ensure_ascii=False)
            f.write("\n")


if __name__ == "__main__":
    main()
