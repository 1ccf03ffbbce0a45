"""A class's gradebook from the grades of :mod:`gemm_kernels.lab.grade`: one row per student.

* **Who.**  A roster (CSV with an ``id`` column; optional ``name``, ``folder`` (the name of the
  student's folder or file prefix in the submissions, default: the id), ``sis_id``, ``login``,
  ``section``) gives the rows, in its order; a student on it who handed in nothing gets zeros; a
  submission whose name is on no roster line gets a row of its own, noted "not on the roster".
  Without a roster the folder and file names are the ids.
* **What counts.**  A config (JSON) may say which notebooks the assignment has (``"notebooks"``:
  missing ones count 0 of their maximum), the points of exercises (``"weights": {"00_start_here":
  {"axpy": 2}}``, default 1 each) and the assignment's name (``"assignment"``).  ``"predictions"``
  gives each Predict answer points in nbgrader (default 0: collected, read in formgrader, not
  counted); they are graded there by hand, never here, and the gradebook's notes say so.
* **Copies.**  Where a student handed in one course notebook more than once (Jupyter's
  ``00_start_here-Copy1.ipynb`` beside ``00_start_here.ipynb``), :func:`pick_copies` keeps one by a
  stated rule and the others are reported: the copy with the most answers written (the fewest
  ``raise NotImplementedError("your turn")`` stubs left), then the one named exactly as the course
  notebook (with the student's prefix, for a flat folder), then the one changed last.

:func:`write_wide_csv` writes one column per exercise (``00_start_here:axpy``), per notebook and
the totals; :func:`write_canvas_csv` the one column Canvas's gradebook import takes per assignment.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from .. import _files
from .progress import NOTEBOOKS

ROSTER_FIELDS = ("id", "name", "folder", "sis_id", "login", "section")
#: the columns Canvas's gradebook import reads before the assignments
CANVAS_FIELDS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")


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
    "05b_stream_k": (("streamk_share", "streamk_share"), ("streamk_loop", "my_streamk_kernel"),
                     ("rows_match", "rows_match")),
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


class GradebookError(ValueError):
    """A roster or config the gradebook cannot use (the message names the file and what is wrong)."""


@dataclass
class Student:
    id: str
    name: str = ""
    folder: str = ""
    sis_id: str = ""
    login: str = ""
    section: str = ""
    notes: list = field(default_factory=list)


def read_roster(path: Path) -> list[Student]:
    """The roster at ``path`` (CSV, UTF-8, header with an ``id`` column)."""
    try:  # a FIFO given as the roster: refused, not waited on
        rows = list(csv.DictReader(io.StringIO(_files.read_text(path, SMALL_FILE_LIMIT, "utf-8-sig"), newline="")))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise GradebookError(f"roster {path}: cannot be read ({exc})") from None
    if not rows or "id" not in rows[0]:
        raise GradebookError(f"roster {path}: needs a header line with an 'id' column (and lines under it)")
    students, seen = [], set()
    for number, row in enumerate(rows, start=2):
        values = {k: (row.get(k) or "").strip() for k in ROSTER_FIELDS}
        if not values["id"]:
            raise GradebookError(f"roster {path}, line {number}: no id")
        folder = values["folder"] or values["id"]
        if values["id"] in seen or folder in seen:
            raise GradebookError(f"roster {path}, line {number}: {values['id']} is there twice")
        seen.update({values["id"], folder})
        students.append(Student(**{**values, "folder": folder}))
    return students


def _points(value) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return 0 <= float(value) < float("inf")
    except OverflowError:  # an integer past float's range (JSON has no limit)
        return False


def _shown(value, width: int = 60) -> str:
    """A config value as JSON, trimmed for a message."""
    try:
        text = json.dumps(value, default=str)
    except ValueError:  # an integer past Python's digit limit
        text = type(value).__name__
    return text if len(text) <= width else text[:width - 3] + "..."


def read_config(path: Path | None) -> dict:
    """The teacher's config: ``{"assignment": str, "notebooks": [...], "weights": {nb: {exercise: points}}}``.
    GradebookError naming the file and the key when it is not of that shape."""
    if path is None:
        return {}
    try:
        config = json.loads(_files.read_text(path, SMALL_FILE_LIMIT))
    except RecursionError:
        raise GradebookError(f"config {path}: nested too deeply to be a config") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise GradebookError(f"config {path}: cannot be read as JSON ({exc})") from None
    if not isinstance(config, dict):
        raise GradebookError(f"config {path}: expected a JSON object, not {_shown(config)}")

    notebooks = config.get("notebooks", [])
    if not isinstance(notebooks, list) or not all(isinstance(nb, str) for nb in notebooks):
        raise GradebookError(f"config {path}: 'notebooks' must be a list of course notebooks' names, such as "
                             f'["00_start_here"], not {_shown(notebooks)}')
    unknown = [nb for nb in notebooks if nb not in NOTEBOOKS]
    if unknown:
        raise GradebookError(f"config {path}: 'notebooks' must list course notebooks (unknown: "
                             f"{_shown(unknown[:3])}; the course's: {', '.join(NOTEBOOKS)})")
    twice = sorted({nb for nb in notebooks if notebooks.count(nb) > 1})
    if twice:
        raise GradebookError(f"config {path}: 'notebooks' lists {', '.join(twice)} more than once")
    assignment = config.get("assignment", "gemm-kernels")
    if not isinstance(assignment, str) or not assignment.strip():
        raise GradebookError(f"config {path}: 'assignment' (its name in Canvas) must be a non-empty string, "
                             f"not {_shown(assignment)}")
    if not _points(config.get("predictions", 0)):
        raise GradebookError(f"config {path}: 'predictions' (the points of each Predict answer) must be a number >= 0, "
                             f"not {_shown(config.get('predictions'))}")
    weights = config.get("weights", {})
    if not isinstance(weights, dict):
        raise GradebookError(f"config {path}: 'weights' must map notebooks to {{exercise: points}}, not "
                             f"{_shown(weights)}")
    for notebook, per in weights.items():
        titles = [t for t, _ in ANSWERS.get(notebook, ())]
        if not titles or not isinstance(per, dict):
            raise GradebookError(f"config {path}: weights for {_shown(notebook)}: not a course notebook's "
                                 f"{{exercise: points}} (it is {_shown(per)})")
        for title, points in per.items():
            if title not in titles:
                raise GradebookError(f"config {path}: {notebook} has no exercise {title[:60]!r} (it has {titles})")
            if not _points(points):
                raise GradebookError(f"config {path}: the points of {notebook}:{title} (in 'weights') must be a "
                                     f"number >= 0, not {_shown(points)}")
    return config


#: the most bytes of a notebook handed in that are read (one with its outputs is a few MB)
NOTEBOOK_LIMIT = 256 << 20
#: the most bytes of a roster or config read (a class's roster is a few kB)
SMALL_FILE_LIMIT = 16 << 20


def read_notebook(path: Path):
    """The notebook handed in at ``path`` (nbformat 4), read through :func:`gemm_kernels._files.read_text`:
    a FIFO or device there is an OSError naming it, never waited on."""
    import nbformat

    return nbformat.reads(_files.read_text(path, NOTEBOOK_LIMIT), as_version=4)


#: an answer cell still as handed out (the student copies' stub, JSON-escaped as a notebook holds it)
STUB_BYTES = b'raise NotImplementedError(\\"your turn\\")'


def pick_copies(found: list[tuple[str, Path, str]]) -> tuple[list, list]:
    """(kept, dropped) of (student, path, notebook) triples: one copy per student and notebook,
    the rule in the module docstring."""
    groups: dict = {}
    for student, path, notebook in found:
        groups.setdefault((student, notebook), []).append(path)
    kept, dropped = [], []
    for (student, notebook), paths in groups.items():
        def rank(path: Path):
            exact = path.stem in (notebook, f"{student}_{notebook}", f"{student}-{notebook}", student)
            try:
                changed = path.stat().st_mtime
                stubs = _files.read_bytes(path, NOTEBOOK_LIMIT).count(STUB_BYTES)
            except OSError:
                changed, stubs = 0.0, 1 << 30
            return (-stubs, exact, changed, -len(path.name))
        paths = sorted(paths, key=rank, reverse=True)
        kept.append((student, paths[0], notebook))
        dropped += [(student, path, notebook, paths[0]) for path in paths[1:]]
    return kept, dropped


def weight(config: dict, notebook: str, exercise: str) -> float:
    return float(config.get("weights", {}).get(notebook, {}).get(exercise, 1))


def prediction_points(config: dict) -> float:
    """The points of each Predict answer in nbgrader (graded by hand there; not in this gradebook)."""
    return float(config.get("predictions", 0))


#: the note on every row when Predict answers are worth points (nbgrader has them, not the grade command)
PREDICTIONS_NOTE = "Predict answers are graded by hand in nbgrader: not in this total"


def _number(value: float):
    return int(value) if float(value).is_integer() else round(value, 4)


def build(grades, *, roster: list[Student] | None = None, config: dict | None = None,
          duplicates=()) -> tuple[list[str], list[dict]]:
    """(columns, rows) of the wide gradebook."""

    config = config or {}
    by_student: dict = {}
    for row in grades:
        by_student.setdefault(row.student, []).append(row)
    notebooks = list(config.get("notebooks") or [nb for nb in NOTEBOOKS if any(
        row.notebook == nb for row in grades)])
    columns = ["id", "name"]
    for nb in notebooks:
        columns += [f"{nb}:{title}" for title, _ in ANSWERS[nb]] + [nb]
    columns += ["total", "max", "percent", "notes"]
    students = list(roster or [])
    known, ids = {s.folder for s in students}, {s.id for s in students}
    # a folder on no roster line is a row of its own; its name as the id, unless a roster line has that id
    students += [Student(id=name if name not in ids else f"{name} (folder, not on the roster)", folder=name,
                         notes=["not on the roster"] if roster else []) for name in by_student if name not in known]
    for student, path, notebook, kept in duplicates:
        for s in students:
            if s.folder == student:
                s.notes.append(f"{Path(path).name} ignored: {Path(kept).name} is graded (same notebook)")
    rows = []
    for s in students:
        line = {"id": s.id, "name": s.name}
        mine = {(r.notebook, r.exercise): r for r in by_student.get(s.folder, [])}
        total = top = 0.0
        notes = list(s.notes) + ([PREDICTIONS_NOTE] if prediction_points(config) else [])
        for nb in notebooks:
            got = out_of = 0.0
            handed_in = any(key[0] == nb for key in mine)
            for title, _ in ANSWERS[nb]:
                points = weight(config, nb, title)
                row = mine.get((nb, title))
                earned = points if row is not None and row.status == "correct" else 0.0
                line[f"{nb}:{title}"] = _number(earned)
                got, out_of = got + earned, out_of + points
            line[nb] = _number(got)
            if not handed_in:
                notes.append(f"{nb} missing")
            else:  # handed in, but nothing of it could be graded (an empty or broken file): say why once
                rows_of = [r for key, r in mine.items() if key[0] == nb]
                if all(r.status == "error" for r in rows_of) and len({r.message for r in rows_of}) == 1:
                    notes.append(f"{nb}: {rows_of[0].message}")
            total, top = total + got, top + out_of
        errors = [r for r in by_student.get(s.folder, []) if not r.notebook]
        notes += [f"{Path(r.file).name}: {r.message}" for r in errors]
        line.update(total=_number(total), max=_number(top), percent=round(100 * total / top, 1) if top else 0.0,
                    notes="; ".join(notes))
        rows.append(line)
    return columns, rows


def student_totals(columns, rows, config: dict | None = None) -> dict:
    """The gradebook's rows by student id, for ``grades.json``: the same totals as ``gradebook.csv``
    (a missing notebook at 0 of its maximum), each notebook as [points, maximum]."""
    notebooks = [c for c in columns if c in ANSWERS]
    tops = {nb: _number(sum(weight(config or {}, nb, title) for title, _ in ANSWERS[nb])) for nb in notebooks}
    return {row["id"]: {"name": row["name"], "points": row["total"], "max": row["max"], "percent": row["percent"],
                        "notebooks": {nb: [row[nb], tops[nb]] for nb in notebooks}, "notes": row["notes"]}
            for row in rows}


def write_wide_csv(columns, rows, path: Path) -> None:
    """The gradebook, whole or not at all; names that are no UTF-8 written escaped (``caf\\xe9``)."""
    with _files.atomic_write(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=_files.spreadsheet_safe(columns))
        writer.writeheader()
        writer.writerows(_files.spreadsheet_safe(rows))


def write_canvas_csv(rows, path: Path, *, assignment: str, roster: list[Student] | None = None) -> None:
    """Canvas's gradebook import: its five student columns, then the assignment (the total points),
    with the "Points Possible" line under the header."""
    by_id = {s.id: s for s in roster or []}
    top = max((r["max"] for r in rows), default=0)
    with _files.atomic_write(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(_files.spreadsheet_safe([*CANVAS_FIELDS, assignment]))
        writer.writerow(["Points Possible", "", "", "", "", top])
        for row in rows:
            s = by_id.get(row["id"], Student(id=row["id"], name=row["name"]))
            writer.writerow(_files.spreadsheet_safe([s.name or s.id, s.id, s.sis_id, s.login, s.section, row["total"]]))
