"""How notebooks are stored and laid out: canonical JSON without outputs, NN_slug names, an
opening with objectives and prerequisites, a "predict" moment, an Exercises section with
solutions and checks, shared code imported from gemm_kernels, and nothing pasted between
notebooks."""

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
NAME = re.compile(r"^(\d\d)_[a-z0-9]+(_[a-z0-9]+)*\.ipynb$")
EXPECTED_FIRST = ["00_start_here.ipynb", "01_pointer_arithmetic.ipynb", "02_naive_tiling.ipynb",
                  "03_grouped_l2_ordering.ipynb", "04_kernel_fusion.ipynb", "05_persistent_tma.ipynb",
                  "06_grouped_gemm.ipynb", "07_moe_grouped_mm.ipynb"]
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
    numbers = []
    for path in PATHS:
        match = NAME.match(path.name)
        assert match, f"{path.name}: notebooks are named NN_slug.ipynb (lower-case slug)"
        numbers.append(int(match.group(1)))
    assert numbers == list(range(len(numbers))), f"numbers must run 00, 01, ... without gaps: {numbers}"


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
def test_has_a_predict_then_measure_moment(path):
    nb = read(path)
    assert any("**Predict" in c.source for c in nb.cells if c.cell_type == "markdown"), (
        f"{path.name}: ask the reader to predict (a markdown cell with **Predict...) before a cell measures")


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
