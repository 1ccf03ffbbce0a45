"""``python -m gemm_kernels.bench.measuring``: the measurements behind the appendix notebook
"Measuring GPU kernels honestly" (GPU only; writes one JSON record).

Each experiment isolates one thing a timing tool does to the number it reports:

- ``flush``: the 256 MiB write ``do_bench`` queues before every call, timed alone;
- ``hidden_host``: a call that busy-waits ``w`` µs on the host, then launches a tiny kernel,
  read by ``do_bench`` (events) and by a host clock: where the flush hides the host's work;
- ``floor``: ``torch.matmul`` from 256³ to 4096³ read three ways (``do_bench``, a CUDA graph,
  host time per call);
- ``spread``: one ``do_bench`` run's individual times (mean, median, min, percentiles);
- ``same_run``: the same call timed against itself in interleaved rounds (the noise floor of a ratio);
- ``clocks``: the SM clock and power while a large GEMM runs back to back (``nvidia-smi``);
- ``bandwidth``: HBM and L2 copy bandwidth, for the roofline's memory ceilings;
- ``ncu_clocks``: one GEMM under Nsight Compute with ``--clock-control base`` and ``none``;
- ``two_ways``: cuBLAS and our kernels, do_bench against CUDA graphs, on one GPU in one run;
- ``order_fixed``: notebook 03's fixed-tile kernel in both orders, do_bench rounds with the clock
  sampled, and under ncu at the GPU's own clock (``--clock-control none``).

Nothing here changes the GPU's settings.  ``python -m gemm_kernels.bench.measuring --json PATH``
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time

import torch

from .. import runtime
from .report import write_record

#: the host busy-waits (µs) of ``hidden_host``
WAITS_US = (0, 10, 20, 40, 60, 80, 100, 150, 200, 400)
FLOOR_SIZES = (256, 512, 1024, 2048, 4096)


def _median_us(times_ms) -> float:
    return statistics.median(times_ms) * 1e3


def _busy_wait(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def host_us_per_call(fn, calls: int = 200) -> float:
    """Wall-clock µs per call of ``fn`` called back to back, with one synchronize at the end:
    the host's rate when it, not the GPU, is the bottleneck (else the GPU's)."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def flush(repeats: int = 50) -> dict:
    """µs of ``do_bench``'s L2 flush alone (its own buffer, its own clear), CUDA events."""
    from triton import runtime as triton_runtime

    driver = triton_runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        driver.clear_cache(cache)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return {"bytes": cache.numel() * cache.element_size(), "us": _median_us(times)}


def hidden_host(waits_us=WAITS_US) -> list[dict]:
    """For each host busy-wait ``w``: what ``do_bench`` reads for ``busy_wait(w); tiny kernel``,
    the host time per call, and the tiny kernel's GPU time alone (a CUDA graph)."""
    from triton.testing import do_bench, do_bench_cudagraph

    x = torch.zeros(1024, device="cuda")
    kernel_us = do_bench_cudagraph(lambda: x.add_(1), return_mode="median") * 1e3
    rows = []
    for w in waits_us:
        def call(w=w):
            _busy_wait(w)
            x.add_(1)
        rows.append({"wait_us": w, "do_bench_us": do_bench(call, return_mode="median") * 1e3,
                     "host_us_per_call": host_us_per_call(call), "kernel_us": kernel_us})
    return rows


def floor(sizes=FLOOR_SIZES, dtype=torch.float16) -> list[dict]:
    """``torch.matmul`` (cuBLAS) at n³ read three ways: do_bench (events, L2 flushed before each
    call), a CUDA graph of back-to-back calls (GPU time, warm L2) and host µs per call."""
    from triton.testing import do_bench, do_bench_cudagraph

    rows = []
    for n in sizes:
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        fn = lambda: torch.matmul(a, b)  # noqa: E731
        rows.append({"n": n, "do_bench_us": do_bench(fn, return_mode="median") * 1e3,
                     "cuda_graph_us": do_bench_cudagraph(fn, return_mode="median") * 1e3,
                     "host_us_per_call": host_us_per_call(fn)})
    return rows


def spread(n: int = 4096, dtype=torch.float16) -> dict:
    """One ``do_bench(return_mode="all")`` run of ``torch.matmul`` at n³: its summary statistics."""
    from triton.testing import do_bench

    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    times = sorted(t * 1e3 for t in do_bench(lambda: torch.matmul(a, b), rep=500, return_mode="all"))
    q = lambda p: times[min(len(times) - 1, int(p * len(times)))]  # noqa: E731
    return {"n": n, "calls": len(times), "mean_us": statistics.fmean(times), "median_us": statistics.median(times),
            "min_us": times[0], "p20_us": q(0.2), "p80_us": q(0.8), "max_us": times[-1]}


def same_run(n: int = 4096, rounds: int = 10, dtype=torch.float16) -> dict:
    """``torch.matmul`` against itself (two calls on the same inputs), interleaved rounds of
    ``do_bench`` medians: the spread of a ratio that should be exactly 1."""
    from triton.testing import do_bench

    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ratios = []
    for _ in range(rounds):
        first = do_bench(lambda: torch.matmul(a, b), return_mode="median")
        second = do_bench(lambda: torch.matmul(a, b), return_mode="median")
        ratios.append(first / second)
    return {"n": n, "rounds": rounds, "ratios": ratios, "min": min(ratios), "max": max(ratios),
            "stdev_pct": statistics.stdev(ratios) * 100}


def _smi(fields: str) -> list[str]:
    out = subprocess.run(["nvidia-smi", "-i", str(torch.cuda.current_device()), f"--query-gpu={fields}",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True)
    return [f.strip() for f in out.stdout.strip().split(",")]


def clocks(n: int = 8192, seconds: float = 3.0, dtype=torch.float16) -> dict:
    """The SM clock and power sampled while ``torch.matmul`` at n³ runs back to back for
    ``seconds``, beside the GPU's maximum SM clock and power limit."""
    from .clocks import ClockSampler, reasons_named

    max_mhz, limit_w = (float(v) for v in _smi("clocks.max.sm,power.limit"))
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    torch.matmul(a, b)
    torch.cuda.synchronize()
    calls = 0
    with ClockSampler(str(torch.cuda.current_device()), 20) as sampler:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(10):
                torch.matmul(a, b)
            calls += 10
            torch.cuda.synchronize()
    busy = sampler.samples[len(sampler.samples) // 5:] or sampler.samples  # past the ramp-up
    masks = [s[2] for s in busy]
    return {"n": n, "seconds": seconds, "calls": calls, "max_sm_mhz": max_mhz, "power_limit_w": limit_w,
            "sm_mhz_median": statistics.median(s[0] for s in busy), "sm_mhz_min": min(s[0] for s in busy),
            "sm_mhz_max": max(s[0] for s in busy), "watts_median": statistics.median(s[1] for s in busy),
            "samples": len(busy), "reasons": reasons_named(max(set(masks), key=masks.count)) if masks else "none"}


def bandwidth() -> dict:
    """GB/s of a device copy (bytes read + written): a 1 GiB copy (HBM) from do_bench, and 16 MiB
    replayed in a CUDA graph (it stays in the 50 MB L2)."""
    from triton.testing import do_bench, do_bench_cudagraph

    big = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    big_out = torch.empty_like(big)
    hbm_ms = do_bench(lambda: big_out.copy_(big), return_mode="median")
    small = torch.empty(16 << 20, device="cuda", dtype=torch.uint8)
    small_out = torch.empty_like(small)
    l2_ms = do_bench_cudagraph(lambda: small_out.copy_(small), return_mode="median")
    return {"hbm_gb_s": 2 * big.numel() / hbm_ms / 1e6, "l2_gb_s": 2 * small.numel() / l2_ms / 1e6,
            "hbm_bytes_copied": big.numel(), "l2_bytes_copied": small.numel()}


_NCU_WORKER = ("import torch; a = torch.randn(4096, 4096, device='cuda', dtype=torch.float16); "
               "b = torch.randn(4096, 4096, device='cuda', dtype=torch.float16); "
               "[torch.matmul(a, b) for _ in range(3)]; torch.cuda.synchronize()")
_NCU_METRICS = "gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second"


def ncu_clocks(timeout_s: int = 180) -> dict | None:
    """The last of three 4096³ ``torch.matmul`` kernels under ``ncu --clock-control base`` and
    ``none``: its duration and SM clock each way (None without ncu)."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return None
    result = {}
    for control in ("base", "none"):
        out = subprocess.run([ncu, "--clock-control", control, "--metrics", _NCU_METRICS, "--csv", "--launch-skip", "2",
                              "--launch-count", "1", sys.executable, "-c", _NCU_WORKER],
                             capture_output=True, text=True, timeout=timeout_s)
        values = {}
        for line in out.stdout.splitlines():
            cells = [c.strip('"') for c in line.split('","')]
            if len(cells) >= 3 and cells[-3] in _NCU_METRICS.split(","):
                values[cells[-3]] = (cells[-2], float(cells[-1].replace(",", "")))
        result[control] = {name: {"unit": unit, "value": value} for name, (unit, value) in values.items()}
    return result


TWO_WAYS_SIZES = (1024, 1280, 2048, 4096)


def two_ways(sizes=TWO_WAYS_SIZES, dtype=torch.float16) -> list[dict]:
    """cuBLAS, ``gk.matmul`` (row-major, notebook 02) and ``gk.matmul_tma`` at n³: do_bench, a
    CUDA graph and host µs per call, so notebooks 02 and 05 compare the two timings from one GPU."""
    from triton.testing import do_bench, do_bench_cudagraph

    from ..kernels.matmul import matmul
    from ..kernels.persistent import matmul_tma

    kernels = {"cuBLAS": torch.matmul, "matmul row_major": lambda a, b: matmul(a, b, order="row_major")}
    if runtime.supports_tma():
        kernels["matmul_tma"] = matmul_tma
    rows = []
    for n in sizes:
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        for name, kernel in kernels.items():
            fn = lambda kernel=kernel: kernel(a, b)  # noqa: E731
            fn()  # compile and tune outside the timings
            rows.append({"n": n, "kernel": name, "do_bench_us": do_bench(fn, return_mode="median") * 1e3,
                         "cuda_graph_us": do_bench_cudagraph(fn, return_mode="median") * 1e3,
                         "host_us_per_call": host_us_per_call(fn)})
    return rows


ORDER_SIZES = (2048, 4096, 8192)


def order_fixed(sizes=ORDER_SIZES, rounds: int = 5, ncu_n: int = 8192) -> dict:
    """Notebook 03's question with the tile fixed (``bench.l2.CONFIG``, the kernel its ncu table
    profiled): row-major against grouped (G = 8) in interleaved do_bench rounds, the SM clock and
    power sampled meanwhile; then both orders at ``ncu_n``³ under ncu with the GPU's own clock."""
    from triton.testing import do_bench

    from . import l2
    from .clocks import ClockSampler

    timed = []
    for n in sizes:
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        calls = {order: (lambda order=order: l2.launch_fixed(a, b, order)) for order in l2.ORDERS}
        medians = {order: [] for order in calls}
        with ClockSampler(str(torch.cuda.current_device()), 20) as sampler:
            for _ in range(rounds):
                for order, fn in calls.items():
                    medians[order].append(do_bench(fn, return_mode="median") * 1e3)
        ratios = [r / g for r, g in zip(medians["row_major"], medians["grouped"])]
        timed.append({"n": n, "us": {o: statistics.median(v) for o, v in medians.items()}, "rounds_us": medians,
                      "row_major_over_grouped": ratios, "sm_mhz_median": statistics.median(s[0] for s in sampler.samples)
                      if sampler.samples else None,
                      "watts_median": statistics.median(s[1] for s in sampler.samples) if sampler.samples else None})
    ncu = l2.find_ncu()
    profiled = {}
    for control in ("none", "base") if ncu else ():
        for order in l2.ORDERS:
            run = l2.run_under_ncu(ncu, ncu_n, ncu_n, ncu_n, order, clock_control=control)
            profiled[f"{order}, clock {control}"] = {k: run.metrics.get(k) for k in
                                                      ("gpu__time_duration.sum", "dram__bytes_read.sum",
                                                       "sm__cycles_elapsed.avg.per_second")}
    return {"config": l2.CONFIG, "group_size_m": l2.GROUP_SIZE_M, "timed": timed, "ncu_n": ncu_n, "ncu": profiled}


EXPERIMENTS = {"flush": flush, "hidden_host": hidden_host, "floor": floor, "spread": spread, "same_run": same_run,
               "clocks": clocks, "bandwidth": bandwidth, "ncu_clocks": ncu_clocks, "two_ways": two_ways,
               "order_fixed": order_fixed}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gemm_kernels.bench.measuring", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(EXPERIMENTS), help="run just these (repeatable)")
    parser.add_argument("--json", metavar="PATH", help="write the record there")
    args = parser.parse_args(argv)
    if not runtime.on_gpu():
        print("measuring needs a CUDA GPU; the appendix notebook reads the committed record instead")
        return 2
    record = {}
    for name in args.only or EXPERIMENTS:
        start = time.perf_counter()
        try:
            record[name] = EXPERIMENTS[name]()
        except Exception as exc:  # one failed experiment (no nvidia-smi, ncu refused) leaves the others
            record[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        print(f"{name}: {time.perf_counter() - start:.1f} s", json.dumps(record[name])[:300], flush=True)
    if args.json:
        write_record(args.json, "measuring", argv, **record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
