"""Split-K in ``matmul_ws``, three versions in one process (GPU only): ``python tests/gpu_ws_split_ab.py OUT.json``.

``fused4`` is this package (the last piece of a tile adds the pieces, four loads in flight);
``fused1`` the same with one load at a time, ``twokernel`` the version before (its pieces added by a
second kernel, commit 1b0de43).  The two others are copies of the package under other names in
``build/alt`` (``git archive 1b0de43 gemm_kernels | tar -x -C /tmp/old`` then
``mv /tmp/old/gemm_kernels build/alt/gemm_kernels_old``; relative imports make the renamed copy work).
GPU time: ``do_bench_cudagraph``, the variants in a new random order each of 5 rounds, median; host
time at 256^3: ``host_ms`` per round, same-round ratio to ``torch.matmul``, median of 15.
PERF_NOTES entry 37 reads ``images/bench/entry37/split_ab.json``.
"""
import json, random, statistics, sys, time
sys.path.insert(0, "build/alt")
import torch
from triton.testing import do_bench_cudagraph
import gemm_kernels as new
import gemm_kernels_f1 as f1
import gemm_kernels_old as old
from gemm_kernels.bench.core import host_ms

out = sys.argv[1]
V = {"fused4": new.matmul_ws, "fused1": f1.matmul_ws, "twokernel": old.matmul_ws}
SHAPES = [(512, 512, 16384, False), (512, 512, 16384, True), (384, 384, 32768, False), (128, 1024, 16384, True),
          (1024, 1024, 8192, False), (256, 256, 256, False)]
res = {"gpu": {}, "host": {}, "errors": {}}
t0 = time.time()
for M, N, K, lin in SHAPES:
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(N, K, device="cuda", dtype=torch.float16)
    b = w.t() if lin else w.t().contiguous()
    ref = a.double() @ b.double()
    split = 4 if (M, N, K) == (1024, 1024, 8192) else None  # this one does not split by default: force it
    fns = {"cuBLAS": lambda: torch.matmul(a, b)}
    for name, f in V.items():
        fns[name] = (lambda f=f: f(a, b, split_k=split))
    key = f"{M}x{N}x{K}{' W.t()' if lin else ''}{'' if split is None else ' split_k=4'}"
    for name, fn in fns.items():
        o = fn(); torch.cuda.synchronize()
        res["errors"][f"{key} {name}"] = float((o.double() - ref).norm() / ref.norm())
    eq = torch.equal(fns["fused4"](), fns["fused1"]()) and torch.equal(fns["fused4"](), fns["twokernel"]())
    res["errors"][f"{key} bits equal"] = bool(eq)
    samples = {n: [] for n in fns}
    for r in range(5):
        order = list(fns); random.shuffle(order)
        for n in order:
            samples[n].append(do_bench_cudagraph(fns[n], rep=30) * 1e3)
    res["gpu"][key] = {n: round(statistics.median(v), 2) for n, v in samples.items()}
    print(key, res["gpu"][key], f"{time.time()-t0:.0f}s", flush=True)
# host, 256^3 (the GPU faster than the host)
a = torch.randn(256, 256, device="cuda", dtype=torch.float16); b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
fns = {"torch": lambda: torch.matmul(a, b), **{n: (lambda f=f: f(a, b)) for n, f in V.items()},
       "fused4 split_k=1": lambda: new.matmul_ws(a, b, split_k=1), "matmul_splitk": lambda: new.matmul_splitk(a, b)}
ratios = {n: [] for n in fns}
raw = {n: [] for n in fns}
for r in range(15):
    order = list(fns); random.shuffle(order)
    t = {n: host_ms(fns[n], 400) * 1e3 for n in order}
    for n in fns:
        raw[n].append(t[n]); ratios[n].append(t[n] / t["torch"])
res["host"] = {n: {"median_us": round(statistics.median(raw[n]), 2), "min_us": round(min(raw[n]), 2),
                   "median_ratio": round(statistics.median(ratios[n]), 3)} for n in fns}
print(json.dumps(res["host"]), flush=True)
json.dump(res, open(out, "w"), indent=1)
