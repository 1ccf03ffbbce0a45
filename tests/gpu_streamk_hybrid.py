"""The hybrid Stream-K schedule on sparse-tail shapes, measured (GPU only; PERF_NOTES entry 42).

``python tests/gpu_streamk_hybrid.py OUT.csv``: for each shape (128 x 256 tiles on the GPU's SMs:
tails of 1 to 84 tiles, and 4096^3, whose last wave is nearly full, as the control) cuBLAS
(``torch.matmul``), ``matmul_auto`` (our fastest data-parallel kernel here), ``matmul_tma``, the
old Stream-K (the partial wave split, ``sk_tiles = tiles % SMs``) and the hybrid in each reduction
mode, all Triton ones in the same 128 x 256 x 64 config.  Each is checked against float64 first
(NaN-poisoned outputs), then timed by ``bench.core.median_ms`` (``triton.testing.do_bench``, L2
flushed before each call, median) in interleaved rounds, as the bench suites do.  Rows also carry
the schedule model's numbers (``tiles.streamk_schedule``) and the workspace of each mode.

``python tests/gpu_streamk_hybrid.py --sanitize``: the hybrid in every mode at small ragged
shapes, checked; the process to run under ``compute-sanitizer --tool memcheck``.
``--dram ORDER.csv``: one call of each kernel per shape, for Nsight Compute's DRAM bytes (``dram``).
"""

import statistics
import sys
import time

import torch
import triton

import gemm_kernels as gk
from gemm_kernels.bench.core import TimingSettings, median_ms, poisoned_empty
from gemm_kernels.kernels.streamk import matmul_streamk, raise_pending_streamk_error
from gemm_kernels.models import tiles
from gpu_sweep_rows import write_rows

#: (M, N, K): 128 x 256 tiles and their tail on 132 SMs in the comment
SHAPES = (
    (3072, 3072, 3072),  # 288 tiles = 2 waves + 24, 48 K blocks
    (2432, 1792, 4096),  # 133 = 1 wave + 1
    (5504, 1024, 8192),  # 172 = 1 wave + 40, 128 K blocks
    (3840, 2816, 4096),  # 330 = 2 waves + 66
    (6144, 2560, 3072),  # 480 = 3 waves + 84
    (4096, 4096, 4096),  # 512 = 3 waves + 116: the control, a nearly full last wave
)
BM, BN, BK = 128, 256, 64
CONFIG = triton.Config({"BLOCK_M": BM, "BLOCK_N": BN, "BLOCK_K": BK, "FLATTEN": False, "WARP_SPECIALIZE": False,
                        "EPILOGUE_SUBTILE": False}, num_warps=8, num_stages=3)
FIELDS = ["case", "M", "N", "K", "tiles", "tail", "k_tiles", "provider", "schedule", "reduction", "sk_tiles",
          "busiest_iters", "max_handovers", "mean_handovers", "workspace_bytes", "time_us", "tflops", "vs_tma",
          "vs_cublas", "spread", "rel_err", "same_bits_as_deterministic", "device", "triton", "torch", "error"]
TIMING = TimingSettings(warmup_ms=10, rep_ms=60, rounds=3)
#: seconds of the run after which the optional provider (matmul_auto) is left out
OPTIONAL_BUDGET_S = 70


def providers(a, b, num_tiles, num_sms, with_auto):
    out = {"cuBLAS": (lambda: torch.matmul(a, b), None, None, None)}
    if with_auto:
        out["auto"] = (lambda: gk.matmul_auto(a, b), None, None, None)
    out["tma"] = (lambda: gk.matmul_tma(a, b, config=CONFIG), "none", "-", 0)
    # the Stream-K kernel splitting nothing: what its code costs beside matmul_tma's, at the same schedule
    out["stream_k none split"] = (lambda: matmul_streamk(a, b, config=CONFIG, sk_tiles=0), "tail", "deterministic", 0)
    tail = num_tiles % num_sms
    out["stream_k tail"] = (lambda: matmul_streamk(a, b, config=CONFIG, sk_tiles=tail), "tail", "deterministic", tail)
    for reduction in tiles.STREAMK_REDUCTIONS:
        out[f"hybrid {reduction}"] = (lambda r=reduction: matmul_streamk(a, b, config=CONFIG, schedule="hybrid",
                                                                         reduction=r), "hybrid", reduction, None)
    return out


def main(path):
    if not gk.on_gpu():
        raise SystemExit("gpu_streamk_hybrid.py times a CUDA GPU; none here")
    started, rows = time.time(), []
    num_sms = gk.num_sms()
    meta = dict(device=torch.cuda.get_device_name(), triton=triton.__version__, torch=torch.__version__)
    torch.manual_seed(0)
    for M, N, K in SHAPES:
        num_tiles, k_tiles = tiles.cdiv(M, BM) * tiles.cdiv(N, BN), tiles.cdiv(K, BK)
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        ref = a.double() @ b.double()
        with_auto = time.time() - started < OPTIONAL_BUDGET_S
        timed, shape_rows, deterministic = [], [], None
        for name, (fn, schedule, reduction, sk) in providers(a, b, num_tiles, num_sms, with_auto).items():
            row = dict(case=f"{M}x{N}x{K}", M=M, N=N, K=K, tiles=num_tiles, tail=num_tiles % num_sms, k_tiles=k_tiles,
                       provider=name, schedule=schedule or "", reduction=reduction or "", error="", **meta)
            if schedule is not None:
                model = tiles.streamk_schedule(num_tiles, k_tiles, num_sms, sk_tiles=sk,
                                               schedule="hybrid" if schedule == "hybrid" else "tail")
                row.update(sk_tiles=model["sk_tiles"], busiest_iters=model["busiest"],
                           max_handovers=model["max_handovers"], mean_handovers=round(model["mean_handovers"], 3),
                           workspace_bytes=tiles.streamk_workspace_bytes(reduction, num_sms, BM, BN)
                           if reduction in tiles.STREAMK_REDUCTIONS else 0)
            try:
                with poisoned_empty():
                    out = fn()
                torch.cuda.synchronize()
                raise_pending_streamk_error()
                err = float((out.double() - ref).norm() / ref.norm())
                if not err < 2e-3:  # NaN fails too
                    raise AssertionError(f"relative error {err:.3e} against float64")
                row["rel_err"] = err
                if name == "hybrid deterministic":
                    deterministic = out
                elif name == "hybrid separate":  # both add the pieces in iteration order
                    row["same_bits_as_deterministic"] = bool(torch.equal(out, deterministic))
                timed.append((row, fn, []))
            except Exception as exc:  # recorded, and the provider is not timed
                row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            shape_rows.append(row)
        for r in range(TIMING.rounds):  # interleaved, the first one rotating (bench.core's rounds)
            for j in range(len(timed)):
                _, fn, samples = timed[(j + r) % len(timed)]
                samples.append(median_ms(fn, TIMING))
        raise_pending_streamk_error()
        base = {row["provider"]: statistics.median(s) for row, _, s in timed}
        for row, _, samples in timed:
            ms = statistics.median(samples)
            row.update(time_us=round(ms * 1e3, 3), tflops=round(2 * M * N * K / ms * 1e-9, 2),
                       spread=round((max(samples) - min(samples)) / ms, 4),
                       vs_tma=round(base["tma"] / ms, 4) if "tma" in base else "",
                       vs_cublas=round(base["cuBLAS"] / ms, 4) if "cuBLAS" in base else "")
        rows += shape_rows
        for row in shape_rows:
            print(f"{row['case']:>16} {row['provider']:>22} {row.get('time_us', float('nan')):>9} us "
                  f"x{row.get('vs_tma', '')} of tma  busiest {row.get('busiest_iters', '')} "
                  f"handovers {row.get('mean_handovers', '')} {row['error']}", flush=True)
        write_rows(path, FIELDS, rows)
        del a, b, ref, deterministic
    print(f"{len(rows)} rows in {time.time() - started:.0f} s -> {path}")
    assert not any(r["error"] for r in rows), "a provider failed its check"


#: the providers ``dram`` profiles, in the order their kernels run (``--dram``)
DRAM_PROVIDERS = ("tma", "stream_k none split", "stream_k tail", "hybrid deterministic", "hybrid separate")


def dram(order_path):
    """One call of each of :data:`DRAM_PROVIDERS` per shape inside a profiler range, for Nsight
    Compute (L2 flushed before each kernel: ``--cache-control all``, its default):

        ncu --profile-from-start off -k regex:"_matmul_(tma|streamk)_kernel" --csv \\
            --metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum \\
            python tests/gpu_streamk_hybrid.py --dram ORDER.csv

    ORDER.csv names the case and provider of each profiled kernel, in launch order."""
    num_sms, order = gk.num_sms(), []
    torch.manual_seed(0)
    for M, N, K in SHAPES:
        num_tiles = tiles.cdiv(M, BM) * tiles.cdiv(N, BN)
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        fns = providers(a, b, num_tiles, num_sms, with_auto=False)
        for name in DRAM_PROVIDERS:  # compile outside the profiled range
            fns[name][0]()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for name in DRAM_PROVIDERS:
            fns[name][0]()
            order.append(dict(case=f"{M}x{N}x{K}", provider=name))
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    write_rows(order_path, ["case", "provider"], order)


def sanitize():
    """Small ragged shapes, every mode, fp16 and bf16, bias and (but for atomic) gelu: checked."""
    from gemm_kernels.kernels.tma import tma_aligned

    torch.manual_seed(0)
    config = triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=3)
    bad = []
    for dtype in (torch.float16, torch.bfloat16):
        for M, N, K, programs in ((300, 200, 1000, None), (1000, 1003, 520, 10), (129, 261, 77, 3)):
            a = tma_aligned(torch.randn(M, K, device="cuda", dtype=dtype))
            b = tma_aligned(torch.randn(K, N, device="cuda", dtype=dtype))
            bias = torch.randn(N, device="cuda", dtype=dtype)
            for reduction in tiles.STREAMK_REDUCTIONS:
                act = None if reduction == "atomic" else "gelu"
                ref = gk.matmul_ref(a, b, out_dtype=torch.float64, bias=bias, activation=act)
                with poisoned_empty():
                    out = matmul_streamk(a, b, bias=bias, activation=act, num_programs=programs, config=config,
                                         schedule="hybrid", reduction=reduction)
                torch.cuda.synchronize()
                err = float((out.double() - ref).norm() / ref.norm())
                print(dtype, M, N, K, programs, reduction, f"rel err {err:.2e}", flush=True)
                if not err < 1e-2:
                    bad.append((dtype, M, N, K, reduction, err))
    raise_pending_streamk_error()
    if bad:
        raise SystemExit(f"wrong results: {bad}")
    print("sanitize: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--sanitize"]:
        sanitize()
    elif len(sys.argv) == 3 and sys.argv[1] == "--dram":
        dram(sys.argv[2])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        raise SystemExit(__doc__)
