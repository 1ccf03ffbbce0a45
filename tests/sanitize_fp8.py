"""The fp8 kernels on ragged shapes (``scaled_mm`` in every scaling, TMA and pointer loads;
``scaled_grouped_mm`` with idle experts, a tail and a bad ``offs``), each result checked against
float64: run under ``compute-sanitizer --tool memcheck`` (``make sanitize``).  Not a pytest
module; exits non-zero when a result is wrong.  ``python tests/sanitize_fp8.py block``: the
block-scaled ``scaled_mm`` calls only (for racecheck over the producer's scale buffer, PERF_NOTES 35)."""
import sys

import numpy as np
import torch

import gemm_kernels as gk
from gemm_kernels.kernels import fp8, moe
from gemm_kernels.testing import TOLERANCES, rel_err

dev = gk.DEVICE
bad, count = [], 0
gen = torch.Generator().manual_seed(0)


def check(name, out, ref):
    global count
    count += 1
    err = rel_err(out, ref)
    if not err <= TOLERANCES[torch.bfloat16]:
        bad.append(f"{name}: rel err {err}")
        print("BAD", name, err, flush=True)


only_block = sys.argv[1:] == ["block"]
for M, N, K in [(1, 16, 128), (37, 53, 256), (130, 258, 384), (257, 129, 128), (1000, 1003, 1024)]:
    x = torch.randn(M, K, generator=gen).to(dev)
    w = torch.randn(N, K, generator=gen).to(dev)
    for scaling in ["block"] if only_block else fp8.SCALINGS:
        ga, gb = fp8.granularities(scaling)
        a, sa = fp8.quantize_fp8(x, ga)
        b, sb = fp8.quantize_fp8(w.t(), gb)
        ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
        check(f"scaled_mm {scaling} {M}x{N}x{K}", fp8.scaled_mm(a, b, sa, sb), ref)
        check(f"scaled_mm {scaling} fast {M}x{N}x{K}", fp8.scaled_mm(a, b, sa, sb, use_fast_accum=True), ref)
        pad = torch.zeros(M, K + 16, dtype=a.dtype, device=dev)  # rows 16 bytes longer: still TMA-aligned
        pad[:, :K] = a
        check(f"scaled_mm {scaling} padded a {M}x{N}x{K}", fp8.scaled_mm(pad[:, :K], b, sa, sb), ref)
        odd = torch.zeros(M * (K + 1) + 1, dtype=a.dtype, device=dev)[1:].view(M, K + 1)[:, :K]  # not 16-byte aligned
        odd.copy_(a)
        check(f"scaled_mm {scaling} unaligned a (pointer loads) {M}x{N}x{K}", fp8.scaled_mm(odd, b, sa, sb), ref)
        if gk.runtime.supports_wgmma() and K >= 384:  # split units, the last piece ending past K (3 of 3 blocks: 2 + 1)
            from gemm_kernels.kernels import matmul_ws

            for tile in ("128x128", "128x256"):
                out = matmul_ws.scaled_mm_ws(a, b, sa, sb, scaling, out_dtype=torch.bfloat16, bias=None,
                                             use_fast_accum=False, tile=tile, split_k=2)
                check(f"scaled_mm_ws {scaling} {tile} 2 split units {M}x{N}x{K}", out, ref)

for counts, tail in [] if only_block else [([5, 0, 33, 1], 3), ([0, 0, 70], 0), ([130, 1, 0, 257], 9)]:
    T, E, K, N = sum(counts) + tail, len(counts), 256, 200
    x, sx = fp8.quantize_fp8(torch.randn(T, K, generator=gen).to(dev), "row")
    w, sw = fp8.quantize_experts(torch.randn(E, K, N, generator=gen).to(dev))
    offs = torch.tensor(np.cumsum(counts), dtype=torch.int32, device=dev)
    ref = fp8.scaled_grouped_mm_ref(x, w, sx.reshape(T), sw, offs, out_dtype=torch.float64)
    for tma in (None, False):
        check(f"scaled_grouped_mm {counts} tma={tma}", fp8.scaled_grouped_mm(x, w, sx.reshape(T), sw, offs, tma=tma), ref)
    # a bad offs (past T, then decreasing) must stay inside x, w and out; the next call reports it
    wild = torch.tensor([T + 500] + [1] * (E - 1), dtype=torch.int32, device=dev)
    fp8.scaled_grouped_mm(x, w, sx.reshape(T), sw, wild, check_offs=False)
    try:  # on a GPU the kernel records it and the next call (or raise_pending_offs_error) raises
        fp8.scaled_grouped_mm(x, w, sx.reshape(T), sw, wild)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        moe.raise_pending_offs_error()
        reported = False
    except ValueError:  # the interpreter checks on the host, before the launch
        reported = True
    if not reported:
        bad.append(f"bad offs {counts} not reported")

print(f"{count} fp8 results checked, {len(bad)} wrong")
sys.exit(1 if bad else 0)
