"""Round 5 of the grader's hostile submissions (issue 48, a fresh teacher's review):

* a kernel whose body holds, in a string, a line starting with ``def ``: Triton's interpreter reads
  a kernel from its *last* such line, so the text it ran was not the text the judge checked, and
  from there the judge's own process (its report, its files) was the answer's;
* a report whose line range stops inside a function: Triton reads the whole block back;
* a launcher that zeroes its input ``a`` and returns zeros matched ``0 @ b``;
* a judge's report line that is no verdict stopped the whole grade command.
"""

from __future__ import annotations

import json

import nbformat
import pytest
import torch

from gemm_kernels import runtime
from gemm_kernels.lab import grade
from gemm_kernels.lab._rebuild import NotRebuilt, rebuild
from gemm_kernels.lab.exercises import WRONG
from gemm_kernels.lab.exercises import _kernel_checks as kc
from gemm_kernels.lab.exercises import naive_tiling, start_here

from _hostile import AXPY_AUTOTUNED
from test_grade_hostile import SANDBOX, lean_notebook, with_answer
from test_package_code_in_answers import learner, report_of

#: forged verdicts written by code the judge's interpreter ran (the review's 6-of-6 submission, on axpy)
PAYLOAD_IN_A_STRING = '''
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    notes = """
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK):
    s = inspect.sys
    spec = s.modules["json"].loads(s.argv[2])
    for i, nb in enumerate(spec["notebooks"]):
        for ex in nb["exercises"]:
            inspect.os.write(int(s.argv[1]), (s.modules["json"].dumps({"notebook": i, "result": ex[0],
                             "status": "correct", "message": "forged"}) + "\\\\n").encode())
        inspect.os.write(int(s.argv[1]), (s.modules["json"].dumps({"notebook": i, "done": True}) + "\\\\n").encode())
    inspect.os._exit(0)
#"""

def axpy(alpha, x, y):
    out = torch.empty_like(x)
    axpy_kernel[(1,)](x, y, out, alpha, x.numel(), BLOCK=1024)
    return out
'''

#: a kernel that is right (Triton's tutorial 03's, autotuned), for the reports cut short and renamed below
HONEST_KERNEL = AXPY_AUTOTUNED

#: 02's matmul that zeroes a and writes zeros into c: the reference, computed afterwards from a, was 0 too
CLOBBERS_A = '''
@triton.jit
def my_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    tl.store(a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak, tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float16),
             mask=(rm[:, None] < M) & (rk[None, :] < K))
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))

def my_matmul(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float16, device=a.device)
    my_matmul_kernel[(1,)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                           c.stride(1), BLOCK_M=triton.next_power_of_2(M), BLOCK_N=triton.next_power_of_2(N),
                           BLOCK_K=triton.next_power_of_2(K))
    return c
'''


def test_a_def_inside_a_kernels_string_is_refused():
    """The rebuild refuses the kernel, naming the line; nothing of the string runs."""
    fn = learner(PAYLOAD_IN_A_STRING)["axpy"]
    with pytest.raises(NotRebuilt, match="starts with `def ` inside the function"):
        rebuild(report_of(fn), "axpy", kc.handed(start_here.check_axpy), kc.package_answers(start_here.check_axpy))


def test_a_report_cut_short_inside_a_function_is_refused():
    """The notebook's process is the student's: a report that claims the kernel ends after its first
    statement (which parses alone) must not let Triton read back, and run, lines nobody checked."""
    fn = learner(HONEST_KERNEL)["axpy"]
    report = report_of(fn)
    report["functions"] = [[name, filename, first, first + 3 if name == "axpy_kernel" else last]
                           for name, filename, first, last in report["functions"]]
    try:
        rebuilt = rebuild(report, "axpy", kc.handed(start_here.check_axpy), kc.package_answers(start_here.check_axpy))
    except NotRebuilt:
        return  # refused: nothing of the rest ran
    # rebuilt from the checked lines alone: the store was never among them, so no output is written
    x, y = torch.ones(300, device=runtime.DEVICE), torch.ones(300, device=runtime.DEVICE)
    out = rebuilt(2.0, x, y)
    assert not torch.equal(out, 2.0 * x + y)


def test_a_launcher_that_overwrites_its_input_is_wrong():
    """The check's reference comes from the inputs after the answer ran: writing into them is refused."""
    result = naive_tiling.check_my_matmul(learner(CLOBBERS_A)["my_matmul"])
    assert result.status == WRONG and "changed its input a" in result.message, result.message


def test_the_forged_verdicts_score_zero_by_the_grade_command(tmp_path):
    """End to end: the review's submission (its payload on 00's axpy) scores 0 there, and the honest
    exercise beside it is graded on its merits."""
    nb = with_answer(lean_notebook(), "axpy", PAYLOAD_IN_A_STRING)
    nbformat.write(nb, tmp_path / "mallory_00_start_here.ipynb")
    rows = grade.grade(tmp_path, timeout=60, cell_timeout=10, hide=[tmp_path], sandbox=SANDBOX)
    by_exercise = {r.exercise: r for r in rows}
    assert by_exercise["axpy"].points == 0 and "starts with `def `" in by_exercise["axpy"].message, by_exercise
    assert by_exercise["launch_stats"].status == "correct", by_exercise["launch_stats"].message


@pytest.mark.parametrize("line", [b"this is not JSON", b'{"notebook": 7, "result": "x", "status": "correct"}',
                                  b'{"notebook": 0, "result": ["x"], "status": "correct", "message": "m"}', b"[1, 2]"])
def test_a_report_line_that_is_no_verdict_is_refused(line):
    """``grade._event`` takes no such line (the grade command then grades that notebook as an error,
    where it stopped with a traceback for the whole class)."""
    assert grade._event(line, 1) is None
    assert grade._event(json.dumps({"notebook": 0, "result": "x", "status": "correct", "message": "m"}).encode(), 1)


# ----------------------------------------------------------------------------- an adversary's review of the fix
#: a way out of the language found by a search of attribute chains: tl.semantic.TritonSemantic.lang is
#: triton.language.core, whose builtins hold exec (it graded a wrong axpy correct, from the judge)
THROUGH_A_CLASS_ATTRIBUTE = HONEST_KERNEL.replace(
    "def axpy(alpha, x, y):\n",
    "def axpy(alpha, x, y):\n    b = (tl.semantic.TritonSemantic,)[0].lang.builtins\n    b.exec('x = 1', {})\n")


def _rebuild_axpy(report):
    return rebuild(report, "axpy", kc.handed(start_here.check_axpy), kc.package_answers(start_here.check_axpy))


def test_the_way_out_through_a_class_attribute_is_refused():
    with pytest.raises(NotRebuilt, match="the attribute .lang is not allowed"):
        _rebuild_axpy(report_of(learner(THROUGH_A_CLASS_ATTRIBUTE)["axpy"]))


def test_a_function_reported_under_another_name_is_refused():
    """Claiming the name ``inspect`` for the kernel's lines let the launcher read the interpreter's
    ``inspect`` (copied into the kernel's globals at its first launch)."""
    report = report_of(learner(HONEST_KERNEL)["axpy"])
    kernel = next(f for f in report["functions"] if f[0] == "axpy_kernel")
    report["functions"].append(["inspect", *kernel[1:]])
    with pytest.raises(NotRebuilt, match="defines axpy_kernel, not inspect"):
        _rebuild_axpy(report)
    report["functions"][-1] = list(kernel)
    with pytest.raises(NotRebuilt, match="reported twice"):
        _rebuild_axpy(report)
    report["functions"][-1] = ["x", "<submission cell 1>", "1", 2]
    with pytest.raises(NotRebuilt, match="not \\(name, cell, first line, last line\\)"):
        _rebuild_axpy(report)


def test_a_function_that_takes_a_modules_name_is_refused():
    """A function named ``math`` (a module the report declares), decorated into a format string, read
    the judge's environment through ``math.format``."""
    source = HONEST_KERNEL + '''
@(lambda f: "{0.__globals__}")
def math():
    pass
'''
    report = report_of(learner(source)["axpy"])
    report["functions"].append(["math", report["functions"][0][1], source.count("\n") - 3, source.count("\n")])
    report["globals"]["math"] = {"module": "math"}
    with pytest.raises(NotRebuilt, match="both a function and another global"):
        _rebuild_axpy(report)


GUARDED = """
import builtins, os, sys
from gemm_kernels.lab._grade_judge import guard_answers
guard_answers()
namespace = {}
exec(compile("def answer(b, os):\\n    return b.exec('x = 1', {})\\n", "<submission cell 1>", "exec"), namespace)
exec(compile("def answer2(os):\\n    return os.system('true')\\n", "<submission cell 2>", "exec"), namespace)
for call in (lambda: namespace["answer"](builtins, os), lambda: namespace["answer2"](os)):
    try:
        call()
        print("ran")
    except RuntimeError as exc:
        print(exc)
print(os.system("true"))  # the judge's own calls go on
"""


def test_the_judge_refuses_what_an_answers_own_code_asks_of_python():
    """The second wall (``_grade_judge.guard_answers``): should a way out be found again, exec, compile,
    os.system ... called from a notebook cell's code fail in the judge; the judge's own do not."""
    import subprocess
    import sys

    from test_grade_hostile_round3 import run_with_package

    out = run_with_package([sys.executable, "-c", GUARDED], text=True)
    lines = out.stdout.split("\n")
    assert lines[:3] == ["the grader does not let an answer do this (compile)",
                         "the grader does not let an answer do this (os.system)", "0"], (out.stdout, out.stderr)
    assert isinstance(out, subprocess.CompletedProcess)
