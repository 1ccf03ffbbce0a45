"""Checks for notebook 08 (warp specialization): the ring's slot and barrier phases, and a
consumer warpgroup's main loop written in Gluon.

``check_ring_phases(slot_and_phases)``: a plain Python function ``(q, stages) -> (slot,
ready_phase, empty_phase)`` for ring position ``q``, checked step by step (slot, then the
consumer's phase, then the producer's), each step with its own hint; once right, the result
shows the ring's table from the learner's function.  An answer that runs the package's own code
(``ring_phases_ref``, say) is refused: it returns the reference's table.

``check_consumer_mainloop(consumer_mainloop)``: the learner's ``@gluon.jit`` main loop, plugged
into :func:`exercise_kernel` (a cooperative warp-specialized GEMM: ``matmul_ws``'s producer and
epilogue, the learner's loop).  On every machine, in four steps:

1. it is compiled for sm_90 by the compile view (in a worker process);
2. its Python body is *traced* with stand-ins for Gluon's calls (Triton's integer arithmetic,
   where ``%`` keeps the sign), two consumers over a few programs whose rings wrap inside and
   across tiles: which slot each wgmma reads and what the accumulator sums;
3. the traced waits, arrives, wgmmas and wgmma waits are played against matmul_ws' producer and
   the TMA by :func:`gemm_kernels.models.ws_timeline.simulate_ring` (the mbarriers' phases, on
   several schedules): a wgmma reading stale data, a slot refilled while it is read, a wait that
   never passes (a deadlock on a GPU) are caught and explained at the learner's line;
4. the exercise's rule: the wgmma is asynchronous and one stays in flight.

A loop the trace cannot follow (a Gluon call it does not model) gets "structure only", never
"correct": the compiled PTX's waits, arrives and wgmmas are counted, nothing more.  On a Hopper
GPU the kernel then also runs, in a child process with a time limit (a wait that never passes
stops the child, not the notebook), on ragged shapes whose rings wrap many times, against torch.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import inspect
import json
import linecache
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import types
from pathlib import Path

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from ... import runtime
from ...kernels import matmul_ws as ws
from ...models import ws_timeline as wt
from . import _kernel_checks as kc
from ._core import (CORRECT, STRUCTURE_ONLY, AnswerRaised, CheckResult, Hints, _NotAttempted, call, exercise,
                    is_stub_error, read_items, shown, unseen_cases, whole)

#: the package's folder: an answer that runs code from here returns the package's numbers, not the learner's
_PACKAGE_DIR = os.path.join(str(Path(__file__).resolve().parents[2]), "")


def _package_code(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE_DIR)


def _package_function(answer):
    """The code object of ``answer`` when it is one of the package's own functions (or a partial
    of one, a bound method, a jit function around one); else None."""
    obj = answer
    for _ in range(8):
        code = getattr(obj, "__code__", None)
        if code is not None:
            return code if _package_code(code.co_filename) else None
        obj = getattr(obj, "func", None) or getattr(obj, "__func__", None) or getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


def _not_yours(name: str, what: str) -> str:
    whose = "the reference's table" if name.endswith("ring_phases_ref") else "the package's result"
    return f"your answer runs gemm_kernels' own {name}: this returns {whose}, not yours. {what}"


def _code_name(code) -> str:
    module = os.path.splitext(os.path.relpath(code.co_filename, _PACKAGE_DIR))[0].replace(os.sep, ".")
    return f"{module}.{getattr(code, 'co_qualname', code.co_name)}"


# ----------------------------------------------------------------------------- exercise 1: phases
#: (q, stages): the first lap, a wrap, far laps, a one-slot ring, matmul_ws' rings
PHASE_CASES = sorted({(q, s) for s in (1, 2, 4, 5) for q in (0, 1, s - 1, s, s + 1, 2 * s - 1, 2 * s, 3 * s + 1, 101)},
                     key=lambda c: (c[1], c[0]))


def ring_phases_ref(q: int, stages: int) -> tuple[int, int, int]:
    """Ring position q: its slot, the parity the consumer waits for on ready[slot] (lap 0 waits
    for the first completion, parity 0), and the parity the producer waits for on empty[slot]
    (the opposite: a fresh barrier counts as having completed parity 1, so lap 0 does not wait)."""
    lap = q // stages
    return q % stages, lap & 1, (lap & 1) ^ 1


RING_PRAISE = "correct, well done."

#: what each step of ring_phases is about, said without its formula (the Hints hold the rest)
STEP_NUDGES = {
    "slot": "which slot does position q use, when the ring has `stages` slots and positions go round it?",
    "ready": "how many times has this slot's ready barrier completed before position q's load lands?",
    "empty": "what has the producer to wait for before refilling a slot, and what does a fresh barrier "
             "count as having completed?",
}


@exercise("ring_phases", hints=Hints(
    nudge="a ring position q is a slot and a lap: the slot says which buffer, the lap says which phase",
    approach="slot from q and the ring size; the ready barrier of a slot completes once per lap, so its "
             "parity flips every lap; the producer's empty wait is one lap behind, and a fresh barrier passes "
             "a wait for parity 1",
    solution="lap = q // stages; return q % stages, lap & 1, (lap & 1) ^ 1"), praise=RING_PRAISE)
def check_ring_phases(slot_and_phases):
    own = "Write the slot and the two parities with your own arithmetic (section 2 explains laps and parities)."
    code = _package_function(slot_and_phases)
    if code is not None:
        return [_not_yours(_code_name(code), own)]
    with kc.learner_calls() as called:
        problems = _ring_phase_problems(slot_and_phases, PHASE_CASES) or _ring_phase_problems(
            slot_and_phases, unseen_cases(lambda rng: (rng.randint(0, 10**6), rng.randint(1, 8))))
        table = [] if problems else _ring_table(slot_and_phases)
    if called:
        return [_not_yours(called[0], own)]
    return problems or CheckResult("ring_phases", CORRECT, RING_PRAISE, table)


def _ring_table(slot_and_phases, stages: int = 4, positions: int = 10) -> list[str]:
    """The ring for ``stages`` slots, from the learner's own (correct) function: the table the
    notebook shows only once exercise 1 passes."""
    rows = [tuple(whole(v) for v in read_items(call(slot_and_phases, q, stages), 3)) for q in range(positions)]
    return [f"your ring for STAGES = {stages}:", "q    : " + " ".join(str(q) for q in range(positions)),
            *(f"{name:<5}: " + " ".join(str(r[i]) for r in rows) for i, name in enumerate(("slot", "ready", "empty")))]


def _ring_phase_problems(slot_and_phases, cases) -> list[str]:
    """``cases``: (q, stages) pairs."""
    for step, index in (("slot", 0), ("ready", 1), ("empty", 2)):  # stepwise: the first wrong step only
        problems = []
        for q, stages in cases:
            answer = call(slot_and_phases, q, stages)
            try:
                got = tuple(whole(v) for v in read_items(answer, 3))  # an endless answer: 4 items read, wrong
                assert len(got) == 3
            except (TypeError, ValueError, OverflowError, AssertionError):
                return [f"q={q}, stages={stages}: expected (slot, ready_phase, empty_phase), got {shown(answer)}"]
            expected = ring_phases_ref(q, stages)
            if got[index] != expected[index]:
                problems.append(f"q={q}, stages={stages}: {step}{'' if step == 'slot' else '_phase'} expected "
                                f"{expected[index]}, got {got[index]}")
        if problems:
            return [f"step {index + 1} of 3 ({step}): {problems[0]}", *problems[1:4], STEP_NUDGES[step]]
    return []


# ----------------------------------------------------------------------------- exercise 2: the kernel
#: the exercise kernel's tiles: matmul_ws' cooperative config (two 64 x 256 halves, 4 slots)
CONFIG = ws.CONFIGS["cooperative"]


@gluon.jit
def _exercise_consumer(c_desc, a_bufs, b_bufs, c_bufs, ready_bars, empty_bars, c_ptr, M, N, K, stride_cm,
                       WG_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
                       EPI_SPLIT: gl.constexpr, GROUP_M: gl.constexpr, CONSUMER: gl.constexpr,
                       MAINLOOP: gl.constexpr):
    """matmul_ws' cooperative consumer with the main loop handed in (MAINLOOP)."""
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    num_pid_m = gl.cdiv(M, 2 * WG_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    my_tiles = gl.cdiv(num_pid_m * num_pid_n - pid, num_programs)
    c_smem = c_bufs.index(CONSUMER)
    for t in range(my_tiles):
        pid_m, pid_n = ws._tile_grouped(pid + t * num_programs, num_pid_m, num_pid_n, GROUP_M)
        acc = MAINLOOP(a_bufs, b_bufs, ready_bars, empty_bars, t * k_tiles, k_tiles, CONSUMER, 2, WG_M, BLOCK_N, STAGES)
        ws._epilogue(acc, c_desc, c_smem, c_ptr, c_ptr, pid_m * 2 * WG_M + CONSUMER * WG_M, pid_n * BLOCK_N,
                     M, N, stride_cm, WG_M, BLOCK_N, EPI_SPLIT, True, False, None)
    tma.store_wait(0)


@gluon.jit
def exercise_kernel(a_desc, b_desc, c_desc, c_ptr, M, N, K, stride_cm,
                    WG_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
                    EPI_SPLIT: gl.constexpr, GROUP_SIZE_M: gl.constexpr, MAINLOOP: gl.constexpr):
    """A cooperative warp-specialized GEMM (row-major A and B, C through TMA) whose consumers run MAINLOOP."""
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES * 2] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_bufs = gl.allocate_shared_memory(dtype, [2] + c_desc.block_type.shape, c_desc.layout)
    ready_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready_bars.index(i), count=1)
        mbarrier.init(empty_bars.index(i), count=2)  # both consumers read every slot
    gl.warp_specialize([
        (_exercise_consumer, (c_desc, a_bufs, b_bufs, c_bufs, ready_bars, empty_bars, c_ptr, M, N, K, stride_cm,
                              WG_M, BLOCK_N, BLOCK_K, STAGES, EPI_SPLIT, GROUP_SIZE_M, 0, MAINLOOP)),
        (_exercise_consumer, (c_desc, a_bufs, b_bufs, c_bufs, ready_bars, empty_bars, c_ptr, M, N, K, stride_cm,
                              WG_M, BLOCK_N, BLOCK_K, STAGES, EPI_SPLIT, GROUP_SIZE_M, 1, MAINLOOP)),
        (ws._producer, (a_desc, b_desc, a_bufs, b_bufs, ready_bars, empty_bars, M, N, K,
                        "cooperative", WG_M, BLOCK_N, BLOCK_K, STAGES, False, False, GROUP_SIZE_M)),
    ], [4, 1], [ws.CONSUMER_REGS, ws.PRODUCER_REGS])


def exercise_args(a, b, c, mainloop) -> dict:
    """exercise_kernel's arguments by name for row-major a [M, K], b [K, N] and C (as matmul_ws builds them)."""
    args = ws._kernel_args(a, b, c, None, None, CONFIG, activation=None)
    keep = ("a_desc", "b_desc", "c_desc", "c_ptr", "M", "N", "K", "stride_cm", "WG_M", "BLOCK_N", "BLOCK_K",
            "STAGES", "EPI_SPLIT", "GROUP_SIZE_M")
    return {**{k: args[k] for k in keep}, "MAINLOOP": mainloop}


def run_exercise(mainloop, a, b, num_programs: int = 3):
    """C = a @ b with the learner's main loop (Hopper GPU; few programs, so each walks several
    tiles and the ring wraps across them)."""
    import torch

    M, N = a.shape[0], b.shape[1]
    c = torch.full((M, N), float("nan"), device=a.device, dtype=a.dtype)  # an element never written shows
    tiles = ws.cdiv(M, 2 * CONFIG["WG_M"]) * ws.cdiv(N, CONFIG["BLOCK_N"])
    exercise_kernel[(min(tiles, num_programs),)](**exercise_args(a, b, c, mainloop), num_warps=4, maxnreg=ws.MAXNREG)
    return c


# the learner's function is written to a module of its own (the compile worker and the GPU child
# process import it from there); names a main loop needs are imported above it
_PRELUDE = """from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait
from gemm_kernels.kernels.matmul_ws import _acc_layout as acc_layout

"""


def _answer_module(answer) -> tuple[str, str, str]:
    """(directory, module name, function name) of a module holding the learner's @gluon.jit function."""
    src = getattr(answer, "src", None)
    if src is None:
        fn = getattr(answer, "fn", answer)
        src = inspect.getsource(fn)
    src = textwrap.dedent(src)
    if not src.lstrip().startswith("@"):
        src = "@gluon.jit\n" + src
    name = getattr(answer, "__name__", None) or getattr(getattr(answer, "fn", None), "__name__", "consumer_mainloop")
    text = _PRELUDE + src + "\n"
    module = "ws_exercise_" + hashlib.sha1(text.encode()).hexdigest()[:12]
    directory = Path(tempfile.gettempdir()) / "gemm_kernels_exercises"
    directory.mkdir(exist_ok=True)
    (directory / f"{module}.py").write_text(text)
    return str(directory), module, name


def _compile_request(directory: str, module: str, name: str) -> dict:
    """The compile view's request for exercise_kernel with the learner's loop (sm_90)."""
    import torch

    from ..compile_view import _request

    size = 512
    a, b, c = (torch.zeros(size, size, dtype=torch.float16) for _ in range(3))
    args = exercise_args(a, b, c, {"jit_function": {"path": directory, "module": module, "name": name}})
    return _request(exercise_kernel, args, "sm_90", None, 4, None, f"exercise_kernel[{name}]", {},
                    {"maxnreg": ws.MAXNREG})


def _compile_structure(directory: str, module: str, name: str) -> dict:
    """Compile exercise_kernel with the learner's loop for sm_90 (compile view worker); counts."""
    from ..compile_view import compile_many

    ptx = compile_many([_compile_request(directory, module, name)])[0].ptx
    return {"wgmma": ptx.count("wgmma.mma_async.sync.aligned"), "waits": ptx.count("mbarrier.try_wait"),
            "expect_tx": ptx.count("mbarrier.arrive.expect_tx"),
            "arrives": ptx.count("mbarrier.arrive") - ptx.count("mbarrier.arrive.expect_tx")}


def _python_function(answer):
    """The Python function behind the learner's @gluon.jit function (or the function itself)."""
    obj = answer
    for _ in range(8):
        if isinstance(obj, types.FunctionType):
            return obj
        obj = getattr(obj, "fn", None)
    return None


def _def_line(fn) -> int | None:
    """The line of ``def`` of ``fn`` in its file (below its decorators)."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    for i, line in enumerate(lines):
        if line.lstrip().startswith("def "):
            return start + i
    return None


def _compile_reason(exc: BaseException, fn) -> str:
    """The compiler's reason, and the learner's line when the error is in their function."""
    causes = [c.strip() for c in str(exc).split("caused by ")]
    reason = next((c.splitlines()[0] for c in reversed(causes) if c.strip()), str(exc))
    first = _def_line(fn) if fn is not None else None
    if first is None:
        return reason
    for cause in reversed(causes):  # the innermost snippet that is the learner's function
        m = re.match(r"CompilationError: at (\d+):(\d+):\n(.*)", cause, re.S)
        if not m:
            continue
        line = first + int(m.group(1)) - 1
        code = linecache.getline(fn.__code__.co_filename, line).strip()
        if code and code in m.group(3):
            return f"{reason}, at line {line} of your {fn.__name__}: {code}"
        break
    return reason


_GPU_CHILD = """
import json, sys, importlib
sys.path.insert(0, sys.argv[1])
import torch
from gemm_kernels.lab.exercises import warp_specialization as ex
from gemm_kernels.kernels.tma import tma_aligned
answer = getattr(importlib.import_module(sys.argv[2]), sys.argv[3])
out = []
for M, N, K in [(512, 768, 640), (300, 520, 200), (128, 256, 64), (1000, 1000, 1000)]:
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = tma_aligned(torch.randn(M, K, device="cuda", generator=g).half())
    b = tma_aligned(torch.randn(K, N, device="cuda", generator=g).half())
    c = ex.run_exercise(answer, a, b)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    err = float((c.double() - ref).norm() / ref.norm()) if torch.isfinite(c).all() else float("inf")
    out.append([M, N, K, err])
print("RESULT" + json.dumps(out))
"""
GPU_TIME_LIMIT_S = 120


def _run_on_gpu(directory: str, module: str, name: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[3]),
                                                        os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run([sys.executable, "-c", _GPU_CHILD, directory, module, name], capture_output=True,
                              text=True, timeout=GPU_TIME_LIMIT_S, env=env)
    except subprocess.TimeoutExpired:
        return [f"on the GPU the kernel did not finish within {GPU_TIME_LIMIT_S} s (stopped): a barrier wait "
                "never passed. Check the ready phase ((q // STAGES) & 1) and that every slot is given back "
                "on empty_bars once per lap"]
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    if line is None:
        return [f"on the GPU the kernel failed: {(proc.stderr.strip().splitlines() or ['(no message)'])[-1][:300]}"]
    problems = []
    for M, N, K, err in json.loads(line[len("RESULT"):]):
        if not err <= 1e-2:
            problems.append(f"M={M}, N={N}, K={K}: relative error {err:.3g} (> 1e-2): a wgmma read a slot the "
                            "TMA had not filled, or one the producer was refilling (an arrive too early?)")
    return problems


# ----------------------------------------------------------------------------- tracing the learner's loop
# The learner's function body runs as plain Python with stand-ins for what it calls: runtime
# integers (q0, k_tiles, the loop index) that compute as the compiled kernel does, the four rings
# (a_bufs, b_bufs, ready_bars, empty_bars) whose .index(i) says which buffer, and mbarrier /
# warpgroup_mma calls that record a RingOp each.  Constexprs (PART, STAGES, ...) are plain ints,
# as Triton folds them.  Whatever the stand-ins do not model stops the trace (_Untraceable).

#: a simulated program: (tiles, K blocks per tile): a ring that wraps inside a tile, tiles longer
#: than the ring (three laps), one K block per tile
SIM_SCENARIOS = ((3, 3), (2, 6), (5, 1))
#: operations one traced call of the loop may do (a loop of 6 K blocks does about a hundred)
TRACE_BUDGET = 20_000


class _Untraceable(Exception):
    """The loop does something the trace does not model (the check falls back to the structure)."""


class _TraceProblem(Exception):
    """A mistake seen while tracing (its message names it, at the learner's line)."""


class _Runaway(Exception):
    """The traced loop ran past TRACE_BUDGET operations (its message names the loop)."""


def _c_div(a: int, b: int) -> int:
    if b == 0:
        raise _Untraceable("an integer division by zero")
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _num(x) -> int:
    if isinstance(x, _RInt):
        return x.v
    if isinstance(x, (bool, int)):
        return int(x)
    raise _Untraceable(f"integer arithmetic with a {type(x).__name__}")


def _truth(x) -> bool:
    if isinstance(x, (bool, int, _RInt)):
        return bool(_num(x))
    raise _Untraceable(f"a condition that is a {type(x).__name__}")


class _RInt:
    """A runtime integer of the traced loop: Triton's arithmetic, // and % rounding toward zero as
    in the compiled kernel (-1 % 4 is -1 there, 3 in Python)."""

    __slots__ = ("v", "tracer")

    def __init__(self, v: int, tracer):
        self.v, self.tracer = int(v), tracer
        tracer.tick()

    def __repr__(self):
        return str(self.v)

    def __index__(self):
        return self.v

    __int__ = __index__

    def __bool__(self):
        return self.v != 0

    def __hash__(self):
        return hash(self.v)

    def __eq__(self, other):
        return self.v == _num(other)

    def __ne__(self, other):
        return self.v != _num(other)

    def __lt__(self, other):
        return self.v < _num(other)

    def __le__(self, other):
        return self.v <= _num(other)

    def __gt__(self, other):
        return self.v > _num(other)

    def __ge__(self, other):
        return self.v >= _num(other)

    def __neg__(self):
        return _RInt(-self.v, self.tracer)

    def __pos__(self):
        return self

    def __invert__(self):
        return _RInt(~self.v, self.tracer)

    def __truediv__(self, other):
        raise _Untraceable("'/' on integers (a float in a kernel)")

    __rtruediv__ = __truediv__

    def to(self, *args, **kwargs):
        return self


_INT_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "floordiv": _c_div, "mod": lambda a, b: a - b * _c_div(a, b), "and": lambda a, b: a & b,
            "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b, "lshift": lambda a, b: a << b,
            "rshift": lambda a, b: a >> b}
for _name, _op in _INT_OPS.items():
    setattr(_RInt, f"__{_name}__", lambda self, other, op=_op: _RInt(op(self.v, _num(other)), self.tracer))
    setattr(_RInt, f"__r{_name}__", lambda self, other, op=_op: _RInt(op(_num(other), self.v), self.tracer))


class _Dtype:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"gl.{self.name}"


_LAYOUT = object()


class _Ring:
    """a_bufs, b_bufs, ready_bars or empty_bars: ``.index(i)`` names one buffer or barrier."""

    NAMES = {"a": "a_bufs", "b": "b_bufs", "ready": "ready_bars", "empty": "empty_bars"}

    def __init__(self, kind: str, size: int):
        self.kind, self.size, self.name = kind, size, self.NAMES[kind]

    def index(self, i):
        return _View(self, _num(i))

    def __getattr__(self, name):
        raise _Untraceable(f"{self.NAMES[self.__dict__['kind']]}.{name}")


class _View:
    """One buffer or barrier of a ring (``permuted``: a transposed view)."""

    def __init__(self, ring: _Ring, index: int, permuted: bool = False):
        self.ring, self.index, self.permuted = ring, index, permuted

    def permute(self, order):
        if [_num(o) for o in order] == [1, 0]:
            return _View(self.ring, self.index, not self.permuted)
        raise _Untraceable(f"{self.ring.name}.index(...).permute({order})")

    def __getattr__(self, name):
        raise _Untraceable(f"{self.__dict__['ring'].name}.index(...).{name}")


class _Acc:
    """The accumulator: which wgmmas of this call it sums (their numbers), its dtype, its start."""

    def __init__(self, ids: tuple, dtype, start=0.0):
        self.ids, self.dtype, self.start = ids, dtype, start

    def to(self, dtype, *args, **kwargs):
        return _Acc(self.ids, dtype, self.start)

    def __getattr__(self, name):
        raise _Untraceable(f"acc.{name}")


def _no_op(*args, **kwargs):
    return None


class _Gl:
    """``gl`` as the traced loop sees it: what a main loop calls; anything else is not modelled."""

    float32, float16, bfloat16, float64 = _Dtype("float32"), _Dtype("float16"), _Dtype("bfloat16"), _Dtype("float64")
    int1, int8, int16, int32, int64 = (_Dtype(n) for n in ("int1", "int8", "int16", "int32", "int64"))
    static_assert = static_print = device_print = device_assert = assume = staticmethod(_no_op)

    @staticmethod
    def constexpr(value=None):
        return value

    @staticmethod
    def zeros(shape, dtype, layout=None):
        return _Acc((), dtype)

    @staticmethod
    def full(shape, value, dtype, layout=None):
        return _Acc((), dtype, value)

    @staticmethod
    def zeros_like(x, *args, **kwargs):
        return _Acc((), getattr(x, "dtype", None) if isinstance(x, _Acc) else None)

    @staticmethod
    def static_range(*args):
        if not all(isinstance(a, int) for a in args):
            raise _Untraceable("gl.static_range of a runtime value")
        return range(*args)

    @staticmethod
    def where(condition, x, y):
        return x if _truth(condition) else y

    @staticmethod
    def minimum(x, y, *args, **kwargs):
        return x if x <= y else y

    @staticmethod
    def maximum(x, y, *args, **kwargs):
        return x if x >= y else y

    @staticmethod
    def cdiv(x, y):
        return (x + y - 1) // y

    @staticmethod
    def multiple_of(x, *args, **kwargs):
        return x

    max_contiguous = max_constancy = multiple_of

    @staticmethod
    def NVMMADistributedLayout(*args, **kwargs):
        return _LAYOUT

    def __getattr__(self, name):
        raise _Untraceable(f"gl.{name}")


class _Gluon:
    @staticmethod
    def jit(fn=None, **kwargs):
        return fn if fn is not None else (lambda f: f)

    constexpr_function = jit


class _MBarrier:
    def __init__(self, tracer):
        self._t = tracer

    def wait(self, bar, phase, pred=True, deps=()):
        b = self._t.barrier(bar, "mbarrier.wait")
        if _truth(pred):
            self._t.record("wait", barrier=b.ring.kind, index=b.index, value=_num(phase), kblock=len(self._t.mmas))

    def arrive(self, bar, *, count=1, pred=True, from_cta=None):
        b = self._t.barrier(bar, "mbarrier.arrive")
        if _truth(pred):
            self._t.record("arrive", barrier=b.ring.kind, index=b.index, value=_num(count))

    def expect(self, *args, **kwargs):
        raise _TraceProblem(f"{self._t.where()}: a consumer does not call mbarrier.expect: the producer "
                            "announces the bytes of each slot on its ready barrier, the TMA completes it")

    def init(self, *args, **kwargs):
        raise _TraceProblem(f"{self._t.where()}: the barriers are set up by exercise_kernel before the "
                            "partitions start; initialising one again in the loop resets its phase")

    invalidate = init

    def __getattr__(self, name):
        raise _Untraceable(f"mbarrier.{name}")


class _Tracer:
    """One call of the learner's loop: its RingOps, its wgmmas' operands, what it returned."""

    def __init__(self, fn, part: int, tile: int, k_tiles: int):
        self.fn, self.code = fn, fn.__code__
        self.part, self.tile, self.k_tiles, self.q0 = part, tile, k_tiles, tile * k_tiles
        self.ops: list[wt.RingOp] = []
        self.mmas: list[tuple] = []  # (A view, B view, RingOp)
        self.steps = 0
        self.value = None

    # -- where in the learner's code
    def lineno(self) -> int | None:
        f = sys._getframe(1)
        while f is not None and f.f_code is not self.code:
            f = f.f_back
        return f.f_lineno if f is not None else None

    def where(self, lineno: int | None = None) -> str:
        lineno = self.lineno() if lineno is None else lineno
        if lineno is None:
            return "your loop"
        code = linecache.getline(self.code.co_filename, lineno).strip()
        return f"line {lineno}" + (f": {code}" if code else "")

    def tick(self) -> None:
        self.steps += 1
        if self.steps > TRACE_BUDGET:
            raise _Runaway(self.lineno())

    def record(self, kind: str, **fields) -> wt.RingOp:
        fields.setdefault("kblock", len(self.mmas) - 1)
        op = wt.RingOp(kind, tile=self.tile, where=fields.pop("where", None) or self.where(), **fields)
        self.ops.append(op)
        self.tick()
        return op

    def barrier(self, bar, what: str) -> _View:
        if isinstance(bar, _View) and bar.ring.kind in ("ready", "empty"):
            return bar
        if isinstance(bar, _View):
            raise _TraceProblem(f"{self.where()}: {what} on {bar.ring.name}.index({bar.index}), a buffer, not a "
                                "barrier (ready_bars and empty_bars hold the barriers)")
        raise _Untraceable(f"{what} on a {type(bar).__name__}")

    # -- the stand-ins the loop calls
    def range(self, *args, **kwargs):
        if not 1 <= len(args) <= 3:
            raise _Untraceable("range() with these arguments")
        start, stop, step = (0, _num(args[0]), 1) if len(args) == 1 else (
            _num(args[0]), _num(args[1]), _num(args[2]) if len(args) == 3 else 1)
        if step == 0:
            raise _Untraceable("range() with step 0")
        return self._iterate(start, stop, step)

    def _iterate(self, start: int, stop: int, step: int):
        i = start
        while (i < stop) if step > 0 else (i > stop):
            yield _RInt(i, self)
            i += step

    def warpgroup_mma(self, a, b, acc, *, use_acc=True, precision=None, max_num_imprecise_acc=None,
                      is_async=False):
        if not (isinstance(a, _View) and isinstance(b, _View)):
            raise _Untraceable("warpgroup_mma on operands that are not .index(...) of a_bufs / b_bufs")
        if not isinstance(acc, _Acc):
            raise _Untraceable(f"warpgroup_mma with an accumulator that is a {type(acc).__name__}")
        use = _truth(use_acc)
        number = len(self.mmas)
        op = self.record("mma", is_async=_truth(is_async), kblock=number)
        self.mmas.append((a, b, op))
        return _Acc((acc.ids if use else ()) + (number,), acc.dtype, acc.start if use else 0.0)

    def warpgroup_mma_wait(self, num_outstanding=0, deps=None):
        self.record("mma_wait", value=_num(num_outstanding))
        deps = tuple(deps or ())
        return deps[0] if len(deps) == 1 else deps

    def namespace(self) -> dict:
        return {"__builtins__": builtins, "__name__": "consumer_mainloop_trace", "range": self.range,
                "print": _no_op, "gluon": _Gluon, "gl": _Gl(), "mbarrier": _MBarrier(self),
                "warpgroup_mma": self.warpgroup_mma, "warpgroup_mma_wait": self.warpgroup_mma_wait,
                "acc_layout": lambda *args, **kwargs: _LAYOUT}


def _return_line(fn) -> int | None:
    """The line of the last ``return`` of ``fn`` (for the messages about what the loop hands on)."""
    try:
        lines, start = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    returns = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Return)]
    return start + max(returns) - 1 if returns else None


def _loop_at(fn, lineno: int | None) -> int | None:
    """The innermost ``for``/``while`` of ``fn`` holding ``lineno`` (its header's line)."""
    try:
        lines, start = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    loops = [node for node in ast.walk(tree) if isinstance(node, (ast.For, ast.While))
             and lineno is not None and node.lineno <= lineno - start + 1 <= (node.end_lineno or node.lineno)]
    return start + max(node.lineno for node in loops) - 1 if loops else None


def _trace_call(fn, part: int, tile: int, k_tiles: int) -> _Tracer:
    """Run the learner's loop once, as consumer ``part`` for tile ``tile`` (q0 = tile * k_tiles)."""
    tracer = _Tracer(fn, part, tile, k_tiles)
    body = types.FunctionType(fn.__code__, tracer.namespace(), fn.__name__, fn.__defaults__, fn.__closure__)
    body.__kwdefaults__ = fn.__kwdefaults__
    stages, a_parts = CONFIG["STAGES"], 2
    args = (_Ring("a", stages * a_parts), _Ring("b", stages), _Ring("ready", stages), _Ring("empty", stages),
            _RInt(tracer.q0, tracer), _RInt(k_tiles, tracer), part, a_parts, CONFIG["WG_M"], CONFIG["BLOCK_N"], stages)
    try:
        tracer.value = body(*args)
    except (_Untraceable, _TraceProblem):
        raise
    except _Runaway as exc:
        lineno = exc.args[0]
        loop = _loop_at(fn, lineno)
        raise _TraceProblem(
            f"your loop never ended: {tracer.where(loop or lineno)} (traced as consumer {part} with q0 = "
            f"{tracer.q0} and k_tiles = {k_tiles}, it was still running after {TRACE_BUDGET:,} steps, at "
            f"{tracer.where(lineno)}; in the kernel the consumer would never finish). Does every pass "
            "through the loop move it towards its end?") from None
    except Exception as exc:  # noqa: BLE001  (anything else: a call or a value the stand-ins do not model)
        if is_stub_error(exc):
            raise _NotAttempted from None
        frames = [f for f in inspect.getinnerframes(exc.__traceback__) if f.frame.f_code is fn.__code__]
        at = f" at {tracer.where(frames[-1].lineno)}" if frames else ""
        raise _Untraceable(f"{type(exc).__name__}: {exc}{at}") from None
    tracer.record("return", where=tracer.where(_return_line(fn)))
    return tracer


# ----------------------------------------------------------------------------- what the trace says
STEP_OPERANDS = "step 2 of 4 (what each wgmma reads and adds up)"
STEP_RING = "step 3 of 4 (the ring, played against matmul_ws' producer)"
STEP_IN_FLIGHT = "step 4 of 4 (keep one wgmma in flight)"

#: a line of help after each kind of ring fault (the fault's own message says what and where)
RING_NUDGES = {
    "stale read": "a consumer waits on the ready barrier of the slot it reads, for the parity of the lap, before "
                  "its wgmma reads the slot",
    "early refill": "an arrive on empty[slot] says 'done with this slot': only once the wgmma that read it has been "
                    "retired by a warpgroup_mma_wait, and once per consumer per lap",
    "deadlock": "the producer refills a slot once both consumers arrived on its empty barrier; a consumer's "
                "wait on ready[slot] passes for the parity of its lap",
    "barrier": "each kind has STAGES barriers, one per slot: index them by the slot, 0 to STAGES - 1",
    "parity": "the parity of lap L is L & 1: a barrier remembers one bit of its phase",
    "in flight": "after the loop: warpgroup_mma_wait(0, deps=(acc,)), then give back the last slot",
}


def _operand_problem(t: _Tracer, i: int, a: _View, b: _View, op: wt.RingOp) -> str | None:
    """What is wrong with the operands of wgmma ``i`` of one traced call (None: nothing)."""
    stages, a_parts = CONFIG["STAGES"], 2
    q = t.q0 + i
    s, k_slot = q % stages, i % stages
    want_a, want_b = s * a_parts + t.part, s
    at = (f"consumer {t.part} (PART = {t.part}), tile {t.tile}, K block {i} (ring position q = {q}, slot {s}): "
          f"the wgmma ({op.where})")
    if a.ring.kind != "a" or b.ring.kind != "b":
        return f"{at} multiplies {a.ring.name} by {b.ring.name}: A comes from a_bufs, B from b_bufs"
    if a.permuted or b.permuted:
        return (f"{at} permutes its {'A' if a.permuted else 'B'} operand: the slots hold A as [WG_M, BLOCK_K] "
                "and B as [BLOCK_K, BLOCK_N], as wgmma reads them")
    if (a.index, b.index) == (want_a, want_b):
        return None
    if s != k_slot and a.index == k_slot * a_parts + t.part and b.index == k_slot:
        return (f"{at} reads slot {k_slot}, the slot of kk = {i}: the ring position counts K blocks across tiles, "
                "q = q0 + kk, and its slot is q % STAGES")
    if a.index != want_a:
        if not 0 <= a.index < stages * a_parts:
            why = f"a_bufs holds STAGES * A_PARTS = {stages * a_parts} buffers, 0 to {stages * a_parts - 1}"
        elif a.index // a_parts == s:
            why = (f"that is the other consumer's half of slot {s} (PART {a.index % a_parts}); consumer {t.part} "
                   "multiplies its own rows, a_bufs.index(slot * A_PARTS + PART)")
        elif a.index == s:
            why = (f"slot {s}'s A is two buffers, a_bufs.index({s * a_parts}) and a_bufs.index({s * a_parts + 1}) "
                   "(its A_PARTS = 2 halves of WG_M rows): a_bufs.index(slot * A_PARTS + PART)")
        else:
            why = (f"that holds slot {a.index // a_parts}'s A, but ring position {q} is in slot {s}: "
                   "a_bufs.index(slot * A_PARTS + PART)")
        return f"{at} reads a_bufs.index({a.index}), expected a_bufs.index({want_a}): {why}"
    if not 0 <= b.index < stages:
        why = f"b_bufs holds STAGES = {stages} buffers, one per slot"
    else:
        why = f"ring position {q} is in slot {s}, and each slot has one B: b_bufs.index(slot)"
    return f"{at} reads b_bufs.index({b.index}), expected b_bufs.index({want_b}): {why}"


def _accumulator_problem(t: _Tracer) -> str | None:
    at = f"consumer {t.part}, tile {t.tile} (k_tiles = {t.k_tiles}): your loop returns"
    value = t.value
    if not isinstance(value, _Acc):
        return f"{at} {shown(value)}, not the accumulator its wgmmas summed"
    if value.dtype is not None and getattr(value.dtype, "name", "") != "float32":
        return (f"{at} a {value.dtype} accumulator: the exercise returns the fp32 accumulator (gl.zeros(..., "
                "gl.float32, ...)); fp16 sums of k_tiles products lose digits")
    if value.start not in (0, 0.0):
        return f"{at} a sum that starts from {shown(value.start)}, not from zeros"
    want = tuple(range(len(t.mmas)))
    if value.ids != want:
        blocks = ", ".join(str(i) for i in value.ids) or "none"
        return (f"{at} an accumulator that sums the wgmmas of K block(s) {blocks} of 0 to {t.k_tiles - 1}: give "
                "each warpgroup_mma the accumulator the previous one returned (acc = warpgroup_mma(a, b, acc, "
                "...), use_acc left True)")
    return None


def _operand_problems(calls) -> list[str]:
    problems: list[str] = []
    for per_consumer in calls:
        for t in per_consumer:
            if len(t.mmas) != t.k_tiles:
                problems.append(f"consumer {t.part}, tile {t.tile} (q0 = {t.q0}, k_tiles = {t.k_tiles}): your loop "
                                f"issues {len(t.mmas)} wgmma(s), expected {t.k_tiles}: one warpgroup_mma per K block")
                continue
            found = next((m for m in (_operand_problem(t, i, *mma) for i, mma in enumerate(t.mmas)) if m), None)
            found = found or _accumulator_problem(t)
            if found:
                problems.append(found)
    return problems


def _in_flight_problem(traces) -> str | None:
    """The exercise's rule: an asynchronous wgmma, the previous one still in flight at each K block's wait."""
    for calls in traces.values():
        for t in calls[0]:
            for _, _, op in t.mmas:
                if not op.is_async:
                    return (f"warpgroup_mma(..., is_async=False) ({op.where}) finishes every wgmma before the loop "
                            "goes on, so the tensor cores idle while the next K block is waited for. The ring is "
                            "safe, but the exercise issues the wgmma asynchronously: is_async=True, then "
                            "warpgroup_mma_wait(1, deps=(acc,)) so that only the newest is in flight and the "
                            "previous slot can be given back, and warpgroup_mma_wait(0, ...) after the loop")
    for (_, k_tiles), calls in traces.items():
        if k_tiles < 2:
            continue
        for t in calls[0]:
            in_flight, last_wait = 0, None
            for op in t.ops:
                if op.kind == "mma":
                    in_flight += 1
                elif op.kind == "mma_wait":
                    in_flight, last_wait = min(in_flight, op.value), op
                elif op.kind == "wait" and op.barrier == "ready" and 1 <= op.kblock < k_tiles and in_flight == 0:
                    where = f" ({last_wait.where})" if last_wait is not None else ""
                    return (f"every wgmma has finished before the next K block's wait: warpgroup_mma_wait"
                            f"({last_wait.value if last_wait else 0}){where} lets none run on. The ring is safe, but "
                            "the exercise keeps one in flight: warpgroup_mma_wait(1, deps=(acc,)), then give back "
                            "the previous slot (its wgmma is the one that has finished)")
    return None


def _protocol_problems(fn) -> list[str]:
    """Steps 2 to 4 on the traced loop (raises _Untraceable when the trace cannot follow it)."""
    traces = {}
    for tiles, k_tiles in SIM_SCENARIOS:
        try:
            calls = [[_trace_call(fn, part, t, k_tiles) for t in range(tiles)] for part in range(2)]
        except _TraceProblem as exc:
            return [str(exc) if str(exc).startswith("your loop never ended") else f"{STEP_RING}: {exc}"]
        problems = _operand_problems(calls)
        if problems:
            more = f" (and {len(problems) - 1} more call(s) of your loop like it)" if len(problems) > 1 else ""
            return [f"{STEP_OPERANDS}: {problems[0]}{more}",
                    "each K block's wgmma reads its slot's half of A (a_bufs.index(slot * A_PARTS + PART)) and its "
                    "B (b_bufs.index(slot)), and adds to the accumulator the previous one returned"]
        traces[(tiles, k_tiles)] = calls
    faults = []  # every schedule of every program: the most telling fault is reported
    for n, ((tiles, k_tiles), calls) in enumerate(traces.items()):
        consumers = [[op for t in per_consumer for op in t.ops] for per_consumer in calls]
        for m, schedule in enumerate(wt.RING_SCHEDULES):
            fault = wt.simulate_ring(consumers, tiles=tiles, k_tiles=k_tiles, stages=CONFIG["STAGES"],
                                     schedule=schedule)
            if fault is not None:
                faults.append((wt.RING_FAULTS.index(fault.kind), n, m, fault))
    if faults:
        fault = min(faults, key=lambda f: f[:3])[3]
        return [f"{STEP_RING}: {fault.message}", RING_NUDGES[fault.kind]]
    rule = _in_flight_problem(traces)
    return [f"{STEP_IN_FLIGHT}: {rule}"] if rule else []


@exercise("consumer_mainloop", hands=(ws._acc_layout,), hints=Hints(
    nudge="a consumer must wait before it reads a slot, and give the slot back once the wgmma that read it is done",
    approach="for each K block: the slot and the lap's phase from the ring position; wait on the slot's ready "
             "barrier; issue the async wgmma; wait until at most one wgmma is in flight, then arrive on the "
             "previous slot's empty barrier; after the loop, wait for the last wgmma and give its slot back",
    solution="s = q % STAGES; mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1); acc = warpgroup_mma(..., "
             "is_async=True); acc = warpgroup_mma_wait(1, deps=(acc,)); mbarrier.arrive(empty_bars.index("
             "previous slot), pred=kk > 0); after the loop: warpgroup_mma_wait(0, deps=(acc,)) and arrive for "
             "the last slot"),
          praise="correct: it compiles for sm_90, and played against matmul_ws' producer its ring never reads "
                 "stale data, refills a slot early or waits forever (on a Hopper GPU it also computes C right on "
                 "ragged shapes: gpu_note() says which ran here)")
def check_consumer_mainloop(consumer_mainloop):
    code = _package_function(consumer_mainloop)
    if code is not None:
        return [_not_yours(_code_name(code), "Write the consumer's main loop yourself, in the cell of the exercise.")]
    fn = _python_function(consumer_mainloop)
    if fn is None or fn.__name__ == "<lambda>":
        return ["expected your @gluon.jit function consumer_mainloop, written with def, got "
                f"{shown(consumer_mainloop)}"]
    try:
        directory, module, name = _answer_module(consumer_mainloop)
    except (OSError, TypeError) as exc:
        raise AnswerRaised("reading your function's source", exc) from None
    try:
        counts = _compile_structure(directory, module, name)
    except RuntimeError as exc:
        if is_stub_error(exc):
            raise _NotAttempted from None
        return [f"step 1 of 4 (compile for sm_90): {_compile_reason(exc, fn)[:500]}",
                "the loop gets (a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART, A_PARTS, WG_M, "
                "BLOCK_N, STAGES): see the stub's signature"]
    try:
        problems = _protocol_problems(fn)
    except _Untraceable as exc:
        return _structure_only(counts, str(exc), directory, module, name)
    if problems:
        return problems
    if _hopper():
        return _run_on_gpu(directory, module, name)
    return []


check_consumer_mainloop.gpu_branch = lambda answer: _run_on_gpu(*_answer_module(answer))


def _structure_only(counts: dict, why: str, directory: str, module: str, name: str):
    """The verdict when the trace cannot follow the loop: the compiled PTX's structure, never "correct"."""
    expected_wgmma = 2 * (CONFIG["WG_M"] // 64) * (CONFIG["BLOCK_K"] // 16)
    if counts["waits"] < 2:  # the producer's empty wait is one; the consumers' ready wait the other
        return [f"the kernel has {counts['waits']} barrier wait(s); the consumers never wait on ready_bars",
                "without that wait the wgmma reads shared memory the TMA has not filled yet"]
    if counts["arrives"] < 1:
        return ["the consumers never arrive on empty_bars, so the producer waits forever once the ring is full",
                "a slot may be handed back only once the wgmma that read it has finished"]
    if counts["wgmma"] != expected_wgmma:
        return [f"the kernel has {counts['wgmma']} wgmma instructions, expected {expected_wgmma} "
                "(one warpgroup_mma per K block per consumer)"]
    if _hopper():
        return _run_on_gpu(directory, module, name)
    return CheckResult("consumer_mainloop", STRUCTURE_ONLY,
                       "structure only: it compiles for sm_90 with waits, arrives and wgmmas, but the check cannot "
                       "play your loop's ring on this machine, so it cannot say the loop is right",
                       [f"what the trace does not model: {why}",
                        "write the loop with the exercise's calls (.index, mbarrier.wait / arrive, warpgroup_mma, "
                        "warpgroup_mma_wait, integer arithmetic) for the full check, or run it on a Hopper GPU, "
                        "where it also runs the kernel"])


def _hopper() -> bool:
    return runtime.supports_wgmma()


def gpu_note() -> str:
    """What the consumer_mainloop check does on this machine (for the notebook to print)."""
    return ("this machine has a Hopper GPU: the check compiles your kernel, plays its ring against the producer, "
            f"and also runs your kernel on four shapes (child process, {GPU_TIME_LIMIT_S} s limit)") if _hopper() else (
        "no Hopper GPU here: the check compiles your kernel for sm_90 and plays its ring (your waits, arrives and "
        "wgmmas) against matmul_ws' producer on the CPU; on an H100 it also runs it")
