import torch, json, os
from gemm_kernels.kernels.decode import matmul_decode
from gemm_kernels import runtime
res = []
for M, N in ((1, 2048), (16, 2048), (32, 4096)):
    K = N
    ws = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t() for _ in range(8)]
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    for name, fn in (("torch", lambda x, w: x @ w), ("ours", matmul_decode), ("ours_memset", "memset"), ("torch2", lambda x, w: x @ w), ("ours2", matmul_decode)):
        runtime._CAPTURE_ZEROS_BYTES = 1 << 22; runtime._CAPTURE_ZEROS.clear()
        if fn == "memset":
            runtime._CAPTURE_ZEROS_BYTES = 0; runtime._CAPTURE_ZEROS.clear(); fn = matmul_decode
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            for w in ws: fn(a, w)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(10):
                for w in ws: fn(a, w)
        g.replay(); torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        e0.record()
        for _ in range(20): g.replay()
        e1.record(); torch.cuda.synchronize()
        us = e0.elapsed_time(e1) * 1000 / (20 * 80)
        res.append((M, N, name, round(us, 2)))
        print(M, N, name, round(us, 2), flush=True)
for i in range(0, len(res), 5):
    t = (res[i][3] + res[i + 3][3]) / 2
    print("ratio", res[i][:2], "pool", round(t / res[i + 1][3], 3), round(t / res[i + 4][3], 3), "memset", round(t / res[i + 2][3], 3))
