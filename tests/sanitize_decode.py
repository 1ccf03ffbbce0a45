"""The decode kernel on ragged shapes, both methods, both tl.dot orientations (C's tile and C^T's),
both layouts of b, split and unsplit, each result checked against float64: the script to run under ``compute-sanitizer --tool memcheck``
(``tests/gpu_decode.py``'s request), where an out-of-bounds access is reported even when the
numbers come out right.  Not a pytest module; exits non-zero when a result is wrong."""
import sys

import torch

import gemm_kernels as gk
from gemm_kernels.kernels import decode
from gemm_kernels.kernels.decode import matmul_decode
from gemm_kernels.testing import TOLERANCES, rel_err

EVERY = decode.decode_configs
torch.manual_seed(0)
bad, count = [], 0
for dtype, swap in ((torch.bfloat16, True), (torch.bfloat16, False)):  # fp16: the same code (test_decode.py)
    # the first config of one orientation (GEMM_KERNELS_AUTOTUNE=0 runs the first)
    decode.decode_configs = lambda rows, method, gpu=None: sorted(EVERY(rows, method, gpu),
                                                                  key=lambda c: c.kwargs["SWAP_AB"] != swap)
    decode._TUNED.clear()
    decode._KEPT = decode.launches.LaunchCache()  # no kept launch of the other orientation
    for M, N, K in ((1, 37, 45), (3, 130, 67), (5, 33, 300), (17, 70, 129), (64, 100, 260)):
        a = torch.randn(M, K, device=gk.DEVICE, dtype=dtype)
        w = torch.randn(N, K, device=gk.DEVICE, dtype=dtype)
        bias = torch.randn(N, device=gk.DEVICE, dtype=dtype)
        for layout, b in (("W.t()", w.t()), ("contiguous", w.t().contiguous())):
            ref = gk.matmul_ref(a, b, activation="gelu", bias=bias, out_dtype=torch.float64)
            for method in ("fma", "dot") if M <= 4 else ("dot",):
                for split in (None, 1, 3):
                    out = matmul_decode(a, b, activation="gelu", bias=bias, method=method, split_k=split)
                    err = rel_err(out, ref)
                    count += 1
                    if not err <= TOLERANCES[dtype]:
                        bad.append(f"{dtype} {M}x{N}x{K} {layout} {method} swap {swap} split {split}: {err}")
torch.cuda.synchronize() if torch.cuda.is_available() else None
print(f"{count} decode results checked, {len(bad)} wrong", *bad, sep="\n")
sys.exit(1 if bad else 0)
