"""Student copies of the notebooks: the same notebooks with the solutions taken out.

The committed notebooks (``notebooks/``) hold each exercise's solution between two marker
lines, nbgrader style::

    def mean(xs):
        ### BEGIN SOLUTION
        return sum(xs) / len(xs)
        ### END SOLUTION

CI executes those notebooks, so every solution is known to pass its check.  A student copy
replaces everything between the markers (markers included) with one line at the marker's
indentation, ``raise NotImplementedError("your turn")``, which the checks report as
"not attempted yet".  Outputs and execution counts are cleared.

Run ``make student`` (or ``python -m gemm_kernels.lab.student [SRC_DIR] [DEST_DIR]``); the
copies land in ``student/`` (git-ignored).  A copy that differs from what would be written (the
learner's work) is never overwritten: it is kept and reported, with what the course changed since it
was made (each copy records its source's hash and its cells' in its metadata); an untouched copy
is refreshed.  ``--merge`` backs a kept copy up as ``NAME.ipynb.bak-N`` and merges the course's
changes into it, its answer cells left alone; ``--force`` backs it up and writes a fresh one.
``make lab`` (``--serve``), a learner's way in, does the same without the options, then opens
JupyterLab on ``student/``; ``make lab-solutions``
(``--lab``) opens it on the solved ``notebooks/``, for teachers and CI.  Both print the URL to
open, and add ``--allow-root`` only when run as root.

Every copy opens with a banner (with an Open in Colab badge) and the set-up cell :data:`SETUP`, so
the same copy works in Colab, on Binder and after ``make lab``.  The book's workflow publishes
the copies to the ``student-copies`` branch, which Colab opens (:func:`.published.colab_url`).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import secrets
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .. import _files

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
#: nbgrader's hidden tests (:mod:`.nbgrader_markup` puts them in the check cells): left out of a copy
HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
HIDDEN_END = "### END HIDDEN TESTS"
STUB = 'raise NotImplementedError("your turn")'
#: the banner cell put at the top of every student copy ({colab}: the copy in Colab)
BANNER = ("> **Student copy** of `notebooks/{name}`: the exercises' solutions are replaced by "
          "`raise NotImplementedError(\"your turn\")`. [![Open in Colab](https://colab.research.google.com/assets/"
          "colab-badge.svg)]({colab}) Run the set-up cell below first: it installs the course's package where it is "
          "missing (Colab) and says what this machine runs. On your machine `make lab` (or `make student`) makes "
          "these copies and keeps one you changed (`make student FORCE=1` backs it up, then writes a fresh one). "
          "`gk.lab.progress()` lists the exercises you have passed.")
SETUP_ID = "student-copy-setup"
#: the set-up cell under the banner ({repo}: the GitHub repository it installs from, OWNER/NAME).  Standard
#: library only, as it runs before anything is installed; where gemm_kernels is there already (make lab,
#: Binder) it installs nothing.  Its light dependencies are pyproject.toml's (tests/test_launch.py checks).
SETUP = """\
# Set-up: installs the course's package, gemm_kernels, where it is missing (Colab), then says what this
# machine runs. It never installs or upgrades torch, triton or numpy (torch is gigabytes): it uses the ones
# here. Where gemm_kernels is installed already (make lab, Binder) it installs nothing.
import importlib, importlib.metadata, importlib.util, os, re, subprocess, sys, tempfile


def _version(dist):  # the installed version of a distribution, or None
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


if importlib.util.find_spec("gemm_kernels") is not None:
    print("gemm_kernels is installed: nothing to install.")
else:
    missing = [name for name in ("torch", "triton", "numpy") if importlib.util.find_spec(name) is None]
    triton_version = _version("triton")
    if missing or (triton_version and tuple(int(n) for n in re.findall(r"\\d+", triton_version)[:2]) < (3, 6)):
        raise RuntimeError(
            f"gemm_kernels needs torch, numpy and Triton 3.6 to 3.9 (missing: {', '.join(missing) or 'none'}; "
            f"triton: {triton_version}). This cell does not install them (torch is several GB): install a torch that "
            "brings Triton >= 3.6 (a CUDA torch >= 2.11; with a CPU torch also pip install 'triton>=3.6,<3.10'), "
            "restart the kernel and run this cell again.")
    # pip may add what is missing but never change torch, triton or numpy: they are pinned as they are
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as pins:
        pins.write("\\n".join(f"{dist}=={v}" for dist in ("torch", "triton", "numpy") if (v := _version(dist))))

    def _pip(*args):
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-c", pins.name, *args],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"pip install {' '.join(args)} failed:\\n{(done.stdout + done.stderr)[-3000:]}")

    _pip("--no-deps", os.environ.get("GEMM_KERNELS_SOURCE", "git+https://github.com/{repo}"))
    # its light dependencies (pyproject.toml), those that cannot be imported yet
    light = {"matplotlib": "matplotlib>=3.8", "PIL": "pillow>=10", "ipywidgets": "ipywidgets>=8.1",
             "tqdm": "tqdm>=4.66", "nbformat": "nbformat>=5.9"}
    wanted = [requirement for module, requirement in light.items() if importlib.util.find_spec(module) is None]
    if wanted:
        _pip(*wanted)
    os.remove(pins.name)
    importlib.invalidate_caches()
    print("installed gemm_kernels" + "".join(f", {requirement}" for requirement in wanted))

import gemm_kernels
from gemm_kernels.book.pages import course_report

print(course_report())
"""

REPO_ROOT = Path(__file__).resolve().parents[2]
#: NN_slug.ipynb, or NNx_slug.ipynb for a notebook that follows NN (05b_stream_k.ipynb after 05)
NOTEBOOK_NAME = re.compile(r"^\d\d[a-z]?_[a-z0-9_]+\.ipynb$")


class MarkerError(ValueError):
    """Unbalanced or nested solution markers."""


class NotebookError(ValueError):
    """A source notebook that is not a readable notebook (not JSON, not nbformat, bad bytes)."""


class DestinationError(ValueError):
    """A destination that cannot hold the copies: a file, or the notebooks directory itself."""


def strip_solutions(source: str, where: str = "cell") -> str:
    """``source`` with every BEGIN/END SOLUTION region replaced by an indented stub line."""
    out, inside, indent = [], False, ""
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise MarkerError(f"{where}, line {number}: {BEGIN} inside another solution")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}{STUB}\n")
        elif stripped == END:
            if not inside:
                raise MarkerError(f"{where}, line {number}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise MarkerError(f"{where}: {BEGIN} is never closed")
    text = "".join(out)
    return text if source.endswith("\n") else text.rstrip("\n")


def strip_hidden_tests(source: str) -> str:
    """``source`` without its BEGIN/END HIDDEN TESTS regions (markers included), as nbgrader releases it."""
    out, inside = [], False
    for line in source.splitlines(keepends=True):
        if line.strip() == HIDDEN_BEGIN:
            inside = True
        elif line.strip() == HIDDEN_END:
            inside = False
        elif not inside:
            out.append(line)
    return "".join(out)


def has_solution(source: str) -> bool:
    return any(line.strip() == BEGIN for line in source.splitlines())


def solution_cells(nb) -> list[int]:
    """Indices of the code cells that hold a solution."""
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and has_solution(c.source)]


#: a tag, branch or commit the set-up cell installs (a semester pins its version: notebooks/TEACHING.md)
PIN_ENV = "GEMM_KERNELS_PIN"
_PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}")


def check_pin(pin: str | None) -> str | None:
    """``pin`` (a tag, branch or commit), else ``$GEMM_KERNELS_PIN``, else None; ValueError if malformed."""
    pin = pin if pin is not None else (os.environ.get(PIN_ENV) or "").strip() or None
    if pin is not None and not _PIN.fullmatch(pin):
        raise ValueError(f"{PIN_ENV}={pin!r}: expected a tag, branch or commit (letters, digits, . _ / -)")
    return pin


def setup_source(repo: str | None = None, pin: str | None = None, install: str | None = None) -> str:
    """:data:`SETUP` installing from ``repo`` (:func:`.published.github_repo`: so forks install their own)
    at ``pin`` (a tag, branch or commit; default ``$GEMM_KERNELS_PIN``, else the default branch's head);
    ``install``: another pip source instead (a class build's wheel, :mod:`.class_build`)."""
    from .published import github_repo

    if install is not None:
        if not re.fullmatch(r"https://[A-Za-z0-9._~/%+-]+\.whl", install):
            raise ValueError(f"install must be an https address of a wheel, got {install!r}")
        return SETUP.replace("git+https://github.com/{repo}", install)
    pin = check_pin(pin)
    where = github_repo(repo) + (f"@{pin}" if pin else "")
    return SETUP.replace("{repo}", where)


def student_notebook(nb, name: str = "the notebook", repo: str | None = None):
    """A copy of ``nb`` without solutions, outputs or execution counts, with the banner and the set-up
    cell on top (``repo``: the GitHub repository they name, :func:`.published.github_repo`; a class
    build's copy: :func:`as_class_copy`)."""
    from .published import colab_url

    source = nb
    nb = copy.deepcopy(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.source = strip_solutions(strip_hidden_tests(cell.source), where=f"{name}, cell {i}")
            cell.outputs = []
            cell.execution_count = None
    banner = nbformat.v4.new_markdown_cell(BANNER.format(name=name, colab=colab_url(name, repo)))
    banner.id = "student-copy-banner"
    setup = nbformat.v4.new_code_cell(setup_source(repo))
    setup.id = SETUP_ID
    nb.cells[:0] = [banner, setup]
    nb.metadata[RECORD] = {"source": name, "source_hash": source_hash(source),
                           "answers": [source.cells[i].id for i in solution_cells(source)],
                           "cells": [[cell.id, cell_hash(cell)] for cell in nb.cells]}
    return nb


def as_class_copy(nb, info: dict):
    """A student copy made a class build's (:mod:`.class_build`): ``info`` holds its banner, the wheel its
    set-up cell installs and its Colab address; kept in its record, so that a later refresh or
    ``--merge`` of an erratum keeps the class build's install, never the public one."""
    info = {k: str(info[k]) for k in ("banner", "install", "colab")}
    nb.cells[0].source = info["banner"]
    nb.cells[1].source = setup_source(install=info["install"])
    record = nb.metadata[RECORD]
    record["cells"] = [[cell.id, cell_hash(cell)] for cell in nb.cells]
    record["class"] = info
    return nb


# ----------------------------------------------------------------------------- copies that survive course updates
#: a copy's notebook metadata key for what it was made from: the source's name and hash, its answer
#: cells' ids, and (id, hash) of each cell as written, so that a later `make student` can tell an
#: untouched copy (refresh it) from the learner's work, and which cells the course changed since
RECORD = "gemm_kernels_student_copy"


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False).encode()).hexdigest()[:16]


def cell_hash(cell) -> str:
    return _digest([cell.cell_type, cell.source])


def source_hash(nb) -> str:
    """A stable hash of a notebook's cells (type, id, source): outputs and metadata do not count."""
    return _digest([[c.cell_type, c.get("id"), c.source] for c in nb.cells])


def copy_record(nb) -> dict | None:
    """The copy's :data:`RECORD`, or None when it has none or one a hand (or another tool) broke:
    not a dict, or without its ``cells`` ([id, hash] pairs) and ``answers`` (ids).  Such a copy
    is treated as one made before copies kept a record: compared with a fresh copy, never merged."""
    record = nb.metadata.get(RECORD)
    if not isinstance(record, dict):
        return None
    cells, answers = record.get("cells"), record.get("answers")
    if not (isinstance(cells, list) and isinstance(answers, list) and all(isinstance(a, str) for a in answers)
            and all(isinstance(c, list) and len(c) == 2 and all(isinstance(v, str) for v in c) for c in cells)):
        return None
    return record


def untouched(copy_nb, fresh) -> bool:
    """True when the copy's cells are exactly those it was written with, none run (no outputs); a copy
    made before copies recorded that (or whose record is broken) is compared with ``fresh``, the
    copy the course writes now."""
    written = (copy_record(copy_nb) or fresh.metadata[RECORD])["cells"]
    return ([[c.get("id"), cell_hash(c)] for c in copy_nb.cells] == written
            and not any(c.get("outputs") or c.get("execution_count") for c in copy_nb.cells))


def _heading(cells, index: int) -> str:
    """The nearest markdown heading at or above ``cells[index]`` (its first line)."""
    for cell in reversed(cells[: index + 1]):
        if cell.cell_type == "markdown":
            heading = next((line.strip() for line in cell.source.splitlines() if line.startswith("#")), None)
            if heading:
                return heading
    return "the top"


def course_changes(copy_nb, fresh) -> list[str] | None:
    """What the course changed since ``copy_nb`` was made, as the fresh copy ``fresh`` shows it: one
    line per cell added, changed or removed, named by its nearest heading (None for a copy made
    before copies recorded their source)."""
    record = copy_record(copy_nb)
    if record is None:
        return None
    before, answers = dict(record["cells"]), set(record["answers"])
    lines = []
    for index, cell in enumerate(fresh.cells):
        where = f"{cell.cell_type} cell under '{_heading(fresh.cells, index)}'"
        if cell.id not in before:
            lines.append(f"added: a {where}")
        elif before[cell.id] != cell_hash(cell):
            lines.append(f"changed: the {where}" + (" (your answer cell)" if cell.id in answers else ""))
    now = {c.id for c in fresh.cells}
    mine = {c.get("id"): i for i, c in enumerate(copy_nb.cells)}
    for cell_id in before:
        if cell_id not in now:
            where = f" under '{_heading(copy_nb.cells, mine[cell_id])}'" if cell_id in mine else ""
            lines.append(f"removed: a cell{where}")
    return lines


def merge_copy(copy_nb, fresh):
    """The learner's copy ``copy_nb`` brought up to ``fresh`` (the copy the course writes now): their
    answer cells, their own cells and their edits of cells the course did not change stay as they are;
    cells the course added, changed or removed are added, replaced or removed (where the learner edited
    one the course changed too, the course's wins: the caller keeps a backup).  Cells are matched by id."""
    record = copy_record(copy_nb)
    if record is None:
        raise ValueError("this copy has no record of the cells it was made with: it cannot be merged")
    before = dict(record["cells"])
    answers = set(record["answers"]) | set(fresh.metadata[RECORD]["answers"])
    mine = {c.get("id"): c for c in copy_nb.cells}
    cells = []
    for cell in fresh.cells:
        own = mine.get(cell.id)
        course_unchanged = before.get(cell.id) == cell_hash(cell)
        keep_own = own is not None and (cell.id in answers or cell_hash(own) == cell_hash(cell) or course_unchanged)
        cells.append(own if keep_own else cell)
    placed = {c.get("id") for c in cells}
    for k, cell in enumerate(copy_nb.cells):  # the learner's own cells, after the cell they followed
        if cell.get("id") in placed or before.get(cell.get("id")) == cell_hash(cell):
            continue  # placed already, or a cell the course removed that the learner never touched
        previous = next((copy_nb.cells[j].get("id") for j in range(k - 1, -1, -1)
                         if copy_nb.cells[j].get("id") in placed), None)
        at = 0 if previous is None else 1 + next(i for i, c in enumerate(cells) if c.get("id") == previous)
        cells.insert(at, cell)
        placed.add(cell.get("id"))
    merged = copy.deepcopy(copy_nb)
    merged.cells = cells
    merged.metadata[RECORD] = fresh.metadata[RECORD]
    return merged


def notebook_paths(src_dir: Path) -> list[Path]:
    return sorted(p for p in Path(src_dir).glob("*.ipynb") if NOTEBOOK_NAME.match(p.name))


@dataclass
class StudentCopies:
    """What :func:`write_student_copies` did, per file."""

    written: list = field(default_factory=list)     # new, unchanged or refreshed copies (re)written
    refreshed: list = field(default_factory=list)   # of those, untouched copies of a changed source
    kept: list = field(default_factory=list)        # the learner's changed copies, left alone
    merged: list = field(default_factory=list)      # the learner's copies with the course's changes merged in
    backed_up: list = field(default_factory=list)   # (copy, backup) pairs made by force=True or merge=True
    #: copy -> what the course changed since it was made (course_changes), for the kept and merged ones
    changes: dict = field(default_factory=dict)
    #: copy -> why it is no notebook this tool can read (not UTF-8, not JSON, ...): kept, never merged
    unreadable: dict = field(default_factory=dict)
    #: copies new to a class release, written as class copies (the class's wheel, not the public package)
    added_to_class: list = field(default_factory=list)
    #: copy -> why nothing was written there (a folder, a FIFO, a dangling link, a failed write):
    #: left as it is, the other copies still written
    blocked: dict = field(default_factory=dict)

    def __iter__(self):  # the copies now on disk, as write_student_copies returned before
        return iter(sorted(self.written + self.kept + self.merged))

    def __len__(self):
        return len(self.written) + len(self.kept) + len(self.merged)

    def __getitem__(self, index):
        return sorted(self.written + self.kept + self.merged)[index]


def student_text(path: Path) -> str:
    """The student copy of the notebook at ``path``, as the text written to disk.  NotebookError
    (one line, naming the file) when it is not a valid notebook; MarkerError for bad markers."""
    try:
        nb = nbformat.reads(_files.read_text(path), as_version=4)  # a FIFO in SRC_DIR: refused, not waited on
        if RECORD in nb.metadata or any(c.get("id") == SETUP_ID for c in nb.cells):
            raise NotebookError(f"{path} is a student copy (it has the banner and set-up cell already), not a course "
                                "notebook: copies are made from the solved notebooks (the course's notebooks/), "
                                "or a copy would get a second banner and set-up cell")
        text = nbformat.writes(student_notebook(nb, path.name)) + "\n"
    except (MarkerError, OSError, NotebookError):
        raise
    except Exception as exc:  # noqa: BLE001  (not JSON, not nbformat, bad bytes, cells of the wrong shape)
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if len(reason) > 200:
            reason = reason[:197] + "..."
        raise NotebookError(f"{path} is not a valid notebook ({type(exc).__name__}: {reason}); restore it, or "
                            f"move it out of {path.parent}") from None
    return text


def _backup_path(target: Path) -> Path:
    n = 1
    while target.with_name(f"{target.name}.bak-{n}").exists():
        n += 1
    return target.with_name(f"{target.name}.bak-{n}")


def _read_copy(target: Path, raw: bytes):
    """The copy at ``target`` (its bytes ``raw``) as a notebook, or the reason it is not one (a
    string): the learner's file all the same, kept as it is."""
    try:
        nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
        nbformat.validate(nb)
        return nb
    except RecursionError:
        return "nested too deeply to read"
    except Exception as exc:  # noqa: BLE001  (not UTF-8, not JSON, not a notebook: whatever is there, it is kept)
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return f"{type(exc).__name__}: {reason[:150]}"


def _existing_copy(target: Path) -> bytes | None:
    """The bytes of the file at ``target`` (None when there is none); OSError naming what is there
    instead when it is no regular file (:func:`gemm_kernels._files.read_bytes`: never blocks on a FIFO)."""
    try:
        return _files.read_bytes(target)
    except FileNotFoundError:
        return None


def write_student_copies(src_dir: Path | str | None = None, dest_dir: Path | str | None = None, *,
                         force: bool = False, merge: bool = False) -> StudentCopies:
    """Write a student copy of every ``NN_slug.ipynb`` in ``src_dir`` to ``dest_dir``.

    A copy already there that is untouched (its cells as written, never run) is refreshed.  One the
    learner changed is kept, with what the course changed since it was made; ``merge``: backed up as
    ``NAME.ipynb.bak-N``, then the course's changes merged in (:func:`merge_copy`); ``force``: backed
    up, then written afresh."""
    src = Path(src_dir) if src_dir is not None else REPO_ROOT / "notebooks"
    dest = Path(dest_dir) if dest_dir is not None else REPO_ROOT / "student"
    _check_destination(src, dest)
    paths = notebook_paths(src)
    if not paths:
        raise FileNotFoundError(f"no NN_slug.ipynb notebooks in {src}")
    texts = {path: student_text(path) for path in paths}  # every source read before anything is written
    dest.mkdir(parents=True, exist_ok=True)
    done = StudentCopies()
    class_info = _class_of(dest)
    for path in paths:
        target = dest / path.name
        text = texts[path]
        try:
            raw = _existing_copy(target)
        except OSError as exc:  # one bad path costs its own copy only: the others are still written
            done.blocked[target] = " ".join(str(exc).split())
            continue
        if raw is None and class_info is not None:
            # new to a class release: a class copy, installing the class's wheel (a public copy's set-up
            # cell would install the package with every answer in it)
            text = nbformat.writes(as_class_copy(nbformat.reads(text, as_version=4), class_info)) + "\n"
            done.added_to_class.append(target)
        if raw is not None and raw != text.encode("utf-8"):
            mine, fresh = _read_copy(target, raw), nbformat.reads(text, as_version=4)
            if isinstance(mine, str):
                done.unreadable[target] = mine
                mine = None
            info = (copy_record(mine) or {}).get("class") if mine is not None else None
            if isinstance(info, dict):  # a class build's copy stays one (its wheel, not the public package)
                try:
                    fresh = as_class_copy(fresh, info)
                    text = nbformat.writes(fresh) + "\n"  # as nbformat.write (the class build) wrote it
                except (KeyError, ValueError) as exc:
                    done.blocked[target] = f"its class-build record is damaged ({exc}): left as it is"
                    continue
            if raw == text.encode("utf-8"):
                pass  # a class copy as the class build wrote it: unchanged
            elif mine is not None and untouched(mine, fresh):
                done.refreshed.append(target)
            else:
                changes = course_changes(mine, fresh) if mine is not None else None
                if changes:
                    done.changes[target] = changes
                if not (force or (merge and changes)):
                    done.kept.append(target)
                    continue
                backup = _backup_path(target)
                target.rename(backup)
                done.backed_up.append((target, backup))
                if not force:
                    nbformat.write(merge_copy(mine, fresh), target)
                    done.merged.append(target)
                    continue
        try:
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            done.blocked[target] = " ".join(str(exc).split())
            continue
        done.written.append(target)
    return done


def _class_of(dest: Path) -> dict | None:
    """The class-build record of the copies already in ``dest`` (a class release's notebooks/), or None."""
    for path in notebook_paths(dest) if dest.is_dir() else []:
        try:
            nb = nbformat.reads(_files.read_text(path), as_version=4)
        except Exception:  # noqa: BLE001  (an unreadable copy is reported by the loop, not here)
            continue
        info = (copy_record(nb) or {}).get("class")
        if isinstance(info, dict) and all(isinstance(info.get(k), str) for k in ("banner", "install", "colab")):
            return info
    return None


def _check_destination(src: Path, dest: Path) -> None:
    """DestinationError when ``dest`` cannot take the copies: it (or a folder on the way to it) is a
    file, or it is ``src`` itself (however spelled: the copies would replace the notebooks, and
    ``force`` would strip their solutions)."""
    for folder in (dest, *dest.parents):
        if folder.exists():
            if not folder.is_dir():
                raise DestinationError(f"{folder} is a file, not a directory: give a directory for the student "
                                       "copies (default: student/)")
            break
    same = src.resolve() == dest.resolve()
    if not same and src.exists() and dest.exists():
        try:
            same = os.path.samefile(src, dest)
        except OSError:
            pass
    if same:
        raise DestinationError(f"{dest} is the notebooks directory itself ({src}): student copies there would "
                               "replace the notebooks and strip their solutions; give another directory "
                               "(default: student/)")


# ----------------------------------------------------------------------------- serving them
def free_port(start: int = 8888, tries: int = 50) -> int:
    """The first port from ``start`` on that nothing listens on (127.0.0.1)."""
    for port in range(start, start + tries):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {start}..{start + tries - 1}: pass one with --port")


def port_number(text: str) -> int:
    """A TCP port, 1 to 65535 (argparse names the option when it is not)."""
    port = int(text)
    if not 1 <= port <= 65535:
        raise ValueError(text)
    return port


def lab_command(root: Path, port: int, token: str, extra=(), uid: int | None = None) -> list[str]:
    """The JupyterLab command line for ``root``: ``--allow-root`` only when the user id is 0 (containers,
    Colab-style machines and classroom VMs run as root, and Jupyter refuses root without it)."""
    uid = os.getuid() if uid is None else uid
    command = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={root}", "--no-browser",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}"]
    if uid == 0:
        command.append("--allow-root")
    return command + list(extra)


def serve(root: Path, port: int | None = None, extra=()) -> int:
    """Print the URL to open, then replace this process with JupyterLab on ``root``."""
    port = port or free_port()
    token = os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(16)
    command = lab_command(Path(root).resolve(), port, token, extra)
    print(f">> JupyterLab on {root}/: open http://127.0.0.1:{port}/lab?token={token}", flush=True)
    print(">> (on another machine or in a container, add LAB_ARGS=--ip=0.0.0.0 and use its address; "
          "Ctrl-C stops the server)", flush=True)
    os.execv(sys.executable, command)
    return 0  # pragma: no cover  (execv does not return)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write student copies (solutions removed) of the notebooks, "
                                     "and open JupyterLab on them or on the notebooks.")
    parser.add_argument("src", nargs="?", default=None, help="notebooks directory (default: notebooks/)")
    parser.add_argument("dest", nargs="?", default=None, help="output directory (default: student/)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true", help="back changed copies up (NAME.ipynb.bak-N), then "
                      "write fresh ones")
    mode.add_argument("--merge", action="store_true", help="back changed copies up, then merge the course's "
                      "changes into them (your answer cells stay as they are)")
    parser.add_argument("--serve", action="store_true", help="make the copies as without it (a changed one is kept), then open "
                        "JupyterLab on them (make lab)")
    parser.add_argument("--lab", action="store_true", help="open JupyterLab on the solved notebooks, no copies "
                        "(make lab-solutions: for teachers and CI)")
    parser.add_argument("--port", type=port_number, default=None, help="JupyterLab's port (default: the first free from 8888)")
    args, extra = parser.parse_known_args(argv)
    src = Path(args.src) if args.src else REPO_ROOT / "notebooks"
    dest = Path(args.dest) if args.dest else REPO_ROOT / "student"
    if args.lab:
        return serve(src, args.port, extra)
    if extra and not args.serve:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        done = write_student_copies(src, dest, force=args.force, merge=args.merge)
    except (ValueError, OSError) as exc:  # bad markers or notebooks, a bad destination, a failed write
        print("error: " + " ".join(str(exc).split()), file=sys.stderr)
        return 1
    for path in done.written:
        if path in done.added_to_class:
            print(f"added {path} to the class release (it was not there): a class copy, installing the class's "
                  "wheel; if this notebook is not part of the class, delete it before you publish")
        elif path in done.refreshed:
            print(f"refreshed {path}: the course changed it, and you had not")
        else:
            print(f"wrote {path}")
    for path, backup in done.backed_up:
        print(f"backed up your copy {path.name} as {backup.name}"
              + (f" (it was not a readable notebook: {done.unreadable[path]})" if path in done.unreadable else ""))
    for path in done.merged:
        print(f"merged the course's changes into your copy {path} (your answers are as they were):")
        print("".join(f"  {line}\n" for line in done.changes[path]), end="")
    for path in done.kept:
        if args.serve:
            print(f"kept your copy {path} (it differs from a fresh one: your work is never overwritten)")
        else:
            print(f"kept {path}: it differs from a fresh copy (your work); `make student FORCE=1` backs it up "
                  "and writes a fresh one")
        if path in done.unreadable:
            print(f"  {path} is not a notebook this tool can read ({done.unreadable[path]}): fix or move it "
                  "to get a fresh copy")
        if path in done.changes:
            print(f"  the course changed {src.name}/{path.name} since your copy was made:")
            print("".join(f"    {line}\n" for line in done.changes[path]), end="")
            print("  `make student MERGE=1` brings these into your copy (a backup first; your answers stay)")
    for path, reason in done.blocked.items():
        print(f"error: no copy written at {path}: {reason}; move it away and run this again", file=sys.stderr)
    if args.serve:
        return serve(dest, args.port, extra)
    default = (REPO_ROOT / "student").resolve()
    print("open them with: make lab" if dest.resolve() == default else f"open them with: jupyter lab {dest}")
    return 1 if done.blocked else 0


if __name__ == "__main__":
    sys.exit(main())


# ----------------------------------------------------------------------------- running the exercises
EXERCISES_HEADING = "## Exercises"
#: the heading as a learner may leave it: any level, any case, words after it ("## Exercises (my answers)")
_EXERCISES_LINE = re.compile(r"\s*#{1,6}\s*exercises\b.*", re.IGNORECASE)


def exercises_heading(nb) -> int | None:
    """Index of the markdown cell holding the ``## Exercises`` heading, however edited (None when there is none)."""
    return next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                 and any(_EXERCISES_LINE.fullmatch(line) for line in c.source.splitlines())), None)


def exercise_cells(nb) -> list[int]:
    """The notebook's first code cell (its imports; a student copy's set-up cell is not one) and every
    code cell of its ``## Exercises`` section.

    Notebooks are written so that this is all an exercise needs: solutions and checks do not
    depend on the cells in between.  ``tests/test_notebooks_format.py`` holds them to it."""
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("id") != SETUP_ID]
    start = exercises_heading(nb)
    if not code or start is None:
        return []
    return [code[0]] + [i for i in code if i > start]


def exercise_results(nb, name: str = "notebook", namespace: dict | None = None) -> list:
    """Execute :func:`exercise_cells` in-process, in order, in ``namespace`` (a fresh dict by
    default; pass one to keep the learner's functions); return every
    :class:`~gemm_kernels.lab.exercises.CheckResult` that a cell's last expression produced.

    Cells are compiled under a file name registered with :mod:`linecache`, as IPython does,
    so ``@triton.jit`` can read the source of the kernels they define."""
    import ast
    import linecache

    from .exercises import CheckResult

    if namespace is None:
        namespace = {}
    namespace.setdefault("__name__", f"__{name.replace('.', '_')}__")
    results = []
    for index in exercise_cells(nb):
        source = nb.cells[index].source
        filename = f"<{name} cell {index}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        tree = ast.parse(source, filename)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, filename, "exec"), namespace)  # noqa: S102  (our own notebooks)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), filename, "eval"), namespace)  # noqa: S307
            if isinstance(value, CheckResult):
                results.append(value)
    return results
