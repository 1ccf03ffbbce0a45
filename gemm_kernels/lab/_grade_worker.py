"""One submission notebook graded in a process of its own (started by :mod:`gemm_kernels.lab.grade`).

``python -m gemm_kernels.lab._grade_worker FD SPEC``: SPEC (JSON) names the notebook, the course
notebook it is, its exercises ``[title, answer name]``, those to check and those whose cells are
skipped (they hung or crashed an earlier run), and the memory cap.  The worker caps its memory
first, takes the teacher's checks from the package before any of the learner's code runs, then
runs the notebook's first code cell and each exercise's cells (the learner's own ``check_*(...)``
calls taken out) and calls the teacher's check on the answer right after them.  It reports on
file descriptor FD, one JSON object per line: ``{"start": title}`` (None: the set-up),
``{"result": title, "status", "message"}``, ``{"failed": title, ...}`` for cells that ran out of
memory (the worker stops: what they hold is not given back), ``{"done": true}``.
"""

from __future__ import annotations

import ast
import importlib
import json
import linecache
import os
import re
import resource
import sys

#: characters of a check's message (with its first details) kept in a grade
MESSAGE_LIMIT = 300
#: how a failed allocation reads: Python's MemoryError, torch's CPU allocator
_OUT_OF_MEMORY = re.compile(r"MemoryError|can't allocate memory|out of memory", re.IGNORECASE)


def cap_memory(megabytes: int) -> None:
    """Cap this process's data segment (heap and private mappings: RLIMIT_DATA) at ``megabytes``
    (0: no cap) and write no core files.  RLIMIT_DATA rather than RLIMIT_AS: a CUDA context reserves
    far more address space than it uses (on an H100, torch's CUDA start fails under a 4 GiB
    RLIMIT_AS and runs under a 4 GiB RLIMIT_DATA, with 1.4 GB of data)."""
    if megabytes > 0:
        limit = megabytes << 20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def check_calls(tree: ast.Module, titles) -> list[str]:
    """The exercises whose ``check_<title>(...)`` a cell calls at its top level, in order."""
    found = []
    for statement in tree.body:
        if isinstance(statement, ast.Expr):
            for node in ast.walk(statement):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id.startswith("check_") and node.func.id[6:] in titles):
                    found.append(node.func.id[6:])
    return found


def without_check_calls(tree: ast.Module) -> ast.Module:
    """``tree`` without its top-level expressions that call a ``check_*`` name: the learner's
    checks never run, the teacher's do."""
    def calls_check(statement):
        return isinstance(statement, ast.Expr) and any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.startswith("check_")
            for n in ast.walk(statement))

    tree.body = [s for s in tree.body if not calls_check(s)]
    return tree


def plain_python(source: str) -> str:
    """A cell's source without IPython's magics and shell lines (``%time``, ``!pip ...``)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def trimmed(text: str, limit: int = MESSAGE_LIMIT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Notebook:
    """The learner's cells, parsed, and which exercise each belongs to: the cells up to an
    exercise's ``check_<title>(...)`` call belong to it (those after the last one to none)."""

    def __init__(self, nb, titles):
        from .student import exercise_cells

        cells = exercise_cells(nb)
        self.first = self._parse(nb, cells[0], titles)[0] if cells else None
        self.owned = {title: [] for title in titles}
        position = 0
        for index in cells[1:]:
            cell, called = self._parse(nb, index, titles)
            if position < len(titles):
                self.owned[titles[position]].append(cell)
            if called:
                position = max(position, max(titles.index(t) for t in called) + 1)

    @staticmethod
    def _parse(nb, index: int, titles):
        """((file name, tree or the SyntaxError), the exercises it checks) of code cell ``index``, its
        source registered with :mod:`linecache` as IPython does, so ``@triton.jit`` can read the
        kernels it defines."""
        source = plain_python(nb.cells[index].source)
        filename = f"<submission cell {index}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        try:
            tree = ast.parse(source, filename)
        except SyntaxError as exc:
            return (filename, exc), []
        called = check_calls(tree, titles)
        return (filename, without_check_calls(tree)), called


def run_cell(cell, namespace: dict) -> str | None:
    """Execute one parsed cell; None, or what it raised (a line).  MemoryError propagates."""
    filename, tree = cell
    if isinstance(tree, SyntaxError):
        return f"{filename[1:-1]} has a syntax error: {tree.msg} (line {tree.lineno})"
    try:
        exec(compile(tree, filename, "exec"), namespace)  # noqa: S102  (the learner's code, in this process only)
    except MemoryError:
        raise
    except BaseException as exc:  # noqa: BLE001  (SystemExit, KeyboardInterrupt: the learner's cell, not ours)
        return f"{filename[1:-1]} raised {type(exc).__name__}: {exc}"
    return None


def verdict(check, answer_name: str, namespace: dict, errors: list[str]) -> tuple[str, str]:
    """(status, message) of the teacher's ``check`` on the learner's answer."""
    if answer_name not in namespace:
        if errors:
            return "error", trimmed(errors[0])
        return "not attempted", f"no {answer_name} is defined"
    try:
        result = check(namespace[answer_name])
    except BaseException as exc:  # noqa: BLE001  (a check never raises; a learner may have patched one)
        return "error", trimmed(f"the check could not run: {type(exc).__name__}: {exc}")
    text = "; ".join([result.message, *result.details[:3]])
    status = result.status
    if status == "wrong" and _OUT_OF_MEMORY.search(text):
        status = "out of memory"
    if errors:
        text += f" (its cell: {errors[0]})"
    return status, trimmed(text)


def main(argv: list[str]) -> int:
    report = os.fdopen(int(argv[0]), "w", buffering=1)
    spec = json.loads(argv[1])
    cap_memory(spec["memory_mb"])

    def emit(**event):
        report.write(json.dumps(event) + "\n")

    emit(start=None)
    import nbformat

    from .progress import EXERCISES_PACKAGE

    module = importlib.import_module(f"{EXERCISES_PACKAGE}.{spec['module']}")
    exercises = [tuple(pair) for pair in spec["exercises"]]
    checks = {title: getattr(module, f"check_{title}") for title, _ in exercises}  # before any learner code
    notebook = Notebook(nbformat.read(spec["path"], as_version=4), [title for title, _ in exercises])
    namespace = {"__name__": "__main__"}
    title = None
    try:
        setup_error = run_cell(notebook.first, namespace) if notebook.first else None
        for title, answer_name in exercises:
            emit(start=title)
            errors = [setup_error] if setup_error else []
            if title not in spec["skip"]:
                errors += [e for e in (run_cell(cell, namespace) for cell in notebook.owned[title]) if e]
            if title in spec["check"]:
                status, message = verdict(checks[title], answer_name, namespace, errors)
                emit(result=title, status=status, message=message)
    except MemoryError as exc:
        emit(failed=title, status="out of memory", message=trimmed(f"MemoryError: {exc}" if str(exc) else
                                                                   "MemoryError: the cells ran out of memory"))
        return 0
    emit(done=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
