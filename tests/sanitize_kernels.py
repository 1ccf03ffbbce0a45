"""Every kernel on ragged shapes (empty problems, K = 0, padded and transposed strides, skewed
MoE routings with idle experts), each result checked against float64: the script to run under
``compute-sanitizer --tool memcheck`` on a GPU (``make sanitize``), where an out-of-bounds or
misaligned access is reported even when the numbers come out right.  Not a pytest module (the
sanitizer wraps the whole process); it exits non-zero when a result is wrong."""
import sys

import torch

import gemm_kernels as gk
from gemm_kernels.kernels import grouped
from gemm_kernels.kernels import moe
from gemm_kernels.kernels import persistent
from gemm_kernels.kernels.tma import tma_aligned
from gemm_kernels.kernels import streamk
from gemm_kernels.testing import rel_err, TOLERANCES

torch.manual_seed(0)
dev = gk.DEVICE
bad = []
count = 0


def check(name, out, ref, dtype):
    global count
    count += 1
    err = rel_err(out, ref)
    if not err <= TOLERANCES[dtype]:
        bad.append(f"{name}: rel err {err}")
        print("BAD", name, err, flush=True)


shapes = [(1, 1, 1), (37, 53, 29), (130, 258, 67), (257, 129, 200), (5, 300, 64)]
if str(dev) != "cpu":  # the interpreter would take minutes on it
    shapes.append((1000, 1003, 520))
for dtype in (torch.float16, torch.bfloat16):
    for M, N, K in shapes:
        a = torch.randn(M, K, device=dev, dtype=dtype)
        b = torch.randn(K, N, device=dev, dtype=dtype)
        bias = torch.randn(N, device=dev, dtype=dtype)
        ref = gk.matmul_ref(a, b, activation="gelu", bias=bias)
        for order in ("row_major", "grouped"):
            check(f"matmul {order} {M}x{N}x{K}", gk.matmul(a, b, order=order, activation="gelu", bias=bias), ref, dtype)
        check(f"persistent {M}x{N}x{K}", gk.matmul_persistent(a, b, activation="gelu", bias=bias), ref, dtype)
        for split in (None, 3):
            check(f"splitk {split} {M}x{N}x{K}", gk.matmul_splitk(a, b, split_k=split, activation="gelu", bias=bias), ref,
                  dtype)
        bt = b.t().contiguous().t()  # column-major B
        check(f"persistent colB {M}x{N}x{K}", gk.matmul_persistent(a, bt, activation="gelu", bias=bias), ref, dtype)
        at, bt2 = tma_aligned(a), tma_aligned(b)
        check(f"tma {M}x{N}x{K}", gk.matmul_tma(at, bt2, activation="gelu", bias=bias), ref, dtype)
        check(f"streamk {M}x{N}x{K}", streamk.matmul_streamk(at, bt2, activation="gelu", bias=bias), ref, dtype)
        if gk.supports_tma():
            check(f"splitk tma {M}x{N}x{K}", gk.matmul_splitk(at, bt2, split_k=3, tma=True, activation="gelu", bias=bias),
                  ref, dtype)
        check(f"auto {M}x{N}x{K}", gk.matmul_auto(a, b, activation="gelu", bias=bias), ref, dtype)
        if gk.runtime.supports_wgmma():  # every tile of the warp-specialized kernel, both layouts of b
            from gemm_kernels.kernels import matmul_ws
            for tile in matmul_ws.CONFIGS:
                for b_in, what in ((bt2, "B"), (tma_aligned(b.t()).t(), "W.t()")):
                    check(f"ws {tile} {what} {M}x{N}x{K}", matmul_ws._launch(at, b_in, schedule=tile, activation="gelu",
                                                                              bias=bias), ref, dtype)
        if (M * 2) % 16 == 0 and (K * 2) % 16 == 0:
            check(f"tma A^T {M}x{N}x{K}", gk.matmul_tma(a.t().contiguous().t(), bt2, activation="gelu", bias=bias), ref, dtype)

        # ragged N/M with 16-byte-aligned padded strides (the layout of the old false-hint fault)
        ap = torch.randn(M, -(-K // 8) * 8, device=dev, dtype=dtype)[:, :K]
        bp = torch.randn(K, -(-N // 8) * 8, device=dev, dtype=dtype)[:, :N]
        refp = gk.matmul_ref(ap, bp, activation="relu")
        for order in ("row_major", "grouped"):
            check(f"matmul padded {order} {M}x{N}x{K}", gk.matmul(ap, bp, order=order, activation="relu"), refp, dtype)
        check(f"persistent padded {M}x{N}x{K}", gk.matmul_persistent(ap, bp, activation="relu"), refp, dtype)
        check(f"tma padded {M}x{N}x{K}", gk.matmul_tma(ap, bp, activation="relu"), refp, dtype)
        check(f"streamk padded {M}x{N}x{K}", streamk.matmul_streamk(ap, bp, activation="relu"), refp, dtype)
        apt = torch.randn(K, -(-M // 8) * 8, device=dev, dtype=dtype)[:, :M].t()  # column-major, padded
        check(f"persistent padded A^T {M}x{N}x{K}", gk.matmul_persistent(apt, bp), gk.matmul_ref(apt, bp), dtype)

    # grouped GEMM: ragged, empty problems, K = 0
    gshapes = [(0, 16, 8), (37, 53, 29), (1, 1, 1), (130, 258, 67), (64, 0, 32), (16, 24, 0), (257, 129, 200)]
    ga = [torch.randn(M, K, device=dev, dtype=dtype) for M, N, K in gshapes]
    gb = [torch.randn(K, N, device=dev, dtype=dtype) for M, N, K in gshapes]
    refs = gk.grouped_matmul_ref(ga, gb, out_dtype=torch.float64)
    for c, r, s in zip(gk.grouped_matmul(ga, gb), refs, gshapes):
        if c.numel():
            check(f"grouped_matmul {s}", c, r, dtype)
    pad = lambda r, c: torch.randn(r, -(-max(c, 1) // 8) * 8, device=dev, dtype=dtype)[:, :c]  # noqa: E731
    ga_t = [pad(M, K) for M, N, K in gshapes]
    gb_t = [pad(K, N) for M, N, K in gshapes]
    refs = gk.grouped_matmul_ref(ga_t, gb_t, out_dtype=torch.float64)
    for c, r, s in zip(gk.grouped_matmul(ga_t, gb_t, tma=True), refs, gshapes):
        if c.numel():
            check(f"grouped_matmul tma {s}", c, r, dtype)
    for tma, (plan_a, plan_b) in ((True, (ga_t, gb_t)), (False, (ga, gb))):
        plan = grouped.GroupedMatmulPlan(plan_a, plan_b, tma=tma)
        for run in ("first", "bound"):  # the second run goes through the plan's BoundLaunch
            for a in plan_a:
                a.copy_(torch.randn(a.shape, device=dev, dtype=dtype))
            for c in plan.outputs:
                c.fill_(float("nan"))
            refs = gk.grouped_matmul_ref(plan_a, plan_b, out_dtype=torch.float64)
            for c, r, s in zip(plan.run(), refs, gshapes):
                if c.numel():
                    check(f"grouped plan tma={tma} {run} run {s}", c, r, dtype)

    # MoE grouped_mm: skewed routing with empty experts, both w layouts, TMA on and off
    for E, T, K, N in ((8, 37, 64, 96), (16, 300, 128, 72), (5, 3, 32, 16)):
        counts = torch.zeros(E, dtype=torch.int64)
        counts[0] = T // 2
        counts[E - 1] = T - T // 2  # the middle experts get no rows
        offs = torch.cumsum(counts, 0).to(dev, torch.int32)
        x = torch.randn(T, K, device=dev, dtype=dtype)
        w = torch.randn(E, K, N, device=dev, dtype=dtype)
        w_nk = torch.randn(E, N, K, device=dev, dtype=dtype).transpose(1, 2)
        for wname, ww in (("w", w), ("w_nk^T", w_nk)):
            ref = gk.grouped_mm_ref(x, ww, offs, out_dtype=torch.float64)
            for tma in (False, None):
                check(f"grouped_mm {wname} tma={tma} E={E} T={T}", gk.grouped_mm(x, ww, offs, tma=tma), ref, dtype)
        routing = gk.route_tokens(T, E, 2, skew=1.0)
        xr = torch.randn(int(routing.offs[-1]), K, device=dev, dtype=dtype)
        offs_r = routing.offs.to(dev, torch.int32)
        check(f"grouped_mm routed E={E}", gk.grouped_mm(xr, w, offs_r), gk.grouped_mm_ref(xr, w, offs_r, out_dtype=torch.float64), dtype)

# Kept launches (kernels/launches.py): the second and third calls with one key go straight to the
# compiled kernel with fresh tensors (a ragged shape with a bias, and a transposed b)
for name, fn, needs_tma in (("matmul", gk.matmul, False), ("matmul_persistent", gk.matmul_persistent, False),
                            ("matmul_tma", gk.matmul_tma, True), ("matmul_streamk", gk.matmul_streamk, True),
                            ("matmul_splitk", gk.matmul_splitk, False), ("matmul_auto", gk.matmul_auto, False)):
    if needs_tma and not gk.supports_tma():
        continue
    for M, N, K, transposed in ((37, 72, 1000, False), (64, 40, 264, True)):
        for _ in range(3):
            a = torch.randn(M, K, device=dev, dtype=torch.float16)
            b = (torch.randn(N, K, device=dev, dtype=torch.float16).t() if transposed
                 else torch.randn(K, N, device=dev, dtype=torch.float16))
            bias = torch.randn(N, device=dev, dtype=torch.float16)
            check(f"kept {name} {M}x{N}x{K}", fn(a, b, bias=bias, activation="gelu"),
                  gk.matmul_ref(a, b, bias=bias, activation="gelu", out_dtype=torch.float64), torch.float16)

if str(dev) != "cpu":
    torch.cuda.synchronize()
print(f"{count} checks, {len(bad)} bad", flush=True)
for line in bad:
    print(line)
sys.exit(1 if bad else 0)
