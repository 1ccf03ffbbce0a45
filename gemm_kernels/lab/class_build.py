"""A class release: what students get for graded work, with no reference answer in it.

``python -m gemm_kernels.lab.class_build OUT --repo OWNER/CLASS [--pin TAG] [--notebooks 00_start_here,...]``
writes a folder to push as a repository of the teacher's own (``OWNER/CLASS``):

* ``wheels/gemm_kernels-VERSION+class-py3-none-any.whl``: the package with every check's ``*_ref``
  reference answer replaced by an error and every hint past the nudge removed (the check modules
  rewritten by :func:`strip_check_module`), and exam mode always on (``gemm_kernels/_class_build.py``).
  Its checks still run an answer (a crash, a hang, a load out of bounds are reported, and kernel
  checks that compare with torch still say right or wrong); a verdict that needs a reference reads
  "handed in": the teacher's grader, with the full package, decides;
* ``notebooks/``: the student copies (no solution, no hidden test), whose set-up cell installs that
  wheel from ``OWNER/CLASS`` at ``--pin`` and whose Colab badge opens them there (an erratum merged
  in later, ``lab.student --merge``, keeps both);
* ``requirements.txt`` (Binder installs the wheel) and ``README.md`` with the nbgitpuller, Binder and
  Colab links, which all serve these copies and nothing else.

The course's models (``tiles.streamk_segments`` ...) stay: lessons draw with them.  What a class build
cannot hide is the public course itself (notebooks/TEACHING.md says what the grader defends).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

import nbformat

from .exam import HINT_LEVEL
from .student import REPO_ROOT, as_class_copy, check_pin, notebook_paths, student_notebook

#: what replaces a hint past the nudge in a class build
HINT_OFF = f"hints beyond level {HINT_LEVEL} are off in this class build"
CLASS_BANNER = ("> **{name}**, the class copy: write your answers where the cells say "
                "`raise NotImplementedError(\"your turn\")`, run each check, and hand the notebook in. "
                "[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}) "
                "Run the set-up cell below first. Checks that need the course's reference answer say "
                "\"handed in\": your teacher's grader decides those.")


def strip_check_module(source: str, where: str = "module") -> str:
    """A check module's source with each ``*_ref`` function's body replaced by an ExamModeError and
    each ``Hints(nudge, approach, solution)`` keeping only its nudge."""
    tree = ast.parse(source)

    class Strip(ast.NodeTransformer):
        def visit_FunctionDef(self, node):
            self.generic_visit(node)
            if node.name.endswith("_ref"):
                node.body = ast.parse(f"from ..exam import refuse\nraise refuse({node.name!r})").body
            return node

        def visit_Call(self, node):
            self.generic_visit(node)
            if isinstance(node.func, ast.Name) and node.func.id == "Hints":
                node.args = [arg if i < HINT_LEVEL else ast.Constant(HINT_OFF) for i, arg in enumerate(node.args)]
                for keyword in node.keywords:
                    if keyword.arg in ("approach", "solution"):
                        keyword.value = ast.Constant(HINT_OFF)
            return node

    stripped = ast.fix_missing_locations(Strip().visit(tree))
    return f"# {where}: a class build (gemm_kernels.lab.class_build): no reference answers, no hints past the nudge\n" \
           + ast.unparse(stripped) + "\n"


def _package_tree(dest: Path, repo_root: Path) -> None:
    """The source tree a class wheel is built from: the package (check modules stripped), its
    committed results and the project files its build reads."""
    shutil.copytree(repo_root / "gemm_kernels", dest / "gemm_kernels",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    exercises = dest / "gemm_kernels" / "lab" / "exercises"
    for path in sorted(exercises.glob("[!_]*.py")):  # the check modules (the machinery, _core ..., holds no answer)
        path.write_text(strip_check_module(path.read_text(encoding="utf-8"), path.name), encoding="utf-8")
    (dest / "gemm_kernels" / "_class_build.py").write_text(
        '"""Present only in a class build (lab.class_build): exam mode is always on."""\nCLASS_BUILD = True\n')
    bench = dest / "images" / "bench"
    bench.mkdir(parents=True)
    for path in (repo_root / "images" / "bench").glob("*"):
        if path.is_file() and path.suffix in (".csv", ".png", ".md", ".json"):
            shutil.copy2(path, bench / path.name)
    for name in ("README.md", "LICENSE"):
        shutil.copy2(repo_root / name, dest / name)
    text = (repo_root / "pyproject.toml").read_text(encoding="utf-8")
    version = next(line for line in text.splitlines() if line.startswith("version = "))
    (dest / "pyproject.toml").write_text(text.replace(version, version[:-1] + '+class"', 1), encoding="utf-8")


def build_wheel(out_dir: Path, repo_root: Path = REPO_ROOT) -> Path:
    """The class wheel, written to ``out_dir`` (pip's wheel build of a stripped copy of the package)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "src"
        _package_tree(tree, repo_root)
        # built with this Python's setuptools where it has one; else pip fetches it into an isolated env
        isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w",
                               str(Path(tmp) / "wheels"), str(tree)], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"building the class wheel failed:\n{(done.stdout + done.stderr)[-2000:]}")
        (built,) = (Path(tmp) / "wheels").glob("gemm_kernels-*.whl")
        target = out_dir / built.name
        shutil.copy2(built, target)
    return target


def links(repo: str, pin: str, notebooks: list[str], hub: str = "https://<your-hub>") -> dict:
    """The hand-out addresses of a class repository: nbgitpuller, Binder, and Colab per notebook."""
    query = urllib.parse.urlencode({"repo": f"https://github.com/{repo}", "branch": pin,
                                    "urlpath": f"lab/tree/{repo.split('/')[1]}/notebooks"})
    return {"nbgitpuller": f"{hub}/hub/user-redirect/git-pull?{query}",
            "binder": f"https://mybinder.org/v2/gh/{repo}/{pin}?labpath=notebooks",
            "colab": {name: f"https://colab.research.google.com/github/{repo}/blob/{pin}/notebooks/{name}"
                      for name in notebooks}}


def build(out: Path | str, repo: str, pin: str | None = "main", notebooks: list[str] | None = None,
          src_dir: Path | str | None = None, repo_root: Path = REPO_ROOT) -> dict:
    """Write the class release to ``out`` (see the module docstring); returns its links."""
    from .published import github_repo

    repo, pin = github_repo(repo), check_pin(pin) or "main"
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty: a class release is written to a new folder")
    sources = notebook_paths(Path(src_dir) if src_dir else repo_root / "notebooks")
    if notebooks:
        unknown = sorted(set(notebooks) - {p.stem for p in sources})
        if unknown:
            raise ValueError(f"no such notebook: {', '.join(unknown)}")
        sources = [p for p in sources if p.stem in notebooks]
    wheel = build_wheel(out / "wheels", repo_root)
    install = f"https://github.com/{repo}/raw/{pin}/wheels/{urllib.parse.quote(wheel.name)}"
    names = [p.name for p in sources]
    found = links(repo, pin, names)
    (out / "notebooks").mkdir()
    for path in sources:
        copy = student_notebook(nbformat.read(path, as_version=4), path.name, repo=repo)
        colab = found["colab"][path.name]
        as_class_copy(copy, {"banner": CLASS_BANNER.format(name=path.name, colab=colab), "install": install,
                             "colab": colab})
        nbformat.write(copy, out / "notebooks" / path.name)
    (out / "requirements.txt").write_text(
        "# Binder: torch's CPU build, then the class wheel (no reference answers)\n"
        "--extra-index-url https://download.pytorch.org/whl/cpu\ntorch\n"
        f"./wheels/{wheel.name}\n", encoding="utf-8")
    lines = [f"# Class copies ({pin})", "", "Student copies of the course's notebooks, and the class build of its "
             "package: no solution and no reference answer here.", "",
             f"* JupyterHub (nbgitpuller; put your hub's address): <{found['nbgitpuller']}>",
             f"* Binder: <{found['binder']}>", *(f"* Colab, {n}: <{u}>" for n, u in found["colab"].items())]
    (out / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "links.json").write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gemm_kernels.lab.class_build", description=__doc__.split("\n")[0])
    parser.add_argument("out", help="a new folder: push it as the class repository")
    parser.add_argument("--repo", required=True, help="the class repository, OWNER/NAME")
    parser.add_argument("--pin", default="main", help="the branch or tag of the class repository the links open")
    parser.add_argument("--notebooks", default="", help="comma-separated notebook names (default: all)")
    args = parser.parse_args(argv)
    try:
        found = build(args.out, args.repo, args.pin, [n for n in args.notebooks.split(",") if n] or None)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"class release in {args.out}: push it to {args.repo} ({args.pin}); hand out {found['nbgitpuller']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
