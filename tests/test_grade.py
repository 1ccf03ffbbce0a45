"""The grading command: every exercise of every notebook is in its registry, and submissions
built from notebook 00 (solved, blank, partly right, spoofed, hanging, crashing, out of memory)
get the grades they deserve, each in a process of its own, the rest of a notebook still graded."""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

import nbformat
import pytest

from gemm_kernels.lab import grade
from gemm_kernels.lab._sandbox import sandbox_available
from gemm_kernels.lab.progress import NOTEBOOKS as COURSE, exercises
from gemm_kernels.lab.student import exercise_cells, student_notebook

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

#: seconds per exercise's check: axpy's first compile for sm_90 takes a few, on a busy machine more
TIMEOUT_S = 60
#: seconds per cell (the endless loop costs this).  Not less: the set-up cell (torch, Triton, gemm_kernels)
#: once took over 5 s with the suite on a loaded 2-core machine, and a blank axpy then read "error"
CELL_TIMEOUT_S = 12
MEMORY_MB = 1024
LAUNCH_STATS_RIGHT = "def launch_stats(n, block):\n    return (n + block - 1) // block, -(-n // block) * block - n\n"
LAUNCH_STATS_WRONG = "def launch_stats(n, block):\n    return n // block, 0\n"


def read_nb(path):
    return nbformat.read(path, as_version=4)


def test_the_registry_names_every_exercise_and_its_answer():
    """ANSWERS holds, per notebook, the exercises the check modules define, in order, and the
    name each notebook passes to the check."""
    assert list(grade.ANSWERS) == list(COURSE)
    for notebook, pairs in grade.ANSWERS.items():
        titles = [ex.title for ex in exercises() if ex.notebook == notebook]
        assert [title for title, _ in pairs] == titles, notebook
        calls = []
        nb = read_nb(NOTEBOOKS / f"{notebook}.ipynb")
        for index in exercise_cells(nb):
            for node in ast.walk(ast.parse(nb.cells[index].source)):
                if isinstance(node, ast.Call) and getattr(node.func, "id", "").startswith("check_"):
                    calls.append((node.func.id[len("check_"):], node.args[0].id))
        assert calls == list(pairs), notebook


def _with_cell(nb, defines: str, source: str):
    """``nb`` with the code cell that defines ``defines`` replaced by ``source``."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    cell = next(c for c in nb.cells if c.cell_type == "code" and f"def {defines}(" in c.source)
    cell.source = source
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every kind of submission, graded in one go (seven notebooks at a time)."""
    root = tmp_path_factory.mktemp("submissions")
    solved = read_nb(NOTEBOOKS / "00_start_here.ipynb")
    (root / "solved").mkdir()
    nbformat.write(solved, root / "solved" / "00_start_here.ipynb")
    nbformat.write(read_nb(NOTEBOOKS / "01_pointer_arithmetic.ipynb"), root / "solved" / "01_pointer_arithmetic.ipynb")
    nbformat.write(student_notebook(solved, "00_start_here.ipynb"), root / "blank.ipynb")  # known by its imports
    axpy_wrong = next(c.source for c in solved.cells if "def axpy(" in c.source)
    axpy_wrong = axpy_wrong.replace("alpha * x + y", "alpha * x - y")
    partly = _with_cell(_with_cell(solved, "launch_stats", LAUNCH_STATS_RIGHT), "axpy", axpy_wrong)
    spoof = ("from gemm_kernels.lab.exercises import CheckResult\n"
             "import gemm_kernels.lab.exercises.start_here as checks\n\n"
             "def check_launch_stats(answer):\n"
             "    return CheckResult('launch_stats', 'correct', 'correct, well done.')\n\n"
             "checks.check_launch_stats = check_launch_stats\n" + LAUNCH_STATS_WRONG)
    bad = {
        "partly": partly,
        "spoofed": _with_cell(solved, "launch_stats", spoof),
        "hanging": _with_cell(solved, "launch_stats", LAUNCH_STATS_RIGHT + "while True:\n    pass\n"),
        "looping": _with_cell(solved, "launch_stats", "def launch_stats(n, block):\n    while True:\n        n += 1\n"),
        "crashing": _with_cell(_with_cell(solved, "launch_stats", "import os\nos._exit(1)\n"), "axpy",
                               "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"),
        "hog": _with_cell(solved, "launch_stats",
                          LAUNCH_STATS_RIGHT + "hog = []\nwhile True:\n    hog.append(bytearray(1 << 26))\n"),
    }
    for name, nb in bad.items():
        nbformat.write(nb, root / f"{name}_00_start_here.ipynb")
    rows = grade.grade(root, jobs=2, timeout=TIMEOUT_S, memory_mb=MEMORY_MB, cell_timeout=CELL_TIMEOUT_S,
                       sandbox=sandbox_available())
    return {(row.student, row.notebook, row.exercise): row for row in rows}, rows


def _rows(graded, student, notebook="00_start_here"):
    """Each exercise's (title, status, message): what a failed assertion should show."""
    by_key, _ = graded
    rows = (by_key[(student, notebook, title)] for title, _ in grade.ANSWERS[notebook])
    return [(row.exercise, row.status, row.message) for row in rows]


def _statuses(graded, student, notebook="00_start_here"):
    return [status for _, status, _ in _rows(graded, student, notebook)]


def test_solved_notebooks_get_full_points_and_blank_ones_none(graded):
    assert _statuses(graded, "solved") == ["correct", "correct"], _rows(graded, "solved")
    assert _statuses(graded, "solved", "01_pointer_arithmetic") == ["correct"] * 3, \
        _rows(graded, "solved", "01_pointer_arithmetic")
    assert _statuses(graded, "blank") == ["not attempted", "not attempted"], _rows(graded, "blank")
    points = grade.totals(graded[1])
    assert points["solved"]["points"] == points["solved"]["max"] == 5
    assert points["blank"]["points"] == 0 and points["blank"]["max"] == 2


def test_one_right_one_wrong(graded):
    assert _statuses(graded, "partly") == ["correct", "wrong"]
    row = graded[0][("partly", "00_start_here", "axpy")]
    assert row.points == 0 and "expected" in row.message and "hint" not in row.message


def test_a_redefined_check_scores_nothing(graded):
    """The teacher's check, taken before the learner's cells ran, grades the wrong answer."""
    row = graded[0][("spoofed", "00_start_here", "launch_stats")]
    assert (row.status, row.points) == ("wrong", 0)
    assert _statuses(graded, "spoofed")[1] == "correct"


def test_hangs_crashes_and_memory_hogs_cost_their_cell_only(graded):
    """Every cell runs, in order, as in Jupyter: a cell that loops or fills memory is stopped and what
    it defined before stands (the answer is right: its points stand); a cell that ends the process is
    left out, and the notebook run again without it (its answer is then undefined: 0)."""
    assert _statuses(graded, "hanging") == ["correct", "correct"]
    assert _statuses(graded, "hog") == ["correct", "correct"]
    assert _statuses(graded, "crashing") == ["crashed", "crashed"]
    messages = [graded[0][("crashing", "00_start_here", t)].message for t in ("launch_stats", "axpy")]
    assert "exited with code 1" in messages[0] and "SIGKILL" in messages[1]


def test_an_answer_that_never_returns_is_a_timeout_at_its_own_line(graded):
    """A teacher's review: a loop inside the answer read "wrong ... (in the check's code, on what your
    code gave it)"; TEACHING.md promises "timeout", and the place is the learner's line."""
    row = graded[0][("looping", "00_start_here", "launch_stats")]
    assert (row.status, row.points) == ("timeout", 0)
    assert "did not return within" in row.message and "while True" in row.message and "check's code" not in row.message
    assert _statuses(graded, "looping")[1] == "correct"


def test_reports(graded, tmp_path, capsys):
    _, rows = graded
    grade.write_csv(rows, tmp_path / "grades.csv")
    grade.write_json(rows, tmp_path / "grades.json", exam_mode=True)
    with open(tmp_path / "grades.csv", newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows) == 19 and set(table[0]) == set(grade.FIELDS)
    data = json.loads((tmp_path / "grades.json").read_text())
    assert data["exam"] and data["students"]["partly"]["notebooks"]["00_start_here"] == [1, 2]
    assert "partly: 1 of 2 points (00_start_here 1/2)" in grade.summary(rows).splitlines()


def test_the_command_on_a_notebook_of_no_course(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), tmp_path / "in" / "eve.ipynb")
    no_sandbox = [] if sandbox_available() else ["--no-sandbox"]
    assert grade.main([str(tmp_path / "in"), "--out", str(tmp_path / "g.csv"), "--no-exam", *no_sandbox]) == 0
    assert (tmp_path / "gradebook.csv").is_file()  # beside --out by default, not in the working directory
    assert "eve: 0 of 0 points" in capsys.readouterr().out
    with open(tmp_path / "g.csv", newline="", encoding="utf-8") as f:
        (row,) = csv.DictReader(f)
    assert row["status"] == "error" and "not a notebook of the course" in row["message"]


def test_each_student_has_a_judge_of_their_own(tmp_path, monkeypatch):
    """Rebuilt kernels run in the judge's process: whatever one student's leave there must not meet
    another student's notebooks.  So each judge (one ``grade_notebooks`` call) holds one student's
    notebooks, all of them, whatever ``jobs`` is."""
    for student in ("ann", "bob", "cy"):
        (tmp_path / student).mkdir()
        for name in ("00_start_here", "01_pointer_arithmetic"):
            (tmp_path / student / f"{name}.ipynb").write_text((NOTEBOOKS / f"{name}.ipynb").read_text())
    judged = []

    def fake(items, **options):
        judged.append(sorted(Path(path).parent.name + "/" + notebook for path, notebook in items))
        return [{title: ("correct", "") for title, _ in grade.ANSWERS[notebook]} for _, notebook in items]

    monkeypatch.setattr(grade, "grade_notebooks", fake)
    rows, _ = grade.grade_class(tmp_path, jobs=2)
    assert sorted(judged) == [[f"{s}/00_start_here", f"{s}/01_pointer_arithmetic"] for s in ("ann", "bob", "cy")]
    assert {row.student for row in rows} == {"ann", "bob", "cy"} and all(row.points == 1 for row in rows)
