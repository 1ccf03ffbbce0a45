"""Block-scaled ``scaled_mm`` on a Hopper GPU: versions of the K loop against torch's kernel (PERF_NOTES 35).

    python tests/gpu_fp8_block_sweep.py OUT.csv [--quick] [NAME=DIR ...]

Each version runs in a process of its own: the package of this checkout ("this checkout"), and
each NAME=DIR, a folder holding another version's ``gemm_kernels`` (e.g. ``git archive COMMIT
gemm_kernels | tar -x -C DIR``).  Each process times torch's block-wise ``scaled_mm`` and ours on
the same inputs (CUDA graphs, GPU time; float64 check first), with scale_a as ``quantize_fp8``
gives it (row-major [M, K/128]) and as torch's kernel wants it (M-major), and the tensor-wise
128 x 128 tile (the same tile and promotion without block scales).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 4096), (4096, 14336, 4096), (2048, 2048, 2048),
          (1000, 7168, 2048)]
FIELDS = ["variant", "M", "N", "K", "provider", "scale_a", "ms", "tflops", "rel_err", "vs_torch", "error"]


def worker(variant, shapes):
    import torch
    from triton.testing import do_bench_cudagraph

    from gemm_kernels import runtime
    from gemm_kernels.bench.suites import _vendor_block_mm
    from gemm_kernels.kernels import fp8, matmul_ws

    def timed(fn, ref):
        err = float((fn().double() - ref).norm() / ref.norm())
        if not err < 5e-3:  # fp8 block scales land near 1.7e-3 here (torch's and ours alike)
            raise AssertionError(f"relative error {err:.2e}")
        return do_bench_cudagraph(fn, rep=30), err

    rows = []
    for M, N, K in shapes:
        gen = torch.Generator(device=runtime.DEVICE).manual_seed(0)
        x = torch.randn(M, K, device=runtime.DEVICE, generator=gen)
        x[:, :: max(1, K // 8)] *= 20
        w = torch.randn(N, K, device=runtime.DEVICE, generator=gen)
        a, sa = fp8.quantize_fp8(x, (1, fp8.SCALE_BLOCK))
        b, sb = fp8.quantize_fp8(w.t(), (fp8.SCALE_BLOCK, fp8.SCALE_BLOCK))
        ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
        at, st = fp8.quantize_fp8(x, "tensor")
        bt, tt = fp8.quantize_fp8(w.t(), "tensor")
        tref = fp8.scaled_mm_ref(at, bt, st, tt, out_dtype=torch.float64)
        sa_mmajor = sa.t().contiguous().t()
        calls = {("torch block-wise", "M-major"): (lambda: _vendor_block_mm(a, b, sa, sb)[0], ref),
                 ("scaled_mm", "row-major"): (lambda: (lambda: fp8.scaled_mm(a, b, sa, sb)), ref),
                 ("scaled_mm", "M-major"): (lambda: (lambda: fp8.scaled_mm(a, b, sa_mmajor, sb)), ref),
                 ("scaled_mm tensor-wise 128x128", ""): (lambda: (lambda: fp8.scaled_mm(at, bt, st, tt)), tref)}
        base = None
        for (provider, layout), (make, expected) in calls.items():
            row = dict(variant=variant, M=M, N=N, K=K, provider=provider, scale_a=layout, error="")
            tiles = matmul_ws.FP8_WS_TILES
            try:
                if "128x128" in provider:  # the block-wise tile, for the tensor-wise reference
                    matmul_ws.FP8_WS_TILES = {"128x128": tiles["128x128"]}
                ms, err = timed(make(), expected)
                if provider.startswith("torch"):
                    base = ms
                row.update(ms=ms, tflops=2 * M * N * K / ms * 1e-9, rel_err=err, vs_torch=base / ms if base else "")
            except Exception as exc:  # recorded, not fatal
                row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            finally:
                matmul_ws.FP8_WS_TILES = tiles
            rows.append(row)
    print("ROWS " + json.dumps(rows), flush=True)


def main(path, quick, variants):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_sweep_rows import write_rows

    shapes = SHAPES[:2] if quick else SHAPES
    root = str(Path(__file__).resolve().parents[1])
    rows = []
    for name, folder in [("this checkout", root), *variants]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([folder, *filter(None, [os.environ.get("PYTHONPATH")])])}
        out = subprocess.run([sys.executable, __file__, "--worker", name, json.dumps(shapes)],
                             capture_output=True, text=True, env=env, cwd=folder)
        found = [line for line in out.stdout.splitlines() if line.startswith("ROWS ")]
        if not found:
            print(name, "failed:", (out.stdout + out.stderr)[-2000:], flush=True)
            continue
        rows += json.loads(found[0][5:])
        write_rows(path, FIELDS, rows)
    for r in rows:
        print(f"{r['variant']:14s} {r['M']}x{r['N']}x{r['K']} {r['provider']:30s} {r['scale_a']:9s} "
              f"{r.get('tflops', 0):7.1f} TF/s {r.get('vs_torch', 0):5.3f}x {r['error']}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        worker(sys.argv[2], [tuple(s) for s in json.loads(sys.argv[3])])
    else:
        args = [a for a in sys.argv[2:] if a != "--quick"]
        main(sys.argv[1], "--quick" in sys.argv, [tuple(a.split("=", 1)) for a in args])
