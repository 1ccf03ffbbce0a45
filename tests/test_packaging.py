"""Packaging: pyproject.toml and environment.yml install the same things, every import is declared,
and a normal (non-editable) install works on its own."""

import os
import pathlib
import re
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


#: extras that stay out of environment.yml, the learners' environment: nbgrader ([teach]) would add its
#: JupyterLab extensions to their lab (`make test-teach` installs it in a venv of its own)
TEACHERS_ONLY = {"teach"}


def _pyproject_requirements():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    reqs = list(project["dependencies"])
    for name, extra in project.get("optional-dependencies", {}).items():
        if name not in TEACHERS_ONLY:
            reqs += extra
    return reqs


def _environment_pip_requirements():
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\s*- pip:\s*$", line))
    reqs = []
    for line in lines[start + 1:]:
        m = re.match(r"\s+- (.+)$", line)
        if not m:
            break
        reqs.append(m.group(1).strip())
    return reqs


def _norm(req):
    return req.replace(" ", "").lower()


def test_environment_yml_lists_pyproject_dependencies():
    env = _environment_pip_requirements()
    assert "-e ." in env, "environment.yml must install the package itself (-e .)"
    env = sorted(_norm(r) for r in env if r != "-e .")
    py = sorted(_norm(r) for r in _pyproject_requirements())
    assert env == py, f"only in environment.yml: {set(env) - set(py)}; only in pyproject: {set(py) - set(env)}"


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    assert "make test" in (ROOT / "README.md").read_text()
    assert "make lab" in (ROOT / "README.md").read_text()


def test_readme_links_every_notebook_and_only_existing_ones():
    import re
    from pathlib import Path

    from gemm_kernels.lab.student import NOTEBOOK_NAME

    root = Path(__file__).resolve().parents[1]
    linked = set(re.findall(r"\((notebooks/[^)]+\.ipynb)\)", (root / "README.md").read_text()))
    present = {f"notebooks/{p.name}" for p in (root / "notebooks").glob("*.ipynb") if NOTEBOOK_NAME.match(p.name)}
    assert len(present) >= 9, f"the notebooks were not found: {sorted(present)}"
    assert linked == present, f"README links {sorted(linked - present)} that do not exist; misses {sorted(present - linked)}"


# ---------------------------------------------------------------- a normal install
#: import name -> the distribution that provides it, for the package's third-party imports
DISTRIBUTIONS = {"torch": "torch", "triton": "triton", "numpy": "numpy", "matplotlib": "matplotlib", "PIL": "pillow",
                 "ipywidgets": "ipywidgets", "tqdm": "tqdm", "nbformat": "nbformat"}
#: imported only inside try/except or functions that run in Jupyter (ipywidgets brings IPython)
OPTIONAL = {"IPython"}
#: the book's build tools, the [book] extra: imported only by gemm_kernels.book, guarded (it imports without them)
BOOK = {"sphinx", "docutils", "myst_nb"}
#: nbgrader, the [teach] extra: imported only by the module a teacher runs after `nbgrader autograde`
TEACH = {"nbgrader": ("gemm_kernels", "lab", "nbgrader_judge.py")}


def _third_party_imports():
    import ast

    found = {}
    for path in (ROOT / "gemm_kernels").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "gemm_kernels":
                    found.setdefault(top, path.relative_to(ROOT))
    return found


def test_every_import_is_declared():
    declared = {re.split(r"[<>=!~ ;\[]", r)[0].lower() for r in tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    for module, where in _third_party_imports().items():
        if module in OPTIONAL or (module in BOOK and where.parts[:2] == ("gemm_kernels", "book")):
            continue
        if module in TEACH and where.parts == TEACH[module]:
            teach = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["teach"]
            assert any(r.lower().startswith(module) for r in teach), f"{where} imports {module}: declare it in [teach]"
            continue
        assert module in DISTRIBUTIONS, f"{where} imports {module}: add it to DISTRIBUTIONS and to pyproject.toml"
        assert DISTRIBUTIONS[module] in declared, f"{where} imports {module} but pyproject.toml does not declare " \
                                                  f"{DISTRIBUTIONS[module]}"


def test_installed_wheel_imports_everything_and_finds_committed_results(tmp_path):
    """`pip install .` (not editable) into a fresh venv: every module imports from the installed
    copy, and the committed GPU results are found (they travel as data files)."""
    import subprocess
    import sysconfig
    import venv

    wheel_dir = tmp_path / "wheel"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(wheel_dir), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True).stdout.strip()
    # the dependencies (torch, triton, ...) come from this test's environment, the package from the wheel
    (pathlib.Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # --ignore-installed: never uninstall the running environment's own (editable) copy
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--ignore-installed", "-q",
                              "--prefix", str(env_dir),
                              *map(str, wheel_dir.glob("*.whl"))], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    code = """
import importlib, pkgutil, pathlib, sys
import gemm_kernels
assert pathlib.Path(gemm_kernels.__file__).is_relative_to(sys.prefix), gemm_kernels.__file__
names = [m.name for m in pkgutil.walk_packages(gemm_kernels.__path__, "gemm_kernels.")]
for name in names:
    if not name.endswith("__main__"):
        importlib.import_module(name)
from gemm_kernels import results
committed = results.load_committed("square")
assert committed and committed["csv"] and committed["csv"].exists(), results.BENCH_DIR
print(len(names), "modules;", results.BENCH_DIR)
"""
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "share/gemm-kernels/bench" in proc.stdout


def test_ci_runs_make_test_then_the_other_targets_in_turn_within_its_budget(tmp_path):
    """.ci/run with make replaced by a stub: `make test` always; an extra target only where its
    estimate fits the budget (none when `make test` leaves no room: CI stays under 30 minutes), in
    an order that starts one further along with each commit; CI_ALL=1 runs them all."""
    import os
    import shutil
    import subprocess

    ci = tmp_path / "repo" / ".ci"
    ci.mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", ci / "run")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "calls.txt"
    for tool in ("make", "chromium", "uv"):
        (bin_ / tool).write_text(f"#!/bin/sh\necho \"{tool} $*\" >> {log}\n")
        (bin_ / tool).chmod(0o755)
    repo = ci.parent
    subprocess.run(["git", "init", "-q", str(repo)], check=True)

    def run(commits: int, **env) -> tuple[list[str], str]:
        while int(subprocess.run(["git", "-C", str(repo), "rev-list", "--count", "--all"], capture_output=True,
                                 text=True).stdout.strip() or 0) < commits:
            subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                            "--allow-empty", "-m", "c"], check=True)
        log.write_text("")
        done = subprocess.run(["bash", str(ci / "run")], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", **env})
        assert done.returncode == 0, done.stderr
        calls = [line.split(" ", 1)[1] for line in log.read_text().splitlines() if line.startswith("make")]
        return calls, done.stdout

    calls, out = run(1, CI_BUDGET_S="0")  # no time left after make test: no extra target
    assert calls == ["test"], calls
    assert "left for the next commits" in out and "launch" in out
    # 200 s: the ones estimated at 200 s or less (the stub takes none), in the commit's order
    calls, _ = run(1, CI_BUDGET_S="200")  # one commit: starts at the 2nd (triton-oldest, 300 s: left out)
    assert calls == ["test", "test-launch", "test-no-tma NO_TMA_NOTEBOOKS="], calls
    calls, _ = run(2, CI_ALL="1")
    assert calls == ["test", "test-launch", "test-hostile", "test-teach", "book", "test-book",
                     "test-no-tma NO_TMA_NOTEBOOKS=", "test-triton-oldest"], calls
    calls, _ = run(2, CI_BUDGET_S="100000")  # a budget that holds them all
    assert len(calls) == 8
    calls, _ = run(3, CI_BUDGET_S="200")  # three commits: from the 4th (hostile, 340 s: left out)
    assert calls == ["test", "test-no-tma NO_TMA_NOTEBOOKS=", "test-launch"], calls


def test_a_changed_pyproject_updates_the_venv_in_place():
    """After a `git pull` that changes pyproject.toml, `make test` rebuilds its stamp: `uv venv` on the
    existing .venv must update it (--allow-existing), not stop with "virtual environment already exists"."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for venv in (".venv", ".venv-triton36"):
        dry = subprocess.run(["make", "-n", "-s", "-C", str(ROOT), "-B", f"{venv}/.installed", "UV=uv", "PYTHON=python3"],
                             capture_output=True, text=True, timeout=60).stdout
        assert f"uv venv -q --seed --allow-existing --python python3 {venv}" in dry, dry
