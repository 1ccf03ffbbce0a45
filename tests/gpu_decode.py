"""Decode on a GPU (PERF_NOTES 44): ``python tests/gpu_decode.py OUT_DIR [--check-only]``.

M = 1, 8, 16, 32, 64 rows against bf16 weights b = W.t() (nn.Linear's layout) of N x K from 2048²
to 16384², plus a contiguous b at M = 1 and 16: ``torch.matmul`` (cuBLAS), ``matmul_auto``, the
raw ``matmul_decode`` (its default method; at M = 1 its FMA method too) and the launcher the dispatch
picked before the decode kernel (``tiles.default_launcher``), and the raw kernel at fixed splits.  Every provider is
checked first (outputs NaN-poisoned, relative error against float64 and against torch), then
timed from a CUDA graph: the calls captured once, the graph replayed, the replays timed with CUDA
events.  The graph cycles through copies of the weight totalling at least ``ROTATE_BYTES`` (more
than L2), so every call reads its weight from HBM, as a model's layers do.  Writes
``decode.csv`` (µs per call, TFLOP/s, GB/s, % of HBM peak and of a measured copy, ratio against
cuBLAS, the tuned config) and ``meta.json``.  ``--check-only``: the checks, no timing (run with
GEMM_KERNELS_AUTOTUNE=0 too).  ``--tiny``: small weights, checks only, so the script's checks can be
tried in the CPU interpreter first.
"""

import csv
import json
import math
import sys
import time
from pathlib import Path

import torch

import gemm_kernels as gk
from gemm_kernels.kernels import configs, decode
from gemm_kernels.kernels import dispatch
from gemm_kernels.kernels.dispatch import matmul_auto, pick_launcher
from gemm_kernels.models.tiles import default_launcher

ROWS = (1, 8, 16, 32, 64)
WEIGHTS = ((2048, 2048), (4096, 4096), (8192, 8192), (16384, 16384), (4096, 14336), (14336, 4096))  # N, K
ROTATE_BYTES = 256 << 20  # five times an H100's 50 MB L2
CALLS_PER_GRAPH = 20
#: (N, K) x M where the raw kernel is also timed at fixed splits of K, to test the split rule
SPLIT_SWEEP = {(2048, 2048): (1, 16), (8192, 8192): (1, 16), (4096, 14336): (1, 16)}
SPLITS = (1, 2, 4, 8)
#: the tuner's replays per candidate (ms; the library's default is configs.AUTOTUNE_REP_MS): shorter, so
#: about 60 tuning keys fit the GPU budget (a decode call runs 3-200 µs: 10 ms is 50+ calls)
TUNING_REP_MS = 10
TIMED_REPLAYS = 15
#: HBM bandwidth from the datasheets (bytes/s): H100 SXM (HBM3), H200 (HBM3e)
HBM_PEAK = {"H200": 4.8e12, "H100": 3.35e12}
FIELDS = ["gpu", "layout", "M", "N", "K", "provider", "launcher", "config", "us", "tflops", "gbps", "hbm_pct",
          "copy_pct", "vs_cublas", "rel_err", "rel_err_vs_torch", "error"]


def nan_empty(real_empty):
    def empty(*args, **kwargs):
        out = real_empty(*args, **kwargs)
        if out.dtype.is_floating_point:
            out.fill_(math.nan)
        return out
    return empty


def check(fn, a, b, ref64, torch_out):
    """Relative errors of ``fn()`` against float64 and against torch, with outputs NaN-poisoned."""
    real_empty = torch.empty
    torch.empty = nan_empty(real_empty)
    try:
        out = fn(a, b)
    finally:
        torch.empty = real_empty
    if gk.on_gpu():
        torch.cuda.synchronize()
    err = float((out.double() - ref64).norm() / ref64.norm())
    err_torch = float((out.double() - torch_out.double()).norm() / torch_out.double().norm())
    if not (err <= 1.6e-2 and err_torch <= 1.6e-2):  # bf16's tolerance (gemm_kernels.testing.TOLERANCES); NaN fails
        raise AssertionError(f"relative error {err:.3e} (vs torch {err_torch:.3e})")
    return err, err_torch


def graph_us(fn, a, weights):
    """µs per call of ``fn(a, w)`` from a CUDA graph cycling through ``weights``."""
    calls = [weights[i % len(weights)] for i in range(max(CALLS_PER_GRAPH, len(weights)))]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm: tuning, compiling and kept launches happen outside the capture
        for w in weights[:2]:
            fn(a, w)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for w in calls:
            fn(a, w)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(TIMED_REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(calls))
    del graph
    return sorted(times)[len(times) // 2]


def copy_gbps():
    """A device-to-device copy of 1 GiB, bytes read plus written: the bandwidth a kernel can reach."""
    x = torch.empty(1 << 29, dtype=torch.float16, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        y.copy_(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return 2 * x.numel() * 2 / sorted(times)[5] / 1e9


def chosen_config(M, N, K, w, method, split=-1):
    """The config ``matmul_decode`` runs for this shape (its TunedKernel's memory), as text."""
    tuned = decode._tuned(decode.decode_rows(M, method), method)
    for key, config in tuned.chosen.items():
        if key[:5] == (N, K, split, w.stride(0), w.stride(1)):
            return f"{config.kwargs['BLOCK_M']}x{config.kwargs['BLOCK_N']}x{config.kwargs['BLOCK_K']} " \
                   f"w{config.num_warps} s{config.num_stages}"
    return ""


def main(out_dir, check_only=False, tiny=False):
    check_only = check_only or tiny
    if not gk.on_gpu() and not tiny:
        raise SystemExit("gpu_decode.py times a CUDA GPU; none here (--tiny checks in the interpreter)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name() if gk.on_gpu() else "CPU interpreter"
    peak = next((v for k, v in HBM_PEAK.items() if k in gpu), None)
    copy = None if check_only else copy_gbps()
    print(f"{gpu}; copy {copy} GB/s; peak {peak}", flush=True)
    configs.AUTOTUNE_REP_MS = TUNING_REP_MS
    started, rows, failures = time.time(), [], 0
    torch.manual_seed(0)
    for N, K in ((40, 70), (64, 130)) if tiny else WEIGHTS:
        w0 = torch.randn(N, K, device=gk.DEVICE, dtype=torch.bfloat16)
        copies = 1 if check_only else max(1, math.ceil(ROTATE_BYTES / w0.nbytes))
        ws = [w0] + [torch.randn_like(w0) for _ in range(copies - 1)]
        for layout in ("W.t()", "contiguous"):
            if layout == "contiguous" and (N, K) not in ((4096, 4096), (4096, 14336), (40, 70)):
                continue
            weights = [w.t() if layout == "W.t()" else w.t().contiguous() for w in ws]
            b = weights[0]
            for M in ROWS if layout == "W.t()" else (1, 16):
                a = torch.randn(M, K, device=gk.DEVICE, dtype=torch.bfloat16)
                ref64 = a.double() @ b.double()
                torch_out = torch.matmul(a, b)
                providers = {"cuBLAS": (torch.matmul, "torch.matmul", None, -1),
                             "matmul_auto": (matmul_auto, pick_launcher(a, b)[0], decode.decode_method(M), -1),
                             "matmul_decode": (decode.matmul_decode, "matmul_decode", decode.decode_method(M), -1)}
                if M == 1:
                    providers["matmul_decode fma"] = (lambda x, y: decode.matmul_decode(x, y, method="fma"),
                                                      "matmul_decode", "fma", -1)
                before = default_launcher(M, N, K, num_sms=gk.num_sms(), tma=gk.supports_tma(),
                                          wgmma=gk.supports_wgmma())[0]  # the pick before the decode kernel
                if not check_only or tiny:
                    providers["previous default"] = (lambda x, y, f=dispatch._launcher(before): f(x, y), before,
                                                     None, -1)
                if (N, K, M, layout) == (2048, 2048, 1, "W.t()") and not check_only:  # what one graph node costs
                    providers["zero-fill node alone"] = (
                        lambda x, y: torch.zeros(64, dtype=torch.int32, device=x.device), "torch.zeros", None, -1)
                if layout == "W.t()" and M in SPLIT_SWEEP.get((N, K), ()) and not check_only:
                    for split in SPLITS:
                        providers[f"matmul_decode split {split}"] = (
                            lambda x, y, split=split: decode.matmul_decode(x, y, split_k=split), "matmul_decode",
                            decode.decode_method(M), split)
                base = None
                for name, (fn, launcher, method, split) in providers.items():
                    row = dict(gpu=gpu, layout=layout, M=M, N=N, K=K, provider=name, launcher=launcher, error="")
                    try:
                        if launcher != "torch.zeros":
                            row["rel_err"], row["rel_err_vs_torch"] = check(fn, a, b, ref64, torch_out)
                        if method is not None and launcher == "matmul_decode":
                            row["config"] = chosen_config(M, N, K, b, method, split)
                        if not check_only:
                            us = graph_us(fn, a, weights)
                            moved = 2 * (K * N + M * K + M * N)
                            row.update(us=us, tflops=2 * M * N * K / us * 1e-6, gbps=moved / us * 1e-3)
                            row["hbm_pct"] = 100 * moved / (us * 1e-6) / peak if peak else ""
                            row["copy_pct"] = 100 * row["gbps"] / copy
                            base = us if name == "cuBLAS" else base
                            row["vs_cublas"] = base / us if base else ""
                            if launcher == "torch.zeros":  # a graph node's cost, not a product
                                row.update(tflops="", gbps="", hbm_pct="", copy_pct="", vs_cublas="")
                    except Exception as exc:  # recorded; the run goes on, and fails at the end
                        failures += 1
                        row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                    rows.append(row)
                    print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()
                           if k not in ("gpu", "error") or v}, flush=True)
        del ws, weights, b
        if gk.on_gpu():
            torch.cuda.empty_cache()
        name = "decode_check.csv" if check_only else "decode.csv"
        with open(out_dir / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)
    meta = dict(gpu=gpu, torch=torch.__version__, triton=__import__("triton").__version__, copy_gbps=copy,
                hbm_peak_gbps=peak and peak / 1e9, seconds=round(time.time() - started, 1),
                autotune=gk.runtime.autotune_mode(), tuning_rep_ms=TUNING_REP_MS, rotate_bytes=ROTATE_BYTES, calls_per_graph=CALLS_PER_GRAPH)
    (out_dir / ("meta_check.json" if check_only else "meta.json")).write_text(json.dumps(meta, indent=1) + "\n")
    if not check_only:
        ours = [r for r in rows if r["provider"] == "matmul_auto" and r.get("vs_cublas")]
        for r in ours:
            print(f"M={r['M']:3d} N={r['N']:5d} K={r['K']:5d} {r['layout']:10s} auto {r['us']:8.2f} us "
                  f"{r['vs_cublas']:.3f}x cuBLAS {r['gbps']:7.1f} GB/s {r['config']}")
        if ours:
            geo = math.exp(sum(math.log(r["vs_cublas"]) for r in ours) / len(ours))
            print(f"matmul_auto vs cuBLAS: geomean {geo:.3f}, min {min(r['vs_cublas'] for r in ours):.3f}, "
                  f"{sum(r['vs_cublas'] >= 0.95 for r in ours)} of {len(ours)} at >= 0.95")
    print(f"{len(rows)} rows, {failures} failed, {time.time() - started:.0f} s", flush=True)
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        raise SystemExit(__doc__.splitlines()[0])
    main(args[0], check_only="--check-only" in sys.argv, tiny="--tiny" in sys.argv)
