"""nbgrader's cell metadata on the course notebooks, made from what they already say, so that a
class on JupyterHub can release, collect and autograde them with nbgrader (``notebooks/TEACHING.md``).

One source: the ``### BEGIN SOLUTION`` markers make a cell an answer (nbgrader's ClearSolutions reads
the same markers), a ``check_xxx(answer)`` line in the Exercises section makes a test cell worth one
point, and the notebook's first code cell (its imports) and the rest of the Exercises section are
locked.  :func:`markup` writes that metadata, and puts a hidden-tests region on top of every check
cell::

    ### BEGIN HIDDEN TESTS
    from gemm_kernels.lab.nbgrader_markup import graded
    check_axpy = graded("gemm_kernels.lab.exercises.start_here", "check_axpy")
    ### END HIDDEN TESTS
    check_axpy(axpy)

A check never raises (a learner sees "not attempted yet" or what is wrong), but nbgrader gives the
points of a test cell that does not raise.  The hidden region, which nbgrader and ``make student``
leave out of the learner's copy, rebinds the name to :func:`graded`: the package's own check (an
answer cell that redefines ``check_axpy`` changes nothing), raising when the answer is not correct.
The solved notebooks run it too, so CI fails when a solution stops passing its check.

Each ``**Predict:**`` prompt is followed by a markdown answer cell (:data:`PREDICTION`, id and
grade_id from the prompt's id) that nbgrader releases as "YOUR ANSWER HERE" and leaves to be graded
by hand in formgrader: 0 points unless the teacher's config (:mod:`.gradebook`) says ``"predictions"``.
The ``**Reveal:**`` paragraphs that answer them are left out of the release by
:class:`.nbgrader_judge.ClearReveals`, a preprocessor the course's nbgrader config adds.

``python -m gemm_kernels.lab.nbgrader_markup`` rewrites ``notebooks/*.ipynb``; ``--check`` only
says which are out of date (``tests/test_nbgrader_markup.py`` runs it); ``--config week1.json
source/week1/*.ipynb`` gives an assignment's copies the points of the teacher's config.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import re
import sys
from pathlib import Path

import nbformat

from .. import _files
from . import gradebook, student
from .student import HIDDEN_BEGIN, HIDDEN_END, strip_hidden_tests

#: a check cell's call, ``check_xxx(answer)``, at the start of a line
CHECK_CALL = re.compile(r"^(check_\w+)\(", re.MULTILINE)
EXERCISE_MODULES = "gemm_kernels.lab.exercises"
#: what nbgrader takes for a solution's marker anywhere in a line, in any cell (prose included)
SOLUTION_DELIMITERS = ("BEGIN SOLUTION", "END SOLUTION")
SCHEMA_VERSION = 3
#: a Predict prompt (tests/test_notebooks_format.py holds the notebooks to this spelling)
PREDICT = "**Predict:**"
#: the answer cell under a prompt, as the solved notebooks and student copies show it (nbgrader's
#: release shows its text stub instead)
PREDICTION = "*Your prediction* (write it here before you run the next cell):"


#: how a Predict prompt's answer opens, in the paragraph after the cell that computes it
REVEAL = "**Reveal:**"
#: what nbgrader's release says instead (:class:`.nbgrader_judge.ClearReveals`)
REVEAL_LEFT_OUT = "**Reveal:** *not in this release: compare the output above with your prediction.*"


def without_reveals(text: str) -> str:
    """Markdown ``text`` with each paragraph that opens with :data:`REVEAL` replaced by :data:`REVEAL_LEFT_OUT`
    (the rest of the cell, the lesson going on, stays)."""
    parts = re.split(r"(\n[ \t]*\n)", text)  # paragraphs, and the blank lines between them kept
    return "".join(REVEAL_LEFT_OUT if part.lstrip().startswith(REVEAL) else part for part in parts)


def prediction_id(prompt_id: str) -> str:
    """The id of the answer cell under the prompt cell ``prompt_id`` (and, with ``predict-``, its grade_id)."""
    return f"{prompt_id}-prediction"


def is_prediction(cell) -> bool:
    return cell.cell_type == "markdown" and str(cell.get("id", "")).endswith("-prediction")


def graded(module: str, name: str):
    """The check ``name`` of ``module``, imported afresh from the package, raising AssertionError
    (with the check's explanation) unless the answer is correct; "structure only", all a CPU can
    check of notebook 08's Gluon loop, counts as correct."""
    if not module.startswith(EXERCISE_MODULES + "."):
        raise ValueError(f"{module} is not an exercise module of {EXERCISE_MODULES}")
    check = getattr(importlib.import_module(module), name)
    from .exercises._core import CORRECT, STRUCTURE_ONLY

    @functools.wraps(check)
    def strict(*args, **kwargs):
        result = check(*args, **kwargs)
        if result.status not in (CORRECT, STRUCTURE_ONLY):
            raise AssertionError(str(result))
        return result

    return strict


def hidden_tests(module: str, name: str) -> str:
    return (f"{HIDDEN_BEGIN}\nfrom gemm_kernels.lab.nbgrader_markup import graded\n"
            f'{name} = graded("{module}", "{name}")\n{HIDDEN_END}\n')


def python_source(source: str, where: str) -> ast.Module:
    """A code cell's source parsed as IPython runs it: its magics and shell lines (``%timeit``,
    ``!pip``, ``%%time``) turned into Python by IPython's own transformer where IPython is there, else
    left out.  ValueError naming ``where`` (notebook and cell) for what still does not parse."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        text = TransformerManager().transform_cell(source)
    except ImportError:  # no IPython: magics and shell lines are only left out
        text = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
        text = "" if source.lstrip().startswith("%%") else text
    try:
        return ast.parse(text)
    except SyntaxError as exc:
        raise ValueError(f"{where}: not Python: {exc.msg} (line {exc.lineno}: {(exc.text or '').strip()[:80]})") from None


def _check_modules(cells, name: str = "notebook") -> dict[str, str]:
    """check name -> the exercise module the notebook imports it from."""
    found = {}
    for cell in cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(python_source(strip_hidden_tests(cell.source), f"{name}, cell {cell.get('id')}")):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(EXERCISE_MODULES + "."):
                found.update({alias.asname or alias.name: node.module for alias in node.names
                              if alias.name.startswith("check_")})
    return found


def _meta(grade_id: str, *, solution=False, grade=False, locked=False, points=1) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA_VERSION,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = int(points) if float(points).is_integer() else points
    return meta


def _with_predictions(cells) -> list:
    """``cells`` with one answer cell right under each Predict prompt (an existing one kept, with
    what it says; one under no prompt dropped)."""
    answers = {c.id: c for c in cells if is_prediction(c)}
    out = []
    for cell in cells:
        if is_prediction(cell):
            continue
        out.append(cell)
        if cell.cell_type == "markdown" and PREDICT in cell.source:
            answer = answers.get(prediction_id(cell.id)) or nbformat.v4.new_markdown_cell(PREDICTION)
            answer.id = prediction_id(cell.id)
            out.append(answer)
    return out


def markup(nb, name: str = "notebook", config: dict | None = None):
    """``nb`` with nbgrader's metadata, the hidden tests and the Predict answer cells, as the module
    docstring says (in place, returned); points from ``config`` (:func:`.gradebook.read_config`: each
    check's weight, ``"predictions"`` for each Predict answer, default 0).  ValueError for a check cell
    that holds an answer or more than one check, and for a marker's words elsewhere than on a marker
    line of a code cell (nbgrader would cut the text there)."""
    config = config or {}
    notebook = name.removesuffix(".ipynb")
    nb.cells = _with_predictions(nb.cells)
    heading = student.exercises_heading(nb)
    if heading is None:
        raise ValueError(f"{name}: no '{student.EXERCISES_HEADING}' section")
    modules = _check_modules(nb.cells, name)
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    for index, cell in enumerate(nb.cells):
        cell.metadata.pop("nbgrader", None)
        visible = strip_hidden_tests(cell.source) if cell.cell_type == "code" else cell.source
        loose = [line for line in visible.splitlines() if any(d in line for d in SOLUTION_DELIMITERS)
                 and (cell.cell_type != "code" or line.strip() not in (student.BEGIN, student.END))]
        if loose:
            raise ValueError(f"{name}, cell {cell.id}: nbgrader takes {loose[0].strip()!r} for a solution marker: "
                             "reword it")
        checks = CHECK_CALL.findall(visible) if cell.cell_type == "code" and index > heading else []
        if cell.cell_type == "code" and student.has_solution(visible):
            if checks:
                raise ValueError(f"{name}, cell {cell.id}: a check inside an answer cell")
            cell.metadata["nbgrader"] = _meta(f"answer-{cell.id}", solution=True)
        elif checks:
            if len(checks) > 1 or checks[0] not in modules:
                raise ValueError(f"{name}, cell {cell.id}: a check cell calls one check imported from "
                                 f"{EXERCISE_MODULES}.* (found {checks})")
            cell.source = hidden_tests(modules[checks[0]], checks[0]) + visible
            points = gradebook.weight(config, notebook, checks[0].removeprefix("check_"))
            cell.metadata["nbgrader"] = _meta(checks[0], grade=True, locked=True, points=points)
        elif is_prediction(cell):  # a manually graded answer: nbgrader releases its text stub
            cell.metadata["nbgrader"] = _meta(f"predict-{cell.id.removesuffix('-prediction')}", solution=True,
                                              grade=True, points=gradebook.prediction_points(config))
        elif index == first_code or index >= heading:
            cell.metadata["nbgrader"] = _meta(f"locked-{cell.id}", locked=True)
    return nb


def marked_up_text(path: Path, config: dict | None = None) -> str:
    """The text of the notebook at ``path`` with its markup refreshed, as nbformat writes it."""
    nb = gradebook.read_notebook(path)  # a FIFO given: refused by name, not waited on
    return nbformat.writes(markup(nb, path.name, config)) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write nbgrader's metadata and hidden tests into the course "
                                     "notebooks, from their solution markers and check cells.")
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: notebooks/NN_slug.ipynb)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when one is out of date")
    parser.add_argument("--config", type=Path, help="the teacher's config (JSON, as for lab.grade): the points of "
                        "each check and of each Predict answer; only for an assignment's copies (give their paths)")
    args = parser.parse_args(argv)
    if args.config is not None and not args.paths:
        parser.error("--config is for an assignment's copies (source/ASSIGNMENT/*.ipynb): name them; "
                     "notebooks/ keep the default points")
    try:
        config = gradebook.read_config(args.config)
    except gradebook.GradebookError as exc:
        parser.error(str(exc))
    paths = args.paths or student.notebook_paths(student.REPO_ROOT / "notebooks")
    stale = []
    for path in paths:
        try:
            text = marked_up_text(path, config)
            current = _files.read_text(path, gradebook.NOTEBOOK_LIMIT)
        except OSError as exc:
            parser.error(str(exc))
        if current != text:
            stale.append(path)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'out of date' if args.check else 'marked up'}: {path}")
    if args.check and stale:
        print("run: python -m gemm_kernels.lab.nbgrader_markup")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
