"""Notebook 09b's clock and cache experiments (GPU only): ``python tests/gpu_measuring_clocks.py OUT.json``.

- ``ramp``: a warmed-up 4096³ fp16 ``torch.matmul``, launched back to back with a CUDA event pair
  around each launch, right after busy work and after the GPU sat idle ``IDLE_S`` seconds; the SM
  clock is sampled meanwhile (NVML through pynvml when it imports, else ``nvidia-smi -lms``);
- ``dirty``: ``torch.matmul`` at n³ timed with events right after do_bench's flush (a 256 MiB
  ``zero_``: the L2 is left full of dirty lines), after a flush that reads the same buffer
  (clean lines), and with no flush (inputs warm in L2); interleaved rounds, medians;
- ``lock``: one try of ``nvidia-smi -lgc`` (the GPU's clocks reset with ``-rgc`` at once when it works);
- ``ncu``: the installed ncu's version, its ``--help`` for ``--cache-control`` and
  ``--clock-control``, and one 1024³ GEMM profiled with ncu's defaults, ``--cache-control none``
  and ``--clock-control none`` (time, SM clock, DRAM bytes).
Nothing is left changed on the GPU.  Whole run: under two minutes on an H100.
"""

import json
import os
import re
import signal
import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime

IDLE_S = (0.0, 2.0, 5.0)
RAMP_N, RAMP_CALLS = 4096, 1200
DIRTY_SIZES, DIRTY_ROUNDS, DIRTY_CALLS = (512, 1024, 2048, 4096), 5, 40
FLUSH_BYTES = 256 * 1024 * 1024  # triton.testing.do_bench's buffer (get_empty_cache_for_benchmark)
LOCK_MHZ = 1755
NCU_METRICS = ("gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second", "dram__bytes_read.sum",
               "dram__bytes_write.sum")
NCU_WORKER = ("import torch; a = torch.randn(1024, 1024, device='cuda', dtype=torch.float16); "
              "b = torch.randn(1024, 1024, device='cuda', dtype=torch.float16); "
              "[torch.matmul(a, b) for _ in range(20)]; torch.cuda.synchronize(); "
              "torch.cuda.profiler.start(); torch.matmul(a, b); torch.cuda.synchronize(); torch.cuda.profiler.stop()")
NCU_RUNS = {"defaults": [], "cache-control none": ["--cache-control", "none"],
            "clock-control none": ["--clock-control", "none"]}


def summarize(times_us, head=10):
    """The first ``head`` launches against the steady state (the last half's median)."""
    steady = statistics.median(times_us[len(times_us) // 2:])
    first = times_us[:head]
    return {"first_us": first, "first_median_us": statistics.median(first),
            "first3_mean_us": statistics.fmean(first[:3]), "steady_median_us": steady,
            "first_over_steady": statistics.median(first) / steady, "slowest_us": max(times_us),
            "launches_over_5pct_slow": sum(t > 1.05 * steady for t in times_us)}


class SmClock:
    """Background samples (host seconds, SM MHz): NVML when pynvml imports, else ``nvidia-smi -lms``."""

    def __init__(self, index=0, period_ms=5):
        self.samples, self.source, self.index, self.period_ms = [], None, index, period_ms
        self._stop = threading.Event()

    def __enter__(self):
        try:
            import pynvml
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            self.source = "pynvml nvmlDeviceGetClockInfo(SM)"
            read = lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)  # noqa: E731
            self._thread = threading.Thread(target=self._poll, args=(read,), daemon=True)
        except Exception as exc:  # no pynvml: nvidia-smi's own loop, its timestamps
            self.source = f"nvidia-smi -lms {self.period_ms} (pynvml: {type(exc).__name__})"
            self._proc = subprocess.Popen(["nvidia-smi", "-i", str(self.index), "--query-gpu=timestamp,clocks.sm",
                                           "--format=csv,noheader,nounits", f"-lms={self.period_ms}"],
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self._thread = threading.Thread(target=self._read_smi, daemon=True)
        self._thread.start()
        return self

    def _poll(self, read):
        while not self._stop.is_set():
            self.samples.append((time.time(), float(read())))
            time.sleep(self.period_ms / 1e3)

    def _read_smi(self):
        for line in self._proc.stdout:
            try:
                stamp, mhz = (p.strip() for p in line.split(","))
                self.samples.append((datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp(), float(mhz)))
            except ValueError:
                continue

    def __exit__(self, *exc):
        self._stop.set()
        if hasattr(self, "_proc"):
            self._proc.terminate()
            self._proc.wait(timeout=10)
        self._thread.join(timeout=10)


def ramp(torch):
    a = torch.randn(RAMP_N, RAMP_N, device="cuda", dtype=torch.float16)
    b = torch.randn(RAMP_N, RAMP_N, device="cuda", dtype=torch.float16)
    series = []
    for idle in IDLE_S:
        busy_until = time.perf_counter() + 1.0  # the same busy second before every series
        while time.perf_counter() < busy_until:
            for _ in range(20):
                torch.matmul(a, b)
            torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(RAMP_CALLS)]
        origin = torch.cuda.Event(enable_timing=True)
        with SmClock() as clock:
            time.sleep(idle)
            t0 = time.time()
            origin.record()
            for start, end in events:
                start.record()
                torch.matmul(a, b)
                end.record()
            torch.cuda.synchronize()
            t1 = time.time()
            time.sleep(0.05)
        times = [s.elapsed_time(e) * 1e3 for s, e in events]
        during = [mhz for t, mhz in clock.samples if t0 <= t <= t1]
        before = [mhz for t, mhz in clock.samples if t < t0 - 0.05]
        row = {"idle_s": idle, "n": RAMP_N, "launches": RAMP_CALLS, "wall_ms": (t1 - t0) * 1e3,
               "start_offsets_us": [origin.elapsed_time(s) * 1e3 for s, _ in events[:40]],
               "times_us": times, "clock_source": clock.source,
               "sm_mhz_idle": statistics.median(before) if before else None,
               "sm_mhz_during": during, "sm_mhz_during_median": statistics.median(during) if during else None,
               **summarize(times)}
        print(f"ramp idle {idle:.0f} s: first 10 median {row['first_median_us']:.1f} µs, steady "
              f"{row['steady_median_us']:.1f} µs ({row['first_over_steady']:.3f}x); SM idle {row['sm_mhz_idle']} "
              f"MHz, during {during[:8]} ... ({clock.source})", flush=True)
        series.append(row)
    return series


def dirty(torch):
    buf = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    flushes = {"write flush (do_bench's zero_)": buf.zero_, "read flush (sum)": lambda: buf.sum(),
               "no flush": lambda: None}
    rows = []
    for n in DIRTY_SIZES:
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        torch.matmul(a, b)
        per_round = {name: [] for name in flushes}
        for _ in range(DIRTY_ROUNDS):
            for name, flush in flushes.items():
                pairs = []
                for _ in range(DIRTY_CALLS):
                    flush()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    torch.matmul(a, b)
                    end.record()
                    pairs.append((start, end))
                torch.cuda.synchronize()
                per_round[name].append(statistics.median(s.elapsed_time(e) * 1e3 for s, e in pairs))
        row = {"n": n, "rounds": DIRTY_ROUNDS, "calls_per_round": DIRTY_CALLS, "round_medians_us": per_round,
               "us": {name: statistics.median(v) for name, v in per_round.items()}}
        us = row["us"]
        row["write_over_read"] = us["write flush (do_bench's zero_)"] / us["read flush (sum)"]
        row["read_over_none"] = us["read flush (sum)"] / us["no flush"]
        print(f"dirty {n}^3: " + ", ".join(f"{k} {v:.2f} µs" for k, v in us.items())
              + f"; write/read {row['write_over_read']:.3f}", flush=True)
        rows.append(row)
    return {"flush_bytes": FLUSH_BYTES, "rows": rows}


def run(cmd, timeout=30):
    """``cmd``'s exit status and output; past ``timeout`` its whole process group is killed."""
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as exc:
        return {"cmd": " ".join(cmd), "rc": None, "error": f"{type(exc).__name__}: {exc}"[:500]}
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return {"cmd": " ".join(cmd), "rc": None, "timed_out": True, "stdout": out, "stderr": err[-2000:]}
    return {"cmd": " ".join(cmd), "rc": p.returncode, "stdout": out.strip(), "stderr": err.strip()[-2000:]}


def smi_query(fields):
    return run(["nvidia-smi", "-i", "0", f"--query-gpu={fields}", "--format=csv"])


def lock():
    """One try of ``nvidia-smi -lgc``; if it took, the clocks are reset at once (and checked)."""
    before = smi_query("clocks.sm,clocks.max.sm,clocks.default_applications.graphics,clocks.applications.graphics")
    tried = run(["nvidia-smi", "-i", "0", "-lgc", f"{LOCK_MHZ},{LOCK_MHZ}"])
    out = {"before": before, "lock": tried, "locked": tried.get("rc") == 0}
    if out["locked"]:
        out["reset"] = run(["nvidia-smi", "-i", "0", "-rgc"])
    out["after"] = smi_query("clocks.sm,clocks.max.sm,clocks.applications.graphics")
    print("lock:", json.dumps(out)[:1200], flush=True)
    return out


def ncu(deadline):
    from gemm_kernels.bench.l2 import find_ncu, ncu_metric_rows
    from gemm_kernels.results import metric_value

    path = find_ncu()
    if path is None:
        return {"error": "no ncu"}
    version = run([path, "--version"])
    help_text = run([path, "--help"]).get("stdout", "")
    options = {}
    for option in ("cache-control", "clock-control"):  # the option's paragraph in this ncu's own --help
        m = re.search(rf"--{option}.*?(?=\n  --|\Z)", help_text, re.S)
        options[option] = m.group(0) if m else None
    result = {"ncu": path, "version": version.get("stdout"), "help": options, "runs": {}}
    for name, flags in NCU_RUNS.items():
        if time.time() > deadline:
            result["runs"][name] = {"skipped": "time budget"}
            continue
        cmd = [path, *flags, "--profile-from-start", "off", "--metrics", ",".join(NCU_METRICS), "--csv",
               "--print-units", "base", sys.executable, "-c", NCU_WORKER]
        proc = run(cmd, timeout=45)
        if proc.get("timed_out"):  # a killed ncu may leave its clock lock behind: undo it
            result["runs"][name] = {"flags": flags, "timed_out": True, "reset": run([path, "--clock-control", "reset"])}
            continue
        kernels = {}
        for row in ncu_metric_rows(proc.get("stdout", "")):
            kernels.setdefault(row.get("Kernel Name", "?"), {})[row["Metric Name"]] = metric_value(row)
        result["runs"][name] = {"flags": flags, "kernels": kernels, "rc": proc.get("rc"),
                                "stderr_tail": proc.get("stderr", "")[-400:]}
        print(f"ncu {name}: {json.dumps(kernels)[:600]}", flush=True)
    return result


def main(path):
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_measuring_clocks.py measures a CUDA GPU; none here")
    started = time.time()
    record = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d", time.gmtime()), "script": "tests/gpu_measuring_clocks.py",
              "nvidia_smi": smi_query("name,driver_version,clocks.sm,clocks.max.sm,power.limit,persistence_mode")}
    for name, step in (("lock", lock), ("ramp", lambda: ramp(torch)), ("dirty", lambda: dirty(torch)),
                       ("ncu", lambda: ncu(started + 70))):
        t = time.time()
        try:
            record[name] = step()
        except Exception as exc:  # one failed part leaves the others
            record[name] = {"error": f"{type(exc).__name__}: {exc}"[:800]}
            print(name, "failed:", record[name], flush=True)
        print(f"{name}: {time.time() - t:.1f} s", flush=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(f"wrote {path} in {time.time() - started:.0f} s")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("\n\n")[0])
    main(sys.argv[1])
