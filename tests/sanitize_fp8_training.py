"""The fp8 training kernels on ragged shapes (``quantize_fp8_transposed`` with both scale formats
and both fp8 formats, a strided view; ``scaled_mm_amax``), each result checked against float64:
run under ``compute-sanitizer --tool memcheck``.  Not a pytest module; exits non-zero when a
result is wrong.  ``python tests/sanitize_fp8_training.py quick``: one ragged shape, row scales only."""
import sys

import torch

import gemm_kernels as gk
from gemm_kernels.kernels import fp8
from gemm_kernels.kernels import fp8_training as ft
from gemm_kernels.testing import TOLERANCES, rel_err

dev = gk.DEVICE
gen = torch.Generator().manual_seed(0)
bad, count = [], 0
quick = sys.argv[1:] == ["quick"]


def report(name, ok):
    global count
    count += 1
    if not ok:
        bad.append(name)
        print("BAD", name, flush=True)


def same(out, ref):
    def same_fp8(a, b):
        na, nb = a.float().isnan(), b.float().isnan()
        return torch.equal(na, nb) and torch.equal(a.view(torch.uint8)[~na], b.view(torch.uint8)[~nb])
    return (same_fp8(out.q, ref.q) and same_fp8(out.q_t, ref.q_t) and torch.equal(out.scale, ref.scale)
            and torch.equal(out.scale_t, ref.scale_t))


for M, K in [(1000, 1003)] + ([] if quick else [(257, 129), (1, 300)]):
    x = (torch.randn(M, K, generator=gen) * 3).bfloat16().to(dev)
    for fp8_dtype in fp8.FP8_DTYPES:
        for fmt in ft.SCALE_FORMATS:
            report(f"cast-transpose {M}x{K} {fp8_dtype} {fmt}",
                   same(ft.quantize_fp8_transposed(x, dtype=fp8_dtype, scale_format=fmt),
                        ft.quantize_fp8_transposed_ref(x, dtype=fp8_dtype, scale_format=fmt)))
    view = x.t()[:, 1:]  # strided and transposed
    report(f"cast-transpose {M}x{K} view", same(ft.quantize_fp8_transposed(view), ft.quantize_fp8_transposed_ref(view)))

for scaling in ["row"] if quick else fp8.SCALINGS:
    M, N, K = 1000, 1003, 1024
    ga, gb = fp8.granularities(scaling)
    a, sa = fp8.quantize_fp8(torch.randn(M, K, generator=gen).to(dev), ga)
    b, sb = fp8.quantize_fp8(torch.randn(N, K, generator=gen).to(dev).t(), gb)
    out, amax = ft.scaled_mm_amax(a, b, sa, sb)
    ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
    report(f"scaled_mm_amax {scaling} {M}x{N}x{K}",
           rel_err(out, ref) <= TOLERANCES[torch.bfloat16] and amax.item() == out.float().abs().max().item())

print(f"{count - len(bad)} of {count} checks passed")
sys.exit(1 if bad else 0)
