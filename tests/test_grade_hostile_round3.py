"""An adversarial review of the grade command's judge, round 3: what an answer cell can do to the
grading itself (its time, the processes it leaves, the machine's disk and memory), through the pipe
its own process writes to the judge (``replies``, a local of the worker's ``main``)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from gemm_kernels.lab import _grade_judge, grade

from test_grade_hostile import SANDBOX, lean_notebook, with_answer

#: minutes of end-to-end grading: `make test-hostile` (a CI extra), not `make test`
pytestmark = pytest.mark.hostile

#: the folder holding this checkout's gemm_kernels, for processes started from "/" (not the working directory's)
PACKAGE_PARENT = str(Path(grade.__file__).resolve().parents[2])


def run_with_package(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``argv`` from ``/``, this checkout's package first on its path, output captured, 300 s at most."""
    return subprocess.run(argv, capture_output=True, timeout=300, cwd="/",
                          env={**os.environ, "PYTHONPATH": PACKAGE_PARENT}, **kwargs)


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
#: "cell 99 starts" every 3 s (bounded: 120 s at most, well past every limit the test sets, so a
#: grade that the forger kept running shows as such even on a loaded machine)
FORGED_STARTS = REPLIES + '''
for _ in range(40):
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
    # the forger's 10 s, a grace, two starts of its process and the solved notebook: 58 s once on a GPU
    # machine running other test sessions beside it, against the forger's 120 s
    assert seconds < 100, seconds


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


# ----------------------------------------------------------------------------- the machine's disk, memory, processes
#: 9 MiB, past the 8 MiB the tests give a file
PAST_THE_CAP = 9 << 20
WRITES_A_FILE = f"with open('big.bin', 'wb') as f:\n    f.write(b'x' * {PAST_THE_CAP})\n"
WRITES_TO_STDERR = f"import sys\nsys.stderr.write('x' * {PAST_THE_CAP})\nsys.stderr.flush()\n"
PRINTS = "import sys\nprint('a line', file=sys.stderr)\n"
REPORTS_ITS_LIMITS = "import resource\nraise RuntimeError(f'limits {resource.getrlimit(resource.RLIMIT_NPROC)}')\n"


def test_a_cell_writing_past_the_file_cap_fails_alone(tmp_path):
    """With --memory-mb 1024 a cell wrote 512 MiB to stderr (the judge's log file, never read) and
    could write a file as large as the disk allowed.  Every file the notebook's process writes is now
    capped (RLIMIT_FSIZE, its log included): the cell that writes past it fails, the cells after it
    (printing too: the log is emptied once past half the cap) and the answers are as ever."""
    import json

    nb = lean_notebook()
    at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code") + 1  # after the imports
    cells = [WRITES_A_FILE, WRITES_TO_STDERR, PRINTS, REPORTS_ITS_LIMITS]
    nb.cells[at:at] = [nbformat.v4.new_code_cell(source) for source in cells]
    spec = {"memory_mb": grade.MEMORY_MB, "cell_timeout": 20, "notebook_timeout": 60, "hide": [], "sandbox": SANDBOX,
            "file_mb": 8, "processes": 123}
    child = _grade_judge.start_child(json.loads(nbformat.writes(nb)), {}, spec, str(tmp_path), lambda **_: None)
    try:
        assert child.alive(), child.failure
        log = (tmp_path / "output.txt").stat().st_size
        described = child.request({"op": "describe", "name": "launch_stats"}, 30)
    finally:
        child.stop()
    too_large = [e for e in child.errors if "File too large" in e]
    assert [e.split(" raised")[0] for e in too_large] == [f"cell {at}", f"cell {at + 1}"], child.errors
    limits = [e for e in child.errors if "limits" in e]
    assert len(child.errors) == 3 and limits, child.errors
    assert log <= 8 << 20 and described.get("defined") and described.get("callable"), (log, described)
    if SANDBOX:  # the judge gives a sandboxed process its task limit
        assert "limits (123, 123)" in limits[0], limits


def test_the_sandboxs_writable_folders_are_capped(tmp_path):
    """A cell wrote 1.5 GiB to /dev/shm (a tmpfs without size=: memory the memory cap does not
    count).  /tmp, /dev/shm, the home folder and /dev are tmpfs mounts with a size now."""
    import json

    from gemm_kernels.lab import _sandbox

    if not SANDBOX:
        pytest.skip("no sandbox on this machine")
    script = '''
import json, os
out = {}
for folder in ("/tmp", "/dev/shm", os.path.expanduser("~"), "/dev"):
    out[folder] = 0
    for i in range(16):  # 1 MiB files, 16 MiB at most
        try:
            with open(os.path.join(folder, f"fill{i}"), "wb") as f:
                f.write(b"x" * (1 << 20))
        except OSError:
            break
        out[folder] += 1 << 20
print(json.dumps(out))
'''
    prefix = _sandbox.sandbox_prefix([], writable_mb=4)
    done = subprocess.run([*prefix, sys.executable, "-c", script], capture_output=True, timeout=120,
                          env=_sandbox.child_environment(), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    written = json.loads(done.stdout)
    assert all(size <= 4 << 20 for size in written.values()) and written["/dev"] < 1 << 20, written
    assert written["/tmp"] == 4 << 20, written  # what the cap allows, it allows


def test_a_fork_bomb_stops_at_the_task_limit():
    """64 os.fork() children of a cell ran on after it returned: no RLIMIT_NPROC.  The notebook's
    process caps its tasks (the judge gives a sandboxed one :func:`._sandbox.process_limit`); here the
    cap as the worker sets it, in a process of an unprivileged user (the kernel applies RLIMIT_NPROC
    to no process of root's, so run as root this test runs it as nobody)."""

    script = '''
import os, sys, time
from gemm_kernels.lab._grade_worker import cap_resources
cap_resources(0, 8, processes=40)
children = []
for _ in range(200):  # bounded, whatever the cap does
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    children.append(pid)
print(len(children))
for pid in children:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
'''
    as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] if os.geteuid() == 0 else []
    done = subprocess.run([*as_user, sys.executable, "-c", script], capture_output=True, timeout=120, cwd="/",
                          env={"PYTHONPATH": PACKAGE_PARENT, "PATH": os.environ.get("PATH", "")})
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert int(done.stdout) < 40, done.stdout


def test_teaching_md_says_the_caps():
    from gemm_kernels.lab import _grade_worker, _sandbox

    text = " ".join((Path(grade.__file__).resolve().parents[2] / "notebooks" / "TEACHING.md").read_text().split())
    assert f"home folder of its own, {_sandbox.WRITABLE_MB} MiB each" in text
    assert f"its printing too, stops at {_grade_worker.FILE_MB} MiB" in text


# ----------------------------------------------------------------------------- the judge's writes, its words
def test_a_message_the_notebooks_process_never_reads_does_not_stop_the_judge():
    """The judge wrote to the notebook's process with no time limit: a callback's reply the answer
    never reads (78 MB, past a pipe's 64 KiB) held the judge until --timeout.  A write has the call's
    limit now; the process is stopped and its next read says why."""
    import types

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(15)"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    os.set_blocking(proc.stdin.fileno(), False)  # as the judge has it
    child = types.SimpleNamespace(proc=proc, buffer=bytearray(), failure=None, ended=lambda: "ended")
    child.stop = lambda: (proc.kill(), proc.wait())
    started = time.monotonic()
    try:
        _grade_judge.Child._send(child, {"value": "a" * (8 << 20)}, 2)
        seconds = time.monotonic() - started
        with pytest.raises(_grade_judge.ChildGone, match="did not read what the judge sent it within 2 s"):
            _grade_judge.Child.read(child, 5)
    finally:
        proc.kill()
        proc.wait()
    assert seconds < 5 and child.failure[0] == "timeout", (seconds, child.failure)


#: past the notebook's process's own limit of callbacks (64), by resetting its count
CALLS_PAST_THE_LIMIT = '''
def rows_match(matmul, a, b, m1, m2):
    for _ in range(300):
        matmul._calls = 0
        matmul(a[:1], b)
    return True
'''
#: an error whose words say memory ran out, where none did
SAYS_MEMORY_ERROR = '''
def launch_stats(n, block):
    raise ValueError("MemoryError: CUDA out of memory")
'''
#: memory that does run out (a TiB, past --memory-mb)
RUNS_OUT_OF_MEMORY = '''
def launch_stats(n, block):
    return bytearray(1 << 40)
'''


def test_verdicts_say_what_the_judge_knows_in_plain_words(tmp_path):
    """After 256 callbacks the row read "wrong ... raised ChildGone: ..." (a class of the judge's);
    an answer whose message held "MemoryError" was "out of memory".  Now the first says what the
    answer did, and "out of memory" comes from what the notebook's process raised, not its words."""
    nb05 = lean_notebook("05b_stream_k")
    next(c for c in nb05.cells if c.cell_type == "code" and "def rows_match(" in c.source).source = \
        CALLS_PAST_THE_LIMIT
    nbformat.write(nb05, tmp_path / "callbacks.ipynb")
    nbformat.write(with_answer(lean_notebook(), "launch_stats", SAYS_MEMORY_ERROR), tmp_path / "says.ipynb")
    nbformat.write(with_answer(lean_notebook(), "launch_stats", RUNS_OUT_OF_MEMORY), tmp_path / "runs_out.ipynb")
    items = [(tmp_path / "callbacks.ipynb", "05b_stream_k", ["rows_match"]),
             (tmp_path / "says.ipynb", "00_start_here", ["launch_stats"]),
             (tmp_path / "runs_out.ipynb", "00_start_here", ["launch_stats"])]
    runs = grade._run_judge(items, exam_mode=True, timeout=120, memory_mb=grade.MEMORY_MB, cell_timeout=30,
                            sandbox=SANDBOX)
    verdicts = [runs[0].results["rows_match"], runs[1].results["launch_stats"][0], runs[2].results["launch_stats"][0]]
    assert verdicts == [("wrong", "your answer called the function its check handed it more than 256 times in one "
                                  "call: stopped"), "wrong", "out of memory"], verdicts


def test_the_memory_cap_counts_from_the_process_start_up():
    """On an H200 every notebook of the grader's GPU tests read "failed to map segment from shared
    object": the cap (1 GiB there) counted from the start, and importing torch's CUDA build alone takes
    1.35 GiB of data segment (images/bench/gpu_checks/grader_gpu_9bf6341_h100.log).
    The cap is now what the process may take beyond its start-up (:func:`_grade_worker.start_cuda`
    makes the context first where a GPU is visible); a notebook filling memory still stops at it."""

    script = '''
import resource, torch
from gemm_kernels.lab._grade_worker import cap_memory, data_mb, start_cuda
start_cuda()
before = data_mb()
cap_memory(256)
print(before, resource.getrlimit(resource.RLIMIT_DATA)[0] >> 20)
keep = bytearray(64 << 20)  # well inside the cap
try:
    more = bytearray(512 << 20)
except MemoryError:
    print("MemoryError")
'''
    done = run_with_package([sys.executable, "-c", script])
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    first, last = done.stdout.decode().split("\n")[:2]
    before, limit = map(int, first.split())
    assert before > 100 and before + 256 <= limit <= before + 256 + 8  # torch's own segment, then 256 MiB more
    assert last == "MemoryError"


def test_a_notebooks_process_with_a_larger_start_up_can_set_its_cap():
    """The judge caps itself soft only: a notebook's process it starts, holding more at its start-up
    (a notebook with plots), then sets its own cap; in a user namespace, as for any user but root,
    raising the inherited hard limit failed ("not allowed to raise maximum limit") and every
    exercise read a set-up error.  A hard limit from outside is kept: the cap never goes above it."""

    script = '''
import resource, subprocess, sys
from gemm_kernels.lab._grade_worker import cap_memory, data_mb
child = """
import resource
from gemm_kernels.lab._grade_worker import cap_memory, data_mb
held = bytearray(96 << 20)  # a larger start-up than the judge's
base = data_mb()
cap_memory(256)
soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
print(base, soft >> 20, hard >> 20)
"""
for soft_only in (True, False):
    cap_memory(256, soft_only=soft_only) if soft_only else None
    if not soft_only:
        limit = resource.getrlimit(resource.RLIMIT_DATA)[0]
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))  # a hard limit from outside
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    print(done.returncode, done.stdout.strip(), done.stderr.strip()[-300:], flush=True)
'''
    from gemm_kernels.lab._sandbox import sandbox_available

    if not sandbox_available():
        pytest.skip("no user namespace here (the grader's sandbox needs one too)")
    done = run_with_package(["unshare", "--user", "--map-root-user", "--", sys.executable, "-c", script])
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    first, second = done.stdout.decode().strip().split("\n")
    rc, base, soft, hard = map(int, first.split()[:4])
    assert rc == 0 and base + 256 <= soft == hard <= base + 256 + 8, first
    rc, base, soft, hard = map(int, second.split()[:4])
    assert rc == 0 and soft == hard < base + 256, second  # clamped to the hard limit it inherited


def test_a_cell_freeing_the_notebooks_copy_gains_no_memory():
    """The cap was measured after the notebook was read: a cell that emptied the worker's copy of a
    large notebook (its own markdown) then had that much more room.  Now the start-up is measured
    before the notebook arrives.  The worker alone, fed its set-up line as the judge sends it."""

    from gemm_kernels.lab import _grade_wire as wire

    free_then_take = '''
import gc, sys
frame = sys._getframe()
while frame is not None and "setup" not in frame.f_locals:
    frame = frame.f_back
for cell in frame.f_locals["setup"]["notebook"]["cells"]:
    cell["source"] = ""  # the 160 MiB of markdown, freed
gc.collect()
taken = bytearray(128 << 20)
'''
    notebook = {"cells": [{"cell_type": "markdown", "source": "x" * (160 << 20)},
                          {"cell_type": "code", "source": free_then_take}]}
    setup = {"notebook": notebook, "memory_mb": 96, "cell_timeout": 60, "cells_budget": 120, "skip": []}
    done = run_with_package([sys.executable, "-m", "gemm_kernels.lab._grade_worker"], input=wire.dumps(setup))
    replies = [wire.loads(line) for line in done.stdout.splitlines() if line.strip()]
    ready = next(r for r in replies if r.get("ready"))
    assert any("MemoryError" in e for e in ready["errors"]), (ready, done.stderr.decode()[-500:])
