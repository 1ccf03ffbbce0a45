"""No lesson cell hands over an exercise's answer (issue 48: 01's exercises 1 and 2 appeared almost line
for line in its lesson cells).  Each solution region (between the markers) is read as Python tokens
(names lower-cased, comments and layout left out) and compared with every code cell before its
notebook's Exercises section: the tokens they share in common runs of at least MIN_RUN tokens must
stay under MAX_SHARED of the region's."""

from __future__ import annotations

import difflib
import io
import textwrap
import tokenize

import nbformat
import pytest

from gemm_kernels.lab import student

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
