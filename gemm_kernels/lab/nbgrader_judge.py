"""nbgrader's scores from the grade command's judge, in two steps in the course directory:

1. ``python -m gemm_kernels.lab.nbgrader_judge ASSIGNMENT --snapshot`` right after ``nbgrader
   collect``, before ``nbgrader autograde``: copies every notebook under
   ``submitted/<student>/ASSIGNMENT/`` into the judge's store (``--store``, default
   ``judge_snapshots/``) with its SHA-256, and prints the snapshot's digest (:func:`snapshot`).
   ``nbgrader autograde`` runs each student's code as the grader, and that code can rewrite
   ``submitted/`` (put the solved ``source/`` notebook in place of its own, a release in place of a
   classmate's, rename its notebook away): the judge grades what was handed in, before that.
2. ``python -m gemm_kernels.lab.nbgrader_judge ASSIGNMENT`` after ``nbgrader autograde``: checks the
   snapshot (every file against its checksum; ``--digest`` against the one step 1 printed), grades
   it with the judge of :mod:`gemm_kernels.lab.grade` (in the sandbox; no sandbox, no grading, unless
   ``--no-sandbox``), then

* writes each check cell's score as nbgrader's *manual* score, which nbgrader's totals, ``nbgrader
  export`` and the feedback use over the autograded one (a cell worth 2 points gets 2 or 0);
* writes 0 to every autograded cell it did not judge (a notebook not in the snapshot), naming
  the students whose autograde had given points there;
* puts the judge's verdict in that cell's outputs in ``autograded/``, so ``nbgrader
  generate_feedback`` shows the verdict, not what the kernel printed;
* reports a check cell whose source the student changed (nbgrader restores it, and logs every
  hidden-test cell as changed: the course's config silences that warning, this says the real ones).

:class:`ClearReveals`, which the course's config appends to ``GenerateAssignment.preprocessors``, keeps
the answers to the Predict prompts (the ``**Reveal:**`` paragraphs) out of the release.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

from .. import _files
from . import grade
from .gradebook import NOTEBOOK_LIMIT, read_notebook
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


# ----------------------------------------------------------------------------- the snapshot
#: the judge's store of what students handed in, per assignment (``--store``; by default in the course directory)
STORE = "judge_snapshots"
MANIFEST = "manifest.json"
#: what only the course's source notebooks hold (the release has none of it): a submission with it is a copy
SOURCE_MARKERS = (b"### BEGIN SOLUTION", b"### BEGIN HIDDEN TESTS")


class SnapshotError(Exception):
    """No snapshot to grade, or one that changed since it was taken (the message says which, and what to do)."""


def store_folder(course: Path, assignment: str, store: Path | None = None) -> Path:
    return (Path(store) if store else Path(course) / STORE) / assignment


def _digest(files: dict) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def _handed_in(course: Path, assignment: str) -> dict:
    """{student: {file name: bytes}}: the regular ``.ipynb`` files of ``submitted/<student>/ASSIGNMENT/``
    (a FIFO, a folder named .ipynb, a file past the size limit: left out, never waited on)."""
    found: dict = {}
    for folder in sorted((Path(course) / "submitted").glob(f"*/{assignment}")):
        if folder.is_dir():
            found[folder.parent.name] = {}
            for path in sorted(folder.glob("*.ipynb")):
                try:
                    found[folder.parent.name][path.name] = _files.read_bytes(path, NOTEBOOK_LIMIT)
                except OSError:
                    continue
    return found


def _read_manifest(where: Path) -> dict:
    try:
        manifest = json.loads(_files.read_text(where / MANIFEST, 1 << 26))
        files = manifest["files"]
        assert isinstance(files, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as exc:
        raise SnapshotError(f"{where / MANIFEST} is no snapshot's manifest ({type(exc).__name__}): take the "
                            "snapshot again (collect again first if autograde has run)") from None
    if manifest.get("digest") != _digest(files):
        raise SnapshotError(f"{where / MANIFEST} was edited since it was written (its digest does not match its "
                            "files): collect again, take the snapshot again, then autograde")
    return manifest


def snapshot(course: Path, assignment: str, *, store: Path | None = None, retake=()) -> dict:
    """Copy each student's notebooks of ``submitted/`` into the store with their SHA-256 (module
    docstring); a student whose copy is already there unchanged is left alone.  Once ``nbgrader
    autograde`` has run on the assignment (``autograded/*/ASSIGNMENT`` exists), ``submitted/`` may hold
    what student code wrote: a student new to the store or changed since is then left out, unless
    named in ``retake`` (after collecting again).  Returns what it did: ``taken``, ``unchanged`` and
    ``refused`` students, ``marked`` files (copies of a source notebook), ``digest``, ``store``."""
    course = Path(course).resolve()
    where = store_folder(course, assignment, store)
    try:
        files = dict(_read_manifest(where)["files"])
    except FileNotFoundError:
        files = {}
    autograded = any(p.is_dir() for p in (course / "autograded").glob(f"*/{assignment}"))
    report: dict = {"taken": [], "unchanged": [], "refused": [], "marked": []}
    for student, handed in _handed_in(course, assignment).items():
        new = {f"{student}/{name}": hashlib.sha256(data).hexdigest() for name, data in handed.items()}
        held = {key: value for key, value in files.items() if key.split("/", 1)[0] == student}
        if new == held:
            report["unchanged"].append(student)
            continue
        if autograded and student not in retake:
            report["refused"].append(student)
            continue
        folder = where / student
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name, data in handed.items():
            (folder / name).write_bytes(data)
            if any(marker in data for marker in SOURCE_MARKERS):
                report["marked"].append(f"{student}/{name}")
        for key in held:
            del files[key]
        files.update(new)
        report["taken"].append(student)
    where.mkdir(parents=True, exist_ok=True)
    manifest = {"assignment": assignment, "files": files, "digest": _digest(files)}
    with _files.atomic_write(where / MANIFEST) as f:
        f.write(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return {**report, "digest": manifest["digest"], "store": where, "notebooks": len(files)}


def read_snapshot(course: Path, assignment: str, *, store: Path | None = None,
                  digest: str | None = None) -> list[tuple[str, Path]]:
    """(student, path) of every notebook in the snapshot, each checked against its SHA-256 (and the
    manifest against ``digest``, when given); SnapshotError saying what is wrong otherwise."""
    where = store_folder(Path(course).resolve(), assignment, store)
    try:
        manifest = _read_manifest(where)
    except FileNotFoundError:
        raise SnapshotError(
            f"no snapshot of {assignment} in {where}: run `python -m gemm_kernels.lab.nbgrader_judge {assignment} "
            "--snapshot` right after nbgrader collect, before nbgrader autograde (autograde runs the students' code "
            "as you, and that code can rewrite submitted/), so the judge grades what was handed in") from None
    if digest and digest.strip().lower() != manifest["digest"]:
        raise SnapshotError(f"the snapshot in {where} is not the one whose digest you gave ({digest.strip()}): it "
                            "changed since; collect again and take the snapshot again before autograde")
    found = []
    for key, checksum in sorted(manifest["files"].items()):
        student, _, name = key.partition("/")
        if not student or "/" in name or not name.endswith(".ipynb") or student.startswith("."):
            raise SnapshotError(f"{where / MANIFEST} names {key!r}, which is no student's notebook")
        path = where / student / name
        try:
            data = _files.read_bytes(path, NOTEBOOK_LIMIT)
        except OSError as exc:
            raise SnapshotError(f"{path} of the snapshot cannot be read ({exc}): take the snapshot again") from None
        if hashlib.sha256(data).hexdigest() != checksum:
            raise SnapshotError(f"{path} changed since the snapshot was taken (its SHA-256 differs): collect "
                                "again and take the snapshot again before autograde")
        found.append((student, path))
    return found


# ----------------------------------------------------------------------------- scores
def _graded(found: list[tuple[str, Path]], course: Path, jobs: int, options: dict) -> list[tuple]:
    found = [(student, path, notebook) for student, path in found
             for notebook in [grade.identify(path)[0]] if notebook is not None]
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


def apply(course: Path, assignment: str, *, db_url: str | None = None, jobs: int = 1, store: Path | None = None,
          digest: str | None = None, **options) -> list[dict]:
    """Grade the snapshot, write the scores and verdicts (module docstring); one dict per check cell
    graded, and one per autograded cell set to 0 for want of a judged notebook (``"judged": False``)."""
    from nbgrader.api import Gradebook, MissingEntry

    course = Path(course).resolve()
    graded = _graded(read_snapshot(course, assignment, store=store, digest=digest), course, jobs, options)
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
                             "status": status, "edited": grade_id in edited, "judged": True})
            gradebook.db.commit()
            if nb is not None:
                nbformat.write(nb, autograded)
        rows += _zero_the_unjudged(gradebook, assignment, {(r["student"], r["notebook"], r["cell"]) for r in rows})
    return rows


def _zero_the_unjudged(gradebook, assignment: str, judged: set) -> list[dict]:
    """0, as the manual score, for every autograded cell of ``assignment`` the judge did not score:
    a notebook not in the snapshot (renamed or removed from submitted/ after it, or handed in
    after it) keeps no point that autograde gave it.  One row each; ``autograded``: what autograde gave."""
    rows = []
    for submission in gradebook.assignment_submissions(assignment):
        for notebook in submission.notebooks:
            for cell_grade in notebook.grades:
                key = (submission.student.id, notebook.name, cell_grade.name)
                if cell_grade.cell_type != "code" or key in judged:
                    continue  # (a written answer, a Predict cell: yours to grade)
                cell_grade.manual_score = 0.0
                cell_grade.needs_manual_grade = False
                rows.append({"student": key[0], "notebook": key[1], "cell": key[2], "score": 0.0,
                             "status": "not judged: no such notebook in the judge's snapshot", "judged": False,
                             "autograded": cell_grade.auto_score or 0.0})
    gradebook.db.commit()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write the grade command's verdicts into nbgrader's gradebook "
                                     "and autograded notebooks: --snapshot after nbgrader collect and before "
                                     "nbgrader autograde, then without it after autograde.")
    parser.add_argument("assignment", help="the assignment's name, as nbgrader knows it")
    parser.add_argument("--snapshot", action="store_true",
                        help="copy what students handed in (submitted/) into the judge's store, with checksums: "
                             "run it after nbgrader collect, before nbgrader autograde")
    parser.add_argument("--retake", action="append", default=[], metavar="STUDENT",
                        help="with --snapshot after autograde has run: take this student's submitted/ again "
                             "(collect it again first)")
    parser.add_argument("--store", type=Path, help=f"the judge's store (default: COURSE/{STORE})")
    parser.add_argument("--digest", help="the digest --snapshot printed: refuse a snapshot that is not that one")
    parser.add_argument("--course", type=Path, default=Path("."), help="the course directory (default: here)")
    parser.add_argument("--db", help="nbgrader's database URL (default: sqlite:///COURSE/gradebook.db)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (default 1)")
    parser.add_argument("--cell-timeout", type=float, default=grade.CELL_TIMEOUT_S,
                        help=f"seconds one cell may run (default {grade.CELL_TIMEOUT_S})")
    parser.add_argument("--notebook-timeout", type=float, default=grade.NOTEBOOK_TIMEOUT_S,
                        help=f"seconds all of a notebook's cells may run together (default {grade.NOTEBOOK_TIMEOUT_S})")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="grade where no sandbox can be built (it prints what that exposes)")
    args = parser.parse_args(argv)
    if not (args.course / "submitted").is_dir():
        parser.error(f"{args.course} has no submitted/ folder: run this in the course directory after nbgrader collect")
    if args.snapshot:
        return _take(args)
    refused = grade.sandbox_refusal(args.no_sandbox)
    if refused:
        parser.error(refused)
    try:
        rows = apply(args.course, args.assignment, db_url=args.db, jobs=args.jobs, store=args.store,
                     digest=args.digest, cell_timeout=args.cell_timeout, notebook_timeout=args.notebook_timeout,
                     sandbox=not args.no_sandbox)
    except SnapshotError as exc:
        parser.error(str(exc))
    for row in rows:
        if row.get("judged", True):
            note = " (its check cell was edited)" if row.get("edited") else ""
            print(f"{row['student']} {row['notebook']} {row['cell']}: {row['status']}, {row['score']} points{note}")
    forged: dict = {}
    for row in rows:
        if not row.get("judged", True) and row["autograded"] > 0:
            forged.setdefault((row["student"], row["notebook"]), []).append(row["autograded"])
    for (student, notebook), points in forged.items():
        print(f"warning: {student}: {notebook} is not in the judge's snapshot, yet autograde gave it {sum(points):g} "
              f"points: set to 0 (was it renamed or removed after the snapshot? read its autograded copy)")
    judged = [row for row in rows if row.get("judged", True)]
    print(f"{len(judged)} check cells graded" if judged else f"no submissions of {args.assignment} in the snapshot")
    return 0


def _take(args) -> int:
    report = snapshot(args.course, args.assignment, store=args.store, retake=set(args.retake))
    for name in report["marked"]:
        print(f"warning: {name} holds the course's solution or hidden-test markers: a copy of a source notebook, "
              "not what the release gave (read it before grading)")
    for student in report["refused"]:
        print(f"left out: {student}: nbgrader autograde has run on {args.assignment}, so submitted/ may hold what "
              f"a student's code wrote; collect {student}'s work again, then --snapshot --retake {student}")
    print(f"snapshot of {args.assignment}: {report['notebooks']} notebooks in {report['store']} (taken now: "
          f"{len(report['taken'])} students, unchanged: {len(report['unchanged'])}); its digest: {report['digest']} "
          "(pass it as --digest when grading: a snapshot changed since is refused)")
    return 1 if report["refused"] else 0


if __name__ == "__main__":
    sys.exit(main())
