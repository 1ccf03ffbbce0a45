"""The course under nbgrader, as a teacher runs it (marker ``teach``: `make test-teach`, in a venv with
the [teach] extra; `make test` leaves it out): in a course directory of its own, ``nbgrader
generate_assignment`` releases notebooks 00 and 01 without solutions or hidden tests, and ``nbgrader
autograde`` gives a solved submission every point, a blank one none, and a spoofed one (its answer
cells redefine the checks to say "correct", and answer wrong) none: the hidden tests use the
package's checks, not the names in the notebook."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from gemm_kernels.lab import nbgrader_judge, student
from gemm_kernels.lab._sandbox import sandbox_available
from gemm_kernels.lab.nbgrader_markup import CHECK_CALL, PREDICT, REVEAL, REVEAL_LEFT_OUT, is_prediction

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hostile import HOSTILE, NBGRADER_HOSTILE  # noqa: E402

pytestmark = pytest.mark.teach
nbgrader_api = pytest.importorskip("nbgrader.api", reason="needs the [teach] extra (make test-teach)")

REPO = Path(__file__).resolve().parents[1]
NAMES = ["00_start_here", "01_pointer_arithmetic"]
ASSIGNMENT = "gemm"
#: what the course directory's nbgrader_config.py says (notebooks/TEACHING.md shows the same settings)
CONFIG = """\
c = get_config()
c.CourseDirectory.course_id = "gemm-kernels"
c.ClearSolutions.code_stub = {"python": 'raise NotImplementedError("your turn")'}
c.Execute.timeout = 600
# feedback shows verdicts, never the hidden tests' code
from nbgrader.preprocessors import ClearHiddenTests, GetGrades
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
# nbgrader warns that every check cell changed (its hidden tests put back): gemm_kernels.lab.nbgrader_judge
# reports the check cells a student really edited
c.Application.logging_config = {
    "filters": {"hidden_tests": {"()": "gemm_kernels.lab.nbgrader_judge.HiddenTestsRestored"}},
    "handlers": {"console": {"filters": ["hidden_tests"]}}}
# the answers to the Predict prompts (the **Reveal:** paragraphs) stay out of the release
from gemm_kernels.lab.nbgrader_judge import ClearReveals
c.GenerateAssignment.preprocessors.append(ClearReveals)
"""


def _nbgrader(course: Path, *args: str) -> str:
    # nbgrader runs its venv's `alembic` from PATH (as where the venv is activated)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython")]:
        env[var] = str(course.parent / sub)
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"nbgrader {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return done.stdout + done.stderr


@pytest.fixture
def course(tmp_path):
    """A course directory with notebooks 00 and 01 as the source of one assignment, released."""
    course = tmp_path / "course"
    source = course / "source" / ASSIGNMENT
    source.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(CONFIG)
    for name in NAMES:
        shutil.copy(REPO / "notebooks" / f"{name}.ipynb", source)
    _nbgrader(course, "generate_assignment", ASSIGNMENT)
    return course


def _released(course: Path, name: str):
    return nbformat.read(course / "release" / ASSIGNMENT / f"{name}.ipynb", as_version=4)


def _solved(course, name, nb):
    solved = nbformat.read(course / "source" / ASSIGNMENT / f"{name}.ipynb", as_version=4)
    answers = {c.id: c.source for c in solved.cells if c.cell_type == "code" and student.has_solution(c.source)}
    for cell in nb.cells:
        cell.source = answers.get(cell.id, cell.source)
        if is_prediction(cell):  # a prediction written down, for the teacher to grade by hand
            cell.source = "About twice as long, I think."


def _spoofed(course, name, nb):
    """Every answer cell claims every check passes (rebinding their names), and answers wrong."""
    checks = [check for c in nb.cells if c.cell_type == "code" for check in CHECK_CALL.findall(c.source)]
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution") and cell.cell_type == "code":
            cell.source = (" = ".join(checks) + " = lambda *args, **kwargs: 'correct'\n"
                           + cell.source.replace(student.STUB, "return 0"))


def _blank(course, name, nb):
    pass


SUBMISSIONS = {"solved": _solved, "blank": _blank, "spoofed": _spoofed}


def test_the_release_has_no_solutions_and_no_hidden_tests(course):
    for name in NAMES:
        nb = _released(course, name)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        for hidden in (student.BEGIN, student.END, student.HIDDEN_BEGIN, "graded("):
            assert hidden not in code, f"{name}: {hidden!r} in the release"
        answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"]
        assert answers and all(student.STUB in c.source for c in answers)
        assert len(re.findall(r"^check_\w+\(", code, re.MULTILINE)) >= 2


def test_the_release_collects_predictions_and_hides_their_reveals(course):
    """Issue 48: under each Predict prompt an answer cell (nbgrader's text stub, graded by hand, its
    grade_id made from the prompt's id), and no reveal paragraph (ClearReveals, in the config)."""
    for name in NAMES:
        source = nbformat.read(course / "source" / ASSIGNMENT / f"{name}.ipynb", as_version=4)
        nb = _released(course, name)
        prompts = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and PREDICT in c.source]
        assert prompts and len(prompts) == sum(PREDICT in c.source for c in source.cells)
        answers = [i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id", "")
                   .startswith("predict-")]
        assert answers == [i + 1 for i in prompts], name
        for i in prompts:
            meta = nb.cells[i + 1].metadata["nbgrader"]
            assert nb.cells[i + 1].cell_type == "markdown" and nb.cells[i + 1].source == "YOUR ANSWER HERE"
            assert meta["grade_id"] == f"predict-{nb.cells[i].id}" and meta["solution"] and meta["grade"]
            assert meta["points"] == 0 and not meta["locked"]
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        reveals = [c.source.split("\n")[0] for c in source.cells if c.source.startswith(REVEAL)]
        assert reveals and not any(first in text for first in reveals), name
        assert text.count(REVEAL_LEFT_OUT) == len(reveals) and text.count(REVEAL) == len(reveals)


def test_autograde_gives_points_only_for_correct_answers(course):
    for student_id, make in SUBMISSIONS.items():
        folder = course / "submitted" / student_id / ASSIGNMENT
        folder.mkdir(parents=True)
        for name in NAMES:
            nb = _released(course, name)
            make(course, name, nb)
            nbformat.write(nb, folder / f"{name}.ipynb")
    _nbgrader(course, "autograde", ASSIGNMENT)
    with nbgrader_api.Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for name in NAMES:
            scores = {s: gradebook.find_submission_notebook(name, ASSIGNMENT, s) for s in SUBMISSIONS}
            top = scores["solved"].max_score
            assert top == len(CHECK_CALL.findall("\n".join(
                c.source for c in _released(course, name).cells if c.cell_type == "code")))
            assert {s: nb.score for s, nb in scores.items()} == {"solved": top, "blank": 0, "spoofed": 0}, name
            predictions = {s: [gradebook.find_grade(c.metadata["nbgrader"]["grade_id"], name, ASSIGNMENT, s)
                               for c in _released(course, name).cells if is_prediction(c)] for s in SUBMISSIONS}
            assert predictions["solved"] and all(g.needs_manual_grade and g.auto_score is None and g.max_score == 0
                                                 for g in predictions["solved"]), "a prediction is left to the teacher"
            assert all(g.score == 0 and not g.needs_manual_grade for g in predictions["blank"]), "left blank: 0"
            for student_id in ("blank", "spoofed"):  # failed by the hidden tests' check, not by something else
                graded = nbformat.read(course / "autograded" / student_id / ASSIGNMENT / f"{name}.ipynb", as_version=4)
                errors = [o.ename for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade")
                          and c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
                assert errors == ["AssertionError"] * int(top), (student_id, name, errors)


def test_the_whole_course_releases(tmp_path):
    """generate_assignment on all thirteen notebooks at once: each releases without solutions or hidden
    tests, with one graded test cell (1 point) per check call of the source."""
    course = tmp_path / "course"
    source = course / "source" / "all"
    source.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(CONFIG)
    paths = student.notebook_paths(REPO / "notebooks")
    assert len(paths) == 13
    for path in paths:
        shutil.copy(path, source)
    _nbgrader(course, "generate_assignment", "all")
    for path in paths:
        released = nbformat.read(course / "release" / "all" / path.name, as_version=4)
        text = "\n".join(c.source for c in released.cells)
        assert student.BEGIN not in text and "BEGIN HIDDEN TESTS" not in text, path.name
        graded = [c for c in released.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"]
        checks = [c for c in nbformat.read(path, as_version=4).cells
                  if c.cell_type == "code" and CHECK_CALL.search(c.source)]
        assert len(graded) == len(checks) >= 2 and all(c.metadata["nbgrader"]["points"] == 1 for c in graded), path.name
        manual = [c for c in released.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "markdown"]
        assert len(manual) == text.count(PREDICT) >= 1 and all(c.source == "YOUR ANSWER HERE" for c in manual)
        assert REVEAL_LEFT_OUT in text, path.name


def test_the_judge_gives_nbgrader_its_scores(course):
    """nbgrader autograde, then gemm_kernels.lab.nbgrader_judge: the judge's scores replace the kernel's
    (a forgery that fooled autograde gets 0), feedback shows its verdicts and no hidden test, and the
    log carries no checksum warning for the check cells."""
    name = "00_start_here"
    subs = {"solved": None, **{h: HOSTILE[h][1] for h in NBGRADER_HOSTILE}}
    for student_id, source in subs.items():
        folder = course / "submitted" / student_id / ASSIGNMENT
        folder.mkdir(parents=True)
        nb = _released(course, name)
        _solved(course, name, nb)
        if source is not None:
            cell = next(c for c in nb.cells if c.cell_type == "code" and "def launch_stats(" in c.source)
            cell.source = source
        nbformat.write(nb, folder / f"{name}.ipynb")
    nbgrader_judge.snapshot(course, ASSIGNMENT)  # what was handed in, before autograde runs any of it
    log = _nbgrader(course, "autograde", ASSIGNMENT)
    assert "Attribute 'checksum' for cell check_" not in log
    with nbgrader_api.Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        forged = [s for s in NBGRADER_HOSTILE
                  if gradebook.find_grade("check_launch_stats", name, ASSIGNMENT, s).score > 0]
    assert "patch_core" in forged  # the forgery fools nbgrader's own autograde
    rows = nbgrader_judge.apply(course, ASSIGNMENT, jobs=2, cell_timeout=10, sandbox=sandbox_available())
    scores = {(r["student"], r["cell"]): r["score"] for r in rows}
    assert scores[("solved", "check_launch_stats")] == scores[("solved", "check_axpy")] == 1
    for student_id in NBGRADER_HOSTILE:
        assert scores[(student_id, "check_launch_stats")] == 0, student_id
    with nbgrader_api.Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        assert gradebook.find_submission_notebook(name, ASSIGNMENT, "solved").score == 2
        for student_id in NBGRADER_HOSTILE:
            assert gradebook.find_grade("check_launch_stats", name, ASSIGNMENT, student_id).score == 0, student_id
    _nbgrader(course, "generate_feedback", ASSIGNMENT)
    html = (course / "feedback" / "patch_core" / ASSIGNMENT / f"{name}.html").read_text(encoding="utf-8")
    assert "BEGIN HIDDEN TESTS" not in html and "graded(" not in html
    assert "graded by gemm_kernels.lab.grade" in html


#: H6 of a teacher's review (issue 48): run by nbgrader autograde as the grader, this cell puts the course's
#: solved source notebook in place of its own submission and the release in place of a classmate's
TAMPER = """import pathlib, shutil
import gemm_kernels.lab.nbgrader_markup as _m
_m.graded = lambda module, name: (lambda *a, **k: None)
here = pathlib.Path.cwd()
if here.parent.parent.name == "autograded":
    course, me, assignment = here.parents[2], here.parent.name, here.name
    for nb in (course / "source" / assignment).glob("*.ipynb"):
        shutil.copyfile(nb, course / "submitted" / me / assignment / nb.name)
        shutil.copyfile(course / "release" / assignment / nb.name, course / "submitted" / "victim" / assignment / nb.name)
"""
#: H7: the same, renaming its own submission away, so that a judge of submitted/ found nothing of it to grade
HIDE = """import pathlib
import gemm_kernels.lab.nbgrader_markup as _m
_m.graded = lambda module, name: (lambda *a, **k: None)
here = pathlib.Path.cwd()
if here.parent.parent.name == "autograded":
    for nb in (here.parents[2] / "submitted" / here.parent.name / here.name).glob("*.ipynb"):
        nb.rename(nb.with_suffix(".bak"))
"""


def test_the_judge_grades_what_was_handed_in_before_autograde(course, capsys):
    """H6 and H7 of a teacher's review: nbgrader autograde runs student code as the grader, which rewrote
    submitted/ (its own notebook replaced by the solved source, a classmate's by the release, or renamed
    away) before the judge read it. The judge now grades its snapshot, taken before autograde: the
    forgers score 0, the victim keeps its points; a notebook autograded but not in the snapshot (here one
    handed in after it, forging autograde's points) gets 0 and a warning naming the student; grading
    without a snapshot is refused, and so is a second snapshot of what autograde could have rewritten."""
    name = "00_start_here"

    def hand_in(student_id, prefix=""):
        folder = course / "submitted" / student_id / ASSIGNMENT
        folder.mkdir(parents=True)
        nb = _released(course, name)
        _solved(course, name, nb)
        if prefix:
            cell = next(c for c in nb.cells if c.cell_type == "code" and "def launch_stats(" in c.source)
            cell.source = prefix + "\ndef launch_stats(n, block):\n    return n // block, 0\n"
        nbformat.write(nb, folder / f"{name}.ipynb")

    hand_in("victim")
    hand_in("tamper", TAMPER)
    hand_in("hider", HIDE)
    with pytest.raises(nbgrader_judge.SnapshotError, match="before nbgrader autograde"):
        nbgrader_judge.read_snapshot(course, ASSIGNMENT)
    taken = nbgrader_judge.snapshot(course, ASSIGNMENT)
    assert sorted(taken["taken"]) == ["hider", "tamper", "victim"] and not taken["refused"]
    hand_in("late", HOSTILE["patch_core"][1])  # collected after the snapshot: autograde forges its points
    _nbgrader(course, "autograde", ASSIGNMENT)
    submitted = course / "submitted"
    assert "BEGIN SOLUTION" in (submitted / "tamper" / ASSIGNMENT / f"{name}.ipynb").read_text(encoding="utf-8")
    assert not (submitted / "hider" / ASSIGNMENT / f"{name}.ipynb").exists()
    with nbgrader_api.Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        assert gradebook.find_grade("check_launch_stats", name, ASSIGNMENT, "late").score > 0  # forged
    again = nbgrader_judge.snapshot(course, ASSIGNMENT)  # what student code may have written: left out
    assert sorted(again["refused"]) == ["hider", "late", "tamper", "victim"] and again["digest"] == taken["digest"]
    capsys.readouterr()
    args = [ASSIGNMENT, "--course", str(course), "--jobs", "2", "--cell-timeout", "10", "--digest", taken["digest"]]
    assert nbgrader_judge.main(args + ([] if sandbox_available() else ["--no-sandbox"])) == 0
    out = capsys.readouterr().out
    assert "warning: late: 00_start_here is not in the judge's snapshot" in out, out
    with nbgrader_api.Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        scores = {s: gradebook.find_submission_notebook(name, ASSIGNMENT, s).score
                  for s in ("victim", "tamper", "hider", "late")}
        assert scores == {"victim": 2, "tamper": 1, "hider": 1, "late": 0}, scores  # launch_stats wrong: axpy's 1
        for student_id in ("tamper", "hider", "late"):
            assert gradebook.find_grade("check_launch_stats", name, ASSIGNMENT, student_id).score == 0, student_id
