"""Grade a class's notebooks without nbgrader: ``python -m gemm_kernels.lab.grade SUBMISSIONS/``.

SUBMISSIONS/ holds one notebook per student (``alice.ipynb``, ``alice_00_start_here.ipynb``) or
one folder per student (``alice/00_start_here.ipynb``, ...); the student's name is the file's or
the folder's.  A notebook is known by its name (``NN_slug``, anywhere in it) or, failing that, by
the check module its cells import.

Each notebook is graded in a fresh process (:mod:`gemm_kernels.lab._grade_worker`) with a memory
cap and a time limit per exercise: the notebook's first code cell, then each exercise's answer
cells (the learner's ``check_*(...)`` calls taken out) and the teacher's check, imported from
the package before any of the learner's code runs, on the answer by the name the notebook gives
it (:data:`ANSWERS`).  A learner's own ``check_*`` counts for nothing.  Cells that hang, crash
the process or run out of memory zero their exercise; the notebook is run again without them,
so the other exercises are still graded.  Checks run in exam mode (:mod:`gemm_kernels.lab.exam`)
unless ``--no-exam``: their messages carry no solutions.

Writes one row per student, notebook and exercise (status, points: 1 per correct exercise, the
check's message, trimmed) to ``--out`` (CSV) and ``--json``, and prints each student's total.

The worker runs the learner's code next to the checks, so this grades honest work and stops the
naive spoof (a redefined check); it is no sandbox against code written to attack the grader.
POSIX only (resource limits, process groups).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from . import exam
from .progress import ENV as PROGRESS_ENV
from .progress import NOTEBOOKS, _module_of

#: each notebook's exercises in order: (title, the name of the answer the notebook passes to
#: ``check_<title>``); the check is ``check_<title>`` of the notebook's module in
#: ``gemm_kernels.lab.exercises`` (tests/test_grade.py holds this to the modules and the notebooks)
ANSWERS = {
    "00_start_here": (("launch_stats", "launch_stats"), ("axpy", "axpy")),
    "01_pointer_arithmetic": (("block_offsets", "block_offsets"), ("block_mask", "block_mask"),
                              ("transpose", "transpose")),
    "02_naive_tiling": (("one_program", "one_program"), ("row_major_launch_order", "row_major_launch_order"),
                        ("my_matmul", "my_matmul")),
    "03_grouped_l2_ordering": (("column_grouped_tile", "column_grouped_tile"),
                               ("wave_block_fetches", "wave_block_fetches"),
                               ("column_grouped_triton", "column_grouped_triton")),
    "04_kernel_fusion": (("activation_pass_bytes", "activation_pass_bytes"), ("variant_reference", "variant_reference"),
                         ("gelu_tanh", "gelu_tanh")),
    "05_persistent_tma": (("waves_and_tail", "waves_and_tail"), ("persistent_tiles", "persistent_tiles"),
                          ("tma_view", "tma_view"), ("persistent_loop", "my_persistent_kernel")),
    "05b_stream_k": (("streamk_share", "streamk_share"), ("streamk_loop", "my_streamk_kernel")),
    "06_grouped_gemm": (("bounds_masks", "bounds_masks"), ("program_tiles", "program_tiles"),
                        ("find_tile", "find_tile")),
    "07_moe_grouped_mm": (("offs_from_counts", "offs_from_counts"), ("tiles_per_expert", "tiles_per_expert"),
                          ("padded_rows", "padded_rows"), ("expert_rows_kernel", "moe_tile_kernel")),
    "08_warp_specialization": (("ring_phases", "slot_and_phases"), ("consumer_mainloop", "consumer_mainloop")),
    "09_moe_training": (("wgrad_work", "wgrad_work"), ("wgrad_tile", "my_wgrad_tile")),
    "09b_measuring": (("do_bench_reading", "do_bench_reading"), ("timing_verdict", "timing_verdict")),
    "10_fp8": (("block_scales", "block_scales"), ("block_scaled_loop", "my_block_scaled_kernel"),
               ("promotion_interval", "promotion_interval")),
}

#: seconds one exercise (its cells and its check) may take; the set-up (imports, the first cell) as long again
TIMEOUT_S = 300
#: the worker's data segment, in MiB (torch and the checks take about 300, with a CUDA context about 1,400)
MEMORY_MB = 4096
#: seconds a worker that reported everything may take to exit
_EXIT_GRACE_S = 10


@dataclass
class Grade:
    """One row of the grades: one exercise of one student's notebook."""

    student: str
    notebook: str
    exercise: str
    status: str  # correct, wrong, not attempted, error, timeout, crashed, out of memory (structure only: 08 on a CPU)
    points: int
    message: str
    file: str


# ----------------------------------------------------------------------------- finding the submissions
def course_notebook(path: Path) -> str | None:
    """Which course notebook ``path`` is: by its name, else by the check module its cells import."""
    for name in sorted(NOTEBOOKS, key=len, reverse=True):  # 05b_stream_k before a shorter name in it
        if name in path.stem:
            return name
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    found = [nb for nb in NOTEBOOKS if f"gemm_kernels.lab.exercises.{_module_of(nb)} import" in text]
    return found[0] if len(found) == 1 else None


def submissions(root: Path) -> list[tuple[str, Path]]:
    """(student, notebook) pairs: a notebook in ``root`` is one student's (named by the file, less
    the course notebook's name), a folder holds one student's notebooks (named by the folder)."""
    found = []
    for entry in sorted(Path(root).iterdir()):
        if entry.is_dir() and not entry.name.startswith("."):
            found += [(entry.name, nb) for nb in sorted(entry.rglob("*.ipynb"))
                      if ".ipynb_checkpoints" not in nb.parts]
        elif entry.suffix == ".ipynb":
            notebook = course_notebook(entry)
            student = entry.stem.replace(notebook, "").strip("_-. ") if notebook else entry.stem
            found.append((student or entry.stem, entry))
    return found


# ----------------------------------------------------------------------------- one notebook
@dataclass
class _Run:
    results: dict  # title -> (status, message)
    finished: bool
    failed: str | None = None  # the exercise (None: the set-up) running when the worker failed
    status: str = ""
    message: str = ""


def _worker_env(exam_mode: bool) -> dict:
    env = dict(os.environ)
    env[exam.ENV] = "1" if exam_mode else "0"
    env[PROGRESS_ENV] = "off"
    package_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


def _last_line(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [line for line in lines if line]
    return f"; its last output: {lines[-1][:200]}" if lines else ""


def _run_worker(path: Path, notebook: str, check: list[str], skip: list[str], *, exam_mode: bool,
                timeout: float, memory_mb: int) -> _Run:
    """One run of the worker; what it reported, and how it ended."""
    spec = {"path": str(path.resolve()), "module": _module_of(notebook), "exercises": ANSWERS[notebook],
            "check": check, "skip": skip, "memory_mb": memory_mb}
    read_end, write_end = os.pipe()
    with tempfile.TemporaryDirectory(prefix="gk-grade-") as tmp:
        log = Path(tmp) / "output.txt"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "gemm_kernels.lab._grade_worker", str(write_end),
                                     json.dumps(spec)], cwd=tmp, env=_worker_env(exam_mode), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, pass_fds=(write_end,),
                                    start_new_session=True)
        os.close(write_end)
        run = _Run({}, False)
        current, buffer, killed = None, b"", False
        deadline = time.monotonic() + 2 * timeout
        try:
            while True:
                ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    killed = True
                    break
                chunk = os.read(read_end, 1 << 16)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    event = json.loads(line)
                    if "start" in event:
                        current, deadline = event["start"], time.monotonic() + timeout
                    elif "result" in event:
                        run.results[event["result"]] = (event["status"], event["message"])
                    elif "failed" in event:
                        run.failed, run.status, run.message = event["failed"], event["status"], event["message"]
                    elif event.get("done"):
                        run.finished = True
                        deadline = time.monotonic() + _EXIT_GRACE_S
            if not killed:
                try:
                    proc.wait(timeout=_EXIT_GRACE_S)
                except subprocess.TimeoutExpired:
                    killed = not run.finished
        finally:
            os.close(read_end)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the worker and what it started (the compile worker)
            proc.wait()
        if run.finished or run.status:
            return run
        run.failed = current
        if killed:
            run.status, run.message = "timeout", f"still running after {timeout:g} s: stopped"
        else:
            code = proc.returncode
            how = (f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}")
            if code == -signal.SIGKILL:
                how += " (by itself, or by the system when memory ran out)"
            run.status, run.message = "crashed", f"the notebook's process {how}{_last_line(log)}"
    return run


def grade_notebook(path: Path, notebook: str, *, exam_mode: bool = True, timeout: float = TIMEOUT_S,
                   memory_mb: int = MEMORY_MB) -> dict:
    """{title: (status, message)} for every exercise of ``notebook`` in the submission at ``path``.
    A run that hangs, crashes or runs out of memory in an exercise's cells gives that exercise its
    status; the notebook runs again without those cells for the exercises left."""
    titles = [title for title, _ in ANSWERS[notebook]]
    results: dict = {}
    skip: list[str] = []
    while len(results) < len(titles):
        run = _run_worker(path, notebook, [t for t in titles if t not in results], skip, exam_mode=exam_mode,
                          timeout=timeout, memory_mb=memory_mb)
        results.update(run.results)
        if run.finished:
            break
        if run.failed is None or run.failed in skip:  # the set-up, or nothing left to leave out
            for title in titles:
                results.setdefault(title, (run.status, run.message))
            break
        results[run.failed] = (run.status, run.message)
        skip.append(run.failed)
    return {title: results.get(title, ("error", "not graded")) for title in titles}


def grade_submission(student: str, path: Path, **options) -> list[Grade]:
    """The grades of one submitted notebook (one row with status "error" when it is no course notebook)."""
    notebook = course_notebook(path)
    if notebook is None:
        return [Grade(student, "", "", "error", 0, "not a notebook of the course (by its name or its imports)",
                      str(path))]
    graded = grade_notebook(path, notebook, **options)
    return [Grade(student, notebook, title, status, int(status == "correct"), message, str(path))
            for title, (status, message) in graded.items()]


def grade(root: Path, *, jobs: int = 1, **options) -> list[Grade]:
    """The grades of every submission in ``root`` (:func:`submissions`), ``jobs`` notebooks at a time."""
    found = submissions(Path(root))
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        graded = pool.map(lambda pair: grade_submission(*pair, **options), found)
        return [row for rows in graded for row in rows]


# ----------------------------------------------------------------------------- reports
FIELDS = ("student", "notebook", "exercise", "status", "points", "message", "file")


def totals(grades: list[Grade]) -> dict:
    """{student: {"points", "max", "notebooks": {notebook: [points, max]}}}."""
    out: dict = {}
    for row in grades:
        student = out.setdefault(row.student, {"points": 0, "max": 0, "notebooks": {}})
        per = student["notebooks"].setdefault(row.notebook or row.file, [0, 0])
        student["points"] += row.points
        per[0] += row.points
        if row.exercise:
            student["max"] += 1
            per[1] += 1
    return out


def summary(grades: list[Grade]) -> str:
    """One line per student: ``alice: 4 of 5 points (00_start_here 2/2, 01_pointer_arithmetic 2/3)``."""
    lines = []
    for student, total in totals(grades).items():
        parts = ", ".join(f"{nb} {p}/{m}" for nb, (p, m) in total["notebooks"].items())
        lines.append(f"{student}: {total['points']} of {total['max']} points ({parts})")
    return "\n".join(lines)


def write_csv(grades: list[Grade], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(asdict(row) for row in grades)


def write_json(grades: list[Grade], path: Path, exam_mode: bool) -> None:
    data = {"exam": exam_mode, "grades": [asdict(row) for row in grades], "students": totals(grades)}
    Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Grade students' notebooks with the package's checks, each "
                                     "notebook in a fresh process with a time limit and a memory cap.")
    parser.add_argument("submissions", type=Path, help="a folder: one notebook or one folder per student")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"), help="the CSV of grades (grades.csv)")
    parser.add_argument("--json", type=Path, help="also write the grades and totals as JSON here")
    parser.add_argument("--exam", action=argparse.BooleanOptionalAction, default=True,
                        help="run the checks in exam mode: messages without solutions (default: on)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S,
                        help=f"seconds per exercise, cells and check (default {TIMEOUT_S})")
    parser.add_argument("--memory-mb", type=int, default=MEMORY_MB,
                        help=f"memory cap of each notebook's process in MiB, 0 for none (default {MEMORY_MB})")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (default 1)")
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"{args.submissions} is not a folder")
    grades = grade(args.submissions, jobs=args.jobs, exam_mode=args.exam, timeout=args.timeout,
                   memory_mb=args.memory_mb)
    write_csv(grades, args.out)
    if args.json:
        write_json(grades, args.json, args.exam)
    print(summary(grades) or f"no notebooks in {args.submissions}")
    print(f"grades: {args.out}" + (f", {args.json}" if args.json else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
