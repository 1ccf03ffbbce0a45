"""PERF_NOTES 56: decode at M = 32 and 64 in CUDA graphs, L2 warm (as the `decode` suite), cuBLAS against
matmul_auto: graph timings with the SM clock sampled meanwhile, then Nsight Compute counters of one L2-warm call
(`--cache-control none --clock-control none`: the weight stays in L2 as in the graphs, the clock is the GPU's own).

    python decode_l2.py time OUT.json     # graph timings + clocks
    python decode_l2.py ncu OUT.json      # counters (runs itself as `worker` under ncu)
"""
import json, os, shutil, statistics, subprocess, sys
import torch
import gemm_kernels
from gemm_kernels.bench import clocks, counters, l2

CASES = [(32, 4096, 4096), (64, 4096, 4096), (32, 2048, 2048), (64, 2048, 2048), (16, 4096, 4096)]
METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "lts__t_bytes.sum", "lts__t_sectors_srcunit_tex_op_read.sum",
           "l1tex__m_xbar2l1tex_read_bytes.sum", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
           "lts__t_sector_hit_rate.pct", "sm__cycles_active.avg", "sm__cycles_active.max", "launch__grid_size",
           "launch__block_size", "launch__cluster_dim_x", "launch__cluster_dim_y", "launch__shared_mem_per_block_dynamic",
           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
           "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
           "smsp__warp_issue_stalled_barrier_per_warp_active.pct", "smsp__inst_executed.sum")


def inputs(M, N, K):
    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g).t()  # nn.Linear's weight, b = W.t()
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
    return a, w


def calls(a, w):
    return {"cuBLAS": lambda: a @ w, "auto": lambda: gemm_kernels.matmul_auto(a, w)}


def graph(fn, n=400):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn(); fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay(); torch.cuda.synchronize()
    return g, n


def time_mode(out):
    props = torch.cuda.get_device_properties(0)
    gpu = f"GPU-{props.uuid}" if getattr(props, "uuid", None) else "0"
    rows = []
    for M, N, K in CASES:
        a, w = inputs(M, N, K)
        ref = a.double() @ w.double()
        graphs = {}
        for name, fn in calls(a, w).items():
            err = ((fn().double() - ref).norm() / ref.norm()).item()
            graphs[name] = (*graph(fn), err)
        per = {name: [] for name in graphs}
        for _ in range(3):  # interleaved rounds
            for name, (g, n, err) in graphs.items():
                with clocks.ClockSampler(gpu, 20) as sampler:
                    ts = []
                    for _ in range(40):
                        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
                        e0.record(); g.replay(); e1.record(); torch.cuda.synchronize()
                        ts.append(e0.elapsed_time(e1) * 1e3 / n)
                busy = [s for s in sampler.samples if not s[2] & 0x1] or sampler.samples
                per[name].append((statistics.median(ts), busy))
        for name, rounds in per.items():
            samples = [s for _, b in rounds for s in b]
            masks = [s[2] for s in samples]
            rows.append(dict(M=M, N=N, K=K, provider=name, us=round(statistics.median(t for t, _ in rounds), 3),
                             rounds_us=[round(t, 3) for t, _ in rounds], rel_err=graphs[name][2],
                             sm_mhz_median=statistics.median(s[0] for s in samples), sm_mhz_min=min(s[0] for s in samples),
                             watts_median=statistics.median(s[1] for s in samples), samples=len(samples),
                             reasons=clocks.reasons_named(max(set(masks), key=masks.count))))
            print(rows[-1], flush=True)
        json.dump(rows, open(out, "w"), indent=1)


def worker(M, N, K, provider):
    a, w = inputs(M, N, K)
    fn = calls(a, w)[provider]
    for _ in range(20):  # compiles, tunes, and leaves the weight in L2
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print("WORKER-DONE", flush=True)


def ncu_mode(out):
    ncu = l2.find_ncu()
    metrics = counters.available_metrics(ncu, METRICS)
    rows = []
    for M, N, K in CASES[:4]:
        for provider in ("cuBLAS", "auto"):
            cmd = [ncu, "--profile-from-start", "off", "--cache-control", "none", "--clock-control", "none",
                   "--metrics", ",".join(metrics), "--csv", "--print-units", "base",
                   sys.executable, __file__, "worker", str(M), str(N), str(K), provider]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
            if "WORKER-DONE" not in proc.stdout:
                print("FAILED", M, N, K, provider, (proc.stdout + proc.stderr)[-1500:], flush=True)
                continue
            for k in counters.parse_ncu_kernels(proc.stdout):
                rows.append(dict(M=M, N=N, K=K, provider=provider, **k))
                print(rows[-1], flush=True)
            json.dump(rows, open(out, "w"), indent=1)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "time":
        time_mode(sys.argv[2])
    elif mode == "ncu":
        ncu_mode(sys.argv[2])
    else:
        worker(*map(int, sys.argv[2:5]), sys.argv[5])
