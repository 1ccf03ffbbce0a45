"""The L2 model (:mod:`gemm_kernels.models.l2model`) beside the hardware's counters.

For a few fp16 GEMMs, ``_matmul_kernel`` (one program per C tile) runs in row-major and
in grouped order under Nsight Compute, and the measured L2 read hit rate and DRAM bytes
are put beside what the model predicts for the same schedule.

Fixed blocks
    Autotuning would launch many configs and pick its own tile size; the model must use
    the tile the hardware ran.  So both modes call ``matmul._matmul_kernel`` directly with
    :data:`CONFIG` (the way ``matmul.trace_program_tiles`` does), never the autotuned
    launcher.  ``programs_in_flight`` for the model = SMs x programs per SM, worked out
    from the compiled kernel's registers and shared memory (:func:`programs_per_sm`).

Three modes::

    python -m gemm_kernels.bench.l2 --run [--out DIR] [--ncu PATH]
        # driver: one ncu run per (shape, order), parses ncu's CSV, writes l2.csv/.png/.md
    python -m gemm_kernels.bench.l2 --worker --M 4096 --N 4096 --K 4096 --order grouped
        # what ncu profiles: one launch of the fixed-config kernel, then a correctness check
    python -m gemm_kernels.bench.l2 --model-only
        # the model's side only (any machine)

The driver runs ncu once per (shape, order) on ``--worker`` (:func:`ncu_command`).  ncu's default cache control flushes the caches before the profiled launch, so the kernel
starts cold, as the model assumes.  Hit rate means read hits / (read hits + read misses)
on both sides: the counters' ``lts__t_sectors_op_read_lookup_{hit,miss}`` (32-byte sectors)
and the model's block loads that hit / all block loads.
"""

from __future__ import annotations

import argparse
import csv
import glob
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import runtime
from ..results import BENCH_DIR, metric_value, section_heading  # noqa: F401  (metric_value: counters reads it here)
from .core import positive_int

#: (M, N, K), fp16.  2048^2: A and B fit in L2 (both orders should hit alike); 4096^2: B is 32 MiB;
#: 8192^2: B is 128 MiB, far over the 50 MiB L2; 2048x16384x4096: a short, wide C.
SHAPES = ((2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (2048, 16384, 4096))
CPU_SHAPES = ((64, 96, 64),)
ORDERS = ("row_major", "grouped")
GROUP_SIZE_M = 8
#: the fixed config every run uses (a common Hopper choice among configs.matmul_configs)
CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
#: what the driver asks ncu for; FALLBACK_METRICS if this ncu does not know one of them
METRICS = (
    "lts__t_sector_hit_rate.pct",
    "lts__t_sector_op_read_hit_rate.pct",
    "lts__t_sectors_op_read_lookup_hit.sum",
    "lts__t_sectors_op_read_lookup_miss.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg.per_second",
)
FALLBACK_METRICS = ("lts__t_sector_hit_rate.pct", "dram__bytes_read.sum")
KERNEL_REGEX = "regex:_matmul_kernel"
WORKER_TAG = "L2WORKER_JSON "


# ------------------------------------------------------------------------------ worker


def programs_per_sm(n_regs: int, shared_bytes: int, num_warps: int, props=None) -> int:
    """Programs one SM holds at once, from the compiled kernel's registers and shared memory.

    Limits: warps (64 per SM on sm_80/90), registers (65536 per SM, allocated per warp in
    units of 256) and shared memory (the SM's bytes, 1 KiB of each block reserved)."""
    regs_per_sm = getattr(props, "regs_per_multiprocessor", 65536)
    threads_per_sm = getattr(props, "max_threads_per_multi_processor", 2048)
    smem_per_sm = getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)
    by_warps = threads_per_sm // (32 * num_warps)
    regs_per_warp = math.ceil(max(n_regs, 1) * 32 / 256) * 256
    by_regs = regs_per_sm // (regs_per_warp * num_warps)
    by_smem = smem_per_sm // (shared_bytes + 1024) if shared_bytes else by_warps
    return max(1, min(by_warps, by_regs, by_smem, 32))


def launch_fixed(a: torch.Tensor, b: torch.Tensor, order: str, config: dict = CONFIG,
                 group_size_m: int = GROUP_SIZE_M):
    """One launch of ``_matmul_kernel`` with ``config``; returns ``(c, compiled kernel or None)``."""
    from ..kernels.epilogue import widen_for_dot
    from ..kernels.matmul import _matmul_kernel

    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (math.ceil(M / config["BLOCK_M"]) * math.ceil(N / config["BLOCK_N"]),)
    launch_opts = {} if runtime.interpreted() else {"num_warps": config["num_warps"],
                                                    "num_stages": config["num_stages"]}
    compiled = _matmul_kernel[grid](
        a, b, c, c, c,
        M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], BLOCK_K=config["BLOCK_K"],
        GROUPED=order == "grouped", GROUP_SIZE_M=group_size_m,
        HAS_BIAS=False, ACTIVATION=None, WIDEN=widen_for_dot(a.dtype), TRACE=False,
        **launch_opts,
    )
    return c, compiled


def worker(M: int, N: int, K: int, order: str, config: dict = CONFIG) -> dict:
    """Run the fixed-config kernel once (the launch ncu profiles), check it, describe it."""
    from ..testing import TOLERANCES, rel_err

    gen = torch.Generator(device=runtime.DEVICE).manual_seed(M * 31 + N * 7 + K)
    a = torch.randn(M, K, device=runtime.DEVICE, dtype=torch.float16, generator=gen)
    b = torch.randn(K, N, device=runtime.DEVICE, dtype=torch.float16, generator=gen)
    c, compiled = launch_fixed(a, b, order, config)
    if runtime.on_gpu():
        torch.cuda.synchronize()
    ref = a.double() @ b.double()
    err = rel_err(c, ref)
    info = {"M": M, "N": N, "K": K, "order": order, **config, "group_size_m": GROUP_SIZE_M,
            "rel_err": err, "ok": err <= TOLERANCES[torch.float16], "num_sms": runtime.num_sms()}
    n_regs = getattr(compiled, "n_regs", None)
    shared = getattr(getattr(compiled, "metadata", None), "shared", None)
    props = torch.cuda.get_device_properties(0) if runtime.on_gpu() else None
    if n_regs is not None and shared is not None:
        info.update(n_regs=int(n_regs), shared_bytes=int(shared), occupancy_from="compiled kernel",
                    programs_per_sm=programs_per_sm(int(n_regs), int(shared), config["num_warps"], props))
    else:  # this Triton did not hand back the compiled kernel: estimate from the config
        shared = estimated_shared_bytes(config)
        info.update(shared_bytes=shared, occupancy_from="estimated from the config (no compiled-kernel info)",
                    programs_per_sm=programs_per_sm(128, shared, config["num_warps"], props))
    return info


def estimated_shared_bytes(config: dict, element_bytes: int = 2) -> int:
    """Shared memory of the software pipeline: num_stages copies of an A and a B block."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    return config["num_stages"] * (bm * bk + bk * bn) * element_bytes


# ------------------------------------------------------------------------------ model


def l2_bytes_of_device() -> int:
    from ..models.l2model import H100_L2_BYTES

    if runtime.on_gpu():
        size = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", None)
        if size:
            return int(size)
    return H100_L2_BYTES


def model_prediction(M: int, N: int, K: int, order: str, programs_in_flight: int, l2_bytes: int,
                     config: dict = CONFIG, element_bytes: int = 2) -> dict:
    """The L2 model's hit rate and DRAM read bytes for the schedule the kernel runs."""
    from ..models.l2model import l2_traffic
    from ..models.schedule import tile_schedule

    s = tile_schedule(M, N, config["BLOCK_M"], config["BLOCK_N"], order, GROUP_SIZE_M,
                      programs_in_flight=programs_in_flight, K=K)
    traffic = l2_traffic(s, block_k=config["BLOCK_K"], K=K, l2_bytes=l2_bytes, element_bytes=element_bytes)
    t = traffic.totals()
    return {
        "model_hit_rate_pct": 100 * traffic.hit_rate,
        "model_dram_read_bytes": float(t["dram_read_bytes"]),
        "compulsory_read_bytes": float((M * K + K * N) * element_bytes),
        "model_waves": s.num_waves,
        "programs_in_flight": programs_in_flight,
        "l2_bytes": l2_bytes,
    }


# ------------------------------------------------------------------------------ ncu


def find_ncu(explicit: str | None = None) -> str | None:
    if explicit:
        return explicit if Path(explicit).is_file() or shutil.which(explicit) else None
    found = shutil.which("ncu")
    if found:
        return found
    candidates = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu")) + sorted(glob.glob("/usr/local/cuda*/bin/ncu"))
    return candidates[-1] if candidates else None


def ncu_command(ncu: str, log_file: str, worker_args: list[str], metrics=METRICS, base_units=True,
                clock_control: str = "base") -> list[str]:
    """ncu's own default clock control is ``base`` (SM clock locked at base); ``none`` leaves the
    GPU's clock as it runs, power cap and boost included."""
    units = ["--print-units", "base"] if base_units else []
    return [ncu, "--clock-control", clock_control, "--metrics", ",".join(metrics), "--csv", *units,
            "--kernel-name", KERNEL_REGEX, "--launch-count", "1", "--log-file", log_file,
            sys.executable, "-m", "gemm_kernels.bench.l2", "--worker", *worker_args]


def ncu_metric_rows(text: str):
    """The metric rows of ``ncu --csv`` output, each a dict keyed by ncu's header ("ID",
    "Kernel Name", "Metric Name", "Metric Unit", "Metric Value", ...).  Lines that are not CSV
    (``==PROF==`` messages, the program's own output) are skipped."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    header = None
    for row in csv.reader(io.StringIO("\n".join(lines))):
        if header is None:
            if "Metric Name" in row and "Metric Value" in row:
                header = row
            continue
        if len(row) >= len(header):
            yield dict(zip(header, row))


def parse_ncu_csv(text: str) -> dict[str, float]:
    """``{metric name: value in base units}`` from ``ncu --csv`` output (the first profiled kernel)."""
    metrics = {}
    for row in ncu_metric_rows(text):
        name, value = row["Metric Name"], metric_value(row)
        if name not in metrics and value is not None:  # a second kernel: keep the first
            metrics[name] = value
    if not metrics:
        raise ValueError("no metric rows in ncu's CSV output")
    return metrics


def _worker_args(M, N, K, order) -> list[str]:
    return ["--M", str(M), "--N", str(N), "--K", str(K), "--order", order]


def _parse_worker_json(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith(WORKER_TAG):
            return json.loads(line[len(WORKER_TAG):])
    raise ValueError("the worker printed no result line (did it crash?)")


@dataclass
class NcuRun:
    metrics: dict
    worker: dict
    command: list


def run_under_ncu(ncu: str, M: int, N: int, K: int, order: str, timeout_s: int = 300,
                  clock_control: str = "base") -> NcuRun:
    """Profile one worker launch; retries with FALLBACK_METRICS (and then without --print-units)
    if this ncu rejects a metric name or an option."""
    last_error = ""
    for metrics, base_units in ((METRICS, True), (FALLBACK_METRICS, True), (FALLBACK_METRICS, False)):
        with tempfile.TemporaryDirectory(prefix="gemm_l2_") as tmp:
            log = os.path.join(tmp, "ncu.csv")
            cmd = ncu_command(ncu, log, _worker_args(M, N, K, order), metrics, base_units, clock_control)
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                  cwd=Path(__file__).resolve().parents[2])
            text = Path(log).read_text() if os.path.exists(log) else ""
        try:
            return NcuRun(parse_ncu_csv(text + "\n" + proc.stdout), _parse_worker_json(proc.stdout), cmd)
        except ValueError as exc:
            tail = "\n".join((text + proc.stdout + proc.stderr).strip().splitlines()[-6:])
            last_error = f"{exc}; ncu exit {proc.returncode}; last lines:\n{tail}"
            print(f"  ncu attempt failed ({' '.join(cmd[:8])} ...): {exc}", flush=True)
    raise RuntimeError(f"ncu run failed for {M}x{N}x{K} {order}: {last_error}")


# ------------------------------------------------------------------------------ report

CSV_COLUMNS = ("M", "N", "K", "order", "block_m", "block_n", "block_k", "group_size_m", "programs_in_flight",
               "model_hit_rate_pct", "hw_read_hit_rate_pct", "hw_sector_hit_rate_pct",
               "model_dram_read_mb", "hw_dram_read_mb", "compulsory_read_mb", "hw_dram_write_mb",
               "hw_time_us", "model_waves", "n_regs", "shared_bytes", "rel_err", "ok")


def _mb(x):
    return None if x is None else x / 1e6


def make_row(M, N, K, order, model: dict, measured: dict | None, worker_info: dict | None) -> dict:
    m = measured or {}
    hit = m.get("lts__t_sectors_op_read_lookup_hit.sum")
    miss = m.get("lts__t_sectors_op_read_lookup_miss.sum")
    read_rate = 100 * hit / (hit + miss) if hit is not None and miss is not None and hit + miss else \
        m.get("lts__t_sector_op_read_hit_rate.pct")
    w = worker_info or {}
    return {
        "M": M, "N": N, "K": K, "order": order, "block_m": CONFIG["BLOCK_M"], "block_n": CONFIG["BLOCK_N"],
        "block_k": CONFIG["BLOCK_K"], "group_size_m": GROUP_SIZE_M, "programs_in_flight": model["programs_in_flight"],
        "model_hit_rate_pct": model["model_hit_rate_pct"], "hw_read_hit_rate_pct": read_rate,
        "hw_sector_hit_rate_pct": m.get("lts__t_sector_hit_rate.pct"),
        "model_dram_read_mb": _mb(model["model_dram_read_bytes"]), "hw_dram_read_mb": _mb(m.get("dram__bytes_read.sum")),
        "compulsory_read_mb": _mb(model["compulsory_read_bytes"]),
        "hw_dram_write_mb": _mb(m.get("dram__bytes_write.sum")),
        "hw_time_us": m["gpu__time_duration.sum"] / 1e3 if "gpu__time_duration.sum" in m else None,
        "model_waves": model["model_waves"], "n_regs": w.get("n_regs"), "shared_bytes": w.get("shared_bytes"),
        "rel_err": w.get("rel_err"), "ok": w.get("ok"),
    }


def _fmt(v, spec=".1f"):
    return "n/a" if v is None else format(v, spec)


def disagreements(rows: list[dict], tolerance_pct: float = 10.0) -> list[str]:
    """Plain sentences for every row where model and hardware differ by more than ``tolerance_pct``."""
    out = []
    for r in rows:
        name = f"{r['M']}x{r['N']}x{r['K']} {r['order']}"
        if r["hw_read_hit_rate_pct"] is not None:
            d = r["hw_read_hit_rate_pct"] - r["model_hit_rate_pct"]
            if abs(d) > tolerance_pct:
                out.append(f"{name}: hit rate measured {r['hw_read_hit_rate_pct']:.1f}% vs model "
                           f"{r['model_hit_rate_pct']:.1f}% ({d:+.1f} points)")
        if r["hw_dram_read_mb"] is not None and r["model_dram_read_mb"]:
            ratio = r["hw_dram_read_mb"] / r["model_dram_read_mb"]
            if abs(ratio - 1) > tolerance_pct / 100:
                out.append(f"{name}: DRAM reads measured {r['hw_dram_read_mb']:.0f} MB vs model "
                           f"{r['model_dram_read_mb']:.0f} MB ({ratio:.2f}x)")
    return out


def l2_markdown(rows: list[dict], meta: dict) -> str:
    lines = [section_heading("l2"), "",
             f"`_matmul_kernel` fp16 with fixed blocks {CONFIG['BLOCK_M']}x{CONFIG['BLOCK_N']}x{CONFIG['BLOCK_K']} "
             f"(GROUP_SIZE_M={GROUP_SIZE_M}), profiled with Nsight Compute on {meta.get('device')} "
             f"({meta.get('date')}); model: `gemm_kernels.models.l2model` with the same schedule, "
             f"{meta.get('programs_in_flight_note', '')}L2 = {meta.get('l2_bytes', 0) / 2**20:.0f} MiB.", "",
             "| shape | order | hit rate: model | hit rate: measured (reads) | all-sector hit rate | "
             "DRAM read MB: model | measured | compulsory | kernel time (us) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['M']}x{r['N']}x{r['K']} | {r['order']} | {_fmt(r['model_hit_rate_pct'])}% | "
                     f"{_fmt(r['hw_read_hit_rate_pct'])}% | {_fmt(r['hw_sector_hit_rate_pct'])}% | "
                     f"{_fmt(r['model_dram_read_mb'], '.0f')} | {_fmt(r['hw_dram_read_mb'], '.0f')} | "
                     f"{_fmt(r['compulsory_read_mb'], '.0f')} | {_fmt(r['hw_time_us'], '.0f')} |")
    diffs = disagreements(rows)
    lines += ["", "Where model and hardware disagree by more than 10 (points or percent):", ""]
    lines += [f"- {d}" for d in diffs] if diffs else ["- nowhere on these shapes"]
    lines += ["", "The model's known optimism (its docstring): lockstep waves, one ideal LRU of the whole L2 "
              "(the H100's L2 is two partitions, set-associative, and also holds C), whole blocks instead of "
              "32-byte sectors.", ""]
    return "\n".join(lines)


def write_outputs(rows: list[dict], out: Path, meta: dict) -> None:
    from . import report

    with report.atomic_write(out / "l2.csv", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r[k] is None else (f"{r[k]:.6g}" if isinstance(r[k], float) else r[k]))
                        for k in CSV_COLUMNS})
    report.write_text_atomic(out / "l2.md", l2_markdown(rows, meta))
    report.update_meta(out, "l2", meta)
    plot_l2(rows, out / "l2.png", meta)


def plot_l2(rows: list[dict], path: Path, meta: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # shape on two lines (M x N, then x K) so neighbouring labels never overlap
    labels = [f"{r['M']}x{r['N']}\nx{r['K']}\n{r['order'].replace('_', '-')}" for r in rows]
    xs = range(len(rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.4))
    w = 0.38
    ax1.bar([x - w / 2 for x in xs], [r["model_hit_rate_pct"] for r in rows], w, label="model")
    ax1.bar([x + w / 2 for x in xs], [r["hw_read_hit_rate_pct"] or 0 for r in rows], w, label="measured (ncu)")
    ax1.set_ylabel("L2 read hit rate (%)")
    ax1.set_ylim(0, 118)  # room above the bars for the legend
    ax1.set_yticks(range(0, 101, 20))
    ax2.bar([x - w / 2 for x in xs], [r["model_dram_read_mb"] for r in rows], w, label="model")
    ax2.bar([x + w / 2 for x in xs], [r["hw_dram_read_mb"] or 0 for r in rows], w, label="measured (ncu)")
    ax2.scatter(list(xs), [r["compulsory_read_mb"] for r in rows], color="k", marker="_", s=200,
                label="compulsory (A + B once)", zorder=3)
    ax2.set_ylabel("DRAM bytes read (MB)")
    ax2.set_yscale("log")
    ax2.set_ylim(top=ax2.get_ylim()[1] * 6)  # room above the bars for the legend
    for ax in (ax1, ax2):
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, fontsize=7)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    fig.suptitle(f"L2 model vs Nsight Compute: {meta.get('device')} ({meta.get('date')})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------ CLI


def _meta(l2_bytes: int, programs_note: str) -> dict:
    import datetime as dt

    import triton

    return {"device": runtime.gpu_name(), "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "torch": torch.__version__, "triton": triton.__version__, "l2_bytes": l2_bytes,
            "config": CONFIG, "group_size_m": GROUP_SIZE_M, "metrics": list(METRICS),
            "programs_in_flight_note": programs_note,
            "command": "python -m gemm_kernels.bench.l2 " + " ".join(sys.argv[1:])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gemm_kernels.bench.l2", description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--run", action="store_true", help="driver: profile every shape and order under ncu")
    mode.add_argument("--worker", action="store_true", help="one launch of the fixed-config kernel (ncu profiles it)")
    mode.add_argument("--model-only", action="store_true", help="print the model's predictions and exit")
    p.add_argument("--M", type=positive_int)
    p.add_argument("--N", type=positive_int)
    p.add_argument("--K", type=positive_int)
    p.add_argument("--order", choices=ORDERS, default="grouped")
    p.add_argument("--out", default=str(BENCH_DIR), help=f"output directory (default {BENCH_DIR})")
    p.add_argument("--ncu", help="path of ncu (default: on PATH or /opt/nvidia/nsight-compute/*/ncu)")
    p.add_argument("--programs-per-sm", type=positive_int,
                   help="override the occupancy the model assumes (default: from the compiled kernel)")
    args = p.parse_args(argv)

    if args.worker:
        if None in (args.M, args.N, args.K):
            p.error("--worker needs --M, --N and --K")
        info = worker(args.M, args.N, args.K, args.order)
        print(WORKER_TAG + json.dumps(info), flush=True)
        return 0 if info["ok"] else 1

    shapes = SHAPES if runtime.on_gpu() or args.model_only else CPU_SHAPES
    num_sms = runtime.num_sms() if runtime.on_gpu() else 132  # model an H100 SXM when there is no GPU
    l2 = l2_bytes_of_device()
    if args.model_only:
        per_sm = args.programs_per_sm or 1
        print(f"model only: {num_sms} SMs x {per_sm} program(s) per SM, L2 {l2 / 2**20:.0f} MiB, "
              f"blocks {CONFIG['BLOCK_M']}x{CONFIG['BLOCK_N']}x{CONFIG['BLOCK_K']}")
        for M, N, K in shapes:
            for order in ORDERS:
                m = model_prediction(M, N, K, order, num_sms * per_sm, l2)
                print(f"  {M}x{N}x{K} {order:9s}: hit rate {m['model_hit_rate_pct']:5.1f}%, DRAM reads "
                      f"{m['model_dram_read_bytes'] / 1e6:8.0f} MB (compulsory {m['compulsory_read_bytes'] / 1e6:.0f})")
        return 0

    if not runtime.on_gpu():
        print("the L2 measurement needs a CUDA GPU and Nsight Compute (ncu); use --model-only here")
        return 2
    ncu = find_ncu(args.ncu)
    if ncu is None:
        print("ncu not found: pass --ncu PATH (Nsight Compute's command-line profiler)")
        return 2
    print(f"ncu: {ncu}")
    rows, notes, failed = [], set(), None
    for M, N, K in shapes:
        for order in ORDERS:
            try:
                run = run_under_ncu(ncu, M, N, K, order)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                failed = str(exc)
                print(failed, flush=True)
                break
            per_sm = args.programs_per_sm or run.worker.get("programs_per_sm") or 1
            notes.add(f"{order}: {num_sms} SMs x {per_sm} program(s) per SM "
                      + ("(given)" if args.programs_per_sm else
                         f"({run.worker.get('occupancy_from')}: {run.worker.get('n_regs')} registers, "
                         f"{run.worker.get('shared_bytes')} B shared)"))
            model = model_prediction(M, N, K, order, num_sms * per_sm, l2)
            row = make_row(M, N, K, order, model, run.metrics, run.worker)
            rows.append(row)
            print(f"{M}x{N}x{K} {order:9s}: hit rate model {row['model_hit_rate_pct']:5.1f}% measured "
                  f"{_fmt(row['hw_read_hit_rate_pct'])}%; DRAM read model {row['model_dram_read_mb']:.0f} MB "
                  f"measured {_fmt(row['hw_dram_read_mb'], '.0f')} MB; correct: {row['ok']}", flush=True)
        if failed:
            break
    if not rows:
        print("no shape could be profiled: nothing written")
        return 3
    meta = _meta(l2, "; ".join(sorted(notes)) + "; ")
    if failed:
        meta["incomplete"] = failed.splitlines()[0]
    out = Path(args.out)
    write_outputs(rows, out, meta)
    print(l2_markdown(rows, meta))
    print(f"wrote {out / 'l2.csv'}, {out / 'l2.png'}, {out / 'l2.md'}")
    if failed:
        return 3
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
