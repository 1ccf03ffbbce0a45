"""Each notebook run alone, as a learner runs it, with its wall time: ``make test-gpu-notebooks``.

    python -m gemm_kernels.bench.notebooks [--arch sm_86] [--memory-gb 8] [--json images/bench/notebook_times.json]

Every notebook is executed by nbmake in a process of its own, one after another (never two at
once: a timing next to another notebook measures both), from a cold Triton cache (a fresh
``TRITON_CACHE_DIR``: what a learner's first run compiles) and with the notebooks' own defaults
(the small autotuning search).  ``--arch`` sets ``GEMM_KERNELS_ARCH`` (an H100 then takes an
Ampere or Ada card's paths), ``--memory-gb`` caps the GPU memory (an 8 GB laptop card).  The record lists, per notebook, pass or fail and the seconds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import runtime

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
#: the longest a learner should wait for one notebook on an H100, cold cache (seconds)
BUDGET_S = 90


def run_notebook(path: Path, env: dict, timeout: int) -> dict:
    """One notebook under nbmake in a fresh process and a fresh Triton cache: passed, seconds, tail."""
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        try:
            out = subprocess.run([sys.executable, "-m", "pytest", "--nbmake", f"--nbmake-timeout={timeout}", "-q",
                                  "-p", "no:cacheprovider", str(path)], capture_output=True, text=True,
                                 env={**env, "TRITON_CACHE_DIR": cache}, timeout=timeout + 60)
            passed, tail = out.returncode == 0, (out.stdout + out.stderr)[-1500:]
        except subprocess.TimeoutExpired:
            passed, tail = False, f"did not finish in {timeout + 60} s"
        seconds = time.perf_counter() - start
    return {"notebook": path.name, "passed": passed, "seconds": round(seconds, 1),
            **({} if passed else {"tail": tail})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gemm_kernels.bench.notebooks", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", help="GEMM_KERNELS_ARCH for the runs, e.g. sm_86 (default: the GPU's own)")
    parser.add_argument("--memory-gb", type=float, help="cap each notebook's GPU memory (GEMM_KERNELS_MEMORY_GB), e.g. 8")
    parser.add_argument("--json", type=Path, help="write the record here")
    parser.add_argument("--only", nargs="*", default=None, help="notebook names (stems) to run; default all")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per notebook before it counts as failed")
    args = parser.parse_args(argv)
    if args.timeout < 1:
        parser.error("--timeout must be at least 1 second")
    if args.arch:
        runtime.parse_arch(args.arch)  # a bad name fails here, not in every notebook
    env = {k: v for k, v in os.environ.items()
           if k not in ("GEMM_KERNELS_AUTOTUNE", runtime.ARCH_ENV, runtime.MEMORY_GB_ENV)}
    if args.arch:
        env[runtime.ARCH_ENV] = args.arch
    if args.memory_gb is not None:
        if args.memory_gb <= 0:
            parser.error("--memory-gb must be above 0")
        env[runtime.MEMORY_GB_ENV] = f"{args.memory_gb:g}"  # 8, not 8.0
    mode = ", ".join(f"{name}={env[name]}" for name in (runtime.ARCH_ENV, runtime.MEMORY_GB_ENV) if name in env)
    mode = mode or "default"
    paths = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
    if args.only is not None:
        paths = [p for p in paths if p.stem in args.only or p.name in args.only]
    results = []
    for path in paths:
        results.append(run_notebook(path, env, args.timeout))
        r = results[-1]
        print(f"{r['notebook']:36} {'passed' if r['passed'] else 'FAILED':7} {r['seconds']:7.1f} s", flush=True)
        if not r["passed"]:
            print(r["tail"], flush=True)
        if args.json:  # after every notebook: a run stopped half way keeps what it measured
            from .report import write_record

            write_record(args.json, "notebooks", argv,
                         mode=mode,
                         timing=f"wall time of one notebook alone under nbmake, cold Triton cache; budget {BUDGET_S} s",
                         notebooks=results)
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
