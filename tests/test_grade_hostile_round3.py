"""An adversarial review of the grade command's judge, round 3: what an answer cell can do to the
grading itself (its time, the processes it leaves, the machine's disk and memory), through the pipe
its own process writes to the judge (``replies``, a local of the worker's ``main``)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import nbformat
import pytest

from gemm_kernels.lab import _grade_judge, grade

from test_grade_hostile import SANDBOX, lean_notebook, with_answer

#: the worker's pipe to the judge, found from an answer cell (the worker's ``main`` holds it)
REPLIES = '''
def launch_stats(n, block):
    return n // block, 0
import sys, signal, time
_f = sys._getframe()
while 'replies' not in _f.f_locals:
    _f = _f.f_back
replies = _f.f_locals['replies']
signal.signal(signal.SIGALRM, signal.SIG_IGN)
'''
#: "cell 99 starts" every 3 s (bounded: 60 s at most, past every limit the test sets)
FORGED_STARTS = REPLIES + '''
for _ in range(20):
    replies.write(b'{"cell": 99, "start": true}\\n')
    time.sleep(3)
'''


def test_forged_cell_starts_do_not_keep_grading_running(tmp_path):
    """A cell wrote ``{"cell": 99, "start": true}`` to the judge every 3 s with SIGALRM ignored: each
    restarted the judge's read timeout and pushed the grade command's deadline on (159 s with
    --timeout 20, --cell-timeout 5, --notebook-timeout 10).  Now the cells have one deadline nothing
    they write moves: the notebook says its budget ran out, the student after it is graded as ever."""
    nb = lean_notebook()
    nbformat.write(with_answer(nb, "launch_stats", FORGED_STARTS), tmp_path / "forger_00_start_here.ipynb")
    nbformat.write(nb, tmp_path / "solved_00_start_here.ipynb")
    started = time.monotonic()
    forged, solved = grade.grade_notebooks(
        [(tmp_path / "forger_00_start_here.ipynb", "00_start_here"), (tmp_path / "solved_00_start_here.ipynb",
                                                                       "00_start_here")],
        timeout=20, cell_timeout=5, notebook_timeout=10, sandbox=SANDBOX)
    seconds = time.monotonic() - started
    assert {status for status, _ in forged.values()} == {"timeout"}, forged
    assert all("used up their 10 s (--notebook-timeout)" in message for _, message in forged.values()), forged
    assert {status for status, _ in solved.values()} == {"correct"}, solved
    assert seconds < 50, seconds  # the forger's 10 s, a grace, two starts of its process; the solved notebook


def test_the_grade_commands_deadline_has_a_bound_of_its_own():
    """However many cells the judge reports (it forwards what the notebook's process says), the grade
    command stops it by --timeout plus what the cells may take in all, counted from the exercise's start."""
    deadline = grade._Deadline(timeout=20, cell_timeout=5, notebook_timeout=10, now=0.0)
    bound = 20 + _grade_judge.cells_limit_s(10) + grade._EXIT_GRACE_S
    for second in range(0, 10_000, 3):
        deadline.cell(float(second))
    assert deadline.at == bound
    assert "ran past" in deadline.why() and "--notebook-timeout of 10 s" in deadline.why()
    deadline.start(10_000.0)  # the next exercise: its own time again
    assert deadline.at == 10_020.0 and "still running after 20 s" in deadline.why()


# ----------------------------------------------------------------------------- processes left behind
def _named(marker: str) -> list[int]:
    """The processes (this machine's ids) whose name is ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{entry}/comm").read_text().strip() == marker:
                    found.append(int(entry))
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


#: the answer cell names its process ``{marker}``, writes ``{line}`` to the judge, then sleeps 20 s
NAMED_AND_WRITING = REPLIES + '''
import ctypes
ctypes.CDLL(None).prctl(15, b"{marker}", 0, 0, 0)
replies.write({line!r} + b"\\n")
for _ in range(40):
    time.sleep(0.5)
'''


@pytest.mark.parametrize("line", [b'{"ready": true, "errors": 5}', b"[" * 100_000 + b"]" * 100_000],
                         ids=["errors not a list", "nested too deep"])
def test_no_notebook_process_outlives_grading(tmp_path, line):
    """A reply ``{"ready": true, "errors": 5}`` (TypeError) or a line nested too deep (RecursionError,
    which the judge's reader did not catch) made the judge raise with the notebook's process still
    running, in a session of its own, out of reach of the grade command's kill: 4 such outlived it.
    Now the judge reads both as what they are, stops what it started on any error and as it ends, and
    the kernel stops a notebook's process when its judge dies (the grade command's SIGKILL too)."""
    marker = f"gk{os.getpid() % 100_000}{len(line) % 1000}"
    path = tmp_path / "00_start_here.ipynb"
    nbformat.write(with_answer(lean_notebook(), "launch_stats", NAMED_AND_WRITING.format(marker=marker, line=line)),
                   path)
    try:
        (run,) = grade._run_judge([(path, "00_start_here", ["launch_stats"])], exam_mode=True, timeout=10,
                                  memory_mb=grade.MEMORY_MB, cell_timeout=5, notebook_timeout=20, sandbox=SANDBOX)
        time.sleep(0.5)  # the kernel's SIGKILL, on its way
        left = _named(marker)
    finally:
        _kill(_named(marker))
    assert left == [], (left, run)


def test_the_notebooks_process_is_stopped_when_its_start_fails(tmp_path):
    """Whatever raises while the cells run (here the judge's own report), the process is stopped."""
    import json

    nb = json.loads(nbformat.writes(lean_notebook()))
    seen = []

    def emit(**event):
        seen.extend(_grade_judge._STARTED)
        raise RuntimeError("the report failed")

    spec = {"memory_mb": grade.MEMORY_MB, "cell_timeout": 5, "notebook_timeout": 20, "hide": [], "sandbox": SANDBOX}
    with pytest.raises(RuntimeError, match="the report failed"):
        _grade_judge.start_child(nb, {}, spec, str(tmp_path), emit)
    assert seen and all(proc.poll() is not None for proc in seen)
    assert not _grade_judge._STARTED
