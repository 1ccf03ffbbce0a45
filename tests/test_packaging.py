"""pyproject.toml and environment.yml must install the same things."""

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _pyproject_requirements():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
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

    root = Path(__file__).resolve().parents[1]
    linked = set(re.findall(r"\((notebooks/\d\d_[a-z0-9_]+\.ipynb)\)", (root / "README.md").read_text()))
    present = {f"notebooks/{p.name}" for p in (root / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert linked == present, f"README links {sorted(linked - present)} that do not exist; misses {sorted(present - linked)}"
