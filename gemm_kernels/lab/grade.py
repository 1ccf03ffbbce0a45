"""Grade a class's notebooks without nbgrader: ``python -m gemm_kernels.lab.grade SUBMISSIONS/``.

SUBMISSIONS/ holds one notebook per student (``alice.ipynb``, ``alice_00_start_here.ipynb``) or
one folder per student (``alice/00_start_here.ipynb``, ...); the student's name is the file's or
the folder's.  A notebook is known by its name (``NN_slug``, anywhere in it) or, failing that, by
the check module its cells import.  One copy per student and notebook is graded
(:func:`gemm_kernels.lab.gradebook.pick_copies`: ``-Copy1`` beside the original).

A judge (:mod:`gemm_kernels.lab._grade_judge`, a process of its own for each student, taking
their notebooks in turn; ``--jobs`` at a time) runs each notebook's cells in another process (every cell in order, each
with a time limit, a memory cap, in a sandbox that shows it only what it needs: :mod:`._sandbox`;
no sandbox, no grading, unless ``--no-sandbox``) and decides every verdict
itself: plain answers are called through a pipe and return plain data, kernel answers are rebuilt
from their source and run by the judge.  Nothing the notebook patches or writes reaches a
verdict; a hang, a crash or silence is 0 for that exercise.  Checks run in exam mode
(:mod:`gemm_kernels.lab.exam`) unless ``--no-exam``.

Writes one row per student, notebook and exercise (status, points, the check's message, trimmed)
to ``--out``, the gradebook (one row per student, :mod:`gemm_kernels.lab.gradebook`) to
``--gradebook``, optionally Canvas's import (``--canvas``) and JSON (``--json``), and prints each
student's total and how long grading took.  Every output is checked before grading starts
(:func:`output_problem`: never an input, another output or a file in SUBMISSIONS/) and written whole
or not at all.  ``notebooks/TEACHING.md`` says what the judge resists and what it does not.  POSIX
only (resource limits, process groups).
"""

from __future__ import annotations

import argparse
import contextlib
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .. import _files
from . import exam
from ._grade_judge import NOTEBOOK_TIMEOUT_S, cells_limit_s
from .gradebook import ANSWERS  # each notebook's exercises (defined there: the gradebook needs them too)
from .gradebook import NOTEBOOK_LIMIT
from .progress import ENV as PROGRESS_ENV
from .progress import NOTEBOOKS, _module_of

#: the exercises whose answer is, launches or is called in ``@triton.jit`` code: the judge rebuilds
#: them from their source (:mod:`._rebuild`); the others are plain Python, called in the notebook's
#: own process (tests/test_grade.py holds this to the check modules)
KERNEL_KINDS = {"axpy": "launcher", "transpose": "launcher", "my_matmul": "launcher",
                "column_grouped_triton": "jit", "gelu_tanh": "jit", "persistent_loop": "kernel",
                "streamk_loop": "kernel", "bounds_masks": "jit", "find_tile": "jit", "expert_rows_kernel": "kernel",
                "consumer_mainloop": "jit", "wgrad_tile": "jit", "block_scaled_loop": "kernel"}

#: seconds one exercise's check may take (the notebook's cells have limits of their own)
TIMEOUT_S = 300
#: seconds one cell of the notebook may run (a top-level endless loop costs this, once)
CELL_TIMEOUT_S = 30
#: MiB of data segment a notebook's process (and its judge) may take beyond its start-up, made before
#: the cap is set: Python and torch (about 220 MiB with a CPU build, 1,470 with the CUDA build and context)
MEMORY_MB = 4096
#: seconds a worker that reported everything may take to exit
_EXIT_GRACE_S = 10


@dataclass
class Grade:
    """One row of the grades: one exercise of one student's notebook."""

    student: str
    notebook: str
    exercise: str
    status: str  # correct (1 point); wrong, not attempted, error, timeout, crashed, out of memory, not verified (0)
    points: float  # the exercise's points (1, or its weight in the teacher's config) when correct, else 0
    message: str
    file: str


# ----------------------------------------------------------------------------- finding the submissions
def course_notebook(path: Path) -> str | None:
    """Which course notebook ``path`` is: by its name, else by the check module its cells import."""
    for name in sorted(NOTEBOOKS, key=len, reverse=True):  # 05b_stream_k before a shorter name in it
        if name in path.stem:
            return name
    try:
        text = _files.read_text(path, NOTEBOOK_LIMIT)  # a FIFO in the submissions: refused, not waited on
    except (OSError, UnicodeDecodeError):
        return None
    found = [nb for nb in NOTEBOOKS if f"gemm_kernels.lab.exercises.{_module_of(nb)} import" in text]
    return found[0] if len(found) == 1 else None


#: the message of a submission that is no course notebook
NOT_COURSE = "not a notebook of the course (by its name or its imports)"


def _link_on_the_way(path: Path, root: Path) -> Path | None:
    """The first symbolic link from ``root`` down to ``path`` (the file itself included), or None."""
    place = Path(root)
    for part in Path(path).relative_to(root).parts:
        place = place / part
        if place.is_symlink():
            return place
    return None


def identify(path: Path, root: Path | None = None) -> tuple[str | None, str]:
    """(the course notebook ``path`` is, ""), or (None, why it cannot be graded): no regular file
    (a FIFO, a device, a folder named .ipynb: never opened), a symbolic link below ``root`` (a link to
    the solved notebook, or to a classmate's, would be graded as this student's work), or no course
    notebook."""
    link = _link_on_the_way(path, root) if root is not None else None
    if link is not None:
        return None, (f"{link.name} is a symbolic link: only files handed in, inside the submissions folder, "
                      "are graded")
    try:
        _files.is_regular_file(path, "a notebook")
    except OSError as exc:
        return None, str(exc)
    notebook = course_notebook(path)
    return notebook, "" if notebook else NOT_COURSE


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
    failed: str | None = None  # the exercise (None: the set-up) running when the judge failed
    status: str = ""
    message: str = ""
    sandbox: bool = False
    cell_errors: list = field(default_factory=list)


class _Deadline:
    """When the judge is stopped: ``timeout`` seconds past an exercise's start (or the last notebook's
    end), more while the notebook's cells run (``cell_timeout`` past the last cell's start), and never
    later than ``timeout`` plus what the cells may take in all (:func:`._grade_judge.cells_limit_s`)
    past the exercise's start, however many cells the judge reports (the notebook's process writes
    what it forwards)."""

    def __init__(self, timeout: float, cell_timeout: float, notebook_timeout: float, now: float):
        self.timeout, self.cell_timeout, self.notebook_timeout = timeout, cell_timeout, notebook_timeout
        self.start(now)

    def start(self, now: float) -> None:
        self.since, self.at = now, now + self.timeout
        self.bound = self.at + cells_limit_s(self.notebook_timeout) + _EXIT_GRACE_S
        self.cells = False

    def cell(self, now: float) -> None:
        self.at, self.cells = min(self.bound, now + self.cell_timeout + self.timeout), True

    def why(self) -> str:
        """What ran past its time, once it is passed."""
        if self.cells and self.at >= self.bound:
            return (f"the notebook's cells and its check ran past {self.bound - self.since:g} s (its "
                    f"--notebook-timeout of {self.notebook_timeout:g} s, start-up and --timeout): stopped")
        return f"its check was still running after {self.timeout:g} s: stopped"


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


def _event(line: bytes, notebooks: int) -> dict | None:
    """One event of the judge's report, or None where the line is not one (not JSON, a notebook index
    out of range, fields of the wrong type)."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict) or type(event.get("notebook")) is not int or not 0 <= event["notebook"] < notebooks:
        return None
    if "result" in event and not all(isinstance(event.get(k), str) for k in ("result", "status", "message")):
        return None
    if "start" in event and not (event["start"] is None or isinstance(event["start"], str)):
        return None
    return event


def _run_judge(items: list, *, exam_mode: bool, timeout: float, memory_mb: int, cell_timeout: float = CELL_TIMEOUT_S,
               hide=(), sandbox: bool = True, notebook_timeout: float = NOTEBOOK_TIMEOUT_S) -> list[_Run]:
    """One judge (:mod:`._grade_judge`) for ``items``, (path, course notebook, exercises to check)
    triples, in turn; what it reported of each, and how it ended (the notebook it was on when it
    failed has ``status``; those after it are untouched).  ``sandbox=False`` runs the notebooks
    unsandboxed; with True, where no sandbox can be built, nothing is graded (each exercise says why)."""
    notebooks = [{"path": str(Path(path).resolve()), "module": _module_of(notebook), "check": list(check),
                  "exercises": [(t, a, KERNEL_KINDS.get(t, "plain")) for t, a in ANSWERS[notebook]]}
                 for path, notebook, check in items]
    spec = {"notebooks": notebooks, "memory_mb": memory_mb, "judge_memory_mb": memory_mb,
            "cell_timeout": cell_timeout, "notebook_timeout": notebook_timeout,
            "hide": [str(Path(h).resolve()) for h in hide], "sandbox": bool(sandbox)}
    runs = [_Run({}, False) for _ in items]
    read_end, write_end = os.pipe()
    with tempfile.TemporaryDirectory(prefix="gk-grade-") as tmp:
        log = Path(tmp) / "output.txt"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "gemm_kernels.lab._grade_judge", str(write_end),
                                     json.dumps(spec)], cwd=tmp, env=_worker_env(exam_mode), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, pass_fds=(write_end,),
                                    start_new_session=True)
        os.close(write_end)
        where, current, buffer, killed, garbled = 0, None, b"", False, False
        deadline = _Deadline(timeout, cell_timeout, notebook_timeout, time.monotonic())
        try:
            while True:
                ready, _, _ = select.select([read_end], [], [], max(0.0, deadline.at - time.monotonic()))
                if not ready:
                    killed = True
                    break
                chunk = os.read(read_end, 1 << 16)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    event = _event(line, len(runs))
                    if event is None:  # not the judge's own report: what wrote it is not to be trusted
                        garbled = True
                        break
                    where, run = event["notebook"], runs[event["notebook"]]
                    if "start" in event:
                        current = event["start"]
                        deadline.start(time.monotonic())
                    elif "cell" in event:  # the notebook's cells run, each with a limit of its own
                        deadline.cell(time.monotonic())
                    elif "result" in event:
                        run.results[event["result"]] = (event["status"], event["message"])
                    elif event.get("done"):
                        run.finished, run.sandbox = True, bool(event.get("sandbox"))
                        run.cell_errors = list(event.get("cell_errors") or [])
                        deadline.start(time.monotonic())
                if garbled:
                    break
            if not killed and not garbled:
                try:
                    proc.wait(timeout=_EXIT_GRACE_S)
                except subprocess.TimeoutExpired:
                    killed = not all(run.finished for run in runs)
        finally:
            os.close(read_end)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the judge and what it started
            proc.wait()
        if all(run.finished for run in runs):
            return runs
        run = runs[where] if not runs[where].finished else next(r for r in runs if not r.finished)
        run.failed = current if run is runs[where] else None
        if garbled:
            run.status, run.message = "error", ("the judge's report held a line that is no verdict (what the answer "
                                                "ran reached the judge?): this notebook is not graded")
        elif killed:
            run.status, run.message = "timeout", deadline.why()
        else:
            code = proc.returncode
            how = (f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}")
            run.status, run.message = "error", f"the judge's process {how}{_last_line(log)}"
    return runs


def grade_notebooks(items: list, *, exam_mode: bool = True, timeout: float = TIMEOUT_S, memory_mb: int = MEMORY_MB,
                    cell_timeout: float = CELL_TIMEOUT_S, hide=(), sandbox: bool = True,
                    notebook_timeout: float = NOTEBOOK_TIMEOUT_S) -> list[dict]:
    """{title: (status, message)} for every exercise of each (path, course notebook) pair, judged
    in turn by one judge.  A check that hangs or brings its judge down gives its exercise that
    status; a new judge goes on without it."""
    titles = [[title for title, _ in ANSWERS[notebook]] for _, notebook in items]
    results: list[dict] = [{} for _ in items]
    skip: list[list] = [[] for _ in items]
    pending = list(range(len(items)))
    while pending:
        batch = [(items[i][0], items[i][1], [t for t in titles[i] if t not in results[i] and t not in skip[i]])
                 for i in pending]
        runs = _run_judge(batch, exam_mode=exam_mode, timeout=timeout, memory_mb=memory_mb,
                          cell_timeout=cell_timeout, hide=hide, sandbox=sandbox, notebook_timeout=notebook_timeout)
        left = []
        for i, run in zip(pending, runs):
            results[i].update(run.results)
            if run.finished:
                continue
            if run.status:  # the notebook the judge failed on
                if run.failed is None or run.failed in skip[i]:  # its set-up, or nothing left to leave out
                    for title in titles[i]:
                        results[i].setdefault(title, (run.status, run.message))
                    continue
                results[i][run.failed] = (run.status, run.message)
                skip[i].append(run.failed)
            if len(results[i]) < len(titles[i]):
                left.append(i)
        pending = left
    return [{title: results[i].get(title, ("error", "not graded")) for title in titles[i]} for i in range(len(items))]


def grade_notebook(path: Path, notebook: str, **options) -> dict:
    """{title: (status, message)} for every exercise of ``notebook`` in the submission at ``path``
    (:func:`grade_notebooks`)."""
    return grade_notebooks([(path, notebook)], **options)[0]


def grade_submission(student: str, path: Path, **options) -> list[Grade]:
    """The grades of one submitted notebook (one row with status "error" when it is no course notebook)."""
    notebook, why = identify(path)
    if notebook is None:
        return [Grade(student, "", "", "error", 0, why, str(path))]
    graded = grade_notebook(path, notebook, **options)
    return [Grade(student, notebook, title, status, int(status == "correct"), message, str(path))
            for title, (status, message) in graded.items()]


def grade_class(root: Path, *, jobs: int = 1, **options) -> tuple[list[Grade], list]:
    """(grades, copies left out) of every submission in ``root`` (:func:`submissions`), ``jobs``
    notebooks at a time; of a notebook handed in twice by one student, one copy is graded
    (:func:`gemm_kernels.lab.gradebook.pick_copies` says which)."""
    from .gradebook import pick_copies

    found, why = [], {}
    for student, path in submissions(Path(root)):
        notebook, why[path] = identify(path, Path(root))
        found.append((student, path, notebook))
    kept, dropped = pick_copies([f for f in found if f[2] is not None])
    kept += [f for f in found if f[2] is None]
    kept.sort(key=lambda f: (f[0], str(f[1])))
    options.setdefault("hide", [root])  # the class's notebooks, out of every notebook's sight (the sandbox)
    # a judge of its own for each student (their notebooks in turn), ``jobs`` at a time: whatever one
    # student's rebuilt kernels leave in a judge's process dies with it, before anyone else is judged
    shares = [[f for f in kept if f[0] == student] for student in dict.fromkeys(f[0] for f in kept)]
    jobs = max(1, min(jobs, len(shares) or 1))

    def judged(share):
        verdicts = grade_notebooks([(path, notebook) for _, path, notebook in share if notebook], **options)
        rows, graded = [], iter(verdicts)
        for student, path, notebook in share:
            if notebook is None:
                rows.append(Grade(student, "", "", "error", 0, why[path], str(path)))
                continue
            rows += [Grade(student, notebook, title, status, int(status == "correct"), message, str(path))
                     for title, (status, message) in next(graded).items()]
        return rows

    with ThreadPoolExecutor(jobs) as pool:
        rows = [row for share in pool.map(judged, shares) for row in share]
    order = {(student, str(path)): k for k, (student, path, _) in enumerate(kept)}
    rows.sort(key=lambda row: order[(row.student, row.file)])
    return rows, dropped


def grade(root: Path, *, jobs: int = 1, **options) -> list[Grade]:
    """The grades of every submission in ``root`` (:func:`grade_class`)."""
    return grade_class(root, jobs=jobs, **options)[0]


# ----------------------------------------------------------------------------- reports
FIELDS = ("student", "notebook", "exercise", "status", "points", "message", "file")


def totals(grades: list[Grade], config: dict | None = None) -> dict:
    """{student: {"points", "max", "notebooks": {notebook: [points, max]}}}; each exercise's maximum
    is its weight in the teacher's ``config`` (1 without one), as :func:`weighted` gives its points."""
    from .gradebook import _number, weight

    out: dict = {}
    for row in grades:
        student = out.setdefault(row.student, {"points": 0, "max": 0, "notebooks": {}})
        per = student["notebooks"].setdefault(row.notebook or row.file, [0, 0])
        student["points"] += row.points
        per[0] += row.points
        if row.exercise:
            most = _number(weight(config, row.notebook, row.exercise)) if config else 1
            student["max"] += most
            per[1] += most
    return out


def summary(grades: list[Grade]) -> str:
    """One line per student: ``alice: 4 of 5 points (00_start_here 2/2, 01_pointer_arithmetic 2/3)``."""
    lines = []
    for student, total in totals(grades).items():
        parts = ", ".join(f"{nb} {p}/{m}" for nb, (p, m) in total["notebooks"].items())
        lines.append(f"{student}: {total['points']} of {total['max']} points ({parts})")
    return "\n".join(lines)


def weighted(grades: list[Grade], config: dict) -> list[Grade]:
    """``grades`` with each exercise's points in the teacher's weights (``--config``; 1 each by default)."""
    from .gradebook import weight

    def points(row: Grade):
        value = row.points * weight(config, row.notebook, row.exercise)
        return int(value) if float(value).is_integer() else round(value, 4)

    return [replace(row, points=points(row)) for row in grades]


def write_csv(grades: list[Grade], path: Path) -> None:
    """One row per grade; names that are no UTF-8 written escaped (``caf\\xe9``), the file whole or not at all."""
    with _files.atomic_write(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(_files.spreadsheet_safe(asdict(row)) for row in grades)


def _write_json_data(data: dict, path: Path) -> None:
    with _files.atomic_write(path) as f:
        f.write(json.dumps(_files.printable(data), indent=1) + "\n")


def write_json(grades: list[Grade], path: Path, exam_mode: bool) -> None:
    _write_json_data({"exam": exam_mode, "grades": [asdict(row) for row in grades], "students": totals(grades)}, path)


def _say(text: str) -> None:
    """Print ``text``; names that are no UTF-8 shown escaped (``caf\\xe9``), never a UnicodeEncodeError."""
    print(_files.shown_name(text))


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path, through links, or hard links of one file."""
    with contextlib.suppress(OSError):
        if os.path.samefile(a, b):
            return True
    return Path(a).resolve() == Path(b).resolve()


def output_problem(outputs: dict, inputs: dict, submissions: Path) -> str | None:
    """Why one of ``outputs`` ({option: path or None}) cannot be written, or None: checked before any
    grading, so minutes of work never end in a traceback.  Its folder must exist and be writable, it
    must not be a folder, a FIFO or device, one of ``inputs`` ({option: path}: it would be overwritten),
    inside the ``submissions`` folder, or another output."""
    written: dict = {}
    for option, path in outputs.items():
        if path is None:
            continue
        where, folder = f"{option} {path}", Path(path).parent
        if not folder.exists():
            return f"{where}: the folder {folder} does not exist"
        if not folder.is_dir():
            return f"{where}: {folder} is not a folder"
        if Path(path).is_dir():
            return f"{where} is a folder: give the name of a file to write"
        try:
            _files.is_regular_file(path, "a file to write")  # a FIFO would block, a device is no output
        except OSError as exc:
            return f"{option}: {exc}"
        if not os.access(folder, os.W_OK | os.X_OK):  # the file is written beside itself, then renamed
            return f"{where}: the folder {folder} is not writable here"
        for other, given in inputs.items():
            if given is not None and _same_file(path, given):
                return f"{where} is the {other} file: writing it would overwrite what is read"
        with contextlib.suppress(ValueError):
            Path(path).resolve().relative_to(Path(submissions).resolve())
            return f"{where} is inside the submissions folder {submissions}: write it elsewhere"
        for other, given in written.items():
            if _same_file(path, given):
                return f"{where} is the file {other} writes too: give each output a file of its own"
        written[option] = path
    return None


#: what grading with --no-sandbox exposes (printed when it starts)
UNSANDBOXED = ("each notebook runs as this user, unsandboxed: its code can read whatever this user can read (the "
               "package's source with every reference answer, this user's home, a course's solved notebooks, other "
               "students' submissions), write wherever this user can write, and reach the network")


def sandbox_refusal(no_sandbox: bool) -> str | None:
    """Why grading must not start: no sandbox here (:func:`._sandbox.sandbox_available`) and no
    ``--no-sandbox``; None where it may (with ``--no-sandbox``, having printed what that exposes)."""
    from ._sandbox import sandbox_available, sandbox_problem

    if no_sandbox:
        _say(f"--no-sandbox: {UNSANDBOXED} (notebooks/TEACHING.md)")
        return None
    if sandbox_available():
        return None
    return (f"no sandbox can be built here ({sandbox_problem()}), so no notebook is graded: grade on a machine "
            f"where one can (notebooks/TEACHING.md), or pass --no-sandbox, with which {UNSANDBOXED}")


def main(argv: list[str] | None = None) -> int:
    from . import gradebook

    parser = argparse.ArgumentParser(description="Grade students' notebooks with the package's checks: each "
                                     "notebook runs in a process of its own, its verdicts are decided in another.")
    parser.add_argument("submissions", type=Path, help="a folder: one notebook or one folder per student")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"),
                        help="one row per student, notebook and exercise (grades.csv)")
    parser.add_argument("--json", type=Path, help="also write the grades, copies left out and timings as JSON here")
    parser.add_argument("--gradebook", type=Path, default=None,
                        help="one row per student: a column per exercise and notebook, totals (default: "
                             "gradebook.csv beside --out)")
    parser.add_argument("--roster", type=Path, help="CSV with an 'id' column (and name, folder, sis_id, login, "
                        "section): the gradebook's rows; without it, the submissions' names")
    parser.add_argument("--config", type=Path, help="JSON: the assignment's notebooks, exercises' points, its name")
    parser.add_argument("--canvas", type=Path, help="also write Canvas's gradebook import (CSV) here")
    parser.add_argument("--exam", action=argparse.BooleanOptionalAction, default=True,
                        help="run the checks in exam mode: messages without solutions (default: on)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S,
                        help=f"seconds one exercise's check may take (default {TIMEOUT_S})")
    parser.add_argument("--cell-timeout", type=float, default=CELL_TIMEOUT_S,
                        help=f"seconds one cell of a notebook may run (default {CELL_TIMEOUT_S})")
    parser.add_argument("--notebook-timeout", type=float, default=NOTEBOOK_TIMEOUT_S,
                        help=f"seconds all the cells of a notebook may run together, over the runs that leave out a "
                             f"stopped cell (default {NOTEBOOK_TIMEOUT_S}); the cells left when they are spent are "
                             "left out. An answer that ends its process starts the notebook again, with a fresh "
                             "budget, for the next exercise")
    parser.add_argument("--memory-mb", type=int, default=MEMORY_MB,
                        help=f"private memory (RLIMIT_DATA) in MiB that each notebook's process, and its judge, may "
                             f"take beyond its start-up (Python, torch, a CUDA context), 0 for no cap "
                             f"(default {MEMORY_MB})")
    parser.add_argument("--jobs", type=int, default=1,
                        help="notebooks graded at once: one judge each, taking its share in turn (default 1)")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="grade where no sandbox can be built, each notebook running as this user (it prints "
                             "what that exposes); without it, no sandbox means no grading")
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"{args.submissions} is not a folder")
    gradebook_option = "--gradebook" if args.gradebook is not None else "--gradebook (default: beside --out)"
    if args.gradebook is None:  # beside the grades, never wherever the command happened to run
        args.gradebook = Path(args.out).with_name("gradebook.csv")
    problem = output_problem({"--out": args.out, gradebook_option: args.gradebook, "--json": args.json,
                              "--canvas": args.canvas}, {"--roster": args.roster, "--config": args.config},
                             args.submissions)
    if problem:
        parser.error(problem)
    try:
        roster = gradebook.read_roster(args.roster) if args.roster else None
        config = gradebook.read_config(args.config)
    except gradebook.GradebookError as exc:
        parser.error(str(exc))
    refused = sandbox_refusal(args.no_sandbox)
    if refused:
        parser.error(refused)
    sandboxed = not args.no_sandbox
    started = time.monotonic()
    grades, dropped = grade_class(args.submissions, jobs=args.jobs, exam_mode=args.exam, timeout=args.timeout,
                                  cell_timeout=args.cell_timeout, notebook_timeout=args.notebook_timeout,
                                  memory_mb=args.memory_mb, sandbox=sandboxed)
    seconds = time.monotonic() - started
    notebooks = len({row.file for row in grades})
    columns, rows = gradebook.build(grades, roster=roster, config=config, duplicates=dropped)
    grades = weighted(grades, config)  # the per-exercise rows in the config's points, as the gradebook has them
    write_csv(grades, args.out)
    gradebook.write_wide_csv(columns, rows, args.gradebook)
    if args.canvas and roster is None:
        _say(f"warning: {args.canvas} names students by their folder names; Canvas matches a row by its own ID, "
             "SIS User ID or SIS Login ID, so give --roster (columns id, sis_id, login) for an import it can match")
    on_roster = {s.id for s in roster or []}
    off_roster = [row["id"] for row in rows if roster is not None and row["id"] not in on_roster]
    if args.canvas and off_roster:
        _say(f"warning: {args.canvas} has rows Canvas will match to no one, students not on the roster: "
             f"{', '.join(off_roster[:10])}{' ...' if len(off_roster) > 10 else ''}")
    if args.canvas:
        gradebook.write_canvas_csv(rows, args.canvas, assignment=config.get("assignment", "gemm-kernels"),
                                   roster=roster)
    if args.json:
        data = {"exam": args.exam, "sandbox": sandboxed, "grades": [asdict(row) for row in grades],
                "students": gradebook.student_totals(columns, rows, config),
                "gradebook": rows, "copies_left_out": [{"student": s, "file": str(p), "graded": str(k)}
                                                       for s, p, _, k in dropped],
                "seconds": round(seconds, 1), "notebooks": notebooks}
        _write_json_data(data, args.json)
    for row in rows:
        _say(f"{row['id']}: {row['total']} of {row['max']} points" + (f" ({row['notes']})" if row["notes"] else ""))
    if not rows:
        _say(f"no notebooks in {args.submissions}")
    for student, path, _, kept in dropped:
        _say(f"{student}: {Path(path).name} left out, {Path(kept).name} graded (the same notebook, handed in twice)")
    _say(f"graded {notebooks} notebooks in {seconds:.0f} s ({seconds / max(1, notebooks):.1f} s each, "
         f"{args.jobs} at a time)")
    _say(f"grades: {args.out}, gradebook: {args.gradebook}" + (f", Canvas: {args.canvas}" if args.canvas else "")
         + (f", {args.json}" if args.json else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
