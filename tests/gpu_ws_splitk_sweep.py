"""Split-K in the warp-specialized kernel, measured (GPU only):
``python tests/gpu_ws_splitk_sweep.py OUT.csv [--quick] [--defaults]``.

For problems whose tiles leave most SMs idle (a small C with a long K, the decode and
small-batch shapes of LLM projections): cuBLAS, ``matmul_splitk`` (the pointer kernel, autotuned),
``matmul_ws`` unsplit, ``matmul_ws`` at its defaults (the split rule), ``matmul_auto``, and every tile of
``tiles.WS_TILES`` cut into 2-16 pieces (``matmul_ws._launch(schedule=..., split_k=...)``), fp16,
b row-major or W.t() (``--defaults``: not the grid of tiles and pieces).  GPU time of back-to-back calls in a CUDA graph (``do_bench_cudagraph``,
median); each row checked against a float64 reference first.  PERF_NOTES entry 36 reads the CSV
(its first run, ``entry36/ws_splitk_sweep.csv``, has no ``auto`` rows and the old rule's reason in
the ``splits`` column of its ``ws default`` rows).
"""

import sys
import time

import torch

import gemm_kernels as gk
from gemm_kernels import runtime
from gemm_kernels.kernels import matmul_ws
from gemm_kernels.models import tiles
from gpu_sweep_rows import timed_row, write_rows

# (M, N, K, layout of b): the stream-k suite's few-tile rows, then shapes it does not hold
SHAPES = [(512, 512, 16384, "row-major"), (512, 512, 16384, "W.t()"), (1024, 1024, 8192, "row-major"),
          (768, 768, 12288, "row-major"), (384, 384, 32768, "row-major"), (2048, 512, 8192, "row-major"),
          (256, 4096, 14336, "W.t()"), (129, 4096, 14336, "W.t()"), (128, 1024, 16384, "W.t()"),
          (512, 1536, 8192, "W.t()"), (64, 4096, 4096, "W.t()"), (16, 4096, 4096, "W.t()"),
          (1000, 2112, 7168, "W.t()"), (200, 2560, 8192, "W.t()")]
SPLITS = (2, 3, 4, 6, 8, 12, 16)


def operands(M, N, K, layout, dtype=torch.float16):
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    w = torch.randn(N, K, device="cuda", dtype=dtype)
    return a, (w.t() if layout == "W.t()" else w.t().contiguous())


def main(path, quick=False, defaults_only=False):
    rows, started = [], time.time()
    fields = ["layout", "M", "N", "K", "provider", "config", "splits", "units", "ms", "tflops", "vs_cublas",
              "rel_err", "error"]
    sms = runtime.num_sms()

    def record(layout, shape, provider, fn, a, b, base_ms=None, config="", splits=1, units=""):
        M, N, K = shape
        row = dict(layout=layout, M=M, N=N, K=K, provider=provider, config=config, splits=splits, units=units)
        rows.append(row)
        return timed_row(row, fn, a, b, base_ms, rep=20)

    for M, N, K, layout in (SHAPES[:2] if quick else SHAPES):
        shape = (M, N, K)
        a, b = operands(M, N, K, layout)
        base = record(layout, shape, "cuBLAS", lambda: torch.matmul(a, b), a, b)
        record(layout, shape, "split_k", lambda: gk.matmul_splitk(a, b), a, b, base)
        record(layout, shape, "ws unsplit", lambda: matmul_ws.matmul_ws(a, b, split_k=1), a, b, base,
               tiles.ws_default_tile(M, N, num_sms=sms))
        name = tiles.ws_default_tile(M, N, num_sms=sms)
        num_tiles = tiles.cdiv(M, tiles.WS_TILES[name][0]) * tiles.cdiv(N, tiles.WS_TILES[name][1])
        splits = tiles.ws_default_splits(M, N, K, name, num_sms=sms)  # what matmul_ws runs (entry 37's CSVs
        # and entry 36's took splitk_default_splits here: their 16- and 64-row "ws default" rows say 4, ran 1)
        record(layout, shape, "ws default", lambda: matmul_ws.matmul_ws(a, b), a, b, base, name, splits,
               num_tiles * splits)
        record(layout, shape, "auto", lambda: gk.matmul_auto(a, b), a, b, base, gk.pick_launcher(a, b)[1])
        for name, (rows_, cols, _) in ({} if defaults_only else tiles.WS_TILES).items():
            num_tiles = tiles.cdiv(M, rows_) * tiles.cdiv(N, cols)
            k_tiles = tiles.cdiv(K, matmul_ws.CONFIGS[name]["BLOCK_K"])
            for s in SPLITS:
                if num_tiles * s > 2 * sms or k_tiles < 4 * s:  # past two waves, or pieces of under 4 blocks
                    continue
                record(layout, shape, "ws split", lambda name=name, s=s: matmul_ws._launch(a, b, schedule=name, split_k=s),
                       a, b, base, name, s, num_tiles * s)
        print(f"{shape} {layout}: {time.time() - started:.0f} s", flush=True)
        write_rows(path, fields, rows)


if __name__ == "__main__":
    main(sys.argv[1], quick="--quick" in sys.argv, defaults_only="--defaults" in sys.argv)
