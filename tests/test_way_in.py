"""The way into the course: `make lab` serves the student copies, answers stay hidden until a
learner asks for them, hints never point at cells a student copy lacks, notebook 08 teaches
Gluon before asking for it, and `gk.lab.progress()` keeps which exercises have passed."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import nbformat
import pytest

import gemm_kernels as gk
progress_module = importlib.import_module("gemm_kernels.lab.progress")  # the module (gk.lab.progress is the function)
from gemm_kernels.lab import student
from gemm_kernels.lab.progress import ENV, NOTEBOOKS, exercises, progress, record

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = REPO / "notebooks"
PATHS = student.notebook_paths(NOTEBOOK_DIR)
EXERCISE_MODULES = {nb: f"gemm_kernels.lab.exercises.{nb.split('_', 1)[1]}" for nb in NOTEBOOKS}


def read_nb(path):
    return nbformat.read(path, as_version=4)


def code_trees(nb):
    """(cell index, AST) of every code cell."""
    return [(i, ast.parse(c.source)) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def all_checks():
    """(notebook, check function) of every exercise check of the course."""
    for notebook, module in EXERCISE_MODULES.items():
        mod = importlib.import_module(module)
        for name, fn in vars(mod).items():
            if name.startswith("check_") and hasattr(fn, "hints"):
                yield notebook, fn


# ----------------------------------------------------------------------------- answers stay hidden
def _reference_answers() -> set[str]:
    """Every ``*_ref`` function defined in an exercise module: the checks' own answers (not the
    package's references such as ``gk.matmul_ref``, which they import)."""
    names = set()
    for module in EXERCISE_MODULES.values():
        names |= {n for n, fn in vars(importlib.import_module(module)).items()
                  if n.endswith("_ref") and callable(fn)
                  and str(getattr(fn, "__module__", "")).startswith("gemm_kernels.lab.exercises")}
    return names


#: what a notebook may import from its exercise module besides check_*: harnesses and helpers
#: the exercise text tells the learner to use, or that a lesson runs (never an answer)
EXERCISE_HELPERS = {"apply_elementwise", "leaky_relu_variant", "matmul_tile", "run_segment", "gpu_note",
                    "run_wgrad_tile_lookup", "run_block_scaled"}


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_no_reference_answer_is_imported_or_used_by_a_notebook(path):
    """The checks' answers (``ring_phases_ref``, ...) are never imported, named or printed in a
    notebook: the learner's copy would show them (or let `return ring_phases_ref(q, s)` pass)."""
    refs = _reference_answers()
    assert "ring_phases_ref" in refs and "launch_stats_ref" in refs  # the scan sees the modules
    for index, tree in code_trees(read_nb(path)):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gemm_kernels.lab.exercises"):
                for alias in node.names:
                    assert alias.name.startswith("check_") or alias.name in EXERCISE_HELPERS, (
                        f"{path.name}, cell {index}: imports {alias.name} from {node.module}: only check_* and the "
                        f"helpers {sorted(EXERCISE_HELPERS)} (never an answer)")
            if isinstance(node, ast.ImportFrom) and node.module == "gemm_kernels.lab":
                assert all(a.name != "exercises" for a in node.names), f"{path.name}, cell {index}: imports exercises"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("gemm_kernels.lab.exercises") for a in node.names), (
                    f"{path.name}, cell {index}: imports an exercise module whole (its answers with it)")
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            assert name not in refs, f"{path.name}, cell {index}: uses the reference answer {name}"


def _normal(name: str) -> str:
    """A function's name as an exercise would ask for it: ``_matmul_kernel``, ``my_matmul`` -> ``matmul``."""
    name = name.lstrip("_")
    name = name[3:] if name.startswith("my_") else name
    return name[:-7] if name.endswith("_kernel") else name


def _shown_functions(tree) -> set[str]:
    """Names of the functions whose source a cell prints: show_source(...), inspect.getsource(...),
    kernel_source(...)."""
    shown = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if func in ("show_source", "getsource", "getsourcelines", "kernel_source"):
            for arg in node.args:
                target = arg.attr if isinstance(arg, ast.Attribute) else getattr(arg, "id", None)
                if target:
                    shown.add(target)
    return shown


def _exercises_of(nb):
    """(index of the exercise's heading, names it asks for): the check's title and every function
    a solution cell of that exercise defines."""
    headings = [i for i, c in enumerate(nb.cells)
                if c.cell_type == "markdown" and re.search(r"^###\s*Exercise\s*\d+", c.source, re.MULTILINE)]
    found = []
    for k, start in enumerate(headings):
        end = headings[k + 1] if k + 1 < len(headings) else len(nb.cells)
        names = set()
        for cell in nb.cells[start:end]:
            if cell.cell_type != "code":
                continue
            tree = ast.parse(cell.source)
            if student.has_solution(cell.source):
                names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "id", "").startswith("check_"):
                    names.add(node.func.id[len("check_"):])
        found.append((start, names))
    return found


#: (notebook, exercise answer) whose package source a lesson reads on purpose, with why (02's lesson
#: printed its Exercise 3's answer this way; tests/test_lessons_hold_no_answers.py refuses that now)
READ_THEN_WRITE: dict = {}


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_no_solution_source_is_shown_before_its_exercise(path):
    """No cell before an exercise prints the source of the function it asks for (09 printed
    ``moe_wgrad.wgrad_tile``, exercise 2's answer, in the lesson)."""
    nb = read_nb(path)
    for start, asked in _exercises_of(nb):
        wanted = {_normal(n) for n in asked} - {""}
        for index, tree in code_trees(nb):
            if index >= start:
                break
            for shown in _shown_functions(tree):
                if _normal(shown) in wanted and (path.name, _normal(shown)) not in READ_THEN_WRITE:
                    pytest.fail(f"{path.name}, cell {index}: shows the source of {shown} before the exercise in "
                                f"cell {start}, which asks for {sorted(asked)}")


def test_notebook_09_shows_wgrad_tile_only_after_its_exercise():
    nb = read_nb(NOTEBOOK_DIR / "09_moe_training.ipynb")
    start = _exercises_of(nb)[-1][0]
    before = "\n".join(c.source for c in nb.cells[:start] if c.cell_type == "code")
    assert "moe_wgrad._grouped_mm_wgrad_kernel" in before  # the lesson still reads the kernel
    assert not re.search(r"show_source\([^)]*wgrad_tile\b", before)
    assert any("show_source(moe_wgrad.wgrad_tile)" in c.source for c in nb.cells[start:])  # offered after it


#: words of a hint that point at something a student copy does not have
CELL_REFERENCE = re.compile(r"\bcells?\b|\bsee notebook|\bsolution (above|below)|solved notebook", re.IGNORECASE)


@pytest.mark.parametrize("notebook,check", list(all_checks()), ids=lambda v: getattr(v, "__name__", v))
def test_hints_are_self_contained(notebook, check):
    """Every hint, the level-3 solution above all, reads on its own in a student copy: no
    "see notebook 02's solution cell"."""
    for level in (1, 2, 3):
        text = check.hint(level).text
        assert text.strip(), f"{check.__name__}: hint {level} is empty"
        match = CELL_REFERENCE.search(text)
        assert match is None, f"{check.__name__}: hint {level} points at {match.group(0)!r}: {text[:120]}"


def test_the_matmul_solution_hint_is_a_whole_kernel():
    from gemm_kernels.lab.exercises.naive_tiling import check_my_matmul

    text = check_my_matmul.hint(level=3).text
    for piece in ("tl.program_id", "tl.float32", "for k in range(0, K, BLOCK_K)", "tl.dot", "tl.store", "grid",
                  "a.stride()", "return c"):
        assert piece in text, piece


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_student_copies_hold_no_solution_text_in_markdown(path):
    """A student copy never tells the learner to look at a solution it does not hold."""
    copy = student.student_notebook(read_nb(path), path.name)
    text = "\n".join(c.source for c in copy.cells if c.cell_type == "markdown")
    assert not re.search(r"solution (cell|above|below)", text, re.IGNORECASE)
    assert "make student` gives you copies" not in text  # the old way in, replaced by make lab


# ----------------------------------------------------------------------------- the way in: README and make lab
def test_readme_quick_start_serves_the_student_copies():
    readme = (REPO / "README.md").read_text()
    assert len(readme.encode()) < 10240, "README.md must stay under 10,240 bytes"
    quick = readme.split("## Quick start", 1)[1]
    first = re.search(r"```bash\n(.+?)\n", quick).group(1)
    assert first.split("#")[0].strip() == "make lab"
    assert "student/" in first
    assert "make lab-solutions" in quick and "teachers" in quick.split("## ", 1)[0]
    assert "gk.lab.progress()" in quick.split("## ", 1)[0]


def _make_dry_run(target, **variables):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    command = ["make", "-n", "-s", "-C", str(REPO), target, "STAMP=", "BIN=/x/bin",
               *(f"{k}={v}" for k, v in variables.items())]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout


def test_make_lab_serves_student_copies_and_lab_solutions_the_notebooks():
    lab = _make_dry_run("lab")
    assert "gemm_kernels.lab.student --serve notebooks student" in lab
    assert "--serve notebooks /tmp/mine" in _make_dry_run("lab", STUDENT_DIR="/tmp/mine")
    assert _make_dry_run("lab-student") == lab  # the former name still works
    solutions = _make_dry_run("lab-solutions")
    assert "gemm_kernels.lab.student --lab notebooks" in solutions and "--serve" not in solutions
    assert "--force" not in lab + solutions


def test_serve_makes_missing_copies_keeps_changed_ones_and_says_so(tmp_path, monkeypatch, capsys):
    """`make lab` (--serve): the copies that are missing are written, a learner's changed copy is
    kept as it is and reported, and JupyterLab opens on the copies' folder."""
    served = []
    monkeypatch.setattr(student, "serve", lambda root, port=None, extra=(): served.append((root, port, extra)) or 0)
    dest = tmp_path / "student"
    assert student.main([str(NOTEBOOK_DIR), str(dest), "--serve"]) == 0
    assert served == [(dest, None, [])]
    assert sorted(p.name for p in dest.glob("*.ipynb")) == [p.name for p in PATHS]
    mine = dest / PATHS[1].name
    nb = read_nb(mine)
    stub = next(c for c in nb.cells if c.cell_type == "code" and student.STUB in c.source)
    stub.source = stub.source.replace(student.STUB, "return 42  # mine")
    nbformat.write(nb, mine)
    (dest / PATHS[2].name).unlink()
    capsys.readouterr()

    assert student.main([str(NOTEBOOK_DIR), str(dest), "--serve", "--port", "9999", "--ServerApp.ip=0.0.0.0"]) == 0
    out = capsys.readouterr().out
    assert "return 42  # mine" in mine.read_text()
    assert f"kept your copy {mine}" in out and "never overwritten" in out
    assert (dest / PATHS[2].name).exists() and f"wrote {dest / PATHS[2].name}" in out
    assert served[-1] == (dest, 9999, ["--ServerApp.ip=0.0.0.0"])


def test_the_student_banner_names_the_way_in():
    copy = student.student_notebook(read_nb(PATHS[0]), PATHS[0].name)
    banner = copy.cells[0].source
    assert "Student copy" in banner and "make lab" in banner and "gk.lab.progress()" in banner


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_every_notebook_ends_its_exercises_with_the_progress_line(path):
    nb = read_nb(path)
    assert nb.cells[-1].cell_type == "markdown" and "gk.lab.progress()" in nb.cells[-1].source
    assert student.exercises_heading(nb) < len(nb.cells) - 1


def test_notebook_00_introduces_make_lab_and_progress():
    text = "\n".join(c.source for c in read_nb(PATHS[0]).cells if c.cell_type == "markdown")
    assert "`make lab` opens your own copies" in text and "gk.lab.progress()" in text


# ----------------------------------------------------------------------------- 08's Gluon primer
def _primer_range(nb):
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                 and c.source.startswith("## Before the exercises: a Gluon primer"))
    return start, student.exercises_heading(nb)


def test_the_gluon_primer_comes_before_the_exercises_and_covers_each_idea():
    nb = read_nb(NOTEBOOK_DIR / "08_warp_specialization.ipynb")
    start, exercises_at = _primer_range(nb)
    assert start < exercises_at
    primer = nb.cells[start:exercises_at]
    prose = "\n".join(c.source for c in primer if c.cell_type == "markdown")
    code = "\n".join(c.source for c in primer if c.cell_type == "code")
    for idea in ("### Layouts", "BlockedLayout", "allocate_shared_memory", "TensorDescriptor", "mbarrier.init",
                 "mbarrier.expect", "mbarrier.wait", "mbarrier.arrive", "warpgroup_mma", "is_async",
                 "warpgroup_mma_wait", "gl.warp_specialize"):
        assert idea in prose, idea
    assert "compile_examples()" in code
    for pattern in ("ld\\\\.global", "cp\\\\.async\\\\.bulk\\\\.tensor", "wgmma\\\\.", "setmaxnreg\\\\.dec"):
        assert re.search(pattern, code), pattern
    assert not any(student.has_solution(c.source) for c in primer if c.cell_type == "code")


def _gluon_names(path: Path) -> set[str]:
    """``gl.x``, ``mbarrier.x``, ``tma.x`` and the hopper names a module calls."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) in ("gl", "mbarrier", "tma", "gluon"):
            names.add(f"{node.value.id}.{node.attr}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("triton.experimental"):
            names |= {f"{node.module}:{a.name}" for a in node.names}
    return names


def test_the_primer_uses_only_the_gluon_api_of_matmul_ws():
    """matmul_ws runs on every Triton the package supports (3.6 to 3.9): the primer sticks to the
    calls it makes, plus BlockedLayout (checked to compile on 3.6 and 3.9)."""
    here = REPO / "gemm_kernels"
    extra = _gluon_names(here / "lab" / "gluon_primer.py") - _gluon_names(here / "kernels" / "matmul_ws.py")
    assert extra <= {"gl.BlockedLayout"}, sorted(extra)


def test_the_primer_kernels_compile_for_sm_90_and_show_each_idea():
    """All four kernels in one compile (a few seconds): the PTX the primer prints is there, on this
    Triton (CI also runs this on the oldest supported one)."""
    from gemm_kernels.lab import gluon_primer as primer

    views = primer.compile_examples()
    assert list(views) == ["layouts", "tma", "wgmma", "partitions"]
    expected = {
        "layouts": [r"ld\.global\.v4", r"st\.global\.v4"],
        "tma": [r"cp\.async\.bulk\.tensor", r"mbarrier\.init", r"mbarrier\.arrive\.expect_tx",
                r"mbarrier\.try_wait\.parity"],
        "wgmma": [r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.f16\.f16", r"wgmma\.commit_group",
                  r"wgmma\.wait_group"],
        "partitions": [r"\.reqntid 256", r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40", r"mbarrier\.arrive",
                       r"mbarrier\.try_wait\.parity"],
    }
    for name, patterns in expected.items():
        for pattern in patterns:
            lines = primer.ptx_lines(views[name], pattern, 1)
            assert lines and len(lines[0]) <= 100, (name, pattern)
    blocked = "#ttg.blocked<{sizePerThread = [1, 8], threadsPerWarp = [4, 8], warpsPerCTA = [4, 1]"
    assert blocked in views["layouts"].ttgir
    assert re.search(r"partition0\(.*num_warps\(1\)", views["partitions"].ttgir)
    assert views["wgmma"].highlights()["wgmma"] == 4


# ----------------------------------------------------------------------------- gk.lab.progress()
@pytest.fixture
def progress_file(tmp_path, monkeypatch):
    path = tmp_path / "progress" / "progress.json"
    monkeypatch.setenv(ENV, str(path))
    monkeypatch.setattr(progress_module, "_warned", set())
    return path


def _stored(path: Path) -> dict:
    return json.loads(path.read_text())["exercises"]


def test_every_exercise_is_listed_as_the_notebooks_ask_it():
    assert [p.stem for p in PATHS] == list(NOTEBOOKS)
    found = exercises()
    assert len(found) >= 31  # the course's 31, and any added since
    assert len({(e.notebook, e.title) for e in found}) == len({e.title for e in found}) == len(found)
    for path in PATHS:
        calls = [node.func.id[len("check_"):] for _, tree in code_trees(read_nb(path)) for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and getattr(node.func, "id", "").startswith("check_")]
        listed = [e for e in found if e.notebook == path.stem]
        assert [e.title for e in listed] == calls, path.name
        assert [e.number for e in listed] == list(range(1, len(calls) + 1))
        assert all(e.heading for e in listed), f"{path.name}: an exercise without its '### Exercise N:' heading"


def test_a_check_records_its_latest_status_and_progress_shows_it(progress_file):
    from gemm_kernels.lab.exercises.start_here import check_launch_stats

    def right(n, block):
        return -(-n // block), -(-n // block) * block - n

    assert not progress_file.exists()
    assert progress().passed == 0
    assert check_launch_stats(right).passed
    entry = _stored(progress_file)["00_start_here/launch_stats"]
    assert entry["status"] == "correct" and entry["passed"] == entry["updated"]
    shown = progress()
    assert shown.passed == 1 and shown.status("00_start_here", "launch_stats") == "correct"
    assert shown.status("00_start_here", "axpy") == "not attempted"
    total = len(exercises())
    assert f"1 of {total} exercises passed" in str(shown) and str(progress_file) in str(shown)

    assert check_launch_stats(lambda n, block: (1, 2)).status == "wrong"
    def stub(n, block):
        raise NotImplementedError("your turn")  # a student copy's stub (returning None is a missing return)

    assert check_launch_stats(stub).status == "not attempted"
    shown = progress()  # a pass stands; the later try is shown beside it
    assert shown.passed == 1 and shown.status("00_start_here", "launch_stats") == "not attempted"
    text = str(shown)
    assert f"1 of {total} exercises passed" in text
    assert re.search(r"\[ok\] +\d+\. check_launch_stats - the launch grid: passed on \d{4}-\d\d-\d\d; your latest "
                     r"try: not attempted", text)
    html = shown._repr_html_()
    assert "<table>" in html and "09_moe_training" in html and "check_wgrad_tile" in html


def test_progress_lists_every_notebook_in_text_and_html(progress_file):
    record("gemm_kernels.lab.exercises.moe_training", "wgrad_tile", "correct")
    record("gemm_kernels.lab.exercises.warp_specialization", "consumer_mainloop", "structure only")
    record("gemm_kernels.lab.exercises.warp_specialization", "ring_phases", "a status from the future")
    shown = progress()
    text, html = str(shown), shown._repr_html_()
    for notebook in NOTEBOOKS:
        assert f"{notebook}  (" in text and f">{notebook}</th>" in html
    assert "09_moe_training  (1/2)" in text and "[ok]" in text
    assert "[~]  2. check_consumer_mainloop" in text and "structure only" in text  # not counted as passed
    assert "[?]  1. check_ring_phases" in text  # a status the table does not know: shown as it is
    assert shown.passed == 1


def test_checks_outside_the_course_and_odd_values_are_harmless(progress_file):
    record("tests.somewhere", "launch_stats", "correct")  # not an exercise module
    record("gemm_kernels.lab.exercises.nowhere", "x", "correct")
    assert not progress_file.exists()
    record("gemm_kernels.lab.exercises.start_here", "<b>axpy</b>", "x" * 500)
    assert len(_stored(progress_file)["00_start_here/<b>axpy</b>"]["status"]) == 40
    data = json.loads(progress_file.read_text())
    data["exercises"]["00_start_here/launch_stats"] = {"status": "correct", "updated": 5, "passed": ["x"]}
    progress_file.write_text(json.dumps(data))
    shown = progress()  # hand-edited values of the wrong type: shown without them, no crash
    assert shown.status("00_start_here", "launch_stats") == "correct" and str(shown) and shown._repr_html_()


@pytest.mark.parametrize("content", [b"", b"not json", b"[1, 2]", b'{"version": 1}', b'{"version": 2, "exercises": {}}',
                                     b'{"version": 1, "exercises": {"a": 5}}', b"\xff\xfe\x00 binary",
                                     b'{"version": 1, "exercises": {}' + b" " * (1 << 20) + b"}"],
                         ids=["empty", "text", "list", "no-exercises", "future-version", "bad-entry", "binary", "huge"])
def test_a_corrupt_file_is_set_aside_with_a_warning_and_a_new_one_started(progress_file, content):
    progress_file.parent.mkdir(parents=True)
    progress_file.write_bytes(content)
    with pytest.warns(RuntimeWarning, match="not a progress record"):
        shown = progress()  # reading only: a warning, the file left as it is
    assert shown.passed == 0 and progress_file.read_bytes() == content
    with pytest.warns(RuntimeWarning, match="starting a new one"):
        record("gemm_kernels.lab.exercises.start_here", "axpy", "correct")
    assert progress_file.with_name("progress.json.corrupt").read_bytes() == content
    assert _stored(progress_file)["00_start_here/axpy"]["status"] == "correct"


def test_an_unwritable_place_is_a_warning_and_the_check_still_answers(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("a file where a folder should be")
    monkeypatch.setenv(ENV, str(afile / "progress.json"))
    monkeypatch.setattr(progress_module, "_warned", set())
    from gemm_kernels.lab.exercises.start_here import check_launch_stats

    with pytest.warns(RuntimeWarning, match="was not saved"):
        result = check_launch_stats(lambda n, block: (1, 2))
    assert result.status == "wrong"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once is enough
        assert check_launch_stats(lambda n, block: (1, 2)).status == "wrong"
    with pytest.warns(RuntimeWarning, match="cannot read"):
        assert progress().passed == 0


@pytest.mark.parametrize("place", ["unwritable", "corrupt"])
def test_warnings_turned_into_errors_never_make_a_check_raise(tmp_path, monkeypatch, place):
    path = tmp_path / "afile" / "progress.json"
    if place == "unwritable":
        (tmp_path / "afile").write_text("a file where a folder should be")
    else:
        path.parent.mkdir()
        path.write_text("not a record")
    monkeypatch.setenv(ENV, str(path))
    monkeypatch.setattr(progress_module, "_warned", set())
    from gemm_kernels.lab.exercises.start_here import check_launch_stats

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_launch_stats(lambda n, block: (1, 2)).status == "wrong"


def test_a_write_that_fails_half_way_leaves_the_old_record_whole(progress_file, monkeypatch):
    record("gemm_kernels.lab.exercises.start_here", "axpy", "correct")
    before = progress_file.read_bytes()

    def broken_dump(data, f, **kwargs):
        f.write('{"version": 1, "exerc')
        raise OSError("disk full")

    monkeypatch.setattr(progress_module.json, "dump", broken_dump)
    with pytest.warns(RuntimeWarning, match="disk full"):
        record("gemm_kernels.lab.exercises.start_here", "launch_stats", "correct")
    assert progress_file.read_bytes() == before
    assert sorted(p.name for p in progress_file.parent.iterdir()) == ["progress.json", "progress.json.lock"]


def test_records_at_the_same_time_lose_nothing(progress_file):
    titles = [e.title for e in exercises()[:12]]
    modules = {e.title: EXERCISE_MODULES[e.notebook] for e in exercises()}

    def work(title):
        for status in ("wrong", "wrong", "correct"):
            record(modules[title], title, status)

    threads = [threading.Thread(target=work, args=(t,)) for t in titles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert progress().passed == 12


def test_nothing_is_recorded_under_pytest_or_from_the_solved_notebooks(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    default = tmp_path / ".gemm_kernels_progress.json"
    assert progress_module.progress_path() == default  # beside the copies the kernel runs in
    assert "PYTEST_CURRENT_TEST" in os.environ
    record("gemm_kernels.lab.exercises.start_here", "axpy", "correct")
    assert not default.exists()  # CI and `make test` leave a learner's record alone
    assert "not recorded" in str(progress())

    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    monkeypatch.chdir(NOTEBOOK_DIR)  # a kernel of a solved notebook runs here
    record("gemm_kernels.lab.exercises.start_here", "axpy", "correct")
    assert not default.exists() and not (NOTEBOOK_DIR / ".gemm_kernels_progress.json").exists()
    monkeypatch.chdir(tmp_path)  # a student copy's kernel: recorded
    record("gemm_kernels.lab.exercises.start_here", "axpy", "correct")
    assert _stored(default)["00_start_here/axpy"]["status"] == "correct"


def test_each_copy_of_the_course_keeps_its_own_progress(tmp_path, monkeypatch):
    """Two learners' student folders on one machine (or a fresh copy): each sees its own checks."""
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    for name in ("alice", "bob"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "alice")
    record("gemm_kernels.lab.exercises.start_here", "axpy", "correct")
    assert progress().passed == 1
    monkeypatch.chdir(tmp_path / "bob")
    assert progress().passed == 0 and progress().status("00_start_here", "axpy") == "not attempted"


def test_progress_can_be_switched_off(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "off")
    monkeypatch.chdir(tmp_path)
    assert progress_module.progress_path() is None
    record("gemm_kernels.lab.exercises.start_here", "axpy", "correct")
    assert list(tmp_path.iterdir()) == []
    assert "progress is not kept" in str(progress())


def test_gk_lab_progress_from_a_fresh_interpreter(tmp_path):
    """`import gemm_kernels as gk; gk.lab.progress()`: gk.lab loads on first use, and importing
    the progress module afterwards does not replace the function."""
    code = ("import gemm_kernels as gk; p = gk.lab.progress(); import gemm_kernels.lab.progress; "
            "assert callable(gk.lab.progress); print(type(p).__name__, p.passed, len(p.rows))")
    env = dict(os.environ, **{ENV: str(tmp_path / "p.json")})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["Progress", "0", str(len(exercises()))]
    assert gk.lab.progress is progress
