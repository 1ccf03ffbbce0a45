"""Every exercise check, found by discovery (``gk.lab.progress``'s list, so a new check is covered
by default), judged with the notebook's own solution and with one learner's mistake
(``tests/_mistakes.py``): the solution is "correct" and the mistake is not.

On a CPU the checks run the learner's code in the interpreter.  On a GPU (``-m gpu``, with the
default autotuning) they run there as a learner's notebook does, and the part of each check only
a GPU runs (``check.gpu_branch``: the answer compiled and launched on the GPU) is held to the same
two answers on its own.  ``GEMM_KERNELS_VERDICTS=FILE`` appends each verdict as a JSON line (the
GPU smoke record reads them)."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import nbformat
import pytest

from gemm_kernels import runtime
from gemm_kernels.lab import checked
from gemm_kernels.lab.exercises import CORRECT, WRONG
from gemm_kernels.lab.student import exercise_results
from _mistakes import MISTAKES, answer_cell, answer_name, wrong_answer

progress_module = importlib.import_module("gemm_kernels.lab.progress")  # gk.lab.progress is the function

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
EXERCISES = progress_module.exercises()
VERDICTS_ENV = "GEMM_KERNELS_VERDICTS"


def _check(exercise):
    module = importlib.import_module(f"{progress_module.EXERCISES_PACKAGE}.{exercise.notebook.split('_', 1)[1]}")
    return getattr(module, f"check_{exercise.title}")


def _record(exercise, answer: str, verdict: str, part: str = "check") -> None:
    path = os.environ.get(VERDICTS_ENV)
    if path:
        line = json.dumps({"notebook": exercise.notebook, "check": exercise.title, "answer": answer, "part": part,
                           "verdict": verdict[:300]})
        with open(path, "a", encoding="utf-8") as f:  # one write per line: several workers may append
            f.write(line + "\n")


class _Notebook:
    """A notebook's Exercises section, run once: its namespace and each check's verdict."""

    def __init__(self, name: str):
        self.nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        self.namespace: dict = {}
        self.results = {r.exercise: r for r in exercise_results(self.nb, name, self.namespace)}


@pytest.fixture(scope="module")
def notebooks():
    cache: dict = {}

    def get(name: str) -> _Notebook:
        if name not in cache:
            cache[name] = _Notebook(name)
        return cache[name]
    return get


_IDS = [f"{e.notebook[:3].rstrip('_')}-{e.title}" for e in EXERCISES]
#: one xdist worker per notebook (``--dist loadgroup``): its Exercises section runs once
_PARAMS = [pytest.param(e, id=i, marks=pytest.mark.xdist_group(e.notebook)) for e, i in zip(EXERCISES, _IDS)]


def test_checks_are_discovered():
    assert len(EXERCISES) >= 36 and len({e.title for e in EXERCISES}) == len(EXERCISES)


@pytest.mark.parametrize("exercise", _PARAMS)
def test_every_check_has_a_mistake(exercise):
    assert exercise.title in MISTAKES, f"add a learner's mistake for check_{exercise.title} to tests/_mistakes.py"
    nb = nbformat.read(NOTEBOOKS / f"{exercise.notebook}.ipynb", as_version=4)
    index, _ = answer_cell(nb, exercise.title)
    old, new = MISTAKES[exercise.title]
    assert old in nb.cells[index].source and old != new


def test_no_mistake_for_a_check_that_does_not_exist():
    assert set(MISTAKES) <= {e.title for e in EXERCISES}


@pytest.mark.parametrize("exercise", _PARAMS)
def test_the_mistake_is_refused(exercise, notebooks):
    """On a CPU (interpreter) and on a GPU alike."""
    book = notebooks(exercise.notebook)
    result = _check(exercise)(wrong_answer(book.nb, book.namespace, exercise.title))
    _record(exercise, "mistake", f"{result.status}: {result.message}")
    assert result.status == WRONG, str(result)


@pytest.mark.parametrize("notebook", sorted({e.notebook for e in EXERCISES}))
def test_solutions_reach_device_copies(notebook, monkeypatch):
    """A checked run copies a GPU's tensors to CPU twins; pointer arrays hold the device addresses.
    Here every tensor is copied, as on a GPU: each solution must still be correct (notebook 06's
    pointer-array checks refused right answers on a GPU because of this)."""
    if runtime.on_gpu():
        pytest.skip("on a GPU the copies are real: test_solution_is_correct_on_the_gpu")
    monkeypatch.setattr(checked._HostCopies, "copy_cpu_tensors", True)
    results = exercise_results(nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4), notebook)
    assert results and all(r.status == CORRECT for r in results), "\n".join(map(str, results))


@pytest.mark.gpu
@pytest.mark.parametrize("exercise", _PARAMS)
def test_solution_is_correct_on_the_gpu(exercise, notebooks):
    book = notebooks(exercise.notebook)
    result = book.results[exercise.title]
    _record(exercise, "solution", f"{result.status}: {result.message}")
    assert result.status == CORRECT, str(result)
    check = _check(exercise)
    if check.gpu_branch is not None:
        _, name = answer_name(book.nb, exercise.title)
        problems = check.gpu_branch(book.namespace[name])
        _record(exercise, "solution", "; ".join(problems) or "no problems", part="gpu_branch")
        assert problems == [], problems


@pytest.mark.gpu
@pytest.mark.parametrize("exercise", _PARAMS)
def test_gpu_branch_refuses_the_mistake(exercise, notebooks):
    check = _check(exercise)
    if check.gpu_branch is None:
        pytest.skip(f"check_{exercise.title} has no part only a GPU runs")
    book = notebooks(exercise.notebook)
    problems = check.gpu_branch(wrong_answer(book.nb, book.namespace, exercise.title))
    _record(exercise, "mistake", "; ".join(problems) or "no problems", part="gpu_branch")
    assert problems, f"the GPU part of check_{exercise.title} accepted the mistake {MISTAKES[exercise.title]}"


@pytest.mark.parametrize("exercise", _PARAMS)
def test_a_missing_return_is_wrong_not_unattempted(exercise, notebooks):
    """Every check whose answer is a plain function: one that computes and forgets `return` is a
    wrong answer that says so, never "not attempted" (the stub of a student copy raises)."""
    book = notebooks(exercise.notebook)
    _, name = answer_name(book.nb, exercise.title)
    if hasattr(book.namespace[name], "fn"):  # a @triton.jit / @gluon.jit answer: its own verdicts
        pytest.skip("a kernel answer")

    def no_return(*args, **kwargs):
        args  # noqa: B018

    result = _check(exercise)(no_return)
    assert result.status == WRONG and result.attempted, str(result)
    assert "no `return`" in str(result) or exercise.title == "promotion_interval", str(result)
