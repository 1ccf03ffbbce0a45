"""nbgrader's metadata on the notebooks (gemm_kernels.lab.nbgrader_markup) is current and made from
the solution markers and check cells; the hidden tests fail a wrong, missing or spoofed answer and
pass a solved one, and never reach a student copy.  nbgrader itself runs in tests/test_teach.py."""

from __future__ import annotations

import nbformat
import pytest

from gemm_kernels.lab import nbgrader_markup, student

NOTEBOOKS = student.REPO_ROOT / "notebooks"
PATHS = student.notebook_paths(NOTEBOOKS)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_markup_is_current(path):
    assert path.read_text(encoding="utf-8") == nbgrader_markup.marked_up_text(path), (
        f"{path.name}: nbgrader markup out of date; run python -m gemm_kernels.lab.nbgrader_markup")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_answers_checks_and_locks_follow_the_markers(path):
    nb = nbformat.read(path, as_version=4)
    meta = {i: c.metadata.get("nbgrader") for i, c in enumerate(nb.cells)}
    assert [i for i, m in meta.items() if m and m["solution"] and nb.cells[i].cell_type == "code"] == (
        student.solution_cells(nb))
    tests = [i for i, m in meta.items() if m and m["grade"] and nb.cells[i].cell_type == "code"]
    calls = [nbgrader_markup.CHECK_CALL.findall(student.strip_hidden_tests(nb.cells[i].source)) for i in tests]
    assert [meta[i]["grade_id"] for i in tests] == [found[0] for found in calls]
    assert all(meta[i]["points"] == 1 and meta[i]["locked"] for i in tests)
    assert all(nb.cells[i].source.startswith(student.HIDDEN_BEGIN) for i in tests)
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    assert meta[first_code]["locked"], "the imports the exercises need are locked"
    ids = [m["grade_id"] for m in meta.values() if m]
    assert len(ids) == len(set(ids))


def test_neither_a_student_copy_nor_a_book_page_shows_the_hidden_tests():
    from gemm_kernels.book import build, pages

    for path in PATHS:
        nb = nbformat.read(path, as_version=4)
        page = build.page_notebook(nb, pages.notebook_info(path, nb))
        for shown in (student.student_notebook(nb, path.name), page):
            assert not any(student.HIDDEN_BEGIN in c.source or "graded(" in c.source for c in shown.cells)
        assert sum(bool(nbgrader_markup.CHECK_CALL.search(c.source)) for c in page.cells) >= 2


def _exercises(path, answers):
    """Run notebook ``path``'s exercise cells in-process, the answer cells' sources replaced by ``answers``
    (id -> source; the rest as solved)."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        cell.source = answers.get(cell.id, cell.source)
    return student.exercise_results(nb, path.name)


SPOOF = ("check_launch_stats = lambda answer: 'correct'\n"
         "def launch_stats(n, block):\n    return n // block, 0\n")


@pytest.mark.parametrize("answer,message", [
    ("def launch_stats(n, block):\n    return n // block, 0\n", "expected"),
    ("def launch_stats(n, block):\n    raise NotImplementedError('your turn')\n", "not attempted"),
    (SPOOF, "expected"),
], ids=["wrong", "blank", "spoofed"])
def test_the_hidden_tests_fail_what_is_not_correct(answer, message):
    """Solved, the hidden tests pass and the cell still shows the check's result; a wrong answer, the
    stub, or an answer cell that redefines the check, raise."""
    results = _exercises(PATHS[0], {})
    assert [r.status for r in results] == ["correct", "correct"]
    nb = nbformat.read(PATHS[0], as_version=4)
    answer_id = nb.cells[student.solution_cells(nb)[0]].id
    with pytest.raises(AssertionError, match=message):
        _exercises(PATHS[0], {answer_id: answer})


def test_a_marker_in_prose_is_refused():
    """nbgrader cuts a cell at any line holding "BEGIN SOLUTION" or "END SOLUTION", prose included."""
    nb = nbformat.read(PATHS[0], as_version=4)
    nb.cells[-1].source += "\nThe solutions sit between `### BEGIN SOLUTION` and its end."
    with pytest.raises(ValueError, match="reword it"):
        nbgrader_markup.markup(nb, PATHS[0].name)


def test_graded_only_takes_checks_of_the_package():
    with pytest.raises(ValueError, match="not an exercise module"):
        nbgrader_markup.graded("os", "system")
    strict = nbgrader_markup.graded("gemm_kernels.lab.exercises.start_here", "check_launch_stats")
    assert callable(strict.hint)  # check_xxx.hint(level) still works where the name is rebound


def test_the_script_rewrites_a_stale_notebook_and_check_says_so(tmp_path, capsys):
    path = tmp_path / PATHS[0].name
    nb = nbformat.read(PATHS[0], as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        cell.source = student.strip_hidden_tests(cell.source)
    nbformat.write(nb, path)
    assert nbgrader_markup.main(["--check", str(path)]) == 1
    assert "out of date" in capsys.readouterr().out
    assert nbgrader_markup.main([str(path)]) == 0
    assert path.read_text() == PATHS[0].read_text()
    assert nbgrader_markup.main(["--check", str(path)]) == 0


def test_make_test_leaves_nbgrader_to_make_test_teach_and_ci_runs_it():
    """nbgrader (the [teach] extra) lives in .venv-teach: its JupyterLab extensions stay out of `make lab`."""
    import shutil
    import subprocess
    import tomllib

    if shutil.which("make") is None:
        pytest.skip("make is not installed")

    def dry_run(target):
        return subprocess.run(["make", "-n", "-s", "-C", str(student.REPO_ROOT), target, "STAMP=", "BIN=/x/bin",
                               "TEACH_STAMP="], capture_output=True, text=True, timeout=60, check=True).stdout

    assert "not teach" in dry_run("test") and "not teach" in dry_run("test-triton-oldest")
    assert ".venv-teach/bin/python -m pytest -n 2 -p no:cacheprovider -m teach tests/test_teach.py" in dry_run(
        "test-teach")
    project = tomllib.loads((student.REPO_ROOT / "pyproject.toml").read_text())
    assert any(r.startswith("nbgrader") for r in project["project"]["optional-dependencies"]["teach"])
    assert any(m.startswith("teach:") for m in project["tool"]["pytest"]["ini_options"]["markers"])
    assert '|make test-teach"' in (student.REPO_ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("magic", ["%timeit sum(range(10))", "!pip install numpy", "%%time\nx = 1",
                                   "x = !ls", "%matplotlib inline\nimport math"])
def test_magics_and_shell_lines_are_read_as_ipython_reads_them(magic):
    """Issue 50: a %timeit or !pip cell made markup() raise a bare SyntaxError naming no notebook or cell."""
    nb = nbformat.read(PATHS[0], as_version=4)
    nb.cells.insert(2, nbformat.v4.new_code_cell(magic))
    nbgrader_markup.markup(nb, PATHS[0].name)  # no error


def test_a_cell_that_is_no_python_is_named():
    nb = nbformat.read(PATHS[0], as_version=4)
    cell = nbformat.v4.new_code_cell("def broken(:\n    pass")
    nb.cells.insert(2, cell)
    with pytest.raises(ValueError, match=rf"{PATHS[0].name}, cell {cell.id}: not Python"):
        nbgrader_markup.markup(nb, PATHS[0].name)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_every_predict_prompt_has_a_manually_graded_answer_cell(path):
    """Issue 48: the Predict prompts are collected.  Under each prompt, one markdown answer cell that
    nbgrader releases as its text stub and leaves for formgrader (solution and grade, unlocked, 0
    points by default), its id and grade_id made from the prompt's (stable across edits elsewhere)."""
    cells = nbformat.read(path, as_version=4).cells
    prompts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and nbgrader_markup.PREDICT in c.source]
    answers = [i for i, c in enumerate(cells) if nbgrader_markup.is_prediction(c)]
    assert prompts and answers == [i + 1 for i in prompts]
    for i in prompts:
        answer = cells[i + 1]
        assert answer.id == f"{cells[i].id}-prediction"
        assert answer.metadata["nbgrader"] == {"grade": True, "solution": True, "locked": False, "points": 0,
                                               "grade_id": f"predict-{cells[i].id}", "schema_version": 3,
                                               "task": False}


def test_predictions_follow_their_prompts_and_keep_what_they_say():
    """A prompt added gets its answer cell, a prompt removed loses it; a teacher's edit of an answer
    cell's text stays (nbgrader replaces it in the release anyway)."""
    nb = nbformat.read(PATHS[1], as_version=4)
    prompts = [c for c in nb.cells if c.cell_type == "markdown" and nbgrader_markup.PREDICT in c.source]
    prompts[0].source = prompts[0].source.replace(nbgrader_markup.PREDICT, "**Think:**")
    new = nbformat.v4.new_markdown_cell(f"{nbgrader_markup.PREDICT} a new question?")
    nb.cells.insert(3, new)
    kept = next(c for c in nb.cells if c.id == f"{prompts[1].id}-prediction")
    kept.source = "A teacher's words."
    nbgrader_markup.markup(nb, PATHS[1].name)
    ids = [c.id for c in nb.cells]
    assert f"{prompts[0].id}-prediction" not in ids
    assert ids[ids.index(new.id) + 1] == f"{new.id}-prediction"
    assert next(c for c in nb.cells if c.id == f"{prompts[1].id}-prediction").source == "A teacher's words."


def test_the_teachers_config_gives_the_points(tmp_path, capsys):
    """--config (the grade command's JSON) sets each check's points from "weights" and each Predict
    answer's from "predictions", in an assignment's copies; notebooks/ keep the defaults."""
    import json

    config = tmp_path / "week1.json"
    config.write_text(json.dumps({"predictions": 1, "weights": {"00_start_here": {"axpy": 2.5}}}))
    copy = tmp_path / PATHS[0].name
    copy.write_text(PATHS[0].read_text())
    assert nbgrader_markup.main(["--config", str(config), str(copy)]) == 0
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in nbformat.read(copy, as_version=4).cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert points == {"predict-00-08": 1, "check_launch_stats": 1, "check_axpy": 2.5}
    with pytest.raises(SystemExit):
        nbgrader_markup.main(["--config", str(config)])
    assert "name them" in capsys.readouterr().err
    config.write_text(json.dumps({"predictions": -1}))
    with pytest.raises(SystemExit):
        nbgrader_markup.main(["--config", str(config), str(copy)])
    assert "'predictions'" in capsys.readouterr().err


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_the_release_leaves_out_each_reveal_paragraph_and_nothing_else(path):
    """nbgrader_judge.ClearReveals (the course config's last release step) turns each paragraph that opens
    with **Reveal:** into a note; the rest of the cell, the Predict prompts included, stays."""
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "markdown":
            continue
        released = nbgrader_markup.without_reveals(cell.source)
        paragraphs = cell.source.split("\n\n")
        kept = [p for p in paragraphs if not p.lstrip().startswith(nbgrader_markup.REVEAL)]
        assert released.split("\n\n") == [p if p in kept else nbgrader_markup.REVEAL_LEFT_OUT for p in paragraphs]
        assert released.count(nbgrader_markup.PREDICT) == cell.source.count(nbgrader_markup.PREDICT)
