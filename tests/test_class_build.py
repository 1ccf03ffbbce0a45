"""The class release (gemm_kernels.lab.class_build): the wheel students install holds no reference
answer and no hint past the nudge, its checks still run, and every hand-out link serves the class
copies only (issue 48: solutions out of reach in a class)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import nbformat
import pytest

from gemm_kernels.lab import class_build
from gemm_kernels.lab.published import DEFAULT_REPO

REPO = Path(__file__).resolve().parents[1]
EXERCISES = REPO / "gemm_kernels" / "lab" / "exercises"
CLASS_REPO, PIN = "prof/gemm-class", "fall2026"


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    out = tmp_path_factory.mktemp("class") / "release"
    found = class_build.build(out, CLASS_REPO, PIN, ["00_start_here", "02_naive_tiling"])
    (wheel,) = (out / "wheels").glob("*.whl")
    site = out.parent / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    return out, found, wheel, site


def _answers_in_the_course():
    """Each ``*_ref`` body's lines (docstring left out) and each hint's approach and solution."""
    bodies, hints = [], []
    for path in sorted(EXERCISES.glob("[!_]*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_ref"):
                body = node.body[1:] if ast.get_docstring(node) else node.body
                bodies.append((node.name, [ast.unparse(stmt) for stmt in body]))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Hints":
                values = node.args[1:] + [k.value for k in node.keywords if k.arg in ("approach", "solution")]
                hints += [ast.literal_eval(v) for v in values if isinstance(v, ast.Constant)]
    return bodies, hints


def test_the_wheel_holds_no_reference_answer_and_no_hint_past_the_nudge(release):
    _, _, wheel, _ = release
    with zipfile.ZipFile(wheel) as zf:
        text = "\n".join(zf.read(n).decode("utf-8", "replace") for n in zf.namelist() if n.endswith(".py"))
        assert "gemm_kernels/_class_build.py" in zf.namelist()
    bodies, hints = _answers_in_the_course()
    assert len(bodies) >= 20 and len(hints) >= 60  # every check module was read
    normalized = {" ".join(line.split()) for line in text.splitlines()}
    # a reference is in the wheel when every line of its body is (one line alone may be a check's too)
    leaked = [name for name, stmts in bodies
              if all(" ".join(line.split()) in normalized for stmt in stmts for line in stmt.splitlines())]
    assert not leaked, leaked
    assert not [h for h in hints if h in text], "a hint past the nudge is in the wheel"


def test_in_a_class_build_checks_run_but_the_references_are_gone(release):
    """From the wheel alone (a fresh interpreter): exam mode is on whatever the environment says, a plain
    answer reads "handed in" (right or wrong alike), a reference cannot be had even through the
    module's __dict__, hint 3 is off, and a kernel answer is still checked against torch."""
    _, _, _, site = release
    probe = textwrap.dedent('''
        import json, sys, torch, triton, triton.language as tl
        import gemm_kernels
        assert gemm_kernels.__file__.startswith(sys.argv[1]), gemm_kernels.__file__
        from gemm_kernels.lab import exam
        from gemm_kernels.lab.exercises import start_here as sh
        out = {"class": exam.CLASS_BUILD, "exam": exam.ON}
        out["right"] = sh.check_launch_stats(lambda n, b: ((n + b - 1) // b, (n + b - 1) // b * b - n)).status
        out["wrong"] = sh.check_launch_stats(lambda n, b: (1, 2)).status
        out["hint3"] = sh.check_launch_stats.hint(3).text
        try:
            sh.__dict__["launch_stats_ref"](10, 4)
            out["ref"] = "returned"
        except Exception as exc:
            out["ref"] = type(exc).__name__

        @triton.jit
        def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
                     mask=mask)

        def axpy(alpha, x, y):
            out = torch.empty_like(x)
            axpy_kernel[(triton.cdiv(x.numel(), 64),)](x, y, out, alpha, x.numel(), BLOCK=64)
            return out

        out["axpy"] = sh.check_axpy(axpy).status
        print(json.dumps(out))
    ''')
    script = site.parent / "probe.py"
    script.write_text(probe)
    done = subprocess.run([sys.executable, str(script), str(site)], capture_output=True, text=True, timeout=600,
                          cwd=site.parent, env={**_env(), "PYTHONPATH": str(site), "GEMM_KERNELS_EXAM": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["class"] and got["exam"]
    assert got["right"] == got["wrong"] == "handed in"
    assert "off" in got["hint3"] and got["ref"] == "ExamModeError"
    assert got["axpy"] == "correct"


def _env():
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_the_hand_out_links_serve_the_class_copies_only(release):
    out, found, wheel, _ = release
    names = sorted(p.name for p in (out / "notebooks").glob("*.ipynb"))
    assert names == ["00_start_here.ipynb", "02_naive_tiling.ipynb"]
    install = f"https://github.com/{CLASS_REPO}/raw/{PIN}/wheels/{wheel.name.replace('+', '%2B')}"
    for name in names:
        nb = nbformat.read(out / "notebooks" / name, as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        assert "### BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text
        assert DEFAULT_REPO not in text, "a class copy points at the course's repository (solutions)"
        assert install in nb.cells[1].source
        assert found["colab"][name] in nb.cells[0].source
    assert "repo=https%3A%2F%2Fgithub.com%2Fprof%2Fgemm-class" in found["nbgitpuller"]
    assert found["binder"].startswith(f"https://mybinder.org/v2/gh/{CLASS_REPO}/{PIN}")
    assert f"./wheels/{wheel.name}" in (out / "requirements.txt").read_text()


def test_bad_requests_are_refused_with_what_is_wrong(tmp_path, release):
    out, *_ = release
    with pytest.raises(ValueError, match="not empty"):
        class_build.build(out, CLASS_REPO, PIN)
    with pytest.raises(ValueError, match="no such notebook: 99_nothing"):
        class_build.build(tmp_path / "a", CLASS_REPO, PIN, ["99_nothing"])
    with pytest.raises(ValueError, match="OWNER/NAME"):
        class_build.build(tmp_path / "b", "not a repo", PIN)
    with pytest.raises(ValueError, match="GEMM_KERNELS_PIN"):
        class_build.build(tmp_path / "c", CLASS_REPO, "bad pin;rm")


def test_an_erratum_merged_into_a_class_copy_keeps_the_class_install(tmp_path, release):
    """A teacher's review: `lab.student --merge` of an erratum replaced a class copy's set-up cell by the
    public install (the package with every solution). A class copy stays one, refreshed or merged."""
    import shutil

    from gemm_kernels.lab import student

    out, _, wheel, _ = release
    src = tmp_path / "src"
    src.mkdir()
    nb = nbformat.read(REPO / "notebooks" / "00_start_here.ipynb", as_version=4)
    md = next(c for c in nb.cells if c.cell_type == "markdown")
    md.source += "\n\nErratum: one more sentence."
    nbformat.write(nb, src / "00_start_here.ipynb")
    mine, untouched = tmp_path / "mine", tmp_path / "untouched"
    for folder in (mine, untouched):
        folder.mkdir()
        shutil.copy2(out / "notebooks" / "00_start_here.ipynb", folder / "00_start_here.ipynb")
    copy = nbformat.read(mine / "00_start_here.ipynb", as_version=4)
    answer = next(c for c in copy.cells if c.cell_type == "code" and "def launch_stats(" in c.source)
    answer.source = "def launch_stats(n, block):\n    return 1, 2  # my answer\n"
    nbformat.write(copy, mine / "00_start_here.ipynb")
    done = student.write_student_copies(src, mine, merge=True)
    assert done.merged == [mine / "00_start_here.ipynb"]
    student.write_student_copies(src, untouched)
    for folder in (mine, untouched):
        nb = nbformat.read(folder / "00_start_here.ipynb", as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        assert "Erratum: one more sentence." in text
        assert wheel.name.replace("+", "%2B") in nb.cells[1].source and DEFAULT_REPO not in text
    assert "# my answer" in nbformat.read(mine / "00_start_here.ipynb", as_version=4).cells[
        [c.source for c in copy.cells].index(answer.source)].source


def test_a_student_copy_given_as_the_erratums_source_is_refused(tmp_path, release):
    """A teacher's review: the class copies given as SRC made copies with a second banner and set-up cell.
    A notebook that is a student copy already is no source: refused by name, nothing written."""
    import shutil

    from gemm_kernels.lab import student

    out, _, _, _ = release
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    shutil.copy2(out / "notebooks" / "00_start_here.ipynb", src / "00_start_here.ipynb")
    shutil.copytree(out / "notebooks", dest)
    before = (dest / "00_start_here.ipynb").read_bytes()
    with pytest.raises(student.NotebookError, match=r"00_start_here\.ipynb is a student copy .* second banner"):
        student.write_student_copies(src, dest, merge=True)
    assert (dest / "00_start_here.ipynb").read_bytes() == before


def test_the_whole_course_merged_into_a_class_release_adds_class_copies_only(tmp_path, release, capsys):
    """A teacher's review: `lab.student notebooks CLASS/notebooks --merge` added the 11 notebooks the class
    did not have as public copies (their set-up cell installed the public package, every answer in it),
    without a word; and the class's unchanged copies were reported "refreshed: the course changed it"
    (a trailing newline). New ones are class copies now, named; unchanged ones are rewritten as they were."""
    import shutil

    from gemm_kernels.lab import student

    out, _, wheel, _ = release
    dest = tmp_path / "notebooks"
    shutil.copytree(out / "notebooks", dest)
    before = {p.name: p.read_bytes() for p in dest.glob("*.ipynb")}
    assert student.main([str(REPO / "notebooks"), str(dest), "--merge"]) == 0
    printed = capsys.readouterr().out
    assert "refreshed" not in printed and f"open them with: jupyter lab {dest}" in printed
    added = sorted(p.name for p in dest.glob("*.ipynb") if p.name not in before)
    assert len(added) >= 10 and all(f"added {dest / name} to the class release" in printed for name in added)
    for name in added + sorted(before):
        nb = nbformat.read(dest / name, as_version=4)
        assert wheel.name.replace("+", "%2B") in nb.cells[1].source, name
        assert DEFAULT_REPO not in "\n".join(c.source for c in nb.cells), name
        assert nb.metadata[student.RECORD]["class"]["install"], name
    assert all((dest / name).read_bytes() == raw for name, raw in before.items())
