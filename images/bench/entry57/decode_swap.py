"""PERF_NOTES 57: `matmul_auto` at decode shapes with the turned tile (SWAP_AB configs first) against the
same kernel with its former configs only (SWAP_AB off), beside cuBLAS, in CUDA graphs
(triton.testing.do_bench_cudagraph, the `decode` suite's timing), bf16, b = W.t().

    python decode_swap.py OUT.json        # writes after every case
"""
import json
import sys

import torch
import triton
from triton.testing import do_bench_cudagraph

import gemm_kernels
from gemm_kernels.kernels import decode, dispatch

EVERY = decode.decode_configs


def orientation(turned: bool):
    """The configs as shipped (turned=True) or as before this change (no SWAP_AB config)."""
    decode.decode_configs = EVERY if turned else (
        lambda rows, method, gpu=None: [c for c in EVERY(rows, method, gpu) if not c.kwargs["SWAP_AB"]])
    decode._TUNED.clear()
    decode._KEPT = decode.launches.LaunchCache()
    dispatch._PICKS = dispatch.launches.LaunchCache()


def us(fn):
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def picked(M, N, K):
    tuned = decode._tuned(decode.decode_rows(M, "dot"), "dot")
    for key, c in tuned.chosen.items():
        if key[:2] == (N, K):
            return f"{c.kwargs['BLOCK_N']}x{c.kwargs['BLOCK_K']} s{c.num_stages}{' turned' if c.kwargs['SWAP_AB'] else ''}"
    return ""


def main(out_path):
    rows = []
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__)
    for N, K in ((4096, 4096), (2048, 2048), (8192, 8192)):
        g = torch.Generator(device="cuda").manual_seed(0)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g)
        b = w.t()
        for M in (32, 64, 16, 1, 8):
            a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
            ref = a.double() @ b.double()
            row = dict(M=M, N=N, K=K, cublas_us=round(us(lambda: a @ b), 3))
            for turned in (True, False):
                orientation(turned)
                out = gemm_kernels.matmul_auto(a, b)  # tunes
                err = ((out.double() - ref).norm() / ref.norm()).item()
                name = "turned" if turned else "former"
                row[f"{name}_us"] = round(us(lambda: gemm_kernels.matmul_auto(a, b)), 3)
                row[f"{name}_err"] = err
                row[f"{name}_pick"] = picked(M, N, K)
            row["turned_vs_cublas"] = round(row["cublas_us"] / row["turned_us"], 3)
            row["former_vs_cublas"] = round(row["cublas_us"] / row["former_us"], 3)
            rows.append(row)
            print(row, flush=True)
            json.dump(dict(meta, rows=rows), open(out_path, "w"), indent=1)
    orientation(True)


if __name__ == "__main__":
    main(sys.argv[1])
