"""GPU check of proto.py (sm_90, Triton 3.6, torch 2.x): correctness against float64 and timing
against torch.matmul (cuBLAS), for the multicast kernel and the same cluster kernel without
multicast.

    python check_gpu.py              # every case, each in its own process with a timeout
    python check_gpu.py --quick      # 1000^3 and 4096^3 only
    python check_gpu.py --case M N K dtype   # one case, in this process (what the parent runs)

Nothing can hang: each case runs in a child process killed after CASE_TIMEOUT_S (a hung kernel
dies with its CUDA context), and the kernel's own barrier waits trap after 2 s (proto.WAIT_LIMIT_NS),
which ends the child with a CUDA error instead.  Exit status 0 only if every case passed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [  # (M, N, K, dtype)
    (1000, 1000, 1000, "float16"),   # ragged: partial tiles in M, N and K; the pair's 2nd tile half empty
    (4096, 4096, 4096, "float16"),
    (128, 256, 64, "float16"),       # one pair, rank 1's tile entirely outside M; one K block (< STAGES)
    (384, 512, 320, "float16"),      # 2 pairs, the 2nd pair's rank-1 tile outside M; K = 5 blocks (> STAGES)
    (2049, 1031, 520, "float16"),    # N*2 bytes not 16-aligned: B and C padded by run()
    (8192, 8192, 8192, "float16"),
    (4096, 4096, 4096, "bfloat16"),
]
QUICK = [CASES[0], CASES[1]]
CASE_TIMEOUT_S = 300  # compile (4 compiles on the first case, Triton's disk cache after) + checks + timing


def _one(M, N, K, dtype_name):
    import torch
    import triton
    from triton.testing import do_bench

    sys.path.insert(0, HERE)
    import proto

    dtype = getattr(torch, dtype_name)
    dev = "cuda"
    torch.manual_seed(0)
    a = torch.randn(M, K, device=dev).to(dtype)
    b = torch.randn(K, N, device=dev).to(dtype)
    ref = a.double() @ b.double()
    ref_c = torch.matmul(a, b)
    err_torch = (ref_c.double() - ref).abs().max().item()
    scale = ref.abs().max().item()
    ok_all = True
    results = {}
    for mc in (True, False):
        junk = torch.full((M, -(-N // 8) * 8), float("nan"), device=dev, dtype=dtype)
        del junk  # best effort: run()'s torch.empty(C) reuses this NaN block, so an unwritten element shows
        t0 = time.perf_counter()
        c = proto.run(a, b, multicast=mc)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        err = (c.double() - ref).abs().max().item()
        finite = bool(torch.isfinite(c).all().item())
        # the same inputs again: same bits (no race between the CTAs of a cluster)
        c2 = proto.run(a, b, multicast=mc)
        torch.cuda.synchronize()
        same = bool(torch.equal(c, c2))
        ok = finite and same and err <= 2.0 * err_torch + 1e-5 * scale
        ok_all &= ok
        results[mc] = (err, ok)
        print(f"  multicast={mc!s:5}: max|C-ref| {err:.4g} (torch {err_torch:.4g}, |ref|max {scale:.3g}) "
              f"finite={finite} repeatable={same} first call {first_s:.1f}s -> {'PASS' if ok else 'FAIL'}",
              flush=True)
    key = (True, "f16" if dtype == torch.float16 else "bf16")
    if key in proto.COMPILED:
        ptx = proto.COMPILED[key].asm["ptx"]
        print("  PTX: reqnctapercluster 2:", ".reqnctapercluster 2" in ptx,
              "| multicast TMA lines:", ptx.count(".multicast::cluster"),
              "| remote arrives:", ptx.count("mbarrier.arrive.release.cluster.shared::cluster"), flush=True)
    if not ok_all:
        return False

    flop = 2.0 * M * N * K
    rounds = {"cluster+multicast": [], "cluster, no multicast": [], "torch.matmul": []}
    fns = {"cluster+multicast": lambda: proto.run(a, b, multicast=True),
           "cluster, no multicast": lambda: proto.run(a, b, multicast=False),
           "torch.matmul": lambda: torch.matmul(a, b)}
    for _ in range(3):  # interleaved rounds, median over rounds (the project's method)
        for name, fn in fns.items():
            rounds[name].append(do_bench(fn, warmup=25, rep=100, return_mode="median"))
    med = {name: sorted(v)[1] for name, v in rounds.items()}
    for name, ms in med.items():
        ratio = med["torch.matmul"] / ms
        print(f"  do_bench {name:22}: {ms * 1e3:9.1f} us  {flop / ms / 1e9:7.1f} TFLOP/s  "
              f"cuBLAS/ours {ratio:.3f}", flush=True)
    try:  # GPU time alone (no Python launch cost): CUDA graphs
        from triton.testing import do_bench_cudagraph
        g = {name: do_bench_cudagraph(fn, rep=100, return_mode="median") for name, fn in fns.items()}
        print("  do_bench_cudagraph: " + ", ".join(f"{n} {ms * 1e3:.1f} us" for n, ms in g.items()), flush=True)
    except Exception as err:  # noqa: BLE001 - timing extra, never a failure
        print(f"  do_bench_cudagraph skipped: {type(err).__name__}: {err}", flush=True)
    return True


def main():
    args = sys.argv[1:]
    if args[:1] == ["--case"]:
        M, N, K, dt = int(args[1]), int(args[2]), int(args[3]), args[4]
        print(f"case {M}x{N}x{K} {dt}", flush=True)
        sys.exit(0 if _one(M, N, K, dt) else 1)

    import torch
    import triton
    print(f"torch {torch.__version__}, triton {triton.__version__}, "
          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}", flush=True)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("needs an sm_90 GPU (H100/H200)")
        sys.exit(2)
    failed = []
    for M, N, K, dt in (QUICK if "--quick" in args else CASES):
        cmd = [sys.executable, os.path.abspath(__file__), "--case", str(M), str(N), str(K), dt]
        try:
            r = subprocess.run(cmd, timeout=CASE_TIMEOUT_S, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            if r.returncode != 0:
                failed.append(f"{M}x{N}x{K} {dt} (exit {r.returncode})")
        except subprocess.TimeoutExpired:
            print(f"case {M}x{N}x{K} {dt}: TIMEOUT after {CASE_TIMEOUT_S}s, child killed (a hang?)", flush=True)
            failed.append(f"{M}x{N}x{K} {dt} (timeout)")
    print("ALL PASSED" if not failed else f"FAILED: {failed}", flush=True)
    sys.exit(0 if not failed else 1)


if __name__ == "__main__":
    main()
