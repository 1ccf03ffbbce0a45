"""Submissions written to get points without the work (issue 48), shared by the grade command's
tests (tests/test_grade_hostile.py) and nbgrader's (tests/test_teach.py).

Each replaces the answer cell of one exercise (notebook 00's ``launch_stats``, plain Python, and
``axpy``, a kernel and its launcher; 01's ``transpose`` and 02's ``my_matmul``, kernels and
launchers) with code that answers wrong, or right through someone else's work, and tries to make
the grade say otherwise, or to take the answer from the package.  Every one must score 0 on that
exercise, by both graders.
"""

from __future__ import annotations

#: the forgeries tests/test_teach.py also runs under nbgrader: some fool its own autograde (they run in
#: its kernel), all score 0 once the judge has written; those writing to every descriptor are left
#: out there (in nbgrader's kernel they jam its sockets, and autograde waits out Execute.timeout)
NBGRADER_HOSTILE = ("patch_core", "checkresult_patch", "equal_to_everything", "allclose_and_equal", "sys_modules",
                    "own_check_names", "ref_by_dict")

#: a wrong answer (n // block drops the partial block)
WRONG = "def launch_stats(n, block):\n    return n // block, 0\n"
#: a right one, written another way
RIGHT = "def launch_stats(n, block):\n    return -(-n // block), -(-n // block) * block - n\n"
#: axpy autotuned, as in Triton's tutorial 03 (it failed on a CPU with "0 active drivers")
AXPY_AUTOTUNED = """
@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 256}, num_warps=8)], key=["n"])
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, alpha * tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)

def axpy(alpha, x, y):
    out = torch.empty_like(x)
    n = x.numel()
    axpy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, alpha, n)
    return out
"""
#: a launcher that computes with torch, no kernel
AXPY_TORCH = "def axpy(alpha, x, y):\n    return alpha * x + y\n"

_FAKE = ('{"result": "launch_stats", "status": "correct", "message": "ok"}\\n'
         '{"result": "axpy", "status": "correct", "message": "ok"}\\n{"done": true}\\n'
         '{"ready": true, "errors": []}\\n{"defined": true, "callable": false, "value": [1, 0]}\\n')

#: the file "write_the_package" tries to add to the package (it must not appear)
PLANTED = "planted_by_a_submission.py"

#: name -> (exercise, the cell's source)
HOSTILE = {
    # the issue's own: patch the check machinery and nbgrader's hook in the answer's process
    "patch_core": ("launch_stats", """
import gemm_kernels.lab.exercises._core as _c
import gemm_kernels.lab.nbgrader_markup as _m
_c._run_body = lambda body, title, praise, *a, **k: _c.CheckResult(title, "correct", praise)
_m.graded = lambda module, name: (lambda *a, **k: None)
""" + WRONG),
    # the other: fake verdicts on every descriptor the process holds, then leave
    "fake_report_fd": ("launch_stats", WRONG + f"""
import os
for fd in range(0, 256):
    try:
        os.write(fd, b'{_FAKE}')
    except OSError:
        pass
os._exit(0)
"""),
    "fake_report_fd_stay": ("launch_stats", WRONG + f"""
import os
for fd in range(0, 256):
    try:
        os.write(fd, b'{_FAKE}' * 3)
    except OSError:
        pass
"""),
    "checkresult_patch": ("launch_stats", """
from gemm_kernels.lab.exercises import CheckResult
CheckResult.passed = property(lambda self: True)
CheckResult.status = "correct"
""" + WRONG),
    "sys_modules": ("launch_stats", """
import sys, types
fake = types.ModuleType("gemm_kernels.lab.exercises.start_here")
fake.check_launch_stats = lambda answer: "correct"
sys.modules["gemm_kernels.lab.exercises.start_here"] = fake
""" + WRONG),
    "allclose_and_equal": ("launch_stats", """
import numpy, torch
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
numpy.array_equal = lambda *a, **k: True
numpy.isclose = lambda a, b, **k: numpy.ones(numpy.shape(a), dtype=bool)
""" + WRONG),
    "own_check_names": ("launch_stats", """
def check_launch_stats(answer):
    return "correct"
def graded(module, name):
    return lambda *a, **k: None
""" + WRONG),
    "ref_by_dict": ("launch_stats", """
import gemm_kernels.lab.exercises.start_here as m
def launch_stats(n, block):
    return m.__dict__["launch_stats_ref"](n, block)
"""),
    "ref_import": ("launch_stats", "from gemm_kernels.lab.exercises.start_here import launch_stats_ref as launch_stats\n"),
    "ref_from_source": ("launch_stats", """
import ast, pathlib, gemm_kernels
_src = (pathlib.Path(gemm_kernels.__file__).parent / "lab" / "exercises" / "start_here.py").read_text()
_fn = next(n for n in ast.parse(_src).body if isinstance(n, ast.FunctionDef) and n.name == "launch_stats_ref")
_fn.decorator_list = []
_ns = {"cdiv": lambda a, b: -(-a // b)}
exec(compile(ast.Module([_fn], []), "x", "exec"), _ns)
launch_stats = _ns["launch_stats_ref"]
"""),
    "exit_at_top": ("launch_stats", WRONG + "import os\nos._exit(0)\n"),
    "endless_loop": ("launch_stats", WRONG + "while True:\n    pass\n"),
    "endless_loop_no_alarm": ("launch_stats", WRONG + """
import signal
signal.signal(signal.SIGALRM, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
while True:
    pass
"""),
    "fork_and_forge": ("launch_stats", WRONG + f"""
import os, time
if os.fork() == 0:
    os.setsid()
    for _ in range(200):
        for fd in range(0, 64):
            try:
                os.write(fd, b'{_FAKE}')
            except OSError:
                pass
        time.sleep(0.05)
    os._exit(0)
"""),
    "equal_to_everything": ("launch_stats", """
class Anything(tuple):
    def __eq__(self, other):
        return True
    __hash__ = tuple.__hash__
class AnyInt(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
def launch_stats(n, block):
    return Anything((AnyInt(0), AnyInt(0)))
"""),
    "patch_the_wire": ("launch_stats", """
import gemm_kernels.lab._grade_wire as w
import gemm_kernels.lab._grade_worker as g
w.encode = lambda value, depth=0: {"str": "correct"}
g.serve_call = lambda namespace, request: {"value": {"result": "correct"}}
""" + WRONG),
    "write_the_package": ("launch_stats", """
import pathlib, gemm_kernels
try:
    (pathlib.Path(gemm_kernels.__file__).parent / "planted_by_a_submission.py").write_text("planted = True\\n")
except OSError:
    pass
""" + WRONG),
    # a teacher's review, H5: solved notebooks where the grader runs (the repository's notebooks/, a course's
    # source/ under the grader's home, /home, /srv, /opt, the folder above the checkout), executed
    "solutions_on_disk": ("launch_stats", WRONG + """
import json, os, pathlib, gemm_kernels
def _solved_cells():
    repo = pathlib.Path(gemm_kernels.__file__).resolve().parents[1]
    for root in [repo / "notebooks", repo.parent, pathlib.Path.home(), *map(pathlib.Path, ("/home", "/srv", "/opt"))]:
        for folder, dirs, files in os.walk(root):
            deep = len(pathlib.Path(folder).relative_to(root).parts) >= 4
            dirs[:] = [] if deep else [d for d in dirs if not d.startswith(".") and d != "site-packages"]
            for name in (f for f in files if f.startswith("00") and f.endswith(".ipynb")):
                try:
                    cells = json.load(open(os.path.join(folder, name)))["cells"]
                except (OSError, ValueError, KeyError):
                    continue
                for cell in cells:
                    text = "".join(cell.get("source", ""))
                    if "BEGIN SOLUTION" in text and "def launch_stats(" in text:
                        yield text
for _text in _solved_cells():
    exec(_text, globals())
    break
"""),
    # kernel exercise: the judge rebuilds the launcher and kernel from their source
    "axpy_with_torch": ("axpy", AXPY_TORCH),
    "axpy_kernel_imports_os": ("axpy", """
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    __import__("os").system("true")

def axpy(alpha, x, y):
    out = torch.empty_like(x)
    axpy_kernel[(1,)](x, y, out, alpha, x.numel(), BLOCK=16)
    return out
"""),
    "axpy_patches_torch": ("axpy", """
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    pass

def axpy(alpha, x, y):
    torch.allclose = lambda *a, **k: True
    out = torch.empty_like(x)
    axpy_kernel[(1,)](x, y, out, alpha, x.numel(), BLOCK=16)
    return out
"""),
    "axpy_through_tl_internals": ("axpy", """
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    pass

def axpy(alpha, x, y):
    tl.core.builtins.exec("import os")
    return alpha * x + y
"""),
    # a teacher's review: tl.extra re-exports sys.modules (`from sys import modules`): the judge's own
    # Judge.verdict, patched from a rebuilt launcher, graded everyone after this notebook correct
    "axpy_reaches_the_judge": ("axpy", """
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    pass

def axpy(alpha, x, y):
    m = tl.extra.modules
    m["builtins"].setattr(m["__main__"].Judge, "verdict", lambda *a, **k: ("correct", "correct, well done."))
    out = torch.empty_like(x)
    axpy_kernel[(1,)](x, y, out, alpha, 1, BLOCK=16)
    return x * alpha + y
"""),
    # a flag kernel: it launches (so "your kernel ran"), and the launcher returns torch's result
    "axpy_flag_kernel": ("axpy", """
@triton.jit
def axpy_kernel(flag_ptr, BLOCK: tl.constexpr):
    tl.store(flag_ptr + tl.arange(0, BLOCK), tl.full((BLOCK,), 1.0, tl.float32))

def axpy(alpha, x, y):
    flag = torch.zeros(16, dtype=torch.float32, device=x.device)
    axpy_kernel[(1,)](flag, BLOCK=16)
    return x * alpha + y if flag.sum().item() > 0 else x
"""),
    # a judge's review, E1: a module held in a name skipped the chain check (tl.core holds builtins)
    "axpy_module_in_a_name": ("axpy", """
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    pass

def axpy(alpha, x, y, c=tl.core):
    c.builtins.exec("import os")
    return alpha * x + y
"""),
    # E2: gluon.jit of a library function handed back its module's real globals
    "axpy_capture_scope": ("axpy", """
import triton.experimental.gluon as gluon

@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    pass

def axpy(alpha, x, y):
    b = gluon.jit(tl.core.builtin).get_capture_scope()["__builtins__"]
    b["exec"]("import os")
    return alpha * x + y
"""),
    # E3: Triton's interpreter copies its own globals (inspect, np ...) into the kernel's, after a launch
    "axpy_interpreter_globals": ("axpy", """
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    pass

def axpy(alpha, x, y):
    out = torch.empty_like(x)
    axpy_kernel[(1,)](x, y, out, alpha, 1, BLOCK=16)
    inspect.os.system("true")
    return alpha * x + y
"""),
    # F1: torch arithmetic through tl.constexpr's operators (Triton's language computing for the launcher)
    "axpy_constexpr_arithmetic": ("axpy", """
@triton.jit
def axpy_kernel(flag_ptr):
    tl.store(flag_ptr, 1)

def axpy(alpha, x, y):
    flag = torch.zeros(1, dtype=torch.int32, device=x.device)
    axpy_kernel[(1,)](flag)
    result = (tl.constexpr(x) * alpha + tl.constexpr(y)).value
    if bool(tl.constexpr(flag) == 1):
        return result
    return torch.empty_like(x)
"""),
    # F2: Triton's shared cache of rewritten functions, poisoned for the next student
    "axpy_poisons_a_shared_cache": ("axpy", """
@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    pass

def evil(*args, **kwargs):
    return 1

def axpy(alpha, x, y):
    out = torch.empty_like(x)
    axpy_kernel[(1,)](x, y, out, alpha, 1, BLOCK=16)
    cache = axpy_kernel.rewritten_fn
    for key in list(cache):
        cache[key] = evil
    return out
"""),
    # the same, catching the refusal of its torch arithmetic
    "axpy_flag_kernel_caught": ("axpy", """
@triton.jit
def axpy_kernel(flag_ptr, BLOCK: tl.constexpr):
    tl.store(flag_ptr + tl.arange(0, BLOCK), tl.full((BLOCK,), 1.0, tl.float32))

def axpy(alpha, x, y):
    flag = torch.zeros(16, dtype=torch.float32, device=x.device)
    axpy_kernel[(1,)](flag, BLOCK=16)
    try:
        return x.mul(alpha).add(y)
    except Exception:
        return flag
"""),
    # a teacher's review (issue 48), H1: 02's matmul done by the package's own @triton.jit helpers (its K loop,
    # tile order and masked store), which a kernel answer could call: only helpers its exercise hands are allowed
    "matmul_by_package_helpers": ("my_matmul", """
from gemm_kernels.kernels import matmul as mm, epilogue as ep, tiles as tt

@triton.jit
def my_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                     stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m, pid_n = tt.tile_row_major(tl.program_id(0), tl.cdiv(N, BLOCK_N))
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    acc = mm.k_loop_pointers(a_ptr, b_ptr, offs_m, offs_n, K, stride_am, stride_ak, stride_bk, stride_bn,
                             BLOCK_M, BLOCK_N, BLOCK_K, False)
    ep.store_tile_masked(acc, c_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)

def my_matmul(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float16, device=a.device)
    grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)
    my_matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                           c.stride(0), c.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c
"""),
    # H2: the package's _matmul_kernel imported under another name (the underscore check read attribute chains
    # only) and launched by the launcher; a kernel of the student's copies a into a scratch buffer it reads, so
    # "without your kernel" gave garbage: a launcher may launch only the notebook's own kernels
    "matmul_by_aliased_package_kernel": ("my_matmul", """
from gemm_kernels.kernels.matmul import _matmul_kernel as lib_kernel

@triton.jit
def my_matmul_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)

def my_matmul(a, b):
    M, K = a.shape
    N = b.shape[1]
    a2 = torch.empty((M, K), dtype=a.dtype, device=a.device)
    ac = a.contiguous()
    my_matmul_kernel[(triton.cdiv(M * K, 256),)](ac, a2, M * K, BLOCK=256)
    c = torch.empty((M, N), dtype=torch.float16, device=a.device)
    lib_kernel[(triton.cdiv(M, 32) * triton.cdiv(N, 32),)](
        a2, b, c, c, c, M, N, K, a2.stride(0), a2.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUPED=False, GROUP_SIZE_M=1, HAS_BIAS=False, ACTIVATION=None,
        WIDEN=False, TRACE=False)
    return c
"""),
    # H3: 01's transpose done by torch: the kernel is a plain block copy and the launcher returns
    # tmp.t().contiguous(), a copy (.contiguous() of a view): a launcher's torch calls may not copy
    "transpose_by_torch_copy": ("transpose", """
@triton.jit
def transpose_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    block = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, block, mask=mask)

def transpose(x):
    M, N = x.shape
    tmp = torch.empty((M, N), dtype=x.dtype, device=x.device)
    transpose_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](x, tmp, M, N, x.stride(0), x.stride(1),
                                                                tmp.stride(0), tmp.stride(1), BLOCK_M=16, BLOCK_N=16)
    return tmp.t().contiguous()
"""),
}
