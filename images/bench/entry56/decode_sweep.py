"""Decode configs x K pieces in CUDA graphs (L2-warm, as the decode suite), against cuBLAS; one forced config at a time."""
import sys, json, torch, triton
from gemm_kernels import runtime
from gemm_kernels.kernels import decode, configs, launches
rows_out = []
CFGS = [(64, 128, 4, 4), (32, 256, 3, 4), (128, 128, 3, 4), (64, 256, 3, 4), (16, 256, 4, 4),
        (32, 128, 4, 4), (64, 64, 6, 4), (128, 64, 6, 4), (32, 512, 2, 4), (64, 128, 6, 4),
        (64, 128, 4, 8), (128, 128, 4, 8), (128, 64, 4, 4), (256, 64, 4, 8), (128, 256, 3, 8), (64, 64, 8, 4)]

def graph_us(fn, calls=400, replays=10):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn(); fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay(); torch.cuda.synchronize()
    ts = []
    for _ in range(replays):
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        e0.record(); g.replay(); e1.record(); torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) * 1000 / calls)
    ts.sort()
    return ts[len(ts) // 2]

cases = [(64, 4096, 4096), (32, 4096, 4096), (64, 2048, 2048), (32, 2048, 2048), (64, 8192, 8192), (16, 4096, 4096)]
for M, N, K in cases:
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    ref = (a.double() @ w.double())
    cub = graph_us(lambda: a @ w)
    rows = decode.decode_rows(M, "dot")
    decode._TUNED.clear()
    dflt = graph_us(lambda: decode.matmul_decode(a, w))
    best = None
    for bn, bk, st, wp in CFGS:
        decode._TUNED[(rows, "dot")] = configs.TunedKernel(decode._decode_kernel, [decode._cfg(rows, bn, bk, st, wp)],
                                                            key=decode.DECODE_KEY, variant=f"-sweep{bn}_{bk}_{st}")
        decode._KEPT.clear()  # a kept launch would replay the last config of this key
        kb = triton.cdiv(K, bk)
        for split in sorted({1, 2, 3, 4, 6, 8, 16, decode.decode_splits(triton.cdiv(N, bn), kb, runtime.num_sms())}):
            if split > kb:
                continue
            try:
                out = decode.matmul_decode(a, w, split_k=split)
                err = ((out.double() - ref).norm() / ref.norm()).item()
                us = graph_us(lambda: decode.matmul_decode(a, w, split_k=split))
            except Exception as e:
                print("fail", M, N, K, bn, bk, st, split, repr(e)[:200], flush=True); continue
            r = dict(M=M, N=N, K=K, bn=bn, bk=bk, stages=st, warps=wp, split=split, us=round(us, 3),
                     ratio=round(cub / us, 3), err=err)
            rows_out.append(r)
            if best is None or us < best["us"]:
                best = r
    decode._TUNED.clear()
    print(f"M={M} {N}x{K}: cuBLAS {cub:.2f} us, default {dflt:.2f} ({cub/dflt:.3f}x), best {best}", flush=True)
    rows_out.append(dict(M=M, N=N, K=K, cublas_us=round(cub, 3), default_us=round(dflt, 3)))
    json.dump(rows_out, open(sys.argv[1], "w"), indent=1)
