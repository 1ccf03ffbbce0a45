"""The book's own pages and what they read from the notebooks: the landing page, the syllabus.

Each notebook's first cell is its card: a ``# NN · Title`` heading, an introduction, a bold
"What you will learn" list and a bold "Prerequisites:" line.  :func:`notebook_info` reads it
(a notebook without it stops the build with a message naming the notebook); the syllabus adds
its length, its exercises and two facts per notebook kept here by hand in :data:`COURSE`, which
:func:`course_report` also reads to tell a learner what their machine runs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat


class BookError(RuntimeError):
    """The book cannot be built as things are; the message says what to change."""


#: minutes of reading per 100 words of prose, and per code cell (read it, run it, look at the output)
READING_WORDS_PER_MIN = 100
MIN_PER_CODE_CELL = 1.0
#: minutes per exercise: one answered in Python, one that writes (part of) a kernel
MIN_PER_EXERCISE = 10
MIN_PER_KERNEL_EXERCISE = 25


@dataclass(frozen=True)
class Course:
    core: bool
    hopper: str  # what needs a Hopper GPU to run live ("" when nothing does)


#: per notebook: core or optional, and what needs a Hopper (sm_90) GPU to run live.  Everything
#: else runs on any machine (interpreter) and, live and at full size, on any CUDA GPU; without a
#: GPU the notebooks show the committed GPU results instead of timing.
COURSE = {
    "00_start_here": Course(True, ""),
    "01_pointer_arithmetic": Course(True, ""),
    "02_naive_tiling": Course(True, ""),
    "03_grouped_l2_ordering": Course(True, ""),
    "04_kernel_fusion": Course(True, ""),
    "05_persistent_tma": Course(True, "partly: the TMA bounds demo and the TMA kernel on a GPU (the interpreter "
                                      "emulates TMA; the compile view builds sm_90 code anywhere)"),
    "05b_stream_k": Course(False, "for its live timings (the kernel itself runs in the interpreter)"),
    "06_grouped_gemm": Course(True, ""),
    "07_moe_grouped_mm": Course(False, "partly: the live comparison with `torch._grouped_mm`, which runs on Hopper "
                                      "only"),
    "08_warp_specialization": Course(False, "yes, to run `matmul_ws` and trace it live (elsewhere: compiled for "
                                           "sm_90, and the committed H100 trace)"),
    "09_moe_training": Course(False, ""),
    "09b_measuring": Course(False, ""),
    "10_fp8": Course(False, "partly: the narrow fp8 accumulator live and the comparison with "
                            "`torch._scaled_grouped_mm` (fp8 itself runs on sm_89 and newer; elsewhere the committed "
                            "H100 measurement, the compile view and the interpreter)"),
}


def course_report() -> str:
    """What this machine runs of the course, for the student copies' set-up cell: kernels compiled on a
    GPU (its name) or interpreted, TMA or not, and on a GPU that is not a Hopper the notebooks that need
    one to run live (:data:`COURSE`'s ``hopper``)."""
    from importlib.metadata import PackageNotFoundError, version

    import torch
    import triton

    from .. import runtime

    try:
        ours = version("gemm-kernels")
    except PackageNotFoundError:  # imported from a checkout, not installed
        ours = "(a source checkout)"
    lines = [f"gemm_kernels {ours}, torch {torch.__version__}, triton {triton.__version__}"]
    if not runtime.on_gpu():
        reason = runtime.RUNTIME.reason
        lines.append(f"{reason[:1].upper()}{reason[1:]}. Every notebook runs, at small sizes, and shows the committed "
                     "H100/H200 results where it would time something.")
    else:
        told = f", as {runtime.ARCH_ENV} says" if runtime.RUNTIME.arch_from_env else ""
        lines.append(f"GPU: {runtime.gpu_name()} ({runtime.arch_name()}{told}): kernels are compiled.")
    if runtime.supports_tma():
        lines.append("TMA (tensor descriptors): " + ("emulated by the interpreter" if runtime.interpreted() else "yes"))
    else:
        lines.append("TMA (tensor descriptors): no, it needs an sm_90 or newer GPU; the notebooks take their "
                     "pointer-load paths")
    if runtime.on_gpu() and not runtime.supports_wgmma():
        lines.append("Not a Hopper GPU (sm_90). What needs one to run live, by notebook (without it, the notebook "
                     "shows the committed results):")
        lines += [f"  {stem}: {course.hopper}" for stem, course in COURSE.items() if course.hopper]
    elif runtime.on_gpu():
        lines.append("A Hopper GPU: every notebook runs live.")
    return "\n".join(lines)


_TITLE = re.compile(r"^#\s+(.+?)\s*$", re.M)
_OBJECTIVES = re.compile(r"^\*\*What you will learn[^*]*\*\*\s*$", re.M)
_PREREQ = re.compile(r"^\*\*Prerequisites:\*\*\s*(.+?)(?:\n\s*\n|\Z)", re.M | re.S)
_EXERCISE = re.compile(r"^###\s+Exercise\b", re.M)
_HEADING = re.compile(r"^#{1,3}\s", re.M)
_KERNEL = re.compile(r"@(?:triton|gluon)\.jit")


@dataclass(frozen=True)
class NotebookInfo:
    path: Path
    title: str           # "03 · Grouped ordering: the same work, fewer trips to memory"
    short_title: str     # "03 · Grouped ordering"
    summary: str         # the first paragraph after the title
    objectives: tuple    # the "What you will learn" items
    prerequisites: str
    words: int           # prose, markdown cells
    code_cells: int
    exercises: int
    kernel_exercises: int  # exercises whose answer is a @triton.jit / @gluon.jit function

    @property
    def stem(self) -> str:
        return self.path.stem

    @property
    def number(self) -> str:
        return self.stem.split("_", 1)[0]

    @property
    def reading_min(self) -> int:
        return _round5(self.words / READING_WORDS_PER_MIN + self.code_cells * MIN_PER_CODE_CELL)

    @property
    def exercise_min(self) -> int:
        python = self.exercises - self.kernel_exercises
        return _round5(python * MIN_PER_EXERCISE + self.kernel_exercises * MIN_PER_KERNEL_EXERCISE)


def _round5(minutes: float) -> int:
    return int(5 * math.ceil(minutes / 5)) if minutes > 0 else 0


def _card_error(path: Path, what: str) -> BookError:
    return BookError(f"{path.name}: its first cell must be a markdown cell with {what} (the book puts the "
                     "notebook's title, objectives and prerequisites at the top of its page)")


def notebook_info(path: Path | str, nb=None) -> NotebookInfo:
    """What the book needs to know about one notebook; BookError naming it when its first cell is not
    a card (title, objectives, prerequisites)."""
    path = Path(path)
    nb = nb if nb is not None else nbformat.read(path, as_version=4)
    if not nb.cells or nb.cells[0].cell_type != "markdown":
        raise _card_error(path, "a '# NN · Title' heading")
    card = nb.cells[0].source
    title = _TITLE.search(card)
    if not title:
        raise _card_error(path, "a '# NN · Title' heading")
    objectives = _OBJECTIVES.search(card)
    if not objectives:
        raise _card_error(path, "a '**What you will learn**' list")
    prereq = _PREREQ.search(card)
    if not prereq:
        raise _card_error(path, "a '**Prerequisites:** ...' line")
    items = re.findall(r"^- (.+(?:\n  .+)*)", card[objectives.end():prereq.start()], re.M)
    intro = card[title.end():objectives.start()].strip().split("\n\n")[0]
    text = title.group(1)
    short = text.split(":", 1)[0].strip()
    markdown = [c.source for c in nb.cells if c.cell_type == "markdown"]
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    exercises = kernel = 0
    cells = nb.cells
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown" or not _EXERCISE.search(cell.source):
            continue
        exercises += 1
        answer = []  # the code cells up to the next heading
        for later in cells[i + 1:]:
            if later.cell_type == "markdown" and _HEADING.search(later.source):
                break
            if later.cell_type == "code":
                answer.append(later.source)
        kernel += any("### BEGIN SOLUTION" in src and _KERNEL.search(src) for src in answer)
    return NotebookInfo(path=path, title=text, short_title=short, summary=" ".join(intro.split()),
                        objectives=tuple(" ".join(i.split()) for i in items),
                        prerequisites=" ".join(prereq.group(1).split()),
                        words=sum(len(m.split()) for m in markdown), code_cells=len(code),
                        exercises=exercises, kernel_exercises=kernel)


def course_of(info: NotebookInfo) -> Course:
    try:
        return COURSE[info.stem]
    except KeyError:
        raise BookError(f"{info.path.name} is not in gemm_kernels/book/pages.py's COURSE table: add whether it is "
                        "core or optional and what in it needs a Hopper GPU") from None


def _hours(minutes: int) -> str:
    return f"{minutes // 60}\u00a0h\u00a0{minutes % 60:02d}" if minutes >= 60 else f"{minutes}\u00a0min"


def syllabus_markdown(infos: list) -> str:
    """The syllabus page: per notebook, time (reading + exercises), core or optional, prerequisites and
    what needs a Hopper GPU."""
    rows, core_min, all_min = [], 0, 0
    for info in infos:
        course = course_of(info)
        total = info.reading_min + info.exercise_min
        all_min += total
        core_min += total if course.core else 0
        kernels = f" ({info.kernel_exercises}\u00a0kernel{'s' if info.kernel_exercises > 1 else ''})" \
            if info.kernel_exercises else ""
        rows.append(f"| [{info.short_title}](notebooks/{info.stem}.ipynb) | {'core' if course.core else 'optional'} "
                    f"| {info.reading_min}\u00a0min | {info.exercises}{kernels}: {info.exercise_min}\u00a0min "
                    f"| {_hours(total)} | {info.prerequisites} | {course.hopper or 'no'} |")
    return "\n".join([
        "# Syllabus", "",
        f"{len(infos)} notebooks, one idea each, in this order. Each one opens with what it teaches and ends with "
        "exercises that check themselves. **Core** notebooks are the path from a first kernel to a persistent "
        "TMA GEMM and the grouped GEMM of Triton's tutorial 08, which this course grew from; **optional** ones "
        "go deeper and can be skipped or taken in any order once their prerequisites are done.", "",
        "| notebook | kind | reading | exercises | time | prerequisites | needs a Hopper GPU to run live |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows, "",
        f"In all about {_hours(all_min)}, of which {_hours(core_min)} for the core notebooks.", "",
        "**The times are estimates**, computed from each notebook's length, not measured on learners: "
        f"{READING_WORDS_PER_MIN} words of prose a minute plus {MIN_PER_CODE_CELL:g} minute per code cell for "
        f"reading, {MIN_PER_EXERCISE} minutes per exercise answered in Python and {MIN_PER_KERNEL_EXERCISE} per "
        "exercise that writes (part of) a kernel, rounded up to 5 minutes. Adjust them to your class.", "",
        "**What runs where.** Every notebook runs on a laptop's CPU: `import gemm_kernels` picks Triton's "
        "interpreter when there is no CUDA GPU, the notebooks use small sizes there, and where they would time "
        "something they show the committed GPU results (`images/bench/`, each table names its GPU). On any CUDA "
        "GPU the kernels are compiled and timed live at full size. The last column says what needs a Hopper GPU "
        "(compute capability 9.0: H100, H200) to run live rather than from the committed results. The pages of "
        "this book were executed on a CPU, in the interpreter.", "",
    ])


def index_markdown(infos: list, *, repo: str, title: str, solutions: bool = True) -> str:
    """The landing page: what the course is, its notebooks, how to run them, and what may be reused
    (``solutions``: whether the pages hold the solutions, folded away)."""
    cards = []
    for info in infos:
        label = "" if course_of(info).core else " *(optional)*"
        cards.append(f"- **[{info.short_title}](notebooks/{info.stem}.ipynb)**{label}: {info.summary}")
    url = f"https://github.com/{repo}"
    toc = "\n".join(f"notebooks/{info.stem}" for info in infos)
    return "\n".join([
        f"# {title}", "",
        "A course in Triton: you write a fast matrix multiplication (GEMM), one idea per notebook, and *see* "
        "each idea work: the schedule of programs drawn, the L2 traffic modelled, the speed measured on an "
        "H100. Every page below is a notebook with its outputs, executed on a CPU in Triton's interpreter when "
        "this site was built; the GPU measurements it shows are the committed results of the course's "
        "benchmarks.", "",
        "Read it here, or run it: each page has an **Open in Colab** and a **Launch on Binder** button, and a "
        "student copy (the exercises without their solutions) to download. A student copy's first cell installs "
        "the course's package where it is missing (Colab; never torch) and says what your machine runs. "
        + ("In these pages the solutions are folded away under *Show the solution*: try the exercise first."
           if solutions else "These pages show the exercises without their solutions, as the student copies do."),
        "",
        "## The notebooks", "", *cards, "",
        "The [syllabus](syllabus.md) gives the time each one takes, its prerequisites and what needs a Hopper "
        "GPU; the [glossary](glossary.md) explains the terms (their first use on every page links there).", "",
        "## Run it yourself", "",
        f"Clone [the repository]({url}) and run `make lab` (Linux, Python 3.10 or newer): it sets up a virtual "
        "environment and opens JupyterLab on your own student copies. `pip install gemm-kernels` installs just "
        "the package the notebooks import.", "",
        "## Reuse", "",
        f"The course is MIT-licensed ([LICENSE]({url}/blob/main/LICENSE)): you may use, copy and adapt the "
        f"notebooks, the package and these pages, in class or elsewhere, keeping the copyright notice. "
        f"[NOTICE]({url}/blob/main/NOTICE) names the work it builds on (Triton's tutorials, the Stream-K "
        "paper, the study notes whose results notebooks 01-04 reproduce); "
        f"[CITATION.cff]({url}/blob/main/CITATION.cff) says how to cite it.", "",
        "```{toctree}", ":maxdepth: 1", ":caption: Course", ":hidden:", "", "syllabus", toc, "glossary", "```", "",
    ])
