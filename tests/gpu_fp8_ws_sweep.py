"""fp8 ``scaled_mm`` on an H100: the warp-specialized kernel (``matmul_ws``, its fp8 tiles) against
the one-program-per-tile kernel it replaced on Hopper and against torch, same run (PERF_NOTES 34).

    python tests/gpu_fp8_ws_sweep.py OUT.csv [--quick]

Each row: one (shape, scaling, variant), timed with CUDA graphs (``gpu_sweep_rows.timed_row``:
kernel time, no host time), checked against the float64 reference first.  Variants: torch
(precise / fast, or block-wise), ``tiled`` (``fp8._scaled_mm_kernel``, tuned), and the
warp-specialized kernel in each of its fp8 tiles and in the tile its rule picks ("auto").
"""
import sys
import time

import torch
from triton.testing import do_bench_cudagraph

from gemm_kernels import runtime
from gemm_kernels.bench.suites import _vendor_block_mm
from gemm_kernels.kernels import fp8, matmul_ws
from gpu_sweep_rows import write_rows

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 4096), (2048, 2048, 2048),
          (4096, 14336, 4096), (4096, 4096, 14336), (1000, 7168, 2048), (1024, 1024, 1024)]
FIELDS = ["M", "N", "K", "scaling", "variant", "ms", "tflops", "rel_err", "vs_vendor", "error"]
TILES = dict(matmul_ws.FP8_WS_TILES)


def ours(a, b, sa, sb, fast, *, tiled=False, tile=None):
    """A call of scaled_mm through one path (``tile``: force one of FP8_WS_TILES; None: the
    rule's pick); caches cleared so the path is the one asked for."""
    fp8._KEPT.clear()
    matmul_ws._PLANS.clear()
    matmul_ws.FP8_WS_TILES = TILES if tile is None else {tile: TILES[tile]}
    wgmma = runtime.supports_wgmma
    if tiled:
        runtime.supports_wgmma = lambda: False
    try:
        fp8.scaled_mm(a, b, sa, sb, use_fast_accum=fast)  # builds (and tunes) now
    finally:
        runtime.supports_wgmma = wgmma
        matmul_ws.FP8_WS_TILES = TILES
    return lambda: fp8.scaled_mm(a, b, sa, sb, use_fast_accum=fast)


def main(path, quick=False):
    rows = []
    shapes = SHAPES[:2] if quick else SHAPES
    start = time.time()
    for M, N, K in shapes:
        gen = torch.Generator(device=runtime.DEVICE).manual_seed(0)
        x = torch.randn(M, K, device=runtime.DEVICE, generator=gen)
        x[:, :: max(1, K // 8)] *= 20
        w = torch.randn(N, K, device=runtime.DEVICE, generator=gen)
        for scaling in fp8.SCALINGS:
            ga, gb = fp8.granularities(scaling)
            a, sa = fp8.quantize_fp8(x, ga)
            b, sb = fp8.quantize_fp8(w.t(), gb)
            ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
            ws = {f"ws {t}": dict(tile=t) for t in TILES} | {"ws auto": {}}
            if scaling == "block":
                vendor = {"torch block-wise": lambda: _vendor_block_mm(a, b, sa, sb)[0]}
                variants = {"tiled": (False, dict(tiled=True)), **{k: (False, kw) for k, kw in ws.items()}}
            else:
                vsb = sb if scaling == "tensor" else sb.reshape(1, N)
                vendor = {f"torch{' fast' if f else ''}": (lambda f=f: lambda: torch._scaled_mm(
                    a, b, sa, vsb, out_dtype=torch.bfloat16, use_fast_accum=f)) for f in (False, True)}
                variants = {"tiled": (False, dict(tiled=True)), "tiled fast": (True, dict(tiled=True)),
                            **{k: (False, kw) for k, kw in ws.items()},
                            **{k.replace("ws", "ws fast"): (True, kw) for k, kw in ws.items()}}
            base = {}
            for name, make in {**vendor, **{k: (lambda fast=fast, kw=kw: ours(a, b, sa, sb, fast, **kw))
                                           for k, (fast, kw) in variants.items()}}.items():
                row = dict(M=M, N=N, K=K, scaling=scaling, variant=name, error="")
                try:
                    fn = make()
                    out = fn()
                    err = float((out.double() - ref).norm() / ref.norm())
                    ms = do_bench_cudagraph(fn, rep=30)
                    fast = " fast" in name
                    base.setdefault(fast, ms)  # the first of each kind is torch's
                    row.update(ms=ms, tflops=2 * M * N * K / ms * 1e-9, rel_err=err, vs_vendor=base[fast] / ms)
                except Exception as exc:  # recorded, not fatal
                    row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                rows.append(row)
                print(f"{M}x{N}x{K} {scaling:6s} {name:18s} {row.get('tflops', 0):7.1f} TF/s "
                      f"{row.get('vs_vendor', 0):5.3f}x err {row.get('rel_err', 0):.2e} {row['error']}", flush=True)
            write_rows(path, FIELDS, rows)
        if time.time() - start > 420:
            print("time budget: stopping after", (M, N, K), flush=True)
            break


if __name__ == "__main__":
    main(sys.argv[1], quick="--quick" in sys.argv)
