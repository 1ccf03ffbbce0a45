"""matmul_ws on a few ragged shapes, for compute-sanitizer (memcheck, racecheck) on an sm_90 GPU.

    compute-sanitizer --tool memcheck python3 tests/sanitize_ws.py
    compute-sanitizer --tool racecheck python3 tests/sanitize_ws.py
    compute-sanitizer --tool synccheck python3 tests/sanitize_ws.py      (all three: make sanitize-ws)

A report's ``_matmul_ws_kernel+0x...`` offset can be read in the SASS that ``tests/ws_sass.py``
writes (no GPU needed).

Small shapes (the tools slow kernels down 10-100x), program counts that give every program
several tiles (ring laps, turn barriers), every config, transposed B, bias + GELU, unaligned C rows;
the same with split_k=3 (split units, the workspace, the last piece adding them; fewer pieces
where K has fewer blocks, so the K = 64 shape runs unsplit).
"""

import torch

from gemm_kernels import matmul_ref
from gemm_kernels.kernels import matmul_ws as ws
from gemm_kernels.kernels.tma import tma_aligned
from gemm_kernels.testing import TOLERANCES, rel_err

#: (M, N, K, programs): ragged edges, one row, several tiles per program (ring laps, turn barriers)
SHAPES = [(129, 257, 200, 3), (300, 130, 520, 2), (1, 61, 72, 1), (517, 384, 64, 5)]
DTYPES = (torch.float16, torch.bfloat16)


def inputs(M, N, K, dtype, device):
    """A (16-byte aligned rows), B = W^T of an nn.Linear weight W [N, K], and a bias."""
    a = tma_aligned(torch.randn(M, K, device=device).to(dtype))
    w = torch.randn(N, K, device=device).to(dtype)
    return a, w.t(), torch.randn(N, device=device).to(dtype)


def main(split_counts=(1, 3)):
    torch.manual_seed(0)
    checks = bad = 0
    for name in ws.CONFIGS:
        for (M, N, K, programs) in SHAPES:
            for dtype in DTYPES:
                a, b, bias = inputs(M, N, K, dtype, "cuda")
                for split_k in split_counts:
                    out = ws._launch(a, b, activation="gelu", bias=bias, schedule=name, num_programs=programs,
                                     split_k=split_k)
                    err = rel_err(out, matmul_ref(a, b, activation="gelu", bias=bias, out_dtype=torch.float64))
                    checks += 1
                    bad += not err <= TOLERANCES[dtype]
                    if not err <= TOLERANCES[dtype]:
                        print(f"BAD {name} {M}x{N}x{K} {dtype} split_k={split_k}: rel_err {err:.3g}")
    torch.cuda.synchronize()
    print(f"sanitize_ws: {checks} checks, {bad} bad")


if __name__ == "__main__":
    import sys

    main((3,) if "--split-only" in sys.argv else (1, 3))  # --split-only: the split units alone (half the time)
