"""``python -m gemm_kernels.bench.clocks``: each provider's ``do_bench`` median beside the SM clock
and the power the GPU ran at meanwhile (GPU only, needs ``nvidia-smi``).

Why: Nsight Compute locks the clocks to base before it profiles (``bench.counters``), while
``do_bench`` times kernels at whatever clock the GPU's boost and power limit allow.  Two kernels
that do the same work in the same cycles can then differ in time because one draws more power
and runs at a lower clock.  This measures it: ``nvidia-smi`` samples the SM clock, power draw
and the active clock-event (throttle) reasons every ``--period-ms`` while ``do_bench`` runs.
It only reads: the GPU's clock settings are left as they are.

The cases are ``bench.counters``' (``--list`` names them); each provider is timed ``--rounds``
times, interleaved, with ``do_bench(return_mode="median")`` over ``--rep-ms``.

    python -m gemm_kernels.bench.clocks [--case NAME ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import threading

import torch

from .. import runtime
from . import counters
from .core import positive_int
from .report import write_record

FIELDS = ("clocks.sm", "power.draw", "clocks_throttle_reasons.active")


class ClockSampler:
    """``with ClockSampler(gpu) as s: ...`` polls ``nvidia-smi`` for ``gpu`` (an index or a UUID)
    every ``period_ms`` in the background; ``s.samples`` are (SM MHz, watts, reasons bitmask)."""

    def __init__(self, gpu: str, period_ms: int = 20):
        fields = FIELDS
        probe = subprocess.run(["nvidia-smi", "-i", gpu, "--query-gpu=" + ",".join(fields), "--format=csv,noheader"],
                               capture_output=True, text=True)
        if probe.returncode != 0:  # an nvidia-smi that does not know the reasons field
            fields = FIELDS[:2]
        self.command = ["nvidia-smi", "-i", gpu, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits",
                        f"-lms={period_ms}"]
        self.samples: list[tuple[float, float, int]] = []

    def __enter__(self):
        self._proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self):
        for line in self._proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                reasons = int(parts[2], 16) if len(parts) > 2 else 0
                self.samples.append((float(parts[0]), float(parts[1]), reasons))
            except (ValueError, IndexError):  # a header, "[N/A]" or a half-written line
                continue

    def __exit__(self, *exc):
        self._proc.terminate()
        self._proc.wait(timeout=10)
        self._reader.join(timeout=10)
        if not self.samples:
            err = self._proc.stderr.read() if self._proc.stderr else ""
            raise RuntimeError(f"nvidia-smi gave no samples ({' '.join(self.command)}): {err.strip()[:300]}")


#: nvidia-smi's clock-event reasons (nvml's nvmlClocksEventReasons bits) named in the report
REASONS = {0x1: "idle", 0x2: "app clocks", 0x4: "sw power cap", 0x8: "hw slowdown", 0x10: "sync boost", 0x20: "sw thermal",
           0x40: "hw thermal", 0x80: "hw power brake", 0x100: "display clocks"}


def reasons_named(mask: int) -> str:
    return "+".join(name for bit, name in REASONS.items() if mask & bit) or "none"


def timed_with_clocks(fn, gpu: str, rep_ms: int, period_ms: int) -> dict:
    """One ``do_bench`` median of ``fn`` and the clocks sampled while it ran."""
    from triton.testing import do_bench

    fn()
    torch.cuda.synchronize()
    with ClockSampler(gpu, period_ms) as sampler:
        ms = do_bench(fn, warmup=100, rep=rep_ms, return_mode="median")
    busy = [s for s in sampler.samples if not s[2] & 0x1] or sampler.samples  # drop idle samples
    masks = [s[2] for s in busy]
    return {"us": ms * 1e3, "sm_mhz": statistics.median(s[0] for s in busy),
            "watts": statistics.median(s[1] for s in busy), "samples": len(busy),
            "reasons": reasons_named(max(set(masks), key=masks.count))}


def measure(case_name: str, rounds: int, rep_ms: int, period_ms: int) -> list[dict]:
    case = counters.case_named(case_name)
    props = torch.cuda.get_device_properties(runtime.DEVICE)
    gpu = f"GPU-{props.uuid}" if getattr(props, "uuid", None) else str(runtime.DEVICE.index or 0)
    calls = {p: counters.build_call(case, p) for p in case.providers}
    runs: dict[str, list[dict]] = {p: [] for p in calls}
    for _ in range(rounds):  # interleaved, so a drifting clock hits every provider alike
        for provider, fn in calls.items():
            runs[provider].append(timed_with_clocks(fn, gpu, rep_ms, period_ms))
    rows = []
    for provider, rs in runs.items():
        rows.append({"case": case.name, "provider": provider, "rounds": len(rs),
                     "us": statistics.median(r["us"] for r in rs),
                     "sm_mhz": statistics.median(r["sm_mhz"] for r in rs),
                     "watts": statistics.median(r["watts"] for r in rs),
                     "reasons": ", ".join(sorted({r["reasons"] for r in rs})),
                     "samples": sum(r["samples"] for r in rs)})
    base = rows[0]
    for row in rows:
        row["speedup"] = base["us"] / row["us"]
        row["clock_ratio"] = row["sm_mhz"] / base["sm_mhz"]
        # the speedup if this kernel had run at the baseline's clock (time scales as 1 / clock
        # for work bound by the SM clock; a hypothesis for memory-bound work)
        row["speedup_at_vendor_clock"] = row["speedup"] / row["clock_ratio"]
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gemm_kernels.bench.clocks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", help="a counters case (repeatable; default: the first four)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--rep-ms", type=positive_int, default=2000, help="do_bench's rep (ms) per timing")
    parser.add_argument("--period-ms", type=positive_int, default=20, help="nvidia-smi's sampling period")
    parser.add_argument("--json", metavar="PATH", help="also write the rows there")
    args = parser.parse_args(argv)
    if args.list:
        for case in counters.CASES:
            print(f"{case.name}  ({', '.join(case.providers)})")
        return
    names = args.case or [c.name for c in counters.CASES[:4]]
    for name in names:
        counters.case_named(name)  # fail before timing anything
    if not runtime.on_gpu():
        raise SystemExit("clocks times kernels on a CUDA GPU; none here")
    rows = []
    for name in names:
        for row in measure(name, args.rounds, args.rep_ms, args.period_ms):
            rows.append(row)
            print(f"{row['case']} | {row['provider']}: {row['us']:.1f} us, {row['speedup']:.3f}x, "
                  f"SM {row['sm_mhz']:.0f} MHz, {row['watts']:.0f} W, reasons {row['reasons']}, "
                  f"{row['speedup_at_vendor_clock']:.3f}x at the baseline's clock", flush=True)
    if args.json:
        write_record(args.json, "clocks", argv, rows=rows,
                     timing=f"do_bench median, rep {args.rep_ms} ms, {args.rounds} rounds interleaved; "
                            f"nvidia-smi every {args.period_ms} ms")


if __name__ == "__main__":
    main()
