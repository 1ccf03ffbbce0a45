"""Assemble the book's source tree from the repository and build it with Sphinx.

:func:`assemble` writes a source tree (conf.py, the pages, a copy of every notebook with its page
header, the student copies to download, images/) into a scratch folder; :func:`build` runs Sphinx
on it with warnings as errors and checks every local link and image of the result
(:func:`check_site`).  Notebooks run in a kernel of their own, forced into the interpreter, with
their outputs cached by jupyter-cache in ``cache_root/<fingerprint>``: the fingerprint covers the
package's code, the committed results and the versions of torch, triton and numpy, so a change
to any of them runs the notebooks again (the cache itself keys on each notebook's code).
With ``solutions=False`` (``--no-solutions``, ``make book SOLUTIONS=0``: a class's site) the pages are
the student copies' cells, every solution region replaced by its stub, and nothing is folded.
"""

from __future__ import annotations

import copy
import hashlib
import html.parser
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat

from . import colab_url, binder_url, github_repo
from .glossary import glossary_markdown
from .pages import BookError, index_markdown, notebook_info, syllabus_markdown

REPO_ROOT = Path(__file__).resolve().parents[2]
TITLE = "Triton GEMM, from pointers to persistent TMA"
#: environment of the kernels that execute the notebooks: the interpreter (reproducible pages on
#: any machine), a static picture beside every explorer, and no learner progress recorded
KERNEL_ENV = {"GEMM_KERNELS_INTERPRET": "1", "GEMM_KERNELS_STATIC_WIDGETS": "1", "GEMM_KERNELS_PROGRESS": "off"}
#: seconds one cell may run (the interpreter is slow; CI's machines have 2 cores)
CELL_TIMEOUT_S = 900
_FINGERPRINT = re.compile(r"^[0-9a-f]{16}$")

CSS = """\
div.body { max-width: none; }
div.document { width: auto; max-width: 1280px; }
.gk-nav p, .gk-launch p { margin: 0.2em 0; }
.gk-nav { border-bottom: 1px solid #ddd; padding-bottom: 0.3em; }
.gk-launch img { vertical-align: middle; margin-right: 0.4em; }
.gk-objectives { background: #f3f7fa; border-left: 4px solid #2a6f97; padding: 0.4em 1em; margin: 1em 0; }
.cell_output img, .gk-explorer-static img { max-width: 100%; height: auto; }
.gk-hidden { display: none !important; }
a.reference .gk-term { text-decoration: underline dotted; }
"""

JS = """\
// An explorer's static picture (GEMM_KERNELS_STATIC_WIDGETS=1) duplicates the live widget once the
// embedded widget state has rendered it (the widget scripts load from a CDN): then hide the picture.
(function () {
  function hideDuplicates() {
    document.querySelectorAll(".gk-explorer-static").forEach(function (picture) {
      var output = picture.closest(".cell_output");
      if (output && output.querySelector(".widget-subarea")) picture.classList.add("gk-hidden");
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    new MutationObserver(hideDuplicates).observe(document.body, {childList: true, subtree: true});
  });
})();
"""


def badge_svg(label: str, color: str) -> str:
    """A small flat badge, drawn here so the pages load no image from elsewhere."""
    width = 14 + 7 * len(label)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20" role="img" aria-label="{label}">'
            f'<rect width="{width}" height="20" rx="3" fill="{color}"/>'
            f'<text x="{width / 2:g}" y="14" fill="#fff" font-family="DejaVu Sans,Verdana,sans-serif" '
            f'font-size="11" text-anchor="middle">{label}</text></svg>\n')


def notebook_paths(repo_root: Path = REPO_ROOT) -> list:
    from ..lab.student import notebook_paths as paths

    found = paths(Path(repo_root) / "notebooks")
    if not found:
        raise BookError(f"no notebooks (NN_slug.ipynb) in {Path(repo_root) / 'notebooks'}: the book is built from a "
                        "clone of the repository")
    return found


def _split_card(card: str, path: Path) -> tuple:
    """(title line, introduction, objectives and what follows) of a notebook's first cell."""
    lines = card.split("\n")
    head = next((i for i, line in enumerate(lines) if line.startswith("# ")), None)
    start = next((i for i, line in enumerate(lines) if line.startswith("**What you will learn")), None)
    if head is None or start is None or start < head:
        raise BookError(f"{path.name}: its first cell needs a '# NN · Title' line, then '**What you will learn**'")
    return "\n".join(lines[:head + 1]), "\n".join(lines[head + 1:start]).strip(), "\n".join(lines[start:]).strip()


def page_notebook(nb, info, previous=None, following=None, repo: str | None = None, solutions: bool = True):
    """A copy of ``nb`` as its book page shows it: under the title, links to the previous and next
    notebooks, the syllabus and the glossary, the launch buttons and the student copy; the objectives
    and prerequisites in a box; every solution folded away (tag ``hide-input``), or with ``solutions=False``
    replaced by its stub as in a student copy; nbgrader's hidden tests and Predict answer cells left out."""
    from ..lab.nbgrader_markup import is_prediction
    from ..lab.student import strip_hidden_tests, strip_solutions

    nb = copy.deepcopy(nb)
    nb.cells = [cell for cell in nb.cells if not is_prediction(cell)]  # a reader has nowhere to write
    name = info.path.name
    title, intro, objectives = _split_card(nb.cells[0].source, info.path)
    nav = []
    if previous is not None:
        nav.append(f"[← {previous.short_title}]({previous.stem}.ipynb)")
    nav += ["[syllabus](../syllabus.md)", "[glossary](../glossary.md)"]
    if following is not None:
        nav.append(f"[{following.short_title} →]({following.stem}.ipynb)")
    launch = (f"[![Open in Colab](../_book/colab.svg)]({colab_url(name, repo)}) "
              f"[![Launch on Binder](../_book/binder.svg)]({binder_url(name, repo)}) "
              f"{{download}}`Student copy <../student/{name}>` (the exercises without their solutions)")
    nb.cells[0].source = "\n".join([
        title, "",
        "```{container} gk-nav", " · ".join(nav), "```", "",
        "```{container} gk-launch", launch, "```", "",
        intro, "",
        "````{container} gk-objectives", objectives, "````", ""])
    for cell in nb.cells:
        if cell.cell_type == "code":  # nbgrader's hidden tests are for autograding, not for readers
            cell.source = strip_hidden_tests(cell.source)
            if not solutions:
                cell.source = strip_solutions(cell.source, where=f"{name}, cell {cell.get('id')}")
        if cell.cell_type == "code" and "### BEGIN SOLUTION" in cell.source:
            tags = cell.metadata.setdefault("tags", [])
            if "hide-input" not in tags:
                tags.append("hide-input")
    return nb


def conf_py(cache_path: Path, solutions: bool = True) -> str:
    """The Sphinx configuration of the book (written into the source tree)."""
    settings = {
        "project": TITLE,
        "author": "the gemm-kernels contributors",
        "copyright": "the gemm-kernels contributors, MIT License",
        "extensions": ["myst_nb", "gemm_kernels.book.sphinxext"],
        "exclude_patterns": ["student/**", "_book/**", "images/**", "**/.ipynb_checkpoints", ".doctrees"],
        "html_theme": "alabaster",
        "html_theme_options": {"page_width": "1280px", "sidebar_width": "230px", "show_relbars": True,
                               "description": "one idea per notebook, from a first kernel to persistent TMA"},
        "html_title": TITLE,
        "html_static_path": ["_static"],
        "html_css_files": ["gk-book.css"],
        "html_js_files": ["gk-book.js"],
        "html_copy_source": False,  # the sources are the solved notebooks: the page offers the student copy
        "html_show_sourcelink": False,
        "nitpicky": True,
        "myst_heading_anchors": 3,
        "nb_execution_mode": "cache",
        "nb_execution_cache_path": str(cache_path),
        "nb_execution_timeout": CELL_TIMEOUT_S,
        "nb_execution_raise_on_error": True,
        "nb_execution_show_tb": True,
        "nb_merge_streams": True,
    }
    if solutions:  # the book folds away only the solutions (page_notebook)
        settings.update(nb_code_prompt_show="Show the solution", nb_code_prompt_hide="Hide the solution")
    lines = ['"""Sphinx configuration of the book, written by gemm_kernels.book.build (edit that, not this)."""', ""]
    lines += [f"{key} = {value!r}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def assemble(source: Path | str, *, repo_root: Path = REPO_ROOT, cache_path: Path | None = None,
             repo: str | None = None, solutions: bool = True) -> list:
    """Write the book's source tree into ``source`` (which must be empty or absent); returns the
    notebooks' :class:`~.pages.NotebookInfo`, in order (``solutions=False``: no solution in it)."""
    from ..lab.student import write_student_copies

    source = Path(source)
    if source.exists() and any(source.iterdir()):
        raise BookError(f"{source} is not empty: the book's source tree is written into an empty folder")
    repo = github_repo(repo)
    paths = notebook_paths(repo_root)
    books = {path: nbformat.read(path, as_version=4) for path in paths}
    infos = [notebook_info(path, books[path]) for path in paths]
    (source / "notebooks").mkdir(parents=True)
    for i, (path, info) in enumerate(zip(paths, infos)):
        page = page_notebook(books[path], info, infos[i - 1] if i else None,
                             infos[i + 1] if i + 1 < len(infos) else None, repo, solutions)
        nbformat.write(page, source / "notebooks" / path.name)
    write_student_copies(Path(repo_root) / "notebooks", source / "student")
    images = Path(repo_root) / "images"
    if images.is_dir():
        shutil.copytree(images, source / "images")
    (source / "_static").mkdir()
    (source / "_static" / "gk-book.css").write_text(CSS)
    (source / "_static" / "gk-book.js").write_text(JS)
    (source / "_book").mkdir()
    (source / "_book" / "colab.svg").write_text(badge_svg("Open in Colab", "#e37400"))
    (source / "_book" / "binder.svg").write_text(badge_svg("Launch on Binder", "#579aca"))
    (source / "index.md").write_text(index_markdown(infos, repo=repo, title=TITLE, solutions=solutions))
    (source / "syllabus.md").write_text(syllabus_markdown(infos))
    (source / "glossary.md").write_text(glossary_markdown())
    (source / "conf.py").write_text(conf_py(Path(cache_path) if cache_path else source / ".jupyter_cache", solutions))
    return infos


def fingerprint(repo_root: Path = REPO_ROOT) -> str:
    """16 hex digits that change with the package's code, the committed results, the versions of
    python, torch, triton and numpy and the GPU the notebooks are told they run on
    (``GEMM_KERNELS_ARCH``): what a notebook's outputs depend on besides its own code."""
    import numpy
    import torch
    import triton

    digest = hashlib.sha256()
    root = Path(repo_root)
    files = sorted(p for p in (root / "gemm_kernels").rglob("*.py") if "book" not in p.relative_to(root).parts[1:2])
    files += sorted(p for p in (root / "images").rglob("*") if p.is_file())
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    from ..runtime import ARCH_ENV

    for version in (platform.python_version(), torch.__version__, triton.__version__, numpy.__version__,
                    os.environ.get(ARCH_ENV, "")):
        digest.update(version.encode() + b"\0")
    return digest.hexdigest()[:16]


def cache_dir(cache_root: Path, repo_root: Path = REPO_ROOT) -> Path:
    """``cache_root/<fingerprint>``; older fingerprints' folders in ``cache_root`` are removed."""
    cache_root = Path(cache_root)
    current = cache_root / fingerprint(repo_root)
    if cache_root.is_dir():
        for old in cache_root.iterdir():
            if old != current and old.is_dir() and _FINGERPRINT.match(old.name):
                shutil.rmtree(old)
    return current


@contextmanager
def _environment(values: dict):
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _check_tools() -> None:
    try:
        import myst_nb  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError as exc:
        raise BookError(f"the book needs the [book] extra ({exc.name} is missing): pip install -e '.[book]' "
                        "(`make book` installs it)") from None


def _prepare_out(out: Path) -> None:
    """An output folder that is new, empty or a previous build of the book (then emptied)."""
    if out.exists():
        if not out.is_dir():
            raise BookError(f"{out} is a file: give a folder for the book")
        if any(out.iterdir()) and not (out / ".buildinfo").is_file():
            raise BookError(f"{out} holds files that are not a build of the book: give a new or empty folder")
        shutil.rmtree(out)
    out.mkdir(parents=True)


def build(out: Path | str, *, cache_root: Path | str | None = None, source: Path | str | None = None,
          jobs: int = 1, repo: str | None = None, repo_root: Path = REPO_ROOT, solutions: bool = True) -> dict:
    """Build the site into ``out`` (replacing an earlier build there); BookError when Sphinx reports an
    error or a warning (an execution error, a broken reference, a missing image) or a local link of
    the result is broken (``solutions=False``: pages without solutions).  Returns {"seconds": ..., "pages": ...}."""
    _check_tools()
    from sphinx.cmd.build import build_main

    out = Path(out).resolve()
    cache_root = Path(cache_root).resolve() if cache_root else Path(repo_root) / "build" / "book-cache"
    start = time.perf_counter()
    cache = cache_dir(cache_root, repo_root)
    _prepare_out(out)
    with tempfile.TemporaryDirectory(prefix="gemm-book-") as scratch:
        scratch = Path(scratch)
        src = Path(source).resolve() if source else scratch / "src"
        assemble(src, repo_root=repo_root, cache_path=cache, repo=repo, solutions=solutions)
        # MyST-NB writes the outputs' images next to Sphinx's output folder: keep both in the scratch folder
        rendered = scratch / "site" / "html"
        args = ["-b", "html", "-W", "--keep-going", "-n", "-j", str(jobs), "-d", str(scratch / "doctrees"),
                str(src), str(rendered)]
        with _environment(KERNEL_ENV):
            status = build_main(args)
        if status:
            raise BookError(f"sphinx-build stopped with status {status}: the messages above name each notebook, "
                            "cell or page at fault")
        shutil.copytree(rendered, out, dirs_exist_ok=True)
    (out / ".nojekyll").write_text("")  # GitHub Pages: serve _static/ and _images/ as they are
    problems = check_site(out)
    if problems:
        raise BookError(f"{len(problems)} broken local links or images in {out}:\n  " + "\n  ".join(problems[:40]))
    pages = sorted(str(p.relative_to(out)) for p in out.rglob("*.html"))
    return {"seconds": time.perf_counter() - start, "pages": pages}


# ------------------------------------------------------------------------------ the built site
class _Links(html.parser.HTMLParser):
    """The ids and the local references (a href, img src, link href, script src) of one page."""

    ATTRS = {"a": "href", "img": "src", "link": "href", "script": "src", "source": "src", "iframe": "src"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.refs = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        wanted = self.ATTRS.get(tag)
        if wanted and attrs.get(wanted) is not None:
            self.refs.append((tag, attrs[wanted]))


def _parse(page: Path, cache: dict) -> _Links:
    if page not in cache:
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        cache[page] = parser
    return cache[page]


def check_site(site: Path | str) -> list:
    """Every broken local reference of the built site: a link, image, stylesheet or script whose file
    is missing, or a link whose #anchor is not on its page.  Other sites' links are not followed."""
    site = Path(site).resolve()
    problems, cache = [], {}
    pages = sorted(site.rglob("*.html"))
    if not pages:
        return [f"{site}: no HTML pages (was the book built?)"]
    for page in pages:
        for tag, ref in _parse(page, cache).refs:
            parts = urlsplit(ref)
            if parts.scheme or parts.netloc or ref.startswith("//"):
                continue  # another site, data:, mailto:, javascript:
            where = f"{page.relative_to(site)}: <{tag}> {ref!r}"
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if parts.path.endswith("/") or target.is_dir():
                target = target / "index.html"
            if not target.is_relative_to(site):
                problems.append(f"{where} points outside the site")
            elif not target.is_file():
                problems.append(f"{where}: no such file")
            elif (parts.fragment and target.suffix == ".html"
                  and unquote(parts.fragment) not in _parse(target, cache).ids):
                problems.append(f"{where}: no id {parts.fragment!r} on {target.relative_to(site)}")
    return problems


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gemm_kernels.book",
                                     description="The course as a website: every notebook executed and rendered.")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the site into OUT (an earlier build there is replaced)")
    b.add_argument("out", type=Path)
    b.add_argument("--cache", type=Path, default=None, help="execution cache root (default: build/book-cache)")
    b.add_argument("--source", type=Path, default=None, help="write the source tree here (an empty folder) and keep it")
    b.add_argument("--jobs", type=int, default=1, help="notebooks executed at once (default 1)")
    b.add_argument("--repo", default=None, help="OWNER/NAME on GitHub for the launch buttons "
                                                "(default: $GEMM_KERNELS_REPO, else gemm-kernels/gemm-kernels)")
    a = sub.add_parser("assemble", help="only write the source tree into DIR (an empty folder)")
    a.add_argument("dir", type=Path)
    a.add_argument("--repo", default=None)
    for command in (b, a):
        command.add_argument("--no-solutions", dest="solutions", action="store_false",
                             help="pages as the student copies show them: no solution, nothing to unfold "
                                  "(a class's site)")
    c = sub.add_parser("check", help="check every local link and image of a built site")
    c.add_argument("site", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            if args.jobs < 1:
                raise BookError(f"--jobs must be 1 or more, got {args.jobs}")
            result = build(args.out, cache_root=args.cache, source=args.source, jobs=args.jobs, repo=args.repo,
                           solutions=args.solutions)
            print(f"the book: {len(result['pages'])} pages in {args.out.resolve()} "
                  f"({result['seconds']:.0f} s); open {args.out.resolve() / 'index.html'}")
        elif args.command == "assemble":
            infos = assemble(args.dir, repo=args.repo, solutions=args.solutions)
            print(f"source tree of {len(infos)} notebooks in {args.dir.resolve()}")
        else:
            problems = check_site(args.site)
            for problem in problems:
                print(problem)
            if problems:
                return 1
            print(f"{args.site}: every local link and image resolves")
    except (BookError, ValueError) as exc:
        print(f"book: {exc}", file=sys.stderr)
        return 1
    return 0
