"""Each notebook run alone, as a learner runs it, with its wall time: ``make test-gpu-notebooks``.

    python -m gemm_kernels.bench.notebooks [--arch sm_86] [--memory-gb 8] [--jobs 1] [--json images/bench/notebook_times.json]

Every notebook is executed by nbmake in a process of its own, from a cold Triton cache (a fresh
``TRITON_CACHE_DIR``: what a learner's first run compiles) and with the notebooks' own defaults
(the small autotuning search).  By default one after another: a timing next to another notebook
measures both; ``--jobs N`` runs N at once for a pass/fail record.  ``--arch`` sets
``GEMM_KERNELS_ARCH`` (an H100 then takes a T4's, an Ampere or an Ada card's paths), ``--memory-gb``
caps the GPU memory (an 8 GB laptop card).  The record lists, per notebook, pass or fail and the
seconds, and the commit.
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


def run_bounded(command: list[str], *, env: dict, timeout: float, cwd=None) -> tuple[int | None, str]:
    """``command``'s (exit status, output), in a process group of its own: past ``timeout`` seconds
    the whole group is killed (nbmake's Jupyter kernel, xdist's workers), and the status is None."""
    import signal

    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=max(timeout, 1))
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
        return None, (out or "") + f"\n(stopped: did not finish in {timeout:.0f} s)"


def run_notebook(path: Path, env: dict, timeout: int) -> dict:
    """One notebook under nbmake in a fresh process and a fresh Triton cache: passed, seconds, tail.
    ``timeout``: seconds for the whole run (nbmake's per-cell limit is the same)."""
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as cache:
            status, out = run_bounded([sys.executable, "-m", "pytest", "--nbmake", f"--nbmake-timeout={timeout}", "-q",
                                       "-p", "no:cacheprovider", str(path)],
                                      env={**env, "TRITON_CACHE_DIR": cache}, timeout=timeout)
        passed, tail = status == 0, out[-1500:]
    except Exception as exc:  # noqa: BLE001  (a runner that cannot start is this notebook's failure, not the run's)
        passed, tail = False, f"could not run: {type(exc).__name__}: {exc}"
    return {"notebook": path.name, "passed": passed, "seconds": round(time.perf_counter() - start, 1),
            **({} if passed else {"tail": tail})}


def learner_env(arch: str | None = None, memory_gb: float | None = None) -> dict:
    """This process's environment as a learner's notebook gets it: the default autotuning, and
    ``arch`` / ``memory_gb`` (an older or smaller GPU) when given."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GEMM_KERNELS_AUTOTUNE", runtime.ARCH_ENV, runtime.MEMORY_GB_ENV)}
    if arch:
        env[runtime.ARCH_ENV] = arch
    if memory_gb is not None:
        env[runtime.MEMORY_GB_ENV] = f"{memory_gb:g}"  # 8, not 8.0
    return env


def mode_name(env: dict) -> str:
    """``GEMM_KERNELS_ARCH=sm_86, GEMM_KERNELS_MEMORY_GB=8``, or ``default``."""
    mode = ", ".join(f"{name}={env[name]}" for name in (runtime.ARCH_ENV, runtime.MEMORY_GB_ENV) if name in env)
    return mode or "default"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gemm_kernels.bench.notebooks", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", help="GEMM_KERNELS_ARCH for the runs, e.g. sm_86 (default: the GPU's own)")
    parser.add_argument("--memory-gb", type=float, help="cap each notebook's GPU memory (GEMM_KERNELS_MEMORY_GB), e.g. 8")
    parser.add_argument("--json", type=Path, help="write the record here")
    parser.add_argument("--only", nargs="*", default=None, help="notebook names (stems) to run; default all")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per notebook before it counts as failed")
    parser.add_argument("--jobs", type=int, default=1,
                        help="notebooks at once (default 1: a timing; more: pass/fail, each still alone in its process)")
    args = parser.parse_args(argv)
    if args.timeout < 1:
        parser.error("--timeout must be at least 1 second")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.arch:
        runtime.parse_arch(args.arch)  # a bad name fails here, not in every notebook
    if args.memory_gb is not None and args.memory_gb <= 0:
        parser.error("--memory-gb must be above 0")
    env = learner_env(args.arch, args.memory_gb)
    paths = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
    if args.only is not None:
        unknown = [n for n in args.only if not any(n in (p.stem, p.name) for p in paths)]
        if unknown:
            parser.error(f"--only: no notebook named {', '.join(unknown)} in {NOTEBOOKS_DIR}")
        paths = [p for p in paths if p.stem in args.only or p.name in args.only]
    timing = (f"wall time of one notebook alone under nbmake, cold Triton cache; budget {BUDGET_S} s" if args.jobs == 1
              else f"wall time under nbmake, cold Triton cache, {args.jobs} notebooks at once (each in its own "
                   "process): a pass/fail record, not a timing")
    results = []

    def done(r: dict) -> None:
        results.append(r)
        print(f"{r['notebook']:36} {'passed' if r['passed'] else 'FAILED':7} {r['seconds']:7.1f} s", flush=True)
        if not r["passed"]:
            print(r["tail"], flush=True)
        if args.json:  # after every notebook: a run stopped half way keeps what it measured
            from .report import current_commit, write_record

            write_record(args.json, "notebooks", argv, commit=current_commit(), mode=mode_name(env), timing=timing,
                         notebooks=sorted(results, key=lambda row: row["notebook"]))

    from concurrent.futures import ThreadPoolExecutor, as_completed

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for future in as_completed([pool.submit(run_notebook, path, env, args.timeout) for path in paths]):
            done(future.result())
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
