"""What runs on a GPU before a change lands: ``make test-gpu-smoke``, one call of at most 10 minutes.

    python -m gemm_kernels.bench.smoke [--json images/bench/gpu_smoke.json] [--jobs 4] [--arch sm_86 --memory-gb 8]

Three parts, side by side (the GPU is shared; each part's processes are its own):

* every notebook alone under nbmake, in a process and a cold Triton cache of its own, with the
  notebooks' defaults (``bench.notebooks``), ``--jobs`` of them at a time: their seconds are wall
  times next to the other parts, a pass/fail record, not a timing (``make test-gpu-notebooks``
  times them one by one);
* the exercise checks' tests (``tests/test_check_verdicts.py``, one worker per notebook): each check's
  solution "correct" and a learner's mistake refused, the part only a GPU runs included; each
  verdict is kept in the record;
* every public launcher once with the default autotuning (``tests/test_launchers_once.py``).

The record: the commit, the GPU, each notebook's pass and seconds, each check's verdicts, each
test group's counts.  The exit status is 0 only when everything passed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import runtime
from . import notebooks as nb_runner

ROOT = Path(__file__).resolve().parents[2]
#: the whole smoke must end within this (one device call is 10 minutes)
BUDGET_S = 570
#: the test groups: name -> pytest arguments (run from the repository root)
GROUPS = {
    "checks": ["tests/test_check_verdicts.py", "-n", "4", "--dist", "loadgroup"],
    "launchers": ["tests/test_launchers_once.py"],
}


def _counts(junit: Path) -> dict:
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return {"passed": 0, "failed": 0, "errors": 1, "skipped": 0, "note": "no junit report"}
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname')}::{case.get('name')}" for case in root.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    return {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"],
            **({"failing": failed[:20]} if failed else {})}


def run_group(name: str, args: list[str], env: dict, timeout: float, workdir: Path) -> dict:
    junit = workdir / f"{name}.xml"
    start = time.perf_counter()
    status, out = nb_runner.run_bounded([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                         f"--junitxml={junit}", *args], env=env, timeout=timeout, cwd=ROOT)
    counts = _counts(junit)
    ok = status == 0 and counts["failed"] == 0 and counts["errors"] == 0 and counts["passed"] > 0
    return {"group": name, "passed_all": ok, "seconds": round(time.perf_counter() - start, 1), **counts,
            **({} if ok else {"tail": out[-2000:]})}


def _missing_verdicts(checks: dict) -> list[str]:
    """Checks of the course with no GPU verdict for their solution or their mistake (their GPU tests
    were skipped or never ran): the smoke then fails, whatever pytest counted."""
    import importlib

    titles = [e.title for e in importlib.import_module("gemm_kernels.lab.progress").exercises()]
    return [t for t in titles if not {"solution", "mistake"} <= set(checks.get(t, {}))]


def _verdicts(path: Path) -> dict:
    """{check: {"solution": ..., "mistake": ..., "gpu_branch solution": ..., ...}} from the tests' JSON lines."""
    out: dict = {}
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        key = row["answer"] if row.get("part", "check") == "check" else f"{row['part']} {row['answer']}"
        out.setdefault(row["check"], {"notebook": row["notebook"]})[key] = row["verdict"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gemm_kernels.bench.smoke", description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, help="write the record here")
    parser.add_argument("--jobs", type=int, default=4, help="notebooks run at once (default 4)")
    parser.add_argument("--arch", help="GEMM_KERNELS_ARCH for every part, e.g. sm_86 (default: the GPU's own)")
    parser.add_argument("--memory-gb", type=float, help="cap the GPU memory of every process (GEMM_KERNELS_MEMORY_GB)")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help=f"seconds for the whole run (default {BUDGET_S})")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.arch:
        runtime.parse_arch(args.arch)
    if args.memory_gb is not None and args.memory_gb <= 0:
        parser.error("--memory-gb must be above 0")
    if not runtime.on_gpu():
        print(f"make test-gpu-smoke needs a CUDA GPU: {runtime.describe()}", file=sys.stderr)
        return 2
    env = nb_runner.learner_env(args.arch, args.memory_gb)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    start = time.perf_counter()
    deadline = start + args.budget
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        verdicts_file = workdir / "verdicts.jsonl"
        group_env = {**env, "GEMM_KERNELS_VERDICTS": str(verdicts_file), "TRITON_CACHE_DIR": str(workdir / "cache")}
        paths = sorted(nb_runner.NOTEBOOKS_DIR.glob("*.ipynb"))
        with ThreadPoolExecutor(max_workers=len(GROUPS)) as pool:
            groups = {name: pool.submit(run_group, name, group_args, group_env, args.budget - 10, workdir)
                      for name, group_args in GROUPS.items()}
            def notebook(path):
                left = int(deadline - time.perf_counter() - 5)  # every notebook ends inside the budget
                if left < 20:
                    return {"notebook": path.name, "passed": False, "seconds": 0.0,
                            "tail": f"not run: the smoke's {args.budget:.0f} s were spent"}
                return nb_runner.run_notebook(path, env, left)

            with ThreadPoolExecutor(max_workers=args.jobs) as notebook_pool:
                book = list(notebook_pool.map(notebook, paths))
            for r in book:
                print(f"{r['notebook']:36} {'passed' if r['passed'] else 'FAILED':7} {r['seconds']:7.1f} s", flush=True)
                if not r["passed"]:
                    print(r["tail"], flush=True)
            tests = [f.result() for f in groups.values()]
        checks = _verdicts(verdicts_file)
    missing = _missing_verdicts(checks)
    if missing:
        print(f"no GPU verdict for the solution and the mistake of: {', '.join(missing)}", flush=True)
    for t in tests:
        print(f"{t['group']:12} {t['passed']} passed, {t['failed']} failed, {t['errors']} errors, "
              f"{t['skipped']} skipped in {t['seconds']} s", flush=True)
        if not t["passed_all"]:
            print(t.get("tail", ""), flush=True)
    passed = all(r["passed"] for r in book) and all(t["passed_all"] for t in tests) and not missing
    wall = round(time.perf_counter() - start, 1)
    print(f"smoke {'passed' if passed else 'FAILED'} in {wall} s", flush=True)
    if args.json:
        from .report import current_commit, write_record

        write_record(args.json, "smoke", argv, commit=current_commit(), mode=nb_runner.mode_name(env), passed=passed,
                     wall_seconds=wall,
                     timing=f"wall time; {args.jobs} notebooks at once beside the test groups, each notebook in its "
                            "own process and cold Triton cache (make test-gpu-notebooks times them one by one)",
                     notebooks=book, tests=tests, checks=checks, **({"missing_verdicts": missing} if missing else {}))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
