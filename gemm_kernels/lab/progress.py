"""Which exercises have passed: ``gk.lab.progress()``.

Every check records its latest verdict (``record``, called by the ``exercise`` decorator in
``exercises/_core.py``) in a small JSON file, so the table survives a restarted kernel and a
closed notebook:

* ``$GEMM_KERNELS_PROGRESS`` when set (a file path; ``off`` records nothing), else
* ``.gemm_kernels_progress.json`` in the working directory, the folder of the notebooks a kernel
  runs (Jupyter starts it there): each copy of the course keeps its own, so two learners on one
  machine, or a fresh copy, never see checks they did not run.

Writes are atomic (a temporary file renamed over the old one, under a lock), so two notebooks
checking at once lose nothing.  A damaged file (not UTF-8 or JSON, nested too deeply, hand-edited)
is set aside as ``progress.json.corrupt`` (``.corrupt-2``, ... beside earlier ones) with a warning
naming it, and a new one is started from its entries that are still readable.  Nothing is recorded by
checks run under pytest (CI, ``make test``) or from the solved notebooks in ``notebooks/``,
unless ``GEMM_KERNELS_PROGRESS`` names a file: the table is the learner's.
"""

from __future__ import annotations

import contextlib
import datetime
import html
import importlib
import json
import os
import re
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path

from .. import _env, _files

ENV = "GEMM_KERNELS_PROGRESS"
#: the file's name in the notebooks' folder, when ``GEMM_KERNELS_PROGRESS`` is not set
DEFAULT_NAME = ".gemm_kernels_progress.json"
#: the course's notebooks in order; each one's checks live in ``exercises/<name without NN_>.py``
NOTEBOOKS = ("00_start_here", "01_pointer_arithmetic", "02_naive_tiling", "03_grouped_l2_ordering",
             "04_kernel_fusion", "05_persistent_tma", "05b_stream_k", "06_grouped_gemm", "07_moe_grouped_mm",
             "08_warp_specialization", "09_moe_training", "09b_measuring", "10_fp8")
EXERCISES_PACKAGE = "gemm_kernels.lab.exercises"
VERSION = 1
REPO_ROOT = Path(__file__).resolve().parents[2]
#: statuses stored are cut to this length (a check's status is a short word)
_STATUS_LIMIT = 40
#: a record is a few kB; a larger file at its place is not one (and is never read whole)
_MAX_BYTES = 1 << 20
_warned: set[str] = set()


def _module_of(notebook: str) -> str:
    return notebook.split("_", 1)[1]


_NOTEBOOK_OF_MODULE = {_module_of(nb): nb for nb in NOTEBOOKS}


def progress_path() -> Path | None:
    """The file the progress is kept in (None when ``GEMM_KERNELS_PROGRESS=off``)."""
    if os.environ.get(ENV) is not None:
        value = _env.path_or_off(ENV)  # an on-word such as 1 is refused: a path is expected
        return None if value in (None, "off") else Path(value).expanduser()
    return Path.cwd() / DEFAULT_NAME


def recording() -> bool:
    """Whether checks run here are recorded: not under pytest, not from the solved notebooks
    (``notebooks/``), unless ``GEMM_KERNELS_PROGRESS`` names a file."""
    if os.environ.get(ENV) is not None:
        return progress_path() is not None
    if "PYTEST_CURRENT_TEST" in os.environ:
        return False
    try:
        return Path.cwd().resolve() != (REPO_ROOT / "notebooks").resolve()
    except OSError:  # the working directory was deleted
        return True


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _empty() -> dict:
    return {"version": VERSION, "exercises": {}}


def _valid_entry(key, entry) -> bool:
    return isinstance(key, str) and isinstance(entry, dict) and isinstance(entry.get("status"), str)


def _valid(data) -> bool:
    return (isinstance(data, dict) and data.get("version") == VERSION and isinstance(data.get("exercises"), dict)
            and all(_valid_entry(k, v) for k, v in data["exercises"].items()))


def _salvaged(data) -> dict:
    """The entries of a damaged record that are still entries (a hand-edited status, one entry
    of the wrong shape, a missing version): a bad part loses only itself."""
    exercises = data.get("exercises") if isinstance(data, dict) and data.get("version") in (VERSION, None) else None
    record = _empty()
    if isinstance(exercises, dict):
        record["exercises"] = {k: v for k, v in exercises.items() if _valid_entry(k, v)}
    return record


def _read(path: Path, *, repair: bool) -> dict:
    """The record at ``path`` (an empty one when there is none).  A file that is not a record
    gets a warning; with ``repair`` it is renamed ``NAME.corrupt``, so the next write starts afresh.
    What is no file (a FIFO, a device, a folder: :func:`gemm_kernels._files.read_bytes`) is never
    opened: a warning, or with ``repair`` the error, so that nothing replaces it."""
    try:
        raw = _files.read_bytes(path, _MAX_BYTES)
    except FileNotFoundError:
        return _empty()
    except _files.TooLarge:
        raw = None
    except OSError as exc:
        if repair and isinstance(exc, _files.NotRegularFile):  # a FIFO, a device, a folder: never replaced
            raise
        _warn_once(f"read {path}", f"gk.lab.progress: cannot read {path} ({exc}); showing no progress")
        return _empty()
    try:
        data = json.loads(raw.decode("utf-8")) if raw is not None else None
    except (ValueError, RecursionError):  # not UTF-8, not JSON, nested past Python's recursion limit
        data = None
    if _valid(data):
        return data
    kept = _salvaged(data)
    saved = f"{len(kept['exercises'])} entries still readable" if kept["exercises"] else "nothing readable"
    if not repair:
        _warn_once(f"corrupt {path}", f"gk.lab.progress: {path} is not a progress record ({saved}); the next "
                   "check replaces it with what is readable (and keeps the old file as .corrupt)")
        return kept
    aside = path.with_name(path.name + ".corrupt")
    n = 1
    while aside.exists():  # an earlier damaged file is kept too
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{n}")
    try:
        os.replace(path, aside)
        where = f"the old file is kept as {aside.name}"
    except OSError:
        where = "the old file could not be moved aside"
    warnings.warn(f"gk.lab.progress: {path} was not a progress record; starting a new one from what is "
                  f"readable ({saved}; {where})", RuntimeWarning, stacklevel=3)
    return kept


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on ``path``'s side file while a record is read and rewritten (POSIX;
    elsewhere the atomic rename alone keeps the file whole)."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    lock_path = path.with_name(path.name + ".lock")
    _files.is_regular_file(lock_path, "a lock file")  # a FIFO there would block the open below
    # O_NONBLOCK: a FIFO swapped in since fails to open (no reader) or is refused, never waited on
    fd = os.open(lock_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o666)
    with os.fdopen(fd, "a") as lock:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _files.NotRegularFile(f"{lock_path} is no regular file, not a lock file")
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write(path: Path, data: dict) -> None:
    """Replace ``path`` with ``data`` in one step: a reader sees the old record or the new one."""
    with _files.atomic_write(path) as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")


def _now() -> str:
    return datetime.datetime.now().astimezone().replace(microsecond=0).isoformat()


def record(module: str, title: str, status: str) -> None:
    """Keep ``status`` as the latest verdict of exercise ``title`` of the check module ``module``
    (``gemm_kernels.lab.exercises.naive_tiling``).  Never raises: a failed write is a warning
    (once), and checks outside the course's modules are not recorded."""
    try:
        notebook = _NOTEBOOK_OF_MODULE.get(str(module).rsplit(".", 1)[-1])
        if notebook is None or not str(module).startswith(EXERCISES_PACKAGE) or not recording():
            return
        path = progress_path()
        _files.is_regular_file(path, "a progress record")  # a FIFO, a device: refused before a lock is made beside it
        path.parent.mkdir(parents=True, exist_ok=True)
        status = str(status)[:_STATUS_LIMIT]
        with _locked(path):
            data = _read(path, repair=True)
            key = f"{notebook}/{title}"
            entry = data["exercises"].get(key, {})
            now = _now()
            entry.update(status=status, updated=now)
            if status == "correct" and "passed" not in entry:
                entry["passed"] = now
            data["exercises"][key] = entry
            _write(path, data)
    except Exception as exc:  # noqa: BLE001  (a check never fails because its verdict could not be kept)
        with contextlib.suppress(Exception):  # warnings turned into errors: still nothing raised
            _warn_once("write", f"gk.lab.progress: the result of {title} was not saved ({type(exc).__name__}: "
                       f"{exc}); set {ENV} to a writable file (or 'off')")


# ----------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Exercise:
    notebook: str  # 02_naive_tiling
    number: int  # 1, 2, ... in the notebook
    title: str  # my_matmul: the check's title, check_my_matmul
    heading: str  # "your own matmul kernel", from the notebook when it is at hand


def _headings(notebook: str) -> list[str]:
    """The notebook's ``### Exercise N: heading`` lines, in order (empty without the notebook)."""
    path = REPO_ROOT / "notebooks" / f"{notebook}.ipynb"
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return []
    found = []
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "markdown":
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) and all(isinstance(x, str) for x in source) else source
            if not isinstance(source, str):
                continue
            found += re.findall(r"^###\s*Exercise\s*\d+\s*:\s*(.+?)\s*$", source, flags=re.MULTILINE)
    return found


def exercises() -> list[Exercise]:
    """Every exercise of the course, notebook by notebook, in the order the notebooks ask them:
    the checks the ``exercise`` decorator made in each notebook's module, in definition order."""
    found = []
    for notebook in NOTEBOOKS:
        module = importlib.import_module(f"{EXERCISES_PACKAGE}.{_module_of(notebook)}")
        titles = [fn.title for name, fn in vars(module).items()
                  if name.startswith("check_") and callable(fn) and isinstance(getattr(fn, "title", None), str)
                  and getattr(fn, "__module__", None) == module.__name__]  # its own checks, not imported ones
        headings = _headings(notebook)
        for number, title in enumerate(titles, start=1):
            heading = headings[number - 1] if len(headings) == len(titles) else ""
            found.append(Exercise(notebook, number, title, heading))
    return found


#: the checks' statuses (``exercises._core``): "structure only" is 08's verdict where no GPU can run the kernel
_MARKS = {"correct": "[ok]", "wrong": "[x]", "not attempted": "[ ]", "structure only": "[~]"}
_COLOURS = {"correct": "#146c43", "wrong": "#b02a37", "structure only": "#997404"}


class Progress:
    """The table ``progress()`` returns: text in a terminal, HTML in Jupyter.  ``rows``:
    (exercise, latest status, when it was last checked, when it first passed)."""

    def __init__(self, rows, path: Path | None, recorded: bool):
        self.rows = rows
        self.path = path
        self.recorded = recorded

    @property
    def passed(self) -> int:
        """Exercises passed, now or before (a later try that went wrong does not undo a pass)."""
        return sum(status == "correct" or bool(passed) for _, status, _, passed in self.rows)

    def status(self, notebook: str, title: str) -> str:
        """The latest status of one exercise (``"not attempted"`` when never checked)."""
        for ex, status, _, _ in self.rows:
            if ex.notebook == notebook and ex.title == title:
                return status
        raise KeyError(f"no exercise {title!r} in notebook {notebook!r}")

    def _head(self) -> str:
        return f"{self.passed} of {len(self.rows)} exercises passed"

    def _foot(self) -> str:
        if self.path is None:
            return f"progress is not kept ({ENV}=off)"
        text = f"kept in {self.path} (delete it to start over)"
        if not self.recorded:
            text += ("; checks run here are not recorded (under pytest, or in the solved notebooks/: "
                     "work in the student copies, `make lab`)")
        return text

    @staticmethod
    def _shown(status: str, passed: str | None) -> str:
        if status != "correct" and passed:  # it passed once: that stands; the later try is news
            return f"passed on {passed[:10]}; your latest try: {status}"
        return status

    def lines(self) -> list[str]:
        out = [self._head()]
        current = None
        for ex, status, updated, passed in self.rows:
            if ex.notebook != current:
                current = ex.notebook
                done = sum(s == "correct" or bool(p) for e, s, _, p in self.rows if e.notebook == current)
                total = sum(e.notebook == current for e, *_ in self.rows)
                out.append(f"{current}  ({done}/{total})")
            mark = _MARKS["correct"] if passed else _MARKS.get(status, "[?]")
            when = f"  {updated[:16].replace('T', ' ')}" if updated else ""
            heading = f" - {ex.heading}" if ex.heading else ""
            out.append(f"  {mark:<4} {ex.number}. check_{ex.title}{heading}: {self._shown(status, passed)}{when}")
        out.append(self._foot())
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        body = []
        current = None
        for ex, status, updated, passed in self.rows:
            if ex.notebook != current:
                current = ex.notebook
                body.append(f'<tr><th colspan="4" style="text-align: left">{html.escape(current)}</th></tr>')
            colour = _COLOURS.get(status, "#6c757d")
            body.append(
                f"<tr><td>{ex.number}</td><td><code>check_{html.escape(ex.title)}</code> {html.escape(ex.heading)}</td>"
                f'<td style="color: {colour}">{html.escape(self._shown(status, passed))}</td>'
                f"<td>{html.escape((updated or '')[:16].replace('T', ' '))}</td></tr>")
        return (f"<div><b>{html.escape(self._head())}</b><table>"
                "<tr><th>#</th><th>exercise</th><th>latest check</th><th>when</th></tr>"
                f"{''.join(body)}</table><small>{html.escape(self._foot())}</small></div>")


def progress() -> Progress:
    """Every exercise of the course with its latest status, as recorded by the checks."""
    path = progress_path()
    data = _read(path, repair=False) if path is not None else _empty()
    rows = []
    for ex in exercises():
        entry = data["exercises"].get(f"{ex.notebook}/{ex.title}", {})
        updated, passed = (entry.get(k) for k in ("updated", "passed"))
        rows.append((ex, entry.get("status", "not attempted"), updated if isinstance(updated, str) else None,
                     passed if isinstance(passed, str) else None))
    return Progress(rows, path, recording())
