"""Where split-K pays, measured (GPU only): ``python tests/gpu_splitk_sweep.py OUT.csv [--quick] [--part P]``.

Part ``grid``: few-tile, long-K shapes, every (tile config, pieces, loads) of ``matmul_splitk``
with an explicit config.  Part ``defaults``: a family of shapes around the few-tiles line, each
public launcher at its defaults (autotuned) and ``matmul_auto`` against cuBLAS: shapes the
rule was not drawn from.  Both layouts of b (row-major and
``W.t()``).  GPU time of back-to-back calls in a CUDA graph (``triton.testing.do_bench_cudagraph``),
median; each row checked against a float64 reference first.  PERF_NOTES entry 30 reads the CSV.
"""

import itertools
import sys
import time

import torch
import triton

import gemm_kernels as gk
from gemm_kernels.models.tiles import cdiv
from gpu_sweep_rows import timed_row, write_rows

GRID_SHAPES = [(512, 512, 16384), (1024, 1024, 8192), (256, 2048, 16384), (257, 4096, 14336), (1000, 1024, 8192)]
GRID_CONFIGS = [  # BLOCK_M, BLOCK_N, BLOCK_K, stages, warps
    (64, 64, 64, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 128, 64, 4, 8), (64, 64, 128, 3, 4),
    (128, 128, 64, 3, 4), (128, 128, 64, 4, 4), (128, 256, 64, 3, 8), (128, 64, 128, 3, 4), (64, 128, 128, 3, 4),
]
GRID_SPLITS = [1, 2, 4, 8, 16]
FAMILY = list(itertools.product((128, 512, 1024, 2048), (1024, 4096), (4096, 16384)))


def operands(M, N, K, layout, dtype):
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    return a, (b if layout == "row-major" else b.t().contiguous().t())


def main(path, quick=False, parts=("grid", "defaults")):
    rows, started = [], time.time()
    fields = ["part", "dtype", "layout", "M", "N", "K", "provider", "config", "split", "loads", "ms", "tflops",
              "vs_cublas", "rel_err", "error"]

    def record(part, dtype, layout, shape, provider, fn, a, b, base_ms=None, config="", split="", loads=""):
        M, N, K = shape
        row = dict(part=part, dtype=str(dtype).removeprefix("torch."), layout=layout, M=M, N=N, K=K,
                   provider=provider, config=config, split=split, loads=loads)
        rows.append(row)
        return timed_row(row, fn, a, b, base_ms, rep=30)

    layouts = ["row-major", "W.t()"]
    grid_shapes = (GRID_SHAPES[:2] if quick else GRID_SHAPES) if "grid" in parts else ()
    for shape, layout in itertools.product(grid_shapes, layouts):
        M, N, K = shape
        a, b = operands(M, N, K, layout, torch.float16)
        base = record("grid", torch.float16, layout, shape, "cuBLAS", lambda: torch.matmul(a, b), a, b)
        for (bm, bn, bk, stages, warps), split, use_tma in itertools.product(GRID_CONFIGS, GRID_SPLITS,
                                                                             (True, False)):
            if split > cdiv(K, bk):
                continue
            cfg = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_stages=stages, num_warps=warps)
            record("grid", torch.float16, layout, shape, "split_k", lambda: gk.matmul_splitk(
                a, b, split_k=split, config=cfg, tma=use_tma), a, b, base, f"{bm}x{bn}x{bk} s{stages} w{warps}",
                split, "tma" if use_tma else "pointers")
        print(f"grid {shape} {layout}: {time.time() - started:.0f} s", flush=True)
        write_rows(path, fields, rows)

    providers = {"tma": gk.matmul_tma, "stream_k": gk.matmul_streamk, "split_k": gk.matmul_splitk,
                 "ws": gk.matmul_ws, "auto": gk.matmul_auto}
    family = (FAMILY[:4] if quick else FAMILY) if "defaults" in parts else ()
    for shape, layout in itertools.product(family, layouts):
        M, N, K = shape
        a, b = operands(M, N, K, layout, torch.bfloat16)
        base = record("defaults", torch.bfloat16, layout, shape, "cuBLAS", lambda: torch.matmul(a, b), a, b)
        for name, fn in providers.items():
            pick = gk.pick_launcher(a, b)[0] if name == "auto" else ""
            record("defaults", torch.bfloat16, layout, shape, name, lambda fn=fn: fn(a, b), a, b, base, config=pick)
        print(f"defaults {shape} {layout}: {time.time() - started:.0f} s", flush=True)
        write_rows(path, fields, rows)



if __name__ == "__main__":
    args = sys.argv[1:]
    parts = args[args.index("--part") + 1].split(",") if "--part" in args else ("grid", "defaults")
    main(args[0], quick="--quick" in args, parts=parts)
