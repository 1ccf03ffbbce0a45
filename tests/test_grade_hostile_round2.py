"""A student's review of the grader (issue 48), round 2: a launcher that reads its tensors' values
without a torch call the check notes, computes the answer in Python and writes it element by
element, beside a kernel that only sets a flag (so "your kernel ran" and, with its launch skipped,
the launcher returns zeros).  Each scored 1 in the notebook's check and by the grade command's judge.

* ``f"{x[i]:.17g}"`` (``Tensor.__format__``, allowed to a launcher) is the value as text, exact;
* ``out[i].fill_(x[j])`` copies a value (``fill_`` was allowed, whatever it was filled with);
* ``triton.cdiv(x, y)`` on tensors did its arithmetic in triton/__init__.py, counted as Triton's.
"""

from __future__ import annotations

import linecache

import pytest
import torch
import triton
import triton.language as tl

from gemm_kernels.lab import _grade_judge, grade
from gemm_kernels.lab.exercises.pointer_arithmetic import check_transpose
from gemm_kernels.lab.exercises.start_here import check_axpy

#: minutes of end-to-end grading: `make test-hostile` (a CI extra), not `make test`
pytestmark = pytest.mark.hostile

SANDBOX = _grade_judge.sandbox_available()

_FLAG_KERNEL = '''
@triton.jit
def {name}(flag_ptr):
    tl.store(flag_ptr, 1.0)
'''
#: axpy in Python floats read as text, written with fill_ (0 without the flag kernel's launch)
AXPY_AS_TEXT = _FLAG_KERNEL.format(name="axpy_kernel") + '''
def axpy(alpha, x, y):
    flag = torch.zeros(1, dtype=torch.float32, device=x.device)
    axpy_kernel[(1,)](flag)
    out = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
    if f"{flag[0]:.1f}" != "1.0":
        return out
    for i in range(x.shape[0]):
        out[i].fill_(alpha * float(f"{x[i]:.17g}") + float(f"{y[i]:.17g}"))
    return out
'''
#: transpose copied by the launcher, one element at a time, with fill_ of a 0-d tensor
TRANSPOSE_BY_FILL = _FLAG_KERNEL.format(name="transpose_kernel") + '''
def transpose(x):
    M, N = x.shape
    flag = torch.zeros(1, dtype=torch.float32, device=x.device)
    transpose_kernel[(1,)](flag)
    out = torch.zeros((N, M), dtype=x.dtype, device=x.device)
    if f"{flag[0]:.1f}" != "1.0":
        return out
    for i in range(M):
        for j in range(N):
            out[j, i].fill_(x[i, j])
    return out
'''
#: the kernel copies x[0, 0] (without it the result is wrong), fill_ copies the rest: no flag to read
TRANSPOSE_BY_FILL_BUT_ONE = '''
@triton.jit
def transpose_kernel(x_ptr, out_ptr):
    tl.store(out_ptr, tl.load(x_ptr))

def transpose(x):
    M, N = x.shape
    out = torch.zeros((N, M), dtype=x.dtype, device=x.device)
    transpose_kernel[(1,)](x, out)
    for i in range(M):
        for j in range(N):
            if i + j > 0:
                out[j, i].fill_(x[i, j])
    return out
'''

def _defined(source: str, name: str, cell: int):
    """``name`` from ``source`` run as a notebook cell (its lines in linecache, as IPython has them)."""
    filename = f"<submission cell {cell}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"triton": triton, "tl": tl, "torch": torch}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102  (a test's own submission)
    return namespace[name]


@pytest.mark.parametrize(("source", "name", "check"), [
    (AXPY_AS_TEXT, "axpy", check_axpy), (TRANSPOSE_BY_FILL, "transpose", check_transpose),
    (TRANSPOSE_BY_FILL_BUT_ONE, "transpose", check_transpose)], ids=["axpy_as_text", "transpose_by_fill",
                                                                  "transpose_by_fill_but_one"])
def test_a_launcher_reading_values_without_a_noted_call_is_wrong(source, name, check):
    """The notebook's check: wrong (it read 0 where the launcher wrote nothing, or names the fill)."""
    verdict = check(_defined(source, name, 801))
    assert verdict.status == "wrong", (verdict.message, verdict.details)


def test_a_tensor_in_a_launcher_shows_no_values():
    """In a launcher under check a tensor turned into text shows its shape and dtype, not its values;
    fill_ with a tensor and triton.cdiv on tensors are the launcher's own computation."""
    from gemm_kernels.lab.exercises._kernel_checks import _LauncherTorch

    source = ("def reads(x):\n    return f'{x[0]:.17g}', str(x), repr(x[1])\n"
              "def fills(x):\n    return torch.zeros(2).fill_(x[0])\n"
              "def divides(x):\n    return triton.cdiv(x, 1)\n"
              "def plain(x):\n    return torch.zeros(2).fill_(2.5), torch.empty_like(x), x.t(), x.shape, f'{x.shape}'\n")
    fns = {name: _defined(source, name, 802) for name in ("reads", "fills", "divides", "plain")}
    x = torch.tensor([1.25, 2.5])
    with _LauncherTorch() as mode:
        texts = fns["reads"](x)
    assert not any("1.25" in text or "2.5" in text for text in texts), texts
    assert mode.computed == []
    for name in ("fills", "divides"):
        with _LauncherTorch() as mode:
            fns[name](x)
        assert mode.computed, name
    with _LauncherTorch() as mode:
        fns["plain"](x)
    assert mode.computed == []


def test_the_grade_command_gives_them_zero(tmp_path):
    """The judge (it rebuilds the launcher from its source and runs the check itself): 0 for each,
    and the solved notebooks beside them still score full marks."""
    import nbformat

    from test_grade_hostile import lean_notebook, with_answer

    forged = {"axpy_as_text": ("00_start_here", "axpy", AXPY_AS_TEXT),
              "transpose_by_fill": ("01_pointer_arithmetic", "transpose", TRANSPOSE_BY_FILL)}
    for student, (notebook, exercise, source) in forged.items():
        nb = lean_notebook(notebook)
        nbformat.write(with_answer(nb, exercise, source), tmp_path / f"{student}_{notebook}.ipynb")
        nbformat.write(nb, tmp_path / f"solved_{notebook}.ipynb")
    rows = grade.grade(tmp_path, jobs=1, timeout=120, cell_timeout=20, hide=[tmp_path], sandbox=SANDBOX)
    by_key = {(r.student, r.exercise): r for r in rows}
    for student, (_, exercise, _) in forged.items():
        assert by_key[(student, exercise)].points == 0, by_key[(student, exercise)].message
    solved = [r for r in rows if r.student == "solved"]
    assert len(solved) == 5 and all(r.status == "correct" for r in solved), [(r.exercise, r.message) for r in solved]


# ----------------------------------------------------------------------------- the notebook's budget
SLOW_CELL = "import time\ntime.sleep(2.5)\n"  # under the cell limit of 3 s
#: a cell the worker's own alarm cannot stop: the judge stops it from outside, then runs the notebook again
ALARM_BLOCKER = "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\nwhile True:\n    pass\n"


@pytest.mark.parametrize("cell, count", [(SLOW_CELL, 8), (ALARM_BLOCKER, 4)], ids=["slow cells", "alarm blockers"])
def test_a_notebooks_cells_have_one_budget(tmp_path, cell, count):
    """A student's review: six cells each under the cell limit cost 58.6 s, eight that block the alarm
    144.5 s (each stopped from outside, the notebook run again). All a notebook's cells share
    --notebook-timeout, over every run; the cells left when it is spent are left out (here: the answers)."""
    import time

    import nbformat

    from test_grade_hostile import lean_notebook

    nb = lean_notebook()
    at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code") + 1  # after the imports
    nb.cells[at:at] = [nbformat.v4.new_code_cell(cell) for _ in range(count)]
    path = tmp_path / "00_start_here.ipynb"
    nbformat.write(nb, path)
    started = time.monotonic()
    (verdicts,) = grade.grade_notebooks([(path, "00_start_here")], cell_timeout=3, notebook_timeout=8,
                                        sandbox=SANDBOX)
    seconds = time.monotonic() - started
    assert {status for status, _ in verdicts.values()} <= {"not attempted", "wrong", "error", "timeout"}, verdicts
    # a teacher's review: the message said "stopped after 19.9972 s", which reads as the cell's own limit
    assert all("used up their 8 s (--notebook-timeout)" in message for _, message in verdicts.values()), verdicts
    # the budget, the judge's grace past it, and a few starts of the notebook's process (imports)
    assert seconds < 8 + _grade_judge.GRACE_S + 25, seconds


# ----------------------------------------------------------------------------- a function handed to the answer
ROWS_BY_VALUE = '''
def rows_match(matmul, a, b, m1, m2):
    rows = min(m1, m2)
    return bool((matmul(a[:m1], b)[:rows] == matmul(a[:m2], b)[:rows]).all())
'''
ROWS_CALLING_FOREVER = '''
def rows_match(matmul, a, b, m1, m2):
    while True:
        matmul(a[:1], b)
'''


def test_a_function_the_check_hands_the_answer_is_run_by_the_judge(tmp_path):
    """05b's rows_match(matmul, a, b, m1, m2) gets a function of the check's: it crossed as an opaque
    value ("'Opaque' object is not callable"), so the solved notebook scored 0 there. Now it stays in
    the judge, which runs it on what the answer sends; an answer may call it a bounded number of times."""
    import nbformat

    from test_grade_hostile import lean_notebook

    def answered(source):
        nb = lean_notebook("05b_stream_k")
        next(c for c in nb.cells if c.cell_type == "code" and "def rows_match(" in c.source).source = source
        return nb

    cases = {"solved": lean_notebook("05b_stream_k"), "by_value": answered(ROWS_BY_VALUE),
             "forever": answered(ROWS_CALLING_FOREVER)}
    items = []
    for name, nb in cases.items():
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
        items.append((tmp_path / f"{name}.ipynb", "05b_stream_k", ["rows_match"]))
    runs = grade._run_judge(items, exam_mode=True, timeout=120, memory_mb=grade.MEMORY_MB, cell_timeout=30,
                            sandbox=SANDBOX)
    verdicts = {name: run.results["rows_match"] for name, run in zip(cases, runs)}
    assert verdicts["solved"][0] == "correct", verdicts["solved"]
    assert verdicts["by_value"][0] == "wrong", verdicts["by_value"]
    assert verdicts["forever"][0] in ("wrong", "error") and "more than 64 times" in verdicts["forever"][1], \
        verdicts["forever"]


def test_a_reply_of_tens_of_megabytes_is_read_within_the_judges_time():
    """On a GPU, 05b's cases are 4096-square fp16 tensors: a call of the check's matmul sends two of them,
    ~90 MB of JSON, which a pipe hands over 64 KiB at a time.  The judge's reader grew a bytes object
    and searched it whole at every chunk (40 s for 90 MB), so the solved notebook read "still running
    after 25 s".  Read in linear time, a reply that size arrives well inside a call's limit."""
    import subprocess
    import sys
    import types

    size = 90_000_000
    writer = ("import sys; out = sys.stdout.buffer; "
              f"out.write(b'{{\"x\": \"' + b'a' * {size} + b'\"}}\\n{{\"after\": 1}}\\n'); out.flush()")
    proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE)
    child = types.SimpleNamespace(proc=proc, buffer=bytearray(), failure=None, stop=proc.kill, ended=lambda: "ended")
    try:
        first = _grade_judge.Child.read(child, _grade_judge.CALL_TIMEOUT_S + _grade_judge.GRACE_S)
        second = _grade_judge.Child.read(child, 5)
    finally:
        proc.kill()
        proc.wait()
    assert len(first["x"]) == size and set(first["x"][:100]) == {"a"}
    assert second == {"after": 1} and child.failure is None
