"""``python -m gemm_kernels.bench.moe_host``: grouped_mm's host time per call, and GPU time with and
without a CUDA graph, on a small MoE problem (8 experts, 512 rows, 256 x 256 weights) where the
GPU is faster than the host, so the host's Python is what a call costs.

Host time: 1000 calls back to back (200 for ``check_offs=True``, which syncs on each), wall time
per call, then one sync; five rounds, the calls interleaved, medians reported.  GPU time:
``do_bench`` and ``do_bench_cudagraph`` medians.  A call that syncs (``check_offs=True``) cannot
be captured in a graph: that line says so.  GPU only.
"""

from __future__ import annotations

import torch

from .core import host_ms, host_profile


def host_us(fn, calls: int = 2000) -> float:
    """``core.host_ms`` in µs."""
    return host_ms(fn, calls) * 1e3


def parts(x, w, offs, repeats: int = 5) -> dict:
    """The default call's steps rebuilt one at a time and timed the way the whole call is (in
    sequence, GPU queue absorbing the launches), each variant ``repeats`` times interleaved;
    prints and returns the medians.  The differences between neighbouring lines are what each
    added step costs inside a call, which timing a step alone did not show (PERF_NOTES 20).
    The last rebuilt line adds a check like the one before PERF_NOTES 22 (a flag made by
    ``torch.ones``, which also launches a fill, and a ``torch._assert_async`` launch); "fresh
    descriptor scratch" allocates what
    ``runtime.stream_buffer`` now keeps per stream."""
    import statistics

    import triton

    from gemm_kernels.kernels import moe

    moe.grouped_mm(x, w, offs)  # makes the bound launch
    launch = moe._LAUNCHES.get(moe._launch_key(x, w, offs, None, None))
    bound, shape = launch.bound, launch.out_shape

    def fresh_scratch(size, alignment, stream):
        return torch.empty(size, device=x.device, dtype=torch.uint8)

    def run(out_alloc=True, fresh=False, old_check=False):
        def call():
            out = torch.empty(shape, device=x.device, dtype=x.dtype) if out_alloc else x
            if launch.uses_tma:
                triton.set_allocator(fresh_scratch) if fresh else moe.ensure_tma_allocator()
            bound.launch_with(x_ptr=x, w_ptr=w, out_ptr=out, offs_ptr=offs, trace_ptr=offs)
            if old_check:
                torch._assert_async(torch.ones(1, device=x.device, dtype=torch.int32), "check")
            return out
        return call

    variants = {
        "launch only (kept output and scratch)": run(out_alloc=False),
        "launch only, fresh descriptor scratch": run(out_alloc=False, fresh=True),
        "+ torch.empty(out)": run(),
        "+ the check before (a flag's torch.ones, torch._assert_async)": run(old_check=True),
        "grouped_mm(check_offs=False)": lambda: moe.grouped_mm(x, w, offs, check_offs=False),
        "grouped_mm default": lambda: moe.grouped_mm(x, w, offs),
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


def training_step(case_name: str, steps: int = 200) -> dict:
    """One ``bench.counters`` case's call (a forward+backward for the fwd+bwd cases) per provider:
    host time per call (``steps`` calls, then one sync), ``do_bench``'s median, and for ours the
    Python functions that took the host's time (cProfile, by own time).  A call whose host time
    reaches its ``do_bench`` time is host-bound: the GPU waits for it."""
    from triton.testing import do_bench

    from . import counters

    case = counters.case_named(case_name)
    result = {}
    for provider in case.providers:
        fn = counters.build_call(case, provider)
        host = host_us(fn, calls=steps)
        gpu = do_bench(fn, return_mode="median") * 1e3
        result[provider] = {"host_us": round(host, 1), "do_bench_us": round(gpu, 1)}
        print(f"step {case.name} | {provider}: host {host:.1f} us per call, do_bench {gpu:.1f} us", flush=True)
        if provider == "grouped_mm":
            for line in host_profile(fn, steps, top=12):
                print(f"  {line}", flush=True)
    return result


def main(argv=None) -> None:
    import argparse

    from triton.testing import do_bench, do_bench_cudagraph

    from .. import runtime
    from ..kernels import moe

    from .report import write_record

    parser = argparse.ArgumentParser(prog="python -m gemm_kernels.bench.moe_host", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="also write the numbers there (images/bench/moe_host.json)")
    parser.add_argument("--step", action="append", metavar="CASE",
                        help="instead: host time and do_bench of a bench.counters case's call, per provider "
                             "(repeatable)")
    args = parser.parse_args(argv)
    if args.step:
        from . import counters

        for name in args.step:
            counters.case_named(name)  # fail before timing anything
    if not runtime.on_gpu():
        raise SystemExit("moe_host measures host time on a CUDA GPU; none here")
    if args.step:
        for name in args.step:
            training_step(name)
        return
    x = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8, 256, 256, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    offs = torch.tensor([64 * (i + 1) for i in range(8)], device="cuda", dtype=torch.int32)
    calls = {
        "grouped_mm default": lambda: moe.grouped_mm(x, w, offs),
        "grouped_mm check_offs=False": lambda: moe.grouped_mm(x, w, offs, check_offs=False),
        "grouped_mm check_offs=True": lambda: moe.grouped_mm(x, w, offs, check_offs=True),
        "torch.ops.gemm_kernels.grouped_mm": lambda: torch.ops.gemm_kernels.grouped_mm(x, w, offs, None, None),
        "torch._grouped_mm": lambda: torch._grouped_mm(x, w, offs=offs),
    }
    import statistics

    warm = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(200):  # ~0.5 s of work: an idle GPU's clock ramps up first (PERF_NOTES 22)
        warm @ warm
    rounds: dict = {name: [] for name in calls}
    for _ in range(5):  # interleaved, medians: one slow moment of the host does not decide a row
        for name, fn in calls.items():
            rounds[name].append(host_us(fn, calls=1000 if name != "grouped_mm check_offs=True" else 200))
    host = {name: round(statistics.median(t), 1) for name, t in rounds.items()}
    for name, t in host.items():
        print(f"host time per call, {name}: {t:.1f} us (median of 5 rounds)", flush=True)
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
        write_record(args.json, "moe_host", argv,
                     problem="8 experts x 512 rows x 256 x 256, bf16; host us per call over 1000 calls then one "
                             "sync, median of 5 interleaved rounds",
                     host_us=host, parts_host_us_median_of_5=steps, gpu=gpu)


if __name__ == "__main__":
    main()
