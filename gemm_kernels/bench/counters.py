"""``python -m gemm_kernels.bench.counters``: Nsight Compute counters for the rows where our
kernels miss a target, beside the vendor kernel of the same row (GPU only, needs ``ncu``).

Each (case, provider) runs in a worker process under ``ncu --profile-from-start off``: the
worker builds the inputs, calls the provider a few times (compilation and autotuning happen
here, unprofiled), then calls it once between ``cudaProfilerStart``/``Stop``.  Every kernel of
that call is profiled (a cuBLAS call can launch more than one; a grouped_mm forward+backward
launches several).  The driver writes ``counters.csv`` (one row per kernel: case, provider,
kernel name, then the metrics) and ``counters.md`` (the same as tables) in ``--out``.

What the metrics answer:

* ``gpu__time_duration.sum``: the kernel's time under the profiler (caches flushed first, clocks
  locked to base by ncu: slower than ``do_bench``; compare kernels with each other, not with it);
* ``sm__pipe_tensor_cycles_active...pct_of_peak_sustained_elapsed``: the share of the kernel's
  time the tensor cores were busy (wgmma included), the number a GEMM's speed follows;
* ``sm__cycles_active.avg`` against ``.max``: the average SM against the busiest, so
  1 - avg/max is the share of the run an average SM sat idle (a partial last wave, a tail);
* ``dram__throughput`` / ``dram__bytes_read.sum`` and ``lts__t_sector_hit_rate.pct``: whether
  operand traffic, not the math, sets the pace;
* ``launch__*``: grid, block, registers, shared memory (the configuration that ran);
* ``smsp__warp_issue_stalled_*``: where warps waited (barriers, memory, the math pipe).

Metrics this ncu does not know are dropped (``ncu --query-metrics``), so the list can name
Hopper counters without breaking on another GPU.

    python -m gemm_kernels.bench.counters --out DIR [--case NAME ...] [--list]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import runtime
from ..results import short_kernel

WANTED_METRICS = (
    "gpu__time_duration.sum",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__cycles_active.avg",
    "sm__cycles_active.max",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct",
    "launch__grid_size",
    "launch__block_size",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_dynamic",
    "launch__cluster_dim_x",
    "launch__cluster_dim_y",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_wait_per_warp_active.pct",
    "smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_sleeping_per_warp_active.pct",
)
#: what is asked for when this ncu rejects the list above (names every ncu since 2021 knows)
MINIMAL_METRICS = ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                   "dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__cycles_active.avg", "sm__cycles_active.max")
WORKER_TAG = "COUNTERS_WORKER_JSON "


class NcuFailed(RuntimeError):
    """ncu or its worker failed; the message ends with their output."""


@dataclass(frozen=True)
class CounterCase:
    """One benchmark row to profile: ``kind`` mm (``a @ b``), fused (bias + GELU) or moe."""

    name: str
    kind: str
    dtype: str
    shape: tuple            # mm/fused: (M, N, K); moe: (model name, projection, tokens, routing, pass)
    providers: tuple
    b_transposed: bool = False  # mm: b = W^T of an nn.Linear weight W [N, K]
    why: str = ""


CASES = (  # the most telling first: a run cut short keeps them
    CounterCase("square 8192^3 bf16", "mm", "bf16", (8192, 8192, 8192), ("cuBLAS", "ws", "tma"),
                why="matmul_ws target 1.05x: missed"),
    CounterCase("fusion 4096^3 fp16 gelu +bias", "fused", "fp16", (4096, 4096, 4096), ("torch addmm+gelu", "ws fused"),
                why="fused bias+GELU target 1.10x: missed"),
    CounterCase("llm DeepSeek-V3 QKV M=4096 fp16", "mm", "fp16", (4096, 2112, 7168), ("cuBLAS", "ws", "tma"),
                b_transposed=True, why="the llm suite's minimum"),
    CounterCase("moe Qwen3-30B-A3B down T=32768 uniform", "moe", "bf16",
                ("Qwen3-30B-A3B", "down", 32768, "uniform", "fwd"), ("torch._grouped_mm", "grouped_mm"),
                why="the moe forward minimum"),
    CounterCase("moe Qwen3-30B-A3B up T=512 uniform fwd+bwd", "moe", "bf16",
                ("Qwen3-30B-A3B", "up", 512, "uniform", "fwd+bwd"), ("torch._grouped_mm", "grouped_mm"),
                why="the moe forward+backward minimum"),
    CounterCase("square 4096^3 fp16", "mm", "fp16", (4096, 4096, 4096), ("cuBLAS", "ws", "tma"),
                why="matmul_ws target 1.05x: at the edge"),
    CounterCase("moe DeepSeek-V3 up T=4096 skewed fwd+bwd", "moe", "bf16",
                ("DeepSeek-V3", "up", 4096, "skewed", "fwd+bwd"), ("torch._grouped_mm", "grouped_mm"),
                why="256 experts, skewed: the weight gradient's many small experts"),
    CounterCase("llm Llama-3-8B QKV M=4096 fp16", "mm", "fp16", (4096, 6144, 4096), ("cuBLAS", "ws", "tma", "stream_k"),
                b_transposed=True, why="below 0.95x without a wave tail to blame (WS_NOTES 9)"),
    CounterCase("llm Llama-3-70B gate M=4096 bf16", "mm", "bf16", (4096, 28672, 8192), ("cuBLAS", "ws", "tma"),
                b_transposed=True, why="a large llm row, for comparison"),
    CounterCase("moe OLMoE-1B-7B down T=512 uniform fwd+bwd", "moe", "bf16",
                ("OLMoE-1B-7B", "down", 512, "uniform", "fwd+bwd"), ("torch._grouped_mm", "grouped_mm"),
                why="an unexplained outlier of the forward+backward rows (PERF_NOTES 21)"),
    CounterCase("moe OLMoE-1B-7B up T=512 uniform fwd+bwd", "moe", "bf16",
                ("OLMoE-1B-7B", "up", 512, "uniform", "fwd+bwd"), ("torch._grouped_mm", "grouped_mm"),
                why="the same model's up projection (1.05x), beside the down outlier"),
    CounterCase("moe DeepSeek-V2-Lite up T=32768 skewed", "moe", "bf16",
                ("DeepSeek-V2-Lite", "up", 32768, "skewed", "fwd"), ("torch._grouped_mm", "grouped_mm"),
                why="the moe forward minimum (PERF_NOTES 21)"),
    CounterCase("moe Mixtral-8x7B up T=4096 uniform", "moe", "bf16",
                ("Mixtral-8x7B", "up", 4096, "uniform", "fwd"), ("torch._grouped_mm", "grouped_mm"),
                why="few large experts, for comparison"),
    CounterCase("stream-k 512x512x16384 fp16", "mm", "fp16", (512, 512, 16384), ("cuBLAS", "split_k", "ws"),
                why="few tiles, long K: split-K at 0.77x (PERF_NOTES 30); matmul_ws's split units, "
                    "matmul_auto's pick since entry 36"),
    CounterCase("llm-linear Llama-3-70B down M=257 bf16", "mm", "bf16", (257, 8192, 28672), ("cuBLAS", "ws", "split_k"),
                b_transposed=True, why="the llm-linear suite's minimum: 257 rows in 128-row tiles (PERF_NOTES 29, 33)"),
    CounterCase("nn-linear Qwen3-32B O M=257 bf16", "mm", "bf16", (257, 5120, 8192), ("cuBLAS", "ws"),
                b_transposed=True, why="nn-linear at 257 tokens: 100 tiles of 64 x 256 against cuBLAS's 4x1 clusters (PERF_NOTES 49)"),
    CounterCase("nn-linear DeepSeek-V3 QKV M=777 bf16", "mm", "bf16", (777, 2112, 7168), ("cuBLAS", "ws"),
                b_transposed=True, why="nn-linear's lowest matmul_ws row (PERF_NOTES 49)"),
    CounterCase("nn-linear Llama-3.2-3B O M=2049 bf16", "mm", "bf16", (2049, 3072, 3072), ("cuBLAS", "ws"),
                b_transposed=True, why="nn-linear at 2049 tokens: a short K, 396 tiles (PERF_NOTES 49)"),
    CounterCase("nn-linear Llama-3.2-3B O M=33 bf16", "mm", "bf16", (33, 3072, 3072), ("cuBLAS", "auto"),
                why="nn-linear's minimum: the decode kernel on a 3072^2 weight, b row-major (PERF_NOTES 49)"),
    CounterCase("decode 2048^2 M=1 bf16", "mm", "bf16", (1, 2048, 2048), ("cuBLAS", "auto"), b_transposed=True,
                why="decode below 0.95x at every M on a 2048^2 weight, a 5-7 us call (PERF_NOTES 44, 48)"),
    CounterCase("decode 2048^2 M=16 bf16", "mm", "bf16", (16, 2048, 2048), ("cuBLAS", "auto"), b_transposed=True,
                why="the same weight at 16 rows, the tensor-core path (PERF_NOTES 44, 48)"),
    CounterCase("decode 4096^2 M=32 bf16", "mm", "bf16", (32, 4096, 4096), ("cuBLAS", "auto"), b_transposed=True,
                why="decode at 4096^2 from M = 32: cuBLAS switches to a faster kernel (PERF_NOTES 44, 48)"),
    CounterCase("fp8 4096^3 tensor", "fp8", "e4m3", (4096, 4096, 4096, "tensor"),
                ("torch._scaled_mm", "torch._scaled_mm fast", "scaled_mm", "scaled_mm fast"),
                b_transposed=True, why="scaled_mm target 1.05x: missed (PERF_NOTES 27)"),
    CounterCase("fp8 4096^3 block", "fp8", "e4m3", (4096, 4096, 4096, "block"), ("torch block-wise", "scaled_mm"),
                b_transposed=True, why="block-wise scales in the K loop: target 1.00x torch's block-wise (PERF_NOTES 27, 35)"),
    CounterCase("fp8 8192^3 tensor", "fp8", "e4m3", (8192, 8192, 8192, "tensor"), ("torch._scaled_mm", "scaled_mm"),
                b_transposed=True, why="scaled_mm target 1.05x at 8192^3: missed (PERF_NOTES 34)"),
    CounterCase("fp8 DeepSeek-V3 QKV M=1000 tensor", "fp8", "e4m3", (1000, 2112, 7168, "tensor"),
                ("torch._scaled_mm", "scaled_mm"), b_transposed=True,
                why="the fp8 suite's lowest tensor-wise row: 72 tiles of 128 x 256 on 132 SMs (PERF_NOTES 34)"),
    CounterCase("fp8 2048^3 tensor", "fp8", "e4m3", (2048, 2048, 2048, "tensor"), ("torch._scaled_mm", "scaled_mm"),
                b_transposed=True, why="a small square row below the tensor-wise geomean (PERF_NOTES 34, 35)"),
)


def case_named(name: str) -> CounterCase:
    """A listed case, or a ``moe`` row named like the suite's case labels, ``"moe " + label``
    (``"moe OLMoE-1B-7B down T=512 uniform fwd+bwd"``; ``python -m gemm_kernels.bench --list``
    lists the suite's): one of the suite's models, projections and routings, at any T >= 1."""
    for case in CASES:
        if case.name == name:
            return case
    moe_row = _moe_row(name)
    if moe_row is not None:
        return moe_row
    raise ValueError(f"unknown counters case {name!r}; choose from: " + "; ".join(c.name for c in CASES)
                     + "; or any moe suite row as 'moe <case label>'")


def _moe_row(name: str) -> CounterCase | None:
    from . import suites

    parts = name.split()
    if len(parts) not in (5, 6) or parts[0] != "moe" or not parts[3].startswith("T="):
        return None
    _, model, projection, tokens, routing, *training = parts
    models = {m.name for m in suites.MOE_MODELS["full"]}
    if (model not in models or projection not in suites.MOE_PROJECTIONS["full"] or routing not in suites.MOE_ROUTINGS
            or training not in ([], ["fwd+bwd"]) or not tokens[2:].isdigit() or int(tokens[2:]) < 1):
        return None
    return CounterCase(name, "moe", "bf16", (model, projection, int(tokens[2:]), routing, "fwd+bwd" if training else "fwd"),
                       ("torch._grouped_mm", "grouped_mm"), why="a moe suite row")


# ------------------------------------------------------------------------------ worker


def build_call(case: CounterCase, provider: str):
    """The provider's call on this case's inputs (made on the GPU), as a no-argument function."""
    from ..kernels.persistent import matmul_tma
    from ..kernels.splitk import matmul_splitk
    from ..kernels.streamk import matmul_streamk
    from ..kernels import matmul_ws, moe
    from ..kernels.dispatch import matmul_auto
    from . import suites

    if provider not in case.providers:
        raise ValueError(f"{case.name} has no provider {provider!r}; it has {', '.join(case.providers)}")
    gen = torch.Generator(device=runtime.DEVICE).manual_seed(0)
    if case.kind == "fp8":
        return _fp8_call(case, provider, gen)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[case.dtype]
    if case.kind in ("mm", "fused"):
        M, N, K = case.shape
        a = torch.randn(M, K, device=runtime.DEVICE, dtype=dtype, generator=gen)
        if case.b_transposed:
            b = torch.randn(N, K, device=runtime.DEVICE, dtype=dtype, generator=gen).t()
        else:
            b = torch.randn(K, N, device=runtime.DEVICE, dtype=dtype, generator=gen)
        if case.kind == "fused":
            bias = torch.randn(N, device=runtime.DEVICE, dtype=dtype, generator=gen)
            calls = {"torch addmm+gelu": lambda: torch.nn.functional.gelu(torch.addmm(bias, a, b)),
                     "ws fused": lambda: matmul_ws.matmul_ws(a, b, activation="gelu", bias=bias)}
        else:
            calls = {"cuBLAS": lambda: torch.matmul(a, b), "ws": lambda: matmul_ws.matmul_ws(a, b),
                     "tma": lambda: matmul_tma(a, b), "stream_k": lambda: matmul_streamk(a, b),
                     "split_k": lambda: matmul_splitk(a, b), "auto": lambda: matmul_auto(a, b)}
        return calls[provider]
    x, w, offs = moe_inputs(case, dtype, gen)
    mm = {"torch._grouped_mm": lambda a, b, o: torch._grouped_mm(a, b, offs=o), "grouped_mm": moe.grouped_mm}[provider]
    if case.shape[4] == "fwd":
        return lambda: mm(x, w, offs)
    dy = torch.randn(x.shape[0], w.shape[2], device=runtime.DEVICE, dtype=dtype, generator=gen)
    return suites._moe_fwd_bwd(mm, x, w, offs, dy)


def _fp8_call(case: CounterCase, provider: str, gen):
    """An fp8 case's call: e4m3 a and b = W.t(), scales of the case's granularity."""
    from ..kernels import fp8

    M, N, K, scaling = case.shape
    ga, gb = fp8.granularities(scaling)
    a, sa = fp8.quantize_fp8(torch.randn(M, K, device=runtime.DEVICE, generator=gen), ga)
    b, sb = fp8.quantize_fp8(torch.randn(N, K, device=runtime.DEVICE, generator=gen).t(), gb)
    if provider == "torch block-wise":
        from .suites import _vendor_block_mm
        return _vendor_block_mm(a, b, sa, sb)[0]
    calls = {"scaled_mm": lambda: fp8.scaled_mm(a, b, sa, sb),
             "scaled_mm fast": lambda: fp8.scaled_mm(a, b, sa, sb, use_fast_accum=True),
             "torch._scaled_mm": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16),
             "torch._scaled_mm fast": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,
                                                               use_fast_accum=True)}
    return calls[provider]


def moe_inputs(case: CounterCase, dtype, gen) -> tuple:
    """A moe case's x [T * top_k, K], w [E, K, N] (the suite's transposed view) and offs, drawn
    from ``gen`` (w, then x) with the suite's routing of seed 0."""
    from . import suites

    model_name, projection, tokens, routing, _ = case.shape
    model = next(m for m in suites.MOE_MODELS["full"] if m.name == model_name)
    k = model.hidden if projection == "up" else model.ffn
    w = suites._moe_weights(model, projection, dtype, gen)
    offs = torch.cumsum(suites._route(model, tokens, routing, 0), 0).to(device=runtime.DEVICE, dtype=torch.int32)
    x = torch.randn(tokens * model.top_k, k, device=runtime.DEVICE, dtype=dtype, generator=gen)
    return x, w, offs


def worker(case_name: str, provider: str, warmup: int = 5) -> dict:
    """Warm the call up, then run it once inside the profiler's range."""
    case = case_named(case_name)
    call = build_call(case, provider)
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    return {"case": case.name, "provider": provider}


# ------------------------------------------------------------------------------ driver


def available_metrics(ncu: str, wanted=WANTED_METRICS) -> list[str]:
    """The wanted metrics whose base name this ncu lists for this GPU (all, if it cannot say)."""
    try:
        text = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return list(wanted)
    names = {line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith(("-", " "))}
    if len(names) < 10:  # not a listing we understand
        return list(wanted)
    return [m for m in wanted if m.split(".")[0] in names]


def parse_ncu_kernels(text: str) -> list[dict]:
    """Per profiled kernel, in launch order: ``{"kernel": name, metric: value, ...}`` from
    ``ncu --csv`` output (values in base units; a value that is not a number kept as text)."""
    from .l2 import metric_value, ncu_metric_rows

    kernels: dict = {}
    for row in ncu_metric_rows(text):
        entry = kernels.setdefault(row.get("ID", "0"), {"kernel": row.get("Kernel Name", "")})
        value = metric_value(row)
        entry[row["Metric Name"]] = value if value is not None else row["Metric Value"]
    return [kernels[k] for k in sorted(kernels, key=lambda s: int(s) if s.isdigit() else 0)]


def profile(ncu: str, case: CounterCase, provider: str, metrics: list[str], timeout_s: int = 600) -> list[dict]:
    cmd = [ncu, "--profile-from-start", "off", "--metrics", ",".join(metrics), "--csv", "--print-units", "base",
           sys.executable, "-m", "gemm_kernels.bench.counters", "--worker", case.name, provider]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0 or WORKER_TAG not in proc.stdout:
        raise NcuFailed(f"ncu on {case.name} / {provider} failed (exit {proc.returncode}):\n"
                        + (proc.stdout + proc.stderr)[-3000:])
    kernels = parse_ncu_kernels(proc.stdout)
    if not kernels:
        raise NcuFailed(f"ncu profiled no kernel of {case.name} / {provider}:\n{proc.stdout[-2000:]}")
    return kernels


def write_outputs(rows: list[dict], metrics: list[str], out: Path, header_lines: list[str]) -> None:
    from .report import atomic_write, write_text_atomic

    columns = ["case", "provider", "kernel", *metrics]
    with atomic_write(out / "counters.csv", newline="") as f:
        writer = csv.DictWriter(f, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    renames = ((".avg.pct_of_peak_sustained_elapsed", " %"), ("_per_warp_active.pct", " %"),
               ("smsp__warp_issue_stalled_", "stall "), ("launch__", ""), ("sm__pipe_tensor_cycles_active", "tensor pipe"))
    short = {}
    for m in metrics:
        short[m] = m
        for old, new in renames:
            short[m] = short[m].replace(old, new)
    lines = [*header_lines, "", "| case | provider | kernel | " + " | ".join(short[m] for m in metrics) + " |",
             "|" + "---|" * (3 + len(metrics))]
    for r in rows:
        cells = [r["case"], r["provider"], f"`{short_kernel(r['kernel'])}`"]
        for m in metrics:
            v = r.get(m)
            cells.append("" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v)))
        lines.append("| " + " | ".join(cells) + " |")
    write_text_atomic(out / "counters.md", "\n".join(lines) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gemm_kernels.bench.counters", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="bench-results/counters")
    p.add_argument("--case", action="append", help="a case name (default: every case); repeatable")
    p.add_argument("--ncu", default=None, help="path of ncu (default: found on PATH)")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--worker", nargs=2, metavar=("CASE", "PROVIDER"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.list:
        for c in CASES:
            print(f"{c.name}: {', '.join(c.providers)} ({c.why})")
        return 0
    if args.worker:
        print(WORKER_TAG + json.dumps(worker(*args.worker)), flush=True)
        return 0
    try:
        cases = [case_named(n) for n in args.case] if args.case else list(CASES)
    except ValueError as exc:
        p.error(str(exc))
    if not runtime.on_gpu():
        print("counters: Nsight Compute needs a CUDA GPU; none here")
        return 2
    from .l2 import find_ncu

    ncu = find_ncu(args.ncu)
    if ncu is None:
        print("counters: ncu (Nsight Compute) not found; pass --ncu PATH")
        return 2
    # the whole list, then the ones ncu lists, then a minimal list: an unknown name fails the run
    choices = list(dict.fromkeys(tuple(m) for m in (WANTED_METRICS, available_metrics(ncu), MINIMAL_METRICS)))
    metrics = list(choices.pop(0))
    rows, failures = [], []
    for case in cases:
        for provider in case.providers:
            while True:
                try:
                    kernels = profile(ncu, case, provider, metrics)
                    break
                except NcuFailed as exc:
                    if choices and not rows:  # nothing has worked yet: maybe a metric name
                        print(f"ncu failed with {len(metrics)} metrics; trying {len(choices[0])}", flush=True)
                        metrics = list(choices.pop(0))
                        continue
                    kernels = None
                    failures.append(f"{case.name} / {provider}: {str(exc).splitlines()[0]}")
                    print(f"FAILED {failures[-1]}\n{exc}", flush=True)
                    break
                except subprocess.TimeoutExpired:
                    kernels = None
                    failures.append(f"{case.name} / {provider}: timed out")
                    break
            if kernels is None:
                continue
            for k in kernels:
                rows.append({"case": case.name, "provider": provider, **k})
                print(f"{case.name} | {provider} | {short_kernel(k['kernel'], 50)} | "
                      + ", ".join(f"{m.split('.')[0]}={k.get(m)}" for m in metrics[:3]), flush=True)
            write_outputs(rows, metrics, Path(args.out), [])
    import triton

    header = [f"Nsight Compute counters on {runtime.gpu_name()} (torch {torch.__version__}, triton "
              f"{triton.__version__}): `python -m gemm_kernels.bench.counters`; one call per provider, "
              "after a warm-up, every kernel of the call."]
    write_outputs(rows, metrics, Path(args.out), header + ([f"Failed: {f}" for f in failures] or []))
    print(f"counters -> {Path(args.out) / 'counters.csv'}; {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
