"""PERF_NOTES 56's next lever, run on an H100 at tree d63235b (`decode_tma_sweep.{json,log}`; what it found and the
change it led to: `../entry57/README.md`): a decode kernel that puts the weight's rows on the MMA's
wide side (swap A and B: `wgmma` of 64 or 128 weight rows by 16-64 tokens, where `decode.py`'s `ROWS` of 16
or 32 compile to `mma.sync`) and loads both operands by TMA; K split as `decode.py` splits it.  The same swap
with `decode.py`'s pointer loads (`tma=False`) tells which half of the change pays.

    python decode_tma_proto.py cpu            # interpreter: correctness at small ragged shapes
    python decode_tma_proto.py gpu OUT.json   # CUDA graphs (do_bench_cudagraph) vs cuBLAS and matmul_auto, configs x splits
"""
import itertools, json, sys
import torch, triton
import triton.language as tl
from gemm_kernels import runtime
from gemm_kernels.kernels import decode


@triton.jit
def _decode_tma_kernel(a_ptr, w_ptr, c_ptr, partial_ptr, count_ptr, M, N, K, stride_am, stride_wn, stride_cm, stride_cn,
                       ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr):
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    num_splits = tl.num_programs(1)
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1], block_shape=[BLOCK_N, BLOCK_K])
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[ROWS, BLOCK_K])
    k_blocks = tl.cdiv(K, BLOCK_K)
    per = tl.cdiv(k_blocks, num_splits)
    kb0 = split * per
    kb1 = tl.minimum(kb0 + per, k_blocks)
    acc = tl.zeros((BLOCK_N, ROWS), dtype=tl.float32)
    for kb in tl.range(kb0, kb1, num_stages=NUM_STAGES):
        w = w_desc.load([pid_n * BLOCK_N, kb * BLOCK_K])  # [BLOCK_N, BLOCK_K], zero past N and K
        a = a_desc.load([0, kb * BLOCK_K])  # [ROWS, BLOCK_K], zero past M and K
        acc = tl.dot(w, a.T, acc)  # C^T's tile: the weight's rows on the MMA's wide side
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, ROWS)
    if num_splits > 1:
        tile = tl.arange(0, BLOCK_N)[:, None] * ROWS + offs_m[None, :]
        slots = partial_ptr + pid_n.to(tl.int64) * num_splits * (ROWS * BLOCK_N)
        tl.store(slots + split * (ROWS * BLOCK_N) + tile, acc)
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        last = arrived == num_splits - 1
        if last:
            tl.atomic_xchg(count_ptr + pid_n, 0, sem="relaxed", scope="gpu")
            acc = tl.zeros((BLOCK_N, ROWS), dtype=tl.float32)
            for s in range(0, num_splits):
                acc += tl.load(slots + s * (ROWS * BLOCK_N) + tile, cache_modifier=".cg")
    else:
        last = True
    if last:
        mask = (offs_n[:, None] < N) & (offs_m[None, :] < M)
        tl.store(c_ptr + offs_m[None, :] * stride_cm + offs_n[:, None] * stride_cn,
                 acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _decode_swap_kernel(a_ptr, b_ptr, c_ptr, partial_ptr, count_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        stride_cm, stride_cn, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        NUM_STAGES: tl.constexpr):
    """The same swap with decode.py's pointer loads (cp.async, any strides): which half of the change pays."""
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    num_splits = tl.num_programs(1)
    offs_m = tl.arange(0, ROWS)
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), num_splits) * BLOCK_K
    k_start = split * per_split
    k_end = tl.minimum(k_start + per_split, K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + (k_start + offs_k)[None, :] * stride_ak
    w_ptrs = b_ptr + offs_n[:, None] * stride_bn + (k_start + offs_k)[None, :] * stride_bk
    acc = tl.zeros((BLOCK_N, ROWS), dtype=tl.float32)
    for k in tl.range(k_start, k_end, BLOCK_K, num_stages=NUM_STAGES):
        k_ok = offs_k < k_end - k
        a = tl.load(a_ptrs, mask=(offs_m < M)[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=k_ok[None, :], other=0.0)
        acc = tl.dot(w, tl.trans(a), acc)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_bk
    if num_splits > 1:
        tile = tl.arange(0, BLOCK_N)[:, None] * ROWS + offs_m[None, :]
        slots = partial_ptr + pid_n.to(tl.int64) * num_splits * (ROWS * BLOCK_N)
        tl.store(slots + split * (ROWS * BLOCK_N) + tile, acc)
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        last = arrived == num_splits - 1
        if last:
            tl.atomic_xchg(count_ptr + pid_n, 0, sem="relaxed", scope="gpu")
            acc = tl.zeros((BLOCK_N, ROWS), dtype=tl.float32)
            for s in range(0, num_splits):
                acc += tl.load(slots + s * (ROWS * BLOCK_N) + tile, cache_modifier=".cg")
    else:
        last = True
    if last:
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (offs_n[:, None] < N) & (offs_m[None, :] < M)
        tl.store(c_ptr + offs_m[None, :] * stride_cm + offs_n[:, None] * stride_cn,
                 acc.to(c_ptr.dtype.element_ty), mask=mask)


def decode_tma(a, b, bn=64, bk=128, stages=4, warps=4, split=None, poison=False, tma=True):
    """a [M, K] row-major, b = W.t() with W [N, K] row-major (nn.Linear's layout); tma=False: pointer loads."""
    w = b.t()
    assert not tma or a.stride(1) == 1 and w.stride(1) == 1 and (a.stride(0) * 2) % 16 == 0 and (w.stride(0) * 2) % 16 == 0
    M, K = a.shape
    N = w.shape[0]
    rows = max(16, triton.next_power_of_2(M))
    n_blocks, k_blocks = triton.cdiv(N, bn), triton.cdiv(K, bk)
    if split is None:
        split = decode.decode_splits(n_blocks, k_blocks, runtime.num_sms())
    split = max(1, min(split, k_blocks))
    c = (torch.full if poison else lambda shape, _, **kw: torch.empty(shape, **kw))((M, N), float("nan"), device=a.device, dtype=a.dtype)
    partials, counts = decode._workspace(n_blocks * split * rows * bn, n_blocks, a.device)
    if not tma:
        _decode_swap_kernel[(n_blocks, split)](a, b, c, partials, counts, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                               b.stride(1), c.stride(0), c.stride(1), ROWS=rows, BLOCK_N=bn, BLOCK_K=bk,
                                               NUM_STAGES=stages, num_warps=warps)
        return c
    runtime.ensure_tma_allocator()
    _decode_tma_kernel[(n_blocks, split)](a, w, c, partials, counts, M, N, K, a.stride(0), w.stride(0), c.stride(0),
                                          c.stride(1), ROWS=rows, BLOCK_N=bn, BLOCK_K=bk, NUM_STAGES=stages,
                                          num_warps=warps)
    return c


def rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


def cpu_check():
    torch.manual_seed(0)
    for M, N, K, split in ((1, 40, 48, 1), (3, 72, 80, 2), (17, 64, 200, 3), (33, 130, 64, 1), (64, 96, 136, 4)):
        for dtype in (torch.float16, torch.bfloat16):
            a = torch.randn(M, K, dtype=dtype)
            w = torch.randn(N, K, dtype=dtype)
            for tma in (True, False):
                out = decode_tma(a, w.t(), bn=32, bk=32, stages=1, split=split, poison=True, tma=tma)
                assert not out.isnan().any()
                err = rel(out, a.double() @ w.double().t())
                print(M, N, K, split, dtype, tma, f"{err:.1e}")
                assert err < 1e-2, err


def graph_us(fn):
    """Median us per call, back-to-back calls replayed from a CUDA graph (the `decode` suite's timing)."""
    from triton.testing import do_bench_cudagraph
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def gpu_sweep(out_path):
    import gemm_kernels
    rows_out = []
    cases = [(64, 4096, 4096), (32, 4096, 4096), (64, 2048, 2048), (32, 2048, 2048), (16, 4096, 4096),
             (64, 8192, 8192), (1, 4096, 4096), (8, 2048, 2048)]
    configs = [(64, 128, 4, 4), (64, 128, 6, 4), (64, 256, 3, 4), (64, 256, 4, 4), (64, 64, 8, 4),
               (128, 64, 6, 4), (128, 64, 8, 4), (128, 128, 4, 4), (128, 128, 4, 8)]
    for M, N, K in cases:
        g = torch.Generator(device="cuda").manual_seed(0)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g)
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
        b = w.t()
        ref = a.double() @ b.double()
        cub = graph_us(lambda: a @ b)
        auto = graph_us(lambda: gemm_kernels.matmul_auto(a, b))
        rows = max(16, triton.next_power_of_2(M))
        best = {True: None, False: None}
        for (bn, bk, st, wp), tma in itertools.product(configs, (True, False)):
            if st * (bn + rows) * bk * 2 > 200 * 1024:  # shared memory per program
                continue
            rule = decode.decode_splits(triton.cdiv(N, bn), triton.cdiv(K, bk), runtime.num_sms())
            for split in sorted({1, 2, rule}):
                try:
                    out = decode_tma(a, b, bn, bk, st, wp, split, poison=True, tma=tma)
                    err = rel(out, ref)
                    us = graph_us(lambda: decode_tma(a, b, bn, bk, st, wp, split, tma=tma))
                except Exception as e:  # noqa: BLE001
                    print("fail", M, N, K, bn, bk, st, wp, split, tma, repr(e)[:160], flush=True)
                    continue
                r = dict(M=M, N=N, K=K, tma=tma, bn=bn, bk=bk, stages=st, warps=wp, split=split, rule=split == rule,
                         us=round(us, 3), vs_cublas=round(cub / us, 3), err=err, ok=bool(err < 1e-2 and not out.isnan().any()))
                rows_out.append(r)
                if r["ok"] and (best[tma] is None or us < best[tma]["us"]):
                    best[tma] = r
        rows_out.append(dict(M=M, N=N, K=K, cublas_us=round(cub, 3), auto_us=round(auto, 3)))
        print(f"M={M} {N}x{K}: cuBLAS {cub:.2f} us, auto {auto:.2f} ({cub / auto:.3f}x), TMA best {best[True]}, pointer best {best[False]}", flush=True)
        json.dump(rows_out, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    cpu_check() if sys.argv[1] == "cpu" else gpu_sweep(sys.argv[2])
