"""What batch invariance costs, measured (GPU only):
``python tests/gpu_batch_invariance.py OUT.csv [--quick] [--dtypes=float16,bfloat16] [--no-fp8] [--budget=S]``.

For each weight shape (N x K, ``x @ W.t()`` as in a linear layer, and W row-major) and each token
count M: ``torch.matmul`` (cuBLAS), ``matmul_auto`` by default and ``matmul_auto(...,
batch_invariant=True)``, each checked against float64 first, then timed from a CUDA graph
(``do_bench_cudagraph``, mean of back-to-back calls: the GPU's time alone).  Each row also says
whether its first rows have the same bits as the same rows computed at the largest M
(``same_bits_as_largest_m``): for the batch-invariant mode always, for the others where it happens.
Then ``scaled_mm`` (e4m3, row/column scales) against ``torch._scaled_mm`` the same way, where fp8 runs.
The CSV is written after every weight layout; ``--budget=S`` starts no new weight layout after S
seconds (a cut run keeps whole blocks); ``launcher`` names what ``pick_launcher`` chose for the row.
``PERF_NOTES`` and a notebook may quote the CSV once committed.
"""

import sys
import time

import torch

import gemm_kernels as gk
from gemm_kernels.kernels.dispatch import matmul_auto, pick_launcher
from gpu_sweep_rows import timed_row, write_rows

ROWS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
WEIGHTS = ((4096, 4096), (14336, 4096), (4096, 14336))  # N x K: Llama-3-8B's O/QKV-sized, gate/up, down
FIELDS = ["dtype", "layout", "M", "N", "K", "provider", "launcher", "ms", "tflops", "vs_cublas", "rel_err",
          "same_bits_as_largest_m", "error"]


def main(path, quick=False, dtype_names=("float16", "bfloat16"), fp8=True, budget_s=float("inf")):
    if not gk.on_gpu():
        raise SystemExit("gpu_batch_invariance.py times a CUDA GPU; none here")
    rows, started = [], time.time()
    weights = WEIGHTS[:1] if quick else WEIGHTS
    ms_list = ROWS[::2] if quick else ROWS
    dtypes = [getattr(torch, name) for name in dtype_names if name != "bfloat16" or gk.supports_bf16()]
    torch.manual_seed(0)
    for dtype in dtypes:
        for N, K in weights:
            x_all = torch.randn(max(ms_list), K, device=gk.DEVICE, dtype=dtype)
            w = torch.randn(N, K, device=gk.DEVICE, dtype=dtype)
            for layout, b in (("W.t()", w.t()), ("row-major", w.t().contiguous())):
                if time.time() - started > budget_s:
                    print(f"budget of {budget_s:.0f} s spent: {dtype} {N}x{K} {layout} and later blocks not run")
                    break
                providers = {
                    "cuBLAS": lambda a: torch.matmul(a, b),
                    "matmul_auto": lambda a: matmul_auto(a, b),
                    "matmul_auto batch_invariant": lambda a: matmul_auto(a, b, batch_invariant=True),
                }
                with torch.no_grad():
                    largest = {name: fn(x_all) for name, fn in providers.items()}
                    for M in ms_list:
                        a = x_all[:M]
                        base_ms = None
                        for name, fn in providers.items():
                            launcher = "cuBLAS" if name == "cuBLAS" else pick_launcher(
                                a, b, batch_invariant=name.endswith("batch_invariant"))[0]
                            row = dict(dtype=str(dtype).replace("torch.", ""), layout=layout, M=M, N=N, K=K,
                                       provider=name, launcher=launcher,
                                       same_bits_as_largest_m=bool(torch.equal(fn(a), largest[name][:M])))
                            ms = timed_row(row, lambda: fn(a), a, b, base_ms)
                            base_ms = ms if name == "cuBLAS" else base_ms
                            rows.append(row)
                            print(row, flush=True)
                write_rows(path, FIELDS, rows)
    if fp8 and gk.supports_fp8() and time.time() - started <= budget_s:
        rows += fp8_rows(path, rows, weights, ms_list)
    invariant = [r for r in rows if r["provider"].endswith("batch_invariant")]
    assert all(r["same_bits_as_largest_m"] for r in invariant), "batch_invariant=True changed bits"
    print(f"{len(rows)} rows in {time.time() - started:.0f} s -> {path}")


def fp8_rows(path, rows, weights, ms_list):
    """``scaled_mm`` the same way: e4m3, per-row and per-column scales, bf16 out, against
    ``torch._scaled_mm``; the reference is the float64 product of the dequantized operands."""
    from gemm_kernels.kernels import fp8

    out = []
    for N, K in weights:
        x, w = torch.randn(max(ms_list), K, device=gk.DEVICE), torch.randn(N, K, device=gk.DEVICE)
        a_all, sa_all = fp8.quantize_fp8(x, "row")
        b, sb = fp8.quantize_fp8(w.t(), "column")
        providers = {
            "torch._scaled_mm": lambda a, sa: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16),
            "scaled_mm": lambda a, sa: fp8.scaled_mm(a, b, sa, sb),
            "scaled_mm batch_invariant": lambda a, sa: fp8.scaled_mm(a, b, sa, sb, batch_invariant=True),
        }
        largest = {name: fn(a_all, sa_all) for name, fn in providers.items()}
        for M in ms_list:
            a, sa = a_all[:M], sa_all[:M]
            deq_a, deq_b = a.double() * sa.double(), b.double() * sb.double()
            base_ms = None
            for name, fn in providers.items():
                row = dict(dtype="e4m3 row-wise", layout="W.t()", M=M, N=N, K=K, provider=name, launcher=name,
                           same_bits_as_largest_m=bool(torch.equal(fn(a, sa), largest[name][:M])))
                ms = timed_row(row, lambda: fn(a, sa), deq_a, deq_b, base_ms)
                base_ms = ms if name == "torch._scaled_mm" else base_ms
                out.append(row)
                print(row, flush=True)
            write_rows(path, FIELDS, rows + out)
    return out


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    opts = dict(a[2:].partition("=")[::2] for a in sys.argv[1:] if a.startswith("--"))
    if len(args) != 1 or not set(opts) <= {"quick", "dtypes", "no-fp8", "budget"}:
        raise SystemExit(" ".join(__doc__.splitlines()[:2]))
    main(args[0], quick="quick" in opts, dtype_names=tuple(opts.get("dtypes", "float16,bfloat16").split(",")),
         fp8="no-fp8" not in opts, budget_s=float(opts.get("budget", "inf")))
