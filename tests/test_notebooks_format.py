"""How notebooks are stored and laid out: canonical JSON without outputs, NN_slug names, an
opening with objectives and prerequisites, a "predict" moment answered by a "reveal" a few
cells later, an Exercises section with solutions and checks, shared code imported from
gemm_kernels, and nothing pasted between notebooks."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest

from gemm_kernels.lab import student

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
#: NN_slug.ipynb; a notebook that continues NN is NNb_slug.ipynb (05b_stream_k follows 05_persistent_tma)
NAME = re.compile(r"^(\d\d)([a-z]?)_[a-z0-9]+(_[a-z0-9]+)*\.ipynb$")
EXPECTED_FIRST = ["00_start_here.ipynb", "01_pointer_arithmetic.ipynb", "02_naive_tiling.ipynb",
                  "03_grouped_l2_ordering.ipynb", "04_kernel_fusion.ipynb", "05_persistent_tma.ipynb",
                  "05b_stream_k.ipynb", "06_grouped_gemm.ipynb", "07_moe_grouped_mm.ipynb"]
#: how the notebooks ask for a prediction, and how they give the answer
PREDICT = "**Predict:**"
REVEAL = "**Reveal:**"
#: a reveal must come within this many cells after its prediction (the measuring cell, maybe a
#: drawing or a table, then the answer)
REVEAL_WITHIN = 4
#: code that fetches things at run time
DOWNLOADS = re.compile(r"^\s*[!%]|urllib|requests\.|wget|curl |https?://|pip install", re.MULTILINE)
#: consecutive significant lines that, found in two notebooks, count as pasted code
PASTE_WINDOW = 5


def read(path):
    return nbformat.read(path, as_version=4)


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_the_first_notebooks_exist_in_order():
    names = [p.name for p in PATHS]
    assert names[: len(EXPECTED_FIRST)] == EXPECTED_FIRST


def test_names_are_numbered_slugs_without_gaps():
    numbers, seen = [], set()
    for path in PATHS:
        match = NAME.match(path.name)
        assert match, f"{path.name}: notebooks are named NN_slug.ipynb (lower-case slug), or NNb_slug.ipynb"
        assert match.group(0) == path.name and student.NOTEBOOK_NAME.match(path.name), (
            f"{path.name}: make student would skip it (gemm_kernels.lab.student.NOTEBOOK_NAME)")
        number, suffix = int(match.group(1)), match.group(2)
        if suffix:  # NNb continues NN (and NNc continues NNb): the one it continues exists
            before = (number, chr(ord(suffix) - 1) if suffix > "b" else "")
            assert before in seen, f"{path.name} continues a notebook that does not exist"
        else:
            numbers.append(number)
        seen.add((number, suffix))
    assert numbers == list(range(len(numbers))), f"numbers must run 00, 01, ... without gaps: {numbers}"


def test_listing_order_is_teaching_order():
    """`ls` (C collation), Python's sorted and JupyterLab's file browser put NN_ before NNb_."""
    names = [p.name for p in PATHS]
    assert names == sorted(names)
    assert names.index("05_persistent_tma.ipynb") + 1 == names.index("05b_stream_k.ipynb")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_stored_canonical_without_outputs(path):
    text = path.read_text()
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    canonical = nbformat.writes(nb)
    if not canonical.endswith("\n"):
        canonical += "\n"  # what nbformat.write puts on disk
    assert text == canonical, f"{path.name} is not canonical: normalise it with nbformat.write(nbformat.read(...))"
    for i, cell in enumerate(code_cells(nb)):
        assert cell.outputs == [], f"{path.name}: code cell {i} has outputs"
        assert cell.execution_count is None, f"{path.name}: code cell {i} has an execution count"
    assert "widgets" not in nb.metadata, f"{path.name}: saved widget state in the metadata"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_opens_with_objectives_and_prerequisites(path):
    nb = read(path)
    opening = nb.cells[0]
    assert opening.cell_type == "markdown" and opening.source.startswith("# "), "open with a title"
    assert "What you will learn" in opening.source, f"{path.name}: no objectives in the first cell"
    assert "Prerequisites" in opening.source, f"{path.name}: no prerequisites in the first cell"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_says_at_its_top_what_runs_live(path):
    """One line under the title: what runs on the learner's machine, what comes from committed results."""
    lines = read(path).cells[0].source.splitlines()
    assert len(lines) > 2 and lines[1] == "" and lines[2].startswith("**Live on your machine:** "), \
        f"{path.name}: the line after the title says what runs live (**Live on your machine:** ...)"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_has_a_predict_then_measure_moment(path):
    nb = read(path)
    assert any(PREDICT in c.source for c in nb.cells if c.cell_type == "markdown"), (
        f"{path.name}: ask the reader to predict (a markdown cell with {PREDICT}) before a cell measures")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_every_prediction_is_revealed(path):
    """Every **Predict:** is answered by a **Reveal:** markdown cell within a few cells, after a
    code cell (the measurement, the model or the committed results that answer it), and before
    the next prediction; every reveal answers a prediction."""
    cells = read(path).cells
    prompts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and PREDICT in c.source]
    reveals = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.lstrip().startswith(REVEAL)]
    for i in prompts:
        following = [j for j in reveals if i < j <= i + REVEAL_WITHIN]
        assert following, (f"{path.name}: the prediction in cell {i} ({cells[i].source.split(PREDICT)[1][:60]!r}...) "
                           f"has no {REVEAL} cell in the {REVEAL_WITHIN} cells after it")
        j = following[0]
        assert any(cells[k].cell_type == "code" for k in range(i + 1, j)), (
            f"{path.name}: between the prediction in cell {i} and its reveal in cell {j} no cell computes the answer")
        assert not any(i < k < j for k in prompts), f"{path.name}: cell {i}'s prediction is overtaken by another"
    for j in reveals:
        assert any(j - REVEAL_WITHIN <= i < j for i in prompts), f"{path.name}: cell {j} reveals no prediction"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_predictions_and_reveals_are_phrased_one_way(path):
    """**Predict:** and **Reveal:** (bold, with the colon), so readers and the test above find them."""
    for i, c in enumerate(read(path).cells):
        if c.cell_type != "markdown":
            continue
        for word, marker in (("Predict", PREDICT), ("Reveal", REVEAL)):
            odd = [m.group(0) for m in re.finditer(rf"\*\*{word}[^*]*\*\*", c.source) if m.group(0) != marker]
            assert not odd, f"{path.name}, cell {i}: write {marker}, not {odd[0]}"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_ends_with_checked_exercises(path):
    nb = read(path)
    heading = student.exercises_heading(nb)
    assert heading is not None, f"{path.name}: no '## Exercises' section"
    after = nb.cells[heading + 1:]
    checks = [c for c in after if c.cell_type == "code" and re.search(r"^check_\w+\(", c.source, re.MULTILINE)]
    solutions = [c for c in after if c.cell_type == "code" and student.has_solution(c.source)]
    assert len(checks) >= 2, f"{path.name}: fewer than two auto-checked exercises"
    assert len(solutions) >= len(checks), f"{path.name}: an exercise without a solution between markers"
    assert not any(student.has_solution(c.source) for c in nb.cells[:heading] if c.cell_type == "code"), (
        f"{path.name}: solution markers outside the Exercises section")
    assert all(c.cell_type == "markdown" or c in checks or c in solutions or _imports_only(c.source)
               for c in after), f"{path.name}: the Exercises section holds only imports, answers and checks"


def _imports_only(source: str) -> bool:
    tree = ast.parse(source)
    return all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in tree.body)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_imports_gemm_kernels_before_triton(path):
    """Triton decides interpreted-or-compiled when a function is decorated, its own helpers
    (tl.cdiv) included: gemm_kernels must set that up before triton is first imported."""
    first = code_cells(read(path))[0].source
    modules = []
    for node in ast.parse(first).body:
        if isinstance(node, ast.Import):
            modules += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules.append((node.module or "").split(".")[0])
    assert "gemm_kernels" in modules, f"{path.name}: the first code cell imports gemm_kernels"
    if "triton" in modules:
        assert modules.index("gemm_kernels") < modules.index("triton"), (
            f"{path.name}: import gemm_kernels before triton")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_nothing_downloaded_or_installed(path):
    for i, cell in enumerate(code_cells(read(path))):
        match = DOWNLOADS.search(cell.source)
        assert match is None, f"{path.name}: code cell {i} fetches or installs something: {match.group(0)!r}"


def _definitions(source: str):
    """(name, is_triton_jit) of every function and class defined at the top of a cell."""
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            jit = any("jit" in ast.unparse(d) for d in getattr(node, "decorator_list", []))
            yield node.name, jit


def _significant_lines(source: str):
    """Lines that carry code of their own: not blank, not comments, not imports (which every
    notebook shares by design)."""
    for line in source.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "import ", "from ")):
            yield line


def test_no_code_pasted_between_notebooks():
    defined = defaultdict(set)
    windows = defaultdict(set)
    for path in PATHS:
        for cell in code_cells(read(path)):
            for name, jit in _definitions(student.strip_solutions(cell.source)):
                defined[(name, jit)].add(path.name)
            lines = list(_significant_lines(cell.source))
            for i in range(len(lines) - PASTE_WINDOW + 1):
                windows["\n".join(lines[i:i + PASTE_WINDOW])].add(path.name)
    twice = {f"{'@triton.jit ' if jit else ''}{name}": sorted(where)
             for (name, jit), where in defined.items() if len(where) > 1}
    assert not twice, f"defined in several notebooks (move it into gemm_kernels): {twice}"
    pasted = {text: sorted(where) for text, where in windows.items() if len(where) > 1}
    assert not pasted, f"the same {PASTE_WINDOW} lines in several notebooks: {pasted}"
