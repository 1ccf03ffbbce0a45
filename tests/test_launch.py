"""The ways in without make: a student copy's set-up cell (Colab), ``.binder/`` (Binder), a plain pip install.

Quick tests check what the copies, the README and the Binder files say, the set-up cell where the
package is installed (it installs nothing) or where torch is missing (it installs nothing either, and
says what to do), and :func:`~gemm_kernels.book.pages.course_report` on four kinds of machine.

The ``launch`` tests (``make test-launch``: minutes, PyPI) install into fresh venvs: the set-up cell
where torch and triton come preinstalled, as in Colab, must keep them and numpy as they are; Binder's
requirements and postBuild must give a student copy of 00 that runs; ``pip install .`` brings no
JupyterLab.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

from gemm_kernels import book, runtime
from gemm_kernels.book import pages
from gemm_kernels.lab import student

REPO = Path(__file__).resolve().parents[1]
FIRST = "00_start_here.ipynb"
HEAVY = ("torch", "triton", "numpy")
#: the one line the set-up cell prints where gemm_kernels is installed
INSTALLED = "gemm_kernels is installed: nothing to install."


def _copy(repo=None):
    return student.student_notebook(nbformat.read(REPO / "notebooks" / FIRST, as_version=4), FIRST, repo)


def _setup_cell(nb):
    [cell] = [c for c in nb.cells if c.get("id") == student.SETUP_ID]
    return cell


def _requirement_names(requirements):
    return [re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].lower() for req in requirements]


# ----------------------------------------------------------------------------- the copies and the set-up cell
def test_every_copy_opens_with_the_banner_its_colab_badge_and_the_setup_cell(monkeypatch):
    monkeypatch.setenv(book.REPO_ENV, "someone/fork")
    nb = _copy()
    banner, setup = nb.cells[:2]
    assert banner.cell_type == "markdown" and "Student copy" in banner.source
    assert f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({book.colab_url(FIRST)})" \
        in banner.source
    assert book.colab_url(FIRST) == \
        "https://colab.research.google.com/github/someone/fork/blob/student-copies/00_start_here.ipynb"
    assert setup.cell_type == "code" and setup.id == student.SETUP_ID and setup.outputs == []
    assert '"git+https://github.com/someone/fork"' in setup.source  # a fork installs its own package
    assert '"git+https://github.com/other/name"' in _setup_cell(_copy("other/name")).source
    assert "GEMM_KERNELS_SOURCE" in setup.source and '"--no-deps"' in setup.source
    compile(setup.source, "<set-up cell>", "exec")
    imported = {(node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
                for node in ast.walk(ast.parse(setup.source)) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names}
    assert imported - set(sys.stdlib_module_names) == {"gemm_kernels"}  # the standard library until it is installed
    # the exercises run without it (exercise_cells: the imports are the notebook's own first cell)
    assert all(nb.cells[i].id != student.SETUP_ID for i in student.exercise_cells(nb))


def test_setup_cell_installs_pyprojects_light_dependencies_and_never_torch_triton_or_numpy():
    source = student.setup_source()
    light = next(ast.literal_eval(node.value) for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "light")
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert sorted(light.values()) == sorted(d for d, name in zip(dependencies, _requirement_names(dependencies))
                                            if name not in HEAVY)
    assert set(light) == {"matplotlib", "PIL", "ipywidgets", "tqdm", "nbformat"}  # what each is imported as
    calls = re.findall(r"_pip\((.*?)\)\n", source)
    assert calls == ['"--no-deps", os.environ.get("GEMM_KERNELS_SOURCE", "git+https://github.com/'
                     f'{book.github_repo()}")', "*wanted"]
    assert '"-c", pins.name' in source  # pip may not change torch, triton or numpy to satisfy the others


def test_setup_cell_where_the_package_is_installed_installs_nothing(capsys, monkeypatch):
    def no_pip(*args, **kwargs):
        raise AssertionError(f"the set-up cell ran {args}")

    monkeypatch.setattr(subprocess, "run", no_pip)
    exec(compile(_setup_cell(_copy()).source, "<set-up cell>", "exec"), {"__name__": "__main__"})  # noqa: S102
    out = capsys.readouterr().out
    assert out.splitlines()[0] == INSTALLED
    assert pages.course_report() in out


def _run_isolated(cell: str, tmp_path: Path, path_entry: Path | None = None):
    """The cell in this Python without site-packages (-I -S: no torch, no gemm_kernels), ``path_entry`` first."""
    script = tmp_path / "cell.py"
    prefix = f"import sys; sys.path.insert(0, {str(path_entry)!r})\n" if path_entry else ""
    script.write_text(prefix + cell)
    return subprocess.run([sys.executable, "-I", "-S", str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


def test_setup_cell_without_torch_says_what_to_do_and_installs_nothing(tmp_path):
    done = _run_isolated(student.setup_source(), tmp_path)
    assert done.returncode == 1 and "RuntimeError" in done.stderr
    assert "missing: torch, triton, numpy" in done.stderr and "This cell does not install them" in done.stderr


def test_setup_cell_with_an_old_triton_says_what_to_do(tmp_path):
    site = tmp_path / "site"
    for name in HEAVY:
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
    (site / "triton-3.5.0.dist-info").mkdir()
    (site / "triton-3.5.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\nVersion: 3.5.0\n")
    done = _run_isolated(student.setup_source(), tmp_path, site)
    assert done.returncode == 1
    assert "missing: none; triton: 3.5.0" in done.stderr and "Triton >= 3.6" in done.stderr


# ----------------------------------------------------------------------------- course_report
@pytest.mark.parametrize("machine", ["interpreter", "H100", "RTX 3090", "H100 as sm_86"])
def test_course_report_says_what_this_machine_runs(machine, monkeypatch):
    gpus = {"H100": ("NVIDIA H100 80GB HBM3", (9, 0), False), "RTX 3090": ("NVIDIA GeForce RTX 3090", (8, 6), False),
            "H100 as sm_86": ("NVIDIA H100 80GB HBM3", (8, 6), True)}
    if machine in gpus:
        name, capability, from_env = gpus[machine]
        fake = runtime.Runtime(False, runtime.torch.device("cuda", 0), name, capability, 132, "CUDA GPU found",
                               from_env)
        monkeypatch.setattr(runtime, "RUNTIME", fake)
    else:
        monkeypatch.setattr(runtime, "RUNTIME", runtime.Runtime(True, runtime.torch.device("cpu"), "CPU", None, 4,
                                                                "no usable CUDA GPU found"))
    text = pages.course_report()
    lines = text.splitlines()
    assert lines[0].startswith("gemm_kernels ") and "torch " in lines[0] and "triton " in lines[0]
    hopper_only = [stem for stem, course in pages.COURSE.items() if course.hopper]
    listed = [stem for stem in pages.COURSE if f"  {stem}: " in text]
    if machine == "interpreter":
        assert "No usable CUDA GPU found" in text and "emulated by the interpreter" in text and not listed
    elif machine == "H100":
        assert "GPU: NVIDIA H100 80GB HBM3 (sm_90): kernels are compiled." in lines
        assert "TMA (tensor descriptors): yes" in lines and "every notebook runs live" in text and not listed
    else:
        assert f"GPU: {gpus[machine][0]} (sm_86" in text and "TMA (tensor descriptors): no" in text
        assert ("as GEMM_KERNELS_ARCH says" in text) == (machine == "H100 as sm_86")
        assert listed == hopper_only and len(listed) >= 3
        for stem in listed:
            assert f"  {stem}: {pages.COURSE[stem].hopper}" in lines


# ----------------------------------------------------------------------------- README, Binder, make, CI
def test_readme_has_both_badges_on_the_first_notebook():
    readme = (REPO / "README.md").read_text()
    assert f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]" \
           f"({book.colab_url(FIRST, book.DEFAULT_REPO)})" in readme
    assert f"[![Launch on Binder](https://mybinder.org/badge_logo.svg)]({book.binder_url(FIRST, book.DEFAULT_REPO)})" \
        in readme


def test_binder_installs_a_cpu_torch_and_the_package_then_makes_the_student_copies():
    lines = [line.split("#")[0].strip() for line in (REPO / ".binder" / "requirements.txt").read_text().splitlines()]
    lines = [line for line in lines if line]
    torch_spec = re.search(r"^TORCH_CPU_SPEC \?= (\S+)$", (REPO / "Makefile").read_text(), re.M).group(1)
    assert lines == ["--extra-index-url https://download.pytorch.org/whl/cpu", torch_spec, "."]
    post_build = REPO / ".binder" / "postBuild"
    assert os.access(post_build, os.X_OK) and post_build.read_text().startswith("#!/bin/bash\n")
    assert "\npython -m gemm_kernels.lab.student notebooks student\n" in post_build.read_text()
    assert "labpath=student/" in book.binder_url(FIRST)  # where postBuild writes them
    if shutil.which("git") and (REPO / ".git").exists():
        mode = subprocess.run(["git", "-C", str(REPO), "ls-files", "-s", ".binder/postBuild"], capture_output=True,
                              text=True).stdout
        assert not mode or mode.startswith("100755"), "postBuild must be committed executable"


def test_make_test_leaves_the_launch_tests_to_make_test_launch_and_ci_runs_it():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")

    def dry_run(target):
        return subprocess.run(["make", "-n", "-s", "-C", str(REPO), target, "STAMP=", "BIN=/x/bin"],
                              capture_output=True, text=True, timeout=60, check=True).stdout

    assert '-m "not launch and not teach and not hostile"' in dry_run("test")
    assert "-m hostile tests" in dry_run("test-hostile")
    assert "-m launch tests/test_launch.py" in dry_run("test-launch")
    ci = (REPO / ".ci" / "run").read_text()
    assert '"launch|' in ci and ci.index("step make test\n") < ci.index("|make test-launch\"")
    assert ci.index("step make test\n") < ci.index("|make test-hostile\"")


# ----------------------------------------------------------------------------- fresh venvs (make test-launch)
def _pip_env(**extra) -> dict:
    """This environment without the test's own Python settings; pip quick to give up on an index it cannot
    reach (the CPU torch index, where only PyPI is reachable), not on downloads."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "TRITON_INTERPRET", "PYTEST_CURRENT_TEST")
           and not k.startswith("GEMM_KERNELS_")}
    env.update(PIP_RETRIES="1", PIP_DEFAULT_TIMEOUT="30", PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               GEMM_KERNELS_PROGRESS="off")
    env.update(extra)
    return env


def _run(command, cwd, env=None, timeout=900):
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env or _pip_env(), capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _venv(path: Path) -> Path:
    _run([sys.executable, "-m", "venv", path], cwd=path.parent)
    return path / "bin" / "python"


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """This working tree as a clone has it (tracked and new files; nothing git ignores)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout")
    listing = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"],
                             capture_output=True, check=True).stdout.decode()
    root = tmp_path_factory.mktemp("clone") / "gemm-kernels"
    for name in filter(None, listing.split("\0")):
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    return root


def _preinstalled(target: Path, roots=("torch", "triton")) -> None:
    """Links to ``roots`` and every distribution they need (numpy aside) from this environment, in ``target``:
    Colab's preinstalled torch and triton, which a .pth file puts on a venv's path (pip sees them installed)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    target.mkdir()
    todo, seen = list(roots), set()
    while todo:
        name = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen or key == "numpy":
            continue
        seen.add(key)
        for top in {Path(f).parts[0] for f in dist.files or ()} - {"..", "__pycache__"}:
            if not (target / top).exists():
                (target / top).symlink_to(dist.locate_file(top))
        for spec in dist.requires or ():
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    assert {"torch", "triton"} <= seen


PROBE = ("import json, numpy, torch, triton; "
         "print(json.dumps({m.__name__: [m.__version__, m.__file__] for m in (numpy, torch, triton)}))")


@pytest.mark.launch
def test_colab_setup_cell_installs_the_package_and_keeps_torch_triton_and_numpy(source, tmp_path):
    """As in Colab: torch and triton preinstalled, numpy >= 2.4; the cell installs gemm_kernels from
    GEMM_KERNELS_SOURCE (this checkout) and the light dependencies it lacks, prints the report, and
    changes none of torch, triton, numpy.  Run again, it installs nothing."""
    python = _venv(tmp_path / "colab")
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).strip())
    _preinstalled(tmp_path / "preinstalled")
    (site / "preinstalled.pth").write_text(f"{tmp_path / 'preinstalled'}\n")
    _run([python, "-m", "pip", "install", "-q", "numpy>=2.4"], tmp_path)
    before = json.loads(_run([python, "-c", PROBE], tmp_path))
    assert tuple(int(n) for n in before["numpy"][0].split(".")[:2]) >= (2, 4)
    assert before["torch"][1].startswith(str(tmp_path / "preinstalled"))

    copies = student.write_student_copies(source / "notebooks", tmp_path / "student")
    cell = tmp_path / "setup_cell.py"
    cell.write_text(_setup_cell(nbformat.read(copies[0], as_version=4)).source)
    out = _run([python, cell], tmp_path, _pip_env(GEMM_KERNELS_SOURCE=str(source)))
    light = "matplotlib>=3.8, pillow>=10, ipywidgets>=8.1, tqdm>=4.66, nbformat>=5.9"  # none came with torch
    assert out.splitlines()[0] == f"installed gemm_kernels, {light}", out
    assert "gemm_kernels 0.1.0" in out and "Triton's interpreter" in out, out
    assert json.loads(_run([python, "-c", PROBE], tmp_path)) == before, "the set-up cell changed torch, triton or numpy"
    where = _run([python, "-c", "import gemm_kernels, matplotlib; print(gemm_kernels.__file__, matplotlib.__file__)"],
                 tmp_path).split()
    assert all(path.startswith(str(site)) for path in where), where

    freeze = [python, "-m", "pip", "list", "--format=freeze"]
    installed = _run(freeze, tmp_path)
    again = _run([python, cell], tmp_path, _pip_env(GEMM_KERNELS_SOURCE=str(tmp_path / "nowhere")))
    assert again.splitlines()[0] == INSTALLED and "Triton's interpreter" in again
    assert _run(freeze, tmp_path) == installed


@pytest.mark.launch
def test_binder_requirements_and_postbuild_give_student_copies_that_run(source, tmp_path):
    """What Binder does, in a fresh venv: pip install -r .binder/requirements.txt from the repository's
    root, run postBuild, then open the student copy of 00 (its image has JupyterLab and a kernel: here
    ipykernel and nbclient) and run every cell."""
    python = _venv(tmp_path / "binder")
    _run([python, "-m", "pip", "install", "-q", "-r", ".binder/requirements.txt"], source, timeout=1800)
    env = _pip_env(PATH=f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    _run([source / ".binder" / "postBuild"], source, env)
    made = sorted(p.name for p in (source / "student").glob("*.ipynb"))
    assert made == [p.name for p in student.notebook_paths(source / "notebooks")]
    _run([python, "-m", "pip", "install", "-q", "ipykernel", "nbclient"], source)
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        env[var] = str(tmp_path / var.lower())
    executed = tmp_path / "executed.ipynb"
    driver = ("import sys, nbformat\nfrom nbclient import NotebookClient\n"
              "nb = nbformat.read(sys.argv[1], as_version=4)\n"
              "NotebookClient(nb, timeout=900, kernel_name='python3', resources={'metadata': {'path': sys.argv[2]}})"
              ".execute()\nnbformat.write(nb, sys.argv[3])\n")
    _run([python, "-c", driver, source / "student" / FIRST, source / "student", executed], tmp_path, env, timeout=1800)
    nb = nbformat.read(executed, as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    shown = "".join(o.get("text", "") for o in _setup_cell(nb).outputs)
    assert shown.startswith(INSTALLED) and "Triton's interpreter" in shown, shown


@pytest.mark.launch
def test_a_plain_pip_install_brings_no_jupyterlab(source, tmp_path):
    """``pip install .`` as in a fresh environment (--ignore-installed), resolved but not installed."""
    report = tmp_path / "report.json"
    _run([sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed", "--report", report, source],
         tmp_path)
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert {"gemm-kernels", "torch", "triton", "numpy", "matplotlib", "ipywidgets", "nbformat"} <= names
    assert not names & {"jupyterlab", "notebook", "jupyter-server"}, sorted(names)
