"""Checks for notebook 08 (warp specialization): the ring's slot and barrier phases, and a
consumer warpgroup's main loop written in Gluon.

``check_ring_phases(slot_and_phases)``: a plain Python function ``(q, stages) -> (slot,
ready_phase, empty_phase)`` for ring position ``q``, checked step by step (slot, then the
consumer's phase, then the producer's), each step with its own hint.

``check_consumer_mainloop(consumer_mainloop)``: the learner's ``@gluon.jit`` main loop, plugged
into :func:`exercise_kernel` (a cooperative warp-specialized GEMM: ``matmul_ws``'s producer and
epilogue, the learner's loop).  On every machine it is compiled for sm_90 by the compile view
(in a worker process) and its structure checked step by step: it compiles, the consumers wait
on the ready barriers, they arrive on the empty ones.  On a Hopper GPU it then runs, in a child
process with a time limit (a wrong phase makes a wait that never passes: the child is stopped,
the notebook is not), on ragged shapes whose rings wrap many times, against torch.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from ... import runtime
from ...kernels import matmul_ws as ws
from ._core import AnswerRaised, Hints, _NotAttempted, call, exercise, is_stub_error, read_items, shown

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
    solution="lap = q // stages; return q % stages, lap & 1, (lap & 1) ^ 1"))
def check_ring_phases(slot_and_phases):
    for step, index in (("slot", 0), ("ready", 1), ("empty", 2)):  # stepwise: the first wrong step only
        problems = []
        for q, stages in PHASE_CASES:
            answer = call(slot_and_phases, q, stages)
            try:
                got = tuple(int(v) for v in read_items(answer, 3))  # an endless answer: 4 items read, wrong
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


def _compile_structure(directory: str, module: str, name: str) -> dict:
    """Compile exercise_kernel with the learner's loop for sm_90 (compile view worker); counts."""
    import torch

    from ..compile_view import compile_for

    size = 512
    a, b, c = (torch.zeros(size, size, dtype=torch.float16) for _ in range(3))
    args = exercise_args(a, b, c, {"jit_function": {"path": directory, "module": module, "name": name}})
    view = compile_for(exercise_kernel, args, target="sm_90", num_warps=4, options={"maxnreg": ws.MAXNREG},
                       name=f"exercise_kernel[{name}]")
    ptx = view.ptx
    return {"wgmma": ptx.count("wgmma.mma_async.sync.aligned"), "waits": ptx.count("mbarrier.try_wait"),
            "expect_tx": ptx.count("mbarrier.arrive.expect_tx"),
            "arrives": ptx.count("mbarrier.arrive") - ptx.count("mbarrier.arrive.expect_tx")}


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


@exercise("consumer_mainloop", hints=Hints(
    nudge="a consumer must wait before it reads a slot, and give the slot back once the wgmma that read it is done",
    approach="for each K block: the slot and the lap's phase from the ring position; wait on the slot's ready "
             "barrier; issue the async wgmma; wait until at most one wgmma is in flight, then arrive on the "
             "previous slot's empty barrier; after the loop, wait for the last wgmma and give its slot back",
    solution="s = q % STAGES; mbarrier.wait(ready_bars.index(s), (q // STAGES) & 1); acc = warpgroup_mma(..., "
             "is_async=True); acc = warpgroup_mma_wait(1, deps=(acc,)); mbarrier.arrive(empty_bars.index("
             "previous slot), pred=kk > 0); after the loop: warpgroup_mma_wait(0, deps=(acc,)) and arrive for "
             "the last slot"),
          praise="correct: it compiles for sm_90 with the waits and arrives in place (and, on a Hopper GPU, "
                 "computes C right on ragged shapes: gpu_note() says which ran here)")
def check_consumer_mainloop(consumer_mainloop):
    try:
        directory, module, name = _answer_module(consumer_mainloop)
    except (OSError, TypeError) as exc:
        raise AnswerRaised("reading your function's source", exc) from None
    try:
        counts = _compile_structure(directory, module, name)
    except RuntimeError as exc:
        if is_stub_error(exc):
            raise _NotAttempted from None
        causes = [c.strip() for c in str(exc).split("caused by ")]
        reason = next((c.splitlines()[0] for c in reversed(causes) if c.strip()), str(exc))
        return [f"step 1 of 3 (compile for sm_90): {reason[:400]}",
                "the loop gets (a_bufs, b_bufs, ready_bars, empty_bars, q0, k_tiles, PART, A_PARTS, WG_M, "
                "BLOCK_N, STAGES): see the stub's signature"]
    expected_wgmma = 2 * (CONFIG["WG_M"] // 64) * (CONFIG["BLOCK_K"] // 16)
    if counts["waits"] < 2:  # the producer's empty wait is one; the consumers' ready wait the other
        return [f"step 2 of 3 (wait for the data): the kernel has {counts['waits']} barrier wait(s); the "
                "consumers never wait on ready_bars",
                "without that wait the wgmma reads shared memory the TMA has not filled yet"]
    if counts["arrives"] < 1:
        return ["step 3 of 3 (give the slot back): the consumers never arrive on empty_bars, so the producer "
                "waits forever once the ring is full",
                "a slot may be handed back only once the wgmma that read it has finished"]
    if counts["wgmma"] != expected_wgmma:
        return [f"the kernel has {counts['wgmma']} wgmma instructions, expected {expected_wgmma} "
                "(one warpgroup_mma per K block per consumer)"]
    if _hopper():
        return _run_on_gpu(directory, module, name)
    return []


def _hopper() -> bool:
    return runtime.supports_wgmma()


def gpu_note() -> str:
    """What the consumer_mainloop check does on this machine (for the notebook to print)."""
    return ("this machine has a Hopper GPU: the check also runs your kernel on four shapes (child process, "
            f"{GPU_TIME_LIMIT_S} s limit)") if _hopper() else (
        "no Hopper GPU here: the check compiles your kernel for sm_90 and checks its structure; on an H100 "
        "it also runs it")
