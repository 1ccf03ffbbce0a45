"""The book (``make book``, gemm_kernels.book): its pages, its glossary links, the explorers' static
pictures, and the built site.

Three kinds of test:

* the source tree and the pages, in process (no Sphinx needed);
* small Sphinx builds (marker ``book``; skipped without the ``[book]`` extra);
* the site ``make book`` built (marker ``book``): ``make test-book`` sets GEMM_KERNELS_BOOK_SITE and
  runs them: every notebook executed, every local link and image resolves, and every page in
  headless Chromium (Debian's, as tests/test_browser.py) shows its pictures and no error output.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path

import nbformat
import pytest

from gemm_kernels import book
from gemm_kernels.book import build as bb
from gemm_kernels.book import glossary, pages
from gemm_kernels.book.sphinxext import find_terms
from gemm_kernels.lab import student
from gemm_kernels.lab.nbgrader_markup import is_prediction
from gemm_kernels.lab.student import BEGIN, strip_hidden_tests

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (REPO / "notebooks").glob("*.ipynb"))
SITE_ENV = "GEMM_KERNELS_BOOK_SITE"


def _infos():
    return [pages.notebook_info(p) for p in bb.notebook_paths(REPO)]


def _card(title="# 00 · A title: more", objectives=True, prereq=True):
    parts = [title, "", "An introduction.", ""]
    if objectives:
        parts += ["**What you will learn**", "", "- one thing;", "- another", "  on two lines.", ""]
    if prereq:
        parts += ["**Prerequisites:** none.", ""]
    return "\n".join(parts)


def _notebook(card, code=("x = 1",)):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(card)] + [nbformat.v4.new_code_cell(c) for c in code]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


# ------------------------------------------------------------------------------- pages
def test_every_notebook_has_a_card_and_a_place_in_the_syllabus():
    infos = _infos()
    assert [i.path.name for i in infos] == [p.name for p in NOTEBOOKS if re.match(r"^\d\d[a-z]?_", p.name)]
    assert set(pages.COURSE) == {i.stem for i in infos}, "COURSE (book/pages.py) must name exactly the notebooks"
    for info in infos:
        assert info.objectives and all(item.strip() for item in info.objectives), info.path.name
        assert info.prerequisites, info.path.name
        assert info.short_title.startswith(info.number + " · "), info.short_title
        assert info.exercises >= 1 and info.reading_min > 0 and info.exercise_min > 0, info.path.name


def test_hopper_column_agrees_with_the_notebooks_code():
    """A notebook that asks for wgmma (a Hopper GPU) says so; one that asks for neither wgmma nor TMA says no."""
    for info in _infos():
        code = "\n".join(c.source for c in nbformat.read(info.path, 4).cells if c.cell_type == "code")
        hopper = pages.COURSE[info.stem].hopper
        if "supports_wgmma()" in code or "HOPPER" in code:
            assert hopper, f"{info.path.name} runs Hopper-only code: COURSE must say what needs a Hopper GPU"
        if "supports_wgmma()" not in code and "supports_tma()" not in code and "HOPPER" not in code:
            assert not hopper, f"{info.path.name} checks for no Hopper feature, yet COURSE says {hopper!r}"


def test_syllabus_has_time_prerequisites_and_hopper_for_every_notebook():
    infos = _infos()
    text = pages.syllabus_markdown(infos)
    for info in infos:
        row = next(line for line in text.splitlines() if f"(notebooks/{info.stem}.ipynb)" in line)
        assert info.prerequisites in row and f"{info.reading_min}\u00a0min" in row
        assert ("core" if pages.COURSE[info.stem].core else "optional") in row
    assert "estimates" in text and "Hopper" in text


def test_estimates_follow_length_and_exercises():
    nb = _notebook(_card(), code=())
    nb.cells += [nbformat.v4.new_markdown_cell("### Exercise 1: numbers"),
                 nbformat.v4.new_code_cell(f"def f():\n    {BEGIN}\n    return 1\n    ### END SOLUTION"),
                 nbformat.v4.new_markdown_cell("### Exercise 2: a kernel"),
                 nbformat.v4.new_code_cell(f"@triton.jit\ndef k():\n    {BEGIN}\n    pass\n    ### END SOLUTION"),
                 nbformat.v4.new_markdown_cell(" ".join(["word"] * 990))]
    info = pages.notebook_info(Path("00_x.ipynb"), nb)
    assert (info.exercises, info.kernel_exercises, info.code_cells) == (2, 1, 2)
    assert info.objectives == ("one thing;", "another on two lines.") and info.prerequisites == "none."
    # ~1000 words at 100 a minute + 2 code cells = 12 min -> 15; 10 + 25 = 35 min of exercises
    assert (info.reading_min, info.exercise_min) == (15, 35)


@pytest.mark.parametrize("card, missing", [
    (_card(title="No heading"), "Title"),
    (_card(objectives=False), "What you will learn"),
    (_card(prereq=False), "Prerequisites"),
])
def test_a_notebook_without_its_card_stops_the_book_naming_it(card, missing):
    with pytest.raises(pages.BookError, match=rf"07_broken\.ipynb.*{missing}"):
        pages.notebook_info(Path("07_broken.ipynb"), _notebook(card))


def test_a_notebook_missing_from_the_course_table_is_named():
    info = pages.notebook_info(Path("42_new_idea.ipynb"), _notebook(_card()))
    with pytest.raises(pages.BookError, match=r"42_new_idea\.ipynb is not in .*COURSE"):
        pages.syllabus_markdown([info])


def test_page_header_links_launch_buttons_and_folded_solutions():
    infos = _infos()
    i = next(k for k, info in enumerate(infos) if info.stem == "03_grouped_l2_ordering")
    source = nbformat.read(infos[i].path, 4)
    before = nbformat.writes(source)
    page = bb.page_notebook(source, infos[i], infos[i - 1], infos[i + 1], repo="someone/course")
    assert nbformat.writes(source) == before, "the notebook itself must not change"
    card = page.cells[0].source
    assert card.startswith("# 03 · ")
    assert f"[← {infos[i - 1].short_title}]({infos[i - 1].stem}.ipynb)" in card
    assert f"[{infos[i + 1].short_title} →]({infos[i + 1].stem}.ipynb)" in card
    assert ("https://colab.research.google.com/github/someone/course/blob/student-copies/03_grouped_l2_ordering.ipynb"
            in card)
    assert "https://mybinder.org/v2/gh/someone/course/HEAD?labpath=student/03_grouped_l2_ordering.ipynb" in card
    assert "{download}`Student copy <../student/03_grouped_l2_ordering.ipynb>`" in card
    assert card.index("gk-nav") < card.index("gk-launch") < card.index("gk-objectives")
    assert "**What you will learn" in card.split("gk-objectives", 1)[1]
    shown = [c for c in source.cells if not is_prediction(c)]  # nowhere to write a prediction on a page
    assert len(shown) < len(source.cells) and len(page.cells) == len(shown)
    for original, cell in zip(shown[1:], page.cells[1:]):
        assert cell.source == (strip_hidden_tests(original.source) if cell.cell_type == "code" else original.source)
        folded = "hide-input" in cell.metadata.get("tags", [])
        assert folded == (cell.cell_type == "code" and BEGIN in cell.source)
    opening = bb.page_notebook(nbformat.read(infos[0].path, 4), infos[0], None, infos[1]).cells[0].source
    assert "←" not in opening and f"{infos[1].short_title} →" in opening
    closing = bb.page_notebook(nbformat.read(infos[-1].path, 4), infos[-1], infos[-2], None).cells[0].source
    assert "→" not in closing and f"← {infos[-2].short_title}" in closing


def _solution_regions(nb) -> list[str]:
    """The text between the markers of every solution region of ``nb`` (stripped lines, joined)."""
    regions, inside = [], None
    for index in student.solution_cells(nb):
        for line in nb.cells[index].source.splitlines():
            if line.strip() == BEGIN:
                inside = []
            elif line.strip() == student.END:
                regions.append("\n".join(inside))
                inside = None
            elif inside is not None and line.strip():
                inside.append(line.strip())
    return regions


def test_a_book_without_solutions(tmp_path):
    """Issue 48: `make book SOLUTIONS=0` (--no-solutions) builds a class's site: every page's code is the
    student copy's (solution regions replaced by their stub), nothing folded, no "Show the solution"
    anywhere, and no file of the source tree holds a solution's text (a known solution line included)."""
    src = tmp_path / "src"
    assert bb.main(["assemble", str(src), "--no-solutions"]) == 0
    text = {p: p.read_text(encoding="utf-8") for p in src.rglob("*") if p.suffix in (".ipynb", ".md", ".py")}
    known = "programs = (n + block - 1) // block"  # 00's launch_stats, as notebooks/ solve it
    assert known in (REPO / "notebooks" / "00_start_here.ipynb").read_text(encoding="utf-8")
    assert not any(known in content or "Show the solution" in content for content in text.values())
    for path in NOTEBOOKS:
        nb = nbformat.read(path, 4)
        page = nbformat.read(src / "notebooks" / path.name, 4)
        assert not any("hide-input" in c.metadata.get("tags", []) for c in page.cells), path.name
        code = [c.source for c in page.cells if c.cell_type == "code"]
        assert sum(student.STUB in source for source in code) == len(student.solution_cells(nb)) > 0, path.name
        shown = "\n".join(line.strip() for source in code for line in source.splitlines() if line.strip())
        for region in _solution_regions(nb):
            assert region not in shown, (path.name, region[:80])
    assert "without their solutions" in text[src / "index.md"]


def test_pages_without_solutions_execute_their_exercises(monkeypatch):
    """What the book's execution runs of a page without solutions: every check cell reports "not
    attempted" (a check never raises, the hidden tests are out), so `make book SOLUTIONS=0` builds."""
    monkeypatch.setenv("GEMM_KERNELS_PROGRESS", "off")
    for path in NOTEBOOKS:
        nb = nbformat.read(path, 4)
        page = bb.page_notebook(nb, pages.notebook_info(path, nb), solutions=False)
        results = student.exercise_results(page, path.name)
        assert len(results) >= 2 and {r.status for r in results} == {"not attempted"}, path.name


def test_repository_for_the_launch_buttons(monkeypatch):
    monkeypatch.delenv(book.REPO_ENV, raising=False)
    assert book.github_repo() == book.DEFAULT_REPO
    monkeypatch.setenv(book.REPO_ENV, "me/my-fork")
    assert book.colab_url("00_start_here.ipynb").startswith("https://colab.research.google.com/github/me/my-fork/")
    assert book.github_repo("other/name") == "other/name"
    monkeypatch.setenv(book.REPO_ENV, "not a repository")
    with pytest.raises(ValueError, match="GEMM_KERNELS_REPO must be a GitHub repository as OWNER/NAME"):
        book.github_repo()


def test_assemble_writes_the_source_tree(tmp_path):
    src = tmp_path / "src"
    infos = bb.assemble(src, cache_path=tmp_path / "cache")
    assert [p.name for p in (src / "notebooks").glob("*.ipynb")] and len(infos) == len(NOTEBOOKS)
    for info in infos:
        student = nbformat.read(src / "student" / info.path.name, 4)
        assert not any(BEGIN in c.source for c in student.cells if c.cell_type == "code"), info.path.name
        assert "gk-launch" in nbformat.read(src / "notebooks" / info.path.name, 4).cells[0].source
    for name in ("index.md", "syllabus.md", "glossary.md", "_static/gk-book.css", "_static/gk-book.js",
                 "_book/colab.svg", "_book/binder.svg"):
        assert (src / name).is_file(), name
    conf = {}
    exec((src / "conf.py").read_text(), conf)
    assert conf["nb_execution_mode"] == "cache" and conf["nb_execution_raise_on_error"] is True
    assert conf["nb_execution_cache_path"] == str(tmp_path / "cache") and conf["nitpicky"] is True
    assert "student/**" in conf["exclude_patterns"] and "images/**" in conf["exclude_patterns"]
    index = (src / "index.md").read_text()
    assert all(f"notebooks/{info.stem}" in index for info in infos) and "syllabus" in index and "glossary" in index
    with pytest.raises(pages.BookError, match="is not empty"):
        bb.assemble(src)


def test_the_build_refuses_a_folder_that_is_not_a_book(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(pages.BookError, match="not a build of the book"):
        bb._prepare_out(tmp_path)
    assert (tmp_path / "mine.txt").read_text() == "keep me"
    earlier = tmp_path / "book"
    earlier.mkdir()
    (earlier / ".buildinfo").write_text("")
    (earlier / "old.html").write_text("")
    bb._prepare_out(earlier)
    assert earlier.is_dir() and not any(earlier.iterdir())


def test_execution_cache_follows_the_package_code(tmp_path):
    root = tmp_path / "repo"
    (root / "gemm_kernels" / "book").mkdir(parents=True)
    (root / "images").mkdir()
    (root / "gemm_kernels" / "kernel.py").write_text("A = 1\n")
    (root / "gemm_kernels" / "book" / "pages.py").write_text("P = 1\n")
    (root / "images" / "result.csv").write_text("1\n")
    first = bb.fingerprint(root)
    (root / "gemm_kernels" / "book" / "pages.py").write_text("P = 2\n")  # the book's own code: same outputs
    assert bb.fingerprint(root) == first
    (root / "gemm_kernels" / "kernel.py").write_text("A = 2\n")
    second = bb.fingerprint(root)
    (root / "images" / "result.csv").write_text("2\n")
    assert len({first, second, bb.fingerprint(root)}) == 3
    caches = tmp_path / "caches"
    (caches / first).mkdir(parents=True)
    (caches / "notes").mkdir()
    current = bb.cache_dir(caches, root)
    assert current.parent == caches and not (caches / first).exists() and (caches / "notes").is_dir()


def test_ci_and_workflows_build_and_check_the_book():
    ci = (REPO / ".ci" / "run").read_text()
    assert ci.index("step make test\n") < ci.index("GEMM_KERNELS_ARCH=sm_86 make book && make test-book")
    test = (REPO / ".github" / "workflows" / "test.yml").read_text()
    assert re.search(r"^on:\n  push:\n  pull_request:", test, re.M) and "run: bash .ci/run" in test
    pages_yml = (REPO / ".github" / "workflows" / "book.yml").read_text()
    assert re.search(r"^on:\n  push:\n    branches: \[main\]", pages_yml, re.M)
    steps = [pages_yml.index(s) for s in ("run: make book", "run: make test-book", "actions/upload-pages-artifact",
                                          "actions/deploy-pages")]
    assert steps == sorted(steps) and "path: build/book\n" in pages_yml
    makefile = (REPO / "Makefile").read_text()
    assert "gemm_kernels.book build $(BOOK_DIR)" in makefile and "BOOK_DIR ?= build/book" in makefile


def test_book_workflow_publishes_the_student_copies_colab_opens():
    """Colab opens files on GitHub only: the build job makes the student copies (badges and set-up cells
    naming this repository), a job of its own, the only one that may write, force-pushes them to the root
    of the orphan branch colab_url names."""
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "book.yml").read_text())
    assert workflow["permissions"] == {"contents": "read"}
    jobs = workflow["jobs"]
    build = jobs["build"]
    assert build["env"][book.REPO_ENV] == "${{ github.repository }}"
    runs = [step.get("run", "") for step in build["steps"]]
    assert any("-m gemm_kernels.lab.student notebooks build/student-copies" in run for run in runs)
    upload = next(step for step in build["steps"] if step.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["with"]["name"] == "student-copies"
    publish = jobs[book.STUDENT_BRANCH]
    assert publish["needs"] == "build" and publish["permissions"] == {"contents": "write"}
    assert [name for name, job in jobs.items() if "write" in (job.get("permissions") or {}).get("contents", "")] == \
        [book.STUDENT_BRANCH]
    script = next(step["run"] for step in publish["steps"] if "run" in step)
    assert f"git checkout --orphan {book.STUDENT_BRANCH}" in script and "git rm -rfq ." in script
    assert f"git push --force origin {book.STUDENT_BRANCH}" in script
    assert "/student-copies/*.ipynb ." in script  # the copies at the branch's root, where colab_url looks
    assert book.colab_url("00_start_here.ipynb", "a/b").endswith(f"/a/b/blob/{book.STUDENT_BRANCH}/00_start_here.ipynb")


# ------------------------------------------------------------------------------- glossary
def test_glossary_terms_are_unique_and_findable():
    names = [t.name for t in glossary.TERMS]
    assert len(names) == len(set(names))
    for term in glossary.TERMS:
        assert term.regex is not None or term.code, term.name
        assert len(term.definition.split()) >= 10, f"{term.name}: a few accurate lines, please"
    text = glossary.glossary_markdown()
    assert text.count("\n  ") == len(names) and "```{glossary}" in text
    wanted = {"SM", "wave", "tile", "program", "launch grid", "L2 partition", "TMA", "tensor descriptor", "mbarrier",
              "warpgroup", "wgmma", "swizzle", "offs", "Stream-K", "persistent kernel", "autotuning", "interpreter"}
    assert wanted <= set(names)


def test_find_terms_first_use_longest_match_and_whole_words():
    terms = {t.name: t for t in glossary.TERMS}
    text = "Programs of a wave: the epilogue\nfusion of many programs; the K tail; the last wave's tail; SMs"
    found = find_terms(text, dict(terms))
    words = [(text[s:e], t.name) for s, e, t in found]
    assert ("Programs", "program") in words and ("wave", "wave") in words
    assert ("epilogue\nfusion", "epilogue") in words  # the longer phrase, across a line break
    assert sum(name == "program" for _, name in words) == 1  # first use only
    assert ("tail", "tail") in words and text.index("tail;", text.index("last")) == found[[n for _, n in words].index(
        "tail")][0]  # not "the K tail"
    assert ("SMs", "SM") in words
    assert find_terms("smem and small programming", {"SM": terms["SM"], "program": terms["program"]}) == []


# ------------------------------------------------------------------------------- explorers
EXPLORERS = ["schedule_explorer", "pointer_explorer", "grouped_schedule_explorer", "ws_timeline_explorer"]


def _explorer(name, **kwargs):
    import gemm_kernels as gk

    return getattr(gk, name)(**kwargs)


@pytest.mark.parametrize("name", EXPLORERS)
def test_explorer_static_picture_only_when_asked(name, monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *args, **kwargs: shown.append((args, kwargs)))
    ex = _explorer(name)
    monkeypatch.delenv("GEMM_KERNELS_STATIC_WIDGETS", raising=False)
    bundle = ex._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and shown == []
    monkeypatch.setenv("GEMM_KERNELS_STATIC_WIDGETS", "1")
    assert ex._repr_mimebundle_() == bundle  # the widget, as before
    assert len(shown) == 1 and shown[0][1] == {"raw": True}
    picture = shown[0][0][0]
    assert picture["text/html"].count("<img src='data:image/png;base64,") == 1
    assert picture["image/png"] and picture["image/png"] in picture["text/html"]
    assert ex.counters.value in picture["text/html"] and "running Python kernel" in picture["text/html"]


def test_static_picture_of_a_bad_setting_is_its_message():
    ex = _explorer("schedule_explorer")
    ex.M.value = 64  # BLOCK_M = 128 > M
    assert ex.error
    picture = ex.static_picture()
    assert "image/png" not in picture and "<img" not in picture["text/html"]
    assert "BLOCK_M = 128 is larger than M = 64" in picture["text/html"]


# ------------------------------------------------------------------------------- the site's links
def _page(path: Path, body: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<html><body>{body}</body></html>")


def test_check_site_reports_broken_links_images_and_anchors(tmp_path):
    _page(tmp_path / "index.html", "<a href='a/page.html#here'>ok</a><a href='https://example.org/x'>away</a>"
                                   "<img src='_images/pic.png'><a href='#top' id='top'>self</a>")
    _page(tmp_path / "a" / "page.html", "<h1 id='here'>x</h1><a href='../index.html'>up</a>"
                                        "<img src='data:image/png;base64,AAAA'>")
    (tmp_path / "_images").mkdir()
    (tmp_path / "_images" / "pic.png").write_bytes(b"png")
    assert bb.check_site(tmp_path) == []
    _page(tmp_path / "b.html", "<a href='a/page.html#gone'>1</a><img src='_images/none.png'>"
                               "<script src='_static/none.js'></script><a href='../../etc/passwd'>out</a>")
    problems = bb.check_site(tmp_path)
    assert len(problems) == 4, problems
    assert any("no id 'gone'" in p for p in problems) and any("_images/none.png" in p for p in problems)
    assert any("none.js" in p for p in problems) and any("outside the site" in p for p in problems)


def test_command_line_says_what_is_wrong_in_one_line(tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.txt").write_text("")
    assert bb.main(["assemble", str(tmp_path / "full")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("book: ") and "is not empty" in err and err.count("\n") == 1
    assert bb.main(["assemble", str(tmp_path / "src"), "--repo", "no slash"]) == 1
    assert "OWNER/NAME" in capsys.readouterr().err
    _page(tmp_path / "site" / "index.html", "<img src='missing.png'>")
    assert bb.main(["check", str(tmp_path / "site")]) == 1
    assert "missing.png" in capsys.readouterr().out
    assert bb.main(["build", str(tmp_path / "out"), "--jobs", "0"]) == 1
    assert "--jobs must be 1 or more" in capsys.readouterr().err


# ------------------------------------------------------------------------------- small Sphinx builds
def _sphinx():
    pytest.importorskip("myst_nb", reason="the [book] extra is not installed: pip install -e '.[book]'")
    from sphinx.cmd.build import build_main

    return build_main


@pytest.mark.book
def test_glossary_links_in_a_small_build(tmp_path):
    build_main = _sphinx()
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("extensions = ['myst_nb', 'gemm_kernels.book.sphinxext']\nnitpicky = True\n"
                                 "nb_execution_mode = 'off'\nexclude_patterns = ['_build']\n")
    (src / "glossary.md").write_text(glossary.glossary_markdown())
    (src / "index.md").write_text(
        "# Tiles and waves\n\n```{toctree}\nglossary\n```\n\n"
        "```{container} gk-nav\nthe next tile\n```\n\n"
        "A tile is computed by a program; every tile again. The `offs` of an expert, `offs` again.\n\n"
        "```python\nwave = 1  # no link in code\n```\n\nThe first wave.\n")
    status = build_main(["-b", "html", "-W", "-n", "-q", str(src), str(tmp_path / "out")])
    assert status == 0
    page = (tmp_path / "out" / "index.html").read_text()
    links = re.findall(r'href="glossary.html#term-([^"]+)"[^>]*>(.*?)</a>', page)
    linked = [(target, re.sub(r"<[^>]+>", "", text)) for target, text in links]
    assert linked.count(("tile", "tile")) == 1 and ("program", "program") in linked
    assert ("offs", "offs") in linked and sum(t == "offs" for t, _ in linked) == 1
    assert ("wave", "wave") in linked  # the prose after the code block
    header = page.split("gk-nav", 1)[1].split("</div>", 1)[0]
    assert "glossary.html" not in header  # the page header is never linked
    title = re.search(r"<h1>(.*?)</h1>", page, re.S).group(1)
    assert "glossary.html" not in title


@pytest.mark.book
def test_a_failing_notebook_fails_the_build_naming_it(tmp_path, capsys):
    _sphinx()
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    nb = _notebook(_card(title="# 00 · Start here: broken"), code=("raise RuntimeError('the cell that breaks')",))
    nbformat.write(nb, root / "notebooks" / "00_start_here.ipynb")
    with pytest.raises(pages.BookError, match="sphinx-build stopped"):
        bb.build(tmp_path / "site", cache_root=tmp_path / "cache", repo_root=root)
    assert "the cell that breaks" in capsys.readouterr().err


@pytest.mark.book
def test_a_small_book_end_to_end(tmp_path):
    """Two notebooks through the whole build: pages with their header, the picture their markdown
    shows, an explorer's static picture and its widget state, the student copies, book-info.json."""
    _sphinx()
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "images").mkdir()
    (root / "images" / "pic.png").write_bytes(bb.REPO_ROOT.joinpath("images", "one_block_computation.png").read_bytes())
    first = _notebook(_card(title="# 00 · Start here: small"),
                      code=("from gemm_kernels.viz.widgets import pointer_explorer\npointer_explorer()",
                            f"def f():\n    {BEGIN}\n    return 1\n    ### END SOLUTION"))
    first.cells.insert(1, nbformat.v4.new_markdown_cell("A tile, drawn: ![one block](../images/pic.png)"))
    nbformat.write(first, root / "notebooks" / "00_start_here.ipynb")
    nbformat.write(_notebook(_card(title="# 01 · Pointers: small"), code=("print(6 * 7)",)),
                   root / "notebooks" / "01_pointer_arithmetic.ipynb")
    result = bb.build(tmp_path / "site", cache_root=tmp_path / "cache", repo_root=root, repo="someone/course")
    site = tmp_path / "site"
    assert "notebooks/00_start_here.html" in result["pages"] and (site / ".nojekyll").is_file()
    page = (site / "notebooks" / "00_start_here.html").read_text()
    assert 'href="01_pointer_arithmetic.html"' in page and "colab.research.google.com/github/someone/course" in page
    assert re.search(r'<img alt="one block" src="../_images/pic[^"]*\.png"', page), "the markdown's picture"
    assert page.count("gk-explorer-static") == 1 and "data:image/png;base64," in page
    assert "application/vnd.jupyter.widget-state+json" in page  # the live widgets, where the page loads them
    assert "Show the solution" in page
    download = re.search(r'href="(../_downloads/[^"]+/00_start_here.ipynb)"', page).group(1)
    student = nbformat.read(site / "notebooks" / download, 4)
    assert not any(BEGIN in c.source for c in student.cells if c.cell_type == "code")
    assert "42" in (site / "notebooks" / "01_pointer_arithmetic.html").read_text()
    info = json.loads((site / "book-info.json").read_text())
    assert info["mode"].startswith("Triton interpreter")
    assert all(n["succeeded"] for n in info["notebooks"].values()) and len(info["notebooks"]) == 2
    assert bb.check_site(site) == []


@pytest.mark.book
def test_a_small_book_without_solutions(tmp_path):
    """`make book SOLUTIONS=0` through Sphinx: the page shows the stub where the solution was, executed
    (the stub is only defined, never called), and nothing to unfold."""
    _sphinx()
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    nbformat.write(_notebook(_card(title="# 00 · Start here: small"),
                             code=(f"def f():\n    {BEGIN}\n    return 'the secret answer'\n    ### END SOLUTION",
                                   "print(6 * 7)")),
                   root / "notebooks" / "00_start_here.ipynb")
    bb.build(tmp_path / "site", cache_root=tmp_path / "cache", repo_root=root, solutions=False)
    site = tmp_path / "site"
    html = "".join(p.read_text(encoding="utf-8") for p in site.rglob("*.html"))
    page = (site / "notebooks" / "00_start_here.html").read_text(encoding="utf-8")
    assert "NotImplementedError" in page and "42" in page
    assert "the secret answer" not in html and "Show the solution" not in html
    assert bb.check_site(site) == []


# ------------------------------------------------------------------------------- the built site
@pytest.fixture(scope="module")
def site():
    value = os.environ.get(SITE_ENV)
    if not value:
        pytest.skip(f"the built book is tested by `make test-book` after `make book` ({SITE_ENV} names the site)")
    path = Path(value)
    if not (path / "index.html").is_file():
        pytest.fail(f"{SITE_ENV}={value} holds no built book (no index.html): run `make book` first")
    return path.resolve()


def _notebook_pages(site):
    return [site / "notebooks" / f"{p.stem}.html" for p in bb.notebook_paths(REPO)]


@pytest.mark.book
def test_site_has_every_notebook_executed_without_error(site):
    info = json.loads((site / "book-info.json").read_text())
    for page in _notebook_pages(site):
        assert page.is_file(), f"no page for {page.stem}"
        record = info["notebooks"].get(f"notebooks/{page.stem}")
        assert record and record["succeeded"] and not record["error"], f"{page.stem} did not execute: {record}"
        html = page.read_text()
        assert 'class="output traceback' not in html, f"{page.stem}: a traceback in the page"
        assert "cell_output" in html, f"{page.stem}: no outputs in the page"
    for name in ("index.html", "syllabus.html", "glossary.html"):
        assert (site / name).is_file()


@pytest.mark.book
def test_site_local_links_and_images_resolve(site):
    assert bb.check_site(site) == []


def _serve(root: Path):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _explorer_calls(path: Path) -> int:
    """How many explorers the notebook's code cells display (``..._explorer(...)``)."""
    code = [c.source for c in nbformat.read(path, 4).cells if c.cell_type == "code"]
    return sum(len(re.findall(r"(?<!def )\b\w+_explorer\(", src)) for src in code)


#: what a page shows: pictures (loaded, drawn), error outputs, the header, explorers' static pictures
PAGE_STATE = r"""() => ({
  images: Array.from(document.images).map(i => ({src: i.src.slice(0, 80), ok: i.complete && i.naturalWidth > 0})),
  errors: Array.from(document.querySelectorAll('.cell_output .traceback, .cell_output .error, .cell_output .stderr'))
            .filter(e => !e.classList.contains('stderr') || /Traceback|Error/.test(e.innerText))
            .map(e => e.innerText.slice(0, 300)),
  nav: document.querySelectorAll('.gk-nav a').length,
  badges: document.querySelectorAll('.gk-launch img').length,
  objectives: document.querySelectorAll('.gk-objectives li').length,
  explorers: document.querySelectorAll('.gk-explorer-static img').length,
  outputs: document.querySelectorAll('.cell_output').length,
})"""


@pytest.mark.book
@pytest.mark.browser
def test_site_pages_in_chromium(site):
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed: pip install -e '.[test]'")
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    server = _serve(site)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    problems = []
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, headless=True,
                                                 args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            # the site must stand on its own: nothing is fetched from elsewhere (the widget scripts' CDN included)
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base) else route.abort())
            thrown = []
            page.on("pageerror", lambda error: thrown.append(str(error)))
            for html in sorted(site.rglob("*.html")):
                rel = html.relative_to(site).as_posix()
                if rel in ("search.html", "genindex.html"):
                    continue
                thrown.clear()
                page.goto(base + rel, wait_until="load", timeout=60_000)
                state = page.evaluate(PAGE_STATE)
                broken = [i["src"] for i in state["images"] if not i["ok"]]
                if broken:
                    problems.append(f"{rel}: pictures not drawn: {broken}")
                if state["errors"]:
                    problems.append(f"{rel}: error output: {state['errors']}")
                if thrown:
                    problems.append(f"{rel}: script errors: {thrown}")
                if rel.startswith("notebooks/"):
                    calls = _explorer_calls(REPO / "notebooks" / html.with_suffix(".ipynb").name)
                    if state["explorers"] != calls:
                        problems.append(f"{rel}: {state['explorers']} static explorer pictures for {calls} explorers")
                    if state["nav"] < 3 or state["badges"] != 2 or state["objectives"] < 2 or not state["outputs"]:
                        problems.append(f"{rel}: header or outputs missing: {state}")
            browser.close()
    finally:
        server.shutdown()
    assert not problems, "\n".join(problems)


def test_execution_cache_follows_the_gpu_the_notebooks_are_told_of(tmp_path, monkeypatch):
    """CI builds the book as a learner without TMA (GEMM_KERNELS_ARCH=sm_86): those outputs must never be
    reused for a build with TMA, nor the other way round."""
    root = tmp_path / "repo"
    (root / "gemm_kernels").mkdir(parents=True)
    (root / "images").mkdir()
    (root / "gemm_kernels" / "kernel.py").write_text("A = 1\n")
    monkeypatch.delenv("GEMM_KERNELS_ARCH", raising=False)
    default = bb.fingerprint(root)
    monkeypatch.setenv("GEMM_KERNELS_ARCH", "sm_86")
    assert bb.fingerprint(root) != default
