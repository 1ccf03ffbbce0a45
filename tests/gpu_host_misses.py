"""Where the host-time misses of the ``host`` suite go, and the clocks behind PERF_NOTES 38's split
units (GPU only): ``python tests/gpu_host_misses.py OUT.json``.

cProfile (``core.host_profile``, by own time) of: ``grouped_mm`` forward + backward against
``torch._grouped_mm``'s (the suite's 8 x 64 x 256 x 256 case); a first call of a key (keeping
off, as the suite's "checked every call" rows) of ``matmul`` at 256³ fp16 and of ``scaled_mm``
row-wise at 256³.  Then ``bench.clocks.timed_with_clocks`` (``do_bench`` with ``nvidia-smi``
sampling the SM clock and power) of ``matmul_ws`` at 257 x 8192 x 28672 bf16 in 128 x 256 tiles,
unsplit and in 4 pieces, two interleaved rounds, beside cuBLAS.
"""
import json
import sys

import torch

import gemm_kernels as gk
from gemm_kernels.bench import suites
from gemm_kernels.bench.clocks import timed_with_clocks
from gemm_kernels.bench.core import host_ms, host_profile
from gemm_kernels.kernels import fp8, matmul_ws, moe

unkept = suites._checked_every_call  # keeping off, as the host suite's "checked every call" rows


def main(path):
    out = {"gpu": torch.cuda.get_device_name(), "host_us": {}, "profile": {}, "clocks": []}
    experts, rows, K, N = 8, 64, 256, 256
    x = torch.randn(experts * rows, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, N, K, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    offs = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * rows
    dy = torch.randn(experts * rows, N, device="cuda", dtype=torch.bfloat16)
    a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    qa, sa = fp8.quantize_fp8(torch.randn(256, 256, device="cuda", dtype=torch.bfloat16), "row")
    qw, sw = fp8.quantize_fp8(torch.randn(256, 256, device="cuda", dtype=torch.bfloat16), "row")
    calls = {
        "torch._grouped_mm fwd+bwd": suites._moe_fwd_bwd(lambda x, w, offs: torch._grouped_mm(x, w, offs=offs), x, w, offs, dy),
        "grouped_mm fwd+bwd": suites._moe_fwd_bwd(moe.grouped_mm, x, w, offs, dy),
        "torch.matmul": lambda: torch.matmul(a, b),
        "matmul, first call of a key": unkept(lambda: gk.matmul(a, b)),
        "torch._scaled_mm": lambda: torch._scaled_mm(qa, qw.t(), sa, sw.t(), out_dtype=torch.bfloat16),
        "scaled_mm, first call of a key": unkept(lambda: fp8.scaled_mm(qa, qw.t(), sa, sw.t())),
    }
    for name, fn in calls.items():
        fn()
        out["host_us"][name] = [round(host_ms(fn, 200) * 1e3, 2) for _ in range(3)]
        out["profile"][name] = host_profile(fn, 200, top=14)
        print(name, out["host_us"][name], flush=True)
    json.dump(out, open(path, "w"), indent=1)

    M, N, K = 257, 8192, 28672
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
    runs = {"cuBLAS": lambda: torch.matmul(a, b),
            "128x256 unsplit": lambda: matmul_ws._launch(a, b, schedule="cooperative", split_k=1),
            "128x256 in 4 pieces": lambda: matmul_ws._launch(a, b, schedule="cooperative", split_k=4)}
    for fn in runs.values():
        fn()
    for round_ in range(2):
        for name, fn in (runs.items() if round_ == 0 else reversed(runs.items())):
            row = timed_with_clocks(fn, "0", rep_ms=1500, period_ms=20)
            out["clocks"].append({"round": round_, "run": name, **row})
            print(out["clocks"][-1], flush=True)
            json.dump(out, open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
