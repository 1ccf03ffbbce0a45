"""FP8 for training, measured (GPU only): ``python tests/gpu_fp8_training.py OUT_DIR [--quick]``.

1. The fused cast-transpose (``quantize_fp8_transposed``, float32 and UE8M0 scales) against
   ``quantize_fp8`` called twice (on x and x.t(), plain torch) and torch's ``x.t().contiguous()``
   (a bandwidth anchor: the same bytes, no arithmetic), bf16 inputs of LLM-ish shapes.  Every
   output is checked bit for bit against the float64 reference first; whether ``quantize_fp8``
   twice gives the same bits is recorded (``same_bits_as_twice``).  Bandwidth counts the bytes
   the job must move (x read once; q, q_t and both scales written once), against the datasheet's
   HBM3 peak and this run's 1 GiB device-to-device copy.
2. ``scaled_mm_amax`` (the amax in the epilogue) against the same kernel without it, both in
   their first config (GEMM_KERNELS_AUTOTUNE=0: the same tile, so the difference is the
   epilogue's), and against ``scaled_mm`` (on Hopper the warp-specialized kernel) alone and
   followed by a separate torch pass for the amax (``vector_norm(out, inf)``: one reduction).  Checked against float64 first.

Timing: ``bench.core.median_ms`` (do_bench medians, L2 flushed), providers interleaved over
``ROUNDS`` rounds, the median of the rounds kept.  Writes cast_transpose.csv, amax.csv and
meta.json to OUT_DIR; prints a table last.

``--configs`` instead: which of ``CAST_TRANSPOSE_CONFIGS`` the autotuner picks for each shape and
scale format (its candidates' CUDA-graph timings beside), and each config timed as above
(cast_transpose_configs.json).
"""

import json
import statistics
import sys
import time

import torch

import gemm_kernels as gk
from gemm_kernels import runtime
from gemm_kernels.bench.core import TimingSettings, median_ms
from gemm_kernels.kernels import fp8
from gemm_kernels.kernels import fp8_training as ft
from gpu_sweep_rows import write_rows

SHAPES = ((4096, 4096), (8192, 5120), (16384, 2048))
GEMMS = (("row", 4096, 4096, 4096), ("block", 4096, 4096, 4096), ("row", 8192, 5120, 4096))
#: H100 SXM's HBM3 bandwidth on the datasheet (the glossary's "about 3.35 TB/s")
DATASHEET_TB_S = 3.35
ROUNDS = 3
TIMING = TimingSettings(warmup_ms=25, rep_ms=100, rounds=ROUNDS)


def interleaved(providers: dict) -> dict:
    """Median over ROUNDS of each provider's do_bench median, the starting provider rotating."""
    names = list(providers)
    times = {name: [] for name in names}
    for r in range(ROUNDS):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(median_ms(providers[name], TIMING))
    return {name: (statistics.median(ts), max(ts) / min(ts) - 1) for name, ts in times.items()}


def copy_tb_s() -> float:
    src = torch.randn(256 * 2**20, device=gk.DEVICE)  # 1 GiB of fp32
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), TIMING)
    return 2 * src.numel() * 4 / (ms * 1e-3) / 1e12


def same(out, ref) -> bool:
    def same_fp8(a, b):
        na, nb = a.float().isnan(), b.float().isnan()
        return torch.equal(na, nb) and torch.equal(a.view(torch.uint8)[~na], b.view(torch.uint8)[~nb])
    return (same_fp8(out.q, ref.q) and same_fp8(out.q_t, ref.q_t) and torch.equal(out.scale, ref.scale)
            and torch.equal(out.scale_t, ref.scale_t))


def bf16_input(M, K):
    """Random bf16 rows whose magnitudes differ by powers of two up to 2^4 (scales that differ)."""
    gen = torch.Generator(device=gk.DEVICE).manual_seed(M + K)
    return (torch.randn(M, K, device=gk.DEVICE, generator=gen)
            * torch.exp2(torch.randint(-4, 5, (M, 1), device=gk.DEVICE, generator=gen).float())).bfloat16()


def cast_transpose_rows(shapes, copy_rate):
    rows = []
    for M, K in shapes:
        x = bf16_input(M, K)
        for fmt in ft.SCALE_FORMATS:  # correct first: bit for bit against float64
            assert same(ft.quantize_fp8_transposed(x, scale_format=fmt),
                        ft.quantize_fp8_transposed_ref(x, scale_format=fmt)), f"{M}x{K} {fmt}: differs from the reference"
        q, s = fp8.quantize_fp8(x, (1, 128))
        q_t, s_t = fp8.quantize_fp8(x.t(), (1, 128))
        twice = ft.TransposedFp8(q, s, q_t.contiguous(), s_t)
        same_as_twice = same(ft.quantize_fp8_transposed(x), twice)  # recorded: quantize_fp8 is plain torch
        job_bytes = M * K * 2 + 2 * M * K + 4 * (M * triton_cdiv(K) + K * triton_cdiv(M))
        providers = {
            "quantize_fp8_transposed": lambda: ft.quantize_fp8_transposed(x),
            "quantize_fp8_transposed ue8m0": lambda: ft.quantize_fp8_transposed(x, scale_format="ue8m0"),
            "quantize_fp8 twice": lambda: (fp8.quantize_fp8(x, (1, 128)), fp8.quantize_fp8(x.t(), (1, 128))),
            "x.t().contiguous()": lambda: x.t().contiguous(),
        }
        timed = interleaved(providers)
        base = timed["quantize_fp8 twice"][0]
        for name, (ms, spread) in timed.items():
            moved = 4 * M * K if name == "x.t().contiguous()" else job_bytes  # the copy's own bytes
            tb_s = moved / (ms * 1e-3) / 1e12
            rows.append(dict(M=M, K=K, dtype="bfloat16", provider=name, ms=round(ms, 5), bytes=moved,
                             gb_s=round(tb_s * 1e3, 1), pct_datasheet=round(100 * tb_s / DATASHEET_TB_S, 1),
                             pct_copy=round(100 * tb_s / copy_rate, 1), speedup_vs_twice=round(base / ms, 2),
                             round_spread=round(spread, 4), same_bits_as_twice=same_as_twice))
            print(rows[-1], flush=True)
    return rows


def triton_cdiv(n):
    return -(-n // fp8.SCALE_BLOCK)


def amax_rows(gemms):
    rows = []
    for scaling, M, N, K in gemms:
        gen = torch.Generator(device=gk.DEVICE).manual_seed(M + N + K)
        ga, gb = fp8.granularities(scaling)
        a, sa = fp8.quantize_fp8(torch.randn(M, K, device=gk.DEVICE, generator=gen) * 4, ga)
        b, sb = fp8.quantize_fp8(torch.randn(N, K, device=gk.DEVICE, generator=gen).t(), gb)
        ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
        runtime.set_autotune("off")  # the pair shares its first config: the difference is the epilogue
        out, amax = ft.scaled_mm_amax(a, b, sa, sb)
        plain, _ = ft._scaled_mm_pointer_kernel(a, b, sa, sb, amax=False)
        ws = fp8.scaled_mm(a, b, sa, sb)
        for name, o in (("amax", out), ("no amax", plain), ("scaled_mm", ws)):
            err = float((o.double() - ref).norm() / ref.norm())
            assert err < 1e-2, f"{scaling} {M}x{N}x{K} {name}: relative error {err:.2e}"
        assert amax.item() == out.float().abs().max().item(), "epilogue amax differs from out.abs().max()"
        assert torch.equal(out, plain)
        providers = {
            "pointer kernel, no amax": lambda: ft._scaled_mm_pointer_kernel(a, b, sa, sb, amax=False),
            "scaled_mm_amax (epilogue amax)": lambda: ft.scaled_mm_amax(a, b, sa, sb),
            "scaled_mm": lambda: fp8.scaled_mm(a, b, sa, sb),
            # the cheapest separate pass: one reduction reading out once (it propagates NaN; timing only)
            "scaled_mm + torch amax": lambda: torch.linalg.vector_norm(fp8.scaled_mm(a, b, sa, sb), float("inf")),
        }
        timed = interleaved(providers)
        base = timed["pointer kernel, no amax"][0]
        for name, (ms, spread) in timed.items():
            rows.append(dict(scaling=scaling, M=M, N=N, K=K, provider=name, ms=round(ms, 5),
                             tflops=round(2 * M * N * K / (ms * 1e-3) / 1e12, 1),
                             vs_no_amax=round(base / ms, 3), round_spread=round(spread, 4)))
            print(rows[-1], flush=True)
        runtime.set_autotune("full")
    return rows


def with_config(config, fn):
    """``fn()`` with autotuning off and ``config`` as the cast-transpose's first (only) config."""
    saved, saved_mode = ft.CAST_TRANSPOSE_CONFIGS, runtime.autotune_mode()
    ft.CAST_TRANSPOSE_CONFIGS = [config]  # rebinds the module's name; the autotuner keeps its own list
    runtime.set_autotune("off")
    try:
        return fn()
    finally:
        ft.CAST_TRANSPOSE_CONFIGS = saved
        runtime.set_autotune(saved_mode)


def cast_transpose_configs(out_dir, shapes):
    """The autotuner's pick per shape and scale format, and every config timed (bf16 x, as above)."""
    tuner, started, rows = ft._cast_transpose_tuned, time.time(), []
    for M, K in shapes:
        x = bf16_input(M, K)
        for fmt in ft.SCALE_FORMATS:
            runtime.set_autotune("full")
            ft.quantize_fp8_transposed(x, scale_format=fmt)  # a new key: the autotuner times every config
            timings = {f"{c.num_warps} warps": t for c, t in getattr(tuner, "configs_timings", {}).items()}
            providers = {f"{c.num_warps} warps": (lambda c=c: with_config(
                c, lambda: ft.quantize_fp8_transposed(x, scale_format=fmt))) for c in ft.CAST_TRANSPOSE_CONFIGS}
            for c in ft.CAST_TRANSPOSE_CONFIGS:  # each config checked bit for bit against float64 first
                assert same(with_config(c, lambda: ft.quantize_fp8_transposed(x, scale_format=fmt)),
                            ft.quantize_fp8_transposed_ref(x, scale_format=fmt)), f"{M}x{K} {fmt} {c}"
            timed = interleaved(providers)
            rows.append(dict(M=M, K=K, scale_format=fmt, autotuner_pick=f"{tuner.best_config.num_warps} warps",
                             autotuner_ms_median_p20_p80=timings,
                             do_bench_ms={name: round(ms, 5) for name, (ms, _) in timed.items()},
                             round_spread={name: round(spread, 4) for name, (_, spread) in timed.items()}))
            print(rows[-1], flush=True)
    meta = dict(gpu=gk.gpu_name(), torch=torch.__version__, triton=__import__("triton").__version__,
                autotuner_timing="configs.time_candidate: CUDA-graph replays, warm L2",
                do_bench_timing="bench.core.median_ms: do_bench median, L2 flushed; median of the rounds",
                rounds=ROUNDS, seconds=round(time.time() - started, 1), rows=rows)
    with open(f"{out_dir}/cast_transpose_configs.json", "w") as f:
        json.dump(meta, f, indent=1)


def main(out_dir, quick=False):
    if not gk.on_gpu():
        raise SystemExit("gpu_fp8_training.py times a CUDA GPU; none here")
    started = time.time()
    copy_rate = copy_tb_s()
    print(f"1 GiB copy: {copy_rate:.3f} TB/s", flush=True)
    ct = cast_transpose_rows(SHAPES[:1] if quick else SHAPES, copy_rate)
    write_rows(f"{out_dir}/cast_transpose.csv", list(ct[0]), ct)
    am = amax_rows(GEMMS[:1] if quick else GEMMS)
    write_rows(f"{out_dir}/amax.csv", list(am[0]), am)
    # the reason quantize_fp8 divides by a tensor: torch's division by a Python number on this device
    amax = (torch.rand(20000, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 100 + 1).float()
    amax = amax.to(gk.DEVICE)
    by_number = int((amax / 448.0 != amax / amax.new_tensor(448.0)).sum())
    meta = dict(gpu=gk.gpu_name(), division_by_python_number_differs=f"{by_number} of {amax.numel()}", torch=torch.__version__, triton=__import__("triton").__version__,
                copy_1GiB_tb_s=round(copy_rate, 3), datasheet_tb_s=DATASHEET_TB_S, rounds=ROUNDS,
                timing="bench.core.median_ms: do_bench median, L2 flushed; median of the rounds",
                seconds=round(time.time() - started, 1))
    with open(f"{out_dir}/meta.json", "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))
    for r in ct:
        print(f"{r['M']:>6}x{r['K']:<6} {r['provider']:<32} {r['ms'] * 1e3:9.1f} us {r['gb_s']:8.1f} GB/s "
              f"{r['pct_datasheet']:5.1f}% datasheet {r['pct_copy']:5.1f}% copy  x{r['speedup_vs_twice']}")
    for r in am:
        print(f"{r['scaling']:<5} {r['M']}x{r['N']}x{r['K']} {r['provider']:<32} {r['ms'] * 1e3:9.1f} us "
              f"{r['tflops']:7.1f} TFLOP/s  {r['vs_no_amax']}x")


if __name__ == "__main__":
    if "--configs" in sys.argv[2:]:
        if not gk.on_gpu():
            raise SystemExit("gpu_fp8_training.py times a CUDA GPU; none here")
        cast_transpose_configs(sys.argv[1], SHAPES[:1] if "--quick" in sys.argv[2:] else SHAPES)
    else:
        main(sys.argv[1], quick="--quick" in sys.argv[2:])
