"""PERF_NOTES 62: does a last row of tiles holding one row of A cost more than a full one?
(GPU, not run yet.)  ``matmul_tma``'s candidates at N = 14336, K = 4096 fp16, b = W.t(), at Ms one
row past a multiple of 128 and at Ms of the same bucket with as many 128-row tiles, each checked
against float64 and timed from a CUDA graph (``core.median_ms``), two interleaved rounds.

    python last_row_tiles.py time OUT.json
    ncu --set full -k regex:_matmul_tma_kernel -c 2 python last_row_tiles.py ncu 897 4   # M, candidate
"""
import json
import sys

import torch

import gemm_kernels as gk
from gemm_kernels.bench.core import TimingSettings, median_ms
from gemm_kernels.kernels import configs
from gemm_kernels.kernels.matmul import matmul_ref
from gemm_kernels.testing import assert_close

N, K = 14336, 4096
MS = (256, 257, 320, 384, 896, 897, 960, 1000, 1024)


def inputs(M):
    return torch.randn(M, K, device="cuda", dtype=torch.float16), \
        torch.randn(N, K, device="cuda", dtype=torch.float16).t()


def time_all(path):
    candidates = configs.tma_configs()
    timing = TimingSettings(warmup_ms=5, rep_ms=20, rounds=1)
    rows = []
    for M in MS:
        a, b = inputs(M)
        ref = matmul_ref(a, b, out_dtype=torch.float64)
        for i, config in enumerate(candidates):
            assert_close(gk.matmul_tma(a, b, config=config), ref, torch.float16)
        times = [[median_ms(lambda: gk.matmul_tma(a, b, config=c), timing, cuda_graph=True) * 1e3
                  for c in candidates] for _ in range(2)]
        rows.append({"M": M, "times_us": [round(min(t), 2) for t in zip(*times)]})
        print(rows[-1], flush=True)
    with open(path, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "N": N, "K": K,
                   "candidates": [str(c.all_kwargs()) for c in candidates], "rows": rows}, f, indent=1)


def profile(M, index):
    a, b = inputs(M)
    config = configs.tma_configs()[index]
    for _ in range(3):
        gk.matmul_tma(a, b, config=config)
    torch.cuda.synchronize()


if __name__ == "__main__":
    if sys.argv[1] == "time":
        time_all(sys.argv[2])
    else:
        profile(int(sys.argv[2]), int(sys.argv[3]))
