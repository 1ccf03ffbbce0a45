"""``python -m gemm_kernels.bench.moe_configs``: every config of ``grouped_mm``'s tuning list timed
on one ``moe`` suite row, with the offs check compiled in (the default call's kernel) and without,
beside ``torch._grouped_mm`` and the config the autotuner picked (GPU only).

It answers "is the autotuner's pick the fastest, and does the device-side check cost anything?"
for a row: ``do_bench`` medians (``return_mode="median"``), ``--rounds`` rounds with every
candidate timed once per round (interleaved, so a GPU settling under its power limit slows them
alike), the median of the rounds reported.

    python -m gemm_kernels.bench.moe_configs --case "moe Qwen3-30B-A3B down T=32768 uniform" [--json PATH]

An A/B of a kernel change behind a boolean constexpr switch, on the picked config only (PERF_NOTES 23):

    python -m gemm_kernels.bench.moe_configs --case "moe ..." --picked-only --switch OUT_SHARED_DESC
"""

from __future__ import annotations

import argparse
import statistics

import torch

from .. import runtime
from .core import positive_int
from .report import write_record


def candidates(x, w, offs, picked_only=False, switch=None):
    """(name, no-argument launch) for each config x {checked, unchecked} and torch's op, the
    autotuner's pick for the default call (tuned by a first call, as in any run), and the output
    the kernel launches write.  ``picked_only``: the picked config alone.  ``switch``: the name of
    one of the kernel's boolean constexpr switches: each launch is also timed with it off (an A/B
    of a kernel change on the same config, same inputs, same process)."""
    from ..kernels import moe

    out = torch.empty(x.shape[0], w.shape[2], device=x.device, dtype=x.dtype)
    flags = moe._plan_tma(x, w, out, None)
    if flags["USE_TMA"] or flags["OUT_TMA"]:
        moe.ensure_tma_allocator()
    args = moe._launch_args(x, w, offs, out, flags)
    moe.grouped_mm(x, w, offs)  # tunes this key the way the default call does
    tuned = moe._grouped_mm_tuned
    picked = tuned.chosen.get(tuned.tuning_key(x, w, out, offs, offs, offs, offs, offs, **args))  # error, trace, scales: int32
    T, N, E = x.shape[0], w.shape[2], w.shape[0]
    launches = []
    fitting = moe.configs.fit_to_device(tuned.configs, {**args, "x_ptr": x, "w_ptr": w, "out_ptr": out})
    if picked_only:
        if picked is not None:
            fitting = [c for c in fitting if c.all_kwargs() == picked.all_kwargs()]
        elif len(fitting) > 1:
            raise RuntimeError("moe_configs --picked-only: the autotuner's pick for this call is not known")
        if not fitting:
            raise RuntimeError("moe_configs --picked-only: the autotuner's pick is not in the tuning list")
    for config in fitting:
        bm, bn = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]
        grid = (moe.num_programs_for(T, E, N, bm, bn),)
        label = (f"{bm}x{bn}x{config.kwargs['BLOCK_K']} w{config.num_warps} s{config.num_stages}"
                 + (" (picked)" if picked is not None and config.all_kwargs() == picked.all_kwargs() else ""))
        for checked in (True, False):
            error = moe.error_record() if runtime.on_gpu() else offs
            for on in ((True, False) if switch else (True,)):
                flip = {switch: on} if switch else {}

                def launch(config=config, grid=grid, checked=checked, error=error, flip=flip):
                    moe._grouped_mm_kernel[grid](x, w, out, offs, error, offs, offs, offs, **args, TRACE=False,
                                                 CHECK_OFFS=checked, **flip, **config.all_kwargs())
                name = f"{label} {'checked' if checked else 'unchecked'}"
                launches.append((name + (f" {switch}={on}" if switch else ""), launch))
    launches.append(("torch._grouped_mm", lambda: torch._grouped_mm(x, w, offs=offs)))
    return launches, picked, out


def measure(case_name: str, rounds: int = 3, rep_ms: int = 200, picked_only=False, switch=None) -> list[dict]:
    from triton.testing import do_bench

    from . import counters

    case = counters.case_named(case_name)
    if case.kind != "moe" or case.shape[4] != "fwd":
        raise ValueError(f"{case_name!r} is not a forward moe row")
    x, w, offs = counters.moe_inputs(case, torch.bfloat16, torch.Generator(device=runtime.DEVICE).manual_seed(0))
    launches, _, _ = candidates(x, w, offs, picked_only, switch)
    times: dict[str, list[float]] = {name: [] for name, _ in launches}
    for _ in range(rounds):
        for name, fn in launches:
            times[name].append(do_bench(fn, warmup=25, rep=rep_ms, return_mode="median") * 1e3)
    torch_us = statistics.median(times["torch._grouped_mm"])
    rows = []
    for name, ts in times.items():
        us = statistics.median(ts)
        rows.append({"case": case_name, "candidate": name, "us": round(us, 1), "vs_torch": round(torch_us / us, 3)})
        print(f"{case_name} | {name}: {us:.1f} us, {torch_us / us:.3f}x torch._grouped_mm", flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gemm_kernels.bench.moe_configs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", required=True, help="a forward moe row, 'moe <case label>'")
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--rep-ms", type=positive_int, default=200)
    parser.add_argument("--picked-only", action="store_true", help="time the autotuner's pick alone")
    parser.add_argument("--switch", metavar="NAME",
                        help="a boolean constexpr of the kernel (e.g. OUT_SHARED_DESC): time each launch with it on and off")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    from . import counters

    for name in args.case:
        counters.case_named(name)  # fail before timing anything
    if not runtime.on_gpu():
        raise SystemExit("moe_configs times kernels on a CUDA GPU; none here")
    rows = [row for name in args.case
            for row in measure(name, args.rounds, args.rep_ms, args.picked_only, args.switch)]
    if args.json:
        write_record(args.json, "moe_configs", argv, rows=rows,
                     timing=f"do_bench median, rep {args.rep_ms} ms, {args.rounds} rounds interleaved")


if __name__ == "__main__":
    main()
