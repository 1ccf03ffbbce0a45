"""Student copies: solutions out, stubs in, and the copies still run (every check then says
"not attempted yet"); a learner's changed copy is never overwritten; `make lab` serves the student
copies (as root too) and every picture a notebook shows loads under it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from gemm_kernels.lab import student
from gemm_kernels.lab.exercises import NOT_ATTEMPTED
from gemm_kernels.lab.student import BEGIN, END, STUB, MarkerError, strip_solutions

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
PATHS = student.notebook_paths(NOTEBOOKS)


def read_nb(path):
    return nbformat.read(path, as_version=4)


def test_strip_keeps_the_scaffold_and_indents_the_stub():
    source = (
        "def f(x):\n"
        '    """doc"""\n'
        f"    {BEGIN}\n"
        "    y = x + 1\n"
        "    return y\n"
        f"    {END}\n"
        "\n"
        "def g():\n"
        f"        {BEGIN}\n"
        "        return 2\n"
        f"        {END}\n"
        "print(f, g)"
    )
    assert strip_solutions(source) == (
        "def f(x):\n"
        '    """doc"""\n'
        f"    {STUB}\n"
        "\n"
        "def g():\n"
        f"        {STUB}\n"
        "print(f, g)"
    )


def test_strip_leaves_cells_without_markers_alone():
    for source in ("", "x = 1", "x = 1\n", "# ### BEGIN SOLUTION is only special on a line of its own\nx = 2"):
        assert strip_solutions(source) == source


@pytest.mark.parametrize("source,message", [
    (f"{BEGIN}\nx = 1\n", "never closed"),
    (f"x = 1\n{END}\n", "without"),
    (f"{BEGIN}\n{BEGIN}\n{END}\n", "inside another solution"),
])
def test_unbalanced_markers_are_refused(source, message):
    with pytest.raises(MarkerError, match=message):
        strip_solutions(source, where="nb, cell 3")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_student_notebook_has_no_solutions_and_no_outputs(path):
    original_text = path.read_text()
    nb = nbformat.read(path, as_version=4)
    solution_lines = {
        line.strip()
        for i in student.solution_cells(nb)
        for line in _solution_bodies(nb.cells[i].source)
        if line.strip() and not line.strip().startswith("#")
    }
    regions = sum(nb.cells[i].source.count(BEGIN) for i in student.solution_cells(nb))
    assert regions >= 2, f"{path.name}: fewer than two exercises with solutions"

    copy = student.student_notebook(nb, path.name)
    nbformat.validate(copy)
    assert path.read_text() == original_text, "making a copy must not touch the source notebook"
    assert "Student copy" in copy.cells[0].source
    text = "\n".join(c.source for c in copy.cells if c.cell_type == "code")
    assert BEGIN not in text and END not in text
    assert text.count(STUB) == regions
    stripped_lines = {line.strip() for line in text.splitlines()}
    # lines that only ever appear inside solutions are gone (shared ones like "return out" may stay)
    elsewhere = {line.strip() for c in nb.cells if c.cell_type == "code" for line in _outside_solutions(c.source)}
    leaked = (solution_lines - elsewhere) & stripped_lines
    assert not leaked, f"solution lines left in the student copy: {sorted(leaked)[:5]}"
    for cell in copy.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def _solution_bodies(source):
    inside = False
    for line in source.splitlines():
        if line.strip() == BEGIN:
            inside = True
        elif line.strip() == END:
            inside = False
        elif inside:
            yield line


def _outside_solutions(source):
    return strip_solutions(source).splitlines()


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_student_stubs_report_not_attempted(path):
    copy = student.student_notebook(nbformat.read(path, as_version=4), path.name)
    results = student.exercise_results(copy, path.name)
    assert len(results) >= 2
    for result in results:
        assert result.status == NOT_ATTEMPTED, str(result)


def test_make_student_writes_every_notebook(tmp_path, capsys):
    assert student.main([str(NOTEBOOKS), str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.glob("*.ipynb"))
    assert written == [p.name for p in PATHS]
    assert "wrote" in capsys.readouterr().out
    for name in written:
        code = [c.source for c in read_nb(tmp_path / name).cells if c.cell_type == "code"]
        assert not any(BEGIN in source for source in code)


def test_make_student_explains_a_missing_directory(tmp_path, capsys):
    assert student.main([str(tmp_path / "nowhere"), str(tmp_path / "out")]) == 1
    assert "no NN_slug.ipynb notebooks" in capsys.readouterr().err


def test_a_student_notebook_runs_top_to_bottom(tmp_path):
    """The whole student copy of 00 in a real kernel: no error, and every check cell shows
    "not attempted yet" rather than a traceback."""
    [path] = student.write_student_copies(NOTEBOOKS, tmp_path)[:1]
    assert path.name.startswith("00_")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    check_cells = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("check_")]
    assert len(check_cells) >= 2
    for cell in check_cells:
        shown = "".join(o.get("data", {}).get("text/plain", "") for o in cell.outputs)
        assert "not attempted yet" in shown, (cell.source, cell.outputs)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors


# ----------------------------------------------------------------------------- the student flow and the lab
def test_make_student_never_overwrites_a_changed_copy(tmp_path, capsys):
    """make, edit, make again: the edit survives (and is reported); FORCE backs it up first."""
    assert student.main([str(NOTEBOOKS), str(tmp_path)]) == 0
    target = tmp_path / PATHS[0].name
    nb = read_nb(target)
    stub_cell = next(c for c in nb.cells if c.cell_type == "code" and STUB in c.source)
    stub_cell.source = stub_cell.source.replace(STUB, "return 42  # my answer")
    nbformat.write(nb, target)
    edited = target.read_text()
    capsys.readouterr()

    assert student.main([str(NOTEBOOKS), str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert target.read_text() == edited
    assert f"kept {target}" in out and "your work" in out
    assert f"wrote {tmp_path / PATHS[1].name}" in out  # unchanged copies are simply written again

    assert student.main([str(NOTEBOOKS), str(tmp_path), "--force"]) == 0
    out = capsys.readouterr().out
    backup = tmp_path / f"{target.name}.bak-1"
    assert backup.read_text() == edited and "return 42  # my answer" in backup.read_text()
    assert f"backed up your copy {target.name} as {backup.name}" in out
    assert "return 42" not in target.read_text()


def test_lab_allows_root_only_for_root(tmp_path):
    as_root = student.lab_command(tmp_path, 8888, "t0k", uid=0)
    as_user = student.lab_command(tmp_path, 8888, "t0k", uid=1000)
    assert "--allow-root" in as_root and "--allow-root" not in as_user
    assert f"--ServerApp.root_dir={tmp_path}" in as_user and "--IdentityProvider.token=t0k" in as_user


def _markdown_images(nb):
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            yield from re.findall(r"!\[[^\]]*\]\(([^)\s]+)", cell.source)
            yield from re.findall(r"<img[^>]*src=[\"']([^\"']+)", cell.source)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_every_markdown_image_loads_under_make_lab(path):
    """`make lab-solutions` serves notebooks/ (and make lab serves student/, copies of it): an image path
    must stay inside it."""
    for src in _markdown_images(read_nb(path)):
        if src.startswith(("http://", "https://", "data:")):
            continue
        resolved = (NOTEBOOKS / src).resolve()
        assert NOTEBOOKS.resolve() in resolved.parents, f"{path.name}: {src} is outside the lab's root notebooks/"
        assert resolved.is_file(), f"{path.name}: {src} does not exist"


def test_make_lab_serves_as_root_and_says_which_url_to_open(tmp_path):
    """`make lab` on a free port (as root in CI's containers: --allow-root is added): it makes the
    student copies, keeps (and reports) the learner's changed one, the URL it prints opens the lab,
    and the student copies are there."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    copies = tmp_path / "student"
    copies.mkdir()
    mine = copies / PATHS[1].name
    mine.write_text("my own work")
    port = student.free_port(20000 + os.getpid() % 20000)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython")]:
        env[var] = str(tmp_path / sub)
    # STAMP= and BIN=: this environment's Python, not a fresh .venv
    command = ["make", "-s", "-C", str(REPO), "lab", "STAMP=", f"BIN={Path(sys.executable).parent}",
               f"STUDENT_DIR={copies}", f"LAB_PORT={port}", "LAB_ARGS=--ServerApp.ip=127.0.0.1"]
    log = tmp_path / "lab.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, start_new_session=True)
    try:
        url, deadline = None, time.monotonic() + 60
        while time.monotonic() < deadline:
            match = re.search(r"open (http://127\.0\.0\.1:\d+/lab\?token=\w+)", log.read_text(errors="replace"))
            if match:
                url = match.group(1)
                try:
                    with urllib.request.urlopen(url, timeout=5) as response:
                        page = response.read().decode()
                    break
                except (urllib.error.URLError, ConnectionError, OSError):
                    pass
            if process.poll() is not None:
                pytest.fail(f"make lab exited with {process.returncode}:\n{log.read_text(errors='replace')}")
            time.sleep(0.5)
        else:
            pytest.fail(f"make lab did not serve within 60 s:\n{log.read_text(errors='replace')}")
        assert f":{port}/" in url and "JupyterLab" in page
        token = url.rsplit("token=", 1)[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents/{PATHS[0].name}?token={token}",
                                    timeout=5) as response:
            served = json.loads(response.read())
        assert served["name"] == PATHS[0].name
        cells = served["content"]["cells"]
        assert "Student copy" in cells[0]["source"]
        assert not any(BEGIN in c["source"] for c in cells if c["cell_type"] == "code")
        log_text = log.read_text(errors="replace")
        assert f"kept your copy {mine}" in log_text and mine.read_text() == "my own work"
        assert sorted(p.name for p in copies.glob("*.ipynb")) == [p.name for p in PATHS]
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)



# ----------------------------------------------------------------------------- bad destinations and sources
def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


@pytest.fixture
def two_notebooks(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for path in PATHS[:2]:
        shutil.copy(path, src / path.name)
    return src


def test_a_file_as_the_destination_is_a_clear_error(two_notebooks, tmp_path, capsys):
    afile = tmp_path / "student.txt"
    afile.write_text("mine")
    assert student.main([str(two_notebooks), str(afile)]) == 1
    err = _one_line_error(capsys)
    assert str(afile) in err and "not a directory" in err
    assert afile.read_text() == "mine"
    assert student.main([str(two_notebooks), str(afile / "inside")]) == 1  # a file on the way there
    err = _one_line_error(capsys)
    assert str(afile) in err and "not a directory" in err


@pytest.mark.parametrize("content", [
    b"not json at all",
    b'{"cells": 5}',
    b"{}",
    b"[1, 2]",
    b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code"}]}',
    b"\xff\xfe\x00 binary",
    b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [',
], ids=["text", "cells-not-a-list", "empty-object", "a-list", "cell-without-source", "binary", "truncated"])
def test_a_corrupt_source_notebook_is_a_clear_error_and_nothing_is_written(two_notebooks, tmp_path, capsys, content):
    bad = two_notebooks / "03b_broken.ipynb"
    bad.write_bytes(content)
    dest = tmp_path / "out"
    before = _snapshot(two_notebooks)
    assert student.main([str(two_notebooks), str(dest)]) == 1
    err = _one_line_error(capsys)
    assert str(bad) in err and "not a valid notebook" in err
    assert not dest.exists()  # read everything first: nothing half written
    assert _snapshot(two_notebooks) == before


@pytest.mark.parametrize("spelling", ["same", "dot", "symlink"])
@pytest.mark.parametrize("force", [True, False])
def test_the_notebooks_directory_as_the_destination_is_refused_before_anything_changes(
        two_notebooks, tmp_path, capsys, spelling, force):
    """`--force` with source = destination used to back the notebooks up and write stripped copies
    over them: the solutions gone from the source notebooks."""
    dest = {"same": two_notebooks, "dot": two_notebooks / ".." / two_notebooks.name / "."}.get(spelling)
    if spelling == "symlink":
        dest = tmp_path / "link"
        dest.symlink_to(two_notebooks, target_is_directory=True)
    before = _snapshot(two_notebooks)
    assert student.main([str(two_notebooks), str(dest)] + ["--force"] * force) == 1
    err = _one_line_error(capsys)
    assert "the notebooks directory itself" in err
    assert _snapshot(two_notebooks) == before  # solutions intact, no NAME.ipynb.bak-N
    with pytest.raises(ValueError, match="notebooks directory itself"):
        student.write_student_copies(two_notebooks, dest, force=force)
    assert _snapshot(two_notebooks) == before


def test_bad_arguments_exit_non_zero_without_a_traceback(two_notebooks, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    out = subprocess.run([sys.executable, "-m", "gemm_kernels.lab.student", str(two_notebooks), str(afile)],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 1 and "Traceback" not in out.stderr and out.stderr.startswith("error: "), out.stderr


# ----------------------------------------------------------------------------- copies that survive course updates
def _erratum(path: Path, old: str, new: str, added: str) -> None:
    """The teacher's commit: ``old`` becomes ``new`` in a markdown cell, and a new markdown cell after it."""
    nb = read_nb(path)
    index = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and old in c.source)
    nb.cells[index].source = nb.cells[index].source.replace(old, new)
    nb.cells.insert(index + 1, nbformat.v4.new_markdown_cell(added))
    nbformat.write(nb, path)


def test_a_copy_records_its_source(two_notebooks, tmp_path):
    copies = student.write_student_copies(two_notebooks, tmp_path / "out")
    for source, target in zip(sorted(two_notebooks.glob("*.ipynb")), copies):
        record = read_nb(target).metadata[student.RECORD]
        nb = read_nb(source)
        assert record["source"] == source.name and record["source_hash"] == student.source_hash(nb)
        assert record["answers"] == [nb.cells[i].id for i in student.solution_cells(nb)]
        nb.cells[0].metadata["note"] = "metadata and outputs do not count"
        assert student.source_hash(nb) == record["source_hash"]


def test_after_an_erratum_untouched_copies_are_refreshed_and_edited_ones_reported_then_merged(
        two_notebooks, tmp_path, capsys):
    """The teacher fixes a sentence of 00 (which the learner has answered in) and of 01 (which they
    have not opened): after the pull, `make student` refreshes 01, keeps 00 and says what changed;
    `make student MERGE=1` brings the fix into 00 with the learner's answer, note and edit intact."""
    dest = tmp_path / "student"
    assert student.main([str(two_notebooks), str(dest)]) == 0
    first, second = (dest / p.name for p in PATHS[:2])
    mine = read_nb(first)
    answer = next(c for c in mine.cells if c.cell_type == "code" and STUB in c.source)
    answer.source = answer.source.replace(STUB, "programs = -(-n // block)\n    return programs, programs * block - n")
    lesson = next(c for c in mine.cells if c.cell_type == "code" and c.id != student.SETUP_ID and STUB not in c.source)
    lesson.source += "\n# my note on the lesson"
    note = nbformat.v4.new_markdown_cell("my own note after the answer")
    mine.cells.insert(mine.cells.index(answer) + 1, note)
    nbformat.write(mine, first)
    edited = first.read_text()
    capsys.readouterr()

    _erratum(two_notebooks / first.name, "that is `(3, 72)`", "that is `(3, 3 * 1024 - 3000)` = `(3, 72)`",
             "A new remark on exercise 1.")
    _erratum(two_notebooks / second.name, "Use\nbroadcasting, not loops.", "Use broadcasting (no loops).",
             "A new remark on exercise 1 of 01.")
    assert student.main([str(two_notebooks), str(dest)]) == 0
    out = capsys.readouterr().out
    assert f"refreshed {second}" in out and second.read_text() == student.student_text(two_notebooks / second.name)
    assert first.read_text() == edited and f"kept {first}" in out
    assert "changed: the markdown cell under '### Exercise 1: the launch grid'" in out
    assert "added: a markdown cell under '### Exercise 1: the launch grid'" in out
    assert "MERGE=1" in out and "my note" not in out  # the learner's own edits are not the course's changes

    assert student.main([str(two_notebooks), str(dest), "--merge"]) == 0
    out = capsys.readouterr().out
    assert f"merged the course's changes into your copy {first}" in out
    assert (dest / f"{first.name}.bak-1").read_text() == edited
    merged = read_nb(first)
    sources = [c.source for c in merged.cells]
    assert any("3 * 1024 - 3000" in s for s in sources) and "A new remark on exercise 1." in sources
    assert answer.source in sources and lesson.source in sources
    assert sources.index(note.source) == sources.index(answer.source) + 1
    fresh = nbformat.reads(student.student_text(two_notebooks / first.name), as_version=4)
    assert merged.metadata[student.RECORD] == fresh.metadata[student.RECORD]  # made from the new source now
    assert [r.status for r in student.exercise_results(merged, first.name)][0] == "correct"

    assert student.main([str(two_notebooks), str(dest)]) == 0  # merged: kept, nothing left to report
    out = capsys.readouterr().out
    assert f"kept {first}" in out and "changed:" not in out and first.read_text() == nbformat.writes(merged) + "\n"


def test_a_copy_that_was_only_run_is_kept(two_notebooks, tmp_path):
    """Outputs are the learner's too: a copy run and saved is not refreshed."""
    dest = tmp_path / "student"
    student.write_student_copies(two_notebooks, dest)
    target = dest / PATHS[1].name
    nb = read_nb(target)
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("stream", text="ran")]
    nbformat.write(nb, target)
    _erratum(two_notebooks / target.name, "Use\nbroadcasting, not loops.", "Use broadcasting.", "A remark.")
    done = student.write_student_copies(two_notebooks, dest)
    assert done.kept == [target] and done.changes[target]
