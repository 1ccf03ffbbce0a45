"""nbgrader's scores from the grade command's judge: ``python -m gemm_kernels.lab.nbgrader_judge
ASSIGNMENT`` in the course directory, after ``nbgrader autograde ASSIGNMENT``.

``nbgrader autograde`` runs each test cell in the student's own kernel and gives its points when
the cell does not raise, so what the student's earlier cells patched decides (the hidden tests
cannot help it: they run in that kernel too).  This command grades every notebook under
``submitted/<student>/ASSIGNMENT/`` with the judge of :mod:`gemm_kernels.lab.grade` (the verdicts
decided in a process the notebook never reaches), then

* writes each check cell's score as nbgrader's *manual* score, which nbgrader's totals, ``nbgrader
  export`` and the feedback use over the autograded one (a cell worth 2 points gets 2 or 0);
* puts the judge's verdict in that cell's outputs in ``autograded/``, so ``nbgrader
  generate_feedback`` shows the verdict, not what the kernel printed;
* reports a check cell whose source the student changed (nbgrader restores it, and logs every
  hidden-test cell as changed: the course's config silences that warning, this says the real ones).

:class:`ClearReveals`, which the course's config appends to ``GenerateAssignment.preprocessors``, keeps
the answers to the Predict prompts (the ``**Reveal:**`` paragraphs) out of the release.
"""

from __future__ import annotations

import argparse
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

from . import grade
from .gradebook import read_notebook
from .nbgrader_markup import without_reveals
from .student import strip_hidden_tests

try:
    from nbgrader.preprocessors import NbGraderPreprocessor
except ImportError:  # without the [teach] extra nothing runs ClearReveals
    NbGraderPreprocessor = object

ICONS = {"correct": "[ok]", "not attempted": "[ ]"}


class HiddenTestsRestored(logging.Filter):
    """Drops nbgrader's "Attribute 'checksum' for cell check_xxx has changed!" for check cells: their
    hidden tests are left out of the release and put back at autograde, so every submission differs
    there (nbgrader #1961).  Other cells' warnings stay.  The course's config installs it::

        c.Application.logging_config = {
            "filters": {"hidden_tests": {"()": "gemm_kernels.lab.nbgrader_judge.HiddenTestsRestored"}},
            "handlers": {"console": {"filters": ["hidden_tests"]}}}
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (str(record.msg).startswith("Attribute '%s' for cell %s has changed!") and len(args) >= 2
                    and args[0] == "checksum" and str(args[1]).startswith("check_"))


class ClearReveals(NbGraderPreprocessor):
    """``nbgrader generate_assignment``'s last step in the course: in every markdown cell that is not an
    nbgrader cell, the paragraph that answers a Predict prompt (``**Reveal:** ...``) is replaced by a
    note (:func:`.nbgrader_markup.without_reveals`), so students predict before they read the answer.
    The course's config: ``c.GenerateAssignment.preprocessors.append(ClearReveals)``."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown" and "nbgrader" not in cell.metadata:
            cell.source = without_reveals(cell.source)
        return cell, resources


def _graded(course: Path, assignment: str, jobs: int, options: dict) -> list[tuple]:
    found = []
    for folder in sorted((course / "submitted").glob(f"*/{assignment}")):
        for path in sorted(folder.glob("*.ipynb")):
            notebook, _ = grade.identify(path)  # a FIFO or folder named .ipynb: left out, never opened
            if notebook is not None:
                found.append((folder.parent.name, path, notebook))
    options = {"hide": [course], **options}  # solutions in source/, the other students: out of sight
    jobs = max(1, min(jobs, len(found) or 1))
    shares = [found[j::jobs] for j in range(jobs)]  # one judge per job, its notebooks in turn
    with ThreadPoolExecutor(jobs) as pool:
        judged = list(pool.map(lambda share: grade.grade_notebooks([(p, nb) for _, p, nb in share], **options), shares))
    return [(student, path, notebook, verdict) for share, verdicts in zip(shares, judged)
            for (student, path, notebook), verdict in zip(share, verdicts)]


def _edited_checks(course: Path, assignment: str, path: Path) -> list[str]:
    """Check cells of the submission whose source differs from the release's."""
    released = course / "release" / assignment / path.name
    if not released.exists():
        return []
    def checks(nb):
        return {c.metadata.get("nbgrader", {}).get("grade_id"): strip_hidden_tests(c.source).strip()
                for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    mine, theirs = checks(read_notebook(path)), checks(nbformat.read(released, as_version=4))
    return [grade_id for grade_id, source in theirs.items() if mine.get(grade_id) not in (None, source)]


def apply(course: Path, assignment: str, *, db_url: str | None = None, jobs: int = 1, **options) -> list[dict]:
    """Grade, write the scores and verdicts (module docstring); one dict per check cell graded."""
    from nbgrader.api import Gradebook, MissingEntry

    course = Path(course).resolve()
    graded = _graded(course, assignment, jobs, options)
    rows = []
    with Gradebook(db_url or f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student, path, notebook, verdicts in graded:
            name = path.stem
            autograded = course / "autograded" / student / assignment / path.name
            nb = read_notebook(autograded) if autograded.exists() else None
            edited = _edited_checks(course, assignment, path)
            for title, (status, message) in verdicts.items():
                grade_id = f"check_{title}"
                try:
                    cell_grade = gradebook.find_grade(grade_id, name, assignment, student)
                except MissingEntry:
                    rows.append({"student": student, "notebook": name, "cell": grade_id, "score": None,
                                 "status": "not in nbgrader's gradebook (run nbgrader autograde first)"})
                    continue
                score = float(cell_grade.max_score) if status == "correct" else 0.0
                cell_grade.manual_score = score
                cell_grade.needs_manual_grade = False
                text = f"{ICONS.get(status, '[x]')} {title}: {status}: {message}\n(graded by gemm_kernels.lab.grade)\n"
                if grade_id in edited:
                    text += "this check cell was edited in the submission: nbgrader ran the course's own\n"
                for cell in (nb.cells if nb is not None else []):
                    if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
                        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
                rows.append({"student": student, "notebook": name, "cell": grade_id, "score": score,
                             "status": status, "edited": grade_id in edited})
            gradebook.db.commit()
            if nb is not None:
                nbformat.write(nb, autograded)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write the grade command's verdicts into nbgrader's gradebook "
                                     "and autograded notebooks (after nbgrader autograde).")
    parser.add_argument("assignment", help="the assignment's name, as nbgrader knows it")
    parser.add_argument("--course", type=Path, default=Path("."), help="the course directory (default: here)")
    parser.add_argument("--db", help="nbgrader's database URL (default: sqlite:///COURSE/gradebook.db)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (default 1)")
    parser.add_argument("--cell-timeout", type=float, default=grade.CELL_TIMEOUT_S,
                        help=f"seconds one cell may run (default {grade.CELL_TIMEOUT_S})")
    args = parser.parse_args(argv)
    if not (args.course / "submitted").is_dir():
        parser.error(f"{args.course} has no submitted/ folder: run this in the course directory after nbgrader collect")
    rows = apply(args.course, args.assignment, db_url=args.db, jobs=args.jobs, cell_timeout=args.cell_timeout)
    for row in rows:
        note = " (its check cell was edited)" if row.get("edited") else ""
        print(f"{row['student']} {row['notebook']} {row['cell']}: {row['status']}, {row['score']} points{note}")
    print(f"{len(rows)} check cells graded" if rows else f"no submissions of {args.assignment}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
