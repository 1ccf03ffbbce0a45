"""Exam mode (GEMM_KERNELS_EXAM=1, in a subprocess: the mode is read when the package is imported):
no solution or approach in hints or feedback, no "show a solution" expander, the ``*_ref``
references refused to the learner, and the checks still grading right with them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gemm_kernels.lab import exam
from gemm_kernels.lab.exercises.start_here import check_launch_stats

#: run with exam mode on; prints what a learner would see, as JSON.  The learner's code is compiled
#: under a cell's file name, as in Jupyter.
_SCRIPT = r'''
import json
from gemm_kernels.lab import exam
import gemm_kernels.lab.exercises.start_here as module
from gemm_kernels.lab.exercises.start_here import check_launch_stats

def learner(source):
    space = {"module": module}
    exec(compile(source, "<cell 1>", "exec"), space)
    return space

right = learner("def f(n, b):\n    p = (n + b - 1) // b\n    return p, p * b - n\n")["f"]
wrong = learner("def f(n, b):\n    return n // b, 0\n")["f"]
first, second = check_launch_stats(wrong), check_launch_stats(wrong)  # the second would show the approach
out = {"on": exam.ON, "hints": [str(check_launch_stats.hint(level=n)) for n in (1, 2, 3)],
       "feedback": str(second), "html": second._repr_html_(), "shown": str(second.show_hint(3)),
       "statuses": [first.status, check_launch_stats(right).status]}
for what, source in (("import", "from gemm_kernels.lab.exercises.start_here import launch_stats_ref"),
                     ("attribute", "module.launch_stats_ref"),
                     ("call", "vars(module)['launch_stats_ref'](10, 4)")):
    try:
        learner(source)
        out[what] = "allowed"
    except exam.ExamModeError as exc:
        out[what] = str(exc)
through_ref = learner("def f(n, b):\n    return vars(module)['launch_stats_ref'](n, b)\n")["f"]
out["through_ref"] = str(check_launch_stats(through_ref))
print(json.dumps(out))
'''


def test_exam_mode_hides_solutions_and_references_and_still_grades():
    env = {**os.environ, exam.ENV: "1", "GEMM_KERNELS_PROGRESS": "off"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    hints = check_launch_stats.hints  # this process is not in exam mode: the full hints
    seen = json.dumps(out)
    assert out["on"] and hints.solution not in seen and hints.approach not in seen
    assert hints.nudge in out["hints"][0] and hints.nudge in out["feedback"]
    assert all(exam.OFF in text for text in (*out["hints"][1:], out["shown"]))
    assert "stuck?" not in out["feedback"] and "show a solution" not in out["html"] and "<details" not in out["html"]
    assert out["statuses"] == ["wrong", "correct"]
    for what in ("import", "attribute", "call"):
        assert "launch_stats_ref is unavailable in exam mode" in out[what], what
    assert "[x]" in out["through_ref"] and "ExamModeError" in out["through_ref"]


def test_outside_exam_mode_the_solution_is_there():
    assert not exam.ON and exam.enabled("1") and not exam.enabled("0") and not exam.enabled(None)
    assert check_launch_stats.hint(level=3).text == check_launch_stats.hints.solution != exam.OFF


_DIAGNOSIS_SCRIPT = r'''
import json, linecache
from gemm_kernels.lab.exercises.pointer_arithmetic import check_transpose

source = """
import torch, triton, triton.language as tl

@triton.jit
def transpose_kernel(x_ptr, out_ptr, M, N, sxm, sxn, som, son, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    block = tl.load(x_ptr + rows[:, None] * sxm + cols[None, :] * sxn, mask=mask)
    tl.store(out_ptr + rows[:, None] * som + cols[None, :] * son, block, mask=mask)  # not transposed

def transpose(x):
    M, N = x.shape
    out = torch.empty((N, M), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
    transpose_kernel[grid](x, out, M, N, x.stride(0), x.stride(1), out.stride(0), out.stride(1), BLOCK_M=16, BLOCK_N=16)
    return out
"""
linecache.cache["<cell 1>"] = (len(source), None, source.splitlines(True), "<cell 1>")
space = {}
exec(compile(source, "<cell 1>", "exec"), space)
print(json.dumps(str(check_transpose(space["transpose"]))))
'''


def test_exam_mode_feedback_names_no_fix():
    """A teacher's review: in a class build, the transpose check's diagnosis printed the solution's
    store ("address out with cols[None, :] * stride_om + rows[:, None] * stride_on"). In exam mode a
    kernel check's diagnoses are left out; the failing case still says what is wrong."""
    env = {**os.environ, exam.ENV: "1", "GEMM_KERNELS_PROGRESS": "off"}
    done = subprocess.run([sys.executable, "-c", _DIAGNOSIS_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    feedback = json.loads(done.stdout.strip().splitlines()[-1])
    assert feedback.startswith("[x] transpose") and "diagnosis:" not in feedback and "stride_om" not in feedback
