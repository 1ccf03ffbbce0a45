"""Split units for a badly filled last wave, measured (GPU only):
``python tests/gpu_ws_wave_sweep.py OUT.csv [--budget SECONDS]``.

Where the tiles fill one or two waves of SMs unevenly (96 tiles on 132 SMs, or 160: one wave
and a quarter), cutting every tile's K loop into S pieces evens the waves out: the busiest SM
does ``ceil(tiles * S / SMs) / S`` tiles' work instead of ``ceil(tiles / SMs)``, for the cost of
the pieces' fp32 sums.  For the llm-linear suite's rows at M = 257 and 1000 (part ``drawn``) and
shapes the suite does not hold (part ``unseen``), b = W.t(), bf16: cuBLAS, ``matmul_ws`` at its
defaults, and each tile of ``tiles.WS_TILES`` at every S of 1-8 that lowers that count
(``matmul_ws._launch(schedule=..., split_k=S)``).  GPU time from CUDA graphs
(``do_bench_cudagraph``, median), each row checked against float64 first.  PERF_NOTES entry 38.
"""

import sys
import time

import torch

from gemm_kernels import runtime
from gemm_kernels.bench.suites import llm_linear_shapes
from gemm_kernels.kernels import matmul_ws
from gemm_kernels.models import tiles
from gpu_sweep_rows import timed_row, write_rows

UNSEEN_M = (129, 385, 777, 1500)
UNSEEN_NK = ((4096, 4096), (5120, 8192), (8192, 28672), (2112, 7168), (14336, 4096))


def shapes():
    drawn = sorted({(m, n, k) for _, _, m, n, k, row_major in llm_linear_shapes("full")
                    if not row_major and m in (257, 1000)})
    unseen = [(m, n, k) for m in UNSEEN_M for n, k in UNSEEN_NK]
    drawn, unseen = [("drawn", s) for s in drawn], [("unseen", s) for s in unseen]
    mixed = [row for pair in zip(drawn, unseen) for row in pair]  # both parts, should the budget end the run
    return mixed + drawn[len(unseen):] + unseen[len(drawn):]


def candidate_splits(num_tiles, k_tiles, sms, most=8):
    """1, then every S <= most whose busiest-SM count ceil(tiles * S / sms) / S is below every smaller S's,
    with pieces of at least 8 K blocks."""
    best, out = tiles.cdiv(num_tiles, sms), [1]
    for s in range(2, most + 1):
        load = tiles.cdiv(num_tiles * s, sms) / s
        if load < best - 1e-9 and k_tiles >= 8 * s:
            out.append(s)
            best = load
    return out


def main(path, budget):
    rows, started = [], time.time()
    fields = ["part", "M", "N", "K", "provider", "config", "splits", "units", "load", "ms", "tflops", "vs_cublas",
              "rel_err", "error"]
    sms = runtime.num_sms()
    for part, (M, N, K) in shapes():
        if time.time() - started > budget:
            print(f"budget reached before {M}x{N}x{K}", flush=True)
            break
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()

        def record(provider, fn, base_ms=None, config="", splits=1, units="", load=""):
            row = dict(part=part, M=M, N=N, K=K, provider=provider, config=config, splits=splits, units=units,
                       load=load)
            rows.append(row)
            return timed_row(row, fn, a, b, base_ms, rep=20)

        base = record("cuBLAS", lambda: torch.matmul(a, b))
        default = tiles.ws_default_tile(M, N, num_sms=sms)
        record("ws default", lambda: matmul_ws.matmul_ws(a, b), base, default,
               tiles.ws_default_splits(M, N, K, default, num_sms=sms))
        for name, (rows_, cols, _) in tiles.WS_TILES.items():
            num_tiles = tiles.cdiv(M, rows_) * tiles.cdiv(N, cols)
            k_tiles = tiles.cdiv(K, matmul_ws.CONFIGS[name]["BLOCK_K"])
            for s in candidate_splits(num_tiles, k_tiles, sms):
                load = tiles.cdiv(num_tiles * s, sms) / s * rows_ * cols / (128 * 256)
                record("ws", lambda name=name, s=s: matmul_ws._launch(a, b, schedule=name, split_k=s), base,
                       name, s, num_tiles * s, round(load, 4))
        print(f"{part} {M}x{N}x{K}: {time.time() - started:.0f} s", flush=True)
        write_rows(path, fields, rows)
        del a, b
    write_rows(path, fields, rows)


if __name__ == "__main__":
    budget = float(sys.argv[sys.argv.index("--budget") + 1]) if "--budget" in sys.argv else 1e9
    main(sys.argv[1], budget)
