"""Block-scaled ``scaled_mm`` on an H100: where the K loop loads its scales (PERF_NOTES 35).

    python tests/gpu_fp8_block_sweep.py OUT.csv [--quick]

The warp-specialized kernel's block-wise K loop (``matmul_ws._mainloop_promoted``) in three
versions, each in a process of its own (a Gluon kernel's callees are read when it first compiles):

* ``same block``: each K block's scales loaded at the top of that block (the code of PERF_NOTES 34);
* ``after issue``: loaded right after that block's wgmmas are issued, used after their wait;
* ``ahead`` (the package's): loaded after the wgmmas are issued, one block ahead of their use.

Each process times torch's block-wise ``scaled_mm`` and ours on the same inputs (CUDA graphs,
GPU time; float64 check first), with scale_a as ``quantize_fp8`` gives it (row-major [M, K/128])
and as torch's kernel wants it (M-major); the package's process also times the tensor-wise
128 x 128 promoted tile, the same tile and promotion without block scales.
"""
import json
import os
import subprocess
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait
from triton.testing import do_bench_cudagraph

from gemm_kernels import runtime
from gemm_kernels.bench.suites import _vendor_block_mm
from gemm_kernels.kernels import fp8, matmul_ws
from gemm_kernels.kernels.matmul_ws import _acc_layout
from gpu_sweep_rows import write_rows

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 4096), (4096, 14336, 4096), (2048, 2048, 2048),
          (1000, 7168, 2048)]
FIELDS = ["variant", "M", "N", "K", "provider", "scale_a", "ms", "tflops", "rel_err", "vs_torch", "error"]
VARIANTS = ("same block", "after issue", "ahead")


@gluon.jit
def _same_block(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, sa_ptr, sb_ptr, off_m, off_n, M, N,
                stride_sam, stride_sak, stride_sbk, stride_sbn, PART: gl.constexpr, A_PARTS: gl.constexpr,
                WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, BLOCK_SCALES: gl.constexpr):
    """PERF_NOTES 34's loop: the block's scales loaded at its top (128-column tiles only)."""
    PIECE: gl.constexpr = 128
    gl.static_assert(BLOCK_N == PIECE)
    layout: gl.constexpr = _acc_layout(WG_M, PIECE, a_bufs.dtype)
    acc0 = gl.zeros([WG_M, PIECE], gl.float32, layout)
    zero = gl.zeros([WG_M, PIECE], gl.float32, layout)
    offs_m = off_m + gl.arange(0, WG_M, layout=gl.SliceLayout(1, layout))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        if BLOCK_SCALES:
            sa = gl.load(sa_ptr + offs_m * stride_sam + kk * stride_sak, mask=offs_m < M, other=0.0)
            sa0 = gl.expand_dims(sa * gl.load(sb_ptr + kk * stride_sbk + (off_n // PIECE) * stride_sbn), 1)
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        a = a_bufs.index(s * A_PARTS + PART)
        b = b_bufs.index(s)
        part = warpgroup_mma(a, b.slice(0, PIECE).permute((1, 0)), zero, use_acc=False, is_async=True)
        part = warpgroup_mma_wait(0, deps=(part,))
        mbarrier.arrive(empty_bars.index(s))
        if BLOCK_SCALES:
            acc0 += part * sa0
        else:
            acc0 += part
    return acc0, acc0


@gluon.jit
def _after_issue(a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, sa_ptr, sb_ptr, off_m, off_n, M, N,
                 stride_sam, stride_sak, stride_sbk, stride_sbn, PART: gl.constexpr, A_PARTS: gl.constexpr,
                 WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, BLOCK_SCALES: gl.constexpr):
    """The block's scales loaded after its wgmmas are issued, used after their wait (128-column tiles only)."""
    PIECE: gl.constexpr = 128
    gl.static_assert(BLOCK_N == PIECE)
    layout: gl.constexpr = _acc_layout(WG_M, PIECE, a_bufs.dtype)
    acc0 = gl.zeros([WG_M, PIECE], gl.float32, layout)
    zero = gl.zeros([WG_M, PIECE], gl.float32, layout)
    offs_m = off_m + gl.arange(0, WG_M, layout=gl.SliceLayout(1, layout))
    for kk in range(k_tiles):
        q = q0 + kk
        s = q % STAGES
        mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1)
        a = a_bufs.index(s * A_PARTS + PART)
        b = b_bufs.index(s)
        part = warpgroup_mma(a, b.slice(0, PIECE).permute((1, 0)), zero, use_acc=False, is_async=True)
        if BLOCK_SCALES:
            sa = gl.load(sa_ptr + offs_m * stride_sam + kk * stride_sak, mask=offs_m < M, other=0.0)
            sb = gl.load(sb_ptr + kk * stride_sbk + (off_n // PIECE) * stride_sbn)
        part = warpgroup_mma_wait(0, deps=(part,))
        mbarrier.arrive(empty_bars.index(s))
        if BLOCK_SCALES:
            acc0 += part * gl.expand_dims(sa * sb, 1)
        else:
            acc0 += part
    return acc0, acc0


def _time(fn, ref):
    out = fn()
    err = float((out.double() - ref).norm() / ref.norm())
    if not err < 5e-3:  # fp8 block scales land near 1.7e-3 here (torch's and ours alike)
        raise AssertionError(f"relative error {err:.2e}")
    return do_bench_cudagraph(fn, rep=30), err


def worker(variant, shapes):
    if variant != "ahead":
        matmul_ws._mainloop_promoted = {"same block": _same_block, "after issue": _after_issue}[variant]
    rows = []
    for M, N, K in shapes:
        gen = torch.Generator(device=runtime.DEVICE).manual_seed(0)
        x = torch.randn(M, K, device=runtime.DEVICE, generator=gen)
        x[:, :: max(1, K // 8)] *= 20
        w = torch.randn(N, K, device=runtime.DEVICE, generator=gen)
        a, sa = fp8.quantize_fp8(x, (1, fp8.SCALE_BLOCK))
        b, sb = fp8.quantize_fp8(w.t(), (fp8.SCALE_BLOCK, fp8.SCALE_BLOCK))
        ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
        calls = {("torch block-wise", "M-major"): lambda: _vendor_block_mm(a, b, sa, sb)[0],
                 ("scaled_mm", "row-major"): lambda: (lambda: fp8.scaled_mm(a, b, sa, sb)),
                 ("scaled_mm", "M-major"): lambda sam=sa.t().contiguous().t(): (lambda: fp8.scaled_mm(a, b, sam, sb))}
        if variant == "ahead":
            at, st = fp8.quantize_fp8(x, "tensor")
            bt, tt = fp8.quantize_fp8(w.t(), "tensor")
            tref = fp8.scaled_mm_ref(at, bt, st, tt, out_dtype=torch.float64)
            calls[("scaled_mm tensor-wise 128x128", "")] = lambda: (lambda: fp8.scaled_mm(at, bt, st, tt))
        base = None
        for (provider, layout), make in calls.items():
            row = dict(variant=variant, M=M, N=N, K=K, provider=provider, scale_a=layout, error="")
            tiles = matmul_ws.FP8_WS_TILES
            try:
                if "128x128" in provider:  # force the block-wise tile for the tensor-wise reference
                    matmul_ws.FP8_WS_TILES = {"128x128": tiles["128x128"]}
                fn = make()
                ms, err = _time(fn, tref if "tensor" in provider else ref)
                base = ms if base is None else base
                row.update(ms=ms, tflops=2 * M * N * K / ms * 1e-9, rel_err=err, vs_torch=base / ms)
            except Exception as exc:  # recorded, not fatal
                row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            finally:
                matmul_ws.FP8_WS_TILES = tiles
            rows.append(row)
    print("ROWS " + json.dumps(rows), flush=True)


def main(path, quick=False):
    shapes = SHAPES[:2] if quick else SHAPES
    rows = []
    for variant in VARIANTS:
        out = subprocess.run([sys.executable, __file__, "--worker", variant, json.dumps(shapes)],
                             capture_output=True, text=True, env=os.environ)
        found = [line for line in out.stdout.splitlines() if line.startswith("ROWS ")]
        if not found:
            print(variant, "failed:", (out.stdout + out.stderr)[-2000:], flush=True)
            continue
        rows += json.loads(found[0][5:])
        write_rows(path, FIELDS, rows)
    for r in rows:
        print(f"{r['variant']:12s} {r['M']}x{r['N']}x{r['K']} {r['provider']:30s} {r['scale_a']:9s} "
              f"{r.get('tflops', 0):7.1f} TF/s {r.get('vs_torch', 0):5.3f}x {r['error']}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        worker(sys.argv[2], [tuple(s) for s in json.loads(sys.argv[3])])
    else:
        main(sys.argv[1], quick="--quick" in sys.argv)
