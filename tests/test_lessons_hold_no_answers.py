"""No lesson cell hands over an exercise's answer (issue 48: 01's exercises 1 and 2 appeared almost line
for line in its lesson cells).  Each solution region (between the markers) is read as Python tokens
(names lower-cased, comments and layout left out) and compared with every code cell before its
notebook's Exercises section: the tokens they share in common runs of at least MIN_RUN tokens must
stay under MAX_SHARED of the region's.

Nor does a lesson print the source of the package's own answer to an exercise of its notebook or a
later one (a check's ``forbid``: 02's lesson printed ``_matmul_kernel`` and ``k_loop_pointers``,
its Exercise 3's answer)."""

from __future__ import annotations

import ast
import difflib
import importlib
import io
import textwrap
import tokenize

import nbformat
import pytest

from gemm_kernels.lab import student
from gemm_kernels.lab.exercises._kernel_checks import package_answers, python_function
from gemm_kernels.lab.grade import ANSWERS
from gemm_kernels.lab.progress import EXERCISES_PACKAGE, NOTEBOOKS, _module_of

PATHS = student.notebook_paths(student.REPO_ROOT / "notebooks")
#: a run this long is copied code, not a shared idiom such as ``tl.load(x_ptr + offsets``
MIN_RUN = 8
#: the share of a region's tokens a lesson cell may hold in such runs
MAX_SHARED = 0.5
#: (notebook, answer cell id): why its lesson may hold most of it
SCAFFOLDS = {("00_start_here.ipynb", "00-17"): "the first kernel: exercise 2 says to start from add_kernel "
                                               "and change what it computes (alpha * x + y)"}
#: 01's lesson before the rewrite, which held exercise 1's answer (block_offsets) as a demo
OLD_01_LESSON = '''def block_offsets_demo(pid_m, pid_n, block_m, block_n, stride_m, stride_n):
    rows = pid_m * block_m + np.arange(block_m)
    cols = pid_n * block_n + np.arange(block_n)
    return rows[:, None] * stride_m + cols[None, :] * stride_n
'''


def tokens(source: str) -> list[str]:
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    read = io.StringIO(textwrap.dedent(source)).readline
    return [t.string.lower() for t in tokenize.generate_tokens(read) if t.type not in skip]


def solution_regions(source: str) -> list[str]:
    """The code between each BEGIN/END SOLUTION pair of a cell."""
    regions, inside = [], None
    for line in source.splitlines():
        if line.strip() == student.BEGIN:
            inside = []
        elif line.strip() == student.END:
            regions.append("\n".join(inside))
            inside = None
        elif inside is not None:
            inside.append(line)
    return regions


def shared(region: list[str], lesson: list[str]) -> float:
    """The share of ``region``'s tokens found in ``lesson`` in common runs of MIN_RUN tokens or more."""
    blocks = difflib.SequenceMatcher(None, region, lesson, autojunk=False).get_matching_blocks()
    return sum(b.size for b in blocks if b.size >= MIN_RUN) / max(len(region), 1)


def overlaps(path) -> dict:
    """(answer cell id, lesson cell id) -> the largest share of one of the answer cell's regions."""
    nb = nbformat.read(path, as_version=4)
    heading = student.exercises_heading(nb)
    lessons = [c for c in nb.cells[:heading] if c.cell_type == "code"]
    found = {}
    for index in student.solution_cells(nb):
        for region in solution_regions(nb.cells[index].source):
            mine = tokens(region)
            for lesson in lessons:
                key = (nb.cells[index].id, lesson.id)
                found[key] = max(found.get(key, 0.0), shared(mine, tokens(student.strip_hidden_tests(lesson.source))))
    return found


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_no_lesson_cell_holds_an_exercise_answer(path):
    too_close = {key: round(share, 2) for key, share in overlaps(path).items()
                 if share >= MAX_SHARED and (path.name, key[0]) not in SCAFFOLDS}
    assert not too_close, (f"{path.name}: lesson cells hold most of an answer ((answer cell, lesson cell): share): "
                           f"{too_close}; teach the idea with another example")


def test_the_measure_finds_what_01_taught_before_and_the_scaffold_it_allows():
    nb = nbformat.read(PATHS[1], as_version=4)
    answer = next(c for c in nb.cells if c.cell_type == "code" and "def block_offsets(" in c.source)
    assert shared(tokens(solution_regions(answer.source)[0]), tokens(OLD_01_LESSON)) == 1.0
    for name, cell_id in SCAFFOLDS:  # an allowance that is no longer needed goes
        path = next(p for p in PATHS if p.name == name)
        assert max(share for (answer_id, _), share in overlaps(path).items() if answer_id == cell_id) >= MAX_SHARED


# ----------------------------------------------------------------------------- shown source
#: the calls that print a function's source (show_signature prints its parameters only)
SHOWS_SOURCE = ("show_source", "kernel_source", "getsource", "getsourcelines")


def _imports(sources) -> dict:
    """name -> (module, attribute or None) of every import in these code cells."""
    names = {}
    for source in sources:
        try:
            tree = ast.parse(student.strip_hidden_tests(source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.update({a.asname or a.name: (node.module, a.name) for a in node.names})
            elif isinstance(node, ast.Import):
                names.update({a.asname or a.name.split(".")[0]: (a.name if a.asname else a.name.split(".")[0], None)
                              for a in node.names})
    return names


def _resolve(node, imports: dict):
    """The object an argument such as ``k_loop_pointers`` or ``persistent._matmul_persistent_kernel`` names."""
    chain = []
    while isinstance(node, ast.Attribute):
        chain.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in imports:
        return None
    module, name = imports[node.id]
    obj = importlib.import_module(module)
    if name is not None:
        obj = getattr(obj, name) if hasattr(obj, name) else importlib.import_module(f"{module}.{name}")
    for attr in chain:
        obj = getattr(obj, attr)
    return obj


def shown_sources(source: str, imports: dict) -> list:
    """The functions whose source a code cell prints."""
    found = []
    for node in ast.walk(ast.parse(student.strip_hidden_tests(source))):
        func = getattr(node, "func", None) if isinstance(node, ast.Call) else None
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in SHOWS_SOURCE:
            found += [obj for obj in (_resolve(arg, imports) for arg in node.args) if obj is not None]
    return found


def answers_from(notebook: str) -> dict:
    """The package's answers (their Python functions) to the exercises of ``notebook`` and later ones,
    each with the exercise it answers."""
    found = {}
    for later in NOTEBOOKS[NOTEBOOKS.index(notebook):]:
        module = importlib.import_module(f"{EXERCISES_PACKAGE}.{_module_of(later)}")
        for title, _ in ANSWERS[later]:
            for answer in package_answers(getattr(module, f"check_{title}")):
                if python_function(answer) is not None:
                    found[python_function(answer)] = f"{later}'s {title}"
    return found


def shown_answers(path, lesson_sources=None) -> list[str]:
    """(lesson cell, function, exercise) for each lesson cell that prints the package's answer to an
    exercise of its notebook or a later one; ``lesson_sources``: other lesson cells to read instead."""
    nb = nbformat.read(path, as_version=4)
    lessons = lesson_sources if lesson_sources is not None else [
        c.source for c in nb.cells[:student.exercises_heading(nb)] if c.cell_type == "code"]
    imports = _imports([c.source for c in nb.cells if c.cell_type == "code"] + list(lessons))
    answers = answers_from(path.stem)
    shown = [(source, python_function(fn)) for source in lessons for fn in shown_sources(source, imports)]
    return [(source.strip().splitlines()[-1], fn.__name__, answers[fn]) for source, fn in shown if fn in answers]


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_no_lesson_prints_the_packages_answer_to_an_exercise(path):
    assert not shown_answers(path), f"{path.name}: a lesson cell prints the package's answer to an exercise " \
                                    f"(shows it only after that exercise): {shown_answers(path)}"


def test_the_rule_finds_what_02_showed_before():
    """02's lesson printed its Exercise 3's answer; every answer it names is one the check refuses."""
    old = "from gemm_kernels.kernels.matmul import k_loop_pointers\n\nshow_source(_matmul_kernel, k_loop_pointers);"
    path = next(p for p in PATHS if p.name == "02_naive_tiling.ipynb")
    assert [(fn, exercise) for _, fn, exercise in shown_answers(path, [old])] == [
        ("_matmul_kernel", "02_naive_tiling's my_matmul"), ("k_loop_pointers", "02_naive_tiling's my_matmul")]


def test_the_rule_finds_what_05_showed_before():
    """05's lesson printed the persistent kernel whose loop is its Exercise 4's answer."""
    old = "show_source(persistent._matmul_persistent_kernel);"
    path = next(p for p in PATHS if p.name == "05_persistent_tma.ipynb")
    assert [(fn, exercise) for _, fn, exercise in shown_answers(path, [old])] == [
        ("_matmul_persistent_kernel", "05_persistent_tma's persistent_loop")]
