"""Notebook 09b's clock and cache experiments (GPU only):
``python tests/gpu_measuring_clocks.py OUT.json [--parts cold,lock,ramp,idle,dirty,ncu]``
(default ``lock,ramp,dirty,ncu``).

- ``cold``: first in a fresh process, the SM clock and power (NVML) from before the first CUDA work
  through 4096³ fp16 ``torch.matmul`` calls launched back to back, each between CUDA events;
- ``ramp``: a warmed-up 4096³ fp16 ``torch.matmul``, launched back to back with a CUDA event pair
  around each launch, right after busy work and after the GPU sat idle ``IDLE_S`` seconds; the SM
  clock is sampled meanwhile (NVML through pynvml when it imports, else ``nvidia-smi -lms``);
- ``idle``: the same after a busy second, once the GPU has sat idle until its clock fell (at most
  ``IDLE_MAX_S``), the clock's fall sampled on the way;
- ``dirty``: ``torch.matmul`` at n³ timed with events right after do_bench's flush (a 256 MiB
  ``zero_``: the L2 is left full of dirty lines), after a flush that reads the same buffer
  (clean lines), with no flush (the events then also time the host's launch), and with no flush
  behind a spin kernel (``torch.cuda._sleep``: the host runs ahead, no memory traffic);
  interleaved rounds, medians;
- ``lock``: one try of ``nvidia-smi -lgc`` (the GPU's clocks reset with ``-rgc`` at once when it works);
- ``ncu``: the installed ncu's version, its ``--help`` for ``--cache-control`` and
  ``--clock-control``, and one 1024³ GEMM profiled with ncu's defaults, ``--cache-control none``
  and ``--clock-control none`` (time, SM clock, DRAM bytes).
Nothing is left changed on the GPU.  Whole run: under two minutes on an H100.  The committed
records: ``images/bench/measuring_clocks.json`` (the default parts, written before ``dirty`` had
its spin control and its 256³ row) and ``measuring_clocks_idle.json`` (``--parts cold,idle,dirty``).
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
DIRTY_SIZES, DIRTY_ROUNDS, DIRTY_CALLS = (256, 512, 1024, 2048, 4096), 7, 60
SPIN_CYCLES = 180_000  # ~90 µs at 2 GHz: as long as the flush, with no memory traffic
IDLE_MAX_S, IDLE_MHZ = 40.0, 600  # how long to wait for the clock to fall, and below what it counts as fallen
DEFAULT_PARTS = "lock,ramp,dirty,ncu"
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
        self.samples, self.watts, self.source, self.index, self.period_ms = [], [], None, index, period_ms
        self._stop = threading.Event()

    def __enter__(self):
        try:
            import pynvml
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            self.source = "pynvml nvmlDeviceGetClockInfo(SM), nvmlDeviceGetPowerUsage"
            read = lambda: (pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),  # noqa: E731
                            pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3)
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
            mhz, watts = read()
            self.samples.append((time.time(), float(mhz)))
            self.watts.append(watts)
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


def _series(torch, a, b, calls, clock, t0):
    """``calls`` launches of ``a @ b`` back to back, each between two events: per-launch µs, each
    launch's start (µs after the first event), and the clock samples (s after ``t0``, MHz, W) meanwhile."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    origin = torch.cuda.Event(enable_timing=True)
    launched = time.time()
    origin.record()
    for start, end in events:
        start.record()
        torch.matmul(a, b)
        end.record()
    torch.cuda.synchronize()
    done = time.time()
    times = [s.elapsed_time(e) * 1e3 for s, e in events]
    return {"launched_s": launched - t0, "done_s": done - t0, "times_us": times,
            "start_offsets_us": [origin.elapsed_time(s) * 1e3 for s, _ in events],
            **summarize(times)}


def _timeline(clock, t0):
    watts = clock.watts or [None] * len(clock.samples)
    return [(round(t - t0, 4), mhz, w) for (t, mhz), w in zip(clock.samples, watts)]


def cold(torch):
    """The clock of a GPU no process used, through the first CUDA work of this one (run it first)."""
    with SmClock(period_ms=2) as clock:
        t0 = time.time()
        time.sleep(0.3)
        a = torch.randn(RAMP_N, RAMP_N, device="cuda", dtype=torch.float16)
        b = torch.randn(RAMP_N, RAMP_N, device="cuda", dtype=torch.float16)
        torch.cuda.synchronize()
        ready = time.time() - t0
        series = _series(torch, a, b, RAMP_CALLS, clock, t0)
        time.sleep(0.1)
    out = {"n": RAMP_N, "inputs_ready_s": ready, "clock_source": clock.source, **series,
           "clock": _timeline(clock, t0)}
    print(f"cold: SM clock first {out['clock'][:1]}, launches {[round(t) for t in out['times_us'][:8]]} µs, steady "
          f"{out['steady_median_us']:.1f} µs", flush=True)
    return out


def idle(torch):
    """A busy second, then idle until the SM clock stays under ``IDLE_MHZ`` for a second (or
    ``IDLE_MAX_S``), then the series: how far the clock falls, and what the first launches pay."""
    a = torch.randn(RAMP_N, RAMP_N, device="cuda", dtype=torch.float16)
    b = torch.randn(RAMP_N, RAMP_N, device="cuda", dtype=torch.float16)
    busy_until = time.perf_counter() + 1.0
    while time.perf_counter() < busy_until:
        for _ in range(20):
            torch.matmul(a, b)
        torch.cuda.synchronize()
    with SmClock(period_ms=50) as clock:
        t0 = time.time()
        fell = None
        while time.time() - t0 < IDLE_MAX_S:
            time.sleep(0.05)
            recent = [mhz for t, mhz in clock.samples if t > time.time() - 1.0]
            if fell is None and clock.samples and clock.samples[-1][1] < IDLE_MHZ:
                fell = clock.samples[-1][0] - t0
            if fell is not None and time.time() - t0 > fell + 1.0 and recent and max(recent) < IDLE_MHZ:
                break
        clock.period_ms = 2
        series = _series(torch, a, b, RAMP_CALLS, clock, t0)
        time.sleep(0.1)
    out = {"n": RAMP_N, "idle_max_s": IDLE_MAX_S, "idle_mhz": IDLE_MHZ, "clock_fell_after_s": fell,
           "clock_source": clock.source, **series, "clock": _timeline(clock, t0)}
    print(f"idle: clock under {IDLE_MHZ} MHz after {fell} s; launched at {out['launched_s']:.1f} s; launches "
          f"{[round(t) for t in out['times_us'][:8]]} µs, steady {out['steady_median_us']:.1f} µs", flush=True)
    return out


def dirty(torch):
    buf = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    flushes = {"write flush (do_bench's zero_)": buf.zero_, "read flush (sum)": lambda: buf.sum(),
               "no flush": lambda: None, "no flush, behind a spin": lambda: torch.cuda._sleep(SPIN_CYCLES)}
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
        row["read_over_spin"] = us["read flush (sum)"] / us["no flush, behind a spin"]
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


def main(path, parts):
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_measuring_clocks.py measures a CUDA GPU; none here")
    started = time.time()
    record = {"torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d", time.gmtime()), "script": "tests/gpu_measuring_clocks.py",
              "nvidia_smi": smi_query("name,driver_version,clocks.sm,clocks.max.sm,power.limit,persistence_mode")}
    steps = {"cold": lambda: cold(torch), "lock": lock, "ramp": lambda: ramp(torch), "idle": lambda: idle(torch),
             "dirty": lambda: dirty(torch), "ncu": lambda: ncu(time.time() + 40)}
    record["parts"] = [name for name in steps if name in parts]  # in this order: cold first
    for name in record["parts"]:
        step = steps[name]
        t = time.time()
        try:
            record[name] = step()
        except Exception as exc:  # one failed part leaves the others
            record[name] = {"error": f"{type(exc).__name__}: {exc}"[:800]}
            print(name, "failed:", record[name], flush=True)
        print(f"{name}: {time.time() - t:.1f} s", flush=True)
    record["device"] = torch.cuda.get_device_name()  # last: "cold" starts before this process touches the GPU
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(f"wrote {path} in {time.time() - started:.0f} s")


if __name__ == "__main__":
    args = sys.argv[1:]
    chosen = DEFAULT_PARTS
    if len(args) == 3 and args[1] == "--parts":
        args, chosen = args[:1], args[2]
    unknown = set(chosen.split(",")) - {"cold", "lock", "ramp", "idle", "dirty", "ncu"}
    if len(args) != 1 or unknown:
        raise SystemExit(__doc__.split("\n\n")[0] + (f"\nunknown parts: {sorted(unknown)}" if unknown else ""))
    main(args[0], chosen.split(","))
