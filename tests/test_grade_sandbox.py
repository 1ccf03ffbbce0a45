"""The sandbox a submitted notebook runs in (gemm_kernels.lab._sandbox) is an allow list, and grading
fails closed without it (issue 48, a teacher's review: H5, and the sandbox that failed open)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from gemm_kernels.lab import _sandbox, grade

from test_grade_hostile import lean_notebook

REPO = Path(__file__).resolve().parents[1]
needs_sandbox = pytest.mark.skipif(not _sandbox.sandbox_available(),
                                   reason=f"no sandbox on this machine: {_sandbox.sandbox_problem()}")

#: run in the sandbox: every file it finds outside the folders shown to it, the given files it can
#: read, whether it could write into the package, and its effective capabilities
LOOK_AROUND = r"""
import json, os, sys
shown, secrets, package = json.loads(sys.argv[1])
skip = set(shown) | {"/proc", "/sys", "/dev", "/usr"}
found = []
for folder, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(folder, d) not in skip]
    found += [os.path.join(folder, f) for f in files]
readable = []
for path in secrets:
    try:
        open(path, "rb").read(1)
        readable.append(path)
    except OSError:
        pass
try:
    open(os.path.join(package, "planted_by_a_submission.py"), "w").write("x = 1\n")
    wrote = True
except OSError:
    wrote = False
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
print(json.dumps({"found": found, "readable": readable, "wrote": wrote, "caps": caps}))
"""


def _in_sandbox(prefix, *args, env=None) -> subprocess.CompletedProcess:
    env = env or _sandbox.child_environment()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return subprocess.run([*prefix, sys.executable, *args], capture_output=True, text=True, timeout=120, env=env)


@needs_sandbox
def test_the_sandbox_shows_only_what_a_notebook_needs(tmp_path):
    """H5 of a teacher's review: the grader's home, every folder outside the package's repository and
    /tmp stayed readable, and a submission found solved notebooks there.  In the sandbox a walk of
    the whole tree finds no file outside what it is shown (Python, the package, the system, a few
    files of /etc): not the home, the folder above the checkout, /srv, /opt, the repository's
    notebooks/, the submissions nor a folder beside them; it cannot write into the package, and it
    has no capability."""
    package = _sandbox.package_dir()
    submissions = tmp_path / "submissions"
    (submissions / "alice").mkdir(parents=True)
    (tmp_path / "course" / "source").mkdir(parents=True)
    secrets = [submissions / "alice" / "00_start_here.ipynb", tmp_path / "course" / "source" / "00_start_here.ipynb",
               REPO / "notebooks" / "00_start_here.ipynb", package / "lab" / "exercises" / "start_here.py",
               package / "lab" / "nbgrader_markup.py"]
    for path in secrets[:2]:
        path.write_text((REPO / "notebooks" / "00_start_here.ipynb").read_text(encoding="utf-8"), encoding="utf-8")
    shown = [str(p) for p in _sandbox.shown_paths()]
    done = _in_sandbox(_sandbox.sandbox_prefix([submissions]), "-c", LOOK_AROUND,
                       json.dumps([shown, [str(s) for s in secrets], str(package)]))
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    etc = {f"/etc/{name}" for name in _sandbox.ETC}
    outside = [f for f in seen["found"] if not any(f == e or f.startswith(e + "/") for e in etc)]
    assert not outside, outside[:20]
    assert seen["readable"] == [] and not seen["wrote"] and int(seen["caps"], 16) == 0, seen
    assert all(Path(s).exists() for s in secrets)  # they are there, outside it
    assert not (package / "planted_by_a_submission.py").exists()


@needs_sandbox
def test_a_package_under_tmp_is_shown_read_only(tmp_path, monkeypatch):
    """A checkout under /tmp (the sandbox's /tmp is a writable tmpfs of its own): the package's folders
    that hold hidden files are rebuilt entry by entry there, and stay read-only all the same; what is
    hidden stays hidden."""
    package = tmp_path / "gemm_kernels"
    (package / "lab" / "exercises").mkdir(parents=True)
    for name in ("__init__.py", "lab/__init__.py", "lab/teaching.py", "lab/nbgrader_markup.py", "lab/exercises/ref.py"):
        (package / name).write_text("x = 1\n")
    monkeypatch.setattr(_sandbox, "package_dir", lambda: package)
    code = ("import json, os, sys; p = sys.argv[1]; wrote = []\n"
            "for f in ('planted.py', 'lab/planted.py'):\n"
            "    try:\n        open(os.path.join(p, f), 'w').close(); wrote.append(f)\n"
            "    except OSError:\n        pass\n"
            "print(json.dumps([wrote, sorted(os.listdir(os.path.join(p, 'lab'))), open(os.path.join(p, 'lab/teaching.py')).read()]))")
    done = _in_sandbox(_sandbox.sandbox_prefix([]), "-c", code, str(package))
    assert done.returncode == 0, done.stderr[-3000:]
    wrote, listed, read = json.loads(done.stdout)
    assert wrote == [] and read == "x = 1\n", (wrote, read)
    assert listed == ["__init__.py", "teaching.py"], listed  # no exercises/, no markup
    assert not (package / "planted.py").exists() and not (package / "lab" / "planted.py").exists()


@needs_sandbox
def test_a_home_under_tmp_is_there_empty_and_its_own(tmp_path, monkeypatch):
    """With HOME under /tmp (a hub's, a container's) the sandbox starts: the home is an empty folder
    of its own, where the process may write; what the real one holds stays out of sight."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "solved.ipynb").write_text("{}")
    monkeypatch.setenv("HOME", str(home))
    code = "import os; h = os.path.expanduser('~'); open(os.path.join(h, 'mine'), 'w').close(); print(os.listdir(h))"
    done = _in_sandbox(_sandbox.sandbox_prefix([]), "-c", code)
    assert done.returncode == 0 and done.stdout.split() == ["['mine']"], done.stdout + done.stderr[-2000:]
    assert sorted(p.name for p in home.iterdir()) == ["solved.ipynb"]


@needs_sandbox
def test_the_sandbox_starts_with_a_venv_under_tmp(tmp_path):
    """A virtual environment under /tmp (its site-packages another environment's, through a .pth file,
    as a teacher's review had it): the sandbox shows it, and the grade command's probe passes there."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True,
                          text=True, check=True).stdout.strip()
    import numpy

    (Path(site) / "outer.pth").write_text(str(Path(numpy.__file__).parents[1]) + "\n")
    probe = "from gemm_kernels.lab import _sandbox as s; print(s.sandbox_available(), s.sandbox_problem())"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.split()[:1] == ["True"], done.stdout + done.stderr[-2000:]


def test_without_a_sandbox_nothing_is_graded_unless_asked(tmp_path, monkeypatch, capsys):
    """The sandbox failed open: where it could not start, grading went on unsandboxed with a warning.
    Now the judge grades nothing without it (each exercise says why), and the grade command refuses
    to start unless --no-sandbox, which says what it exposes.  (The switch turns the sandbox off here,
    as a machine without one has it.)"""
    monkeypatch.setenv(_sandbox.ENV, "0")
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(lean_notebook(), subs / "solved_00_start_here.ipynb")
    verdicts = grade.grade_notebook(subs / "solved_00_start_here.ipynb", "00_start_here", cell_timeout=10)
    assert {status for status, _ in verdicts.values()} == {"error"}, verdicts
    assert all("no sandbox here" in message and _sandbox.ENV in message for _, message in verdicts.values())
    with pytest.raises(SystemExit) as stop:
        grade.main([str(subs), "--out", str(tmp_path / "g.csv")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "no sandbox can be built here" in err and "--no-sandbox" in err, err
    assert not (tmp_path / "g.csv").exists()
    assert grade.main([str(subs), "--out", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json"),
                       "--no-sandbox", "--cell-timeout", "10"]) == 0
    out = capsys.readouterr().out
    assert "--no-sandbox: each notebook runs as this user, unsandboxed" in out and "solved: 2 of 2 points" in out
    assert json.loads((tmp_path / "g.json").read_text())["sandbox"] is False


def test_a_notebooks_process_imports_the_judges_own_package(monkeypatch):
    """A judge run from a checkout that is not installed (its folder on no path, as on a GPU machine's
    bare image) still starts notebooks: their process gets the package's parent first on its path."""
    parent = str(_sandbox.package_dir().parent)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert _sandbox.child_environment()["PYTHONPATH"] == parent
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert _sandbox.child_environment()["PYTHONPATH"].split(os.pathsep) == [parent, "/elsewhere"]
    done = subprocess.run([sys.executable, "-c", "import gemm_kernels, sys; print(gemm_kernels.__file__)"],
                          cwd="/", env=_sandbox.child_environment(), capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().startswith(parent), done
